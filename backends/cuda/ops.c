/*
 * ops.c: the CUDA backend's ops other than matmul: get_rows, rms_norm,
 * rope, kv_write, attention, swiglu, add, copy_blocks. Each validates its
 * tensors and ranges on the host, uploads its metadata (ids, positions,
 * slots, block tables) through the metadata caches, then enqueues one
 * kernel of kernels.cu on the stream.
 *
 * Not for: matmul (matmul.c), the kernels themselves (kernels.cu).
 */
#include <stdlib.h>

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "verified.h"

int cuda_get_rows(void *ctx, const pagoda_tensor *table, const int32_t *ids, int32_t n,
                  const pagoda_tensor *out)
{
    cuda_ctx *c = ctx;
    uint8_t *tp, *op;
    void *d_ids;
    TRY(tensor_at(c, table, "get_rows table", -1, &tp));
    TRY(tensor_at(c, out, "get_rows out", PAGODA_DTYPE_F32, &op));
    if (n > 0 && !ids) return BAD("get_rows: no ids");
    if (n < 0 || out->rows < n || out->cols != table->cols)
        return BAD("get_rows: out is %lld x %lld, expected at least %d x %lld",
                   (long long)out->rows, (long long)out->cols, n, (long long)table->cols);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= table->rows)
            return BAD("get_rows: id %d at %d outside the table's 0..%lld", ids[i], i,
                       (long long)table->rows - 1);
    if (n == 0) return PAGODA_OK;
    CU(cudaSetDevice(c->device));
    TRY(meta_upload(c, &c->m_ids, ids, (size_t)n * sizeof *ids, &d_ids));
    CU(pcu_get_rows(c->stream, tp, table->row_stride, table->dtype, d_ids, n, table->cols,
                    (float *)op, ld_of(out, 4)));
    return PAGODA_OK;
}

int cuda_rms_norm(void *ctx, const pagoda_tensor *x, const pagoda_tensor *w, float eps,
                  const pagoda_tensor *out)
{
    cuda_ctx *c = ctx;
    uint8_t *xp, *wp, *op;
    TRY(tensor_at(c, x, "rms_norm x", PAGODA_DTYPE_F32, &xp));
    TRY(tensor_at(c, w, "rms_norm w", PAGODA_DTYPE_F32, &wp));
    TRY(tensor_at(c, out, "rms_norm out", PAGODA_DTYPE_F32, &op));
    if (w->cols != x->cols || w->rows < 1 || out->rows != x->rows || out->cols != x->cols)
        return BAD("rms_norm: x %lld x %lld, w %lld x %lld, out %lld x %lld do not match",
                   (long long)x->rows, (long long)x->cols, (long long)w->rows,
                   (long long)w->cols, (long long)out->rows, (long long)out->cols);
    CU(cudaSetDevice(c->device));
    CU(pcu_rms_norm(c->stream, (const float *)xp, ld_of(x, 4), (const float *)wp, eps, x->rows,
                    x->cols, (float *)op, ld_of(out, 4)));
    return PAGODA_OK;
}

int cuda_rope(void *ctx, const pagoda_tensor *x, int32_t n_heads, int32_t head_dim,
              const int32_t *positions, const pagoda_rope_params *p)
{
    cuda_ctx *c = ctx;
    uint8_t *xp;
    void *d_pos, *d_freq;
    TRY(tensor_at(c, x, "rope x", PAGODA_DTYPE_F32, &xp));
    if (!p || n_heads <= 0 || head_dim <= 0 || (int64_t)n_heads * head_dim > x->cols)
        return BAD("rope: %d heads x %d dims do not fit rows of %lld values", n_heads, head_dim,
                   (long long)x->cols);
    if (p->n_rot < 0 || p->n_rot % 2 || p->n_rot > head_dim || (p->n_rot && !p->inv_freq))
        return BAD("rope: n_rot %d must be even and within 0..%d, with inv_freq", p->n_rot,
                   head_dim);
    if (x->rows == 0 || p->n_rot == 0) return PAGODA_OK;
    if (!positions) return BAD("rope: no positions");
    CU(cudaSetDevice(c->device));
    TRY(meta_upload(c, &c->m_pos, positions, (size_t)x->rows * sizeof *positions, &d_pos));
    TRY(meta_upload(c, &c->m_freq, p->inv_freq, (size_t)(p->n_rot / 2) * sizeof(float), &d_freq));
    CU(pcu_rope(c->stream, (float *)xp, ld_of(x, 4), (int32_t)x->rows, n_heads, head_dim,
                d_pos, d_freq, p->n_rot, p->neox, p->mscale));
    return PAGODA_OK;
}

