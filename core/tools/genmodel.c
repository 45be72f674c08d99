/*
 * genmodel.c: `pagoda gen-model`: a random-weight GGUF of a real shape,
 * architecture llama (default), qwen2, qwen3 or gemma3, or a mixture of
 * experts (qwen3moe, qwen2moe, glm4moe, gpt-oss, llama with experts as Mixtral is;
 * experts as 3-D tensors [cols, rows, experts], the router F32 and scaled so
 * its logits have unit spread and tokens pick experts all over). Metadata as llama.cpp's
 * converter writes it, tensor names and layouts as llama.cpp reads them,
 * weights ~N(0, 0.02) and norms 1.0 unless asked otherwise. Each tensor is
 * generated and quantized a chunk of rows at a time straight into the
 * file, from its own seeded stream, so memory stays small and the bytes
 * depend only on the arguments.
 * Not for: converting real checkpoints.
 */
#define _GNU_SOURCE
#include "genmodel.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "gguf.h"
#include "gguf_writer.h"
#include "model.h"
#include "pagoda/types.h"
#include "quant.h"
#include "upcycle.h"

static const pagoda_model_shape shapes[] = {
    {.name = "llama-110M", .dim = 768, .n_layers = 12, .n_heads = 12, .n_kv_heads = 12, .ffn = 2048,
     .vocab = 32000, .context = 1024},
    {.name = "tinyllama-1.1B", .dim = 2048, .n_layers = 22, .n_heads = 32, .n_kv_heads = 4, .ffn = 5632,
     .vocab = 32000, .context = 2048},
    {.name = "tiny", .dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .ffn = 128,
     .vocab = 512, .context = 512},
    /* tiny, but every row length a multiple of 256, so the K-quant types
     * (256-value super-blocks) apply to every matrix */
    {.name = "tiny-k", .dim = 256, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .ffn = 512,
     .vocab = 512, .context = 512},
    /* heads, KV heads and FFN that split 2, 3 and 6 ways, with whole
     * 32-value blocks of every split row (tensor parallelism's tests) */
    {.name = "tiny-tp", .dim = 192, .n_layers = 2, .n_heads = 12, .n_kv_heads = 6, .ffn = 576,
     .vocab = 512, .context = 512},
    /* mixture of experts. Qwen3-30B-A3B as released (--layers N for a
     * shallower copy with the same work a layer) */
    {.name = "qwen3-30b-a3b", .dim = 2048, .n_layers = 48, .n_heads = 32, .n_kv_heads = 4,
     .ffn = 6144, .vocab = 151936, .context = 40960, .arch = "qwen3moe", .head_dim = 128,
     .n_experts = 128, .n_experts_used = 8, .ffn_exp = 768},
    /* Qwen1.5-MoE-A2.7B: 60 experts top-4 and a gated shared expert */
    {.name = "qwen2-moe-a2.7b", .dim = 2048, .n_layers = 24, .n_heads = 16, .n_kv_heads = 16,
     .ffn = 5632, .vocab = 151936, .context = 8192, .arch = "qwen2moe", .n_experts = 60,
     .n_experts_used = 4, .ffn_exp = 1408, .n_shexp = 1, .ffn_shexp = 5632},
    /* small ones of each family, rows of 256 (every type applies), 8
     * experts top-2 (split 2, 4 and 8 ways) */
    {.name = "qwen3moe-tiny", .dim = 256, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .ffn = 768,
     .vocab = 512, .context = 512, .arch = "qwen3moe", .head_dim = 64, .n_experts = 8,
     .n_experts_used = 2, .ffn_exp = 256},
    {.name = "qwen2moe-tiny", .dim = 256, .n_layers = 2, .n_heads = 4, .n_kv_heads = 4, .ffn = 512,
     .vocab = 512, .context = 512, .arch = "qwen2moe", .n_experts = 8, .n_experts_used = 2,
     .ffn_exp = 256, .n_shexp = 1, .ffn_shexp = 512},
    /* Mixtral: llama with experts; feed_forward_length is the expert width */
    {.name = "mixtral-tiny", .dim = 256, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .ffn = 512,
     .vocab = 512, .context = 512, .arch = "llama", .n_experts = 8, .n_experts_used = 2,
     .ffn_exp = 512},
    /* GLM-4.5(-Air): one leading dense layer, sigmoid routing with a choice
     * bias, a shared expert, attention biases, half the head rotated */
    {.name = "glm4moe-tiny", .dim = 256, .n_layers = 3, .n_heads = 4, .n_kv_heads = 2, .ffn = 512,
     .vocab = 512, .context = 512, .arch = "glm4moe", .head_dim = 64, .n_experts = 8,
     .n_experts_used = 2, .ffn_exp = 256, .n_shexp = 1, .ffn_shexp = 256, .n_dense_lead = 1},
    /* DeepSeek (deepseek2: multi-head latent attention). V2-Lite as
     * released (16B total, 2.4B active; its YaRN RoPE is left out), */
    {.name = "deepseek-v2-lite", .dim = 2048, .n_layers = 27, .n_heads = 16, .n_kv_heads = 1,
     .ffn = 10944, .vocab = 102400, .context = 163840, .arch = "deepseek2", .n_experts = 64,
     .n_experts_used = 6, .ffn_exp = 1408, .n_shexp = 2, .ffn_shexp = 2816, .n_dense_lead = 1,
     .kv_lora = 512, .qk_rope = 64, .qk_nope = 128, .v_head_dim = 128, .routed_scale = 1.0f},
    /* V3 / R1 as released (671B: --layers N for a shallow copy, --header-only
     * for its plan; Kimi K2 is this with 384 experts and 64 heads), */
    {.name = "deepseek-v3", .dim = 7168, .n_layers = 61, .n_heads = 128, .n_kv_heads = 1,
     .ffn = 18432, .vocab = 129280, .context = 163840, .arch = "deepseek2", .n_experts = 256,
     .n_experts_used = 8, .ffn_exp = 2048, .n_shexp = 1, .ffn_shexp = 2048, .n_dense_lead = 3,
     .kv_lora = 512, .q_lora = 1536, .qk_rope = 64, .qk_nope = 128, .v_head_dim = 128,
     .n_groups = 8, .n_group_used = 4, .sigmoid = true, .norm_topk = true, .routed_scale = 2.5f},
    /* and a small V3-style one (rows of 256; latent row 96: Q8_0 KV applies) */
    {.name = "deepseek2-tiny", .dim = 256, .n_layers = 3, .n_heads = 4, .n_kv_heads = 1,
     .ffn = 512, .vocab = 512, .context = 512, .arch = "deepseek2", .n_experts = 8,
     .n_experts_used = 2, .ffn_exp = 256, .n_shexp = 1, .ffn_shexp = 256, .n_dense_lead = 1,
     .kv_lora = 64, .q_lora = 128, .qk_rope = 32, .qk_nope = 32, .v_head_dim = 64, .n_groups = 2,
     .n_group_used = 1, .sigmoid = true, .norm_topk = true, .routed_scale = 2.5f},
    /* gpt-oss-20b as released (openai/gpt-oss-20b config.json): 24 layers
     * alternating a sliding window of 128 and full attention, 64 heads of
     * 64 on 8 KV heads, 32 experts top-4 of width 2880, attention sinks,
     * every bias, YaRN factor 32 over 4096 */
    {.name = "gpt-oss-20b", .dim = 2880, .n_layers = 24, .n_heads = 64, .n_kv_heads = 8,
     .ffn = 2880, .vocab = 201088, .context = 131072, .arch = "gpt-oss", .head_dim = 64,
     .n_experts = 32, .n_experts_used = 4, .ffn_exp = 2880},
    /* small, rows of 256, 8 experts top-4, the window of 8 */
    {.name = "gpt-oss-tiny", .dim = 256, .n_layers = 2, .n_heads = 8, .n_kv_heads = 2, .ffn = 256,
     .vocab = 512, .context = 512, .arch = "gpt-oss", .head_dim = 32, .n_experts = 8,
     .n_experts_used = 4, .ffn_exp = 256},
};

