/*
 * messages.c: Anthropic's Messages API, POST /v1/messages and
 * /v1/messages/count_tokens. The body (system, messages of text /
 * tool_use / tool_result blocks, tools with input_schema, tool_choice,
 * stop_sequences, sampling, max_tokens) becomes a chat-completions body
 * (tools as functions, tool_use as tool_calls, tool_result as "tool"
 * turns) so the template, the tool format and the constraint are the ones
 * chat completions use; the output comes back as content blocks: text,
 * thinking (a <think> block), tool_use (a <tool_call> block). Streamed as
 * Anthropic documents it: message_start, ping, content_block_start /
 * content_block_delta (text_delta, thinking_delta, input_json_delta) /
 * content_block_stop per block, message_delta (stop_reason, usage),
 * message_stop; an engine error as an "error" event.
 * usage: input_tokens counts the prompt tokens not served from the prefix
 * cache, cache_read_input_tokens those that were (their sum is the prompt).
 * Not for: errors' shape (reply.c, reply_flavor) or the generation itself
 * (generate.c).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <jansson.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../generate.h"
#include "../reply.h"
#include "../structured.h"
#include "api.h"

/* ------------------------------------------------------------ the request */

static int is_str(json_t *v) { return json_is_string(v); }

/* text of a system / tool_result content: a string or text blocks */
static int text_of(json_t *c, const char *field, sbuf *b, perr *pe)
{
    if (json_is_string(c)) {
        sb_put(b, json_string_value(c), json_string_length(c));
        return 0;
    }
    if (!json_is_array(c)) return rf_fail(pe, field, "%s: must be a string or a list of text blocks", field);
    size_t i;
    json_t *blk;
    json_array_foreach(c, i, blk) {
        json_t *type = json_object_get(blk, "type"), *text = json_object_get(blk, "text");
        if (!is_str(type)) return rf_fail(pe, field, "%s.%zu.type: Field required", field, i);
        if (strcmp(json_string_value(type), "text"))
            return rf_fail(pe, field, "%s.%zu.type: '%s' content is not supported by this server (text only)",
                           field, i, json_string_value(type));
        if (!is_str(text)) return rf_fail(pe, field, "%s.%zu.text: must be a string", field, i);
        if (b->len) sb_str(b, "\n");
        sb_put(b, json_string_value(text), json_string_length(text));
    }
    return 0;
}

static int known_id(json_t *ids, const char *id)
{
    size_t i;
    json_t *v;
    json_array_foreach(ids, i, v) if (!strcmp(json_string_value(v), id)) return 1;
    return 0;
}

/* one Anthropic message into chat messages appended to out; an
 * assistant's thinking blocks become its reasoning_content when keep (the
 * template writes a turn's reasoning back: api_template_keeps_reasoning) */
