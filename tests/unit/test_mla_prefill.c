/* test_mla_prefill.c: MLA's decompressed prefill (forward_mla.c) gives the
 * absorbed form's logits. On the tiny transformers-made deepseek2 fixtures
 * (tests/fixtures/mla/: V2-Lite-style, V3-style, V3 with YaRN and its
 * mscale^2 softmax scale), with the threshold at 8 tokens and an F32 KV
 * cache:
 *  - same_logits: each prompt (15, 36, 40 tokens) in one prefill, with it
 *    on and off: every position's whole vocabulary within 1e-4 of the
 *    largest |logit|; then 8 greedy decode steps over the cache that the
 *    decompressed prefill wrote (latents, as always): the same logits
 *    within that and the same token wherever off's top-2 gap is clear.
 *    The counter of decompressed tokens says the path ran (on) and did not
 *    (off).
 *  - what_stays_absorbed: a chunk below the threshold stays absorbed, and
 *    so does a later chunk whose context (prefix + chunk) is longer than
 *    the scratch (a pass of 32 rows a step: scratch of 32 tokens), while
 *    with the cap at 64 the same chunk decompresses; a mixed batch (a
 *    decode, a from-scratch chunk, a short one, a later chunk)
 *    decompresses only the long chunks and matches off row for row; on a
 *    backend whose weight types lack the KV type (get_rows could not read
 *    the pool) only from-scratch chunks decompress. A chunk whose context
 *    is exactly the scratch (16..32 on the 32-row pass) decompresses.
 *  - kv_get_rows_refused: a backend (the CPU one's ops wrapped) whose
 *    get_rows refuses a KV pool as its table: the set-up's probe of one
 *    row is refused, the pass still runs and matches the absorbed one,
 *    the chunk from 0 decompresses and the chunk after it stays absorbed
 *    (get_rows never sees the pool again).
 *  - later_chunks: a chunk after cached positions reads their latents
 *    back from the KV pool and decompresses: a prefix-cache hit (request
 *    A's first block shared by request B, whose 24 new tokens run next)
 *    and a chunked prefill (9, 8, 23 tokens: the second chunk's prefix is
 *    longer than it, read back in two pieces), on every fixture with an
 *    F32 cache within 1e-4 of the largest |logit|, and with F16 and Q8_0
 *    caches within 0.05 / 0.5 and the same top token wherever off's gap
 *    is clear; the counters say how many chunk and prefix tokens ran it.
 *  - engine_chunks: through the engine (prefix KV policy, 16 tokens a
 *    step, so a 36-token prompt prefills in chunks of 16, 16, 4), a
 *    prompt and then the same prompt again (a prefix hit on its 32
 *    cached tokens) give the same greedy tokens with decompression on and
 *    off, and on's counters say later chunks read their prefix back.
 *  - rounded_caches: with an F16 or a Q8_0 cache the scratch takes that
 *    type, so the two forms round at different places (K and V per head
 *    against the latents): on and off within 0.05 / 0.5 (test_mla_ref's
 *    bounds for those caches' own rounding), the same top token wherever
 *    off's top-2 gap exceeds twice that, and the scratch in the cache's
 *    type.
 *  - plan_counts_it: the memory plan's transposed copy and scratch equal
 *    what the forward pass allocated, are in the fixed total and printed
 *    when on, absent when off (threshold 0, or above max_batched_tokens),
 *    and V2-Lite's shape in F16 holds 54 MiB of copies.
 *  - config_knob: engine.mla_decompress_min's default and its bad values. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "config.h"
#include "engine_internal.h" /* the engine's forward pass: its decompression counters */
#include "engine_testutil.h"
#include "forward.h"
#include "genmodel.h"
#include "memplan.h"
#include "mla_fixtures.h"
#include "model.h"
#include "ref_logits.h"
#include "testutil.h"

#define REL_TOL 1e-4
#define MIN_TOK 8

enum { BS = 16, NB = 16, CAP = NB * BS / 2 };

static int32_t prompt_ids(const mla_fixture *fx, size_t p, int32_t *tok)
{
    return mla_prompt_ids(mla_prompt(fx, p), CAP, tok);
}

/* A forward pass over NB blocks of BS in kv_dtype; decompressing from
 * MIN_TOK tokens or not. */
