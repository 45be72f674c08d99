/*
 * kvcache-prefix: paged blocks plus automatic prefix caching. Every full
 * block a sequence has computed is keyed by a hash chain,
 *     key(0) = XXH3_64(tokens of block 0, seed = root(cache_salt))
 *     key(i) = XXH3_64(tokens of block i, seed = key(i - 1)),
 * so a key names the whole prefix up to and including its block. Blocks are
 * reference-counted and shared between sequences whose prompts start alike.
 * When a sequence is released its hashed blocks stay cached (unreferenced,
 * in an LRU list) and are evicted least recently used first, only when an
 * allocation finds the free list empty.
 *
 * Hash collisions: a lookup matches a block only if its key, its parent's
 * key and its stored tokens are all equal, so two different token blocks
 * never share KV; two different prefixes would need a 64-bit collision of
 * their parent keys to be confused.
 *
 * A duplicate (a sequence commits a block whose key another block already
 * holds, e.g. the last prompt block that admit made it recompute) is kept
 * as a private, unhashed block and goes back to the free list on release;
 * the table keeps the first one.
 *
 * The disk tier (tier.h, optional): a hashed block that leaves every
 * sequence (enters the LRU list) is copied out through the host and
 * queued for the store, once per key; admit continues the chain past the
 * pool's hits into the store, reading blocks back into the sequence's
 * fresh blocks and counting them as cached. While a request waits in the
 * queue, prefetch names its chain's stored blocks to the tier, whose I/O
 * thread reads them back ahead (tier_prefetch bounds them), so its admit
 * copies them from memory. The tier binds to the
 * engine's KV fingerprint at the first admit or release (the host's KV
 * slots serve only once the engine does); it stays off, with a log line,
 * where blocks cannot leave the pool whole (tensor parallelism, a
 * sliding-window model).
 *
 * Not for: copy-on-write of partial blocks (only full blocks are shared and
 * shared blocks are never written), the KV memory itself, the store's file
 * format (tier.c).
 *
 * Config [kvcache.prefix]: tier_dir (empty: no tier), tier_size, tier_queue,
 * tier_prefetch, tier_required (prefix_keys below).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "pagoda/host.h"
#include "pagoda/kvcache.h"
#include "pagoda/plugin.h"
#include "tier.h"

#include <stddef.h>

/* Root seeds of the hash chain: without a salt, and mixed into a salt's hash. */
#define PREFIX_ROOT_SEED 0x70a60da5eedULL

/* Per block state: ref > 0 is used; ref == 0 and hashed is cached (in the
 * LRU list); ref == 0 and not hashed is on the free list. */
typedef struct pblock {
    int32_t ref;
    bool hashed;
    uint64_t key, parent;     /* when hashed */
    int32_t hnext;            /* next block in the same hash bucket */
    int32_t lru_prev, lru_next;
} pblock;

typedef struct prefix_seq {
    uint64_t id;
    uint64_t root;            /* chain seed from the salt */
    int32_t *blocks;
    int32_t n_blocks, cap;
    int32_t n_hashed;         /* leading blocks whose key is known (hits + committed) */
    uint64_t last_key;        /* key of block n_hashed - 1, or root */
} prefix_seq;

typedef struct prefix {
    const pagoda_host *host;
    int32_t n_blocks, block_size, max_seq_len;
    pblock *b;
    int32_t *toks;            /* n_blocks x block_size: tokens of hashed blocks */
    int32_t *buckets;         /* hash heads, -1 when empty */
    uint64_t bucket_mask;
    int32_t *free_ids;        /* stack */
    int32_t n_free;
    int32_t lru_head, lru_tail, n_lru; /* head = least recently used */
    int32_t *scratch;         /* hits of one lookup: max_seq_len / block_size + 1 */
    prefix_seq *seqs;         /* unordered; linear scan (few live sequences) */
    int32_t n_seqs, cap_seqs;
    int64_t query_tokens, hit_tokens, evicted;
    /* the disk tier: NULL when off; bound once tier_on */
    kv_tier *tier;
    bool tier_on;
    size_t tier_block_bytes;
    void *tier_buf;           /* one block's KV bytes */
    int64_t tier_hit_tokens;
    int64_t tier_prefetch;    /* the read-ahead budget, bytes (0: off) */
    int64_t tier_ram;         /* the host-RAM level's bound (tier_ram) */
    bool tier_ram_force;      /* also where the pool is host RAM (tests) */
    bool tier_ram_on;
    int64_t tier_restore_us;  /* admit's time reading blocks back, ever */
    kv_tier_want *want;       /* prefetch's list, cap_want */
    int32_t cap_want;
    bool prefetching;         /* the last prefetch asked for some */
} prefix;

