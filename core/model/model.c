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

#include "arch.h"
#include "moe_route.h"
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

/* The mixture-of-experts keys of a family that may route (arch.h says
 * which), as llama.cpp's converter writes them; what a family leaves out
 * comes from its row. Checked against the tensors when they are bound. */
/* YaRN's keys (model.h's rope_yarn_* fields), checked: a factor below 1,
 * an original context of 0 or a correction range that runs backwards would
 * give frequencies no trained model had. */
static int read_yarn_keys(const gguf_file *f, pagoda_hparams *hp, char *err, size_t err_len)
{
    const char *a = hp->arch;
    double d;
    if (hp->rope_factor < 1.0f) {
        ERR("%s: %s.rope.scaling.factor is %g; YaRN needs a factor >= 1", f->path, a,
            (double)hp->rope_factor);
        return PAGODA_ERR_INVALID;
    }
    if (hp->rope_orig_ctx <= 0) {
        ERR("%s: %s.rope.scaling.original_context_length is %d; YaRN needs the trained "
            "context (> 0)", f->path, a, hp->rope_orig_ctx);
        return PAGODA_ERR_INVALID;
    }
    if (key_float(f, a, "rope.scaling.yarn_beta_fast", &d)) hp->rope_yarn_beta_fast = (float)d;
    if (key_float(f, a, "rope.scaling.yarn_beta_slow", &d)) hp->rope_yarn_beta_slow = (float)d;
    if (key_float(f, a, "rope.scaling.yarn_ext_factor", &d)) hp->rope_yarn_ext_factor = (float)d;
    if (key_float(f, a, "rope.scaling.yarn_log_multiplier", &d)) hp->rope_yarn_log_mul = (float)d;
    if (!(hp->rope_yarn_beta_fast > 0 && hp->rope_yarn_beta_slow > 0 &&
          hp->rope_yarn_beta_fast >= hp->rope_yarn_beta_slow)) {
        ERR("%s: %s.rope.scaling.yarn_beta_fast %g / yarn_beta_slow %g: YaRN needs "
            "beta_fast >= beta_slow > 0", f->path, a, (double)hp->rope_yarn_beta_fast,
            (double)hp->rope_yarn_beta_slow);
        return PAGODA_ERR_INVALID;
    }
    if (!(hp->rope_yarn_ext_factor >= 0 && hp->rope_yarn_ext_factor <= 1)) {
        ERR("%s: %s.rope.scaling.yarn_ext_factor is %g; it must lie in [0, 1]", f->path, a,
            (double)hp->rope_yarn_ext_factor);
        return PAGODA_ERR_INVALID;
    }
    /* The rotated values' scale: the file's attention factor, else the
     * paper's mscale; DeepSeek's log multiplier (mscale_all_dim) divides it
     * out as transformers does (mscale / mscale_all_dim, mscale = 1). */
    if (key_float(f, a, "rope.scaling.yarn_attn_factor", &d) && d > 0)
        hp->rope_mscale = (float)d;
    else if (hp->rope_yarn_log_mul != 0.0f)
        hp->rope_mscale = pagoda_rope_yarn_get_mscale(hp->rope_factor, 1.0f) /
                          pagoda_rope_yarn_get_mscale(hp->rope_factor, hp->rope_yarn_log_mul * 10.0f);
    else
        hp->rope_mscale = pagoda_rope_yarn_get_mscale(hp->rope_factor, 1.0f);
    if (key_float(f, a, "rope.scaling.attn_factor", &d) && d > 0) hp->rope_mscale *= (float)d;
    return 0;
}

