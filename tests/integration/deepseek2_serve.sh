#!/usr/bin/env bash
# deepseek2 (multi-head latent attention, its latent-only KV cache) through
# the whole server (stdin frontend), on the tiny V3-style reference model
# of tests/fixtures/mla: the first request's greedy completion is the same
# with the paged, contiguous and prefix KV policies (a weak check: that
# random model's text is one token repeated; test_mla_ref checks the
# logits); with the prefix policy
# a second request of the same prompt, sent after the first has finished,
# hits the cache (cached_tokens > 0: its whole blocks of latents are
# reused); F16 and Q8_0 latent caches serve both requests.
set -euo pipefail
bin=${PAGODA_BIN:?}
src=${PAGODA_SOURCE_DIR:?}
model="$src/tests/fixtures/mla/deepseek3-tiny.f32.gguf"
[ -f "$model" ] || { echo "skip: no $model"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
req='{"prompt": "The river town woke slowly on market days, and the boats came in one by one.", "max_tokens": 12, "temperature": 0, "ignore_eos": true}'
run() {  # run KVCACHE KV_DTYPE: two requests, the second after the first's answer
  mkfifo "$tmp/in"
  "$bin" --config "$src/configs/cpu-ci.ini" --set engine.model="$model" --set engine.frontend=stdin \
         --set engine.kvcache="$1" --set engine.kv_dtype="$2" --set engine.kv_cache_tokens=512 \
         --set engine.max_seq_len=256 <"$tmp/in" >"$tmp/out" 2>"$tmp/err" &
  local pid=$!
  exec 3>"$tmp/in"
  echo "$req" >&3
  for _ in $(seq 1 600); do [ "$(wc -l <"$tmp/out")" -ge 1 ] && break; sleep 0.1; done
  echo "$req" >&3
  exec 3>&-
  wait "$pid" || { echo "FAIL: $1 $2: exit"; tail -5 "$tmp/err"; rm -f "$tmp/in"; return 1; }
  rm -f "$tmp/in"
}
field() { python3 -c "import json,sys; print([json.loads(l)$1 for l in open(sys.argv[1])])" "$tmp/out"; }
fail=0
ref=""
for kv in paged contiguous prefix; do
  run "$kv" f32 || { fail=1; continue; }
  texts=$(python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['text'])" "$tmp/out")
  cached=$(field '["usage"]["cached_tokens"]')
  n=$(wc -l <"$tmp/out")
  if [ "$n" != 2 ]; then echo "FAIL: $kv: $n answers"; fail=1; continue; fi
  [ -z "$ref" ] && ref=$texts
  if [ "$texts" != "$ref" ]; then echo "FAIL: $kv: first text '$texts', paged '$ref'"; fail=1; fi
  if [ "$kv" = prefix ]; then
    second=$(python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readlines()[1])['usage']['cached_tokens'])" "$tmp/out")
    if [ "$second" -gt 0 ]; then echo "ok: prefix: the second request reused $second cached tokens of latents"
    else echo "FAIL: prefix: no cache hit ($cached)"; fail=1; fi
  fi
  echo "ok: $kv: $texts (cached $cached)"
done
for dt in f16 q8_0; do
  run prefix "$dt" || { fail=1; continue; }
  n=$(grep -c '"finish_reason":"length"' "$tmp/out" || true)
  if [ "$n" = 2 ]; then echo "ok: latent KV $dt: 2 completions ($(field '["text"]'))"
  else echo "FAIL: latent KV $dt"; cat "$tmp/out"; tail -5 "$tmp/err"; fail=1; fi
done
exit $fail
