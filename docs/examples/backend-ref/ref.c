/*
 * ref.c: "ref", an example pagoda backend plugin built out of tree from
 * the installed SDK alone (docs/plugin-guide.md walks through it). Plain
 * C, one thread, no SIMD: every required op of pagoda_backend_ops over
 * host memory, and the optional ones Gemma 3 needs (ABI 1.1), written to
 * be read rather than to be fast. Weight types
 * F32, F16 and Q8_0; KV cache F32 or F16.
 * Not for: speed (see backends/cpu). It includes only the SDK headers (pagoda/...): a plugin
 * never includes the server's internal headers or links the server.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pagoda/pagoda.h"

/* Buffers are plain host allocations; the core only ever sees the pointer. */
struct pagoda_buffer {
    unsigned char *data;
    size_t size;
};

typedef struct ref_ctx {
    const pagoda_host *host; /* valid until destroy(); errors go through host->error */
    bool trace;
} ref_ctx;

/* Report through the host so the core can print the message with the
 * plugin's name; returns the status so an op can `return ERR(...)`. */
#define ERR(c, st, ...) ((c)->host->error((c)->host, (st), __VA_ARGS__))

/* ----------------------------------------------------------- numbers */

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalize */
            exp = 113;
            while (!(man & 0x400)) { man <<= 1; exp--; }
            bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Round to nearest even, as IEEE conversions do. */