const pagoda_model_shape *pagoda_model_shape_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof shapes / sizeof shapes[0]; i++)
        if (strcmp(shapes[i].name, name) == 0) return &shapes[i];
    return NULL;
}

const char *pagoda_model_shape_names(void)
{
    return "llama-110M, tinyllama-1.1B, tiny, tiny-k, tiny-tp, qwen3-30b-a3b, qwen2-moe-a2.7b, "
           "deepseek-v2-lite, deepseek-v3, deepseek2-tiny, "
           "qwen3moe-tiny, qwen2moe-tiny, mixtral-tiny, glm4moe-tiny, gpt-oss-20b, gpt-oss-tiny";
}

/* ------------------------------------------------------------ random */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct rng { uint64_t s; } rng;

static inline uint64_t rng_next(rng *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 2685821657736338717ull;
}

/* Approximately normal: the sum of four 16-bit uniforms (Irwin-Hall, n=4)
 * has variance 4/12, so scaling by sqrt(3) gives unit variance. One
 * generator call per value, no transcendental functions: fast enough to
 * write a billion weights in seconds. */
static void fill_normal(rng *r, float *x, size_t n, float std)
{
    const float scale = std * 1.7320508f / 65536.0f;
    for (size_t i = 0; i < n; i++) {
        uint64_t u = rng_next(r);
        int32_t s = (int32_t)(u & 0xFFFF) + (int32_t)((u >> 16) & 0xFFFF) +
                    (int32_t)((u >> 32) & 0xFFFF) + (int32_t)(u >> 48) - 131070;
        x[i] = (float)s * scale;
    }
}

void pagoda_genmodel_fill_normal(uint64_t seed, float *x, size_t n, float std)
{
    uint64_t s = seed;
    rng r = {splitmix64(&s) | 1};
    fill_normal(&r, x, n, std);
}

/* ------------------------------------------------------------ vocabulary */

/* Bijective base-26: 0 -> "a", 25 -> "z", 26 -> "aa". */
static void letters(uint32_t j, char *out)
{
    char tmp[16];
    int n = 0;
    j++;
    while (j && n < 15) {
        j--;
        tmp[n++] = (char)('a' + j % 26);
        j /= 26;
    }
    for (int i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
    out[n] = 0;
}

/* A generated SPM-style vocabulary: <unk> <s> </s>, the 256 byte tokens,
 * printable ASCII, "▁", then "▁a", "▁b", ... up to n tokens. */
static int write_generated_vocab(gguf_writer *w, int n, char *err, size_t err_len)
{
    int st = PAGODA_ERR_NOMEM;
    char **tok = calloc((size_t)n, sizeof *tok);
    float *score = calloc((size_t)n, sizeof *score);
    int32_t *type = calloc((size_t)n, sizeof *type);
    if (!tok || !score || !type) goto out;
    int k = 0;
    const char *special[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3 && k < n; i++, k++) {
        tok[k] = strdup(special[i]);
        type[k] = i == 0 ? 2 : 3; /* unknown, control */
    }
    for (int b = 0; b < 256 && k < n; b++, k++) {
        if (asprintf(&tok[k], "<0x%02X>", b) < 0) tok[k] = NULL;
        type[k] = 6; /* byte */
    }
    for (int c = 0x21; c < 0x7F && k < n; c++, k++) {
        char s[2] = {(char)c, 0};
        tok[k] = strdup(s);
        type[k] = 1;
        score[k] = -(float)k;
    }
    if (k < n) {
        tok[k] = strdup("\xe2\x96\x81");
        type[k] = 1;
        score[k] = -(float)k;
        k++;
    }
    for (uint32_t j = 0; k < n; j++, k++) {
        char l[16];
        letters(j, l);
        if (asprintf(&tok[k], "\xe2\x96\x81%s", l) < 0) tok[k] = NULL;
        type[k] = 1;
        score[k] = -(float)k;
    }
    for (int i = 0; i < n; i++)
        if (!tok[i]) goto out;
    st = pagoda_gguf_w_str(w, "tokenizer.ggml.model", "llama");
    if (!st) st = pagoda_gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, (uint64_t)n);
    if (!st) st = pagoda_gguf_w_arr_f32(w, "tokenizer.ggml.scores", score, (uint64_t)n);
    if (!st) st = pagoda_gguf_w_arr_i32(w, "tokenizer.ggml.token_type", type, (uint64_t)n);
    if (!st) st = pagoda_gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    if (!st) st = pagoda_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1);
    if (!st) st = pagoda_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (!st) st = pagoda_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", true);
    if (!st) st = pagoda_gguf_w_bool(w, "tokenizer.ggml.add_eos_token", false);
out:
    if (st && err && err_len) snprintf(err, err_len, "generated vocabulary: %s", pagoda_status_str(st));
    if (tok)
        for (int i = 0; i < n; i++) free(tok[i]);
    free(tok);
    free(score);
    free(type);
    return st;
}

/* ------------------------------------------------------------ tensors */

enum { GT_WEIGHT, GT_NORM, GT_BIAS, GT_VALUES, GT_ROUTER };

typedef struct gtensor {
    char name[64];
    int type;
    uint32_t n_dims;
    int64_t ne[3];         /* ne[2]: the experts of a 3-D expert tensor */
    int kind;              /* GT_*: what fills it */
    const float *values;   /* GT_VALUES: the whole tensor */
} gtensor;

typedef struct gen_values {
    float std, norm_std, bias_std;
    float router_std;      /* 1/sqrt(dim): unit-spread router logits of a normed row */
} gen_values;

/* Llama 3.1's rope scaling as convert_hf_to_gguf.py turns it into
 * rope_freqs.weight: a divisor of each frequency (1 for short wavelengths,
 * `factor` for long ones, smoothed between). */
#define LLAMA3_THETA 500000.0
#define LLAMA3_FACTOR 8.0
#define LLAMA3_LOW 1.0
#define LLAMA3_HIGH 4.0
#define LLAMA3_ORIG_CTX 8192.0

static void llama3_factors(int head_dim, float *out)
{
    const double low_wl = LLAMA3_ORIG_CTX / LLAMA3_LOW, high_wl = LLAMA3_ORIG_CTX / LLAMA3_HIGH;
    for (int i = 0; i < head_dim / 2; i++) {
        /* the converter computes the frequencies in float32 */
        float freq = (float)(1.0 / pow(LLAMA3_THETA, (double)(2 * i) / head_dim));
        double wl = 2.0 * M_PI / freq;
        if (wl < high_wl) out[i] = 1.0f;
        else if (wl > low_wl) out[i] = (float)LLAMA3_FACTOR;
        else {
            double smooth = (LLAMA3_ORIG_CTX / wl - LLAMA3_LOW) / (LLAMA3_HIGH - LLAMA3_LOW);
            out[i] = (float)(1.0 / ((1.0 - smooth) / LLAMA3_FACTOR + smooth));
        }
    }
}

/* llama.cpp's GGUF ftype for the main type, for tools that show it (the
 * K types: the _S variant, all matrices of one type). */
