/*
 * toolfmt.h: the one place that knows how each chat-template family
 * writes reasoning and tool calls in its output, and turns that into the
 * frontend's canonical form as it streams: reasoning as <think>...</think>
 * and each call as <tool_call>\n{"name": ..., "arguments": {...}}\n
 * </tool_call>, which the splitter (split.h) and the chat-completions
 * reader (../structured.c) read. So every family's calls and reasoning
 * reach chat completions, Messages and Responses by one path.
 *
 *   family    how the model writes a call
 *   hermes    <tool_call>{"name": N, "arguments": {...}}</tool_call> (Hermes,
 *             Qwen2.5/Qwen3, SmolLM); in the same tags the two XML forms
 *             below too (a model of this family may write them), typed alike
 *   qwen3-coder <tool_call>\n<function=N>\n<parameter=P>\nV\n</parameter>\n
 *             ...</function>\n</tool_call> (one newline either side of V
 *             is markup), known by the engine's template name (its
 *             one-turn probe is ChatML's); Hermes JSON in the tags too
 *   glm45     <tool_call>N\n<arg_key>P</arg_key>\n<arg_value>V</arg_value>\n
 *             ...</tool_call> (GLM-4.5/4.6: [gMASK] in the probe; N alone
 *             is a call without arguments); Hermes JSON in the tags too
 *             In both XML forms V is the value's text for a parameter
 *             whose schema makes it a string (fmt_param_is_text), else
 *             JSON (True, False, None as Python writes them too), else
 *             a string when it does not parse; with no schema (no tools,
 *             or a parameter the schema does not list), JSON when it
 *             parses
 *   llama3    the whole reply a JSON {"name": N, "parameters": {...}}
 *             (<|python_tag|> before it allowed)
 *   deepseek  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N
 *             \n```json\n{...}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜> (V3, R1;
 *             V3.1's N<｜tool▁sep｜>{...} too)
 *   deepseek-v3.1 the same markers around N<｜tool▁sep｜>{...}, calls back to
 *             back (<｜Assistant｜><think></think> in the probe, or the
 *             engine's template name); V3's form read too
 *   kimi      <|tool_calls_section_begin|><|tool_call_begin|>functions.N:0
 *             <|tool_call_argument_begin|>{...}<|tool_call_end|>
 *             <|tool_calls_section_end|>
 *   harmony   gpt-oss channels: <|channel|>analysis<|message|>R<|end|> is
 *             reasoning, <|channel|>final<|message|>A is the answer,
 *             to=functions.N ... <|channel|>commentary ...<|message|>{...}
 *             <|call|> a call; the header markup never reaches content
 *   mistral   [TOOL_CALLS][{"name": N, "arguments": {...}}, ...] (v3, Nemo,
 *             Small: a JSON list, an "id" allowed) or
 *             [TOOL_CALLS]N[ARGS]{...} (v11+, [CALL_ID]ID before [ARGS]
 *             allowed), each [TOOL_CALLS] one list or call; text may
 *             come before and after
 *
 * A suffix that may begin a marker is held back until it can be told
 * apart; a block that does not parse as a call is passed on as the text
 * it was. Pure: no I/O; unit-tested alone (tests/unit/test_api_toolfmt.c,
 * every chunking of each family's sample gives the same result).
 * Not for: the prompt side (structured.c writes the tools into the chat),
 * the response shapes.
 */
#ifndef PAGODA_HTTP_API_TOOLFMT_H
#define PAGODA_HTTP_API_TOOLFMT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "request_fields.h"

enum { FMT_HERMES = 0, FMT_LLAMA3, FMT_DEEPSEEK, FMT_KIMI, FMT_HARMONY, FMT_MISTRAL, FMT_QWEN3CODER, FMT_GLM45,
       FMT_DEEPSEEK31, FMT_COUNT };

typedef struct fmt_norm {
    int fmt;                 /* FMT_* */
    int state;               /* toolfmt.c's states */
    int chan;                /* harmony: the channel of the message being read */
    sbuf held;               /* input not passed on yet */
    sbuf hdr;                /* harmony: the recipient of the message being read */
    sbuf raw;                /* harmony: its header as written, <|start|>assistant dropped */
    json_t *tools;           /* the request's tools (a copy, owned), for the XML families' value types */
} fmt_norm;

/* The family a rendered probe conversation (one user turn "hi" with the
 * generation prompt) shows: its generation prompt's markup. [INST] is
 * Mistral's unless <<SYS>> says Llama 2 (whose one-turn rendering is
 * Mistral's: api.c probes an [INST] template again with a system turn). */
int fmt_from_probe(const char *rendered);
const char *fmt_name(int fmt);

void fmt_init(fmt_norm *f, int fmt);
/* The request's "tools" (copied; NULL: none), so the XML families read
 * each parameter's value by its schema's type. */
void fmt_set_tools(fmt_norm *f, const json_t *tools);
/* Feeds n bytes of model output; appends the canonical text to out. */
void fmt_feed(fmt_norm *f, const char *p, size_t n, sbuf *out);
/* The output ended: what is held goes out (an unfinished call as the
 * text it was, an unfinished harmony message by its channel). */
void fmt_end(fmt_norm *f, sbuf *out);
void fmt_free(fmt_norm *f);

/* A call's body in any of the syntaxes above (between the call markers)
 * as {"name": ..., "arguments": {...}} JSON appended to out; -1 (out
 * untouched) when it is not one. */
int fmt_call_json(const char *body, size_t n, sbuf *out);
/* The same for family fmt (GLM-4.5's bare name is a call of its own),
 * the XML forms' values typed by tools (NULL: by what they hold). */
int fmt_call_read(int fmt, const json_t *tools, const char *body, size_t n, sbuf *out);

/* Whether a parameter of this schema is written as its raw text in the XML
 * families (Qwen3-Coder, GLM-4.5): "type": "string", or no type and a
 * const or enum of strings only. Any other is written as JSON. The
 * constraint (../structured.c), the reader and the prompt's history
 * agree on it. */
bool fmt_param_is_text(const json_t *schema);

/* The length of the harmony header word ([A-Za-z0-9_.:-]+: a channel, a
 * recipient, a content type) at h[0..n); 0 when none starts there. The
 * reader (toolfmt.c) and the call memo (callmemo.c) read headers alike. */
size_t harmony_word_len(const char *h, size_t n);

#endif /* PAGODA_HTTP_API_TOOLFMT_H */
