#!/usr/bin/env bash
# cache_turns.sh: a ten-turn agent conversation with tools (one turn with
# tool_choice "none") over chat completions on SmolLM2 with the prefix
# cache: every turn must reuse at least 90% of the previous turn's prompt
# (usage.prompt_tokens_details.cached_tokens), issue 28's target.
# cache_turns.py does the talking (stdlib only). Skipped (77) without
# models/SmolLM2-135M-Instruct.Q4_1.gguf or under a sanitizer build.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/integ_util.bash"
integ_need_smollm2
integ_tmp cache_turns
start_server "$tmp/server.log" "$tmp/port" --config "$PAGODA_SOURCE_DIR/configs/cpu-ci.ini" \
    --set engine.model="$smol" --set engine.kvcache=prefix --set engine.max_seq_len=2048 \
    --set engine.memory_budget=1G --set engine.kv_cache_tokens=8192 ||
    { echo "FAIL: the server did not start"; cat "$tmp/server.log"; exit 1; }
rc=0
timeout 600 python3 "$here/cache_turns.py" "http://127.0.0.1:$port" || rc=1
stop_server || rc=1
[ "$rc" -eq 0 ] || tail -20 "$tmp/server.log"
exit "$rc"
