/*
 * model.c: reads a model's hyperparameters and binds its weight tensors by
 * name, checking every shape and type before anything runs. The weights
 * stay in the GGUF mapping; forward.c hands them to the backend.
 * Not for: computing anything.
 */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    int64_t v;
    double d;
    hp->embd_scale = sqrtf((float)hp->dim);
    hp->post_norms = true;
    hp->ffn_act = PAGODA_FFN_GELU_TANH;
    float qpas = hp->n_layers == 62 ? (float)hp->dim / (float)hp->n_heads : (float)hp->head_dim;
    hp->attn_scale = 1.0f / sqrtf(qpas);
    if (key_float(f, hp->arch, "final_logit_softcapping", &d) && d != 0.0) {
        ERR("%s: key %s.final_logit_softcapping = %g: logit soft-capping is not supported",
            f->path, hp->arch, d);
        return PAGODA_ERR_UNSUPPORTED;
    }
    if (!key_int(f, hp->arch, "attention.sliding_window", &v)) {
        ERR("%s: missing key %s.attention.sliding_window (Gemma 3's local attention window)",
            f->path, hp->arch);
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
        int64_t n = 6;
        if (pk && (!pagoda_gguf_get_int(f, key, &n) || n < 0 || n > hp->n_layers)) {
            ERR("%s: key %s must be a layer count 0..%d or a per-layer boolean array", f->path,
                key, hp->n_layers);
            return PAGODA_ERR_INVALID;
        }
        /* n = 0: every layer local; else the last of each n is global */
        for (int l = 0; l < hp->n_layers; l++) hp->is_swa[l] = n == 0 || l % n < n - 1;
    }
    for (int l = 0; l < hp->n_layers; l++) hp->n_swa_layers += hp->is_swa[l];
    hp->rope_theta_swa = key_float(f, hp->arch, "rope.freq_base_swa", &d) ? (float)d : 10000.0f;
    if (!(hp->rope_theta_swa > 0.0f)) {
        ERR("%s: key %s.rope.freq_base_swa = %g must be positive", f->path, hp->arch,
            (double)hp->rope_theta_swa);
        return PAGODA_ERR_INVALID;
    }
    return PAGODA_OK;
}

