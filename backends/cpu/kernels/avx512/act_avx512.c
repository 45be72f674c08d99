/*
 * act_avx512.c: the AVX-512 kernels built on exp (exp_poly.h's Cephes
 * polynomial, sixteen values a zmm): the gated activation of the table
 * (vecdot.h swiglu_oai, gpt-oss's clamped SwiGLU; the tails by the scalar
 * formula, pagoda_swiglu_oai1) and the F16 attention tile of prefill
 * (vecdot.h attn_f16_tile: sixteen query rows in the lanes of a zmm, so a
 * chunk of keys and values is converted from F16 once for all sixteen,
 * scored by broadcasting each key's values against the transposed
 * queries, and the softmax step (max, rescale, exp) runs on all sixteen
 * rows at once, where attention.c's row path converts every key again
 * for each query row and runs exp one key at a time). AVX-512F only.
 * Compiled with the AVX-512 flags by file name (and a second time against
 * SIMDe on AVX2 alone, PAGODA_SIMDE, for the tests); called only after the
 * CPUID + XCR0 check. Not for: swiglu / geglu (the AVX2 entries run at
 * this level), the scalar reference (scalar/vecdot.c), decode rows
 * (attention.c keeps them on the row kernels).
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
#include <simde/x86/f16c.h>
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

/* ------------------------------------------------ the F16 attention tile */

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* s[b] = the sixteen rows' dots with key b's floats kf[b][0..hd): one
 * query load per value, KB broadcasts and FMAs. */
ALWAYS_INLINE void tile_scores(const float *qt, const float *kf, int hd, int KB, float *s)
{
    __m512 a[8];
    for (int b = 0; b < KB; b++) a[b] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d++) {
        __m512 q = _mm512_load_ps(qt + 16 * d);
        for (int b = 0; b < KB; b++) a[b] = _mm512_fmadd_ps(q, _mm512_set1_ps(kf[(size_t)b * hd + d]), a[b]);
    }
    for (int b = 0; b < KB; b++) _mm512_store_ps(s + 16 * b, a[b]);
}

/* acc rows i0 .. i0 + QB - 1, values d0 .. d0 + 16 DB - 1: acc * alpha +
 * sum_j p[j][i] v[j][d], QB x DB sums in registers over the n keys. */
ALWAYS_INLINE void tile_accum(float *acc, int hd, const float *al, const float *p, const float *vf, int n, int i0,
                              int QB, int d0, int DB)
{
    __m512 c[4][4];
    for (int i = 0; i < QB; i++)
        for (int b = 0; b < DB; b++)
            c[i][b] = _mm512_mul_ps(_mm512_load_ps(acc + (size_t)(i0 + i) * hd + d0 + 16 * b), _mm512_set1_ps(al[i0 + i]));
    for (int j = 0; j < n; j++) {
        __m512 v[4];
        for (int b = 0; b < DB; b++) v[b] = _mm512_load_ps(vf + (size_t)j * hd + d0 + 16 * b);
        for (int i = 0; i < QB; i++) {
            __m512 w = _mm512_set1_ps(p[16 * j + i0 + i]);
            for (int b = 0; b < DB; b++) c[i][b] = _mm512_fmadd_ps(w, v[b], c[i][b]);
        }
    }
    for (int i = 0; i < QB; i++)
        for (int b = 0; b < DB; b++) _mm512_store_ps(acc + (size_t)(i0 + i) * hd + d0 + 16 * b, c[i][b]);
}

static void attn_f16_tile_avx512(pagoda_attn_tile *t, const void *k, const void *v, size_t stride, int n, int32_t j0)
{
    const int hd = t->hd;
    float p[64 * 16] __attribute__((aligned(64)));
    float al[16] __attribute__((aligned(64)));
    __mmask16 seen[64];
    pagoda_cpu_attn_kv_rows_avx2(t, k, stride, n); /* the AVX2 level's converter */
    int j = 0;
    for (; j + 8 <= n; j += 8) tile_scores(t->qt, t->kv + (size_t)j * hd, hd, 8, p + 16 * j);
    for (; j < n; j++) tile_scores(t->qt, t->kv + (size_t)j * hd, hd, 1, p + 16 * j);
    const __m512i lo = _mm512_load_si512((const void *)t->lo), hi = _mm512_load_si512((const void *)t->hi);
    const __m512 ninf = _mm512_set1_ps(-INFINITY), scale = _mm512_set1_ps(t->scale);
    __m512 cm = ninf;
    for (j = 0; j < n; j++) {
        __m512i jj = _mm512_set1_epi32(j0 + j);
        seen[j] = _mm512_cmpge_epi32_mask(jj, lo) & _mm512_cmpge_epi32_mask(hi, jj);
        __m512 s = _mm512_mask_mov_ps(ninf, seen[j], _mm512_mul_ps(_mm512_load_ps(p + 16 * j), scale));
        _mm512_store_ps(p + 16 * j, s);
        cm = _mm512_max_ps(cm, s);
    }
    /* The online step per row: nm = max(m, this chunk's max); rows that
     * have seen no key yet (nm = -inf) take 0 as their max so no -inf -
     * -inf is formed; keys a row does not see weigh 0. */
    __m512 m = _mm512_load_ps(t->m), nm = _mm512_max_ps(m, cm);
    __m512 base = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(nm, ninf, _CMP_NEQ_OQ), nm);
    __m512 alpha = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(m, ninf, _CMP_NEQ_OQ), exp512(_mm512_sub_ps(m, base)));
    __m512 l = _mm512_mul_ps(_mm512_load_ps(t->l), alpha);
    for (j = 0; j < n; j++) {
        __m512 e = _mm512_maskz_mov_ps(seen[j], exp512(_mm512_sub_ps(_mm512_load_ps(p + 16 * j), base)));
        l = _mm512_add_ps(l, e);
        _mm512_store_ps(p + 16 * j, e);
    }
    _mm512_store_ps(t->m, nm);
    _mm512_store_ps(t->l, l);
    _mm512_store_ps(al, alpha);
    pagoda_cpu_attn_kv_rows_avx2(t, v, stride, n);
    for (int i0 = 0; i0 < t->nq; i0 += 4) {
        int qb = t->nq - i0 < 4 ? t->nq - i0 : 4;
        int d0 = 0;
        for (; d0 + 64 <= hd; d0 += 64) {
            if (qb == 4) tile_accum(t->acc, hd, al, p, t->kv, n, i0, 4, d0, 4);
            else tile_accum(t->acc, hd, al, p, t->kv, n, i0, qb, d0, 4);
        }
        for (; d0 < hd; d0 += 16) tile_accum(t->acc, hd, al, p, t->kv, n, i0, qb, d0, 1);
    }
}

void ACT_FN(pagoda_cpu_fill_avx512_act)(pagoda_vecdot_table *t)
{
    t->swiglu_oai = swiglu_oai_avx512;
    t->attn_f16_tile = attn_f16_tile_avx512;
}
#else
/* A compiler without the flags: the AVX2 entry runs at this level. */
void pagoda_cpu_fill_avx512_act(pagoda_vecdot_table *t) { (void)t; }
#endif
