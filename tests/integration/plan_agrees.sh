#!/usr/bin/env bash
# plan_agrees.sh: `pagoda plan` says what the server will do, to the token
# (issue 15 finding 8: plan printed a KV pool of 949,632 tokens and
# max_num_seqs 16 for SmolLM2 where the server took 524,288 and 64, and it
# could not read a config). For each case the plan's JSON (`--config` and
# `--set`, or `--model` alone) is compared with the server's /v1/memory
# started from the same settings: limits, KV pool (blocks, tokens, bytes),
# the fixed bytes, fits, and the budget when it is not automatic (an
# automatic one follows MemAvailable, which moves between the two runs).
# Not for: the plan's arithmetic (test_memplan.c) or its refusals
# (memory_plan.sh).
set -u
. "$(dirname "$0")/integ_util.bash"
model=$PAGODA_SOURCE_DIR/models/stories260K.gguf
cfg=$PAGODA_SOURCE_DIR/configs/cpu-ci.ini
integ_tmp planagree

# server_memory CONFIG SETS...: starts the server, writes its /v1/memory to $tmp/server.json
server_memory() {
    local c=$1; shift
    rm -f "$tmp/server.json"
    local args=(--config "$c")
    for s in "$@"; do args+=(--set "$s"); done
    if start_server "$tmp/server.log" "$tmp/port" "${args[@]}" --set engine.frontend=http \
            --set backend.cpu.threads=1; then
        curl -s "http://127.0.0.1:$port/v1/memory" >"$tmp/server.json"
    fi
    stop_server
    [ -s "$tmp/server.json" ] || { fail "server did not start: $*"; tail -5 "$tmp/server.log"; return 1; }
}

# compare NAME AUTO: the plan ($tmp/plan.json) against the server ($tmp/server.json)
compare() {
    python3 - "$tmp/plan.json" "$tmp/server.json" "$1" "$2" <<'PY' || fail "$1: the plan and the server differ"
import json, sys
plan, srv, name, auto = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4] == "auto"
bad = []
for part in ("limits", "kv", "model", "weights_by_type"):
    if plan[part] != srv[part]:
        bad.append((part, plan[part], srv[part]))
for k in plan["bytes"]:
    if auto and k == "budget":
        continue
    if plan["bytes"][k] != srv["bytes"].get(k):
        bad.append(("bytes." + k, plan["bytes"][k], srv["bytes"].get(k)))
if plan["fits"] != srv["fits"]:
    bad.append(("fits", plan["fits"], srv["fits"]))
for b in bad:
    print("  %s: plan %s, server %s" % b)
print("%s: KV pool %d tokens (%d blocks), max_num_seqs %d, max_batched_tokens %d: %s" % (
    name, srv["kv"]["tokens"], srv["kv"]["blocks"], srv["limits"]["max_num_seqs"],
    srv["limits"]["max_batched_tokens"], "agree" if not bad else "DIFFER"))
sys.exit(1 if bad else 0)
PY
}

# plan_case NAME AUTO CONFIG SETS...: `pagoda plan --config CONFIG --set ... --json` vs the server
plan_case() {
    local name=$1 auto=$2 c=$3; shift 3
    local args=(plan --config "$c")
    for s in "$@"; do args+=(--set "$s"); done
    timeout 60 "$PAGODA_BIN" "${args[@]}" --json >"$tmp/plan.json" 2>"$tmp/plan.err"
    local rc=$?
    [ "$rc" -eq 0 ] || { fail "$name: pagoda ${args[*]} --json exited $rc"; cat "$tmp/plan.err"; return; }
    server_memory "$c" "$@" || return
    compare "$name" "$auto"
}

# the CI config as it is: an explicit pool (kv_cache_tokens = 4096)
plan_case "cpu-ci.ini" explicit "$cfg"
# an explicit budget sizes the pool
plan_case "memory_budget 80M" explicit "$cfg" engine.kv_cache_tokens=0 engine.memory_budget=80M
# an automatic budget on host memory: the pool is capped at max_num_seqs x max_seq_len
plan_case "auto budget" auto "$cfg" engine.kv_cache_tokens=0 engine.memory_budget=auto
# the scheduler's own limits (its section), another scheduler, F16 KV, a smaller context
plan_case "continuous max_num_seqs 8" auto "$cfg" engine.kv_cache_tokens=0 engine.memory_budget=auto \
    scheduler.continuous.max_num_seqs=8 scheduler.continuous.max_batched_tokens=128
plan_case "static, f16, max_seq_len 256" explicit "$cfg" engine.scheduler=static engine.kv_dtype=f16 \
    engine.max_seq_len=256 engine.kv_cache_tokens=0 engine.memory_budget=120M

# `pagoda plan --model FILE` alone: what the server does with only engine.model set
printf '[engine]\nmodel = %s\n' "$model" >"$tmp/min.ini"
timeout 60 "$PAGODA_BIN" plan --model "$model" --json >"$tmp/plan.json" 2>"$tmp/plan.err" ||
    { fail "plan --model exited $?"; cat "$tmp/plan.err"; }
server_memory "$tmp/min.ini" engine.log_level=warn && compare "--model alone" auto
# and with its options, which are the same settings
timeout 60 "$PAGODA_BIN" plan --model "$model" --memory 100M --kv-dtype f32 --max-seq-len 128 \
    --max-num-seqs 4 --block-size 32 --json >"$tmp/plan.json" 2>"$tmp/plan.err" ||
    { fail "plan --model with options exited $?"; cat "$tmp/plan.err"; }
server_memory "$tmp/min.ini" engine.log_level=warn engine.memory_budget=100M engine.kv_dtype=f32 \
    engine.max_seq_len=128 scheduler.continuous.max_num_seqs=4 engine.block_size=32 &&
    compare "--model with options" explicit

echo "plan_agrees: $fails failure(s)"
[ "$fails" -eq 0 ]
