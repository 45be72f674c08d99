/* test_cpu_experts.c: the CPU backend's mixture-of-experts kernels
 * (experts.c). pagoda_cpu_matmul_experts for every weight type the
 * backend multiplies, on the scalar and the AVX2 tables (forced), with
 * random expert ids (repeats, unused experts, an expert chosen twice by
 * one token), x_rows given (gate/up: each pair reads its token's row) and
 * NULL (down: one input row per pair), at T = 1 (decode: one row per
 * expert), a batch, and a prefill size where some experts reach the
 * tokens-in-lanes kernels and the sgemm crossover:
 *   - each expert's rows equal pagoda_cpu_matmul over those rows gathered,
 *     bit for bit (the same machinery, so the same bits);
 *   - every row is within a stated bound of a scalar reference (the
 *     weight row dequantized, a double dot): for int8 activations the
 *     bound is the activations' rounding, sum_k |w_k| * amax(block of
 *     k) / 254, plus 1e-4 of sum |w_k x_k| for float order; for exact
 *     products (F32/F16/BF16, and the sgemm path) that last term alone.
 * And pagoda_cpu_moe_combine against an in-order serial sum, bit for bit,
 * with accumulate on and off, on the caller and on the pool. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "avx512/gemm_fma.h" /* pagoda_cpu_fma_applies */
#include "cpu_features.h"
#include "kernels.h"
#include "quant.h"
#include "testutil.h"
#include "threadpool.h"

#include "cpu_paths.h"
/* scalar, then every faster path this host runs (cpu_paths.h: PATHS) */
#define N_ISAS cpu_paths_count()

static const int TYPES[] = {
    PAGODA_DTYPE_F32,  PAGODA_DTYPE_F16,  PAGODA_DTYPE_BF16, PAGODA_DTYPE_Q8_0,  PAGODA_DTYPE_Q4_0,
    PAGODA_DTYPE_Q4_1, PAGODA_DTYPE_Q5_0, PAGODA_DTYPE_Q5_1, PAGODA_DTYPE_IQ4_NL, PAGODA_DTYPE_Q2_K,
    PAGODA_DTYPE_Q3_K, PAGODA_DTYPE_Q4_K, PAGODA_DTYPE_Q5_K, PAGODA_DTYPE_Q6_K,  PAGODA_DTYPE_IQ4_XS,
    PAGODA_DTYPE_MXFP4,
};
#define N_TYPES (int)(sizeof TYPES / sizeof TYPES[0])

/* Where a 256-value type keeps its f16 scales d / dmin (-1: none). */
static int k_scale_offset(int dtype, int min)
{
    switch (dtype) {
    case PAGODA_DTYPE_Q2_K: return min ? (int)offsetof(pagoda_block_q2_K, dmin) : (int)offsetof(pagoda_block_q2_K, d);
    case PAGODA_DTYPE_Q3_K: return min ? -1 : (int)offsetof(pagoda_block_q3_K, d);
    case PAGODA_DTYPE_Q4_K: return min ? (int)offsetof(pagoda_block_q4_K, dmin) : (int)offsetof(pagoda_block_q4_K, d);
    case PAGODA_DTYPE_Q5_K: return min ? (int)offsetof(pagoda_block_q5_K, dmin) : (int)offsetof(pagoda_block_q5_K, d);
    case PAGODA_DTYPE_Q6_K: return min ? -1 : (int)offsetof(pagoda_block_q6_K, d);
    case PAGODA_DTYPE_IQ4_XS: return min ? -1 : (int)offsetof(pagoda_block_iq4_xs, d);
    default: return -1;
    }
}

/* E experts of N x K weights of dtype, expert_stride apart (a gap after
 * each, so a kernel that mixes experts up reads other bytes). The
 * 256-value types: random bytes with small scales (every pattern valid,
 * Q6_K has no quantizer); the others: N(0, 0.5) quantized. */
