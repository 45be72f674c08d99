"""agent_turns.py: a ten-turn agent conversation with tools each turn, as
Claude Code, Codex or an agent framework sends it, over the agent APIs with
the official SDKs, three ways:
  messages  /v1/messages (anthropic SDK), the whole conversation re-sent;
  responses /v1/responses (openai SDK), the whole input re-sent, the earlier
            output items passed back as they came;
  chained   /v1/responses with previous_response_id, each turn carrying
            only its new items (the instructions and tools re-sent, as the
            Agents SDK does).
Two turns require a call (tool_choice any / required), so the history holds
tool calls and their results; one turn turns tools off (tool_choice none).
Every turn after the first must be served at least 90% from the prefix
cache: cache_read_input_tokens (Messages) or
input_tokens_details.cached_tokens (Responses) over the previous turn's
whole prompt (issue 28). Prints each turn's figures.
Not for: starting the server (agents_client.sh), the SDKs' other calls
(anthropic_client.py, responses_client.py).

usage: python agent_turns.py BASE_URL API_KEY [messages|responses|chained ...]
"""
import sys

from anthropic import Anthropic
from integ_check import check, failures
from openai import OpenAI

SYSTEM = "You are a helpful assistant. Answer briefly."
QUESTIONS = ["Hi! Who are you?", "What is the capital of France?", "What is the weather in Paris?",
             "Name a river there.", "How long is it?", "Tell me a fact about cats.",
             "And the weather in Rome?", "What is 2+2?", "Say thanks in French.", "Goodbye!"]
CALL_TURNS = {3, 7}     # a call is required: the history holds calls and results
NONE_TURN = 5           # tools off for one turn: they stay in the prompt
MAX_TOKENS = 16
SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}}, "required": ["city"]}


def report(mode, turn, prompt, cached, prev):
    share = cached / prev if prev else 0.0
    print(f"{mode:9s} turn {turn:2d}: prompt {prompt:4d} cached {cached:4d}"
          + (f" = {100 * share:5.1f}% of the previous prompt ({prev})" if prev else ""))
    if prev:
        check(share >= 0.9, f"{mode} turn {turn} reuses {100 * share:.1f}% of turn {turn - 1}'s prompt ({prev})")
        check(prompt > prev, f"{mode} turn {turn}: the prompt grows ({prev} -> {prompt})")


def messages(base_url, key):
    claude = Anthropic(base_url=base_url, api_key=key, max_retries=0, timeout=300)
    tools = [{"name": "get_weather", "description": "The weather in a city.", "input_schema": SCHEMA}]
    msgs, prev, pending = [], 0, []
    for turn, q in enumerate(QUESTIONS, 1):
        msgs.append({"role": "user", "content": pending + [{"type": "text", "text": q}]})
        pending = []
        kw = {}
        if turn in CALL_TURNS:
            kw["tool_choice"] = {"type": "any", "disable_parallel_tool_use": True}
        elif turn == NONE_TURN:
            kw["tool_choice"] = {"type": "none"}
        m = claude.messages.create(model="pagoda", max_tokens=MAX_TOKENS if turn not in CALL_TURNS else 48,
                                   system=SYSTEM, tools=tools, messages=msgs, extra_body={"temperature": 0}, **kw)
        u = m.usage
        cached = u.cache_read_input_tokens or 0
        report("messages", turn, u.input_tokens + cached, cached, prev)
        prev = u.input_tokens + cached
        # the reply as the SDK gives it, passed back as the next turn's history
        msgs.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]})
        uses = [b for b in m.content if b.type == "tool_use"]
        if turn in CALL_TURNS:
            check(len(uses) == 1 and uses[0].name == "get_weather", f"messages turn {turn}: a call {m.content}")
        pending = [{"type": "tool_result", "tool_use_id": b.id, "content": "sunny, 22C"} for b in uses]


def responses(base_url, key, chained):
    mode = "chained" if chained else "responses"
    client = OpenAI(base_url=base_url + "/v1", api_key=key, max_retries=0, timeout=300)
    tools = [{"type": "function", "name": "get_weather", "description": "The weather in a city.",
              "parameters": SCHEMA}]
    items, prev, prev_id, pending = [], 0, None, []
    for turn, q in enumerate(QUESTIONS, 1):
        new = pending + [{"role": "user", "content": q}]
        pending = []
        kw = {}
        if turn in CALL_TURNS:
            kw["tool_choice"], kw["parallel_tool_calls"] = "required", False
        elif turn == NONE_TURN:
            kw["tool_choice"] = "none"
        if chained and prev_id:
            kw["previous_response_id"] = prev_id
            inp = new
        else:
            items += new
            inp = items
        r = client.responses.create(model="pagoda", instructions=SYSTEM, input=inp, tools=tools, temperature=0,
                                    max_output_tokens=MAX_TOKENS if turn not in CALL_TURNS else 48, **kw)
        u = r.usage
        report(mode, turn, u.input_tokens, u.input_tokens_details.cached_tokens, prev)
        prev, prev_id = u.input_tokens, r.id
        if not chained:
            items += [o.model_dump(exclude_none=True) for o in r.output]
        calls = [o for o in r.output if o.type == "function_call"]
        if turn in CALL_TURNS:
            check(len(calls) == 1 and calls[0].name == "get_weather", f"{mode} turn {turn}: a call {r.output}")
        pending = [{"type": "function_call_output", "call_id": c.call_id, "output": "sunny, 22C"} for c in calls]


def main():
    base_url, key = sys.argv[1], sys.argv[2]
    modes = sys.argv[3:] or ["messages", "responses", "chained"]
    for mode in modes:
        if mode == "messages":
            messages(base_url, key)
        else:
            responses(base_url, key, mode == "chained")
    print(f"agent_turns.py ({' '.join(modes)}): {'ok' if failures() == 0 else f'{failures()} failures'}")
    return 1 if failures() else 0


if __name__ == "__main__":
    sys.exit(main())
