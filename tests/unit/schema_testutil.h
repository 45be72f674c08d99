/* schema_testutil.h: for the structured-output tests, an independent JSON
 * Schema validator for the subset pagoda supports (written from the JSON
 * Schema 2020-12 text, sharing no code with the engine), a generator of
 * random schemas with a bound on the longest output they allow, and PCRE2
 * helpers. Header-only (static functions). */
#ifndef PAGODA_SCHEMA_TESTUTIL_H
#define PAGODA_SCHEMA_TESTUTIL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <math.h>
#include <pcre2.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

/* Does re match subject (search unless anchored in re)? -1: bad regex. */
static inline int st_re_search(const char *re, const char *subj, size_t n)
{
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL);
    if (!c) return -1;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(c, NULL);
    int rc = pcre2_match(c, (PCRE2_SPTR)subj, n, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(c);
    return rc >= 0;
}

static inline size_t st_utf8_chars(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

static inline bool st_type_is(json_t *v, const char *t)
{
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "integer"))
        return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    return false;
}

static inline json_t *st_resolve(json_t *root, const char *ref)
{
    if (ref[0] != '#') return NULL;
    json_t *cur = root;
    const char *p = ref + 1;
    while (*p == '/') {
        p++;
        char key[128];
        size_t k = 0;
        while (*p && *p != '/' && k < 127) key[k++] = *p++;
        key[k] = 0;
        cur = json_object_get(cur, key);
        if (!cur) return NULL;
    }
    return cur;
}

/* Validate v against schema s (root: for $ref); why gets the first reason. */
static bool st_valid(json_t *root, json_t *s, json_t *v, char *why, size_t wn)
{
#define NO(...) do { snprintf(why, wn, __VA_ARGS__); return false; } while (0)
    if (json_is_true(s)) return true;
    if (json_is_false(s)) NO("schema false");
    json_t *x;
    if ((x = json_object_get(s, "$ref"))) {
        json_t *t = st_resolve(root, json_string_value(x));
        if (!t) NO("bad $ref");
        if (!st_valid(root, t, v, why, wn)) return false;
    }
    if ((x = json_object_get(s, "type"))) {
        bool ok = false;
        if (json_is_string(x)) ok = st_type_is(v, json_string_value(x));
        size_t i;
        json_t *t;
        json_array_foreach(x, i, t) ok |= st_type_is(v, json_string_value(t));
        if (!ok) NO("type");
    }
    if ((x = json_object_get(s, "enum"))) {
        bool ok = false;
        size_t i;
        json_t *t;
        json_array_foreach(x, i, t) ok |= json_equal(t, v) || (json_is_number(t) && json_is_number(v) &&
                                                             json_number_value(t) == json_number_value(v));
        if (!ok) NO("enum");
    }
    if ((x = json_object_get(s, "const")) && !json_equal(x, v)) NO("const");
    if ((x = json_object_get(s, "anyOf"))) {
        bool ok = false;
        size_t i;
        json_t *t;
        char w2[64];
        json_array_foreach(x, i, t) ok |= st_valid(root, t, v, w2, sizeof w2);
        if (!ok) NO("anyOf");
    }
    if ((x = json_object_get(s, "oneOf"))) {
        int n = 0;
        size_t i;
        json_t *t;
        char w2[64];
        json_array_foreach(x, i, t) n += st_valid(root, t, v, w2, sizeof w2);
        if (n != 1) NO("oneOf matched %d", n);
    }
    if ((x = json_object_get(s, "allOf"))) {
        size_t i;
        json_t *t;
        json_array_foreach(x, i, t) if (!st_valid(root, t, v, why, wn)) return false;
    }
    if (json_is_string(v)) {
        size_t n = st_utf8_chars(json_string_value(v), json_string_length(v));
        if ((x = json_object_get(s, "minLength")) && (json_int_t)n < json_integer_value(x)) NO("minLength");
        if ((x = json_object_get(s, "maxLength")) && (json_int_t)n > json_integer_value(x)) NO("maxLength");
        if ((x = json_object_get(s, "pattern")) &&
            st_re_search(json_string_value(x), json_string_value(v), json_string_length(v)) != 1)
            NO("pattern %s", json_string_value(x));
    }
    if (json_is_number(v)) {
        double d = json_number_value(v);
        if ((x = json_object_get(s, "minimum")) && d < json_number_value(x)) NO("minimum");
        if ((x = json_object_get(s, "maximum")) && d > json_number_value(x)) NO("maximum");
        if ((x = json_object_get(s, "exclusiveMinimum")) && d <= json_number_value(x)) NO("exclusiveMinimum");
        if ((x = json_object_get(s, "exclusiveMaximum")) && d >= json_number_value(x)) NO("exclusiveMaximum");
    }
    if (json_is_array(v)) {
        size_t n = json_array_size(v), k_pre = 0;
        if ((x = json_object_get(s, "minItems")) && (json_int_t)n < json_integer_value(x)) NO("minItems");
        if ((x = json_object_get(s, "maxItems")) && (json_int_t)n > json_integer_value(x)) NO("maxItems");
        if ((x = json_object_get(s, "prefixItems"))) {
            k_pre = json_array_size(x);
            for (size_t i = 0; i < n && i < k_pre; i++)
                if (!st_valid(root, json_array_get(x, i), json_array_get(v, i), why, wn)) return false;
        }
        if ((x = json_object_get(s, "items")))
            for (size_t i = k_pre; i < n; i++)
                if (!st_valid(root, x, json_array_get(v, i), why, wn)) return false;
    }
    if (json_is_object(v)) {
        json_t *props = json_object_get(s, "properties"), *addl = json_object_get(s, "additionalProperties");
        size_t i;
        json_t *t;
        json_array_foreach(json_object_get(s, "required"), i, t)
            if (!json_object_get(v, json_string_value(t))) NO("required %s", json_string_value(t));
        const char *k;
        json_object_foreach(v, k, t) {
            json_t *ps = props ? json_object_get(props, k) : NULL;
            if (ps) {
                if (!st_valid(root, ps, t, why, wn)) return false;
            } else if (addl) {
                if (!st_valid(root, addl, t, why, wn)) return false;
            }
        }
    }
    return true;
#undef NO
}

