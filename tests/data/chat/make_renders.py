#!/usr/bin/env python3
"""Expected chat renderings for test_chat_template's reference cases: the
reference Jinja templates in llama.cpp's models/templates folder rendered
by jinja2 the way transformers' apply_chat_template does (trim_blocks,
lstrip_blocks, a sandbox, raise_exception and strftime_now), written to
renders.json beside this script. Only the expected text is committed;
the templates stay in llama.cpp.

Usage: python3 tests/data/chat/make_renders.py \
           --templates /path/to/llama.cpp/models/templates
(jinja2 3.1)
"""
import argparse
import json
import os

from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
DATE = "2026-01-15"
FAMILIES = {
    "deepseek-r1": ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
                    {"bos_token": "<\uff5cbegin\u2581of\u2581sentence\uff5c>"}),
    "kimi-k2": ("moonshotai-Kimi-K2.jinja", {}),
    "harmony": ("openai-gpt-oss-120b.jinja", {}),
    "qwen3-coder": ("Qwen3-Coder.jinja", {}),
    "qwen3.5": ("Qwen3.5-4B.jinja", {}),
    "deepseek-v3.1": ("deepseek-ai-DeepSeek-V3.1.jinja", {"bos_token": "<\uff5cbegin\u2581of\u2581sentence\uff5c>"}),
    "qwen3": ("Qwen-Qwen3-0.6B.jinja", {}),
    "glm4": ("GLM-4.6.jinja", {}),
    "chatml-think": ("Qwen-QwQ-32B.jinja", {}),
}
U = lambda c: {"role": "user", "content": c}
A = lambda c: {"role": "assistant", "content": c}
S = lambda c: {"role": "system", "content": c}
T = lambda c: {"role": "tool", "content": c}
CONVERSATIONS = [
    ("one user turn", [U("hi")], True, {}),
    ("system and two turns", [S("Be brief."), U("What is 2+2?"), A("4"), U("And 3+3?")], True, {}),
    ("earlier reasoning", [U("Q1"), A("<think>\nsome thought\n</think>\n\nA1"), U("Q2")], True, {}),
    ("no generation prompt", [U("hi"), A("hello")], False, {}),
    ("thinking off", [U("hi")], True, {"enable_thinking": False}),
    ("thinking on", [U("hi")], True, {"enable_thinking": True}),
    ("effort high", [S("You answer in French."), U("Bonjour")], True, {"reasoning_effort": "high"}),
    ("tool results", [U("weather?"), A("Let me look."), T("sunny"), T("22C"), A("Sunny, 22C."), U("thanks")],
     True, {}),
    ("multiline and unicode", [S("line1\nline2"), U("caf\u00e9 \u6211 \U0001F600\n\n  spaced  ")], True, {}),
]

# More for the thinking families with a built-in renderer of their own
# (qwen3, glm4, chatml-think): reasoning after the last query, a last turn
# without any, a run of results between thinking turns, a user text that
# is a wrapped tool response (Qwen3 does not count it as the last query),
# thinking off over several turns (GLM's /nothink).
THINK_FAMILIES = ("qwen3", "glm4", "chatml-think")


def model_default(fam, kw):
    """The options a case renders with. llama.cpp's copies of the DeepSeek-R1
    and QwQ templates add an enable_thinking switch that closes <think>
    unless it is true; the models' own templates (what a GGUF carries)
    always leave it open, so their default, thinking on, is these files
    with it true (pagoda's default for both families)."""
    if fam in ("deepseek-r1", "chatml-think") and "enable_thinking" not in kw:
        return dict(kw, enable_thinking=True)
    return kw
THINK_CONVERSATIONS = [
    ("reasoning after the last query", [U("Q"), A("<think>\nR\n</think>\n\nA")], False, {}),
    ("last turn without reasoning", [U("Q"), A("A")], False, {}),
    ("results between thinking turns",
     [U("weather?"), A("<think>\nlook\n</think>\n\nLet me look."), T("sunny"), T("22C"),
      A("<think>\nsum up\n</think>\n\nSunny, 22C.")], False, {}),
    ("wrapped response as a user turn",
     [U("Q"), A("<think>\nR\n</think>\n\nA"), U("<tool_response>\nx\n</tool_response>")], True, {}),
    ("thinking off, several turns", [S("Be brief."), U("Q1"), A("A1"), U("Q2 /nothink")], True,
     {"enable_thinking": False}),
    ("thinking off, tool results", [U("weather?"), A("Let me look."), T("sunny"), T("22C")], True,
     {"enable_thinking": False}),
    ("thinking on, earlier reasoning", [U("Q1"), A("<think>\nsome thought\n</think>\n\nA1"), U("Q2")], True,
     {"enable_thinking": True}),
]

