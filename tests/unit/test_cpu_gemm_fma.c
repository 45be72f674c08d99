/*
 * test_cpu_gemm_fma.c: the F32-FMA GEMM for F16 / BF16 weights
 * (backends/cpu/kernels/avx512/gemm_fma.h) against a reference in double
 * over the weights' exact F32 values, with SIMDe's compile on every AVX2
 * host and the native one where the CPU runs AVX-512; and the f16_gemm
 * setting's path choice through pagoda_cpu_matmul.
 * Tolerance (why): every product of an F32 activation and an F16 / BF16
 * weight (exact in F32) is rounded once in an FMA and the K sums are F32
 * in some order, so |err| <= (K + 1) * 2^-24 * (sum|x*w| + |bias|) + a
 * tiny absolute term, whatever the order; the reference's own error in
 * double is far below that.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amx/gemm_bf16_amx.h"
#include "avx512/gemm_bf16.h"
#include "avx512/gemm_fma.h"
#include "cpu_features.h"
#include "kernels.h"
#include "matmul_task.h"
#include "quant.h"
#include "testutil.h"
#include "threadpool.h"

/* The kernel tables this host can run: SIMDe's (AVX2) and the native one. */
static int tables(const pagoda_fma_kernels **t)
{
    int n = 0;
    if (pagoda_cpu_detect_isa() >= PAGODA_CPU_ISA_AVX2) t[n++] = &pagoda_fma_simde;
    if (pagoda_cpu_detect_isa() >= PAGODA_CPU_ISA_AVX512) t[n++] = &pagoda_fma_native;
    return n;
}

/* out (T x N, stride ldo floats) against the exact product; x rows xs
 * floats apart. */
static void check_out(const float *x, int64_t xs, int64_t T, int64_t K, const float *wf, int dtype, int64_t N,
                      const float *bias, const float *out, int64_t ldo, const char *what)
{
    for (int64_t t = 0; t < T; t++)
        for (int64_t n = 0; n < N; n++) {
            double mag;
            double exact = tu_dot_exact(x + t * xs, wf + n * K, K, &mag) + (bias ? bias[n] : 0);
            mag += bias ? fabs(bias[n]) : 0;
            double got = out[t * ldo + n];
            double tol = (double)(K + 1) * 0x1p-24 * mag + 1e-30;
            ck_assert_msg(fabs(got - exact) <= tol, "%s %s T %lld K %lld N %lld [%lld,%lld]: %.9g vs exact %.9g",
                          what, pagoda_dtype_name(dtype), (long long)T, (long long)K, (long long)N, (long long)t,
                          (long long)n, got, exact);
        }
}

static void run_case(const pagoda_fma_kernels *kn, tu_rng *r, pagoda_threadpool *pool, int dtype, int64_t T, int64_t K,
                     int64_t N, bool with_bias)
{
    int64_t xs = K + 5, ldo = N + 3;
    float *x = tu_xmalloc(sizeof(float) * (size_t)(T * xs));
    float *wf = tu_xmalloc(sizeof(float) * (size_t)(N * K));
    float *bias = tu_xmalloc(sizeof(float) * (size_t)N);
    float *out = tu_xmalloc(sizeof(float) * (size_t)(T * ldo));
    tu_fill_normal(r, x, (size_t)(T * xs), 1.0f);
    tu_fill_normal(r, bias, (size_t)N, 1.0f);
    for (int64_t i = 0; i < T * ldo; i++) out[i] = NAN; /* every output written */
    uint16_t *w = tu_half_weights(r, dtype, N, K, wf);
    pagoda_cpu_mat m = {.w = w, .dtype = dtype, .w_stride = sizeof(uint16_t) * (size_t)K, .N = N,
                        .bias = with_bias ? bias : NULL, .out = out, .out_stride = sizeof(float) * (size_t)ldo};
    pagoda_cpu_exec ex = {.pool = pool};
    ck_assert_int_eq(pagoda_cpu_fma_matmul(&ex, kn, x, sizeof(float) * (size_t)xs, T, K, &m, 1), PAGODA_OK);
    check_out(x, xs, T, K, wf, dtype, N, with_bias ? bias : NULL, out, ldo, kn->name);
    /* the padding columns past N untouched */
    for (int64_t t = 0; t < T; t++)
        for (int64_t n = N; n < ldo; n++) ck_assert(isnan(out[t * ldo + n]));
    pagoda_cpu_exec_release(&ex);
    free(x); free(wf); free(bias); free(out); free(w);
}

