/*
 * matmul.c: out[T x N] = x[T x K] * w[N x K]^T for every weight type, and
 * the exec scratch. F32 weights with many rows go to OpenBLAS sgemm; all
 * else runs our own row-parallel kernels: each thread owns a contiguous
 * range of output columns (weight rows), so in decode (T = 1) every thread
 * streams its own slice of the weights once. Quantized weights see the
 * activations quantized once per call (to int8 blocks, vecdot.h).
 * Not for: the inner loops themselves (vecdot*.c), argument validation.
 */
#include "kernels.h"

#include <cblas.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_features.h"
#include "amx/gemm_bf16_amx.h"
#include "avx512/gemm_bf16.h"
#include "avx512/gemm_fma.h"
#include "matmul_task.h"
#include "quant.h"
#include "repack/repack.h"
#include "repack/repack_matmul.h"
#include "vecdot.h"

_Static_assert(sizeof(pagoda_blk_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(pagoda_blk_q4_0) == 18, "Q4_0 block is 18 bytes");
_Static_assert(sizeof(pagoda_blk_q4_1) == 20, "Q4_1 block is 20 bytes");
_Static_assert(sizeof(pagoda_blk_q6_k) == 210, "Q6_K block is 210 bytes");
_Static_assert(sizeof(pagoda_block_q5_0) == 22, "Q5_0 block is 22 bytes");
_Static_assert(sizeof(pagoda_block_q5_1) == 24, "Q5_1 block is 24 bytes");
_Static_assert(sizeof(pagoda_block_iq4_nl) == 18, "IQ4_NL block is 18 bytes");
_Static_assert(sizeof(pagoda_block_mxfp4) == 17, "MXFP4 block is 17 bytes");

/* Below this many rows, F32 weights use our own dot (a gemv through BLAS
 * would wake its threads for a few microseconds of work). */
#define F32_BLAS_MIN_T 3
/* Weight rows dequantized per sgemm call on the many-rows path. */
#define GEMM_TILE_N 256
/* Weight rows per tile when T > 1: the tile stays in L2 while every
 * activation row passes over it. */
#define ROW_TILE 16
/* Rows of activations quantized on the caller instead of in the pool. */
#define QUANT_INLINE_T 4
/* From this many tokens on, Q8_0 / Q4_0 / F16 run the tokens-in-lanes
 * kernels (vecdot.h gemm_*_x8), padding the last group of eight. Below it
 * the row x token tiles. Measured in the engine (110M Q8_0, decode step
 * at 2 / 4 / 6 concurrent sequences): tiles 8.0 / 17.0 / 18.7 ms, x8
 * 11.4 / 14.7 / 14.4 ms. */
#define X8_MIN_T PAGODA_CPU_X8_MIN_T
/* Q5_0 / Q5_1 / IQ4_NL from 5: their row x token kernels on Q4_0's groups
 * beat a half-empty group of eight at 4 tokens, not a 5/8 full one (one
 * core, K = 2048, GFLOP/s, groups vs x8: T = 4: Q5_0 83 vs 66, Q5_1 78 vs
 * 58, IQ4_NL 71 vs 51; T = 5, groups as 4 + 1: 68 / 64 / 63 vs x8 84 / 76
 * / 66). */
#define X8_MIN_T_Q5 PAGODA_CPU_X8_MIN_T_Q5
/* Tokens per pass of the x8 kernels over a part's rows (a multiple of 8). */
#ifndef X8_T_CHUNK
#define X8_T_CHUNK 64
#endif
/* Row parts per thread, and the smallest part. */
#define PARTS_PER_THREAD 4
#define MIN_ROWS_PER_PART 16

void *pagoda_cpu_scratch(pagoda_cpu_exec *ex, size_t bytes)
{
    if (bytes <= ex->scratch_size && ex->scratch) return ex->scratch;
    size_t sz = (bytes + 63) & ~(size_t)63;
    if (sz < 4096) sz = 4096;
    void *p = aligned_alloc(64, sz);
    if (!p) return NULL;
    free(ex->scratch);
    ex->scratch = p;
    ex->scratch_size = sz;
    return p;
}

void *pagoda_cpu_scratch_aux(pagoda_cpu_exec *ex, size_t bytes, size_t keep)
{
    if (bytes <= ex->aux_size && ex->aux) return ex->aux;
    size_t sz = (bytes + 63) & ~(size_t)63;
    if (sz < 4096) sz = 4096;
    void *p = aligned_alloc(64, sz);
    if (!p) return NULL;
    if (ex->aux && keep) memcpy(p, ex->aux, keep < ex->aux_size ? keep : ex->aux_size);
    free(ex->aux);
    ex->aux = p;
    ex->aux_size = sz;
    return p;
}

void pagoda_cpu_exec_release(pagoda_cpu_exec *ex)
{
    free(ex->scratch);
    ex->scratch = NULL;
    ex->scratch_size = 0;
    free(ex->aux);
    ex->aux = NULL;
    ex->aux_size = 0;
    pagoda_rp_cache_destroy(ex->repack);
    ex->repack = NULL;
}

int pagoda_cpu_weight_type_supported(int dtype)
{
    switch (dtype) {
    case PAGODA_DTYPE_F32:
    case PAGODA_DTYPE_F16:
    case PAGODA_DTYPE_BF16:
    case PAGODA_DTYPE_Q8_0:
    case PAGODA_DTYPE_Q4_0:
    case PAGODA_DTYPE_Q4_1:
    case PAGODA_DTYPE_Q6_K:
    case PAGODA_DTYPE_Q2_K:
    case PAGODA_DTYPE_Q3_K:
    case PAGODA_DTYPE_Q4_K:
    case PAGODA_DTYPE_Q5_K:
    case PAGODA_DTYPE_IQ4_XS:
    case PAGODA_DTYPE_Q5_0:
    case PAGODA_DTYPE_Q5_1:
    case PAGODA_DTYPE_IQ4_NL:
    case PAGODA_DTYPE_MXFP4:
        return 1;
    default:
        return 0;
    }
}

bool pagoda_cpu_act_q8k(int dtype)
{
    switch (dtype) {
    case PAGODA_DTYPE_Q2_K:
    case PAGODA_DTYPE_Q3_K:
    case PAGODA_DTYPE_Q4_K:
    case PAGODA_DTYPE_Q5_K:
    case PAGODA_DTYPE_Q6_K:
    case PAGODA_DTYPE_IQ4_XS:
        return true;
    default:
        return false;
    }
}

typedef pagoda_cpu_gemm_kx8_fn gemm_kx8_fn;

/* The K-quant tokens-in-lanes kernel of this type, NULL if none. */
static gemm_kx8_fn gemm_kx8_of(const pagoda_vecdot_table *vt, int dtype)
{
    switch (dtype) {
    case PAGODA_DTYPE_Q2_K: return vt->gemm_q2_k_x8;
    case PAGODA_DTYPE_Q3_K: return vt->gemm_q3_k_x8;
    case PAGODA_DTYPE_Q4_K: return vt->gemm_q4_k_x8;
    case PAGODA_DTYPE_Q5_K: return vt->gemm_q5_k_x8;
    case PAGODA_DTYPE_Q6_K: return vt->gemm_q6_k_x8;
    case PAGODA_DTYPE_IQ4_XS: return vt->gemm_iq4_xs_x8;
    default: return NULL;
    }
}

typedef pagoda_cpu_mm mm_task;

static void split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi)
{
    int64_t per = (n + nth - 1) / nth;
    *lo = per * ith < n ? per * ith : n;
    *hi = *lo + per < n ? *lo + per : n;
}

