/*
 * metrics.c: the Prometheus registry behind GET /metrics: fixed counters and
 * latency histograms recorded by the engine, rendered with the engine's
 * gauges and caller-supplied extra gauges (the memory plan). One mutex
 * guards everything: observations are a few per token, far below contention.
 * Not for: reading engine state (the caller passes pagoda_engine_stats).
 */
#include "metrics.h"

#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Buckets as vLLM uses them, so dashboards built for vLLM read the same. */
static const double ttft_buckets[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                      0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0,
                                      20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
static const double itl_buckets[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                     0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                     7.5,  10.0,  20.0, 40.0,  80.0};
static const double e2e_buckets[] = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,
                                     5.0,  10.0, 15.0, 20.0, 30.0,  40.0,  50.0,
                                     60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

#define MAX_BUCKETS 32
#define N_FINISH 5 /* pagoda_finish_reason 0..4; 0 (none) is never rendered */

typedef struct hist {
    uint64_t counts[MAX_BUCKETS + 1]; /* per bucket, non-cumulative; last = +Inf */
    uint64_t n;
    double sum;
} hist;

struct pagoda_metrics {
    pthread_mutex_t mu;
    hist h[PAGODA_HIST_COUNT_];
    int64_t c[PAGODA_COUNTER_COUNT_];
    int64_t finished[N_FINISH];
};

static const struct {
    const char *name, *help;
} hist_meta[PAGODA_HIST_COUNT_] = {
    {"pagoda_time_to_first_token_seconds", "Histogram of time to first token in seconds."},
    {"pagoda_inter_token_latency_seconds", "Histogram of time between output tokens in seconds."},
    {"pagoda_e2e_request_latency_seconds", "Histogram of end to end request latency in seconds."},
    {"pagoda_request_queue_time_seconds", "Histogram of time spent waiting before first scheduled in seconds."},
};

static const struct {
    const char *name, *help;
} counter_meta[PAGODA_COUNTER_COUNT_] = {
    {"pagoda_prompt_tokens_total", "Number of prefill tokens processed."},
    {"pagoda_generation_tokens_total", "Number of generation tokens processed."},
    {"pagoda_num_preemptions_total", "Cumulative number of preemptions."},
    {"pagoda_prefix_cache_queries_total", "Prefix cache queries, in tokens."},
    {"pagoda_prefix_cache_hits_total", "Prefix cache hits, in tokens."},
    {"pagoda_requests_received_total", "Requests accepted by the engine."},
    {"pagoda_requests_rejected_total", "Requests refused by the engine (queue full, invalid, too long)."},
};

const double *pagoda_metrics_buckets(pagoda_hist which, int *n)
{
    switch (which) {
    case PAGODA_HIST_TTFT: *n = (int)(sizeof ttft_buckets / sizeof *ttft_buckets); return ttft_buckets;
    case PAGODA_HIST_ITL: *n = (int)(sizeof itl_buckets / sizeof *itl_buckets); return itl_buckets;
    case PAGODA_HIST_E2E:
    case PAGODA_HIST_QUEUE: *n = (int)(sizeof e2e_buckets / sizeof *e2e_buckets); return e2e_buckets;
    default: *n = 0; return NULL;
    }
}

pagoda_metrics *pagoda_metrics_new(void)
{
    pagoda_metrics *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

void pagoda_metrics_free(pagoda_metrics *m)
{
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void pagoda_metrics_observe(pagoda_metrics *m, pagoda_hist which, double seconds)
{
    if (!m || which < 0 || which >= PAGODA_HIST_COUNT_ || !(seconds >= 0) || isinf(seconds))
        return;
    int nb;
    const double *b = pagoda_metrics_buckets(which, &nb);
    int i = 0;
    while (i < nb && seconds > b[i]) i++;
    pthread_mutex_lock(&m->mu);
    m->h[which].counts[i]++;
    m->h[which].n++;
    m->h[which].sum += seconds;
    pthread_mutex_unlock(&m->mu);
}

void pagoda_metrics_count(pagoda_metrics *m, pagoda_counter which, int64_t n)
{
    if (!m || which < 0 || which >= PAGODA_COUNTER_COUNT_ || n < 0) return;
    pthread_mutex_lock(&m->mu);
    m->c[which] += n;
    pthread_mutex_unlock(&m->mu);
}

void pagoda_metrics_finished(pagoda_metrics *m, int finish_reason)
{
    if (!m || finish_reason <= 0 || finish_reason >= N_FINISH) return;
    pthread_mutex_lock(&m->mu);
    m->finished[finish_reason]++;
    pthread_mutex_unlock(&m->mu);
}

/* ------------------------------------------------------------ text buffer */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (k < 0) { b->oom = 1; return; }
        if (b->p && b->len + (size_t)k < b->cap) { b->len += (size_t)k; return; }
        size_t ncap = b->cap ? b->cap * 2 : 4096;
        while (ncap < b->len + (size_t)k + 1) ncap *= 2;
        char *np = realloc(b->p, ncap);
        if (!np) { b->oom = 1; return; }
        b->p = np;
        b->cap = ncap;
    }
}

/* Prometheus floats: Go's strconv accepts %.17g, "+Inf", "NaN". */
static void sb_num(sbuf *b, double v)
{
    if (isnan(v)) sb_printf(b, "NaN");
    else if (isinf(v)) sb_printf(b, v > 0 ? "+Inf" : "-Inf");
    else if (v == floor(v) && fabs(v) < 9e15) sb_printf(b, "%.0f", v);
    else {
        /* the shortest form that reads back exactly: le="0.06", not 0.059999... */
        char tmp[40];
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(tmp, sizeof tmp, "%.*g", prec, v);
            if (strtod(tmp, NULL) == v) break;
        }
        sb_printf(b, "%s", tmp);
    }
}

