"""integ_check.py: what the Python client scripts can share (not a test:
ctest runs integration/*.sh): check(cond, what) prints a failed
condition and counts it, failures() says how many so far.
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
