#define _GNU_SOURCE /* strdup, usleep, M_PI */
/*
 * bench.c: `pagoda bench`. Three layers:
 *  1. the workload (length distributions, seeded token-id prompts with an
 *     optional shared prefix, Poisson arrival times) and the statistics
 *     (percentiles): pure, unit-tested;
 *  2. one run: build a runtime from a config plus --set overrides, warm it
 *     up, drive the engine in-process (closed or open loop), record every
 *     token's time and a per-step trace (running sequences, KV blocks);
 *  3. the reports: rooflines measured here (read bandwidth, sgemm rate),
 *     the policy comparisons (each side run in this process, one after the
 *     other, on the same workload), text, JSON, CSV and gnuplot PNGs.
 * Not for: correctness checks or anything that asserts a time.
 */
#include "bench.h"

/* Messages, labels and plot paths are cut at their buffers' ends when a
 * path is absurdly long; that is acceptable here. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include <ctype.h>
#include <dlfcn.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "engine.h"
#include "genmodel.h"
#include "log.h"
#include "memplan.h"
#include "model.h"
#include "runtime.h"

#define ERR(...) snprintf(err, err_len, __VA_ARGS__)

enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

/* ================================================================ workload */

uint64_t pagoda_bench_rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double pagoda_bench_rng_unit(uint64_t *s)
{
    return (double)(pagoda_bench_rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

static int parse_len(const char *s, const char *end, int32_t *out)
{
    if (s == end) return -1;
    int64_t v = 0;
    for (const char *p = s; p < end; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
        if (v > 1000000) return -1;
    }
    if (v < 1) return -1;
    *out = (int32_t)v;
    return 0;
}

int pagoda_bench_dist_parse(const char *s, pagoda_bench_dist *d, char *err, size_t err_len)
{
    if (!s || !*s) { ERR("empty length distribution"); return PAGODA_ERR_INVALID; }
    int kind = PAGODA_BENCH_UNIFORM;
    const char *body = s;
    if (strncmp(s, "uniform:", 8) == 0) body = s + 8;
    else if (strncmp(s, "log:", 4) == 0) { kind = PAGODA_BENCH_LOGUNIFORM; body = s + 4; }
    const char *dash = strchr(body, '-');
    const char *end = body + strlen(body);
    pagoda_bench_dist r = {0};
    if (!dash) {
        if (body != s || parse_len(body, end, &r.lo)) goto bad;
        r.kind = PAGODA_BENCH_FIXED;
        r.hi = r.lo;
    } else {
        if (parse_len(body, dash, &r.lo) || parse_len(dash + 1, end, &r.hi) || r.lo > r.hi) goto bad;
        r.kind = kind;
    }
    *d = r;
    return PAGODA_OK;
bad:
    ERR("'%s' is not a length distribution: expected N, A-B, uniform:A-B or log:A-B with "
        "1 <= A <= B <= 1000000", s);
    return PAGODA_ERR_INVALID;
}

const char *pagoda_bench_dist_str(const pagoda_bench_dist *d, char *buf, size_t n)
{
    if (d->kind == PAGODA_BENCH_FIXED) snprintf(buf, n, "%d", d->lo);
    else snprintf(buf, n, "%s:%d-%d", d->kind == PAGODA_BENCH_LOGUNIFORM ? "log" : "uniform", d->lo,
                  d->hi);
    return buf;
}

int32_t pagoda_bench_dist_draw(const pagoda_bench_dist *d, uint64_t *s)
{
    if (d->kind == PAGODA_BENCH_FIXED || d->lo == d->hi) return d->lo;
    if (d->kind == PAGODA_BENCH_LOGUNIFORM) {
        /* exp of a uniform draw over [ln lo, ln(hi + 1)), floored: every
         * integer in range reachable, equal mass per octave */
        double a = log((double)d->lo), b = log((double)d->hi + 1.0);
        int32_t v = (int32_t)floor(exp(a + (b - a) * pagoda_bench_rng_unit(s)));
        return v < d->lo ? d->lo : v > d->hi ? d->hi : v;
    }
    uint64_t span = (uint64_t)(d->hi - d->lo) + 1;
    return d->lo + (int32_t)(pagoda_bench_rng_next(s) % span);
}

void pagoda_bench_workload_default(pagoda_bench_workload *w)
{
    memset(w, 0, sizeof *w);
    w->n_requests = 32;
    w->prompt_len = (pagoda_bench_dist){PAGODA_BENCH_FIXED, 128, 128};
    w->output_len = (pagoda_bench_dist){PAGODA_BENCH_FIXED, 128, 128};
    w->concurrency = 8;
    w->seed = 1;
}

void pagoda_bench_workload_free(pagoda_bench_req *r, int32_t n)
{
    if (!r) return;
    for (int32_t i = 0; i < n; i++) free(r[i].prompt);
    free(r);
}

int pagoda_bench_workload_make(const pagoda_bench_workload *w, int32_t tok_lo, int32_t tok_hi,
                               pagoda_bench_req **out, char *err, size_t err_len)
{
    *out = NULL;
    if (w->n_requests < 1 || w->n_requests > 1000000) {
        ERR("--requests %d: expected 1..1000000", w->n_requests);
        return PAGODA_ERR_INVALID;
    }
    if (tok_lo < 0 || tok_hi <= tok_lo) {
        ERR("no token ids to draw from ([%d, %d))", tok_lo, tok_hi);
        return PAGODA_ERR_INVALID;
    }
    if (w->shared_prefix < 0 || w->shared_frac < 0 || w->shared_frac > 1) {
        ERR("--shared-prefix must be >= 0 and --shared-frac within 0..1");
        return PAGODA_ERR_INVALID;
    }
    if (w->rate < 0 || (w->rate == 0 && w->concurrency < 1)) {
        ERR("give --concurrency >= 1 (closed loop) or --rate > 0 (open loop)");
        return PAGODA_ERR_INVALID;
    }
    /* separate streams: changing the output lengths does not change the
     * prompts, and the prefix is the same whatever the request count */
    uint64_t s_len = w->seed * 4 + 1, s_tok = w->seed * 4 + 2, s_pre = w->seed * 4 + 3,
             s_arr = w->seed * 4 + 4;
    uint64_t span = (uint64_t)(tok_hi - tok_lo);
    int32_t *prefix = NULL;
    pagoda_bench_req *r = calloc((size_t)w->n_requests, sizeof *r);
    if (!r) goto nomem;
    if (w->shared_prefix > 0) {
        prefix = malloc(sizeof(int32_t) * (size_t)w->shared_prefix);
        if (!prefix) goto nomem;
        for (int32_t i = 0; i < w->shared_prefix; i++)
            prefix[i] = tok_lo + (int32_t)(pagoda_bench_rng_next(&s_pre) % span);
    }
    double t = 0;
    for (int32_t i = 0; i < w->n_requests; i++) {
        pagoda_bench_req *q = &r[i];
        int32_t own = pagoda_bench_dist_draw(&w->prompt_len, &s_len);
        q->max_tokens = pagoda_bench_dist_draw(&w->output_len, &s_len);
        q->shared = w->shared_prefix > 0 && pagoda_bench_rng_unit(&s_pre) < w->shared_frac;
        q->n_prompt = w->shared_prefix + own;
        q->prompt = malloc(sizeof(int32_t) * (size_t)q->n_prompt);
        if (!q->prompt) goto nomem;
        int32_t k = 0;
        if (q->shared) {
            memcpy(q->prompt, prefix, sizeof(int32_t) * (size_t)w->shared_prefix);
            k = w->shared_prefix;
        }
        for (; k < q->n_prompt; k++) q->prompt[k] = tok_lo + (int32_t)(pagoda_bench_rng_next(&s_tok) % span);
        if (w->rate > 0) {
            /* Poisson process: exponential gaps; the first request at 0 */
            if (i > 0) t += -log(1.0 - pagoda_bench_rng_unit(&s_arr)) / w->rate;
            q->arrival_s = t;
        }
    }
    free(prefix);
    *out = r;
    return PAGODA_OK;
nomem:
    free(prefix);
    pagoda_bench_workload_free(r, w->n_requests);
    ERR("out of memory for the workload");
    return PAGODA_ERR_NOMEM;
}

/* ================================================================ stats */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double pagoda_bench_percentile(double *v, size_t n, double p)
{
    if (n == 0) return 0;
    qsort(v, n, sizeof *v, cmp_double);
    if (p <= 0) return v[0];
    if (p >= 100) return v[n - 1];
    double x = p / 100.0 * (double)(n - 1);
    size_t i = (size_t)x;
    double f = x - (double)i;
    return i + 1 < n ? v[i] + (v[i + 1] - v[i]) * f : v[i];
}

void pagoda_bench_pcts_of(double *v, size_t n, pagoda_bench_pcts *o)
{
    memset(o, 0, sizeof *o);
    if (n == 0) return;
    double s = 0;
    for (size_t i = 0; i < n; i++) s += v[i];
    o->mean = s / (double)n;
    o->p50 = pagoda_bench_percentile(v, n, 50);
    o->p90 = pagoda_bench_percentile(v, n, 90);
    o->p99 = pagoda_bench_percentile(v, n, 99);
    o->max = v[n - 1];
}

/* ================================================================ one run */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct trace_pt {
    double t;            /* seconds from the run's start */
    int32_t running, waiting;
    int64_t kv_used, kv_cached, kv_total, gen_tokens;
} trace_pt;

struct run_ctx;
typedef struct req_rec {
    struct run_ctx *run;
    int32_t n_prompt, max_tokens, n_tok, preempt, cached;
    int finish;
    bool shared, failed;
    double t_submit, t_first, t_last, t_end;   /* seconds from the run's start */
} req_rec;

typedef struct run_ctx {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t n_done, in_flight;
    double t0;
    double *itl;                 /* ms, every gap between two tokens of a request */
    size_t n_itl, cap_itl;
    trace_pt *trace;
    size_t n_trace, cap_trace;
    char first_error[256];
} run_ctx;

/* What one side of a run measured. */
typedef struct bench_result {
    char label[64];
    char model[256];
    char model_type[16];
    int32_t n_req, n_ok, n_err;
    double wall_s;
    int64_t gen_tokens, prompt_tokens, cached_tokens;
    double gen_tps, total_tps;
    pagoda_bench_pcts ttft, itl, e2e;  /* ms */
    double kv_util_peak, kv_util_mean, running_mean;
    int32_t peak_running;
    int64_t preemptions, prefix_query, prefix_hit;
    int64_t kv_blocks, kv_block_size;
    req_rec *reqs;
    trace_pt *trace;
    size_t n_trace;
    /* model and roofline figures (quant comparison, --roofline) */
    uint64_t weight_bytes, plan_kv_tokens, plan_budget;
    int64_t plan_seqs_2k;      /* whole sequences of plan_ctx tokens the KV left holds */
    int64_t plan_ctx;
    double bytes_per_token, flops_per_token;
    double decode_tps, prefill_tps;  /* single stream; 0 when not measured */
    double decode_p50_tps;           /* 1 / median inter-token time: what the kernels do when
                                        the CPU is ours (robust to other load on the machine) */
    int32_t prefill_len;
} bench_result;

static void result_free(bench_result *r)
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
    double t = now_s() - c->t0;
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

static void hook_attach(run_ctx *c)
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
        double t = now_s() - c->t0;
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

static int run_ctx_init(run_ctx *c, size_t cap_itl)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->cap_itl = cap_itl ? cap_itl : 1;
    c->itl = malloc(sizeof(double) * c->cap_itl);
    return c->itl ? 0 : PAGODA_ERR_NOMEM;
}

static void run_ctx_free(run_ctx *c)
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
        r->t_submit = now_s() - c->t0;
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
static int finish_result(run_ctx *c, req_rec *rec, int32_t n, const pagoda_engine_stats *s0,
                         const pagoda_engine_stats *s1, bench_result *res, char *err, size_t err_len)
{
    res->n_req = n;
    double t_end = 0, t_start = 1e300;
    double *ttft = malloc(sizeof(double) * (size_t)n), *e2e = malloc(sizeof(double) * (size_t)n);
    if (!ttft || !e2e) {
        free(ttft);
        free(e2e);
        free(rec);
        run_ctx_free(c);
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
    run_ctx_free(c);
    return PAGODA_OK;
}


/* Drive the engine through the workload and fill res. */
static int run_workload(pagoda_runtime *rt, const pagoda_bench_workload *w,
                        const pagoda_bench_req *reqs, bench_result *res, char *err, size_t err_len)
{
    int32_t n = w->n_requests;
    size_t cap_itl = 0;
    for (int32_t i = 0; i < n; i++) cap_itl += (size_t)reqs[i].max_tokens;
    run_ctx c;
    req_rec *rec = calloc((size_t)n, sizeof *rec);
    if (!rec || run_ctx_init(&c, cap_itl)) {
        free(rec);
        ERR("out of memory for the run");
        return PAGODA_ERR_NOMEM;
    }
    pagoda_engine_stats s0;
    pagoda_engine_get_stats(rt->engine, &s0);
    c.t0 = now_s();
    hook_attach(&c);

    int32_t next = 0;
    if (w->rate > 0) {
        for (; next < n; next++) {
            double wait = reqs[next].arrival_s - (now_s() - c.t0);
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
        }
        pthread_mutex_unlock(&c.mu);
    }
    pthread_mutex_lock(&c.mu);
    while (c.n_done < n) pthread_cond_wait(&c.cv, &c.mu);
    pthread_mutex_unlock(&c.mu);
    pagoda_engine_wait_idle(rt->engine);
    hook_attach(NULL);
    pagoda_engine_stats s1;
    pagoda_engine_get_stats(rt->engine, &s1);

    return finish_result(&c, rec, n, &s0, &s1, res, err, err_len);
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
    st = run_workload(rt, &w, q, &r, err, err_len);
    if (!st && r.n_err) { ERR("a single request failed"); st = PAGODA_ERR_INTERNAL; }
    if (!st) {
        req_rec *x = &r.reqs[0];
        if (ttft_s) *ttft_s = x->t_first - x->t_submit;
        if (decode_tps) *decode_tps = x->n_tok > 1 ? (x->n_tok - 1) / (x->t_last - x->t_first) : 0;
        if (decode_p50_tps) *decode_p50_tps = r.itl.p50 > 0 ? 1e3 / r.itl.p50 : 0;
    }
    result_free(&r);
    pagoda_bench_workload_free(q, 1);
    return st;
}

/* ================================================================ serving */

/* The serving benchmark: the same workload through the HTTP frontend, as
 * `stream: true` completions with the prompt given as token ids, from
 * `concurrency` client threads (closed loop). TTFT is the first streamed
 * chunk, ITL the gaps between chunks (a token whose text is held back,
 * e.g. half a UTF-8 character, arrives with the next), token counts from
 * the usage chunk. A small HTTP/1.1 client of its own (chunked transfer
 * decoding included) keeps the binary free of libcurl. */

typedef struct http_run {
    const char *host;
    int port;
    const pagoda_bench_req *reqs;
    req_rec *rec;
    int32_t n, next;
    run_ctx *c;
} http_run;

static int http_connect(const char *host, int port)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, ps, &hints, &ai) || !ai) return -1;
    int fd = -1;
    for (struct addrinfo *p = ai; p && fd < 0; p = p->ai_next) {
        fd = socket(p->ai_family, p->ai_socktype, p->ai_protocol);
        if (fd >= 0 && connect(fd, p->ai_addr, p->ai_addrlen)) { close(fd); fd = -1; }
    }
    freeaddrinfo(ai);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