# A tool conversation per family: the messages as a client sends them (for
# the Jinja template; arguments as objects, as llama.cpp passes them to
# these templates) and as pagoda's HTTP frontend hands them to the core
# (structured.c writes the call in the family's syntax).
DS = {"calls_begin": "<\uff5ctool\u2581calls\u2581begin\uff5c>", "calls_end": "<\uff5ctool\u2581calls\u2581end\uff5c>",
      "call_begin": "<\uff5ctool\u2581call\u2581begin\uff5c>", "call_end": "<\uff5ctool\u2581call\u2581end\uff5c>",
      "sep": "<\uff5ctool\u2581sep\uff5c>"}
CALL = {"id": "functions.get:0", "type": "function", "function": {"name": "get", "arguments": {"city": "Paris"}}}
TOOL_JINJA = [U("weather?"), {"role": "assistant", "content": "", "tool_calls": [CALL]},
              {"role": "tool", "tool_call_id": "functions.get:0", "content": "sunny \"22C\""}, A("Sunny."),
              U("thanks")]
JSON_CALL = '<tool_call>\n{"name": "get", "arguments": {"city": "Paris"}}\n</tool_call>'
GLM_CALL = "<tool_call>get\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"
XML_CALL = "<tool_call>\n<function=get>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
TOOL_PAGODA = {
    "deepseek-r1": [U("weather?"), A(DS["calls_begin"] + DS["call_begin"] + "function" + DS["sep"] + "get\n```json\n"
                                   + '{"city": "Paris"}' + "\n```" + DS["call_end"] + DS["calls_end"]),
                    T("sunny \"22C\""), A("Sunny."), U("thanks")],
    "kimi-k2": [U("weather?"), A("<|tool_calls_section_begin|><|tool_call_begin|>functions.get:0"
                                 "<|tool_call_argument_begin|>" + '{"city": "Paris"}'
                                 + "<|tool_call_end|><|tool_calls_section_end|>"),
                T("## Return of functions.get:0\\nsunny \"22C\""), A("Sunny."), U("thanks")],
    "harmony": [U("weather?"), {"role": "assistant to=functions.get", "content": '{"city": "Paris"}'},
                {"role": "functions.get", "content": "sunny \"22C\""}, A("Sunny."), U("thanks")],
    "deepseek-v3.1": [U("weather?"), A(DS["calls_begin"] + DS["call_begin"] + "get" + DS["sep"] + '{"city": "Paris"}'
                                       + DS["call_end"] + DS["calls_end"]), T("sunny \"22C\""), A("Sunny."), U("thanks")],
    # the XML families: the call as structured.c's write_call writes it
    "qwen3-coder": [U("weather?"), A(XML_CALL), T("sunny \"22C\""), A("Sunny."), U("thanks")],
    "qwen3.5": [U("weather?"), A(XML_CALL), T("sunny \"22C\""), A("Sunny."), U("thanks")],
    # Qwen3's and QwQ's JSON calls (structured.c's hermes format), GLM-4.6's arg_key/arg_value
    "qwen3": [U("weather?"), A(JSON_CALL), T("sunny \"22C\""), A("Sunny."), U("thanks")],
    "chatml-think": [U("weather?"), A(JSON_CALL), T("sunny \"22C\""), A("Sunny."), U("thanks")],
    "glm4": [U("weather?"), A(GLM_CALL), T("sunny \"22C\""), A("Sunny."), U("thanks")],
}


