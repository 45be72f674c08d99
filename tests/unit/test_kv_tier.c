/*
 * test_kv_tier.c: the prefix cache's disk tier (plugins/kvcache/prefix/).
 * The store alone: blocks round-trip, survive a reopen, stay apart by
 * fingerprint, and a flipped, truncated, deleted or foreign file is a miss
 * that is counted and deleted, never a wrong block; the bound evicts least
 * recently used files; one process holds a directory. Then the engine on
 * the bundled model with kvcache = prefix and a tier_dir: a restarted
 * runtime reads the prompt's blocks back and generates the same tokens as
 * one without the tier, corrupted files change nothing but the hit count,
 * and a cache_salt never meets another salt's blocks.
 */
#define _GNU_SOURCE
#include <check.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine.h"
#include "engine_testutil.h"
#include "tier.h"

static char g_dir[] = "/tmp/pagoda_tier_XXXXXX";

static void setup(void) { ck_assert_ptr_nonnull(mkdtemp(g_dir)); }
static void teardown(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    ck_assert_int_eq(system(cmd), 0);
    strcpy(g_dir, "/tmp/pagoda_tier_XXXXXX");
}

/* A host with only log, which the store uses; it counts lines. */
static int g_logs;
static void t_log(const pagoda_host *h, int level, const char *fmt, ...)
{
    (void)h;
    (void)level;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    g_logs++;
}
static const pagoda_host g_host = {.struct_size = sizeof(pagoda_host), .log = t_log};

enum { BS = 4, BYTES = 1000, N = 10 };

static void fill(int i, int32_t *tok, uint8_t *kv)
{
    for (int t = 0; t < BS; t++) tok[t] = i * 100 + t;
    for (int b = 0; b < BYTES; b++) kv[b] = (uint8_t)(i * 31 + b * 7);
}

