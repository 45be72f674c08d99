/*
 * engine_submit.c: request intake, the [any thread] side of the engine:
 * request defaults, validating a request, tokenizing its prompt on the
 * caller's thread, building its sequence and sampler, and the inbox and
 * cancel list it is handed over through (plus the engine thread's end of
 * the inbox, engine_take_inbox). Not for: scheduling or running a request
 * (engine_step.c), its events (engine_events.c), or the engine's life
 * (engine.c).
 */
#include "engine_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "tokenizer.h"

void engine_seq_free(seq *q)
{
    if (!q) return;
    free(q->tokens);
    for (int i = 0; i < q->n_stop; i++) free(q->stop[i]);
    free(q->stop);
    free(q->stop_ids);
    free(q->cache_salt);
    engine_constraint_release(q);
    engine_spec_release(q);
    if (q->sampler) pagoda_sampler_free(q->sampler);
    free(q->out);
    free(q);
}

void pagoda_engine_request_defaults(const pagoda_engine *e, pagoda_request *r)
{
    memset(r, 0, sizeof *r);
    r->struct_size = sizeof *r;
    r->add_special = true;
    r->max_tokens = 0; /* not given: default_max_tokens, capped by the context */
    r->temperature = e ? e->opts.temperature : 1.0f;
    r->top_k = e ? e->opts.top_k : 0;
    r->top_p = e && e->opts.top_p > 0 ? e->opts.top_p : 1.0f;
    r->min_p = e ? e->opts.min_p : 0.0f;
    r->repetition_penalty = 1.0f;
    r->logprobs = -1;
    r->prompt_logprobs = -1;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

int pagoda_engine_submit(pagoda_engine *e, const pagoda_request *req_in, pagoda_event_cb cb,
                         void *user, uint64_t *id, char *err, size_t err_len)
{
    pagoda_request req;
    bool reserved = false; /* this request holds a place in n_live (see below) */
    pagoda_engine_request_defaults(e, &req);
    memcpy(&req, req_in, req_in->struct_size < sizeof req ? req_in->struct_size : sizeof req);
    if (!cb) { ERR("no event callback"); return PAGODA_ERR_INVALID; }
    if (!(req.temperature >= 0 && req.temperature <= 100)) {
        ERR("temperature %g is out of range (0 to 100)", req.temperature);
        return PAGODA_ERR_INVALID;
    }
    if (!(req.top_p > 0 && req.top_p <= 1)) { ERR("top_p %g must be in (0, 1]", req.top_p); return PAGODA_ERR_INVALID; }
    if (!(req.min_p >= 0 && req.min_p <= 1)) { ERR("min_p %g must be in [0, 1]", req.min_p); return PAGODA_ERR_INVALID; }
    if (!(req.repetition_penalty > 0 && req.repetition_penalty <= 10)) {
        ERR("repetition_penalty %g must be in (0, 10]", req.repetition_penalty);
        return PAGODA_ERR_INVALID;
    }
    if (!(fabsf(req.presence_penalty) <= 2 && fabsf(req.frequency_penalty) <= 2)) {
        ERR("presence_penalty and frequency_penalty must be in [-2, 2]");
        return PAGODA_ERR_INVALID;
    }
    if (req.n_stop < 0 || req.n_stop > 64 || req.n_stop_token_ids < 0 || req.n_stop_token_ids > 64) {
        ERR("at most 64 stop strings and 64 stop token ids");
        return PAGODA_ERR_INVALID;
    }
    if (req.logprobs > PAGODA_MAX_TOP_LOGPROBS) {
        ERR("logprobs %d is out of range (0 to %d)", req.logprobs, PAGODA_MAX_TOP_LOGPROBS);
        return PAGODA_ERR_INVALID;
    }
    if (req.prompt_logprobs < -1 || req.prompt_logprobs > PAGODA_MAX_TOP_LOGPROBS) {
        ERR("prompt_logprobs %d is out of range (-1 off, 0 to %d)", req.prompt_logprobs,
            PAGODA_MAX_TOP_LOGPROBS);
        return PAGODA_ERR_INVALID;
    }
    if (req.prompt_logprobs_from < 0) {
        ERR("prompt_logprobs_from %d must be >= 0", req.prompt_logprobs_from);
        return PAGODA_ERR_INVALID;
    }
    const pagoda_tokenizer *tok = e->model->tok;
    int32_t n_vocab = e->model->hp.n_vocab;
    int32_t ctx = e->opts.max_seq_len;

    seq *q = calloc(1, sizeof *q);
    if (!q) { ERR("out of memory"); return PAGODA_ERR_NOMEM; }
    int st = PAGODA_ERR_NOMEM;
    /* tokenize on the caller's thread */
    int32_t n = 0;
    if (req.prompt) {
        int32_t guess = (int32_t)(req.prompt_len + 8);
        q->tokens = malloc(sizeof(int32_t) * (size_t)guess);
        if (!q->tokens) goto nomem;
        st = pagoda_tokenize(tok, req.prompt, req.prompt_len, req.add_special, req.parse_special,
                             q->tokens, guess, &n);
        if (st == PAGODA_OK && n > guess) {
            free(q->tokens);
            q->tokens = malloc(sizeof(int32_t) * (size_t)n);
            if (!q->tokens) goto nomem;
            st = pagoda_tokenize(tok, req.prompt, req.prompt_len, req.add_special,
                                 req.parse_special, q->tokens, n, &n);
        }
        if (st) { ERR("the prompt could not be tokenized (%s)", pagoda_status_str(st)); goto fail; }
    } else {
        n = req.n_prompt_tokens;
        if (n < 0 || (n > 0 && !req.prompt_tokens)) { ERR("bad prompt token array"); st = PAGODA_ERR_INVALID; goto fail; }
        bool bos = req.add_special && pagoda_tokenizer_add_bos(tok) && pagoda_tokenizer_bos(tok) >= 0;
        q->tokens = malloc(sizeof(int32_t) * (size_t)(n + 1));
        if (!q->tokens) goto nomem;
        int32_t k = 0;
        if (bos) q->tokens[k++] = pagoda_tokenizer_bos(tok);
        for (int32_t i = 0; i < n; i++) {
            if (req.prompt_tokens[i] < 0 || req.prompt_tokens[i] >= n_vocab) {
                ERR("prompt token %d at index %d is out of range (vocabulary of %d)",
                    req.prompt_tokens[i], i, n_vocab);
                st = PAGODA_ERR_INVALID;
                goto fail;
            }
            q->tokens[k++] = req.prompt_tokens[i];
        }
        n = k;
    }
    /* where the prompt spells a recent reply again, the model's own tokens
     * for it (engine_realign.c): that reply's KV is still cached */
    if (req.prompt && n > 0 && !req.score_only && req.prompt_logprobs < 0) {
        int32_t n_re, swapped;
        int32_t max_n = req.max_tokens > 0 ? ctx - req.max_tokens : ctx - 1;
        int32_t *re = engine_realign(e, q->tokens, n, req.cache_salt, max_n, &n_re, &swapped);
        if (re) {
            free(q->tokens);
            q->tokens = re;
            n = n_re;
        }
    }
    if (n == 0) {
        int32_t bos = pagoda_tokenizer_bos(tok);
        if (bos < 0) { ERR("the prompt is empty and the model has no BOS token to start from"); st = PAGODA_ERR_INVALID; goto fail; }
        q->tokens[0] = bos;  /* tokens has room for at least 1 */
        n = 1;
    }
    if (req.score_only ? n > ctx : n >= ctx) {
        ERR("the prompt has %d tokens but the context is %d tokens (max_seq_len)%s", n, ctx,
            req.score_only ? "" : ": no room to generate");
        st = PAGODA_ERR_INVALID;
        goto fail;
    }
    /* Not given: the configured default, but never more than the context
     * leaves (a long prompt must not fail for a limit the client never set). */
    int32_t max_new = req.max_tokens > 0 ? req.max_tokens : ctx - n;
    if (req.max_tokens <= 0 && e->opts.default_max_tokens > 0 && e->opts.default_max_tokens < max_new)
        max_new = e->opts.default_max_tokens;
    if (req.score_only) max_new = 0;
    if (!req.score_only && req.max_tokens > 0 && (int64_t)n + req.max_tokens > ctx) {
        ERR("the prompt (%d tokens) plus max_tokens (%d) is %lld tokens, more than the context "
            "of %d tokens", n, req.max_tokens, (long long)n + req.max_tokens, ctx);
        st = PAGODA_ERR_INVALID;
        goto fail;
    }
    q->cap = n + max_new + 1;
    int32_t *grown = realloc(q->tokens, sizeof(int32_t) * (size_t)q->cap);
    if (!grown) goto nomem;
    q->tokens = grown;
    q->max_new = max_new;
    q->s.n_prompt = n;
    q->s.n_tokens = n;
    q->s.max_total = n + max_new;
    q->s.priority = req.priority;
    q->s.state = PAGODA_SEQ_WAITING;
    q->cb = cb;
    q->user = user;
    q->ignore_eos = req.ignore_eos;
    q->logprobs = req.logprobs;
    q->trace = req.trace;
    /* a trace shows the 5 best candidates whatever logprobs asked for */
    if (q->trace && q->logprobs < 5) q->logprobs = 5;
    if (req.request_id) snprintf(q->request_id, sizeof q->request_id, "%s", req.request_id);
    q->prompt_logprobs = req.prompt_logprobs;
    q->next_scored = req.prompt_logprobs_from < n ? req.prompt_logprobs_from : n;
    q->score_only = req.score_only;
    if (req.n_stop) {
        q->stop = calloc((size_t)req.n_stop, sizeof(char *));
        if (!q->stop) goto nomem;
        for (int32_t i = 0; i < req.n_stop; i++) {
            if (!req.stop[i] || !req.stop[i][0]) continue;
            q->stop[q->n_stop] = strdup(req.stop[i]);
            if (!q->stop[q->n_stop]) goto nomem;
            size_t l = strlen(req.stop[i]);
            if (l > q->max_stop_len) q->max_stop_len = l;
            q->n_stop++;
        }
    }
    if (req.n_stop_token_ids) {
        q->stop_ids = malloc(sizeof(int32_t) * (size_t)req.n_stop_token_ids);
        if (!q->stop_ids) goto nomem;
        memcpy(q->stop_ids, req.stop_token_ids, sizeof(int32_t) * (size_t)req.n_stop_token_ids);
        q->n_stop_ids = req.n_stop_token_ids;
    }
    q->cache_salt = dup_or_null(req.cache_salt);
    if (req.cache_salt && !q->cache_salt) goto nomem;
    /* a spec is compiled here, on the caller's thread: a bad one is this
     * call's refusal, and its compile time never holds up the engine */
    if ((st = engine_constraint_attach(e, q, &req, err, err_len)) != PAGODA_OK) goto fail;
    /* speculative decoding's per-sequence drafter (after the matcher: a
     * constrained request decodes plainly) */
    if ((st = engine_spec_attach(e, q, req.spec_max_draft, err, err_len)) != PAGODA_OK) goto fail;
    /* A scored prompt needs the logits of every position it reports, and a
     * cached prefix has none: such a request is admitted under a salt of its
     * own (so it finds no cached block) and never commits its blocks (so it
     * leaves none behind for others; see engine_step.c). */
    if (q->prompt_logprobs >= 0) {
        static uint64_t score_no;
        char salt[64];
        snprintf(salt, sizeof salt, "pagoda:scored-prompt:%llu",
                 (unsigned long long)__atomic_add_fetch(&score_no, 1, __ATOMIC_RELAXED));
        free(q->cache_salt);
        q->cache_salt = strdup(salt);
        if (!q->cache_salt) goto nomem;
    }

    pthread_mutex_lock(&e->mu);
    if (e->stopping) {
        pthread_mutex_unlock(&e->mu);
        ERR("the server is shutting down");
        st = PAGODA_ERR_STATE;
        goto fail;
    }
    if (e->n_live >= e->opts.max_queue + e->max_num_seqs) {
        int32_t live = e->n_live;
        pthread_mutex_unlock(&e->mu);
        ERR("the queue is full (%d requests; max_queue = %d)", live, e->opts.max_queue);
        st = PAGODA_ERR_NOSPACE;
        goto fail;
    }
    /* The place is taken here, under the same lock as the check: two
     * submits racing between the check and the enqueue below would both
     * pass it (integ_http_server saw 2 waiting with max_queue = 1). */
    e->n_live++;
    reserved = true;
    q->s.id = e->next_id++;
    q->s.arrival = e->next_arrival++;
    q->t_arrival = engine_now_s();
    q->s.arrival_time = q->t_arrival;
    uint64_t seed = req.has_seed ? req.seed
                    : e->opts.seed ? e->opts.seed ^ (q->s.id * 0x9E3779B97F4A7C15ull)
                                   : ((uint64_t)time(NULL) << 20) ^ (q->s.id * 0x9E3779B97F4A7C15ull) ^ (uint64_t)(uintptr_t)q;
    pthread_mutex_unlock(&e->mu);

    pagoda_sampler_params sp = {.temperature = req.temperature, .top_k = req.top_k,
                                .top_p = req.top_p, .min_p = req.min_p,
                                .repetition_penalty = req.repetition_penalty,
                                .presence_penalty = req.presence_penalty,
                                .frequency_penalty = req.frequency_penalty,
                                .penalty_last_n = 0, .seed = seed};
    q->sampler = pagoda_sampler_new(&sp, n_vocab);
    if (!q->sampler) goto nomem;
    for (int32_t i = 0; i < n; i++) pagoda_sampler_accept(q->sampler, q->tokens[i], true);

    pthread_mutex_lock(&e->mu);
    if (e->stopping) {
        pthread_mutex_unlock(&e->mu);
        ERR("the server is shutting down");
        st = PAGODA_ERR_STATE;
        goto fail;
    }
    if (e->inbox_tail) e->inbox_tail->next = q; else e->inbox_head = q;
    e->inbox_tail = q;
    e->n_inbox++;
    *id = q->s.id;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return PAGODA_OK;
nomem:
    ERR("out of memory");
    st = PAGODA_ERR_NOMEM;
fail:
    if (reserved) {
        pthread_mutex_lock(&e->mu);
        if (--e->n_live == 0) pthread_cond_broadcast(&e->idle_cv);
        pthread_mutex_unlock(&e->mu);
    }
    engine_seq_free(q);
    return st;
}

int pagoda_engine_cancel(pagoda_engine *e, uint64_t id)
{
    pthread_mutex_lock(&e->mu);
    if (id == 0 || id >= e->next_id) {
        pthread_mutex_unlock(&e->mu);
        return PAGODA_ERR_NOT_FOUND;
    }
    if (e->n_cancels == e->cap_cancels) {
        int32_t nc = e->cap_cancels ? e->cap_cancels * 2 : 16;
        uint64_t *p = realloc(e->cancels, sizeof(uint64_t) * (size_t)nc);
        if (!p) { pthread_mutex_unlock(&e->mu); return PAGODA_ERR_NOMEM; }
        e->cancels = p;
        e->cap_cancels = nc;
    }
    e->cancels[e->n_cancels++] = id;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return PAGODA_OK;
}

/* Take arrivals and cancels. Called with mu held; returns with it held. */
void engine_take_inbox(pagoda_engine *e)
{
    while (e->inbox_head) {
        seq *q = e->inbox_head;
        e->inbox_head = q->next;
        if (!e->inbox_head) e->inbox_tail = NULL;
        q->next = NULL;
        e->n_inbox--;
        if (e->n_seqs == e->cap_seqs) {
            int32_t nc = e->cap_seqs ? e->cap_seqs * 2 : 64;
            seq **p = realloc(e->seqs, sizeof(seq *) * (size_t)nc);
            seq **r = realloc(e->running, sizeof(seq *) * (size_t)nc);
            if (p) e->seqs = p;
            if (r) e->running = r;
            if (!p || !r) { /* keep it in the inbox; retry next step */
                q->next = e->inbox_head; e->inbox_head = q; if (!e->inbox_tail) e->inbox_tail = q;
                e->n_inbox++;
                return;
            }
            e->cap_seqs = nc;
        }
        e->seqs[e->n_seqs++] = q;
        e->prompt_tokens_total += q->s.n_prompt;
        if (e->metrics) pagoda_metrics_count(e->metrics, PAGODA_COUNTER_PROMPT_TOKENS, q->s.n_prompt);
        if (e->sched->ops.on_arrival) e->sched->ops.on_arrival(e->sched->ctx, &q->s);
        engine_constraint_arrived(e, q);
    }
}
