/*
 * output.c: a request's engine events into its response, in the OpenAI
 * shapes: accumulating text, logprobs and usage per choice (with echo, the
 * prompt's text and its tokens' logprobs first); for a stream,
 * the SSE chunks MHD pulls from sse_reader; otherwise, waiting for every
 * FINAL and answering one JSON body.
 * Not for: errors before anything was submitted (reply.c), or the engine
 * callback and the request's lifetime (hreq.c).
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/reasoning.h"
#include "output.h"
#include "reply.h"
#include "structured.h"
#include "trace.h"

static const char *finish_str(int r)
{
    switch (r) {
    case PAGODA_FINISH_STOP: return "stop";
    case PAGODA_FINISH_LENGTH: return "length";
    case PAGODA_FINISH_CANCELLED: return "abort"; /* vLLM's word: OpenAI has none */
    case PAGODA_FINISH_ERROR: return "error";
    default: return NULL;
    }
}

static json_t *usage_json(hreq *hr)
{
    int64_t pt = 0, ct = 0, cached = 0, tier = 0;
    for (int i = 0; i < hr->n_choices; i++) {
        choice *c = &hr->choices[i];
        if (c->first_of_prompt) {
            pt += c->usage.prompt_tokens;
            cached += c->usage.cached_tokens;
            tier += c->tier_cached;
        }
        ct += c->usage.completion_tokens;
    }
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(pt));
    json_object_set_new(u, "completion_tokens", json_integer(ct));
    json_object_set_new(u, "total_tokens", json_integer(pt + ct));
    json_t *d = json_object();
    json_object_set_new(d, "cached_tokens", json_integer(cached));
    /* pagoda's: of those, read back from the prefix cache's disk tier */
    json_object_set_new(d, "tier_cached_tokens", json_integer(tier));
    json_object_set_new(u, "prompt_tokens_details", d);
    return u;
}

/* A logprob as JSON: -inf (a token the model rules out) is not a JSON
 * number, so it is written as -9999, as vLLM does. */
static json_t *lp_real(float v) { return json_real(isfinite(v) ? (double)v : -9999.0); }

static json_t *token_str(const pagoda_host *h, int32_t tok, json_t **bytes)
{
    char *t = h->token_text(h, tok);
    const char *s = t ? t : "";
    size_t n = strlen(s);
    if (bytes) {
        *bytes = json_array();
        for (size_t i = 0; i < n; i++) json_array_append_new(*bytes, json_integer((unsigned char)s[i]));
    }
    json_t *j = jstr(s, n);
    if (t) h->free(h, t);
    return j;
}

/* Append one token's logprobs to a choice's logprobs object (created on first use). */
static void add_logprobs(hreq *hr, json_t **lp, const ev_item *e, size_t text_offset)
{
    const pagoda_host *h = hr->fe->host;
    if (e->token < 0) return;
    if (hr->kind == KIND_CHAT) {
        if (!*lp) {
            *lp = json_object();
            json_object_set_new(*lp, "content", json_array());
        }
        json_t *bytes;
        json_t *ent = json_object();
        json_object_set_new(ent, "token", token_str(h, e->token, &bytes));
        json_object_set_new(ent, "logprob", lp_real(e->logprob));
        json_object_set_new(ent, "bytes", bytes);
        json_t *tops = json_array();
        for (int k = 0; k < e->n_top && k < hr->logprobs; k++) {
            json_t *t = json_object();
            json_t *tb;
            json_object_set_new(t, "token", token_str(h, e->top[k].token, &tb));
            json_object_set_new(t, "logprob", lp_real(e->top[k].logprob));
            json_object_set_new(t, "bytes", tb);
            json_array_append_new(tops, t);
        }
        json_object_set_new(ent, "top_logprobs", tops);
        json_array_append_new(json_object_get(*lp, "content"), ent);
    } else {
        if (!*lp) {
            *lp = json_object();
            json_object_set_new(*lp, "tokens", json_array());
            json_object_set_new(*lp, "token_logprobs", json_array());
            json_object_set_new(*lp, "top_logprobs", json_array());
            json_object_set_new(*lp, "text_offset", json_array());
        }
        json_array_append_new(json_object_get(*lp, "tokens"), token_str(h, e->token, NULL));
        json_array_append_new(json_object_get(*lp, "token_logprobs"), lp_real(e->logprob));
        json_t *tops = json_object();
        for (int k = 0; k < e->n_top && k < hr->logprobs; k++) {
            json_t *key = token_str(h, e->top[k].token, NULL);
            json_object_set_new(tops, json_string_value(key), lp_real(e->top[k].logprob));
            json_decref(key);
        }
        json_array_append_new(json_object_get(*lp, "top_logprobs"), tops);
        json_array_append_new(json_object_get(*lp, "text_offset"), json_integer((json_int_t)text_offset));
    }
}