static void quant_rows(mm_task *m, int64_t t0, int64_t t1)
{
    for (int64_t t = t0; t < t1; t++) {
        const float *xr = (const float *)((const uint8_t *)m->x + t * m->x_stride);
        void *yr = m->xq + t * m->xq_stride;
        if (pagoda_cpu_act_q8k(m->dtype))
            m->vt->quant_q8k(xr, yr, m->K);
        else
            m->vt->quant_q8a(xr, yr, m->K);
        if (m->xp) m->vt->prep_q4_0(yr, (pagoda_q4x_group *)(m->xp + t * m->xp_stride), m->K / 32);
    }
}

static void quant_task(void *arg, int ith, int nth)
{
    mm_task *m = arg;
    int64_t t0, t1;
    split(m->T, ith, nth, &t0, &t1);
    quant_rows(m, t0, t1);
}

/* x8 path: each thread quantizes whole groups of eight tokens and
 * interleaves them. */
static void quant_x8_task(void *arg, int ith, int nth)
{
    mm_task *m = arg;
    int64_t g0, g1, nb = m->K / 32;
    split((m->T + 7) / 8, ith, nth, &g0, &g1);
    for (int64_t g = g0; g < g1; g++) {
        int64_t t0 = 8 * g, t1 = t0 + 8 < m->T ? t0 + 8 : m->T;
        quant_rows(m, t0, t1);
        if (m->kx8) {
            pagoda_cpu_prep_k_x8((const pagoda_q8k_block *)(m->xq + t0 * m->xq_stride), m->xq_stride,
                                 (int)(t1 - t0), m->K / 256, m->kx8 + g * (m->K / 256));
            continue;
        }
        pagoda_cpu_prep_x8((const pagoda_q8a_block *)(m->xq + t0 * m->xq_stride), m->xq_stride,
                           (int)(t1 - t0), nb, m->x8 + g * nb);
    }
}

static void prep_f32_x8_task(void *arg, int ith, int nth)
{
    mm_task *m = arg;
    int64_t g0, g1;
    split((m->T + 7) / 8, ith, nth, &g0, &g1);
    for (int64_t g = g0; g < g1; g++) {
        int64_t t0 = 8 * g, nt = m->T - t0 < 8 ? m->T - t0 : 8;
        pagoda_cpu_prep_f32_x8((const float *)((const uint8_t *)m->x + t0 * m->x_stride), m->x_stride,
                               (int)nt, m->K, m->xf8 + g * m->K * 8);
    }
}

