/*
 * tokenizer.c: SentencePiece-style and byte-level BPE tokenizers built
 * from a GGUF vocabulary (see tokenizer.h). The algorithms follow
 * llama.cpp's llama-vocab.cpp (llm_tokenizer_spm, llm_tokenizer_bpe and
 * the special-token partition) so that its reference tokenizations hold;
 * the BPE pre-tokenizer regexes run on PCRE2 with Unicode properties.
 * Not for: chat templates, streaming detokenization, reading GGUF files.
 */
#define _GNU_SOURCE /* memmem */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"

#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "pagoda/types.h"
#include "unicode.h"

/* tokenizer.ggml.token_type values */
enum { TT_UNDEFINED = 0, TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4,
       TT_UNUSED = 5, TT_BYTE = 6 };

enum { VOCAB_SPM = 1, VOCAB_BPE = 2 };

#define PRE_MAX_RE 4
#define EOG_MAX 16

/* A pre-tokenizer: regexes applied one after another, each splitting every
 * piece the previous one left (matches and the gaps between them both
 * become pieces), as llama.cpp's unicode_regex_split does. */
typedef struct pretok {
    int n;
    pcre2_code *re[PRE_MAX_RE];
} pretok;

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
    bool add_bos, add_eos, add_space_prefix, ignore_merges;
    pretok pre;
};

static void seterr(char *err, size_t err_len, const char *fmt, ...)
{
    if (!err || err_len == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------ vectors */

typedef struct ivec {
    int32_t *v;
    size_t n, cap;
} ivec;

static int ivec_push(ivec *a, int32_t x)
{
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 64;
        int32_t *nv = realloc(a->v, nc * sizeof *nv);
        if (!nv) return PAGODA_ERR_NOMEM;
        a->v = nv;
        a->cap = nc;
    }
    a->v[a->n++] = x;
    return PAGODA_OK;
}

typedef struct svec {
    pagoda_span *v;
    size_t n, cap;
} svec;

static int svec_push(svec *a, size_t off, size_t len)
{
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 64;
        pagoda_span *nv = realloc(a->v, nc * sizeof *nv);
        if (!nv) return PAGODA_ERR_NOMEM;
        a->v = nv;
        a->cap = nc;
    }
    a->v[a->n].off = off;
    a->v[a->n].len = len;
    a->n++;
    return PAGODA_OK;
}

/* --------------------------------------------------------- piece map */

static inline const char *tok_text(const pagoda_tokenizer *t, int32_t id)
{
    return t->text + t->text_off[id];
}

static int32_t lookup(const pagoda_tokenizer *t, const char *s, size_t n)
{
    size_t i = (size_t)XXH3_64bits(s, n) & t->slot_mask;
    for (;;) {
        int32_t id = t->slots[i];
        if (id < 0) return -1;
        if (t->text_len[id] == n && memcmp(tok_text(t, id), s, n) == 0) return id;
        i = (i + 1) & t->slot_mask;
    }
}

static size_t pow2_at_least(size_t n)
{
    size_t p = 16;
    while (p < n) p <<= 1;
    return p;
}

static int build_piece_map(pagoda_tokenizer *t)
{
    size_t cap = pow2_at_least((size_t)t->n_vocab * 2);
    t->slots = malloc(cap * sizeof *t->slots);
    if (!t->slots) return PAGODA_ERR_NOMEM;
    memset(t->slots, 0xFF, cap * sizeof *t->slots);
    t->slot_mask = cap - 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const char *s = tok_text(t, id);
        size_t n = t->text_len[id];
        size_t i = (size_t)XXH3_64bits(s, n) & t->slot_mask;
        for (;;) {
            int32_t o = t->slots[i];
            if (o < 0) { t->slots[i] = id; break; }
            /* A duplicate text: the last id wins, as in llama.cpp. */
            if (t->text_len[o] == n && memcmp(tok_text(t, o), s, n) == 0) { t->slots[i] = id; break; }
            i = (i + 1) & t->slot_mask;
        }
    }
    return PAGODA_OK;
}

/* --------------------------------------------------------- merge map */

static inline size_t mix64(uint64_t k)
{
    k ^= k >> 33; k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return (size_t)k;
}

#define MKEY(l, r) (((uint64_t)(uint32_t)(l) << 32) | (uint32_t)(r))
#define MKEY_EMPTY UINT64_MAX

static bool merge_find(const pagoda_tokenizer *t, int32_t l, int32_t r, int32_t *rank, int32_t *res)
{
    if (!t->mmask) return false;
    uint64_t k = MKEY(l, r);
    size_t i = mix64(k) & t->mmask;
    for (;;) {
        if (t->mkey[i] == MKEY_EMPTY) return false;
        if (t->mkey[i] == k) { *rank = t->mrank[i]; *res = t->mres[i]; return true; }
        i = (i + 1) & t->mmask;
    }
}

/* Merges are "left right" strings; both halves must be tokens (as Hugging
 * Face requires), so a merge is keyed by the pair of ids. The first of
 * two equal merges keeps its rank, as llama.cpp's emplace does. */