int cuda_kv_write(void *ctx, pagoda_buffer *kv, const pagoda_kv_layout *L, int32_t layer,
                  const pagoda_tensor *k, const pagoda_tensor *v, const int32_t *slots,
                  int32_t n)
{
    cuda_ctx *c = ctx;
    uint8_t *kp, *vp;
    void *d_slots;
    TRY(layout_ok(c, kv, L, layer));
    bool latent = L->kind == PAGODA_KV_LATENT; /* k only: the row is the key and the value */
    if (latent) TRY(op_gate(c, PCU_OP_KV_LATENT));
    TRY(tensor_at(c, k, "kv_write k", PAGODA_DTYPE_F32, &kp));
    if (latent)
        v = k, vp = kp;
    else
        TRY(tensor_at(c, v, "kv_write v", PAGODA_DTYPE_F32, &vp));
    int64_t row = (int64_t)L->n_kv_heads * L->head_dim;
    if (n < 0 || k->rows < n || v->rows < n || k->cols != row || v->cols != row)
        return BAD("kv_write: k %lld x %lld, v %lld x %lld for %d tokens of %lld values",
                   (long long)k->rows, (long long)k->cols, (long long)v->rows,
                   (long long)v->cols, n, (long long)row);
    if (n > 0 && !slots) return BAD("kv_write: no slots");
    int64_t n_slots = (int64_t)L->n_blocks * L->block_size;
    for (int32_t i = 0; i < n; i++)
        if (slots[i] < 0 || slots[i] >= n_slots)
            return BAD("kv_write: slot %d of token %d outside 0..%lld", slots[i], i,
                       (long long)n_slots - 1);
    if (n == 0) return PAGODA_OK;
    CU(cudaSetDevice(c->device));
    TRY(meta_upload(c, &c->m_slots, slots, (size_t)n * sizeof *slots, &d_slots));
    uint8_t *pool = kv->ptr;
    /* latent: one plane; writing the same row twice to it is harmless */
    CU(pcu_kv_write(c->stream, pool + pagoda_kv_offset(L, layer, 0, 0),
                    pool + pagoda_kv_offset(L, layer, latent ? 0 : 1, 0), L->dtype, L->block_size,
                    pagoda_kv_block_bytes(L), pagoda_kv_slot_bytes(L), row, (const float *)kp,
                    ld_of(k, 4), (const float *)vp, ld_of(v, 4), d_slots, n));
    return PAGODA_OK;
}

