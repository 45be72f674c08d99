/*
 * test_cpu_bf16.c: the BF16 GEMM (backends/cpu/kernels/avx512/gemm_bf16.h)
 * for F16 and BF16 weights, against a plain reference in double, with
 * SIMDe's compile on every AVX2 host and the native one where the CPU
 * has AVX512-BF16.
 * Tolerances (why):
 *  - against the reference over the BF16-rounded operands (x rounded with
 *    pagoda_fp32_to_bf16, F16 weights through F32 to BF16): the products
 *    are exact in F32, only the F32 sums differ from double:
 *    |err| <= 2e-5 * sum|x*w| + 1e-6 (K <= 300: K * 2^-24 < 2e-5).
 *  - against the exact product of the original operands: each operand
 *    rounded to BF16 is off by at most 2^-8 relative (8 significant bits), so (2^-7 + 2e-5)
 *    * sum|x*w| for F16 (two roundings), (2^-8 + 2e-5) * sum|x*w| for BF16
 *    (the weights are exact), + 1e-6.
 *  - the activation packing and the F16 -> BF16 conversion: bit for bit.
 *  - the AMX-BF16 tile GEMM (kernels/amx/gemm_bf16_amx.h), emulated on
 *    every AVX2 host and on the real tiles where AMX-BF16 is granted: the
 *    same two bounds (TDPBF16PS's products are exact and its F32 sums are
 *    within K * 2^-24 whatever order the hardware adds in); real and
 *    emulated are not compared bit for bit (the SDM leaves the hardware's
 *    internal rounding of the pair sum open).
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amx/amx.h"
#include "amx/gemm_bf16_amx.h"
#include "amx/tile.h"
#include "avx512/gemm_bf16.h"
#include "avx512/gemm_fma.h"
#include "cpu_features.h"
#include "kernels.h"
#include "quant.h"
#include "testutil.h"
#include "threadpool.h"

/* The kernel tables this host can run: SIMDe's (AVX2) and the native one. */
static int tables(const pagoda_bf16_kernels **t)
{
    int n = 0;
    if (pagoda_cpu_detect_isa() >= PAGODA_CPU_ISA_AVX2) t[n++] = &pagoda_bf16_simde;
    if (pagoda_cpu_has_avx512_bf16()) t[n++] = &pagoda_bf16_native;
    return n;
}

static float bf16_round(float v) { return pagoda_bf16_to_fp32(pagoda_fp32_to_bf16(v)); }

/* out (T x N, stride ldo floats) against both references. */
static void check_out(const float *x, int64_t T, int64_t K, const float *wf, int dtype, int64_t N,
                      const float *bias, const float *out, int64_t ldo, const char *what)
{
    for (int64_t t = 0; t < T; t++)
        for (int64_t n = 0; n < N; n++) {
            double ref = bias ? bias[n] : 0, mag;
            double exact = tu_dot_exact(x + t * K, wf + n * K, K, &mag) + ref;
            for (int64_t k = 0; k < K; k++) {
                float xv = x[t * K + k], wv = wf[n * K + k];
                float wb = dtype == PAGODA_DTYPE_F16 ? bf16_round(wv) : wv;
                ref += (double)bf16_round(xv) * wb;
            }
            double got = out[t * ldo + n];
            double tol = 2e-5 * mag + 1e-6;
            double tol_exact = ((dtype == PAGODA_DTYPE_F16 ? 0x1p-7 : 0x1p-8) + 2e-5) * mag + 1e-6;
            ck_assert_msg(fabs(got - ref) <= tol, "%s %s T %lld K %lld N %lld [%lld,%lld]: %.8g vs rounded %.8g",
                          what, pagoda_dtype_name(dtype), (long long)T, (long long)K, (long long)N,
                          (long long)t, (long long)n, got, ref);
            ck_assert_msg(fabs(got - exact) <= tol_exact, "%s %s [%lld,%lld] K %lld mag %g: %.8g vs exact %.8g", what,
                          pagoda_dtype_name(dtype), (long long)t, (long long)n, (long long)K, mag, got, exact);
        }
}

