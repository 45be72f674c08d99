#!/usr/bin/env python3
"""hermes_vocab.py OUT.gguf: writes a tokenizer-only GGUF (stdlib only) whose
tool-call markup is one token each, as Qwen's and Hermes' vocabularies
have it: a byte-level BPE (tokenizer.ggml.model gpt2) of the 256 byte
tokens and no merges (every byte of text is its own token, so the only
way a reply's tokens can differ from its text's is the markup), then the
control tokens <|endoftext|>, <|im_start|>, <|im_end|> (EOS), <tool_call>,
</tool_call>. For ctl_reuse.sh: `pagoda gen-model --vocab OUT.gguf`.
Not a tokenizer test (test_tokenizer has those)."""
import struct
import sys

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]


def byte_tokens():
    """GPT-2's byte-to-unicode map: the token text of each byte"""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs, n = keep[:], 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            cs.append(256 + n)
            n += 1
    m = dict(zip(keep, cs))
    return [chr(m[b]) for b in range(256)]


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv_str(k, v):
    return gstr(k) + struct.pack("<I", 8) + gstr(v)


def kv_u32(k, v):
    return gstr(k) + struct.pack("<II", 4, v)


def kv_bool(k, v):
    return gstr(k) + struct.pack("<IB", 7, 1 if v else 0)


def kv_arr(k, typ, items):
    body = b"".join(gstr(x) if typ == 8 else struct.pack("<i", x) for x in items)
    return gstr(k) + struct.pack("<IIQ", 9, typ, len(items)) + body


def main():
    tokens = byte_tokens() + SPECIALS
    types = [1] * 256 + [3] * len(SPECIALS)
    ids = {t: i for i, t in enumerate(tokens)}
    kvs = [
        kv_str("general.architecture", "llama"),
        kv_str("tokenizer.ggml.model", "gpt2"),
        kv_str("tokenizer.ggml.pre", "qwen2"),
        kv_arr("tokenizer.ggml.tokens", 8, tokens),
        kv_arr("tokenizer.ggml.token_type", 5, types),
        kv_arr("tokenizer.ggml.merges", 8, []),
        kv_u32("tokenizer.ggml.bos_token_id", ids["<|endoftext|>"]),
        kv_u32("tokenizer.ggml.eos_token_id", ids["<|im_end|>"]),
        kv_u32("tokenizer.ggml.padding_token_id", ids["<|endoftext|>"]),
        kv_bool("tokenizer.ggml.add_bos_token", False),
    ]
    with open(sys.argv[1], "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs))


if __name__ == "__main__":
    main()