/* attention and attention_ext: window 0 is causal over every key. */
static int attend(cuda_ctx *c, const pagoda_tensor *q, const pagoda_buffer *kv,
                  const pagoda_kv_layout *L, int32_t layer, const pagoda_batch *b,
                  int32_t n_heads, float scale, int32_t window, const float *sinks,
                  const pagoda_tensor *out)
{
    uint8_t *qp, *op;
    TRY(layout_ok(c, kv, L, layer));
    if (L->kind == PAGODA_KV_LATENT) TRY(op_gate(c, PCU_OP_KV_LATENT));
    TRY(tensor_at(c, q, "attention q", PAGODA_DTYPE_F32, &qp));
    TRY(tensor_at(c, out, "attention out", PAGODA_DTYPE_F32, &op));
    if (!b || b->n_tokens < 0 || b->n_seqs < 0 || (b->n_seqs && !b->seqs))
        return BAD("attention: no batch");
    int hd = L->head_dim;
    if (n_heads <= 0 || n_heads % L->n_kv_heads || q->cols != (int64_t)n_heads * hd ||
        out->cols != q->cols || q->rows < b->n_tokens || out->rows < b->n_tokens)
        return BAD("attention: q %lld x %lld / out %lld x %lld for %d tokens, %d heads (a "
                   "multiple of %d KV heads) of %d dims", (long long)q->rows,
                   (long long)q->cols, (long long)out->rows, (long long)out->cols, b->n_tokens,
                   n_heads, L->n_kv_heads, hd);
    if (b->n_tokens == 0) return PAGODA_OK;

    /* Per token: keys it sees and where its table starts; then the tables
     * (only the blocks covering ctx_len). */
    size_t n_bt = 0;
    int32_t next_q = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const pagoda_seq_view *sv = &b->seqs[s];
        if (sv->q_start != next_q || sv->n_q < 0 || sv->ctx_len < sv->n_q ||
            (int64_t)sv->n_blocks * L->block_size < sv->ctx_len || (sv->n_blocks && !sv->block_table))
            return BAD("attention: sequence %d (q_start %d, n_q %d, ctx_len %d, %d blocks of %d) "
                       "is not the next rows %d.. of the batch or its blocks do not hold its "
                       "context", s, sv->q_start, sv->n_q, sv->ctx_len, sv->n_blocks,
                       L->block_size, next_q);
        next_q += sv->n_q;
        n_bt += (size_t)((sv->ctx_len + L->block_size - 1) / L->block_size);
    }
    if (next_q != b->n_tokens)
        return BAD("attention: the sequences cover %d rows, the batch has %d tokens", next_q,
                   b->n_tokens);
    size_t words = 2 * (size_t)b->n_tokens + n_bt;
    if (words > c->hmeta_cap) {
        int32_t *h = realloc(c->hmeta, words * 2 * sizeof *h);
        if (!h) return c->host->error(c->host, PAGODA_ERR_NOMEM, "cuda: attention metadata");
        c->hmeta = h;
        c->hmeta_cap = words * 2;
    }
    int32_t *kvlen = c->hmeta, *btoff = kvlen + b->n_tokens, *bt = btoff + b->n_tokens;
    size_t at = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const pagoda_seq_view *sv = &b->seqs[s];
        int32_t nb = (sv->ctx_len + L->block_size - 1) / L->block_size;
        for (int32_t i = 0; i < sv->n_q; i++) {
            kvlen[sv->q_start + i] = sv->ctx_len - sv->n_q + i + 1;
            btoff[sv->q_start + i] = (int32_t)at;
        }
        for (int32_t j = 0; j < nb; j++) {
            if (sv->block_table[j] < 0 || sv->block_table[j] >= L->n_blocks)
                return BAD("attention: sequence %d block %d is %d, outside 0..%d", s, j,
                           sv->block_table[j], L->n_blocks - 1);
            bt[at++] = sv->block_table[j];
        }
    }
    CU(cudaSetDevice(c->device));
    void *d_meta;
    TRY(meta_upload(c, &c->m_attn, c->hmeta, words * sizeof(int32_t), &d_meta));
    const int32_t *dm = d_meta;
    const uint8_t *pool = kv->ptr;
    CU(pcu_attention(c->stream, (const float *)qp, ld_of(q, 4), (float *)op, ld_of(out, 4),
                     pool + pagoda_kv_offset(L, layer, 0, 0),
                     pool + pagoda_kv_offset(L, layer, L->kind == PAGODA_KV_LATENT ? 0 : 1, 0),
                     L->dtype, L->block_size, pagoda_kv_block_bytes(L), pagoda_kv_head_bytes(L),
                     L->n_kv_heads, hd, n_heads, scale, window, sinks, b->n_tokens, dm,
                     dm + b->n_tokens, dm + 2 * b->n_tokens));
    return PAGODA_OK;
}

