/*
 * memplan.c: the memory plan from a GGUF header (see memplan.h). All sizes
 * come from header fields and tensor infos; no weight byte is read, so
 * `pagoda plan` answers in milliseconds for any model size. Arithmetic on
 * header values is overflow-checked: a hostile header gets an error, not
 * a wrapped plan.
 * Not for: allocation, or deciding policy (the engine does that from it).
 */
#define _GNU_SOURCE
#include "memplan.h"

#include "config.h" /* pagoda_parse_size */
#include "model.h"  /* pagoda_hparams_read: which layers slide */

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

static const int64_t fit_lens[PAGODA_MEMPLAN_N_FIT] = {512, 2048, 8192, 32768};

void pagoda_memplan_opts_default(pagoda_memplan_opts *o)
{
    memset(o, 0, sizeof *o);
    o->kv_dtype = PAGODA_DTYPE_F16;
}

/* acc *= v, false on overflow. */
static bool mulu(uint64_t *acc, uint64_t v) { return !__builtin_mul_overflow(*acc, v, acc); }
static bool addu(uint64_t *acc, uint64_t v) { return !__builtin_add_overflow(*acc, v, acc); }

static bool get_arch_int(const gguf_file *f, const char *arch, const char *suffix, int64_t *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return pagoda_gguf_get_int(f, key, out);
}

/* MemAvailable from /proc/meminfo, in bytes; 0 when unreadable. */
static uint64_t mem_available(void)
{
    FILE *fp = fopen("/proc/meminfo", "r");
    if (!fp) return 0;
    char line[256];
    uint64_t kb = 0;
    while (fgets(line, sizeof line, fp))
        if (sscanf(line, "MemAvailable: %" SCNu64 " kB", &kb) == 1) break;
    fclose(fp);
    return kb * 1024;
}

