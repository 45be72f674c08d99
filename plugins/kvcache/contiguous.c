/*
 * kvcache-contiguous: the traditional baseline. At admit a sequence
 * reserves its worst case as ONE contiguous run of block ids (first fit):
 * max_seq_len tokens (reserve = max_seq_len) or prompt + max_tokens
 * (reserve = request, from seq->max_total). It is refused with NOSPACE when
 * no free run is that long, even if enough blocks are free in pieces:
 * external fragmentation is part of what this baseline shows. grow()
 * never allocates; it fails beyond the reservation.
 *
 * Not for: sharing or caching (see prefix.c), on-demand growth (paged.c).
 *
 * Config [kvcache.contiguous]:
 *   reserve = max_seq_len | request   (default max_seq_len)
 *
 * Stats: every reserved block is counted in used_blocks (the header's
 * invariant); reserved_blocks says how many of them hold no token yet.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pagoda/host.h"
#include "pagoda/kvcache.h"
#include "pagoda/plugin.h"

typedef struct contig_seq {
    uint64_t id;
    int32_t start;     /* first block id of the run */
    int32_t n_res;     /* blocks reserved */
    int32_t n_held;    /* tokens the sequence may hold now (admit / grow) */
    int32_t *table;    /* start .. start + n_res - 1, built once */
} contig_seq;

typedef struct contig {
    const pagoda_host *host;
    bool reserve_request;   /* reserve = request */
    int32_t n_blocks, block_size, max_seq_len;
    uint8_t *busy;          /* one byte per block: 1 when reserved */
    int32_t n_free;
    contig_seq *seqs;       /* unordered; linear scan (few live sequences) */
    int32_t n_seqs, cap_seqs;
} contig;

static int32_t blocks_for(const contig *c, int64_t n_tokens)
{
    return n_tokens <= 0 ? 0 : (int32_t)((n_tokens + c->block_size - 1) / c->block_size);
}

static contig_seq *find_seq(contig *c, uint64_t id)
{
    for (int32_t i = 0; i < c->n_seqs; i++)
        if (c->seqs[i].id == id) return &c->seqs[i];
    return NULL;
}

/* Blocks a sequence reserves at admit. */
static int32_t reservation(const contig *c, const pagoda_kv_seq *seq)
{
    int64_t tokens = c->max_seq_len;
    if (c->reserve_request && seq->max_total > 0 && seq->max_total < tokens) tokens = seq->max_total;
    if (tokens < seq->n_tokens) tokens = seq->n_tokens;
    return blocks_for(c, tokens);
}

/* First free run of n blocks, or -1. */
static int32_t first_fit(const contig *c, int32_t n)
{
    int32_t run = 0;
    for (int32_t i = 0; i < c->n_blocks; i++) {
        run = c->busy[i] ? 0 : run + 1;
        if (run == n) return i - n + 1;
    }
    return -1;
}

static const pagoda_config_key contig_keys[] = {
    {.name = "reserve", .type = PAGODA_KEY_STRING, .default_str = "max_seq_len",
     .help = "worst case reserved at admit: max_seq_len (whole context) or request (prompt + max_tokens)"},
    {.name = NULL},
};

static int contig_create(const pagoda_host *host, void **ctx, char *err, size_t err_len)
{
    const char *reserve = host->config_str(host, "reserve", "max_seq_len");
    bool req;
    if (!reserve || strcmp(reserve, "max_seq_len") == 0) req = false;
    else if (strcmp(reserve, "request") == 0) req = true;
    else {
        snprintf(err, err_len, "[kvcache.contiguous] reserve = \"%s\": expected max_seq_len or request",
                 reserve);
        return PAGODA_ERR_INVALID;
    }
    contig *c = calloc(1, sizeof(*c));
    if (!c) return PAGODA_ERR_NOMEM;
    c->host = host;
    c->reserve_request = req;
    *ctx = c;
    return PAGODA_OK;
}

static void contig_destroy(void *ctx)
{
    contig *c = ctx;
    if (!c) return;
    for (int32_t i = 0; i < c->n_seqs; i++) free(c->seqs[i].table);
    free(c->seqs);
    free(c->busy);
    free(c);
}

