/*
 * vecdot_mxfp4_avx512.c: the AVX-512 VNNI MXFP4 kernels (vecdot.h
 * dot_mxfp4, gemm_mxfp4_x8): vpdpbusd (u8 x s8, four products added into
 * each int32 lane in one instruction) where AVX2 needs maddubs + madd +
 * add, and 512-bit registers that hold two weight blocks (the dot) or two
 * groups of eight tokens (the lanes kernel).
 * Compiled with AVX-512 flags by file name (backends/cpu/CMakeLists.txt
 * narrows them to F/BW/VL/VNNI; and a second time against SIMDe on AVX2,
 * PAGODA_SIMDE, for the tests); entries of the AVX-512 level's table
 * (lanes_avx512.c), called only after its CPUID + XCR0 check. Not for: the reference
 * (kernels/scalar/vecdot_mxfp4.c).
 */
#include "vecdot.h"

#if (defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)) || \
    (defined(PAGODA_SIMDE) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
#define PAGODA_VNNI_W 512
#include "vnni.h"

#include "quant.h"

#define MXFP4_BYTES 17
#define PREFETCH_AHEAD 4096

/* The 16-entry table plus `offset`, in all four 128-bit lanes (pshufb
 * looks up within each lane). */
static inline __m512i mx_table512(int offset)
{
    int8_t t[16];
    for (int i = 0; i < 16; i++) t[i] = (int8_t)(pagoda_mxfp4_table[i] + offset);
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)t));
}

/* Two blocks' codes as 64 bytes in element order: [b0 0..15 | b0 16..31 |
 * b1 0..15 | b1 16..31]. */
static inline __m512i codes2(const uint8_t *qs0, const uint8_t *qs1)
{
    __m128i a = _mm_loadu_si128((const __m128i *)qs0), b = _mm_loadu_si128((const __m128i *)qs1);
    __m256i lo = _mm256_set_m128i(_mm_srli_epi16(a, 4), a), hi = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
    __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    return _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
}

/* One block's codes as 32 bytes in element order. */
static inline __m256i codes1(const uint8_t *qs)
{
    __m128i a = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(a, 4), a), _mm256_set1_epi8(0x0F));
}

static inline float hsum512(__m512 v)
{
    return hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

/* Per row: two blocks per register. |value| (the table's magnitudes) is
 * the unsigned operand, x takes the value's sign (negated where the code's
 * sign bit is set; code 8 is 0, so its sign does not matter): exact
 * integer sums, as the scalar reference's. */
float PAGODA_VNNI_FN(pagoda_cpu_dot_mxfp4_avx512)(const void *wv, const pagoda_q8a_block *x, int64_t nb)
{
    const pagoda_block_mxfp4 *w = wv;
    const __m512i mag = _mm512_abs_epi8(mx_table512(0)), eight = _mm512_set1_epi8(8);
    const __m512i zero = _mm512_setzero_si512();
    __m512 acc = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        _mm_prefetch((const char *)&w[b] + PREFETCH_AHEAD, _MM_HINT_T0);
        __m512i c = codes2(w[b].qs, w[b + 1].qs);
        __m512i xv = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x[b].qs)),
                                        _mm256_loadu_si256((const __m256i *)x[b + 1].qs), 1);
        __mmask64 neg = _mm512_test_epi8_mask(c, eight);
        xv = _mm512_mask_sub_epi8(xv, neg, zero, xv);
        __m512i p = _mm512_dpbusd_epi32(zero, _mm512_shuffle_epi8(mag, c), xv);
        __m512 d = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(pagoda_e8m0_to_fp32_half(w[b].e) * x[b].d),
                                        _mm512_set1_ps(pagoda_e8m0_to_fp32_half(w[b + 1].e) * x[b + 1].d));
        acc = _mm512_fmadd_ps(d, vf_cvt(p), acc);
    }
    float s = hsum512(acc);
    if (b < nb) {
        const __m256i mag1 = _mm512_castsi512_si256(mag);
        __m256i c = codes1(w[b].qs);
        __m256i xv = _mm256_loadu_si256((const __m256i *)x[b].qs);
        const __m256i e8 = _mm256_set1_epi8(8);
        __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(c, e8), e8);
        xv = _mm256_blendv_epi8(xv, _mm256_sub_epi8(_mm256_setzero_si256(), xv), neg);
        __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_shuffle_epi8(mag1, c), xv);
        __m256 v = _mm256_mul_ps(_mm256_set1_ps(pagoda_e8m0_to_fp32_half(w[b].e) * x[b].d), _mm256_cvtepi32_ps(p));
        __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
        lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
        s += _mm_cvtss_f32(lo);
    }
    return s;
}

