"""openai_client.py: drives a running pagoda server with the official
`openai` Python client, the way users will: completions, chat, streaming
(with include_usage), the API key, and errors mapped to the client's
exception classes. Greedy text is compared with llama2.c's golden output.
Not for: starting or stopping the server (openai_client.sh does that).

usage: python openai_client.py BASE_URL API_KEY GOLDEN_JSON
"""
import json
import sys

import openai
from openai import OpenAI

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print(f"FAIL: {what}", file=sys.stderr)


def main():
    base_url, key, golden_path = sys.argv[1], sys.argv[2], sys.argv[3]
    golden = json.load(open(golden_path))["cases"][0]
    prompt, gtext = golden["prompt"], golden["text"]

    client = OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=60)

    models = client.models.list()
    ids = [m.id for m in models.data]
    check(len(ids) == 1, f"one model listed: {ids}")
    model = ids[0]

    # completions: greedy text is llama2.c's continuation
    c = client.completions.create(model=model, prompt=prompt, max_tokens=40, temperature=0)
    text = c.choices[0].text
    check(c.object == "text_completion", f"object {c.object}")
    check(len(text) > 20 and gtext.startswith(prompt + text),
          f"greedy completion is llama2.c's text: {text!r}")
    check(c.choices[0].finish_reason == "length", f"finish_reason {c.choices[0].finish_reason}")
    check(c.usage.completion_tokens == 40 and c.usage.prompt_tokens == 5, f"usage {c.usage}")

    # completions, streaming: the chunks concatenate to the same text
    parts = []
    finish = None
    for ch in client.completions.create(model=model, prompt=prompt, max_tokens=40, temperature=0,
                                        stream=True):
        parts.append(ch.choices[0].text)
        finish = ch.choices[0].finish_reason or finish
    check("".join(parts) == text, f"streamed completion {''.join(parts)!r}")
    check(finish == "length", f"stream finish_reason {finish}")

    # chat
    msgs = [{"role": "system", "content": "You tell short stories."},
            {"role": "user", "content": "Tell me about a cat."}]
    r = client.chat.completions.create(model=model, messages=msgs, max_tokens=16, temperature=0)
    content = r.choices[0].message.content
    check(r.object == "chat.completion", f"object {r.object}")
    check(r.choices[0].message.role == "assistant", "assistant role")
    check(isinstance(content, str) and len(content) > 0, f"content {content!r}")
    check(r.choices[0].finish_reason in ("length", "stop"), f"finish {r.choices[0].finish_reason}")
    check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, "usage sums")

    # chat, streaming with the usage chunk
    parts, usage, roles = [], None, []
    for ch in client.chat.completions.create(model=model, messages=msgs, max_tokens=16, temperature=0,
                                             stream=True, stream_options={"include_usage": True}):
        if ch.usage is not None:
            usage = ch.usage
            check(ch.choices == [], "the usage chunk has no choices")
        for choice in ch.choices:
            if choice.delta.role:
                roles.append(choice.delta.role)
            if choice.delta.content:
                parts.append(choice.delta.content)
    check(roles == ["assistant"], f"roles {roles}")
    check("".join(parts) == content, f"streamed chat {''.join(parts)!r} vs {content!r}")
    check(usage is not None and usage.completion_tokens == r.usage.completion_tokens, f"usage {usage}")

    # errors become the client's exceptions
    try:
        client.completions.create(model=model, prompt="x", temperature=3)
        check(False, "temperature 3 accepted")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and "temperature" in str(e), f"400: {e}")
    bad = OpenAI(base_url=base_url, api_key="wrong-key", max_retries=0, timeout=30)
    try:
        bad.models.list()
        check(False, "wrong key accepted")
    except openai.AuthenticationError as e:
        check(e.status_code == 401, f"401: {e}")

    print(f"openai {openai.__version__}: completions, chat and streams checked, {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