static uint16_t float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffff;
    if (ax >= 0x7f800000) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000 ? 0x200 : 0));
    if (ax >= 0x477ff000) return (uint16_t)(sign | 0x7c00); /* rounds past 65504: inf */
    if (ax < 0x38800000) {                                  /* subnormal half or zero */
        if (ax < 0x33000000) return (uint16_t)sign;
        uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((ax >> 13) - (112u << 10));
    uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

/* Q8_0: blocks of 32 values, an f16 scale then 32 int8. */
typedef struct { uint16_t d; int8_t q[32]; } block_q8_0;

/* One weight row of `cols` values, decoded to f32. */
static void decode_row(int dtype, const unsigned char *row, int64_t cols, float *out)
{
    switch (dtype) {
    case PAGODA_DTYPE_F32:
        memcpy(out, row, (size_t)cols * 4);
        break;
    case PAGODA_DTYPE_F16:
        for (int64_t i = 0; i < cols; i++) {
            uint16_t h;
            memcpy(&h, row + 2 * i, 2);
            out[i] = half_to_float(h);
        }
        break;
    case PAGODA_DTYPE_Q8_0:
        for (int64_t b = 0; b < cols / 32; b++) {
            block_q8_0 blk;
            memcpy(&blk, row + (size_t)b * sizeof blk, sizeof blk);
            float d = half_to_float(blk.d);
            for (int i = 0; i < 32; i++) out[b * 32 + i] = d * (float)blk.q[i];
        }
        break;
    }
}

static bool weight_type_ok(int dtype)
{
    return dtype == PAGODA_DTYPE_F32 || dtype == PAGODA_DTYPE_F16 || dtype == PAGODA_DTYPE_Q8_0;
}

/* ------------------------------------------------------- validation */

/* Validate at the boundary, then trust inside: a tensor must fit its buffer. */
static int check(ref_ctx *c, const char *op, const char *what, const pagoda_tensor *t, int dtype)
{
    if (!t || !t->buf) return ERR(c, PAGODA_ERR_INVALID, "%s: %s is NULL", op, what);
    if (dtype >= 0 && t->dtype != dtype)
        return ERR(c, PAGODA_ERR_INVALID, "%s: %s is %s, expected %s", op, what,
                   pagoda_dtype_name(t->dtype), pagoda_dtype_name(dtype));
    size_t rb = pagoda_dtype_row_bytes(t->dtype, t->cols);
    if (t->rows < 0 || t->cols <= 0 || !rb)
        return ERR(c, PAGODA_ERR_INVALID, "%s: %s: %lld x %lld of %s is not a valid shape", op, what,
                   (long long)t->rows, (long long)t->cols, pagoda_dtype_name(t->dtype));
    if (t->rows > 1 && t->row_stride < rb)
        return ERR(c, PAGODA_ERR_INVALID, "%s: %s row_stride %zu < row size %zu", op, what, t->row_stride, rb);
    size_t need = t->rows ? t->offset + (size_t)(t->rows - 1) * t->row_stride + rb : t->offset;
    if (need > t->buf->size)
        return ERR(c, PAGODA_ERR_INVALID, "%s: %s needs %zu bytes, its buffer has %zu", op, what, need,
                   t->buf->size);
    return PAGODA_OK;
}

static int check_same(ref_ctx *c, const char *op, const pagoda_tensor *a, const pagoda_tensor *b)
{
    if (a->rows != b->rows || a->cols != b->cols)
        return ERR(c, PAGODA_ERR_INVALID, "%s: shapes %lld x %lld and %lld x %lld differ", op,
                   (long long)a->rows, (long long)a->cols, (long long)b->rows, (long long)b->cols);
    return PAGODA_OK;
}

static int check_kv(ref_ctx *c, const char *op, const pagoda_buffer *kv, const pagoda_kv_layout *L,
                    int layer)
{
    if (!kv || !L) return ERR(c, PAGODA_ERR_INVALID, "%s: NULL KV buffer or layout", op);
    if (L->dtype != PAGODA_DTYPE_F32 && L->dtype != PAGODA_DTYPE_F16)
        return ERR(c, PAGODA_ERR_UNSUPPORTED, "%s: KV type %s; ref stores F32 or F16", op,
                   pagoda_dtype_name(L->dtype));
    if (L->n_layers <= 0 || L->n_blocks <= 0 || L->block_size <= 0 || L->n_kv_heads <= 0 ||
        L->head_dim <= 0 || pagoda_kv_pool_bytes(L) > kv->size)
        return ERR(c, PAGODA_ERR_INVALID, "%s: KV layout does not fit its %zu-byte buffer", op, kv->size);
    if (layer < 0 || layer >= L->n_layers)
        return ERR(c, PAGODA_ERR_INVALID, "%s: layer %d outside 0..%d", op, layer, L->n_layers - 1);
    return PAGODA_OK;
}

#define TRY(x) do { int st_ = (x); if (st_) return st_; } while (0)
#define ROW(t, r) ((t)->buf->data + (t)->offset + (size_t)(r) * (t)->row_stride)
#define FROW(t, r) ((float *)ROW(t, r))

/* ------------------------------------------------------------- info */

static int ref_info(void *ctx, pagoda_backend_info *info)
{
    /* Write only as much as the core's struct holds (it sets struct_size). */
    pagoda_backend_info o;
    memset(&o, 0, sizeof o);
    size_t n = info->struct_size && info->struct_size < sizeof o ? info->struct_size : sizeof o;
    o.struct_size = n;
    snprintf(o.name, sizeof o.name, "ref (plain C reference, 1 thread)");
    o.mem_total = o.mem_free = 0; /* unknown: the core plans from its own budget */
    o.alignment = 16;
    o.weight_types = (1ull << PAGODA_DTYPE_F32) | (1ull << PAGODA_DTYPE_F16) | (1ull << PAGODA_DTYPE_Q8_0);
    o.kv_types = (1ull << PAGODA_DTYPE_F32) | (1ull << PAGODA_DTYPE_F16);
    o.host_memory = true;
    memcpy(info, &o, n);
    return PAGODA_OK;
}

/* ---------------------------------------------------------- buffers */

static int ref_buffer_alloc(void *ctx, int purpose, size_t size, pagoda_buffer **out)
{
    ref_ctx *c = ctx;
    if (!out) return ERR(c, PAGODA_ERR_INVALID, "buffer_alloc: out is NULL");
    pagoda_buffer *b = calloc(1, sizeof *b);
    if (b) b->data = malloc(size ? size : 1);
    if (!b || !b->data) {
        free(b);
        return ERR(c, PAGODA_ERR_NOMEM, "buffer_alloc: cannot allocate %zu bytes", size);
    }
    b->size = size;
    *out = b;
    return PAGODA_OK;
}

static void ref_buffer_free(void *ctx, pagoda_buffer *b)
{
    if (!b) return;
    free(b->data);
    free(b);
}

static int ref_upload(void *ctx, pagoda_buffer *b, size_t off, const void *src, size_t size)
{
    ref_ctx *c = ctx;
    if (!b || (size && !src) || off > b->size || size > b->size - off)
        return ERR(c, PAGODA_ERR_INVALID, "upload: %zu bytes at %zu do not fit the buffer", size, off);
    if (size) memcpy(b->data + off, src, size);
    return PAGODA_OK;
}

static int ref_download(void *ctx, const pagoda_buffer *b, size_t off, void *dst, size_t size)
{
    ref_ctx *c = ctx;
    if (!b || (size && !dst) || off > b->size || size > b->size - off)
        return ERR(c, PAGODA_ERR_INVALID, "download: %zu bytes at %zu do not fit the buffer", size, off);
    if (size) memcpy(dst, b->data + off, size);
    return PAGODA_OK;
}

/* ---------------------------------------------------------- kernels */

static int ref_get_rows(void *ctx, const pagoda_tensor *table, const int32_t *ids, int32_t n,
                        const pagoda_tensor *out)
{
    ref_ctx *c = ctx;
    TRY(check(c, "get_rows", "table", table, -1));
    TRY(check(c, "get_rows", "out", out, PAGODA_DTYPE_F32));
    if (!weight_type_ok(table->dtype))
        return ERR(c, PAGODA_ERR_UNSUPPORTED, "get_rows: table type %s", pagoda_dtype_name(table->dtype));
    if (n < 0 || (n && !ids) || out->rows < n || out->cols != table->cols)
        return ERR(c, PAGODA_ERR_INVALID, "get_rows: %d ids into %lld x %lld", n,
                   (long long)out->rows, (long long)out->cols);
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= table->rows)
            return ERR(c, PAGODA_ERR_INVALID, "get_rows: id %d outside 0..%lld", ids[i],
                       (long long)table->rows - 1);
        decode_row(table->dtype, ROW(table, ids[i]), table->cols, FROW(out, i));
    }
    return PAGODA_OK;
}

