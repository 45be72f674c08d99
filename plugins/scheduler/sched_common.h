/*
 * sched_common.h: the step bookkeeping the scheduler plugins share (token
 * budget, seats, a local plan, chunk sizes, preempt-on-growth-failure).
 * Header-only with static functions: each plugin is one shared object and
 * must not link another, so this text is compiled into each of them.
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

static inline int sc_grow_array(pagoda_sched_seq ***arr, int32_t *cap, int32_t n)
{
    if (n <= *cap) return PAGODA_OK;
    int32_t c = *cap ? *cap : 16;
    while (c < n) c *= 2;
    pagoda_sched_seq **p = realloc(*arr, (size_t)c * sizeof(*p));
    if (!p) return PAGODA_ERR_NOMEM;
    *arr = p;
    *cap = c;
    return PAGODA_OK;
}

static inline void sc_scratch_free(sc_scratch *x)
{
    free(x->plan);
    free(x->a);
    free(x->b);
    memset(x, 0, sizeof(*x));
}

/* Starts a step: the budgets, and seats left after the running sequences. */
static inline int sc_begin(sc_step *st, sc_scratch *x, const pagoda_sched_env *env, int32_t max_seqs,
                    int32_t max_tokens, int32_t hard_tokens, bool chunked, int32_t long_prefill)
{
    memset(st, 0, sizeof(*st));
    if (x->cap_plan < max_seqs) {
        sc_entry *p = realloc(x->plan, (size_t)max_seqs * sizeof(*p));
        if (!p) return PAGODA_ERR_NOMEM;
        x->plan = p;
        x->cap_plan = max_seqs;
    }
    st->env = env;
    st->max_seqs = max_seqs;
    st->max_tokens = max_tokens;
    st->hard_tokens = hard_tokens > max_tokens ? hard_tokens : max_tokens;
    st->chunked = chunked;
    st->long_prefill = long_prefill;
    st->budget = max_tokens;
    st->plan = x->plan;
    int32_t holding = 0;
    for (int32_t i = 0; i < env->n_running; i++) holding += env->running[i]->state == PAGODA_SEQ_RUNNING;
    st->seats = max_seqs - holding;
    return PAGODA_OK;
}

/* Tokens of a sequence that go into this step's plan now: 1 to decode, a
 * prefill chunk, or 0 when it must wait for a later step. remaining is
 * n_tokens - n_computed. */
static inline int32_t sc_chunk_for(const sc_step *st, int32_t remaining)
{
    if (remaining <= 0 || st->budget <= 0 || st->n_plan >= st->max_seqs) return 0;
    if (remaining == 1) return 1;
    int32_t n = remaining;
    if (st->chunked) {
        if (st->long_prefill > 0 && n > st->long_prefill) n = st->long_prefill;
        return n < st->budget ? n : st->budget;
    }
    if (n <= st->budget) return n;
    /* Without chunking a prompt longer than the budget runs alone: only in
     * a step where nothing else is planned, up to limits()' token count
     * (raised to max_seq_len for this); beyond that it is split after all,
     * so that it cannot stall the queue. */
    if (st->n_plan == 0 && st->budget == st->max_tokens) return n < st->hard_tokens ? n : st->hard_tokens;
    return 0;
}

static inline int32_t sc_chunk(const sc_step *st, const pagoda_sched_seq *s)
{
    return sc_chunk_for(st, s->n_tokens - s->n_computed);
}

static inline void sc_add(sc_step *st, pagoda_sched_seq *s, int32_t n)
{
    st->plan[st->n_plan++] = (sc_entry){.s = s, .n = n};
    st->budget -= n;
    if (st->budget < 0) st->budget = 0; /* a lone oversize prompt */
}

/* Preempts a RUNNING sequence by recompute and takes it out of the local
 * plan if it was there (its tokens go back to the budget). */
static inline int sc_preempt(sc_step *st, pagoda_sched_seq *s)
{
    int rc = st->env->preempt(st->env->opaque, s->id);
    if (rc != PAGODA_OK) return rc;
    st->seats++;
    for (int32_t i = 0; i < st->n_plan; i++) {
        if (st->plan[i].s != s) continue;
        st->budget += st->plan[i].n;
        if (st->budget > st->max_tokens) st->budget = st->max_tokens;
        memmove(&st->plan[i], &st->plan[i + 1], (size_t)(st->n_plan - i - 1) * sizeof(sc_entry));
        st->n_plan--;
        break;
    }
    return PAGODA_OK;
}

/*
 * Plans the RUNNING sequences of order[0..n) in that order. When growing
 * one fails for lack of blocks, the last RUNNING sequence of the order is
 * preempted (by recompute) and the growth retried; when that last one is
 * the sequence itself, it is preempted and the pass goes on. Victims thus
 * always come after the sequence being planned, so a planned sequence is
 * never taken back here. Sets st->preempted_for_space.
 */
static inline int sc_plan_in_order(sc_step *st, pagoda_sched_seq **order, int32_t n)
{
    const pagoda_sched_env *env = st->env;
    for (int32_t i = 0; i < n; i++) {
        pagoda_sched_seq *s = order[i];
        if (s->state != PAGODA_SEQ_RUNNING) continue;
        int32_t k = sc_chunk(st, s);
        if (k == 0) continue;
        for (;;) {
            int rc = env->grow(env->opaque, s->id, s->n_computed + k);
            if (rc == PAGODA_OK) {
                sc_add(st, s, k);
                break;
            }
            if (rc != PAGODA_ERR_NOSPACE) return rc;
            int32_t j = n - 1;
            while (j > i && order[j]->state != PAGODA_SEQ_RUNNING) j--;
            rc = sc_preempt(st, order[j]);
            if (rc != PAGODA_OK) return rc;
            st->preempted_for_space = true;
            if (j == i) break;
        }
    }
    return PAGODA_OK;
}

