/*
 * metrics.h: the server's Prometheus metrics. The engine records (latency
 * observations, token and preemption counts, finished requests); the host's
 * metrics_text slot renders them in the Prometheus text exposition format
 * (version 0.0.4) together with the engine's gauges and the memory plan.
 * Not for: collecting the engine's live state (running/waiting, KV blocks):
 * that is read from pagoda_engine_stats at render time.
 *
 * Names follow vLLM's (vllm:num_requests_running -> pagoda_num_requests_running)
 * with an underscore instead of the colon, which the Prometheus docs reserve
 * for recording rules. Every function is thread-safe ([any thread]).
 */
#ifndef PAGODA_METRICS_H
#define PAGODA_METRICS_H

#include <stdint.h>
#include "pagoda/host.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pagoda_metrics pagoda_metrics;

/* Latency histograms, in seconds. */
typedef enum pagoda_hist {
    PAGODA_HIST_TTFT = 0,        /* pagoda_time_to_first_token_seconds: arrival to first token */
    PAGODA_HIST_ITL = 1,         /* pagoda_inter_token_latency_seconds: between output tokens */
    PAGODA_HIST_E2E = 2,         /* pagoda_e2e_request_latency_seconds: arrival to final event */
    PAGODA_HIST_QUEUE = 3,       /* pagoda_request_queue_time_seconds: arrival to first scheduled */
    PAGODA_HIST_COUNT_ = 4
} pagoda_hist;

/* Monotonic counters. The first five are also in pagoda_engine_stats; the
 * rendered value is the larger of the counted one and st's, so an engine
 * may keep either (or both) up to date. */
typedef enum pagoda_counter {
    PAGODA_COUNTER_PROMPT_TOKENS = 0,      /* pagoda_prompt_tokens_total */
    PAGODA_COUNTER_GENERATION_TOKENS = 1,  /* pagoda_generation_tokens_total */
    PAGODA_COUNTER_PREEMPTIONS = 2,        /* pagoda_num_preemptions_total */
    PAGODA_COUNTER_PREFIX_QUERIES = 3,     /* pagoda_prefix_cache_queries_total (tokens) */
    PAGODA_COUNTER_PREFIX_HITS = 4,        /* pagoda_prefix_cache_hits_total (tokens) */
    PAGODA_COUNTER_REQUESTS_RECEIVED = 5,  /* pagoda_requests_received_total: accepted by submit */
    PAGODA_COUNTER_REQUESTS_REJECTED = 6,  /* pagoda_requests_rejected_total: refused by submit */
    PAGODA_COUNTER_COUNT_ = 7
} pagoda_counter;

/* An extra gauge rendered as it is (e.g. the memory plan:
 * {"pagoda_memory_weights_bytes", "Bytes of model weights", 1.2e9}). A name
 * that is not a valid Prometheus metric name ([a-zA-Z_][a-zA-Z0-9_]*) is
 * skipped; help may be NULL. */
typedef struct pagoda_metric_gauge {
    const char *name;
    const char *help;
    double value;
} pagoda_metric_gauge;

/* A new, zeroed registry; NULL when out of memory. Free with
 * pagoda_metrics_free (NULL is fine). */
pagoda_metrics *pagoda_metrics_new(void);
void pagoda_metrics_free(pagoda_metrics *m);

/* Record one observation of `seconds` (negative or NaN values are ignored). */
void pagoda_metrics_observe(pagoda_metrics *m, pagoda_hist which, double seconds);
/* Add n (>= 0; negative n is ignored) to a counter. */
void pagoda_metrics_count(pagoda_metrics *m, pagoda_counter which, int64_t n);
/* Count one finished request by its pagoda_finish_reason, rendered as
 * pagoda_request_success_total{finished_reason="stop"|"length"|"cancelled"|"error"}. */
void pagoda_metrics_finished(pagoda_metrics *m, int finish_reason);

/* The exposition text: counters, histograms, the gauges of `st` (may be
 * NULL: then no engine gauges) and the n_extra gauges of `extra`. Returns a
 * malloc'd NUL-terminated string the caller frees with free(), NULL when out
 * of memory. */
char *pagoda_metrics_render(pagoda_metrics *m, const pagoda_engine_stats *st,
                            const pagoda_metric_gauge *extra, int n_extra);

/* Bucket upper bounds of a histogram (without +Inf); *n set to their count. */
const double *pagoda_metrics_buckets(pagoda_hist which, int *n);

#ifdef __cplusplus
}
#endif
#endif /* PAGODA_METRICS_H */
