/* fuzz_tokenizer.c: libFuzzer harness for the tokenizers: the Llama 2
 * SentencePiece vocabulary and GPT-2's byte-level BPE (both committed
 * under tests/data/vocab), and every BPE pre-tokenizer split. The first
 * byte picks the flags and the pre-tokenizer; the rest is the text.
 * Checks beyond "no crash": every id is in the vocabulary, the split
 * covers the text in order, and GPT-2's byte-level BPE gives the input's
 * bytes back (it can spell any byte). Not for: vocabulary loading from
 * hostile files (fuzz_gguf). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"

#ifndef PAGODA_SOURCE_DIR
#define PAGODA_SOURCE_DIR "."
#endif

static pagoda_tokenizer *g_spm, *g_bpe;
static gguf_file *g_fspm, *g_fbpe;

static pagoda_tokenizer *load(const char *name, gguf_file **keep)
{
    char path[1024], err[512];
    const char *src = getenv("PAGODA_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/data/vocab/%s", src ? src : PAGODA_SOURCE_DIR, name);
    *keep = pagoda_gguf_open(path, err, sizeof err);
    if (!*keep) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err);
        abort();
    }
    pagoda_tokenizer *t = pagoda_tokenizer_load(*keep, err, sizeof err);
    if (!t) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err);
        abort();
    }
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    g_spm = load("ggml-vocab-llama-spm.gguf", &g_fspm);
    g_bpe = load("ggml-vocab-gpt-2.gguf", &g_fbpe);
    return 0;
}

static const char *const pretoks[] = {
    "default", "gpt-2", "llama-bpe", "qwen2", "smollm", "deepseek-llm", "falcon", "nonexistent",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    unsigned flags = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    bool add_special = flags & 1, parse_special = flags & 2;
    static int32_t ids[1 << 16];
    pagoda_tokenizer *ts[2] = {g_spm, g_bpe};
    for (int k = 0; k < 2; k++) {
        int32_t n = 0;
        if (pagoda_tokenize(ts[k], text, len, add_special, parse_special, ids, 1 << 16, &n) != 0) continue;
        int32_t nv = pagoda_tokenizer_n_vocab(ts[k]);
        static char back[1 << 17];
        size_t bl = 0;
        for (int32_t i = 0; i < n && i < (1 << 16); i++) {
            if (ids[i] < 0 || ids[i] >= nv) abort(); /* an id outside the vocabulary */
            size_t tl;
            const char *b = pagoda_token_bytes(ts[k], ids[i], false, &tl);
            if (bl + tl <= sizeof back) {
                memcpy(back + bl, b, tl);
                bl += tl;
            }
        }
        /* GPT-2's byte-level BPE spells every byte: without specials and BOS
         * the decoded bytes are the input */
        if (k == 1 && !parse_special && !add_special && n <= (1 << 16) && len < sizeof back &&
            (bl != len || memcmp(back, text, len))) {
            fprintf(stderr, "fuzz_tokenizer: gpt-2 round trip gave %zu bytes for %zu\n", bl, len);
            abort();
        }
    }
    /* the pre-tokenizer splits: in order, no gap, no overlap */
    static pagoda_span spans[1 << 16];
    size_t ns = 0;
    char err[256];
    const char *pre = pretoks[(flags >> 2) % (sizeof pretoks / sizeof *pretoks)];
    if (pagoda_pretokenize(pre, text, len, spans, 1 << 16, &ns, err, sizeof err) == 0 && ns <= (1 << 16)) {
        size_t at = 0;
        for (size_t i = 0; i < ns; i++) {
            if (spans[i].off != at) abort();
            at += spans[i].len;
        }
        if (ns && at != len) abort();
    }
    return 0;
}
