/*
 * gram_mask_count.c: the count-filtering walk (see gram_mask.c's tokens_of).
 * A state inside a counted repetition shares its inflated state's tokens
 * (g_dfa_inflate); this walk finds, once per inflated state, how many items
 * each token needs to start in the moved count, so each state along the
 * count takes exactly the tokens whose need is within the items it has left.
 * Not for: the trie, the masks or their caches (gram_mask.c, which keeps a
 * g_need with its state and decides when to use it), or the automaton
 * (gram_dfa.c, whose g_dfa_split this walk asks).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gram.h"

#define G_MAX_GROUPS 4

void g_need_free(g_need *m)
{
    if (!m) return;
    free(m->tok);
    free(m->root_node);
    free(m->root_need);
    free(m);
}

size_t g_need_bytes(const g_need *m)
{
    return m ? sizeof *m + (size_t)m->n_roots * 5 + (m->tok ? (size_t)m->n_vocab : 0) : 0;
}

typedef struct grp {
    int32_t s, cnt;
    bool in;               /* inside the chain: split again after each byte */
} grp;

/* g_dfa_split's answers in one walk, by state (a walk meets few states
 * and splits each many times) */
typedef struct split_memo {
    int32_t *v;            /* [cap * 3] in, ex, started; in -4: not asked yet */
    int32_t cap;
} split_memo;

static int split_cached(g_dfa *d, split_memo *m, int32_t s, int32_t pos, const int32_t *par, int32_t n_par,
                        int32_t *in, int32_t *ex, int32_t *st)
{
    if (s >= m->cap) {
        int32_t nc = m->cap ? m->cap : 1024;
        while (nc <= s) nc *= 2;
        int32_t *nv = realloc(m->v, sizeof *nv * 3 * (size_t)nc);
        if (!nv) {
            snprintf(d->err, sizeof d->err, "out of memory");
            return -3;
        }
        for (int32_t k = m->cap; k < nc; k++) nv[3 * k] = -4;
        m->v = nv;
        m->cap = nc;
    }
    int32_t *e = m->v + 3 * (size_t)s;
    if (e[0] == -4) {
        int r = g_dfa_split(d, s, pos, par, n_par, &e[0], &e[1], &e[2]);
        if (r == -3) {
            e[0] = -4;
            return -3;
        }
        if (r < 0) e[0] = -5; /* two counts */
    }
    if (e[0] == -5) return -1;
    *in = e[0];
    *ex = e[1];
    *st = e[2];
    return 0;
}

/* The groups of B's parses after node byte b from the groups above. 0, 1
 * (not one count per group: give up), -1 error. */
static int groups_step(g_dfa *d, split_memo *memo, const grp *up, int32_t n_up, uint8_t b, int32_t pos,
                       const int32_t *par, int32_t n_par, grp *out, int32_t *n_out)
{
    int32_t n = 0;
    for (int32_t k = 0; k < n_up; k++) {
        int32_t r = g_dfa_step(d, up[k].s, b);
        if (r == -3) return -1;
        if (r < 0) continue;
        int32_t in = -1, ex = r, st = up[k].cnt;
        if (up[k].in) {
            int sp = split_cached(d, memo, r, pos, par, n_par, &in, &ex, &st);
            if (sp == -3) return -1;
            if (sp < 0) return 1;
        }
        if (in >= 0) {
            if (n == G_MAX_GROUPS) return 1;
            out[n++] = (grp){in, st, true};
        }
        if (ex >= 0) {
            int32_t j = 0;
            while (j < n && !(out[j].s == ex && out[j].cnt == up[k].cnt && !out[j].in)) j++;
            if (j == n) {
                if (n == G_MAX_GROUPS) return 1;
                out[n++] = (grp){ex, up[k].cnt, false};
            }
        }
    }
    *n_out = n;
    return 0;
}

/* The counts of B's tokens for the moved position pos (see g_need). NULL
 * on error (d->err); a g_need with ok false when counts cannot be used. */
