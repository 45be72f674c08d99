/*
 * engine_constraint.c: structured output in the engine. A request with a
 * spec (JSON Schema, grammar, regex, choice) has it compiled by the
 * constraint plugin on the submitting thread, so a bad spec is the
 * submit's refusal and never reaches the engine thread. At each sampling
 * step the plugin's token mask leaves only the allowed tokens' logits
 * (the rest become -inf) before the sampler's penalties, temperature,
 * top-k and top-p, so every sampling mode draws from the spec's language;
 * the reported logprobs are those of the masked distribution. End tokens
 * (EOS and the other end-of-generation ids, the request's stop ids) keep
 * their logits only where the spec may end; where it may end and nothing
 * else may follow, the request ends at once (finish reason "stop").
 * max_tokens cuts an unfinished output as always (finish reason "length").
 *
 * Masks are prefetched: the next mask depends only on the token just
 * sampled, so as soon as a sequence advances, a worker thread computes
 * its next mask while the engine runs the next forward pass; at sampling
 * time the mask is usually there, and a mask the plugin's caches missed
 * costs the step nothing. The engine waits only for a mask still being
 * made (and makes one itself when the worker has not started it).
 *
 * Not for: compiling or matching (the plugin, pagoda/constraint.h), the
 * request fields (frontends).
 */
#include "engine_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

enum { PM_NONE = 0, PM_QUEUED = 1, PM_RUNNING = 2, PM_DONE = 3 };

static void *prefetch_main(void *arg);

int pagoda_engine_set_constraint(pagoda_engine *e, pagoda_constraint *c)
{
    free(e->cmask);
    free(e->eog_ids);
    e->cmask = NULL;
    e->eog_ids = NULL;
    e->n_eog = 0;
    e->con = c;
    if (!c) return PAGODA_OK;
    if (!e->pm_started) {
        if (pthread_create(&e->pm_thread, NULL, prefetch_main, e)) return PAGODA_ERR_NOMEM;
        e->pm_started = true;
    }
    int32_t V = e->model->hp.n_vocab;
    e->cmask = malloc(sizeof(uint32_t) * (size_t)((V + 31) / 32));
    int32_t n = 0;
    for (int32_t t = 0; t < V; t++) n += pagoda_tokenizer_is_eog(e->model->tok, t);
    e->eog_ids = malloc(sizeof(int32_t) * (size_t)(n + 1));
    if (!e->cmask || !e->eog_ids) return PAGODA_ERR_NOMEM;
    for (int32_t t = 0; t < V; t++)
        if (pagoda_tokenizer_is_eog(e->model->tok, t)) e->eog_ids[e->n_eog++] = t;
    return PAGODA_OK;
}

int pagoda_constraint_check(pagoda_constraint *c, int32_t type, const char *text, size_t len,
                            bool strict, char *err, size_t err_len)
{
    if (!c) {
        snprintf(err, err_len, "structured output is off on this server ([engine] constraint = none)");
        return PAGODA_ERR_UNSUPPORTED;
    }
    pagoda_constraint_spec sp = {.struct_size = sizeof sp, .type = type, .text = text, .len = len,
                                 .strict = strict};
    void *comp = NULL;
    int st = c->ops.compile(c->ctx, &sp, &comp, err, err_len);
    if (st == PAGODA_OK) c->ops.compiled_free(c->ctx, comp);
    return st;
}

int engine_constraint_attach(pagoda_engine *e, seq *q, const pagoda_request *req, char *err,
                             size_t err_len)
{
    if (req->constraint_type == PAGODA_CONSTRAINT_NONE) return PAGODA_OK;
    if (req->constraint_type < PAGODA_CONSTRAINT_JSON_OBJECT ||
        req->constraint_type > PAGODA_CONSTRAINT_CHOICE) {
        ERR("unknown constraint type %d", req->constraint_type);
        return PAGODA_ERR_INVALID;
    }
    if (!e->con) {
        ERR("structured output is off on this server ([engine] constraint = none)");
        return PAGODA_ERR_INVALID;
    }
    if (req->score_only) {
        ERR("a constraint on the output of a request that generates nothing (score_only)");
        return PAGODA_ERR_INVALID;
    }
    pagoda_constraint_spec sp = {.struct_size = sizeof sp, .type = req->constraint_type,
                                 .text = req->constraint, .len = req->constraint_len,
                                 .strict = req->constraint_strict};
    void *comp = NULL;
    err[0] = 0;
    int st = e->con->ops.compile(e->con->ctx, &sp, &comp, err, err_len);
    if (st) {
        if (!err[0]) ERR("the %s spec could not be compiled (%s)",
                         pagoda_constraint_type_name(sp.type), pagoda_status_str(st));
        return st == PAGODA_ERR_NOMEM ? st : PAGODA_ERR_INVALID;
    }
    st = e->con->ops.matcher_new(e->con->ctx, comp, &q->matcher, err, err_len);
    e->con->ops.compiled_free(e->con->ctx, comp);
    if (st) return st;
    q->con = e->con;
    return PAGODA_OK;
}

