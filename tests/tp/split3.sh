#!/usr/bin/env bash
# split3.sh: `mpirun -n 3` on a generated model whose heads split 3 ways
# (gen-model --shape tiny-tp: 12 heads, 6 KV heads, FFN 576; Q8_0) gives the
# same greedy text as one process for 48 tokens, and the start-up checks
# refuse what they must: a model that does not split 3 ways (stories260K:
# 8 heads), and ranks whose configs differ. Not for: logits tolerances
# (test_tp asserts those without MPI).
set -u
: "${PAGODA_BIN:?set by ctest}" "${PAGODA_SOURCE_DIR:?set by ctest}" "${MPIEXEC:?set by ctest}"
tmp=$(mktemp -d /tmp/pagoda-tp3-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/sanitizer_check.sh"
fail() { echo "FAIL: $*"; [ -f "$tmp/err" ] && tail -20 "$tmp/err"; exit 1; }
"$PAGODA_BIN" gen-model --shape tiny-tp --type Q8_0 --out "$tmp/m.gguf" >/dev/null 2>&1 || fail "gen-model"
common=(--config "$PAGODA_SOURCE_DIR/configs/cpu-ci.ini" --set engine.frontend=stdin
        --set frontend.stdin.mode=batch --set engine.model="$tmp/m.gguf" --set backend.cpu.threads=1)
req='{"id": "a", "prompt": "Once upon a time", "max_tokens": 48, "temperature": 0, "ignore_eos": true}'
echo "$req" | timeout 60 "$PAGODA_BIN" "${common[@]}" >"$tmp/one" 2>"$tmp/err" || fail "one process"
echo "$req" | timeout 120 "$MPIEXEC" -n 3 --oversubscribe "$PAGODA_BIN" "${common[@]}" \
    --set engine.tensor_parallel=3 >"$tmp/three" 2>"$tmp/err" || fail "mpirun -n 3"
python3 - "$tmp/one" "$tmp/three" <<'PY' || fail "3 ranks differ from one process"
import json, sys
a, b = (json.loads(open(p).readline()) for p in sys.argv[1:3])
assert a["usage"]["completion_tokens"] == 48 == b["usage"]["completion_tokens"], (a, b)
assert a["text"] == b["text"], (a["text"], b["text"])
PY

# refusals, every rank together, with the numbers
echo "$req" | timeout 60 "$MPIEXEC" -n 3 --oversubscribe "$PAGODA_BIN" "${common[@]}" \
    --set engine.model="$PAGODA_SOURCE_DIR/models/stories260K.gguf" --set engine.tensor_parallel=3 \
    >"$tmp/out" 2>"$tmp/err" && fail "stories260K split 3 ways was accepted"
grep -q "tensor_parallel = 3 cannot split this model: its 8 attention heads, 4 KV heads and FFN of 172 must each divide by 3; values that work: 1, 2, 4" "$tmp/err" ||
    fail "no refusal with the numbers"
echo "$req" | timeout 60 "$MPIEXEC" -n 2 --oversubscribe "$PAGODA_BIN" "${common[@]}" \
    --set engine.tensor_parallel=3 >"$tmp/out" 2>"$tmp/err" && fail "3 ranks configured, 2 started: accepted"
grep -q "engine.tensor_parallel = 3 but the launcher started 2 ranks: start it with mpirun -n 3" "$tmp/err" ||
    fail "no refusal of the rank count"
# rank 1 with another seed: the fingerprints differ
cat >"$tmp/mixed.sh" <<SH
#!/usr/bin/env bash
extra=()
[ "\${OMPI_COMM_WORLD_RANK:-0}" = 1 ] && extra=(--set engine.seed=7)
exec "$PAGODA_BIN" "\$@" "\${extra[@]}"
SH
chmod +x "$tmp/mixed.sh"
echo "$req" | timeout 60 "$MPIEXEC" -n 2 --oversubscribe "$tmp/mixed.sh" "${common[@]}" \
    --set engine.tensor_parallel=2 >"$tmp/out" 2>"$tmp/err" && fail "ranks with different configs: accepted"
grep -q "rank 1's config and model (fingerprint [0-9a-f]*) differ from rank 0's" "$tmp/err" ||
    fail "no refusal of the differing configs"
tp_check_sanitizer_reports "$tmp/err" || fail "a sanitizer report"
echo "tp split3: 3 ranks = one process for 48 greedy tokens; bad splits, rank counts and configs refused"
