#!/usr/bin/env python3
"""Expected token ids for the pre-tokenizers pagoda added from llama.cpp's
table (deepseek-v3, kimi-k2, gpt-4o), on the committed GPT-2 vocabulary.

For each pre name it writes a copy of ggml-vocab-gpt-2.gguf whose only
change is tokenizer.ggml.pre (to a temporary folder, deleted after), runs
llama.cpp's llama-tokenize on every case of pre-cases.inp (no BOS, special
tokens not parsed) and writes one line of ids per case to
ggml-vocab-gpt-2.pre-NAME.out. test_tokenizer.c loads the same vocabulary,
sets the same tokenizer.ggml.pre in memory and compares.

Usage (from the repository root, with the reference venv):
  /work/venv-ref/bin/python tests/data/vocab/make_pre_cases.py \
      --llama-tokenize /work/llama.cpp/build/bin/llama-tokenize
"""
import argparse
import ast
import os
import subprocess
import sys
import tempfile

import regex

from gguf import GGUFReader, GGUFWriter, GGUFValueType

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB = os.path.join(HERE, "ggml-vocab-gpt-2.gguf")
INP = os.path.join(HERE, "pre-cases.inp")
SEP = "\n__ggml_vocab_test__\n"
PRES = ["deepseek-v3", "kimi-k2", "gpt-4o"]

# Kimi K2's own pattern (its tokenization_kimi.py; llama.cpp quotes it above
# its hand-written splitter). That splitter keeps a letter run whole where
# the pattern parts it at a lower-to-upper step ("iPhone" is "i" "Phone"
# here), so the kimi-k2 ids are llama-tokenize's ids of each piece this
# pattern makes, concatenated: the model's own split, llama.cpp's merges.
KIMI_PAT = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])

# The cases: code, digit runs, CJK (Han, kana, hangul), emoji and joiners,
# contractions in both cases, CamelCase, accented capitals, combining marks,
# whitespace runs and line ends, punctuation runs.
CASES = [
    "Hello world",
    "HelloWorld and camelCaseName, XMLHttpRequest",
    "I'm sure you'LL see they'RE DON'T it's we've I'd",
    "1234567890 12 3 4567 1,000,000.55 3.14159",
    "   leading and trailing   ",
    "tabs\tand\t\tmore\ttabs",
    "line one\nline two\r\nline three\n\n\nend\n",
    "def add(a, b):\n    return a + b  # sum\n\nprint(add(1, 22))\n",
    "if (x != y && y <= 10) { z = x->next; } // C++ code\n",
    "\u6211\u60f3\u5728apple\u5e97\u91cc\u4e70iPhone15\u3002",
    "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c\u3001\u30ab\u30bf\u30ab\u30ca\u3082\uff01",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8 123",
    "emoji \U0001F600\U0001F680 family \U0001F468\u200d\U0001F469\u200d\U0001F467 flag \U0001F1EF\U0001F1F5",
    "\u00c9COLE \u00e9cole na\u00efve caf\u00e9 \u00dcBER \u00fcber",
    "e\u0301te\u0301 combining marks: a\u0308o\u0308",
    "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440! \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
    "!!!??? ... --- === $$$ @user #tag",
    "https://example.com/path?q=1&x=2",
    "  \n  \n\t\n",
    "a\u00a0b\u3000c\u2003d",
    "'s'S'll 'LL",
    "3rd 2nd 100th x86_64 v1.2.3",
    "mixed\u4e2d\u6587and English\u6df7\u5408",
    "",
    " ",
    "\n",
]


def copy_with_pre(src, dst, pre):
    r = GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(dst, arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        val = pre if name == "tokenizer.ggml.pre" else f.contents()
        t = f.types[0]
        if t == GGUFValueType.ARRAY:
            w.add_key_value(name, val, t, sub_type=f.types[-1])
        else:
            w.add_key_value(name, val, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tokenize(exe, path, text):
    if text == "":
        return []
    out = subprocess.run([exe, "-m", path, "-p", text, "--ids", "--log-disable", "--no-bos", "--no-parse-special"],
                         check=True, capture_output=True, text=True).stdout
    return ast.literal_eval(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-tokenize", required=True)
    a = ap.parse_args()
    with open(INP, "w", encoding="utf-8", newline="") as fp:
        fp.write(SEP.join(CASES))
    with tempfile.TemporaryDirectory() as tmp:
        for pre in PRES:
            path = os.path.join(tmp, pre + ".gguf")
            copy_with_pre(VOCAB, path, pre)
            lines = []
            for n, c in enumerate(CASES):
                whole = tokenize(a.llama_tokenize, path, c)
                ids = whole
                if pre == "kimi-k2":
                    pieces = regex.findall(KIMI_PAT, c, flags=regex.V1)
                    assert "".join(pieces) == c
                    ids = [i for p in pieces for i in tokenize(a.llama_tokenize, path, p)]
                    if ids != whole:
                        print("kimi-k2 case %d %r: llama.cpp's splitter differs from the pattern" % (n, c),
                              file=sys.stderr)
                lines.append(" ".join(str(i) for i in ids))
            with open(os.path.join(HERE, "ggml-vocab-gpt-2.pre-%s.out" % pre), "w") as fp:
                fp.write("\n".join(lines) + "\n")
            print(pre, "ok", file=sys.stderr)


if __name__ == "__main__":
    main()
