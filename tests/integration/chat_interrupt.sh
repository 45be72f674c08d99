#!/usr/bin/env bash
# chat_interrupt.sh: Ctrl-C in terminal chat (the stdin frontend on a
# pseudo-terminal, stdout and stderr both on it, as a user sees them).
#  - the "> " prompt shows before the first message, after the start-up log;
#  - Ctrl-C while a reply streams stops that reply ("[reply stopped]"), and
#    the chat goes on: a fresh prompt, and the next message gets a reply;
#  - Ctrl-C at the empty prompt quits (exit 0), says so, prints no fresh
#    prompt, and the core's "SIGINT: stopping" log line starts a line of
#    its own instead of landing inside the chat text (issue 23).
# Every wait is on the terminal's output with a deadline, never a fixed
# sleep. A random 4-layer llama-110M-shaped model keeps each reply
# streaming (up to 300 tokens) while the test presses Ctrl-C.
# Not for: batch mode or SIGTERM (stdin_drain.sh).
set -u
: "${PAGODA_BIN:?set by ctest}" "${PAGODA_SOURCE_DIR:?set by ctest}"
tmp=$(mktemp -d /tmp/pagoda-chatint-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$PAGODA_BIN" gen-model --shape llama-110M --type Q4_0 --layers 4 --out "$tmp/slow.gguf" >/dev/null 2>&1 ||
    { echo "FAIL: gen-model"; exit 1; }
python3 - "$PAGODA_BIN" "$PAGODA_SOURCE_DIR/configs/cpu-ci.ini" "$tmp" <<'PY'
import os, pty, re, select, signal, sys, time
binary, cfg, tmp = sys.argv[1:4]
argv = [binary, "--config", cfg, "--set", "engine.frontend=stdin",
        "--set", "engine.model=" + tmp + "/slow.gguf", "--set", "engine.max_seq_len=1024",
        "--set", "engine.kv_cache_tokens=4096", "--set", "backend.cpu.threads=1",
        "--set", "frontend.stdin.mode=chat", "--set", "frontend.stdin.max_tokens=300",
        "--set", "engine.log_level=info"]
pid, fd = pty.fork()
if pid == 0:
    os.environ["PAGODA_CPU_REPACK_MIN_T"] = "0"  # its 256 MiB budget predates the plan counting repacked copies
    os.execv(binary, argv)
out = b""
eof = False
def read_until(pred, timeout):
    """Read the terminal until pred() holds, EOF, or the deadline."""
    global out, eof
    end = time.monotonic() + timeout
    while not pred() and not eof:
        left = end - time.monotonic()
        if left <= 0:
            break
        r, _, _ = select.select([fd], [], [], left)
        if not r:
            continue
        try:
            b = os.read(fd, 4096)
        except OSError:
            b = b""
        if not b:
            eof = True
        out += b
    return pred()
def fail(msg):
    print("FAIL:", msg)
    print("terminal output (last 1500 bytes):", repr(out[-1500:]))
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    sys.exit(1)
def prompt_after(mark):
    return out.endswith(b"> ") and len(out) > mark
def reply_streaming(mark, sent):
    # past the echoed line, some bytes of the reply (not a prompt)
    tail = out[mark:]
    i = tail.find(sent + b"\r\n")
    return i >= 0 and len(tail) > i + len(sent) + 2 + 8

if not read_until(lambda: out.endswith(b"> "), 180):
    fail("no prompt")
serving = out.find(b"serving ")
if serving < 0 or serving > out.rfind(b"> "):
    fail("the first prompt came before the start-up log ended ('serving ...' line)")

# 1. Ctrl-C while the reply streams: the reply stops, the chat goes on
for turn, msg in enumerate([b"Once upon a time", b"Tell me more"]):
    mark = len(out)
    os.write(fd, msg + b"\n")
    if not read_until(lambda: reply_streaming(mark, msg), 120):
        fail("turn %d: no reply streaming" % turn)
    os.write(fd, b"\x03")
    if not read_until(lambda: b"[reply stopped]" in out[mark:] and prompt_after(mark), 60):
        fail("turn %d: Ctrl-C did not stop the reply and give a fresh prompt" % turn)
    if eof:
        fail("turn %d: pagoda quit on the first Ctrl-C" % turn)
    if b"SIGINT" in out[mark:] or b"quitting" in out[mark:]:
        fail("turn %d: a reply's Ctrl-C was taken as a quit" % turn)

# 2. Ctrl-C at the empty prompt: pagoda quits
mark = len(out)
os.write(fd, b"\x03")
read_until(lambda: False, 60)  # to EOF: pagoda has quit
if not eof:
    fail("still running 60 s after Ctrl-C at the prompt")
signal.alarm(60)
_, status = os.waitpid(pid, 0)
signal.alarm(0)
tail = out[mark:]
print("after Ctrl-C at the prompt: %r" % tail[-300:])
if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
    fail("exit status %r" % status)
if b"quitting" not in tail:
    fail("Ctrl-C at the prompt did not say that pagoda is quitting")
if tail.rstrip().endswith(b">"):
    fail("a fresh prompt was printed although pagoda is quitting")
# the log line is whole, at the start of a line: "\n2026-01-01 12:00:00.123 INFO  SIGINT: ..."
if not re.search(rb"(^|\n)\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} INFO  SIGINT: stopping", tail):
    fail("no 'SIGINT: stopping' log line at the start of a line")
print("ok")
PY
