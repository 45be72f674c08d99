/*
 * parse.c: an OpenAI request body (JSON) into a pagoda_request: the fields
 * both generation endpoints share, the prompts of a completion, the
 * messages of a chat. Validation at the boundary: everything after this
 * trusts the values.
 * Not for: submitting or answering (generate.c), or the sampling fields
 * shared with the stdin frontend (../request_fields.h).
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parse.h"

/* perr, fail, get_num, get_int, get_bool, rf_parse_sampling: request_fields.h */

int parse_common(const pagoda_host *h, json_t *o, int kind, params *p, perr *pe)
{
    int64_t i = 0;
    int b = 0, r;
    h->request_defaults(h, &p->req);
    p->req.struct_size = sizeof p->req;
    p->n = 1;
    p->logprobs = -1;

    json_t *model = json_object_get(o, "model");
    if (model && !json_is_null(model) && !json_is_string(model))
        return rf_fail(pe, "model", "'model' must be a string");
    /* max_tokens 0 is taken here and means "score the prompt alone" with
     * echo (completions), refused below otherwise */
    int zero = 0;
    const char *zero_field = "max_tokens";
    if (rf_parse_sampling(o, &p->req, p->stop, &zero, pe) < 0) return -1;
    /* max_completion_tokens is the newer name and wins when both are given. */
    if ((r = rf_get_int(o, "max_completion_tokens", 0, INT32_MAX, &i, pe)) < 0) return -1;
    if (r) {
        zero = i == 0;
        zero_field = "max_completion_tokens";
        if (i > 0) p->req.max_tokens = (int32_t)i;
    }
    if ((r = rf_get_int(o, "n", 1, 16, &i, pe)) < 0) return -1;
    if (r) p->n = (int)i;

    if ((r = rf_get_bool(o, "stream", &b, pe)) < 0) return -1;
    if (r) p->stream = b;
    json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return rf_fail(pe, "stream_options", "'stream_options' must be an object");
        if ((r = rf_get_bool(so, "include_usage", &b, pe)) < 0) return -1;
        if (r) p->include_usage = b;
    }

    if (kind == KIND_COMPLETION) {
        if ((r = rf_get_int(o, "logprobs", 0, PAGODA_MAX_TOP_LOGPROBS, &i, pe)) < 0) return -1;
        if (r) p->logprobs = (int)i;
        if ((r = rf_get_bool(o, "echo", &b, pe)) < 0) return -1;
        p->echo = r && b;
    } else {
        int want = 0;
        if ((r = rf_get_bool(o, "logprobs", &want, pe)) < 0) return -1;
        int64_t top = 0;
        if ((r = rf_get_int(o, "top_logprobs", 0, PAGODA_MAX_TOP_LOGPROBS, &top, pe)) < 0) return -1;
        if (r && !want) return rf_fail(pe, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        if (want) p->logprobs = (int)top;
    }
    p->req.logprobs = p->logprobs;
    /* pagoda's own field: each token with its step, batch, KV and candidates */
    if ((r = rf_get_bool(o, "pagoda_trace", &b, pe)) < 0) return -1;
    p->trace = r && b;
    p->req.trace = p->trace;
    if (zero && !p->echo)
        return rf_fail(pe, zero_field, "'%s' must be at least 1 (0 scores the prompt alone, with "
                       "'echo': true on /v1/completions)", zero_field);
    if (p->echo) {
        /* each choice would repeat the same prompt scores; a stream would
         * have to send them before the first token: neither is done */
        if (p->n > 1) return rf_fail(pe, "echo", "'echo' cannot be combined with 'n' > 1");
        if (p->stream) return rf_fail(pe, "echo", "'echo' cannot be combined with 'stream': true");
        p->req.score_only = zero;
        p->req.prompt_logprobs = p->logprobs;
    }
    return 0;
}

static int token_array(json_t *a, prompt_in *pi, perr *pe)
{
    size_t k;
    json_t *t;
    pi->n_tokens = (int)json_array_size(a);
    pi->tokens = malloc(sizeof(int32_t) * (json_array_size(a) + 1));
    if (!pi->tokens) return rf_fail(pe, "prompt", "out of memory");
    json_array_foreach(a, k, t) {
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
            return rf_fail(pe, "prompt", "token ids in 'prompt' must be integers in [0, %d]", INT32_MAX);
        pi->tokens[k] = (int32_t)json_integer_value(t);
    }
    return 0;
}

/* prompt: a string, a list of strings, a list of token ids, or a list of such lists. */
int parse_prompts(json_t *o, prompt_in **out, int *n, perr *pe)
{
    json_t *p = json_object_get(o, "prompt");
    *out = NULL;
    *n = 0;
    if (!p || json_is_null(p)) return rf_fail(pe, "prompt", "'prompt' is required");
    if (json_is_string(p)) {
        *out = calloc(1, sizeof **out);
        (*out)[0].text = json_string_value(p);
        (*out)[0].len = json_string_length(p);
        *n = 1;
        return 0;
    }
    if (!json_is_array(p) || json_array_size(p) == 0)
        return rf_fail(pe, "prompt", "'prompt' must be a string, a non-empty list of strings, or token ids");
    size_t np = json_array_size(p);
    json_t *first = json_array_get(p, 0);
    if (json_is_integer(first)) {
        *out = calloc(1, sizeof **out);
        *n = 1;
        return token_array(p, &(*out)[0], pe);
    }
    if (np > MAX_CHOICES) return rf_fail(pe, "prompt", "'prompt' takes at most %d prompts", MAX_CHOICES);
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
            return rf_fail(pe, "prompt", "'prompt' list entries must all be strings or all lists of token ids");
        }
    }
    return 0;
}

