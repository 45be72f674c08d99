#!/usr/bin/env bash
# stdin_drain.sh: SIGTERM with the stdin frontend while long requests run:
# every request read gets its final result line (the long ones "cancelled")
# and pagoda exits 0. The input stays open (a FIFO) so only the signal can
# end the run. A random 4-layer llama-110M-shaped model keeps the long
# requests generating while the test acts. Not for: the HTTP drain
# (tests/integration/http_server.c).
set -u
: "${PAGODA_BIN:?set by ctest}" "${PAGODA_SOURCE_DIR:?set by ctest}"
tmp=$(mktemp -d /tmp/pagoda-drain-XXXXXX)
pid=
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; wait "$pid" 2>/dev/null; fi
    exec 3>&- 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$tmp/err" ] && tail -20 "$tmp/err"; exit 1; }

"$PAGODA_BIN" gen-model --shape llama-110M --type Q4_0 --layers 4 --out "$tmp/slow.gguf" >/dev/null 2>&1 ||
    fail "gen-model"
mkfifo "$tmp/in"
"$PAGODA_BIN" --config "$PAGODA_SOURCE_DIR/configs/cpu-ci.ini" --set engine.frontend=stdin \
    --set engine.model="$tmp/slow.gguf" --set engine.max_seq_len=512 --set engine.kv_cache_tokens=2048 \
    --set backend.cpu.threads=1 --set frontend.stdin.mode=batch \
    <"$tmp/in" >"$tmp/out" 2>"$tmp/err" &
pid=$!
exec 3>"$tmp/in" # held open: EOF never comes
{
    echo '{"id": "short", "prompt": "Once upon a time", "max_tokens": 1}'
    for i in 1 2 3; do
        echo "{\"id\": \"long$i\", \"prompt\": \"Once upon a time\", \"max_tokens\": 450, \"ignore_eos\": true}"
    done
} >&3

# the short one finishing shows the engine is running the batch
for _ in $(seq 300); do
    grep -q '"short"' "$tmp/out" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
grep -q '"short"' "$tmp/out" || fail "no result for the short request"
[ "$(grep -c '"long' "$tmp/out")" -eq 0 ] || fail "a long request finished before the signal: $(cat "$tmp/out")"

kill -TERM "$pid"
for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "still running 30 s after SIGTERM"
st=0
wait "$pid" || st=$?
pid=
[ "$st" -eq 0 ] || fail "exit status $st after SIGTERM"

python3 - "$tmp/out" <<'EOF' || fail "results: $(cat "$tmp/out")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by_id = {r["id"]: r for r in rows}
assert len(rows) == 4 and set(by_id) == {"short", "long1", "long2", "long3"}, rows
assert by_id["short"]["finish_reason"] == "length", by_id["short"]
for i in (1, 2, 3):
    r = by_id[f"long{i}"]
    assert r["finish_reason"] == "cancelled", r
    assert r["usage"]["completion_tokens"] < 450, r
EOF
echo "stdin drain: 4 requests, 4 results, exit 0"