static uint8_t *expert_weights(tu_rng *r, int dtype, int E, int64_t N, int64_t K, size_t *row_stride,
                               size_t *expert_stride)
{
    size_t rb = pagoda_dtype_row_bytes(dtype, K);
    ck_assert_uint_gt(rb, 0);
    *row_stride = rb;
    *expert_stride = rb * (size_t)N + 64;
    uint8_t *w = tu_xmalloc(*expert_stride * (size_t)E);
    float *row = tu_xmalloc(sizeof(float) * (size_t)K);
    for (int e = 0; e < E; e++)
        for (int64_t n = 0; n < N; n++) {
            uint8_t *p = w + (size_t)e * *expert_stride + (size_t)n * rb;
            if (k_scale_offset(dtype, 0) >= 0) {
                for (size_t i = 0; i < rb; i++) p[i] = (uint8_t)tu_rng_u64(r);
                size_t bb = pagoda_dtype_row_bytes(dtype, 256);
                for (int64_t b = 0; b < K / 256; b++)
                    for (int min = 0; min < 2; min++) {
                        int off = k_scale_offset(dtype, min);
                        if (off < 0) continue;
                        uint16_t h = pagoda_fp32_to_fp16(0.0005f + 0.002f * tu_rng_uniform(r));
                        memcpy(p + (size_t)b * bb + off, &h, 2);
                    }
            } else {
                tu_fill_normal(r, row, (size_t)K, 0.5f);
                ck_assert_int_eq(pagoda_quantize_row(dtype, row, p, K), PAGODA_OK);
            }
        }
    free(row);
    return w;
}

static bool int8_acts(int dtype)
{
    return dtype != PAGODA_DTYPE_F32 && dtype != PAGODA_DTYPE_F16 && dtype != PAGODA_DTYPE_BF16;
}

/* The bound on |got - ref| for row x against weight row wf (see the top). */
static double bound(int dtype, const float *wf, const float *x, int64_t K, bool exact)
{
    double sa = 0.0, q = 0.0;
    int64_t blk = pagoda_dtype_row_bytes(dtype, 256) && k_scale_offset(dtype, 0) >= 0 ? 256 : 32;
    for (int64_t b = 0; b < K; b += blk) {
        double amax = 0.0, sw = 0.0;
        for (int64_t k = b; k < b + blk; k++) {
            amax = fmax(amax, fabs(x[k]));
            sw += fabs(wf[k]);
            sa += fabs((double)wf[k] * x[k]);
        }
        q += sw * amax / 254.0;
    }
    return (exact ? 0.0 : q * 1.001) + 1e-4 * sa + 1e-6;
}

/* F16 / BF16 through the BF16 GEMM (AVX512-BF16, not exact): activations
 * (and F16 weights) rounded to BF16, within 2^-7 of sum |w x| (gemm_bf16.h). */
static double bf16_bound(const float *wf, const float *x, int64_t K)
{
    double sa = 0.0;
    for (int64_t k = 0; k < K; k++) sa += fabs((double)wf[k] * x[k]);
    return 0x1p-7 * sa + 1e-6;
}

typedef struct xp_case {
    int64_t T;     /* tokens */
    int k;         /* choices per token */
    int E;         /* experts */
    int unused;    /* experts never chosen: the last `unused` ids */
    bool x_rows;   /* gate/up form (x_rows = token) or down (x_rows NULL) */
} xp_case;

