/*
 * gram_check.c: the checks a grammar passes once it is built (g_finish):
 * every referenced rule defined; which rules can finish, with the
 * alternatives that never can dropped (so no parse the automaton follows
 * reaches a dead end) and a root that cannot finish refused ("accepts no
 * output", naming the rule to blame); left recursion refused, found as a
 * strongly connected component of the left-corner graph holding an edge
 * that pushes a stack frame; and the element-to-rule table the automaton's
 * horizon uses. Each is linear in the grammar, whatever order its rules
 * come in.
 * Not for: building (gram_ir.c) or running (gram_dfa.c) a grammar.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gram.h"

/* ------------------------------------------------------------ checks */

static bool set_empty(const uint8_t *set)
{
    for (int i = 0; i < 32; i++)
        if (set[i]) return false;
    return true;
}

/* Which rules derive something: with sets_ok, some byte string (the rule
 * can finish); without, the empty string (nullable). A worklist over
 * alternatives counting their references to rules not yet known to, so
 * the work is linear in the grammar whatever order its rules come in. */
static int derive(g_grammar *g, bool *prod, bool sets_ok)
{
    int32_t n_alts = 0;
    for (int32_t r = 0; r < g->n_rules; r++) n_alts += g->rules[r].n_alts;
    int32_t *alt_rule = malloc(sizeof(int32_t) * (size_t)(n_alts + 1));
    int32_t *alt_pos = malloc(sizeof(int32_t) * (size_t)(n_alts + 1));
    int32_t *pending = calloc((size_t)n_alts + 1, sizeof(int32_t));
    int32_t *ref_first = calloc((size_t)g->n_rules + 1, sizeof(int32_t));
    int32_t *queue = malloc(sizeof(int32_t) * (size_t)(g->n_rules + 1));
    int32_t *refs = NULL;
    int st = -1;
    if (!alt_rule || !alt_pos || !pending || !ref_first || !queue) goto out;
    int32_t a = 0, n_refs = 0;
    for (int32_t r = 0; r < g->n_rules; r++) {
        for (int32_t k = 0; k < g->rules[r].n_alts; k++, a++) {
            alt_rule[a] = r;
            alt_pos[a] = g->rules[r].alts[k];
            for (int32_t p = alt_pos[a]; g->elems[p].kind != G_END; p++) {
                if (g->elems[p].kind == G_RULE) {
                    pending[a]++;
                    ref_first[g->elems[p].arg]++;
                    n_refs++;
                } else if (!sets_ok || set_empty(g->sets[g->elems[p].arg])) {
                    pending[a] = INT32_MAX / 2; /* never */
                }
            }
        }
    }
    refs = malloc(sizeof(int32_t) * (size_t)(n_refs + 1));
    if (!refs) goto out;
    /* prefix sums: rule r's referencing alternatives at refs[ref_first[r] ..) */
    int32_t acc = 0;
    for (int32_t r = 0; r <= g->n_rules; r++) {
        int32_t c = r < g->n_rules ? ref_first[r] : 0;
        ref_first[r] = acc;
        acc += c;
    }
    int32_t *fill = calloc((size_t)g->n_rules + 1, sizeof(int32_t));
    if (!fill) goto out;
    for (a = 0; a < n_alts; a++)
        for (int32_t p = alt_pos[a]; g->elems[p].kind != G_END; p++)
            if (g->elems[p].kind == G_RULE) {
                int32_t t = g->elems[p].arg;
                refs[ref_first[t] + fill[t]++] = a;
            }
    free(fill);
    int32_t qh = 0, qt = 0;
    for (int32_t r = 0; r < g->n_rules; r++) prod[r] = false;
    for (a = 0; a < n_alts; a++)
        if (pending[a] == 0 && !prod[alt_rule[a]]) {
            prod[alt_rule[a]] = true;
            queue[qt++] = alt_rule[a];
        }
    while (qh < qt) {
        int32_t r = queue[qh++];
        for (int32_t i = ref_first[r]; i < ref_first[r + 1]; i++) {
            int32_t b = refs[i];
            if (--pending[b] == 0 && !prod[alt_rule[b]]) {
                prod[alt_rule[b]] = true;
                queue[qt++] = alt_rule[b];
            }
        }
    }
    st = 0;
out:
    free(alt_rule);
    free(alt_pos);
    free(pending);
    free(ref_first);
    free(queue);
    free(refs);
    return st;
}

