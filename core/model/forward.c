/*
 * forward.c: the forward pass, one plain function over backend ops, in the
 * spirit of llama2.c's run.c. Each step runs every token of a flattened
 * batch (prefill chunks and decode tokens of many sequences) through all
 * layers at once; attention reads each sequence's KV through its block
 * table. The architectures differ in what model.c bound from arch.c's
 * row (QKV biases, Q/K norms, Gemma 3's embedding scale, post-norms, GeGLU
 * and sliding-window layers with their own RoPE table, routed experts and
 * shared experts), each one `if` here; the expert FFN is forward_moe.c.
 * Not for: choosing the batch or sampling.
 */
#include "forward.h"

#include "forward_mla.h"
#include "forward_moe.h"
#include "tp_shard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERR(...) snprintf(err, err_len, __VA_ARGS__)

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* The width of hb/hb2: the dense FFN where some layer has one, and the
 * shared expert, which uses them too. */
static size_t hb_width(const pagoda_hparams *hp)
{
    bool dense = hp->n_experts == 0 || hp->n_dense_lead > 0;
    size_t w = dense ? (size_t)hp->ffn : 0;
    return (size_t)hp->ffn_shexp > w ? (size_t)hp->ffn_shexp : w;
}

/* MLA: q holds the queries (heads x (nope + rope)) and later the values
 * (heads x v); at least the plain q_dim (heads x head_dim). */
static size_t mla_q_width(const pagoda_hparams *hp)
{
    size_t w = (size_t)hp->n_heads * hp->head_dim;
    size_t qh = (size_t)hp->n_heads * (size_t)(hp->qk_nope + hp->rope_dims);
    size_t vh = (size_t)hp->n_heads * (size_t)hp->v_head_dim;
    if (qh > w) w = qh;
    return vh > w ? vh : w;
}

/* The activation tensors, in the order they are carved from one buffer. */
size_t pagoda_forward_act_bytes(const pagoda_hparams *hp, int32_t T, int32_t S)
{
    size_t q_dim = (size_t)hp->n_heads * hp->head_dim, kv_dim = (size_t)hp->n_kv_heads * hp->head_dim;
    size_t per_tok = 3 * (size_t)hp->dim + 2 * q_dim + 2 * kv_dim + 2 * hb_width(hp);
    if (hp->n_experts > 0) {
        /* router logits, the pair rows' gate, up and output, the shared
         * expert's output before its gate */
        per_tok += (size_t)hp->n_experts +
                   (size_t)hp->n_experts_used * (2 * (size_t)hp->ffn_exp + (size_t)hp->dim) +
                   (hp->ffn_shexp > 0 ? (size_t)hp->dim : 0);
        /* the pairs' expert biases (gpt-oss) */
        if (hp->exp_bias)
            per_tok += (size_t)hp->n_experts_used *
                       (size_t)(hp->ffn_exp > hp->dim ? hp->ffn_exp : hp->dim);
    }
    if (hp->mla) {
        /* q is widened to the largest of the query and value heads
         * (mla_q_width), plus the query LoRA and the absorbed queries */
        per_tok += mla_q_width(hp) - q_dim + (size_t)hp->q_lora_rank + q_dim;
    }
    size_t per_logit = (size_t)hp->dim + (size_t)hp->n_vocab;
    /* + 64 bytes of alignment slack per tensor (11 tensors; 17 with experts) */
    size_t n_tensors = (hp->n_experts > 0 ? 17 : 11) + (hp->mla ? 2 : 0);
    return ((size_t)T * per_tok + (size_t)S * per_logit) * sizeof(float) + n_tensors * 64;
}

static pagoda_tensor weight(const pagoda_forward *fw, const gguf_tensor *t)
{
    pagoda_tensor w = {0};
    if (!t) return w;
    w.buf = fw->weights;
    w.offset = t->offset;
    w.dtype = t->type;
    w.cols = t->ne[0];
    w.rows = t->n_dims >= 2 ? t->ne[1] : 1;
    if (fw->tp_offsets) {
        /* this rank's packed shard (pack_shard) */
        const gguf_file *g = fw->model->gguf;
        w.offset = fw->tp_offsets[t - g->tensors];
        int split = pagoda_tp_split_of(t->name.ptr, t->name.len);
        int64_t n = fw->tp.size;
        if (split == PAGODA_TP_EXPERTS || split == PAGODA_TP_HEADS)
            w.rows = t->ne[1];   /* one expert or head (weight_experts) */
        else if (split == PAGODA_TP_ROWS && t->n_dims >= 2) w.rows /= n;
        else if (split == PAGODA_TP_ROWS || split == PAGODA_TP_COLS) w.cols /= n;
    }
    w.row_stride = pagoda_dtype_row_bytes(t->type, w.cols);
    return w;
}

/* A 3-D expert tensor as the view of this rank's first expert [ne1 x ne0]
 * and the bytes from one expert to the next (with tensor parallelism the
 * rank's experts are one contiguous run of its shard). */
static pagoda_tensor weight_experts(const pagoda_forward *fw, const gguf_tensor *t, size_t *stride)
{
    pagoda_tensor w = {0};
    *stride = 0;
    if (!t) return w;
    w.buf = fw->weights;
    w.offset = fw->tp_offsets ? fw->tp_offsets[t - fw->model->gguf->tensors] : t->offset;
    w.dtype = t->type;
    w.cols = t->ne[0];
    w.rows = t->ne[1];
    w.row_stride = pagoda_dtype_row_bytes(t->type, w.cols);
    *stride = w.row_stride * (size_t)w.rows;
    return w;
}

/* Tensor parallelism: this rank's share of every tensor, packed into one
 * host buffer (each tensor 64-byte aligned): row-split tensors are one
 * contiguous run of whole rows, column-split ones a run of whole blocks of
 * every row, the rest whole. Only these pages of the mapped file are read. */