/* One SSE event's JSON: a text chunk (a token time), the usage, an error. */
static void http_event(run_ctx *c, req_rec *r, const char *data, size_t len)
{
    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) return;
    json_error_t je;
    json_t *o = json_loadb(data, len, 0, &je);
    if (!o) return;
    double t = now_s() - c->t0;
    json_t *usage = json_object_get(o, "usage");
    json_t *choices = json_object_get(o, "choices");
    pthread_mutex_lock(&c->mu);
    if (json_object_get(o, "error")) {
        r->failed = true;
        json_t *m = json_object_get(json_object_get(o, "error"), "message");
        if (!c->first_error[0])
            snprintf(c->first_error, sizeof c->first_error, "%s", json_is_string(m) ? json_string_value(m) : "error");
    }
    if (json_is_object(usage)) {
        r->n_tok = (int32_t)json_integer_value(json_object_get(usage, "completion_tokens"));
        json_t *d = json_object_get(usage, "prompt_tokens_details");
        if (json_is_object(d)) r->cached = (int32_t)json_integer_value(json_object_get(d, "cached_tokens"));
    }
    json_t *ch = json_array_get(choices, 0);
    json_t *text = json_object_get(ch, "text");
    if (json_is_string(text) && json_string_length(text) > 0) {
        if (r->t_first == 0) r->t_first = t;
        else if (c->n_itl < c->cap_itl) c->itl[c->n_itl++] = (t - r->t_last) * 1e3;
        r->t_last = t;
    }
    pthread_mutex_unlock(&c->mu);
    json_decref(o);
}

