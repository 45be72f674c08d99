/*
 * trace.c: one traced token as JSON (see trace.h): the token and its text,
 * its log-probability and probability, the step, the step's batch, the
 * sequence's KV length and blocks after that step, and the top candidates.
 * Probabilities are the model's at temperature 1 after penalties (the
 * distribution logprobs report, sampling.md), so a sampled token need not
 * be the first candidate.
 * Not for: deciding where the entry goes (output.c).
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reply.h"
#include "trace.h"

static json_t *token_text(const pagoda_host *h, int32_t tok)
{
    char *t = h->token_text(h, tok);
    json_t *j = jstr(t ? t : "", t ? strlen(t) : 0);
    if (t) h->free(h, t);
    return j;
}

/* A logprob and its probability; -inf (ruled out) as -9999 and 0, as the
 * logprobs fields do. */
static void set_lp(json_t *o, float lp)
{
    json_object_set_new(o, "logprob", json_real(isfinite(lp) ? (double)lp : -9999.0));
    json_object_set_new(o, "prob", json_real(isfinite(lp) ? exp((double)lp) : 0.0));
}

json_t *trace_entry(const pagoda_host *h, const ev_item *e)
{
    json_t *o = json_object();
    json_object_set_new(o, "token", json_integer(e->token));
    json_object_set_new(o, "text", token_text(h, e->token));
    set_lp(o, e->logprob);
    json_object_set_new(o, "step", json_integer((json_int_t)e->step));
    json_object_set_new(o, "batch_seqs", json_integer(e->step_seqs));
    json_object_set_new(o, "batch_tokens", json_integer(e->step_tokens));
    json_object_set_new(o, "kv_tokens", json_integer(e->kv_tokens));
    json_t *blocks = json_array();
    for (int32_t i = 0; i < e->n_blocks; i++) json_array_append_new(blocks, json_integer(e->blocks[i]));
    json_object_set_new(o, "kv_blocks", blocks);
    json_t *top = json_array();
    for (int k = 0; k < e->n_top && k < TRACE_TOP; k++) {
        json_t *t = json_object();
        json_object_set_new(t, "token", json_integer(e->top[k].token));
        json_object_set_new(t, "text", token_text(h, e->top[k].token));
        set_lp(t, e->top[k].logprob);
        json_array_append_new(top, t);
    }
    json_object_set_new(o, "top", top);
    return o;
}
