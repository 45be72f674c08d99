/*
 * bench.h: `pagoda bench`, the in-process benchmark. It builds a runtime
 * from a config (or a generated model), drives the engine with a synthetic
 * token-id workload (closed loop at a concurrency, or open loop with
 * Poisson arrivals), and reports throughput, TTFT / inter-token / end-to-end
 * latency percentiles, KV utilisation, concurrency and preemptions; it also
 * measures the machine's rooflines (read bandwidth, sgemm rate) and runs the
 * policy comparisons of docs/benchmarks.md side by side in one process.
 * Not for: correctness (the tests), or any assertion on time.
 *
 * The workload generator and the statistics are exposed here so the unit
 * tests can check them without timing anything.
 */
#ifndef PAGODA_BENCH_H
#define PAGODA_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A length distribution: "N" (fixed), "A-B" or "uniform:A-B" (uniform
 * integers, both ends included), "log:A-B" (log-uniform: as many requests
 * between 16 and 32 as between 256 and 512, the skew of real chat outputs). */
typedef enum pagoda_bench_dist_kind {
    PAGODA_BENCH_FIXED = 0,
    PAGODA_BENCH_UNIFORM = 1,
    PAGODA_BENCH_LOGUNIFORM = 2
} pagoda_bench_dist_kind;

typedef struct pagoda_bench_dist {
    int kind;       /* pagoda_bench_dist_kind */
    int32_t lo, hi; /* FIXED: lo == hi */
} pagoda_bench_dist;

/* Parse a distribution; 0 or PAGODA_ERR_INVALID with err filled. Lengths
 * must be 1..1000000 and lo <= hi. */
int pagoda_bench_dist_parse(const char *s, pagoda_bench_dist *d, char *err, size_t err_len);
/* "128", "uniform:16-512", "log:16-512" into buf (returned). */
const char *pagoda_bench_dist_str(const pagoda_bench_dist *d, char *buf, size_t n);

/* The bench's RNG (splitmix64): the same seed gives the same workload on
 * every machine. */
uint64_t pagoda_bench_rng_next(uint64_t *state);
/* Uniform double in [0, 1). */
double pagoda_bench_rng_unit(uint64_t *state);
/* A draw from d, in [d->lo, d->hi]. */
int32_t pagoda_bench_dist_draw(const pagoda_bench_dist *d, uint64_t *state);

typedef struct pagoda_bench_workload {
    int32_t n_requests;
    pagoda_bench_dist prompt_len;  /* tokens after the shared prefix */
    pagoda_bench_dist output_len;  /* exact (ignore_eos) */
    int32_t shared_prefix;         /* tokens of the common prefix (0: none) */
    double shared_frac;            /* share of requests that start with it, 0..1 */
    int32_t concurrency;           /* closed loop: requests in flight (when rate == 0) */
    double rate;                   /* open loop: Poisson arrivals per second (> 0) */
    uint64_t seed;
} pagoda_bench_workload;

/* Defaults: 32 requests, prompt 128, output 128, no prefix, concurrency 8,
 * closed loop, seed 1. */
void pagoda_bench_workload_default(pagoda_bench_workload *w);

/* One generated request. A request with the prefix has shared_prefix +
 * draw(prompt_len) tokens; one without has as many tokens, all its own, so
 * sharing is the only difference between the two kinds. */
typedef struct pagoda_bench_req {
    int32_t *prompt;
    int32_t n_prompt;
    int32_t max_tokens;
    double arrival_s;   /* open loop: offset from the start (0 in a closed loop) */
    bool shared;
} pagoda_bench_req;

/* Make w->n_requests requests with token ids drawn uniformly from
 * [tok_lo, tok_hi) (callers skip the vocabulary's special and byte tokens).
 * Deterministic in w->seed. The caller frees with pagoda_bench_workload_free.
 * 0 or PAGODA_ERR_INVALID / NOMEM with err filled. */
int pagoda_bench_workload_make(const pagoda_bench_workload *w, int32_t tok_lo, int32_t tok_hi,
                               pagoda_bench_req **out, char *err, size_t err_len);
void pagoda_bench_workload_free(pagoda_bench_req *r, int32_t n);

/* Percentile p (0..100) of n values, linear between closest ranks (numpy's
 * default). Sorts v in place. 0 when n == 0. */
double pagoda_bench_percentile(double *v, size_t n, double p);

typedef struct pagoda_bench_pcts {
    double mean, p50, p90, p99, max;
} pagoda_bench_pcts;
/* Mean, p50/p90/p99 and max of n values (sorts v). */
void pagoda_bench_pcts_of(double *v, size_t n, pagoda_bench_pcts *out);

/* Length of the union of n intervals iv[2i] .. iv[2i+1] (sorts iv by
 * start): the time at least one request was in a phase. */
double pagoda_bench_union_length(double *iv, size_t n);

/* The CLI: argv[0] is "bench"; see `pagoda bench --help`. Returns an exit
 * code: 0 ok, 1 runtime error, 2 usage error. */
int pagoda_cmd_bench(int argc, char **argv);

/* The extraction schema `pagoda bench structured` measures (nested object,
 * array of objects, enums, bounds, a pattern, a format, optional fields):
 * here so test_constraint_masks checks the fast masks on the very schema
 * whose timings the bench reports. */
extern const char pagoda_bench_order_schema[];

#endif /* PAGODA_BENCH_H */