static int contig_init(void *ctx, int32_t n_blocks, int32_t block_size, int32_t max_seq_len)
{
    contig *c = ctx;
    if (n_blocks <= 0 || block_size <= 0 || max_seq_len <= 0)
        return c->host->error(c->host, PAGODA_ERR_INVALID,
                              "kvcache.contiguous: init needs positive sizes, got %d blocks of %d tokens, "
                              "max_seq_len %d", n_blocks, block_size, max_seq_len);
    if (c->busy) return c->host->error(c->host, PAGODA_ERR_STATE, "kvcache.contiguous: init called twice");
    c->busy = calloc((size_t)n_blocks, 1);
    if (!c->busy) return PAGODA_ERR_NOMEM;
    c->n_blocks = n_blocks;
    c->n_free = n_blocks;
    c->block_size = block_size;
    c->max_seq_len = max_seq_len;
    if (!c->reserve_request && blocks_for(c, max_seq_len) > n_blocks)
        c->host->log(c->host, PAGODA_LOG_WARN,
                     "reserve = max_seq_len needs %d blocks per sequence but the pool has %d: "
                     "nothing can be admitted; use reserve = request or a bigger pool",
                     blocks_for(c, max_seq_len), n_blocks);
    return PAGODA_OK;
}

static int contig_admit(void *ctx, const pagoda_kv_seq *seq, int32_t *n_cached)
{
    contig *c = ctx;
    if (!c->busy) return c->host->error(c->host, PAGODA_ERR_STATE, "kvcache.contiguous: admit before init");
    if (seq->n_tokens <= 0 || seq->n_tokens > c->max_seq_len)
        return c->host->error(c->host, PAGODA_ERR_INVALID,
                              "kvcache.contiguous: sequence %llu has %d tokens, expected 1..%d",
                              (unsigned long long)seq->id, seq->n_tokens, c->max_seq_len);
    if (find_seq(c, seq->id))
        return c->host->error(c->host, PAGODA_ERR_STATE, "kvcache.contiguous: sequence %llu admitted twice",
                              (unsigned long long)seq->id);
    int32_t n = reservation(c, seq);
    int32_t start = first_fit(c, n);
    if (start < 0) return PAGODA_ERR_NOSPACE;
    if (c->n_seqs == c->cap_seqs) {
        int32_t cap = c->cap_seqs ? c->cap_seqs * 2 : 16;
        contig_seq *ns = realloc(c->seqs, (size_t)cap * sizeof(*ns));
        if (!ns) return PAGODA_ERR_NOMEM;
        c->seqs = ns;
        c->cap_seqs = cap;
    }
    int32_t *table = malloc((size_t)n * sizeof(int32_t));
    if (!table) return PAGODA_ERR_NOMEM;
    for (int32_t i = 0; i < n; i++) {
        table[i] = start + i;
        c->busy[start + i] = 1;
    }
    c->n_free -= n;
    c->seqs[c->n_seqs++] = (contig_seq){
        .id = seq->id, .start = start, .n_res = n, .n_held = seq->n_tokens, .table = table};
    if (n_cached) *n_cached = 0;
    return PAGODA_OK;
}

static int contig_grow(void *ctx, uint64_t seq_id, int32_t n_total)
{
    contig *c = ctx;
    contig_seq *s = find_seq(c, seq_id);
    if (!s)
        return c->host->error(c->host, PAGODA_ERR_NOT_FOUND,
                              "kvcache.contiguous: grow of unknown sequence %llu", (unsigned long long)seq_id);
    /* The reservation is all a sequence ever gets: growing past it would
     * need a bigger contiguous run, which is what this baseline lacks. */
    if (blocks_for(c, n_total) > s->n_res) return PAGODA_ERR_NOSPACE;
    if (n_total > s->n_held) s->n_held = n_total;
    return PAGODA_OK;
}

/* The table lists the blocks that hold the sequence's tokens so far, like
 * the paged policies; the rest of the run stays reserved for it. */
static int contig_block_table(void *ctx, uint64_t seq_id, const int32_t **table, int32_t *n_blocks)
{
    contig *c = ctx;
    contig_seq *s = find_seq(c, seq_id);
    if (!s) return PAGODA_ERR_NOT_FOUND;
    *table = s->table;
    *n_blocks = blocks_for(c, s->n_held);
    return PAGODA_OK;
}

