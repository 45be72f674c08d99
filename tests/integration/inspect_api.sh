#!/usr/bin/env bash
# inspect_api.sh: the inspection API on the real server and engine
# (inspect_check.py api): /v1/inspect against /metrics at the same moment
# under load and idle, 401 without the API key, the stream, traces. The
# model is a random-weight llama-110M of 2 layers (generated once into the
# build folder), slow enough that requests live for seconds.
# Not for: the frontend's details (tests/unit/test_http_inspect.c) or the
# page (inspect_ui.sh).
set -u
: "${PAGODA_BIN:?set by ctest}" "${PAGODA_SOURCE_DIR:?set by ctest}"
build=${PAGODA_BUILD_DIR:-$(dirname "$(dirname "$PAGODA_BIN")")}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/pagoda-inspect-api-XXXXXX)
pid=
cleanup() {
    [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

model=$build/inspect-llama110M-2L.gguf
if [ ! -s "$model" ]; then
    "$PAGODA_BIN" gen-model --shape llama-110M --layers 2 --type Q8_0 --out "$model" >/dev/null ||
        { echo "FAIL: gen-model"; exit 1; }
fi
"$PAGODA_BIN" --config "$PAGODA_SOURCE_DIR/configs/cpu-ci.ini" --set engine.model="$model" \
    --set engine.kvcache=prefix --set engine.max_seq_len=1024 --set engine.memory_budget=1G --set engine.kv_cache_tokens=8192 \
    --set frontend.http.port=0 --set frontend.http.port_file="$tmp/port" \
    --set frontend.http.api_key=inspect-key >"$tmp/server.log" 2>&1 &
pid=$!
for _ in $(seq 300); do
    [ -s "$tmp/port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
[ -s "$tmp/port" ] || { echo "FAIL: the server did not start"; cat "$tmp/server.log"; exit 1; }

rc=0
timeout 240 python3 "$here/inspect_check.py" api "http://127.0.0.1:$(cat "$tmp/port")" inspect-key || rc=1
kill -TERM "$pid"
st=0
wait "$pid" || st=$?
pid=
[ "$st" -eq 0 ] || { echo "FAIL: server exit status $st after SIGTERM"; rc=1; }
[ "$rc" -eq 0 ] || tail -20 "$tmp/server.log"
exit $rc
