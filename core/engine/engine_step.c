/*
 * engine_step.c: one engine step, on the engine thread, in three phases
 * read top to bottom:
 *   plan    the environment the scheduler policy plans through (admit,
 *           grow, preempt, plan, backed by the KV policy), then the
 *           flattened batch built from its plan;
 *   run     the forward pass (broadcast first under tensor parallelism);
 *   commit  advance each sequence, sample the ones that reached their end,
 *           with the stop token and length checks, and finish them.
 * Not for: stop strings and the events a request hears (engine_events.c),
 * the loop that calls a step (engine.c), or the math (forward.c).
 */
#include "engine_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "metrics.h"
#include "seqno.h"
#include "tp.h"
#include "tokenizer.h"

/* What one step carries from phase to phase. */
typedef struct step_state {
    double t_start;          /* when the step began (its recorded time) */
    uint64_t seq_no;         /* its number */
    int32_t n_seqs;          /* sequences in its batch, as run */
    int32_t n_tokens;        /* rows of the flattened batch */
    int32_t n_logits;        /* rows whose logits are sampled */
    int32_t n_score;         /* rows whose logits score a prompt token */
    int32_t n_decode;        /* rows computing a token sampled last step */
    int32_t n_draft;         /* rows computing a draft token */
} step_state;

/* ================================================================= plan */

seq *engine_find_seq(pagoda_engine *e, uint64_t id)
{
    for (int32_t i = 0; i < e->n_seqs; i++)
        if (e->seqs[i]->s.id == id) return e->seqs[i];
    return NULL;
}

/* The KV policy's tier hits so far (pagoda_kv_stats.tier_hit_tokens, 0
 * from a policy without a tier): read around a first admission, the
 * difference is that sequence's tokens from the tier. */
static int64_t kv_tier_hits(pagoda_engine *e)
{
    pagoda_kv_stats k;
    memset(&k, 0, sizeof k);
    k.struct_size = sizeof k;
    return e->kv->ops.stats(e->kv->ctx, &k) ? 0 : k.tier_hit_tokens;
}

static int env_admit(void *opaque, uint64_t id)
{
    pagoda_engine *e = opaque;
    seq *q = engine_find_seq(e, id);
    if (!q || q->s.state != PAGODA_SEQ_WAITING) return PAGODA_ERR_STATE;
    pagoda_kv_seq ks = {.id = id, .tokens = q->tokens, .n_tokens = q->s.n_tokens,
                        .max_total = q->s.max_total, .cache_salt = q->cache_salt};
    int32_t cached = 0;
    /* a seat in the sliding-window pool first: without one it cannot run */
    int st = engine_swa_admit(e, q);
    if (st) return st;
    int64_t tier0 = q->admitted_once ? 0 : kv_tier_hits(e);
    st = e->kv->ops.admit(e->kv->ctx, &ks, &cached);
    if (st) {
        engine_swa_release(e, q);
        return st;
    }
    if (cached < 0 || cached >= q->s.n_tokens) cached = 0;
    /* a hit's global KV is cached, its window is not: the local layers
     * need the tokens before its end recomputed (engine_swa.h) */
    cached = engine_swa_resume_at(e, q, cached);
    q->s.state = PAGODA_SEQ_RUNNING;
    q->s.n_computed = cached;
    q->n_cached_now = cached;
    if (!q->admitted_once) {
        q->admitted_once = true;
        q->n_cached_first = cached < q->s.n_prompt ? cached : q->s.n_prompt;
        int64_t tier = kv_tier_hits(e) - tier0;
        q->n_tier_first = tier < 0 ? 0 : tier > q->n_cached_first ? q->n_cached_first : (int32_t)tier;
    }
    e->running[e->n_running++] = q;
    return PAGODA_OK;
}

static int env_grow(void *opaque, uint64_t id, int32_t n_total)
{
    pagoda_engine *e = opaque;
    seq *q = engine_find_seq(e, id);
    if (!q || q->s.state != PAGODA_SEQ_RUNNING) return PAGODA_ERR_STATE;
    if (n_total > q->s.n_tokens) n_total = q->s.n_tokens;
    return e->kv->ops.grow(e->kv->ctx, id, n_total);
}

/* Takes q out of arr[0..*n), keeping the order (admission order matters
 * to the schedulers); nothing when q is not there. */
