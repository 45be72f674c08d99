#!/usr/bin/env python3
"""gemma3_gen.py: writes tests/data/gemma3_reference.json, the independent
references that tests/unit/test_gemma3.c checks pagoda against on Gemma 3
270M (gemma-3-270m-q4_k_m.gguf, `models/get-model gemma3`). Not for: CI (it
needs torch and llama.cpp's binaries; CI only reads the JSON it wrote).

Two references of different lineage:

  - Hugging Face transformers + CPU torch, loading the same GGUF
    (gguf_file=): transformers dequantizes every tensor to float32 with the
    gguf package's numpy code (subtracting Gemma's +1 from the norms) and
    runs its own Gemma 3 (Gemma3ForCausalLM, eager attention, float32).
    For each prompt: N greedy tokens with the KV cache, the top-5 ids and
    logits at every generated position and the gap between the best two;
    the whole sequence is then run once more without a cache and must give
    the same tokens (transformers' sliding-window cache checked against its
    mask). One prompt is longer than the 512-token window, so the local
    layers' window decides its logits.
  - llama.cpp's tokenizer (`llama-tokenize` from /work/ref/bin, built from
    the llama-cpp-python sdist): the ids of a set of strings (leading
    spaces, newlines, digits, emoji, CJK, Gemma's turn markers), with BOS,
    special tokens parsed. transformers' tokenizer (converted from the same
    GGUF) is compared too; where they differ, llama.cpp's ids are recorded
    (pagoda follows llama.cpp's tokenizer) and the difference is printed.

Usage (about 20 minutes on 2 busy cores):
  python3 -m venv /work/venv-gemma
  /work/venv-gemma/bin/pip install torch transformers tokenizers accelerate gguf sentencepiece
  models/get-model gemma3
  /work/venv-gemma/bin/python tests/reference/gemma3_gen.py [--llama-tokenize PATH]
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL_DIR = os.path.join(ROOT, "models")
MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
OUT = os.path.join(ROOT, "tests", "data", "gemma3_reference.json")
TOP_K = 5


def counting(n):
    return ", ".join(str(i) for i in range(1, n + 1)) + ","


CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
    ("Portugal", "Lisbon"), ("Austria", "Vienna"), ("Poland", "Warsaw"), ("Norway", "Oslo"),
    ("Sweden", "Stockholm"), ("Finland", "Helsinki"), ("Denmark", "Copenhagen"),
    ("Ireland", "Dublin"), ("Greece", "Athens"), ("Hungary", "Budapest"), ("Egypt", "Cairo"),
    ("Kenya", "Nairobi"), ("Japan", "Tokyo"), ("China", "Beijing"), ("India", "New Delhi"),
    ("Thailand", "Bangkok"), ("Vietnam", "Hanoi"), ("Canada", "Ottawa"), ("Mexico", "Mexico City"),
    ("Peru", "Lima"), ("Chile", "Santiago"), ("Argentina", "Buenos Aires"),
    ("Colombia", "Bogota"), ("Australia", "Canberra"), ("Russia", "Moscow"),
    ("Turkey", "Ankara"), ("Iran", "Tehran"), ("Morocco", "Rabat"), ("Nigeria", "Abuja"),
    ("Ghana", "Accra"), ("Cuba", "Havana"), ("Belgium", "Brussels"),
    ("Netherlands", "Amsterdam"), ("Switzerland", "Bern"), ("Czechia", "Prague"),
    ("Romania", "Bucharest"), ("Bulgaria", "Sofia"), ("Serbia", "Belgrade"),
    ("Croatia", "Zagreb"), ("Ukraine", "Kyiv"), ("Iceland", "Reykjavik"),
    ("South Korea", "Seoul"), ("Indonesia", "Jakarta"), ("Philippines", "Manila"),
    ("Pakistan", "Islamabad"), ("Ethiopia", "Addis Ababa"), ("Brazil", "Brasilia"),
    ("Venezuela", "Caracas"), ("Ecuador", "Quito"), ("Bolivia", "Sucre"),
    ("Uruguay", "Montevideo"), ("Paraguay", "Asuncion"), ("Nepal", "Kathmandu"),
    ("Mongolia", "Ulaanbaatar"), ("Malaysia", "Kuala Lumpur"), ("Singapore", "Singapore"),
]
CAPITALS_PROMPT = ("Geography quiz. Each line names a country and its capital city.\n\n" +
                   "".join(f"The capital of {c} is {k}.\n" for c, k in CAPITALS) +
                   "The capital of Latvia is")

# (name, text, greedy tokens). The last two are longer than the 512-token
# sliding window.
PROMPTS = [
    ("capital", "The capital of France is", 48),
    ("code", "def fibonacci(n):\n", 48),
    ("story", "Once upon a time, in a small village at the edge of the forest,", 48),
    ("counting", counting(260), 24),
    ("capitals", CAPITALS_PROMPT, 24),
]

TOKENIZE_STRINGS = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n", " \n \n", "\r\n", "a",
    "Hello world", " Hello world", "  Hello world", "Hello  world", "Hello\tworld",
    "hello, world!", "HELLO World", "It's don't I'm we'll",
    "1", "12", "123", "1234567890", "3.14159", "-42", "1,000,000", "2024-11-29",
    "naïve café résumé", "Привет, мир!", "你好，世界", "日本語のテキスト", "한국어",
    "مرحبا بالعالم", "emoji 🙂🚀👍🏽", "🇫🇷", "∑(i=1..n) i² = n(n+1)/2",
    "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}",
    "    indented\n        more\n", "trailing spaces   ", "a\u00a0b", "\x01\x7f",
    "The quick brown fox jumps over the lazy dog.",
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
    "text<end_of_turn>more", "not special: <start_of_turn", "<bos>", "<unused0>",
    "[multimodal]", "<start_of_image>",
]


@torch.no_grad()
def greedy(model, ids, n):
    """N greedy steps with the KV cache; returns (tokens, per-step logits)."""
    out = model(torch.tensor([ids]), use_cache=True)
    past = out.past_key_values
    logits = out.logits[0, -1].float()
    toks, steps = [], []
    for _ in range(n):
        t = int(torch.argmax(logits))
        toks.append(t)
        steps.append(logits.clone())
        out = model(torch.tensor([[t]]), past_key_values=past, use_cache=True)
        past = out.past_key_values
        logits = out.logits[0, -1].float()
    return toks, steps


@torch.no_grad()
def full(model, ids):
    """Logits at every position, one forward without a cache."""
    return model(torch.tensor([ids]), use_cache=False).logits[0].float()


def llama_tokenize(binary, text):
    """llama.cpp's ids for text: BOS added, special tokens parsed."""
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", delete=False, suffix=".txt") as f:
        f.write(text)
        name = f.name
    try:
        r = subprocess.run([binary, "-m", os.path.join(MODEL_DIR, MODEL_FILE), "-f", name,
                            "--ids", "--log-disable"], check=True, capture_output=True, text=True)
    finally:
        os.unlink(name)
    line = [l for l in r.stdout.strip().splitlines() if l.startswith("[")][-1]
    return json.loads(line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-tokenize", default="/work/ref/bin/llama-tokenize")
    a = ap.parse_args()
    path = os.path.join(MODEL_DIR, MODEL_FILE)
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    if sha != MODEL_SHA256:
        sys.exit(f"{path}: sha256 {sha}, want {MODEL_SHA256} (run models/get-model gemma3)")
    torch.manual_seed(0)
    torch.set_num_threads(2)
    hf_tok = AutoTokenizer.from_pretrained(MODEL_DIR, gguf_file=MODEL_FILE)
    model = AutoModelForCausalLM.from_pretrained(MODEL_DIR, gguf_file=MODEL_FILE,
                                                 dtype=torch.float32, attn_implementation="eager")
    model.eval()
    c = model.config
    assert c.sliding_window == 512 and c.query_pre_attn_scalar == 256
    assert c.layer_types.count("full_attention") == 3, c.layer_types

    cases = []
    for name, text, n in PROMPTS:
        ids = llama_tokenize(a.llama_tokenize, text)
        hf_ids = hf_tok.encode(text)
        if hf_ids != ids:
            print(f"{name}: transformers' tokenizer differs from llama.cpp's on the prompt; "
                  f"using llama.cpp's ids", file=sys.stderr)
        toks, steps = greedy(model, ids, n)
        # the same sequence without a cache: transformers' sliding-window
        # cache must agree with its mask
        lf = full(model, ids + toks[:-1])[len(ids) - 1:]
        drift = max(float((lf[j] - steps[j]).abs().max()) for j in range(n))
        assert all(int(torch.argmax(lf[j])) == toks[j] for j in range(n)), name
        top = []
        for j, l in enumerate(steps):
            v, i = torch.topk(l, TOP_K)
            ii = [int(x) for x in i]
            assert ii[0] == toks[j]
            top.append({"ids": ii, "logits": [round(float(x), 5) for x in v],
                        "gap": round(float(v[0] - v[1]), 5)})
        gaps = [t["gap"] for t in top]
        out_text = hf_tok.decode(toks)
        print(f"{name}: {len(ids)} prompt tokens, {n} greedy; smallest gap {min(gaps):.4f} at "
              f"{gaps.index(min(gaps))}; cache vs no cache {drift:.2e}", file=sys.stderr)
        print(f"    {out_text[:160]!r}", file=sys.stderr)
        cases.append({"name": name, "text": text, "prompt_ids": ids, "tokens": toks,
                      "text_out": out_text, "top": top,
                      "cache_vs_full_max_diff": round(drift, 6)})

    strings = []
    n_diff = 0
    for s in TOKENIZE_STRINGS:
        ids = llama_tokenize(a.llama_tokenize, s)
        hf_ids = hf_tok.encode(s)
        if hf_ids != ids:
            n_diff += 1
            print(f"transformers' tokenizer differs on {s!r}: {hf_ids} vs llama.cpp {ids}",
                  file=sys.stderr)
        strings.append({"text": s, "ids": ids, "transformers_agrees": hf_ids == ids})

    out = {
        "model": MODEL_FILE,
        "sha256": MODEL_SHA256,
        "reference": f"transformers {__import__('transformers').__version__} + torch "
                     f"{torch.__version__} (CPU, float32, eager attention, GGUF dequantized by "
                     "gguf-py); token ids: llama.cpp's llama-tokenize (BOS added, specials parsed)",
        "generator": "tests/reference/gemma3_gen.py",
        "cases": cases,
        "tokenize": strings,
    }
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT}: {len(cases)} prompts, {len(strings)} strings ({n_diff} differ under "
          "transformers' tokenizer)", file=sys.stderr)


if __name__ == "__main__":
    main()
