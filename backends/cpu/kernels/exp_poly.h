/*
 * exp_poly.h: the one exp(x) the SIMD activations share (avx2/
 * vecdot_act_avx2.c's exp_ps at 8 lanes, avx512/act_avx512.c's exp512 at
 * 16), so the two widths cannot drift apart:
 *   1. x clamped to [PAGODA_EXP_LO, PAGODA_EXP_HI] (the float range);
 *   2. n = round(x log2e), each width its own way (AVX2: round_ps; AVX-512:
 *      the 1.5 * 2^23 trick, as SIMDe 0.7.4 has no 512-bit float-int
 *      conversion), so their n agree but are not computed alike;
 *   3. r = x - n ln2, ln2 split in two (|r| <= ln2 / 2), and exp(r) by the
 *      degree-6 minimax polynomial of Cephes' expf: PAGODA_EXP_POLY, the
 *      same intrinsics at either width;
 *   4. times 2^n built in the exponent bits: n is in [-126, 128] and 128
 *      only at the clamp, where p < 1 keeps the product finite, so
 *      2^(n - 1) (bias PAGODA_EXP_BIAS) then doubled.
 * Not for: the scalar references (they call expf), core/model/logsoftmax.c's
 * own AVX2 exp (a core file, not a kernel level).
 */
#ifndef PAGODA_CPU_EXP_POLY_H
#define PAGODA_CPU_EXP_POLY_H

#define PAGODA_EXP_LO (-87.33654f)
#define PAGODA_EXP_HI 88.72283f
#define PAGODA_EXP_LOG2E 1.44269504088896341f
#define PAGODA_EXP_ROUND_MAGIC 12582912.0f   /* 1.5 * 2^23 */
#define PAGODA_EXP_LN2_HI 0.693359375f
#define PAGODA_EXP_LN2_LO (-2.12194440e-4f)
#define PAGODA_EXP_C6 1.9875691500e-4f
#define PAGODA_EXP_C5 1.3981999507e-3f
#define PAGODA_EXP_C4 8.3334519073e-3f
#define PAGODA_EXP_C3 4.1665795894e-2f
#define PAGODA_EXP_C2 1.6666665459e-1f
#define PAGODA_EXP_C1 5.0000001201e-1f
#define PAGODA_EXP_BIAS 126

/* Step 3 at width W (256 or 512, as in the intrinsics' names): p = exp(x -
 * n ln2) of the clamped x and its rounded n (both __m<W>), declared here. */
#define PAGODA_EXP_POLY(W, p, x, n)                                                        \
    __m##W p##_r = _mm##W##_fnmadd_ps((n), _mm##W##_set1_ps(PAGODA_EXP_LN2_HI), (x));      \
    p##_r = _mm##W##_fnmadd_ps((n), _mm##W##_set1_ps(PAGODA_EXP_LN2_LO), p##_r);           \
    __m##W p = _mm##W##_set1_ps(PAGODA_EXP_C6);                                            \
    p = _mm##W##_fmadd_ps(p, p##_r, _mm##W##_set1_ps(PAGODA_EXP_C5));                      \
    p = _mm##W##_fmadd_ps(p, p##_r, _mm##W##_set1_ps(PAGODA_EXP_C4));                      \
    p = _mm##W##_fmadd_ps(p, p##_r, _mm##W##_set1_ps(PAGODA_EXP_C3));                      \
    p = _mm##W##_fmadd_ps(p, p##_r, _mm##W##_set1_ps(PAGODA_EXP_C2));                      \
    p = _mm##W##_fmadd_ps(p, p##_r, _mm##W##_set1_ps(PAGODA_EXP_C1));                      \
    p = _mm##W##_fmadd_ps(p, _mm##W##_mul_ps(p##_r, p##_r),                                \
                          _mm##W##_add_ps(p##_r, _mm##W##_set1_ps(1.0f)))

#endif
