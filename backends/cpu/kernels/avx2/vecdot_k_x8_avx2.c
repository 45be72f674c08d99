/*
 * vecdot_k_x8_avx2.c: the tokens-in-lanes kernels of the AVX2 table for
 * the K-quants and IQ4_XS (vecdot.h gemm_q*_k_x8 / gemm_iq4_xs_x8):
 * batched decode and prefill, eight tokens in the eight 32-bit lanes of a
 * register, as vecdot_x8_avx2.c does for Q8_0 / Q4_0.
 * Compiled with AVX2 + FMA + F16C by file name; called only after CPUID.
 * Not for: single tokens (vecdot_k_avx2.c).
 *
 * How. The activations are per-256 int8 (pagoda_q8kx8_block: 4-byte group
 * g of token t in lane t, with each token's sums of 16 and of 32 as int16
 * pairs). Per super-block a tile's weight rows are first unpacked once into
 * a small buffer (kx_row: the quants as bytes in element order, unsigned,
 * the sub-block scales as int16 pairs, the min / offset multipliers, two
 * floats), with full-width shifts and masks: 256 values in a handful of
 * instructions, shared by every token group of the call. Then per group of
 * four values one broadcast from that buffer meets the same four positions
 * of eight tokens in one maddubs; the int16 sums of as many groups as stay
 * below 2^15 are added, one madd with the sub-block's scale widens them
 * into int32 sums over the super-block, and one convert + FMA per row and
 * token group scales them by d * d_x. The mins (Q2_K, Q4_K, Q5_K) are
 * sum_j m_j * (sum of x in sub-block j): a madd of the row's (m_a, m_b)
 * pairs with the tokens' sum pairs, one more convert + FMA. The fixed
 * offsets (Q3_K: -4, Q6_K: -32) come off the int16 sums before the scale's
 * madd, as offset x the tokens' matching sums (hs): the additions wrap, so
 * the int16 result is exact whenever the true (q - offset) . x fits, and
 * the multiplies (what bounds these kernels here: Q4_K runs at about one
 * maddubs or madd a cycle) stay at 5 per 4 maddubs for Q6_K instead of
 * 6.5 (two madds per 16 values, and the offsets' madds at the end).
 * IQ4_XS's table values are signed: |x| x sign(w, x) and one madd per
 * group (its pair sums reach 2 x 127 x 127).
 * Int16 headroom per type (|x| <= 127, per int16 half of a lane): Q4_K q <=
 * 15: 8 groups (32 values) sum to <= 8 x 2 x 15 x 127 = 30480; Q5_K q <=
 * 31: 4 groups; Q2_K q <= 3: a 16-value sub-block; Q6_K (q - 32) and Q3_K
 * (q + 4 - 4) over a 16-value sub-block: <= 8 x 32 x 127 = 32512 and 4064.
 */
#include "vecdot_k.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <string.h>

#include "quant.h"
#include "vecdot_avx2.h"
#include "vecdot_k_unpack_avx2.h"

#define PRAGMA_(x) _Pragma(#x)
#define UNROLL(n) PRAGMA_(GCC unroll n)
/* Pin a value to a register at this point of the program: without it GCC
 * computes all of a super-block's maddubs first, spills them, and adds them
 * afterwards (one store and one load per maddubs). */
#define KEEP(v) __asm__("" : "+x"(v))

/* Weight row tile and token groups per step of the lanes product. */
#ifndef KX_RB
#define KX_RB 4
#endif
#ifndef KX_NO
#define KX_NO 2
#endif
/* Token groups per pass over a tile's rows (the float sums live in a
 * small array across the super-blocks). */
#define KX_MAX_G 8

/* ------------------------------------------------------- lanes product */

/* Values per scale, groups of four per int16 sum, offset pair registers
 * (madd with the row's mm at the end of a super-block), and the fixed
 * offset taken off in int16 instead (log2: Q3_K 4, Q6_K 32; 0 none). */
