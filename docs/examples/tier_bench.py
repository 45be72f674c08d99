#!/usr/bin/env python3
"""tier_bench.py: the prefix cache's disk tier measured (docs/policies.md,
"The disk tier"; issue 30).

    python3 docs/examples/tier_bench.py --pagoda build/core/pagoda \
        --model models/SmolLM2-135M-Instruct.Q4_1.gguf [--tokens 8000] \
        [--rounds 2] [--port 18990] [--threads 2]

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
            if line.startswith("pagoda_kv_tier_") or line.startswith("pagoda_prefix_cache"):
                k, v = line.split()
                out[k] = float(v)
        return out


class Server:
    def __init__(self, a, tier_dir, log):
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
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="pagoda_tier_bench_")
    log = os.path.join(work, "server.log")
    prompt = long_prompt(a.tokens)
    rows = []
    try:
        for r in range(a.rounds):
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
        print("| round | prompt tokens | recompute TTFT s | tier TTFT s | ratio | from tier | tier MiB |")
        print("|---|---|---|---|---|---|---|")
        for r, n, tc, tt, c, b in rows:
            print(f"| {r} | {n} | {tc:.2f} | {tt:.3f} | {tc / tt:.1f}x | {c} | {b / 2**20:.0f} |")

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
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
