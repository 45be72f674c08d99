/*
 * memplan.c: the memory plan from a GGUF header (see memplan.h). All sizes
 * come from header fields and tensor infos; no weight byte is read, so
 * `pagoda plan` answers in a fraction of a second for any model size
 * (0.17 s for SmolLM2, most of it building the tokenizer and the backend
 * the server would build). Arithmetic on
 * header values is overflow-checked: a hostile header gets an error, not
 * a wrapped plan.
 * `pagoda plan` (the CLI at the end) builds a config from its options and
 * asks the runtime for the plan the server would make (pagoda_runtime_plan),
 * so the two agree to the token.
 * Not for: allocation, or deciding policy (the engine does that from it).
 */
#define _GNU_SOURCE
#include "memplan.h"

#include "config.h" /* pagoda_parse_size */
#include "memplan_weights.h" /* weights by type, experts, active parameters, decode bytes */
#include "forward.h" /* the MLA decompressed prefill's sizes */
#include "model.h"  /* pagoda_hparams_read: which layers slide */
#include "runtime.h" /* pagoda_runtime_plan: `pagoda plan` plans as the server does */
#include "tp_shard.h" /* what tensor parallelism splits */

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
    /* which layers slide, and a mixture of experts' widths, as the model
     * binds them (model.c): the forward pass sizes its buffers from these */
    pagoda_hparams hp = {0};
    int64_t key_e = 0;
    bool moe_keys = get_arch_int(f, p->arch, "expert_count", &key_e) && key_e > 0;
    if (!strcmp(p->arch, "gemma3") || !strcmp(p->arch, "deepseek2") || moe_keys) {
        int st = pagoda_hparams_read(f, &hp, err, n);
        if (st) return st;
        p->n_swa_layers = hp.n_swa_layers;
        p->swa_window = hp.swa_window;
        p->attn_sinks = hp.attn_sinks;
        p->attn_out_bias = hp.attn_out_bias;
        p->exp_bias = hp.exp_bias;
    }
    p->kv_planes = 2;
    if (hp.mla) {
        /* one row a token and layer, the key and the value (val_len 0) */
        p->mla = true;
        p->kv_lora_rank = hp.kv_lora_rank;
        p->qk_rope = hp.rope_dims;
        p->qk_nope = hp.qk_nope;
        p->v_head_dim = hp.v_head_dim;
        p->kv_planes = o.kv_no_latent ? 2 : 1;
        val_len = o.kv_no_latent ? p->head_dim : 0;
    }

    /* --- tensor parallelism: the model must split N ways; the rank's
     * heads, KV heads and FFN rows size what follows */
    p->tensor_parallel = o.tensor_parallel > 1 ? o.tensor_parallel : 1;
    int64_t tp = p->tensor_parallel;
    if (tp > 1) {
        pagoda_tp_dims td = {.n_heads = p->n_heads, .n_kv_heads = p->n_kv_heads, .ffn = p->ffn,
                             .n_swa_layers = p->n_swa_layers, .n_experts = hp.n_experts,
                             .n_dense_lead = hp.n_dense_lead, .mla = p->mla};
        int st = pagoda_tp_check(f, &td, (int32_t)tp, err, n);
        if (st) return st;
    }
    /* MLA: the latent row is replicated on every rank (each rank's heads
     * read all of it), so a rank's pool holds the whole row a token */
    int64_t heads_r = p->n_heads / tp, kv_heads_r = p->mla ? p->n_kv_heads : p->n_kv_heads / tp;
    int64_t ffn_r = p->ffn / tp;

    /* --- weights: every tensor in the file, by type; the experts, the
     * active parameters and the bytes a decoded token reads */
    int wst = pagoda_memplan_weights(f, &o, tp, p, err, n);
    if (wst) return wst;

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
    /* --- KV per token of one layer: kv_heads x (key + value length) x
     * bytes per value, the KV type's kv_block_bytes per kv_block_values
     * values (both lengths are whole blocks, checked above); with key =
     * value = head_dim, 2 x kv_heads x head_dim x bytes. The window pool's
     * layers are stored in the same type, so per_layer holds for them too. */
    uint64_t per_layer = (uint64_t)kv_heads_r;
    ok &= mulu(&per_layer, (uint64_t)((p->head_dim + val_len) / p->kv_block_values));
    ok &= mulu(&per_layer, (uint64_t)p->kv_block_bytes);
    if (p->mla) {
        /* plain MHA of the same heads: keys of nope + rope, values of v */
        uint64_t mha = (uint64_t)p->n_heads;
        ok &= mulu(&mha, (uint64_t)(p->qk_nope + p->qk_rope + p->v_head_dim));
        ok &= mulu(&mha, (uint64_t)p->n_layers);
        p->mha_bytes_per_token = (uint64_t)((double)mha * p->kv_value_bytes);
    }
    uint64_t kv_all = per_layer;                  /* every layer */
    ok &= mulu(&kv_all, (uint64_t)p->n_layers);
    p->kv_bytes_per_token_full = kv_all;
    /* sliding-window layers: with a window pool, the main pool holds the
     * global layers only (engine_swa.h: the geometry the engine uses) */
    if (ok && p->n_swa_layers > 0) {
        int st = pagoda_swa_geometry_compute((int32_t)p->n_layers, (int32_t)p->n_swa_layers,
                                             (int32_t)p->swa_window, (int32_t)p->block_size,
                                             (int32_t)p->max_seq_len, (int32_t)p->max_num_seqs,
                                             (int32_t)p->max_batched_tokens, o.swa_kv, &p->swa,
                                             err, n);
        if (st) return st;
        p->kv_swa_bytes_per_token = per_layer * (uint64_t)p->n_swa_layers;
    }
    p->kv_pool_layers = p->swa.window ? p->swa.n_global : p->n_layers;
    uint64_t kv = per_layer * (uint64_t)p->kv_pool_layers;
    p->kv_bytes_per_token = kv;
    uint64_t kvb = kv;
    ok &= mulu(&kvb, (uint64_t)p->block_size);
    p->kv_bytes_per_block = kvb;
    uint64_t kvb_all = kv_all;
    ok &= mulu(&kvb_all, (uint64_t)p->block_size);
    uint64_t seq_blocks = (uint64_t)((p->max_seq_len + p->block_size - 1) / p->block_size);
    p->kv_bytes_per_seq_full = seq_blocks * kvb_all;
    p->kv_bytes_per_seq = seq_blocks * kvb;
    if (ok && p->swa.window) {
        p->swa_block_bytes = per_layer * (uint64_t)p->swa.n_local * (uint64_t)p->block_size;
        p->swa_pool_bytes = p->swa_block_bytes;
        ok &= mulu(&p->swa_pool_bytes, (uint64_t)p->swa.pool_blocks);
        p->kv_sink_bytes = kvb * (uint64_t)p->swa.sink_blocks;
        p->kv_bytes_per_seq += p->swa_block_bytes * (uint64_t)p->swa.hold_blocks;
    }

    /* --- activations, F32, for one forward pass of max_batched_tokens, as
     * forward.c carves them (pagoda_forward_act_bytes; test_memplan checks
     * the two agree):
     *   x, xb, xb2 [T x dim]    residual stream, normed input, projection out
     *   q, att     [T x q_dim]  queries and the attention read-out
     *   k, v       [T x kv_dim] this step's keys and values before kv_write
     *   hb, hb2    [T x ffn]    gate and up projections (SwiGLU in place)
     * = T x (3*dim + 2*q_dim + 2*kv_dim + 2*ffn) floats, plus for the
     *   max_num_seqs rows sampling this step (and speculative decoding's
     *   draft positions) their final-normed rows [S x dim] and logits
     *   [S x vocab], and 64 bytes of alignment per tensor (11;
     *   with experts, below, 17). */
    uint64_t q_dim = (uint64_t)(heads_r * p->head_dim), kv_dim = (uint64_t)(kv_heads_r * p->head_dim);
    /* A mixture of experts: hb, hb2 are as wide as the dense FFN where a
     * layer has one, and the shared expert (the rank's rows of each), and
     * per token come the router logits [E], the k (token, expert) pairs'
     * gate, up [ffn_exp] and output [dim] rows, and the shared expert's
     * output before its gate [dim]: 5 tensors more; and one for the
     * pairs' expert biases [max(ffn_exp, dim)] (gpt-oss): 17 in all. */
    uint64_t hb = (uint64_t)ffn_r, moe_floats = 0, n_act = 11;
    if (hp.n_experts > 0) {
        hb = hp.n_dense_lead > 0 ? (uint64_t)ffn_r : 0;
        uint64_t sh = (uint64_t)hp.ffn_shexp / (uint64_t)tp;
        if (sh > hb) hb = sh;
        moe_floats = (uint64_t)hp.n_experts +
                     (uint64_t)hp.n_experts_used * (2 * (uint64_t)hp.ffn_exp + (uint64_t)p->dim) +
                     (hp.ffn_shexp > 0 ? (uint64_t)p->dim : 0);
        if (hp.exp_bias)
            moe_floats += (uint64_t)hp.n_experts_used *
                          (uint64_t)(hp.ffn_exp > p->dim ? hp.ffn_exp : p->dim);
        n_act = 17;
        ffn_r = (int64_t)(hb > (uint64_t)hp.ffn_exp ? hb : (uint64_t)hp.ffn_exp);  /* widest input row */
    }
    p->act_floats_per_token = 3 * (uint64_t)p->dim + 2 * q_dim + 2 * kv_dim + 2 * hb + moe_floats;
    if (p->mla) {
        /* forward.c: q as wide as the widest of q_dim, heads x (nope + rope)
         * and heads x v; the query LoRA's output and the absorbed queries */
        uint64_t qw = q_dim, qh = (uint64_t)(heads_r * (p->qk_nope + p->qk_rope));
        uint64_t vh = (uint64_t)(heads_r * p->v_head_dim);
        if (qh > qw) qw = qh;
        if (vh > qw) qw = vh;
        p->act_floats_per_token += qw - q_dim + (uint64_t)hp.q_lora_rank + q_dim;
        n_act += 2;
    }
    uint64_t act = p->act_floats_per_token;
    ok &= mulu(&act, (uint64_t)p->max_batched_tokens);
    ok &= mulu(&act, 4);
    uint64_t logits = (uint64_t)p->max_num_seqs + (uint64_t)(o.spec_logit_rows > 0 ? o.spec_logit_rows : 0);
    ok &= mulu(&logits, (uint64_t)p->vocab + (uint64_t)p->dim);
    ok &= mulu(&logits, 4);
    p->logits_bytes = logits;
    ok &= addu(&act, logits);
    ok &= addu(&act, n_act * 64);
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
    ok &= mulu(&qs, (uint64_t)(p->dim > ffn_r ? p->dim : ffn_r));
    ok &= mulu(&qs, 4);
    p->qscratch_bytes = qs;
    uint64_t as = (uint64_t)p->max_num_seqs;
    ok &= mulu(&as, (uint64_t)heads_r);
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
    p->draft_weight_bytes = o.draft_weight_bytes;
    p->draft_kv_bytes = o.draft_kv_bytes;
    p->draft_act_bytes = o.draft_act_bytes;
    p->draft_seats = o.draft_seats;
    p->draft_seq_len = o.draft_seq_len;
    p->draft_repacked_bytes = o.draft_repacked_bytes;
    ok &= addu(&p->fixed_bytes, p->draft_repacked_bytes);
    ok &= addu(&p->fixed_bytes, p->draft_weight_bytes);
    ok &= addu(&p->fixed_bytes, p->draft_kv_bytes);
    ok &= addu(&p->fixed_bytes, p->draft_act_bytes);
    ok &= addu(&p->fixed_bytes, p->repacked_bytes);   /* from the weights walk */
    if (p->mla) {
        /* what pagoda_forward_mla_decompress makes (the same functions) */
        pagoda_hparams hr = hp;
        hr.n_heads = (int32_t)heads_r;
        if (pagoda_mla_decompress_on(&hr, (int32_t)p->max_batched_tokens, o.mla_decompress_min)) {
            p->mla_decompress_min = o.mla_decompress_min;
            for (int64_t l = 0; l < p->n_layers; l++) {
                char name[64];
                snprintf(name, sizeof name, "blk.%" PRId64 ".attn_k_b.weight", l);
                const gguf_tensor *t = pagoda_gguf_tensor(f, name);
                if (!t) continue;
                if (l == 0) p->mla_kbt_dtype = pagoda_mla_kbt_dtype(t->type);
                p->mla_kbt_bytes += (pagoda_mla_kbt_layer_bytes(&hr, t->type) + 63) / 64 * 64;
            }
            int64_t ctx = o.mla_decompress_ctx < p->max_seq_len ? o.mla_decompress_ctx : p->max_seq_len;
            p->mla_scratch_tokens = pagoda_mla_scratch_tokens((int32_t)p->max_batched_tokens, (int32_t)ctx);
            p->mla_scratch_bytes = pagoda_mla_scratch_bytes(&hr, p->mla_scratch_tokens,
                                                            (int32_t)p->max_batched_tokens, o.kv_dtype);
            ok &= addu(&p->fixed_bytes, p->mla_kbt_bytes);
            ok &= addu(&p->fixed_bytes, p->mla_scratch_bytes);
        }
    }
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

    /* the window pool and the sink are fixed: the budget pays them first */
    uint64_t kv_fixed = p->swa_pool_bytes + p->kv_sink_bytes;
    uint64_t need_one = seq_blocks * kvb;
    if (!addu(&need_one, kv_fixed)) {
        snprintf(err, n, "%s: model dimensions overflow the memory plan", fname);
        return PAGODA_ERR_INVALID;
    }
    for (int i = 0; i < PAGODA_MEMPLAN_N_FIT; i++) {
        p->fit[i].len = fit_lens[i];
        p->fit[i].exceeds = fit_lens[i] > p->max_seq_len;
    }
    if (p->fixed_bytes > p->budget_bytes) {
        p->shortfall_bytes = p->fixed_bytes - p->budget_bytes + need_one;
        char rp[64] = "";
        if (p->repacked_bytes)
            snprintf(rp, sizeof rp, " + repacked weights (%" PRIu64 " bytes)", p->repacked_bytes);
        snprintf(p->reason, sizeof p->reason,
                 "weights + activations + workspace + overhead%s%s need %" PRIu64 " bytes, the budget is %" PRIu64,
                 p->draft_weight_bytes ? " + the draft model" : "", rp, p->fixed_bytes, p->budget_bytes);
    } else {
        uint64_t avail = p->budget_bytes - p->fixed_bytes;
        pagoda_memplan_set_pool(p, avail > kv_fixed ? (avail - kv_fixed) / kvb : 0);
        if (p->fits && p->kv_tokens < (uint64_t)p->max_seq_len) {
            p->fits = false;
            p->shortfall_bytes = need_one - p->kv_total_bytes;
            snprintf(p->reason, sizeof p->reason,
                     "the KV pool holds %" PRIu64 " tokens, fewer than one sequence of max_seq_len %" PRId64,
                     p->kv_tokens, p->max_seq_len);
        }
    }
    return PAGODA_OK;
}