static int one_message(json_t *m, size_t k, json_t *out, json_t *ids, int keep, perr *pe)
{
    char f[64];
    snprintf(f, sizeof f, "messages.%zu", k);
    json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
    if (!json_is_object(m) || !is_str(role))
        return rf_fail(pe, "messages", "%s.role: Field required", f);
    const char *r = json_string_value(role);
    int user = !strcmp(r, "user");
    if (!user && strcmp(r, "assistant"))
        return rf_fail(pe, "messages", "%s.role: must be \"user\" or \"assistant\", not \"%s\"", f, r);
    if (json_is_string(content)) {
        json_array_append_new(out, json_pack("{s:s,s:O}", "role", r, "content", content));
        return 0;
    }
    if (!json_is_array(content))
        return rf_fail(pe, "messages", "%s.content: must be a string or a list of content blocks", f);
    sbuf text = {0}, thought = {0};
    json_t *calls = json_array();
    int rc = 0;
    size_t i;
    json_t *blk;
    json_array_foreach(content, i, blk) {
        json_t *type = json_object_get(blk, "type");
        const char *t = is_str(type) ? json_string_value(type) : "";
        if (!*t) {
            rc = rf_fail(pe, "messages", "%s.content.%zu.type: Field required", f, i);
            break;
        }
        if (!strcmp(t, "text")) {
            json_t *tx = json_object_get(blk, "text");
            if (!is_str(tx)) {
                rc = rf_fail(pe, "messages", "%s.content.%zu.text: must be a string", f, i);
                break;
            }
            sb_put(&text, json_string_value(tx), json_string_length(tx));
        } else if (!strcmp(t, "tool_use") && !user) {
            json_t *id = json_object_get(blk, "id"), *name = json_object_get(blk, "name");
            json_t *input = json_object_get(blk, "input");
            if (!is_str(id) || !is_str(name) || !json_is_object(input)) {
                rc = rf_fail(pe, "messages", "%s.content.%zu: a tool_use block needs 'id', 'name' and an "
                             "object 'input'", f, i);
                break;
            }
            char *args = json_dumps(input, JSON_COMPACT);
            json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:s}}", "id", id, "type", "function",
                                                   "function", "name", name, "arguments", args ? args : "{}"));
            free(args);
            json_array_append(ids, id);
        } else if (!strcmp(t, "tool_result") && user) {
            json_t *id = json_object_get(blk, "tool_use_id"), *c = json_object_get(blk, "content");
            if (!is_str(id)) {
                rc = rf_fail(pe, "messages", "%s.content.%zu.tool_use_id: Field required", f, i);
                break;
            }
            if (!known_id(ids, json_string_value(id))) {
                rc = rf_fail(pe, "messages", "%s.content.%zu.tool_use_id: '%s' matches no tool_use block "
                             "of an earlier assistant message", f, i, json_string_value(id));
                break;
            }
            sbuf res = {0};
            char cf[128];
            snprintf(cf, sizeof cf, "%s.content.%zu.content", f, i);
            if (json_is_true(json_object_get(blk, "is_error"))) sb_str(&res, "Error: ");
            if (c && !json_is_null(c) && text_of(c, cf, &res, pe) < 0) {
                free(res.p);
                rc = -1;
                break;
            }
            if (text.len) { /* text before a result stays before it */
                json_array_append_new(out, json_pack("{s:s,s:s%}", "role", "user", "content", text.p, text.len));
                text.len = 0;
            }
            json_array_append_new(out, json_pack("{s:s,s:O,s:s%}", "role", "tool", "tool_call_id", id,
                                                 "content", res.p ? res.p : "", res.len));
            free(res.p);
        } else if (!strcmp(t, "thinking") || !strcmp(t, "redacted_thinking")) {
            /* shown again only where the template writes it back (after
             * the last user message: the renderer drops earlier turns');
             * a redacted block has no text to show */
            json_t *th = json_object_get(blk, "thinking");
            if (keep && !user && is_str(th)) sb_put(&thought, json_string_value(th), json_string_length(th));
        } else {
            rc = rf_fail(pe, "messages", "%s.content.%zu.type: '%s' content is not supported by this server%s", f,
                         i, t, !strcmp(t, "tool_use") || !strcmp(t, "tool_result") ? " in this role" : "");
            break;
        }
    }
    if (rc == 0 && (text.len || json_array_size(calls) || !json_array_size(content) ||
                    (!user && !json_array_size(calls)))) {
        json_t *msg = json_pack("{s:s,s:s%}", "role", r, "content", text.p ? text.p : "", text.len);
        if (json_array_size(calls)) json_object_set(msg, "tool_calls", calls);
        if (thought.len) json_object_set_new(msg, "reasoning_content", json_stringn(thought.p, thought.len));
        json_array_append_new(out, msg);
    }
    json_decref(calls);
    free(text.p);
    free(thought.p);
    return rc;
}

