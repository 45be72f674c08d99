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
 * pays for. A long prefill chunk that starts at position 0 (a prompt
 * from scratch: every key it reads is its own) may instead run the
 * decompressed form (pagoda_forward_mla_decompress turns it on): each
 * head's K = [c W_kb_h^T | k_r] and V = c W_vb_h^T for the chunk's tokens
 * into a scratch pool of one layer in the cache's KV type (heads x (nope +
 * rope) values, V zero-padded), and the backend's ordinary causal
 * attention over it with the same scale. A (query, key) pair then costs
 * H (N + R + V) multiply-adds against H 2 (C + R), and the per-token
 * matrices cost the same in both forms (docs/models.md: 1.3x at 2048
 * tokens on a CPU). The latent rows are written to the cache as always,
 * so what reads them later (decode, the next chunk, a prefix hit) is
 * unchanged. A long chunk that starts later (after a prefix-cache hit, or
 * the second chunk of a chunked prefill) decompresses too: the earlier
 * positions' latents are read back from the KV pool (get_rows over a view
 * of the layer's plane: a slot is a row) into staging rows, a piece of at
 * most the chunk's length at a time, and their K and V made beside the
 * chunk's, so the scratch holds the whole context; a context longer than
 * the scratch (pagoda_mla_scratch_tokens) stays absorbed, and so does
 * every later chunk where the backend's get_rows cannot read a KV pool
 * row (probed once at set-up: probe_read_prefix). Decompressing a
 * prefix token costs H C (N + V) multiply-adds once per chunk, and each
 * of the chunk's n queries saves H (2 (C + R) - (N + R + V)) on it: for
 * V3's shape that pays from n of about 160, below the default threshold.
 *
 * Not for: the MoE FFN (forward_moe.c) or the KV layouts (forward.c).
 */
#include "forward_mla.h"

#include "forward_moe.h"

#include "quant.h"
#include "seqno.h"

#include <stdlib.h>
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

/* ------------------------------------------------------------ sizes */

bool pagoda_mla_decompress_on(const pagoda_hparams *hp, int32_t max_tokens, int32_t min_tokens)
{
    /* V fits a key head (zero-padded), and a key head fits a row of the
     * absorbed queries and of att, where a token's K and V are made */
    return hp->mla && min_tokens > 0 && min_tokens <= max_tokens &&
           hp->v_head_dim <= hp->qk_nope + hp->rope_dims && hp->qk_nope <= hp->kv_lora_rank;
}

int pagoda_mla_kbt_dtype(int src_dtype)
{
    return src_dtype == PAGODA_DTYPE_F32 ? PAGODA_DTYPE_F32 : PAGODA_DTYPE_F16;
}

uint64_t pagoda_mla_kbt_layer_bytes(const pagoda_hparams *hp, int src_dtype)
{
    return (uint64_t)hp->n_heads * (uint64_t)hp->qk_nope *
           pagoda_dtype_row_bytes(pagoda_mla_kbt_dtype(src_dtype), hp->kv_lora_rank);
}

int32_t pagoda_mla_scratch_tokens(int32_t max_tokens, int32_t max_ctx)
{
    int64_t t = max_ctx > max_tokens ? max_ctx : max_tokens;
    return (int32_t)((t + 15) / 16 * 16);
}

/* The scratch pool: one layer, blocks of 16 slots, every head's key of
 * nope + rope values a slot, K and V, in the cache's KV type (F16 where
 * that type's blocks do not tile a key head). */
static pagoda_kv_layout scratch_layout(const pagoda_hparams *hp, int32_t tokens, int32_t kv_dtype)
{
    pagoda_kv_layout L = {.n_layers = 1, .n_blocks = (tokens + 15) / 16, .block_size = 16,
                          .n_kv_heads = hp->n_heads, .head_dim = hp->qk_nope + hp->rope_dims,
                          .dtype = kv_dtype, .kind = PAGODA_KV_SEPARATE};
    if (!pagoda_kv_head_bytes(&L)) L.dtype = PAGODA_DTYPE_F16;
    return L;
}

/* One row of zeros after the pool: V's padding is copied from it. */
static size_t zero_row_bytes(const pagoda_hparams *hp)
{
    return ((size_t)(hp->qk_nope + hp->rope_dims) * 4 + 63) / 64 * 64;
}