static int ref_rms_norm(void *ctx, const pagoda_tensor *x, const pagoda_tensor *w, float eps,
                        const pagoda_tensor *out)
{
    ref_ctx *c = ctx;
    TRY(check(c, "rms_norm", "x", x, PAGODA_DTYPE_F32));
    TRY(check(c, "rms_norm", "w", w, PAGODA_DTYPE_F32));
    TRY(check(c, "rms_norm", "out", out, PAGODA_DTYPE_F32));
    TRY(check_same(c, "rms_norm", x, out));
    if (w->cols != x->cols) return ERR(c, PAGODA_ERR_INVALID, "rms_norm: w and x widths differ");
    const float *wv = FROW(w, 0);
    for (int64_t r = 0; r < x->rows; r++) {
        const float *xr = FROW(x, r);
        float *o = FROW(out, r);
        double ss = 0;
        for (int64_t j = 0; j < x->cols; j++) ss += (double)xr[j] * xr[j];
        float scale = (float)(1.0 / sqrt(ss / (double)x->cols + eps));
        for (int64_t j = 0; j < x->cols; j++) o[j] = xr[j] * scale * wv[j]; /* out may alias x */
    }
    return PAGODA_OK;
}

static int ref_matmul(void *ctx, const pagoda_tensor *x, const pagoda_tensor *w,
                      const pagoda_tensor *bias, const pagoda_tensor *out)
{
    ref_ctx *c = ctx;
    TRY(check(c, "matmul", "x", x, PAGODA_DTYPE_F32));
    TRY(check(c, "matmul", "w", w, -1));
    TRY(check(c, "matmul", "out", out, PAGODA_DTYPE_F32));
    if (!weight_type_ok(w->dtype))
        return ERR(c, PAGODA_ERR_UNSUPPORTED, "matmul: weight type %s (ref does F32, F16, Q8_0)",
                   pagoda_dtype_name(w->dtype));
    if (w->cols != x->cols || out->rows != x->rows || out->cols != w->rows)
        return ERR(c, PAGODA_ERR_INVALID, "matmul: x %lld x %lld, w %lld x %lld, out %lld x %lld",
                   (long long)x->rows, (long long)x->cols, (long long)w->rows, (long long)w->cols,
                   (long long)out->rows, (long long)out->cols);
    if (bias) {
        TRY(check(c, "matmul", "bias", bias, PAGODA_DTYPE_F32));
        if (bias->cols != w->rows) return ERR(c, PAGODA_ERR_INVALID, "matmul: bias width %lld != N %lld",
                                              (long long)bias->cols, (long long)w->rows);
    }
    float *wrow = malloc(sizeof(float) * (size_t)w->cols);
    if (!wrow) return ERR(c, PAGODA_ERR_NOMEM, "matmul: out of memory");
    /* One weight row decoded at a time, dotted with every token. */
    for (int64_t n = 0; n < w->rows; n++) {
        decode_row(w->dtype, ROW(w, n), w->cols, wrow);
        float b = bias ? FROW(bias, 0)[n] : 0.0f;
        for (int64_t t = 0; t < x->rows; t++) {
            const float *xr = FROW(x, t);
            float s = 0.0f;
            for (int64_t k = 0; k < x->cols; k++) s += xr[k] * wrow[k];
            FROW(out, t)[n] = s + b;
        }
    }
    free(wrow);
    return PAGODA_OK;
}

