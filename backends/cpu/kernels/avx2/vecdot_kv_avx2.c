/*
 * vecdot_kv_avx2.c: AVX2 + FMA + F16C kernels of the Q8_0 KV cache: the
 * store (quantize a K or V row to GGUF's Q8_0 blocks, the reference's
 * bytes exactly) and attention's two inner loops over Q8_0 rows (scores
 * against a float query, the p-weighted sum of values). A block's 32 int8
 * are widened to floats in registers and its f16 scale applied once per
 * block, so the products are exact in the stored values: nothing rounds
 * the query or the weights to 8 bits (measured against int8 x int8 dots
 * with a quantized query in docs/backend-cpu.md: the bytes read, not the
 * arithmetic, bound attention at long context).
 * Not for: F16 / F32 KV (vecdot_avx2.c) or the attention loop itself
 * (attention.c).
 */
#include "vecdot.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include "vecdot_avx2.h"

/* Eight int8 at p as floats. */
static inline __m256 i8x8_ps(const int8_t *p)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* roundf of eight floats: half away from zero. t = trunc(v) and v - t
 * are exact for |v| < 2^23, so |v - t| >= 0.5 decides, as roundf does
 * (floor(|v| + 0.5) would round 0.49999997 up). */
static inline __m256 round_away_ps(__m256 v)
{
    __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 frac = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(v, t));
    __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, _mm256_set1_ps(-0.0f)));
    return _mm256_add_ps(t, _mm256_and_ps(up, one));
}

static inline float hmax_abs_ps(__m256 a, __m256 b, __m256 c, __m256 d)
{
    __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, a), _mm256_andnot_ps(sign, b)),
                             _mm256_max_ps(_mm256_andnot_ps(sign, c), _mm256_andnot_ps(sign, d)));
    __m128 lo = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    lo = _mm_max_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_max_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

void pagoda_cpu_quant_kv_q8_0_avx2(const float *x, void *yv, int64_t k)
{
    pagoda_blk_q8_0 *y = yv;
    for (int64_t b = 0; b < k / 32; b++) {
        const float *xb = x + b * 32;
        __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
        __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
        float d = hmax_abs_ps(v0, v1, v2, v3) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        __m256 vid = _mm256_set1_ps(id);
        __m256i i0 = _mm256_cvttps_epi32(round_away_ps(_mm256_mul_ps(v0, vid)));
        __m256i i1 = _mm256_cvttps_epi32(round_away_ps(_mm256_mul_ps(v1, vid)));
        __m256i i2 = _mm256_cvttps_epi32(round_away_ps(_mm256_mul_ps(v2, vid)));
        __m256i i3 = _mm256_cvttps_epi32(round_away_ps(_mm256_mul_ps(v3, vid)));
        __m256i q = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        q = _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        y[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_si256((__m256i *)y[b].qs, q);
    }
}

/* One block of one key against the query's 32 values at q: the int8
 * widened, four FMAs, the scale once. */
static inline __m256 block_dot(const pagoda_blk_q8_0 *kb, const float *q, __m256 acc)
{
    __m256 s = _mm256_mul_ps(i8x8_ps(kb->qs), _mm256_loadu_ps(q));
    s = _mm256_fmadd_ps(i8x8_ps(kb->qs + 8), _mm256_loadu_ps(q + 8), s);
    s = _mm256_fmadd_ps(i8x8_ps(kb->qs + 16), _mm256_loadu_ps(q + 16), s);
    s = _mm256_fmadd_ps(i8x8_ps(kb->qs + 24), _mm256_loadu_ps(q + 24), s);
    return _mm256_fmadd_ps(_mm256_set1_ps(f16(kb->d)), s, acc);
}

/* Four keys at a time (four independent chains, q's loads shared through
 * L1), as scores_f16. */
void pagoda_cpu_scores_q8_0_avx2(const void *k, size_t stride, int n, const float *q, int hd,
                                 float scale, float *sc)
{
    int nb = hd / 32, j = 0;
    for (; j + 4 <= n; j += 4) {
        const pagoda_blk_q8_0 *k0 = (const pagoda_blk_q8_0 *)((const uint8_t *)k + (size_t)j * stride);
        const pagoda_blk_q8_0 *k1 = (const pagoda_blk_q8_0 *)((const uint8_t *)k0 + stride);
        const pagoda_blk_q8_0 *k2 = (const pagoda_blk_q8_0 *)((const uint8_t *)k1 + stride);
        const pagoda_blk_q8_0 *k3 = (const pagoda_blk_q8_0 *)((const uint8_t *)k2 + stride);
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int b = 0; b < nb; b++) {
            const float *qb = q + 32 * b;
            a0 = block_dot(k0 + b, qb, a0);
            a1 = block_dot(k1 + b, qb, a1);
            a2 = block_dot(k2 + b, qb, a2);
            a3 = block_dot(k3 + b, qb, a3);
        }
        sc[j] = scale * hsum_ps(a0);
        sc[j + 1] = scale * hsum_ps(a1);
        sc[j + 2] = scale * hsum_ps(a2);
        sc[j + 3] = scale * hsum_ps(a3);
    }
    for (; j < n; j++) {
        const pagoda_blk_q8_0 *kj = (const pagoda_blk_q8_0 *)((const uint8_t *)k + (size_t)j * stride);
        __m256 a = _mm256_setzero_ps();
        for (int b = 0; b < nb; b++) a = block_dot(kj + b, q + 32 * b, a);
        sc[j] = scale * hsum_ps(a);
    }
}

/* A block's 32 columns of acc stay in four registers over all n values;
 * each value's weight is p[j] times its block's scale. */
void pagoda_cpu_accum_q8_0_avx2(float *acc, float alpha, const float *p, const void *v, size_t stride,
                                int n, int hd)
{
    __m256 va = _mm256_set1_ps(alpha);
    for (int b = 0; b < hd / 32; b++) {
        float *ab = acc + 32 * b;
        __m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(ab), va);
        __m256 a1 = _mm256_mul_ps(_mm256_loadu_ps(ab + 8), va);
        __m256 a2 = _mm256_mul_ps(_mm256_loadu_ps(ab + 16), va);
        __m256 a3 = _mm256_mul_ps(_mm256_loadu_ps(ab + 24), va);
        for (int j = 0; j < n; j++) {
            const pagoda_blk_q8_0 *vb =
                (const pagoda_blk_q8_0 *)((const uint8_t *)v + (size_t)j * stride) + b;
            __m256 w = _mm256_set1_ps(p[j] * f16(vb->d));
            a0 = _mm256_fmadd_ps(w, i8x8_ps(vb->qs), a0);
            a1 = _mm256_fmadd_ps(w, i8x8_ps(vb->qs + 8), a1);
            a2 = _mm256_fmadd_ps(w, i8x8_ps(vb->qs + 16), a2);
            a3 = _mm256_fmadd_ps(w, i8x8_ps(vb->qs + 24), a3);
        }
        _mm256_storeu_ps(ab, a0);
        _mm256_storeu_ps(ab + 8, a1);
        _mm256_storeu_ps(ab + 16, a2);
        _mm256_storeu_ps(ab + 24, a3);
    }
}

#endif