/* Bytes to the staging rows: the pool, then the zero row. */
static size_t staging_offset(const pagoda_hparams *hp, int32_t scratch_tokens, int32_t kv_dtype)
{
    pagoda_kv_layout L = scratch_layout(hp, scratch_tokens, kv_dtype);
    return (pagoda_kv_pool_bytes(&L) + 63) / 64 * 64 + zero_row_bytes(hp);
}

uint64_t pagoda_mla_scratch_bytes(const pagoda_hparams *hp, int32_t scratch_tokens,
                                  int32_t max_tokens, int32_t kv_dtype)
{
    return staging_offset(hp, scratch_tokens, kv_dtype) +
           (uint64_t)max_tokens * (uint64_t)(hp->kv_lora_rank + hp->rope_dims) * 4;
}

/* ------------------------------------------------------------ set-up */

/* Head h's [nope x kv_lora] = its attn_k_b [kv_lora x nope] transposed,
 * rows of `dtype` into dst. src: the head's kv_lora rows of nope values
 * of type st. */
static int transpose_head(const uint8_t *src, int st, int64_t C, int64_t N, int dtype, uint8_t *dst,
                          float *row, float *mat)
{
    size_t src_row = pagoda_dtype_row_bytes(st, N);
    for (int64_t c = 0; c < C; c++) {
        int s = pagoda_dequantize_row(st, src + (size_t)c * src_row, row, N);
        if (s) return s;
        for (int64_t n = 0; n < N; n++) mat[n * C + c] = row[n];
    }
    size_t dst_row = pagoda_dtype_row_bytes(dtype, C);
    for (int64_t n = 0; n < N; n++) {
        int s = pagoda_quantize_row(dtype, mat + n * C, dst + (size_t)n * dst_row, C);
        if (s) return s;
    }
    return PAGODA_OK;
}

/* May a later chunk read its prefix's latents back from the KV pool
 * (get_rows over a view of layer 0's plane, as decompressed_attend does)?
 * Its tables are weight types, so the KV type must be one; and a backend
 * may still refuse a KV buffer as a table, so one row is read into the
 * staging rows now (what they hold is overwritten before it is read)
 * rather than failing a step later. No: why, in why[n]. */
static bool probe_read_prefix(pagoda_forward *fw, char *why, size_t n)
{
    pagoda_backend *be = fw->be;
    const pagoda_kv_layout *KL = &fw->kv_layout;
    const char *bname = be->info.name[0] ? be->info.name : "?";
    why[0] = '\0';
    if (!((be->info.weight_types >> KL->dtype) & 1)) {
        snprintf(why, n, "backend %s's get_rows does not take the KV type %s (not in its weight types)",
                 bname, pagoda_dtype_name(KL->dtype));
        return false;
    }
    if (!fw->kv) {
        snprintf(why, n, "no KV pool to read back");
        return false;
    }
    pagoda_tensor pool = {.buf = fw->kv, .offset = pagoda_kv_offset(KL, 0, 0, 0), .dtype = KL->dtype,
                          .rows = (int64_t)KL->n_blocks * KL->block_size, .cols = KL->head_dim,
                          .row_stride = pagoda_kv_slot_bytes(KL)};
    const int64_t KH = fw->hp.kv_lora_rank + fw->hp.rope_dims;
    pagoda_tensor stage = {.buf = fw->mla.scratch, .offset = fw->mla.staging_offset,
                           .dtype = PAGODA_DTYPE_F32, .rows = 1, .cols = KH, .row_stride = (size_t)KH * 4};
    static const int32_t slot0 = 0;
    int st = be->ops.get_rows(be->ctx, &pool, &slot0, 1, &stage);
    if (!st && be->ops.synchronize) st = be->ops.synchronize(be->ctx);
    if (st) {
        const char *e = be->host && be->last_error ? be->last_error(be->host) : NULL;
        snprintf(why, n, "backend %s's get_rows refused a row of the KV pool (%s): %s", bname,
                 pagoda_dtype_name(KL->dtype), e && *e ? e : pagoda_status_str(st));
        return false;
    }
    return true;
}

