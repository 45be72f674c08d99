#!/usr/bin/env bash
# kill.sh: a rank killed with SIGKILL mid-request ends the whole job with a
# clear error in under 30 s, never a hang: mpirun sees the rank die and
# signals the others; rank 0 interrupts its collectives (comm interrupt),
# so the step in flight fails and the in-flight request gets an error line
# from the stdin frontend before mpirun ends the job. Uses a random 4-layer
# llama-110M-shaped model so the request is still generating when killed.
set -u
: "${PAGODA_BIN:?set by ctest}" "${PAGODA_SOURCE_DIR:?set by ctest}" "${MPIEXEC:?set by ctest}"
tmp=$(mktemp -d /tmp/pagoda-tpkill-XXXXXX)
pid=
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; wait "$pid" 2>/dev/null; fi
    exec 3>&- 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$tmp/err" ] && tail -25 "$tmp/err"; exit 1; }

"$PAGODA_BIN" gen-model --shape llama-110M --type Q4_0 --layers 4 --out "$tmp/slow.gguf" >/dev/null 2>&1 ||
    fail "gen-model"
mkfifo "$tmp/in"
"$MPIEXEC" -n 2 --oversubscribe "$PAGODA_BIN" --config "$PAGODA_SOURCE_DIR/configs/cpu-ci.ini" \
    --set engine.tensor_parallel=2 --set engine.frontend=stdin --set frontend.stdin.mode=batch \
    --set engine.model="$tmp/slow.gguf" --set engine.max_seq_len=512 --set engine.kv_cache_tokens=2048 \
    --set backend.cpu.threads=1 --set engine.log_level=info <"$tmp/in" >"$tmp/out" 2>"$tmp/err" &
pid=$!
exec 3>"$tmp/in" # held open: only the kill can end the run
echo '{"id": "long", "prompt": "Once upon a time", "max_tokens": 450, "ignore_eos": true}' >&3
for _ in $(seq 600); do
    grep -q "rank 1: tensor parallel: rank 1 holds its shard" "$tmp/err" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || fail "the job ended before the kill"
    sleep 0.1
done
rank1=$(grep -o "rank 1 of 2, pid [0-9]*" "$tmp/err" | awk '{print $6}')
[ -n "$rank1" ] || fail "no pid for rank 1 in the log"
sleep 2 # mid-request
[ -s "$tmp/out" ] && fail "the request finished before the kill: $(cat "$tmp/out")"
start=$(date +%s.%N)
kill -KILL "$rank1"
for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "the job still runs 30 s after rank 1 was killed"
st=0
wait "$pid" || st=$?
pid=
took=$(python3 -c "import time; print(f'{time.time() - $start:.1f}')")
[ "$st" -ne 0 ] || fail "mpirun exited 0 after a rank was killed"
grep -q "rank 1.*exited on signal 9" "$tmp/err" || fail "mpirun did not name the killed rank"
grep -q "rank 0: forward pass failed: all_reduce interrupted" "$tmp/err" ||
    grep -q "rank 0: forward pass failed: broadcast interrupted" "$tmp/err" ||
    fail "rank 0 did not report the failed step"
python3 - "$tmp/out" <<'PY' || fail "the in-flight request did not get an error: $(cat "$tmp/out")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert len(rows) == 1 and rows[0]["id"] == "long", rows
assert rows[0]["finish_reason"] == "error" and "interrupted" in rows[0]["error"], rows[0]
assert 0 < rows[0]["usage"]["completion_tokens"] < 450, rows[0]
PY
echo "tp kill: rank 1 killed mid-request; the job ended in $took s (exit $st), the request got an error"
