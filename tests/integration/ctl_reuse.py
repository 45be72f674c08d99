#!/usr/bin/env python3
"""ctl_reuse.py URL N: a Hermes-family model whose vocabulary has
<tool_call> and </tool_call> as one control token each (hermes_vocab.py,
every other byte its own token) writes its constrained calls with those
tokens, never spelled in plain pieces, and the next turn, whose prompt
tokenizes the tags to the tokens, finds the whole previous turn cached
(less one block: a block is shared only when full). stdlib only. N
conversations: turn 1 a required call (temperature 1, a seed each,
logprobs for the tokens written), turn 2 the call and its result sent
back. Prints "ctl_reuse owed O missed M calls C"; exit 1 on a failure."""
import sys
import urllib.error

from integ_http import call_turns, post_json, wait_health

URL, N = sys.argv[1], int(sys.argv[2])
BLOCK = 16
# small: every byte of the tool's rendering is a token, in a 512-token context
TOOLS = [{"type": "function", "function": {"name": "get", "parameters": {
    "type": "object", "properties": {"n": {"type": "integer", "maximum": 99}}, "required": ["n"]}}}]


def post(body):
    try:
        return post_json(URL + "/v1/chat/completions", body)
    except urllib.error.HTTPError as e:
        print(f"FAIL: HTTP {e.code}: {e.read().decode(errors='replace')}")
        raise


def main():
    wait_health(URL)
    owed = missed = calls = bad = 0
    for i in range(N):
        r, o, c = call_turns(post, f"Look up item {i}.", TOOLS, 9000 + i, 60, logprobs=True)
        ch = r["choices"][0]
        if o is None:
            print(f"FAIL: conversation {i}: turn 1 made no call: {ch['message']}")
            bad += 1
            continue
        calls += 1
        toks = [t["token"] for t in (ch.get("logprobs") or {}).get("content") or []]
        if toks.count("<tool_call>") != 1 or toks.count("</tool_call>") != 1 or "<" in toks:
            print(f"FAIL: conversation {i}: the tags not written as their tokens: {toks}")
            bad += 1
        if c < o - BLOCK:
            print(f"FAIL: conversation {i}: turn 2 found {c} cached of the {o} owed")
            bad += 1
        owed += o
        missed += max(o - c, 0)
    print(f"ctl_reuse owed {owed} missed {missed} calls {calls}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