int pagoda_forward_mla_decompress(pagoda_forward *fw, int32_t min_tokens, int32_t max_ctx, char *err,
                                  size_t err_len)
{
    const pagoda_hparams *hp = &fw->hp;
    pagoda_backend *be = fw->be;
    if (!pagoda_mla_decompress_on(hp, fw->max_tokens, min_tokens)) return PAGODA_OK;
    if (fw->mla.decompress_min > 0) return PAGODA_OK;   /* already on */
    const int64_t H = hp->n_heads, N = hp->qk_nope, C = hp->kv_lora_rank;
    const gguf_file *g = fw->model->gguf;
    int st = PAGODA_OK;
    float *row = NULL, *mat = NULL;
    /* the transposed copies, each layer's heads one run, 64-byte aligned */
    size_t total = 0;
    for (int l = 0; l < hp->n_layers; l++) {
        int dt = pagoda_mla_kbt_dtype(fw->model->layers[l].wk_b->type);
        if (!((be->info.weight_types >> dt) & 1)) {
            snprintf(err, err_len, "backend %s cannot multiply %s weights, which the decompressed "
                     "MLA prefill's transposed attn_k_b copies are: set [engine] "
                     "mla_decompress_min = 0", be->info.name[0] ? be->info.name : "?",
                     pagoda_dtype_name(dt));
            return PAGODA_ERR_UNSUPPORTED;
        }
        total += (pagoda_mla_kbt_layer_bytes(hp, fw->model->layers[l].wk_b->type) + 63) / 64 * 64;
    }
    if (posix_memalign(&fw->mla.kbt_host, 64, total ? total : 64)) {
        fw->mla.kbt_host = NULL;
        snprintf(err, err_len, "out of memory for the transposed attn_k_b copies (%zu bytes)", total);
        return PAGODA_ERR_NOMEM;
    }
    fw->mla.kbt_bytes = total;
    row = malloc(sizeof(float) * (size_t)N);
    mat = malloc(sizeof(float) * (size_t)(N * C));
    if (!row || !mat) {
        snprintf(err, err_len, "out of memory transposing attn_k_b");
        st = PAGODA_ERR_NOMEM;
        goto out;
    }
    size_t off = 0;
    for (int l = 0; l < hp->n_layers && !st; l++) {
        const gguf_tensor *t = fw->model->layers[l].wk_b;
        int dt = pagoda_mla_kbt_dtype(t->type);
        /* this rank's heads: its packed shard under tensor parallelism */
        const uint8_t *src = fw->tp_offsets
                                 ? (const uint8_t *)fw->tp_weights + fw->tp_offsets[t - g->tensors]
                                 : (const uint8_t *)g->map + g->data_offset + t->offset;
        size_t src_head = pagoda_dtype_row_bytes(t->type, N) * (size_t)C;
        size_t dst_head = pagoda_dtype_row_bytes(dt, C) * (size_t)N;
        for (int64_t h = 0; h < H && !st; h++)
            st = transpose_head(src + (size_t)h * src_head, t->type, C, N, dt,
                                (uint8_t *)fw->mla.kbt_host + off + (size_t)h * dst_head, row, mat);
        if (st) {
            snprintf(err, err_len, "cannot transpose tensor %.*s (type %s): %s", (int)t->name.len,
                     t->name.ptr, pagoda_dtype_name(t->type), pagoda_status_str(st));
            goto out;
        }
        pagoda_forward_layer *F = &fw->layers[l];
        F->wk_bt = (pagoda_tensor){.offset = off, .dtype = dt, .rows = N, .cols = C,
                                   .row_stride = pagoda_dtype_row_bytes(dt, C)};
        F->wk_bt_stride = dst_head;
        off += (pagoda_mla_kbt_layer_bytes(hp, t->type) + 63) / 64 * 64;
    }
    if (be->ops.weights_from_host)
        st = be->ops.weights_from_host(be->ctx, fw->mla.kbt_host, total, &fw->mla.kbt);
    else {
        st = be->ops.buffer_alloc(be->ctx, PAGODA_BUF_WEIGHTS, total, &fw->mla.kbt);
        if (!st) st = be->ops.upload(be->ctx, fw->mla.kbt, 0, fw->mla.kbt_host, total);
        if (!st) {
            /* the backend has its own copy now: the host one (the plan
             * counts one copy) is not kept */
            free(fw->mla.kbt_host);
            fw->mla.kbt_host = NULL;
        }
    }
    if (st) {
        snprintf(err, err_len, "backend could not take the transposed attn_k_b copies (%zu bytes)", total);
        goto out;
    }
    for (int l = 0; l < hp->n_layers; l++) fw->layers[l].wk_bt.buf = fw->mla.kbt;
    /* the scratch pool, its zero row and the staging rows, zeroed once */
    const int32_t S = pagoda_mla_scratch_tokens(fw->max_tokens, max_ctx);
    fw->mla.scratch_tokens = S;
    fw->mla.scratch_kv = scratch_layout(hp, S, fw->kv_layout.dtype);
    fw->mla.staging_offset = staging_offset(hp, S, fw->kv_layout.dtype);
    fw->mla.scratch_bytes = pagoda_mla_scratch_bytes(hp, S, fw->max_tokens, fw->kv_layout.dtype);
    st = be->ops.buffer_alloc(be->ctx, PAGODA_BUF_ACTIVATIONS, fw->mla.scratch_bytes, &fw->mla.scratch);
    if (!st) {
        size_t chunk = fw->mla.scratch_bytes < (1u << 20) ? fw->mla.scratch_bytes : (1u << 20);
        void *z = calloc(1, chunk);
        if (!z) st = PAGODA_ERR_NOMEM;
        for (size_t o = 0; o < fw->mla.scratch_bytes && !st; o += chunk)
            st = be->ops.upload(be->ctx, fw->mla.scratch, o, z,
                                fw->mla.scratch_bytes - o < chunk ? fw->mla.scratch_bytes - o : chunk);
        free(z);
    }
    if (st) {
        snprintf(err, err_len, "backend could not allocate the decompressed prefill's scratch "
                 "(%zu bytes)", fw->mla.scratch_bytes);
        goto out;
    }
    int64_t P = (int64_t)fw->max_tokens * H;
    fw->mla.tok = malloc(sizeof(int32_t) * (size_t)P);
    fw->mla.scratch_table = malloc(sizeof(int32_t) * (size_t)fw->mla.scratch_kv.n_blocks);
    fw->mla.sub = malloc(sizeof(pagoda_seq_view) * (size_t)fw->max_tokens);
    fw->mla.zeros = calloc((size_t)P, sizeof(int32_t));
    fw->mla.ctx_slots = malloc(sizeof(int32_t) * (size_t)S);
    fw->mla.ident = malloc(sizeof(int32_t) * (size_t)S);
    if (!fw->mla.tok || !fw->mla.scratch_table || !fw->mla.sub || !fw->mla.zeros ||
        !fw->mla.ctx_slots || !fw->mla.ident) {
        snprintf(err, err_len, "out of memory for the decompressed prefill of %d tokens", fw->max_tokens);
        st = PAGODA_ERR_NOMEM;
        goto out;
    }
    for (int64_t r = 0; r < P; r++) fw->mla.tok[r] = (int32_t)(r / H);
    for (int32_t i = 0; i < fw->mla.scratch_kv.n_blocks; i++) fw->mla.scratch_table[i] = i;
    for (int32_t i = 0; i < S; i++) fw->mla.ident[i] = i;
    fw->mla.read_prefix = probe_read_prefix(fw, fw->mla.no_prefix_why, sizeof fw->mla.no_prefix_why);
    fw->mla.decompress_min = min_tokens;
out:
    free(row);
    free(mat);
    if (st) pagoda_forward_mla_decompress_free(fw);
    return st;
}

