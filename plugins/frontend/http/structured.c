/*
 * structured.c: structured output and tool calls over HTTP (see
 * structured.h). The spec a request gives (response_format, grammar,
 * regex, choice, or the call format tool_choice "required" / a named
 * function implies) goes to the engine as one constraint; a bad one is a
 * 400 naming the field, found by compiling it here (host->check_constraint;
 * the engine's cache makes the submit's compile free).
 *
 * Tools are written into the chat the Hermes way (NousResearch's
 * function-calling format, which Qwen 2.5 and others also use): the system
 * turn lists the functions as JSON inside <tools></tools> and asks for
 * calls as {"name": ..., "arguments": {...}} inside <tool_call></tool_call>;
 * a tool's result is a "tool" turn holding <tool_response>...</tool_response>.
 * SmolLM2's template has no tool syntax of its own, so this is its
 * format (and every template family's: docs/structured-output.md), the
 * example and the history's calls in the family's own syntax (the XML
 * families, Qwen3-Coder and GLM-4.5: a parameter each argument, its
 * value a string's text or JSON, toolfmt.h's fmt_param_is_text).
 * With tool_choice "required" or a named function the output is
 * constrained to such calls (each call's arguments to its parameters
 * schema); with "auto" the output is free text until the model writes
 * the opener of a call in its family's syntax (<tool_call> for Hermes),
 * and that call is then held to the syntax (free again after it). Calls
 * are read back from the text either way.
 * Not for: the other fields (parse.c) or the plain response (output.c).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "output.h"
#include "reply.h"
#include "structured.h"
#include "api/callmemo.h"
#include "api/harmony.h"
#include "api/toolfmt.h"

#define OPEN_TAG "<tool_call>"
#define CLOSE_TAG "</tool_call>"
#define MAX_PARALLEL_CALLS 8
#define DS_CALLS_BEGIN "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>"
#define DS_CALLS_END "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "end\xEF\xBD\x9C>"
#define DS_CALL_BEGIN "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>"
#define DS_CALL_END "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C>"
#define DS_SEP "<\xEF\xBD\x9Ctool\xE2\x96\x81sep\xEF\xBD\x9C>"

void st_free(st_req *sr) { free(sr->spec); }

/* ------------------------------------------------------------ parsing */

static int set_spec(st_req *sr, int type, char *spec, bool strict, const char *field, perr *pe)
{
    if (sr->type) {
        free(spec);
        return rf_fail(pe, field, "'%s' cannot be combined with '%s': give one constraint on the output",
                       field, sr->field);
    }
    if (type != PAGODA_CONSTRAINT_JSON_OBJECT && !spec) return rf_fail(pe, field, "out of memory");
    sr->type = type;
    sr->spec = spec;
    sr->strict = strict;
    sr->field = field;
    return 0;
}

static int parse_response_format(json_t *rf, st_req *sr, perr *pe)
{
    if (!json_is_object(rf)) return rf_fail(pe, "response_format", "'response_format' must be an object");
    json_t *t = json_object_get(rf, "type");
    if (!json_is_string(t))
        return rf_fail(pe, "response_format", "'response_format.type' must be \"text\", \"json_object\" or "
                       "\"json_schema\"");
    const char *type = json_string_value(t);
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) {
        /* llama.cpp and vLLM take a schema here too */
        json_t *schema = json_object_get(rf, "schema");
        if (schema && !json_is_null(schema))
            return set_spec(sr, PAGODA_CONSTRAINT_JSON_SCHEMA, json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY),
                            false, "response_format", pe);
        return set_spec(sr, PAGODA_CONSTRAINT_JSON_OBJECT, NULL, false, "response_format", pe);
    }
    if (strcmp(type, "json_schema") != 0)
        return rf_fail(pe, "response_format", "'response_format.type' \"%s\" is not one of \"text\", "
                       "\"json_object\", \"json_schema\"", type);
    json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js))
        return rf_fail(pe, "response_format", "'response_format.json_schema' must be an object with "
                       "'name' and 'schema'");
    json_t *schema = json_object_get(js, "schema"), *strict = json_object_get(js, "strict");
    json_t *name = json_object_get(js, "name");
    if (name && !json_is_string(name))
        return rf_fail(pe, "response_format", "'response_format.json_schema.name' must be a string");
    if (!schema || json_is_null(schema))
        return rf_fail(pe, "response_format", "'response_format.json_schema.schema' is required");
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return rf_fail(pe, "response_format", "'response_format.json_schema.schema' must be a JSON Schema "
                       "(an object)");
    if (strict && !json_is_null(strict) && !json_is_boolean(strict))
        return rf_fail(pe, "response_format", "'response_format.json_schema.strict' must be a boolean");
    return set_spec(sr, PAGODA_CONSTRAINT_JSON_SCHEMA, json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY),
                    json_is_true(strict), "response_format", pe);
}

static bool valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-') return false;
    return true;
}

static json_t *tool_fn(json_t *tool) { return json_object_get(tool, "function"); }

static int parse_tools(const pagoda_host *h, json_t *o, st_req *sr, perr *pe)
{
    json_t *tools = json_object_get(o, "tools"), *tc = json_object_get(o, "tool_choice");
    json_t *par = json_object_get(o, "parallel_tool_calls");
    sr->parallel = true;
    if (par && !json_is_null(par)) {
        if (!json_is_boolean(par)) return rf_fail(pe, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
        sr->parallel = json_is_true(par);
    }
    if (!tools || json_is_null(tools)) {
        if (tc && !json_is_null(tc) && !(json_is_string(tc) && !strcmp(json_string_value(tc), "none")))
            return rf_fail(pe, "tool_choice", "'tool_choice' needs 'tools'");
        return 0;
    }
    if (!json_is_array(tools)) return rf_fail(pe, "tools", "'tools' must be a list of {\"type\": \"function\", ...}");
    if (json_array_size(tools) > 128) return rf_fail(pe, "tools", "'tools' takes at most 128 functions");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *type = json_object_get(t, "type"), *fn = tool_fn(t);
        if (!json_is_object(t) || !json_is_string(type) || strcmp(json_string_value(type), "function"))
            return rf_fail(pe, "tools", "tools[%zu] must be {\"type\": \"function\", \"function\": {...}}", i);
        if (!json_is_object(fn)) return rf_fail(pe, "tools", "tools[%zu].function must be an object", i);
        json_t *name = json_object_get(fn, "name"), *params = json_object_get(fn, "parameters");
        json_t *strict = json_object_get(fn, "strict");
        if (!json_is_string(name) || !valid_name(json_string_value(name)))
            return rf_fail(pe, "tools", "tools[%zu].function.name must be 1 to 64 letters, digits, '_' or '-'", i);
        for (size_t k = 0; k < i; k++)
            if (!strcmp(json_string_value(json_object_get(tool_fn(json_array_get(tools, k)), "name")),
                        json_string_value(name)))
                return rf_fail(pe, "tools", "tools[%zu]: the function name '%s' is used twice", i,
                               json_string_value(name));
        if (strict && !json_is_null(strict) && !json_is_boolean(strict))
            return rf_fail(pe, "tools", "tools[%zu].function.strict must be a boolean", i);
        if (params && !json_is_null(params)) {
            /* the parameters schema is checked whether or not a call will be
             * constrained to it: a bad one is the client's error either way */
            if (!json_is_object(params))
                return rf_fail(pe, "tools", "tools[%zu].function.parameters must be a JSON Schema object", i);
            char *txt = json_dumps(params, JSON_COMPACT);
            char err[400] = "";
            if (!h->check_constraint) { /* an older host: submit will find what is wrong */
                free(txt);
                continue;
            }
            int st = txt ? h->check_constraint(h, PAGODA_CONSTRAINT_JSON_SCHEMA, txt, strlen(txt),
                                               json_is_true(strict), err, sizeof err)
                         : PAGODA_ERR_NOMEM;
            free(txt);
            if (st == PAGODA_ERR_INVALID)
                return rf_fail(pe, "tools", "tools[%zu].function.parameters: %s", i, err);
        }
    }
    sr->tools = json_array_size(tools) ? tools : NULL;
    sr->tool_choice = sr->tools ? ST_TOOLS_AUTO : ST_TOOLS_NONE;
    if (!tc || json_is_null(tc)) return 0;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (!strcmp(s, "none")) sr->tool_choice = ST_TOOLS_NONE;
        else if (!strcmp(s, "auto")) sr->tool_choice = sr->tools ? ST_TOOLS_AUTO : ST_TOOLS_NONE;
        else if (!strcmp(s, "required")) sr->tool_choice = ST_TOOLS_REQUIRED;
        else return rf_fail(pe, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                            "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    } else {
        json_t *fn = json_object_get(tc, "function");
        json_t *name = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
        if (!json_is_string(name))
            return rf_fail(pe, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                           "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        sr->named = json_string_value(name);
        sr->tool_choice = ST_TOOLS_NAMED;
    }
    if (sr->tool_choice >= ST_TOOLS_REQUIRED && !sr->tools)
        return rf_fail(pe, "tool_choice", "'tool_choice' asks for a call but 'tools' is empty");
    if (sr->tool_choice == ST_TOOLS_NAMED) {
        bool found = false;
        json_array_foreach(sr->tools, i, t) found |= !strcmp(json_string_value(json_object_get(tool_fn(t), "name")), sr->named);
        if (!found) return rf_fail(pe, "tool_choice", "'tool_choice' names '%s', which is not in 'tools'", sr->named);
    }
    return 0;
}

/* The code points of UTF-8 s (at most max; a bad byte reads as itself). */
static int code_points(const char *s, uint32_t *cp, int max)
{
    int n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && n < max;) {
        int k = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3 : (*p & 0xF8) == 0xF0 ? 4 : 1;
        uint32_t c = k == 1 ? *p : *p & (0x7Fu >> k);
        int j = 1;
        for (; j < k && (p[j] & 0xC0) == 0x80; j++) c = c << 6 | (p[j] & 0x3F);
        if (j < k) { /* cut short: the byte alone */
            c = *p;
            j = 1;
        }
        cp[n++] = c;
        p += j;
    }
    return n;
}

