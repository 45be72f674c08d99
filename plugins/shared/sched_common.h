/*
 * sched_common.h: the step bookkeeping the scheduler plugins share (token
 * budget, seats, a local plan, chunk sizes, preempt-on-growth-failure).
 * Compiled once into the static library pagoda_sched_shared, which each
 * scheduler plugin links (hidden: no plugin exports these names).
 * Not for: any policy decision about who is admitted (that is each
 * plugin's own file).
 *
 * The plan is kept here and handed to env->plan only at the end of the
 * step (sc_flush), so that a sequence preempted after being planned simply
 * drops out and gives its tokens back to the budget.
 */
#ifndef PAGODA_SCHED_COMMON_H
#define PAGODA_SCHED_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pagoda/host.h"
#include "pagoda/plugin.h"
#include "pagoda/scheduler.h"

typedef struct sc_entry {
    pagoda_sched_seq *s;
    int32_t n;
} sc_entry;

/* Per-instance scratch that outlives one step (grown on demand). */
typedef struct sc_scratch {
    sc_entry *plan;
    int32_t cap_plan;
    pagoda_sched_seq **a, **b; /* two orderings (running, waiting) */
    int32_t cap_a, cap_b;
} sc_scratch;

/* One step in progress. */
typedef struct sc_step {
    const pagoda_sched_env *env;
    int32_t max_seqs;        /* plan entries and RUNNING sequences at most */
    int32_t max_tokens;      /* the configured token budget of a step */
    int32_t hard_tokens;     /* limits(): a lone oversize prompt may use up to this */
    bool chunked;            /* prefill may be split over steps */
    int32_t long_prefill;    /* > 0: at most this many prefill tokens per sequence and step */
    int32_t budget;          /* tokens left this step */
    int32_t seats;           /* max_seqs minus the sequences holding KV */
    sc_entry *plan;
    int32_t n_plan;
    bool preempted_for_space;/* a running sequence lost its blocks this step */
} sc_step;

int sc_grow_array(pagoda_sched_seq ***arr, int32_t *cap, int32_t n);

void sc_scratch_free(sc_scratch *x);

/* Starts a step: the budgets, and seats left after the running sequences. */
int sc_begin(sc_step *st, sc_scratch *x, const pagoda_sched_env *env, int32_t max_seqs,
             int32_t max_tokens, int32_t hard_tokens, bool chunked, int32_t long_prefill);

/* Tokens of a sequence that go into this step's plan now: 1 to decode, a
 * prefill chunk, or 0 when it must wait for a later step. remaining is
 * n_tokens - n_computed. */
int32_t sc_chunk_for(const sc_step *st, int32_t remaining);

int32_t sc_chunk(const sc_step *st, const pagoda_sched_seq *s);

void sc_add(sc_step *st, pagoda_sched_seq *s, int32_t n);

/* Preempts a RUNNING sequence by recompute and takes it out of the local
 * plan if it was there (its tokens go back to the budget). */
int sc_preempt(sc_step *st, pagoda_sched_seq *s);

/*
 * Plans the RUNNING sequences of order[0..n) in that order. When growing
 * one fails for lack of blocks, the last RUNNING sequence of the order is
 * preempted (by recompute) and the growth retried; when that last one is
 * the sequence itself, it is preempted and the pass goes on. Victims thus
 * always come after the sequence being planned, so a planned sequence is
 * never taken back here. Sets st->preempted_for_space.
 */
int sc_plan_in_order(sc_step *st, pagoda_sched_seq **order, int32_t n);

/* Estimated tokens a waiting sequence would still compute once admitted,
 * from the KV policy's blocks_needed (exact for paged and prefix). */
int32_t sc_remaining_if_admitted(const sc_step *st, const pagoda_sched_seq *w);

/* Hands the local plan to the engine. */
int sc_flush(sc_step *st);

/* Copies the running snapshot (admission order) into x->a. */
int sc_copy_running(sc_scratch *x, const pagoda_sched_env *env);

/* Lower priority value first, then earlier arrival. */
int sc_cmp_priority(const void *pa, const void *pb);

/* limits()' token count: the budget, raised to max_seq_len ([engine]) when
 * prefill is not chunked so that a prompt longer than the budget can run
 * alone in one step. */
int32_t sc_hard_tokens(const pagoda_host *h, int32_t max_tokens, bool chunked);

/*
 * The continuous-batching configuration that continuous.c and priority.c
 * share: the same keys, the same checks, the same limits(). Each plugin
 * keeps its own context type name for readability; both are sc_batching.
 */
typedef struct sc_batching {
    const pagoda_host *host;
    int32_t max_seqs, max_tokens, hard_tokens, long_prefill;
    bool chunked;
    sc_scratch x;
} sc_batching;

/* The key table rows; a macro (not an array) so that static.c, which
 * includes this header without using them, has no unused variable. */
#define SC_BATCHING_KEYS                                                                                       \
    {.name = "max_num_seqs", .type = PAGODA_KEY_INT, .default_str = "64", .min = 1, .max = 65536,            \
     .help = "most sequences running (holding KV) and planned in one step"},                                 \
    {.name = "max_batched_tokens", .type = PAGODA_KEY_INT, .default_str = "512", .min = 1, .max = 1048576,   \
     .help = "most tokens (prefill chunks + decodes) computed in one step"},                                 \
    {.name = "chunked_prefill", .type = PAGODA_KEY_BOOL, .default_str = "true",                              \
     .help = "split long prompts over steps so decodes keep running beside them"},                           \
    {.name = "long_prefill_token_threshold", .type = PAGODA_KEY_INT, .default_str = "0", .min = 0,           \
     .max = 1048576, .help = "with chunked prefill: most prompt tokens one sequence computes per step (0: off)"}

/* create() of a batching scheduler; `section` (e.g. "scheduler.priority")
 * names the plugin's config section in the error message. */
int sc_batching_create(const pagoda_host *host, const char *section, void **ctx, char *err,
                       size_t err_len);

void sc_batching_destroy(void *ctx);

int sc_batching_limits(void *ctx, int32_t *max_num_seqs, int32_t *max_batched_tokens);

/* sc_begin with a batching scheduler's settings. */
int sc_batching_begin(sc_step *st, sc_batching *b, const pagoda_sched_env *env);

#endif