void pagoda_forward_mla_decompress_free(pagoda_forward *fw)
{
    if (fw->be) {
        if (fw->mla.kbt) fw->be->ops.buffer_free(fw->be->ctx, fw->mla.kbt);
        if (fw->mla.scratch) fw->be->ops.buffer_free(fw->be->ctx, fw->mla.scratch);
    }
    free(fw->mla.kbt_host);
    free(fw->mla.tok);
    free(fw->mla.scratch_table);
    free(fw->mla.sub);
    free(fw->mla.zeros);
    free(fw->mla.ctx_slots);
    free(fw->mla.ident);
    fw->mla.zeros = NULL;
    fw->mla.ctx_slots = fw->mla.ident = NULL;
    fw->mla.scratch_tokens = 0;
    fw->mla.read_prefix = false;
    fw->mla.no_prefix_why[0] = '\0';
    fw->mla.staging_offset = 0;
    fw->mla.kbt = fw->mla.scratch = NULL;
    fw->mla.kbt_host = NULL;
    fw->mla.tok = fw->mla.scratch_table = NULL;
    fw->mla.sub = NULL;
    fw->mla.kbt_bytes = fw->mla.scratch_bytes = 0;
    fw->mla.decompress_min = 0;
    if (fw->layers)
        for (int l = 0; l < fw->hp.n_layers; l++) fw->layers[l].wk_bt = (pagoda_tensor){0};
}

