/*
 * gram_ir.c: the grammar every spec compiles to (see gram.h): building it
 * (rules, alternatives, interned byte sets, code point classes as UTF-8
 * byte sequences and as written in JSON strings, repetition) and its
 * element limit.
 * Not for: the checks once it is built (gram_check.c), any text syntax
 * (gram_gbnf.c, gram_regex.c, gram_schema.c) or running the grammar
 * (gram_dfa.c).
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gram.h"

typedef struct g_cpmemo {
    uint32_t hash;
    int32_t json;     /* 1: the class as written in a JSON string */
    g_range *r;
    int32_t n;
    int32_t rule;
} g_cpmemo;

/* ------------------------------------------------------------ basics */

g_grammar *g_new(const g_limits *lim)
{
    g_grammar *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->lim = *lim;
    g->root = -1;
    return g;
}

void g_free(g_grammar *g)
{
    if (!g) return;
    for (int32_t i = 0; i < g->n_rules; i++) {
        free(g->rules[i].name);
        free(g->rules[i].alts);
    }
    for (int32_t i = 0; i < g->n_cpmemo; i++) free(g->cpmemo[i].r);
    free(g->cpmemo);
    free(g->rules);
    free(g->elems);
    free(g->sets);
    free(g->set_hash);
    free(g->name_hash);
    free(g->pos_rule);
    free(g);
}

int g_fail(g_grammar *g, const char *fmt, ...)
{
    if (g->failed) return -1;
    g->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->err, sizeof g->err, fmt, ap);
    va_end(ap);
    return -1;
}

bool g_grow(void **p, int32_t *cap, int32_t need, size_t elem)
{
    if (need <= *cap) return true;
    int64_t nc = *cap ? (int64_t)*cap * 2 : 16;
    while (nc < need) nc *= 2;
    if (nc > INT32_MAX) return false;
    void *np = realloc(*p, (size_t)nc * elem);
    if (!np) return false;
    *p = np;
    *cap = (int32_t)nc;
    return true;
}

/* ------------------------------------------------------------ rules */

static int32_t rule_add(g_grammar *g, char *name)
{
    if (!name) {
        g_fail(g, "out of memory");
        return -1;
    }
    if (!g_grow((void **)&g->rules, &g->cap_rules, g->n_rules + 1, sizeof *g->rules)) {
        free(name);
        g_fail(g, "out of memory");
        return -1;
    }
    g_rule *r = &g->rules[g->n_rules];
    memset(r, 0, sizeof *r);
    r->name = name;
    r->defined = true;
    return g->n_rules++;
}

int32_t g_rule_new(g_grammar *g, const char *fmt, ...)
{
    if (g->failed) return -1;
    char *name = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&name, fmt, ap);
    va_end(ap);
    return rule_add(g, n < 0 ? NULL : name);
}

static uint32_t fnv(const void *p, size_t n);

/* Named rules (GBNF) are found through an open-addressing table over rule
 * ids, so a grammar of many rules is not quadratic to read. */
static bool name_table_grow(g_grammar *g)
{
    int32_t nc = g->cap_name_hash ? g->cap_name_hash * 2 : 256;
    int32_t *nh = malloc(sizeof *nh * (size_t)nc);
    if (!nh) return false;
    for (int32_t i = 0; i < nc; i++) nh[i] = -1;
    for (int32_t i = 0; i < g->cap_name_hash; i++) {
        int32_t id = g->name_hash[i];
        if (id < 0) continue;
        uint32_t h = fnv(g->rules[id].name, strlen(g->rules[id].name)) & (uint32_t)(nc - 1);
        while (nh[h] >= 0) h = (h + 1) & (uint32_t)(nc - 1);
        nh[h] = id;
    }
    free(g->name_hash);
    g->name_hash = nh;
    g->cap_name_hash = nc;
    return true;
}

