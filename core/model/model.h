/*
 * model.h: a transformer model as read from a GGUF file: hyperparameters
 * from the architecture's keys, every weight tensor found and its shape
 * checked, every tensor of the file accounted for, and the tokenizer. The
 * families are rows of arch.c's table: llama (Llama 2/3, TinyLlama,
 * Mistral, SmolLM; Mixtral with expert tensors), qwen2 (QKV bias), qwen3
 * (per-head Q/K RMSNorm), gemma3 (text only: scaled embeddings, Q/K norms,
 * post-norms, GeGLU, sliding-window layers with their own RoPE base), the
 * mixtures of experts qwen3moe, qwen2moe and glm4moe, deepseek2 (DeepSeek
 * V2/V3/R1, Kimi K2: multi-head latent attention) and gpt-oss (attention
 * sinks, alternating windows, biases, the clamped SwiGLU).
 * Not for: running it (forward.c) or memory planning (memplan.c).
 */
#ifndef PAGODA_MODEL_H
#define PAGODA_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf.h"
#include "tokenizer.h"

typedef enum pagoda_rope_scaling {
    PAGODA_ROPE_SCALING_NONE = 0,
    PAGODA_ROPE_SCALING_LINEAR = 1,
    PAGODA_ROPE_SCALING_LLAMA3 = 2, /* per-dimension factors (rope_freqs tensor or keys) */
    PAGODA_ROPE_SCALING_YARN = 3    /* YaRN: interpolated low frequencies, a ramp, an mscale */
} pagoda_rope_scaling;

/* The gated FFN's activation. */
typedef enum pagoda_ffn_act {
    PAGODA_FFN_SILU = 0,       /* SwiGLU: silu(gate) * up (llama, qwen) */
    PAGODA_FFN_GELU_TANH = 1,  /* GeGLU: gelu_tanh(gate) * up (gemma3) */
    PAGODA_FFN_SWIGLU_OAI = 2  /* clamped: (clamp(up, +-limit) + 1) * g sigmoid(alpha g),
                                * g = min(gate, limit) (gpt-oss; swiglu_alpha, swiglu_limit) */
} pagoda_ffn_act;

/* How a mixture-of-experts router turns its logits into expert weights
 * (GGUF expert_gating_func, numbered as llama.cpp numbers it). */
typedef enum pagoda_moe_gating {
    PAGODA_MOE_GATING_SOFTMAX = 1,        /* softmax over every expert, then top-k */
    PAGODA_MOE_GATING_SIGMOID = 2,        /* sigmoid per expert (+ exp_probs_b for choosing) */
    PAGODA_MOE_GATING_SOFTMAX_WEIGHT = 3  /* top-k of the logits, then softmax over those k */
} pagoda_moe_gating;

/* Per-layer flags are kept for at most this many layers (a model with
 * sliding-window layers and more is refused; Gemma 3 27B has 62). */
#define PAGODA_MAX_SWA_LAYERS 256