static float dot_one(const mm_task *m, const uint8_t *wr, int64_t t)
{
    const pagoda_vecdot_table *vt = m->vt;
    const float *xr = (const float *)((const uint8_t *)m->x + t * m->x_stride);
    const void *xq = m->xq + t * m->xq_stride;
    switch (m->dtype) {
    case PAGODA_DTYPE_F32: return vt->dot_f32((const float *)wr, xr, m->K);
    case PAGODA_DTYPE_F16: return vt->dot_f16((const uint16_t *)wr, xr, m->K);
    case PAGODA_DTYPE_BF16: return vt->dot_bf16((const uint16_t *)wr, xr, m->K);
    case PAGODA_DTYPE_Q8_0: return vt->dot_q8_0(wr, xq, m->K / 32);
    case PAGODA_DTYPE_Q4_0: return vt->dot_q4_0(wr, xq, m->K / 32);
    case PAGODA_DTYPE_Q4_1: return vt->dot_q4_1(wr, xq, m->K / 32);
    case PAGODA_DTYPE_Q6_K: return vt->dot_q6_k(wr, xq, m->K / 256);
    case PAGODA_DTYPE_Q2_K: return vt->dot_q2_k(wr, xq, m->K / 256);
    case PAGODA_DTYPE_Q3_K: return vt->dot_q3_k(wr, xq, m->K / 256);
    case PAGODA_DTYPE_Q4_K: return vt->dot_q4_k(wr, xq, m->K / 256);
    case PAGODA_DTYPE_Q5_K: return vt->dot_q5_k(wr, xq, m->K / 256);
    case PAGODA_DTYPE_IQ4_XS: return vt->dot_iq4_xs(wr, xq, m->K / 256);
    case PAGODA_DTYPE_Q5_0: return vt->dot_q5_0(wr, xq, m->K / 32);
    case PAGODA_DTYPE_Q5_1: return vt->dot_q5_1(wr, xq, m->K / 32);
    case PAGODA_DTYPE_IQ4_NL: return vt->dot_iq4_nl(wr, xq, m->K / 32);
    case PAGODA_DTYPE_MXFP4: return vt->dot_mxfp4(wr, xq, m->K / 32);
    default: return 0.0f;
    }
}

/* The row x token block kernel for this weight type, if it has one. */
static void (*gemm_fn(const mm_task *m))(const void *, size_t, int64_t, const void *, size_t, int64_t,
                                        int64_t, float *, size_t)
{
    switch (m->dtype) {
    case PAGODA_DTYPE_Q8_0: return m->vt->gemm_q8_0;
    case PAGODA_DTYPE_Q4_0: return m->vt->gemm_q4_0;
    case PAGODA_DTYPE_F16: return m->vt->gemm_f16;
    case PAGODA_DTYPE_Q5_0: return m->vt->gemm_q5_0;
    case PAGODA_DTYPE_Q5_1: return m->vt->gemm_q5_1;
    case PAGODA_DTYPE_Q4_1: return m->vt->gemm_q4_1;
    case PAGODA_DTYPE_IQ4_NL: return m->vt->gemm_iq4_nl;
    default: return NULL;
    }
}

static void add_bias(const mm_task *m, int64_t n0, int64_t n1)
{
    for (int64_t t = 0; t < m->T; t++) {
        float *o = (float *)((uint8_t *)m->out + t * m->out_stride);
        for (int64_t n = n0; n < n1; n++) o[n] += m->bias[n];
    }
}

/* One part of the x8 path: X8_T_CHUNK tokens at a time over the part's
 * rows, so a chunk's activations stay in L2 while the rows pass (prefill);
 * a decode batch is a single chunk. */
static void dot_x8_part(const mm_task *m, int64_t n0, int64_t n1)
{
    int64_t nb = m->K / (m->kx8 ? 256 : 32);
    for (int64_t t0 = 0; t0 < m->T; t0 += X8_T_CHUNK) {
        int64_t tn = m->T - t0 < X8_T_CHUNK ? m->T - t0 : X8_T_CHUNK;
        float *o = (float *)((uint8_t *)m->out + t0 * m->out_stride);
        for (int64_t nt = n0; nt < n1; nt += ROW_TILE) {
            int64_t ne = nt + ROW_TILE < n1 ? nt + ROW_TILE : n1;
            if (m->kx8)
                m->gemm_kx8(m->w + nt * m->w_stride, m->w_stride, ne - nt, m->kx8 + (t0 / 8) * nb, tn,
                            nb, o + nt, m->out_stride);
            else
                m->gemm_x8(m->w + nt * m->w_stride, m->w_stride, ne - nt, m->x8 + (t0 / 8) * nb, tn,
                           nb, o + nt, m->out_stride);
        }
    }
    if (m->bias) add_bias(m, n0, n1);
}

/* One part: rows [n0, n1) for every token, ROW_TILE rows at a time so the
 * tile stays in cache while all tokens pass over it. */
