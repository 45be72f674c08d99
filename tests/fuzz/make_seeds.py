#!/usr/bin/env python3
"""make_seeds.py: writes the GGUF seed inputs of tests/fuzz/corpus/gguf/
with the PyPI `gguf` package (the reference writer, not pagoda's): small
files that reach every part of the reader and of what reads a header
(every value type, a llama header with an SPM vocabulary and a chat
template, a byte-level BPE vocabulary with merges). The other corpora are
plain text written by hand. Run from anywhere; the files are committed, so
the fuzz runs need neither Python nor this script."""
import os
import numpy as np
import gguf

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "gguf")
os.makedirs(out, exist_ok=True)


def write(name, fill):
    w = gguf.GGUFWriter(os.path.join(out, name), "llama")
    fill(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def every_type(w):
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 1.5)
    w.add_uint64("t.u64", 2**63)
    w.add_int64("t.i64", -(2**62))
    w.add_float64("t.f64", -2.25)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "h\u00e9llo")
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_str", ["a", "bc", ""])
    w.add_tensor("a", np.arange(8, dtype=np.float32))
    w.add_tensor("b", np.ones((2, 4), dtype=np.float16))


def llama_spm(w):
    w.add_block_count(1)
    w.add_embedding_length(8)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_feed_forward_length(16)
    w.add_context_length(64)
    w.add_layer_norm_rms_eps(1e-5)
    toks = ["<unk>", "<s>", "</s>", "\u2581", "\u2581a", "a", "b", "<0x0A>", "\u2581ab", "ab"]
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores([0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -3.0, -4.0, -1.5, -2.5])
    w.add_token_types([2, 3, 3, 1, 1, 1, 1, 6, 1, 1])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}")
    w.add_tensor("token_embd.weight", np.zeros((10, 8), dtype=np.float32))


def gpt2_bpe(w):
    w.add_block_count(1)
    w.add_embedding_length(8)
    w.add_head_count(2)
    w.add_feed_forward_length(16)
    w.add_context_length(64)
    toks = ["!", "a", "b", "\u0120", "\u0120a", "ab", "<|endoftext|>"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(toks)
    w.add_token_types([1, 1, 1, 1, 1, 1, 3])
    w.add_token_merges(["\u0120 a", "a b"])
    w.add_eos_token_id(6)
    w.add_tensor("token_embd.weight", np.zeros((7, 8), dtype=np.float32))


write("every_type.gguf", every_type)
write("llama_spm.gguf", llama_spm)
write("gpt2_bpe.gguf", gpt2_bpe)
