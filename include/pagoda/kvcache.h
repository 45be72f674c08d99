/*
 * pagoda/kvcache.h: KV-cache policies. A policy owns block bookkeeping
 * only: which block ids a sequence holds, reference counts, prefix hashes
 * and eviction. The KV memory is one pool the core allocates through the
 * backend (see pagoda_kv_layout); a policy never touches it, except through
 * host->kv_copy_blocks for copy-on-write.
 *
 * Threads: init is called on the thread that loads the model, before the
 * engine thread starts; every other op is [engine thread]. Never two at
 * once. Sequences are named by the engine's 64-bit ids.
 *
 * Not for: the KV memory or its layout (backend.h) or who runs when
 * (scheduler.h).
 */
#ifndef PAGODA_KVCACHE_H
#define PAGODA_KVCACHE_H

#include "pagoda/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pagoda_kv_stats {
    size_t struct_size;
    int64_t total_blocks;
    int64_t free_blocks;     /* immediately allocatable, not holding cached data */
    int64_t used_blocks;     /* referenced by at least one live sequence */
    int64_t cached_blocks;   /* unreferenced but kept for prefix reuse (evictable) */
    int64_t reserved_blocks; /* held for a sequence but not yet written (contiguous) */
    int64_t query_tokens;    /* prompt tokens looked up in the prefix cache, ever */
    int64_t hit_tokens;      /* of those, found cached, ever */
    int64_t evicted_blocks;  /* cached blocks evicted, ever */
    /* ABI 1.11: a slower tier for evicted prefix blocks (kvcache-prefix's
     * disk tier); all 0 without one. A policy fills them only when
     * struct_size covers them. */
    bool tier_on;
    int64_t tier_hit_tokens;     /* of hit_tokens, read back from the tier, ever */
    int64_t tier_blocks, tier_bytes;   /* in the tier now */
    int64_t tier_written_blocks; /* written, ever */
    int64_t tier_dropped_blocks; /* not written (queue full, a write failed), ever */
    int64_t tier_bad_blocks;     /* files that failed a check (torn, flipped, foreign), ever */
    int64_t tier_evicted_blocks; /* deleted to stay under the tier's bound, ever */
    /* ABI 1.14: read-ahead while requests wait (the prefetch op) */
    int64_t tier_prefetched_blocks;   /* read back ahead of an admit, ever */
    int64_t tier_prefetch_hit_blocks; /* of those, found in memory by their admit, ever */
    /* ABI 1.14: a host-RAM level in front of the disk (device backends) */
    int64_t tier_ram_blocks, tier_ram_bytes; /* in it now (KV bytes) */
    int64_t tier_ram_hit_blocks;      /* of the tier's hits, served from it, ever */
    int64_t tier_restore_us;          /* admit's time reading blocks back from the tier
                                         (on the engine thread), microseconds, ever */
} pagoda_kv_stats;
/* Invariant the tests hold: free + used + cached == total (reserved blocks
 * are counted in used). */

/* minor 2: what inspect() reports of one block. */
typedef enum pagoda_kv_block_state {
    PAGODA_KV_BLOCK_FREE = 0,    /* allocatable, holding nothing worth keeping */
    PAGODA_KV_BLOCK_USED = 1,    /* held by at least one live sequence (reserved ones included) */
    PAGODA_KV_BLOCK_CACHED = 2   /* held by none, kept for prefix reuse (evictable) */
} pagoda_kv_block_state;

/* Flags of a block (minor 2). Later minors may define more bits: ignore
 * the ones you do not know. */
#define PAGODA_KV_BLOCK_RESERVED 0x1u /* held for a sequence, no token written yet (contiguous) */
#define PAGODA_KV_BLOCK_HASHED 0x2u   /* its full tokens are keyed: a prompt starting alike can share it */

/* One block, as inspect() fills it (minor 2). An element of an array, so
 * its size is fixed for good: it never grows; new meanings come as flag
 * bits. Counts agree with stats(): the USED entries are used_blocks, the
 * CACHED ones cached_blocks, the FREE ones free_blocks. */
typedef struct pagoda_kv_block_info {
    int32_t state;               /* pagoda_kv_block_state */
    int32_t refs;                /* live sequences holding it: >= 1 when USED, else 0 */
    uint32_t flags;              /* PAGODA_KV_BLOCK_* */
    uint32_t reserved_;          /* 0 */
    uint64_t owner;              /* a USED block no block table lists (a contiguous run's
                                    unwritten tail): the sequence holding it; else 0 (the
                                    core takes a block's sequences from the block tables) */
} pagoda_kv_block_info;

/* A new sequence as admit() sees it. It and what it points to (tokens,
 * cache_salt) are the engine's and valid only during the call: copy what
 * must be kept (a prefix hash, the salt). */
