/*
 * vecdot_act_avx2.c: the gated activations of the AVX2 table (vecdot.h
 * swiglu, geglu, swiglu_oai): out = act(g) * u, eight values at a time, with exp by a
 * polynomial instead of a libm call per value (the FFN's T x ffn values,
 * on the engine thread while the pool waits). Compiled with AVX2 + FMA +
 * F16C by file name; called only after CPUID says so.
 * Not for: the scalar references (vecdot.c), matmul kernels
 * (vecdot_avx2.c, vecdot_x8_avx2.c).
 */
#include "vecdot.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <math.h>

#include "exp_poly.h"
#include "vecdot_avx2.h"

/* exp(x) for 8 floats: exp_poly.h's steps, n by round_ps. */
static inline __m256 exp_ps(__m256 x)
{
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(PAGODA_EXP_LO)), _mm256_set1_ps(PAGODA_EXP_HI));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(PAGODA_EXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    PAGODA_EXP_POLY(256, p, x, n);
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(PAGODA_EXP_BIAS)),
                                  23);
    return _mm256_mul_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), _mm256_set1_ps(2.0f));
}

void pagoda_cpu_swiglu_avx2(const float *g, const float *u, float *out, int64_t n)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i);
        __m256 den = _mm256_add_ps(one, exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), gv)));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(gv, den), _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* gpt-oss's clamped SwiGLU (vecdot.h swiglu_oai): the scalar formula
 * with exp_ps. The clamps are min / max with the input as the second
 * operand where a NaN must pass (minps / maxps return their second operand
 * on a NaN): min(g, limit) turns a NaN gate into limit, as the scalar
 * g < limit ? g : limit does; max(-limit, u) then min(limit, .) keep a NaN
 * up. Where -alpha x passes expf's overflow (88.72: a large negative
 * gate), expf's inf makes the scalar value -0 while exp_ps's clamp would
 * leave x / 2^128, far from 0 for a huge gate: those lanes are set to 0. */
void pagoda_cpu_swiglu_oai_avx2(const float *g, const float *u, float alpha, float limit, float *out,
                                int64_t n)
{
    const __m256 one = _mm256_set1_ps(1.0f), lim = _mm256_set1_ps(limit), nlim = _mm256_set1_ps(-limit);
    const __m256 nalpha = _mm256_set1_ps(-alpha), big = _mm256_set1_ps(PAGODA_EXP_HI);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_min_ps(_mm256_loadu_ps(g + i), lim);
        __m256 y = _mm256_min_ps(lim, _mm256_max_ps(nlim, _mm256_loadu_ps(u + i)));
        __m256 a = _mm256_mul_ps(nalpha, x);
        __m256 q = _mm256_div_ps(x, _mm256_add_ps(one, exp_ps(a)));
        q = _mm256_andnot_ps(_mm256_cmp_ps(a, big, _CMP_GT_OQ), q);
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_add_ps(y, one), q));
    }
    for (; i < n; i++) out[i] = pagoda_swiglu_oai1(g[i], u[i], alpha, limit);
}

/* GELU-tanh as a sigmoid: 0.5 (1 + tanh(y)) = 1 / (1 + exp(-2y)), so
 * gelu_tanh(g) = g / (1 + exp(-2y)) with y = sqrt(2/pi) (g + 0.044715 g^3):
 * SwiGLU's shape with a cubic argument, and no 1 + tanh cancellation for
 * negative g. The same formula as the scalar geglu, with exp_ps. */
void pagoda_cpu_geglu_avx2(const float *g, const float *u, float *out, int64_t n)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 k1 = _mm256_set1_ps(-2.0f * PAGODA_GELU_K);
    const __m256 k3 = _mm256_set1_ps(-2.0f * PAGODA_GELU_K * PAGODA_GELU_C);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i);
        /* -2y = g (-2k + -2kc g^2) */
        __m256 m2y = _mm256_mul_ps(gv, _mm256_fmadd_ps(_mm256_mul_ps(gv, gv), k3, k1));
        __m256 den = _mm256_add_ps(one, exp_ps(m2y));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(gv, den), _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) out[i] = pagoda_gelu_tanh(g[i]) * u[i];
}
#endif