/* Estimated tokens a waiting sequence would still compute once admitted,
 * from the KV policy's blocks_needed (exact for paged and prefix). */
static inline int32_t sc_remaining_if_admitted(const sc_step *st, const pagoda_sched_seq *w)
{
    const pagoda_sched_env *env = st->env;
    if (!env->blocks_needed || env->block_size <= 0) return w->n_tokens;
    int32_t total = (w->n_tokens + env->block_size - 1) / env->block_size;
    int32_t hit = total - env->blocks_needed(env->opaque, w->id);
    if (hit <= 0) return w->n_tokens;
    int64_t cached = (int64_t)hit * env->block_size;
    if (cached >= w->n_tokens) cached = ((w->n_tokens - 1) / env->block_size) * (int64_t)env->block_size;
    return w->n_tokens - (int32_t)cached;
}

/* Hands the local plan to the engine. */
static inline int sc_flush(sc_step *st)
{
    for (int32_t i = 0; i < st->n_plan; i++) {
        if (st->plan[i].s->state != PAGODA_SEQ_RUNNING) continue;
        int rc = st->env->plan(st->env->opaque, st->plan[i].s->id, st->plan[i].n);
        if (rc != PAGODA_OK) return rc;
    }
    return PAGODA_OK;
}

/* Copies the running snapshot (admission order) into x->a. */
static inline int sc_copy_running(sc_scratch *x, const pagoda_sched_env *env)
{
    int rc = sc_grow_array(&x->a, &x->cap_a, env->n_running);
    if (rc != PAGODA_OK) return rc;
    if (env->n_running) memcpy(x->a, env->running, (size_t)env->n_running * sizeof(*x->a));
    return PAGODA_OK;
}

/* Lower priority value first, then earlier arrival. */
static inline int sc_cmp_priority(const void *pa, const void *pb)
{
    const pagoda_sched_seq *a = *(pagoda_sched_seq *const *)pa, *b = *(pagoda_sched_seq *const *)pb;
    if (a->priority != b->priority) return a->priority < b->priority ? -1 : 1;
    if (a->arrival != b->arrival) return a->arrival < b->arrival ? -1 : 1;
    return 0;
}

/* limits()' token count: the budget, raised to max_seq_len ([engine]) when
 * prefill is not chunked so that a prompt longer than the budget can run
 * alone in one step. */
static inline int32_t sc_hard_tokens(const pagoda_host *h, int32_t max_tokens, bool chunked)
{
    if (chunked || !h->engine_config) return max_tokens;
    const char *v = h->engine_config(h, "max_seq_len");
    long long msl = v ? strtoll(v, NULL, 10) : 0;
    if (msl > max_tokens && msl < (1LL << 30)) return (int32_t)msl;
    return max_tokens;
}

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
static inline int sc_batching_create(const pagoda_host *host, const char *section, void **ctx, char *err,
                                     size_t err_len)
{
    int64_t seqs = host->config_int(host, "max_num_seqs", 64);
    int64_t toks = host->config_int(host, "max_batched_tokens", 512);
    int64_t lp = host->config_int(host, "long_prefill_token_threshold", 0);
    if (seqs < 1 || seqs > 65536 || toks < 1 || toks > 1048576 || lp < 0 || lp > 1048576) {
        snprintf(err, err_len,
                 "[%s] max_num_seqs = %lld, max_batched_tokens = %lld, "
                 "long_prefill_token_threshold = %lld: expected 1..65536, 1..1048576, 0..1048576",
                 section, (long long)seqs, (long long)toks, (long long)lp);
        return PAGODA_ERR_INVALID;
    }
    sc_batching *b = calloc(1, sizeof(*b));
    if (!b) return PAGODA_ERR_NOMEM;
    b->host = host;
    b->max_seqs = (int32_t)seqs;
    b->max_tokens = (int32_t)toks;
    b->long_prefill = (int32_t)lp;
    b->chunked = host->config_bool(host, "chunked_prefill", true);
    b->hard_tokens = sc_hard_tokens(host, b->max_tokens, b->chunked);
    *ctx = b;
    return PAGODA_OK;
}

static inline void sc_batching_destroy(void *ctx)
{
    sc_batching *b = ctx;
    if (!b) return;
    sc_scratch_free(&b->x);
    free(b);
}

static inline int sc_batching_limits(void *ctx, int32_t *max_num_seqs, int32_t *max_batched_tokens)
{
    sc_batching *b = ctx;
    *max_num_seqs = b->max_seqs;
    *max_batched_tokens = b->hard_tokens;
    return PAGODA_OK;
}

/* sc_begin with a batching scheduler's settings. */
static inline int sc_batching_begin(sc_step *st, sc_batching *b, const pagoda_sched_env *env)
{
    return sc_begin(st, &b->x, env, b->max_seqs, b->max_tokens, b->hard_tokens, b->chunked, b->long_prefill);
}

#endif
