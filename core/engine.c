#define _GNU_SOURCE /* memmem */
/*
 * engine.c: the serving loop of DESIGN.md. submit() and cancel() may be
 * called from any thread; they only touch the inbox under the lock. One
 * engine thread owns everything else: the sequence list, the scheduler and
 * KV policies, the forward pass and the samplers. Callbacks run on the
 * engine thread without the lock held. Not for: HTTP/JSON (frontends) or
 * kernels (backends).
 */
#include "engine.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "metrics.h"
#include "sampler.h"
#include "tokenizer.h"
#include "unicode.h"

#define ERR(...) snprintf(err, err_len, __VA_ARGS__)

typedef struct seq {
    pagoda_sched_seq s;          /* what the scheduler sees; s.id is the request id */
    struct seq *next;            /* inbox / list link */
    pagoda_event_cb cb;
    void *user;
    int32_t *tokens;             /* prompt + generated, [cap] */
    int32_t cap;
    int32_t max_new;             /* max_tokens after clamping */
    int32_t n_cached_first;      /* prefix-cache hit at first admission */
    bool admitted_once;
    bool ignore_eos;
    int32_t logprobs;
    char **stop;
    int32_t n_stop;
    size_t max_stop_len;
    int32_t *stop_ids;
    int32_t n_stop_ids;
    char *cache_salt;
    pagoda_sampler *sampler;
    char *out;                   /* every output byte so far */
    size_t out_len, out_cap, emitted;
    double t_arrival, t_scheduled, t_first, t_last;
    bool cancelled;
    bool finished;
} seq;

struct pagoda_engine {
    pagoda_model *model;
    pagoda_backend *be;
    pagoda_scheduler *sched;
    pagoda_kvcache *kv;
    pagoda_engine_opts opts;
    pagoda_forward fw;
    struct pagoda_metrics *metrics;
    int32_t max_num_seqs, max_batched_tokens;

    pthread_mutex_t mu;
    pthread_cond_t cv;           /* inbox or cancels changed, or stop */
    pthread_cond_t idle_cv;      /* nothing queued or running */
    pthread_t thread;
    bool started, stopping, stopped;
    seq *inbox_head, *inbox_tail;
    int32_t n_inbox;
    uint64_t *cancels;
    int32_t n_cancels, cap_cancels;
    uint64_t next_id, next_arrival;
    int32_t n_live;              /* inbox + seqs, for wait_idle and max_queue */
    int32_t n_waiting_pub, n_running_pub;
    pagoda_kv_stats kv_pub;      /* the KV policy's stats as of the last step */

    /* engine thread only */
    seq **seqs;                  /* live sequences, arrival order */
    int32_t n_seqs, cap_seqs;
    seq **running;               /* admission order */
    int32_t n_running;
    /* per-step scratch */
    int32_t *b_tokens, *b_pos, *b_slots, *logit_rows;
    pagoda_seq_view *views;
    seq **plan_seq;
    int32_t *plan_n;
    int32_t n_plan;
    float *logits;
    int32_t *top_ids;
    float *top_lp;
    uint64_t step_no;
    void (*step_hook)(void *, pagoda_engine *);
    void *step_user;

