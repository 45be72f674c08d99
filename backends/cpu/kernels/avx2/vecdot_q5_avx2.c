/*
 * vecdot_q5_avx2.c: the AVX2 per-row dots and the dequantization of the
 * 32-value block types Q5_0, Q5_1 and IQ4_NL (vecdot.h dot_q5_0 / dot_q5_1
 * / dot_iq4_nl, dequant), their row x token tiles on Q4_0's groups (with
 * Q4_1's, gemm_q4_1, which shares them); their tokens-in-lanes kernels are in
 * vecdot_x8_avx2.c. Compiled with AVX2 + FMA + F16C by file name; called
 * only after CPUID says so. Not for: the other types (vecdot_avx2.c).
 *
 * A block's values are first made 32 bytes in element order (vecdot_avx2.h:
 * q5_values, 0..31 with the fifth bit spread from qh; iq4nl_values, int8
 * from a pshufb table lookup), then multiplied with the int8 activations
 * as the other types are: Q5 unsigned with maddubs, the -16 of Q5_0 taken
 * off once per block from the activations' sum (s, as Q4_0's -8), the m of
 * Q5_1 added through s (as Q4_1); IQ4_NL signed x signed with the sign
 * trick (maddubs(|w|, sign(x, w))).
 */
#include "vecdot.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include <string.h>

#include "quant.h"
#include "vecdot_avx2.h"

/* Software prefetch distance on a weight row stream, as vecdot_avx2.c's
 * Q8_0 / Q4_0 dots (measured there). */
#define PREFETCH_AHEAD 4096

/* Unsigned a (0..31) times signed b, 8 int32 sums. */
static inline __m256i dot_u8i8(__m256i a, __m256i b)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
}

/* Signed a (-127..127) times signed b: maddubs(|a|, b with a's sign). */
static inline __m256i dot_i8(__m256i a, __m256i b)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a)),
                             _mm256_set1_epi16(1));
}

static inline __m256i load_x(const pagoda_q8a_block *x)
{
    return _mm256_loadu_si256((const __m256i *)x->qs);
}

/* (q - 16) . y = q . y - 16 sum(y); d_y sum(y) is the activation block's s. */
float pagoda_cpu_dot_q5_0_avx2(const void *wv, const pagoda_q8a_block *x, int64_t nb)
{
    const pagoda_block_q5_0 *w = wv;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    float corr = 0.0f;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        _mm_prefetch((const char *)&w[b] + PREFETCH_AHEAD, _MM_HINT_T0);
        float d0 = f16(w[b].d), d1 = f16(w[b + 1].d);
        __m256i p0 = dot_u8i8(q5_values(w[b].qs, w[b].qh), load_x(&x[b]));
        __m256i p1 = dot_u8i8(q5_values(w[b + 1].qs, w[b + 1].qh), load_x(&x[b + 1]));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0 * x[b].d), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1 * x[b + 1].d), _mm256_cvtepi32_ps(p1), acc1);
        corr += d0 * x[b].s + d1 * x[b + 1].s;
    }
    for (; b < nb; b++) {
        float d0 = f16(w[b].d);
        __m256i p = dot_u8i8(q5_values(w[b].qs, w[b].qh), load_x(&x[b]));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0 * x[b].d), _mm256_cvtepi32_ps(p), acc0);
        corr += d0 * x[b].s;
    }
    return hsum_ps(_mm256_add_ps(acc0, acc1)) - 16.0f * corr;
}

float pagoda_cpu_dot_q5_1_avx2(const void *wv, const pagoda_q8a_block *x, int64_t nb)
{
    const pagoda_block_q5_1 *w = wv;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    float summ = 0.0f;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        _mm_prefetch((const char *)&w[b] + PREFETCH_AHEAD, _MM_HINT_T0);
        __m256i p0 = dot_u8i8(q5_values(w[b].qs, w[b].qh), load_x(&x[b]));
        __m256i p1 = dot_u8i8(q5_values(w[b + 1].qs, w[b + 1].qh), load_x(&x[b + 1]));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(w[b].d) * x[b].d), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(f16(w[b + 1].d) * x[b + 1].d), _mm256_cvtepi32_ps(p1), acc1);
        summ += f16(w[b].m) * x[b].s + f16(w[b + 1].m) * x[b + 1].s;
    }
    for (; b < nb; b++) {
        __m256i p = dot_u8i8(q5_values(w[b].qs, w[b].qh), load_x(&x[b]));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(w[b].d) * x[b].d), _mm256_cvtepi32_ps(p), acc0);
        summ += f16(w[b].m) * x[b].s;
    }
    return hsum_ps(_mm256_add_ps(acc0, acc1)) + summ;
}

