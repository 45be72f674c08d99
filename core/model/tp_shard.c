/*
 * tp_shard.c: see tp_shard.h. A split must cut whole heads (so each rank's
 * attention reads only its own KV heads), whole FFN rows, and, for the
 * column-split matrices, whole quantization blocks of each row (a block's
 * scale covers 32 or 256 values, so a cut inside one cannot be read).
 * A mixture-of-experts layer splits by whole experts: each rank runs the
 * (token, expert) pairs of its own experts in full, so an expert's rows
 * and its blocks are never cut, and the expert width need not divide.
 * Not for: packing the bytes (forward.c).
 */
#include "tp_shard.h"

#include <stdio.h>
#include <string.h>

#include "pagoda/types.h"

static bool ends_with(const char *s, size_t len, const char *suf)
{
    size_t l = strlen(suf);
    return len >= l && memcmp(s + len - l, suf, l) == 0;
}

int pagoda_tp_split_of(const char *name, size_t len)
{
    if (len < 4 || memcmp(name, "blk.", 4) != 0) return PAGODA_TP_REPLICATED;
    /* gpt-oss: a sink a head (split with the heads) and the experts'
     * biases [E x width], whose rows are the experts (split with them:
     * rank r's rows are its experts' run, pagoda_tp_expert_range) */
    static const char *const rows[] = {".attn_q.weight", ".attn_k.weight", ".attn_v.weight",
                                       ".attn_q.bias", ".attn_k.bias", ".attn_v.bias",
                                       ".ffn_gate.weight", ".ffn_up.weight",
                                       ".ffn_gate_shexp.weight", ".ffn_up_shexp.weight",
                                       ".attn_sinks.weight", ".ffn_gate_exps.bias",
                                       ".ffn_up_exps.bias", ".ffn_down_exps.bias"};
    static const char *const cols[] = {".attn_output.weight", ".ffn_down.weight",
                                       ".ffn_down_shexp.weight"};
    static const char *const exps[] = {".ffn_gate_exps.weight", ".ffn_up_exps.weight",
                                       ".ffn_down_exps.weight", ".ffn_gate_up_exps.weight"};
    /* MLA: the query (attn_q, or the LoRA's attn_q_b) by heads' rows, each
     * head's attn_k_b / attn_v_b whole; attn_q_a, attn_kv_a_mqa and their
     * norms make the shared latent and stay whole on every rank */
    static const char *const heads[] = {".attn_k_b.weight", ".attn_v_b.weight"};
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++)
        if (ends_with(name, len, heads[i])) return PAGODA_TP_HEADS;
    if (ends_with(name, len, ".attn_q_b.weight")) return PAGODA_TP_ROWS;
    for (size_t i = 0; i < sizeof exps / sizeof exps[0]; i++)
        if (ends_with(name, len, exps[i])) return PAGODA_TP_EXPERTS;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (ends_with(name, len, rows[i])) return PAGODA_TP_ROWS;
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        if (ends_with(name, len, cols[i])) return PAGODA_TP_COLS;
    return PAGODA_TP_REPLICATED;
}

/* Why t does not split n ways ("" when it does). */
static bool tensor_splits(const gguf_tensor *t, int32_t n, char *why, size_t wn)
{
    int split = pagoda_tp_split_of(t->name.ptr, t->name.len);
    if (split == PAGODA_TP_REPLICATED || n == 1) return true;
    int be = 1, bb = 4;
    pagoda_dtype_block(t->type, &be, &bb);
    if (split == PAGODA_TP_EXPERTS || split == PAGODA_TP_HEADS) {
        const char *what = split == PAGODA_TP_EXPERTS ? "expert" : "per-head";
        if (t->n_dims != 3) {
            snprintf(why, wn, "%.*s is a%s %s tensor of %u dimensions, not 3", (int)t->name.len,
                     t->name.ptr, split == PAGODA_TP_EXPERTS ? "n" : "", what, t->n_dims);
            return false;
        }
        if (t->ne[2] % n == 0) return true;
        snprintf(why, wn, "%.*s holds %lld %s, which do not divide by %d", (int)t->name.len,
                 t->name.ptr, (long long)t->ne[2], split == PAGODA_TP_EXPERTS ? "experts" : "heads", n);
        return false;
    }
    if (split == PAGODA_TP_ROWS) {
        int64_t rows = t->n_dims >= 2 ? t->ne[1] : t->ne[0];
        if (rows % n == 0) return true;
        snprintf(why, wn, "%.*s has %lld rows, which do not divide by %d", (int)t->name.len,
                 t->name.ptr, (long long)rows, n);
        return false;
    }
    int64_t cols = t->ne[0];
    if (cols % n == 0 && (cols / n) % be == 0) return true;
    if (cols % n)
        snprintf(why, wn, "%.*s has %lld input columns, which do not divide by %d", (int)t->name.len,
                 t->name.ptr, (long long)cols, n);
    else
        snprintf(why, wn, "%.*s (%s) would be cut into %lld input columns a rank, which is not a "
                 "whole number of its %d-value quantization blocks", (int)t->name.len, t->name.ptr,
                 pagoda_dtype_name(t->type), (long long)(cols / n), be);
    return false;
}

