/*
 * quant.h: scalar reference conversions between F32 and the stored weight
 * types (F16, BF16, Q8_0, Q4_0, Q4_1, Q6_K), bit-compatible with ggml's
 * reference block layouts. Portable C over libc/libm and pagoda/types.h
 * only, because the CPU backend plugin compiles quant.c into itself.
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

/* IEEE half: round to nearest even, subnormals, inf and NaN kept. */
float pagoda_fp16_to_fp32(uint16_t h);
uint16_t pagoda_fp32_to_fp16(float f);
/* bfloat16: the top half of an f32, rounded to nearest even; NaN stays NaN. */
float pagoda_bf16_to_fp32(uint16_t h);
uint16_t pagoda_fp32_to_bf16(float f);

/* Quantize n values (a multiple of the type's block size) into out, which
 * holds pagoda_dtype_row_bytes(dtype, n) bytes. Types: F32, F16, BF16,
 * Q8_0, Q4_0, Q4_1. PAGODA_ERR_UNSUPPORTED for others (Q6_K),
 * PAGODA_ERR_INVALID for a bad n. */
int pagoda_quantize_row(int dtype, const float *x, void *out, int64_t n);
/* Dequantize n values: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q6_K. */
int pagoda_dequantize_row(int dtype, const void *x, float *out, int64_t n);

#endif /* PAGODA_QUANT_H */
