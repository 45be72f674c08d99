/*
 * grammar.c: the built-in constraint engine, constraint-grammar.so. Every
 * spec (JSON Schema, json_object, GBNF-style grammar, regex, choice)
 * compiles to one grammar over bytes (gram_ir.c), run as a lazily
 * determinized pushdown automaton (gram_dfa.c) whose states keep their
 * token masks (gram_mask.c); masks are shared between states that look
 * alike near the top of their stacks (the items of an array, the same
 * schema in many places), and only tokens that reach below that are
 * checked per state.
 *
 * Compiled specs are cached by their text (type, strict, bytes), so a
 * schema sent with every request is compiled once and its automaton, with
 * the masks its states have met, serves every request after the first. A
 * compiled spec is reference counted: the cache holds one reference, each
 * compile() result and each matcher one more. An automaton that grows past
 * half its memory limit is retired from the cache (requests using it go
 * on; the next request compiles afresh), so a long-lived server does not
 * accumulate the states of every JSON document it ever wrote.
 *
 * Locks: ctx->mu guards the cache and the counters; each compiled spec's
 * mu guards its automaton (masks, transitions). Never both at once.
 * Not for: where the mask is applied (the core) or the grammar itself.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gram.h"
#include "pagoda/pagoda.h"

typedef struct compiled {
    int refs;                  /* under ctx->mu */
    uint64_t hash;
    int32_t type;
    bool strict;
    char *text;
    size_t len;
    g_grammar *g;
    g_dfa *d;
    int32_t start;
    pthread_mutex_t mu;        /* the automaton */
    bool in_cache;
    struct compiled *prev, *next; /* the cache, most recent first */
} compiled;

typedef struct matcher {
    compiled *c;
    int32_t state;
} matcher;

