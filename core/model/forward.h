/*
 * forward.h: the transformer forward pass over a flattened batch, in the
 * spirit of llama2.c's run.c, calling only backend ops. It owns the
 * activation buffer and the KV pool (allocated through the backend) and the
 * tensor views of the weights. Not for: deciding what runs (engine.c) or
 * sampling (sampler.c).
 */
#ifndef PAGODA_FORWARD_H
#define PAGODA_FORWARD_H

#include "pagoda/backend.h"
#include "model.h"

/* A backend instance as the core holds it: the ops table copied into a
 * zeroed struct of this SDK's size, and the plugin's context. */
typedef struct pagoda_backend {
    pagoda_backend_ops ops;
    void *ctx;
    pagoda_backend_info info;
    const struct pagoda_host *host;   /* the instance's host table: its last error */
    /* how to read that error (the core's pagoda_host_last_error); the
     * model library does not link the core, so the core hands it over */
    const char *(*last_error)(const struct pagoda_host *host);
} pagoda_backend;

typedef struct pagoda_forward_layer {
    pagoda_tensor attn_norm, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm;
    pagoda_tensor ffn_norm, w_gate, w_up, w_down;
    pagoda_tensor post_attn_norm, post_ffn_norm;  /* gemma3 */
    bool has_bias, has_qk_norm, has_post_norms;
    /* gpt-oss: the sink logits [1 x n_heads] (buf NULL: none) and the
     * output projection's bias [1 x dim] */
    pagoda_tensor sinks, bo;
    bool has_bo;
    /* mixture of experts (moe): the router [E x dim], this rank's experts
     * as the view of its first one (rows x cols of one expert) and the
     * bytes from one expert to the next, the shared expert (a dense FFN of
     * this rank's ffn_shexp rows) and its sigmoid gate [1 x dim], and the
     * selection bias (host memory, [E]) */
    bool moe, has_shexp, has_shexp_gate;
    pagoda_tensor router, gate_exps, up_exps, down_exps;
    size_t gate_exps_stride, up_exps_stride, down_exps_stride;
    pagoda_tensor gate_shexp, up_shexp, down_shexp, gate_inp_shexp;
    const float *exp_probs_b;
    /* multi-head latent attention (mla, forward_mla.c): the query LoRA or
     * wq, the latent projection and norm, and per head attn_k_b / attn_v_b
     * as the view of head 0's matrix and the bytes to the next head's */
    bool mla;
    pagoda_tensor wq_a, q_a_norm, wq_b, wkv_a, kv_a_norm, wk_b, wv_b;
    size_t wk_b_stride, wv_b_stride;
    /* decompressed prefill (pagoda_forward_mla_decompress): attn_k_b
     * transposed, head 0's [nope x kv_lora] and the bytes to the next
     * head's; buf NULL when the feature is off */
    pagoda_tensor wk_bt;
    size_t wk_bt_stride;
    /* gpt-oss: the router's bias [1 x E] and the experts' bias tables
     * [E x ffn_exp] ([E x dim] for down), buf NULL where absent */
    bool has_router_b, has_exp_bias;
    pagoda_tensor router_b, gate_exps_b, up_exps_b, down_exps_b;
    int32_t window;        /* sliding window of this layer, 0: full causal */
    bool local;            /* its KV is in the window pool (kv_local), not the main one */
    int32_t kv_layer;      /* its layer index within that pool's layout */
} pagoda_forward_layer;

/* Where the KV of a model lives. Without a window pool every layer is in
 * the main pool. With one (local_blocks > 0, the engine's swa_kv = window),
 * the sliding-window layers are in a pool of their own, whose blocks the
 * engine hands out as each sequence's window slides (engine_swa.c), and
 * the main pool, whose block ids the KV policy manages, holds only the
 * global layers. Both pools share block_size and dtype. */