START_TEST(test_bf16_gemm_shapes)
{
    const pagoda_bf16_kernels *tb[2];
    int nt = tables(tb);
    if (!nt) return;
    static const int64_t Ts[] = {1, 5, 16, 17, 32, 33, 70};
    static const int64_t Ks[] = {2, 30, 64, 130, 258};
    static const int64_t Ns[] = {1, 11, 12, 13, 50, 200};
    tu_rng r;
    tu_rng_seed(&r, 27);
    pagoda_threadpool *pool = NULL;
    ck_assert_int_eq(pagoda_threadpool_create(3, &pool), PAGODA_OK);
    for (int ti = 0; ti < nt; ti++)
        for (int dt = 0; dt < 2; dt++) {
            int dtype = dt ? PAGODA_DTYPE_BF16 : PAGODA_DTYPE_F16;
            for (size_t a = 0; a < sizeof Ts / sizeof Ts[0]; a++)
                for (size_t b = 0; b < sizeof Ks / sizeof Ks[0]; b++) {
                    int64_t T = Ts[a], K = Ks[b], N = Ns[(a + b) % (sizeof Ns / sizeof Ns[0])];
                    float *x = tu_xmalloc(sizeof(float) * (size_t)(T * K));
                    float *wf = tu_xmalloc(sizeof(float) * (size_t)(N * K));
                    float *bias = tu_xmalloc(sizeof(float) * (size_t)N);
                    int64_t ldo = N + 3;
                    float *out = tu_xmalloc(sizeof(float) * (size_t)(T * ldo));
                    tu_fill_normal(&r, x, (size_t)(T * K), 1.0f);
                    tu_fill_normal(&r, bias, (size_t)N, 1.0f);
                    uint16_t *w = tu_half_weights(&r, dtype, N, K, wf);
                    bool with_bias = (a + b) % 2;
                    pagoda_cpu_mat m = {.w = w, .dtype = dtype, .w_stride = sizeof(uint16_t) * (size_t)K,
                                        .N = N, .bias = with_bias ? bias : NULL, .out = out,
                                        .out_stride = sizeof(float) * (size_t)ldo};
                    pagoda_cpu_exec ex = {.pool = (a % 2) ? pool : NULL};
                    ck_assert_int_eq(pagoda_cpu_bf16_matmul(&ex, tb[ti], x, sizeof(float) * (size_t)K, T, K,
                                                            &m, 1), PAGODA_OK);
                    check_out(x, T, K, wf, dtype, N, with_bias ? bias : NULL, out, ldo, tb[ti]->name);
                    pagoda_cpu_exec_release(&ex);
                    free(x); free(wf); free(bias); free(out); free(w);
                }
        }
    pagoda_threadpool_destroy(pool);
}
END_TEST

/* Q/K/V-like: one packing of x for three matrices of both types. */
START_TEST(test_bf16_gemm_multi)
{
    const pagoda_bf16_kernels *tb[2];
    int nt = tables(tb);
    if (!nt) return;
    tu_rng r;
    tu_rng_seed(&r, 28);
    int64_t T = 40, K = 96, Nn[3] = {100, 24, 37};
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
        ck_assert_int_eq(pagoda_cpu_bf16_matmul(&ex, tb[ti], x, sizeof(float) * (size_t)K, T, K, m, 3),
                         PAGODA_OK);
        for (int i = 0; i < 3; i++) {
            check_out(x, T, K, wf[i], dts[i], Nn[i], NULL, out[i], Nn[i], tb[ti]->name);
            free(wf[i]); free(out[i]); free(w[i]);
        }
        pagoda_cpu_exec_release(&ex);
    }
    free(x);
    pagoda_threadpool_destroy(pool);
}
END_TEST

