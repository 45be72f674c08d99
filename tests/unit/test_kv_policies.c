/* test_kv_policies: the KV-cache policy plugins (kvcache-paged,
 * kvcache-contiguous, kvcache-prefix) loaded from the built .so files with
 * a fake host, checked on crafted sequences (exact block ids, refusals,
 * hits, eviction order, salts) and on a random stress run against a model
 * of the KV memory: every token a sequence is told is cached must be the
 * token that was written into that slot. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "pagoda/kvcache.h"
#include "plugin_testhost.h"
#include "testutil.h"

typedef struct kvi {
    th_host host;
    th_plugin pl;
    const pagoda_kvcache_ops *ops;
    void *ctx;
} kvi;

/* Load, create (with key/value pairs, NULL-terminated) and init a policy. */
static kvi *kv_open(const char *name, int32_t n_blocks, int32_t bs, int32_t max_seq_len, ...)
{
    kvi *k = calloc(1, sizeof(*k));
    char err[256] = "";
    va_list ap;
    ck_assert_ptr_nonnull(k);
    th_init(&k->host);
    va_start(ap, max_seq_len);
    for (const char *key; (key = va_arg(ap, const char *)) != NULL;) th_set(&k->host, key, va_arg(ap, const char *));
    va_end(ap);
    k->pl = th_load("kvcache", name);
    k->ops = k->pl.desc->ops;
    ck_assert_uint_ge(k->ops->struct_size, sizeof(pagoda_kvcache_ops));
    ck_assert_int_eq(k->pl.desc->create(&k->host.h, &k->ctx, err, sizeof(err)), PAGODA_OK);
    ck_assert_int_eq(k->ops->init(k->ctx, n_blocks, bs, max_seq_len), PAGODA_OK);
    return k;
}

static void kv_close(kvi *k)
{
    k->pl.desc->destroy(k->ctx);
    th_unload(&k->pl);
    free(k);
}

/* Every block as inspect() reports it (the caller frees), with what must
 * hold whatever the policy: the states counted agree with st, a used
 * block has refs >= 1 and every other none, a reserved one is used and
 * names its owner. */
static pagoda_kv_block_info *kv_inspect(kvi *k, const pagoda_kv_stats *st)
{
    int32_t n = (int32_t)st->total_blocks;
    /* plain checks, and check's asserts only on failure: a passing assert
     * costs a syscall (check marks the point), and this runs after every
     * operation of the stress runs */
    pagoda_kv_block_info *b = malloc(sizeof(*b) * (size_t)n);
    if (!b || !k->ops->inspect) ck_abort_msg("no memory or no inspect op");
    memset(b, 0xAB, sizeof(*b) * (size_t)n); /* whatever is not written shows */
    int rc = k->ops->inspect(k->ctx, b, n);
    if (rc != PAGODA_OK) ck_abort_msg("inspect: %d", rc);
    int64_t count[3] = {0, 0, 0}, reserved = 0;
    int32_t bad = -1;
    for (int32_t i = 0; i < n && bad < 0; i++) {
        const pagoda_kv_block_info *x = &b[i];
        bool ok = x->state >= PAGODA_KV_BLOCK_FREE && x->state <= PAGODA_KV_BLOCK_CACHED &&
                  (x->state == PAGODA_KV_BLOCK_USED ? x->refs >= 1 : x->refs == 0) && x->reserved_ == 0 &&
                  ((x->flags & PAGODA_KV_BLOCK_RESERVED) ? x->state == PAGODA_KV_BLOCK_USED && x->owner != 0
                                                         : x->owner == 0) &&
                  (x->state != PAGODA_KV_BLOCK_CACHED || (x->flags & PAGODA_KV_BLOCK_HASHED));
        if (!ok) {
            bad = i;
            break;
        }
        count[x->state]++;
        reserved += (x->flags & PAGODA_KV_BLOCK_RESERVED) != 0;
    }
    if (bad >= 0)
        ck_abort_msg("block %d: state %d refs %d flags %u owner %llu", bad, b[bad].state, b[bad].refs,
                     b[bad].flags, (unsigned long long)b[bad].owner);
    if (count[PAGODA_KV_BLOCK_FREE] != st->free_blocks || count[PAGODA_KV_BLOCK_USED] != st->used_blocks ||
        count[PAGODA_KV_BLOCK_CACHED] != st->cached_blocks || reserved != st->reserved_blocks)
        ck_abort_msg("inspect counts free %lld used %lld cached %lld reserved %lld, stats %lld %lld %lld %lld",
                     (long long)count[0], (long long)count[1], (long long)count[2], (long long)reserved,
                     (long long)st->free_blocks, (long long)st->used_blocks, (long long)st->cached_blocks,
                     (long long)st->reserved_blocks);
    return b;
}

/* Stats, with the invariant free + used + cached == total asserted, and
 * inspect() agreeing with them. */
static pagoda_kv_stats kv_stats(kvi *k)
{
    pagoda_kv_stats st;
    memset(&st, 0, sizeof(st));
    st.struct_size = sizeof(st);
    ck_assert_int_eq(k->ops->stats(k->ctx, &st), PAGODA_OK);
    ck_assert_int_eq(st.free_blocks + st.used_blocks + st.cached_blocks, st.total_blocks);
    ck_assert_int_ge(st.free_blocks, 0);
    ck_assert_int_ge(st.used_blocks, 0);
    ck_assert_int_ge(st.cached_blocks, 0);
    free(kv_inspect(k, &st));
    return st;
}

static int kv_admit(kvi *k, uint64_t id, const int32_t *toks, int32_t n, int32_t max_total, const char *salt,
                    int32_t *n_cached)
{
    pagoda_kv_seq s = {.id = id, .tokens = toks, .n_tokens = n, .max_total = max_total, .cache_salt = salt};
    *n_cached = -1;
    int st = k->ops->admit(k->ctx, &s, n_cached);
    kv_stats(k);
    return st;
}

