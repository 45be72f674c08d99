/*
 * runtime.h: everything a configured server is made of, built from a
 * config: the model, the memory plan, the backend, scheduler and KV-cache
 * plugin instances, the engine and (for serving) the frontend. `pagoda
 * serve`, the bench and the tests all build it the same way.
 * Not for: the engine loop (engine.c) or the CLI (main.c).
 */
#ifndef PAGODA_RUNTIME_H
#define PAGODA_RUNTIME_H

#include <pthread.h>

#include "comm.h"
#include "config.h"
#include "engine.h"
#include "memplan.h"
#include "metrics.h"
#include "plugin_loader.h"
#include "tp.h"

typedef struct pagoda_runtime {
    pagoda_config *cfg;            /* not owned */
    pagoda_engine_config ec;
    pagoda_model *model;
    pagoda_memplan plan;
    char *plan_json;
    pagoda_metrics *metrics;
    pagoda_plugin *p_backend, *p_sched, *p_kv, *p_front, *p_con;
    pagoda_host *h_backend, *h_sched, *h_kv, *h_front, *h_con;
    pagoda_backend backend;
    pagoda_scheduler sched;
    pagoda_kvcache kv;
    pagoda_constraint con;         /* structured output; con.ctx NULL when off */
    void *front_ctx;
    pagoda_engine *engine;
    int32_t chat_family;           /* pagoda_chat_family */
    int shutting_down;             /* a signal asked the server to stop (atomic access) */
    pthread_mutex_t load_mu;       /* guards load_state */
    pthread_cond_t load_cv;
    int load_state;                /* 0 loading, 1 serving, -1 loading failed */
    /* tensor parallelism (engine.tensor_parallel > 1), else NULL */
    pagoda_comm *comm;
    pagoda_tp *tp;
    bool tp_agreed;                /* the start-up agreement was made */
    bool tp_workers_running;       /* rank 0: the workers are in their loop (stop them at close) */
} pagoda_runtime;

/* Open the model (header, tensors, tokenizer), load the backend, scheduler
 * and KV plugins named by cfg, and compute (and print) the memory plan;
 * refuse a model that does not fit. with_frontend: also load and create
 * the configured frontend, which can serve (health 503) before the
 * weights are in. No engine yet: see pagoda_runtime_load. On error
 * everything made so far is freed and err says what failed. */
int pagoda_runtime_prepare(pagoda_config *cfg, bool with_frontend, bool print_plan,
                           pagoda_runtime **out, char *err, size_t err_len);
/* The memory plan `pagoda --config` would compute from cfg, by the same
 * steps (model header, plugins, the scheduler's limits, kv_cache_tokens,
 * the cap on an automatic host budget), with nothing allocated for
 * serving; *plan is filled whether or not the model fits (plan->fits).
 * `pagoda plan` prints it. */
int pagoda_runtime_plan(pagoda_config *cfg, pagoda_memplan *plan, char *err, size_t err_len);
/* Read the weights in (progress bar), create the engine (and start its
 * thread when start); then pagoda_runtime_engine() is not NULL. */
int pagoda_runtime_load(pagoda_runtime *rt, bool start, char *err, size_t err_len);
/* prepare + load without starting: the caller starts rt->engine (tests,
 * bench, conformance). */
int pagoda_runtime_open(pagoda_config *cfg, bool with_frontend, bool print_plan,
                        pagoda_runtime **out, char *err, size_t err_len);
/* [any thread] The running engine, or NULL while loading. */
pagoda_engine *pagoda_runtime_engine(const pagoda_runtime *rt);
/* [any thread] Wait until loading ended; the engine, or NULL if it failed. */
pagoda_engine *pagoda_runtime_wait_loaded(pagoda_runtime *rt);
/* Loading failed: wake every waiter. */
void pagoda_runtime_load_failed(pagoda_runtime *rt);
/* Stop the engine (every request gets its FINAL), destroy the plugins,
 * free the model. */
void pagoda_runtime_close(pagoda_runtime *rt);

/* Tensor parallelism: this rank is not rank 0 (it runs no frontend). */
bool pagoda_runtime_is_worker(const pagoda_runtime *rt);
/* A worker rank: load its shard, then take steps from rank 0 until it says
 * stop (PAGODA_OK) or the group fails. */
int pagoda_runtime_work(pagoda_runtime *rt, char *err, size_t err_len);
/* [any thread, async-signal-safe] The job is ending: a collective waiting
 * on a rank that may be dead returns an error (in-flight requests then
 * end with it). */
void pagoda_runtime_interrupt_comm(pagoda_runtime *rt);

/* The constraint engine, or NULL when structured output is off. */
pagoda_constraint *pagoda_runtime_constraint(pagoda_runtime *rt);

/* The memory plan as metric gauges (name, help, value); returns the count. */
int pagoda_runtime_plan_gauges(const pagoda_runtime *rt, pagoda_metric_gauge *g, int cap);
bool pagoda_runtime_shutting_down(const pagoda_runtime *rt);

#endif /* PAGODA_RUNTIME_H */
