/*
 * responses.c: OpenAI's Responses API, POST /v1/responses. The body
 * (input as a string or items: messages, function_call and
 * function_call_output items; instructions; function tools and
 * tool_choice; text.format; max_output_tokens; sampling) becomes a
 * chat-completions body, run like one; the output comes back as items:
 * reasoning (a <think> block), message (output_text), function_call (a
 * <tool_call> block). Streamed as the Responses events: response.created,
 * response.in_progress, response.output_item.added/.done,
 * response.content_part.added/.done, response.output_text.delta/.done,
 * response.reasoning_text.delta/.done, response.function_call_arguments
 * .delta/.done, and response.completed (response.incomplete past
 * max_output_tokens, response.failed on an engine error).
 * store (default true) keeps the conversation with the answer (store.h),
 * so previous_response_id continues it with only the new input; an
 * unknown one is a 400 previous_response_not_found. The instructions of
 * an earlier response are not carried over (as OpenAI does).
 * Not for: the generation itself (generate.c) or the store (store.c).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../generate.h"
#include "../reply.h"
#include "api.h"
#include "store.h"

/* ------------------------------------------------------------ the request */

static int is_str(json_t *v) { return json_is_string(v); }

/* a message item's content: a string or input_text / output_text parts */
static int content_text(json_t *c, size_t k, sbuf *b, perr *pe)
{
    if (json_is_string(c)) {
        sb_put(b, json_string_value(c), json_string_length(c));
        return 0;
    }
    if (!json_is_array(c)) return rf_fail(pe, "input", "input[%zu].content must be a string or a list of parts", k);
    size_t i;
    json_t *p;
    json_array_foreach(c, i, p) {
        json_t *type = json_object_get(p, "type"), *text = json_object_get(p, "text");
        const char *t = is_str(type) ? json_string_value(type) : "";
        if (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text"))
            return rf_fail(pe, "input", "input[%zu].content[%zu].type: '%s' is not supported by this server "
                           "(input_text and output_text only)", k, i, *t ? t : "(missing)");
        if (!is_str(text)) return rf_fail(pe, "input", "input[%zu].content[%zu].text must be a string", k, i);
        sb_put(b, json_string_value(text), json_string_length(text));
    }
    return 0;
}

/* the call ids an earlier assistant turn made, for function_call_output */
static int has_call(json_t *msgs, const char *id)
{
    size_t i, j;
    json_t *m, *c;
    json_array_foreach(msgs, i, m) {
        json_array_foreach(json_object_get(m, "tool_calls"), j, c)
            if (is_str(json_object_get(c, "id")) && !strcmp(json_string_value(json_object_get(c, "id")), id))
                return 1;
    }
    return 0;
}

/* the text of a reasoning item's reasoning_text parts */
static void reasoning_text(json_t *it, sbuf *b)
{
    size_t j;
    json_t *p;
    json_array_foreach(json_object_get(it, "content"), j, p) {
        json_t *tx = json_object_get(p, "text");
        if (is_str(tx)) sb_put(b, json_string_value(tx), json_string_length(tx));
    }
}

/* the last message when it is an assistant turn of reasoning alone (a
 * reasoning item's), which the turn's text or calls that follow join */
static json_t *thought_only(json_t *msgs)
{
    size_t n = json_array_size(msgs);
    json_t *last = n ? json_array_get(msgs, n - 1) : NULL;
    json_t *c = json_object_get(last, "content");
    if (!last || strcmp(json_string_value(json_object_get(last, "role")), "assistant") ||
        !json_object_get(last, "reasoning_content") || json_object_get(last, "tool_calls") ||
        (json_is_string(c) && json_string_length(c)))
        return NULL;
    return last;
}

/* input items appended to msgs as chat messages; a reasoning item is the
 * next assistant turn's reasoning_content when keep (the template writes
 * a turn's reasoning back: api_template_keeps_reasoning), else dropped */
static int input_items(json_t *input, json_t *msgs, int keep, perr *pe)
{
    if (json_is_string(input)) {
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", input));
        return 0;
    }
    if (!json_is_array(input) || !json_array_size(input))
        return rf_fail(pe, "input", "'input' must be a string or a non-empty list of items");
    size_t k;
    json_t *it;
    json_array_foreach(input, k, it) {
        if (!json_is_object(it)) return rf_fail(pe, "input", "input[%zu] must be an object", k);
        json_t *type = json_object_get(it, "type"), *role = json_object_get(it, "role");
        const char *t = is_str(type) ? json_string_value(type) : "message";
        if (!strcmp(t, "message")) {
            const char *r = is_str(role) ? json_string_value(role) : "";
            if (strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "system") && strcmp(r, "developer"))
                return rf_fail(pe, "input", "input[%zu].role must be user, assistant, system or developer", k);
            sbuf b = {0};
            if (content_text(json_object_get(it, "content"), k, &b, pe) < 0) {
                free(b.p);
                return -1;
            }
            json_t *th = !strcmp(r, "assistant") ? thought_only(msgs) : NULL;
            if (th)
                json_object_set_new(th, "content", json_stringn(b.p ? b.p : "", b.len));
            else
                json_array_append_new(msgs, json_pack("{s:s,s:s%}", "role", !strcmp(r, "developer") ? "system" : r,
                                                      "content", b.p ? b.p : "", b.len));
            free(b.p);
        } else if (!strcmp(t, "function_call")) {
            json_t *cid = json_object_get(it, "call_id"), *name = json_object_get(it, "name");
            json_t *args = json_object_get(it, "arguments");
            if (!is_str(cid) || !is_str(name) || !is_str(args))
                return rf_fail(pe, "input", "input[%zu]: a function_call item needs 'call_id', 'name' and "
                               "'arguments' (a string)", k);
            json_t *call = json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", cid, "type", "function", "function", "name", name,
                                     "arguments", args);
            /* calls right after an assistant turn belong to it */
            size_t n = json_array_size(msgs);
            json_t *last = n ? json_array_get(msgs, n - 1) : NULL;
            if (last && !strcmp(json_string_value(json_object_get(last, "role")), "assistant")) {
                json_t *tc = json_object_get(last, "tool_calls");
                if (!tc) {
                    tc = json_array();
                    json_object_set_new(last, "tool_calls", tc);
                }
                json_array_append_new(tc, call);
            } else {
                json_array_append_new(msgs, json_pack("{s:s,s:s,s:[o]}", "role", "assistant", "content", "",
                                                      "tool_calls", call));
            }
        } else if (!strcmp(t, "function_call_output")) {
            json_t *cid = json_object_get(it, "call_id"), *out = json_object_get(it, "output");
            if (!is_str(cid)) return rf_fail(pe, "input", "input[%zu].call_id is required", k);
            if (!has_call(msgs, json_string_value(cid)))
                return rf_fail(pe, "input", "input[%zu].call_id '%s' matches no function_call before it", k,
                               json_string_value(cid));
            sbuf b = {0};
            if (out && content_text(out, k, &b, pe) < 0) {
                free(b.p);
                return -1;
            }
            json_array_append_new(msgs, json_pack("{s:s,s:O,s:s%}", "role", "tool", "tool_call_id", cid, "content",
                                                  b.p ? b.p : "", b.len));
            free(b.p);
        } else if (!strcmp(t, "reasoning")) {
            sbuf b = {0};
            if (keep) reasoning_text(it, &b);
            if (b.len)
                json_array_append_new(msgs, json_pack("{s:s,s:s,s:s%}", "role", "assistant", "content", "",
                                                      "reasoning_content", b.p, b.len));
            free(b.p);
        } else {
            return rf_fail(pe, "input", "input[%zu].type: '%s' items are not supported by this server", k, t);
        }
    }
    return 0;
}