static int pack_shard(pagoda_forward *fw, size_t *bytes, char *err, size_t err_len)
{
    const gguf_file *g = fw->model->gguf;
    int64_t n = fw->tp.size, r = fw->tp.rank;
    fw->tp_offsets = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *fw->tp_offsets);
    if (!fw->tp_offsets) { ERR("out of memory"); return PAGODA_ERR_NOMEM; }
    size_t off = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        fw->tp_offsets[i] = off;
        off = align_up(off + pagoda_tp_tensor_bytes(&g->tensors[i], (int32_t)n), 64);
    }
    *bytes = off ? off : 64;
    unsigned char *dst = NULL;
    if (posix_memalign((void **)&dst, 64, *bytes)) { ERR("out of memory for the rank's %zu weight bytes", *bytes); return PAGODA_ERR_NOMEM; }
    fw->tp_weights = dst;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        const unsigned char *src = (const unsigned char *)g->map + g->data_offset + t->offset;
        unsigned char *d = dst + fw->tp_offsets[i];
        uint64_t share = pagoda_tp_tensor_bytes(t, (int32_t)n);
        int split = pagoda_tp_split_of(t->name.ptr, t->name.len);
        if (split == PAGODA_TP_COLS) {
            size_t row = pagoda_dtype_row_bytes(t->type, t->ne[0]), part = row / (size_t)n;
            int64_t rows = t->n_dims >= 2 ? t->ne[1] : 1;
            for (int64_t y = 0; y < rows; y++)
                memcpy(d + (size_t)y * part, src + (size_t)y * row + (size_t)r * part, part);
        } else if (split == PAGODA_TP_ROWS || split == PAGODA_TP_EXPERTS || split == PAGODA_TP_HEADS) {
            /* whole rows, whole experts or whole heads: one contiguous run */
            memcpy(d, src + (size_t)r * share, share);
        } else {
            memcpy(d, src, share);
        }
    }
    return PAGODA_OK;
}

/* The comm reduces in the backend's own memory (ABI 1.12 buffer_address)? */
static bool tp_in_place(const pagoda_forward_tp *tp, const pagoda_backend *be)
{
    return be->ops.buffer_address && tp->device_memory == !be->info.host_memory;
}

/* Sum the rank's partial t [rows x dim] (contiguous) over every rank, in place. */
static int tp_reduce(pagoda_forward *fw, const pagoda_tensor *t, char *err, size_t err_len)
{
    const pagoda_backend_ops *o = &fw->be->ops;
    size_t n = (size_t)t->rows * (size_t)t->cols;
    int st;
    if (fw->tp_in_place) {
        void *p = NULL;
        /* the comm plugin reads the bytes on its own stream or threads:
         * after the backend's work on them is done */
        if ((st = o->synchronize(fw->be->ctx))) { ERR("synchronize before the all-reduce failed"); return st; }
        if ((st = o->buffer_address(fw->be->ctx, t->buf, t->offset, n * sizeof(float), &p))) {
            ERR("buffer_address for the all-reduce failed");
            return st;
        }
        return fw->tp.all_reduce(fw->tp.user, p, n, err, err_len);
    }
    st = o->download(fw->be->ctx, t->buf, t->offset, fw->tp_host, n * sizeof(float));
    if (st) { ERR("download for the all-reduce failed"); return st; }
    if ((st = fw->tp.all_reduce(fw->tp.user, fw->tp_host, n, err, err_len))) return st;
    st = o->upload(fw->be->ctx, t->buf, t->offset, fw->tp_host, n * sizeof(float));
    if (st) ERR("upload after the all-reduce failed");
    return st;
}

static pagoda_tensor act(pagoda_forward *fw, size_t *off, int64_t rows, int64_t cols)
{
    pagoda_tensor t = {.buf = fw->act, .offset = *off, .dtype = PAGODA_DTYPE_F32,
                       .rows = rows, .cols = cols, .row_stride = (size_t)cols * 4};
    *off = align_up(*off + (size_t)rows * (size_t)cols * 4, 64);
    return t;
}

static const char *be_error(const pagoda_backend *be)
{
    const char *e = be->host && be->last_error ? be->last_error(be->host) : NULL;
    return e && *e ? e : "no message";
}

/* Every matrix the backend multiplies (or gathers rows of: the embedding)
 * in a type it advertises? Checked before the weights are handed over, so a
 * model the backend cannot run is refused at start, naming the tensor, its
 * type and the backend's types, instead of after a long upload. */
static int check_weight_types(const pagoda_model *m, const pagoda_backend *be, char *err, size_t err_len)
{
    const gguf_tensor *t = NULL;
    for (int l = -1; l < m->hp.n_layers && !t; l++) {
        const gguf_tensor *ws[21] = {0};
        if (l < 0) {
            ws[0] = m->tok_embd;
            ws[1] = m->output;
        } else {
            const pagoda_layer_tensors *L = &m->layers[l];
            const gguf_tensor *lw[15] = {L->wq, L->wk, L->wv, L->wo, L->w_gate, L->w_up, L->w_down,
                                         L->ffn_gate_inp, L->ffn_gate_exps, L->ffn_up_exps,
                                         L->ffn_down_exps, L->ffn_gate_shexp, L->ffn_up_shexp,
                                         L->ffn_down_shexp, L->ffn_gate_inp_shexp};
            memcpy(ws, lw, sizeof lw);
            const gguf_tensor *mw[6] = {L->wq_a, L->wq_b, L->wkv_a, L->wk_b, L->wv_b, NULL};
            memcpy(ws + 15, mw, sizeof mw);
        }
        for (int i = 0; i < 21 && !t; i++)
            if (ws[i] && (ws[i]->type < 0 || ws[i]->type > 63 || !((be->info.weight_types >> ws[i]->type) & 1)))
                t = ws[i];
    }
    if (!t) return PAGODA_OK;
    char types[160] = "";
    size_t n = 0;
    for (int d = 0; d < 64 && n < sizeof types; d++)
        if ((be->info.weight_types >> d) & 1)
            n += (size_t)snprintf(types + n, sizeof types - n, "%s%s", n ? " " : "", pagoda_dtype_name(d));
    ERR("backend %s cannot run tensor %.*s: its type %s is not one of the backend's weight types (%s)",
        be->info.name[0] ? be->info.name : "?", (int)t->name.len, t->name.ptr, pagoda_dtype_name(t->type),
        n ? types : "none");
    return PAGODA_ERR_UNSUPPORTED;
}

