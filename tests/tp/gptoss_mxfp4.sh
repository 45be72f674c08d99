#!/usr/bin/env bash
# gptoss_mxfp4.sh: `mpirun -n 2` on gen-model's gpt-oss-tiny in the
# released layout (--type MXFP4: the routed experts MXFP4, every other
# matrix Q8_0, norms, biases, sinks and the router F32), experts split
# whole (4 a rank), against one process, under both CPU arithmetics:
#  - exact (PAGODA_CPU_GEMM_MIN_T=1: every matmul dequantizes its MXFP4 or
#    Q8_0 rows and runs sgemm on F32 activations): only the F32 sum order
#    differs (the all-reduce adds two partial sums), so the same greedy
#    text and every top-5 logprob within 1e-4, the F32 tests' bound;
#  - int8 activations (the default): each matmul rounds its input to int8
#    blocks, and a last-bit change of the residual (the all-reduce's order)
#    can move an activation across a rounding boundary: one int8 step of
#    that value, carried through the layers. Asserted on the same context
#    for both (the one-process text, echoed): every top-5 logprob within
#    0.03 nats, so the top-1 token equal wherever the one-process top-2
#    gap exceeds 0.06; the generated text equal up to a first difference,
#    and that only where the one-process top-2 gap is under 0.06. The bound:
#    each int8 run is within 0.015 of the exact one (asserted; why that
#    makes 0.03, and what was seen: below and docs/scaling.md).
# Not for: the split's rules (test_tp, gptoss_split.sh) or MXFP4's kernels
# (test_cpu_kernels, test_quant).
set -u
# shellcheck source=tests/tp/split_util.bash
. "$(dirname "$0")/split_util.bash"
split_tmp tpmxfp4
. "$(dirname "$0")/sanitizer_check.sh"

model="$tmp/gpt-oss-tiny-mxfp4.gguf"
"$PAGODA_BIN" gen-model --shape gpt-oss-tiny --type MXFP4 --out "$model" >/dev/null 2>&1 ||
    fail "gen-model gpt-oss-tiny --type MXFP4"
"$PAGODA_BIN" plan --model "$model" --memory 1G --max-seq-len 512 --tp 2 >"$tmp/plan" 2>"$tmp/err" ||
    fail "pagoda plan --tp 2: $(cat "$tmp/err")"
# the experts are MXFP4 and nothing else is (the rest Q8_0)
grep -Eq "^  experts MXFP4 \(3\.1M params\)" "$tmp/plan" ||
    fail "the experts are not MXFP4: $(grep -n "experts" "$tmp/plan")"
grep -Eq "^  weights Q8_0 " "$tmp/plan" || fail "no Q8_0 weights: $(grep -n "weights" "$tmp/plan")"
grep -q "a rank of 2: 4 experts a layer (rank r: experts 4r..4r+3" "$tmp/plan" ||
    fail "the plan does not state each rank's experts: $(grep -n rank "$tmp/plan")"

# Each run (split_serve: one process or two ranks, the exact arithmetic's
# environment on every process through split_env) answers split_req, the
# greedy request, into $tmp/ARITH-HOW.gen, then (split_then, the server
# still up) the one-process greedy text echoed ($tmp/ARITH-one.gen's, so
# "one" runs first) into $tmp/ARITH-HOW.echo.
echo_request() {
    local port=$1 how=$2 label=$3
    python3 - "$tmp/$arith-one.gen" >"$tmp/echo.req" <<'PY' || fail "the echoed request ($label)"
import json, sys
c = json.load(open(sys.argv[1]))["choices"][0]
print(json.dumps({"prompt": c["text"], "max_tokens": 1, "temperature": 0, "ignore_eos": True,
                  "logprobs": 5, "echo": True}))
PY
    curl -fs "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' -d @"$tmp/echo.req" \
        >"$tmp/$arith-$how.echo" || fail "echoed request ($label)"
}
split_then=echo_request

for arith in exact int8; do
    split_env=()
    if [ "$arith" = exact ]; then split_env=(PAGODA_CPU_GEMM_MIN_T=1); fi
    for how in one two; do
        split_serve "$tmp/$arith-$how.gen" "$how" "$model" "$arith, $how" --set engine.max_seq_len=512
        tp_check_sanitizer_reports "$tmp/err" "$tmp/hout" || fail "a sanitizer report ($arith, $how)"
    done
    split_py - "$tmp" "$arith" <<'PY' || fail "2 ranks differ from one process ($arith)"
