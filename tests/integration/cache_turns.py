#!/usr/bin/env python3
"""cache_turns.py URL: a ten-turn conversation with tools over chat
completions (stdlib only), each turn re-sending the whole conversation
with the model's last reply and one more user message, as an agent does.
Prints each turn's prompt_tokens and cached_tokens, and fails unless every
turn after the first reuses at least 90% of the previous turn's prompt.
Turn 5 sets tool_choice "none": the tools stay in its prompt too, so its
prefix is the same as the turns around it.
"""
import sys

from integ_check import append_reply
from integ_http import post_json, wait_health

URL = sys.argv[1]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
QUESTIONS = ["Hi! Who are you?", "What is the capital of France?", "And of Italy?", "Name a river there.",
             "How long is it?", "Tell me a fact about cats.", "And about dogs?", "What is 2+2?",
             "Say thanks in French.", "Goodbye!"]


def post(body):
    return post_json(URL + "/v1/chat/completions", body)


def main():
    wait_health(URL)
    msgs = [{"role": "system", "content": "You are a helpful assistant. Answer briefly."}]
    prev = None
    bad = 0
    for turn, q in enumerate(QUESTIONS, 1):
        msgs.append({"role": "user", "content": q})
        body = {"messages": msgs, "tools": TOOLS, "max_tokens": 24, "temperature": 0}
        if turn == 5:
            body["tool_choice"] = "none"
        r = post(body)
        u = r["usage"]
        pt = u["prompt_tokens"]
        ct = u.get("prompt_tokens_details", {}).get("cached_tokens", 0)
        share = ct / prev if prev else 0.0
        print(f"turn {turn:2d}: prompt_tokens {pt:4d} cached_tokens {ct:4d}"
              + (f" = {100 * share:5.1f}% of the previous prompt ({prev})" if prev else ""))
        if prev and share < 0.9:
            print(f"FAIL: turn {turn} reuses {100 * share:.1f}% of turn {turn - 1}'s prompt")
            bad += 1
        m = r["choices"][0]["message"]
        append_reply(msgs, m)
        prev = pt
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
