/*
 * forward_mla.c: multi-head latent attention (DeepSeek V2/V3, Kimi K2) in
 * the absorbed form, for prefill and decode alike.
 *
 * Per token: the latent c = RMSNorm(x W_kv_a[:kv_lora]) and the RoPE key
 * k_r = RoPE(x W_kv_a[kv_lora:]) are the only KV it keeps: one row
 * [c | k_r] of kv_lora + rope values (the layout's head_dim, one KV head).
 * Head h's query q_h = [q_n | q_r] (nope + rope values). Its score against
 * token j, q_n . (W_kb_h c_j) + q_r . k_r_j, equals [q_n W_kb_h | q_r] .
 * [c_j | k_r_j]: the query is absorbed into latent space (attn_k_b, one
 * [kv_lora x nope] matrix a head), so attention runs over the cached rows
 * as multi-query attention with one KV head of kv_lora + rope values.
 * Values: W_vb_h c_j, and softmax . (W_vb_h c) = W_vb_h (softmax . c), so
 * the attention reads the cached rows as values too and attn_v_b (a
 * [v x kv_lora] matrix a head) runs after it on the first kv_lora values
 * of each head's output (the RoPE part of the output is dropped). The KV
 * pool of a latent layout (ABI 1.7) keeps no separate V; a pool of the
 * K-and-V layout gets the same row as both.
 *
 * This is the form that reads the fewest KV bytes, which is what decode
 * pays for; for long prefills the decompressed form (K and V per head
 * from the latents, attention of nope + rope dims) takes fewer FLOPs and
 * is not here yet (docs/architecture.md, "Multi-head latent attention").
 *
 * Not for: the MoE FFN (forward_moe.c) or the KV layouts (forward.c).
 */
#include "forward_mla.h"

#include "forward_moe.h"

#include <string.h>

/* A view of t's bytes as [rows x cols] whose rows are `stride` bytes apart,
 * starting `col` floats into t. */
static pagoda_tensor strided(pagoda_tensor t, int64_t rows, int64_t cols, size_t stride, int64_t col)
{
    t.offset += (size_t)col * 4;
    t.rows = rows;
    t.cols = cols;
    t.row_stride = stride;
    return t;
}

/* out[r] = x[r] * W_{r % H}^T for r < x.rows: a matrix per head (w the
 * first head's, `stride` bytes to the next), rows head-minor (r = t H + h).
 * The backend's matmul_experts (one call, each head's weights read once),
 * else one strided matmul per head. */
static int per_head(pagoda_forward *fw, const pagoda_tensor *x, const pagoda_tensor *w,
                    size_t stride, const pagoda_tensor *out)
{
    const pagoda_backend_ops *o = &fw->be->ops;
    void *c = fw->be->ctx;
    const int32_t H = fw->hp.n_heads;
    if (o->matmul_experts) return o->matmul_experts(c, x, NULL, w, H, stride, fw->mla.head, out);
    int64_t T = x->rows / H;
    for (int32_t h = 0; h < H; h++) {
        pagoda_tensor xh = *x, wh = *w, oh = *out;
        xh.offset += (size_t)h * x->row_stride;
        xh.rows = T;
        xh.row_stride = x->row_stride * (size_t)H;
        wh.offset += (size_t)h * stride;
        oh.offset += (size_t)h * out->row_stride;
        oh.rows = T;
        oh.row_stride = out->row_stride * (size_t)H;
        int st = o->matmul(c, &xh, &wh, NULL, &oh);
        if (st) return st;
    }
    return PAGODA_OK;
}

