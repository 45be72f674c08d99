/*
 * pagoda/backend.h: the kernel interface. A backend owns device memory
 * (buffers) and runs kernels on tensors inside them, in order, on one
 * stream. The core's forward pass calls only these ops; it never touches
 * memory a backend owns except through upload/download.
 *
 * Threads: every op is [engine thread] unless marked otherwise (buffers
 * and the weights are also made on the loading thread before the engine
 * thread starts): the core calls one backend instance from one thread at
 * a time. Kernels may run asynchronously; `synchronize` and `download`
 * wait for all earlier work.
 *
 * Metadata (token ids, positions, KV slots, block tables) is passed as
 * host pointers valid only for the duration of the call; a device backend
 * copies what it needs (it may cache per batch using pagoda_batch.seq_no).
 *
 * Errors: every op returns pagoda_status and, on error, reports a message
 * through host->error(). No op aborts on bad input.
 *
 * Not for: scheduling or KV bookkeeping (scheduler.h, kvcache.h) or model
 * structure: the forward pass lives in the core.
 */
#ifndef PAGODA_BACKEND_H
#define PAGODA_BACKEND_H

#include "pagoda/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a buffer is for (a backend may place them differently). */
typedef enum pagoda_buffer_purpose {
    PAGODA_BUF_WEIGHTS = 1,
    PAGODA_BUF_KV = 2,
    PAGODA_BUF_ACTIVATIONS = 3,
    PAGODA_BUF_WORKSPACE = 4
} pagoda_buffer_purpose;

typedef struct pagoda_backend_info {
    size_t struct_size;
    char name[64];            /* "cpu (AVX2, 2 threads, OpenBLAS Haswell)" */
    uint64_t mem_total;       /* bytes of device memory; host RAM for CPU */
    uint64_t mem_free;        /* bytes free now */
    uint32_t alignment;       /* offsets within buffers must be multiples */
    uint64_t weight_types;    /* bit (1 << pagoda_dtype) for each matmul weight type */
    uint64_t kv_types;        /* bit (1 << pagoda_dtype) for each KV type it stores (F32, F16,
                               * Q8_0: see pagoda_kv_layout); the core refuses another at start */
    bool host_memory;         /* buffers live in host RAM (the CPU backend) */
    /* ABI 1.7: bit (1 << pagoda_kv_kind) for each layout kind it stores
     * beyond PAGODA_KV_SEPARATE (which every backend stores; 0 from an
     * older plugin). The core hands a PAGODA_KV_LATENT layout only to a
     * backend that sets its bit, and keeps a latent model's row as both K
     * and V of a separate layout otherwise. */
    uint32_t kv_kinds;
    /* ABI 1.8: attention_ext honours pagoda_attn_params.sinks. false (an
     * older backend's zeroed field): the core refuses, at start, a model
     * with attention sinks (gpt-oss) rather than run it without them. */
    bool attn_sinks;
} pagoda_backend_info;

/*
 * The KV pool: one buffer laid out by block. For layer l, K (kv=0) or
 * V (kv=1; not in a latent layout, below), block b, slot s in the block, head h, the head's head_dim
 * values start at
 *   pagoda_kv_offset(layout, l, kv, b) + (s * n_kv_heads + h) * pagoda_kv_head_bytes(layout)
 * and are stored as one row of `dtype` (types.h):
 *   F32, F16: head_dim values of 4 or 2 bytes, value d at d * 4 (or 2);
 *   Q8_0 (ABI 1.3): head_dim / 32 blocks of 34 bytes, GGUF's Q8_0 block
 *     (f16 scale d, then 32 int8 q; value = d * q), values 32i..32i+31 in
 *     block i, so head_dim must be a multiple of 32.
 * A slot holds every head's row side by side, so a slot's whole K (or V)
 * is one row of n_kv_heads * head_dim values of `dtype`.
 * A token's slot number is block * block_size + slot-in-block.
 * Layouts are generic: the core may hand a backend more than one (a
 * pool per group of layers), each with its own dtype and sizes; a kernel
 * reads the bytes only through these helpers.
 *
 * The latent kind (ABI 1.7, kind = PAGODA_KV_LATENT): multi-head latent
 * attention (DeepSeek V2/V3, Kimi K2) caches per token and layer one row
 * of head_dim values (n_kv_heads = 1: the normalised latent, then the
 * RoPE key) that is the key AND the value. Such a pool has no V plane
 * (kv = 0 only: pagoda_kv_planes is 1, so a block takes half the bytes);
 * kv_write stores k and does not read v; attention reads each slot's row
 * as key and as value (out[head] = softmax(scale q.row) . row: head_dim
 * values a head, like q); copy_blocks copies the one plane. Everything
 * else (blocks, slots, dtypes, Q8_0's multiple of 32) is as above.
 */