static int32_t kv_needed(kvi *k, const int32_t *toks, int32_t n, int32_t max_total, const char *salt)
{
    pagoda_kv_seq s = {.id = 999999, .tokens = toks, .n_tokens = n, .max_total = max_total, .cache_salt = salt};
    return k->ops->blocks_needed(k->ctx, &s);
}

/* Asserts the sequence's table equals want[0..n). */
static void kv_expect_table(kvi *k, uint64_t id, const int32_t *want, int32_t n)
{
    const int32_t *t = NULL;
    int32_t nb = -1;
    ck_assert_int_eq(k->ops->block_table(k->ctx, id, &t, &nb), PAGODA_OK);
    ck_assert_int_eq(nb, n);
    for (int32_t i = 0; i < n; i++) ck_assert_msg(t[i] == want[i], "seq %llu block %d: %d, want %d",
                                                  (unsigned long long)id, i, t[i], want[i]);
}

static void iota(int32_t *t, int32_t n, int32_t start)
{
    for (int32_t i = 0; i < n; i++) t[i] = start + i;
}

/* ------------------------------------------------------------- paged */

START_TEST(paged_grow_free_reuse)
{
    kvi *k = kv_open("paged", 8, 4, 32, NULL);
    /* inspect() of a pool of another size is refused, not overrun */
    pagoda_kv_block_info small[7];
    ck_assert_int_eq(k->ops->inspect(k->ctx, small, 7), PAGODA_ERR_INVALID);
    int32_t toks[32], nc;
    iota(toks, 32, 100);
    ck_assert_ptr_null(k->pl.desc->config_keys);

    ck_assert_int_eq(kv_admit(k, 1, toks, 5, 32, NULL, &nc), PAGODA_OK);
    ck_assert_int_eq(nc, 0);
    kv_expect_table(k, 1, (int32_t[]){0, 1}, 2);
    ck_assert_int_eq(k->ops->grow(k->ctx, 1, 8), PAGODA_OK);
    kv_expect_table(k, 1, (int32_t[]){0, 1}, 2);
    ck_assert_int_eq(k->ops->grow(k->ctx, 1, 9), PAGODA_OK);
    kv_expect_table(k, 1, (int32_t[]){0, 1, 2}, 3);

    ck_assert_int_eq(kv_admit(k, 2, toks, 12, 32, NULL, &nc), PAGODA_OK);
    kv_expect_table(k, 2, (int32_t[]){3, 4, 5}, 3);
    pagoda_kv_stats st = kv_stats(k);
    ck_assert_int_eq(st.free_blocks, 2);
    ck_assert_int_eq(st.used_blocks, 6);
    ck_assert_int_eq(kv_needed(k, toks, 9, 32, NULL), 3);

    /* 3 blocks wanted, 2 free: refused and nothing taken */
    ck_assert_int_eq(kv_admit(k, 3, toks, 9, 32, NULL, &nc), PAGODA_ERR_NOSPACE);
    ck_assert_int_eq(kv_stats(k).free_blocks, 2);
    ck_assert_int_eq(k->ops->block_table(k->ctx, 3, &(const int32_t *){NULL}, &(int32_t){0}),
                     PAGODA_ERR_NOT_FOUND);

    ck_assert_int_eq(k->ops->grow(k->ctx, 2, 17), PAGODA_OK);
    kv_expect_table(k, 2, (int32_t[]){3, 4, 5, 6, 7}, 5);
    ck_assert_int_eq(kv_stats(k).free_blocks, 0);
    /* all or nothing */
    ck_assert_int_eq(k->ops->grow(k->ctx, 1, 13), PAGODA_ERR_NOSPACE);
    kv_expect_table(k, 1, (int32_t[]){0, 1, 2}, 3);

    ck_assert_int_eq(k->ops->release(k->ctx, 1), PAGODA_OK);
    ck_assert_int_eq(kv_stats(k).free_blocks, 3);
    ck_assert_int_eq(kv_admit(k, 3, toks, 9, 32, NULL, &nc), PAGODA_OK);
    kv_expect_table(k, 3, (int32_t[]){0, 1, 2}, 3); /* freed blocks are reused */

    /* errors */
    ck_assert_int_eq(kv_admit(k, 3, toks, 1, 32, NULL, &nc), PAGODA_ERR_STATE);
    ck_assert_int_eq(k->ops->grow(k->ctx, 42, 4), PAGODA_ERR_NOT_FOUND);
    ck_assert_int_eq(k->ops->grow(k->ctx, 3, 33), PAGODA_ERR_INVALID);
    ck_assert_int_eq(k->ops->release(k->ctx, 1), PAGODA_ERR_NOT_FOUND);
    ck_assert_int_eq(kv_admit(k, 9, toks, 33, 33, NULL, &nc), PAGODA_ERR_INVALID);

    ck_assert_int_eq(k->ops->release(k->ctx, 2), PAGODA_OK);
    ck_assert_int_eq(k->ops->release(k->ctx, 3), PAGODA_OK);
    st = kv_stats(k);
    ck_assert_int_eq(st.free_blocks, 8);
    ck_assert_int_eq(st.used_blocks, 0);
    kv_close(k);
}
END_TEST

/* --------------------------------------------------------- contiguous */

