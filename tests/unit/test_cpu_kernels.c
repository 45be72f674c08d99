/*
 * test_cpu_kernels.c: every CPU kernel against a plain reference, on seeded
 * random inputs, with the scalar and the AVX2 path forced in turn.
 * Tolerances (why each is what it is):
 *  - matmul F32/F16/BF16: the weights are exact after conversion, so only
 *    float summation order differs: |err| <= 1e-5 * sum|x*w| + 1e-6.
 *  - matmul with T >= PAGODA_CPU_GEMM_MIN_T, F16/BF16 weights:
 *    exact weights, sgemm: as above (Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/IQ4_NL and
 *    the 256-value types stay quantized; pagoda_cpu_matmul_exact says which).
 *  - matmul quantized, fewer rows: activations are quantized to int8 (step d = amax/127
 *    per 32 values, or 256 for the K-quants and IQ4_XS). Against the same product computed in double
 *    from the dequantized weights and the dequantized int8 activations:
 *    1e-5 * sum|x*w| + 1e-5 (only float rounding left). Against the plain
 *    f32 product: per output the hard bound sum_k |w_k| * d_k / 2, and the
 *    RMS of err / sigma over all outputs <= 2, sigma^2 = sum_k w_k^2 d_k^2 / 12
 *    (rounding error uniform in +-d/2).
 *  - scalar vs AVX2 matmul: same integer sums, float order differs: 1e-5.
 *  - rms_norm, swiglu, rope: 1e-5 relative / absolute (values O(1)).
 *  - geglu: against libm's tanh in double, ~1e-6 relative (the test says
 *    why); attention with a sliding window: as attention.
 *  - attention: against a dense softmax in double over the values as stored
 *    (rounded to F16 for an F16 cache): 1e-4 absolute (outputs O(1)).
 *  - get_rows, kv_write (F32), copy_blocks, add: exact.
 */
#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_features.h"
#include "kernels.h"
#include "quant.h"
#include "testutil.h"
#include "threadpool.h"
#include "vecdot.h"

#include "cpu_paths.h"
/* scalar, then every faster path this host runs (cpu_paths.h: PATHS) */
#define N_ISAS cpu_paths_count()

/* A CPU that runs the AVX-512 VNNI level (its table holds MXFP4's VNNI lanes kernel). */
static bool has_vnni(void)
{
    return pagoda_cpu_detect_isa() >= PAGODA_CPU_ISA_AVX512 && __builtin_cpu_supports("avx512vnni") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}

/* ------------------------------------------------------------ thread pool */

typedef struct pool_probe {
    int hits[16];
    int nth_seen;
} pool_probe;

static void pool_fn(void *arg, int ith, int nth)
{
    pool_probe *p = arg;
    __atomic_fetch_add(&p->hits[ith], 1, __ATOMIC_RELAXED);
    __atomic_store_n(&p->nth_seen, nth, __ATOMIC_RELAXED);  /* every thread writes it */
}

START_TEST(test_threadpool_runs_each_thread_once)
{
    for (int n = 1; n <= 4; n++) {
        pagoda_threadpool *tp = NULL;
        ck_assert_int_eq(pagoda_threadpool_create(n, &tp), PAGODA_OK);
        ck_assert_int_eq(pagoda_threadpool_size(tp), n);
        for (int r = 0; r < 500; r++) {
            pool_probe p;
            memset(&p, 0, sizeof p);
            pagoda_threadpool_run(tp, pool_fn, &p);
            ck_assert_int_eq(p.nth_seen, n);
            for (int i = 0; i < 16; i++) ck_assert_int_eq(p.hits[i], i < n ? 1 : 0);
        }
        pagoda_threadpool_destroy(tp);
    }
    pool_probe p;
    memset(&p, 0, sizeof p);
    pagoda_threadpool_run(NULL, pool_fn, &p);
    ck_assert_int_eq(p.hits[0], 1);
    ck_assert_int_eq(p.nth_seen, 1);
}
END_TEST

static void parts_fn(void *arg, int part, int n_parts)
{
    int *hits = arg;
    ck_assert_int_lt(part, n_parts);
    __atomic_fetch_add(&hits[part], 1, __ATOMIC_RELAXED);
}

/* Every part runs exactly once, whatever the part count and however the
 * threads race for them, across many back-to-back tasks (a late worker must
 * never run a part of a finished task). */
START_TEST(test_threadpool_parts_each_once)
{
    for (int n = 1; n <= 3; n++) {
        pagoda_threadpool *tp = NULL;
        ck_assert_int_eq(pagoda_threadpool_create(n, &tp), PAGODA_OK);
        for (int r = 0; r < 2000; r++) {
            int n_parts = r % 37;
            int hits[40] = {0};
            pagoda_threadpool_run_parts(tp, parts_fn, hits, n_parts);
            for (int i = 0; i < 40; i++) ck_assert_int_eq(hits[i], i < n_parts ? 1 : 0);
        }
        pagoda_threadpool_destroy(tp);
    }
    int hits[5] = {0};
    pagoda_threadpool_run_parts(NULL, parts_fn, hits, 5);
    for (int i = 0; i < 5; i++) ck_assert_int_eq(hits[i], 1);
}
END_TEST

/* ----------------------------------------------------- activation quant */

/* The KV store's F16 conversion: F16C and the scalar reference agree bit
 * for bit on normal, subnormal, halfway, overflow and signed-zero values. */
START_TEST(test_to_f16_scalar_equals_avx2)
{
    enum { N = 4099 };
    float *x = tu_xmalloc(sizeof(float) * N);
    uint16_t *a = tu_xmalloc(2 * N), *b = tu_xmalloc(2 * N);
    tu_rng r;
    tu_rng_seed(&r, 7);
    for (int i = 0; i < N; i++) {
        uint32_t bits = (uint32_t)tu_rng_u64(&r);
        switch (i % 6) {
        case 0: x[i] = (tu_rng_uniform(&r) - 0.5f) * 8.0f; break;              /* ordinary */
        case 1: x[i] = (tu_rng_uniform(&r) - 0.5f) * 1e-5f; break;             /* half subnormals */
        case 2: x[i] = (float)(int)(bits % 4096) * 0x1p-11f + 0x1p-22f * (float)(bits & 1); break;
        case 3: x[i] = (tu_rng_uniform(&r) - 0.5f) * 140000.0f; break;         /* overflow to inf */
        case 4: x[i] = (i & 8) ? -0.0f : 0.0f; break;
        default: {
            /* exact halfway between two halves: 11 significant bits + 1 */
            uint32_t m = (bits & 0x7ffu) | 0x800u;
            x[i] = ldexpf((float)(2 * m + 1), (int)(bits >> 27) % 20 - 25);
            break;
        }
        }
    }
    pagoda_vecdot_scalar.to_f16(x, a, N);
    if (pagoda_cpu_detect_isa() >= PAGODA_CPU_ISA_AVX2) {
        pagoda_vecdot_avx2.to_f16(x, b, N);
        for (int i = 0; i < N; i++)
            ck_assert_msg(a[i] == b[i], "x=%a: scalar %04x, F16C %04x", (double)x[i], a[i], b[i]);
    }
    for (int i = 0; i < N; i++) ck_assert_uint_eq(a[i], pagoda_fp32_to_fp16(x[i]));
    free(x);
    free(a);
    free(b);
}
END_TEST

/* SwiGLU: the AVX2 polynomial exp against libm's expf, over the range
 * activations take and past the clamps: within 4 ulp (relative 5e-7)
 * where the value is not tiny, and never NaN or inf. */
START_TEST(test_swiglu_avx2_near_scalar)
{
    if (pagoda_cpu_detect_isa() < PAGODA_CPU_ISA_AVX2) return;
    enum { N = 20003 };
    float *g = tu_xmalloc(sizeof(float) * N), *u = tu_xmalloc(sizeof(float) * N);
    float *a = tu_xmalloc(sizeof(float) * N), *b = tu_xmalloc(sizeof(float) * N);
    tu_rng r;
    tu_rng_seed(&r, 11);
    for (int i = 0; i < N; i++) {
        float span = i % 3 == 0 ? 200.0f : i % 3 == 1 ? 20.0f : 2.0f;
        g[i] = (tu_rng_uniform(&r) - 0.5f) * span;
        u[i] = (tu_rng_uniform(&r) - 0.5f) * 4.0f;
    }
    g[0] = -1000.0f;
    g[1] = 1000.0f;
    g[2] = 0.0f;
    g[3] = -87.5f;
    g[4] = 88.8f;
    pagoda_vecdot_scalar.swiglu(g, u, a, N);
    pagoda_vecdot_avx2.swiglu(g, u, b, N);
    for (int i = 0; i < N; i++) {
        ck_assert_msg(isfinite(b[i]), "g=%g: %g", (double)g[i], (double)b[i]);
        double tol = 5e-7 * fabs(a[i]) + 1e-30;
        ck_assert_msg(fabs((double)a[i] - b[i]) <= tol, "g=%.9g u=%.9g: expf %.9g, AVX2 %.9g", (double)g[i],
                      (double)u[i], (double)a[i], (double)b[i]);
    }
    free(g);
    free(u);
    free(a);
    free(b);
}
END_TEST

/* GeGLU: scalar and AVX2 against gelu_tanh's definition in double with
 * libm's tanh, 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) u: within
 * 1e-6 relative (plus what the float argument's rounding does to exp of
 * it) where the value is not tiny (where 1 + tanh cancels, the
 * kernels' sigmoid form is the more accurate one, and the absolute error
 * is below 1e-12), over the range activations take and past the clamps;
 * never NaN or inf. */
START_TEST(test_geglu_scalar_avx2_near_libm)
{
    enum { N = 20003 };
    float *g = tu_xmalloc(sizeof(float) * N), *u = tu_xmalloc(sizeof(float) * N);
    float *o = tu_xmalloc(sizeof(float) * N);
    tu_rng r;
    tu_rng_seed(&r, 12);
    for (int i = 0; i < N; i++) {
        float span = i % 3 == 0 ? 60.0f : i % 3 == 1 ? 12.0f : 2.0f;
        g[i] = (tu_rng_uniform(&r) - 0.5f) * span;
        u[i] = (tu_rng_uniform(&r) - 0.5f) * 4.0f;
    }
    const float edge[] = {-1e20f, 1e20f, -1000.0f, 1000.0f, 0.0f, -0.0f, -9.0f, 9.0f, 1e-20f, -1e-20f};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) g[i] = edge[i];
    const pagoda_vecdot_table *tabs[2] = {&pagoda_vecdot_scalar, &pagoda_vecdot_avx2};
    int n_tabs = pagoda_cpu_detect_isa() >= PAGODA_CPU_ISA_AVX2 ? 2 : 1;
    for (int t = 0; t < n_tabs; t++) {
        tabs[t]->geglu(g, u, o, N);
        for (int i = 0; i < N; i++) {
            double x = g[i], y = 0.7978845608028654 * (x + 0.044715 * x * x * x);
            double want = 0.5 * x * (1.0 + tanh(y)) * u[i];
            if (!isfinite(y)) want = x > 0 ? x * u[i] : 0.0;
            ck_assert_msg(isfinite(o[i]), "%s: g=%g: %g", t ? "AVX2" : "scalar", x, (double)o[i]);
            /* the float argument's rounding (~1e-7 relative) moves exp
             * by ~1e-7 x |2y| relative */
            double tol = (1e-6 + 3e-7 * fabs(2 * y)) * fabs(want) + 1e-12;
            ck_assert_msg(fabs(o[i] - want) <= tol, "%s: g=%.9g u=%.9g: got %.9g, libm %.9g",
                          t ? "AVX2" : "scalar", x, (double)u[i], (double)o[i], want);
        }
    }
    /* in place, as the forward pass runs it (out = gate) */
    memcpy(o, g, sizeof(float) * N);
    float *ref = tu_xmalloc(sizeof(float) * N);
    pagoda_vecdot_scalar.geglu(g, u, ref, N);
    pagoda_cpu_force_isa(PAGODA_CPU_ISA_SCALAR);
    pagoda_cpu_geglu(o, sizeof(float) * 1000, u, sizeof(float) * 1000, o, sizeof(float) * 1000, 20, 1000);
    cpu_path_reset();
    for (int i = 0; i < 20000; i++) ck_assert(o[i] == ref[i]);
    free(ref);
    free(g);
    free(u);
    free(o);
}
END_TEST