START_TEST(test_bf16_pack_bits)
{
    const pagoda_bf16_kernels *tb[2];
    int nt = tables(tb);
    if (!nt) return;
    tu_rng r;
    tu_rng_seed(&r, 29);
    int64_t K = 50;  /* 3 vectors of 16 and a tail pair */
    int rows = 11;
    float *x = tu_xmalloc(sizeof(float) * (size_t)(rows * K));
    tu_fill_normal(&r, x, (size_t)(rows * K), 3.0f);
    /* ties, signs, infinities, a NaN, a denormal: each rounding rule */
    uint32_t special[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x7f800000u, 0xff800000u,
                          0x7fc00001u, 0x7f800001u, 0x00000001u, 0x7f7fffffu, 0x80000000u};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) memcpy(&x[3 * K + 15 + i], &special[i], 4);
    uint16_t *g = tu_xmalloc(sizeof(uint16_t) * 16 * (size_t)K);
    for (int ti = 0; ti < nt; ti++) {
        memset(g, 0xab, sizeof(uint16_t) * 16 * (size_t)K);
        tb[ti]->pack_x(x, sizeof(float) * (size_t)K, rows, K, g);
        for (int64_t p = 0; p < K / 2; p++)
            for (int l = 0; l < 16; l++)
                for (int e = 0; e < 2; e++) {
                    uint16_t want = l < rows ? pagoda_fp32_to_bf16(x[l * K + 2 * p + e]) : 0;
                    ck_assert_msg(g[p * 32 + 2 * l + e] == want, "%s pair %lld lane %d: %04x vs %04x",
                                  tb[ti]->name, (long long)p, l, g[p * 32 + 2 * l + e], want);
                }
    }
    free(g);
    free(x);
}
END_TEST

START_TEST(test_bf16_f16_conversion_every_value)
{
    const pagoda_bf16_kernels *tb[2];
    int nt = tables(tb);
    if (!nt) return;
    uint16_t *src = tu_xmalloc(sizeof(uint16_t) * 65541), *dst = tu_xmalloc(sizeof(uint16_t) * 65541);
    for (int i = 0; i < 65541; i++) src[i] = (uint16_t)(i * 1u);  /* 65536.. wrap: a tail of 5 */
    for (int ti = 0; ti < nt; ti++) {
        tb[ti]->f16_to_bf16(src, dst, 65541);
        for (int i = 0; i < 65541; i++) {
            uint16_t want = pagoda_fp32_to_bf16(pagoda_fp16_to_fp32(src[i]));
            ck_assert_msg(dst[i] == want, "%s f16 %04x: %04x vs %04x", tb[ti]->name, src[i], dst[i], want);
        }
    }
    free(src);
    free(dst);
}
END_TEST

START_TEST(test_bf16_rejects_bad_input)
{
    pagoda_cpu_exec ex = {0};
    uint16_t w[4] = {0};
    float x[4] = {0}, out[4];
    pagoda_cpu_mat m = {.w = w, .dtype = PAGODA_DTYPE_BF16, .w_stride = 6, .N = 1, .out = out, .out_stride = 4};
    ck_assert_int_eq(pagoda_cpu_bf16_matmul(&ex, &pagoda_bf16_simde, x, 12, 1, 3, &m, 1), PAGODA_ERR_INVALID);
    m.dtype = PAGODA_DTYPE_Q8_0;
    ck_assert_int_eq(pagoda_cpu_bf16_matmul(&ex, &pagoda_bf16_simde, x, 8, 1, 2, &m, 1), PAGODA_ERR_INVALID);
    ck_assert_int_eq(pagoda_cpu_bf16_matmul(&ex, &pagoda_bf16_simde, x, 8, 1, 2, &m, 0), PAGODA_ERR_INVALID);
    ck_assert(!pagoda_cpu_bf16_applies(&ex, PAGODA_DTYPE_BF16, 1000, 3));
    ck_assert(!pagoda_cpu_bf16_applies(&ex, PAGODA_DTYPE_Q8_0, 1000, 64));
    ck_assert(!pagoda_cpu_bf16_applies(&ex, PAGODA_DTYPE_BF16, 1, 64));
    pagoda_cpu_exec_release(&ex);
}
END_TEST

/* pagoda_cpu_matmul takes the path exactly where it applies: at the
 * detected level on an AVX512-BF16 host (within the BF16 bound, and
 * pagoda_cpu_matmul_exact says so), never with AVX2 forced. */
