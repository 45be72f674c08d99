/*
 * gram_schema.c: JSON Schema (the subset docs/structured-output.md lists)
 * as grammar rules, one rule per schema object, made before its
 * alternatives so that a "$ref" cycle refers to it (recursion). What is
 * generated is always a subset of what the schema accepts, never more:
 * properties come in the schema's order, a property the schema does not
 * list is never written, strings use one escape per character, numbers
 * have bounded digits and no exponent where bounds apply. A keyword whose
 * constraint the grammar would not enforce is an error under strict (the
 * 400 names it and where) and ignored otherwise; annotations (title,
 * description, examples, ...) are always ignored.
 *
 * Malformed schemas (a "type" that is no type, "required" that is not a
 * list of names, a "$ref" that points nowhere) are errors either way.
 * Not for: the grammar builder (gram_ir.c) or regexes (gram_regex.c).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gram.h"

#define PATH_MAX_LEN 200

typedef struct memo {
    json_t *node;
    int32_t rule;
} memo;

typedef struct sc {
    g_json j;               /* the shared JSON rules (j.g: the grammar) */
    g_grammar *g;
    json_t *doc;
    bool strict;
    int depth;
    memo *m;                /* open addressing by node address: a schema of many parts */
    int32_t n_m, cap_m;     /* stays linear to compile */
} sc;

enum { T_OBJECT = 1, T_ARRAY = 2, T_STRING = 4, T_NUMBER = 8, T_INTEGER = 16, T_BOOLEAN = 32,
       T_NULL = 64, T_ALL = 127 };

static int sfail(sc *c, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int sfail(sc *c, const char *path, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return g_fail(c->g, "%s: %s", path, msg);
}

/* ------------------------------------------------------------ helpers */

static const char *const annotations[] = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
    "readOnly", "writeOnly", "$defs", "definitions", "$anchor", NULL,
};
static const char *const supported[] = {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
    "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "minLength", "maxLength",
    "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "uniqueItems", NULL,
};

static bool in_list(const char *k, const char *const *list)
{
    for (int i = 0; list[i]; i++)
        if (strcmp(k, list[i]) == 0) return true;
    return false;
}

static void subpath(char *out, const char *path, const char *seg)
{
    /* path + "/" + seg, cut with "..." when longer than PATH_MAX_LEN */
    size_t pl = strlen(path), sl = strlen(seg);
    if (pl + sl + 2 > PATH_MAX_LEN) {
        size_t keep = pl < PATH_MAX_LEN - 4 ? pl : PATH_MAX_LEN - 4;
        memcpy(out, path, keep);
        memcpy(out + keep, "...", 4);
        return;
    }
    memcpy(out, path, pl);
    out[pl] = '/';
    memcpy(out + pl + 1, seg, sl + 1);
}

/* A JSON pointer into the document ("#", "#/$defs/a", with ~0 ~1 and
 * %-escapes undone). NULL when it points nowhere. */
static json_t *resolve(json_t *doc, const char *ref)
{
    if (ref[0] != '#') return NULL;
    json_t *cur = doc;
    const char *p = ref + 1;
    while (*p) {
        if (*p != '/') return NULL;
        p++;
        char key[256];
        size_t k = 0;
        while (*p && *p != '/' && k + 1 < sizeof key) {
            char ch = *p++;
            if (ch == '~' && (*p == '0' || *p == '1')) ch = *p++ == '0' ? '~' : '/';
            else if (ch == '%' && p[0] && p[1]) {
                char hx[3] = {p[0], p[1], 0};
                ch = (char)strtol(hx, NULL, 16);
                p += 2;
            }
            key[k++] = ch;
        }
        key[k] = 0;
        if (json_is_object(cur)) {
            cur = json_object_get(cur, key);
        } else if (json_is_array(cur)) {
            char *end;
            long i = strtol(key, &end, 10);
            cur = *end || i < 0 ? NULL : json_array_get(cur, (size_t)i);
        } else {
            cur = NULL;
        }
        if (!cur) return NULL;
    }
    return cur;
}

