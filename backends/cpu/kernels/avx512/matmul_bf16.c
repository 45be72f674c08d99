/*
 * matmul_bf16.c: the driver of the BF16 GEMM (gemm_bf16.h): when it
 * applies, the activations packed once per call into 16-token groups of
 * BF16 pairs (exec scratch, in the pool), then the weight rows in row
 * blocks claimed by the pool's threads one at a time; each block is
 * packed into BF16 pairs (F16 converted on the way) in the thread's own
 * slice of the scratch, then meets every 32-token pair of groups, 12 rows
 * per kernel call.
 * Memory: 2 * K * T (T rounded up to 16) bytes of packed activations plus
 * threads * (rows per block + 1) * K * 2 bytes; nothing is kept between
 * calls and no weight copy is made at load.
 * Not for: the kernels (gemm_bf16_avx512.c), the other weight types.
 */
#include "gemm_bf16.h"

#include <stdlib.h>

#include "cpu_features.h"
#include "gemm_fma.h"
#include "pagoda/types.h"
#include "row_blocks.h"

/* Defaults for pagoda_cpu_bf16_min_t: below them the exact F32 kernels
 * of the AVX2 table win (the weights are packed once per call, which a
 * few tokens do not pay back). tests/bench/bench_cpu_bf16, one thread,
 * CPU GFLOP/s, K x N = 2048 x 2048 / 2048 x 5632 / 5632 x 2048, this GEMM
 * vs the AVX2 path on this AVX512-BF16 host (docs/backend-cpu.md "BF16 GEMM"):
 *   BF16  T = 8: 31 / 28 / 33 vs 33 / 30 / 36; T = 16: 56 / 59 / 63 vs 36 / 37 / 33
 *   F16   T = 16: 51 / 51 / 50 vs 78 / 81 / 81; T = 32: 112 / 114 / 114 vs 76 / 79 / 77 */
#define BF16_MIN_T_BF16 16
#define BF16_MIN_T_F16 32
/* Bytes of weight rows per block: stays in L2 beside a 32-token
 * activation pair (2 * 16 * K * 2 bytes). */
#define BLOCK_BYTES (192 * 1024)
#define BLOCK_ROWS_MAX 96

/* pagoda_cpu_has_avx512_bf16(): cpu_features.c (CPUID + XCR0). */

static int64_t env_int(const char *name, int64_t dflt)
{
    const char *e = getenv(name);
    if (!e || !*e) return dflt;
    char *end;
    long long v = strtoll(e, &end, 10);
    return *end || v < 0 ? dflt : (int64_t)v;
}

int64_t pagoda_cpu_bf16_min_t(int dtype)
{
    static int64_t v = -1;
    if (v < 0) v = env_int("PAGODA_CPU_BF16_MIN_T", 0);
    if (v > 0) return v;
    return dtype == PAGODA_DTYPE_F16 ? BF16_MIN_T_F16 : BF16_MIN_T_BF16;
}

/* PAGODA_CPU_BF16: 0 off; 1 (the default) BF16 weights only; 2 F16 weights
 * too. F16 weights rounded to BF16 lose three bits of their significand
 * (SmolLM2-135M F16: perplexity +0.011 %, logits ~3e-3 from an exact F16
 * reference), so that is asked for, not done by default: by that variable
 * or by `[backend.cpu] f16_gemm = dpbf16` said in so many words (not
 * auto), which without the variable takes F16 too (on Zen 4 the one path
 * past the FMA peak's bound: docs/backend-cpu.md "F32-FMA GEMM"). */
static bool bf16_enabled(const pagoda_cpu_exec *ex, int dtype)
{
    static int v = -1;
    if (v < 0) v = (int)env_int("PAGODA_CPU_BF16", -1);
    if (v < 0) return dtype == PAGODA_DTYPE_BF16 || ex->f16_gemm == PAGODA_F16GEMM_DPBF16;
    return v >= 2 || (v == 1 && dtype == PAGODA_DTYPE_BF16);
}

bool pagoda_cpu_bf16_applies(const pagoda_cpu_exec *ex, int dtype, int64_t T, int64_t K)
{
    if (dtype != PAGODA_DTYPE_F16 && dtype != PAGODA_DTYPE_BF16) return false;
    if (K % 2 || T < pagoda_cpu_bf16_min_t(dtype)) return false;
    /* batch_invariant: F16 stays exact at every T (the lanes kernels),
     * whatever f16_gemm or PAGODA_CPU_BF16 ask, as gemm_fma's rule */
    if (dtype == PAGODA_DTYPE_F16 && ex->batch_invariant) return false;
    /* f16_gemm (gemm_fma.h): this GEMM only where it says dpbf16 */
    if (pagoda_cpu_f16_gemm_path(ex, dtype) != PAGODA_F16GEMM_DPBF16) return false;
    return pagoda_cpu_active_isa() >= PAGODA_CPU_ISA_AVX512 && pagoda_cpu_has_avx512_bf16() &&
           bf16_enabled(ex, dtype);
}

typedef struct bf16_job {
    const pagoda_bf16_kernels *kn;
    const float *x;
    size_t x_stride;
    int64_t T, K;
    uint16_t *xp;           /* [n_groups][K / 2][16][2] */
    size_t group_elems;     /* 16 * K */
    int64_t n_groups;       /* ceil(T / 16) */
    const pagoda_cpu_mat *w;
    pagoda_row_blocks blocks;
    uint8_t *wbuf;          /* per thread: the block's packed rows, then one F16 row's conversion */
    size_t wbuf_per_thread;
} bf16_job;

