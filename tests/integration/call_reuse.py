#!/usr/bin/env python3
"""call_reuse.py: a tool conversation whose turns re-send the model's own
constrained calls, over chat completions and Messages (stdlib only), on
two servers run alike except for the KV policy (one with the prefix
cache, one without). Each turn after the first must find in the cache the
whole previous turn (its prompt and the call the model wrote), less at
most one block: cached >= previous prompt + previous completion - block
size, which holds for any trajectory (the last generated token and a
partial block have no shared KV). Greedy: each turn's reply must be the
same on both servers, token for token, so the reuse changes nothing the
model says; the one allowance is a near tie (chat completions, whose
logprobs show it: where the tokens first differ, the other server's token
is within NEAR_TIE of the best one there), since KV computed while
decoding and KV computed in a prefill may round differently on some
hosts; from such a turn on the two conversations part and only the reuse
is checked. Messages has no logprobs: its replies are compared only
while they agree, a difference is reported and ends the comparison.
Prints per turn the prompt, the cached tokens, and what was owed.
usage: python call_reuse.py CACHED_URL UNCACHED_URL
"""
import json
import sys
import urllib.request

from integ_check import append_reply, check, failures
from integ_http import post_json, wait_health

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                           "parameters": SCHEMA}}]
SYSTEM = "You are a helpful assistant. Answer briefly."
# (question, tool_choice): two calls in a row, then an answer in text
NEAR_TIE = 0.05  # nats between the two best tokens: a tie that rounding may flip
TURNS = [("What is the weather in Paris?", "required"), ("And in Rome?", "required"),
         ("Which one is warmer?", "none"), ("Thanks!", "auto")]


def post(url, path, body):
    return post_json(url + path, body)


def block_size(url):
    with urllib.request.urlopen(url + "/v1/inspect", timeout=60) as r:
        return json.load(r)["kv"]["block_size"]


def owed_check(api, turn, prompt, cached, owed, bs):
    print(f"{api:8s} turn {turn}: prompt {prompt:4d} cached {cached:4d}"
          + (f", owed {owed:4d} (the previous prompt and reply), missed {owed - cached:3d}" if owed else ""))
    if owed:
        check(cached >= owed - bs, f"{api} turn {turn}: cached {cached} < {owed} - {bs}: "
              "the previous turn's call was not reused")
        check(prompt > owed, f"{api} turn {turn}: the prompt ({prompt}) holds the previous turn ({owed})")


def chat(url):
    """The turns over chat completions: [(prompt, cached, completion, message)]"""
    msgs = [{"role": "system", "content": SYSTEM}]
    out = []
    for q, choice in TURNS:
        msgs.append({"role": "user", "content": q})
        r = post(url, "/v1/chat/completions", {"messages": msgs, "tools": TOOLS, "tool_choice": choice,
                                               "parallel_tool_calls": False, "max_tokens": 48,
                                               "temperature": 0, "logprobs": True, "top_logprobs": 3})
        u = r["usage"]
        m = r["choices"][0]["message"]
        lp = (r["choices"][0].get("logprobs") or {}).get("content") or []
        out.append((u["prompt_tokens"], u.get("prompt_tokens_details", {}).get("cached_tokens", 0),
                    u["completion_tokens"], m, lp))
        append_reply(msgs, m)
    return out


def messages(url):
    """The same turns over /v1/messages, its tool_use blocks passed back"""
    tools = [{"name": "get_weather", "description": "The weather in a city.", "input_schema": SCHEMA}]
    choice_of = {"required": {"type": "any", "disable_parallel_tool_use": True}, "none": {"type": "none"},
                 "auto": {"type": "auto"}}
    msgs, pending, out = [], [], []
    for q, choice in TURNS:
        msgs.append({"role": "user", "content": pending + [{"type": "text", "text": q}]})
        r = post(url, "/v1/messages", {"model": "pagoda", "system": SYSTEM, "messages": msgs, "tools": tools,
                                       "tool_choice": choice_of[choice], "max_tokens": 48, "temperature": 0})
        u = r["usage"]
        cached = u.get("cache_read_input_tokens") or 0
        out.append((u["input_tokens"] + cached, cached, u["output_tokens"], r["content"], None))
        msgs.append({"role": "assistant", "content": r["content"]})
        pending = [{"type": "tool_result", "tool_use_id": b["id"], "content": "sunny, 22C"}
                   for b in r["content"] if b["type"] == "tool_use"]
    return out


def said(api, reply):
    """A reply without its call ids (fresh per response)"""
    if api == "chat":
        return (reply.get("content"), calls_of(api, reply))
    return [{k: v for k, v in b.items() if k != "id"} for b in reply]


def calls_of(api, reply):
    if api == "chat":
        return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in reply.get("tool_calls") or []]
    return [(b["name"], b["input"]) for b in reply if b["type"] == "tool_use"]


def near_tie(lp, lp2):
    """Where two greedy token lists first differ, the second's token is
    within NEAR_TIE of the first's best there (and both lists exist)"""
    for a, b in zip(lp, lp2):
        if a["token"] != b["token"]:
            tops = {t["token"]: t["logprob"] for t in a.get("top_logprobs") or []}
            return b["token"] in tops and a["logprob"] - tops[b["token"]] <= NEAR_TIE
    return False


def main():
    cached_url, plain_url = sys.argv[1], sys.argv[2]
    check(wait_health(cached_url) and wait_health(plain_url), "the servers answer /health")
    bs = block_size(cached_url)
    for api, run in (("chat", chat), ("messages", messages)):
        got, ref = run(cached_url), run(plain_url)
        owed, same = 0, True
        for t, ((p, c, n, reply, lp), (p2, c2, _, reply2, lp2)) in enumerate(zip(got, ref), 1):
            owed_check(api, t, p, c, owed, bs)
            check(c2 == 0, f"{api} turn {t}: the server without the prefix cache reports {c2} cached tokens")
            if same:
                check(p == p2, f"{api} turn {t}: prompt tokens {p} with the cache, {p2} without")
                if said(api, reply) != said(api, reply2):
                    same = False
                    tie = lp is not None and near_tie(lp2, lp)
                    print(f"note: {api} turn {t}: the replies part" + (" at a near tie" if tie else "")
                          + f":\n  {reply}\n  {reply2}")
                    check(tie or lp is None, f"{api} turn {t}: greedy replies differ with and without the cache")
            if TURNS[t - 1][1] == "required":
                calls = calls_of(api, reply)
                check(len(calls) == 1 and calls[0][0] == "get_weather", f"{api} turn {t}: one call {reply}")
            owed = p + n
    print(f"call_reuse.py: {'ok' if failures() == 0 else f'{failures()} failures'}")
    return 1 if failures() else 0


if __name__ == "__main__":
    sys.exit(main())