START_TEST(test_quant_activations_scalar_equals_avx2)
{
    if (pagoda_cpu_detect_isa() < PAGODA_CPU_ISA_AVX2) return;
    tu_rng r;
    tu_rng_seed(&r, 11);
    int K = 1024;
    float *x = tu_xmalloc(sizeof(float) * K);
    tu_fill_normal(&r, x, K, 3.0f);
    for (int j = 0; j < 32; j++) x[64 + j] = 0.0f;  /* an all-zero block */
    x[5] = 0.5f * (127.0f / 127.0f);                 /* some exact halves */
    pagoda_q8a_block a[32], b[32];
    pagoda_vecdot_scalar.quant_q8a(x, a, K);
    pagoda_vecdot_avx2.quant_q8a(x, b, K);
    ck_assert_int_eq(memcmp(a, b, sizeof a), 0);
    ck_assert(a[2].d == 0.0f && a[2].s == 0.0f);
    pagoda_q8k_block c[4], d[4];
    pagoda_vecdot_scalar.quant_q8k(x, c, K);
    pagoda_vecdot_avx2.quant_q8k(x, d, K);
    ck_assert_int_eq(memcmp(c, d, sizeof c), 0);
    for (int b = 0; b < 4; b++)
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += c[b].qs[16 * j + i];
            ck_assert_int_eq(c[b].bsums[j], sum);
        }
    /* The values come back within half a step. */
    for (int i = 0; i < K; i++) {
        float deq = a[i / 32].qs[i % 32] * a[i / 32].d;
        ck_assert_float_le(fabsf(deq - x[i]), a[i / 32].d * 0.5f * 1.0001f + 1e-30f);
    }
    free(x);
}
END_TEST

/* ----------------------------------------------------------------- matmul */

/* Where a 256-value type keeps its f16 super-block scale d and min
 * scale dmin (-1: none); -1 for the other types. */
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

/* Set every super-block's d (and dmin) of a row of a 256-value type. */
static void set_k_scales(tu_rng *r, int dtype, uint8_t *row, int64_t K)
{
    size_t bb = pagoda_dtype_row_bytes(dtype, 256);
    for (int64_t b = 0; b < K / 256; b++)
        for (int min = 0; min < 2; min++) {
            int off = k_scale_offset(dtype, min);
            if (off < 0) continue;
            uint16_t h = pagoda_fp32_to_fp16(0.0005f + 0.002f * tu_rng_uniform(r));
            memcpy(row + (size_t)b * bb + off, &h, 2);
        }
}

/* Random bytes for every 32-value block of a Q5_0 / Q5_1 / IQ4_NL / MXFP4
 * row (every bit pattern of the values is valid, so all of them are met),
 * with scales of the size quantizing N(0, 0.5) gives: Q5_0 d ~ 1.5 / 16,
 * Q5_1 d ~ 3 / 31 and m ~ -1.5, IQ4_NL d ~ 1.5 / 127, MXFP4 e ~ 122. */
static void random_blocks32(tu_rng *r, int dtype, uint8_t *p, int64_t K)
{
    int e, bb;
    ck_assert(pagoda_dtype_block(dtype, &e, &bb));
    for (int64_t b = 0; b < K / 32; b++) {
        uint8_t *blk = p + b * bb;
        for (int i = 0; i < bb; i++) blk[i] = (uint8_t)tu_rng_u64(r);
        float u = 0.5f + tu_rng_uniform(r);
        if (dtype == PAGODA_DTYPE_MXFP4) {
            /* E8M0: 2^(e-128) of 2^-7 .. 2^-4 (values up to 0.75) */
            blk[0] = (uint8_t)(121 + tu_rng_u64(r) % 4);
            continue;
        }
        uint16_t d = pagoda_fp32_to_fp16(dtype == PAGODA_DTYPE_IQ4_NL ? u * 0.012f
                                         : dtype == PAGODA_DTYPE_Q5_0 ? u * 0.094f : u * 0.097f);
        memcpy(blk, &d, 2);
        if (dtype == PAGODA_DTYPE_Q5_1) {
            uint16_t m = pagoda_fp32_to_fp16(-1.5f * u * (0.8f + 0.4f * tu_rng_uniform(r)));
            memcpy(blk + 2, &m, 2);
        }
    }
}

/* Weights of `dtype` [N x K], every row quantized from normal values
 * (sd 0.5) by the reference quantizer, which must have one for the type. */
static uint8_t *quantized_weights(tu_rng *r, int dtype, int64_t N, int64_t K, size_t *stride)
{
    size_t rb = pagoda_dtype_row_bytes(dtype, K);
    ck_assert_uint_gt(rb, 0);
    *stride = rb;
    uint8_t *w = tu_xmalloc(rb * (size_t)N);
    float *row = tu_xmalloc(sizeof(float) * (size_t)K);
    for (int64_t n = 0; n < N; n++) {
        tu_fill_normal(r, row, (size_t)K, 0.5f);
        ck_assert_int_eq(pagoda_quantize_row(dtype, row, w + (size_t)n * rb, K), PAGODA_OK);
    }
    free(row);
    return w;
}

/* Random weights of `dtype` [N x K]. The 256-value types (Q2_K..Q6_K,
 * IQ4_XS) are random bytes with small scales: every bit pattern is a valid
 * block, and random bytes reach every quant, scale, min and sign (a
 * quantizer's output would not: Q6_K has none anyway). Q5_0, Q5_1 and
 * IQ4_NL: odd rows random blocks (random_blocks32), even rows quantized
 * where the reference has a quantizer for the type. The rest: quantized_weights. */
static uint8_t *make_weights(tu_rng *r, int dtype, int64_t N, int64_t K, size_t *stride)
{
    bool blocks32 = dtype == PAGODA_DTYPE_Q5_0 || dtype == PAGODA_DTYPE_Q5_1 ||
                    dtype == PAGODA_DTYPE_IQ4_NL || dtype == PAGODA_DTYPE_MXFP4;
    bool k_scales = k_scale_offset(dtype, 0) >= 0;
    if (!k_scales && !blocks32) return quantized_weights(r, dtype, N, K, stride);
    size_t rb = pagoda_dtype_row_bytes(dtype, K);
    ck_assert_uint_gt(rb, 0);
    *stride = rb;
    uint8_t *w = tu_xmalloc(rb * (size_t)N);
    float *row = tu_xmalloc(sizeof(float) * (size_t)K);
    for (int64_t n = 0; n < N; n++) {
        if (k_scales) {
            uint8_t *p = w + (size_t)n * rb;
            for (size_t i = 0; i < rb; i++) p[i] = (uint8_t)tu_rng_u64(r);
            set_k_scales(r, dtype, p, K);
        } else {
            tu_fill_normal(r, row, (size_t)K, 0.5f);
            if (n % 2 || pagoda_quantize_row(dtype, row, w + (size_t)n * rb, K) == PAGODA_ERR_UNSUPPORTED)
                random_blocks32(r, dtype, w + (size_t)n * rb, K);
        }
    }
    free(row);
    return w;
}

typedef struct mm_case {
    int64_t T, K, N;
} mm_case;

static const mm_case MM_CASES[] = {
    {1, 256, 37}, {3, 512, 61}, {7, 768, 130}, {1, 1024, 5}, {16, 256, 33},
    {5, 256, 7}, {2, 512, 3}, {9, 256, 65}, /* tile edges: odd rows, 4 + 1 tokens */
    /* Q4_0 groups of 4 blocks with 1 and 3 blocks left over (not Q6_K:
     * its blocks are 256), token chunks 8 + 4 and 4 + 2 + 1. */
    {12, 288, 19}, {7, 224, 10},
    /* The same below the x8 kernels (the row x token kernels on Q4_0's
     * groups: Q4_0, Q5_0, Q5_1, IQ4_NL): no whole group, and 1 / 3 blocks
     * past the groups. */
    {2, 96, 9}, {1, 288, 5}, {3, 224, 17},
    /* Tokens in lanes (T >= 4; Q5_0 / Q5_1 / IQ4_NL from 5, so 4 is
     * their groups' 4-token tile): one group of 8 with 4 padding lanes, one
     * full group, groups 2 + 1 with 1 token in the last, 4 groups with 7
     * in the last, rows 8 / 4 / 1 at a time, F16 K chunks of 256 plus a
     * tail. 5 tokens: 3 padding lanes. */
    {4, 256, 13}, {8, 256, 13}, {17, 96, 9}, {31, 64, 21}, {24, 320, 11}, {16, 544, 6},
    {PAGODA_CPU_GEMM_MIN_T + 9, 512, 300}, /* dequantize + sgemm, two tiles (x8: 6 groups) */
    {150, 96, 7},                          /* x8: token chunks of 64 + 64 + 22 */
    {259, 64, 5}, /* F16: the blocked lanes kernel (AVX2), dequantize + sgemm (scalar) */
    /* F16's blocked lanes kernel (T >= 24): token chunks of 12 + 3 groups
     * (a triple, 1 token in the last group), K blocks of 128 x 6 + 32,
     * rows 16 + 4 + 3 (4-row tiles, then one at a time). */
    {113, 800, 23},
    /* The 256-value types' lanes kernels (the cases above with K % 256 ==
     * 0 cover one group with 4 padding lanes, one full group, 2 groups of
     * 8 and the single-token dots): groups 2 + 1 with 5 tokens in the
     * last and 23 rows (4-row tiles, then 3 rows one at a time), 4 groups
     * with 7 in the last, exactly 8 groups (one 64-token chunk), chunks of
     * 64 + 64 + 22 tokens, 6 rows (one tile + 2). */
    {21, 512, 23}, {31, 768, 21}, {64, 256, 17}, {150, 256, 6}, {3, 256, 6}, {6, 1024, 9},
};

