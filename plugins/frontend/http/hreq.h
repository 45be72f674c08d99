/*
 * hreq.h: the HTTP frontend's state: the plugin instance (http_fe), one
 * HTTP request (hreq) with its engine submissions (choice, one per prompt
 * x n), the events copied off the engine thread (ev_item), and what MHD
 * keeps per connection (conn_state); their lifetime and how a waiting
 * thread watches its client.
 * Not for: parsing bodies (parse.h) or writing responses (output.h,
 * reply.h).
 *
 * Lifetime: an hreq is reference counted: one reference for the MHD
 * connection (dropped in the completion notice), one for a streaming
 * response (dropped when MHD frees it), and one per engine submission
 * (dropped after its FINAL). It is freed when the last one goes, so a FINAL
 * arriving after the client left finds valid memory.
 *
 * Lock order: fe->mu before hr->mu; host->submit and host->cancel are never
 * called with either held (the engine may be inside our callback waiting
 * for hr->mu).
 */
#ifndef PAGODA_HTTP_HREQ_H
#define PAGODA_HTTP_HREQ_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "pagoda/pagoda.h"
#include "request_fields.h"
#include "parse.h"

#ifndef PAGODA_VERSION_STRING
#define PAGODA_VERSION_STRING "0.1.0"
#endif

#define POLL_MS 100            /* how often a waiting thread checks its client */
#define MODEL_SEEN_MAX 64      /* distinct unknown model names logged, at most */

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
    int32_t tier_cached;     /* FINAL: of usage.cached_tokens, from the KV policy's tier */
    int32_t position;        /* PROMPT events: the prompt index */
    /* a traced TOKEN event (step > 0): how the token was made (pagoda_event) */
    uint64_t step;
    int32_t step_seqs, step_tokens, kv_tokens, n_blocks;
    int32_t *blocks;
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
    int32_t tier_cached;     /* of usage.cached_tokens, from the KV policy's tier */
    json_t *lp;              /* logprobs accumulated (non-streaming) */
    json_t *trace;           /* pagoda_trace entries accumulated (non-streaming) */
    size_t text_offset;
    /* echo: the prompt's text leads the choice's text; with logprobs its
     * tokens lead the entries, at offsets into the tokens' own text (pieces)
     * until answer_full maps them onto the echoed text */
    char *echo;
    size_t echo_len;
    sbuf pieces;
    int n_prompt_lp;
    struct tc_reader *tc;    /* tool calls being read from a stream (structured.c) */
    struct splitter *think;  /* chat: reasoning kept apart (api/reasoning.h), or NULL */
    struct fmt_norm *norm;   /* chat: the family's markup made canonical (api/toolfmt.h), or NULL */
} choice;

/* One HTTP request: its choices, the events queued for its thread. */
struct hreq {
    http_fe *fe;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    int kind;
    int stream, include_usage;
    int logprobs;            /* -1: none; else top count (chat: top_logprobs) */
    int tools;               /* chat with tools: <tool_call> blocks become tool_calls */
    int trace;               /* pagoda_trace: each token's step, batch, KV and candidates */
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
    struct api_state *as;    /* answered as /v1/messages or /v1/responses (api/api.h), or NULL */
    hreq *prev, *next;       /* fe->list */
};

/* The plugin instance: its config, the MHD daemon, and every hreq alive
 * (for the drain in run()). */
struct http_fe {
    const pagoda_host *host;
    char bind_host[256];
    int port;
    char api_key[256];
    int64_t max_body;
    int threads;
    int timeout_s;
    int request_timeout_s;
    int max_waiting;
    char port_file[1024];
    char served_name[128];
    int strict_model;        /* a request naming another model: 404 model_not_found */
    int grace_s;             /* shutdown_grace_s: answers still going out at stop get this long */
    /* other model names seen (hashes, under mu), each logged once; full: no more logged */
    uint64_t model_seen[MODEL_SEEN_MAX];
    int n_model_seen;

    struct MHD_Daemon *d;
    struct gate *gate;       /* the front door (gate.h) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop_req;
    int running;
    int inflight;            /* submissions without their FINAL */
    int live;                /* hreqs not yet freed */
    hreq *list;
    atomic_uint_fast64_t seq;
    time_t started;
    int inspect_interval_ms; /* GET /v1/inspect/stream: at most one snapshot this often */
    struct inspect_hub *hub; /* the stream's shared snapshots (inspect.h) */
    struct resp_store *store; /* /v1/responses' stored turns (api/store.h), made on first use */
    atomic_int template_thinks; /* api.c's probe: 0 not yet, 1 no, 2 the generation prompt opens <think> */
    atomic_int template_fmt;    /* api.c's probe: 0 not yet, else the FMT_* (api/toolfmt.h) + 1 */
    atomic_int template_keeps;  /* api.c: 0 not yet, 1 no, 2 the template writes a turn's reasoning back */
};

/* What MHD keeps for one HTTP request on a connection (*con_cls). */
typedef struct conn_state {
    sbuf body;
    int too_large;
    int route;
    hreq *hr;
} conn_state;

/* Frees one copied event. */
void ev_free(ev_item *e);

/* A new request of kind KIND_* with n_choices choices, holding the
 * connection's reference, linked into fe->list; NULL when out of memory. */
hreq *hreq_new(http_fe *fe, int kind, int n_choices);

/* Drops one reference; the last one unlinks and frees hr. [any thread] */
void hreq_release(hreq *hr);

/* [engine thread] The pagoda_event_cb of every submission (user: its choice). */
void on_event(void *user, const pagoda_event *ev);

/* Marks hr's submissions that have no FINAL and no cancel yet as
 * cancelled and puts their ids in ids (room for hr->n_choices); returns
 * how many. Takes hr->mu; the caller cancels them after, unlocked. */
int hreq_take_cancels(hreq *hr, uint64_t *ids);
/* Cancels every submission of hr that has no FINAL yet (once each). Call
 * with neither fe->mu nor hr->mu held. */
void hreq_cancel(hreq *hr);

/* Has the peer closed its end of fd? */
int peer_gone(int fd);

/* The monotonic clock in ms. */
int64_t now_ms(void);

/* 1 when *next has passed (and moves it POLL_MS on), else 0. */
int check_due(int64_t *next);

/* *ts = now + ms on CLOCK_REALTIME, for pthread_cond_timedwait. */
void deadline_in(struct timespec *ts, int ms);

#endif /* PAGODA_HTTP_HREQ_H */
