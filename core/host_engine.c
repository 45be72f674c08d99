/*
 * host_engine.c: the engine half of the host table (submit, cancel,
 * tokenize, chat templates, stats, memory plan, metrics, inspection, KV
 * block copy), as thin adapters from a pagoda_host to the runtime it
 * serves.
 * Not for: config lookups and logging (host.c) or the engine itself.
 */
#include "host_engine.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "host.h"
#include "inspect.h"
#include "log.h"
#include "tokenizer.h"

static pagoda_runtime *rt_of(const pagoda_host *h) { return pagoda_host_engine(h); }

static int h_submit(const pagoda_host *h, const pagoda_request *req, pagoda_event_cb cb, void *user,
                    uint64_t *id, char *err, size_t err_len)
{
    pagoda_runtime *rt = rt_of(h);
    /* a request that arrives while the weights load waits for them */
    pagoda_engine *e = pagoda_runtime_wait_loaded(rt);
    int st;
    if (!e) {
        snprintf(err, err_len, "the model failed to load; the server is stopping");
        st = PAGODA_ERR_STATE;
    } else {
        st = pagoda_engine_submit(e, req, cb, user, id, err, err_len);
    }
    if (rt->metrics)
        pagoda_metrics_count(rt->metrics, st ? PAGODA_COUNTER_REQUESTS_REJECTED
                                             : PAGODA_COUNTER_REQUESTS_RECEIVED, 1);
    return st;
}

static int h_cancel(const pagoda_host *h, uint64_t id)
{
    pagoda_engine *e = pagoda_runtime_engine(rt_of(h));
    return e ? pagoda_engine_cancel(e, id) : PAGODA_ERR_NOT_FOUND;
}

static void h_request_defaults(const pagoda_host *h, pagoda_request *req)
{
    pagoda_runtime *rt = rt_of(h);
    pagoda_engine *e = pagoda_runtime_engine(rt);
    pagoda_engine_request_defaults(e, req);
    if (!e) { /* still loading: the config's defaults all the same */
        req->max_tokens = 0; /* the engine applies default_max_tokens */
        req->temperature = rt->ec.temperature;
        req->top_k = rt->ec.top_k;
        req->top_p = rt->ec.top_p > 0 ? rt->ec.top_p : 1.0f;
        req->min_p = rt->ec.min_p;
    }
}

/* The tokens the engine would run the text as: tokenized, then realigned
 * to the recent replies' own tokens (engine.h), so that counting a
 * prompt here (count_tokens, a stream's first usage) agrees with the
 * usage its request reports. */
static int h_tokenize(const pagoda_host *h, const char *text, size_t len, bool add_special,
                      bool parse_special, int32_t *ids, int32_t cap, int32_t *n)
{
    const pagoda_tokenizer *t = rt_of(h)->model->tok;
    pagoda_engine *e = pagoda_runtime_engine(rt_of(h));
    int st = pagoda_tokenize(t, text, len, add_special, parse_special, ids, cap, n);
    if (st != PAGODA_OK || !e || *n <= 0) return st;
    int32_t full = *n, n_re;
    int32_t *all = ids;
    if (full > cap) {
        all = malloc(sizeof(int32_t) * (size_t)full);
        if (!all) return PAGODA_OK; /* the plain count then */
        if (pagoda_tokenize(t, text, len, add_special, parse_special, all, full, n) != PAGODA_OK || *n != full) {
            free(all);
            *n = full;
            return PAGODA_OK;
        }
    }
    int32_t *re = pagoda_engine_realign(e, all, full, &n_re);
    if (re) {
        memcpy(ids, re, sizeof(int32_t) * (size_t)(n_re < cap ? n_re : cap));
        *n = n_re;
        free(re);
    } else if (all != ids) {
        memcpy(ids, all, sizeof(int32_t) * (size_t)cap);
    }
    if (all != ids) free(all);
    return PAGODA_OK;
}

static char *h_detokenize(const pagoda_host *h, const int32_t *ids, int32_t n)
{
    const pagoda_tokenizer *t = rt_of(h)->model->tok;
    int32_t nv = pagoda_tokenizer_n_vocab(t);
    size_t cap = 64, len = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= nv) {
            free(out);
            h->error(h, PAGODA_ERR_INVALID, "token id %d at index %d is out of range (0..%d)",
                     ids[i], i, nv - 1);
            return NULL;
        }
        size_t l = 0;
        const char *b = pagoda_token_bytes(t, ids[i], false, &l);
        if (len + l + 1 > cap) {
            cap = (cap + l) * 2;
            char *p = realloc(out, cap);
            if (!p) { free(out); return NULL; }
            out = p;
        }
        memcpy(out + len, b, l);
        len += l;
    }
    out[len] = 0;
    return out;
}