int32_t g_rule_named(g_grammar *g, const char *name, size_t len)
{
    if (g->failed) return -1;
    if ((g->n_named + 1) * 2 > g->cap_name_hash && !name_table_grow(g)) return g_fail(g, "out of memory");
    uint32_t h = fnv(name, len) & (uint32_t)(g->cap_name_hash - 1);
    while (g->name_hash[h] >= 0) {
        const char *nm = g->rules[g->name_hash[h]].name;
        if (strlen(nm) == len && memcmp(nm, name, len) == 0) return g->name_hash[h];
        h = (h + 1) & (uint32_t)(g->cap_name_hash - 1);
    }
    int32_t r = rule_add(g, strndup(name, len));
    if (r < 0) return -1;
    g->rules[r].defined = false;
    g->name_hash[h] = r;
    g->n_named++;
    return r;
}

void g_rule_alt(g_grammar *g, int32_t rule, g_seq *s)
{
    if (g->failed || rule < 0) goto out;
    if ((int64_t)g->n_elems + s->n + 1 > g->lim.max_elems) {
        g_fail(g, "the spec is too large: its grammar needs more than %lld elements (the "
               "engine's limit, constraint.grammar max_elements)", (long long)g->lim.max_elems);
        goto out;
    }
    g_rule *r = &g->rules[rule];
    if (!g_grow((void **)&g->elems, &g->cap_elems, g->n_elems + s->n + 1, sizeof *g->elems) ||
        !g_grow((void **)&r->alts, &r->cap_alts, r->n_alts + 1, sizeof *r->alts)) {
        g_fail(g, "out of memory");
        goto out;
    }
    r->alts[r->n_alts++] = g->n_elems;
    if (s->n) memcpy(g->elems + g->n_elems, s->e, sizeof *s->e * (size_t)s->n);
    g->n_elems += s->n;
    g->elems[g->n_elems++] = (g_elem){G_END, 0};
out:
    s->n = 0;
}

/* ------------------------------------------------------------ sequences */

void g_seq_free(g_seq *s)
{
    free(s->e);
    memset(s, 0, sizeof *s);
}

static void seq_push(g_grammar *g, g_seq *s, int32_t kind, int32_t arg)
{
    if (g->failed) return;
    if (s->n >= g->lim.max_elems) {
        g_fail(g, "the spec is too large: one sequence of its grammar has more than %lld "
               "elements (constraint.grammar max_elements)", (long long)g->lim.max_elems);
        return;
    }
    if (!g_grow((void **)&s->e, &s->cap, s->n + 1, sizeof *s->e)) {
        g_fail(g, "out of memory");
        return;
    }
    s->e[s->n++] = (g_elem){kind, arg};
}

static uint32_t fnv(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 16777619u;
    return h;
}

/* The id of an equal set, or a new one. */
static int32_t set_intern(g_grammar *g, const uint8_t set[32])
{
    if (g->failed) return -1;
    if ((int64_t)(g->n_sets + 1) * 2 > g->cap_set_hash) {
        int32_t nc = g->cap_set_hash ? g->cap_set_hash * 2 : 256;
        int32_t *nh = malloc(sizeof *nh * (size_t)nc);
        if (!nh) return g_fail(g, "out of memory");
        for (int32_t i = 0; i < nc; i++) nh[i] = -1;
        for (int32_t i = 0; i < g->n_sets; i++) {
            uint32_t h = fnv(g->sets[i], 32) & (uint32_t)(nc - 1);
            while (nh[h] >= 0) h = (h + 1) & (uint32_t)(nc - 1);
            nh[h] = i;
        }
        free(g->set_hash);
        g->set_hash = nh;
        g->cap_set_hash = nc;
    }
    uint32_t h = fnv(set, 32) & (uint32_t)(g->cap_set_hash - 1);
    while (g->set_hash[h] >= 0) {
        if (memcmp(g->sets[g->set_hash[h]], set, 32) == 0) return g->set_hash[h];
        h = (h + 1) & (uint32_t)(g->cap_set_hash - 1);
    }
    if (!g_grow((void **)&g->sets, &g->cap_sets, g->n_sets + 1, sizeof *g->sets))
        return g_fail(g, "out of memory");
    memcpy(g->sets[g->n_sets], set, 32);
    g->set_hash[h] = g->n_sets;
    return g->n_sets++;
}

