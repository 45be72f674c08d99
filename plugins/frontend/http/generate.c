/*
 * generate.c: the generation routes, POST /v1/completions and
 * /v1/chat/completions: the parsed body becomes one engine submission per
 * prompt x n (seeds offset per sample, chat templates rendered by the
 * host, the prompt's text put first with echo), refused with the right status when the engine will not take it;
 * then the response is either a stream or a wait for every FINAL.
 * Not for: field checks (parse.c) or writing the events out (output.c).
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/reasoning.h"
#include "api/toolfmt.h"
#include "generate.h"
#include "output.h"
#include "parse.h"
#include "reply.h"
#include "structured.h"

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

/* A 'model' other than the served name: served anyway (agents send their
 * own names), logged once per name while MODEL_SEEN_MAX names are
 * remembered; 1 when strict_model refuses it. */
static int other_model(http_fe *fe, const char *name)
{
    if (!strcmp(name, fe->served_name)) return 0;
    if (fe->strict_model) return 1;
    uint64_t hsh = 1469598103934665603ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) hsh = (hsh ^ *p) * 1099511628211ull;
    int log = 0, last = 0;
    pthread_mutex_lock(&fe->mu);
    int seen = 0;
    for (int i = 0; i < fe->n_model_seen && !seen; i++) seen = fe->model_seen[i] == hsh;
    if (!seen && fe->n_model_seen < MODEL_SEEN_MAX) {
        fe->model_seen[fe->n_model_seen++] = hsh;
        log = 1;
        last = fe->n_model_seen == MODEL_SEEN_MAX;
    }
    pthread_mutex_unlock(&fe->mu);
    if (!log) return 0;
    char safe[101]; /* the client's bytes: no control character reaches the log */
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p && k < sizeof safe - 1; p++)
        safe[k++] = *p < 0x20 || *p == 0x7F ? '?' : (char)*p;
    safe[k] = 0;
    fe->host->log(fe->host, PAGODA_LOG_WARN,
                  "a request names model '%s', which is not served here: answering with '%s' (logged "
                  "once per name%s; [frontend.http] strict_model = true answers 404)",
                  safe, fe->served_name, last ? ", and this is the last name logged" : "");
    return 0;
}

/* echo: the choice's text starts with the prompt's (the string as sent,
 * or the ids' text), and its generated entries' offsets after it. */
static int echo_prompt(const pagoda_host *h, choice *c, const prompt_in *pr)
{
    const char *src = pr->text;
    size_t len = pr->len;
    char *t = NULL;
    if (pr->tokens) {
        if (!(t = h->detokenize(h, pr->tokens, pr->n_tokens))) return -1;
        src = t;
        len = strlen(t);
    }
    c->echo = malloc(len + 1);
    if (c->echo) {
        memcpy(c->echo, src, len);
        c->echo[len] = 0;
    }
    if (t) h->free(h, t);
    if (!c->echo) return -1;
    c->echo_len = len;
    sb_put(&c->text, c->echo, c->echo_len);
    c->text_offset = c->echo_len;
    return 0;
}

enum MHD_Result route_generate(http_fe *fe, struct MHD_Connection *conn, conn_state *cs,
                                      int kind)
{
    json_error_t jerr;
    json_t *root = json_loadb(cs->body.p ? cs->body.p : "", cs->body.len, 0, &jerr);
    if (!root)
        return BAD(conn, NULL, "malformed JSON body: %s (line %d, column %d)", jerr.text, jerr.line,
                   jerr.column);
    return generate_body(fe, conn, cs, kind, root, NULL);
}

