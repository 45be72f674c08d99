/*
 * arch.c: the table of model families (see arch.h) and the key readers of
 * the families that have keys of their own.
 * Not for: the keys every family shares or binding tensors (model.c).
 */
#include "arch.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model.h"
#include "pagoda/types.h"

#define ERR(...) snprintf(err, err_len, __VA_ARGS__)

static bool key_int(const gguf_file *f, const char *arch, const char *suffix, int64_t *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return pagoda_gguf_get_int(f, key, out);
}

static bool key_float(const gguf_file *f, const char *arch, const char *suffix, double *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return pagoda_gguf_get_float(f, key, out);
}

/* The sliding-window keys of a family with local layers: the window
 * (required, 1..context_length; `who` names the family's window in the
 * message) and which layers are local: the key sliding_window_pattern as a
 * per-layer boolean array, or a count n (every layer but each n-th is
 * local; 0: every layer), else the family's default n. */
static int read_swa(const gguf_file *f, pagoda_hparams *hp, int64_t default_n, const char *who,
                    char *err, size_t err_len)
{
    int64_t v;
    if (!key_int(f, hp->arch, "attention.sliding_window", &v)) {
        ERR("%s: missing key %s.attention.sliding_window (%s)", f->path, hp->arch, who);
        return PAGODA_ERR_INVALID;
    }
    if (v <= 0 || v > hp->n_ctx_train) {
        ERR("%s: key %s.attention.sliding_window = %lld is outside 1..%d (the context_length)",
            f->path, hp->arch, (long long)v, hp->n_ctx_train);
        return PAGODA_ERR_INVALID;
    }
    hp->swa_window = (int32_t)v;
    if (hp->n_layers > PAGODA_MAX_SWA_LAYERS) {
        ERR("%s: %d layers with sliding-window attention: at most %d are supported", f->path,
            hp->n_layers, PAGODA_MAX_SWA_LAYERS);
        return PAGODA_ERR_UNSUPPORTED;
    }
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", hp->arch);
    const gguf_kv *pk = pagoda_gguf_find(f, key);
    if (pk && pk->val.type == GGUF_T_ARRAY) {
        if (pk->val.v.arr.count != (uint64_t)hp->n_layers ||
            pk->val.v.arr.elem_type == GGUF_T_STRING || pk->val.v.arr.elem_type == GGUF_T_ARRAY) {
            ERR("%s: key %s is an array of %llu, expected %d booleans (one per layer)", f->path,
                key, (unsigned long long)pk->val.v.arr.count, hp->n_layers);
            return PAGODA_ERR_INVALID;
        }
        for (int l = 0; l < hp->n_layers; l++)
            hp->is_swa[l] = pagoda_gguf_arr_num(&pk->val, (uint64_t)l) != 0;
    } else {
        int64_t n = default_n;
        if (pk && (!pagoda_gguf_get_int(f, key, &n) || n < 0 || n > hp->n_layers)) {
            ERR("%s: key %s must be a layer count 0..%d or a per-layer boolean array", f->path,
                key, hp->n_layers);
            return PAGODA_ERR_INVALID;
        }
        /* n = 0: every layer local; else the last of each n is global */
        for (int l = 0; l < hp->n_layers; l++) hp->is_swa[l] = n == 0 || l % n < n - 1;
    }
    hp->n_swa_layers = 0;
    for (int l = 0; l < hp->n_layers; l++) hp->n_swa_layers += hp->is_swa[l];
    return PAGODA_OK;
}

/* Gemma 3's keys and constants (after the common ones). What the file
 * does not say comes from Gemma 3's definition (HF Gemma3TextConfig, the
 * gemma_pytorch config), as llama.cpp also assumes it:
 *   - embeddings times sqrt(dim); RMSNorm weights stored with Gemma's +1
 *     already added by the converter (used as they are);
 *   - local layers: every layer but each sliding_window_pattern-th
 *     (default 6: layers 5, 11, 17, ... are global), unless the key is a
 *     per-layer array;
 *   - local RoPE base rope.freq_base_swa, default 10000
 *     (rope_local_base_freq); the global base is rope.freq_base;
 *   - query_pre_attn_scalar: head_dim, except the 27B (62 layers) where it
 *     is dim / heads; scores are scaled by 1/sqrt(that);
 *   - no final logit soft-capping (Gemma 2 had it; a file that asks for
 *     it is refused rather than run without it).
 * The window is required and may not exceed the training context (a
 * larger one is a malformed file); a server max_seq_len below the window
 * is fine: its local layers then see every earlier key. */