typedef struct gctx {
    const pagoda_host *host;
    g_trie *trie;
    int32_t n_vocab;
    /* the control tokens that write markup (pagoda_constraint_vocab.control):
     * ids, texts (the trie's copies) and lengths, for <token> references */
    int32_t *ctl;
    const char **ctl_text;
    uint32_t *ctl_len;
    int32_t n_ctl;
    uint8_t *is_ctl;           /* [n_vocab] 1: control (ctl), 2: its bytes hold G_CTL_MARK */
    int32_t *marked;           /* the tokens of value 2: never allowed under a <token> reference */
    int32_t n_marked;
    g_limits lim;
    g_dfa_limits dlim;
    int64_t max_spec_bytes;
    int32_t cache_entries;
    bool plain_masks;
    pthread_mutex_t mu;
    compiled *head;
    int32_t n_cache;
    pagoda_constraint_stats st;
} gctx;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void set_err(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t n, const char *fmt, ...)
{
    if (!err || !n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------ the plugin */

static const pagoda_config_key keys[] = {
    {"max_spec_bytes", PAGODA_KEY_SIZE, "256K", 1024, 64.0 * 1048576,
     "largest spec text (schema, grammar, regex) accepted; larger ones are refused (400)"},
    {"max_elements", PAGODA_KEY_INT, "2000000", 1000, 1e9,
     "grammar elements one spec may compile to (bounds compile time and memory)"},
    {"max_depth", PAGODA_KEY_INT, "128", 4, 10000, "nesting depth of a spec's own structure"},
    {"max_states", PAGODA_KEY_INT, "200000", 100, 1e9, "automaton states of one compiled spec"},
    {"max_stacks", PAGODA_KEY_INT, "4096", 16, 1e7, "parses one automaton state may hold (ambiguity)"},
    {"max_automaton_bytes", PAGODA_KEY_SIZE, "256M", 1048576, 1e13,
     "memory of one compiled spec's automaton and masks; half of it retires the spec from the cache"},
    {"cache_entries", PAGODA_KEY_INT, "64", 0, 1e6, "compiled specs kept for reuse"},
    {"trunc_depth", PAGODA_KEY_INT, "3", 0, 64,
     "stack frames a shared mask looks at (0: a mask per full parse state only)"},
    {"count_sharing", PAGODA_KEY_BOOL, "true", 0, 0,
     "the remaining counts of a bounded repetition (a maxLength string) share one mask for the "
     "tokens too short to tell them apart"},
    {"plain_masks", PAGODA_KEY_BOOL, "false", 0, 0,
     "every mask one walk of the whole vocabulary, no cache or sharing (for tests and measurements)"},
    {NULL, 0, NULL, 0, 0, NULL},
};

static int create(const pagoda_host *h, void **out, char *err, size_t err_len)
{
    gctx *c = calloc(1, sizeof *c);
    if (!c) {
        set_err(err, err_len, "out of memory");
        return PAGODA_ERR_NOMEM;
    }
    c->host = h;
    c->max_spec_bytes = h ? h->config_int(h, "max_spec_bytes", 256 * 1024) : 256 * 1024;
    c->lim.max_elems = h ? h->config_int(h, "max_elements", 2000000) : 2000000;
    c->lim.max_depth = (int32_t)(h ? h->config_int(h, "max_depth", 128) : 128);
    c->dlim.max_states = (int32_t)(h ? h->config_int(h, "max_states", 200000) : 200000);
    c->dlim.max_stacks = (int32_t)(h ? h->config_int(h, "max_stacks", 4096) : 4096);
    c->dlim.max_bytes = h ? h->config_int(h, "max_automaton_bytes", 256ll << 20) : 256ll << 20;
    c->cache_entries = (int32_t)(h ? h->config_int(h, "cache_entries", 64) : 64);
    c->dlim.trunc_depth = (int32_t)(h ? h->config_int(h, "trunc_depth", 3) : 3);
    c->dlim.inflate = h ? h->config_bool(h, "count_sharing", true) : true;
    c->plain_masks = h ? h->config_bool(h, "plain_masks", false) : false;
    pthread_mutex_init(&c->mu, NULL);
    c->st.struct_size = sizeof c->st;
    *out = c;
    return PAGODA_OK;
}

static void compiled_destroy(compiled *k)
{
    g_dfa_free(k->d);
    g_free(k->g);
    free(k->text);
    pthread_mutex_destroy(&k->mu);
    free(k);
}

/* Drops one reference; the caller holds ctx->mu. Returns k when it is now
 * unreferenced (the caller destroys it after unlocking). */
static compiled *unref_locked(compiled *k) { return --k->refs == 0 ? k : NULL; }

static void cache_unlink_locked(gctx *c, compiled *k)
{
    if (!k->in_cache) return;
    if (k->prev) k->prev->next = k->next;
    else c->head = k->next;
    if (k->next) k->next->prev = k->prev;
    k->prev = k->next = NULL;
    k->in_cache = false;
    c->n_cache--;
}

static void destroy(void *ctx)
{
    gctx *c = ctx;
    while (c->head) {
        compiled *k = c->head;
        cache_unlink_locked(c, k);
        if (unref_locked(k)) compiled_destroy(k);
    }
    g_trie_free(c->trie);
    free(c->ctl);
    free(c->ctl_text);
    free(c->ctl_len);
    free(c->is_ctl);
    free(c->marked);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static int set_vocab(void *ctx, const pagoda_constraint_vocab *v, char *err, size_t err_len)
{
    gctx *c = ctx;
    if (!v || v->n_vocab <= 0 || !v->bytes || !v->len) {
        set_err(err, err_len, "no vocabulary");
        return PAGODA_ERR_INVALID;
    }
    g_trie *t = g_trie_new(v->n_vocab, v->bytes, v->len);
    if (!t) {
        set_err(err, err_len, "out of memory building the token trie of %d tokens", v->n_vocab);
        return PAGODA_ERR_NOMEM;
    }
    const uint8_t *ctl = v->struct_size >= offsetof(pagoda_constraint_vocab, control) + sizeof v->control
                             ? v->control : NULL;
    int32_t n_ctl = 0;
    for (int32_t i = 0; ctl && i < v->n_vocab; i++) n_ctl += ctl[i] && v->len[i];
    int32_t *ids = malloc(sizeof *ids * (size_t)(n_ctl + 1));
    const char **txt = malloc(sizeof *txt * (size_t)(n_ctl + 1));
    uint32_t *len = malloc(sizeof *len * (size_t)(n_ctl + 1));
    uint8_t *is = calloc((size_t)v->n_vocab, 1);
    int32_t n_marked = 0;
    for (int32_t i = 0; i < v->n_vocab; i++)
        n_marked += v->len[i] && memchr(v->bytes[i], G_CTL_MARK, v->len[i]) != NULL;
    int32_t *marked = malloc(sizeof *marked * (size_t)(n_marked + 1));
    if (!ids || !txt || !len || !is || !marked) {
        free(marked);
        free(ids);
        free(txt);
        free(len);
        free(is);
        g_trie_free(t);
        set_err(err, err_len, "out of memory listing the control tokens");
        return PAGODA_ERR_NOMEM;
    }
    n_ctl = 0;
    for (int32_t i = 0; ctl && i < v->n_vocab; i++) {
        if (!ctl[i] || !v->len[i]) continue;
        ids[n_ctl] = i;
        txt[n_ctl] = t->tok_bytes[i];
        len[n_ctl++] = v->len[i];
        is[i] = 1;
    }
    /* byte 0xFF is in no UTF-8 text, so today only a reference reads it: a
     * token that writes it (a byte token) may not start that reading */
    n_marked = 0;
    for (int32_t i = 0; i < v->n_vocab; i++) {
        if (!v->len[i] || !memchr(v->bytes[i], G_CTL_MARK, v->len[i])) continue;
        marked[n_marked++] = i;
        is[i] = 2;
    }
    g_trie_free(c->trie);
    free(c->ctl);
    free(c->ctl_text);
    free(c->ctl_len);
    free(c->is_ctl);
    free(c->marked);
    c->marked = marked;
    c->n_marked = n_marked;
    c->trie = t;
    c->n_vocab = v->n_vocab;
    c->ctl = ids;
    c->ctl_text = txt;
    c->ctl_len = len;
    c->n_ctl = n_ctl;
    c->is_ctl = is;
    return PAGODA_OK;
}

/* ------------------------------------------------------------ compiling */

static uint64_t key_hash(int32_t type, bool strict, const char *text, size_t len)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)type ^ ((uint64_t)strict << 8);
    for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t)text[i]) * 1099511628211ull;
    return h;
}