    /* counters (under mu) */
    int64_t prompt_tokens_total, generation_tokens_total, finished_total, preemptions_total;
    int64_t invariant_failures;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------ lifecycle */

static void seq_free(seq *q)
{
    if (!q) return;
    free(q->tokens);
    for (int i = 0; i < q->n_stop; i++) free(q->stop[i]);
    free(q->stop);
    free(q->stop_ids);
    free(q->cache_salt);
    if (q->sampler) pagoda_sampler_free(q->sampler);
    free(q->out);
    free(q);
}

int pagoda_engine_create(pagoda_model *m, pagoda_backend *be, pagoda_scheduler *sched,
                         pagoda_kvcache *kv, const pagoda_engine_opts *opts,
                         pagoda_engine **out, char *err, size_t err_len)
{
    *out = NULL;
    pagoda_engine *e = calloc(1, sizeof *e);
    if (!e) { ERR("out of memory"); return PAGODA_ERR_NOMEM; }
    e->model = m;
    e->be = be;
    e->sched = sched;
    e->kv = kv;
    e->opts = *opts;
    e->next_id = 1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    pthread_cond_init(&e->idle_cv, NULL);
    int st;
    if (e->opts.max_seq_len <= 0 || e->opts.max_seq_len > m->hp.n_ctx_train)
        e->opts.max_seq_len = m->hp.n_ctx_train;
    if (e->opts.block_size <= 0) e->opts.block_size = 16;
    if (e->opts.max_queue <= 0) e->opts.max_queue = 1024;
    if (e->opts.default_max_tokens < 0) e->opts.default_max_tokens = 0;

    st = sched->ops.limits(sched->ctx, &e->max_num_seqs, &e->max_batched_tokens);
    if (st || e->max_num_seqs <= 0 || e->max_batched_tokens <= 0) {
        ERR("scheduler %s gave no valid limits (max_num_seqs %d, max_batched_tokens %d)",
            sched->name, e->max_num_seqs, e->max_batched_tokens);
        st = PAGODA_ERR_INVALID;
        goto fail;
    }
    if (e->opts.n_blocks <= 0) {
        ERR("the KV pool has no blocks");
        st = PAGODA_ERR_INVALID;
        goto fail;
    }
    st = pagoda_forward_init(&e->fw, m, be, e->max_batched_tokens, e->max_num_seqs,
                             e->opts.n_blocks, e->opts.block_size, e->opts.kv_dtype, err, err_len);
    if (st) goto fail;
    st = kv->ops.init(kv->ctx, e->opts.n_blocks, e->opts.block_size, e->opts.max_seq_len);
    if (st) {
        ERR("KV policy %s refused init(%d blocks of %d)", kv->name, e->opts.n_blocks,
            e->opts.block_size);
        goto fail;
    }
    e->kv_pub.struct_size = sizeof e->kv_pub;
    kv->ops.stats(kv->ctx, &e->kv_pub);
    int32_t T = e->max_batched_tokens, S = e->max_num_seqs, V = m->hp.n_vocab;
    e->b_tokens = malloc(sizeof(int32_t) * (size_t)T);
    e->b_pos = malloc(sizeof(int32_t) * (size_t)T);
    e->b_slots = malloc(sizeof(int32_t) * (size_t)T);
    e->logit_rows = malloc(sizeof(int32_t) * (size_t)S);
    e->views = malloc(sizeof(pagoda_seq_view) * (size_t)S);
    e->plan_seq = malloc(sizeof(seq *) * (size_t)S);
    e->plan_n = malloc(sizeof(int32_t) * (size_t)S);
    e->logits = malloc(sizeof(float) * (size_t)S * (size_t)V);
    e->top_ids = malloc(sizeof(int32_t) * PAGODA_MAX_TOP_LOGPROBS);
    e->top_lp = malloc(sizeof(float) * PAGODA_MAX_TOP_LOGPROBS);
    if (!e->b_tokens || !e->b_pos || !e->b_slots || !e->logit_rows || !e->views ||
        !e->plan_seq || !e->plan_n || !e->logits || !e->top_ids || !e->top_lp) {
        ERR("out of memory for the step buffers");
        st = PAGODA_ERR_NOMEM;
        goto fail;
    }
    *out = e;
    return PAGODA_OK;
fail:
    pagoda_engine_free(e);
    return st;
}

void pagoda_engine_set_metrics(pagoda_engine *e, struct pagoda_metrics *m) { e->metrics = m; }

void pagoda_engine_set_step_hook(pagoda_engine *e, void (*hook)(void *, pagoda_engine *), void *user)
{
    e->step_hook = hook;
    e->step_user = user;
}

static void *engine_main(void *arg);

int pagoda_engine_start(pagoda_engine *e)
{
    if (e->started) return PAGODA_ERR_STATE;
    if (pthread_create(&e->thread, NULL, engine_main, e)) return PAGODA_ERR_NOMEM;
    e->started = true;
    return PAGODA_OK;
}

void pagoda_engine_stop(pagoda_engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->stopping = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->started && !e->stopped) {
        pthread_join(e->thread, NULL);
        e->stopped = true;
    }
}

void pagoda_engine_free(pagoda_engine *e)
{
    if (!e) return;
    pagoda_engine_stop(e);
    /* requests still in the inbox when the thread never ran */
    for (seq *q = e->inbox_head, *n; q; q = n) { n = q->next; seq_free(q); }
    for (int i = 0; i < e->n_seqs; i++) seq_free(e->seqs[i]);
    pagoda_forward_free(&e->fw);
    free(e->seqs); free(e->running); free(e->cancels);
    free(e->b_tokens); free(e->b_pos); free(e->b_slots); free(e->logit_rows);
    free(e->views); free(e->plan_seq); free(e->plan_n); free(e->logits);
    free(e->top_ids); free(e->top_lp);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    pthread_cond_destroy(&e->idle_cv);
    free(e);
}

