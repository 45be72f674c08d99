#!/usr/bin/env python3
"""family_reuse.py URL FAMILY N: the call memo's reuse per template family
(issue 28), stdlib only. N two-turn conversations on a server with the
prefix cache (a random-weight model, the chat template forced to FAMILY):
turn 1 asks for a call (tool_choice "required", temperature 1, a seed per
conversation, so the model spaces its call's JSON its own way), turn 2
sends the call and its result back. Prints, for turn 2, the tokens owed
(turn 1's prompt and reply) and how many of them the cache missed: one
line "FAMILY owed O missed M calls C" summed over the N conversations.
Checks (exit 1) only what holds for any trajectory: every turn 1 made one
call, and turn 2 found at least something cached. family_reuse.sh runs it
with the memo on and off ([http] call_memo) for the table in
docs/http-api.md. Turn 1's max_tokens leaves room for DeepSeek's markers,
many tokens each in the GPT-2 vocabulary (a call cut short leaves its
rest in content, which the history writes before the call)."""
import sys

from integ_http import call_turns, post_json, wait_health

URL, FAMILY, N = sys.argv[1], sys.argv[2], int(sys.argv[3])
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"k": {"enum": ["x", "y"]}, "n": {"type": "integer", "maximum": 99}},
    "required": ["k", "n"], "additionalProperties": False}}}]


def post(body):
    return post_json(URL + "/v1/chat/completions", body)


def main():
    wait_health(URL)
    owed = missed = calls = 0
    bad = 0
    for i in range(N):
        r, o, c = call_turns(post, f"Look up item {i}.", TOOLS, 7000 + i, 200)
        if o is None:
            print(f"FAIL: {FAMILY} conversation {i}: turn 1 made no call: {r['choices'][0]['message']}")
            bad += 1
            continue
        calls += 1
        if c == 0:
            print(f"FAIL: {FAMILY} conversation {i}: turn 2 found nothing cached")
            bad += 1
        owed += o
        missed += max(o - c, 0)
    print(f"{FAMILY} owed {owed} missed {missed} calls {calls}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