void g_seq_set(g_grammar *g, g_seq *s, const uint8_t set[32])
{
    int32_t id = set_intern(g, set);
    if (id >= 0) seq_push(g, s, G_SET, id);
}

void g_seq_byte(g_grammar *g, g_seq *s, uint8_t b)
{
    uint8_t set[32] = {0};
    set[b >> 3] |= (uint8_t)(1u << (b & 7));
    g_seq_set(g, s, set);
}

void g_seq_lit(g_grammar *g, g_seq *s, const char *bytes, size_t n)
{
    for (size_t i = 0; i < n; i++) g_seq_byte(g, s, (uint8_t)bytes[i]);
}

void g_seq_append(g_grammar *g, g_seq *dst, const g_seq *src)
{
    for (int32_t i = 0; i < src->n; i++) seq_push(g, dst, src->e[i].kind, src->e[i].arg);
}

void g_seq_ref(g_grammar *g, g_seq *s, int32_t rule)
{
    if (rule < 0) {
        g_fail(g, "internal: a reference to no rule");
        return;
    }
    g->rules[rule].used = true;
    seq_push(g, s, G_RULE, rule);
}

int32_t g_rule_lit(g_grammar *g, const char *name, const char *bytes, size_t n)
{
    int32_t r = g_rule_new(g, "%s", name);
    g_seq s = {0};
    g_seq_lit(g, &s, bytes, n);
    g_rule_alt(g, r, &s);
    g_seq_free(&s);
    return r;
}

/* ------------------------------------------------------------ classes */

int g_utf8_put(uint32_t cp, char *o)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int range_cmp(const void *a, const void *b)
{
    const g_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo ? 1 : 0;
}

int32_t g_ranges_norm(g_range *r, int32_t n)
{
    /* surrogates are not characters: D800..DFFF is cut out of every range,
     * which may split one in two (r has room for 2n entries) */
    if (n <= 0) return 0;
    g_range *t = malloc(sizeof *t * (size_t)(2 * n));
    if (!t) return -1;
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        uint32_t lo = r[i].lo, hi = r[i].hi > G_MAX_CP ? G_MAX_CP : r[i].hi;
        if (lo > hi) continue;
        if (lo < 0xD800) t[m++] = (g_range){lo, hi < 0xD7FF ? hi : 0xD7FF};
        if (hi > 0xDFFF) t[m++] = (g_range){lo > 0xE000 ? lo : 0xE000, hi};
    }
    if (!m) {
        free(t);
        return 0;
    }
    qsort(t, (size_t)m, sizeof *t, range_cmp);
    int32_t w = 0;
    for (int32_t i = 1; i < m; i++) {
        if (t[i].lo <= t[w].hi + 1) {
            if (t[i].hi > t[w].hi) t[w].hi = t[i].hi;
        } else {
            t[++w] = t[i];
        }
    }
    memcpy(r, t, sizeof *t * (size_t)(w + 1));
    free(t);
    return w + 1;
}

int32_t g_ranges_complement(const g_range *r, int32_t n, g_range *out)
{
    int32_t k = 0;
    uint32_t next = 0;
    for (int32_t i = 0; i < n; i++) {
        if (r[i].lo > next) out[k++] = (g_range){next, r[i].lo - 1};
        next = r[i].hi + 1;
    }
    if (next <= G_MAX_CP) out[k++] = (g_range){next, G_MAX_CP};
    return k;
}

/* One alternative per run of code points whose UTF-8 forms differ only in
 * byte ranges that vary independently: [lo, hi] all of encoded length len. */