# harmony's tools block (gpt-oss's TypeScript namespace in the developer
# message) and an assistant's text beside its call: the request's tools
# (the case's "tools", what the HTTP frontend gets) and the messages as
# the frontend hands them to the core: a "tools" message holding the
# namespace (the template's render_tool_namespace macro, which
# plugins/frontend/http/api/harmony.c writes; test_api_toolfmt compares the
# two), an "analysis" message for the text beside a call.
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
        "days": {"type": "integer", "default": 3},
        "ratio": {"type": "number", "default": 0.1},
        "tags": {"type": "array", "items": {"type": "string"}},
        "grid": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
        "pts": {"type": "array", "items": {"type": "object", "properties": {
            "x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x"]}},
        "pair": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
        "loose": {"type": "array", "nullable": True},
        "opt": {"type": ["string", "null"]},
        "one": {"oneOf": [{"type": "string", "description": "a name"}, {"type": "number", "default": 2}]},
        "nested": {"type": "object", "properties": {"a": {"type": "boolean"},
                                                    "b": {"type": "string", "nullable": True}},
                   "required": ["a"]},
        "bag": {"type": "object"},
        "flag": {"type": "boolean", "default": False},
        "caf\u00e9": {"type": "string", "description": "unicode \u00e9", "default": "cr\u00e8me"},
        "z": {}}}}}
NOW = {"type": "function", "function": {"name": "now", "description": "The time",
                                        "parameters": {"type": "object", "properties": {}}}}
BARE = {"type": "function", "function": {"name": "ping", "description": "Ping"}}
HARMONY_TOOLS = [
    ("tools namespace", [S("Be brief."), U("weather?")], [WEATHER, NOW, BARE]),
    ("tools without a system message", [U("hi")], [NOW]),
    ("text beside a call", [U("weather?"), {"role": "assistant", "content": "Let me check.",
                                             "tool_calls": [CALL]},
                            {"role": "tool", "tool_call_id": "functions.get:0", "content": "sunny"}],
     [NOW]),
    ("text beside a call, answered later",
     [U("weather?"), {"role": "assistant", "content": "Let me check.", "tool_calls": [CALL]},
      {"role": "tool", "tool_call_id": "functions.get:0", "content": "sunny"}, A("Sunny."), U("thanks")], []),
    ("thinking beside a call", [U("weather?"), {"role": "assistant", "content": "", "thinking": "Look it up.",
                                                 "tool_calls": [CALL]}], []),
]


