/*
 * vecdot_mxfp4_avx2.c: the AVX2 MXFP4 kernels (vecdot.h dot_mxfp4,
 * gemm_mxfp4_x8): a block's 32 codes made bytes by a pshufb lookup in the
 * 16-entry table (as IQ4_NL's), then int8 dots by maddubs.
 * Compiled with AVX2 + FMA + F16C by file name; called only after CPUID
 * says so. Not for: the reference (kernels/scalar/vecdot_mxfp4.c) or the
 * AVX-512 VNNI variant (kernels/avx512/vecdot_mxfp4_avx512.c).
 */
#include "vecdot.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "quant.h"
#include "vecdot_avx2.h"

#define PRAGMA_(x) _Pragma(#x)
#define UNROLL(n) PRAGMA_(GCC unroll n)
#define MXFP4_BYTES 17
/* As the other per-row dots (vecdot_avx2.c measured it). */
#define PREFETCH_AHEAD 4096

/* The table, and the table plus 12 (0..24: unsigned, for maddubs's first
 * operand; the 12 x sum(x) comes off in int32), in both 128-bit lanes. */
static inline __m256i mx_table(int offset)
{
    int8_t t[16];
    for (int i = 0; i < 16; i++) t[i] = (int8_t)(pagoda_mxfp4_table[i] + offset);
    __m128i v = _mm_loadu_si128((const __m128i *)t);
    return _mm256_set_m128i(v, v);
}

/* Signed a times signed b, 8 int32 sums: maddubs(|a|, b with a's sign). */
static inline __m256i dot_i8(__m256i a, __m256i b)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a)),
                             _mm256_set1_epi16(1));
}