#define TIER_DEFAULT_BYTES (4LL << 30)
#define TIER_QUEUE_DEFAULT_BYTES (256LL << 20)
#define TIER_PREFETCH_DEFAULT_BYTES (256LL << 20)
#define TIER_RAM_DEFAULT_BYTES 0

static const pagoda_config_key prefix_keys[] = {
    {.name = "tier_dir", .type = PAGODA_KEY_STRING, .default_str = "",
     .help = "a directory for the disk tier of evicted prefix blocks (empty: no tier)"},
    {.name = "tier_size", .type = PAGODA_KEY_SIZE, .default_str = "4G", .min = 1 << 20,
     .max = 1e15, .help = "the tier's bound, bytes of block files (least recently used go first)"},
    {.name = "tier_queue", .type = PAGODA_KEY_SIZE, .default_str = "256M", .min = 1 << 20,
     .max = 1e12, .help = "blocks copied out and waiting to be written (more are dropped)"},
    {.name = "tier_prefetch", .type = PAGODA_KEY_SIZE, .default_str = "256M", .min = 0,
     .max = 1e12, .help = "blocks read back ahead for requests waiting in the queue, held in "
                          "memory (0: read at admit)"},
    {.name = "tier_ram", .type = PAGODA_KEY_SIZE, .default_str = "0", .min = 0, .max = 1e15,
     .help = "a host-RAM level in front of the disk (or alone) for backends whose KV pool is "
             "device memory (0: none; ignored where the pool is host RAM, the CPU backend)"},
    {.name = "tier_ram_force", .type = PAGODA_KEY_BOOL, .default_str = "false",
     .help = "keep the host-RAM level also where the pool is host RAM (for tests: a second copy "
             "of the same memory)"},
    {.name = "tier_required", .type = PAGODA_KEY_BOOL, .default_str = "false",
     .help = "refuse to start when tier_dir cannot be used (else run without the tier)"},
    {.name = NULL},
};

static int32_t blocks_for(const prefix *p, int64_t n_tokens)
{
    return n_tokens <= 0 ? 0 : (int32_t)((n_tokens + p->block_size - 1) / p->block_size);
}

static prefix_seq *find_seq(prefix *p, uint64_t id)
{
    for (int32_t i = 0; i < p->n_seqs; i++)
        if (p->seqs[i].id == id) return &p->seqs[i];
    return NULL;
}

static uint64_t chain_root(const char *salt)
{
    if (!salt || !*salt) return PREFIX_ROOT_SEED;
    return XXH3_64bits_withSeed(salt, strlen(salt), PREFIX_ROOT_SEED ^ 0x5a17ULL);
}

static uint64_t block_key(const prefix *p, const int32_t *tokens, uint64_t parent)
{
    return XXH3_64bits_withSeed(tokens, (size_t)p->block_size * sizeof(int32_t), parent);
}

/* ---------------------------------------------------------- hash table */

static int32_t table_find(const prefix *p, uint64_t key, uint64_t parent, const int32_t *tokens)
{
    for (int32_t i = p->buckets[key & p->bucket_mask]; i >= 0; i = p->b[i].hnext)
        if (p->b[i].key == key && p->b[i].parent == parent &&
            memcmp(p->toks + (size_t)i * p->block_size, tokens, (size_t)p->block_size * sizeof(int32_t)) == 0)
            return i;
    return -1;
}

static void table_insert(prefix *p, int32_t id, uint64_t key, uint64_t parent, const int32_t *tokens)
{
    pblock *b = &p->b[id];
    b->hashed = true;
    b->key = key;
    b->parent = parent;
    memcpy(p->toks + (size_t)id * p->block_size, tokens, (size_t)p->block_size * sizeof(int32_t));
    int32_t *head = &p->buckets[key & p->bucket_mask];
    b->hnext = *head;
    *head = id;
}

static void table_remove(prefix *p, int32_t id)
{
    int32_t *link = &p->buckets[p->b[id].key & p->bucket_mask];
    while (*link >= 0 && *link != id) link = &p->b[*link].hnext;
    if (*link == id) *link = p->b[id].hnext;
    p->b[id].hashed = false;
    p->b[id].hnext = -1;
}

/* ---------------------------------------------------------------- LRU */