static inline int32_t load4(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Lanes [0, nt) of 8 floats to out[t][0]. */
static inline void store_lanes(const float *v, int nt, float *out, size_t os)
{
    for (int t = 0; t < nt; t++) *(float *)((uint8_t *)out + t * os) = v[t];
}

/* RB rows x 16 tokens (two groups of eight, x0 and x1, side by side in
 * one register: lanes 0-7 and 8-15). A row's block is made 32 bytes of
 * table + 12 (0..24, unsigned) once into an L1 buffer (the next block's
 * while this one is used), and four bytes at a time are broadcast against
 * the same four positions of the 16 tokens: one vpdpbusd per row and four
 * values, int32 sums over the block (<= 32 x 24 x 127), the +12 off as 12
 * sum(x) = 3 s8 / 2 (s8 = 8 sum(x), even). With x1 == NULL the upper
 * lanes read x0 again and are not stored. */
FORCE_INLINE void tile_mx_x16(const uint8_t *w, size_t ws, int RB, const pagoda_q8x8_block *x0,
                              const pagoda_q8x8_block *x1, int nt0, int nt1, int64_t nb, float *out,
                              size_t os)
{
    const __m256i tab = _mm512_castsi512_si256(mx_table512(12));
    uint8_t qq[2][8][32] __attribute__((aligned(32)));
    __m512 acc[8];
    if (!x1) x1 = x0;
    UNROLL(8) for (int r = 0; r < RB; r++) {
        acc[r] = _mm512_setzero_ps();
        _mm256_store_si256((__m256i *)qq[0][r], _mm256_shuffle_epi8(tab, codes1(w + r * ws + 1)));
    }
    for (int64_t b = 0; b < nb; b++) {
        uint8_t (*q)[32] = qq[b & 1];
        if (b + 1 < nb)
            UNROLL(8) for (int r = 0; r < RB; r++) {
                const uint8_t *wb = w + r * ws + (b + 1) * MXFP4_BYTES;
                _mm_prefetch((const char *)wb + RB * ws, _MM_HINT_T0);
                _mm256_store_si256((__m256i *)qq[(b + 1) & 1][r], _mm256_shuffle_epi8(tab, codes1(wb + 1)));
            }
        __m512i ia[8];
        UNROLL(8) for (int r = 0; r < RB; r++) ia[r] = _mm512_setzero_si512();
        UNROLL(8) for (int g = 0; g < 8; g++) {
            __m512i xv = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_load_si256((const __m256i *)x0[b].qs[g])),
                                            _mm256_load_si256((const __m256i *)x1[b].qs[g]), 1);
            UNROLL(8) for (int r = 0; r < RB; r++)
                ia[r] = _mm512_dpbusd_epi32(ia[r], _mm512_set1_epi32(load4(q[r] + 4 * g)), xv);
        }
        __m512i s8 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_load_si256((const __m256i *)x0[b].s8)),
                                        _mm256_load_si256((const __m256i *)x1[b].s8), 1);
        /* s8 >> 1, arithmetic, as logical | the sign bit (SIMDe 0.7.4 has no 512-bit srai_epi32); 0xF8: a | (b & c) */
        __m512i half = _mm512_ternarylogic_epi32(_mm512_srli_epi32(s8, 1), s8, _mm512_set1_epi32(INT32_MIN), 0xF8);
        __m512i c12 = _mm512_add_epi32(s8, half);
        __m512 dx = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm256_load_ps(x0[b].d))),
                                                        _mm256_castps_pd(_mm256_load_ps(x1[b].d)), 1));
        UNROLL(8) for (int r = 0; r < RB; r++) {
            __m512 dw = _mm512_set1_ps(pagoda_e8m0_to_fp32_half(w[r * ws + b * MXFP4_BYTES]));
            acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), vf_cvt(_mm512_sub_epi32(ia[r], c12)), acc[r]);
        }
    }
    UNROLL(8) for (int r = 0; r < RB; r++) {
        float tmp[16];
        _mm512_storeu_ps(tmp, acc[r]);
        store_lanes(tmp, nt0, out + r, os);
        if (nt1) store_lanes(tmp + 8, nt1, (float *)((uint8_t *)out + 8 * os) + r, os);
    }
}

