/*
 * quant.h: scalar reference conversions between F32 and the stored weight
 * types (F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and the 256-element
 * super-block types Q2_K..Q6_K, IQ4_XS), bit-compatible with ggml's
 * reference block layouts. Portable C over libc/libm and pagoda/types.h
 * only, because the CPU backend plugin links these (library pagoda_quant:
 * quant.c for the scalars and 32-element blocks, quant_k.c for the
 * super-block types and IQ4). The small unpacking helpers below are inline
 * so SIMD kernels share one definition of each packed field.
 * Not for: fast kernels (backends/cpu has SIMD variants tested against these).
 */
#ifndef PAGODA_QUANT_H
#define PAGODA_QUANT_H

#include <stdint.h>

#include "pagoda/types.h"

/* Block layouts, as ggml stores them (little-endian, packed by construction). */
#define PAGODA_QK 32      /* elements per Q8_0 / Q4_0 / Q4_1 block */
#define PAGODA_QK_K 256   /* elements per K-quant super-block */

typedef struct pagoda_block_q8_0 { uint16_t d; int8_t qs[32]; } pagoda_block_q8_0;           /* 34 B */
typedef struct pagoda_block_q4_0 { uint16_t d; uint8_t qs[16]; } pagoda_block_q4_0;          /* 18 B */
typedef struct pagoda_block_q4_1 { uint16_t d, m; uint8_t qs[16]; } pagoda_block_q4_1;       /* 20 B */
typedef struct pagoda_block_q6_K {
    uint8_t ql[128];   /* low 4 bits of the 6-bit quants */
    uint8_t qh[64];    /* high 2 bits */
    int8_t scales[16]; /* one per 16 elements */
    uint16_t d;        /* f16 super-block scale */
} pagoda_block_q6_K;                                                                         /* 210 B */
typedef struct pagoda_block_q5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; } pagoda_block_q5_0; /* 22 B */
typedef struct pagoda_block_q5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; } pagoda_block_q5_1; /* 24 B */
typedef struct pagoda_block_iq4_nl { uint16_t d; uint8_t qs[16]; } pagoda_block_iq4_nl;      /* 18 B */
/* MXFP4 (OCP microscaling FP4, gpt-oss's experts): one E8M0 exponent byte
 * and 32 E2M1 codes, element j in the low nibble of qs[j], 16 + j in the
 * high one (as Q4_0). Value = pagoda_e8m0_to_fp32_half(e) *
 * pagoda_mxfp4_table[code]. */
typedef struct pagoda_block_mxfp4 { uint8_t e; uint8_t qs[16]; } pagoda_block_mxfp4;         /* 17 B */
typedef struct pagoda_block_q2_K {
    uint8_t scales[16]; /* per 16 elements: low nibble scale, high nibble min */
    uint8_t qs[64];     /* 2-bit quants */
    uint16_t d, dmin;   /* f16 super-block scales */
} pagoda_block_q2_K;                                                                         /* 84 B */
typedef struct pagoda_block_q3_K {
    uint8_t hmask[32];  /* high bit of the 3-bit quants */
    uint8_t qs[64];     /* low 2 bits */
    uint8_t scales[12]; /* 16 6-bit scales, packed */
    uint16_t d;
} pagoda_block_q3_K;                                                                         /* 110 B */
typedef struct pagoda_block_q4_K {
    uint16_t d, dmin;
    uint8_t scales[12]; /* 8 6-bit scales and 8 6-bit mins, packed */
    uint8_t qs[128];
} pagoda_block_q4_K;                                                                         /* 144 B */
typedef struct pagoda_block_q5_K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
} pagoda_block_q5_K;                                                                         /* 176 B */
typedef struct pagoda_block_iq4_xs {
    uint16_t d;
    uint16_t scales_h;  /* high 2 bits of the 8 6-bit scales */
    uint8_t scales_l[4];/* low 4 bits */
    uint8_t qs[128];    /* indices into the IQ4 non-linear table */
} pagoda_block_iq4_xs;                                                                       /* 136 B */