typedef struct pagoda_hparams {
    char arch[32];
    int32_t n_layers;
    int32_t dim;           /* embedding length */
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t head_dim;
    int32_t ffn;           /* feed-forward length */
    int32_t n_vocab;
    int32_t n_ctx_train;
    float rms_eps;
    float rope_theta;
    int32_t rope_dims;     /* rotated dims per head */
    bool rope_neox;        /* qwen2/qwen3: NeoX pairing; llama: adjacent pairs */
    int32_t rope_scaling;  /* pagoda_rope_scaling */
    float rope_factor;
    int32_t rope_orig_ctx;
    float rope_low_freq_factor, rope_high_freq_factor;
    /* YaRN (rope_scaling YARN; the GGUF keys rope.scaling.yarn_*, as
     * llama.cpp's converter writes them from the HF rope parameters).
     * Dims below the correction range keep their frequency
     * (extrapolation), dims above it are divided by rope_factor, a linear
     * ramp between; ext_factor scales the ramp's mix (1; 0 is plain
     * linear interpolation). rope_mscale multiplies the rotated values:
     * yarn_attn_factor when the file gives it, else 0.1 ln(factor) + 1
     * (transformers' attention_factor), times rope.scaling.attn_factor.
     * yarn_log_mul is DeepSeek's 0.1 * mscale_all_dim, kept for the
     * architectures that scale their softmax by it (0: none). */
    float rope_yarn_beta_fast, rope_yarn_beta_slow;   /* 32, 1 */
    float rope_yarn_ext_factor;                       /* 1 */
    float rope_yarn_log_mul;                          /* 0 */
    bool rope_yarn_truncate; /* floor/ceil the correction range (true; transformers' truncate) */
    float rope_mscale;       /* rotated values' scale (1 unless YaRN) */
    bool qkv_bias;
    bool qk_norm;
    bool tied_output;      /* output = token_embd */
    /* Gemma 3 (defaults for the others in brackets) */
    float embd_scale;      /* token embeddings are multiplied by it (1; gemma3 sqrt(dim)) */
    float attn_scale;      /* attention scores' scale (1/sqrt(head_dim)) */
    bool post_norms;       /* RMSNorm of each block's output before its residual add */
    int32_t ffn_act;       /* pagoda_ffn_act (SILU) */
    /* gpt-oss (false / 0 for the others) */
    bool attn_sinks;       /* a learned logit per head joins each softmax (attn_sinks) */
    bool attn_out_bias;    /* attn_output.bias */
    bool router_bias;      /* ffn_gate_inp.bias */
    bool exp_bias;         /* ffn_{gate,up,down}_exps.bias */
    float swiglu_alpha, swiglu_limit;   /* PAGODA_FFN_SWIGLU_OAI's constants */
    /* Sliding-window attention. Layer l is local when is_swa[l]: its
     * queries see the keys of the last swa_window positions (0 <= p - j <
     * swa_window), with RoPE base rope_theta_swa and no scaling; the other
     * layers are global (full causal attention, rope_theta + scaling).
     * swa_window 0: none. The KV pool still holds every layer for every
     * position; is_swa and swa_window are what a windowed pool would need. */
    int32_t swa_window;
    int32_t n_swa_layers;
    float rope_theta_swa;
    bool swa_rope_global;  /* the local layers use the global RoPE, scaling included
                            * (gpt-oss), not rope_theta_swa unscaled (gemma3) */
    uint8_t is_swa[PAGODA_MAX_SWA_LAYERS];
    /* Mixture of experts (n_experts 0: a dense FFN in every layer). Layers
     * l < n_dense_lead keep a dense FFN of width ffn; the others route each
     * token to n_experts_used of n_experts experts of width ffn_exp, plus
     * shared experts of total width ffn_shexp (0: none) that every token
     * runs. Expert weights: gating, then (norm_topk) divided by their sum,
     * then times routed_scale. */
    int32_t n_experts;        /* expert_count */
    int32_t n_experts_used;   /* expert_used_count (top-k) */
    int32_t ffn_exp;          /* expert_feed_forward_length (else feed_forward_length) */
    int32_t ffn_shexp;        /* shared experts' width, 0 if none */
    int32_t n_dense_lead;     /* leading_dense_block_count (glm4moe, deepseek) */
    int32_t moe_gating;       /* pagoda_moe_gating */
    bool moe_norm_topk;       /* expert_weights_norm */
    float moe_scale;          /* expert_weights_scale (1) */
    /* Group-limited routing (deepseek2's n_group / topk_group): the E
     * experts are n_expert_groups groups of E / n_expert_groups; a token
     * chooses its top-k only among the n_group_used groups of highest
     * score (0: no groups). */
    int32_t n_expert_groups;  /* expert_group_count */
    int32_t n_group_used;     /* expert_group_used_count */
    /* Multi-head latent attention (deepseek2; mla false elsewhere). A
     * token's KV in a layer is one row of head_dim = kv_lora_rank +
     * rope_dims values: the RMS-normed latent, then the RoPE key every head
     * shares (n_kv_heads = 1). A query head has qk_nope + rope_dims values,
     * a value head v_head_dim; queries come from attn_q, or with a query
     * LoRA (q_lora_rank > 0) from attn_q_a, its norm and attn_q_b. */
    bool mla;
    int32_t kv_lora_rank;     /* attention.kv_lora_rank */
    int32_t q_lora_rank;      /* attention.q_lora_rank, 0: attn_q */
    int32_t qk_nope;          /* attention.key_length_mla - rope_dims */
    int32_t v_head_dim;       /* attention.value_length_mla */
    /* Blocks after the n_layers that run: an MTP (next-token prediction)
     * head (glm4moe's nextn_predict_layers), loaded and never run. */
    int32_t n_nextn;
} pagoda_hparams;