typedef struct pagoda_forward_kv {
    int32_t n_blocks;        /* blocks of the main pool */
    int32_t block_size;      /* tokens per block */
    int32_t dtype;           /* PAGODA_DTYPE_F16, F32 or Q8_0 (both pools) */
    int32_t local_blocks;    /* 0: no window pool; else its blocks */
} pagoda_forward_kv;

/* Tensor parallelism as the forward pass sees it (filled by the core's
 * tp.c): this rank's place among size ranks and the all-reduce (sum, in
 * place, host memory) of the partial sums that attn_output and ffn_down
 * leave. size <= 1: the whole model, no collectives. */
typedef struct pagoda_forward_tp {
    int32_t rank, size;
    int (*all_reduce)(void *user, float *buf, size_t count, char *err, size_t err_len);
    void *user;
    /* where all_reduce's buffer must live: device memory (a comm plugin
     * such as NCCL) or host memory. When it is the backend's own memory
     * and the backend has buffer_address (ABI 1.12), the partial sums are
     * reduced in place; else they are staged through host memory, which a
     * device-memory comm cannot take (refused at init). */
    bool device_memory;
} pagoda_forward_tp;

typedef struct pagoda_forward {
    const pagoda_model *model;
    /* the model as this rank runs it: the hyperparameters with heads, KV
     * heads and FFN rows divided by the ranks (= model->hp with one) */
    pagoda_hparams hp;
    pagoda_forward_tp tp;
    void *tp_weights;        /* the rank's packed shard of the weights (host), or NULL */
    uint64_t *tp_offsets;    /* [n_tensors] each tensor's offset in it */
    float *tp_host;          /* [max_tokens x dim] staging for the all-reduce (NULL in place) */
    bool tp_in_place;        /* the all-reduce runs on the backend's buffer (buffer_address) */
    pagoda_backend *be;
    int32_t max_tokens;      /* rows of the activation buffers */
    int32_t max_logits;      /* rows of logits per step */
    pagoda_buffer *weights;  /* the GGUF data section */
    pagoda_buffer *act;
    pagoda_buffer *kv;
    pagoda_kv_layout kv_layout;          /* the main pool: every layer, or the global ones */
    pagoda_buffer *kv_local;             /* the window pool, or NULL */
    pagoda_kv_layout kv_local_layout;    /* its layout: the sliding-window layers */
    size_t act_bytes, kv_bytes, kv_local_bytes, weight_bytes;
    pagoda_tensor tok_embd, output_norm, output;
    pagoda_forward_layer *layers;
    /* activations, F32: shape comments give [rows x cols] at full size */
    pagoda_tensor x;         /* [T x dim]   residual stream */
    pagoda_tensor xb;        /* [T x dim]   normed input of a block */
    pagoda_tensor xb2;       /* [T x dim]   a block's output before the residual add */
    pagoda_tensor q;         /* [T x q_dim] */
    pagoda_tensor k, v;      /* [T x kv_dim] */
    pagoda_tensor att;       /* [T x q_dim] attention output */
    pagoda_tensor hb, hb2;   /* [T x ffn]   gate and up projections */
    pagoda_tensor xl;        /* [S x dim]   rows that produce logits */
    pagoda_tensor logits;    /* [S x vocab] */
    /* mixture of experts: [E x dim] router logits (and the shared gate's
     * [T x 1]), the (token, choice) pair rows P = T x n_experts_used */
    pagoda_tensor rl;        /* [T x E] */
    pagoda_tensor eg, eu;    /* [P x ffn_exp] the experts' gate and up */
    pagoda_tensor ey;        /* [P x dim]     the experts' outputs */
    pagoda_tensor ys;        /* [T x dim]     the shared expert before its gate */
    pagoda_tensor eb;        /* [P x max(ffn_exp, dim)] the pairs' expert biases (gpt-oss) */
    int32_t exp_lo, n_exp_local;   /* this rank's experts: [exp_lo, exp_lo + n_exp_local) */
    struct {                 /* host scratch of the routing */
        float *logits;       /* [T x E] */
        float *weights;      /* [P] */
        float *pair_w;       /* [P] this rank's pairs: weight, */
        int32_t *ids;        /* [P] */
        int32_t *pair_e;     /* [P] local expert, */
        int32_t *pair_t;     /* [P] token */
        int32_t *pair_tmp;   /* [P] scratch of the fallback's sort */
        int32_t *tok;        /* [T] 0, 1, ..., T-1 */
        float *gate;         /* [T] shared expert's gate */
        float *scratch;      /* [3 E] */
    } moe;
    struct {                 /* multi-head latent attention (hp.mla) */
        pagoda_tensor qa;    /* [T x q_lora] the query LoRA's output */
        pagoda_tensor qabs;  /* [T x H (kv_lora + rope)] the absorbed queries */
        int32_t *pos;        /* [T H] each (token, head) row's position */
        int32_t *head;       /* [T H] its head: 0, 1, ..., H-1, 0, 1, ... */
        int32_t *rows;       /* [T H] 0, 1, 2, ... */
        /* decompressed prefill (forward_mla.c; decompress_min 0: off): a
         * chunk of >= decompress_min tokens whose context (cached prefix
         * + chunk) fits scratch_tokens gets K and V per head in `scratch`,
         * a K-and-V pool of one layer in the cache's type (layout
         * scratch_kv: scratch_tokens slots of heads x (nope + rope)
         * values, V zero-padded from v_head_dim; then one F32 row of
         * zeros; then the staging rows, F32 [max_tokens x (kv_lora +
         * rope)], where the prefix's latents are read back from the KV
         * pool a piece at a time), and attention over it */
        int32_t decompress_min;
        int32_t scratch_tokens;          /* the longest context it decompresses */
        bool read_prefix;                /* get_rows reads a KV pool row (the KV type in
                                          * info.weight_types, and a probe of one row at
                                          * set-up took): chunks after a cached prefix may
                                          * decompress */
        char no_prefix_why[256];         /* why not, when on and read_prefix is false */
        int32_t *ctx_slots;              /* [scratch_tokens] a prefix's KV-pool slots */
        int32_t *ident;                  /* [scratch_tokens] 0, 1, 2, ... (scratch slots) */
        size_t staging_offset;           /* the staging rows' bytes into `scratch` */
        int32_t *tok;        /* [T H] each (token, head) row's token: 0, .., 0, 1, .. */
        int32_t *scratch_table;          /* [scratch_kv.n_blocks] 0, 1, 2, ... */
        pagoda_seq_view *sub;            /* [T] a run of absorbed sequences, rebased */
        int32_t *zeros;                  /* [T H] all 0: V's padding from the zero row */
        pagoda_kv_layout scratch_kv;
        pagoda_buffer *scratch;          /* the pool, 2 x scratch_kv's bytes */
        pagoda_buffer *kbt;              /* every layer's attn_k_b transposed */
        void *kbt_host;                  /* its host bytes (weights_from_host keeps them; NULL
                                          * after an upload) */
        size_t kbt_bytes, scratch_bytes;
        int64_t decompressed_tokens;     /* tokens that ran it (tests, benchmarks) */
        int64_t prefix_tokens_read;      /* cached prefix tokens it read back (layer 0) */
    } mla;
    float *inv_freq;         /* [rope_dims / 2] global layers */
    float *inv_freq_swa;     /* [rope_dims / 2] sliding-window layers (gemma3), else NULL */
} pagoda_forward;