/* one code point for a GBNF literal or class: printable ASCII as itself
 * (but the characters either syntax gives a meaning), else \UHHHHHHHH */
static void gcp(sbuf *g, uint32_t c)
{
    char e[16];
    if (c > 0x20 && c < 0x7F && !strchr("\"\\[]^-", (int)c))
        snprintf(e, sizeof e, "%c", (char)c);
    else
        snprintf(e, sizeof e, "\\U%08X", (unsigned)c);
    sb_str(g, e);
}

#define MAX_OPENER 64 /* code points */

/* Free text that never holds `opener`: the output of "auto" up to the
 * model's first call, and between and after calls. A right-linear grammar
 * of the opener's matcher (Knuth-Morris-Pratt over code points): PK is
 * "the text ends with the opener's first K code points"; each code point
 * goes where the matcher would (a break in the match back to the longest
 * prefix still matched, P0 for any code point not in the opener), and the
 * one that would finish the opener is the one text cannot take: that is
 * where a call begins. Every PK may end, so a text may stop anywhere, even
 * inside what looks like the start of an opener. P is the rules' prefix. */
static void text_rules(sbuf *g, const char *P, const char *opener)
{
    uint32_t cp[MAX_OPENER];
    int fail[MAX_OPENER], n = code_points(opener, cp, MAX_OPENER);
    fail[0] = 0;
    for (int i = 1, k = 0; i < n; i++) {
        while (k && cp[i] != cp[k]) k = fail[k - 1];
        if (cp[i] == cp[k]) k++;
        fail[i] = k;
    }
    char buf[64];
    for (int k = 0; k < n; k++) {
        snprintf(buf, sizeof buf, "%s%d ::= \"\"", P, k);
        sb_str(g, buf);
        uint32_t excl[MAX_OPENER];
        int n_excl = 0;
        for (int d = 0; d < n; d++) {
            bool seen = false; /* each code point of the opener once */
            for (int e = 0; e < d; e++) seen |= cp[e] == cp[d];
            if (seen) continue;
            int j = k; /* where cp[d] takes the matcher from PK */
            while (j && cp[j] != cp[d]) j = fail[j - 1];
            j = cp[j] == cp[d] ? j + 1 : 0;
            if (!j) continue; /* the class below: back to P0 */
            excl[n_excl++] = cp[d];
            if (j == n) continue; /* would finish the opener */
            sb_str(g, " | \"");
            gcp(g, cp[d]);
            snprintf(buf, sizeof buf, "\" %s%d", P, j);
            sb_str(g, buf);
        }
        sb_str(g, " | [^");
        for (int e = 0; e < n_excl; e++) gcp(g, excl[e]);
        snprintf(buf, sizeof buf, "] %s0\n", P);
        sb_str(g, buf);
    }
}

/* s as a GBNF string literal */
static void lit(sbuf *g, const char *s)
{
    sb_str(g, "\"");
    for (const char *p = s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char e[3] = {'\\', *p, 0};
            sb_str(g, e);
        } else if (*p == '\n') {
            sb_str(g, "\\n");
        } else {
            sb_put(g, p, 1);
        }
    }
    sb_str(g, "\"");
}

/* The tool-call markup that is one token in its family's vocabulary but
 * not of the <|name|> shape: Hermes/Qwen's tags, Mistral's [TOOL_CALLS]
 * (a reference <[TOOL_CALLS]>), GLM-4.5's argument tags. */
static const char *const MARKUP[] = {OPEN_TAG, CLOSE_TAG, "[TOOL_CALLS]", "<arg_key>", "</arg_key>", "<arg_value>",
                                     "</arg_value>"};

/* s as GBNF: its markup tokens (<|name|>, DeepSeek's <｜name｜>, MARKUP)
 * as token references, so a vocabulary with that control token must
 * write the token itself, never its spelling in plain pieces (which
 * re-tokenizes as the one token, so a spelled call header would miss the
 * prefix cache on the next turn); a vocabulary without it reads the
 * reference as its text. The rest as literals. Empty s: the empty
 * literal. */
static void mlit(sbuf *g, const char *s)
{
    static const char *const open[] = {"<|", "<\xef\xbd\x9c"}, *const close[] = {"|>", "\xef\xbd\x9c>"};
    const char *p = s;
    bool any = false;
    while (*p) {
        const char *best = NULL, *end = NULL;
        for (int k = 0; k < 2; k++) {
            const char *a = strstr(p, open[k]);
            const char *b = a ? strstr(a + strlen(open[k]), close[k]) : NULL;
            if (b && (!best || a < best)) {
                best = a;
                end = b + strlen(close[k]);
            }
        }
        for (const char *q = best; q && q < end; q++)
            if (*q == ' ' || *q == '\n' || *q == '"') best = NULL; /* not one token's text */
        for (size_t k = 0; k < sizeof MARKUP / sizeof MARKUP[0]; k++) {
            const char *a = strstr(p, MARKUP[k]);
            if (a && (!best || a < best)) {
                best = a;
                end = a + strlen(MARKUP[k]);
            }
        }
        if (!best) break;
        if (best > p) {
            char *t = strndup(p, (size_t)(best - p));
            if (any) sb_str(g, " ");
            lit(g, t ? t : "");
            free(t);
            any = true;
        }
        if (any) sb_str(g, " ");
        if (*best == '[') sb_str(g, "<"); /* <[NAME]>: the token [NAME] */
        sb_put(g, best, (size_t)(end - best));
        if (*best == '[') sb_str(g, ">");
        any = true;
        p = end;
    }
    if (*p || !any) {
        if (any) sb_str(g, " ");
        lit(g, p);
    }
}

/* How each family writes its calls (what toolfmt.c reads back): around
 * all calls, between them, around one, and around one function's
 * arguments (the name between head_a and head_b); under "auto", the
 * opener free text cannot hold, where a call begins (none: Llama 3's call
 * is the whole reply). */
