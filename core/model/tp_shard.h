/*
 * tp_shard.h: how tensor parallelism splits a model (Megatron style): which
 * tensors are split and how, whether a model splits N ways (whole heads,
 * whole KV heads, whole FFN rows, whole quantization blocks), and the bytes
 * each rank holds. Shared by the memory plan (from the GGUF header alone)
 * and the forward pass (which packs each rank's shard).
 *
 *   attn_q/k/v (weights and biases), ffn_gate, ffn_up,
 *   ffn_gate_shexp, ffn_up_shexp, attn_sinks (one a head):
 *                          split by output rows
 *   ffn_{gate,up,down}_exps.bias ([width, n_experts], gpt-oss): split
 *                          by rows, which are the experts: rank r holds
 *                          its own experts' biases
 *   attn_output, ffn_down, ffn_down_shexp: split by input columns (the
 *                          partial sums are all-reduced)
 *   ffn_{gate,up,down}_exps (3-D, [cols, rows, n_experts]): split by
 *                          experts, whole: rank r holds experts
 *                          [r*E/N, (r+1)*E/N), one contiguous run of the
 *                          tensor (the routed sum is all-reduced once
 *                          after the MoE block, with the shared expert's)
 *   everything else (embeddings, norms, output head, the router
 *   ffn_gate_inp and its biases ffn_gate_inp.bias / exp_probs_b, the
 *   shared expert's gate ffn_gate_inp_shexp, attn_output.bias): replicated
 *   (attn_output.bias is added by rank 0 alone, before the all-reduce)
 * A sliding-window model's window pool splits with the KV heads, as the
 * main pool does (each rank's pools hold its own KV heads).
 *
 * Not for: moving data (comm.h) or running the split (forward.c, tp.c).
 */
#ifndef PAGODA_TP_SHARD_H
#define PAGODA_TP_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

typedef enum pagoda_tp_split {
    PAGODA_TP_REPLICATED = 0,
    PAGODA_TP_ROWS = 1,      /* rank r holds rows [r*R/N, (r+1)*R/N) (a 1-D bias: its elements) */
    PAGODA_TP_COLS = 2,      /* rank r holds columns [r*C/N, (r+1)*C/N) of every row */
    PAGODA_TP_EXPERTS = 3,   /* a 3-D expert tensor: rank r holds experts [r*E/N, (r+1)*E/N)
                              * whole, one contiguous run (ffn_{gate,up,down}_exps) */
    PAGODA_TP_HEADS = 4      /* a 3-D matrix a head (MLA's attn_k_b, attn_v_b): rank r holds
                              * its heads [r*H/N, (r+1)*H/N) whole, one contiguous run */
} pagoda_tp_split;

/* The split of the tensor named name[0..len). */
int pagoda_tp_split_of(const char *name, size_t len);

/* The shape tensor parallelism needs. */
typedef struct pagoda_tp_dims {
    int64_t n_heads, n_kv_heads, ffn, n_swa_layers;   /* n_swa_layers: no constraint */
    /* mixture of experts (0: a dense model): the experts a MoE layer holds,
     * and how many leading layers keep a dense FFN of width ffn (with
     * n_experts > 0 and no dense layer, ffn need not divide) */
    int64_t n_experts, n_dense_lead;
    /* multi-head latent attention: one latent "KV head" that every query
     * head reads, replicated on every rank, not split (n_kv_heads need not
     * divide) */
    bool mla;
} pagoda_tp_dims;

/* Can f (with dims d) be split n ways? PAGODA_OK, or PAGODA_ERR_INVALID
 * with one line naming the numbers that do not divide and the values of
 * tensor_parallel that would work. */
int pagoda_tp_check(const gguf_file *f, const pagoda_tp_dims *d, int32_t n, char *err,
                    size_t err_len);

/* The experts [*first, *first + *count) that rank r of n holds of a
 * model with n_experts experts (n must divide n_experts: pagoda_tp_check). */
void pagoda_tp_expert_range(int64_t n_experts, int32_t r, int32_t n, int64_t *first,
                            int64_t *count);

/* The bytes of t one rank of n holds. */
uint64_t pagoda_tp_tensor_bytes(const gguf_tensor *t, int32_t n);
/* The bytes of every tensor of f one rank of n holds. */
uint64_t pagoda_tp_rank_weight_bytes(const gguf_file *f, int32_t n);

#endif /* PAGODA_TP_SHARD_H */