static int read_moe_keys(const gguf_file *f, const pagoda_arch *A, pagoda_hparams *hp, char *err,
                         size_t err_len)
{
    const char *a = hp->arch;
    int64_t v;
    double d;
    if (A->nextn && key_int(f, a, "nextn_predict_layers", &v) && v != 0) {
        if (v < 0 || v >= hp->n_layers) {
            ERR("%s: key %s.nextn_predict_layers = %lld must be 0..%d (below block_count)", f->path,
                a, (long long)v, hp->n_layers - 1);
            return PAGODA_ERR_INVALID;
        }
        /* the MTP blocks are the last ones; their tensors are loaded and ignored */
        hp->n_nextn = (int32_t)v;
        hp->n_layers -= (int32_t)v;
    }
    if (A->moe == PAGODA_ARCH_NO) return PAGODA_OK;
    if (!key_int(f, a, "expert_count", &v)) {
        if (A->moe == PAGODA_ARCH_MAYBE && !pagoda_gguf_tensor(f, "blk.0.ffn_gate_inp.weight"))
            return PAGODA_OK;   /* a dense model of a family that may route */
        ERR("%s: missing key %s.expert_count (the number of experts of this mixture-of-experts "
            "model)", f->path, a);
        return PAGODA_ERR_INVALID;
    }
    if (v <= 0 || v > 65536) {
        ERR("%s: key %s.expert_count = %lld is out of range (1..65536)", f->path, a, (long long)v);
        return PAGODA_ERR_INVALID;
    }
    hp->n_experts = (int32_t)v;
    if (!key_int(f, a, "expert_used_count", &v)) {
        ERR("%s: missing key %s.expert_used_count (how many experts each token uses)", f->path, a);
        return PAGODA_ERR_INVALID;
    }
    if (v <= 0 || v > hp->n_experts) {
        ERR("%s: key %s.expert_used_count = %lld must be 1..%d (%s.expert_count)", f->path, a,
            (long long)v, hp->n_experts, a);
        return PAGODA_ERR_INVALID;
    }
    hp->n_experts_used = (int32_t)v;
    /* group-limited routing (DeepSeek's n_group / topk_group) */
    if (key_int(f, a, "expert_group_count", &v) && v > 1) {
        if (v > PAGODA_MOE_MAX_GROUPS) {
            ERR("%s: key %s.expert_group_count = %lld: at most %d expert groups are supported",
                f->path, a, (long long)v, PAGODA_MOE_MAX_GROUPS);
            return PAGODA_ERR_UNSUPPORTED;
        }
        if (v > hp->n_experts || hp->n_experts % v) {
            ERR("%s: key %s.expert_group_count = %lld does not divide %s.expert_count = %d (the "
                "experts form groups of equal size)", f->path, a, (long long)v, a, hp->n_experts);
            return PAGODA_ERR_INVALID;
        }
        hp->n_expert_groups = (int32_t)v;
        int64_t used = v;
        if (key_int(f, a, "expert_group_used_count", &used) && (used <= 0 || used > v)) {
            ERR("%s: key %s.expert_group_used_count = %lld must be 1..%lld (%s.expert_group_count)",
                f->path, a, (long long)used, (long long)v, a);
            return PAGODA_ERR_INVALID;
        }
        if (used * (hp->n_experts / v) < hp->n_experts_used) {
            ERR("%s: keys %s.expert_group_used_count = %lld groups of %lld experts hold fewer than "
                "%s.expert_used_count = %d", f->path, a, (long long)used,
                (long long)(hp->n_experts / v), a, hp->n_experts_used);
            return PAGODA_ERR_INVALID;
        }
        hp->n_group_used = (int32_t)used;
    }
    hp->ffn_exp = hp->ffn;
    if (key_int(f, a, "expert_feed_forward_length", &v)) {
        if (v <= 0 || v > (1 << 24)) {
            ERR("%s: key %s.expert_feed_forward_length = %lld is out of range (1..16M)", f->path, a,
                (long long)v);
            return PAGODA_ERR_INVALID;
        }
        hp->ffn_exp = (int32_t)v;
    }
    if (key_int(f, a, "leading_dense_block_count", &v)) {
        if (v < 0 || v > hp->n_layers) {
            ERR("%s: key %s.leading_dense_block_count = %lld must be 0..%d (block_count)", f->path,
                a, (long long)v, hp->n_layers);
            return PAGODA_ERR_INVALID;
        }
        hp->n_dense_lead = (int32_t)v;
    }
    hp->moe_gating = A->moe_gating;
    if (key_int(f, a, "expert_gating_func", &v)) {
        if (v != PAGODA_MOE_GATING_SOFTMAX && v != PAGODA_MOE_GATING_SIGMOID &&
            v != PAGODA_MOE_GATING_SOFTMAX_WEIGHT) {
            ERR("%s: key %s.expert_gating_func = %lld is not a gating function pagoda knows (1 "
                "softmax, 2 sigmoid, 3 softmax over the selected)", f->path, a, (long long)v);
            return PAGODA_ERR_UNSUPPORTED;
        }
        hp->moe_gating = (int32_t)v;
    }
    char key[128];
    snprintf(key, sizeof key, "%s.expert_weights_norm", a);
    if (!pagoda_gguf_get_bool(f, key, &hp->moe_norm_topk)) hp->moe_norm_topk = A->moe_norm_topk;
    hp->moe_scale = 1.0f;
    if (key_float(f, a, "expert_weights_scale", &d)) {
        if (!(d > 0.0 && d <= 1000.0)) {
            ERR("%s: key %s.expert_weights_scale = %g must be in (0, 1000]", f->path, a, d);
            return PAGODA_ERR_INVALID;
        }
        hp->moe_scale = (float)d;
    }
    if (A->shexp == PAGODA_ARCH_NO) return PAGODA_OK;
    int64_t n_sh = -1;
    char tn[64];
    snprintf(tn, sizeof tn, "blk.%d.ffn_gate_shexp.weight", hp->n_dense_lead);
    const gguf_tensor *t = pagoda_gguf_tensor(f, tn);
    if (key_int(f, a, "expert_shared_feed_forward_length", &v)) n_sh = v;
    else if (key_int(f, a, "expert_shared_count", &v)) n_sh = v * hp->ffn_exp;
    else if (t && t->n_dims >= 2) n_sh = t->ne[1];
    else if (A->shexp == PAGODA_ARCH_YES) {
        ERR("%s: missing key %s.expert_shared_feed_forward_length (the shared expert's width)",
            f->path, a);
        return PAGODA_ERR_INVALID;
    }
    if (n_sh < -1 || n_sh > (1 << 24)) {
        ERR("%s: the shared experts' width %lld (%s.expert_shared_*) is out of range (0..16M)",
            f->path, (long long)n_sh, a);
        return PAGODA_ERR_INVALID;
    }
    hp->ffn_shexp = n_sh > 0 ? (int32_t)n_sh : 0;
    return PAGODA_OK;
}

