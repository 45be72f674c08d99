"""responses_client.py: drives a running pagoda server with the official
`openai` Python SDK's Responses API (client.responses), the way Codex and
the Agents SDK do: plain, streamed (the stream helper and its final
response; every raw event validated against the SDK's ResponseStreamEvent),
function tools with tool_choice required (the call parses: the constraint
holds it), a follow-up by previous_response_id carrying only the tool's
output (its prompt served from the prefix cache), text.format json_schema,
and errors (an unknown previous_response_id) as the SDK's exceptions.
Not for: starting or stopping the server (agents_client.sh does that).

usage: python responses_client.py BASE_URL API_KEY MODEL_LABEL
"""
import json
import sys
import urllib.request

import openai
from openai import OpenAI
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print(f"FAIL: {what}", file=sys.stderr)


WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
                          "required": ["city"]}}


def raw_create(client, **kw):
    raw = client.responses.with_raw_response.create(**kw)
    return Response.model_validate_json(raw.http_response.text), json.loads(raw.http_response.text)


def main():
    base_url, key, label = sys.argv[1], sys.argv[2], sys.argv[3]
    client = OpenAI(base_url=base_url + "/v1", api_key=key, max_retries=0, timeout=120)
    model = "pagoda"

    # plain: a message item with output_text
    r, j = raw_create(client, model=model, input="Once upon a time", max_output_tokens=16, temperature=0)
    check(j["object"] == "response" and j["id"].startswith("resp_"), f"shape {j}")
    check(r.status in ("completed", "incomplete") and r.output_text, f"plain {r.status} {r.output_text!r}")
    check(r.output[0].type == "message" and r.output[0].content[0].type == "output_text", f"items {r.output}")
    check(r.usage.output_tokens >= 1 and r.usage.input_tokens > 3, f"usage {r.usage}")
    plain = r.output_text

    # instructions and message items
    r2, _ = raw_create(client, model=model, instructions="You tell stories.", max_output_tokens=8, temperature=0,
                       input=[{"role": "user", "content": [{"type": "input_text", "text": "Once upon a time"}]}])
    check(r2.output_text and r2.instructions == "You tell stories.", f"instructions {r2}")

    # streamed: the helper's events and final response; the same greedy text
    # (cut at max_output_tokens it ends with response.incomplete, which
    # get_final_response does not take: the last event holds the response)
    deltas, final = [], None
    with client.responses.stream(model=model, input="Once upon a time", max_output_tokens=16, temperature=0) as s:
        for e in s:
            if e.type == "response.output_text.delta":
                deltas.append(e.delta)
            elif e.type in ("response.completed", "response.incomplete"):
                final = e.response
    # compared with a plain request made in the same state (the first one
    # prefilled the whole prompt; later ones hit the prefix cache and
    # recompute only its last rows, whose rounding may part the greedy text
    # at a near tie on a quantized model)
    r, _ = raw_create(client, model=model, input="Once upon a time", max_output_tokens=16, temperature=0)
    plain = r.output_text
    check(final is not None and final.status == r.status, f"the stream's last event {final}")
    check("".join(deltas) == plain and final.output_text == plain, f"streamed {deltas} {final.output_text!r}")

    # the raw events: each a valid ResponseStreamEvent, in the documented order
    ta = TypeAdapter(ResponseStreamEvent)
    req = urllib.request.Request(base_url + "/v1/responses", method="POST", data=json.dumps(
        {"model": model, "input": "Once upon a time", "max_output_tokens": 8, "stream": True}).encode(),
        headers={"authorization": "Bearer " + key, "content-type": "application/json"})
    types, seqs = [], []
    with urllib.request.urlopen(req, timeout=120) as resp:
        for line in resp:
            line = line.decode().rstrip("\n")
            if line.startswith("data: "):
                ev = ta.validate_python(json.loads(line[6:]))
                types.append(ev.type)
                seqs.append(ev.sequence_number)
    want = ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    check(types[:4] == want, f"first events {types[:5]}")
    check(types[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                         "response.incomplete"] and seqs == list(range(len(seqs))), f"last events {types[-4:]} {seqs}")

    # a function tool, a call required: the call parses
    r3, j3 = raw_create(client, model=model, input="What is the weather in Paris?", tools=[WEATHER],
                        tool_choice="required", parallel_tool_calls=False, max_output_tokens=140)
    calls = [o for o in r3.output if o.type == "function_call"]
    check(len(calls) == 1 and calls[0].name == "get_weather", f"a function_call item: {j3['output']}")
    args = json.loads(calls[0].arguments) if calls else {}
    check(isinstance(args.get("city"), str), f"arguments {args}")

    # streamed, with the tool: function_call_arguments events
    with client.responses.stream(model=model, input="Weather in Rome?", tools=[WEATHER], tool_choice="required",
                                 parallel_tool_calls=False, max_output_tokens=140) as s:
        ts = [e.type for e in s]
        fin = s.get_final_response()
    check("response.function_call_arguments.done" in ts and any(o.type == "function_call" for o in fin.output),
          f"streamed call {ts}")

    # the follow-up carries only the tool's output; the earlier turns come from the store
    r4, _ = raw_create(client, model=model, previous_response_id=r3.id, tools=[WEATHER], tool_choice="auto",
                       input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "Sunny"}],
                       max_output_tokens=8, temperature=0)
    check(r4.output and r4.previous_response_id == r3.id, f"follow-up {r4}")
    check(r4.usage.input_tokens > r3.usage.input_tokens, f"the follow-up's prompt holds the earlier turn {r4.usage}")
    r5, _ = raw_create(client, model=model, previous_response_id=r3.id, tools=[WEATHER], tool_choice="auto",
                       input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "Sunny"}],
                       max_output_tokens=8, temperature=0)
    check(r5.usage.input_tokens_details.cached_tokens > 0, f"a repeated follow-up hits the cache: {r5.usage}")

    # text.format json_schema: the output is the schema's JSON
    r6, _ = raw_create(client, model=model, input="A name:", max_output_tokens=100, text={"format": {
        "type": "json_schema", "name": "n", "strict": True, "schema": {
            "type": "object", "properties": {"name": {"type": "string", "maxLength": 6}}, "required": ["name"],
            "additionalProperties": False}}})
    try:
        check(isinstance(json.loads(r6.output_text).get("name"), str), f"json_schema {r6.output_text!r}")
    except ValueError:
        check(False, f"json_schema output is JSON: {r6.output_text!r}")

    # an unknown previous_response_id: the documented error
    try:
        client.responses.create(model=model, input="hi", previous_response_id="resp_nope", max_output_tokens=4)
        check(False, "an unknown previous_response_id must fail")
    except openai.BadRequestError as e:
        check(e.code == "previous_response_not_found" and e.param == "previous_response_id", f"error {e}")
    try:
        client.responses.create(model=model, max_output_tokens=4, input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}])
        check(False, "an image must fail")
    except openai.BadRequestError as e:
        check("input_image" in str(e) and e.param == "input", f"image error names the field: {e}")

    print(f"responses_client.py ({label}): {'ok' if failures == 0 else f'{failures} failures'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