int pagoda_forward_mla(pagoda_forward *fw, const pagoda_forward_layer *L, const pagoda_batch *b,
                       const pagoda_rope_params *rp, const pagoda_tensor *xb,
                       const pagoda_tensor *out, const char **what)
{
    const pagoda_hparams *hp = &fw->hp;
    const pagoda_backend_ops *o = &fw->be->ops;
    void *c = fw->be->ctx;
    const int32_t T = b->n_tokens, H = hp->n_heads;
    const int64_t R = hp->rope_dims, N = hp->qk_nope, C = hp->kv_lora_rank, V = hp->v_head_dim;
    const int64_t QH = N + R, KH = C + R;   /* a query head; a cached row (= head_dim) */
    int st;
#define MCALL(name, expr) do { *what = name; if ((st = (expr))) return st; } while (0)
    /* the queries [T x H (nope + rope)] */
    pagoda_tensor q = fw->q;
    q.rows = T;
    q.cols = H * QH;
    q.row_stride = (size_t)q.cols * 4;
    if (hp->q_lora_rank > 0) {
        pagoda_tensor qa = fw->mla.qa;
        qa.rows = T;
        MCALL("matmul(attn_q_a)", o->matmul(c, xb, &L->wq_a, NULL, &qa));
        MCALL("rms_norm(attn_q_a_norm)", o->rms_norm(c, &qa, &L->q_a_norm, hp->rms_eps, &qa));
        MCALL("matmul(attn_q_b)", o->matmul(c, &qa, &L->wq_b, NULL, &q));
    } else {
        MCALL("matmul(attn_q)", o->matmul(c, xb, &L->wq, NULL, &q));
    }
    /* the cached row [T x (kv_lora + rope)]: latent normed, key rotated */
    pagoda_tensor kr = fw->k;
    kr.rows = T;
    MCALL("matmul(attn_kv_a_mqa)", o->matmul(c, xb, &L->wkv_a, NULL, &kr));
    pagoda_tensor lat = strided(kr, T, C, kr.row_stride, 0);
    pagoda_tensor kpe = strided(kr, T, R, kr.row_stride, C);
    MCALL("rms_norm(attn_kv_a_norm)", o->rms_norm(c, &lat, &L->kv_a_norm, hp->rms_eps, &lat));
    MCALL("rope(k_pe)", o->rope(c, &kpe, 1, (int32_t)R, b->positions, rp));
    /* each head's RoPE part, one row a (token, head) at that token's position */
    for (int32_t t = 0; t < T; t++)
        for (int32_t h = 0; h < H; h++) fw->mla.pos[t * H + h] = b->positions[t];
    pagoda_tensor qpe = strided(q, (int64_t)T * H, R, (size_t)QH * 4, N);
    MCALL("rope(q_pe)", o->rope(c, &qpe, 1, (int32_t)R, fw->mla.pos, rp));
    /* the absorbed queries [T x H (kv_lora + rope)]: q_nope W_kb_h, then q_pe */
    pagoda_tensor qabs = fw->mla.qabs;
    qabs.rows = T;
    qabs.cols = H * KH;
    qabs.row_stride = (size_t)qabs.cols * 4;
    pagoda_tensor qn = strided(q, (int64_t)T * H, N, (size_t)QH * 4, 0);
    pagoda_tensor ql = strided(qabs, (int64_t)T * H, C, (size_t)KH * 4, 0);
    MCALL("matmul_experts(attn_k_b)", per_head(fw, &qn, &L->wk_b, L->wk_b_stride, &ql));
    pagoda_tensor qr = strided(qabs, (int64_t)T * H, R, (size_t)KH * 4, C);
    MCALL("get_rows(q_pe)", o->get_rows(c, &qpe, fw->mla.rows, T * H, &qr));
    /* the latent row into the KV pool (as K and V in a K-and-V layout) */
    MCALL("kv_write", o->kv_write(c, fw->kv, &fw->kv_layout, L->kv_layer, &kr, &kr, b->slots, T));
    pagoda_tensor att = fw->att;
    att.rows = T;
    att.cols = H * KH;
    att.row_stride = (size_t)att.cols * 4;
    MCALL("attention(latent)", o->attention(c, &qabs, fw->kv, &fw->kv_layout, L->kv_layer, b, H,
                                            hp->attn_scale, &att));
    /* values: W_vb_h of each head's first kv_lora outputs, [T x H v] into q */
    pagoda_tensor al = strided(att, (int64_t)T * H, C, (size_t)KH * 4, 0);
    pagoda_tensor av = strided(fw->q, (int64_t)T * H, V, (size_t)V * 4, 0);
    MCALL("matmul_experts(attn_v_b)", per_head(fw, &al, &L->wv_b, L->wv_b_stride, &av));
    pagoda_tensor avt = strided(fw->q, T, H * V, (size_t)(H * V) * 4, 0);
    MCALL("matmul(attn_output)", o->matmul(c, &avt, &L->wo, NULL, out));
#undef MCALL
    return PAGODA_OK;
}