int cuda_attention(void *ctx, const pagoda_tensor *q, const pagoda_buffer *kv,
                   const pagoda_kv_layout *L, int32_t layer, const pagoda_batch *b,
                   int32_t n_heads, float scale, const pagoda_tensor *out)
{
    return attend(ctx, q, kv, L, layer, b, n_heads, scale, 0, NULL, out);
}

/* The optional ops with kernels of their own run only when verified.txt
 * lists them (or allow_unverified): the slot cannot be emptied per
 * device, so the refusal comes at the first call, naming the list. */
int op_gate(cuda_ctx *c, int op)
{
    if ((c->ops_ok >> op) & 1) return PAGODA_OK;
    return c->host->error(c->host, PAGODA_ERR_UNSUPPORTED, "cuda: %s has not been verified on "
                          "a GPU (not in backends/cuda/verified.txt): run "
                          "backends/cuda/gpu-check.sh, or set [backend.cuda] allow_unverified "
                          "= true to try it", pcu_op_name(op));
}

int cuda_attention_ext(void *ctx, const pagoda_tensor *q, const pagoda_buffer *kv,
                       const pagoda_kv_layout *L, int32_t layer, const pagoda_batch *b,
                       const pagoda_attn_params *p, const pagoda_tensor *out)
{
    cuda_ctx *c = ctx;
    if (!p || p->struct_size < offsetof(pagoda_attn_params, window) + sizeof p->window)
        return BAD("attention_ext: no parameters, or a struct_size too small for window");
    if (p->window < 0) return BAD("attention_ext: window %d is negative", p->window);
    const float *sinks = NULL;
    if (p->struct_size >= offsetof(pagoda_attn_params, sinks) + sizeof p->sinks && p->sinks.buf) {
        uint8_t *sp;
        TRY(tensor_at(c, &p->sinks, "attention_ext sinks", PAGODA_DTYPE_F32, &sp));
        if (p->sinks.cols != p->n_heads || p->sinks.rows < 1)
            return BAD("attention_ext: sinks are %lld x %lld, expected 1 x %d (n_heads)",
                       (long long)p->sinks.rows, (long long)p->sinks.cols, p->n_heads);
        TRY(op_gate(c, PCU_OP_ATTENTION_SINKS));
        sinks = (const float *)sp;
    }
    if (p->window > 0) TRY(op_gate(c, PCU_OP_ATTENTION_EXT));
    return attend(c, q, kv, L, layer, b, p->n_heads, p->scale, p->window, sinks, out);
}

/* Two F32 tensors of one shape plus an output of that shape. */
static int same_shape3(cuda_ctx *c, const char *op, const pagoda_tensor *a, const pagoda_tensor *b,
                       const pagoda_tensor *o, uint8_t **ap, uint8_t **bp, uint8_t **opp)
{
    TRY(tensor_at(c, a, op, PAGODA_DTYPE_F32, ap));
    TRY(tensor_at(c, b, op, PAGODA_DTYPE_F32, bp));
    TRY(tensor_at(c, o, op, PAGODA_DTYPE_F32, opp));
    if (a->rows != b->rows || a->cols != b->cols || o->rows != a->rows || o->cols != a->cols)
        return BAD("%s: shapes %lld x %lld, %lld x %lld, out %lld x %lld differ", op,
                   (long long)a->rows, (long long)a->cols, (long long)b->rows,
                   (long long)b->cols, (long long)o->rows, (long long)o->cols);
    return PAGODA_OK;
}

