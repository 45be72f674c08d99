/*
 * drafter_ngram.c: the `ngram` drafter (prompt lookup): the last n tokens
 * of the sequence are looked up among every earlier n-gram of its prompt
 * and output, and the tokens that followed the most recent earlier
 * occurrence are proposed. Rewriting a file or quoting a source repeats
 * long runs of the prompt, which this predicts for free.
 * Memory is bounded: a hash table from an n-gram to the end of its latest
 * occurrence, of at most NGRAM_MAX_SLOTS entries; a newer n-gram may
 * overwrite an older one of the same hash (a lost match only costs a
 * draft), and every hit is checked against the tokens themselves.
 * Not for: verification (the engine's, engine_spec.c).
 */
#include <stdlib.h>
#include <string.h>

#include "drafter.h"

#define NGRAM_MAX_SLOTS (1 << 16) /* 256 KiB of int32 a table at most */
#define NGRAM_LEVELS 3            /* suffix lengths 4n, 2n, n */

typedef struct ngram_table {
    int32_t n;          /* n-gram length */
    int32_t *end;       /* [slots]: end (exclusive) of the latest n-gram of this hash, -1: none */
    int32_t indexed;    /* n-grams ending at or before this index are in the table */
} ngram_table;

typedef struct ngram_state {
    uint32_t mask;      /* slots - 1 */
    ngram_table t[NGRAM_LEVELS]; /* longest first */
} ngram_state;

static uint32_t ngram_hash(const int32_t *t, int32_t n)
{
    uint32_t h = 2166136261u;
    for (int32_t i = 0; i < n; i++) h = (h ^ (uint32_t)t[i]) * 16777619u;
    return h ^ (h >> 15);
}

static void ngram_free(void *state)
{
    ngram_state *s = state;
    if (!s) return;
    for (int l = 0; l < NGRAM_LEVELS; l++) free(s->t[l].end);
    free(s);
}

static void *ngram_new(const pagoda_drafter_config *cfg, int32_t max_total)
{
    ngram_state *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    int32_t n = cfg->ngram > 0 ? cfg->ngram : 3;
    uint32_t slots = 64;
    while (slots < NGRAM_MAX_SLOTS && slots < 2u * (uint32_t)(max_total > 0 ? max_total : 1)) slots *= 2;
    s->mask = slots - 1;
    for (int l = 0; l < NGRAM_LEVELS; l++) {
        ngram_table *tb = &s->t[l];
        tb->n = n << (NGRAM_LEVELS - 1 - l);
        tb->end = malloc(sizeof(int32_t) * slots);
        if (!tb->end) {
            ngram_free(s);
            return NULL;
        }
        memset(tb->end, 0xff, sizeof(int32_t) * slots); /* -1 */
        tb->indexed = tb->n - 1;
    }
    return s;
}

/* The end of the latest earlier occurrence of t's last tb->n tokens, or -1. */
static int32_t table_find(ngram_table *tb, uint32_t mask, const int32_t *t, int32_t len)
{
    int32_t n = tb->n;
    if (len <= n) return -1;
    /* enter the n-grams that end before the current suffix's end, so the
     * lookup below can only find an earlier occurrence */
    for (int32_t e = tb->indexed + 1; e <= len - 1; e++) tb->end[ngram_hash(t + e - n, n) & mask] = e;
    if (tb->indexed < len - 1) tb->indexed = len - 1;
    int32_t p = tb->end[ngram_hash(t + len - n, n) & mask];
    if (p < n || p >= len || memcmp(t + p - n, t + len - n, sizeof(int32_t) * (size_t)n) != 0)
        return -1;
    return p;
}

static int32_t ngram_propose(void *state, const int32_t *t, int32_t len, int32_t max, int32_t *out)
{
    ngram_state *s = state;
    if (max <= 0) return 0;
    int32_t p = -1;
    /* every table is brought up to date, whichever answers */
    for (int l = 0; l < NGRAM_LEVELS; l++) {
        int32_t q = table_find(&s->t[l], s->mask, t, len);
        if (p < 0) p = q;
    }
    if (p < 0) return 0;
    int32_t k = len - p < max ? len - p : max;
    memcpy(out, t + p, sizeof(int32_t) * (size_t)k);
    return k;
}

static const pagoda_drafter_ops ngram_ops = {
    .struct_size = sizeof(pagoda_drafter_ops),
    .name = "ngram",
    .seq_new = ngram_new,
    .seq_free = ngram_free,
    .propose = ngram_propose,
};

const pagoda_drafter_ops *pagoda_drafter_find(const char *name)
{
    if (name && strcmp(name, ngram_ops.name) == 0) return &ngram_ops;
    if (name && strcmp(name, pagoda_drafter_model_ops.name) == 0) return &pagoda_drafter_model_ops;
    return NULL;
}
