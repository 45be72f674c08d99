"""openai_structured.py: structured output and tool calls through the
official `openai` Python client, the way applications use them:
response_format json_schema (also from a pydantic model with
chat.completions.parse) and json_object, tools with tool_choice "required"
and a named function, streamed tool-call deltas, the call and its result
sent back, and the client's BadRequestError for a bad schema. Run by
openai_client.sh against stories260K (whose outputs are valid only because
of the token mask) and, when it is present, SmolLM2-135M-Instruct.
Every assertion holds for any trajectory the model may sample (so on any
host's float rounding): each schema here bounds its output, with the
engine's whitespace (nothing or one space between a schema's tokens) and
six bytes at most a string character (an escape), below max_tokens, so
the output must end ("stop" / "tool_calls"); where nothing bounds it
(json_object, tool_choice "auto") a "length" is allowed and only what
ended is checked. A token is at least a byte, so bytes bound tokens.
Not for: starting the server (openai_client.sh).

usage: python openai_structured.py BASE_URL API_KEY stories|smollm2
"""
import json
import sys

import openai
import pydantic
from openai import OpenAI

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print(f"FAIL: {what}", file=sys.stderr)


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"enum": ["Paris", "Oslo", "Lima"]},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}


def valid_person(v):
    return (isinstance(v, dict) and set(v) == {"name", "age", "city"} and isinstance(v["name"], str)
            and len(v["name"]) <= 12 and isinstance(v["age"], int) and 0 <= v["age"] <= 120
            and v["city"] in ("Paris", "Oslo", "Lima"))


class City(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=12)
    population: int = pydantic.Field(ge=0, le=40_000_000)
    coastal: bool


def weather_tool(city, units):
    return {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": city,
                               "unit": {"enum": units}},
                "required": ["city", "unit"],
                "additionalProperties": False,
            },
        },
    }


