/*
 * bench_structured.c: `pagoda bench --compare structured`, structured
 * output's two costs side by side:
 *   1. the token mask per generated token: a realistic JSON Schema (an
 *      order with customer, items, totals, enums, dates), compiled by the
 *      constraint plugin, followed by walks that pick a random allowed
 *      token each step (a harsher spread of states than a model writes);
 *      the first walk (every state new: the automaton and masks built) and
 *      the later ones (the per-state cache) reported apart, p50/p90/p99,
 *      plus the mask's application to a row of logits. Needs only the
 *      model's tokenizer, so any vocabulary can be measured (--vocab-model);
 *   2. throughput of N constrained streams against N free ones through the
 *      engine, alternating --repeat times, the fastest of each kept.
 * Not for: correctness (tests/unit/test_constraint.c, test_structured.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_internal.h"
#include "host.h"
#include "plugin_loader.h"
#include "tokenizer.h"

/* A realistic extraction schema (see bench.h). */
const char pagoda_bench_order_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"order_id\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-[0-9]{6}$\"},"
    "\"customer\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":40},"
    "\"email\":{\"type\":\"string\",\"maxLength\":60},\"vip\":{\"type\":\"boolean\"}},"
    "\"required\":[\"name\",\"email\"],\"additionalProperties\":false},"
    "\"items\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":8,\"items\":{\"type\":\"object\","
    "\"properties\":{\"sku\":{\"type\":\"string\",\"maxLength\":16},\"quantity\":{\"type\":\"integer\","
    "\"minimum\":1,\"maximum\":1000},\"unit_price\":{\"type\":\"number\",\"minimum\":0},"
    "\"notes\":{\"type\":[\"string\",\"null\"],\"maxLength\":80}},\"required\":[\"sku\",\"quantity\","
    "\"unit_price\"],\"additionalProperties\":false}},"
    "\"status\":{\"enum\":[\"pending\",\"paid\",\"shipped\",\"cancelled\"]},"
    "\"placed\":{\"type\":\"string\",\"format\":\"date\"},"
    "\"total\":{\"type\":\"number\",\"minimum\":0}},"
    "\"required\":[\"order_id\",\"customer\",\"items\",\"status\",\"total\"],\"additionalProperties\":false}";

/* Long outputs for the throughput side: twenty records. */
static const char LIST_SCHEMA[] =
    "{\"type\":\"array\",\"minItems\":20,\"maxItems\":20,\"items\":{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":24},\"age\":{\"type\":\"integer\",\"minimum\":0,"
    "\"maximum\":120},\"city\":{\"enum\":[\"Paris\",\"Oslo\",\"Lima\",\"Kyoto\"]}},\"required\":"
    "[\"name\",\"age\",\"city\"],\"additionalProperties\":false}}";

typedef struct loaded {
    pagoda_config *cfg;
    pagoda_plugin *p;
    pagoda_host *h;
    pagoda_constraint c;
} loaded;

static void unload(loaded *l)
{
    if (l->p && l->c.ctx) pagoda_plugin_destroy(l->p, l->c.ctx);
    pagoda_host_free(l->h);
    pagoda_plugin_free(l->p);
    pagoda_config_free(l->cfg);
}

/* The constraint plugin with the tokenizer's vocabulary, as the runtime
 * gives it (end-of-generation and control tokens write nothing). */
