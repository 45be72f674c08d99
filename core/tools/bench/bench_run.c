#define _GNU_SOURCE /* strdup, usleep, memmem */
/*
 * bench_run.c: one side of a `pagoda bench` run: build a
 * runtime from a config plus --set overrides, warm it up, drive the engine
 * in-process (closed or open loop), record every token's time and a
 * per-step trace (running sequences, KV blocks), and turn the records into
 * a bench_result.
 * Not for: the HTTP client (bench_http.c), printing or writing results
 * (bench_report.c), or the CLI (bench.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_internal.h"

double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void bench_result_free(bench_result *r)
{
    free(r->reqs);
    free(r->trace);
    r->reqs = NULL;
    r->trace = NULL;
}

static void on_event(void *user, const pagoda_event *ev)
{
    req_rec *r = user;
    run_ctx *c = r->run;
    double t = bench_now_s() - c->t0;
    pthread_mutex_lock(&c->mu);
    if (ev->type == PAGODA_EVENT_TOKEN && ev->token >= 0) {
        if (r->n_tok == 0) r->t_first = t;
        else if (c->n_itl < c->cap_itl) c->itl[c->n_itl++] = (t - r->t_last) * 1e3;
        r->t_last = t;
        r->n_tok++;
    } else if (ev->type == PAGODA_EVENT_FINAL) {
        r->t_end = t;
        r->finish = ev->finish_reason;
        r->preempt = ev->timings.n_preemptions;
        r->cached = ev->usage.cached_tokens;
        if (ev->finish_reason == PAGODA_FINISH_ERROR) {
            r->failed = true;
            if (!c->first_error[0])
                snprintf(c->first_error, sizeof c->first_error, "%s", ev->error ? ev->error : "error");
        }
        c->n_done++;
        c->in_flight--;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
}

/* The step hook's target. The engine reads its hook pointer and user
 * pointer without a lock, so the hook is set once per runtime (to this
 * static, which never dangles) and left in place; a run attaches its
 * run_ctx here for its duration. */
static struct {
    pthread_mutex_t mu;
    run_ctx *cur;
} g_hook = {PTHREAD_MUTEX_INITIALIZER, NULL};

void bench_hook_attach(run_ctx *c)
{
    pthread_mutex_lock(&g_hook.mu);
    g_hook.cur = c;
    pthread_mutex_unlock(&g_hook.mu);
}

/* [engine thread] after every step: the trace behind the KV and
 * concurrency numbers and the timeline plots */
static void on_step(void *user, pagoda_engine *e)
{
    (void)user;
    pagoda_engine_stats st;
    pagoda_engine_get_stats(e, &st);
    pthread_mutex_lock(&g_hook.mu);
    run_ctx *c = g_hook.cur;
    if (c) {
        double t = bench_now_s() - c->t0;
        pthread_mutex_lock(&c->mu);
        if (c->n_trace == c->cap_trace) {
            size_t nc = c->cap_trace ? c->cap_trace * 2 : 1024;
            trace_pt *p = realloc(c->trace, nc * sizeof *p);
            if (p) { c->trace = p; c->cap_trace = nc; }
        }
        if (c->n_trace < c->cap_trace)
            c->trace[c->n_trace++] = (trace_pt){t, st.running, st.waiting, st.kv_used_blocks,
                                                st.kv_cached_blocks, st.kv_total_blocks,
                                                st.generation_tokens_total};
        pthread_mutex_unlock(&c->mu);
    }
    pthread_mutex_unlock(&g_hook.mu);
}

int bench_run_ctx_init(run_ctx *c, size_t cap_itl)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->cap_itl = cap_itl ? cap_itl : 1;
    c->itl = malloc(sizeof(double) * c->cap_itl);
    return c->itl ? 0 : PAGODA_ERR_NOMEM;
}

void bench_run_ctx_free(run_ctx *c)
{
    free(c->itl);
    free(c->trace);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
}

