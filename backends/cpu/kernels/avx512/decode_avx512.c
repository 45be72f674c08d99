/*
 * decode_avx512.c: the AVX-512 per-row dots of decode (vecdot.h dot_q4_k,
 * dot_q5_k, dot_q6_k: one weight row against one token's q8k activations;
 * matmul.c calls one per row and token below the tokens-in-lanes
 * threshold, T < 4). Decode reads every weight once a token, so these
 * must unpack a block faster than memory delivers it: per 64 values one
 * 512-bit maddubs (u8 weights x s8 activations, pair sums far below 2^15
 * at these widths) and one vpdpwssd against the sub-block scales as int16
 * (a permute of the block's scales), where AVX2 spends two maddubs, two
 * madd, two scale shuffles and two adds on the same values; int32 sums
 * over the super-block, then one convert and one FMA with d x d_x. The
 * min / offset terms come from the activations' per-16 sums (q8k bsums):
 * Q4_K / Q5_K's mins in one madd and FMA, Q6_K's -32 in int32 before the
 * convert. Same integer sums as the scalar reference, so the results
 * differ from it only in float order.
 * Compiled with -mavx512f/bw/vl/dq/vnni by file name (and a second time
 * against SIMDe on AVX2, PAGODA_SIMDE, for the tests); called only after
 * the CPUID + XCR0 check. Not for: batches (lanes_vnni.h, kernels/repack).
 */
#include "vecdot.h"

#if (defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)) || \
    (defined(PAGODA_SIMDE) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
#define PAGODA_VNNI_W 512
#include "vnni.h"
#include "vecdot_k.h"

/* As the AVX2 dots (vecdot_k_avx2.c): 4 KiB ahead on the weight stream,
 * every cache line of the block. */
#define PREFETCH_AHEAD 4096

static inline void prefetch_block(const void *blk, size_t bytes)
{
    for (size_t off = 0; off < bytes; off += 64)
        _mm_prefetch((const char *)blk + PREFETCH_AHEAD + off, _MM_HINT_T0);
}

static inline float hsum512(__m512 v)
{
    return hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

/* Q4_K / Q5_K, per super-block: the 128 qs bytes are two registers; the
 * low nibbles of the first are sub-blocks (of 32) 0 | 2, its high ones
 * 1 | 3, the second's 4 | 6 and 5 | 7, each against the activations of
 * the same two sub-blocks (two 256-bit loads). vpdpbusd gives int32 sums
 * of four products (|sum| <= 4 x 31 x 128, so it packs to int16 exactly);
 * packing the low and high registers' sums puts, in 128-bit lane i, four
 * sums of sub-block 2(i / 2) (+ 4 for the second register) beside four of
 * the next sub-block, and one vpdpwssd against the scales so arranged
 * (lane 8i + j: sub-block 4h + 2(i / 2) + j / 4) applies them: two
 * multiplies per 64 values less than maddubs + madd per register. */
static const uint16_t k45_idx[2][32] __attribute__((aligned(64))) = {
#define R(b) {b, b, b, b, b + 1, b + 1, b + 1, b + 1, b, b, b, b, b + 1, b + 1, b + 1, b + 1,       \
              b + 2, b + 2, b + 2, b + 2, b + 3, b + 3, b + 3, b + 3, b + 2, b + 2, b + 2, b + 2, b + 3, b + 3, b + 3, b + 3}
    R(0), R(4),
#undef R
};
/* The mins (int16 lanes 8..15 of the unpacked scales), each twice: mins[j]
 * against bsums[2j] and bsums[2j + 1] (the two sums of 16 of sub-block j). */
static const uint16_t k45_min_idx[16] __attribute__((aligned(32))) = {8, 8, 9, 9, 10, 10, 11, 11,
                                                                      12, 12, 13, 13, 14, 14, 15, 15};

/* Activations of sub-blocks s and s + 2 (of 32) as one register. */
static inline __m512i x_pair(const int8_t *qs, int s)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(qs + 32 * s))),
                              _mm256_loadu_si256((const __m256i *)(qs + 32 * s + 64)), 1);
}

/* One Q4_K (qh NULL) or Q5_K super-block (both open with d, dmin and the
 * 12 scale bytes: 16 bytes, one load): acc += d d_x sum_j sc_j (q . x)_j
 * in lanes 0..7 and -dmin d_x sum_j m_j sum(x in j) in lanes 8..15. The
 * scales unpack as pagoda_k4_unpack_scales's four words, in one register
 * (the scalar unpack and its inserts cost as much as the block's
 * multiplies). */
