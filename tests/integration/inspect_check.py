#!/usr/bin/env python3
"""inspect_check.py: inspection checks against a running pagoda server
(standard library only), driven by inspect_api.sh and inspect_ui.sh.

  inspect_check.py api URL KEY      /v1/inspect against /metrics at the same
                                    moment, under load and idle; 401 without
                                    the key; the stream; traces on the real
                                    engine
  inspect_check.py ui URL [SHOTS]   the /ui page in headless Chromium (the
                                    DevTools protocol over a pipe): the block
                                    grid shows the shared prefix blocks with
                                    refs > 1, the page's numbers equal
                                    /v1/inspect's idle and after a load, the
                                    request box shows a traced completion,
                                    the sequence table fits its panel at 1400
                                    and 1920 px; with SHOTS, screenshots of
                                    the page idle, under load (at both widths)
                                    and after it are saved there
  inspect_check.py overhead URL [N [PID [PHASE_S [MAX_TOKENS]]]]
                                    what inspection costs an N-way (16) decode
                                    step (docs/inspect.md): alternating phases
                                    with no viewer, a viewer at the server's
                                    interval, and a client asking as fast as
                                    it can; each one's median step time and,
                                    given the server's PID, its CPU per step

The server must run the prefix KV policy with a model slow enough that a
request of a few hundred tokens takes seconds (the scripts use a
random-weight llama-110M of 2 layers). Exit status 0 when every check held.
Not for: the frontend's own unit tests (tests/unit/test_http_inspect.c).
"""
import base64
import http.client
import json
import math
import os
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

FAILS = []
PROMPT = ("Once upon a time there was a little robot who lived in a quiet town by the sea. "
          "Every morning it walked along the beach and counted the shells, one by one, and "
          "wrote the numbers in a small blue book that it kept under its arm. ")


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)
    return cond


class Server:
    def __init__(self, url, key=None):
        u = urllib.parse.urlparse(url)
        self.host, self.port, self.key = u.hostname, u.port, key

    def request(self, method, path, body=None, key=True, timeout=60):
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        h = {"Content-Type": "application/json"}
        if key and self.key:
            h["Authorization"] = "Bearer " + self.key
        c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def inspect(self):
        st, data = self.request("GET", "/v1/inspect")
        assert st == 200, (st, data[:200])
        return json.loads(data)

    def metrics(self):
        st, data = self.request("GET", "/metrics")
        assert st == 200, st
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, _, val = line.rpartition(" ")
                out[name] = float(val)
        return out

    def wait_idle(self, timeout=60):
        end = time.time() + timeout
        while time.time() < end:
            s = self.inspect()
            if s["counts"]["running"] == 0 and s["counts"]["waiting"] == 0:
                return s
            time.sleep(0.05)
        raise RuntimeError("the server did not become idle")