void pagoda_cpu_mm_rows(const mm_task *m, int64_t n0, int64_t n1)
{
    if (m->x8 || m->kx8) {
        dot_x8_part(m, n0, n1);
        return;
    }
    if (m->xf8) {
        /* The whole part in one call: the F16 kernel orders its loops so
         * that a chunk of tokens passes over all the part's rows (vecdot_x8_avx2.c). */
        m->gemm_f16_x8(m->w + n0 * m->w_stride, m->w_stride, n1 - n0, m->xf8, m->T, m->K, m->out + n0,
                       m->out_stride);
        if (m->bias) add_bias(m, n0, n1);
        return;
    }
    for (int64_t nt = n0; nt < n1; nt += ROW_TILE) {
        int64_t ne = nt + ROW_TILE < n1 ? nt + ROW_TILE : n1;
        if (m->xf8) {
            m->gemm_f16_x8(m->w + nt * m->w_stride, m->w_stride, ne - nt, m->xf8, m->T, m->K,
                           m->out + nt, m->out_stride);
        } else if (m->gemm) {
            if (m->xp)
                m->gemm(m->w + nt * m->w_stride, m->w_stride, ne - nt, m->xp, m->xp_stride, m->T,
                        m->K / 32, m->out + nt, m->out_stride);
            else if (m->xq)
                m->gemm(m->w + nt * m->w_stride, m->w_stride, ne - nt, m->xq, m->xq_stride, m->T,
                        m->K / 32, m->out + nt, m->out_stride);
            else
                m->gemm(m->w + nt * m->w_stride, m->w_stride, ne - nt, m->x, m->x_stride, m->T,
                        m->K, m->out + nt, m->out_stride);
        } else {
            for (int64_t t = 0; t < m->T; t++) {
                float *o = (float *)((uint8_t *)m->out + t * m->out_stride);
                for (int64_t n = nt; n < ne; n++) o[n] = dot_one(m, m->w + n * m->w_stride, t);
            }
        }
        if (m->bias) add_bias(m, nt, ne);
    }
}

static void dot_task(void *arg, int part, int n_parts)
{
    const mm_task *m = arg;
    int64_t n0 = m->rows_per_part * part, n1 = n0 + m->rows_per_part;
    if (n1 > m->N) n1 = m->N;
    (void)n_parts;
    pagoda_cpu_mm_rows(m, n0, n1);
}

static void sgemm_f32(const float *x, size_t x_stride, int64_t T, int64_t K, const float *w,
                      size_t w_stride, int64_t N, const float *bias, float *out, size_t out_stride)
{
    float beta = 0.0f;
    if (bias) {
        for (int64_t t = 0; t < T; t++)
            memcpy((uint8_t *)out + t * out_stride, bias, (size_t)N * sizeof(float));
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)T, (blasint)N, (blasint)K, 1.0f,
                x, (blasint)(x_stride / sizeof(float)), w, (blasint)(w_stride / sizeof(float)), beta,
                out, (blasint)(out_stride / sizeof(float)));
}

typedef struct deq_task {
    const pagoda_vecdot_table *vt;
    const uint8_t *w;
    int dtype;
    size_t w_stride;
    int64_t K, n0, n1;
    float *tile;          /* [(n1 - n0) x K] */
} deq_task;

static void deq_worker(void *arg, int ith, int nth)
{
    deq_task *d = arg;
    int64_t lo, hi;
    split(d->n1 - d->n0, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++)
        d->vt->dequant(d->dtype, d->w + (size_t)(d->n0 + i) * d->w_stride, d->tile + i * d->K,
                       d->K);
}

/* Many rows of non-F32 weights: dequantize GEMM_TILE_N weight rows (in the
 * pool), multiply them with sgemm (OpenBLAS's threads), next tile. */
static int gemm_dequant(pagoda_cpu_exec *ex, const float *x, size_t x_stride, int64_t T, int64_t K,
                        const void *w, int dtype, size_t w_stride, int64_t N, const float *bias,
                        float *out, size_t out_stride)
{
    int64_t tn = N < GEMM_TILE_N ? N : GEMM_TILE_N;
    float *tile = pagoda_cpu_scratch(ex, sizeof(float) * (size_t)(tn * K));
    if (!tile) return PAGODA_ERR_NOMEM;
    for (int64_t n0 = 0; n0 < N; n0 += tn) {
        int64_t n1 = n0 + tn < N ? n0 + tn : N;
        deq_task d = {.vt = pagoda_cpu_vecdot(), .w = w, .dtype = dtype, .w_stride = w_stride, .K = K, .n0 = n0, .n1 = n1,
                      .tile = tile};
        pagoda_threadpool_run(ex->pool, deq_worker, &d);
        sgemm_f32(x, x_stride, T, K, tile, sizeof(float) * (size_t)K, n1 - n0,
                  bias ? bias + n0 : NULL, out + n0, out_stride);
    }
    return PAGODA_OK;
}

/* PAGODA_CPU_GEMM_MIN_T in the environment overrides the crossover for
 * every type (for measuring both paths on a machine, and for tests that
 * force one arithmetic); read once. 0: not set. */
