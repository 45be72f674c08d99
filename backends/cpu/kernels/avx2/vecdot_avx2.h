/*
 * vecdot_avx2.h: what the AVX2 kernel files share: small inline helpers
 * (horizontal sum, F16 loads, a block's nibbles / 5-bit / IQ4_NL values as
 * 32 bytes) and the kernels of other files (vecdot_x8_avx2.c,
 * vecdot_q5_avx2.c, the gated activations in vecdot_act_avx2.c) that the
 * AVX2 table in vecdot_avx2.c points at.
 * Include only from files compiled with AVX2 + FMA + F16C (*_avx2.c).
 * Not for: callers of the kernels (they use the table, vecdot.h).
 */
#ifndef PAGODA_CPU_VECDOT_AVX2_H
#define PAGODA_CPU_VECDOT_AVX2_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "quant.h"
#include "vecdot.h"

#define FORCE_INLINE static inline __attribute__((always_inline))

static inline float hsum_ps(__m256 v)
{
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

static inline float f16(uint16_t h) { return _cvtsh_ss(h); }

static inline __m256 load_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* 32 nibbles of a Q4 block as bytes 0..15 in element order. */
static inline __m256i unpack_nibbles(const uint8_t *qs)
{
    __m128i t = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* 32 int8 values times d into out[0..31]. */
static inline void store_scaled_i8(float *out, __m256i q, __m256 d)
{
    __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    _mm256_storeu_ps(out, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
    _mm256_storeu_ps(out + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
    _mm256_storeu_ps(out + 16, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
    _mm256_storeu_ps(out + 24, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
}

/* A Q5_0 / Q5_1 block's 5-bit values (0..31) as bytes in element order:
 * the nibbles as Q4's, and bit j of the 32-bit qh as 0x10 in byte j (each
 * byte picks the qh byte holding its bit, tests its bit, keeps 0x10). */
static inline __m256i q5_values(const uint8_t *qs, const uint8_t *qh)
{
    int32_t h;
    memcpy(&h, qh, 4);
    const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(h), pick), bit);
    __m256i hb = _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(unpack_nibbles(qs), hb);
}

/* An IQ4_NL block's values (int8, element order): the nibbles looked up
 * in the non-linear table (tab: pagoda_iq4nl_table in both 128-bit lanes;
 * pshufb looks up within each lane). */
static inline __m256i iq4nl_values(const uint8_t *qs, __m256i tab)
{
    return _mm256_shuffle_epi8(tab, unpack_nibbles(qs));
}

static inline __m256i iq4nl_table256(void)
{
    __m128i t = _mm_loadu_si128((const __m128i *)pagoda_iq4nl_table);
    return _mm256_set_m128i(t, t);
}

/* The tokens-in-lanes kernels' shared pieces: four bytes broadcast to
 * every 32-bit lane; lane t of acc to out[t][0] for the nt real tokens;
 * four maddubs of broadcast weight bytes v0..v3 with four consecutive
 * groups of an x8 block's qs (pagoda_q8x8_block), added in int16 (the
 * caller's values keep the sums below 2^15). */
static inline __m256i bcast4(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

static inline void store_x8(__m256 acc, int nt, float *out, size_t os)
{
    float tmp[8];
    _mm256_storeu_ps(tmp, acc);
    for (int t = 0; t < nt; t++) *(float *)((uint8_t *)out + t * os) = tmp[t];
}

static inline __m256i maddubs4_x8(__m256i v0, __m256i v1, __m256i v2, __m256i v3, const int8_t (*qs)[32])
{
    return _mm256_add_epi16(
        _mm256_add_epi16(_mm256_maddubs_epi16(v0, _mm256_load_si256((const __m256i *)qs[0])),
                         _mm256_maddubs_epi16(v1, _mm256_load_si256((const __m256i *)qs[1]))),
        _mm256_add_epi16(_mm256_maddubs_epi16(v2, _mm256_load_si256((const __m256i *)qs[2])),
                         _mm256_maddubs_epi16(v3, _mm256_load_si256((const __m256i *)qs[3]))));
}

/* The tokens-in-lanes kernels, signatures as vecdot.h's gemm_*_x8. */
void pagoda_cpu_gemm_q8_0_x8_avx2(const void *w, size_t ws, int64_t nr, const pagoda_q8x8_block *x,
                                  int64_t T, int64_t nb, float *out, size_t os);
void pagoda_cpu_gemm_q4_0_x8_avx2(const void *w, size_t ws, int64_t nr, const pagoda_q8x8_block *x,
                                  int64_t T, int64_t nb, float *out, size_t os);
void pagoda_cpu_gemm_f16_x8_avx2(const void *w, size_t ws, int64_t nr, const float *x, int64_t T,
                                 int64_t k, float *out, size_t os);
void pagoda_cpu_gemm_q5_0_x8_avx2(const void *w, size_t ws, int64_t nr, const pagoda_q8x8_block *x,
                                  int64_t T, int64_t nb, float *out, size_t os);
void pagoda_cpu_gemm_q5_1_x8_avx2(const void *w, size_t ws, int64_t nr, const pagoda_q8x8_block *x,
                                  int64_t T, int64_t nb, float *out, size_t os);
void pagoda_cpu_gemm_q4_1_x8_avx2(const void *w, size_t ws, int64_t nr, const pagoda_q8x8_block *x,
                                  int64_t T, int64_t nb, float *out, size_t os);
void pagoda_cpu_gemm_iq4_nl_x8_avx2(const void *w, size_t ws, int64_t nr, const pagoda_q8x8_block *x,
                                    int64_t T, int64_t nb, float *out, size_t os);

/* Q5_0 / Q5_1 / IQ4_NL per-row dots and dequantization (vecdot_q5_avx2.c),
 * signatures as vecdot.h's dot_* and dequant (these three types only). */
float pagoda_cpu_dot_q5_0_avx2(const void *w, const pagoda_q8a_block *x, int64_t nb);
float pagoda_cpu_dot_q5_1_avx2(const void *w, const pagoda_q8a_block *x, int64_t nb);
float pagoda_cpu_dot_iq4_nl_avx2(const void *w, const pagoda_q8a_block *x, int64_t nb);
void pagoda_cpu_dequant_q5_avx2(int dtype, const void *w, float *out, int64_t k);
/* Their row x token blocks on prep_q4_0's groups (vecdot.h gemm_q5_0 / q5_1 / iq4_nl). */
void pagoda_cpu_gemm_q5_0_avx2(const void *w, size_t ws, int64_t nr, const void *x, size_t xs,
                               int64_t T, int64_t nb, float *out, size_t os);
void pagoda_cpu_gemm_q5_1_avx2(const void *w, size_t ws, int64_t nr, const void *x, size_t xs,
                               int64_t T, int64_t nb, float *out, size_t os);
void pagoda_cpu_gemm_q4_1_avx2(const void *w, size_t ws, int64_t nr, const void *x, size_t xs,
                               int64_t T, int64_t nb, float *out, size_t os);
void pagoda_cpu_gemm_iq4_nl_avx2(const void *w, size_t ws, int64_t nr, const void *x, size_t xs,
                                 int64_t T, int64_t nb, float *out, size_t os);

/* The gated activations (vecdot_act_avx2.c), signatures as vecdot.h's
 * swiglu / geglu. */
void pagoda_cpu_swiglu_avx2(const float *g, const float *u, float *out, int64_t n);
void pagoda_cpu_attn_f16_tile_avx2(pagoda_attn_tile *t, const void *k, const void *v, size_t stride, int n, int32_t j0);
void pagoda_cpu_geglu_avx2(const float *g, const float *u, float *out, int64_t n);
void pagoda_cpu_swiglu_oai_avx2(const float *g, const float *u, float alpha, float limit, float *out,
                               int64_t n);

/* The Q8_0 KV cache (vecdot_kv_avx2.c), signatures as vecdot.h's
 * quant_kv_q8_0 / scores_q8_0 / accum_q8_0. */
void pagoda_cpu_quant_kv_q8_0_avx2(const float *x, void *y, int64_t k);
void pagoda_cpu_scores_q8_0_avx2(const void *k, size_t stride, int n, const float *q, int hd,
                                 float scale, float *sc);
void pagoda_cpu_accum_q8_0_avx2(float *acc, float alpha, const float *p, const void *v, size_t stride,
                                int n, int hd);

#endif