static int types_of(sc *c, json_t *t, const char *path, int *mask)
{
    static const struct { const char *n; int m; } names[] = {
        {"object", T_OBJECT}, {"array", T_ARRAY}, {"string", T_STRING}, {"number", T_NUMBER},
        {"integer", T_INTEGER}, {"boolean", T_BOOLEAN}, {"null", T_NULL},
    };
    *mask = 0;
    json_t *one = t;
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    if (json_is_array(t) && n == 0) return sfail(c, path, "'type' is an empty list");
    for (size_t i = 0; i < n; i++) {
        if (json_is_array(t)) one = json_array_get(t, i);
        if (!json_is_string(one)) return sfail(c, path, "'type' must be a type name or a list of them");
        int found = 0;
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
            if (strcmp(json_string_value(one), names[k].n) == 0) found = names[k].m;
        if (!found)
            return sfail(c, path, "'type' \"%s\" is not a JSON Schema type (object, array, string, "
                         "number, integer, boolean, null)", json_string_value(one));
        *mask |= found;
    }
    return 0;
}

/* Does a literal value have one of the types in mask (and, for strings,
 * a length in bounds)? */
static bool lit_fits(json_t *v, int mask, int64_t min_len, int64_t max_len)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return mask & T_OBJECT;
    case JSON_ARRAY: return mask & T_ARRAY;
    case JSON_STRING: {
        if (!(mask & T_STRING)) return false;
        /* characters, not bytes */
        int64_t n = 0;
        const unsigned char *p = (const unsigned char *)json_string_value(v);
        for (size_t i = 0; i < json_string_length(v); i++) n += (p[i] & 0xC0) != 0x80;
        return n >= min_len && (max_len < 0 || n <= max_len);
    }
    case JSON_INTEGER: return mask & (T_NUMBER | T_INTEGER);
    case JSON_REAL: return (mask & T_NUMBER) || ((mask & T_INTEGER) && json_real_value(v) == floor(json_real_value(v)));
    case JSON_TRUE:
    case JSON_FALSE: return mask & T_BOOLEAN;
    case JSON_NULL: return mask & T_NULL;
    }
    return false;
}

static void alt_literal(sc *c, int32_t r, json_t *v)
{
    char *txt = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!txt) {
        g_fail(c->g, "out of memory");
        return;
    }
    g_seq s = {0};
    g_seq_lit(c->g, &s, txt, strlen(txt));
    g_rule_alt(c->g, r, &s);
    g_seq_free(&s);
    free(txt);
}

static int get_count(sc *c, json_t *s, const char *key, const char *path, int64_t dflt, int64_t *out)
{
    json_t *v = json_object_get(s, key);
    *out = dflt;
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return sfail(c, path, "'%s' must be a non-negative integer", key);
    *out = json_integer_value(v);
    if (*out > 100000) *out = 100000; /* beyond this the element limit refuses anyway */
    return 0;
}

/* The numeric bounds of a schema, as integers. 1: bounds found (filled),
 * 0: none, -1: error (a bound that is not a number, or not an integer
 * when integral is required). For a number, lo/hi may be exclusive. */