int pagoda_hparams_read(const gguf_file *f, pagoda_hparams *hp, char *err, size_t err_len)
{
    memset(hp, 0, sizeof *hp);
    char names[160];
    pagoda_arch_list(names, sizeof names);
    char *arch = pagoda_gguf_get_str(f, "general.architecture");
    if (!arch) {
        ERR("%s: missing key general.architecture (expected one of %s)", f->path, names);
        return PAGODA_ERR_INVALID;
    }
    const pagoda_arch *A = pagoda_arch_find(arch);
    if (!A) {
        ERR("%s: architecture '%s' is not supported (supported: %s)", f->path, arch, names);
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
    hp->rope_neox = A->rope_neox;
    hp->qkv_bias = A->qkv_bias == PAGODA_ARCH_YES ||
                   (A->qkv_bias == PAGODA_ARCH_MAYBE && pagoda_gguf_tensor(f, "blk.0.attn_q.bias"));
    hp->qk_norm = A->qk_norm == PAGODA_ARCH_YES ||
                  (A->qk_norm == PAGODA_ARCH_MAYBE && pagoda_gguf_tensor(f, "blk.0.attn_q_norm.weight"));
    hp->post_norms = A->post_norms;
    hp->embd_scale = 1.0f;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->ffn_act = A->ffn_act;
    hp->rope_theta_swa = hp->rope_theta;
    if (A->read_keys) {
        int st = A->read_keys(f, hp, err, err_len);
        if (st) return st;
    }
    int st = read_moe_keys(f, A, hp, err, err_len);
    if (st) return st;
    /* gpt-oss's groups (MAYBE: as blk.0, or the first routed layer, has them) */
    char probe[96];
    hp->attn_sinks = A->attn_sinks == PAGODA_ARCH_YES ||
                     (A->attn_sinks == PAGODA_ARCH_MAYBE && pagoda_gguf_tensor(f, "blk.0.attn_sinks.weight"));
    hp->attn_out_bias = A->attn_out_bias == PAGODA_ARCH_YES ||
                        (A->attn_out_bias == PAGODA_ARCH_MAYBE && pagoda_gguf_tensor(f, "blk.0.attn_output.bias"));
    snprintf(probe, sizeof probe, "blk.%d.ffn_gate_inp.bias", hp->n_dense_lead);
    hp->router_bias = hp->n_experts > 0 &&
                      (A->router_bias == PAGODA_ARCH_YES ||
                       (A->router_bias == PAGODA_ARCH_MAYBE && pagoda_gguf_tensor(f, probe)));
    snprintf(probe, sizeof probe, "blk.%d.ffn_gate_exps.bias", hp->n_dense_lead);
    hp->exp_bias = hp->n_experts > 0 &&
                   (A->exp_bias == PAGODA_ARCH_YES ||
                    (A->exp_bias == PAGODA_ARCH_MAYBE && pagoda_gguf_tensor(f, probe)));

    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", hp->arch);
    char *stype = pagoda_gguf_get_str(f, key);
    hp->rope_factor = 1.0f;
    if (key_float(f, hp->arch, "rope.scaling.factor", &d) && d > 0) hp->rope_factor = (float)d;
    hp->rope_mscale = 1.0f;
    hp->rope_yarn_beta_fast = 32.0f;
    hp->rope_yarn_beta_slow = 1.0f;
    hp->rope_yarn_ext_factor = 1.0f;
    hp->rope_yarn_truncate = !A->yarn_no_truncate;
    if (stype && !strcmp(stype, "linear") && hp->rope_factor != 1.0f)
        hp->rope_scaling = PAGODA_ROPE_SCALING_LINEAR;
    else if (stype && !strcmp(stype, "yarn"))
        hp->rope_scaling = PAGODA_ROPE_SCALING_YARN;
    else if (stype && strcmp(stype, "none") && strcmp(stype, "linear")) {
        ERR("%s: rope scaling '%s' is not supported (none, linear, yarn, and llama3 factors "
            "via rope_freqs.weight are)", f->path, stype);
        free(stype);
        return PAGODA_ERR_UNSUPPORTED;
    }
    free(stype);
    hp->rope_orig_ctx = key_int(f, hp->arch, "rope.scaling.original_context_length", &v)
                            ? (int32_t)v : hp->n_ctx_train;
    if (hp->rope_scaling == PAGODA_ROPE_SCALING_YARN) {
        st = read_yarn_keys(f, hp, err, err_len);
        if (st) return st;
        /* DeepSeek (MLA): the softmax scale times mscale(factor,
         * mscale_all_dim)^2, mscale_all_dim = 10 x yarn_log_multiplier (as
         * transformers' yarn_apply_mscale and llama.cpp's kq_scale) */
        if (hp->mla && hp->rope_yarn_log_mul != 0.0f) {
            float ms = pagoda_rope_yarn_get_mscale(hp->rope_factor, hp->rope_yarn_log_mul * 10.0f);
            hp->attn_scale *= ms * ms;
        }
    }

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
 * shape is [ne0, ne1] (ne1 = 0: a vector of ne0; a [ne0, 1] matrix is
 * taken for one too). Every tensor bound is marked in used[]. */
static int bind(const pagoda_model *m, uint8_t *used, const char *name, int64_t ne0, int64_t ne1,
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
    used[t - m->gguf->tensors] = 1;
    int64_t want_dims = ne1 ? 2 : 1;
    int64_t got1 = t->n_dims >= 2 ? t->ne[1] : 0;
    bool extra = false;
    for (uint32_t i = 2; i < t->n_dims; i++) extra |= t->ne[i] != 1;
    if (!ne1 && got1 == 1) got1 = 0;
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

/* A 3-D tensor of layer l (required): the experts [ne0, ne1, n_experts]
 * stacked, or with `heads` MLA's per-head attn_k_b / attn_v_b [ne0, ne1,
 * n_heads]. */
static int bind_stacked(const pagoda_model *m, uint8_t *used, int l, const char *suffix,
                        int64_t ne0, int64_t ne1, bool heads, const gguf_tensor **out, char *err,
                        size_t err_len)
{
    const pagoda_hparams *hp = &m->hp;
    const int64_t ne2 = heads ? hp->n_heads : hp->n_experts;
    char name[96], old[96];
    snprintf(name, sizeof name, "blk.%d.%s.weight", l, suffix);
    const gguf_tensor *t = pagoda_gguf_tensor(m->gguf, name);
    *out = t;
    if (!t && heads) {
        /* llama.cpp's conversions before its MLA rework: one fused attn_kv_b */
        snprintf(old, sizeof old, "blk.%d.attn_kv_b.weight", l);
        if (pagoda_gguf_tensor(m->gguf, old))
            ERR("%s: tensor %s is missing: this file has %s (the fused key/value decompression "
                "of llama.cpp's conversions before its MLA rework, which pagoda does not run); "
                "convert it again with a current llama.cpp", m->gguf->path, name, old);
        else
            ERR("%s: tensor %s is missing (architecture %s needs it)", m->gguf->path, name,
                hp->arch);
        return PAGODA_ERR_INVALID;
    }
    if (!t) {
        /* before llama.cpp's 3-D expert tensors, each expert was a tensor
         * of its own (blk.0.ffn_gate.0.weight) */
        snprintf(old, sizeof old, "blk.%d.%.*s.0.weight", l, (int)(strlen(suffix) - 5), suffix);
        if (pagoda_gguf_tensor(m->gguf, old))
            ERR("%s: tensor %s is missing: this file stores each expert as a tensor of its own "
                "(%s, the layout before llama.cpp's 3-D expert tensors); convert it again with a "
                "current llama.cpp", m->gguf->path, name, old);
        else
            ERR("%s: tensor %s is missing (architecture %s routes layer %d through %d experts)",
                m->gguf->path, name, hp->arch, l, hp->n_experts);
        return PAGODA_ERR_INVALID;
    }
    used[t - m->gguf->tensors] = 1;
    if (t->n_dims != 3 || t->ne[0] != ne0 || t->ne[1] != ne1 || (heads && t->ne[2] != ne2)) {
        ERR("%s: tensor %s has shape [%lld, %lld, %lld] (%u dims), expected [%lld, %lld, %lld] "
            "(%s)", m->gguf->path, name, (long long)t->ne[0],
            (long long)(t->n_dims >= 2 ? t->ne[1] : 1), (long long)(t->n_dims >= 3 ? t->ne[2] : 1),
            t->n_dims, (long long)ne0, (long long)ne1, (long long)ne2,
            heads ? "a matrix per head" : "the experts' matrices stacked");
        return PAGODA_ERR_INVALID;
    }
    if (t->ne[2] != ne2) {
        ERR("%s: tensor %s holds %lld experts but key %s.expert_count = %d", m->gguf->path, name,
            (long long)t->ne[2], hp->arch, hp->n_experts);
        return PAGODA_ERR_INVALID;
    }
    if (!pagoda_dtype_block(t->type, NULL, NULL)) {
        ERR("%s: tensor %s has unsupported type %d", m->gguf->path, name, t->type);
        return PAGODA_ERR_UNSUPPORTED;
    }
    return PAGODA_OK;
}

/* Should a file of family A have the group `has` in a layer? YES, NO, or
 * (MAYBE) whether the probe tensor is in the file. */
static bool wants(const pagoda_model *m, uint8_t has, const char *probe)
{
    return has == PAGODA_ARCH_YES || (has == PAGODA_ARCH_MAYBE && pagoda_gguf_tensor(m->gguf, probe));
}

/* Tensors a file may hold that no family runs: RoPE's precomputed table
 * of old llama conversions. Anything else not bound is refused, so a file
 * whose block_count was lowered below its blocks (or that holds tensors
 * of another family) is not served with parts of it silently dropped. */
static bool ignorable(const pagoda_model *m, const gguf_tensor *t)
{
    const char *n = t->name.ptr;
    size_t len = t->name.len;
    static const char rot[] = ".attn_rot_embd.weight";
    if (len > sizeof rot - 1 && !memcmp(n + len - (sizeof rot - 1), rot, sizeof rot - 1)) return true;
    /* the MTP blocks after the layers that run (glm4moe's nextn) */
    if (m->hp.n_nextn > 0 && len > 4 && !memcmp(n, "blk.", 4)) {
        long b = 0;
        size_t i = 4;
        for (; i < len && n[i] >= '0' && n[i] <= '9' && b < 1000000; i++) b = b * 10 + (n[i] - '0');
        if (i > 4 && i < len && n[i] == '.' && b >= m->hp.n_layers &&
            b < (long)m->hp.n_layers + m->hp.n_nextn)
            return true;
    }
    return false;
}

/* Multi-head latent attention's tensors of layer l (hp.mla). */
static int bind_mla(pagoda_model *m, uint8_t *used, int l, char *err, size_t err_len)
{
    const pagoda_hparams *hp = &m->hp;
    pagoda_layer_tensors *L = &m->layers[l];
    int64_t q_dim = (int64_t)hp->n_heads * (hp->qk_nope + hp->rope_dims);
    char name[96];
#define B(field, suffix, ne0, ne1, req, f32)                                              \
    snprintf(name, sizeof name, "blk.%d.%s", l, suffix);                                   \
    if (bind(m, used, name, ne0, ne1, req, f32, &L->field, err, err_len)) return PAGODA_ERR_INVALID;
    if (hp->q_lora_rank > 0) {
        B(wq_a, "attn_q_a.weight", hp->dim, hp->q_lora_rank, true, false)
        B(q_a_norm, "attn_q_a_norm.weight", hp->q_lora_rank, 0, true, true)
        B(wq_b, "attn_q_b.weight", hp->q_lora_rank, q_dim, true, false)
    } else {
        snprintf(name, sizeof name, "blk.%d.attn_q_a.weight", l);
        if (pagoda_gguf_tensor(m->gguf, name)) {
            ERR("%s: tensor %s is present but key %s.attention.q_lora_rank is missing or 0",
                m->gguf->path, name, hp->arch);
            return PAGODA_ERR_INVALID;
        }
        B(wq, "attn_q.weight", hp->dim, q_dim, true, false)
    }
    B(wkv_a, "attn_kv_a_mqa.weight", hp->dim, hp->kv_lora_rank + hp->rope_dims, true, false)
    B(kv_a_norm, "attn_kv_a_norm.weight", hp->kv_lora_rank, 0, true, true)
    B(wo, "attn_output.weight", (int64_t)hp->n_heads * hp->v_head_dim, hp->dim, true, false)
#undef B
    if (bind_stacked(m, used, l, "attn_k_b", hp->qk_nope, hp->kv_lora_rank, true, &L->wk_b, err,
                     err_len) ||
        bind_stacked(m, used, l, "attn_v_b", hp->kv_lora_rank, hp->v_head_dim, true, &L->wv_b, err,
                     err_len))
        return PAGODA_ERR_INVALID;
    return PAGODA_OK;
}

/* Bind one layer's tensors as the family's row says. */
static int bind_layer(pagoda_model *m, const pagoda_arch *A, uint8_t *used, int l, char *err,
                      size_t err_len)
{
    const pagoda_hparams *hp = &m->hp;
    pagoda_layer_tensors *L = &m->layers[l];
    int64_t q_dim = (int64_t)hp->n_heads * hp->head_dim;
    int64_t kv_dim = (int64_t)hp->n_kv_heads * hp->head_dim;
    bool moe = pagoda_hparams_is_moe_layer(hp, l);
    char name[96], probe[96];
#define B(field, suffix, ne0, ne1, req, f32)                                              \
    snprintf(name, sizeof name, "blk.%d.%s", l, suffix);                                   \
    if (bind(m, used, name, ne0, ne1, req, f32, &L->field, err, err_len)) return PAGODA_ERR_INVALID;
    B(attn_norm, "attn_norm.weight", hp->dim, 0, true, true)
    if (hp->mla) {
        if (bind_mla(m, used, l, err, err_len)) return PAGODA_ERR_INVALID;
    } else {
    B(wq, "attn_q.weight", hp->dim, q_dim, true, false)
    B(wk, "attn_k.weight", hp->dim, kv_dim, true, false)
    B(wv, "attn_v.weight", hp->dim, kv_dim, true, false)
    B(wo, "attn_output.weight", q_dim, hp->dim, true, false)
    if (hp->qkv_bias) {
        B(bq, "attn_q.bias", q_dim, 0, true, true)
        B(bk, "attn_k.bias", kv_dim, 0, true, true)
        B(bv, "attn_v.bias", kv_dim, 0, true, true)
    }
    if (hp->qk_norm) {
        B(q_norm, "attn_q_norm.weight", hp->head_dim, 0, true, true)
        B(k_norm, "attn_k_norm.weight", hp->head_dim, 0, true, true)
    }
    }
    char norm[64];
    snprintf(norm, sizeof norm, "%s.weight", A->ffn_norm);
    B(ffn_norm, norm, hp->dim, 0, true, true)
    if (hp->post_norms) {
        B(post_attn_norm, "post_attention_norm.weight", hp->dim, 0, true, true)
        B(post_ffn_norm, "post_ffw_norm.weight", hp->dim, 0, true, true)
    }
    /* a sink logit per query head: a wrong length is refused here, naming
     * the tensor, its shape and head_count */
    if (hp->attn_sinks) {
        B(attn_sinks, "attn_sinks.weight", hp->n_heads, 0, true, true)
    }
    if (hp->attn_out_bias) {
        B(bo, "attn_output.bias", hp->dim, 0, true, true)
    }
    if (!moe) {
        B(w_gate, "ffn_gate.weight", hp->dim, hp->ffn, true, false)
        B(w_up, "ffn_up.weight", hp->dim, hp->ffn, true, false)
        B(w_down, "ffn_down.weight", hp->ffn, hp->dim, true, false)
        return PAGODA_OK;
    }
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", l);
    if (!pagoda_gguf_tensor(m->gguf, name)) {
        ERR("%s: tensor %s (the router of layer %d's %d experts) is missing", m->gguf->path, name,
            l, hp->n_experts);
        return PAGODA_ERR_INVALID;
    }
    if (bind_stacked(m, used, l, "ffn_gate_exps", hp->dim, hp->ffn_exp, false, &L->ffn_gate_exps,
                     err, err_len) ||
        bind_stacked(m, used, l, "ffn_up_exps", hp->dim, hp->ffn_exp, false, &L->ffn_up_exps, err,
                     err_len) ||
        bind_stacked(m, used, l, "ffn_down_exps", hp->ffn_exp, hp->dim, false, &L->ffn_down_exps,
                     err, err_len))
        return PAGODA_ERR_INVALID;
    B(ffn_gate_inp, "ffn_gate_inp.weight", hp->dim, hp->n_experts, true, false)
    if (hp->router_bias) {
        B(ffn_gate_inp_b, "ffn_gate_inp.bias", hp->n_experts, 0, true, true)
    }
    if (hp->exp_bias) {
        /* one bias row per expert: [width, n_experts] */
        B(ffn_gate_exps_b, "ffn_gate_exps.bias", hp->ffn_exp, hp->n_experts, true, true)
        B(ffn_up_exps_b, "ffn_up_exps.bias", hp->ffn_exp, hp->n_experts, true, true)
        B(ffn_down_exps_b, "ffn_down_exps.bias", hp->dim, hp->n_experts, true, true)
    }
    if (L->ffn_gate_exps->type != L->ffn_up_exps->type) {
        ERR("%s: tensors blk.%d.ffn_gate_exps.weight (%s) and ffn_up_exps.weight (%s) have "
            "different types: a layer's gate and up experts are one type", m->gguf->path, l,
            pagoda_dtype_name(L->ffn_gate_exps->type), pagoda_dtype_name(L->ffn_up_exps->type));
        return PAGODA_ERR_INVALID;
    }
    snprintf(probe, sizeof probe, "blk.%d.exp_probs_b.bias", hp->n_dense_lead);
    if (wants(m, A->exp_probs_b, probe)) {
        B(exp_probs_b, "exp_probs_b.bias", hp->n_experts, 0, true, true)
    }
    if (hp->ffn_shexp > 0) {
        B(ffn_gate_shexp, "ffn_gate_shexp.weight", hp->dim, hp->ffn_shexp, true, false)
        B(ffn_up_shexp, "ffn_up_shexp.weight", hp->dim, hp->ffn_shexp, true, false)
        B(ffn_down_shexp, "ffn_down_shexp.weight", hp->ffn_shexp, hp->dim, true, false)
        snprintf(probe, sizeof probe, "blk.%d.ffn_gate_inp_shexp.weight", hp->n_dense_lead);
        if (wants(m, A->shexp_gate, probe)) {
            B(ffn_gate_inp_shexp, "ffn_gate_inp_shexp.weight", hp->dim, 0, true, false)
        }
    }
#undef B
    return PAGODA_OK;
}

pagoda_model *pagoda_model_open(const char *path, char *err, size_t err_len)
{
    uint8_t *used = NULL;
    pagoda_model *m = calloc(1, sizeof *m);
    if (!m) { ERR("out of memory"); return NULL; }
    m->gguf = pagoda_gguf_open(path, err, err_len);
    if (!m->gguf) goto fail;
    if (pagoda_hparams_read(m->gguf, &m->hp, err, err_len)) goto fail;
    pagoda_hparams *hp = &m->hp;
    const pagoda_arch *A = pagoda_arch_find(hp->arch);
    used = calloc(m->gguf->n_tensors ? m->gguf->n_tensors : 1, 1);
    if (!used) { ERR("out of memory"); goto fail; }

    const gguf_tensor *emb = pagoda_gguf_tensor(m->gguf, "token_embd.weight");
    if (!emb || emb->n_dims < 2) {
        ERR("%s: tensor token_embd.weight is missing or not 2-D", path);
        goto fail;
    }
    hp->n_vocab = (int32_t)emb->ne[1];

    if (bind(m, used, "token_embd.weight", hp->dim, hp->n_vocab, true, false, &m->tok_embd, err, err_len) ||
        bind(m, used, "output_norm.weight", hp->dim, 0, true, true, &m->output_norm, err, err_len) ||
        bind(m, used, "output.weight", hp->dim, hp->n_vocab, false, false, &m->output, err, err_len))
        goto fail;
    if (!m->output) {
        m->output = m->tok_embd;
        hp->tied_output = true;
    }
    if (pagoda_gguf_tensor(m->gguf, "rope_freqs.weight")) {
        if (bind(m, used, "rope_freqs.weight", hp->rope_dims / 2, 0, true, true, &m->rope_freqs,
                 err, err_len))
            goto fail;
        hp->rope_scaling = PAGODA_ROPE_SCALING_LLAMA3;
    }

    m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers);
    if (!m->layers) { ERR("out of memory"); goto fail; }
    for (int l = 0; l < hp->n_layers; l++)
        if (bind_layer(m, A, used, l, err, err_len)) goto fail;
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) {
        const gguf_tensor *t = &m->gguf->tensors[i];
        if (used[i] || ignorable(m, t)) continue;
        ERR("%s: tensor %.*s is not used by architecture %s with %d blocks (block_count%s): a "
            "file with tensors it does not run is refused, not served with them ignored",
            path, (int)t->name.len, t->name.ptr, hp->arch, hp->n_layers,
            hp->n_nextn ? " minus nextn_predict_layers" : "");
        goto fail;
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
    free(used);
    return m;
fail:
    free(used);
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
    if (hp->swa_rope_global) {
        pagoda_model_rope_inv_freq(m, inv_freq);
        return;
    }
    for (int i = 0; i < hp->rope_dims / 2; i++)
        inv_freq[i] = (float)pow((double)hp->rope_theta_swa, -2.0 * i / hp->rope_dims);
}

float pagoda_rope_yarn_get_mscale(float scale, float m)
{
    return scale <= 1.0f ? 1.0f : 0.1f * m * logf(scale) + 1.0f;
}

/* The dimension (of n_rot) whose wavelength turns n_turns times over the
 * trained context. */
static double yarn_corr_dim(double n_turns, int n_rot, double theta, int orig_ctx)
{
    return n_rot * log(orig_ctx / (n_turns * 6.283185307179586)) / (2.0 * log(theta));
}

void pagoda_rope_yarn_inv_freq(float theta, int n_rot, float factor, int orig_ctx,
                               float beta_fast, float beta_slow, float ext_factor, bool truncate,
                               float *inv_freq)
{
    double lo = yarn_corr_dim(beta_fast, n_rot, theta, orig_ctx);
    double hi = yarn_corr_dim(beta_slow, n_rot, theta, orig_ctx);
    if (truncate) {
        lo = floor(lo);
        hi = ceil(hi);
    }
    if (lo < 0) lo = 0;
    if (hi > n_rot - 1) hi = n_rot - 1;
    if (hi == lo) hi += 0.001; /* one step: no division by zero */
    for (int i = 0; i < n_rot / 2; i++) {
        double extrap = pow((double)theta, -2.0 * i / n_rot);
        double interp = extrap / factor;
        double ramp = (i - lo) / (hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        /* ramp 0: a fast dim, kept (extrapolated); 1: a slow one, interpolated */
        double mix = (1.0 - ramp) * ext_factor;
        inv_freq[i] = (float)(interp * (1.0 - mix) + extrap * mix);
    }
}

void pagoda_model_rope_inv_freq(const pagoda_model *m, float *inv_freq)
{
    const pagoda_hparams *hp = &m->hp;
    int half = hp->rope_dims / 2;
    if (hp->rope_scaling == PAGODA_ROPE_SCALING_YARN && !m->rope_freqs) {
        pagoda_rope_yarn_inv_freq(hp->rope_theta, hp->rope_dims, hp->rope_factor,
                                  hp->rope_orig_ctx, hp->rope_yarn_beta_fast,
                                  hp->rope_yarn_beta_slow, hp->rope_yarn_ext_factor,
                                  hp->rope_yarn_truncate, inv_freq);
        return;
    }
    const float *factors = m->rope_freqs ? (const float *)m->rope_freqs->data : NULL;
    for (int i = 0; i < half; i++) {
        double f = pow((double)hp->rope_theta, -2.0 * i / hp->rope_dims);
        if (hp->rope_scaling == PAGODA_ROPE_SCALING_LINEAR) f /= hp->rope_factor;
        if (factors) f /= factors[i];
        inv_freq[i] = (float)f;
    }
}
