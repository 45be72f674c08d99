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

enum { KT_Q2, KT_Q3, KT_Q4, KT_Q5, KT_Q6, KT_IQ4 };

/* One weight row's super-block as the lanes product reads it:
 * value i = d * sc[i / SUB] * q[i] + dm * mm (see above). */
typedef struct kx_row {
    uint8_t q[256];
    int32_t sc[16]; /* (scale, scale) as int16 pairs, per sub-block */
    int32_t mm[8];  /* (m_2i, m_2i+1) as int16 pairs: per 16 (8 used) or per 32 (4) */
    float d, dm;
} __attribute__((aligned(32))) kx_row;

/* 8 int16 as (v, v) int32 pairs, then 4 .. 7. */
static inline void store_pairs8(int32_t *o, __m128i v16)
{
    _mm_storeu_si128((__m128i *)o, _mm_unpacklo_epi16(v16, v16));
    _mm_storeu_si128((__m128i *)(o + 4), _mm_unpackhi_epi16(v16, v16));
}

/* ------------------------------------------------------------- unpacking */

static inline void unpack_q45_k(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh,
                                uint16_t d, uint16_t dmin, kx_row *o)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    __m256i hb = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(v, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if (qh) {
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), one), 4));
            hb = _mm256_srli_epi16(hb, 2);
        }
        _mm256_store_si256((__m256i *)(o->q + 64 * c), lo);
        _mm256_store_si256((__m256i *)(o->q + 64 * c + 32), hi);
    }
    uint32_t u[4];
    pagoda_k4_unpack_scales(scales, u);
    __m128i raw = _mm_setr_epi32((int)u[0], (int)u[1], (int)u[2], (int)u[3]);
    store_pairs8(o->sc, _mm_cvtepu8_epi16(raw));
    _mm_storeu_si128((__m128i *)o->mm, _mm_cvtepu8_epi16(_mm_srli_si128(raw, 8)));
    o->d = f16(d);
    o->dm = -f16(dmin);
}

/* 16 byte scales (signed or not) to sc pairs, and to mm as they are. */
static inline void k16_scales(__m128i sc8, int sign, int32_t *sc, int32_t *mm)
{
    __m128i lo = sign ? _mm_cvtepi8_epi16(sc8) : _mm_cvtepu8_epi16(sc8);
    __m128i hi = sign ? _mm_cvtepi8_epi16(_mm_srli_si128(sc8, 8)) : _mm_cvtepu8_epi16(_mm_srli_si128(sc8, 8));
    store_pairs8(sc, lo);
    store_pairs8(sc + 8, hi);
    if (mm) {
        _mm_storeu_si128((__m128i *)mm, lo);
        _mm_storeu_si128((__m128i *)(mm + 4), hi);
    }
}

static inline void unpack_q2_k(const uint8_t *blk, kx_row *o)
{
    const pagoda_block_q2_K *w = (const pagoda_block_q2_K *)blk;
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int n = 0; n < 2; n++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(w->qs + 32 * n));
        for (int j = 0; j < 4; j++)
            _mm256_store_si256((__m256i *)(o->q + 128 * n + 32 * j),
                               _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3));
    }
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m128i raw = _mm_loadu_si128((const __m128i *)w->scales);
    k16_scales(_mm_and_si128(raw, m4), 0, o->sc, NULL);
    __m128i mn = _mm_and_si128(_mm_srli_epi16(raw, 4), m4);
    _mm_storeu_si128((__m128i *)o->mm, _mm_cvtepu8_epi16(mn));
    _mm_storeu_si128((__m128i *)(o->mm + 4), _mm_cvtepu8_epi16(_mm_srli_si128(mn, 8)));
    o->d = f16(w->d);
    o->dm = -f16(w->dmin);
}