#define KT_SUB(kt) ((kt) == KT_Q4 || (kt) == KT_Q5 || (kt) == KT_IQ4 ? 32 : 16)
#define KT_GPM(kt) ((kt) == KT_Q4 ? 8 : (kt) == KT_IQ4 ? 1 : 4)
#define KT_NOFF(kt) ((kt) == KT_Q4 || (kt) == KT_Q5 ? 4 : (kt) == KT_Q2 ? 8 : 0)
#define KT_HS(kt) ((kt) == KT_Q6 ? 5 : (kt) == KT_Q3 ? 2 : 0)

/* RB unpacked rows x NO token groups (x0, x1: this super-block's blocks),
 * into acc[r][0 .. NO-1]. */
FORCE_INLINE void lanes_k(int kt, const kx_row *rw, int RB, const pagoda_q8kx8_block *x0,
                          const pagoda_q8kx8_block *x1, int NO, __m256 (*acc)[KX_MAX_G])
{
    const int SUB = KT_SUB(kt), GPM = KT_GPM(kt), NOFF = KT_NOFF(kt), HS = KT_HS(kt);
    const pagoda_q8kx8_block *xs[2] = {x0, x1};
    __m256i i32[KX_RB][2];
    UNROLL(4) for (int r = 0; r < RB; r++)
        UNROLL(2) for (int o = 0; o < NO; o++) i32[r][o] = _mm256_setzero_si256();
    for (int s = 0; s < 256 / SUB; s++) {
        __m256i i16[KX_RB][2];
        /* The sub-block's groups; every GPM of them one madd with the scale. */
        UNROLL(8) for (int gi = 0; gi < SUB / 4; gi++) {
            int g = s * (SUB / 4) + gi, gg = gi % GPM;
            __m256i xv[2], ax[2];
            UNROLL(2) for (int o = 0; o < NO; o++) {
                xv[o] = _mm256_load_si256((const __m256i *)xs[o]->qs[g]);
                if (kt == KT_IQ4) ax[o] = _mm256_sign_epi8(xv[o], xv[o]);
            }
            UNROLL(4) for (int r = 0; r < RB; r++) {
                __m256i wv = bcast4(rw[r].q + 4 * g);
                UNROLL(2) for (int o = 0; o < NO; o++) {
                    __m256i p = kt == KT_IQ4 ? _mm256_maddubs_epi16(ax[o], _mm256_sign_epi8(wv, xv[o]))
                                             : _mm256_maddubs_epi16(wv, xv[o]);
                    i16[r][o] = gg ? _mm256_add_epi16(i16[r][o], p) : p;
                    KEEP(i16[r][o]);
                }
            }
            if (gg != GPM - 1) continue;
            __m256i off[2];
            if (HS)
                UNROLL(2) for (int o = 0; o < NO; o++)
                    off[o] = _mm256_slli_epi16(_mm256_load_si256((const __m256i *)xs[o]->hs[s]), HS);
            UNROLL(4) for (int r = 0; r < RB; r++) {
                __m256i scv = _mm256_set1_epi32(rw[r].sc[s]);
                UNROLL(2) for (int o = 0; o < NO; o++) {
                    __m256i v = HS ? _mm256_sub_epi16(i16[r][o], off[o]) : i16[r][o];
                    i32[r][o] = _mm256_add_epi32(i32[r][o], _mm256_madd_epi16(v, scv));
                }
            }
        }
    }
    UNROLL(2) for (int o = 0; o < NO; o++) {
        __m256 dx = _mm256_load_ps(xs[o]->d);
        UNROLL(4) for (int r = 0; r < RB; r++) {
            __m256 a = _mm256_fmadd_ps(_mm256_mul_ps(dx, _mm256_set1_ps(rw[r].d)),
                                       _mm256_cvtepi32_ps(i32[r][o]), acc[r][o]);
            if (NOFF) {
                __m256i off = _mm256_setzero_si256();
                UNROLL(8) for (int i = 0; i < NOFF; i++) {
                    const int16_t *bs = NOFF == 4 ? xs[o]->bs32[i] : xs[o]->bs16[i];
                    off = _mm256_add_epi32(off, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)bs),
                                                                  _mm256_set1_epi32(rw[r].mm[i])));
                }
                a = _mm256_fmadd_ps(_mm256_mul_ps(dx, _mm256_set1_ps(rw[r].dm)), _mm256_cvtepi32_ps(off), a);
            }
            acc[r][o] = a;
        }
    }
}