static uint32_t file_type(int dtype)
{
    switch (dtype) {
    case PAGODA_DTYPE_F32: return 0;
    case PAGODA_DTYPE_F16: return 1;
    case PAGODA_DTYPE_Q4_0: return 2;
    case PAGODA_DTYPE_Q4_1: return 3;
    case PAGODA_DTYPE_Q8_0: return 7;
    case PAGODA_DTYPE_Q5_0: return 8;
    case PAGODA_DTYPE_Q5_1: return 9;
    case PAGODA_DTYPE_Q2_K: return 10;
    case PAGODA_DTYPE_Q3_K: return 11;
    case PAGODA_DTYPE_Q4_K: return 14;
    case PAGODA_DTYPE_Q5_K: return 16;
    case PAGODA_DTYPE_IQ4_NL: return 25;
    case PAGODA_DTYPE_IQ4_XS: return 30;
    case PAGODA_DTYPE_BF16: return 32;
    case PAGODA_DTYPE_MXFP4: return 38; /* MOSTLY_MXFP4_MOE */
    default: return 0;
    }
}

/* The types gen-model writes: those pagoda_quantize_row makes (Q6_K has no
 * quantizer). */
static const int gen_types[] = {
    PAGODA_DTYPE_F32,  PAGODA_DTYPE_F16,  PAGODA_DTYPE_BF16, PAGODA_DTYPE_Q8_0,   PAGODA_DTYPE_Q4_0,
    PAGODA_DTYPE_Q4_1, PAGODA_DTYPE_Q5_0, PAGODA_DTYPE_Q5_1, PAGODA_DTYPE_IQ4_NL, PAGODA_DTYPE_Q2_K,
    PAGODA_DTYPE_Q3_K, PAGODA_DTYPE_Q4_K, PAGODA_DTYPE_Q5_K, PAGODA_DTYPE_IQ4_XS, PAGODA_DTYPE_MXFP4};
#define GEN_TYPES_TEXT PAGODA_GENMODEL_TYPES

int pagoda_genmodel_tensor_type(int dtype, int64_t cols)
{
    int be = 0;
    if (!pagoda_dtype_block(dtype, &be, NULL)) return -1;
    if (cols % be == 0) return dtype;
    /* A row that does not fill whole 256-value super-blocks takes the
     * 32-value type llama-quantize falls back to for it. */
    int fb;
    switch (dtype) {
    case PAGODA_DTYPE_Q2_K: case PAGODA_DTYPE_Q3_K: case PAGODA_DTYPE_IQ4_XS: fb = PAGODA_DTYPE_IQ4_NL; break;
    case PAGODA_DTYPE_Q4_K: fb = PAGODA_DTYPE_Q5_0; break;
    case PAGODA_DTYPE_Q5_K: fb = PAGODA_DTYPE_Q5_1; break;
    default: return -1;
    }
    return cols % 32 == 0 ? fb : -1;
}

/* Generate one tensor in chunks of whole rows, quantize, stream out. */
static int write_tensor(gguf_writer *w, FILE *fp, const gtensor *t, uint64_t seed, uint64_t idx,
                        const gen_values *gv, float *buf, void *qbuf, size_t chunk_elems)
{
    uint64_t s = seed ^ (idx * 0xD1B54A32D192ED03ull);
    rng r = {splitmix64(&s) | 1};
    int64_t rows = t->ne[1] * (t->n_dims == 3 ? t->ne[2] : 1), cols = t->ne[0];
    int64_t rows_per = (int64_t)(chunk_elems / (size_t)cols);
    if (rows_per < 1) rows_per = 1;
    for (int64_t r0 = 0; r0 < rows; r0 += rows_per) {
        int64_t nr = rows - r0 < rows_per ? rows - r0 : rows_per;
        size_t n = (size_t)(nr * cols);
        if (t->kind == GT_VALUES)
            memcpy(buf, t->values + r0 * cols, n * sizeof *buf);
        else if (t->kind == GT_NORM && gv->norm_std > 0) {
            fill_normal(&r, buf, n, gv->norm_std);
            for (size_t i = 0; i < n; i++) buf[i] += 1.0f;
        } else if (t->kind == GT_NORM)
            for (size_t i = 0; i < n; i++) buf[i] = 1.0f;
        else
            fill_normal(&r, buf, n, t->kind == GT_BIAS     ? gv->bias_std
                                    : t->kind == GT_ROUTER ? gv->router_std
                                                           : gv->std);
        int st = pagoda_quantize_row(t->type, buf, qbuf, (int64_t)n);
        if (st) return st;
        st = pagoda_gguf_w_data_chunk(w, fp, qbuf, pagoda_dtype_row_bytes(t->type, (int64_t)n));
        if (st) return st;
    }
    return PAGODA_OK;
}

/* The expert keys as llama.cpp's converter writes them for each family
 * (Mixtral, a llama file, has only the counts: feed_forward_length is its
 * expert width). qwen3moe and qwen2moe get no expert_weights_norm: their
 * converter leaves it out and the family fixes it (qwen3moe renormalises
 * the top-k, qwen2moe does not). */
static int write_moe_keys(gguf_writer *w, const char *arch, const pagoda_model_shape *sh)
{
    char key[160];
#define MKEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
    bool llama = !strcmp(arch, "llama"), glm = !strcmp(arch, "glm4moe");
    if (!strcmp(arch, "deepseek2")) {
        /* as llama.cpp's converter writes DeepSeek's */
        int st = pagoda_gguf_w_u32(w, MKEY("expert_count"), (uint32_t)sh->n_experts);
        if (!st) st = pagoda_gguf_w_u32(w, MKEY("expert_used_count"), (uint32_t)sh->n_experts_used);
        if (!st) st = pagoda_gguf_w_u32(w, MKEY("expert_feed_forward_length"), (uint32_t)sh->ffn_exp);
        if (!st) st = pagoda_gguf_w_u32(w, MKEY("expert_shared_count"), (uint32_t)sh->n_shexp);
        if (!st) st = pagoda_gguf_w_u32(w, MKEY("leading_dense_block_count"), (uint32_t)sh->n_dense_lead);
        if (!st) st = pagoda_gguf_w_f32(w, MKEY("expert_weights_scale"), sh->routed_scale);
        if (!st && sh->norm_topk) st = pagoda_gguf_w_bool(w, MKEY("expert_weights_norm"), true);
        if (!st)
            st = pagoda_gguf_w_u32(w, MKEY("expert_gating_func"),
                                   sh->sigmoid ? PAGODA_MOE_GATING_SIGMOID : PAGODA_MOE_GATING_SOFTMAX);
        if (!st && sh->n_groups) st = pagoda_gguf_w_u32(w, MKEY("expert_group_count"), (uint32_t)sh->n_groups);
        if (!st && sh->n_groups)
            st = pagoda_gguf_w_u32(w, MKEY("expert_group_used_count"), (uint32_t)sh->n_group_used);
        if (!st) st = pagoda_gguf_w_u32(w, MKEY("attention.kv_lora_rank"), (uint32_t)sh->kv_lora);
        /* written as 0 too when there is no query LoRA (V2-Lite): llama.cpp
         * takes a deepseek2 file of 26 or 27 layers as "lite" and otherwise
         * requires the key, so a shallow --layers copy of V2-Lite loads there
         * only with it (0: attn_q, as pagoda reads it) */
        if (!st) st = pagoda_gguf_w_u32(w, MKEY("attention.q_lora_rank"), (uint32_t)sh->q_lora);
        if (!st)
            st = pagoda_gguf_w_u32(w, MKEY("attention.key_length_mla"), (uint32_t)(sh->qk_nope + sh->qk_rope));
        if (!st) st = pagoda_gguf_w_u32(w, MKEY("attention.value_length_mla"), (uint32_t)sh->v_head_dim);
        return st;
    }
    int st = pagoda_gguf_w_u32(w, MKEY("expert_count"), (uint32_t)sh->n_experts);
    if (!st) st = pagoda_gguf_w_u32(w, MKEY("expert_used_count"), (uint32_t)sh->n_experts_used);
    if (!st && !llama) st = pagoda_gguf_w_u32(w, MKEY("expert_feed_forward_length"), (uint32_t)sh->ffn_exp);
    if (!st && !strcmp(arch, "qwen2moe") && sh->ffn_shexp)
        st = pagoda_gguf_w_u32(w, MKEY("expert_shared_feed_forward_length"), (uint32_t)sh->ffn_shexp);
    if (!st && glm) st = pagoda_gguf_w_u32(w, MKEY("expert_shared_count"), (uint32_t)sh->n_shexp);
    if (!st && glm) st = pagoda_gguf_w_u32(w, MKEY("leading_dense_block_count"), (uint32_t)sh->n_dense_lead);
    /* GLM-4.5's routed_scaling_factor (Air's is 1) */
    if (!st && glm) st = pagoda_gguf_w_f32(w, MKEY("expert_weights_scale"), 2.5f);
    if (!st && glm) st = pagoda_gguf_w_bool(w, MKEY("expert_weights_norm"), true);
    if (!st && glm) st = pagoda_gguf_w_u32(w, MKEY("expert_gating_func"), PAGODA_MOE_GATING_SIGMOID);
#undef MKEY
    return st;
}