static char *h_token_text(const pagoda_host *h, int32_t id)
{
    const pagoda_tokenizer *t = rt_of(h)->model->tok;
    if (id < 0 || id >= pagoda_tokenizer_n_vocab(t)) return NULL;
    size_t l = 0;
    const char *b = pagoda_token_bytes(t, id, false, &l);
    char *s = malloc(l + 1);
    if (!s) return NULL;
    memcpy(s, b, l);
    s[l] = 0;
    return s;
}

static int h_chat_render_opts(const pagoda_host *h, const pagoda_chat_message *msgs, int32_t n,
                              const pagoda_chat_options *opts, bool add_generation_prompt, char **out,
                              int32_t *stop_ids, int32_t cap, int32_t *n_stop)
{
    pagoda_runtime *rt = rt_of(h);
    const pagoda_tokenizer *t = rt->model->tok;
    int32_t bos = pagoda_tokenizer_bos(t), eos = pagoda_tokenizer_eos(t);
    const char *bos_text = bos >= 0 ? pagoda_tokenizer_piece(t, bos) : NULL;
    const char *eos_text = eos >= 0 ? pagoda_tokenizer_piece(t, eos) : NULL;
    char err[256] = "";
    /* The model's template may write a default system turn when the
     * conversation has none (SmolLM2's does): do what it does. */
    char sys[1024];
    pagoda_chat_message *with_sys = NULL;
    if (n > 0 && msgs && msgs[0].role && strcmp(msgs[0].role, "system") && rt->model->chat_template &&
        pagoda_chat_default_system(rt->model->chat_template, sys, sizeof sys)) {
        with_sys = malloc(sizeof *with_sys * ((size_t)n + 1));
        if (!with_sys) return h->error(h, PAGODA_ERR_NOMEM, "out of memory");
        with_sys[0] = (pagoda_chat_message){.role = "system", .content = sys};
        memcpy(with_sys + 1, msgs, sizeof *with_sys * (size_t)n);
    }
    /* an older caller's shorter struct: only the fields it has */
    pagoda_chat_opts co = {.enable_thinking = -1};
    if (opts && opts->struct_size >= offsetof(pagoda_chat_options, enable_thinking) + sizeof(int32_t))
        co.enable_thinking = opts->enable_thinking;
    if (opts && opts->struct_size >= offsetof(pagoda_chat_options, reasoning_effort) + sizeof(const char *))
        co.reasoning_effort = opts->reasoning_effort;
    int st = pagoda_chat_render_opts((pagoda_chat_family)rt->chat_family, with_sys ? with_sys : msgs,
                                     with_sys ? n + 1 : n, add_generation_prompt, bos_text, eos_text, &co, out,
                                     err, sizeof err);
    free(with_sys);
    if (st) return h->error(h, st, "%s", err);
    int32_t k = 0;
    const char *const *stops = pagoda_chat_stop_strings((pagoda_chat_family)rt->chat_family);
    for (int i = 0; stops && stops[i] && stop_ids && k < cap; i++) {
        int32_t id = pagoda_tokenizer_find(t, stops[i]);
        if (id >= 0) stop_ids[k++] = id;
    }
    if (n_stop) *n_stop = k;
    return PAGODA_OK;
}

static int h_chat_render(const pagoda_host *h, const pagoda_chat_message *msgs, int32_t n,
                         bool add_generation_prompt, char **out, int32_t *stop_ids, int32_t cap,
                         int32_t *n_stop)
{
    return h_chat_render_opts(h, msgs, n, NULL, add_generation_prompt, out, stop_ids, cap, n_stop);
}

static void h_free(const pagoda_host *h, void *p) { (void)h; free(p); }

static int h_check_constraint(const pagoda_host *h, int32_t type, const char *text, size_t len,
                              bool strict, char *err, size_t err_len)
{
    return pagoda_constraint_check(pagoda_runtime_constraint(rt_of(h)), type, text, len, strict,
                                   err, err_len);
}

/* A plugin built for an older minor passes a shorter struct: write no more
 * than it has room for (its struct_size; 0 is taken as this SDK's size). */
static size_t room(size_t caller, size_t ours) { return caller && caller < ours ? caller : ours; }

static int h_model_info(const pagoda_host *h, pagoda_model_info *dst)
{
    pagoda_runtime *rt = rt_of(h);
    const pagoda_model *m = rt->model;
    size_t n = room(dst->struct_size, sizeof *dst);
    pagoda_model_info info, *out = &info;
    memset(out, 0, sizeof *out);
    out->struct_size = n;
    snprintf(out->name, sizeof out->name, "%s", m->name);
    snprintf(out->arch, sizeof out->arch, "%s", m->hp.arch);
    out->n_ctx = (int32_t)rt->plan.max_seq_len;
    out->n_vocab = m->hp.n_vocab;
    out->bos = pagoda_tokenizer_bos(m->tok);
    out->eos = pagoda_tokenizer_eos(m->tok);
    out->n_params = m->n_params;
    out->has_chat_template = m->chat_template != NULL;
    snprintf(out->chat_template, sizeof out->chat_template, "%s",
             pagoda_chat_family_name((pagoda_chat_family)rt->chat_family));
    memcpy(dst, out, n);
    return PAGODA_OK;
}