/* A prompt token's entry (echo with logprobs; completions only): the
 * first token has nothing before it, so its logprob and its top list are
 * null, as in OpenAI's legacy API. Its text offset is counted in the
 * tokens' own text for now (answer_full maps it onto the echoed text). */
static void add_prompt_logprob(hreq *hr, choice *c, const ev_item *e)
{
    const pagoda_host *h = hr->fe->host;
    if (!c->lp) {
        c->lp = json_object();
        json_object_set_new(c->lp, "tokens", json_array());
        json_object_set_new(c->lp, "token_logprobs", json_array());
        json_object_set_new(c->lp, "top_logprobs", json_array());
        json_object_set_new(c->lp, "text_offset", json_array());
    }
    char *t = h->token_text(h, e->token);
    const char *piece = t ? t : "";
    json_array_append_new(json_object_get(c->lp, "tokens"), jstr(piece, strlen(piece)));
    json_array_append_new(json_object_get(c->lp, "text_offset"), json_integer((json_int_t)c->pieces.len));
    sb_str(&c->pieces, piece);
    if (t) h->free(h, t);
    bool first = e->position == 0 || e->logprob != e->logprob; /* NaN: nothing before it */
    json_array_append_new(json_object_get(c->lp, "token_logprobs"),
                          first ? json_null() : lp_real(e->logprob));
    json_t *tops = first ? json_null() : json_object();
    for (int k = 0; !first && k < e->n_top && k < hr->logprobs; k++) {
        json_t *key = token_str(h, e->top[k].token, NULL);
        json_object_set_new(tops, json_string_value(key), lp_real(e->top[k].logprob));
        json_decref(key);
    }
    json_array_append_new(json_object_get(c->lp, "top_logprobs"), tops);
    c->n_prompt_lp++;
}

/* The prompt entries' offsets, from the tokens' text onto the echoed text:
 * the same where they agree (byte-level BPE, token prompts); where the
 * tokens' text is the prompt with something in front (SentencePiece's
 * space prefix) they move back by that much; offsets stay within the
 * echoed text. */
static void map_prompt_offsets(choice *c)
{
    json_t *off = c->lp ? json_object_get(c->lp, "text_offset") : NULL;
    if (!off || !c->n_prompt_lp) return;
    size_t shift = 0;
    if (c->pieces.len > c->echo_len && c->echo &&
        !memcmp(c->pieces.p + c->pieces.len - c->echo_len, c->echo, c->echo_len))
        shift = c->pieces.len - c->echo_len;
    for (int k = 0; k < c->n_prompt_lp && k < (int)json_array_size(off); k++) {
        size_t o = (size_t)json_integer_value(json_array_get(off, (size_t)k));
        o = o > shift ? o - shift : 0;
        if (o > c->echo_len) o = c->echo_len;
        json_array_set_new(off, (size_t)k, json_integer((json_int_t)o));
    }
}

static json_t *base_obj(hreq *hr, const char *object)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(hr->id));
    json_object_set_new(o, "object", json_string(object));
    json_object_set_new(o, "created", json_integer((json_int_t)hr->created));
    json_object_set_new(o, "model", jstr(hr->model, strlen(hr->model)));
    json_object_set_new(o, "system_fingerprint", json_string("pagoda-" PAGODA_VERSION_STRING));
    return o;
}

