#define _GNU_SOURCE /* memmem */
/*
 * engine_events.c: what a request hears, on the engine thread: TOKEN
 * events, holding back text that could begin a stop string or is a partial
 * UTF-8 character and cutting the output at a stop string; PROMPT events
 * (a scored prompt's tokens); the FINAL with
 * its usage, timings and metrics; and the sequence's removal afterwards.
 * Not for: deciding when a sequence ends on a stop token or its length
 * (engine_step.c), or formatting events for a wire (frontends).
 */
#include "engine_internal.h"

#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "tokenizer.h"
#include "unicode.h"

void engine_emit_text(pagoda_engine *e, seq *q, size_t upto, int32_t token, float logprob,
                      int32_t n_top)
{
    pagoda_event ev = {.struct_size = sizeof ev, .id = q->s.id, .type = PAGODA_EVENT_TOKEN,
                       .text = q->out + q->emitted, .text_len = upto - q->emitted,
                       .token = token, .logprob = logprob, .position = -1};
    pagoda_top_logprob top[PAGODA_MAX_TOP_LOGPROBS];
    for (int32_t i = 0; i < n_top; i++) top[i] = (pagoda_top_logprob){e->top_ids[i], e->top_lp[i]};
    ev.n_top = n_top;
    ev.top = n_top ? top : NULL;
    if (q->trace && token >= 0) {
        /* how it was made: the step now being sampled, and this sequence's
         * KV as that step left it (the table is valid during the callback) */
        ev.step = e->cur_step;
        ev.step_seqs = e->cur_step_seqs;
        ev.step_tokens = e->cur_step_tokens;
        ev.kv_tokens = q->s.n_computed;
        const int32_t *table = NULL;
        int32_t nb = 0;
        if (q->s.state == PAGODA_SEQ_RUNNING &&
            e->kv->ops.block_table(e->kv->ctx, q->s.id, &table, &nb) == PAGODA_OK) {
            ev.n_blocks = nb;
            ev.blocks = table;
        }
    }
    q->emitted = upto;
    q->cb(q->user, &ev);
}

void engine_emit_prompt(pagoda_engine *e, seq *q, int32_t index, float logprob, int32_t n_top)
{
    pagoda_event ev = {.struct_size = sizeof ev, .id = q->s.id, .type = PAGODA_EVENT_PROMPT,
                       .text = "", .token = q->tokens[index], .logprob = logprob,
                       .position = index};
    pagoda_top_logprob top[PAGODA_MAX_TOP_LOGPROBS];
    for (int32_t i = 0; i < n_top; i++) top[i] = (pagoda_top_logprob){e->top_ids[i], e->top_lp[i]};
    ev.n_top = n_top;
    ev.top = n_top ? top : NULL;
    q->cb(q->user, &ev);
}

/* End a sequence: release its KV, tell the scheduler, send the FINAL. The
 * caller removes it from the lists. */
static void finish(pagoda_engine *e, seq *q, int reason, const char *error)
{
    if (q->finished) return;
    q->finished = true;
    if (q->s.state == PAGODA_SEQ_RUNNING) e->kv->ops.release(e->kv->ctx, q->s.id);
    engine_swa_release(e, q);
    if (reason == PAGODA_FINISH_STOP || reason == PAGODA_FINISH_LENGTH) engine_recent_note(e, q);
    q->s.state = PAGODA_SEQ_WAITING;
    if (e->sched->ops.on_finish) e->sched->ops.on_finish(e->sched->ctx, q->s.id);
    double t = engine_now_s();
    int32_t n_gen = q->s.n_tokens - q->s.n_prompt;
    /* text held back for a possible stop string is released unless a stop
     * string matched (then out_len was cut at the match) */
    if (q->emitted < q->out_len && reason != PAGODA_FINISH_CANCELLED && reason != PAGODA_FINISH_ERROR)
        engine_emit_text(e, q, q->out_len, -1, 0, 0);
    pagoda_event ev = {.struct_size = sizeof ev, .id = q->s.id, .type = PAGODA_EVENT_FINAL,
                       .text = "", .token = -1, .finish_reason = reason, .error = error,
                       .position = -1};
    ev.usage.prompt_tokens = q->s.n_prompt;
    ev.usage.completion_tokens = n_gen;
    ev.usage.cached_tokens = q->n_cached_first;
    ev.tier_cached_tokens = q->n_tier_first;
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
bool engine_push_text(pagoda_engine *e, seq *q, int32_t token, float logprob, int32_t n_top)
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
            engine_emit_text(e, q, q->out_len, token, logprob, n_top);
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
    engine_emit_text(e, q, safe, token, logprob, n_top);
    return false;
}

static void remove_seq(pagoda_engine *e, seq *q)
{
    engine_drop_seq(e->seqs, &e->n_seqs, q);
    engine_drop_seq(e->running, &e->n_running, q);
    engine_seq_free(q);
    pthread_mutex_lock(&e->mu);
    e->n_live--;
    if (e->n_live == 0) pthread_cond_broadcast(&e->idle_cv);
    pthread_mutex_unlock(&e->mu);
}

void engine_finish_and_remove(pagoda_engine *e, seq *q, int reason, const char *error)
{
    finish(e, q, reason, error);
    remove_seq(e, q);
}