START_TEST(test_bf16_matmul_dispatch)
{
    int64_t T = 48, K = 128, N = 30;
    tu_rng r;
    tu_rng_seed(&r, 30);
    float *x = tu_xmalloc(sizeof(float) * (size_t)(T * K)), *wf = tu_xmalloc(sizeof(float) * (size_t)(N * K));
    float *out = tu_xmalloc(sizeof(float) * (size_t)(T * N));
    tu_fill_normal(&r, x, (size_t)(T * K), 1.0f);
    uint16_t *w = tu_half_weights(&r, PAGODA_DTYPE_BF16, N, K, wf);
    pagoda_cpu_exec ex = {0};
    int det = pagoda_cpu_detect_isa();
    pagoda_cpu_force_isa(PAGODA_CPU_ISA_AVX2);
    ck_assert(!pagoda_cpu_bf16_applies(&ex, PAGODA_DTYPE_BF16, T, K));
    ck_assert(pagoda_cpu_matmul_exact(&ex, PAGODA_DTYPE_BF16, T));
    pagoda_cpu_force_isa(-1);
    bool native = pagoda_cpu_has_avx512_bf16() && det >= PAGODA_CPU_ISA_AVX512 && !getenv("PAGODA_CPU_ISA") &&
                  !getenv("PAGODA_CPU_BF16") && !getenv("PAGODA_CPU_BF16_MIN_T");
    /* f16_gemm = dpbf16: under auto this host's BF16 may take the
     * F32-FMA GEMM instead (gemm_fma.h, test_cpu_gemm_fma) */
    ex.f16_gemm = PAGODA_F16GEMM_DPBF16;
    if (native) {
        ck_assert(pagoda_cpu_bf16_applies(&ex, PAGODA_DTYPE_BF16, T, K));
        /* f16_gemm = dpbf16 said in so many words takes F16 too (rounded) */
        ck_assert(pagoda_cpu_bf16_applies(&ex, PAGODA_DTYPE_F16, T, K));
        ck_assert(!pagoda_cpu_matmul_exact(&ex, PAGODA_DTYPE_F16, T));
        ck_assert(!pagoda_cpu_matmul_exact(&ex, PAGODA_DTYPE_BF16, T));
        /* ... but never under batch_invariant (F16 stays on the lanes
         * kernels at every T; BF16 is not covered by the mode) */
        ex.batch_invariant = true;
        ck_assert(!pagoda_cpu_bf16_applies(&ex, PAGODA_DTYPE_F16, T, K));
        ck_assert(pagoda_cpu_bf16_applies(&ex, PAGODA_DTYPE_BF16, T, K));
        ex.batch_invariant = false;
        ck_assert_int_eq(pagoda_cpu_matmul(&ex, x, sizeof(float) * (size_t)K, T, K, w, PAGODA_DTYPE_BF16,
                                           2 * (size_t)K, N, NULL, out, sizeof(float) * (size_t)N), PAGODA_OK);
        check_out(x, T, K, wf, PAGODA_DTYPE_BF16, N, NULL, out, N, "matmul");
    }
    ex.f16_gemm = PAGODA_F16GEMM_AUTO;
    /* auto never rounds F16 weights to BF16 */
    if (native) ck_assert(!pagoda_cpu_bf16_applies(&ex, PAGODA_DTYPE_F16, T, K));
    pagoda_cpu_exec_release(&ex);
    free(x); free(wf); free(out); free(w);
}
END_TEST

/* The AMX-BF16 GEMM on odd shapes: T 16..100 (token groups and pairs with
 * a short last one), K not a multiple of 32 (padded steps) and one that
 * is, N below, at and across 16-row groups and 32-row pairs, both weight
 * types, bias or not, one thread or three; the emulation everywhere
 * (faults counted: none), the real tiles where granted. */
