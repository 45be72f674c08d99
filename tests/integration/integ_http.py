"""integ_http.py: what the stdlib-only Python integration clients share
(cache_turns.py, call_reuse.py, ctl_reuse.py, family_calls.py,
family_reuse.py): waiting for a started server to answer /health with 200
(its port opens before the weights load), one JSON POST, and the two-turn
call conversation whose second turn reports what the prefix cache kept of
the first. Not a test."""
import json
import time
import urllib.error
import urllib.request


def wait_health(url, tries=600):
    for _ in range(tries):
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.1)
    return False


def post_json(url, body, timeout=300):
    """POST body as JSON to url (the full address, path included) and return
    the decoded JSON reply; an HTTP error status raises urllib.error.HTTPError."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def call_turns(post, prompt, tools, seed, max_tokens, **turn1):
    """One two-turn call conversation through post(body) (a function that
    sends one chat completion and returns its reply): turn 1, the user's
    prompt alone, asks for one call ("required", temperature 1, the given seed and max_tokens, no
    parallel calls, plus any further turn1 fields), turn 2 sends that call
    and its result ("42") back (tool_choice "none", temperature 0, one
    token). Returns (turn 1's reply, owed, cached): owed is turn 1's
    prompt and completion tokens, the most turn 2 can find cached, and
    cached is turn 2's cached_tokens; owed and cached are None, with no
    turn 2 sent, when turn 1 did not make exactly one call."""
    msgs = [{"role": "user", "content": prompt}]
    body = {"messages": msgs, "tools": tools, "tool_choice": "required", "temperature": 1, "seed": seed,
            "max_tokens": max_tokens, "parallel_tool_calls": False}
    body.update(turn1)
    r = post(body)
    m = r["choices"][0]["message"]
    if len(m.get("tool_calls") or []) != 1:
        return r, None, None
    owed = r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"]
    msgs.append({"role": "assistant", "content": m.get("content"), "tool_calls": m["tool_calls"]})
    msgs.append({"role": "tool", "tool_call_id": m["tool_calls"][0]["id"], "content": "42"})
    r2 = post({"messages": msgs, "tools": tools, "tool_choice": "none", "temperature": 0, "max_tokens": 1})
    return r, owed, r2["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