static int64_t gemm_min_t_env(void)
{
    static int64_t v = -1;
    if (v < 0) {
        const char *e = getenv("PAGODA_CPU_GEMM_MIN_T");
        int64_t t = e && *e ? atoll(e) : 0;
        v = t > 0 ? t : 0;
    }
    return v;
}

/* Where dequantize + sgemm takes over from our kernels, per type, without
 * the environment override. Q8_0 / Q4_0: never (their tokens-in-lanes
 * int8 kernels beat it at every T: 110M, 512-token prefill, Q8_0 ~0.95 ->
 * 0.71 s, Q4_0 ~0.95 -> 0.65 s). F16: never either, since its lanes
 * kernel is blocked for prefill (vecdot_x8_avx2.c; it handed over to sgemm
 * from 256 tokens before): one core, CPU time, T = 512, K x N = 768 x 2048
 * / 5632 x 2048, 27.6 / 201 ms against 27.7 / 201 ms for dequantize +
 * sgemm, and with 2 threads it stays in our pool instead of alternating
 * with OpenBLAS's threads (docs/backend-cpu.md "F16 prefill"). The K-quants and IQ4_XS: never
 * (their lanes kernels, one core, K = N = 2048, T = 64 / 512: Q4_K 179 /
 * 170 GFLOP/s against 67 / 79 for dequantize + sgemm, Q5_K 157 / 154 vs
 * 61 / 76, Q6_K 133 / 127 vs 28 / 64). The others (F32, BF16): from 32. */
static int64_t sgemm_min_t(int dtype)
{
    if (dtype == PAGODA_DTYPE_Q8_0 || dtype == PAGODA_DTYPE_Q4_0) return INT64_MAX;
    if (pagoda_cpu_act_q8k(dtype)) return INT64_MAX;
    /* Q5_0 / Q5_1 / IQ4_NL: never either. Kernels on one core, K = 2048,
     * 2048 rows, T = 64 / 128 / 512, x8 vs dequantize + sgemm (GFLOP/s):
     * Q5_0 149 / 151 / 151 vs 69 / 76 / 80, Q5_1 137 / 134 / 135 vs
     * 67 / 71 / 80, IQ4_NL 101 / 100 / 101 vs 67 / 75 / 80. */
    if (dtype == PAGODA_DTYPE_Q5_0 || dtype == PAGODA_DTYPE_Q5_1 || dtype == PAGODA_DTYPE_IQ4_NL)
        return INT64_MAX;
    /* Q4_1: never, on every table (the scalar one too, which has no
     * lanes kernel and so runs one dot per pair: the reference keeps the
     * arithmetic of the levels it checks, int8 activations at every T,
     * as Q5_0 / Q5_1 / IQ4_NL do), since it has lanes kernels (Q5_1's
     * without qh): one
     * core, K = N = 2048, T = 64 / 512, GFLOP/s, AVX2 x8 171 / 154 and
     * AVX-512 VNNI 254 / 235 against 89 / 137 for dequantize + sgemm
     * (bench_cpu_lanes, Sapphire-Rapids-class host). */
    if (dtype == PAGODA_DTYPE_Q4_1) return INT64_MAX;
    /* MXFP4: never (docs/backend-cpu.md "MXFP4": its lanes kernel against
     * dequantize + sgemm). */
    if (dtype == PAGODA_DTYPE_MXFP4) return INT64_MAX;
    /* F16 on a table without its lanes kernel (scalar): sgemm from 256. */
    if (dtype == PAGODA_DTYPE_F16) return pagoda_cpu_vecdot()->gemm_f16_x8 ? INT64_MAX : 256;
    return PAGODA_CPU_GEMM_MIN_T;
}

/* The row count from which this type goes to dequantize + sgemm: the
 * environment's crossover when set, else the type's own. */
static int64_t sgemm_from(const pagoda_cpu_exec *ex, int dtype)
{
    int64_t env = gemm_min_t_env();
    /* batch-invariant: integer weights never switch to sgemm at a row
     * count (its exact F32 products are another arithmetic), whatever
     * PAGODA_CPU_GEMM_MIN_T says; F32 / F16 / BF16 are not covered */
    if (env && ex->batch_invariant && dtype != PAGODA_DTYPE_F32 && dtype != PAGODA_DTYPE_F16 &&
        dtype != PAGODA_DTYPE_BF16)
        return sgemm_min_t(dtype);
    return env ? env : sgemm_min_t(dtype);
}

bool pagoda_cpu_matmul_exact(const pagoda_cpu_exec *ex, int dtype, int64_t T)
{
    if (pagoda_cpu_bf16_applies(ex, dtype, T, 2)) return false;  /* BF16-rounded activations */
    if (dtype == PAGODA_DTYPE_F32 || dtype == PAGODA_DTYPE_F16 || dtype == PAGODA_DTYPE_BF16)
        return true;
    return T >= sgemm_from(ex, dtype);
}