static int load_constraint(const bench_opts *o, const pagoda_tokenizer *t, loaded *l, char *err,
                           size_t err_len)
{
    memset(l, 0, sizeof *l);
    l->cfg = pagoda_config_new_empty();
    if (!l->cfg) { ERR("out of memory"); return PAGODA_ERR_NOMEM; }
    for (int i = 0; i < o->n_sets; i++)
        if (!strncmp(o->sets[i], "constraint.", 11) && pagoda_config_set(l->cfg, o->sets[i], err, err_len))
            return PAGODA_ERR_INVALID;
    const char *name = "grammar";
    int st = pagoda_plugin_load(l->cfg, PAGODA_KIND_CONSTRAINT, name, &l->p, err, err_len);
    if (st) return st;
    l->h = pagoda_host_new(l->cfg, PAGODA_KIND_CONSTRAINT, name);
    if (!l->h) { ERR("out of memory"); return PAGODA_ERR_NOMEM; }
    if ((st = pagoda_plugin_create(l->p, l->h, &l->c.ctx, err, err_len))) return st;
    l->c.ops = l->p->ops.constraint;
    l->c.name = name;
    int32_t V = pagoda_tokenizer_n_vocab(t);
    const char **bytes = calloc((size_t)V, sizeof *bytes);
    uint32_t *len = calloc((size_t)V, sizeof *len);
    if (!bytes || !len) {
        free(bytes);
        free(len);
        ERR("out of memory");
        return PAGODA_ERR_NOMEM;
    }
    for (int32_t i = 0; i < V; i++) {
        size_t n = 0;
        bytes[i] = pagoda_token_bytes(t, i, false, &n);
        len[i] = pagoda_tokenizer_is_eog(t, i) ? 0 : (uint32_t)n;
    }
    pagoda_constraint_vocab v = {.struct_size = sizeof v, .n_vocab = V, .bytes = (const char *const *)bytes,
                                 .len = len};
    st = l->c.ops.set_vocab(l->c.ctx, &v, err, err_len);
    free(bytes);
    free(len);
    return st;
}

/* The engine's mask application (engine_constraint.c), timed apart. */
static int32_t apply(float *lg, const uint32_t *mask, int32_t V)
{
    int32_t n = 0;
    for (int32_t w = 0; w < (V + 31) / 32; w++) {
        uint32_t m = mask[w];
        int32_t base = w * 32, end = base + 32 < V ? base + 32 : V;
        if (m == 0xFFFFFFFFu) { n += end - base; continue; }
        if (m == 0) { for (int32_t t = base; t < end; t++) lg[t] = -INFINITY; continue; }
        n += __builtin_popcount(m);
        for (int32_t t = base; t < end; t++)
            if (!(m >> (t - base) & 1u)) lg[t] = -INFINITY;
    }
    return n;
}

typedef struct mask_figures {
    pagoda_bench_pcts cold, warm, apply;   /* microseconds */
    int64_t n_cold, n_warm;
    double compile_ms, hit_rate;
    int64_t states, bytes;
    int32_t n_vocab;
} mask_figures;