START_TEST(contiguous_request_fragmentation)
{
    kvi *k = kv_open("contiguous", 10, 4, 40, "reserve", "request", NULL);
    int32_t toks[40], nc;
    iota(toks, 40, 7);
    ck_assert(th_declares_key(k->pl.desc, "reserve"));

    ck_assert_int_eq(kv_admit(k, 1, toks, 5, 8, NULL, &nc), PAGODA_OK);   /* 2 blocks: 0-1 */
    ck_assert_int_eq(nc, 0);
    ck_assert_int_eq(kv_admit(k, 2, toks, 5, 12, NULL, &nc), PAGODA_OK);  /* 3 blocks: 2-4 */
    ck_assert_int_eq(kv_admit(k, 3, toks, 5, 8, NULL, &nc), PAGODA_OK);   /* 5-6 */
    ck_assert_int_eq(kv_admit(k, 4, toks, 5, 12, NULL, &nc), PAGODA_OK);  /* 7-9 */
    /* the table covers the tokens held, not the whole run */
    kv_expect_table(k, 2, (int32_t[]){2, 3}, 2);
    pagoda_kv_stats st = kv_stats(k);
    ck_assert_int_eq(st.free_blocks, 0);
    ck_assert_int_eq(st.used_blocks, 10);
    ck_assert_int_eq(st.reserved_blocks, 0 + 1 + 0 + 1);

    ck_assert_int_eq(k->ops->grow(k->ctx, 2, 12), PAGODA_OK);
    kv_expect_table(k, 2, (int32_t[]){2, 3, 4}, 3);
    ck_assert_int_eq(k->ops->grow(k->ctx, 2, 13), PAGODA_ERR_NOSPACE); /* past the reservation */
    kv_expect_table(k, 2, (int32_t[]){2, 3, 4}, 3);

    ck_assert_int_eq(k->ops->release(k->ctx, 1), PAGODA_OK);
    ck_assert_int_eq(k->ops->release(k->ctx, 3), PAGODA_OK);
    st = kv_stats(k);
    ck_assert_int_eq(st.free_blocks, 4);
    /* 3 blocks wanted, 4 free but in two runs of 2: refused */
    ck_assert_int_eq(kv_needed(k, toks, 5, 12, NULL), 3);
    ck_assert_int_eq(kv_admit(k, 5, toks, 5, 12, NULL, &nc), PAGODA_ERR_NOSPACE);
    ck_assert_int_eq(kv_stats(k).free_blocks, 4);
    /* first fit */
    ck_assert_int_eq(kv_admit(k, 6, toks, 2, 8, NULL, &nc), PAGODA_OK);
    kv_expect_table(k, 6, (int32_t[]){0}, 1);
    ck_assert_int_eq(k->ops->grow(k->ctx, 6, 8), PAGODA_OK);
    kv_expect_table(k, 6, (int32_t[]){0, 1}, 2);
    ck_assert_int_eq(kv_admit(k, 7, toks, 8, 8, NULL, &nc), PAGODA_OK);
    kv_expect_table(k, 7, (int32_t[]){5, 6}, 2);

    for (uint64_t id = 2; id <= 7; id++)
        if (id != 3 && id != 5) ck_assert_int_eq(k->ops->release(k->ctx, id), PAGODA_OK);
    st = kv_stats(k);
    ck_assert_int_eq(st.free_blocks, 10);
    ck_assert_int_eq(st.reserved_blocks, 0);
    kv_close(k);
}
END_TEST

START_TEST(contiguous_reserves_max_seq_len)
{
    kvi *k = kv_open("contiguous", 10, 4, 16, NULL); /* default reserve = max_seq_len: 4 blocks */
    int32_t toks[16], nc;
    iota(toks, 16, 1);
    ck_assert_int_eq(kv_needed(k, toks, 1, 2, NULL), 4);
    ck_assert_int_eq(kv_admit(k, 1, toks, 1, 2, NULL, &nc), PAGODA_OK);
    ck_assert_int_eq(kv_admit(k, 2, toks, 1, 2, NULL, &nc), PAGODA_OK);
    /* a one-token prompt is refused with 2 blocks free: the worst case is reserved */
    ck_assert_int_eq(kv_admit(k, 3, toks, 1, 2, NULL, &nc), PAGODA_ERR_NOSPACE);
    pagoda_kv_stats st = kv_stats(k);
    ck_assert_int_eq(st.used_blocks, 8);
    ck_assert_int_eq(st.reserved_blocks, 6);
    /* inspect: each run's first block is written, the other 3 reserved for
     * the run's owner, which no block table names */
    pagoda_kv_block_info *bi = kv_inspect(k, &st);
    for (int32_t i = 0; i < 8; i++) {
        ck_assert_int_eq(bi[i].state, PAGODA_KV_BLOCK_USED);
        ck_assert_int_eq(bi[i].refs, 1);
        bool tail = i % 4 != 0;
        ck_assert_uint_eq(bi[i].flags, tail ? PAGODA_KV_BLOCK_RESERVED : 0);
        ck_assert_uint_eq(bi[i].owner, tail ? (uint64_t)(i / 4 + 1) : 0);
    }
    ck_assert_int_eq(bi[8].state, PAGODA_KV_BLOCK_FREE);
    free(bi);
    ck_assert_int_eq(k->ops->grow(k->ctx, 1, 16), PAGODA_OK);
    ck_assert_int_eq(kv_stats(k).reserved_blocks, 3);
    kv_close(k);
}
END_TEST

START_TEST(contiguous_bad_reserve)
{
    th_host h;
    th_init(&h);
    th_set(&h, "reserve", "everything");
    th_plugin pl = th_load("kvcache", "contiguous");
    void *ctx = NULL;
    char err[256] = "";
    ck_assert_int_eq(pl.desc->create(&h.h, &ctx, err, sizeof(err)), PAGODA_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err, "everything"));
    th_unload(&pl);
}
END_TEST

/* ------------------------------------------------------------- prefix */

