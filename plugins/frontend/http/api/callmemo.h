/*
 * callmemo.h: the text the model wrote for its recent tool calls, in every
 * family's syntax (toolfmt.h), so that the next turn's prompt shows each
 * call exactly as it was generated and its KV (still in the prefix cache)
 * is reused.
 *
 * A call goes out to the client as a name and an arguments JSON, and
 * comes back in the history as JSON the client serialized again: the
 * prompt writes it the canonical way (callmemo_render: the family's
 * markup, the arguments as json_dumps writes them, ", " and ": ", keys in
 * their order), while the model, held by the constraint, may have written
 * other spacing ({ "city": "Paris" }), or free (no constraint engine)
 * another of the forms its family's reader takes (Qwen3-Coder's
 * <function=> inside Hermes tags, DeepSeek V3.1's name<sep>args). The
 * memo maps (family, name, the call as the prompt renders it) to the text
 * the model wrote for it; the key is made from the written text's own
 * parse, so the two are the same call (name, arguments and Kimi's index)
 * and the substitution never changes what the prompt says, only how.
 * Bounded: CALLMEMO_SIZE entries, the oldest replaced first; a call that
 * was written as the prompt renders it is not stored. [any thread] (one
 * mutex).
 * Not for: the markup around a call (the section markers, harmony's
 * <|start|>assistant and <|call|>: the prompt writes them as its template
 * does), the token ids
 * (the engine realigns them, core/engine/engine_realign.c).
 */
#ifndef PAGODA_HTTP_API_CALLMEMO_H
#define PAGODA_HTTP_API_CALLMEMO_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#define CALLMEMO_SIZE 256       /* calls remembered */
#define CALLMEMO_MAX_BODY 4096  /* a longer call is not remembered */

/* The span of one call that a prompt writes, and the memo may replace,
 * for family fmt (FMT_*): args is the arguments JSON text as the prompt
 * writes it (json_dumps with its default separators), index the call's
 * place in its assistant message.
 *   hermes    between <tool_call> and </tool_call>:
 *             "\n" {"name": N, "arguments": A} "\n" (args that are no
 *             JSON: "\n{}\n")
 *   llama3    the whole reply: {"name": "N", "parameters": A}
 *   deepseek  between the call markers: function<sep>N\n```json\nA\n```
 *   kimi      between the call markers: functions.N:INDEX
 *             <|tool_call_argument_begin|>A
 *   harmony   the call message after <|start|>assistant, before <|call|>:
 *             its header and its content, " to=functions.N<|channel|>
 *             commentary json<|message|>A" as gpt-oss's template writes
 *             a past call, where the model writes the recipient after
 *             the channel: "<|channel|>commentary to=functions.N
 *             <|constrain|>json<|message|>A"
 *   mistral   after [TOOL_CALLS]: [{"name": "N", "arguments": A}]
 *   qwen3-coder between <tool_call> and </tool_call>: "\n<function=N>\n",
 *             each argument "<parameter=K>\nV\n</parameter>\n", then
 *             "</function>\n" (V: a string's text, other values as JSON)
 *   glm45     between <tool_call> and </tool_call>: "N\n", each argument
 *             "<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n"
 * malloc'd; NULL when out of memory. */
char *callmemo_render(int fmt, const char *name, const char *args, int index);

/* A call's span as the model wrote it (n bytes; the same span as above;
 * name: harmony's, the recipient the reader found in the header, NULL
 * for the others). Remembered when it parses as one call of the family
 * and differs from its rendering; harmony's header must name
 * to=functions.NAME once and hold no markup but <|channel|> and
 * <|constrain|>. tools: the request's (NULL: none), so an XML family's
 * values are typed as the reader typed them for the client (a string
 * parameter's "abc" stays the text "abc" in the memo's key too). */
void callmemo_note(int fmt, const json_t *tools, const char *name, const char *span, size_t n);

/* The span the model wrote for the call of family fmt named name whose
 * rendering is rendered (malloc'd), or NULL when none is remembered. */
char *callmemo_written(int fmt, const char *name, const char *rendered);

/* [http] call_memo: off, nothing is remembered and every lookup misses
 * (the process's one HTTP frontend sets it at create). */
void callmemo_set_enabled(bool on);

/* Forget every call (tests). */
void callmemo_clear(void);

#endif
