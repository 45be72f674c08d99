/*
 * split.h: a model's output text split, as it streams, into what the
 * agent APIs keep apart: reasoning (<think>...</think>, the Qwen3 and
 * DeepSeek-R1 way; or from the start up to </think> when the template
 * opened the block in the prompt), tool calls (Hermes <tool_call>{"name":
 * ..., "arguments": {...}}</tool_call> blocks, the format structured.c
 * writes into the chat and holds the model to), and the answer text.
 * A suffix that may begin a tag is held back until it can be told apart,
 * so a tag split over tokens is still found. Pure: no I/O, no JSON output;
 * unit-tested alone (tests/unit/test_api_split.c).
 * Not for: the response shapes (messages.c, responses.c, structured.c for
 * chat completions' tool calls).
 */
#ifndef PAGODA_HTTP_API_SPLIT_H
#define PAGODA_HTTP_API_SPLIT_H

#include <stddef.h>

#include "request_fields.h"

/* Where the pieces go; every callback is optional. call: a finished block
 * whose JSON names a function (args: the arguments as JSON text). */
typedef struct split_sink {
    void (*text)(void *u, const char *s, size_t n);
    void (*think)(void *u, const char *s, size_t n);
    void (*call)(void *u, const char *name, const char *args);
    void *u;
} split_sink;

enum { SPLIT_TEXT = 0, SPLIT_THINK = 1, SPLIT_CALL = 2 };

typedef struct splitter {
    int think;               /* <think> blocks are reasoning */
    int calls;               /* <tool_call> blocks are calls */
    int mode;                /* SPLIT_* */
    int n_calls;
    sbuf held;               /* text not passed on yet (a possible tag, or a call's JSON) */
} splitter;

/* A splitter; think_open: the output starts inside a <think> block (the
 * template wrote the opening tag into the prompt). */
void split_init(splitter *s, int think, int think_open, int calls);

/* Feeds n bytes of output. */
void split_feed(splitter *s, const char *p, size_t n, const split_sink *k);

/* The output ended: what is held back goes out (an unfinished call as
 * text, an unfinished <think> block as reasoning). */
void split_end(splitter *s, const split_sink *k);

void split_free(splitter *s);

/* What the output readers share (here and toolfmt.c): where needle first
 * stands in h[0..hn) ((size_t)-1 if nowhere), the longest suffix of
 * h[0..n) that is a proper prefix of tag, and b without its first k bytes. */
size_t split_find(const char *h, size_t hn, const char *needle);
size_t split_partial(const char *h, size_t n, const char *tag);
void split_drop(sbuf *b, size_t k);

#endif /* PAGODA_HTTP_API_SPLIT_H */