typedef enum pagoda_kv_kind {
    PAGODA_KV_SEPARATE = 0,   /* a K row and a V row per slot */
    PAGODA_KV_LATENT = 1      /* ABI 1.7: one row per slot, the key and the value */
} pagoda_kv_kind;

typedef struct pagoda_kv_layout {
    int32_t n_layers;
    int32_t n_blocks;
    int32_t block_size;   /* tokens per block */
    int32_t n_kv_heads;
    int32_t head_dim;
    int32_t dtype;        /* PAGODA_DTYPE_F32, PAGODA_DTYPE_F16 or (ABI 1.3) PAGODA_DTYPE_Q8_0 */
    int32_t kind;         /* ABI 1.7: pagoda_kv_kind (0: K and V, as before) */
} pagoda_kv_layout;

/* Planes a layer of the layout has: 2 (K and V), or 1 for the latent kind. */
static inline int pagoda_kv_planes(const pagoda_kv_layout *L)
{
    return L->kind == PAGODA_KV_LATENT ? 1 : 2;
}

/* Bytes of one head's head_dim values in the layout's dtype; 0 when the
 * dtype is not a KV type or head_dim is not a whole number of its blocks. */
static inline size_t pagoda_kv_head_bytes(const pagoda_kv_layout *L)
{
    if (L->dtype != PAGODA_DTYPE_F32 && L->dtype != PAGODA_DTYPE_F16 && L->dtype != PAGODA_DTYPE_Q8_0)
        return 0;
    return pagoda_dtype_row_bytes(L->dtype, L->head_dim);
}

/* Bytes of one slot (every KV head) of K or V. */
static inline size_t pagoda_kv_slot_bytes(const pagoda_kv_layout *L)
{
    return (size_t)L->n_kv_heads * pagoda_kv_head_bytes(L);
}

static inline size_t pagoda_kv_block_bytes(const pagoda_kv_layout *L)
{
    return (size_t)L->block_size * pagoda_kv_slot_bytes(L);
}

static inline size_t pagoda_kv_offset(const pagoda_kv_layout *L, int layer, int kv, int block)
{
    return (((size_t)layer * (size_t)pagoda_kv_planes(L) + (size_t)kv) * (size_t)L->n_blocks +
            (size_t)block) * pagoda_kv_block_bytes(L);
}

static inline size_t pagoda_kv_pool_bytes(const pagoda_kv_layout *L)
{
    return (size_t)L->n_layers * (size_t)pagoda_kv_planes(L) * (size_t)L->n_blocks *
           pagoda_kv_block_bytes(L);
}

/* One sequence's part of a flattened batch. Its queries are rows
 * q_start .. q_start+n_q-1 of the batch, at positions ctx_len-n_q ..
 * ctx_len-1; after this step's kv_write the cache holds positions
 * 0 .. ctx_len-1 in the blocks of block_table (in order). */
typedef struct pagoda_seq_view {
    int32_t q_start;
    int32_t n_q;
    int32_t ctx_len;
    int32_t n_blocks;
    const int32_t *block_table;
} pagoda_seq_view;