int cuda_swiglu(void *ctx, const pagoda_tensor *gate, const pagoda_tensor *up,
                const pagoda_tensor *out)
{
    cuda_ctx *c = ctx;
    uint8_t *gp, *up_, *op;
    TRY(same_shape3(c, "swiglu", gate, up, out, &gp, &up_, &op));
    CU(cudaSetDevice(c->device));
    CU(pcu_swiglu(c->stream, (const float *)gp, ld_of(gate, 4), (const float *)up_, ld_of(up, 4),
                  (float *)op, ld_of(out, 4), out->rows, out->cols));
    return PAGODA_OK;
}

int cuda_geglu(void *ctx, const pagoda_tensor *gate, const pagoda_tensor *up,
               const pagoda_tensor *out)
{
    cuda_ctx *c = ctx;
    uint8_t *gp, *up_, *op;
    TRY(same_shape3(c, "geglu", gate, up, out, &gp, &up_, &op));
    TRY(op_gate(c, PCU_OP_GEGLU));
    CU(cudaSetDevice(c->device));
    CU(pcu_geglu_k(c->stream, (const float *)gp, ld_of(gate, 4), (const float *)up_, ld_of(up, 4),
                   (float *)op, ld_of(out, 4), out->rows, out->cols));
    return PAGODA_OK;
}

int cuda_scale(void *ctx, const pagoda_tensor *x, float s, const pagoda_tensor *out)
{
    cuda_ctx *c = ctx;
    uint8_t *xp, *op;
    TRY(tensor_at(c, x, "scale x", PAGODA_DTYPE_F32, &xp));
    TRY(tensor_at(c, out, "scale out", PAGODA_DTYPE_F32, &op));
    if (x->rows != out->rows || x->cols != out->cols)
        return BAD("scale: x %lld x %lld, out %lld x %lld differ", (long long)x->rows,
                   (long long)x->cols, (long long)out->rows, (long long)out->cols);
    TRY(op_gate(c, PCU_OP_SCALE));
    CU(cudaSetDevice(c->device));
    CU(pcu_scale(c->stream, (const float *)xp, ld_of(x, 4), s, (float *)op, ld_of(out, 4),
                 out->rows, out->cols));
    return PAGODA_OK;
}

int cuda_swiglu_oai(void *ctx, const pagoda_tensor *gate, const pagoda_tensor *up, float alpha,
                    float limit, const pagoda_tensor *out)
{
    cuda_ctx *c = ctx;
    uint8_t *gp, *up_, *op;
    TRY(same_shape3(c, "swiglu_oai", gate, up, out, &gp, &up_, &op));
    TRY(op_gate(c, PCU_OP_SWIGLU_OAI));
    CU(cudaSetDevice(c->device));
    CU(pcu_swiglu_oai_k(c->stream, (const float *)gp, ld_of(gate, 4), (const float *)up_,
                        ld_of(up, 4), alpha, limit, (float *)op, ld_of(out, 4), out->rows,
                        out->cols));
    return PAGODA_OK;
}