static int tools_of(json_t *a, json_t *chat, int *has_tools, perr *pe)
{
    json_t *tools = json_object_get(a, "tools"), *tc = json_object_get(a, "tool_choice");
    *has_tools = 0;
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) return rf_fail(pe, "tools", "tools: must be a list of tools");
        json_t *fns = json_array();
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            json_t *type = json_object_get(t, "type"), *name = json_object_get(t, "name");
            json_t *schema = json_object_get(t, "input_schema"), *desc = json_object_get(t, "description");
            if (type && !json_is_null(type) && !(is_str(type) && !strcmp(json_string_value(type), "custom"))) {
                json_decref(fns);
                return rf_fail(pe, "tools", "tools.%zu.type: '%s' tools are not supported by this server "
                               "(client tools with an input_schema only)", i,
                               is_str(type) ? json_string_value(type) : "?");
            }
            if (!is_str(name)) {
                json_decref(fns);
                return rf_fail(pe, "tools", "tools.%zu.name: Field required", i);
            }
            if (!json_is_object(schema)) {
                json_decref(fns);
                return rf_fail(pe, "tools", "tools.%zu.input_schema: Field required (a JSON Schema object)", i);
            }
            json_t *fn = json_pack("{s:O,s:O}", "name", name, "parameters", schema);
            if (is_str(desc)) json_object_set(fn, "description", desc);
            json_array_append_new(fns, json_pack("{s:s,s:o}", "type", "function", "function", fn));
        }
        if (json_array_size(fns)) {
            json_object_set(chat, "tools", fns);
            *has_tools = 1;
        }
        json_decref(fns);
    }
    if (!tc || json_is_null(tc)) return 0;
    json_t *type = json_object_get(tc, "type");
    if (!json_is_object(tc) || !is_str(type))
        return rf_fail(pe, "tool_choice", "tool_choice: must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}");
    const char *t = json_string_value(type);
    if (json_is_true(json_object_get(tc, "disable_parallel_tool_use")))
        json_object_set_new(chat, "parallel_tool_calls", json_false());
    if (!strcmp(t, "auto")) json_object_set_new(chat, "tool_choice", json_string("auto"));
    else if (!strcmp(t, "any")) json_object_set_new(chat, "tool_choice", json_string("required"));
    else if (!strcmp(t, "none")) {
        json_object_set_new(chat, "tool_choice", json_string("none"));
        *has_tools = 0;
    } else if (!strcmp(t, "tool")) {
        json_t *name = json_object_get(tc, "name");
        if (!is_str(name)) return rf_fail(pe, "tool_choice", "tool_choice.name: Field required");
        json_object_set_new(chat, "tool_choice", json_pack("{s:s,s:{s:O}}", "type", "function", "function",
                                                           "name", name));
    } else {
        return rf_fail(pe, "tool_choice", "tool_choice.type: '%s' is not one of auto, any, tool, none", t);
    }
    if (strcmp(t, "none") && !*has_tools)
        return rf_fail(pe, "tool_choice", "tool_choice: needs 'tools'");
    return 0;
}

/* The Anthropic body a as a chat-completions body (*out, new); count: for
 * count_tokens (max_tokens not needed). 0, or -1 with pe filled. */