/* Submit one request, retrying while the queue is full. */
static int submit_req(pagoda_runtime *rt, run_ctx *c, req_rec *r, const pagoda_bench_req *q,
                      char *err, size_t err_len)
{
    pagoda_request req;
    pagoda_engine_request_defaults(rt->engine, &req);
    req.prompt = NULL;
    req.prompt_len = 0;
    req.prompt_tokens = q->prompt;
    req.n_prompt_tokens = q->n_prompt;
    req.add_special = false;
    req.max_tokens = q->max_tokens;
    req.temperature = 0; /* greedy: the sampler's cost is the same for every policy */
    req.ignore_eos = true;
    req.logprobs = -1;
    r->run = c;
    r->n_prompt = q->n_prompt;
    r->max_tokens = q->max_tokens;
    r->shared = q->shared;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        c->in_flight++;
        r->t_submit = bench_now_s() - c->t0;
        pthread_mutex_unlock(&c->mu);
        uint64_t id;
        int st = pagoda_engine_submit(rt->engine, &req, on_event, r, &id, err, err_len);
        if (st == PAGODA_OK) return PAGODA_OK;
        pthread_mutex_lock(&c->mu);
        c->in_flight--;
        if (st != PAGODA_ERR_NOSPACE) {
            r->failed = true;
            c->n_done++;
            if (!c->first_error[0]) snprintf(c->first_error, sizeof c->first_error, "%s", err);
            pthread_cond_broadcast(&c->cv);
        }
        pthread_mutex_unlock(&c->mu);
        if (st != PAGODA_ERR_NOSPACE) return st;
        usleep(1000);
    }
}

/* Turn a finished run's records into res; takes rec and c's trace, frees c. */
static int cmp_interval(const void *a, const void *b)
{
    double x = ((const double *)a)[0], y = ((const double *)b)[0];
    return x < y ? -1 : x > y;
}

double pagoda_bench_union_length(double *iv, size_t n)
{
    qsort(iv, n, 2 * sizeof(double), cmp_interval);
    double total = 0, lo = 0, hi = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || iv[2 * i] > hi) {
            if (i > 0) total += hi - lo;
            lo = iv[2 * i];
            hi = iv[2 * i + 1];
        } else if (iv[2 * i + 1] > hi) {
            hi = iv[2 * i + 1];
        }
    }
    if (n > 0) total += hi - lo;
    return total;
}

/* res->phase_tps / phase_s (bench_internal.h): the requests' [t_first,
 * t_end] intervals, merged. */
static void decode_phase(const req_rec *rec, int32_t n, bench_result *res)
{
    double *iv = malloc(sizeof(double) * 2 * (size_t)(n > 0 ? n : 1));
    if (!iv) return;
    size_t m = 0;
    int64_t toks = 0;
    for (int32_t i = 0; i < n; i++) {
        if (rec[i].failed || rec[i].n_tok < 2) continue;
        iv[2 * m] = rec[i].t_first;
        iv[2 * m + 1] = rec[i].t_end;
        toks += rec[i].n_tok - 1;
        m++;
    }
    double total = pagoda_bench_union_length(iv, m);
    free(iv);
    res->phase_s = total;
    res->phase_tps = total > 0 ? (double)toks / total : 0;
}

