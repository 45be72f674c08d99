/*
 * matmul_bf16.c: the driver of the BF16 GEMM (gemm_bf16.h): when it
 * applies, the activations packed once per call into 16-token groups of
 * BF16 pairs (exec scratch, in the pool), then the weight rows in row
 * blocks claimed by the pool's threads one at a time; each block (F16
 * rows converted to BF16 first, into the thread's own slice of the
 * scratch) meets every 32-token pair of groups, 12 rows per kernel call.
 * Memory: 2 * K * T (rounded up to 32 tokens) bytes of packed activations
 * plus, for F16, threads * rows per block * K * 2 bytes; nothing is kept
 * between calls and no weight copy is made at load.
 * Not for: the kernels (gemm_bf16_avx512.c), the other weight types.
 */
#include "gemm_bf16.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "cpu_features.h"
#include "pagoda/types.h"

/* Default for pagoda_cpu_bf16_min_t: from 16 tokens the 32-token kernel
 * is half full; measured on Zen 4 (docs/backend-cpu.md "BF16 GEMM"). */
#define BF16_MIN_T 16
/* Bytes of weight rows per block: stays in L2 beside a 32-token
 * activation pair (2 * 16 * K * 2 bytes). */
#define BLOCK_BYTES (192 * 1024)
#define BLOCK_ROWS_MAX 96

bool pagoda_cpu_has_avx512_bf16(void)
{
#if defined(__x86_64__) || defined(__i386__)
    static int has = -1;
    if (has < 0) {
        __builtin_cpu_init();
        has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
    }
    return has;
#else
    return false;
#endif
}

static int64_t env_int(const char *name, int64_t dflt)
{
    const char *e = getenv(name);
    if (!e || !*e) return dflt;
    char *end;
    long long v = strtoll(e, &end, 10);
    return *end || v < 0 ? dflt : (int64_t)v;
}

int64_t pagoda_cpu_bf16_min_t(void)
{
    static int64_t v = -1;
    if (v < 0) {
        int64_t t = env_int("PAGODA_CPU_BF16_MIN_T", BF16_MIN_T);
        v = t > 0 ? t : 1;
    }
    return v;
}

static bool bf16_enabled(void)
{
    static int v = -1;
    if (v < 0) v = env_int("PAGODA_CPU_BF16", 1) != 0;
    return v;
}

