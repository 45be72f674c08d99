/*
 * tokenizer_encode.c: text -> token ids (pagoda_tokenize): special-token
 * texts are cut out first (llama.cpp's tokenizer_st_partition), then
 * each raw fragment goes through SentencePiece's score-ordered bigram
 * merges with <0xNN> byte fallback (llm_tokenizer_spm) or, for byte-level
 * BPE, through the pre-tokenizer and rank-ordered merges of each word
 * (llm_tokenizer_bpe). Both merge loops share one priority queue of
 * candidate pairs over a linked list of symbols.
 * Not for: loading the vocabulary or decoding ids (tokenizer.c), the
 * pre-tokenizer regexes (tokenizer_pretok.c).
 */
#define _GNU_SOURCE /* memmem */
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "pagoda/types.h"
#include "tokenizer_internal.h"
#include "unicode.h"

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
    int32_t id = tok_lookup(t, w->buf + w->syms[l].off, n);
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
        int32_t id = tok_lookup(t, w->buf + s->off, s->n);
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
    if (lid < 0 || rid < 0 || !tok_merge_find(t, lid, rid, &rank, &res)) return PAGODA_OK;
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
        int32_t id = tok_lookup(t, w->buf, b);
        if (id >= 0) return ivec_push(out, id);
    }
    for (size_t off = 0; off < b;) {
        size_t n = pagoda_utf8_seq_len((uint8_t)w->buf[off]);
        w->syms[ns] = (sym){ .prev = ns - 1, .next = off + n == b ? -1 : ns + 1, .off = off, .n = n,
                             .id = tok_lookup(t, w->buf + off, n) };
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
            int32_t id = tok_lookup(t, w->buf + s->off + j, 1);
            if (id >= 0 && (st = ivec_push(out, id))) return st;
        }
    }
    return PAGODA_OK;
}

static int bpe_tokenize(const pagoda_tokenizer *t, work *w, const char *text, size_t len, ivec *out)
{
    svec words = { 0 };
    int st = pagoda_pretok_split(&t->pre, text, len, &words);
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