int pagoda_hparams_read(const gguf_file *f, pagoda_hparams *hp, char *err, size_t err_len)
{
    memset(hp, 0, sizeof *hp);
    char *arch = pagoda_gguf_get_str(f, "general.architecture");
    if (!arch) {
        ERR("%s: missing key general.architecture (expected llama, qwen2, qwen3 or gemma3)", f->path);
        return PAGODA_ERR_INVALID;
    }
    if (strcmp(arch, "llama") && strcmp(arch, "qwen2") && strcmp(arch, "qwen3") &&
        strcmp(arch, "gemma3")) {
        ERR("%s: architecture '%s' is not supported (supported: llama, qwen2, qwen3, gemma3)",
            f->path, arch);
        free(arch);
        return PAGODA_ERR_UNSUPPORTED;
    }
    snprintf(hp->arch, sizeof hp->arch, "%s", arch);
    free(arch);

    struct { const char *suffix; int32_t *dst; bool required; } ints[] = {
        {"block_count", &hp->n_layers, true},
        {"embedding_length", &hp->dim, true},
        {"attention.head_count", &hp->n_heads, true},
        {"feed_forward_length", &hp->ffn, true},
        {"context_length", &hp->n_ctx_train, true},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        int64_t v;
        if (!key_int(f, hp->arch, ints[i].suffix, &v)) {
            ERR("%s: missing key %s.%s", f->path, hp->arch, ints[i].suffix);
            return PAGODA_ERR_INVALID;
        }
        if (v <= 0 || v > (1 << 24)) {
            ERR("%s: key %s.%s = %lld is out of range (1..16M)", f->path, hp->arch,
                ints[i].suffix, (long long)v);
            return PAGODA_ERR_INVALID;
        }
        *ints[i].dst = (int32_t)v;
    }
    int64_t v;
    hp->n_kv_heads = key_int(f, hp->arch, "attention.head_count_kv", &v) ? (int32_t)v : hp->n_heads;
    if (hp->n_kv_heads <= 0 || hp->n_heads % hp->n_kv_heads) {
        ERR("%s: attention.head_count_kv = %d does not divide head_count = %d", f->path,
            hp->n_kv_heads, hp->n_heads);
        return PAGODA_ERR_INVALID;
    }
    hp->head_dim = key_int(f, hp->arch, "attention.key_length", &v) ? (int32_t)v
                                                                    : hp->dim / hp->n_heads;
    if (hp->head_dim <= 0 || hp->head_dim % 2 || hp->head_dim > 1024) {
        ERR("%s: head dimension %d is not supported (even, <= 1024)", f->path, hp->head_dim);
        return PAGODA_ERR_INVALID;
    }
    double d;
    hp->rms_eps = key_float(f, hp->arch, "attention.layer_norm_rms_epsilon", &d) ? (float)d : 1e-5f;
    /* every model seen uses 1e-6..1e-5: 0 or less divides by zero on a zero
     * row, and a large one flattens every activation to noise */
    if (!(hp->rms_eps > 0.0f && hp->rms_eps <= 0.1f)) {
        ERR("%s: key %s.attention.layer_norm_rms_epsilon = %g is not a small positive number "
            "(0 < eps <= 0.1; models use 1e-6 to 1e-5)", f->path, hp->arch, (double)hp->rms_eps);
        return PAGODA_ERR_INVALID;
    }
    hp->rope_theta = key_float(f, hp->arch, "rope.freq_base", &d) ? (float)d : 10000.0f;
    hp->rope_dims = key_int(f, hp->arch, "rope.dimension_count", &v) ? (int32_t)v : hp->head_dim;
    if (hp->rope_dims <= 0 || hp->rope_dims > hp->head_dim || hp->rope_dims % 2) {
        ERR("%s: rope.dimension_count = %d must be even and <= head dim %d", f->path,
            hp->rope_dims, hp->head_dim);
        return PAGODA_ERR_INVALID;
    }
    hp->rope_neox = strcmp(hp->arch, "llama") != 0;
    hp->qkv_bias = strcmp(hp->arch, "qwen2") == 0;
    hp->qk_norm = strcmp(hp->arch, "qwen3") == 0 || strcmp(hp->arch, "gemma3") == 0;
    hp->embd_scale = 1.0f;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->ffn_act = PAGODA_FFN_SILU;
    hp->rope_theta_swa = hp->rope_theta;
    if (!strcmp(hp->arch, "gemma3")) {
        int st = read_gemma3(f, hp, err, err_len);
        if (st) return st;
    }

    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", hp->arch);
    char *stype = pagoda_gguf_get_str(f, key);
    hp->rope_factor = 1.0f;
    if (key_float(f, hp->arch, "rope.scaling.factor", &d) && d > 0) hp->rope_factor = (float)d;
    if (stype && !strcmp(stype, "linear") && hp->rope_factor != 1.0f)
        hp->rope_scaling = PAGODA_ROPE_SCALING_LINEAR;
    else if (stype && strcmp(stype, "none") && strcmp(stype, "linear")) {
        ERR("%s: rope scaling '%s' is not supported (none, linear, and llama3 factors via "
            "rope_freqs.weight are)", f->path, stype);
        free(stype);
        return PAGODA_ERR_UNSUPPORTED;
    }
    free(stype);
    hp->rope_orig_ctx = key_int(f, hp->arch, "rope.scaling.original_context_length", &v)
                            ? (int32_t)v : hp->n_ctx_train;

    /* Special-token ids inside the vocabulary; -1 (or 0xFFFFFFFF as u32)
     * means none. The tokenizer would drop a wrong one silently and the
     * engine then never stops on EOS or adds a BOS the model never saw. */
    static const char *const id_keys[] = {
        "bos_token_id", "eos_token_id", "seperator_token_id", "padding_token_id",
        "unknown_token_id", "eot_token_id", "eom_token_id",
    };
    const gguf_kv *tk = pagoda_gguf_find(f, "tokenizer.ggml.tokens");
    if (tk && tk->val.type == GGUF_T_ARRAY) {
        int64_t n_vocab = (int64_t)tk->val.v.arr.count;
        for (size_t i = 0; i < sizeof id_keys / sizeof id_keys[0]; i++) {
            snprintf(key, sizeof key, "tokenizer.ggml.%s", id_keys[i]);
            if (!pagoda_gguf_get_int(f, key, &v) || v == -1 || v == 0xFFFFFFFFll) continue;
            if (v < 0 || v >= n_vocab) {
                ERR("%s: key %s = %lld is outside the vocabulary (%lld tokens)", f->path, key,
                    (long long)v, (long long)n_vocab);
                return PAGODA_ERR_INVALID;
            }
        }
    }
    return PAGODA_OK;
}

