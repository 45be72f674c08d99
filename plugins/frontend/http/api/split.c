/*
 * split.c: the output splitter (split.h): a three-state scanner (text,
 * reasoning, call) over the text as it arrives, holding back only what
 * may still turn into a tag.
 * Not for: deciding whether a template thinks (api.c) or writing events.
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "split.h"

#define THINK_OPEN "<think>"
#define THINK_CLOSE "</think>"
#define CALL_OPEN "<tool_call>"
#define CALL_CLOSE "</tool_call>"

void split_init(splitter *s, int think, int think_open, int calls)
{
    memset(s, 0, sizeof *s);
    s->think = think;
    s->calls = calls;
    s->mode = think && think_open ? SPLIT_THINK : SPLIT_TEXT;
}

void split_free(splitter *s)
{
    free(s->held.p);
    memset(&s->held, 0, sizeof s->held);
}

size_t split_find(const char *h, size_t hn, const char *needle)
{
    size_t nn = strlen(needle);
    for (size_t i = 0; i + nn <= hn; i++)
        if (!memcmp(h + i, needle, nn)) return i;
    return (size_t)-1;
}

size_t split_partial(const char *h, size_t n, const char *tag)
{
    size_t tl = strlen(tag);
    for (size_t l = tl - 1; l > 0; l--)
        if (l <= n && !memcmp(h + n - l, tag, l)) return l;
    return 0;
}

void split_drop(sbuf *b, size_t k)
{
    memmove(b->p, b->p + k, b->len - k);
    b->len -= k;
    if (b->p) b->p[b->len] = 0;
}

static void out(const split_sink *k, int mode, const char *p, size_t n)
{
    if (!n) return;
    if (mode == SPLIT_THINK && k->think) k->think(k->u, p, n);
    else if (mode != SPLIT_THINK && k->text) k->text(k->u, p, n);
}

/* a block's JSON as a call: {"name": ..., "arguments": {...}} (or "parameters") */
static int emit_call(splitter *s, const char *p, size_t n, const split_sink *k)
{
    json_t *v = json_loadb(p, n, 0, NULL);
    json_t *nm = json_is_object(v) ? json_object_get(v, "name") : NULL;
    json_t *a = json_is_object(v) ? json_object_get(v, "arguments") : NULL;
    if (v && !a) a = json_object_get(v, "parameters");
    if (!json_is_string(nm)) {
        json_decref(v);
        return -1;
    }
    char *args = !a ? strdup("{}") : json_is_string(a) ? strdup(json_string_value(a))
                                                       : json_dumps(a, JSON_COMPACT | JSON_ENCODE_ANY);
    if (k->call) k->call(k->u, json_string_value(nm), args ? args : "{}");
    s->n_calls++;
    free(args);
    json_decref(v);
    return 0;
}

void split_feed(splitter *s, const char *p, size_t n, const split_sink *k)
{
    if (n) sb_put(&s->held, p, n);
    while (s->held.len) {
        const char *h = s->held.p;
        size_t len = s->held.len;
        if (s->mode == SPLIT_TEXT) {
            size_t at_t = s->think ? split_find(h, len, THINK_OPEN) : (size_t)-1;
            size_t at_c = s->calls ? split_find(h, len, CALL_OPEN) : (size_t)-1;
            if (at_t != (size_t)-1 || at_c != (size_t)-1) {
                int to_think = at_t < at_c;
                size_t at = to_think ? at_t : at_c;
                out(k, SPLIT_TEXT, h, at);
                split_drop(&s->held, at + strlen(to_think ? THINK_OPEN : CALL_OPEN));
                s->mode = to_think ? SPLIT_THINK : SPLIT_CALL;
                continue;
            }
            size_t keep = 0, l;
            if (s->think && (l = split_partial(h, len, THINK_OPEN)) > keep) keep = l;
            if (s->calls && (l = split_partial(h, len, CALL_OPEN)) > keep) keep = l;
            out(k, SPLIT_TEXT, h, len - keep);
            split_drop(&s->held, len - keep);
            return;
        }
        if (s->mode == SPLIT_THINK) {
            size_t at = split_find(h, len, THINK_CLOSE);
            if (at != (size_t)-1) {
                out(k, SPLIT_THINK, h, at);
                split_drop(&s->held, at + strlen(THINK_CLOSE));
                s->mode = SPLIT_TEXT;
                continue;
            }
            size_t keep = split_partial(h, len, THINK_CLOSE);
            out(k, SPLIT_THINK, h, len - keep);
            split_drop(&s->held, len - keep);
            return;
        }
        /* in a call: wait for its end */
        size_t at = split_find(h, len, CALL_CLOSE);
        if (at == (size_t)-1) return;
        if (emit_call(s, h, at, k) < 0) {
            /* not a call after all: it stays text */
            out(k, SPLIT_TEXT, CALL_OPEN, strlen(CALL_OPEN));
            out(k, SPLIT_TEXT, h, at + strlen(CALL_CLOSE));
        }
        split_drop(&s->held, at + strlen(CALL_CLOSE));
        s->mode = SPLIT_TEXT;
    }
}

void split_end(splitter *s, const split_sink *k)
{
    if (s->mode == SPLIT_CALL) out(k, SPLIT_TEXT, CALL_OPEN, strlen(CALL_OPEN));
    out(k, s->mode == SPLIT_THINK ? SPLIT_THINK : SPLIT_TEXT, s->held.p, s->held.len);
    s->held.len = 0;
    s->mode = SPLIT_TEXT;
}
