/*
 * memplan_weights.c: see memplan_weights.h. A routed expert tensor is any
 * tensor tp_shard.h splits by experts (ffn_{gate,up,down}_exps, fused
 * gate_up): 3-D [cols, rows, experts], each expert one contiguous run of
 * nbytes / experts bytes, so "k of E experts" is exactly k / E of its
 * bytes and parameters. Shared experts, routers, dense leading layers and
 * attention are read by every token and count whole.
 * The walk also asks the backend what it holds beside each dense matmul
 * weight (opts.weight_extra), with the shape a rank holds.
 * Not for: deciding which experts a token picks (moe_route.c).
 */
#include "memplan_weights.h"

#include <inttypes.h>
#include <stdbool.h>
#include <string.h>

#include "pagoda/types.h"
#include "tp_shard.h"

static bool arch_int(const gguf_file *f, const char *arch, const char *suffix, int64_t *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return pagoda_gguf_get_int(f, key, out);
}

static bool name_is(const gguf_tensor *t, const char *s)
{
    return t->name.len == strlen(s) && memcmp(t->name.ptr, s, t->name.len) == 0;
}

static bool name_ends(const gguf_tensor *t, const char *suf)
{
    size_t l = strlen(suf);
    return t->name.len >= l && memcmp(t->name.ptr + t->name.len - l, suf, l) == 0;
}

/* What the backend holds beside the 2-D matmul weight t (ABI 1.15
 * weight_extra_bytes), asked with the shape one rank of tp holds: N / tp
 * rows of a row split, K / tp values of a column split (whole heads, rows
 * and blocks: pagoda_tp_check), the tensor whole where it is replicated. */
static int weight_extra(const pagoda_memplan_opts *o, const gguf_tensor *t, int64_t tp,
                        pagoda_memplan *p, const char *fname, char *err, size_t n)
{
    int64_t K = t->ne[0], N = t->ne[1];
    int split = pagoda_tp_split_of(t->name.ptr, t->name.len);
    if (tp > 1 && split == PAGODA_TP_ROWS) N /= tp;
    if (tp > 1 && split == PAGODA_TP_COLS) K /= tp;
    uint64_t x = 0;
    int st = o->weight_extra(o->weight_extra_ctx, t->type, N, K, &x);
    if (st) {
        snprintf(err, n, "%s: the backend's weight_extra_bytes failed for tensor %.*s (%s, %" PRId64
                 " rows of %" PRId64 "): %s", fname, (int)t->name.len, t->name.ptr,
                 pagoda_dtype_name(t->type), N, K, pagoda_status_str(st));
        return st;
    }
    if (x) {
        p->repacked_bytes += x;
        p->repacked_weight_values += (uint64_t)N * (uint64_t)K;
    }
    return PAGODA_OK;
}

