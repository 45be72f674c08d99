/*
 * vecdot.c: the scalar reference of every inner loop in vecdot.h, written
 * for clarity: the SIMD variants are tested against these (the run-time
 * choice of table is ../../dispatch.c).
 * Not for: speed (see ../avx2/vecdot_avx2.c).
 */
#include "vecdot.h"

#include <math.h>
#include <string.h>

#include "quant.h"
#include "vecdot_k.h"

/* Max-abs scaling to [-127, 127]; nearbyintf rounds half to even, as the
 * SIMD round does, so both paths give the same bytes. */
static void quant_q8a_scalar(const float *x, pagoda_q8a_block *y, int64_t k)
{
    for (int64_t b = 0; b < k / 32; b++) {
        const float *xb = x + b * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(xb[j]));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            int q = (int)nearbyintf(xb[j] * id);
            y[b].qs[j] = (int8_t)q;
            sum += q;
        }
        y[b].d = d;
        y[b].s = d * (float)sum;
    }
}

static void quant_q8k_scalar(const float *x, pagoda_q8k_block *y, int64_t k)
{
    for (int64_t b = 0; b < k / 256; b++) {
        const float *xb = x + b * 256;
        float amax = 0.0f;
        for (int j = 0; j < 256; j++) amax = fmaxf(amax, fabsf(xb[j]));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < 256; j++) y[b].qs[j] = (int8_t)nearbyintf(xb[j] * id);
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += y[b].qs[16 * j + i];
            y[b].bsums[j] = (int16_t)sum;
        }
        y[b].d = d;
    }
}

static float dot_f32_scalar(const float *w, const float *x, int64_t k)
{
    double s = 0.0;
    for (int64_t i = 0; i < k; i++) s += (double)w[i] * x[i];
    return (float)s;
}

static float dot_f16_scalar(const uint16_t *w, const float *x, int64_t k)
{
    double s = 0.0;
    for (int64_t i = 0; i < k; i++) s += (double)pagoda_fp16_to_fp32(w[i]) * x[i];
    return (float)s;
}

static float dot_bf16_scalar(const uint16_t *w, const float *x, int64_t k)
{
    double s = 0.0;
    for (int64_t i = 0; i < k; i++) s += (double)pagoda_bf16_to_fp32(w[i]) * x[i];
    return (float)s;
}

static float dot_q8_0_scalar(const void *wv, const pagoda_q8a_block *x, int64_t nb)
{
    const pagoda_blk_q8_0 *w = wv;
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += w[b].qs[j] * x[b].qs[j];
        s += (float)sum * pagoda_fp16_to_fp32(w[b].d) * x[b].d;
    }
    return s;
}

static float dot_q4_0_scalar(const void *wv, const pagoda_q8a_block *x, int64_t nb)
{
    const pagoda_blk_q4_0 *w = wv;
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int sum = 0;
        for (int j = 0; j < 16; j++) {
            sum += ((w[b].qs[j] & 0x0F) - 8) * x[b].qs[j];
            sum += ((w[b].qs[j] >> 4) - 8) * x[b].qs[j + 16];
        }
        s += (float)sum * pagoda_fp16_to_fp32(w[b].d) * x[b].d;
    }
    return s;
}

static float dot_q4_1_scalar(const void *wv, const pagoda_q8a_block *x, int64_t nb)
{
    const pagoda_blk_q4_1 *w = wv;
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int sum = 0;
        for (int j = 0; j < 16; j++) {
            sum += (w[b].qs[j] & 0x0F) * x[b].qs[j];
            sum += (w[b].qs[j] >> 4) * x[b].qs[j + 16];
        }
        s += (float)sum * pagoda_fp16_to_fp32(w[b].d) * x[b].d +
             pagoda_fp16_to_fp32(w[b].m) * x[b].s;
    }
    return s;
}

static float dot_q6_k_scalar(const void *wv, const pagoda_q8k_block *x, int64_t nb)
{
    const pagoda_blk_q6_k *w = wv;
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *ql = w[b].ql, *qh = w[b].qh;
        const int8_t *sc = w[b].scales, *q8 = x[b].qs;
        int sum = 0;
        for (int half = 0; half < 2; half++) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                sum += sc[is + 0] * q1 * q8[l + 0];
                sum += sc[is + 2] * q2 * q8[l + 32];
                sum += sc[is + 4] * q3 * q8[l + 64];
                sum += sc[is + 6] * q4 * q8[l + 96];
            }
            ql += 64;
            qh += 32;
            sc += 8;
            q8 += 128;
        }
        s += (float)sum * pagoda_fp16_to_fp32(w[b].d) * x[b].d;
    }
    return s;
}

/* Q5_0 / Q5_1: element j (< 16) is the low nibble of qs[j], element 16 + j
 * the high one; bit j of the little-endian 32-bit qh is element j's fifth. */
static inline int q5_value(const uint8_t *qs, const uint8_t *qh, int j)
{
    uint32_t h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
    int nib = j < 16 ? qs[j] & 0x0F : qs[j - 16] >> 4;
    return nib | (int)((h >> j) & 1) << 4;
}