/* Applies one event to its choice's accumulators (both modes). */
static void apply_event(hreq *hr, ev_item *e, json_t **chunk_lp)
{
    choice *c = &hr->choices[e->choice];
    if (e->type == PAGODA_EVENT_PROMPT) {
        /* only for echo, which is never streamed */
        if (hr->logprobs >= 0 && hr->kind == KIND_COMPLETION) add_prompt_logprob(hr, c, e);
    } else if (e->type == PAGODA_EVENT_TOKEN) {
        api_norm_event(c, e); /* the family's markup made canonical (api/toolfmt.h) */
        if (hr->logprobs >= 0 && e->token >= 0) add_logprobs(hr, chunk_lp ? chunk_lp : &c->lp, e, c->text_offset);
        if (!hr->stream && e->step) {
            if (!c->trace) c->trace = json_array();
            json_array_append_new(c->trace, trace_entry(hr->fe->host, e));
        }
        if (!hr->stream && e->text_len) sb_put(&c->text, e->text, e->text_len);
        c->text_offset += e->text_len;
    } else {
        if (!hr->stream) { /* what the normalizer held back ends the text */
            size_t n;
            char *rest = api_norm_end(c, &n);
            if (n) sb_put(&c->text, rest, n);
            free(rest);
        }
        c->finish_reason = e->finish_reason;
        c->usage = e->usage;
        c->tier_cached = e->tier_cached;
        if (e->error && !c->error) c->error = strdup(e->error);
    }
}

static void sse_put(hreq *hr, json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(o);
    if (!s) return;
    sb_str(&hr->out, "data: ");
    sb_str(&hr->out, s);
    sb_str(&hr->out, "\n\n");
    free(s);
}

void sse_chunk(hreq *hr, int index, json_t *delta, json_t *logprobs, const char *finish)
{
    int chat = hr->kind == KIND_CHAT;
    json_t *o = base_obj(hr, chat ? "chat.completion.chunk" : "text_completion");
    json_t *ch = json_object();
    json_object_set_new(ch, "index", json_integer(index));
    if (chat) {
        json_object_set_new(ch, "delta", delta);
    } else {
        json_t *t = json_object_get(delta, "content");
        json_object_set_new(ch, "text", t ? json_incref(t) : json_string(""));
        json_decref(delta);
    }
    json_object_set_new(ch, "logprobs", logprobs ? logprobs : json_null());
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    json_t *arr = json_array();
    json_array_append_new(arr, ch);
    json_object_set_new(o, "choices", arr);
    if (hr->include_usage) json_object_set_new(o, "usage", json_null());
    sse_put(hr, o);
}

/* One SSE chunk for an event; appended to hr->out. */
static void sse_event(hreq *hr, ev_item *e)
{
    if (e->type == PAGODA_EVENT_FINAL && hr->choices[e->choice].norm) {
        /* what the normalizer held back goes out as one more text event */
        ev_item t = {.choice = e->choice, .type = PAGODA_EVENT_TOKEN, .token = -1};
        t.text = api_norm_end(&hr->choices[e->choice], &t.text_len);
        if (t.text_len) sse_event(hr, &t);
        free(t.text);
    }
    json_t *lp = NULL;
    apply_event(hr, e, &lp);
    if (hr->as) { /* another API's events (api/api.h) */
        json_decref(lp);
        api_stream_event(hr, e);
        return;
    }
    if (hr->kind == KIND_CHAT && e->type == PAGODA_EVENT_TOKEN) reasoning_stream(hr, &hr->choices[e->choice], e);
    if (hr->kind == KIND_CHAT && e->type == PAGODA_EVENT_FINAL && e->finish_reason != PAGODA_FINISH_ERROR)
        reasoning_flush(hr, &hr->choices[e->choice]);
    if (e->type == PAGODA_EVENT_PROMPT) return; /* echo is never streamed */
    choice *c = &hr->choices[e->choice];
    if (hr->tools && e->type == PAGODA_EVENT_TOKEN) {
        /* tool calls are read out of the text (structured.c) */
        st_stream_text(hr, c, e->text, e->text_len, lp);
        return;
    }
    if (hr->tools && e->type == PAGODA_EVENT_FINAL && e->finish_reason != PAGODA_FINISH_ERROR) {
        const char *fr = st_stream_final(hr, c, finish_str(c->finish_reason));
        sse_chunk(hr, e->choice, json_object(), NULL, fr);
        json_decref(lp);
        return;
    }
    if (e->type == PAGODA_EVENT_TOKEN && !e->text_len && !lp && !e->step) return; /* held-back text */
    json_t *o;
    if (e->type == PAGODA_EVENT_FINAL && e->finish_reason == PAGODA_FINISH_ERROR) {
        o = error_json("server_error", c->error ? c->error : "generation failed", NULL, NULL);
    } else {
        int chat = hr->kind == KIND_CHAT;
        o = base_obj(hr, chat ? "chat.completion.chunk" : "text_completion");
        json_t *ch = json_object();
        json_object_set_new(ch, "index", json_integer(e->choice));
        if (e->type == PAGODA_EVENT_TOKEN) {
            json_t *t = jstr(e->text, e->text_len);
            if (chat) {
                json_t *delta = json_object();
                json_object_set_new(delta, "content", t);
                json_object_set_new(ch, "delta", delta);
            } else {
                json_object_set_new(ch, "text", t);
            }
            json_object_set_new(ch, "logprobs", lp ? lp : json_null());
            lp = NULL;
            json_object_set_new(ch, "finish_reason", json_null());
            if (e->step) json_object_set_new(ch, "pagoda_trace", trace_entry(hr->fe->host, e));
        } else {
            if (chat) json_object_set_new(ch, "delta", json_object());
            else json_object_set_new(ch, "text", json_string(""));
            json_object_set_new(ch, "logprobs", json_null());
            const char *fr = finish_str(c->finish_reason);
            json_object_set_new(ch, "finish_reason", fr ? json_string(fr) : json_null());
        }
        json_t *arr = json_array();
        json_array_append_new(arr, ch);
        json_object_set_new(o, "choices", arr);
        if (hr->include_usage) json_object_set_new(o, "usage", json_null());
    }
    json_decref(lp);
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(o);
    if (!s) return;
    sb_str(&hr->out, "data: ");
    sb_str(&hr->out, s);
    sb_str(&hr->out, "\n\n");
    free(s);
}

