/*
 * gram_dfa.c: a grammar run as a pushdown automaton over bytes, made
 * deterministic lazily. A parse stack is a chain of interned nodes (an
 * element position over its return point below), so equal stacks are one
 * id and share their tails. A state is the set of stacks whose tops can
 * read a byte next (their top elements are byte sets), plus whether the
 * root has finished; states are interned too. The transition of a state on
 * a byte is computed once (advance every top whose set holds the byte,
 * then close: pop finished rules, push the alternatives of rules met) and
 * kept in the state's table, one entry per byte class (bytes every top
 * reads alike), so following a token's bytes, and walking the whole
 * vocabulary's trie for a mask, is mostly table lookups.
 *
 * Also here: the two maps of a state onto one whose mask it shares
 * (g_dfa_truncate, g_dfa_inflate; gram.h says when each is exact).
 *
 * A rule reference that ends its alternative returns where its caller
 * would have (a tail call), so repetition (x*, right recursion) does not
 * grow the stack; the closure visits each (position, stack) once, so loops
 * of such calls end. Left recursion, which would grow it forever, was
 * refused when the grammar was finished (gram_ir.c).
 *
 * Not for: the grammar's construction (gram_ir.c) or token masks
 * (gram_mask.c). Threads: one caller at a time (grammar.c locks).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gram.h"

#define KEY(pos, parent) (((int64_t)(pos) << 32) | (uint32_t)((parent) + 1))

static uint32_t mix32(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (uint32_t)x;
}

static int dfa_fail(g_dfa *d, const char *what)
{
    snprintf(d->err, sizeof d->err, "%s", what);
    return -3;
}

static bool over(g_dfa *d)
{
    if (d->bytes <= d->lim.max_bytes) return false;
    g_dfa_drop_masks(d, true); /* the cached masks are the part that can be rebuilt */
    return d->bytes > d->lim.max_bytes;
}

g_dfa *g_dfa_new(const g_grammar *g, const g_dfa_limits *lim)
{
    g_dfa *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->g = g;
    d->lim = *lim;
    d->start = -1;
    return d;
}

void g_dfa_free(g_dfa *d)
{
    if (!d) return;
    for (int32_t i = 0; i < d->n_states; i++) {
        free(d->states[i].next);
        g_mask_free(d->states[i].mask);
        g_tmask_free(d->states[i].tmask);
        g_need_free(d->states[i].need);
    }
    free(d->states);
    free(d->state_hash);
    free(d->state_nodes);
    free(d->nodes);
    free(d->node_hash);
    free(d->visit);
    free(d->visit_stamp);
    free(d->work);
    free(d->out);
    free(d);
}

static int u32_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

void g_dfa_drop_masks(g_dfa *d, bool all)
{
    /* keep the most recently used quarter: dropping everything at once would
     * make the next steps rebuild what they were using */
    uint32_t keep_from = 0;
    if (!all) {
        int32_t n = 0;
        uint32_t *st = malloc(sizeof *st * (size_t)(d->n_states + 1));
        if (st) {
            for (int32_t i = 0; i < d->n_states; i++)
                if (d->states[i].mask || d->states[i].tmask || d->states[i].need) st[n++] = d->states[i].used;
            if (n) {
                qsort(st, (size_t)n, sizeof *st, u32_cmp);
                keep_from = st[n - 1 - n / 4];
            }
            free(st);
        }
        if (!keep_from) all = true;
    }
    for (int32_t i = 0; i < d->n_states; i++) {
        g_state *s = &d->states[i];
        if (!all && s->used >= keep_from) continue;
        size_t b = g_mask_bytes(s->mask) + g_tmask_bytes(s->tmask) + g_need_bytes(s->need);
        g_mask_free(s->mask);
        g_tmask_free(s->tmask);
        g_need_free(s->need);
        s->mask = NULL;
        s->tmask = NULL;
        s->need = NULL;
        d->bytes -= (int64_t)b;
        d->mask_bytes -= (int64_t)b;
    }
}

/* ------------------------------------------------------------ nodes */

