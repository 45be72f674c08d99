/*
 * endpoints.c: the routes that do not generate: /health (ready and not
 * shutting down), /v1/models, /metrics (the host's text and the gate's
 * own answers), /v1/memory (the host's text, passed through), /tokenize
 * and /detokenize.
 * Not for: generation (generate.c) or routing and auth (dispatch.c).
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "endpoints.h"
#include "gate.h"
#include "reply.h"

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

enum MHD_Result route_health(http_fe *fe, struct MHD_Connection *conn)
{
    const pagoda_host *h = fe->host;
    pagoda_engine_stats st = {.struct_size = sizeof st};
    int ok = h->stats(h, &st) == PAGODA_OK && st.ready && !h->shutting_down(h);
    if (!ok)
        return send_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "server_error", NULL, NULL,
                          "%s", h->shutting_down(h) ? "shutting down" : "the engine is not ready");
    return send_body(conn, MHD_HTTP_OK, "application/json", strdup("{\"status\":\"ok\"}"), 15);
}

/* The host's text, then the answers the gate gave itself (they never reach
 * the engine, whose pagoda_requests_rejected_total counts its refusals). */
enum MHD_Result route_metrics(http_fe *fe, struct MHD_Connection *conn)
{
    const pagoda_host *h = fe->host;
    char *s = h->metrics_text(h);
    if (!s)
        return send_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "server_error", NULL, NULL,
                          "the metrics text is not available");
    gate_counts gc;
    gate_get_counts(fe->gate, &gc);
    sbuf b = {0};
    sb_str(&b, s);
    h->free(h, s);
    if (b.len && b.p[b.len - 1] != '\n') sb_str(&b, "\n");
    char tail[640];
    snprintf(tail, sizeof tail,
             "# HELP pagoda_http_rejected_total Requests the HTTP frontend answered itself before any route "
             "(server_busy: 503, every serving thread busy or too many connections waiting; request_timeout: 408; "
             "bad_request: broken framing or a body refused, 400/413/414/431/501/505).\n"
             "# TYPE pagoda_http_rejected_total counter\n"
             "pagoda_http_rejected_total{reason=\"server_busy\"} %llu\n"
             "pagoda_http_rejected_total{reason=\"request_timeout\"} %llu\n"
             "pagoda_http_rejected_total{reason=\"bad_request\"} %llu\n",
             (unsigned long long)gc.server_busy, (unsigned long long)gc.request_timeout,
             (unsigned long long)gc.bad_request);
    sb_str(&b, tail);
    if (!b.p) return MHD_NO;
    return send_body(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", b.p, b.len);
}

enum MHD_Result route_memory(http_fe *fe, struct MHD_Connection *conn)
{
    const pagoda_host *h = fe->host;
    return send_host_text(fe, conn, h->memory_plan_json(h), "application/json", "memory plan");
}

enum MHD_Result route_tokenize(http_fe *fe, struct MHD_Connection *conn, conn_state *cs)
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

enum MHD_Result route_detokenize(http_fe *fe, struct MHD_Connection *conn, conn_state *cs)
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

enum MHD_Result route_models(http_fe *fe, struct MHD_Connection *conn)
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