float pagoda_cpu_dot_mxfp4_avx2(const void *wv, const pagoda_q8a_block *x, int64_t nb)
{
    const pagoda_block_mxfp4 *w = wv;
    const __m256i tab = mx_table(0);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        _mm_prefetch((const char *)&w[b] + PREFETCH_AHEAD, _MM_HINT_T0);
        __m256i p0 = dot_i8(_mm256_shuffle_epi8(tab, unpack_nibbles(w[b].qs)),
                            _mm256_loadu_si256((const __m256i *)x[b].qs));
        __m256i p1 = dot_i8(_mm256_shuffle_epi8(tab, unpack_nibbles(w[b + 1].qs)),
                            _mm256_loadu_si256((const __m256i *)x[b + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(pagoda_e8m0_to_fp32_half(w[b].e) * x[b].d),
                               _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(pagoda_e8m0_to_fp32_half(w[b + 1].e) * x[b + 1].d),
                               _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; b < nb; b++) {
        __m256i p = dot_i8(_mm256_shuffle_epi8(tab, unpack_nibbles(w[b].qs)),
                           _mm256_loadu_si256((const __m256i *)x[b].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(pagoda_e8m0_to_fp32_half(w[b].e) * x[b].d),
                               _mm256_cvtepi32_ps(p), acc0);
    }
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

/* RB rows x NO groups of eight tokens (pagoda_q8x8_block). Each row's
 * block is made 32 bytes of table + 12 (0..24) once, into an L1 buffer
 * (the next block's while this one is used, as the Q5 / IQ4_NL lanes
 * kernels), and four bytes at a time are broadcast against the same four
 * positions of eight tokens: unsigned x signed needs no sign trick, and
 * four maddubs add in int16 before one madd (4 x 2 x 24 x 127 = 24384 <
 * 2^15). The +12 comes off as 12 sum(x) = 3 s8 / 2 (s8 = 8 sum(x), even). */
__attribute__((always_inline)) static inline void tile_mx_x8(const uint8_t *w, size_t ws, int RB,
                                                              const pagoda_q8x8_block *x0,
                                                              const pagoda_q8x8_block *x1, int NO,
                                                              int nt0, int nt1, int64_t nb,
                                                              float *out, size_t os)
{
    const __m256i ones = _mm256_set1_epi16(1), tab = mx_table(12);
    const pagoda_q8x8_block *xs[2] = {x0, x1};
    uint8_t qq[2][4][32] __attribute__((aligned(32)));
    __m256 acc[4][2];
    UNROLL(4) for (int r = 0; r < RB; r++) {
        UNROLL(2) for (int o = 0; o < NO; o++) acc[r][o] = _mm256_setzero_ps();
        _mm256_store_si256((__m256i *)qq[0][r], _mm256_shuffle_epi8(tab, unpack_nibbles(w + r * ws + 1)));
    }
    for (int64_t b = 0; b < nb; b++) {
        uint8_t (*q)[32] = qq[b & 1];
        if (b + 1 < nb)
            UNROLL(4) for (int r = 0; r < RB; r++) {
                const uint8_t *wb = w + r * ws + (b + 1) * MXFP4_BYTES;
                _mm_prefetch((const char *)wb + RB * ws, _MM_HINT_T0);
                _mm256_store_si256((__m256i *)qq[(b + 1) & 1][r], _mm256_shuffle_epi8(tab, unpack_nibbles(wb + 1)));
            }
        __m256i ia[4][2];
        UNROLL(2) for (int h = 0; h < 2; h++) {
            UNROLL(4) for (int r = 0; r < RB; r++) {
                __m256i v0 = bcast4(q[r] + 16 * h), v1 = bcast4(q[r] + 16 * h + 4);
                __m256i v2 = bcast4(q[r] + 16 * h + 8), v3 = bcast4(q[r] + 16 * h + 12);
                UNROLL(2) for (int o = 0; o < NO; o++) {
                    const pagoda_q8x8_block *xb = &xs[o][b];
                    __m256i s = maddubs4_x8(v0, v1, v2, v3, xb->qs + 4 * h);
                    __m256i p = _mm256_madd_epi16(s, ones);
                    ia[r][o] = h ? _mm256_add_epi32(ia[r][o], p) : p;
                }
            }
        }
        __m256 dx[2];
        __m256i c12[2];
        UNROLL(2) for (int o = 0; o < NO; o++) {
            __m256i s8 = _mm256_load_si256((const __m256i *)xs[o][b].s8);
            c12[o] = _mm256_add_epi32(s8, _mm256_srai_epi32(s8, 1));
            dx[o] = _mm256_load_ps(xs[o][b].d);
        }
        UNROLL(4) for (int r = 0; r < RB; r++) {
            __m256 dw = _mm256_set1_ps(pagoda_e8m0_to_fp32_half(w[r * ws + b * MXFP4_BYTES]));
            UNROLL(2) for (int o = 0; o < NO; o++)
                acc[r][o] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx[o]),
                                            _mm256_cvtepi32_ps(_mm256_sub_epi32(ia[r][o], c12[o])), acc[r][o]);
        }
    }
    UNROLL(4) for (int r = 0; r < RB; r++) {
        store_x8(acc[r][0], nt0, out + r, os);
        if (NO > 1) store_x8(acc[r][1], nt1, (float *)((uint8_t *)out + 8 * os) + r, os);
    }
}

/* Rows in tiles of 4 (the last ones 1 at a time) x tokens in pairs of
 * groups of eight: out[t][n] for n < nr, t < T. */
void pagoda_cpu_gemm_mxfp4_x8_avx2(const void *wv, size_t ws, int64_t nr, const pagoda_q8x8_block *x,
                                   int64_t T, int64_t nb, float *out, size_t os)
{
    const uint8_t *w = wv;
    for (int64_t r = 0; r < nr;) {
        int rb = nr - r >= 4 ? 4 : 1;
        for (int64_t t = 0; t < T;) {
            int nt0 = T - t < 8 ? (int)(T - t) : 8;
            int nt1 = T - t - 8 <= 0 ? 0 : T - t - 8 < 8 ? (int)(T - t - 8) : 8;
            const pagoda_q8x8_block *x0 = x + (t / 8) * nb, *x1 = x0 + nb;
            float *o = (float *)((uint8_t *)out + t * os) + r;
            const uint8_t *wr = w + r * ws;
            if (rb == 4 && nt1)
                tile_mx_x8(wr, ws, 4, x0, x1, 2, nt0, nt1, nb, o, os);
            else if (rb == 4)
                tile_mx_x8(wr, ws, 4, x0, x0, 1, nt0, 0, nb, o, os);
            else if (nt1)
                tile_mx_x8(wr, ws, 1, x0, x1, 2, nt0, nt1, nb, o, os);
            else
                tile_mx_x8(wr, ws, 1, x0, x0, 1, nt0, 0, nb, o, os);
            t += nt1 ? 16 : 8;
        }
        r += rb;
    }
}

#endif
