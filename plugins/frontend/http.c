/*
 * http.c: the HTTP frontend (`frontend = http`): an OpenAI-compatible server
 * on libmicrohttpd + jansson. /v1/completions and /v1/chat/completions
 * (streaming as server-sent events or one JSON answer), /v1/models,
 * /tokenize, /detokenize, /health, /metrics, /v1/memory.
 * Not for: tokenizing, templates or sampling: all of that is the engine's,
 * reached through the host table.
 *
 * Threading: MHD runs one thread per connection (MHD_USE_THREAD_PER_CONNECTION),
 * so a handler may block: a non-streaming request waits in its handler for
 * its FINAL events, a streaming one blocks in the content reader until the
 * next event. The engine's callback never blocks: it copies the event onto
 * the request's queue under the request's mutex and signals. While waiting,
 * a thread peeks at its socket every POLL_MS so a client that went away
 * cancels its requests even when no byte is being written.
 *
 * Lifetime: a request's state (hreq) is reference counted: one reference for
 * the MHD connection (dropped in the completion notice), one for a streaming
 * response (dropped when MHD frees it), and one per engine submission
 * (dropped after its FINAL). It is freed when the last one goes, so a FINAL
 * arriving after the client left finds valid memory.
 *
 * Lock order: fe->mu before hr->mu; host->submit and host->cancel are never
 * called with either held (the engine may be inside our callback waiting
 * for hr->mu).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "pagoda/pagoda.h"
#include "request_fields.h"

#ifndef PAGODA_VERSION_STRING
#define PAGODA_VERSION_STRING "0.1.0"
#endif

#define POLL_MS 100            /* how often a waiting thread checks its client */
#define MAX_STOP RF_MAX_STOP
#define MAX_CHOICES 256        /* prompts x n */
#define DRAIN_GRACE_S 10       /* after the last FINAL, time given to responses in flight */

/* ------------------------------------------------------------- helpers */

/* sbuf, sb_put, sb_str: request_fields.h */

/* Bytes as a JSON string; invalid UTF-8 (a partial token text) becomes U+FFFD. */
static json_t *jstr(const char *s, size_t n)
{
    json_t *j = json_stringn(s ? s : "", s ? n : 0);
    if (j) return j;
    sbuf b = {0};
    size_t i = 0;
    const unsigned char *u = (const unsigned char *)s;
    while (i < n) {
        unsigned c = u[i];
        size_t len = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3
                                                                 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        int ok = len > 0 && i + len <= n;
        for (size_t k = 1; ok && k < len; k++)
            if ((u[i + k] & 0xC0) != 0x80) ok = 0;
        if (ok && len == 3) {
            if (c == 0xE0 && u[i + 1] < 0xA0) ok = 0;       /* overlong */
            if (c == 0xED && u[i + 1] >= 0xA0) ok = 0;      /* surrogate */
        }
        if (ok && len == 4) {
            if (c == 0xF0 && u[i + 1] < 0x90) ok = 0;       /* overlong */
            if (c == 0xF4 && u[i + 1] >= 0x90) ok = 0;      /* > U+10FFFF */
        }
        if (ok) {
            sb_put(&b, s + i, len);
            i += len;
        } else {
            sb_put(&b, "\xEF\xBF\xBD", 3);
            i++;
        }
    }
    j = json_stringn(b.p ? b.p : "", b.len);
    free(b.p);
    return j ? j : json_string("");
}

static uint64_t splitmix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

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

/* -------------------------------------------------------------- state */

typedef struct http_fe http_fe;
typedef struct hreq hreq;

/* A copy of one engine event, made on the engine thread. */
typedef struct ev_item {
    struct ev_item *next;
    int choice;
    int type;
    char *text;
    size_t text_len;
    int32_t token;
    float logprob;
    int n_top;
    pagoda_top_logprob top[PAGODA_MAX_TOP_LOGPROBS];
    int finish_reason;
    char *error;
    pagoda_usage usage;
} ev_item;

typedef struct choice {
    hreq *hr;
    int index;
    int first_of_prompt;     /* counts the prompt in usage (once per prompt, not per n) */
    uint64_t id;
    int submitted, id_known, final;
    int cancel_sent;         /* cancel once, however many paths notice the client left */
    /* filled on the HTTP thread from the events */
    sbuf text;
    int finish_reason;
    char *error;
    pagoda_usage usage;
    json_t *lp;              /* logprobs accumulated (non-streaming) */
    size_t text_offset;
} choice;

enum { KIND_COMPLETION = 1, KIND_CHAT = 2 };

struct hreq {
    http_fe *fe;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    int kind;
    int stream, include_usage;
    int logprobs;            /* -1: none; else top count (chat: top_logprobs) */
    int n_choices;
    choice *choices;
    int finals_pending;
    ev_item *head, *tail;
    char id[48];
    char model[128];
    time_t created;
    int sock;
    int gone;                /* the client left: requests cancelled */
    int64_t next_check;      /* when to peek at the socket next (monotonic ms) */
    /* streaming output, touched only by the connection's thread */
    sbuf out;
    size_t out_pos;
    int eos;
    hreq *prev, *next;       /* fe->list */
};

struct http_fe {
    const pagoda_host *host;
    char bind_host[256];
    int port;
    char api_key[256];
    int64_t max_body;
    int threads;
    int timeout_s;
    char port_file[1024];
    char served_name[128];

    struct MHD_Daemon *d;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop_req;
    int running;
    int inflight;            /* submissions without their FINAL */
    int live;                /* hreqs not yet freed */
    hreq *list;
    atomic_uint_fast64_t seq;
    time_t started;
};

typedef struct conn_state {
    sbuf body;
    int too_large;
    int route;
    hreq *hr;
} conn_state;

static void ev_free(ev_item *e)
{
    free(e->text);
    free(e->error);
    free(e);
}

static void hreq_free(hreq *hr)
{
    for (ev_item *e = hr->head, *n; e; e = n) {
        n = e->next;
        ev_free(e);
    }
    for (int i = 0; i < hr->n_choices; i++) {
        free(hr->choices[i].text.p);
        free(hr->choices[i].error);
        json_decref(hr->choices[i].lp);
    }
    free(hr->choices);
    free(hr->out.p);
    pthread_mutex_destroy(&hr->mu);
    pthread_cond_destroy(&hr->cv);
    free(hr);
}