static int to_chat(json_t *a, int count, int keep, json_t **out, int *has_tools, perr *pe)
{
    *out = NULL;
    if (!json_is_object(a)) return rf_fail(pe, NULL, "the body must be a JSON object");
    json_t *chat = json_object();
    json_t *msgs = json_array(), *ids = json_array();
    int rc = -1;
    json_object_set(chat, "messages", msgs);
    json_t *v = json_object_get(a, "model");
    if (v && !json_is_null(v)) json_object_set(chat, "model", v);
    v = json_object_get(a, "max_tokens");
    if (!count) {
        if (!v || json_is_null(v)) {
            rf_fail(pe, "max_tokens", "max_tokens: Field required");
            goto out;
        }
        if (!json_is_integer(v) || json_integer_value(v) < 1) {
            rf_fail(pe, "max_tokens", "max_tokens: must be an integer of at least 1");
            goto out;
        }
        json_object_set(chat, "max_tokens", v);
    }
    json_t *sys = json_object_get(a, "system");
    if (sys && !json_is_null(sys)) {
        sbuf b = {0};
        if (text_of(sys, "system", &b, pe) < 0) {
            free(b.p);
            goto out;
        }
        json_array_append_new(msgs, json_pack("{s:s,s:s%}", "role", "system", "content", b.p ? b.p : "", b.len));
        free(b.p);
    }
    json_t *m = json_object_get(a, "messages");
    if (!json_is_array(m) || !json_array_size(m)) {
        rf_fail(pe, "messages", "messages: must be a non-empty list of {role, content}");
        goto out;
    }
    size_t k;
    json_t *e;
    json_array_foreach(m, k, e) if (one_message(e, k, msgs, ids, keep, pe) < 0) goto out;
    static const char *const same[] = {"temperature", "top_p", "top_k", "stream"};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        v = json_object_get(a, same[i]);
        if (v && !json_is_null(v)) json_object_set(chat, same[i], v);
    }
    v = json_object_get(a, "stop_sequences");
    if (v && !json_is_null(v)) {
        if (!json_is_array(v)) {
            rf_fail(pe, "stop_sequences", "stop_sequences: must be a list of strings");
            goto out;
        }
        if (json_array_size(v)) json_object_set(chat, "stop", v);
    }
    v = json_object_get(a, "thinking");
    if (v && !json_is_null(v) && !json_is_object(v)) {
        rf_fail(pe, "thinking", "thinking: must be {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": "
                "\"disabled\"}");
        goto out;
    }
    /* thinking on or off reaches the template (Qwen3's enable_thinking) */
    json_t *tt = json_object_get(v, "type");
    if (json_is_string(tt) && (!strcmp(json_string_value(tt), "enabled") || !strcmp(json_string_value(tt), "disabled")))
        json_object_set_new(chat, "chat_template_kwargs",
                            json_pack("{s:b}", "enable_thinking", !strcmp(json_string_value(tt), "enabled")));
    if (tools_of(a, chat, has_tools, pe) < 0) goto out;
    rc = 0;
out:
    json_decref(msgs);
    json_decref(ids);
    if (rc < 0) json_decref(chat);
    else *out = chat;
    return rc;
}

static enum MHD_Result bad(struct MHD_Connection *conn, perr *pe)
{
    api_field_names(API_MESSAGES, pe->msg, sizeof pe->msg);
    return BAD(conn, pe->param[0] ? pe->param : NULL, "%s", pe->msg);
}

enum MHD_Result route_messages(http_fe *fe, struct MHD_Connection *conn, conn_state *cs)
{
    json_error_t jerr;
    perr pe = {{0}, {0}};
    json_t *a = json_loadb(cs->body.p ? cs->body.p : "", cs->body.len, 0, &jerr);
    if (!a) return BAD(conn, NULL, "malformed JSON body: %s (line %d, column %d)", jerr.text, jerr.line, jerr.column);
    json_t *chat = NULL;
    int has_tools = 0;
    int rc = to_chat(a, 0, api_template_keeps_reasoning(fe), &chat, &has_tools, &pe);
    json_decref(a);
    if (rc < 0) return bad(conn, &pe);
    api_state *as = api_state_new(API_MESSAGES, "msg_");
    if (!as) {
        json_decref(chat);
        return MHD_NO;
    }
    as->tools = has_tools;
    api_template_thinks(fe, &as->think, &as->think_open);
    return generate_body(fe, conn, cs, KIND_CHAT, chat, as);
}

