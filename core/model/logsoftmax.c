/*
 * logsoftmax.c: a row's maximum and its sum of exponentials (see
 * logsoftmax.h): the scalar reference, and an AVX2+FMA variant compiled
 * with a function target attribute (the rest of the model library stays
 * baseline x86-64) and chosen once from CPUID. The exp is the classic
 * Cephes single-precision scheme: x = n ln2 + r with |r| <= ln2 / 2, a
 * degree-5 polynomial for exp(r) - 1 - r, and 2^n put into the exponent.
 * Not for: anything but these two loops.
 */
#include "logsoftmax.h"

#include <float.h>
#include <math.h>

static inline float clean(float l) { return isnan(l) ? -INFINITY : l == INFINITY ? FLT_MAX : l; }

float pagoda_logits_max_scalar(const float *logits, int32_t n)
{
    float m = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        float l = clean(logits[i]);
        if (l > m) m = l;
    }
    return m;
}

double pagoda_logits_sumexp_scalar(const float *logits, int32_t n, float m)
{
    double z = 0.0;
    for (int32_t i = 0; i < n; i++) z += (double)expf(clean(logits[i]) - m);
    return z;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma")))

AVX2 static float max_avx2(const float *logits, int32_t n)
{
    const __m256 big = _mm256_set1_ps(FLT_MAX);
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
    int32_t i = 0;
    /* min(big, x) keeps a NaN x (the second operand wins on NaN), then
     * max(x, m) drops it (again the second operand): NaN never counts, and
     * +inf becomes FLT_MAX, as in clean() */
    for (; i + 16 <= n; i += 16) {
        m0 = _mm256_max_ps(_mm256_min_ps(big, _mm256_loadu_ps(logits + i)), m0);
        m1 = _mm256_max_ps(_mm256_min_ps(big, _mm256_loadu_ps(logits + i + 8)), m1);
    }
    for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(_mm256_min_ps(big, _mm256_loadu_ps(logits + i)), m0);
    m0 = _mm256_max_ps(m0, m1);
    float lanes[8];
    _mm256_storeu_ps(lanes, m0);
    float m = -INFINITY;
    for (int k = 0; k < 8; k++) if (lanes[k] > m) m = lanes[k];
    for (; i < n; i++) {
        float l = clean(logits[i]);
        if (l > m) m = l;
    }
    return m;
}

/* exp(x) for x <= 0 (x - m); NaN and anything below -87.3 give exp(-87.3). */
AVX2 static inline __m256 exp_avx2(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.3f);
    x = _mm256_max_ps(x, lo); /* a NaN x: lo (the second operand) */
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
    const __m256 c1 = _mm256_set1_ps(0.693359375f), c2 = _mm256_set1_ps(-2.12194440e-4f);
    __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fx, c1, x);
    r = _mm256_fnmadd_ps(fx, c2, r);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

AVX2 static double sumexp_avx2(const float *logits, int32_t n, float m)
{
    const __m256 big = _mm256_set1_ps(FLT_MAX), vm = _mm256_set1_ps(m);
    __m256d a0 = _mm256_setzero_pd(), a1 = a0;
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_sub_ps(_mm256_min_ps(big, _mm256_loadu_ps(logits + i)), vm);
        __m256 ex = exp_avx2(x);
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(ex)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(ex, 1)));
    }
    double lanes[4];
    _mm256_storeu_pd(lanes, _mm256_add_pd(a0, a1));
    double z = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    for (; i < n; i++) z += (double)expf(clean(logits[i]) - m);
    return z;
}

static int g_mode = -1; /* -1: not chosen yet; 0 scalar; 1 AVX2 */

static bool have_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static int mode(void)
{
    int md = __atomic_load_n(&g_mode, __ATOMIC_RELAXED);
    if (md < 0) {
        md = have_avx2() ? 1 : 0;
        __atomic_store_n(&g_mode, md, __ATOMIC_RELAXED);
    }
    return md;
}

bool pagoda_logsoftmax_force_scalar(bool on)
{
    int md = on ? 0 : have_avx2() ? 1 : 0;
    __atomic_store_n(&g_mode, md, __ATOMIC_RELAXED);
    return md == 1;
}

float pagoda_logits_max(const float *logits, int32_t n)
{
    return mode() ? max_avx2(logits, n) : pagoda_logits_max_scalar(logits, n);
}

double pagoda_logits_sumexp(const float *logits, int32_t n, float m)
{
    return mode() ? sumexp_avx2(logits, n, m) : pagoda_logits_sumexp_scalar(logits, n, m);
}

#else /* no AVX2 variant on this target */

bool pagoda_logsoftmax_force_scalar(bool on)
{
    (void)on;
    return false;
}

float pagoda_logits_max(const float *logits, int32_t n) { return pagoda_logits_max_scalar(logits, n); }

double pagoda_logits_sumexp(const float *logits, int32_t n, float m)
{
    return pagoda_logits_sumexp_scalar(logits, n, m);
}

#endif
