#!/usr/bin/env bash
# chat_interrupt.sh: Ctrl-C in terminal chat (the stdin frontend on a
# pseudo-terminal). Ctrl-C while a reply streams stops the reply and quits,
# and says so; it must not print a fresh "> " that nothing will read
# (issue 15 finding 5). A random 4-layer llama-110M-shaped model keeps the
# reply streaming while the test presses Ctrl-C.
# Not for: batch mode or SIGTERM (stdin_drain.sh).
set -u
: "${PAGODA_BIN:?set by ctest}" "${PAGODA_SOURCE_DIR:?set by ctest}"
tmp=$(mktemp -d /tmp/pagoda-chatint-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$PAGODA_BIN" gen-model --shape llama-110M --type Q4_0 --layers 4 --out "$tmp/slow.gguf" >/dev/null 2>&1 ||
    { echo "FAIL: gen-model"; exit 1; }
python3 - "$PAGODA_BIN" "$PAGODA_SOURCE_DIR/configs/cpu-ci.ini" "$tmp" <<'PY'
import os, pty, select, signal, sys, time
binary, cfg, tmp = sys.argv[1:4]
argv = [binary, "--config", cfg, "--set", "engine.frontend=stdin",
        "--set", "engine.model=" + tmp + "/slow.gguf", "--set", "engine.max_seq_len=512",
        "--set", "engine.kv_cache_tokens=2048", "--set", "backend.cpu.threads=1",
        "--set", "frontend.stdin.mode=chat", "--set", "frontend.stdin.max_tokens=400"]
pid, fd = pty.fork()
if pid == 0:
    err = os.open(tmp + "/err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(err, 2)
    os.execv(binary, argv)
out = b""
def read_until(pred, timeout):
    global out
    end = time.time() + timeout
    while time.time() < end and not pred():
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                b = os.read(fd, 4096)
            except OSError:
                return False
            if not b:
                return False
            out += b
    return pred()
def fail(msg):
    print("FAIL:", msg)
    print("terminal output:", repr(out[-600:]))
    try:
        print(open(tmp + "/err").read()[-2000:])
    except OSError:
        pass
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    sys.exit(1)
if not read_until(lambda: out.endswith(b"> "), 120):
    fail("no prompt")
os.write(fd, b"Once upon a time\n")
mark = len(out)
# the reply is streaming: some bytes past the echoed line
if not read_until(lambda: len(out) > mark + len(b"Once upon a time\r\n") + 8, 60):
    fail("no reply streaming")
os.write(fd, b"\x03")  # Ctrl-C: the terminal sends SIGINT to pagoda
t0 = time.time()
read_until(lambda: False, 20)  # to EOF: pagoda has quit
status = None
for _ in range(100):
    done, st = os.waitpid(pid, os.WNOHANG)
    if done:
        status = st
        break
    time.sleep(0.1)
if status is None:
    fail("still running 30 s after Ctrl-C (waiting for a line it will ignore)")
tail = out[mark:]
print("after Ctrl-C (%.1f s): %r" % (time.time() - t0, tail[-200:]))
if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
    fail("exit status %r" % status)
if b"quitting" not in tail:
    fail("Ctrl-C did not say that pagoda is quitting")
if tail.rstrip().endswith(b">"):
    fail("a fresh prompt was printed although pagoda is quitting")
print("ok")
PY
