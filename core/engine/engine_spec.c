/*
 * engine_spec.c: speculative decoding's engine side. In the plan phase a
 * decoding sequence may get draft tokens from its drafter (drafter.h) as
 * extra rows of its batch entry, each with its logits; the commit phase
 * (engine_step.c) samples those rows in order exactly as plain decoding
 * would and keeps the drafts up to the first that differs from what was
 * sampled, so the output is the one plain decoding gives (the argument is
 * in docs/speculation.md). Here: the budgets drafts are planned within
 * (tokens, logit rows, KV blocks, the batch size above which a step drafts
 * nothing), each sequence's adaptive draft length and its break-even
 * pause, and the counters. A drafter with propose_batch gets every
 * drafting sequence of the step in one call.
 * Not for: proposing tokens (the drafters), sampling (engine_step.c).
 */
#include "engine_internal.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

/* A sequence whose drafts agree less often than this (smoothed) sits out:
 * on a CPU a verify row costs a fraction of a decode step (the weights are
 * read once for all rows), and below about this rate the rows cost more
 * than the tokens they save (docs/speculation.md). */
#define SPEC_BREAK_EVEN 0.3f
#define SPEC_FIRST_K 4             /* a sequence's first draft length */
#define SPEC_MIN_SAMPLE 8          /* drafted tokens before break-even is judged */
#define SPEC_PAUSE_STEPS 16        /* the first pause; it doubles up to 16x */

int32_t pagoda_engine_spec_rows(const pagoda_engine_opts *o, int32_t max_num_seqs,
                                int32_t max_batched_tokens)
{
    if (!o->speculative[0] || strcmp(o->speculative, "off") == 0) return 0;
    int32_t kmax = o->spec_max_draft > 0 ? o->spec_max_draft : 8;
    int32_t seqs = o->spec_max_seqs > 1 ? o->spec_max_seqs : 1;
    if (seqs > max_num_seqs) seqs = max_num_seqs;
    int64_t rows = (int64_t)seqs * kmax;
    return (int32_t)(rows < max_batched_tokens ? rows : max_batched_tokens);
}

int32_t pagoda_engine_spec_draft_seats(const pagoda_engine_opts *o, int32_t max_num_seqs)
{
    int32_t seqs = o->spec_max_seqs >= 0 ? o->spec_max_seqs : 4;
    int32_t seats = seqs > 1 ? seqs : 1;
    return seats < max_num_seqs ? seats : (max_num_seqs > 0 ? max_num_seqs : 1);
}

int engine_spec_create(pagoda_engine *e, char *err, size_t err_len)
{
    engine_spec *sp = &e->spec;
    const pagoda_engine_opts *o = &e->opts;
    if (!o->speculative[0] || strcmp(o->speculative, "off") == 0) return PAGODA_OK;
    sp->drafter = pagoda_drafter_find(o->speculative);
    if (!sp->drafter) {
        ERR("[engine] speculative = %s: no such drafter (off, ngram or draft)", o->speculative);
        return PAGODA_ERR_INVALID;
    }
    int32_t kmax = o->spec_max_draft > 0 ? o->spec_max_draft : 8;
    if (kmax >= o->max_seq_len) {
        ERR("[engine] spec_max_draft = %d is not below the context (max_seq_len %d)", kmax,
            o->max_seq_len);
        return PAGODA_ERR_INVALID;
    }
    if (o->spec_ngram < 0 || o->spec_ngram > 8) {
        ERR("[engine] spec_ngram = %d is out of range (1 to 8)", o->spec_ngram);
        return PAGODA_ERR_INVALID;
    }
    sp->max_draft = kmax;
    sp->max_seqs = o->spec_max_seqs >= 0 ? o->spec_max_seqs : 4;
    sp->cfg = (pagoda_drafter_config){.ngram = o->spec_ngram > 0 ? o->spec_ngram : 3,
                                      .max_seq_len = o->max_seq_len};
    if (sp->drafter == &pagoda_drafter_model_ops) {
        if (!o->spec_draft_model || !o->spec_draft_model[0]) {
            ERR("[engine] speculative = draft needs spec_draft_model (a GGUF of the model's "
                "vocabulary)");
            return PAGODA_ERR_INVALID;
        }
        if (o->tp && o->tp->size > 1) {
            ERR("[engine] speculative = draft does not run under tensor parallelism yet "
                "(tensor_parallel = %d): use ngram or off", o->tp->size);
            return PAGODA_ERR_INVALID;
        }
        /* a seat for each sequence that may draft in a step */
        int32_t seats = pagoda_engine_spec_draft_seats(o, e->max_num_seqs);
        int st = pagoda_draft_model_open(o->spec_draft_model, e->model, e->be, seats, o->max_seq_len,
                                         o->block_size, &sp->draft, err, err_len);
        if (st) return st;
        char line[256];
        pagoda_draft_model_describe(sp->draft, line, sizeof line);
        pagoda_log(PAGODA_LOG_INFO, "draft model %s: %s", o->spec_draft_model, line);
        sp->cfg.draft_model = sp->draft;
    }
    sp->rows = pagoda_engine_spec_rows(o, e->max_num_seqs, e->max_batched_tokens);
    sp->plan_draft = calloc((size_t)e->max_num_seqs, sizeof(int32_t));
    sp->reqs = calloc((size_t)e->max_num_seqs, sizeof(pagoda_draft_req));
    sp->req_plan = calloc((size_t)e->max_num_seqs, sizeof(int32_t));
    if (!sp->plan_draft || !sp->reqs || !sp->req_plan) {
        ERR("out of memory for speculative decoding's buffers");
        return PAGODA_ERR_NOMEM;
    }
    return PAGODA_OK;
}

