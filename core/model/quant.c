/*
 * quant.c: scalar reference conversions and block (de)quantization, laid
 * out and rounded exactly as ggml's reference code does, so files written
 * here load in llama.cpp and files from there load here. Depends on libc,
 * libm and pagoda/types.h only (the CPU plugin links it). This file holds
 * the scalars and the 32-element block types (Q8_0, Q4_0, Q4_1, Q5_0,
 * Q5_1, MXFP4) and the dispatch; quant_k.c the super-block types and IQ4.
 * Not for: speed; SIMD kernels live in the backends and are tested
 * against these.
 */
#include "quant.h"

#include <math.h>
#include <string.h>

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* ------------------------------------------------------------ scalars */

float pagoda_fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) {
        /* Zero or subnormal: m * 2^-24, exact in f32. */
        float v = (float)m * 5.9604644775390625e-8f;
        return u2f(f2u(v) | sign);
    }
    if (e == 31) return u2f(sign | 0x7f800000u | (m << 13));
    return u2f(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t pagoda_fp32_to_fp16(float f)
{
    uint32_t x = f2u(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) {
        if (ax > 0x7f800000u) /* NaN: keep it quiet and keep the top payload bits */
            return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff));
        return sign | 0x7c00;
    }
    /* 65520 is halfway between 65504 (max half) and 65536: ties-to-even goes up. */
    if (ax >= 0x477ff000u) return sign | 0x7c00;
    if (ax < 0x38800000u) {
        /* Below 2^-14: a subnormal half. Adding 0.5 puts the f32 ulp at 2^-24,
         * so the FPU's own round-to-nearest-even does the rounding. */
        float af = u2f(ax) + 0.5f;
        return (uint16_t)(sign | (f2u(af) - 0x3f000000u));
    }
    /* Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits
     * to nearest even; a carry into the exponent is correct. */
    uint32_t odd = (ax >> 13) & 1;
    ax += 0xc8000fffu + odd;
    return (uint16_t)(sign | (ax >> 13));
}

