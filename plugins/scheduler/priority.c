/*
 * scheduler-priority: continuous batching ordered by request priority
 * (lower value first, then arrival). Each step:
 *   1. running sequences in (priority, arrival) order get their decode
 *      token or prefill chunk; when the KV policy cannot grow one, the
 *      running sequence of lowest priority (highest value, latest arrival)
 *      is preempted by recompute, possibly the one itself;
 *   2. unless step 1 preempted, waiting sequences in (priority, arrival)
 *      order are admitted; when one cannot be for lack of blocks or seats,
 *      running sequences of strictly lower priority are preempted (lowest
 *      first, latest arrival first) until it fits; when none is left to
 *      preempt, admission stops there (no overtaking within the order).
 * A lack of token budget never preempts: the budget renews every step.
 * Preemption for a higher priority is greedy: victims are not given back
 * if, in the end, the request still does not fit.
 *
 * Not for: fairness between equal priorities beyond arrival order.
 *
 * Config [scheduler.priority]: max_num_seqs (64), max_batched_tokens (512),
 * chunked_prefill (true), long_prefill_token_threshold (0 = off).
 */
#include "sched_common.h"

/* The context is the shared sc_batching (sched_common.h). */
typedef sc_batching prio;

static const pagoda_config_key prio_keys[] = {
    SC_BATCHING_KEYS,
    {.name = NULL},
};

static int prio_create(const pagoda_host *host, void **ctx, char *err, size_t err_len)
{
    return sc_batching_create(host, "scheduler.priority", ctx, err, err_len);
}

/* The running sequence to give up for `w`: strictly lower priority than
 * w's, the lowest of them, latest arrival among equals; NULL if none.
 * order[] is sorted by (priority, arrival), so it is the last RUNNING one
 * if that one qualifies. */
static pagoda_sched_seq *victim_for(pagoda_sched_seq **order, int32_t n, const pagoda_sched_seq *w)
{
    for (int32_t j = n - 1; j >= 0; j--) {
        if (order[j]->state != PAGODA_SEQ_RUNNING) continue;
        return order[j]->priority > w->priority ? order[j] : NULL;
    }
    return NULL;
}

static int prio_schedule(void *ctx, const pagoda_sched_env *env)
{
    prio *p = ctx;
    sc_step st;
    int rc = sc_batching_begin(&st, p, env);
    if (rc == PAGODA_OK) rc = sc_copy_running(&p->x, env);
    if (rc == PAGODA_OK) rc = sc_grow_array(&p->x.b, &p->x.cap_b, env->n_waiting);
    if (rc != PAGODA_OK) return rc;
    pagoda_sched_seq **run = p->x.a, **wait = p->x.b;
    int32_t n_run = env->n_running;
    if (n_run > 1) qsort(run, (size_t)n_run, sizeof(*run), sc_cmp_priority);
    rc = sc_plan_in_order(&st, run, n_run);
    if (rc != PAGODA_OK || st.preempted_for_space) return rc != PAGODA_OK ? rc : sc_flush(&st);

    if (env->n_waiting) memcpy(wait, env->waiting, (size_t)env->n_waiting * sizeof(*wait));
    if (env->n_waiting > 1) qsort(wait, (size_t)env->n_waiting, sizeof(*wait), sc_cmp_priority);
    for (int32_t i = 0; i < env->n_waiting; i++) {
        pagoda_sched_seq *w = wait[i];
        if (w->state != PAGODA_SEQ_WAITING) continue;
        if (!st.chunked && sc_chunk_for(&st, sc_remaining_if_admitted(&st, w)) == 0) break;
        /* Seats and blocks are bought by preempting lower priorities; the
         * token budget is not. */
        bool stop = false, never = false;
        for (;;) {
            rc = st.seats > 0 ? env->admit(env->opaque, w->id) : PAGODA_ERR_NOSPACE;
            if (rc == PAGODA_OK) break;
            if (rc != PAGODA_ERR_NOSPACE) return rc;
            pagoda_sched_seq *v = victim_for(run, n_run, w);
            if (!v) {
                /* Refused by an empty pool: it can never fit. Let the rest
                 * run rather than stall behind it; once nothing else is
                 * left the engine fails it. */
                never = st.seats == st.max_seqs;
                stop = true;
                break;
            }
            rc = sc_preempt(&st, v);
            if (rc != PAGODA_OK) return rc;
        }
        if (never) continue;
        if (stop) break;
        st.seats--;
        int32_t k = sc_chunk(&st, w);
        if (k == 0) { /* no tokens left this step: give the blocks back, keep the order */
            rc = sc_preempt(&st, w);
            if (rc != PAGODA_OK) return rc;
            break;
        }
        for (;;) {
            rc = env->grow(env->opaque, w->id, w->n_computed + k);
            if (rc == PAGODA_OK) break;
            if (rc != PAGODA_ERR_NOSPACE) return rc;
            pagoda_sched_seq *v = victim_for(run, n_run, w);
            if (!v) {
                stop = true;
                break;
            }
            rc = sc_preempt(&st, v);
            if (rc != PAGODA_OK) return rc;
        }
        if (stop) {
            rc = sc_preempt(&st, w);
            if (rc != PAGODA_OK) return rc;
            break;
        }
        sc_add(&st, w, k);
    }
    return sc_flush(&st);
}

static const pagoda_scheduler_ops prio_ops = {
    .struct_size = sizeof(pagoda_scheduler_ops),
    .limits = sc_batching_limits,
    .schedule = prio_schedule,
    .on_arrival = NULL,
    .on_finish = NULL,
};

static const pagoda_plugin_desc prio_desc = {
    PAGODA_DESC_HEADER(PAGODA_KIND_SCHEDULER),
    .name = "priority",
    .version = "1.0",
    .description = "continuous batching by request priority; preempts lower priorities for higher ones",
    .config_keys = prio_keys,
    .probe = NULL,
    .create = prio_create,
    .destroy = sc_batching_destroy,
    .ops = &prio_ops,
};

PAGODA_PLUGIN(prio_desc)