/* POST one request and read its stream to the end. */
static void http_one(http_run *h, int32_t i)
{
    run_ctx *c = h->c;
    req_rec *r = &h->rec[i];
    const pagoda_bench_req *q = &h->reqs[i];
    r->run = c;
    r->n_prompt = q->n_prompt;
    r->max_tokens = q->max_tokens;
    r->shared = q->shared;
    json_t *body = json_object(), *ids = json_array();
    for (int32_t k = 0; k < q->n_prompt; k++) json_array_append_new(ids, json_integer(q->prompt[k]));
    json_object_set_new(body, "prompt", ids);
    json_object_set_new(body, "max_tokens", json_integer(q->max_tokens));
    json_object_set_new(body, "temperature", json_real(0));
    json_object_set_new(body, "ignore_eos", json_true());
    json_object_set_new(body, "stream", json_true());
    json_t *so = json_object();
    json_object_set_new(so, "include_usage", json_true());
    json_object_set_new(body, "stream_options", so);
    char *js = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    size_t jl = js ? strlen(js) : 0;
    char head[512];
    int hl = snprintf(head, sizeof head,
                      "POST /v1/completions HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n", h->host, h->port, jl);
    char *raw = NULL, *bodybuf = NULL;
    size_t raw_len = 0, raw_cap = 0, body_len = 0, body_cap = 0, raw_pos = 0, ev_pos = 0;
    bool in_body = false, chunked = false, done = false;
    int status = 0;
    int64_t chunk_left = -1; /* -1: a size line comes next */
    pthread_mutex_lock(&c->mu);
    r->t_submit = now_s() - c->t0;
    pthread_mutex_unlock(&c->mu);
    int fd = js ? http_connect(h->host, h->port) : -1;
    if (fd < 0 || write(fd, head, (size_t)hl) != hl || write(fd, js, jl) != (ssize_t)jl) {
        pthread_mutex_lock(&c->mu);
        r->failed = true;
        if (!c->first_error[0])
            snprintf(c->first_error, sizeof c->first_error, "cannot reach %s:%d: %s", h->host, h->port, strerror(errno));
        pthread_mutex_unlock(&c->mu);
        goto out;
    }
    for (;;) {
        if (raw_cap - raw_len < 16384) {
            size_t nc = raw_cap ? raw_cap * 2 : 65536;
            char *p = realloc(raw, nc);
            if (!p) break;
            raw = p;
            raw_cap = nc;
        }
        ssize_t got = read(fd, raw + raw_len, raw_cap - raw_len);
        if (got <= 0) break;
        raw_len += (size_t)got;
        if (!in_body) {
            char *e = memmem(raw, raw_len, "\r\n\r\n", 4);
            if (!e) continue;
            *e = 0;
            sscanf(raw, "HTTP/%*s %d", &status);
            for (char *p = raw; *p; p++) *p = (char)tolower((unsigned char)*p);
            chunked = strstr(raw, "transfer-encoding: chunked") != NULL;
            raw_pos = (size_t)(e - raw) + 4;
            in_body = true;
        }
        /* move decoded bytes to bodybuf */
        while (raw_pos < raw_len && !done) {
            size_t take;
            if (chunked) {
                if (chunk_left < 0) {
                    char *nl = memmem(raw + raw_pos, raw_len - raw_pos, "\r\n", 2);
                    if (!nl) break;
                    chunk_left = strtoll(raw + raw_pos, NULL, 16);
                    raw_pos = (size_t)(nl - raw) + 2;
                    if (chunk_left == 0) { done = true; break; }
                    continue;
                }
                if (chunk_left == 0) { /* the CRLF after a chunk's data */
                    if (raw_len - raw_pos < 2) break;
                    raw_pos += 2;
                    chunk_left = -1;
                    continue;
                }
                take = raw_len - raw_pos < (size_t)chunk_left ? raw_len - raw_pos : (size_t)chunk_left;
                chunk_left -= (int64_t)take;
            } else {
                take = raw_len - raw_pos;
            }
            if (body_len + take + 1 > body_cap) {
                size_t nc = (body_cap ? body_cap * 2 : 65536) + take;
                char *p = realloc(bodybuf, nc);
                if (!p) { done = true; break; }
                bodybuf = p;
                body_cap = nc;
            }
            memcpy(bodybuf + body_len, raw + raw_pos, take);
            body_len += take;
            raw_pos += take;
        }
        /* complete events */
        for (;;) {
            char *e = body_len > ev_pos ? memmem(bodybuf + ev_pos, body_len - ev_pos, "\n\n", 2) : NULL;
            if (!e) break;
            if (status == 200 && e - (bodybuf + ev_pos) > 6 && !memcmp(bodybuf + ev_pos, "data: ", 6))
                http_event(c, r, bodybuf + ev_pos + 6, (size_t)(e - bodybuf) - ev_pos - 6);
            ev_pos = (size_t)(e - bodybuf) + 2;
        }
        if (done) break;
        /* drop consumed raw bytes (headers included) */
        if (raw_pos > 0) {
            memmove(raw, raw + raw_pos, raw_len - raw_pos);
            raw_len -= raw_pos;
            raw_pos = 0;
        }
    }
    pthread_mutex_lock(&c->mu);
    if (status != 200) {
        r->failed = true;
        if (!c->first_error[0]) {
            size_t bl = body_len < 200 ? body_len : 200;
            snprintf(c->first_error, sizeof c->first_error, "HTTP %d: %.*s", status, (int)bl, bodybuf ? bodybuf : "");
        }
    }
    pthread_mutex_unlock(&c->mu);
out:
    if (fd >= 0) close(fd);
    pthread_mutex_lock(&c->mu);
    r->t_end = now_s() - c->t0;
    if (r->t_first == 0 && !r->failed) {
        r->failed = true;
        if (!c->first_error[0]) snprintf(c->first_error, sizeof c->first_error, "no token was streamed");
    }
    c->n_done++;
    pthread_mutex_unlock(&c->mu);
    free(js);
    free(raw);
    free(bodybuf);
}

static void *http_client(void *arg)
{
    http_run *h = arg;
    for (;;) {
        pthread_mutex_lock(&h->c->mu);
        int32_t i = h->next < h->n ? h->next++ : -1;
        pthread_mutex_unlock(&h->c->mu);
        if (i < 0) return NULL;
        http_one(h, i);
    }
}

/* Run the workload against host:port; rt (in-process server) or NULL. */
static int run_workload_http(pagoda_runtime *rt, const char *host, int port,
                             const pagoda_bench_workload *w, const pagoda_bench_req *reqs,
                             bench_result *res, char *err, size_t err_len)
{
    int32_t n = w->n_requests;
    size_t cap_itl = 0;
    for (int32_t i = 0; i < n; i++) cap_itl += (size_t)reqs[i].max_tokens;
    run_ctx c;
    req_rec *rec = calloc((size_t)n, sizeof *rec);
    if (!rec || run_ctx_init(&c, cap_itl)) {
        free(rec);
        ERR("out of memory for the run");
        return PAGODA_ERR_NOMEM;
    }
    pagoda_engine_stats s0 = {0}, s1 = {0};
    if (rt) pagoda_engine_get_stats(rt->engine, &s0);
    c.t0 = now_s();
    if (rt) hook_attach(&c);
    http_run h = {.host = host, .port = port, .reqs = reqs, .rec = rec, .n = n, .c = &c};
    int nt = w->concurrency < n ? w->concurrency : n;
    pthread_t *th = calloc((size_t)nt, sizeof *th);
    int started = 0;
    for (int i = 0; th && i < nt; i++)
        if (pthread_create(&th[i], NULL, http_client, &h) == 0) started++;
    if (started == 0) http_client(&h);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    free(th);
    if (rt) {
        pagoda_engine_wait_idle(rt->engine);
        hook_attach(NULL);
        pagoda_engine_get_stats(rt->engine, &s1);
    }
    return finish_result(&c, rec, n, &s0, &s1, res, err, err_len);
}

/* ================================================================ rooflines */

typedef struct bw_arg {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} bw_arg;

typedef uint64_t bw_vec __attribute__((vector_size(16)));

static void *bw_thread(void *arg)
{
    bw_arg *a = arg;
    /* eight independent 16-byte sums (SSE2, every x86-64 has it): the
     * loop is bound by memory, not by loads or adds */
    const bw_vec *v = (const bw_vec *)a->p;
    size_t nv = a->n / 2;
    bw_vec s[8] = {{0}};
    size_t i = 0;
    for (; i + 8 <= nv; i += 8)
        for (int k = 0; k < 8; k++) s[k] += v[i + k];
    uint64_t t = 0;
    for (; i < nv; i++) t += v[i][0] + v[i][1];
    for (int k = 0; k < 8; k++) t += s[k][0] + s[k][1];
    a->sum = t;
    return NULL;
}

/* Read bandwidth in GB/s: `threads` threads summing their share of a buffer
 * far larger than the last-level cache, best of `reps`. */
static double measure_bandwidth(int threads, size_t bytes, int reps)
{
    size_t n = bytes / sizeof(uint64_t);
    uint64_t *buf = aligned_alloc(64, n * sizeof *buf);
    if (!buf) return 0;
    for (size_t i = 0; i < n; i++) buf[i] = i; /* touch every page first */
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    pthread_t th[64];
    bw_arg a[64];
    double best = 0;
    volatile uint64_t sink = 0;
    for (int r = 0; r < reps; r++) {
        double t = now_s();
        for (int k = 0; k < threads; k++) {
            /* even offsets keep each share 16-byte aligned */
            size_t lo = (n * (size_t)k / (size_t)threads) & ~(size_t)1,
                   hi = k + 1 == threads ? n : (n * (size_t)(k + 1) / (size_t)threads) & ~(size_t)1;
            a[k] = (bw_arg){buf + lo, hi - lo, 0};
            if (pthread_create(&th[k], NULL, bw_thread, &a[k])) a[k].n = 0, bw_thread(&a[k]), th[k] = 0;
        }
        for (int k = 0; k < threads; k++) {
            if (th[k]) pthread_join(th[k], NULL);
            sink += a[k].sum;
        }
        double dt = now_s() - t;
        double gbs = (double)(n * sizeof *buf) / dt / 1e9;
        if (gbs > best) best = gbs;
    }
    (void)sink;
    free(buf);
    return best;
}

typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                         int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* The sgemm rate in GFLOP/s of OpenBLAS at `threads` threads, on the
 * shape of a 512-token prefill through a 2048-wide layer, best of reps.
 * OpenBLAS is opened here (not linked) so main()'s OPENBLAS_CORETYPE choice
 * is in place when it loads. Returns 0 when OpenBLAS cannot be opened. */
static double measure_sgemm(int threads, int reps, char *core, size_t core_len)
{
    void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_GLOBAL);
    if (!h) h = dlopen("libopenblas.so", RTLD_NOW | RTLD_GLOBAL);
    if (!h) return 0;
    sgemm_fn gemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
    void (*set_threads)(int) = (void (*)(int))dlsym(h, "openblas_set_num_threads");
    char *(*get_core)(void) = (char *(*)(void))dlsym(h, "openblas_get_corename");
    if (core && core_len) snprintf(core, core_len, "%s", get_core ? get_core() : "?");
    if (!gemm) return 0;
    if (set_threads) set_threads(threads);
    const int M = 512, N = 2048, K = 2048;
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * N * K),
          *c = malloc(sizeof(float) * M * N);
    double best = 0;
    if (a && b && c) {
        for (int i = 0; i < M * K; i++) a[i] = (float)(i % 7) * 0.01f;
        for (int i = 0; i < N * K; i++) b[i] = (float)(i % 5) * 0.01f;
        for (int r = 0; r < reps + 1; r++) {
            double t = now_s();
            /* C = A B^T, row-major: the layout the CPU backend's prefill uses */
            gemm(101, 111, 112, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
            double dt = now_s() - t;
            double g = 2.0 * M * N * K / dt / 1e9;
            if (r > 0 && g > best) best = g; /* the first run starts OpenBLAS's threads */
        }
    }
    free(a);
    free(b);
    free(c);
    return best;
}

/* Bytes of weights one decode step streams, and matmul FLOPs per token:
 * every tensor, except that the token embedding is read one row per token
 * (unless the output layer is tied to it) and is no matmul. */
static void model_traffic(const pagoda_model *m, double *bytes, double *flops)
{
    double b = 0, f = 0;
    const gguf_file *g = m->gguf;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        double elems = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) elems *= (double)t->ne[d];
        if (t == m->tok_embd) {
            if (m->hp.tied_output) { b += (double)t->nbytes; f += 2 * elems; }
            else b += (double)t->nbytes / (double)(t->ne[1] > 0 ? t->ne[1] : 1);
            continue;
        }
        b += (double)t->nbytes;
        if (t->n_dims >= 2) f += 2 * elems;
    }
    *bytes = b;
    *flops = f;
}

/* ================================================================ options */

#define MAX_SETS 64

