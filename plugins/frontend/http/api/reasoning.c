/*
 * reasoning.c: reasoning apart from content in chat completions
 * (reasoning.h), on the output splitter (split.h) with reasoning on and
 * tool calls off (structured.c reads those from the answer part).
 * Not for: Messages and Responses (messages.c, responses.c).
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "../output.h"
#include "../reply.h"
#include "../structured.h"
#include "api.h"
#include "reasoning.h"

void reasoning_setup(hreq *hr, int open)
{
    int think, probed;
    api_template_thinks(hr->fe, &think, &probed);
    if (!think) return;
    for (int i = 0; i < hr->n_choices; i++) {
        splitter *s = calloc(1, sizeof *s);
        if (!s) continue;
        split_init(s, 1, open, 0);
        hr->choices[i].think = s;
    }
}

void reasoning_free(choice *c)
{
    if (!c->think) return;
    split_free(c->think);
    free(c->think);
    c->think = NULL;
}

typedef struct parts {
    hreq *hr;
    choice *c;
    sbuf text, reasoning;
    int stream;
} parts;

static void p_text(void *u, const char *s, size_t n) { sb_put(&((parts *)u)->text, s, n); }

static void p_think(void *u, const char *s, size_t n)
{
    parts *p = u;
    if (!p->stream) {
        sb_put(&p->reasoning, s, n);
        return;
    }
    json_t *d = json_object();
    json_object_set_new(d, "reasoning_content", jstr(s, n));
    json_object_set_new(d, "reasoning", jstr(s, n));
    sse_chunk(p->hr, p->c->index, d, NULL, NULL);
}

void reasoning_stream(hreq *hr, choice *c, ev_item *e)
{
    if (!c->think || !e->text_len) return;
    parts p = {hr, c, {0}, {0}, 1};
    split_sink k = {p_text, p_think, NULL, &p};
    split_feed(c->think, e->text, e->text_len, &k);
    free(e->text);
    e->text = p.text.p;
    e->text_len = p.text.len;
}

void reasoning_flush(hreq *hr, choice *c)
{
    if (!c->think) return;
    parts p = {hr, c, {0}, {0}, 1};
    split_sink k = {p_text, p_think, NULL, &p};
    split_end(c->think, &k);
    if (p.text.len) {
        if (hr->tools) {
            st_stream_text(hr, c, p.text.p, p.text.len, NULL);
        } else {
            json_t *d = json_object();
            json_object_set_new(d, "content", jstr(p.text.p, p.text.len));
            sse_chunk(hr, c->index, d, NULL, NULL);
        }
    }
    free(p.text.p);
}

json_t *reasoning_take(hreq *hr, choice *c)
{
    if (!c->think) return NULL;
    parts p = {hr, c, {0}, {0}, 0};
    split_sink k = {p_text, p_think, NULL, &p};
    split_feed(c->think, c->text.p ? c->text.p : "", c->text.len, &k);
    split_end(c->think, &k);
    json_t *r = NULL;
    if (p.reasoning.p || p.text.len != c->text.len) { /* a block, even an empty one */
        r = jstr(p.reasoning.p, p.reasoning.len);
        free(c->text.p);
        c->text = p.text;
        if (!c->text.p) sb_put(&c->text, "", 0);
    } else {
        free(p.text.p);
    }
    free(p.reasoning.p);
    return r;
}
