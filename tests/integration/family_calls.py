#!/usr/bin/env python3
"""family_calls.py URL FAMILY N [stream]: N constrained tool calls
(tool_choice "required" and a named function, alternating; half streamed,
or all with "stream") on a server
whose chat template is forced to FAMILY, sampled at temperature 1 with a
different seed each: every reply must carry exactly one call that parses,
names a listed function and holds arguments valid for its schema, with no
family markup in the content. The call is held to the family's own syntax
(structured.c) and read back by its reader (toolfmt.c). stdlib only."""
import json
import sys
import urllib.error
import urllib.request

from integ_http import wait_health

URL, FAMILY, N = sys.argv[1], sys.argv[2], int(sys.argv[3])
ALL_STREAMED = sys.argv[4:5] == ["stream"]
# stories260K's context is 512 tokens of its 512-piece vocabulary: the
# tools are kept small to leave room for harmony's long system message
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"b": {"type": "boolean"}}, "required": ["b"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "g", "parameters": {
        "type": "object", "properties": {"k": {"enum": ["x", "y"]}}, "required": ["k"],
        "additionalProperties": False}}}]
MARKUP = ["<|", "<\uff5c", "<tool_call>", "functions.", "[TOOL_CALLS]", "<function=", "<parameter=", "<arg_key>",
          "<arg_value>", "think>"]


def post(body):
    req = urllib.request.Request(URL + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            if body.get("stream"):
                return r.read().decode()
            return json.load(r)
    except urllib.error.HTTPError as e:
        sys.exit(f"FAIL: {FAMILY}: HTTP {e.code}: {e.read().decode()[:400]}")


def streamed_calls(text):
    calls, content, finish = {}, "", None
    for line in text.split("\n"):
        if not line.startswith("data: {"):
            continue
        ch = json.loads(line[6:])["choices"]
        if not ch:
            continue
        d = ch[0].get("delta", {})
        content += d.get("content") or ""
        for tc in d.get("tool_calls") or []:
            c = calls.setdefault(tc["index"], {"name": "", "arguments": ""})
            c["name"] += tc.get("function", {}).get("name") or ""
            c["arguments"] += tc.get("function", {}).get("arguments") or ""
        finish = ch[0].get("finish_reason") or finish
    return [calls[k] for k in sorted(calls)], content, finish


def valid(name, args):
    a = json.loads(args)
    if name == "f":
        return set(a) == {"b"} and isinstance(a["b"], bool)
    return name == "g" and set(a) == {"k"} and a["k"] in ("x", "y")


def main():
    wait_health(URL)
    bad = 0
    for i in range(N):
        body = {"messages": [{"role": "user", "content": "Compute."}], "tools": TOOLS, "temperature": 1,
                "seed": 1000 + i, "max_tokens": 150, "parallel_tool_calls": False,
                "tool_choice": "required" if i % 2 == 0 else {"type": "function", "function": {"name": "g"}}}
        if ALL_STREAMED or i % 4 >= 2:
            body["stream"] = True
            calls, content, finish = streamed_calls(post(body))
        else:
            m = post(body)["choices"][0]
            calls = [c["function"] for c in m["message"].get("tool_calls") or []]
            content, finish = m["message"].get("content") or "", m["finish_reason"]
        why = None
        if len(calls) != 1:
            why = f"{len(calls)} calls"
        elif i % 2 == 1 and calls[0]["name"] != "g":
            why = f"named g, called {calls[0]['name']}"
        else:
            try:
                if not valid(calls[0]["name"], calls[0]["arguments"]):
                    why = f"arguments {calls[0]['arguments']!r} not valid for {calls[0]['name']}"
            except ValueError:
                why = f"arguments {calls[0]['arguments']!r} do not parse"
        if not why and finish != "tool_calls":
            why = f"finish_reason {finish}"
        if not why and any(k in content for k in MARKUP):
            why = f"markup in content {content!r}"
        if why:
            bad += 1
            print(f"FAIL: {FAMILY} request {i}: {why}")
    n_streamed = N if ALL_STREAMED else sum(1 for i in range(N) if i % 4 >= 2)
    print(f"{FAMILY}: {N - bad} of {N} constrained calls parsed ({n_streamed} streamed)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