static compiled *cache_find_locked(gctx *c, uint64_t h, int32_t type, bool strict, const char *text,
                                   size_t len)
{
    for (compiled *k = c->head; k; k = k->next)
        if (k->hash == h && k->type == type && k->strict == strict && k->len == len &&
            (len == 0 || memcmp(k->text, text, len) == 0))
            return k;
    return NULL;
}

/* choice: a JSON array of strings, the output one of them */
static int choice_root(g_grammar *g, const char *text, size_t len)
{
    json_error_t je;
    json_t *a = json_loadb(text, len, JSON_DECODE_ANY, &je);
    if (!a) return g_fail(g, "choice: not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    int st = 0;
    if (!json_is_array(a) || json_array_size(a) == 0) {
        st = g_fail(g, "choice: must be a non-empty list of strings");
    } else {
        g->root = g_rule_new(g, "choice");
        size_t i;
        json_t *s;
        g_seq sq = {0};
        json_array_foreach(a, i, s) {
            if (!json_is_string(s)) {
                st = g_fail(g, "choice: entry %zu is not a string", i);
                break;
            }
            g_seq_lit(g, &sq, json_string_value(s), json_string_length(s));
            g_rule_alt(g, g->root, &sq);
        }
        g_seq_free(&sq);
    }
    json_decref(a);
    return st;
}

static int schema_root(g_grammar *g, const char *text, size_t len, bool strict)
{
    json_error_t je;
    json_t *doc = json_loadb(text, len, JSON_DECODE_ANY, &je);
    if (!doc)
        return g_fail(g, "the schema is not valid JSON: %s (line %d, column %d)", je.text, je.line,
                      je.column);
    g->root = g_schema_rule(g, doc, doc, strict, "#");
    json_decref(doc);
    return g->root < 0 ? -1 : 0;
}

static g_grammar *build(gctx *c, const pagoda_constraint_spec *sp)
{
    g_grammar *g = g_new(&c->lim);
    if (!g) return NULL;
    g->ctl_text = c->ctl_text;
    g->ctl_len = c->ctl_len;
    g->n_ctl = c->n_ctl;
    const char *text = sp->text ? sp->text : "";
    switch (sp->type) {
    case PAGODA_CONSTRAINT_JSON_OBJECT: g->root = g_json_object_rule(g); break;
    case PAGODA_CONSTRAINT_JSON_SCHEMA: schema_root(g, text, sp->len, sp->strict); break;
    case PAGODA_CONSTRAINT_GRAMMAR: g_parse_gbnf(g, text, sp->len, sp->strict); break;
    case PAGODA_CONSTRAINT_REGEX: g->root = g_regex_rule(g, text, sp->len, G_RE_WHOLE, ""); break;
    case PAGODA_CONSTRAINT_CHOICE: choice_root(g, text, sp->len); break;
    default: g_fail(g, "unknown constraint type %d", sp->type); break;
    }
    if (!g->failed) g_finish(g);
    return g;
}

static int compile(void *ctx, const pagoda_constraint_spec *sp, void **out, char *err, size_t err_len)
{
    gctx *c = ctx;
    *out = NULL;
    const char *text = sp->text ? sp->text : "";
    size_t len = sp->text ? sp->len : 0;
    const char *tn = pagoda_constraint_type_name(sp->type);
    if (!c->trie) {
        set_err(err, err_len, "the constraint engine has no vocabulary yet");
        return PAGODA_ERR_STATE;
    }
    if ((int64_t)len > c->max_spec_bytes) {
        pthread_mutex_lock(&c->mu);
        c->st.compile_errors++;
        pthread_mutex_unlock(&c->mu);
        set_err(err, err_len, "%s: the spec is %zu bytes, more than the limit of %lld "
                "(constraint.grammar max_spec_bytes)", tn, len, (long long)c->max_spec_bytes);
        return PAGODA_ERR_INVALID;
    }
    uint64_t h = key_hash(sp->type, sp->strict, text, len);
    pthread_mutex_lock(&c->mu);
    compiled *k = cache_find_locked(c, h, sp->type, sp->strict, text, len);
    if (k) {
        k->refs++;
        /* most recent first */
        cache_unlink_locked(c, k);
        k->next = c->head;
        if (c->head) c->head->prev = k;
        c->head = k;
        k->in_cache = true;
        c->n_cache++;
        c->st.compile_cache_hits++;
        pthread_mutex_unlock(&c->mu);
        *out = k;
        return PAGODA_OK;
    }
    pthread_mutex_unlock(&c->mu);

    double t0 = now_s();
    int st = PAGODA_OK;
    k = calloc(1, sizeof *k);
    if (!k || !(k->text = malloc(len + 1))) {
        free(k);
        set_err(err, err_len, "out of memory");
        return PAGODA_ERR_NOMEM;
    }
    memcpy(k->text, text, len);
    k->text[len] = 0;
    k->len = len;
    k->hash = h;
    k->type = sp->type;
    k->strict = sp->strict;
    k->refs = 1;
    k->start = -1;
    pthread_mutex_init(&k->mu, NULL);
    k->g = build(c, sp);
    if (!k->g) {
        set_err(err, err_len, "out of memory");
        st = PAGODA_ERR_NOMEM;
    } else if (k->g->failed) {
        set_err(err, err_len, "%s: %s", tn, k->g->err);
        st = PAGODA_ERR_INVALID;
    } else if (!(k->d = g_dfa_new(k->g, &(g_dfa_limits){
                     .max_states = c->dlim.max_states, .max_stacks = c->dlim.max_stacks,
                     .max_bytes = c->dlim.max_bytes, .trunc_depth = c->dlim.trunc_depth,
                     .horizon = c->trie->max_depth, .inflate = c->dlim.inflate}))) {
        set_err(err, err_len, "out of memory");
        st = PAGODA_ERR_NOMEM;
    } else if ((k->start = g_dfa_start(k->d)) < 0) {
        set_err(err, err_len, "%s: %s", tn, k->d->err);
        st = PAGODA_ERR_INVALID;
    }
    double dt = now_s() - t0;
    pthread_mutex_lock(&c->mu);
    c->st.compile_seconds += dt;
    if (st) {
        c->st.compile_errors++;
        pthread_mutex_unlock(&c->mu);
        compiled_destroy(k);
        return st;
    }
    c->st.compiles++;
    /* another thread may have compiled the same text meanwhile: keep one */
    compiled *other = cache_find_locked(c, h, sp->type, sp->strict, text, len);
    compiled *dead = NULL;
    if (other) {
        other->refs++;
        pthread_mutex_unlock(&c->mu);
        compiled_destroy(k);
        *out = other;
        return PAGODA_OK;
    }
    if (c->cache_entries > 0) {
        k->refs++;
        k->next = c->head;
        if (c->head) c->head->prev = k;
        c->head = k;
        k->in_cache = true;
        c->n_cache++;
        if (c->n_cache > c->cache_entries) {
            compiled *last = c->head;
            while (last->next) last = last->next;
            cache_unlink_locked(c, last);
            dead = unref_locked(last);
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (dead) compiled_destroy(dead);
    if (c->host)
        c->host->log(c->host, PAGODA_LOG_DEBUG, "compiled a %s spec of %zu bytes in %.2f ms: %d rules, "
                     "%d elements", tn, len, dt * 1e3, k->g->n_rules, k->g->n_elems);
    *out = k;
    return PAGODA_OK;
}

static void compiled_release(gctx *c, compiled *k)
{
    if (!k) return;
    pthread_mutex_lock(&c->mu);
    compiled *dead = unref_locked(k);
    pthread_mutex_unlock(&c->mu);
    if (dead) compiled_destroy(dead);
}

static void compiled_free(void *ctx, void *p) { compiled_release(ctx, p); }

/* ------------------------------------------------------------ matchers */

static int matcher_new(void *ctx, void *comp, void **out, char *err, size_t err_len)
{
    gctx *c = ctx;
    compiled *k = comp;
    matcher *m = calloc(1, sizeof *m);
    if (!m) {
        set_err(err, err_len, "out of memory");
        return PAGODA_ERR_NOMEM;
    }
    pthread_mutex_lock(&c->mu);
    k->refs++;
    pthread_mutex_unlock(&c->mu);
    m->c = k;
    m->state = k->start;
    *out = m;
    return PAGODA_OK;
}

static void matcher_free(void *ctx, void *p)
{
    matcher *m = p;
    if (!m) return;
    compiled_release(ctx, m->c);
    free(m);
}

/* Retire an automaton that grew large from the cache (see the top). */
static void maybe_retire(gctx *c, compiled *k, int64_t bytes)
{
    if (bytes <= c->dlim.max_bytes / 2) return;
    pthread_mutex_lock(&c->mu);
    compiled *dead = NULL;
    if (k->in_cache) {
        cache_unlink_locked(c, k);
        dead = unref_locked(k);
    }
    pthread_mutex_unlock(&c->mu);
    if (dead) compiled_destroy(dead); /* cannot happen: the caller's matcher holds one */
}

/* The state after control token i's second reading, G_CTL_MARK text
 * G_CTL_MARK (what a <token> reference reads): >= 0, -1 dead, -3. */
static int32_t ctl_step(const gctx *c, g_dfa *d, int32_t s, int32_t i)
{
    s = g_dfa_step(d, s, G_CTL_MARK);
    const uint8_t *b = (const uint8_t *)c->ctl_text[i];
    for (uint32_t j = 0; j < c->ctl_len[i] && s >= 0; j++) s = g_dfa_step(d, s, b[j]);
    return s >= 0 ? g_dfa_step(d, s, G_CTL_MARK) : s;
}

/* A grammar with <token> references: the control tokens such a reference
 * takes at state s join the mask (their trie reading is their text, which
 * the mask already judged), and tokens that write the mark byte leave it.
 * 0 or -1 (d->err). */
static int ctl_mask(const gctx *c, g_dfa *d, int32_t s, uint32_t *mask)
{
    for (int32_t i = 0; i < c->n_marked; i++) mask[c->marked[i] >> 5] &= ~(1u << (c->marked[i] & 31));
    for (int32_t i = 0; i < c->n_ctl; i++) {
        int32_t ns = ctl_step(c, d, s, i);
        if (ns == -3) return -1;
        if (ns >= 0) mask[c->ctl[i] >> 5] |= 1u << (c->ctl[i] & 31);
    }
    return 0;
}

static int fill_mask(void *ctx, void *p, uint32_t *mask, char *err, size_t err_len)
{
    gctx *c = ctx;
    matcher *m = p;
    compiled *k = m->c;
    double t0 = now_s();
    bool hit = false;
    pthread_mutex_lock(&k->mu);
    int r = c->plain_masks ? g_mask_fill_uncached(k->d, c->trie, m->state, mask)
                           : g_mask_fill(k->d, c->trie, m->state, mask, &hit);
    if (r == 0 && k->g->n_ctl_refs && ctl_mask(c, k->d, m->state, mask) < 0) r = -1;
    if (r < 0) set_err(err, err_len, "%s", k->d->err);
    int64_t bytes = k->d->bytes;
    pthread_mutex_unlock(&k->mu);
    double dt = now_s() - t0;
    pthread_mutex_lock(&c->mu);
    c->st.masks++;
    c->st.mask_cache_hits += hit;
    c->st.mask_seconds += dt;
    pthread_mutex_unlock(&c->mu);
    maybe_retire(c, k, bytes);
    return r < 0 ? PAGODA_ERR_NOSPACE : PAGODA_OK;
}

static int advance(void *ctx, void *p, int32_t token, char *err, size_t err_len)
{
    gctx *c = ctx;
    matcher *m = p;
    if (token < 0 || token >= c->n_vocab || !c->trie->tok_len[token]) {
        set_err(err, err_len, "token %d writes no text: the spec cannot take it", token);
        return PAGODA_ERR_INVALID;
    }
    pthread_mutex_lock(&m->c->mu);
    g_dfa *d = m->c->d;
    int32_t s = m->state;
    const uint8_t *b = (const uint8_t *)c->trie->tok_bytes[token];
    bool refs = m->c->g->n_ctl_refs > 0;
    if (refs && c->is_ctl[token] == 2) s = -1; /* the mark is only a reference's */
    for (uint32_t i = 0; i < c->trie->tok_len[token] && s >= 0; i++) s = g_dfa_step(d, s, b[i]);
    if (s != -3 && c->is_ctl[token] == 1 && refs) {
        /* a control token reads as its text and as a <token> reference:
         * the parses of both go on */
        int32_t i = 0;
        while (c->ctl[i] != token) i++;
        int32_t s2 = ctl_step(c, d, m->state, i);
        if (s2 == -3) s = -3;
        else if (s2 >= 0) s = s >= 0 ? g_dfa_union(d, s, s2) : s2;
    }
    if (s == -3) set_err(err, err_len, "%s", d->err);
    pthread_mutex_unlock(&m->c->mu);
    if (s < 0) {
        if (s == -1) set_err(err, err_len, "token %d is not allowed here by the spec", token);
        return s == -1 ? PAGODA_ERR_INVALID : PAGODA_ERR_NOSPACE;
    }
    m->state = s;
    return PAGODA_OK;
}

static bool is_complete(void *ctx, const void *p)
{
    (void)ctx;
    const matcher *m = p;
    pthread_mutex_lock(&m->c->mu);
    bool a = m->c->d->states[m->state].accept;
    pthread_mutex_unlock(&m->c->mu);
    return a;
}

static int stats(void *ctx, pagoda_constraint_stats *out)
{
    gctx *c = ctx;
    size_t n = out->struct_size && out->struct_size < sizeof *out ? out->struct_size : sizeof *out;
    pthread_mutex_lock(&c->mu);
    pagoda_constraint_stats st = c->st;
    compiled *list[256];
    int nl = 0;
    for (compiled *k = c->head; k && nl < 256; k = k->next) {
        k->refs++; /* held while counted outside the cache lock */
        list[nl++] = k;
    }
    pthread_mutex_unlock(&c->mu);
    st.states = 0;
    st.bytes = 0;
    for (int i = 0; i < nl; i++) {
        pthread_mutex_lock(&list[i]->mu);
        st.states += list[i]->d->n_states;
        st.bytes += list[i]->d->bytes;
        pthread_mutex_unlock(&list[i]->mu);
        compiled_release(c, list[i]);
    }
    st.struct_size = n;
    memcpy(out, &st, n);
    return PAGODA_OK;
}

static const pagoda_constraint_ops ops = {
    .struct_size = sizeof(pagoda_constraint_ops),
    .set_vocab = set_vocab,
    .compile = compile,
    .compiled_free = compiled_free,
    .matcher_new = matcher_new,
    .matcher_free = matcher_free,
    .fill_mask = fill_mask,
    .advance = advance,
    .is_complete = is_complete,
    .stats = stats,
};

static const pagoda_plugin_desc desc = {
    PAGODA_DESC_HEADER(PAGODA_KIND_CONSTRAINT),
    .name = "grammar",
    .version = "0.1.0",
    .description = "structured output: JSON Schema, GBNF-style grammars, regex, choice; a lazily "
                   "determinized pushdown automaton with per-state token masks",
    .config_keys = keys,
    .create = create,
    .destroy = destroy,
    .ops = &ops,
};

PAGODA_PLUGIN(desc)