START_TEST(prefix_shares_blocks)
{
    kvi *k = kv_open("prefix", 16, 4, 64, NULL);
    int32_t a[20], b[20], nc;
    iota(a, 20, 1000);
    memcpy(b, a, sizeof(a));
    b[12] = 5; /* B = A's first 3 blocks, then different */

    ck_assert_int_eq(kv_admit(k, 1, a, 14, 64, NULL, &nc), PAGODA_OK);
    ck_assert_int_eq(nc, 0);
    kv_expect_table(k, 1, (int32_t[]){0, 1, 2, 3}, 4);
    /* nothing is shareable before it is committed */
    ck_assert_int_eq(kv_needed(k, b, 15, 64, NULL), 4);
    ck_assert_int_eq(k->ops->commit(k->ctx, 1, a, 14), PAGODA_OK);
    ck_assert_int_eq(kv_needed(k, b, 15, 64, NULL), 1);

    ck_assert_int_eq(kv_admit(k, 2, b, 15, 64, NULL, &nc), PAGODA_OK);
    ck_assert_int_eq(nc, 12);
    kv_expect_table(k, 2, (int32_t[]){0, 1, 2, 4}, 4);
    pagoda_kv_stats st = kv_stats(k);
    ck_assert_int_eq(st.query_tokens, 14 + 15);
    ck_assert_int_eq(st.hit_tokens, 12);
    ck_assert_int_eq(st.used_blocks, 5);
    ck_assert_int_eq(st.cached_blocks, 0);
    /* inspect: blocks 0-2 shared by both (refs 2, keyed), A's partial
     * block 3 and B's own block 4 held once */
    pagoda_kv_block_info *bi = kv_inspect(k, &st);
    for (int32_t i = 0; i < 3; i++) {
        ck_assert_int_eq(bi[i].state, PAGODA_KV_BLOCK_USED);
        ck_assert_int_eq(bi[i].refs, 2);
        ck_assert_uint_eq(bi[i].flags, PAGODA_KV_BLOCK_HASHED);
    }
    ck_assert_int_eq(bi[3].refs, 1);
    ck_assert_uint_eq(bi[3].flags, 0);
    ck_assert_int_eq(bi[4].refs, 1);
    ck_assert_int_eq(bi[5].state, PAGODA_KV_BLOCK_FREE);
    free(bi);

    /* a shared block outlives one of its holders */
    ck_assert_int_eq(k->ops->release(k->ctx, 1), PAGODA_OK);
    st = kv_stats(k);
    ck_assert_int_eq(st.used_blocks, 4);   /* B's 4 */
    ck_assert_int_eq(st.cached_blocks, 0); /* A's shared blocks are still used by B */
    ck_assert_int_eq(st.free_blocks, 12);  /* A's partial block 3 was never hashed */
    ck_assert_int_eq(k->ops->release(k->ctx, 2), PAGODA_OK);
    st = kv_stats(k);
    ck_assert_int_eq(st.used_blocks, 0);
    ck_assert_int_eq(st.cached_blocks, 3); /* B never committed its own block */
    ck_assert_int_eq(st.free_blocks, 13);
    bi = kv_inspect(k, &st);
    for (int32_t i = 0; i < 3; i++) ck_assert_int_eq(bi[i].state, PAGODA_KV_BLOCK_CACHED);
    ck_assert_int_eq(bi[3].state, PAGODA_KV_BLOCK_FREE);
    ck_assert_int_eq(bi[4].state, PAGODA_KV_BLOCK_FREE);
    free(bi);

    /* prompt exactly A's 3 cached blocks: one block is left to compute */
    ck_assert_int_eq(kv_admit(k, 3, a, 12, 64, NULL, &nc), PAGODA_OK);
    ck_assert_int_eq(nc, 8);
    const int32_t *t;
    int32_t nb;
    ck_assert_int_eq(k->ops->block_table(k->ctx, 3, &t, &nb), PAGODA_OK);
    ck_assert_int_eq(nb, 3);
    ck_assert_int_eq(t[0], 0);
    ck_assert_int_eq(t[1], 1);
    ck_assert_int_ne(t[2], 2);
    /* its recomputed last block duplicates block 2's key: kept private */
    ck_assert_int_eq(k->ops->commit(k->ctx, 3, a, 12), PAGODA_OK);
    st = kv_stats(k);
    ck_assert_int_eq(st.cached_blocks, 1); /* block 2, unreferenced */
    ck_assert_int_eq(st.used_blocks, 3);
    ck_assert_int_eq(k->ops->release(k->ctx, 3), PAGODA_OK);
    st = kv_stats(k);
    ck_assert_int_eq(st.cached_blocks, 3);
    ck_assert_int_eq(st.free_blocks, 13);

    /* one token more than 3 blocks: all 3 hit */
    ck_assert_int_eq(kv_admit(k, 4, a, 13, 64, NULL, &nc), PAGODA_OK);
    ck_assert_int_eq(nc, 12);
    ck_assert_int_eq(k->ops->block_table(k->ctx, 4, &t, &nb), PAGODA_OK);
    ck_assert_int_eq(nb, 4);
    ck_assert_int_eq(t[0], 0);
    ck_assert_int_eq(t[1], 1);
    ck_assert_int_eq(t[2], 2);
    ck_assert_int_eq(k->ops->release(k->ctx, 4), PAGODA_OK);
    st = kv_stats(k);
    ck_assert_int_eq(st.query_tokens, 14 + 15 + 12 + 13);
    ck_assert_int_eq(st.hit_tokens, 12 + 8 + 12);

    ck_assert_int_eq(k->ops->reset_cache(k->ctx), PAGODA_OK);
    st = kv_stats(k);
    ck_assert_int_eq(st.free_blocks, 16);
    ck_assert_int_eq(kv_needed(k, a, 13, 64, NULL), 4);
    kv_close(k);
}
END_TEST