static int read_bounds(sc *c, json_t *s, const char *path, g_bounds *b)
{
    memset(b, 0, sizeof *b);
    static const char *const keys[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    int any = 0;
    for (int k = 0; k < 4; k++) {
        json_t *v = json_object_get(s, keys[k]);
        if (!v) continue;
        if (!json_is_number(v)) return sfail(c, path, "'%s' must be a number", keys[k]);
        double x = json_number_value(v);
        if (x != floor(x) || fabs(x) > 9e15) {
            if (c->strict)
                return sfail(c, path, "'%s' of %g is not supported: bounds must be integers of at "
                             "most 15 digits (strict)", keys[k], x);
            continue;
        }
        int64_t iv = (int64_t)x;
        any = 1;
        if (k < 2) {
            bool excl = k == 1;
            if (!b->has_lo || iv > b->lo || (iv == b->lo && excl)) {
                b->lo = iv;
                b->lo_excl = excl;
            }
            b->has_lo = true;
        } else {
            bool excl = k == 3;
            if (!b->has_hi || iv < b->hi || (iv == b->hi && excl)) {
                b->hi = iv;
                b->hi_excl = excl;
            }
            b->has_hi = true;
        }
    }
    return any;
}

static int32_t schema_rule(sc *c, json_t *s, const char *path);

/* ------------------------------------------------------------ typed */

static int32_t object_rule(sc *c, json_t *s, const char *path)
{
    g_grammar *g = c->g;
    json_t *props = json_object_get(s, "properties");
    json_t *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) { sfail(c, path, "'properties' must be an object"); return -1; }
    if (req && !json_is_array(req)) { sfail(c, path, "'required' must be a list of property names"); return -1; }
    if (addl && !json_is_object(addl) && !json_is_boolean(addl)) {
        sfail(c, path, "'additionalProperties' must be a schema or a boolean");
        return -1;
    }
    size_t k;
    json_t *v;
    json_array_foreach(req, k, v) if (!json_is_string(v)) {
        sfail(c, path, "'required' must be a list of property names");
        return -1;
    }
    int32_t ws = g_json_ws(&c->j);
    g_seq s2 = {0};
    /* the properties in order: listed ones, then required names the list
     * lacks (valued by additionalProperties) */
    size_t n_props = props ? json_object_size(props) : 0, n_req = req ? json_array_size(req) : 0;
    const char **names = calloc(n_props + n_req + 1, sizeof *names);
    int32_t *vals = calloc(n_props + n_req + 1, sizeof *vals);
    bool *must = calloc(n_props + n_req + 1, sizeof *must);
    int32_t r = -1;
    if (!names || !vals || !must) {
        g_fail(g, "out of memory");
        goto out;
    }
    size_t n = 0;
    const char *key;
    char sub[PATH_MAX_LEN], sub2[PATH_MAX_LEN];
    subpath(sub, path, "properties");
    json_object_foreach(props, key, v) {
        subpath(sub2, sub, key);
        names[n] = key;
        vals[n] = schema_rule(c, v, sub2);
        if (vals[n] < 0) goto out;
        n++;
    }
    json_array_foreach(req, k, v) {
        const char *nm = json_string_value(v);
        bool listed = false;
        for (size_t i = 0; i < n; i++) {
            if (strcmp(names[i], nm) == 0) {
                must[i] = listed = true;
                break;
            }
        }
        if (listed) continue;
        bool dup = false;
        for (size_t i = 0; i < n; i++) dup |= strcmp(names[i], nm) == 0;
        if (dup) continue;
        subpath(sub2, path, "required");
        names[n] = nm;
        must[n] = true;
        if (json_is_false(addl)) {
            /* required, yet no property may exist: nothing is valid */
            char sub3[PATH_MAX_LEN];
            subpath(sub3, sub2, nm);
            vals[n] = g_rule_new(g, "%s (required, but additionalProperties is false)", sub3);
        } else {
            vals[n] = json_is_object(addl) ? schema_rule(c, addl, sub2) : g_json_value(&c->j);
        }
        if (vals[n] < 0) goto out;
        n++;
    }
    r = g_rule_new(g, "%s", path);
    if (n == 0 && (!addl || !json_is_false(addl))) {
        /* a map: any keys, each value per additionalProperties */
        char sub3[PATH_MAX_LEN];
        subpath(sub3, path, "additionalProperties");
        int32_t val = json_is_object(addl) ? schema_rule(c, addl, sub3) : g_json_value(&c->j);
        if (val < 0) goto out;
        int32_t kv = g_rule_new(g, "%s/member", path);
        g_json_member(g, &s2, kv, g_json_string(&c->j, 0, -1), ws, val);
        int32_t more = g_rule_new(g, "%s/more", path);
        int32_t body = g_json_items(g, &s2, kv, ws, more, g_rule_new(g, "%s/members", path));
        g_seq_byte(g, &s2, '{');
        g_seq_ref(g, &s2, ws);
        g_seq_ref(g, &s2, body);
        g_seq_byte(g, &s2, '}');
        g_rule_alt(g, r, &s2);
        goto out;
    }
    /* F[i]: the properties from i when none was written yet; A[i]: the
     * same after one was (a comma first). A skipped optional property
     * passes to i + 1; both chains are linear in the property count. */
    int32_t *F = malloc(sizeof *F * (n + 1)), *A = malloc(sizeof *A * (n + 1));
    if (!F || !A) {
        free(F);
        free(A);
        g_fail(g, "out of memory");
        goto out;
    }
    F[n] = g_rule_new(g, "%s/end", path);
    g_rule_alt(g, F[n], &s2);
    A[n] = F[n];
    for (size_t i = n; i-- > 0 && !g->failed;) {
        json_t *jn = json_string(names[i]);
        char *kt = jn ? json_dumps(jn, JSON_ENCODE_ANY) : NULL;
        json_decref(jn);
        if (!kt) {
            g_fail(g, "out of memory");
            break;
        }
        int32_t kv = g_rule_new(g, "%s/properties/%s/member", path, names[i]);
        g_seq_lit(g, &s2, kt, strlen(kt));
        free(kt);
        g_seq_ref(g, &s2, ws);
        g_seq_byte(g, &s2, ':');
        g_seq_ref(g, &s2, ws);
        g_seq_ref(g, &s2, vals[i]);
        g_seq_ref(g, &s2, ws);
        g_rule_alt(g, kv, &s2);
        A[i] = g_rule_new(g, "%s/after-%zu", path, i);
        g_seq_byte(g, &s2, ',');
        g_seq_ref(g, &s2, ws);
        g_seq_ref(g, &s2, kv);
        g_seq_ref(g, &s2, A[i + 1]);
        g_rule_alt(g, A[i], &s2);
        F[i] = g_rule_new(g, "%s/from-%zu", path, i);
        g_seq_ref(g, &s2, kv);
        g_seq_ref(g, &s2, A[i + 1]);
        g_rule_alt(g, F[i], &s2);
        if (!must[i]) {
            g_seq_ref(g, &s2, A[i + 1]);
            g_rule_alt(g, A[i], &s2);
            g_seq_ref(g, &s2, F[i + 1]);
            g_rule_alt(g, F[i], &s2);
        }
    }
    g_seq_byte(g, &s2, '{');
    g_seq_ref(g, &s2, ws);
    g_seq_ref(g, &s2, F[0]);
    g_seq_byte(g, &s2, '}');
    g_rule_alt(g, r, &s2);
    free(F);
    free(A);
out:
    g_seq_free(&s2);
    free(names);
    free(vals);
    free(must);
    return g->failed ? -1 : r;
}

