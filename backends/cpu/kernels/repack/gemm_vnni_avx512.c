/*
 * gemm_vnni_avx512.c: the AVX-512 VNNI GEMM on the row-interleaved layout
 * (repack.h). Two 16-row groups by four tokens at a time: per block, each
 * of the 8 64-byte rows of a group's q meets a 4-byte broadcast of each
 * token's unsigned activations (x + 128) in vpdpbusd, giving 16 int32 row
 * sums a token; the block's 128 x row sum comes off, and the scales of row
 * and token turn it into float. 8 int32 and 8 float accumulators, two
 * weight registers, one broadcast: 19 of the 32 zmm.
 * Tokens past T are the zero padding of pagoda_rp_acts (scale 0), and a
 * missing second group repeats the first, so every step has one shape.
 * Not for: the plain-C twin (pagoda_rp_gemm_ref in repack.c), the tiles
 * (../amx/).
 */
#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "repack.h"

static inline __m512i bcast4(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* The lanes of group pair gg that fall in [n0, n1) (none for a repeated
 * second group). */
static void group_masks(const int64_t gg[2], int64_t n0, int64_t n1, __mmask16 mk[2])
{
    for (int i = 0; i < 2; i++) {
        int64_t lo = gg[i] * PAGODA_RP_ROWS, m = 0;
        for (int n = 0; n < 16; n++)
            if (lo + n >= n0 && lo + n < n1) m |= 1 << n;
        mk[i] = (__mmask16)m;
    }
    if (gg[1] == gg[0]) mk[1] = 0;
}

/* Tokens t0..t0+3 (those < T) of the group pair into out. */
static void store_pair(float *out, size_t out_stride, int64_t t0, int64_t T, const int64_t gg[2],
                       const __mmask16 mk[2], const __m512 f0[4], const __m512 f1[4])
{
    for (int t = 0; t < 4 && t0 + t < T; t++) {
        float *o = (float *)((uint8_t *)out + (t0 + t) * out_stride);
        _mm512_mask_storeu_ps(o + gg[0] * PAGODA_RP_ROWS, mk[0], f0[t]);
        if (mk[1]) _mm512_mask_storeu_ps(o + gg[1] * PAGODA_RP_ROWS, mk[1], f1[t]);
    }
}

/* One sub-block of a super-block (q rows r0 .. r0 + nr) of two groups
 * against four tokens: int32 dots, times the groups' sub-block scales,
 * into S (the K-quants and Q6_K). */
static inline __attribute__((always_inline)) void sub_block(__m512i S[2][4], const uint8_t (*q0)[64],
                                                            const uint8_t (*q1)[64], const uint8_t *x,
                                                            int64_t kp, int r0, int nr, const int32_t *sc0,
                                                            const int32_t *sc1)
{
    __m512i acc[2][4];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) acc[i / 4][i % 4] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int r = r0; r < r0 + nr; r++) {
        const __m512i w0 = _mm512_load_si512(q0[r]), w1 = _mm512_load_si512(q1[r]);
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            const __m512i xv = bcast4(x + t * kp + 4 * r);
            acc[0][t] = _mm512_dpbusd_epi32(acc[0][t], w0, xv);
            acc[1][t] = _mm512_dpbusd_epi32(acc[1][t], w1, xv);
        }
    }
    const __m512i s0 = _mm512_load_si512(sc0), s1 = _mm512_load_si512(sc1);
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++) {
        S[0][t] = _mm512_add_epi32(S[0][t], _mm512_mullo_epi32(acc[0][t], s0));
        S[1][t] = _mm512_add_epi32(S[1][t], _mm512_mullo_epi32(acc[1][t], s1));
    }
}

/* Four tokens' int16 pairs (xs, one pair per p) against two groups'
 * pairs (m0 / m1 [np][32]) in vpdpwssd: the K-quant mins, Q6_K's offset. */
static inline __attribute__((always_inline)) void pair_sums(__m512i M[2][4], const int16_t (*m0)[32],
                                                            const int16_t (*m1)[32], const int16_t *xs,
                                                            int64_t ns, int np)
{
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) M[i / 4][i % 4] = _mm512_setzero_si512();
    for (int p = 0; p < np; p++) {
        const __m512i a0 = _mm512_load_si512(m0[p]), a1 = _mm512_load_si512(m1[p]);
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            const __m512i sv = bcast4((const uint8_t *)(xs + t * ns + 2 * p));
            M[0][t] = _mm512_dpwssd_epi32(M[0][t], a0, sv);
            M[1][t] = _mm512_dpwssd_epi32(M[1][t], a1, sv);
        }
    }
}