void engine_spec_destroy(pagoda_engine *e)
{
    free(e->spec.plan_draft);
    e->spec.plan_draft = NULL;
    free(e->spec.reqs);
    e->spec.reqs = NULL;
    free(e->spec.req_plan);
    e->spec.req_plan = NULL;
    pagoda_draft_model_free(e->spec.draft);
    e->spec.draft = NULL;
}

int engine_spec_attach(pagoda_engine *e, seq *q, int32_t req_max, char *err, size_t err_len)
{
    const engine_spec *sp = &e->spec;
    if (req_max < -1) {
        ERR("spec_max_draft %d is out of range (-1 off, 0 the server's, or 1 to %d)", req_max,
            e->opts.max_seq_len - 1);
        return PAGODA_ERR_INVALID;
    }
    if (req_max >= e->opts.max_seq_len) {
        ERR("spec_max_draft %d is not below the context (max_seq_len %d)", req_max,
            e->opts.max_seq_len);
        return PAGODA_ERR_INVALID;
    }
    if (req_max > 0 && !sp->drafter) {
        ERR("spec_max_draft %d: speculative decoding is off on this server ([engine] speculative)",
            req_max);
        return PAGODA_ERR_INVALID;
    }
    /* structured output speculates too: the commit phase samples row j
     * under the mask of the matcher advanced by rows 0 .. j - 1, as plain
     * decoding would (engine_step.c's sample_row); a scored prompt's
     * request is a measurement and decodes plainly */
    if (!sp->drafter || req_max < 0 || q->score_only) return PAGODA_OK;
    /* more than the server's limit is the server's limit (stated in the
     * request's documentation) */
    q->spec_max = req_max > 0 && req_max < sp->max_draft ? req_max : sp->max_draft;
    q->spec_state = sp->drafter->seq_new(&sp->cfg, q->s.max_total);
    if (!q->spec_state) {
        ERR("out of memory");
        return PAGODA_ERR_NOMEM;
    }
    q->spec_k = SPEC_FIRST_K < q->spec_max ? SPEC_FIRST_K : q->spec_max;
    q->spec_ema = 1.0f;
    q->spec_drafter = sp->drafter;
    return PAGODA_OK;
}

void engine_spec_release(seq *q)
{
    if (q->spec_state && q->spec_drafter) q->spec_drafter->seq_free(q->spec_state);
    q->spec_state = NULL;
}

/* A planned entry that decodes one token q sampled last step (its only
 * row), with nothing else asked of its logits. */
static bool decoding(const pagoda_engine *e, const seq *q, int32_t i)
{
    return e->plan_n[i] == 1 && q->s.n_computed == q->s.n_tokens - 1 &&
           q->s.n_tokens > q->s.n_prompt && !q->cancelled;
}

/* Plan entry i takes the k drafts proposed into its token array, with KV
 * for them only from blocks nobody else will need this step (a draft never
 * makes the scheduler preempt a sequence); returns k, or 0 when it drafts
 * nothing after all. */
static int32_t take_drafts(pagoda_engine *e, int32_t i, int32_t k, int64_t *free_blocks)
{
    if (k <= 0) return 0;
    seq *q = e->plan_seq[i];
    int32_t n = q->s.n_tokens, bs = e->opts.block_size;
    const int32_t *table = NULL;
    int32_t nb = 0;
    e->kv->ops.block_table(e->kv->ctx, q->s.id, &table, &nb);
    int32_t need = (n + k + bs - 1) / bs - nb;
    if (need > 0 && *free_blocks - need < e->n_running) return 0;
    if (e->kv->ops.grow(e->kv->ctx, q->s.id, n + k) != PAGODA_OK) return 0;
    if (need > 0) *free_blocks -= need;
    e->plan_n[i] += k;
    e->spec.plan_draft[i] = k;
    return k;
}

