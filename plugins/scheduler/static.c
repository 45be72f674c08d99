/*
 * scheduler-static: the baseline static batching. When no batch is in
 * flight, up to batch_size waiting requests are admitted together (in
 * arrival order, as many as the KV policy takes); the batch then runs,
 * prefill first (chunked under max_batched_tokens) and decode after, until
 * every member has finished. Only then is the next batch admitted, so a
 * short request waits for the longest one of its batch: the cost that
 * continuous batching removes.
 *
 * If the KV pool runs out mid-batch, the most recently admitted member is
 * preempted by recompute (as continuous.c does) and re-admitted, ahead of
 * any new request, once blocks allow.
 *
 * Not for: admitting work while a batch runs (continuous.c).
 *
 * Config [scheduler.static]: batch_size (8), max_batched_tokens (512).
 */
#include "sched_common.h"

typedef struct stat_sched {
    const pagoda_host *host;
    int32_t batch_size, max_tokens;
    uint64_t *batch;       /* ids of the batch in flight */
    int32_t n_batch;
    sc_scratch x;
} stat_sched;

static const pagoda_config_key stat_keys[] = {
    {.name = "batch_size", .type = PAGODA_KEY_INT, .default_str = "8", .min = 1, .max = 65536,
     .help = "requests admitted together; the next batch starts when all of them finished"},
    {.name = "max_batched_tokens", .type = PAGODA_KEY_INT, .default_str = "512", .min = 1, .max = 1048576,
     .help = "most tokens computed in one step (prompts are prefilled in chunks of it)"},
    {.name = NULL},
};

static int stat_create(const pagoda_host *host, void **ctx, char *err, size_t err_len)
{
    int64_t bs = host->config_int(host, "batch_size", 8);
    int64_t toks = host->config_int(host, "max_batched_tokens", 512);
    if (bs < 1 || bs > 65536 || toks < 1 || toks > 1048576) {
        snprintf(err, err_len, "[scheduler.static] batch_size = %lld, max_batched_tokens = %lld: "
                 "expected 1..65536 and 1..1048576", (long long)bs, (long long)toks);
        return PAGODA_ERR_INVALID;
    }
    stat_sched *s = calloc(1, sizeof(*s));
    if (!s) return PAGODA_ERR_NOMEM;
    s->batch = calloc((size_t)bs, sizeof(uint64_t));
    if (!s->batch) {
        free(s);
        return PAGODA_ERR_NOMEM;
    }
    s->host = host;
    s->batch_size = (int32_t)bs;
    s->max_tokens = (int32_t)toks;
    *ctx = s;
    return PAGODA_OK;
}

static void stat_destroy(void *ctx)
{
    stat_sched *s = ctx;
    if (!s) return;
    sc_scratch_free(&s->x);
    free(s->batch);
    free(s);
}

static int stat_limits(void *ctx, int32_t *max_num_seqs, int32_t *max_batched_tokens)
{
    stat_sched *s = ctx;
    *max_num_seqs = s->batch_size;
    *max_batched_tokens = s->max_tokens;
    return PAGODA_OK;
}

static bool in_batch(const stat_sched *s, uint64_t id)
{
    for (int32_t i = 0; i < s->n_batch; i++)
        if (s->batch[i] == id) return true;
    return false;
}

static void drop_member(stat_sched *s, int32_t i)
{
    s->batch[i] = s->batch[--s->n_batch];
}

/* Members the engine no longer lists have finished; this keeps the batch
 * right even when on_finish was not called. */
static void prune_batch(stat_sched *s, const pagoda_sched_env *env)
{
    for (int32_t i = 0; i < s->n_batch;) {
        bool live = false;
        for (int32_t j = 0; !live && j < env->n_running; j++) live = env->running[j]->id == s->batch[i];
        for (int32_t j = 0; !live && j < env->n_waiting; j++) live = env->waiting[j]->id == s->batch[i];
        if (live) i++;
        else drop_member(s, i);
    }
}

static int stat_schedule(void *ctx, const pagoda_sched_env *env)
{
    stat_sched *s = ctx;
    sc_step st;
    prune_batch(s, env);
    int rc = sc_begin(&st, &s->x, env, s->batch_size, s->max_tokens, s->max_tokens, true, 0);
    if (rc == PAGODA_OK) rc = sc_copy_running(&s->x, env);
    if (rc == PAGODA_OK) rc = sc_plan_in_order(&st, s->x.a, env->n_running);
    if (rc != PAGODA_OK) return rc;
    if (st.preempted_for_space) return sc_flush(&st);

    /* A new batch when none is in flight, else members preempted earlier. */
    bool new_batch = s->n_batch == 0;
    int32_t n_new = 0;
    rc = sc_grow_array(&s->x.b, &s->x.cap_b, env->n_waiting);
    if (rc != PAGODA_OK) return rc;
    for (int32_t i = 0; i < env->n_waiting; i++) {
        pagoda_sched_seq *w = env->waiting[i];
        if (w->state != PAGODA_SEQ_WAITING) continue;
        if (new_batch ? s->n_batch >= s->batch_size : !in_batch(s, w->id)) continue;
        if (st.seats <= 0) break;
        rc = env->admit(env->opaque, w->id);
        if (rc == PAGODA_ERR_NOSPACE) break;
        if (rc != PAGODA_OK) return rc;
        st.seats--;
        if (new_batch) s->batch[s->n_batch++] = w->id;
        s->x.b[n_new++] = w;
    }
    /* Prefill what the budget allows now; the rest of the batch holds its
     * blocks and is planned with the running ones in the next steps. */
    rc = sc_plan_in_order(&st, s->x.b, n_new);
    if (rc != PAGODA_OK) return rc;
    return sc_flush(&st);
}

static void stat_on_finish(void *ctx, uint64_t seq_id)
{
    stat_sched *s = ctx;
    for (int32_t i = 0; i < s->n_batch; i++)
        if (s->batch[i] == seq_id) {
            drop_member(s, i);
            return;
        }
}

static const pagoda_scheduler_ops stat_ops = {
    .struct_size = sizeof(pagoda_scheduler_ops),
    .limits = stat_limits,
    .schedule = stat_schedule,
    .on_arrival = NULL,
    .on_finish = stat_on_finish,
};

static const pagoda_plugin_desc stat_desc = {
    PAGODA_DESC_HEADER(PAGODA_KIND_SCHEDULER),
    .name = "static",
    .version = "1.0",
    .description = "baseline static batching: a batch is admitted together and runs until all of it finished",
    .config_keys = stat_keys,
    .probe = NULL,
    .create = stat_create,
    .destroy = stat_destroy,
    .ops = &stat_ops,
};

PAGODA_PLUGIN(stat_desc)
