/*
 * engine.h: the serving loop. One engine thread owns the scheduler policy,
 * the KV-cache policy and the backend; frontends submit and cancel from any
 * thread. Each step: take arrivals and cancels, ask the scheduler for a
 * plan, run one flattened forward pass, sample, stream events, finish
 * sequences. Not for: parsing requests (frontends) or the math (forward.c).
 */
#ifndef PAGODA_ENGINE_H
#define PAGODA_ENGINE_H

#include "pagoda/host.h"
#include "pagoda/kvcache.h"
#include "pagoda/scheduler.h"
#include "forward.h"
#include "model.h"

typedef struct pagoda_scheduler {
    pagoda_scheduler_ops ops;
    void *ctx;
    const char *name;
} pagoda_scheduler;

typedef struct pagoda_kvcache {
    pagoda_kvcache_ops ops;
    void *ctx;
    const char *name;
} pagoda_kvcache;

typedef struct pagoda_engine_opts {
    int32_t max_seq_len;        /* context per sequence (<= the model's) */
    int32_t n_blocks;           /* KV pool blocks */
    int32_t block_size;         /* tokens per block */
    int32_t kv_dtype;           /* PAGODA_DTYPE_F16, Q8_0 or F32 (pagoda_kv_layout) */
    int32_t max_queue;          /* waiting requests before submit says NOSPACE */
    uint64_t seed;              /* 0: a random seed per request without one */
    int32_t default_max_tokens; /* when a request gives none */
    float temperature, top_p, min_p;
    int32_t top_k;
    bool check_invariants;      /* verify KV accounting after every step */
} pagoda_engine_opts;

typedef struct pagoda_engine pagoda_engine;
struct pagoda_metrics;

/* Build the engine: sizes activations from the scheduler's limits, makes the
 * KV pool, initialises the KV policy. Takes no ownership of its arguments. */
int pagoda_engine_create(pagoda_model *m, pagoda_backend *be, pagoda_scheduler *sched,
                         pagoda_kvcache *kv, const pagoda_engine_opts *opts,
                         pagoda_engine **out, char *err, size_t err_len);
/* Optional metrics sink (before start). */
void pagoda_engine_set_metrics(pagoda_engine *e, struct pagoda_metrics *m);
/* Start the engine thread. */
int pagoda_engine_start(pagoda_engine *e);
/* Stop accepting, end every request with a FINAL (cancelled), join the
 * thread. Safe to call twice. */
void pagoda_engine_stop(pagoda_engine *e);
/* Stop (if running) and free. */
void pagoda_engine_free(pagoda_engine *e);

/* [any thread] see pagoda_host.submit / cancel. */
int pagoda_engine_submit(pagoda_engine *e, const pagoda_request *req, pagoda_event_cb cb,
                         void *user, uint64_t *id, char *err, size_t err_len);
int pagoda_engine_cancel(pagoda_engine *e, uint64_t id);
void pagoda_engine_request_defaults(const pagoda_engine *e, pagoda_request *req);
void pagoda_engine_get_stats(pagoda_engine *e, pagoda_engine_stats *st);
/* Wait until no request is queued or running (for tests and the bench). */
void pagoda_engine_wait_idle(pagoda_engine *e);
/* The KV policy's stats, read directly: call it on the engine thread (a step
 * hook) or while the engine is idle. pagoda_engine_get_stats is the
 * [any thread] view. */
int pagoda_engine_kv_stats(pagoda_engine *e, pagoda_kv_stats *st);
/* A hook called on the engine thread after every step (tests, bench). */
void pagoda_engine_set_step_hook(pagoda_engine *e, void (*hook)(void *user, pagoda_engine *e),
                                 void *user);
/* Verify KV accounting after every step (tests); violations are logged
 * and counted. */
void pagoda_engine_set_check_invariants(pagoda_engine *e, bool on);
/* Invariant violations seen so far (check_invariants). */
int64_t pagoda_engine_invariant_failures(const pagoda_engine *e);
const pagoda_model *pagoda_engine_model(const pagoda_engine *e);
const pagoda_engine_opts *pagoda_engine_get_opts(const pagoda_engine *e);
/* Copy KV blocks (for KV policies through the host table). */
int pagoda_engine_copy_blocks(pagoda_engine *e, const int32_t *src, const int32_t *dst, int32_t n);

#endif /* PAGODA_ENGINE_H */