static void lru_append(prefix *p, int32_t id)
{
    p->b[id].lru_prev = p->lru_tail;
    p->b[id].lru_next = -1;
    if (p->lru_tail >= 0) p->b[p->lru_tail].lru_next = id;
    else p->lru_head = id;
    p->lru_tail = id;
    p->n_lru++;
}

static void lru_remove(prefix *p, int32_t id)
{
    pblock *b = &p->b[id];
    if (b->lru_prev >= 0) p->b[b->lru_prev].lru_next = b->lru_next;
    else p->lru_head = b->lru_next;
    if (b->lru_next >= 0) p->b[b->lru_next].lru_prev = b->lru_prev;
    else p->lru_tail = b->lru_prev;
    b->lru_prev = b->lru_next = -1;
    p->n_lru--;
}

/* A block with ref = 1: from the free list, else the least recently used
 * cached block, evicted. The caller checked that one exists. */
static int32_t alloc_block(prefix *p)
{
    int32_t id;
    if (p->n_free > 0) {
        id = p->free_ids[--p->n_free];
    } else {
        id = p->lru_head;
        lru_remove(p, id);
        table_remove(p, id);
        p->evicted++;
    }
    p->b[id].ref = 1;
    return id;
}

/* Longest chain of cached full blocks starting the sequence's tokens,
 * capped so at least one token is left to compute. Writes the block ids to
 * p->scratch; returns their count and the last key in *last_key. */
static int32_t lookup(const prefix *p, const pagoda_kv_seq *seq, uint64_t *last_key)
{
    uint64_t parent = chain_root(seq->cache_salt);
    int32_t max_hit = (seq->n_tokens - 1) / p->block_size;
    int32_t k = 0;
    for (; k < max_hit; k++) {
        const int32_t *t = seq->tokens + (size_t)k * p->block_size;
        uint64_t key = block_key(p, t, parent);
        int32_t id = table_find(p, key, parent, t);
        if (id < 0) break;
        p->scratch[k] = id;
        parent = key;
    }
    *last_key = parent;
    return k;
}

static int seq_reserve(prefix_seq *s, int32_t n)
{
    if (n <= s->cap) return PAGODA_OK;
    int32_t cap = s->cap ? s->cap : 4;
    while (cap < n) cap *= 2;
    int32_t *nb = realloc(s->blocks, (size_t)cap * sizeof(int32_t));
    if (!nb) return PAGODA_ERR_NOMEM;
    s->blocks = nb;
    s->cap = cap;
    return PAGODA_OK;
}

/* ------------------------------------------------------------- the ops */

static bool host_has_tier_slots(const pagoda_host *h)
{
    return h->struct_size >= offsetof(pagoda_host, kv_fingerprint) + sizeof(void *) &&
           h->kv_block_bytes && h->kv_read_block && h->kv_write_block && h->kv_fingerprint;
}

static int prefix_create(const pagoda_host *host, void **ctx, char *err, size_t err_len)
{
    prefix *p = calloc(1, sizeof(*p));
    if (!p) return PAGODA_ERR_NOMEM;
    p->host = host;
    p->lru_head = p->lru_tail = -1;
    const char *dir = host->config_str(host, "tier_dir", "");
    p->tier_ram = host->config_int(host, "tier_ram", TIER_RAM_DEFAULT_BYTES);
    p->tier_ram_force = host->config_bool(host, "tier_ram_force", false);
    if ((!dir || !*dir) && p->tier_ram > 0 && host_has_tier_slots(host)) {
        /* no directory: a host-RAM level alone, kept only where the pool
         * is device memory (tier_ready decides, once the engine serves) */
        char why[256] = "";
        p->tier_prefetch = 0;
        if (kv_tier_open(&p->tier, host, NULL, 0, 0, why, sizeof why))
            host->log(host, PAGODA_LOG_WARN, "running without the host-RAM tier: %s", why);
    } else if (dir && *dir) {
        bool required = host->config_bool(host, "tier_required", false);
        int64_t size = host->config_int(host, "tier_size", TIER_DEFAULT_BYTES);
        int64_t queue = host->config_int(host, "tier_queue", TIER_QUEUE_DEFAULT_BYTES);
        p->tier_prefetch = host->config_int(host, "tier_prefetch", TIER_PREFETCH_DEFAULT_BYTES);
        char why[1200] = "this core has no KV block slots (ABI < 1.11)";
        int st = host_has_tier_slots(host)
                     ? kv_tier_open(&p->tier, host, dir, size, queue, why, sizeof why)
                     : PAGODA_ERR_UNSUPPORTED;
        if (st && required) {
            snprintf(err, err_len, "kvcache.prefix: tier_required, and %s", why);
            free(p);
            return st;
        }
        if (st)
            host->log(host, PAGODA_LOG_WARN, "running without the disk tier: %s",
                      why);
    }
    *ctx = p;
    return PAGODA_OK;
}