void engine_spec_plan(pagoda_engine *e)
{
    engine_spec *sp = &e->spec;
    if (!sp->drafter) return;
    memset(sp->plan_draft, 0, sizeof(int32_t) * (size_t)e->n_plan);
    int32_t n_dec = 0, tokens = 0;
    for (int32_t i = 0; i < e->n_plan; i++) {
        n_dec += decoding(e, e->plan_seq[i], i);
        tokens += e->plan_n[i];
    }
    /* many sequences decoding: the step is compute-bound already, and draft
     * rows would cost as much as real ones */
    if (n_dec == 0 || n_dec > (sp->max_seqs > 1 ? sp->max_seqs : 1)) return;
    /* batched (a drafter with propose_batch, spec_draft_batch on): every
     * drafting sequence's request first, each within the budgets as if
     * it drafted all it asks for, then one call for all of them */
    const pagoda_drafter_ops *d = sp->drafter;
    bool batch = !e->opts.spec_draft_unbatched &&
                 d->struct_size >= offsetof(pagoda_drafter_ops, propose_batch) + sizeof d->propose_batch &&
                 d->propose_batch;
    int32_t rows_left = sp->rows, n_req = 0;
    pagoda_kv_stats ks = {.struct_size = sizeof ks};
    e->kv->ops.stats(e->kv->ctx, &ks);
    int64_t free_blocks = ks.free_blocks + ks.cached_blocks;
    for (int32_t i = 0; i < e->n_plan && rows_left > 0; i++) {
        seq *q = e->plan_seq[i];
        if (!q->spec_state || !decoding(e, q, i)) continue;
        if (q->spec_cooldown > 0) {
            q->spec_cooldown--;
            continue;
        }
        int32_t n = q->s.n_tokens;
        /* the last draft worth making is the one before the length limit
         * (the token after an accepted run is sampled anyway) */
        int32_t k = q->spec_k;
        if (k > q->s.max_total - n - 1) k = q->s.max_total - n - 1;
        if (k > e->opts.max_seq_len - n - 1) k = e->opts.max_seq_len - n - 1;
        if (k > e->max_batched_tokens - tokens) k = e->max_batched_tokens - tokens;
        if (k > rows_left) k = rows_left;
        if (k <= 0) continue;
        /* proposed straight into the token array (cap = max_total + 1 > n
         * + k): the batch reads them there, the commit overwrites them */
        if (batch) {
            sp->reqs[n_req] = (pagoda_draft_req){.state = q->spec_state, .tokens = q->tokens,
                                                 .n = n, .max = k, .out = q->tokens + n};
            sp->req_plan[n_req++] = i;
            tokens += k;
            rows_left -= k;
            continue;
        }
        k = take_drafts(e, i, q->spec_drafter->propose(q->spec_state, q->tokens, n, k, q->tokens + n),
                        &free_blocks);
        tokens += k;
        rows_left -= k;
    }
    if (n_req == 0) return;
    d->propose_batch(sp->reqs, n_req);
    for (int32_t r = 0; r < n_req; r++) take_drafts(e, sp->req_plan[r], sp->reqs[r].k, &free_blocks);
}

void engine_spec_shrink(pagoda_engine *e, seq *q)
{
    if (!e->kv->ops.shrink) return;
    const int32_t *table = NULL;
    int32_t before = 0, after = 0;
    e->kv->ops.block_table(e->kv->ctx, q->s.id, &table, &before);
    /* what plain decoding holds after a step: the computed tokens' blocks
     * (the scheduler grows for the token sampled last when it plans it) */
    if (e->kv->ops.shrink(e->kv->ctx, q->s.id, q->s.n_computed) != PAGODA_OK) return;
    e->kv->ops.block_table(e->kv->ctx, q->s.id, &table, &after);
    if (after < before) e->spec.shrunk_blocks += before - after;
}

void engine_spec_verified(pagoda_engine *e, seq *q, int32_t drafted, int32_t accepted)
{
    engine_spec *sp = &e->spec;
    q->spec_drafted += drafted;
    q->spec_accepted += accepted;
    sp->step_drafted += drafted;
    sp->step_accepted += accepted;
    pthread_mutex_lock(&e->mu);
    sp->drafted_total += drafted;
    sp->accepted_total += accepted;
    sp->verify_steps_total++;
    pthread_mutex_unlock(&e->mu);
    /* longer after a run that agreed to its end, back to what agreed plus
     * one after a miss */
    if (accepted == drafted) q->spec_k = q->spec_k + 2 < q->spec_max ? q->spec_k + 2 : q->spec_max;
    else q->spec_k = accepted + 1 < q->spec_max ? accepted + 1 : q->spec_max;
    q->spec_ema = 0.7f * q->spec_ema + 0.3f * (float)accepted / (float)drafted;
    q->spec_since_pause += drafted;
    if (q->spec_since_pause >= SPEC_MIN_SAMPLE && q->spec_ema < SPEC_BREAK_EVEN) {
        int32_t shift = q->spec_pauses < 4 ? q->spec_pauses : 4;
        q->spec_cooldown = SPEC_PAUSE_STEPS << shift;
        q->spec_pauses++;
        q->spec_since_pause = 0;
        q->spec_ema = SPEC_BREAK_EVEN + 0.2f;
        q->spec_k = 2 < q->spec_max ? 2 : q->spec_max;
    }
}