static const struct call_syntax {
    const char *sec_open, *sec_close, *sep, *open, *close, *head_a, *head_b, *tail, *opener;
    bool one; /* one call a reply */
    /* the XML families: each parameter par_a NAME par_b VALUE par_c, the
     * value a string's text (up to no `stop`) or JSON (fmt_param_is_text) */
    const char *par_a, *par_b, *par_c, *stop;
    /* what a required or named reply writes before its calls: GLM-4.5's
     * empty reasoning, as its template renders a past call's turn (the
     * reply then is the next turn's history, byte for byte) */
    const char *lead;
} SYNTAX[FMT_COUNT] = {
    [FMT_HERMES] = {"", "", "\n", OPEN_TAG "\n", "\n" CLOSE_TAG, "{\"name\": \"", "\", \"arguments\": ", "}", OPEN_TAG,
                    false},
    [FMT_LLAMA3] = {"", "", "", "", "", "{\"name\": \"", "\", \"parameters\": ", "}", "", true},
    [FMT_DEEPSEEK] = {DS_CALLS_BEGIN, DS_CALLS_END, "\n", DS_CALL_BEGIN "function" DS_SEP, DS_CALL_END, "",
                      "\n```json\n", "\n```", DS_CALLS_BEGIN, false},
    [FMT_DEEPSEEK31] = {DS_CALLS_BEGIN, DS_CALLS_END, "", DS_CALL_BEGIN, DS_CALL_END, "", DS_SEP, "", DS_CALLS_BEGIN,
                        false},
    [FMT_KIMI] = {"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "", "<|tool_call_begin|>functions.",
                  "<|tool_call_end|>", "", ":0<|tool_call_argument_begin|>", "", "<|tool_calls_section_begin|>", false},
    [FMT_HARMONY] = {"", "", "", "<|channel|>commentary to=functions.", "", "", " <|constrain|>json<|message|>", "",
                     "<|channel|>commentary to=functions.", true},
    [FMT_MISTRAL] = {"", "", "", "[TOOL_CALLS][", "]", "{\"name\": \"", "\", \"arguments\": ", "}", "[TOOL_CALLS]",
                     true},
    [FMT_QWEN3CODER] = {"", "", "\n", OPEN_TAG "\n", CLOSE_TAG, "<function=", ">\n", "</function>\n", OPEN_TAG, false,
                        "<parameter=", ">\n", "\n</parameter>\n", "</parameter>"},
    [FMT_GLM45] = {"", "", "\n", OPEN_TAG, CLOSE_TAG, "", "\n", "", OPEN_TAG, false, "<arg_key>",
                   "</arg_key>\n<arg_value>", "</arg_value>\n", "</arg_value>", "\n<think></think>\n"},
};

#define PY_TAG "<|python_tag|>"

/* Llama 3 under "auto": the reply is a call (the whole of it, after
 * <|python_tag|> or not) or text that does not start, after its leading
 * space, with what starts a call: a '{' or the whole tag (toolfmt.c reads
 * such a reply as a call, so free text may not begin one). */
static void llama3_auto_rules(sbuf *g)
{
    uint32_t cp[MAX_OPENER];
    int n = code_points(PY_TAG, cp, MAX_OPENER);
    char buf[64];
    sb_str(g, "root ::= calls | ");
    mlit(g, PY_TAG); /* the tag's token where the vocabulary has it, as Llama 3 writes it */
    sb_str(g, " calls | s0\n");
    sb_str(g, "s0 ::= \"\" | [ \\t\\n\\r] s0 | [^{ \\t\\n\\r");
    gcp(g, cp[0]);
    sb_str(g, "] any | \"");
    gcp(g, cp[0]);
    sb_str(g, "\" s1\n");
    for (int k = 1; k < n; k++) { /* sK: the reply so far is the tag's first K code points */
        snprintf(buf, sizeof buf, "s%d ::= \"\"", k);
        sb_str(g, buf);
        if (k + 1 < n) {
            sb_str(g, " | \"");
            gcp(g, cp[k]);
            snprintf(buf, sizeof buf, "\" s%d", k + 1);
            sb_str(g, buf);
        }
        sb_str(g, " | [^");
        gcp(g, cp[k]);
        sb_str(g, "] any\n");
    }
    sb_str(g, "any ::= \"\" | [^\\x00] any\n");
}

/* a literal and a space, unless it is empty */
static void lit_sp(sbuf *g, const char *s)
{
    if (!*s) return;
    mlit(g, s);
    sb_str(g, " ");
}

/* A property's schema for %json on its own: the parameters' $defs and
 * definitions beside it, so a "#/$defs/..." reference still resolves
 * (malloc'd text). */
static char *prop_schema_text(json_t *params, json_t *ps)
{
    json_t *defs = json_object_get(params, "$defs"), *old = json_object_get(params, "definitions");
    if (!json_is_object(ps) || (!defs && !old)) return json_dumps(ps, JSON_COMPACT | JSON_ENCODE_ANY);
    json_t *c = json_copy(ps);
    if (defs && !json_object_get(c, "$defs")) json_object_set(c, "$defs", defs);
    if (old && !json_object_get(c, "definitions")) json_object_set(c, "definitions", old);
    char *t = json_dumps(c, JSON_COMPACT);
    json_decref(c);
    return t;
}

/* whether v is a list of strings only */
static bool all_strings(json_t *v)
{
    size_t i;
    json_t *x;
    if (!json_is_array(v) || !json_array_size(v)) return false;
    json_array_foreach(v, i, x) if (!json_is_string(x)) return false;
    return true;
}

/* One parameter of an XML family's call: par_a NAME par_b, the value (a
 * string's text: its enum's or const's strings, else any text without
 * the family's stop, rule v0; JSON: %json its schema), par_c. True when
 * it uses v0. */
static bool xml_param(sbuf *g, const struct call_syntax *c, const char *name, json_t *params, json_t *ps)
{
    bool text = false;
    sbuf head = {0};
    sb_str(&head, c->par_a);
    sb_str(&head, name);
    sb_str(&head, c->par_b);
    mlit(g, head.p ? head.p : "");
    free(head.p);
    sb_str(g, " ");
    json_t *e = json_object_get(ps, "enum"), *k = json_object_get(ps, "const");
    if (fmt_param_is_text(ps) && (all_strings(e) || json_is_string(k))) {
        sb_str(g, "(");
        if (json_is_string(k)) {
            lit(g, json_string_value(k));
        } else {
            size_t i;
            json_t *v;
            json_array_foreach(e, i, v) {
                if (i) sb_str(g, " | ");
                lit(g, json_string_value(v));
            }
        }
        sb_str(g, ")");
    } else if (fmt_param_is_text(ps)) {
        sb_str(g, "v0");
        text = true;
    } else {
        char *t = prop_schema_text(params, ps);
        sb_str(g, "%json ");
        sb_str(g, t ? t : "{}");
        free(t);
    }
    sb_str(g, " ");
    mlit(g, c->par_c);
    return text;
}

/* An XML family's arguments: the schema's properties in its order, each
 * required one once, each other one at most once (the reader takes any
 * order; the constraint holds the schema's); with no properties, any
 * parameters named [A-Za-z0-9_.-]+ with text values. True when the rules
 * use v0 (the text value). */
static bool xml_params(sbuf *g, const struct call_syntax *c, json_t *params)
{
    json_t *props = json_object_get(params, "properties"), *req = json_object_get(params, "required");
    bool text = false;
    if (!json_is_object(props)) {
        json_t *ap = json_object_get(params, "additionalProperties");
        if (json_is_false(ap)) return false; /* no parameters at all */
        sb_str(g, " (");
        mlit(g, c->par_a);
        sb_str(g, " ([A-Za-z0-9_.] | \"-\")+ ");
        mlit(g, c->par_b);
        sb_str(g, " v0 ");
        mlit(g, c->par_c);
        sb_str(g, ")*");
        return true;
    }
    const char *k;
    json_t *ps;
    json_object_foreach(props, k, ps) {
        bool must = false;
        size_t i;
        json_t *r;
        json_array_foreach(req, i, r) must |= json_is_string(r) && !strcmp(json_string_value(r), k);
        sb_str(g, must ? " " : " (");
        text |= xml_param(g, c, k, params, ps);
        if (!must) sb_str(g, ")?");
    }
    return text;
}

/* The grammar of the calls tool_choice asks for, in the family's own
 * syntax: one call (a named function, parallel_tool_calls false, or a
 * family that writes one a reply) or up to MAX_PARALLEL_CALLS, each
 * function's arguments valid for its parameters. With "auto" a lazy
 * grammar: free text (text_rules) comes first, and between and after the
 * calls: the model writes what it likes until it writes the family's
 * opener (<tool_call>, DeepSeek's and Kimi's section markers, harmony's
 * commentary to=functions.), and from that code point on the calls are
 * held to the syntax (Llama 3: a reply that starts as a call is one). */