int pagoda_forward_check_backend(const pagoda_hparams *hp, const pagoda_backend *be, char *err,
                                 size_t err_len)
{
    const char *op = NULL, *why = NULL;
    if (hp->ffn_act == PAGODA_FFN_GELU_TANH && !be->ops.geglu) {
        op = "geglu";
        why = "its GELU-tanh feed-forward";
    } else if ((hp->n_swa_layers > 0 || hp->attn_sinks) && !be->ops.attention_ext) {
        op = "attention_ext";
        why = hp->n_swa_layers > 0 ? "its sliding-window layers" : "its attention sinks";
    }
    if (!op && hp->attn_sinks && !be->info.attn_sinks) {
        ERR("backend %s does not honour attention sinks (info.attn_sinks, plugin ABI 1.8), which "
            "%s models need (a learned logit per head in every softmax; run without it, every "
            "token's attention would be wrong): serve this model with [engine] backend = cpu, or "
            "add sinks to the plugin's attention_ext (docs/plugin-guide.md)",
            be->info.name[0] ? be->info.name : "(unnamed)", hp->arch);
        return PAGODA_ERR_UNSUPPORTED;
    }
    /* scale has a fallback (a host round trip of the embeddings) */
    if (!op && hp->n_experts > 0 && !be->ops.matmul_experts && !be->info.host_memory) {
        /* the core's fallback (a matmul per routed row) reads a device's
         * weights one row of tokens at a time: refused rather than crawled */
        ERR("backend %s has no matmul_experts op (an optional op of plugin ABI 1.5), which "
            "mixture-of-experts models (%s: %d experts, top-%d) need on a device: serve this model "
            "with [engine] backend = cpu, or add matmul_experts to the plugin "
            "(docs/plugin-guide.md)", be->info.name[0] ? be->info.name : "(unnamed)", hp->arch,
            hp->n_experts, hp->n_experts_used);
        return PAGODA_ERR_UNSUPPORTED;
    }
    if (!op) return PAGODA_OK;
    ERR("backend %s has no %s op (an optional op of plugin ABI 1.1), which %s models need for %s: "
        "serve this model with a backend that has it ([engine] backend = cpu), or add %s to the "
        "plugin (docs/plugin-guide.md)", be->info.name[0] ? be->info.name : "(unnamed)", op,
        hp->arch, why, op);
    return PAGODA_ERR_UNSUPPORTED;
}

void pagoda_forward_kv_layouts(const pagoda_hparams *hp, const pagoda_forward_kv *kv,
                               pagoda_kv_layout *main, pagoda_kv_layout *local)
{
    bool window = kv->local_blocks > 0 && hp->n_swa_layers > 0;
    int32_t n_local = window ? hp->n_swa_layers : 0;
    *main = (pagoda_kv_layout){.n_layers = hp->n_layers - n_local, .n_blocks = kv->n_blocks,
                               .block_size = kv->block_size, .n_kv_heads = hp->n_kv_heads,
                               .head_dim = hp->head_dim, .dtype = kv->dtype};
    *local = *main;
    local->n_layers = n_local;
    local->n_blocks = window ? kv->local_blocks : 0;
}

int pagoda_forward_check_kv(const pagoda_hparams *hp, const pagoda_backend *be, int32_t kv_dtype,
                            char *err, size_t err_len)
{
    const char *bn = be->info.name[0] ? be->info.name : "(unnamed)";
    if (kv_dtype < 0 || kv_dtype > 63 || !((be->info.kv_types >> kv_dtype) & 1)) {
        char types[96] = "";
        size_t n = 0;
        for (int d = 0; d < 64 && n < sizeof types; d++)
            if ((be->info.kv_types >> d) & 1)
                n += (size_t)snprintf(types + n, sizeof types - n, "%s%s", n ? " " : "", pagoda_dtype_name(d));
        ERR("backend %s cannot keep the KV cache as %s ([engine] kv_dtype): its KV types are %s; "
            "set kv_dtype to one of them, or serve with a backend that stores %s",
            bn, pagoda_dtype_name(kv_dtype), n ? types : "none", pagoda_dtype_name(kv_dtype));
        return PAGODA_ERR_UNSUPPORTED;
    }
    pagoda_kv_layout L = {.n_layers = 1, .n_blocks = 1, .block_size = 1, .n_kv_heads = hp->n_kv_heads,
                          .head_dim = hp->head_dim, .dtype = kv_dtype};
    if (!pagoda_kv_head_bytes(&L)) {
        int be_ = 1;
        pagoda_dtype_block(kv_dtype, &be_, NULL);
        ERR("KV cache type %s stores blocks of %d values along each head, but this model's heads "
            "have %d values, not a multiple of %d: use kv_dtype = f16 or f32", pagoda_dtype_name(kv_dtype),
            be_, hp->head_dim, be_);
        return PAGODA_ERR_UNSUPPORTED;
    }
    return PAGODA_OK;
}

int pagoda_forward_init(pagoda_forward *fw, const pagoda_model *m, pagoda_backend *be,
                        int32_t max_tokens, int32_t max_logits, int32_t n_blocks,
                        int32_t block_size, int32_t kv_dtype, char *err, size_t err_len)
{
    pagoda_forward_kv kv = {.n_blocks = n_blocks, .block_size = block_size, .dtype = kv_dtype};
    return pagoda_forward_init_kv(fw, m, be, max_tokens, max_logits, &kv, err, err_len);
}

/* A KV pool of L's bytes, every byte zero: the window pool's blocks are
 * handed from sequence to sequence, and a query whose window reaches
 * before the first token its sequence wrote (a recompute after a prefix
 * hit, engine_swa.c) reads what is there; finite values keep that from
 * becoming a NaN. The main pool is left as allocated (it is read only
 * where written). */