START_TEST(prefix_lru_eviction)
{
    kvi *k = kv_open("prefix", 8, 4, 64, NULL);
    int32_t a[9], b[9], c[12], nc;
    iota(a, 9, 100);
    iota(b, 9, 200);
    iota(c, 12, 300);
    /* A and B each fill 2 blocks; released A first: LRU = a1 a0 b1 b0 */
    ck_assert_int_eq(kv_admit(k, 1, a, 8, 64, NULL, &nc), PAGODA_OK);
    ck_assert_int_eq(k->ops->commit(k->ctx, 1, a, 8), PAGODA_OK);
    ck_assert_int_eq(kv_admit(k, 2, b, 8, 64, NULL, &nc), PAGODA_OK);
    ck_assert_int_eq(k->ops->commit(k->ctx, 2, b, 8), PAGODA_OK);
    ck_assert_int_eq(k->ops->release(k->ctx, 1), PAGODA_OK);
    ck_assert_int_eq(k->ops->release(k->ctx, 2), PAGODA_OK);
    pagoda_kv_stats st = kv_stats(k);
    ck_assert_int_eq(st.cached_blocks, 4);
    ck_assert_int_eq(st.free_blocks, 4);
    /* touch A again (9 tokens: both blocks hit): LRU = b1 b0 a1 a0 */
    ck_assert_int_eq(kv_admit(k, 3, a, 9, 64, NULL, &nc), PAGODA_OK);
    ck_assert_int_eq(nc, 8);
    ck_assert_int_eq(k->ops->release(k->ctx, 3), PAGODA_OK);
    st = kv_stats(k);
    ck_assert_int_eq(st.cached_blocks, 4);
    ck_assert_int_eq(st.free_blocks, 4);
    ck_assert_int_eq(st.evicted_blocks, 0);

    /* free blocks go first: 3 blocks for C, none evicted */
    ck_assert_int_eq(kv_admit(k, 4, c, 12, 64, NULL, &nc), PAGODA_OK);
    st = kv_stats(k);
    ck_assert_int_eq(st.evicted_blocks, 0);
    ck_assert_int_eq(st.free_blocks, 1);
    /* 2 more: the free one, then b1 evicted */
    ck_assert_int_eq(k->ops->grow(k->ctx, 4, 20), PAGODA_OK);
    st = kv_stats(k);
    ck_assert_int_eq(st.evicted_blocks, 1);
    ck_assert_int_eq(kv_needed(k, b, 9, 64, NULL), 3 - 1);
    ck_assert_int_eq(kv_needed(k, a, 9, 64, NULL), 3 - 2);
    /* then b0, a1 */
    ck_assert_int_eq(k->ops->grow(k->ctx, 4, 28), PAGODA_OK);
    st = kv_stats(k);
    ck_assert_int_eq(st.evicted_blocks, 3);
    ck_assert_int_eq(st.cached_blocks, 1);
    ck_assert_int_eq(kv_needed(k, b, 9, 64, NULL), 3);
    ck_assert_int_eq(kv_needed(k, a, 9, 64, NULL), 3 - 1);
    /* nothing left but a0: a 2-block grow fails, taking nothing */
    ck_assert_int_eq(k->ops->grow(k->ctx, 4, 36), PAGODA_ERR_NOSPACE);
    ck_assert_int_eq(kv_stats(k).cached_blocks, 1);
    /* admitting A takes its cached block 0; 2 more are needed and none is left */
    ck_assert_int_eq(kv_admit(k, 5, a, 9, 64, NULL, &nc), PAGODA_ERR_NOSPACE);
    ck_assert_int_eq(kv_stats(k).cached_blocks, 1);
    ck_assert_int_eq(k->ops->release(k->ctx, 4), PAGODA_OK);
    st = kv_stats(k);
    ck_assert_int_eq(st.used_blocks, 0);
    ck_assert_int_eq(st.free_blocks + st.cached_blocks, 8);
    kv_close(k);
}
END_TEST

START_TEST(prefix_salt_isolation)
{
    kvi *k = kv_open("prefix", 32, 4, 64, NULL);
    int32_t a[9], nc;
    iota(a, 9, 50);
    ck_assert_int_eq(kv_admit(k, 1, a, 9, 64, "alice", &nc), PAGODA_OK);
    ck_assert_int_eq(k->ops->commit(k->ctx, 1, a, 9), PAGODA_OK);
    ck_assert_int_eq(kv_admit(k, 2, a, 9, 64, "bob", &nc), PAGODA_OK);
    ck_assert_int_eq(nc, 0);
    ck_assert_int_eq(kv_admit(k, 3, a, 9, 64, NULL, &nc), PAGODA_OK);
    ck_assert_int_eq(nc, 0);
    ck_assert_int_eq(kv_admit(k, 4, a, 9, 64, "alice", &nc), PAGODA_OK);
    ck_assert_int_eq(nc, 8);
    /* unsalted blocks are shared among unsalted requests only */
    ck_assert_int_eq(k->ops->commit(k->ctx, 3, a, 9), PAGODA_OK);
    ck_assert_int_eq(kv_admit(k, 5, a, 9, 64, "", &nc), PAGODA_OK); /* "" means no salt */
    ck_assert_int_eq(nc, 8);
    ck_assert_int_eq(kv_needed(k, a, 9, 64, "carol"), 3);
    pagoda_kv_stats st = kv_stats(k);
    ck_assert_int_eq(st.hit_tokens, 16);
    ck_assert_int_eq(st.query_tokens, 45);
    kv_close(k);
}
END_TEST

/* ------------------------------------------------------------- shrink */

