#!/usr/bin/env python3
"""ref_forward.py: an independent reference of the forward pass of the
architectures pagoda runs (llama, qwen2, qwen3, gemma3), in plain numpy
(float64), reading a GGUF with the PyPI `gguf` package and dequantizing with
gguf's own quant code (gguf.quants.dequantize). Nothing here comes from
pagoda's C code: it is written from the architectures' definitions in HF
transformers (modeling_llama / modeling_qwen2 / modeling_qwen3 /
modeling_gemma3 with Gemma3TextConfig).

gemma3, as HF defines it: embeddings times sqrt(hidden_size); per layer
input_layernorm -> q/k/v -> q_norm/k_norm (per head) -> RoPE (rotate_half,
base rope_local_base_freq = 10000 on sliding layers, rope_theta on full
ones) -> softmax(q k^T * query_pre_attn_scalar^-0.5) with a causal mask, on
sliding layers also kv_idx > q_idx - sliding_window -> o_proj ->
post_attention_layernorm -> residual; pre_feedforward_layernorm ->
down(gelu_pytorch_tanh(gate) * up) -> post_feedforward_layernorm ->
residual; layer i slides unless (i + 1) % sliding_window_pattern == 0
(pattern 6). HF's Gemma3RMSNorm multiplies by (1 + weight); the GGUF
converter stores weight + 1, so the GGUF norm weights are used as they are.

It works in the GGUF convention, which differs from HF's in one place:
llama.cpp's converter permutes the rows of llama's attn_q/attn_k weights
(per head: HF's [first half | second half] becomes interleaved pairs), so
HF's rotate_half RoPE on HF weights equals ggml's "normal" RoPE (rotating
pairs (2i, 2i+1)) on GGUF weights. qwen2/qwen3 weights are not permuted and
use ggml's NeoX RoPE (pairs (i, i + d/2)), which is HF's rotate_half.
`--check-hf-layout` demonstrates the llama claim: it un-permutes Q/K back to
HF order, runs HF's rotate_half, and requires the same logits.

Not for: use at test time (the C tests read the committed JSON it writes),
speed, or any quantized math: weights are dequantized once to float64.

Usage:
  ref_forward.py MODEL.gguf --tokens 1,2,3 [--generate N] [--check-hf-layout]
  ref_forward.py --make-expectations PAGODA_BIN OUT.json
      (generates every case's model with `pagoda gen-model`, twice, checks
      the files are byte-identical, and writes the expectations)
"""
import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import gguf
from gguf.quants import dequantize


# ---------------------------------------------------------------- reading

def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