static int32_t array_rule(sc *c, json_t *s, const char *path)
{
    g_grammar *g = c->g;
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    if (items && !json_is_object(items) && !json_is_boolean(items)) {
        sfail(c, path, "'items' must be a schema or a boolean (a list of schemas is 'prefixItems')");
        return -1;
    }
    if (prefix && !json_is_array(prefix)) {
        sfail(c, path, "'prefixItems' must be a list of schemas");
        return -1;
    }
    int64_t min, max;
    if (get_count(c, s, "minItems", path, 0, &min) < 0 || get_count(c, s, "maxItems", path, -1, &max) < 0)
        return -1;
    json_t *uniq = json_object_get(s, "uniqueItems");
    if (uniq && !json_is_boolean(uniq)) {
        sfail(c, path, "'uniqueItems' must be a boolean");
        return -1;
    }
    if (json_is_true(uniq) && c->strict) {
        sfail(c, path, "'uniqueItems': true is not supported (strict)");
        return -1;
    }
    int32_t r = g_rule_new(g, "%s", path);
    if (max >= 0 && min > max) return r; /* nothing: g_finish names it */
    int32_t ws = g_json_ws(&c->j);
    g_seq sq = {0};
    char sub[PATH_MAX_LEN], sub2[PATH_MAX_LEN];
    /* the prefix items (as many as maxItems allows), then items */
    int64_t k_pre = prefix ? (int64_t)json_array_size(prefix) : 0;
    if (max >= 0 && k_pre > max) k_pre = max;
    int32_t rest_item = -1;
    int64_t rmin = min > k_pre ? min - k_pre : 0, rmax = max < 0 ? -1 : max - k_pre;
    if (json_is_false(items) || (!items && prefix)) {
        /* no items past the prefix are written (absent items allow them,
         * but none are needed unless minItems asks) */
        if (json_is_false(items) && rmin > 0) return r;
        rmax = rmin;
        if (rmin > 0) rest_item = g_json_value(&c->j);
    } else {
        subpath(sub, path, "items");
        rest_item = json_is_object(items) ? schema_rule(c, items, sub) : g_json_value(&c->j);
        if (rest_item < 0) return -1;
    }
    g_seq_byte(g, &sq, '[');
    g_seq_ref(g, &sq, ws);
    for (int64_t i = 0; i < k_pre; i++) {
        char idx[32];
        snprintf(idx, sizeof idx, "%lld", (long long)i);
        subpath(sub, path, "prefixItems");
        subpath(sub2, sub, idx);
        int32_t it = schema_rule(c, json_array_get(prefix, (size_t)i), sub2);
        if (it < 0) {
            g_seq_free(&sq);
            return -1;
        }
        if (i) {
            g_seq_byte(g, &sq, ',');
            g_seq_ref(g, &sq, ws);
        }
        g_seq_ref(g, &sq, it);
        g_seq_ref(g, &sq, ws);
    }
    if (rest_item >= 0 && (rmax < 0 || rmax > 0)) {
        g_seq e = {0};
        /* element: item ws; later elements: "," ws item ws */
        int32_t el = g_rule_new(g, "%s/element", path);
        if (k_pre) {
            g_seq_byte(g, &e, ',');
            g_seq_ref(g, &e, ws);
        }
        g_seq_ref(g, &e, rest_item);
        g_seq_ref(g, &e, ws);
        g_rule_alt(g, el, &e);
        int32_t more = g_rule_new(g, "%s/more", path);
        g_seq_byte(g, &e, ',');
        g_seq_ref(g, &e, ws);
        g_seq_ref(g, &e, rest_item);
        g_seq_ref(g, &e, ws);
        g_rule_alt(g, more, &e);
        int32_t list = g_rule_new(g, "%s/elements", path);
        g_seq_ref(g, &e, el);
        g_seq_ref(g, &e, g_rule_repeat(g, more, rmin > 0 ? (int32_t)rmin - 1 : 0,
                                       rmax < 0 ? -1 : (int32_t)rmax - 1));
        g_rule_alt(g, list, &e);
        if (rmin == 0) g_rule_alt(g, list, &e);
        g_seq_free(&e);
        g_seq_ref(g, &sq, list);
    }
    g_seq_byte(g, &sq, ']');
    g_rule_alt(g, r, &sq);
    g_seq_free(&sq);
    return g->failed ? -1 : r;
}