static void check_matmul_type(int dtype)
{
    tu_rng r;
    tu_rng_seed(&r, 100 + (uint64_t)dtype);
    pagoda_threadpool *tp = NULL;
    ck_assert_int_eq(pagoda_threadpool_create(3, &tp), PAGODA_OK);
    pagoda_cpu_exec ex = {.pool = tp};
    for (size_t ci = 0; ci < sizeof MM_CASES / sizeof MM_CASES[0]; ci++) {
        int64_t T = MM_CASES[ci].T, K = MM_CASES[ci].K, N = MM_CASES[ci].N;
        int blk_elems = 0;
        ck_assert(pagoda_dtype_block(dtype, &blk_elems, NULL));
        if (K % blk_elems) continue;
        size_t ws;
        uint8_t *w = make_weights(&r, dtype, N, K, &ws);
        /* x rows padded (stride > row) to check strides are honoured. */
        size_t xs = sizeof(float) * (size_t)(K + 8), os = sizeof(float) * (size_t)(N + 3);
        float *x = tu_xmalloc(xs * (size_t)T), *bias = tu_xmalloc(sizeof(float) * (size_t)N);
        float *wd = tu_xmalloc(sizeof(float) * (size_t)(N * K));
        float *out[CPU_PATHS_MAX];
        bool bf16_path[CPU_PATHS_MAX] = {false};
        tu_fill_normal(&r, x, xs / sizeof(float) * (size_t)T, 1.0f);
        tu_fill_normal(&r, bias, (size_t)N, 1.0f);
        for (int64_t n = 0; n < N; n++)
            ck_assert_int_eq(pagoda_dequantize_row(dtype, w + n * ws, wd + n * K, K), PAGODA_OK);
        int qb = blk_elems == 256 ? 256 : 32;
        for (int ii = 0; ii < N_ISAS; ii++) {
            cpu_path_use(&PATHS[ii]);
            /* What this path does to the activations: int8 per block for an
             * integer type off the exact kernels, BF16 rounding in the BF16
             * GEMM for F16/BF16 off them (bounded by the tolerance below);
             * asked per path, after it is forced, since the answer is the
             * path's (BF16 is exact on AVX2, not on AVX-512) */
            bool inexact = !pagoda_cpu_matmul_exact(&ex, dtype, T);
            bf16_path[ii] = (dtype == PAGODA_DTYPE_F16 || dtype == PAGODA_DTYPE_BF16) && inexact;
            bool quant = inexact && !bf16_path[ii];
            out[ii] = tu_xmalloc(os * (size_t)T);
            const float *b = (ci & 1) ? bias : NULL;
            ck_assert_int_eq(pagoda_cpu_matmul(&ex, x, xs, T, K, w, dtype, ws, N, b, out[ii], os),
                             PAGODA_OK);
            double z_sq = 0.0;
            for (int64_t t = 0; t < T; t++) {
                const float *xr = (const float *)((const uint8_t *)x + t * xs);
                /* The activations as the kernel sees them. */
                float *xq = tu_xmalloc(sizeof(float) * (size_t)K), *dstep = tu_xmalloc(sizeof(float) * (size_t)K);
                for (int64_t k0 = 0; k0 < K; k0 += qb) {
                    float amax = 0.0f;
                    for (int j = 0; j < qb; j++) amax = fmaxf(amax, fabsf(xr[k0 + j]));
                    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                    for (int j = 0; j < qb; j++) {
                        xq[k0 + j] = quant ? nearbyintf(xr[k0 + j] * id) * d : xr[k0 + j];
                        dstep[k0 + j] = quant ? d : 0.0f;
                    }
                }
                for (int64_t n = 0; n < N; n++) {
                    const float *wr = wd + n * K;
                    double exact = 0.0, seen = 0.0, mag = 0.0, bound = 0.0, var = 0.0;
                    for (int64_t k = 0; k < K; k++) {
                        exact += (double)xr[k] * wr[k];
                        seen += (double)xq[k] * wr[k];
                        mag += fabs((double)xr[k] * wr[k]);
                        bound += fabs((double)wr[k]) * dstep[k] * 0.5;
                        var += (double)wr[k] * wr[k] * dstep[k] * dstep[k] / 12.0;
                    }
                    if (b) {
                        exact += b[n];
                        seen += b[n];
                    }
                    float got = ((const float *)((const uint8_t *)out[ii] + t * os))[n];
                    /* F16 / BF16 through the BF16 GEMM (gemm_bf16.h): within 2^-7 of it */
                    double tol = bf16_path[ii] ? 0x1p-7 * mag + 1e-5 : 1e-5 * mag + 1e-5;
                    ck_assert_msg(fabs(got - seen) <= tol,
                                  "%s path %s T=%lld K=%lld N=%lld t=%lld n=%lld: got %.7g want %.7g (tol %.3g)",
                                  pagoda_dtype_name(dtype), PATHS[ii].name, (long long)T, (long long)K,
                                  (long long)N, (long long)t, (long long)n, got, seen, tol);
                    if (quant) {
                        ck_assert_msg(fabs(got - exact) <= bound * 1.001 + tol,
                                      "%s: |%.7g - %.7g| above the rounding bound %.3g",
                                      pagoda_dtype_name(dtype), got, exact, bound);
                        if (var > 0) z_sq += (got - exact) * (got - exact) / var;
                    }
                }
                free(xq);
                free(dstep);
            }
            if (quant) {
                double z_rms = sqrt(z_sq / (double)(T * N));
                ck_assert_msg(z_rms <= 2.0, "%s: RMS error %.2f sigma", pagoda_dtype_name(dtype), z_rms);
            }
        }
        /* Every path agrees closely with the scalar one (same integer sums;
         * the BF16 GEMM's rounding is bounded above instead). */
        for (int ii = 1; ii < N_ISAS; ii++)
            for (int64_t t = 0; t < T && !bf16_path[ii]; t++)
                for (int64_t n = 0; n < N; n++) {
                    float a = ((const float *)((const uint8_t *)out[0] + t * os))[n];
                    float c = ((const float *)((const uint8_t *)out[ii] + t * os))[n];
                    ck_assert_msg(fabsf(a - c) <= 1e-5f * (fabsf(a) + 10.0f),
                                  "%s T=%lld K=%lld t=%lld n=%lld: scalar %.7g vs %s %.7g", pagoda_dtype_name(dtype),
                                  (long long)T, (long long)K, (long long)t, (long long)n, a, PATHS[ii].name, c);
                }
        for (int ii = 0; ii < N_ISAS; ii++) free(out[ii]);
        free(x);
        free(bias);
        free(wd);
        free(w);
    }
    cpu_path_reset();
    pagoda_cpu_exec_release(&ex);
    pagoda_threadpool_destroy(tp);
}

START_TEST(test_matmul_f32) { check_matmul_type(PAGODA_DTYPE_F32); }
END_TEST
START_TEST(test_matmul_f16) { check_matmul_type(PAGODA_DTYPE_F16); }
END_TEST
START_TEST(test_matmul_bf16) { check_matmul_type(PAGODA_DTYPE_BF16); }
END_TEST
START_TEST(test_matmul_q8_0) { check_matmul_type(PAGODA_DTYPE_Q8_0); }
END_TEST
START_TEST(test_matmul_q4_0) { check_matmul_type(PAGODA_DTYPE_Q4_0); }
END_TEST
START_TEST(test_matmul_q4_1) { check_matmul_type(PAGODA_DTYPE_Q4_1); }
END_TEST
START_TEST(test_matmul_q6_k) { check_matmul_type(PAGODA_DTYPE_Q6_K); }
END_TEST
START_TEST(test_matmul_q2_k) { check_matmul_type(PAGODA_DTYPE_Q2_K); }
END_TEST
START_TEST(test_matmul_q3_k) { check_matmul_type(PAGODA_DTYPE_Q3_K); }
END_TEST
START_TEST(test_matmul_q4_k) { check_matmul_type(PAGODA_DTYPE_Q4_K); }
END_TEST
START_TEST(test_matmul_q5_k) { check_matmul_type(PAGODA_DTYPE_Q5_K); }
END_TEST
START_TEST(test_matmul_iq4_xs) { check_matmul_type(PAGODA_DTYPE_IQ4_XS); }
END_TEST

/* The packed scales (and mins) of a 256-value type's block. */
static void k_scales_bytes(int dtype, size_t *off, size_t *len)
{
    switch (dtype) {
    case PAGODA_DTYPE_Q2_K: *off = offsetof(pagoda_block_q2_K, scales); *len = 16; break;
    case PAGODA_DTYPE_Q3_K: *off = offsetof(pagoda_block_q3_K, scales); *len = 12; break;
    case PAGODA_DTYPE_Q4_K: *off = offsetof(pagoda_block_q4_K, scales); *len = 12; break;
    case PAGODA_DTYPE_Q5_K: *off = offsetof(pagoda_block_q5_K, scales); *len = 12; break;
    case PAGODA_DTYPE_Q6_K: *off = offsetof(pagoda_block_q6_K, scales); *len = 16; break;
    default: *off = offsetof(pagoda_block_iq4_xs, scales_h); *len = 6; break;
    }
}

/* The int16 headroom of the 256-value kernels (vecdot_k_x8_avx2.c sums as
 * many groups of maddubs pairs in int16 as fit, and takes Q3_K's / Q6_K's
 * offsets off in wrapping int16): every quant at its largest (all bytes
 * 0xFF), then at its smallest (quant bytes 0x00, scales 0xFF), against
 * activations all +amax, all -amax, and alternating, on the dot and the
 * lanes paths, both ISAs, against the dequantized weights. A kernel that
 * summed one group too many would wrap here (random data almost never
 * reaches these sums). */
START_TEST(test_matmul_k_extremes)
{
    static const int types[] = {PAGODA_DTYPE_Q2_K, PAGODA_DTYPE_Q3_K, PAGODA_DTYPE_Q4_K,
                                PAGODA_DTYPE_Q5_K, PAGODA_DTYPE_Q6_K, PAGODA_DTYPE_IQ4_XS};
    enum { K = 512, N = 5, T = 9 };
    tu_rng r;
    tu_rng_seed(&r, 77);
    pagoda_threadpool *tp = NULL;
    ck_assert_int_eq(pagoda_threadpool_create(2, &tp), PAGODA_OK);
    pagoda_cpu_exec ex = {.pool = tp};
    float *x = tu_xmalloc(sizeof(float) * T * K), *wd = tu_xmalloc(sizeof(float) * N * K);
    float *out = tu_xmalloc(sizeof(float) * T * N);
    for (int t = 0; t < T; t++)
        for (int k = 0; k < K; k++) x[t * K + k] = t % 3 == 0 ? 2.0f : t % 3 == 1 ? -2.0f : (k & 1 ? 2.0f : -2.0f);
    for (size_t ti = 0; ti < 2 * sizeof types / sizeof types[0]; ti++) {
        int dt = types[ti / 2];
        size_t rb = pagoda_dtype_row_bytes(dt, K), bb = pagoda_dtype_row_bytes(dt, 256), so, sl;
        uint8_t *w = tu_xmalloc(rb * N);
        memset(w, ti % 2 ? 0x00 : 0xFF, rb * N);
        k_scales_bytes(dt, &so, &sl);
        for (size_t b = 0; b < rb * N / bb; b++) memset(w + b * bb + so, 0xFF, sl);
        for (int n = 0; n < N; n++) {
            set_k_scales(&r, dt, w + n * rb, K);
            ck_assert_int_eq(pagoda_dequantize_row(dt, w + n * rb, wd + n * K, K), PAGODA_OK);
        }
        for (int ii = 0; ii < N_ISAS; ii++) {
            cpu_path_use(&PATHS[ii]);
            for (int64_t tt = 1; tt <= T; tt += T - 1) { /* the dot (1 token) and the lanes (9) */
                ck_assert_int_eq(pagoda_cpu_matmul(&ex, x, sizeof(float) * K, tt, K, w, dt, rb, N, NULL, out,
                                                   sizeof(float) * N),
                                 PAGODA_OK);
                for (int64_t t = 0; t < tt; t++)
                    for (int n = 0; n < N; n++) {
                        /* +-2.0 quantize exactly to +-127 * (2 / 127). */
                        double mag;
                        double want = tu_dot_exact(x + t * K, wd + n * K, K, &mag);
                        ck_assert_msg(fabs(out[t * N + n] - want) <= 1e-5 * mag + 1e-5,
                                      "%s fill %s path %s T=%lld t=%lld n=%d: %.7g want %.7g", pagoda_dtype_name(dt),
                                      ti % 2 ? "00" : "FF", PATHS[ii].name, (long long)tt, (long long)t, n, out[t * N + n],
                                      want);
                    }
            }
        }
        free(w);
    }
    cpu_path_reset();
    pagoda_cpu_exec_release(&ex);
    pagoda_threadpool_destroy(tp);
    free(x);
    free(wd);
    free(out);
}
END_TEST

/* The tokens-in-lanes kernels of the 32-value types repeat the AVX2 lanes
 * kernels' float steps at every level (AVX-VNNI, AVX-512 VNNI, natively
 * and through SIMDe), so a token's logits do not depend on which kernel
 * its batch's size picks (5-8 tokens take the 256-bit lanes at the
 * AVX-512 level, 9 and more the 512-bit ones): bit for bit, not within a
 * tolerance. Found on an AVX-512 host without AMX: Q4_1's and Q5_1's
 * VNNI lanes rounded m_w x d_x sum(x) in another order. */