/* Part 1 on the vocabulary of model_path. */
static int measure_masks(const bench_opts *o, const char *model_path, int walks, mask_figures *mf,
                         char *err, size_t err_len)
{
    memset(mf, 0, sizeof *mf);
    gguf_file *g = pagoda_gguf_open(model_path, err, err_len);
    if (!g) return PAGODA_ERR_INVALID;
    pagoda_tokenizer *t = pagoda_tokenizer_load(g, err, err_len);
    int st = PAGODA_ERR_INVALID;
    loaded l = {0};
    double *cold = NULL, *warm = NULL, *app = NULL;
    uint32_t *mask = NULL;
    float *lg = NULL;
    void *comp = NULL;
    if (!t) goto out;
    if ((st = load_constraint(o, t, &l, err, err_len))) goto out;
    int32_t V = mf->n_vocab = pagoda_tokenizer_n_vocab(t);
    const pagoda_constraint_ops *O = &l.c.ops;
    pagoda_constraint_spec sp = {.struct_size = sizeof sp, .type = PAGODA_CONSTRAINT_JSON_SCHEMA,
                                 .text = pagoda_bench_order_schema,
                                 .len = strlen(pagoda_bench_order_schema), .strict = true};
    double t0 = bench_now_s();
    if ((st = O->compile(l.c.ctx, &sp, &comp, err, err_len))) goto out;
    mf->compile_ms = (bench_now_s() - t0) * 1e3;
    const int max_steps = 600;
    size_t cap = (size_t)walks * (size_t)max_steps;
    cold = malloc(sizeof *cold * (size_t)max_steps);
    warm = malloc(sizeof *warm * cap);
    app = malloc(sizeof *app * (cap + (size_t)max_steps));
    mask = malloc(sizeof *mask * (size_t)((V + 31) / 32));
    lg = malloc(sizeof *lg * (size_t)V);
    int32_t *allowed = malloc(sizeof *allowed * (size_t)V);
    if (!cold || !warm || !app || !mask || !lg || !allowed) {
        free(allowed);
        ERR("out of memory");
        st = PAGODA_ERR_NOMEM;
        goto out;
    }
    uint64_t rng = (uint64_t)o->w.seed * 0x9E3779B97F4A7C15ull + 1;
    size_t n_app = 0;
    for (int w = 0; w <= walks && !st; w++) {
        void *m = NULL;
        if ((st = O->matcher_new(l.c.ctx, comp, &m, err, err_len))) break;
        for (int step = 0; step < max_steps; step++) {
            double a = bench_now_s();
            if ((st = O->fill_mask(l.c.ctx, m, mask, err, err_len))) break;
            double b = bench_now_s();
            for (int32_t i = 0; i < V; i++) lg[i] = 0.0f;
            double c0 = bench_now_s();
            apply(lg, mask, V);
            app[n_app++] = (bench_now_s() - c0) * 1e6;
            if (w == 0) cold[mf->n_cold++] = (b - a) * 1e6;
            else warm[mf->n_warm++] = (b - a) * 1e6;
            int32_t na = 0;
            for (int32_t i = 0; i < V; i++)
                if (mask[i >> 5] >> (i & 31) & 1u) allowed[na++] = i;
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            bool complete = O->is_complete(l.c.ctx, m);
            if (!na || (complete && rng % 4 == 0)) break;
            if ((st = O->advance(l.c.ctx, m, allowed[rng % (uint64_t)na], err, err_len))) break;
        }
        O->matcher_free(l.c.ctx, m);
    }
    free(allowed);
    if (st) goto out;
    pagoda_constraint_stats cs = {.struct_size = sizeof cs};
    if (O->stats) O->stats(l.c.ctx, &cs);
    mf->hit_rate = cs.masks ? (double)cs.mask_cache_hits / (double)cs.masks : 0;
    mf->states = cs.states;
    mf->bytes = cs.bytes;
    pagoda_bench_pcts_of(cold, (size_t)mf->n_cold, &mf->cold);
    pagoda_bench_pcts_of(warm, (size_t)mf->n_warm, &mf->warm);
    pagoda_bench_pcts_of(app, n_app, &mf->apply);
out:
    if (comp) l.c.ops.compiled_free(l.c.ctx, comp);
    unload(&l);
    free(cold);
    free(warm);
    free(app);
    free(mask);
    free(lg);
    pagoda_tokenizer_free(t);
    pagoda_gguf_close(g);
    return st;
}

/* ------------------------------------------------------------ throughput */

/* Each fill_mask the engine makes (on its prefetch worker, or inline),
 * timed: the mask's cost while a real model writes; and what the engine
 * thread waited for each constrained sample (the mask observer): the part
 * of that cost the step pays. */
static int (*g_real_fill)(void *, void *, uint32_t *, char *, size_t);
static pthread_mutex_t g_fill_mu = PTHREAD_MUTEX_INITIALIZER;
static double *g_fill_us, *g_wait_us;
static size_t g_n_fill, g_n_wait, g_cap_fill;
static int64_t g_n_prefetched;
static bool g_fill_on;

static int timed_fill(void *ctx, void *m, uint32_t *mask, char *err, size_t err_len)
{
    double a = bench_now_s();
    int st = g_real_fill(ctx, m, mask, err, err_len);
    double us = (bench_now_s() - a) * 1e6;
    pthread_mutex_lock(&g_fill_mu);
    if (g_fill_on && g_n_fill < g_cap_fill) g_fill_us[g_n_fill++] = us;
    pthread_mutex_unlock(&g_fill_mu);
    return st;
}

static void on_mask_wait(void *user, double seconds, bool prefetched)
{
    (void)user;
    pthread_mutex_lock(&g_fill_mu);
    if (g_fill_on && g_n_wait < g_cap_fill) {
        g_wait_us[g_n_wait++] = seconds * 1e6;
        g_n_prefetched += prefetched;
    }
    pthread_mutex_unlock(&g_fill_mu);
}

