/*
 * quant_k.c: scalar references for the 256-element super-block types
 * (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS) and the IQ4_NL codebook type,
 * reached through pagoda_quantize_row / pagoda_dequantize_row (quant.c).
 * Dequantization follows ggml's reference layouts and its order of float
 * operations exactly (tests/data/quant_vectors.json, written by the gguf
 * package, holds it to the bit). Quantization is pagoda's own
 * round-to-nearest with a small per-sub-block scale search, not llama.cpp's
 * error-minimizing search: good enough for random benchmark models and
 * tests, and the files it writes load anywhere since the layout is the
 * same (docs/gguf.md).
 * Not for: speed (backends/cpu has the SIMD kernels tested against these).
 */
#include "quant.h"

#include <math.h>
#include <string.h>

const int8_t pagoda_iq4nl_table[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                       1,    13,   25,  38,  53,  69,  89,  113};

/* ------------------------------------------------------------ dequantize */

/* Each function turns one block (already copied out of a possibly
 * unaligned row) into its values; the products are written in the order
 * ggml's reference writes them (scale * sub-scale first, then times the
 * quant, minus min * sub-min), so the floats match bit for bit. */

static void dq_iq4_nl(const pagoda_block_iq4_nl *b, float *y)
{
    const float d = pagoda_fp16_to_fp32(b->d);
    for (int j = 0; j < 16; j++) {
        y[j] = d * pagoda_iq4nl_table[b->qs[j] & 0xF];
        y[j + 16] = d * pagoda_iq4nl_table[b->qs[j] >> 4];
    }
}

static void dq_q2_K(const pagoda_block_q2_K *b, float *y)
{
    const float d = pagoda_fp16_to_fp32(b->d), dmin = pagoda_fp16_to_fp32(b->dmin);
    /* Two halves of 128; in each, 32 bytes of qs carry four 2-bit planes
     * (shift 0, 2, 4, 6) of 32 elements; one scale byte per 16 elements. */
    for (int e = 0; e < 256; e++) {
        int half = e / 128, plane = (e % 128) / 32, l = e % 32;
        uint8_t sc = b->scales[e / 16];
        const float dl = d * (sc & 0xF), ml = dmin * (sc >> 4);
        int q = (b->qs[half * 32 + l] >> (2 * plane)) & 3;
        y[e] = dl * q - ml;
    }
}

static void dq_q3_K(const pagoda_block_q3_K *b, float *y)
{
    const float d = pagoda_fp16_to_fp32(b->d);
    int8_t sc[16];
    pagoda_q3_K_scales(b->scales, sc);
    /* Low 2 bits as in Q2_K (halves of 128, planes of 32); the third bit is
     * bit e/32 of hmask[e%32], and a clear bit subtracts 4 (so quants span
     * -4..3). */
    for (int e = 0; e < 256; e++) {
        int half = e / 128, plane = (e % 128) / 32, l = e % 32;
        const float dl = d * sc[e / 16];
        int q = (b->qs[half * 32 + l] >> (2 * plane)) & 3;
        q -= (b->hmask[l] >> (e / 32)) & 1 ? 0 : 4;
        y[e] = dl * q;
    }
}

/* Q4_K and Q5_K share the sub-block layout: 8 sub-blocks of 32, each
 * 64-element chunk c taking the low (first 32) then high (next 32) nibbles
 * of qs[32c .. 32c+31]; Q5_K's fifth bit of element e is bit e/32 of
 * qh[e%32]. */
static void dq_q45_K(uint16_t dh, uint16_t dminh, const uint8_t *scales, const uint8_t *qs,
                     const uint8_t *qh, float *y)
{
    const float d = pagoda_fp16_to_fp32(dh), dmin = pagoda_fp16_to_fp32(dminh);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        pagoda_get_scale_min_k4(j, scales, &sc, &m);
        const float d1 = d * sc, m1 = dmin * m;
        const uint8_t *q = qs + 32 * (j / 2);
        for (int l = 0; l < 32; l++) {
            int v = (j & 1) ? q[l] >> 4 : q[l] & 0xF;
            if (qh) v |= ((qh[l] >> j) & 1) << 4;
            y[32 * j + l] = d1 * v - m1;
        }
    }
}

