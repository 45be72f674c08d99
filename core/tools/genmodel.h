/*
 * genmodel.h: `pagoda gen-model`, which writes a random-weight GGUF (v3)
 * of a real shape, llama by default or qwen2/qwen3/gemma3, with optional rope
 * scaling and tied output, for benchmarks and tests of models pagoda
 * cannot ship. Weights are seeded (same arguments, same bytes), streamed to disk
 * so a 1.1B model needs only a few MB of RAM.
 * Not for: meaningful text: the weights are noise.
 */
#ifndef PAGODA_GENMODEL_H
#define PAGODA_GENMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A model shape. vocab is the default when no vocabulary file is given. */
typedef struct pagoda_model_shape {
    const char *name;
    int dim, n_layers, n_heads, n_kv_heads, ffn, vocab, context;
    const char *arch;      /* the architecture the shape is (NULL: llama, or --arch) */
    int head_dim;          /* 0: dim / n_heads */
    /* Mixture of experts (n_experts 0: dense). Layers from n_dense_lead on
     * route each token to n_experts_used of n_experts experts of width
     * ffn_exp, plus n_shexp shared experts of total width ffn_shexp; the
     * leading layers keep a dense FFN of width ffn. */
    int n_experts, n_experts_used, ffn_exp, n_shexp, ffn_shexp, n_dense_lead;
    /* DeepSeek (deepseek2): multi-head latent attention of kv_lora latent
     * and qk_rope RoPE values a token (n_kv_heads 1), query heads of
     * qk_nope + qk_rope, value heads of v_head_dim, a query LoRA of q_lora
     * (0: attn_q); routing: sigmoid with a choice bias (else softmax),
     * n_groups groups of which n_group_used are chosen from, top-k
     * renormalised (norm_topk) and times routed_scale. */
    int kv_lora, q_lora, qk_rope, qk_nope, v_head_dim;
    int n_groups, n_group_used;
    bool sigmoid, norm_topk;
    float routed_scale;
} pagoda_model_shape;

/* "llama-110M", "tinyllama-1.1B", "tiny", "tiny-k" (tiny with every row
 * length a multiple of 256, for the K-quant types), "tiny-tp", and the
 * mixture-of-experts shapes "qwen3-30b-a3b", "qwen2-moe-a2.7b",
 * "qwen3moe-tiny", "qwen2moe-tiny", "mixtral-tiny", "glm4moe-tiny", and
 * DeepSeek's "deepseek-v2-lite", "deepseek-v3" and "deepseek2-tiny"; NULL
 * for another name. */
const pagoda_model_shape *pagoda_model_shape_find(const char *name);
/* The known shape names, comma separated (for messages). */
const char *pagoda_model_shape_names(void);

typedef struct pagoda_genmodel_opts {
    const char *shape;      /* a name pagoda_model_shape_find knows */
    int dtype;              /* F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL,
                             * Q2_K, Q3_K, Q4_K, Q5_K, IQ4_XS (norms stay F32), MXFP4
                             * (a MoE shape: the routed experts MXFP4, every other
                             * matrix Q8_0; a dense one: every matrix MXFP4) */
    const char *out;        /* written via OUT.tmp, renamed when complete */
    const char *vocab;      /* a GGUF to copy every tokenizer.* key from, or NULL
                             * for a generated SPM-style vocabulary */
    uint64_t seed;
    int layers;             /* 0 = the shape's count */
    int context;            /* 0 = the shape's context length (the bench's long-prompt runs) */
    /* Architecture variants (all zero/NULL: plain llama as before). */
    const char *arch;       /* "llama" (NULL), "qwen2" (QKV biases), "qwen3" (Q/K norms),
                             * "gemma3"; a mixture-of-experts shape is its own
                             * architecture (NULL or that name) */
    int rope_scaling;       /* pagoda_rope_scaling (model.h): linear writes factor 4;
                             * llama3 writes rope_freqs.weight (factor 8, low 1, high 4,
                             * original context 8192) and rope theta 500000;
                             * yarn writes factor 4, original context 1024,
                             * betas 32 / 1 */
    bool tied;              /* no output.weight: the output is token_embd */
    float std;              /* weight standard deviation; 0 = 0.02 */
    float norm_std;         /* norm weights are 1 + N(0, norm_std); 0 = exactly 1 */
    int head_dim;           /* 0 = dim / heads; else written as attention.key_length */
    /* gemma3 (Q/K norms, post-norms, GeGLU, sliding-window layers) */
    int sliding_window;     /* attention.sliding_window; 0 = 512 */
    int swa_pattern;        /* > 0: written as attention.sliding_window_pattern;
                             * 0: no key (the model's default, 6) */
    bool header_only;       /* metadata and tensor table, the data a hole of zeros
                             * (a sparse file): for memory plans of shapes too big
                             * to write, never to run */
} pagoda_genmodel_opts;

/* Writes the model; 0 or a pagoda_status with a message in err. On success
 * err is empty, or a note saying which matrices fell back to another type
 * (see pagoda_genmodel_tensor_type). */
int pagoda_gen_model(const pagoda_genmodel_opts *o, char *err, size_t err_len);

/* n approximately normal values of standard deviation std from a stream
 * seeded by seed (the generator gen-model fills its weights with). */
void pagoda_genmodel_fill_normal(uint64_t seed, float *x, size_t n, float std);

/* The types gen-model writes, by name (any case); -1 for another. */
int pagoda_genmodel_parse_type(const char *s);
#define PAGODA_GENMODEL_TYPES \
    "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, IQ4_XS or MXFP4"

/* The type a matrix with rows of `cols` values gets when `dtype` is asked
 * for: dtype when cols fills whole blocks of it; else, for a 256-value
 * super-block type, the 32-value type llama-quantize falls back to (Q2_K,
 * Q3_K, IQ4_XS -> IQ4_NL; Q4_K -> Q5_0; Q5_K -> Q5_1); -1 when neither fits
 * (the generator then fails naming the tensor). */
int pagoda_genmodel_tensor_type(int dtype, int64_t cols);

/* The CLI: argv[0] is the subcommand name ("gen-model"), options follow:
 *   --shape NAME --type T --out FILE [--vocab VOCAB.gguf] [--seed N] [--layers N]
 *   [--arch llama|qwen2|qwen3|gemma3] [--rope-scaling none|linear|llama3|yarn] [--tied]
 *   [--std S] [--norm-std S] [--head-dim N] [--sliding-window N] [--swa-pattern N]
 * or --upcycle SRC.gguf --experts E --used K --out FILE [--seed N] (upcycle.h).
 * Returns a process exit code: 0 ok, 1 failure, 2 usage error. */
int pagoda_cmd_gen_model(int argc, char **argv);

#endif /* PAGODA_GENMODEL_H */