/* ------------------------------------------------------------ the pass */

#define MCALL(name, expr) do { *what = name; if ((st = (expr))) return st; } while (0)

/* Does sequence sv's chunk decompress? It is long enough that the
 * decompressed form pays, and its whole context fits the scratch. */
static bool decompresses(const pagoda_forward *fw, const pagoda_seq_view *sv)
{
    return fw->mla.decompress_min > 0 && sv->n_q >= fw->mla.decompress_min &&
           (sv->ctx_len == sv->n_q || (fw->mla.read_prefix && sv->ctx_len <= fw->mla.scratch_tokens));
}

/* Shapes every part of the pass shares. */
typedef struct mla_dims {
    int32_t H;
    int64_t R, N, C, V, QH, KH;   /* QH: a query head (= a decompressed key head); KH: a cached row */
} mla_dims;

/* The absorbed attention of a run of sequences (rows [r0, r0 + n)): their
 * absorbed queries, attention over the latent rows into att's rows. sub:
 * the step's batch itself (every sequence) or a batch of just the run's
 * sequences (rebased to row 0). */
static int absorbed_attend(pagoda_forward *fw, const pagoda_forward_layer *L, const pagoda_batch *sub,
                           int32_t r0, int32_t n, const mla_dims *d, const char **what)
{
    const pagoda_backend_ops *o = &fw->be->ops;
    void *c = fw->be->ctx;
    const int64_t H = d->H;
    int st;
    pagoda_tensor q = fw->q;
    q.offset += (size_t)r0 * (size_t)(H * d->QH) * 4;
    q.rows = n;
    q.cols = H * d->QH;
    q.row_stride = (size_t)q.cols * 4;
    /* the absorbed queries [n x H (kv_lora + rope)]: q_nope W_kb_h, then q_pe */
    pagoda_tensor qabs = fw->mla.qabs;
    qabs.cols = H * d->KH;
    qabs.row_stride = (size_t)qabs.cols * 4;
    qabs.offset += (size_t)r0 * qabs.row_stride;
    qabs.rows = n;
    pagoda_tensor qn = strided(q, (int64_t)n * H, d->N, (size_t)d->QH * 4, 0);
    pagoda_tensor ql = strided(qabs, (int64_t)n * H, d->C, (size_t)d->KH * 4, 0);
    MCALL("matmul_experts(attn_k_b)", per_head(fw, &qn, &L->wk_b, L->wk_b_stride, &ql));
    pagoda_tensor qpe = strided(q, (int64_t)n * H, d->R, (size_t)d->QH * 4, d->N);
    pagoda_tensor qr = strided(qabs, (int64_t)n * H, d->R, (size_t)d->KH * 4, d->C);
    MCALL("get_rows(q_pe)", o->get_rows(c, &qpe, fw->mla.rows, n * d->H, &qr));
    pagoda_tensor att = fw->att;
    att.cols = H * d->KH;
    att.row_stride = (size_t)att.cols * 4;
    att.offset += (size_t)r0 * att.row_stride;
    att.rows = n;
    MCALL("attention(latent)", o->attention(c, &qabs, fw->kv, &fw->kv_layout, L->kv_layer, sub, d->H,
                                            fw->hp.attn_scale, &att));
    return PAGODA_OK;
}

/* Values of the absorbed rows [r0, r0 + n): W_vb_h of each head's first
 * kv_lora outputs, into q as [n H x v] from row r0 H. */
static int absorbed_values(pagoda_forward *fw, const pagoda_forward_layer *L, int32_t r0, int32_t n,
                           const mla_dims *d)
{
    const int64_t H = d->H;
    pagoda_tensor att = fw->att;
    att.row_stride = (size_t)(H * d->KH) * 4;
    att.offset += (size_t)r0 * att.row_stride;
    pagoda_tensor al = strided(att, (int64_t)n * H, d->C, (size_t)d->KH * 4, 0);
    pagoda_tensor av = fw->q;
    av.offset += (size_t)r0 * (size_t)(H * d->V) * 4;
    av = strided(av, (int64_t)n * H, d->V, (size_t)d->V * 4, 0);
    return per_head(fw, &al, &L->wv_b, L->wv_b_stride, &av);
}