static int alloc_pool(pagoda_forward *fw, const pagoda_kv_layout *L, bool zero, pagoda_buffer **out,
                      size_t *bytes, char *err, size_t err_len)
{
    pagoda_backend *be = fw->be;
    *bytes = pagoda_kv_pool_bytes(L);
    *out = NULL;
    if (*bytes == 0) return PAGODA_OK;   /* no layer in it (every layer slides) */
    int st = be->ops.buffer_alloc(be->ctx, PAGODA_BUF_KV, *bytes, out);
    if (st) {
        ERR("backend could not allocate the %s (%d blocks of %d layers, %zu bytes): %s",
            zero ? "sliding-window KV pool" : "KV pool", L->n_blocks, L->n_layers, *bytes,
            be_error(be));
        return st;
    }
    if (!zero) return PAGODA_OK;
    size_t chunk = *bytes < (1u << 20) ? *bytes : (1u << 20);
    void *z = calloc(1, chunk);
    if (!z) { ERR("out of memory"); return PAGODA_ERR_NOMEM; }
    for (size_t off = 0; off < *bytes && !st; off += chunk)
        st = be->ops.upload(be->ctx, *out, off, z, *bytes - off < chunk ? *bytes - off : chunk);
    free(z);
    if (st) ERR("backend could not clear the sliding-window KV pool: %s", be_error(be));
    return st;
}

int pagoda_forward_init_kv(pagoda_forward *fw, const pagoda_model *m, pagoda_backend *be,
                           int32_t max_tokens, int32_t max_logits, const pagoda_forward_kv *kv,
                           char *err, size_t err_len)
{
    return pagoda_forward_init_tp(fw, m, be, max_tokens, max_logits, kv, NULL, err, err_len);
}