/* The per-32 GEMM over blocks bsz bytes apart (pagoda_rp_block, or
 * pagoda_rp_q41block, whose first fields are the same); q41: each block
 * then adds m_w x xm, the lanes kernels' second FMA (Q4_1's min). */
static inline __attribute__((always_inline)) void gemm32(const pagoda_rp_matrix *w, const uint8_t *base,
                                                         size_t bsz, bool q41, int64_t n0, int64_t n1,
                                                         const pagoda_rp_acts *a, float *out, size_t out_stride)
{
    const int64_t nb = w->nb, kp = a->kp, T = a->T;
    const int64_t g0 = n0 / PAGODA_RP_ROWS, g1 = (n1 + PAGODA_RP_ROWS - 1) / PAGODA_RP_ROWS;
    for (int64_t g = g0; g < g1; g += 2) {
        const int64_t gg[2] = {g, g + 1 < g1 ? g + 1 : g};
        __mmask16 mk[2];
        group_masks(gg, n0, n1, mk);
        const uint8_t *W0 = base + (size_t)(gg[0] * nb) * bsz, *W1 = base + (size_t)(gg[1] * nb) * bsz;
        for (int64_t t0 = 0; t0 < T; t0 += 4) {
            const uint8_t *x0 = a->xq + t0 * kp, *x1 = x0 + kp, *x2 = x1 + kp, *x3 = x2 + kp;
            const float *d0 = a->xd + t0 * nb, *m0 = a->xm + t0 * nb;
            __m512 f00 = _mm512_setzero_ps(), f01 = f00, f02 = f00, f03 = f00;
            __m512 f10 = f00, f11 = f00, f12 = f00, f13 = f00;
            for (int64_t b = 0; b < nb; b++) {
                const pagoda_rp_block *B0 = (const pagoda_rp_block *)(W0 + (size_t)b * bsz);
                const pagoda_rp_block *B1 = (const pagoda_rp_block *)(W1 + (size_t)b * bsz);
                __m512i i00 = _mm512_setzero_si512(), i01 = i00, i02 = i00, i03 = i00;
                __m512i i10 = i00, i11 = i00, i12 = i00, i13 = i00;
                const int64_t kb = b * 32;
                for (int r = 0; r < 8; r++) {
                    const __m512i w0 = _mm512_load_si512(B0->q[r]), w1 = _mm512_load_si512(B1->q[r]);
                    __m512i x = bcast4(x0 + kb + 4 * r);
                    i00 = _mm512_dpbusd_epi32(i00, x, w0);
                    i10 = _mm512_dpbusd_epi32(i10, x, w1);
                    x = bcast4(x1 + kb + 4 * r);
                    i01 = _mm512_dpbusd_epi32(i01, x, w0);
                    i11 = _mm512_dpbusd_epi32(i11, x, w1);
                    x = bcast4(x2 + kb + 4 * r);
                    i02 = _mm512_dpbusd_epi32(i02, x, w0);
                    i12 = _mm512_dpbusd_epi32(i12, x, w1);
                    x = bcast4(x3 + kb + 4 * r);
                    i03 = _mm512_dpbusd_epi32(i03, x, w0);
                    i13 = _mm512_dpbusd_epi32(i13, x, w1);
                }
                const __m512i s0 = _mm512_load_si512(B0->s128), s1 = _mm512_load_si512(B1->s128);
                const __m512 wd0 = _mm512_load_ps(B0->d), wd1 = _mm512_load_ps(B1->d);
#define PAGODA_RP_ACC(f, i, s, wd, j)                                                           \
    f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(i, s)),                             \
                        _mm512_mul_ps(wd, _mm512_set1_ps(d0[(j) * nb + b])), f)
                PAGODA_RP_ACC(f00, i00, s0, wd0, 0);
                PAGODA_RP_ACC(f01, i01, s0, wd0, 1);
                PAGODA_RP_ACC(f02, i02, s0, wd0, 2);
                PAGODA_RP_ACC(f03, i03, s0, wd0, 3);
                PAGODA_RP_ACC(f10, i10, s1, wd1, 0);
                PAGODA_RP_ACC(f11, i11, s1, wd1, 1);
                PAGODA_RP_ACC(f12, i12, s1, wd1, 2);
                PAGODA_RP_ACC(f13, i13, s1, wd1, 3);
#undef PAGODA_RP_ACC
                if (q41) {
                    /* acc = fma(m_w, d_x / 8 x s8, acc): tile_q4_1_x8's rounding (and the VNNI lanes') */
                    const __m512 wm0 = _mm512_load_ps(((const pagoda_rp_q41block *)B0)->m);
                    const __m512 wm1 = _mm512_load_ps(((const pagoda_rp_q41block *)B1)->m);
#define PAGODA_RP_MIN(f, wm, j) f = _mm512_fmadd_ps(wm, _mm512_set1_ps(m0[(j) * nb + b]), f)
                    PAGODA_RP_MIN(f00, wm0, 0);
                    PAGODA_RP_MIN(f01, wm0, 1);
                    PAGODA_RP_MIN(f02, wm0, 2);
                    PAGODA_RP_MIN(f03, wm0, 3);
                    PAGODA_RP_MIN(f10, wm1, 0);
                    PAGODA_RP_MIN(f11, wm1, 1);
                    PAGODA_RP_MIN(f12, wm1, 2);
                    PAGODA_RP_MIN(f13, wm1, 3);
#undef PAGODA_RP_MIN
                }
            }
            const __m512 f0[4] = {f00, f01, f02, f03}, f1[4] = {f10, f11, f12, f13};
            store_pair(out, out_stride, t0, T, gg, mk, f0, f1);
        }
    }
}

