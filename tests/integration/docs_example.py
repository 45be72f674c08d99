"""docs_example.py: docs/http-api.md's SDK example (the ```python block
after "With the official SDKs") run as written against a running server on
stories260K, its base URLs and key replaced by the server's; what it prints
must be what the page's "prints" block says, line for line. stories260K's
greedy text is the same on every host (test_golden), so the page cannot
drift from the server unnoticed. Run on a fresh server: the example's first
Messages turn prints input_tokens, which a warm prefix cache would lower.
Not for: starting the server (agents_client.sh).

usage: python docs_example.py DOCS_MD BASE_URL API_KEY
"""
import contextlib
import io
import re
import sys


def main():
    doc, base_url, key = sys.argv[1], sys.argv[2], sys.argv[3]
    text = open(doc, encoding="utf-8").read()
    at = text.index("With the official SDKs")
    m = re.compile(r"```python\n(.*?)```\n\nprints\n\n((?:    [^\n]*\n)+)", re.S).search(text, at)
    if not m:
        print("FAIL: no ```python block and prints block after 'With the official SDKs'")
        return 1
    code = m.group(1).replace("http://127.0.0.1:8080", base_url).replace('api_key="unused"', f'api_key="{key}"')
    want = [line[4:] for line in m.group(2).splitlines()]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/http-api.md example", "exec"), {})
    got = out.getvalue().splitlines()
    if got != want:
        print("FAIL: docs/http-api.md's SDK example prints\n" + "\n".join(got) + "\nnot, as the page says,\n"
              + "\n".join(want))
        return 1
    print(f"docs_example.py: the page's {len(want)} printed lines match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
