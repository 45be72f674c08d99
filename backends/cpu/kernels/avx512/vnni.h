/*
 * vnni.h: what the VNNI kernel files share: the intrinsics (native, or
 * SIMDe's AVX-512 / VNNI on AVX2 for the test-only second compile,
 * PAGODA_SIMDE), the names (PAGODA_VNNI_FN appends _simde there, so both
 * copies link into one test), and a vector width layer: PAGODA_VNNI_W =
 * 512 (kernels/avx512: zmm, vpdpbusd EVEX, 16 tokens a register) or 256
 * (kernels/avxvnni: ymm, VEX vpdpbusd, 8 tokens a register), so one
 * source (lanes_vnni.h) serves both levels.
 * Include only from kernels/avx512 and kernels/avxvnni files.
 * Not for: callers (they use the table, vecdot.h).
 */
#ifndef PAGODA_CPU_VNNI_H
#define PAGODA_CPU_VNNI_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#ifdef PAGODA_SIMDE
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
/* SIMDe has the EVEX (AVX512VL) forms only; same arithmetic. */
#define _mm256_dpbusd_avx_epi32 _mm256_dpbusd_epi32
#define _mm256_dpwssd_avx_epi32 _mm256_dpwssd_epi32
#define PAGODA_VNNI_FN(name) name##_simde
#else
#define PAGODA_VNNI_FN(name) name
#endif

#include "vecdot_avx2.h"

#ifndef PAGODA_VNNI_W
#error "define PAGODA_VNNI_W (512 or 256) before vnni.h"
#endif

#define PRAGMA_(x) _Pragma(#x)
#define UNROLL(n) PRAGMA_(GCC unroll n)

static inline int32_t load32(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

#if PAGODA_VNNI_W == 512
typedef __m512i vi_t;
typedef __m512 vf_t;
/* tokens per register, and pagoda_q8x8_block groups per register */
#define V_TOK 16
#define V_GRP 2
#define vi_zero() _mm512_setzero_si512()
#define vf_zero() _mm512_setzero_ps()
#define vi_set1(v) _mm512_set1_epi32(v)
#define vf_set1(v) _mm512_set1_ps(v)
#define vi_add(a, b) _mm512_add_epi32(a, b)
#define vi_sub(a, b) _mm512_sub_epi32(a, b)
#define vi_mullo(a, b) _mm512_mullo_epi32(a, b)
#define vi_slli(a, n) _mm512_slli_epi32(a, n)
#ifdef PAGODA_SIMDE
/* SIMDe 0.7.4 has no _mm512_cvtepi32_ps: two AVX2 halves. */
static inline vf_t vf_cvt(vi_t a)
{
    __m256 lo = _mm256_cvtepi32_ps(_mm512_castsi512_si256(a));
    __m256 hi = _mm256_cvtepi32_ps(_mm512_extracti64x4_epi64(a, 1));
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}
#else
#define vf_cvt(a) _mm512_cvtepi32_ps(a)
#endif
#define vf_mul(a, b) _mm512_mul_ps(a, b)
#define vf_fma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define v_dpbusd(acc, u, s) _mm512_dpbusd_epi32(acc, u, s)
#define v_dpwssd(acc, a, b) _mm512_dpwssd_epi32(acc, a, b)
/* Two token groups' 32 bytes (a: tokens 0-7, b: 8-15), 32-byte aligned. */
static inline vi_t vi_load2(const void *a, const void *b)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_load_si256((const __m256i *)a)),
                              _mm256_load_si256((const __m256i *)b), 1);
}
static inline vf_t vf_load2(const float *a, const float *b)
{
    return _mm512_castsi512_ps(vi_load2(a, b));
}
static inline void vf_store(float *p, vf_t v) { _mm512_storeu_ps(p, v); }
#elif PAGODA_VNNI_W == 256
typedef __m256i vi_t;
typedef __m256 vf_t;
#define V_TOK 8
#define V_GRP 1
#define vi_zero() _mm256_setzero_si256()
#define vf_zero() _mm256_setzero_ps()
#define vi_set1(v) _mm256_set1_epi32(v)
#define vf_set1(v) _mm256_set1_ps(v)
#define vi_add(a, b) _mm256_add_epi32(a, b)
#define vi_sub(a, b) _mm256_sub_epi32(a, b)
#define vi_mullo(a, b) _mm256_mullo_epi32(a, b)
#define vi_slli(a, n) _mm256_slli_epi32(a, n)
#define vf_cvt(a) _mm256_cvtepi32_ps(a)
#define vf_mul(a, b) _mm256_mul_ps(a, b)
#define vf_fma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define v_dpbusd(acc, u, s) _mm256_dpbusd_avx_epi32(acc, u, s)
#define v_dpwssd(acc, a, b) _mm256_dpwssd_avx_epi32(acc, a, b)
static inline vi_t vi_load2(const void *a, const void *b)
{
    (void)b;
    return _mm256_load_si256((const __m256i *)a);
}
static inline vf_t vf_load2(const float *a, const float *b)
{
    (void)b;
    return _mm256_load_ps(a);
}
static inline void vf_store(float *p, vf_t v) { _mm256_storeu_ps(p, v); }
#else
#error "PAGODA_VNNI_W must be 512 or 256"
#endif

#if PAGODA_VNNI_W == 512
/* kernels/avx512's per-row decode dots (decode_avx512.c) into t. */
void PAGODA_VNNI_FN(pagoda_cpu_fill_avx512_decode)(pagoda_vecdot_table *t);
#endif

/* Lane t of v to out[t][0] for the nt real tokens. */
static inline void vf_store_tokens(vf_t v, int nt, float *out, size_t os)
{
    float tmp[V_TOK];
    vf_store(tmp, v);
    for (int t = 0; t < nt; t++) *(float *)((uint8_t *)out + (size_t)t * os) = tmp[t];
}

#endif