float pagoda_cpu_dot_iq4_nl_avx2(const void *wv, const pagoda_q8a_block *x, int64_t nb)
{
    const pagoda_block_iq4_nl *w = wv;
    const __m256i tab = iq4nl_table256();
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        _mm_prefetch((const char *)&w[b] + PREFETCH_AHEAD, _MM_HINT_T0);
        __m256i p0 = dot_i8(iq4nl_values(w[b].qs, tab), load_x(&x[b]));
        __m256i p1 = dot_i8(iq4nl_values(w[b + 1].qs, tab), load_x(&x[b + 1]));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(w[b].d) * x[b].d), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(f16(w[b + 1].d) * x[b + 1].d), _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; b < nb; b++) {
        __m256i p = dot_i8(iq4nl_values(w[b].qs, tab), load_x(&x[b]));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(w[b].d) * x[b].d), _mm256_cvtepi32_ps(p), acc0);
    }
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

/* ------------------------------------------------------------ groups
 * Rows x a few tokens (T < the x8 kernels' minimum: decode), on the
 * activations prep_q4_0 arranged (vecdot.h pagoda_q4x_group: two blocks'
 * halves side by side): a weight row's pair of blocks becomes two
 * registers, [block 2p values 0..15 | block 2p+1 values 0..15] and the
 * same of 16..31, so one maddubs per half, one madd, convert and FMA (with
 * [d0 x4 | d1 x4]) serve two blocks, and four blocks' f16 scales convert
 * in one instruction. Q5_0's -16 and Q5_1's m go through the groups' s
 * (d_x sum(x)) once per four blocks. */

/* The f16 at byte `off` of four blocks `bs` bytes apart, as floats in both
 * 128-bit lanes (packed on the integer ALUs, as vecdot_avx2.c's Q4_0). */
static inline __m256 f16x4(const uint8_t *w, size_t bs, int off)
{
    uint16_t h[4];
    for (int i = 0; i < 4; i++) memcpy(&h[i], w + i * bs + off, 2);
    uint64_t pk = (uint64_t)h[0] | (uint64_t)h[1] << 16 | (uint64_t)h[2] << 32 | (uint64_t)h[3] << 48;
    return _mm256_cvtph_ps(_mm_set1_epi64x((long long)pk));
}

/* The 5-bit values of blocks b0 and b0 + 1 (bs bytes apart; qs at qso, qh
 * at qho) in the groups' order: *lo = [b0 0..15 | b1 0..15], *hi = the
 * same of 16..31. */
static inline void q5_pair(const uint8_t *b0, size_t bs, int qho, int qso, __m256i *lo, __m256i *hi)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i pick_lo = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                             0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m256i pick_hi = _mm256_setr_epi8(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
                                             2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    int32_t h0, h1;
    memcpy(&h0, b0 + qho, 4);
    memcpy(&h1, b0 + bs + qho, 4);
    /* Each lane holds its own block's qh. */
    __m256i h = _mm256_blend_epi32(_mm256_set1_epi32(h0), _mm256_set1_epi32(h1), 0xF0);
    __m256i v = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(b0 + bs + qso)),
                                 _mm_loadu_si128((const __m128i *)(b0 + qso)));
    __m256i hl = _mm256_and_si256(_mm256_shuffle_epi8(h, pick_lo), bit);
    __m256i hh = _mm256_and_si256(_mm256_shuffle_epi8(h, pick_hi), bit);
    *lo = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_and_si256(_mm256_cmpeq_epi8(hl, bit), m10));
    *hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                          _mm256_and_si256(_mm256_cmpeq_epi8(hh, bit), m10));
}

/* The group tiles' three kinds of block: Q5_0 (values - 16), Q5_1 and
 * Q4_1 (d, m: values d q + m, the m through the groups' s). Q4_1 is Q5_1
 * without qh: its nibbles are the values. */
enum { GK_Q5_0, GK_Q5_1, GK_Q4_1 };
#define GK_BS(k) ((k) == GK_Q5_0 ? sizeof(pagoda_block_q5_0) : (k) == GK_Q5_1 ? sizeof(pagoda_block_q5_1) : sizeof(pagoda_blk_q4_1))
#define GK_QHO(k) ((k) == GK_Q5_0 ? 2 : 4)                 /* qh (Q5) */
#define GK_QSO(k) ((k) == GK_Q4_1 ? 4 : GK_QHO(k) + 4)     /* qs */
#define GK_MIN(k) ((k) != GK_Q5_0)                         /* has m at byte 2 */