/* One step's flattened batch. Built by the core, read by kernels. */
typedef struct pagoda_batch {
    uint64_t seq_no;           /* an opaque key for caching uploads per batch: equal keys,
                                * the same batch content (tokens, positions, slots, seqs);
                                * a backend reads nothing else from it. The core's layout
                                * (core/model/seqno.h): bits 0-39 a counter (the engine's
                                * step, or the draft model's pass), 40-59 an MLA sub-batch's
                                * index, bit 60 an MLA decompressed sub-batch, 61 an MLA
                                * absorbed sub-batch, 62 the draft model's batches, 63 the
                                * sliding-window layers' view of a step (their own pool) */
    int32_t n_tokens;
    const int32_t *tokens;     /* [n_tokens] */
    const int32_t *positions;  /* [n_tokens] */
    const int32_t *slots;      /* [n_tokens] KV slot of each token */
    int32_t n_seqs;
    const pagoda_seq_view *seqs; /* [n_seqs], rows in order, no gaps */
} pagoda_batch;

/* Rotary embedding parameters, resolved by the core (so scaling variants,
 * linear, llama3, YaRN, need no backend change). Pairs are (d, d + n_rot/2)
 * for NeoX order, (2i, 2i+1) otherwise; dims >= n_rot pass through.
 * angle(pos, i) = pos * inv_freq[i]; the rotated values are scaled by mscale. */
typedef struct pagoda_rope_params {
    int32_t n_rot;            /* rotated dims per head (even, <= head_dim) */
    bool neox;                /* NeoX (half-split) pairing */
    float mscale;             /* 1.0 unless a scaling method says otherwise */
    const float *inv_freq;    /* [n_rot / 2] */
} pagoda_rope_params;

/* The most matrices one matmul_multi call takes (ABI 1.3). */
#define PAGODA_MATMUL_MULTI_MAX 8

/* Attention parameters of attention_ext (ABI 1.1). Filled by the core;
 * struct_size first so later minors can add fields at the end: a backend
 * reads a field only when struct_size covers it (absent fields read 0). */
typedef struct pagoda_attn_params {
    size_t struct_size;       /* the caller's sizeof(pagoda_attn_params) */
    int32_t n_heads;          /* query heads; head h reads KV head h / (n_heads / n_kv_heads) */
    float scale;              /* scores = scale * q.k */
    /* Sliding window: 0 = causal over every earlier key (what `attention`
     * does). W > 0: the query at position p sees the key at position j
     * only when 0 <= p - j < W (its own and the W - 1 before it). Positions
     * are a key's index in its sequence's block table. With W > 0 read no
     * key outside the window: the core's sliding-window pool gives a
     * table's entries before the window no meaning (the same block may
     * stand for logical blocks i and i + R, or another sequence's). */
    int32_t window;
    /* ---- ABI 1.8 ---- */
    /* Attention sinks (gpt-oss): sinks.buf NULL: none. Else F32 [1 x
     * n_heads] (a weights tensor): head h's softmax gains one more logit,
     * sinks[h], whose value row is zero, so it only joins the denominator:
     *   out_h = sum_j e^(s_j - M) v_j / (e^(sinks[h] - M) + sum_j e^(s_j - M)),
     * M = max(sinks[h], max_j s_j), over the keys j the query sees. A
     * backend that reads it says so in info.attn_sinks. */
    pagoda_tensor sinks;
} pagoda_attn_params;

/*
 * The ops. Required slots are marked; optional ones may be NULL and the
 * core's fallback is stated. Slots added after ABI 1.0 say which minor
 * added them; a plugin built against an older minor has them NULL (the
 * core copies min(struct_size) of its table into a zeroed one).
 */