_Static_assert(offsetof(pagoda_rp_q41block, q) == offsetof(pagoda_rp_block, q) &&
                   offsetof(pagoda_rp_q41block, d) == offsetof(pagoda_rp_block, d) &&
                   offsetof(pagoda_rp_q41block, s128) == offsetof(pagoda_rp_block, s128),
               "a Q4_1 block begins as a Q8_0 / Q4_0 one");

void pagoda_rp_gemm_vnni(const pagoda_rp_matrix *w, int64_t n0, int64_t n1, const pagoda_rp_acts *a,
                         float *out, size_t out_stride)
{
    gemm32(w, (const uint8_t *)w->blk, sizeof(pagoda_rp_block), false, n0, n1, a, out, out_stride);
}

/* Q4_1: the nibbles 0..15 as Q4_0's signed side (x + 128 against them,
 * the 128 x row sum off), then per block the lanes kernels' two FMAs:
 * fma(int32, d_w d_x) and fma(m_w, xm). */
void pagoda_rp_gemm_q41_vnni(const pagoda_rp_matrix *w, int64_t n0, int64_t n1, const pagoda_rp_acts *a,
                             float *out, size_t out_stride)
{
    gemm32(w, (const uint8_t *)w->q41blk, sizeof(pagoda_rp_q41block), true, n0, n1, a, out, out_stride);
}

/* Q4_K / Q5_K: the weights are the unsigned operand (0..15 / 0..31) and
 * the q8k activations the signed one, so no offset. Per sub-block of 32
 * an int32 dot (8 vpdpbusd), multiplied by its 6-bit scale into an int32
 * sum over the super-block; the mins meet the activations' sums of 32 in
 * 4 vpdpwssd; one float step per 256 values: dx (d S - dmin M). Same
 * blocking as above (2 groups x 4 tokens). */