/* RB weight rows (bsz bytes per super-block) x ng <= KX_MAX_G token groups
 * (x: ng runs of nb blocks, tn real tokens), over all super-blocks. */
FORCE_INLINE void tile_k(int kt, size_t bsz, const uint8_t *w, size_t ws, int RB,
                         const pagoda_q8kx8_block *x, int ng, int64_t tn, int64_t nb, float *out,
                         size_t os)
{
    kx_row rows[KX_RB];
    __m256 acc[KX_RB][KX_MAX_G];
    for (int r = 0; r < RB; r++)
        for (int o = 0; o < ng; o++) acc[r][o] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        UNROLL(4) for (int r = 0; r < RB; r++) {
            const uint8_t *blk = w + r * ws + (size_t)b * bsz;
            /* The same place in the next tile's rows (see vecdot_x8_avx2.c). */
            for (size_t off = 0; off < bsz; off += 64) _mm_prefetch((const char *)blk + RB * ws + off, _MM_HINT_T0);
            unpack_k(kt, blk, &rows[r]);
        }
        int o = 0;
        if (KX_NO > 1)
            for (; o + 2 <= ng; o += 2)
                lanes_k(kt, rows, RB, x + o * nb + b, x + (o + 1) * nb + b, 2, (__m256(*)[KX_MAX_G]) & acc[0][o]);
        for (; o < ng; o++)
            lanes_k(kt, rows, RB, x + o * nb + b, x + o * nb + b, 1, (__m256(*)[KX_MAX_G]) & acc[0][o]);
    }
    for (int r = 0; r < RB; r++)
        for (int o = 0; o < ng; o++) {
            int64_t left = tn - 8 * o;
            store_x8(acc[r][o], left < 8 ? (int)left : 8, (float *)((uint8_t *)out + 8 * o * os) + r, os);
        }
}

FORCE_INLINE void gemm_k_x8(int kt, size_t bsz, const void *wv, size_t ws, int64_t nr,
                            const pagoda_q8kx8_block *x, int64_t T, int64_t nb, float *out, size_t os)
{
    const uint8_t *w = wv;
    for (int64_t t0 = 0; t0 < T; t0 += 8 * KX_MAX_G) {
        int64_t tn = T - t0 < 8 * KX_MAX_G ? T - t0 : 8 * KX_MAX_G;
        int ng = (int)((tn + 7) / 8);
        const pagoda_q8kx8_block *xc = x + (t0 / 8) * nb;
        float *oc = (float *)((uint8_t *)out + t0 * os);
        int64_t r = 0;
        for (; r + KX_RB <= nr; r += KX_RB) tile_k(kt, bsz, w + r * ws, ws, KX_RB, xc, ng, tn, nb, oc + r, os);
        for (; r < nr; r++) tile_k(kt, bsz, w + r * ws, ws, 1, xc, ng, tn, nb, oc + r, os);
    }
}

#define GEMM_K(name, kt, blk)                                                                     \
    PAGODA_CPU_GEMM_K_X8(name) { gemm_k_x8(kt, sizeof(blk), w, ws, nr, x, T, nb, out, os); }
GEMM_K(pagoda_cpu_gemm_q2_k_x8_avx2, KT_Q2, pagoda_block_q2_K)
GEMM_K(pagoda_cpu_gemm_q3_k_x8_avx2, KT_Q3, pagoda_block_q3_K)
GEMM_K(pagoda_cpu_gemm_q4_k_x8_avx2, KT_Q4, pagoda_block_q4_K)
GEMM_K(pagoda_cpu_gemm_q5_k_x8_avx2, KT_Q5, pagoda_block_q5_K)
GEMM_K(pagoda_cpu_gemm_q6_k_x8_avx2, KT_Q6, pagoda_block_q6_K)
GEMM_K(pagoda_cpu_gemm_iq4_xs_x8_avx2, KT_IQ4, pagoda_block_iq4_xs)

#endif