static int ref_rope(void *ctx, const pagoda_tensor *x, int32_t n_heads, int32_t head_dim,
                    const int32_t *pos, const pagoda_rope_params *p)
{
    ref_ctx *c = ctx;
    TRY(check(c, "rope", "x", x, PAGODA_DTYPE_F32));
    if (!p || !p->inv_freq || (x->rows && !pos) || n_heads <= 0 || head_dim <= 0 ||
        (int64_t)n_heads * head_dim > x->cols || p->n_rot < 0 || p->n_rot % 2 || p->n_rot > head_dim)
        return ERR(c, PAGODA_ERR_INVALID, "rope: bad parameters (%d heads x %d, n_rot %d, %lld cols)",
                   n_heads, head_dim, p ? p->n_rot : -1, (long long)x->cols);
    int half = p->n_rot / 2;
    for (int64_t t = 0; t < x->rows; t++) {
        float *row = FROW(x, t);
        for (int h = 0; h < n_heads; h++) {
            float *v = row + (size_t)h * head_dim;
            for (int i = 0; i < half; i++) {
                /* the angle in double: positions reach the thousands */
                double ang = (double)pos[t] * (double)p->inv_freq[i];
                float cs = (float)cos(ang) * p->mscale, sn = (float)sin(ang) * p->mscale;
                int a = p->neox ? i : 2 * i, b = p->neox ? i + half : 2 * i + 1;
                float va = v[a], vb = v[b];
                v[a] = va * cs - vb * sn;
                v[b] = va * sn + vb * cs;
            }
        }
    }
    return PAGODA_OK;
}

/* Address of (layer, K or V, slot, KV head) in the pool. */
static unsigned char *kv_at(const pagoda_buffer *kv, const pagoda_kv_layout *L, int layer, int which,
                            int32_t slot, int head)
{
    size_t elt = L->dtype == PAGODA_DTYPE_F32 ? 4 : 2;
    return kv->data + pagoda_kv_offset(L, layer, which, slot / L->block_size) +
           (((size_t)(slot % L->block_size) * (size_t)L->n_kv_heads + (size_t)head) * (size_t)L->head_dim) * elt;
}