static bool alt_ok(const g_grammar *g, int32_t pos, const bool *prod)
{
    for (int32_t p = pos; g->elems[p].kind != G_END; p++) {
        if (g->elems[p].kind == G_RULE && !prod[g->elems[p].arg]) return false;
        if (g->elems[p].kind == G_SET && set_empty(g->sets[g->elems[p].arg])) return false;
    }
    return true;
}

/* Left corners: rule r reaches s without reading a byte when s stands in
 * an alternative of r after only nullable elements. Such an edge pushes a
 * stack frame unless s is the alternative's last element (a tail call).
 * A cycle through a frame-pushing edge grows the stack forever, so it is
 * refused; cycles of tail calls alone are harmless (the closure in
 * gram_dfa.c visits each (position, stack) once). Tarjan's SCCs,
 * iteratively, so deep grammars do not exhaust the C stack. */
typedef struct edge {
    int32_t to;
    bool tail;
} edge;

static int left_recursion(g_grammar *g, const bool *nul)
{
    int32_t R = g->n_rules;
    int32_t *first = calloc((size_t)R + 1, sizeof(int32_t));
    edge *ed = NULL;
    int32_t n_ed = 0, cap_ed = 0;
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)R), *low = malloc(sizeof(int32_t) * (size_t)R);
    int32_t *comp = malloc(sizeof(int32_t) * (size_t)R), *stk = malloc(sizeof(int32_t) * (size_t)R);
    int32_t *cs_v = malloc(sizeof(int32_t) * (size_t)R), *cs_e = malloc(sizeof(int32_t) * (size_t)R);
    bool *on = calloc((size_t)R, sizeof(bool));
    int st = -1;
    if (!first || !idx || !low || !comp || !stk || !cs_v || !cs_e || !on) {
        g_fail(g, "out of memory");
        goto out;
    }
    for (int32_t r = 0; r < R; r++) {
        first[r] = n_ed;
        for (int32_t k = 0; k < g->rules[r].n_alts; k++) {
            for (int32_t p = g->rules[r].alts[k]; g->elems[p].kind == G_RULE; p++) {
                if (!g_grow((void **)&ed, &cap_ed, n_ed + 1, sizeof *ed)) {
                    g_fail(g, "out of memory");
                    goto out;
                }
                ed[n_ed++] = (edge){g->elems[p].arg, g->elems[p + 1].kind == G_END};
                if (!nul[g->elems[p].arg]) break;
            }
        }
    }
    first[R] = n_ed;
    for (int32_t r = 0; r < R; r++) idx[r] = -1;
    int32_t counter = 0, sp = 0, n_comp = 0;
    for (int32_t s = 0; s < R; s++) {
        if (idx[s] >= 0) continue;
        int32_t depth = 0;
        cs_v[0] = s;
        cs_e[0] = first[s];
        idx[s] = low[s] = counter++;
        stk[sp++] = s;
        on[s] = true;
        while (depth >= 0) {
            int32_t v = cs_v[depth];
            if (cs_e[depth] < first[v + 1]) {
                int32_t w = ed[cs_e[depth]++].to;
                if (idx[w] < 0) {
                    idx[w] = low[w] = counter++;
                    stk[sp++] = w;
                    on[w] = true;
                    depth++;
                    cs_v[depth] = w;
                    cs_e[depth] = first[w];
                } else if (on[w] && idx[w] < low[v]) {
                    low[v] = idx[w];
                }
                continue;
            }
            if (low[v] == idx[v]) {
                int32_t w;
                do {
                    w = stk[--sp];
                    on[w] = false;
                    comp[w] = n_comp;
                } while (w != v);
                n_comp++;
            }
            depth--;
            if (depth >= 0 && low[v] < low[cs_v[depth]]) low[cs_v[depth]] = low[v];
        }
    }
    for (int32_t r = 0; r < R; r++)
        for (int32_t i = first[r]; i < first[r + 1]; i++)
            if (!ed[i].tail && comp[ed[i].to] == comp[r]) {
                g_fail(g, "left recursion: rule '%s' can reach itself through '%s' without reading "
                       "anything; rewrite it as a repetition (x*) or right recursion",
                       g->rules[r].name, g->rules[ed[i].to].name);
                goto out;
            }
    st = 0;
