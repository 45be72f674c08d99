/*
 * act_avx512.c: the AVX-512 gated activation of the table (vecdot.h
 * swiglu_oai, gpt-oss's clamped SwiGLU): sixteen values a zmm, exp by the
 * same Cephes polynomial as the AVX2 level's (exp_poly.h), the
 * tails by the scalar formula (pagoda_swiglu_oai1). AVX-512F only.
 * Compiled with the AVX-512 flags by file name (and a second time against
 * SIMDe on AVX2 alone, PAGODA_SIMDE, for the tests); called only after the
 * CPUID + XCR0 check. Not for: swiglu / geglu (the AVX2 entries run at
 * this level), the scalar reference (scalar/vecdot.c).
 */
#include "vecdot.h"

#if (defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)) || \
    (defined(PAGODA_SIMDE) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
#include <immintrin.h>
#include <math.h>

#include "exp_poly.h"

#ifdef PAGODA_SIMDE
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#define ACT_FN(name) name##_simde
#else
#define ACT_FN(name) name
#endif

/* exp(x) for 16 floats: exp_poly.h's steps, n by the 1.5 * 2^23 rounding
 * trick (x log2e + M rounds to an integer in the low mantissa bits), which
 * needs no float-int conversion (SIMDe 0.7.4 has none at 512 bits). */
static inline __m512 exp512(__m512 x)
{
    const __m512 magic = _mm512_set1_ps(PAGODA_EXP_ROUND_MAGIC);
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(PAGODA_EXP_LO)), _mm512_set1_ps(PAGODA_EXP_HI));
    __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(PAGODA_EXP_LOG2E), magic);
    __m512 n = _mm512_sub_ps(t, magic);
    PAGODA_EXP_POLY(512, p, x, n);
    /* t's bits are M's plus n */
    __m512i nb = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_castps_si512(magic));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(nb, _mm512_set1_epi32(PAGODA_EXP_BIAS)), 23);
    return _mm512_mul_ps(_mm512_mul_ps(p, _mm512_castsi512_ps(e)), _mm512_set1_ps(2.0f));
}

/* The AVX2 entry on sixteen lanes (vecdot_act_avx2.c: the input second
 * in the clamps where a NaN must pass; 0 where -alpha x passes expf's
 * overflow, as the scalar value's -0). */
static void swiglu_oai_avx512(const float *g, const float *u, float alpha, float limit, float *out,
                              int64_t n)
{
    const __m512 one = _mm512_set1_ps(1.0f), lim = _mm512_set1_ps(limit), nlim = _mm512_set1_ps(-limit);
    const __m512 nalpha = _mm512_set1_ps(-alpha), big = _mm512_set1_ps(PAGODA_EXP_HI);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_min_ps(_mm512_loadu_ps(g + i), lim);
        __m512 y = _mm512_min_ps(lim, _mm512_max_ps(nlim, _mm512_loadu_ps(u + i)));
        __m512 a = _mm512_mul_ps(nalpha, x);
        __m512 q = _mm512_div_ps(x, _mm512_add_ps(one, exp512(a)));
        q = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, big, _CMP_LE_OQ), q);
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_add_ps(y, one), q));
    }
    for (; i < n; i++) out[i] = pagoda_swiglu_oai1(g[i], u[i], alpha, limit);
}

void ACT_FN(pagoda_cpu_fill_avx512_act)(pagoda_vecdot_table *t)
{
    t->swiglu_oai = swiglu_oai_avx512;
}
#else
/* A compiler without the flags: the AVX2 entry runs at this level. */
void pagoda_cpu_fill_avx512_act(pagoda_vecdot_table *t) { (void)t; }
#endif