bool pagoda_cpu_bf16_applies(int dtype, int64_t T, int64_t K)
{
    if (dtype != PAGODA_DTYPE_F16 && dtype != PAGODA_DTYPE_BF16) return false;
    if (K % 2 || T < pagoda_cpu_bf16_min_t()) return false;
    return pagoda_cpu_active_isa() >= PAGODA_CPU_ISA_AVX512 && pagoda_cpu_has_avx512_bf16() &&
           bf16_enabled();
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
    int n;
    int64_t block_rows;
    int64_t block_start[PAGODA_CPU_MATMUL_MAX + 1];  /* matrix i: blocks [start[i], start[i+1]) */
    uint16_t *conv;         /* [threads][block_rows * K], F16 only */
    atomic_llong next;
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

static void run_block(bf16_job *j, int64_t b, uint16_t *conv)
{
    int i = 0;
    while (b >= j->block_start[i + 1]) i++;
    const pagoda_cpu_mat *m = &j->w[i];
    int64_t n0 = (b - j->block_start[i]) * j->block_rows;
    int64_t n1 = n0 + j->block_rows < m->N ? n0 + j->block_rows : m->N;
    const uint16_t *wr = (const uint16_t *)(const void *)((const uint8_t *)m->w + (size_t)n0 * m->w_stride);
    size_t ws = m->w_stride;
    if (m->dtype == PAGODA_DTYPE_F16) {
        for (int64_t r = 0; r < n1 - n0; r++)
            j->kn->f16_to_bf16((const uint16_t *)(const void *)((const uint8_t *)wr + (size_t)r * ws),
                               conv + (size_t)r * (size_t)j->K, j->K);
        wr = conv;
        ws = sizeof(uint16_t) * (size_t)j->K;
    }
    for (int64_t g = 0; g < j->n_groups; g += 2) {
        int ng = g + 1 < j->n_groups ? 2 : 1;
        int64_t t0 = g * PAGODA_BF16_GROUP;
        int nt = j->T - t0 < 2 * PAGODA_BF16_GROUP ? (int)(j->T - t0) : 2 * PAGODA_BF16_GROUP;
        float *o = (float *)(void *)((uint8_t *)m->out + (size_t)t0 * m->out_stride);
        for (int64_t r = n0; r < n1; r += PAGODA_BF16_NR) {
            int nr = n1 - r < PAGODA_BF16_NR ? (int)(n1 - r) : PAGODA_BF16_NR;
            j->kn->tile((const uint16_t *)(const void *)((const uint8_t *)wr + (size_t)(r - n0) * ws), ws, nr,
                        j->xp + (size_t)g * j->group_elems, j->group_elems, ng, nt, j->K,
                        m->bias ? m->bias + r : NULL, o + r, m->out_stride);
        }
    }
}

static void mm_task(void *arg, int ith, int nth)
{
    bf16_job *j = arg;
    (void)nth;
    uint16_t *conv = j->conv ? j->conv + (size_t)ith * (size_t)(j->block_rows * j->K) : NULL;
    int64_t total = j->block_start[j->n];
    for (;;) {
        int64_t b = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (b >= total) break;
        run_block(j, b, conv);
    }
}

int pagoda_cpu_bf16_matmul(pagoda_cpu_exec *ex, const pagoda_bf16_kernels *kn, const float *x,
                           size_t x_stride, int64_t T, int64_t K, const pagoda_cpu_mat *w, int n)
{
    if (n < 1 || n > PAGODA_CPU_MATMUL_MAX || K % 2 || K <= 0) return PAGODA_ERR_INVALID;
    bool any_f16 = false;
    for (int i = 0; i < n; i++) {
        if (w[i].dtype != PAGODA_DTYPE_F16 && w[i].dtype != PAGODA_DTYPE_BF16) return PAGODA_ERR_INVALID;
        any_f16 |= w[i].dtype == PAGODA_DTYPE_F16;
    }
    if (T <= 0) return PAGODA_OK;
    bf16_job j = {.kn = kn, .x = x, .x_stride = x_stride, .T = T, .K = K, .w = w, .n = n};
    j.group_elems = (size_t)PAGODA_BF16_GROUP * (size_t)K;
    j.n_groups = (T + PAGODA_BF16_GROUP - 1) / PAGODA_BF16_GROUP;
    int64_t rows = BLOCK_BYTES / (2 * K) / PAGODA_BF16_NR * PAGODA_BF16_NR;
    j.block_rows = rows < PAGODA_BF16_NR ? PAGODA_BF16_NR : rows > BLOCK_ROWS_MAX ? BLOCK_ROWS_MAX : rows;
    for (int i = 0; i < n; i++) {
        int64_t N = w[i].N > 0 ? w[i].N : 0;
        j.block_start[i + 1] = j.block_start[i] + (N + j.block_rows - 1) / j.block_rows;
    }
    int nth = pagoda_threadpool_size(ex->pool);
    size_t xp_bytes = (sizeof(uint16_t) * j.group_elems * (size_t)j.n_groups + 63) & ~(size_t)63;
    size_t conv_bytes = any_f16 ? sizeof(uint16_t) * (size_t)nth * (size_t)(j.block_rows * K) : 0;
    uint8_t *s = pagoda_cpu_scratch(ex, xp_bytes + conv_bytes);
    if (!s) return PAGODA_ERR_NOMEM;
    j.xp = (uint16_t *)(void *)s;
    j.conv = any_f16 ? (uint16_t *)(void *)(s + xp_bytes) : NULL;
    pagoda_threadpool_run_parts(ex->pool, pack_task, &j, (int)j.n_groups);
    atomic_init(&j.next, 0);
    pagoda_threadpool_run(ex->pool, mm_task, &j);
    return PAGODA_OK;
}