FORCE_INLINE void q45_block(const uint8_t *blk, const uint8_t *qs, const uint8_t *qh, const pagoda_q8k_block *x,
                            const __m512i idx[2], __m256i min_idx, __m512i f_idx, __m512 *acc)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), bit4 = _mm512_set1_epi8(0x10);
    __m128i hdr = _mm_loadu_si128((const __m128i *)blk);                     /* d dmin | u0 | u1 | u2 */
    __m128i a = _mm_srlv_epi32(_mm_shuffle_epi32(hdr, _MM_SHUFFLE(3, 2, 3, 1)), _mm_setr_epi32(0, 0, 0, 4));
    __m128i b = _mm_srli_epi32(_mm_shuffle_epi32(hdr, _MM_SHUFFLE(2, 2, 1, 1)), 2); /* u0 u0 u1 u1, >> 2 */
    __m128i raw = _mm_or_si128(_mm_and_si128(a, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f)),
                               _mm_and_si128(b, _mm_setr_epi32(0, 0x30303030, 0, 0x30303030)));
    /* int16 lanes 0..7: the scales, 8..15: the mins */
    __m256i sm = _mm256_cvtepu8_epi16(raw);
    __m256i pm = _mm256_madd_epi16(_mm256_permutexvar_epi16(min_idx, sm),
                                   _mm256_loadu_si256((const __m256i *)x->bsums));
    __m512i sc = _mm512_castsi256_si512(sm); /* the permutes read lanes 0..7 only */
    __m512i v0 = _mm512_loadu_si512((const void *)qs), v1 = _mm512_loadu_si512((const void *)(qs + 64));
    __m512i lo0 = _mm512_and_si512(v0, m4), hi0 = _mm512_and_si512(_mm512_srli_epi16(v0, 4), m4);
    __m512i lo1 = _mm512_and_si512(v1, m4), hi1 = _mm512_and_si512(_mm512_srli_epi16(v1, 4), m4);
    if (qh) {
        /* bit k of qh byte l: value l of sub-block k's 5th bit; hz: qh | qh >> 2, so lo0's
         * bytes find their bit (sub-blocks 0 | 2) at 0, hi0's (1 | 3) at 1, lo1's at 4, hi1's at 5 */
        __m256i h = _mm256_loadu_si256((const __m256i *)qh);
        __m512i hz = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 2), 1);
        /* 0xF8: a | (b & c) */
        lo0 = _mm512_ternarylogic_epi32(lo0, _mm512_slli_epi16(hz, 4), bit4, 0xF8);
        hi0 = _mm512_ternarylogic_epi32(hi0, _mm512_slli_epi16(hz, 3), bit4, 0xF8);
        lo1 = _mm512_ternarylogic_epi32(lo1, hz, bit4, 0xF8);
        hi1 = _mm512_ternarylogic_epi32(hi1, _mm512_srli_epi16(hz, 1), bit4, 0xF8);
    }
    const __m512i z = _mm512_setzero_si512();
    __m512i a0 = _mm512_dpbusd_epi32(z, lo0, x_pair(x->qs, 0)), b0 = _mm512_dpbusd_epi32(z, hi0, x_pair(x->qs, 1));
    __m512i a1 = _mm512_dpbusd_epi32(z, lo1, x_pair(x->qs, 4)), b1 = _mm512_dpbusd_epi32(z, hi1, x_pair(x->qs, 5));
    __m512i sumi = _mm512_dpwssd_epi32(z, _mm512_packs_epi32(a0, b0), _mm512_permutexvar_epi16(idx[0], sc));
    sumi = _mm512_dpwssd_epi32(sumi, _mm512_packs_epi32(a1, b1), _mm512_permutexvar_epi16(idx[1], sc));
    __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(sumi), _mm512_extracti64x4_epi64(sumi, 1));
    __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(s8), _mm256_sub_epi32(_mm256_setzero_si256(), pm), 1);
    /* d, dmin as floats (lanes 0, 1), to lanes 0..7 / 8..15, times d_x */
    __m512 f = _mm512_permutexvar_ps(f_idx, _mm512_castps128_ps512(_mm_cvtph_ps(hdr)));
    *acc = vf_fma(vf_cvt(both), vf_mul(f, vf_set1(x->d)), *acc);
}

static float dot_q4_k_avx512(const void *wv, const pagoda_q8k_block *x, int64_t nb)
{
    const pagoda_block_q4_K *w = wv;
    const __m512i idx[2] = {_mm512_load_si512((const void *)k45_idx[0]), _mm512_load_si512((const void *)k45_idx[1])};
    const __m256i min_idx = _mm256_load_si256((const __m256i *)k45_min_idx);
    const __m512i f_idx = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi32(1), 1);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        prefetch_block(&w[b], sizeof w[b]);
        q45_block((const uint8_t *)&w[b], w[b].qs, NULL, &x[b], idx, min_idx, f_idx, &acc);
    }
    return hsum512(acc);
}

