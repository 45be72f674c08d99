#!/usr/bin/env bash
# gpu-check.sh: the one run a machine with an NVIDIA GPU gets (this backend
# was written on machines without one). In under 8 minutes it:
#   1. builds what it needs for this GPU's architecture only;
#   2. runs test_cuda_probe (its GPU smoke cases: every weight type's
#      matmul on both paths, matmul_multi, geglu, scale, F32/F16/Q8_0 KV
#      with and without a window);
#   3. runs pagoda-conformance --backend cuda (every op, type and KV layout
#      against the plain-C references, and stories260K end to end against
#      its golden tokens), with allow_unverified so every kernel is offered;
#   4. compares greedy texts, CUDA against the CPU backend, for SmolLM2 and
#      Gemma 3 (models/ or $PAGODA_MODELS; else random-weight models of
#      those architectures from gen-model, where near-ties are common);
#   5. runs comm-check under NCCL with 2 ranks if there are 2 GPUs;
#   6. times decode and prefill of a 1.1B-shape model (Q8_0 and Q4_0) with
#      pagoda bench, beside llama.cpp's llama-bench when a CUDA build of it
#      is found ($LLAMA_BENCH or llama-bench in PATH);
#   7. prints one summary and rewrites backends/cuda/verified.txt from what
#      passed (the backend advertises only what that list holds).
#
#   backends/cuda/gpu-check.sh [build-dir]        (default: build-gpu)
#   PAGODA_COMMIT=<hash>   the commit being checked (default: git HEAD; the
#                          list is not written without one)
#   GPU_CHECK_DRY=1        no GPU: check the tools, parse a conformance log
#                          given as GPU_CHECK_LOG=FILE, print the list it
#                          would write; builds and runs nothing
# With $OUT set (a lent machine), logs and the new list are copied there.
set -u
cd "$(dirname "$0")/../.." || exit 2
ROOT=$(pwd)
B=${1:-build-gpu}
J=$(nproc 2>/dev/null || echo 4)
T0=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET:-450} # seconds; steps after it are skipped
LOG=${GPU_CHECK_DIR:-$B/gpu-check}
mkdir -p "$LOG"
declare -a SUMMARY=()
fail=0
step() { printf '\n== %s (%ds)\n' "$*" $(($(date +%s) - T0)); }
note() { SUMMARY+=("$1"); printf '%s\n' "$1"; }
late() { [ $(($(date +%s) - T0)) -gt "$BUDGET" ]; }