/* --------------------------------------------------------------- submit */

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
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

int pagoda_engine_submit(pagoda_engine *e, const pagoda_request *req_in, pagoda_event_cb cb,
                         void *user, uint64_t *id, char *err, size_t err_len)
{
    pagoda_request req;
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
    if (n == 0) {
        int32_t bos = pagoda_tokenizer_bos(tok);
        if (bos < 0) { ERR("the prompt is empty and the model has no BOS token to start from"); st = PAGODA_ERR_INVALID; goto fail; }
        q->tokens[0] = bos;  /* tokens has room for at least 1 */
        n = 1;
    }
    if (n >= ctx) {
        ERR("the prompt has %d tokens but the context is %d tokens (max_seq_len): no room to "
            "generate", n, ctx);
        st = PAGODA_ERR_INVALID;
        goto fail;
    }
    /* Not given: the configured default, but never more than the context
     * leaves (a long prompt must not fail for a limit the client never set). */
    int32_t max_new = req.max_tokens > 0 ? req.max_tokens : ctx - n;
    if (req.max_tokens <= 0 && e->opts.default_max_tokens > 0 && e->opts.default_max_tokens < max_new)
        max_new = e->opts.default_max_tokens;
    if (req.max_tokens > 0 && (int64_t)n + req.max_tokens > ctx) {
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
    q->s.id = e->next_id++;
    q->s.arrival = e->next_arrival++;
    q->t_arrival = now_s();
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
    e->n_live++;
    *id = q->s.id;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return PAGODA_OK;
nomem:
    ERR("out of memory");
    st = PAGODA_ERR_NOMEM;
fail:
    seq_free(q);
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

/* ------------------------------------------------------------- events */

static void emit_text(pagoda_engine *e, seq *q, size_t upto, int32_t token, float logprob,
                      int32_t n_top)
{
    pagoda_event ev = {.struct_size = sizeof ev, .id = q->s.id, .type = PAGODA_EVENT_TOKEN,
                       .text = q->out + q->emitted, .text_len = upto - q->emitted,
                       .token = token, .logprob = logprob};
    pagoda_top_logprob top[PAGODA_MAX_TOP_LOGPROBS];
    for (int32_t i = 0; i < n_top; i++) top[i] = (pagoda_top_logprob){e->top_ids[i], e->top_lp[i]};
    ev.n_top = n_top;
    ev.top = n_top ? top : NULL;
    q->emitted = upto;
    q->cb(q->user, &ev);
}

/* End a sequence: release its KV, tell the scheduler, send the FINAL. The
 * caller removes it from the lists. */
static void finish(pagoda_engine *e, seq *q, int reason, const char *error)
{
    if (q->finished) return;
    q->finished = true;
    if (q->s.state == PAGODA_SEQ_RUNNING) e->kv->ops.release(e->kv->ctx, q->s.id);
    q->s.state = PAGODA_SEQ_WAITING;
    if (e->sched->ops.on_finish) e->sched->ops.on_finish(e->sched->ctx, q->s.id);
    double t = now_s();
    int32_t n_gen = q->s.n_tokens - q->s.n_prompt;
    /* text held back for a possible stop string is released unless a stop
     * string matched (then out_len was cut at the match) */
    if (q->emitted < q->out_len && reason != PAGODA_FINISH_CANCELLED && reason != PAGODA_FINISH_ERROR)
        emit_text(e, q, q->out_len, -1, 0, 0);
    pagoda_event ev = {.struct_size = sizeof ev, .id = q->s.id, .type = PAGODA_EVENT_FINAL,
                       .text = "", .token = -1, .finish_reason = reason, .error = error};
    ev.usage.prompt_tokens = q->s.n_prompt;
    ev.usage.completion_tokens = n_gen;
    ev.usage.cached_tokens = q->n_cached_first;
    double ta = q->t_arrival;
    ev.timings.queue_ms = q->t_scheduled > 0 ? (q->t_scheduled - ta) * 1e3 : (t - ta) * 1e3;
    ev.timings.ttft_ms = q->t_first > 0 ? (q->t_first - ta) * 1e3 : 0;
    ev.timings.total_ms = (t - ta) * 1e3;
    ev.timings.tpot_ms = n_gen > 1 ? (q->t_last - q->t_first) * 1e3 / (n_gen - 1) : 0;
    ev.timings.n_preemptions = q->s.n_preemptions;
    if (e->metrics) {
        pagoda_metrics_observe(e->metrics, PAGODA_HIST_E2E, t - ta);
        pagoda_metrics_finished(e->metrics, reason);
    }
    pthread_mutex_lock(&e->mu);
    e->finished_total++;
    pthread_mutex_unlock(&e->mu);
    q->cb(q->user, &ev);
}

/* Append a sampled token's text; stream what is safe; true if a stop
 * string ended the sequence (then the output is cut before it). */
static bool push_text(pagoda_engine *e, seq *q, int32_t token, float logprob, int32_t n_top)
{
    size_t len = 0;
    const char *bytes = pagoda_token_bytes(e->model->tok, token, false, &len);
    if (q->out_len + len + 1 > q->out_cap) {
        size_t nc = (q->out_cap ? q->out_cap * 2 : 256) + len;
        char *p = realloc(q->out, nc);
        if (!p) return false;
        q->out = p;
        q->out_cap = nc;
    }
    memcpy(q->out + q->out_len, bytes, len);
    q->out_len += len;
    q->out[q->out_len] = 0;
    /* a stop string anywhere in the not-yet-emitted tail (it may have
     * started in text held back from earlier tokens) */
    size_t from = q->emitted;
    for (int i = 0; i < q->n_stop; i++) {
        const char *hit = memmem(q->out + from, q->out_len - from, q->stop[i], strlen(q->stop[i]));
        if (hit) {
            q->out_len = (size_t)(hit - q->out);
            emit_text(e, q, q->out_len, token, logprob, n_top);
            return true;
        }
    }
    /* hold back a suffix that could begin a stop string, and a partial
     * UTF-8 character */
    size_t safe = q->out_len;
    for (int i = 0; i < q->n_stop; i++) {
        size_t sl = strlen(q->stop[i]);
        for (size_t k = sl - 1; k > 0; k--) {
            if (k <= q->out_len - from && !memcmp(q->out + q->out_len - k, q->stop[i], k)) {
                if (q->out_len - k < safe) safe = q->out_len - k;
                break;
            }
        }
    }
    safe = from + pagoda_utf8_complete_prefix(q->out + from, safe - from);
    emit_text(e, q, safe, token, logprob, n_top);
    return false;
}

/* ------------------------------------------------------- engine thread */

static seq *find_seq(pagoda_engine *e, uint64_t id)
{
    for (int32_t i = 0; i < e->n_seqs; i++)
        if (e->seqs[i]->s.id == id) return e->seqs[i];
    return NULL;
}

static int env_admit(void *opaque, uint64_t id)
{
    pagoda_engine *e = opaque;
    seq *q = find_seq(e, id);
    if (!q || q->s.state != PAGODA_SEQ_WAITING) return PAGODA_ERR_STATE;
    pagoda_kv_seq ks = {.id = id, .tokens = q->tokens, .n_tokens = q->s.n_tokens,
                        .max_total = q->s.max_total, .cache_salt = q->cache_salt};
    int32_t cached = 0;
    int st = e->kv->ops.admit(e->kv->ctx, &ks, &cached);
    if (st) return st;
    if (cached < 0 || cached >= q->s.n_tokens) cached = 0;
    q->s.state = PAGODA_SEQ_RUNNING;
    q->s.n_computed = cached;
    if (!q->admitted_once) {
        q->admitted_once = true;
        q->n_cached_first = cached < q->s.n_prompt ? cached : q->s.n_prompt;
    }
    e->running[e->n_running++] = q;
    return PAGODA_OK;
}

static int env_grow(void *opaque, uint64_t id, int32_t n_total)
{
    pagoda_engine *e = opaque;
    seq *q = find_seq(e, id);
    if (!q || q->s.state != PAGODA_SEQ_RUNNING) return PAGODA_ERR_STATE;
    if (n_total > q->s.n_tokens) n_total = q->s.n_tokens;
    return e->kv->ops.grow(e->kv->ctx, id, n_total);
}

/* Takes q out of arr[0..*n), keeping the order (admission order matters
 * to the schedulers); nothing when q is not there. */
static void drop_seq(seq **arr, int32_t *n, const seq *q)
{
    for (int32_t i = 0; i < *n; i++) {
        if (arr[i] != q) continue;
        memmove(&arr[i], &arr[i + 1], sizeof(seq *) * (size_t)(*n - i - 1));
        (*n)--;
        return;
    }
}

/* Takes entry i out of the step's plan, keeping the order. */
static void drop_plan_entry(pagoda_engine *e, int32_t i)
{
    memmove(&e->plan_seq[i], &e->plan_seq[i + 1], sizeof(seq *) * (size_t)(e->n_plan - i - 1));
    memmove(&e->plan_n[i], &e->plan_n[i + 1], sizeof(int32_t) * (size_t)(e->n_plan - i - 1));
    e->n_plan--;
}

static int env_preempt(void *opaque, uint64_t id)
{
    pagoda_engine *e = opaque;
    seq *q = find_seq(e, id);
    if (!q || q->s.state != PAGODA_SEQ_RUNNING) return PAGODA_ERR_STATE;
    e->kv->ops.release(e->kv->ctx, id);
    q->s.state = PAGODA_SEQ_WAITING;
    q->s.n_computed = 0;
    q->s.n_preemptions++;
    drop_seq(e->running, &e->n_running, q);
    /* a planned entry for it is dropped */
    for (int32_t i = 0; i < e->n_plan; i++) {
        if (e->plan_seq[i] == q) {
            drop_plan_entry(e, i);
            break;
        }
    }
    pthread_mutex_lock(&e->mu);
    e->preemptions_total++;
    pthread_mutex_unlock(&e->mu);
    if (e->metrics) pagoda_metrics_count(e->metrics, PAGODA_COUNTER_PREEMPTIONS, 1);
    return PAGODA_OK;
}

static int32_t env_blocks_needed(void *opaque, uint64_t id)
{
    pagoda_engine *e = opaque;
    seq *q = find_seq(e, id);
    if (!q) return 0;
    pagoda_kv_seq ks = {.id = id, .tokens = q->tokens, .n_tokens = q->s.n_tokens,
                        .max_total = q->s.max_total, .cache_salt = q->cache_salt};
    if (e->kv->ops.blocks_needed) return e->kv->ops.blocks_needed(e->kv->ctx, &ks);
    return (q->s.n_tokens + e->opts.block_size - 1) / e->opts.block_size;
}

static int32_t env_free_blocks(void *opaque)
{
    pagoda_engine *e = opaque;
    pagoda_kv_stats st = {.struct_size = sizeof st};
    e->kv->ops.stats(e->kv->ctx, &st);
    return (int32_t)(st.free_blocks + st.cached_blocks);
}

static int env_plan(void *opaque, uint64_t id, int32_t n_tokens)
{
    pagoda_engine *e = opaque;
    seq *q = find_seq(e, id);
    if (!q || q->s.state != PAGODA_SEQ_RUNNING || n_tokens < 1 ||
        q->s.n_computed + n_tokens > q->s.n_tokens)
        return PAGODA_ERR_INVALID;
    int32_t total = 0;
    for (int32_t i = 0; i < e->n_plan; i++) {
        if (e->plan_seq[i] == q) return PAGODA_ERR_INVALID;
        total += e->plan_n[i];
    }
    if (e->n_plan >= e->max_num_seqs || total + n_tokens > e->max_batched_tokens)
        return PAGODA_ERR_NOSPACE;
    e->plan_seq[e->n_plan] = q;
    e->plan_n[e->n_plan] = n_tokens;
    e->n_plan++;
    return PAGODA_OK;
}

static void remove_seq(pagoda_engine *e, seq *q)
{
    drop_seq(e->seqs, &e->n_seqs, q);
    drop_seq(e->running, &e->n_running, q);
    seq_free(q);
    pthread_mutex_lock(&e->mu);
    e->n_live--;
    if (e->n_live == 0) pthread_cond_broadcast(&e->idle_cv);
    pthread_mutex_unlock(&e->mu);
}

static void finish_and_remove(pagoda_engine *e, seq *q, int reason, const char *error)
{
    finish(e, q, reason, error);
    remove_seq(e, q);
}

static void check_invariants(pagoda_engine *e)
{
    pagoda_kv_stats st = {.struct_size = sizeof st};
    if (e->kv->ops.stats(e->kv->ctx, &st)) return;
    bool bad = st.free_blocks + st.used_blocks + st.cached_blocks != st.total_blocks ||
               st.free_blocks < 0 || st.used_blocks < 0 || st.cached_blocks < 0;
    if (e->n_running == 0 && st.used_blocks != 0) bad = true;
    if (bad) {
        pagoda_log(PAGODA_LOG_ERROR,
                   "KV invariant broken after step %llu: free %lld + used %lld + cached %lld != "
                   "total %lld (running %d)", (unsigned long long)e->step_no,
                   (long long)st.free_blocks, (long long)st.used_blocks,
                   (long long)st.cached_blocks, (long long)st.total_blocks, e->n_running);
        pthread_mutex_lock(&e->mu);
        e->invariant_failures++;
        pthread_mutex_unlock(&e->mu);
    }
}

static bool is_stop_token(const pagoda_engine *e, const seq *q, int32_t tok)
{
    for (int32_t i = 0; i < q->n_stop_ids; i++)
        if (q->stop_ids[i] == tok) return true;
    return !q->ignore_eos && pagoda_tokenizer_is_eog(e->model->tok, tok);
}

/* Take arrivals and cancels. Called with mu held; returns with it held. */
static void take_inbox(pagoda_engine *e)
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
    }
}