static void hreq_release(hreq *hr)
{
    pthread_mutex_lock(&hr->mu);
    int left = --hr->refs;
    pthread_mutex_unlock(&hr->mu);
    if (left > 0) return;
    http_fe *fe = hr->fe;
    pthread_mutex_lock(&fe->mu);
    if (hr->prev) hr->prev->next = hr->next;
    else fe->list = hr->next;
    if (hr->next) hr->next->prev = hr->prev;
    fe->live--;
    pthread_cond_broadcast(&fe->cv);
    pthread_mutex_unlock(&fe->mu);
    hreq_free(hr);
}

static hreq *hreq_new(http_fe *fe, int kind, int n_choices)
{
    hreq *hr = calloc(1, sizeof *hr);
    if (!hr) return NULL;
    hr->choices = calloc((size_t)n_choices, sizeof *hr->choices);
    if (!hr->choices) {
        free(hr);
        return NULL;
    }
    hr->fe = fe;
    hr->kind = kind;
    hr->n_choices = n_choices;
    hr->refs = 1; /* the connection's */
    hr->logprobs = -1;
    hr->sock = -1;
    pthread_mutex_init(&hr->mu, NULL);
    pthread_cond_init(&hr->cv, NULL);
    for (int i = 0; i < n_choices; i++) {
        hr->choices[i].hr = hr;
        hr->choices[i].index = i;
    }
    uint64_t a = splitmix(atomic_fetch_add(&fe->seq, 1) ^ (uint64_t)time(NULL) << 20);
    uint64_t b = splitmix(a ^ (uint64_t)(uintptr_t)hr);
    snprintf(hr->id, sizeof hr->id, "%s-%016llx%016llx", kind == KIND_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)a, (unsigned long long)b);
    hr->created = time(NULL);
    pthread_mutex_lock(&fe->mu);
    hr->next = fe->list;
    if (fe->list) fe->list->prev = hr;
    fe->list = hr;
    fe->live++;
    pthread_mutex_unlock(&fe->mu);
    return hr;
}

/* [engine thread] Copy the event and wake the connection's thread. */
static void on_event(void *user, const pagoda_event *ev)
{
    choice *ch = user;
    hreq *hr = ch->hr;
    http_fe *fe = hr->fe;
    ev_item *e = calloc(1, sizeof *e);
    int final = ev->type == PAGODA_EVENT_FINAL;
    if (e) {
        e->choice = ch->index;
        e->type = ev->type;
        if (ev->text_len) {
            e->text = malloc(ev->text_len + 1);
            if (e->text) {
                memcpy(e->text, ev->text, ev->text_len);
                e->text[ev->text_len] = 0;
                e->text_len = ev->text_len;
            }
        }
        e->token = ev->token;
        e->logprob = ev->logprob;
        e->n_top = ev->n_top < 0 ? 0 : ev->n_top > PAGODA_MAX_TOP_LOGPROBS ? PAGODA_MAX_TOP_LOGPROBS : ev->n_top;
        if (e->n_top && ev->top) memcpy(e->top, ev->top, sizeof(*e->top) * (size_t)e->n_top);
        else e->n_top = 0;
        e->finish_reason = ev->finish_reason;
        if (ev->error) e->error = strdup(ev->error);
        e->usage = ev->usage;
    }
    pthread_mutex_lock(&hr->mu);
    if (e) {
        if (hr->tail) hr->tail->next = e;
        else hr->head = e;
        hr->tail = e;
    }
    if (final) {
        ch->final = 1;
        hr->finals_pending--;
        if (!e) { /* out of memory: still record how it ended */
            ch->finish_reason = PAGODA_FINISH_ERROR;
        }
    }
    pthread_cond_broadcast(&hr->cv);
    pthread_mutex_unlock(&hr->mu);
    if (final) {
        /* release first: run() waits for inflight == 0, so fe must not be
         * touched after that count drops */
        hreq_release(hr);
        pthread_mutex_lock(&fe->mu);
        fe->inflight--;
        pthread_cond_broadcast(&fe->cv);
        pthread_mutex_unlock(&fe->mu);
    }
}

/* Cancel every submission of hr that has no FINAL yet. */
static void hreq_cancel(hreq *hr)
{
    uint64_t ids[MAX_CHOICES];
    int n = 0;
    pthread_mutex_lock(&hr->mu);
    for (int i = 0; i < hr->n_choices; i++) {
        choice *c = &hr->choices[i];
        if (c->id_known && !c->final && !c->cancel_sent) {
            c->cancel_sent = 1;
            ids[n++] = c->id;
        }
    }
    pthread_mutex_unlock(&hr->mu);
    for (int i = 0; i < n; i++) hr->fe->host->cancel(hr->fe->host, ids[i]);
}

/* Has the peer closed its end? A pending next request (pipelining) reads as alive. */
static int peer_gone(int fd)
{
    if (fd < 0) return 0;
    char c;
    ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0) return 1;
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return 1;
    return 0;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Time to peek at the client again? Events wake a waiter far more often than
 * POLL_MS, so this goes by the clock, not by the wait timing out. */
static int check_due(int64_t *next)
{
    int64_t t = now_ms();
    if (t < *next) return 0;
    *next = t + POLL_MS;
    return 1;
}

static void deadline_in(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_nsec += (long)ms * 1000000L;
    ts->tv_sec += ts->tv_nsec / 1000000000L;
    ts->tv_nsec %= 1000000000L;
}

/* ------------------------------------------------------------ responses */

static enum MHD_Result send_body(struct MHD_Connection *c, unsigned status, const char *ctype,
                                 char *body, size_t len)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* Sends j (reference stolen), with one extra header when hname is set. */
static enum MHD_Result send_json_hdr(struct MHD_Connection *c, unsigned status, json_t *j,
                                     const char *hname, const char *hval)
{
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(j);
    if (!s) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(s);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (hname) MHD_add_response_header(r, hname, hval);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *j)
{
    return send_json_hdr(c, status, j, NULL, NULL);
}

static json_t *error_json(const char *type, const char *msg, const char *param, const char *code)
{
    json_t *e = json_object();
    json_object_set_new(e, "message", jstr(msg, strlen(msg)));
    json_object_set_new(e, "type", json_string(type));
    json_object_set_new(e, "param", param ? json_string(param) : json_null());
    json_object_set_new(e, "code", code ? json_string(code) : json_null());
    json_t *o = json_object();
    json_object_set_new(o, "error", e);
    return o;
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *type,
                                  const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *type,
                                  const char *param, const char *code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return send_json(c, status, error_json(type, msg, param, code));
}

#define BAD(c, param, ...) send_error(c, MHD_HTTP_BAD_REQUEST, "invalid_request_error", param, NULL, __VA_ARGS__)

/* ----------------------------------------------------- request parsing */