static void sb_gauge(sbuf *b, const char *name, const char *help, double v)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s ", name, help, name, name);
    sb_num(b, v);
    sb_printf(b, "\n");
}

static int valid_name(const char *s)
{
    if (!s || !*s) return 0;
    for (const char *p = s; *p; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                 (p != s && c >= '0' && c <= '9');
        if (!ok) return 0;
    }
    return 1;
}

/* HELP text escapes only backslash and newline. */
static void sb_help(sbuf *b, const char *help)
{
    for (const char *p = help; *p; p++) {
        if (*p == '\\') sb_printf(b, "\\\\");
        else if (*p == '\n') sb_printf(b, "\\n");
        else sb_printf(b, "%c", *p);
    }
}

char *pagoda_metrics_render(pagoda_metrics *m, const pagoda_engine_stats *st,
                            const pagoda_metric_gauge *extra, int n_extra)
{
    if (!m) return NULL;
    sbuf b = {0};
    pagoda_metrics snap;
    pthread_mutex_lock(&m->mu);
    memcpy(snap.h, m->h, sizeof snap.h);
    memcpy(snap.c, m->c, sizeof snap.c);
    memcpy(snap.finished, m->finished, sizeof snap.finished);
    pthread_mutex_unlock(&m->mu);

    if (st) {
        sb_gauge(&b, "pagoda_num_requests_running", "Number of requests in model execution batches.",
                 st->running);
        sb_gauge(&b, "pagoda_num_requests_waiting", "Number of requests waiting to be processed.",
                 st->waiting);
        double usage = st->kv_total_blocks > 0
                           ? (double)st->kv_used_blocks / (double)st->kv_total_blocks : 0.0;
        sb_gauge(&b, "pagoda_kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage);
        sb_gauge(&b, "pagoda_kv_cache_num_blocks", "KV-cache blocks in the pool.",
                 (double)st->kv_total_blocks);
        sb_gauge(&b, "pagoda_kv_cache_blocks_used", "KV-cache blocks held by sequences.",
                 (double)st->kv_used_blocks);
        sb_gauge(&b, "pagoda_kv_cache_blocks_free", "KV-cache blocks free.",
                 (double)st->kv_free_blocks);
        sb_gauge(&b, "pagoda_kv_cache_blocks_cached", "KV-cache blocks kept as reusable prefix.",
                 (double)st->kv_cached_blocks);
        sb_gauge(&b, "pagoda_kv_cache_block_size_tokens", "Tokens per KV-cache block.",
                 st->kv_block_size);
        sb_gauge(&b, "pagoda_engine_ready", "1 when the model is loaded and serving.",
                 st->ready ? 1 : 0);
        int64_t from_st[PAGODA_COUNTER_COUNT_] = {0};
        from_st[PAGODA_COUNTER_PROMPT_TOKENS] = st->prompt_tokens_total;
        from_st[PAGODA_COUNTER_GENERATION_TOKENS] = st->generation_tokens_total;
        from_st[PAGODA_COUNTER_PREEMPTIONS] = st->preemptions_total;
        from_st[PAGODA_COUNTER_PREFIX_QUERIES] = st->prefix_query_tokens;
        from_st[PAGODA_COUNTER_PREFIX_HITS] = st->prefix_hit_tokens;
        for (int i = 0; i < PAGODA_COUNTER_COUNT_; i++)
            if (from_st[i] > snap.c[i]) snap.c[i] = from_st[i];
        if (st->struct_size >= offsetof(pagoda_engine_stats, tier_evicted_blocks) + sizeof(int64_t) &&
            st->tier_on) {
            sb_gauge(&b, "pagoda_kv_tier_blocks", "KV blocks in the prefix cache's disk tier.",
                     (double)st->tier_blocks);
            sb_gauge(&b, "pagoda_kv_tier_bytes", "Bytes of block files in the disk tier.",
                     (double)st->tier_bytes);
            static const struct { const char *name, *help; } tc[] = {
                {"pagoda_kv_tier_hits_total", "Prompt tokens read back from the disk tier."},
                {"pagoda_kv_tier_written_blocks_total", "KV blocks written to the disk tier."},
                {"pagoda_kv_tier_dropped_blocks_total",
                 "KV blocks not written to the disk tier (queue full or a write failed)."},
                {"pagoda_kv_tier_bad_blocks_total",
                 "Disk tier files that failed a check (torn, flipped, foreign) and were deleted."},
                {"pagoda_kv_tier_evicted_blocks_total",
                 "Disk tier files deleted to stay under its bound."},
            };
            int64_t tv[] = {st->tier_hit_tokens, st->tier_written_blocks, st->tier_dropped_blocks,
                            st->tier_bad_blocks, st->tier_evicted_blocks};
            for (size_t i = 0; i < sizeof tc / sizeof tc[0]; i++)
                sb_printf(&b, "# HELP %s %s\n# TYPE %s counter\n%s %lld\n", tc[i].name, tc[i].help,
                          tc[i].name, tc[i].name, (long long)tv[i]);
        }
        if (st->struct_size >= offsetof(pagoda_engine_stats, tier_restore_us) + sizeof(int64_t) &&
            st->tier_on) {
            sb_gauge(&b, "pagoda_kv_tier_ram_blocks",
                     "KV blocks in the tier's host-RAM level (device backends).",
                     (double)st->tier_ram_blocks);
            sb_gauge(&b, "pagoda_kv_tier_ram_bytes", "KV bytes in the tier's host-RAM level.",
                     (double)st->tier_ram_bytes);
            sb_printf(&b, "# HELP pagoda_kv_tier_restore_seconds_total Time admissions spent reading "
                          "blocks back from the tier (engine thread).\n"
                          "# TYPE pagoda_kv_tier_restore_seconds_total counter\n"
                          "pagoda_kv_tier_restore_seconds_total %.6f\n",
                      (double)st->tier_restore_us / 1e6);
            static const struct { const char *name, *help; } tc[] = {
                {"pagoda_kv_tier_prefetched_blocks_total",
                 "KV blocks read back from the disk tier while their request waited in the queue."},
                {"pagoda_kv_tier_prefetch_hits_total",
                 "Of those, blocks their admission found in memory (not read then)."},
                {"pagoda_kv_tier_ram_hits_total", "KV blocks served from the tier's host-RAM level."},
            };
            int64_t tv[] = {st->tier_prefetched_blocks, st->tier_prefetch_hit_blocks,
                            st->tier_ram_hit_blocks};
            for (size_t i = 0; i < sizeof tc / sizeof tc[0]; i++)
                sb_printf(&b, "# HELP %s %s\n# TYPE %s counter\n%s %lld\n", tc[i].name, tc[i].help,
                          tc[i].name, tc[i].name, (long long)tv[i]);
        }
        sb_printf(&b, "# HELP pagoda_engine_steps_total Engine steps run.\n"
                      "# TYPE pagoda_engine_steps_total counter\n"
                      "pagoda_engine_steps_total %lld\n", (long long)st->steps_total);
        /* speculative decoding, per drafter (one a server: [engine] speculative) */
        if (st->struct_size >= offsetof(pagoda_engine_stats, spec_verify_steps_total) + sizeof(int64_t) &&
            st->spec_drafter[0]) {
            char d[sizeof st->spec_drafter];
            snprintf(d, sizeof d, "%.*s", (int)strnlen(st->spec_drafter, sizeof d - 1), st->spec_drafter);
            sb_printf(&b, "# HELP pagoda_spec_drafted_tokens_total Draft tokens verified.\n"
                          "# TYPE pagoda_spec_drafted_tokens_total counter\n"
                          "pagoda_spec_drafted_tokens_total{drafter=\"%s\"} %lld\n"
                          "# HELP pagoda_spec_accepted_tokens_total Draft tokens that agreed with the model.\n"
                          "# TYPE pagoda_spec_accepted_tokens_total counter\n"
                          "pagoda_spec_accepted_tokens_total{drafter=\"%s\"} %lld\n"
                          "# HELP pagoda_spec_verify_steps_total Sequence-steps that verified drafts.\n"
                          "# TYPE pagoda_spec_verify_steps_total counter\n"
                          "pagoda_spec_verify_steps_total{drafter=\"%s\"} %lld\n",
                      d, (long long)st->spec_drafted_total, d, (long long)st->spec_accepted_total, d,
                      (long long)st->spec_verify_steps_total);
            sb_printf(&b, "# HELP pagoda_spec_acceptance_rate Accepted over drafted tokens, ever.\n"
                          "# TYPE pagoda_spec_acceptance_rate gauge\n"
                          "pagoda_spec_acceptance_rate{drafter=\"%s\"} ", d);
            sb_num(&b, st->spec_drafted_total > 0
                           ? (double)st->spec_accepted_total / (double)st->spec_drafted_total : 0.0);
            sb_printf(&b, "\n");
        }
    }

    for (int i = 0; i < PAGODA_COUNTER_COUNT_; i++) {
        const char *n = counter_meta[i].name;
        sb_printf(&b, "# HELP %s %s\n# TYPE %s counter\n%s %lld\n", n, counter_meta[i].help, n, n,
                  (long long)snap.c[i]);
    }

    sb_printf(&b, "# HELP pagoda_request_success_total Count of finished requests by reason.\n"
                  "# TYPE pagoda_request_success_total counter\n");
    for (int r = 1; r < N_FINISH; r++)
        sb_printf(&b, "pagoda_request_success_total{finished_reason=\"%s\"} %lld\n",
                  pagoda_finish_reason_str(r), (long long)snap.finished[r]);

    for (int i = 0; i < PAGODA_HIST_COUNT_; i++) {
        const char *n = hist_meta[i].name;
        int nb;
        const double *bk = pagoda_metrics_buckets((pagoda_hist)i, &nb);
        const hist *h = &snap.h[i];
        sb_printf(&b, "# HELP %s %s\n# TYPE %s histogram\n", n, hist_meta[i].help, n);
        uint64_t cum = 0;
        for (int k = 0; k < nb; k++) {
            cum += h->counts[k];
            sb_printf(&b, "%s_bucket{le=\"", n);
            sb_num(&b, bk[k]);
            sb_printf(&b, "\"} %llu\n", (unsigned long long)cum);
        }
        sb_printf(&b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum ", n, (unsigned long long)h->n, n);
        sb_num(&b, h->sum);
        sb_printf(&b, "\n%s_count %llu\n", n, (unsigned long long)h->n);
    }

    for (int i = 0; extra && i < n_extra; i++) {
        if (!valid_name(extra[i].name)) continue;
        sb_printf(&b, "# HELP %s ", extra[i].name);
        sb_help(&b, extra[i].help ? extra[i].help : extra[i].name);
        sb_printf(&b, "\n# TYPE %s gauge\n%s ", extra[i].name, extra[i].name);
        sb_num(&b, extra[i].value);
        sb_printf(&b, "\n");
    }

    if (b.oom || !b.p) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