typedef struct bench_opts {
    pagoda_bench_workload w;
    const char *config, *model, *shape, *type, *vocab, *cache_dir;
    int32_t context;
    const char *sets[MAX_SETS];
    int n_sets;
    const char *json, *csv, *plot, *compare;
    bool roofline;
    int32_t decode_tokens, prefill_tokens;
    uint64_t memory;  /* quant comparison: the budget the KV left is planned under */
    int threads;
    bool quiet;
    bool serve;              /* the workload through the in-process HTTP frontend */
    const char *http;        /* HOST:PORT of a running server */
    int32_t vocab_size;      /* token ids drawn for --http without --model */
} bench_opts;

static void bench_usage(FILE *f)
{
    fprintf(f,
"usage: pagoda bench [--model FILE | --shape NAME --type T | --config FILE] [--set S.K=V]...\n"
"                    [workload] [--roofline] [--compare NAME] [--json F] [--csv F] [--plot DIR]\n"
"Drives the engine in-process (no HTTP) with synthetic token-id prompts and reports\n"
"throughput, TTFT / inter-token / end-to-end latency (p50/p90/p99), KV utilisation,\n"
"concurrency and preemptions. Outputs are exact lengths (ignore_eos), greedy.\n"
"\n"
"model and engine:\n"
"  --model FILE          a GGUF model\n"
"  --shape NAME          or generate one (llama-110M, tinyllama-1.1B, tiny) into the cache\n"
"  --type T              F16, Q8_0 (default), Q4_0, ... of the generated model\n"
"  --context N           context length written into a generated model\n"
"  --vocab FILE          vocabulary GGUF for a generated model\n"
"  --cache-dir DIR       where generated models live ($PAGODA_BENCH_CACHE, else\n"
"                        ~/.cache/pagoda/models)\n"
"  --config FILE         a config (default: built-in: cpu backend, continuous, paged)\n"
"  --set S.K=V           any config override (engine.scheduler=static,\n"
"                        engine.kv_cache_tokens=4096, backend.cpu.threads=2, ...)\n"
"workload (default: 32 requests, prompt 128, output 128, concurrency 8):\n"
"  --requests N          requests\n"
"  --prompt-len D        prompt tokens: N, A-B (uniform), log:A-B (log-uniform)\n"
"  --output-len D        output tokens (exact), same forms\n"
"  --shared-prefix LEN   a common prefix of LEN tokens ...\n"
"  --shared-frac F       ... that this share of requests start with (default 1)\n"
"  --concurrency N       closed loop: N requests in flight\n"
"  --rate R              open loop: Poisson arrivals, R requests/s\n"
"  --seed N              workload seed (default 1)\n"
"serving (HTTP, closed loop at --concurrency, streamed completions of token ids):\n"
"  --serve               start the HTTP frontend in-process and drive it over TCP\n"
"  --http HOST:PORT      drive a running pagoda server instead\n"
"  --vocab-size N        --http without --model: draw ids below N (default 32000)\n"
"reports:\n"
"  --roofline            also measure read bandwidth and the sgemm rate, single-stream\n"
"                        decode and prefill, and print them against their bounds\n"
"  --decode-tokens N     tokens of the single-stream decode measurement (default 64)\n"
"  --prefill-tokens N    prompt of the prefill measurement (default 512)\n"
"  --compare NAME        run a policy comparison side by side:\n"
"                          sched   continuous vs static, mixed outputs 16-512\n"
"                          kv      paged vs contiguous, same KV budget, short requests\n"
"                          prefix  prefix vs paged, 2000-token shared system prompt\n"
"                          quant   F16 vs Q8_0 vs Q4_0: decode, prefill, memory, KV left\n"
"                          batch   16 concurrent sequences vs a single stream\n"
"                        workload flags given override the comparison's defaults\n"
"  --memory SIZE         quant: the budget the KV left is planned under (default 4G)\n"
"  --threads N           threads of the bandwidth and sgemm probes (default: all CPUs)\n"
"  --json FILE           every number, as JSON\n"
"  --csv FILE            one row per request (side, lengths, TTFT, e2e, ...)\n"
"  --plot DIR            PNG plots with gnuplot (when installed)\n");
}

/* Apply a comparison's workload defaults before the user's flags. */
static int compare_defaults(const char *name, bench_opts *o)
{
    pagoda_bench_workload *w = &o->w;
    if (strcmp(name, "sched") == 0) {
        /* four waves of the static batch, all queued at once: continuous
         * batching gains only when a queue waits behind the seats */
        w->n_requests = 32;
        w->prompt_len = (pagoda_bench_dist){PAGODA_BENCH_UNIFORM, 32, 128};
        w->output_len = (pagoda_bench_dist){PAGODA_BENCH_UNIFORM, 16, 512};
        w->concurrency = 32;
    } else if (strcmp(name, "kv") == 0) {
        w->n_requests = 48;
        w->prompt_len = (pagoda_bench_dist){PAGODA_BENCH_UNIFORM, 16, 32};
        w->output_len = (pagoda_bench_dist){PAGODA_BENCH_UNIFORM, 16, 32};
        w->concurrency = 48;
    } else if (strcmp(name, "prefix") == 0) {
        w->n_requests = 4;
        w->prompt_len = (pagoda_bench_dist){PAGODA_BENCH_UNIFORM, 16, 48};
        w->output_len = (pagoda_bench_dist){PAGODA_BENCH_FIXED, 16, 16};
        w->shared_prefix = 2000;
        w->shared_frac = 1.0;
        w->concurrency = 1;
        if (!o->context) o->context = 4096;
    } else if (strcmp(name, "quant") == 0 || strcmp(name, "batch") == 0) {
        w->n_requests = 16;
        w->prompt_len = (pagoda_bench_dist){PAGODA_BENCH_FIXED, 16, 16};
        w->output_len = (pagoda_bench_dist){PAGODA_BENCH_FIXED, 64, 64};
        w->concurrency = 16;
    } else {
        return -1;
    }
    return 0;
}

/* ================================================================ models */

static int mkdir_p(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) && errno != EEXIST) return -1;
    return 0;
}

static int parse_type(const char *s)
{
    static const int types[] = {PAGODA_DTYPE_F32, PAGODA_DTYPE_F16, PAGODA_DTYPE_BF16,
                                PAGODA_DTYPE_Q8_0, PAGODA_DTYPE_Q4_0, PAGODA_DTYPE_Q4_1};
    for (size_t i = 0; s && i < sizeof types / sizeof types[0]; i++)
        if (strcasecmp(s, pagoda_dtype_name(types[i])) == 0) return types[i];
    return -1;
}

/* The path of a generated model of shape/type (made now if missing). */
static int model_for(const bench_opts *o, const char *type, char *out, size_t out_len, char *err,
                     size_t err_len)
{
    const char *shape = o->shape ? o->shape : "llama-110M";
    int dt = parse_type(type);
    if (dt < 0) { ERR("--type %s: expected F32, F16, BF16, Q8_0, Q4_0 or Q4_1", type); return PAGODA_ERR_INVALID; }
    if (!pagoda_model_shape_find(shape)) {
        ERR("--shape %s: expected llama-110M, tinyllama-1.1B or tiny", shape);
        return PAGODA_ERR_INVALID;
    }
    char dir[3072];
    const char *env = getenv("PAGODA_BENCH_CACHE"), *home = getenv("HOME");
    if (o->cache_dir) snprintf(dir, sizeof dir, "%s", o->cache_dir);
    else if (env && *env) snprintf(dir, sizeof dir, "%s", env);
    else snprintf(dir, sizeof dir, "%s/.cache/pagoda/models", home && *home ? home : "/tmp");
    char ctx[32] = "";
    if (o->context > 0) snprintf(ctx, sizeof ctx, "-ctx%d", o->context);
    snprintf(out, out_len, "%s/%s-%s%s%s.gguf", dir, shape, pagoda_dtype_name(dt), ctx,
             o->vocab ? "-vocab" : "");
    if (access(out, R_OK) == 0) return PAGODA_OK;
    if (mkdir_p(dir)) { ERR("cannot create %s: %s", dir, strerror(errno)); return PAGODA_ERR_IO; }
    fprintf(stderr, "bench: generating %s (once; later runs reuse it)\n", out);
    pagoda_genmodel_opts g = {.shape = shape, .dtype = dt, .out = out, .vocab = o->vocab,
                              .seed = 42, .context = o->context};
    return pagoda_gen_model(&g, err, err_len);
}

/* ================================================================ sides */

/* Build the runtime of one side: built-in defaults (or --config), the
 * model, the user's --set, then the side's own settings (which win, so a
 * comparison always compares what it says). */