/* formats as regexes over the string's content */
static const struct { const char *name, *re; } formats[] = {
    {"date", "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$"},
    {"time", "^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"},
    {"date-time", "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:"
                  "[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"},
    {"uuid", "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"},
    {"ipv4", "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$"},
};

static int32_t string_rule(sc *c, json_t *s, const char *path)
{
    g_grammar *g = c->g;
    int64_t min, max;
    if (get_count(c, s, "minLength", path, 0, &min) < 0 || get_count(c, s, "maxLength", path, -1, &max) < 0)
        return -1;
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    if (pat && !json_is_string(pat)) { sfail(c, path, "'pattern' must be a string"); return -1; }
    if (fmt && !json_is_string(fmt)) { sfail(c, path, "'format' must be a string"); return -1; }
    const char *re = pat ? json_string_value(pat) : NULL;
    size_t re_len = pat ? json_string_length(pat) : 0;
    if (fmt) {
        const char *f = json_string_value(fmt);
        const char *fre = NULL;
        for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
            if (strcmp(f, formats[i].name) == 0) fre = formats[i].re;
        if (!fre && c->strict) {
            sfail(c, path, "'format' \"%s\" is not supported (strict; supported: date, time, "
                  "date-time, uuid, ipv4)", f);
            return -1;
        }
        if (fre && re && c->strict) {
            sfail(c, path, "'format' together with 'pattern' is not supported (strict)");
            return -1;
        }
        if (fre && !re) {
            re = fre;
            re_len = strlen(fre);
        }
    }
    if (re) {
        if ((min > 0 || max >= 0) && c->strict) {
            sfail(c, path, "'pattern' or 'format' together with 'minLength'/'maxLength' is not "
                  "supported (strict)");
            return -1;
        }
        char sub[PATH_MAX_LEN];
        subpath(sub, path, pat ? "pattern" : "format");
        int32_t body = g_regex_rule(g, re, re_len, G_RE_JSON_STRING, sub);
        if (body < 0) return -1;
        return g_json_quoted(g, g_rule_new(g, "%s", path), body);
    }
    if (max >= 0 && min > max) return g_rule_new(g, "%s (minLength above maxLength)", path);
    return g_json_string(&c->j, (int32_t)min, (int32_t)max);
}

/* ------------------------------------------------------------ any schema */

static bool has_any(json_t *s, const char *const *keys)
{
    for (int i = 0; keys[i]; i++)
        if (json_object_get(s, keys[i])) return true;
    return false;
}