int pagoda_memplan_compute(const gguf_file *f, const pagoda_memplan_opts *opts, pagoda_memplan *p,
                           char *err, size_t n)
{
    pagoda_memplan_opts o;
    if (opts) o = *opts;
    else pagoda_memplan_opts_default(&o);
    if (!f || !p) {
        snprintf(err, n, "memory plan: no model");
        return PAGODA_ERR_INVALID;
    }
    memset(p, 0, sizeof *p);
    const char *fname = f->path ? f->path : "model";

    /* --- the model */
    char *arch = pagoda_gguf_get_str(f, "general.architecture");
    snprintf(p->arch, sizeof p->arch, "%s", arch ? arch : "llama");
    free(arch);
    struct { const char *key; int64_t *dst; } req[] = {
        {"block_count", &p->n_layers}, {"embedding_length", &p->dim},
        {"attention.head_count", &p->n_heads}, {"feed_forward_length", &p->ffn},
        {"context_length", &p->context},
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        if (!get_arch_int(f, p->arch, req[i].key, req[i].dst) || *req[i].dst <= 0 ||
            *req[i].dst > (1ll << 32)) {
            snprintf(err, n, "%s: metadata key %s.%s is missing or not a positive integer", fname,
                     p->arch, req[i].key);
            return PAGODA_ERR_INVALID;
        }
    }
    if (!get_arch_int(f, p->arch, "attention.head_count_kv", &p->n_kv_heads)) p->n_kv_heads = p->n_heads;
    if (p->n_kv_heads <= 0 || p->n_kv_heads > p->n_heads || p->n_heads % p->n_kv_heads) {
        snprintf(err, n, "%s: %" PRId64 " KV heads do not divide %" PRId64 " attention heads", fname,
                 p->n_kv_heads, p->n_heads);
        return PAGODA_ERR_INVALID;
    }
    int64_t key_len = 0, val_len = 0;
    if (get_arch_int(f, p->arch, "attention.key_length", &key_len) && key_len > 0 && key_len <= (1 << 20)) {
        p->head_dim = key_len;
    } else {
        if (p->dim % p->n_heads) {
            snprintf(err, n, "%s: embedding_length %" PRId64 " is not a multiple of head_count %" PRId64,
                     fname, p->dim, p->n_heads);
            return PAGODA_ERR_INVALID;
        }
        p->head_dim = p->dim / p->n_heads;
    }
    if (!get_arch_int(f, p->arch, "attention.value_length", &val_len) || val_len <= 0 || val_len > (1 << 20))
        val_len = p->head_dim;
    const gguf_kv *tok = pagoda_gguf_find(f, "tokenizer.ggml.tokens");
    const gguf_tensor *emb = pagoda_gguf_tensor(f, "token_embd.weight");
    if (tok && tok->val.type == GGUF_T_ARRAY) p->vocab = (int64_t)tok->val.v.arr.count;
    else if (!get_arch_int(f, p->arch, "vocab_size", &p->vocab) && emb && emb->n_dims >= 2) p->vocab = emb->ne[1];
    if (p->vocab <= 0 || p->vocab > (1ll << 32)) {
        snprintf(err, n, "%s: cannot tell the vocabulary size (no tokenizer.ggml.tokens)", fname);
        return PAGODA_ERR_INVALID;
    }
    if (!strcmp(p->arch, "gemma3")) {
        /* which layers slide, as the model binds them (model.c) */
        pagoda_hparams hp;
        int st = pagoda_hparams_read(f, &hp, err, n);
        if (st) return st;
        p->n_swa_layers = hp.n_swa_layers;
        p->swa_window = hp.swa_window;
    }

    /* --- weights: every tensor in the file, by type */
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        uint64_t ne = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) ne *= (uint64_t)t->ne[d]; /* checked at open */
        p->n_params += ne;
        p->weight_bytes += t->nbytes;
        if (t->type >= 0 && t->type < PAGODA_DTYPE_COUNT_) {
            p->weight_bytes_by_type[t->type] += t->nbytes;
            p->weight_params_by_type[t->type] += ne;
        }
    }

    /* --- options */
    if (o.kv_dtype != PAGODA_DTYPE_F16 && o.kv_dtype != PAGODA_DTYPE_F32 &&
        o.kv_dtype != PAGODA_DTYPE_Q8_0) {
        snprintf(err, n, "KV cache type %s is not supported (use f16, q8_0 or f32)",
                 pagoda_dtype_name(o.kv_dtype));
        return PAGODA_ERR_INVALID;
    }
    p->kv_dtype = o.kv_dtype;
    pagoda_dtype_block(o.kv_dtype, &p->kv_block_values, &p->kv_block_bytes);
    p->kv_value_bytes = (double)p->kv_block_bytes / (double)p->kv_block_values;
    /* a block type quantizes each head's row on its own (pagoda_kv_layout) */
    if (p->head_dim % p->kv_block_values || val_len % p->kv_block_values) {
        char sizes[64];
        if (val_len == p->head_dim) snprintf(sizes, sizeof sizes, "%" PRId64 " values", p->head_dim);
        else snprintf(sizes, sizeof sizes, "%" PRId64 " values (key) and %" PRId64 " (value)", p->head_dim, val_len);
        snprintf(err, n, "KV cache type %s stores blocks of %d values along each head, but this "
                 "model's heads have %s, not a multiple of %d: use kv_dtype = f16 or f32",
                 pagoda_dtype_name(o.kv_dtype), p->kv_block_values, sizes, p->kv_block_values);
        return PAGODA_ERR_INVALID;
    }
    p->max_seq_len = o.max_seq_len ? o.max_seq_len : p->context;
    p->max_batched_tokens = o.max_batched_tokens ? o.max_batched_tokens : 512;
    p->max_num_seqs = o.max_num_seqs ? o.max_num_seqs : 16;
    p->block_size = o.block_size ? o.block_size : 16;
    if (p->max_seq_len < 1 || p->max_seq_len > p->context) {
        snprintf(err, n, "max_seq_len %" PRId64 " is outside 1..%" PRId64 " (the model's context length)",
                 p->max_seq_len, p->context);
        return PAGODA_ERR_INVALID;
    }
    if (p->max_batched_tokens < 1 || p->max_batched_tokens > (1 << 24) || p->max_num_seqs < 1 ||
        p->max_num_seqs > (1 << 20) || p->block_size < 1 || p->block_size > (1 << 16)) {
        snprintf(err, n, "batch limits out of range: max_batched_tokens %" PRId64 " (1..16M), "
                 "max_num_seqs %" PRId64 " (1..1M), block_size %" PRId64 " (1..65536)",
                 p->max_batched_tokens, p->max_num_seqs, p->block_size);
        return PAGODA_ERR_INVALID;
    }

    bool ok = true;
    /* --- KV per token: layers x kv_heads x (key + value length) x bytes;
     * with key = value = head_dim this is 2 x layers x kv_heads x head_dim x bytes. */
    uint64_t kv = (uint64_t)p->n_layers;
    ok &= mulu(&kv, (uint64_t)p->n_kv_heads);
    ok &= mulu(&kv, (uint64_t)((p->head_dim + val_len) / p->kv_block_values));
    ok &= mulu(&kv, (uint64_t)p->kv_block_bytes);
    p->kv_bytes_per_token = kv;
    uint64_t kvb = kv;
    ok &= mulu(&kvb, (uint64_t)p->block_size);
    p->kv_bytes_per_block = kvb;
    /* sliding-window layers: their share, and what a windowed pool would
     * hold per full-length sequence (rounded to blocks) */
    if (ok && p->n_swa_layers > 0) {
        uint64_t per_layer = kv / (uint64_t)p->n_layers;
        p->kv_swa_bytes_per_token = per_layer * (uint64_t)p->n_swa_layers;
        uint64_t bs = (uint64_t)p->block_size, len = (uint64_t)p->max_seq_len;
        uint64_t full_tok = (len + bs - 1) / bs * bs;
        uint64_t win = (uint64_t)p->swa_window < len ? (uint64_t)p->swa_window : len;
        uint64_t win_tok = (win + bs - 1) / bs * bs + bs;   /* + the block being filled */
        if (win_tok > full_tok) win_tok = full_tok;
        p->kv_bytes_per_seq_full = kv * full_tok;
        p->kv_bytes_per_seq_windowed = (kv - p->kv_swa_bytes_per_token) * full_tok +
                                       p->kv_swa_bytes_per_token * win_tok;
    }

    /* --- activations, F32, for one forward pass of max_batched_tokens, as
     * forward.c carves them (pagoda_forward_act_bytes; test_memplan checks
     * the two agree):
     *   x, xb, xb2 [T x dim]    residual stream, normed input, projection out
     *   q, att     [T x q_dim]  queries and the attention read-out
     *   k, v       [T x kv_dim] this step's keys and values before kv_write
     *   hb, hb2    [T x ffn]    gate and up projections (SwiGLU in place)
     * = T x (3*dim + 2*q_dim + 2*kv_dim + 2*ffn) floats, plus for the
     *   max_num_seqs rows sampling this step their final-normed rows [S x dim]
     *   and logits [S x vocab], and 64 bytes of alignment per tensor (11). */
    uint64_t q_dim = (uint64_t)(p->n_heads * p->head_dim), kv_dim = (uint64_t)(p->n_kv_heads * p->head_dim);
    p->act_floats_per_token = 3 * (uint64_t)p->dim + 2 * q_dim + 2 * kv_dim + 2 * (uint64_t)p->ffn;
    uint64_t act = p->act_floats_per_token;
    ok &= mulu(&act, (uint64_t)p->max_batched_tokens);
    ok &= mulu(&act, 4);
    uint64_t logits = (uint64_t)p->max_num_seqs;
    ok &= mulu(&logits, (uint64_t)p->vocab + (uint64_t)p->dim);
    ok &= mulu(&logits, 4);
    p->logits_bytes = logits;
    ok &= addu(&act, logits);
    ok &= addu(&act, 11 * 64);
    p->act_bytes = act;

    /* --- workspace: the matmul's scratch, sized for its widest input row
     * W = max(dim, ffn) and the larger of (max_batched_tokens + 8) and 264
     * rows at 4 bytes a value: the CPU backend holds either the int8
     * blocks plus their 8-token interleave (2.5 bytes a value, rows rounded
     * up to 8), or F16's tokens-in-lanes F32 copy (4 bytes, below 256
     * rows), or a 256-row F32 weight tile for sgemm; and attention scores
     * for one query token of every running sequence over all heads. */
    uint64_t rows = (uint64_t)p->max_batched_tokens + 8;
    if (rows < 264) rows = 264;
    uint64_t qs = rows;
    ok &= mulu(&qs, (uint64_t)(p->dim > p->ffn ? p->dim : p->ffn));
    ok &= mulu(&qs, 4);
    p->qscratch_bytes = qs;
    uint64_t as = (uint64_t)p->max_num_seqs;
    ok &= mulu(&as, (uint64_t)p->n_heads);
    ok &= mulu(&as, (uint64_t)p->max_seq_len);
    ok &= mulu(&as, 4);
    p->att_scratch_bytes = as;
    p->workspace_bytes = qs;
    ok &= addu(&p->workspace_bytes, as);
    p->overhead_bytes = PAGODA_MEMPLAN_OVERHEAD;
    p->fixed_bytes = p->weight_bytes;
    ok &= addu(&p->fixed_bytes, p->act_bytes);
    ok &= addu(&p->fixed_bytes, p->workspace_bytes);
    ok &= addu(&p->fixed_bytes, p->overhead_bytes);
    if (!ok || kv == 0) {
        snprintf(err, n, "%s: model dimensions overflow the memory plan", fname);
        return PAGODA_ERR_INVALID;
    }

    /* --- budget. Auto: MemAvailable x 0.9. The weights are mmap'd; they are
     * counted as resident (they will be once the model runs), so the auto
     * budget is taken before they are paged in for a cold start. */
    if (o.memory_budget) {
        p->budget_bytes = o.memory_budget;
    } else {
        p->budget_auto = true;
        p->mem_available = mem_available();
        if (!p->mem_available) {
            snprintf(err, n, "cannot read MemAvailable from /proc/meminfo; give a memory budget");
            return PAGODA_ERR_IO;
        }
        p->budget_bytes = (uint64_t)((double)p->mem_available * PAGODA_MEMPLAN_UTIL);
    }

    uint64_t need_one = (uint64_t)((p->max_seq_len + p->block_size - 1) / p->block_size) * kvb;
    if (p->fixed_bytes > p->budget_bytes) {
        p->shortfall_bytes = p->fixed_bytes - p->budget_bytes + need_one;
        snprintf(p->reason, sizeof p->reason,
                 "weights + activations + workspace + overhead need %" PRIu64 " bytes, the budget is %" PRIu64,
                 p->fixed_bytes, p->budget_bytes);
    } else {
        uint64_t avail = p->budget_bytes - p->fixed_bytes;
        p->kv_blocks = avail / kvb;
        p->kv_tokens = p->kv_blocks * (uint64_t)p->block_size;
        p->kv_pool_bytes = p->kv_blocks * kvb;
        if (p->kv_tokens < (uint64_t)p->max_seq_len) {
            p->shortfall_bytes = need_one - p->kv_pool_bytes;
            snprintf(p->reason, sizeof p->reason,
                     "the KV pool holds %" PRIu64 " tokens, fewer than one sequence of max_seq_len %" PRId64,
                     p->kv_tokens, p->max_seq_len);
        } else {
            p->fits = true;
        }
    }
    for (int i = 0; i < PAGODA_MEMPLAN_N_FIT; i++) {
        p->fit[i].len = fit_lens[i];
        p->fit[i].exceeds = fit_lens[i] > p->max_seq_len;
        uint64_t per = (uint64_t)((fit_lens[i] + p->block_size - 1) / p->block_size);
        p->fit[i].seqs = p->fit[i].exceeds ? 0 : p->kv_blocks / per;
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

void pagoda_memplan_print(const pagoda_memplan *p, FILE *fp)
{
    char a[32], b[32];
    fprintf(fp, "model: %s, %" PRId64 " layers, dim %" PRId64 ", %" PRId64 " heads (%" PRId64
            " KV, head_dim %" PRId64 "), ffn %" PRId64 ", vocab %" PRId64 ", context %" PRId64 "\n",
            p->arch, p->n_layers, p->dim, p->n_heads, p->n_kv_heads, p->head_dim, p->ffn, p->vocab,
            p->context);
    fprintf(fp, "limits: max_seq_len %" PRId64 ", max_batched_tokens %" PRId64 ", max_num_seqs %" PRId64
            ", block_size %" PRId64 ", KV %s\n\n",
            p->max_seq_len, p->max_batched_tokens, p->max_num_seqs, p->block_size,
            pagoda_dtype_name(p->kv_dtype));
    fprintf(fp, "  %-28s %16s %14s\n", "component", "bytes", "");
    for (int t = 0; t < PAGODA_DTYPE_COUNT_; t++) {
        if (!p->weight_bytes_by_type[t]) continue;
        char label[64];
        snprintf(label, sizeof label, "weights %s (%.1fM params)", pagoda_dtype_name(t),
                 (double)p->weight_params_by_type[t] / 1e6);
        fprintf(fp, "  %-28s %16" PRIu64 " %14s\n", label, p->weight_bytes_by_type[t],
                human(p->weight_bytes_by_type[t], a, sizeof a));
    }
    fprintf(fp, "  %-28s %16" PRIu64 " %14s   (%.1fM params)\n", "weights total", p->weight_bytes,
            human(p->weight_bytes, a, sizeof a), (double)p->n_params / 1e6);
    fprintf(fp, "  %-28s %16" PRIu64 " %14s   (%" PRIu64 " f32/token + logits %s)\n", "activations",
            p->act_bytes, human(p->act_bytes, a, sizeof a), p->act_floats_per_token,
            human(p->logits_bytes, b, sizeof b));
    fprintf(fp, "  %-28s %16" PRIu64 " %14s\n", "workspace", p->workspace_bytes,
            human(p->workspace_bytes, a, sizeof a));
    fprintf(fp, "  %-28s %16" PRIu64 " %14s\n", "runtime overhead", p->overhead_bytes,
            human(p->overhead_bytes, a, sizeof a));
    fprintf(fp, "  %-28s %16" PRIu64 " %14s\n", "fixed total", p->fixed_bytes,
            human(p->fixed_bytes, a, sizeof a));
    if (p->budget_auto)
        fprintf(fp, "  %-28s %16" PRIu64 " %14s   (auto: %.0f%% of MemAvailable %s)\n", "budget",
                p->budget_bytes, human(p->budget_bytes, a, sizeof a), PAGODA_MEMPLAN_UTIL * 100,
                human(p->mem_available, b, sizeof b));
    else
        fprintf(fp, "  %-28s %16" PRIu64 " %14s\n", "budget", p->budget_bytes,
                human(p->budget_bytes, a, sizeof a));
    fprintf(fp, "\nKV cache: %" PRIu64 " bytes/token = 2 x %" PRId64 " layers x %" PRId64
            " kv_heads x %" PRId64 " head_dim x %g bytes",
            p->kv_bytes_per_token, p->n_layers, p->n_kv_heads, p->head_dim, p->kv_value_bytes);
    if (p->kv_block_values > 1)
        fprintf(fp, " (%s: %d bytes per %d values; %.2fx the tokens of F16 in the same bytes)",
                pagoda_dtype_name(p->kv_dtype), p->kv_block_bytes, p->kv_block_values,
                2.0 / p->kv_value_bytes);
    fprintf(fp, "\n");
    if (p->n_swa_layers > 0)
        fprintf(fp, "  sliding window: %" PRId64 " of %" PRId64 " layers read only their last %" PRId64
                " tokens (%" PRIu64 " of those bytes/token),\n"
                "  but the pool keeps every layer for every position: one %" PRId64 "-token sequence"
                " takes %s (%s if local layers kept only their window)\n",
                p->n_swa_layers, p->n_layers, p->swa_window, p->kv_swa_bytes_per_token,
                p->max_seq_len, human(p->kv_bytes_per_seq_full, a, sizeof a),
                human(p->kv_bytes_per_seq_windowed, b, sizeof b));
    if (!p->fits && p->kv_blocks == 0) {
        fprintf(fp, "DOES NOT FIT: %s; short by %s\n", p->reason, human(p->shortfall_bytes, a, sizeof a));
        return;
    }
    fprintf(fp, "KV pool: %" PRIu64 " blocks of %" PRId64 " tokens = %" PRIu64 " tokens (%s)\n",
            p->kv_blocks, p->block_size, p->kv_tokens, human(p->kv_pool_bytes, a, sizeof a));
    for (int i = 0; i < PAGODA_MEMPLAN_N_FIT; i++) {
        if (p->fit[i].exceeds)
            fprintf(fp, "  sequences of %6" PRId64 " tokens: exceeds max_seq_len\n", p->fit[i].len);
        else
            fprintf(fp, "  sequences of %6" PRId64 " tokens: %" PRIu64 "\n", p->fit[i].len, p->fit[i].seqs);
    }
    if (!p->fits) fprintf(fp, "DOES NOT FIT: %s; short by %s\n", p->reason, human(p->shortfall_bytes, a, sizeof a));
    else fprintf(fp, "fits\n");
}

char *pagoda_memplan_json(const pagoda_memplan *p)
{
    if (!p) return NULL;
    json_t *root = json_object(), *wt = json_object(), *fit = json_array();
    char *out = NULL;
    if (!root || !wt || !fit) goto out;
    for (int t = 0; t < PAGODA_DTYPE_COUNT_; t++)
        if (p->weight_bytes_by_type[t])
            json_object_set_new(wt, pagoda_dtype_name(t),
                                json_pack("{s:I,s:I}", "bytes", (json_int_t)p->weight_bytes_by_type[t],
                                          "params", (json_int_t)p->weight_params_by_type[t]));
    for (int i = 0; i < PAGODA_MEMPLAN_N_FIT; i++) {
        json_t *e = json_pack("{s:I,s:b,s:I}", "len", (json_int_t)p->fit[i].len, "exceeds_max_seq_len",
                              p->fit[i].exceeds, "seqs", (json_int_t)p->fit[i].seqs);
        json_array_append_new(fit, e);
    }
    json_object_set_new(root, "model", json_pack(
        "{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "arch", p->arch, "n_layers", (json_int_t)p->n_layers,
        "dim", (json_int_t)p->dim, "n_heads", (json_int_t)p->n_heads, "n_kv_heads", (json_int_t)p->n_kv_heads,
        "head_dim", (json_int_t)p->head_dim, "ffn", (json_int_t)p->ffn, "vocab", (json_int_t)p->vocab,
        "context", (json_int_t)p->context, "n_params", (json_int_t)p->n_params));
    json_object_set_new(root, "limits", json_pack(
        "{s:s,s:I,s:I,s:I,s:I}", "kv_dtype", pagoda_dtype_name(p->kv_dtype), "max_seq_len",
        (json_int_t)p->max_seq_len, "max_batched_tokens", (json_int_t)p->max_batched_tokens,
        "max_num_seqs", (json_int_t)p->max_num_seqs, "block_size", (json_int_t)p->block_size));
    json_object_set(root, "weights_by_type", wt);
    json_object_set_new(root, "bytes", json_pack(
        "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "weights", (json_int_t)p->weight_bytes,
        "activations", (json_int_t)p->act_bytes, "logits", (json_int_t)p->logits_bytes,
        "workspace", (json_int_t)p->workspace_bytes, "quant_scratch", (json_int_t)p->qscratch_bytes,
        "attention_scratch", (json_int_t)p->att_scratch_bytes, "overhead", (json_int_t)p->overhead_bytes,
        "fixed", (json_int_t)p->fixed_bytes, "budget", (json_int_t)p->budget_bytes));
    json_object_set_new(root, "kv", json_pack(
        "{s:s,s:f,s:i,s:i,s:I,s:I,s:I,s:I,s:I}", "dtype", pagoda_dtype_name(p->kv_dtype),
        "value_bytes", p->kv_value_bytes, "block_values", p->kv_block_values, "block_bytes",
        p->kv_block_bytes, "bytes_per_token",
        (json_int_t)p->kv_bytes_per_token, "bytes_per_block", (json_int_t)p->kv_bytes_per_block,
        "pool_bytes", (json_int_t)p->kv_pool_bytes, "blocks", (json_int_t)p->kv_blocks, "tokens",
        (json_int_t)p->kv_tokens));
    json_object_set_new(json_object_get(root, "kv"), "sliding_window", json_pack(
        "{s:I,s:I,s:I,s:I,s:I}", "layers", (json_int_t)p->n_swa_layers, "window",
        (json_int_t)p->swa_window, "bytes_per_token", (json_int_t)p->kv_swa_bytes_per_token,
        "bytes_per_seq_full", (json_int_t)p->kv_bytes_per_seq_full, "bytes_per_seq_windowed",
        (json_int_t)p->kv_bytes_per_seq_windowed));
    json_object_set(root, "sequences", fit);
    json_object_set_new(root, "budget_auto", json_boolean(p->budget_auto));
    json_object_set_new(root, "mem_available", json_integer((json_int_t)p->mem_available));
    json_object_set_new(root, "fits", json_boolean(p->fits));
    json_object_set_new(root, "shortfall_bytes", json_integer((json_int_t)p->shortfall_bytes));
    json_object_set_new(root, "reason", json_string(p->reason));
    out = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
out:
    json_decref(root);
    json_decref(wt);
    json_decref(fit);
    return out;
}

/* ------------------------------------------------------------ CLI */

static void plan_usage(FILE *f)
{
    fprintf(f, "usage: pagoda plan --model FILE [--memory SIZE] [--kv-dtype f16|q8_0|f32]\n"
               "                   [--max-seq-len N] [--max-batched-tokens N] [--max-num-seqs N]\n"
               "                   [--block-size N] [--json]\n"
               "Reads only the GGUF header and prints what memory the model needs and how\n"
               "many KV blocks and sequences the budget leaves room for. SIZE: 512M, 8G, ...\n"
               "(default: %.0f%% of MemAvailable). Exit 0 when it fits, 1 when not.\n",
            PAGODA_MEMPLAN_UTIL * 100);
}

static int parse_i64(const char *v, int64_t *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || !*v || *end || x < 1) return -1;
    *out = x;
    return 0;
}

