/*
 * harmony.c: gpt-oss's tools block, the TypeScript namespace its chat
 * template writes (see harmony.h). Each branch below is a branch of the
 * template's render_typescript_type / render_tool_namespace macros, in
 * their order, with the whitespace their Jinja tags leave.
 * Not for: rendering messages, reading calls back.
 */
#include "harmony.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request_fields.h"

/* Jinja's truth of a value: absent, null, false, 0, "", [] and {} are false */
static bool truthy(json_t *v)
{
    if (!v || json_is_null(v) || json_is_false(v)) return false;
    if (json_is_string(v)) return json_string_length(v) > 0;
    if (json_is_array(v)) return json_array_size(v) > 0;
    if (json_is_object(v)) return json_object_size(v) > 0;
    if (json_is_integer(v)) return json_integer_value(v) != 0;
    if (json_is_real(v)) return json_real_value(v) != 0.0;
    return true;
}

static bool type_is(json_t *spec, const char *t)
{
    json_t *v = json_object_get(spec, "type");
    return json_is_string(v) && !strcmp(json_string_value(v), t);
}

/* the template's tojson (Python's json.dumps, ensure_ascii off): jansson's
 * text, but a real in Python's shortest round-trip form */
static void tojson(sbuf *b, json_t *v)
{
    if (json_is_real(v)) {
        double d = json_real_value(v);
        char t[40];
        for (int p = 1; p <= 17; p++) {
            snprintf(t, sizeof t, "%.*g", p, d);
            if (strtod(t, NULL) == d) break;
        }
        /* Python writes a whole real with ".0" */
        if (isfinite(d) && !strpbrk(t, ".eEn")) strcat(t, ".0");
        sb_str(b, t);
        return;
    }
    char *s = json_dumps(v, JSON_ENCODE_ANY);
    sb_str(b, s ? s : "null");
    free(s);
}

/* a value concatenated as a string ("... " + value): a string as it is,
 * anything else as its JSON text (where the template would fail) */
static void as_text(sbuf *b, json_t *v)
{
    if (json_is_string(v)) sb_put(b, json_string_value(v), json_string_length(v));
    else tojson(b, v);
}

/* Python's len() of UTF-8 text: its code points */
static size_t n_chars(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) c++;
    return c;
}

static bool in_list(json_t *list, const char *name)
{
    size_t i;
    json_t *v;
    if (!json_is_array(list)) return false;
    json_array_foreach(list, i, v) if (json_is_string(v) && !strcmp(json_string_value(v), name)) return true;
    return false;
}

static void ts_type(sbuf *b, json_t *spec);

static void ts_array(sbuf *b, json_t *spec)
{
    json_t *items = json_object_get(spec, "items");
    if (truthy(items)) {
        static const char *const prim[][2] = {
            {"string", "string[]"}, {"number", "number[]"}, {"integer", "number[]"}, {"boolean", "boolean[]"}};
        const char *p = NULL;
        for (size_t k = 0; k < 4 && !p; k++)
            if (type_is(items, prim[k][0])) p = prim[k][1];
        if (p) {
            sb_str(b, p);
        } else {
            sbuf in = {0};
            ts_type(&in, items);
            const char *t = in.p ? in.p : "";
            if (!strcmp(t, "object | object") || n_chars(t, in.len) > 50) {
                sb_str(b, "any[]");
            } else {
                sb_put(b, t, in.len);
                sb_str(b, "[]");
            }
            free(in.p);
        }
    } else {
        sb_str(b, "any[]");
    }
    if (truthy(json_object_get(spec, "nullable"))) sb_str(b, " | null");
}

static void ts_one_of(sbuf *b, json_t *variants)
{
    /* The template's has_object_variants is set inside its loop, where a
     * Jinja assignment does not reach the outer scope: it stays false, so
     * every oneOf takes this branch. */
    size_t i, n = json_array_size(variants);
    json_t *v;
    json_array_foreach(variants, i, v) {
        ts_type(b, v);
        json_t *d = json_object_get(v, "description");
        if (truthy(d)) {
            sb_str(b, "// ");
            as_text(b, d);
        }
        json_t *def = json_object_get(v, "default");
        if (def) {
            sb_str(b, "                    // default: "); /* the indent before a {{ tag stays */
            tojson(b, def);
        }
        if (i + 1 < n) sb_str(b, " | \n");
    }
}