int bench_finish_result(run_ctx *c, req_rec *rec, int32_t n, const pagoda_engine_stats *s0,
                         const pagoda_engine_stats *s1, bench_result *res, char *err, size_t err_len)
{
    res->n_req = n;
    double t_end = 0, t_start = 1e300;
    double *ttft = malloc(sizeof(double) * (size_t)n), *e2e = malloc(sizeof(double) * (size_t)n);
    if (!ttft || !e2e) {
        free(ttft);
        free(e2e);
        free(rec);
        bench_run_ctx_free(c);
        ERR("out of memory");
        return PAGODA_ERR_NOMEM;
    }
    size_t n_lat = 0;
    for (int32_t i = 0; i < n; i++) {
        req_rec *r = &rec[i];
        if (r->t_submit < t_start) t_start = r->t_submit;
        if (r->failed) { res->n_err++; continue; }
        res->n_ok++;
        if (r->t_end > t_end) t_end = r->t_end;
        res->gen_tokens += r->n_tok;
        res->prompt_tokens += r->n_prompt;
        res->cached_tokens += r->cached;
        ttft[n_lat] = (r->t_first - r->t_submit) * 1e3;
        e2e[n_lat++] = (r->t_end - r->t_submit) * 1e3;
    }
    res->wall_s = t_end > t_start ? t_end - t_start : 0;
    decode_phase(rec, n, res);
    if (res->wall_s > 0) {
        res->gen_tps = (double)res->gen_tokens / res->wall_s;
        res->total_tps = (double)(res->gen_tokens + res->prompt_tokens) / res->wall_s;
    }
    pagoda_bench_pcts_of(ttft, n_lat, &res->ttft);
    pagoda_bench_pcts_of(e2e, n_lat, &res->e2e);
    pagoda_bench_pcts_of(c->itl, c->n_itl, &res->itl);
    free(ttft);
    free(e2e);
    double util_sum = 0, run_sum = 0;
    for (size_t i = 0; i < c->n_trace; i++) {
        trace_pt *p = &c->trace[i];
        double u = p->kv_total ? (double)p->kv_used / (double)p->kv_total : 0;
        if (u > res->kv_util_peak) res->kv_util_peak = u;
        if (p->running > res->peak_running) res->peak_running = p->running;
        util_sum += u;
        run_sum += p->running;
    }
    if (c->n_trace) {
        res->kv_util_mean = util_sum / (double)c->n_trace;
        res->running_mean = run_sum / (double)c->n_trace;
    }
    res->kv_blocks = s1->kv_total_blocks;
    res->kv_block_size = s1->kv_block_size;
    res->preemptions = s1->preemptions_total - s0->preemptions_total;
    res->prefix_query = s1->prefix_query_tokens - s0->prefix_query_tokens;
    res->prefix_hit = s1->prefix_hit_tokens - s0->prefix_hit_tokens;
    res->reqs = rec;
    res->trace = c->trace;
    res->n_trace = c->n_trace;
    c->trace = NULL;
    if (res->n_err) pagoda_log(PAGODA_LOG_WARN, "bench %s: %d of %d requests failed; the first: %s",
                               res->label, res->n_err, n, c->first_error);
    bench_run_ctx_free(c);
    return PAGODA_OK;
}

/* The workload's progress on stderr: one line redrawn in place on a
 * terminal, else a line at each quarter; nothing when quiet. */
typedef struct wl_progress {
    const char *label;
    int32_t total, shown; /* shown: requests done at the last line (-1: none) */
    bool on, tty;
} wl_progress;

static void wl_progress_show(wl_progress *p, int32_t done)
{
    if (!p->on || done == p->shown) return;
    if (p->tty) {
        fprintf(stderr, "\rbench: [%s] workload: %d of %d requests done", p->label, done, p->total);
        if (done == p->total) fputc('\n', stderr);
    } else {
        if (done == 0) return; /* the phase's own line said it started */
        int32_t q = p->total >= 4 ? p->total / 4 : 1;
        if (done != p->total && (p->shown >= 0 && done / q == p->shown / q)) return;
        fprintf(stderr, "bench: [%s] workload: %d of %d requests done\n", p->label, done, p->total);
    }
    fflush(stderr);
    p->shown = done;
}

/* Drive the engine through the workload and fill res; show: the
 * progress lines (the measured workload, not the warm-up). */