class Stream(threading.Thread):
    """A streaming completion read in the background; stop() hangs up (the
    server cancels it)."""

    def __init__(self, srv, prompt, max_tokens, trace=False):
        super().__init__(daemon=True)
        self.srv, self.chunks, self.id, self.done = srv, 0, None, False
        self.body = {"prompt": prompt, "max_tokens": max_tokens, "stream": True,
                     "ignore_eos": True, "temperature": 0, "pagoda_trace": trace}
        self.conn = self.sock = None
        self.first = threading.Event()
        self.start()

    def run(self):
        try:
            self.conn = http.client.HTTPConnection(self.srv.host, self.srv.port, timeout=120)
            h = {"Content-Type": "application/json"}
            if self.srv.key:
                h["Authorization"] = "Bearer " + self.srv.key
            self.conn.request("POST", "/v1/completions", body=json.dumps(self.body), headers=h)
            # kept apart: a response that closes its connection (the server's
            # do) takes the socket over and the connection forgets it
            self.sock = self.conn.sock
            r = self.conn.getresponse()
            for line in r:
                line = line.strip()
                if not line.startswith(b"data: {"):
                    continue
                j = json.loads(line[6:])
                self.id = j.get("id")
                self.chunks += 1
                self.first.set()
            self.done = True
        except Exception:
            pass
        self.first.set()

    def stop(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except Exception:
            pass


def shared_load(srv, n=3, max_tokens=900):
    """One request first (its prompt then sits in full blocks the prefix
    policy has committed), then n - 1 more with the same prompt: they share
    those blocks while all run."""
    first = Stream(srv, PROMPT, max_tokens)
    first.first.wait(30)
    rest = [Stream(srv, PROMPT, max_tokens) for _ in range(n - 1)]
    for s in rest:
        s.first.wait(30)
    return [first] + rest


def snapshot_consistent(s):
    """What must hold inside one snapshot."""
    kv = s["kv"]
    blocks = kv["blocks"]
    ok = check(len(blocks) == kv["n_blocks"], "one entry per block")
    n = {"free": 0, "used": 0, "cached": 0}
    for b in blocks:
        n[b["state"]] += 1
    ok &= check((n["free"], n["used"], n["cached"]) == (kv["free"], kv["used"], kv["cached"]),
                f"block states {n} agree with the counts {kv['free'], kv['used'], kv['cached']}")
    holders = {}
    for q in s["seqs"]:
        for b in q["blocks"]:
            holders.setdefault(b, []).append(q["id"])
    for b in blocks:
        want = sorted(holders.get(b["id"], []))
        if sorted(b["seqs"]) != want or (want and b["refs"] != len(want)):
            ok &= check(False, f"block {b['id']}: seqs {b['seqs']} refs {b['refs']}, tables say {want}")
            break
    running = sum(q["state"] == "running" for q in s["seqs"])
    ok &= check(running == s["counts"]["running"], "running sequences listed")
    ok &= check(len(s["seqs"]) - running == s["counts"]["waiting"], "waiting sequences listed")
    return ok


# --------------------------------------------------------------------- api

def cmd_api(url, key):
    srv = Server(url, key)
    nokey = Server(url, None)
    st, _ = nokey.request("GET", "/v1/inspect")
    check(st == 401, f"/v1/inspect without the key: {st}, want 401")
    st, _ = nokey.request("GET", "/v1/inspect/stream")
    check(st == 401, f"/v1/inspect/stream without the key: {st}, want 401")
    st, page = nokey.request("GET", "/ui")
    check(st == 200 and b"kv-grid" in page, f"/ui without the key: {st}, want the page")

    # /metrics and /v1/inspect at the same moment, under load: a /metrics
    # read taken after a snapshot, whose steps_total is still the
    # snapshot's step, saw the same step boundary
    load = shared_load(srv, n=4, max_tokens=900)
    matches = busy = shared_seen = 0
    ids = {s.id for s in load}
    for _ in range(300):
        s = srv.inspect()
        m = srv.metrics()
        if not snapshot_consistent(s):
            break
        shared_seen = max(shared_seen, max(b["refs"] for b in s["kv"]["blocks"]))
        for q in s["seqs"]:
            check(q["request_id"] in ids, f"seq {q['id']} request_id {q['request_id']} is one of ours")
        if m["pagoda_engine_steps_total"] != s["step"]:
            continue
        matches += 1
        busy += s["counts"]["running"] >= 2
        got = (m["pagoda_num_requests_running"], m["pagoda_num_requests_waiting"],
               m["pagoda_kv_cache_blocks_used"], m["pagoda_kv_cache_blocks_free"],
               m["pagoda_kv_cache_blocks_cached"], m["pagoda_kv_cache_num_blocks"])
        want = (s["counts"]["running"], s["counts"]["waiting"], s["kv"]["used"], s["kv"]["free"],
                s["kv"]["cached"], s["kv"]["n_blocks"])
        check(got == want, f"step {s['step']}: /metrics {got}, /v1/inspect {want}")
        if busy >= 10:
            break
    print(f"api: {matches} snapshots at /metrics' moment, {busy} of them with >= 2 running; "
          f"largest refcount {shared_seen}")
    check(busy >= 3, f"only {busy} snapshots under load matched /metrics' moment")
    check(shared_seen >= 4, f"the 4 requests' common prompt blocks: refs {shared_seen}, want 4")

    # the stream while the load runs: frames, each a whole snapshot
    c = http.client.HTTPConnection(srv.host, srv.port, timeout=30)
    c.request("GET", "/v1/inspect/stream", headers={"Authorization": "Bearer " + key})
    r = c.getresponse()
    check(r.status == 200 and r.getheader("Content-Type") == "text/event-stream", "stream answers SSE")
    frames, steps, t0 = 0, [], time.time()
    for line in r:
        if line.startswith(b"data: "):
            j = json.loads(line[6:])
            frames += 1
            steps.append(j["step"])
            check(j["stream"]["listeners"] >= 1, "the stream counts its listener")
            if frames == 4:
                break
    c.close()
    check(frames == 4 and steps == sorted(steps) and len(set(steps)) == 4,
          f"4 frames of a moving engine, steps {steps}")
    interval = j["stream"]["interval_ms"]
    check(time.time() - t0 >= 3 * interval / 1000 * 0.9, "frames no closer than the interval")

    # a traced request in the middle of the load
    st, data = srv.request("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 20,
                                                      "temperature": 0, "ignore_eos": True,
                                                      "pagoda_trace": True})
    j = json.loads(data)
    tr = j["choices"][0]["pagoda_trace"]
    n_prompt = j["usage"]["prompt_tokens"]
    check(len(tr) == 20, f"{len(tr)} trace entries, want 20")
    for i, e in enumerate(tr):
        check(e["kv_tokens"] == n_prompt + i, f"token {i}: kv_tokens {e['kv_tokens']}")
        check(len(e["kv_blocks"]) == math.ceil(e["kv_tokens"] / s["kv"]["block_size"]),
              f"token {i}: {len(e['kv_blocks'])} blocks for {e['kv_tokens']} tokens")
        check(e["batch_seqs"] >= 2, f"token {i}: batch of {e['batch_seqs']} while 4 others run")
        check(e["top"][0]["token"] == e["token"] and len(e["top"]) == 5, f"token {i}: greedy is the top one")
        check(0 < sum(t["prob"] for t in e["top"]) <= 1.0001, f"token {i}: probabilities")
        if i:
            check(e["step"] > tr[i - 1]["step"], f"token {i}: steps in order")
    # the prompt's full blocks came from the cache the others made: shared
    first_blocks = tr[0]["kv_blocks"][: n_prompt // s["kv"]["block_size"] - 1]
    s_now = srv.inspect()
    for b in first_blocks:
        check(s_now["kv"]["blocks"][b]["state"] in ("used", "cached"), f"prompt block {b} kept")

    for x in load:
        x.stop()
    idle = srv.wait_idle()
    m = srv.metrics()
    s = srv.inspect()
    snapshot_consistent(s)
    got = (m["pagoda_num_requests_running"], m["pagoda_kv_cache_blocks_used"],
           m["pagoda_kv_cache_blocks_free"], m["pagoda_kv_cache_blocks_cached"], m["pagoda_engine_steps_total"])
    want = (s["counts"]["running"], s["kv"]["used"], s["kv"]["free"], s["kv"]["cached"], s["step"])
    check(got == want, f"idle: /metrics {got}, /v1/inspect {want}")
    check(s["kv"]["cached"] > 0 and s["kv"]["used"] == 0, "idle: the shared prompt stays cached")
    check(idle["version"] == s["version"], "idle: the version stands still")
    return 0 if not FAILS else 1


# ------------------------------------------------------------ the browser

class Chromium:
    """Headless Chromium driven over the DevTools protocol on a pipe
    (--remote-debugging-pipe: commands on fd 3, answers on fd 4, each a
    JSON message ended by a NUL byte)."""

    def __init__(self, profile):
        cmd_r, self.cmd_w = os.pipe()
        self.res_r, res_w = os.pipe()

        def fds():
            # copies first (the pipes may sit on 3 or 4 themselves), and
            # inheritable: a pipe is created close-on-exec, and dup2 onto
            # its own number keeps that flag
            a, b = os.dup(cmd_r), os.dup(res_w)
            os.dup2(a, 3)
            os.dup2(b, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)

        exe = next((p for p in ("chromium", "chromium-browser", "google-chrome")
                    if subprocess.call(["sh", "-c", f"command -v {p} >/dev/null"]) == 0), None)
        if not exe:
            raise FileNotFoundError("chromium")
        self.p = subprocess.Popen(
            [exe, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions",
             "--hide-scrollbars", "--user-data-dir=" + profile, "about:blank"],
            preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(res_w)
        self.buf, self.next_id, self.session = b"", 0, None
        t = self.call("Target.createTarget", {"url": "about:blank"})
        a = self.call("Target.attachToTarget", {"targetId": t["targetId"], "flatten": True})
        self.session = a["sessionId"]

    def call(self, method, params=None, timeout=60):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self.cmd_w, json.dumps(msg).encode() + b"\0")
        end = time.time() + timeout
        while time.time() < end:
            while b"\0" in self.buf:
                raw, self.buf = self.buf.split(b"\0", 1)
                j = json.loads(raw)
                if j.get("id") == self.next_id:
                    if "error" in j:
                        raise RuntimeError(f"{method}: {j['error']}")
                    return j.get("result", {})
            ready, _, _ = select.select([self.res_r], [], [], max(0.0, end - time.time()))
            if not ready:
                break
            chunk = os.read(self.res_r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            self.buf += chunk
        raise TimeoutError(method)

    def eval(self, expr, timeout=60):
        r = self.call("Runtime.evaluate", {"expression": expr, "awaitPromise": True,
                                           "returnByValue": True, "timeout": timeout * 1000}, timeout + 5)
        if "exceptionDetails" in r:
            raise RuntimeError(f"page: {r['exceptionDetails']}")
        return r["result"].get("value")

    def open(self, url, width=1400, height=1000):
        self.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                         "deviceScaleFactor": 1, "mobile": False})
        self.call("Page.navigate", {"url": url})
        self.eval("new Promise(r => { const t = () => document.readyState === 'complete' ? r(1) "
                  ": setTimeout(t, 20); t(); })")

    def resize(self, width, height=1000):
        self.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                         "deviceScaleFactor": 1, "mobile": False})

    def screenshot(self, path, width=1400):
        h = self.eval("Math.ceil(document.documentElement.scrollHeight)")
        self.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": h,
                                                         "deviceScaleFactor": 1, "mobile": False})
        time.sleep(0.3)  # a resize redraws the canvases
        png = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(png))

    def screenshot_of(self, element_id, path, width=1400):
        """One section of the page (after a full-page screenshot set the
        viewport to the whole page)."""
        r = self.eval("(() => { const b = document.getElementById(%s).getBoundingClientRect(); "
                      "return [b.x, b.y + window.scrollY, b.width, b.height]; })()" % json.dumps(element_id))
        clip = {"x": max(0, r[0] - 6), "y": max(0, r[1] - 6), "width": r[2] + 12, "height": r[3] + 12, "scale": 1}
        png = self.call("Page.captureScreenshot", {"format": "png", "clip": clip})["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(png))

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except Exception:
            pass
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


# Waits until the page has drawn at least `frames` snapshots since `since`,
# then reads what it shows.
PAGE_READ = """
new Promise((resolve, reject) => {
  const want = %d, t0 = Date.now();
  const read = () => {
    const n = (id) => document.getElementById(id).textContent;
    const g = document.getElementById('kv-grid');
    return { frames: +document.body.dataset.frames, step: +n('stat-step'), running: +n('stat-running'),
             waiting: +n('stat-waiting'), used: +n('kv-used'), cached: +n('kv-cached'), free: +n('kv-free'),
             total: +n('kv-total'), shared: +n('kv-shared'), maxrefs: +n('kv-maxrefs'),
             sharedList: g.dataset.shared, blocks: +g.dataset.blocks, drawMs: +g.dataset.drawMs,
             drawMaxMs: +g.dataset.drawMaxMs, generated: +n('stat-gen'),
             errors: document.body.dataset.errors || '' };
  };
  const tick = () => {
    if (+(document.body.dataset.frames || 0) >= want) return setTimeout(() => resolve(read()), 150);
    if (Date.now() - t0 > 30000) return reject(new Error('no snapshot reached the page'));
    setTimeout(tick, 25);
  };
  tick();
})
"""


# How the sequence table sits in its panel: its width against the scroll
# box around it, its right edge against the panel's, the narrowest id cell.
SEQ_FIT = """
(() => {
  const t = document.getElementById('seq-table'), box = t.parentElement;
  const panel = document.getElementById('seqs-panel').getBoundingClientRect();
  const ids = [...t.querySelectorAll('td.rid')].map((c) => c.getBoundingClientRect().width);
  return { rows: t.tBodies[0].rows.length, table: t.scrollWidth, box: box.clientWidth,
           right: Math.round(t.getBoundingClientRect().right), panelRight: Math.round(panel.right),
           ridMin: ids.length ? Math.round(Math.min(...ids)) : 0 };
})()
"""


def shared_of(s):
    return ",".join(f"{b['id']}:{b['refs']}" for b in s["kv"]["blocks"] if b["refs"] > 1)


def page_equals(page, s, what):
    check(not page["errors"], f"{what}: script errors on the page: {page['errors']}")
    want = {"step": s["step"], "running": s["counts"]["running"], "waiting": s["counts"]["waiting"],
            "used": s["kv"]["used"], "cached": s["kv"]["cached"], "free": s["kv"]["free"],
            "total": s["kv"]["n_blocks"], "shared": s["kv"]["shared"], "sharedList": shared_of(s),
            "blocks": len(s["kv"]["blocks"]), "generated": s["counts"]["generation_tokens_total"],
            "maxrefs": max(b["refs"] for b in s["kv"]["blocks"])}
    for k, v in want.items():
        check(page[k] == v, f"{what}: the page shows {k} = {page[k]}, /v1/inspect {v}")


def cmd_ui(url, shots=None):
    import tempfile
    srv = Server(url)
    tmp = tempfile.mkdtemp(prefix="pagoda-ui-")
    try:
        br = Chromium(tmp)
    except FileNotFoundError:
        print("SKIP: no chromium (apt-get install chromium)")
        return 77
    try:
        if shots:
            # pictures of a warm server: the first forward pass pays one-time costs
            srv.request("POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 4})
        # idle: the page and /v1/inspect agree on every number
        br.open(url + "/ui")
        page = br.eval(PAGE_READ % 1)
        page_equals(page, srv.inspect(), "idle")
        if shots:
            br.screenshot(os.path.join(shots, "inspect-idle.png"))

        # under load: three live sequences on one prompt share its blocks
        load = shared_load(srv, n=3, max_tokens=900)
        for _ in range(200):
            s = srv.inspect()
            if s["counts"]["running"] == 3 and max(b["refs"] for b in s["kv"]["blocks"]) == 3:
                break
            time.sleep(0.05)
        seen = int(br.eval("+document.body.dataset.frames"))
        page = br.eval(PAGE_READ % (seen + 2))
        s = srv.inspect()
        print(f"ui: under load the page shows shared blocks {page['sharedList']} "
              f"(grid of {page['blocks']} drawn in {page['drawMs']} ms)")
        check(not page["errors"], f"under load: script errors on the page: {page['errors']}")
        check(page["maxrefs"] == 3 and page["shared"] > 0, f"under load: max refs {page['maxrefs']}, want 3")
        check(page["sharedList"] and page["sharedList"] == shared_of(s),
              f"under load: the page's shared blocks {page['sharedList']}, /v1/inspect's {shared_of(s)}")
        check(page["running"] == 3 and s["counts"]["running"] == 3, "under load: 3 running")
        check(page["total"] == s["kv"]["n_blocks"], "under load: pool size")
        # the sequence table fits its panel at common window widths (it was
        # clipped at 1400 px: its last column past the panel's edge)
        for w in (1400, 1920):
            br.resize(w)
            fit = br.eval(SEQ_FIT)
            print(f"ui: at {w} px the sequence table is {fit['table']} px in a {fit['box']} px box, "
                  f"request ids {fit['ridMin']} px wide")
            check(fit["rows"] == 3 and fit["table"] <= fit["box"] and fit["right"] <= fit["panelRight"],
                  f"at {w} px the sequence table does not fit its panel: {fit}")
            check(fit["ridMin"] >= 40, f"at {w} px the request ids are squeezed to {fit['ridMin']} px")
            if shots:
                br.screenshot(os.path.join(shots, f"inspect-w{w}.png"), width=w)
                br.screenshot_of("seqs-panel", os.path.join(shots, f"inspect-seqs-w{w}.png"), width=w)
        br.resize(1400)
        # the request box: a traced completion, token by token
        br.eval("document.getElementById('prompt').value = %s; document.getElementById('maxtok').value = 24; "
                "document.getElementById('go').click(); 1" % json.dumps(PROMPT))
        box = br.eval("""new Promise((resolve, reject) => { const t0 = Date.now(); const tick = () => {
            const st = document.getElementById('req-status').textContent;
            if (st.startsWith('done')) return resolve({ status: st,
                tokens: document.querySelectorAll('#out .tok').length,
                cands: document.querySelectorAll('#cands tr').length,
                blocks: document.querySelectorAll('#seqkv .blk').length,
                info: document.getElementById('tok-info').textContent });
            if (st.startsWith('error') || Date.now() - t0 > 60000) return reject(new Error(st));
            setTimeout(tick, 50); }; tick(); })""", timeout=70)
        check(box["tokens"] == 24 and box["cands"] == 5 and box["blocks"] > 0,
              f"request box: {box}")
        extra = []
        if shots:
            # two more requests of their own, so the pictures show more than one prompt
            extra = [Stream(srv, "The history of the printing press begins", 900),
                     Stream(srv, "def fibonacci(n):", 900)]
            for x in extra:
                x.first.wait(30)
            seen = int(br.eval("+document.body.dataset.frames"))
            br.eval(PAGE_READ % (seen + 3))
            br.screenshot(os.path.join(shots, "inspect-load.png"))
            for el, name in (("kv", "kv"), ("steps-panel", "steps"), ("mem-panel", "memory"), ("req", "token")):
                br.screenshot_of(el, os.path.join(shots, f"inspect-{name}.png"))

        # after the load: the prompt's blocks stay cached; numbers agree again
        for x in load + extra:
            x.stop()
        s = srv.wait_idle()
        seen = int(br.eval("+document.body.dataset.frames"))
        for _ in range(100):
            page = br.eval(PAGE_READ % seen)
            if page["step"] == s["step"] and page["running"] == 0:
                break
            time.sleep(0.1)
        page_equals(page, srv.inspect(), "after the load")
        check(page["cached"] > 0, "after the load: cached blocks shown")
        if shots:
            br.screenshot(os.path.join(shots, "inspect-after.png"))
            br.screenshot_of("kv", os.path.join(shots, "inspect-kv-after.png"))
    finally:
        br.close()
        subprocess.call(["rm", "-rf", tmp])
    return 0 if not FAILS else 1


# ---------------------------------------------------------------- overhead

def decode_ms(s, n, after):
    """Median and count of the steps in s after step `after` that decoded n
    sequences and prefilled nothing (the median: a shared machine's
    hiccups land in a few steps)."""
    ms = sorted(x["ms"] for x in s["steps"]
                if x["step"] > after and x["decode_tokens"] == n and x["prefill_tokens"] == 0)
    return (ms[len(ms) // 2], len(ms)) if ms else (float("nan"), 0)


def cpu_s(pid):
    """User + system CPU seconds of a process so far (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cmd_overhead(url, n=16, pid=None, rounds=3, phase_s=8.0, max_tokens=1800):
    """Step time (wall, median) and, given the server's pid, the server's
    CPU time per step, in alternating phases: nobody watching, one viewer
    of the stream, a client asking /v1/inspect back to back."""
    srv = Server(url)
    load = [Stream(srv, PROMPT + f" Story {i}.", max_tokens) for i in range(n)]
    for x in load:
        x.first.wait(120)
    kinds = ["none", "stream", "hammer"]
    res = {k: [] for k in kinds}
    cpu = {k: [] for k in kinds}
    share = {k: [] for k in kinds}     # engine-thread time in snapshots / wall time
    build = []
    prev = [srv.inspect()["inspect"]]

    def phase(kind):
        stop = threading.Event()
        th = []
        if kind == "stream":
            def viewer():
                c = http.client.HTTPConnection(srv.host, srv.port, timeout=60)
                c.request("GET", "/v1/inspect/stream")
                r = c.getresponse()
                while not stop.is_set():
                    r.readline()
                c.close()
            th = [threading.Thread(target=viewer, daemon=True)]
        elif kind == "hammer":
            def hammer():
                while not stop.is_set():
                    srv.inspect()
            th = [threading.Thread(target=hammer, daemon=True)]
        # the phase's steps are those after this one (/metrics takes no snapshot)
        first = srv.metrics()["pagoda_engine_steps_total"]
        c0 = cpu_s(pid) if pid else 0
        t0 = time.time()
        for t in th:
            t.start()
        time.sleep(phase_s)
        stop.set()
        for t in th:
            t.join(10)
        c1 = cpu_s(pid) if pid else 0
        last = srv.metrics()["pagoda_engine_steps_total"]
        s = srv.inspect()  # after the phase: the steps it ran, with their times
        wall = time.time() - t0
        build.append(s["inspect"]["build_us"])
        ins = s["inspect"]
        share[kind].append((ins["total_ms"] - prev[0]["total_ms"], ins["count"] - prev[0]["count"], wall))
        prev[0] = ins
        res[kind].append(decode_ms(s, n, first))
        if pid and last > first:
            cpu[kind].append(1e3 * (c1 - c0) / (last - first))

    for r in range(rounds):
        for kind in kinds[r % 3:] + kinds[:r % 3]:  # the order turns, so drift does not favour one
            phase(kind)
    for x in load:
        x.stop()
    base = sum(m for m, _ in res["none"]) / rounds
    cbase = sum(cpu["none"]) / len(cpu["none"]) if cpu["none"] else 0
    print(f"{n}-way decode step, {rounds} rounds of {phase_s:.0f} s per phase, alternating:")
    for kind, label in (("none", "no viewer"), ("stream", "a /ui viewer (the stream)"),
                        ("hammer", "/v1/inspect back to back")):
        ms = sum(m for m, _ in res[kind]) / rounds
        cnt = sum(c for _, c in res[kind])
        each = ", ".join(f"{m:.2f}" for m, _ in res[kind])
        line = f"  {label:28s} {ms:8.3f} ms wall ({cnt} steps; rounds {each})  {100 * (ms / base - 1):+5.1f} %"
        if cpu[kind]:
            c = sum(cpu[kind]) / len(cpu[kind])
            line += f";  CPU {c:7.2f} ms/step {100 * (c / cbase - 1):+5.1f} %"
        print(line)
        ms_in = sum(x[0] for x in share[kind])
        n_in = sum(x[1] for x in share[kind])
        wall = sum(x[2] for x in share[kind])
        print(f"  {'':28s} engine thread in snapshots: {n_in} snapshots, {ms_in:.2f} ms of "
              f"{wall * 1e3:.0f} ms ({100 * ms_in / (wall * 1e3):.3f} %)")
    build.sort()
    print(f"  one snapshot on the engine thread: median {build[len(build) // 2]:.0f} us, "
          f"{build[0]:.0f} .. {build[-1]:.0f} us")
    return 0


def main(argv):
    if len(argv) >= 3 and argv[1] == "api":
        return cmd_api(argv[2], argv[3] if len(argv) > 3 else "")
    if len(argv) >= 3 and argv[1] == "ui":
        return cmd_ui(argv[2], argv[3] if len(argv) > 3 else None)
    if len(argv) >= 3 and argv[1] == "overhead":
        return cmd_overhead(argv[2], n=int(argv[3]) if len(argv) > 3 else 16,
                            pid=int(argv[4]) if len(argv) > 4 else None,
                            phase_s=float(argv[5]) if len(argv) > 5 else 8.0,
                            max_tokens=int(argv[6]) if len(argv) > 6 else 1800)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
