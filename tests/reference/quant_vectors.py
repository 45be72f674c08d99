#!/usr/bin/env python3
"""quant_vectors.py: writes tests/data/quant_vectors.json, the dequantization
vectors tests/unit/test_quant.c holds pagoda_dequantize_row to bit for bit.
Not for: quantizer tests (pagoda's quantizers are its own round-to-nearest
searches, not ggml's, so their bytes are not expected to match).

For every quantized GGUF type pagoda reads, a few blocks of random but valid
bytes (seeded numpy RNG, so the file is reproducible) are dequantized with
the PyPI `gguf` package's numpy code (gguf.quants.dequantize), which mirrors
ggml's reference dequantization operation for operation. The f16 scales are
drawn as finite values of moderate size (|d| about 1e-3..1, both signs; a
zero and a subnormal scale in one block each), and every quant byte is
uniform over 0..255, so every bit of the packed fields is exercised.

Output: {"generator": ..., "types": [{"name", "dtype", "n", "blocks",
"expect"}]}: "blocks" is the hex of the raw block bytes, "expect" the hex of
the expected values as little-endian float32 (hex, not decimal, so nothing
is lost to printing).

Usage: python3 tests/reference/quant_vectors.py   (needs numpy and gguf)
"""
import json
import os
import sys

import numpy as np
from gguf.quants import dequantize
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
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "quant_vectors.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote %s (%d bytes)" % (os.path.normpath(path), os.path.getsize(path)), file=sys.stderr)


if __name__ == "__main__":
    main()
