/* split_testutil.h: what the output-splitter tests share
 * (test_api_split.c, test_api_toolfmt.c): a sink that gathers the text,
 * the reasoning and the calls (as name(args) one after another).
 * Header-only, static functions. */
#ifndef PAGODA_SPLIT_TESTUTIL_H
#define PAGODA_SPLIT_TESTUTIL_H

#include <stdlib.h>
#include <string.h>

#include "split.h"

typedef struct got {
    sbuf text, think, calls;
    int n_calls;
} got;

static inline void g_text(void *u, const char *s, size_t n) { sb_put(&((got *)u)->text, s, n); }
static inline void g_think(void *u, const char *s, size_t n) { sb_put(&((got *)u)->think, s, n); }
static inline void g_call(void *u, const char *name, const char *args)
{
    got *g = u;
    sb_str(&g->calls, name);
    sb_str(&g->calls, "(");
    sb_str(&g->calls, args);
    sb_str(&g->calls, ")");
    g->n_calls++;
}

static inline void got_free(got *g)
{
    free(g->text.p);
    free(g->think.p);
    free(g->calls.p);
    memset(g, 0, sizeof *g);
}

static inline const char *str(const sbuf *b) { return b->p ? b->p : ""; }

#endif /* PAGODA_SPLIT_TESTUTIL_H */