/* The kernels and activation layouts of one matrix on the mm_task path
 * (no allocation): what its activations must be prepared as. */
void pagoda_cpu_mm_plan(const pagoda_cpu_exec *ex, mm_task *m)
{
    int w_dtype = m->dtype;
    int64_t T = m->T, K = m->K;
    if (pagoda_cpu_act_q8k(w_dtype))
        m->xq_stride = (size_t)(K / 256) * sizeof(pagoda_q8k_block);
    else if (w_dtype == PAGODA_DTYPE_Q8_0 || w_dtype == PAGODA_DTYPE_Q4_0 ||
             w_dtype == PAGODA_DTYPE_Q4_1 || w_dtype == PAGODA_DTYPE_Q5_0 ||
             w_dtype == PAGODA_DTYPE_Q5_1 || w_dtype == PAGODA_DTYPE_IQ4_NL ||
             w_dtype == PAGODA_DTYPE_MXFP4)
        m->xq_stride = (size_t)(K / 32) * sizeof(pagoda_q8a_block);
    bool q5 = w_dtype == PAGODA_DTYPE_Q5_0 || w_dtype == PAGODA_DTYPE_Q5_1 || w_dtype == PAGODA_DTYPE_IQ4_NL ||
              w_dtype == PAGODA_DTYPE_Q4_1;
    /* the lanes kernels: of the level's table, or from its 8-token one (vecdot.h lanes8) */
    const pagoda_vecdot_table *lt = T <= 8 && m->vt->lanes8 ? m->vt->lanes8 : m->vt;
    /* batch-invariant: the lanes kernels from one row on, so a row's sums
     * run in the same order whatever T is (cpu_features.h) */
    bool bi = ex->batch_invariant;
    int64_t x8_min = bi ? 1 : X8_MIN_T, x8_min_q5 = bi ? 1 : X8_MIN_T_Q5;
    if (T >= (q5 ? x8_min_q5 : x8_min))
        m->gemm_x8 = w_dtype == PAGODA_DTYPE_Q8_0 ? lt->gemm_q8_0_x8
                   : w_dtype == PAGODA_DTYPE_Q4_0 ? lt->gemm_q4_0_x8
                   : w_dtype == PAGODA_DTYPE_Q5_0 ? lt->gemm_q5_0_x8
                   : w_dtype == PAGODA_DTYPE_Q5_1 ? lt->gemm_q5_1_x8
                   : w_dtype == PAGODA_DTYPE_Q4_1 ? lt->gemm_q4_1_x8
                   : w_dtype == PAGODA_DTYPE_IQ4_NL ? lt->gemm_iq4_nl_x8 : NULL;
    if (w_dtype == PAGODA_DTYPE_MXFP4 && T >= x8_min) m->gemm_x8 = lt->gemm_mxfp4_x8;
    if (T >= x8_min) m->gemm_kx8 = gemm_kx8_of(lt, w_dtype);
    /* The row x token kernels of Q4_0, Q5_0, Q5_1, IQ4_NL, Q4_1 read prep_q4_0's groups. */
    bool groups = w_dtype == PAGODA_DTYPE_Q4_0 || (q5 && gemm_fn(m));
    if (groups && m->vt->prep_q4_0 && !m->gemm_x8)
        m->xp_stride = (size_t)((K / 32 + 3) / 4) * sizeof(pagoda_q4x_group);
    if (w_dtype == PAGODA_DTYPE_F16 && T >= x8_min && m->vt->gemm_f16_x8)
        m->gemm_f16_x8 = m->vt->gemm_f16_x8;
    m->gemm = gemm_fn(m);
}

/* Can b use the activations prepared for a? The same layouts of the same x. */
static bool mm_same_acts(const mm_task *a, const mm_task *b)
{
    return a->xq_stride == b->xq_stride && pagoda_cpu_act_q8k(a->dtype) == pagoda_cpu_act_q8k(b->dtype) &&
           !a->gemm_x8 == !b->gemm_x8 && !a->gemm_kx8 == !b->gemm_kx8 &&
           a->xp_stride == b->xp_stride && !a->gemm_f16_x8 == !b->gemm_f16_x8;
}

/* Prepare m's activations per its plan (quantized, interleaved or
 * transposed into the exec's scratch). */
