#!/usr/bin/env bash
# memory_plan.sh: `pagoda plan` and the server's start-up refusal through the
# built binary: a plan that fits exits 0, one that does not says "does not
# fit" with the numbers and exits non-zero (text and --json), and the server
# refuses to start under a too-small memory_budget, naming the numbers.
# Not for: the plan's arithmetic (tests/unit/test_memplan.c).
set -u
. "$(dirname "$0")/integ_util.bash"
model=$PAGODA_SOURCE_DIR/models/stories260K.gguf
cfg=$PAGODA_SOURCE_DIR/configs/cpu-ci.ini
integ_tmp plan
# expect_rc WANT CMD...: runs CMD (stdout+stderr to $tmp/out) and checks its status
expect_rc() {
    local want=$1; shift
    timeout 60 "$@" >"$tmp/out" 2>&1
    local rc=$?
    [ "$rc" -eq "$want" ] || { fail "$* exited $rc, want $want"; cat "$tmp/out"; }
}
has() { grep -q -- "$1" "$tmp/out" || { fail "output lacks '$1'"; cat "$tmp/out"; }; }
py() { python3 -c "$1" "$tmp/out" || fail "json check: $1"; }

# fits: the table with the KV formula, exit 0
expect_rc 0 "$PAGODA_BIN" plan --model "$model"
has "KV cache: 640 bytes/token = 2 x 5 layers x 4 kv_heads x 8 head_dim x 2 bytes"
has "^fits"
expect_rc 0 "$PAGODA_BIN" plan --model "$model" --kv-dtype f32 --max-seq-len 256 --json
py 'import json,sys; d=json.load(open(sys.argv[1])); assert d["fits"] is True and d["kv"]["bytes_per_token"] == 1280, d["kv"]'

# 1 MiB: the fixed part alone does not fit (short by it plus one 512-token
# sequence of KV); the fixed part is the server's default's (the continuous
# scheduler's 64 sequences)
expect_rc 1 "$PAGODA_BIN" plan --model "$model" --memory 1M
has "DOES NOT FIT"
has "need 71325504 bytes, the budget is 1048576"
expect_rc 1 "$PAGODA_BIN" plan --model "$model" --memory 1M --json
py 'import json,sys; d=json.load(open(sys.argv[1])); assert d["fits"] is False and d["bytes"]["budget"] == 1048576 and d["shortfall_bytes"] == 71325504 + 512 * 640 - 1048576 and "71325504" in d["reason"], d["reason"]'

# just above the fixed part: the KV pool is shorter than one max-length sequence
expect_rc 1 "$PAGODA_BIN" plan --model "$model" --memory 71366464
has "DOES NOT FIT: the KV pool holds 64 tokens, fewer than one sequence of max_seq_len 512"
expect_rc 1 "$PAGODA_BIN" plan --model "$model" --memory 71366464 --json
py 'import json,sys; d=json.load(open(sys.argv[1])); assert d["fits"] is False and d["kv"]["tokens"] == 64 and d["shortfall_bytes"] > 0, d'

# bad input: usage errors, not a crash
expect_rc 2 "$PAGODA_BIN" plan --model "$model" --memory banana
has "memory_budget"
expect_rc 1 "$PAGODA_BIN" plan --model "$tmp/missing.gguf"
has "missing.gguf"

# the server refuses to start when memory_budget is too small (pool sized by the budget)
expect_rc 1 "$PAGODA_BIN" --config "$cfg" --set engine.memory_budget=60M --set engine.kv_cache_tokens=0 \
    --set frontend.http.port=0 --set frontend.http.port_file="$tmp/port"
has "the model does not fit: weights + activations + workspace + overhead need 70801216 bytes, the budget is 62914560"
has "DOES NOT FIT"
[ -s "$tmp/port" ] && fail "the refused server wrote a port file (it listened)"

# and starts with enough: /health answers, SIGTERM exits 0
if start_server "$tmp/server.log" "$tmp/port" --config "$cfg" --set engine.memory_budget=80M \
        --set engine.kv_cache_tokens=0 --set backend.cpu.threads=1; then
    curl -s "http://127.0.0.1:$port/v1/memory" >"$tmp/out"
    py 'import json,sys; d=json.load(open(sys.argv[1])); assert d["fits"] is True and d["bytes"]["budget"] == 80*1024*1024 and d["kv"]["blocks"] > 16, d["kv"]'
    st=0; stop_server || st=$?
    [ "$st" -eq 0 ] || fail "server exit status $st"
else
    fail "server with an 80M budget did not start"; cat "$tmp/server.log"
fi

echo "memory_plan: $fails failure(s)"
[ "$fails" -eq 0 ]