static void dq_q6_K(const pagoda_block_q6_K *b, float *y)
{
    const float d = pagoda_fp16_to_fp32(b->d);
    /* Two halves of 128; in each, 32 lanes l carry four values at l, l+32,
     * l+64, l+96: low nibbles of ql[l] / ql[l+32] for the first 64, high
     * nibbles for the next 64; the top 2 bits are bit pairs of qh[l] by
     * quarter. One signed scale per 16 elements. */
    for (int e = 0; e < 256; e++) {
        int half = e / 128, quarter = (e % 128) / 32, l = e % 32;
        uint8_t lo = b->ql[half * 64 + l + (quarter & 1 ? 32 : 0)];
        int q = (quarter >= 2 ? lo >> 4 : lo & 0xF) | (((b->qh[half * 32 + l] >> (2 * quarter)) & 3) << 4);
        y[e] = d * b->scales[e / 16] * (q - 32);
    }
}

static void dq_iq4_xs(const pagoda_block_iq4_xs *b, float *y)
{
    const float d = pagoda_fp16_to_fp32(b->d);
    /* 8 sub-blocks of 32, each laid out like an IQ4_NL block's 16 bytes
     * (element j low nibble, j+16 high nibble). */
    for (int ib = 0; ib < 8; ib++) {
        const float dl = d * pagoda_iq4_xs_scale(b, ib);
        const uint8_t *q = b->qs + 16 * ib;
        for (int j = 0; j < 16; j++) {
            y[32 * ib + j] = dl * pagoda_iq4nl_table[q[j] & 0xF];
            y[32 * ib + j + 16] = dl * pagoda_iq4nl_table[q[j] >> 4];
        }
    }
}

int pagoda_dequant_k_rows(int dtype, const void *x, float *y, int64_t nb)
{
    const uint8_t *p = x;
    switch (dtype) {
#define ROWS(TYPE, FN)                                                                          \
    for (int64_t i = 0; i < nb; i++) {                                                          \
        TYPE b;                                                                                 \
        memcpy(&b, p + i * (int64_t)sizeof b, sizeof b); /* rows inside an mmap may be unaligned */ \
        FN;                                                                                     \
    }                                                                                           \
    return PAGODA_OK;
    case PAGODA_DTYPE_IQ4_NL: ROWS(pagoda_block_iq4_nl, dq_iq4_nl(&b, y + 32 * i))
    case PAGODA_DTYPE_Q2_K: ROWS(pagoda_block_q2_K, dq_q2_K(&b, y + 256 * i))
    case PAGODA_DTYPE_Q3_K: ROWS(pagoda_block_q3_K, dq_q3_K(&b, y + 256 * i))
    case PAGODA_DTYPE_Q4_K: ROWS(pagoda_block_q4_K, dq_q45_K(b.d, b.dmin, b.scales, b.qs, NULL, y + 256 * i))
    case PAGODA_DTYPE_Q5_K: ROWS(pagoda_block_q5_K, dq_q45_K(b.d, b.dmin, b.scales, b.qs, b.qh, y + 256 * i))
    case PAGODA_DTYPE_Q6_K: ROWS(pagoda_block_q6_K, dq_q6_K(&b, y + 256 * i))
    case PAGODA_DTYPE_IQ4_XS: ROWS(pagoda_block_iq4_xs, dq_iq4_xs(&b, y + 256 * i))
#undef ROWS
    default: return PAGODA_ERR_UNSUPPORTED;
    }
}

/* ------------------------------------------------------------ quantize */