enum MHD_Result route_count_tokens(http_fe *fe, struct MHD_Connection *conn, conn_state *cs)
{
    const pagoda_host *h = fe->host;
    json_error_t jerr;
    perr pe = {{0}, {0}};
    pagoda_chat_message *msgs = NULL;
    char **owned = NULL;
    int n_msgs = 0, has_tools = 0;
    char *rendered = NULL;
    st_req sr;
    memset(&sr, 0, sizeof sr);
    enum MHD_Result ret;
    json_t *a = json_loadb(cs->body.p ? cs->body.p : "", cs->body.len, 0, &jerr);
    if (!a) return BAD(conn, NULL, "malformed JSON body: %s (line %d, column %d)", jerr.text, jerr.line, jerr.column);
    json_t *chat = NULL;
    int rc = to_chat(a, 1, api_template_keeps_reasoning(fe), &chat, &has_tools, &pe);
    json_decref(a);
    if (rc < 0) return bad(conn, &pe);
    if (st_parse(h, chat, KIND_CHAT, api_template_fmt(fe), false, &sr, &pe) < 0 || parse_messages(chat, &msgs, &owned, &n_msgs, &pe) < 0 ||
        st_chat_messages(chat, &sr, api_template_fmt(fe), api_template_chat_flags(fe), &msgs, &owned, &n_msgs,
                         &pe) < 0) {
        ret = bad(conn, &pe);
        goto out;
    }
    int32_t stop_ids[16], n_stop = 0;
    if (!h->chat_render || h->chat_render(h, msgs, n_msgs, true, &rendered, stop_ids, 16, &n_stop) != PAGODA_OK ||
        !rendered) {
        ret = BAD(conn, "messages", "the chat template could not be rendered (does the model have one?)");
        goto out;
    }
    ret = send_json(conn, MHD_HTTP_OK, json_pack("{s:I}", "input_tokens", (json_int_t)api_count_tokens(h, rendered)));
out:
    if (rendered) h->free(h, rendered);
    for (int i = 0; owned && i < n_msgs; i++) free(owned[i]);
    free(owned);
    free(msgs);
    st_free(&sr);
    json_decref(chat);
    return ret;
}

/* ------------------------------------------------------------ the answer */

static const char *stop_reason(const choice *c, int n_calls)
{
    if (c->finish_reason == PAGODA_FINISH_LENGTH) return "max_tokens";
    if (n_calls && c->finish_reason == PAGODA_FINISH_STOP) return "tool_use";
    return "end_turn";
}

static json_t *usage_of(const choice *c, int64_t input_estimate)
{
    int64_t pt = c->usage.prompt_tokens ? c->usage.prompt_tokens : input_estimate;
    int64_t cached = c->usage.cached_tokens;
    if (cached > pt) cached = pt;
    int64_t tier = c->tier_cached > cached ? cached : c->tier_cached;
    /* tier_cached_tokens is pagoda's: of cache_read_input_tokens, those
     * read back from the prefix cache's disk tier (as chat completions'
     * prompt_tokens_details has it) */
    return json_pack("{s:I,s:I,s:I,s:I,s:I}", "input_tokens", (json_int_t)(pt - cached), "output_tokens",
                     (json_int_t)c->usage.completion_tokens, "cache_creation_input_tokens", (json_int_t)0,
                     "cache_read_input_tokens", (json_int_t)cached, "tier_cached_tokens", (json_int_t)tier);
}

static void tool_id(const api_state *as, int index, char *out, size_t n)
{
    /* the message id's random part, and the call's index */
    snprintf(out, n, "toolu_%.24s%02d", as->id + 4, index);
}

static int all_space(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)s[i])) return 0;
    return 1;
}

/* ---- whole */

typedef struct whole {
    api_state *as;
    json_t *content;
    int last;                /* the last block's kind: 0 none, 1 text, 2 thinking, 3 tool_use */
} whole;

