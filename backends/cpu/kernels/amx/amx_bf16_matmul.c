/*
 * amx_bf16_matmul.c: the driver of the AMX-BF16 GEMM (gemm_bf16_amx.h):
 * which BF16 GEMM the active level runs, the activations packed once per
 * call (pack_x of gemm_bf16.h, each 16-token group padded with zero pair
 * rows to a multiple of 32 values), then row blocks claimed by the pool's
 * threads one at a time, each multiplied by the tile kernel against every
 * token group; a block that is not BF16 whole tiles (F16, K % 32, a short
 * last group) is first brought to BF16 in the thread's zero-padded slice.
 * Not for: the tile kernel (amx_bf16_gemm.inc), the vdpbf16ps path
 * (../avx512/matmul_bf16.c).
 */
#include "gemm_bf16_amx.h"

#include <string.h>

#include "amx.h"
#include "cpu_features.h"
#include "pagoda/types.h"
#include "row_blocks.h"

/* Rows per claimed block: a multiple of 32 (two row groups per step); at
 * most 128 rows (256 KiB of BF16 at K = 1024, 1.4 MiB at 5632: L2 beside
 * a token pair), fewer when that leaves a thread idle. */
#define BLOCK_ROWS_MAX 128

int pagoda_cpu_bf16_path(void)
{
    int a = pagoda_cpu_active_isa();
    if (a < PAGODA_CPU_ISA_AVX512 || !pagoda_cpu_has_avx512_bf16()) return PAGODA_BF16_PATH_NONE;
    if (a >= PAGODA_CPU_ISA_AMX && pagoda_amx_has_bf16()) return PAGODA_BF16_PATH_AMX;
    return PAGODA_BF16_PATH_AVX512;
}

const char *pagoda_cpu_bf16_path_name(int path)
{
    switch (path) {
    case PAGODA_BF16_PATH_AMX: return "AMX-BF16 tiles";
    case PAGODA_BF16_PATH_AVX512: return "AVX512-BF16";
    default: return "none";
    }
}

typedef struct amxbf16_job {
    const pagoda_bf16_kernels *kn;
    pagoda_amxbf16_gemm_fn gemm;
    const float *x;
    size_t x_stride;
    int64_t T, K, Kp;
    uint16_t *xp;           /* [n_groups][Kp / 2][16][2] */
    size_t group_elems;     /* 16 * Kp */
    int64_t n_groups;
    const pagoda_cpu_mat *w;
    pagoda_row_blocks blocks;
    uint16_t *wbuf;         /* per thread: blocks.rows x Kp BF16 */
    size_t wbuf_elems;
} amxbf16_job;

static void pack_task(void *arg, int part, int n_parts)
{
    amxbf16_job *j = arg;
    (void)n_parts;
    int64_t t0 = (int64_t)part * PAGODA_BF16_GROUP;
    int nt = j->T - t0 < PAGODA_BF16_GROUP ? (int)(j->T - t0) : PAGODA_BF16_GROUP;
    uint16_t *g = j->xp + (size_t)part * j->group_elems;
    j->kn->pack_x((const float *)(const void *)((const uint8_t *)j->x + (size_t)t0 * j->x_stride),
                  j->x_stride, nt, j->K, g);
    /* the pair rows past K meet zero weights, but must not be NaN */
    memset(g + 16 * j->K, 0, sizeof(uint16_t) * 16 * (size_t)(j->Kp - j->K));
}

