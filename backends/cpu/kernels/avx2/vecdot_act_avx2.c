/*
 * vecdot_act_avx2.c: the gated activations of the AVX2 table (vecdot.h
 * swiglu, geglu, swiglu_oai): out = act(g) * u, eight values at a time, with exp by a
 * polynomial instead of a libm call per value (the FFN's T x ffn values,
 * on the engine thread while the pool waits), and the table's other exp
 * kernel, the F16 attention tile of prefill (attn_f16_tile, at the end).
 * Compiled with AVX2 + FMA +
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
/* ------------------------------------------------ the F16 attention tile
 * vecdot.h attn_f16_tile at eight lanes: the tile's 16 query rows as two
 * registers (rows 0-7, 8-15), so a chunk of keys and values is converted
 * from F16 once for all 16 rows (the row path converts every key again
 * for each row) and the softmax step runs eight rows an instruction; the
 * AVX-512 level's (kernels/avx512/act_avx512.c) at sixteen. */
#define ATT_INLINE static inline __attribute__((always_inline))

static void att_f16_rows(const uint16_t *src, size_t stride, int n, int hd, float *dst)
{
    for (int j = 0; j < n; j++) {
        const uint16_t *r = (const uint16_t *)((const uint8_t *)src + (size_t)j * stride);
        float *d = dst + (size_t)j * hd;
        for (int e = 0; e < hd; e += 8) _mm256_store_ps(d + e, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(r + e))));
    }
}

/* Q8_0 rows (hd / 32 blocks) to floats, q x d as the row path's dots. */
static void att_q8_rows(const void *src, size_t stride, int n, int hd, float *dst)
{
    for (int j = 0; j < n; j++) {
        const pagoda_blk_q8_0 *r = (const pagoda_blk_q8_0 *)(const void *)((const uint8_t *)src + (size_t)j * stride);
        float *d = dst + (size_t)j * hd;
        for (int b = 0; b < hd / 32; b++) {
            __m256 s = _mm256_set1_ps(f16(r[b].d));
            for (int e = 0; e < 32; e += 8) {
                __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(r[b].qs + e)));
                _mm256_store_ps(d + 32 * b + e, _mm256_mul_ps(_mm256_cvtepi32_ps(q), s));
            }
        }
    }
}

/* t's scratch t->kv = n rows of the cache (F16 or Q8_0, t->q8) as
 * floats; the AVX-512 tile's converter too. */
void pagoda_cpu_attn_kv_rows_avx2(const pagoda_attn_tile *t, const void *src, size_t stride, int n)
{
    if (t->q8) att_q8_rows(src, stride, n, t->hd, t->kv);
    else att_f16_rows(src, stride, n, t->hd, t->kv);
}

/* s[b] = the 16 rows' dots with key b (two registers a key), KB <= 4. */
ATT_INLINE void att_scores(const float *qt, const float *kf, int hd, int KB, float *s)
{
    __m256 a[4][2];
    for (int b = 0; b < KB; b++) a[b][0] = a[b][1] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d++) {
        __m256 q0 = _mm256_load_ps(qt + 16 * d), q1 = _mm256_load_ps(qt + 16 * d + 8);
        for (int b = 0; b < KB; b++) {
            __m256 k = _mm256_broadcast_ss(kf + (size_t)b * hd + d);
            a[b][0] = _mm256_fmadd_ps(q0, k, a[b][0]);
            a[b][1] = _mm256_fmadd_ps(q1, k, a[b][1]);
        }
    }
    for (int b = 0; b < KB; b++) {
        _mm256_store_ps(s + 16 * b, a[b][0]);
        _mm256_store_ps(s + 16 * b + 8, a[b][1]);
    }
}

/* acc rows i0 .. i0 + QB - 1, values d0 .. d0 + 8 DB - 1 (QB x DB <= 8
 * sums in registers over the n keys). */