# ------------------------------------------------ the list, from a log
# verified_entries <conformance -v log> <smoke ok 0/1> <model ok 0/1>:
# prints "kind name" lines for what passed. Nothing at all when a base op
# (one every model needs) failed or never passed, or the smoke test or the
# end-to-end model run failed.
verified_entries() {
  awk -v smoke="$2" -v model="$3" '
    function mark(key, ok) { if (ok) pass[key]++; else bad[key]++ }
    $1 == "ok" || $1 == "FAIL" {
      ok = $1 == "ok"; op = $2; t = $3
      if (op == "matmul" || op == "get_rows") mark("weight " t, ok)
      else if (op == "matmul_multi") {
        for (i = 3; i <= NF; i++) if (match($i, /^[A-Z0-9_]+\[/)) {
          ty = substr($i, 1, index($i, "[") - 1); if (!ok) bad["weight " ty]++ }
      } else if (op == "kv_write" || op == "attention" || op == "copy_blocks") {
        if (t == "KV" && $4 != "latent") mark("kv " $4 " " op, ok)
        if (t == "KV" && $4 == "latent") mark("op kv_latent", ok)
      } else if (op == "attention_ext") {
        mark("op attention_ext", ok); if ($4 != "latent") { if (!ok) bad["kv " $4 " attention"]++ }
        if ($4 == "latent") mark("op kv_latent", ok)
        if (index($0, " sinks")) mark("op attention_sinks", ok)
      } else if (op == "geglu" || op == "scale" || op == "swiglu_oai" ||
                 op == "matmul_experts" || op == "moe_combine") mark("op " op, ok)
      else mark("base " op, ok)
    }
    END {
      n = split("upload/download rms_norm rope swiglu add synchronize", base, " ")
      for (i = 1; i <= n; i++) if (!pass["base " base[i]] || bad["base " base[i]]) exit
      if (bad["base copy_blocks"] || smoke != 1 || model != 1) exit
      for (k in pass) {
        split(k, f, " ")
        if (f[1] == "weight" && !bad[k]) print k
        if (f[1] == "op" && !bad[k]) print k
      }
      for (k in pass) {
        split(k, f, " ")
        if (f[1] != "kv" || f[3] != "kv_write") continue
        ty = f[2]
        if (!bad[k] && pass["kv " ty " attention"] && !bad["kv " ty " attention"] &&
            !bad["kv " ty " copy_blocks"]) print "kv " ty
      }
    }' "$1" | sort -u
}

write_list() { # <entries file> <gpu> <commit> [dry: 1 = leave the tree's list alone]
  local f=backends/cuda/verified.txt day
  day=$(date -u +%Y-%m-%d)
  {
    sed -n '1,/^# kind name gpu date commit/p' "$f" | grep -v '^# No entries'
    echo "#"
    if [ -s "$1" ]; then
      while read -r kind name; do printf '%s %s %s %s %s\n' "$kind" "$name" "$2" "$day" "$3"; done <"$1"
    else
      echo "# No entries: the last gpu-check.sh run ($2, $day, $3) verified nothing."
    fi
  } >"$LOG/verified.txt.new"
  [ "${4:-0}" = 1 ] || cp "$LOG/verified.txt.new" "$f"
}

if [ "${GPU_CHECK_DRY:-0}" = 1 ]; then
  step "dry run: no GPU used"
  for t in cmake nvcc awk sed curl; do command -v "$t" >/dev/null && echo "$t: $(command -v "$t")" || echo "$t: MISSING"; done
  if [ -n "${GPU_CHECK_LOG:-}" ]; then
    echo "entries the log $GPU_CHECK_LOG would give (smoke and model taken as passed):"
    verified_entries "$GPU_CHECK_LOG" 1 1 >"$LOG/entries.txt"
    sed 's/^/  /' "$LOG/entries.txt"
    write_list "$LOG/entries.txt" DRY_RUN_GPU 0000000 1
    echo "the list it would write: $LOG/verified.txt.new"
  fi
  exit 0
fi

# --------------------------------------------------------------- the GPU
step "GPU"
if ! nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader >"$LOG/gpus.txt" 2>&1; then
  cat "$LOG/gpus.txt"; echo "nvidia-smi failed: no GPU here"; exit 1
fi
cat "$LOG/gpus.txt"
NGPU=$(wc -l <"$LOG/gpus.txt")
GPU=$(head -1 "$LOG/gpus.txt" | cut -d, -f1 | sed 's/^ *//; s/ *$//; s/ /_/g')
SM=$(head -1 "$LOG/gpus.txt" | cut -d, -f4 | tr -dc '0-9')
COMMIT=${PAGODA_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || true)}
note "GPU: $GPU (sm_$SM), $NGPU device(s); commit ${COMMIT:-unknown}"

step "build ($B, sm_$SM only)"
NCCL_OPT=""
[ "$NGPU" -ge 2 ] && NCCL_OPT="pagoda_comm_nccl"
if ! { cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$SM" >"$LOG/cmake.log" 2>&1 &&
       cmake --build "$B" -j"$J" --target pagoda pagoda-conformance pagoda_backend_cpu pagoda_backend_cuda \
         test_cuda_probe $NCCL_OPT >"$LOG/build.log" 2>&1; }; then
  tail -30 "$LOG/cmake.log" "$LOG/build.log"; echo "build failed"; exit 1