static float kv_get(const pagoda_kv_layout *L, const unsigned char *p, int d)
{
    if (L->dtype == PAGODA_DTYPE_F32) {
        float f;
        memcpy(&f, p + 4 * d, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * d, 2);
    return half_to_float(h);
}

static int ref_kv_write(void *ctx, pagoda_buffer *kv, const pagoda_kv_layout *L, int32_t layer,
                        const pagoda_tensor *k, const pagoda_tensor *v, const int32_t *slots, int32_t n)
{
    ref_ctx *c = ctx;
    TRY(check_kv(c, "kv_write", kv, L, layer));
    TRY(check(c, "kv_write", "k", k, PAGODA_DTYPE_F32));
    TRY(check(c, "kv_write", "v", v, PAGODA_DTYPE_F32));
    int64_t width = (int64_t)L->n_kv_heads * L->head_dim;
    if (n < 0 || (n && !slots) || k->rows < n || v->rows < n || k->cols != width || v->cols != width)
        return ERR(c, PAGODA_ERR_INVALID, "kv_write: %d tokens of width %lld into KV rows of %lld", n,
                   (long long)k->cols, (long long)width);
    for (int32_t i = 0; i < n; i++) {
        if (slots[i] < 0 || slots[i] >= L->n_blocks * L->block_size)
            return ERR(c, PAGODA_ERR_INVALID, "kv_write: slot %d outside the pool", slots[i]);
        for (int which = 0; which < 2; which++) {
            const float *src = FROW(which ? v : k, i);
            unsigned char *dst = kv_at(kv, L, layer, which, slots[i], 0);
            for (int64_t j = 0; j < width; j++) {
                if (L->dtype == PAGODA_DTYPE_F32) {
                    memcpy(dst + 4 * j, &src[j], 4);
                } else {
                    uint16_t h = float_to_half(src[j]);
                    memcpy(dst + 2 * j, &h, 2);
                }
            }
        }
    }
    return PAGODA_OK;
}

/* attention and attention_ext: window 0 sees every earlier key, window W
 * only the keys j with 0 <= p - j < W. */
static int attention_window(ref_ctx *c, const pagoda_tensor *q, const pagoda_buffer *kv,
                            const pagoda_kv_layout *L, int32_t layer, const pagoda_batch *b,
                            int32_t n_heads, float scale, int32_t window, const pagoda_tensor *out)
{
    TRY(check_kv(c, "attention", kv, L, layer));
    TRY(check(c, "attention", "q", q, PAGODA_DTYPE_F32));
    TRY(check(c, "attention", "out", out, PAGODA_DTYPE_F32));
    TRY(check_same(c, "attention", q, out));
    if (!b || (b->n_seqs && !b->seqs) || n_heads <= 0 || n_heads % L->n_kv_heads ||
        (int64_t)n_heads * L->head_dim != q->cols)
        return ERR(c, PAGODA_ERR_INVALID, "attention: %d heads do not match the layout / q", n_heads);
    int hd = L->head_dim, group = n_heads / L->n_kv_heads;
    int32_t max_ctx = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const pagoda_seq_view *sv = &b->seqs[s];
        if (sv->n_q < 0 || sv->q_start < 0 || sv->q_start + sv->n_q > q->rows || sv->n_q > sv->ctx_len ||
            (int64_t)sv->n_blocks * L->block_size < sv->ctx_len || (sv->n_blocks && !sv->block_table))
            return ERR(c, PAGODA_ERR_INVALID, "attention: sequence %d does not fit the batch", s);
        for (int32_t i = 0; i < (sv->ctx_len + L->block_size - 1) / L->block_size; i++)
            if (sv->block_table[i] < 0 || sv->block_table[i] >= L->n_blocks)
                return ERR(c, PAGODA_ERR_INVALID, "attention: sequence %d block %d outside the pool", s, i);
        if (sv->ctx_len > max_ctx) max_ctx = sv->ctx_len;
    }
    float *p = malloc(sizeof(float) * (size_t)(max_ctx ? max_ctx : 1));
    if (!p) return ERR(c, PAGODA_ERR_NOMEM, "attention: out of memory");
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const pagoda_seq_view *sv = &b->seqs[s];
        for (int32_t i = 0; i < sv->n_q; i++) {
            int32_t n_keys = sv->ctx_len - sv->n_q + i + 1; /* causal: up to its own position */
            int32_t j0 = window > 0 && n_keys > window ? n_keys - window : 0;
            const float *qr = FROW(q, sv->q_start + i);
            float *o = FROW(out, sv->q_start + i);
            for (int h = 0; h < n_heads; h++) {
                const float *qh = qr + (size_t)h * hd;
                int kvh = h / group;
                float m = -INFINITY, sum = 0.0f;
                for (int32_t j = j0; j < n_keys; j++) {
                    int32_t slot = sv->block_table[j / L->block_size] * L->block_size + j % L->block_size;
                    const unsigned char *kp = kv_at(kv, L, layer, 0, slot, kvh);
                    float d = 0.0f;
                    for (int e = 0; e < hd; e++) d += qh[e] * kv_get(L, kp, e);
                    p[j] = d * scale;
                    if (p[j] > m) m = p[j];
                }
                for (int32_t j = j0; j < n_keys; j++) {
                    p[j] = expf(p[j] - m);
                    sum += p[j];
                }
                float *oh = o + (size_t)h * hd;
                for (int e = 0; e < hd; e++) oh[e] = 0.0f;
                for (int32_t j = j0; j < n_keys; j++) {
                    int32_t slot = sv->block_table[j / L->block_size] * L->block_size + j % L->block_size;
                    const unsigned char *vp = kv_at(kv, L, layer, 1, slot, kvh);
                    for (int e = 0; e < hd; e++) oh[e] += p[j] / sum * kv_get(L, vp, e);
                }
            }
        }
    }
    free(p);
    return PAGODA_OK;
}