void pagoda_engine_set_mask_observer(pagoda_engine *e,
                                     void (*fn)(void *user, double seconds, bool prefetched),
                                     void *user)
{
    e->mask_observer = fn;
    e->mask_user = user;
}

/* ------------------------------------------------------------ prefetch */

/* [worker thread] One job at a time: fill the queued sequence's mask. The
 * engine never advances a matcher while its job is queued or running (it
 * waits for it first), so the plugin sees one call per matcher at a time. */
static void *prefetch_main(void *arg)
{
    pagoda_engine *e = arg;
    pthread_mutex_lock(&e->pm_mu);
    for (;;) {
        while (!e->pm_head && !e->pm_stop) pthread_cond_wait(&e->pm_cv, &e->pm_mu);
        if (e->pm_stop) break;
        seq *q = e->pm_head;
        e->pm_head = q->pm_next;
        if (!e->pm_head) e->pm_tail = NULL;
        q->pm_next = NULL;
        q->pm_state = PM_RUNNING;
        pthread_mutex_unlock(&e->pm_mu);
        q->pm_err[0] = 0;
        int st = q->con->ops.fill_mask(q->con->ctx, q->matcher, q->premask, q->pm_err, sizeof q->pm_err);
        pthread_mutex_lock(&e->pm_mu);
        q->pm_status = st;
        q->pm_state = PM_DONE;
        pthread_cond_broadcast(&e->pm_cv);
    }
    pthread_mutex_unlock(&e->pm_mu);
    return NULL;
}

/* Take q out of the queue; with pm_mu held. */
static void unqueue(pagoda_engine *e, seq *q)
{
    seq **pp = &e->pm_head, *prev = NULL;
    while (*pp && *pp != q) {
        prev = *pp;
        pp = &(*pp)->pm_next;
    }
    if (!*pp) return;
    *pp = q->pm_next;
    if (e->pm_tail == q) e->pm_tail = prev;
    q->pm_next = NULL;
}

/* [engine thread] Queue q's next mask (nothing when out of memory: the
 * engine then fills it itself). */
static void prefetch(pagoda_engine *e, seq *q)
{
    if (!q->matcher || !e->pm_started) return;
    if (!q->premask) {
        q->premask = malloc(sizeof(uint32_t) * (size_t)((e->model->hp.n_vocab + 31) / 32));
        if (!q->premask) return;
    }
    pthread_mutex_lock(&e->pm_mu);
    q->pm_engine = e;
    q->pm_state = PM_QUEUED;
    if (e->pm_tail) e->pm_tail->pm_next = q;
    else e->pm_head = q;
    e->pm_tail = q;
    pthread_cond_signal(&e->pm_cv);
    pthread_mutex_unlock(&e->pm_mu);
}

void engine_constraint_arrived(pagoda_engine *e, seq *q) { prefetch(e, q); }

/* Wait for q's job if it runs, drop it if it waits. Returns whether a
 * finished prefetch is there (pm_state DONE). */
static bool settle(pagoda_engine *e, seq *q)
{
    pthread_mutex_lock(&e->pm_mu);
    if (q->pm_state == PM_QUEUED) {
        unqueue(e, q);
        q->pm_state = PM_NONE;
    }
    while (q->pm_state == PM_RUNNING) pthread_cond_wait(&e->pm_cv, &e->pm_mu);
    bool done = q->pm_state == PM_DONE;
    q->pm_state = PM_NONE;
    pthread_mutex_unlock(&e->pm_mu);
    return done;
}