static int h_stats(const pagoda_host *h, pagoda_engine_stats *dst)
{
    pagoda_engine *e = pagoda_runtime_engine(rt_of(h));
    size_t n = room(dst->struct_size, sizeof *dst);
    pagoda_engine_stats st;
    if (e) {
        pagoda_engine_get_stats(e, &st);
    } else { /* loading: not ready */
        memset(&st, 0, sizeof st);
    }
    st.struct_size = n;
    memcpy(dst, &st, n);
    return PAGODA_OK;
}

static char *h_memory_plan_json(const pagoda_host *h)
{
    pagoda_runtime *rt = rt_of(h);
    return rt->plan_json ? strdup(rt->plan_json) : NULL;
}

static char *h_metrics_text(const pagoda_host *h)
{
    pagoda_runtime *rt = rt_of(h);
    if (!rt->metrics) return NULL;
    pagoda_engine_stats st = {.struct_size = sizeof st};
    h_stats(h, &st);
    pagoda_metric_gauge g[32];
    int n = pagoda_runtime_plan_gauges(rt, g, 32);
    return pagoda_metrics_render(rt->metrics, &st, g, n);
}

static bool h_shutting_down(const pagoda_host *h) { return pagoda_runtime_shutting_down(rt_of(h)); }

static char *h_inspect_json(const pagoda_host *h) { return pagoda_inspect_json(rt_of(h)); }

static int h_kv_copy_blocks(const pagoda_host *h, const int32_t *src, const int32_t *dst, int32_t n)
{
    pagoda_engine *e = pagoda_runtime_engine(rt_of(h));
    return e ? pagoda_engine_copy_blocks(e, src, dst, n) : PAGODA_ERR_STATE;
}

static size_t h_kv_block_bytes(const pagoda_host *h)
{
    pagoda_engine *e = pagoda_runtime_engine(rt_of(h));
    char why[256] = "the engine is not serving yet";
    size_t n = e ? pagoda_engine_kv_block_bytes(e, why, sizeof why) : 0;
    if (!n) h->error(h, PAGODA_ERR_UNSUPPORTED, "%s", why);
    return n;
}

static int h_kv_read_block(const pagoda_host *h, int32_t block, void *dst, size_t n)
{
    pagoda_engine *e = pagoda_runtime_engine(rt_of(h));
    return e ? pagoda_engine_kv_move_block(e, block, dst, NULL, n) : PAGODA_ERR_STATE;
}

static int h_kv_write_block(const pagoda_host *h, int32_t block, const void *src, size_t n)
{
    pagoda_engine *e = pagoda_runtime_engine(rt_of(h));
    return e ? pagoda_engine_kv_move_block(e, block, NULL, src, n) : PAGODA_ERR_STATE;
}

static const char *h_kv_fingerprint(const pagoda_host *h)
{
    pagoda_engine *e = pagoda_runtime_engine(rt_of(h));
    return e ? pagoda_engine_kv_fingerprint(e) : NULL;
}

static bool h_kv_on_device(const pagoda_host *h)
{
    pagoda_engine *e = pagoda_runtime_engine(rt_of(h));
    return e && pagoda_engine_kv_on_device(e);
}

void pagoda_host_attach_engine(pagoda_host *h, pagoda_runtime *rt, bool frontend)
{
    pagoda_host slots;
    memset(&slots, 0, sizeof slots);
    slots.kv_copy_blocks = h_kv_copy_blocks;
    slots.kv_block_bytes = h_kv_block_bytes;
    slots.kv_read_block = h_kv_read_block;
    slots.kv_write_block = h_kv_write_block;
    slots.kv_fingerprint = h_kv_fingerprint;
    slots.kv_on_device = h_kv_on_device;
    if (frontend) {
        slots.submit = h_submit;
        slots.cancel = h_cancel;
        slots.request_defaults = h_request_defaults;
        slots.tokenize = h_tokenize;
        slots.detokenize = h_detokenize;
        slots.token_text = h_token_text;
        slots.chat_render = h_chat_render;
        slots.chat_render_opts = h_chat_render_opts;
        slots.free = h_free;
        slots.model_info = h_model_info;
        slots.stats = h_stats;
        slots.memory_plan_json = h_memory_plan_json;
        slots.metrics_text = h_metrics_text;
        slots.shutting_down = h_shutting_down;
        slots.check_constraint = h_check_constraint;
        slots.inspect_json = h_inspect_json;
    }
    pagoda_host_set_engine(h, rt);
    pagoda_host_set_engine_slots(h, &slots);
}
