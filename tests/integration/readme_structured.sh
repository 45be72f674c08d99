#!/usr/bin/env bash
# readme_structured.sh: the README's structured-output example, as a new
# user runs it (configs/default.ini, the bundled stories260K, the README's
# request with max_tokens 60 and no temperature), over 30 seeds: every
# reply ends with finish_reason "stop" and is JSON valid against the
# schema. What is asserted holds for any trajectory, not only these seeds':
# a schema's output has nothing or one space between tokens
# (docs/structured-output.md), so a reply is at most 29 bytes of framing,
# spaces and age beside the name's bytes, and a token is at least a byte:
# a name of plain ASCII (20 bytes at most) always ends within 60 tokens.
# Only a name with escapes or non-ASCII characters (up to 6 bytes each)
# may run out of tokens, and then the reply must say "length" and be such
# a name (the run counts those; the seeds here write plain names).
# Not for: the HTTP fields of structured output (http_structured.c).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/integ_util.bash"
integ_tmp readme-json

start_server "$tmp/server.log" "$tmp/port" --config "$PAGODA_SOURCE_DIR/configs/default.ini" \
    --set backend.cpu.threads=1 --set engine.log_level=warn ||
    { echo "FAIL: the server did not start"; cat "$tmp/server.log"; exit 1; }

n_seeds=30
python3 - "http://127.0.0.1:$port" "$n_seeds" <<'PY' || fail "the README's structured-output example"
import json, sys, urllib.request
base, n = sys.argv[1], int(sys.argv[2])
# the README's request, word for word, with a seed
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
bad = []
long_names = 0
for seed in range(n):
    body = {"messages": [{"role": "user", "content": "Invent a person."}], "max_tokens": 60,
            "response_format": {"type": "json_schema", "json_schema": {"name": "person", "strict": True,
                                                                       "schema": SCHEMA}},
            "seed": seed}
    req = urllib.request.Request(base + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    r = json.load(urllib.request.urlopen(req, timeout=120))
    c = r["choices"][0]
    text = c["message"]["content"]
    wide = any(ord(ch) > 127 for ch in text) or "\\" in text  # a name of more than 20 bytes
    if c["finish_reason"] == "length" and wide:
        long_names += 1
        continue
    try:
        v = json.loads(text)
        ok = (c["finish_reason"] == "stop" and isinstance(v, dict) and set(v) == {"name", "age"}
              and isinstance(v["name"], str) and len(v["name"]) <= 20
              and isinstance(v["age"], int) and not isinstance(v["age"], bool) and 0 <= v["age"] <= 120)
    except json.JSONDecodeError:
        ok = False
    if not ok:
        bad.append((seed, c["finish_reason"], r["usage"]["completion_tokens"], text))
for b in bad:
    print("seed %d: finish %s after %d tokens: %r" % b)
print(f"README structured output: {n - len(bad) - long_names} of {n} seeds stop with a valid person, "
      f"{long_names} ran out of tokens in a name with escapes or non-ASCII characters, {len(bad)} bad")
sys.exit(1 if bad else 0)
PY

stop_server || fail "server exit status $? after SIGTERM"
[ "$fails" -eq 0 ] || { tail -20 "$tmp/server.log"; exit 1; }
echo "readme structured: $n_seeds seeds, each a valid person"
