/*
 * tokenizer_internal.h: what the tokenizer's files share among
 * themselves: the loaded vocabulary (struct pagoda_tokenizer), the piece
 * and merge lookups the encoder calls in its inner loops (inline here so
 * they stay inlined after the split), and the pre-tokenizer that the
 * loader builds and the BPE encoder runs.
 *   tokenizer.c         the vocabulary: load from GGUF, lookup tables,
 *                       each token's decoded bytes, queries
 *   tokenizer_pretok.c  the BPE pre-tokenizer: regex table, PCRE2 split
 *   tokenizer_encode.c  text -> ids: special-token partition, SPM and
 *                       BPE merge loops
 * Not for: anything outside core/tokenizer*.c; the public API is
 * tokenizer.h.
 */
#ifndef PAGODA_TOKENIZER_INTERNAL_H
#define PAGODA_TOKENIZER_INTERNAL_H

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <xxhash.h>

#include "tokenizer.h"

/* tokenizer.ggml.token_type values */
enum { TT_UNDEFINED = 0, TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4,
       TT_UNUSED = 5, TT_BYTE = 6 };

enum { VOCAB_SPM = 1, VOCAB_BPE = 2 };

#define PRE_MAX_RE 4
#define EOG_MAX 16
#define SHOWN_MAX 32 /* harmony's 7 + the markup list's 18 fit (tokenizer.c asserts it) */

/* A pre-tokenizer: regexes applied one after another, each splitting every
 * piece the previous one left (matches and the gaps between them both
 * become pieces), as llama.cpp's unicode_regex_split does. */
typedef struct pretok {
    int n;
    pcre2_code *re[PRE_MAX_RE];
} pretok;

/* One row of the pre-tokenizer table (tokenizer_pretok.c). */
typedef struct pre_def {
    const char *names;        /* '|'-separated tokenizer.ggml.pre values */
    const char *re[PRE_MAX_RE];
    bool ignore_merges;       /* a word that is a whole token skips merging */
    bool add_bos;             /* default for add_bos_token */
} pre_def;

struct pagoda_tokenizer {
    int kind;                 /* VOCAB_SPM / VOCAB_BPE */
    int32_t n_vocab;
    char *text;               /* every token's text, each NUL-terminated */
    size_t *text_off;         /* [n_vocab] */
    uint32_t *text_len;       /* [n_vocab] */
    char *dec;                /* decoded bytes of every token */
    size_t *dec_off;          /* [n_vocab] */
    uint32_t *dec_len;        /* [n_vocab] */
    float *scores;            /* [n_vocab] */
    uint8_t *types;           /* [n_vocab] TT_* */

    int32_t *slots;           /* piece -> id, open addressing, -1 empty */
    size_t slot_mask;

    uint64_t *mkey;           /* merge (left id, right id) -> rank, result */
    int32_t *mrank;
    int32_t *mres;
    size_t mmask;             /* 0 when there are no merges */

    int32_t byte_id[256];     /* SPM byte fallback: <0xNN> ids, -1 if none */
    int32_t *specials;        /* control/user/unknown ids, longest text first */
    int32_t n_specials;

    int32_t bos, eos, unk, eot, eom;
    int32_t eog[EOG_MAX];
    int n_eog;
    int32_t shown[SHOWN_MAX]; /* control tokens decoded as their text: output markup */
    int n_shown;
    bool add_bos, add_eos, add_space_prefix, ignore_merges;
    pretok pre;
};

/* A growing list of text spans (pre-tokenizer output). */
typedef struct svec {
    pagoda_span *v;
    size_t n, cap;
} svec;

void pagoda_tok_seterr(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------- piece and merge maps */

static inline const char *tok_text(const pagoda_tokenizer *t, int32_t id)
{
    return t->text + t->text_off[id];
}

static inline int32_t tok_lookup(const pagoda_tokenizer *t, const char *s, size_t n)
{
    size_t i = (size_t)XXH3_64bits(s, n) & t->slot_mask;
    for (;;) {
        int32_t id = t->slots[i];
        if (id < 0) return -1;
        if (t->text_len[id] == n && memcmp(tok_text(t, id), s, n) == 0) return id;
        i = (i + 1) & t->slot_mask;
    }
}

static inline size_t tok_mix64(uint64_t k)
{
    k ^= k >> 33; k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return (size_t)k;
}

#define TOK_MKEY(l, r) (((uint64_t)(uint32_t)(l) << 32) | (uint32_t)(r))
#define TOK_MKEY_EMPTY UINT64_MAX

static inline bool tok_merge_find(const pagoda_tokenizer *t, int32_t l, int32_t r, int32_t *rank, int32_t *res)
{
    if (!t->mmask) return false;
    uint64_t k = TOK_MKEY(l, r);
    size_t i = tok_mix64(k) & t->mmask;
    for (;;) {
        if (t->mkey[i] == TOK_MKEY_EMPTY) return false;
        if (t->mkey[i] == k) { *rank = t->mrank[i]; *res = t->mres[i]; return true; }
        i = (i + 1) & t->mmask;
    }
}

/* ------------------------------------------------------- pre-tokenizer */

/* tokenizer_pretok.c. The definition for a tokenizer.ggml.pre name (NULL
 * or "" is "default"); *known = false when it fell back to GPT-2's. */
const pre_def *pagoda_pretok_find(const char *name, bool *known);
/* Compile d's regexes into p; on failure p holds nothing and err says
 * which regex failed. Free with pagoda_pretok_free. */
int pagoda_pretok_init(pretok *p, const pre_def *d, char *err, size_t err_len);
void pagoda_pretok_free(pretok *p);
/* Split text into out (appended): each regex refines every piece so far. */
int pagoda_pretok_split(const pretok *p, const char *text, size_t len, svec *out);

#endif /* PAGODA_TOKENIZER_INTERNAL_H */
