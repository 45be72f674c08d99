/*
 * vecdot_k.h: the K-quant (Q2_K..Q5_K) and IQ4_XS kernels the vecdot
 * tables point at: the scalar references (vecdot_k.c), the AVX2 single-row
 * dots (vecdot_k_avx2.c) and the AVX2 tokens-in-lanes kernels
 * (vecdot_k_x8_avx2.c), with the little scale unpacking they share.
 * Not for: callers of the kernels (they use the table, vecdot.h).
 */
#ifndef PAGODA_CPU_VECDOT_K_H
#define PAGODA_CPU_VECDOT_K_H

#include <stdint.h>
#include <string.h>

#include "vecdot.h"

/* Q4_K / Q5_K scales: the 12 packed bytes (quant.h's
 * pagoda_get_scale_min_k4 reads them one at a time) as two 8-byte vectors, out[0..1] = the 8 six-bit
 * scales, out[2..3] = the 8 six-bit mins, one byte each, by 32-bit words:
 * scales / mins 0..3 are the low 6 bits of bytes 0..3 / 4..7; 4..7 take
 * their low 4 bits from the nibbles of bytes 8..11 and their top 2 bits
 * from the top bits of bytes 0..3 / 4..7. */
static inline void pagoda_k4_unpack_scales(const uint8_t *packed, uint32_t out[4])
{
    uint32_t u0, u1, u2;
    memcpy(&u0, packed, 4);
    memcpy(&u1, packed + 4, 4);
    memcpy(&u2, packed + 8, 4);
    out[0] = u0 & 0x3f3f3f3fu;
    out[1] = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
    out[2] = u1 & 0x3f3f3f3fu;
    out[3] = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
}

/* Q3_K scales (quant.h's pagoda_q3_K_scales, by words): the 16 six-bit
 * scales, still offset by +32, one byte each (out[0..3] = scales 0..15): low 4 bits from the low (k < 8) or high
 * (k >= 8) nibble of byte k % 8, top 2 bits from byte 8 + k % 4, bits
 * 2 * (k / 4). */
static inline void pagoda_k3_unpack_scales(const uint8_t *packed, uint32_t out[4])
{
    uint32_t a0, a1, a2;
    memcpy(&a0, packed, 4);
    memcpy(&a1, packed + 4, 4);
    memcpy(&a2, packed + 8, 4);
    out[0] = (a0 & 0x0f0f0f0fu) | ((a2 & 0x03030303u) << 4);
    out[1] = (a1 & 0x0f0f0f0fu) | (((a2 >> 2) & 0x03030303u) << 4);
    out[2] = ((a0 >> 4) & 0x0f0f0f0fu) | (((a2 >> 4) & 0x03030303u) << 4);
    out[3] = ((a1 >> 4) & 0x0f0f0f0fu) | (((a2 >> 6) & 0x03030303u) << 4);
}

/* Scalar references (vecdot_k.c). */
float pagoda_cpu_dot_q2_k_scalar(const void *w, const pagoda_q8k_block *x, int64_t nb);
float pagoda_cpu_dot_q3_k_scalar(const void *w, const pagoda_q8k_block *x, int64_t nb);
float pagoda_cpu_dot_q4_k_scalar(const void *w, const pagoda_q8k_block *x, int64_t nb);
float pagoda_cpu_dot_q5_k_scalar(const void *w, const pagoda_q8k_block *x, int64_t nb);
float pagoda_cpu_dot_iq4_xs_scalar(const void *w, const pagoda_q8k_block *x, int64_t nb);

/* AVX2 (vecdot_k_avx2.c, vecdot_k_x8_avx2.c); call only after CPUID. */
float pagoda_cpu_dot_q2_k_avx2(const void *w, const pagoda_q8k_block *x, int64_t nb);
float pagoda_cpu_dot_q3_k_avx2(const void *w, const pagoda_q8k_block *x, int64_t nb);
float pagoda_cpu_dot_q4_k_avx2(const void *w, const pagoda_q8k_block *x, int64_t nb);
float pagoda_cpu_dot_q5_k_avx2(const void *w, const pagoda_q8k_block *x, int64_t nb);
float pagoda_cpu_dot_iq4_xs_avx2(const void *w, const pagoda_q8k_block *x, int64_t nb);

#define PAGODA_CPU_GEMM_K_X8(name)                                                                  \
    void name(const void *w, size_t ws, int64_t nr, const pagoda_q8kx8_block *x, int64_t T,        \
              int64_t nb, float *out, size_t os)
PAGODA_CPU_GEMM_K_X8(pagoda_cpu_gemm_q2_k_x8_avx2);
PAGODA_CPU_GEMM_K_X8(pagoda_cpu_gemm_q3_k_x8_avx2);
PAGODA_CPU_GEMM_K_X8(pagoda_cpu_gemm_q4_k_x8_avx2);
PAGODA_CPU_GEMM_K_X8(pagoda_cpu_gemm_q5_k_x8_avx2);
PAGODA_CPU_GEMM_K_X8(pagoda_cpu_gemm_q6_k_x8_avx2);
PAGODA_CPU_GEMM_K_X8(pagoda_cpu_gemm_iq4_xs_x8_avx2);

#endif