enum MHD_Result generate_body(http_fe *fe, struct MHD_Connection *conn, conn_state *cs, int kind,
                              json_t *root, struct api_state *as)
{
    const pagoda_host *h = fe->host;
    perr pe = {{0}, {0}};
    prompt_in *prompts = NULL;
    int n_prompts = 0;
    pagoda_chat_message *msgs = NULL;
    char **owned = NULL;
    int n_msgs = 0;
    char *rendered = NULL;
    int think_open = 0; /* this request's prompt opens the reply's reasoning */
    int32_t stop_ids[16];
    int32_t n_stop_ids = 0;
    enum MHD_Result ret;
    params p;
    memset(&p, 0, sizeof p);
    st_req sr;
    memset(&sr, 0, sizeof sr);

    if (!json_is_object(root)) {
        ret = BAD(conn, NULL, "the body must be a JSON object");
        goto out;
    }
    if (parse_common(h, root, kind, &p, &pe) < 0) goto bad;
    json_t *model = json_object_get(root, "model");
    if (json_is_string(model) && other_model(fe, json_string_value(model))) {
        ret = send_error(conn, MHD_HTTP_NOT_FOUND, "invalid_request_error", "model", "model_not_found",
                         "The model `%.200s` does not exist: this server serves `%s` (GET /v1/models)",
                         json_string_value(model), fe->served_name);
        goto out;
    }
    /* response_format, grammar, regex, choice, tools (structured.c) */
    pagoda_chat_options co;
    memset(&co, 0, sizeof co);
    int think = 0, probed_open = 0; /* probed (once) before this request's rendering */
    if (kind == KIND_CHAT) {
        if (parse_chat_options(root, &co, &pe) < 0) goto bad;
        api_template_thinks(fe, &think, &probed_open);
    }
    /* the template's default opening, unless this request turns thinking
     * off (the rendered prompt decides below; the grammar is made first) */
    bool opens = think && probed_open && co.enable_thinking != 0;
    if (st_parse(h, root, kind, kind == KIND_CHAT ? api_template_fmt(fe) : FMT_HERMES, opens, &sr, &pe) < 0)
        goto bad;
    if (sr.type && p.echo) {
        ret = BAD(conn, sr.field, "'%s' cannot be combined with 'echo'", sr.field);
        goto out;
    }
    p.req.constraint_type = sr.type;
    p.req.constraint = sr.spec;
    p.req.constraint_len = sr.spec ? strlen(sr.spec) : 0;
    p.req.constraint_strict = sr.strict;
    if (kind == KIND_COMPLETION) {
        if (parse_prompts(root, &prompts, &n_prompts, &pe) < 0) goto bad;
    } else {
        if (parse_messages(root, &msgs, &owned, &n_msgs, &pe) < 0) goto bad;
        if (st_chat_messages(root, &sr, api_template_fmt(fe), api_template_chat_flags(fe), &msgs, &owned, &n_msgs,
                             &pe) < 0)
            goto bad;
        if (!h->chat_render) {
            ret = BAD(conn, "messages", "this server cannot render chat templates");
            goto out;
        }
        (void)api_template_fmt(fe);
        bool has_opts = co.enable_thinking >= 0 || co.reasoning_effort;
        if (has_opts && !PAGODA_HOST_HAS(h, chat_render_opts)) {
            ret = BAD(conn, co.reasoning_effort ? "reasoning_effort" : "chat_template_kwargs",
                      "this server's core (ABI before 1.10) cannot pass template options");
            goto out;
        }
        int st = has_opts ? h->chat_render_opts(h, msgs, n_msgs, &co, true, &rendered, stop_ids, 16, &n_stop_ids)
                          : h->chat_render(h, msgs, n_msgs, true, &rendered, stop_ids, 16, &n_stop_ids);
        if (st != PAGODA_OK || !rendered) {
            ret = BAD(conn, "messages", "the chat template could not be rendered: %s (does the model "
                      "have a chat template?)", pagoda_status_str(st));
            goto out;
        }
        if (n_stop_ids > 16) n_stop_ids = 16;
        n_prompts = 1;
        think_open = think && api_prompt_opens_think(rendered);
        if (as) as->think_open = think_open;
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
    if (as) { /* the response is written in another API's shape (api/api.h) */
        hr->as = as;
        as = NULL;
    }
    if (kind == KIND_CHAT && !hr->as) reasoning_setup(hr, think_open); /* <think> apart from content */
    hr->stream = p.stream;
    hr->include_usage = p.stream && p.include_usage;
    hr->logprobs = p.logprobs;
    hr->tools = kind == KIND_CHAT && sr.tool_choice != ST_TOOLS_NONE;
    if (kind == KIND_CHAT) api_norm_setup(hr, hr->tools || (hr->as && hr->as->tools), sr.tools);
    hr->trace = p.trace;
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
                /* ids are the model's input as given, BOS included or not
                 * (OpenAI's and vLLM's reading): a scoring client such as
                 * lm-evaluation-harness counts on one entry per id it sent */
                rq.prompt = NULL;
                rq.prompt_tokens = prompts[pi].tokens;
                rq.n_prompt_tokens = prompts[pi].n_tokens;
                rq.add_special = false;
            } else {
                rq.prompt = prompts[pi].text;
                rq.prompt_len = prompts[pi].len;
            }

            rq.request_id = hr->id; /* what inspection shows beside the sequence */

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
            /* after the engine took the ids (it names a bad one); only this
             * thread touches the choice's text */
            if (p.echo && echo_prompt(h, c, &prompts[pi]) < 0) {
                hreq_cancel(hr);
                ret = send_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "server_error", NULL, NULL,
                                 "out of memory echoing the prompt");
                goto out;
            }
            pthread_mutex_lock(&fe->mu);
            stopping = fe->stop_req;
            pthread_mutex_unlock(&fe->mu);
            if (stopping) hreq_cancel(hr); /* stop() may have missed it */
        }
    }

    if (hr->stream) {
        if (hr->as) api_stream_start(hr, rendered);
        else if (kind == KIND_CHAT) sse_role_chunks(hr);
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
    ret = hr->as ? api_answer_full(conn, hr) : answer_full(conn, hr);
    goto out;

bad:
    if (as) api_field_names(as->api, pe.msg, sizeof pe.msg); /* the agent APIs name their own fields */
    ret = BAD(conn, pe.param[0] ? pe.param : NULL, "%s", pe.msg);
out:
    if (rendered) h->free(h, rendered);
    for (int i = 0; owned && i < n_msgs; i++) free(owned[i]);
    free(owned);
    free(msgs);
    free_prompts(prompts, n_prompts);
    st_free(&sr);
    json_decref(root);
    api_state_free(as); /* not handed to a request */
    return ret;
}