/* ------------------------------------------------------------ generator */

#define ST_WS 1    /* the engine's longest whitespace in a schema's output: one space */

static inline int st_pick(tu_rng *r, int n) { return (int)(tu_rng_u64(r) % (uint64_t)n); }

/* A random schema of the supported subset; *max_bytes gets the longest
 * output it allows (so a test can size max_tokens to always finish). */
static json_t *st_random_schema(tu_rng *r, int depth, long *max_bytes)
{
    /* depth > 0: a container half the time, so nesting is common */
    int kind = depth > 0 && st_pick(r, 2) ? 10 + st_pick(r, 3) : st_pick(r, depth > 0 ? 13 : 10);
    json_t *s = json_object();
    switch (kind) {
    case 0: /* bounded string */
    case 1: {
        int mx = st_pick(r, 7), mn = st_pick(r, mx + 1);
        json_object_set_new(s, "type", json_string("string"));
        json_object_set_new(s, "maxLength", json_integer(mx));
        if (st_pick(r, 2)) json_object_set_new(s, "minLength", json_integer(mn));
        *max_bytes = 2 + 6L * mx;
        break;
    }
    case 2: { /* pattern */
        static const char *const pats[] = {"^[a-z]{1,6}$", "^[A-Z][a-z]{0,4}$", "^[0-9]{3}-[0-9]{4}$",
                                           "^(yes|no|maybe)$", "^\\d{1,3}(\\.\\d{1,2})?$", "^[^\"\\\\]{2,4}$"};
        int k = st_pick(r, 6);
        json_object_set_new(s, "type", json_string("string"));
        json_object_set_new(s, "pattern", json_string(pats[k]));
        *max_bytes = 2 + 6 * 12;
        break;
    }
    case 3: { /* integer with bounds */
        json_object_set_new(s, "type", json_string("integer"));
        long lo = (long)st_pick(r, 200) - 100, hi = lo + st_pick(r, 1000);
        if (st_pick(r, 2)) json_object_set_new(s, "minimum", json_integer(lo));
        if (st_pick(r, 2)) json_object_set_new(s, st_pick(r, 2) ? "maximum" : "exclusiveMaximum", json_integer(hi));
        *max_bytes = 17;
        break;
    }
    case 4: { /* number */
        json_object_set_new(s, "type", json_string("number"));
        if (st_pick(r, 2)) json_object_set_new(s, "exclusiveMinimum", json_integer(st_pick(r, 5) - 2));
        if (st_pick(r, 2)) json_object_set_new(s, "maximum", json_integer(3 + st_pick(r, 20)));
        *max_bytes = 38;
        break;
    }
    case 5:
        json_object_set_new(s, "type", json_string("boolean"));
        *max_bytes = 5;
        break;
    case 6: { /* enum of mixed literals */
        json_t *e = json_array();
        json_array_append_new(e, json_string("red"));
        json_array_append_new(e, json_string("gr\"een"));
        json_array_append_new(e, json_integer(42));
        json_array_append_new(e, json_null());
        json_object_set_new(s, "enum", e);
        *max_bytes = 9;
        break;
    }
    case 7: /* nullable integer */
        json_object_set_new(s, "type", json_pack("[ss]", "integer", "null"));
        *max_bytes = 17;
        break;
    case 8:
        json_object_set_new(s, "const", json_pack("{s:i}", "k", 1));
        *max_bytes = 7;
        break;
    case 9: { /* format */
        static const char *const f[] = {"date", "uuid", "time"};
        json_object_set_new(s, "type", json_string("string"));
        json_object_set_new(s, "format", json_string(f[st_pick(r, 3)]));
        *max_bytes = 40;
        break;
    }
    case 10: { /* object */
        int n = 1 + st_pick(r, 3);
        json_t *props = json_object(), *req = json_array();
        long b = 2 + ST_WS;
        for (int i = 0; i < n; i++) {
            char name[16];
            snprintf(name, sizeof name, "p%d%s", i, i == 1 ? "_x" : "");
            long vb;
            json_object_set_new(props, name, st_random_schema(r, depth - 1, &vb));
            if (st_pick(r, 3)) json_array_append_new(req, json_string(name));
            b += (long)strlen(name) + 2 + 1 + 3 * ST_WS + 1 + vb + ST_WS;
        }
        json_object_set_new(s, "type", json_string("object"));
        json_object_set_new(s, "properties", props);
        json_object_set_new(s, "required", req);
        if (st_pick(r, 2)) json_object_set_new(s, "additionalProperties", json_false());
        *max_bytes = b;
        break;
    }
    case 11: { /* array */
        long vb;
        int mn = st_pick(r, 2), mx = mn + st_pick(r, 3);
        json_object_set_new(s, "type", json_string("array"));
        json_object_set_new(s, "items", st_random_schema(r, depth - 1, &vb));
        json_object_set_new(s, "minItems", json_integer(mn));
        json_object_set_new(s, "maxItems", json_integer(mx));
        *max_bytes = 2 + ST_WS + (long)mx * (vb + 2 + 2 * ST_WS);
        break;
    }
    default: { /* anyOf of two, disjoint types */
        long b1, b2;
        json_t *a = json_object(), *b = json_object();
        json_object_set_new(a, "type", json_string("boolean"));
        b1 = 5;
        json_decref(b);
        b = st_random_schema(r, depth - 1, &b2);
        json_t *t = json_object_get(b, "type");
        if (t && json_is_string(t) && !strcmp(json_string_value(t), "boolean")) {
            json_object_set_new(a, "type", json_string("null"));
            b1 = 4;
        }
        if (!t || json_object_get(b, "enum") || json_object_get(b, "const")) {
            json_decref(b);
            b = json_pack("{s:s}", "type", "string");
            json_object_set_new(b, "maxLength", json_integer(3));
            b2 = 20;
        }
        json_object_set_new(s, st_pick(r, 2) ? "anyOf" : "oneOf", json_pack("[oo]", a, b));
        *max_bytes = b1 > b2 ? b1 : b2;
        break;
    }
    }
    if (st_pick(r, 4) == 0) json_object_set_new(s, "description", json_string("ignored annotation"));
    return s;
}

#endif /* PAGODA_SCHEMA_TESTUTIL_H */
