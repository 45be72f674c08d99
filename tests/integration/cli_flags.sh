#!/usr/bin/env bash
# cli_flags.sh: the serve command line as llama-server and vllm users type
# it (issue 23), and the config checked before anything loads.
#  - `pagoda serve MODEL.gguf --port P -c N -np N` from a folder with no
#    configs/: the source tree's configs/default.ini is found from the
#    build-tree binary, the flags win over it (the model, the context), and
#    the server answers;
#  - `pagoda --help` lists the short flags with their INI keys;
#  - a misspelled plugin section or key is one line naming file:line and the
#    closest name, exit 2, before the model is opened or the memory plan
#    printed.
# Not for: each flag's mapping (test_config's test_short_flags).
# shellcheck source=integ_util.bash
. "$(dirname "$0")/integ_util.bash"
integ_tmp cliflags
model="$PAGODA_SOURCE_DIR/models/stories260K.gguf"

cd "$tmp" || exit 1 # no configs/ here
start_server "$tmp/log" "$tmp/port" serve "$model" -c 128 -np 3 --host 127.0.0.1 --port 0 ||
    { fail "server did not start"; cat "$tmp/log"; exit 1; }
grep -q "no --config given: using $PAGODA_SOURCE_DIR/configs/default.ini" "$tmp/log" ||
    fail "the source tree's default.ini was not used: $(head -3 "$tmp/log")"
mem=$(curl -s "http://127.0.0.1:$port/v1/memory")
python3 -c "
import json, sys
m = json.loads(sys.argv[1])['limits']
assert m['max_seq_len'] == 128, m['max_seq_len']
assert m['max_num_seqs'] == 3, m['max_num_seqs']
" "$mem" || fail "-c 128 -np 3 not in the memory plan: $mem"
out=$(curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}')
case "$out" in *'"completion_tokens":4'*) ;; *) fail "no completion: $out" ;; esac
stop_server || fail "server exited $? after SIGTERM"

help=$("$PAGODA_BIN" --help)
for want in "--port V" "frontend.http.port" "-c,--ctx-size,--max-model-len V" "engine.max_seq_len" \
    "-np,--parallel,--max-num-seqs V" "scheduler.*.max_num_seqs"; do
    case "$help" in *"$want"*) ;; *) fail "pagoda --help lacks '$want'" ;; esac
done

# a typo in a plugin section's name, then in a key: refused before the model opens
printf '[engine]\nmodel = %s\n\n[frontend.htp]\nport = 9000\n' "$model" >"$tmp/typo.ini"
st=0
"$PAGODA_BIN" --config "$tmp/typo.ini" >"$tmp/out" 2>"$tmp/err" || st=$?
[ "$st" -eq 2 ] || fail "typo'd section: exit $st, not 2"
grep -q "typo.ini:4: \[frontend.htp\]: there is no frontend plugin 'htp'; did you mean \[frontend.http\]?" \
    "$tmp/err" || fail "typo'd section: $(cat "$tmp/err")"
grep -qi "memory plan\|model stories" "$tmp/err" && fail "typo'd section: reported after the model opened"
printf '[engine]\nmodel = %s\n\n[frontend.http]\nprot = 9000\n' "$model" >"$tmp/typo.ini"
st=0
"$PAGODA_BIN" --config "$tmp/typo.ini" >"$tmp/out" 2>"$tmp/err" || st=$?
[ "$st" -eq 2 ] || fail "typo'd key: exit $st, not 2"
grep -q "typo.ini:5: unknown key 'prot' in \[frontend.http\]; did you mean 'port'?" "$tmp/err" ||
    fail "typo'd key: $(cat "$tmp/err")"
grep -qi "memory plan\|model stories" "$tmp/err" && fail "typo'd key: reported after the model opened"
st=0
"$PAGODA_BIN" serve "$model" --prot 9000 >"$tmp/out" 2>"$tmp/err" || st=$?
[ "$st" -eq 2 ] || fail "--prot: exit $st, not 2"
grep -q "unknown argument '--prot'; did you mean '--port'?" "$tmp/err" || fail "--prot: $(cat "$tmp/err")"

[ "$fails" -eq 0 ] || exit 1
echo "cli flags: serve MODEL --port -c -np from a folder without configs/, --help, typos refused first"