static int tools_of(json_t *r, json_t *chat, int *has_tools, perr *pe)
{
    json_t *tools = json_object_get(r, "tools"), *tc = json_object_get(r, "tool_choice");
    *has_tools = 0;
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) return rf_fail(pe, "tools", "'tools' must be a list of function tools");
        json_t *fns = json_array();
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            json_t *type = json_object_get(t, "type"), *name = json_object_get(t, "name");
            if (!is_str(type) || strcmp(json_string_value(type), "function")) {
                json_decref(fns);
                return rf_fail(pe, "tools", "tools[%zu].type: '%s' tools are not supported by this server "
                               "(function tools only)", i, is_str(type) ? json_string_value(type) : "(missing)");
            }
            if (!is_str(name)) {
                json_decref(fns);
                return rf_fail(pe, "tools", "tools[%zu].name is required", i);
            }
            json_t *fn = json_pack("{s:O}", "name", name);
            static const char *const keys[] = {"description", "parameters", "strict"};
            for (size_t k = 0; k < 3; k++) {
                json_t *v = json_object_get(t, keys[k]);
                if (v && !json_is_null(v)) json_object_set(fn, keys[k], v);
            }
            json_array_append_new(fns, json_pack("{s:s,s:o}", "type", "function", "function", fn));
        }
        if (json_array_size(fns)) {
            json_object_set(chat, "tools", fns);
            *has_tools = 1;
        }
        json_decref(fns);
    }
    if (!tc || json_is_null(tc)) return 0;
    if (json_is_string(tc)) {
        json_object_set(chat, "tool_choice", tc);
        if (!strcmp(json_string_value(tc), "none")) *has_tools = 0;
        return 0;
    }
    json_t *type = json_object_get(tc, "type"), *name = json_object_get(tc, "name");
    if (!json_is_object(tc) || !is_str(type) || strcmp(json_string_value(type), "function") || !is_str(name))
        return rf_fail(pe, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                       "{\"type\": \"function\", \"name\": ...}");
    json_object_set_new(chat, "tool_choice", json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name", name));
    return 0;
}