/* Bind the tier to the engine's KV fingerprint once the engine serves
 * (the first admit or release); off for good, with a line, where blocks
 * cannot leave the pool. [engine thread] */
static void tier_ready(prefix *p)
{
    if (!p->tier || p->tier_on) return;
    const pagoda_host *h = p->host;
    /* the host-RAM level: only where the pool is not host RAM already */
    bool dev = PAGODA_HOST_HAS(h, kv_on_device) && h->kv_on_device(h);
    int64_t ram = dev || p->tier_ram_force ? p->tier_ram : 0;
    bool disk = kv_tier_has_disk(p->tier);
    if (!disk && !ram) {
        h->log(h, PAGODA_LOG_DEBUG, "no host-RAM tier: the KV pool is host RAM already");
        kv_tier_close(p->tier);
        p->tier = NULL;
        return;
    }
    size_t bytes = h->kv_block_bytes(h);
    const char *fp = bytes ? h->kv_fingerprint(h) : NULL;
    char why[512] = "KV blocks cannot leave this engine's pool whole (tensor parallelism or a "
                    "sliding-window model)";
    int st = PAGODA_ERR_UNSUPPORTED;
    if (bytes && fp) {
        p->tier_buf = malloc(bytes);
        st = p->tier_buf ? kv_tier_bind(p->tier, fp, bytes, p->block_size, why, sizeof why)
                         : PAGODA_ERR_NOMEM;
    }
    if (st) {
        h->log(h, disk ? PAGODA_LOG_WARN : PAGODA_LOG_INFO, "running without the %s tier: %s",
               disk ? "disk" : "host-RAM", why);
        kv_tier_close(p->tier);
        p->tier = NULL;
        free(p->tier_buf);
        p->tier_buf = NULL;
        return;
    }
    p->tier_on = true;
    p->tier_block_bytes = bytes;
    kv_tier_set_prefetch(p->tier, p->tier_prefetch);
    kv_tier_set_ram(p->tier, ram);
    p->tier_ram_on = ram > 0;
    char lvl[160];
    if (ram)
        snprintf(lvl, sizeof lvl, "a host-RAM level of %.0f MiB in front%s", (double)ram / (1 << 20),
                 dev ? "" : " (tier_ram_force: the pool is host RAM already)");
    else
        snprintf(lvl, sizeof lvl, "no host-RAM level (the KV pool is host RAM already)");
    kv_tier_stats ts;
    kv_tier_get_stats(p->tier, &ts);
    if (disk)
        h->log(h, PAGODA_LOG_INFO,
               "disk tier at %s: %lld blocks (%.1f MiB) kept from earlier runs, "
               "%.2f MiB a block, %lld bad files dropped; %s", kv_tier_path(p->tier),
               (long long)ts.blocks, (double)ts.bytes / (1 << 20), (double)bytes / (1 << 20),
               (long long)ts.bad_blocks, lvl);
    else
        h->log(h, PAGODA_LOG_INFO, "host-RAM tier of %.0f MiB for evicted prefix blocks "
               "(%.2f MiB a block; no tier_dir, so nothing outlives the process)%s",
               (double)ram / (1 << 20), (double)bytes / (1 << 20),
               dev ? "" : " (tier_ram_force: the pool is host RAM already)");
}

/* A hashed block left every sequence: to the tier, once per key. */
static void tier_put_block(prefix *p, int32_t id)
{
    if (!p->tier_on || kv_tier_has(p->tier, p->b[id].key)) return;
    if (p->host->kv_read_block(p->host, id, p->tier_buf, p->tier_block_bytes)) return;
    (void)kv_tier_put(p->tier, p->b[id].key, p->b[id].parent,
                      p->toks + (size_t)id * p->block_size, p->tier_buf);
}

static void prefix_destroy(void *ctx)
{
    prefix *p = ctx;
    if (!p) return;
    kv_tier_close(p->tier); /* writes what is queued */
    free(p->tier_buf);
    free(p->want);
    for (int32_t i = 0; i < p->n_seqs; i++) free(p->seqs[i].blocks);
    free(p->seqs);
    free(p->b);
    free(p->toks);
    free(p->buckets);
    free(p->free_ids);
    free(p->scratch);
    free(p);
}

