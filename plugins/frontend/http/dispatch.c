/*
 * dispatch.c: from MHD to a route: the per-connection state, the body read
 * in pieces (an oversize one refused with 413 without keeping it, a
 * chunked one at once, through the gate), a body cut short answered 400,
 * keep-alive within the gate's bounds (a follow-up request's framing
 * checked), the
 * Bearer key check (every route but /health and /ui), the route table (404, 405
 * with Allow), and the completion notice that cancels and releases.
 * Not for: what a route does (endpoints.c, generate.c).
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/api.h"
#include "dispatch.h"
#include "endpoints.h"
#include "gate.h"
#include "generate.h"
#include "hreq.h"
#include "inspect.h"
#include "reply.h"
#include "ui.h"

enum { R_NONE, R_HEALTH, R_MODELS, R_METRICS, R_MEMORY, R_COMPLETIONS, R_CHAT, R_TOKENIZE, R_DETOKENIZE,
       R_INSPECT, R_INSPECT_STREAM, R_UI, R_MESSAGES, R_COUNT_TOKENS, R_RESPONSES };

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
    {"/v1/inspect", "GET", R_INSPECT},
    {"/v1/inspect/stream", "GET", R_INSPECT_STREAM},
    {"/ui", "GET", R_UI},
    {"/v1/messages", "POST", R_MESSAGES},
    {"/v1/messages/count_tokens", "POST", R_COUNT_TOKENS},
    {"/v1/responses", "POST", R_RESPONSES},
};

static int auth_ok(http_fe *fe, struct MHD_Connection *conn)
{
    if (!fe->api_key[0]) return 1;
    /* Bearer, or Anthropic's x-api-key header (api/api.c) */
    const char *a = api_key_of(conn);
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
    /* /health and the page itself are open; the page asks for the key
     * before it reads anything (ui.h) */
    int is_health = !strcmp(url, "/health") || !strcmp(url, "/ui");
    /* errors in Anthropic's shape on its routes (reply.h) */
    reply_flavor = !strncmp(url, "/v1/messages", 12) ? REPLY_ANTHROPIC : REPLY_OPENAI;
    if (!is_health && !auth_ok(fe, conn)) {
        return send_json_hdr(conn, MHD_HTTP_UNAUTHORIZED,
                             error_json("invalid_request_error",
                                        "missing or wrong API key: send 'Authorization: Bearer <api_key>' "
                                        "(or 'x-api-key: <api_key>')",
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
    case R_HEALTH: return route_health(fe, conn);
    case R_MODELS: return route_models(fe, conn);
    case R_METRICS: return route_metrics(fe, conn);
    case R_MEMORY: return route_memory(fe, conn);
    case R_TOKENIZE: return route_tokenize(fe, conn, cs);
    case R_DETOKENIZE: return route_detokenize(fe, conn, cs);
    case R_INSPECT: return route_inspect(fe, conn);
    case R_INSPECT_STREAM: return route_inspect_stream(fe, conn);
    case R_UI: return route_ui(fe, conn);
    case R_COUNT_TOKENS: return route_count_tokens(fe, conn, cs);
    default: break;
    }
    pthread_mutex_lock(&fe->mu);
    int stopping = fe->stop_req;
    pthread_mutex_unlock(&fe->mu);
    if (stopping || h->shutting_down(h))
        return send_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "server_error", NULL, NULL,
                          "the server is shutting down");
    if (route == R_MESSAGES) return route_messages(fe, conn, cs);
    if (route == R_RESPONSES) return route_responses(fe, conn, cs);
    return route_generate(fe, conn, cs, route == R_CHAT ? KIND_CHAT : KIND_COMPLETION);
}

/* what the gate checks on a connection's first request, for the next ones:
 * one plain Content-Length (or several equal), never with Transfer-Encoding */
typedef struct framing {
    int n_cl, n_te, bad;
    const char *cl;
} framing;

static enum MHD_Result framing_hdr(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    framing *f = cls;
    if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) f->n_te++;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) return MHD_YES;
    const char *v = value ? value : "";
    if (!*v || strspn(v, "0123456789") != strlen(v) || (f->cl && strcmp(f->cl, v))) f->bad = 1;
    f->cl = v;
    f->n_cl++;
    return MHD_YES;
}

static int follow_up_framing_ok(struct MHD_Connection *conn)
{
    framing f = {0, 0, 0, NULL};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, framing_hdr, &f);
    return !f.bad && !(f.n_cl && f.n_te);
}

enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_data_size, void **con_cls)
{
    http_fe *fe = cls;
    conn_state *cs = *con_cls;
    if (!cs) {
        cs = calloc(1, sizeof *cs);
        if (!cs) return MHD_NO;
        *con_cls = cs;
        /* this request's error shape (reply.h); a kept-alive thread's last one must not leak */
        reply_flavor = !strncmp(url, "/v1/messages", 12) ? REPLY_ANTHROPIC : REPLY_OPENAI;
        /* Keep-alive within bounds (gate.h): past them "Connection: close",
         * so MHD closes after the response. A follow-up request was read
         * by MHD, not the gate: its framing is checked here. */
        int follow_up = 0;
        if (!gate_request_start(fe->gate, conn, &follow_up))
            MHD_set_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONNECTION, "close");
        if (follow_up && !follow_up_framing_ok(conn)) {
            cs->too_large = 1; /* read nothing more of it */
            MHD_set_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONNECTION, "close");
            return send_error(conn, MHD_HTTP_BAD_REQUEST, "invalid_request_error", NULL, NULL,
                              "bad framing: Content-Length must be one plain number, and not beside "
                              "Transfer-Encoding");
        }
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
                /* only a chunked body gets here (a declared length is
                 * refused above): answer now, not after the rest of it,
                 * which a chunk size of 2^64 - 1 would make forever */
                cs->too_large = 1;
                free(cs->body.p);
                memset(&cs->body, 0, sizeof cs->body);
                char msg[128];
                snprintf(msg, sizeof msg, "the chunked body is larger than max_body_bytes (%lld)",
                         (long long)fe->max_body);
                gate_refuse(fe->gate, conn, MHD_HTTP_CONTENT_TOO_LARGE, msg);
            } else if (sb_put(&cs->body, upload_data, *upload_data_size) < 0) {
                return MHD_NO;
            }
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    /* received whole; past its deadline the gate has answered 408 already */
    if (gate_request_received(fe->gate, conn) < 0) return MHD_NO;
    return dispatch(fe, conn, url, method, cs);
}

void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    http_fe *fe = cls;
    conn_state *cs = *con_cls;
    /* sent whole: a connection kept open waits for its next request (gate.h) */
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) gate_request_done(((http_fe *)cls)->gate, conn);
    if (!cs) return;
    /* The client ended its side while its body was still coming: past the
     * bytes the gate checked (GATE_HOLD), a chunk size MHD took (up to
     * 2^64 - 1) but frame.c refuses ends this way. It may still read:
     * answer before MHD closes (0.9.75 calls this first). */
    if (!cs->hr && !cs->too_large && toe == MHD_REQUEST_TERMINATED_CLIENT_ABORT)
        gate_refuse(fe->gate, conn, MHD_HTTP_BAD_REQUEST, GATE_BODY_CUT);
    if (cs->hr) {
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) hreq_cancel(cs->hr);
        hreq_release(cs->hr);
    }
    free(cs->body.p);
    free(cs);
    *con_cls = NULL;
}