/* perr, fail, get_num, get_int, get_bool, rf_parse_sampling: request_fields.h */

/* Sampling fields shared by both endpoints, into req (already defaulted). */
typedef struct params {
    pagoda_request req;
    const char *stop[MAX_STOP];
    int n;
    int stream, include_usage;
    int logprobs;
} params;

static int parse_common(const pagoda_host *h, json_t *o, int kind, params *p, perr *pe)
{
    int64_t i = 0;
    int b = 0, r;
    h->request_defaults(h, &p->req);
    p->req.struct_size = sizeof p->req;
    p->n = 1;
    p->logprobs = -1;

    json_t *model = json_object_get(o, "model");
    if (model && !json_is_null(model) && !json_is_string(model))
        return fail(pe, "model", "'model' must be a string");
    if (rf_parse_sampling(o, &p->req, p->stop, pe) < 0) return -1;
    /* max_completion_tokens is the newer name and wins when both are given. */
    if ((r = get_int(o, "max_completion_tokens", 1, INT32_MAX, &i, pe)) < 0) return -1;
    if (r) p->req.max_tokens = (int32_t)i;
    if ((r = get_int(o, "n", 1, 16, &i, pe)) < 0) return -1;
    if (r) p->n = (int)i;

    if ((r = get_bool(o, "stream", &b, pe)) < 0) return -1;
    if (r) p->stream = b;
    json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return fail(pe, "stream_options", "'stream_options' must be an object");
        if ((r = get_bool(so, "include_usage", &b, pe)) < 0) return -1;
        if (r) p->include_usage = b;
    }

    if (kind == KIND_COMPLETION) {
        if ((r = get_int(o, "logprobs", 0, PAGODA_MAX_TOP_LOGPROBS, &i, pe)) < 0) return -1;
        if (r) p->logprobs = (int)i;
    } else {
        int want = 0;
        if ((r = get_bool(o, "logprobs", &want, pe)) < 0) return -1;
        int64_t top = 0;
        if ((r = get_int(o, "top_logprobs", 0, PAGODA_MAX_TOP_LOGPROBS, &top, pe)) < 0) return -1;
        if (r && !want) return fail(pe, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        if (want) p->logprobs = (int)top;
    }
    p->req.logprobs = p->logprobs;
    return 0;
}

/* One prompt of a completion request: text or token ids (pointers into the JSON). */
typedef struct prompt_in {
    const char *text;
    size_t len;
    int32_t *tokens;
    int n_tokens;
} prompt_in;

static int token_array(json_t *a, prompt_in *pi, perr *pe)
{
    size_t k;
    json_t *t;
    pi->n_tokens = (int)json_array_size(a);
    pi->tokens = malloc(sizeof(int32_t) * (json_array_size(a) + 1));
    if (!pi->tokens) return fail(pe, "prompt", "out of memory");
    json_array_foreach(a, k, t) {
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
            return fail(pe, "prompt", "token ids in 'prompt' must be integers in [0, %d]", INT32_MAX);
        pi->tokens[k] = (int32_t)json_integer_value(t);
    }
    return 0;
}

/* prompt: a string, a list of strings, a list of token ids, or a list of such lists. */
static int parse_prompts(json_t *o, prompt_in **out, int *n, perr *pe)
{
    json_t *p = json_object_get(o, "prompt");
    *out = NULL;
    *n = 0;
    if (!p || json_is_null(p)) return fail(pe, "prompt", "'prompt' is required");
    if (json_is_string(p)) {
        *out = calloc(1, sizeof **out);
        (*out)[0].text = json_string_value(p);
        (*out)[0].len = json_string_length(p);
        *n = 1;
        return 0;
    }
    if (!json_is_array(p) || json_array_size(p) == 0)
        return fail(pe, "prompt", "'prompt' must be a string, a non-empty list of strings, or token ids");
    size_t np = json_array_size(p);
    json_t *first = json_array_get(p, 0);
    if (json_is_integer(first)) {
        *out = calloc(1, sizeof **out);
        *n = 1;
        return token_array(p, &(*out)[0], pe);
    }
    if (np > MAX_CHOICES) return fail(pe, "prompt", "'prompt' takes at most %d prompts", MAX_CHOICES);
    *out = calloc(np, sizeof **out);
    *n = (int)np;
    size_t k;
    json_t *e;
    json_array_foreach(p, k, e) {
        if (json_is_string(e)) {
            (*out)[k].text = json_string_value(e);
            (*out)[k].len = json_string_length(e);
        } else if (json_is_array(e) && json_array_size(e) > 0) {
            if (token_array(e, &(*out)[k], pe) < 0) return -1;
        } else {
            return fail(pe, "prompt", "'prompt' list entries must all be strings or all lists of token ids");
        }
    }
    return 0;
}

static void free_prompts(prompt_in *ps, int n)
{
    for (int i = 0; ps && i < n; i++) free(ps[i].tokens);
    free(ps);
}

/* messages -> chat messages; contents built from text parts are malloc'd into owned[]. */
static int parse_messages(json_t *o, pagoda_chat_message **out, char ***owned, int *n, perr *pe)
{
    json_t *m = json_object_get(o, "messages");
    *out = NULL;
    *owned = NULL;
    *n = 0;
    if (!m || !json_is_array(m) || json_array_size(m) == 0)
        return fail(pe, "messages", "'messages' must be a non-empty list of {role, content}");
    size_t nm = json_array_size(m);
    *out = calloc(nm, sizeof **out);
    *owned = calloc(nm, sizeof **owned);
    *n = (int)nm;
    if (!*out || !*owned) return fail(pe, "messages", "out of memory");
    size_t k;
    json_t *e;
    json_array_foreach(m, k, e) {
        json_t *role = json_object_get(e, "role");
        json_t *content = json_object_get(e, "content");
        if (!json_is_object(e) || !json_is_string(role))
            return fail(pe, "messages", "messages[%zu] must be an object with a string 'role'", k);
        (*out)[k].role = json_string_value(role);
        if (!content || json_is_null(content)) {
            (*out)[k].content = "";
        } else if (json_is_string(content)) {
            (*out)[k].content = json_string_value(content);
        } else if (json_is_array(content)) {
            sbuf b = {0};
            size_t j;
            json_t *part;
            sb_str(&b, "");
            json_array_foreach(content, j, part) {
                json_t *type = json_object_get(part, "type");
                json_t *text = json_object_get(part, "text");
                if (!json_is_string(type) || strcmp(json_string_value(type), "text") || !json_is_string(text)) {
                    free(b.p);
                    return fail(pe, "messages", "messages[%zu].content[%zu]: only {\"type\": \"text\", "
                                "\"text\": ...} parts are supported", k, j);
                }
                sb_str(&b, json_string_value(text));
            }
            (*owned)[k] = b.p;
            (*out)[k].content = b.p;
        } else {
            return fail(pe, "messages", "messages[%zu].content must be a string or a list of text parts", k);
        }
    }
    return 0;
}