g_need *g_need_walk(g_dfa *d, const g_trie *t, int32_t B, int32_t pos, bool with_roots)
{
    g_need *nd = calloc(1, sizeof *nd);
    int32_t depth_cap = t->max_depth + 1;
    int32_t *st = malloc(sizeof *st * (size_t)depth_cap);
    grp *gs = malloc(sizeof *gs * (size_t)depth_cap * G_MAX_GROUPS);
    int32_t *ng = malloc(sizeof *ng * (size_t)depth_cap);
    int32_t par[16], n_par = 0;
    int32_t cap_roots = 0;
    split_memo memo = {0};
    if (!nd || !st || !gs || !ng || !(nd->tok = malloc((size_t)t->n_vocab))) goto oom;
    memset(nd->tok, 255, (size_t)t->n_vocab);
    nd->n_vocab = t->n_vocab;
    nd->pos = pos;
    nd->roots = with_roots;
    /* the moved frames' parents in B */
    for (int32_t i = 0; i < d->states[B].n; i++)
        for (int32_t x = d->state_nodes[d->states[B].first + i]; x >= 0; x = d->nodes[x].parent) {
            if (d->nodes[x].pos != pos) continue;
            int32_t k = 0;
            while (k < n_par && par[k] != d->nodes[x].parent) k++;
            if (k == n_par) {
                if (n_par == 16) goto unusable;
                par[n_par++] = d->nodes[x].parent;
            }
        }
    {
        int32_t in, ex, cnt;
        int sp = g_dfa_split(d, B, pos, par, n_par, &in, &ex, &cnt);
        if (sp == -3) goto fail;
        if (sp < 0 || cnt != 0) goto unusable;
        ng[0] = 0;
        if (in >= 0) gs[ng[0]++] = (grp){in, 0, true};
        if (ex >= 0) gs[ng[0]++] = (grp){ex, 0, false};
    }
    st[0] = B;
    for (int32_t i = 0; i < t->n_nodes;) {
        int32_t dep = t->depth[i];
        int32_t ns = g_dfa_step(d, st[dep - 1], t->byte[i]);
        if (ns == -3) goto fail;
        if (ns < 0) {
            i = t->skip[i];
            continue;
        }
        grp *g = gs + (size_t)dep * G_MAX_GROUPS;
        int r = groups_step(d, &memo, gs + (size_t)(dep - 1) * G_MAX_GROUPS, ng[dep - 1], t->byte[i], pos, par,
                            n_par, g, &ng[dep]);
        if (r < 0) goto fail;
        if (r > 0 || ng[dep] == 0) goto unusable;
        int32_t any = 255, nonesc = 255;
        for (int32_t k = 0; k < ng[dep]; k++) {
            const g_state *q = &d->states[g[k].s];
            int32_t c = g[k].cnt > 254 ? 254 : g[k].cnt;
            if (c < any) any = c;
            if ((q->n > 0 || q->accept) && c < nonesc) nonesc = c;
        }
        /* an r in [any, nonesc) would see only escaped parses here: an
         * escape root B does not have */
        if (nonesc != 255 && any < nonesc) goto unusable;
        const g_state *q = &d->states[ns];
        if (with_roots && q->n == 0 && !q->accept) {
            if (nd->n_roots == cap_roots) {
                int32_t nc = cap_roots ? cap_roots * 2 : 64;
                int32_t *a = realloc(nd->root_node, sizeof *a * (size_t)nc);
                if (a) nd->root_node = a;
                uint8_t *b = realloc(nd->root_need, (size_t)nc);
                if (b) nd->root_need = b;
                if (!a || !b) goto oom;
                cap_roots = nc;
            }
            nd->root_node[nd->n_roots] = i;
            nd->root_need[nd->n_roots++] = (uint8_t)any;
            i = t->skip[i];
            continue;
        }
        st[dep] = ns;
        for (int32_t k = t->tok_first[i]; k < t->tok_first[i + 1]; k++) nd->tok[t->tok_ids[k]] = (uint8_t)any;
        i++;
    }
    nd->ok = true;
    goto out;
unusable:
    nd->ok = false;
    free(nd->tok);
    nd->tok = NULL;
    goto out;
oom:
    snprintf(d->err, sizeof d->err, "out of memory");
fail:
    g_need_free(nd);
    nd = NULL;
out:
    free(st);
    free(gs);
    free(ng);
    free(memo.v);
    return nd;
}

