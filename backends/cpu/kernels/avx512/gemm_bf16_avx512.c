/*
 * gemm_bf16_avx512.c: the kernels of the BF16 GEMM (gemm_bf16.h), written
 * once against SIMDe's names: compiled with -mavx512bf16 they are the
 * native instructions (vdpbf16ps, SIMDe maps each name to its intrinsic);
 * included by gemm_bf16_simde_avx2.c they are SIMDe's emulation on AVX2.
 * Layout: tokens in lanes. One packed group holds 16 tokens' activations
 * as BF16 pairs (k, k+1) in the 16 32-bit lanes of 64 bytes per pair, so
 * one vdpbf16ps of a group with the broadcast pair (w[n][k], w[n][k+1]) of
 * one weight row adds two products to each of the 16 tokens' sums of row
 * n. The weights of 12 rows are packed per call into their pairs in
 * order (pair p of rows 0..11 side by side, F16 converted on the way),
 * so the 12 broadcasts of a step read 48 consecutive bytes through one
 * pointer; a tile of 12 rows x 32 tokens keeps 24 accumulators in
 * registers.
 * Not for: threads, scratch and the F16 tile conversion's buffers
 * (matmul_bf16.c).
 */
#ifndef PAGODA_BF16_SIMDE
#define PAGODA_BF16_SFX(name) name##_native
#define PAGODA_BF16_TABLE pagoda_bf16_native
#define PAGODA_BF16_NAME "AVX512-BF16"
#endif

#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>
#include <string.h>

#include "gemm_bf16.h"
#include "quant.h"
#include "tile_store.h"

/* 16 floats to BF16 bits in the low halves of 32-bit lanes: nearest even,
 * NaN quieted (pagoda_fp32_to_bf16's rule). */
static inline simde__m512i round_bf16(simde__m512 v)
{
    simde__m512i u = simde_mm512_castps_si512(v);
    simde__m512i lsb = simde_mm512_and_si512(simde_mm512_srli_epi32(u, 16), simde_mm512_set1_epi32(1));
    simde__m512i r = simde_mm512_srli_epi32(
        simde_mm512_add_epi32(u, simde_mm512_add_epi32(lsb, simde_mm512_set1_epi32(0x7fff))), 16);
    simde__m512i mag = simde_mm512_and_si512(u, simde_mm512_set1_epi32(0x7fffffff));
    simde__mmask16 nan = simde_mm512_cmpgt_epi32_mask(mag, simde_mm512_set1_epi32(0x7f800000));
    simde__m512i q = simde_mm512_or_si512(simde_mm512_srli_epi32(u, 16), simde_mm512_set1_epi32(0x40));
    return simde_mm512_mask_blend_epi32(nan, r, q);
}