START_TEST(test_lanes_same_bits_every_level)
{
    static const int types[] = {PAGODA_DTYPE_Q8_0, PAGODA_DTYPE_Q4_0, PAGODA_DTYPE_Q5_0,
                                PAGODA_DTYPE_Q5_1, PAGODA_DTYPE_Q4_1, PAGODA_DTYPE_IQ4_NL};
    static const int64_t Ts[] = {6, 12, 27};
    enum { K = 512, N = 13, TMAX = 27 };
    tu_rng r;
    tu_rng_seed(&r, 91);
    pagoda_threadpool *tp = NULL;
    ck_assert_int_eq(pagoda_threadpool_create(2, &tp), PAGODA_OK);
    pagoda_cpu_exec ex = {.pool = tp};
    float *x = tu_xmalloc(sizeof(float) * TMAX * K);
    float *ref = tu_xmalloc(sizeof(float) * TMAX * N), *out = tu_xmalloc(sizeof(float) * TMAX * N);
    tu_fill_normal(&r, x, (size_t)TMAX * K, 1.0f);
    int checked = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        int dt = types[ti];
        size_t rb;
        uint8_t *w = quantized_weights(&r, dt, N, K, &rb);
        for (size_t k = 0; k < sizeof Ts / sizeof Ts[0]; k++) {
            int64_t T = Ts[k];
            int avx2 = -1;
            for (int ii = 0; ii < N_ISAS; ii++)
                if (PATHS[ii].isa == PAGODA_CPU_ISA_AVX2 && PATHS[ii].tab == NULL) avx2 = ii;
            if (avx2 < 0) break; /* no AVX2: nothing to compare */
            cpu_path_use(&PATHS[avx2]);
            ck_assert_int_eq(pagoda_cpu_matmul(&ex, x, sizeof(float) * K, T, K, w, dt, rb, N, NULL, ref,
                                               sizeof(float) * N),
                             PAGODA_OK);
            for (int ii = 0; ii < N_ISAS; ii++) {
                if (ii == avx2 || PATHS[ii].isa == PAGODA_CPU_ISA_SCALAR) continue;
                cpu_path_use(&PATHS[ii]);
                memset(out, 0xff, sizeof(float) * TMAX * N);
                ck_assert_int_eq(pagoda_cpu_matmul(&ex, x, sizeof(float) * K, T, K, w, dt, rb, N, NULL, out,
                                                   sizeof(float) * N),
                                 PAGODA_OK);
                for (int64_t j = 0; j < T * N; j++)
                    ck_assert_msg(memcmp(&out[j], &ref[j], sizeof(float)) == 0,
                                  "%s T=%lld path %s [t %lld, n %lld]: %.9g, AVX2 lanes %.9g", pagoda_dtype_name(dt),
                                  (long long)T, PATHS[ii].name, (long long)(j / N), (long long)(j % N), out[j],
                                  ref[j]);
                checked++;
            }
        }
        free(w);
    }
    cpu_path_reset();
    /* every path but scalar and AVX2 compared, for each type and T; every
     * AVX2 host has at least the two SIMDe tables among them, but under
     * TSan, which runs the native paths alone (cpu_paths.h): there an
     * AVX2-only host (Zen 3) has none and Zen 4 one */
    int others = 0;
    for (int ii = 0; ii < N_ISAS; ii++)
        if (PATHS[ii].isa != PAGODA_CPU_ISA_SCALAR && !(PATHS[ii].isa == PAGODA_CPU_ISA_AVX2 && !PATHS[ii].tab))
            others++;
    if (pagoda_cpu_detect_isa() >= PAGODA_CPU_ISA_AVX2) {
        ck_assert_int_eq(checked, others * 6 * 3);
#if !defined(__SANITIZE_THREAD__)
        ck_assert_int_ge(others, 2);
#endif
    }
    pagoda_cpu_exec_release(&ex);
    pagoda_threadpool_destroy(tp);
    free(x);
    free(ref);
    free(out);
}
END_TEST

/* Q8_0 weights of -128 (valid int8 the quantizer never writes, but a GGUF
 * file may hold) against negative activations, on every path and at every
 * T that picks another kernel (per-row dots, row x token tiles, tokens in
 * lanes, the repacked GEMM, AMX tiles where granted). The AVX2 tiles put
 * a sign onto one operand and take the other's magnitude: the sign of x
 * put onto -128 overflows int8 (-(-128) = -128) and flips the product,
 * so the weight must be the magnitude. The inputs make every path exact:
 * each 32-value block of a token holds +-127 (activation scale 1, its
 * values integers), the weight scale is 1/64, and |sum| < 2^17, so every
 * partial sum is a multiple of 1/64 below 2^18: a float holds it exactly
 * in any order. */
START_TEST(test_q8_0_minus128_every_path)
{
    static const int64_t Ts[] = {1, 3, 8, 16, 27, 64};
    enum { K = 512, N = 16, TMAX = 64, NB = K / 32 };
    tu_rng r;
    tu_rng_seed(&r, 128);
    pagoda_threadpool *tp = NULL;
    ck_assert_int_eq(pagoda_threadpool_create(2, &tp), PAGODA_OK);
    pagoda_cpu_exec ex = {.pool = tp};
    size_t rb = pagoda_dtype_row_bytes(PAGODA_DTYPE_Q8_0, K);
    ck_assert_uint_eq(rb, NB * sizeof(pagoda_blk_q8_0));
    pagoda_blk_q8_0 *w = tu_xmalloc(rb * N);
    int8_t *wq = tu_xmalloc((size_t)N * K);
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < K; i++) {
            /* a quarter -128, the rest any int8 value */
            int v = tu_rng_u64(&r) % 4 == 0 ? -128 : (int)(tu_rng_u64(&r) % 256) - 128;
            wq[n * K + i] = (int8_t)v;
            w[n * NB + i / 32].qs[i % 32] = (int8_t)v;
            w[n * NB + i / 32].d = pagoda_fp32_to_fp16(1.0f / 64);
        }
    float *x = tu_xmalloc(sizeof(float) * TMAX * K);
    for (int64_t i = 0; i < TMAX * K; i++)
        x[i] = i % 32 == 0 ? (tu_rng_u64(&r) % 2 ? 127.0f : -127.0f) : (float)((int)(tu_rng_u64(&r) % 255) - 127);
    float *ref = tu_xmalloc(sizeof(float) * TMAX * N), *out = tu_xmalloc(sizeof(float) * TMAX * N);
    int64_t neg = 0;
    for (int64_t t = 0; t < TMAX; t++)
        for (int64_t n = 0; n < N; n++) {
            int64_t s = 0;
            for (int64_t i = 0; i < K; i++) {
                s += (int64_t)wq[n * K + i] * (int64_t)x[t * K + i];
                neg += wq[n * K + i] == -128 && x[t * K + i] < 0;
            }
            ck_assert(llabs(s) < (1 << 23));
            ref[t * N + n] = (float)s / 64.0f;
        }
    ck_assert_int_gt(neg, 1000); /* the case the sign trick gets wrong */
    int checked = 0;
    for (int ii = 0; ii < N_ISAS; ii++) {
        cpu_path_use(&PATHS[ii]);
        for (size_t k = 0; k < sizeof Ts / sizeof Ts[0]; k++) {
            int64_t T = Ts[k];
            memset(out, 0xff, sizeof(float) * TMAX * N);
            ck_assert_int_eq(pagoda_cpu_matmul(&ex, x, sizeof(float) * K, T, K, w, PAGODA_DTYPE_Q8_0, rb, N, NULL,
                                               out, sizeof(float) * N),
                             PAGODA_OK);
            for (int64_t j = 0; j < T * N; j++)
                ck_assert_msg(out[j] == ref[j], "Q8_0 with -128 weights, T=%lld path %s [t %lld, n %lld]: %.9g, exact %.9g",
                              (long long)T, PATHS[ii].name, (long long)(j / N), (long long)(j % N), out[j], ref[j]);
            checked++;
        }
    }
    cpu_path_reset();
    ck_assert_int_eq(checked, N_ISAS * (int)(sizeof Ts / sizeof Ts[0]));
    pagoda_cpu_exec_release(&ex);
    pagoda_threadpool_destroy(tp);
    free(w);
    free(wq);
    free(x);
    free(ref);
    free(out);
}
END_TEST

START_TEST(test_matmul_q5_0) { check_matmul_type(PAGODA_DTYPE_Q5_0); }
END_TEST
START_TEST(test_matmul_q5_1) { check_matmul_type(PAGODA_DTYPE_Q5_1); }
END_TEST
START_TEST(test_matmul_iq4_nl) { check_matmul_type(PAGODA_DTYPE_IQ4_NL); }
END_TEST
/* MXFP4 on scalar, AVX2 and (a VNNI CPU) AVX-512 VNNI: T = 1..3 per-row
 * dots, T >= 4 the tokens-in-lanes kernels (8 / 4 / 1-row tiles, one and
 * two token groups, padding lanes), odd rows random blocks (every code
 * and sign), even rows quantized. */
START_TEST(test_matmul_mxfp4)
{
    if (!has_vnni())
        fprintf(stderr, "test_matmul_mxfp4: no AVX-512 VNNI here: scalar and AVX2 checked, the VNNI kernels skipped\n");
    check_matmul_type(PAGODA_DTYPE_MXFP4);
}
END_TEST

/* The MXFP4 per-row dots of every level this CPU has (and, on any AVX2
 * host, the AVX-512 pair's SIMDe copy) against the
 * reference in double from the dequantized weights (every code, all 256
 * scale bytes of a sane range, odd block counts: the AVX-512 dot's
 * two-block steps and its one-block tail), and each tokens-in-lanes
 * kernel called directly against the dots, with T from 1 to 17 (padding
 * lanes, one and two groups) and rows 1..9 (8 / 4 / 1-row tiles). */
START_TEST(test_mxfp4_kernels_every_level)
{
    typedef float (*dot_fn)(const void *, const pagoda_q8a_block *, int64_t);
    typedef void (*x8_fn)(const void *, size_t, int64_t, const pagoda_q8x8_block *, int64_t, int64_t, float *,
                          size_t);
    enum { NL = 4 };
    dot_fn dots[NL] = {pagoda_cpu_dot_mxfp4_scalar, NULL, NULL, NULL};
    x8_fn x8s[NL] = {NULL, NULL, NULL, NULL};
    const char *names[NL] = {"scalar", "AVX2", "AVX-512 VNNI", "AVX-512 VNNI (SIMDe)"};
    if (pagoda_cpu_detect_isa() >= PAGODA_CPU_ISA_AVX2) {
        dots[1] = pagoda_vecdot_avx2.dot_mxfp4;
        x8s[1] = pagoda_vecdot_avx2.gemm_mxfp4_x8;
        dots[3] = pagoda_cpu_dot_mxfp4_avx512_simde;
        x8s[3] = pagoda_cpu_gemm_mxfp4_x8_avx512_simde;
    }
    if (has_vnni()) {
        dots[2] = pagoda_cpu_dot_mxfp4_avx512;
        x8s[2] = pagoda_cpu_gemm_mxfp4_x8_avx512;
        /* the AVX-512 level's table holds the lanes kernel (matmul.c calls the table's); its
         * dot is AVX2's (lanes_avx512.c says why), the VNNI dot checked here directly */
        const pagoda_vecdot_table *t512 = pagoda_cpu_vecdot_level(PAGODA_CPU_ISA_AVX512);
        ck_assert_ptr_eq(t512->dot_mxfp4, pagoda_cpu_dot_mxfp4_avx2);
        ck_assert_ptr_eq(t512->gemm_mxfp4_x8, pagoda_cpu_gemm_mxfp4_x8_avx512);
    } else {
        fprintf(stderr, "test_mxfp4_kernels_every_level: no AVX-512 VNNI here: its native kernels skipped\n");
    }
    ck_assert_ptr_eq(pagoda_vecdot_scalar.dot_mxfp4, pagoda_cpu_dot_mxfp4_scalar);
    tu_rng r;
    tu_rng_seed(&r, 39);
    for (int64_t nb = 1; nb <= 9; nb++) {
        int64_t K = 32 * nb;
        const int64_t NR = 9, TT = 17;
        size_t ws;
        uint8_t *w = make_weights(&r, PAGODA_DTYPE_MXFP4, NR, K, &ws);
        float *x = tu_xmalloc(sizeof(float) * (size_t)(K * TT)), *wd = tu_xmalloc(sizeof(float) * (size_t)K);
        pagoda_q8a_block *xq = tu_xmalloc(sizeof(pagoda_q8a_block) * (size_t)(nb * TT));
        pagoda_q8x8_block *x8 = aligned_alloc(64, sizeof(pagoda_q8x8_block) * (size_t)(nb * 3));
        float *ref = tu_xmalloc(sizeof(float) * (size_t)(NR * TT)), *got = tu_xmalloc(sizeof(float) * (size_t)(NR * TT));
        ck_assert_ptr_nonnull(x8);
        tu_fill_normal(&r, x, (size_t)(K * TT), 1.0f);
        for (int64_t t = 0; t < TT; t++) pagoda_vecdot_scalar.quant_q8a(x + t * K, xq + t * nb, K);
        for (int64_t n = 0; n < NR; n++) {
            ck_assert_int_eq(pagoda_dequantize_row(PAGODA_DTYPE_MXFP4, w + n * ws, wd, K), PAGODA_OK);
            for (int64_t t = 0; t < TT; t++) {
                const pagoda_q8a_block *xt = xq + t * nb;
                double want = 0.0, mag = 0.0;
                for (int64_t k = 0; k < K; k++) {
                    double p = (double)wd[k] * xt[k / 32].qs[k % 32] * xt[k / 32].d;
                    want += p;
                    mag += fabs(p);
                }
                ref[t * NR + n] = (float)want;
                for (int l = 0; l < NL; l++) {
                    if (!dots[l]) continue;
                    float a = dots[l](w + n * ws, xt, nb);
                    ck_assert_msg(fabs(a - want) <= 1e-5 * mag + 1e-6, "%s dot nb %lld row %lld: %.7g vs %.7g",
                                  names[l], (long long)nb, (long long)n, a, want);
                }
            }
        }
        for (int64_t g = 0; g < 3; g++) {
            int nt = TT - 8 * g < 8 ? (int)(TT - 8 * g) : 8;
            pagoda_cpu_prep_x8(xq + 8 * g * nb, sizeof(pagoda_q8a_block) * (size_t)nb, nt, nb, x8 + g * nb);
        }
        for (int l = 1; l < NL; l++) {
            if (!x8s[l]) continue;
            for (int64_t T = 1; T <= TT; T += (T < 9 ? 1 : 8)) {
                for (int64_t nr = 1; nr <= NR; nr += 3) {
                    for (size_t i = 0; i < (size_t)(NR * TT); i++) got[i] = NAN;
                    x8s[l](w, ws, nr, x8, T, nb, got, sizeof(float) * (size_t)NR);
                    for (int64_t t = 0; t < TT; t++)
                        for (int64_t n = 0; n < NR; n++) {
                            float v = got[t * NR + n], e = ref[t * NR + n];
                            if (t >= T || n >= nr) {
                                ck_assert_msg(isnan(v), "%s x8 T %lld nr %lld wrote [%lld][%lld]", names[l],
                                              (long long)T, (long long)nr, (long long)t, (long long)n);
                                continue;
                            }
                            ck_assert_msg(fabsf(v - e) <= 1e-5f * (fabsf(e) + 10.0f),
                                          "%s x8 nb %lld T %lld nr %lld [%lld][%lld]: %.7g vs %.7g", names[l],
                                          (long long)nb, (long long)T, (long long)nr, (long long)t,
                                          (long long)n, v, e);
                        }
                }
            }
        }
        free(x);
        free(wd);
        free(xq);
        free(x8);
        free(ref);
        free(got);
        free(w);
    }
}
END_TEST