/* Can backend `be` run model `m`? The ops of ABI 1.1 are optional, and some
 * architectures need them (gemma3: geglu, attention_ext); a mixture of
 * experts needs ABI 1.5's matmul_experts on a device backend (a host-memory
 * one runs the core's fallback); attention sinks (gpt-oss) need ABI 1.8's
 * info.attn_sinks: PAGODA_OK, or PAGODA_ERR_UNSUPPORTED with
 * one line naming the backend, the op, the ABI minor that added it and the
 * fix. pagoda_forward_init checks it; the runtime calls it before loading
 * weights so a server refuses at once. */
int pagoda_forward_check_backend(const pagoda_hparams *hp, const pagoda_backend *be, char *err,
                                 size_t err_len);

/* Can backend `be` keep this model's KV cache in kv_dtype? PAGODA_OK, or
 * PAGODA_ERR_UNSUPPORTED with one line naming the type, the backend's KV
 * types (info.kv_types) and the fix; also refuses a block type (Q8_0)
 * whose blocks do not tile head_dim. pagoda_forward_init checks it; the
 * runtime calls it before loading weights. */
int pagoda_forward_check_kv(const pagoda_hparams *hp, const pagoda_backend *be, int32_t kv_dtype,
                            char *err, size_t err_len);

/* Activation bytes the pass needs for T tokens and S logit rows (the memory
 * plan uses the same formula). */