static int prefix_init(void *ctx, int32_t n_blocks, int32_t block_size, int32_t max_seq_len)
{
    prefix *p = ctx;
    if (n_blocks <= 0 || block_size <= 0 || max_seq_len <= 0)
        return p->host->error(p->host, PAGODA_ERR_INVALID,
                              "kvcache.prefix: init needs positive sizes, got %d blocks of %d tokens, "
                              "max_seq_len %d", n_blocks, block_size, max_seq_len);
    if (p->b) return p->host->error(p->host, PAGODA_ERR_STATE, "kvcache.prefix: init called twice");
    uint64_t nb = 16;
    while (nb < 2 * (uint64_t)n_blocks) nb *= 2;
    p->b = calloc((size_t)n_blocks, sizeof(pblock));
    p->toks = malloc((size_t)n_blocks * (size_t)block_size * sizeof(int32_t));
    p->buckets = malloc(nb * sizeof(int32_t));
    p->free_ids = malloc((size_t)n_blocks * sizeof(int32_t));
    p->scratch = malloc(((size_t)max_seq_len / (size_t)block_size + 2) * sizeof(int32_t));
    if (!p->b || !p->toks || !p->buckets || !p->free_ids || !p->scratch) {
        free(p->b);
        free(p->toks);
        free(p->buckets);
        free(p->free_ids);
        free(p->scratch);
        p->b = NULL;
        p->toks = p->buckets = p->free_ids = p->scratch = NULL;
        return PAGODA_ERR_NOMEM;
    }
    for (uint64_t i = 0; i < nb; i++) p->buckets[i] = -1;
    p->bucket_mask = nb - 1;
    for (int32_t i = 0; i < n_blocks; i++) {
        p->b[i].hnext = p->b[i].lru_prev = p->b[i].lru_next = -1;
        p->free_ids[i] = n_blocks - 1 - i; /* first allocations get 0, 1, 2, ... */
    }
    p->n_free = n_blocks;
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    p->max_seq_len = max_seq_len;
    return PAGODA_OK;
}

/* A block read back from the tier, into its pool block. */
typedef struct block_dst {
    prefix *p;
    int32_t id;
} block_dst;

static int write_block(void *user, const void *kv)
{
    const block_dst *d = user;
    return d->p->host->kv_write_block(d->p->host, d->id, kv, d->p->tier_block_bytes);
}

static int prefix_admit(void *ctx, const pagoda_kv_seq *seq, int32_t *n_cached)
{
    prefix *p = ctx;
    int st;
    if (!p->b) return p->host->error(p->host, PAGODA_ERR_STATE, "kvcache.prefix: admit before init");
    if (seq->n_tokens <= 0 || seq->n_tokens > p->max_seq_len || !seq->tokens)
        return p->host->error(p->host, PAGODA_ERR_INVALID,
                              "kvcache.prefix: sequence %llu has %d tokens, expected 1..%d with a token array",
                              (unsigned long long)seq->id, seq->n_tokens, p->max_seq_len);
    if (find_seq(p, seq->id))
        return p->host->error(p->host, PAGODA_ERR_STATE, "kvcache.prefix: sequence %llu admitted twice",
                              (unsigned long long)seq->id);
    tier_ready(p);
    uint64_t last_key;
    int32_t k = lookup(p, seq, &last_key);
    int32_t need_new = blocks_for(p, seq->n_tokens) - k;
    /* Hit blocks that sit in the LRU list stop being evictable once taken. */
    int32_t hit_cached = 0;
    for (int32_t i = 0; i < k; i++) hit_cached += p->b[p->scratch[i]].ref == 0;
    if (need_new > p->n_free + p->n_lru - hit_cached) return PAGODA_ERR_NOSPACE;

    if (p->n_seqs == p->cap_seqs) {
        int32_t cap = p->cap_seqs ? p->cap_seqs * 2 : 16;
        prefix_seq *ns = realloc(p->seqs, (size_t)cap * sizeof(*ns));
        if (!ns) return PAGODA_ERR_NOMEM;
        p->seqs = ns;
        p->cap_seqs = cap;
    }
    prefix_seq s = {.id = seq->id, .root = chain_root(seq->cache_salt), .n_hashed = k, .last_key = last_key};
    st = seq_reserve(&s, k + need_new);
    if (st != PAGODA_OK) return st;
    /* Take the hits first so that allocating the rest cannot evict them. */
    for (int32_t i = 0; i < k; i++) {
        int32_t id = p->scratch[i];
        if (p->b[id].ref == 0) lru_remove(p, id);
        p->b[id].ref++;
        s.blocks[s.n_blocks++] = id;
    }
    for (int32_t i = 0; i < need_new; i++) s.blocks[s.n_blocks++] = alloc_block(p);
    /* The chain goes on in the disk tier: blocks read back into the fresh
     * blocks count as cached, up to the first miss. */
    int32_t restored = 0;
    struct timespec t0, t1;
    if (p->tier_on) clock_gettime(CLOCK_MONOTONIC, &t0);
    if (p->tier_on) {
        int32_t max_hit = (seq->n_tokens - 1) / p->block_size;
        uint64_t parent = last_key;
        for (int32_t i = k; i < max_hit; i++) {
            const int32_t *t = seq->tokens + (size_t)i * p->block_size;
            uint64_t key = block_key(p, t, parent);
            int32_t id = s.blocks[i];
            block_dst dst = {.p = p, .id = id};
            if (table_find(p, key, parent, t) >= 0 || !kv_tier_has(p->tier, key) ||
                !kv_tier_get_to(p->tier, key, parent, t, p->tier_buf, write_block, &dst))
                break;
            table_insert(p, id, key, parent, t);
            parent = key;
            restored++;
        }
        s.n_hashed = k + restored;
        s.last_key = parent;
    }
    if (p->tier_on) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        p->tier_restore_us += (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000;
    }
    p->seqs[p->n_seqs++] = s;
    /* Counted on success only, so a sequence retried while the pool is
     * full does not inflate the hit rate's denominator. */
    p->query_tokens += seq->n_tokens;
    p->hit_tokens += (int64_t)(k + restored) * p->block_size;
    p->tier_hit_tokens += (int64_t)restored * p->block_size;
    if (n_cached) *n_cached = (k + restored) * p->block_size;
    return PAGODA_OK;
}