/* The IQ4_NL / IQ4_XS non-linear 4-bit codebook: a quant is an index into
 * this table, the value d * table[index]. */
extern const int8_t pagoda_iq4nl_table[16];

/* The E2M1 values doubled (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
 * negatives, times 2, so they are int8; code 8 is -0, stored as 0): the
 * halving is folded into the scale below. */
extern const int8_t pagoda_mxfp4_table[16];

/* An E8M0 exponent byte as half its power of two, 2^(e - 128), exactly as
 * an f32 (e = 0 and 1 are the subnormals 2^-128 and 2^-127; 255 is 2^127,
 * not NaN, as ggml reads it). */
static inline float pagoda_e8m0_to_fp32_half(uint8_t e)
{
    union { uint32_t u; float f; } v;
    v.u = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    return v.f;
}

/* Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7, 32 elements
 * each) from the 12 packed bytes. Bytes 0..3 hold scales 0..3 in their low
 * 6 bits, bytes 4..7 mins 0..3; sub-blocks 4..7 take their low 4 bits from
 * the nibbles of bytes 8..11 (scale low, min high) and their top 2 bits
 * from the spare top bits of bytes 0..3 (scales) and 4..7 (mins). */
static inline void pagoda_get_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Q3_K: the 16 signed scales (6-bit, stored +32) of a super-block, one per
 * 16 elements. Scale k takes its low 4 bits from the low (k < 8) or high
 * (k >= 8) nibble of byte k % 8 and its top 2 bits from byte 8 + k % 4,
 * bits 2*(k/4).. */
static inline void pagoda_q3_K_scales(const uint8_t *packed, int8_t *out)
{
    for (int k = 0; k < 16; k++) {
        int lo = (packed[k % 8] >> (k < 8 ? 0 : 4)) & 0xF;
        int hi = (packed[8 + k % 4] >> (2 * (k / 4))) & 3;
        out[k] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

/* IQ4_XS: the signed scale (6-bit, stored +32) of sub-block ib (0..7, 32
 * elements): low 4 bits from nibble ib of scales_l, top 2 from bits
 * 2*ib.. of scales_h. */
static inline int pagoda_iq4_xs_scale(const pagoda_block_iq4_xs *b, int ib)
{
    int lo = (b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF;
    int hi = (b->scales_h >> (2 * ib)) & 3;
    return (lo | (hi << 4)) - 32;
}

/* IEEE half: round to nearest even, subnormals, inf and NaN kept. */
float pagoda_fp16_to_fp32(uint16_t h);
uint16_t pagoda_fp32_to_fp16(float f);
/* bfloat16: the top half of an f32, rounded to nearest even; NaN stays NaN. */
float pagoda_bf16_to_fp32(uint16_t h);
uint16_t pagoda_fp32_to_bf16(float f);

/* Quantize n values (a multiple of the type's block size) into out, which
 * holds pagoda_dtype_row_bytes(dtype, n) bytes. Types: F32, F16, BF16,
 * Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K,
 * IQ4_XS.
 * PAGODA_ERR_UNSUPPORTED for others (Q6_K), PAGODA_ERR_INVALID for a bad n. */
int pagoda_quantize_row(int dtype, const float *x, void *out, int64_t n);
/* Dequantize n values: every type pagoda_quantize_row takes, and Q6_K. */
int pagoda_dequantize_row(int dtype, const void *x, float *out, int64_t n);

/* Internal to pagoda_quant: quant.c's dispatch hands the super-block and
 * IQ4 types to quant_k.c. nb = number of blocks; x and y may be unaligned.
 * PAGODA_ERR_UNSUPPORTED for a type quant_k.c does not hold. */
int pagoda_quant_k_rows(int dtype, const float *x, void *y, int64_t nb);
int pagoda_dequant_k_rows(int dtype, const void *x, float *y, int64_t nb);

#endif /* PAGODA_QUANT_H */