void engine_drop_seq(seq **arr, int32_t *n, const seq *q)
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
    if (e->spec.plan_draft)
        memmove(&e->spec.plan_draft[i], &e->spec.plan_draft[i + 1],
                sizeof(int32_t) * (size_t)(e->n_plan - i - 1));
    e->n_plan--;
}

static int env_preempt(void *opaque, uint64_t id)
{
    pagoda_engine *e = opaque;
    seq *q = engine_find_seq(e, id);
    if (!q || q->s.state != PAGODA_SEQ_RUNNING) return PAGODA_ERR_STATE;
    e->kv->ops.release(e->kv->ctx, id);
    engine_swa_release(e, q);
    q->s.state = PAGODA_SEQ_WAITING;
    q->s.n_computed = 0;
    q->s.n_preemptions++;
    engine_drop_seq(e->running, &e->n_running, q);
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
    seq *q = engine_find_seq(e, id);
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
    seq *q = engine_find_seq(e, id);
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

/* Draft tokens of plan entry i this step (engine_spec.c). */
static int32_t drafted_of(const pagoda_engine *e, int32_t i)
{
    return e->spec.plan_draft ? e->spec.plan_draft[i] : 0;
}

static bool is_stop_token(const pagoda_engine *e, const seq *q, int32_t tok)
{
    for (int32_t i = 0; i < q->n_stop_ids; i++)
        if (q->stop_ids[i] == tok) return true;
    return !q->ignore_eos && pagoda_tokenizer_is_eog(e->model->tok, tok);
}

/* [engine thread, inside the forward pass] A group of scored rows' logits:
 * each row becomes its prompt token's PROMPT event at once, so no more than
 * one group of vocabulary-wide rows ever exists. */
static void consume_scores(void *user, int32_t first, int32_t n, const float *logits)
{
    pagoda_engine *e = user;
    int32_t V = e->model->hp.n_vocab;
    for (int32_t r = 0; r < n; r++) {
        seq *q = e->score_seq[first + r];
        int32_t i = e->score_index[first + r];
        int32_t n_top = q->prompt_logprobs;
        float lp = pagoda_logprob_of(logits + (size_t)r * (size_t)V, V, q->tokens[i], n_top,
                                     e->top_ids, e->top_lp);
        engine_emit_prompt(e, q, i, lp, n_top);
        q->next_scored = i + 1;
    }
}

/* Queue the scored rows of q's chunk [start, start + n) at batch row t0:
 * prompt token i's logprob comes from the logits of position i - 1, so the
 * chunk scores the prompt indices start + 1 .. start + n that are still
 * due (after a preemption the recomputed ones are not). Index 0 has no
 * logits to wait for: its event goes out now. */
static int32_t queue_scores(pagoda_engine *e, seq *q, int32_t start, int32_t n, int32_t t0,
                            int32_t n_score)
{
    if (q->prompt_logprobs < 0 || q->next_scored >= q->s.n_prompt) return n_score;
    if (q->next_scored == 0) {
        engine_emit_prompt(e, q, 0, NAN, 0);
        q->next_scored = 1;
    }
    int32_t lo = q->next_scored > start + 1 ? q->next_scored : start + 1;
    int32_t hi = start + n < q->s.n_prompt - 1 ? start + n : q->s.n_prompt - 1;
    for (int32_t i = lo; i <= hi; i++) {
        e->score_rows[n_score] = t0 + (i - 1 - start);
        e->score_index[n_score] = i;
        e->score_seq[n_score] = q;
        n_score++;
    }
    return n_score;
}

/* Ask the scheduler for the step's plan (e->plan_seq / plan_n). PLAN_RUN
 * when something is planned; PLAN_IDLE when nothing was to do; PLAN_DONE
 * when the step did something else (ended a request that can never fit). */
enum { PLAN_IDLE, PLAN_DONE, PLAN_RUN };

/* The requests still waiting after the scheduler's turn, to the KV
 * policy's optional prefetch (kvcache.h, minor 14): a policy with a slower
 * tier reads their prefixes back while this step computes. Every step,
 * also with none (the policy lets go of what it read ahead). */
static void prefetch_waiting(pagoda_engine *e, seq *const *waiting, int32_t n_wait)
{
    if (!e->kv->ops.prefetch) return;
    pagoda_kv_seq *ks = n_wait ? malloc(sizeof *ks * (size_t)n_wait) : NULL;
    int32_t n = 0;
    for (int32_t i = 0; ks && i < n_wait; i++) {
        const seq *q = waiting[i];
        if (q->s.state != PAGODA_SEQ_WAITING) continue; /* admitted this step */
        ks[n++] = (pagoda_kv_seq){.id = q->s.id, .tokens = q->tokens, .n_tokens = q->s.n_tokens,
                                  .max_total = q->s.max_total, .cache_salt = q->cache_salt};
    }
    (void)e->kv->ops.prefetch(e->kv->ctx, ks, n);
    free(ks);
}

static int plan_schedule(pagoda_engine *e)
{
    char err[512];
    int32_t n_wait = 0;
    seq **waiting = malloc(sizeof(seq *) * (size_t)(e->n_seqs ? e->n_seqs : 1));
    if (!waiting) return PLAN_IDLE;
    for (int32_t i = 0; i < e->n_seqs; i++)
        if (e->seqs[i]->s.state == PAGODA_SEQ_WAITING) waiting[n_wait++] = e->seqs[i];
    seq **running = malloc(sizeof(seq *) * (size_t)(e->n_running ? e->n_running : 1));
    if (!running) { free(waiting); return PLAN_IDLE; }
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
    if (!st) prefetch_waiting(e, waiting, n_wait);
    if (st) {
        pagoda_log(PAGODA_LOG_ERROR, "scheduler %s failed: %s", e->sched->name, pagoda_status_str(st));
        free(waiting);
        return PLAN_IDLE;
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
            engine_finish_and_remove(e, q, PAGODA_FINISH_ERROR, err);
            return PLAN_DONE;
        }
        free(waiting);
        return PLAN_IDLE;
    }
    free(waiting);
    return PLAN_RUN;
}