static int mm_prepare(pagoda_cpu_exec *ex, mm_task *m)
{
    int64_t T = m->T, K = m->K;
    if (m->xq_stride) {
        /* One scratch: the q8a rows, then (Q4_0, Q5, IQ4_NL) their rearranged copy or
         * (x8) their groups of eight. */
        size_t xq_bytes = (m->xq_stride * (size_t)T + 63) & ~(size_t)63;
        size_t x8_bytes = m->gemm_x8 ? (size_t)((T + 7) / 8) * (size_t)(K / 32) * sizeof(pagoda_q8x8_block)
                        : m->gemm_kx8 ? (size_t)((T + 7) / 8) * (size_t)(K / 256) * sizeof(pagoda_q8kx8_block)
                                      : 0;
        m->xq = pagoda_cpu_scratch(ex, xq_bytes + m->xp_stride * (size_t)T + x8_bytes);
        if (!m->xq) return PAGODA_ERR_NOMEM;
        if (m->xp_stride) m->xp = m->xq + xq_bytes;
        if (m->gemm_x8 || m->gemm_kx8) {
            if (m->gemm_kx8)
                m->kx8 = (pagoda_q8kx8_block *)(m->xq + xq_bytes);
            else
                m->x8 = (pagoda_q8x8_block *)(m->xq + xq_bytes);
            pagoda_threadpool_run(ex->pool, quant_x8_task, m);
        } else if (T <= QUANT_INLINE_T) {
            /* A few rows quantize in about a microsecond: cheaper than
             * waking the pool for it. */
            quant_rows(m, 0, T);
        } else {
            pagoda_threadpool_run(ex->pool, quant_task, m);
        }
    }
    if (m->gemm_f16_x8) {
        m->xf8 = pagoda_cpu_scratch(ex, sizeof(float) * 8 * (size_t)K * (size_t)((T + 7) / 8));
        if (!m->xf8) return PAGODA_ERR_NOMEM;
        pagoda_threadpool_run(ex->pool, prep_f32_x8_task, m);
    }
    return PAGODA_OK;
}

/* Several matrices over one prepared input: their row parts in one pool
 * run (part_start: each matrix's first part). */
typedef struct mm_group {
    mm_task *t;
    int n;
    int part_start[PAGODA_CPU_MATMUL_MAX + 1];
} mm_group;

static void group_dot_task(void *arg, int part, int n_parts)
{
    mm_group *g = arg;
    int i = 0;
    while (part >= g->part_start[i + 1]) i++;
    dot_task(&g->t[i], part - g->part_start[i], n_parts);
}

/* Dot products of n prepared matrices (sharing their activations): a few
 * parts per thread over all their rows, whole 4-row tiles, so a thread the
 * OS took away for a while leaves its parts to the others (threadpool.h),
 * and the pool wakes once for all n. */
static void mm_run(pagoda_cpu_exec *ex, mm_task *t, int n)
{
    int nth = pagoda_threadpool_size(ex->pool);
    int64_t rows = 0;
    for (int i = 0; i < n; i++) rows += t[i].N;
    int64_t want = (int64_t)nth * PARTS_PER_THREAD;
    int64_t rpp = (rows + want - 1) / want;
    rpp = (rpp + 3) / 4 * 4;
    if (rpp < MIN_ROWS_PER_PART) rpp = MIN_ROWS_PER_PART;
    mm_group g = {.t = t, .n = n};
    for (int i = 0; i < n; i++) {
        t[i].rows_per_part = rpp;
        g.part_start[i + 1] = g.part_start[i] + (int)((t[i].N + rpp - 1) / rpp);
    }
    if (n == 1)
        pagoda_threadpool_run_parts(ex->pool, dot_task, t, g.part_start[1]);
    else
        pagoda_threadpool_run_parts(ex->pool, group_dot_task, &g, g.part_start[n]);
}

bool pagoda_cpu_mm_sgemm_path(const pagoda_cpu_exec *ex, int dtype, int64_t T)
{
    /* batch-invariant: F32 weights keep their own per-pair dot at every T
     * (sgemm's rows differ between a call of 1 row and one of 70: seen in
     * test_batch_invariant_rows), slower for a long prefill */
    if (dtype == PAGODA_DTYPE_F32) return !ex->batch_invariant && T >= F32_BLAS_MIN_T;
    return T >= sgemm_from(ex, dtype);
}

static int mm_sgemm(pagoda_cpu_exec *ex, const float *x, size_t x_stride, int64_t T, int64_t K,
                    const pagoda_cpu_mat *w)
{
    if (w->dtype == PAGODA_DTYPE_F32) {
        sgemm_f32(x, x_stride, T, K, w->w, w->w_stride, w->N, w->bias, w->out, w->out_stride);
        return PAGODA_OK;
    }
    return gemm_dequant(ex, x, x_stride, T, K, w->w, w->dtype, w->w_stride, w->N, w->bias, w->out,
                        w->out_stride);
}

