#!/usr/bin/env bash
# readme_examples.sh: the curl examples README.md and docs/http-api.md show
# an answer for (completions, Messages, Responses), run word for word as a
# new user runs them (configs/default.ini, the bundled stories260K, greedy)
# by readme_examples.py: each answer must be what the page shows, ids and
# timestamps aside, so neither page can drift from the server unnoticed.
# A fresh server: the answers show prompt caching's counts.
# Not for: the structured-output example (readme_structured.sh), the SDK
# example (docs_example.py in agents_client.sh).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/integ_util.bash"
integ_tmp readme-examples
command -v curl >/dev/null || { echo "SKIP: no curl (the examples are curl commands)"; exit 77; }

start_server "$tmp/server.log" "$tmp/port" --config "$PAGODA_SOURCE_DIR/configs/default.ini" \
    --set backend.cpu.threads=1 --set engine.log_level=warn ||
    { echo "FAIL: the server did not start"; cat "$tmp/server.log"; exit 1; }

timeout 300 python3 "$here/readme_examples.py" "$PAGODA_SOURCE_DIR" "http://127.0.0.1:$port" ||
    fail "the pages' shown answers"

stop_server || fail "server exit status $? after SIGTERM"
[ "$fails" -eq 0 ] || { tail -20 "$tmp/server.log"; exit 1; }
echo "readme examples: every shown answer is the server's"