/* Flatten the plan into the batch (and the window pool's, engine_swa.c):
 * tokens, positions, KV slots, views, the rows to sample and to score.
 * An entry the KV policy or the window pool cannot serve ends its request
 * and leaves the plan. */
static void plan_batch(pagoda_engine *e, step_state *ss)
{
    char err[512];
    int32_t T = 0, n_logits = 0, n_score = 0, n_decode = 0, n_draft = 0;
    double t = engine_now_s();
    e->swa.sink_used = 0;
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
            engine_finish_and_remove(e, q, PAGODA_FINISH_ERROR, err);
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
        if (engine_swa_plan_entry(e, q, i, start, n, T, err, sizeof err)) {
            pagoda_log(PAGODA_LOG_ERROR, "%s", err);
            drop_plan_entry(e, i);
            i--;
            engine_finish_and_remove(e, q, PAGODA_FINISH_ERROR, err);
            continue;
        }
        n_score = queue_scores(e, q, start, n, T, n_score);
        /* decode: the one token it sampled last (and its drafts after it,
         * each with logits); anything else is prefill (a prompt, or what a
         * preempted sequence recomputes) */
        int32_t k = drafted_of(e, i);
        n_decode += n - k == 1 && start == q->s.n_tokens - 1 && start >= q->s.n_prompt;
        n_draft += k;
        T += n;
        if (start + n - k == q->s.n_tokens && !q->score_only)
            for (int32_t r = k; r >= 0; r--) e->logit_rows[n_logits++] = T - 1 - r;
    }
    ss->n_tokens = T;
    ss->n_logits = n_logits;
    ss->n_score = n_score;
    ss->n_decode = n_decode;
    ss->n_draft = n_draft;
}

/* ================================================================== run */

/* What the backend holds beside the weights after a pass (ABI 1.15
 * weight_extra_held: the CPU backend's repacked copies, made in the pass),
 * published before the step's events, so a request's FINAL finds it in
 * /metrics. Asked here only: on the engine thread, between passes, where
 * the backend's cache is not changing. */
static void publish_extra_held(pagoda_engine *e)
{
    uint64_t b = 0;
    if (!e->be->ops.weight_extra_held || e->be->ops.weight_extra_held(e->be->ctx, &b) != PAGODA_OK)
        return;
    if (b == e->extra_held_last) return;
    e->extra_held_last = b;
    pthread_mutex_lock(&e->mu);
    e->extra_held_pub = b;
    pthread_mutex_unlock(&e->mu);
}