/* ABI 1.13: blocks grown for draft tokens that were rejected go back. */
START_TEST(shrink_gives_draft_blocks_back)
{
    int32_t toks[32], nc;
    iota(toks, 32, 300);
    /* paged: to the free list, last first, so the next grow takes them again */
    kvi *k = kv_open("paged", 8, 4, 32, NULL);
    ck_assert_ptr_nonnull(k->ops->shrink);
    ck_assert_int_eq(kv_admit(k, 1, toks, 5, 32, NULL, &nc), PAGODA_OK);
    ck_assert_int_eq(k->ops->grow(k->ctx, 1, 14), PAGODA_OK); /* 6 tokens + 8 drafts */
    kv_expect_table(k, 1, (int32_t[]){0, 1, 2, 3}, 4);
    ck_assert_int_eq(kv_stats(k).free_blocks, 4);
    ck_assert_int_eq(k->ops->shrink(k->ctx, 1, 7), PAGODA_OK); /* one draft agreed */
    kv_expect_table(k, 1, (int32_t[]){0, 1}, 2);
    ck_assert_int_eq(kv_stats(k).free_blocks, 6);
    ck_assert_int_eq(k->ops->shrink(k->ctx, 1, 20), PAGODA_OK); /* more than held: nothing */
    kv_expect_table(k, 1, (int32_t[]){0, 1}, 2);
    ck_assert_int_eq(k->ops->grow(k->ctx, 1, 12), PAGODA_OK);
    kv_expect_table(k, 1, (int32_t[]){0, 1, 2}, 3);
    ck_assert_int_eq(k->ops->shrink(k->ctx, 42, 4), PAGODA_ERR_NOT_FOUND);
    ck_assert_int_eq(k->ops->release(k->ctx, 1), PAGODA_OK);
    ck_assert_int_eq(kv_stats(k).free_blocks, 8);
    kv_close(k);

    /* contiguous: the run stays reserved, the tokens held go back */
    k = kv_open("contiguous", 10, 4, 40, "reserve", "request", NULL);
    ck_assert_int_eq(kv_admit(k, 1, toks, 5, 16, NULL, &nc), PAGODA_OK); /* blocks 0-3 */
    ck_assert_int_eq(k->ops->grow(k->ctx, 1, 15), PAGODA_OK);
    kv_expect_table(k, 1, (int32_t[]){0, 1, 2, 3}, 4);
    ck_assert_int_eq(kv_stats(k).reserved_blocks, 0);
    ck_assert_int_eq(k->ops->shrink(k->ctx, 1, 6), PAGODA_OK);
    kv_expect_table(k, 1, (int32_t[]){0, 1}, 2);
    pagoda_kv_stats st = kv_stats(k);
    ck_assert_int_eq(st.reserved_blocks, 2);
    ck_assert_int_eq(st.free_blocks, 6);
    ck_assert_int_eq(k->ops->grow(k->ctx, 1, 16), PAGODA_OK);
    kv_expect_table(k, 1, (int32_t[]){0, 1, 2, 3}, 4);
    ck_assert_int_eq(k->ops->shrink(k->ctx, 42, 4), PAGODA_ERR_NOT_FOUND);
    ck_assert_int_eq(k->ops->release(k->ctx, 1), PAGODA_OK);
    kv_close(k);

    /* prefix: the committed (hashed) head always stays; the drafts' blocks
     * are private and go to the free list, not the cache */
    k = kv_open("prefix", 8, 4, 32, NULL);
    ck_assert_int_eq(kv_admit(k, 1, toks, 9, 32, NULL, &nc), PAGODA_OK); /* 3 blocks */
    ck_assert_int_eq(k->ops->commit(k->ctx, 1, toks, 9), PAGODA_OK);    /* 2 full, hashed */
    ck_assert_int_eq(k->ops->grow(k->ctx, 1, 18), PAGODA_OK);           /* 10 + 8 drafts */
    ck_assert_int_eq(kv_stats(k).free_blocks, 3);
    ck_assert_int_eq(k->ops->shrink(k->ctx, 1, 10), PAGODA_OK);
    st = kv_stats(k);
    ck_assert_int_eq(st.free_blocks, 5);
    ck_assert_int_eq(st.used_blocks, 3);
    ck_assert_int_eq(st.cached_blocks, 0);
    const int32_t *t = NULL;
    int32_t nb = 0;
    ck_assert_int_eq(k->ops->block_table(k->ctx, 1, &t, &nb), PAGODA_OK);
    ck_assert_int_eq(nb, 3);
    ck_assert_int_eq(k->ops->shrink(k->ctx, 1, 1), PAGODA_OK); /* below the committed 8 */
    ck_assert_int_eq(k->ops->block_table(k->ctx, 1, &t, &nb), PAGODA_OK);
    ck_assert_int_eq(nb, 2);
    ck_assert_int_eq(kv_stats(k).free_blocks, 6);
    /* the kept head is still a hit for a prompt that starts alike */
    ck_assert_int_eq(k->ops->release(k->ctx, 1), PAGODA_OK);
    ck_assert_int_eq(kv_admit(k, 2, toks, 12, 32, NULL, &nc), PAGODA_OK);
    ck_assert_int_eq(nc, 8);
    ck_assert_int_eq(k->ops->shrink(k->ctx, 42, 4), PAGODA_ERR_NOT_FOUND);
    ck_assert_int_eq(k->ops->release(k->ctx, 2), PAGODA_OK);
    kv_close(k);
}
END_TEST

/* ------------------------------------------------------- random stress */

#define ST_MAXT 64
#define ST_SEQS 12

typedef struct tseq {
    bool live;
    uint64_t id;
    int32_t toks[ST_MAXT];
    int32_t n_tokens, n_computed, held, max_total;
    int salt; /* 0: none, 1: "s1", 2: "s2" */
} tseq;

static const char *salt_str(int s)
{
    return s == 1 ? "s1" : s == 2 ? "s2" : NULL;
}