static void check_case(const xp_case *c, int dtype, pagoda_cpu_exec *ex, tu_rng *r)
{
    const int64_t K = 256, N = 40; /* N: two 16-row tiles and a tail of 8 */
    int64_t R = c->T * c->k;
    int64_t X = c->x_rows ? c->T : R;
    size_t ws, es;
    uint8_t *w = expert_weights(r, dtype, c->E, N, K, &ws, &es);
    size_t xs = sizeof(float) * (size_t)(K + 8);
    float *x = tu_xmalloc(xs * (size_t)X);
    tu_fill_normal(r, x, xs / sizeof(float) * (size_t)X, 1.0f);
    int32_t *ids = tu_xmalloc(sizeof(int32_t) * (size_t)R), *xr = tu_xmalloc(sizeof(int32_t) * (size_t)R);
    int used = c->E - c->unused;
    for (int64_t t = 0; t < c->T; t++)
        for (int j = 0; j < c->k; j++) {
            int64_t i = t * c->k + j;
            /* skewed choice: expert 0 and 1 popular (they reach the lanes
             * kernels and the sgemm crossover at the prefill size), token 3
             * chooses one expert twice */
            float u = tu_rng_uniform(r);
            ids[i] = u < 0.3f ? 0 : u < 0.5f ? 1 : (int32_t)(tu_rng_u64(r) % (uint64_t)used);
            if (t == 3 && j == 1) ids[i] = ids[i - 1];
            xr[i] = (int32_t)t;
        }
    size_t os = sizeof(float) * (size_t)(N + 3);
    float *out = tu_xmalloc(os * (size_t)R), *want = tu_xmalloc(os * (size_t)R);
    float *xg = tu_xmalloc(sizeof(float) * (size_t)(K * R)), *og = tu_xmalloc(sizeof(float) * (size_t)(N * R));
    float *wf = tu_xmalloc(sizeof(float) * (size_t)K);
    int32_t *rows = tu_xmalloc(sizeof(int32_t) * (size_t)R);
    for (int ii = 0; ii < N_ISAS; ii++) {
        cpu_path_use(&PATHS[ii]);
        memset(out, 0xff, os * (size_t)R); /* NaN: a row not written shows */
        ck_assert_int_eq(pagoda_cpu_matmul_experts(ex, x, xs, X, c->x_rows ? xr : NULL, w, dtype, ws, N, K, es,
                                                   ids, R, out, os),
                         PAGODA_OK);
        /* per expert: pagoda_cpu_matmul over its rows gathered */
        for (int e = 0; e < c->E; e++) {
            int64_t n = 0;
            for (int64_t i = 0; i < R; i++)
                if (ids[i] == e) rows[n++] = (int32_t)i;
            if (!n) continue;
            for (int64_t j = 0; j < n; j++)
                memcpy(xg + j * K, (uint8_t *)x + (size_t)(c->x_rows ? xr[rows[j]] : rows[j]) * xs,
                       sizeof(float) * (size_t)K);
            ck_assert_int_eq(pagoda_cpu_matmul(ex, xg, sizeof(float) * (size_t)K, n, K, w + (size_t)e * es, dtype,
                                               ws, N, NULL, og, sizeof(float) * (size_t)N),
                             PAGODA_OK);
            bool exact = pagoda_cpu_matmul_exact(ex, dtype, n) || !int8_acts(dtype);
            /* the BF16 GEMM and the F32-FMA GEMM (F16 / BF16 from 16-32
             * rows) are the plain matmul's, not the expert path's: the same
             * within their bound (the F32 one for the FMA GEMM's exact
             * arithmetic, in another summation order), not bit for bit */
            bool same = int8_acts(dtype) || (pagoda_cpu_matmul_exact(ex, dtype, n) && !pagoda_cpu_fma_applies(ex, dtype, n));
            for (int64_t j = 0; j < n; j++) {
                float *o = (float *)((uint8_t *)out + (size_t)rows[j] * os);
                ck_assert_msg(!same || memcmp(o, og + j * N, sizeof(float) * (size_t)N) == 0,
                              "%s path %s T=%lld k=%d %s: row %d (expert %d, %lld rows) differs from a matmul "
                              "over the expert's rows",
                              pagoda_dtype_name(dtype), PATHS[ii].name, (long long)c->T, c->k,
                              c->x_rows ? "x_rows" : "no x_rows", rows[j], e, (long long)n);
                const float *xv = (const float *)((uint8_t *)x + (size_t)(c->x_rows ? xr[rows[j]] : rows[j]) * xs);
                for (int64_t m = 0; m < N; m++) {
                    ck_assert_int_eq(pagoda_dequantize_row(dtype, w + (size_t)e * es + (size_t)m * ws, wf, K),
                                     PAGODA_OK);
                    double ref = 0.0;
                    for (int64_t k = 0; k < K; k++) ref += (double)wf[k] * xv[k];
                    double tol = !int8_acts(dtype) && !pagoda_cpu_matmul_exact(ex, dtype, n)
                                     ? bf16_bound(wf, xv, K) : bound(dtype, wf, xv, K, exact);
                    ck_assert_msg(fabs(o[m] - ref) <= tol,
                                  "%s path %s T=%lld: row %d col %lld: %.7g vs reference %.7g (bound %.3g)",
                                  pagoda_dtype_name(dtype), PATHS[ii].name, (long long)c->T, rows[j], (long long)m,
                                  (double)o[m], ref, tol);
                }
            }
        }
        (void)want;
    }
    cpu_path_reset();
    free(w);
    free(x);
    free(ids);
    free(xr);
    free(out);
    free(want);
    free(xg);
    free(og);
    free(wf);
    free(rows);
}

static const xp_case CASES[] = {
    {1, 4, 8, 2, true},     /* decode, gate/up: 4 experts of one row each */
    {1, 4, 8, 2, false},    /* decode, down */
    {6, 3, 8, 3, true},     /* a small batch: some experts 1-4 rows (tiles), token 3 repeats */
    {6, 3, 8, 3, false},
    {40, 3, 10, 2, true},   /* prefill-like: experts 0/1 ~ 30-40 rows (lanes, BF16/Q4_1 sgemm) */
    {40, 3, 10, 2, false},
};