/* pagoda's own quantizers: per (sub-)block, a float scale (and min) is
 * fitted by trying a handful of grid widths (the full min..max range and a
 * few narrower ones that clip the extremes), rounding each value to the
 * nearest quant, refitting scale and min by least squares for those
 * quants, and keeping the candidate with the least squared error. The
 * super-block then stores its sub-block scales as small integers times an
 * f16 d (and mins times dmin), and the quants are rounded again against
 * the scales as stored, so the scale rounding is not compounded. This is
 * not llama.cpp's error-minimizing search (nor its importance weighting):
 * on Gaussian data it lands within a few percent of its error (docs/gguf.md
 * has the measured relative RMS errors). */

/* Round to nearest; out-of-range and NaN inputs (a scale that came out
 * tiny) saturate instead of overflowing the conversion, then clamp. */
static inline int nearest(float v)
{
    if (!(v > -1e6f)) return -1000000;
    if (v > 1e6f) return 1000000;
    return (int)(v + copysignf(0.5f, v)); /* half away from zero, as roundf, without a libm call */
}
static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Affine fit value = s * q - m, q in 0..nmax, s >= 0 and m >= 0 (the
 * formats subtract the min, so a block of positives gets m = 0). */
static void fit_affine(const float *x, int n, int nmax, float *s_out, float *m_out)
{
    float mn = x[0], mx = x[0];
    for (int i = 1; i < n; i++) {
        mn = fminf(mn, x[i]);
        mx = fmaxf(mx, x[i]);
    }
    if (mn > 0) mn = 0;
    *s_out = 0;
    *m_out = -mn;
    if (mx <= mn) return;
    float best = INFINITY;
    /* Grid widths: the full range, then narrower by eighths of a quant
     * step at each end (outliers clip to the end quants instead of
     * stretching every step), then wider by whole steps (so values that
     * already lie on a grid using fewer than nmax steps find that grid
     * again: requantizing a dequantized block is then stable). */
    const float w = (mx - mn) / (float)(8 * nmax);
    for (int k = 0; k < 11; k++) {
        float lo = mn, hi = mx;
        if (k < 8) {
            lo += (float)k * w;
            hi -= (float)k * w;
        } else {
            hi = mn + (mx - mn) * (float)nmax / (float)(nmax - (k - 7));
        }
        const float is = (float)nmax / (hi - lo);
        int sq = 0, sq2 = 0; /* exact: n <= 32 quants of <= 31 */
        float sx = 0, sxq = 0;
        for (int i = 0; i < n; i++) {
            int q = clampi(nearest((x[i] - lo) * is), 0, nmax);
            sq += q;
            sq2 += q * q;
            sx += x[i];
            sxq += x[i] * (float)q;
        }
        /* Least squares for x ~ s*q + b with these q; b > 0 is not
         * storable, so then b = 0 and s is fitted alone. */
        double det = (double)n * sq2 - (double)sq * sq, s = 0, b = 1;
        if (det > 0) { /* det is 0 when every q is the same: fit s alone */
            s = ((double)n * sxq - (double)sq * sx) / det;
            b = (sx - s * sq) / n;
        }
        if (b > 0) {
            b = 0;
            s = sq2 > 0 ? (double)sxq / sq2 : 0;
        }
        if (s <= 0) continue;
        /* The error with the quants rounded again for the refitted grid. */
        float err = 0;
        const float inv = 1.0f / (float)s;
        for (int i = 0; i < n; i++) {
            int q = clampi(nearest((x[i] - (float)b) * inv), 0, nmax);
            float e = (float)s * q + (float)b - x[i];
            err += e * e;
        }
        if (err < best) {
            best = err;
            *s_out = (float)s;
            *m_out = (float)-b;
        }
    }
}

/* Signed fit value = s * q, q in -nneg..npos (nneg > npos: the value of
 * largest magnitude takes the longer side, as Q4_0 does). */
