/*
 * parse.h: an OpenAI request body (JSON) into what the engine takes: the
 * fields both generation endpoints share (sampling, n, stream, logprobs,
 * pagoda_trace, and echo for completions) into a pagoda_request, the prompts of /v1/completions, the messages of
 * /v1/chat/completions. Every check on a field is here, each failure a
 * perr (the 400's param and message).
 * Not for: submitting (generate.h) or the sampling fields stdin shares
 * (../request_fields.h, called from here).
 */
#ifndef PAGODA_HTTP_PARSE_H
#define PAGODA_HTTP_PARSE_H

#include <jansson.h>
#include <stdint.h>

#include "pagoda/pagoda.h"
#include "request_fields.h"

#define MAX_STOP RF_MAX_STOP
#define MAX_CHOICES 256        /* prompts x n */

enum { KIND_COMPLETION = 1, KIND_CHAT = 2 };


/* Sampling fields shared by both endpoints, into req (already defaulted). */
typedef struct params {
    pagoda_request req;
    const char *stop[MAX_STOP];
    int n;
    int stream, include_usage;
    int logprobs;
    int echo;                  /* completions: the prompt's text (and logprobs) first */
    int trace;                 /* pagoda_trace: how each token was made (trace.h) */
} params;

/* Fills p from the body o (p->req defaulted by the host first); -1 and pe
 * filled on a bad field. Strings in p point into o. */
int parse_common(const pagoda_host *h, json_t *o, int kind, params *p, perr *pe);

/* One prompt of a completion request: text or token ids (pointers into the JSON). */
typedef struct prompt_in {
    const char *text;
    size_t len;
    int32_t *tokens;
    int n_tokens;
} prompt_in;

/* The prompts of a completion body; *out (free with free_prompts) may be
 * set even on failure. -1 and pe filled on a bad prompt. */
int parse_prompts(json_t *o, prompt_in **out, int *n, perr *pe);
void free_prompts(prompt_in *ps, int n);

/* The template options of a chat body: chat_template_kwargs
 * {enable_thinking (or DeepSeek's thinking): bool, reasoning_effort},
 * and the top-level reasoning_effort (OpenAI's; the kwargs' wins):
 * "low", "medium" or "high". 0, or -1 with pe naming the field. */
int parse_chat_options(json_t *o, pagoda_chat_options *co, perr *pe);

/* messages -> chat messages; contents built from text parts are malloc'd
 * into owned[] (free each, then owned and *out, also on failure). */
int parse_messages(json_t *o, pagoda_chat_message **out, char ***owned, int *n, perr *pe);

#endif /* PAGODA_HTTP_PARSE_H */