int pagoda_cpu_matmul_multi(pagoda_cpu_exec *ex, const float *x, size_t x_stride, int64_t T, int64_t K,
                            const pagoda_cpu_mat *w, int n)
{
    if (n < 1 || n > PAGODA_CPU_MATMUL_MAX) return PAGODA_ERR_INVALID;
    for (int i = 0; i < n; i++)
        if (!pagoda_cpu_weight_type_supported(w[i].dtype)) return PAGODA_ERR_UNSUPPORTED;
    if (T <= 0) return PAGODA_OK;
    mm_task t[PAGODA_CPU_MATMUL_MAX];
    bool done[PAGODA_CPU_MATMUL_MAX] = {false};
    const pagoda_vecdot_table *vt = pagoda_cpu_vecdot();
    /* F16 / BF16 with many rows on AVX512-BF16: one packing of x for all
     * of them, on the AMX-BF16 tiles at the AMX level where CPUID has
     * AMX-BF16 (kernels/amx/amx_bf16_matmul.c), else vdpbf16ps
     * (kernels/avx512/matmul_bf16.c). */
    pagoda_cpu_mat bw[PAGODA_CPU_MATMUL_MAX];
    int nbw = 0;
    /* ... or the F32-FMA GEMM where f16_gemm picks it (kernels/avx512/
     * gemm_fma.h: exact F32, weights converted while packed) */
    for (int i = 0; i < n; i++)
        if (w[i].N > 0 && pagoda_cpu_fma_applies(ex, w[i].dtype, T)) {
            bw[nbw++] = w[i];
            done[i] = true;
        }
    if (nbw) {
        int st = pagoda_cpu_fma_matmul(ex, &pagoda_fma_native, x, x_stride, T, K, bw, nbw);
        if (st) return st;
        nbw = 0;
    }
    for (int i = 0; i < n; i++)
        if (!done[i] && w[i].N > 0 && pagoda_cpu_bf16_applies(ex, w[i].dtype, T, K)) {
            bw[nbw++] = w[i];
            done[i] = true;
        }
    if (nbw) {
        int st = pagoda_cpu_bf16_path() == PAGODA_BF16_PATH_AMX
                     ? pagoda_cpu_amxbf16_matmul(ex, &pagoda_bf16_native, pagoda_amxbf16_gemm_amx, x, x_stride,
                                                 T, K, bw, nbw)
                     : pagoda_cpu_bf16_matmul(ex, &pagoda_bf16_native, x, x_stride, T, K, bw, nbw);
        if (st) return st;
    }
    /* T >= 16 on a level with a GEMM on the row-interleaved layout: the
     * Q8_0 / Q4_0 weights it takes are done there (kernels/repack/). */
    int rst = pagoda_cpu_rp_matmul(ex, x, x_stride, T, K, w, n, done);
    if (rst) return rst;
    for (int i = 0; i < n; i++) {
        if (done[i]) continue;
        if (w[i].N <= 0) { done[i] = true; continue; }
        if (pagoda_cpu_mm_sgemm_path(ex, w[i].dtype, T)) {
            int st = mm_sgemm(ex, x, x_stride, T, K, &w[i]);
            if (st) return st;
            done[i] = true;
            continue;
        }
        t[i] = (mm_task){
            .vt = vt, .x = x, .x_stride = x_stride, .T = T, .K = K, .N = w[i].N,
            .w = w[i].w, .dtype = w[i].dtype, .w_stride = w[i].w_stride, .bias = w[i].bias,
            .out = w[i].out, .out_stride = w[i].out_stride,
        };
        pagoda_cpu_mm_plan(ex, &t[i]);
    }
    /* Groups of matrices whose activations are prepared alike, in order:
     * one preparation and one pool run each (Q/K/V or gate/up of one type:
     * one group). The scratch holds one preparation at a time. */
    for (int i = 0; i < n; i++) {
        if (done[i]) continue;
        mm_task g[PAGODA_CPU_MATMUL_MAX];
        int ng = 0;
        for (int j = i; j < n; j++)
            if (!done[j] && mm_same_acts(&t[i], &t[j])) {
                g[ng++] = t[j];
                done[j] = true;
            }
        int st = mm_prepare(ex, &g[0]);
        if (st) return st;
        for (int j = 1; j < ng; j++) {
            g[j].xq = g[0].xq; g[j].xp = g[0].xp; g[j].x8 = g[0].x8;
            g[j].kx8 = g[0].kx8; g[j].xf8 = g[0].xf8;
        }
        mm_run(ex, g, ng);
    }
    return PAGODA_OK;
}

int pagoda_cpu_matmul(pagoda_cpu_exec *ex, const float *x, size_t x_stride, int64_t T, int64_t K,
                      const void *w, int w_dtype, size_t w_stride, int64_t N, const float *bias,
                      float *out, size_t out_stride)
{
    pagoda_cpu_mat m = {.w = w, .dtype = w_dtype, .w_stride = w_stride, .N = N, .bias = bias,
                        .out = out, .out_stride = out_stride};
    return pagoda_cpu_matmul_multi(ex, x, x_stride, T, K, &m, 1);
}

int pagoda_cpu_get_rows(const void *table, int dtype, size_t row_stride, int64_t cols,
                        const int32_t *ids, int32_t n, float *out, size_t out_stride)
{
    if (!pagoda_cpu_weight_type_supported(dtype)) return PAGODA_ERR_UNSUPPORTED;
    for (int32_t i = 0; i < n; i++) {
        const uint8_t *src = (const uint8_t *)table + (size_t)ids[i] * row_stride;
        float *dst = (float *)((uint8_t *)out + (size_t)i * out_stride);
        if (dtype == PAGODA_DTYPE_F32)
            memcpy(dst, src, (size_t)cols * sizeof(float));
        else
            pagoda_dequantize_row(dtype, src, dst, cols);
    }
    return PAGODA_OK;
}