size_t pagoda_forward_act_bytes(const pagoda_hparams *hp, int32_t T, int32_t S);

/* The layouts of the main pool and of the window pool (local->n_layers 0
 * without one) that pagoda_forward_init_kv allocates for kv (the memory
 * plan's tests compare its bytes with them). */
void pagoda_forward_kv_layouts(const pagoda_hparams *hp, const pagoda_forward_kv *kv,
                               pagoda_kv_layout *main, pagoda_kv_layout *local);

/* Make weight tensors, the activation buffer and the KV pools of kv (a
 * window pool only for a model with sliding-window layers). */
int pagoda_forward_init_kv(pagoda_forward *fw, const pagoda_model *m, pagoda_backend *be,
                           int32_t max_tokens, int32_t max_logits, const pagoda_forward_kv *kv,
                           char *err, size_t err_len);
/* The same for rank tp->rank of tp->size (tensor parallelism; tp NULL or
 * size 1: the whole model): the split weights are packed into a host
 * buffer of this rank's share (tp_shard.h says which), the KV pool holds
 * this rank's KV heads, and each layer all-reduces its two partial sums
 * through tp->all_reduce. A model that does not split size ways is
 * refused with the numbers (pagoda_tp_check). */
int pagoda_forward_init_tp(pagoda_forward *fw, const pagoda_model *m, pagoda_backend *be,
                           int32_t max_tokens, int32_t max_logits, const pagoda_forward_kv *kv,
                           const pagoda_forward_tp *tp, char *err, size_t err_len);
/* The same with every layer in one pool of n_blocks blocks of block_size
 * tokens in kv_dtype. */
int pagoda_forward_init(pagoda_forward *fw, const pagoda_model *m, pagoda_backend *be,
                        int32_t max_tokens, int32_t max_logits, int32_t n_blocks,
                        int32_t block_size, int32_t kv_dtype, char *err, size_t err_len);
void pagoda_forward_free(pagoda_forward *fw);

/* Run one step. logit_rows[i] (< batch->n_tokens) are the rows whose
 * logits are written to logits_out[i * n_vocab ...] (host memory). */
int pagoda_forward_run(pagoda_forward *fw, const pagoda_batch *batch, const int32_t *logit_rows,
                       int32_t n_logits, float *logits_out, char *err, size_t err_len);

/* Rows whose logits are looked at once and dropped (prompt scoring): any
 * number of them, so a prefill chunk can score every token it holds while
 * no buffer ever holds more than max_logits rows of the vocabulary. */
typedef struct pagoda_logit_scan {
    const int32_t *rows;     /* batch rows (< batch->n_tokens), any count */
    int32_t n_rows;
    /* [the caller's thread] logits [n x n_vocab] of rows[first .. first + n),
     * valid only during the call */
    void (*consume)(void *user, int32_t first, int32_t n, const float *logits);
    void *user;
} pagoda_logit_scan;

