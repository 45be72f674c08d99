/*
 * gemm_fma_avx512.c: the F32-FMA GEMM for F16 / BF16 weights (gemm_fma.h).
 * The kernels are written once against SIMDe's names: with this folder's
 * AVX-512 flags they are the native instructions (AVX-512F FMAs; the packing
 * on 256-bit vcvtph2ps / vpmovzxwd, which SIMDe has); the tests' wrapper compiles the file again with
 * PAGODA_SIMDE on AVX2 (pagoda_fma_simde, the same arithmetic). The
 * driver over the pool and the path choice come only in the native
 * compile.
 * Layout: tokens in lanes, as the BF16 GEMM. One packed group holds 16
 * tokens' F32 activations, g[k][16]; a weight row block is converted to
 * F32 a K block (PAGODA_FMA_KC values) at a time into rows of a fixed
 * stride, so the 12 broadcasts of a step read one pointer plus constant
 * displacements (a vbroadcastss each). A tile of 12 rows x 32 tokens
 * keeps 24 zmm sums; over K blocks they rest in the thread's slice
 * between blocks (24 loads and stores per 6,144 FMAs). BLIS's order: a
 * 12-row tile of one K block (12 KiB) stays in L1 while the 32-token
 * pairs' activations of that block stream past it from L2; the kernel
 * alone, L1-resident, ran at 171 GFLOP/s on one core of this host (zmm
 * FMA peak 163.6 by `pagoda bench --roofline`: the tile is not the limit).
 * Not for: the BF16 dot-product GEMM (gemm_bf16*.c, matmul_bf16.c).
 */
#if defined(__clang__) && defined(PAGODA_SIMDE)
#pragma clang diagnostic ignored "-Wpsabi"
#endif
#ifdef PAGODA_SIMDE
#define FMA_SFX(name) name##_simde
#define FMA_TABLE pagoda_fma_simde
#define FMA_NAME "AVX-512F FMA (SIMDe on AVX2)"
#else
#define FMA_SFX(name) name##_native
#define FMA_TABLE pagoda_fma_native
#define FMA_NAME "AVX-512F FMA"
#endif

#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>
#include <string.h>

#include "gemm_fma.h"
#include "quant.h"
#include "tile_store.h"

static void FMA_SFX(pack_x)(const float *x, size_t x_stride, int nt, int64_t k, float *g)
{
    const float *r[PAGODA_FMA_GROUP];
    for (int l = 0; l < nt; l++) r[l] = (const float *)(const void *)((const uint8_t *)x + (size_t)l * x_stride);
    for (int64_t p = 0; p < k; p++) {
        float *d = g + p * PAGODA_FMA_GROUP;
        int l = 0;
        for (; l < nt; l++) d[l] = r[l][p];
        for (; l < PAGODA_FMA_GROUP; l++) d[l] = 0.0f;
    }
}

static void FMA_SFX(pack_w)(const void *w, size_t w_stride, bool f16, int nr, int64_t k0, int kc, float *wp)
{
    for (int j = 0; j < PAGODA_FMA_NR; j++) {
        const uint16_t *src = (const uint16_t *)(const void *)((const uint8_t *)w +
                                                              (size_t)(j < nr ? j : nr - 1) * w_stride) + k0;
        float *d = wp + (size_t)j * PAGODA_FMA_KC;
        int p = 0;
        if (f16) {
            for (; p + 8 <= kc; p += 8)
                simde_mm256_storeu_ps(d + p, simde_mm256_cvtph_ps(simde_mm_loadu_si128((const void *)(src + p))));
            for (; p < kc; p++) d[p] = pagoda_fp16_to_fp32(src[p]);
        } else {
            for (; p + 8 <= kc; p += 8) {
                simde__m256i u = simde_mm256_cvtepu16_epi32(simde_mm_loadu_si128((const void *)(src + p)));
                simde_mm256_storeu_si256((void *)(d + p), simde_mm256_slli_epi32(u, 16));
            }
            for (; p < kc; p++) {
                uint32_t u = (uint32_t)src[p] << 16;
                memcpy(d + p, &u, 4);
            }
        }
    }
}

/* The tile for NG groups (compile-time 1 or 2, so the 12 x NG sums stay
 * in registers). */
