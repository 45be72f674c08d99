/*
 * memplan.h: the memory plan, computed from a GGUF header alone (no
 * weights are read): weight bytes by type, KV bytes per token, activation
 * and workspace bytes for the batch limits, a fixed runtime overhead, and
 * from the memory budget the KV pool (blocks, tokens, sequences that fit).
 * Printed at start-up, served as JSON, and run standalone as `pagoda plan`.
 * Not for: allocating anything; the engine allocates what the plan says.
 */
#ifndef PAGODA_MEMPLAN_H
#define PAGODA_MEMPLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine_swa.h"
#include "gguf.h"
#include "pagoda/types.h"

#define PAGODA_MEMPLAN_OVERHEAD (64ull << 20)   /* runtime overhead: code, heaps, threads */
#define PAGODA_MEMPLAN_UTIL 0.9                 /* share of MemAvailable an auto budget takes */
#define PAGODA_MEMPLAN_N_FIT 4                  /* sequence lengths reported: 512, 2K, 8K, 32K */

typedef struct pagoda_memplan_opts {
    uint64_t memory_budget;     /* bytes; 0 = auto: MemAvailable x PAGODA_MEMPLAN_UTIL */
    int kv_dtype;               /* PAGODA_DTYPE_F16, Q8_0 or F32. NB: F32 is 0, so
                                 * start from pagoda_memplan_opts_default() (F16) */
    int64_t max_seq_len;        /* 0 = the model's context length */
    int64_t max_batched_tokens; /* 0 = 512: tokens one forward pass takes */
    int64_t max_num_seqs;       /* 0 = 16: sequences one step runs */
    int64_t block_size;         /* 0 = 16: tokens per KV block */
    int swa_kv;                 /* pagoda_swa_kv: PAGODA_SWA_KV_WINDOW (0) or FULL */
    int64_t tensor_parallel;    /* 0 or 1: one process; N: the plan of one of N ranks */
    bool kv_no_latent;          /* the backend has no latent KV layout (info.kv_kinds,
                                 * ABI 1.7): an MLA model's row is kept as K and V */
    int64_t spec_logit_rows;    /* 0: none; speculative decoding's draft positions sampled
                                 * beside the max_num_seqs rows (pagoda_engine_spec_rows) */
    /* speculative = draft: what the draft model will hold (its weights, its
     * own KV pool, its activations; pagoda_draft_model_plan), paid from the
     * budget before the main pool; 0 without one */
    uint64_t draft_weight_bytes, draft_kv_bytes, draft_act_bytes;
    int32_t draft_seats, draft_seq_len;   /* its pool: seats of seq_len tokens (F32) */
    uint64_t draft_repacked_bytes;        /* the backend's copies beside its weights
                                           * (weight_extra over its file); 0: none */
    /* What the backend holds beside a dense matmul weight of dtype with N
     * rows of K values (ABI 1.15 weight_extra_bytes: the CPU backend's
     * repacked int8 copies); NULL: nothing. Asked in the weights walk
     * (memplan_weights.c) for each 2-D matmul weight with the shape one
     * rank holds; the sum is the plan's repacked_bytes. A nonzero status
     * fails the plan with a line naming the tensor. */
    int (*weight_extra)(void *ctx, int dtype, int64_t N, int64_t K, uint64_t *out);
    void *weight_extra_ctx;
    int32_t mla_decompress_min;           /* engine.mla_decompress_min (0: off; the
                                           * default opts have 0) */
    int32_t mla_decompress_ctx;           /* engine.mla_decompress_ctx (0: the scratch
                                           * holds max_batched_tokens) */
} pagoda_memplan_opts;

/* Defaults: auto budget, F16 KV, the model's context, 512 / 16 / 16. */
void pagoda_memplan_opts_default(pagoda_memplan_opts *o);