static int prefix_grow(void *ctx, uint64_t seq_id, int32_t n_total)
{
    prefix *p = ctx;
    prefix_seq *s = find_seq(p, seq_id);
    if (!s)
        return p->host->error(p->host, PAGODA_ERR_NOT_FOUND, "kvcache.prefix: grow of unknown sequence %llu",
                              (unsigned long long)seq_id);
    if (n_total > p->max_seq_len)
        return p->host->error(p->host, PAGODA_ERR_INVALID,
                              "kvcache.prefix: sequence %llu asks for %d tokens, max_seq_len is %d",
                              (unsigned long long)seq_id, n_total, p->max_seq_len);
    int32_t need = blocks_for(p, n_total) - s->n_blocks;
    if (need <= 0) return PAGODA_OK;
    if (need > p->n_free + p->n_lru) return PAGODA_ERR_NOSPACE;
    int st = seq_reserve(s, s->n_blocks + need);
    if (st != PAGODA_OK) return st;
    for (int32_t i = 0; i < need; i++) s->blocks[s->n_blocks++] = alloc_block(p);
    return PAGODA_OK;
}

static int prefix_commit(void *ctx, uint64_t seq_id, const int32_t *tokens, int32_t n_computed)
{
    prefix *p = ctx;
    prefix_seq *s = find_seq(p, seq_id);
    if (!s)
        return p->host->error(p->host, PAGODA_ERR_NOT_FOUND, "kvcache.prefix: commit of unknown sequence %llu",
                              (unsigned long long)seq_id);
    int32_t full = n_computed / p->block_size;
    if (full > s->n_blocks) full = s->n_blocks; /* tokens beyond the blocks held cannot be valid */
    uint64_t parent = s->last_key;
    for (int32_t i = s->n_hashed; i < full; i++) {
        const int32_t *t = tokens + (size_t)i * p->block_size;
        uint64_t key = block_key(p, t, parent);
        int32_t id = s->blocks[i];
        if (!p->b[id].hashed && table_find(p, key, parent, t) < 0) table_insert(p, id, key, parent, t);
        parent = key;
    }
    if (full > s->n_hashed) {
        s->n_hashed = full;
        s->last_key = parent;
    }
    return PAGODA_OK;
}

static int prefix_block_table(void *ctx, uint64_t seq_id, const int32_t **table, int32_t *n_blocks)
{
    prefix *p = ctx;
    prefix_seq *s = find_seq(p, seq_id);
    if (!s) return PAGODA_ERR_NOT_FOUND;
    *table = s->blocks;
    *n_blocks = s->n_blocks;
    return PAGODA_OK;
}

