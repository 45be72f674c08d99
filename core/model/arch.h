/*
 * arch.h: the model families pagoda runs, as data. One row per
 * `general.architecture` value says which attention variant the family
 * uses (QKV biases, Q/K norms, RoPE pairing), which FFN (dense, routed
 * experts, shared experts, their gating defaults), what its pre-FFN norm
 * is called, and the hook for keys only it has. model.c reads the keys and
 * binds the tensors a row names; forward.c runs whatever was bound.
 * Adding a family is adding a row (docs/architecture.md, "Adding a model
 * family").
 * The family-specific key readers live here too (gemma3's window pattern).
 * Not for: the common keys and binding tensors (model.c) or running them
 * (forward.c).
 */
#ifndef PAGODA_ARCH_H
#define PAGODA_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

struct pagoda_hparams;

/* Whether a family has a group of tensors: never (a file that has them is
 * refused: they would be ignored), always (a file without them is
 * refused), or when the file has them (looked up in blk.0, or the first
 * routed layer for expert tensors, and then required in every layer). */
typedef enum pagoda_arch_has {
    PAGODA_ARCH_NO = 0,
    PAGODA_ARCH_YES = 1,
    PAGODA_ARCH_MAYBE = 2
} pagoda_arch_has;

typedef struct pagoda_arch {
    const char *name;          /* general.architecture, the keys' prefix */
    /* attention */
    bool rope_neox;            /* NeoX (half-split) RoPE pairs, else adjacent pairs */
    uint8_t qkv_bias;          /* pagoda_arch_has: attn_{q,k,v}.bias */
    uint8_t qk_norm;           /* pagoda_arch_has: attn_{q,k}_norm (per-head RMSNorm) */
    bool post_norms;           /* post_attention_norm + post_ffw_norm (gemma3) */
    bool mla;                  /* multi-head latent attention (deepseek2): attn_kv_a_mqa,
                                * attn_k_b, attn_v_b instead of attn_k / attn_v */
    uint8_t attn_sinks;        /* pagoda_arch_has: attn_sinks.weight, a logit per head (gpt-oss) */
    uint8_t attn_out_bias;     /* pagoda_arch_has: attn_output.bias */
    bool yarn_no_truncate;     /* YaRN's correction range is not rounded to whole dims
                                * (gpt-oss: HF rope_parameters truncate false; the
                                * GGUF has no key for it) */
    /* feed-forward */
    int32_t ffn_act;           /* pagoda_ffn_act of every FFN */
    const char *ffn_norm;      /* the pre-FFN norm's tensor name (blk.N.<it>.weight) */
    uint8_t moe;               /* pagoda_arch_has: routed experts (MAYBE: when expert_count > 0) */
    int32_t moe_gating;        /* pagoda_moe_gating without expert_gating_func */
    bool moe_norm_topk;        /* the default of expert_weights_norm */
    uint8_t shexp;             /* pagoda_arch_has: ffn_{gate,up,down}_shexp */
    uint8_t shexp_gate;        /* pagoda_arch_has: ffn_gate_inp_shexp (sigmoid per token) */
    uint8_t exp_probs_b;       /* pagoda_arch_has: the selection bias exp_probs_b.bias */
    uint8_t router_bias;       /* pagoda_arch_has: ffn_gate_inp.bias, added to the router's logits */
    uint8_t exp_bias;          /* pagoda_arch_has: ffn_{gate,up,down}_exps.bias (gpt-oss) */
    bool nextn;                /* the last nextn_predict_layers blocks are an MTP head,
                                * loaded and ignored (glm4moe) */
    /* the family's own keys and constants, after the common ones; NULL: none */
    int (*read_keys)(const gguf_file *f, struct pagoda_hparams *hp, char *err, size_t err_len);
} pagoda_arch;

/* The row of `name`, or NULL when pagoda does not run it. */
const pagoda_arch *pagoda_arch_find(const char *name);

/* "llama, qwen2, ..." (every row, in table order) into buf. */
void pagoda_arch_list(char *buf, size_t len);

#endif /* PAGODA_ARCH_H */