static void ts_type(sbuf *b, json_t *spec)
{
    json_t *type = json_object_get(spec, "type");
    if (type_is(spec, "array")) {
        ts_array(b, spec);
    } else if (json_is_array(type) && json_array_size(type) > 0) {
        size_t i;
        json_t *t;
        json_array_foreach(type, i, t) {
            if (i) sb_str(b, " | ");
            as_text(b, t);
        }
    } else if (truthy(json_object_get(spec, "oneOf")) && json_is_array(json_object_get(spec, "oneOf"))) {
        ts_one_of(b, json_object_get(spec, "oneOf"));
    } else if (type_is(spec, "string")) {
        json_t *en = json_object_get(spec, "enum");
        if (truthy(en) && json_is_array(en)) {
            size_t i;
            json_t *e;
            sb_str(b, "\"");
            json_array_foreach(en, i, e) {
                if (i) sb_str(b, "\" | \"");
                as_text(b, e);
            }
            sb_str(b, "\"");
        } else {
            sb_str(b, "string");
            if (truthy(json_object_get(spec, "nullable"))) sb_str(b, " | null");
        }
    } else if (type_is(spec, "number") || type_is(spec, "integer")) {
        sb_str(b, "number");
    } else if (type_is(spec, "boolean")) {
        sb_str(b, "boolean");
    } else if (type_is(spec, "object")) {
        json_t *props = json_object_get(spec, "properties");
        if (truthy(props) && json_is_object(props)) {
            json_t *req = json_object_get(spec, "required");
            const char *k;
            json_t *p;
            size_t i = 0, n = json_object_size(props);
            sb_str(b, "{\n");
            json_object_foreach(props, k, p) {
                sb_str(b, k);
                if (!in_list(req, k)) sb_str(b, "?");
                sb_str(b, ": \n                "); /* the template's line break before {{ */
                ts_type(b, p);
                if (++i < n) sb_str(b, ", ");
            }
            sb_str(b, "}");
        } else {
            sb_str(b, "object");
        }
    } else {
        sb_str(b, "any");
    }
}

static void ts_function(sbuf *b, json_t *fn)
{
    json_t *desc = json_object_get(fn, "description");
    json_t *name = json_object_get(fn, "name");
    if (json_is_string(desc)) {
        sb_str(b, "// ");
        sb_str(b, json_string_value(desc));
        sb_str(b, "\n");
    }
    sb_str(b, "type ");
    sb_str(b, json_is_string(name) ? json_string_value(name) : "");
    sb_str(b, " = ");
    json_t *params = json_object_get(fn, "parameters");
    json_t *props = json_object_get(params, "properties");
    if (!truthy(params) || !truthy(props) || !json_is_object(props)) {
        sb_str(b, "() => any;\n\n");
        return;
    }
    json_t *req = json_object_get(params, "required");
    sb_str(b, "(_: {\n");
    const char *k;
    json_t *p;
    json_object_foreach(props, k, p) {
        json_t *pd = json_object_get(p, "description");
        if (truthy(pd)) {
            sb_str(b, "// ");
            as_text(b, pd);
            sb_str(b, "\n");
        }
        sb_str(b, k);
        if (!in_list(req, k)) sb_str(b, "?");
        sb_str(b, ": ");
        ts_type(b, p);
        json_t *def = json_object_get(p, "default");
        if (def) {
            if (truthy(json_object_get(p, "enum"))) {
                sb_str(b, ", // default: ");
                as_text(b, def);
            } else if (truthy(json_object_get(p, "oneOf"))) {
                sb_str(b, "// default: ");
                as_text(b, def);
            } else {
                sb_str(b, ", // default: ");
                tojson(b, def);
            }
        }
        sb_str(b, ",\n");
    }
    sb_str(b, "}) => any;\n\n");
}

char *harmony_tools_ns(json_t *tools)
{
    sbuf b = {0};
    int bad = sb_str(&b, "## functions\n\nnamespace functions {\n\n");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        ts_function(&b, json_is_object(fn) ? fn : t);
    }
    bad |= sb_str(&b, "} // namespace functions");
    if (bad) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
