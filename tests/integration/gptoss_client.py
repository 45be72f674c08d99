"""gptoss_client.py: the official `openai` Python client against a pagoda
server of a gpt-oss model (random weights, gen-model's gpt-oss-tiny with
the harmony vocabulary tests/fixtures/gptoss/harmony-vocab.gguf, whose
chat template makes pagoda pick the harmony format): chat completions
plain and streamed, with the analysis channel in `reasoning_content` and
the final channel as `content`; a tool call (tool_choice required: the
constraint holds the call in harmony's commentary syntax) whole and
streamed, and the conversation carried on with the call, the text beside
it and the tool's result; the Responses API plain (a reasoning item and the
message), streamed (every raw event a valid ResponseStreamEvent) and with a
function tool. Every body validates against the SDK's own types, and no
harmony markup (<|...|>) reaches a client.

A random model writes no channels of its own, so the replies that must
hold both channels are held by pagoda's `grammar` extension (extra_body)
to harmony's shape: an analysis message of [a-z ] letters, then the final
message "Answer:" and [a-z ] letters; what comes back must then be
exactly those two parts, in their fields.

Not for: starting or stopping the server (gptoss_client.sh does that).

usage: python gptoss_client.py BASE_URL API_KEY
"""
import json
import re
import sys
import urllib.request

from integ_check import check, failures
from openai import OpenAI
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter


GRAMMAR = ('root ::= "<|channel|>analysis<|message|>" [a-z ]{2,24} '
           '"<|end|><|start|>assistant<|channel|>final<|message|>Answer:" [a-z ]{2,24}')
REASON = re.compile(r"[a-z ]{2,24}")
ANSWER = re.compile(r"Answer:[a-z ]{2,24}")
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
                   "required": ["city"]}}}
MSGS = [{"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What is the weather in Paris?"}]


def no_markup(text, what):
    check("<|" not in text and "|>" not in text, f"{what}: harmony markup reached the client: {text[:300]!r}")


def raw_post(base_url, key, path, body):
    req = urllib.request.Request(base_url + path, method="POST", data=json.dumps(body).encode(),
                                 headers={"authorization": "Bearer " + key, "content-type": "application/json"})
    return urllib.request.urlopen(req, timeout=120)


def sse(resp):
    for line in resp:
        line = line.decode().rstrip("\n")
        if line.startswith("data: ") and line != "data: [DONE]":
            yield line[6:]


def chat(client, base_url, key, model):
    # plain: the two channels in their fields, the body a valid ChatCompletion
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=MSGS, max_tokens=200, temperature=0, reasoning_effort="low",
        extra_body={"grammar": GRAMMAR})
    text = raw.http_response.text
    r = ChatCompletion.model_validate_json(text)
    no_markup(text, "chat body")
    msg = r.choices[0].message
    reason = (msg.model_extra or {}).get("reasoning_content")
    check(msg.content is not None and ANSWER.fullmatch(msg.content), f"content is the final channel: {msg.content!r}")
    check(reason is not None and REASON.fullmatch(reason), f"reasoning_content is the analysis: {reason!r}")
    check(r.choices[0].finish_reason == "stop", f"finish_reason {r.choices[0].finish_reason}")

    # streamed: every chunk a valid ChatCompletionChunk; the same two parts
    parts, rparts = [], []
    with raw_post(base_url, key, "/v1/chat/completions", {
            "model": model, "messages": MSGS, "max_tokens": 200, "temperature": 0, "reasoning_effort": "low",
            "grammar": GRAMMAR, "stream": True}) as resp:
        for data in sse(resp):
            no_markup(data, "chat chunk")
            ch = ChatCompletionChunk.model_validate_json(data)
            for c in ch.choices:
                if c.delta.content:
                    parts.append(c.delta.content)
                rc = (c.delta.model_extra or {}).get("reasoning_content")
                if rc:
                    rparts.append(rc)
    check("".join(parts) == msg.content, f"streamed content {''.join(parts)!r} vs {msg.content!r}")
    check("".join(rparts) == reason, f"streamed reasoning {''.join(rparts)!r} vs {reason!r}")

    # the SDK's own stream helper, with the usage chunk
    sparts, usage = [], None
    for ch in client.chat.completions.create(model=model, messages=MSGS, max_tokens=200, temperature=0,
                                             extra_body={"grammar": GRAMMAR, "reasoning_effort": "low"},
                                             stream=True, stream_options={"include_usage": True}):
        usage = ch.usage or usage
        for c in ch.choices:
            sparts.append(c.delta.content or "")
    check("".join(sparts) == msg.content and usage and usage.completion_tokens == r.usage.completion_tokens,
          f"SDK stream {''.join(sparts)!r} usage {usage}")

    # no grammar: whatever the random model writes, no markup in the fields
    r2 = client.chat.completions.with_raw_response.create(model=model, messages=MSGS, max_tokens=48,
                                                          temperature=0)
    ChatCompletion.model_validate_json(r2.http_response.text)
    no_markup(r2.http_response.text, "unconstrained chat body")