START_TEST(test_amxbf16_gemm_shapes)
{
    if (pagoda_cpu_detect_isa() < PAGODA_CPU_ISA_AVX2) return;  /* the packing is SIMDe's on AVX2 */
    static const int64_t Ts[] = {16, 17, 31, 33, 48, 100};
    static const int64_t Ks[] = {2, 30, 64, 96, 130, 258};
    static const int64_t Ns[] = {1, 15, 16, 17, 33, 64, 200};
    bool real = pagoda_cpu_bf16_path() == PAGODA_BF16_PATH_AMX;
    tu_rng r;
    tu_rng_seed(&r, 31);
    pagoda_threadpool *pool = NULL;
    ck_assert_int_eq(pagoda_threadpool_create(3, &pool), PAGODA_OK);
    for (int dt = 0; dt < 2; dt++) {
        int dtype = dt ? PAGODA_DTYPE_BF16 : PAGODA_DTYPE_F16;
        for (size_t a = 0; a < sizeof Ts / sizeof Ts[0]; a++)
            for (size_t b = 0; b < sizeof Ks / sizeof Ks[0]; b++) {
                int64_t T = Ts[a], K = Ks[b], N = Ns[(a + 2 * b + dt) % (sizeof Ns / sizeof Ns[0])];
                float *x = tu_xmalloc(sizeof(float) * (size_t)(T * K));
                float *wf = tu_xmalloc(sizeof(float) * (size_t)(N * K));
                float *bias = tu_xmalloc(sizeof(float) * (size_t)N);
                int64_t ldo = N + 5;
                float *out = tu_xmalloc(sizeof(float) * (size_t)(T * ldo));
                tu_fill_normal(&r, x, (size_t)(T * K), 1.0f);
                tu_fill_normal(&r, bias, (size_t)N, 1.0f);
                uint16_t *w = tu_half_weights(&r, dtype, N, K, wf);
                bool with_bias = (a + b) % 2;
                pagoda_cpu_mat m = {.w = w, .dtype = dtype, .w_stride = sizeof(uint16_t) * (size_t)K, .N = N,
                                    .bias = with_bias ? bias : NULL, .out = out,
                                    .out_stride = sizeof(float) * (size_t)ldo};
                for (int v = 0; v < (real ? 2 : 1); v++) {
                    pagoda_cpu_exec ex = {.pool = (a + v) % 2 ? pool : NULL};
                    for (int64_t i = 0; i < T * ldo; i++) out[i] = NAN;  /* every output written */
                    (void)pagoda_tile_emu_faults();
                    ck_assert_int_eq(pagoda_cpu_amxbf16_matmul(&ex, v ? &pagoda_bf16_native : &pagoda_bf16_simde,
                                                               v ? pagoda_amxbf16_gemm_amx
                                                                 : pagoda_amxbf16_gemm_amx_emu,
                                                               x, sizeof(float) * (size_t)K, T, K, &m, 1),
                                     PAGODA_OK);
                    ck_assert_int_eq(pagoda_tile_emu_faults(), 0);  /* this thread's share */
                    check_out(x, T, K, wf, dtype, N, with_bias ? bias : NULL, out, ldo,
                              v ? "AMX-BF16" : "AMX-BF16 emulated");
                    for (int64_t t = 0; t < T; t++)
                        for (int64_t n = N; n < ldo; n++)
                            ck_assert_msg(isnan(out[t * ldo + n]), "wrote past N at [%lld,%lld]", (long long)t,
                                          (long long)n);
                    pagoda_cpu_exec_release(&ex);
                }
                free(x); free(wf); free(bias); free(out); free(w);
            }
    }
    pagoda_threadpool_destroy(pool);
}
END_TEST

/* Several matrices of both types share one packing, with rows strided
 * wider than K (a view): BF16 whole tiles read in place, the rest copied. */