static void run_block(amxbf16_job *j, const pagoda_cpu_mat *m, int64_t n0, int64_t n1, uint16_t *buf)
{
    int64_t nr = n1 - n0;
    const uint8_t *src = (const uint8_t *)m->w + (size_t)n0 * m->w_stride;
    const uint16_t *a = (const uint16_t *)(const void *)src;
    size_t lda = m->w_stride;
    bool f16 = m->dtype == PAGODA_DTYPE_F16;
    if (f16 || j->Kp != j->K || nr % 16) {
        int64_t rows16 = (nr + 15) / 16 * 16;
        for (int64_t r = 0; r < rows16; r++) {
            uint16_t *d = buf + (size_t)(r * j->Kp);
            int64_t done = 0;
            if (r < nr) {
                const uint16_t *s = (const uint16_t *)(const void *)(src + (size_t)r * m->w_stride);
                if (f16)
                    j->kn->f16_to_bf16(s, d, j->K);
                else
                    memcpy(d, s, sizeof(uint16_t) * (size_t)j->K);
                done = j->K;
            }
            memset(d + done, 0, sizeof(uint16_t) * (size_t)(j->Kp - done));
        }
        a = buf;
        lda = sizeof(uint16_t) * (size_t)j->Kp;
    }
    float *o = (float *)(void *)((uint8_t *)m->out) + n0;
    j->gemm(a, lda, nr, j->xp, j->group_elems, j->T, j->Kp / PAGODA_AMXBF16_KC, m->bias ? m->bias + n0 : NULL,
            o, m->out_stride);
}

static void mm_task(void *arg, int ith, int nth)
{
    amxbf16_job *j = arg;
    (void)nth;
    uint16_t *buf = j->wbuf + (size_t)ith * j->wbuf_elems;
    int i = 0;
    int64_t n0 = 0, n1 = 0;
    while (pagoda_row_blocks_claim(&j->blocks, j->w, &i, &n0, &n1)) run_block(j, &j->w[i], n0, n1, buf);
}

int pagoda_cpu_amxbf16_matmul(pagoda_cpu_exec *ex, const pagoda_bf16_kernels *kn,
                              pagoda_amxbf16_gemm_fn gemm, const float *x, size_t x_stride, int64_t T,
                              int64_t K, const pagoda_cpu_mat *w, int n)
{
    if (n < 1 || n > PAGODA_CPU_MATMUL_MAX || K % 2 || K <= 0) return PAGODA_ERR_INVALID;
    for (int i = 0; i < n; i++)
        if (w[i].dtype != PAGODA_DTYPE_F16 && w[i].dtype != PAGODA_DTYPE_BF16) return PAGODA_ERR_INVALID;
    if (T <= 0) return PAGODA_OK;
    amxbf16_job j = {.kn = kn, .gemm = gemm, .x = x, .x_stride = x_stride, .T = T, .K = K, .w = w};
    j.Kp = (K + PAGODA_AMXBF16_KC - 1) / PAGODA_AMXBF16_KC * PAGODA_AMXBF16_KC;
    j.group_elems = (size_t)PAGODA_BF16_GROUP * (size_t)j.Kp;
    j.n_groups = (T + PAGODA_BF16_GROUP - 1) / PAGODA_BF16_GROUP;
    int nth = pagoda_threadpool_size(ex->pool);
    /* the largest N split in two blocks a thread at least, up to 128 rows */
    int64_t nmax = 0;
    for (int i = 0; i < n; i++) nmax = w[i].N > nmax ? w[i].N : nmax;
    int64_t rows = (nmax + 2 * nth - 1) / (2 * nth);
    rows = (rows + 31) / 32 * 32;
    int64_t block_rows = rows < 32 ? 32 : rows > BLOCK_ROWS_MAX ? BLOCK_ROWS_MAX : rows;
    pagoda_row_blocks_init(&j.blocks, w, n, block_rows);
    size_t xp_bytes = (sizeof(uint16_t) * j.group_elems * (size_t)j.n_groups + 63) & ~(size_t)63;
    j.wbuf_elems = (((size_t)block_rows * (size_t)j.Kp * sizeof(uint16_t) + 63) & ~(size_t)63) / sizeof(uint16_t);
    uint8_t *s = pagoda_cpu_scratch(ex, xp_bytes + (size_t)nth * j.wbuf_elems * sizeof(uint16_t));
    if (!s) return PAGODA_ERR_NOMEM;
    j.xp = (uint16_t *)(void *)s;
    j.wbuf = (uint16_t *)(void *)(s + xp_bytes);
    pagoda_threadpool_run_parts(ex->pool, pack_task, &j, (int)j.n_groups);
    pagoda_threadpool_run(ex->pool, mm_task, &j);
    return PAGODA_OK;
}