/* T 1..40 (one group, a pair, a pair plus a group; token tails), K below,
 * at and past one K block (256) and odd, N tails around the 12-row tile
 * and the 96-row block. */
START_TEST(test_fma_gemm_shapes)
{
    const pagoda_fma_kernels *tb[2];
    int nt = tables(tb);
    if (!nt) return;
    static const int64_t Ks[] = {1, 7, 16, 255, 256, 257, 600};
    static const int64_t Ns[] = {1, 11, 12, 13, 96, 97, 200};
    tu_rng r;
    tu_rng_seed(&r, 31);
    pagoda_threadpool *pool = NULL;
    ck_assert_int_eq(pagoda_threadpool_create(3, &pool), PAGODA_OK);
    for (int ti = 0; ti < nt; ti++)
        for (int dt = 0; dt < 2; dt++) {
            int dtype = dt ? PAGODA_DTYPE_BF16 : PAGODA_DTYPE_F16;
            for (int64_t T = 1; T <= 40; T++) {
                int64_t K = Ks[(T + dt) % 7], N = Ns[(T * 3 + ti) % 7];
                run_case(tb[ti], &r, T % 2 ? pool : NULL, dtype, T, K, N, T % 3 == 0);
            }
            /* prefill-sized: 16 pairs and a tail pair, several K blocks */
            run_case(tb[ti], &r, pool, dtype, 512, 520, 37, true);
            run_case(tb[ti], &r, pool, dtype, 517, 257, 109, false);
            run_case(tb[ti], &r, NULL, dtype, 49, 1030, 25, true);
        }
    pagoda_threadpool_destroy(pool);
}
END_TEST

/* Q/K/V-like: one packing of x for three matrices of both types. */
START_TEST(test_fma_gemm_multi)
{
    const pagoda_fma_kernels *tb[2];
    int nt = tables(tb);
    if (!nt) return;
    tu_rng r;
    tu_rng_seed(&r, 32);
    int64_t T = 45, K = 300, Nn[3] = {100, 24, 37};
    int dts[3] = {PAGODA_DTYPE_BF16, PAGODA_DTYPE_F16, PAGODA_DTYPE_BF16};
    pagoda_threadpool *pool = NULL;
    ck_assert_int_eq(pagoda_threadpool_create(2, &pool), PAGODA_OK);
    float *x = tu_xmalloc(sizeof(float) * (size_t)(T * K));
    tu_fill_normal(&r, x, (size_t)(T * K), 2.0f);
    for (int ti = 0; ti < nt; ti++) {
        float *wf[3], *out[3];
        uint16_t *w[3];
        pagoda_cpu_mat m[3];
        for (int i = 0; i < 3; i++) {
            wf[i] = tu_xmalloc(sizeof(float) * (size_t)(Nn[i] * K));
            out[i] = tu_xmalloc(sizeof(float) * (size_t)(T * Nn[i]));
            w[i] = tu_half_weights(&r, dts[i], Nn[i], K, wf[i]);
            m[i] = (pagoda_cpu_mat){.w = w[i], .dtype = dts[i], .w_stride = 2 * (size_t)K, .N = Nn[i],
                                    .out = out[i], .out_stride = sizeof(float) * (size_t)Nn[i]};
        }
        pagoda_cpu_exec ex = {.pool = pool};
        ck_assert_int_eq(pagoda_cpu_fma_matmul(&ex, tb[ti], x, sizeof(float) * (size_t)K, T, K, m, 3), PAGODA_OK);
        for (int i = 0; i < 3; i++) {
            check_out(x, K, T, K, wf[i], dts[i], Nn[i], NULL, out[i], Nn[i], tb[ti]->name);
            free(wf[i]); free(out[i]); free(w[i]);
        }
        pagoda_cpu_exec_release(&ex);
    }
    free(x);
    pagoda_threadpool_destroy(pool);
}
END_TEST