/* A sequence drops block id: the last holder of a hashed block leaves it
 * cached (and offered to the tier), of any other one free. */
static void unref_block(prefix *p, int32_t id)
{
    if (--p->b[id].ref > 0) return;
    if (p->b[id].hashed) {
        lru_append(p, id);
        tier_put_block(p, id);
    } else {
        p->free_ids[p->n_free++] = id;
    }
}

static int prefix_release(void *ctx, uint64_t seq_id)
{
    prefix *p = ctx;
    prefix_seq *s = find_seq(p, seq_id);
    if (!s) return PAGODA_ERR_NOT_FOUND;
    tier_ready(p);
    /* Last block first: a chain's tail becomes least recently used before
     * its head, so eviction cuts chains from the end and the head, which
     * more prompts share, stays reachable longest. */
    for (int32_t i = s->n_blocks - 1; i >= 0; i--) unref_block(p, s->blocks[i]);
    free(s->blocks);
    *s = p->seqs[--p->n_seqs];
    return PAGODA_OK;
}

/* Blocks past what n_total tokens need leave the sequence as release()
 * would drop them (last first). They hold only rejected draft tokens,
 * never committed ones, so they are unhashed and private and go to the
 * free list; the hashed head (n_hashed blocks) always stays. */
static int prefix_shrink(void *ctx, uint64_t seq_id, int32_t n_total)
{
    prefix *p = ctx;
    prefix_seq *s = find_seq(p, seq_id);
    if (!s)
        return p->host->error(p->host, PAGODA_ERR_NOT_FOUND, "kvcache.prefix: shrink of unknown sequence %llu",
                              (unsigned long long)seq_id);
    int32_t keep = blocks_for(p, n_total);
    if (keep < s->n_hashed) keep = s->n_hashed;
    while (s->n_blocks > keep) unref_block(p, s->blocks[--s->n_blocks]);
    return PAGODA_OK;
}

static int prefix_stats(void *ctx, pagoda_kv_stats *st)
{
    prefix *p = ctx;
    st->total_blocks = p->n_blocks;
    st->free_blocks = p->n_free;
    st->cached_blocks = p->n_lru;
    st->used_blocks = p->n_blocks - p->n_free - p->n_lru;
    st->reserved_blocks = 0;
    st->query_tokens = p->query_tokens;
    st->hit_tokens = p->hit_tokens;
    st->evicted_blocks = p->evicted;
    if (st->struct_size >= offsetof(pagoda_kv_stats, tier_evicted_blocks) + sizeof(int64_t)) {
        kv_tier_stats ts = {0};
        if (p->tier_on) kv_tier_get_stats(p->tier, &ts);
        st->tier_on = p->tier_on;
        st->tier_hit_tokens = p->tier_hit_tokens;
        st->tier_blocks = ts.blocks;
        st->tier_bytes = ts.bytes;
        st->tier_written_blocks = ts.written_blocks;
        st->tier_dropped_blocks = ts.dropped_blocks;
        st->tier_bad_blocks = ts.bad_blocks;
        st->tier_evicted_blocks = ts.evicted_blocks;
    }
    if (st->struct_size >= offsetof(pagoda_kv_stats, tier_restore_us) + sizeof(int64_t)) {
        kv_tier_stats ts = {0};
        if (p->tier_on) kv_tier_get_stats(p->tier, &ts);
        st->tier_prefetched_blocks = ts.prefetched_blocks;
        st->tier_prefetch_hit_blocks = ts.prefetch_hit_blocks;
        st->tier_ram_blocks = ts.ram_blocks;
        st->tier_ram_bytes = ts.ram_bytes;
        st->tier_ram_hit_blocks = ts.ram_hit_blocks;
        st->tier_restore_us = p->tier_restore_us;
    }
    return PAGODA_OK;
}

/* New blocks admit would take now. Cached hits cost nothing; note that
 * hits sitting in the LRU list also leave the evictable pool. */
static int32_t prefix_blocks_needed(void *ctx, const pagoda_kv_seq *seq)
{
    prefix *p = ctx;
    uint64_t last_key;
    if (!p->b || seq->n_tokens <= 0 || !seq->tokens) return blocks_for(p, seq->n_tokens);
    int32_t k = seq->n_tokens <= p->max_seq_len ? lookup(p, seq, &last_key) : 0;
    return blocks_for(p, seq->n_tokens) - k;
}

static int prefix_reset_cache(void *ctx)
{
    prefix *p = ctx;
    while (p->lru_head >= 0) {
        int32_t id = p->lru_head;
        lru_remove(p, id);
        table_remove(p, id);
        p->free_ids[p->n_free++] = id;
    }
    return PAGODA_OK;
}