/* Blocks [b0, nb) of a row against one token's groups, one at a time
 * (the end of a row whose block count is not a multiple of 4). */
static float q5x_tail(const uint8_t *w, int kind, const pagoda_q4x_group *x, int64_t b0, int64_t nb)
{
    const size_t bs = GK_BS(kind);
    float s = 0.0f;
    for (int64_t b = b0; b < nb; b++) {
        const uint8_t *wb = w + b * bs, *qs = wb + GK_QSO(kind);
        const pagoda_q4x_group *gx = &x[b / 4];
        int p = (int)(b % 4) / 2, h = (int)(b % 2);
        uint32_t qh = 0;
        if (kind != GK_Q4_1) memcpy(&qh, wb + GK_QHO(kind), 4);
        int sum = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = (qs[j] & 0x0F) | (int)((qh >> j) & 1) << 4;
            int q1 = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            sum += (q0 - (GK_MIN(kind) ? 0 : 16)) * gx->qs[2 * p][16 * h + j];
            sum += (q1 - (GK_MIN(kind) ? 0 : 16)) * gx->qs[2 * p + 1][16 * h + j];
        }
        uint16_t d, m;
        memcpy(&d, wb, 2);
        s += (float)sum * f16(d) * gx->dx[p][4 * h];
        if (GK_MIN(kind)) {
            memcpy(&m, wb + 2, 2);
            s += f16(m) * gx->s[b % 4];
        }
    }
    return s;
}

/* One row x TB tokens: a pair of blocks unpacked once for TB tokens. */
FORCE_INLINE void tile_q5x(const uint8_t *w, int kind, const uint8_t *x, size_t xs, int TB, int64_t nb,
                           float *out, size_t os)
{
    const size_t bs = GK_BS(kind);
    const int qho = GK_QHO(kind), qso = GK_QSO(kind);
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0F);
    const __m256i idx_a = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256i idx_b = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    __m256 acc[4];
    __m128 off[4];  /* Q5_0: sum d_w s (times -16 at the end); Q5_1, Q4_1: sum m_w s */
    for (int t = 0; t < TB; t++) {
        acc[t] = _mm256_setzero_ps();
        off[t] = _mm_setzero_ps();
    }
    int64_t ng = nb / 4;
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *wb = w + 4 * g * bs;
        _mm_prefetch((const char *)wb + PREFETCH_AHEAD, _MM_HINT_T0);
        _mm_prefetch((const char *)wb + PREFETCH_AHEAD + 64, _MM_HINT_T0);
        __m256 dw = f16x4(wb, bs, 0);
        __m128 mo = GK_MIN(kind) ? _mm256_castps256_ps128(f16x4(wb, bs, 2)) : _mm256_castps256_ps128(dw);
        for (int t = 0; t < TB; t++) {
            const pagoda_q4x_group *gx = (const pagoda_q4x_group *)(x + t * xs) + g;
            off[t] = _mm_fmadd_ps(mo, _mm_loadu_ps(gx->s), off[t]);
        }
        for (int p = 0; p < 2; p++) {
            __m256 dwp = _mm256_permutevar_ps(dw, p ? idx_b : idx_a);
            __m256i lo, hi;
            if (kind == GK_Q4_1) {
                const uint8_t *b0 = wb + 2 * p * bs;
                __m256i v = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(b0 + bs + qso)),
                                             _mm_loadu_si128((const __m128i *)(b0 + qso)));
                lo = _mm256_and_si256(v, m4);
                hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            } else {
                q5_pair(wb + 2 * p * bs, bs, qho, qso, &lo, &hi);
            }
            for (int t = 0; t < TB; t++) {
                const pagoda_q4x_group *gx = (const pagoda_q4x_group *)(x + t * xs) + g;
                __m256i s16 = _mm256_add_epi16(
                    _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)gx->qs[2 * p])),
                    _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)gx->qs[2 * p + 1])));
                __m256 sc = _mm256_mul_ps(dwp, _mm256_loadu_ps(gx->dx[p]));
                acc[t] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(_mm256_madd_epi16(s16, ones)), acc[t]);
            }
        }
    }
    for (int t = 0; t < TB; t++) {
        float *o = (float *)((uint8_t *)out + t * os);
        __m128 v = off[t];
        v = _mm_add_ps(v, _mm_movehl_ps(v, v));
        float sv = _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
        o[0] = hsum_ps(acc[t]) + (GK_MIN(kind) ? sv : -16.0f * sv);
        if (nb % 4) o[0] += q5x_tail(w, kind, (const pagoda_q4x_group *)(x + t * xs), 4 * ng, nb);
    }
}