static inline void tile_ng(const float *wp, int nr, const float *xg, size_t group_elems, const int NG, int nt,
                           int kc, float *accb, bool first, bool last, const float *bias, float *out,
                           size_t out_stride)
{
    simde__m512 acc[2][PAGODA_FMA_NR];
    for (int g = 0; g < NG; g++)
        for (int j = 0; j < PAGODA_FMA_NR; j++)
            acc[g][j] = first ? simde_mm512_setzero_ps()
                              : simde_mm512_loadu_ps(accb + (size_t)(g * PAGODA_FMA_NR + j) * 16);
    const float *x1 = xg + group_elems;
    for (int p = 0; p < kc; p++) {
        simde__m512 xa = simde_mm512_loadu_ps(xg + (size_t)p * 16);
        simde__m512 xb = xa;
        if (NG == 2) xb = simde_mm512_loadu_ps(x1 + (size_t)p * 16);
        const float *wr = wp + p;
        for (int j = 0; j < PAGODA_FMA_NR; j++) {
            simde__m512 wb = simde_mm512_set1_ps(wr[j * PAGODA_FMA_KC]);
            acc[0][j] = simde_mm512_fmadd_ps(xa, wb, acc[0][j]);
            if (NG == 2) acc[1][j] = simde_mm512_fmadd_ps(xb, wb, acc[1][j]);
        }
    }
    if (!last) {
        for (int g = 0; g < NG; g++)
            for (int j = 0; j < PAGODA_FMA_NR; j++)
                simde_mm512_storeu_ps(accb + (size_t)(g * PAGODA_FMA_NR + j) * 16, acc[g][j]);
        return;
    }
    pagoda_tile_store(&acc[0][0], PAGODA_FMA_NR, NG, nr, nt, bias, out, out_stride);
}

static void FMA_SFX(tile)(const float *wp, int nr, const float *xg, size_t group_elems, int ng, int nt, int kc,
                          float *acc, bool first, bool last, const float *bias, float *out, size_t out_stride)
{
    if (ng == 2)
        tile_ng(wp, nr, xg, group_elems, 2, nt, kc, acc, first, last, bias, out, out_stride);
    else
        tile_ng(wp, nr, xg, group_elems, 1, nt, kc, acc, first, last, bias, out, out_stride);
}

const pagoda_fma_kernels FMA_TABLE = {
    .name = FMA_NAME,
    .pack_x = FMA_SFX(pack_x),
    .pack_w = FMA_SFX(pack_w),
    .tile = FMA_SFX(tile),
};

#ifndef PAGODA_SIMDE
/* ---- the driver and the path choice (native compile only) ---- */
#include <cpuid.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "cpu_features.h"
#include "gemm_bf16.h"
#include "amx/gemm_bf16_amx.h"
#include "pagoda/types.h"
#include "row_blocks.h"

/* Defaults for pagoda_cpu_fma_min_t: below them the table's exact kernels
 * (the F16 lanes kernel, the BF16 dots) win, the weights being converted
 * once per call. */
#define FMA_MIN_T_F16 32
#define FMA_MIN_T_BF16 16
/* Weight rows of one block (a multiple of 12): 96 rows x KC floats =
 * 96 KiB of converted rows per K block, in L2 beside the activations. */
#define BLOCK_ROWS 96

