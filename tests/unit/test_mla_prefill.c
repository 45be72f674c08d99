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
 *  - what_stays_absorbed: a chunk below the threshold and a later chunk
 *    (chunked prefill: it starts past position 0) stay absorbed; a mixed
 *    batch (a decode, a from-scratch chunk, a short one) decompresses only
 *    the from-scratch chunk and matches off row for row.
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
        ck_assert_msg(pagoda_forward_mla_decompress(fw, MIN_TOK, err, sizeof err) == 0, "%s", err);
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
    /* chunked prefill: the first chunk from scratch decompresses, the
     * second starts at 10 and reads the first's latents: absorbed */
    seq_part c1 = {.tok = tok, .at = 0, .n = 10, .table = t1};
    seq_part c2 = {.tok = tok, .at = 10, .n = n - 10, .table = t1};
    ck_assert_int_eq(both(&off, &on, &c1, 1, a, b, V, "chunk 0..10"), 10);
    ck_assert_int_eq(both(&off, &on, &c2, 1, a, b, V, "chunk 10..40 (after the first)"), 0);
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
    pagoda_forward_free(&off);
    pagoda_forward_free(&on);
    free(a);
    free(b);
    mla_fixture_close(&fx);
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
        double amax = 0, d = max_diff(a, b, (size_t)n * V, &amax);
        int32_t clear = 0, same = 0;
        for (int32_t r = 0; r < n; r++) {
            const float *x = a + (size_t)r * V, *y = b + (size_t)r * V;
            if (top2_gap(x, V) > 2 * tol[ti]) {
                clear++;
                same += ref_argmax(x, V) == ref_argmax(y, V);
            }
        }
        printf("KV %s (scratch %s): decompressed vs absorbed max |diff| %.3g (allowed %g); top token "
               "the same at %d of %d clear positions\n", pagoda_dtype_name(types[ti]),
               pagoda_dtype_name(on.mla.scratch_kv.dtype), d, tol[ti], same, clear);
        ck_assert_msg(d <= tol[ti], "KV %s: differs by %g", pagoda_dtype_name(types[ti]), d);
        ck_assert_int_eq(same, clear);
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
    /* K and V of CAP tokens in F32, and one zero row of a key head (64-byte aligned) */
    uint64_t D = (uint64_t)(hp->qk_nope + hp->rope_dims);
    ck_assert_uint_eq(on.mla_scratch_bytes,
                      (2ull * CAP * hp->n_heads * D * 4 + 63) / 64 * 64 + (D * 4 + 63) / 64 * 64);
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
    ck_assert_int_eq(pagoda_forward_mla_decompress(&fw, CAP + 1, err, sizeof err), 0);
    ck_assert_int_eq(fw.mla.decompress_min, 0);
    ck_assert_uint_eq(fw.mla.kbt_bytes, 0);
    /* a backend that cannot multiply the copies' type: refused, naming the fix, and off */
    uint64_t types = fx.rt->backend.info.weight_types;
    fx.rt->backend.info.weight_types &= ~(1ull << PAGODA_DTYPE_F32);
    ck_assert_int_eq(pagoda_forward_mla_decompress(&fw, MIN_TOK, err, sizeof err),
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
    ck_assert_uint_eq(on.mla_scratch_bytes, 2ull * 512 * 16 * 192 * 2 + 192 * 4);
    printf("deepseek-v2-lite F16: transposed attn_k_b %.1f MiB, scratch %.1f MiB at 512 tokens\n",
           (double)on.mla_kbt_bytes / 1048576.0, (double)on.mla_scratch_bytes / 1048576.0);
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
    tcase_add_test(tc, rounded_caches);
    tcase_add_test(tc, plan_counts_it);
    tcase_add_test(tc, config_knob);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