static int ref_attention(void *ctx, const pagoda_tensor *q, const pagoda_buffer *kv,
                         const pagoda_kv_layout *L, int32_t layer, const pagoda_batch *b,
                         int32_t n_heads, float scale, const pagoda_tensor *out)
{
    return attention_window(ctx, q, kv, L, layer, b, n_heads, scale, 0, out);
}

/* Optional (ABI 1.1): attention with a sliding window, for Gemma 3. */
static int ref_attention_ext(void *ctx, const pagoda_tensor *q, const pagoda_buffer *kv,
                             const pagoda_kv_layout *L, int32_t layer, const pagoda_batch *b,
                             const pagoda_attn_params *p, const pagoda_tensor *out)
{
    ref_ctx *c = ctx;
    /* read a field only when the caller's struct_size covers it */
    if (!p || p->struct_size < offsetof(pagoda_attn_params, window) + sizeof p->window ||
        p->window < 0)
        return ERR(c, PAGODA_ERR_INVALID, "attention_ext: bad parameters");
    return attention_window(c, q, kv, L, layer, b, p->n_heads, p->scale, p->window, out);
}

/* Optional (ABI 1.1): GeGLU, Gemma's feed-forward: gelu_tanh(gate) * up. */
static int ref_geglu(void *ctx, const pagoda_tensor *g, const pagoda_tensor *u, const pagoda_tensor *out)
{
    ref_ctx *c = ctx;
    TRY(check(c, "geglu", "gate", g, PAGODA_DTYPE_F32));
    TRY(check(c, "geglu", "up", u, PAGODA_DTYPE_F32));
    TRY(check(c, "geglu", "out", out, PAGODA_DTYPE_F32));
    TRY(check_same(c, "geglu", g, u));
    TRY(check_same(c, "geglu", g, out));
    for (int64_t r = 0; r < g->rows; r++)
        for (int64_t j = 0; j < g->cols; j++) {
            float x = FROW(g, r)[j];
            float y = 0.7978845608f * (x + 0.044715f * x * x * x);
            FROW(out, r)[j] = 0.5f * x * (1.0f + tanhf(y)) * FROW(u, r)[j];
        }
    return PAGODA_OK;
}

/* Optional (ABI 1.1): without it the core scales on the host. */
static int ref_scale(void *ctx, const pagoda_tensor *x, float s, const pagoda_tensor *out)
{
    ref_ctx *c = ctx;
    TRY(check(c, "scale", "x", x, PAGODA_DTYPE_F32));
    TRY(check(c, "scale", "out", out, PAGODA_DTYPE_F32));
    TRY(check_same(c, "scale", x, out));
    for (int64_t r = 0; r < x->rows; r++)
        for (int64_t j = 0; j < x->cols; j++) FROW(out, r)[j] = FROW(x, r)[j] * s;
    return PAGODA_OK;
}

static int ref_swiglu(void *ctx, const pagoda_tensor *g, const pagoda_tensor *u, const pagoda_tensor *out)
{
    ref_ctx *c = ctx;
    TRY(check(c, "swiglu", "gate", g, PAGODA_DTYPE_F32));
    TRY(check(c, "swiglu", "up", u, PAGODA_DTYPE_F32));
    TRY(check(c, "swiglu", "out", out, PAGODA_DTYPE_F32));
    TRY(check_same(c, "swiglu", g, u));
    TRY(check_same(c, "swiglu", g, out));
    for (int64_t r = 0; r < g->rows; r++)
        for (int64_t j = 0; j < g->cols; j++) {
            float gv = FROW(g, r)[j];
            FROW(out, r)[j] = gv / (1.0f + expf(-gv)) * FROW(u, r)[j];
        }
    return PAGODA_OK;
}