void pagoda_rp_gemm_k_vnni(const pagoda_rp_matrix *w, int64_t n0, int64_t n1, const pagoda_rp_acts *a,
                           float *out, size_t out_stride)
{
    const int64_t nb = w->nb, kp = a->kp, T = a->T, ns = a->K / PAGODA_RP_QK;
    const int64_t g0 = n0 / PAGODA_RP_ROWS, g1 = (n1 + PAGODA_RP_ROWS - 1) / PAGODA_RP_ROWS;
    for (int64_t g = g0; g < g1; g += 2) {
        const int64_t gg[2] = {g, g + 1 < g1 ? g + 1 : g};
        __mmask16 mk[2];
        group_masks(gg, n0, n1, mk);
        const pagoda_rp_kblock *W[2] = {&w->kblk[gg[0] * nb], &w->kblk[gg[1] * nb]};
        for (int64_t t0 = 0; t0 < T; t0 += 4) {
            const uint8_t *x = a->xq + t0 * kp;
            const float *dx = a->xd + t0 * nb;
            const int16_t *xs = a->xs + t0 * ns;
            __m512 f[2][4];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) f[i / 4][i % 4] = _mm512_setzero_ps();
            for (int64_t b = 0; b < nb; b++) {
                const pagoda_rp_kblock *B[2] = {&W[0][b], &W[1][b]};
                __m512i S[2][4];
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++) S[i / 4][i % 4] = _mm512_setzero_si512();
                for (int j = 0; j < 8; j++)
                    sub_block(S, B[0]->q, B[1]->q, x + b * 256, kp, 8 * j, 8, B[0]->sc[j], B[1]->sc[j]);
                __m512i M[2][4];
                pair_sums(M, B[0]->mp, B[1]->mp, xs + 8 * b, ns, 4);
#pragma GCC unroll 2
                for (int i = 0; i < 2; i++) {
                    const __m512 d = _mm512_load_ps(B[i]->d), dm = _mm512_load_ps(B[i]->dmin);
#pragma GCC unroll 4
                    for (int t = 0; t < 4; t++) {
                        /* the AVX2 lanes kernels' float steps, so a token gets the same bits at any T */
                        const __m512 xd = _mm512_set1_ps(dx[t * nb + b]);
                        f[i][t] = _mm512_fmadd_ps(_mm512_mul_ps(xd, d), _mm512_cvtepi32_ps(S[i][t]), f[i][t]);
                        f[i][t] = _mm512_fmadd_ps(_mm512_mul_ps(xd, _mm512_sub_ps(_mm512_setzero_ps(), dm)),
                                                  _mm512_cvtepi32_ps(M[i][t]), f[i][t]);
                    }
                }
            }
            store_pair(out, out_stride, t0, T, gg, mk, f[0], f[1]);
        }
    }
}

/* Q6_K: the stored 0..63 values unsigned against signed q8k activations,
 * per 16-value sub-block an int32 dot (4 vpdpbusd) times its signed
 * scale summed in int32 over the super-block; the -32 comes off as 32 x
 * the scales against the activations' sums of 16 (8 vpdpwssd); one float
 * step per 256 values. 2 groups x 4 tokens. */
void pagoda_rp_gemm_q6_vnni(const pagoda_rp_matrix *w, int64_t n0, int64_t n1, const pagoda_rp_acts *a,
                            float *out, size_t out_stride)
{
    const int64_t nb = w->nb, kp = a->kp, T = a->T, ns = a->K / 16;
    const int64_t g0 = n0 / PAGODA_RP_ROWS, g1 = (n1 + PAGODA_RP_ROWS - 1) / PAGODA_RP_ROWS;
    for (int64_t g = g0; g < g1; g += 2) {
        const int64_t gg[2] = {g, g + 1 < g1 ? g + 1 : g};
        __mmask16 mk[2];
        group_masks(gg, n0, n1, mk);
        const pagoda_rp_q6block *W[2] = {&w->q6blk[gg[0] * nb], &w->q6blk[gg[1] * nb]};
        for (int64_t t0 = 0; t0 < T; t0 += 4) {
            const uint8_t *x = a->xq + t0 * kp;
            const float *dx = a->xd + t0 * nb;
            const int16_t *xs = a->xs16 + t0 * ns;
            __m512 f[2][4];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) f[i / 4][i % 4] = _mm512_setzero_ps();
            for (int64_t b = 0; b < nb; b++) {
                const pagoda_rp_q6block *B[2] = {&W[0][b], &W[1][b]};
                __m512i S[2][4];
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++) S[i / 4][i % 4] = _mm512_setzero_si512();
                for (int j = 0; j < 16; j++)
                    sub_block(S, B[0]->q, B[1]->q, x + b * 256, kp, 4 * j, 4, B[0]->sc[j], B[1]->sc[j]);
                __m512i O[2][4];
                pair_sums(O, B[0]->scp, B[1]->scp, xs + 16 * b, ns, 8);
#pragma GCC unroll 2
                for (int i = 0; i < 2; i++) {
                    const __m512 d = _mm512_load_ps(B[i]->d);
#pragma GCC unroll 4
                    for (int t = 0; t < 4; t++) {
                        __m512i st = _mm512_sub_epi32(S[i][t], _mm512_slli_epi32(O[i][t], 5));
                        f[i][t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(dx[t * nb + b]), d),
                                                  _mm512_cvtepi32_ps(st), f[i][t]);
                    }
                }
            }
            store_pair(out, out_stride, t0, T, gg, mk, f[0], f[1]);
        }
    }
}
