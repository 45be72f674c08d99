#!/usr/bin/env python3
"""tier_bench.py: the prefix cache's disk tier measured (docs/policies.md,
"The disk tier"; issue 30).

    python3 docs/examples/tier_bench.py --pagoda build/core/pagoda \
        --model models/SmolLM2-135M-Instruct.Q4_1.gguf [--tokens 8000] \
        [--rounds 2] [--port 18990] [--threads 2] [--part all|ttft|chat|prefetch]

For one model, side by side and alternating, round after round:
  recompute  a server with the tier on an empty directory: the long prompt
             (about --tokens tokens) is prefilled from nothing;
  tier       the same server restarted on the directory the recompute run
             left: its pool is empty, the prefix comes back from the tier.
Both are timed as the request's time to its first token (max_tokens 1,
the same prompt), and the script checks that both answer the same token.
Then a ten-turn conversation (chat completions, greedy, 24 tokens a turn)
is run once, the server restarted, and replayed turn by turn: for turns 2
to 10 it prints cached_tokens over the prompt's tokens (a lower bound of
the share of the earlier turns' tokens served from the tier, since the
prompt also holds the new user turn).

Then (--part prefetch) a request queued behind another, read ahead or
not: servers with max_num_seqs 1 on one store that holds the long
prompt's blocks, restarted for each run (an empty pool), alternating
tier_prefetch = 256M (the default) and 0. Each run streams a request A (a
short prompt, --busy tokens) and, once A's first token is out, the long
prompt B (max_tokens 1), which waits in the queue until A ends. Printed:
the time B's admit spent reading its blocks back (the engine's
pagoda_kv_tier_restore_seconds_total), the server's time from being
scheduled to the first token (A's and B's, from its histograms' sums),
B's first token after A's last (what the queue wait left for B: its
admit, which reads the tier or copies what was read ahead, then its last
block and first step) and B's time to first token from its request.
With --evict the block files are dropped from the page cache
(posix_fadvise DONTNEED) before each run, so B's blocks come from the
disk itself.

The block files sit in the page cache after the first run; with
--drop-caches (root) the script asks the kernel to drop them before each
tier run, so the tier is read from the disk itself.

Prints one table; writes nothing but a temporary directory it deletes.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request


def post(port, path, body, timeout=900):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        out = {}
        for line in r.read().decode().splitlines():
            if line.startswith(("pagoda_kv_tier_", "pagoda_prefix_cache",
                                "pagoda_time_to_first_token_seconds_sum",
                                "pagoda_request_queue_time_seconds_sum")):
                k, v = line.split()
                out[k] = float(v)
        return out


class Server:
    def __init__(self, a, tier_dir, log, extra=""):
        ini = os.path.join(tier_dir, "..", "bench.ini")
        with open(ini, "w") as f:
            f.write(f"""[engine]
