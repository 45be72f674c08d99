#!/usr/bin/env bash
# kill.sh: a rank killed with SIGKILL mid-request ends the whole job with a
# clear error in under 30 s, never a hang: mpirun sees the rank die and
# signals the others; rank 0 interrupts its collectives (comm interrupt),
# so the step in flight fails and the streamed request in flight ends with
# an error event before mpirun ends the job.
# Event-driven, whatever the host's speed: the request (1000 tokens of a
# random 4-layer llama-110M-shaped model, ignore_eos) is streamed over HTTP,
# and rank 1 is killed as soon as its first token has arrived, so the
# request has all of its remaining tokens' time to still be running; every
# wait is a deadline, none a delay.
set -u
: "${PAGODA_BIN:?set by ctest}" "${PAGODA_SOURCE_DIR:?set by ctest}" "${MPIEXEC:?set by ctest}"
tmp=$(mktemp -d /tmp/pagoda-tpkill-XXXXXX)
pid=
cpid=
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; wait "$pid" 2>/dev/null; fi
    if [ -n "$cpid" ] && kill -0 "$cpid" 2>/dev/null; then kill -KILL "$cpid"; wait "$cpid" 2>/dev/null; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
. "$(dirname "$0")/sanitizer_check.sh"
fail() {
    echo "FAIL: $*"
    [ -f "$tmp/err" ] && tail -25 "$tmp/err"
    [ -f "$tmp/stream" ] && { echo "--- stream (tail)"; tail -c 1500 "$tmp/stream"; }
    exit 1
}
# until SECONDS CMD...: true as soon as CMD succeeds, false after SECONDS
until_true() {
    local end=$((SECONDS + $1))
    shift
    while ! "$@"; do
        [ "$SECONDS" -lt "$end" ] || return 1
        sleep 0.05
    done
}
running() { kill -0 "$pid" 2>/dev/null; }
stopped() { ! kill -0 "$1" 2>/dev/null; }
# a streamed chunk with generated text ("text":"" chunks are held-back bytes)
first_token() { grep -q '"text":"[^"]' "$tmp/stream" 2>/dev/null; }
# the server answers /health (weights loaded), or the job has ended
serving() {
    ! running || { [ -s "$tmp/port" ] && curl -fs "http://127.0.0.1:$(cat "$tmp/port")/health" >/dev/null 2>&1; }
}

max_tokens=1000
"$PAGODA_BIN" gen-model --shape llama-110M --type Q4_0 --layers 4 --out "$tmp/slow.gguf" >/dev/null 2>&1 ||
    fail "gen-model"
"$MPIEXEC" -n 2 --oversubscribe "$PAGODA_BIN" --config "$PAGODA_SOURCE_DIR/configs/cpu-ci.ini" \
    --set engine.tensor_parallel=2 --set engine.frontend=http --set frontend.http.port=0 \
    --set frontend.http.port_file="$tmp/port" \
    --set engine.model="$tmp/slow.gguf" --set engine.max_seq_len=1024 --set engine.kv_cache_tokens=2048 \
    --set backend.cpu.threads=1 --set engine.log_level=info >"$tmp/out" 2>"$tmp/err" &
pid=$!
until_true 120 serving || fail "not serving after 120 s"
running || fail "the job ended before serving"
# rank 1 logs through its own stderr pipe: its lines may land after rank 0
# answers /health, so wait for them (bounded) rather than read them once
shard_logged() { grep -q "rank 1: tensor parallel: rank 1 holds its shard" "$tmp/err"; }
pid_logged() { grep -q "rank 1 of 2, pid [0-9]" "$tmp/err"; }
until_true 30 shard_logged || fail "rank 1 did not report its shard"
until_true 30 pid_logged || fail "rank 1 did not log its pid"
rank1=$(grep -o "rank 1 of 2, pid [0-9]*" "$tmp/err" | awk '{print $6}')
[ -n "$rank1" ] || fail "no pid for rank 1 in the log"

curl -sN "http://127.0.0.1:$(cat "$tmp/port")/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"Once upon a time\", \"max_tokens\": $max_tokens, \"ignore_eos\": true, \"stream\": true}" \
    >"$tmp/stream" 2>"$tmp/curl.err" &
cpid=$!
until_true 120 first_token || fail "no streamed token 120 s after the request"
# the request's remaining tokens outlast the kill on any host: say so if not
grep -q '"finish_reason":"length"' "$tmp/stream" && fail "all $max_tokens tokens came before the kill"
start=$(date +%s.%N)
kill -KILL "$rank1"
until_true 30 stopped "$pid" || fail "the job still runs 30 s after rank 1 was killed"
st=0
wait "$pid" || st=$?
pid=
took=$(python3 -c "import time; print(f'{time.time() - $start:.1f}')")
until_true 30 stopped "$cpid" || fail "the stream is still open 30 s after the job ended"
wait "$cpid"
cpid=
[ "$st" -ne 0 ] || fail "mpirun exited 0 after a rank was killed"
grep -q "rank 1.*exited on signal 9" "$tmp/err" || fail "mpirun did not name the killed rank"
grep -q "rank 0: forward pass failed: all_reduce interrupted" "$tmp/err" ||
    grep -q "rank 0: forward pass failed: broadcast interrupted" "$tmp/err" ||
    fail "rank 0 did not report the failed step"
python3 - "$tmp/stream" "$max_tokens" <<'PY' || fail "the streamed request did not end with an error"
import json, sys
events = [l[6:].strip() for l in open(sys.argv[1]) if l.startswith("data: ")]
assert events, "no events"
body = [json.loads(e) for e in events if e != "[DONE]"]
tokens = [b for b in body if "choices" in b and b["choices"][0]["text"]]
assert 0 < len(tokens) < int(sys.argv[2]), len(tokens)
# no choice ended: the stream's end is the error event (a stream's
# finish_reason "error"), after every token
assert all(b["choices"][0]["finish_reason"] is None for b in body if "choices" in b), body[-3:]
assert "error" in body[-1] and "interrupted" in body[-1]["error"]["message"], body[-1]
print(f"{len(tokens)} tokens streamed, then: {body[-1]['error']['message']}")
PY
tp_check_sanitizer_reports "$tmp/err" || fail "a sanitizer report"
echo "tp kill: rank 1 killed after the first streamed token; the job ended in $took s (exit $st)," \
    "the stream ended with an error"