int pagoda_forward_init_tp(pagoda_forward *fw, const pagoda_model *m, pagoda_backend *be,
                           int32_t max_tokens, int32_t max_logits, const pagoda_forward_kv *kv,
                           const pagoda_forward_tp *tp, char *err, size_t err_len)
{
    memset(fw, 0, sizeof *fw);
    int st = check_weight_types(m, be, err, err_len);
    if (st) return st;
    fw->model = m;
    fw->be = be;
    fw->max_tokens = max_tokens;
    fw->max_logits = max_logits;
    fw->hp = m->hp;
    fw->tp.size = 1;
    if (tp && tp->size > 1) {
        pagoda_tp_dims td = {.n_heads = m->hp.n_heads, .n_kv_heads = m->hp.n_kv_heads,
                             .ffn = m->hp.ffn, .n_swa_layers = m->hp.n_swa_layers,
                             .n_experts = m->hp.n_experts, .n_dense_lead = m->hp.n_dense_lead,
                             .mla = m->hp.mla};
        if (!tp->all_reduce || tp->rank < 0 || tp->rank >= tp->size) {
            ERR("internal: tensor parallel rank %d of %d without an all-reduce", tp->rank, tp->size);
            fw->be = NULL;
            return PAGODA_ERR_INTERNAL;
        }
        if ((st = pagoda_tp_check(m->gguf, &td, tp->size, err, err_len))) {
            fw->be = NULL;
            return st;
        }
        if (tp->device_memory && !tp_in_place(tp, be)) {
            ERR("the comm plugin reduces in device memory, which backend %s cannot hand it (%s): "
                "use a host-memory comm (engine.comm = mpi) or a device backend with "
                "buffer_address (plugin ABI 1.12)", be->info.name[0] ? be->info.name : "?",
                be->info.host_memory ? "its buffers are host memory" : "no buffer_address op");
            fw->be = NULL;
            return PAGODA_ERR_UNSUPPORTED;
        }
        fw->tp = *tp;
        fw->tp_in_place = tp_in_place(tp, be);
        fw->hp.n_heads /= tp->size;
        /* MLA's one latent row is every head's: each rank keeps it whole
         * (computed from attn_kv_a_mqa, replicated) and runs its heads
         * over it */
        if (!m->hp.mla) fw->hp.n_kv_heads /= tp->size;
        fw->hp.ffn /= tp->size;
        fw->hp.ffn_shexp /= tp->size;
    }
    int64_t first, count;
    pagoda_tp_expert_range(fw->hp.n_experts, fw->tp.rank, fw->tp.size, &first, &count);
    fw->exp_lo = (int32_t)first;
    fw->n_exp_local = (int32_t)count;
    const pagoda_hparams *hp = &fw->hp;
    st = pagoda_forward_check_backend(hp, be, err, err_len);
    if (!st) st = pagoda_forward_check_kv(hp, be, kv->dtype, err, err_len);
    if (st) {
        fw->be = NULL;   /* nothing to free */
        return st;
    }

    /* weights: the whole data section of the file, used in place where the
     * backend can (CPU), copied to the device otherwise; with tensor
     * parallelism this rank's packed share */
    const gguf_file *g = m->gguf;
    const void *data = g->map + g->data_offset;
    fw->weight_bytes = g->size - g->data_offset;
    if (fw->tp.size > 1) {
        if ((st = pack_shard(fw, &fw->weight_bytes, err, err_len))) goto fail;
        data = fw->tp_weights;
        if (!fw->tp_in_place) {
            fw->tp_host = malloc(sizeof(float) * (size_t)max_tokens * (size_t)hp->dim);
            if (!fw->tp_host) { ERR("out of memory"); st = PAGODA_ERR_NOMEM; goto fail; }
        }
    }
    if (be->ops.weights_from_host)
        st = be->ops.weights_from_host(be->ctx, data, fw->weight_bytes, &fw->weights);
    else {
        st = be->ops.buffer_alloc(be->ctx, PAGODA_BUF_WEIGHTS, fw->weight_bytes, &fw->weights);
        if (!st) st = be->ops.upload(be->ctx, fw->weights, 0, data, fw->weight_bytes);
    }
    if (st) {
        ERR("backend could not take the weights (%zu bytes): %s", fw->weight_bytes, be_error(be));
        goto fail;
    }
    fw->tok_embd = weight(fw, m->tok_embd);
    fw->output_norm = weight(fw, m->output_norm);
    fw->output = weight(fw, m->output);
    fw->layers = calloc((size_t)hp->n_layers, sizeof *fw->layers);
    if (!fw->layers) { ERR("out of memory"); st = PAGODA_ERR_NOMEM; goto fail; }
    for (int l = 0; l < hp->n_layers; l++) {
        const pagoda_layer_tensors *L = &m->layers[l];
        pagoda_forward_layer *F = &fw->layers[l];
        F->attn_norm = weight(fw, L->attn_norm);
        F->wq = weight(fw, L->wq); F->wk = weight(fw, L->wk); F->wv = weight(fw, L->wv);
        F->wo = weight(fw, L->wo);
        F->has_bias = L->bq != NULL;
        F->bq = weight(fw, L->bq); F->bk = weight(fw, L->bk); F->bv = weight(fw, L->bv);
        F->has_qk_norm = L->q_norm != NULL;
        F->q_norm = weight(fw, L->q_norm); F->k_norm = weight(fw, L->k_norm);
        F->ffn_norm = weight(fw, L->ffn_norm);
        F->w_gate = weight(fw, L->w_gate); F->w_up = weight(fw, L->w_up);
        F->w_down = weight(fw, L->w_down);
        F->has_post_norms = L->post_attn_norm != NULL;
        F->post_attn_norm = weight(fw, L->post_attn_norm);
        F->post_ffn_norm = weight(fw, L->post_ffn_norm);
        F->mla = hp->mla;
        if (F->mla) {
            F->wq_a = weight(fw, L->wq_a);
            F->q_a_norm = weight(fw, L->q_a_norm);
            F->wq_b = weight(fw, L->wq_b);
            F->wkv_a = weight(fw, L->wkv_a);
            F->kv_a_norm = weight(fw, L->kv_a_norm);
            F->wk_b = weight_experts(fw, L->wk_b, &F->wk_b_stride);
            F->wv_b = weight_experts(fw, L->wv_b, &F->wv_b_stride);
        }
        F->sinks = weight(fw, L->attn_sinks);   /* [n_heads] as [1 x n_heads] */
        /* attn_output is split by columns and its partial sums summed over
         * the ranks: its bias is added once, by rank 0 */
        F->has_bo = L->bo != NULL && fw->tp.rank == 0;
        F->bo = weight(fw, L->bo);
        F->window = pagoda_hparams_is_swa(hp, l) ? hp->swa_window : 0;
        F->moe = L->ffn_gate_exps != NULL;
        if (F->moe) {
            F->router = weight(fw, L->ffn_gate_inp);
            F->gate_exps = weight_experts(fw, L->ffn_gate_exps, &F->gate_exps_stride);
            F->up_exps = weight_experts(fw, L->ffn_up_exps, &F->up_exps_stride);
            F->down_exps = weight_experts(fw, L->ffn_down_exps, &F->down_exps_stride);
            F->exp_probs_b = L->exp_probs_b ? (const float *)L->exp_probs_b->data : NULL;
            F->has_router_b = L->ffn_gate_inp_b != NULL;
            F->router_b = weight(fw, L->ffn_gate_inp_b);
            F->has_exp_bias = L->ffn_gate_exps_b != NULL;
            F->gate_exps_b = weight(fw, L->ffn_gate_exps_b);   /* [E x ffn_exp] */
            F->up_exps_b = weight(fw, L->ffn_up_exps_b);
            F->down_exps_b = weight(fw, L->ffn_down_exps_b);   /* [E x dim] */
            F->has_shexp = L->ffn_gate_shexp != NULL;
            F->gate_shexp = weight(fw, L->ffn_gate_shexp);
            F->up_shexp = weight(fw, L->ffn_up_shexp);
            F->down_shexp = weight(fw, L->ffn_down_shexp);
            F->has_shexp_gate = L->ffn_gate_inp_shexp != NULL;
            F->gate_inp_shexp = weight(fw, L->ffn_gate_inp_shexp);
        }
    }
    /* which pool each layer's KV is in, and its index there */
    pagoda_forward_kv_layouts(hp, kv, &fw->kv_layout, &fw->kv_local_layout);
    /* multi-head latent attention: one row a slot, the key and the value;
     * a backend without the latent kind (ABI 1.7) keeps it as both */
    if (hp->mla && (be->info.kv_kinds & (1u << PAGODA_KV_LATENT)))
        fw->kv_layout.kind = PAGODA_KV_LATENT;
    for (int l = 0, n_main = 0, n_local = 0; l < hp->n_layers; l++) {
        pagoda_forward_layer *F = &fw->layers[l];
        F->local = F->window > 0 && fw->kv_local_layout.n_layers > 0;
        F->kv_layer = F->local ? n_local++ : n_main++;
    }

    /* activations */
    fw->act_bytes = pagoda_forward_act_bytes(hp, max_tokens, max_logits);
    st = be->ops.buffer_alloc(be->ctx, PAGODA_BUF_ACTIVATIONS, fw->act_bytes, &fw->act);
    if (st) {
        ERR("backend could not allocate %zu bytes of activations: %s", fw->act_bytes, be_error(be));
        goto fail;
    }
    int64_t T = max_tokens, S = max_logits;
    int64_t q_dim = (int64_t)hp->n_heads * hp->head_dim, kv_dim = (int64_t)hp->n_kv_heads * hp->head_dim;
    size_t off = 0;
    fw->x = act(fw, &off, T, hp->dim);
    fw->xb = act(fw, &off, T, hp->dim);
    fw->xb2 = act(fw, &off, T, hp->dim);
    fw->q = act(fw, &off, T, hp->mla ? (int64_t)mla_q_width(hp) : q_dim);
    fw->att = act(fw, &off, T, q_dim);
    fw->k = act(fw, &off, T, kv_dim);
    fw->v = act(fw, &off, T, kv_dim);
    fw->hb = act(fw, &off, T, (int64_t)hb_width(hp));
    fw->hb2 = act(fw, &off, T, (int64_t)hb_width(hp));
    fw->xl = act(fw, &off, S, hp->dim);
    fw->logits = act(fw, &off, S, hp->n_vocab);
    if (hp->n_experts > 0) {
        int64_t P = T * hp->n_experts_used, E = hp->n_experts;
        fw->rl = act(fw, &off, T, E);
        fw->eg = act(fw, &off, P, hp->ffn_exp);
        fw->eu = act(fw, &off, P, hp->ffn_exp);
        fw->ey = act(fw, &off, P, hp->dim);
        if (hp->ffn_shexp > 0) fw->ys = act(fw, &off, T, hp->dim);
        if (hp->exp_bias) fw->eb = act(fw, &off, P, hp->ffn_exp > hp->dim ? hp->ffn_exp : hp->dim);
        fw->moe.logits = malloc(sizeof(float) * (size_t)(T * E));
        fw->moe.weights = malloc(sizeof(float) * (size_t)P);
        fw->moe.pair_w = malloc(sizeof(float) * (size_t)P);
        fw->moe.ids = malloc(sizeof(int32_t) * (size_t)P);
        fw->moe.pair_e = malloc(sizeof(int32_t) * (size_t)P);
        fw->moe.pair_t = malloc(sizeof(int32_t) * (size_t)P);
        fw->moe.pair_tmp = malloc(sizeof(int32_t) * (size_t)P);
        fw->moe.tok = malloc(sizeof(int32_t) * (size_t)T);
        fw->moe.gate = malloc(sizeof(float) * (size_t)T);
        fw->moe.scratch = malloc(sizeof(float) * 3 * (size_t)E);
        if (!fw->moe.logits || !fw->moe.weights || !fw->moe.pair_w || !fw->moe.ids ||
            !fw->moe.pair_e || !fw->moe.pair_t || !fw->moe.pair_tmp || !fw->moe.tok || !fw->moe.gate ||
            !fw->moe.scratch) {
            ERR("out of memory for the routing of %lld tokens", (long long)T);
            st = PAGODA_ERR_NOMEM;
            goto fail;
        }
        for (int32_t t = 0; t < T; t++) fw->moe.tok[t] = t;
    }
    if (hp->mla) {
        int64_t P = T * hp->n_heads;
        if (hp->q_lora_rank > 0) fw->mla.qa = act(fw, &off, T, hp->q_lora_rank);
        fw->mla.qabs = act(fw, &off, T, q_dim);
        fw->mla.pos = malloc(sizeof(int32_t) * (size_t)P);
        fw->mla.head = malloc(sizeof(int32_t) * (size_t)P);
        fw->mla.rows = malloc(sizeof(int32_t) * (size_t)P);
        if (!fw->mla.pos || !fw->mla.head || !fw->mla.rows) {
            ERR("out of memory for the latent attention of %lld tokens", (long long)T);
            st = PAGODA_ERR_NOMEM;
            goto fail;
        }
        for (int64_t r = 0; r < P; r++) {
            fw->mla.head[r] = (int32_t)(r % hp->n_heads);
            fw->mla.rows[r] = (int32_t)r;
        }
    }
    if (off > fw->act_bytes) {
        ERR("internal: activation layout %zu > %zu bytes", off, fw->act_bytes);
        st = PAGODA_ERR_INTERNAL;
        goto fail;
    }

    /* KV pools */
    st = alloc_pool(fw, &fw->kv_layout, false, &fw->kv, &fw->kv_bytes, err, err_len);
    if (!st && fw->kv_local_layout.n_layers > 0)
        st = alloc_pool(fw, &fw->kv_local_layout, true, &fw->kv_local, &fw->kv_local_bytes, err,
                        err_len);
    if (st) goto fail;

    fw->inv_freq = malloc(sizeof(float) * (size_t)(hp->rope_dims / 2));
    if (!fw->inv_freq) { ERR("out of memory"); st = PAGODA_ERR_NOMEM; goto fail; }
    pagoda_model_rope_inv_freq(m, fw->inv_freq);
    if (hp->n_swa_layers > 0) {
        fw->inv_freq_swa = malloc(sizeof(float) * (size_t)(hp->rope_dims / 2));
        if (!fw->inv_freq_swa) { ERR("out of memory"); st = PAGODA_ERR_NOMEM; goto fail; }
        pagoda_model_rope_inv_freq_swa(m, fw->inv_freq_swa);
    }
    return PAGODA_OK;
fail:
    pagoda_forward_free(fw);
    return st ? st : PAGODA_ERR_INTERNAL;
}

