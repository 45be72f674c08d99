/*
 * scheduler-continuous: iteration-level (continuous) batching, FCFS.
 * Each step, under max_num_seqs and max_batched_tokens:
 *   1. running sequences in admission order: a decoding one gets 1 token,
 *      one still prefilling a chunk of min(remaining, budget left); when
 *      the KV policy cannot grow one, the most recently admitted running
 *      sequence is preempted by recompute (possibly the one itself) and
 *      the growth retried;
 *   2. unless a sequence was preempted in step 1, waiting sequences are
 *      admitted in arrival order, stopping at the first that does not fit
 *      (seats, tokens or blocks), so a big request is never overtaken and
 *      starved by small ones.
 * With chunked_prefill = false a prompt must fit the budget left whole; one
 * longer than max_batched_tokens runs alone in a step of its own (limits()
 * then reports max(max_batched_tokens, [engine] max_seq_len)).
 *
 * Not for: priorities (priority.c), whole-batch admission (static.c).
 *
 * Config [scheduler.continuous]: max_num_seqs (64), max_batched_tokens
 * (512), chunked_prefill (true), long_prefill_token_threshold (0 = off).
 */
#include "sched_common.h"

/* The context is the shared sc_batching (sched_common.h). */
typedef sc_batching cont;

static const pagoda_config_key cont_keys[] = {
    SC_BATCHING_KEYS,
    {.name = NULL},
};

static int cont_create(const pagoda_host *host, void **ctx, char *err, size_t err_len)
{
    return sc_batching_create(host, "scheduler.continuous", ctx, err, err_len);
}

static int cont_schedule(void *ctx, const pagoda_sched_env *env)
{
    cont *c = ctx;
    sc_step st;
    int rc = sc_batching_begin(&st, c, env);
    if (rc == PAGODA_OK) rc = sc_copy_running(&c->x, env);
    if (rc == PAGODA_OK) rc = sc_plan_in_order(&st, c->x.a, env->n_running);
    if (rc != PAGODA_OK) return rc;

    /* Admitting while running sequences lose their blocks would only make
     * them thrash; they get the blocks first. */
    for (int32_t i = 0; !st.preempted_for_space && i < env->n_waiting; i++) {
        pagoda_sched_seq *w = env->waiting[i];
        if (w->state != PAGODA_SEQ_WAITING) continue;
        if (st.seats <= 0 || st.budget <= 0 || st.n_plan >= st.max_seqs) break;
        if (!st.chunked && sc_chunk_for(&st, sc_remaining_if_admitted(&st, w)) == 0) break;
        rc = env->admit(env->opaque, w->id);
        if (rc == PAGODA_ERR_NOSPACE) break;
        if (rc != PAGODA_OK) return rc;
        st.seats--;
        int32_t k = sc_chunk(&st, w);
        if (k > 0) rc = env->grow(env->opaque, w->id, w->n_computed + k);
        if (k == 0 || rc == PAGODA_ERR_NOSPACE) {
            /* Hand the blocks back rather than sit on them unplanned. */
            rc = sc_preempt(&st, w);
            if (rc != PAGODA_OK) return rc;
            break;
        }
        if (rc != PAGODA_OK) return rc;
        sc_add(&st, w, k);
    }
    return sc_flush(&st);
}

static const pagoda_scheduler_ops cont_ops = {
    .struct_size = sizeof(pagoda_scheduler_ops),
    .limits = sc_batching_limits,
    .schedule = cont_schedule,
    .on_arrival = NULL,
    .on_finish = NULL,
};

static const pagoda_plugin_desc cont_desc = {
    PAGODA_DESC_HEADER(PAGODA_KIND_SCHEDULER),
    .name = "continuous",
    .version = "1.0",
    .description = "continuous batching, FCFS, chunked prefill, preempt-latest by recompute",
    .config_keys = cont_keys,
    .probe = NULL,
    .create = cont_create,
    .destroy = sc_batching_destroy,
    .ops = &cont_ops,
};

PAGODA_PLUGIN(cont_desc)
