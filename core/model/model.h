/*
 * model.h: a transformer model as read from a GGUF file: hyperparameters
 * from the architecture's keys, every weight tensor found and its shape
 * checked, and the tokenizer. Architectures: llama (Llama 2/3, TinyLlama,
 * Mistral, SmolLM), qwen2 (QKV bias), qwen3 (per-head Q/K RMSNorm).
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
    PAGODA_ROPE_SCALING_LLAMA3 = 2  /* per-dimension factors (rope_freqs tensor or keys) */
} pagoda_rope_scaling;

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
    bool qkv_bias;
    bool qk_norm;
    bool tied_output;      /* output = token_embd */
} pagoda_hparams;

typedef struct pagoda_layer_tensors {
    const gguf_tensor *attn_norm, *wq, *wk, *wv, *wo;
    const gguf_tensor *bq, *bk, *bv;           /* qwen2; else NULL */
    const gguf_tensor *q_norm, *k_norm;        /* qwen3; else NULL */
    const gguf_tensor *ffn_norm, *w_gate, *w_up, *w_down;
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

/* inv_freq[i] for i < rope_dims/2, scaling applied. */
void pagoda_model_rope_inv_freq(const pagoda_model *m, float *inv_freq);

#endif /* PAGODA_MODEL_H */