void free_prompts(prompt_in *ps, int n)
{
    for (int i = 0; ps && i < n; i++) free(ps[i].tokens);
    free(ps);
}

static int effort_field(json_t *v, const char *param, const char **out, perr *pe)
{
    if (!v || json_is_null(v)) return 0;
    const char *e = json_is_string(v) ? json_string_value(v) : NULL;
    if (!e || (strcmp(e, "low") && strcmp(e, "medium") && strcmp(e, "high")))
        return rf_fail(pe, param, "'%s' must be \"low\", \"medium\" or \"high\"", param);
    *out = e;
    return 0;
}

int parse_chat_options(json_t *o, pagoda_chat_options *co, perr *pe)
{
    memset(co, 0, sizeof *co);
    co->struct_size = sizeof *co;
    co->enable_thinking = -1;
    if (effort_field(json_object_get(o, "reasoning_effort"), "reasoning_effort", &co->reasoning_effort, pe) < 0)
        return -1;
    json_t *kw = json_object_get(o, "chat_template_kwargs");
    if (!kw || json_is_null(kw)) return 0;
    if (!json_is_object(kw)) return rf_fail(pe, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    static const char *const think_keys[] = {"enable_thinking", "thinking"};
    for (int i = 0; i < 2; i++) {
        json_t *t = json_object_get(kw, think_keys[i]);
        if (!t || json_is_null(t)) continue;
        if (!json_is_boolean(t)) {
            char param[64];
            snprintf(param, sizeof param, "chat_template_kwargs.%s", think_keys[i]);
            return rf_fail(pe, param, "'%s' must be true or false", param);
        }
        co->enable_thinking = json_is_true(t);
    }
    return effort_field(json_object_get(kw, "reasoning_effort"), "chat_template_kwargs.reasoning_effort",
                        &co->reasoning_effort, pe);
}

/* messages -> chat messages; contents built from text parts are malloc'd into owned[]. */
int parse_messages(json_t *o, pagoda_chat_message **out, char ***owned, int *n, perr *pe)
{
    json_t *m = json_object_get(o, "messages");
    *out = NULL;
    *owned = NULL;
    *n = 0;
    if (!m || !json_is_array(m) || json_array_size(m) == 0)
        return rf_fail(pe, "messages", "'messages' must be a non-empty list of {role, content}");
    size_t nm = json_array_size(m);
    *out = calloc(nm, sizeof **out);
    *owned = calloc(nm, sizeof **owned);
    *n = (int)nm;
    if (!*out || !*owned) return rf_fail(pe, "messages", "out of memory");
    size_t k;
    json_t *e;
    json_array_foreach(m, k, e) {
        json_t *role = json_object_get(e, "role");
        json_t *content = json_object_get(e, "content");
        if (!json_is_object(e) || !json_is_string(role))
            return rf_fail(pe, "messages", "messages[%zu] must be an object with a string 'role'", k);
        (*out)[k].role = json_string_value(role);
        /* harmony's channel of a message (gpt-oss clients send it): one of
         * its three names, or the request is refused naming it */
        json_t *chan = json_object_get(e, "channel");
        if (chan && !json_is_null(chan)) {
            const char *cv = json_is_string(chan) ? json_string_value(chan) : NULL;
            if (!cv || (strcmp(cv, "analysis") && strcmp(cv, "commentary") && strcmp(cv, "final"))) {
                char param[48];
                snprintf(param, sizeof param, "messages[%zu].channel", k);
                return rf_fail(pe, param, "unknown channel %s%s%s in '%s'; harmony's channels are analysis, "
                               "commentary and final", cv ? "'" : "", cv ? cv : "(not a string)", cv ? "'" : "",
                               param);
            }
        }
        /* the key is required (OpenAI answers 400 without it), but an
         * assistant turn that only calls tools may leave it out or null */
        json_t *calls = json_object_get(e, "tool_calls");
        if (!content && !(!strcmp(json_string_value(role), "assistant") && calls && !json_is_null(calls))) {
            char param[48];
            snprintf(param, sizeof param, "messages[%zu].content", k);
            return rf_fail(pe, param, "Missing required parameter: '%s' (a string, a list of text parts, "
                           "or null; only an assistant message with tool_calls may leave it out)", param);
        }
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
                    return rf_fail(pe, "messages", "messages[%zu].content[%zu]: only {\"type\": \"text\", "
                                "\"text\": ...} parts are supported", k, j);
                }
                sb_str(&b, json_string_value(text));
            }
            (*owned)[k] = b.p;
            (*out)[k].content = b.p;
        } else {
            return rf_fail(pe, "messages", "messages[%zu].content must be a string or a list of text parts", k);
        }
    }
    return 0;
}