static void check_type(int dtype)
{
    tu_rng r;
    tu_rng_seed(&r, 17 + (uint64_t)dtype);
    pagoda_threadpool *tp = NULL;
    ck_assert_int_eq(pagoda_threadpool_create(3, &tp), PAGODA_OK);
    pagoda_cpu_exec ex = {.pool = tp};
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) check_case(&CASES[i], dtype, &ex, &r);
    pagoda_cpu_exec_release(&ex);
    pagoda_threadpool_destroy(tp);
}

START_TEST(test_experts_type)
{
    check_type(TYPES[_i]);
}
END_TEST

/* Zero rows, and a pool of one thread (every part on the caller). */
START_TEST(test_experts_edges)
{
    tu_rng r;
    tu_rng_seed(&r, 3);
    pagoda_cpu_exec ex = {.pool = NULL};
    float x[256] = {0}, o[8] = {0};
    int32_t id = 0;
    ck_assert_int_eq(pagoda_cpu_matmul_experts(&ex, x, sizeof x, 1, NULL, x, PAGODA_DTYPE_F32, sizeof x, 1, 256,
                                               sizeof x, &id, 0, o, sizeof o),
                     PAGODA_OK);
    ck_assert_int_eq(pagoda_cpu_matmul_experts(&ex, x, sizeof x, 1, NULL, x, 12345, sizeof x, 1, 256, sizeof x,
                                               &id, 1, o, sizeof o),
                     PAGODA_ERR_UNSUPPORTED);
    xp_case c = {20, 2, 6, 1, true};
    check_case(&c, PAGODA_DTYPE_Q4_K, &ex, &r);
    check_case(&c, PAGODA_DTYPE_Q8_0, &ex, &r);
    pagoda_cpu_exec_release(&ex);
}
END_TEST

/* ----------------------------------------------------------- moe_combine */

START_TEST(test_moe_combine)
{
    tu_rng r;
    tu_rng_seed(&r, 11);
    pagoda_threadpool *tp = NULL;
    ck_assert_int_eq(pagoda_threadpool_create(3, &tp), PAGODA_OK);
    pagoda_cpu_exec ex = {.pool = tp};
    /* decode-sized (on the caller) and prefill-sized (on the pool), C not
     * a multiple of 16 */
    const int64_t Rs[] = {8, 600}, Os[] = {2, 150}, C = 200;
    for (int si = 0; si < 2; si++)
        for (int acc = 0; acc < 2; acc++) {
            int64_t R = Rs[si], O = Os[si];
            size_t ys = sizeof(float) * (size_t)(C + 5), os = sizeof(float) * (size_t)(C + 1);
            float *y = tu_xmalloc(ys * (size_t)R), *out = tu_xmalloc(os * (size_t)O), *want = tu_xmalloc(os * (size_t)O);
            float *wt = tu_xmalloc(sizeof(float) * (size_t)R);
            int32_t *dst = tu_xmalloc(sizeof(int32_t) * (size_t)R);
            tu_fill_normal(&r, y, ys / 4 * (size_t)R, 1.0f);
            tu_fill_normal(&r, out, os / 4 * (size_t)O, 1.0f);
            memcpy(want, out, os * (size_t)O);
            for (int64_t i = 0; i < R; i++) {
                dst[i] = (int32_t)(tu_rng_u64(&r) % (uint64_t)O); /* repeats: several rows into one */
                wt[i] = tu_rng_uniform(&r);
            }
            for (int64_t i = 0; i < O; i++)
                if (!acc) memset((uint8_t *)want + (size_t)i * os, 0, sizeof(float) * (size_t)C);
            for (int64_t i = 0; i < R; i++) {
                float *o = (float *)((uint8_t *)want + (size_t)dst[i] * os);
                const float *yi = (const float *)((uint8_t *)y + (size_t)i * ys);
                for (int64_t j = 0; j < C; j++) o[j] += wt[i] * yi[j];
            }
            pagoda_cpu_moe_combine(&ex, y, ys, R, C, dst, wt, acc, out, os, O);
            for (int64_t i = 0; i < O; i++)
                ck_assert_msg(memcmp((uint8_t *)out + (size_t)i * os, (uint8_t *)want + (size_t)i * os,
                                     sizeof(float) * (size_t)C) == 0,
                              "combine R=%lld accumulate=%d: row %lld differs from the in-order sum", (long long)R,
                              acc, (long long)i);
            free(y);
            free(out);
            free(want);
            free(wt);
            free(dst);
        }
    pagoda_cpu_exec_release(&ex);
    pagoda_threadpool_destroy(tp);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cpu_experts");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_experts_type, 0, N_TYPES);
    tcase_add_test(tc, test_experts_edges);
    tcase_add_test(tc, test_moe_combine);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