static int32_t node_intern(g_dfa *d, int32_t pos, int32_t parent)
{
    if ((int64_t)(d->n_nodes + 1) * 2 > d->cap_node_hash) {
        int32_t nc = d->cap_node_hash ? d->cap_node_hash * 2 : 1024;
        int32_t *nh = malloc(sizeof *nh * (size_t)nc);
        if (!nh) return dfa_fail(d, "out of memory");
        for (int32_t i = 0; i < nc; i++) nh[i] = -1;
        for (int32_t i = 0; i < d->n_nodes; i++) {
            uint32_t h = mix32((uint64_t)KEY(d->nodes[i].pos, d->nodes[i].parent)) & (uint32_t)(nc - 1);
            while (nh[h] >= 0) h = (h + 1) & (uint32_t)(nc - 1);
            nh[h] = i;
        }
        d->bytes += (int64_t)(nc - d->cap_node_hash) * (int64_t)sizeof *nh;
        free(d->node_hash);
        d->node_hash = nh;
        d->cap_node_hash = nc;
    }
    uint32_t mask = (uint32_t)(d->cap_node_hash - 1);
    uint32_t h = mix32((uint64_t)KEY(pos, parent)) & mask;
    while (d->node_hash[h] >= 0) {
        const g_node *n = &d->nodes[d->node_hash[h]];
        if (n->pos == pos && n->parent == parent) return d->node_hash[h];
        h = (h + 1) & mask;
    }
    if (d->n_nodes == d->cap_nodes) {
        int32_t nc = d->cap_nodes ? d->cap_nodes * 2 : 1024;
        g_node *nn = realloc(d->nodes, sizeof *nn * (size_t)nc);
        if (!nn) return dfa_fail(d, "out of memory");
        d->bytes += (int64_t)(nc - d->cap_nodes) * (int64_t)sizeof *nn;
        d->nodes = nn;
        d->cap_nodes = nc;
    }
    d->nodes[d->n_nodes] = (g_node){pos, parent};
    d->node_hash[h] = d->n_nodes;
    return d->n_nodes++;
}

/* ------------------------------------------------------------ closure */

static int work_push(g_dfa *d, int32_t *n, int64_t key)
{
    if (*n == d->cap_work) {
        int32_t nc = d->cap_work ? d->cap_work * 2 : 256;
        int64_t *nw = realloc(d->work, sizeof *nw * (size_t)nc);
        if (!nw) return dfa_fail(d, "out of memory");
        d->work = nw;
        d->cap_work = nc;
    }
    d->work[(*n)++] = key;
    return 0;
}

/* true the first time key is seen in this closure (d->stamp) */
static int visit_first(g_dfa *d, int64_t key, int32_t *n_seen)
{
    if ((int64_t)(*n_seen + 1) * 2 > d->cap_visit) {
        int32_t nc = d->cap_visit ? d->cap_visit * 2 : 256;
        int64_t *nv = malloc(sizeof *nv * (size_t)nc);
        uint32_t *ns = calloc((size_t)nc, sizeof *ns);
        if (!nv || !ns) {
            free(nv);
            free(ns);
            return dfa_fail(d, "out of memory");
        }
        for (int32_t i = 0; i < d->cap_visit; i++) {
            if (d->visit_stamp[i] != d->stamp) continue;
            uint32_t h = mix32((uint64_t)d->visit[i]) & (uint32_t)(nc - 1);
            while (ns[h] == d->stamp) h = (h + 1) & (uint32_t)(nc - 1);
            nv[h] = d->visit[i];
            ns[h] = d->stamp;
        }
        free(d->visit);
        free(d->visit_stamp);
        d->visit = nv;
        d->visit_stamp = ns;
        d->cap_visit = nc;
    }
    uint32_t mask = (uint32_t)(d->cap_visit - 1);
    uint32_t h = mix32((uint64_t)key) & mask;
    while (d->visit_stamp[h] == d->stamp) {
        if (d->visit[h] == key) return 0;
        h = (h + 1) & mask;
    }
    d->visit[h] = key;
    d->visit_stamp[h] = d->stamp;
    (*n_seen)++;
    return 1;
}

