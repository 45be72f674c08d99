# split_compare.py: the top-5 logprob comparison of two /v1/completions
# replies that split_util.bash's split_same and gptoss_mxfp4.sh share
# (imported by their inline Python through split_py; not a test:
# tests/CMakeLists.txt runs tp/*.sh only).
# Not for: what a caller asserts of the result (its bound, how many compared).


def compare(a, b, upto, edge, top1_gap=None):
    """every logprob and top-5 logprob of positions [0, upto) of the
    choices a and b (the same tokens): the largest difference, how many
    top-5 entries were in both, the largest |logprob|. A token in a's top 5
    and not in b's is passed to edge(i, tok, v, ta, tb), which asserts it
    is a near tie at the edge; with top1_gap, the top-1 tokens are equal
    wherever a's top-2 gap exceeds it."""
    la, lb = a["logprobs"], b["logprobs"]
    worst, spread, compared = 0.0, 0.0, 0
    for i in range(upto):
        x, y = la["token_logprobs"][i], lb["token_logprobs"][i]
        if x is not None:
            worst = max(worst, abs(x - y))
        ta, tb = la["top_logprobs"][i], lb["top_logprobs"][i]
        if ta is None:
            continue
        for tok, v in ta.items():
            spread = max(spread, abs(v))
            if tok in tb:
                worst = max(worst, abs(v - tb[tok]))
                compared += 1
            else:
                edge(i, tok, v, ta, tb)
        if top1_gap is not None and top2_gap(ta) > top1_gap:
            assert max(ta, key=ta.get) == max(tb, key=tb.get), (i, ta, tb)
    return worst, spread, compared


def top2_gap(top):
    v = sorted(top.values(), reverse=True)
    return v[0] - v[1]
