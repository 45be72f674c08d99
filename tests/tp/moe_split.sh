#!/usr/bin/env bash
# moe_split.sh: `mpirun -n 2` on generated mixture-of-experts models, the
# experts split whole between the ranks (8 experts: 4 a rank; attention by
# heads; one all-reduce after the MoE block), equals one process: the same
# greedy text for 32 tokens and every prompt and generated token's top-5
# logprobs within 1e-4 (F32 weights), for qwen3moe (routed experts only)
# and qwen2moe (plus a gated shared expert, split by rows) and deepseek2
# (multi-head latent attention: heads split, the latent KV whole on each
# rank; a leading dense layer, a shared expert); `pagoda plan
# --tp 2` states each rank's experts; 3 ranks are refused with the counts
# that work. Skips (77) while the model loader does not take these
# architectures. Not for: the split's arithmetic (test_tp).
set -u
# shellcheck source=tests/tp/split_util.bash
. "$(dirname "$0")/split_util.bash"
split_tmp tpmoe
. "$(dirname "$0")/sanitizer_check.sh"

for shape in qwen3moe-tiny qwen2moe-tiny deepseek2-tiny; do
    model="$tmp/$shape.gguf"
    "$PAGODA_BIN" gen-model --shape "$shape" --type F32 --out "$model" >/dev/null 2>&1 || fail "gen-model $shape"
    if ! "$PAGODA_BIN" plan --model "$model" --memory 1G --tp 2 >"$tmp/plan" 2>"$tmp/err"; then
        if grep -Eq "is not supported|is missing" "$tmp/err"; then
            echo "SKIP: the model loader does not take $shape yet: $(head -1 "$tmp/err")"
            exit 77
        fi
        fail "pagoda plan --tp 2 ($shape)"
    fi
    grep -q "a rank of 2: 4 experts a layer (rank r: experts 4r..4r+3" "$tmp/plan" ||
        fail "the plan does not state each rank's experts ($shape): $(grep -n rank "$tmp/plan")"
    if [ "$shape" = deepseek2-tiny ]; then
        # multi-head latent attention: the latent row is whole on each rank
        grep -q "with tensor_parallel = 2: every rank holds this whole latent row a token" "$tmp/plan" ||
            fail "the plan does not say the latent is replicated: $(grep -n -i latent "$tmp/plan")"
    fi

    split_serve "$tmp/one" one "$model" "$shape"
    split_serve "$tmp/two" two "$model" "$shape"
    split_same "$tmp/one" "$tmp/two" "$shape" 1e-4 0 || fail "2 ranks differ from one process ($shape)"
done

# three ranks split neither the 4 heads nor the 8 experts: refused on every rank
model="$tmp/qwen3moe-tiny.gguf"
echo '{"id": "a", "prompt": "Once", "max_tokens": 2}' | timeout 60 "$MPIEXEC" -n 3 --oversubscribe \
    "$PAGODA_BIN" "${split_common[@]}" --set engine.model="$model" --set engine.frontend=stdin \
    --set frontend.stdin.mode=batch --set engine.tensor_parallel=3 >"$tmp/out" 2>"$tmp/err" &&
    fail "qwen3moe-tiny split 3 ways was accepted"
grep -q "tensor_parallel = 3 cannot split this model: its 4 attention heads and 2 KV heads must each divide by 3; values that work: 1, 2" "$tmp/err" ||
    fail "no refusal with the numbers"
# nor deepseek2-tiny's 4 heads (its one latent KV head is not split, so it is not the reason)
"$PAGODA_BIN" plan --model "$tmp/deepseek2-tiny.gguf" --memory 1G --tp 3 >"$tmp/plan" 2>"$tmp/err" &&
    fail "deepseek2-tiny split 3 ways was planned"
grep -q "tensor_parallel = 3 cannot split this model: its 4 attention heads must divide by 3 (multi-head latent attention" "$tmp/err" ||
    fail "deepseek2-tiny: no refusal with the numbers: $(cat "$tmp/err")"
tp_check_sanitizer_reports "$tmp/err" || fail "a sanitizer report"
echo "tp moe_split: 2 ranks with the experts split = one process (text and logprobs), qwen3moe, qwen2moe and deepseek2 (MLA: heads split, latent replicated); 3 ranks refused"