class Model:
    def __init__(self, path):
        r = gguf.GGUFReader(path)
        self.arch = field(r, "general.architecture")
        if self.arch not in ("llama", "qwen2", "qwen3", "gemma3"):
            raise SystemExit(f"{path}: architecture {self.arch} not handled")
        a = self.arch
        self.n_layers = int(field(r, f"{a}.block_count"))
        self.dim = int(field(r, f"{a}.embedding_length"))
        self.n_heads = int(field(r, f"{a}.attention.head_count"))
        self.n_kv_heads = int(field(r, f"{a}.attention.head_count_kv", self.n_heads))
        self.head_dim = int(field(r, f"{a}.attention.key_length", self.dim // self.n_heads))
        self.eps = float(field(r, f"{a}.attention.layer_norm_rms_epsilon"))
        self.theta = float(field(r, f"{a}.rope.freq_base", 10000.0))
        self.n_rot = int(field(r, f"{a}.rope.dimension_count", self.head_dim))
        self.scaling_type = field(r, f"{a}.rope.scaling.type", "none")
        self.scaling_factor = float(field(r, f"{a}.rope.scaling.factor", 1.0))
        self.window = int(field(r, f"{a}.attention.sliding_window", 0))
        self.swa_pattern = int(field(r, f"{a}.attention.sliding_window_pattern", 6))
        self.theta_local = float(field(r, f"{a}.rope.freq_base_swa", 10000.0))
        self.t = {}
        self.types = {}
        for t in r.tensors:
            self.types[t.name] = t.tensor_type
            # numpy shape is the GGUF ne reversed: [rows, cols] = [out, in]
            shape = tuple(int(x) for x in reversed(t.shape.tolist()))
            w = dequantize(t.data, t.tensor_type).astype(np.float64).reshape(shape)
            self.t[t.name] = w
        self.tied = "output.weight" not in self.t

    def w(self, name):
        return self.t[name]

    def sliding(self, layer):
        """Gemma3TextConfig.layer_types: sliding unless (i+1) % pattern == 0."""
        return self.arch == "gemma3" and self.window > 0 and (layer + 1) % self.swa_pattern != 0

    def inv_freq(self, local=False):
        """HF's rope init: theta^(-2i/d), then the scaling variant. llama3's
        per-frequency divisors are in rope_freqs.weight (the converter's
        form of HF's _compute_llama3_parameters). gemma3's sliding layers
        (local): rope_local_base_freq, never scaled."""
        i = np.arange(0, self.n_rot, 2, dtype=np.float64)
        if local:
            return 1.0 / (self.theta_local ** (i / self.n_rot))
        f = 1.0 / (self.theta ** (i / self.n_rot))
        if self.scaling_type == "linear":
            f = f / self.scaling_factor   # HF "linear": positions / factor
        elif self.scaling_type not in ("none", None):
            raise SystemExit(f"rope scaling {self.scaling_type} not handled")
        if "rope_freqs.weight" in self.t:
            f = f / self.t["rope_freqs.weight"].reshape(-1)
        return f


def hf_llama3_inv_freq(theta, dim, factor, low, high, orig_ctx):
    """transformers' _compute_llama3_parameters, transcribed."""
    inv_freq = 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    low_freq_wavelen = orig_ctx / low
    high_freq_wavelen = orig_ctx / high
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (orig_ctx / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return np.where(is_medium, smoothed, inv_freq_llama), inv_freq


# ---------------------------------------------------------------- forward

def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope_pairs(x, pos, inv_freq, neox):
    """x [T, H, D]; rotates the first n_rot dims of every head."""
    n_rot = 2 * len(inv_freq)
    ang = pos[:, None].astype(np.float64) * inv_freq[None, :]   # [T, n_rot/2]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x = x.copy()
    r = x[..., :n_rot]
    if neox:   # HF rotate_half: (i, i + n_rot/2)
        a, b = r[..., : n_rot // 2].copy(), r[..., n_rot // 2:].copy()
        r[..., : n_rot // 2] = a * cos - b * sin
        r[..., n_rot // 2:] = a * sin + b * cos
    else:      # ggml normal mode: (2i, 2i+1)
        a, b = r[..., 0::2].copy(), r[..., 1::2].copy()
        r[..., 0::2] = a * cos - b * sin
        r[..., 1::2] = a * sin + b * cos
    return x


def unpermute(w, n_head):
    """Inverse of convert_hf_to_gguf.py's LlamaModel.permute (rows)."""
    rows = w.shape[0]
    return (w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def q8_activations(x):
    """pagoda's CPU backend (like llama.cpp) multiplies quantized weights
    with activations rounded to int8 blocks of 32: d = amax/127 (float32,
    where ggml stores an fp16 d), q = rint(x/d). This is that rounding, in
    float32, so that path can be compared tightly; it is an implementation
    property, not part of any architecture."""
    x32 = x.astype(np.float32).reshape(x.shape[0], -1, 32)
    amax = np.max(np.abs(x32), axis=2, keepdims=True)
    d = amax / np.float32(127.0)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1.0) / d, np.float32(0.0)).astype(np.float32)
    q = np.rint((x32 * inv).astype(np.float32))
    return (q.astype(np.float64) * d.astype(np.float64)).reshape(x.shape)


def forward(m, tokens, hf_layout=False, q8act=False):
    """Logits [T, vocab] for every position of `tokens` (causal). q8act:
    round activations as q8_activations() before every Q8_0 matmul."""
    def mm(h, name):
        if q8act and m.types[name] == gguf.GGMLQuantizationType.Q8_0:
            h = q8_activations(h)
        return h @ m.w(name).T

    T = len(tokens)
    pos = np.arange(T)
    H, KV, D = m.n_heads, m.n_kv_heads, m.head_dim
    gemma = m.arch == "gemma3"
    neox = m.arch != "llama" or hf_layout
    x = m.w("token_embd.weight")[np.asarray(tokens)]
    if gemma:   # Gemma3TextScaledWordEmbedding
        x = x * math.sqrt(m.dim)
    causal = np.triu(np.full((T, T), -np.inf), 1)
    # sliding layers also hide keys at q_idx - kv_idx >= window
    qi, ki = np.arange(T)[:, None], np.arange(T)[None, :]
    sliding_mask = np.where(qi - ki >= max(m.window, 1), -np.inf, causal)
    # query_pre_attn_scalar: head_dim (gemma3 but the 27B, whose 62 layers
    # use hidden_size / heads); the others scale by head_dim as well
    qpas = m.dim / H if gemma and m.n_layers == 62 else D
    for l in range(m.n_layers):
        p = f"blk.{l}."
        local = m.sliding(l)
        inv_freq = m.inv_freq(local)
        mask = sliding_mask if local else causal
        h = rms_norm(x, m.w(p + "attn_norm.weight"), m.eps)
        wq, wk = m.w(p + "attn_q.weight"), m.w(p + "attn_k.weight")
        if hf_layout and m.arch == "llama":
            wq, wk = unpermute(wq, H), unpermute(wk, KV)
        if hf_layout and m.arch == "llama":
            q, k = h @ wq.T, h @ wk.T
        else:
            q, k = mm(h, p + "attn_q.weight"), mm(h, p + "attn_k.weight")
        v = mm(h, p + "attn_v.weight")
        if m.arch == "qwen2":   # Qwen2Attention: q/k/v_proj have bias=True
            q = q + m.w(p + "attn_q.bias")
            k = k + m.w(p + "attn_k.bias")
            v = v + m.w(p + "attn_v.bias")
        q, k, v = q.reshape(T, H, D), k.reshape(T, KV, D), v.reshape(T, KV, D)
        if m.arch in ("qwen3", "gemma3"):   # q_norm / k_norm: per-head RMSNorm before RoPE
            q = rms_norm(q, m.w(p + "attn_q_norm.weight"), m.eps)
            k = rms_norm(k, m.w(p + "attn_k_norm.weight"), m.eps)
        q, k = rope_pairs(q, pos, inv_freq, neox), rope_pairs(k, pos, inv_freq, neox)
        g = H // KV   # repeat_kv: query head h reads kv head h // g
        out = np.empty((T, H, D))
        for hh in range(H):
            s = q[:, hh, :] @ k[:, hh // g, :].T / math.sqrt(qpas) + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            out[:, hh, :] = s @ v[:, hh // g, :]
        o = mm(out.reshape(T, H * D), p + "attn_output.weight")
        if gemma:
            o = rms_norm(o, m.w(p + "post_attention_norm.weight"), m.eps)
        x = x + o
        h = rms_norm(x, m.w(p + "ffn_norm.weight"), m.eps)
        gate, up = mm(h, p + "ffn_gate.weight"), mm(h, p + "ffn_up.weight")
        if gemma:   # gelu_pytorch_tanh
            act = 0.5 * gate * (1 + np.tanh(math.sqrt(2 / math.pi) * (gate + 0.044715 * gate ** 3)))
        else:       # silu
            act = gate / (1 + np.exp(-gate))
        o = mm(act * up, p + "ffn_down.weight")
        if gemma:
            o = rms_norm(o, m.w(p + "post_ffw_norm.weight"), m.eps)
        x = x + o
    x = rms_norm(x, m.w("output_norm.weight"), m.eps)
    return mm(x, "token_embd.weight" if m.tied else "output.weight")


def greedy(m, prompt, n, q8act=False):
    """Greedy continuation, recomputing the whole sequence each step (no
    KV cache: nothing to get wrong). Returns (tokens, logits of the final
    sequence [len(prompt)+n-1 positions])."""
    toks = list(prompt)
    for _ in range(n):
        lg = forward(m, toks, q8act=q8act)
        toks.append(int(np.argmax(lg[-1])))
    return toks[len(prompt):], forward(m, toks[:-1], q8act=q8act)


# ---------------------------------------------------------------- expectations

# Every case: gen-model arguments (shape tiny: dim 64, 2 layers, 4 heads,
# 2 KV heads = GQA, ffn 128, vocab 512). std 0.1 (not 0.02) so attention is
# far from uniform and RoPE, biases and norms move the logits measurably;
# norm-std 0.1 so a norm weight applied in the wrong place shows.
COMMON = ["--shape", "tiny", "--std", "0.1", "--norm-std", "0.1"]
CASES = [
    ("llama", "F32", ["--arch", "llama"], 11),
    ("llama-tied", "F32", ["--arch", "llama", "--tied"], 12),
    ("llama-rope-linear", "F32", ["--arch", "llama", "--rope-scaling", "linear"], 13),
    ("llama-rope-llama3", "F32", ["--arch", "llama", "--rope-scaling", "llama3"], 14),
    ("qwen2", "F32", ["--arch", "qwen2"], 15),
    ("qwen2-tied", "F32", ["--arch", "qwen2", "--tied"], 16),
    ("qwen3", "F32", ["--arch", "qwen3", "--head-dim", "32"], 17),
    ("qwen3-tied", "F32", ["--arch", "qwen3", "--tied"], 18),
    ("llama-q8_0", "Q8_0", ["--arch", "llama"], 19),
    ("qwen3-q8_0", "Q8_0", ["--arch", "qwen3", "--head-dim", "32"], 20),
    # 6 layers, no pattern key: layers 0-4 slide, 5 is global (the default
    # pattern 6); window 5 < the 41 positions, so the window decides
    # outputs from position 5 on; head dim 32 != dim/heads.
    ("gemma3", "F32", ["--arch", "gemma3", "--tied", "--layers", "6", "--head-dim", "32",
                       "--sliding-window", "5"], 21),
    # the pattern key (every 2nd layer global) and a window of 7 crossing
    # block boundaries, Q8_0 weights
    ("gemma3-q8_0", "Q8_0", ["--arch", "gemma3", "--tied", "--swa-pattern", "2",
                             "--sliding-window", "7"], 22),
]
# The smallest top-1 margin (reference) accepted along the greedy path, per
# set of expectations: several times the test's tolerance, so the greedy
# comparison cannot hinge on rounding. A case whose first seed falls short
# moves to the next seed (recorded in its arguments).
MIN_MARGIN = {"exact": 1.5e-3, "q8_activations": 1.5e-2}
PROMPT = [1, 300, 301, 302, 50, 60, 70, 400, 401, 9]
N_GEN = 32
TOP_K = 8


def fnv1a64(data):
    """64-bit FNV-1a: the C test recomputes it over the file it generates."""
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def gen_model(pagoda, out, dtype, args):
    cmd = [pagoda, "gen-model", *COMMON, "--type", dtype, "--out", out, *args]
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
    with open(out, "rb") as f:
        data = f.read()
    return hashlib.sha256(data).hexdigest(), fnv1a64(data)


def expectation_set(m, q8act):
    gen, logits = greedy(m, PROMPT, N_GEN, q8act=q8act)
    rows = []
    for p in range(logits.shape[0]):
        lg = logits[p]
        ids = np.argsort(-lg, kind="stable")[:TOP_K]
        rows.append({"ids": [int(i) for i in ids],
                     "logits": [round(float(lg[i]), 7) for i in ids]})
    margins = [float(np.sort(logits[p])[-1] - np.sort(logits[p])[-2])
               for p in range(len(PROMPT) - 1, logits.shape[0])]
    full_pos = [len(PROMPT) - 1, logits.shape[0] - 1]
    return {
        "generated": gen,
        "min_greedy_margin": round(min(margins), 6),
        "max_abs_logit": round(float(np.max(np.abs(logits))), 6),
        "top": rows,
        "full_positions": full_pos,
        "full_logits": [[round(float(v), 7) for v in logits[p]] for p in full_pos],
    }, logits


def check_against_llama2c(n=60):
    """The reference itself, on a trained model: stories260K's greedy
    tokens as llama2.c's run.c produced them (tests/data)."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    with open(os.path.join(root, "tests/data/stories260K.golden.json")) as f:
        want = json.load(f)["cases"][0]["generated_tokens"]   # prompt tokens after BOS first
    m = Model(os.path.join(root, "models/stories260K.gguf"))
    got, _ = greedy(m, [1] + want[:4], n)
    if got != want[4:4 + n]:
        raise SystemExit(f"reference disagrees with llama2.c on stories260K: {got} vs {want[4:4 + n]}")
    print(f"reference reproduces llama2.c's {n} greedy tokens of stories260K", file=sys.stderr)


def make_expectations(pagoda, out_json):
    check_against_llama2c()
    cases = []
    with tempfile.TemporaryDirectory() as d:
        for name, dtype, args0, seed in CASES:
            for attempt in range(50):
                args = args0 + ["--seed", str(seed + 100 * attempt)]
                a, b = os.path.join(d, name + ".a.gguf"), os.path.join(d, name + ".b.gguf")
                ha, hb = gen_model(pagoda, a, dtype, args), gen_model(pagoda, b, dtype, args)
                if ha != hb:
                    raise SystemExit(f"{name}: gen-model output differs between runs")
                m = Model(a)
                sets = {"exact": expectation_set(m, False)}
                if dtype == "Q8_0":
                    sets["q8_activations"] = expectation_set(m, True)
                # the sets a greedy path is checked against need clear margins
                greedy_sets = ["q8_activations"] if dtype == "Q8_0" else ["exact"]
                if all(sets[k][0]["min_greedy_margin"] >= MIN_MARGIN[k] for k in greedy_sets):
                    break
            else:
                raise SystemExit(f"{name}: no seed with clear greedy margins")
            if "rope_freqs.weight" in m.t:   # gen-model's llama3 constants vs HF's formula
                want, _ = hf_llama3_inv_freq(m.theta, m.n_rot, 8.0, 1.0, 4.0, 8192.0)
                if not np.allclose(m.inv_freq(), want, rtol=1e-6, atol=0):
                    raise SystemExit(f"{name}: rope_freqs.weight disagrees with HF llama3")
            exact, logits = sets["exact"]
            if m.arch == "llama":
                hf = forward(m, PROMPT + exact["generated"][:-1], hf_layout=True)
                err = np.max(np.abs(hf - logits))
                if err > 1e-9:
                    raise SystemExit(f"{name}: HF layout differs from GGUF layout by {err}")
            extra = {}
            if m.arch == "gemma3":
                # the window must decide something: the same positions with
                # every layer global differ by this much
                toks = PROMPT + exact["generated"][:-1]
                w = m.window
                m.window = 0
                full = forward(m, toks)
                m.window = w
                extra["window_effect"] = round(float(np.max(np.abs(full - logits))), 6)
                if extra["window_effect"] < 0.1:
                    raise SystemExit(f"{name}: the sliding window changes the logits by only "
                                     f"{extra['window_effect']}")
                print(f"{name}: the window moves logits by up to {extra['window_effect']:.3f}",
                      file=sys.stderr)
            case = {
                "name": name, "type": dtype,
                "gen_model_args": COMMON + ["--type", dtype] + args,
                "sha256": ha[0], "fnv1a64": ha[1],
                "arch": m.arch, "tied": m.tied, "head_dim": m.head_dim, **extra,
            }
            for k, (v, _) in sets.items():
                case[k] = v
                print(f"{name} [{k}] {' '.join(args)}: generated {v['generated'][:6]}..., "
                      f"min margin {v['min_greedy_margin']:.4f}, max |logit| "
                      f"{v['max_abs_logit']:.3f}", file=sys.stderr)
            cases.append(case)
    doc = {
        "about": "Expected logits and greedy tokens of tiny random models generated by "
                 "`pagoda gen-model` (arguments per case), computed by "
                 "tests/reference/ref_forward.py (numpy float64, GGUF convention: llama "
                 "normal RoPE on permuted Q/K, qwen2/qwen3/gemma3 NeoX RoPE; gguf "
                 "dequantize). exact: the model's math on the dequantized weights; "
                 "q8_activations (Q8_0 cases): the same with activations rounded to int8 "
                 "blocks before each Q8_0 matmul, as pagoda's CPU decode path does. "
                 "top[p]: the top-8 ids and logits at position p of prompt+generated[:-1]; "
                 "generated: the greedy continuation of prompt. window_effect (gemma3): "
                 "the largest logit change when every layer attends globally.",
        "prompt": PROMPT, "n_generate": N_GEN, "cases": cases,
    }
    with open(out_json, "w") as f:
        json.dump(doc, f, indent=None, separators=(",", ":"))
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
    ap.add_argument("--tokens", default="1")
    ap.add_argument("--generate", type=int, default=0)
    ap.add_argument("--check-hf-layout", action="store_true")
    ap.add_argument("--make-expectations", nargs=2, metavar=("PAGODA_BIN", "OUT_JSON"))
    a = ap.parse_args()
    if a.make_expectations:
        make_expectations(*a.make_expectations)
        return
    m = Model(a.model)
    toks = [int(t) for t in a.tokens.split(",")]
    lg = forward(m, toks)
    print("last logits top5:", np.argsort(-lg[-1])[:5], np.sort(lg[-1])[::-1][:5])
    if a.check_hf_layout:
        print("max |GGUF - HF layout| =", np.max(np.abs(forward(m, toks, True) - lg)))
    if a.generate:
        print("greedy:", greedy(m, toks, a.generate)[0])


if __name__ == "__main__":
    main()