static void w_append(whole *w, int kind, const char *key, const char *s, size_t n)
{
    json_t *blk = w->last == kind ? json_array_get(w->content, json_array_size(w->content) - 1) : NULL;
    if (!blk) {
        blk = kind == 1 ? json_pack("{s:s,s:s}", "type", "text", "text", "")
                        : json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "", "signature", "");
        json_array_append_new(w->content, blk);
        w->last = kind;
    }
    sbuf b = {0};
    json_t *cur = json_object_get(blk, key);
    sb_put(&b, json_string_value(cur), json_string_length(cur));
    sb_put(&b, s, n);
    json_object_set_new(blk, key, jstr(b.p, b.len));
    free(b.p);
}

static void w_text(void *u, const char *s, size_t n) { w_append(u, 1, "text", s, n); }
static void w_think(void *u, const char *s, size_t n) { w_append(u, 2, "thinking", s, n); }

static void w_call(void *u, const char *name, const char *args)
{
    whole *w = u;
    char id[64];
    tool_id(w->as, w->as->n_calls++, id, sizeof id);
    json_t *input = json_loads(args, 0, NULL);
    if (!json_is_object(input)) {
        json_decref(input);
        input = json_object();
    }
    json_array_append_new(w->content, json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", id, "name", name,
                                                 "input", input));
    w->last = 3;
}

enum MHD_Result msg_answer_full(struct MHD_Connection *conn, hreq *hr)
{
    api_state *as = hr->as;
    choice *c = &hr->choices[0];
    if (c->finish_reason == PAGODA_FINISH_ERROR)
        return send_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "server_error", NULL, NULL, "generation failed: %s",
                          c->error ? c->error : "unknown error");
    whole w = {as, json_array(), 0};
    splitter sp;
    split_init(&sp, as->think, as->think_open, as->tools);
    split_sink k = {w_text, w_think, w_call, &w};
    split_feed(&sp, c->text.p ? c->text.p : "", c->text.len, &k);
    split_end(&sp, &k);
    split_free(&sp);
    /* around calls, text that is only whitespace is no block; with calls
     * the text is trimmed */
    json_t *content = json_array();
    size_t i;
    json_t *blk;
    json_array_foreach(w.content, i, blk) {
        json_t *t = json_object_get(blk, "text");
        if (t && strcmp(json_string_value(json_object_get(blk, "type")), "text") == 0) {
            const char *s = json_string_value(t);
            size_t a = 0, b = json_string_length(t);
            if (all_space(s, b)) continue;
            if (as->n_calls) {
                while (a < b && isspace((unsigned char)s[a])) a++;
                while (b > a && isspace((unsigned char)s[b - 1])) b--;
                json_object_set_new(blk, "text", jstr(s + a, b - a));
            }
        }
        json_array_append(content, blk);
    }
    json_decref(w.content);
    json_t *o = json_pack("{s:s,s:s,s:s,s:s%,s:o,s:s,s:n,s:o}", "id", as->id, "type", "message", "role",
                          "assistant", "model", hr->model, strlen(hr->model), "content", content, "stop_reason",
                          stop_reason(c, as->n_calls), "stop_sequence", "usage", usage_of(c, 0));
    return send_json(conn, MHD_HTTP_OK, o);
}

/* ---- streamed */

static void s_close(hreq *hr)
{
    api_state *as = hr->as;
    if (!as->open) return;
    if (as->open == 2)
        api_sse(hr, "content_block_delta", json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index",
                                                     as->n_blocks - 1, "delta", "type", "signature_delta",
                                                     "signature", ""));
    api_sse(hr, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", as->n_blocks - 1));
    as->open = 0;
}

static void s_open(hreq *hr, int kind)
{
    api_state *as = hr->as;
    if (as->open == kind) return;
    s_close(hr);
    json_t *blk = kind == 1 ? json_pack("{s:s,s:s}", "type", "text", "text", "")
                            : json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "", "signature", "");
    api_sse(hr, "content_block_start", json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index",
                                                 as->n_blocks++, "content_block", blk));
    as->open = kind;
}

