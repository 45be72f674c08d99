#!/usr/bin/env bash
# family_reuse.sh [N]: the call memo's reuse per template family (issue
# 28): a random-weight tiny llama with the committed GPT-2 vocabulary
# (pagoda gen-model, as family_calls.sh), the prefix cache, the chat
# template forced to each family in turn, with [http] call_memo on and
# off; family_reuse.py runs N (default 8; 2 under a sanitizer build)
# two-turn conversations on each and prints the turn-2 tokens owed and
# missed: the table in docs/http-api.md. In the suite it checks what holds
# for any trajectory: every turn 1 makes its call, every turn 2 finds
# something cached, and, per family, the memo never misses more than
# without it (turn 1 is the same both ways: the same seeds, requests and
# cache states; the memo only renders turn 2's history with the model's
# own text), and misses fewer over all the families together. harmony
# must miss fewer on its own: the constraint writes its call's header as
# the model does (<|channel|>commentary to=functions.N <|constrain|>json),
# never as the template renders a past call (to=functions.N<|channel|>
# commentary json), so without the memo every turn 2 misses from there on
# and with it no turn does, whatever the sampled arguments (the other
# families' calls may by chance be written as the prompt renders them).
# PAGODA_FAMILIES (engine.chat_template names) runs only those.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/integ_util.bash"
integ_tmp family_reuse
n=${1:-8}
[ -n "${PAGODA_SANITIZER:-}" ] && [ -z "${1:-}" ] && n=2
model=$tmp/tiny-gpt2.gguf
"$PAGODA_BIN" gen-model --shape tiny --type F32 --vocab "$PAGODA_SOURCE_DIR/tests/data/vocab/ggml-vocab-gpt-2.gguf" \
    --out "$model" >"$tmp/gen.log" 2>&1 || { echo "FAIL: gen-model"; cat "$tmp/gen.log"; exit 1; }
rc=0
sum_on=0
sum_off=0
for fam in ${PAGODA_FAMILIES:-chatml llama3 deepseek3 kimi-k2 harmony mistral qwen3-coder glm4}; do
    declare -A missed=()
    for memo in true false; do
        start_server "$tmp/$fam.log" "$tmp/$fam.port" --config "$PAGODA_SOURCE_DIR/configs/cpu-ci.ini" \
            --set engine.model="$model" --set engine.max_seq_len=512 --set engine.chat_template="$fam" \
            --set engine.kvcache=prefix --set backend.cpu.threads=1 --set frontend.http.call_memo=$memo ||
            { echo "FAIL: the server did not start ($fam)"; cat "$tmp/$fam.log"; exit 1; }
        out=$(timeout 600 python3 "$here/family_reuse.py" "http://127.0.0.1:$port" "$fam" "$n") ||
            { rc=1; tail -5 "$tmp/$fam.log"; }
        echo "memo=$memo $out"
        m=$(printf '%s\n' "$out" | sed -n 's/.* missed \([0-9]*\) calls .*/\1/p' | tail -1)
        [ -n "$m" ] || { echo "FAIL: $fam memo=$memo: no figures"; rc=1; m=0; }
        missed[$memo]=$m
        stop_server || rc=1
    done
    if [ "${missed[true]}" -gt "${missed[false]}" ]; then
        echo "FAIL: $fam: the memo missed ${missed[true]} tokens, more than ${missed[false]} without it"
        rc=1
    fi
    if [ "$fam" = harmony ] && [ "${missed[true]}" -ge "${missed[false]}" ]; then
        echo "FAIL: $fam: the memo missed ${missed[true]} tokens, not fewer than ${missed[false]} without it"
        rc=1
    fi
    sum_on=$((sum_on + missed[true]))
    sum_off=$((sum_off + missed[false]))
done
echo "all families: missed $sum_on with the memo, $sum_off without"
if [ "$sum_on" -ge "$sum_off" ]; then
    echo "FAIL: the memo saved nothing over all families ($sum_on vs $sum_off)"
    rc=1
fi
exit "$rc"
