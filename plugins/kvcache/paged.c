/*
 * kvcache-paged: PagedAttention-style block bookkeeping. A sequence holds a
 * list of fixed-size blocks taken from a free list as it grows: admit()
 * takes the blocks its prompt needs, grow() adds blocks as the engine
 * computes more tokens, shrink() gives back the ones grown for rejected
 * draft tokens, release() gives them all back. No block is shared
 * and nothing is cached (n_cached is always 0).
 *
 * Not for: prefix caching (see prefix.c) or worst-case reservation (see
 * contiguous.c). It never touches KV memory, only block ids.
 *
 * Config: [kvcache.paged] has no keys.
 */
#include <stdlib.h>
#include <string.h>

#include "pagoda/host.h"
#include "pagoda/kvcache.h"
#include "pagoda/plugin.h"

/* One live sequence: its block ids in order. */
typedef struct paged_seq {
    uint64_t id;
    int32_t *blocks;
    int32_t n_blocks;
    int32_t cap;
} paged_seq;

typedef struct paged {
    const pagoda_host *host;
    int32_t n_blocks, block_size, max_seq_len;
    /* Free block ids as a stack: the most recently freed is reused first,
     * which keeps the hot part of the pool small. */
    int32_t *free_ids;
    int32_t n_free;
    /* Live sequences, unordered; the engine holds at most max_num_seqs of
     * them, so a linear scan is cheaper than a hash table here. */
    paged_seq *seqs;
    int32_t n_seqs, cap_seqs;
} paged;

static int32_t blocks_for(const paged *p, int64_t n_tokens)
{
    return n_tokens <= 0 ? 0 : (int32_t)((n_tokens + p->block_size - 1) / p->block_size);
}

static paged_seq *find_seq(paged *p, uint64_t id)
{
    for (int32_t i = 0; i < p->n_seqs; i++)
        if (p->seqs[i].id == id) return &p->seqs[i];
    return NULL;
}

static int paged_create(const pagoda_host *host, void **ctx, char *err, size_t err_len)
{
    paged *p = calloc(1, sizeof(*p));
    (void)err;
    (void)err_len;
    if (!p) return PAGODA_ERR_NOMEM;
    p->host = host;
    *ctx = p;
    return PAGODA_OK;
}

static void paged_destroy(void *ctx)
{
    paged *p = ctx;
    if (!p) return;
    for (int32_t i = 0; i < p->n_seqs; i++) free(p->seqs[i].blocks);
    free(p->seqs);
    free(p->free_ids);
    free(p);
}