static void init_fw(pagoda_forward *fw, mla_fixture *fx, bool on, int32_t kv_dtype)
{
    char err[1024] = "";
    ck_assert_msg(pagoda_forward_init(fw, fx->rt->model, &fx->rt->backend, CAP, CAP, NB, BS,
                                      kv_dtype, err, sizeof err) == 0, "%s", err);
    if (on) {
        ck_assert_msg(pagoda_forward_mla_decompress(fw, MIN_TOK, 0, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(fw->mla.scratch_tokens, CAP);   /* max_ctx 0: the step's rows */
        ck_assert_int_eq(fw->mla.decompress_min, MIN_TOK);
        ck_assert_uint_gt(fw->mla.kbt_bytes, 0);
    }
}

/* One sequence's rows in a batch: its tokens tok[at, at + n), the blocks
 * table[] (slots follow the table). */
typedef struct seq_part {
    const int32_t *tok;
    int32_t at, n;
    const int32_t *table;
} seq_part;

/* Run the parts as one batch; the logits of every row into logits. */
static void run(pagoda_forward *fw, const seq_part *parts, int32_t n_parts, float *logits)
{
    int32_t tok[CAP], pos[CAP], slots[CAP], rows[CAP];
    pagoda_seq_view sv[4];
    int32_t T = 0;
    for (int32_t s = 0; s < n_parts; s++) {
        const seq_part *p = &parts[s];
        sv[s] = (pagoda_seq_view){.q_start = T, .n_q = p->n, .ctx_len = p->at + p->n,
                                  .n_blocks = (p->at + p->n + BS - 1) / BS, .block_table = p->table};
        for (int32_t i = 0; i < p->n; i++, T++) {
            int32_t j = p->at + i;
            tok[T] = p->tok[j];
            pos[T] = j;
            slots[T] = p->table[j / BS] * BS + j % BS;
            rows[T] = T;
        }
    }
    static uint64_t seq_no = 1;
    pagoda_batch b = {.seq_no = seq_no++, .n_tokens = T, .tokens = tok, .positions = pos,
                      .slots = slots, .n_seqs = n_parts, .seqs = sv};
    char err[1024] = "";
    ck_assert_msg(pagoda_forward_run(fw, &b, rows, T, logits, err, sizeof err) == 0, "%s", err);
}

/* max |a - b| over n values, and max |a| */
static double max_diff(const float *a, const float *b, size_t n, double *amax)
{
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        *amax = fmax(*amax, fabs((double)a[i]));
    }
    return d;
}

static double top2_gap(const float *x, int32_t n)
{
    int32_t t = ref_argmax(x, n);
    float second = -INFINITY;
    for (int32_t v = 0; v < n; v++)
        if (v != t && x[v] > second) second = x[v];
    return (double)x[t] - second;
}

static const int32_t g_table[NB / 2] = {5, 2, 7, 0, 3, 6, 1, 4};   /* scrambled blocks */

static void check_same(const char *name)
{
    mla_fixture fx;
    mla_fixture_open(&fx, name);
    const int32_t V = fx.V;
    float *a = malloc(sizeof(float) * CAP * (size_t)V), *b = malloc(sizeof(float) * CAP * (size_t)V);
    for (size_t p = 0; p < 3; p++) {
        int32_t tok[CAP];
        int32_t n = prompt_ids(&fx, p, tok);
        ck_assert_int_ge(n, MIN_TOK);
        pagoda_forward off, on;
        init_fw(&off, &fx, false, PAGODA_DTYPE_F32);
        init_fw(&on, &fx, true, PAGODA_DTYPE_F32);
        seq_part whole = {.tok = tok, .at = 0, .n = n, .table = g_table};
        run(&off, &whole, 1, a);
        run(&on, &whole, 1, b);
        ck_assert_int_eq(off.mla.decompressed_tokens, 0);
        ck_assert_int_eq(on.mla.decompressed_tokens, n);
        double amax = 0, d = max_diff(a, b, (size_t)n * V, &amax);
        printf("%s prompt %zu (%d tokens): prefill decompressed vs absorbed max |diff| %.3g, "
               "max |logit| %.3g (allowed %.3g)\n", name, p, n, d, amax, REL_TOL * amax);
        ck_assert_msg(d <= REL_TOL * amax, "%s prompt %zu: prefill differs by %g (max |logit| %g)",
                      name, p, d, amax);
        /* greedy decode over each cache: off's token fed to both */
        int32_t clear = 0, same = 0;
        double worst = 0;
        float *la = a + (size_t)(n - 1) * V, *lb = b + (size_t)(n - 1) * V;
        for (int32_t g = 0; g < 8 && n + g < CAP; g++) {
            double gap = top2_gap(la, V);
            int32_t t = ref_argmax(la, V);
            if (gap > 2 * REL_TOL * amax) {
                clear++;
                same += ref_argmax(lb, V) == t;
            }
            tok[n + g] = t;
            seq_part one = {.tok = tok, .at = n + g, .n = 1, .table = g_table};
            run(&off, &one, 1, a);
            run(&on, &one, 1, b);
            la = a;
            lb = b;
            double m = 0;
            worst = fmax(worst, max_diff(a, b, (size_t)V, &m));
        }
        printf("%s prompt %zu: 8 decode steps max |diff| %.3g; same token at %d of %d clear steps\n",
               name, p, worst, same, clear);
        ck_assert_msg(worst <= REL_TOL * amax, "%s prompt %zu: decode differs by %g", name, p, worst);
        ck_assert_int_eq(same, clear);
        ck_assert_int_gt(clear, 0);
        /* decode itself never decompresses */
        ck_assert_int_eq(on.mla.decompressed_tokens, n);
        pagoda_forward_free(&off);
        pagoda_forward_free(&on);
    }
    free(a);
    free(b);
    mla_fixture_close(&fx);
}

START_TEST(same_logits)
{
    mla_each_fixture(check_same);
}
END_TEST

/* Parts run on both passes, compared row for row; returns the tokens the
 * on pass decompressed. */
static int64_t both(pagoda_forward *off, pagoda_forward *on, const seq_part *parts, int32_t n_parts,
                    float *a, float *b, int32_t V, const char *what)
{
    int32_t T = 0;
    for (int32_t s = 0; s < n_parts; s++) T += parts[s].n;
    int64_t before = on->mla.decompressed_tokens;
    run(off, parts, n_parts, a);
    run(on, parts, n_parts, b);
    double amax = 0, d = max_diff(a, b, (size_t)T * V, &amax);
    printf("%s: max |diff| %.3g, max |logit| %.3g\n", what, d, amax);
    ck_assert_msg(d <= REL_TOL * amax, "%s: differs by %g (max |logit| %g)", what, d, amax);
    ck_assert_int_eq(off->mla.decompressed_tokens, 0);
    return on->mla.decompressed_tokens - before;
}

START_TEST(what_stays_absorbed)
{
    mla_fixture fx;
    mla_fixture_open(&fx, "deepseek3-yarn");
    const int32_t V = fx.V;
    float *a = malloc(sizeof(float) * CAP * (size_t)V), *b = malloc(sizeof(float) * CAP * (size_t)V);
    int32_t tok[CAP];
    int32_t n = prompt_ids(&fx, 2, tok);   /* 40 tokens */
    static const int32_t t1[3] = {8, 9, 10}, t2[3] = {11, 12, 13}, t3[3] = {14, 15, 10};
    pagoda_forward off, on;
    init_fw(&off, &fx, false, PAGODA_DTYPE_F32);
    init_fw(&on, &fx, true, PAGODA_DTYPE_F32);
    /* below the threshold: absorbed */
    seq_part shortp = {.tok = tok, .at = 0, .n = MIN_TOK - 1, .table = g_table};
    ck_assert_int_eq(both(&off, &on, &shortp, 1, a, b, V, "7-token prompt"), 0);
    /* chunked prefill: the first chunk from scratch decompresses, and so
     * does the second (it starts at 10 and reads the first's latents back) */
    seq_part c1 = {.tok = tok, .at = 0, .n = 10, .table = t1};
    seq_part c2 = {.tok = tok, .at = 10, .n = n - 10, .table = t1};
    ck_assert_int_eq(both(&off, &on, &c1, 1, a, b, V, "chunk 0..10"), 10);
    ck_assert_int_eq(on.mla.prefix_tokens_read, 0);
    ck_assert_int_eq(both(&off, &on, &c2, 1, a, b, V, "chunk 10..40 (after the first)"), n - 10);
    ck_assert_int_eq(on.mla.prefix_tokens_read, 10);
    /* a pass of 32 rows a step: its scratch holds 32 tokens of context, so
     * a chunk at 16..40 stays absorbed; with the cap at 64 it decompresses */
    static const int32_t t4[3] = {12, 13, 14};
    for (int cap = 0; cap < 2; cap++) {
        pagoda_forward small;
        char err[1024] = "";
        ck_assert_msg(pagoda_forward_init(&small, fx.rt->model, &fx.rt->backend, 32, 32, NB, BS,
                                          PAGODA_DTYPE_F32, err, sizeof err) == 0, "%s", err);
        ck_assert_msg(pagoda_forward_mla_decompress(&small, MIN_TOK, cap ? 64 : 0, err, sizeof err) == 0,
                      "%s", err);
        ck_assert_int_eq(small.mla.scratch_tokens, cap ? 64 : 32);
        seq_part s1 = {.tok = tok, .at = 0, .n = 16, .table = t4};
        seq_part s16 = {.tok = tok, .at = 16, .n = 16, .table = t4};
        seq_part s2 = {.tok = tok, .at = 16, .n = n - 16, .table = t4};
        ck_assert_int_eq(both(&off, &small, &s1, 1, a, b, V, "small pass: chunk 0..16"), 16);
        /* a context of exactly the scratch (32) still fits it */
        ck_assert_int_eq(both(&off, &small, &s16, 1, a, b, V, "small pass: chunk 16..32"), 16);
        ck_assert_int_eq(small.mla.prefix_tokens_read, 16);
        /* 16..40 again over the same slots (a redo writes the same latents) */
        ck_assert_int_eq(both(&off, &small, &s2, 1, a, b, V,
                              cap ? "cap 64: chunk 16..40" : "scratch 32: chunk 16..40"), cap ? n - 16 : 0);
        ck_assert_int_eq(small.mla.prefix_tokens_read, cap ? 32 : 16);
        pagoda_forward_free(&small);
    }
    /* one batch: sequence 1 decodes a token after its 40, sequence 2's
     * prompt runs from scratch (decompressed), sequence 3's 5-token prompt
     * is below the threshold; then the same the other way round (the
     * decompressed chunk first, two absorbed runs after it) */
    seq_part mixed[3] = {{.tok = tok, .at = n - 1, .n = 1, .table = t1},
                         {.tok = tok + 3, .at = 0, .n = 20, .table = t2},
                         {.tok = tok + 7, .at = 0, .n = 5, .table = t3}};
    /* sequence 1's last token is rerun: give it the slot it had (a redo of
     * position n - 1 writes the same latent) */
    ck_assert_int_eq(both(&off, &on, mixed, 3, a, b, V, "mixed batch (decode, 20 new, 5 new)"), 20);
    seq_part mixed2[3] = {{.tok = tok + 1, .at = 0, .n = 12, .table = t2},
                          {.tok = tok, .at = n - 1, .n = 1, .table = t1},
                          {.tok = tok + 2, .at = 0, .n = 3, .table = t3}};
    ck_assert_int_eq(both(&off, &on, mixed2, 3, a, b, V, "mixed batch (12 new, decode, 3 new)"), 12);
    /* a later chunk among them: sequence 2 (its 12 from mixed2 cached)
     * runs 12..32 after sequence 1's decode, then a 3-token prompt */
    int64_t read = on.mla.prefix_tokens_read;
    seq_part mixed3[3] = {{.tok = tok, .at = n - 1, .n = 1, .table = t1},
                          {.tok = tok + 1, .at = 12, .n = 20, .table = t2},
                          {.tok = tok + 2, .at = 0, .n = 3, .table = t3}};
    ck_assert_int_eq(both(&off, &on, mixed3, 3, a, b, V, "mixed batch (decode, 12 cached + 20, 3 new)"),
                     20);
    ck_assert_int_eq(on.mla.prefix_tokens_read - read, 12);
    /* a backend whose get_rows cannot read the KV type (F16 not in its
     * weight types): from-scratch chunks still decompress, later ones not */
    {
        uint64_t types = fx.rt->backend.info.weight_types;
        fx.rt->backend.info.weight_types &= ~(1ull << PAGODA_DTYPE_F16);
        pagoda_forward f16;
        init_fw(&f16, &fx, true, PAGODA_DTYPE_F16);
        fx.rt->backend.info.weight_types = types;
        ck_assert(!f16.mla.read_prefix);
        ck_assert(on.mla.read_prefix);
        static const int32_t t5[3] = {9, 10, 11};
        seq_part f1 = {.tok = tok, .at = 0, .n = 16, .table = t5};
        seq_part f2 = {.tok = tok, .at = 16, .n = n - 16, .table = t5};
        run(&f16, &f1, 1, b);
        ck_assert_int_eq(f16.mla.decompressed_tokens, 16);
        run(&f16, &f2, 1, b);
        ck_assert_int_eq(f16.mla.decompressed_tokens, 16);
        ck_assert_int_eq(f16.mla.prefix_tokens_read, 0);
        pagoda_forward_free(&f16);
    }
    pagoda_forward_free(&off);
    pagoda_forward_free(&on);
    free(a);
    free(b);
    mla_fixture_close(&fx);
}
END_TEST

/* A backend whose get_rows refuses a KV pool as its table (an
 * out-of-tree one may): the CPU backend's ops, buffer_alloc noting the KV
 * buffers and get_rows refusing those. */
static pagoda_backend_ops g_cpu_ops;
static const pagoda_buffer *g_kv_bufs[4];
static int g_n_kv_bufs, g_kv_refused;

static int alloc_noting_kv(void *ctx, int purpose, size_t size, pagoda_buffer **out)
{
    int st = g_cpu_ops.buffer_alloc(ctx, purpose, size, out);
    if (!st && purpose == PAGODA_BUF_KV) {
        ck_assert_int_lt(g_n_kv_bufs, 4);
        g_kv_bufs[g_n_kv_bufs++] = *out;
    }
    return st;
}

static int get_rows_refusing_kv(void *ctx, const pagoda_tensor *table, const int32_t *ids, int32_t n,
                                const pagoda_tensor *out)
{
    for (int i = 0; i < g_n_kv_bufs; i++)
        if (table->buf == g_kv_bufs[i]) {
            g_kv_refused++;
            return PAGODA_ERR_UNSUPPORTED;
        }
    return g_cpu_ops.get_rows(ctx, table, ids, n, out);
}

START_TEST(kv_get_rows_refused)
{
    mla_fixture fx;
    mla_fixture_open(&fx, "deepseek3-yarn");
    const int32_t V = fx.V;
    float *a = malloc(sizeof(float) * CAP * (size_t)V), *b = malloc(sizeof(float) * CAP * (size_t)V);
    int32_t tok[CAP];
    int32_t n = prompt_ids(&fx, 2, tok);   /* 40 tokens */
    pagoda_forward off, fw;
    init_fw(&off, &fx, false, PAGODA_DTYPE_F32);
    pagoda_backend be = fx.rt->backend;
    g_cpu_ops = be.ops;
    g_n_kv_bufs = g_kv_refused = 0;
    be.ops.buffer_alloc = alloc_noting_kv;
    be.ops.get_rows = get_rows_refusing_kv;
    char err[1024] = "";
    ck_assert_msg(pagoda_forward_init(&fw, fx.rt->model, &be, CAP, CAP, NB, BS, PAGODA_DTYPE_F32, err,
                                      sizeof err) == 0, "%s", err);
    ck_assert_int_eq(g_n_kv_bufs, 1);
    /* on (F32 is a weight type), but the probe of one pool row was refused */
    ck_assert_msg(pagoda_forward_mla_decompress(&fw, MIN_TOK, 0, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(fw.mla.decompress_min, MIN_TOK);
    ck_assert_int_eq(g_kv_refused, 1);
    ck_assert(!fw.mla.read_prefix);
    ck_assert_msg(strstr(fw.mla.no_prefix_why, "refused a row of the KV pool"), "%s", fw.mla.no_prefix_why);
    /* the steps run and match the absorbed pass: the chunk from 0
     * decompresses, the one after it stays absorbed, a decode too, and
     * get_rows never sees the pool again */
    static const int32_t t[3] = {4, 1, 6};
    seq_part c1 = {.tok = tok, .at = 0, .n = 16, .table = t};
    seq_part c2 = {.tok = tok, .at = 16, .n = n - 16 - 1, .table = t};
    seq_part d1 = {.tok = tok, .at = n - 1, .n = 1, .table = t};
    ck_assert_int_eq(both(&off, &fw, &c1, 1, a, b, V, "refusing get_rows: chunk 0..16"), 16);
    ck_assert_int_eq(both(&off, &fw, &c2, 1, a, b, V, "refusing get_rows: chunk 16..39"), 0);
    ck_assert_int_eq(both(&off, &fw, &d1, 1, a, b, V, "refusing get_rows: decode at 39"), 0);
    ck_assert_int_eq(fw.mla.prefix_tokens_read, 0);
    ck_assert_int_eq(g_kv_refused, 1);
    pagoda_forward_free(&fw);
    pagoda_forward_free(&off);
    free(a);
    free(b);
    mla_fixture_close(&fx);
}
END_TEST

/* The parts of a case: each batch of one sequence's chunk. */
typedef struct chunk_case {
    const char *what;
    seq_part part;
    int32_t prefix;   /* cached positions before it (read back) */
} chunk_case;

/* Compare n rows of V logits, off's (a) against on's (b): within
 * rel * max|logit| (rel > 0), else within abs_tol and the same top token
 * where off's top-2 gap exceeds 2 abs_tol. Prints one line naming what;
 * returns how many positions were clear (0 where rel > 0). */
static int32_t compare_chunk(const float *a, const float *b, int32_t n, int32_t V, double rel,
                             double abs_tol, const char *what)
{
    double amax = 0, d = max_diff(a, b, (size_t)n * V, &amax);
    double allowed = rel > 0 ? rel * amax : abs_tol;
    int32_t clear = 0, same = 0;
    for (int32_t r = 0; r < n && rel == 0; r++) {
        const float *x = a + (size_t)r * V, *y = b + (size_t)r * V;
        if (top2_gap(x, V) > 2 * abs_tol) {
            clear++;
            same += ref_argmax(x, V) == ref_argmax(y, V);
        }
    }
    printf("%s: decompressed vs absorbed max |diff| %.3g, max |logit| %.3g (allowed %.3g)",
           what, d, amax, allowed);
    if (rel == 0) printf("; top token the same at %d of %d clear positions", same, clear);
    printf("\n");
    ck_assert_msg(d <= allowed, "%s: differs by %g (allowed %g)", what, d, allowed);
    ck_assert_int_eq(same, clear);
    return clear;
}

/* Run the cases on off and on in order; compare each chunk's rows
 * (compare_chunk). */
static void run_cases(pagoda_forward *off, pagoda_forward *on, const chunk_case *cc, int n_cases,
                      double rel, double abs_tol, float *a, float *b, int32_t V, const char *name)
{
    for (int i = 0; i < n_cases; i++) {
        const seq_part *p = &cc[i].part;
        int64_t dec = on->mla.decompressed_tokens, read = on->mla.prefix_tokens_read;
        run(off, p, 1, a);
        run(on, p, 1, b);
        ck_assert_int_eq(off->mla.decompressed_tokens, 0);
        ck_assert_int_eq(on->mla.decompressed_tokens - dec, p->n);
        ck_assert_int_eq(on->mla.prefix_tokens_read - read, cc[i].prefix);
        char what[160];
        snprintf(what, sizeof what, "%s %s", name, cc[i].what);
        compare_chunk(a, b, p->n, V, rel, abs_tol, what);
    }
}

/* A prefix hit (A's block 0 shared by B) and a chunked prefill of 9, 8,
 * 23 tokens over the 40-token prompt, in kv_dtype. */
static void later_chunks_in(mla_fixture *fx, const char *name, int32_t kv_dtype, double rel, double abs_tol)
{
    const int32_t V = fx->V;
    float *a = malloc(sizeof(float) * CAP * (size_t)V), *b = malloc(sizeof(float) * CAP * (size_t)V);
    int32_t tok[CAP];
    int32_t n = prompt_ids(fx, 2, tok);
    ck_assert_int_eq(n, 40);
    static const int32_t ta[1] = {5}, tb[3] = {5, 2, 7}, tc[3] = {1, 6, 3};
    pagoda_forward off, on;
    init_fw(&off, fx, false, kv_dtype);
    init_fw(&on, fx, true, kv_dtype);
    const chunk_case cc[] = {
        /* request A: the first block from scratch; request B: the same
         * first 16 tokens (a hit on block 5), its 24 new ones next */
        {"prefix hit: A 0..16", {.tok = tok, .at = 0, .n = 16, .table = ta}, 0},
        {"prefix hit: B 16..40 after A's block", {.tok = tok, .at = 16, .n = 24, .table = tb}, 16},
        /* chunked prefill: 9, then 8 after 9 (two pieces of 8 and 1), then 23 */
        {"chunked 0..9", {.tok = tok, .at = 0, .n = 9, .table = tc}, 0},
        {"chunked 9..17", {.tok = tok, .at = 9, .n = 8, .table = tc}, 9},
        {"chunked 17..40", {.tok = tok, .at = 17, .n = 23, .table = tc}, 17},
    };
    run_cases(&off, &on, cc, 5, rel, abs_tol, a, b, V, name);
    pagoda_forward_free(&off);
    pagoda_forward_free(&on);
    free(a);
    free(b);
}

static void check_later_chunks(const char *name)
{
    mla_fixture fx;
    mla_fixture_open(&fx, name);
    /* every fixture's third prompt has 40 tokens */
    later_chunks_in(&fx, name, PAGODA_DTYPE_F32, REL_TOL, 0);
    if (strcmp(name, "deepseek3-yarn") == 0) {
        later_chunks_in(&fx, "deepseek3-yarn KV F16", PAGODA_DTYPE_F16, 0, 0.05);
        later_chunks_in(&fx, "deepseek3-yarn KV Q8_0", PAGODA_DTYPE_Q8_0, 0, 0.5);
    }
    mla_fixture_close(&fx);
}

START_TEST(later_chunks) { mla_each_fixture(check_later_chunks); }
END_TEST

/* One engine run: prompts[0], then prompts[1] (which starts with it: a
 * prefix hit), greedy. */
static void engine_twice(const char *gg, bool on, const char *const *prompts, et_result *r, int64_t *dec,
                         int64_t *read)
{
    const char *settings[] = {"engine.kv_dtype=f32", "engine.kv_cache_tokens=256", "engine.max_seq_len=128",
                              "engine.kvcache=prefix", "scheduler.continuous.max_batched_tokens=16",
                              "backend.cpu.threads=2", on ? "engine.mla_decompress_min=8" : "engine.mla_decompress_min=0",
                              "engine.mla_decompress_ctx=64", NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open_model(&cfg, gg, settings);
    ck_assert_int_eq(pagoda_engine_start(rt->engine), 0);
    for (int i = 0; i < 2; i++) {
        et_result_init(&r[i]);
        et_submit(rt, prompts[i], 8, &r[i], 0.0f);
        pagoda_engine_wait_idle(rt->engine);
        ck_assert_int_eq(r[i].n_final, 1);
        ck_assert_msg(!r[i].error[0], "%s", r[i].error);
    }
    *dec = rt->engine->fw.mla.decompressed_tokens;
    *read = rt->engine->fw.mla.prefix_tokens_read;
    ck_assert_int_eq(rt->engine->fw.mla.scratch_tokens, on ? 64 : 0);
    /* the plan counted what the engine's pass holds */
    ck_assert_int_eq(rt->plan.mla_scratch_tokens, on ? 64 : 0);
    ck_assert_uint_eq(rt->plan.mla_scratch_bytes, rt->engine->fw.mla.scratch_bytes);
    ck_assert_uint_eq(rt->plan.mla_kbt_bytes, rt->engine->fw.mla.kbt_bytes);
    et_close(rt, cfg);
}

START_TEST(engine_chunks)
{
    const char *gg = tu_src("tests/fixtures/mla/deepseek3-yarn-tiny.f32.gguf");
    const char *prompts[2] = {
        "Once upon a time, there was a little girl who loved to count the boats on the river.",
        "Once upon a time, there was a little girl who loved to count the boats on the river. "
        "Every morning she sat on the old wooden bridge and waved at the fishermen."};
    et_result off[2], on[2];
    int64_t dec_off, read_off, dec_on, read_on;
    engine_twice(gg, false, prompts, off, &dec_off, &read_off);
    engine_twice(gg, true, prompts, on, &dec_on, &read_on);
    int32_t P0 = off[0].usage.prompt_tokens, P1 = off[1].usage.prompt_tokens;
    int32_t hit = on[1].usage.cached_tokens;
    printf("engine: prompts of %d and %d tokens in chunks of 16; the second's %d cached; decompressed %lld "
           "chunk tokens, read back %lld prefix tokens\n", P0, P1, hit, (long long)dec_on,
           (long long)read_on);
    ck_assert_int_gt(P0, 32);   /* three chunks: 16, 16, the rest */
    ck_assert_int_eq(hit, 32);  /* its two full blocks */
    ck_assert_int_ge(P1 - hit, 16 + 8);   /* the hit's new part: a chunk of 16 after 32, then the rest */
    ck_assert_int_eq(off[1].usage.cached_tokens, hit);
    ck_assert_int_eq(dec_off + read_off, 0);
    /* every chunk of at least 8 decompressed (the first prompt's from 0,
     * the second's from its 32 cached, 16 a step), each after position 0
     * reading its prefix back; decode never */
    int64_t want_dec = 0, want_read = 0;
    for (int i = 0; i < 2; i++)
        for (int32_t at = i ? hit : 0, end = i ? P1 : P0; at < end; at += 16) {
            int32_t n = end - at < 16 ? end - at : 16;
            if (n < 8) continue;
            want_dec += n;
            want_read += at;
        }
    ck_assert_int_eq(dec_on, want_dec);
    ck_assert_int_eq(read_on, want_read);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(on[i].n_tokens, 8);
        et_assert_same_tokens(&off[i], &on[i], 1, i ? "second (prefix hit)" : "first (chunked)");
    }
}
END_TEST

START_TEST(rounded_caches)
{
    mla_fixture fx;
    mla_fixture_open(&fx, "deepseek3-yarn");
    const int32_t V = fx.V;
    float *a = malloc(sizeof(float) * CAP * (size_t)V), *b = malloc(sizeof(float) * CAP * (size_t)V);
    int32_t tok[CAP];
    int32_t n = prompt_ids(&fx, 2, tok);
    static const int32_t types[] = {PAGODA_DTYPE_F16, PAGODA_DTYPE_Q8_0};
    static const double tol[] = {0.05, 0.5};
    for (int ti = 0; ti < 2; ti++) {
        pagoda_forward off, on;
        init_fw(&off, &fx, false, types[ti]);
        init_fw(&on, &fx, true, types[ti]);
        int32_t want = types[ti];
        /* Q8_0's blocks of 32 must tile a key head (nope + rope), else F16 */
        if (want == PAGODA_DTYPE_Q8_0 && (fx.rt->model->hp.qk_nope + fx.rt->model->hp.rope_dims) % 32)
            want = PAGODA_DTYPE_F16;
        ck_assert_int_eq(on.mla.scratch_kv.dtype, want);
        seq_part whole = {.tok = tok, .at = 0, .n = n, .table = g_table};
        run(&off, &whole, 1, a);
        run(&on, &whole, 1, b);
        ck_assert_int_eq(on.mla.decompressed_tokens, n);
        char what[96];
        snprintf(what, sizeof what, "KV %s (scratch %s)", pagoda_dtype_name(types[ti]),
                 pagoda_dtype_name(on.mla.scratch_kv.dtype));
        int32_t clear = compare_chunk(a, b, n, V, 0, tol[ti], what);
        ck_assert_int_gt(clear, 0);
        pagoda_forward_free(&off);
        pagoda_forward_free(&on);
    }
    free(a);
    free(b);
    mla_fixture_close(&fx);
}
END_TEST

/* The plan's figures, and its printed lines. */
static char *plan_text(const pagoda_memplan *p)
{
    char *s = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&s, &len);
    ck_assert_ptr_nonnull(m);
    pagoda_memplan_print(p, m);
    fclose(m);
    return s;
}

START_TEST(plan_counts_it)
{
    char err[1024] = "";
    pagoda_memplan_opts o;
    pagoda_memplan_opts_default(&o);
    o.memory_budget = 1ull << 40;
    o.max_batched_tokens = CAP;
    o.kv_dtype = PAGODA_DTYPE_F32;   /* as init_fw's cache: the scratch takes its type */
    pagoda_memplan off, on;
    mla_fixture fx;
    mla_fixture_open(&fx, "deepseek2-lite");
    const gguf_file *f = fx.rt->model->gguf;
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &off, err, sizeof err), 0);
    o.mla_decompress_min = MIN_TOK;
    ck_assert_msg(pagoda_memplan_compute(f, &o, &on, err, sizeof err) == 0, "%s", err);
    pagoda_forward fw;
    init_fw(&fw, &fx, true, PAGODA_DTYPE_F32);
    /* the plan's bytes are what the pass holds */
    ck_assert_uint_eq(on.mla_kbt_bytes, fw.mla.kbt_bytes);
    ck_assert_uint_eq(on.mla_scratch_bytes, fw.mla.scratch_bytes);
    const pagoda_hparams *hp = &fx.rt->model->hp;
    /* F32 source: F32 copies, [nope x kv_lora] a head (each layer 64-byte aligned) */
    uint64_t layer = (uint64_t)hp->n_heads * hp->qk_nope * hp->kv_lora_rank * 4;
    ck_assert_uint_eq(on.mla_kbt_bytes, (uint64_t)hp->n_layers * ((layer + 63) / 64 * 64));
    /* K and V of CAP tokens in F32, one zero row of a key head (64-byte
     * aligned), and CAP F32 staging rows of kv_lora + rope values */
    uint64_t D = (uint64_t)(hp->qk_nope + hp->rope_dims);
    uint64_t stage = (uint64_t)CAP * (uint64_t)(hp->kv_lora_rank + hp->rope_dims) * 4;
    ck_assert_int_eq(on.mla_scratch_tokens, CAP);
    ck_assert_uint_eq(on.mla_scratch_bytes,
                      (2ull * CAP * hp->n_heads * D * 4 + 63) / 64 * 64 + (D * 4 + 63) / 64 * 64 + stage);
    ck_assert_uint_eq(on.fixed_bytes, off.fixed_bytes + on.mla_kbt_bytes + on.mla_scratch_bytes);
    ck_assert_uint_eq(off.mla_kbt_bytes, 0);
    ck_assert_int_eq(on.mla_kbt_dtype, PAGODA_DTYPE_F32);
    char *t_on = plan_text(&on), *t_off = plan_text(&off);
    ck_assert_msg(strstr(t_on, "MLA attn_k_b transposed"), "%s", t_on);
    ck_assert_msg(strstr(t_on, "MLA decompression scratch"), "%s", t_on);
    ck_assert_msg(!strstr(t_off, "MLA attn_k_b"), "%s", t_off);
    free(t_on);
    free(t_off);
    /* a threshold above the step's tokens never fires: nothing made */
    pagoda_forward_free(&fw);
    o.mla_decompress_min = CAP + 1;
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &on, err, sizeof err), 0);
    ck_assert_uint_eq(on.mla_kbt_bytes + on.mla_scratch_bytes, 0);
    ck_assert_uint_eq(on.fixed_bytes, off.fixed_bytes);
    ck_assert_int_eq(pagoda_forward_init(&fw, fx.rt->model, &fx.rt->backend, CAP, CAP, NB, BS,
                                         PAGODA_DTYPE_F32, err, sizeof err), 0);
    ck_assert_int_eq(pagoda_forward_mla_decompress(&fw, CAP + 1, 0, err, sizeof err), 0);
    ck_assert_int_eq(fw.mla.decompress_min, 0);
    ck_assert_uint_eq(fw.mla.kbt_bytes, 0);
    /* a backend that cannot multiply the copies' type: refused, naming the fix, and off */
    uint64_t types = fx.rt->backend.info.weight_types;
    fx.rt->backend.info.weight_types &= ~(1ull << PAGODA_DTYPE_F32);
    ck_assert_int_eq(pagoda_forward_mla_decompress(&fw, MIN_TOK, 0, err, sizeof err),
                     PAGODA_ERR_UNSUPPORTED);
    fx.rt->backend.info.weight_types = types;
    ck_assert_msg(strstr(err, "mla_decompress_min = 0") && strstr(err, "F32"), "%s", err);
    ck_assert_int_eq(fw.mla.decompress_min, 0);
    ck_assert_ptr_null(fw.mla.kbt);
    pagoda_forward_free(&fw);
    mla_fixture_close(&fx);
    /* V2-Lite's shape in F16: 27 layers x 16 heads x 128 x 512 x 2 bytes = 54 MiB */
    char dir[] = "/tmp/pagoda-mlap-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/v2l.gguf", dir);
    char *gen[] = {"gen-model", "--shape", "deepseek-v2-lite", "--type", "F16", "--out", path,
                   "--header-only", NULL};
    ck_assert_int_eq(pagoda_cmd_gen_model(8, gen), 0);
    gguf_file *g = pagoda_gguf_open(path, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    o.max_batched_tokens = 512;
    o.mla_decompress_min = 320;
    o.kv_dtype = PAGODA_DTYPE_F16;
    ck_assert_msg(pagoda_memplan_compute(g, &o, &on, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(on.mla_kbt_bytes, 27ull * 16 * 128 * 512 * 2);
    ck_assert_uint_eq(on.mla_kbt_bytes, 54ull << 20);
    ck_assert_int_eq(on.mla_kbt_dtype, PAGODA_DTYPE_F16);
    /* ctx 0: the scratch holds the step's 512 tokens; K and V, the zero row, 512 staging rows of 576 */
    ck_assert_int_eq(on.mla_scratch_tokens, 512);
    ck_assert_uint_eq(on.mla_scratch_bytes, 2ull * 512 * 16 * 192 * 2 + 192 * 4 + 512ull * 576 * 4);
    printf("deepseek-v2-lite F16: transposed attn_k_b %.1f MiB, scratch %.1f MiB at 512 tokens\n",
           (double)on.mla_kbt_bytes / 1048576.0, (double)on.mla_scratch_bytes / 1048576.0);
    /* the default cap (4096 tokens of context), and one above max_seq_len (capped by it) */
    o.mla_decompress_ctx = 4096;
    ck_assert_msg(pagoda_memplan_compute(g, &o, &on, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(on.mla_scratch_tokens, 4096);
    ck_assert_uint_eq(on.mla_scratch_bytes, 2ull * 4096 * 16 * 192 * 2 + 192 * 4 + 512ull * 576 * 4);
    char *t4k = plan_text(&on);
    ck_assert_msg(strstr(t4k, "4096 tokens of context"), "%s", t4k);
    free(t4k);
    printf("deepseek-v2-lite F16: scratch %.1f MiB for 4096 tokens of context\n",
           (double)on.mla_scratch_bytes / 1048576.0);
    o.max_seq_len = 1000;
    ck_assert_msg(pagoda_memplan_compute(g, &o, &on, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(on.mla_scratch_tokens, 1008);   /* 1000 rounded up to 16 */
    o.max_seq_len = 0;
    o.mla_decompress_ctx = 0;
    /* tensor parallelism: a rank's heads */
    o.tensor_parallel = 2;
    ck_assert_msg(pagoda_memplan_compute(g, &o, &on, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(on.mla_kbt_bytes, 27ull * 8 * 128 * 512 * 2);
    pagoda_gguf_close(g);
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(config_knob)
{
    char err[512] = "";
    pagoda_config *c = pagoda_config_new_empty();
    pagoda_engine_config ec;
    ck_assert_int_eq(pagoda_config_engine(c, &ec, err, sizeof err), 0);
    ck_assert_int_eq(ec.mla_decompress_min, 320);
    ck_assert_int_eq(pagoda_config_set(c, "engine.mla_decompress_min=0", err, sizeof err), 0);
    ck_assert_int_eq(pagoda_config_engine(c, &ec, err, sizeof err), 0);
    ck_assert_int_eq(ec.mla_decompress_min, 0);
    ck_assert_int_eq(ec.mla_decompress_ctx, 4096);
    ck_assert_int_eq(pagoda_config_set(c, "engine.mla_decompress_ctx=16384", err, sizeof err), 0);
    ck_assert_int_eq(pagoda_config_engine(c, &ec, err, sizeof err), 0);
    ck_assert_int_eq(ec.mla_decompress_ctx, 16384);
    static const char *const bad[] = {"engine.mla_decompress_min=-1", "engine.mla_decompress_min=many",
                                      "engine.mla_decompress_min=99999999999"};
    for (int i = 0; i < 3; i++) {
        err[0] = 0;
        ck_assert_int_ne(pagoda_config_set(c, bad[i], err, sizeof err), 0);
        ck_assert_msg(strstr(err, "mla_decompress_min"), "%s: %s", bad[i], err);
    }
    pagoda_config_free(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mla_prefill");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, same_logits);
    tcase_add_test(tc, what_stays_absorbed);
    tcase_add_test(tc, kv_get_rows_refused);
    tcase_add_test(tc, later_chunks);
    tcase_add_test(tc, engine_chunks);
    tcase_add_test(tc, rounded_caches);
    tcase_add_test(tc, plan_counts_it);
    tcase_add_test(tc, config_knob);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