/* Find a tensor and check its type is one we can compute with and its
 * shape is [ne0, ne1] (ne1 = 0: a vector of ne0). */
static int bind(const pagoda_model *m, const char *name, int64_t ne0, int64_t ne1,
                bool required, bool f32_only, const gguf_tensor **out, char *err, size_t err_len)
{
    const gguf_tensor *t = pagoda_gguf_tensor(m->gguf, name);
    *out = t;
    if (!t) {
        if (!required) return PAGODA_OK;
        ERR("%s: tensor %s is missing (architecture %s needs it)", m->gguf->path, name,
            m->hp.arch);
        return PAGODA_ERR_INVALID;
    }
    int64_t want_dims = ne1 ? 2 : 1;
    int64_t got1 = t->n_dims >= 2 ? t->ne[1] : 0;
    bool extra = false;
    for (uint32_t i = 2; i < t->n_dims; i++) extra |= t->ne[i] != 1;
    if (t->ne[0] != ne0 || got1 != ne1 || extra) {
        ERR("%s: tensor %s has shape [%lld, %lld] (%u dims), expected [%lld, %lld] (%lld dims)",
            m->gguf->path, name, (long long)t->ne[0], (long long)got1, t->n_dims,
            (long long)ne0, (long long)ne1, (long long)want_dims);
        return PAGODA_ERR_INVALID;
    }
    if (f32_only && t->type != PAGODA_DTYPE_F32) {
        ERR("%s: tensor %s has type %s, expected F32 (norms and biases)", m->gguf->path, name,
            pagoda_dtype_name(t->type));
        return PAGODA_ERR_UNSUPPORTED;
    }
    if (!pagoda_dtype_block(t->type, NULL, NULL)) {
        ERR("%s: tensor %s has unsupported type %d", m->gguf->path, name, t->type);
        return PAGODA_ERR_UNSUPPORTED;
    }
    return PAGODA_OK;
}