static int open_side(const bench_opts *o, const char *model, const char *const *side_sets,
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

static void *frontend_thread(void *arg)
{
    pagoda_runtime *rt = arg;
    int st = rt->p_front->ops.frontend.run(rt->front_ctx);
    if (st) pagoda_log(PAGODA_LOG_ERROR, "bench: the HTTP frontend stopped: %s", pagoda_status_str(st));
    return NULL;
}

/* Start the runtime's HTTP frontend, run the workload through it, stop it. */
static int serve_workload(pagoda_runtime *rt, const char *port_file, const pagoda_bench_workload *w,
                          const pagoda_bench_req *reqs, bench_result *res, char *err, size_t err_len)
{
    pthread_t th;
    if (pthread_create(&th, NULL, frontend_thread, rt)) { ERR("cannot start the frontend thread"); return PAGODA_ERR_INTERNAL; }
    int port = 0;
    for (int i = 0; i < 1000 && port <= 0; i++) { /* up to 10 s for the port file */
        FILE *f = fopen(port_file, "r");
        if (f) {
            if (fscanf(f, "%d", &port) != 1) port = 0;
            fclose(f);
        }
        if (port <= 0) usleep(10000);
    }
    int st;
    if (port <= 0) {
        ERR("the HTTP frontend wrote no port to %s", port_file);
        st = PAGODA_ERR_IO;
    } else {
        st = run_workload_http(rt, "127.0.0.1", port, w, reqs, res, err, err_len);
    }
    rt->p_front->ops.frontend.stop(rt->front_ctx);
    pthread_join(th, NULL);
    unlink(port_file);
    return st;
}

/* Which parts of a side to run. */
enum { SIDE_WORKLOAD = 1, SIDE_DECODE = 2, SIDE_PREFILL = 4 };

static int run_side(const bench_opts *o, const char *label, const char *model,
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
    int st = open_side(o, model, side_sets, o->serve ? port_file : NULL, &cfg, &rt, err, err_len);
    if (st) return st;
    const char *base = strrchr(rt->ec.model, '/');
    snprintf(res->model, sizeof res->model, "%s", base ? base + 1 : rt->ec.model);
    int main_type = -1;
    uint64_t most = 0;
    for (int t = 0; t < PAGODA_DTYPE_COUNT_; t++)
        if (rt->plan.weight_bytes_by_type[t] > most) most = rt->plan.weight_bytes_by_type[t], main_type = t;
    snprintf(res->model_type, sizeof res->model_type, "%s", pagoda_dtype_name(main_type));
    res->weight_bytes = rt->plan.weight_bytes;
    model_traffic(rt->model, &res->bytes_per_token, &res->flops_per_token);
    if (!o->quiet) fprintf(stderr, "bench: [%s] %s, %s, %s/%s, %lld KV blocks of %d\n", label,
                           res->model, rt->backend.info.name, rt->ec.scheduler, rt->ec.kvcache,
                           (long long)rt->plan.kv_blocks, rt->ec.block_size);
    /* warm-up: weights paged in, thread pools started */
    st = run_single(rt, 32, 4, 999, NULL, NULL, NULL, err, err_len);
    if (st) goto out;
    if (what & SIDE_DECODE) {
        st = run_single(rt, 16, o->decode_tokens, 1001, NULL, &res->decode_tps,
                        &res->decode_p50_tps, err, err_len);
        if (st) goto out;
    }
    if (what & SIDE_PREFILL) {
        int32_t n = o->prefill_tokens;
        if (n >= rt->plan.max_seq_len) n = (int32_t)rt->plan.max_seq_len - 2;
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
        if (o->serve) st = serve_workload(rt, port_file, &o->w, reqs, res, err, err_len);
        else st = run_workload(rt, &o->w, reqs, res, err, err_len);
    }
out:
    pagoda_bench_workload_free(reqs, o->w.n_requests);
    pagoda_runtime_close(rt);
    pagoda_config_free(cfg);
    return st;
}

/* ================================================================ reports */

static double ratio(double a, double b) { return b > 0 ? a / b : 0; }

static void print_results(FILE *f, const bench_result *r, int n)
{
    fprintf(f, "%-26s", "");
    for (int i = 0; i < n; i++) fprintf(f, " %16s", r[i].label);
    fprintf(f, "\n");
#define ROW(name, fmt, expr)                                            \
    do {                                                                \
        fprintf(f, "%-26s", name);                                      \
        for (int i = 0; i < n; i++) fprintf(f, " %16" fmt, (expr));     \
        fprintf(f, "\n");                                               \
    } while (0)
    ROW("requests ok", "d", r[i].n_ok);
    ROW("requests failed", "d", r[i].n_err);
    ROW("wall s", ".2f", r[i].wall_s);
    ROW("generated tokens", "lld", (long long)r[i].gen_tokens);
    ROW("generated tok/s", ".1f", r[i].gen_tps);
    ROW("total tok/s", ".1f", r[i].total_tps);
    ROW("TTFT ms p50", ".1f", r[i].ttft.p50);
    ROW("TTFT ms p90", ".1f", r[i].ttft.p90);
    ROW("TTFT ms p99", ".1f", r[i].ttft.p99);
    ROW("ITL ms p50", ".2f", r[i].itl.p50);
    ROW("ITL ms p90", ".2f", r[i].itl.p90);
    ROW("ITL ms p99", ".2f", r[i].itl.p99);
    ROW("e2e ms p50", ".0f", r[i].e2e.p50);
    ROW("e2e ms p90", ".0f", r[i].e2e.p90);
    ROW("e2e ms p99", ".0f", r[i].e2e.p99);
    ROW("KV util peak %", ".1f", 100 * r[i].kv_util_peak);
    ROW("KV util mean %", ".1f", 100 * r[i].kv_util_mean);
    ROW("running seqs peak", "d", r[i].peak_running);
    ROW("running seqs mean", ".1f", r[i].running_mean);
    ROW("preemptions", "lld", (long long)r[i].preemptions);
    ROW("prefix hit %", ".1f", r[i].prefix_query ? 100.0 * (double)r[i].prefix_hit / (double)r[i].prefix_query : 0.0);
#undef ROW
}

static void print_pcts_json(json_t *o, const char *k, const pagoda_bench_pcts *p)
{
    json_t *x = json_object();
    json_object_set_new(x, "mean", json_real(p->mean));
    json_object_set_new(x, "p50", json_real(p->p50));
    json_object_set_new(x, "p90", json_real(p->p90));
    json_object_set_new(x, "p99", json_real(p->p99));
    json_object_set_new(x, "max", json_real(p->max));
    json_object_set_new(o, k, x);
}

typedef struct roofline {
    double bw_gbs, sgemm_gflops;
    int threads;
    char blas_core[64];
} roofline;

static int write_json(const char *path, const bench_opts *o, const char *compare,
                      const bench_result *r, int n, const roofline *rf, json_t *headline)
{
    json_t *root = json_object();
    char b1[64], b2[64];
    json_t *w = json_object();
    json_object_set_new(w, "requests", json_integer(o->w.n_requests));
    json_object_set_new(w, "prompt_len", json_string(pagoda_bench_dist_str(&o->w.prompt_len, b1, sizeof b1)));
    json_object_set_new(w, "output_len", json_string(pagoda_bench_dist_str(&o->w.output_len, b2, sizeof b2)));
    json_object_set_new(w, "shared_prefix", json_integer(o->w.shared_prefix));
    json_object_set_new(w, "shared_frac", json_real(o->w.shared_frac));
    json_object_set_new(w, "concurrency", json_integer(o->w.concurrency));
    json_object_set_new(w, "rate", json_real(o->w.rate));
    json_object_set_new(w, "seed", json_integer((json_int_t)o->w.seed));
    json_object_set_new(root, "workload", w);
    if (compare) json_object_set_new(root, "compare", json_string(compare));
    if (rf && rf->bw_gbs > 0) {
        json_t *x = json_object();
        json_object_set_new(x, "read_bandwidth_gbs", json_real(rf->bw_gbs));
        json_object_set_new(x, "sgemm_gflops", json_real(rf->sgemm_gflops));
        json_object_set_new(x, "threads", json_integer(rf->threads));
        json_object_set_new(x, "openblas_core", json_string(rf->blas_core));
        json_object_set_new(root, "roofline", x);
    }
    if (headline) json_object_set(root, "headline", headline);
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) {
        const bench_result *x = &r[i];
        json_t *j = json_object();
        json_object_set_new(j, "label", json_string(x->label));
        json_object_set_new(j, "model", json_string(x->model));
        json_object_set_new(j, "weight_type", json_string(x->model_type));
        json_object_set_new(j, "requests_ok", json_integer(x->n_ok));
        json_object_set_new(j, "requests_failed", json_integer(x->n_err));
        json_object_set_new(j, "wall_s", json_real(x->wall_s));
        json_object_set_new(j, "generated_tokens", json_integer(x->gen_tokens));
        json_object_set_new(j, "prompt_tokens", json_integer(x->prompt_tokens));
        json_object_set_new(j, "generated_tok_s", json_real(x->gen_tps));
        json_object_set_new(j, "total_tok_s", json_real(x->total_tps));
        print_pcts_json(j, "ttft_ms", &x->ttft);
        print_pcts_json(j, "itl_ms", &x->itl);
        print_pcts_json(j, "e2e_ms", &x->e2e);
        json_object_set_new(j, "kv_util_peak", json_real(x->kv_util_peak));
        json_object_set_new(j, "kv_util_mean", json_real(x->kv_util_mean));
        json_object_set_new(j, "kv_blocks", json_integer(x->kv_blocks));
        json_object_set_new(j, "running_peak", json_integer(x->peak_running));
        json_object_set_new(j, "running_mean", json_real(x->running_mean));
        json_object_set_new(j, "preemptions", json_integer(x->preemptions));
        json_object_set_new(j, "prefix_query_tokens", json_integer(x->prefix_query));
        json_object_set_new(j, "prefix_hit_tokens", json_integer(x->prefix_hit));
        json_object_set_new(j, "weight_bytes", json_integer((json_int_t)x->weight_bytes));
        json_object_set_new(j, "bytes_per_token", json_real(x->bytes_per_token));
        json_object_set_new(j, "flops_per_token", json_real(x->flops_per_token));
        if (x->decode_tps > 0) {
            json_object_set_new(j, "decode_tok_s", json_real(x->decode_tps));
            json_object_set_new(j, "decode_p50_tok_s", json_real(x->decode_p50_tps));
        }
        if (x->prefill_tps > 0) {
            json_object_set_new(j, "prefill_tok_s", json_real(x->prefill_tps));
            json_object_set_new(j, "prefill_len", json_integer(x->prefill_len));
        }
        if (x->plan_budget) {
            json_object_set_new(j, "plan_budget_bytes", json_integer((json_int_t)x->plan_budget));
            json_object_set_new(j, "plan_kv_tokens", json_integer((json_int_t)x->plan_kv_tokens));
            json_object_set_new(j, "plan_full_context_seqs", json_integer(x->plan_seqs_2k));
            json_object_set_new(j, "plan_max_seq_len", json_integer(x->plan_ctx));
        }
        json_array_append_new(arr, j);
    }
    json_object_set_new(root, "results", arr);
    int st = json_dump_file(root, path, JSON_INDENT(2));
    json_decref(root);
    if (st) fprintf(stderr, "bench: cannot write %s\n", path);
    return st ? PAGODA_ERR_IO : PAGODA_OK;
}

