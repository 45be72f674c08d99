#!/usr/bin/env bash
# family_calls.sh: constrained tool calls in each family's own syntax on a
# random-weight tiny llama with the committed GPT-2 vocabulary (pagoda
# gen-model; it knows no tool syntax: the constraint alone makes the call,
# the family's reader reads it back), the chat template forced to each
# family in turn: family_calls.py sends 16 requests per
# family (required and named, whole and streamed) and every one must
# parse into one valid call with no markup in the content.
# PAGODA_FAMILIES (names of engine.chat_template, space-separated) runs
# only those.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/integ_util.bash"
integ_tmp family_calls
model=$tmp/tiny-gpt2.gguf
"$PAGODA_BIN" gen-model --shape tiny --type F32 --vocab "$PAGODA_SOURCE_DIR/tests/data/vocab/ggml-vocab-gpt-2.gguf" \
    --out "$model" >"$tmp/gen.log" 2>&1 || { echo "FAIL: gen-model"; cat "$tmp/gen.log"; exit 1; }
n=16 mode=
[ -n "${PAGODA_SANITIZER:-}" ] && n=4 # the sanitizer builds check the path, the Release one the count
[ -n "${PAGODA_FAMILY_CALLS:-}" ] && n=$PAGODA_FAMILY_CALLS mode=stream
rc=0
for fam in ${PAGODA_FAMILIES:-chatml llama3 deepseek3 deepseek-v3.1 kimi-k2 harmony mistral qwen3-coder qwen3.5 glm4}; do
    start_server "$tmp/$fam.log" "$tmp/$fam.port" --config "$PAGODA_SOURCE_DIR/configs/cpu-ci.ini" \
        --set engine.model="$model" --set engine.max_seq_len=512 --set engine.chat_template="$fam" --set backend.cpu.threads=1 ||
        { echo "FAIL: the server did not start ($fam)"; cat "$tmp/$fam.log"; exit 1; }
    timeout $((300 + 3 * n)) python3 "$here/family_calls.py" "http://127.0.0.1:$port" "$fam" "$n" $mode || { rc=1; tail -5 "$tmp/$fam.log"; }
    stop_server || rc=1
done
exit "$rc"