def main():
    base_url, key, kind = sys.argv[1], sys.argv[2], sys.argv[3]
    smol = kind == "smollm2"
    # a hang detector, not a speed limit: SmolLM2's longest case takes
    # minutes on 2 cores shared with other work
    client = OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=300)
    model = client.models.list().data[0].id
    temp = 0 if smol else 1  # stories260K: sampling shows the mask does the work
    # the longest PERSON is 48 bytes and 12 characters of name (120 bytes at
    # most), the longest City 61 and 12 (133): both end within max_tokens
    max_tokens = 200 if smol else 300

    # response_format json_schema, several seeds: every output parses and validates
    for seed in range(3):
        r = client.chat.completions.create(
            model=model, temperature=temp, seed=seed, max_tokens=max_tokens,
            messages=[{"role": "user", "content": "Describe a person who lives in a city, as JSON."}],
            response_format={"type": "json_schema",
                             "json_schema": {"name": "person", "strict": True, "schema": PERSON}})
        content = r.choices[0].message.content
        check(r.choices[0].finish_reason == "stop", f"json_schema finish {r.choices[0].finish_reason}")
        try:
            check(valid_person(json.loads(content)), f"json_schema output invalid: {content!r}")
        except json.JSONDecodeError:
            check(False, f"json_schema output is not JSON: {content!r}")

    # a pydantic model through the client's parse helper (strict schema)
    parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse
    try:
        p = parse(model=model, temperature=temp, max_tokens=max_tokens, response_format=City,
                  messages=[{"role": "user", "content": "Tell me about Oslo."}])
        parsed = p.choices[0].message.parsed
        check(isinstance(parsed, City) and p.choices[0].finish_reason == "stop",
              f"parse: {p.choices[0].finish_reason} {p.choices[0].message.content!r}")
    except openai.LengthFinishReasonError as e:
        # the client's clean answer to "length"; City's bound (133 bytes)
        # says it cannot happen within max_tokens
        check(False, f"parse ran to max_tokens {max_tokens} though City's output is at most 133 bytes: "
                     f"{e.completion.choices[0].message.content!r}")

    # json_object
    r = client.chat.completions.create(
        model=model, temperature=0, max_tokens=max_tokens, response_format={"type": "json_object"},
        messages=[{"role": "user", "content": "Give me a JSON object about cats."}])
    if r.choices[0].finish_reason == "stop":
        check(isinstance(json.loads(r.choices[0].message.content), dict), "json_object output")

    # tools: required (one call) and a named function, then streamed; tmax
    # always holds a call: on SmolLM2 102 bytes of framing and a city of up
    # to 16 characters of 6 bytes; on stories260K, whose 512-token context
    # the tools block mostly takes (about 110 tokens left), enums: 97 bytes
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    units = ["celsius", "fahrenheit"] if smol else ["C", "F"]
    WEATHER = weather_tool({"type": "string", "maxLength": 16} if smol
                           else {"enum": ["Oslo", "Lima"]}, units)
    tmax = 200 if smol else 110
    temp = 0
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        r = client.chat.completions.create(model=model, temperature=temp, seed=1, max_tokens=tmax,
                                           messages=msgs, tools=[WEATHER], tool_choice=choice,
                                           parallel_tool_calls=False)
        m = r.choices[0].message
        check(r.choices[0].finish_reason == "tool_calls", f"tools finish {r.choices[0].finish_reason}")
        check(m.tool_calls and len(m.tool_calls) == 1, f"one tool call: {m}")
        if m.tool_calls:
            call = m.tool_calls[0]
            args = json.loads(call.function.arguments)
            check(call.type == "function" and call.function.name == "get_weather" and call.id,
                  f"call {call}")
            check(set(args) == {"city", "unit"} and args["unit"] in units,
                  f"arguments {args}")
            # the call and its result go back in
            back = msgs + [m.model_dump(exclude_none=True),
                           {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}]
            r2 = client.chat.completions.create(model=model, temperature=0, max_tokens=12,
                                                messages=back)
            check(r2.choices[0].message.role == "assistant", "round trip answered")

    calls, finish = {}, None
    for ch in client.chat.completions.create(model=model, temperature=temp, seed=2, max_tokens=tmax,
                                             messages=msgs, tools=[WEATHER], tool_choice="required",
                                             parallel_tool_calls=False, stream=True):
        for c in ch.choices:
            for tc in c.delta.tool_calls or []:
                d = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                if tc.function and tc.function.name:
                    d["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    d["arguments"] += tc.function.arguments
            finish = c.finish_reason or finish
    check(finish == "tool_calls" and len(calls) == 1, f"streamed tools: {finish} {calls}")
    for d in calls.values():
        check(d["name"] == "get_weather" and "city" in json.loads(d["arguments"]), f"streamed call {d}")

    # "auto": free text until a <tool_call> block opens, then a call held to
    # the function's parameters; whatever the model chooses, each call read
    # back is a valid get_weather call and the finish reason agrees
    # ("length" allowed: free text has no bound, so no need for tmax's room)
    for seed in range(3):
        r = client.chat.completions.create(model=model, temperature=1.0, seed=seed, max_tokens=120 if smol else 110,
                                           messages=[{"role": "user", "content": "Call get_weather for Paris."}],
                                           tools=[WEATHER], tool_choice="auto")
        m = r.choices[0].message
        for call in m.tool_calls or []:
            args = json.loads(call.function.arguments)
            check(call.function.name == "get_weather" and set(args) <= {"city", "unit"} and "city" in args,
                  f"auto call {call}")
        check(r.choices[0].finish_reason in (("tool_calls",) if m.tool_calls else ("stop",)) + ("length",),
              f"auto finish {r.choices[0].finish_reason} with {len(m.tool_calls or [])} calls")
        check(m.tool_calls or m.content is not None, f"auto: neither text nor calls: {m}")

    # errors: a bad parameters schema, a keyword strict mode refuses
    bad_tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}}}}
    try:
        client.chat.completions.create(model=model, messages=msgs, tools=[bad_tool], max_tokens=5)
        check(False, "a bad parameters schema was accepted")
    except openai.BadRequestError as e:
        check("parameters" in str(e) and "points to nothing" in str(e), f"400: {e}")
    try:
        client.chat.completions.create(
            model=model, messages=msgs, max_tokens=5,
            response_format={"type": "json_schema", "json_schema": {
                "name": "x", "strict": True, "schema": {"type": "array", "contains": {"type": "integer"}}}})
        check(False, "an unsupported keyword was accepted under strict")
    except openai.BadRequestError as e:
        check("contains" in str(e), f"400: {e}")

    print(f"openai {openai.__version__} on {kind}: response_format, parse, tools and errors checked, "
          f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