static float fit_symmetric(const float *x, int n, int nneg, int npos)
{
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax == 0) return 0;
    float best = INFINITY, bs = max / (float)-nneg;
    /* Candidates: the largest value at the long end, pushed out by
     * eighths of a step (clipping); then at the short end and one and two
     * steps in (finding the grid of already-quantized values again). */
    for (int k = 0; k < 11; k++) {
        const float at = k < 8 ? (float)-nneg - (float)k / 8.0f : k == 8 ? (float)npos : (float)(k - 9 - nneg + 1);
        const float i0 = at / max;
        float sxq = 0;
        int sq2 = 0;
        for (int i = 0; i < n; i++) {
            int q = clampi(nearest(x[i] * i0), -nneg, npos);
            sxq += x[i] * (float)q;
            sq2 += q * q;
        }
        if (sq2 == 0) continue;
        const float s = sxq / (float)sq2;
        if (s == 0) continue;
        float err = 0;
        const float inv = 1.0f / s;
        for (int i = 0; i < n; i++) {
            float e = s * clampi(nearest(x[i] * inv), -nneg, npos) - x[i];
            err += e * e;
        }
        if (err < best) {
            best = err;
            bs = s;
        }
    }
    /* Quants that avoid the long end give the same values with the sign of
     * the scale flipped (q -> -q); then choose the sign that makes the
     * first nonzero quant negative, so requantizing the values finds the
     * same bytes (a rule on the largest value would tie between +3 and -3). */
    int first = 0, uses_end = 0;
    for (int i = 0; i < n; i++) {
        int q = nearest(x[i] / bs); /* once per sub-block: exact division */
        uses_end |= q <= -nneg;
        if (!first) first = q;
    }
    if (!uses_end && first > 0) bs = -bs;
    return bs;
}

/* Index of the IQ4 table entry nearest v: the number of midpoints between
 * neighbouring entries that v exceeds (branch-free; a tie goes to the
 * lower entry). */
static const float iq4_mid[15] = {-115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
                                  7.0f,    19.0f,  31.5f,  45.5f,  61.0f,  79.0f,  101.0f};

static inline int iq4_index(float v)
{
    int k = 0;
    for (int i = 0; i < 15; i++) k += v > iq4_mid[i];
    return k;
}

/* IQ4 fit value = s * table[q]: the value of largest magnitude lands on
 * either end of the table (-127 or 113), a few scales around each are
 * tried, each refitted by least squares for its indices. */
static float fit_iq4(const float *x, int n)
{
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax == 0) return 0;
    float best = INFINITY, bs = max / -127.0f;
    for (int k = 0; k < 8; k++) { /* 12 candidates measured no better on Gaussian data */
        const float end = k < 4 ? -127.0f : 113.0f;
        const float i0 = end * (1.0f + 0.04f * (float)(k % 4)) / max;
        float sxt = 0;
        int st2 = 0;
        for (int i = 0; i < n; i++) {
            int t = pagoda_iq4nl_table[iq4_index(x[i] * i0)];
            sxt += x[i] * (float)t;
            st2 += t * t;
        }
        const float s = sxt / (float)st2;
        if (s == 0) continue;
        float err = 0;
        const float inv = 1.0f / s;
        for (int i = 0; i < n; i++) {
            float e = s * pagoda_iq4nl_table[iq4_index(x[i] * inv)] - x[i];
            err += e * e;
        }
        if (err < best) {
            best = err;
            bs = s;
        }
    }
    return bs;
}

static void q_iq4_nl(const float *x, pagoda_block_iq4_nl *b)
{
    b->d = pagoda_fp32_to_fp16(fit_iq4(x, 32));
    const float d = pagoda_fp16_to_fp32(b->d), id = d != 0 ? 1.0f / d : 0;
    for (int j = 0; j < 16; j++)
        b->qs[j] = (uint8_t)(iq4_index(x[j] * id) | iq4_index(x[j + 16] * id) << 4);
}