START_TEST(test_fma_gemm_invalid)
{
    pagoda_cpu_exec ex = {0};
    float x[4] = {0}, out[4];
    uint16_t w[4] = {0};
    pagoda_cpu_mat m = {.w = w, .dtype = PAGODA_DTYPE_Q8_0, .w_stride = 8, .N = 1, .out = out, .out_stride = 16};
    ck_assert_int_eq(pagoda_cpu_fma_matmul(&ex, &pagoda_fma_simde, x, 16, 1, 4, &m, 1), PAGODA_ERR_INVALID);
    m.dtype = PAGODA_DTYPE_F16;
    ck_assert_int_eq(pagoda_cpu_fma_matmul(&ex, &pagoda_fma_simde, x, 16, 1, 0, &m, 1), PAGODA_ERR_INVALID);
    ck_assert_int_eq(pagoda_cpu_fma_matmul(&ex, &pagoda_fma_simde, x, 16, 1, 4, &m, 0), PAGODA_ERR_INVALID);
    ck_assert_int_eq(pagoda_cpu_fma_matmul(&ex, &pagoda_fma_simde, x, 16, 0, 4, &m, 1), PAGODA_OK);
    pagoda_cpu_exec_release(&ex);
}
END_TEST

/* The setting's names, and what each mode makes pagoda_cpu_matmul take. */
START_TEST(test_f16_gemm_modes)
{
    ck_assert_int_eq(pagoda_cpu_f16_gemm_parse("auto"), PAGODA_F16GEMM_AUTO);
    ck_assert_int_eq(pagoda_cpu_f16_gemm_parse("fma"), PAGODA_F16GEMM_FMA);
    ck_assert_int_eq(pagoda_cpu_f16_gemm_parse("dpbf16"), PAGODA_F16GEMM_DPBF16);
    ck_assert_int_eq(pagoda_cpu_f16_gemm_parse("off"), PAGODA_F16GEMM_OFF);
    ck_assert_int_eq(pagoda_cpu_f16_gemm_parse("FMA"), -1);
    ck_assert_int_eq(pagoda_cpu_f16_gemm_parse(""), -1);
    ck_assert_int_eq(pagoda_cpu_f16_gemm_parse(NULL), -1);
    for (int m = 0; m < 4; m++) ck_assert_int_eq(pagoda_cpu_f16_gemm_parse(pagoda_cpu_f16_gemm_name(m)), m);
    bool avx512 = pagoda_cpu_active_isa() >= PAGODA_CPU_ISA_AVX512;
    int64_t T = pagoda_cpu_fma_min_t(PAGODA_DTYPE_F16), Tb = pagoda_cpu_fma_min_t(PAGODA_DTYPE_BF16);
    if (Tb > T) T = Tb;
    pagoda_cpu_exec ex = {.f16_gemm = PAGODA_F16GEMM_FMA};
    ck_assert(pagoda_cpu_fma_applies(&ex, PAGODA_DTYPE_F16, T) == avx512);
    ck_assert(pagoda_cpu_fma_applies(&ex, PAGODA_DTYPE_BF16, T) == avx512);
    ck_assert(!pagoda_cpu_fma_applies(&ex, PAGODA_DTYPE_F16, pagoda_cpu_fma_min_t(PAGODA_DTYPE_F16) - 1));
    ck_assert(!pagoda_cpu_fma_applies(&ex, PAGODA_DTYPE_BF16, Tb - 1));
    ck_assert(!pagoda_cpu_fma_applies(&ex, PAGODA_DTYPE_Q8_0, T));
    ck_assert(!pagoda_cpu_bf16_applies(&ex, PAGODA_DTYPE_BF16, T + 100, 64));
    ck_assert(pagoda_cpu_matmul_exact(&ex, PAGODA_DTYPE_BF16, T + 100));
    /* batch_invariant F16 keeps the lanes kernel from one row on */
    ex.batch_invariant = true;
    ck_assert(!pagoda_cpu_fma_applies(&ex, PAGODA_DTYPE_F16, T + 100));
    ck_assert(pagoda_cpu_fma_applies(&ex, PAGODA_DTYPE_BF16, T + 100) == avx512);
    ex.batch_invariant = false;
    ex.f16_gemm = PAGODA_F16GEMM_OFF;
    ck_assert(!pagoda_cpu_fma_applies(&ex, PAGODA_DTYPE_F16, T + 100));
    ck_assert(!pagoda_cpu_fma_applies(&ex, PAGODA_DTYPE_BF16, T + 100));
    ck_assert(!pagoda_cpu_bf16_applies(&ex, PAGODA_DTYPE_BF16, T + 100, 64));
    ex.f16_gemm = PAGODA_F16GEMM_DPBF16;
    ck_assert(!pagoda_cpu_fma_applies(&ex, PAGODA_DTYPE_F16, T + 100));
    ck_assert(!pagoda_cpu_fma_applies(&ex, PAGODA_DTYPE_BF16, T + 100));
    /* a value outside the enum reads as auto */
    ex.f16_gemm = 99;
    int odd = pagoda_cpu_f16_gemm_path(&ex, PAGODA_DTYPE_F16);
    ex.f16_gemm = PAGODA_F16GEMM_AUTO;
    ck_assert_int_eq(odd, pagoda_cpu_f16_gemm_path(&ex, PAGODA_DTYPE_F16));
    if (!getenv("PAGODA_CPU_BF16")) {
        /* F16: the FMA GEMM wherever the level is AVX-512 */
        ck_assert(pagoda_cpu_fma_applies(&ex, PAGODA_DTYPE_F16, T + 100) == avx512);
        ck_assert_int_eq(pagoda_cpu_f16_gemm_path(&ex, PAGODA_DTYPE_F16), PAGODA_F16GEMM_FMA);
        int bp = pagoda_cpu_f16_gemm_path(&ex, PAGODA_DTYPE_BF16);
        ck_assert(bp == PAGODA_F16GEMM_FMA || bp == PAGODA_F16GEMM_DPBF16);
        /* one of the two BF16 GEMMs, never both */
        ck_assert(!(pagoda_cpu_fma_applies(&ex, PAGODA_DTYPE_BF16, T + 100) &&
                    pagoda_cpu_bf16_applies(&ex, PAGODA_DTYPE_BF16, T + 100, 64)));
        if (pagoda_cpu_bf16_path() == PAGODA_BF16_PATH_AMX) ck_assert_int_eq(bp, PAGODA_F16GEMM_DPBF16);
        /* deterministic: the same answer asked again */
        ck_assert_int_eq(pagoda_cpu_f16_gemm_path(&ex, PAGODA_DTYPE_BF16), bp);
    }
}
END_TEST