void pagoda_forward_free(pagoda_forward *fw)
{
    if (!fw->be) return;
    pagoda_backend *be = fw->be;
    pagoda_forward_mla_decompress_free(fw);
    be->ops.buffer_free(be->ctx, fw->kv);
    be->ops.buffer_free(be->ctx, fw->kv_local);
    be->ops.buffer_free(be->ctx, fw->act);
    be->ops.buffer_free(be->ctx, fw->weights);
    free(fw->layers);
    free(fw->inv_freq);
    free(fw->inv_freq_swa);
    free(fw->tp_weights);
    free(fw->tp_offsets);
    free(fw->tp_host);
    free(fw->moe.logits);
    free(fw->moe.weights);
    free(fw->moe.pair_w);
    free(fw->moe.ids);
    free(fw->moe.pair_e);
    free(fw->moe.pair_t);
    free(fw->moe.pair_tmp);
    free(fw->moe.tok);
    free(fw->moe.gate);
    free(fw->moe.scratch);
    free(fw->mla.pos);
    free(fw->mla.head);
    free(fw->mla.rows);
    memset(fw, 0, sizeof *fw);
}

/* x *= s with the backend's scale op, or on the host where it has none
 * (download, multiply, upload: the embeddings of one step). */
static int scale_rows(pagoda_forward *fw, const pagoda_tensor *x, float s)
{
    const pagoda_backend_ops *o = &fw->be->ops;
    void *c = fw->be->ctx;
    if (o->scale) return o->scale(c, x, s, x);
    size_t n = (size_t)x->rows * (size_t)x->cols;
    float *h = malloc(n * sizeof *h);
    if (!h) return PAGODA_ERR_NOMEM;
    int st = o->download(c, x->buf, x->offset, h, n * sizeof *h);   /* x is packed */
    if (!st) {
        for (size_t i = 0; i < n; i++) h[i] *= s;
        st = o->upload(c, x->buf, x->offset, h, n * sizeof *h);
    }
    free(h);
    return st;
}

