"""anthropic_client.py: drives a running pagoda server with the official
`anthropic` Python SDK, the way Claude-Code-style agents do: plain and
streamed messages (the stream helper and its final message), tools with
tool_choice any / tool (the calls parse: the constraint holds the model
to them), a multi-turn conversation with tool_result, count_tokens, the
x-api-key header, and errors raised as the SDK's exception classes. Every
answer is validated against the SDK's own pydantic types (strict
model_validate of the raw JSON, and of every streamed event).
Not for: starting or stopping the server (agents_client.sh does that).

usage: python anthropic_client.py BASE_URL API_KEY MODEL_LABEL
"""
import json
import sys

import urllib.error
import urllib.request

import anthropic
from anthropic import Anthropic
from anthropic.types import Message, MessageTokensCount, RawMessageStreamEvent
from pydantic import TypeAdapter

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print(f"FAIL: {what}", file=sys.stderr)


WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
                     "required": ["city"]},
}


# this SDK's create() has no sampling arguments (newer models fix them);
# the server takes them, so they go in the body
GREEDY = {"temperature": 0}


def raw_create(client, **kw):
    """messages.create, the answer validated strictly against Message."""
    raw = client.messages.with_raw_response.create(**kw)
    msg = Message.model_validate_json(raw.http_response.text, strict=False)
    return msg, json.loads(raw.http_response.text)