static int build_merges(pagoda_tokenizer *t, const gguf_kv *kv, char *err, size_t err_len)
{
    const gguf_value *v = &kv->val;
    if (v->type != GGUF_T_ARRAY || v->v.arr.elem_type != GGUF_T_STRING) {
        seterr(err, err_len, "tokenizer.ggml.merges: expected an array of strings, found type %s",
               pagoda_gguf_vtype_name(v->type));
        return PAGODA_ERR_INVALID;
    }
    uint64_t n = v->v.arr.count;
    if (n == 0) return PAGODA_OK;
    if (n > INT32_MAX) {
        seterr(err, err_len, "tokenizer.ggml.merges: %llu entries is too many", (unsigned long long)n);
        return PAGODA_ERR_INVALID;
    }
    size_t cap = pow2_at_least((size_t)n * 2);
    t->mkey = malloc(cap * sizeof *t->mkey);
    t->mrank = malloc(cap * sizeof *t->mrank);
    t->mres = malloc(cap * sizeof *t->mres);
    char *buf = NULL;
    size_t buf_cap = 0;
    if (!t->mkey || !t->mrank || !t->mres) return PAGODA_ERR_NOMEM;
    memset(t->mkey, 0xFF, cap * sizeof *t->mkey);
    t->mmask = cap - 1;
    for (uint64_t m = 0; m < n; m++) {
        const gguf_str *s = &v->v.arr.strs[m];
        const char *p = s->ptr;
        size_t len = (size_t)s->len;
        const char *sp = len > 1 ? memchr(p + 1, ' ', len - 1) : NULL;
        if (!sp) continue; /* not "a b": llama.cpp would refuse; we skip it */
        size_t ln = (size_t)(sp - p), rn = len - ln - 1;
        int32_t l = lookup(t, p, ln), r = lookup(t, sp + 1, rn);
        if (l < 0 || r < 0) continue; /* can never apply: its halves are no tokens */
        if (ln + rn > buf_cap) {
            buf_cap = (ln + rn) * 2;
            char *nb = realloc(buf, buf_cap);
            if (!nb) { free(buf); return PAGODA_ERR_NOMEM; }
            buf = nb;
        }
        memcpy(buf, p, ln);
        memcpy(buf + ln, sp + 1, rn);
        int32_t res = lookup(t, buf, ln + rn);
        uint64_t k = MKEY(l, r);
        size_t i = mix64(k) & t->mmask;
        while (t->mkey[i] != MKEY_EMPTY && t->mkey[i] != k) i = (i + 1) & t->mmask;
        if (t->mkey[i] == k) continue; /* first rank wins */
        t->mkey[i] = k;
        t->mrank[i] = (int32_t)m;
        t->mres[i] = res;
    }
    free(buf);
    return PAGODA_OK;
}

/* ------------------------------------------------------ pre-tokenizer */

static const char RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
/* Llama 3's (?i:'s|'t|...) spelt with explicit classes: caseless matching
 * under Unicode rules would also let U+017F (long s) match 's'. */
