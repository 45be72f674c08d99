/*
 * sched_common.c: the definitions behind sched_common.h (the step
 * bookkeeping the scheduler plugins share). Not for: any admission policy.
 */
#include "sched_common.h"

int sc_grow_array(pagoda_sched_seq ***arr, int32_t *cap, int32_t n)
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

void sc_scratch_free(sc_scratch *x)
{
    free(x->plan);
    free(x->a);
    free(x->b);
    memset(x, 0, sizeof(*x));
}

int sc_begin(sc_step *st, sc_scratch *x, const pagoda_sched_env *env, int32_t max_seqs,
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

int32_t sc_chunk_for(const sc_step *st, int32_t remaining)
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

int32_t sc_chunk(const sc_step *st, const pagoda_sched_seq *s)
{
    return sc_chunk_for(st, s->n_tokens - s->n_computed);
}

void sc_add(sc_step *st, pagoda_sched_seq *s, int32_t n)
{
    st->plan[st->n_plan++] = (sc_entry){.s = s, .n = n};
    st->budget -= n;
    if (st->budget < 0) st->budget = 0; /* a lone oversize prompt */
}

int sc_preempt(sc_step *st, pagoda_sched_seq *s)
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

int sc_plan_in_order(sc_step *st, pagoda_sched_seq **order, int32_t n)
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

int32_t sc_remaining_if_admitted(const sc_step *st, const pagoda_sched_seq *w)
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

int sc_flush(sc_step *st)
{
    for (int32_t i = 0; i < st->n_plan; i++) {
        if (st->plan[i].s->state != PAGODA_SEQ_RUNNING) continue;
        int rc = st->env->plan(st->env->opaque, st->plan[i].s->id, st->plan[i].n);
        if (rc != PAGODA_OK) return rc;
    }
    return PAGODA_OK;
}

int sc_copy_running(sc_scratch *x, const pagoda_sched_env *env)
{
    int rc = sc_grow_array(&x->a, &x->cap_a, env->n_running);
    if (rc != PAGODA_OK) return rc;
    if (env->n_running) memcpy(x->a, env->running, (size_t)env->n_running * sizeof(*x->a));
    return PAGODA_OK;
}

int sc_cmp_priority(const void *pa, const void *pb)
{
    const pagoda_sched_seq *a = *(pagoda_sched_seq *const *)pa, *b = *(pagoda_sched_seq *const *)pb;
    if (a->priority != b->priority) return a->priority < b->priority ? -1 : 1;
    if (a->arrival != b->arrival) return a->arrival < b->arrival ? -1 : 1;
    return 0;
}

int32_t sc_hard_tokens(const pagoda_host *h, int32_t max_tokens, bool chunked)
{
    if (chunked || !h->engine_config) return max_tokens;
    const char *v = h->engine_config(h, "max_seq_len");
    long long msl = v ? strtoll(v, NULL, 10) : 0;
    if (msl > max_tokens && msl < (1LL << 30)) return (int32_t)msl;
    return max_tokens;
}

int sc_batching_create(const pagoda_host *host, const char *section, void **ctx, char *err,
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

void sc_batching_destroy(void *ctx)
{
    sc_batching *b = ctx;
    if (!b) return;
    sc_scratch_free(&b->x);
    free(b);
}

int sc_batching_limits(void *ctx, int32_t *max_num_seqs, int32_t *max_batched_tokens)
{
    sc_batching *b = ctx;
    *max_num_seqs = b->max_seqs;
    *max_batched_tokens = b->hard_tokens;
    return PAGODA_OK;
}

int sc_batching_begin(sc_step *st, sc_batching *b, const pagoda_sched_env *env)
{
    return sc_begin(st, &b->x, env, b->max_seqs, b->max_tokens, b->hard_tokens, b->chunked, b->long_prefill);
}