static float dot_q5_0_scalar(const void *wv, const pagoda_q8a_block *x, int64_t nb)
{
    const pagoda_block_q5_0 *w = wv;
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += (q5_value(w[b].qs, w[b].qh, j) - 16) * x[b].qs[j];
        s += (float)sum * pagoda_fp16_to_fp32(w[b].d) * x[b].d;
    }
    return s;
}

static float dot_q5_1_scalar(const void *wv, const pagoda_q8a_block *x, int64_t nb)
{
    const pagoda_block_q5_1 *w = wv;
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += q5_value(w[b].qs, w[b].qh, j) * x[b].qs[j];
        s += (float)sum * pagoda_fp16_to_fp32(w[b].d) * x[b].d +
             pagoda_fp16_to_fp32(w[b].m) * x[b].s;
    }
    return s;
}

/* IQ4_NL: the nibbles (in Q4_0's order) index quant.h's non-linear table. */
static float dot_iq4_nl_scalar(const void *wv, const pagoda_q8a_block *x, int64_t nb)
{
    const pagoda_block_iq4_nl *w = wv;
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int sum = 0;
        for (int j = 0; j < 16; j++) {
            sum += pagoda_iq4nl_table[w[b].qs[j] & 0x0F] * x[b].qs[j];
            sum += pagoda_iq4nl_table[w[b].qs[j] >> 4] * x[b].qs[j + 16];
        }
        s += (float)sum * pagoda_fp16_to_fp32(w[b].d) * x[b].d;
    }
    return s;
}

static void axpy_f32_scalar(float *acc, float a, float p, const float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++) acc[i] = acc[i] * a + p * v[i];
}

static void axpy_f16_scalar(float *acc, float a, float p, const uint16_t *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++) acc[i] = acc[i] * a + p * pagoda_fp16_to_fp32(v[i]);
}

static void scores_f16_scalar(const uint16_t *k, size_t stride, int n, const float *q, int hd,
                              float scale, float *sc)
{
    for (int j = 0; j < n; j++)
        sc[j] = scale * dot_f16_scalar((const uint16_t *)((const uint8_t *)k + j * stride), q, hd);
}

static void accum_f16_scalar(float *acc, float alpha, const float *p, const uint16_t *v,
                             size_t stride, int n, int hd)
{
    for (int j = 0; j < n; j++)
        axpy_f16_scalar(acc, j == 0 ? alpha : 1.0f, p[j],
                        (const uint16_t *)((const uint8_t *)v + j * stride), hd);
    if (n == 0)
        for (int d = 0; d < hd; d++) acc[d] *= alpha;
}

static void quant_kv_q8_0_scalar(const float *x, void *y, int64_t k)
{
    pagoda_quantize_row(PAGODA_DTYPE_Q8_0, x, y, k);
}

/* The Q8_0 KV rows: a block's values are d * q (f16 d), summed in the
 * order of the F16 reference. */
static float dot_kv_q8_0_scalar(const pagoda_blk_q8_0 *k, const float *q, int hd)
{
    float s = 0.0f;
    for (int b = 0; b < hd / 32; b++) {
        float d = pagoda_fp16_to_fp32(k[b].d), bs = 0.0f;
        for (int i = 0; i < 32; i++) bs += (float)k[b].qs[i] * q[32 * b + i];
        s += d * bs;
    }
    return s;
}

static void scores_q8_0_scalar(const void *k, size_t stride, int n, const float *q, int hd,
                               float scale, float *sc)
{
    for (int j = 0; j < n; j++)
        sc[j] = scale * dot_kv_q8_0_scalar((const pagoda_blk_q8_0 *)((const uint8_t *)k + j * stride),
                                           q, hd);
}

static void accum_q8_0_scalar(float *acc, float alpha, const float *p, const void *v, size_t stride,
                              int n, int hd)
{
    for (int d = 0; d < hd; d++) acc[d] *= alpha;
    for (int j = 0; j < n; j++) {
        const pagoda_blk_q8_0 *vb = (const pagoda_blk_q8_0 *)((const uint8_t *)v + j * stride);
        for (int b = 0; b < hd / 32; b++) {
            float w = p[j] * pagoda_fp16_to_fp32(vb[b].d);
            for (int i = 0; i < 32; i++) acc[32 * b + i] += w * (float)vb[b].qs[i];
        }
    }
}

static void dequant_scalar(int dtype, const void *w, float *out, int64_t k)
{
    pagoda_dequantize_row(dtype, w, out, k);
}

/* The reference for the row x token blocks: one dot per pair. */
#define GEMM_BY_DOTS(name, dot, xtype)                                                            \
    static void name(const void *w, size_t w_stride, int64_t nr, const void *x, size_t x_stride, \
                     int64_t T, int64_t n, float *out, size_t out_stride)                        \
    {                                                                                             \
        for (int64_t t = 0; t < T; t++) {                                                         \
            const xtype *xr = (const xtype *)((const uint8_t *)x + t * x_stride);                \
            float *o = (float *)((uint8_t *)out + t * out_stride);                                \
            for (int64_t r = 0; r < nr; r++) o[r] = dot((const void *)((const uint8_t *)w + r * w_stride), xr, n); \
        }                                                                                         \
    }