int pagoda_memplan_weights(const gguf_file *f, const pagoda_memplan_opts *o, int64_t tp,
                           pagoda_memplan *p, char *err, size_t n)
{
    const char *fname = f->path ? f->path : "model";
    const gguf_tensor *emb = NULL, *head = NULL, *first_exp = NULL;
    /* the token embedding is a matmul weight only when it is also the head */
    bool has_head = pagoda_gguf_tensor(f, "output.weight") != NULL;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        uint64_t ne = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) ne *= (uint64_t)t->ne[d]; /* checked at open */
        p->n_params += ne;
        p->weight_bytes += t->nbytes;
        bool typed = t->type >= 0 && t->type < PAGODA_DTYPE_COUNT_;
        if (typed) {
            p->weight_bytes_by_type[t->type] += t->nbytes;
            p->weight_params_by_type[t->type] += ne;
        }
        if (name_is(t, "token_embd.weight")) emb = t;
        if (name_is(t, "output.weight")) head = t;
        /* 3-D (routed experts, MLA's per-head matrices) are not asked, nor
         * 2-D tables that are no matmul weight (gpt-oss's expert biases) */
        if (o && o->weight_extra && t->n_dims == 2 && !name_ends(t, ".bias") &&
            !(has_head && name_is(t, "token_embd.weight"))) {
            int st = weight_extra(o, t, tp, p, fname, err, n);
            if (st) return st;
        }
        if (pagoda_tp_split_of(t->name.ptr, t->name.len) != PAGODA_TP_EXPERTS) continue;
        if (t->n_dims != 3 || t->ne[2] < 1) {
            snprintf(err, n, "%s: tensor %.*s has %u dimensions; an expert tensor has 3 [cols, rows, "
                     "experts]", fname, (int)t->name.len, t->name.ptr, t->n_dims);
            return PAGODA_ERR_INVALID;
        }
        if (first_exp && t->ne[2] != p->n_experts) {
            snprintf(err, n, "%s: tensor %.*s holds %" PRId64 " experts, %.*s %" PRId64, fname,
                     (int)t->name.len, t->name.ptr, t->ne[2], (int)first_exp->name.len,
                     first_exp->name.ptr, p->n_experts);
            return PAGODA_ERR_INVALID;
        }
        if (!first_exp) first_exp = t;
        p->n_experts = t->ne[2];
        p->expert_params += ne;
        p->expert_bytes += t->nbytes;
        if (typed) {
            p->expert_bytes_by_type[t->type] += t->nbytes;
            p->expert_params_by_type[t->type] += ne;
        }
        if (name_ends(t, ".ffn_down_exps.weight")) {
            p->n_moe_layers++;
            p->ffn_exp = t->ne[0];
        } else if (name_ends(t, ".ffn_gate_up_exps.weight") && !p->ffn_exp) {
            p->ffn_exp = t->ne[1] / 2;
        }
    }

    /* the expert keys must agree with the tensors */
    int64_t key_e = 0, key_k = 0;
    bool has_e = arch_int(f, p->arch, "expert_count", &key_e);
    bool has_k = arch_int(f, p->arch, "expert_used_count", &key_k);
    /* expert_count with no expert tensor: every layer dense (a glm4moe
     * whose leading_dense_block_count covers them all), planned as such */
    if (p->n_experts) {
        if (!has_e || key_e != p->n_experts) {
            char is[48] = "missing";
            if (has_e) snprintf(is, sizeof is, "%" PRId64, key_e);
            snprintf(err, n, "%s: %s.expert_count is %s but tensor %.*s holds %" PRId64 " experts",
                     fname, p->arch, is, (int)first_exp->name.len, first_exp->name.ptr, p->n_experts);
            return PAGODA_ERR_INVALID;
        }
        if (!has_k || key_k < 1 || key_k > key_e) {
            char is[48] = "missing";
            if (has_k) snprintf(is, sizeof is, "%" PRId64, key_k);
            snprintf(err, n, "%s: %s.expert_used_count is %s: expected 1..%" PRId64 " (expert_count)",
                     fname, p->arch, is, key_e);
            return PAGODA_ERR_INVALID;
        }
        p->n_experts_used = key_k;
    }

    /* per token: k / E of the routed experts, one embedding row unless
     * the table is also the head */
    uint64_t E = (uint64_t)(p->n_experts ? p->n_experts : 1), k = (uint64_t)p->n_experts_used;
    uint64_t exp_one = p->expert_bytes / E;              /* one expert in every MoE layer */
    uint64_t emb_skip = 0;
    if (emb && head) emb_skip = emb->nbytes - pagoda_dtype_row_bytes(emb->type, emb->ne[0]);
    p->n_params_active = p->n_params - p->expert_params + p->expert_params / E * k;
    p->decode_bytes_per_token = p->weight_bytes - p->expert_bytes + exp_one * k - emb_skip;
    p->weight_bytes_model = p->weight_bytes;
    if (tp > 1) {
        /* a rank: split tensors / tp (experts included: E / tp whole), the
         * rest whole; k / tp of its experts a layer on average */
        p->weight_bytes = pagoda_tp_rank_weight_bytes(f, (int32_t)tp);
        p->experts_per_rank = p->n_experts / tp;
        p->expert_bytes_per_rank = p->expert_bytes / (uint64_t)tp;
        uint64_t base = p->weight_bytes - p->expert_bytes_per_rank - emb_skip;
        uint64_t most = k < (uint64_t)p->experts_per_rank ? k : (uint64_t)p->experts_per_rank;
        p->decode_bytes_per_token_rank = base + exp_one * k / (uint64_t)tp;
        p->decode_bytes_per_token_rank_max = base + exp_one * most;
    } else {
        p->experts_per_rank = p->n_experts;
        p->expert_bytes_per_rank = p->expert_bytes;
        p->decode_bytes_per_token_rank = p->decode_bytes_per_token;
        p->decode_bytes_per_token_rank_max = p->decode_bytes_per_token;
    }
    return PAGODA_OK;
}

/* ------------------------------------------------------------ output */

static const char *human(uint64_t b, char *buf, size_t n)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int i = 0;
    while (v >= 1024 && i < 4) { v /= 1024; i++; }
    if (i == 0) snprintf(buf, n, "%" PRIu64 " B", b);
    else snprintf(buf, n, "%.2f %s", v, u[i]);
    return buf;
}

static const char *count(uint64_t c, char *buf, size_t n)
{
    if (c >= 1000000000ull) snprintf(buf, n, "%.2fB", (double)c / 1e9);
    else snprintf(buf, n, "%.1fM", (double)c / 1e6);
    return buf;
}