static void pack_task(void *arg, int part, int n_parts)
{
    bf16_job *j = arg;
    (void)n_parts;
    int64_t t0 = (int64_t)part * PAGODA_BF16_GROUP;
    int nt = j->T - t0 < PAGODA_BF16_GROUP ? (int)(j->T - t0) : PAGODA_BF16_GROUP;
    j->kn->pack_x((const float *)(const void *)((const uint8_t *)j->x + (size_t)t0 * j->x_stride),
                  j->x_stride, nt, j->K, j->xp + (size_t)part * j->group_elems);
}

static void run_block(bf16_job *j, const pagoda_cpu_mat *m, int64_t n0, int64_t n1, uint32_t *wp, uint16_t *row)
{
    size_t tile_elems = (size_t)PAGODA_BF16_NR * (size_t)(j->K / 2);
    for (int64_t r = n0; r < n1; r += PAGODA_BF16_NR) {
        int nr = n1 - r < PAGODA_BF16_NR ? (int)(n1 - r) : PAGODA_BF16_NR;
        j->kn->pack_w((const uint8_t *)m->w + (size_t)r * m->w_stride, m->w_stride,
                      m->dtype == PAGODA_DTYPE_F16, nr, j->K, wp + (size_t)(r - n0) / PAGODA_BF16_NR * tile_elems,
                      row);
    }
    for (int64_t g = 0; g < j->n_groups; g += 2) {
        int ng = g + 1 < j->n_groups ? 2 : 1;
        int64_t t0 = g * PAGODA_BF16_GROUP;
        int nt = j->T - t0 < 2 * PAGODA_BF16_GROUP ? (int)(j->T - t0) : 2 * PAGODA_BF16_GROUP;
        float *o = (float *)(void *)((uint8_t *)m->out + (size_t)t0 * m->out_stride);
        for (int64_t r = n0; r < n1; r += PAGODA_BF16_NR) {
            int nr = n1 - r < PAGODA_BF16_NR ? (int)(n1 - r) : PAGODA_BF16_NR;
            j->kn->tile(wp + (size_t)(r - n0) / PAGODA_BF16_NR * tile_elems, nr,
                        j->xp + (size_t)g * j->group_elems, j->group_elems, ng, nt, j->K,
                        m->bias ? m->bias + r : NULL, o + r, m->out_stride);
        }
    }
}

static void mm_task(void *arg, int ith, int nth)
{
    bf16_job *j = arg;
    (void)nth;
    uint8_t *mine = j->wbuf + (size_t)ith * j->wbuf_per_thread;
    uint32_t *wp = (uint32_t *)(void *)mine;
    uint16_t *row = (uint16_t *)(void *)(mine + j->wbuf_per_thread - sizeof(uint16_t) * (size_t)j->K);
    int i = 0;
    int64_t n0 = 0, n1 = 0;
    while (pagoda_row_blocks_claim(&j->blocks, j->w, &i, &n0, &n1)) run_block(j, &j->w[i], n0, n1, wp, row);
}

int pagoda_cpu_bf16_matmul(pagoda_cpu_exec *ex, const pagoda_bf16_kernels *kn, const float *x,
                           size_t x_stride, int64_t T, int64_t K, const pagoda_cpu_mat *w, int n)
{
    if (n < 1 || n > PAGODA_CPU_MATMUL_MAX || K % 2 || K <= 0) return PAGODA_ERR_INVALID;
    for (int i = 0; i < n; i++)
        if (w[i].dtype != PAGODA_DTYPE_F16 && w[i].dtype != PAGODA_DTYPE_BF16) return PAGODA_ERR_INVALID;
    if (T <= 0) return PAGODA_OK;
    bf16_job j = {.kn = kn, .x = x, .x_stride = x_stride, .T = T, .K = K, .w = w};
    j.group_elems = (size_t)PAGODA_BF16_GROUP * (size_t)K;
    j.n_groups = (T + PAGODA_BF16_GROUP - 1) / PAGODA_BF16_GROUP;
    int64_t rows = BLOCK_BYTES / (2 * K) / PAGODA_BF16_NR * PAGODA_BF16_NR;
    int64_t block_rows = rows < PAGODA_BF16_NR ? PAGODA_BF16_NR : rows > BLOCK_ROWS_MAX ? BLOCK_ROWS_MAX : rows;
    pagoda_row_blocks_init(&j.blocks, w, n, block_rows);
    int nth = pagoda_threadpool_size(ex->pool);
    size_t xp_bytes = (sizeof(uint16_t) * j.group_elems * (size_t)j.n_groups + 63) & ~(size_t)63;
    size_t blocks12 = (size_t)((block_rows + PAGODA_BF16_NR - 1) / PAGODA_BF16_NR);
    j.wbuf_per_thread = (blocks12 * PAGODA_BF16_NR * (size_t)K * sizeof(uint16_t) +
                         (size_t)K * sizeof(uint16_t) + 63) & ~(size_t)63;
    uint8_t *s = pagoda_cpu_scratch(ex, xp_bytes + (size_t)nth * j.wbuf_per_thread);
    if (!s) return PAGODA_ERR_NOMEM;
    j.xp = (uint16_t *)(void *)s;
    j.wbuf = s + xp_bytes;
    pagoda_threadpool_run_parts(ex->pool, pack_task, &j, (int)j.n_groups);
    pagoda_threadpool_run(ex->pool, mm_task, &j);
    return PAGODA_OK;
}