/* ---------------------------------------------------------- formatting */

static json_t *usage_json(hreq *hr)
{
    int64_t pt = 0, ct = 0, cached = 0;
    for (int i = 0; i < hr->n_choices; i++) {
        choice *c = &hr->choices[i];
        if (c->first_of_prompt) {
            pt += c->usage.prompt_tokens;
            cached += c->usage.cached_tokens;
        }
        ct += c->usage.completion_tokens;
    }
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(pt));
    json_object_set_new(u, "completion_tokens", json_integer(ct));
    json_object_set_new(u, "total_tokens", json_integer(pt + ct));
    json_t *d = json_object();
    json_object_set_new(d, "cached_tokens", json_integer(cached));
    json_object_set_new(u, "prompt_tokens_details", d);
    return u;
}

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
        json_object_set_new(ent, "logprob", json_real(e->logprob));
        json_object_set_new(ent, "bytes", bytes);
        json_t *tops = json_array();
        for (int k = 0; k < e->n_top && k < hr->logprobs; k++) {
            json_t *t = json_object();
            json_t *tb;
            json_object_set_new(t, "token", token_str(h, e->top[k].token, &tb));
            json_object_set_new(t, "logprob", json_real(e->top[k].logprob));
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
        json_array_append_new(json_object_get(*lp, "token_logprobs"), json_real(e->logprob));
        json_t *tops = json_object();
        for (int k = 0; k < e->n_top && k < hr->logprobs; k++) {
            json_t *key = token_str(h, e->top[k].token, NULL);
            json_object_set_new(tops, json_string_value(key), json_real(e->top[k].logprob));
            json_decref(key);
        }
        json_array_append_new(json_object_get(*lp, "top_logprobs"), tops);
        json_array_append_new(json_object_get(*lp, "text_offset"), json_integer((json_int_t)text_offset));
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
    if (e->type == PAGODA_EVENT_TOKEN) {
        if (hr->logprobs >= 0) add_logprobs(hr, chunk_lp ? chunk_lp : &c->lp, e, c->text_offset);
        if (!hr->stream && e->text_len) sb_put(&c->text, e->text, e->text_len);
        c->text_offset += e->text_len;
    } else {
        c->finish_reason = e->finish_reason;
        c->usage = e->usage;
        if (e->error && !c->error) c->error = strdup(e->error);
    }
}

/* One SSE chunk for an event; appended to hr->out. */
static void sse_event(hreq *hr, ev_item *e)
{
    json_t *lp = NULL;
    apply_event(hr, e, &lp);
    if (e->type == PAGODA_EVENT_TOKEN && !e->text_len && !lp) return; /* held-back text */
    choice *c = &hr->choices[e->choice];
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

static void sse_role_chunks(hreq *hr)
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
static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max)
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

static void sse_free(void *cls) { hreq_release(cls); }

/* [connection thread] Wait for every FINAL, watching the client meanwhile.
 * Returns 0, or -1 when the client went away (its requests are cancelled). */
static int wait_finals(hreq *hr)
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

static enum MHD_Result answer_full(struct MHD_Connection *conn, hreq *hr)
{
    int chat = hr->kind == KIND_CHAT;
    for (int i = 0; i < hr->n_choices; i++) {
        choice *c = &hr->choices[i];
        if (c->finish_reason == PAGODA_FINISH_ERROR)
            return send_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "server_error", NULL, NULL,
                              "generation failed: %s", c->error ? c->error : "unknown error");
        if (c->finish_reason == PAGODA_FINISH_CANCELLED && hr->fe->host->shutting_down(hr->fe->host))
            return send_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "server_error", NULL, NULL,
                              "the server is shutting down");
    }
    json_t *o = base_obj(hr, chat ? "chat.completion" : "text_completion");
    json_t *arr = json_array();
    for (int i = 0; i < hr->n_choices; i++) {
        choice *c = &hr->choices[i];
        json_t *ch = json_object();
        json_object_set_new(ch, "index", json_integer(i));
        json_t *t = jstr(c->text.p, c->text.len);
        if (chat) {
            json_t *msg = json_object();
            json_object_set_new(msg, "role", json_string("assistant"));
            json_object_set_new(msg, "content", t);
            json_object_set_new(ch, "message", msg);
        } else {
            json_object_set_new(ch, "text", t);
        }
        if (hr->logprobs >= 0 && !c->lp) {
            /* requested but no token came: an empty structure, not null */
            c->lp = json_object();
            if (chat) json_object_set_new(c->lp, "content", json_array());
        }
        json_object_set_new(ch, "logprobs", c->lp ? json_incref(c->lp) : json_null());
        const char *fr = finish_str(c->finish_reason);
        json_object_set_new(ch, "finish_reason", fr ? json_string(fr) : json_null());
        json_array_append_new(arr, ch);
    }
    json_object_set_new(o, "choices", arr);
    json_object_set_new(o, "usage", usage_json(hr));
    return send_json(conn, MHD_HTTP_OK, o);
}

/* ------------------------------------------------------------- routes */

static enum MHD_Result submit_error(struct MHD_Connection *conn, int st, const char *err)
{
    switch (st) {
    case PAGODA_ERR_INVALID:
        return send_error(conn, MHD_HTTP_BAD_REQUEST, "invalid_request_error", NULL, NULL, "%s",
                          err[0] ? err : "invalid request");
    case PAGODA_ERR_NOSPACE:
        return send_error(conn, MHD_HTTP_TOO_MANY_REQUESTS, "rate_limit_error", NULL, "queue_full",
                          "%s", err[0] ? err : "the request queue is full, retry later");
    case PAGODA_ERR_STATE:
        return send_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "server_error", NULL, NULL, "%s",
                          err[0] ? err : "the server is shutting down");
    default:
        return send_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "server_error", NULL, NULL,
                          "submit failed: %s%s%s", pagoda_status_str(st), err[0] ? ": " : "", err);
    }
}

