/*
 * decode.h: the CUDA backend's weight decode and mat-vec formulas, as
 * inline functions that compile both as CUDA (__host__ __device__, used by
 * kernels.cu) and as plain C with gcc (used by tests/unit/test_cuda_probe.c,
 * which checks them against the CPU's scalar references in
 * core/model/quant*.c on random blocks). Without a GPU this is the only
 * evidence that the kernels compute the right thing: the GPU runs these
 * same functions, so a layout slip shows on the CPU first.
 *
 * Every decoder returns element k of a weight row, bit for bit as
 * pagoda_dequantize_row writes it: same order of float operations, and
 * PCU_MUL / PCU_ADD keep nvcc from fusing a multiply and an add into one
 * FMA (which rounds once, where the CPU reference rounds twice).
 *
 * Not for: launch shapes, shared memory or warp code (kernels.cu), anything
 * that needs the CUDA runtime; this header includes only pagoda/types.h.
 */
#ifndef PAGODA_CUDA_DECODE_H
#define PAGODA_CUDA_DECODE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "pagoda/types.h"

#ifdef __CUDACC__
#define PAGODA_HD __host__ __device__ __forceinline__
#else
#define PAGODA_HD static inline
#endif

#ifdef __CUDA_ARCH__
#define PCU_MUL(a, b) __fmul_rn((a), (b))
#define PCU_ADD(a, b) __fadd_rn((a), (b))
#define PCU_SUB(a, b) __fsub_rn((a), (b))
#else
#define PCU_MUL(a, b) ((a) * (b))
#define PCU_ADD(a, b) ((a) + (b))
#define PCU_SUB(a, b) ((a) - (b))
#endif

/* --------------------------------------------------------------- scalars */

PAGODA_HD float pcu_u2f(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

/* Blocks are only byte aligned (a Q5_0 block is 22 bytes): read bytes. */
PAGODA_HD uint32_t pcu_u16(const uint8_t *p) { return (uint32_t)p[0] | ((uint32_t)p[1] << 8); }

/* IEEE half to float, exact (as pagoda_fp16_to_fp32). */
PAGODA_HD float pcu_f16(const uint8_t *p)
{
    uint32_t h = pcu_u16(p);
    uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) /* zero or subnormal: m * 2^-24, exact in f32 */
        return pcu_u2f(sign) + (sign ? -1.0f : 1.0f) * ((float)m * 5.9604644775390625e-8f);
    if (e == 31) return pcu_u2f(sign | 0x7f800000u | (m << 13));
    return pcu_u2f(sign | ((e + 112) << 23) | (m << 13));
}

PAGODA_HD float pcu_bf16(const uint8_t *p) { return pcu_u2f(pcu_u16(p) << 16); }

