/*
 * reasoning.h: a thinking model's reasoning kept out of a chat
 * completion's content: the <think>...</think> text (Qwen3, DeepSeek-R1;
 * also when the template opened the block in the prompt) goes to the
 * message's reasoning_content and reasoning (vLLM's two names), whole or as
 * stream deltas, and content holds the answer alone. Messages and
 * Responses do the same in their shapes (split.h).
 * Not for: tool calls in the content (structured.h reads them from what is
 * left).
 */
#ifndef PAGODA_HTTP_API_REASONING_H
#define PAGODA_HTTP_API_REASONING_H

#include <jansson.h>

#include "../hreq.h"

/* [generate.c] A chat completion: each choice gets its reasoning splitter
 * (nothing when out of memory: the text then stays whole), starting inside
 * the reasoning when think_open (api_prompt_opens_think of its prompt). */
void reasoning_setup(hreq *hr, int think_open);

/* [output.c, streaming] e's text becomes its answer part; the reasoning
 * part goes out now as reasoning deltas. */
void reasoning_stream(hreq *hr, choice *c, ev_item *e);

/* [output.c, streaming, at the FINAL] the text held back (a possible tag)
 * goes out as content. */
void reasoning_flush(hreq *hr, choice *c);

/* [output.c, whole] c->text becomes its answer part; returns the
 * reasoning as a JSON string, or NULL when there was none. */
json_t *reasoning_take(hreq *hr, choice *c);

/* [hreq.c] frees a choice's splitter */
void reasoning_free(choice *c);

#endif /* PAGODA_HTTP_API_REASONING_H */