static void utf8_split(g_grammar *g, int32_t rule, uint32_t lo, uint32_t hi, int len)
{
    if (g->failed) return;
    for (int i = 1; i < len; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) {
                utf8_split(g, rule, lo, lo | m, len);
                utf8_split(g, rule, (lo | m) + 1, hi, len);
                return;
            }
            if ((hi & m) != m) {
                utf8_split(g, rule, lo, (hi & ~m) - 1, len);
                utf8_split(g, rule, hi & ~m, hi, len);
                return;
            }
        }
    }
    char a[4], b[4];
    g_utf8_put(lo, a);
    g_utf8_put(hi, b);
    g_seq s = {0};
    for (int k = 0; k < len; k++) {
        uint8_t set[32] = {0};
        for (unsigned c = (uint8_t)a[k]; c <= (uint8_t)b[k]; c++) set[c >> 3] |= (uint8_t)(1u << (c & 7));
        g_seq_set(g, &s, set);
    }
    g_rule_alt(g, rule, &s);
    g_seq_free(&s);
}

/* A normalized copy of ranges[0..*n) with room for 2 * *n + extra ranges
 * (what g_ranges_norm and the callers' splitting need); *n becomes its
 * count. NULL with the grammar failed when memory runs out. */
static g_range *ranges_normed(g_grammar *g, const g_range *ranges, int32_t *n, int32_t extra)
{
    g_range *r = malloc(sizeof *r * (size_t)(2 * *n + extra));
    if (!r) {
        g_fail(g, "out of memory");
        return NULL;
    }
    memcpy(r, ranges, sizeof *r * (size_t)*n);
    *n = g_ranges_norm(r, *n);
    if (*n < 0) {
        free(r);
        g_fail(g, "out of memory");
        return NULL;
    }
    return r;
}

/* Classes already made into rules, so an equal class (normalized
 * r[0..n), plain or as JSON text) reuses its rule instead of growing the
 * grammar again: true when it did (s refers to that rule, r is freed);
 * else false with *h the class's hash for cpmemo_add. */
static bool cpmemo_use(g_grammar *g, g_seq *s, int json, g_range *r, int32_t n, uint32_t *h)
{
    *h = fnv(r, sizeof *r * (size_t)n);
    for (int32_t i = 0; i < g->n_cpmemo; i++) {
        const g_cpmemo *m = &g->cpmemo[i];
        if (m->hash == *h && !m->json == !json && m->n == n && !memcmp(m->r, r, sizeof *r * (size_t)n)) {
            free(r);
            g_seq_ref(g, s, m->rule);
            return true;
        }
    }
    return false;
}

/* Records rule as the class r (the memo takes r); false with the grammar
 * failed (and r freed) when memory runs out. */
static bool cpmemo_add(g_grammar *g, uint32_t h, int json, g_range *r, int32_t n, int32_t rule)
{
    if (!g_grow((void **)&g->cpmemo, &g->cap_cpmemo, g->n_cpmemo + 1, sizeof *g->cpmemo)) {
        free(r);
        g_fail(g, "out of memory");
        return false;
    }
    g->cpmemo[g->n_cpmemo++] = (g_cpmemo){h, json, r, n, rule};
    return true;
}

