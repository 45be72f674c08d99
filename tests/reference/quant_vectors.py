#!/usr/bin/env python3
"""quant_vectors.py: writes tests/data/quant_vectors.json, the dequantization
vectors tests/unit/test_quant.c holds pagoda_dequantize_row to bit for bit,
and MXFP4's quantization vectors (the one type whose quantizer follows the
gguf package's rule: "quantize" below).
Not for: the other quantizers (pagoda's are its own round-to-nearest
searches, not ggml's, so their bytes are not expected to match).

For every quantized GGUF type pagoda reads, a few blocks of random but valid
bytes (seeded numpy RNG, so the file is reproducible) are dequantized with
the PyPI `gguf` package's numpy code (gguf.quants.dequantize), which mirrors
ggml's reference dequantization operation for operation. The f16 scales are
drawn as finite values of moderate size (|d| about 1e-3..1, both signs; a
zero and a subnormal scale in one block each), and every quant byte is
uniform over 0..255, so every bit of the packed fields is exercised.

MXFP4 (appended last, so the other types' draws are unchanged) has one
block per E8M0 exponent byte 0..255, each holding every code 0..15 in its
low nibbles (random high nibbles): every (scale, code) pair is checked.
Exponents 253..255 give infinities for the large codes, as in ggml.

"quantize": MXFP4 blocks of float32 values (Gaussian at magnitudes 1e-30 ..
1e30, constants, a lone outlier, zeros, exact ties between grid points)
and the bytes gguf's MXFP4.quantize_blocks makes of them. The gguf package
takes floor(np.log2(amax)) in float32, which rounds up to the next integer
when amax is just below a power of two; pagoda takes the exponent exactly.
Blocks where the two differ are left out, and their count (0 for this seed)
is printed.

Output: {"generator": ..., "types": [{"name", "dtype", "n", "blocks",
"expect"}], "quantize": [{"name", "dtype", "n", "x", "expect"}]}: "blocks"
is the hex of the raw block bytes, "expect" the hex of the expected values
as little-endian float32 (hex, not decimal, so nothing is lost to
printing) or of the expected block bytes ("quantize"), "x" the hex of the
float32 input.

Usage: python3 tests/reference/quant_vectors.py   (needs numpy and gguf)
"""
import json
import os
import sys

import numpy as np
from gguf.quants import dequantize, quantize
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T

# (type, number of blocks, byte offsets of the f16 scale fields in a block)
TYPES = [
    (T.Q4_0, 8, [0]),
    (T.Q4_1, 8, [0, 2]),
    (T.Q5_0, 8, [0]),
    (T.Q5_1, 8, [0, 2]),
    (T.Q8_0, 8, [0]),
    (T.IQ4_NL, 8, [0]),
    (T.Q2_K, 4, [80, 82]),
    (T.Q3_K, 4, [108]),
    (T.Q4_K, 4, [0, 2]),
    (T.Q5_K, 4, [0, 2]),
    (T.Q6_K, 4, [208]),
    (T.IQ4_XS, 4, [0]),
]


def mxfp4_blocks(rng):
    raw = np.zeros((256, 17), dtype=np.uint8)
    for e in range(256):
        hi = rng.integers(0, 16, size=16, dtype=np.uint8)
        raw[e, 0] = e
        raw[e, 1:] = np.arange(16, dtype=np.uint8) | (hi << 4)
    return raw


def mxfp4_quant_inputs(rng):
    """Rows of 32 float32 values: what the quantizer must match gguf on."""
    rows = []
    for mag in (1e-30, 1e-6, 0.02, 1.0, 3.0, 1e4, 1e30):
        for _ in range(6):
            rows.append(rng.standard_normal(32) * mag)
    rows.append(np.zeros(32))
    rows.append(np.full(32, 0.5))
    rows.append(np.full(32, -3.0))
    out = np.where(np.arange(32) == 5, 40.0, rng.standard_normal(32) * 0.01)
    rows.append(out)
    # Exact ties: midpoints between neighbouring grid values (and their
    # negatives) under a block maximum of 6 (scale 1: d = 1/2).
    grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6])
    mids = (grid[1:] + grid[:-1]) / 2
    tie = np.concatenate([mids, -mids, grid, -grid, [6.0, -6.0]])[:32]
    tie[0] = 6.0
    rows.append(tie)
    rows.append(-tie)
    # Past the clip: amax / scale up to just below 8.
    rows.append(np.linspace(-7.99, 7.99, 32))
    return np.array(rows, dtype=np.float32)


def mxfp4_exact_e(x):
    amax = np.abs(x).max(axis=-1)
    _, ex = np.frexp(amax)
    return np.where(amax > 0, np.clip(ex.astype(np.int64) - 1 - 2 + 127, 0, 254), 0)


def scale(rng):
    mag = 10.0 ** rng.uniform(-3, 0)
    sign = -1.0 if rng.random() < 0.3 else 1.0
    return np.float16(sign * mag)


def main():
    rng = np.random.default_rng(20240614)
    try:
        from importlib.metadata import version
        gv = version("gguf")
    except Exception:
        gv = "?"
    out = {"generator": "tests/reference/quant_vectors.py, gguf %s, numpy %s" % (gv, np.__version__),
           "types": []}
    for qt, nblocks, scale_offs in TYPES:
        belems, bbytes = GGML_QUANT_SIZES[qt]
        raw = rng.integers(0, 256, size=(nblocks, bbytes), dtype=np.uint8)
        for b in range(nblocks):
            for k, off in enumerate(scale_offs):
                if b == 1 and k == 0:
                    v = np.float16(0.0)           # a zero scale
                elif b == 2 and k == len(scale_offs) - 1:
                    v = np.float16(3.0e-6)        # a subnormal half
                else:
                    v = scale(rng)
                raw[b, off:off + 2] = np.frombuffer(v.tobytes(), dtype=np.uint8)
        vals = dequantize(raw.reshape(-1), qt).astype("<f4").reshape(-1)
        assert vals.size == nblocks * belems and np.all(np.isfinite(vals))
        out["types"].append({"name": qt.name, "dtype": int(qt), "n": int(vals.size),
                             "blocks": raw.tobytes().hex(), "expect": vals.tobytes().hex()})
    raw = mxfp4_blocks(rng)
    with np.errstate(over="ignore"):
        vals = dequantize(raw.reshape(-1), T.MXFP4).astype("<f4").reshape(-1)
    assert vals.size == 256 * 32
    out["types"].append({"name": "MXFP4", "dtype": int(T.MXFP4), "n": int(vals.size),
                         "blocks": raw.tobytes().hex(), "expect": vals.tobytes().hex()})
    x = mxfp4_quant_inputs(rng)
    with np.errstate(divide="ignore"):
        q = quantize(x.reshape(-1), T.MXFP4).reshape(len(x), 17)
    keep = q[:, 0].astype(np.int64) == mxfp4_exact_e(x)
    print("MXFP4 quantize: %d of %d blocks left out (gguf's float32 log2 rounding)"
          % (int((~keep).sum()), len(x)), file=sys.stderr)
    x, q = x[keep], q[keep]
    out["quantize"] = [{"name": "MXFP4", "dtype": int(T.MXFP4), "n": int(x.size),
                        "x": x.astype("<f4").tobytes().hex(), "expect": q.tobytes().hex()}]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "quant_vectors.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote %s (%d bytes)" % (os.path.normpath(path), os.path.getsize(path)), file=sys.stderr)


if __name__ == "__main__":
    main()
