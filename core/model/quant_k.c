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

int pagoda_quant_k_rows(int dtype, const float *x, void *y, int64_t nb)
{
    (void)dtype;
    (void)x;
    (void)y;
    (void)nb;
    return PAGODA_ERR_UNSUPPORTED;
}

_Static_assert(sizeof(pagoda_block_iq4_nl) == 18, "iq4_nl block");
_Static_assert(sizeof(pagoda_block_q2_K) == 84, "q2_K block");
_Static_assert(sizeof(pagoda_block_q3_K) == 110, "q3_K block");
_Static_assert(sizeof(pagoda_block_q4_K) == 144, "q4_K block");
_Static_assert(sizeof(pagoda_block_q5_K) == 176, "q5_K block");
_Static_assert(sizeof(pagoda_block_q6_K) == 210, "q6_K block");
_Static_assert(sizeof(pagoda_block_iq4_xs) == 136, "iq4_xs block");