static int ref_add(void *ctx, const pagoda_tensor *a, const pagoda_tensor *b, const pagoda_tensor *out)
{
    ref_ctx *c = ctx;
    TRY(check(c, "add", "a", a, PAGODA_DTYPE_F32));
    TRY(check(c, "add", "b", b, PAGODA_DTYPE_F32));
    TRY(check(c, "add", "out", out, PAGODA_DTYPE_F32));
    TRY(check_same(c, "add", a, b));
    TRY(check_same(c, "add", a, out));
    for (int64_t r = 0; r < a->rows; r++)
        for (int64_t j = 0; j < a->cols; j++) FROW(out, r)[j] = FROW(a, r)[j] + FROW(b, r)[j];
    return PAGODA_OK;
}

/* Optional: without it the core would download and upload each block. */
static int ref_copy_blocks(void *ctx, pagoda_buffer *kv, const pagoda_kv_layout *L, const int32_t *src,
                           const int32_t *dst, int32_t n)
{
    ref_ctx *c = ctx;
    TRY(check_kv(c, "copy_blocks", kv, L, 0));
    if (n < 0 || (n && (!src || !dst))) return ERR(c, PAGODA_ERR_INVALID, "copy_blocks: bad lists");
    size_t bb = pagoda_kv_block_bytes(L);
    for (int32_t i = 0; i < n; i++) {
        if (src[i] < 0 || src[i] >= L->n_blocks || dst[i] < 0 || dst[i] >= L->n_blocks)
            return ERR(c, PAGODA_ERR_INVALID, "copy_blocks: %d -> %d outside the pool", src[i], dst[i]);
        for (int l = 0; l < L->n_layers; l++)
            for (int which = 0; which < 2; which++)
                memmove(kv->data + pagoda_kv_offset(L, l, which, dst[i]),
                        kv->data + pagoda_kv_offset(L, l, which, src[i]), bb);
    }
    return PAGODA_OK;
}

/* --------------------------------------------------------- the plugin */

static int ref_create(const pagoda_host *host, void **ctx, char *err, size_t err_len)
{
    ref_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_len, "ref: out of memory");
        return PAGODA_ERR_NOMEM;
    }
    c->host = host;
    c->trace = host->config_bool(host, "trace", false); /* [backend.ref] trace = true */
    if (c->trace) host->log(host, PAGODA_LOG_INFO, "ref backend: plain C, one thread");
    *ctx = c;
    return PAGODA_OK;
}

static void ref_destroy(void *ctx)
{
    free(ctx);
}

static const pagoda_backend_ops ref_ops = {
    .struct_size = sizeof(pagoda_backend_ops),
    .info = ref_info,
    .buffer_alloc = ref_buffer_alloc,
    .buffer_free = ref_buffer_free,
    .upload = ref_upload,
    .download = ref_download,
    .weights_from_host = NULL, /* optional: the core falls back to alloc + upload */
    .get_rows = ref_get_rows,
    .rms_norm = ref_rms_norm,
    .matmul = ref_matmul,
    .rope = ref_rope,
    .kv_write = ref_kv_write,
    .attention = ref_attention,
    .swiglu = ref_swiglu,
    .add = ref_add,
    .copy_blocks = ref_copy_blocks,
    .synchronize = NULL,       /* optional: every op above is synchronous */
    .geglu = ref_geglu,        /* ABI 1.1, optional: Gemma 3's FFN */
    .scale = ref_scale,        /* ABI 1.1, optional */
    .attention_ext = ref_attention_ext, /* ABI 1.1, optional: sliding windows */
};

static const pagoda_config_key ref_keys[] = {
    {.name = "trace", .type = PAGODA_KEY_BOOL, .default_str = "false",
     .help = "log a line when the backend starts"},
    {.name = NULL},
};

static const pagoda_plugin_desc ref_desc = {
    PAGODA_DESC_HEADER(PAGODA_KIND_BACKEND),
    .name = "ref",
    .version = "1.0.0",
    .description = "example out-of-tree backend: plain C reference kernels (F32, F16, Q8_0)",
    .config_keys = ref_keys,
    .probe = NULL, /* runs anywhere: score 100 */
    .create = ref_create,
    .destroy = ref_destroy,
    .ops = &ref_ops,
};

PAGODA_PLUGIN(ref_desc)