static inline uint16_t round_bf16_1(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

static void PAGODA_BF16_SFX(pack_x)(const float *x, size_t x_stride, int nt, int64_t k, uint16_t *g)
{
    if (nt < PAGODA_BF16_GROUP) memset(g, 0, sizeof(uint16_t) * 16 * (size_t)k);
    uint32_t *g32 = (uint32_t *)(void *)g;
    for (int l = 0; l < nt; l++) {
        const float *xr = (const float *)(const void *)((const uint8_t *)x + (size_t)l * x_stride);
        int64_t i = 0;
        for (; i + 16 <= k; i += 16) {
            simde__m512i b = round_bf16(simde_mm512_loadu_ps(xr + i));
            /* lanes 2j, 2j+1 -> one 32-bit pair (low half first) */
            simde__m512i pair = simde_mm512_or_si512(
                simde_mm512_and_si512(b, simde_mm512_set1_epi64(0xffff)),
                simde_mm512_srli_epi64(b, 16));
            uint64_t tmp[8];
            simde_mm512_storeu_si512(tmp, pair);
            for (int j = 0; j < 8; j++) g32[(i / 2 + j) * 16 + l] = (uint32_t)tmp[j];
        }
        for (; i < k; i += 2)
            g32[(i / 2) * 16 + l] = (uint32_t)round_bf16_1(xr[i]) | (uint32_t)round_bf16_1(xr[i + 1]) << 16;
    }
}

/* 8 lanes at a time (F16C's conversion; the rounding as round_bf16). */
static void PAGODA_BF16_SFX(f16_to_bf16)(const uint16_t *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    const simde__m256i one = simde_mm256_set1_epi32(1), bias = simde_mm256_set1_epi32(0x7fff);
    const simde__m256i abs = simde_mm256_set1_epi32(0x7fffffff), inf = simde_mm256_set1_epi32(0x7f800000);
    const simde__m256i quiet = simde_mm256_set1_epi32(0x40);
    for (; i + 16 <= n; i += 16) {
        simde__m256i r[2];
        for (int h = 0; h < 2; h++) {
            simde__m256i u = simde_mm256_castps_si256(
                simde_mm256_cvtph_ps(simde_mm_loadu_si128((const void *)(src + i + 8 * h))));
            simde__m256i lsb = simde_mm256_and_si256(simde_mm256_srli_epi32(u, 16), one);
            simde__m256i rn = simde_mm256_srli_epi32(simde_mm256_add_epi32(u, simde_mm256_add_epi32(lsb, bias)), 16);
            simde__m256i nan = simde_mm256_cmpgt_epi32(simde_mm256_and_si256(u, abs), inf);
            simde__m256i q = simde_mm256_or_si256(simde_mm256_srli_epi32(u, 16), quiet);
            r[h] = simde_mm256_blendv_epi8(rn, q, nan);
        }
        /* packus works per 128-bit lane: restore the order after it */
        simde__m256i p = simde_mm256_permute4x64_epi64(simde_mm256_packus_epi32(r[0], r[1]), 0xd8);
        simde_mm256_storeu_si256((void *)(dst + i), p);
    }
    for (; i < n; i++) dst[i] = round_bf16_1(pagoda_fp16_to_fp32(src[i]));
}

static inline simde__m512bh as_bh(simde__m512i v)
{
    simde__m512bh r;
    memcpy(&r, &v, sizeof r);
    return r;
}

static void PAGODA_BF16_SFX(pack_w)(const void *w, size_t w_stride, bool f16, int nr, int64_t k,
                                    uint32_t *wp, uint16_t *row)
{
    for (int j = 0; j < PAGODA_BF16_NR; j++) {
        const uint16_t *src = (const uint16_t *)(const void *)((const uint8_t *)w + (size_t)(j < nr ? j : nr - 1) * w_stride);
        if (f16) {
            PAGODA_BF16_SFX(f16_to_bf16)(src, row, k);
            src = row;
        }
        const uint32_t *s32 = (const uint32_t *)(const void *)src;
        for (int64_t p = 0; p < k / 2; p++) wp[p * PAGODA_BF16_NR + j] = s32[p];
    }
}

/* The tile for NG groups (compile-time 1 or 2, so the 12 x NG sums stay
 * in registers). */
static inline void tile_ng(const uint32_t *wp, int nr, const uint16_t *xg, size_t group_elems,
                           const int NG, int nt, int64_t k, const float *bias, float *out,
                           size_t out_stride)
{
    simde__m512 acc[2][PAGODA_BF16_NR];
    for (int g = 0; g < NG; g++)
        for (int j = 0; j < PAGODA_BF16_NR; j++) acc[g][j] = simde_mm512_setzero_ps();
    const uint16_t *x1 = xg + group_elems;
    for (int64_t p = 0; p < k / 2; p++) {
        simde__m512bh xa = as_bh(simde_mm512_loadu_si512((const void *)(xg + p * 32)));
        simde__m512bh xb = xa;
        if (NG == 2) xb = as_bh(simde_mm512_loadu_si512((const void *)(x1 + p * 32)));
        const uint32_t *wr = wp + p * PAGODA_BF16_NR;
        for (int j = 0; j < PAGODA_BF16_NR; j++) {
            simde__m512bh wb = as_bh(simde_mm512_set1_epi32((int)wr[j]));
            acc[0][j] = simde_mm512_dpbf16_ps(acc[0][j], xa, wb);
            if (NG == 2) acc[1][j] = simde_mm512_dpbf16_ps(acc[1][j], xb, wb);
        }
    }
    pagoda_tile_store(&acc[0][0], PAGODA_BF16_NR, NG, nr, nt, bias, out, out_stride);
}

static void PAGODA_BF16_SFX(tile)(const uint32_t *wp, int nr, const uint16_t *xg, size_t group_elems,
                                  int ng, int nt, int64_t k, const float *bias, float *out,
                                  size_t out_stride)
{
    if (ng == 2)
        tile_ng(wp, nr, xg, group_elems, 2, nt, k, bias, out, out_stride);
    else
        tile_ng(wp, nr, xg, group_elems, 1, nt, k, bias, out, out_stride);
}

const pagoda_bf16_kernels PAGODA_BF16_TABLE = {
    .name = PAGODA_BF16_NAME,
    .pack_x = PAGODA_BF16_SFX(pack_x),
    .f16_to_bf16 = PAGODA_BF16_SFX(f16_to_bf16),
    .pack_w = PAGODA_BF16_SFX(pack_w),
    .tile = PAGODA_BF16_SFX(tile),
};
