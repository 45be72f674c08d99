/*
 * vecdot_k_avx2.c: AVX2 dots of one K-quant (Q2_K..Q5_K) or IQ4_XS weight
 * row against one token's q8k activations: decode and small batches
 * (matmul.c calls one per row and token below its x8 threshold).
 * Per super-block: the quants unpacked to unsigned bytes in element order
 * (maddubs u8 x s8 pair sums, which stay far below 2^15 at these widths),
 * one madd with the sub-blocks' scales as int16, int32 sums over the
 * super-block, then one convert and one FMA with d * d_x; the min / offset
 * terms come from the activations' per-16 sums (q8k bsums) in one madd.
 * IQ4_XS's table values are signed: |w| x sign(x, w) instead.
 * Compiled with AVX2 + FMA + F16C by file name; called only after CPUID.
 * Not for: batches of tokens (vecdot_k_x8_avx2.c).
 */
#include "vecdot_k.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include "quant.h"
#include "vecdot_avx2.h"

/* As vecdot_avx2.c: 4 KiB ahead on the weight stream, but every cache
 * line of the block: one prefetch per 144-byte Q4_K block (every other
 * line) read DRAM at 6.1-6.9 GB/s per CPU-second, none at 8.9-9.7, every
 * line at 11.5-13.6 (one core, 75 MB of weights, busy dev VM, alternating
 * runs). */
#define PREFETCH_AHEAD 4096

static inline void prefetch_block(const void *blk, size_t bytes)
{
    for (size_t off = 0; off < bytes; off += 64)
        _mm_prefetch((const char *)blk + PREFETCH_AHEAD + off, _MM_HINT_T0);
}

static inline float hsum128_ps(__m128 v)
{
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    return _mm_cvtss_f32(v);
}

/* Shuffle masks: int16 element j of a 128-bit lane to all 8 int16 of it. */
static const uint8_t k_bcast16[8][32] = {
#define R(j) {2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1,           \
              2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1,           \
              2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1,           \
              2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1}
    R(0), R(1), R(2), R(3), R(4), R(5), R(6), R(7),
#undef R
};

/* v holds 8 int16 in each 128-bit lane; all 16 lanes to element j. */
static inline __m256i bcast16(__m256i v, int j)
{
    return _mm256_shuffle_epi8(v, _mm256_loadu_si256((const __m256i *)k_bcast16[j]));
}

/* Masks: byte 2i to bytes 0..7 and byte 2i+1 to 8..15 (then widened: a
 * 256-bit int16 vector of scale 2i in the low lane, 2i+1 in the high). */
static const uint8_t k_pair_bytes[8][16] = {
#define R(i) {2 * i, 2 * i, 2 * i, 2 * i, 2 * i, 2 * i, 2 * i, 2 * i,                           \
              2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1}
    R(0), R(1), R(2), R(3), R(4), R(5), R(6), R(7),
#undef R
};

/* Scales of sub-blocks 2i (low lane) and 2i + 1 (high lane) as int16,
 * from 16 signed (sign = 1) or unsigned byte scales. */
static inline __m256i pair_scales(__m128i sc8, int i, int sign)
{
    __m128i b = _mm_shuffle_epi8(sc8, _mm_loadu_si128((const __m128i *)k_pair_bytes[i]));
    return sign ? _mm256_cvtepi8_epi16(b) : _mm256_cvtepu8_epi16(b);
}

/* Q4_K / Q5_K: qh NULL for Q4_K. The min term: sum_j m_j * (sum of x in
 * sub-block j), the per-32 sums being adjacent pairs of the q8k bsums. */
static inline void dot_q45_k(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh,
                              const pagoda_q8k_block *x, __m256 *acc, __m128 *accm, float d,
                              float dmin)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    uint32_t u[4];
    pagoda_k4_unpack_scales(scales, u);
    __m128i raw = _mm_setr_epi32((int)u[0], (int)u[1], (int)u[2], (int)u[3]);
    __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(raw));
    __m128i mins = _mm_cvtepu8_epi16(_mm_srli_si128(raw, 8));
    __m128i bs32 = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)x->bsums),
                                  _mm_loadu_si128((const __m128i *)(x->bsums + 8)));
    __m128i pm = _mm_madd_epi16(bs32, mins);
    *accm = _mm_fmadd_ps(_mm_set1_ps(dmin * x->d), _mm_cvtepi32_ps(pm), *accm);
    __m256i hb = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    __m256i sumi = _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(v, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if (qh) {
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), one), 4));
            hb = _mm256_srli_epi16(hb, 2);
        }
        __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(x->qs + 64 * c)));
        __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(x->qs + 64 * c + 32)));
        p0 = _mm256_madd_epi16(p0, bcast16(sc, 2 * c));
        p1 = _mm256_madd_epi16(p1, bcast16(sc, 2 * c + 1));
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
    }
    *acc = _mm256_fmadd_ps(_mm256_set1_ps(d * x->d), _mm256_cvtepi32_ps(sumi), *acc);
}