static int32_t schema_body(sc *c, json_t *s, const char *path, int32_t r)
{
    g_grammar *g = c->g;
    const char *key;
    json_t *v;
    json_object_foreach(s, key, v) {
        if (in_list(key, annotations) || in_list(key, supported)) continue;
        if (c->strict) {
            sfail(c, path, "unsupported keyword '%s' (strict: use the documented subset, or "
                  "\"strict\": false to ignore it)", key);
            return -1;
        }
    }
    static const char *const combos[] = {"$ref", "anyOf", "oneOf", "allOf", "enum", "const", NULL};
    static const char *const constraining[] = {
        "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
        "maxItems", "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
        "exclusiveMinimum", "exclusiveMaximum", NULL,
    };
    g_seq sq = {0};
    char sub[PATH_MAX_LEN];
    /* the combinators: one of them decides the value; beside another
     * constraining keyword the intersection would be needed */
    int n_combo = 0;
    for (int i = 0; combos[i]; i++) n_combo += json_object_get(s, combos[i]) != NULL;
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    bool literal = en || cn;
    if (n_combo > 1 && !(literal && n_combo == 2 && en && cn) && c->strict) {
        sfail(c, path, "combining $ref, anyOf, oneOf, allOf, enum and const in one schema is not "
              "supported (strict)");
        return -1;
    }
    if (n_combo && !literal && has_any(s, constraining) && c->strict) {
        sfail(c, path, "'$ref', 'anyOf', 'oneOf' or 'allOf' beside other constraining keywords "
              "is not supported (strict: move them into the branches)");
        return -1;
    }
    json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        if (!json_is_string(ref)) return sfail(c, path, "'$ref' must be a string");
        json_t *t = resolve(c->doc, json_string_value(ref));
        if (!t)
            return sfail(c, path, "'$ref' \"%s\" points to nothing in this schema (only local "
                         "references, #/..., are supported)", json_string_value(ref));
        int32_t tr = schema_rule(c, t, json_string_value(ref));
        if (tr < 0) return -1;
        g_seq_ref(g, &sq, tr);
        g_rule_alt(g, r, &sq);
        g_seq_free(&sq);
        return 0;
    }
    static const char *const branchy[] = {"anyOf", "oneOf", "allOf", NULL};
    for (int b = 0; branchy[b]; b++) {
        json_t *list = json_object_get(s, branchy[b]);
        if (!list) continue;
        if (!json_is_array(list) || json_array_size(list) == 0)
            return sfail(c, path, "'%s' must be a non-empty list of schemas", branchy[b]);
        if (b == 2 && json_array_size(list) > 1) {
            if (c->strict) return sfail(c, path, "'allOf' with more than one schema is not supported (strict)");
        }
        size_t n = b == 2 ? 1 : json_array_size(list);
        for (size_t i = 0; i < n; i++) {
            char idx[40];
            snprintf(idx, sizeof idx, "%s/%zu", branchy[b], i);
            subpath(sub, path, idx);
            int32_t br = schema_rule(c, json_array_get(list, i), sub);
            if (br < 0) return -1;
            g_seq_ref(g, &sq, br);
            g_rule_alt(g, r, &sq);
        }
        g_seq_free(&sq);
        return 0;
    }
    /* the types allowed: "type", else what the keywords imply, else any */
    int mask = T_ALL;
    json_t *t = json_object_get(s, "type");
    if (t && types_of(c, t, path, &mask) < 0) return -1;
    if (!t) {
        static const char *const okeys[] = {"properties", "required", "additionalProperties", NULL};
        static const char *const akeys[] = {"items", "prefixItems", "minItems", "maxItems", NULL};
        static const char *const skeys[] = {"minLength", "maxLength", "pattern", "format", NULL};
        static const char *const nkeys[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
        int implied = (has_any(s, okeys) ? T_OBJECT : 0) | (has_any(s, akeys) ? T_ARRAY : 0) |
                      (has_any(s, skeys) ? T_STRING : 0) | (has_any(s, nkeys) ? T_NUMBER : 0);
        if (implied) mask = implied;
    }
    if (literal) {
        int64_t min_len = 0, max_len = -1;
        if (get_count(c, s, "minLength", path, 0, &min_len) < 0 ||
            get_count(c, s, "maxLength", path, -1, &max_len) < 0)
            return -1;
        if (en && (!json_is_array(en) || json_array_size(en) == 0))
            return sfail(c, path, "'enum' must be a non-empty list");
        if (cn) {
            /* const alone, or const inside enum's values */
            bool in_enum = !en;
            size_t i;
            json_t *e;
            json_array_foreach(en, i, e) in_enum |= json_equal(e, cn);
            if (in_enum && lit_fits(cn, mask, min_len, max_len)) alt_literal(c, r, cn);
        } else {
            size_t i;
            json_t *e;
            json_array_foreach(en, i, e) if (lit_fits(e, mask, min_len, max_len)) alt_literal(c, r, e);
        }
        return g->failed ? -1 : 0;
    }
    g_bounds b;
    int has_b = 0;
    if (mask & (T_NUMBER | T_INTEGER)) {
        has_b = read_bounds(c, s, path, &b);
        if (has_b < 0) return -1;
        if (json_object_get(s, "multipleOf") && c->strict)
            return sfail(c, path, "'multipleOf' is not supported (strict)");
    }
    int32_t parts[8];
    int np = 0;
    if (mask & T_OBJECT) parts[np++] = object_rule(c, s, path);
    if (mask & T_ARRAY) parts[np++] = array_rule(c, s, path);
    if (mask & T_STRING) parts[np++] = string_rule(c, s, path);
    if (mask & T_NUMBER) parts[np++] = has_b ? g_json_number_range(&c->j, &b, path) : g_json_number(&c->j);
    else if (mask & T_INTEGER) parts[np++] = has_b ? g_json_integer_range(&c->j, &b, path) : g_json_integer(&c->j);
    if (mask & T_BOOLEAN) {
        parts[np++] = g_json_lit(&c->j, "true", "true");
        parts[np++] = g_json_lit(&c->j, "false", "false");
    }
    if (mask & T_NULL) parts[np++] = g_json_lit(&c->j, "null", "null");
    for (int i = 0; i < np; i++) {
        if (parts[i] < 0) return -1;
        g_seq_ref(g, &sq, parts[i]);
        g_rule_alt(g, r, &sq);
    }
    g_seq_free(&sq);
    return g->failed ? -1 : 0;
}