void pagoda_memplan_weights_print(const pagoda_memplan *p, FILE *fp)
{
    char a[32], b[32], c[32];
    if (p->n_experts) {
        fprintf(fp, "\nexperts: %" PRId64 " a layer in %" PRId64 " of %" PRId64 " layers, %" PRId64
                " run a token (width %" PRId64 "): %s of the weights\n", p->n_experts, p->n_moe_layers,
                p->n_layers, p->n_experts_used, p->ffn_exp, human(p->expert_bytes, a, sizeof a));
        for (int t = 0; t < PAGODA_DTYPE_COUNT_; t++) {
            if (!p->expert_bytes_by_type[t]) continue;
            char label[64];
            snprintf(label, sizeof label, "experts %s (%s params)", pagoda_dtype_name(t),
                     count(p->expert_params_by_type[t], b, sizeof b));
            fprintf(fp, "  %-28s %16" PRIu64 " %14s\n", label, p->expert_bytes_by_type[t],
                    human(p->expert_bytes_by_type[t], a, sizeof a));
        }
        fprintf(fp, "parameters: %s, %s active a token (all but the routed experts, and %" PRId64
                " of each layer's %" PRId64 "; embeddings and head whole)\n",
                count(p->n_params, a, sizeof a), count(p->n_params_active, b, sizeof b),
                p->n_experts_used, p->n_experts);
    }
    if (p->n_experts)
        fprintf(fp, "decode: %s read a token, the bandwidth bound (every weight but the routed experts, "
                "%" PRId64 " experts a MoE layer; of the token embedding one row unless it is also the "
                "head)\n", human(p->decode_bytes_per_token, a, sizeof a), p->n_experts_used);
    else
        fprintf(fp, "\ndecode: %s read a token, the bandwidth bound (every weight; of the token "
                "embedding one row unless it is also the head)\n",
                human(p->decode_bytes_per_token, a, sizeof a));
    if (p->tensor_parallel > 1) {
        int64_t e = p->experts_per_rank;
        if (p->n_experts)
            fprintf(fp, "  a rank of %" PRId64 ": %" PRId64 " experts a layer (rank r: experts %" PRId64
                    "r..%" PRId64 "r+%" PRId64 ", %s), reads %s a token on average (%g of its experts "
                    "a layer), at most %s\n", p->tensor_parallel, e, e, e, e - 1,
                    human(p->expert_bytes_per_rank, c, sizeof c),
                    human(p->decode_bytes_per_token_rank, a, sizeof a),
                    (double)p->n_experts_used / (double)p->tensor_parallel,
                    human(p->decode_bytes_per_token_rank_max, b, sizeof b));
        else
            fprintf(fp, "  a rank of %" PRId64 ": reads %s a token\n", p->tensor_parallel,
                    human(p->decode_bytes_per_token_rank, a, sizeof a));
    }
}

void pagoda_memplan_weights_json(const pagoda_memplan *p, json_t *root)
{
    json_t *model = json_object_get(root, "model"), *bytes = json_object_get(root, "bytes");
    json_t *rank = json_object_get(root, "per_rank");
    if (model) json_object_set_new(model, "n_params_active", json_integer((json_int_t)p->n_params_active));
    if (bytes)
        json_object_set_new(bytes, "decode_per_token", json_integer((json_int_t)p->decode_bytes_per_token));
    json_t *bt = json_object();
    for (int t = 0; bt && t < PAGODA_DTYPE_COUNT_; t++)
        if (p->expert_bytes_by_type[t])
            json_object_set_new(bt, pagoda_dtype_name(t),
                                json_pack("{s:I,s:I}", "bytes", (json_int_t)p->expert_bytes_by_type[t],
                                          "params", (json_int_t)p->expert_params_by_type[t]));
    json_object_set_new(root, "moe", json_pack(
        "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:o}", "n_experts", (json_int_t)p->n_experts, "n_experts_used",
        (json_int_t)p->n_experts_used, "ffn_exp", (json_int_t)p->ffn_exp, "moe_layers",
        (json_int_t)p->n_moe_layers, "expert_params", (json_int_t)p->expert_params, "expert_bytes",
        (json_int_t)p->expert_bytes, "n_params_active", (json_int_t)p->n_params_active,
        "experts_by_type", bt ? bt : json_object()));
    if (rank) {
        json_object_set_new(rank, "experts", json_integer((json_int_t)p->experts_per_rank));
        json_object_set_new(rank, "expert_bytes", json_integer((json_int_t)p->expert_bytes_per_rank));
        json_object_set_new(rank, "decode_bytes_per_token",
                            json_integer((json_int_t)p->decode_bytes_per_token_rank));
        json_object_set_new(rank, "decode_bytes_per_token_max",
                            json_integer((json_int_t)p->decode_bytes_per_token_rank_max));
    }
}
