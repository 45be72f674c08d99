/*
 * gram_mask.c: which tokens a state allows. The vocabulary is a trie of
 * the tokens' bytes, laid out in preorder (each node: its byte, its depth,
 * where its subtree ends, the tokens ending there), so one pass over an
 * array walks it: a node's state is its parent's state stepped by its
 * byte; a dead state skips the whole subtree. Every token shares the work
 * of its prefix, and the steps are the automaton's cached transitions.
 *
 * A state's mask is computed once and kept with the state, in the
 * smallest of three forms: a bit set, the list of allowed ids (a string's
 * closing quote, a keyword), or the list of refused ids (inside a
 * string, nearly everything is allowed). Filling a request's mask from
 * the cache is then a copy or a short loop.
 *
 * Two kinds of sharing keep misses from walking the whole trie: a state's
 * stacks cut to their top frames (g_dfa_truncate: the certain tokens and
 * the escape roots only the full state decides), and counted repetition
 * moved to its largest count (g_dfa_inflate: the tokens of at most K bytes
 * come from that state's mask, and only subtrees that hold a longer token
 * are walked, each trie node knowing its subtree's longest token; near
 * the end of a count, that state's tokens filtered by the items each
 * needs, from the walk in gram_mask_count.c, cached here with the state).
 *
 * Not for: the automaton (gram_dfa.c), the count-filtering walk itself
 * (gram_mask_count.c), or who may call this when (grammar.c locks the
 * automaton around it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gram.h"

enum { M_BITS = 0, M_ALLOW = 1, M_DENY = 2 };

struct g_mask {
    int32_t kind;
    int32_t n;             /* words (bits) or ids (lists) */
    uint32_t data[];
};

void g_mask_free(g_mask *m) { free(m); }

size_t g_mask_bytes(const g_mask *m) { return m ? sizeof *m + sizeof(uint32_t) * (size_t)m->n : 0; }

/* ------------------------------------------------------------ the trie */

static const g_trie *g_sort_trie; /* qsort has no context pointer; set under build_mu */