/* Rows one at a time (one sequential weight stream: see vecdot_avx2.c's
 * GEMM_TILES), tokens up to 4 at a time. */
FORCE_INLINE void gemm_q5x(const void *wv, size_t ws, int64_t nr, const void *xv, size_t xs, int64_t T,
                           int64_t nb, float *out, size_t os, int kind)
{
    const uint8_t *w = wv, *x = xv;
    for (int64_t t = 0; t < T;) {
        int tb = T - t >= 4 ? 4 : (int)(T - t);
        const uint8_t *xt = x + t * xs;
        float *ot = (float *)((uint8_t *)out + t * os);
        for (int64_t r = 0; r < nr; r++) {
            switch (tb) {
            case 4: tile_q5x(w + r * ws, kind, xt, xs, 4, nb, ot + r, os); break;
            case 3: tile_q5x(w + r * ws, kind, xt, xs, 3, nb, ot + r, os); break;
            case 2: tile_q5x(w + r * ws, kind, xt, xs, 2, nb, ot + r, os); break;
            default: tile_q5x(w + r * ws, kind, xt, xs, 1, nb, ot + r, os); break;
            }
        }
        t += tb;
    }
}

void pagoda_cpu_gemm_q5_0_avx2(const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t T,
                               int64_t nb, float *out, size_t os)
{
    gemm_q5x(w, ws, nr, x, xs, T, nb, out, os, GK_Q5_0);
}

void pagoda_cpu_gemm_q5_1_avx2(const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t T,
                               int64_t nb, float *out, size_t os)
{
    gemm_q5x(w, ws, nr, x, xs, T, nb, out, os, GK_Q5_1);
}

/* Q4_1 decode (T below its sgemm crossover): the same tiles, 63 GFLOP/s
 * one core at T = 1 where its per-row dot ran 33-37 (bench_cpu_lanes,
 * 2048 x 2048, Sapphire-Rapids-class host; T = 4: 117 against 35), as
 * they share a row's unpacking between up to four tokens and convert four
 * blocks' scales at once. An AVX-512 VNNI Q4_1 dot (four blocks an
 * iteration, two a zmm) reached 47-52 there: these tiles serve every
 * level. */
void pagoda_cpu_gemm_q4_1_avx2(const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t T,
                               int64_t nb, float *out, size_t os)
{
    gemm_q5x(w, ws, nr, x, xs, T, nb, out, os, GK_Q4_1);
}

/* IQ4_NL rows on the groups: a pair of blocks' nibbles unpacked and
 * looked up once ([b0 0..15 | b1 0..15] and 16..31, int8) with their
 * magnitudes for the sign trick; per token two sign + two maddubs, and
 * two madd (two signed pair sums of up to 127 x 127 would overflow int16
 * in one), one convert and one FMA for two blocks. */
static float iq4x_tail(const pagoda_block_iq4_nl *w, const pagoda_q4x_group *x, int64_t b0, int64_t nb)
{
    float s = 0.0f;
    for (int64_t b = b0; b < nb; b++) {
        const pagoda_q4x_group *gx = &x[b / 4];
        int p = (int)(b % 4) / 2, h = (int)(b % 2);
        int sum = 0;
        for (int j = 0; j < 16; j++) {
            sum += pagoda_iq4nl_table[w[b].qs[j] & 0x0F] * gx->qs[2 * p][16 * h + j];
            sum += pagoda_iq4nl_table[w[b].qs[j] >> 4] * gx->qs[2 * p + 1][16 * h + j];
        }
        s += (float)sum * f16(w[b].d) * gx->dx[p][4 * h];
    }
    return s;
}