/* K and V of every head for m tokens at context positions [p0, p0 + m)
 * into those slots of the scratch pool: latents cl [m x kv_lora], RoPE
 * keys cr [m x rope] (F32). Made in kt and vt first (F32 [m x H D] each:
 * rows of the absorbed queries and of att that nothing reads yet). */
static int decompress_rows(pagoda_forward *fw, const pagoda_forward_layer *L,
                           const pagoda_tensor *cl, const pagoda_tensor *cr, int32_t m, int32_t p0,
                           pagoda_tensor kt, pagoda_tensor vt, const mla_dims *d, const char **what)
{
    const pagoda_backend_ops *o = &fw->be->ops;
    void *c = fw->be->ctx;
    const int64_t H = d->H, D = d->QH;
    int st;
    kt.rows = vt.rows = m;
    for (int64_t h = 0; h < H; h++) {
        /* K_h's nope part = c W_kb_h^T, V_h = c W_vb_h^T (heads side by side) */
        pagoda_tensor wk = L->wk_bt, wv = L->wv_b;
        wk.offset += (size_t)h * L->wk_bt_stride;
        wv.offset += (size_t)h * L->wv_b_stride;
        pagoda_tensor kh = strided(kt, m, d->N, kt.row_stride, h * D);
        pagoda_tensor vh = strided(vt, m, d->V, vt.row_stride, h * D);
        MCALL("matmul(attn_k_b^T)", o->matmul(c, cl, &wk, NULL, &kh));
        MCALL("matmul(attn_v_b)", o->matmul(c, cl, &wv, NULL, &vh));
    }
    /* every head's RoPE part is the token's one k_pe */
    pagoda_tensor kr = strided(kt, (int64_t)m * H, d->R, (size_t)D * 4, d->N);
    MCALL("get_rows(k_pe)", o->get_rows(c, cr, fw->mla.tok, m * d->H, &kr));
    /* V's padding to D: zeros (its outputs are dropped; zeros keep them finite) */
    const pagoda_kv_layout *SL = &fw->mla.scratch_kv;
    if (D > d->V) {
        pagoda_tensor z = {.buf = fw->mla.scratch, .offset = fw->mla.staging_offset - zero_row_bytes(&fw->hp),
                           .dtype = PAGODA_DTYPE_F32, .rows = 1, .cols = D - d->V,
                           .row_stride = (size_t)(D - d->V) * 4};
        pagoda_tensor vpad = strided(vt, (int64_t)m * H, D - d->V, (size_t)D * 4, d->V);
        MCALL("get_rows(v padding)", o->get_rows(c, &z, fw->mla.zeros, m * d->H, &vpad));
    }
    MCALL("kv_write(decompressed)", o->kv_write(c, fw->mla.scratch, SL, 0, &kt, &vt, fw->mla.ident + p0, m));
    return PAGODA_OK;
}

/* The decompressed attention of sequence s (rows [r0, r0 + n), context
 * positions [P, P + n) after P cached ones): K and V of every head for the
 * whole context into the scratch pool (the prefix's latents read back from
 * the KV pool, at most n rows at a time, then the chunk's own), then
 * causal attention over it into att's rows (packed: n rows of H (nope +
 * rope) values). */