static int write_csv(const char *path, const bench_result *r, int n)
{
    FILE *f = fopen(path, "w");
    if (!f) { fprintf(stderr, "bench: cannot write %s: %s\n", path, strerror(errno)); return PAGODA_ERR_IO; }
    fprintf(f, "side,request,prompt_tokens,output_tokens,shared,cached_tokens,submit_s,ttft_ms,e2e_ms,"
               "tpot_ms,preemptions,finish\n");
    for (int s = 0; s < n; s++)
        for (int32_t i = 0; r[s].reqs && i < r[s].n_req; i++) {
            const req_rec *q = &r[s].reqs[i];
            double tpot = q->n_tok > 1 ? (q->t_last - q->t_first) * 1e3 / (q->n_tok - 1) : 0;
            fprintf(f, "%s,%d,%d,%d,%d,%d,%.4f,%.2f,%.2f,%.3f,%d,%s\n", r[s].label, i, q->n_prompt,
                    q->n_tok, q->shared, q->cached, q->t_submit,
                    q->failed ? 0 : (q->t_first - q->t_submit) * 1e3,
                    q->failed ? 0 : (q->t_end - q->t_submit) * 1e3, tpot, q->preempt,
                    q->failed ? "error" : pagoda_finish_reason_str(q->finish));
        }
    fclose(f);
    return PAGODA_OK;
}

/* ---- plots: data files next to the PNGs, one gnuplot script per figure */

static bool have_gnuplot(void) { return system("command -v gnuplot >/dev/null 2>&1") == 0; }

static int gnuplot(const char *dir, const char *name, const char *script)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.gp", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return PAGODA_ERR_IO;
    fprintf(f, "set terminal pngcairo size 900,420 font ',10' noenhanced\n"
               "set output '%s/%s.png'\nset grid\nset key outside right top\n%s", dir, name, script);
    fclose(f);
    char cmd[8600];
    snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>&1", path);
    int rc = system(cmd);
    if (rc) {
        /* pngcairo is missing from some builds: retry with the plain png terminal */
        snprintf(cmd, sizeof cmd, "sed -i 's/^set terminal pngcairo.*/set terminal png size 900,420/' "
                                  "'%s' && gnuplot '%s'", path, path);
        rc = system(cmd);
    }
    if (rc) fprintf(stderr, "bench: gnuplot failed on %s\n", path);
    else fprintf(stderr, "bench: wrote %s/%s.png\n", dir, name);
    return rc ? PAGODA_ERR_IO : PAGODA_OK;
}

/* Timeline: running sequences and KV utilisation per side over time. */
static void plot_timeline(const char *dir, const char *name, const char *title,
                          const bench_result *r, int n)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.dat", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return;
    for (int s = 0; s < n; s++) {
        fprintf(f, "# %s\n", r[s].label);
        for (size_t i = 0; i < r[s].n_trace; i++) {
            const trace_pt *p = &r[s].trace[i];
            fprintf(f, "%.4f %d %.2f\n", p->t, p->running,
                    p->kv_total ? 100.0 * (double)p->kv_used / (double)p->kv_total : 0.0);
        }
        fprintf(f, "\n\n");
    }
    fclose(f);
    char script[4096];
    int k = snprintf(script, sizeof script,
                     "set title '%s'\nset xlabel 'seconds'\nset ylabel 'running sequences'\n"
                     "set y2label 'KV blocks used %%'\nset y2range [0:100]\nset ytics nomirror\n"
                     "set y2tics\nplot ", title);
    for (int s = 0; s < n && k < (int)sizeof script - 300; s++)
        k += snprintf(script + k, sizeof script - (size_t)k,
                      "%s'%s' index %d using 1:2 with steps lw 2 lc %d title '%s running', "
                      "'%s' index %d using 1:3 axes x1y2 with lines dt 2 lc %d title '%s KV %%'",
                      s ? ", " : "", path, s, s + 1, r[s].label, path, s, s + 1, r[s].label);
    snprintf(script + k, sizeof script - (size_t)k, "\n");
    gnuplot(dir, name, script);
}

/* Per-request TTFT in submission order, per side (prefix comparison). */
static void plot_ttft(const char *dir, const char *name, const char *title, const bench_result *r,
                      int n)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.dat", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return;
    for (int s = 0; s < n; s++) {
        for (int32_t i = 0; r[s].reqs && i < r[s].n_req; i++) {
            const req_rec *q = &r[s].reqs[i];
            fprintf(f, "%d %.2f\n", i, q->failed ? 0 : (q->t_first - q->t_submit) * 1e3);
        }
        fprintf(f, "\n\n");
    }
    fclose(f);
    char script[4096];
    int k = snprintf(script, sizeof script,
                     "set title '%s'\nset xlabel 'request'\nset ylabel 'TTFT ms (log)'\n"
                     "set logscale y\nset style fill solid 0.7\nset boxwidth 0.4\nplot ", title);
    for (int s = 0; s < n && k < (int)sizeof script - 200; s++)
        k += snprintf(script + k, sizeof script - (size_t)k,
                      "%s'%s' index %d using ($1+%.2f):2 with boxes lc %d title '%s'", s ? ", " : "",
                      path, s, -0.2 + 0.4 * s, s + 1, r[s].label);
    snprintf(script + k, sizeof script - (size_t)k, "\n");
    gnuplot(dir, name, script);
}

/* Bars of one value per side (a label and a number per line). */
static void plot_bars(const char *dir, const char *name, const char *title, const char *ylabel,
                      const char *const *labels, const double *v, int n)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.dat", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return;
    for (int i = 0; i < n; i++) fprintf(f, "\"%s\" %.3f\n", labels[i], v[i]);
    fclose(f);
    char script[4096];
    snprintf(script, sizeof script,
             "set title '%s'\nset ylabel '%s'\nset style fill solid 0.7\nset boxwidth 0.6\n"
             "set yrange [0:*]\nunset key\n"
             "plot '%s' using 0:2:xtic(1) with boxes lc 1, '' using 0:2:(sprintf('%%.1f',$2)) "
             "with labels offset 0,0.7\n", title, ylabel, path);
    gnuplot(dir, name, script);
}

/* ================================================================ modes */

static void print_roofline(const roofline *rf)
{
    printf("machine: read bandwidth %.1f GB/s, sgemm %.1f GFLOP/s (%d threads, OpenBLAS core %s)\n",
           rf->bw_gbs, rf->sgemm_gflops, rf->threads, rf->blas_core);
}

static void measure_roofline(const bench_opts *o, roofline *rf)
{
    rf->threads = o->threads;
    fprintf(stderr, "bench: measuring read bandwidth (512 MiB, %d threads) and sgemm...\n", rf->threads);
    rf->bw_gbs = measure_bandwidth(rf->threads, 512u << 20, 5);
    rf->sgemm_gflops = measure_sgemm(rf->threads, 5, rf->blas_core, sizeof rf->blas_core);
}

/* decode and prefill against their bounds */
static void print_bounds(const bench_result *x, const roofline *rf)
{
    double dec_bound = rf->bw_gbs > 0 ? rf->bw_gbs * 1e9 / x->bytes_per_token : 0;
    double pre_bound = rf->sgemm_gflops > 0 ? rf->sgemm_gflops * 1e9 / x->flops_per_token : 0;
    if (x->decode_tps > 0)
        printf("  %-10s decode  %7.1f tok/s   bound %7.1f tok/s (%.1f MB/token / %.1f GB/s)  ratio %.2f"
               "  (median step: %.1f tok/s, ratio %.2f)\n",
               x->label, x->decode_tps, dec_bound, x->bytes_per_token / 1e6, rf->bw_gbs,
               ratio(x->decode_tps, dec_bound), x->decode_p50_tps, ratio(x->decode_p50_tps, dec_bound));
    if (x->prefill_tps > 0)
        printf("  %-10s prefill %7.1f tok/s   bound %7.1f tok/s (%.2f GFLOP/token / %.1f GFLOP/s)  ratio %.2f  (%d-token prompt)\n",
               x->label, x->prefill_tps, pre_bound, x->flops_per_token / 1e9, rf->sgemm_gflops,
               ratio(x->prefill_tps, pre_bound), x->prefill_len);
}

static int resolve_model(const bench_opts *o, const char *type, char *path, size_t n, char *err,
                         size_t err_len)
{
    path[0] = 0;
    if (o->model) { snprintf(path, n, "%s", o->model); return PAGODA_OK; }
    if (o->config && !o->shape && !type) return PAGODA_OK; /* the config's model */
    return model_for(o, type ? type : (o->type ? o->type : "Q8_0"), path, n, err, err_len);
}