float pagoda_bf16_to_fp32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t pagoda_fp32_to_bf16(float f)
{
    uint32_t x = f2u(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

/* ------------------------------------------------------------ blocks */

static void quant_q8_0(const float *x, pagoda_block_q8_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = pagoda_fp32_to_fp16(d);
        for (int j = 0; j < 32; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

static void quant_q4_0(const float *x, pagoda_block_q4_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32) {
        /* The signed value of largest magnitude maps to -8, so the full
         * range of the nibble is used on that side. */
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++)
            if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = pagoda_fp32_to_fp16(d);
        for (int j = 0; j < 16; j++) {
            int q0 = (int)(int8_t)(x[j] * id + 8.5f), q1 = (int)(int8_t)(x[j + 16] * id + 8.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void quant_q4_1(const float *x, pagoda_block_q4_1 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float min = INFINITY, max = -INFINITY;
        for (int j = 0; j < 32; j++) {
            min = fminf(min, x[j]);
            max = fmaxf(max, x[j]);
        }
        const float d = (max - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = pagoda_fp32_to_fp16(d);
        y[i].m = pagoda_fp32_to_fp16(min);
        for (int j = 0; j < 16; j++) {
            int q0 = (int)(int8_t)((x[j] - min) * id + 0.5f);
            int q1 = (int)(int8_t)((x[j + 16] - min) * id + 0.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* Q5_0 and Q5_1 are Q4_0 and Q4_1 with a fifth bit per value (quants
 * 0..31; Q5_0's value of largest magnitude maps to -16): the same
 * round-to-nearest, with the fifth bits gathered into the 32-bit qh
 * (bit j for element j, little-endian). */
static void put_q5(const int *q, uint8_t *qh4, uint8_t *qs)
{
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0xF) | (q[j + 16] & 0xF) << 4);
        qh |= (uint32_t)(q[j] >> 4) << j | (uint32_t)(q[j + 16] >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; k++) qh4[k] = (uint8_t)(qh >> (8 * k));
}

static void quant_q5_0(const float *x, uint8_t *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32, y += 22) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++)
            if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        const float d = max / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        pagoda_block_q5_0 b;
        int q[32];
        b.d = pagoda_fp32_to_fp16(d);
        for (int j = 0; j < 32; j++) {
            int v = (int)(x[j] * id + 16.5f);
            q[j] = v < 0 ? 0 : v > 31 ? 31 : v;
        }
        put_q5(q, b.qh, b.qs);
        memcpy(y, &b, 22);
    }
}

static void quant_q5_1(const float *x, uint8_t *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32, y += 24) {
        float min = INFINITY, max = -INFINITY;
        for (int j = 0; j < 32; j++) {
            min = fminf(min, x[j]);
            max = fmaxf(max, x[j]);
        }
        const float d = (max - min) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        pagoda_block_q5_1 b;
        int q[32];
        b.d = pagoda_fp32_to_fp16(d);
        b.m = pagoda_fp32_to_fp16(min);
        for (int j = 0; j < 32; j++) {
            int v = (int)((x[j] - min) * id + 0.5f);
            q[j] = v < 0 ? 0 : v > 31 ? 31 : v;
        }
        put_q5(q, b.qh, b.qs);
        memcpy(y, &b, 24);
    }
}

/* Q5_0 (m == NULL: value d * (q - 16)) and Q5_1 (value d * q + m): the
 * low 4 bits of element j are the low (j < 16) or high nibble of qs[j % 16],
 * the fifth is bit j of the little-endian 32-bit qh. */
static void dequant_q5(uint16_t dh, const uint16_t *mh, const uint8_t *qh4, const uint8_t *qs, float *y)
{
    const float d = pagoda_fp16_to_fp32(dh);
    const uint32_t qh = (uint32_t)qh4[0] | (uint32_t)qh4[1] << 8 | (uint32_t)qh4[2] << 16 |
                        (uint32_t)qh4[3] << 24;
    for (int j = 0; j < 32; j++) {
        int q = (j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4) | (int)((qh >> j) & 1) << 4;
        if (mh)
            y[j] = q * d + pagoda_fp16_to_fp32(*mh);
        else
            y[j] = (q - 16) * d;
    }
}

/* MXFP4: the OCP MX v1.0 E2M1 values, doubled (pagoda_e8m0_to_fp32_half
 * holds the other factor 1/2). */
const int8_t pagoda_mxfp4_table[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* MXFP4 as ggml and the gguf package quantize it: the shared exponent is
 * floor(log2(amax)) - 2 (E2M1's largest exponent), so amax / scale lies in
 * [4, 8) and values past 6 x scale clip to 6; each value takes the code of
 * the nearest grid point, |d * table[i] - x| in f32, the lowest code on a
 * tie (so +0 over -0 and the smaller magnitude between two points).
 * floor(log2) is taken exactly from the f32's exponent (frexpf), where the
 * gguf package rounds log2 to f32 first: an amax within an f32 rounding of
 * log2 below a power of two gets its next scale there (tests/reference
 * says how often). An amax below 2^-125 takes exponent byte 0 (gguf's
 * uint8 cast wraps there), zero blocks are all zeros. */
static void quant_mxfp4(const float *x, uint8_t *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32, y += 17) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        int e = 0;
        if (amax > 0.0f && isfinite(amax)) {
            int ex;
            frexpf(amax, &ex); /* amax = m 2^ex, m in [0.5, 1): floor(log2) = ex - 1 */
            e = ex - 1 - 2 + 127;
            e = e < 0 ? 0 : e > 254 ? 254 : e;
        }
        const float d = pagoda_e8m0_to_fp32_half((uint8_t)e);
        uint8_t q[32];
        for (int j = 0; j < 32; j++) {
            int best = 0;
            float be = fabsf(d * (float)pagoda_mxfp4_table[0] - x[j]);
            for (int k = 1; k < 16; k++) {
                float err = fabsf(d * (float)pagoda_mxfp4_table[k] - x[j]);
                if (err < be) { be = err; best = k; }
            }
            q[j] = (uint8_t)best;
        }
        y[0] = (uint8_t)e;
        for (int j = 0; j < 16; j++) y[1 + j] = (uint8_t)(q[j] | q[j + 16] << 4);
    }
}

static void dequant_mxfp4(const uint8_t *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 17, y += 32) {
        const float d = pagoda_e8m0_to_fp32_half(x[0]);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)pagoda_mxfp4_table[x[1 + j] & 0xF];
            y[j + 16] = d * (float)pagoda_mxfp4_table[x[1 + j] >> 4];
        }
    }
}

static int block_elems(int dtype)
{
    int be = 1;
    pagoda_dtype_block(dtype, &be, NULL);
    return be;
}

static int check_n(int dtype, int64_t n)
{
    int be;
    if (!pagoda_dtype_block(dtype, &be, NULL)) return PAGODA_ERR_UNSUPPORTED;
    if (n < 0 || n % be) return PAGODA_ERR_INVALID;
    return PAGODA_OK;
}

int pagoda_quantize_row(int dtype, const float *x, void *out, int64_t n)
{
    int st = check_n(dtype, n);
    if (st) return st;
    if (n && (!x || !out)) return PAGODA_ERR_INVALID;
    switch (dtype) {
    case PAGODA_DTYPE_F32: memmove(out, x, (size_t)n * 4); return PAGODA_OK;
    case PAGODA_DTYPE_F16: {
        uint16_t *o = out;
        for (int64_t i = 0; i < n; i++) o[i] = pagoda_fp32_to_fp16(x[i]);
        return PAGODA_OK;
    }
    case PAGODA_DTYPE_BF16: {
        uint16_t *o = out;
        for (int64_t i = 0; i < n; i++) o[i] = pagoda_fp32_to_bf16(x[i]);
        return PAGODA_OK;
    }
    case PAGODA_DTYPE_Q8_0: quant_q8_0(x, out, n / 32); return PAGODA_OK;
    case PAGODA_DTYPE_Q4_0: quant_q4_0(x, out, n / 32); return PAGODA_OK;
    case PAGODA_DTYPE_Q4_1: quant_q4_1(x, out, n / 32); return PAGODA_OK;
    case PAGODA_DTYPE_Q5_0: quant_q5_0(x, out, n / 32); return PAGODA_OK;
    case PAGODA_DTYPE_Q5_1: quant_q5_1(x, out, n / 32); return PAGODA_OK;
    case PAGODA_DTYPE_MXFP4: quant_mxfp4(x, out, n / 32); return PAGODA_OK;
    default: return pagoda_quant_k_rows(dtype, x, out, n / block_elems(dtype));
    }
}

int pagoda_dequantize_row(int dtype, const void *x, float *out, int64_t n)
{
    int st = check_n(dtype, n);
    if (st) return st;
    if (n && (!x || !out)) return PAGODA_ERR_INVALID;
    switch (dtype) {
    case PAGODA_DTYPE_F32: memmove(out, x, (size_t)n * 4); return PAGODA_OK;
    case PAGODA_DTYPE_F16: {
        const uint8_t *p = x;
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2); /* rows inside an mmap may be unaligned */
            out[i] = pagoda_fp16_to_fp32(h);
        }
        return PAGODA_OK;
    }
    case PAGODA_DTYPE_BF16: {
        const uint8_t *p = x;
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            out[i] = pagoda_bf16_to_fp32(h);
        }
        return PAGODA_OK;
    }
    case PAGODA_DTYPE_Q8_0: {
        const uint8_t *p = x;
        for (int64_t i = 0; i < n / 32; i++) {
            pagoda_block_q8_0 b;
            memcpy(&b, p + i * 34, 34);
            const float d = pagoda_fp16_to_fp32(b.d);
            for (int j = 0; j < 32; j++) out[i * 32 + j] = b.qs[j] * d;
        }
        return PAGODA_OK;
    }
    case PAGODA_DTYPE_Q4_0: {
        const uint8_t *p = x;
        for (int64_t i = 0; i < n / 32; i++) {
            pagoda_block_q4_0 b;
            memcpy(&b, p + i * 18, 18);
            const float d = pagoda_fp16_to_fp32(b.d);
            for (int j = 0; j < 16; j++) {
                out[i * 32 + j] = ((b.qs[j] & 0xF) - 8) * d;
                out[i * 32 + j + 16] = ((b.qs[j] >> 4) - 8) * d;
            }
        }
        return PAGODA_OK;
    }
    case PAGODA_DTYPE_Q4_1: {
        const uint8_t *p = x;
        for (int64_t i = 0; i < n / 32; i++) {
            pagoda_block_q4_1 b;
            memcpy(&b, p + i * 20, 20);
            const float d = pagoda_fp16_to_fp32(b.d), m = pagoda_fp16_to_fp32(b.m);
            for (int j = 0; j < 16; j++) {
                out[i * 32 + j] = (b.qs[j] & 0xF) * d + m;
                out[i * 32 + j + 16] = (b.qs[j] >> 4) * d + m;
            }
        }
        return PAGODA_OK;
    }
    case PAGODA_DTYPE_Q5_0: {
        const uint8_t *p = x;
        for (int64_t i = 0; i < n / 32; i++) {
            pagoda_block_q5_0 b;
            memcpy(&b, p + i * 22, 22);
            dequant_q5(b.d, NULL, b.qh, b.qs, out + i * 32);
        }
        return PAGODA_OK;
    }
    case PAGODA_DTYPE_Q5_1: {
        const uint8_t *p = x;
        for (int64_t i = 0; i < n / 32; i++) {
            pagoda_block_q5_1 b;
            memcpy(&b, p + i * 24, 24);
            dequant_q5(b.d, &b.m, b.qh, b.qs, out + i * 32);
        }
        return PAGODA_OK;
    }
    case PAGODA_DTYPE_MXFP4: dequant_mxfp4(x, out, n / 32); return PAGODA_OK;
    default: return pagoda_dequant_k_rows(dtype, x, out, n / block_elems(dtype));
    }
}

_Static_assert(sizeof(pagoda_block_q8_0) == 34, "q8_0 block");
_Static_assert(sizeof(pagoda_block_q4_0) == 18, "q4_0 block");
_Static_assert(sizeof(pagoda_block_q4_1) == 20, "q4_1 block");
_Static_assert(sizeof(pagoda_block_q5_0) == 22, "q5_0 block");
_Static_assert(sizeof(pagoda_block_q5_1) == 24, "q5_1 block");
_Static_assert(sizeof(pagoda_block_mxfp4) == 17, "mxfp4 block");