static void s_delta(hreq *hr, const char *type, const char *key, const char *s, size_t n)
{
    api_state *as = hr->as;
    api_sse(hr, "content_block_delta", json_pack("{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index",
                                                 as->n_blocks - 1, "delta", "type", type, key, jstr(s, n)));
}

static void s_text(void *u, const char *s, size_t n)
{
    hreq *hr = u;
    api_state *as = hr->as;
    if (as->open != 1 && all_space(s, n)) {
        /* only whitespace so far: it may just separate calls */
        sb_put(&as->ws, s, n);
        return;
    }
    s_open(hr, 1);
    if (as->ws.len) {
        s_delta(hr, "text_delta", "text", as->ws.p, as->ws.len);
        as->ws.len = 0;
    }
    s_delta(hr, "text_delta", "text", s, n);
}

static void s_think(void *u, const char *s, size_t n)
{
    hreq *hr = u;
    hr->as->ws.len = 0;
    s_open(hr, 2);
    s_delta(hr, "thinking_delta", "thinking", s, n);
}

static void s_call(void *u, const char *name, const char *args)
{
    hreq *hr = u;
    api_state *as = hr->as;
    as->ws.len = 0;
    s_close(hr);
    char id[64];
    tool_id(as, as->n_calls++, id, sizeof id);
    int idx = as->n_blocks++;
    api_sse(hr, "content_block_start",
            json_pack("{s:s,s:i,s:{s:s,s:s,s:s,s:{}}}", "type", "content_block_start", "index", idx, "content_block",
                      "type", "tool_use", "id", id, "name", name, "input"));
    api_sse(hr, "content_block_delta", json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index", idx,
                                                 "delta", "type", "input_json_delta", "partial_json", args));
    api_sse(hr, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", idx));
}

void msg_stream_start(hreq *hr)
{
    api_state *as = hr->as;
    split_init(&as->sp, as->think, as->think_open, as->tools);
    json_t *msg = json_pack("{s:s,s:s,s:s,s:s%,s:[],s:n,s:n,s:{s:I,s:i,s:i,s:i}}", "id", as->id, "type", "message",
                            "role", "assistant", "model", hr->model, strlen(hr->model), "content", "stop_reason",
                            "stop_sequence", "usage", "input_tokens", (json_int_t)as->input_tokens, "output_tokens", 0,
                            "cache_creation_input_tokens", 0, "cache_read_input_tokens", 0);
    api_sse(hr, "message_start", json_pack("{s:s,s:o}", "type", "message_start", "message", msg));
    api_sse(hr, "ping", json_pack("{s:s}", "type", "ping"));
}

void msg_stream_event(hreq *hr, ev_item *e)
{
    api_state *as = hr->as;
    split_sink k = {s_text, s_think, s_call, hr};
    if (e->type == PAGODA_EVENT_TOKEN) {
        if (e->text_len) split_feed(&as->sp, e->text, e->text_len, &k);
        return;
    }
    choice *c = &hr->choices[e->choice];
    if (e->finish_reason == PAGODA_FINISH_ERROR) {
        const char *m = c->error ? c->error : "generation failed";
        api_sse(hr, "error", json_pack("{s:s,s:{s:s,s:o}}", "type", "error", "error", "type", "api_error", "message",
                                       jstr(m, strlen(m))));
        as->seq = -1; /* ended: no message_delta or message_stop */
        return;
    }
    split_end(&as->sp, &k);
    s_close(hr);
    json_t *u = usage_of(c, as->input_tokens);
    api_sse(hr, "message_delta", json_pack("{s:s,s:{s:s,s:n},s:o}", "type", "message_delta", "delta", "stop_reason",
                                           stop_reason(c, as->n_calls), "stop_sequence", "usage", u));
}

void msg_stream_tail(hreq *hr)
{
    if (hr->as->seq < 0) return;
    api_sse(hr, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}