static int do_compare(const bench_opts *o, roofline *rf)
{
    char err[2048] = "", model[4096];
    bench_result r[3];
    memset(r, 0, sizeof r);
    int n = 0, st = PAGODA_OK;
    const char *name = o->compare;
    json_t *head = json_object();
    if (strcmp(name, "quant") == 0) {
        static const char *const types[] = {"F16", "Q8_0", "Q4_0"};
        static const char *const side[] = {"engine.kv_cache_tokens=4096", NULL};
        for (n = 0; n < 3; n++) {
            if ((st = model_for(o, types[n], model, sizeof model, err, sizeof err))) goto out;
            st = run_side(o, types[n], model, side, SIDE_DECODE | SIDE_PREFILL, &r[n], err, sizeof err);
            if (st) goto out;
            /* the KV left: the memory plan under the same budget */
            gguf_file *g = pagoda_gguf_open(model, err, sizeof err);
            if (!g) { st = PAGODA_ERR_IO; goto out; }
            pagoda_memplan_opts po;
            pagoda_memplan_opts_default(&po);
            po.memory_budget = o->memory;
            pagoda_memplan p;
            if (!pagoda_memplan_compute(g, &po, &p, err, sizeof err)) {
                r[n].plan_budget = p.budget_bytes;
                r[n].plan_kv_tokens = p.kv_tokens;
                r[n].plan_seqs_2k = p.max_seq_len > 0 ? (int64_t)(p.kv_tokens / (uint64_t)p.max_seq_len) : 0;
                r[n].plan_ctx = p.max_seq_len;
            }
            pagoda_gguf_close(g);
        }
        printf("\nquantization: %s, decode single stream (%d tokens), prefill %d tokens\n",
               o->shape ? o->shape : "llama-110M", o->decode_tokens, r[0].prefill_len);
        printf("%-8s %10s %12s %12s %12s %14s %16s\n", "type", "weights MB", "decode tok/s",
               "(p50 step)", "prefill t/s", "KV tokens left", "full-context seqs");
        for (int i = 0; i < n; i++)
            printf("%-8s %10.1f %12.1f %12.1f %12.1f %14llu %6lld x %lld (budget %.1fG)\n", r[i].label,
                   (double)r[i].weight_bytes / 1e6, r[i].decode_tps, r[i].decode_p50_tps, r[i].prefill_tps,
                   (unsigned long long)r[i].plan_kv_tokens, (long long)r[i].plan_seqs_2k,
                   (long long)r[i].plan_ctx, (double)r[i].plan_budget / (1u << 30));
        printf("decode speed-up vs F16: Q8_0 %.2fx, Q4_0 %.2fx; weights vs F16: Q8_0 %.2f, Q4_0 %.2f\n",
               ratio(r[1].decode_tps, r[0].decode_tps), ratio(r[2].decode_tps, r[0].decode_tps),
               ratio((double)r[1].weight_bytes, (double)r[0].weight_bytes),
               ratio((double)r[2].weight_bytes, (double)r[0].weight_bytes));
        json_object_set_new(head, "decode_q8_over_f16", json_real(ratio(r[1].decode_tps, r[0].decode_tps)));
        json_object_set_new(head, "decode_q4_over_f16", json_real(ratio(r[2].decode_tps, r[0].decode_tps)));
        if (o->roofline) {
            print_roofline(rf);
            for (int i = 0; i < n; i++) print_bounds(&r[i], rf);
        }
        if (o->plot) {
            const char *labels[3] = {types[0], types[1], types[2]};
            double v[3];
            for (int i = 0; i < 3; i++) v[i] = r[i].decode_tps;
            char t1[160];
            snprintf(t1, sizeof t1, "%s: single-stream decode tok/s", o->shape ? o->shape : "llama-110M");
            char f1[160];
            snprintf(f1, sizeof f1, "compare-quant-%s-decode", o->shape ? o->shape : "llama-110M");
            plot_bars(o->plot, f1, t1, "tok/s", labels, v, 3);
            for (int i = 0; i < 3; i++) v[i] = (double)r[i].weight_bytes / 1e6;
            snprintf(t1, sizeof t1, "%s: weights MB", o->shape ? o->shape : "llama-110M");
            snprintf(f1, sizeof f1, "compare-quant-%s-weights", o->shape ? o->shape : "llama-110M");
            plot_bars(o->plot, f1, t1, "MB", labels, v, 3);
        }
        goto report;
    }

    if ((st = resolve_model(o, NULL, model, sizeof model, err, sizeof err))) goto out;
    const char *mp = model[0] ? model : NULL;
    if (strcmp(name, "sched") == 0) {
        static const char *const a[] = {"engine.scheduler=continuous", "scheduler.continuous.max_num_seqs=8",
                                        "engine.kv_cache_tokens=16384", NULL};
        static const char *const b[] = {"engine.scheduler=static", "scheduler.static.batch_size=8",
                                        "engine.kv_cache_tokens=16384", NULL};
        if ((st = run_side(o, "continuous", mp, a, SIDE_WORKLOAD, &r[0], err, sizeof err))) goto out;
        if ((st = run_side(o, "static", mp, b, SIDE_WORKLOAD, &r[1], err, sizeof err))) goto out;
        n = 2;
        print_results(stdout, r, n);
        double tr = ratio(r[0].gen_tps, r[1].gen_tps);
        printf("continuous / static: throughput %.2fx (target >= 2x), p99 e2e latency %.0f vs %.0f ms "
               "(%.2fx lower), p99 TTFT %.0f vs %.0f ms\n", tr, r[0].e2e.p99, r[1].e2e.p99,
               ratio(r[1].e2e.p99, r[0].e2e.p99), r[0].ttft.p99, r[1].ttft.p99);
        json_object_set_new(head, "throughput_ratio", json_real(tr));
        json_object_set_new(head, "p99_e2e_ratio", json_real(ratio(r[1].e2e.p99, r[0].e2e.p99)));
    } else if (strcmp(name, "kv") == 0) {
        static const char *const a[] = {"engine.kvcache=paged", "engine.kv_cache_tokens=4096",
                                        "scheduler.continuous.max_num_seqs=64", NULL};
        static const char *const b[] = {"engine.kvcache=contiguous", "engine.kv_cache_tokens=4096",
                                        "scheduler.continuous.max_num_seqs=64", NULL};
        if ((st = run_side(o, "paged", mp, a, SIDE_WORKLOAD, &r[0], err, sizeof err))) goto out;
        if ((st = run_side(o, "contiguous", mp, b, SIDE_WORKLOAD, &r[1], err, sizeof err))) goto out;
        n = 2;
        print_results(stdout, r, n);
        double cr = ratio(r[0].peak_running, r[1].peak_running);
        printf("paged / contiguous (same %lld-block KV pool): peak concurrent sequences %d vs %d = "
               "%.2fx (target >= 4x), throughput %.2fx\n", (long long)r[0].kv_blocks,
               r[0].peak_running, r[1].peak_running, cr, ratio(r[0].gen_tps, r[1].gen_tps));
        json_object_set_new(head, "concurrency_ratio", json_real(cr));
        json_object_set_new(head, "throughput_ratio", json_real(ratio(r[0].gen_tps, r[1].gen_tps)));
    } else if (strcmp(name, "prefix") == 0) {
        static const char *const a[] = {"engine.kvcache=prefix", "engine.kv_cache_tokens=16384",
                                        "engine.max_seq_len=2560", NULL};
        static const char *const b[] = {"engine.kvcache=paged", "engine.kv_cache_tokens=16384",
                                        "engine.max_seq_len=2560", NULL};
        if ((st = run_side(o, "prefix", mp, a, SIDE_WORKLOAD, &r[0], err, sizeof err))) goto out;
        if ((st = run_side(o, "paged", mp, b, SIDE_WORKLOAD, &r[1], err, sizeof err))) goto out;
        n = 2;
        print_results(stdout, r, n);
        double hit = r[0].prefix_query ? (double)r[0].prefix_hit / (double)r[0].prefix_query : 0;
        printf("prefix / paged (%d-token shared prompt): TTFT p50 %.1f vs %.1f ms = %.1fx lower "
               "(target >= 5x), mean %.1fx lower; prefix hit rate %.1f%%; throughput %.2fx\n",
               o->w.shared_prefix, r[0].ttft.p50, r[1].ttft.p50, ratio(r[1].ttft.p50, r[0].ttft.p50),
               ratio(r[1].ttft.mean, r[0].ttft.mean), 100 * hit, ratio(r[0].gen_tps, r[1].gen_tps));
        json_object_set_new(head, "ttft_p50_ratio", json_real(ratio(r[1].ttft.p50, r[0].ttft.p50)));
        json_object_set_new(head, "ttft_mean_ratio", json_real(ratio(r[1].ttft.mean, r[0].ttft.mean)));
        json_object_set_new(head, "prefix_hit_rate", json_real(hit));
    } else if (strcmp(name, "batch") == 0) {
        /* the single stream: the same requests, one at a time */
        bench_opts o1 = *o;
        o1.w.concurrency = 1;
        o1.w.n_requests = o->w.n_requests / 4 > 0 ? o->w.n_requests / 4 : 1;
        static const char *const a[] = {"scheduler.continuous.max_num_seqs=64", NULL};
        char la[32], lb[32];
        snprintf(la, sizeof la, "conc%d", o->w.concurrency);
        snprintf(lb, sizeof lb, "single");
        if ((st = run_side(o, la, mp, a, SIDE_WORKLOAD, &r[0], err, sizeof err))) goto out;
        if ((st = run_side(&o1, lb, mp, a, SIDE_WORKLOAD, &r[1], err, sizeof err))) goto out;
        n = 2;
        print_results(stdout, r, n);
        double br = ratio(r[0].gen_tps, r[1].gen_tps);
        printf("%d concurrent / single stream: aggregate generated tok/s %.1f vs %.1f = %.2fx "
               "(target >= 4x)\n", o->w.concurrency, r[0].gen_tps, r[1].gen_tps, br);
        json_object_set_new(head, "batch_ratio", json_real(br));
    } else {
        fprintf(stderr, "bench: unknown comparison '%s' (sched, kv, prefix, quant, batch)\n", name);
        st = PAGODA_ERR_INVALID;
        goto out;
    }
    if (o->roofline) print_roofline(rf);
    if (o->plot) {
        char title[128];
        snprintf(title, sizeof title, "%s: %s vs %s", name, r[0].label, r[1].label);
        char fname[64];
        snprintf(fname, sizeof fname, "compare-%s-timeline", name);
        plot_timeline(o->plot, fname, title, r, n);
        if (strcmp(name, "prefix") == 0) plot_ttft(o->plot, "compare-prefix-ttft", title, r, n);
    }
report:
    if (o->json) write_json(o->json, o, name, r, n, rf, head);
    if (o->csv) write_csv(o->csv, r, n);
out:
    if (st && err[0]) fprintf(stderr, "bench: %s\n", err);
    json_decref(head);
    for (int i = 0; i < 3; i++) result_free(&r[i]);
    return st;
}