static int run_workload(pagoda_runtime *rt, const pagoda_bench_workload *w,
                        const pagoda_bench_req *reqs, bench_result *res, bool show, char *err,
                        size_t err_len)
{
    wl_progress pg = {.label = res->label, .total = w->n_requests, .shown = -1, .on = show,
                      .tty = show && isatty(STDERR_FILENO)};
    int32_t n = w->n_requests;
    size_t cap_itl = 0;
    for (int32_t i = 0; i < n; i++) cap_itl += (size_t)reqs[i].max_tokens;
    run_ctx c;
    req_rec *rec = calloc((size_t)n, sizeof *rec);
    if (!rec || bench_run_ctx_init(&c, cap_itl)) {
        free(rec);
        ERR("out of memory for the run");
        return PAGODA_ERR_NOMEM;
    }
    pagoda_engine_stats s0;
    pagoda_engine_get_stats(rt->engine, &s0);
    c.t0 = bench_now_s();
    bench_hook_attach(&c);

    int32_t next = 0;
    if (w->rate > 0) {
        for (; next < n; next++) {
            double wait = reqs[next].arrival_s - (bench_now_s() - c.t0);
            if (wait > 0) usleep((useconds_t)(wait * 1e6));
            submit_req(rt, &c, &rec[next], &reqs[next], err, err_len);
        }
    } else {
        pthread_mutex_lock(&c.mu);
        while (next < n) {
            while (next < n && c.in_flight < w->concurrency) {
                pthread_mutex_unlock(&c.mu);
                submit_req(rt, &c, &rec[next], &reqs[next], err, err_len);
                next++;
                pthread_mutex_lock(&c.mu);
            }
            if (next < n) pthread_cond_wait(&c.cv, &c.mu);
            int32_t done = c.n_done;
            pthread_mutex_unlock(&c.mu);
            wl_progress_show(&pg, done); /* stderr written without the lock */
            pthread_mutex_lock(&c.mu);
        }
        pthread_mutex_unlock(&c.mu);
    }
    pthread_mutex_lock(&c.mu);
    while (c.n_done < n) {
        int32_t done = c.n_done;
        pthread_mutex_unlock(&c.mu);
        wl_progress_show(&pg, done);
        pthread_mutex_lock(&c.mu);
        if (c.n_done == done) pthread_cond_wait(&c.cv, &c.mu);
    }
    pthread_mutex_unlock(&c.mu);
    wl_progress_show(&pg, n);
    pagoda_engine_wait_idle(rt->engine);
    bench_hook_attach(NULL);
    pagoda_engine_stats s1;
    pagoda_engine_get_stats(rt->engine, &s1);

    return bench_finish_result(&c, rec, n, &s0, &s1, res, err, err_len);
}

/* One request of fixed lengths, alone, with fresh random tokens: the
 * warm-up (weights paged in, caches and thread pools started) and the
 * single-stream decode and prefill measurements. */
static int run_single(pagoda_runtime *rt, int32_t n_prompt, int32_t n_out, uint64_t seed,
                      double *ttft_s, double *decode_tps, double *decode_p50_tps, char *err,
                      size_t err_len)
{
    int32_t V = rt->model->hp.n_vocab;
    pagoda_bench_workload w;
    pagoda_bench_workload_default(&w);
    w.n_requests = 1;
    w.prompt_len = (pagoda_bench_dist){PAGODA_BENCH_FIXED, n_prompt, n_prompt};
    w.output_len = (pagoda_bench_dist){PAGODA_BENCH_FIXED, n_out, n_out};
    w.concurrency = 1;
    w.seed = seed;
    pagoda_bench_req *q = NULL;
    int st = pagoda_bench_workload_make(&w, V > 1024 ? 259 : 3, V, &q, err, err_len);
    if (st) return st;
    bench_result r = {0};
    snprintf(r.label, sizeof r.label, "single");
    st = run_workload(rt, &w, q, &r, false, err, err_len);
    if (!st && r.n_err) { ERR("a single request failed"); st = PAGODA_ERR_INTERNAL; }
    if (!st) {
        req_rec *x = &r.reqs[0];
        if (ttft_s) *ttft_s = x->t_first - x->t_submit;
        if (decode_tps) *decode_tps = x->n_tok > 1 ? (x->n_tok - 1) / (x->t_last - x->t_first) : 0;
        if (decode_p50_tps) *decode_p50_tps = r.itl.p50 > 0 ? 1e3 / r.itl.p50 : 0;
    }
    bench_result_free(&r);
    pagoda_bench_workload_free(q, 1);
    return st;
}
/* ================================================================ sides */