/* Rows in tiles of 8, 4, then 1 x tokens sixteen at a time (the last
 * group of eight alone: its upper lanes are not stored). */
void PAGODA_VNNI_FN(pagoda_cpu_gemm_mxfp4_x8_avx512)(const void *wv, size_t ws, int64_t nr,
                                                    const pagoda_q8x8_block *x, int64_t T, int64_t nb,
                                                    float *out, size_t os)
{
    const uint8_t *w = wv;
    for (int64_t r = 0; r < nr;) {
        int rb = nr - r >= 8 ? 8 : nr - r >= 4 ? 4 : 1;
        for (int64_t t = 0; t < T; t += 16) {
            int nt0 = T - t < 8 ? (int)(T - t) : 8;
            int nt1 = T - t - 8 <= 0 ? 0 : T - t - 8 < 8 ? (int)(T - t - 8) : 8;
            const pagoda_q8x8_block *x0 = x + (t / 8) * nb, *x1 = nt1 ? x0 + nb : NULL;
            float *o = (float *)((uint8_t *)out + t * os) + r;
            const uint8_t *wr = w + r * ws;
            if (rb == 8)
                tile_mx_x16(wr, ws, 8, x0, x1, nt0, nt1, nb, o, os);
            else if (rb == 4)
                tile_mx_x16(wr, ws, 4, x0, x1, nt0, nt1, nb, o, os);
            else
                tile_mx_x16(wr, ws, 1, x0, x1, nt0, nt1, nb, o, os);
        }
        r += rb;
    }
}

#else
/* Built without the AVX-512 flags (another architecture): never picked
 * (the AVX-512 level never runs there); plain C of the same results. */
#include "quant.h"

float pagoda_cpu_dot_mxfp4_avx512(const void *w, const pagoda_q8a_block *x, int64_t nb)
{
    return pagoda_cpu_dot_mxfp4_scalar(w, x, nb);
}

void pagoda_cpu_gemm_mxfp4_x8_avx512(const void *wv, size_t ws, int64_t nr, const pagoda_q8x8_block *x,
                                     int64_t T, int64_t nb, float *out, size_t os)
{
    const uint8_t *w = wv;
    for (int64_t n = 0; n < nr; n++)
        for (int64_t t = 0; t < T; t++) {
            const pagoda_q8x8_block *xg = x + (t / 8) * nb;
            int l = (int)(t % 8);
            float s = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *blk = w + n * ws + b * 17;
                int sum = 0;
                for (int j = 0; j < 32; j++) {
                    int code = j < 16 ? blk[1 + j] & 0x0F : blk[1 + j - 16] >> 4;
                    sum += pagoda_mxfp4_table[code] * xg[b].qs[j / 4][4 * l + j % 4];
                }
                s += (float)sum * (pagoda_e8m0_to_fp32_half(blk[0]) * xg[b].d[l]);
            }
            ((float *)((uint8_t *)out + t * os))[n] = s;
        }
}
#endif