/* pagoda_cpu_matmul with the setting forced each way gives close results:
 * fma and off within F32 summation (both exact), dpbf16 within its 2^-7. */
START_TEST(test_f16_gemm_forced_close)
{
    tu_rng r;
    tu_rng_seed(&r, 33);
    pagoda_threadpool *pool = NULL;
    ck_assert_int_eq(pagoda_threadpool_create(2, &pool), PAGODA_OK);
    int64_t T = 70, K = 320, N = 50;
    float *x = tu_xmalloc(sizeof(float) * (size_t)(T * K)), *wf = tu_xmalloc(sizeof(float) * (size_t)(N * K));
    float *out[3];
    tu_fill_normal(&r, x, (size_t)(T * K), 1.0f);
    static const int modes[3] = {PAGODA_F16GEMM_FMA, PAGODA_F16GEMM_OFF, PAGODA_F16GEMM_DPBF16};
    for (int dt = 0; dt < 2; dt++) {
        int dtype = dt ? PAGODA_DTYPE_BF16 : PAGODA_DTYPE_F16;
        uint16_t *w = tu_half_weights(&r, dtype, N, K, wf);
        pagoda_cpu_exec ex = {.pool = pool};
        for (int i = 0; i < 3; i++) {
            out[i] = tu_xmalloc(sizeof(float) * (size_t)(T * N));
            ex.f16_gemm = modes[i];
            ck_assert_int_eq(pagoda_cpu_matmul(&ex, x, sizeof(float) * (size_t)K, T, K, w, dtype, 2 * (size_t)K, N,
                                               NULL, out[i], sizeof(float) * (size_t)N),
                             PAGODA_OK);
        }
        ex.f16_gemm = PAGODA_F16GEMM_AUTO;
        bool dp_rounded = !pagoda_cpu_matmul_exact(&ex, dtype, T); /* under auto: informative only */
        (void)dp_rounded;
        for (int64_t t = 0; t < T; t++)
            for (int64_t n = 0; n < N; n++) {
                double mag;
                (void)tu_dot_exact(x + t * K, wf + n * K, K, &mag);
                float a = out[0][t * N + n], b = out[1][t * N + n], c = out[2][t * N + n];
                ck_assert_msg(fabs((double)a - b) <= 2.0 * (K + 1) * 0x1p-24 * mag, "%s fma %.9g vs off %.9g",
                              pagoda_dtype_name(dtype), a, b);
                ck_assert_msg(fabs((double)a - c) <= (0x1p-7 + 2.0 * (K + 1) * 0x1p-24) * mag,
                              "%s fma %.9g vs dpbf16 %.9g", pagoda_dtype_name(dtype), a, c);
            }
        for (int i = 0; i < 3; i++) free(out[i]);
        pagoda_cpu_exec_release(&ex);
        free(w);
    }
    free(x); free(wf);
    pagoda_threadpool_destroy(pool);
}
END_TEST