static void q_iq4_xs(const float *x, pagoda_block_iq4_xs *b)
{
    float s[8], smax = 0, sm = 0;
    for (int ib = 0; ib < 8; ib++) {
        s[ib] = fit_iq4(x + 32 * ib, 32);
        if (fabsf(s[ib]) > smax) {
            smax = fabsf(s[ib]);
            sm = s[ib];
        }
    }
    /* The largest sub-scale takes the stored -32 (the signed 6-bit range's
     * longer side). */
    b->d = pagoda_fp32_to_fp16(sm / -32.0f);
    const float d = pagoda_fp16_to_fp32(b->d), id = d != 0 ? 1.0f / d : 0;
    b->scales_h = 0;
    memset(b->scales_l, 0, sizeof b->scales_l);
    for (int ib = 0; ib < 8; ib++) {
        int ls = clampi(nearest(s[ib] * id), -32, 31);
        b->scales_l[ib / 2] |= (uint8_t)(((ls + 32) & 0xF) << (4 * (ib % 2)));
        b->scales_h |= (uint16_t)(((ls + 32) >> 4) << (2 * ib));
        const float dl = d * ls, il = dl != 0 ? 1.0f / dl : 0;
        const float *xb = x + 32 * ib;
        for (int j = 0; j < 16; j++)
            b->qs[16 * ib + j] = (uint8_t)(iq4_index(xb[j] * il) | iq4_index(xb[j + 16] * il) << 4);
    }
}

/* Sub-scales s[] >= 0 as integers 0..qmax times an f16 d (the largest
 * takes qmax); returns d as stored. */
static float pack_scales(const float *s, int n, int qmax, uint16_t *dh, int *out)
{
    float smax = 0;
    for (int i = 0; i < n; i++) smax = fmaxf(smax, s[i]);
    *dh = pagoda_fp32_to_fp16(smax / (float)qmax);
    const float d = pagoda_fp16_to_fp32(*dh), id = d != 0 ? 1.0f / d : 0;
    for (int i = 0; i < n; i++) out[i] = clampi(nearest(s[i] * id), 0, qmax);
    return d;
}

static void q_q2_K(const float *x, pagoda_block_q2_K *b)
{
    float s[16], m[16];
    int sc[16], mi[16];
    for (int j = 0; j < 16; j++) fit_affine(x + 16 * j, 16, 3, &s[j], &m[j]);
    const float d = pack_scales(s, 16, 15, &b->d, sc), dmin = pack_scales(m, 16, 15, &b->dmin, mi);
    memset(b->qs, 0, sizeof b->qs);
    for (int e = 0; e < 256; e++) {
        int j = e / 16;
        if (e % 16 == 0) b->scales[j] = (uint8_t)(sc[j] | mi[j] << 4);
        const float dl = d * sc[j], ml = dmin * mi[j];
        int q = dl != 0 ? clampi(nearest((x[e] + ml) / dl), 0, 3) : 0;
        b->qs[(e / 128) * 32 + e % 32] |= (uint8_t)(q << (2 * ((e % 128) / 32)));
    }
}

static void q_q3_K(const float *x, pagoda_block_q3_K *b)
{
    float s[16], smax = 0, sm = 0;
    for (int j = 0; j < 16; j++) {
        s[j] = fit_symmetric(x + 16 * j, 16, 4, 3);
        if (fabsf(s[j]) > smax) {
            smax = fabsf(s[j]);
            sm = s[j];
        }
    }
    b->d = pagoda_fp32_to_fp16(sm / -32.0f);
    const float d = pagoda_fp16_to_fp32(b->d), id = d != 0 ? 1.0f / d : 0;
    memset(b->scales, 0, sizeof b->scales);
    memset(b->qs, 0, sizeof b->qs);
    memset(b->hmask, 0, sizeof b->hmask);
    for (int k = 0; k < 16; k++) {
        int u = clampi(nearest(s[k] * id), -32, 31) + 32;
        b->scales[k % 8] |= (uint8_t)((u & 0xF) << (k < 8 ? 0 : 4));
        b->scales[8 + k % 4] |= (uint8_t)((u >> 4) << (2 * (k / 4)));
        const float dl = d * (u - 32);
        for (int i = 0; i < 16; i++) {
            int e = 16 * k + i, l = e % 32;
            int q = dl != 0 ? clampi(nearest(x[e] / dl), -4, 3) + 4 : 4; /* 0..7 */
            b->qs[(e / 128) * 32 + l] |= (uint8_t)((q & 3) << (2 * ((e % 128) / 32)));
            b->hmask[l] |= (uint8_t)((q >> 2) << (e / 32));
        }
    }
}