void g_seq_cpclass(g_grammar *g, g_seq *s, const g_range *ranges, int32_t n)
{
    if (g->failed) return;
    g_range *r = ranges_normed(g, ranges, &n, 1);
    if (!r) return;
    if (n == 0 || r[n - 1].hi < 0x80) {
        /* ASCII only (or empty: an element that never matches, which
         * g_finish treats as unable to finish) */
        uint8_t set[32] = {0};
        for (int32_t i = 0; i < n; i++)
            for (uint32_t c = r[i].lo; c <= r[i].hi; c++) set[c >> 3] |= (uint8_t)(1u << (c & 7));
        g_seq_set(g, s, set);
        free(r);
        return;
    }
    uint32_t h;
    if (cpmemo_use(g, s, 0, r, n, &h)) return;
    int32_t rule = g_rule_new(g, "char-class-%d", g->anon++);
    /* ASCII part as one set, then each encoded length apart */
    uint8_t set[32] = {0};
    bool any_ascii = false;
    static const uint32_t bounds[4][2] = {{0x80, 0x7FF}, {0x800, 0xFFFF}, {0x10000, G_MAX_CP}, {0, 0}};
    for (int32_t i = 0; i < n; i++) {
        for (uint32_t c = r[i].lo; c <= r[i].hi && c < 0x80; c++) {
            set[c >> 3] |= (uint8_t)(1u << (c & 7));
            any_ascii = true;
        }
        for (int k = 0; k < 3; k++) {
            uint32_t lo = r[i].lo > bounds[k][0] ? r[i].lo : bounds[k][0];
            uint32_t hi = r[i].hi < bounds[k][1] ? r[i].hi : bounds[k][1];
            if (lo <= hi) utf8_split(g, rule, lo, hi, k + 2);
        }
    }
    if (any_ascii) {
        g_seq a = {0};
        g_seq_set(g, &a, set);
        g_rule_alt(g, rule, &a);
        g_seq_free(&a);
    }
    if (cpmemo_add(g, h, 0, r, n, rule)) g_seq_ref(g, s, rule);
}

/* The one escape JSON text uses here for a character it must escape. */
static int json_escape(uint32_t c, char *out)
{
    switch (c) {
    case '"': memcpy(out, "\\\"", 2); return 2;
    case '\\': memcpy(out, "\\\\", 2); return 2;
    case '\b': memcpy(out, "\\b", 2); return 2;
    case '\f': memcpy(out, "\\f", 2); return 2;
    case '\n': memcpy(out, "\\n", 2); return 2;
    case '\r': memcpy(out, "\\r", 2); return 2;
    case '\t': memcpy(out, "\\t", 2); return 2;
    default: return snprintf(out, 8, "\\u%04x", c);
    }
}

void g_seq_jsonclass(g_grammar *g, g_seq *s, const g_range *ranges, int32_t n)
{
    if (g->failed) return;
    g_range *r = ranges_normed(g, ranges, &n, 4);
    if (!r) return;
    /* which of the characters JSON escapes are in the class */
    bool esc[0x5D] = {false};
    bool any_esc = false;
    for (int32_t i = 0; i < n; i++)
        for (uint32_t c = r[i].lo; c <= r[i].hi && c < 0x5D; c++)
            if (c < 0x20 || c == '"' || c == '\\') esc[c] = any_esc = true;
    if (!any_esc) {
        g_seq_cpclass(g, s, r, n);
        free(r);
        return;
    }
    uint32_t h;
    if (cpmemo_use(g, s, 1, r, n, &h)) return;
    int32_t rule = g_rule_new(g, "json-char-class-%d", g->anon++);
    /* the class without what JSON escapes, as itself */
    g_range *safe = malloc(sizeof *safe * (size_t)(2 * n + 8));
    if (!safe) {
        free(r);
        g_fail(g, "out of memory");
        return;
    }
    int32_t ns = 0;
    static const g_range cut[] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    for (int32_t i = 0; i < n; i++) {
        /* r[i] minus the three cut ranges (sorted, disjoint) */
        uint32_t lo = r[i].lo;
        for (int k = 0; k < 3 && lo <= r[i].hi; k++) {
            if (cut[k].hi < lo || cut[k].lo > r[i].hi) continue;
            if (cut[k].lo > lo) safe[ns++] = (g_range){lo, cut[k].lo - 1};
            lo = cut[k].hi + 1;
        }
        if (lo <= r[i].hi) safe[ns++] = (g_range){lo, r[i].hi};
    }
    g_seq a = {0};
    if (ns) {
        g_seq_cpclass(g, &a, safe, ns);
        g_rule_alt(g, rule, &a);
    }
    free(safe);
    for (uint32_t c = 0; c < 0x5D; c++) {
        if (!esc[c]) continue;
        char e[8];
        int l = json_escape(c, e);
        g_seq_lit(g, &a, e, (size_t)l);
        g_rule_alt(g, rule, &a);
    }
    g_seq_free(&a);
    if (cpmemo_add(g, h, 1, r, n, rule)) g_seq_ref(g, s, rule);
}

