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
import json
import sys
import urllib.error

from integ_http import post_json, wait_health

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
        msgs = [{"role": "user", "content": f"Look up item {i}."}]
        r = post({"messages": msgs, "tools": TOOLS, "tool_choice": "required", "temperature": 1,
                  "seed": 9000 + i, "max_tokens": 60, "parallel_tool_calls": False, "logprobs": True})
        ch = r["choices"][0]
        m = ch["message"]
        toks = [c["token"] for c in (ch.get("logprobs") or {}).get("content") or []]
        if len(m.get("tool_calls") or []) != 1:
            print(f"FAIL: conversation {i}: turn 1 made no call: {m}")
            bad += 1
            continue
        calls += 1
        if toks.count("<tool_call>") != 1 or toks.count("</tool_call>") != 1 or "<" in toks:
            print(f"FAIL: conversation {i}: the tags not written as their tokens: {toks}")
            bad += 1
        o = r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"]
        msgs.append({"role": "assistant", "content": m.get("content"), "tool_calls": m["tool_calls"]})
        msgs.append({"role": "tool", "tool_call_id": m["tool_calls"][0]["id"], "content": "42"})
        r2 = post({"messages": msgs, "tools": TOOLS, "tool_choice": "none", "temperature": 0, "max_tokens": 1})
        c = r2["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
        if c < o - BLOCK:
            print(f"FAIL: conversation {i}: turn 2 found {c} cached of the {o} owed")
            bad += 1
        owed += o
        missed += max(o - c, 0)
    print(f"ctl_reuse owed {owed} missed {missed} calls {calls}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