void pagoda_cpu_prep_x8(const pagoda_q8a_block *x, size_t x_stride, int nt, int64_t nb,
                        pagoda_q8x8_block *y)
{
    for (int64_t b = 0; b < nb; b++) {
        pagoda_q8x8_block *o = &y[b];
        for (int t = 0; t < 8; t++) {
            if (t >= nt) {
                for (int g = 0; g < 8; g++) memset(&o->qs[g][4 * t], 0, 4);
                o->d[t] = 0.0f;
                o->s8[t] = 0;
                continue;
            }
            const pagoda_q8a_block *xb = (const pagoda_q8a_block *)((const uint8_t *)x + t * x_stride) + b;
            int32_t sum = 0;
            for (int g = 0; g < 8; g++) memcpy(&o->qs[g][4 * t], &xb->qs[4 * g], 4);
            for (int j = 0; j < 32; j++) sum += xb->qs[j];
            o->d[t] = xb->d;
            o->s8[t] = 8 * sum;
        }
    }
}

void pagoda_cpu_prep_f32_x8(const float *x, size_t x_stride, int nt, int64_t k, float *y)
{
    for (int t = 0; t < 8; t++) {
        if (t >= nt) {
            for (int64_t i = 0; i < k; i++) y[i * 8 + t] = 0.0f;
            continue;
        }
        const float *xr = (const float *)((const uint8_t *)x + t * x_stride);
        for (int64_t i = 0; i < k; i++) y[i * 8 + t] = xr[i];
    }
}

static void swiglu_scalar(const float *g, const float *u, float *out, int64_t n)
{
    for (int64_t i = 0; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void geglu_scalar(const float *g, const float *u, float *out, int64_t n)
{
    for (int64_t i = 0; i < n; i++) out[i] = pagoda_gelu_tanh(g[i]) * u[i];
}

static void swiglu_oai_scalar(const float *g, const float *u, float alpha, float limit, float *out,
                              int64_t n)
{
    for (int64_t i = 0; i < n; i++) out[i] = pagoda_swiglu_oai1(g[i], u[i], alpha, limit);
}

static void to_f16_scalar(const float *x, uint16_t *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = pagoda_fp32_to_fp16(x[i]);
}

GEMM_BY_DOTS(gemm_q8_0_scalar, dot_q8_0_scalar, pagoda_q8a_block)
GEMM_BY_DOTS(gemm_q4_0_scalar, dot_q4_0_scalar, pagoda_q8a_block)
GEMM_BY_DOTS(gemm_f16_scalar, dot_f16_scalar, float)

const pagoda_vecdot_table pagoda_vecdot_scalar = {
    .gemm_q8_0 = gemm_q8_0_scalar,
    .gemm_q4_0 = gemm_q4_0_scalar,
    .gemm_f16 = gemm_f16_scalar,
    .to_f16 = to_f16_scalar,
    .swiglu = swiglu_scalar,
    .geglu = geglu_scalar,
    .swiglu_oai = swiglu_oai_scalar,
    .dequant = dequant_scalar,
    .quant_q8a = quant_q8a_scalar,
    .quant_q8k = quant_q8k_scalar,
    .dot_f32 = dot_f32_scalar,
    .dot_f16 = dot_f16_scalar,
    .dot_bf16 = dot_bf16_scalar,
    .dot_q8_0 = dot_q8_0_scalar,
    .dot_q4_0 = dot_q4_0_scalar,
    .dot_q4_1 = dot_q4_1_scalar,
    .dot_q6_k = dot_q6_k_scalar,
    .axpy_f32 = axpy_f32_scalar,
    .axpy_f16 = axpy_f16_scalar,
    .scores_f16 = scores_f16_scalar,
    .accum_f16 = accum_f16_scalar,
    .dot_q2_k = pagoda_cpu_dot_q2_k_scalar,
    .dot_q3_k = pagoda_cpu_dot_q3_k_scalar,
    .dot_q4_k = pagoda_cpu_dot_q4_k_scalar,
    .dot_q5_k = pagoda_cpu_dot_q5_k_scalar,
    .dot_iq4_xs = pagoda_cpu_dot_iq4_xs_scalar,
    .dot_q5_0 = dot_q5_0_scalar,
    .dot_q5_1 = dot_q5_1_scalar,
    .dot_iq4_nl = dot_iq4_nl_scalar,
    .quant_kv_q8_0 = quant_kv_q8_0_scalar,
    .scores_q8_0 = scores_q8_0_scalar,
    .accum_q8_0 = accum_q8_0_scalar,
    .dot_mxfp4 = pagoda_cpu_dot_mxfp4_scalar,
};