/* Q4_K (qh == NULL, quants 0..15) and Q5_K (0..31, fifth bit in qh). */
static void q_q45_K(const float *x, uint16_t *dh, uint16_t *dminh, uint8_t *scales, uint8_t *qs,
                    uint8_t *qh)
{
    const int nmax = qh ? 31 : 15;
    float s[8], m[8];
    int sc[8], mi[8];
    for (int j = 0; j < 8; j++) fit_affine(x + 32 * j, 32, nmax, &s[j], &m[j]);
    const float d = pack_scales(s, 8, 63, dh, sc), dmin = pack_scales(m, 8, 63, dminh, mi);
    /* The packing pagoda_get_scale_min_k4 reads. */
    memset(scales, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            scales[j] = (uint8_t)sc[j];
            scales[j + 4] = (uint8_t)mi[j];
        } else {
            scales[j + 4] = (uint8_t)((sc[j] & 0xF) | (mi[j] & 0xF) << 4);
            scales[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            scales[j] |= (uint8_t)((mi[j] >> 4) << 6);
        }
    }
    memset(qs, 0, 128);
    if (qh) memset(qh, 0, 32);
    for (int j = 0; j < 8; j++) {
        const float d1 = d * sc[j], m1 = dmin * mi[j];
        for (int l = 0; l < 32; l++) {
            int q = d1 != 0 ? clampi(nearest((x[32 * j + l] + m1) / d1), 0, nmax) : 0;
            qs[32 * (j / 2) + l] |= (uint8_t)((q & 0xF) << (j & 1 ? 4 : 0));
            if (qh) qh[l] |= (uint8_t)((q >> 4) << j);
        }
    }
}

int pagoda_quant_k_rows(int dtype, const float *x, void *y, int64_t nb)
{
    uint8_t *p = y;
    switch (dtype) {
#define ROWS(TYPE, N, FN)                                                                       \
    for (int64_t i = 0; i < nb; i++) {                                                          \
        TYPE b;                                                                                 \
        const float *xb = x + (N) * i;                                                          \
        FN;                                                                                     \
        memcpy(p + i * (int64_t)sizeof b, &b, sizeof b);                                        \
    }                                                                                           \
    return PAGODA_OK;
    case PAGODA_DTYPE_IQ4_NL: ROWS(pagoda_block_iq4_nl, 32, q_iq4_nl(xb, &b))
    case PAGODA_DTYPE_Q2_K: ROWS(pagoda_block_q2_K, 256, q_q2_K(xb, &b))
    case PAGODA_DTYPE_Q3_K: ROWS(pagoda_block_q3_K, 256, q_q3_K(xb, &b))
    case PAGODA_DTYPE_Q4_K: ROWS(pagoda_block_q4_K, 256, q_q45_K(xb, &b.d, &b.dmin, b.scales, b.qs, NULL))
    case PAGODA_DTYPE_Q5_K: ROWS(pagoda_block_q5_K, 256, q_q45_K(xb, &b.d, &b.dmin, b.scales, b.qs, b.qh))
    case PAGODA_DTYPE_IQ4_XS: ROWS(pagoda_block_iq4_xs, 256, q_iq4_xs(xb, &b))
#undef ROWS
    default: return PAGODA_ERR_UNSUPPORTED;
    }
}

_Static_assert(sizeof(pagoda_block_iq4_nl) == 18, "iq4_nl block");
_Static_assert(sizeof(pagoda_block_q2_K) == 84, "q2_K block");
_Static_assert(sizeof(pagoda_block_q3_K) == 110, "q3_K block");
_Static_assert(sizeof(pagoda_block_q4_K) == 144, "q4_K block");
_Static_assert(sizeof(pagoda_block_q5_K) == 176, "q5_K block");
_Static_assert(sizeof(pagoda_block_q6_K) == 210, "q6_K block");
_Static_assert(sizeof(pagoda_block_iq4_xs) == 136, "iq4_xs block");
