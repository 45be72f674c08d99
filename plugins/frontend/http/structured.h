/*
 * structured.h: the HTTP fields of structured output and tool calls:
 * response_format (text, json_object, json_schema), grammar / regex /
 * choice (and vLLM's guided_* names), tools / tool_choice /
 * parallel_tool_calls; the tool definitions and tool messages rendered
 * into the chat (Hermes-style <tool_call> blocks, docs/structured-output.md);
 * and the model's <tool_call> blocks read back as OpenAI tool_calls, whole
 * or as stream deltas.
 * Not for: the other request fields (parse.h) or the plain output (output.h).
 */
#ifndef PAGODA_HTTP_STRUCTURED_H
#define PAGODA_HTTP_STRUCTURED_H

#include <jansson.h>
#include <stdbool.h>

#include "hreq.h"
#include "parse.h"

enum { ST_TOOLS_NONE = 0, ST_TOOLS_AUTO = 1, ST_TOOLS_REQUIRED = 2, ST_TOOLS_NAMED = 3 };

/* What a body asks for. */
typedef struct st_req {
    int type;                /* pagoda_constraint_type; 0: none */
    char *spec;              /* owned: the spec text given to the engine */
    bool strict;
    const char *field;       /* the request field it came from (the 400's param) */
    json_t *tools;           /* borrowed from the body: the tools list, or NULL */
    int tool_choice;         /* ST_TOOLS_* */
    const char *named;       /* ST_TOOLS_NAMED: the function */
    bool parallel;           /* parallel_tool_calls (default true) */
} st_req;

/* Reads the fields of body o into sr (zeroed first). Specs are compiled
 * once here through host->check_constraint, so a bad one is a 400 naming
 * its field (tools with a bad parameters schema included, whatever
 * tool_choice says); a required or named call is held to the family
 * fmt's own syntax (FMT_*, api/toolfmt.h), after "\n</think>\n\n" when
 * think_open (the prompt leaves the reply inside its reasoning:
 * api_prompt_opens_think). 0, or -1 with pe filled. */
int st_parse(const pagoda_host *h, json_t *o, int kind, int fmt, bool think_open, st_req *sr, perr *pe);

/* Chat with tools: msgs[0..*n) (from parse_messages, one per entry of the
 * body's "messages", contents in owned[]) become what the template
 * renders, in the family fmt's syntax (FMT_*, api/toolfmt.h): the tools
 * listed in the system turn with the family's call example (GLM: in
 * GLM-4.6's words, a system turn of its own before the conversation), an
 * assistant's tool_calls as the family writes them (Hermes <tool_call>
 * blocks, Llama 3 JSON, DeepSeek's and Kimi's markers; harmony: its text
 * as an "analysis" message, each call a message "assistant to=functions.N"
 * with the arguments, the tools as a "tools" message holding gpt-oss's
 * TypeScript namespace, api/harmony.h), a
 * "tool" message's content in <tool_response> (Hermes, Llama 3), as is
 * (DeepSeek), after "## Return of functions.N:I\n" (Kimi) or with the
 * role functions.N (harmony), the call found by tool_call_id. With
 * keep_reasoning (api_template_keeps_reasoning) an assistant message's
 * reasoning_content (or reasoning, thinking) opens its content as
 * <think>\nR\n</think>\n\n, unless the content holds a block already.
 * flags: ST_KEEP_REASONING (api_template_keeps_reasoning) as above;
 * ST_TOOLS_QWEN3 / ST_TOOLS_QWQ (api_template_chat_flags): the tools in
 * the system turn in the words of Qwen3's / QwQ's own template (its
 * "# Tools" text, the tools one a line as JSON), not pagoda's shorter
 * text. msgs and owned may be reallocated (one more entry). 0 or -1 with
 * pe. */
#define ST_KEEP_REASONING 1u
#define ST_TOOLS_QWEN3 2u
#define ST_TOOLS_QWQ 4u
int st_chat_messages(json_t *o, const st_req *sr, int fmt, unsigned flags, pagoda_chat_message **msgs,
                     char ***owned, int *n, perr *pe);

void st_free(st_req *sr);

/* ---- output (a chat request with tools; hr->tools set) */

/* The non-streaming message of choice c: content and tool_calls read from
 * its text; *finish becomes "tool_calls" when calls were made and the
 * output ended normally. Returns the message object. */
json_t *st_message(hreq *hr, choice *c, const char **finish);

/* Streaming: a TOKEN event's text through choice c's tool-call reader,
 * appending its chunks to hr->out (content deltas, one tool_calls delta
 * per finished <tool_call> block); text that may start a block is held
 * back. lp: the event's logprobs (stolen; may be NULL). */
void st_stream_text(hreq *hr, choice *c, const char *text, size_t len, json_t *lp);
/* Streaming, at the FINAL: what was held back goes out as content; the
 * finish reason to send ("tool_calls" replaces "stop" when calls were made). */
const char *st_stream_final(hreq *hr, choice *c, const char *finish);

/* Frees a choice's reader (hreq_free). */
void st_choice_free(choice *c);

#endif /* PAGODA_HTTP_STRUCTURED_H */