static enum MHD_Result route_generate(http_fe *fe, struct MHD_Connection *conn, conn_state *cs,
                                      int kind)
{
    const pagoda_host *h = fe->host;
    json_error_t jerr;
    perr pe = {{0}, {0}};
    prompt_in *prompts = NULL;
    int n_prompts = 0;
    pagoda_chat_message *msgs = NULL;
    char **owned = NULL;
    int n_msgs = 0;
    char *rendered = NULL;
    int32_t stop_ids[16];
    int32_t n_stop_ids = 0;
    enum MHD_Result ret;
    params p;
    memset(&p, 0, sizeof p);

    json_t *root = json_loadb(cs->body.p ? cs->body.p : "", cs->body.len, 0, &jerr);
    if (!root) {
        ret = BAD(conn, NULL, "malformed JSON body: %s (line %d, column %d)", jerr.text, jerr.line,
                  jerr.column);
        goto out;
    }
    if (!json_is_object(root)) {
        ret = BAD(conn, NULL, "the body must be a JSON object");
        goto out;
    }
    if (parse_common(h, root, kind, &p, &pe) < 0) goto bad;
    if (kind == KIND_COMPLETION) {
        if (parse_prompts(root, &prompts, &n_prompts, &pe) < 0) goto bad;
    } else {
        if (parse_messages(root, &msgs, &owned, &n_msgs, &pe) < 0) goto bad;
        if (!h->chat_render) {
            ret = BAD(conn, "messages", "this server cannot render chat templates");
            goto out;
        }
        int st = h->chat_render(h, msgs, n_msgs, true, &rendered, stop_ids, 16, &n_stop_ids);
        if (st != PAGODA_OK || !rendered) {
            ret = BAD(conn, "messages", "the chat template could not be rendered: %s (does the model "
                      "have a chat template?)", pagoda_status_str(st));
            goto out;
        }
        if (n_stop_ids > 16) n_stop_ids = 16;
        n_prompts = 1;
    }
    if (n_prompts * p.n > MAX_CHOICES) {
        ret = BAD(conn, "n", "prompts x n must be at most %d, got %d", MAX_CHOICES, n_prompts * p.n);
        goto out;
    }
    if (h->shutting_down(h)) {
        ret = send_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "server_error", NULL, NULL,
                         "the server is shutting down");
        goto out;
    }

    hreq *hr = hreq_new(fe, kind, n_prompts * p.n);
    if (!hr) {
        ret = MHD_NO;
        goto out;
    }
    cs->hr = hr;
    hr->stream = p.stream;
    hr->include_usage = p.stream && p.include_usage;
    hr->logprobs = p.logprobs;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    hr->sock = ci ? ci->connect_fd : -1;
    snprintf(hr->model, sizeof hr->model, "%s", fe->served_name);

    for (int pi = 0; pi < n_prompts; pi++) {
        for (int j = 0; j < p.n; j++) {
            choice *c = &hr->choices[pi * p.n + j];
            c->first_of_prompt = j == 0;
            pagoda_request rq = p.req;
            if (kind == KIND_CHAT) {
                rq.prompt = rendered;
                rq.prompt_len = strlen(rendered);
                rq.parse_special = true;
                rq.add_special = false;
                rq.stop_token_ids = n_stop_ids ? stop_ids : NULL;
                rq.n_stop_token_ids = n_stop_ids;
            } else if (prompts[pi].tokens) {
                rq.prompt = NULL;
                rq.prompt_tokens = prompts[pi].tokens;
                rq.n_prompt_tokens = prompts[pi].n_tokens;
            } else {
                rq.prompt = prompts[pi].text;
                rq.prompt_len = prompts[pi].len;
            }
            /* n samples with one seed would all be equal: offset it per sample */
            if (rq.has_seed) rq.seed += (uint64_t)j;

            pthread_mutex_lock(&fe->mu);
            int stopping = fe->stop_req;
            if (!stopping) fe->inflight++;
            pthread_mutex_unlock(&fe->mu);
            if (stopping) {
                hreq_cancel(hr);
                ret = send_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "server_error", NULL, NULL,
                                 "the server is shutting down");
                goto out;
            }
            pthread_mutex_lock(&hr->mu);
            hr->refs++;
            hr->finals_pending++;
            c->submitted = 1;
            pthread_mutex_unlock(&hr->mu);
            char err[512] = {0};
            uint64_t id = 0;
            int st = h->submit(h, &rq, on_event, c, &id, err, sizeof err);
            if (st != PAGODA_OK) {
                pthread_mutex_lock(&hr->mu);
                hr->refs--;
                hr->finals_pending--;
                c->submitted = 0;
                pthread_mutex_unlock(&hr->mu);
                pthread_mutex_lock(&fe->mu);
                fe->inflight--;
                pthread_cond_broadcast(&fe->cv);
                pthread_mutex_unlock(&fe->mu);
                hreq_cancel(hr);
                ret = submit_error(conn, st, err);
                goto out;
            }
            pthread_mutex_lock(&hr->mu);
            c->id = id;
            c->id_known = 1;
            pthread_mutex_unlock(&hr->mu);
            pthread_mutex_lock(&fe->mu);
            stopping = fe->stop_req;
            pthread_mutex_unlock(&fe->mu);
            if (stopping) hreq_cancel(hr); /* stop() may have missed it */
        }
    }

    if (hr->stream) {
        if (kind == KIND_CHAT) sse_role_chunks(hr);
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024,
                                                                   sse_reader, hr, sse_free);
        if (!r) {
            hreq_cancel(hr);
            ret = MHD_NO;
            goto out;
        }
        pthread_mutex_lock(&hr->mu);
        hr->refs++;
        pthread_mutex_unlock(&hr->mu);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
        ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        goto out;
    }

    if (wait_finals(hr) < 0) {
        ret = MHD_NO; /* nobody to answer */
        goto out;
    }
    ret = answer_full(conn, hr);
    goto out;

bad:
    ret = BAD(conn, pe.param[0] ? pe.param : NULL, "%s", pe.msg);
out:
    if (rendered) h->free(h, rendered);
    for (int i = 0; owned && i < n_msgs; i++) free(owned[i]);
    free(owned);
    free(msgs);
    free_prompts(prompts, n_prompts);
    json_decref(root);
    return ret;
}