/* What a slot of the KV pool holds: the token and salt written there. */
static int64_t slot_val(int32_t tok, int salt)
{
    return (int64_t)tok * 4 + salt + 1;
}

static int32_t table_of(kvi *k, const tseq *s, const int32_t **t)
{
    int32_t nb = -1;
    ck_assert_int_eq(k->ops->block_table(k->ctx, s->id, t, &nb), PAGODA_OK);
    return nb;
}

/* Cross-checks every live table against the stats: no block twice in a
 * table, tables as long as the tokens held, and a block shared by two
 * sequences only where both hold the same tokens up to its end. */
static void stress_check(kvi *k, tseq *seqs, int32_t n_blocks, int32_t bs, bool shares, bool contiguous,
                         bool reserve_request)
{
    pagoda_kv_stats st = kv_stats(k);
    int32_t *owner_seq = malloc((size_t)n_blocks * sizeof(int32_t));
    int32_t *owner_pos = malloc((size_t)n_blocks * sizeof(int32_t));
    int64_t distinct = 0, reserved_total = 0;
    for (int32_t i = 0; i < n_blocks; i++) owner_seq[i] = -1;
    for (int i = 0; i < ST_SEQS; i++) {
        if (!seqs[i].live) continue;
        const int32_t *t;
        int32_t nb = table_of(k, &seqs[i], &t);
        ck_assert_int_eq(nb, (seqs[i].held + bs - 1) / bs);
        if (contiguous) {
            int32_t res = ((reserve_request ? seqs[i].max_total : ST_MAXT) + bs - 1) / bs;
            reserved_total += res;
        }
        for (int32_t j = 0; j < nb; j++) {
            ck_assert(t[j] >= 0 && t[j] < n_blocks);
            if (owner_seq[t[j]] < 0) {
                owner_seq[t[j]] = i;
                owner_pos[t[j]] = j;
                distinct++;
                continue;
            }
            ck_assert_msg(shares, "block %d held by two sequences", t[j]);
            ck_assert_msg(owner_seq[t[j]] != i, "block %d twice in one table", t[j]);
            ck_assert_int_eq(owner_pos[t[j]], j);
            const tseq *o = &seqs[owner_seq[t[j]]];
            ck_assert_int_eq(o->salt, seqs[i].salt);
            ck_assert(memcmp(o->toks, seqs[i].toks, (size_t)(j + 1) * bs * sizeof(int32_t)) == 0);
        }
    }
    if (contiguous) ck_assert_int_eq(st.used_blocks, reserved_total);
    else ck_assert_int_eq(st.used_blocks, distinct);
    /* inspect: a block's refs are the live tables listing it; a used block
     * no table lists is a contiguous run's reserved tail */
    int32_t *holders = calloc((size_t)n_blocks, sizeof(int32_t));
    for (int i = 0; i < ST_SEQS; i++) {
        if (!seqs[i].live) continue;
        const int32_t *t;
        int32_t nb = table_of(k, &seqs[i], &t);
        for (int32_t j = 0; j < nb; j++) holders[t[j]]++;
    }
    pagoda_kv_block_info *bi = kv_inspect(k, &st);
    for (int32_t b = 0; b < n_blocks; b++) {
        bool ok = holders[b] ? bi[b].state == PAGODA_KV_BLOCK_USED && bi[b].refs == holders[b] &&
                                   !(bi[b].flags & PAGODA_KV_BLOCK_RESERVED)
                             : bi[b].state != PAGODA_KV_BLOCK_USED ||
                                   (contiguous && (bi[b].flags & PAGODA_KV_BLOCK_RESERVED));
        if (!ok)
            ck_abort_msg("block %d: state %d refs %d flags %u, in %d live tables", b, bi[b].state,
                         bi[b].refs, bi[b].flags, holders[b]);
    }
    free(bi);
    free(holders);
    free(owner_seq);
    free(owner_pos);
}