int pagoda_gen_model(const pagoda_genmodel_opts *o, char *err, size_t err_len)
{
    int st = PAGODA_ERR_INVALID;
    gguf_file *vf = NULL;
    gguf_writer *w = NULL;
    FILE *fp = NULL;
    gtensor *ts = NULL;
    float *buf = NULL;
    void *qbuf = NULL;
    char *tmp = NULL;
    char name[128], key[160];
    float *rope_factors = NULL;
    if (err && err_len) err[0] = 0;
    const pagoda_model_shape *sh = o ? pagoda_model_shape_find(o->shape) : NULL;
    if (!sh) {
        snprintf(err, err_len, "unknown shape '%s' (known: %s)", o && o->shape ? o->shape : "",
                 pagoda_model_shape_names());
        goto out;
    }
    int dt = o->dtype;
    bool known = false;
    for (size_t i = 0; i < sizeof gen_types / sizeof gen_types[0]; i++) known |= gen_types[i] == dt;
    if (!known) {
        snprintf(err, err_len, "type %s (%d) cannot be generated (use " GEN_TYPES_TEXT ")",
                 pagoda_dtype_name(dt), dt);
        goto out;
    }
    if (!o->out || !*o->out) {
        snprintf(err, err_len, "no output file (--out FILE)");
        goto out;
    }
    int layers = o->layers > 0 ? o->layers : sh->n_layers;
    if (layers > 1000) {
        snprintf(err, err_len, "--layers %d is more than 1000", layers);
        goto out;
    }
    const char *arch = o->arch ? o->arch : sh->arch ? sh->arch : "llama";
    if (sh->arch && strcmp(arch, sh->arch)) {
        snprintf(err, err_len, "shape %s is architecture %s, not %s (leave --arch out)", sh->name,
                 sh->arch, arch);
        goto out;
    }
    bool moe = sh->n_experts > 0;
    /* MXFP4 on a mixture of experts goes to the routed experts only, Q8_0
     * to every other matrix (llama-quantize's MXFP4_MOE, and the released
     * gpt-oss files); a dense shape has no experts to single out, so all
     * its matrices are MXFP4 (for running the type end to end). */
    const int dt_other = dt == PAGODA_DTYPE_MXFP4 && moe ? PAGODA_DTYPE_Q8_0 : dt;
    bool qwen3moe = !strcmp(arch, "qwen3moe"), qwen2moe = !strcmp(arch, "qwen2moe");
    bool glm4moe = !strcmp(arch, "glm4moe"), mla = !strcmp(arch, "deepseek2");
    bool gptoss = !strcmp(arch, "gpt-oss");
    bool qwen2 = !strcmp(arch, "qwen2"), qwen3 = !strcmp(arch, "qwen3");
    bool gemma3 = !strcmp(arch, "gemma3");
    if (strcmp(arch, "llama") && !qwen2 && !qwen3 && !gemma3 &&
        !(moe && (qwen3moe || qwen2moe || glm4moe || mla || gptoss))) {
        snprintf(err, err_len, "unknown architecture '%s' (known: llama, qwen2, qwen3, gemma3; qwen3moe, "
                 "qwen2moe, glm4moe, deepseek2 and gpt-oss come with their shapes)", arch);
        goto out;
    }
    if (gptoss && o->rope_scaling != PAGODA_ROPE_SCALING_NONE &&
        o->rope_scaling != PAGODA_ROPE_SCALING_YARN) {
        snprintf(err, err_len, "shape %s has its own rope scaling (YaRN factor 32 over 4096); "
                 "leave --rope-scaling out", sh->name);
        goto out;
    }
    bool qkv_bias = qwen2 || qwen2moe || glm4moe || gptoss, qk_norm = qwen3 || qwen3moe || gemma3;
    /* The experts' type: --type. With --type MXFP4 on a mixture of experts
     * the routed experts are MXFP4 and every other matrix Q8_0 (dt_other,
     * above): the released gpt-oss files' layout. */
    int exp_dt = dt;
    if (o->sliding_window < 0 || o->swa_pattern < 0) {
        snprintf(err, err_len, "sliding window %d / pattern %d must be >= 0", o->sliding_window,
                 o->swa_pattern);
        goto out;
    }
    if (o->rope_scaling < PAGODA_ROPE_SCALING_NONE || o->rope_scaling > PAGODA_ROPE_SCALING_YARN) {
        snprintf(err, err_len, "unknown rope scaling %d", o->rope_scaling);
        goto out;
    }
    if (o->head_dim < 0 || o->head_dim % 2 || o->head_dim > 1024 || o->std < 0 || o->norm_std < 0) {
        snprintf(err, err_len, "head dim %d (even, <= 1024) or std %g / norm std %g (>= 0) out of range",
                 o->head_dim, (double)o->std, (double)o->norm_std);
        goto out;
    }
    int dim = sh->dim;
    int head_dim = o->head_dim ? o->head_dim : sh->head_dim ? sh->head_dim : sh->dim / sh->n_heads;
    bool head_dim_key = o->head_dim || sh->head_dim;
    if (mla && o->head_dim) {
        snprintf(err, err_len, "--head-dim does not apply to deepseek2 (its shape sets the latent widths)");
        goto out;
    }
    /* MLA: the cached row (key_length) is kv_lora + rope, one KV head */
    if (mla) head_dim = sh->kv_lora + sh->qk_rope;
    int mla_q = sh->n_heads * (sh->qk_nope + sh->qk_rope), mla_v = sh->n_heads * sh->v_head_dim;
    int q_dim = head_dim * sh->n_heads, kv_dim = head_dim * sh->n_kv_heads;
    int vocab = sh->vocab;
    gen_values gv = {.std = o->std > 0 ? o->std : 0.02f, .norm_std = o->norm_std};
    gv.bias_std = 4 * gv.std;
    gv.router_std = 1.0f / sqrtf((float)dim);
    bool not_llama = strcmp(arch, "llama") != 0;
    double theta = gptoss ? 150000.0 : not_llama ? 1000000.0 : 10000.0;
    if (o->rope_scaling == PAGODA_ROPE_SCALING_LLAMA3) theta = LLAMA3_THETA;
#define AKEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)

    w = pagoda_gguf_writer_new();
    if (!w) { st = PAGODA_ERR_NOMEM; snprintf(err, err_len, "out of memory"); goto out; }
    if (not_llama) snprintf(name, sizeof name, "pagoda-random-%s-%s", arch, sh->name);
    else snprintf(name, sizeof name, "pagoda-random-%s", sh->name);
    st = pagoda_gguf_w_str(w, "general.architecture", arch);
    if (!st) st = pagoda_gguf_w_str(w, "general.name", name);
    if (!st) st = pagoda_gguf_w_u32(w, "general.alignment", 32);
    if (!st) st = pagoda_gguf_w_u32(w, "general.file_type", file_type(dt));
    if (!st) st = pagoda_gguf_w_u32(w, AKEY("context_length"), (uint32_t)(o->context > 0 ? o->context : sh->context));
    if (!st) st = pagoda_gguf_w_u32(w, AKEY("embedding_length"), (uint32_t)dim);
    if (!st) st = pagoda_gguf_w_u32(w, AKEY("block_count"), (uint32_t)layers);
    if (!st) st = pagoda_gguf_w_u32(w, AKEY("feed_forward_length"), (uint32_t)sh->ffn);
    if (!st) st = pagoda_gguf_w_u32(w, AKEY("attention.head_count"), (uint32_t)sh->n_heads);
    if (!st) st = pagoda_gguf_w_u32(w, AKEY("attention.head_count_kv"), (uint32_t)sh->n_kv_heads);
    if (!st && head_dim_key) st = pagoda_gguf_w_u32(w, AKEY("attention.key_length"), (uint32_t)head_dim);
    if (!st && head_dim_key) st = pagoda_gguf_w_u32(w, AKEY("attention.value_length"), (uint32_t)head_dim);
    if (!st && mla) st = pagoda_gguf_w_u32(w, AKEY("attention.key_length"), (uint32_t)head_dim);
    if (!st && mla) st = pagoda_gguf_w_u32(w, AKEY("attention.value_length"), (uint32_t)sh->kv_lora);
    if (!st) st = pagoda_gguf_w_f32(w, AKEY("attention.layer_norm_rms_epsilon"),
                                    not_llama && !glm4moe && !gptoss ? 1e-6f : 1e-5f);
    if (!st && moe) st = write_moe_keys(w, arch, sh);
    if (!st && gemma3)
        st = pagoda_gguf_w_u32(w, AKEY("attention.sliding_window"),
                               (uint32_t)(o->sliding_window ? o->sliding_window : 512));
    /* gpt-oss: the window (the converter writes no pattern: layers alternate) */
    if (!st && gptoss)
        st = pagoda_gguf_w_u32(w, AKEY("attention.sliding_window"),
                               (uint32_t)(o->sliding_window ? o->sliding_window
                                          : sh->dim < 1024 ? 8 : 128));
    if (!st && (gemma3 || gptoss) && o->swa_pattern)
        st = pagoda_gguf_w_u32(w, AKEY("attention.sliding_window_pattern"), (uint32_t)o->swa_pattern);
    if (!st) st = pagoda_gguf_w_f32(w, AKEY("rope.freq_base"), (float)theta);
    /* glm4moe rotates half of each head (partial_rotary_factor 0.5) */
    if (!st) st = pagoda_gguf_w_u32(w, AKEY("rope.dimension_count"),
                                    (uint32_t)(glm4moe ? head_dim / 2 : mla ? sh->qk_rope : head_dim));
    if (!st && o->rope_scaling == PAGODA_ROPE_SCALING_LINEAR) {
        st = pagoda_gguf_w_str(w, AKEY("rope.scaling.type"), "linear");
        if (!st) st = pagoda_gguf_w_f32(w, AKEY("rope.scaling.factor"), 4.0f);
    }
    /* YaRN as llama.cpp's converter writes it from HF rope parameters:
     * factor 4 over a trained context of 1024, betas 32 / 1; gpt-oss's own
     * (always): factor 32 over 4096 */
    if (!st && (o->rope_scaling == PAGODA_ROPE_SCALING_YARN || gptoss)) {
        st = pagoda_gguf_w_str(w, AKEY("rope.scaling.type"), "yarn");
        if (!st) st = pagoda_gguf_w_f32(w, AKEY("rope.scaling.factor"), gptoss ? 32.0f : 4.0f);
        if (!st) st = pagoda_gguf_w_u32(w, AKEY("rope.scaling.original_context_length"),
                                        gptoss ? 4096 : 1024);
        if (!st) st = pagoda_gguf_w_f32(w, AKEY("rope.scaling.yarn_beta_fast"), 32.0f);
        if (!st) st = pagoda_gguf_w_f32(w, AKEY("rope.scaling.yarn_beta_slow"), 1.0f);
    }
    if (st) { snprintf(err, err_len, "metadata: %s", pagoda_status_str(st)); goto out; }

    if (o->vocab) {
        vf = pagoda_gguf_open(o->vocab, err, err_len);
        if (!vf) { st = PAGODA_ERR_INVALID; goto out; }
        const gguf_kv *tk = pagoda_gguf_find(vf, "tokenizer.ggml.tokens");
        if (!tk || tk->val.type != GGUF_T_ARRAY || tk->val.v.arr.elem_type != GGUF_T_STRING ||
            tk->val.v.arr.count == 0 || tk->val.v.arr.count > 1000000) {
            snprintf(err, err_len, "%s: no usable tokenizer.ggml.tokens string array", o->vocab);
            st = PAGODA_ERR_INVALID;
            goto out;
        }
        /* The embedding must cover every token the vocabulary can produce. */
        vocab = (int)tk->val.v.arr.count;
        for (uint64_t i = 0; i < vf->n_kv; i++) {
            const gguf_kv *kv = &vf->kv[i];
            if (kv->key.len >= 10 && memcmp(kv->key.ptr, "tokenizer.", 10) == 0) {
                st = pagoda_gguf_w_copy(w, kv);
                if (st) {
                    snprintf(err, err_len, "%s: copying key '%.*s': %s", o->vocab,
                             (int)kv->key.len, kv->key.ptr, pagoda_status_str(st));
                    goto out;
                }
            }
        }
    } else {
        st = write_generated_vocab(w, vocab, err, err_len);
        if (st) goto out;
    }
    st = pagoda_gguf_w_u32(w, AKEY("vocab_size"), (uint32_t)vocab);
    if (st) { snprintf(err, err_len, "metadata: %s", pagoda_status_str(st)); goto out; }

    /* Tensor list, in llama.cpp's order. */
    size_t n_t = 4 + (size_t)layers * 28;
    ts = calloc(n_t, sizeof *ts);
    if (!ts) { st = PAGODA_ERR_NOMEM; snprintf(err, err_len, "out of memory"); goto out; }
    size_t k = 0;
#define ADDK(nm_fmt, layer, tp, d0, d1, knd) do {                                 \
        snprintf(ts[k].name, sizeof ts[k].name, nm_fmt, layer);                   \
        ts[k].type = (tp); ts[k].ne[0] = (d0); ts[k].ne[1] = (d1);                \
        ts[k].kind = (knd); ts[k].n_dims = (knd) == GT_WEIGHT || (knd) == GT_ROUTER ? 2 : 1; \
        ts[k].ne[2] = 1; k++;                                                     \
    } while (0)