static kv_tier *open_bound(const char *fp, int64_t max_bytes)
{
    char err[1200] = "";
    kv_tier *t = NULL;
    ck_assert_msg(kv_tier_open(&t, &g_host, g_dir, max_bytes, 1 << 20, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(kv_tier_bind(t, fp, BYTES, BS, err, sizeof err) == 0, "%s", err);
    return t;
}

static void put_all(kv_tier *t, int from, int to)
{
    int32_t tok[BS];
    uint8_t kv[BYTES];
    for (int i = from; i < to; i++) {
        fill(i, tok, kv);
        ck_assert(kv_tier_put(t, 1000 + (uint64_t)i, 7, tok, kv));
    }
}

static bool get_ok(kv_tier *t, int i)
{
    int32_t tok[BS];
    uint8_t want[BYTES], got[BYTES];
    fill(i, tok, want);
    memset(got, 0, sizeof got);
    if (!kv_tier_get(t, 1000 + (uint64_t)i, 7, tok, got)) return false;
    ck_assert_msg(!memcmp(want, got, BYTES), "block %d read back different bytes", i);
    return true;
}

static void block_path(kv_tier *t, int i, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%016llx.kvb", kv_tier_path(t), 1000ULL + (unsigned long long)i);
}

START_TEST(roundtrip_and_reopen)
{
    kv_tier *t = open_bound("model A", 1 << 20);
    put_all(t, 0, N);
    for (int i = 0; i < N; i++) ck_assert(get_ok(t, i)); /* from the queue or the disk */
    kv_tier_flush(t);
    for (int i = 0; i < N; i++) ck_assert(get_ok(t, i));
    /* the same key with other tokens or another parent is a miss */
    int32_t tok[BS];
    uint8_t kv[BYTES];
    fill(0, tok, kv);
    tok[0]++;
    ck_assert(!kv_tier_get(t, 1000, 7, tok, kv));
    fill(0, tok, kv);
    ck_assert(!kv_tier_get(t, 1000, 8, tok, kv));
    ck_assert(!kv_tier_has(t, 999));
    kv_tier_stats st;
    kv_tier_get_stats(t, &st);
    ck_assert_int_eq(st.written_blocks, N);
    ck_assert_int_eq(st.blocks, N);
    ck_assert_int_eq(st.bad_blocks, 0);
    kv_tier_close(t);

    t = open_bound("model A", 1 << 20); /* a restart */
    kv_tier_get_stats(t, &st);
    ck_assert_int_eq(st.blocks, N);
    for (int i = 0; i < N; i++) ck_assert(get_ok(t, i));
    kv_tier_close(t);

    t = open_bound("model B", 1 << 20); /* another model or layout sees none */
    kv_tier_get_stats(t, &st);
    ck_assert_int_eq(st.blocks, 0);
    for (int i = 0; i < N; i++) ck_assert(!get_ok(t, i));
    kv_tier_close(t);
}
END_TEST

static void damage(const char *path, int how)
{
    if (how == 2) {
        ck_assert_int_eq(unlink(path), 0);
        return;
    }
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    struct stat sb;
    ck_assert_int_eq(fstat(fd, &sb), 0);
    if (how == 0) { /* one bit of the KV bytes */
        uint8_t c;
        off_t at = sb.st_size - 17;
        ck_assert_int_eq(pread(fd, &c, 1, at), 1);
        c ^= 0x10;
        ck_assert_int_eq(pwrite(fd, &c, 1, at), 1);
    } else if (how == 1) { /* a torn write */
        ck_assert_int_eq(ftruncate(fd, sb.st_size / 2), 0);
    } else { /* another tier version in the header */
        uint32_t v = 99;
        ck_assert_int_eq(pwrite(fd, &v, 4, 8), 4);
    }
    close(fd);
}

START_TEST(faults_are_misses)
{
    kv_tier *t = open_bound("model A", 1 << 20);
    put_all(t, 0, 8);
    kv_tier_flush(t);
    char p[1400];
    for (int i = 0; i < 4; i++) {
        block_path(t, i, p, sizeof p);
        damage(p, i);
    }
    for (int i = 0; i < 4; i++) ck_assert_msg(!get_ok(t, i), "damaged block %d was read", i);
    for (int i = 4; i < 8; i++) ck_assert(get_ok(t, i));
    kv_tier_stats st;
    kv_tier_get_stats(t, &st);
    ck_assert_int_eq(st.bad_blocks, 3); /* the deleted one is a plain miss */
    ck_assert_int_eq(st.blocks, 4);
    for (int i = 0; i < 4; i++) {
        block_path(t, i, p, sizeof p);
        ck_assert_msg(access(p, F_OK) != 0, "damaged block %d is still on disk", i);
        ck_assert(!kv_tier_has(t, 1000 + (uint64_t)i));
    }
    /* damage found at start: the scan drops it */
    block_path(t, 4, p, sizeof p);
    kv_tier_close(t);
    damage(p, 1);
    t = open_bound("model A", 1 << 20);
    kv_tier_get_stats(t, &st);
    ck_assert_int_eq(st.blocks, 3);
    ck_assert_int_eq(st.bad_blocks, 1);
    ck_assert(!get_ok(t, 4));
    for (int i = 5; i < 8; i++) ck_assert(get_ok(t, i));
    kv_tier_close(t);
}
END_TEST

START_TEST(bound_is_lru)
{
    size_t file = 56 + BS * 4 + BYTES; /* the header, the tokens, the KV */
    kv_tier *t = open_bound("model A", (int64_t)(3 * file));
    put_all(t, 0, 3);
    kv_tier_flush(t);
    ck_assert(get_ok(t, 0)); /* 0 is now the most recently used */
    put_all(t, 3, 4);
    kv_tier_flush(t);
    kv_tier_stats st;
    kv_tier_get_stats(t, &st);
    ck_assert_int_eq(st.blocks, 3);
    ck_assert_int_le(st.bytes, (int64_t)(3 * file));
    ck_assert_int_eq(st.evicted_blocks, 1);
    ck_assert(!get_ok(t, 1)); /* the least recently used went */
    ck_assert(get_ok(t, 0));
    ck_assert(get_ok(t, 2));
    ck_assert(get_ok(t, 3));
    kv_tier_close(t);
}
END_TEST

START_TEST(one_process_a_directory)
{
    char err[1200] = "";
    kv_tier *a = NULL, *b = NULL;
    ck_assert_int_eq(kv_tier_open(&a, &g_host, g_dir, 1 << 20, 1 << 20, err, sizeof err), 0);
    ck_assert_int_ne(kv_tier_open(&b, &g_host, g_dir, 1 << 20, 1 << 20, err, sizeof err), 0);
    ck_assert_ptr_null(b);
    ck_assert_msg(strstr(err, "in use by another pagoda"), "%s", err);
    kv_tier_close(a);
    ck_assert_int_eq(kv_tier_open(&b, &g_host, g_dir, 1 << 20, 1 << 20, err, sizeof err), 0);
    kv_tier_close(b);
    /* a path that cannot be a directory */
    ck_assert_int_ne(kv_tier_check_dir("/proc/self/status/tier", err, sizeof err), 0);
    ck_assert_msg(strstr(err, "/proc/self/status/tier"), "%s", err);
    ck_assert_int_ne(kv_tier_check_dir("", err, sizeof err), 0);
}
END_TEST

/* kv_tier_get_to's put: checks it got block i's bytes; fails on request. */
typedef struct put_check {
    int i, calls, fail;
} put_check;

static int put_checked(void *user, const void *kv)
{
    put_check *c = user;
    int32_t tok[BS];
    uint8_t want[BYTES];
    fill(c->i, tok, want);
    ck_assert_msg(!memcmp(want, kv, BYTES), "put got other bytes than block %d's", c->i);
    c->calls++;
    return c->fail;
}

static kv_tier_want want_of(int i) { return (kv_tier_want){.key = 1000 + (uint64_t)i, .parent = 7}; }

/* Read ahead: the blocks asked for are read by the I/O thread, up to the
 * budget, and served from memory (their files may be gone by then); a
 * block no longer asked for is let go; a damaged file read ahead is a bad
 * block, deleted, never served. */
START_TEST(prefetch_reads_ahead)
{
    size_t file = 56 + BS * 4 + BYTES;
    kv_tier *t = open_bound("model A", 1 << 20);
    kv_tier_set_prefetch(t, (int64_t)(3 * file)); /* room for three */
    put_all(t, 0, 8);
    kv_tier_flush(t);
    kv_tier_want w[8];
    for (int i = 0; i < 6; i++) w[i] = want_of(i);
    w[6] = (kv_tier_want){.key = 999, .parent = 7}; /* not stored: skipped */
    ck_assert_int_eq(kv_tier_prefetch(t, w, 4), 3);
    kv_tier_prefetch_wait(t);
    kv_tier_stats st;
    kv_tier_get_stats(t, &st);
    ck_assert_int_eq(st.prefetched_blocks, 3);
    ck_assert_int_eq(st.staged_blocks, 3);
    char p[1400];
    for (int i = 0; i < 3; i++) { /* in memory now: the files are not needed */
        block_path(t, i, p, sizeof p);
        ck_assert_int_eq(unlink(p), 0);
    }
    for (int i = 0; i < 2; i++) ck_assert_msg(get_ok(t, i), "block %d was not read ahead", i);
    { /* handed on from memory, not through the buffer */
        int32_t tok[BS];
        uint8_t kv[BYTES], buf[BYTES];
        fill(2, tok, kv);
        memset(buf, 0, sizeof buf);
        put_check c = {.i = 2};
        ck_assert(kv_tier_get_to(t, 1002, 7, tok, buf, put_checked, &c));
        ck_assert_int_eq(c.calls, 1);
        ck_assert_msg(buf[1] == 0 && buf[2] == 0, "a block read ahead went through the buffer");
        /* a put that fails is a miss (block 3 comes from the disk) */
        fill(3, tok, kv);
        c = (put_check){.i = 3, .fail = PAGODA_ERR_IO};
        ck_assert(!kv_tier_get_to(t, 1003, 7, tok, buf, put_checked, &c));
        ck_assert_int_eq(c.calls, 1);
    }
    ck_assert(get_ok(t, 3)); /* beyond the budget: read from the disk at get */
    kv_tier_get_stats(t, &st);
    ck_assert_int_eq(st.prefetch_hit_blocks, 3);
    ck_assert_int_eq(st.staged_blocks, 0);
    ck_assert_int_eq(st.hit_blocks, 5); /* the failed put's read counted too */

    /* asked for, then no longer: let go, so the file is what counts again */
    ck_assert_int_eq(kv_tier_prefetch(t, &w[4], 2), 2);
    kv_tier_prefetch_wait(t);
    kv_tier_get_stats(t, &st);
    ck_assert_int_eq(st.staged_blocks, 2);
    ck_assert_int_eq(kv_tier_prefetch(t, &w[5], 1), 1); /* 4 is let go, 5 stays */
    kv_tier_get_stats(t, &st);
    ck_assert_int_eq(st.staged_blocks, 1);
    ck_assert_int_eq(st.prefetched_blocks, 5); /* 5 was not read twice */
    block_path(t, 4, p, sizeof p);
    ck_assert_int_eq(unlink(p), 0);
    ck_assert(!get_ok(t, 4));
    ck_assert_int_eq(kv_tier_prefetch(t, NULL, 0), 0);
    kv_tier_get_stats(t, &st);
    ck_assert_int_eq(st.staged_blocks, 0);

    /* a flipped file read ahead: bad, deleted, not served */
    block_path(t, 6, p, sizeof p);
    damage(p, 0);
    w[0] = want_of(6);
    w[1] = want_of(7);
    ck_assert_int_eq(kv_tier_prefetch(t, w, 2), 2);
    kv_tier_prefetch_wait(t);
    kv_tier_get_stats(t, &st);
    ck_assert_int_eq(st.bad_blocks, 1);
    ck_assert_int_eq(st.staged_blocks, 1);
    ck_assert(!kv_tier_has(t, 1006));
    ck_assert_msg(access(p, F_OK) != 0, "the damaged file read ahead is still on disk");
    ck_assert(!get_ok(t, 6));
    /* a block read ahead whose tokens are not the request's: a miss */
    int32_t tok[BS];
    uint8_t kv[BYTES];
    fill(7, tok, kv);
    tok[1]++;
    ck_assert(!kv_tier_get(t, 1007, 7, tok, kv));
    kv_tier_get_stats(t, &st);
    ck_assert_int_eq(st.staged_blocks, 0);

    /* a budget of 0: nothing is read ahead */
    kv_tier_set_prefetch(t, 0);
    ck_assert_int_eq(kv_tier_prefetch(t, w, 2), 0);
    kv_tier_close(t);

    /* closing with blocks read ahead and asked for frees them (ASan) */
    t = open_bound("model A", 1 << 20);
    kv_tier_set_prefetch(t, 1 << 20);
    put_all(t, 0, 8);
    kv_tier_flush(t);
    for (int i = 0; i < 8; i++) w[i] = want_of(i);
    ck_assert_int_eq(kv_tier_prefetch(t, w, 8), 8);
    kv_tier_close(t);
}
END_TEST

/* The host-RAM level: blocks put stay in memory up to its bound, the least
 * recently used go on to the disk (or away, without one), a get finds a
 * block in either level, and closing writes the RAM level to the disk. */
START_TEST(ram_level)
{
    char err[1200] = "";
    kv_tier *t = NULL;
    /* RAM alone (no directory): the bound drops the least recently used */
    ck_assert_int_eq(kv_tier_open(&t, &g_host, NULL, 0, 0, err, sizeof err), 0);
    ck_assert(!kv_tier_has_disk(t));
    ck_assert_msg(kv_tier_bind(t, "model A", BYTES, BS, err, sizeof err) == 0, "%s", err);
    kv_tier_set_ram(t, 3 * BYTES);
    put_all(t, 0, 3);
    ck_assert(get_ok(t, 0)); /* 0 is now the most recently used */
    put_all(t, 3, 5);
    kv_tier_stats st;
    kv_tier_get_stats(t, &st);
    ck_assert_int_eq(st.ram_blocks, 3);
    ck_assert_int_eq(st.ram_bytes, 3 * BYTES);
    ck_assert_int_eq(st.ram_evicted_blocks, 2);
    ck_assert_int_eq(st.blocks, 3);
    ck_assert_int_eq(st.bytes, 0);
    ck_assert(!get_ok(t, 1));
    ck_assert(!get_ok(t, 2));
    ck_assert(get_ok(t, 0));
    ck_assert(get_ok(t, 3));
    ck_assert(get_ok(t, 4));
    int32_t tok[BS];
    uint8_t kv[BYTES];
    fill(4, tok, kv);
    tok[0]++;
    ck_assert(!kv_tier_get(t, 1004, 7, tok, kv)); /* another prefix: a miss */
    kv_tier_get_stats(t, &st);
    ck_assert_int_eq(st.ram_hit_blocks, 4);
    kv_tier_close(t);

    /* RAM in front of the disk: what leaves the RAM level is written */
    t = open_bound("model A", 1 << 20);
    ck_assert(kv_tier_has_disk(t));
    kv_tier_set_ram(t, 2 * BYTES);
    put_all(t, 0, 5);
    kv_tier_flush(t);
    kv_tier_get_stats(t, &st);
    ck_assert_int_eq(st.ram_blocks, 2);
    ck_assert_int_eq(st.written_blocks, 3);
    ck_assert_int_eq(st.blocks, 5);
    char p[1400];
    block_path(t, 4, p, sizeof p);
    ck_assert_msg(access(p, F_OK) != 0, "a block of the RAM level is on disk already");
    for (int i = 0; i < 5; i++) ck_assert(get_ok(t, i));
    kv_tier_get_stats(t, &st);
    ck_assert_int_eq(st.ram_hit_blocks, 2);
    kv_tier_close(t); /* writes the RAM level out */
    t = open_bound("model A", 1 << 20);
    kv_tier_get_stats(t, &st);
    ck_assert_int_eq(st.blocks, 5);
    for (int i = 0; i < 5; i++) ck_assert(get_ok(t, i));
    kv_tier_close(t);
}
END_TEST

/* ------------------------------------------------------------ the engine */

static const char *PROMPT =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "sunshine. One day, she saw a big, red ball in the park. She ran to the ball and kicked it "
    "very hard. The ball went up, up, up into the sky. Lily was so happy. Her mom came and "
    "said, \"Lily, it is time to go home.\" Lily said, \"Okay, mom.\" They went home and ate "
    "dinner together. After dinner, Lily went to bed and dreamed about the big, red ball.";

/* Each engine test compares a run that computes the whole prompt with
 * runs that find part of it cached (the rest computed in a call of a few
 * rows) or reach a running engine together: across batch shapes, so under
 * batch_invariant, where a row's logits do not depend on its call's size
 * (docs/speculation.md, "Byte-identical output"). */
#define BATCH_INVARIANT "backend.cpu.batch_invariant=on"

static void run_one(const char *const *settings, const char *salt, et_result *r,
                    pagoda_kv_stats *kst)
{
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open(&cfg, settings);
    et_result_init(r);
    pagoda_request req = et_request(rt, PROMPT, 12, 0.0f);
    req.cache_salt = salt;
    uint64_t id;
    char err[512] = "";
    ck_assert_msg(pagoda_engine_submit(rt->engine, &req, et_cb, r, &id, err, sizeof err) == 0, "%s", err);
    pagoda_engine_wait_idle(rt->engine);
    ck_assert_int_eq(r->n_final, 1);
    ck_assert_msg(!r->error[0], "%s", r->error);
    memset(kst, 0, sizeof *kst);
    ck_assert_int_eq(pagoda_engine_kv_stats(rt->engine, kst), 0);
    et_close(rt, cfg); /* writes what the tier has queued */
}

static void corrupt_all(void)
{
    char cmd[512];
    /* one bit in the last 64 bytes of every block file (its KV bytes) */
    snprintf(cmd, sizeof cmd,
             "for f in %s/*/*.kvb; do printf '\\377' | dd of=\"$f\" bs=1 seek=$(( $(stat -c %%s \"$f\") - 40 )) "
             "conv=notrunc status=none; done", g_dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(engine_restart_same_tokens)
{
    char dirset[600];
    snprintf(dirset, sizeof dirset, "kvcache.prefix.tier_dir=%s", g_dir);
    const char *plain[] = {"engine.kvcache=paged", BATCH_INVARIANT, NULL};
    const char *tier[] = {"engine.kvcache=prefix", BATCH_INVARIANT, dirset, NULL};
    et_result ref, a, b, c, d, e;
    pagoda_kv_stats ks;

    run_one(plain, NULL, &ref, &ks);
    int32_t n_prompt = ref.usage.prompt_tokens;
    ck_assert_int_gt(n_prompt, 64);
    int32_t full = (n_prompt - 1) / 16 * 16; /* what a prefix hit can cover */

    run_one(tier, NULL, &a, &ks); /* cold: computes, then writes at release */
    ck_assert(ks.tier_on);
    ck_assert_int_eq(a.usage.cached_tokens, 0);
    et_assert_same_tokens(&ref, &a, 1, "tier, cold");

    run_one(tier, NULL, &b, &ks); /* a new process' pool is empty: the tier has it */
    ck_assert_int_eq(b.usage.cached_tokens, full);
    ck_assert_int_eq(b.tier_cached, full); /* the event says where they came from */
    ck_assert_int_eq(a.tier_cached, 0);
    ck_assert_int_eq(ks.tier_hit_tokens, full);
    ck_assert_int_eq(ks.tier_bad_blocks, 0);
    et_assert_same_tokens(&ref, &b, 1, "tier, restarted");

    run_one(tier, "tenant-x", &c, &ks); /* another salt meets none of it */
    ck_assert_int_eq(c.usage.cached_tokens, 0);
    ck_assert_int_eq(ks.tier_hit_tokens, 0);
    et_assert_same_tokens(&ref, &c, 1, "tier, another salt");
    run_one(tier, "tenant-x", &d, &ks); /* ... but its own, after a restart */
    ck_assert_int_eq(d.usage.cached_tokens, full);
    et_assert_same_tokens(&ref, &d, 1, "tier, the salt's own blocks");

    corrupt_all();
    run_one(tier, NULL, &e, &ks); /* every file fails its checksum: recomputed */
    ck_assert_int_eq(e.usage.cached_tokens, 0);
    ck_assert_int_gt(ks.tier_bad_blocks, 0);
    et_assert_same_tokens(&ref, &e, 1, "tier, corrupted");
}
END_TEST

/* A request queued behind another (max_num_seqs 1) whose prefix is on the
 * tier: its blocks are asked for while it waits and its admit takes them
 * from memory (every block: admit waits for the ones the I/O thread has
 * not read yet, so the count does not depend on timing); with
 * tier_prefetch = 0 they are read at admit. The same tokens either way. */
START_TEST(engine_prefetch_while_queued)
{
    char dirset[600];
    snprintf(dirset, sizeof dirset, "kvcache.prefix.tier_dir=%s", g_dir);
    const char *tier[] = {"engine.kvcache=prefix", BATCH_INVARIANT, dirset, NULL};
    const char *queued[] = {"engine.kvcache=prefix", BATCH_INVARIANT, dirset, "engine.scheduler=continuous",
                            "scheduler.continuous.max_num_seqs=1", NULL};
    const char *no_pf[] = {"engine.kvcache=prefix", BATCH_INVARIANT, dirset, "engine.scheduler=continuous",
                           "scheduler.continuous.max_num_seqs=1", "kvcache.prefix.tier_prefetch=0",
                           NULL};
    et_result ref, a, b;
    pagoda_kv_stats ks;
    run_one(tier, NULL, &ref, &ks); /* the prompt's blocks go to the tier */
    int32_t full = (ref.usage.prompt_tokens - 1) / 16 * 16;
    for (int pass = 0; pass < 2; pass++) {
        pagoda_config *cfg;
        pagoda_runtime *rt = et_open_stopped(&cfg, pass == 0 ? queued : no_pf);
        et_result_init(&a);
        et_result_init(&b);
        /* another first block, so nothing of it is the prompt's */
        et_submit(rt, "The cat sat on the mat and looked at the dog for a long time.", 16, &a, 0.0f);
        pagoda_request req = et_request(rt, PROMPT, 12, 0.0f);
        uint64_t id;
        char err[512] = "";
        ck_assert_msg(pagoda_engine_submit(rt->engine, &req, et_cb, &b, &id, err, sizeof err) == 0,
                      "%s", err);
        ck_assert_int_eq(pagoda_engine_start(rt->engine), 0); /* both arrive in its first step */
        pagoda_engine_wait_idle(rt->engine);
        ck_assert_int_eq(a.n_final, 1);
        ck_assert_int_eq(b.n_final, 1);
        ck_assert_msg(!b.error[0], "%s", b.error);
        memset(&ks, 0, sizeof ks);
        ck_assert_int_eq(pagoda_engine_kv_stats(rt->engine, &ks), 0);
        ck_assert_int_eq(b.usage.cached_tokens, full);
        ck_assert_int_eq(b.tier_cached, full);
        if (pass == 0) {
            ck_assert_int_eq(ks.tier_prefetched_blocks, full / 16);
            ck_assert_int_eq(ks.tier_prefetch_hit_blocks, full / 16);
        } else {
            ck_assert_int_eq(ks.tier_prefetched_blocks, 0);
            ck_assert_int_eq(ks.tier_prefetch_hit_blocks, 0);
        }
        et_assert_same_tokens(&ref, &b, 1, pass == 0 ? "read ahead" : "read at admit");
        et_close(rt, cfg);
    }
}
END_TEST

static void submit_wait(pagoda_runtime *rt, const char *salt, et_result *r)
{
    et_result_init(r);
    pagoda_request req = et_request(rt, PROMPT, 12, 0.0f);
    req.cache_salt = salt;
    uint64_t id;
    char err[512] = "";
    ck_assert_msg(pagoda_engine_submit(rt->engine, &req, et_cb, r, &id, err, sizeof err) == 0, "%s", err);
    pagoda_engine_wait_idle(rt->engine);
    ck_assert_int_eq(r->n_final, 1);
    ck_assert_msg(!r->error[0], "%s", r->error);
}

/* The host-RAM level, on the CPU backend: a no-op (the pool is host RAM
 * already); forced, with no tier_dir, a prompt whose blocks were
 * evicted from a pool that holds one request comes back from it. */
START_TEST(engine_ram_level_forced)
{
    const char *plain[] = {"engine.kvcache=paged", BATCH_INVARIANT, NULL};
    const char *dflt[] = {"engine.kvcache=prefix", BATCH_INVARIANT, "kvcache.prefix.tier_ram=64M", NULL};
    et_result ref, a, b, c;
    pagoda_kv_stats ks;
    run_one(plain, NULL, &ref, &ks);
    run_one(dflt, NULL, &a, &ks);
    ck_assert(!ks.tier_on); /* tier_ram is a no-op where the pool is host RAM */
    int32_t n_prompt = ref.usage.prompt_tokens, full = (n_prompt - 1) / 16 * 16;
    char pool[64];
    snprintf(pool, sizeof pool, "engine.kv_cache_tokens=%d", (n_prompt + 12 + 15) / 16 * 16);
    const char *forced[] = {"engine.kvcache=prefix", BATCH_INVARIANT, "kvcache.prefix.tier_ram=64M",
                            "kvcache.prefix.tier_ram_force=true", pool, NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open(&cfg, forced);
    submit_wait(rt, NULL, &a);
    submit_wait(rt, "evicts-the-first", &b); /* another chain fills the pool */
    submit_wait(rt, NULL, &c);
    memset(&ks, 0, sizeof ks);
    ck_assert_int_eq(pagoda_engine_kv_stats(rt->engine, &ks), 0);
    ck_assert(ks.tier_on);
    ck_assert_int_ge(ks.evicted_blocks, full / 16 - 1);
    ck_assert_int_eq(c.usage.cached_tokens, full);
    /* the pool may still hold the chain's head (eviction cuts chains from
     * the tail): the rest came from the RAM level */
    ck_assert_int_ge(c.tier_cached, full - 16);
    ck_assert_int_gt(c.tier_cached, 0);
    ck_assert_int_eq(ks.tier_ram_hit_blocks * 16, c.tier_cached);
    ck_assert_int_eq(ks.tier_written_blocks, 0); /* no disk */
    ck_assert_int_gt(ks.tier_ram_blocks, 0);
    et_assert_same_tokens(&ref, &a, 1, "RAM level, cold");
    et_assert_same_tokens(&ref, &b, 1, "RAM level, another salt");
    et_assert_same_tokens(&ref, &c, 1, "RAM level, read back");
    et_close(rt, cfg);
}
END_TEST

/* A thread that damages the store's files while requests read it: flips a
 * byte, truncates or deletes, file after file, until told to stop. */
typedef struct damager {
    pthread_t th;
    volatile int stop;
    int rounds;
} damager;

static void *damage_loop(void *arg)
{
    damager *d = arg;
    unsigned seed = 12345;
    while (!__atomic_load_n(&d->stop, __ATOMIC_ACQUIRE)) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "ls %s/*/*.kvb 2>/dev/null", g_dir);
        FILE *ls = popen(cmd, "r");
        if (!ls) break;
        char path[1400];
        while (fgets(path, sizeof path, ls)) {
            path[strcspn(path, "\n")] = 0;
            int how = (int)(rand_r(&seed) % 4);
            if (how == 3) continue; /* leave some alone */
            int fd = open(path, O_RDWR);
            if (fd < 0) continue;
            struct stat sb;
            if (fstat(fd, &sb) == 0 && sb.st_size > 64) {
                if (how == 0) {
                    uint8_t c = 0x5a;
                    (void)!pwrite(fd, &c, 1, (off_t)(rand_r(&seed) % (unsigned)sb.st_size));
                } else if (how == 1) {
                    (void)!ftruncate(fd, sb.st_size / 3);
                } else {
                    (void)unlink(path);
                }
            }
            close(fd);
        }
        pclose(ls);
        d->rounds++;
    }
    return NULL;
}

/* Files flipped, truncated and deleted while six requests read the tier:
 * every output is the plain pool's, nothing crashes. */
START_TEST(engine_faults_under_load)
{
    char dirset[600];
    snprintf(dirset, sizeof dirset, "kvcache.prefix.tier_dir=%s", g_dir);
    const char *plain[] = {"engine.kvcache=paged", BATCH_INVARIANT, NULL};
    const char *tier[] = {"engine.kvcache=prefix", BATCH_INVARIANT, dirset, NULL};
    enum { NR = 6 };
    static et_result ref[NR], got[NR];
    char prompts[NR][1200];
    for (int i = 0; i < NR; i++)
        snprintf(prompts[i], sizeof prompts[i], "%s Then story number %d began.", PROMPT, i);
    for (int pass = 0; pass < 3; pass++) {
        pagoda_config *cfg;
        pagoda_runtime *rt = et_open(&cfg, pass == 0 ? plain : tier);
        damager d = {0};
        if (pass == 2) ck_assert_int_eq(pthread_create(&d.th, NULL, damage_loop, &d), 0);
        et_result *r = pass == 0 ? ref : got;
        for (int i = 0; i < NR; i++) {
            et_result_init(&r[i]);
            et_submit(rt, prompts[i], 12, &r[i], 0.0f);
        }
        pagoda_engine_wait_idle(rt->engine);
        if (pass == 2) {
            __atomic_store_n(&d.stop, 1, __ATOMIC_RELEASE);
            pthread_join(d.th, NULL);
        }
        for (int i = 0; i < NR; i++) {
            ck_assert_int_eq(r[i].n_final, 1);
            ck_assert_msg(!r[i].error[0], "%s", r[i].error);
        }
        if (pass > 0) et_assert_same_tokens(ref, got, NR, pass == 1 ? "tier, cold" : "tier, damaged");
        et_close(rt, cfg);
    }
}
END_TEST

/* A tier_dir that cannot be used: the server runs without the tier, or
 * refuses to start when tier_required says so. */
START_TEST(engine_bad_dir)
{
    const char *soft[] = {"engine.kvcache=prefix", "kvcache.prefix.tier_dir=/proc/self/status/x", NULL};
    et_result r;
    pagoda_kv_stats ks;
    run_one(soft, NULL, &r, &ks);
    ck_assert(!ks.tier_on);

    pagoda_config *cfg = pagoda_config_new_empty();
    char err[1024] = "";
    const char *set[] = {"engine.log_level=warn", "engine.kvcache=prefix",
                         "kvcache.prefix.tier_dir=/proc/self/status/x",
                         "kvcache.prefix.tier_required=true", NULL};
    char model[600];
    snprintf(model, sizeof model, "engine.model=%s", tu_src("models/stories260K.gguf"));
    ck_assert_int_eq(pagoda_config_set(cfg, model, err, sizeof err), 0);
    for (int i = 0; set[i]; i++) ck_assert_int_eq(pagoda_config_set(cfg, set[i], err, sizeof err), 0);
    pagoda_runtime *rt = NULL;
    ck_assert_int_ne(pagoda_runtime_open(cfg, false, false, &rt, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "tier_required") && strstr(err, "/proc/self/status/x"), "%s", err);
    pagoda_config_free(cfg);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("kv_tier");
    TCase *tc = tcase_create("store");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, roundtrip_and_reopen);
    tcase_add_test(tc, faults_are_misses);
    tcase_add_test(tc, bound_is_lru);
    tcase_add_test(tc, one_process_a_directory);
    tcase_add_test(tc, prefetch_reads_ahead);
    tcase_add_test(tc, ram_level);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("engine");
    tcase_add_checked_fixture(te, setup, teardown);
    tcase_set_timeout(te, 120);
    tcase_add_test(te, engine_restart_same_tokens);
    tcase_add_test(te, engine_bad_dir);
    tcase_add_test(te, engine_prefetch_while_queued);
    tcase_add_test(te, engine_ram_level_forced);
    tcase_add_test(te, engine_faults_under_load);
    suite_add_tcase(s, te);
    return s;
}

int main(void) { return tu_run(suite()); }