START_TEST(test_amxbf16_gemm_multi)
{
    if (pagoda_cpu_detect_isa() < PAGODA_CPU_ISA_AVX2) return;
    tu_rng r;
    tu_rng_seed(&r, 32);
    int64_t T = 40, K = 128, ws = K + 32, Nn[3] = {96, 40, 37};
    int dts[3] = {PAGODA_DTYPE_BF16, PAGODA_DTYPE_F16, PAGODA_DTYPE_BF16};
    bool real = pagoda_cpu_bf16_path() == PAGODA_BF16_PATH_AMX;
    pagoda_threadpool *pool = NULL;
    ck_assert_int_eq(pagoda_threadpool_create(2, &pool), PAGODA_OK);
    float *x = tu_xmalloc(sizeof(float) * (size_t)(T * K));
    tu_fill_normal(&r, x, (size_t)(T * K), 2.0f);
    float *wf[3], *out[3];
    uint16_t *w[3];
    pagoda_cpu_mat m[3];
    for (int i = 0; i < 3; i++) {
        float *wk = tu_xmalloc(sizeof(float) * (size_t)(Nn[i] * ws));
        wf[i] = tu_xmalloc(sizeof(float) * (size_t)(Nn[i] * K));
        out[i] = tu_xmalloc(sizeof(float) * (size_t)(T * Nn[i]));
        w[i] = tu_half_weights(&r, dts[i], Nn[i], ws, wk);
        for (int64_t n = 0; n < Nn[i]; n++) memcpy(wf[i] + n * K, wk + n * ws, sizeof(float) * (size_t)K);
        free(wk);
        m[i] = (pagoda_cpu_mat){.w = w[i], .dtype = dts[i], .w_stride = 2 * (size_t)ws, .N = Nn[i],
                                .out = out[i], .out_stride = sizeof(float) * (size_t)Nn[i]};
    }
    for (int v = 0; v < (real ? 2 : 1); v++) {
        pagoda_cpu_exec ex = {.pool = pool};
        ck_assert_int_eq(pagoda_cpu_amxbf16_matmul(&ex, v ? &pagoda_bf16_native : &pagoda_bf16_simde,
                                                   v ? pagoda_amxbf16_gemm_amx : pagoda_amxbf16_gemm_amx_emu, x,
                                                   sizeof(float) * (size_t)K, T, K, m, 3),
                         PAGODA_OK);
        for (int i = 0; i < 3; i++) check_out(x, T, K, wf[i], dts[i], Nn[i], NULL, out[i], Nn[i], "AMX-BF16 multi");
        pagoda_cpu_exec_release(&ex);
    }
    for (int i = 0; i < 3; i++) { free(wf[i]); free(out[i]); free(w[i]); }
    free(x);
    pagoda_threadpool_destroy(pool);
}
END_TEST

/* Bad input: the same refusals as the vdpbf16ps driver. */
START_TEST(test_amxbf16_rejects_bad_input)
{
    pagoda_cpu_exec ex = {0};
    uint16_t w[4] = {0};
    float x[4] = {0}, out[4];
    pagoda_cpu_mat m = {.w = w, .dtype = PAGODA_DTYPE_BF16, .w_stride = 6, .N = 1, .out = out, .out_stride = 4};
    ck_assert_int_eq(pagoda_cpu_amxbf16_matmul(&ex, &pagoda_bf16_simde, pagoda_amxbf16_gemm_amx_emu, x, 12, 1, 3,
                                               &m, 1), PAGODA_ERR_INVALID);
    m.dtype = PAGODA_DTYPE_Q8_0;
    ck_assert_int_eq(pagoda_cpu_amxbf16_matmul(&ex, &pagoda_bf16_simde, pagoda_amxbf16_gemm_amx_emu, x, 8, 1, 2,
                                               &m, 1), PAGODA_ERR_INVALID);
    ck_assert_int_eq(pagoda_cpu_amxbf16_matmul(&ex, &pagoda_bf16_simde, pagoda_amxbf16_gemm_amx_emu, x, 8, 1, 2,
                                               &m, 0), PAGODA_ERR_INVALID);
    pagoda_cpu_exec_release(&ex);
}
END_TEST

/* Which BF16 GEMM each level runs: AMX tiles only at the AMX level with
 * AMX-BF16, vdpbf16ps when avx512 is forced there, none on AVX2; and
 * pagoda_cpu_matmul on the AMX path stays within the BF16 bound. */
