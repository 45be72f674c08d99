#!/usr/bin/env bash
# gptoss_split.sh: `mpirun -n 2` on gen-model's gpt-oss-tiny (8 heads on 2
# KV heads, 8 experts top-4, attention sinks, every bias, one layer of a
# sliding window of 8 and one global) equals one process: the same greedy
# text for 32 tokens and every prompt and generated token's top-5 logprobs
# within 1e-5 (F32 weights, F32 KV), with the sinks split with the heads,
# the experts' biases with the experts, attn_output's bias added once (rank
# 0) and the window layers' KV in a window pool on each rank (its KV head);
# the same with swa_kv = full (every position in the main pool). `pagoda
# plan --tp 2` states what a rank holds. Not for: the split's rules
# (test_tp) or gpt-oss's arithmetic (test_gptoss).
set -u
# shellcheck source=tests/tp/split_util.bash
. "$(dirname "$0")/split_util.bash"
split_tmp tpgptoss
. "$(dirname "$0")/sanitizer_check.sh"

model="$tmp/gpt-oss-tiny.gguf"
"$PAGODA_BIN" gen-model --shape gpt-oss-tiny --type F32 --out "$model" >/dev/null 2>&1 || fail "gen-model gpt-oss-tiny"
"$PAGODA_BIN" plan --model "$model" --memory 1G --max-seq-len 512 --tp 2 >"$tmp/plan" 2>"$tmp/err" ||
    fail "pagoda plan --tp 2: $(cat "$tmp/err")"
grep -q "a rank of 2: 4 experts a layer (rank r: experts 4r..4r+3" "$tmp/plan" ||
    fail "the plan does not state each rank's experts: $(grep -n rank "$tmp/plan")"
grep -q "tensor parallel: 2 ranks; each holds 4 heads, 1 KV heads and 4 of the 8 experts" "$tmp/plan" ||
    fail "the plan does not state a rank's heads: $(grep -n "tensor parallel" "$tmp/plan")"
grep -q "a rank of 2 also holds: the attention sinks of its heads (one a head); its experts' gate/up/down biases (the router's bias whole); attn_output.bias whole (rank 0 adds it once, before the all-reduce); its KV heads of the sliding-window layers, in a window pool of its own" "$tmp/plan" ||
    fail "the plan does not say what else a rank holds: $(grep -n "also holds" "$tmp/plan")"

"$PAGODA_BIN" plan --model "$model" --memory 1G --max-seq-len 512 --tp 2 --json >"$tmp/plan.json" 2>"$tmp/err" ||
    fail "pagoda plan --tp 2 --json: $(cat "$tmp/err")"
python3 - "$tmp/plan.json" <<'PY' || fail "the JSON plan's per_rank"
import json, sys
r = json.load(open(sys.argv[1]))["per_rank"]
assert (r["heads"], r["attn_sinks"], r["kv_heads"]) == (4, 4, 1), r
PY

for what in window full; do
    swa=(--set engine.swa_kv="$what" --set engine.max_seq_len=512)
    split_serve "$tmp/one-$what" one "$model" "swa_kv = $what" "${swa[@]}"
    grep -q "sliding" "$tmp/err" && echo "note ($what): $(grep -m1 -i "sliding" "$tmp/err")"
    split_serve "$tmp/two-$what" two "$model" "swa_kv = $what" "${swa[@]}"
    split_same "$tmp/one-$what" "$tmp/two-$what" "gpt-oss-tiny, swa_kv = $what" 1e-5 150 ||
        fail "2 ranks differ from one process (swa_kv = $what)"
done
tp_check_sanitizer_reports "$tmp/err" || fail "a sanitizer report"
echo "tp gptoss_split: 2 ranks = one process (text and top-5 logprobs within 1e-5), gpt-oss-tiny with sinks, biases and the window pool split; the plan says what a rank holds"