typedef struct pagoda_layer_tensors {
    const gguf_tensor *attn_norm, *wq, *wk, *wv, *wo;
    const gguf_tensor *bq, *bk, *bv;           /* qwen2; else NULL */
    const gguf_tensor *q_norm, *k_norm;        /* qwen3, gemma3; else NULL */
    const gguf_tensor *ffn_norm, *w_gate, *w_up, *w_down;
    const gguf_tensor *post_attn_norm, *post_ffn_norm;  /* gemma3; else NULL */
    const gguf_tensor *attn_sinks, *bo;        /* gpt-oss: [n_heads], [dim]; else NULL */
    /* Mixture of experts (a routed layer has these and no w_gate/w_up/w_down):
     * the router [dim -> n_experts], the experts as 3-D tensors
     * [dim, ffn_exp, n_experts] (down [ffn_exp, dim, n_experts]), the
     * choice bias [n_experts] (glm4moe, deepseek: added for choosing only),
     * and the shared experts as one dense FFN with an optional sigmoid gate
     * [dim -> 1] (qwen2moe). NULL where absent. */
    const gguf_tensor *ffn_gate_inp, *exp_probs_b;
    /* gpt-oss: the router's bias [n_experts] and the experts' biases
     * [ffn_exp, n_experts] (down [dim, n_experts]); else NULL */
    const gguf_tensor *ffn_gate_inp_b, *ffn_gate_exps_b, *ffn_up_exps_b, *ffn_down_exps_b;
    const gguf_tensor *ffn_gate_exps, *ffn_up_exps, *ffn_down_exps;
    const gguf_tensor *ffn_gate_shexp, *ffn_up_shexp, *ffn_down_shexp, *ffn_gate_inp_shexp;
    /* Multi-head latent attention (hp.mla; wq is attn_q without a query
     * LoRA, wo attn_output): the query LoRA [dim -> q_lora], its norm and
     * [q_lora -> heads x (nope + rope)]; the latent and RoPE key [dim ->
     * kv_lora + rope] and the latent's norm; per head the key's
     * decompression [nope -> kv_lora] and the value's [kv_lora -> v] as 3-D
     * tensors [nope, kv_lora, heads] and [kv_lora, v, heads]. */
    const gguf_tensor *wq_a, *q_a_norm, *wq_b, *wkv_a, *kv_a_norm, *wk_b, *wv_b;
} pagoda_layer_tensors;

typedef struct pagoda_model {
    gguf_file *gguf;
    pagoda_hparams hp;
    const gguf_tensor *tok_embd, *output_norm, *output, *rope_freqs;
    pagoda_layer_tensors *layers;   /* [n_layers] */
    pagoda_tokenizer *tok;
    char *name;                     /* general.name or the file's base name */
    char *chat_template;            /* tokenizer.chat_template or NULL */
    int64_t n_params;
} pagoda_model;

/* Open and validate a model: every tensor the architecture needs present
 * with the right shape and a supported type. On error returns NULL with a
 * message naming the file, the tensor or key, expected and found. */
pagoda_model *pagoda_model_open(const char *path, char *err, size_t err_len);
void pagoda_model_free(pagoda_model *m);

/* Read only the hyperparameters (for the memory plan). */
int pagoda_hparams_read(const gguf_file *f, pagoda_hparams *hp, char *err, size_t err_len);

/* inv_freq[i] for i < rope_dims/2, scaling applied (the global layers). */
void pagoda_model_rope_inv_freq(const pagoda_model *m, float *inv_freq);

/* YaRN's inverse frequencies from its parameters (n_rot rotated dims):
 * what pagoda_model_rope_inv_freq gives for a YaRN model. Exposed so tests
 * check it against transformers' numbers without a model file. */
void pagoda_rope_yarn_inv_freq(float theta, int n_rot, float factor, int orig_ctx,
                               float beta_fast, float beta_slow, float ext_factor, bool truncate,
                               float *inv_freq);

/* 0.1 * m * ln(scale) + 1 for scale > 1, else 1 (YaRN's mscale). */
float pagoda_rope_yarn_get_mscale(float scale, float m);
/* The same for sliding-window layers: rope_theta_swa, no scaling (as
 * Gemma 3 trains them: linear scaling stretches only the global layers);
 * with swa_rope_global (gpt-oss) the global table. */
void pagoda_model_rope_inv_freq_swa(const pagoda_model *m, float *inv_freq);

/* Does layer l route its FFN through experts? */
static inline bool pagoda_hparams_is_moe_layer(const pagoda_hparams *hp, int l)
{
    return hp->n_experts > 0 && l >= hp->n_dense_lead;
}

/* Is layer l a sliding-window layer? */
static inline bool pagoda_hparams_is_swa(const pagoda_hparams *hp, int l)
{
    return hp->swa_window > 0 && l >= 0 && l < hp->n_layers && l < PAGODA_MAX_SWA_LAYERS &&
           hp->is_swa[l];
}

#endif /* PAGODA_MODEL_H */
