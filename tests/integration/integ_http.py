"""integ_http.py: what the stdlib-only Python integration clients share
(cache_turns.py, call_reuse.py, family_calls.py, family_reuse.py): waiting
for a started server to answer /health with 200 (its port opens before the
weights load), and one JSON POST. Not a test."""
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
