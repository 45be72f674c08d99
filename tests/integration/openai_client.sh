#!/usr/bin/env bash
# openai_client.sh: the official `openai` Python client (from PyPI) against
# a real pagoda server: sets up a virtual environment (kept in the build
# folder so later runs reuse it), starts the server on a free loopback port
# with an API key, runs openai_client.py, stops the server. Exits 77 (ctest:
# skipped) with a message when the venv module is missing or PyPI cannot
# be reached. Not for: the HTTP details (tests/integration/http_server.c).
set -u
: "${PAGODA_BIN:?set by ctest}" "${PAGODA_SOURCE_DIR:?set by ctest}"
build=${PAGODA_BUILD_DIR:-$(dirname "$(dirname "$PAGODA_BIN")")}
here=$(cd "$(dirname "$0")" && pwd)
venv=$build/openai-venv
tmp=$(mktemp -d /tmp/pagoda-openai-XXXXXX)
pid=

cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

if [ ! -f "$venv/.pagoda-ok" ]; then
    rm -rf "$venv"
    if ! python3 -m venv "$venv" >"$tmp/venv.log" 2>&1; then
        echo "SKIP: python3 -m venv failed (install python3-venv):"; tail -3 "$tmp/venv.log"
        exit 77
    fi
    if ! "$venv/bin/pip" install --disable-pip-version-check -q --timeout 20 --retries 1 openai \
            >"$tmp/pip.log" 2>&1; then
        echo "SKIP: pip could not install openai (PyPI unreachable?):"; tail -3 "$tmp/pip.log"
        rm -rf "$venv"
        exit 77
    fi
    touch "$venv/.pagoda-ok"
fi

"$PAGODA_BIN" --config "$PAGODA_SOURCE_DIR/configs/cpu-ci.ini" --set backend.cpu.threads=1 \
    --set frontend.http.port=0 --set frontend.http.port_file="$tmp/port" \
    --set frontend.http.api_key=test-key >"$tmp/server.log" 2>&1 &
pid=$!
for _ in $(seq 300); do
    [ -s "$tmp/port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
if [ ! -s "$tmp/port" ]; then
    echo "FAIL: the server did not start"; cat "$tmp/server.log"; exit 1
fi
port=$(cat "$tmp/port")

rc=0
timeout 120 "$venv/bin/python" "$here/openai_client.py" "http://127.0.0.1:$port/v1" test-key \
    "$PAGODA_SOURCE_DIR/tests/data/stories260K.golden.json" || rc=1

kill -TERM "$pid"
for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && { echo "FAIL: still running 30 s after SIGTERM"; kill -KILL "$pid"; }
st=0
wait "$pid" || st=$?
pid=
if [ "$st" -ne 0 ]; then
    echo "FAIL: server exit status $st after SIGTERM"; rc=1
fi
[ "$rc" -eq 0 ] || tail -20 "$tmp/server.log"
exit $rc
