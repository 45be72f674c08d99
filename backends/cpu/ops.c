/*
 * ops.c: the small per-row kernels of the forward pass: RMSNorm, RoPE,
 * SwiGLU, GeGLU, scale, add, KV store and KV block copy. They move a few KB per token,
 * next to megabytes of weights in matmul, so they stay plain C (which gcc
 * vectorizes) and single-threaded here (ops_pool.c spreads a prefill's
 * rows over the pool); the gated activations (their exp) and the F16 and
 * Q8_0 KV stores, which gcc does not vectorize, go through the vecdot
 * table (AVX2, AVX-512).
 * Not for: matmul (matmul.c) or attention (attention.c).
 */
#include "kernels.h"

#include <math.h>
#include <string.h>

#include "quant.h"
#include "vecdot.h"

#define ROW(p, stride, r) ((float *)((uint8_t *)(p) + (size_t)(r) * (stride)))
#define CROW(p, stride, r) ((const float *)((const uint8_t *)(p) + (size_t)(r) * (stride)))

void pagoda_cpu_rms_norm(const float *x, size_t x_stride, const float *w, float eps, float *out,
                         size_t out_stride, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = CROW(x, x_stride, r);
        float *o = ROW(out, out_stride, r);
        float ss = 0.0f;
        for (int64_t c = 0; c < cols; c++) ss += xr[c] * xr[c];
        float scale = 1.0f / sqrtf(ss / (float)cols + eps);
        for (int64_t c = 0; c < cols; c++) o[c] = xr[c] * scale * w[c];
    }
}

void pagoda_cpu_rope(float *x, size_t x_stride, int64_t n_tokens, int n_heads, int head_dim,
                     const int32_t *positions, const pagoda_rope_params *p)
{
    int half = p->n_rot / 2;
    float cs[512], sn[512];  /* n_rot <= 1024, checked by the caller */
    for (int64_t t = 0; t < n_tokens; t++) {
        /* The angle in double: pos * inv_freq reaches thousands of radians,
         * where a float angle is off by ~1e-4. */
        for (int i = 0; i < half; i++) {
            double a = (double)positions[t] * (double)p->inv_freq[i];
            cs[i] = (float)cos(a) * p->mscale;
            sn[i] = (float)sin(a) * p->mscale;
        }
        float *row = ROW(x, x_stride, t);
        for (int h = 0; h < n_heads; h++) {
            float *v = row + (size_t)h * head_dim;
            for (int i = 0; i < half; i++) {
                int ia = p->neox ? i : 2 * i;
                int ib = p->neox ? i + half : 2 * i + 1;
                float a = v[ia], b = v[ib];
                v[ia] = a * cs[i] - b * sn[i];
                v[ib] = a * sn[i] + b * cs[i];
            }
        }
    }
}

void pagoda_cpu_swiglu(const float *gate, size_t g_stride, const float *up, size_t u_stride,
                       float *out, size_t out_stride, int64_t rows, int64_t cols)
{
    const pagoda_vecdot_table *vt = pagoda_cpu_vecdot();
    for (int64_t r = 0; r < rows; r++) {
        const float *g = CROW(gate, g_stride, r), *u = CROW(up, u_stride, r);
        float *o = ROW(out, out_stride, r);
        vt->swiglu(g, u, o, cols);
    }
}

void pagoda_cpu_geglu(const float *gate, size_t g_stride, const float *up, size_t u_stride,
                      float *out, size_t out_stride, int64_t rows, int64_t cols)
{
    const pagoda_vecdot_table *vt = pagoda_cpu_vecdot();
    for (int64_t r = 0; r < rows; r++) {
        const float *g = CROW(gate, g_stride, r), *u = CROW(up, u_stride, r);
        float *o = ROW(out, out_stride, r);
        vt->geglu(g, u, o, cols);
    }
}

void pagoda_cpu_swiglu_oai(const float *gate, size_t g_stride, const float *up, size_t u_stride,
                           float alpha, float limit, float *out, size_t out_stride, int64_t rows,
                           int64_t cols)
{
    const pagoda_vecdot_table *vt = pagoda_cpu_vecdot();
    for (int64_t r = 0; r < rows; r++) {
        const float *g = CROW(gate, g_stride, r), *u = CROW(up, u_stride, r);
        float *o = ROW(out, out_stride, r);
        vt->swiglu_oai(g, u, alpha, limit, o, cols);
    }
}

void pagoda_cpu_scale(const float *x, size_t x_stride, float s, float *out, size_t out_stride,
                      int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = CROW(x, x_stride, r);
        float *o = ROW(out, out_stride, r);
        for (int64_t c = 0; c < cols; c++) o[c] = xr[c] * s;
    }
}

void pagoda_cpu_add(const float *a, size_t a_stride, const float *b, size_t b_stride, float *out,
                    size_t out_stride, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *ar = CROW(a, a_stride, r), *br = CROW(b, b_stride, r);
        float *o = ROW(out, out_stride, r);
        for (int64_t c = 0; c < cols; c++) o[c] = ar[c] + br[c];
    }
}

void pagoda_cpu_kv_write(void *pool, const pagoda_kv_layout *L, int layer, const float *k,
                         size_t k_stride, const float *v, size_t v_stride, const int32_t *slots,
                         int32_t n)
{
    /* A slot's K (or V) is one row of n_kv_heads * head_dim values in the
     * layout's type (Q8_0: head_dim a multiple of 32, so the row's blocks
     * are each head's blocks in order). */
    size_t row = (size_t)L->n_kv_heads * (size_t)L->head_dim, slot_bytes = pagoda_kv_slot_bytes(L);
    const pagoda_vecdot_table *vt = pagoda_cpu_vecdot();
    for (int32_t i = 0; i < n; i++) {
        int block = slots[i] / L->block_size, s = slots[i] % L->block_size;
        for (int kv = 0; kv < pagoda_kv_planes(L); kv++) {   /* latent: K only */
            const float *src = kv ? CROW(v, v_stride, i) : CROW(k, k_stride, i);
            uint8_t *dst = (uint8_t *)pool + pagoda_kv_offset(L, layer, kv, block) +
                           (size_t)s * slot_bytes;
            if (L->dtype == PAGODA_DTYPE_F32)
                memcpy(dst, src, row * sizeof(float));
            else if (L->dtype == PAGODA_DTYPE_Q8_0)
                vt->quant_kv_q8_0(src, dst, (int64_t)row);
            else
                vt->to_f16(src, (uint16_t *)dst, (int64_t)row);
        }
    }
}

void pagoda_cpu_copy_blocks(void *pool, const pagoda_kv_layout *L, const int32_t *src,
                            const int32_t *dst, int32_t n)
{
    size_t bb = pagoda_kv_block_bytes(L);
    for (int l = 0; l < L->n_layers; l++)
        for (int kv = 0; kv < pagoda_kv_planes(L); kv++)
            for (int32_t i = 0; i < n; i++) {
                if (src[i] == dst[i]) continue;
                memmove((uint8_t *)pool + pagoda_kv_offset(L, l, kv, dst[i]),
                        (uint8_t *)pool + pagoda_kv_offset(L, l, kv, src[i]), bb);
            }
}