out:
    free(first);
    free(ed);
    free(idx);
    free(low);
    free(comp);
    free(stk);
    free(cs_v);
    free(cs_e);
    free(on);
    return st;
}

int g_finish(g_grammar *g)
{
    if (g->failed) return -1;
    if (g->root < 0) return g_fail(g, "the grammar has no root rule");
    for (int32_t r = 0; r < g->n_rules; r++)
        if (!g->rules[r].defined)
            return g_fail(g, "rule '%s' is used but never defined", g->rules[r].name);
    bool *prod = malloc(sizeof(bool) * (size_t)g->n_rules + 1);
    if (!prod) return g_fail(g, "out of memory");
    if (derive(g, prod, true) < 0) {
        free(prod);
        return g_fail(g, "out of memory");
    }
    if (!prod[g->root]) {
        /* name a rule the root needs that can never finish, when there is one */
        const char *culprit = NULL;
        const g_rule *rr = &g->rules[g->root];
        for (int32_t k = 0; k < rr->n_alts && !culprit; k++)
            for (int32_t p = rr->alts[k]; g->elems[p].kind != G_END && !culprit; p++)
                if (g->elems[p].kind == G_RULE && !prod[g->elems[p].arg] && g->elems[p].arg != g->root)
                    culprit = g->rules[g->elems[p].arg].name;
        if (culprit)
            g_fail(g, "the spec accepts no output: '%s' can never finish (a recursion without a "
                   "base case, or a choice of nothing)", culprit);
        else
            g_fail(g, "the spec accepts no output: '%s' can never finish (a recursion without a "
                   "base case, or a choice of nothing)", rr->name);
        free(prod);
        return -1;
    }
    /* drop the alternatives that can never finish, so that every parse
     * the automaton follows can still be completed */
    for (int32_t r = 0; r < g->n_rules; r++) {
        g_rule *ru = &g->rules[r];
        int32_t w = 0;
        for (int32_t k = 0; k < ru->n_alts; k++)
            if (prod[r] && alt_ok(g, ru->alts[k], prod)) ru->alts[w++] = ru->alts[k];
        ru->n_alts = w;
    }
    free(prod);
    bool *nul = malloc(sizeof(bool) * (size_t)g->n_rules + 1);
    if (!nul) return g_fail(g, "out of memory");
    if (derive(g, nul, false) < 0) {
        free(nul);
        return g_fail(g, "out of memory");
    }
    int st = left_recursion(g, nul);
    free(nul);
    if (st) return st;
    g->pos_rule = malloc(sizeof *g->pos_rule * (size_t)(g->n_elems + 1));
    if (!g->pos_rule) return g_fail(g, "out of memory");
    for (int32_t i = 0; i < g->n_elems; i++) g->pos_rule[i] = -1;
    for (int32_t r = 0; r < g->n_rules; r++)
        for (int32_t k = 0; k < g->rules[r].n_alts; k++)
            for (int32_t p = g->rules[r].alts[k];; p++) {
                g->pos_rule[p] = r;
                if (g->elems[p].kind == G_END) break;
            }
    return 0;
}
