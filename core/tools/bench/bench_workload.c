#define _GNU_SOURCE /* strdup, usleep, memmem */
/*
 * bench_workload.c: the pure half of `pagoda bench`: length
 * distributions, the seeded RNG, the synthetic workload (token-id prompts
 * with an optional shared prefix, Poisson arrival times) and the
 * percentile statistics. Unit-tested (tests/unit/test_bench.c).
 * Not for: running anything or timing anything (bench_run.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#include "pagoda/types.h"

/* Messages are cut at their buffers' ends; acceptable for an error text. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#define ERR(...) snprintf(err, err_len, __VA_ARGS__)

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
