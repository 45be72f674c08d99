#!/usr/bin/env bash
# inspect_api.sh: the inspection API on the real server and engine
# (inspect_check.py api): /v1/inspect against /metrics at the same moment
# under load and idle, 401 without the API key, the stream, traces. The
# model is a random-weight llama-110M of 2 layers (generated once into the
# build folder), slow enough that requests live for seconds.
# Not for: the frontend's details (tests/unit/test_http_inspect.c) or the
# page (inspect_ui.sh).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/integ_util.bash"
integ_tmp inspect-api

model=$build/inspect-api-llama110M-2L.gguf
if [ ! -s "$model" ]; then
    "$PAGODA_BIN" gen-model --shape llama-110M --layers 2 --type Q8_0 --out "$model" >/dev/null ||
        { echo "FAIL: gen-model"; exit 1; }
fi
start_server "$tmp/server.log" "$tmp/port" --config "$PAGODA_SOURCE_DIR/configs/cpu-ci.ini" \
    --set engine.model="$model" --set engine.kvcache=prefix --set engine.max_seq_len=1024 \
    --set engine.memory_budget=1G --set engine.kv_cache_tokens=8192 --set frontend.http.api_key=inspect-key ||
    { echo "FAIL: the server did not start"; cat "$tmp/server.log"; exit 1; }

rc=0
timeout 240 python3 "$here/inspect_check.py" api "http://127.0.0.1:$port" inspect-key || rc=1
st=0
stop_server || st=$?
[ "$st" -eq 0 ] || { echo "FAIL: server exit status $st after SIGTERM"; rc=1; }
[ "$fails" -eq 0 ] || rc=1
[ "$rc" -eq 0 ] || tail -20 "$tmp/server.log"
exit $rc
