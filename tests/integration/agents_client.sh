#!/usr/bin/env bash
# agents_client.sh: the official `anthropic` and `openai` Python SDKs (from
# PyPI) on the agent APIs of a real pagoda server, as openai_client.sh does
# for chat completions: a virtual
# environment kept in the build folder (later runs reuse it), a server on a
# free loopback port with an API key and the prefix cache, anthropic_client.py (Messages API) and
# responses_client.py (Responses API) on stories260K, then, when models/SmolLM2-135M-Instruct.Q4_1.gguf is there
# and the build is not a sanitizer one, again on SmolLM2, with
# agent_turns.py (ten turns with tools, the prefix cache's share per turn)
# and agents_sdk_loop.py (the OpenAI Agents SDK's loop with a function tool). Exits 77 (ctest:
# skipped) when the venv module is missing or PyPI cannot be reached.
# Not for: the HTTP details (tests/unit/test_http_api.c).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/integ_util.bash"
venv=$build/agents-venv
integ_tmp agents

integ_venv "$venv" anthropic openai openai-agents

# server LOG PORTFILE [--set k=v ...]: the server with the API key in the background ($pid, $port)
server() {
    start_server "$1" "$2" --config "$PAGODA_SOURCE_DIR/configs/cpu-ci.ini" --set backend.cpu.threads=1 \
        --set frontend.http.api_key=test-key --set engine.kvcache=prefix "${@:3}" ||
        { echo "FAIL: the server did not start"; cat "$1"; exit 1; }
}

# stories260K's whole context: the tools block takes most of it
server "$tmp/server.log" "$tmp/port" --set engine.max_seq_len=512
rc=0
# first, on the fresh server: docs/http-api.md's SDK example prints what the page says
timeout 120 "$venv/bin/python" "$here/docs_example.py" "$PAGODA_SOURCE_DIR/docs/http-api.md" \
    "http://127.0.0.1:$port" test-key || rc=1
timeout 300 "$venv/bin/python" "$here/anthropic_client.py" "http://127.0.0.1:$port" test-key stories || rc=1
timeout 300 "$venv/bin/python" "$here/responses_client.py" "http://127.0.0.1:$port" test-key stories || rc=1
st=0
stop_server || st=$?
if [ "$st" -ne 0 ]; then
    echo "FAIL: server exit status $st after SIGTERM"; rc=1
fi
[ "$rc" -eq 0 ] || tail -20 "$tmp/server.log"

smol="$PAGODA_SOURCE_DIR/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -n "${PAGODA_SANITIZER:-}" ]; then
    # as in openai_client.sh: 135M parameters under a sanitizer outlast the
    # client's timeouts; the server's threads were exercised above
    echo "note: a $PAGODA_SANITIZER build: the SmolLM2 cases run in the Release suite only"
elif [ -f "$smol" ]; then
    server "$tmp/smol.log" "$tmp/smol.port" --set engine.model="$smol" \
        --set engine.max_seq_len=1024 --set engine.memory_budget=1G --set engine.kv_cache_tokens=4096
    timeout 600 "$venv/bin/python" "$here/anthropic_client.py" "http://127.0.0.1:$port" test-key smollm2 ||
        { rc=1; tail -20 "$tmp/smol.log"; }
    timeout 600 "$venv/bin/python" "$here/responses_client.py" "http://127.0.0.1:$port" test-key smollm2 ||
        { rc=1; tail -20 "$tmp/smol.log"; }
    # ten turns with tools each turn over Messages, Responses and Responses
    # chained by previous_response_id: each turn >= 90% from the prefix cache
    timeout 600 "$venv/bin/python" "$here/agent_turns.py" "http://127.0.0.1:$port" test-key ||
        { rc=1; tail -20 "$tmp/smol.log"; }
    # a real agent loop: the OpenAI Agents SDK with a function tool
    timeout 300 "$venv/bin/python" "$here/agents_sdk_loop.py" "http://127.0.0.1:$port" test-key ||
        { rc=1; tail -20 "$tmp/smol.log"; }
    stop_server || { echo "FAIL: the SmolLM2 server's exit status"; rc=1; }
else
    echo "note: $smol is absent (models/get-model smollm2): the SmolLM2 cases did not run"
fi
[ "$fails" -eq 0 ] || rc=1
exit $rc