static enum MHD_Result route_tokenize(http_fe *fe, struct MHD_Connection *conn, conn_state *cs)
{
    const pagoda_host *h = fe->host;
    json_error_t jerr;
    json_t *root = json_loadb(cs->body.p ? cs->body.p : "", cs->body.len, 0, &jerr);
    if (!root) return BAD(conn, NULL, "malformed JSON body: %s", jerr.text);
    enum MHD_Result ret;
    int32_t *ids = NULL;
    json_t *prompt = json_object_get(root, "prompt");
    json_t *add = json_object_get(root, "add_special_tokens");
    if (!json_is_object(root) || !json_is_string(prompt)) {
        ret = BAD(conn, "prompt", "'prompt' must be a string");
        goto out;
    }
    if (add && !json_is_null(add) && !json_is_boolean(add)) {
        ret = BAD(conn, "add_special_tokens", "'add_special_tokens' must be true or false");
        goto out;
    }
    bool add_special = add ? json_is_true(add) : true;
    int32_t cap = 1024, n = 0;
    for (int tries = 0; tries < 2; tries++) {
        free(ids);
        ids = malloc(sizeof(int32_t) * (size_t)cap);
        if (!ids) { ret = MHD_NO; goto out; }
        int st = h->tokenize(h, json_string_value(prompt), json_string_length(prompt), add_special,
                             false, ids, cap, &n);
        if (st != PAGODA_OK) {
            ret = BAD(conn, "prompt", "tokenization failed: %s", pagoda_status_str(st));
            goto out;
        }
        if (n <= cap) break;
        cap = n;
    }
    pagoda_model_info mi = {.struct_size = sizeof mi};
    h->model_info(h, &mi);
    json_t *toks = json_array();
    for (int32_t i = 0; i < n; i++) json_array_append_new(toks, json_integer(ids[i]));
    json_t *o = json_object();
    json_object_set_new(o, "tokens", toks);
    json_object_set_new(o, "count", json_integer(n));
    json_object_set_new(o, "max_model_len", json_integer(mi.n_ctx));
    ret = send_json(conn, MHD_HTTP_OK, o);
out:
    free(ids);
    json_decref(root);
    return ret;
}

static enum MHD_Result route_detokenize(http_fe *fe, struct MHD_Connection *conn, conn_state *cs)
{
    const pagoda_host *h = fe->host;
    json_error_t jerr;
    json_t *root = json_loadb(cs->body.p ? cs->body.p : "", cs->body.len, 0, &jerr);
    if (!root) return BAD(conn, NULL, "malformed JSON body: %s", jerr.text);
    enum MHD_Result ret;
    int32_t *ids = NULL;
    json_t *toks = json_object_get(root, "tokens");
    if (!json_is_object(root) || !json_is_array(toks)) {
        ret = BAD(conn, "tokens", "'tokens' must be a list of token ids");
        goto out;
    }
    size_t n = json_array_size(toks), k;
    json_t *t;
    ids = malloc(sizeof(int32_t) * (n + 1));
    if (!ids) { ret = MHD_NO; goto out; }
    json_array_foreach(toks, k, t) {
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX) {
            ret = BAD(conn, "tokens", "'tokens' must be integers in [0, %d]", INT32_MAX);
            goto out;
        }
        ids[k] = (int32_t)json_integer_value(t);
    }
    char *s = h->detokenize(h, ids, (int32_t)n);
    if (!s) {
        ret = BAD(conn, "tokens", "'tokens' holds an id outside the vocabulary");
        goto out;
    }
    json_t *o = json_object();
    json_object_set_new(o, "prompt", jstr(s, strlen(s)));
    h->free(h, s);
    ret = send_json(conn, MHD_HTTP_OK, o);
out:
    free(ids);
    json_decref(root);
    return ret;
}

static enum MHD_Result route_models(http_fe *fe, struct MHD_Connection *conn)
{
    pagoda_model_info mi = {.struct_size = sizeof mi};
    fe->host->model_info(fe->host, &mi);
    json_t *m = json_object();
    json_object_set_new(m, "id", jstr(fe->served_name, strlen(fe->served_name)));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer((json_int_t)fe->started));
    json_object_set_new(m, "owned_by", json_string("pagoda"));
    json_object_set_new(m, "max_model_len", json_integer(mi.n_ctx));
    json_t *data = json_array();
    json_array_append_new(data, m);
    json_t *o = json_object();
    json_object_set_new(o, "object", json_string("list"));
    json_object_set_new(o, "data", data);
    return send_json(conn, MHD_HTTP_OK, o);
}

static enum MHD_Result send_host_text(http_fe *fe, struct MHD_Connection *conn, char *s,
                                      const char *ctype, const char *what)
{
    if (!s)
        return send_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "server_error", NULL, NULL,
                          "the %s is not available", what);
    size_t n = strlen(s);
    char *copy = malloc(n + 1); /* MHD frees with free(), the host's string with host->free */
    if (copy) memcpy(copy, s, n + 1);
    fe->host->free(fe->host, s);
    if (!copy) return MHD_NO;
    return send_body(conn, MHD_HTTP_OK, ctype, copy, n);
}

/* ------------------------------------------------------------ dispatch */

enum { R_NONE, R_HEALTH, R_MODELS, R_METRICS, R_MEMORY, R_COMPLETIONS, R_CHAT, R_TOKENIZE, R_DETOKENIZE };

static const struct {
    const char *path;
    const char *method;
    int route;
} routes[] = {
    {"/health", "GET", R_HEALTH},
    {"/v1/models", "GET", R_MODELS},
    {"/metrics", "GET", R_METRICS},
    {"/v1/memory", "GET", R_MEMORY},
    {"/v1/completions", "POST", R_COMPLETIONS},
    {"/v1/chat/completions", "POST", R_CHAT},
    {"/tokenize", "POST", R_TOKENIZE},
    {"/detokenize", "POST", R_DETOKENIZE},
};

static int auth_ok(http_fe *fe, struct MHD_Connection *conn)
{
    if (!fe->api_key[0]) return 1;
    const char *a = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!a || strncasecmp(a, "Bearer ", 7)) return 0;
    a += 7;
    while (*a == ' ') a++;
    /* compare every byte whatever the first difference, so timing says nothing */
    size_t la = strlen(a), lk = strlen(fe->api_key);
    unsigned diff = (unsigned)(la ^ lk);
    for (size_t i = 0; i < lk; i++) diff |= (unsigned char)fe->api_key[i] ^ (unsigned char)(i < la ? a[i] : 0);
    return diff == 0;
}