/* The block array says it all: referenced is used, unreferenced and hashed
 * is cached (in the LRU list), else free. */
static int prefix_inspect(void *ctx, pagoda_kv_block_info *blocks, int32_t n_blocks)
{
    prefix *p = ctx;
    if (n_blocks != p->n_blocks)
        return p->host->error(p->host, PAGODA_ERR_INVALID,
                              "kvcache.prefix: inspect of %d blocks, the pool has %d", n_blocks,
                              p->n_blocks);
    for (int32_t i = 0; i < n_blocks; i++) {
        const pblock *b = &p->b[i];
        blocks[i] = (pagoda_kv_block_info){
            .state = b->ref > 0 ? PAGODA_KV_BLOCK_USED
                     : b->hashed ? PAGODA_KV_BLOCK_CACHED : PAGODA_KV_BLOCK_FREE,
            .refs = b->ref > 0 ? b->ref : 0,
            .flags = b->hashed ? PAGODA_KV_BLOCK_HASHED : 0,
        };
    }
    return PAGODA_OK;
}

/* The waiting sequences' chains, as admit would walk them: past the pool's
 * hits, the blocks the tier holds up to its first miss, soonest request
 * first, as many as the read-ahead budget holds; the tier reads them back
 * on its I/O thread and lets go of what is no longer wanted. */
static int prefix_prefetch(void *ctx, const pagoda_kv_seq *seqs, int32_t n)
{
    prefix *p = ctx;
    if (!p->b || !p->tier || p->tier_prefetch <= 0) return PAGODA_OK;
    tier_ready(p);
    if (!p->tier_on || (n == 0 && !p->prefetching)) return PAGODA_OK;
    size_t file = p->tier_block_bytes + (size_t)p->block_size * sizeof(int32_t) + 64;
    int64_t room = p->tier_prefetch / (int64_t)file + 1;
    int32_t n_want = 0;
    for (int32_t s = 0; s < n && n_want < room; s++) {
        const pagoda_kv_seq *q = &seqs[s];
        if (q->n_tokens <= 0 || q->n_tokens > p->max_seq_len || !q->tokens) continue;
        uint64_t parent = chain_root(q->cache_salt);
        int32_t max_hit = (q->n_tokens - 1) / p->block_size;
        bool in_pool = true;
        for (int32_t k = 0; k < max_hit && n_want < room; k++) {
            const int32_t *t = q->tokens + (size_t)k * p->block_size;
            uint64_t key = block_key(p, t, parent);
            bool here = table_find(p, key, parent, t) >= 0;
            if (here && !in_pool) break; /* admit stops there too */
            if (!here) {
                in_pool = false;
                if (!kv_tier_has(p->tier, key)) break;
                if (n_want == p->cap_want) {
                    int32_t cap = p->cap_want ? p->cap_want * 2 : 64;
                    kv_tier_want *nw = realloc(p->want, (size_t)cap * sizeof *nw);
                    if (!nw) break;
                    p->want = nw;
                    p->cap_want = cap;
                }
                p->want[n_want++] = (kv_tier_want){.key = key, .parent = parent};
            }
            parent = key;
        }
    }
    (void)kv_tier_prefetch(p->tier, p->want, n_want);
    p->prefetching = n_want > 0;
    return PAGODA_OK;
}

static const pagoda_kvcache_ops prefix_ops = {
    .struct_size = sizeof(pagoda_kvcache_ops),
    .init = prefix_init,
    .admit = prefix_admit,
    .grow = prefix_grow,
    .commit = prefix_commit,
    .block_table = prefix_block_table,
    .release = prefix_release,
    .stats = prefix_stats,
    .blocks_needed = prefix_blocks_needed,
    .reset_cache = prefix_reset_cache,
    .inspect = prefix_inspect,
    .shrink = prefix_shrink,
    .prefetch = prefix_prefetch,
};

static const pagoda_plugin_desc prefix_desc = {
    PAGODA_DESC_HEADER(PAGODA_KIND_KVCACHE),
    .name = "prefix",
    .version = "1.0",
    .description = "paged KV blocks with automatic prefix caching (hash-chained full blocks, LRU eviction)",
    .config_keys = prefix_keys,
    .probe = NULL,
    .create = prefix_create,
    .destroy = prefix_destroy,
    .ops = &prefix_ops,
};

PAGODA_PLUGIN(prefix_desc)