static int read_gemma3(const gguf_file *f, pagoda_hparams *hp, char *err, size_t err_len)
{
    double d;
    hp->embd_scale = sqrtf((float)hp->dim);
    float qpas = hp->n_layers == 62 ? (float)hp->dim / (float)hp->n_heads : (float)hp->head_dim;
    hp->attn_scale = 1.0f / sqrtf(qpas);
    if (key_float(f, hp->arch, "final_logit_softcapping", &d) && d != 0.0) {
        ERR("%s: key %s.final_logit_softcapping = %g: logit soft-capping is not supported",
            f->path, hp->arch, d);
        return PAGODA_ERR_UNSUPPORTED;
    }
    int st = read_swa(f, hp, 6, "Gemma 3's local attention window", err, err_len);
    if (st) return st;
    hp->rope_theta_swa = key_float(f, hp->arch, "rope.freq_base_swa", &d) ? (float)d : 10000.0f;
    if (!(hp->rope_theta_swa > 0.0f)) {
        ERR("%s: key %s.rope.freq_base_swa = %g must be positive", f->path, hp->arch,
            (double)hp->rope_theta_swa);
        return PAGODA_ERR_INVALID;
    }
    return PAGODA_OK;
}

/* deepseek2's multi-head latent attention keys, as llama.cpp's converter
 * writes them (the MLA form: the KV cache is one "head" of the latent and
 * the RoPE key):
 *   attention.kv_lora_rank       the latent's width (512 in V2/V3, K2)
 *   attention.q_lora_rank        the query LoRA's width; absent or 0: attn_q
 *                                (V2-Lite)
 *   attention.key_length         kv_lora_rank + rope (the cached row)
 *   attention.value_length       kv_lora_rank
 *   attention.key_length_mla     a query head: qk_nope + rope (192)
 *   attention.value_length_mla   a value head: v_head_dim (128)
 *   attention.head_count_kv      1
 *   rope.dimension_count         qk_rope_head_dim (64)
 * Files from before the MLA form (llama.cpp before its 2025 rework: a
 * fused attn_kv_b, key_length = nope + rope) are refused by the tensor
 * binding, naming attn_kv_b. Scores are scaled by 1/sqrt(nope + rope). */
static int read_deepseek2(const gguf_file *f, pagoda_hparams *hp, char *err, size_t err_len)
{
    const char *a = hp->arch;
    int64_t v;
    hp->mla = true;
    if (!key_int(f, a, "attention.kv_lora_rank", &v)) {
        ERR("%s: missing key %s.attention.kv_lora_rank (the width of the latent KV of multi-head "
            "latent attention)", f->path, a);
        return PAGODA_ERR_INVALID;
    }
    if (v <= 0 || v > hp->dim) {
        ERR("%s: key %s.attention.kv_lora_rank = %lld must be 1..%d (the embedding_length: the "
            "latent compresses the hidden state)", f->path, a, (long long)v, hp->dim);
        return PAGODA_ERR_INVALID;
    }
    hp->kv_lora_rank = (int32_t)v;
    hp->q_lora_rank = 0;
    if (key_int(f, a, "attention.q_lora_rank", &v) && v != 0) {
        if (v < 0 || v > (1 << 20)) {
            ERR("%s: key %s.attention.q_lora_rank = %lld is out of range (0: none, ..1M)", f->path,
                a, (long long)v);
            return PAGODA_ERR_INVALID;
        }
        hp->q_lora_rank = (int32_t)v;
    }
    int64_t klm, vlm;
    if (!key_int(f, a, "attention.key_length_mla", &klm) ||
        !key_int(f, a, "attention.value_length_mla", &vlm)) {
        ERR("%s: missing key %s.attention.key_length_mla or value_length_mla (a query head's and "
            "a value head's widths): convert the model again with a current llama.cpp", f->path, a);
        return PAGODA_ERR_INVALID;
    }
    if (hp->rope_dims >= klm || klm > 4096) {
        ERR("%s: key %s.rope.dimension_count = %d must be below %s.attention.key_length_mla = "
            "%lld (a query head: the no-RoPE part, then the RoPE part)", f->path, a, hp->rope_dims,
            a, (long long)klm);
        return PAGODA_ERR_INVALID;
    }
    if (vlm <= 0 || vlm > 4096) {
        ERR("%s: key %s.attention.value_length_mla = %lld is out of range (1..4096)", f->path, a,
            (long long)vlm);
        return PAGODA_ERR_INVALID;
    }
    hp->qk_nope = (int32_t)(klm - hp->rope_dims);
    hp->v_head_dim = (int32_t)vlm;
    if (hp->head_dim != hp->kv_lora_rank + hp->rope_dims) {
        ERR("%s: key %s.attention.key_length = %d, expected kv_lora_rank + rope.dimension_count = "
            "%d (the cached latent row)", f->path, a, hp->head_dim, hp->kv_lora_rank + hp->rope_dims);
        return PAGODA_ERR_INVALID;
    }
    if (key_int(f, a, "attention.value_length", &v) && v != hp->kv_lora_rank) {
        ERR("%s: key %s.attention.value_length = %lld, expected kv_lora_rank = %d", f->path, a,
            (long long)v, hp->kv_lora_rank);
        return PAGODA_ERR_INVALID;
    }
    if (hp->n_kv_heads != 1) {
        ERR("%s: key %s.attention.head_count_kv = %d, expected 1 (the latent is one KV row every "
            "head reads)", f->path, a, hp->n_kv_heads);
        return PAGODA_ERR_INVALID;
    }
    hp->attn_scale = 1.0f / sqrtf((float)klm);
    return PAGODA_OK;
}