pagoda_model *pagoda_model_open(const char *path, char *err, size_t err_len)
{
    pagoda_model *m = calloc(1, sizeof *m);
    if (!m) { ERR("out of memory"); return NULL; }
    m->gguf = pagoda_gguf_open(path, err, err_len);
    if (!m->gguf) goto fail;
    if (pagoda_hparams_read(m->gguf, &m->hp, err, err_len)) goto fail;
    pagoda_hparams *hp = &m->hp;

    const gguf_tensor *emb = pagoda_gguf_tensor(m->gguf, "token_embd.weight");
    if (!emb || emb->n_dims < 2) {
        ERR("%s: tensor token_embd.weight is missing or not 2-D", path);
        goto fail;
    }
    hp->n_vocab = (int32_t)emb->ne[1];
    int64_t q_dim = (int64_t)hp->n_heads * hp->head_dim;
    int64_t kv_dim = (int64_t)hp->n_kv_heads * hp->head_dim;

    if (bind(m, "token_embd.weight", hp->dim, hp->n_vocab, true, false, &m->tok_embd, err, err_len) ||
        bind(m, "output_norm.weight", hp->dim, 0, true, true, &m->output_norm, err, err_len) ||
        bind(m, "output.weight", hp->dim, hp->n_vocab, false, false, &m->output, err, err_len))
        goto fail;
    if (!m->output) {
        m->output = m->tok_embd;
        hp->tied_output = true;
    }
    m->rope_freqs = pagoda_gguf_tensor(m->gguf, "rope_freqs.weight");
    if (m->rope_freqs) {
        if (bind(m, "rope_freqs.weight", hp->rope_dims / 2, 0, true, true, &m->rope_freqs, err,
                 err_len))
            goto fail;
        hp->rope_scaling = PAGODA_ROPE_SCALING_LLAMA3;
    }

    m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers);
    if (!m->layers) { ERR("out of memory"); goto fail; }
    for (int l = 0; l < hp->n_layers; l++) {
        pagoda_layer_tensors *L = &m->layers[l];
        char name[96];
#define B(field, suffix, ne0, ne1, req, f32)                                              \
    snprintf(name, sizeof name, "blk.%d.%s", l, suffix);                                   \
    if (bind(m, name, ne0, ne1, req, f32, &L->field, err, err_len)) goto fail;
        B(attn_norm, "attn_norm.weight", hp->dim, 0, true, true)
        B(wq, "attn_q.weight", hp->dim, q_dim, true, false)
        B(wk, "attn_k.weight", hp->dim, kv_dim, true, false)
        B(wv, "attn_v.weight", hp->dim, kv_dim, true, false)
        B(wo, "attn_output.weight", q_dim, hp->dim, true, false)
        B(bq, "attn_q.bias", q_dim, 0, hp->qkv_bias, true)
        B(bk, "attn_k.bias", kv_dim, 0, hp->qkv_bias, true)
        B(bv, "attn_v.bias", kv_dim, 0, hp->qkv_bias, true)
        B(q_norm, "attn_q_norm.weight", hp->head_dim, 0, hp->qk_norm, true)
        B(k_norm, "attn_k_norm.weight", hp->head_dim, 0, hp->qk_norm, true)
        B(ffn_norm, "ffn_norm.weight", hp->dim, 0, true, true)
        B(w_gate, "ffn_gate.weight", hp->dim, hp->ffn, true, false)
        B(w_up, "ffn_up.weight", hp->dim, hp->ffn, true, false)
        B(w_down, "ffn_down.weight", hp->ffn, hp->dim, true, false)
        B(post_attn_norm, "post_attention_norm.weight", hp->dim, 0, hp->post_norms, true)
        B(post_ffn_norm, "post_ffw_norm.weight", hp->dim, 0, hp->post_norms, true)
#undef B
    }

    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) {
        const gguf_tensor *t = &m->gguf->tensors[i];
        int64_t n = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) n *= t->ne[d];
        m->n_params += n;
    }

    m->tok = pagoda_tokenizer_load(m->gguf, err, err_len);
    if (!m->tok) goto fail;
    if (pagoda_tokenizer_n_vocab(m->tok) > hp->n_vocab) {
        ERR("%s: the tokenizer has %d tokens but token_embd.weight only %d rows", path,
            pagoda_tokenizer_n_vocab(m->tok), hp->n_vocab);
        goto fail;
    }
    m->name = pagoda_gguf_get_str(m->gguf, "general.name");
    if (!m->name) {
        const char *base = strrchr(path, '/');
        m->name = strdup(base ? base + 1 : path);
    }
    m->chat_template = pagoda_gguf_get_str(m->gguf, "tokenizer.chat_template");
    return m;
fail:
    pagoda_model_free(m);
    return NULL;
}

void pagoda_model_free(pagoda_model *m)
{
    if (!m) return;
    if (m->tok) pagoda_tokenizer_free(m->tok);
    if (m->gguf) pagoda_gguf_close(m->gguf);
    free(m->layers);
    free(m->name);
    free(m->chat_template);
    free(m);
}

void pagoda_model_rope_inv_freq_swa(const pagoda_model *m, float *inv_freq)
{
    const pagoda_hparams *hp = &m->hp;
    for (int i = 0; i < hp->rope_dims / 2; i++)
        inv_freq[i] = (float)pow((double)hp->rope_theta_swa, -2.0 * i / hp->rope_dims);
}

void pagoda_model_rope_inv_freq(const pagoda_model *m, float *inv_freq)
{
    const pagoda_hparams *hp = &m->hp;
    int half = hp->rope_dims / 2;
    const float *factors = m->rope_freqs ? (const float *)m->rope_freqs->data : NULL;
    for (int i = 0; i < half; i++) {
        double f = pow((double)hp->rope_theta, -2.0 * i / hp->rope_dims);
        if (hp->rope_scaling == PAGODA_ROPE_SCALING_LINEAR) f /= hp->rope_factor;
        if (factors) f /= factors[i];
        inv_freq[i] = (float)f;
    }
}