typedef struct pagoda_memplan {
    /* The model, from the header. */
    char arch[32];
    int64_t n_layers, dim, n_heads, n_kv_heads, head_dim, ffn, vocab, context;
    uint64_t n_params;
    uint64_t weight_bytes;                          /* sum of every tensor's bytes (with
                                                     * tensor_parallel > 1: one rank's share) */
    /* Tensor parallelism: the ranks, and the whole model's weight bytes.
     * With N > 1 every byte count below (weights, KV per token, activations,
     * workspace, the pool) is one rank's: heads, KV heads and FFN rows are
     * split N ways (tp_shard.h), the KV pool holds 1/N of each token's KV
     * heads, so N ranks hold N times the tokens of one. */
    int64_t tensor_parallel;
    uint64_t weight_bytes_model;
    uint64_t weight_bytes_by_type[PAGODA_DTYPE_COUNT_];
    uint64_t weight_params_by_type[PAGODA_DTYPE_COUNT_];
    /* What a token reads (memplan_weights.c). Mixture of experts (zeros
     * for a dense model): n_experts a MoE layer, n_experts_used of them
     * run for each token, of width ffn_exp, in n_moe_layers layers; the
     * routed experts' parameters and bytes (whole model), by type. */
    int64_t n_experts, n_experts_used, ffn_exp, n_moe_layers;
    uint64_t expert_params, expert_bytes;
    uint64_t expert_bytes_by_type[PAGODA_DTYPE_COUNT_];
    uint64_t expert_params_by_type[PAGODA_DTYPE_COUNT_];
    /* Active parameters, those one token runs: every tensor but the routed
     * experts, plus n_experts_used of each MoE layer's n_experts (the
     * embedding and output head whole, as model cards count "active").
     * = n_params for a dense model. */
    uint64_t n_params_active;
    /* Bytes one decoded token reads, the decode bandwidth bound: every
     * weight but the routed experts and the token embedding, plus
     * n_experts_used experts a MoE layer and one embedding row (the whole
     * table when it is also the output head). Whole model. */
    uint64_t decode_bytes_per_token;
    /* tensor_parallel N > 1: the experts a rank holds a layer (whole, a
     * contiguous run), their bytes, and what a rank reads a decoded token:
     * its share of the split tensors, the replicated ones whole, and its
     * experts' share of the routed ones: n_experts_used / N of them a layer
     * on average, at most min(n_experts_used, experts_per_rank) (_max). */
    int64_t experts_per_rank;
    uint64_t expert_bytes_per_rank;
    uint64_t decode_bytes_per_token_rank, decode_bytes_per_token_rank_max;
    /* Limits actually used (defaults filled in). */
    int kv_dtype;
    int64_t max_seq_len, max_batched_tokens, max_num_seqs, block_size;
    /* KV of the main pool, whose blocks the KV policy manages: 2 (K and V)
     * x its layers x kv_heads x head_dim x bytes per value. Its layers are
     * every layer, or with a window pool (below) the global layers only.
     * Bytes per value is the KV type's data-precision factor: kv_block_bytes
     * per kv_block_values values (F32 4 / 1, F16 2 / 1, Q8_0 34 / 32 =
     * 1.0625: a 16-bit scale per 32 int8 values, so the same bytes hold
     * 32/17 = 1.88x the tokens of F16). The window pool's layers use the
     * same type. */
    double kv_value_bytes;
    int kv_block_values, kv_block_bytes;
    /* Multi-head latent attention (deepseek2; mla false otherwise): a
     * token's KV in a layer is one row of kv_lora_rank + qk_rope values
     * (head_dim, one KV head), the key and the value (kv_planes 1; 2 where
     * the backend keeps it as K and V). mha_bytes_per_token: what plain
     * multi-head attention of the same heads would take, layers x 2 x
     * heads x ((qk_nope + qk_rope) + v_head_dim) / 2 x bytes, for the
     * comparison the plan prints. */
    bool mla;
    int64_t kv_lora_rank, qk_rope, qk_nope, v_head_dim;
    int kv_planes;
    uint64_t mha_bytes_per_token;
    int64_t kv_pool_layers;
    uint64_t kv_bytes_per_token;
    uint64_t kv_bytes_per_block;
    uint64_t kv_bytes_per_token_full;               /* every layer (= kv_bytes_per_token
                                                     * without a window pool) */
    /* Sliding-window layers (gemma3; zeros otherwise): how many, their
     * window, and their share of every layer's bytes per token. With
     * swa_kv = window (and a window shorter than max_seq_len) they keep
     * only their window, in a pool of their own sized as engine_swa.h
     * says (swa: its geometry, swa.window true), and the main pool gets
     * swa.sink_blocks more blocks for prefix hits; both are fixed. */
    int64_t n_swa_layers, swa_window;
    /* gpt-oss's extras (hparams): a sink a head, attn_output's bias, the
     * experts' biases; under tensor parallelism the plan says which a
     * rank holds (tp_shard.h) */
    bool attn_sinks, attn_out_bias, exp_bias;
    uint64_t kv_swa_bytes_per_token;
    pagoda_swa_geometry swa;
    uint64_t swa_block_bytes;                       /* a window-pool block (its layers) */
    uint64_t swa_pool_bytes;                        /* swa.pool_blocks x swa_block_bytes */
    uint64_t kv_sink_bytes;                         /* swa.sink_blocks x kv_bytes_per_block */
    /* One max_seq_len sequence's KV: every layer at every position, and as
     * configured (with a window pool: its main-pool blocks plus the window
     * blocks it holds between steps, swa.hold_blocks). */
    uint64_t kv_bytes_per_seq_full, kv_bytes_per_seq;
    /* Activations (F32): per token (3*dim + 2*q_dim + 2*kv_dim + 2*ffn)
     * floats for max_batched_tokens, plus logits of max_num_seqs x vocab.
     * A mixture of experts: ffn is the dense FFN's width if a layer has one,
     * or the shared expert's if wider, plus experts + k x (2*ffn_exp + dim)
     * (router logits, the pairs' rows) + dim if there is a shared expert. */
    uint64_t act_floats_per_token;
    uint64_t act_bytes;                             /* includes logits_bytes */
    uint64_t logits_bytes;
    /* Workspace: the matmul scratch (max(max_batched_tokens + 8, 264) x
     * max(dim, ffn) x 4 bytes; with experts ffn is the widest input row of
     * the FFN: the dense, shared or expert width) and attention scores
     * (max_num_seqs x heads x max_seq_len f32). */
    uint64_t qscratch_bytes, att_scratch_bytes, workspace_bytes;
    uint64_t overhead_bytes;
    /* The draft model of speculative = draft (the opts' figures; 0: none). */
    uint64_t draft_weight_bytes, draft_kv_bytes, draft_act_bytes;
    int32_t draft_seats, draft_seq_len;
    uint64_t draft_repacked_bytes;                  /* its repacked copies (backend) */
    /* The backend's copies beside the weights (opts.weight_extra summed,
     * one rank's with tensor_parallel > 1), and the values of the weights
     * they are of. */
    uint64_t repacked_bytes, repacked_weight_values;
    /* MLA's decompressed prefill (forward.h pagoda_mla_decompress_on; all
     * 0 when off): the threshold, the transposed attn_k_b copies (every
     * layer, the rank's heads, F32 for an F32 source, else F16) and the
     * scratch: K and V of mla_scratch_tokens tokens in the KV type, and
     * F32 staging rows for max_batched_tokens latents */
    int32_t mla_decompress_min;
    int32_t mla_scratch_tokens;                     /* the longest context decompressed */
    int32_t mla_kbt_dtype;                          /* the copies' type (layer 0's) */
    uint64_t mla_kbt_bytes, mla_scratch_bytes;
    uint64_t fixed_bytes;                           /* weights + act + workspace + overhead
                                                     * + the draft model + repacked
                                                     * + MLA decompression's */
    /* The budget and what it leaves for the KV pool. */
    bool budget_auto;
    uint64_t mem_available;                         /* MemAvailable when auto, else 0 */
    uint64_t budget_bytes;
    bool fits;                                      /* fixed fits and one max_seq_len sequence fits */
    uint64_t shortfall_bytes;                       /* how much more memory fitting needs */
    char reason[320];                               /* why it does not fit; "" when it does
                                                     * (naming the repacked bytes if any) */
    uint64_t kv_pool_bytes;                         /* kv_blocks x kv_bytes_per_block */
    uint64_t kv_blocks, kv_tokens;                  /* the KV policy's blocks */
    uint64_t kv_total_bytes;                        /* every KV byte allocated: the pool,
                                                     * the sink, the window pool */
    struct {
        int64_t len;
        bool exceeds;                               /* len > max_seq_len: not servable */
        uint64_t seqs;                              /* whole sequences of len that fit */
        /* the same KV memory (kv_total_bytes) if every layer kept every
         * position (= seqs for a model without sliding-window layers or
         * with swa_kv = full) */
        uint64_t seqs_full;
    } fit[PAGODA_MEMPLAN_N_FIT];
} pagoda_memplan;