QWEN_TOOLS_TEXT = ("qwen3", "chatml-think", "glm4")
F_TOOL = {"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"x": {"type": "integer"}}}}}


def qwen_tools_pagoda(fam, msgs, tools):
    """msgs with the tools text in the system turn, as the HTTP frontend
    writes it for Qwen3 and QwQ (GLM: a system turn of its own first)."""
    if fam == "glm4":
        return [S("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                  "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
                  + "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools)
                  + "\n</tools>\n\nFor each function call, output the function name and arguments within the "
                  "following XML format:\n<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n"
                  "<arg_value>{arg-value-1}</arg_value>\n<arg_key>{arg-key-2}</arg_key>\n"
                  "<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call>")] + msgs
    has_sys = msgs[0]["role"] == "system"
    head = msgs[0]["content"] + "\n\n" if has_sys else ""
    if fam == "chatml-think":
        head = (msgs[0]["content"] if has_sys else "") + "\n\n"
    text = (head + "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
            + "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools)
            + "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
            "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
            "\"arguments\": <args-json-object>}\n</tool_call>")
    return [S(text)] + (msgs[1:] if has_sys else msgs)


def harmony_pagoda(msgs, ns):
    """msgs as the HTTP frontend hands them to the core (see above)."""
    out = [{"role": "tools", "content": ns}] if ns else []
    for m in msgs:
        if m["role"] == "assistant" and "tool_calls" in m:
            later = msgs[msgs.index(m) + 1:]
            if not any(x["role"] == "assistant" and "tool_calls" not in x for x in later):
                text = m.get("content") or m.get("thinking")
                if text:
                    out.append({"role": "analysis", "content": text})
            fn = m["tool_calls"][0]["function"]
            out.append({"role": "assistant to=functions." + fn["name"],
                        "content": json.dumps(fn["arguments"], ensure_ascii=False)})
        elif m["role"] == "tool":
            out.append({"role": "functions.get", "content": m["content"]})
        else:
            out.append(m)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--templates", required=True)
    a = ap.parse_args()
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(msg):
        raise RuntimeError(msg)

    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: DATE
    # transformers' tojson: never ASCII-escaped (GLM-4.6 passes ensure_ascii=False itself)
    env.filters["tojson"] = lambda v, indent=None, ensure_ascii=False: json.dumps(v, ensure_ascii=False,
                                                                                 indent=indent)
    cases = []
    for fam, (fname, extra) in FAMILIES.items():
        with open(os.path.join(a.templates, fname), encoding="utf-8") as fp:
            tmpl = env.from_string(fp.read())
        for name, msgs, gen, kw in CONVERSATIONS:
            if fam in ("kimi-k2", "harmony") and any(m["role"] == "tool" for m in msgs):
                continue  # pagoda refuses these (no call id or name in its messages)
            if fam == "harmony" and "enable_thinking" in kw:
                continue
            if fam != "harmony" and "reasoning_effort" in kw:
                continue
            kw = model_default(fam, kw)
            text = tmpl.render(messages=msgs, add_generation_prompt=gen, **extra, **kw)
            cases.append({"family": fam, "name": name, "messages": msgs, "add_generation_prompt": gen,
                          "kwargs": kw, "expected": text})
        if fam in THINK_FAMILIES:
            for name, msgs, gen, kw in THINK_CONVERSATIONS:
                kw = model_default(fam, kw)
                text = tmpl.render(messages=msgs, add_generation_prompt=gen, **extra, **kw)
                cases.append({"family": fam, "name": name, "messages": msgs, "add_generation_prompt": gen,
                              "kwargs": kw, "expected": text})
            # a call in the middle of a tool loop: after the last query, with reasoning
            msgs = [U("weather?"), {"role": "assistant", "content": "<think>\nlook\n</think>\n\n",
                                    "tool_calls": [CALL]}, T("sunny")]
            kw = model_default(fam, {})
            text = tmpl.render(messages=msgs, add_generation_prompt=True, **extra, **kw)
            call = GLM_CALL if fam == "glm4" else JSON_CALL
            # structured.c writes the reasoning block, then the call after a newline
            cases.append({"family": fam, "name": "call after reasoning, in a tool loop",
                          "messages": [U("weather?"), A("<think>\nlook\n</think>\n\n\n" + call), T("sunny")],
                          "add_generation_prompt": True, "kwargs": kw, "expected": text})
        if fam in QWEN_TOOLS_TEXT:
            # the tools in the system turn, as structured.c writes them for
            # these (ST_TOOLS_QWEN3 / ST_TOOLS_QWQ, FMT_GLM45; test_http_tools
            # checks its text for this tool)
            for name, msgs in (("tools with a system message", [S("Be brief."), U("add")]),
                               ("tools without a system message", [U("add")])):
                kw = model_default(fam, {})
                text = tmpl.render(messages=msgs, tools=[F_TOOL], add_generation_prompt=True, **extra, **kw)
                cases.append({"family": fam, "name": name, "messages": qwen_tools_pagoda(fam, msgs, [F_TOOL]),
                              "tools": [F_TOOL], "add_generation_prompt": True, "kwargs": kw, "expected": text})
        kw = model_default(fam, {})
        msgs = [dict(m) for m in TOOL_JINJA]
        if fam == "deepseek-r1":
            msgs[1]["content"] = None  # OpenAI's null beside tool_calls (that template renders "" as a turn)
        text = tmpl.render(messages=msgs, add_generation_prompt=True, **extra, **kw)
        cases.append({"family": fam, "name": "tool call and result", "messages": TOOL_PAGODA[fam],
                      "add_generation_prompt": True, "kwargs": kw, "expected": text})
        if fam == "harmony":
            mod = tmpl.make_module(vars={"messages": [U("")]})
            for name, msgs, tools in HARMONY_TOOLS:
                text = tmpl.render(messages=msgs, tools=tools or None, add_generation_prompt=True, **extra)
                ns = str(mod.render_tool_namespace("functions", tools)) if tools else None
                cases.append({"family": fam, "name": name, "messages": harmony_pagoda(msgs, ns),
                              "tools": tools, "add_generation_prompt": True, "kwargs": {}, "expected": text})
    with open(os.path.join(HERE, "renders.json"), "w", encoding="utf-8") as fp:
        json.dump({"date": DATE, "cases": cases}, fp, ensure_ascii=False, indent=1)
        fp.write("\n")
    print(len(cases), "cases")


if __name__ == "__main__":
    main()