def tools(client, base_url, key, model):
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=MSGS, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False,
        max_tokens=160, temperature=0)
    text = raw.http_response.text
    r = ChatCompletion.model_validate_json(text)
    no_markup(text, "tool call body")
    calls = r.choices[0].message.tool_calls or []
    check(len(calls) == 1 and calls[0].function.name == "get_weather", f"one get_weather call: {calls}")
    args = json.loads(calls[0].function.arguments) if calls else {}
    check(isinstance(args.get("city"), str), f"arguments {args}")
    check(r.choices[0].finish_reason == "tool_calls", f"finish_reason {r.choices[0].finish_reason}")
    check(not r.choices[0].message.content, f"no content beside the call: {r.choices[0].message.content!r}")

    # streamed: the call's deltas assemble to the same call
    name, sargs = "", ""
    with raw_post(base_url, key, "/v1/chat/completions", {
            "model": model, "messages": MSGS, "tools": [WEATHER], "tool_choice": "required",
            "parallel_tool_calls": False, "max_tokens": 160, "temperature": 0, "stream": True}) as resp:
        for data in sse(resp):
            no_markup(data, "tool call chunk")
            ch = ChatCompletionChunk.model_validate_json(data)
            for c in ch.choices:
                for tc in c.delta.tool_calls or []:
                    name += tc.function.name or "" if tc.function else ""
                    sargs += tc.function.arguments or "" if tc.function else ""
    check(name == "get_weather" and calls and json.loads(sargs) == args, f"streamed call {name} {sargs!r}")

    # the conversation goes on: the call (with text beside it, harmony's
    # analysis message) and its result rendered back into the prompt
    call = {"id": calls[0].id, "type": "function",
            "function": {"name": "get_weather", "arguments": calls[0].function.arguments}} if calls else {}
    for beside in (None, "Looking it up."):
        turn = MSGS + [{"role": "assistant", "content": beside, "tool_calls": [call]},
                       {"role": "tool", "tool_call_id": call.get("id"), "content": "Sunny, 22C"}]
        raw2 = client.chat.completions.with_raw_response.create(
            model=model, messages=turn, tools=[WEATHER], tool_choice="none", max_tokens=200, temperature=0,
            extra_body={"grammar": GRAMMAR})
        r2 = ChatCompletion.model_validate_json(raw2.http_response.text)
        no_markup(raw2.http_response.text, "after the tool's result")
        check(ANSWER.fullmatch(r2.choices[0].message.content or ""), f"answer after the result: {r2.choices[0]}")
        check(r2.usage.prompt_tokens > r.usage.prompt_tokens, f"the prompt holds the call and result: {r2.usage}")


def responses(client, base_url, key, model):
    raw = client.responses.with_raw_response.create(model=model, input="What is the weather in Paris?",
                                                    instructions="Answer briefly.", reasoning={"effort": "low"},
                                                    max_output_tokens=200, temperature=0,
                                                    extra_body={"grammar": GRAMMAR})
    text = raw.http_response.text
    r = Response.model_validate_json(text)
    no_markup(text, "response body")
    kinds = [o.type for o in r.output]
    check(kinds == ["reasoning", "message"], f"a reasoning item, then the message: {kinds}")
    rs = [o for o in r.output if o.type == "reasoning"]
    rtext = "".join(c.text for c in (rs[0].content or [])) if rs else ""
    check(REASON.fullmatch(rtext), f"the reasoning item is the analysis: {rtext!r}")
    check(ANSWER.fullmatch(r.output_text), f"output_text is the final channel: {r.output_text!r}")
    check(r.status == "completed", f"status {r.status}")

    ta = TypeAdapter(ResponseStreamEvent)
    deltas, rdeltas, final = [], [], None
    with raw_post(base_url, key, "/v1/responses", {
            "model": model, "input": "What is the weather in Paris?", "instructions": "Answer briefly.",
            "reasoning": {"effort": "low"}, "max_output_tokens": 200, "temperature": 0, "grammar": GRAMMAR,
            "stream": True}) as resp:
        for data in sse(resp):
            no_markup(data, "response event")
            ev = ta.validate_json(data)
            if ev.type == "response.output_text.delta":
                deltas.append(ev.delta)
            elif ev.type == "response.reasoning_text.delta":
                rdeltas.append(ev.delta)
            elif ev.type == "response.completed":
                final = ev.response
    check("".join(deltas) == r.output_text and "".join(rdeltas) == rtext,
          f"streamed {''.join(deltas)!r} / {''.join(rdeltas)!r}")
    check(final is not None and final.output_text == r.output_text, f"the completed event's response {final}")

    fn = dict(WEATHER["function"], type="function")
    raw3 = client.responses.with_raw_response.create(model=model, input="What is the weather in Paris?",
                                                     tools=[fn], tool_choice="required", parallel_tool_calls=False,
                                                     max_output_tokens=160)
    r3 = Response.model_validate_json(raw3.http_response.text)
    no_markup(raw3.http_response.text, "response with a call")
    calls = [o for o in r3.output if o.type == "function_call"]
    check(len(calls) == 1 and calls[0].name == "get_weather", f"a function_call item: {r3.output}")
    check(calls and isinstance(json.loads(calls[0].arguments).get("city"), str), f"arguments {calls}")


def main():
    base_url, key = sys.argv[1], sys.argv[2]
    client = OpenAI(base_url=base_url + "/v1", api_key=key, max_retries=0, timeout=120)
    ids = [m.id for m in client.models.list().data]
    check(len(ids) == 1 and "gpt-oss" in ids[0], f"the gpt-oss model listed: {ids}")
    chat(client, base_url, key, ids[0])
    tools(client, base_url, key, ids[0])
    responses(client, base_url, key, ids[0])
    print("gptoss_client:", "OK" if not failures() else f"{failures()} failures")
    sys.exit(1 if failures() else 0)


if __name__ == "__main__":
    main()
