/*
 * tier.h: the prefix cache's second tier, a bounded store of KV blocks in
 * a directory on local disk, which outlives the pool and the process.
 *
 * A block is stored under the prefix policy's hash-chain key (which the
 * request's cache_salt seeds, so salts never share a stored block), in
 *     <dir>/<fingerprint hash>/<key as 16 hex digits>.kvb
 * with a header (magic, version, block size, fingerprint hash, key, parent
 * key, payload size), the block's tokens, the KV bytes (every layer, K and
 * V, as host->kv_read_block gives them) and an XXH3 checksum over all of
 * it. A read checks every field, the tokens and the checksum: a torn,
 * truncated, flipped or foreign file is a miss (and is deleted), never a
 * wrong block. Files are written to a temporary name and renamed, by one
 * writer thread, so the engine thread only copies the bytes into a queue.
 *
 * The fingerprint (host->kv_fingerprint: model file, KV dtype and layout)
 * names the subdirectory, so a restarted server with the same model and
 * layout finds its blocks and any other reads none of them. One process
 * holds a store directory at a time (an flock on its LOCK file): a second
 * server on the same directory runs without the tier, saying so at start
 * (or refuses to start when the tier is required).
 *
 * Bound: max_bytes of block files; least recently used (written or read)
 * files are deleted beyond it. A write that fails (a full disk) is a
 * warning and a dropped block, never an error of a request.
 *
 * Read ahead (kv_tier_prefetch): the blocks requests waiting in the queue
 * will want are read back by the same I/O thread (reads before writes),
 * checked, and held in memory, up to a budget, so that admit copies them
 * instead of reading the disk; a block no longer wanted is let go at the
 * next call.
 *
 * The host-RAM level (kv_tier_set_ram), for backends whose KV lives in
 * device memory: blocks put are held in host memory first, up to a bound,
 * and only its least recently used go on to the disk (or are dropped,
 * without a directory). A get finds a block in whichever level holds it.
 * Where the pool is host RAM already (the CPU backend) the policy leaves
 * it off: it would be a second copy of the same memory.
 *
 * Threads: every function but the I/O thread (the writer) is [engine
 * thread]; the index is shared with it under a mutex.
 */
#ifndef PAGODA_PREFIX_TIER_H
#define PAGODA_PREFIX_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagoda/host.h"

typedef struct kv_tier kv_tier;

typedef struct kv_tier_stats {
    int64_t blocks, bytes;          /* in the store now */
    int64_t hit_blocks;             /* read back into the pool, ever */
    int64_t written_blocks;         /* written, ever */
    int64_t dropped_blocks;         /* not written: queue full or a write failed */
    int64_t bad_blocks;             /* files that failed a check on read or scan (deleted) */
    int64_t evicted_blocks;         /* deleted to stay under max_bytes */
    int64_t prefetched_blocks;      /* read ahead for a waiting request, ever */
    int64_t prefetch_hit_blocks;    /* of hit_blocks, served from a read-ahead, ever */
    int64_t staged_blocks;          /* read ahead and held in memory now */
    int64_t ram_blocks, ram_bytes;  /* in the host-RAM level now (KV bytes) */
    int64_t ram_hit_blocks;         /* of hit_blocks, from the RAM level, ever */
    int64_t ram_evicted_blocks;     /* left the RAM level for the disk (or dropped), ever */
} kv_tier_stats;

/* One block a waiting request will want: its key and its parent's. */
typedef struct kv_tier_want {
    uint64_t key, parent;
} kv_tier_want;

/* Check that dir can be made and written. */
int kv_tier_check_dir(const char *dir, char *err, size_t err_len);

/* Take the store directory (at create, before the model loads, so a bad
 * path or a second server is one clear line at start): check it and hold
 * its LOCK. dir NULL or "": no disk, a store of the RAM level alone
 * (kv_tier_set_ram). The store is unusable until bound. */
int kv_tier_open(kv_tier **out, const pagoda_host *host, const char *dir, int64_t max_bytes,
                 int64_t queue_bytes, char *err, size_t err_len);

/* Bind to one fingerprint (once the engine serves and knows its layout):
 * make <dir>/<hash>/, index the files there (headers only; bad ones
 * deleted and counted) and start the writer. */
int kv_tier_bind(kv_tier *t, const char *fingerprint, size_t block_bytes, int32_t block_size,
                 char *err, size_t err_len);

/* Write every queued block, stop the writer, free. NULL is a no-op. */
void kv_tier_close(kv_tier *t);

/* Is a block with this key stored or queued? */
bool kv_tier_has(kv_tier *t, uint64_t key);

/* Queue a block for writing; kv is block_bytes, copied (and tokens,
 * block_size of them). Returns false when it was dropped (queue full). */
bool kv_tier_put(kv_tier *t, uint64_t key, uint64_t parent, const int32_t *tokens,
                 const void *kv);

/* Read a stored block into kv (block_bytes): true only when every check
 * passes and its tokens and parent are these. A queued block not yet
 * written is read from the queue, a block asked for ahead from memory
 * (waiting for the I/O thread when it has not read it yet). */
bool kv_tier_get(kv_tier *t, uint64_t key, uint64_t parent, const int32_t *tokens, void *kv);

/* kv_tier_get, the block's KV bytes then handed to put(user, kv) (valid
 * during the call; a put that fails, != 0, makes it a miss): a block read
 * ahead goes from memory to put in one copy, without passing through kv,
 * which the other levels and the disk use as their buffer. */
bool kv_tier_get_to(kv_tier *t, uint64_t key, uint64_t parent, const int32_t *tokens, void *kv,
                    int (*put)(void *user, const void *kv), void *user);

/* The host-RAM level's bound, bytes of KV held in memory in front of the
 * disk (0, the default: none). Blocks put go there first; its least
 * recently used go on to the disk's write queue (dropped when the queue
 * is full or there is no disk); closing writes them all to the disk. */
void kv_tier_set_ram(kv_tier *t, int64_t bytes);

/* Whether the store has a directory (else it is a RAM level alone). */
bool kv_tier_has_disk(const kv_tier *t);

/* The read-ahead budget, bytes of block files held in memory (0, the
 * default: no read-ahead). */
void kv_tier_set_prefetch(kv_tier *t, int64_t budget_bytes);

/* The blocks the requests waiting now will want, soonest first (each
 * request's chain in order): as many as the budget holds are read ahead by
 * the I/O thread (the ones already read stay); every other block read
 * ahead is let go. Blocks not stored are skipped (the caller stops a chain
 * at its first miss). Returns how many of them are read or on their way.
 * Call it with n = 0 when nothing waits. */
int32_t kv_tier_prefetch(kv_tier *t, const kv_tier_want *want, int32_t n);

void kv_tier_get_stats(kv_tier *t, kv_tier_stats *st);

/* The subdirectory in use (for logs and tests). */
const char *kv_tier_path(const kv_tier *t);

/* Tests: wait until the writer has written every queued block. */
void kv_tier_flush(kv_tier *t);

/* Tests: wait until every block asked for by kv_tier_prefetch is read (or
 * found bad, or let go). */
void kv_tier_prefetch_wait(kv_tier *t);

#endif