void pagoda_memplan_set_pool(pagoda_memplan *p, uint64_t blocks)
{
    uint64_t kvb = p->kv_bytes_per_block, bs = (uint64_t)p->block_size;
    uint64_t kv_fixed = p->swa_pool_bytes + p->kv_sink_bytes;
    p->kv_blocks = blocks;
    p->kv_tokens = blocks * bs;
    p->kv_pool_bytes = blocks * kvb;
    p->kv_total_bytes = p->kv_pool_bytes + kv_fixed;
    uint64_t need = p->fixed_bytes + p->kv_total_bytes;
    p->fits = false;
    p->reason[0] = 0;
    p->shortfall_bytes = 0;
    if (p->budget_bytes && need > p->budget_bytes) {
        p->shortfall_bytes = need - p->budget_bytes;
        char rp[64] = "";
        if (p->repacked_bytes)
            snprintf(rp, sizeof rp, ", of which repacked weights %.1f MiB",
                     (double)p->repacked_bytes / 1048576.0);
        snprintf(p->reason, sizeof p->reason,
                 "weights, activations, workspace and overhead (%.1f MiB%s) plus the KV pool of "
                 "%" PRIu64 " tokens (%.1f MiB) need %.1f MiB, the budget is %.1f MiB",
                 (double)p->fixed_bytes / 1048576.0, rp, p->kv_tokens,
                 (double)p->kv_total_bytes / 1048576.0, (double)need / 1048576.0,
                 (double)p->budget_bytes / 1048576.0);
    } else {
        p->fits = true;
    }
    /* the same KV bytes with every layer at every position, for comparison */
    uint64_t blocks_full = p->kv_total_bytes / (p->kv_bytes_per_token_full * bs);
    for (int i = 0; i < PAGODA_MEMPLAN_N_FIT; i++) {
        uint64_t per = (uint64_t)((p->fit[i].len + p->block_size - 1) / p->block_size);
        p->fit[i].seqs = p->fit[i].exceeds ? 0 : p->kv_blocks / per;
        p->fit[i].seqs_full = p->fit[i].exceeds ? 0 : blocks_full / per;
    }
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
    if (p->tensor_parallel > 1 && p->n_experts)
        fprintf(fp, "tensor parallel: %" PRId64 " ranks; each holds %" PRId64 " heads, %" PRId64
                " KV heads and %" PRId64 " of the %" PRId64 " experts a MoE layer, whole (shared "
                "experts and dense layers split by rows): every figure below is one rank's\n",
                p->tensor_parallel, p->n_heads / p->tensor_parallel,
                p->n_kv_heads / p->tensor_parallel, p->experts_per_rank, p->n_experts);
    else if (p->tensor_parallel > 1)
        fprintf(fp, "tensor parallel: %" PRId64 " ranks; each holds %" PRId64 " heads, %" PRId64
                " KV heads and %" PRId64 " FFN rows a layer: every figure below is one rank's\n",
                p->tensor_parallel, p->n_heads / p->tensor_parallel,
                p->n_kv_heads / p->tensor_parallel, p->ffn / p->tensor_parallel);
    if (p->tensor_parallel > 1 && (p->attn_sinks || p->attn_out_bias || p->exp_bias || p->n_swa_layers)) {
        /* gpt-oss's extras and the window pool (tp_shard.h) */
        const char *part[4] = {
            p->attn_sinks ? "the attention sinks of its heads (one a head)" : NULL,
            p->exp_bias ? "its experts' gate/up/down biases (the router's bias whole)" : NULL,
            p->attn_out_bias ? "attn_output.bias whole (rank 0 adds it once, before the all-reduce)" : NULL,
            !p->n_swa_layers ? NULL
            : p->swa.window ? "its KV heads of the sliding-window layers, in a window pool of its own"
                            : "its KV heads of the sliding-window layers, in the main pool"};
        fprintf(fp, "  a rank of %" PRId64 " also holds", p->tensor_parallel);
        for (int i = 0, k = 0; i < 4; i++)
            if (part[i]) fprintf(fp, "%s%s", k++ ? "; " : ": ", part[i]);
        fprintf(fp, "\n");
    }
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
    fprintf(fp, "  %-28s %16" PRIu64 " %14s   (%.1fM params)\n", "weights total",
            p->weight_bytes_model, human(p->weight_bytes_model, a, sizeof a),
            (double)p->n_params / 1e6);
    if (p->tensor_parallel > 1)
        fprintf(fp, "  %-28s %16" PRIu64 " %14s   (split tensors / %" PRId64 ", the rest whole)\n",
                "weights per rank", p->weight_bytes, human(p->weight_bytes, a, sizeof a),
                p->tensor_parallel);
    fprintf(fp, "  %-28s %16" PRIu64 " %14s   (%" PRIu64 " f32/token + logits %s)\n", "activations",
            p->act_bytes, human(p->act_bytes, a, sizeof a), p->act_floats_per_token,
            human(p->logits_bytes, b, sizeof b));
    fprintf(fp, "  %-28s %16" PRIu64 " %14s\n", "workspace", p->workspace_bytes,
            human(p->workspace_bytes, a, sizeof a));
    fprintf(fp, "  %-28s %16" PRIu64 " %14s\n", "runtime overhead", p->overhead_bytes,
            human(p->overhead_bytes, a, sizeof a));
    if (p->repacked_bytes)
        fprintf(fp, "  %-28s %16" PRIu64 " %14s   (%.2f bytes a weight; upper bound; the backend's start-up"
                    " line says when copies are made)\n",
                "repacked weights (backend)", p->repacked_bytes, human(p->repacked_bytes, a, sizeof a),
                p->repacked_weight_values ? (double)p->repacked_bytes / (double)p->repacked_weight_values : 0.0);
    if (p->mla_decompress_min) {
        fprintf(fp, "  %-28s %16" PRIu64 " %14s   (decompressed prefill from %d tokens: every "
                    "layer's attn_k_b transposed, %s)\n", "MLA attn_k_b transposed", p->mla_kbt_bytes,
                human(p->mla_kbt_bytes, a, sizeof a), p->mla_decompress_min,
                pagoda_dtype_name(p->mla_kbt_dtype));
        fprintf(fp, "  %-28s %16" PRIu64 " %14s   (K and V of %d tokens of context x %" PRId64
                    " heads x %" PRId64 " values in the KV type, and %" PRId64 " F32 latent rows; "
                    "a longer context stays absorbed)\n", "MLA decompression scratch",
                p->mla_scratch_bytes, human(p->mla_scratch_bytes, a, sizeof a),
                p->mla_scratch_tokens, p->n_heads / p->tensor_parallel,
                p->qk_nope + p->qk_rope, p->max_batched_tokens);
    }
    if (p->draft_weight_bytes) {
        fprintf(fp, "  %-28s %16" PRIu64 " %14s   (speculative = draft)\n", "draft model weights",
                p->draft_weight_bytes, human(p->draft_weight_bytes, a, sizeof a));
        fprintf(fp, "  %-28s %16" PRIu64 " %14s   (%d seats of %d tokens, F32)\n", "draft model KV pool",
                p->draft_kv_bytes, human(p->draft_kv_bytes, a, sizeof a), p->draft_seats,
                p->draft_seq_len);
        fprintf(fp, "  %-28s %16" PRIu64 " %14s\n", "draft model activations", p->draft_act_bytes,
                human(p->draft_act_bytes, a, sizeof a));
        if (p->draft_repacked_bytes)
            fprintf(fp, "  %-28s %16" PRIu64 " %14s   (the backend's copies of its weights; upper"
                        " bound)\n", "draft model repacked", p->draft_repacked_bytes,
                    human(p->draft_repacked_bytes, a, sizeof a));
    }
    fprintf(fp, "  %-28s %16" PRIu64 " %14s\n", "fixed total", p->fixed_bytes,
            human(p->fixed_bytes, a, sizeof a));
    if (p->budget_auto)
        fprintf(fp, "  %-28s %16" PRIu64 " %14s   (auto: %.0f%% of MemAvailable %s)\n", "budget",
                p->budget_bytes, human(p->budget_bytes, a, sizeof a), PAGODA_MEMPLAN_UTIL * 100,
                human(p->mem_available, b, sizeof b));
    else
        fprintf(fp, "  %-28s %16" PRIu64 " %14s\n", "budget", p->budget_bytes,
                human(p->budget_bytes, a, sizeof a));
    pagoda_memplan_weights_print(p, fp);
    if (p->mla)
        fprintf(fp, "\nKV cache: %" PRIu64 " bytes/token = %s%" PRId64 " layers x (%" PRId64
                " kv_lora_rank + %" PRId64 " qk_rope_head_dim) x %g bytes (multi-head latent "
                "attention: one latent row a token and layer, shared by the %" PRId64 " heads%s)\n"
                "  plain MHA of the same heads would take %" PRIu64 " bytes/token = %" PRId64
                " layers x %" PRId64 " heads x (%" PRId64 " key + %" PRId64 " value) x %g bytes: "
                "%.1fx more, so the pool holds %.1fx the tokens",
                p->kv_bytes_per_token, p->kv_planes == 2 ? "2 (kept as K and V) x " : "",
                p->kv_pool_layers, p->kv_lora_rank, p->qk_rope, p->kv_value_bytes, p->n_heads,
                p->kv_planes == 2 ? "; this backend has no latent layout" : "",
                p->mha_bytes_per_token, p->n_layers, p->n_heads, p->qk_nope + p->qk_rope,
                p->v_head_dim, p->kv_value_bytes,
                (double)p->mha_bytes_per_token / (double)p->kv_bytes_per_token,
                (double)p->mha_bytes_per_token / (double)p->kv_bytes_per_token);
    else
    fprintf(fp, "\nKV cache: %" PRIu64 " bytes/token = 2 x %" PRId64 " %slayers x %" PRId64
            " kv_heads x %" PRId64 " head_dim x %g bytes",
            p->kv_bytes_per_token, p->kv_pool_layers, p->swa.window ? "global " : "",
            p->n_kv_heads / p->tensor_parallel, p->head_dim, p->kv_value_bytes);
    if (p->kv_block_values > 1)
        fprintf(fp, " (%s: %d bytes per %d values; %.2fx the tokens of F16 in the same bytes)",
                pagoda_dtype_name(p->kv_dtype), p->kv_block_bytes, p->kv_block_values,
                2.0 / p->kv_value_bytes);
    fprintf(fp, "\n");
    if (p->mla && p->tensor_parallel > 1)
        fprintf(fp, "  with tensor_parallel = %" PRId64 ": every rank holds this whole latent row a token "
                "(replicated: its %" PRId64 " of the %" PRId64 " heads each read all of it; attn_q_a, "
                "attn_kv_a_mqa and their norms are whole on each rank too), and its heads' share of "
                "attn_q / attn_k_b / attn_v_b / attn_output; plain MHA would split its KV %" PRId64
                " ways, %" PRIu64 " bytes/token a rank\n",
                p->tensor_parallel, p->n_heads / p->tensor_parallel, p->n_heads, p->tensor_parallel,
                p->mha_bytes_per_token / (uint64_t)p->tensor_parallel);
    if (p->n_swa_layers > 0 && p->swa.window) {
        const pagoda_swa_geometry *g = &p->swa;
        fprintf(fp, "  sliding window: %" PRId64 " of %" PRId64 " layers read only their last %" PRId64
                " tokens and keep only those, in a pool of their own:\n"
                "    %d blocks of %" PRId64 " tokens = %s (%d seats x %d blocks a sequence holds + %d "
                "for a step's new tokens)\n"
                "    sink: %d blocks (%s) for prefix-cache hits, whose last %d tokens are recomputed\n",
                p->n_swa_layers, p->n_layers, p->swa_window, g->pool_blocks, p->block_size,
                human(p->swa_pool_bytes, a, sizeof a), g->seats, g->hold_blocks, g->step_blocks,
                g->sink_blocks, human(p->kv_sink_bytes, b, sizeof b), g->recompute_tokens);
    } else if (p->n_swa_layers > 0) {
        fprintf(fp, "  sliding window: %" PRId64 " of %" PRId64 " layers read only their last %" PRId64
                " tokens, but keep every position: %s\n", p->n_swa_layers, p->n_layers,
                p->swa_window, p->swa.why_full);
    }
    if (p->n_swa_layers > 0) {
        char c[32];
        fprintf(fp, "  one %" PRId64 "-token sequence: %s (every layer at every position: %s)\n",
                p->max_seq_len, human(p->kv_bytes_per_seq, a, sizeof a),
                human(p->kv_bytes_per_seq_full, c, sizeof c));
    }
    if (!p->fits && p->kv_blocks == 0) {
        fprintf(fp, "DOES NOT FIT: %s; short by %s\n", p->reason, human(p->shortfall_bytes, a, sizeof a));
        return;
    }
    fprintf(fp, "KV pool: %" PRIu64 " blocks of %" PRId64 " tokens = %" PRIu64 " tokens (%s)\n",
            p->kv_blocks, p->block_size, p->kv_tokens, human(p->kv_pool_bytes, a, sizeof a));
    bool cmp = p->n_swa_layers > 0 && p->swa.window;
    if (cmp)
        fprintf(fp, "  KV in all: %s (the pool, the sink and the window pool); at most %" PRId64
                " sequences run at once (max_num_seqs)\n", human(p->kv_total_bytes, a, sizeof a),
                p->max_num_seqs);
    for (int i = 0; i < PAGODA_MEMPLAN_N_FIT; i++) {
        if (p->fit[i].exceeds)
            fprintf(fp, "  sequences of %6" PRId64 " tokens: exceeds max_seq_len\n", p->fit[i].len);
        else if (cmp)
            fprintf(fp, "  sequences of %6" PRId64 " tokens: %" PRIu64 " (every layer at every "
                    "position: %" PRIu64 ")\n", p->fit[i].len, p->fit[i].seqs, p->fit[i].seqs_full);
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
        json_t *e = json_pack("{s:I,s:b,s:I,s:I}", "len", (json_int_t)p->fit[i].len,
                              "exceeds_max_seq_len", p->fit[i].exceeds, "seqs",
                              (json_int_t)p->fit[i].seqs, "seqs_every_layer_full",
                              (json_int_t)p->fit[i].seqs_full);
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
    json_object_set_new(json_object_get(root, "bytes"), "repacked", json_integer((json_int_t)p->repacked_bytes));
    if (p->mla_decompress_min)
        json_object_set_new(json_object_get(root, "bytes"), "mla_decompress", json_pack(
            "{s:i,s:i,s:I,s:I}", "min_tokens", p->mla_decompress_min, "max_context",
            p->mla_scratch_tokens, "kb_transposed", (json_int_t)p->mla_kbt_bytes, "scratch",
            (json_int_t)p->mla_scratch_bytes));
    if (p->draft_weight_bytes)
        json_object_set_new(json_object_get(root, "bytes"), "draft_model", json_pack(
            "{s:I,s:I,s:I,s:I,s:i,s:i}", "weights", (json_int_t)p->draft_weight_bytes, "kv_pool",
            (json_int_t)p->draft_kv_bytes, "activations", (json_int_t)p->draft_act_bytes, "repacked",
            (json_int_t)p->draft_repacked_bytes, "seats", p->draft_seats, "seq_len", p->draft_seq_len));
    json_object_set_new(root, "kv", json_pack(
        "{s:s,s:f,s:i,s:i,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "dtype", pagoda_dtype_name(p->kv_dtype),
        "value_bytes", p->kv_value_bytes, "block_values", p->kv_block_values, "block_bytes",
        p->kv_block_bytes, "pool_layers", (json_int_t)p->kv_pool_layers, "bytes_per_token",
        (json_int_t)p->kv_bytes_per_token, "bytes_per_block", (json_int_t)p->kv_bytes_per_block,
        "pool_bytes", (json_int_t)p->kv_pool_bytes, "blocks", (json_int_t)p->kv_blocks, "tokens",
        (json_int_t)p->kv_tokens, "total_bytes", (json_int_t)p->kv_total_bytes,
        "bytes_per_seq", (json_int_t)p->kv_bytes_per_seq));
    const pagoda_swa_geometry *g = &p->swa;
    json_object_set_new(json_object_get(root, "kv"), "sliding_window", json_pack(
        "{s:I,s:I,s:I,s:b,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "layers",
        (json_int_t)p->n_swa_layers, "window", (json_int_t)p->swa_window, "bytes_per_token",
        (json_int_t)p->kv_swa_bytes_per_token, "window_pool", g->window, "why_full", g->why_full,
        "pool_blocks", (json_int_t)g->pool_blocks, "pool_bytes", (json_int_t)p->swa_pool_bytes,
        "seats", (json_int_t)g->seats, "hold_blocks", (json_int_t)g->hold_blocks, "step_blocks",
        (json_int_t)g->step_blocks, "sink_blocks", (json_int_t)g->sink_blocks, "sink_bytes",
        (json_int_t)p->kv_sink_bytes, "recompute_tokens", (json_int_t)g->recompute_tokens,
        "bytes_per_seq_full", (json_int_t)p->kv_bytes_per_seq_full, "bytes_per_seq",
        (json_int_t)p->kv_bytes_per_seq));
    json_object_set(root, "sequences", fit);
    /* one rank's share (the same figures as above; with one process, the
     * whole) */
    json_object_set_new(root, "tensor_parallel", json_integer((json_int_t)p->tensor_parallel));
    json_object_set_new(root, "per_rank", json_pack(
        "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:O}", "weights_bytes", (json_int_t)p->weight_bytes,
        "weights_bytes_model", (json_int_t)p->weight_bytes_model, "kv_bytes_per_token",
        (json_int_t)p->kv_bytes_per_token, "heads", (json_int_t)(p->n_heads / p->tensor_parallel),
        /* gpt-oss: its heads' sinks a layer (0: the model has none) */
        "attn_sinks", (json_int_t)(p->attn_sinks ? p->n_heads / p->tensor_parallel : 0), "kv_heads",
        (json_int_t)(p->mla ? p->n_kv_heads : p->n_kv_heads / p->tensor_parallel),
        "activations_bytes", (json_int_t)p->act_bytes, "kv_pool_tokens", (json_int_t)p->kv_tokens,
        "fixed_bytes", (json_int_t)p->fixed_bytes, "sequences", fit));
    json_object_set_new(root, "budget_auto", json_boolean(p->budget_auto));
    json_object_set_new(root, "mem_available", json_integer((json_int_t)p->mem_available));
    json_object_set_new(root, "fits", json_boolean(p->fits));
    json_object_set_new(root, "shortfall_bytes", json_integer((json_int_t)p->shortfall_bytes));
    json_object_set_new(root, "reason", json_string(p->reason));
    pagoda_memplan_weights_json(p, root);
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
    fprintf(f, "usage: pagoda plan [--config FILE] [--set SECTION.KEY=VALUE]... [--model FILE]\n"
               "                   [--memory SIZE|auto] [--kv-dtype f16|q8_0|f32] [--max-seq-len N]\n"
               "                   [--max-batched-tokens N] [--max-num-seqs N] [--block-size N]\n"
               "                   [--swa-kv window|full] [--tp N] [--json]\n"
               "Prints the memory plan the server would use with these settings, computed the\n"
               "way `pagoda --config` computes it (the model's header, the backend, the\n"
               "scheduler's limits, kv_cache_tokens, the cap on an automatic budget), without\n"
               "reading the weights. The options are shorthands: --model is engine.model,\n"
               "--memory engine.memory_budget (SIZE: 512M, 8G; auto: %.0f%% of MemAvailable,\n"
               "the pool then capped at max_num_seqs x max_seq_len), --kv-dtype engine.kv_dtype\n"
               "(q8_0: 34 bytes per 32 values, 1.88x the tokens of f16 in the same memory),\n"
               "--max-seq-len engine.max_seq_len, --block-size engine.block_size, --swa-kv\n"
               "engine.swa_kv (sliding-window models: local layers keep their window or all),\n"
               "--max-num-seqs and --max-batched-tokens the scheduler's [scheduler.NAME] keys,\n"
               "--tp engine.tensor_parallel (the plan of one of N ranks; JSON \"per_rank\").\n"
               "--set wins over them and they win over the file; without --config the\n"
               "defaults of an empty config apply. Exit 0 when it fits, 1 when not (or the\n"
               "model cannot be read), 2 for a usage or config error.\n",
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

/* section.key=value into c; 0 or -1 with the message printed. */
static int plan_set(pagoda_config *c, const char *section, const char *key, const char *value)
{
    char a[4200], err[1024];
    snprintf(a, sizeof a, "%s.%s=%s", section, key, value);
    if (pagoda_config_set(c, a, err, sizeof err) != PAGODA_OK) {
        fprintf(stderr, "pagoda plan: %s\n", err);
        return -1;
    }
    return 0;
}

int pagoda_cmd_plan(int argc, char **argv)
{
    const char *config_path = NULL;
    const char *(*opt_engine)[2] = calloc((size_t)argc + 1, sizeof *opt_engine); /* engine key, value */
    int n_engine = 0;
    const char *seqs = NULL, *toks = NULL;
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    int n_sets = 0, rc = 2;
    bool json = false;
    pagoda_config *cfg = NULL;
    char err[2048];
    if (!sets || !opt_engine) {
        fprintf(stderr, "pagoda plan: out of memory\n");
        free(sets);
        free(opt_engine);
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { plan_usage(stdout); rc = 0; goto out; }
        if (!strcmp(a, "--json")) { json = true; continue; }
        const char *eq = strchr(a, '=');
        size_t alen = eq && !strncmp(a, "--", 2) ? (size_t)(eq - a) : strlen(a);
        if (eq && alen < strlen(a)) v = eq + 1;
        else if (i + 1 < argc) v = argv[++i];
        if (!v) {
            fprintf(stderr, "pagoda plan: %s needs a value\n", a);
            plan_usage(stderr);
            goto out;
        }
        int64_t n;
        int bad = 0;
#define OPT(s) (alen == strlen(s) && strncmp(a, s, alen) == 0)
        if (OPT("--config") || OPT("-c")) config_path = v;
        else if (OPT("--set") || OPT("-s")) sets[n_sets++] = v;
        else if (OPT("--model")) { opt_engine[n_engine][0] = "model"; opt_engine[n_engine++][1] = v; }
        else if (OPT("--memory")) { opt_engine[n_engine][0] = "memory_budget"; opt_engine[n_engine++][1] = v; }
        else if (OPT("--kv-dtype")) {
            bad = strcasecmp(v, "f16") && strcasecmp(v, "f32") && strcasecmp(v, "q8_0");
            opt_engine[n_engine][0] = "kv_dtype";
            opt_engine[n_engine++][1] = v;
        } else if (OPT("--max-seq-len")) {
            bad = parse_i64(v, &n);
            opt_engine[n_engine][0] = "max_seq_len";
            opt_engine[n_engine++][1] = v;
        } else if (OPT("--block-size")) {
            bad = parse_i64(v, &n);
            opt_engine[n_engine][0] = "block_size";
            opt_engine[n_engine++][1] = v;
        } else if (OPT("--max-num-seqs")) { bad = parse_i64(v, &n); seqs = v; }
        else if (OPT("--max-batched-tokens")) { bad = parse_i64(v, &n); toks = v; }
        else if (OPT("--tp")) {
            bad = parse_i64(v, &n);
            opt_engine[n_engine][0] = "tensor_parallel";
            opt_engine[n_engine++][1] = v;
        } else if (OPT("--swa-kv")) {
            bad = strcasecmp(v, "window") && strcasecmp(v, "full");
            opt_engine[n_engine][0] = "swa_kv";
            opt_engine[n_engine++][1] = v;
        }
        else {
            fprintf(stderr, "pagoda plan: unknown option %.*s\n", (int)alen, a);
            plan_usage(stderr);
            goto out;
        }
#undef OPT
        if (bad) {
            fprintf(stderr, "pagoda plan: bad value for %.*s: '%s'\n", (int)alen, a, v);
            goto out;
        }
    }
    cfg = config_path ? pagoda_config_load(config_path, err, sizeof err) : pagoda_config_new_empty();
    if (!cfg) {
        fprintf(stderr, "pagoda plan: %s\n", config_path ? err : "out of memory");
        goto out;
    }
    /* the plan on stdout, not the runtime's progress lines on stderr,
     * unless a log level was asked for */
    if (!pagoda_config_get(cfg, "engine", "log_level") && plan_set(cfg, "engine", "log_level", "error"))
        goto out;
    for (int i = 0; i < n_engine; i++)
        if (plan_set(cfg, "engine", opt_engine[i][0], opt_engine[i][1])) goto out;
    for (int i = 0; i < n_sets; i++)
        if (pagoda_config_set(cfg, sets[i], err, sizeof err) != PAGODA_OK) {
            fprintf(stderr, "pagoda plan: %s\n", err);
            goto out;
        }
    /* the scheduler's keys go to the scheduler in use, unless --set gave them */
    char section[128], where[64];
    snprintf(section, sizeof section, "scheduler.%s", pagoda_config_engine_str(cfg, "scheduler"));
    const char *sk[2][2] = {{"max_num_seqs", seqs}, {"max_batched_tokens", toks}};
    for (int i = 0; i < 2; i++) {
        if (!sk[i][1]) continue;
        const char *w = pagoda_config_where(cfg, section, sk[i][0], where, sizeof where);
        if (w && !strcmp(w, "--set")) continue;
        if (plan_set(cfg, section, sk[i][0], sk[i][1])) goto out;
    }
    const char *model = pagoda_config_engine_str(cfg, "model");
    if (!model || !*model) {
        fprintf(stderr, "pagoda plan: no model: give --model FILE, --config FILE with [engine] "
                        "model, or --set engine.model=FILE\n");
        plan_usage(stderr);
        goto out;
    }
    pagoda_memplan p;
    if (pagoda_runtime_plan(cfg, &p, err, sizeof err) != PAGODA_OK) {
        fprintf(stderr, "pagoda plan: %s\n", err);
        rc = 1;
        goto out;
    }
    if (json) {
        char *s = pagoda_memplan_json(&p);
        if (!s) {
            fprintf(stderr, "pagoda plan: out of memory\n");
            rc = 1;
            goto out;
        }
        printf("%s\n", s);
        free(s);
    } else {
        printf("%s\n", model);
        pagoda_memplan_print(&p, stdout);
    }
    rc = p.fits && p.kv_blocks > 0 ? 0 : 1;
out:
    pagoda_config_free(cfg);
    free(sets);
    free(opt_engine);
    return rc;
}