ATT_INLINE void att_accum(float *acc, int hd, const float *al, const float *p, const float *vf, int n, int i0,
                          int QB, int d0, int DB)
{
    __m256 c[4][2];
    for (int i = 0; i < QB; i++)
        for (int b = 0; b < DB; b++)
            c[i][b] = _mm256_mul_ps(_mm256_load_ps(acc + (size_t)(i0 + i) * hd + d0 + 8 * b), _mm256_set1_ps(al[i0 + i]));
    for (int j = 0; j < n; j++) {
        __m256 v[2];
        for (int b = 0; b < DB; b++) v[b] = _mm256_load_ps(vf + (size_t)j * hd + d0 + 8 * b);
        for (int i = 0; i < QB; i++) {
            __m256 w = _mm256_broadcast_ss(p + 16 * j + i0 + i);
            for (int b = 0; b < DB; b++) c[i][b] = _mm256_fmadd_ps(w, v[b], c[i][b]);
        }
    }
    for (int i = 0; i < QB; i++)
        for (int b = 0; b < DB; b++) _mm256_store_ps(acc + (size_t)(i0 + i) * hd + d0 + 8 * b, c[i][b]);
}

void pagoda_cpu_attn_f16_tile_avx2(pagoda_attn_tile *t, const void *k, const void *v, size_t stride, int n, int32_t j0)
{
    const int hd = t->hd;
    float p[64 * 16] __attribute__((aligned(32)));
    float al[16] __attribute__((aligned(32)));
    pagoda_cpu_attn_kv_rows_avx2(t, k, stride, n);
    int j = 0;
    for (; j + 4 <= n; j += 4) att_scores(t->qt, t->kv + (size_t)j * hd, hd, 4, p + 16 * j);
    for (; j < n; j++) att_scores(t->qt, t->kv + (size_t)j * hd, hd, 1, p + 16 * j);
    const __m256 ninf = _mm256_set1_ps(-INFINITY), scale = _mm256_set1_ps(t->scale);
    __m256 base[2], alpha[2], l[2], nm[2];
    for (int h = 0; h < 2; h++) {
        const __m256i lo = _mm256_load_si256((const __m256i *)(t->lo + 8 * h));
        const __m256i hi = _mm256_load_si256((const __m256i *)(t->hi + 8 * h));
        __m256 cm = ninf;
        for (j = 0; j < n; j++) {
            /* unseen: j < lo or j > hi */
            __m256i jj = _mm256_set1_epi32(j0 + j);
            __m256 off = _mm256_castsi256_ps(_mm256_or_si256(_mm256_cmpgt_epi32(lo, jj), _mm256_cmpgt_epi32(jj, hi)));
            __m256 s = _mm256_blendv_ps(_mm256_mul_ps(_mm256_load_ps(p + 16 * j + 8 * h), scale), ninf, off);
            _mm256_store_ps(p + 16 * j + 8 * h, s);
            cm = _mm256_max_ps(cm, s);
        }
        /* as the AVX-512 tile: a row with no key yet takes 0 as its max;
         * unseen keys (score -inf) weigh 0 */
        __m256 m = _mm256_load_ps(t->m + 8 * h);
        nm[h] = _mm256_max_ps(m, cm);
        base[h] = _mm256_and_ps(nm[h], _mm256_cmp_ps(nm[h], ninf, _CMP_NEQ_OQ));
        alpha[h] = _mm256_and_ps(exp_ps(_mm256_sub_ps(m, base[h])), _mm256_cmp_ps(m, ninf, _CMP_NEQ_OQ));
        l[h] = _mm256_mul_ps(_mm256_load_ps(t->l + 8 * h), alpha[h]);
        for (j = 0; j < n; j++) {
            __m256 s = _mm256_load_ps(p + 16 * j + 8 * h);
            __m256 e = _mm256_and_ps(exp_ps(_mm256_sub_ps(s, base[h])), _mm256_cmp_ps(s, ninf, _CMP_NEQ_OQ));
            l[h] = _mm256_add_ps(l[h], e);
            _mm256_store_ps(p + 16 * j + 8 * h, e);
        }
        _mm256_store_ps(t->m + 8 * h, nm[h]);
        _mm256_store_ps(t->l + 8 * h, l[h]);
        _mm256_store_ps(al + 8 * h, alpha[h]);
    }
    pagoda_cpu_attn_kv_rows_avx2(t, v, stride, n);
    for (int i0 = 0; i0 < t->nq; i0 += 4) {
        int qb = t->nq - i0 < 4 ? t->nq - i0 : 4;
        int d0 = 0;
        for (; d0 + 16 <= hd; d0 += 16) {
            if (qb == 4) att_accum(t->acc, hd, al, p, t->kv, n, i0, 4, d0, 2);
            else att_accum(t->acc, hd, al, p, t->kv, n, i0, qb, d0, 2);
        }
        for (; d0 < hd; d0 += 8) att_accum(t->acc, hd, al, p, t->kv, n, i0, qb, d0, 1);
    }
}
#endif