static char *calls_grammar(const st_req *sr, int fmt, bool think_open, bool *strict)
{
    bool autoc = sr->tool_choice == ST_TOOLS_AUTO;
    const struct call_syntax *c = &SYNTAX[fmt > FMT_HERMES && fmt < FMT_COUNT ? fmt : FMT_HERMES];
    sbuf g = {0};
    char buf[96];
    *strict = false;
    bool many = sr->tool_choice != ST_TOOLS_NAMED && sr->parallel && !c->one;
    if (autoc && !*c->opener) {
        llama3_auto_rules(&g);
    } else if (autoc && !*c->sec_open) { /* text, a call, text, ... (Hermes, harmony) */
        snprintf(buf, sizeof buf, "root ::= t0 (call t0){0,%d}\n", many ? MAX_PARALLEL_CALLS : 1);
        sb_str(&g, buf);
        text_rules(&g, "t", c->opener);
    } else if (autoc) { /* text, one section of calls, text */
        sb_str(&g, "root ::= t0 (calls t0)?\n");
        text_rules(&g, "t", c->opener);
    }
    if (!autoc || *c->sec_open || !*c->opener) { /* the calls together: all a required reply holds */
        sb_str(&g, autoc ? "calls ::= " : "root ::= ");
        /* a prompt that opened the reasoning (DeepSeek-R1's, Qwen3.5's):
         * closed empty first, as Qwen3.5's template writes a turn without
         * reasoning back, so the calls are read as calls */
        if (!autoc && think_open)
            lit_sp(&g, fmt == FMT_DEEPSEEK || fmt == FMT_DEEPSEEK31 ? "</think>" : "\n</think>\n\n");
        if (!autoc && c->lead) lit_sp(&g, c->lead);
        lit_sp(&g, c->sec_open);
        sb_str(&g, "call");
        if (many) {
            sb_str(&g, " (");
            lit_sp(&g, c->sep);
            snprintf(buf, sizeof buf, "call){0,%d}", MAX_PARALLEL_CALLS - 1);
            sb_str(&g, buf);
        }
        if (*c->sec_close) sb_str(&g, " ");
        if (*c->sec_close) mlit(&g, c->sec_close);
        sb_str(&g, "\n");
    }
    sb_str(&g, "call ::= ");
    lit_sp(&g, c->open);
    sb_str(&g, "(");
    size_t i;
    json_t *t;
    int k = 0;
    json_array_foreach(sr->tools, i, t) {
        const char *name = json_string_value(json_object_get(tool_fn(t), "name"));
        if (sr->tool_choice == ST_TOOLS_NAMED && strcmp(name, sr->named)) continue;
        snprintf(buf, sizeof buf, "%sfn%zu", k++ ? " | " : "", i);
        sb_str(&g, buf);
    }
    sb_str(&g, ")");
    if (*c->close) sb_str(&g, " ");
    if (*c->close) mlit(&g, c->close);
    sb_str(&g, "\n");
    bool text_value = false; /* an XML family's rules use v0 */
    json_array_foreach(sr->tools, i, t) {
        json_t *fn = tool_fn(t);
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (sr->tool_choice == ST_TOOLS_NAMED && strcmp(name, sr->named)) continue;
        json_t *params = json_object_get(fn, "parameters");
        *strict |= json_is_true(json_object_get(fn, "strict"));
        snprintf(buf, sizeof buf, "fn%zu ::= ", i);
        sb_str(&g, buf);
        /* the head; names are [A-Za-z0-9_-]: nothing to escape but the markup's own */
        sbuf head = {0};
        sb_str(&head, c->head_a);
        sb_str(&head, name);
        sb_str(&head, c->head_b);
        mlit(&g, head.p ? head.p : "");
        free(head.p);
        if (c->par_a) { /* Qwen3-Coder, GLM-4.5: the parameters one by one */
            json_t *none = json_object();
            text_value |= xml_params(&g, c, params && json_is_object(params) ? params : none);
            json_decref(none);
        } else { /* the arguments as one JSON value of the schema */
            char *ptxt = params && !json_is_null(params) ? json_dumps(params, JSON_COMPACT)
                                                         : strdup("{\"type\":\"object\"}");
            sb_str(&g, " %json ");
            sb_str(&g, ptxt ? ptxt : "{}");
            free(ptxt);
        }
        if (*c->tail) sb_str(&g, " ");
        if (*c->tail) mlit(&g, c->tail);
        sb_str(&g, "\n");
    }
    if (text_value) text_rules(&g, "v", c->stop); /* a string's text: anything but the stop */
    return g.p;
}

static const char *const guided[][2] = {
    {"grammar", "g"}, {"guided_grammar", "g"}, {"regex", "r"}, {"guided_regex", "r"},
    {"choice", "c"}, {"guided_choice", "c"}, {"guided_json", "j"},
};

int st_parse(const pagoda_host *h, json_t *o, int kind, int fmt, bool think_open, st_req *sr, perr *pe)
{
    memset(sr, 0, sizeof *sr);
    json_t *rf = json_object_get(o, "response_format");
    if (rf && !json_is_null(rf) && parse_response_format(rf, sr, pe) < 0) return -1;
    for (size_t k = 0; k < sizeof guided / sizeof guided[0]; k++) {
        const char *f = guided[k][0];
        json_t *v = json_object_get(o, f);
        if (!v || json_is_null(v)) continue;
        switch (guided[k][1][0]) {
        case 'g':
        case 'r':
            if (!json_is_string(v)) return rf_fail(pe, f, "'%s' must be a string", f);
            if (set_spec(sr, guided[k][1][0] == 'g' ? PAGODA_CONSTRAINT_GRAMMAR : PAGODA_CONSTRAINT_REGEX,
                         strndup(json_string_value(v), json_string_length(v)), false, f, pe) < 0)
                return -1;
            break;
        case 'c':
            if (!json_is_array(v) || !json_array_size(v))
                return rf_fail(pe, f, "'%s' must be a non-empty list of strings", f);
            if (set_spec(sr, PAGODA_CONSTRAINT_CHOICE, json_dumps(v, JSON_COMPACT), false, f, pe) < 0) return -1;
            break;
        default: /* guided_json: a schema, or its text */
            if (json_is_string(v)) {
                if (set_spec(sr, PAGODA_CONSTRAINT_JSON_SCHEMA, strndup(json_string_value(v), json_string_length(v)),
                             false, f, pe) < 0)
                    return -1;
            } else if (set_spec(sr, PAGODA_CONSTRAINT_JSON_SCHEMA, json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY),
                                false, f, pe) < 0) {
                return -1;
            }
            break;
        }
    }
    if (kind == KIND_CHAT && parse_tools(h, o, sr, pe) < 0) return -1;
    if (kind != KIND_CHAT && json_object_get(o, "tools") && !json_is_null(json_object_get(o, "tools")))
        return rf_fail(pe, "tools", "'tools' is for /v1/chat/completions");
    if (sr->tool_choice >= ST_TOOLS_REQUIRED) {
        if (sr->type)
            return rf_fail(pe, sr->field, "'%s' cannot be combined with a tool_choice that requires a call",
                           sr->field);
        bool strict;
        char *g = calls_grammar(sr, fmt, think_open, &strict);
        if (set_spec(sr, PAGODA_CONSTRAINT_GRAMMAR, g, strict, "tool_choice", pe) < 0) return -1;
    } else if (sr->tool_choice == ST_TOOLS_AUTO && sr->type) {
        return rf_fail(pe, sr->field, "'%s' leaves the model no way to call a tool: with 'tools', set "
                       "'tool_choice' to \"none\" or drop '%s'", sr->field, sr->field);
    } else if (sr->tool_choice == ST_TOOLS_AUTO && h->check_constraint) {
        bool strict;
        char *g = calls_grammar(sr, fmt, think_open, &strict);
        if (set_spec(sr, PAGODA_CONSTRAINT_GRAMMAR, g, strict, "tool_choice", pe) < 0) return -1;
    }
    if (!sr->type || !h->check_constraint) return 0;
    char err[512] = "";
    int st = h->check_constraint(h, sr->type, sr->spec, sr->spec ? strlen(sr->spec) : 0, sr->strict, err,
                                 sizeof err);
    if (st == PAGODA_OK) return 0;
    if (st == PAGODA_ERR_UNSUPPORTED && sr->tool_choice == ST_TOOLS_AUTO) {
        /* no constraint engine ([engine] constraint = none): "auto" still
         * works, its calls read back from free text */
        free(sr->spec);
        sr->spec = NULL;
        sr->type = 0;
        sr->field = NULL;
        return 0;
    }
    if (st == PAGODA_ERR_NOMEM) return rf_fail(pe, sr->field, "out of memory compiling '%s'", sr->field);
    /* the message starts with the spec's kind (json_schema: ..., grammar: ...) */
    return rf_fail(pe, sr->field, "%s", err[0] ? err : pagoda_status_str(st));
}