static int do_single(const bench_opts *o, roofline *rf)
{
    char err[2048] = "", model[4096];
    bench_result r;
    memset(&r, 0, sizeof r);
    int st = resolve_model(o, NULL, model, sizeof model, err, sizeof err);
    if (!st)
        st = run_side(o, "run", model[0] ? model : NULL, NULL,
                      SIDE_WORKLOAD | (o->roofline ? SIDE_DECODE | SIDE_PREFILL : 0), &r, err, sizeof err);
    if (st) {
        fprintf(stderr, "bench: %s\n", err);
        result_free(&r);
        return st;
    }
    char b1[64], b2[64];
    printf("\nworkload: %d requests, prompt %s, output %s, shared prefix %d (frac %.2f), %s %g\n",
           o->w.n_requests, pagoda_bench_dist_str(&o->w.prompt_len, b1, sizeof b1),
           pagoda_bench_dist_str(&o->w.output_len, b2, sizeof b2), o->w.shared_prefix,
           o->w.shared_frac, o->w.rate > 0 ? "rate" : "concurrency",
           o->w.rate > 0 ? o->w.rate : (double)o->w.concurrency);
    printf("model: %s (%s, %.1f MB of weights)\n", r.model, r.model_type, (double)r.weight_bytes / 1e6);
    print_results(stdout, &r, 1);
    if (o->roofline) {
        print_roofline(rf);
        print_bounds(&r, rf);
    }
    if (o->json) write_json(o->json, o, NULL, &r, 1, rf, NULL);
    if (o->csv) write_csv(o->csv, &r, 1);
    if (o->plot) plot_timeline(o->plot, "bench-timeline", "pagoda bench", &r, 1);
    result_free(&r);
    return PAGODA_OK;
}

/* --http HOST:PORT: the workload against a running server. */
static int do_http(const bench_opts *o)
{
    char err[2048] = "", host[256];
    const char *colon = strrchr(o->http, ':');
    int port = colon ? atoi(colon + 1) : 0;
    if (!colon || port <= 0 || port > 65535 || (size_t)(colon - o->http) >= sizeof host) {
        fprintf(stderr, "pagoda bench: --http %s: expected HOST:PORT\n", o->http);
        return PAGODA_ERR_INVALID;
    }
    snprintf(host, sizeof host, "%.*s", (int)(colon - o->http), o->http);
    int32_t V = o->vocab_size;
    if (o->model) {
        gguf_file *g = pagoda_gguf_open(o->model, err, sizeof err);
        pagoda_hparams hp;
        if (!g || pagoda_hparams_read(g, &hp, err, sizeof err)) {
            fprintf(stderr, "bench: %s\n", err);
            pagoda_gguf_close(g);
            return PAGODA_ERR_INVALID;
        }
        V = hp.n_vocab;
        const gguf_tensor *te = pagoda_gguf_tensor(g, "token_embd.weight");
        if (V <= 0 && te) V = (int32_t)te->ne[1]; /* the header may leave it to the tokenizer */
        pagoda_gguf_close(g);
    }
    pagoda_bench_req *reqs = NULL;
    bench_result r;
    memset(&r, 0, sizeof r);
    snprintf(r.label, sizeof r.label, "http");
    int st = pagoda_bench_workload_make(&o->w, V > 1024 ? 259 : 3, V, &reqs, err, sizeof err);
    if (!st) st = run_workload_http(NULL, host, port, &o->w, reqs, &r, err, sizeof err);
    if (!st && r.n_ok == 0) st = PAGODA_ERR_IO; /* the reason was logged */
    if (st) {
        if (err[0]) fprintf(stderr, "bench: %s\n", err);
    } else {
        printf("\nserving %s:%d, %d requests at concurrency %d\n", host, port, o->w.n_requests, o->w.concurrency);
        print_results(stdout, &r, 1);
        if (o->json) write_json(o->json, o, NULL, &r, 1, NULL, NULL);
        if (o->csv) write_csv(o->csv, &r, 1);
    }
    pagoda_bench_workload_free(reqs, o->w.n_requests);
    result_free(&r);
    return st;
}

/* ================================================================ CLI */

int pagoda_cmd_bench(int argc, char **argv)
{
    bench_opts o;
    memset(&o, 0, sizeof o);
    pagoda_bench_workload_default(&o.w);
    o.decode_tokens = 64;
    o.prefill_tokens = 512;
    o.memory = 4ull << 30;
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    o.threads = nc > 0 ? (int)nc : 1;
    o.vocab_size = 32000;
    char err[512];
    bool frac_given = false;
    /* the comparison first: its defaults sit under the user's flags */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--compare") == 0 && i + 1 < argc) o.compare = argv[i + 1];
        else if (strncmp(argv[i], "--compare=", 10) == 0) o.compare = argv[i] + 10;
    }
    if (o.compare && compare_defaults(o.compare, &o)) {
        fprintf(stderr, "pagoda bench: unknown comparison '%s' (sched, kv, prefix, quant, batch)\n", o.compare);
        return EXIT_USAGE;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) { bench_usage(stdout); return EXIT_OK; }
        if (strcmp(a, "--roofline") == 0) { o.roofline = true; continue; }
        if (strcmp(a, "--serve") == 0) { o.serve = true; continue; }
        const char *eq = strchr(a, '=');
        size_t alen = eq && strncmp(a, "--", 2) == 0 ? (size_t)(eq - a) : strlen(a);
        if (eq && strncmp(a, "--", 2) == 0) v = eq + 1;
        else if (i + 1 < argc) v = argv[++i];
        if (!v) {
            fprintf(stderr, "pagoda bench: %s needs a value (see pagoda bench --help)\n", a);
            return EXIT_USAGE;
        }
#define OPT(s) (alen == strlen(s) && strncmp(a, s, alen) == 0)
        char *end = NULL;
        int st = PAGODA_OK;
        errno = 0;
        if (OPT("--model")) o.model = v;
        else if (OPT("--config") || OPT("-c")) o.config = v;
        else if (OPT("--shape")) o.shape = v;
        else if (OPT("--type")) o.type = v;
        else if (OPT("--vocab")) o.vocab = v;
        else if (OPT("--cache-dir")) o.cache_dir = v;
        else if (OPT("--set") || OPT("-s")) {
            if (o.n_sets == MAX_SETS) { fprintf(stderr, "pagoda bench: more than %d --set\n", MAX_SETS); return EXIT_USAGE; }
            o.sets[o.n_sets++] = v;
        } else if (OPT("--json")) o.json = v;
        else if (OPT("--csv")) o.csv = v;
        else if (OPT("--plot")) o.plot = v;
        else if (OPT("--compare")) o.compare = v;
        else if (OPT("--http")) o.http = v;
        else if (OPT("--prompt-len")) st = pagoda_bench_dist_parse(v, &o.w.prompt_len, err, sizeof err);
        else if (OPT("--output-len")) st = pagoda_bench_dist_parse(v, &o.w.output_len, err, sizeof err);
        else if (OPT("--memory")) {
            if (pagoda_parse_size(v, &o.memory) || o.memory == 0) { snprintf(err, sizeof err, "--memory %s: expected a size like 4G", v); st = PAGODA_ERR_INVALID; }
        } else if (OPT("--shared-frac")) {
            o.w.shared_frac = strtod(v, &end);
            frac_given = true;
            if (errno || end == v || *end || !(o.w.shared_frac >= 0 && o.w.shared_frac <= 1)) {
                snprintf(err, sizeof err, "--shared-frac %s: expected 0..1", v);
                st = PAGODA_ERR_INVALID;
            }
        } else if (OPT("--rate")) {
            o.w.rate = strtod(v, &end);
            if (errno || end == v || *end || !(o.w.rate > 0 && o.w.rate < 1e6)) {
                snprintf(err, sizeof err, "--rate %s: expected requests per second > 0", v);
                st = PAGODA_ERR_INVALID;
            }
        } else {
            long long x = strtoll(v, &end, 10);
            bool bad = errno || end == v || *end;
#define INTOPT(s, field, lo, hi)                                                       \
    else if (OPT(s)) {                                                                 \
        if (bad || x < (lo) || x > (hi)) {                                             \
            snprintf(err, sizeof err, "%s %s: expected %lld..%lld", s, v, (long long)(lo), \
                     (long long)(hi));                                                 \
            st = PAGODA_ERR_INVALID;                                                   \
        } else field = x;                                                              \
    }
            if (0) {}
            INTOPT("--requests", o.w.n_requests, 1, 1000000)
            INTOPT("--shared-prefix", o.w.shared_prefix, 0, 1000000)
            INTOPT("--concurrency", o.w.concurrency, 1, 1000000)
            INTOPT("--seed", o.w.seed, 0, INT64_MAX)
            INTOPT("--context", o.context, 1, 1 << 20)
            INTOPT("--decode-tokens", o.decode_tokens, 2, 100000)
            INTOPT("--prefill-tokens", o.prefill_tokens, 1, 1000000)
            INTOPT("--threads", o.threads, 1, 64)
            INTOPT("--vocab-size", o.vocab_size, 2, 10000000)
            else {
                fprintf(stderr, "pagoda bench: unknown option '%s' (see pagoda bench --help)\n", a);
                return EXIT_USAGE;
            }
#undef INTOPT
        }
#undef OPT
        if (st) {
            fprintf(stderr, "pagoda bench: %s\n", err);
            return EXIT_USAGE;
        }
    }
    if (o.w.shared_prefix > 0 && !frac_given && !o.compare) o.w.shared_frac = 1.0;
    if (o.model && o.shape) {
        fprintf(stderr, "pagoda bench: give --model or --shape, not both\n");
        return EXIT_USAGE;
    }
    if (o.plot) {
        if (mkdir_p(o.plot)) {
            fprintf(stderr, "pagoda bench: cannot create %s: %s\n", o.plot, strerror(errno));
            return EXIT_RUNTIME;
        }
        if (!have_gnuplot()) {
            fprintf(stderr, "pagoda bench: gnuplot not found: no plots (apt-get install gnuplot-nox)\n");
            o.plot = NULL;
        }
    }
    roofline rf;
    memset(&rf, 0, sizeof rf);
    if (o.roofline) measure_roofline(&o, &rf);
    if (o.http && (o.serve || o.compare)) {
        fprintf(stderr, "pagoda bench: --http drives a server of its own: no --serve or --compare\n");
        return EXIT_USAGE;
    }
    int st = o.http ? do_http(&o) : o.compare ? do_compare(&o, &rf) : do_single(&o, &rf);
    return st == PAGODA_OK ? EXIT_OK : st == PAGODA_ERR_INVALID ? EXIT_USAGE : EXIT_RUNTIME;
}