static int text_format(json_t *r, json_t *chat, perr *pe)
{
    json_t *text = json_object_get(r, "text");
    if (!text || json_is_null(text)) return 0;
    json_t *f = json_object_get(text, "format");
    if (!json_is_object(text)) return rf_fail(pe, "text", "'text' must be an object");
    if (!f || json_is_null(f)) return 0;
    json_t *type = json_object_get(f, "type");
    const char *t = is_str(type) ? json_string_value(type) : "";
    if (!strcmp(t, "text")) return 0;
    if (!strcmp(t, "json_object")) {
        json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", "json_object"));
        return 0;
    }
    if (strcmp(t, "json_schema"))
        return rf_fail(pe, "text.format", "'text.format.type' must be \"text\", \"json_object\" or \"json_schema\"");
    json_t *js = json_object();
    static const char *const keys[] = {"name", "schema", "strict"};
    for (size_t k = 0; k < 3; k++) {
        json_t *v = json_object_get(f, keys[k]);
        if (v && !json_is_null(v)) json_object_set(js, keys[k], v);
    }
    json_object_set_new(chat, "response_format", json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js));
    return 0;
}

static resp_store *store_of(http_fe *fe)
{
    pthread_mutex_lock(&fe->mu);
    if (!fe->store) fe->store = store_new();
    resp_store *s = fe->store;
    pthread_mutex_unlock(&fe->mu);
    return s;
}

/* the request's fields echoed in the response object */
static json_t *echo_fields(json_t *r)
{
    json_t *o = json_object();
    static const char *const keys[] = {"instructions", "max_output_tokens", "previous_response_id", "temperature",
                                       "top_p", "tools", "tool_choice", "text", "metadata", "parallel_tool_calls",
                                       "reasoning", "user"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        json_t *v = json_object_get(r, keys[k]);
        json_object_set(o, keys[k], v ? v : json_null());
    }
    if (json_is_null(json_object_get(o, "tools"))) json_object_set_new(o, "tools", json_array());
    if (json_is_null(json_object_get(o, "tool_choice"))) json_object_set_new(o, "tool_choice", json_string("auto"));
    if (json_is_null(json_object_get(o, "parallel_tool_calls")))
        json_object_set_new(o, "parallel_tool_calls", json_true());
    if (json_is_null(json_object_get(o, "text")))
        json_object_set_new(o, "text", json_pack("{s:{s:s}}", "format", "type", "text"));
    if (json_is_null(json_object_get(o, "metadata"))) json_object_set_new(o, "metadata", json_object());
    return o;
}