void engine_constraint_release(seq *q)
{
    if (q->pm_engine) settle(q->pm_engine, q);
    if (q->con && q->matcher) q->con->ops.matcher_free(q->con->ctx, q->matcher);
    q->matcher = NULL;
    free(q->premask);
    q->premask = NULL;
}

void engine_constraint_shutdown(pagoda_engine *e)
{
    if (!e->pm_started) return;
    pthread_mutex_lock(&e->pm_mu);
    e->pm_stop = true;
    pthread_cond_broadcast(&e->pm_cv);
    pthread_mutex_unlock(&e->pm_mu);
    pthread_join(e->pm_thread, NULL);
    e->pm_started = false;
}

/* logits[t] = -inf where mask bit t is clear; returns how many are set.
 * A word of all ones or all zeros (the common case on both sides: inside
 * a string nearly everything is allowed, at a structural point nearly
 * nothing) costs one test. Plain C: it is a few microseconds for 262144
 * logits, well under the forward pass. */
static int32_t apply_mask(float *lg, const uint32_t *mask, int32_t V)
{
    int32_t words = (V + 31) / 32, n = 0;
    for (int32_t w = 0; w < words; w++) {
        uint32_t m = mask[w];
        int32_t base = w * 32, end = base + 32 < V ? base + 32 : V;
        if (m == 0xFFFFFFFFu) {
            n += end - base;
            continue;
        }
        if (m == 0) {
            for (int32_t t = base; t < end; t++) lg[t] = -INFINITY;
            continue;
        }
        n += __builtin_popcount(m);
        for (int32_t t = base; t < end; t++)
            if (!(m >> (t - base) & 1u)) lg[t] = -INFINITY;
    }
    return n;
}

int engine_constraint_mask(pagoda_engine *e, seq *q, float *lg, char *err, size_t err_len)
{
    pagoda_constraint *c = q->con;
    int32_t V = e->model->hp.n_vocab;
    /* the end tokens' logits, kept aside: the plugin's mask covers text */
    float ends[128];
    int32_t end_ids[128], n_end = 0;
    for (int32_t i = 0; i < e->n_eog && n_end < 64; i++) end_ids[n_end++] = e->eog_ids[i];
    for (int32_t i = 0; i < q->n_stop_ids && n_end < 128; i++)
        if (q->stop_ids[i] >= 0 && q->stop_ids[i] < V) end_ids[n_end++] = q->stop_ids[i];
    for (int32_t i = 0; i < n_end; i++) ends[i] = lg[end_ids[i]];
    err[0] = 0;
    double t0 = e->mask_observer ? engine_now_s() : 0;
    const uint32_t *mask = e->cmask;
    int st;
    bool pre = settle(e, q);
    if (pre) {
        mask = q->premask;
        st = q->pm_status;
        if (st) snprintf(err, err_len, "%s", q->pm_err);
    } else {
        st = c->ops.fill_mask(c->ctx, q->matcher, e->cmask, err, err_len);
    }
    if (e->mask_observer) e->mask_observer(e->mask_user, engine_now_s() - t0, pre);
    if (st) {
        if (!err[0]) ERR("the constraint engine failed (%s)", pagoda_status_str(st));
        return -1;
    }
    int32_t n_text = apply_mask(lg, mask, V);
    bool complete = c->ops.is_complete(c->ctx, q->matcher);
    if (complete && n_text == 0) return 1;
    if (complete && !q->ignore_eos)
        for (int32_t i = 0; i < n_end; i++) lg[end_ids[i]] = ends[i];
    else
        for (int32_t i = 0; i < n_end; i++) lg[end_ids[i]] = -INFINITY;
    if (n_text == 0 && !complete) {
        ERR("the output cannot go on: no token of this model's vocabulary continues it as the "
            "spec requires");
        return -1;
    }
    return 0;
}

int engine_constraint_advance(pagoda_engine *e, seq *q, int32_t tok, char *err, size_t err_len)
{
    err[0] = 0;
    int st = q->con->ops.advance(q->con->ctx, q->matcher, tok, err, err_len);
    if (st) {
        if (!err[0]) ERR("the constraint engine refused token %d (%s)", tok, pagoda_status_str(st));
        return -1;
    }
    prefetch(e, q); /* the next mask, while the next forward pass runs */
    return 0;
}