static int decompressed_attend(pagoda_forward *fw, const pagoda_forward_layer *L,
                               const pagoda_batch *b, int32_t s, const pagoda_tensor *lat,
                               const pagoda_tensor *kpe, const mla_dims *d, const char **what)
{
    const pagoda_backend_ops *o = &fw->be->ops;
    void *c = fw->be->ctx;
    const pagoda_seq_view *sv = &b->seqs[s];
    const int32_t r0 = sv->q_start, n = sv->n_q, P = sv->ctx_len - sv->n_q;
    const int64_t H = d->H, D = d->QH;
    int st;
    /* where K and V are made: the chunk's own rows of the absorbed queries
     * and of att (it uses neither yet; an absorbed run uses only its own
     * rows) */
    pagoda_tensor kt = fw->mla.qabs;
    kt.offset += (size_t)r0 * (size_t)(H * d->KH) * 4;
    kt.rows = n;
    kt.cols = H * D;
    kt.row_stride = (size_t)kt.cols * 4;
    pagoda_tensor vt = kt;
    vt.buf = fw->att.buf;
    vt.offset = fw->att.offset + (size_t)r0 * (size_t)(H * d->KH) * 4;
    if (P > 0) {
        /* the cached prefix: layer kv_layer's plane of the KV pool read as
         * a table of one row a slot (n_kv_heads is 1: a slot is one row
         * of kv_lora + rope values), the prefix's slots from its table */
        const pagoda_kv_layout *KL = &fw->kv_layout;
        const int32_t bs = KL->block_size;
        for (int32_t j = 0; j < P; j++)
            fw->mla.ctx_slots[j] = sv->block_table[j / bs] * bs + j % bs;
        pagoda_tensor pool = {.buf = fw->kv, .offset = pagoda_kv_offset(KL, L->kv_layer, 0, 0),
                              .dtype = KL->dtype, .rows = (int64_t)KL->n_blocks * bs,
                              .cols = KL->head_dim, .row_stride = pagoda_kv_slot_bytes(KL)};
        pagoda_tensor stage = {.buf = fw->mla.scratch, .offset = fw->mla.staging_offset,
                               .dtype = PAGODA_DTYPE_F32, .cols = d->KH,
                               .row_stride = (size_t)d->KH * 4};
        for (int32_t p0 = 0; p0 < P; p0 += n) {
            int32_t m = P - p0 < n ? P - p0 : n;
            stage.rows = m;
            MCALL("get_rows(cached latents)", o->get_rows(c, &pool, fw->mla.ctx_slots + p0, m, &stage));
            pagoda_tensor pl = strided(stage, m, d->C, stage.row_stride, 0);
            pagoda_tensor pr = strided(stage, m, d->R, stage.row_stride, d->C);
            if ((st = decompress_rows(fw, L, &pl, &pr, m, p0, kt, vt, d, what))) return st;
        }
        if (L->kv_layer == 0) fw->mla.prefix_tokens_read += P;
    }
    /* the chunk's latents [n x kv_lora] and RoPE keys [n x rope] */
    pagoda_tensor cl = *lat, cr = *kpe;
    cl.offset += (size_t)r0 * lat->row_stride;
    cl.rows = n;
    cr.offset += (size_t)r0 * kpe->row_stride;
    cr.rows = n;
    if ((st = decompress_rows(fw, L, &cl, &cr, n, P, kt, vt, d, what))) return st;
    /* the queries are q as it stands: each head [q_nope | q_pe], D values */
    const pagoda_kv_layout *SL = &fw->mla.scratch_kv;
    pagoda_tensor q = fw->q;
    q.cols = H * D;
    q.row_stride = (size_t)q.cols * 4;
    q.offset += (size_t)r0 * q.row_stride;
    q.rows = n;
    pagoda_tensor att = fw->att;
    att.offset += (size_t)r0 * (size_t)(H * d->KH) * 4;
    att.rows = n;
    att.cols = H * D;
    att.row_stride = (size_t)att.cols * 4;
    pagoda_seq_view one = {.q_start = 0, .n_q = n, .ctx_len = P + n, .n_blocks = SL->n_blocks,
                           .block_table = fw->mla.scratch_table};
    pagoda_batch sb = {.seq_no = pagoda_seqno_mla_sub(b->seq_no, PAGODA_SEQNO_MLA_DECOMPRESSED, s),
                       .n_tokens = n, .tokens = b->tokens ? b->tokens + r0 : NULL, .positions = b->positions + r0,
                       .slots = b->slots + r0, .n_seqs = 1, .seqs = &one};
    MCALL("attention(decompressed)", o->attention(c, &q, fw->mla.scratch, SL, 0, &sb, d->H,
                                                  fw->hp.attn_scale, &att));
    if (L->kv_layer == 0) fw->mla.decompressed_tokens += n;
    return PAGODA_OK;
}

/* The values of a decompressed sequence (rows [r0, r0 + n)): each head's
 * first v outputs, gathered into q as [n H x v] from row r0 H. */