/* Build the runtime of one side: built-in defaults (or --config), the
 * model, the user's --set, then the side's own settings (which win, so a
 * comparison always compares what it says). */
int bench_open_side(const bench_opts *o, const char *model, const char *const *side_sets,
                    const char *port_file, pagoda_config **cfg_out, pagoda_runtime **rt_out,
                     char *err, size_t err_len)
{
    *cfg_out = NULL;
    *rt_out = NULL;
    int st = PAGODA_OK;
    pagoda_config *cfg = o->config ? pagoda_config_load(o->config, err, err_len) : pagoda_config_new_empty();
    if (!cfg) return PAGODA_ERR_INVALID;
    char buf[4200];
    if (!o->config) {
        static const char *const defaults[] = {
            "engine.backend=cpu", "engine.scheduler=continuous", "engine.kvcache=paged",
            "engine.log_level=warn", "engine.temperature=0", "engine.seed=1",
            "engine.chat_template=chatml", /* token-id prompts: no template is used; no warning */
            NULL};
        for (int i = 0; defaults[i] && !st; i++) st = pagoda_config_set(cfg, defaults[i], err, err_len);
    }
    if (!st && model) {
        snprintf(buf, sizeof buf, "engine.model=%s", model);
        st = pagoda_config_set(cfg, buf, err, err_len);
    }
    for (int i = 0; i < o->n_sets && !st; i++) st = pagoda_config_set(cfg, o->sets[i], err, err_len);
    for (int i = 0; side_sets && side_sets[i] && !st; i++)
        st = pagoda_config_set(cfg, side_sets[i], err, err_len);
    if (port_file) {
        /* the in-process server: a free port on loopback, written to a file */
        const char *fe[] = {"engine.frontend=http", "frontend.http.host=127.0.0.1",
                            "frontend.http.port=0", NULL};
        for (int i = 0; fe[i] && !st; i++) st = pagoda_config_set(cfg, fe[i], err, err_len);
        snprintf(buf, sizeof buf, "frontend.http.port_file=%s", port_file);
        if (!st) st = pagoda_config_set(cfg, buf, err, err_len);
    }
    if (!st) st = pagoda_runtime_open(cfg, port_file != NULL, false, rt_out, err, err_len);
    if (!st) pagoda_engine_set_step_hook((*rt_out)->engine, on_step, NULL);
    if (!st && pagoda_engine_start((*rt_out)->engine)) {
        ERR("the engine did not start");
        st = PAGODA_ERR_INTERNAL;
    }
    if (st) {
        pagoda_runtime_close(*rt_out);
        *rt_out = NULL;
        pagoda_config_free(cfg);
        return st;
    }
    *cfg_out = cfg;
    return PAGODA_OK;
}

