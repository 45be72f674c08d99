/*
 * vecdot_avx2.h: what the AVX2 kernel files share: small inline helpers
 * (horizontal sum, F16 loads), the tokens-in-lanes kernels
 * (vecdot_x8_avx2.c) and the gated activations (vecdot_act_avx2.c) that
 * the AVX2 table in vecdot_avx2.c points at.
 * Include only from files compiled with AVX2 + FMA + F16C (*_avx2.c).
 * Not for: callers of the kernels (they use the table, vecdot.h).
 */
#ifndef PAGODA_CPU_VECDOT_AVX2_H
#define PAGODA_CPU_VECDOT_AVX2_H

#include <immintrin.h>
#include <stdint.h>

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

/* The tokens-in-lanes kernels, signatures as vecdot.h's gemm_*_x8. */
void pagoda_cpu_gemm_q8_0_x8_avx2(const void *w, size_t ws, int64_t nr, const pagoda_q8x8_block *x,
                                  int64_t T, int64_t nb, float *out, size_t os);
void pagoda_cpu_gemm_q4_0_x8_avx2(const void *w, size_t ws, int64_t nr, const pagoda_q8x8_block *x,
                                  int64_t T, int64_t nb, float *out, size_t os);
void pagoda_cpu_gemm_f16_x8_avx2(const void *w, size_t ws, int64_t nr, const float *x, int64_t T,
                                 int64_t k, float *out, size_t os);

/* The gated activations (vecdot_act_avx2.c), signatures as vecdot.h's
 * swiglu / geglu. */
void pagoda_cpu_swiglu_avx2(const float *g, const float *u, float *out, int64_t n);
void pagoda_cpu_geglu_avx2(const float *g, const float *u, float *out, int64_t n);

#endif