FORCE_INLINE void tile_iq4x(const pagoda_block_iq4_nl *w, const uint8_t *x, size_t xs, int TB, int64_t nb,
                            float *out, size_t os)
{
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0F), tab = iq4nl_table256();
    const __m256i idx_a = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256i idx_b = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    __m256 acc[4];
    for (int t = 0; t < TB; t++) acc[t] = _mm256_setzero_ps();
    int64_t ng = nb / 4;
    for (int64_t g = 0; g < ng; g++) {
        const pagoda_block_iq4_nl *wb = w + 4 * g;
        _mm_prefetch((const char *)wb + PREFETCH_AHEAD, _MM_HINT_T0);
        _mm_prefetch((const char *)wb + PREFETCH_AHEAD + 64, _MM_HINT_T0);
        __m256 dw = f16x4((const uint8_t *)wb, sizeof *wb, 0);
        for (int p = 0; p < 2; p++) {
            __m256 dwp = _mm256_permutevar_ps(dw, p ? idx_b : idx_a);
            __m256i v = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)wb[2 * p + 1].qs),
                                         _mm_loadu_si128((const __m128i *)wb[2 * p].qs));
            __m256i lo = _mm256_shuffle_epi8(tab, _mm256_and_si256(v, m4));
            __m256i hi = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
            __m256i alo = _mm256_sign_epi8(lo, lo), ahi = _mm256_sign_epi8(hi, hi);
            for (int t = 0; t < TB; t++) {
                const pagoda_q4x_group *gx = (const pagoda_q4x_group *)(x + t * xs) + g;
                __m256i plo = _mm256_maddubs_epi16(
                    alo, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)gx->qs[2 * p]), lo));
                __m256i phi = _mm256_maddubs_epi16(
                    ahi, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)gx->qs[2 * p + 1]), hi));
                __m256i i32 = _mm256_add_epi32(_mm256_madd_epi16(plo, ones), _mm256_madd_epi16(phi, ones));
                __m256 sc = _mm256_mul_ps(dwp, _mm256_loadu_ps(gx->dx[p]));
                acc[t] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(i32), acc[t]);
            }
        }
    }
    for (int t = 0; t < TB; t++) {
        float *o = (float *)((uint8_t *)out + t * os);
        o[0] = hsum_ps(acc[t]);
        if (nb % 4) o[0] += iq4x_tail(w, (const pagoda_q4x_group *)(x + t * xs), 4 * ng, nb);
    }
}

void pagoda_cpu_gemm_iq4_nl_avx2(const void *wv, size_t ws, int64_t nr, const void *xv, size_t xs, int64_t T,
                                 int64_t nb, float *out, size_t os)
{
    const uint8_t *w = wv, *x = xv;
    for (int64_t t = 0; t < T;) {
        int tb = T - t >= 4 ? 4 : (int)(T - t);
        const uint8_t *xt = x + t * xs;
        float *ot = (float *)((uint8_t *)out + t * os);
        for (int64_t r = 0; r < nr; r++) {
            const pagoda_block_iq4_nl *wr = (const pagoda_block_iq4_nl *)(w + r * ws);
            switch (tb) {
            case 4: tile_iq4x(wr, xt, xs, 4, nb, ot + r, os); break;
            case 3: tile_iq4x(wr, xt, xs, 3, nb, ot + r, os); break;
            case 2: tile_iq4x(wr, xt, xs, 2, nb, ot + r, os); break;
            default: tile_iq4x(wr, xt, xs, 1, nb, ot + r, os); break;
            }
        }
        t += tb;
    }
}

/* The same floats as pagoda_dequantize_row: q * d (Q5_1: then + m, a
 * separate rounding as the reference's, never one FMA). */
void pagoda_cpu_dequant_q5_avx2(int dtype, const void *wv, float *out, int64_t k)
{
    switch (dtype) {
    case PAGODA_DTYPE_Q5_0: {
        const pagoda_block_q5_0 *w = wv;
        for (int64_t b = 0; b < k / 32; b++)
            store_scaled_i8(out + b * 32, _mm256_sub_epi8(q5_values(w[b].qs, w[b].qh), _mm256_set1_epi8(16)),
                            _mm256_set1_ps(f16(w[b].d)));
        return;
    }
    case PAGODA_DTYPE_Q5_1: {
        const pagoda_block_q5_1 *w = wv;
        for (int64_t b = 0; b < k / 32; b++) {
            float *o = out + b * 32;
            store_scaled_i8(o, q5_values(w[b].qs, w[b].qh), _mm256_set1_ps(f16(w[b].d)));
            __m256 m = _mm256_set1_ps(f16(w[b].m));
            for (int j = 0; j < 32; j += 8) {
                __m256 v = _mm256_loadu_ps(o + j);
                /* Hide the product from the compiler, which would
                 * otherwise fuse it with the add (-ffp-contract). */
                __asm__("" : "+x"(v));
                _mm256_storeu_ps(o + j, _mm256_add_ps(v, m));
            }
        }
        return;
    }
    case PAGODA_DTYPE_IQ4_NL: {
        const pagoda_block_iq4_nl *w = wv;
        const __m256i tab = iq4nl_table256();
        for (int64_t b = 0; b < k / 32; b++)
            store_scaled_i8(out + b * 32, iq4nl_values(w[b].qs, tab), _mm256_set1_ps(f16(w[b].d)));
        return;
    }
    default:
        pagoda_dequantize_row(dtype, wv, out, k);
        return;
    }
}

#endif