import json, sys
from split_compare import compare, top2_gap
tmp, arith = sys.argv[1:3]
bound = 1e-4 if arith == "exact" else 0.03
load = lambda what, how: json.load(open(f"{tmp}/{arith}-{how}.{what}"))["choices"][0]

def edge(i, tok, v, ta, tb):   # only a near-tie at the edge of the top 5 may differ
    assert min(ta.values()) - min(tb.values()) <= 2 * bound, (i, tok, ta, tb)
    assert v - min(ta.values()) <= 2 * bound, (i, tok, ta, tb)

# compare(a, b, upto): every top-5 logprob of positions [0, upto); the top-1
# tokens equal unless the one-process top-2 gap is within 2 x bound
cmp = lambda a, b, upto: compare(a, b, upto, edge, 2 * bound)

# 1. the same context: the one-process greedy text, echoed to both
a, b = load("echo", "one"), load("echo", "two")
assert a["logprobs"]["tokens"] == b["logprobs"]["tokens"], (a["logprobs"]["tokens"], b["logprobs"]["tokens"])
n = len(a["logprobs"]["tokens"]) - 1          # the last is the one generated token
assert n >= 32, n
worst, spread, compared = cmp(a, b, n)
assert compared >= 5 * 30, compared
assert worst <= bound, f"{arith}: logprobs on the same context differ by {worst} (bound {bound})"

# 2. the greedy runs: equal text, or equal up to a first difference where the
# one-process top-2 gap was within 2 x bound (only the int8 path)
ga, gb = load("gen", "one"), load("gen", "two")
ta, tb = ga["logprobs"]["tokens"], gb["logprobs"]["tokens"]
first = next((i for i in range(min(len(ta), len(tb))) if ta[i] != tb[i]), None)
if first is None:
    assert ga["text"] == gb["text"], (ga["text"], gb["text"])
    note = f"the same {len(ta)} tokens"
else:
    gap = top2_gap(ga["logprobs"]["top_logprobs"][first])
    assert arith == "int8" and gap <= 2 * bound, (arith, first, gap, ta, tb)
    note = f"equal up to token {first}, where the one-process top-2 gap is {gap:.3g}"
gw, _, _ = cmp(ga, gb, first if first is not None else len(ta))
assert gw <= bound, f"{arith}: greedy logprobs differ by {gw} before the first difference (bound {bound})"
print(f"gpt-oss-tiny MXFP4 experts, {arith}: 2 ranks = one process: the same context, {n} tokens, "
      f"{compared} top-5 logprobs within {worst:.2g} (bound {bound:g}; |logprob| up to {spread:.2f}); "
      f"greedy: {note}, logprobs within {gw:.2g}")
PY
done

# where the int8 bound comes from: on this model the int8 path's own
# rounding moves every logprob less than 0.015 from the exact arithmetic
# (one process and two ranks alike), so two int8 runs that round some
# values the other way each stay that close to the exact answer, and to
# each other within 2 x 0.015 (+ the exact runs' 1e-4). More than 1e-4
# apart also shows the exact runs took the other arithmetic (the
# environment reached every rank).
python3 - "$tmp" <<'PY' || fail "int8 activations against the exact arithmetic"
import json, sys
tmp = sys.argv[1]
for how in ("one", "two"):
    a, b = (json.load(open(f"{tmp}/{ar}-{how}.echo"))["choices"][0]["logprobs"] for ar in ("exact", "int8"))
    d = 0.0
    for i in range(1, len(a["tokens"])):
        d = max(d, abs(a["token_logprobs"][i] - b["token_logprobs"][i]))
        for tok, v in a["top_logprobs"][i].items():
            if tok in b["top_logprobs"][i]:
                d = max(d, abs(v - b["top_logprobs"][i][tok]))
    assert 1e-4 < d <= 0.015, (how, d)
    print(f"{how}: int8 activations against the exact arithmetic: logprobs within {d:.2g} (bound 0.015)")
PY
tp_check_sanitizer_reports "$tmp/err" || fail "a sanitizer report"
echo "tp gptoss_mxfp4: 2 ranks = one process on gpt-oss-tiny with MXFP4 experts (Q8_0 elsewhere): exact arithmetic within 1e-4, int8 activations within 0.03 nats and top-1 equal past a 0.06 gap"