/* pagoda_forward_run, and first the scan's rows: max_logits rows at a time
 * through the output norm and projection into logits_out (which must hold
 * max_logits rows), each group handed to scan->consume before the next
 * overwrites it; then the kept rows as above. scan may be NULL.
 * local: with a window pool, the same step as the sliding-window layers
 * see it (the same tokens, positions and sequences; their slots and block
 * tables in the window pool); NULL without one. */
int pagoda_forward_run_scan(pagoda_forward *fw, const pagoda_batch *batch,
                            const pagoda_batch *local, const int32_t *logit_rows,
                            int32_t n_logits, float *logits_out, const pagoda_logit_scan *scan,
                            char *err, size_t err_len);

/* Decompressed prefill (docs/models.md, "Multi-head latent attention").
 * Is it on for hp (a rank's heads) with max_tokens rows a step and a
 * threshold of min_tokens (0: off)? It also needs the values no wider than
 * a key head (nope + rope; they are zero-padded to it) and nope <=
 * kv_lora (a key head fits the rows where K and V are made); a
 * threshold above max_tokens never fires, so nothing is made. */
bool pagoda_mla_decompress_on(const pagoda_hparams *hp, int32_t max_tokens, int32_t min_tokens);
/* The longest context (cached prefix + chunk) a decompressed chunk may
 * have, and so the scratch pool's tokens: max_ctx (the caller's cap:
 * engine.mla_decompress_ctx, at most max_seq_len; 0: none) but never
 * below max_tokens (a from-scratch chunk always fits), rounded up to 16.
 * A chunk with a longer context stays absorbed. */
int32_t pagoda_mla_scratch_tokens(int32_t max_tokens, int32_t max_ctx);
/* The type of the transposed attn_k_b copy for a source of type src: F32
 * for F32 (exact), else F16 (exact for F16; for a quantized or BF16
 * source a rounding of 2^-11 relative, below the source's own). */
int pagoda_mla_kbt_dtype(int src_dtype);
/* Bytes of one layer's copy (hp->n_heads heads of [nope x kv_lora]). */
uint64_t pagoda_mla_kbt_layer_bytes(const pagoda_hparams *hp, int src_dtype);
/* Bytes of the scratch: the pool of scratch_tokens tokens (K and V in
 * kv_dtype, the cache's, F16 where its blocks do not tile a key head;
 * every head's nope + rope values a token), a zero row, and the staging
 * rows (F32, max_tokens x (kv_lora + rope)) a prefix is read back into. */
uint64_t pagoda_mla_scratch_bytes(const pagoda_hparams *hp, int32_t scratch_tokens,
                                  int32_t max_tokens, int32_t kv_dtype);

/* Turn the decompressed prefill on for fw (after pagoda_forward_init*):
 * a sequence's chunk that holds >= min_tokens tokens and whose context
 * fits pagoda_mla_scratch_tokens(fw->max_tokens, max_ctx) then runs
 * decompressed (a chunk after a cached prefix reads the prefix's latents
 * back from the KV pool with get_rows; where the backend's weight types
 * lack the KV type, or a probe get_rows of one pool row fails here, only
 * chunks from position 0 decompress: read_prefix stays false and
 * no_prefix_why says why). Builds each layer's transposed attn_k_b (this
 * rank's heads) and the scratch; does nothing where
 * pagoda_mla_decompress_on says no. PAGODA_OK, or a status with err
 * filled (out of memory, the backend refused a buffer) and fw unchanged.
 * pagoda_forward_free frees what it made. */
int pagoda_forward_mla_decompress(pagoda_forward *fw, int32_t min_tokens, int32_t max_ctx, char *err,
                                  size_t err_len);
/* Free what pagoda_forward_mla_decompress made (it is off after). */
void pagoda_forward_mla_decompress_free(pagoda_forward *fw);

#endif /* PAGODA_FORWARD_H */
