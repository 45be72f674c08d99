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
 *             Qwen2.5/Qwen3, SmolLM); in the same tags Qwen3-Coder's
 *             <function=N><parameter=P>V</parameter></function> and GLM-4.5's
 *             N<arg_key>P</arg_key><arg_value>V</arg_value>
 *   llama3    the whole reply a JSON {"name": N, "parameters": {...}}
 *             (<|python_tag|> before it allowed)
 *   deepseek  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N
 *             \n```json\n{...}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜> (V3, R1;
 *             V3.1's N<｜tool▁sep｜>{...} too)
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

#include <stddef.h>

#include "request_fields.h"

enum { FMT_HERMES = 0, FMT_LLAMA3, FMT_DEEPSEEK, FMT_KIMI, FMT_HARMONY, FMT_MISTRAL, FMT_COUNT };

typedef struct fmt_norm {
    int fmt;                 /* FMT_* */
    int state;               /* toolfmt.c's states */
    int chan;                /* harmony: the channel of the message being read */
    sbuf held;               /* input not passed on yet */
    sbuf hdr;                /* harmony: the recipient of the message being read */
    sbuf raw;                /* harmony: its header as written, <|start|>assistant dropped */
} fmt_norm;

/* The family a rendered probe conversation (one user turn "hi" with the
 * generation prompt) shows: its generation prompt's markup. [INST] is
 * Mistral's unless <<SYS>> says Llama 2 (whose one-turn rendering is
 * Mistral's: api.c probes an [INST] template again with a system turn). */
int fmt_from_probe(const char *rendered);
const char *fmt_name(int fmt);

void fmt_init(fmt_norm *f, int fmt);
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

/* The length of the harmony header word ([A-Za-z0-9_.:-]+: a channel, a
 * recipient, a content type) at h[0..n); 0 when none starts there. The
 * reader (toolfmt.c) and the call memo (callmemo.c) read headers alike. */
size_t harmony_word_len(const char *h, size_t n);

#endif /* PAGODA_HTTP_API_TOOLFMT_H */