void sse_role_chunks(hreq *hr)
{
    for (int i = 0; i < hr->n_choices; i++) {
        json_t *o = base_obj(hr, "chat.completion.chunk");
        json_t *ch = json_object();
        json_object_set_new(ch, "index", json_integer(i));
        json_t *delta = json_object();
        json_object_set_new(delta, "role", json_string("assistant"));
        json_object_set_new(delta, "content", json_string(""));
        json_object_set_new(ch, "delta", delta);
        json_object_set_new(ch, "logprobs", json_null());
        json_object_set_new(ch, "finish_reason", json_null());
        json_t *arr = json_array();
        json_array_append_new(arr, ch);
        json_object_set_new(o, "choices", arr);
        if (hr->include_usage) json_object_set_new(o, "usage", json_null());
        char *s = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        if (!s) continue;
        sb_str(&hr->out, "data: ");
        sb_str(&hr->out, s);
        sb_str(&hr->out, "\n\n");
        free(s);
    }
}

static void sse_tail(hreq *hr)
{
    if (hr->as) {
        api_stream_tail(hr);
        return;
    }
    if (hr->include_usage) {
        json_t *o = base_obj(hr, hr->kind == KIND_CHAT ? "chat.completion.chunk" : "text_completion");
        json_object_set_new(o, "choices", json_array());
        json_object_set_new(o, "usage", usage_json(hr));
        char *s = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        if (s) {
            sb_str(&hr->out, "data: ");
            sb_str(&hr->out, s);
            sb_str(&hr->out, "\n\n");
            free(s);
        }
    }
    sb_str(&hr->out, "data: [DONE]\n\n");
}

/* [connection thread] MHD pulls the stream from here; blocking is fine in
 * thread-per-connection mode. */
ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    hreq *hr = cls;
    pthread_mutex_lock(&hr->mu);
    for (;;) {
        if (hr->out.len > hr->out_pos) {
            size_t n = hr->out.len - hr->out_pos;
            if (n > max) n = max;
            memcpy(buf, hr->out.p + hr->out_pos, n);
            hr->out_pos += n;
            if (hr->out_pos == hr->out.len) hr->out_pos = hr->out.len = 0;
            pthread_mutex_unlock(&hr->mu);
            return (ssize_t)n;
        }
        if (hr->eos || hr->gone) {
            int gone = hr->gone;
            pthread_mutex_unlock(&hr->mu);
            return gone ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (hr->head) {
            ev_item *list = hr->head;
            hr->head = hr->tail = NULL;
            pthread_mutex_unlock(&hr->mu);
            /* format outside the lock: token_text may take the tokenizer's */
            sbuf tmp = {0};
            sbuf keep = hr->out;
            hr->out = tmp;
            for (ev_item *e = list, *n; e; e = n) {
                n = e->next;
                sse_event(hr, e);
                ev_free(e);
            }
            tmp = hr->out;
            hr->out = keep;
            pthread_mutex_lock(&hr->mu);
            if (tmp.len) sb_put(&hr->out, tmp.p, tmp.len);
            free(tmp.p);
            continue;
        }
        if (hr->finals_pending == 0) {
            sse_tail(hr);
            hr->eos = 1;
            continue;
        }
        struct timespec dl;
        deadline_in(&dl, POLL_MS);
        pthread_cond_timedwait(&hr->cv, &hr->mu, &dl);
        if (check_due(&hr->next_check)) {
            pthread_mutex_unlock(&hr->mu);
            int gone = peer_gone(hr->sock);
            if (gone) hreq_cancel(hr);
            pthread_mutex_lock(&hr->mu);
            if (gone) hr->gone = 1;
        }
    }
}

