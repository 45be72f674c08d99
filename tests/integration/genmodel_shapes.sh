#!/usr/bin/env bash
# A random-weight model of TinyLlama-1.1B's shape (dim 2048, 32 heads, 4 KV
# heads, FFN 5632, vocabulary 32000; 2 of its 22 layers, to keep CI fast)
# loads in F16, Q8_0 and Q4_0 and generates exactly the tokens asked for,
# through the whole server (stdin frontend). The full 22-layer files are
# exercised by `pagoda bench` (docs/benchmarks.md).
set -euo pipefail
bin=${PAGODA_BIN:?}
src=${PAGODA_SOURCE_DIR:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
vocab=()
if [ -f "$src/tests/data/vocab/ggml-vocab-llama-spm.gguf" ]; then
  vocab=(--vocab "$src/tests/data/vocab/ggml-vocab-llama-spm.gguf")
fi
fail=0
for t in F16 Q8_0 Q4_0; do
  m="$tmp/tl-$t.gguf"
  "$bin" gen-model --shape tinyllama-1.1B --layers 2 --type "$t" --out "$m" "${vocab[@]}" >/dev/null
  out=$(printf '{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "ignore_eos": true}\n' |
        "$bin" --config "$src/configs/cpu-ci.ini" --set engine.model="$m" --set engine.frontend=stdin \
               --set engine.kv_cache_tokens=256 --set engine.max_seq_len=256 --set engine.memory_budget=2G 2>"$tmp/err")
  if echo "$out" | grep -q '"completion_tokens":8' && echo "$out" | grep -q '"finish_reason":"length"'; then
    echo "ok: tinyllama-1.1B shape $t loads and generates 8 tokens"
  else
    echo "FAIL: tinyllama-1.1B shape $t: output: $out"; tail -5 "$tmp/err"; fail=1
  fi
  rm -f "$m"
done
exit $fail