/* One step: schedule, run, sample. Returns false when there was nothing to do. */
static bool step(pagoda_engine *e)
{
    char err[512];
    int32_t n_wait = 0;
    seq **waiting = malloc(sizeof(seq *) * (size_t)(e->n_seqs ? e->n_seqs : 1));
    if (!waiting) return false;
    for (int32_t i = 0; i < e->n_seqs; i++)
        if (e->seqs[i]->s.state == PAGODA_SEQ_WAITING) waiting[n_wait++] = e->seqs[i];
    seq **running = malloc(sizeof(seq *) * (size_t)(e->n_running ? e->n_running : 1));
    if (!running) { free(waiting); return false; }
    if (e->n_running) memcpy(running, e->running, sizeof(seq *) * (size_t)e->n_running);
    pagoda_sched_env env = {
        .struct_size = sizeof env, .opaque = e,
        .waiting = (pagoda_sched_seq *const *)waiting, .n_waiting = n_wait,
        .running = (pagoda_sched_seq *const *)running, .n_running = e->n_running,
        .block_size = e->opts.block_size,
        .admit = env_admit, .grow = env_grow, .preempt = env_preempt,
        .blocks_needed = env_blocks_needed, .free_blocks = env_free_blocks, .plan = env_plan,
        .max_seq_len = e->opts.max_seq_len,
    };
    e->n_plan = 0;
    int st = e->sched->ops.schedule(e->sched->ctx, &env);
    free(running);
    if (st) {
        pagoda_log(PAGODA_LOG_ERROR, "scheduler %s failed: %s", e->sched->name, pagoda_status_str(st));
        free(waiting);
        return false;
    }
    if (e->n_plan == 0) {
        /* Nothing runs. If nothing holds KV either, the waiting head can never
         * fit: fail it rather than spin. */
        bool any = e->n_running > 0;
        if (!any && n_wait > 0) {
            seq *q = waiting[0];
            int32_t need = env_blocks_needed(e, q->s.id);
            snprintf(err, sizeof err, "the request needs %d KV blocks of %d tokens but the pool "
                     "has %d blocks in all (raise kv_cache_tokens or memory_budget)", need,
                     e->opts.block_size, e->opts.n_blocks);
            free(waiting);
            finish_and_remove(e, q, PAGODA_FINISH_ERROR, err);
            return true;
        }
        free(waiting);
        return false;
    }
    free(waiting);

    /* build the flattened batch */
    int32_t T = 0, n_logits = 0;
    double t = now_s();
    for (int32_t i = 0; i < e->n_plan; i++) {
        seq *q = e->plan_seq[i];
        if (q->t_scheduled == 0) {
            q->t_scheduled = t;
            if (e->metrics) pagoda_metrics_observe(e->metrics, PAGODA_HIST_QUEUE, t - q->t_arrival);
        }
        const int32_t *table = NULL;
        int32_t nb = 0;
        e->kv->ops.block_table(e->kv->ctx, q->s.id, &table, &nb);
        int32_t n = e->plan_n[i], start = q->s.n_computed;
        if ((int64_t)nb * e->opts.block_size < start + n) {
            snprintf(err, sizeof err, "internal: KV policy %s gave %d blocks for %d tokens",
                     e->kv->name, nb, start + n);
            pagoda_log(PAGODA_LOG_ERROR, "%s", err);
            /* drop it from the plan and end it */
            drop_plan_entry(e, i);
            i--;
            finish_and_remove(e, q, PAGODA_FINISH_ERROR, err);
            continue;
        }
        e->views[i] = (pagoda_seq_view){.q_start = T, .n_q = n, .ctx_len = start + n,
                                        .n_blocks = nb, .block_table = table};
        for (int32_t j = 0; j < n; j++) {
            int32_t pos = start + j;
            e->b_tokens[T + j] = q->tokens[pos];
            e->b_pos[T + j] = pos;
            e->b_slots[T + j] = table[pos / e->opts.block_size] * e->opts.block_size +
                                pos % e->opts.block_size;
        }
        T += n;
        if (start + n == q->s.n_tokens) e->logit_rows[n_logits++] = T - 1;
    }
    if (e->n_plan == 0) return true;
    /* step_no is read by stats on other threads */
    uint64_t seq_no = __atomic_add_fetch(&e->step_no, 1, __ATOMIC_RELAXED);
    pagoda_batch batch = {.seq_no = seq_no, .n_tokens = T, .tokens = e->b_tokens,
                          .positions = e->b_pos, .slots = e->b_slots, .n_seqs = e->n_plan,
                          .seqs = e->views};
    st = pagoda_forward_run(&e->fw, &batch, e->logit_rows, n_logits, e->logits, err, sizeof err);
    if (st) {
        pagoda_log(PAGODA_LOG_ERROR, "forward pass failed: %s", err);
        int32_t np = e->n_plan;
        seq *failed[np > 0 ? np : 1];
        memcpy(failed, e->plan_seq, sizeof(seq *) * (size_t)np);
        for (int32_t i = 0; i < np; i++) finish_and_remove(e, failed[i], PAGODA_FINISH_ERROR, err);
        return true;
    }

    /* advance, sample, stream */
    int32_t li = 0;
    int32_t np = e->n_plan;
    seq *done[np > 0 ? np : 1];
    int done_reason[np > 0 ? np : 1];
    int32_t n_done = 0;
    t = now_s();
    for (int32_t i = 0; i < np; i++) {
        seq *q = e->plan_seq[i];
        q->s.n_computed += e->plan_n[i];
        if (e->kv->ops.commit)
            e->kv->ops.commit(e->kv->ctx, q->s.id, q->tokens, q->s.n_computed);
        if (q->s.n_computed != q->s.n_tokens) continue;
        float *lg = e->logits + (size_t)li++ * (size_t)e->model->hp.n_vocab;
        if (q->cancelled) continue;
        float lp = 0;
        int32_t n_top = q->logprobs > 0 ? q->logprobs : 0;
        int32_t tok = pagoda_sampler_sample(q->sampler, lg, q->logprobs >= 0 ? &lp : NULL, n_top,
                                            e->top_ids, e->top_lp);
        pagoda_sampler_accept(q->sampler, tok, false);
        q->tokens[q->s.n_tokens++] = tok;
        if (q->t_first == 0) {
            q->t_first = t;
            if (e->metrics) pagoda_metrics_observe(e->metrics, PAGODA_HIST_TTFT, t - q->t_arrival);
        } else if (e->metrics) {
            pagoda_metrics_observe(e->metrics, PAGODA_HIST_ITL, t - q->t_last);
        }
        q->t_last = t;
        pthread_mutex_lock(&e->mu);
        e->generation_tokens_total++;
        pthread_mutex_unlock(&e->mu);
        if (e->metrics) pagoda_metrics_count(e->metrics, PAGODA_COUNTER_GENERATION_TOKENS, 1);
        int reason = PAGODA_FINISH_NONE;
        if (is_stop_token(e, q, tok)) {
            reason = PAGODA_FINISH_STOP;
            emit_text(e, q, q->emitted, tok, lp, n_top); /* the token, no text */
        } else if (push_text(e, q, tok, lp, n_top)) {
            reason = PAGODA_FINISH_STOP;
        } else if (q->s.n_tokens - q->s.n_prompt >= q->max_new || q->s.n_tokens >= e->opts.max_seq_len) {
            reason = PAGODA_FINISH_LENGTH;
        }
        if (reason) {
            done[n_done] = q;
            done_reason[n_done++] = reason;
        }
    }
    for (int32_t i = 0; i < n_done; i++) finish_and_remove(e, done[i], done_reason[i], NULL);
    return true;
}