#define ADD3(nm_fmt, layer, d0, d1) do {                                          \
        ADDK(nm_fmt, layer, exp_dt, d0, d1, GT_WEIGHT);                          \
        ts[k - 1].ne[2] = sh->n_experts; ts[k - 1].n_dims = 3;                    \
    } while (0)
#define ADD(nm_fmt, layer, tp, d0, d1, is_norm) \
    ADDK(nm_fmt, layer, tp, d0, d1, (is_norm) ? GT_NORM : GT_WEIGHT)
    ADD("token_embd.weight%.0d", 0, dt_other, dim, vocab, false);
    ADD("output_norm.weight%.0d", 0, PAGODA_DTYPE_F32, dim, 1, true);
    if (!o->tied) ADD("output.weight%.0d", 0, dt_other, dim, vocab, false);
    if (o->rope_scaling == PAGODA_ROPE_SCALING_LLAMA3) {
        rope_factors = malloc(sizeof *rope_factors * (size_t)(head_dim / 2));
        if (!rope_factors) { st = PAGODA_ERR_NOMEM; snprintf(err, err_len, "out of memory"); goto out; }
        llama3_factors(head_dim, rope_factors);
        ADDK("rope_freqs.weight%.0d", 0, PAGODA_DTYPE_F32, head_dim / 2, 1, GT_VALUES);
        ts[k - 1].values = rope_factors;
    }
    for (int l = 0; l < layers; l++) {
        ADD("blk.%d.attn_norm.weight", l, PAGODA_DTYPE_F32, dim, 1, true);
        if (mla) {
            /* the tensors llama.cpp's converter writes for DeepSeek */
            if (sh->q_lora) {
                ADD("blk.%d.attn_q_a.weight", l, dt_other, dim, sh->q_lora, false);
                ADD("blk.%d.attn_q_a_norm.weight", l, PAGODA_DTYPE_F32, sh->q_lora, 1, true);
                ADD("blk.%d.attn_q_b.weight", l, dt_other, sh->q_lora, mla_q, false);
            } else {
                ADD("blk.%d.attn_q.weight", l, dt_other, dim, mla_q, false);
            }
            ADD("blk.%d.attn_kv_a_mqa.weight", l, dt_other, dim, sh->kv_lora + sh->qk_rope, false);
            ADD("blk.%d.attn_kv_a_norm.weight", l, PAGODA_DTYPE_F32, sh->kv_lora, 1, true);
            ADD("blk.%d.attn_k_b.weight", l, dt_other, sh->qk_nope, sh->kv_lora, false);
            ts[k - 1].ne[2] = sh->n_heads;
            ts[k - 1].n_dims = 3;
            ADD("blk.%d.attn_v_b.weight", l, dt_other, sh->kv_lora, sh->v_head_dim, false);
            ts[k - 1].ne[2] = sh->n_heads;
            ts[k - 1].n_dims = 3;
            ADD("blk.%d.attn_output.weight", l, dt_other, mla_v, dim, false);
        } else {
        ADD("blk.%d.attn_q.weight", l, dt_other, dim, q_dim, false);
        ADD("blk.%d.attn_k.weight", l, dt_other, dim, kv_dim, false);
        ADD("blk.%d.attn_v.weight", l, dt_other, dim, kv_dim, false);
        if (qkv_bias) {
            ADDK("blk.%d.attn_q.bias", l, PAGODA_DTYPE_F32, q_dim, 1, GT_BIAS);
            ADDK("blk.%d.attn_k.bias", l, PAGODA_DTYPE_F32, kv_dim, 1, GT_BIAS);
            ADDK("blk.%d.attn_v.bias", l, PAGODA_DTYPE_F32, kv_dim, 1, GT_BIAS);
        }
        if (qk_norm) {
            ADD("blk.%d.attn_q_norm.weight", l, PAGODA_DTYPE_F32, head_dim, 1, true);
            ADD("blk.%d.attn_k_norm.weight", l, PAGODA_DTYPE_F32, head_dim, 1, true);
        }
        ADD("blk.%d.attn_output.weight", l, dt_other, q_dim, dim, false);
        if (gptoss) {   /* the output bias and a sink logit per head */
            ADDK("blk.%d.attn_output.bias", l, PAGODA_DTYPE_F32, dim, 1, GT_BIAS);
            ADDK("blk.%d.attn_sinks.weight", l, PAGODA_DTYPE_F32, sh->n_heads, 1, GT_BIAS);
        }
        }
        if (gemma3) ADD("blk.%d.post_attention_norm.weight", l, PAGODA_DTYPE_F32, dim, 1, true);
        /* glm4moe and gpt-oss name their pre-FFN norm post_attention_norm, as llama.cpp does */
        if (glm4moe || gptoss) ADD("blk.%d.post_attention_norm.weight", l, PAGODA_DTYPE_F32, dim, 1, true);
        else ADD("blk.%d.ffn_norm.weight", l, PAGODA_DTYPE_F32, dim, 1, true);
        if (moe && l >= sh->n_dense_lead) {
            /* the router stays F32, as llama-quantize leaves it */
            ADDK("blk.%d.ffn_gate_inp.weight", l, PAGODA_DTYPE_F32, dim, sh->n_experts, GT_ROUTER);
            if (glm4moe || (mla && sh->sigmoid))
                ADDK("blk.%d.exp_probs_b.bias", l, PAGODA_DTYPE_F32, sh->n_experts, 1, GT_BIAS);
            if (gptoss) ADDK("blk.%d.ffn_gate_inp.bias", l, PAGODA_DTYPE_F32, sh->n_experts, 1, GT_BIAS);
            ADD3("blk.%d.ffn_gate_exps.weight", l, dim, sh->ffn_exp);
            ADD3("blk.%d.ffn_up_exps.weight", l, dim, sh->ffn_exp);
            ADD3("blk.%d.ffn_down_exps.weight", l, sh->ffn_exp, dim);
            if (gptoss) {   /* a bias row per expert: [width, experts] */
                static const char *const eb[3] = {"blk.%d.ffn_gate_exps.bias",
                                                  "blk.%d.ffn_up_exps.bias", "blk.%d.ffn_down_exps.bias"};
                for (int b = 0; b < 3; b++) {
                    ADDK(eb[b], l, PAGODA_DTYPE_F32, b == 2 ? dim : sh->ffn_exp, sh->n_experts, GT_BIAS);
                    ts[k - 1].n_dims = 2;
                }
            }
            if (sh->ffn_shexp) {
                if (qwen2moe)   /* the shared expert's sigmoid gate [dim -> 1] */
                    ADD("blk.%d.ffn_gate_inp_shexp.weight", l, PAGODA_DTYPE_F32, dim, 1, false);
                ADD("blk.%d.ffn_gate_shexp.weight", l, dt_other, dim, sh->ffn_shexp, false);
                ADD("blk.%d.ffn_up_shexp.weight", l, dt_other, dim, sh->ffn_shexp, false);
                ADD("blk.%d.ffn_down_shexp.weight", l, dt_other, sh->ffn_shexp, dim, false);
            }
        } else {
            ADD("blk.%d.ffn_gate.weight", l, dt_other, dim, sh->ffn, false);
            ADD("blk.%d.ffn_up.weight", l, dt_other, dim, sh->ffn, false);
            ADD("blk.%d.ffn_down.weight", l, dt_other, sh->ffn, dim, false);
        }
        if (gemma3) ADD("blk.%d.post_ffw_norm.weight", l, PAGODA_DTYPE_F32, dim, 1, true);
    }