/* One row dot of type on table t: w against the quantized activations xq. */
typedef float (*row_dot_fn)(const pagoda_vecdot_table *t, int type, const uint8_t *w, const void *xq,
                            int64_t nb);

/* The per-row dots of types[n_types] on every path this host runs against
 * the scalar reference: the same integer sums, so within float-order
 * rounding (1e-5 sum |w x| + 1e-6). QK is the weight block's length and
 * picks the activations (256: q8k, 32: q8a, quantized by the scalar
 * table); 1..9 blocks and a long row of 43, three rows each, random blocks
 * and activations from seed. */
static void check_row_dots_every_path(const int *types, size_t n_types, int64_t QK, uint64_t seed,
                                      row_dot_fn dot)
{
    ck_assert(QK == 256 || QK == 32);
    const size_t xb = QK == 256 ? sizeof(pagoda_q8k_block) : sizeof(pagoda_q8a_block);
    tu_rng r;
    tu_rng_seed(&r, seed);
    for (size_t ti = 0; ti < n_types; ti++) {
        for (int64_t nb = 1; nb <= 10; nb++) {
            int64_t nbk = nb == 10 ? 43 : nb, K = QK * nbk;
            size_t ws;
            uint8_t *w = make_weights(&r, types[ti], 3, K, &ws);
            float *x = tu_xmalloc(sizeof(float) * (size_t)K), *wd = tu_xmalloc(sizeof(float) * (size_t)K);
            void *xq = tu_xmalloc(xb * (size_t)nbk);
            int8_t *xqs = tu_xmalloc((size_t)K);   /* the activations' quants and scales, either block */
            float *xd = tu_xmalloc(sizeof(float) * (size_t)nbk);
            tu_fill_normal(&r, x, (size_t)K, 1.0f);
            if (QK == 256)
                pagoda_vecdot_scalar.quant_q8k(x, xq, K);
            else
                pagoda_vecdot_scalar.quant_q8a(x, xq, K);
            for (int64_t b = 0; b < nbk; b++) {
                const int8_t *qs;
                if (QK == 256) {
                    qs = ((const pagoda_q8k_block *)xq)[b].qs;
                    xd[b] = ((const pagoda_q8k_block *)xq)[b].d;
                } else {
                    qs = ((const pagoda_q8a_block *)xq)[b].qs;
                    xd[b] = ((const pagoda_q8a_block *)xq)[b].d;
                }
                memcpy(xqs + b * QK, qs, (size_t)QK);
            }
            for (int n = 0; n < 3; n++) {
                const uint8_t *wr = w + n * ws;
                ck_assert_int_eq(pagoda_dequantize_row(types[ti], wr, wd, K), PAGODA_OK);
                /* sum |w x| bounds the float-order differences */
                double mag = 0.0;
                for (int64_t k = 0; k < K; k++) mag += fabs((double)wd[k] * xqs[k] * xd[k / QK]);
                for (int ii = 0; ii < N_ISAS; ii++) {
                    const pagoda_vecdot_table *v = PATHS[ii].tab ? PATHS[ii].tab : pagoda_cpu_vecdot_level(PATHS[ii].isa);
                    float a = dot(&pagoda_vecdot_scalar, types[ti], wr, xq, nbk);
                    float b = dot(v, types[ti], wr, xq, nbk);
                    ck_assert_msg(fabs((double)a - b) <= 1e-5 * mag + 1e-6, "%s %s nb %lld row %d: scalar %.7g vs %.7g",
                                  pagoda_dtype_name(types[ti]), PATHS[ii].name, (long long)nbk, n, a, b);
                }
            }
            free(x);
            free(wd);
            free(xq);
            free(xqs);
            free(xd);
            free(w);
        }
    }
}

static float dot_k(const pagoda_vecdot_table *t, int type, const uint8_t *w, const void *xq, int64_t nb)
{
    switch (type) {
    case PAGODA_DTYPE_Q4_K: return t->dot_q4_k(w, xq, nb);
    case PAGODA_DTYPE_Q5_K: return t->dot_q5_k(w, xq, nb);
    default: return t->dot_q6_k(w, xq, nb);
    }
}

static float dot_32(const pagoda_vecdot_table *t, int type, const uint8_t *w, const void *xq, int64_t nb)
{
    switch (type) {
    case PAGODA_DTYPE_Q8_0: return t->dot_q8_0(w, xq, nb);
    case PAGODA_DTYPE_Q4_0: return t->dot_q4_0(w, xq, nb);
    default: return t->dot_q4_1(w, xq, nb);
    }
}

/* The per-row dots of decode (T < 4) of Q4_K, Q5_K and Q6_K on every path
 * this host runs (the AVX-512 ones of decode_avx512.c natively where the
 * CPU has them, and their SIMDe copy on any AVX2 host) against the scalar
 * reference (every quant, scale and min of random blocks). */
START_TEST(test_dots_k_decode_every_path)
{
    static const int types[] = {PAGODA_DTYPE_Q4_K, PAGODA_DTYPE_Q5_K, PAGODA_DTYPE_Q6_K};
    check_row_dots_every_path(types, 3, 256, 57, dot_k);
}
END_TEST

/* The per-row dots of the 32-value block types Q8_0, Q4_0, Q4_1 (against
 * q8a activations) in every table this host runs (a faster level's entry
 * replaces AVX2's where it has one), against the scalar reference. The
 * matmul tests reach these only where no tile kernel runs first
 * (GEMM_TILES' single token); here every entry is checked directly. */
START_TEST(test_dots_q8_q4_decode_every_path)
{
    static const int types[] = {PAGODA_DTYPE_Q8_0, PAGODA_DTYPE_Q4_0, PAGODA_DTYPE_Q4_1};
    check_row_dots_every_path(types, 3, 32, 61, dot_32);
}
END_TEST

/* The per-row dots of the 32-value types, which the matmul reaches only
 * through tables without row x token kernels: AVX2 against the scalar
 * reference (same integer sums, float order differs), odd block counts
 * included. */
START_TEST(test_dots_q5_iq4_avx2_match_scalar)
{
    if (pagoda_cpu_detect_isa() < PAGODA_CPU_ISA_AVX2) return;
    static const int types[] = {PAGODA_DTYPE_Q5_0, PAGODA_DTYPE_Q5_1, PAGODA_DTYPE_IQ4_NL};
    tu_rng r;
    tu_rng_seed(&r, 31);
    for (size_t ti = 0; ti < 3; ti++) {
        const pagoda_vecdot_table *v[2] = {&pagoda_vecdot_scalar, &pagoda_vecdot_avx2};
        float (*dot[2])(const void *, const pagoda_q8a_block *, int64_t);
        for (int i = 0; i < 2; i++)
            dot[i] = types[ti] == PAGODA_DTYPE_Q5_0 ? v[i]->dot_q5_0
                   : types[ti] == PAGODA_DTYPE_Q5_1 ? v[i]->dot_q5_1 : v[i]->dot_iq4_nl;
        for (int64_t nb = 1; nb <= 9; nb++) {
            int64_t K = 32 * nb;
            size_t ws;
            uint8_t *w = make_weights(&r, types[ti], 2, K, &ws);
            float *x = tu_xmalloc(sizeof(float) * (size_t)K), *wd = tu_xmalloc(sizeof(float) * (size_t)K);
            pagoda_q8a_block xq[9];
            tu_fill_normal(&r, x, (size_t)K, 1.0f);
            pagoda_vecdot_scalar.quant_q8a(x, xq, K);
            for (int n = 0; n < 2; n++) {
                float a = dot[0](w + n * ws, xq, nb), b = dot[1](w + n * ws, xq, nb);
                double ref = 0.0, mag = 0.0;
                ck_assert_int_eq(pagoda_dequantize_row(types[ti], w + n * ws, wd, K), PAGODA_OK);
                for (int64_t k = 0; k < K; k++) {
                    double p = (double)wd[k] * xq[k / 32].qs[k % 32] * xq[k / 32].d;
                    ref += p;
                    mag += fabs(p);
                }
                ck_assert_msg(fabs(a - ref) <= 1e-5 * mag + 1e-6 && fabs(b - ref) <= 1e-5 * mag + 1e-6,
                              "%s nb %lld row %d: scalar %.7g AVX2 %.7g reference %.7g",
                              pagoda_dtype_name(types[ti]), (long long)nb, n, a, b, ref);
            }
            free(x);
            free(wd);
            free(w);
        }
    }
}
END_TEST

START_TEST(test_matmul_rejects_unknown_type)
{
    pagoda_cpu_exec ex = {0};
    float x[32] = {0}, out[1];
    ck_assert_int_eq(pagoda_cpu_matmul(&ex, x, 128, 1, 32, x, 99, 128, 1, NULL, out, 4),
                     PAGODA_ERR_UNSUPPORTED);
}
END_TEST

/* --------------------------------------------------------------- get_rows */

START_TEST(test_get_rows_every_type)
{
    static const int types[] = {PAGODA_DTYPE_F32, PAGODA_DTYPE_F16, PAGODA_DTYPE_BF16,
                                PAGODA_DTYPE_Q8_0, PAGODA_DTYPE_Q4_0, PAGODA_DTYPE_Q4_1,
                                PAGODA_DTYPE_Q6_K, PAGODA_DTYPE_Q2_K, PAGODA_DTYPE_Q3_K,
                                PAGODA_DTYPE_Q4_K, PAGODA_DTYPE_Q5_K, PAGODA_DTYPE_IQ4_XS,
                                PAGODA_DTYPE_Q5_0, PAGODA_DTYPE_Q5_1, PAGODA_DTYPE_IQ4_NL,
                                PAGODA_DTYPE_MXFP4};
    tu_rng r;
    tu_rng_seed(&r, 5);
    int64_t V = 11, C = 512;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        size_t ws;
        uint8_t *w = make_weights(&r, types[ti], V, C, &ws);
        int32_t ids[] = {3, 0, 10, 3, 7};
        float *out = tu_xmalloc(sizeof(float) * 5 * (size_t)C), *ref = tu_xmalloc(sizeof(float) * (size_t)C);
        ck_assert_int_eq(pagoda_cpu_get_rows(w, types[ti], ws, C, ids, 5, out, sizeof(float) * C),
                         PAGODA_OK);
        for (int i = 0; i < 5; i++) {
            pagoda_dequantize_row(types[ti], w + ids[i] * ws, ref, C);
            ck_assert_int_eq(memcmp(ref, out + i * C, sizeof(float) * (size_t)C), 0);
        }
        free(out);
        free(ref);
        free(w);
    }
}
END_TEST