static int32_t schema_rule(sc *c, json_t *s, const char *path)
{
    g_grammar *g = c->g;
    if (g->failed) return -1;
    if (json_is_true(s)) return g_json_value(&c->j);
    if (json_is_false(s)) return g_rule_new(g, "%s (the schema false)", path);
    if (!json_is_object(s)) {
        sfail(c, path, "a schema must be an object or a boolean");
        return -1;
    }
    if ((c->n_m + 1) * 2 > c->cap_m) {
        int32_t nc = c->cap_m ? c->cap_m * 2 : 64;
        memo *nm = calloc((size_t)nc, sizeof *nm);
        if (!nm) {
            g_fail(g, "out of memory");
            return -1;
        }
        for (int32_t i = 0; i < c->cap_m; i++) {
            if (!c->m[i].node) continue;
            uint32_t h = (uint32_t)(((uintptr_t)c->m[i].node >> 4) * 2654435761u) & (uint32_t)(nc - 1);
            while (nm[h].node) h = (h + 1) & (uint32_t)(nc - 1);
            nm[h] = c->m[i];
        }
        free(c->m);
        c->m = nm;
        c->cap_m = nc;
    }
    uint32_t h = (uint32_t)(((uintptr_t)s >> 4) * 2654435761u) & (uint32_t)(c->cap_m - 1);
    while (c->m[h].node) {
        if (c->m[h].node == s) return c->m[h].rule;
        h = (h + 1) & (uint32_t)(c->cap_m - 1);
    }
    if (++c->depth > g->lim.max_depth) {
        sfail(c, path, "schemas nested more than %d deep", g->lim.max_depth);
        return -1;
    }
    int32_t r = g_rule_new(g, "%s", path);
    if (r < 0) return -1;
    c->m[h] = (memo){s, r};
    c->n_m++;
    int st = schema_body(c, s, path, r);
    c->depth--;
    return st < 0 ? -1 : r;
}

static void sc_init(sc *c, g_grammar *g, json_t *doc, bool strict)
{
    memset(c, 0, sizeof *c);
    c->g = g;
    c->doc = doc;
    c->strict = strict;
    g_json_init(&c->j, g);
    c->j.compact = true; /* a schema's output: nothing or one space between tokens */
}

int32_t g_schema_rule(g_grammar *g, json_t *schema, json_t *root_doc, bool strict, const char *where)
{
    sc c;
    sc_init(&c, g, root_doc ? root_doc : schema, strict);
    int32_t r = schema_rule(&c, schema, where);
    free(c.m);
    return r;
}