/* 2^(e - 128) exactly (pagoda_e8m0_to_fp32_half). */
PAGODA_HD float pcu_e8m0_half(uint8_t e)
{
    return pcu_u2f(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

/* The IQ4 codebook and the doubled E2M1 values (quant.h's tables), as
 * int8 bytes packed into two 64-bit constants: a lookup is a shift, with
 * no table in memory (a device-side array would live in local memory). */
PAGODA_HD int pcu_lut16(uint64_t lo, uint64_t hi, int i)
{
    i &= 15;
    return (int)(int8_t)(uint8_t)((i < 8 ? lo : hi) >> (8 * (i & 7)));
}
PAGODA_HD int pcu_iq4nl(int i) { return pcu_lut16(0xf6eaddcfbfad9881ull, 0x7159453526190d01ull, i); }
PAGODA_HD int pcu_mxfp4(int i) { return pcu_lut16(0x0c08060403020100ull, 0xf4f8fafcfdfeff00ull, i); }

/* Nibble j (0..31) of a 16-byte block: element j in the low nibble of
 * qs[j], 16 + j in the high one. */
PAGODA_HD int pcu_nib32(const uint8_t *qs, int j) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; }

/* ------------------------------------------------------- one type each */

PAGODA_HD float pcu_dq_f32(const uint8_t *row, int k)
{
    const uint8_t *p = row + 4 * (size_t)k;
    return pcu_u2f((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}
PAGODA_HD float pcu_dq_f16(const uint8_t *row, int k) { return pcu_f16(row + 2 * (size_t)k); }
PAGODA_HD float pcu_dq_bf16(const uint8_t *row, int k) { return pcu_bf16(row + 2 * (size_t)k); }

PAGODA_HD float pcu_dq_q8_0(const uint8_t *row, int k)
{
    const uint8_t *b = row + (size_t)(k / 32) * 34;
    return PCU_MUL((float)(int8_t)b[2 + k % 32], pcu_f16(b));
}
PAGODA_HD float pcu_dq_q4_0(const uint8_t *row, int k)
{
    const uint8_t *b = row + (size_t)(k / 32) * 18;
    return PCU_MUL((float)(pcu_nib32(b + 2, k % 32) - 8), pcu_f16(b));
}
PAGODA_HD float pcu_dq_q4_1(const uint8_t *row, int k)
{
    const uint8_t *b = row + (size_t)(k / 32) * 20;
    return PCU_ADD(PCU_MUL((float)pcu_nib32(b + 4, k % 32), pcu_f16(b)), pcu_f16(b + 2));
}
/* Q5_0 / Q5_1: the fifth bit of element j is bit j of the 32-bit qh. */
PAGODA_HD int pcu_q5(const uint8_t *qh, const uint8_t *qs, int j)
{
    return pcu_nib32(qs, j) | ((qh[j / 8] >> (j % 8)) & 1) << 4;
}
PAGODA_HD float pcu_dq_q5_0(const uint8_t *row, int k)
{
    const uint8_t *b = row + (size_t)(k / 32) * 22;
    return PCU_MUL((float)(pcu_q5(b + 2, b + 6, k % 32) - 16), pcu_f16(b));
}
PAGODA_HD float pcu_dq_q5_1(const uint8_t *row, int k)
{
    const uint8_t *b = row + (size_t)(k / 32) * 24;
    return PCU_ADD(PCU_MUL((float)pcu_q5(b + 4, b + 8, k % 32), pcu_f16(b)), pcu_f16(b + 2));
}
PAGODA_HD float pcu_dq_iq4_nl(const uint8_t *row, int k)
{
    const uint8_t *b = row + (size_t)(k / 32) * 18;
    return PCU_MUL(pcu_f16(b), (float)pcu_iq4nl(pcu_nib32(b + 2, k % 32)));
}
PAGODA_HD float pcu_dq_mxfp4(const uint8_t *row, int k)
{
    const uint8_t *b = row + (size_t)(k / 32) * 17;
    return PCU_MUL(pcu_e8m0_half(b[0]), (float)pcu_mxfp4(pcu_nib32(b + 1, k % 32)));
}

/* Q2_K: scales[16] qs[64] d dmin. Halves of 128, each four 2-bit planes of
 * 32 over qs[32 half ..]; per 16 elements a scale (low nibble) and min. */
PAGODA_HD float pcu_dq_q2_k(const uint8_t *row, int k)
{
    const uint8_t *b = row + (size_t)(k / 256) * 84;
    int e = k % 256, half = e / 128, plane = (e % 128) / 32, l = e % 32;
    uint8_t sc = b[e / 16];
    float dl = PCU_MUL(pcu_f16(b + 80), (float)(sc & 15)), ml = PCU_MUL(pcu_f16(b + 82), (float)(sc >> 4));
    int q = (b[16 + half * 32 + l] >> (2 * plane)) & 3;
    return PCU_SUB(PCU_MUL(dl, (float)q), ml);
}
/* Q3_K: hmask[32] qs[64] scales[12] d; signed 6-bit scales stored + 32. */
PAGODA_HD float pcu_dq_q3_k(const uint8_t *row, int k)
{
    const uint8_t *b = row + (size_t)(k / 256) * 110;
    int e = k % 256, half = e / 128, plane = (e % 128) / 32, l = e % 32, s = e / 16;
    const uint8_t *sp = b + 96;
    int lo = (sp[s % 8] >> (s < 8 ? 0 : 4)) & 15, hi = (sp[8 + s % 4] >> (2 * (s / 4))) & 3;
    float dl = PCU_MUL(pcu_f16(b + 108), (float)((lo | (hi << 4)) - 32));
    int q = (b[32 + half * 32 + l] >> (2 * plane)) & 3;
    q -= (b[l] >> (e / 32)) & 1 ? 0 : 4;
    return PCU_MUL(dl, (float)q);
}
/* The 6-bit scale and min of Q4_K/Q5_K sub-block j (pagoda_get_scale_min_k4). */
PAGODA_HD void pcu_scale_min_k4(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}
/* Q4_K (qh NULL: d dmin scales[12] qs[128]) and Q5_K (d dmin scales[12]
 * qh[32] qs[128]): sub-block j of 32 takes the low (even j) or high nibbles
 * of qs[32 (j / 2) ..]; Q5_K's fifth bit is bit j of qh[l]. */
PAGODA_HD float pcu_q45_k(const uint8_t *b, const uint8_t *qh, const uint8_t *qs, int e)
{
    int j = e / 32, l = e % 32, sc, m;
    pcu_scale_min_k4(j, b + 4, &sc, &m);
    float d1 = PCU_MUL(pcu_f16(b), (float)sc), m1 = PCU_MUL(pcu_f16(b + 2), (float)m);
    uint8_t q = qs[32 * (j / 2) + l];
    int v = (j & 1) ? q >> 4 : q & 15;
    if (qh) v |= ((qh[l] >> j) & 1) << 4;
    return PCU_SUB(PCU_MUL(d1, (float)v), m1);
}
PAGODA_HD float pcu_dq_q4_k(const uint8_t *row, int k)
{
    const uint8_t *b = row + (size_t)(k / 256) * 144;
    return pcu_q45_k(b, (const uint8_t *)0, b + 16, k % 256);
}
PAGODA_HD float pcu_dq_q5_k(const uint8_t *row, int k)
{
    const uint8_t *b = row + (size_t)(k / 256) * 176;
    return pcu_q45_k(b, b + 16, b + 48, k % 256);
}
/* Q6_K: ql[128] qh[64] scales[16] d. Halves of 128; in each, lane l
 * carries l, l+32, l+64, l+96 (quarters): low nibbles of ql[l] / ql[l+32],
 * then high ones; the top 2 bits are bit pairs of qh[l] by quarter. */
PAGODA_HD float pcu_dq_q6_k(const uint8_t *row, int k)
{
    const uint8_t *b = row + (size_t)(k / 256) * 210;
    int e = k % 256, half = e / 128, quarter = (e % 128) / 32, l = e % 32;
    uint8_t lo = b[half * 64 + l + (quarter & 1) * 32];
    int q = (quarter >= 2 ? lo >> 4 : lo & 15) | (((b[128 + half * 32 + l] >> (2 * quarter)) & 3) << 4);
    return PCU_MUL(PCU_MUL(pcu_f16(b + 208), (float)(int8_t)b[192 + e / 16]), (float)(q - 32));
}
/* IQ4_XS: d scales_h(u16) scales_l[4] qs[128]; 8 sub-blocks of 32 laid out
 * as IQ4_NL blocks, each with a signed 6-bit scale stored + 32. */
PAGODA_HD float pcu_dq_iq4_xs(const uint8_t *row, int k)
{
    const uint8_t *b = row + (size_t)(k / 256) * 136;
    int e = k % 256, ib = e / 32;
    int lo = (b[4 + ib / 2] >> (4 * (ib % 2))) & 15, hi = (int)(pcu_u16(b + 2) >> (2 * ib)) & 3;
    float dl = PCU_MUL(pcu_f16(b), (float)((lo | (hi << 4)) - 32));
    return PCU_MUL(dl, (float)pcu_iq4nl(pcu_nib32(b + 8 + 16 * ib, e % 32)));
}

/* ------------------------------------------------------------- dispatch */

/* The weight types the CUDA kernels decode (a bit per dtype). */
#define PCU_WEIGHT_TYPES                                                                      \
    ((1ull << PAGODA_DTYPE_F32) | (1ull << PAGODA_DTYPE_F16) | (1ull << PAGODA_DTYPE_BF16) |  \
     (1ull << PAGODA_DTYPE_Q8_0) | (1ull << PAGODA_DTYPE_Q4_0) | (1ull << PAGODA_DTYPE_Q4_1) | \
     (1ull << PAGODA_DTYPE_Q5_0) | (1ull << PAGODA_DTYPE_Q5_1) | (1ull << PAGODA_DTYPE_Q2_K) | \
     (1ull << PAGODA_DTYPE_Q3_K) | (1ull << PAGODA_DTYPE_Q4_K) | (1ull << PAGODA_DTYPE_Q5_K) | \
     (1ull << PAGODA_DTYPE_Q6_K) | (1ull << PAGODA_DTYPE_IQ4_NL) |                            \
     (1ull << PAGODA_DTYPE_IQ4_XS) | (1ull << PAGODA_DTYPE_MXFP4))

/* Element k of a row of type dt (0 for a type outside PCU_WEIGHT_TYPES).
 * kernels.cu calls it with a compile-time dt, so the switch folds away. */
PAGODA_HD float pcu_dq(int dt, const uint8_t *row, int k)
{
    switch (dt) {
    case PAGODA_DTYPE_F32: return pcu_dq_f32(row, k);
    case PAGODA_DTYPE_F16: return pcu_dq_f16(row, k);
    case PAGODA_DTYPE_BF16: return pcu_dq_bf16(row, k);
    case PAGODA_DTYPE_Q8_0: return pcu_dq_q8_0(row, k);
    case PAGODA_DTYPE_Q4_0: return pcu_dq_q4_0(row, k);
    case PAGODA_DTYPE_Q4_1: return pcu_dq_q4_1(row, k);
    case PAGODA_DTYPE_Q5_0: return pcu_dq_q5_0(row, k);
    case PAGODA_DTYPE_Q5_1: return pcu_dq_q5_1(row, k);
    case PAGODA_DTYPE_IQ4_NL: return pcu_dq_iq4_nl(row, k);
    case PAGODA_DTYPE_MXFP4: return pcu_dq_mxfp4(row, k);
    case PAGODA_DTYPE_Q2_K: return pcu_dq_q2_k(row, k);
    case PAGODA_DTYPE_Q3_K: return pcu_dq_q3_k(row, k);
    case PAGODA_DTYPE_Q4_K: return pcu_dq_q4_k(row, k);
    case PAGODA_DTYPE_Q5_K: return pcu_dq_q5_k(row, k);
    case PAGODA_DTYPE_Q6_K: return pcu_dq_q6_k(row, k);
    case PAGODA_DTYPE_IQ4_XS: return pcu_dq_iq4_xs(row, k);
    default: return 0.0f;
    }
}

/* ----------------------------------------------------------------- mat-vec */

/* Most tokens one mat-vec launch handles (each weight read once for all). */
#define PCU_GEMV_MAX_T 8

/* Lane `lane` of `nl` lanes (a warp: 32) over one weight row: partial sums
 * acc[t] += w[k] * x[t, k] for k = lane, lane + nl, ..., t < T, in F32.
 * The kernel then sums the lanes with an xor butterfly (lane l adds lane
 * l ^ o for o = 16, 8, 4, 2, 1) and lane 0 writes; the unit test does the
 * same on the CPU. acc must hold PCU_GEMV_MAX_T floats. */
PAGODA_HD void pcu_gemv_lane(int dt, const uint8_t *row, const float *x, int64_t ldx, int T,
                             int K, int lane, int nl, float *acc)
{
    for (int t = 0; t < PCU_GEMV_MAX_T; t++) acc[t] = 0.0f;
    for (int k = lane; k < K; k += nl) {
        float wv = pcu_dq(dt, row, k);
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
        for (int t = 0; t < PCU_GEMV_MAX_T; t++)
            if (t < T) acc[t] += wv * x[(int64_t)t * ldx + k];
    }
}

/* ------------------------------------------------------- KV and activations */

/* One Q8_0 block of a KV row, as pagoda_quantize_row writes it: d = amax /
 * 127 (stored as the f16 nearest, which the caller rounds), q = round(x /
 * d) through the reciprocal, as the CPU does. */
PAGODA_HD void pcu_q8_0_quant(const float *x, float *d_out, int8_t *q)
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    *d_out = d;
    for (int j = 0; j < 32; j++) q[j] = (int8_t)roundf(PCU_MUL(x[j], id));
}

/* gelu_tanh(g) * u in the form plugin.h gives (no cancellation for
 * negative g): g / (1 + exp(-2 sqrt(2/pi) (g + 0.044715 g^3))) * u. */
PAGODA_HD float pcu_geglu(float g, float u)
{
    return g / (1.0f + expf(-2.0f * 0.7978845608028654f * (g + 0.044715f * g * g * g))) * u;
}

/* gpt-oss's clamped SwiGLU (plugin.h): g = min(gate, limit), u =
 * clamp(up, -limit, limit), (u + 1) g sigmoid(alpha g). */
PAGODA_HD float pcu_swiglu_oai(float gate, float up, float alpha, float limit)
{
    float g = gate < limit ? gate : limit; /* as the CPU: a NaN gate stays NaN */
    float u = up < -limit ? -limit : up > limit ? limit : up;
    return (u + 1.0f) * (g / (1.0f + expf(-alpha * g)));
}

#endif /* PAGODA_CUDA_DECODE_H */
