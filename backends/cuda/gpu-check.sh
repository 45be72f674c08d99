#!/usr/bin/env bash
# gpu-check.sh: what to run in a session that has an NVIDIA GPU (this
# backend was written and built on machines without one). Builds, runs the
# CUDA unit/smoke test, the conformance runner against the CPU backend when
# it exists, and times prefill and decode through the HTTP server, CPU and
# CUDA side by side. Not a CI test: it needs a GPU and prints numbers.
#
#   backends/cuda/gpu-check.sh [build-dir]       (default: build-gpu)
set -u
cd "$(dirname "$0")/../.."
B=${1:-build-gpu}
J=$(nproc)
fail=0
step() { printf '\n== %s\n' "$*"; }

step "GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || fail=1

step "build ($B, sm_90 only)"
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null &&
  cmake --build "$B" -j"$J" || { echo "build failed"; exit 1; }

# Where the build put the binaries (core/pagoda today).
PAGODA=$(find "$B" -name pagoda -type f -perm -u+x | head -1)
CONF=$(find "$B" -name pagoda-conformance -type f -perm -u+x | head -1)

step "probe and smoke test (test_cuda_probe)"
"$PAGODA" plugins 2>&1 | grep -i cuda
(cd "$B" && ctest -R 'cuda' --output-on-failure) || fail=1

step "conformance: CUDA against CPU"
if [ -n "$CONF" ]; then
  "$CONF" --backend cuda || fail=1
else
  echo "pagoda-conformance not built yet: skipped"
fi

# Times one request through the server: prefill (long prompt, 1 token)
# and decode (short prompt, 128 tokens; both within cpu-ci.ini's 256 context), a few runs each.
bench() { # <config> <port>
  "$PAGODA" --config "$1" --set frontend.http.port="$2" --set engine.log_level=warn &
  local pid=$! url="http://127.0.0.1:$2" ok=0
  for _ in $(seq 100); do curl -sf "$url/health" >/dev/null && { ok=1; break; }; sleep 0.2; done
  if [ $ok = 1 ]; then
    local long; long=$(printf 'Once upon a time there was a little girl. %.0s' $(seq 8))
    for what in "prefill:$long:1" "decode:Once upon a time:128"; do
      IFS=: read -r name prompt n <<<"$what"
      for run in 1 2 3; do
        curl -s -o /dev/null -w "$1 $name run $run: %{time_total}s\n" "$url/v1/completions" \
          -H 'Content-Type: application/json' \
          -d "{\"prompt\": \"$prompt\", \"max_tokens\": $n, \"temperature\": 0, \"ignore_eos\": true}"
      done
    done
  else
    echo "$1: server did not come up"; fail=1
  fi
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
}
step "timing: CPU vs CUDA (stories260K; a tiny model, so this mostly measures overheads)"
bench configs/cpu-ci.ini 18181
bench configs/cuda.ini 18182

step "result"
[ $fail = 0 ] && echo "all GPU checks passed" || echo "some GPU checks FAILED"
exit $fail