enum MHD_Result route_responses(http_fe *fe, struct MHD_Connection *conn, conn_state *cs)
{
    json_error_t jerr;
    perr pe = {{0}, {0}};
    json_t *r = json_loadb(cs->body.p ? cs->body.p : "", cs->body.len, 0, &jerr);
    if (!r) return BAD(conn, NULL, "malformed JSON body: %s (line %d, column %d)", jerr.text, jerr.line, jerr.column);
    json_t *chat = json_object(), *hist = NULL, *msgs = json_array();
    api_state *as = NULL;
    int has_tools = 0;
    enum MHD_Result ret;
    if (!json_is_object(r)) {
        ret = BAD(conn, NULL, "the body must be a JSON object");
        goto out;
    }
    const char *key = api_key_of(conn);
    json_t *prev = json_object_get(r, "previous_response_id");
    if (prev && !json_is_null(prev)) {
        if (!is_str(prev)) {
            ret = BAD(conn, "previous_response_id", "'previous_response_id' must be a string");
            goto out;
        }
        hist = store_get(store_of(fe), key, json_string_value(prev));
        if (!hist) {
            ret = send_error(conn, MHD_HTTP_BAD_REQUEST, "invalid_request_error", "previous_response_id",
                             "previous_response_not_found", "Previous response with id '%s' not found.",
                             json_string_value(prev));
            goto out;
        }
    }
    json_t *hmsgs = hist ? json_copy(hist) : json_array(); /* this turn's whole conversation, instructions apart */
    if (input_items(json_object_get(r, "input"), hmsgs, api_template_keeps_reasoning(fe), &pe) < 0) {
        json_decref(hmsgs);
        goto bad;
    }
    json_t *ins = json_object_get(r, "instructions");
    if (ins && !json_is_null(ins)) {
        if (!is_str(ins)) {
            json_decref(hmsgs);
            ret = BAD(conn, "instructions", "'instructions' must be a string");
            goto out;
        }
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "system", "content", ins));
    }
    json_array_extend(msgs, hmsgs);
    json_object_set(chat, "messages", msgs);
    json_t *v = json_object_get(r, "max_output_tokens");
    if (v && !json_is_null(v)) json_object_set(chat, "max_tokens", v);
    static const char *const same[] = {"model", "temperature", "top_p", "stream", "parallel_tool_calls", "seed"};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        v = json_object_get(r, same[i]);
        if (v && !json_is_null(v)) json_object_set(chat, same[i], v);
    }
    /* pagoda's grammar extension (docs/structured-output.md) as in chat */
    v = json_object_get(r, "grammar");
    if (v && !json_is_null(v)) json_object_set(chat, "grammar", v);
    /* reasoning.effort reaches the template (harmony's Reasoning: line) */
    v = json_object_get(r, "reasoning");
    json_t *eff = json_is_object(v) ? json_object_get(v, "effort") : NULL;
    if (v && !json_is_null(v) && !json_is_object(v)) {
        json_decref(hmsgs);
        ret = BAD(conn, "reasoning", "'reasoning' must be an object such as {\"effort\": \"low\"}");
        goto out;
    }
    if (eff && !json_is_null(eff)) json_object_set(chat, "reasoning_effort", eff);
    if (tools_of(r, chat, &has_tools, &pe) < 0 || text_format(r, chat, &pe) < 0) {
        json_decref(hmsgs);
        goto bad;
    }
    v = json_object_get(r, "store");
    if (v && !json_is_null(v) && !json_is_boolean(v)) {
        json_decref(hmsgs);
        ret = BAD(conn, "store", "'store' must be a boolean");
        goto out;
    }
    as = api_state_new(API_RESPONSES, "resp_");
    if (!as) {
        json_decref(hmsgs);
        ret = MHD_NO;
        goto out;
    }
    as->store = !v || json_is_null(v) || json_is_true(v);
    snprintf(as->key, sizeof as->key, "%s", key);
    as->history = hmsgs;
    as->req = echo_fields(r);
    json_object_set_new(as->req, "store", json_boolean(as->store));
    as->tools = has_tools;
    as->out_items = json_array();
    api_template_thinks(fe, &as->think, &as->think_open);
    json_decref(r);
    json_decref(hist);
    json_decref(msgs);
    return generate_body(fe, conn, cs, KIND_CHAT, chat, as);
bad:
    ret = BAD(conn, pe.param[0] ? pe.param : NULL, "%s", pe.msg);
out:
    api_state_free(as);
    json_decref(chat);
    json_decref(msgs);
    json_decref(hist);
    json_decref(r);
    return ret;
}

/* ------------------------------------------------------------ the answer */