model = {os.path.abspath(a.model)}
backend = cpu
scheduler = continuous
kvcache = prefix
frontend = http
max_seq_len = {a.ctx}
kv_dtype = f16
temperature = 0
log_level = info
[kvcache.prefix]
tier_dir = {tier_dir}
{extra}
[frontend.http]
host = 127.0.0.1
port = {a.port}
[backend.cpu]
threads = {a.threads}
""")
        self.log = open(log, "a")
        self.p = subprocess.Popen([a.pagoda, "--config", ini], stdout=self.log, stderr=self.log)
        self.port = a.port
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.p.poll() is not None:
                sys.exit(f"the server exited ({self.p.returncode}); see {log}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{a.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except Exception:
                pass
            time.sleep(0.2)
        sys.exit("the server did not become healthy")

    def stop(self):
        self.p.terminate()  # SIGTERM: the tier writes what it has queued
        self.p.wait(timeout=300)
        self.log.close()


def long_prompt(n_tokens):
    # about one token a word for this kind of text; the usage says how many
    words = []
    i = 0
    while len(words) < n_tokens:
        words += f"Item {i} of the inventory is a box of {i % 17} red and {i % 5} blue marbles.".split()
        i += 1
    return " ".join(words[: int(n_tokens * 0.62)])


def ttft(port, prompt):
    t = time.time()
    j = post(port, "/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0})
    return time.time() - t, j["usage"], j["choices"][0]["text"]


def stream(port, path, body, on_first=None, timeout=900):
    """POST a streamed request; returns (time of its first content chunk,
    time of its end, text). on_first runs once the first chunk is in."""
    body = dict(body, stream=True)
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t_first, text = None, ""
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            j = json.loads(line[5:])
            ch = j.get("choices") or [{}]
            piece = ch[0].get("text") or ""
            if piece and t_first is None:
                t_first = time.time()
                if on_first:
                    on_first()
            text += piece
    return t_first, time.time(), text


def evict(store):
    # drop the block files from the page cache: the next reads go to the disk
    for root, _, files in os.walk(store):
        for f in files:
            if f.endswith(".kvb"):
                fd = os.open(os.path.join(root, f), os.O_RDONLY)
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.close(fd)


def prefetch_part(a, work, log, prompt):
    import threading
    d = os.path.join(work, "prefetch")
    os.makedirs(d)
    queued = "[scheduler.continuous]\nmax_num_seqs = 1"
    s = Server(a, d, log)
    ttft(a.port, prompt)  # computes the prompt; its blocks go to the tier at release
    s.stop()
    busy = "Write a long story about a lighthouse keeper and the sea."
    rows = []
    for r in range(a.rounds):
        for on in ([True, False] if r % 2 == 0 else [False, True]):
            if a.evict:
                evict(d)
            # written under [kvcache.prefix], after its tier_dir
            extra = ("" if on else "tier_prefetch = 0\n") + queued
            s = Server(a, d, log, extra)
            out = {}

            def run_b():  # max_tokens 1: its answer is its first token
                out["b_sent"] = time.time()
                j = post(a.port, "/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0})
                out["b"] = (time.time(), j["usage"], j["choices"][0]["text"])
            th = threading.Thread(target=run_b)
            ta = stream(a.port, "/v1/completions",
                        {"prompt": busy, "max_tokens": a.busy, "temperature": 0,
                         "ignore_eos": True}, on_first=th.start)
            th.join()
            # the engine publishes its counters after the step that answered B:
            # wait for them to count B's tier tokens (usage already does)
            want = out["b"][1]["prompt_tokens_details"].get("tier_cached_tokens", 0)
            deadline = time.time() + 30
            while True:
                m = metrics(a.port)
                if m.get("pagoda_kv_tier_hits_total", 0) >= want or time.time() > deadline:
                    break
                time.sleep(0.05)
            s.stop()
            b_first, b_usage, b_text = out["b"]
            rows.append((r, "on" if on else "off", b_first - ta[1], b_first - out["b_sent"],
                         m.get("pagoda_kv_tier_prefetch_hits_total", 0),
                         b_usage["prompt_tokens_details"].get("tier_cached_tokens", 0), b_text,
                         1e3 * m.get("pagoda_kv_tier_restore_seconds_total", 0),
                         m.get("pagoda_time_to_first_token_seconds_sum", 0) -
                         m.get("pagoda_request_queue_time_seconds_sum", 0)))
    texts = {x[6] for x in rows}
    if len(texts) != 1:
        sys.exit(f"the queued request answered differently: {texts}")
    print(f"\nqueued request, read ahead or not (max_num_seqs 1, A: {a.busy} tokens; "
          f"{'block files evicted from the page cache' if a.evict else 'page cache warm'}), "
          f"load average now: {os.getloadavg()[0]:.1f}")
    print("| round | prefetch | admit's restore ms | scheduled to first token, A + B s "
          "| B's first token after A's end s | B's TTFT s | blocks read ahead used | tokens from tier |")
    print("|---|---|---|---|---|---|---|---|")
    for r, mode, after, tt, ph, th_, _, rest, sched in rows:
        print(f"| {r} | {mode} | {rest:.1f} | {sched:.3f} | {after:.3f} | {tt:.2f} | {ph:.0f} | {th_:.0f} |")

    def med(xs):
        xs = sorted(xs)
        return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2
    for col, name, unit in ((7, "admit's restore", "ms"), (8, "scheduled to first token (A + B)", "s"),
                            (2, "B's first token after A's end", "s")):
        on = med([x[col] for x in rows if x[1] == "on"])
        off = med([x[col] for x in rows if x[1] == "off"])
        print(f"median {name}: read ahead {on:.3f} {unit}, read at admit {off:.3f} {unit}, "
              f"ratio {off / max(on, 1e-9):.2f}x")
    shutil.rmtree(d)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pagoda", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, default=8000)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--port", type=int, default=18990)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--drop-caches", action="store_true")
    ap.add_argument("--part", choices=["all", "ttft", "chat", "prefetch"], default="all")
    ap.add_argument("--busy", type=int, default=96, help="tokens of the request B queues behind")
    ap.add_argument("--evict", action="store_true", help="prefetch part: block files out of the page cache")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="pagoda_tier_bench_")
    log = os.path.join(work, "server.log")
    prompt = long_prompt(a.tokens)
    rows = []
    try:
        if a.part == "prefetch":
            prefetch_part(a, work, log, prompt)
            return
        for r in range(a.rounds if a.part in ("all", "ttft") else 0):
            d = os.path.join(work, f"store{r}")
            os.makedirs(d)
            s = Server(a, d, log)
            t_cold, u_cold, tok_cold = ttft(a.port, prompt)
            s.stop()
            if a.drop_caches:
                subprocess.run(["sync"])
                with open("/proc/sys/vm/drop_caches", "w") as f:
                    f.write("3\n")
            s = Server(a, d, log)
            t_tier, u_tier, tok_tier = ttft(a.port, prompt)
            m = metrics(a.port)
            s.stop()
            if tok_cold != tok_tier:
                sys.exit(f"round {r}: the tier answered {tok_tier!r}, recomputing {tok_cold!r}")
            rows.append((r, u_cold["prompt_tokens"], t_cold, t_tier,
                         u_tier["prompt_tokens_details"]["cached_tokens"],
                         m.get("pagoda_kv_tier_bytes", 0)))
            shutil.rmtree(d)
        print(f"model {os.path.basename(a.model)}, load average before: {os.getloadavg()[0]:.1f}")
        if rows:
            print("| round | prompt tokens | recompute TTFT s | tier TTFT s | ratio | from tier | tier MiB |")
            print("|---|---|---|---|---|---|---|")
        for r, n, tc, tt, c, b in rows:
            print(f"| {r} | {n} | {tc:.2f} | {tt:.3f} | {tc / tt:.1f}x | {c} | {b / 2**20:.0f} |")

        if a.part in ("all", "chat"):
            # ten turns, then a restart and the replay
            d = os.path.join(work, "chat")
            os.makedirs(d)
            topics = ["rivers", "mountains", "bread", "clocks", "bees", "ships", "glass", "salt",
                      "owls", "maps"]
            msgs = [{"role": "system", "content": "You are a helpful assistant who answers briefly."}]
            convo = []
            s = Server(a, d, log)
            for t in topics:
                msgs.append({"role": "user", "content": f"Tell me one fact about {t}."})
                j = post(a.port, "/v1/chat/completions", {"messages": msgs, "max_tokens": 24, "temperature": 0})
                convo.append([dict(x) for x in msgs])
                msgs.append({"role": "assistant", "content": j["choices"][0]["message"]["content"]})
            s.stop()
            s = Server(a, d, log)
            print("\nten-turn replay after a restart: the share of each prompt served from the tier "
                  "(a lower bound of the earlier turns' share: the prompt also holds the new user turn)")
            print("| turn | prompt tokens | cached | share |")
            print("|---|---|---|---|")
            shares = []
            for i, m_ in enumerate(convo):
                j = post(a.port, "/v1/chat/completions", {"messages": m_, "max_tokens": 1, "temperature": 0})
                n = j["usage"]["prompt_tokens"]
                c = j["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
                if i > 0:
                    shares.append(c / n)
                    print(f"| {i + 1} | {n} | {c} | {100 * c / n:.0f}% |")
            s.stop()
            print(f"mean share over turns 2-10: {100 * sum(shares) / len(shares):.0f}%")
        if a.part == "all":
            prefetch_part(a, work, log, prompt)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