static void *engine_main(void *arg)
{
    pagoda_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        take_inbox(e);
        /* cancels: ids not live (already finished) are dropped */
        int32_t nc = e->n_cancels;
        uint64_t ids[nc > 0 ? nc : 1];
        if (nc) memcpy(ids, e->cancels, sizeof(uint64_t) * (size_t)nc);
        e->n_cancels = 0;
        bool stopping = e->stopping;
        e->n_waiting_pub = 0;
        for (int32_t i = 0; i < e->n_seqs; i++)
            e->n_waiting_pub += e->seqs[i]->s.state == PAGODA_SEQ_WAITING;
        e->n_running_pub = e->n_running;
        /* published under the lock so other threads never read a policy's
         * counters while this thread changes them */
        e->kv_pub.struct_size = sizeof e->kv_pub;
        e->kv->ops.stats(e->kv->ctx, &e->kv_pub);
        if (!stopping && nc == 0 && e->n_seqs == 0) {
            pthread_cond_wait(&e->cv, &e->mu);
            continue;
        }
        pthread_mutex_unlock(&e->mu);

        for (int32_t i = 0; i < nc; i++) {
            seq *q = find_seq(e, ids[i]);
            if (q) finish_and_remove(e, q, PAGODA_FINISH_CANCELLED, NULL);
        }
        if (stopping) {
            while (e->n_seqs > 0)
                finish_and_remove(e, e->seqs[e->n_seqs - 1], PAGODA_FINISH_CANCELLED, NULL);
            pthread_mutex_lock(&e->mu);
            take_inbox(e);
            if (e->n_seqs == 0 && !e->inbox_head) break;
            continue;
        }
        if (e->n_seqs > 0) step(e);
        if (e->opts.check_invariants) check_invariants(e);
        if (e->step_hook) e->step_hook(e->step_user, e);
        pthread_mutex_lock(&e->mu);
    }
    e->n_waiting_pub = e->n_running_pub = 0;
    e->kv->ops.stats(e->kv->ctx, &e->kv_pub);
    pthread_cond_broadcast(&e->idle_cv);
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---------------------------------------------------------------- views */