#undef ADD
#undef ADD3
#undef ADDK
#undef AKEY
    n_t = k;
    /* Matrices whose rows do not fit the type's blocks: the fallback type,
     * or an error naming the tensor. */
    int n_fallback = 0, fallback = -1;
    const char *first_fallback = NULL;
    for (size_t i = 0; i < n_t; i++) {
        int ask = ts[i].type;
        if (ask != dt && ask != dt_other) continue;
        int tt = pagoda_genmodel_tensor_type(ask, ts[i].ne[0]);
        if (tt < 0) {
            int be = 0;
            pagoda_dtype_block(ask, &be, NULL);
            snprintf(err, err_len, "tensor %s: row length %lld is not a multiple of the %s block (%d values)",
                     ts[i].name, (long long)ts[i].ne[0], pagoda_dtype_name(ask), be);
            st = PAGODA_ERR_INVALID;
            goto out;
        }
        if (tt != ask) {
            ts[i].type = tt;
            fallback = tt;
            if (!n_fallback++) first_fallback = ts[i].name;
        }
    }
    for (size_t i = 0; i < n_t; i++) {
        st = pagoda_gguf_w_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne);
        if (st) { snprintf(err, err_len, "tensor %s: %s", ts[i].name, pagoda_status_str(st)); goto out; }
    }

    if (asprintf(&tmp, "%s.%d.tmp", o->out, (int)getpid()) < 0) { tmp = NULL; st = PAGODA_ERR_NOMEM; goto out; }
    fp = fopen(tmp, "wb");
    if (!fp) {
        st = PAGODA_ERR_IO;
        snprintf(err, err_len, "%s: cannot create: %s", tmp, strerror(errno));
        goto out;
    }
    setvbuf(fp, NULL, _IOFBF, 1 << 22);
    /* About 4 MB of F32 per chunk (whole rows), and its quantized form. */
    const size_t chunk = 1u << 20;
    size_t max_cols = (size_t)(sh->ffn > dim ? sh->ffn : dim);
    if ((size_t)sh->ffn_exp > max_cols) max_cols = (size_t)sh->ffn_exp;
    if ((size_t)sh->ffn_shexp > max_cols) max_cols = (size_t)sh->ffn_shexp;
    if ((size_t)q_dim > max_cols) max_cols = (size_t)q_dim;
    if ((size_t)mla_v > max_cols) max_cols = (size_t)mla_v;
    size_t cap = chunk > max_cols ? chunk : max_cols;
    buf = malloc(cap * sizeof *buf);
    qbuf = malloc(cap * sizeof *buf);
    if (!buf || !qbuf) { st = PAGODA_ERR_NOMEM; snprintf(err, err_len, "out of memory"); goto out; }
    st = pagoda_gguf_w_begin(w, fp);
    if (!st && o->header_only) st = pagoda_gguf_w_data_hole(w, fp);
    for (size_t i = 0; !st && !o->header_only && i < n_t; i++)
        st = write_tensor(w, fp, &ts[i], o->seed, i, &gv, buf, qbuf, chunk);
    if (!st) st = pagoda_gguf_w_finish(w, fp);
    if (st) { snprintf(err, err_len, "%s: write failed: %s", tmp, pagoda_status_str(st)); goto out; }
    if (fclose(fp) != 0) {
        fp = NULL;
        st = PAGODA_ERR_IO;
        snprintf(err, err_len, "%s: write failed: %s", tmp, strerror(errno));
        goto out;
    }
    fp = NULL;
    if (rename(tmp, o->out) != 0) {
        st = PAGODA_ERR_IO;
        snprintf(err, err_len, "rename %s -> %s: %s", tmp, o->out, strerror(errno));
        goto out;
    }
    st = PAGODA_OK;
    if (n_fallback)
        snprintf(err, err_len, "%d of the %s matrices (%s first) have rows that are not a multiple of "
                 "256 values and are %s instead, as llama-quantize does", n_fallback, pagoda_dtype_name(dt),
                 first_fallback, pagoda_dtype_name(fallback));