static void item_id(api_state *as, const char *prefix, int n, char *out, size_t cap)
{
    snprintf(out, cap, "%s_%.24s%02d", prefix, as->id + 5, n);
}

static json_t *usage_of(const choice *c, int64_t estimate)
{
    int64_t pt = c->usage.prompt_tokens ? c->usage.prompt_tokens : estimate;
    int64_t ct = c->usage.completion_tokens;
    /* tier_cached_tokens is pagoda's: of cached_tokens, those read back
     * from the prefix cache's disk tier (as chat completions have it) */
    return json_pack("{s:I,s:{s:I,s:i,s:I},s:I,s:{s:i},s:I}", "input_tokens", (json_int_t)pt,
                     "input_tokens_details", "cached_tokens", (json_int_t)c->usage.cached_tokens,
                     "cache_write_tokens", 0, "tier_cached_tokens", (json_int_t)c->tier_cached, "output_tokens",
                     (json_int_t)ct, "output_tokens_details", "reasoning_tokens", 0, "total_tokens", (json_int_t)(pt + ct));
}

/* the response object; c NULL: not finished (in_progress, no usage) */
static json_t *resp_object(hreq *hr, const choice *c, const char *status)
{
    api_state *as = hr->as;
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:s%,s:o}", "id", as->id, "object", "response", "created_at",
                          (json_int_t)hr->created, "status", status, "model", hr->model, strlen(hr->model), "output",
                          c ? json_incref(as->out_items) : json_array());
    json_object_update(o, as->req);
    json_object_set_new(o, "error", json_null());
    json_object_set_new(o, "incomplete_details", c && c->finish_reason == PAGODA_FINISH_LENGTH
                                                     ? json_pack("{s:s}", "reason", "max_output_tokens")
                                                     : json_null());
    json_object_set_new(o, "usage", c ? usage_of(c, as->input_tokens) : json_null());
    return o;
}

static void ev(hreq *hr, const char *type, json_t *o)
{
    api_state *as = hr->as;
    if (!hr->stream) { /* the whole answer is built by the same code, silently */
        json_decref(o);
        return;
    }
    json_object_set_new(o, "type", json_string(type));
    json_object_set_new(o, "sequence_number", json_integer(as->seq++));
    api_sse(hr, type, o);
}

static void r_close(hreq *hr)
{
    api_state *as = hr->as;
    if (!as->open) return;
    int idx = as->n_blocks - 1;
    json_t *item = json_array_get(as->out_items, (size_t)idx);
    const char *id = json_string_value(json_object_get(item, "id"));
    if (as->open == 1) {
        json_t *part = json_pack("{s:s,s:s%,s:[],s:[]}", "type", "output_text", "text", as->text.p ? as->text.p : "",
                                 as->text.len, "annotations", "logprobs");
        ev(hr, "response.output_text.done", json_pack("{s:s,s:i,s:i,s:s%,s:[]}", "item_id", id, "output_index", idx,
                                                      "content_index", 0, "text", as->text.p ? as->text.p : "",
                                                      as->text.len, "logprobs"));
        ev(hr, "response.content_part.done", json_pack("{s:s,s:i,s:i,s:O}", "item_id", id, "output_index", idx,
                                                       "content_index", 0, "part", part));
        json_object_set_new(item, "content", json_pack("[o]", part));
    } else {
        json_t *part = json_pack("{s:s,s:s%}", "type", "reasoning_text", "text",
                                 as->reasoning.p ? as->reasoning.p : "", as->reasoning.len);
        ev(hr, "response.reasoning_text.done", json_pack("{s:s,s:i,s:i,s:s%}", "item_id", id, "output_index", idx,
                                                         "content_index", 0, "text",
                                                         as->reasoning.p ? as->reasoning.p : "", as->reasoning.len));
        json_object_set_new(item, "content", json_pack("[o]", part));
    }
    json_object_set_new(item, "status", json_string(as->cut ? "incomplete" : "completed"));
    ev(hr, "response.output_item.done", json_pack("{s:i,s:O}", "output_index", idx, "item", item));
    as->text.len = as->reasoning.len = 0;
    as->open = 0;
}