typedef struct tp_req {
    pthread_mutex_t *mu;
    int32_t n_tok;
    int finish;
    double t_end;
} tp_req;

static void tp_cb(void *user, const pagoda_event *ev)
{
    tp_req *r = user;
    if (ev->type == PAGODA_EVENT_TOKEN && ev->token >= 0) r->n_tok++;
    if (ev->type == PAGODA_EVENT_FINAL) {
        r->finish = ev->finish_reason;
        r->t_end = bench_now_s();
    }
}

/* n streams at once, constrained (by schema) or not; generated tokens per second. */
static int run_streams(pagoda_runtime *rt, int n, int max_tokens, const char *schema, uint64_t seed,
                       double *tps, int64_t *tokens, char *err, size_t err_len)
{
    static const char *const prompts[] = {"Once upon a time", "List the people you met today.",
                                          "The committee members were", "Here is the data:"};
    tp_req *rs = calloc((size_t)n, sizeof *rs);
    if (!rs) { ERR("out of memory"); return PAGODA_ERR_NOMEM; }
    double t0 = bench_now_s();
    int st = PAGODA_OK;
    for (int i = 0; i < n && !st; i++) {
        pagoda_request req;
        pagoda_engine_request_defaults(rt->engine, &req);
        req.prompt = prompts[i % 4];
        req.prompt_len = strlen(req.prompt);
        req.max_tokens = max_tokens;
        req.temperature = 1.0f;
        req.seed = seed + (uint64_t)i;
        req.has_seed = true;
        req.ignore_eos = true;
        if (schema) {
            req.constraint_type = PAGODA_CONSTRAINT_JSON_SCHEMA;
            req.constraint = schema;
            req.constraint_len = strlen(schema);
        }
        uint64_t id;
        st = pagoda_engine_submit(rt->engine, &req, tp_cb, &rs[i], &id, err, err_len);
    }
    pagoda_engine_wait_idle(rt->engine);
    double t1 = bench_now_s();
    *tokens = 0;
    for (int i = 0; i < n; i++) *tokens += rs[i].n_tok;
    *tps = (double)*tokens / (t1 - t0);
    free(rs);
    return st;
}

