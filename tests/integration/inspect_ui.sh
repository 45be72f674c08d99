#!/usr/bin/env bash
# inspect_ui.sh: the /ui page in headless Chromium (Debian's chromium
# package; the test is skipped without it) against the real server under
# the prefix policy (inspect_check.py ui): the block grid shows the blocks
# three live requests share with refs 3, the page's numbers equal
# /v1/inspect's when idle and after the load, the request box streams a
# traced completion, the sequence table fits its panel at 1400 and 1920 px. PAGODA_UI_SHOTS=DIR saves the page idle, under load
# and after it there; PAGODA_UI_MODEL=FILE serves another model (the docs'
# screenshots use SmolLM2).
# Not for: the API's numbers against /metrics (inspect_api.sh).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/integ_util.bash"
command -v chromium >/dev/null || command -v chromium-browser >/dev/null ||
    { echo "SKIP: no chromium (apt-get install chromium)"; exit 77; }
integ_tmp inspect-ui

model=${PAGODA_UI_MODEL:-$build/inspect-ui-llama110M-2L.gguf}
if [ ! -s "$model" ]; then
    "$PAGODA_BIN" gen-model --shape llama-110M --layers 2 --type Q8_0 --out "$model" >/dev/null ||
        { echo "FAIL: gen-model"; exit 1; }
fi
start_server "$tmp/server.log" "$tmp/port" --config "$PAGODA_SOURCE_DIR/configs/cpu-ci.ini" \
    --set engine.model="$model" --set engine.kvcache=prefix --set engine.max_seq_len=1024 \
    --set engine.memory_budget=1G --set engine.kv_cache_tokens=4096 --set frontend.http.inspect_interval_ms=100 ||
    { echo "FAIL: the server did not start"; cat "$tmp/server.log"; exit 1; }

rc=0
timeout 240 python3 "$here/inspect_check.py" ui "http://127.0.0.1:$port" ${PAGODA_UI_SHOTS:+"$PAGODA_UI_SHOTS"} || rc=$?
stop_server
[ "$fails" -eq 0 ] || rc=1
[ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || tail -20 "$tmp/server.log"
exit $rc