static void r_open(hreq *hr, int kind)
{
    api_state *as = hr->as;
    if (as->open == kind) return;
    r_close(hr);
    char id[64];
    int idx = as->n_blocks++;
    item_id(as, kind == 1 ? "msg" : "rs", idx, id, sizeof id);
    json_t *item = kind == 1 ? json_pack("{s:s,s:s,s:s,s:s,s:[]}", "type", "message", "id", id, "status", "in_progress",
                                         "role", "assistant", "content")
                             : json_pack("{s:s,s:s,s:[],s:[],s:s}", "type", "reasoning", "id", id, "summary", "content",
                                         "status", "in_progress");
    json_array_append_new(as->out_items, item);
    ev(hr, "response.output_item.added", json_pack("{s:i,s:O}", "output_index", idx, "item", item));
    if (kind == 1)
        ev(hr, "response.content_part.added",
           json_pack("{s:s,s:i,s:i,s:{s:s,s:s,s:[],s:[]}}", "item_id", id, "output_index", idx, "content_index", 0,
                     "part", "type", "output_text", "text", "", "annotations", "logprobs"));
    as->open = kind;
}

static int all_space(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)s[i])) return 0;
    return 1;
}

static const char *open_id(api_state *as)
{
    json_t *item = json_array_get(as->out_items, (size_t)as->n_blocks - 1);
    return json_string_value(json_object_get(item, "id"));
}

static void r_text(void *u, const char *s, size_t n)
{
    hreq *hr = u;
    api_state *as = hr->as;
    if (as->open != 1 && all_space(s, n)) {
        sb_put(&as->ws, s, n);
        return;
    }
    r_open(hr, 1);
    if (as->ws.len) {
        sb_put(&as->text, as->ws.p, as->ws.len);
        ev(hr, "response.output_text.delta", json_pack("{s:s,s:i,s:i,s:s%,s:[]}", "item_id", open_id(as), "output_index",
                                                       as->n_blocks - 1, "content_index", 0, "delta", as->ws.p,
                                                       as->ws.len, "logprobs"));
        as->ws.len = 0;
    }
    sb_put(&as->text, s, n);
    ev(hr, "response.output_text.delta", json_pack("{s:s,s:i,s:i,s:o,s:[]}", "item_id", open_id(as), "output_index",
                                                   as->n_blocks - 1, "content_index", 0, "delta", jstr(s, n),
                                                   "logprobs"));
}

static void r_think(void *u, const char *s, size_t n)
{
    hreq *hr = u;
    api_state *as = hr->as;
    as->ws.len = 0;
    r_open(hr, 2);
    sb_put(&as->reasoning, s, n);
    ev(hr, "response.reasoning_text.delta", json_pack("{s:s,s:i,s:i,s:o}", "item_id", open_id(as), "output_index",
                                                      as->n_blocks - 1, "content_index", 0, "delta", jstr(s, n)));
}

static void r_call(void *u, const char *name, const char *args)
{
    hreq *hr = u;
    api_state *as = hr->as;
    as->ws.len = 0;
    r_close(hr);
    char id[64], cid[64];
    int idx = as->n_blocks++;
    item_id(as, "fc", idx, id, sizeof id);
    item_id(as, "call", as->n_calls++, cid, sizeof cid);
    json_t *item = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "type", "function_call", "id", id, "call_id", cid, "name",
                             name, "arguments", "", "status", "in_progress");
    ev(hr, "response.output_item.added", json_pack("{s:i,s:O}", "output_index", idx, "item", item));
    ev(hr, "response.function_call_arguments.delta",
       json_pack("{s:s,s:i,s:s}", "item_id", id, "output_index", idx, "delta", args));
    ev(hr, "response.function_call_arguments.done",
       json_pack("{s:s,s:i,s:s,s:s}", "item_id", id, "output_index", idx, "arguments", args, "name", name));
    json_object_set_new(item, "arguments", json_string(args));
    json_object_set_new(item, "status", json_string("completed"));
    ev(hr, "response.output_item.done", json_pack("{s:i,s:O}", "output_index", idx, "item", item));
    json_array_append_new(as->out_items, item);
}