static int len_cmp(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const g_trie *t = g_sort_trie;
    if (t->tok_len[x] != t->tok_len[y]) return t->tok_len[x] > t->tok_len[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int tok_cmp(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const g_trie *t = g_sort_trie;
    uint32_t lx = t->tok_len[x], ly = t->tok_len[y];
    int c = memcmp(t->tok_bytes[x], t->tok_bytes[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

void g_trie_free(g_trie *t)
{
    if (!t) return;
    if (t->tok_bytes)
        for (int32_t i = 0; i < t->n_vocab; i++) free(t->tok_bytes[i]);
    free(t->tok_bytes);
    free(t->tok_len);
    free(t->byte);
    free(t->depth);
    free(t->skip);
    free(t->parent);
    free(t->tok_first);
    free(t->tok_ids);
    free(t->maxlen);
    free(t->by_len);
    free(t->short_bits);
    free(t);
}

#include <pthread.h>
static pthread_mutex_t build_mu = PTHREAD_MUTEX_INITIALIZER;

g_trie *g_trie_new(int32_t n_vocab, const char *const *bytes, const uint32_t *len)
{
    g_trie *t = calloc(1, sizeof *t);
    int32_t *order = NULL, *path = NULL;
    if (!t) return NULL;
    t->n_vocab = n_vocab;
    t->tok_bytes = calloc((size_t)n_vocab, sizeof *t->tok_bytes);
    t->tok_len = calloc((size_t)n_vocab, sizeof *t->tok_len);
    order = malloc(sizeof *order * (size_t)n_vocab);
    if (!t->tok_bytes || !t->tok_len || !order) goto fail;
    int32_t n_text = 0;
    int64_t total = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        /* a token longer than 65535 bytes cannot be in the trie (depth is
         * 16 bits); no vocabulary has one, and it stays never allowed */
        uint32_t l = len[i] > 65535 ? 0 : len[i];
        t->tok_len[i] = l;
        if (!l) continue;
        t->tok_bytes[i] = malloc(l);
        if (!t->tok_bytes[i]) goto fail;
        memcpy(t->tok_bytes[i], bytes[i], l);
        order[n_text++] = i;
        total += l;
    }
    t->by_len = malloc(sizeof *t->by_len * (size_t)(n_text + 1));
    if (!t->by_len) goto fail;
    memcpy(t->by_len, order, sizeof *order * (size_t)n_text);
    t->n_by_len = n_text;
    pthread_mutex_lock(&build_mu);
    g_sort_trie = t;
    qsort(order, (size_t)n_text, sizeof *order, tok_cmp);
    qsort(t->by_len, (size_t)n_text, sizeof *order, len_cmp);
    g_sort_trie = NULL;
    pthread_mutex_unlock(&build_mu);
    /* at most one node per byte of every token */
    int64_t cap = total + 1;
    t->byte = malloc((size_t)cap);
    t->depth = malloc(sizeof *t->depth * (size_t)cap);
    t->skip = malloc(sizeof *t->skip * (size_t)cap);
    t->parent = malloc(sizeof *t->parent * (size_t)cap);
    t->tok_first = malloc(sizeof *t->tok_first * (size_t)(cap + 1));
    t->tok_ids = malloc(sizeof *t->tok_ids * (size_t)(n_text + 1));
    t->maxlen = malloc(sizeof *t->maxlen * (size_t)cap);
    path = malloc(sizeof *path * 65537);
    if (!t->byte || !t->depth || !t->skip || !t->parent || !t->tok_first || !t->tok_ids || !t->maxlen ||
        !path)
        goto fail;
    /* preorder: sorted tokens share their common prefix with the previous
     * one; the nodes past it are popped (their subtree ends here) and the
     * rest of the token is pushed */
    int32_t n = 0, sp = 0, n_ids = 0;
    const char *prev = NULL;
    uint32_t prev_len = 0;
    for (int32_t k = 0; k < n_text; k++) {
        int32_t id = order[k];
        const char *b = t->tok_bytes[id];
        uint32_t l = t->tok_len[id], lcp = 0;
        while (prev && lcp < l && lcp < prev_len && b[lcp] == prev[lcp]) lcp++;
        while (sp > (int32_t)lcp) t->skip[path[--sp]] = n;
        for (uint32_t j = lcp; j < l; j++) {
            t->byte[n] = (uint8_t)b[j];
            t->depth[n] = (uint16_t)(j + 1);
            t->parent[n] = sp ? path[sp - 1] : -1;
            t->tok_first[n] = n_ids;
            path[sp++] = n;
            n++;
        }
        t->tok_ids[n_ids++] = id; /* ends at path[sp - 1], the newest node on the path */
        if ((int32_t)l > t->max_depth) t->max_depth = (int32_t)l;
        prev = b;
        prev_len = l;
    }
    while (sp > 0) t->skip[path[--sp]] = n;
    /* short_bits[K - 1]: the tokens of at most K bytes, K = 1 .. G_SHORT_MAX */
    int32_t words = (n_vocab + 31) / 32;
    t->short_bits = calloc((size_t)G_SHORT_MAX * (size_t)words, sizeof *t->short_bits);
    if (!t->short_bits) goto fail;
    for (int32_t i = 0; i < n_vocab; i++)
        for (uint32_t k = t->tok_len[i] ? t->tok_len[i] : G_SHORT_MAX + 1; k <= G_SHORT_MAX; k++)
            t->short_bits[(size_t)(k - 1) * (size_t)words + (size_t)(i >> 5)] |= 1u << (i & 31);
    /* tok_first[i] was set when node i was made; a node's tokens run to the
     * next node's first (tokens attach to the newest node, in order) */
    t->tok_first[n] = n_ids;
    t->n_nodes = n;
    /* a subtree's deepest node is its longest token: children come after
     * their parent in preorder, so one backward pass carries it up */
    for (int32_t i = 0; i < n; i++) t->maxlen[i] = t->depth[i];
    for (int32_t i = n - 1; i >= 0; i--)
        if (t->parent[i] >= 0 && t->maxlen[t->parent[i]] < t->maxlen[i]) t->maxlen[t->parent[i]] = t->maxlen[i];
    free(order);
    free(path);
    return t;
fail:
    free(order);
    free(path);
    g_trie_free(t);
    return NULL;
}

/* ------------------------------------------------------------ masks */

/* A truncated state's tokens (see g_dfa_truncate): those it reads without
 * escaping its cut frames (valid in every full state it stands for), and
 * the trie nodes where a parse escaped with no other left: their whole
 * subtrees depend on the cut frames, and each full state decides them. */
struct g_tmask {
    g_mask *certain;
    int32_t n_roots;
    int32_t roots[];
};

void g_tmask_free(g_tmask *m)
{
    if (!m) return;
    free(m->certain);
    free(m);
}

size_t g_tmask_bytes(const g_tmask *m)
{
    return m ? sizeof *m + sizeof(int32_t) * (size_t)m->n_roots + g_mask_bytes(m->certain) : 0;
}

static inline void bit_set(uint32_t *m, int32_t t) { m[t >> 5] |= 1u << (t & 31); }

typedef struct roots {
    int32_t *r;
    int32_t n, cap;
    bool oom;
} roots;

static void roots_push(roots *rs, int32_t i)
{
    if (rs->n == rs->cap) {
        int32_t nc = rs->cap ? rs->cap * 2 : 64;
        int32_t *nr = realloc(rs->r, sizeof *nr * (size_t)nc);
        if (!nr) rs->oom = true;
        else { rs->r = nr; rs->cap = nc; }
    }
    if (rs->n < rs->cap) rs->r[rs->n++] = i;
}

/* The walk over trie nodes [begin, end) whose parent (at depth base) is in
 * state s0: out gets every token whose bytes the automaton reads without
 * dying. With esc_roots, a node reached in a state that only escaped is
 * recorded there and its subtree skipped (truncated states). Subtrees whose
 * tokens are all at most prune bytes long are skipped (another mask decides
 * them). 0, or -1 with d->err. */
static int walk(g_dfa *d, const g_trie *t, int32_t s0, int32_t begin, int32_t end, int32_t base,
                uint32_t *out, int32_t *n_allowed, roots *esc_roots, int32_t prune)
{
    int32_t st_small[256], *st = st_small;
    if (t->max_depth + 1 > 256) {
        st = malloc(sizeof *st * (size_t)(t->max_depth + 1));
        if (!st) return -1;
    }
    st[base] = s0;
    int32_t allowed = 0;
    const uint8_t *byte = t->byte;
    const uint16_t *depth = t->depth;
    const int32_t *skip = t->skip, *tf = t->tok_first, *ids = t->tok_ids;
    const uint16_t *maxlen = t->maxlen;
    for (int32_t i = begin; i < end;) {
        if (prune && maxlen[i] <= prune) {
            i = skip[i];
            continue;
        }
        int32_t dep = depth[i];
        int32_t ns = g_dfa_step(d, st[dep - 1], byte[i]);
        if (ns < 0) {
            if (ns == -3) {
                if (st != st_small) free(st);
                return -1;
            }
            i = skip[i];
            continue;
        }
        if (esc_roots) {
            const g_state *q = &d->states[ns];
            if (q->n == 0 && !q->accept) { /* escaped and nothing else: undecided here */
                roots_push(esc_roots, i);
                i = skip[i];
                continue;
            }
        }
        st[dep] = ns;
        for (int32_t k = tf[i]; k < tf[i + 1]; k++) bit_set(out, ids[k]);
        allowed += tf[i + 1] - tf[i];
        i++;
    }
    if (st != st_small) free(st);
    *n_allowed += allowed;
    return 0;
}

int g_mask_fill_uncached(g_dfa *d, const g_trie *t, int32_t s, uint32_t *out)
{
    int32_t n = 0;
    memset(out, 0, sizeof *out * (size_t)((t->n_vocab + 31) / 32));
    return walk(d, t, s, 0, t->n_nodes, 0, out, &n, NULL, 0);
}

static void expand(const g_mask *m, int32_t n_vocab, uint32_t *out)
{
    int32_t words = (n_vocab + 31) / 32;
    if (m->kind == M_BITS) {
        memcpy(out, m->data, sizeof *out * (size_t)words);
    } else if (m->kind == M_ALLOW) {
        memset(out, 0, sizeof *out * (size_t)words);
        for (int32_t i = 0; i < m->n; i++) bit_set(out, (int32_t)m->data[i]);
    } else {
        memset(out, 0xFF, sizeof *out * (size_t)words);
        if (n_vocab & 31) out[words - 1] = (1u << (n_vocab & 31)) - 1;
        for (int32_t i = 0; i < m->n; i++) out[m->data[i] >> 5] &= ~(1u << (m->data[i] & 31));
    }
}

static int32_t popcount_all(const uint32_t *bits, int32_t n_vocab)
{
    int32_t n = 0;
    /* SWAR: this build has no popcnt instruction, and libgcc's table
     * routine cost more than the walk on 262k-token masks */
    for (int32_t w = 0; w < (n_vocab + 31) / 32; w++) {
        uint32_t x = bits[w];
        x = x - ((x >> 1) & 0x55555555u);
        x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
        n += (int32_t)((((x + (x >> 4)) & 0x0F0F0F0Fu) * 0x01010101u) >> 24);
    }
    return n;
}

/* The smallest form of the mask in bits. NULL when out of memory. */
static g_mask *compress(const uint32_t *bits, int32_t n_vocab, int32_t n_allowed)
{
    int32_t words = (n_vocab + 31) / 32, refused = n_vocab - n_allowed;
    int32_t kind = M_BITS, n = words;
    if (n_allowed < n) { kind = M_ALLOW; n = n_allowed; }
    if (refused < n) { kind = M_DENY; n = refused; }
    g_mask *m = malloc(sizeof *m + sizeof(uint32_t) * (size_t)n);
    if (!m) return NULL;
    m->kind = kind;
    m->n = n;
    if (kind == M_BITS) {
        memcpy(m->data, bits, sizeof(uint32_t) * (size_t)words);
        return m;
    }
    int32_t k = 0;
    for (int32_t w = 0; w < words; w++) {
        uint32_t x = kind == M_ALLOW ? bits[w] : ~bits[w];
        while (x) {
            int32_t id = w * 32 + __builtin_ctz(x);
            x &= x - 1;
            if (id < n_vocab) m->data[k++] = (uint32_t)id;
        }
    }
    return m;
}

/* Masks are the one part of the automaton that can be dropped and
 * rebuilt: make room for b more bytes when they take more than half. */
static void room_for(g_dfa *d, int64_t b)
{
    if (d->mask_bytes + b > d->lim.max_bytes / 2) g_dfa_drop_masks(d, false);
}

static g_tmask *tmask_of(g_dfa *d, const g_trie *t, int32_t T, uint32_t *scratch);

/* ------------------------------------------------------------ counts */

/* B's counts for pos, made on first use and kept with B. */
static g_need *need_of(g_dfa *d, const g_trie *t, int32_t B, int32_t pos, bool with_roots)
{
    g_need *nd = d->states[B].need;
    if (nd && nd->pos == pos && nd->roots == with_roots) return nd;
    nd = g_need_walk(d, t, B, pos, with_roots);
    if (!nd) return NULL;
    int64_t b = (int64_t)g_need_bytes(nd);
    room_for(d, b);
    if (d->states[B].need) {
        int64_t ob = (int64_t)g_need_bytes(d->states[B].need);
        d->bytes -= ob;
        d->mask_bytes -= ob;
        g_need_free(d->states[B].need);
    }
    d->states[B].need = nd;
    d->bytes += b;
    d->mask_bytes += b;
    return nd;
}

/* below this K the inflated state's counts are used instead of a pruned
 * walk (a pruned walk of a larger K visits few nodes) */
#define G_NEED_BELOW 16

/* The tokens state X reads (into out, every word written; with rs, the
 * escape roots too, as tmask_of wants them). When X has an inflated state
 * (g_dfa_inflate), the tokens of at most K bytes are that state's (its
 * cached mask or tmask, shared along the whole count) and only subtrees
 * holding longer tokens are walked from X; else one walk of the trie. */
static int tokens_of(g_dfa *d, const g_trie *t, int32_t X, uint32_t *out, roots *rs)
{
    int32_t words = (t->n_vocab + 31) / 32, K = 0, n_allowed = 0;
    int32_t Xi = g_dfa_inflate(d, X, &K);
    if (Xi < 0) return -1;
    if (Xi == X) {
        memset(out, 0, sizeof *out * (size_t)words);
        return walk(d, t, X, 0, t->n_nodes, 0, out, &n_allowed, rs, 0);
    }
    if (K < G_NEED_BELOW && d->states[X].infl_pos >= 0) {
        int32_t r = d->states[X].infl_r;
        g_need *nd = need_of(d, t, Xi, d->states[X].infl_pos, rs != NULL);
        if (!nd) return -1;
        if (nd->ok) {
            for (int32_t w = 0; w < words; w++) {
                uint32_t bits = 0;
                const uint8_t *q = nd->tok + (size_t)w * 32;
                int32_t n = t->n_vocab - w * 32 < 32 ? t->n_vocab - w * 32 : 32;
                for (int32_t j = 0; j < n; j++) bits |= (uint32_t)(q[j] <= r) << j;
                out[w] = bits;
            }
            if (rs) {
                for (int32_t k = 0; k < nd->n_roots; k++)
                    if (nd->root_need[k] <= r) roots_push(rs, nd->root_node[k]);
                if (rs->oom) {
                    snprintf(d->err, sizeof d->err, "out of memory");
                    return -1;
                }
            }
            return 0;
        }
    }
    if (rs) {
        g_tmask *tm = tmask_of(d, t, Xi, out);
        if (!tm) return -1;
        /* copied before the walk below, which may drop cached masks */
        expand(tm->certain, t->n_vocab, out);
        for (int32_t k = 0; k < tm->n_roots; k++)
            if (t->maxlen[tm->roots[k]] <= K) roots_push(rs, tm->roots[k]);
        if (rs->oom) {
            snprintf(d->err, sizeof d->err, "out of memory");
            return -1;
        }
    } else {
        bool hit;
        if (g_mask_fill(d, t, Xi, out, &hit) < 0) return -1;
    }
    if (K <= G_SHORT_MAX) {
        const uint32_t *sb = t->short_bits + (size_t)(K - 1) * (size_t)words;
        for (int32_t w = 0; w < words; w++) out[w] &= sb[w];
    } else {
        for (int32_t k = 0; k < t->n_by_len && (int32_t)t->tok_len[t->by_len[k]] > K; k++)
            out[t->by_len[k] >> 5] &= ~(1u << (t->by_len[k] & 31));
    }
    return walk(d, t, X, 0, t->n_nodes, 0, out, &n_allowed, rs, K);
}

/* The truncated state T's certain tokens and escape roots, cached in T. */
static g_tmask *tmask_of(g_dfa *d, const g_trie *t, int32_t T, uint32_t *scratch)
{
    if (d->states[T].tmask) return d->states[T].tmask;
    roots rs = {0};
    if (tokens_of(d, t, T, scratch, &rs) < 0 || rs.oom) {
        if (rs.oom) snprintf(d->err, sizeof d->err, "out of memory");
        free(rs.r);
        return NULL;
    }
    g_tmask *tm = malloc(sizeof *tm + sizeof(int32_t) * (size_t)rs.n);
    g_mask *cm = compress(scratch, t->n_vocab, popcount_all(scratch, t->n_vocab));
    if (!tm || !cm) {
        free(tm);
        free(cm);
        free(rs.r);
        snprintf(d->err, sizeof d->err, "out of memory");
        return NULL;
    }
    tm->certain = cm;
    tm->n_roots = rs.n;
    if (rs.n) memcpy(tm->roots, rs.r, sizeof(int32_t) * (size_t)rs.n);
    free(rs.r);
    int64_t b = (int64_t)g_tmask_bytes(tm);
    room_for(d, b);
    d->states[T].tmask = tm;
    d->bytes += b;
    d->mask_bytes += b;
    return tm;
}

/* The full state at trie node i's parent: s stepped by the bytes above i;
 * -1 when s dies on the way, -3 on error. */
static int32_t state_above(g_dfa *d, const g_trie *t, int32_t s, int32_t i)
{
    uint8_t path[256], *p = path;
    int32_t dep = t->depth[i] - 1;
    if (dep > 256 && !(p = malloc((size_t)dep))) return -3;
    for (int32_t k = dep - 1, n = t->parent[i]; k >= 0; k--, n = t->parent[n]) p[k] = t->byte[n];
    for (int32_t k = 0; k < dep && s >= 0; k++) s = g_dfa_step(d, s, p[k]);
    if (p != path) free(p);
    return s;
}

int g_mask_fill(g_dfa *d, const g_trie *t, int32_t s, uint32_t *out, bool *hit)
{
    d->states[s].used = ++d->clock;
    if (d->states[s].mask) {
        expand(d->states[s].mask, t->n_vocab, out);
        *hit = true;
        return 0;
    }
    *hit = false;
    int32_t T = g_dfa_truncate(d, s);
    if (T < 0) return -1;
    if (T == s) {
        /* nothing was cut: the state's own tokens */
        if (tokens_of(d, t, s, out, NULL) < 0) return -1;
    } else {
        /* the truncated state's certain tokens (shared), then the subtrees
         * only this state's full stacks decide */
        bool shared = d->states[T].tmask != NULL;
        g_tmask *tm = tmask_of(d, t, T, out);
        if (!tm) return -1;
        d->states[T].used = d->clock;
        d->trunc_hits += shared;
        expand(tm->certain, t->n_vocab, out);
        /* the roots are copied: a walk may drop cached masks (tm with them) */
        int32_t n_roots = tm->n_roots, small[64], *rts = small;
        if (n_roots > 64 && !(rts = malloc(sizeof *rts * (size_t)n_roots))) {
            snprintf(d->err, sizeof d->err, "out of memory");
            return -1;
        }
        memcpy(rts, tm->roots, sizeof *rts * (size_t)n_roots);
        int st = 0;
        for (int32_t k = 0; k < n_roots && !st; k++) {
            int32_t i = rts[k], n_allowed = 0;
            int32_t a = state_above(d, t, s, i);
            if (a == -3) st = -1;
            else if (a >= 0) st = walk(d, t, a, i, t->skip[i], t->depth[i] - 1, out, &n_allowed, NULL, 0);
        }
        if (rts != small) free(rts);
        if (st < 0) return -1;
    }
    g_mask *m = compress(out, t->n_vocab, popcount_all(out, t->n_vocab));
    if (!m) return 0; /* served uncached */
    int64_t b = (int64_t)g_mask_bytes(m);
    room_for(d, b);
    d->states[s].mask = m;
    d->bytes += b;
    d->mask_bytes += b;
    return 0;
}