typedef struct pagoda_backend_ops {
    size_t struct_size;

    /* [any thread] required. Fill *info (the core sets info->struct_size). */
    int (*info)(void *ctx, pagoda_backend_info *info);

    /* required. Allocate `size` bytes for `purpose`. The backend owns the
     * memory; the core frees it with buffer_free. Contents undefined. */
    int (*buffer_alloc)(void *ctx, int purpose, size_t size, pagoda_buffer **out);
    /* required. NULL is a no-op. */
    void (*buffer_free)(void *ctx, pagoda_buffer *buf);
    /* required. Copy host bytes in / out at an offset. download waits for
     * all earlier kernels. */
    int (*upload)(void *ctx, pagoda_buffer *buf, size_t offset, const void *src, size_t size);
    int (*download)(void *ctx, const pagoda_buffer *buf, size_t offset, void *dst, size_t size);

    /* optional. Make a weights buffer of host bytes that stay valid (the
     * mmap'd model, owned by the core) until the buffer is freed with
     * buffer_free: the CPU backend may use them in place, a device copies.
     * Fallback: buffer_alloc + upload. */
    int (*weights_from_host)(void *ctx, const void *host, size_t size, pagoda_buffer **out);

    /* required. out[i, :] = f32(table[ids[i], :]) for i < n; table of any
     * weight type, out F32 [n x cols]. The table may be a view of a KV pool
     * (MLA's cached latents read back): one plane of one layer, from
     * pagoda_kv_offset(layout, l, 0, 0), a row a slot (n_kv_heads x head_dim
     * values of its dtype, slot_bytes apart), only for a KV dtype in
     * info.weight_types (conformance: "KV ... pool as a table"). One row is
     * probed at set-up; a refusal keeps MLA's later chunks absorbed. */
    int (*get_rows)(void *ctx, const pagoda_tensor *table, const int32_t *ids, int32_t n,
                    const pagoda_tensor *out);

    /* required. out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w; w F32 [1 x cols].
     * out may alias x. */
    int (*rms_norm)(void *ctx, const pagoda_tensor *x, const pagoda_tensor *w, float eps,
                    const pagoda_tensor *out);

    /* required. out[T x N] = x[T x K] * w[N x K]^T (+ bias[N] if not NULL).
     * x, out, bias F32; w any type in info.weight_types. out may not alias x. */
    int (*matmul)(void *ctx, const pagoda_tensor *x, const pagoda_tensor *w,
                  const pagoda_tensor *bias, const pagoda_tensor *out);

    /* required. Rotate x in place: x is F32 [n_tokens x n_heads*head_dim],
     * token i at positions[i]. */
    int (*rope)(void *ctx, const pagoda_tensor *x, int32_t n_heads, int32_t head_dim,
                const int32_t *positions, const pagoda_rope_params *p);

    /* required. Store the K and V rows of n tokens (F32 [n x kv_heads*head_dim])
     * into their slots of `layer` in the KV pool (the n slots are distinct),
     * rounded to the layout's type. A latent layout (ABI 1.7) stores k
     * only; v is not read (it may be NULL). */
    int (*kv_write)(void *ctx, pagoda_buffer *kv, const pagoda_kv_layout *layout, int32_t layer,
                    const pagoda_tensor *k, const pagoda_tensor *v, const int32_t *slots,
                    int32_t n);

    /* required. Causal attention for every sequence of the batch: q F32
     * [n_tokens x n_heads*head_dim], out F32 of the same shape; query head h
     * reads KV head h / (n_heads / n_kv_heads). scores scaled by `scale`.
     * A latent layout (ABI 1.7) reads each slot's one row as K and as V. */
    int (*attention)(void *ctx, const pagoda_tensor *q, const pagoda_buffer *kv,
                     const pagoda_kv_layout *layout, int32_t layer, const pagoda_batch *batch,
                     int32_t n_heads, float scale, const pagoda_tensor *out);

    /* required. out = silu(gate) * up, all F32 of one shape; out may alias either. */
    int (*swiglu)(void *ctx, const pagoda_tensor *gate, const pagoda_tensor *up,
                  const pagoda_tensor *out);

    /* required. out = a + b, F32 of one shape; out may alias either. */
    int (*add)(void *ctx, const pagoda_tensor *a, const pagoda_tensor *b,
               const pagoda_tensor *out);

    /* optional. Copy whole KV blocks src[i] -> dst[i] in every layer (for
     * copy-on-write and swapping). Fallback: download + upload per block. */
    int (*copy_blocks)(void *ctx, pagoda_buffer *kv, const pagoda_kv_layout *layout,
                       const int32_t *src, const int32_t *dst, int32_t n);

    /* optional. Wait for all submitted work. Fallback: nothing (synchronous). */
    int (*synchronize)(void *ctx);

    /* ---- ABI 1.1: the ops Gemma 3 needs (all optional). ---- */

    /* optional, ABI 1.1. out = gelu_tanh(gate) * up, all F32 of one shape;
     * out may alias either. gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x +
     * 0.044715 x^3))), which equals x / (1 + exp(-2 sqrt(2/pi) (x + 0.044715
     * x^3))) (no cancellation for negative x). Fallback: none; the core
     * refuses, at start, a model whose FFN uses it (gemma3). */
    int (*geglu)(void *ctx, const pagoda_tensor *gate, const pagoda_tensor *up,
                 const pagoda_tensor *out);

    /* optional, ABI 1.1. out = x * s, F32 of one shape; out may alias x.
     * Fallback: download, multiply on the host, upload (the core scales
     * only the token embeddings, once per step). */
    int (*scale)(void *ctx, const pagoda_tensor *x, float s, const pagoda_tensor *out);

    /* optional, ABI 1.1. `attention` with its parameters in a struct that
     * can grow: p->window > 0 restricts each query to the keys of its
     * sliding window (see pagoda_attn_params); p->window == 0 is exactly
     * `attention`. Fallback: `attention` for window 0; none for a window:
     * the core refuses, at start, a model with sliding-window layers. */
    int (*attention_ext)(void *ctx, const pagoda_tensor *q, const pagoda_buffer *kv,
                         const pagoda_kv_layout *layout, int32_t layer,
                         const pagoda_batch *batch, const pagoda_attn_params *p,
                         const pagoda_tensor *out);

    /* ---- ABI 1.3 ---- */

    /* optional, ABI 1.3. n matmuls over one input, each exactly as `matmul`:
     * out[i] = x * w[i]^T (+ bias[i]) for 0 <= i < n, 1 <= n <=
     * PAGODA_MATMUL_MULTI_MAX. w and out are arrays of n tensors: w[i] of
     * any type in info.weight_types (they may differ) and x's width, out[i]
     * F32 [x.rows x w[i].rows], aliasing neither x nor another out; bias is
     * NULL (no biases) or an array of n pointers, each NULL or F32 [1 x
     * w[i].rows]. The forward pass hands over Q/K/V and gate/up this way, so
     * a backend can prepare x once (the cpu backend quantizes it once and
     * wakes its threads once for all of them). Fallback: n calls of
     * `matmul`. */
    int (*matmul_multi)(void *ctx, const pagoda_tensor *x, int32_t n, const pagoda_tensor *w,
                        const pagoda_tensor *const *bias, const pagoda_tensor *out);

    /* ---- ABI 1.5: mixture-of-experts (all optional) ---- */

    /* optional, ABI 1.5. Expert matmuls over a 3-D weight: output row r is
     *   out[r] = x[xr] * W_e^T,  xr = x_rows ? x_rows[r] : r,  e = ids[r],
     * for 0 <= r < out.rows, where W_e is expert e's [w.rows x w.cols]
     * matrix starting at byte w.offset + e * expert_stride of w.buf (its
     * rows w.row_stride apart), of any type in info.weight_types, and
     * 0 <= ids[r] < n_experts. x F32 [X x w.cols] (0 <= x_rows[r] < X); out
     * F32 [out.rows x w.rows], aliasing neither x nor w. ids and x_rows are
     * host arrays of out.rows entries, valid for the call; rows come in any
     * order (the core hands them as token-major (token, choice) pairs: gate
     * and up with x_rows = each pair's token, down with x_rows NULL). A
     * backend should read each expert's weights once per call however many
     * rows chose it (group the rows by expert): that is what makes batched
     * MoE decode pay. Fallback (a host-memory backend only; a device
     * backend without this slot is refused at start for an MoE model): the
     * core sorts the pairs by expert, gathers their rows with get_rows and
     * runs one `matmul` per active expert on a view of W_e. */
    int (*matmul_experts)(void *ctx, const pagoda_tensor *x, const int32_t *x_rows,
                          const pagoda_tensor *w, int32_t n_experts, size_t expert_stride,
                          const int32_t *ids, const pagoda_tensor *out);

    /* optional, ABI 1.5. The routed rows' weighted sum: out is first zeroed
     * unless `accumulate`, then for r = 0, 1, ..., y.rows - 1 in that order
     *   out[dst_rows[r]] += weights[r] * y[r]
     * y F32 [R x C], out F32 [out.rows x C], not aliasing y; dst_rows
     * (0 <= dst_rows[r] < out.rows) and weights are host arrays of y.rows
     * entries, valid for the call. With y one row per token it scales rows
     * (a shared expert's gate). Fallback: download, sum on the host,
     * upload. */
    int (*moe_combine)(void *ctx, const pagoda_tensor *y, const int32_t *dst_rows,
                       const float *weights, bool accumulate, const pagoda_tensor *out);

    /* ---- ABI 1.8: gpt-oss (optional) ---- */

    /* optional, ABI 1.8. The clamped SwiGLU of gpt-oss's experts, all F32
     * of one shape, out may alias either:
     *   g = min(gate, limit), u = clamp(up, -limit, limit),
     *   out = (u + 1) * g * sigmoid(alpha * g)
     * (gpt-oss: alpha 1.702, limit 7). Fallback: download, compute on the
     * host, upload. */
    int (*swiglu_oai)(void *ctx, const pagoda_tensor *gate, const pagoda_tensor *up, float alpha,
                      float limit, const pagoda_tensor *out);

    /* ---- ABI 1.12: buffers handed to a comm plugin (optional) ---- */

    /* optional, ABI 1.12. The address of bytes [offset, offset + size) of
     * buf in the backend's own memory: a device pointer for a device
     * backend (info.host_memory false), a host pointer for a host-memory
     * one. Valid until buf is freed; reading or writing it is ordered after
     * the backend's work only once `synchronize` has returned. The core
     * hands it to a comm plugin whose memory is the backend's
     * (comm info.device_memory == !info.host_memory), so a tensor-parallel
     * all-reduce runs in place: over NCCL on GPU memory with no host round
     * trip, over MPI on a CPU backend's buffer with no copy. PAGODA_ERR_INVALID
     * for a range outside buf. Fallback: download to host memory, reduce
     * there, upload (a device-memory comm plugin then cannot be used). */
    int (*buffer_address)(void *ctx, const pagoda_buffer *buf, size_t offset, size_t size,
                          void **out);

    /* ---- ABI 1.15 (repackplan): memory a backend holds beside the weights (optional) ---- */

    /* optional, ABI 1.15. *out = the bytes this backend will hold, beyond
     * the weight itself, for a dense matmul weight of dtype with N rows of
     * K values (e.g. the CPU backend's repacked int8 copy), under its
     * options as they are now (ISA level, PAGODA_CPU_REPACK_MIN_T). The
     * memory plan sums it over the model's 2-D matmul weights, each asked
     * with the shape one rank holds under tensor parallelism (the routed
     * experts' 3-D weights are not asked). NULL: the backend holds
     * nothing beside its weights (the plan counts 0). */
    int (*weight_extra_bytes)(void *ctx, int dtype, int64_t N, int64_t K, uint64_t *out);
    /* optional, ABI 1.15. [engine thread] *out = the bytes such copies
     * take now (made so far). The engine asks it after each forward pass
     * and publishes it for /metrics (pagoda_memory_repacked_held_bytes).
     * NULL: 0. */
    int (*weight_extra_held)(void *ctx, uint64_t *out);
} pagoda_backend_ops;

#ifdef __cplusplus
}
#endif
#endif /* PAGODA_BACKEND_H */