/* ------------------------------------------------------------ messages */

static int own(char ***owned, int n, int i, char *s)
{
    (void)n;
    free((*owned)[i]);
    (*owned)[i] = s;
    return s ? 0 : -1;
}


/* One earlier call of the conversation: its id (the client's), name, and
 * the index it had in its assistant message (Kimi's functions.N:IDX). */
typedef struct past_call {
    const char *id, *name;
    int index;
} past_call;

/* A call written into an assistant turn in the family's own syntax (the
 * arguments as the model would have written them: the object itself), or
 * as the model wrote this very call when it did (callmemo.h): the same
 * call, and the next turn's prefix keeps its tokens. */
static void write_call(sbuf *b, int fmt, const char *name, const char *args, int k, int n_calls)
{
    char *span = callmemo_render(fmt, name, args, k);
    char *written = span ? callmemo_written(fmt, name, span) : NULL;
    const char *s = written ? written : span ? span : "";
    switch (fmt) {
    case FMT_DEEPSEEK:
    case FMT_DEEPSEEK31: /* V3 puts a newline between calls, V3.1 none */
        if (k && fmt == FMT_DEEPSEEK) sb_str(b, "\n");
        sb_str(b, DS_CALL_BEGIN);
        sb_str(b, s);
        sb_str(b, DS_CALL_END);
        break;
    case FMT_KIMI:
        sb_str(b, "<|tool_call_begin|>");
        sb_str(b, s);
        sb_str(b, "<|tool_call_end|>");
        break;
    case FMT_LLAMA3:
        if (k) sb_str(b, "\n");
        sb_str(b, s);
        break;
    case FMT_MISTRAL:
        if (n_calls == 1) { /* [TOOL_CALLS] and its list of one, as the model wrote it when it did */
            sb_str(b, "[TOOL_CALLS]");
            sb_str(b, s);
            break;
        }
        /* several: the template's one list, [TOOL_CALLS][{a}, {b}] (each
         * span is a list of one call; the ']' after the last: the caller) */
        {
            size_t n = strlen(s);
            while (n && (s[n - 1] == ' ' || s[n - 1] == '\n')) n--;
            while (n && (*s == ' ' || *s == '\n')) s++, n--;
            if (n >= 2 && s[0] == '[' && s[n - 1] == ']') s++, n -= 2;
            sb_str(b, k ? ", " : "[TOOL_CALLS][");
            sb_put(b, s, n);
        }
        break;
    default:
        if (fmt == FMT_QWEN3CODER && !k) {
            /* Qwen3-Coder's and Qwen3.5's templates: a blank line after the
             * turn's text (after its reasoning block), none without one */
            const char *t = b->p ? b->p : "", *e;
            while ((e = strstr(t, "</think>"))) t = e + 8;
            if (t[strspn(t, " \t\r\n")]) sb_str(b, "\n\n");
        } else if (b->len) {
            sb_str(b, "\n");
        }
        sb_str(b, OPEN_TAG);
        sb_str(b, s);
        sb_str(b, CLOSE_TAG);
    }
    free(written);
    free(span);
}

/* role and content in one allocation (owned), for roles built here */
static char *role_content(pagoda_chat_message *m, const char *role, size_t rl, const char *content)
{
    size_t cl = strlen(content);
    char *p = malloc(rl + 1 + cl + 1);
    if (!p) return NULL;
    memcpy(p, role, rl);
    p[rl] = 0;
    memcpy(p + rl + 1, content, cl + 1);
    m->role = p;
    m->content = p + rl + 1;
    return p;
}

/* A call's arguments as the model would have written them: the object
 * itself when the string holds one (malloc'd; NULL when out of memory). */
static char *call_args(json_t *args)
{
    json_t *av = json_is_string(args) ? json_loads(json_string_value(args), JSON_DECODE_ANY, NULL)
                                      : json_incref(args);
    if (!av) av = json_object(); /* none, or a string that is no JSON */
    char *at = av ? json_dumps(av, JSON_ENCODE_ANY) : NULL;
    json_decref(av);
    return at;
}

/* An assistant message's reasoning, by the names clients send it under
 * (vLLM's and DeepSeek's reasoning_content, reasoning, the gpt-oss
 * template's thinking), or NULL. */
static const char *reasoning_of(json_t *m)
{
    static const char *const keys[] = {"reasoning_content", "reasoning", "thinking"};
    for (size_t k = 0; k < 3; k++) {
        json_t *v = json_object_get(m, keys[k]);
        if (json_is_string(v) && json_string_length(v)) return json_string_value(v);
    }
    return NULL;
}

/* A call's name and arguments (a string or an object) out of
 * messages[i].tool_calls[k]; 0, or -1 with pe filled. Arguments text that
 * is no JSON is refused (the prompt writes a call's arguments as JSON, or
 * in the XML families as one parameter per key, and would lose it); an
 * empty string is a call without arguments. In the XML families the
 * arguments must be an object: their templates have nowhere to write a
 * list or a bare value. */
static int call_fields(json_t *call, int fmt, int i, size_t k, json_t **name, json_t **args, perr *pe)
{
    json_t *fn = json_object_get(call, "function");
    *name = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
    *args = json_is_object(fn) ? json_object_get(fn, "arguments") : NULL;
    if (!json_is_string(*name) || !(!*args || json_is_string(*args) || json_is_object(*args)))
        return rf_fail(pe, "messages", "messages[%d].tool_calls[%zu] must be {\"function\": "
                       "{\"name\": ..., \"arguments\": \"...\"}}", i, k);
    if (!json_is_string(*args)) return 0;
    const char *t = json_string_value(*args);
    t += strspn(t, " \t\r\n");
    if (!*t) return 0;
    json_t *v = json_loads(t, JSON_DECODE_ANY, NULL);
    bool xml = fmt == FMT_QWEN3CODER || fmt == FMT_GLM45;
    int bad = !v ? 1 : xml && !json_is_object(v) ? 2 : 0;
    json_decref(v);
    if (bad == 1)
        return rf_fail(pe, "messages", "messages[%d].tool_calls[%zu].function.arguments is not JSON: give the "
                       "call's arguments as a JSON object, as text or as an object", i, k);
    if (bad == 2)
        return rf_fail(pe, "messages", "messages[%d].tool_calls[%zu].function.arguments must be a JSON object: "
                       "this model's template writes each argument as a parameter of the call", i, k);
    return 0;
}

/* The earlier call a tool message m answers: the one its tool_call_id
 * names, else the latest (NULL when there was none). */
static const past_call *call_answered(json_t *m, const past_call *past, int n_past)
{
    json_t *tid = json_object_get(m, "tool_call_id");
    const past_call *pc = n_past ? &past[n_past - 1] : NULL;
    for (int j = 0; json_is_string(tid) && j < n_past; j++)
        if (past[j].id && !strcmp(past[j].id, json_string_value(tid))) pc = &past[j];
    return pc;
}