float pagoda_cpu_dot_q4_k_avx2(const void *wv, const pagoda_q8k_block *x, int64_t nb)
{
    const pagoda_block_q4_K *w = wv;
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        prefetch_block(&w[b], sizeof w[b]);
        dot_q45_k(w[b].scales, w[b].qs, NULL, &x[b], &acc, &accm, f16(w[b].d), f16(w[b].dmin));
    }
    return hsum_ps(acc) - hsum128_ps(accm);
}

float pagoda_cpu_dot_q5_k_avx2(const void *wv, const pagoda_q8k_block *x, int64_t nb)
{
    const pagoda_block_q5_K *w = wv;
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        prefetch_block(&w[b], sizeof w[b]);
        dot_q45_k(w[b].scales, w[b].qs, w[b].qh, &x[b], &acc, &accm, f16(w[b].d), f16(w[b].dmin));
    }
    return hsum_ps(acc) - hsum128_ps(accm);
}

/* Q2_K / Q3_K: per half n of the super-block one 32-byte load of qs gives
 * four runs of 32 values (bits 2j); run j covers sub-blocks 8n + 2j (low
 * 128-bit lane after maddubs) and 8n + 2j + 1 (high lane). Q3_K's 3rd bit
 * (hmask bit 4n + j) is added as 4, the -4 of every value taken off once
 * per super-block with the bsums: sum_k sc_k * 4 * bsum_k. */
float pagoda_cpu_dot_q2_k_avx2(const void *wv, const pagoda_q8k_block *x, int64_t nb)
{
    const pagoda_block_q2_K *w = wv;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        prefetch_block(&w[b], sizeof w[b]);
        __m128i raw = _mm_loadu_si128((const __m128i *)w[b].scales);
        __m128i sc8 = _mm_and_si128(raw, m4);
        __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), m4));
        __m256i pm = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x[b].bsums), mins);
        accm = _mm256_fmadd_ps(_mm256_set1_ps(f16(w[b].dmin) * x[b].d), _mm256_cvtepi32_ps(pm), accm);
        __m256i sumi = _mm256_setzero_si256();
        for (int n = 0; n < 2; n++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * n));
            for (int j = 0; j < 4; j++) {
                __m256i u = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
                __m256i p = _mm256_maddubs_epi16(u, _mm256_loadu_si256((const __m256i *)(x[b].qs + 128 * n + 32 * j)));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, pair_scales(sc8, 4 * n + j, 0)));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(w[b].d) * x[b].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc) - hsum_ps(accm);
}

float pagoda_cpu_dot_q3_k_avx2(const void *wv, const pagoda_q8k_block *x, int64_t nb)
{
    const pagoda_block_q3_K *w = wv;
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        prefetch_block(&w[b], sizeof w[b]);
        uint32_t u[4];
        pagoda_k3_unpack_scales(w[b].scales, u);
        __m128i sc8 = _mm_sub_epi8(_mm_setr_epi32((int)u[0], (int)u[1], (int)u[2], (int)u[3]),
                                   _mm_set1_epi8(32));
        __m256i off = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x[b].bsums),
                                        _mm256_cvtepi8_epi16(sc8));
        __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 2));
        __m256i hm = _mm256_loadu_si256((const __m256i *)w[b].hmask);
        for (int n = 0; n < 2; n++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * n));
            for (int j = 0; j < 4; j++) {
                __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
                __m256i hi = _mm256_slli_epi16(_mm256_and_si256(hm, one), 2);
                hm = _mm256_srli_epi16(hm, 1);
                __m256i p = _mm256_maddubs_epi16(_mm256_or_si256(lo, hi),
                                                 _mm256_loadu_si256((const __m256i *)(x[b].qs + 128 * n + 32 * j)));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, pair_scales(sc8, 4 * n + j, 1)));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(w[b].d) * x[b].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

/* IQ4_XS: a sub-block's 16 bytes unpack (as Q4_0's) to 32 indices in
 * element order, one pshufb looks them up in the table; the signed
 * products as |w| x sign(x, w) (pair sums <= 2 x 127 x 127 < 2^15). */
float pagoda_cpu_dot_iq4_xs_avx2(const void *wv, const pagoda_q8k_block *x, int64_t nb)
{
    const pagoda_block_iq4_xs *w = wv;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pagoda_iq4nl_table));
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        prefetch_block(&w[b], sizeof w[b]);
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            int ls = pagoda_iq4_xs_scale(&w[b], ib);
            __m128i t = _mm_loadu_si128((const __m128i *)(w[b].qs + 16 * ib));
            __m256i idx = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), m4);
            __m256i v = _mm256_shuffle_epi8(table, idx);
            __m256i y = _mm256_loadu_si256((const __m256i *)(x[b].qs + 32 * ib));
            __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(y, v));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, _mm256_set1_epi16((short)ls)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(w[b].d) * x[b].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

#endif
