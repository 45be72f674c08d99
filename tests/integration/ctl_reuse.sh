#!/usr/bin/env bash
# ctl_reuse.sh [N]: tool-call markup that the vocabulary has as one token
# is written with that token (issue 28): hermes_vocab.py writes a
# tokenizer-only GGUF whose <tool_call> and </tool_call> are control
# tokens (every other byte its own token), gen-model puts a random tiny
# llama under it, and ctl_reuse.py runs N (default 4) two-turn
# conversations with the chatml template and the prefix cache: each
# constrained call must write the tags as their tokens (the call grammar's
# <tool_call> references; before them a random model spelled the tags in
# bytes about half the time, and the next turn missed from there) and
# each turn 2 find turn 1 cached less one block. The vocabulary is
# generated, so no model file is needed; no real vocabulary in reach has
# the tags (SmolLM2's spells them in pieces: call_reuse.sh).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/integ_util.bash"
integ_tmp ctl_reuse
n=${1:-4}
python3 "$here/hermes_vocab.py" "$tmp/vocab.gguf" || { echo "FAIL: hermes_vocab.py"; exit 1; }
model=$tmp/tiny-hermes.gguf
"$PAGODA_BIN" gen-model --shape tiny --type F32 --vocab "$tmp/vocab.gguf" --out "$model" >"$tmp/gen.log" 2>&1 ||
    { echo "FAIL: gen-model"; cat "$tmp/gen.log"; exit 1; }
start_server "$tmp/server.log" "$tmp/port" --config "$PAGODA_SOURCE_DIR/configs/cpu-ci.ini" \
    --set engine.model="$model" --set engine.max_seq_len=512 --set engine.chat_template=chatml \
    --set engine.kvcache=prefix --set backend.cpu.threads=1 ||
    { echo "FAIL: the server did not start"; cat "$tmp/server.log"; exit 1; }
rc=0
timeout 600 python3 "$here/ctl_reuse.py" "http://127.0.0.1:$port" "$n" || { rc=1; tail -5 "$tmp/server.log"; }
stop_server || rc=1
exit "$rc"