/* out[i] = x * w[i]^T (+ bias[i]) for i < n: the backend's matmul_multi
 * (ABI 1.3: x prepared once for all of them), else n matmuls. bias may be
 * NULL; *what names the matmul that failed. */
int pagoda_forward_matmuls(pagoda_forward *fw, const pagoda_tensor *x, int32_t n, const pagoda_tensor *w,
                           const pagoda_tensor *const *bias, const pagoda_tensor *out,
                           const char *const *names, const char **what)
{
    const pagoda_backend_ops *o = &fw->be->ops;
    if (o->matmul_multi) {
        *what = names[n];
        return o->matmul_multi(fw->be->ctx, x, n, w, bias, out);
    }
    for (int32_t i = 0; i < n; i++) {
        *what = names[i];
        int st = o->matmul(fw->be->ctx, x, &w[i], bias ? bias[i] : NULL, &out[i]);
        if (st) return st;
    }
    return PAGODA_OK;
}

/* A view of the first n rows of an activation tensor. */
static pagoda_tensor rows(pagoda_tensor t, int64_t n)
{
    t.rows = n;
    return t;
}

/* The same bytes seen as [rows*cols/c x c] (per-head views). */
static pagoda_tensor reshape(pagoda_tensor t, int64_t c)
{
    t.rows = t.rows * t.cols / c;
    t.cols = c;
    t.row_stride = (size_t)c * 4;
    return t;
}

/* A packed [n x c] view at the start of an activation tensor. */
static pagoda_tensor view(pagoda_tensor t, int64_t n, int64_t c)
{
    t.rows = n;
    t.cols = c;
    t.row_stride = (size_t)c * 4;
    return t;
}

/* Final norm and vocabulary projection of n rows of the residual stream,
 * downloaded to out [n x vocab]; *what names the op that failed. */
static int output_logits(pagoda_forward *fw, int32_t T, const int32_t *rows_of, int32_t n,
                         float *out, const char **what)
{
    const pagoda_hparams *hp = &fw->hp;
    const pagoda_backend_ops *o = &fw->be->ops;
    void *c = fw->be->ctx;
    pagoda_tensor x = rows(fw->x, T), xl = rows(fw->xl, n), logits = rows(fw->logits, n);
    int st;
    if ((st = o->get_rows(c, &x, rows_of, n, &xl))) { *what = "get_rows(last)"; return st; }
    if ((st = o->rms_norm(c, &xl, &fw->output_norm, hp->rms_eps, &xl))) {
        *what = "rms_norm(output_norm)";
        return st;
    }
    if ((st = o->matmul(c, &xl, &fw->output, NULL, &logits))) { *what = "matmul(output)"; return st; }
    if ((st = o->download(c, fw->act, logits.offset, out, (size_t)n * (size_t)hp->n_vocab * 4))) {
        *what = "download(logits)";
        return st;
    }
    return PAGODA_OK;
}

int pagoda_forward_run(pagoda_forward *fw, const pagoda_batch *batch, const int32_t *logit_rows,
                       int32_t n_logits, float *logits_out, char *err, size_t err_len)
{
    return pagoda_forward_run_scan(fw, batch, NULL, logit_rows, n_logits, logits_out, NULL, err,
                                   err_len);
}