int pagoda_cpu_f16_gemm_parse(const char *s)
{
    if (!s) return -1;
    static const char *names[] = {"auto", "fma", "dpbf16", "off"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

const char *pagoda_cpu_f16_gemm_name(int mode)
{
    switch (mode) {
    case PAGODA_F16GEMM_AUTO: return "auto";
    case PAGODA_F16GEMM_FMA: return "fma";
    case PAGODA_F16GEMM_DPBF16: return "dpbf16";
    case PAGODA_F16GEMM_OFF: return "off";
    default: return "?";
    }
}

static bool vendor_amd(void)
{
    static _Atomic int v = -1; /* the same answer from any thread */
    if (v < 0) {
        unsigned a, b, c, d;
        char s[13] = {0};
        if (__get_cpuid(0, &a, &b, &c, &d)) {
            memcpy(s, &b, 4);
            memcpy(s + 4, &d, 4);
            memcpy(s + 8, &c, 4);
        }
        v = !strcmp(s, "AuthenticAMD") || !strcmp(s, "HygonGenuine");
    }
    return v;
}

int pagoda_cpu_f16_gemm_path(const pagoda_cpu_exec *ex, int dtype)
{
    int m = ex->f16_gemm;
    if (m > PAGODA_F16GEMM_AUTO && m <= PAGODA_F16GEMM_OFF) return m;
    static _Atomic int env_bf16 = -1; /* read once, as matmul_bf16.c reads its value */
    if (env_bf16 < 0) env_bf16 = getenv("PAGODA_CPU_BF16") != NULL;
    if (env_bf16) return PAGODA_F16GEMM_DPBF16;
    if (dtype == PAGODA_DTYPE_F16) return PAGODA_F16GEMM_FMA;
    if (pagoda_cpu_bf16_path() == PAGODA_BF16_PATH_AMX) return PAGODA_F16GEMM_DPBF16;
    if (pagoda_cpu_has_avx512_bf16() && vendor_amd()) return PAGODA_F16GEMM_DPBF16;
    return PAGODA_F16GEMM_FMA;
}

int64_t pagoda_cpu_fma_min_t(int dtype)
{
    static _Atomic int64_t v = -1;
    if (v < 0) {
        const char *e = getenv("PAGODA_CPU_BF16_MIN_T");
        char *end = NULL;
        long long n = e && *e ? strtoll(e, &end, 10) : 0;
        v = e && *e && !*end && n > 0 ? (int64_t)n : 0;
    }
    if (v > 0) return v;
    return dtype == PAGODA_DTYPE_F16 ? FMA_MIN_T_F16 : FMA_MIN_T_BF16;
}

bool pagoda_cpu_fma_applies(const pagoda_cpu_exec *ex, int dtype, int64_t T)
{
    if (dtype != PAGODA_DTYPE_F16 && dtype != PAGODA_DTYPE_BF16) return false;
    if (T < pagoda_cpu_fma_min_t(dtype)) return false;
    if (dtype == PAGODA_DTYPE_F16 && ex->batch_invariant) return false;
    return pagoda_cpu_active_isa() >= PAGODA_CPU_ISA_AVX512 &&
           pagoda_cpu_f16_gemm_path(ex, dtype) == PAGODA_F16GEMM_FMA;
}

typedef struct fma_job {
    const pagoda_fma_kernels *kn;
    const float *x;
    size_t x_stride;
    int64_t T, K;
    float *xp;              /* [n_groups][K][16] */
    size_t group_elems;     /* 16 * K */
    int64_t n_groups;       /* ceil(T / 16) */
    int64_t n_pairs;        /* ceil(n_groups / 2) */
    const pagoda_cpu_mat *w;
    pagoda_row_blocks blocks; /* BLOCK_ROWS rows each */
    uint8_t *wbuf;          /* per thread: the block's converted rows, then the tiles' sums */
    size_t wbuf_per_thread;
} fma_job;

static void pack_task(void *arg, int part, int n_parts)
{
    fma_job *j = arg;
    (void)n_parts;
    int64_t t0 = (int64_t)part * PAGODA_FMA_GROUP;
    int nt = j->T - t0 < PAGODA_FMA_GROUP ? (int)(j->T - t0) : PAGODA_FMA_GROUP;
    j->kn->pack_x((const float *)(const void *)((const uint8_t *)j->x + (size_t)t0 * j->x_stride), j->x_stride,
                  nt, j->K, j->xp + (size_t)part * j->group_elems);
}

enum { TILES = BLOCK_ROWS / PAGODA_FMA_NR, TILE_ACC = 2 * PAGODA_FMA_NR * 16 };

static void run_block(fma_job *j, const pagoda_cpu_mat *m, int64_t n0, int64_t n1, float *wp, float *accs)
{
    bool f16 = m->dtype == PAGODA_DTYPE_F16;
    const size_t tile_elems = (size_t)PAGODA_FMA_NR * PAGODA_FMA_KC;
    for (int64_t k0 = 0; k0 < j->K; k0 += PAGODA_FMA_KC) {
        int kc = j->K - k0 < PAGODA_FMA_KC ? (int)(j->K - k0) : PAGODA_FMA_KC;
        bool first = k0 == 0, last = k0 + kc >= j->K;
        for (int64_t r = n0; r < n1; r += PAGODA_FMA_NR) {
            int nr = n1 - r < PAGODA_FMA_NR ? (int)(n1 - r) : PAGODA_FMA_NR;
            j->kn->pack_w((const uint8_t *)m->w + (size_t)r * m->w_stride, m->w_stride, f16, nr, k0, kc,
                          wp + (size_t)(r - n0) / PAGODA_FMA_NR * tile_elems);
        }
        /* a 12-row tile (12 KiB) stays in L1 while every 32-token pair's
         * K block streams past it from L2 */
        for (int64_t r = n0; r < n1; r += PAGODA_FMA_NR) {
            int nr = n1 - r < PAGODA_FMA_NR ? (int)(n1 - r) : PAGODA_FMA_NR;
            int64_t ti = (r - n0) / PAGODA_FMA_NR;
            for (int64_t g = 0; g < j->n_groups; g += 2) {
                int ng = g + 1 < j->n_groups ? 2 : 1;
                int64_t t0 = g * PAGODA_FMA_GROUP;
                int nt = j->T - t0 < 2 * PAGODA_FMA_GROUP ? (int)(j->T - t0) : 2 * PAGODA_FMA_GROUP;
                float *o = (float *)(void *)((uint8_t *)m->out + (size_t)t0 * m->out_stride);
                const float *xg = j->xp + (size_t)g * j->group_elems + (size_t)k0 * PAGODA_FMA_GROUP;
                float *acc = accs ? accs + ((size_t)ti * (size_t)j->n_pairs + (size_t)(g / 2)) * TILE_ACC : NULL;
                j->kn->tile(wp + (size_t)ti * tile_elems, nr, xg, j->group_elems, ng, nt, kc, acc, first, last,
                            m->bias ? m->bias + r : NULL, o + r, m->out_stride);
            }
        }
    }
}

static void mm_task(void *arg, int ith, int nth)
{
    fma_job *j = arg;
    (void)nth;
    uint8_t *mine = j->wbuf + (size_t)ith * j->wbuf_per_thread;
    float *wp = (float *)(void *)mine;
    size_t wp_bytes = sizeof(float) * (size_t)BLOCK_ROWS * PAGODA_FMA_KC;
    float *accs = j->K > PAGODA_FMA_KC ? (float *)(void *)(mine + wp_bytes) : NULL;
    int i = 0;
    int64_t n0 = 0, n1 = 0;
    while (pagoda_row_blocks_claim(&j->blocks, j->w, &i, &n0, &n1)) run_block(j, &j->w[i], n0, n1, wp, accs);
}

int pagoda_cpu_fma_matmul(pagoda_cpu_exec *ex, const pagoda_fma_kernels *kn, const float *x, size_t x_stride,
                          int64_t T, int64_t K, const pagoda_cpu_mat *w, int n)
{
    if (n < 1 || n > PAGODA_CPU_MATMUL_MAX || K <= 0) return PAGODA_ERR_INVALID;
    for (int i = 0; i < n; i++)
        if (w[i].dtype != PAGODA_DTYPE_F16 && w[i].dtype != PAGODA_DTYPE_BF16) return PAGODA_ERR_INVALID;
    if (T <= 0) return PAGODA_OK;
    fma_job j = {.kn = kn, .x = x, .x_stride = x_stride, .T = T, .K = K, .w = w};
    j.group_elems = (size_t)PAGODA_FMA_GROUP * (size_t)K;
    j.n_groups = (T + PAGODA_FMA_GROUP - 1) / PAGODA_FMA_GROUP;
    j.n_pairs = (j.n_groups + 1) / 2;
    pagoda_row_blocks_init(&j.blocks, w, n, BLOCK_ROWS);
    int nth = pagoda_threadpool_size(ex->pool);
    size_t xp_bytes = (sizeof(float) * j.group_elems * (size_t)j.n_groups + 63) & ~(size_t)63;
    size_t per = sizeof(float) * (size_t)BLOCK_ROWS * PAGODA_FMA_KC;
    if (K > PAGODA_FMA_KC) per += sizeof(float) * (size_t)j.n_pairs * TILES * TILE_ACC;
    j.wbuf_per_thread = (per + 63) & ~(size_t)63;
    uint8_t *s = pagoda_cpu_scratch(ex, xp_bytes + (size_t)nth * j.wbuf_per_thread);
    if (!s) return PAGODA_ERR_NOMEM;
    j.xp = (float *)(void *)s;
    j.wbuf = s + xp_bytes;
    pagoda_threadpool_run_parts(ex->pool, pack_task, &j, (int)j.n_groups);
    pagoda_threadpool_run(ex->pool, mm_task, &j);
    return PAGODA_OK;
}
#endif