out:
    if (fp) fclose(fp);
    if (st && tmp) unlink(tmp);
    free(tmp);
    free(buf);
    free(qbuf);
    free(ts);
    free(rope_factors);
    pagoda_gguf_writer_free(w);
    pagoda_gguf_close(vf);
    return st;
}

/* ------------------------------------------------------------ CLI */

int pagoda_genmodel_parse_type(const char *s)
{
    for (size_t i = 0; s && i < sizeof gen_types / sizeof gen_types[0]; i++)
        if (strcasecmp(s, pagoda_dtype_name(gen_types[i])) == 0) return gen_types[i];
    return -1;
}

static void gen_usage(FILE *f)
{
    fprintf(f, "usage: pagoda gen-model --shape NAME --type T --out FILE [--vocab VOCAB.gguf]\n"
               "                        [--seed N] [--layers N] [--arch A] [--rope-scaling S]\n"
               "                        [--tied] [--std S] [--norm-std S] [--head-dim N]\n"
               "       pagoda gen-model --upcycle SRC.gguf --experts E --used K --out FILE [--seed N]\n"
               "  --shape   llama-110M | tinyllama-1.1B | tiny | tiny-k (tiny, rows of 256)\n"
               "            | tiny-tp (12 heads, 6 KV heads, FFN 576: splits 2, 3, 6 ways)\n"
               "            mixtures of experts (each its own architecture; the router F32):\n"
               "            | qwen3-30b-a3b (qwen3moe as released: 48 layers, dim 2048, 32/4 heads\n"
               "              of 128, 128 experts top-8 of width 768, vocab 151936; --layers N\n"
               "              for a shallower copy) | qwen2-moe-a2.7b (qwen2moe: 60 experts top-4\n"
               "              of 1408, a gated shared expert of 5632) | qwen3moe-tiny |\n"
               "              qwen2moe-tiny | mixtral-tiny (llama with experts) | glm4moe-tiny\n"
               "              (a dense lead layer, sigmoid routing with exp_probs_b, a shared\n"
               "              expert, scale 2.5); the tiny ones: dim 256, 8 experts top-2\n"
               "            | deepseek-v2-lite (deepseek2, multi-head latent attention: 27\n"
               "              layers, dim 2048, 16 heads, latent 512 + RoPE 64, 64 experts top-6\n"
               "              and 2 shared) | deepseek-v3 (61 layers, dim 7168, 128 heads, query\n"
               "              LoRA 1536, 256 experts top-8 in 8 groups, sigmoid; --layers N) |\n"
               "              deepseek2-tiny (V3-style, dim 256)\n"
               "            | gpt-oss-20b (as released: 24 layers, dim 2880, 64/8 heads of 64,\n"
               "              32 experts top-4 of 2880, sinks, biases, window 128 on every\n"
               "              other layer, YaRN 32 over 4096; --type MXFP4: the released\n"
               "              layout) | gpt-oss-tiny (dim 256, 8 experts top-4, window 8)\n"
               "  --header-only  the header and tensor table, the data a hole of zeros (a\n"
               "            sparse file): `pagoda plan` of a shape too big to write; never run it\n"
               "  --upcycle SRC  a dense llama GGUF whose FFN becomes E identical experts (the\n"
               "            same blocks byte for byte, 3-D) with a random router, Mixtral-style:\n"
               "            --experts E (1..256) --used K (top-K, 1..E); -o is --out\n"
               "  --type    F32 | F16 | BF16 | Q8_0 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | IQ4_NL |\n"
               "            Q2_K | Q3_K | Q4_K | Q5_K | IQ4_XS | MXFP4 (norms stay F32; a matrix\n"
               "            whose rows are not a multiple of 256 gets llama-quantize's fallback:\n"
               "            IQ4_NL for Q2_K/Q3_K/IQ4_XS, Q5_0 for Q4_K, Q5_1 for Q5_K; MXFP4 on a\n"
               "            mixture of experts: the experts MXFP4, every other matrix Q8_0, as\n"
               "            gpt-oss ships; on a dense shape every matrix MXFP4)\n"
               "  --vocab   copy every tokenizer.* key from this GGUF (default: a generated\n"
               "            SPM-style vocabulary of the shape's size)\n"
               "  --seed    weights seed (default 42)\n"
               "  --layers  override the shape's layer count\n"
               "  --arch    llama (default) | qwen2 (QKV biases ~N(0, 4*std)) | qwen3 (Q/K norms)\n"
               "            | gemma3 (Q/K norms, post-norms, GeGLU, sliding-window layers)\n"
               "  --rope-scaling  none (default) | linear (factor 4) | llama3 (rope_freqs.weight:\n"
               "            factor 8, low 1, high 4, original context 8192; theta 500000)\n"
               "  --tied    no output.weight (the output matrix is token_embd)\n"
               "  --std     weight standard deviation (default 0.02)\n"
               "  --norm-std  norm weights 1 + N(0, S) (default 0: exactly 1)\n"
               "  --head-dim  head dimension other than dim/heads (attention.key_length)\n"
               "  --context N  context_length written into the file (default: the shape's;\n"
               "            llama-110M 1024): long-prompt runs on a small shape\n"
               "  --sliding-window N  gemma3, gpt-oss: attention.sliding_window (default 512;\n"
               "            gpt-oss 128, its tiny shape 8)\n"
               "  --swa-pattern N  gemma3, gpt-oss: write attention.sliding_window_pattern = N\n"
               "            (every N-th layer global; default: no key, which means 6; gpt-oss 2)\n");
}