static enum MHD_Result dispatch(http_fe *fe, struct MHD_Connection *conn, const char *url,
                                const char *method, conn_state *cs)
{
    const pagoda_host *h = fe->host;
    int is_health = !strcmp(url, "/health");
    if (!is_health && !auth_ok(fe, conn)) {
        return send_json_hdr(conn, MHD_HTTP_UNAUTHORIZED,
                             error_json("invalid_request_error",
                                        "missing or wrong API key: send 'Authorization: Bearer <api_key>'",
                                        NULL, "invalid_api_key"),
                             MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    }
    int route = R_NONE, path_known = 0;
    const char *allow = NULL;
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        if (strcmp(url, routes[i].path)) continue;
        path_known = 1;
        allow = routes[i].method;
        if (!strcmp(method, routes[i].method) ||
            (!strcmp(method, "HEAD") && !strcmp(routes[i].method, "GET")))
            route = routes[i].route;
    }
    if (!path_known)
        return send_error(conn, MHD_HTTP_NOT_FOUND, "not_found_error", NULL, NULL,
                          "no route %s %s", method, url);
    if (route == R_NONE) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s takes %s, not %s", url, allow, method);
        return send_json_hdr(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
                             error_json("invalid_request_error", msg, NULL, "method_not_allowed"),
                             MHD_HTTP_HEADER_ALLOW, allow);
    }
    if (cs->too_large)
        return send_error(conn, MHD_HTTP_CONTENT_TOO_LARGE, "invalid_request_error", NULL,
                          "request_too_large", "the body is larger than max_body_bytes (%lld)",
                          (long long)fe->max_body);

    switch (route) {
    case R_HEALTH: {
        pagoda_engine_stats st = {.struct_size = sizeof st};
        int ok = h->stats(h, &st) == PAGODA_OK && st.ready && !h->shutting_down(h);
        if (!ok)
            return send_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "server_error", NULL, NULL,
                              "%s", h->shutting_down(h) ? "shutting down" : "the engine is not ready");
        return send_body(conn, MHD_HTTP_OK, "application/json", strdup("{\"status\":\"ok\"}"), 15);
    }
    case R_MODELS: return route_models(fe, conn);
    case R_METRICS:
        return send_host_text(fe, conn, h->metrics_text(h), "text/plain; version=0.0.4; charset=utf-8",
                              "metrics text");
    case R_MEMORY:
        return send_host_text(fe, conn, h->memory_plan_json(h), "application/json", "memory plan");
    case R_TOKENIZE: return route_tokenize(fe, conn, cs);
    case R_DETOKENIZE: return route_detokenize(fe, conn, cs);
    default: break;
    }
    pthread_mutex_lock(&fe->mu);
    int stopping = fe->stop_req;
    pthread_mutex_unlock(&fe->mu);
    if (stopping || h->shutting_down(h))
        return send_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "server_error", NULL, NULL,
                          "the server is shutting down");
    return route_generate(fe, conn, cs, route == R_CHAT ? KIND_CHAT : KIND_COMPLETION);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_data_size, void **con_cls)
{
    http_fe *fe = cls;
    conn_state *cs = *con_cls;
    if (!cs) {
        cs = calloc(1, sizeof *cs);
        if (!cs) return MHD_NO;
        *con_cls = cs;
        /* refuse an announced oversize body before reading it */
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > (unsigned long long)fe->max_body) {
            cs->too_large = 1;
            return send_error(conn, MHD_HTTP_CONTENT_TOO_LARGE, "invalid_request_error", NULL,
                              "request_too_large", "the body is larger than max_body_bytes (%lld)",
                              (long long)fe->max_body);
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (!cs->too_large) {
            if (cs->body.len + *upload_data_size > (size_t)fe->max_body) {
                cs->too_large = 1;
                free(cs->body.p);
                memset(&cs->body, 0, sizeof cs->body);
            } else if (sb_put(&cs->body, upload_data, *upload_data_size) < 0) {
                return MHD_NO;
            }
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    return dispatch(fe, conn, url, method, cs);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    conn_state *cs = *con_cls;
    if (!cs) return;
    if (cs->hr) {
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) hreq_cancel(cs->hr);
        hreq_release(cs->hr);
    }
    free(cs->body.p);
    free(cs);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    http_fe *fe = cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n') line[--n] = 0;
    fe->host->log(fe->host, PAGODA_LOG_DEBUG, "microhttpd: %s", line);
}

/* ------------------------------------------------------------- plugin */

static int http_run(void *ctx)
{
    http_fe *fe = ctx;
    const pagoda_host *h = fe->host;
    pthread_mutex_lock(&fe->mu);
    int early = fe->stop_req;
    pthread_mutex_unlock(&fe->mu);
    if (early) return PAGODA_OK;

    struct sockaddr_in sa4;
    struct sockaddr_in6 sa6;
    struct sockaddr *sa;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG;
    memset(&sa4, 0, sizeof sa4);
    memset(&sa6, 0, sizeof sa6);
    if (inet_pton(AF_INET, fe->bind_host, &sa4.sin_addr) == 1) {
        sa4.sin_family = AF_INET;
        sa4.sin_port = htons((uint16_t)fe->port);
        sa = (struct sockaddr *)&sa4;
    } else if (inet_pton(AF_INET6, fe->bind_host, &sa6.sin6_addr) == 1) {
        sa6.sin6_family = AF_INET6;
        sa6.sin6_port = htons((uint16_t)fe->port);
        sa = (struct sockaddr *)&sa6;
        flags |= MHD_USE_IPv6;
    } else {
        return h->error(h, PAGODA_ERR_INVALID,
                        "[frontend.http] host = %s is not an IPv4 or IPv6 address (e.g. 127.0.0.1, "
                        "0.0.0.0, ::1)", fe->bind_host);
    }
    fe->started = time(NULL);
    fe->d = MHD_start_daemon(flags, (uint16_t)fe->port, NULL, NULL, on_access, fe,
                             MHD_OPTION_SOCK_ADDR, sa,
                             MHD_OPTION_NOTIFY_COMPLETED, on_completed, fe,
                             MHD_OPTION_CONNECTION_LIMIT, (unsigned)fe->threads,
                             MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)fe->timeout_s,
                             MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
                             MHD_OPTION_EXTERNAL_LOGGER, mhd_log, fe,
                             MHD_OPTION_END);
    if (!fe->d)
        return h->error(h, PAGODA_ERR_IO,
                        "cannot listen on %s:%d (port taken or no permission): pick another "
                        "[frontend.http] port, or 0 for any free one", fe->bind_host, fe->port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(fe->d, MHD_DAEMON_INFO_BIND_PORT);
    int port = di ? di->port : fe->port;
    if (fe->port_file[0]) {
        char tmp[1100];
        snprintf(tmp, sizeof tmp, "%s.tmp", fe->port_file);
        FILE *f = fopen(tmp, "w");
        /* written then renamed, so a reader never sees a half-written number */
        if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) != 0 || rename(tmp, fe->port_file) != 0)
            h->log(h, PAGODA_LOG_WARN, "cannot write port_file %s: %s", fe->port_file, strerror(errno));
    }
    h->log(h, PAGODA_LOG_INFO, "listening on http://%s:%d (model %s)", fe->bind_host, port,
           fe->served_name);

    pthread_mutex_lock(&fe->mu);
    fe->running = 1;
    while (!fe->stop_req) pthread_cond_wait(&fe->cv, &fe->mu);
    pthread_mutex_unlock(&fe->mu);

    /* Drain: stop accepting, cancel everything in flight, wait for every FINAL
     * (the engine guarantees one each), give responses a grace period, close. */
    MHD_socket lfd = MHD_quiesce_daemon(fe->d);
    uint64_t *ids = NULL;
    int n = 0;
    pthread_mutex_lock(&fe->mu);
    int cap = 0;
    for (hreq *hr = fe->list; hr; hr = hr->next) cap += hr->n_choices;
    ids = malloc(sizeof *ids * (size_t)(cap + 1));
    for (hreq *hr = fe->list; hr && ids; hr = hr->next) {
        pthread_mutex_lock(&hr->mu);
        for (int i = 0; i < hr->n_choices; i++) {
            choice *c = &hr->choices[i];
            if (c->id_known && !c->final && !c->cancel_sent) {
                c->cancel_sent = 1;
                ids[n++] = c->id;
            }
        }
        pthread_mutex_unlock(&hr->mu);
    }
    pthread_mutex_unlock(&fe->mu);
    h->log(h, PAGODA_LOG_INFO, "stopping: cancelling %d request(s) in flight", n);
    for (int i = 0; i < n; i++) h->cancel(h, ids[i]);
    free(ids);
    pthread_mutex_lock(&fe->mu);
    while (fe->inflight > 0) pthread_cond_wait(&fe->cv, &fe->mu);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += DRAIN_GRACE_S;
    while (fe->live > 0)
        if (pthread_cond_timedwait(&fe->cv, &fe->mu, &dl) == ETIMEDOUT) break;
    pthread_mutex_unlock(&fe->mu);
    MHD_stop_daemon(fe->d);
    fe->d = NULL;
    if (lfd != MHD_INVALID_SOCKET) close(lfd);
    h->log(h, PAGODA_LOG_INFO, "stopped");
    return PAGODA_OK;
}