void sse_free(void *cls) { hreq_release(cls); }

/* [connection thread] Wait for every FINAL, watching the client meanwhile.
 * Returns 0, or -1 when the client went away (its requests are cancelled). */
int wait_finals(hreq *hr)
{
    int gone = 0;
    int64_t next = now_ms() + POLL_MS;
    pthread_mutex_lock(&hr->mu);
    while (hr->finals_pending > 0) {
        struct timespec dl;
        deadline_in(&dl, POLL_MS);
        pthread_cond_timedwait(&hr->cv, &hr->mu, &dl);
        if (!gone && check_due(&next)) {
            pthread_mutex_unlock(&hr->mu);
            if (peer_gone(hr->sock)) {
                gone = 1;
                hreq_cancel(hr);
            }
            pthread_mutex_lock(&hr->mu);
        }
    }
    ev_item *list = hr->head;
    hr->head = hr->tail = NULL;
    pthread_mutex_unlock(&hr->mu);
    for (ev_item *e = list, *n; e; e = n) {
        n = e->next;
        if (!gone) apply_event(hr, e, NULL);
        ev_free(e);
    }
    return gone ? -1 : 0;
}

/* A choice cut short (cancelled, shutdown included) is answered like a
 * stream ends: 200, the text so far, finish_reason "abort"; a 503 would
 * throw away text the client paid for, and a stream cannot take back its
 * 200 either. Only an engine error fails the whole answer. */
enum MHD_Result answer_full(struct MHD_Connection *conn, hreq *hr)
{
    int chat = hr->kind == KIND_CHAT;
    for (int i = 0; i < hr->n_choices; i++) {
        choice *c = &hr->choices[i];
        if (c->finish_reason == PAGODA_FINISH_ERROR)
            return send_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "server_error", NULL, NULL,
                              "generation failed: %s", c->error ? c->error : "unknown error");
    }
    json_t *o = base_obj(hr, chat ? "chat.completion" : "text_completion");
    json_t *arr = json_array();
    for (int i = 0; i < hr->n_choices; i++) {
        choice *c = &hr->choices[i];
        json_t *ch = json_object();
        json_object_set_new(ch, "index", json_integer(i));
        const char *fr = finish_str(c->finish_reason);
        json_t *rs = chat ? reasoning_take(hr, c) : NULL; /* c->text is the answer after it */
        if (chat && hr->tools) {
            json_object_set_new(ch, "message", st_message(hr, c, &fr));
        } else if (chat) {
            json_t *msg = json_object();
            json_object_set_new(msg, "role", json_string("assistant"));
            json_object_set_new(msg, "content", jstr(c->text.p, c->text.len));
            json_object_set_new(ch, "message", msg);
        } else {
            json_object_set_new(ch, "text", jstr(c->text.p, c->text.len));
        }
        if (rs) {
            json_object_set(json_object_get(ch, "message"), "reasoning_content", rs);
            json_object_set_new(json_object_get(ch, "message"), "reasoning", rs);
        }
        map_prompt_offsets(c);
        if (hr->logprobs >= 0 && !c->lp) {
            /* requested but no token came: an empty structure, not null */
            c->lp = json_object();
            if (chat) json_object_set_new(c->lp, "content", json_array());
        }
        json_object_set_new(ch, "logprobs", c->lp ? json_incref(c->lp) : json_null());
        json_object_set_new(ch, "finish_reason", fr ? json_string(fr) : json_null());
        if (hr->trace) json_object_set_new(ch, "pagoda_trace", c->trace ? json_incref(c->trace) : json_array());
        json_array_append_new(arr, ch);
    }
    json_object_set_new(o, "choices", arr);
    json_object_set_new(o, "usage", usage_json(hr));
    return send_json(conn, MHD_HTTP_OK, o);
}