START_TEST(test_dequant_avx2_matches_reference)
{
    if (pagoda_cpu_detect_isa() < PAGODA_CPU_ISA_AVX2) return;
    static const int types[] = {PAGODA_DTYPE_F16, PAGODA_DTYPE_BF16, PAGODA_DTYPE_Q8_0,
                                PAGODA_DTYPE_Q4_0, PAGODA_DTYPE_Q4_1, PAGODA_DTYPE_Q6_K,
                                PAGODA_DTYPE_Q5_0, PAGODA_DTYPE_Q5_1, PAGODA_DTYPE_IQ4_NL};
    tu_rng r;
    tu_rng_seed(&r, 6);
    int64_t C = 768;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        size_t ws;
        uint8_t *w = make_weights(&r, types[ti], 3, C, &ws);
        float *a = tu_xmalloc(sizeof(float) * (size_t)C), *b = tu_xmalloc(sizeof(float) * (size_t)C);
        for (int n = 0; n < 3; n++) {
            pagoda_dequantize_row(types[ti], w + n * ws, a, C);
            pagoda_vecdot_avx2.dequant(types[ti], w + n * ws, b, C);
            for (int64_t i = 0; i < C; i++)
                ck_assert_msg(fabsf(a[i] - b[i]) <= 1e-6f * fabsf(a[i]), "%s [%lld]: %g vs %g",
                              pagoda_dtype_name(types[ti]), (long long)i, a[i], b[i]);
            /* These round as the reference does (one product; Q5_1 then
             * a separate add, never fused): the same floats. */
            if (types[ti] == PAGODA_DTYPE_Q5_0 || types[ti] == PAGODA_DTYPE_Q5_1 ||
                types[ti] == PAGODA_DTYPE_IQ4_NL)
                ck_assert_int_eq(memcmp(a, b, sizeof(float) * (size_t)C), 0);
        }
        free(a);
        free(b);
        free(w);
    }
}
END_TEST

/* ------------------------------------------------------------ small ops */

START_TEST(test_rms_norm_swiglu_add)
{
    tu_rng r;
    tu_rng_seed(&r, 9);
    int64_t R = 5, C = 77;
    float *x = tu_xmalloc(sizeof(float) * R * C), *w = tu_xmalloc(sizeof(float) * C);
    float *y = tu_xmalloc(sizeof(float) * R * C), *o = tu_xmalloc(sizeof(float) * R * C);
    tu_fill_normal(&r, x, (size_t)(R * C), 2.0f);
    tu_fill_normal(&r, w, (size_t)C, 1.0f);
    tu_fill_normal(&r, y, (size_t)(R * C), 1.0f);
    size_t s = sizeof(float) * C;
    pagoda_cpu_rms_norm(x, s, w, 1e-5f, o, s, R, C);
    for (int64_t i = 0; i < R; i++) {
        double ss = 0;
        for (int64_t c = 0; c < C; c++) ss += (double)x[i * C + c] * x[i * C + c];
        double sc = 1.0 / sqrt(ss / C + 1e-5);
        for (int64_t c = 0; c < C; c++) {
            double want = x[i * C + c] * sc * w[c];
            ck_assert_double_le(fabs(o[i * C + c] - want), 1e-5 * (fabs(want) + 1));
        }
    }
    /* In place gives the same bytes. */
    memcpy(y, x, sizeof(float) * R * C);
    pagoda_cpu_rms_norm(y, s, w, 1e-5f, y, s, R, C);
    ck_assert_int_eq(memcmp(y, o, sizeof(float) * R * C), 0);

    tu_fill_normal(&r, y, (size_t)(R * C), 1.0f);
    pagoda_cpu_swiglu(x, s, y, s, o, s, R, C);
    for (int64_t i = 0; i < R * C; i++) {
        double g = x[i], want = g / (1.0 + exp(-g)) * y[i];
        ck_assert_double_le(fabs(o[i] - want), 1e-5 * (fabs(want) + 1));
    }
    pagoda_cpu_add(x, s, y, s, o, s, R, C);
    for (int64_t i = 0; i < R * C; i++) ck_assert(o[i] == x[i] + y[i]);
    float *x2 = tu_xmalloc(sizeof(float) * R * C);
    memcpy(x2, x, sizeof(float) * R * C);
    pagoda_cpu_add(x2, s, y, s, x2, s, R, C); /* out aliases a */
    ck_assert_int_eq(memcmp(x2, o, sizeof(float) * R * C), 0);
    free(x2);
    free(x);
    free(w);
    free(y);
    free(o);
}
END_TEST

/* -------------------------------------------------------------------- rope */

START_TEST(test_rope_normal_neox_direct)
{
    tu_rng r;
    tu_rng_seed(&r, 21);
    int n_heads = 3, hd = 64, n_rot = 48, T = 4;
    int32_t pos[] = {0, 1, 777, 4999};
    float inv[24];
    for (int i = 0; i < n_rot / 2; i++) inv[i] = (float)pow(10000.0, -2.0 * i / n_rot);
    size_t rs = sizeof(float) * (size_t)(n_heads * hd);
    float *x = tu_xmalloc(rs * T), *a = tu_xmalloc(rs * T), *b = tu_xmalloc(rs * T);
    tu_fill_normal(&r, x, (size_t)(T * n_heads * hd), 1.0f);
    for (int neox = 0; neox < 2; neox++) {
        pagoda_rope_params p = {.n_rot = n_rot, .neox = neox, .mscale = neox ? 0.9f : 1.0f, .inv_freq = inv};
        memcpy(a, x, rs * T);
        pagoda_cpu_rope(a, rs, T, n_heads, hd, pos, &p);
        for (int t = 0; t < T; t++)
            for (int h = 0; h < n_heads; h++) {
                const float *xi = x + (t * n_heads + h) * hd;
                const float *ai = a + (t * n_heads + h) * hd;
                for (int i = 0; i < n_rot / 2; i++) {
                    int ia = neox ? i : 2 * i, ib = neox ? i + n_rot / 2 : 2 * i + 1;
                    double th = (double)pos[t] * inv[i];
                    double wa = (xi[ia] * cos(th) - xi[ib] * sin(th)) * p.mscale;
                    double wb = (xi[ia] * sin(th) + xi[ib] * cos(th)) * p.mscale;
                    ck_assert_double_le(fabs(ai[ia] - wa), 1e-5);
                    ck_assert_double_le(fabs(ai[ib] - wb), 1e-5);
                }
                for (int d = n_rot; d < hd; d++) ck_assert(ai[d] == xi[d]); /* pass through */
            }
    }
    /* NeoX on a half-split permutation of x equals normal on x. */
    pagoda_rope_params pn = {.n_rot = n_rot, .neox = false, .mscale = 1.0f, .inv_freq = inv};
    pagoda_rope_params px = {.n_rot = n_rot, .neox = true, .mscale = 1.0f, .inv_freq = inv};
    for (int t = 0; t < T; t++)
        for (int h = 0; h < n_heads; h++) {
            const float *xi = x + (t * n_heads + h) * hd;
            float *bi = b + (t * n_heads + h) * hd;
            for (int i = 0; i < n_rot / 2; i++) {
                bi[i] = xi[2 * i];
                bi[i + n_rot / 2] = xi[2 * i + 1];
            }
            for (int d = n_rot; d < hd; d++) bi[d] = xi[d];
        }
    memcpy(a, x, rs * T);
    pagoda_cpu_rope(a, rs, T, n_heads, hd, pos, &pn);
    pagoda_cpu_rope(b, rs, T, n_heads, hd, pos, &px);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < n_heads; h++) {
            const float *ai = a + (t * n_heads + h) * hd, *bi = b + (t * n_heads + h) * hd;
            for (int i = 0; i < n_rot / 2; i++) {
                ck_assert(ai[2 * i] == bi[i]);
                ck_assert(ai[2 * i + 1] == bi[i + n_rot / 2]);
            }
        }
    free(x);
    free(a);
    free(b);
}
END_TEST

/* -------------------------------------------------- kv_write + attention */

typedef struct seq_spec {
    int n_q, ctx_len;
} seq_spec;

/* window 0: causal over all keys; window W: the reference sees only keys
 * pos - W < j <= pos (sliding-window layers). */
/* decode_ctx: the context of the decoding sequence (37; from 512 its keys
 * are cut into splits whose partial sums are merged). */