static void http_stop(void *ctx)
{
    http_fe *fe = ctx;
    pthread_mutex_lock(&fe->mu);
    fe->stop_req = 1;
    pthread_cond_broadcast(&fe->cv);
    pthread_mutex_unlock(&fe->mu);
}

static int http_create(const pagoda_host *h, void **ctx, char *err, size_t err_len)
{
    http_fe *fe = calloc(1, sizeof *fe);
    if (!fe) {
        snprintf(err, err_len, "out of memory");
        return PAGODA_ERR_NOMEM;
    }
    fe->host = h;
    snprintf(fe->bind_host, sizeof fe->bind_host, "%s", h->config_str(h, "host", "127.0.0.1"));
    fe->port = (int)h->config_int(h, "port", 8080);
    snprintf(fe->api_key, sizeof fe->api_key, "%s", h->config_str(h, "api_key", ""));
    fe->max_body = h->config_int(h, "max_body_bytes", 8 << 20);
    fe->threads = (int)h->config_int(h, "threads", 256);
    fe->timeout_s = (int)h->config_int(h, "timeout_s", 600);
    snprintf(fe->port_file, sizeof fe->port_file, "%s", h->config_str(h, "port_file", ""));
    const char *name = h->config_str(h, "served_model_name", "");
    if (name && name[0]) {
        snprintf(fe->served_name, sizeof fe->served_name, "%s", name);
    } else {
        pagoda_model_info mi = {.struct_size = sizeof mi};
        if (h->model_info(h, &mi) == PAGODA_OK && mi.name[0])
            snprintf(fe->served_name, sizeof fe->served_name, "%s", mi.name);
        else
            snprintf(fe->served_name, sizeof fe->served_name, "pagoda");
    }
    if (fe->port < 0 || fe->port > 65535 || fe->max_body < 1 || fe->threads < 1 || fe->timeout_s < 0) {
        snprintf(err, err_len, "[frontend.http] port must be 0..65535, max_body_bytes >= 1, threads >= 1, "
                 "timeout_s >= 0");
        free(fe);
        return PAGODA_ERR_INVALID;
    }
    pthread_mutex_init(&fe->mu, NULL);
    pthread_cond_init(&fe->cv, NULL);
    *ctx = fe;
    return PAGODA_OK;
}

static void http_destroy(void *ctx)
{
    http_fe *fe = ctx;
    if (!fe) return;
    if (fe->d) MHD_stop_daemon(fe->d);
    pthread_mutex_destroy(&fe->mu);
    pthread_cond_destroy(&fe->cv);
    free(fe);
}

static const pagoda_config_key http_keys[] = {
    {"host", PAGODA_KEY_STRING, "127.0.0.1", 0, 0, "address to listen on (IPv4 or IPv6 literal)"},
    {"port", PAGODA_KEY_INT, "8080", 0, 65535, "TCP port; 0 picks a free one (see port_file)"},
    {"api_key", PAGODA_KEY_STRING, "", 0, 0, "when set, every route but /health needs 'Authorization: Bearer <key>'"},
    {"max_body_bytes", PAGODA_KEY_SIZE, "8M", 1024, 1073741824.0, "largest request body; more is a 413"},
    {"threads", PAGODA_KEY_INT, "256", 1, 65536, "most concurrent connections (one thread each)"},
    {"timeout_s", PAGODA_KEY_INT, "600", 0, 86400, "idle connection timeout in seconds (0: none)"},
    {"port_file", PAGODA_KEY_STRING, "", 0, 0, "write the bound port to this file once listening"},
    {"served_model_name", PAGODA_KEY_STRING, "", 0, 0, "model id in /v1/models and responses (default: the model's name)"},
    {NULL, 0, NULL, 0, 0, NULL},
};

static const pagoda_frontend_ops http_ops = {
    .struct_size = sizeof(pagoda_frontend_ops),
    .run = http_run,
    .stop = http_stop,
};

static const pagoda_plugin_desc http_desc = {
    PAGODA_DESC_HEADER(PAGODA_KIND_FRONTEND),
    .name = "http",
    .version = PAGODA_VERSION_STRING,
    .description = "OpenAI-compatible HTTP server (completions, chat, SSE streaming, metrics)",
    .config_keys = http_keys,
    .probe = NULL,
    .create = http_create,
    .destroy = http_destroy,
    .ops = &http_ops,
};

PAGODA_PLUGIN(http_desc)