/* the answer as a chat turn, appended to the stored conversation */
static void keep(hreq *hr)
{
    api_state *as = hr->as;
    if (!as->store) return;
    sbuf text = {0}, thought = {0};
    json_t *calls = json_array();
    size_t i, j;
    json_t *it, *p;
    int keep = api_template_keeps_reasoning(hr->fe);
    json_array_foreach(as->out_items, i, it) {
        const char *t = json_string_value(json_object_get(it, "type"));
        if (!strcmp(t, "reasoning") && keep) {
            reasoning_text(it, &thought);
        } else if (!strcmp(t, "message")) {
            json_array_foreach(json_object_get(it, "content"), j, p) {
                json_t *tx = json_object_get(p, "text");
                sb_put(&text, json_string_value(tx), json_string_length(tx));
            }
        } else if (!strcmp(t, "function_call")) {
            json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", json_object_get(it, "call_id"),
                                                   "type", "function", "function", "name", json_object_get(it, "name"),
                                                   "arguments", json_object_get(it, "arguments")));
        }
    }
    json_t *msg = json_pack("{s:s,s:s%}", "role", "assistant", "content", text.p ? text.p : "", text.len);
    if (json_array_size(calls)) json_object_set(msg, "tool_calls", calls);
    if (thought.len) json_object_set_new(msg, "reasoning_content", json_stringn(thought.p, thought.len));
    json_t *conv = json_copy(as->history);
    json_array_append_new(conv, msg);
    pthread_mutex_lock(&hr->fe->mu);
    if (!hr->fe->store) hr->fe->store = store_new();
    resp_store *s = hr->fe->store;
    pthread_mutex_unlock(&hr->fe->mu);
    if (s) store_put(s, as->key, as->id, conv);
    json_decref(conv);
    json_decref(calls);
    free(text.p);
    free(thought.p);
}

static const char *status_of(const choice *c)
{
    if (c->finish_reason == PAGODA_FINISH_LENGTH) return "incomplete";
    if (c->finish_reason == PAGODA_FINISH_CANCELLED) return "cancelled";
    return "completed";
}

static void finish(hreq *hr, choice *c)
{
    api_state *as = hr->as;
    split_sink k = {r_text, r_think, r_call, hr};
    as->cut = c->finish_reason == PAGODA_FINISH_LENGTH; /* the item left open is cut short */
    split_end(&as->sp, &k);
    r_close(hr);
    keep(hr);
}

enum MHD_Result resp_answer_full(struct MHD_Connection *conn, hreq *hr)
{
    api_state *as = hr->as;
    choice *c = &hr->choices[0];
    if (c->finish_reason == PAGODA_FINISH_ERROR)
        return send_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "server_error", NULL, NULL, "generation failed: %s",
                          c->error ? c->error : "unknown error");
    split_init(&as->sp, as->think, as->think_open, as->tools);
    split_sink k = {r_text, r_think, r_call, hr};
    split_feed(&as->sp, c->text.p ? c->text.p : "", c->text.len, &k);
    finish(hr, c);
    return send_json(conn, MHD_HTTP_OK, resp_object(hr, c, status_of(c)));
}

void resp_stream_start(hreq *hr)
{
    api_state *as = hr->as;
    split_init(&as->sp, as->think, as->think_open, as->tools);
    ev(hr, "response.created", json_pack("{s:o}", "response", resp_object(hr, NULL, "in_progress")));
    ev(hr, "response.in_progress", json_pack("{s:o}", "response", resp_object(hr, NULL, "in_progress")));
}

void resp_stream_event(hreq *hr, ev_item *e)
{
    api_state *as = hr->as;
    split_sink k = {r_text, r_think, r_call, hr};
    if (e->type == PAGODA_EVENT_TOKEN) {
        if (e->text_len) split_feed(&as->sp, e->text, e->text_len, &k);
        return;
    }
    choice *c = &hr->choices[e->choice];
    if (e->finish_reason == PAGODA_FINISH_ERROR) {
        const char *m = c->error ? c->error : "generation failed";
        json_t *o = resp_object(hr, c, "failed");
        json_object_set_new(o, "error", json_pack("{s:s,s:o}", "code", "server_error", "message", jstr(m, strlen(m))));
        ev(hr, "response.failed", json_pack("{s:o}", "response", o));
        return;
    }
    finish(hr, c);
    const char *st = status_of(c);
    ev(hr, !strcmp(st, "incomplete") ? "response.incomplete" : "response.completed",
       json_pack("{s:o}", "response", resp_object(hr, c, st)));
}

void resp_stream_tail(hreq *hr) { (void)hr; }