static float dot_q5_k_avx512(const void *wv, const pagoda_q8k_block *x, int64_t nb)
{
    const pagoda_block_q5_K *w = wv;
    const __m512i idx[2] = {_mm512_load_si512((const void *)k45_idx[0]), _mm512_load_si512((const void *)k45_idx[1])};
    const __m256i min_idx = _mm256_load_si256((const __m256i *)k45_min_idx);
    const __m512i f_idx = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi32(1), 1);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        prefetch_block(&w[b], sizeof w[b]);
        q45_block((const uint8_t *)&w[b], w[b].qs, w[b].qh, &x[b], idx, min_idx, f_idx, &acc);
    }
    return hsum512(acc);
}

/* Q6_K: half j (128 values) is ql[64j..64j+63] and qh[32j..32j+31]; the
 * low nibbles of the 64 ql bytes with qh bits 0-1 (bytes 0..31) and 2-3
 * (32..63) are values 128j + 0..63 in order, the high nibbles with bits
 * 4-5 and 6-7 values 128j + 64..127. int16 lane k of register h (0: low,
 * 1: high) of half j belongs to sub-block (of 16) 8j + 4h + k / 8. */
static const uint16_t q6_idx[4][32] __attribute__((aligned(64))) = {
#define R(b) {b, b, b, b, b, b, b, b, b + 1, b + 1, b + 1, b + 1, b + 1, b + 1, b + 1, b + 1,      \
              b + 2, b + 2, b + 2, b + 2, b + 2, b + 2, b + 2, b + 2, b + 3, b + 3, b + 3, b + 3, b + 3, b + 3, b + 3, b + 3}
    R(0), R(4), R(8), R(12),
#undef R
};

static float dot_q6_k_avx512(const void *wv, const pagoda_q8k_block *x, int64_t nb)
{
    const pagoda_blk_q6_k *w = wv;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m6 = _mm512_set1_epi8(0x3F);
    __m512i idx[4];
    for (int i = 0; i < 4; i++) idx[i] = _mm512_load_si512((const void *)q6_idx[i]);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        prefetch_block(&w[b], sizeof w[b]);
        __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w[b].scales));
        /* (v - 32) . y = v . y - 32 y: the 32 y of every sub-block through its bsums, in int32 */
        __m256i off = _mm256_madd_epi16(sc, _mm256_loadu_si256((const __m256i *)x[b].bsums));
        __m512i sumi = _mm512_inserti64x4(_mm512_setzero_si512(),
                                          _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 5)), 0);
        __m512i scz = _mm512_castsi256_si512(sc); /* the permutes read lanes 0..15 only */
        UNROLL(2) for (int j = 0; j < 2; j++) {
            __m512i ql = _mm512_loadu_si512((const void *)(w[b].ql + 64 * j));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(w[b].qh + 32 * j));
            __m512i qhz = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
            /* 0xE4: c ? a : b, bit by bit (low 4 bits from ql, the next two from qh), then 6 bits kept */
            __m512i lo = _mm512_and_si512(_mm512_ternarylogic_epi32(ql, _mm512_slli_epi16(qhz, 4), m4, 0xE4), m6);
            __m512i hi = _mm512_and_si512(_mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), qhz, m4, 0xE4), m6);
            __m512i p0 = _mm512_maddubs_epi16(lo, _mm512_loadu_si512((const void *)(x[b].qs + 128 * j)));
            __m512i p1 = _mm512_maddubs_epi16(hi, _mm512_loadu_si512((const void *)(x[b].qs + 128 * j + 64)));
            sumi = _mm512_dpwssd_epi32(sumi, p0, _mm512_permutexvar_epi16(idx[2 * j], scz));
            sumi = _mm512_dpwssd_epi32(sumi, p1, _mm512_permutexvar_epi16(idx[2 * j + 1], scz));
        }
        acc = vf_fma(vf_cvt(sumi), vf_set1(f16(w[b].d) * x[b].d), acc);
    }
    return hsum512(acc);
}

void PAGODA_VNNI_FN(pagoda_cpu_fill_avx512_decode)(pagoda_vecdot_table *t)
{
    t->dot_q4_k = dot_q4_k_avx512;
    t->dot_q5_k = dot_q5_k_avx512;
    t->dot_q6_k = dot_q6_k_avx512;
}
#else
/* A compiler without the flags: the AVX2 dots run at this level. */
void pagoda_cpu_fill_avx512_decode(pagoda_vecdot_table *t) { (void)t; }
#endif