static void check_attention_ctx(int kv_dtype, int head_dim, int block_size, int window, int decode_ctx)
{
    tu_rng r;
    tu_rng_seed(&r, 1000 + (uint64_t)kv_dtype * 7 + (uint64_t)head_dim + (uint64_t)block_size);
    const int n_heads = 8, n_kv = 2, n_layers = 2, layer = 1;
    /* Prefill from scratch, a decode token, a later prefill chunk. Each
     * prefill has a full chunk of 16 rows (the AVX-512 level's F16 tile,
     * attention.c attend_tile) and a partial one (the row path). */
    const seq_spec spec[3] = {{21, 21}, {1, decode_ctx}, {20, 45}};
    const int n_blocks = 32 + (decode_ctx + block_size - 1) / block_size;
    pagoda_kv_layout L = {.n_layers = n_layers, .n_blocks = n_blocks, .block_size = block_size,
                          .n_kv_heads = n_kv, .head_dim = head_dim, .dtype = kv_dtype};
    uint8_t *pool = tu_xmalloc(pagoda_kv_pool_bytes(&L));
    memset(pool, 0x7f, pagoda_kv_pool_bytes(&L)); /* garbage outside the slots used */
    /* Shuffled block ids shared out among the sequences. */
    int32_t *perm = tu_xmalloc(sizeof(int32_t) * (size_t)n_blocks);
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = (int)(tu_rng_u64(&r) % (uint64_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int32_t *tables[3];
    int nb[3], used = 0;
    int kvw = n_kv * head_dim, qw = n_heads * head_dim;
    float *K[3], *V[3];
    /* What the cache holds of each row: the value itself (F32), rounded to
     * half (F16), or the reference Q8_0 blocks dequantized (Q8_0). */
    float *Ks[3], *Vs[3];
    size_t row_bytes = pagoda_kv_slot_bytes(&L);
    uint8_t *qrow = tu_xmalloc(row_bytes);
    for (int s = 0; s < 3; s++) {
        nb[s] = (spec[s].ctx_len + block_size - 1) / block_size;
        ck_assert_int_le(used + nb[s], n_blocks);
        tables[s] = perm + used;
        used += nb[s];
        K[s] = tu_xmalloc(sizeof(float) * (size_t)(spec[s].ctx_len * kvw));
        V[s] = tu_xmalloc(sizeof(float) * (size_t)(spec[s].ctx_len * kvw));
        tu_fill_normal(&r, K[s], (size_t)(spec[s].ctx_len * kvw), 1.0f);
        tu_fill_normal(&r, V[s], (size_t)(spec[s].ctx_len * kvw), 1.0f);
        Ks[s] = tu_xmalloc(sizeof(float) * (size_t)(spec[s].ctx_len * kvw));
        Vs[s] = tu_xmalloc(sizeof(float) * (size_t)(spec[s].ctx_len * kvw));
        for (int kv = 0; kv < 2; kv++)
            for (int p = 0; p < spec[s].ctx_len; p++) {
                const float *src = (kv ? V[s] : K[s]) + p * kvw;
                float *dst = (kv ? Vs[s] : Ks[s]) + p * kvw;
                if (kv_dtype == PAGODA_DTYPE_Q8_0) {
                    ck_assert_int_eq(pagoda_quantize_row(kv_dtype, src, qrow, kvw), PAGODA_OK);
                    ck_assert_int_eq(pagoda_dequantize_row(kv_dtype, qrow, dst, kvw), PAGODA_OK);
                } else {
                    for (int e = 0; e < kvw; e++)
                        dst[e] = kv_dtype == PAGODA_DTYPE_F16 ? pagoda_fp16_to_fp32(pagoda_fp32_to_fp16(src[e]))
                                                              : src[e];
                }
            }
        /* Earlier steps wrote the cached prefix, one token at a time. */
        for (int p = 0; p < spec[s].ctx_len - spec[s].n_q; p++) {
            int32_t slot = tables[s][p / block_size] * block_size + p % block_size;
            pagoda_cpu_kv_write(pool, &L, layer, K[s] + p * kvw, 0, V[s] + p * kvw, 0, &slot, 1);
        }
    }
    /* This step's batch: rows of the three sequences, in order. */
    int n_tok = 0;
    pagoda_seq_view views[3];
    for (int s = 0; s < 3; s++) {
        views[s] = (pagoda_seq_view){.q_start = n_tok, .n_q = spec[s].n_q,
                                     .ctx_len = spec[s].ctx_len, .n_blocks = nb[s],
                                     .block_table = tables[s]};
        n_tok += spec[s].n_q;
    }
    float *kstep = tu_xmalloc(sizeof(float) * (size_t)(n_tok * kvw));
    float *vstep = tu_xmalloc(sizeof(float) * (size_t)(n_tok * kvw));
    int32_t *slots = tu_xmalloc(sizeof(int32_t) * (size_t)n_tok);
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < spec[s].n_q; i++) {
            int p = spec[s].ctx_len - spec[s].n_q + i, row = views[s].q_start + i;
            memcpy(kstep + row * kvw, K[s] + p * kvw, sizeof(float) * (size_t)kvw);
            memcpy(vstep + row * kvw, V[s] + p * kvw, sizeof(float) * (size_t)kvw);
            slots[row] = tables[s][p / block_size] * block_size + p % block_size;
        }
    size_t kvs = sizeof(float) * (size_t)kvw;
    pagoda_cpu_kv_write(pool, &L, layer, kstep, kvs, vstep, kvs, slots, n_tok);
    /* The cache holds exactly what was written (rounded for F16; for Q8_0
     * the reference quantizer's bytes). */
    for (int s = 0; s < 3; s++)
        for (int p = 0; p < spec[s].ctx_len; p++)
            for (int kv = 0; kv < 2; kv++) {
                const uint8_t *base = pool + pagoda_kv_offset(&L, layer, kv, tables[s][p / block_size]);
                if (kv_dtype == PAGODA_DTYPE_Q8_0) {
                    ck_assert_int_eq(pagoda_quantize_row(kv_dtype, (kv ? V[s] : K[s]) + p * kvw, qrow, kvw),
                                     PAGODA_OK);
                    ck_assert(memcmp(base + (size_t)(p % block_size) * row_bytes, qrow, row_bytes) == 0);
                    continue;
                }
                for (int e = 0; e < kvw; e++) {
                    float src = (kv ? V[s] : K[s])[p * kvw + e];
                    size_t idx = (size_t)(p % block_size) * kvw + e;
                    float got = kv_dtype == PAGODA_DTYPE_F32
                                    ? ((const float *)base)[idx]
                                    : pagoda_fp16_to_fp32(((const uint16_t *)base)[idx]);
                    float want = kv_dtype == PAGODA_DTYPE_F32 ? src
                                                              : pagoda_fp16_to_fp32(pagoda_fp32_to_fp16(src));
                    ck_assert(got == want);
                }
            }
    float *q = tu_xmalloc(sizeof(float) * (size_t)(n_tok * qw));
    tu_fill_normal(&r, q, (size_t)(n_tok * qw), 1.0f);
    float scale = 1.0f / sqrtf((float)head_dim);
    pagoda_batch batch = {.seq_no = 1, .n_tokens = n_tok, .slots = slots, .n_seqs = 3, .seqs = views};
    pagoda_threadpool *tp = NULL;
    ck_assert_int_eq(pagoda_threadpool_create(3, &tp), PAGODA_OK);
    pagoda_cpu_exec ex = {.pool = tp};
    float *out = tu_xmalloc(sizeof(float) * (size_t)(n_tok * qw));
    double *sc = tu_xmalloc(sizeof(double) * (size_t)(decode_ctx + 64));
    for (int ii = 0; ii < N_ISAS; ii++) {
        cpu_path_use(&PATHS[ii]);
        memset(out, 0, sizeof(float) * (size_t)(n_tok * qw));
        ck_assert_int_eq(pagoda_cpu_attention(&ex, q, sizeof(float) * qw, pool, &L, layer, &batch,
                                              n_heads, scale, window, out, sizeof(float) * qw),
                         PAGODA_OK);
        for (int s = 0; s < 3; s++)
            for (int i = 0; i < spec[s].n_q; i++) {
                int pos = spec[s].ctx_len - spec[s].n_q + i, row = views[s].q_start + i;
                for (int h = 0; h < n_heads; h++) {
                    int kh = h / (n_heads / n_kv);
                    const float *qh = q + row * qw + h * head_dim;
                    double mx = -1e300, sum = 0;
                    int j0 = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
                    for (int j = j0; j <= pos; j++) {
                        double d = 0;
                        for (int e = 0; e < head_dim; e++)
                            d += (double)qh[e] * Ks[s][j * kvw + kh * head_dim + e];
                        sc[j] = d * scale;
                        if (sc[j] > mx) mx = sc[j];
                    }
                    for (int j = j0; j <= pos; j++) sum += (sc[j] = exp(sc[j] - mx));
                    for (int e = 0; e < head_dim; e++) {
                        double o = 0;
                        for (int j = j0; j <= pos; j++) o += sc[j] * Vs[s][j * kvw + kh * head_dim + e];
                        o /= sum;
                        float got = out[row * qw + h * head_dim + e];
                        ck_assert_msg(fabs(got - o) <= 1e-4,
                                      "attention kv %s hd %d bs %d window %d path %s seq %d q %d head %d dim %d: %.6f vs %.6f",
                                      pagoda_dtype_name(kv_dtype), head_dim, block_size, window, PATHS[ii].name, s, i, h, e,
                                      got, o);
                    }
                }
            }
    }
    cpu_path_reset();
    pagoda_cpu_exec_release(&ex);
    pagoda_threadpool_destroy(tp);
    for (int s = 0; s < 3; s++) {
        free(K[s]);
        free(V[s]);
        free(Ks[s]);
        free(Vs[s]);
    }
    free(qrow);
    free(perm);
    free(sc);
    free(out);
    free(q);
    free(kstep);
    free(vstep);
    free(slots);
    free(pool);
}

static void check_attention(int kv_dtype, int head_dim, int block_size, int window)
{
    check_attention_ctx(kv_dtype, head_dim, block_size, window, 37);
}

START_TEST(test_attention_f32_kv) { check_attention(PAGODA_DTYPE_F32, 64, 8, 0); }
END_TEST
START_TEST(test_attention_f16_kv) { check_attention(PAGODA_DTYPE_F16, 64, 16, 0); }
END_TEST
START_TEST(test_attention_odd_head_dim) { check_attention(PAGODA_DTYPE_F16, 36, 4, 0); check_attention(PAGODA_DTYPE_F32, 36, 5, 0); }
END_TEST
/* Sliding windows: shorter than a block (a query's window starts inside a
 * block), spanning whole skipped blocks (block 4, window 9 at positions up
 * to 36), one key (its own), and wider than every context (= causal). */
START_TEST(test_attention_window)
{
    check_attention(PAGODA_DTYPE_F32, 64, 8, 5);
    check_attention(PAGODA_DTYPE_F16, 64, 4, 9);
    check_attention(PAGODA_DTYPE_F32, 32, 4, 1);
    check_attention(PAGODA_DTYPE_F16, 256, 16, 100);
}
END_TEST

/* The 8-bit KV cache: MHA-like, Gemma's 256-wide heads, one block's
 * worth (head_dim 32), and a window across skipped blocks. */
/* A decode row over 700 keys: 2 splits of 350, merged; over 2100 keys
 * with a window of 600 (the splits cover the window only). */
START_TEST(test_attention_split_decode)
{
    check_attention_ctx(PAGODA_DTYPE_F32, 64, 16, 0, 700);
    check_attention_ctx(PAGODA_DTYPE_F16, 32, 16, 0, 2100);
    check_attention_ctx(PAGODA_DTYPE_Q8_0, 64, 16, 600, 2100);
}
END_TEST

/* [backend.cpu] batch_invariant: a decode row over 700 keys (split in two
 * by default) gives the same bits as the same query as the last row of a
 * 2-row call over the same keys (a verify step's shape), at every path. */
START_TEST(test_attention_batch_invariant)
{
    enum { HD = 64, NH = 8, NKV = 2, BS = 16, CTX = 700 };
    tu_rng r;
    tu_rng_seed(&r, 4242);
    const int n_blocks = (CTX + BS - 1) / BS;
    pagoda_kv_layout L = {.n_layers = 1, .n_blocks = n_blocks, .block_size = BS, .n_kv_heads = NKV,
                          .head_dim = HD, .dtype = PAGODA_DTYPE_F16};
    uint8_t *pool = tu_xmalloc(pagoda_kv_pool_bytes(&L));
    int32_t *table = tu_xmalloc(sizeof(int32_t) * (size_t)n_blocks), *slots = tu_xmalloc(sizeof(int32_t) * CTX);
    for (int i = 0; i < n_blocks; i++) table[i] = n_blocks - 1 - i;
    for (int p = 0; p < CTX; p++) slots[p] = table[p / BS] * BS + p % BS;
    const int kvw = NKV * HD, qw = NH * HD;
    float *k = tu_xmalloc(sizeof(float) * CTX * kvw), *v = tu_xmalloc(sizeof(float) * CTX * kvw);
    tu_fill_normal(&r, k, (size_t)CTX * kvw, 1.0f);
    tu_fill_normal(&r, v, (size_t)CTX * kvw, 1.0f);
    pagoda_cpu_kv_write(pool, &L, 0, k, sizeof(float) * kvw, v, sizeof(float) * kvw, slots, CTX);
    float *q = tu_xmalloc(sizeof(float) * 2 * qw), *one = tu_xmalloc(sizeof(float) * qw), *two = tu_xmalloc(sizeof(float) * 2 * qw);
    tu_fill_normal(&r, q, (size_t)2 * qw, 1.0f);
    pagoda_threadpool *tp = NULL;
    ck_assert_int_eq(pagoda_threadpool_create(2, &tp), PAGODA_OK);
    pagoda_cpu_exec ex = {.pool = tp};
    pagoda_seq_view v1 = {.q_start = 0, .n_q = 1, .ctx_len = CTX, .n_blocks = n_blocks, .block_table = table};
    pagoda_seq_view v2 = {.q_start = 0, .n_q = 2, .ctx_len = CTX, .n_blocks = n_blocks, .block_table = table};
    pagoda_batch b1 = {.seq_no = 1, .n_tokens = 1, .slots = slots + CTX - 1, .n_seqs = 1, .seqs = &v1};
    pagoda_batch b2 = {.seq_no = 2, .n_tokens = 2, .slots = slots + CTX - 2, .n_seqs = 1, .seqs = &v2};
    const float scale = 0.125f;
    int differ_off = 0;
    for (int ii = 0; ii < N_ISAS; ii++) {
        cpu_path_use(&PATHS[ii]);
        for (int bi = 1; bi >= 0; bi--) {
            ex.batch_invariant = bi;
            /* the 2-row call: the earlier position, then the decode row's query */
            ck_assert_int_eq(pagoda_cpu_attention(&ex, q, sizeof(float) * qw, pool, &L, 0, &b2, NH, scale, 0, two,
                                                  sizeof(float) * qw),
                             PAGODA_OK);
            ck_assert_int_eq(pagoda_cpu_attention(&ex, q + qw, sizeof(float) * qw, pool, &L, 0, &b1, NH, scale, 0,
                                                  one, sizeof(float) * qw),
                             PAGODA_OK);
            int same = memcmp(one, two + qw, sizeof(float) * qw) == 0;
            if (bi)
                ck_assert_msg(same, "path %s: the decode row differs from the same row of a 2-row call",
                              PATHS[ii].name);
            else
                differ_off += !same;
        }
    }
    cpu_path_reset();
    printf("test_attention_batch_invariant: with the mode off the split decode row differs on %d of %d paths\n",
           differ_off, N_ISAS);
    pagoda_cpu_exec_release(&ex);
    pagoda_threadpool_destroy(tp);
    free(pool);
    free(table);
    free(slots);
    free(k);
    free(v);
    free(q);
    free(one);
    free(two);
}
END_TEST

START_TEST(test_attention_q8_0_kv)
{
    check_attention(PAGODA_DTYPE_Q8_0, 64, 16, 0);
    check_attention(PAGODA_DTYPE_Q8_0, 256, 8, 0);
    check_attention(PAGODA_DTYPE_Q8_0, 32, 5, 0);
    check_attention(PAGODA_DTYPE_Q8_0, 64, 4, 9);
}
END_TEST

/* The Q8_0 KV store gives the reference quantizer's bytes on every path,
 * including values that land exactly on a half step (roundf rounds them
 * away from zero, where the int8 activations round half to even), zero
 * blocks and huge ones. */
START_TEST(test_kv_q8_0_store_matches_reference)
{
    tu_rng r;
    tu_rng_seed(&r, 77);
    enum { K = 32 * 12 };
    float x[K];
    tu_fill_normal(&r, x, K, 3.0f);
    /* block 1: amax 127 so x * (1 / d) is x itself: exact halves */
    for (int j = 0; j < 32; j++) x[32 + j] = (float)(j - 16) + 0.5f;
    x[32] = 127.0f;
    /* block 2: zeros; block 3: one huge value; block 4: tiny ones */
    for (int j = 0; j < 32; j++) x[64 + j] = 0.0f;
    x[96 + 5] = 6.0e4f;
    for (int j = 0; j < 32; j++) x[128 + j] = (float)(j - 16) * 1e-7f;
    uint8_t want[K / 32 * 34], got[K / 32 * 34];
    ck_assert_int_eq(pagoda_quantize_row(PAGODA_DTYPE_Q8_0, x, want, K), PAGODA_OK);
    for (int ii = 0; ii < N_ISAS; ii++) {
        cpu_path_use(&PATHS[ii]);
        memset(got, 0xa5, sizeof got);
        pagoda_cpu_vecdot()->quant_kv_q8_0(x, got, K);
        for (size_t i = 0; i < sizeof got; i++)
            ck_assert_msg(got[i] == want[i], "path %s byte %zu (block %zu): %d vs %d", PATHS[ii].name, i, i / 34,
                          got[i], want[i]);
    }
    cpu_path_reset();
}
END_TEST

/* Which kernels run, and what they are called, on CPUs this machine is
 * not (a faked CPUID): each level runs its own table (an AMX CPU the
 * AVX-512 one, which says so), AVX-VNNI forced on an AVX-512 CPU without
 * the VEX form (Zen 4) runs AVX2 and says why, a forced level says forced;
 * and PAGODA_CPU_ISA's words. */
START_TEST(test_kernel_path_names)
{
    char buf[128];
    if (pagoda_cpu_detect_isa() < PAGODA_CPU_ISA_AVX2) return; /* the AVX2 table would not run */
    pagoda_cpu_fake_detected_isa(PAGODA_CPU_ISA_AVX512);
    ck_assert_int_eq(pagoda_cpu_active_isa(), PAGODA_CPU_ISA_AVX512);
    ck_assert_int_eq(pagoda_cpu_kernel_isa(), PAGODA_CPU_ISA_AVX512);
    ck_assert_ptr_eq(pagoda_cpu_vecdot(), pagoda_cpu_vecdot_level(PAGODA_CPU_ISA_AVX512));
    ck_assert_ptr_ne(pagoda_cpu_vecdot(), &pagoda_vecdot_avx2);
    ck_assert_str_eq(pagoda_cpu_kernel_path(buf, sizeof buf), "AVX-512 VNNI kernels");
    pagoda_cpu_force_isa(PAGODA_CPU_ISA_AVX_VNNI);
    ck_assert_int_eq(pagoda_cpu_kernel_isa(), PAGODA_CPU_ISA_AVX2);
    ck_assert_ptr_eq(pagoda_cpu_vecdot(), &pagoda_vecdot_avx2);
    ck_assert_str_eq(pagoda_cpu_kernel_path(buf, sizeof buf),
                     "AVX2 kernels (forced to AVX-VNNI; the CPU has AVX-512 VNNI but not the VEX AVX-VNNI)");
    pagoda_cpu_force_isa(PAGODA_CPU_ISA_AVX2);
    ck_assert_str_eq(pagoda_cpu_kernel_path(buf, sizeof buf), "AVX2 kernels (forced; the CPU has more)");
    pagoda_cpu_force_isa(-1);
    pagoda_cpu_fake_detected_isa(PAGODA_CPU_ISA_AMX);
    ck_assert_int_eq(pagoda_cpu_kernel_isa(), PAGODA_CPU_ISA_AVX512);
    ck_assert_str_eq(pagoda_cpu_kernel_path(buf, sizeof buf),
                     "AVX-512 VNNI kernels (and AMX tiles for the repacked GEMMs of >= 16 tokens)");
    pagoda_cpu_fake_detected_isa(PAGODA_CPU_ISA_AVX_VNNI);
    ck_assert_int_eq(pagoda_cpu_kernel_isa(), PAGODA_CPU_ISA_AVX_VNNI);
    ck_assert_ptr_eq(pagoda_cpu_vecdot(), pagoda_cpu_vecdot_level(PAGODA_CPU_ISA_AVX_VNNI));
    ck_assert_str_eq(pagoda_cpu_kernel_path(buf, sizeof buf), "AVX-VNNI kernels");
    pagoda_cpu_force_isa(PAGODA_CPU_ISA_AVX512); /* clamped to the CPU's */
    ck_assert_int_eq(pagoda_cpu_active_isa(), PAGODA_CPU_ISA_AVX_VNNI);
    pagoda_cpu_force_isa(-1);
    pagoda_cpu_fake_detected_isa(PAGODA_CPU_ISA_AVX2);
    ck_assert_str_eq(pagoda_cpu_kernel_path(buf, sizeof buf), "AVX2 kernels");
    pagoda_cpu_force_isa(PAGODA_CPU_ISA_SCALAR);
    ck_assert_ptr_eq(pagoda_cpu_vecdot(), &pagoda_vecdot_scalar);
    ck_assert_str_eq(pagoda_cpu_kernel_path(buf, sizeof buf), "scalar kernels (forced; the CPU has more)");
    pagoda_cpu_force_isa(-1);
    pagoda_cpu_fake_detected_isa(PAGODA_CPU_ISA_SCALAR);
    ck_assert_str_eq(pagoda_cpu_kernel_path(buf, sizeof buf), "scalar kernels (no AVX2/FMA/F16C)");
    pagoda_cpu_fake_detected_isa(-1);
    const char *words[] = {"scalar", "avx2", "avxvnni", "avx512", "amx"};
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(pagoda_cpu_isa_parse(words[i]), i);
        ck_assert_str_eq(pagoda_cpu_isa_word(i), words[i]);
    }
    ck_assert_int_eq(pagoda_cpu_isa_parse("AVX512"), PAGODA_CPU_ISA_AVX512);
    ck_assert_int_eq(pagoda_cpu_isa_parse("avx-512"), -1);
    ck_assert_int_eq(pagoda_cpu_isa_parse(""), -1);
    ck_assert_ptr_null(pagoda_cpu_isa_word(5));
}
END_TEST

