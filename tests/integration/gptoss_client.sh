#!/usr/bin/env bash
# gptoss_client.sh: the official `openai` Python client (from PyPI) against
# a pagoda server of a gpt-oss model: gen-model's gpt-oss-tiny shape with
# MXFP4 experts (the released layout) and the harmony vocabulary
# tests/fixtures/gptoss/harmony-vocab.gguf (o200k-style BPE, harmony's
# special tokens, gpt-oss's chat template: the harmony format is detected,
# not forced), random weights; runs gptoss_client.py (chat completions with
# reasoning_content, tool calls, the Responses API; bodies validated against
# the SDK's types). Uses the openai client of openai_client.sh's or
# agents_client.sh's virtual environment when one is ready, else makes its
# own in the build folder. Exits 77 (ctest: skipped) with a message when the
# venv module is missing or PyPI cannot be reached.
# Not for: the harmony rendering's details (test_chat_template,
# test_http_tools, test_api_toolfmt) or the architecture's numbers (test_gptoss).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/integ_util.bash"
integ_tmp gptoss

venv=
for v in "$build/openai-venv" "$build/agents-venv"; do
    if [ -f "$v/.pagoda-ok" ]; then venv=$v; break; fi
done
[ -n "$venv" ] || { venv=$build/gptoss-venv; integ_venv "$venv" openai; }

model=$tmp/gpt-oss-tiny.gguf
"$PAGODA_BIN" gen-model --shape gpt-oss-tiny --type MXFP4 \
    --vocab "$PAGODA_SOURCE_DIR/tests/fixtures/gptoss/harmony-vocab.gguf" --out "$model" >"$tmp/gen.log" 2>&1 ||
    { echo "FAIL: gen-model"; cat "$tmp/gen.log"; exit 1; }

start_server "$tmp/server.log" "$tmp/port" --config "$PAGODA_SOURCE_DIR/configs/cpu-ci.ini" \
    --set engine.model="$model" --set engine.max_seq_len=512 --set backend.cpu.threads=1 \
    --set frontend.http.api_key=test-key ||
    { echo "FAIL: the server did not start"; cat "$tmp/server.log"; exit 1; }
grep -q "harmony" "$tmp/server.log" && echo "note: $(grep -m1 harmony "$tmp/server.log")"

rc=0
timeout 300 "$venv/bin/python" "$here/gptoss_client.py" "http://127.0.0.1:$port" test-key || rc=1
st=0
stop_server || st=$?
if [ "$st" -ne 0 ]; then
    echo "FAIL: server exit status $st after SIGTERM"; rc=1
fi
[ "$rc" -eq 0 ] || tail -20 "$tmp/server.log"
[ "$fails" -eq 0 ] || rc=1
exit $rc