/* Fill out from f's header and o (NULL = defaults). 0, or a status with a
 * message in err (a missing key, a bad option, /proc/meminfo unreadable).
 * A plan that does not fit is still a success: see out->fits. */
int pagoda_memplan_compute(const gguf_file *f, const pagoda_memplan_opts *o, pagoda_memplan *out,
                           char *err, size_t n);
/* Fix the KV policy's pool at `blocks` blocks (an explicit kv_cache_tokens,
 * or the runtime's cap) and redo what follows from it: tokens, bytes,
 * whether it fits the budget (budget 0: no check), and the sequences. */
void pagoda_memplan_set_pool(pagoda_memplan *p, uint64_t blocks);
/* A readable table. */
void pagoda_memplan_print(const pagoda_memplan *p, FILE *fp);
/* The plan as a JSON object (malloc'd string; free() it), or NULL. */
char *pagoda_memplan_json(const pagoda_memplan *p);

/* The CLI: argv[0] is the subcommand name ("plan"), options follow:
 *   [--config FILE] [--set S.K=V]... [--model FILE] [--memory SIZE|auto]
 *   [--kv-dtype f16|q8_0|f32] [--max-seq-len N] [--max-batched-tokens N]
 *   [--max-num-seqs N] [--block-size N] [--swa-kv window|full] [--json]
 * The plan is the server's for the same settings (pagoda_runtime_plan):
 * the model and the plugins are opened, the weights are not read.
 * Exit code: 0 the model fits, 1 it does not (or the file is bad), 2 usage. */
int pagoda_cmd_plan(int argc, char **argv);

#endif /* PAGODA_MEMPLAN_H */