/* The run stays reserved (it is the sequence's whole worst case): only the
 * tokens held go back, so the table and inspect() show the tail as
 * reserved again. */
static int contig_shrink(void *ctx, uint64_t seq_id, int32_t n_total)
{
    contig *c = ctx;
    contig_seq *s = find_seq(c, seq_id);
    if (!s)
        return c->host->error(c->host, PAGODA_ERR_NOT_FOUND,
                              "kvcache.contiguous: shrink of unknown sequence %llu", (unsigned long long)seq_id);
    if (n_total >= 0 && n_total < s->n_held) s->n_held = n_total;
    return PAGODA_OK;
}

static int contig_release(void *ctx, uint64_t seq_id)
{
    contig *c = ctx;
    contig_seq *s = find_seq(c, seq_id);
    if (!s) return PAGODA_ERR_NOT_FOUND;
    memset(c->busy + s->start, 0, (size_t)s->n_res);
    c->n_free += s->n_res;
    free(s->table);
    *s = c->seqs[--c->n_seqs];
    return PAGODA_OK;
}

static int contig_stats(void *ctx, pagoda_kv_stats *st)
{
    contig *c = ctx;
    int64_t reserved = 0;
    for (int32_t i = 0; i < c->n_seqs; i++) reserved += c->seqs[i].n_res - blocks_for(c, c->seqs[i].n_held);
    st->total_blocks = c->n_blocks;
    st->free_blocks = c->n_free;
    st->used_blocks = c->n_blocks - c->n_free;
    st->cached_blocks = 0;
    st->reserved_blocks = reserved;
    st->query_tokens = 0;
    st->hit_tokens = 0;
    st->evicted_blocks = 0;
    return PAGODA_OK;
}

/* The reservation: admit may still refuse when the free blocks are enough
 * in number but not contiguous. */
static int32_t contig_blocks_needed(void *ctx, const pagoda_kv_seq *seq)
{
    return reservation(ctx, seq);
}

/* A run is the sequence's alone: its written head is in the block table,
 * its unwritten tail is reserved and named by its owner here, since no
 * table lists it. */
static int contig_inspect(void *ctx, pagoda_kv_block_info *blocks, int32_t n_blocks)
{
    contig *c = ctx;
    if (n_blocks != c->n_blocks)
        return c->host->error(c->host, PAGODA_ERR_INVALID,
                              "kvcache.contiguous: inspect of %d blocks, the pool has %d", n_blocks,
                              c->n_blocks);
    memset(blocks, 0, sizeof(*blocks) * (size_t)n_blocks);
    for (int32_t i = 0; i < c->n_seqs; i++) {
        const contig_seq *s = &c->seqs[i];
        int32_t held = blocks_for(c, s->n_held);
        for (int32_t j = 0; j < s->n_res; j++) {
            pagoda_kv_block_info *b = &blocks[s->start + j];
            b->state = PAGODA_KV_BLOCK_USED;
            b->refs = 1;
            if (j >= held) {
                b->flags = PAGODA_KV_BLOCK_RESERVED;
                b->owner = s->id;
            }
        }
    }
    return PAGODA_OK;
}

static const pagoda_kvcache_ops contig_ops = {
    .struct_size = sizeof(pagoda_kvcache_ops),
    .init = contig_init,
    .admit = contig_admit,
    .grow = contig_grow,
    .commit = NULL,
    .block_table = contig_block_table,
    .release = contig_release,
    .stats = contig_stats,
    .blocks_needed = contig_blocks_needed,
    .reset_cache = NULL,
    .inspect = contig_inspect,
    .shrink = contig_shrink,
};

static const pagoda_plugin_desc contig_desc = {
    PAGODA_DESC_HEADER(PAGODA_KIND_KVCACHE),
    .name = "contiguous",
    .version = "1.0",
    .description = "baseline: reserve each sequence's worst case as one contiguous run (first fit)",
    .config_keys = contig_keys,
    .probe = NULL,
    .create = contig_create,
    .destroy = contig_destroy,
    .ops = &contig_ops,
};

PAGODA_PLUGIN(contig_desc)