/* The settings are each exec's (each backend's): two execs of one
 * process, one batch_invariant with f16_gemm = fma, the other neither with
 * f16_gemm = off, each take their own paths, in calls interleaved with the
 * other's. */
START_TEST(test_exec_settings_own)
{
    pagoda_threadpool *pool = NULL;
    ck_assert_int_eq(pagoda_threadpool_create(2, &pool), PAGODA_OK);
    pagoda_cpu_exec a = {.pool = pool, .batch_invariant = true, .f16_gemm = PAGODA_F16GEMM_FMA};
    pagoda_cpu_exec b = {.pool = pool, .batch_invariant = false, .f16_gemm = PAGODA_F16GEMM_OFF};
    /* the path choices, on any level */
    ck_assert_int_eq(pagoda_cpu_f16_gemm_path(&a, PAGODA_DTYPE_F16), PAGODA_F16GEMM_FMA);
    ck_assert_int_eq(pagoda_cpu_f16_gemm_path(&b, PAGODA_DTYPE_F16), PAGODA_F16GEMM_OFF);
    ck_assert_int_eq(pagoda_cpu_f16_gemm_path(&a, PAGODA_DTYPE_BF16), PAGODA_F16GEMM_FMA);
    ck_assert_int_eq(pagoda_cpu_f16_gemm_path(&b, PAGODA_DTYPE_BF16), PAGODA_F16GEMM_OFF);
    /* F32 weights: sgemm from a few rows, except batch-invariant */
    ck_assert(!pagoda_cpu_mm_sgemm_path(&a, PAGODA_DTYPE_F32, 4096));
    ck_assert(pagoda_cpu_mm_sgemm_path(&b, PAGODA_DTYPE_F32, 4096));
    /* Q8_0 of one row: the lanes kernel batch-invariant, the row dot not */
    const pagoda_vecdot_table *vt = pagoda_cpu_vecdot();
    const pagoda_vecdot_table *lt = vt->lanes8 ? vt->lanes8 : vt;
    pagoda_cpu_mm ma = {.vt = vt, .T = 1, .K = 256, .N = 8, .dtype = PAGODA_DTYPE_Q8_0}, mb = ma;
    pagoda_cpu_mm_plan(&a, &ma);
    pagoda_cpu_mm_plan(&b, &mb);
    ck_assert(ma.gemm_x8 == lt->gemm_q8_0_x8);
    ck_assert(mb.gemm_x8 == NULL);
    /* F16 many rows: the FMA GEMM at AVX-512 for neither (a: batch_invariant F16, b: off) */
    bool avx512 = pagoda_cpu_active_isa() >= PAGODA_CPU_ISA_AVX512;
    ck_assert(!pagoda_cpu_fma_applies(&a, PAGODA_DTYPE_F16, 200));
    ck_assert(!pagoda_cpu_fma_applies(&b, PAGODA_DTYPE_F16, 200));
    ck_assert(pagoda_cpu_fma_applies(&a, PAGODA_DTYPE_BF16, 200) == avx512);
    ck_assert(!pagoda_cpu_fma_applies(&b, PAGODA_DTYPE_BF16, 200));

    /* The results: a's row 37 of a 70-row F16 call equals the same row
     * alone, bit for bit (its lanes kernel from one row on), with b's
     * calls of both sizes run between them. */
    tu_rng r;
    tu_rng_seed(&r, 61);
    int64_t T = 70, K = 320, N = 40, t0 = 37;
    float *x = tu_xmalloc(sizeof(float) * (size_t)(T * K)), *wf = tu_xmalloc(sizeof(float) * (size_t)(N * K));
    float *oa = tu_xmalloc(sizeof(float) * (size_t)(T * N)), *ob = tu_xmalloc(sizeof(float) * (size_t)(T * N));
    float one[64];
    tu_fill_normal(&r, x, (size_t)(T * K), 1.0f);
    uint16_t *w = tu_half_weights(&r, PAGODA_DTYPE_F16, N, K, wf);
    size_t xs = sizeof(float) * (size_t)K, ws = 2 * (size_t)K, os = sizeof(float) * (size_t)N;
    ck_assert_int_eq(pagoda_cpu_matmul(&a, x, xs, T, K, w, PAGODA_DTYPE_F16, ws, N, NULL, oa, os), PAGODA_OK);
    ck_assert_int_eq(pagoda_cpu_matmul(&b, x, xs, T, K, w, PAGODA_DTYPE_F16, ws, N, NULL, ob, os), PAGODA_OK);
    ck_assert_int_eq(pagoda_cpu_matmul(&b, x + t0 * K, xs, 1, K, w, PAGODA_DTYPE_F16, ws, N, NULL, one, os),
                     PAGODA_OK);
    ck_assert_int_eq(pagoda_cpu_matmul(&a, x + t0 * K, xs, 1, K, w, PAGODA_DTYPE_F16, ws, N, NULL, one, os),
                     PAGODA_OK);
    if (vt->gemm_f16_x8)
        ck_assert_msg(!memcmp(one, oa + t0 * N, sizeof(float) * (size_t)N),
                      "batch_invariant exec: row %lld alone differs from it in a call of %lld rows",
                      (long long)t0, (long long)T);
    else
        printf("test_exec_settings_own: no F16 lanes kernel on this level: the rows are not compared\n");
    /* both exact F32 (a: lanes, b: lanes / dots) */
    for (int64_t n = 0; n < N; n++) {
        ck_assert(tu_near_exact_f32(oa[t0 * N + n], x + t0 * K, wf + n * K, K));
        ck_assert(tu_near_exact_f32(ob[t0 * N + n], x + t0 * K, wf + n * K, K));
    }
    pagoda_cpu_exec_release(&a);
    pagoda_cpu_exec_release(&b);
    free(x); free(wf); free(oa); free(ob); free(w);
    pagoda_threadpool_destroy(pool);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cpu_gemm_fma");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_fma_gemm_shapes);
    tcase_add_test(tc, test_fma_gemm_multi);
    tcase_add_test(tc, test_fma_gemm_invalid);
    tcase_add_test(tc, test_f16_gemm_modes);
    tcase_add_test(tc, test_f16_gemm_forced_close);
    tcase_add_test(tc, test_exec_settings_own);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