static const char RE_LLAMA3[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_QWEN2[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

typedef struct pre_def {
    const char *names;        /* '|'-separated tokenizer.ggml.pre values */
    const char *re[PRE_MAX_RE];
    bool ignore_merges;       /* a word that is a whole token skips merging */
    bool add_bos;             /* default for add_bos_token */
} pre_def;

/* From llama.cpp's pre-tokenizer table (LLAMA_VOCAB_PRE_TYPE_*). */
static const pre_def PRE_DEFS[] = {
    { "default", { "[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]" }, false, false },
    { "llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral", { RE_LLAMA3 }, true, true },
    { "dbrx|smaug-bpe|chatglm-bpe|glm4", { RE_LLAMA3 }, false, false },
    { "qwen2|deepseek-r1-qwen|stablelm2|megrez", { RE_QWEN2 }, false, false },
    { "smollm|starcoder|refact|command-r|codeshell|exaone|minerva-7b", { "\\p{N}", RE_GPT2 }, false, false },
    { "gpt-2|gpt2|phi-2|mpt|olmo|jais|exaone4|jina-es|jina-de|gigachat|roberta-bpe", { RE_GPT2 }, false, false },
    { "falcon", { "[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]" }, false, false },
};
#define PRE_GPT2_INDEX 5

static bool name_in(const char *names, const char *name)
{
    size_t n = strlen(name);
    const char *p = names;
    while (*p) {
        const char *e = strchr(p, '|');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == n && memcmp(p, name, n) == 0) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

/* The definition for a pre name; *known = false when it fell back. */
static const pre_def *pre_lookup(const char *name, bool *known)
{
    *known = true;
    if (!name || !*name) return &PRE_DEFS[0];
    for (size_t i = 0; i < sizeof PRE_DEFS / sizeof PRE_DEFS[0]; i++)
        if (name_in(PRE_DEFS[i].names, name)) return &PRE_DEFS[i];
    *known = false;
    return &PRE_DEFS[PRE_GPT2_INDEX];
}

static void pretok_free(pretok *p)
{
    for (int i = 0; i < p->n; i++) pcre2_code_free(p->re[i]);
    p->n = 0;
}

static int pretok_init(pretok *p, const pre_def *d, char *err, size_t err_len)
{
    p->n = 0;
    for (int i = 0; i < PRE_MAX_RE && d->re[i]; i++) {
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)d->re[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
        if (!re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(ec, msg, sizeof msg);
            seterr(err, err_len, "pre-tokenizer regex %d of '%s' does not compile at %zu: %s", i,
                   d->names, (size_t)eo, (const char *)msg);
            pretok_free(p);
            return PAGODA_ERR_INTERNAL;
        }
        /* JIT is an optimization only: the interpreter gives the same answers. */
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
        p->re[p->n++] = re;
    }
    return PAGODA_OK;
}

/* Split text into out (appended): each regex refines every piece so far. */
static int pretok_split(const pretok *p, const char *text, size_t len, svec *out)
{
    int st = PAGODA_OK;
    svec cur = { 0 }, next = { 0 };
    pcre2_match_data *md = NULL;
    if (len == 0) return PAGODA_OK;
    if ((st = svec_push(&cur, 0, len))) goto out;
    for (int r = 0; r < p->n; r++) {
        pcre2_code *re = p->re[r];
        md = pcre2_match_data_create_from_pattern(re, NULL);
        if (!md) { st = PAGODA_ERR_NOMEM; goto out; }
        next.n = 0;
        for (size_t s = 0; s < cur.n; s++) {
            /* The subject is the piece alone: lookaheads see its end. */
            const char *sub = text + cur.v[s].off;
            size_t sl = cur.v[s].len, pos = 0, last = 0;
            while (pos < sl) {
                int rc = pcre2_match(re, (PCRE2_SPTR)sub, sl, pos, 0, md, NULL);
                if (rc == PCRE2_ERROR_NOMATCH) break;
                if (rc < 0) { st = PAGODA_ERR_INTERNAL; goto out; }
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                size_t ms = ov[0], me = ov[1];
                if (me <= ms) { /* none of our patterns matches empty; be safe */
                    pos = ms + pagoda_utf8_seq_len((uint8_t)sub[ms]);
                    continue;
                }
                if (ms > last && (st = svec_push(&next, cur.v[s].off + last, ms - last))) goto out;
                if ((st = svec_push(&next, cur.v[s].off + ms, me - ms))) goto out;
                last = pos = me;
            }
            if (last < sl && (st = svec_push(&next, cur.v[s].off + last, sl - last))) goto out;
        }
        pcre2_match_data_free(md);
        md = NULL;
        svec tmp = cur; cur = next; next = tmp;
    }
    for (size_t s = 0; s < cur.n; s++)
        if ((st = svec_push(out, cur.v[s].off, cur.v[s].len))) goto out;
out:
    pcre2_match_data_free(md);
    free(cur.v);
    free(next.v);
    return st;
}

int pagoda_pretokenize(const char *pre_name, const char *text, size_t len, pagoda_span *spans,
                       size_t cap, size_t *n_out, char *err, size_t err_len)
{
    if ((!text && len) || !n_out || (!spans && cap)) {
        seterr(err, err_len, "pagoda_pretokenize: NULL text, spans or n_out");
        return PAGODA_ERR_INVALID;
    }
    bool known;
    const pre_def *d = pre_lookup(pre_name, &known);
    pretok p;
    svec out = { 0 };
    int st = pretok_init(&p, d, err, err_len);
    if (st) return st;
    st = pretok_split(&p, text, len, &out);
    if (st == PAGODA_OK) {
        for (size_t i = 0; i < out.n && i < cap; i++) spans[i] = out.v[i];
        *n_out = out.n;
    } else {
        seterr(err, err_len, "pagoda_pretokenize: %s", pagoda_status_str(st));
    }
    free(out.v);
    pretok_free(&p);
    return st;
}

/* --------------------------------------------------------------- heap */

/* A bigram candidate. SPM orders by highest score, BPE by lowest rank;
 * both break ties by the leftmost position. key is -score or rank. */
typedef struct bigram {
    double key;
    int left, right;
    int32_t lid, rid;    /* BPE: the ids the pair had when queued */
    int32_t res;         /* BPE: the merged id */
    size_t size;         /* SPM: bytes of the pair when queued */
} bigram;

typedef struct bheap {
    bigram *v;
    size_t n, cap;
} bheap;

static inline bool bg_less(const bigram *a, const bigram *b)
{
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

static int heap_push(bheap *h, const bigram *b)
{
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 64;
        bigram *nv = realloc(h->v, nc * sizeof *nv);
        if (!nv) return PAGODA_ERR_NOMEM;
        h->v = nv;
        h->cap = nc;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bg_less(b, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = *b;
    return PAGODA_OK;
}

static bigram heap_pop(bheap *h)
{
    bigram top = h->v[0];
    bigram last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && bg_less(&h->v[c + 1], &h->v[c])) c++;
        if (!bg_less(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

/* A symbol: a run of bytes in the working buffer, linked to its
 * neighbours; n == 0 once merged into its left neighbour. */
typedef struct sym {
    int prev, next;
    size_t off, n;
    int32_t id;          /* BPE: current token id, -1 if none */
} sym;

typedef struct work {
    char *buf;
    size_t buf_cap;
    sym *syms;
    size_t syms_cap;
    bheap heap;
} work;

static int work_reserve(work *w, size_t bytes, size_t nsyms)
{
    if (bytes > w->buf_cap) {
        char *nb = realloc(w->buf, bytes);
        if (!nb) return PAGODA_ERR_NOMEM;
        w->buf = nb;
        w->buf_cap = bytes;
    }
    if (nsyms > w->syms_cap) {
        sym *ns = realloc(w->syms, nsyms * sizeof *ns);
        if (!ns) return PAGODA_ERR_NOMEM;
        w->syms = ns;
        w->syms_cap = nsyms;
    }
    return PAGODA_OK;
}

static void work_free(work *w)
{
    free(w->buf);
    free(w->syms);
    free(w->heap.v);
}

/* ----------------------------------------------------- SentencePiece */

static int spm_try_bigram(const pagoda_tokenizer *t, work *w, int l, int r)
{
    if (l < 0 || r < 0) return PAGODA_OK;
    size_t n = w->syms[l].n + w->syms[r].n;
    int32_t id = lookup(t, w->buf + w->syms[l].off, n);
    if (id < 0) return PAGODA_OK;
    bigram b = { .key = -(double)t->scores[id], .left = l, .right = r, .size = n };
    return heap_push(&w->heap, &b);
}

/* llm_tokenizer_spm: start from UTF-8 characters, repeatedly merge the
 * adjacent pair whose concatenation is the highest-scoring token, then
 * emit each symbol's token or, failing that, its bytes as <0xNN>. */
static int spm_tokenize(const pagoda_tokenizer *t, work *w, const char *text, size_t len,
                        bool prefix_space, ivec *out)
{
    static const char SP[3] = { '\xE2', '\x96', '\x81' }; /* U+2581 */
    size_t spaces = prefix_space ? 1 : 0;
    for (size_t i = 0; i < len; i++) spaces += text[i] == ' ';
    size_t blen = len + spaces * 2 + (prefix_space ? 1 : 0);
    int st = work_reserve(w, blen, blen);
    if (st) return st;
    size_t b = 0;
    if (prefix_space) { memcpy(w->buf, SP, 3); b = 3; }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') { memcpy(w->buf + b, SP, 3); b += 3; }
        else w->buf[b++] = text[i];
    }
    if (b == 0) return PAGODA_OK;

    int ns = 0;
    for (size_t off = 0; off < b;) {
        size_t n = pagoda_utf8_seq_len((uint8_t)w->buf[off]);
        if (n > b - off) n = b - off;
        w->syms[ns] = (sym){ .prev = ns - 1, .next = off + n == b ? -1 : ns + 1, .off = off, .n = n, .id = -1 };
        off += n;
        ns++;
    }
    w->heap.n = 0;
    for (int i = 1; i < ns; i++)
        if ((st = spm_try_bigram(t, w, i - 1, i))) return st;
    while (w->heap.n) {
        bigram bg = heap_pop(&w->heap);
        sym *l = &w->syms[bg.left], *r = &w->syms[bg.right];
        /* Stale if either side merged since it was queued. */
        if (l->n == 0 || r->n == 0 || l->n + r->n != bg.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) w->syms[r->next].prev = bg.left;
        if ((st = spm_try_bigram(t, w, l->prev, bg.left))) return st;
        if ((st = spm_try_bigram(t, w, bg.left, l->next))) return st;
    }
    for (int i = 0; i != -1; i = w->syms[i].next) {
        const sym *s = &w->syms[i];
        int32_t id = lookup(t, w->buf + s->off, s->n);
        if (id >= 0) {
            if ((st = ivec_push(out, id))) return st;
            continue;
        }
        for (size_t j = 0; j < s->n; j++) {
            int32_t bid = t->byte_id[(uint8_t)w->buf[s->off + j]];
            if (bid < 0) bid = t->unk;
            if (bid >= 0 && (st = ivec_push(out, bid))) return st;
        }
    }
    return PAGODA_OK;
}

/* ------------------------------------------------------- byte-level BPE */

static int bpe_try_bigram(const pagoda_tokenizer *t, work *w, int l, int r)
{
    if (l < 0 || r < 0) return PAGODA_OK;
    int32_t lid = w->syms[l].id, rid = w->syms[r].id, rank, res;
    if (lid < 0 || rid < 0 || !merge_find(t, lid, rid, &rank, &res)) return PAGODA_OK;
    bigram b = { .key = (double)rank, .left = l, .right = r, .lid = lid, .rid = rid, .res = res };
    return heap_push(&w->heap, &b);
}

/* One pre-tokenized word: map its bytes to GPT-2's characters, then merge
 * the adjacent pair of lowest rank until none applies. */
static int bpe_word(const pagoda_tokenizer *t, work *w, const char *word, size_t len, ivec *out)
{
    int st = work_reserve(w, len * 2, len);
    if (st) return st;
    size_t b = 0;
    int ns = 0;
    for (size_t i = 0; i < len; i++) {
        char u[4];
        size_t n = pagoda_utf8_encode(pagoda_bpe_byte_to_cp((uint8_t)word[i]), u);
        memcpy(w->buf + b, u, n);
        b += n;
    }
    if (t->ignore_merges) {
        int32_t id = lookup(t, w->buf, b);
        if (id >= 0) return ivec_push(out, id);
    }
    for (size_t off = 0; off < b;) {
        size_t n = pagoda_utf8_seq_len((uint8_t)w->buf[off]);
        w->syms[ns] = (sym){ .prev = ns - 1, .next = off + n == b ? -1 : ns + 1, .off = off, .n = n,
                             .id = lookup(t, w->buf + off, n) };
        off += n;
        ns++;
    }
    w->heap.n = 0;
    for (int i = 1; i < ns; i++)
        if ((st = bpe_try_bigram(t, w, i - 1, i))) return st;
    while (w->heap.n) {
        bigram bg = heap_pop(&w->heap);
        sym *l = &w->syms[bg.left], *r = &w->syms[bg.right];
        /* Stale if either side changed since it was queued. */
        if (l->n == 0 || r->n == 0 || l->id != bg.lid || r->id != bg.rid) continue;
        l->n += r->n;
        l->id = bg.res;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) w->syms[r->next].prev = bg.left;
        if ((st = bpe_try_bigram(t, w, l->prev, bg.left))) return st;
        if ((st = bpe_try_bigram(t, w, bg.left, l->next))) return st;
    }
    for (int i = 0; i != -1; i = w->syms[i].next) {
        const sym *s = &w->syms[i];
        if (s->id >= 0) {
            if ((st = ivec_push(out, s->id))) return st;
            continue;
        }
        /* No token for this text: llama.cpp emits what single bytes of it
         * happen to be tokens. */
        for (size_t j = 0; j < s->n; j++) {
            int32_t id = lookup(t, w->buf + s->off + j, 1);
            if (id >= 0 && (st = ivec_push(out, id))) return st;
        }
    }
    return PAGODA_OK;
}

static int bpe_tokenize(const pagoda_tokenizer *t, work *w, const char *text, size_t len, ivec *out)
{
    svec words = { 0 };
    int st = pretok_split(&t->pre, text, len, &words);
    for (size_t i = 0; st == PAGODA_OK && i < words.n; i++)
        st = bpe_word(t, w, text + words.v[i].off, words.v[i].len, out);
    free(words.v);
    return st;
}

/* ------------------------------------------------------------ tokenize */

/* A fragment of the input: raw text (id < 0) or an already-known token. */
typedef struct frag {
    int32_t id;
    size_t off, len;
} frag;

typedef struct fvec {
    frag *v;
    size_t n, cap;
} fvec;

static int fvec_push(fvec *a, int32_t id, size_t off, size_t len)
{
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 16;
        frag *nv = realloc(a->v, nc * sizeof *nv);
        if (!nv) return PAGODA_ERR_NOMEM;
        a->v = nv;
        a->cap = nc;
    }
    a->v[a->n++] = (frag){ id, off, len };
    return PAGODA_OK;
}

/* Cut special-token texts out of the raw fragments, longest token first
 * (llama.cpp's tokenizer_st_partition). */
static int partition_specials(const pagoda_tokenizer *t, const char *text, size_t len,
                              bool parse_special, fvec *fr)
{
    fvec next = { 0 };
    int st = PAGODA_OK;
    if ((st = fvec_push(fr, -1, 0, len))) return st;
    for (int32_t k = 0; k < t->n_specials; k++) {
        int32_t id = t->specials[k];
        uint8_t ty = t->types[id];
        if (!parse_special && (ty == TT_CONTROL || ty == TT_UNKNOWN)) continue;
        const char *s = tok_text(t, id);
        size_t sl = t->text_len[id];
        if (!memmem(text, len, s, sl)) continue; /* cheap filter */
        next.n = 0;
        for (size_t i = 0; i < fr->n; i++) {
            frag f = fr->v[i];
            if (f.id >= 0) {
                if ((st = fvec_push(&next, f.id, 0, 0))) goto out;
                continue;
            }
            size_t pos = f.off, end = f.off + f.len;
            for (;;) {
                const char *m = memmem(text + pos, end - pos, s, sl);
                if (!m) break;
                size_t mo = (size_t)(m - text);
                if (mo > pos && (st = fvec_push(&next, -1, pos, mo - pos))) goto out;
                if ((st = fvec_push(&next, id, 0, 0))) goto out;
                pos = mo + sl;
            }
            if (pos < end && (st = fvec_push(&next, -1, pos, end - pos))) goto out;
        }
        fvec tmp = *fr; *fr = next; next = tmp;
    }
out:
    free(next.v);
    return st;
}

int pagoda_tokenize(const pagoda_tokenizer *t, const char *text, size_t len, bool add_special,
                    bool parse_special, int32_t *ids, int32_t cap, int32_t *n_out)
{
    if (!t || (!text && len) || !n_out || cap < 0 || (!ids && cap > 0)) return PAGODA_ERR_INVALID;
    ivec out = { 0 };
    fvec fr = { 0 };
    work w = { 0 };
    int st = PAGODA_OK;
    if (add_special && t->add_bos && t->bos >= 0 && (st = ivec_push(&out, t->bos))) goto out;
    if (len > 0 && (st = partition_specials(t, text, len, parse_special, &fr))) goto out;
    /* SPM puts a space before text that starts the input or follows a
     * special token, as SentencePiece's dummy prefix does. */
    bool prev_special = true;
    for (size_t i = 0; i < fr.n; i++) {
        const frag *f = &fr.v[i];
        if (f->id >= 0) {
            st = ivec_push(&out, f->id);
            prev_special = true;
        } else if (t->kind == VOCAB_SPM) {
            st = spm_tokenize(t, &w, text + f->off, f->len, t->add_space_prefix && prev_special, &out);
            prev_special = false;
        } else {
            st = bpe_tokenize(t, &w, text + f->off, f->len, &out);
        }
        if (st) goto out;
    }
    if (add_special && t->add_eos && t->eos >= 0 && (st = ivec_push(&out, t->eos))) goto out;
    if (out.n > INT32_MAX) { st = PAGODA_ERR_INVALID; goto out; }
    for (size_t i = 0; i < out.n && i < (size_t)cap; i++) ids[i] = out.v[i];
    *n_out = (int32_t)out.n;
out:
    free(out.v);
    free(fr.v);
    work_free(&w);
    return st;
}

/* ------------------------------------------------------------ decode */

const char *pagoda_token_bytes(const pagoda_tokenizer *t, int32_t id, bool render_special, size_t *len)
{
    if (!t || id < 0 || id >= t->n_vocab) {
        if (len) *len = 0;
        return "";
    }
    uint8_t ty = t->types[id];
    if (ty == TT_CONTROL || ty == TT_UNKNOWN || ty == TT_UNUSED) {
        if (!render_special) {
            if (len) *len = 0;
            return "";
        }
        if (len) *len = t->text_len[id];
        return tok_text(t, id);
    }
    if (len) *len = t->dec_len[id];
    return t->dec + t->dec_off[id];
}

/* "<0xNN>" -> NN, or -1. */
static int parse_byte_token(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
              : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Decoded bytes of one token into dst (room for its text length); returns
 * the length. */
static size_t decode_token(const pagoda_tokenizer *t, int32_t id, char *dst)
{
    const char *s = tok_text(t, id);
    size_t n = t->text_len[id], o = 0;
    uint8_t ty = t->types[id];
    if (ty == TT_BYTE) {
        int b = parse_byte_token(s, n);
        if (b >= 0) { dst[0] = (char)b; return 1; }
    }
    if (ty == TT_USER || ty == TT_CONTROL || ty == TT_UNKNOWN || ty == TT_UNUSED || ty == TT_BYTE) {
        memcpy(dst, s, n);
        return n;
    }
    if (t->kind == VOCAB_SPM) {
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && memcmp(s + i, "\xE2\x96\x81", 3) == 0) { dst[o++] = ' '; i += 3; }
            else dst[o++] = s[i++];
        }
        return o;
    }
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = pagoda_utf8_decode(s + i, n - i, &cp);
        int b = pagoda_bpe_cp_to_byte(cp);
        if (b >= 0) dst[o++] = (char)b;
        else { memcpy(dst + o, s + i, k); o += k; } /* not a mapped char: keep as is */
        i += k;
    }
    return o;
}

/* ------------------------------------------------------------- load */

static int32_t get_id(const gguf_file *f, const char *key, int32_t n_vocab)
{
    int64_t v;
    if (!pagoda_gguf_get_int(f, key, &v)) return -1;
    return v >= 0 && v < n_vocab ? (int32_t)v : -1; /* 0xFFFFFFFF means none */
}

static void eog_add(pagoda_tokenizer *t, int32_t id)
{
    if (id < 0 || t->n_eog >= EOG_MAX) return;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return;
    t->eog[t->n_eog++] = id;
}

static int cmp_special(const void *a, const void *b, void *ctx)
{
    const pagoda_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->text_len[x] != t->text_len[y]) return t->text_len[x] > t->text_len[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

pagoda_tokenizer *pagoda_tokenizer_load(const gguf_file *f, char *err, size_t err_len)
{
    pagoda_tokenizer *t = NULL;
    char *model = NULL, *pre = NULL;
    int st = PAGODA_OK;
    if (err && err_len) err[0] = '\0';
    if (!f) {
        seterr(err, err_len, "pagoda_tokenizer_load: no GGUF file");
        return NULL;
    }
    model = pagoda_gguf_get_str(f, "tokenizer.ggml.model");
    if (!model) {
        seterr(err, err_len, "%s: no tokenizer.ggml.model key: the file carries no vocabulary", f->path ? f->path : "gguf");
        goto fail;
    }
    t = calloc(1, sizeof *t);
    if (!t) goto nomem;
    if (strcmp(model, "llama") == 0) t->kind = VOCAB_SPM;
    else if (strcmp(model, "gpt2") == 0) t->kind = VOCAB_BPE;
    else {
        seterr(err, err_len, "%s: tokenizer.ggml.model is '%s'; supported: 'llama' (SentencePiece), 'gpt2' (byte-level BPE)",
               f->path ? f->path : "gguf", model);
        goto fail;
    }

    const gguf_kv *kt = pagoda_gguf_find(f, "tokenizer.ggml.tokens");
    if (!kt || kt->val.type != GGUF_T_ARRAY || kt->val.v.arr.elem_type != GGUF_T_STRING ||
        kt->val.v.arr.count == 0 || kt->val.v.arr.count > INT32_MAX) {
        seterr(err, err_len, "%s: tokenizer.ggml.tokens: expected a non-empty array of strings", f->path ? f->path : "gguf");
        goto fail;
    }
    t->n_vocab = (int32_t)kt->val.v.arr.count;
    size_t nv = (size_t)t->n_vocab;

    const gguf_kv *ks = pagoda_gguf_find(f, "tokenizer.ggml.scores");
    const gguf_kv *kty = pagoda_gguf_find(f, "tokenizer.ggml.token_type");
    if (ks && (ks->val.type != GGUF_T_ARRAY || ks->val.v.arr.count != nv ||
               (ks->val.v.arr.elem_type != GGUF_T_FLOAT32 && ks->val.v.arr.elem_type != GGUF_T_FLOAT64))) {
        seterr(err, err_len, "tokenizer.ggml.scores: expected %zu floats", nv);
        goto fail;
    }
    if (kty && (kty->val.type != GGUF_T_ARRAY || kty->val.v.arr.count != nv ||
                kty->val.v.arr.elem_type == GGUF_T_STRING || kty->val.v.arr.elem_type == GGUF_T_ARRAY ||
                kty->val.v.arr.elem_type == GGUF_T_FLOAT32 || kty->val.v.arr.elem_type == GGUF_T_FLOAT64)) {
        seterr(err, err_len, "tokenizer.ggml.token_type: expected %zu integers", nv);
        goto fail;
    }

    /* Copy the texts: the tokenizer outlives the mapping. */
    size_t total = 0;
    for (size_t i = 0; i < nv; i++) {
        uint64_t l = kt->val.v.arr.strs[i].len;
        if (l > UINT32_MAX / 4) {
            seterr(err, err_len, "tokenizer.ggml.tokens[%zu]: %llu bytes is too long", i, (unsigned long long)l);
            goto fail;
        }
        total += (size_t)l + 1;
    }
    t->text = malloc(total);
    t->text_off = malloc(nv * sizeof *t->text_off);
    t->text_len = malloc(nv * sizeof *t->text_len);
    t->scores = calloc(nv, sizeof *t->scores);
    t->types = malloc(nv);
    t->dec_off = malloc(nv * sizeof *t->dec_off);
    t->dec_len = malloc(nv * sizeof *t->dec_len);
    t->dec = malloc(total + 1); /* decoding never lengthens a token */
    if (!t->text || !t->text_off || !t->text_len || !t->scores || !t->types || !t->dec_off ||
        !t->dec_len || !t->dec)
        goto nomem;
    size_t o = 0;
    for (size_t i = 0; i < nv; i++) {
        const gguf_str *s = &kt->val.v.arr.strs[i];
        memcpy(t->text + o, s->ptr, (size_t)s->len);
        t->text[o + s->len] = '\0';
        t->text_off[i] = o;
        t->text_len[i] = (uint32_t)s->len;
        o += (size_t)s->len + 1;
        t->scores[i] = ks ? (float)pagoda_gguf_arr_num(&ks->val, i) : 0.0f;
        int64_t ty = kty ? (int64_t)pagoda_gguf_arr_num(&kty->val, i) : TT_NORMAL;
        /* Undefined or unknown type numbers are treated as normal text. */
        t->types[i] = ty >= TT_NORMAL && ty <= TT_BYTE ? (uint8_t)ty : TT_NORMAL;
    }
    if ((st = build_piece_map(t))) goto stfail;

    size_t d = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        t->dec_off[i] = d;
        t->dec_len[i] = (uint32_t)decode_token(t, i, t->dec + d);
        d += t->dec_len[i];
    }

    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_id[b] = lookup(t, name, 6);
        if (t->byte_id[b] < 0) { /* a vocabulary with raw single-byte tokens */
            char c = (char)b;
            t->byte_id[b] = lookup(t, &c, 1);
        }
    }

    t->bos = get_id(f, "tokenizer.ggml.bos_token_id", t->n_vocab);
    t->eos = get_id(f, "tokenizer.ggml.eos_token_id", t->n_vocab);
    t->unk = get_id(f, "tokenizer.ggml.unknown_token_id", t->n_vocab);
    t->eot = get_id(f, "tokenizer.ggml.eot_token_id", t->n_vocab);
    t->eom = get_id(f, "tokenizer.ggml.eom_token_id", t->n_vocab);

    bool known = true;
    const pre_def *pd = NULL;
    if (t->kind == VOCAB_SPM) {
        t->add_bos = true;
        t->add_space_prefix = true;
    } else {
        pre = pagoda_gguf_get_str(f, "tokenizer.ggml.pre");
        pd = pre_lookup(pre, &known);
        if (!known)
            fprintf(stderr, "pagoda: warning: %s: unknown tokenizer.ggml.pre '%s', using the GPT-2 pre-tokenizer; "
                    "tokenization may differ from the model's own\n", f->path ? f->path : "gguf", pre);
        t->add_bos = pd->add_bos;
        t->ignore_merges = pd->ignore_merges;
        if ((st = pretok_init(&t->pre, pd, err, err_len))) goto stfail;
        const gguf_kv *km = pagoda_gguf_find(f, "tokenizer.ggml.merges");
        if (!km) {
            seterr(err, err_len, "%s: byte-level BPE vocabulary without tokenizer.ggml.merges", f->path ? f->path : "gguf");
            goto fail;
        }
        if ((st = build_merges(t, km, err, err_len))) goto stfail;
    }
    bool flag;
    if (pagoda_gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &flag)) t->add_bos = flag;
    if (pagoda_gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &flag)) t->add_eos = flag;
    if (pagoda_gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &flag) && t->kind == VOCAB_SPM)
        t->add_space_prefix = flag;

    /* Special tokens for the partition: control, user-defined, unknown. */
    t->specials = malloc(nv * sizeof *t->specials);
    if (!t->specials) goto nomem;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        uint8_t ty = t->types[i];
        if ((ty == TT_CONTROL || ty == TT_USER || ty == TT_UNKNOWN) && t->text_len[i] > 0)
            t->specials[t->n_specials++] = i;
    }
    qsort_r(t->specials, (size_t)t->n_specials, sizeof *t->specials, cmp_special, t);

    eog_add(t, t->eos);
    eog_add(t, t->eot);
    eog_add(t, t->eom);
    static const char *const EOG_NAMES[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
        "<EOT>", "_<EOT>", "<|end_of_text|>", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    };
    for (size_t i = 0; i < sizeof EOG_NAMES / sizeof EOG_NAMES[0]; i++) {
        int32_t id = lookup(t, EOG_NAMES[i], strlen(EOG_NAMES[i]));
        /* Only as special tokens: a normal piece that happens to read
         * "<|end|>" is text the model may legitimately produce. */
        if (id >= 0 && t->types[id] != TT_NORMAL) eog_add(t, id);
    }

    free(model);
    free(pre);
    return t;

