/*
 * vecdot_act_avx2.c: the gated activations of the AVX2 table (vecdot.h
 * swiglu, geglu): out = act(g) * u, eight values at a time, with exp by a
 * polynomial instead of a libm call per value (the FFN's T x ffn values,
 * on the engine thread while the pool waits). Compiled with AVX2 + FMA +
 * F16C by file name; called only after CPUID says so.
 * Not for: the scalar references (vecdot.c), matmul kernels
 * (vecdot_avx2.c, vecdot_x8_avx2.c).
 */
#include "vecdot.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <math.h>

#include "vecdot_avx2.h"

/* exp(x) for 8 floats: x = n ln2 + r (|r| <= ln2 / 2, ln2 split in two
 * for the reduction), exp(r) by the degree-6 minimax polynomial of Cephes'
 * expf, times 2^n built in the exponent bits; x clamped to [-87.3, 88.7]
 * (the float range). */
static inline __m256 exp_ps(__m256 x)
{
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.33654f)), _mm256_set1_ps(88.72283f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^n: n in [-126, 128]; n = 128 only at the clamp, where p < 1 keeps
     * the product finite, so build 2^(n-1) and double. */
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(126)), 23);
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
