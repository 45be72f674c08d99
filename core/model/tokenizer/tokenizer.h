/*
 * tokenizer.h: text <-> token ids for the vocabularies GGUF files carry:
 * SentencePiece-style ("llama": U+2581 spaces, score-ordered bigram
 * merges, <0xNN> byte fallback) and byte-level BPE ("gpt2": GPT-2's byte
 * map, rank-ordered merges, a PCRE2 pre-tokenizer chosen by
 * tokenizer.ggml.pre). Behaviour follows llama.cpp's llama-vocab.cpp so
 * that its test vocabularies give the same ids.
 * Not for: chat templates, streaming detokenization state (see
 * pagoda_utf8_complete_prefix in unicode.h), or loading the GGUF file.
 *
 * A loaded tokenizer is immutable: every function here may be called from
 * any thread at the same time [any thread].
 */
#ifndef PAGODA_TOKENIZER_H
#define PAGODA_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

typedef struct pagoda_tokenizer pagoda_tokenizer;

/* Build a tokenizer from the tokenizer.ggml.* keys of f. Everything it
 * needs is copied: f may be closed afterwards. Returns NULL and writes a
 * message naming the key and the problem to err on failure. An unknown
 * tokenizer.ggml.pre falls back to the GPT-2 split with a warning on
 * stderr. The caller owns the result (pagoda_tokenizer_free). */
pagoda_tokenizer *pagoda_tokenizer_load(const gguf_file *f, char *err, size_t err_len);
void pagoda_tokenizer_free(pagoda_tokenizer *t);

/* Tokenize text[0..len) (any bytes; need not be NUL-terminated).
 * add_special: prepend BOS / append EOS as the vocabulary's flags say.
 * parse_special: texts of control tokens ("<s>", "<|im_start|>") become
 * their ids; user-defined tokens are always matched, unknown/control ones
 * only when parse_special (as llama.cpp). Writes at most cap ids to ids
 * (which may be NULL when cap is 0); *n_out = the full count, and the
 * call returns PAGODA_OK even when *n_out > cap so callers can retry with
 * a bigger buffer. Errors: PAGODA_ERR_INVALID, PAGODA_ERR_NOMEM. */
int pagoda_tokenize(const pagoda_tokenizer *t, const char *text, size_t len, bool add_special,
                    bool parse_special, int32_t *ids, int32_t cap, int32_t *n_out);

/* The bytes token id decodes to (not NUL-terminated; may be a partial
 * UTF-8 sequence): U+2581 -> ' ', <0xNN> -> the byte, byte-level BPE
 * characters -> their bytes. Control and unknown tokens give "" unless
 * render_special, which gives their text (output markup the frontend
 * reads always gives its text: <think>, </think>, <tool_call>,
 * </tool_call>, <|python_tag|>, Kimi's and DeepSeek's tool-call markers,
 * and in a harmony vocabulary <|start|>, <|channel|>, <|message|>,
 * <|end|>, <|constrain|>, <|call|>, <|return|>); user-defined tokens always give
 * their text. An id out of range gives "" (length 0). The pointer lives
 * as long as t. */
const char *pagoda_token_bytes(const pagoda_tokenizer *t, int32_t id, bool render_special,
                               size_t *len);

int32_t pagoda_tokenizer_n_vocab(const pagoda_tokenizer *t);
int32_t pagoda_tokenizer_bos(const pagoda_tokenizer *t); /* -1 if none */
int32_t pagoda_tokenizer_eos(const pagoda_tokenizer *t); /* -1 if none */
/* End of generation: eos, eot, eom, and tokens named like end tokens
 * (<|im_end|>, <|endoftext|>, <|eot_id|>, <|eom_id|>, <|end|>,
 * <end_of_turn>, <|end_of_text|>, <EOT>, <｜end▁of▁sentence｜>) present in
 * the vocabulary. A harmony vocabulary (gpt-oss: special <|return|> and
 * <|call|>) ends at those two and not at <|end|>, which closes a channel. */
bool pagoda_tokenizer_is_eog(const pagoda_tokenizer *t, int32_t id);
/* Whether id is a plain token: its bytes are text the tokenizer could
 * give for them (normal and byte tokens; not control, user-defined,
 * unknown or unused ones). false when out of range. */
bool pagoda_tokenizer_is_plain(const pagoda_tokenizer *t, int32_t id);
/* Whether add_special prepends BOS. */
bool pagoda_tokenizer_add_bos(const pagoda_tokenizer *t);
/* Exact token text (as stored in the vocabulary, NUL-terminated) -> id,
 * or -1. */
int32_t pagoda_tokenizer_find(const pagoda_tokenizer *t, const char *piece);
/* The raw vocabulary string of id (NUL-terminated), or NULL when out of
 * range. Lives as long as t. */
const char *pagoda_tokenizer_piece(const pagoda_tokenizer *t, int32_t id);

/* ---------------------------------------------------- pre-tokenizer */

/* One piece of a pre-tokenizer split: text[off .. off+len). */
typedef struct pagoda_span {
    size_t off;
    size_t len;
} pagoda_span;

/* Split text the way the BPE tokenizer does before merging, for the
 * tokenizer.ggml.pre name pre_name ("gpt-2", "llama-bpe", "qwen2",
 * "smollm", "default", ...; NULL or "" is "default", an unknown name the
 * GPT-2 split). The pieces cover the text in order, with no gaps. Writes
 * at most cap spans; *n_out = the full count (PAGODA_OK even when
 * *n_out > cap). Exposed for tests and tools. */
int pagoda_pretokenize(const char *pre_name, const char *text, size_t len, pagoda_span *spans,
                       size_t cap, size_t *n_out, char *err, size_t err_len);

#endif /* PAGODA_TOKENIZER_H */