/* gpt-oss's keys and constants. What the file does not say comes from
 * its definition (transformers GptOssConfig / GptOssExperts, as llama.cpp
 * also assumes it):
 *   - sliding_window required (128 in the released models); local layers
 *     alternate with global ones, layer 0 local (sliding_window_pattern 2,
 *     HF layer_types), unless the key says otherwise;
 *   - the local layers use the same RoPE as the global ones (base and
 *     YaRN scaling, mscale included), unless rope.freq_base_swa gives them
 *     a base;
 *   - YaRN without truncation (HF GptOssConfig rope_parameters truncate
 *     false: the correction range's ends are not floored / ceiled, where
 *     llama.cpp's runtime always rounds them);
 *   - the experts' clamped SwiGLU with alpha 1.702 and limit 7 (HF
 *     swiglu_alpha / swiglu_limit; llama.cpp's converter writes no key for
 *     them and its runtime uses these constants).
 * Attention sinks, the Q/K/V/O, router and expert biases and top-k-then-
 * softmax routing are the row's. */
static int read_gptoss(const gguf_file *f, pagoda_hparams *hp, char *err, size_t err_len)
{
    int st = read_swa(f, hp, 2, "gpt-oss's sliding window of its local layers", err, err_len);
    if (st) return st;
    double d;
    hp->swa_rope_global = true;
    if (key_float(f, hp->arch, "rope.freq_base_swa", &d)) {
        if (!(d > 0.0)) {
            ERR("%s: key %s.rope.freq_base_swa = %g must be positive", f->path, hp->arch, d);
            return PAGODA_ERR_INVALID;
        }
        hp->rope_theta_swa = (float)d;
        hp->swa_rope_global = false;
    }
    hp->swiglu_alpha = 1.702f;
    hp->swiglu_limit = 7.0f;
    return PAGODA_OK;
}

/*
 * The families. Sources for each row's facts: the Hugging Face modeling
 * code of the family (what the weights mean) and llama.cpp's GGUF
 * converter (gguf-py's constants: the names the tensors and keys get).
 *   llama     Llama 2/3, Mistral, SmolLM; with expert tensors Mixtral
 *             (softmax over the top-k = softmax over all, renormalised)
 *   qwen2     QKV biases, NeoX RoPE
 *   qwen3     per-head Q/K RMSNorm
 *   gemma3    scaled embeddings, post-norms, GeGLU, sliding windows
 *   qwen3moe  qwen3's attention; softmax router, top-k renormalised
 *             (norm_topk_prob of Qwen3-30B-A3B), no shared expert
 *   qwen2moe  qwen2's attention; softmax router, top-k not renormalised,
 *             a shared expert with a sigmoid gate per token
 *   glm4moe   GLM-4.5/4.6/Air: QKV biases and Q/K norms when present,
 *             partial rotary (rope.dimension_count), the pre-FFN norm named
 *             post_attention_norm, sigmoid router with the selection bias,
 *             a shared expert, leading dense layers, an MTP block at the end
 *   deepseek2 DeepSeek V2/V2-Lite/V3/R1, Kimi K2: multi-head latent
 *             attention (read_deepseek2), adjacent-pair RoPE on the RoPE
 *             part only, softmax (V2) or sigmoid + selection bias (V3)
 *             router, group-limited top-k, shared experts, leading dense
 *             layers
 *   gpt-oss   attention sinks, QKV and output biases, alternating local
 *             (sliding window) and global layers, the pre-FFN norm named
 *             post_attention_norm, a router with a bias, top-k of its
 *             logits then softmax over the k, expert biases, the clamped
 *             SwiGLU (swiglu_oai)
 */