static int int_cmp(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* Runs the closure of the n_work items in d->work: the stack tops (nodes
 * whose element is a byte set) go to d->out, sorted and unique; *n_out
 * their count; *accept when the root finished, *esc when a parse popped
 * into G_WILD. 0 or -3. */
static int closure(g_dfa *d, int32_t n_work, int32_t *n_out, bool *accept, bool *esc)
{
    const g_grammar *g = d->g;
    if (++d->stamp == 0) { /* wrapped: clear the stamps once */
        if (d->visit_stamp) memset(d->visit_stamp, 0, sizeof *d->visit_stamp * (size_t)d->cap_visit);
        d->stamp = 1;
    }
    int32_t n_seen = 0, no = 0;
    *accept = false;
    *esc = false;
    while (n_work > 0) {
        int64_t key = d->work[--n_work];
        int r = visit_first(d, key, &n_seen);
        if (r < 0) return -3;
        if (!r) continue;
        int32_t pos = (int32_t)(key >> 32), parent = (int32_t)(uint32_t)key - 1;
        g_elem e = g->elems[pos];
        if (e.kind == G_SET) {
            int32_t id = node_intern(d, pos, parent);
            if (id < 0) return -3;
            if (no == d->cap_out) {
                int32_t nc = d->cap_out ? d->cap_out * 2 : 64;
                int32_t *nn = realloc(d->out, sizeof *nn * (size_t)nc);
                if (!nn) return dfa_fail(d, "out of memory");
                d->out = nn;
                d->cap_out = nc;
            }
            d->out[no++] = id;
            if (no > d->lim.max_stacks) {
                snprintf(d->err, sizeof d->err, "the spec is too ambiguous: a state holds more than "
                         "%d parses (constraint.grammar max_stacks)", d->lim.max_stacks);
                return -3;
            }
        } else if (e.kind == G_END) {
            if (parent == -1) {
                *accept = true;
            } else if (parent == G_WILD) {
                *esc = true;
            } else if (work_push(d, &n_work, KEY(d->nodes[parent].pos, d->nodes[parent].parent)) < 0) {
                return -3;
            }
        } else {
            int32_t ret = pos + 1, np = parent;
            if (g->elems[ret].kind != G_END) {
                np = node_intern(d, ret, parent);
                if (np < 0) return -3;
            }
            const g_rule *ru = &g->rules[e.arg];
            for (int32_t k = ru->n_alts - 1; k >= 0; k--)
                if (work_push(d, &n_work, KEY(ru->alts[k], np)) < 0) return -3;
        }
    }
    if (no > 1) {
        qsort(d->out, (size_t)no, sizeof *d->out, int_cmp);
        int32_t w = 1;
        for (int32_t i = 1; i < no; i++)
            if (d->out[i] != d->out[w - 1]) d->out[w++] = d->out[i];
        no = w;
    }
    *n_out = no;
    return 0;
}

/* ------------------------------------------------------------ states */

static uint32_t state_hash_of(const int32_t *ids, int32_t n, bool accept, bool esc)
{
    uint64_t h = (accept ? 0x9E3779B97F4A7C15ull : 0x2545F4914F6CDD1Dull) ^ (esc ? 0x51ED27ull : 0);
    for (int32_t i = 0; i < n; i++) h = (h ^ (uint64_t)(uint32_t)ids[i]) * 0x100000001B3ull;
    return mix32(h ^ (uint64_t)n);
}

static int state_table_grow(g_dfa *d)
{
    int32_t nc = d->cap_state_hash ? d->cap_state_hash * 2 : 256;
    int32_t *nh = malloc(sizeof *nh * (size_t)nc);
    if (!nh) return dfa_fail(d, "out of memory");
    for (int32_t i = 0; i < nc; i++) nh[i] = -1;
    for (int32_t i = 0; i < d->n_states; i++) {
        uint32_t h = d->states[i].hash & (uint32_t)(nc - 1);
        while (nh[h] >= 0) h = (h + 1) & (uint32_t)(nc - 1);
        nh[h] = i;
    }
    d->bytes += (int64_t)(nc - d->cap_state_hash) * (int64_t)sizeof *nh;
    free(d->state_hash);
    d->state_hash = nh;
    d->cap_state_hash = nc;
    return 0;
}

/* The state of d->out[0..n) with accept and esc; -1 when it is empty (dead). */
static int32_t state_intern(g_dfa *d, int32_t n, bool accept, bool esc)
{
    if (n == 0 && !accept && !esc) return -1;
    const int32_t *ids = d->out;
    uint32_t hv = state_hash_of(ids, n, accept, esc);
    if ((int64_t)(d->n_states + 1) * 2 > d->cap_state_hash && state_table_grow(d) < 0) return -3;
    uint32_t mask = (uint32_t)(d->cap_state_hash - 1);
    uint32_t h = hv & mask;
    while (d->state_hash[h] >= 0) {
        const g_state *s = &d->states[d->state_hash[h]];
        if (s->hash == hv && s->n == n && s->accept == accept && s->esc == esc &&
            (n == 0 || !memcmp(d->state_nodes + s->first, ids, sizeof *ids * (size_t)n)))
            return d->state_hash[h];
        h = (h + 1) & mask;
    }
    if (d->n_states >= d->lim.max_states) {
        snprintf(d->err, sizeof d->err, "the spec's automaton grew past %d states "
                 "(constraint.grammar max_states)", d->lim.max_states);
        return -3;
    }
    if (d->n_states == d->cap_states) {
        int32_t nc = d->cap_states ? d->cap_states * 2 : 256;
        g_state *ns = realloc(d->states, sizeof *ns * (size_t)nc);
        if (!ns) return dfa_fail(d, "out of memory");
        d->bytes += (int64_t)(nc - d->cap_states) * (int64_t)sizeof *ns;
        d->states = ns;
        d->cap_states = nc;
    }
    if (d->n_state_nodes + n > d->cap_state_nodes) {
        int64_t nc = d->cap_state_nodes ? d->cap_state_nodes * 2 : 1024;
        while (nc < d->n_state_nodes + n) nc *= 2;
        int32_t *nn = realloc(d->state_nodes, sizeof *nn * (size_t)nc);
        if (!nn) return dfa_fail(d, "out of memory");
        d->bytes += (nc - d->cap_state_nodes) * (int64_t)sizeof *nn;
        d->state_nodes = nn;
        d->cap_state_nodes = nc;
    }
    if (over(d)) {
        snprintf(d->err, sizeof d->err, "the spec's automaton grew past %lld MiB "
                 "(constraint.grammar max_automaton_bytes)", (long long)(d->lim.max_bytes >> 20));
        return -3;
    }
    g_state *s = &d->states[d->n_states];
    memset(s, 0, sizeof *s);
    s->first = (int32_t)d->n_state_nodes;
    s->n = n;
    s->hash = hv;
    s->accept = accept;
    s->esc = esc;
    s->trunc = -1;
    s->infl = -1;
    s->infl_pos = -1;
    if (n) memcpy(d->state_nodes + d->n_state_nodes, ids, sizeof *ids * (size_t)n);
    d->n_state_nodes += n;
    d->state_hash[h] = d->n_states;
    return d->n_states++;
}

/* d->out holds at least n ids (a state's tops are written there before
 * state_intern reads them); -3 with d->err when memory runs out. */
static int out_reserve(g_dfa *d, int32_t n)
{
    if (n <= d->cap_out) return 0;
    int32_t *no = realloc(d->out, sizeof *no * (size_t)n);
    if (!no) return dfa_fail(d, "out of memory");
    d->out = no;
    d->cap_out = n;
    return 0;
}

/* The state of the n tops in `tops` (sorted and made unique first, as
 * state_intern wants them); frees tops whatever happens. A state that comes
 * out empty is an internal fault here (truncating or inflating a live state
 * keeps its tops), reported as `empty_what`. */
static int32_t tops_state(g_dfa *d, int32_t *tops, int32_t n, bool accept, bool esc, const char *empty_what)
{
    if (out_reserve(d, n) < 0) {
        free(tops);
        return -3;
    }
    qsort(tops, (size_t)n, sizeof *tops, int_cmp);
    int32_t w = 0;
    for (int32_t i = 0; i < n; i++)
        if (!w || tops[i] != d->out[w - 1]) d->out[w++] = tops[i];
    free(tops);
    int32_t t = state_intern(d, w, accept, esc);
    return t == -1 ? dfa_fail(d, empty_what) : t;
}

int32_t g_dfa_union(g_dfa *d, int32_t a, int32_t b)
{
    if (a == b) return a;
    const g_state *x = &d->states[a], *y = &d->states[b];
    int32_t n = x->n + y->n;
    bool accept = x->accept || y->accept, esc = x->esc || y->esc;
    int32_t *tops = malloc(sizeof *tops * (size_t)(n ? n : 1));
    if (!tops) return dfa_fail(d, "out of memory");
    memcpy(tops, d->state_nodes + x->first, sizeof *tops * (size_t)x->n);
    memcpy(tops + x->n, d->state_nodes + y->first, sizeof *tops * (size_t)y->n);
    return tops_state(d, tops, n, accept, esc, "internal: the union of two live states is empty");
}

int32_t g_dfa_start(g_dfa *d)
{
    if (d->start >= 0) return d->start;
    const g_rule *root = &d->g->rules[d->g->root];
    int32_t n_work = 0;
    for (int32_t k = root->n_alts - 1; k >= 0; k--)
        if (work_push(d, &n_work, KEY(root->alts[k], -1)) < 0) return -3;
    int32_t n_out;
    bool accept, esc;
    if (closure(d, n_work, &n_out, &accept, &esc) < 0) return -3;
    int32_t s = state_intern(d, n_out, accept, false);
    if (s == -1) return dfa_fail(d, "internal: the start state is empty");
    if (s >= 0) d->start = s;
    return s;
}

/* The byte classes of state s: two bytes are in one class when every top
 * of s reads both or neither, so their transitions are the same closure.
 * Found by splitting the bytes on each distinct byte set of the tops. The
 * table (next per class, then cls[256]) is allocated here. 0 or -3. */
static int make_classes(g_dfa *d, int32_t s)
{
    const g_grammar *g = d->g;
    int32_t n = d->states[s].n, first = d->states[s].first;
    int32_t small[64], *sets = n > 64 ? malloc(sizeof *sets * (size_t)n) : small;
    if (!sets) return dfa_fail(d, "out of memory");
    for (int32_t i = 0; i < n; i++) sets[i] = g->elems[d->nodes[d->state_nodes[first + i]].pos].arg;
    qsort(sets, (size_t)n, sizeof *sets, int_cmp);
    uint8_t cls[256] = {0};
    int32_t nc = 1;
    for (int32_t i = 0; i < n && nc < 256; i++) {
        if (i && sets[i] == sets[i - 1]) continue;
        const uint8_t *set = g->sets[sets[i]];
        int16_t map[512];
        for (int32_t k = 0; k < 2 * nc; k++) map[k] = -1;
        int32_t nn = 0;
        for (int b = 0; b < 256; b++) {
            int key = cls[b] * 2 + (set[b >> 3] >> (b & 7) & 1);
            if (map[key] < 0) map[key] = (int16_t)nn++;
            cls[b] = (uint8_t)map[key];
        }
        nc = nn;
    }
    if (sets != small) free(sets);
    size_t sz = sizeof(int32_t) * (size_t)nc + 256;
    int32_t *nx = malloc(sz);
    if (!nx) return dfa_fail(d, "out of memory");
    for (int32_t k = 0; k < nc; k++) nx[k] = -2;
    memcpy(nx + nc, cls, 256);
    d->states[s].next = nx;
    d->states[s].cls = (uint8_t *)(nx + nc);
    d->bytes += (int64_t)sz;
    if (over(d)) {
        snprintf(d->err, sizeof d->err, "the spec's automaton grew past %lld MiB "
                 "(constraint.grammar max_automaton_bytes)", (long long)(d->lim.max_bytes >> 20));
        return -3;
    }
    return 0;
}

int32_t g_dfa_step_slow(g_dfa *d, int32_t s, uint8_t b)
{
    if (!d->states[s].next && make_classes(d, s) < 0) return -3;
    const g_grammar *g = d->g;
    int32_t n_work = 0;
    int32_t first = d->states[s].first, n = d->states[s].n;
    for (int32_t i = n - 1; i >= 0; i--) {
        const g_node *nd = &d->nodes[d->state_nodes[first + i]];
        const uint8_t *set = g->sets[g->elems[nd->pos].arg];
        if (set[b >> 3] & (1u << (b & 7)))
            if (work_push(d, &n_work, KEY(nd->pos + 1, nd->parent)) < 0) return -3;
    }
    /* a parse that escaped the cut frames may read anything after */
    bool was_esc = d->states[s].esc;
    int32_t next = -1;
    if (n_work || was_esc) {
        int32_t n_out = 0;
        bool accept = false, esc = false;
        if (n_work && closure(d, n_work, &n_out, &accept, &esc) < 0) return -3;
        next = state_intern(d, n_out, accept, esc || was_esc);
        if (next == -3) return -3;
    }
    /* states may have moved: index again */
    d->states[s].next[d->states[s].cls[b]] = next;
    return next;
}

/* A frame's position with counted repetition cut at the horizon H (see
 * gram.h): "k more optional items" for k - 1 > H becomes H + 1 more, and
 * "m more mandatory items" for m > H + 1 becomes H + 1. Within H bytes
 * (the longest token) the two read the same strings and reach the same
 * continuation, so their masks are the same. */
static int32_t canon(const g_grammar *g, int32_t pos, int32_t H)
{
    int32_t r = g->pos_rule ? g->pos_rule[pos] : -1;
    if (r < 0 || H <= 0) return pos;
    const g_rule *ru = &g->rules[r];
    if (ru->rep_kind == 1 && ru->n_alts == 2 && pos == ru->alts[0] + 1 && ru->rep_b - 1 > H + 1) {
        const g_rule *to = &g->rules[ru->rep_a + H + 1]; /* O_{H+2}: H + 1 left after its item */
        return to->n_alts == 2 ? to->alts[0] + 1 : pos;
    }
    if (ru->rep_kind == 2 && ru->n_alts == 1) {
        int32_t i = pos - ru->alts[0], m = ru->rep_a - i;
        if (i >= 0 && i < ru->rep_a && m > H + 1) return ru->alts[0] + (ru->rep_a - (H + 1));
    }
    return pos;
}

int32_t g_dfa_truncate(g_dfa *d, int32_t s)
{
    if (d->states[s].trunc >= 0) return d->states[s].trunc;
    int32_t depth = d->lim.trunc_depth;
    int32_t n = d->states[s].n, first = d->states[s].first;
    if (depth <= 0) return d->states[s].trunc = s;
    /* the tops' chains, each cut below `depth` nodes; collected into a
     * scratch of its own (node_intern may move d->out's users) */
    int32_t *tops = malloc(sizeof *tops * (size_t)(n + 1));
    int32_t chain[64];
    if (!tops) return dfa_fail(d, "out of memory");
    bool cut = false;
    if (depth > 64) depth = 64;
    for (int32_t i = 0; i < n; i++) {
        int32_t k = 0, id = d->state_nodes[first + i];
        while (id >= 0 && k < depth) {
            chain[k++] = id;
            id = d->nodes[id].parent;
        }
        bool moved = false;
        for (int32_t j = 0; j < k && !moved; j++)
            moved = canon(d->g, d->nodes[chain[j]].pos, d->lim.horizon) != d->nodes[chain[j]].pos;
        if (id < 0 && !moved) { /* the whole stack fits: kept as it is */
            tops[i] = chain[0];
            continue;
        }
        cut = true;
        int32_t parent = id < 0 ? -1 : G_WILD;
        for (int32_t j = k - 1; j >= 0; j--) {
            parent = node_intern(d, canon(d->g, d->nodes[chain[j]].pos, d->lim.horizon), parent);
            if (parent < 0) {
                free(tops);
                return -3;
            }
        }
        tops[i] = parent;
    }
    if (!cut) {
        free(tops);
        return d->states[s].trunc = s;
    }
    int32_t t = tops_state(d, tops, n, d->states[s].accept, false, "internal: an empty truncated state");
    if (t < 0) return t;
    d->states[s].trunc = t;
    return t;
}

/* A frame's position moved up its counted repetition (see g_dfa_inflate):
 * "b - 1 more optional items" (a frame after an item of O_b) becomes the
 * chain's largest count within the horizon, "m more mandatory items" the
 * largest m within it; *kf: the longest token that cannot tell the two
 * apart (one that starts fewer items than are left never reaches the end
 * of the count, so its bytes are read alike). pos itself when no move. */
static int32_t inflate_pos(const g_grammar *g, int32_t pos, int32_t H, int32_t *kf)
{
    int32_t r = g->pos_rule ? g->pos_rule[pos] : -1;
    if (r < 0 || H <= 0) return pos;
    const g_rule *ru = &g->rules[r];
    if (ru->rep_kind == 1 && ru->n_alts == 2 && pos == ru->alts[0] + 1 && ru->rep_n >= ru->rep_b) {
        int32_t b = ru->rep_b, c = ru->rep_n < H + 2 ? ru->rep_n : H + 2;
        if (c <= b) return pos;
        const g_rule *to = &g->rules[ru->rep_a + c - 1];
        if (to->n_alts != 2 || to->rep_b != c) return pos;
        *kf = b - 2;
        return to->alts[0] + 1;
    }
    if (ru->rep_kind == 2 && ru->n_alts == 1) {
        int32_t i = pos - ru->alts[0], m = ru->rep_a - i;
        if (i < 1 || i > ru->rep_a) return pos;
        int32_t m2 = ru->rep_a - 1 < H + 1 ? ru->rep_a - 1 : H + 1;
        if (m2 <= m) return pos;
        *kf = m - 1;
        return ru->alts[0] + (ru->rep_a - m2);
    }
    return pos;
}

/* frames whose bound is below this are not moved: they would leave almost
 * every token to walk, for the price of one more shared mask */
#define INFLATE_MIN 2

int32_t g_dfa_inflate(g_dfa *d, int32_t s, int32_t *k)
{
    if (d->states[s].infl >= 0) {
        *k = d->states[s].infl_k;
        return d->states[s].infl;
    }
    int32_t n = d->states[s].n, first = d->states[s].first, K = INT32_MAX;
    if (!d->lim.inflate || n == 0) {
        d->states[s].infl_k = 0;
        *k = 0;
        return d->states[s].infl = s;
    }
    int32_t *tops = malloc(sizeof *tops * (size_t)n), cap = 64, *chain = malloc(sizeof *chain * (size_t)cap);
    if (!tops || !chain) {
        free(tops);
        free(chain);
        return dfa_fail(d, "out of memory");
    }
    bool moved_any = false, one_count = true;
    int32_t from_pos = -1;
    for (int32_t i = 0; i < n; i++) {
        int32_t depth = 0, id = d->state_nodes[first + i];
        for (; id >= 0; id = d->nodes[id].parent) {
            if (depth == cap) {
                int32_t *nc = realloc(chain, sizeof *nc * (size_t)cap * 2);
                if (!nc) {
                    free(tops);
                    free(chain);
                    return dfa_fail(d, "out of memory");
                }
                chain = nc;
                cap *= 2;
            }
            chain[depth++] = id;
        }
        /* id: the bottom's parent (-1, or G_WILD for a truncated stack) */
        int32_t j_moved = -1;
        for (int32_t j = 0; j < depth; j++) {
            int32_t kf = -1, pos = d->nodes[chain[j]].pos;
            int32_t np = inflate_pos(d->g, pos, d->lim.horizon, &kf);
            if (np != pos && kf >= INFLATE_MIN) {
                j_moved = j;
                if (kf < K) K = kf;
                /* one optional count moved everywhere: the state can be its
                 * inflated state's tokens filtered by count (gram_mask.c) */
                const g_rule *ru = &d->g->rules[d->g->pos_rule[pos]];
                if (ru->rep_kind != 1 || (from_pos >= 0 && from_pos != pos)) one_count = false;
                from_pos = pos;
            }
        }
        if (j_moved < 0) {
            tops[i] = chain[0];
            continue;
        }
        moved_any = true;
        /* the frames above the deepest move are made again over it */
        int32_t parent = d->nodes[chain[j_moved]].parent;
        for (int32_t j = j_moved; j >= 0; j--) {
            int32_t kf = -1, pos = d->nodes[chain[j]].pos, np = inflate_pos(d->g, pos, d->lim.horizon, &kf);
            parent = node_intern(d, np != pos && kf >= INFLATE_MIN ? np : pos, parent);
            if (parent < 0) {
                free(tops);
                free(chain);
                return -3;
            }
        }
        tops[i] = parent;
    }
    free(chain);
    if (!moved_any) {
        free(tops);
        d->states[s].infl_k = 0;
        *k = 0;
        return d->states[s].infl = s;
    }
    int32_t t = tops_state(d, tops, n, d->states[s].accept, d->states[s].esc,
                           "internal: an empty inflated state");
    if (t < 0) return t;
    d->states[s].infl = t;
    d->states[s].infl_k = K;
    if (one_count) {
        const g_rule *ru = &d->g->rules[d->g->pos_rule[from_pos]];
        int32_t kf;
        d->states[s].infl_pos = inflate_pos(d->g, from_pos, d->lim.horizon, &kf);
        d->states[s].infl_r = ru->rep_b - 1;
    }
    *k = K;
    return t;
}

/* Is node x a frame of the counted chain whose frames sit at target (an
 * O_c position) over one of parents? Its items started since: c - m. */
static bool chain_frame(const g_dfa *d, int32_t x, int32_t target, const int32_t *parents, int32_t n_parents,
                        int32_t *started)
{
    const g_grammar *g = d->g;
    int32_t pos = d->nodes[x].pos, r = g->pos_rule[pos], rt = g->pos_rule[target];
    const g_rule *ru = &g->rules[r], *to = &g->rules[rt];
    if (ru->rep_kind != 1 || ru->rep_a != to->rep_a || pos != ru->alts[0] + 1) return false;
    for (int32_t k = 0; k < n_parents; k++)
        if (d->nodes[x].parent == parents[k]) {
            *started = to->rep_b - ru->rep_b;
            return true;
        }
    return false;
}

int g_dfa_split(g_dfa *d, int32_t s, int32_t target, const int32_t *parents, int32_t n_parents, int32_t *in,
                int32_t *ex, int32_t *started)
{
    int32_t n = d->states[s].n, first = d->states[s].first, n_in = 0, cnt = -1;
    bool accept = d->states[s].accept, esc = d->states[s].esc;
    int32_t small[64], *side = n > 64 ? malloc(sizeof *side * (size_t)n) : small;
    if (!side) return dfa_fail(d, "out of memory");
    for (int32_t i = 0; i < n; i++) {
        int32_t st = -1;
        side[i] = 0;
        for (int32_t x = d->state_nodes[first + i]; x >= 0; x = d->nodes[x].parent)
            if (chain_frame(d, x, target, parents, n_parents, &st)) {
                side[i] = 1;
                break;
            }
        if (!side[i]) continue;
        if (cnt >= 0 && st != cnt) { /* parses in the count at two counts: not one number */
            if (side != small) free(side);
            return -1;
        }
        cnt = st;
        n_in++;
    }
    if (out_reserve(d, n) < 0) {
        if (side != small) free(side);
        return -3;
    }
    /* the tops stay sorted: each side is a subsequence */
    int32_t w = 0;
    for (int32_t i = 0; i < n; i++)
        if (side[i]) d->out[w++] = d->state_nodes[d->states[s].first + i];
    int32_t a = state_intern(d, w, false, false);
    if (a == -3) {
        if (side != small) free(side);
        return -3;
    }
    w = 0;
    for (int32_t i = 0; i < n; i++)
        if (!side[i]) d->out[w++] = d->state_nodes[d->states[s].first + i];
    if (side != small) free(side);
    int32_t b = state_intern(d, w, accept, esc);
    if (b == -3) return -3;
    *in = a;
    *ex = b;
    *started = cnt < 0 ? 0 : cnt;
    return 0;
}
