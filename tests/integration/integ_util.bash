# integ_util.bash: what the shell integration tests share, sourced (not a
# test: tests/CMakeLists.txt runs integration/*.sh only): the environment
# ctest sets, a scratch folder removed on exit with any server still
# running killed, failure counting, and `pagoda` started in the background
# on a free loopback port and stopped with SIGTERM.
# Not for: the C integration tests (integ_util.c).
: "${PAGODA_BIN:?set by ctest}" "${PAGODA_SOURCE_DIR:?set by ctest}"
# shellcheck disable=SC2034 # build, port: for the scripts that source this
build=${PAGODA_BUILD_DIR:-$(dirname "$(dirname "$PAGODA_BIN")")}
pid=
port=
fails=0

# integ_tmp NAME: makes $tmp (/tmp/pagoda-NAME-XXXXXX); on exit the server
# ($pid) is killed if it still runs and $tmp removed.
# $smol, SmolLM2-135M-Instruct's file, or exit 77 (skipped) without it or
# under a sanitizer build (135M parameters there outlast the timeouts)
integ_need_smollm2() {
    smol="$PAGODA_SOURCE_DIR/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    if [ ! -f "$smol" ]; then echo "SKIP: no $smol (models/get-model)"; exit 77; fi
    if [ -n "${PAGODA_SANITIZER:-}" ]; then echo "SKIP: SmolLM2 under $PAGODA_SANITIZER is too slow"; exit 77; fi
}
integ_tmp() {
    tmp=$(mktemp -d "/tmp/pagoda-$1-XXXXXX")
    trap integ_cleanup EXIT
}
integ_cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; wait "$pid" 2>/dev/null; fi
    rm -rf "$tmp"
}

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# integ_venv DIR PACKAGE...: a Python virtual environment at DIR with the
# packages from PyPI, made once (DIR/.pagoda-ok marks a finished one, which
# later runs reuse); exits 77 (ctest: skipped) with a message when the venv
# module is missing or pip cannot install them. Needs $tmp (integ_tmp).
integ_venv() {
    local dir=$1
    shift
    # the marker lists what the venv holds: one that lacks a package asked
    # for now (an older venv, or one another script made with fewer) is rebuilt
    local have=1 p
    for p in "$@"; do
        grep -qx -- "$p" "$dir/.pagoda-ok" 2>/dev/null || have=0
    done
    [ "$have" = 1 ] && return 0
    rm -rf "$dir"
    if ! python3 -m venv "$dir" >"$tmp/venv.log" 2>&1; then
        echo "SKIP: python3 -m venv failed (install python3-venv):"; tail -3 "$tmp/venv.log"
        exit 77
    fi
    if ! "$dir/bin/pip" install --disable-pip-version-check -q --timeout 20 --retries 1 "$@" \
            >"$tmp/pip.log" 2>&1; then
        echo "SKIP: pip could not install $* (PyPI unreachable?):"; tail -3 "$tmp/pip.log"
        rm -rf "$dir"
        exit 77
    fi
    printf '%s\n' "$@" >"$dir/.pagoda-ok"
}

# start_server LOG PORTFILE ARGS...: `pagoda ARGS` in the background ($pid)
# on port 0 writing PORTFILE, output to LOG; waits (bounded: 30 s) for the
# port ($port). Returns 1 when the server exited or wrote no port first.
start_server() {
    local log=$1 portfile=$2
    shift 2
    rm -f "$portfile"
    "$PAGODA_BIN" "$@" --set frontend.http.port=0 --set frontend.http.port_file="$portfile" >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 300); do
        [ -s "$portfile" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    [ -s "$portfile" ] || return 1
    # shellcheck disable=SC2034
    port=$(cat "$portfile")
}

# stop_server: SIGTERM, then waits (bounded: 30 s, then SIGKILL and a
# failure); returns the server's exit status.
stop_server() {
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && { fail "server still running 30 s after SIGTERM"; kill -KILL "$pid"; }
    local st=0
    wait "$pid" 2>/dev/null || st=$?
    pid=
    return "$st"
}