static void stress(const char *name, uint64_t seed, const char *reserve)
{
    const int32_t n_blocks = 40, bs = 4;
    bool shares = strcmp(name, "prefix") == 0, contiguous = strcmp(name, "contiguous") == 0;
    kvi *k = contiguous ? kv_open(name, n_blocks, bs, ST_MAXT, "reserve", reserve, NULL)
                        : kv_open(name, n_blocks, bs, ST_MAXT, NULL);
    tseq seqs[ST_SEQS];
    int64_t *mem = calloc((size_t)n_blocks * bs, sizeof(int64_t));
    int32_t bases[4][ST_MAXT];
    tu_rng r;
    uint64_t next_id = 1;
    int64_t hits = 0, admits = 0, refusals = 0;
    memset(seqs, 0, sizeof(seqs));
    tu_rng_seed(&r, seed);
    for (int b = 0; b < 4; b++)
        for (int i = 0; i < ST_MAXT; i++) bases[b][i] = (int32_t)(tu_rng_u64(&r) % 50);

    for (int op = 0; op < 6000; op++) {
        int i = (int)(tu_rng_u64(&r) % ST_SEQS);
        tseq *s = &seqs[i];
        int32_t nc;
        if (!s->live) {
            /* admit: a prompt from one of 4 bases, sometimes with a new tail */
            int32_t n = 1 + (int32_t)(tu_rng_u64(&r) % 40);
            int b = (int)(tu_rng_u64(&r) % 4);
            int32_t keep = (int32_t)(tu_rng_u64(&r) % (n + 1));
            memcpy(s->toks, bases[b], sizeof(s->toks));
            for (int32_t j = keep; j < n; j++) s->toks[j] = 50 + (int32_t)(tu_rng_u64(&r) % 1000);
            s->n_tokens = n;
            s->max_total = n + (int32_t)(tu_rng_u64(&r) % (ST_MAXT - n + 1));
            s->salt = shares ? (int)(tu_rng_u64(&r) % 3) : 0;
            s->id = next_id++;
            pagoda_kv_stats before = kv_stats(k);
            int32_t need = kv_needed(k, s->toks, n, s->max_total, salt_str(s->salt));
            int st = kv_admit(k, s->id, s->toks, n, s->max_total, salt_str(s->salt), &nc);
            if (st == PAGODA_ERR_NOSPACE) {
                pagoda_kv_stats after = kv_stats(k);
                ck_assert_int_eq(after.free_blocks, before.free_blocks);
                ck_assert_int_eq(after.cached_blocks, before.cached_blocks);
                ck_assert_int_eq(after.query_tokens, before.query_tokens);
                if (!contiguous) ck_assert_int_gt(need, before.free_blocks);
                refusals++;
                continue;
            }
            ck_assert_int_eq(st, PAGODA_OK);
            if (!shares) ck_assert_int_le(need, before.free_blocks);
            else ck_assert_int_le(need, before.free_blocks + before.cached_blocks);
            ck_assert(nc >= 0 && nc < n && nc % bs == 0);
            if (!shares) ck_assert_int_eq(nc, 0);
            s->live = true;
            s->n_computed = nc;
            s->held = n; /* admit holds the prompt */
            admits++;
            hits += nc;
            /* what the cache claims is there must be what was written */
            const int32_t *t;
            table_of(k, s, &t);
            for (int32_t p = 0; p < nc; p++)
                ck_assert_msg(mem[(size_t)t[p / bs] * bs + p % bs] == slot_val(s->toks[p], s->salt),
                              "seq %llu token %d: cached slot holds the wrong token",
                              (unsigned long long)s->id, p);
        } else if (tu_rng_u64(&r) % 5 == 0 || s->n_computed >= s->n_tokens) {
            ck_assert_int_eq(k->ops->release(k->ctx, s->id), PAGODA_OK);
            s->live = false;
        } else {
            /* a step: compute up to 9 tokens (prefill chunk or decode) */
            int32_t left = s->n_tokens - s->n_computed;
            int32_t want = left > 1 ? 1 + (int32_t)(tu_rng_u64(&r) % (uint64_t)left) : 1;
            if (want > 9) want = 9;
            int32_t upto = s->n_computed + want;
            int st = k->ops->grow(k->ctx, s->id, upto);
            kv_stats(k);
            if (st == PAGODA_ERR_NOSPACE) {
                ck_assert_int_eq(k->ops->release(k->ctx, s->id), PAGODA_OK); /* "preempted" */
                s->live = false;
                continue;
            }
            ck_assert_int_eq(st, PAGODA_OK);
            if (upto > s->held) s->held = upto;
            const int32_t *t;
            table_of(k, s, &t);
            for (int32_t p = s->n_computed; p < upto; p++)
                mem[(size_t)t[p / bs] * bs + p % bs] = slot_val(s->toks[p], s->salt);
            s->n_computed = upto;
            if (s->n_computed == s->n_tokens && s->n_tokens < ST_MAXT) /* sample a token */
                s->toks[s->n_tokens++] = (int32_t)(tu_rng_u64(&r) % 50);
            if (k->ops->commit) ck_assert_int_eq(k->ops->commit(k->ctx, s->id, s->toks, s->n_computed), PAGODA_OK);
        }
        stress_check(k, seqs, n_blocks, bs, shares, contiguous, reserve && strcmp(reserve, "request") == 0);
    }
    for (int i = 0; i < ST_SEQS; i++)
        if (seqs[i].live) ck_assert_int_eq(k->ops->release(k->ctx, seqs[i].id), PAGODA_OK);
    pagoda_kv_stats st = kv_stats(k);
    ck_assert_int_eq(st.used_blocks, 0);
    ck_assert_int_eq(st.free_blocks + st.cached_blocks, n_blocks);
    ck_assert_int_gt(admits, 100);
    ck_assert_int_gt(refusals, 0); /* the pool was under pressure */
    if (shares) {
        ck_assert_int_gt(hits, 0);
        ck_assert_int_eq(st.hit_tokens, hits);
        ck_assert_int_gt(st.evicted_blocks, 0);
        ck_assert_int_eq(k->ops->reset_cache(k->ctx), PAGODA_OK);
        ck_assert_int_eq(kv_stats(k).free_blocks, n_blocks);
    } else {
        ck_assert_int_eq(st.free_blocks, n_blocks);
    }
    free(mem);
    kv_close(k);
}

START_TEST(stress_paged) { stress("paged", 11 + (uint64_t)_i, NULL); }
END_TEST
START_TEST(stress_contiguous) { stress("contiguous", 21 + (uint64_t)_i, _i % 2 ? "request" : "max_seq_len"); }
END_TEST
START_TEST(stress_prefix) { stress("prefix", 31 + (uint64_t)_i, NULL); }
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("kv_policies");
    TCase *tc = tcase_create("policies");
    tcase_add_test(tc, paged_grow_free_reuse);
    tcase_add_test(tc, contiguous_request_fragmentation);
    tcase_add_test(tc, contiguous_reserves_max_seq_len);
    tcase_add_test(tc, contiguous_bad_reserve);
    tcase_add_test(tc, prefix_shares_blocks);
    tcase_add_test(tc, prefix_lru_eviction);
    tcase_add_test(tc, prefix_salt_isolation);
    tcase_add_test(tc, shrink_gives_draft_blocks_back);
    tcase_add_loop_test(tc, stress_paged, 0, 2);
    tcase_add_loop_test(tc, stress_contiguous, 0, 2);
    tcase_add_loop_test(tc, stress_prefix, 0, 3);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
