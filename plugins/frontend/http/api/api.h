/*
 * api.h: the agent APIs served beside OpenAI's chat completions:
 * Anthropic's Messages (POST /v1/messages, /v1/messages/count_tokens;
 * messages.c) and OpenAI's Responses (POST /v1/responses; responses.c).
 * Each turns its body into a chat-completions body and hands it to the
 * same generation path (generate_body): one template rendering, one tool
 * format and one constraint (structured.c). What differs is the answer:
 * a request carries an api_state (hreq->as) and output.c hands its events
 * here, to be written in that API's shapes, with reasoning and tool calls
 * kept apart from the text (split.h).
 * Not for: the OpenAI chat and completion shapes (output.c), routing
 * (dispatch.c).
 */
#ifndef PAGODA_HTTP_API_H
#define PAGODA_HTTP_API_H

#include <jansson.h>
#include <microhttpd.h>

#include "../hreq.h"
#include "split.h"

enum { API_MESSAGES = 1, API_RESPONSES = 2 };

/* What a request of one of these APIs keeps beside its hreq. */
typedef struct api_state {
    int api;                 /* API_* */
    char id[64];             /* msg_..., resp_... */
    int think, think_open;   /* the template thinks (split.h) */
    int tools;               /* <tool_call> blocks are calls */
    splitter sp;             /* streaming: the one choice's output */
    /* streaming state */
    int open;                /* the block being written: 0 none, 1 text, 2 reasoning */
    int n_blocks;            /* blocks (Messages) or output items (Responses) so far */
    int n_calls;
    sbuf ws;                 /* whitespace not yet sent (it may only separate calls) */
    sbuf text, reasoning;    /* the open block's text so far (Responses' done events) */
    int64_t input_tokens;    /* the rendered prompt's length (message_start) */
    int seq;                 /* Responses: sequence_number */
    int cut;                 /* Responses: the output ended at max_output_tokens (items "incomplete") */
    json_t *out_items;       /* Responses: the output items so far */
    /* Responses: what is stored */
    json_t *req;             /* the request's fields echoed in the response object */
    json_t *history;         /* the conversation items this turn continues (stored with it) */
    int store;
    char key[256];           /* the API key it was made with (the store's scope) */
} api_state;

/* A state for api (zeroed, id made); NULL when out of memory. */
api_state *api_state_new(int api, const char *prefix);
void api_state_free(api_state *as);

/* ---- the routes (dispatch.c) */
enum MHD_Result route_messages(http_fe *fe, struct MHD_Connection *conn, conn_state *cs);
enum MHD_Result route_count_tokens(http_fe *fe, struct MHD_Connection *conn, conn_state *cs);
enum MHD_Result route_responses(http_fe *fe, struct MHD_Connection *conn, conn_state *cs);

/* ---- the output hooks (generate.c, output.c), hr->as set */

/* The stream's opening events; rendered: the prompt given to the engine. */
void api_stream_start(hreq *hr, const char *rendered);
/* One event (already applied to its choice) into the stream's events. */
void api_stream_event(hreq *hr, ev_item *e);
/* After the last FINAL: the closing events. */
void api_stream_tail(hreq *hr);
/* The whole answer of a non-streaming request. */
enum MHD_Result api_answer_full(struct MHD_Connection *conn, hreq *hr);

/* ---- shared by messages.c and responses.c (api.c) */

/* Appends "event: NAME\ndata: JSON\n\n" to hr->out (o stolen). */
void api_sse(hreq *hr, const char *name, json_t *o);
/* The count of tokens of text (the rendered prompt). */
int64_t api_count_tokens(const pagoda_host *h, const char *text);
/* Is <think> reasoning (always), and does the template's generation
 * prompt open the block (a probe rendering, once per server)? */
void api_template_thinks(http_fe *fe, int *think, int *think_open);
/* Does this rendered prompt leave the reply inside a <think> block? (It
 * ends in <think>: DeepSeek-R1's and Qwen3.5's generation prompt with
 * thinking on; with enable_thinking false they write the closed, empty
 * block instead, and the reply starts as text.) Each request's own
 * prompt decides, not the probe's default rendering. */
int api_prompt_opens_think(const char *prompt);

/* The template's output format (FMT_*, toolfmt.h), from a rendered probe
 * as above (Qwen3-Coder's, which renders one turn as ChatML does, from the
 * engine's template name, pagoda_model_info.chat_template); probed once. */
int api_template_fmt(http_fe *fe);

/* Does the model's template write an assistant turn's reasoning back
 * (Qwen3's, Qwen3.5's and GLM-4.5's, after the last user message: the
 * engine's template name, ABI 1.17)? Then a message's reasoning_content
 * goes into the history as the <think> block the template writes. */
int api_template_keeps_reasoning(http_fe *fe);

/* st_chat_messages' flags for the model's template: ST_KEEP_REASONING as
 * above, ST_TOOLS_QWEN3 / ST_TOOLS_QWQ for the engine's qwen3 /
 * chatml-think families (their templates' own tools text). */
unsigned api_template_chat_flags(http_fe *fe);

/* [generate.c] chat: each choice's output goes through its family's
 * normalizer (toolfmt.h) when the family writes channels (harmony) or the
 * request has tools (tool_list, the request's "tools", copied so the
 * families that read the XML forms, Hermes, Qwen3-Coder and GLM-4.5,
 * type their values by the schema; may be NULL); nothing when out of
 * memory. */
void api_norm_setup(hreq *hr, int tools, const json_t *tool_list);
/* [output.c] e's text made canonical (replaced in place). */
void api_norm_event(choice *c, ev_item *e);
/* [output.c] the output ended: what was held back, malloc'd (NULL when
 * nothing), and the normalizer is gone. */
char *api_norm_end(choice *c, size_t *len);
/* [hreq.c] */
void api_norm_free(choice *c);
/* The request's API key (Bearer or x-api-key), "" when none. */
const char *api_key_of(struct MHD_Connection *conn);
/* msg's tools[N].function.X field names in the API's own (in place) */
void api_field_names(int api, char *msg, size_t cap);

/* messages.c's and responses.c's halves of the hooks */
void msg_stream_start(hreq *hr);
void msg_stream_event(hreq *hr, ev_item *e);
void msg_stream_tail(hreq *hr);
enum MHD_Result msg_answer_full(struct MHD_Connection *conn, hreq *hr);
void resp_stream_start(hreq *hr);
void resp_stream_event(hreq *hr, ev_item *e);
void resp_stream_tail(hreq *hr);
enum MHD_Result resp_answer_full(struct MHD_Connection *conn, hreq *hr);

#endif /* PAGODA_HTTP_API_H */