static const pagoda_arch g_arches[] = {
    {.name = "llama", .rope_neox = false, .qkv_bias = PAGODA_ARCH_MAYBE, .ffn_act = PAGODA_FFN_SILU, .ffn_norm = "ffn_norm",
     .moe = PAGODA_ARCH_MAYBE, .moe_gating = PAGODA_MOE_GATING_SOFTMAX, .moe_norm_topk = true},
    {.name = "qwen2", .rope_neox = true, .qkv_bias = PAGODA_ARCH_YES, .ffn_act = PAGODA_FFN_SILU,
     .ffn_norm = "ffn_norm"},
    {.name = "qwen3", .rope_neox = true, .qk_norm = PAGODA_ARCH_YES, .ffn_act = PAGODA_FFN_SILU,
     .ffn_norm = "ffn_norm"},
    {.name = "gemma3", .rope_neox = true, .qk_norm = PAGODA_ARCH_YES, .post_norms = true,
     .ffn_act = PAGODA_FFN_GELU_TANH, .ffn_norm = "ffn_norm", .read_keys = read_gemma3},
    {.name = "qwen3moe", .rope_neox = true, .qk_norm = PAGODA_ARCH_YES, .ffn_act = PAGODA_FFN_SILU,
     .ffn_norm = "ffn_norm", .moe = PAGODA_ARCH_YES, .moe_gating = PAGODA_MOE_GATING_SOFTMAX,
     .moe_norm_topk = true},
    {.name = "qwen2moe", .rope_neox = true, .qkv_bias = PAGODA_ARCH_YES, .ffn_act = PAGODA_FFN_SILU,
     .ffn_norm = "ffn_norm", .moe = PAGODA_ARCH_YES, .moe_gating = PAGODA_MOE_GATING_SOFTMAX,
     .moe_norm_topk = false, .shexp = PAGODA_ARCH_MAYBE, .shexp_gate = PAGODA_ARCH_MAYBE},
    {.name = "glm4moe", .rope_neox = true, .qkv_bias = PAGODA_ARCH_MAYBE,
     .qk_norm = PAGODA_ARCH_MAYBE, .ffn_act = PAGODA_FFN_SILU, .ffn_norm = "post_attention_norm",
     .moe = PAGODA_ARCH_YES, .moe_gating = PAGODA_MOE_GATING_SIGMOID, .moe_norm_topk = true,
     .shexp = PAGODA_ARCH_MAYBE, .exp_probs_b = PAGODA_ARCH_MAYBE, .nextn = true},
    {.name = "deepseek2", .rope_neox = false, .mla = true, .ffn_act = PAGODA_FFN_SILU,
     .ffn_norm = "ffn_norm", .moe = PAGODA_ARCH_MAYBE, .moe_gating = PAGODA_MOE_GATING_SOFTMAX,
     .moe_norm_topk = false, .shexp = PAGODA_ARCH_MAYBE, .exp_probs_b = PAGODA_ARCH_MAYBE,
     .nextn = true, .read_keys = read_deepseek2},
    {.name = "gpt-oss", .rope_neox = true, .qkv_bias = PAGODA_ARCH_YES,
     .attn_sinks = PAGODA_ARCH_YES, .attn_out_bias = PAGODA_ARCH_YES, .yarn_no_truncate = true,
     .ffn_act = PAGODA_FFN_SWIGLU_OAI, .ffn_norm = "post_attention_norm", .moe = PAGODA_ARCH_YES,
     .moe_gating = PAGODA_MOE_GATING_SOFTMAX_WEIGHT, .moe_norm_topk = false,
     .router_bias = PAGODA_ARCH_YES, .exp_bias = PAGODA_ARCH_YES, .read_keys = read_gptoss},
};

const pagoda_arch *pagoda_arch_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof g_arches / sizeof g_arches[0]; i++)
        if (!strcmp(g_arches[i].name, name)) return &g_arches[i];
    return NULL;
}

void pagoda_arch_list(char *buf, size_t len)
{
    size_t o = 0;
    if (len) buf[0] = '\0';
    for (size_t i = 0; i < sizeof g_arches / sizeof g_arches[0] && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "", g_arches[i].name);
}