static int paged_init(void *ctx, int32_t n_blocks, int32_t block_size, int32_t max_seq_len)
{
    paged *p = ctx;
    if (n_blocks <= 0 || block_size <= 0 || max_seq_len <= 0)
        return p->host->error(p->host, PAGODA_ERR_INVALID,
                              "kvcache.paged: init needs positive sizes, got %d blocks of %d tokens, "
                              "max_seq_len %d", n_blocks, block_size, max_seq_len);
    if (p->free_ids)
        return p->host->error(p->host, PAGODA_ERR_STATE, "kvcache.paged: init called twice");
    p->free_ids = malloc((size_t)n_blocks * sizeof(int32_t));
    if (!p->free_ids) return PAGODA_ERR_NOMEM;
    /* Pushed in reverse so that the first allocations get 0, 1, 2, ... */
    for (int32_t i = 0; i < n_blocks; i++) p->free_ids[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    p->max_seq_len = max_seq_len;
    return PAGODA_OK;
}

/* Append `n` blocks from the free list to s (the caller checked n <= n_free). */
static int take_blocks(paged *p, paged_seq *s, int32_t n)
{
    if (s->n_blocks + n > s->cap) {
        int32_t cap = s->cap ? s->cap : 4;
        while (cap < s->n_blocks + n) cap *= 2;
        int32_t *b = realloc(s->blocks, (size_t)cap * sizeof(int32_t));
        if (!b) return PAGODA_ERR_NOMEM;
        s->blocks = b;
        s->cap = cap;
    }
    for (int32_t i = 0; i < n; i++) s->blocks[s->n_blocks++] = p->free_ids[--p->n_free];
    return PAGODA_OK;
}

static int paged_admit(void *ctx, const pagoda_kv_seq *seq, int32_t *n_cached)
{
    paged *p = ctx;
    int st;
    if (!p->free_ids) return p->host->error(p->host, PAGODA_ERR_STATE, "kvcache.paged: admit before init");
    if (seq->n_tokens <= 0 || seq->n_tokens > p->max_seq_len)
        return p->host->error(p->host, PAGODA_ERR_INVALID,
                              "kvcache.paged: sequence %llu has %d tokens, expected 1..%d",
                              (unsigned long long)seq->id, seq->n_tokens, p->max_seq_len);
    if (find_seq(p, seq->id))
        return p->host->error(p->host, PAGODA_ERR_STATE, "kvcache.paged: sequence %llu admitted twice",
                              (unsigned long long)seq->id);
    int32_t need = blocks_for(p, seq->n_tokens);
    if (need > p->n_free) return PAGODA_ERR_NOSPACE;
    if (p->n_seqs == p->cap_seqs) {
        int32_t cap = p->cap_seqs ? p->cap_seqs * 2 : 16;
        paged_seq *ns = realloc(p->seqs, (size_t)cap * sizeof(*ns));
        if (!ns) return PAGODA_ERR_NOMEM;
        p->seqs = ns;
        p->cap_seqs = cap;
    }
    paged_seq *s = &p->seqs[p->n_seqs];
    memset(s, 0, sizeof(*s));
    s->id = seq->id;
    st = take_blocks(p, s, need);
    if (st != PAGODA_OK) {
        free(s->blocks);
        return st;
    }
    p->n_seqs++;
    if (n_cached) *n_cached = 0;
    return PAGODA_OK;
}

static int paged_grow(void *ctx, uint64_t seq_id, int32_t n_total)
{
    paged *p = ctx;
    paged_seq *s = find_seq(p, seq_id);
    if (!s)
        return p->host->error(p->host, PAGODA_ERR_NOT_FOUND, "kvcache.paged: grow of unknown sequence %llu",
                              (unsigned long long)seq_id);
    if (n_total > p->max_seq_len)
        return p->host->error(p->host, PAGODA_ERR_INVALID,
                              "kvcache.paged: sequence %llu asks for %d tokens, max_seq_len is %d",
                              (unsigned long long)seq_id, n_total, p->max_seq_len);
    int32_t need = blocks_for(p, n_total) - s->n_blocks;
    if (need <= 0) return PAGODA_OK; /* holding more is fine (shrink gives blocks back) */
    if (need > p->n_free) return PAGODA_ERR_NOSPACE;
    return take_blocks(p, s, need);
}

static int paged_block_table(void *ctx, uint64_t seq_id, const int32_t **table, int32_t *n_blocks)
{
    paged *p = ctx;
    paged_seq *s = find_seq(p, seq_id);
    if (!s) return PAGODA_ERR_NOT_FOUND;
    *table = s->blocks;
    *n_blocks = s->n_blocks;
    return PAGODA_OK;
}

static int paged_release(void *ctx, uint64_t seq_id)
{
    paged *p = ctx;
    paged_seq *s = find_seq(p, seq_id);
    if (!s) return PAGODA_ERR_NOT_FOUND;
    /* Pushed last block first so the sequence's first block is reused first. */
    for (int32_t i = s->n_blocks - 1; i >= 0; i--) p->free_ids[p->n_free++] = s->blocks[i];
    free(s->blocks);
    *s = p->seqs[--p->n_seqs];
    return PAGODA_OK;
}

/* Blocks past what n_total tokens need go back, last first (as release
 * pushes them), so the next grow takes the same blocks again. */
static int paged_shrink(void *ctx, uint64_t seq_id, int32_t n_total)
{
    paged *p = ctx;
    paged_seq *s = find_seq(p, seq_id);
    if (!s)
        return p->host->error(p->host, PAGODA_ERR_NOT_FOUND, "kvcache.paged: shrink of unknown sequence %llu",
                              (unsigned long long)seq_id);
    int32_t keep = blocks_for(p, n_total);
    while (s->n_blocks > keep) p->free_ids[p->n_free++] = s->blocks[--s->n_blocks];
    return PAGODA_OK;
}

static int paged_stats(void *ctx, pagoda_kv_stats *st)
{
    paged *p = ctx;
    st->total_blocks = p->n_blocks;
    st->free_blocks = p->n_free;
    st->used_blocks = p->n_blocks - p->n_free;
    st->cached_blocks = 0;
    st->reserved_blocks = 0;
    st->query_tokens = 0;
    st->hit_tokens = 0;
    st->evicted_blocks = 0;
    return PAGODA_OK;
}

static int32_t paged_blocks_needed(void *ctx, const pagoda_kv_seq *seq)
{
    return blocks_for(ctx, seq->n_tokens);
}

/* Every block is free or held by exactly one sequence (nothing is shared). */
static int paged_inspect(void *ctx, pagoda_kv_block_info *blocks, int32_t n_blocks)
{
    paged *p = ctx;
    if (n_blocks != p->n_blocks)
        return p->host->error(p->host, PAGODA_ERR_INVALID,
                              "kvcache.paged: inspect of %d blocks, the pool has %d", n_blocks,
                              p->n_blocks);
    memset(blocks, 0, sizeof(*blocks) * (size_t)n_blocks);
    for (int32_t i = 0; i < p->n_seqs; i++)
        for (int32_t j = 0; j < p->seqs[i].n_blocks; j++) {
            pagoda_kv_block_info *b = &blocks[p->seqs[i].blocks[j]];
            b->state = PAGODA_KV_BLOCK_USED;
            b->refs = 1;
        }
    return PAGODA_OK;
}

static const pagoda_kvcache_ops paged_ops = {
    .struct_size = sizeof(pagoda_kvcache_ops),
    .init = paged_init,
    .admit = paged_admit,
    .grow = paged_grow,
    .commit = NULL,
    .block_table = paged_block_table,
    .release = paged_release,
    .stats = paged_stats,
    .blocks_needed = paged_blocks_needed,
    .reset_cache = NULL,
    .inspect = paged_inspect,
    .shrink = paged_shrink,
};

static const pagoda_plugin_desc paged_desc = {
    PAGODA_DESC_HEADER(PAGODA_KIND_KVCACHE),
    .name = "paged",
    .version = "1.0",
    .description = "paged KV blocks allocated on demand from a free list (no prefix caching)",
    .config_keys = NULL,
    .probe = NULL,
    .create = paged_create,
    .destroy = paged_destroy,
    .ops = &paged_ops,
};

PAGODA_PLUGIN(paged_desc)
