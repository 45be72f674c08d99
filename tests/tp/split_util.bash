# split_util.bash: what tests/tp/moe_split.sh, gptoss_split.sh and gptoss_mxfp4.sh share,
# sourced (not a test: tests/CMakeLists.txt runs tp/*.sh only): a scratch
# folder removed on exit with any server still running killed, one greedy
# completion served by one process or by `mpirun -n 2`, and the comparison
# of the two replies (same text, same tokens, top-5 logprobs within a bound).
# Not for: golden.sh's stdin and metrics runs, or the split's arithmetic (test_tp).
: "${PAGODA_BIN:?set by ctest}" "${PAGODA_SOURCE_DIR:?set by ctest}" "${MPIEXEC:?set by ctest}"
pid=

# split_tmp NAME: makes $tmp (/tmp/pagoda-NAME-XXXXXX); on exit the server
# ($pid) is killed if it still runs and $tmp removed.
split_tmp() {
    tmp=$(mktemp -d "/tmp/pagoda-$1-XXXXXX")
    trap split_cleanup EXIT
}
split_cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; sleep 1; kill -KILL "$pid" 2>/dev/null; fi
    rm -rf "$tmp"
}
fail() { echo "FAIL: $*"; [ -f "$tmp/err" ] && tail -20 "$tmp/err"; exit 1; }

# shellcheck disable=SC2034 # split_common: also for the scripts' own runs
split_common=(--config "$PAGODA_SOURCE_DIR/configs/cpu-ci.ini" --set backend.cpu.threads=1
              --set engine.kv_dtype=f32)
split_req='{"prompt": "Once upon a time", "max_tokens": 32, "temperature": 0, "ignore_eos": true, "logprobs": 5, "echo": true}'

# Optional, set by a caller before split_serve: split_env, VAR=VALUE words
# every process of a run starts with (through `env` after the launcher, so
# each rank has them whatever mpirun forwards); split_then, a function run
# as `$split_then PORT HOW LABEL` once the request is answered, while the
# server still runs (a caller's further requests; it calls fail itself).
split_env=()
split_then=

# split_serve OUT HOW MODEL LABEL [--set K=V]...: serve $split_req over HTTP
# into OUT from MODEL; HOW: "one" (one process) or "two" (mpirun -n 2, with
# tensor_parallel = 2, and rank 1 must say it holds its shard). The settings
# after LABEL go to both; LABEL names the run in a failure.
split_serve() {
    local out=$1 how=$2 model=$3 label=$4 port
    shift 4
    local launch=() tp=() envp=()
    if [ "$how" = two ]; then
        launch=("$MPIEXEC" -n 2 --oversubscribe)
        tp=(--set engine.tensor_parallel=2 --set engine.comm=mpi --set engine.log_level=info)
    fi
    [ ${#split_env[@]} -gt 0 ] && envp=(env "${split_env[@]}")
    port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
    "${launch[@]}" "${envp[@]}" "$PAGODA_BIN" "${split_common[@]}" --set engine.model="$model" \
        --set engine.frontend=http --set frontend.http.port="$port" "$@" "${tp[@]}" >"$tmp/hout" 2>"$tmp/err" &
    pid=$!
    for _ in $(seq 300); do
        curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
        kill -0 "$pid" 2>/dev/null || fail "the server exited ($how, $label)"
        sleep 0.1
    done
    curl -fs "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' -d "$split_req" \
        >"$out" || fail "completion request ($how, $label)"
    if [ -n "$split_then" ]; then "$split_then" "$port" "$how" "$label"; fi
    kill -TERM "$pid"
    for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && fail "still running 15 s after SIGTERM ($how, $label)"
    pid=
    if [ "$how" = two ]; then
        grep -q "rank 1: tensor parallel: rank 1 holds its shard" "$tmp/err" ||
            fail "rank 1 did not hold a shard ($label)"
    fi
}

# split_py ARGS...: python3 with split_compare.py importable (no bytecode
# cache written into the source tree).
split_py_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
split_py() { PYTHONPATH="$split_py_dir" PYTHONDONTWRITEBYTECODE=1 python3 "$@"; }

# split_same ONE TWO LABEL BOUND MIN_COMPARED: the two replies have the same
# text and tokens (the echoed prompt and 32 generated), every token's logprob
# and every top-5 logprob both hold within BOUND, at least MIN_COMPARED top-5
# entries were in both (one missing from the other's top 5 may only be a
# near-tie at its edge); prints one line saying so.
split_same() {
    split_py - "$@" <<'PY'
import json, sys
from split_compare import compare
a, b = (json.load(open(p))["choices"][0] for p in sys.argv[1:3])
label, bound, min_compared = sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
assert a["text"] == b["text"], (a["text"], b["text"])
la, lb = a["logprobs"], b["logprobs"]
assert la["tokens"] == lb["tokens"], (la["tokens"], lb["tokens"])
n = len(la["tokens"])
assert n >= 32, n                      # the echoed prompt and 32 generated tokens

def edge(i, tok, v, ta, tb):           # only a near-tie at the edge of the top 5 may differ
    assert min(ta.values()) == v, (i, tok, ta, tb)

worst, spread, compared = compare(a, b, n, edge)
assert compared >= min_compared, compared
assert worst <= bound, f"{label}: logprobs differ by {worst}"
print(f"{label}: 2 ranks = one process: {n} tokens, {compared} top-5 logprobs within {worst:.2g} (|logprob| up to {spread:.2f})")
PY
}