int cuda_moe_combine(void *ctx, const pagoda_tensor *y, const int32_t *dst_rows,
                     const float *weights, bool accumulate, const pagoda_tensor *out)
{
    cuda_ctx *c = ctx;
    uint8_t *yp, *op;
    TRY(tensor_at(c, y, "moe_combine y", PAGODA_DTYPE_F32, &yp));
    TRY(tensor_at(c, out, "moe_combine out", PAGODA_DTYPE_F32, &op));
    if (y->cols != out->cols)
        return BAD("moe_combine: y %lld x %lld, out %lld x %lld: the widths differ",
                   (long long)y->rows, (long long)y->cols, (long long)out->rows,
                   (long long)out->cols);
    if (y->rows > 0 && (!dst_rows || !weights)) return BAD("moe_combine: no dst_rows / weights");
    for (int64_t r = 0; r < y->rows; r++)
        if (dst_rows[r] < 0 || dst_rows[r] >= out->rows)
            return BAD("moe_combine: dst_rows[%lld] = %d outside 0..%lld", (long long)r,
                       dst_rows[r], (long long)out->rows - 1);
    TRY(op_gate(c, PCU_OP_MOE_COMBINE));
    CU(cudaSetDevice(c->device));
    if (out->rows == 0 || out->cols == 0) return PAGODA_OK;
    void *d = NULL;
    size_t R = (size_t)y->rows;
    if (R) {
        /* dst rows then weights, one upload */
        size_t bytes = R * (sizeof(int32_t) + sizeof(float));
        uint8_t *h = malloc(bytes);
        if (!h) return c->host->error(c->host, PAGODA_ERR_NOMEM, "cuda: moe_combine lists");
        memcpy(h, dst_rows, R * sizeof(int32_t));
        memcpy(h + R * sizeof(int32_t), weights, R * sizeof(float));
        int st = meta_upload(c, &c->m_moe, h, bytes, &d);
        free(h);
        if (st) return st;
    }
    const int32_t *dd = d;
    CU(pcu_moe_combine(c->stream, (const float *)yp, ld_of(y, 4), (int32_t)R, dd,
                       d ? (const float *)(dd + R) : NULL, accumulate, (int32_t)out->rows,
                       (float *)op, ld_of(out, 4), out->cols));
    return PAGODA_OK;
}

int cuda_add(void *ctx, const pagoda_tensor *a, const pagoda_tensor *b,
             const pagoda_tensor *out)
{
    cuda_ctx *c = ctx;
    uint8_t *ap, *bp, *op;
    TRY(same_shape3(c, "add", a, b, out, &ap, &bp, &op));
    CU(cudaSetDevice(c->device));
    CU(pcu_add(c->stream, (const float *)ap, ld_of(a, 4), (const float *)bp, ld_of(b, 4),
               (float *)op, ld_of(out, 4), out->rows, out->cols));
    return PAGODA_OK;
}

int cuda_copy_blocks(void *ctx, pagoda_buffer *kv, const pagoda_kv_layout *L,
                     const int32_t *src, const int32_t *dst, int32_t n)
{
    cuda_ctx *c = ctx;
    TRY(layout_ok(c, kv, L, 0));
    if (L->kind == PAGODA_KV_LATENT) TRY(op_gate(c, PCU_OP_KV_LATENT));
    if (n < 0) return BAD("copy_blocks: n = %d", n);
    if (n == 0) return PAGODA_OK;
    if (!src || !dst) return BAD("copy_blocks: no block lists");
    int32_t *pairs = malloc(2 * (size_t)n * sizeof *pairs);
    if (!pairs) return c->host->error(c->host, PAGODA_ERR_NOMEM, "cuda: copy_blocks list");
    int st = PAGODA_OK;
    for (int32_t i = 0; i < n; i++) {
        if (src[i] < 0 || src[i] >= L->n_blocks || dst[i] < 0 || dst[i] >= L->n_blocks) {
            st = BAD("copy_blocks: pair %d (%d -> %d) outside blocks 0..%d", i, src[i], dst[i],
                     L->n_blocks - 1);
            goto out;
        }
        pairs[i] = src[i];
        pairs[n + i] = dst[i];
    }
    cudaError_t e = cudaSetDevice(c->device);
    if (e != cudaSuccess) {
        st = cu_fail(c, "cudaSetDevice", e);
        goto out;
    }
    void *d;
    st = meta_upload(c, &c->m_copy, pairs, 2 * (size_t)n * sizeof *pairs, &d);
    if (st) goto out;
    e = pcu_copy_blocks(c->stream, kv->ptr, pagoda_kv_planes(L) * L->n_layers, L->n_blocks,
                        pagoda_kv_block_bytes(L), d, (const int32_t *)d + n, n);
    if (e != cudaSuccess) st = cu_fail(c, "pcu_copy_blocks", e);
out:
    free(pairs);
    return st;
}