/* The forward pass over the step's batch: the sampled rows' logits land in
 * e->logits, the scored rows go to consume_scores as they are made. */
static int step_run(pagoda_engine *e, const step_state *ss, char *err, size_t err_len)
{
    int32_t T = ss->n_tokens;
    pagoda_batch batch = {.seq_no = pagoda_seqno_step(ss->seq_no), .n_tokens = T,
                          .tokens = e->b_tokens, .positions = e->b_pos, .slots = e->b_slots,
                          .n_seqs = e->n_plan, .seqs = e->views};
    /* the sliding-window layers' view of the same step: their own slots and
     * tables (a seq_no of its own, for a backend that caches per batch) */
    pagoda_batch local = {.seq_no = pagoda_seqno_window(batch.seq_no), .n_tokens = T,
                          .tokens = e->b_tokens, .positions = e->b_pos, .slots = e->swa.slots,
                          .n_seqs = e->n_plan, .seqs = e->swa.views};
    pagoda_logit_scan scan = {.rows = e->score_rows, .n_rows = ss->n_score,
                              .consume = consume_scores, .user = e};
    /* tensor parallelism: the other ranks run the same step on their shards */
    const pagoda_batch *lb = e->swa.g.window ? &local : NULL;
    int st = e->tp ? pagoda_tp_send_step(e->tp, &batch, lb, err, err_len) : PAGODA_OK;
    if (!st)
        st = pagoda_forward_run_scan(&e->fw, &batch, lb, e->logit_rows,
                                     ss->n_logits, e->logits, ss->n_score ? &scan : NULL, err,
                                     err_len);
    publish_extra_held(e);
    return st;
}

/* =============================================================== commit */

/* The forward pass failed: every planned request ends with its error. */
static void commit_failed(pagoda_engine *e, const char *err)
{
    pagoda_log(PAGODA_LOG_ERROR, "forward pass failed: %s", err);
    int32_t np = e->n_plan;
    seq *failed[np > 0 ? np : 1];
    memcpy(failed, e->plan_seq, sizeof(seq *) * (size_t)np);
    for (int32_t i = 0; i < np; i++) engine_finish_and_remove(e, failed[i], PAGODA_FINISH_ERROR, err);
}

/* Sample q's next token from its logits row lg exactly as plain decoding
 * does: the constraint's mask, the sampler (penalties, filters, its seeded
 * draw), the matcher moved on, the token appended and streamed, and the
 * stop token, stop string and length checks. Returns the finish reason
 * (PAGODA_FINISH_NONE: it goes on; ERROR with err filled) and *tok, the
 * token sampled (-1 when none was). */
static int sample_row(pagoda_engine *e, seq *q, float *lg, double t, int32_t *tok_out, char *err,
                      size_t err_len)
{
    *tok_out = -1;
    if (q->matcher) {
        /* structured output: only what the spec allows (engine_constraint.c) */
        int m = engine_constraint_mask(e, q, lg, err, err_len);
        if (m) return m > 0 ? PAGODA_FINISH_STOP : PAGODA_FINISH_ERROR;
    }
    float lp = 0;
    int32_t n_top = q->logprobs > 0 ? q->logprobs : 0;
    int32_t tok = pagoda_sampler_sample(q->sampler, lg, q->logprobs >= 0 ? &lp : NULL, n_top,
                                        e->top_ids, e->top_lp);
    if (q->matcher && !is_stop_token(e, q, tok) &&
        engine_constraint_advance(e, q, tok, err, err_len) < 0)
        return PAGODA_FINISH_ERROR;
    *tok_out = tok;
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
    if (is_stop_token(e, q, tok)) {
        engine_emit_text(e, q, q->emitted, tok, lp, n_top); /* the token, no text */
        return PAGODA_FINISH_STOP;
    }
    if (engine_push_text(e, q, tok, lp, n_top)) return PAGODA_FINISH_STOP;
    if (q->s.n_tokens - q->s.n_prompt >= q->max_new || q->s.n_tokens >= e->opts.max_seq_len)
        return PAGODA_FINISH_LENGTH;
    return PAGODA_FINISH_NONE;
}