/* harmony (gpt-oss): the messages rebuilt, since one assistant message
 * with calls becomes several, as gpt-oss's template writes them: the tools
 * namespace (harmony.h) as a "tools" message first; an assistant's text
 * (or its reasoning) beside its calls as an "analysis" message, unless a
 * later assistant message answers without calls (the template drops it
 * then); each call a message "assistant to=functions.NAME" holding its
 * arguments (the template writes only a turn's first call; harmony gives
 * every call a message of its own, the first one as the template does),
 * or, when the memo holds the call as the model wrote it, a message
 * "assistant written" holding that text (header and arguments);
 * a tool result as "functions.NAME", the call its tool_call_id names (else
 * the latest). core/model/chat_template.c renders these roles, so a
 * client may give only system, developer, user, assistant and tool (any
 * other role is refused, naming messages[i].role). */
static int harmony_messages(json_t *o, const st_req *sr, pagoda_chat_message **msgs, char ***owned, int *n,
                            perr *pe)
{
    json_t *arr = json_object_get(o, "messages");
    size_t cap = (size_t)*n + 1;
    for (int i = 0; i < *n; i++) {
        json_t *calls = json_object_get(json_array_get(arr, (size_t)i), "tool_calls");
        if (json_is_array(calls)) cap += json_array_size(calls) + 1;
    }
    pagoda_chat_message *nm = calloc(cap, sizeof *nm);
    char **no = calloc(cap, sizeof *no);
    int *src = malloc(cap * sizeof *src); /* the old message whose owned text a slot takes over */
    int k = 0, st = 0;
    past_call past[64];
    int n_past = 0;
    if (!nm || !no || !src) {
        st = rf_fail(pe, "messages", "out of memory");
        goto out;
    }
    for (size_t j = 0; j < cap; j++) src[j] = -1;
    if (sr->tools && json_array_size(sr->tools)) {
        char *ns = harmony_tools_ns(sr->tools);
        if (!ns) {
            st = rf_fail(pe, "messages", "out of memory");
            goto out;
        }
        nm[k] = (pagoda_chat_message){.role = "tools", .content = ns};
        no[k++] = ns;
    }
    for (int i = 0; i < *n; i++) {
        json_t *m = json_array_get(arr, (size_t)i);
        const char *role = (*msgs)[i].role;
        const char *content = (*msgs)[i].content ? (*msgs)[i].content : "";
        json_t *calls = json_object_get(m, "tool_calls");
        if (!strcmp(role, "assistant") && calls && !json_is_null(calls)) {
            if (!json_is_array(calls)) {
                st = rf_fail(pe, "messages", "messages[%d].tool_calls must be a list", i);
                goto out;
            }
            const char *reason = reasoning_of(m);
            if (reason && *content) {
                st = rf_fail(pe, "messages", "messages[%d] has both content and reasoning beside its tool_calls: "
                             "harmony keeps one analysis message; give one of them", i);
                goto out;
            }
            bool later_final = false;
            for (size_t j = (size_t)i + 1; j < json_array_size(arr); j++) {
                json_t *f = json_array_get(arr, j);
                json_t *fc = json_object_get(f, "tool_calls");
                later_final |= json_is_string(json_object_get(f, "role")) &&
                               !strcmp(json_string_value(json_object_get(f, "role")), "assistant") &&
                               (!fc || json_is_null(fc));
            }
            if (!later_final && (reason || *content)) {
                nm[k] = (pagoda_chat_message){.role = "analysis", .content = reason ? reason : content};
                src[k++] = reason ? -1 : i;
            }
            size_t c;
            json_t *call;
            json_array_foreach(calls, c, call) {
                json_t *name, *args;
                if ((st = call_fields(call, FMT_HARMONY, i, c, &name, &args, pe))) goto out;
                char *at = call_args(args);
                /* the call message as the model wrote it when it did
                 * (callmemo.h): header and arguments, as role "assistant
                 * written"; else the template's role and the arguments */
                char *span = at ? callmemo_render(FMT_HARMONY, json_string_value(name), at, (int)c) : NULL;
                char *wr = span ? callmemo_written(FMT_HARMONY, json_string_value(name), span) : NULL;
                sbuf r = {0};
                sb_str(&r, wr ? "assistant written" : "assistant to=functions.");
                if (!wr) sb_str(&r, json_string_value(name));
                no[k] = at && r.p ? role_content(&nm[k], r.p, r.len, wr ? wr : at) : NULL;
                free(wr);
                free(span);
                free(at);
                free(r.p);
                if (!no[k++]) {
                    st = rf_fail(pe, "messages", "out of memory");
                    goto out;
                }
                json_t *id = json_object_get(call, "id");
                if (n_past < 64)
                    past[n_past++] = (past_call){json_is_string(id) ? json_string_value(id) : NULL,
                                                 json_string_value(name), (int)c};
            }
        } else if (!strcmp(role, "tool")) {
            const past_call *pc = call_answered(m, past, n_past);
            if (!pc) {
                st = rf_fail(pe, "messages", "messages[%d] is a tool result with no earlier tool call", i);
                goto out;
            }
            sbuf r = {0};
            sb_str(&r, "functions.");
            sb_str(&r, pc->name);
            no[k] = r.p ? role_content(&nm[k], r.p, r.len, content) : NULL;
            free(r.p);
            if (!no[k++]) {
                st = rf_fail(pe, "messages", "out of memory");
                goto out;
            }
        } else if (strcmp(role, "system") && strcmp(role, "developer") && strcmp(role, "user") &&
                   strcmp(role, "assistant")) {
            /* the roles render_harmony trusts are pagoda's own ("assistant
             * written", "assistant to=...", "functions.NAME", "tools",
             * "analysis"): from a client, their role or content would go
             * into the prompt as markup */
            char param[48];
            snprintf(param, sizeof param, "messages[%d].role", i);
            st = rf_fail(pe, param, "%s: role '%.64s' is not one harmony takes from a client; give system, "
                         "developer, user, assistant (with tool_calls for a call) or tool", param, role);
            goto out;
        } else {
            nm[k] = (*msgs)[i];
            src[k++] = i;
        }
    }
    /* success: the slots take over the texts they point at */
    for (int j = 0; j < k; j++) {
        if (src[j] < 0) continue;
        no[j] = (*owned)[src[j]];
        (*owned)[src[j]] = NULL;
    }
    for (int i = 0; i < *n; i++) free((*owned)[i]);
    free(*owned);
    free(*msgs);
    *msgs = nm;
    *owned = no;
    *n = k;
    nm = NULL;
    no = NULL;
out:
    if (no)
        for (size_t j = 0; j < cap; j++) free(no[j]);
    free(no);
    free(nm);
    free(src);
    return st;
}