/* ------------------------------------------------------------ repetition */

int32_t g_rule_opt(g_grammar *g, int32_t item)
{
    int32_t r = g_rule_new(g, "%s?", item >= 0 ? g->rules[item].name : "?");
    g_seq s = {0};
    g_seq_ref(g, &s, item);
    g_rule_alt(g, r, &s);
    g_rule_alt(g, r, &s); /* the empty alternative */
    g_seq_free(&s);
    return r;
}

int32_t g_rule_repeat(g_grammar *g, int32_t item, int32_t min, int32_t max)
{
    if (g->failed || item < 0) return -1;
    if (max >= 0 && max < min) {
        g_fail(g, "a repetition of '%s' from %d to %d times: the maximum is below the minimum",
               g->rules[item].name, min, max);
        return -1;
    }
    /* the tail: item* as a right recursion (a tail call, so the stack does
     * not grow per repetition), or (max - min) nested optional items */
    int32_t tail = -1;
    g_seq s = {0};
    if (max < 0) {
        tail = g_rule_new(g, "%s*", g->rules[item].name);
        g_seq_ref(g, &s, item);
        g_seq_ref(g, &s, tail);
        g_rule_alt(g, tail, &s);
        g_rule_alt(g, tail, &s);
    } else {
        int32_t first = -1, end = -1;
        /* O_1 = item end | "" with end the empty rule: the last item gets a
         * frame too (it would be a tail call), so every parse inside the
         * chain shows its count (gram_mask.c's counts) */
        if (max - min >= 1) {
            end = g_rule_new(g, "%s{end}", g->rules[item].name);
            g_rule_alt(g, end, &s);
        }
        for (int32_t k = 1; k <= max - min && !g->failed; k++) {
            int32_t o = g_rule_new(g, "%s{0,%d}", g->rules[item].name, k);
            g_seq_ref(g, &s, item);
            g_seq_ref(g, &s, tail >= 0 ? tail : end);
            g_rule_alt(g, o, &s);
            g_rule_alt(g, o, &s);
            if (o < 0) break;
            if (k == 1) first = o;
            /* O_k = first + k - 1: made one after the other, nothing between */
            if (o == first + k - 1) {
                g->rules[o].rep_kind = 1;
                g->rules[o].rep_a = first;
                g->rules[o].rep_b = k;
            }
            tail = o;
        }
        /* the chain's length, for g_dfa_inflate: O_1 .. O_n made one after the other */
        int32_t n = 0;
        while (first >= 0 && first + n <= tail && g->rules[first + n].rep_kind == 1 &&
               g->rules[first + n].rep_a == first && g->rules[first + n].rep_b == n + 1)
            n++;
        for (int32_t k = 0; k < n; k++) g->rules[first + k].rep_n = n;
    }
    int32_t r = g_rule_new(g, "%s{%d,%d}", g->rules[item].name, min, max);
    if (r >= 0 && min > 0) {
        g->rules[r].rep_kind = 2;
        g->rules[r].rep_a = min;
    }
    for (int32_t k = 0; k < min && !g->failed; k++) g_seq_ref(g, &s, item);
    if (tail >= 0) g_seq_ref(g, &s, tail);
    g_rule_alt(g, r, &s);
    g_seq_free(&s);
    return g->failed ? -1 : r;
}