fi
PAGODA=$ROOT/$B/core/pagoda
CONF=$ROOT/$B/core/tools/conformance/pagoda-conformance
export PAGODA_PLUGIN_PATH=$ROOT/$B/plugins
"$PAGODA" plugins 2>&1 | grep -i cuda

# ----------------------------------------------------------- smoke test
step "test_cuda_probe (GPU smoke cases)"
smoke=0
if (cd "$B" && ctest -R '^test_cuda_probe$' --output-on-failure >"$LOG/smoke.log" 2>&1); then
  smoke=1; note "smoke (test_cuda_probe): passed"
else
  tail -40 "$LOG/smoke.log"; note "smoke (test_cuda_probe): FAILED ($LOG/smoke.log)"; fail=1
fi

# ---------------------------------------------------------- conformance
step "conformance: CUDA against the references"
model_ok=0
timeout 240 "$CONF" --backend cuda --set backend.cuda.allow_unverified=true -v >"$LOG/conformance.log" 2>&1
rc=$?
grep -E '^(FAIL|op  )|^[a-z_/]+ +[0-9]+ +[0-9]+ +[0-9]+|CONFORMANT' "$LOG/conformance.log"
if grep -q '^ok   model' "$LOG/conformance.log" && ! grep -q '^FAIL model' "$LOG/conformance.log"; then model_ok=1; fi
note "conformance: $(grep -E 'CONFORMANT' "$LOG/conformance.log" | tail -1 || echo "exit $rc, no verdict")"
[ $rc = 0 ] || fail=1

# -------------------------------------------------------- greedy texts
# greedy <model> <backend> <port>: the completion text of a fixed prompt
greedy() {
  local url="http://127.0.0.1:$3" ok=0 pid extra=()
  [ "$2" = cuda ] && extra=(--set backend.cuda.allow_unverified=true)
  "$PAGODA" --config configs/cpu-ci.ini --set engine.model="$1" --set engine.backend="$2" \
    "${extra[@]}" --set frontend.http.port="$3" \
    --set engine.log_level=warn --set engine.kv_dtype=f16 >>"$LOG/server-$2.log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do curl -sf "$url/health" >/dev/null && { ok=1; break; }; kill -0 $pid 2>/dev/null || break; sleep 0.2; done
  if [ $ok = 1 ]; then
    curl -s "$url/v1/completions" -H 'Content-Type: application/json' \
      -d '{"prompt": "The capital of France is", "max_tokens": 48, "temperature": 0}' |
      grep -o '"text": *"[^"]*"' | head -1
  else
    echo "(server did not come up: $LOG/server-$2.log)"
  fi
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
}

model_file() { # <name> <gen-model args...>: a real file if there is one, else a generated one
  local name=$1; shift
  for d in "${PAGODA_MODELS:-}" models /work/shared/models; do
    [ -n "$d" ] && [ -r "$d/$name" ] && { echo "$d/$name"; return; }
  done
  local out="$LOG/$name.random.gguf"
  [ -r "$out" ] || "$PAGODA" gen-model "$@" --out "$out" >"$LOG/gen-$name.log" 2>&1
  echo "$out"
}

step "greedy texts: CUDA against CPU"
if late; then note "greedy texts: skipped (over the time budget)"; else
  for spec in "SmolLM2-135M-Instruct.Q4_1.gguf --shape llama-110M --type Q4_1" \
              "gemma-3-270m-q4_k_m.gguf --shape tiny-k --arch gemma3 --type Q4_K"; do
    # shellcheck disable=SC2086
    set -- $spec
    m=$(model_file "$@")
    cpu=$(greedy "$m" cpu 18181); gpu=$(greedy "$m" cuda 18182)
    kind=real; case $m in *.random.gguf) kind="random weights (near-ties likely)";; esac
    if [ "$cpu" = "$gpu" ] && [ -n "$cpu" ]; then note "greedy $1 ($kind): same text"
    else note "greedy $1 ($kind): DIFFERS"; printf '  cpu:  %s\n  cuda: %s\n' "$cpu" "$gpu"; fi
  done
