/*
 * bench_internal.h: what the files of `pagoda bench` share among
 * themselves (bench.c, bench_run.c, bench_http.c, bench_roofline.c,
 * bench_compare.c, bench_report.c): the options, one run's records and
 * results, and the functions one file calls in another.
 * Not for: anything outside core/bench*.c; the public API (the workload
 * generator and the statistics the tests use) is bench.h.
 */
#ifndef PAGODA_BENCH_INTERNAL_H
#define PAGODA_BENCH_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "bench.h"
#include "config.h"
#include "engine.h"
#include "log.h"
#include "model.h"
#include "runtime.h"

/* Messages, labels and plot paths are cut at their buffers' ends when a
 * path is absurdly long; that is acceptable here. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#define ERR(...) snprintf(err, err_len, __VA_ARGS__)

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
    char f16_gemm[16];   /* [backend.cpu] f16_gemm as configured ("auto" when unset) */
    int32_t n_req, n_ok, n_err;
    double wall_s;
    int64_t gen_tokens, prompt_tokens, cached_tokens;
    double gen_tps, total_tps;
    /* Decode phase: the tokens after each request's first over the time at
     * least one request was past its first token (the union of the
     * [first token, end] intervals): prefill and queueing left out. */
    double phase_tps, phase_s;
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
    int32_t repeat;          /* two-sided comparisons: alternating runs per side, best kept */
    bool quiet;
    bool serve;              /* the workload through the in-process HTTP frontend */
    const char *http;        /* HOST:PORT of a running server */
    int32_t vocab_size;      /* token ids drawn for --http without --model */
} bench_opts;

/* Which parts of a side to run. */
enum { SIDE_WORKLOAD = 1, SIDE_DECODE = 2, SIDE_PREFILL = 4 };

/* One instruction's peak (bench_peaks.c), G operations/s: a
 * multiply-accumulate counts 2. */
typedef struct bench_peak {
    char key[16];          /* fma256, fma512, maddubs256, avxvnni256, vnni256, vnni512, dpbf16, amx_int8, amx_bf16 */
    char name[48];
    double core_gops, all_gops;  /* one thread; roofline.threads at once */
} bench_peak;
#define BENCH_MAX_PEAKS 12

typedef struct roofline {
    double bw_gbs, sgemm_gflops;
    int threads;
    char blas_core[64];
    bench_peak peaks[BENCH_MAX_PEAKS];  /* the paths this CPU has */
    int n_peaks;
} roofline;

static inline double bench_ratio(double a, double b) { return b > 0 ? a / b : 0; }

/* bench_run.c: one run in-process */
double bench_now_s(void);
void bench_result_free(bench_result *r);
/* Attach c to the step hook for a run's duration (NULL detaches). */
void bench_hook_attach(run_ctx *c);
int bench_run_ctx_init(run_ctx *c, size_t cap_itl);
void bench_run_ctx_free(run_ctx *c);
/* Turn a finished run's records into res; takes rec and c's trace, frees c. */
int bench_finish_result(run_ctx *c, req_rec *rec, int32_t n, const pagoda_engine_stats *s0,
                        const pagoda_engine_stats *s1, bench_result *res, char *err, size_t err_len);
/* Open one side's runtime (defaults, model, --set, side_sets), run the parts
 * in `what` (SIDE_*), fill res. */
int bench_run_side(const bench_opts *o, const char *label, const char *model,
                   const char *const *side_sets, int what, bench_result *res, char *err,
                   size_t err_len);

/* Open a runtime for one side: the bench's defaults (or o->config), the
 * model, o's --set and side_sets; the HTTP frontend on a free port written
 * to port_file when port_file is not NULL. bench_run.c */
int bench_open_side(const bench_opts *o, const char *model, const char *const *side_sets,
                    const char *port_file, pagoda_config **cfg_out, pagoda_runtime **rt_out,
                    char *err, size_t err_len);
/* bench_spec.c: --compare spec, speculative decoding on vs off */
int bench_do_spec(const bench_opts *o);

/* bench_http.c: the serving benchmark */
/* Start the runtime's HTTP frontend, run the workload through it, stop it. */
int bench_serve_workload(pagoda_runtime *rt, const char *port_file, const pagoda_bench_workload *w,
                         const pagoda_bench_req *reqs, bench_result *res, char *err, size_t err_len);
/* --http HOST:PORT: the workload against a running server. */
int bench_do_http(const bench_opts *o);

/* bench_roofline.c: the machine's rooflines and the model's traffic */
void bench_model_traffic(const pagoda_model *m, double *bytes, double *flops);
void bench_measure_roofline(const bench_opts *o, roofline *rf);
void bench_print_roofline(const roofline *rf);
void bench_print_bounds(const bench_result *x, const roofline *rf);

/* bench_peaks.c: instruction peaks of the paths this CPU has */
void bench_measure_peaks(roofline *rf);
void bench_print_peaks(const roofline *rf);
/* The peak of the path the CPU backend runs a prefill of this weight type
 * on (its dtype name) at the level PAGODA_CPU_ISA allows; NULL if none. */
const bench_peak *bench_matching_peak(const roofline *rf, const char *weight_type, const char *f16_gemm);

/* bench_compare.c: the policy comparisons */
/* Apply a comparison's workload defaults before the user's flags; -1: unknown name. */
int bench_compare_defaults(const char *name, bench_opts *o);
int bench_do_compare(const bench_opts *o, roofline *rf);

/* bench_structured.c: --compare structured (mask time per token, constrained
 * vs free throughput) */
int bench_do_structured(const bench_opts *o);

/* bench_report.c: text, JSON, CSV and gnuplot output */
void bench_print_results(FILE *f, const bench_result *r, int n);
int bench_write_json(const char *path, const bench_opts *o, const char *compare,
                     const bench_result *r, int n, const roofline *rf, json_t *headline);
int bench_write_csv(const char *path, const bench_result *r, int n);
bool bench_have_gnuplot(void);
void bench_plot_timeline(const char *dir, const char *name, const char *title,
                         const bench_result *r, int n);
void bench_plot_ttft(const char *dir, const char *name, const char *title, const bench_result *r,
                     int n);
void bench_plot_bars(const char *dir, const char *name, const char *title, const char *ylabel,
                     const char *const *labels, const double *v, int n);

/* bench.c: models */
/* The path of a generated model of shape/type (made now if missing). */
int bench_model_for(const bench_opts *o, const char *type, char *out, size_t out_len, char *err,
                    size_t err_len);
/* --model, else the config's model, else a generated one. */
int bench_resolve_model(const bench_opts *o, const char *type, char *path, size_t n, char *err,
                        size_t err_len);

#endif /* PAGODA_BENCH_INTERNAL_H */