int st_chat_messages(json_t *o, const st_req *sr, int fmt, unsigned flags, pagoda_chat_message **msgs,
                     char ***owned, int *n, perr *pe)
{
    bool keep_reasoning = flags & ST_KEEP_REASONING;
    if (fmt == FMT_HARMONY) return harmony_messages(o, sr, msgs, owned, n, pe);
    json_t *arr = json_object_get(o, "messages");
    past_call past[64];
    int n_past = 0;
    for (int i = 0; i < *n; i++) {
        json_t *m = json_array_get(arr, (size_t)i);
        const char *role = (*msgs)[i].role;
        json_t *calls = json_object_get(m, "tool_calls");
        const char *reason = keep_reasoning && !strcmp(role, "assistant") ? reasoning_of(m) : NULL;
        const char *content = (*msgs)[i].content ? (*msgs)[i].content : "";
        if (reason && !strstr(content, "</think>")) {
            /* the block the template writes from reasoning_content (which
             * the renderer keeps after the last user message only) */
            sbuf b = {0};
            sb_str(&b, "<think>\n");
            sb_str(&b, reason);
            sb_str(&b, "\n</think>\n\n");
            sb_str(&b, content);
            if (own(owned, *n, i, b.p) < 0) return rf_fail(pe, "messages", "out of memory");
            (*msgs)[i].content = b.p;
        }
        if (!strcmp(role, "assistant") && calls && !json_is_null(calls)) {
            if (!json_is_array(calls))
                return rf_fail(pe, "messages", "messages[%d].tool_calls must be a list", i);
            sbuf b = {0};
            sb_str(&b, (*msgs)[i].content ? (*msgs)[i].content : "");
            bool ds = fmt == FMT_DEEPSEEK || fmt == FMT_DEEPSEEK31;
            if (ds && json_array_size(calls)) sb_str(&b, DS_CALLS_BEGIN);
            if (fmt == FMT_KIMI && json_array_size(calls)) sb_str(&b, "<|tool_calls_section_begin|>");
            size_t k;
            json_t *c;
            json_array_foreach(calls, k, c) {
                json_t *name, *args;
                if (call_fields(c, fmt, i, k, &name, &args, pe)) {
                    free(b.p);
                    return -1;
                }
                char *at = call_args(args);
                if (!at) {
                    free(b.p);
                    return rf_fail(pe, "messages", "out of memory");
                }
                write_call(&b, fmt, json_string_value(name), at, (int)k, (int)json_array_size(calls));
                free(at);
                json_t *id = json_object_get(c, "id");
                if (n_past < 64)
                    past[n_past++] = (past_call){json_is_string(id) ? json_string_value(id) : NULL,
                                                 json_string_value(name), (int)k};
            }
            if (ds && json_array_size(calls)) sb_str(&b, DS_CALLS_END);
            if (fmt == FMT_KIMI && json_array_size(calls)) sb_str(&b, "<|tool_calls_section_end|>");
            if (fmt == FMT_MISTRAL && json_array_size(calls) > 1) sb_str(&b, "]");
            if (!b.p) sb_str(&b, "");
            if (own(owned, *n, i, b.p) < 0) return rf_fail(pe, "messages", "out of memory");
            (*msgs)[i].content = b.p;
        } else if (!strcmp(role, "tool")) {
            json_t *tid = json_object_get(m, "tool_call_id");
            const past_call *pc = call_answered(m, past, n_past);
            const char *content = (*msgs)[i].content ? (*msgs)[i].content : "";
            sbuf b = {0};
            if (fmt == FMT_KIMI) {
                char idx[16] = "";
                sb_str(&b, "## Return of ");
                if (pc) {
                    snprintf(idx, sizeof idx, ":%d", pc->index);
                    sb_str(&b, "functions.");
                    sb_str(&b, pc->name);
                    sb_str(&b, idx);
                } else if (json_is_string(tid)) {
                    sb_str(&b, json_string_value(tid));
                }
                sb_str(&b, "\\n"); /* the template's text holds a backslash and n */
                sb_str(&b, content);
            } else if (fmt == FMT_DEEPSEEK || fmt == FMT_DEEPSEEK31 || fmt == FMT_QWEN3CODER || fmt == FMT_GLM45) {
                sb_str(&b, content); /* the template wraps it (Qwen3-Coder's, GLM-4.5's <tool_response>) */
            } else {
                sb_str(&b, "<tool_response>\n");
                sb_str(&b, content);
                sb_str(&b, "\n</tool_response>");
            }
            if (own(owned, *n, i, b.p) < 0) return rf_fail(pe, "messages", "out of memory");
            (*msgs)[i].content = b.p;
        }
    }
    /* the tools, in the system turn (after the client's own system text),
     * whatever tool_choice says: "none" only stops reading calls back, so
     * a conversation that turns tool_choice off for one turn keeps the same
     * prompt prefix, and the KV of its earlier turns (as vLLM does unless
     * --exclude-tools-when-tool-choice-none) */
    if (!sr->tools || !json_array_size(sr->tools)) return 0;
    sbuf b = {0};
    /* GLM-4.5/4.6's template: a system turn of its own before the
     * conversation, in its words, the tools one a line */
    bool glm = fmt == FMT_GLM45;
    bool has_sys = !glm && *n > 0 && !strcmp((*msgs)[0].role, "system");
    const char *sys = has_sys && (*msgs)[0].content ? (*msgs)[0].content : "";
    bool qwen = flags & (ST_TOOLS_QWEN3 | ST_TOOLS_QWQ);
    if (*sys || (flags & ST_TOOLS_QWQ) || (qwen && has_sys)) {
        /* Qwen3's template: the system text and a blank line when there
         * is a system message; QwQ's: the blank line always */
        sb_str(&b, sys);
        sb_str(&b, "\n\n");
    }
    sb_str(&b, qwen || glm ? "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
                      "provided with function signatures within <tools></tools> XML tags:\n<tools>"
                    : "# Tools\n\nYou may call these functions:\n<tools>");
    size_t i;
    json_t *t;
    json_array_foreach(sr->tools, i, t) {
        char *txt = json_dumps(t, 0);
        sb_str(&b, "\n");
        sb_str(&b, txt ? txt : "{}");
        free(txt);
    }
    sb_str(&b, qwen ? "\n</tools>\n\nFor each function call, return a json object with function name and "
                      "arguments within <tool_call></tool_call> XML tags:\n"
               : glm ? "\n</tools>\n\nFor each function call, output the function name and arguments within the "
                       "following XML format:\n<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n"
                       "<arg_value>{arg-value-1}</arg_value>\n<arg_key>{arg-key-2}</arg_key>\n"
                       "<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call>"
                     : "\n</tools>\nTo call one, write:\n");
    /* the family's own call syntax (what toolfmt.c reads back) */
    switch (glm ? -1 : qwen ? FMT_HERMES : fmt) {
    case -1: break; /* GLM's example: its template's, above */
    case FMT_DEEPSEEK:
        sb_str(&b, DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP "<function-name>\n```json\n<args-json-object>\n```"
                   DS_CALL_END DS_CALLS_END);
        break;
    case FMT_DEEPSEEK31:
        sb_str(&b, DS_CALLS_BEGIN DS_CALL_BEGIN "<function-name>" DS_SEP "<args-json-object>" DS_CALL_END DS_CALLS_END);
        break;
    case FMT_KIMI:
        sb_str(&b, "<|tool_calls_section_begin|><|tool_call_begin|>functions.<function-name>:0"
                   "<|tool_call_argument_begin|><args-json-object><|tool_call_end|><|tool_calls_section_end|>");
        break;
    case FMT_LLAMA3:
        sb_str(&b, "{\"name\": <function-name>, \"parameters\": <args-json-object>}\nas the whole reply.");
        break;
    case FMT_MISTRAL:
        sb_str(&b, "[TOOL_CALLS][{\"name\": <function-name>, \"arguments\": <args-json-object>}]");
        break;
    case FMT_QWEN3CODER:
        sb_str(&b, "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
                   "</parameter>\n<parameter=example_parameter_2>\nvalue_2\n</parameter>\n</function>\n</tool_call>\n"
                   "with the function's name, and a parameter each argument (a string value as its text, any other "
                   "as JSON), each closed by </parameter>.");
        break;
    default:
        sb_str(&b, "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>");
    }
    if (!b.p) return rf_fail(pe, "messages", "out of memory");
    if (has_sys) {
        own(owned, *n, 0, b.p);
        (*msgs)[0].content = b.p;
        return 0;
    }
    pagoda_chat_message *nm = realloc(*msgs, sizeof *nm * (size_t)(*n + 1));
    if (nm) *msgs = nm;
    char **no = realloc(*owned, sizeof *no * (size_t)(*n + 1));
    if (no) *owned = no;
    if (!nm || !no) {
        free(b.p);
        return rf_fail(pe, "messages", "out of memory");
    }
    memmove(*msgs + 1, *msgs, sizeof **msgs * (size_t)*n);
    memmove(*owned + 1, *owned, sizeof **owned * (size_t)*n);
    (*msgs)[0] = (pagoda_chat_message){.role = "system", .content = b.p};
    (*owned)[0] = b.p;
    (*n)++;
    return 0;
}

/* ------------------------------------------------------------ reading calls */

/* The reader of a choice's output: text outside <tool_call> blocks is
 * content; each finished block whose JSON holds a name is a call. A
 * suffix that may begin a tag is held back until it can be told apart. */
typedef struct tc_reader {
    sbuf pending;            /* outside a block, not yet passed on */
    sbuf call;               /* inside a block */
    int in_call;
    int n_calls;
} tc_reader;

typedef struct tc_sink {
    void (*content)(void *u, const char *s, size_t n);
    void (*call)(void *u, int index, const char *name, const char *args);
    void *u;
} tc_sink;

static size_t find(const char *h, size_t hn, const char *needle)
{
    size_t nn = strlen(needle);
    for (size_t i = 0; i + nn <= hn; i++)
        if (!memcmp(h + i, needle, nn)) return i;
    return (size_t)-1;
}