fi

# ---------------------------------------------------------- NCCL comm
step "comm-check under NCCL"
if [ "$NGPU" -lt 2 ]; then note "comm (NCCL): 1 GPU, not run (needs 2)"
elif late; then note "comm (NCCL): skipped (over the time budget)"
elif command -v mpirun >/dev/null; then
  if timeout 120 mpirun --allow-run-as-root -n 2 "$PAGODA" comm-check --comm nccl >"$LOG/comm.log" 2>&1; then
    note "comm (NCCL, 2 ranks): passed"
  else tail -20 "$LOG/comm.log"; note "comm (NCCL, 2 ranks): FAILED"; fail=1; fi
else note "comm (NCCL): mpirun not found, not run"; fi

# -------------------------------------------------------------- timing
step "timing: 1.1B shape, pagoda CUDA beside llama.cpp CUDA"
LB=${LLAMA_BENCH:-$(command -v llama-bench || true)}
for ty in Q8_0 Q4_0; do # quick to generate (a K-quant of 1.1B takes minutes)
  if late; then note "timing $ty: skipped (over the time budget)"; continue; fi
  m="$LOG/tinyllama-1.1B-$ty.gguf"
  [ -r "$m" ] || "$PAGODA" gen-model --shape tinyllama-1.1B --type "$ty" --out "$m" >"$LOG/gen-$ty.log" 2>&1
  bytes=$(stat -c %s "$m" 2>/dev/null || echo 0)
  timeout 120 "$PAGODA" bench --model "$m" --set engine.backend=cuda --set backend.cuda.allow_unverified=true \
    --requests 1 --concurrency 1 --prompt-len 512 --output-len 128 >"$LOG/bench-$ty.log" 2>&1
  note "pagoda cuda $ty ($((bytes / 1048576)) MiB): $(grep -iE 'tok/s|tokens/s' "$LOG/bench-$ty.log" | head -3 | tr -s ' ' | tr '\n' ';')"
  if [ -n "$LB" ] && "$LB" --list-devices 2>/dev/null | grep -qi cuda; then
    timeout 120 "$LB" -m "$m" -ngl 99 -p 512 -n 128 -r 3 >"$LOG/llama-$ty.log" 2>&1
    note "llama.cpp cuda $ty: $(grep -E 'pp512|tg128' "$LOG/llama-$ty.log" | awk -F'|' '{print $(NF-2) $(NF-1)}' | tr -s ' ' | tr '\n' ';')"
  else
    note "llama.cpp $ty: no CUDA build of llama-bench found (set LLAMA_BENCH): not compared"
  fi
done
note "bandwidth bound: decode tok/s x model bytes / the GPU's HBM bandwidth (H100 SXM 3.35 TB/s, H200 4.8 TB/s, A100 80G 2.0 TB/s)"

# ------------------------------------------------------------- the list
step "verified.txt"
verified_entries "$LOG/conformance.log" $smoke $model_ok >"$LOG/entries.txt"
if [ -z "$COMMIT" ]; then
  note "verified.txt: NOT written (no commit: set PAGODA_COMMIT); would list $(wc -l <"$LOG/entries.txt") entries"
else
  write_list "$LOG/entries.txt" "$GPU" "$COMMIT"
  note "verified.txt: $(wc -l <"$LOG/entries.txt") entries: $(tr '\n' ' ' <"$LOG/entries.txt")"
fi

step "summary"
for l in "${SUMMARY[@]}"; do printf '  %s\n' "$l"; done
printf '  elapsed %ds\n' $(($(date +%s) - T0))
if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
  cp "$LOG"/*.log "$LOG"/*.txt backends/cuda/verified.txt "$OUT"/ 2>/dev/null
fi
[ $fail = 0 ] && echo "all GPU checks passed" || echo "some GPU checks FAILED"
exit $fail