static bool splits(const gguf_file *f, const pagoda_tp_dims *d, int32_t n, char *why, size_t wn)
{
    why[0] = '\0';
    if (n < 1) {
        snprintf(why, wn, "it must be at least 1");
        return false;
    }
    if (n == 1) return true;
    /* a MoE model without dense layers has no FFN of width ffn to cut */
    bool dense_ffn = d->n_experts <= 0 || d->n_dense_lead > 0;
    if (d->mla) {
        /* the latent is every head's: whole on each rank; the heads split */
        if (d->n_heads % n || (dense_ffn && d->ffn % n)) {
            if (d->n_heads % n)
                snprintf(why, wn, "its %lld attention heads must divide by %d (multi-head latent "
                         "attention: the latent is whole on every rank, the heads split)",
                         (long long)d->n_heads, n);
            else
                snprintf(why, wn, "its dense FFN of %lld must divide by %d", (long long)d->ffn, n);
            return false;
        }
    } else if (dense_ffn && (d->n_heads % n || d->n_kv_heads % n || d->ffn % n)) {
        snprintf(why, wn, "its %lld attention heads, %lld KV heads and FFN of %lld must each divide "
                 "by %d", (long long)d->n_heads, (long long)d->n_kv_heads, (long long)d->ffn, n);
        return false;
    }
    if (!d->mla && !dense_ffn && (d->n_heads % n || d->n_kv_heads % n)) {
        snprintf(why, wn, "its %lld attention heads and %lld KV heads must each divide by %d",
                 (long long)d->n_heads, (long long)d->n_kv_heads, n);
        return false;
    }
    if (d->n_experts > 0 && d->n_experts % n) {
        snprintf(why, wn, "its %lld experts must divide by %d (each rank holds whole experts)",
                 (long long)d->n_experts, n);
        return false;
    }
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (!tensor_splits(&f->tensors[i], n, why, wn)) return false;
    return true;
}

int pagoda_tp_check(const gguf_file *f, const pagoda_tp_dims *d, int32_t n, char *err,
                    size_t err_len)
{
    char why[300];
    if (splits(f, d, n, why, sizeof why)) return PAGODA_OK;
    char ok[200] = "";
    size_t o = 0;
    char scratch[300];
    for (int32_t k = 1; k <= 256 && o < sizeof ok - 8; k++)
        if (splits(f, d, k, scratch, sizeof scratch))
            o += (size_t)snprintf(ok + o, sizeof ok - o, "%s%d", o ? ", " : "", k);
    snprintf(err, err_len, "tensor_parallel = %d cannot split this model: %s; values that work: %s",
             n, why, o ? ok : "none");
    return PAGODA_ERR_INVALID;
}

void pagoda_tp_expert_range(int64_t n_experts, int32_t r, int32_t n, int64_t *first,
                            int64_t *count)
{
    if (n < 1) n = 1;
    *first = (int64_t)r * n_experts / n;
    *count = ((int64_t)r + 1) * n_experts / n - *first;
}

uint64_t pagoda_tp_tensor_bytes(const gguf_tensor *t, int32_t n)
{
    if (n <= 1 || pagoda_tp_split_of(t->name.ptr, t->name.len) == PAGODA_TP_REPLICATED)
        return t->nbytes;
    /* whole rows, whole blocks of each row, or whole experts: exact */
    return t->nbytes / (uint64_t)n;
}

uint64_t pagoda_tp_rank_weight_bytes(const gguf_file *f, int32_t n)
{
    uint64_t b = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) b += pagoda_tp_tensor_bytes(&f->tensors[i], n);
    return b;
}