/* The CPUID + XCR0 detection agrees with the compiler's view of this CPU:
 * AVX-512 VNNI exactly when F/BW/VL/DQ and VNNI are all there (no OS of
 * these hosts leaves the ZMM state off). */
START_TEST(test_detect_matches_builtin)
{
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512vnni");
    int d = pagoda_cpu_detect_isa();
    ck_assert_int_eq(d >= PAGODA_CPU_ISA_AVX2, avx2);
    ck_assert_int_eq(d >= PAGODA_CPU_ISA_AVX512, avx512);
    if (d == PAGODA_CPU_ISA_AVX_VNNI) ck_assert(pagoda_cpu_has_avx_vnni());
}
END_TEST

START_TEST(test_copy_blocks)
{
    pagoda_kv_layout L = {.n_layers = 3, .n_blocks = 6, .block_size = 4, .n_kv_heads = 2,
                          .head_dim = 8, .dtype = PAGODA_DTYPE_F16};
    size_t bytes = pagoda_kv_pool_bytes(&L), bb = pagoda_kv_block_bytes(&L);
    uint8_t *pool = tu_xmalloc(bytes), *before = tu_xmalloc(bytes);
    for (size_t i = 0; i < bytes; i++) pool[i] = (uint8_t)(i * 31 + 7);
    memcpy(before, pool, bytes);
    int32_t src[] = {1, 4}, dst[] = {5, 0};
    pagoda_cpu_copy_blocks(pool, &L, src, dst, 2);
    for (int l = 0; l < 3; l++)
        for (int kv = 0; kv < 2; kv++)
            for (int b = 0; b < 6; b++) {
                int from = b == 5 ? 1 : b == 0 ? 4 : b;
                ck_assert_int_eq(memcmp(pool + pagoda_kv_offset(&L, l, kv, b),
                                        before + pagoda_kv_offset(&L, l, kv, from), bb), 0);
            }
    free(pool);
    free(before);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cpu_kernels");
    TCase *tc = tcase_create("kernels");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_threadpool_runs_each_thread_once);
    tcase_add_test(tc, test_threadpool_parts_each_once);
    tcase_add_test(tc, test_quant_activations_scalar_equals_avx2);
    tcase_add_test(tc, test_to_f16_scalar_equals_avx2);
    tcase_add_test(tc, test_swiglu_avx2_near_scalar);
    tcase_add_test(tc, test_geglu_scalar_avx2_near_libm);
    tcase_add_test(tc, test_matmul_f32);
    tcase_add_test(tc, test_matmul_f16);
    tcase_add_test(tc, test_matmul_bf16);
    tcase_add_test(tc, test_matmul_q8_0);
    tcase_add_test(tc, test_matmul_q4_0);
    tcase_add_test(tc, test_matmul_q4_1);
    tcase_add_test(tc, test_lanes_same_bits_every_level);
    tcase_add_test(tc, test_q8_0_minus128_every_path);
    tcase_add_test(tc, test_matmul_q6_k);
    tcase_add_test(tc, test_matmul_q2_k);
    tcase_add_test(tc, test_matmul_q3_k);
    tcase_add_test(tc, test_matmul_q4_k);
    tcase_add_test(tc, test_matmul_q5_k);
    tcase_add_test(tc, test_matmul_iq4_xs);
    tcase_add_test(tc, test_matmul_k_extremes);
    tcase_add_test(tc, test_matmul_q5_0);
    tcase_add_test(tc, test_matmul_q5_1);
    tcase_add_test(tc, test_matmul_iq4_nl);
    tcase_add_test(tc, test_matmul_mxfp4);
    tcase_add_test(tc, test_mxfp4_kernels_every_level);
    tcase_add_test(tc, test_dots_q5_iq4_avx2_match_scalar);
    tcase_add_test(tc, test_dots_k_decode_every_path);
    tcase_add_test(tc, test_dots_q8_q4_decode_every_path);
    tcase_add_test(tc, test_matmul_rejects_unknown_type);
    tcase_add_test(tc, test_get_rows_every_type);
    tcase_add_test(tc, test_dequant_avx2_matches_reference);
    tcase_add_test(tc, test_rms_norm_swiglu_add);
    tcase_add_test(tc, test_rope_normal_neox_direct);
    tcase_add_test(tc, test_attention_f32_kv);
    tcase_add_test(tc, test_attention_f16_kv);
    tcase_add_test(tc, test_attention_odd_head_dim);
    tcase_add_test(tc, test_attention_window);
    tcase_add_test(tc, test_attention_q8_0_kv);
    tcase_add_test(tc, test_attention_split_decode);
    tcase_add_test(tc, test_attention_batch_invariant);
    tcase_add_test(tc, test_kv_q8_0_store_matches_reference);
    tcase_add_test(tc, test_copy_blocks);
    tcase_add_test(tc, test_kernel_path_names);
    tcase_add_test(tc, test_detect_matches_builtin);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