typedef struct pagoda_kv_seq {
    uint64_t id;
    const int32_t *tokens;    /* the prompt (after a preemption: prompt + output so far) */
    int32_t n_tokens;
    int32_t max_total;        /* prompt + max_tokens, capped at max_seq_len */
    const char *cache_salt;   /* NULL or a string that keeps this sequence's prefix blocks apart */
} pagoda_kv_seq;

typedef struct pagoda_kvcache_ops {
    size_t struct_size;

    /* required. Called once after create: the pool has n_blocks blocks of
     * block_size tokens; max_seq_len bounds any one sequence. */
    int (*init)(void *ctx, int32_t n_blocks, int32_t block_size, int32_t max_seq_len);

    /* required. Take a new sequence in. On success *n_cached is how many
     * leading tokens are already in the cache (0 without prefix caching;
     * always < seq->n_tokens so at least one token is computed) and the
     * sequence holds blocks for its whole prompt (cached blocks shared,
     * the rest fresh). PAGODA_ERR_NOSPACE if it does not fit
     * now (the caller may preempt or wait); nothing is held then. */
    int (*admit)(void *ctx, const pagoda_kv_seq *seq, int32_t *n_cached);

    /* required. Make room so the sequence can hold n_total tokens. Either all
     * the blocks are found or none is taken (PAGODA_ERR_NOSPACE). Asking
     * for fewer tokens than it holds changes nothing. */
    int (*grow)(void *ctx, uint64_t seq_id, int32_t n_total);

    /* optional. The first n_computed tokens of the sequence now hold valid
     * KV; `tokens` lists them. Full blocks may become shareable. Fallback:
     * nothing (no prefix caching). */
    int (*commit)(void *ctx, uint64_t seq_id, const int32_t *tokens, int32_t n_computed);

    /* required. The sequence's block ids in order. *table stays valid until
     * the next call that changes this sequence. */
    int (*block_table)(void *ctx, uint64_t seq_id, const int32_t **table, int32_t *n_blocks);

    /* required. The sequence is finished, cancelled or preempted: drop its
     * references. Committed full blocks may stay cached (prefix policy). */
    int (*release)(void *ctx, uint64_t seq_id);

    /* required. Fill *st (the core sets st->struct_size). */
    int (*stats)(void *ctx, pagoda_kv_stats *st);

    /* optional. Blocks admit() would need for this sequence now, counting
     * cache hits (for schedulers that look before they leap); no side
     * effect. Fallback: the core estimates ceil(n_tokens / block_size). */
    int32_t (*blocks_needed)(void *ctx, const pagoda_kv_seq *seq);

    /* optional. Drop every cached (unreferenced) block. Fallback: nothing. */
    int (*reset_cache)(void *ctx);

    /* ---- minor 2: inspection */

    /* optional. Fill blocks[0 .. n_blocks) (n_blocks as init() had it) with
     * every block's state, references and flags, as they are now; no side
     * effect. Called between steps when someone inspects the server (GET
     * /v1/inspect), so it should be a plain pass over the policy's arrays.
     * Fallback: the core marks each block in a live sequence's block table
     * USED with refs = the tables that list it and every other block FREE,
     * so a policy without it shows no cached or reserved blocks. */
    int (*inspect)(void *ctx, pagoda_kv_block_info *blocks, int32_t n_blocks);
    /* ---- minor 13: speculative decoding */
    /* optional. The sequence keeps only its first n_total tokens: the
     * engine grew it for draft tokens and rejected some, so the blocks past
     * the ones n_total tokens need go back to the pool (free, or cached
     * when a policy keeps them). Blocks holding committed tokens are never
     * dropped (n_total below what was committed keeps those); the table
     * stays in order, shorter. Asking for more tokens than it holds
     * changes nothing. Fallback: the blocks stay with the sequence until
     * it grows into them or is released. */
    int (*shrink)(void *ctx, uint64_t seq_id, int32_t n_total);

    /* ---- minor 14: read-ahead while requests wait */

    /* optional. The sequences waiting for admission now, soonest first
     * (seqs[0 .. n), each as admit() would see it; valid during the call
     * only). Called after the scheduler's step whenever some wait, and
     * once with n = 0 when none is left. A policy with a slower tier may
     * start reading their prefixes back off the engine thread so that
     * admit() finds them in memory; it must take no block and change
     * nothing admit() answers, only how fast. Fallback: nothing (admit
     * reads them itself). */
    int (*prefetch)(void *ctx, const pagoda_kv_seq *seqs, int32_t n);
} pagoda_kvcache_ops;

#ifdef __cplusplus
}
#endif
#endif /* PAGODA_KVCACHE_H */