int pagoda_cmd_gen_model(int argc, char **argv)
{
    pagoda_genmodel_opts o = {.seed = 42, .dtype = -1};
    const char *upcycle = NULL;
    long n_experts = 0, n_used = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) { gen_usage(stdout); return 0; }
        if (strcmp(a, "--tied") == 0) { o.tied = true; continue; }
        if (strcmp(a, "--header-only") == 0) { o.header_only = true; continue; }
        const char *eq = strchr(a, '=');
        size_t alen = eq ? (size_t)(eq - a) : strlen(a);
        if (eq) v = eq + 1;
        else if (i + 1 < argc) v = argv[i + 1];
        if (!v) {
            fprintf(stderr, "pagoda gen-model: %s needs a value\n", a);
            gen_usage(stderr);
            return 2;
        }
        char *end = NULL;
#define OPT(s) (alen == strlen(s) && strncmp(a, s, alen) == 0)
        if (OPT("--shape")) o.shape = v;
        else if (OPT("--out") || OPT("-o")) o.out = v;
        else if (OPT("--upcycle")) upcycle = v;
        else if (OPT("--experts") || OPT("--used")) {
            errno = 0;
            long n = strtol(v, &end, 10);
            if (errno || !*v || *end || n < 1 || n > 256) {
                fprintf(stderr, "pagoda gen-model: %.*s %s: expected 1..256\n", (int)alen, a, v);
                return 2;
            }
            if (OPT("--experts")) n_experts = n;
            else n_used = n;
        }
        else if (OPT("--vocab")) o.vocab = v;
        else if (OPT("--arch")) {
            if (strcmp(v, "llama") && strcmp(v, "qwen2") && strcmp(v, "qwen3") && strcmp(v, "gemma3") &&
                strcmp(v, "qwen3moe") && strcmp(v, "qwen2moe") && strcmp(v, "glm4moe") &&
                strcmp(v, "gpt-oss")) {
                fprintf(stderr, "pagoda gen-model: --arch %s: expected llama, qwen2, qwen3, gemma3 (or "
                        "a MoE shape's own: qwen3moe, qwen2moe, glm4moe, gpt-oss)\n", v);
                return 2;
            }
            o.arch = v;
        } else if (OPT("--rope-scaling")) {
            if (!strcmp(v, "none")) o.rope_scaling = PAGODA_ROPE_SCALING_NONE;
            else if (!strcmp(v, "linear")) o.rope_scaling = PAGODA_ROPE_SCALING_LINEAR;
            else if (!strcmp(v, "llama3")) o.rope_scaling = PAGODA_ROPE_SCALING_LLAMA3;
            else if (!strcmp(v, "yarn")) o.rope_scaling = PAGODA_ROPE_SCALING_YARN;
            else {
                fprintf(stderr, "pagoda gen-model: --rope-scaling %s: expected none, linear, llama3 "
                        "or yarn\n", v);
                return 2;
            }
        } else if (OPT("--std") || OPT("--norm-std")) {
            errno = 0;
            float f = strtof(v, &end);
            if (errno || !*v || *end || !(f >= 0 && f <= 10)) {
                fprintf(stderr, "pagoda gen-model: %.*s %s: expected a number in 0..10\n", (int)alen, a, v);
                return 2;
            }
            if (OPT("--std")) o.std = f;
            else o.norm_std = f;
        } else if (OPT("--sliding-window") || OPT("--swa-pattern")) {
            errno = 0;
            long n = strtol(v, &end, 10);
            if (errno || !*v || *end || n < 1 || n > 1000000) {
                fprintf(stderr, "pagoda gen-model: %.*s %s: expected 1..1000000\n", (int)alen, a, v);
                return 2;
            }
            if (OPT("--sliding-window")) o.sliding_window = (int)n;
            else o.swa_pattern = (int)n;
        } else if (OPT("--context")) {
            errno = 0;
            long c = strtol(v, &end, 10);
            if (errno || !*v || *end || c < 16 || c > (1L << 20)) {
                fprintf(stderr, "pagoda gen-model: --context %s: expected 16..1048576\n", v);
                return 2;
            }
            o.context = (int)c;
        } else if (OPT("--head-dim")) {
            errno = 0;
            long hd = strtol(v, &end, 10);
            if (errno || !*v || *end || hd < 2 || hd > 1024 || hd % 2) {
                fprintf(stderr, "pagoda gen-model: --head-dim %s: expected an even 2..1024\n", v);
                return 2;
            }
            o.head_dim = (int)hd;
        }
        else if (OPT("--type")) {
            o.dtype = pagoda_genmodel_parse_type(v);
            if (o.dtype < 0) {
                fprintf(stderr, "pagoda gen-model: --type %s: expected " GEN_TYPES_TEXT "\n", v);
                return 2;
            }
        } else if (OPT("--seed")) {
            errno = 0;
            o.seed = strtoull(v, &end, 0);
            if (errno || !*v || *end) { fprintf(stderr, "pagoda gen-model: --seed %s: not a number\n", v); return 2; }
        } else if (OPT("--layers")) {
            errno = 0;
            long l = strtol(v, &end, 10);
            if (errno || !*v || *end || l < 1 || l > 1000) {
                fprintf(stderr, "pagoda gen-model: --layers %s: expected 1..1000\n", v);
                return 2;
            }
            o.layers = (int)l;
        } else {
            fprintf(stderr, "pagoda gen-model: unknown option %s\n", a);
            gen_usage(stderr);
            return 2;
        }
#undef OPT
        if (!eq) i++;
    }
    if (upcycle) {
        if (!o.out || !n_experts || !n_used) {
            fprintf(stderr, "pagoda gen-model: --upcycle needs --experts, --used and --out\n");
            gen_usage(stderr);
            return 2;
        }
        pagoda_upcycle_opts u = {.src = upcycle, .out = o.out, .n_experts = (int)n_experts,
                                 .n_used = (int)n_used, .seed = o.seed};
        char uerr[1024];
        if (pagoda_upcycle(&u, uerr, sizeof uerr)) {
            fprintf(stderr, "pagoda gen-model: %s\n", uerr);
            return 1;
        }
        fprintf(stderr, "pagoda gen-model: wrote %s (%s upcycled: %ld experts, top-%ld)\n", o.out,
                upcycle, n_experts, n_used);
        return 0;
    }
    if (!o.shape || !o.out || o.dtype < 0) {
        fprintf(stderr, "pagoda gen-model: --shape, --type and --out are required\n");
        gen_usage(stderr);
        return 2;
    }
    if (!pagoda_model_shape_find(o.shape)) {
        fprintf(stderr, "pagoda gen-model: unknown shape '%s' (known: %s)\n", o.shape,
                pagoda_model_shape_names());
        return 2;
    }
    char err[1024];
    int st = pagoda_gen_model(&o, err, sizeof err);
    if (st) {
        fprintf(stderr, "pagoda gen-model: %s\n", err);
        return 1;
    }
    const pagoda_model_shape *sh = pagoda_model_shape_find(o.shape);
    fprintf(stderr, "pagoda gen-model: wrote %s (%s %s, %s)\n", o.out,
            o.arch ? o.arch : sh->arch ? sh->arch : "llama", o.shape, pagoda_dtype_name(o.dtype));
    if (err[0]) fprintf(stderr, "pagoda gen-model: note: %s\n", err);
    return 0;
}
