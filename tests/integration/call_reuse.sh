#!/usr/bin/env bash
# call_reuse.sh: the turn after a constrained tool call reuses that call's
# KV (issue 28): call_reuse.py (stdlib only) on two SmolLM2 servers, one
# with the prefix cache and one with the paged policy, over chat
# completions and Messages; each turn must find the whole previous turn
# cached (less one block) and say the same as without the cache. Skipped
# (77) without models/SmolLM2-135M-Instruct.Q4_1.gguf or under a sanitizer
# build (135M parameters there outlast the timeouts).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/integ_util.bash"
integ_need_smollm2
integ_tmp call_reuse
common=(--config "$PAGODA_SOURCE_DIR/configs/cpu-ci.ini" --set engine.model="$smol" --set backend.cpu.threads=1
        --set engine.max_seq_len=2048 --set engine.memory_budget=1G --set engine.kv_cache_tokens=8192)
start_server "$tmp/plain.log" "$tmp/plain.port" "${common[@]}" --set engine.kvcache=paged ||
    { echo "FAIL: the server without the cache did not start"; cat "$tmp/plain.log"; exit 1; }
plain_pid=$pid plain_port=$port
start_server "$tmp/cached.log" "$tmp/cached.port" "${common[@]}" --set engine.kvcache=prefix ||
    { echo "FAIL: the server with the cache did not start"; cat "$tmp/cached.log"; kill "$plain_pid"; exit 1; }
rc=0
timeout 600 python3 "$here/call_reuse.py" "http://127.0.0.1:$port" "http://127.0.0.1:$plain_port" || rc=1
stop_server || rc=1
pid=$plain_pid
stop_server || rc=1
[ "$rc" -eq 0 ] || tail -20 "$tmp/cached.log" "$tmp/plain.log"
exit "$rc"