START_TEST(test_amxbf16_dispatch)
{
    int det = pagoda_cpu_detect_isa();
    pagoda_cpu_force_isa(PAGODA_CPU_ISA_AVX2);
    ck_assert_int_eq(pagoda_cpu_bf16_path(), PAGODA_BF16_PATH_NONE);
    ck_assert_str_eq(pagoda_cpu_bf16_path_name(pagoda_cpu_bf16_path()), "none");
    pagoda_cpu_force_isa(-1);
    if (det < PAGODA_CPU_ISA_AVX512 || !pagoda_cpu_has_avx512_bf16() || getenv("PAGODA_CPU_ISA")) return;
    pagoda_cpu_force_isa(PAGODA_CPU_ISA_AVX512);
    ck_assert_int_eq(pagoda_cpu_bf16_path(), PAGODA_BF16_PATH_AVX512);
    ck_assert_str_eq(pagoda_cpu_bf16_path_name(PAGODA_BF16_PATH_AVX512), "AVX512-BF16");
    pagoda_cpu_force_isa(-1);
    bool amx = det == PAGODA_CPU_ISA_AMX && pagoda_amx_has_bf16();
    ck_assert_int_eq(pagoda_cpu_bf16_path(), amx ? PAGODA_BF16_PATH_AMX : PAGODA_BF16_PATH_AVX512);
    if (!amx || getenv("PAGODA_CPU_BF16") || getenv("PAGODA_CPU_BF16_MIN_T")) return;
    ck_assert_str_eq(pagoda_cpu_bf16_path_name(PAGODA_BF16_PATH_AMX), "AMX-BF16 tiles");
    int64_t T = 16, K = 2048, N = 48;
    tu_rng r;
    tu_rng_seed(&r, 33);
    float *x = tu_xmalloc(sizeof(float) * (size_t)(T * K)), *wf = tu_xmalloc(sizeof(float) * (size_t)(N * K));
    float *out = tu_xmalloc(sizeof(float) * (size_t)(T * N));
    tu_fill_normal(&r, x, (size_t)(T * K), 1.0f);
    uint16_t *w = tu_half_weights(&r, PAGODA_DTYPE_BF16, N, K, wf);
    pagoda_cpu_exec ex = {0};
    ck_assert(pagoda_cpu_bf16_applies(&ex, PAGODA_DTYPE_BF16, T, K));
    ck_assert_int_eq(pagoda_cpu_matmul(&ex, x, sizeof(float) * (size_t)K, T, K, w, PAGODA_DTYPE_BF16,
                                       2 * (size_t)K, N, NULL, out, sizeof(float) * (size_t)N), PAGODA_OK);
    /* K = 2048: the F32 sums' bound is K * 2^-24 = 1.2e-4, not 2e-5 */
    for (int64_t t = 0; t < T; t++)
        for (int64_t n = 0; n < N; n++) {
            double mag;
            double exact = tu_dot_exact(x + t * K, wf + n * K, K, &mag);
            ck_assert_msg(fabs(out[t * N + n] - exact) <= (0x1p-8 + 2e-4) * mag + 1e-6,
                          "matmul on AMX-BF16 [%lld,%lld]: %.8g vs %.8g", (long long)t, (long long)n,
                          out[t * N + n], exact);
        }
    pagoda_cpu_exec_release(&ex);
    free(x); free(wf); free(out); free(w);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cpu_bf16");
    TCase *tc = tcase_create("bf16");
    tcase_add_test(tc, test_bf16_gemm_shapes);
    tcase_add_test(tc, test_bf16_gemm_multi);
    tcase_add_test(tc, test_bf16_pack_bits);
    tcase_add_test(tc, test_bf16_f16_conversion_every_value);
    tcase_add_test(tc, test_bf16_rejects_bad_input);
    tcase_add_test(tc, test_bf16_matmul_dispatch);
    tcase_add_test(tc, test_amxbf16_gemm_shapes);
    tcase_add_test(tc, test_amxbf16_gemm_multi);
    tcase_add_test(tc, test_amxbf16_rejects_bad_input);
    tcase_add_test(tc, test_amxbf16_dispatch);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