nomem:
    st = PAGODA_ERR_NOMEM;
stfail:
    if (err && err_len && (!err[0] || st == PAGODA_ERR_NOMEM))
        seterr(err, err_len, "loading the tokenizer: %s", pagoda_status_str(st));
fail:
    free(model);
    free(pre);
    pagoda_tokenizer_free(t);
    return NULL;
}

void pagoda_tokenizer_free(pagoda_tokenizer *t)
{
    if (!t) return;
    pretok_free(&t->pre);
    free(t->text);
    free(t->text_off);
    free(t->text_len);
    free(t->dec);
    free(t->dec_off);
    free(t->dec_len);
    free(t->scores);
    free(t->types);
    free(t->slots);
    free(t->mkey);
    free(t->mrank);
    free(t->mres);
    free(t->specials);
    free(t);
}

/* ------------------------------------------------------------ queries */

int32_t pagoda_tokenizer_n_vocab(const pagoda_tokenizer *t) { return t ? t->n_vocab : 0; }
int32_t pagoda_tokenizer_bos(const pagoda_tokenizer *t) { return t ? t->bos : -1; }
int32_t pagoda_tokenizer_eos(const pagoda_tokenizer *t) { return t ? t->eos : -1; }
bool pagoda_tokenizer_add_bos(const pagoda_tokenizer *t) { return t && t->add_bos && t->bos >= 0; }

bool pagoda_tokenizer_is_eog(const pagoda_tokenizer *t, int32_t id)
{
    if (!t || id < 0) return false;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    return false;
}

int32_t pagoda_tokenizer_find(const pagoda_tokenizer *t, const char *piece)
{
    if (!t || !piece) return -1;
    return lookup(t, piece, strlen(piece));
}

const char *pagoda_tokenizer_piece(const pagoda_tokenizer *t, int32_t id)
{
    if (!t || id < 0 || id >= t->n_vocab) return NULL;
    return tok_text(t, id);
}