/* a block's JSON as a call: name and arguments (as JSON text) */
static bool read_call(const char *s, size_t n, char **name, char **args)
{
    json_t *v = json_loadb(s, n, 0, NULL);
    json_t *nm = v ? json_object_get(v, "name") : NULL;
    json_t *a = v ? json_object_get(v, "arguments") : NULL;
    if (v && !a) a = json_object_get(v, "parameters");
    if (!json_is_string(nm)) {
        json_decref(v);
        return false;
    }
    *name = strdup(json_string_value(nm));
    *args = !a ? strdup("{}") : json_is_string(a) ? strdup(json_string_value(a)) : json_dumps(a, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(v);
    return *name && *args;
}

static void sb_cut(sbuf *b, size_t from)
{
    /* drop the first `from` bytes */
    memmove(b->p, b->p + from, b->len - from + 1);
    b->len -= from;
}

static void tc_feed(tc_reader *r, const char *s, size_t n, const tc_sink *k)
{
    if (n) sb_put(r->in_call ? &r->call : &r->pending, s, n);
    for (;;) {
        if (!r->in_call) {
            if (!r->pending.len) return;
            size_t at = find(r->pending.p, r->pending.len, OPEN_TAG);
            if (at != (size_t)-1) {
                if (at) k->content(k->u, r->pending.p, at);
                sb_put(&r->call, r->pending.p + at + strlen(OPEN_TAG), r->pending.len - at - strlen(OPEN_TAG));
                r->pending.len = 0;
                r->pending.p[0] = 0;
                r->in_call = 1;
                continue;
            }
            /* keep the longest suffix that is a start of the tag */
            size_t keep = 0, tl = strlen(OPEN_TAG);
            for (size_t l = tl - 1; l > 0; l--)
                if (l <= r->pending.len && !memcmp(r->pending.p + r->pending.len - l, OPEN_TAG, l)) {
                    keep = l;
                    break;
                }
            if (r->pending.len > keep) {
                k->content(k->u, r->pending.p, r->pending.len - keep);
                sb_cut(&r->pending, r->pending.len - keep);
            }
            return;
        }
        if (!r->call.len) return;
        size_t at = find(r->call.p, r->call.len, CLOSE_TAG);
        if (at == (size_t)-1) return;
        char *name = NULL, *args = NULL;
        if (read_call(r->call.p, at, &name, &args)) {
            k->call(k->u, r->n_calls++, name, args);
        } else {
            /* not a call after all: it stays text */
            k->content(k->u, OPEN_TAG, strlen(OPEN_TAG));
            k->content(k->u, r->call.p, at + strlen(CLOSE_TAG));
        }
        free(name);
        free(args);
        size_t rest = at + strlen(CLOSE_TAG);
        sb_put(&r->pending, r->call.p + rest, r->call.len - rest);
        r->call.len = 0;
        r->call.p[0] = 0;
        r->in_call = 0;
    }
}

/* the end: whatever is held back is content (an unfinished block too) */
static void tc_flush(tc_reader *r, const tc_sink *k)
{
    if (r->in_call) {
        k->content(k->u, OPEN_TAG, strlen(OPEN_TAG));
        if (r->call.len) k->content(k->u, r->call.p, r->call.len);
        r->call.len = 0;
        r->in_call = 0;
    }
    if (r->pending.len) k->content(k->u, r->pending.p, r->pending.len);
    r->pending.len = 0;
}

static tc_reader *reader_of(choice *c)
{
    if (!c->tc) c->tc = calloc(1, sizeof(tc_reader));
    return c->tc;
}

void st_choice_free(choice *c)
{
    tc_reader *r = c->tc;
    if (!r) return;
    free(r->pending.p);
    free(r->call.p);
    free(r);
    c->tc = NULL;
}

static void call_id(hreq *hr, int choice_i, int index, char *out, size_t n)
{
    /* unique per response: the response id's random part, the choice and the call */
    uint64_t h = 1469598103934665603ull;
    for (const char *p = hr->id; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    h ^= (uint64_t)choice_i * 0x9E3779B97F4A7C15ull + (uint64_t)index * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 31)) * 0x94D049BB133111EBull;
    snprintf(out, n, "call_%016llx%08x", (unsigned long long)h, (unsigned)(h >> 17) ^ (unsigned)index);
}

static json_t *call_json(hreq *hr, int choice_i, int index, const char *name, const char *args, bool with_index)
{
    char id[48];
    call_id(hr, choice_i, index, id, sizeof id);
    json_t *c = json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function", "function", "name", name,
                          "arguments", args);
    if (c && with_index) json_object_set_new(c, "index", json_integer(index));
    return c;
}

/* ---- whole */

typedef struct whole {
    hreq *hr;
    int choice;
    sbuf content;
    json_t *calls;
} whole;

static void whole_content(void *u, const char *s, size_t n) { sb_put(&((whole *)u)->content, s, n); }

static void whole_call(void *u, int index, const char *name, const char *args)
{
    whole *w = u;
    if (!w->calls) w->calls = json_array();
    json_array_append_new(w->calls, call_json(w->hr, w->choice, index, name, args, false));
}

static bool all_space(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)s[i])) return false;
    return true;
}

json_t *st_message(hreq *hr, choice *c, const char **finish)
{
    whole w = {hr, c->index, {0}, NULL};
    tc_reader r = {0};
    tc_sink k = {whole_content, whole_call, &w};
    tc_feed(&r, c->text.p ? c->text.p : "", c->text.len, &k);
    tc_flush(&r, &k);
    free(r.pending.p);
    free(r.call.p);
    json_t *msg = json_object();
    json_object_set_new(msg, "role", json_string("assistant"));
    if (w.calls) {
        /* what the model wrote around its calls, trimmed; null when nothing */
        size_t a = 0, b = w.content.len;
        while (a < b && isspace((unsigned char)w.content.p[a])) a++;
        while (b > a && isspace((unsigned char)w.content.p[b - 1])) b--;
        json_object_set_new(msg, "content", b > a ? jstr(w.content.p + a, b - a) : json_null());
        json_object_set_new(msg, "tool_calls", w.calls);
        if (c->finish_reason == PAGODA_FINISH_STOP) *finish = "tool_calls";
    } else {
        json_object_set_new(msg, "content", jstr(w.content.p ? w.content.p : "", w.content.len));
    }
    free(w.content.p);
    return msg;
}

/* ---- streamed */

typedef struct streamed {
    hreq *hr;
    choice *c;
    json_t *lp;              /* the event's logprobs, sent with its first chunk */
    int sent;
} streamed;

static void stream_content(void *u, const char *s, size_t n)
{
    streamed *st = u;
    tc_reader *r = st->c->tc;
    /* whitespace between or after calls is not worth a content delta */
    if (r && r->n_calls && all_space(s, n)) return;
    json_t *d = json_object();
    json_object_set_new(d, "content", jstr(s, n));
    sse_chunk(st->hr, st->c->index, d, st->lp, NULL);
    st->lp = NULL;
    st->sent = 1;
}

static void stream_call(void *u, int index, const char *name, const char *args)
{
    streamed *st = u;
    json_t *d = json_object();
    json_t *arr = json_array();
    json_array_append_new(arr, call_json(st->hr, st->c->index, index, name, args, true));
    json_object_set_new(d, "tool_calls", arr);
    sse_chunk(st->hr, st->c->index, d, st->lp, NULL);
    st->lp = NULL;
    st->sent = 1;
}

void st_stream_text(hreq *hr, choice *c, const char *text, size_t len, json_t *lp)
{
    tc_reader *r = reader_of(c);
    streamed st = {hr, c, lp, 0};
    tc_sink k = {stream_content, stream_call, &st};
    if (r) tc_feed(r, text, len, &k);
    else stream_content(&st, text, len); /* no memory for a reader: plain text */
    json_decref(st.lp); /* logprobs of held-back text ride with no chunk */
}

const char *st_stream_final(hreq *hr, choice *c, const char *finish)
{
    tc_reader *r = c->tc;
    if (!r) return finish;
    streamed st = {hr, c, NULL, 0};
    tc_sink k = {stream_content, stream_call, &st};
    tc_flush(r, &k);
    if (r->n_calls && c->finish_reason == PAGODA_FINISH_STOP) return "tool_calls";
    return finish;
}
