"""integ_http.py: what the stdlib-only Python integration clients share
(cache_turns.py, family_calls.py): waiting for a started server to answer
/health with 200 (its port opens before the weights load). Not a test."""
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