int bench_run_side(const bench_opts *o, const char *label, const char *model,
                    const char *const *side_sets, int what, bench_result *res, char *err,
                    size_t err_len)
{
    memset(res, 0, sizeof *res);
    snprintf(res->label, sizeof res->label, "%s", label);
    pagoda_config *cfg = NULL;
    pagoda_runtime *rt = NULL;
    pagoda_bench_req *reqs = NULL;
    char port_file[256];
    snprintf(port_file, sizeof port_file, "/tmp/pagoda-bench-%d.port", (int)getpid());
    unlink(port_file);
    int st = bench_open_side(o, model, side_sets, o->serve ? port_file : NULL, &cfg, &rt, err, err_len);
    if (st) return st;
    const char *base = strrchr(rt->ec.model, '/');
    snprintf(res->model, sizeof res->model, "%s", base ? base + 1 : rt->ec.model);
    int main_type = -1;
    uint64_t most = 0;
    for (int t = 0; t < PAGODA_DTYPE_COUNT_; t++)
        if (rt->plan.weight_bytes_by_type[t] > most) most = rt->plan.weight_bytes_by_type[t], main_type = t;
    snprintf(res->model_type, sizeof res->model_type, "%s", pagoda_dtype_name(main_type));
    const char *fg = pagoda_config_get(cfg, "backend.cpu", "f16_gemm");
    snprintf(res->f16_gemm, sizeof res->f16_gemm, "%s", fg ? fg : "auto");
    res->weight_bytes = rt->plan.weight_bytes;
    bench_model_traffic(rt->model, &res->bytes_per_token, &res->flops_per_token);
    if (!o->quiet) fprintf(stderr, "bench: [%s] %s, %s, %s/%s, %lld KV blocks of %d\n", label,
                           res->model, rt->backend.info.name, rt->ec.scheduler, rt->ec.kvcache,
                           (long long)rt->plan.kv_blocks, rt->ec.block_size);
    /* warm-up: weights paged in, thread pools started */
    if (!o->quiet) fprintf(stderr, "bench: [%s] warm-up\n", label);
    st = run_single(rt, 32, 4, 999, NULL, NULL, NULL, err, err_len);
    if (st) goto out;
    if (what & SIDE_DECODE) {
        if (!o->quiet) fprintf(stderr, "bench: [%s] decode: one stream, %d tokens\n", label,
                               o->decode_tokens);
        st = run_single(rt, 16, o->decode_tokens, 1001, NULL, &res->decode_tps,
                        &res->decode_p50_tps, err, err_len);
        if (st) goto out;
    }
    if (what & SIDE_PREFILL) {
        int32_t n = o->prefill_tokens;
        if (n >= rt->plan.max_seq_len) n = (int32_t)rt->plan.max_seq_len - 2;
        if (!o->quiet) fprintf(stderr, "bench: [%s] prefill: %d tokens\n", label, n);
        double ttft = 0;
        st = run_single(rt, n, 1, 1002, &ttft, NULL, NULL, err, err_len);
        if (st) goto out;
        res->prefill_len = n;
        res->prefill_tps = ttft > 0 ? n / ttft : 0;
    }
    if (what & SIDE_WORKLOAD) {
        int32_t V = rt->model->hp.n_vocab;
        st = pagoda_bench_workload_make(&o->w, V > 1024 ? 259 : 3, V, &reqs, err, err_len);
        if (st) goto out;
        for (int32_t i = 0; i < o->w.n_requests; i++)
            if (reqs[i].n_prompt + reqs[i].max_tokens > rt->plan.max_seq_len) {
                ERR("request %d needs %d tokens but max_seq_len is %lld (shorten --prompt-len, "
                    "--output-len or --shared-prefix)", i, reqs[i].n_prompt + reqs[i].max_tokens,
                    (long long)rt->plan.max_seq_len);
                st = PAGODA_ERR_INVALID;
                goto out;
            }
        if (!o->quiet)
            fprintf(stderr, "bench: [%s] workload: %d requests%s\n", label, o->w.n_requests,
                    o->serve ? " over HTTP" : "");
        if (o->serve) st = bench_serve_workload(rt, port_file, &o->w, reqs, res, err, err_len);
        else st = run_workload(rt, &o->w, reqs, res, !o->quiet, err, err_len);
    }
out:
    pagoda_bench_workload_free(reqs, o->w.n_requests);
    pagoda_runtime_close(rt);
    pagoda_config_free(cfg);
    return st;
}
