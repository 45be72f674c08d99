"""integ_check.py: what the Python client scripts can share (not a test:
ctest runs integration/*.sh): check(cond, what) prints a failed
condition and counts it, failures() says how many so far;
append_reply(msgs, m, result) adds a chat completions reply to the
conversation (and a tool result for each of its calls).
Not for: starting servers (integ_util.bash)."""
import sys

_failures = 0


def check(cond, what):
    global _failures
    if not cond:
        _failures += 1
        print(f"FAIL: {what}", file=sys.stderr)


def failures():
    return _failures


def append_reply(msgs, m, result="sunny, 22C"):
    """m, a chat completions message, as the next assistant turn; each of
    its tool calls answered with result"""
    if m.get("tool_calls"):
        msgs.append({"role": "assistant", "content": m.get("content"), "tool_calls": m["tool_calls"]})
        for c in m["tool_calls"]:
            msgs.append({"role": "tool", "tool_call_id": c["id"], "content": result})
    else:
        msgs.append({"role": "assistant", "content": m.get("content") or ""})