int pagoda_forward_run_scan(pagoda_forward *fw, const pagoda_batch *batch,
                            const pagoda_batch *local, const int32_t *logit_rows,
                            int32_t n_logits, float *logits_out, const pagoda_logit_scan *scan,
                            char *err, size_t err_len)
{
    const pagoda_hparams *hp = &fw->hp;
    const pagoda_backend_ops *o = &fw->be->ops;
    void *c = fw->be->ctx;
    int32_t T = batch->n_tokens;
    if (T <= 0 || T > fw->max_tokens || n_logits < 0 || n_logits > fw->max_logits) {
        ERR("batch of %d tokens / %d logit rows exceeds the sizes %d / %d", T, n_logits,
            fw->max_tokens, fw->max_logits);
        return PAGODA_ERR_INVALID;
    }
    if (fw->kv_local && (!local || local->n_tokens != T || local->n_seqs != batch->n_seqs)) {
        ERR("the sliding-window layers have a KV pool of their own: the step needs their batch "
            "(%d tokens, %d sequences), got %s", T, batch->n_seqs, local ? "another shape" : "none");
        return PAGODA_ERR_INVALID;
    }
    pagoda_tensor x = rows(fw->x, T), xb = rows(fw->xb, T), xb2 = rows(fw->xb2, T);
    pagoda_tensor q = rows(fw->q, T), k = rows(fw->k, T), v = rows(fw->v, T);
    pagoda_tensor att = rows(fw->att, T), hb = rows(fw->hb, T), hb2 = rows(fw->hb2, T);
    pagoda_rope_params rope = {.n_rot = hp->rope_dims, .neox = hp->rope_neox,
                               .mscale = hp->rope_mscale, .inv_freq = fw->inv_freq};
    pagoda_rope_params rope_swa = rope;
    rope_swa.inv_freq = fw->inv_freq_swa;
    /* local layers: no scaling (model.h), or gpt-oss's, the global one */
    rope_swa.mscale = hp->swa_rope_global ? hp->rope_mscale : 1.0f;
    pagoda_attn_params ap = {.struct_size = sizeof ap, .n_heads = hp->n_heads,
                             .scale = hp->attn_scale};
    const char *what = "";
    int st;
#define CALL(name, expr) do { what = name; if ((st = (expr))) goto fail; } while (0)

    CALL("get_rows(token_embd)", o->get_rows(c, &fw->tok_embd, batch->tokens, T, &x));
    if (hp->embd_scale != 1.0f) CALL("scale(embeddings)", scale_rows(fw, &x, hp->embd_scale));
    for (int l = 0; l < hp->n_layers; l++) {
        const pagoda_forward_layer *L = &fw->layers[l];
        const pagoda_rope_params *rp = L->window ? &rope_swa : &rope;
        /* attention block */
        CALL("rms_norm(attn_norm)", o->rms_norm(c, &x, &L->attn_norm, hp->rms_eps, &xb));
        if (L->mla) {
            if ((st = pagoda_forward_mla(fw, L, batch, rp, &xb, &xb2, &what))) goto fail;
        } else {
        {
            static const char *const nm[] = {"matmul(attn_q)", "matmul(attn_k)", "matmul(attn_v)",
                                             "matmul_multi(attn_q, attn_k, attn_v)"};
            const pagoda_tensor w3[3] = {L->wq, L->wk, L->wv}, o3[3] = {q, k, v};
            const pagoda_tensor *const b3[3] = {&L->bq, &L->bk, &L->bv};
            if ((st = pagoda_forward_matmuls(fw, &xb, 3, w3, L->has_bias ? b3 : NULL, o3, nm, &what))) goto fail;
        }
        if (L->has_qk_norm) {
            pagoda_tensor qh = reshape(q, hp->head_dim), kh = reshape(k, hp->head_dim);
            CALL("rms_norm(attn_q_norm)", o->rms_norm(c, &qh, &L->q_norm, hp->rms_eps, &qh));
            CALL("rms_norm(attn_k_norm)", o->rms_norm(c, &kh, &L->k_norm, hp->rms_eps, &kh));
        }
        CALL("rope(q)", o->rope(c, &q, hp->n_heads, hp->head_dim, batch->positions, rp));
        CALL("rope(k)", o->rope(c, &k, hp->n_kv_heads, hp->head_dim, batch->positions, rp));
        /* the layer's pool: a sliding-window layer with a pool of its own
         * writes and reads it through the window batch's slots and tables */
        pagoda_buffer *kvb = L->local ? fw->kv_local : fw->kv;
        const pagoda_kv_layout *kvl = L->local ? &fw->kv_local_layout : &fw->kv_layout;
        const pagoda_batch *lb = L->local ? local : batch;
        CALL("kv_write", o->kv_write(c, kvb, kvl, L->kv_layer, &k, &v, lb->slots, T));
        if (L->window || L->sinks.buf) {
            ap.window = L->window;
            ap.sinks = L->sinks;
            CALL(L->window ? "attention_ext(window)" : "attention_ext(sinks)",
                 o->attention_ext(c, &q, kvb, kvl, L->kv_layer, lb, &ap, &att));
        } else {
            CALL("attention", o->attention(c, &q, kvb, kvl, L->kv_layer, lb, hp->n_heads,
                                           hp->attn_scale, &att));
        }
        CALL("matmul(attn_output)", o->matmul(c, &att, &L->wo, L->has_bo ? &L->bo : NULL, &xb2));
        }
        if (fw->tp.size > 1 && (st = tp_reduce(fw, &xb2, err, err_len))) return st;
        if (L->has_post_norms)
            CALL("rms_norm(post_attention_norm)",
                 o->rms_norm(c, &xb2, &L->post_attn_norm, hp->rms_eps, &xb2));
        CALL("add", o->add(c, &x, &xb2, &x));
        /* feed-forward block */
        CALL("rms_norm(ffn_norm)", o->rms_norm(c, &x, &L->ffn_norm, hp->rms_eps, &xb));
        if (L->moe) {
            if ((st = pagoda_forward_moe(fw, L, T, &xb, &xb2, &what))) goto fail;
        } else {
            static const char *const nm[] = {"matmul(ffn_gate)", "matmul(ffn_up)",
                                             "matmul_multi(ffn_gate, ffn_up)"};
            pagoda_tensor hg = view(hb, T, L->w_gate.rows), hu = view(hb2, T, L->w_up.rows);
            const pagoda_tensor w2[2] = {L->w_gate, L->w_up}, o2[2] = {hg, hu};
            if ((st = pagoda_forward_matmuls(fw, &xb, 2, w2, NULL, o2, nm, &what))) goto fail;
            if (hp->ffn_act == PAGODA_FFN_GELU_TANH) CALL("geglu", o->geglu(c, &hg, &hu, &hg));
            else CALL("swiglu", pagoda_forward_glu(fw, &hg, &hu));
            CALL("matmul(ffn_down)", o->matmul(c, &hg, &L->w_down, NULL, &xb2));
        }
        if (fw->tp.size > 1 && (st = tp_reduce(fw, &xb2, err, err_len))) return st;
        if (L->has_post_norms)
            CALL("rms_norm(post_ffw_norm)", o->rms_norm(c, &xb2, &L->post_ffn_norm, hp->rms_eps, &xb2));
        CALL("add", o->add(c, &x, &xb2, &x));
    }
    /* the scan's rows first, a group at a time through logits_out, which
     * the kept rows then overwrite */
    for (int32_t f = 0; scan && f < scan->n_rows; f += fw->max_logits) {
        int32_t n = scan->n_rows - f < fw->max_logits ? scan->n_rows - f : fw->max_logits;
        if ((st = output_logits(fw, T, scan->rows + f, n, logits_out, &what))) goto fail;
        scan->consume(scan->user, f, n, logits_out);
    }
    if (n_logits > 0) {
        if ((st = output_logits(fw, T, logit_rows, n_logits, logits_out, &what))) goto fail;
    } else if (o->synchronize) {
        CALL("synchronize", o->synchronize(c));
    }
#undef CALL
    return PAGODA_OK;
fail:
    ERR("backend op %s failed (%s): %s", what, pagoda_status_str(st), be_error(fw->be));
    return st;
}
