#!/usr/bin/env bash
# vocab_calls.sh: constrained tool calls end to end on two real
# vocabularies (tests/data/vocab, llama.cpp's copies): Qwen2's (151,936
# ids; its chat markup <|im_start|> / <|im_end|> are control tokens; it
# predates Qwen2.5's <tool_call> token, so that marker is written in byte
# pieces) with the ChatML template, and Llama 3.0's (128,256 ids;
# <|start_header_id|>, <|eot_id|> control tokens; no <|python_tag|> yet)
# with the llama3 template: a random-weight tiny llama per vocabulary
# (pagoda gen-model) and family_calls.py's requests (required and named,
# whole and streamed): every reply parses into one valid call with no
# markup in the content. The GPT-2 vocabulary's run is family_calls.sh.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/integ_util.bash"
integ_tmp vocab_calls
n=8
[ -n "${PAGODA_SANITIZER:-}" ] && n=2
rc=0
for pair in qwen2:chatml llama-bpe:llama3; do
    v=${pair%%:*} fam=${pair#*:}
    model=$tmp/tiny-$v.gguf
    "$PAGODA_BIN" gen-model --shape tiny --type F32 --vocab "$PAGODA_SOURCE_DIR/tests/data/vocab/ggml-vocab-$v.gguf" \
        --out "$model" >"$tmp/gen-$v.log" 2>&1 || { echo "FAIL: gen-model $v"; cat "$tmp/gen-$v.log"; exit 1; }
    start_server "$tmp/$v.log" "$tmp/$v.port" --config "$PAGODA_SOURCE_DIR/configs/cpu-ci.ini" \
        --set engine.model="$model" --set engine.max_seq_len=512 --set engine.chat_template="$fam" --set backend.cpu.threads=1 ||
        { echo "FAIL: the server did not start ($v, $fam)"; cat "$tmp/$v.log"; exit 1; }
    echo "vocab_calls: $v vocabulary, $fam template"
    timeout $((300 + 3 * n)) python3 "$here/family_calls.py" "http://127.0.0.1:$port" "$fam" "$n" || { rc=1; tail -5 "$tmp/$v.log"; }
    rm -f "$model"
    stop_server || rc=1
done
exit "$rc"