void pagoda_engine_wait_idle(pagoda_engine *e)
{
    pthread_mutex_lock(&e->mu);
    while (e->n_live > 0 && !(e->stopped))
        pthread_cond_wait(&e->idle_cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

int pagoda_engine_kv_stats(pagoda_engine *e, pagoda_kv_stats *st)
{
    memset(st, 0, sizeof *st);
    st->struct_size = sizeof *st;
    return e->kv->ops.stats(e->kv->ctx, st);
}

void pagoda_engine_get_stats(pagoda_engine *e, pagoda_engine_stats *st)
{
    memset(st, 0, sizeof *st);
    st->struct_size = sizeof *st;
    pthread_mutex_lock(&e->mu);
    pagoda_kv_stats kv = e->kv_pub;
    st->running = e->n_running_pub;
    st->waiting = e->n_waiting_pub + e->n_inbox;
    st->prompt_tokens_total = e->prompt_tokens_total;
    st->generation_tokens_total = e->generation_tokens_total;
    st->requests_finished_total = e->finished_total;
    st->preemptions_total = e->preemptions_total;
    st->steps_total = (int64_t)__atomic_load_n(&e->step_no, __ATOMIC_RELAXED);
    st->ready = e->started && !e->stopping;
    pthread_mutex_unlock(&e->mu);
    st->kv_total_blocks = kv.total_blocks;
    st->kv_used_blocks = kv.used_blocks;
    st->kv_free_blocks = kv.free_blocks;
    st->kv_cached_blocks = kv.cached_blocks;
    st->kv_block_size = e->opts.block_size;
    st->prefix_query_tokens = kv.query_tokens;
    st->prefix_hit_tokens = kv.hit_tokens;
}

void pagoda_engine_set_check_invariants(pagoda_engine *e, bool on) { e->opts.check_invariants = on; }
int64_t pagoda_engine_invariant_failures(const pagoda_engine *e) { return e->invariant_failures; }
const pagoda_model *pagoda_engine_model(const pagoda_engine *e) { return e->model; }
const pagoda_engine_opts *pagoda_engine_get_opts(const pagoda_engine *e) { return &e->opts; }

int pagoda_engine_copy_blocks(pagoda_engine *e, const int32_t *src, const int32_t *dst, int32_t n)
{
    pagoda_backend *be = e->be;
    if (be->ops.copy_blocks) return be->ops.copy_blocks(be->ctx, e->fw.kv, &e->fw.kv_layout, src, dst, n);
    /* fallback: through host memory, block by block, K and V of every layer */
    size_t bb = pagoda_kv_block_bytes(&e->fw.kv_layout);
    void *tmp = malloc(bb);
    if (!tmp) return PAGODA_ERR_NOMEM;
    int st = PAGODA_OK;
    for (int32_t i = 0; i < n && !st; i++)
        for (int l = 0; l < e->fw.kv_layout.n_layers && !st; l++)
            for (int kv = 0; kv < 2 && !st; kv++) {
                st = be->ops.download(be->ctx, e->fw.kv, pagoda_kv_offset(&e->fw.kv_layout, l, kv, src[i]), tmp, bb);
                if (!st) st = be->ops.upload(be->ctx, e->fw.kv, pagoda_kv_offset(&e->fw.kv_layout, l, kv, dst[i]), tmp, bb);
            }
    free(tmp);
    return st;
}