static inline void unpack_q3_k(const uint8_t *blk, kx_row *o)
{
    const pagoda_block_q3_K *w = (const pagoda_block_q3_K *)blk;
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256i hm = _mm256_loadu_si256((const __m256i *)w->hmask);
    for (int n = 0; n < 2; n++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(w->qs + 32 * n));
        for (int j = 0; j < 4; j++) {
            __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
            __m256i hi = _mm256_slli_epi16(_mm256_and_si256(hm, one), 2);
            hm = _mm256_srli_epi16(hm, 1);
            _mm256_store_si256((__m256i *)(o->q + 128 * n + 32 * j), _mm256_or_si256(lo, hi));
        }
    }
    uint32_t u[4];
    pagoda_k3_unpack_scales(w->scales, u);
    __m128i sc8 = _mm_sub_epi8(_mm_setr_epi32((int)u[0], (int)u[1], (int)u[2], (int)u[3]), _mm_set1_epi8(32));
    k16_scales(sc8, 1, o->sc, NULL);
    o->d = f16(w->d);
    o->dm = 0.0f; /* the -4 comes off in int16 (KT_HS) */
}

static inline void unpack_q6_k(const uint8_t *blk, kx_row *o)
{
    const pagoda_blk_q6_k *w = (const pagoda_blk_q6_k *)blk;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    for (int n = 0; n < 2; n++) {
        __m256i b1 = _mm256_loadu_si256((const __m256i *)(w->ql + 64 * n));
        __m256i b2 = _mm256_loadu_si256((const __m256i *)(w->ql + 64 * n + 32));
        __m256i bh = _mm256_loadu_si256((const __m256i *)(w->qh + 32 * n));
        __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(bh, m3), 4);
        __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 2), m3), 4);
        __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 4), m3), 4);
        __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 6), m3), 4);
        uint8_t *q = o->q + 128 * n;
        _mm256_store_si256((__m256i *)q, _mm256_or_si256(_mm256_and_si256(b1, m4), h0));
        _mm256_store_si256((__m256i *)(q + 32), _mm256_or_si256(_mm256_and_si256(b2, m4), h1));
        _mm256_store_si256((__m256i *)(q + 64),
                           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m4), h2));
        _mm256_store_si256((__m256i *)(q + 96),
                           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m4), h3));
    }
    k16_scales(_mm_loadu_si128((const __m128i *)w->scales), 1, o->sc, NULL);
    o->d = f16(w->d);
    o->dm = 0.0f; /* the -32 comes off in int16 (KT_HS) */
}

static inline void unpack_iq4_xs(const uint8_t *blk, kx_row *o)
{
    const pagoda_block_iq4_xs *w = (const pagoda_block_iq4_xs *)blk;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pagoda_iq4nl_table));
    for (int ib = 0; ib < 8; ib++) {
        __m128i t = _mm_loadu_si128((const __m128i *)(w->qs + 16 * ib));
        __m256i idx = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), m4);
        _mm256_store_si256((__m256i *)(o->q + 32 * ib), _mm256_shuffle_epi8(table, idx));
        uint16_t s = (uint16_t)(int16_t)pagoda_iq4_xs_scale(w, ib);
        o->sc[ib] = (int32_t)((uint32_t)s | (uint32_t)s << 16);
    }
    o->d = f16(w->d);
    o->dm = 0.0f;
}

FORCE_INLINE void unpack_k(int kt, const uint8_t *blk, kx_row *o)
{
    switch (kt) {
    case KT_Q2: unpack_q2_k(blk, o); break;
    case KT_Q3: unpack_q3_k(blk, o); break;
    case KT_Q4: {
        const pagoda_block_q4_K *w = (const pagoda_block_q4_K *)blk;
        unpack_q45_k(w->scales, w->qs, NULL, w->d, w->dmin, o);
        break;
    }
    case KT_Q5: {
        const pagoda_block_q5_K *w = (const pagoda_block_q5_K *)blk;
        unpack_q45_k(w->scales, w->qs, w->qh, w->d, w->dmin, o);
        break;
    }
    case KT_Q6: unpack_q6_k(blk, o); break;
    default: unpack_iq4_xs(blk, o); break;
    }
}

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
