#!/usr/bin/env bash
# gptoss_split.sh: `mpirun -n 2` on gen-model's gpt-oss-tiny (8 heads on 2
# KV heads, 8 experts top-4, attention sinks, every bias, one layer of a
# sliding window of 8 and one global) equals one process: the same greedy
# text for 32 tokens and every prompt and generated token's top-5 logprobs
# within 1e-5 (F32 weights, F32 KV), with the sinks split with the heads,
# the experts' biases with the experts, attn_output's bias added once (rank
# 0) and the window layers' KV in a window pool on each rank (its KV head);
# the same with swa_kv = full (every position in the main pool). `pagoda
# plan --tp 2` states what a rank holds. Not for: the split's rules
# (test_tp) or gpt-oss's arithmetic (test_gptoss).
set -u
: "${PAGODA_BIN:?set by ctest}" "${PAGODA_SOURCE_DIR:?set by ctest}" "${MPIEXEC:?set by ctest}"
tmp=$(mktemp -d /tmp/pagoda-tpgptoss-XXXXXX)
pid=
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; sleep 1; kill -KILL "$pid" 2>/dev/null; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
. "$(dirname "$0")/sanitizer_check.sh"
fail() { echo "FAIL: $*"; [ -f "$tmp/err" ] && tail -20 "$tmp/err"; exit 1; }

common=(--config "$PAGODA_SOURCE_DIR/configs/cpu-ci.ini" --set backend.cpu.threads=1
        --set engine.kv_dtype=f32)
req='{"prompt": "Once upon a time", "max_tokens": 32, "temperature": 0, "ignore_eos": true, "logprobs": 5, "echo": true}'

# serve one request over HTTP into $1; $2: "one" (one process) or "two"
# (mpirun -n 2, the experts split)
serve_one() {
    local out=$1 how=$2 port
    local launch=() extra=("${swa[@]}")
    if [ "$how" = two ]; then
        launch=("$MPIEXEC" -n 2 --oversubscribe)
        extra=(--set engine.tensor_parallel=2 --set engine.comm=mpi --set engine.log_level=info)
    fi
    port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
    "${launch[@]}" "$PAGODA_BIN" "${common[@]}" --set engine.model="$model" --set engine.frontend=http \
        --set frontend.http.port="$port" "${extra[@]}" >"$tmp/hout" 2>"$tmp/err" &
    pid=$!
    for _ in $(seq 300); do
        curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
        kill -0 "$pid" 2>/dev/null || fail "the server exited ($how, $what)"
        sleep 0.1
    done
    curl -fs "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' -d "$req" \
        >"$out" || fail "completion request ($how, $what)"
    kill -TERM "$pid"
    for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && fail "still running 15 s after SIGTERM ($how, $what)"
    pid=
    if [ "$how" = two ]; then
        grep -q "rank 1: tensor parallel: rank 1 holds its shard" "$tmp/err" ||
            fail "rank 1 did not hold a shard ($what)"
    fi
}

model="$tmp/gpt-oss-tiny.gguf"
"$PAGODA_BIN" gen-model --shape gpt-oss-tiny --type F32 --out "$model" >/dev/null 2>&1 || fail "gen-model gpt-oss-tiny"
"$PAGODA_BIN" plan --model "$model" --memory 1G --max-seq-len 512 --tp 2 >"$tmp/plan" 2>"$tmp/err" ||
    fail "pagoda plan --tp 2: $(cat "$tmp/err")"
grep -q "a rank of 2: 4 experts a layer (rank r: experts 4r..4r+3" "$tmp/plan" ||
    fail "the plan does not state each rank's experts: $(grep -n rank "$tmp/plan")"
grep -q "tensor parallel: 2 ranks; each holds 4 heads, 1 KV heads and 4 of the 8 experts" "$tmp/plan" ||
    fail "the plan does not state a rank's heads: $(grep -n "tensor parallel" "$tmp/plan")"
grep -q "a rank of 2 also holds: the attention sinks of its heads (one a head); its experts' gate/up/down biases (the router's bias whole); attn_output.bias whole (rank 0 adds it once, before the all-reduce); its KV heads of the sliding-window layers, in a window pool of its own" "$tmp/plan" ||
    fail "the plan does not say what else a rank holds: $(grep -n "also holds" "$tmp/plan")"

"$PAGODA_BIN" plan --model "$model" --memory 1G --max-seq-len 512 --tp 2 --json >"$tmp/plan.json" 2>"$tmp/err" ||
    fail "pagoda plan --tp 2 --json: $(cat "$tmp/err")"
python3 - "$tmp/plan.json" <<'PY' || fail "the JSON plan's per_rank"
import json, sys
r = json.load(open(sys.argv[1]))["per_rank"]
assert (r["heads"], r["attn_sinks"], r["kv_heads"]) == (4, 4, 1), r
PY

for what in window full; do
    swa=(--set engine.swa_kv="$what" --set engine.max_seq_len=512)
    serve_one "$tmp/one-$what" one
    grep -q "sliding" "$tmp/err" && echo "note ($what): $(grep -m1 -i "sliding" "$tmp/err")"
    serve_one "$tmp/two-$what" two
    python3 - "$tmp/one-$what" "$tmp/two-$what" "$what" <<'PY' || fail "2 ranks differ from one process (swa_kv = $what)"
import json, sys
a, b = (json.load(open(p))["choices"][0] for p in sys.argv[1:3])
what = sys.argv[3]
assert a["text"] == b["text"], (a["text"], b["text"])
la, lb = a["logprobs"], b["logprobs"]
assert la["tokens"] == lb["tokens"], (la["tokens"], lb["tokens"])
n = len(la["tokens"])
assert n >= 32, n                      # the echoed prompt and 32 generated tokens
worst, spread, compared = 0.0, 0.0, 0
for i in range(n):
    x, y = la["token_logprobs"][i], lb["token_logprobs"][i]
    if x is not None:
        worst = max(worst, abs(x - y))
    ta, tb = la["top_logprobs"][i], lb["top_logprobs"][i]
    if ta is None:
        continue
    for tok, v in ta.items():
        spread = max(spread, abs(v))
        if tok in tb:
            worst = max(worst, abs(v - tb[tok]))
            compared += 1
        else:                          # only a near-tie at the edge of the top 5 may differ
            assert min(ta.values()) == v, (i, tok, ta, tb)
assert compared >= 5 * 30, compared
assert worst <= 1e-5, f"swa_kv = {what}: logprobs differ by {worst}"
print(f"gpt-oss-tiny, swa_kv = {what}: 2 ranks = one process: {n} tokens, {compared} top-5 logprobs within {worst:.2g} (|logprob| up to {spread:.2f})")
PY
done
tp_check_sanitizer_reports "$tmp/err" || fail "a sanitizer report"
echo "tp gptoss_split: 2 ranks = one process (text and top-5 logprobs within 1e-5), gpt-oss-tiny with sinks, biases and the window pool split; the plan says what a rank holds"