int bench_do_structured(const bench_opts *o)
{
    char err[2048] = "", model[4096];
    int st = bench_resolve_model(o, NULL, model, sizeof model, err, sizeof err);
    if (st) {
        fprintf(stderr, "pagoda bench: %s\n", err);
        return st;
    }
    int walks = o->w.n_requests > 1 ? o->w.n_requests : 32;
    const char *vocab_models[2] = {model, o->vocab};
    json_t *js = json_object();
    printf("structured output: mask time per generated token (random walks over the allowed tokens\n"
           "of an order schema; walk 1 builds the automaton, walks 2..%d reuse its per-state masks)\n\n",
           walks + 1);
    printf("%-34s %7s %9s %9s %9s %9s %9s %9s %8s\n", "vocabulary", "tokens", "cold p50", "cold p99",
           "warm p50", "warm p99", "warm max", "apply p50", "hits");
    for (int k = 0; k < 2; k++) {
        if (!vocab_models[k]) continue;
        mask_figures mf;
        st = measure_masks(o, vocab_models[k], walks, &mf, err, sizeof err);
        if (st) {
            fprintf(stderr, "pagoda bench: %s: %s\n", vocab_models[k], err);
            json_decref(js);
            return st;
        }
        const char *base = strrchr(vocab_models[k], '/');
        base = base ? base + 1 : vocab_models[k];
        printf("%-34.34s %7d %7.1f us %7.1f us %7.1f us %7.1f us %7.1f us %7.1f us %7.1f%%\n", base,
               mf.n_vocab, mf.cold.p50, mf.cold.p99, mf.warm.p50, mf.warm.p99, mf.warm.max, mf.apply.p50,
               100 * mf.hit_rate);
        printf("%-34s compile %.2f ms, %lld mask steps cold / %lld warm, %lld states, %.1f MiB\n", "",
               mf.compile_ms, (long long)mf.n_cold, (long long)mf.n_warm, (long long)mf.states,
               (double)mf.bytes / 1048576.0);
        json_object_set_new(js, k ? "vocab_extra" : "vocab_model",
                            json_pack("{s:s,s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:f}", "file", base,
                                      "n_vocab", mf.n_vocab, "cold_p50_us", mf.cold.p50, "cold_p99_us",
                                      mf.cold.p99, "warm_p50_us", mf.warm.p50, "warm_p99_us", mf.warm.p99,
                                      "warm_max_us", mf.warm.max, "apply_p50_us", mf.apply.p50,
                                      "hit_rate", mf.hit_rate, "compile_ms", mf.compile_ms, "states",
                                      (json_int_t)mf.states, "mib", (double)mf.bytes / 1048576.0));
    }

    /* part 2: the engine (--repeat 0: not run) */
    if (o->repeat < 1) {
        if (o->json && json_dump_file(js, o->json, JSON_INDENT(2)))
            fprintf(stderr, "pagoda bench: cannot write %s\n", o->json);
        json_decref(js);
        return PAGODA_OK;
    }
    pagoda_config *cfg = pagoda_config_new_empty();
    char buf[4200];
    snprintf(buf, sizeof buf, "engine.model=%s", model);
    st = pagoda_config_set(cfg, buf, err, sizeof err);
    for (int i = 0; i < o->n_sets && !st; i++) st = pagoda_config_set(cfg, o->sets[i], err, sizeof err);
    pagoda_runtime *rt = NULL;
    if (!st) st = pagoda_runtime_open(cfg, false, false, &rt, err, sizeof err);
    pagoda_constraint *con = rt ? pagoda_runtime_constraint(rt) : NULL;
    if (!st && !con) {
        snprintf(err, sizeof err, "structured output is off ([engine] constraint = none)");
        st = PAGODA_ERR_INVALID;
    }
    if (!st) {
        /* the engine reads the ops through this pointer: time its masks */
        g_real_fill = con->ops.fill_mask;
        con->ops.fill_mask = timed_fill;
        g_cap_fill = 1 << 20;
        g_fill_us = malloc(sizeof *g_fill_us * g_cap_fill);
        g_wait_us = malloc(sizeof *g_wait_us * g_cap_fill);
        if (!g_fill_us || !g_wait_us) st = PAGODA_ERR_NOMEM;
        else pagoda_engine_set_mask_observer(rt->engine, on_mask_wait, NULL);
    }
    if (!st) st = pagoda_engine_start(rt->engine);
    if (st) {
        fprintf(stderr, "pagoda bench: %s\n", err);
        if (rt) pagoda_runtime_close(rt);
        pagoda_config_free(cfg);
        json_decref(js);
        return st;
    }
    int n = o->w.concurrency > 0 ? o->w.concurrency : 8;
    int max_tokens = 256;
    double best[2] = {0, 0};
    int64_t toks[2] = {0, 0};
    /* the masks while the model writes: the order schema, 2 x n outputs */
    g_fill_on = true;
    for (int rep = 0; rep < 2 && !st; rep++) {
        double tps;
        int64_t tk;
        st = run_streams(rt, n, 400, pagoda_bench_order_schema, 7 + (uint64_t)rep * 100, &tps, &tk, err,
                         sizeof err);
    }
    pthread_mutex_lock(&g_fill_mu);
    g_fill_on = false;
    pthread_mutex_unlock(&g_fill_mu);
    pagoda_bench_pcts model_pcts, wait_pcts;
    size_t n_model = g_n_fill, n_wait = g_n_wait;
    pagoda_bench_pcts_of(g_fill_us, g_n_fill, &model_pcts);
    pagoda_bench_pcts_of(g_wait_us, g_n_wait, &wait_pcts);
    pagoda_constraint_stats s0 = {.struct_size = sizeof s0}, s1 = {.struct_size = sizeof s1};
    double con_mask_s = 0;
    int64_t con_masks = 0;
    for (int rep = 0; rep < o->repeat && !st; rep++) {
        for (int side = 0; side < 2 && !st; side++) {
            double tps = 0;
            int64_t tk = 0;
            if (side && con && con->ops.stats) con->ops.stats(con->ctx, &s0);
            st = run_streams(rt, n, max_tokens, side == 1 ? LIST_SCHEMA : NULL, 100 + (uint64_t)rep * 1000,
                             &tps, &tk, err, sizeof err);
            if (side && con && con->ops.stats) {
                con->ops.stats(con->ctx, &s1);
                con_mask_s += s1.mask_seconds - s0.mask_seconds;
                con_masks += s1.masks - s0.masks;
            }
            if (tps > best[side]) {
                best[side] = tps;
                toks[side] = tk;
            }
        }
    }
    pagoda_runtime_close(rt);
    pagoda_config_free(cfg);
    free(g_fill_us);
    free(g_wait_us);
    g_fill_us = g_wait_us = NULL;
    if (st) {
        fprintf(stderr, "pagoda bench: %s\n", err);
        json_decref(js);
        return st;
    }
    printf("\nmask time while the model writes (the order schema, %d outputs of up to 400 tokens, "
           "temperature 1):\n  fill_mask   %6zu masks: p50 %.1f us, p90 %.1f us, p99 %.1f us, max %.1f us, "
           "mean %.1f us\n", 2 * n, n_model, model_pcts.p50, model_pcts.p90, model_pcts.p99,
           model_pcts.max, model_pcts.mean);
    printf("  step waits  %6zu samples: p50 %.1f us, p90 %.1f us, p99 %.1f us, max %.1f us, mean %.1f us "
           "(%.1f%% prefetched)\n", n_wait, wait_pcts.p50, wait_pcts.p90, wait_pcts.p99, wait_pcts.max,
           wait_pcts.mean, n_wait ? 100.0 * (double)g_n_prefetched / (double)n_wait : 0.0);
    json_object_set_new(js, "step_waits", json_pack("{s:I,s:f,s:f,s:f,s:f,s:f,s:f}", "n", (json_int_t)n_wait,
                                                      "p50_us", wait_pcts.p50, "p90_us", wait_pcts.p90,
                                                      "p99_us", wait_pcts.p99, "max_us", wait_pcts.max,
                                                      "mean_us", wait_pcts.mean, "prefetched_share",
                                                      n_wait ? (double)g_n_prefetched / (double)n_wait : 0.0));
    json_object_set_new(js, "model_masks", json_pack("{s:I,s:f,s:f,s:f,s:f,s:f}", "n", (json_int_t)n_model,
                                                       "p50_us", model_pcts.p50, "p90_us", model_pcts.p90,
                                                       "p99_us", model_pcts.p99, "max_us", model_pcts.max,
                                                       "mean_us", model_pcts.mean));
    printf("\nthroughput, %d streams at once, temperature 1, up to %d tokens each (best of %d):\n", n,
           max_tokens, o->repeat);
    printf("  free         %8.1f tokens/s  (%lld tokens)\n", best[0], (long long)toks[0]);
    printf("  constrained  %8.1f tokens/s  (%lld tokens; 20 records of a schema)\n", best[1], (long long)toks[1]);
    printf("  ratio        %8.3f  (constrained / free); mask on the engine thread: %.1f us mean over %lld\n",
           bench_ratio(best[1], best[0]), con_masks ? con_mask_s / (double)con_masks * 1e6 : 0,
           (long long)con_masks);
    json_object_set_new(js, "throughput", json_pack("{s:i,s:f,s:f,s:f,s:f}", "streams", n, "free_tps", best[0],
                                                      "constrained_tps", best[1], "ratio",
                                                      bench_ratio(best[1], best[0]), "engine_mask_mean_us",
                                                      con_masks ? con_mask_s / (double)con_masks * 1e6 : 0));
    if (o->json) {
        if (json_dump_file(js, o->json, JSON_INDENT(2))) fprintf(stderr, "pagoda bench: cannot write %s\n", o->json);
    }
    json_decref(js);
    return PAGODA_OK;
}