def post(url, key, body):
    """A raw POST with x-api-key (the stdlib: the SDK's own HTTP stack is
    not a public API): (status, response object to read lines from)."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"x-api-key": key, "content-type": "application/json"})
    try:
        r = urllib.request.urlopen(req, timeout=120)
        return r.status, r
    except urllib.error.HTTPError as e:
        return e.code, e


def main():
    base_url, key, label = sys.argv[1], sys.argv[2], sys.argv[3]
    client = Anthropic(base_url=base_url, api_key=key, max_retries=0, timeout=120)
    model = "pagoda"
    user = [{"role": "user", "content": "Once upon a time"}]

    # plain: a text block, usage, stop_reason
    msg, j = raw_create(client, model=model, max_tokens=16, messages=user, extra_body=GREEDY)
    check(j["type"] == "message" and j["role"] == "assistant" and j["id"].startswith("msg_"), f"shape {j}")
    check(len(msg.content) == 1 and msg.content[0].type == "text" and msg.content[0].text, f"content {msg.content}")
    check(msg.stop_reason in ("end_turn", "max_tokens"), f"stop_reason {msg.stop_reason}")
    u = msg.usage
    check(u.output_tokens >= 1 and u.input_tokens + (u.cache_read_input_tokens or 0) > 3, f"usage {u}")
    plain = msg.content[0].text

    # system as a string and as blocks; top_k / top_p / stop_sequences taken
    for system in ("You tell stories.", [{"type": "text", "text": "You tell stories."}]):
        m2, _ = raw_create(client, model=model, max_tokens=8, messages=user, system=system,
                           stop_sequences=["zzzz"], extra_body={"temperature": 0, "top_k": 5, "top_p": 0.9})
        check(m2.content and m2.content[0].type == "text", f"system {system!r}: {m2.content}")

    # streamed: the helper's text and final message; the same greedy text
    # as a plain request made in the same state. (Not the first plain one:
    # it prefilled the whole prompt, later ones hit the prefix cache and
    # recompute only its last rows, another batch shape, whose rounding may
    # part the greedy text at a near tie on a quantized model.)
    with client.messages.stream(model=model, max_tokens=16, messages=user, extra_body=GREEDY) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    msg, _ = raw_create(client, model=model, max_tokens=16, messages=user, extra_body=GREEDY)
    plain = msg.content[0].text
    check(text == plain, f"streamed text {text!r} == plain {plain!r}")
    check(final.content[0].type == "text" and final.content[0].text == text, f"final {final}")
    check(final.stop_reason == msg.stop_reason and final.usage.output_tokens == msg.usage.output_tokens,
          f"final {final.stop_reason} {final.usage}")

    # the raw event sequence, each event a valid RawMessageStreamEvent
    ta = TypeAdapter(RawMessageStreamEvent)
    types = []
    status, r = post(base_url + "/v1/messages", key,
                     {"model": model, "max_tokens": 8, "messages": user, "stream": True})
    check(status == 200, f"stream status {status}")
    event = None
    for line in r:
        line = line.decode().rstrip("\n")
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            d = json.loads(line[6:])
            if d.get("type") != "ping":  # not in the union: the SDK skips pings
                ta.validate_python(d)
            check(d["type"] == event, f"event name {event} is its type {d['type']}")
            types.append(d["type"])
    r.close()
    check(types[:2] == ["message_start", "ping"] and types[-2:] == ["message_delta", "message_stop"],
          f"event order {types}")
    check(types[2] == "content_block_start" and types[-3] == "content_block_stop", f"blocks {types}")

    # tools, a call required (any) and a named one (tool): tool_use parsed
    # one call each (disable_parallel_tool_use): the output ends after it
    for choice in ({"type": "any", "disable_parallel_tool_use": True}, {"type": "tool", "name": "get_weather"}):
        m3, j3 = raw_create(client, model=model, max_tokens=140, messages=[
            {"role": "user", "content": "What is the weather in Paris?"}], tools=[WEATHER], tool_choice=choice)
        calls = [b for b in m3.content if b.type == "tool_use"]
        check(len(calls) == 1, f"{choice}: a tool_use block: {j3['content']}")
        check(m3.stop_reason == "tool_use", f"{choice}: stop_reason {m3.stop_reason}")
        for c in calls:
            check(c.name == "get_weather" and isinstance(c.input, dict) and isinstance(c.input.get("city"), str)
                  and c.id.startswith("toolu_"), f"{choice}: call {c}")
    call = calls[0]

    # streamed with a tool: input_json_delta gathered into the final block's input
    with client.messages.stream(model=model, max_tokens=140, tools=[WEATHER],
                                tool_choice={"type": "any", "disable_parallel_tool_use": True},
                                messages=[{"role": "user", "content": "Weather in Rome?"}]) as s:
        fin = s.get_final_message()
    scalls = [b for b in fin.content if b.type == "tool_use"]
    check(scalls and isinstance(scalls[0].input, dict) and "city" in scalls[0].input and
          fin.stop_reason == "tool_use", f"streamed call {fin}")

    # multi-turn: the tool's result goes back; the model answers
    turns = [{"role": "user", "content": "What is the weather in Paris?"},
             {"role": "assistant", "content": [{"type": "tool_use", "id": call.id, "name": call.name,
                                                "input": call.input}]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                           "content": "Sunny, 21 C"}]}]
    # tool_choice none keeps the tools in the prompt (its prefix stays the
    # same across turns): on stories260K's 512 tokens that leaves room for 6
    m4, _ = raw_create(client, model=model, max_tokens=6, messages=turns, tools=[WEATHER], extra_body=GREEDY,
                       tool_choice={"type": "none"})
    check(m4.content and m4.content[0].type == "text" and m4.stop_reason in ("end_turn", "max_tokens"),
          f"after tool_result {m4}")
    # the same conversation again: its prompt comes from the prefix cache
    m5, _ = raw_create(client, model=model, max_tokens=6, messages=turns, tools=[WEATHER], extra_body=GREEDY,
                       tool_choice={"type": "none"})
    total = m5.usage.input_tokens + (m5.usage.cache_read_input_tokens or 0)
    check(total == m4.usage.input_tokens + (m4.usage.cache_read_input_tokens or 0), f"same prompt {m4.usage} {m5.usage}")
    check((m5.usage.cache_read_input_tokens or 0) > 0, f"cache_read_input_tokens on a repeat: {m5.usage}")

    # count_tokens: the prompt's length, the same as the answer's usage says;
    # the one exception, at the context's end (stories260K: 512 tokens): the
    # request's max_tokens (6) may have cut short its realignment to the
    # model's own tokens of the call, which count_tokens (no max_tokens)
    # counts in full (docs/http-api.md, "The model's own call, reused")
    cnt = client.messages.count_tokens(model=model, messages=turns, tools=[WEATHER], tool_choice={"type": "none"})
    at_edge = label == "stories" and total < cnt.input_tokens and cnt.input_tokens + 6 > 512
    check(isinstance(cnt, MessageTokensCount) and (cnt.input_tokens == total or at_edge),
          f"count_tokens {cnt} vs {total}")

    # errors: the SDK's classes, Anthropic's error shape
    try:
        client.messages.create(model=model, messages=user)  # type: ignore[call-arg]
        check(False, "max_tokens missing must fail")
    except TypeError:
        pass  # the SDK itself refuses: ask the server directly
    status, r = post(base_url + "/v1/messages", key, {"model": model, "messages": user})
    j = json.loads(r.read())
    check(status == 400 and j["type"] == "error" and j["error"]["type"] == "invalid_request_error" and
          "max_tokens" in j["error"]["message"], f"missing max_tokens: {status} {j}")
    try:
        client.messages.create(model=model, max_tokens=8, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}])
        check(False, "an image must fail")
    except anthropic.BadRequestError as e:
        check("image" in str(e) and "messages.0.content.0" in str(e), f"image error names the field: {e}")
    try:
        client.messages.create(model=model, max_tokens=8, messages=[{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_nope", "content": "x"}]}])
        check(False, "an unknown tool_use_id must fail")
    except anthropic.BadRequestError as e:
        check("toolu_nope" in str(e), f"unknown tool_use_id: {e}")
    try:
        client.messages.create(model=model, max_tokens=8, messages=user, tools=[{
            "name": "f", "input_schema": {"type": "object", "properties": {"a": {"type": "nonsense"}}}}])
        check(False, "a tool schema that does not compile must fail")
    except anthropic.BadRequestError as e:
        check("tools" in str(e), f"bad schema error names tools: {e}")
    try:
        Anthropic(base_url=base_url, api_key="wrong", max_retries=0).messages.create(
            model=model, max_tokens=8, messages=user)
        check(False, "a wrong key must fail")
    except anthropic.AuthenticationError as e:
        check(isinstance(e.body, dict) and e.body.get("type") == "error" and
              e.body["error"]["type"] == "authentication_error", f"401 body {e.body}")

    print(f"anthropic_client.py ({label}): {'ok' if failures == 0 else f'{failures} failures'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
