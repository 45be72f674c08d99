#!/usr/bin/env python3
"""perplexity_http.py: `pagoda perplexity`'s figure computed by a client over
HTTP, through /tokenize and /v1/completions with echo + logprobs and
max_tokens 0 (docs/perplexity.md). Standard library only.

    python3 docs/examples/perplexity_http.py --url http://127.0.0.1:8080 \
        --file /usr/share/common-licenses/GPL-3 --ctx 512 [--chunks N] [--parallel 4]

The server's [engine] max_seq_len must be at least --ctx. Not for: anything
but showing that the HTTP path measures what the tool measures.
"""
import argparse
import concurrent.futures
import json
import math
import sys
import urllib.request


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--file", required=True)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=0)
    ap.add_argument("--parallel", type=int, default=4)
    a = ap.parse_args()
    text = open(a.file, encoding="utf-8").read()

    # the model's BOS, if it adds one: what an empty prompt tokenizes to
    bos = post(a.url, "/tokenize", {"prompt": "", "add_special_tokens": True})["tokens"]
    ids = bos + post(a.url, "/tokenize", {"prompt": text, "add_special_tokens": False})["tokens"]
    n_chunks = len(ids) // a.ctx
    if a.chunks:
        n_chunks = min(n_chunks, a.chunks)
    first = a.ctx // 2

    def score(c):
        chunk = ids[c * a.ctx:(c + 1) * a.ctx]
        if bos:
            chunk[0] = bos[0]
        out = post(a.url, "/v1/completions", {"prompt": chunk, "echo": True, "logprobs": 0,
                                               "max_tokens": 0, "temperature": 0})
        lps = out["choices"][0]["logprobs"]["token_logprobs"]
        assert len(lps) == a.ctx and lps[0] is None
        return [-x for x in lps[first + 1:]]

    nll = nll2 = 0.0
    count = 0
    with concurrent.futures.ThreadPoolExecutor(a.parallel) as ex:
        for c, vals in enumerate(ex.map(score, range(n_chunks))):
            nll += sum(vals)
            nll2 += sum(v * v for v in vals)
            count += len(vals)
            print(f"[{c + 1}]{math.exp(nll / count):.4f}", end="," if (c + 1) % 10 else "\n",
                  flush=True)
    mean = nll / count
    ppl = math.exp(mean)
    var = nll2 / count - mean * mean
    err = math.sqrt(var / (count - 1)) * ppl if var > 0 and count > 1 else 0.0
    print(f"\nFinal estimate: PPL = {ppl:.4f} +/- {err:.5f} ({n_chunks} chunks over HTTP)")


if __name__ == "__main__":
    sys.exit(main())