/* Advance, verify, sample, stream: each planned sequence's KV moves on;
 * one that reached its end samples its next token from its logits row and
 * hears it. A sequence with k drafts has k + 1 rows: row j is sampled as
 * plain decoding would sample it, and while what it gave equals draft j
 * the draft's KV is kept and row j + 1 (computed after that draft) is
 * sampled next; the first token that differs (or the one after the last
 * draft) ends its step, and the KV of the drafts after it is never
 * committed (docs/speculation.md). The ones that ended are finished last
 * (their rows stay valid until every row was read). */
static void step_commit(pagoda_engine *e)
{
    char err[512];
    const int32_t V = e->model->hp.n_vocab;
    int32_t li = 0;
    int32_t np = e->n_plan;
    seq *done[np > 0 ? np : 1];
    int done_reason[np > 0 ? np : 1];
    char done_err[np > 0 ? np : 1][sizeof err]; /* a constrained request's error, when it fails */
    int32_t n_done = 0;
    double t = engine_now_s();
    e->spec.step_drafted = e->spec.step_accepted = 0;
    for (int32_t i = 0; i < np; i++) {
        seq *q = e->plan_seq[i];
        int32_t k = drafted_of(e, i);
        q->s.n_computed += e->plan_n[i] - k;
        if (k == 0) {
            engine_swa_trim(e, q);
            /* a scored prompt's blocks are its own (see engine_submit.c) */
            if (e->kv->ops.commit && q->prompt_logprobs < 0)
                e->kv->ops.commit(e->kv->ctx, q->s.id, q->tokens, q->s.n_computed);
        }
        if (q->s.n_computed != q->s.n_tokens) continue;
        if (q->score_only) {
            done[n_done] = q;
            done_reason[n_done++] = PAGODA_FINISH_LENGTH;
            continue;
        }
        float *rows = e->logits + (size_t)li * (size_t)V;
        li += 1 + k;
        if (q->cancelled) continue;
        int reason = PAGODA_FINISH_NONE;
        int32_t accepted = 0;
        for (int32_t j = 0; j <= k; j++) {
            /* draft j sits where the token this row gives will go */
            int32_t draft = j < k ? q->tokens[q->s.n_tokens] : -1, tok;
            reason = sample_row(e, q, rows + (size_t)j * (size_t)V, t, &tok, err, sizeof err);
            if (j < k && tok == draft) accepted++;
            if (reason || j == k || tok != draft) break;
            q->s.n_computed++; /* the draft was the token: its KV and next row hold */
        }
        if (k > 0) {
            engine_spec_verified(e, q, k, accepted);
            engine_swa_trim(e, q);
            if (e->kv->ops.commit && q->prompt_logprobs < 0)
                e->kv->ops.commit(e->kv->ctx, q->s.id, q->tokens, q->s.n_computed);
            if (accepted < k) engine_spec_shrink(e, q);
        }
        if (reason) {
            done[n_done] = q;
            done_reason[n_done] = reason;
            if (reason == PAGODA_FINISH_ERROR) snprintf(done_err[n_done], sizeof done_err[0], "%s", err);
            n_done++;
        }
    }
    for (int32_t i = 0; i < n_done; i++)
        engine_finish_and_remove(e, done[i], done_reason[i],
                                 done_reason[i] == PAGODA_FINISH_ERROR ? done_err[i] : NULL);
}

/* One step: plan, run, commit. Returns false when there was nothing to do. */
bool engine_step(pagoda_engine *e)
{
    char err[512];
    step_state ss = {.t_start = engine_now_s()};
    int p = plan_schedule(e);
    if (p != PLAN_RUN) return p == PLAN_DONE;
    engine_spec_plan(e);
    plan_batch(e, &ss);
    if (e->n_plan == 0) return true;
    /* step_no is also read by snapshots taken off the engine thread */
    ss.seq_no = __atomic_add_fetch(&e->step_no, 1, __ATOMIC_RELAXED);
    ss.n_seqs = e->n_plan; /* a traced token's batch */
    e->cur_step = ss.seq_no;
    e->cur_step_seqs = ss.n_seqs;
    e->cur_step_tokens = ss.n_tokens;

    e->spec.step_drafted = e->spec.step_accepted = 0;
    if (step_run(e, &ss, err, sizeof err)) commit_failed(e, err);
    else step_commit(e);
    engine_record_step(e, ss.seq_no, ss.n_seqs, ss.n_tokens - ss.n_decode - ss.n_draft,
                       ss.n_decode, ss.n_draft, e->spec.step_accepted, engine_now_s() - ss.t_start);
    return true;
}