static int decompressed_values(pagoda_forward *fw, int32_t r0, int32_t n, const mla_dims *d)
{
    const int64_t H = d->H, D = d->QH;
    pagoda_tensor att = fw->att;
    att.offset += (size_t)r0 * (size_t)(H * d->KH) * 4;
    pagoda_tensor src = strided(att, (int64_t)n * H, d->V, (size_t)D * 4, 0);
    pagoda_tensor av = fw->q;
    av.offset += (size_t)r0 * (size_t)(H * d->V) * 4;
    av = strided(av, (int64_t)n * H, d->V, (size_t)d->V * 4, 0);
    return fw->be->ops.get_rows(fw->be->ctx, &src, fw->mla.rows, n * d->H, &av);
}

int pagoda_forward_mla(pagoda_forward *fw, const pagoda_forward_layer *L, const pagoda_batch *b,
                       const pagoda_rope_params *rp, const pagoda_tensor *xb,
                       const pagoda_tensor *out, const char **what)
{
    const pagoda_hparams *hp = &fw->hp;
    const pagoda_backend_ops *o = &fw->be->ops;
    void *c = fw->be->ctx;
    const int32_t T = b->n_tokens, H = hp->n_heads;
    mla_dims d = {.H = H, .R = hp->rope_dims, .N = hp->qk_nope, .C = hp->kv_lora_rank,
                  .V = hp->v_head_dim};
    d.QH = d.N + d.R;
    d.KH = d.C + d.R;
    const int64_t R = d.R, N = d.N, C = d.C, V = d.V, QH = d.QH;
    int st;
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
    /* the latent row into the KV pool (as K and V in a K-and-V layout) */
    MCALL("kv_write", o->kv_write(c, fw->kv, &fw->kv_layout, L->kv_layer, &kr, &kr, b->slots, T));
    /* (a batch of more sequences than rows, which the engine never makes,
     * would not fit mla.sub: it runs absorbed) */
    bool any = false;
    for (int32_t s = 0; s < b->n_seqs && b->n_seqs <= fw->max_tokens && !any; s++)
        any = decompresses(fw, &b->seqs[s]);
    if (!any) {
        /* every sequence absorbed: one call over the batch */
        if ((st = absorbed_attend(fw, L, b, 0, T, &d, what))) return st;
        MCALL("matmul_experts(attn_v_b)", absorbed_values(fw, L, 0, T, &d));
    } else {
        /* each from-scratch chunk decompressed, each run of other sequences
         * absorbed as a batch of its own (rows rebased to its first);
         * every attention reads q before the values overwrite it */
        for (int32_t s = 0; s < b->n_seqs;) {
            if (decompresses(fw, &b->seqs[s])) {
                if ((st = decompressed_attend(fw, L, b, s, &lat, &kpe, &d, what))) return st;
                s++;
                continue;
            }
            int32_t s1 = s;
            while (s1 < b->n_seqs && !decompresses(fw, &b->seqs[s1])) s1++;
            int32_t r0 = b->seqs[s].q_start;
            int32_t n = b->seqs[s1 - 1].q_start + b->seqs[s1 - 1].n_q - r0;
            for (int32_t i = s; i < s1; i++) {
                fw->mla.sub[i - s] = b->seqs[i];
                fw->mla.sub[i - s].q_start -= r0;
            }
            pagoda_batch sub = {.seq_no = pagoda_seqno_mla_sub(b->seq_no, PAGODA_SEQNO_MLA_ABSORBED, s),
                                .n_tokens = n, .tokens = b->tokens ? b->tokens + r0 : NULL,
                                .positions = b->positions + r0, .slots = b->slots + r0,
                                .n_seqs = s1 - s, .seqs = fw->mla.sub};
            if ((st = absorbed_attend(fw, L, &sub, r0, n, &d, what))) return st;
            s = s1;
        }
        for (int32_t s = 0; s < b->n_seqs; s++) {
            const pagoda_seq_view *sv = &b->seqs[s];
            if (decompresses(fw, sv))
                MCALL("get_rows(values)", decompressed_values(fw, sv->q_start, sv->n_q, &d));
            else
                MCALL("matmul_experts(attn_v_b)", absorbed_values(fw, L, sv->q_start, sv->n_q, &d));
        }
    }
    pagoda_tensor avt = strided(fw->q, T, H * V, (size_t)(H * V) * 4, 0);
    MCALL("matmul(attn_output)", o->matmul(c, &avt, &L->wo, NULL, out));
#undef MCALL
    return PAGODA_OK;
}