int pagoda_cmd_plan(int argc, char **argv)
{
    pagoda_memplan_opts o;
    pagoda_memplan_opts_default(&o);
    const char *model = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { plan_usage(stdout); return 0; }
        if (!strcmp(a, "--json")) { json = true; continue; }
        const char *eq = strchr(a, '=');
        size_t alen = eq ? (size_t)(eq - a) : strlen(a);
        if (eq) v = eq + 1;
        else if (i + 1 < argc) v = argv[++i];
        if (!v) {
            fprintf(stderr, "pagoda plan: %s needs a value\n", a);
            plan_usage(stderr);
            return 2;
        }
        int bad = 0;
#define OPT(s) (alen == strlen(s) && strncmp(a, s, alen) == 0)
        if (OPT("--model")) model = v;
        else if (OPT("--memory")) bad = pagoda_parse_size(v, &o.memory_budget) || !o.memory_budget;
        else if (OPT("--kv-dtype")) {
            if (!strcasecmp(v, "f16")) o.kv_dtype = PAGODA_DTYPE_F16;
            else if (!strcasecmp(v, "f32")) o.kv_dtype = PAGODA_DTYPE_F32;
            else if (!strcasecmp(v, "q8_0")) o.kv_dtype = PAGODA_DTYPE_Q8_0;
            else bad = 1;
        } else if (OPT("--max-seq-len")) bad = parse_i64(v, &o.max_seq_len);
        else if (OPT("--max-batched-tokens")) bad = parse_i64(v, &o.max_batched_tokens);
        else if (OPT("--max-num-seqs")) bad = parse_i64(v, &o.max_num_seqs);
        else if (OPT("--block-size")) bad = parse_i64(v, &o.block_size);
        else {
            fprintf(stderr, "pagoda plan: unknown option %.*s\n", (int)alen, a);
            plan_usage(stderr);
            return 2;
        }
#undef OPT
        if (bad) {
            fprintf(stderr, "pagoda plan: bad value for %.*s: '%s'\n", (int)alen, a, v);
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "pagoda plan: --model FILE is required\n");
        plan_usage(stderr);
        return 2;
    }
    char err[1024];
    gguf_file *f = pagoda_gguf_open(model, err, sizeof err);
    if (!f) {
        fprintf(stderr, "pagoda plan: %s\n", err);
        return 1;
    }
    pagoda_memplan p;
    int st = pagoda_memplan_compute(f, &o, &p, err, sizeof err);
    pagoda_gguf_close(f);
    if (st) {
        fprintf(stderr, "pagoda plan: %s\n", err);
        return 1;
    }
    if (json) {
        char *s = pagoda_memplan_json(&p);
        if (!s) {
            fprintf(stderr, "pagoda plan: out of memory\n");
            return 1;
        }
        printf("%s\n", s);
        free(s);
    } else {
        printf("%s\n", model);
        pagoda_memplan_print(&p, stdout);
    }
    return p.fits ? 0 : 1;
}
