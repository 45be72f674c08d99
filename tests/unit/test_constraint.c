/* test_constraint.c: the constraint plugin kind and the built-in engine
 * (constraint-grammar.so), through the loader and the ops table only, as
 * any constraint plugin would be tested:
 *   - the loader takes the kind and checks its slots;
 *   - conformance: over random walks on a synthetic vocabulary (every byte,
 *     multi-byte tokens, partial UTF-8, a token that writes nothing), the
 *     mask holds exactly the tokens advance() takes, with and without the
 *     per-state cache, and every completed output is in the language;
 *   - regexes against PCRE2 as the oracle: every prefix the mask allows is
 *     a partial match, every token it refuses makes a non-match;
 *   - JSON Schema: completed walks parse and validate with an independent
 *     validator (schema_testutil.h); grammars and choices accept and
 *     refuse what they should;
 *   - bad specs: malformed, unproductive recursion, a grammar accepting
 *     nothing, left recursion, catastrophic regexes (fast, correct),
 *     oversized ones (refused by the limits, in bounded time). */
#define _GNU_SOURCE /* memmem */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "plugin_loader.h"
#include "plugin_testhost.h"
#include "schema_testutil.h"
#include "testutil.h"

/* Check records every ck_assert (a write per call): the hot loops use this */
#define CHECK(cond, ...) do { if (!(cond)) ck_abort_msg(__VA_ARGS__); } while (0)

static pagoda_plugin *g_p;
static void *g_ctx;
static th_host g_host;
static const pagoda_constraint_ops *O;
static char g_err[1024];

/* vocabulary: ids 0..255 the single bytes, then multi-byte tokens, then
 * one that writes nothing */
static const char *const multi[] = {
    "{\"", "\":", "\": ", "\",", "\"}", "true", "false", "null", " the", "ab", "abc", "abd", "aaa",
    "12", "3.", ".5", "e+", "\n  ", "  ", "[{", "}]", "\\n", "\\\"", "\xc3\xa9", "\xc3", "\xa9x",
    "\xe2\x82", "\xac", "yes", "no", "maybe", "-0", "00", "2024-", "-01", "T1", "Z", "\"red\"",
    "<tool_call>", "</tool_call>", "\n<", "name", "\"name\": \"", "Answer: ", "X",
};
#define N_MULTI (int32_t)(sizeof multi / sizeof multi[0])
static int32_t V;
static char *vb[512];
static uint32_t vl[512];

static void setup(void)
{
    char path[1200];
    snprintf(path, sizeof path, "%s", tu_build("plugins/constraint-grammar.so"));
    int st = pagoda_plugin_load_file(path, PAGODA_KIND_CONSTRAINT, "grammar", &g_p, g_err, sizeof g_err);
    ck_assert_msg(st == PAGODA_OK, "%s", g_err);
    O = &g_p->ops.constraint;
    th_init(&g_host);
    th_set(&g_host, "max_spec_bytes", "262144");
    th_set(&g_host, "max_elements", "200000");
    st = g_p->desc.create(&g_host.h, &g_ctx, g_err, sizeof g_err);
    ck_assert_msg(st == PAGODA_OK, "%s", g_err);
    V = 0;
    for (int b = 0; b < 256; b++) {
        vb[V] = malloc(1);
        vb[V][0] = (char)b;
        vl[V++] = 1;
    }
    for (int i = 0; i < N_MULTI; i++) {
        vb[V] = strdup(multi[i]);
        vl[V++] = (uint32_t)strlen(multi[i]);
    }
    vb[V] = strdup("");
    vl[V++] = 0; /* writes nothing: never allowed */
    pagoda_constraint_vocab v = {.struct_size = sizeof v, .n_vocab = V,
                                 .bytes = (const char *const *)vb, .len = vl};
    ck_assert_int_eq(O->set_vocab(g_ctx, &v, g_err, sizeof g_err), PAGODA_OK);
}

static void teardown(void)
{
    g_p->desc.destroy(g_ctx);
    pagoda_plugin_free(g_p);
    for (int32_t i = 0; i < V; i++) free(vb[i]);
}

static int compile(int type, const char *text, bool strict, void **out)
{
    pagoda_constraint_spec sp = {.struct_size = sizeof sp, .type = type, .text = text,
                                 .len = text ? strlen(text) : 0, .strict = strict};
    g_err[0] = 0;
    return O->compile(g_ctx, &sp, out, g_err, sizeof g_err);
}

static void *must_compile(int type, const char *text)
{
    void *c = NULL;
    int st = compile(type, text, true, &c);
    ck_assert_msg(st == PAGODA_OK, "%s: %s", text ? text : "(json_object)", g_err);
    return c;
}

static void refuse(int type, const char *text, const char *want)
{
    void *c = NULL;
    int st = compile(type, text, true, &c);
    ck_assert_msg(st == PAGODA_ERR_INVALID, "accepted: %.200s", text);
    ck_assert_msg(strstr(g_err, want), "for %.120s: wanted '%s' in: %s", text, want, g_err);
    ck_assert_ptr_null(c);
}

/* Does the spec accept exactly these bytes (single-byte tokens)? */
static bool accepts(void *comp, const char *s, size_t n)
{
    void *m = NULL;
    CHECK(O->matcher_new(g_ctx, comp, &m, g_err, sizeof g_err) == PAGODA_OK, "%s", g_err);
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) ok = O->advance(g_ctx, m, (uint8_t)s[i], g_err, sizeof g_err) == 0;
    ok = ok && O->is_complete(g_ctx, m);
    O->matcher_free(g_ctx, m);
    return ok;
}

static bool accepts_str(void *comp, const char *s) { return accepts(comp, s, strlen(s)); }

static inline bool bit(const uint32_t *m, int32_t t) { return m[t >> 5] >> (t & 31) & 1; }

/* The tokens advance() takes after history, each on a fresh matcher. */
static void reference_mask(void *comp, const int32_t *hist, int n, uint32_t *out)
{
    memset(out, 0, sizeof(uint32_t) * (size_t)((V + 31) / 32));
    for (int32_t t = 0; t < V; t++) {
        void *m = NULL;
        CHECK(O->matcher_new(g_ctx, comp, &m, g_err, sizeof g_err) == PAGODA_OK, "%s", g_err);
        for (int i = 0; i < n; i++) CHECK(O->advance(g_ctx, m, hist[i], g_err, sizeof g_err) == 0, "%s", g_err);
        if (O->advance(g_ctx, m, t, g_err, sizeof g_err) == PAGODA_OK) out[t >> 5] |= 1u << (t & 31);
        O->matcher_free(g_ctx, m);
    }
}

/* bytes at the end of text that start a UTF-8 character without finishing it */
static size_t cut_char(const char *text, size_t n)
{
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = (unsigned char)text[n - k];
        if ((c & 0xC0) == 0x80) continue;
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > k ? k : 0;
    }
    return 0;
}

/* An independent judge of outputs: full(text) says whether text is in the
 * language; prefix(text) whether it starts a member (NULL: unknown). exact:
 * full decides completion both ways (the engine's is_complete must agree). */
typedef struct oracle {
    bool (*full)(const char *text, size_t n, void *user);
    bool (*prefix)(const char *text, size_t n, void *user);
    bool exact;
    void *user;
} oracle;

/* Random walks: at each step the mask equals the reference (advance on a
 * fresh matcher), the oracle takes every prefix and refuses the text a
 * refused token would make, and a complete output is in the language; a
 * walk ends (when complete) with probability 0.15 or at max_len. Returns
 * how many walks completed. */
static int walks(void *comp, int n_walks, int max_len, uint64_t seed, const oracle *orc,
                 int check_ref)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    int words = (V + 31) / 32, completed = 0;
    uint32_t *mask = malloc(sizeof *mask * (size_t)words), *ref = malloc(sizeof *ref * (size_t)words);
    int32_t hist[512];
    char text[4096];
    for (int w = 0; w < n_walks; w++) {
        void *m = NULL;
        CHECK(O->matcher_new(g_ctx, comp, &m, g_err, sizeof g_err) == PAGODA_OK, "%s", g_err);
        int n = 0;
        size_t tl = 0;
        for (;;) {
            CHECK(O->fill_mask(g_ctx, m, mask, g_err, sizeof g_err) == PAGODA_OK, "%s", g_err);
            if (check_ref && (w < 3 || n < 4 || check_ref > 1)) {
                reference_mask(comp, hist, n, ref);
                for (int32_t t = 0; t < V; t++)
                    CHECK(bit(mask, t) == bit(ref, t), "walk %d step %d token %d (%.*s): mask %d, "
                                  "advance %d after '%.*s'", w, n, t, (int)vl[t], vb[t], bit(mask, t),
                                  bit(ref, t), (int)tl, text);
            }
            CHECK(!bit(mask, V - 1), "the token that writes nothing is allowed");
            bool complete = O->is_complete(g_ctx, m);
            if (orc && orc->prefix)
                CHECK(orc->prefix(text, tl, orc->user), "not a prefix: '%.*s'", (int)tl, text);
            if (orc && (complete || orc->exact))
                CHECK(orc->full(text, tl, orc->user) == complete, "is_complete %d for '%.*s'",
                              complete, (int)tl, text);
            int32_t allowed[600], na = 0;
            for (int32_t t = 0; t < V; t++)
                if (bit(mask, t)) allowed[na++] = t;
            if (orc && orc->prefix) {
                /* a refused token must not extend the text into the language's prefixes */
                for (int k = 0; k < 8; k++) {
                    int32_t t = (int32_t)(tu_rng_u64(&r) % (uint64_t)V);
                    if (bit(mask, t) || !vl[t] || tl + vl[t] >= sizeof text) continue;
                    memcpy(text + tl, vb[t], vl[t]);
                    if (cut_char(text, tl + vl[t])) continue; /* cannot be judged */
                    CHECK(!orc->prefix(text, tl + vl[t], orc->user), "token %d refused but "
                                  "'%.*s' is a prefix", t, (int)(tl + vl[t]), text);
                }
            }
            if (complete && (na == 0 || tu_rng_uniform(&r) < 0.15f)) {
                completed++;
                break;
            }
            if (!na || n >= max_len || n >= 500) {
                CHECK(na || complete, "dead end after '%.*s'", (int)tl, text);
                break;
            }
            int32_t t = allowed[tu_rng_u64(&r) % (uint64_t)na];
            CHECK(O->advance(g_ctx, m, t, g_err, sizeof g_err) == PAGODA_OK, "%s", g_err);
            hist[n++] = t;
            CHECK(tl + vl[t] < sizeof text, "text overflow");
            memcpy(text + tl, vb[t], vl[t]);
            tl += vl[t];
        }
        O->matcher_free(g_ctx, m);
    }
    free(mask);
    free(ref);
    return completed;
}

/* ------------------------------------------------------------ loader */

START_TEST(test_kind_loads)
{
    ck_assert_int_eq(g_p->desc.kind, PAGODA_KIND_CONSTRAINT);
    ck_assert_str_eq(pagoda_kind_name(PAGODA_KIND_CONSTRAINT), "constraint");
    ck_assert_int_eq(pagoda_plugin_kind_from_name("constraint"), PAGODA_KIND_CONSTRAINT);
    ck_assert_ptr_nonnull(O->stats);
    /* `pagoda plugins -v` lists it with its keys */
    char path[400];
    snprintf(path, sizeof path, "%s/constraint-list.txt", tu_build(""));
    FILE *f = fopen(path, "w+");
    ck_assert_ptr_nonnull(f);
    pagoda_plugins_print(f, true);
    fflush(f);
    rewind(f);
    static char text[1 << 17];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    remove(path);
    /* the listing is long: on failure print only its start (Check's messages are bounded) */
    char want[64];
    snprintf(want, sizeof want, "constraint.grammar  ABI %d.%d", PAGODA_ABI_MAJOR, PAGODA_ABI_MINOR);
    ck_assert_msg(strstr(text, want), "no '%s' in: %.2000s", want, text);
    ck_assert_msg(strstr(text, "max_spec_bytes (size, default 256K"), "%.2000s", text);
}
END_TEST

/* ------------------------------------------------------------ grammars */

START_TEST(test_gbnf_basics)
{
    void *c = must_compile(PAGODA_CONSTRAINT_GRAMMAR,
                           "# answers\nroot ::= \"Answer: \" ans \"\\n\"\n"
                           "ans ::= [0-9]+ (\".\" [0-9]{1,2})? | \"none\" | word\n"
                           "word ::= [a-z\\u00e9]{2,3}\n");
    ck_assert(accepts_str(c, "Answer: 12\n"));
    ck_assert(accepts_str(c, "Answer: 1.25\n"));
    ck_assert(accepts_str(c, "Answer: none\n"));
    ck_assert(accepts_str(c, "Answer: \xc3\xa9t\xc3\xa9\n"));
    ck_assert(!accepts_str(c, "Answer: 1.255\n"));
    ck_assert(!accepts_str(c, "Answer: 12"));
    ck_assert(!accepts_str(c, "Answer: a\n"));
    ck_assert(!accepts_str(c, "answer: 1\n"));
    ck_assert_int_gt(walks(c, 20, 40, 1, NULL, true), 10);
    O->compiled_free(g_ctx, c);

    /* multi-line rules, negated classes, dot, nested groups, {n,} */
    c = must_compile(PAGODA_CONSTRAINT_GRAMMAR,
                     "root ::= item\n  (\",\" item)*\nitem ::= [^,\\n]{1,} | \"(\" (item | \".\")? \")\"\n");
    ck_assert(accepts_str(c, "a,b c,()"));
    ck_assert(accepts_str(c, "(.),(x)"));
    ck_assert(!accepts_str(c, "a,,b"));
    O->compiled_free(g_ctx, c);

    /* %json inside a grammar: a tool call */
    c = must_compile(PAGODA_CONSTRAINT_GRAMMAR,
                     "root ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"\n"
                     "call ::= %json {\"type\": \"object\", \"properties\": {\"name\": {\"const\": \"f\"}, "
                     "\"arguments\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"integer\"}}, "
                     "\"required\": [\"x\"]}}, \"required\": [\"name\", \"arguments\"]}\n");
    ck_assert(accepts_str(c, "<tool_call>\n{\"name\":\"f\",\"arguments\":{\"x\":3}}\n</tool_call>"));
    ck_assert(accepts_str(c, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": -3}}\n</tool_call>"));
    ck_assert(!accepts_str(c, "<tool_call>\n{\"name\":\"g\",\"arguments\":{\"x\":3}}\n</tool_call>"));
    O->compiled_free(g_ctx, c);
}
END_TEST

START_TEST(test_choice)
{
    void *c = must_compile(PAGODA_CONSTRAINT_CHOICE, "[\"yes\", \"no\", \"maybe so\", \"n\"]");
    ck_assert(accepts_str(c, "yes"));
    ck_assert(accepts_str(c, "maybe so"));
    ck_assert(accepts_str(c, "n"));
    ck_assert(accepts_str(c, "no"));
    ck_assert(!accepts_str(c, "ye"));
    ck_assert(!accepts_str(c, "maybe"));
    ck_assert_int_gt(walks(c, 30, 20, 2, NULL, true), 25);
    O->compiled_free(g_ctx, c);
}
END_TEST

/* ------------------------------------------------------------ regex vs PCRE2 */

typedef struct re_oracle {
    pcre2_code *code;
    pcre2_match_data *md;
} re_oracle;

/* PCRE2 in UTF mode: invalid UTF-8 is no match; with partial matching a
 * character cut at the end is a prefix */
static bool re_full(const char *text, size_t n, void *user)
{
    re_oracle *o = user;
    return pcre2_match(o->code, (PCRE2_SPTR)text, n, 0, 0, o->md, NULL) >= 0;
}

/* PCRE2 does not match a character cut at the end, so a text ending in
 * one is judged without it (a weaker check; the mask/advance agreement
 * covers those bytes) */
static bool re_prefix(const char *text, size_t n, void *user)
{
    re_oracle *o = user;
    n -= cut_char(text, n);
    if (n == 0) return true; /* PCRE2 reports no partial match of nothing */
    int rc = pcre2_match(o->code, (PCRE2_SPTR)text, n, 0, PCRE2_PARTIAL_HARD, o->md, NULL);
    return rc >= 0 || rc == PCRE2_ERROR_PARTIAL;
}

static void regex_case(const char *re, uint64_t seed)
{
    char wrapped[600];
    snprintf(wrapped, sizeof wrapped, "^(?:%s)\\z", re);
    int ec;
    PCRE2_SIZE eo;
    re_oracle o = {pcre2_compile((PCRE2_SPTR)wrapped, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL), NULL};
    ck_assert_msg(o.code, "pcre2 refused %s", wrapped);
    o.md = pcre2_match_data_create_from_pattern(o.code, NULL);
    void *c = must_compile(PAGODA_CONSTRAINT_REGEX, re);
    oracle orc = {re_full, re_prefix, true, &o};
    int done = walks(c, 40, 60, seed, &orc, true);
    ck_assert_msg(done > 5, "%s: %d walks completed", re, done);
    O->compiled_free(g_ctx, c);
    pcre2_match_data_free(o.md);
    pcre2_code_free(o.code);
}

START_TEST(test_regex_vs_pcre2)
{
    static const char *const res[] = {
        "[a-c]+", "ab|abc|abd", "(a|b)*c", "\\d{3}-\\d{2,4}", "x?y{0,2}z+", "(true|false|null)",
        "[^a-z\"]{1,3}", "(yes|no|maybe)(, (yes|no))*", "\\w+@\\w+\\.(com|org)", "a.c", "[\\s]*X",
        "(a+)+b", "(a|aa)*b", "\\.5|[1-3]\\.", "\\{\"[a-z]+\":(true|false)\\}",
        "-?(0|[1-9]\\d*)(\\.\\d+)?([eE][+-]?\\d+)?",
    };
    for (size_t i = 0; i < sizeof res / sizeof res[0]; i++) regex_case(res[i], 100 + i);
}
END_TEST

START_TEST(test_regex_unicode)
{
    /* classes are code points: "é" is two bytes, both needed */
    void *c = must_compile(PAGODA_CONSTRAINT_REGEX, "[à-ÿ]{2}x");
    ck_assert(accepts_str(c, "\xc3\xa9\xc3\xa0x"));
    ck_assert(!accepts_str(c, "\xc3\xa9x"));
    ck_assert(!accepts_str(c, "\xc3x"));
    O->compiled_free(g_ctx, c);
    c = must_compile(PAGODA_CONSTRAINT_REGEX, ".€.");
    ck_assert(accepts_str(c, "a\xe2\x82\xac\xf0\x9f\x98\x80"));
    ck_assert(!accepts_str(c, "a\xe2\x82\xac\n"));
    ck_assert(!accepts_str(c, "a\xe2\x82\xac\xed\xa0\x80")); /* a surrogate is no character */
    O->compiled_free(g_ctx, c);
}
END_TEST

/* ------------------------------------------------------------ JSON */

typedef struct js_oracle {
    json_t *schema;
} js_oracle;

static bool js_ok(const char *text, size_t n, void *user)
{
    js_oracle *o = user;
    json_error_t je;
    json_t *v = json_loadb(text, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!v) {
        fprintf(stderr, "not JSON: %.*s (%s)\n", (int)n, text, je.text);
        return false;
    }
    char why[128] = "";
    bool ok = st_valid(o->schema, o->schema, v, why, sizeof why);
    if (!ok) fprintf(stderr, "invalid (%s): %.*s\n", why, (int)n, text);
    json_decref(v);
    return ok;
}

static void schema_walks(const char *schema_text, int n, uint64_t seed)
{
    js_oracle o = {json_loads(schema_text, JSON_DECODE_ANY, NULL)};
    ck_assert_msg(o.schema, "test schema is not JSON: %s", schema_text);
    void *c = must_compile(PAGODA_CONSTRAINT_JSON_SCHEMA, schema_text);
    oracle orc = {js_ok, NULL, false, &o};
    int done = walks(c, n, 400, seed, &orc, true);
    ck_assert_msg(done > 0, "%s: no walk completed", schema_text);
    O->compiled_free(g_ctx, c);
    json_decref(o.schema);
}

START_TEST(test_schema_cases)
{
    schema_walks("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":5},"
                 "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},\"tags\":{\"type\":\"array\","
                 "\"items\":{\"enum\":[\"a\",\"b\",1]},\"maxItems\":3}},\"required\":[\"name\",\"age\"]}", 30, 7);
    schema_walks("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"boolean\"},"
                 "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":2}},"
                 "\"required\":[\"v\"]}},\"$ref\":\"#/$defs/node\"}", 30, 8);
    schema_walks("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"null\"},{\"const\":\"x\"}],"
                 "\"items\":{\"type\":\"number\",\"exclusiveMinimum\":-2,\"maximum\":3},\"maxItems\":4}", 30, 9);
    schema_walks("{\"anyOf\":[{\"type\":\"string\",\"pattern\":\"^[a-c]{2}\\\\d$\"},{\"type\":[\"integer\","
                 "\"null\"],\"exclusiveMaximum\":-5}]}", 40, 10);
    schema_walks("{\"type\":\"string\",\"format\":\"date\"}", 10, 11);
    schema_walks("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\",\"minimum\":7,"
                 "\"maximum\":12},\"required\":[\"k\"]}", 20, 12);
    schema_walks("{\"type\":\"string\",\"pattern\":\"b.\"}", 20, 13); /* a search: anything around */
    schema_walks("true", 20, 14);
}
END_TEST

/* Long counted repetitions: their states past the longest token (the
 * horizon) share masks; every step is checked against the reference. */
START_TEST(test_schema_horizon)
{
    static const char *const schemas[] = {
        "{\"type\":\"string\",\"maxLength\":40}",
        "{\"type\":\"string\",\"minLength\":30,\"maxLength\":33}",
        "{\"type\":\"array\",\"items\":{\"enum\":[1,22,\"ab\"]},\"minItems\":18,\"maxItems\":30}",
        "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\","
        "\"maxLength\":25}},\"required\":[\"k\"]},\"maxItems\":20}",
    };
    for (size_t i = 0; i < sizeof schemas / sizeof schemas[0]; i++) {
        js_oracle o = {json_loads(schemas[i], 0, NULL)};
        oracle orc = {js_ok, NULL, false, &o};
        void *c = must_compile(PAGODA_CONSTRAINT_JSON_SCHEMA, schemas[i]);
        walks(c, 8, 300, 500 + i, &orc, 2);
        O->compiled_free(g_ctx, c);
        json_decref(o.schema);
    }
    /* and a grammar's counts, mandatory and optional */
    void *c = must_compile(PAGODA_CONSTRAINT_GRAMMAR, "root ::= (\"ab\" | [0-9]){20,45} \"!\"");
    walks(c, 8, 200, 77, NULL, 2);
    ck_assert(accepts_str(c, "abababababababababababababababababababab!"));    /* 20 */
    ck_assert(accepts_str(c, "ababababababababababababababababababab12!"));    /* 21 */
    ck_assert(!accepts_str(c, "ababababababababababababababababababab!"));     /* 19 */
    O->compiled_free(g_ctx, c);
}
END_TEST

START_TEST(test_schema_random)
{
    tu_rng r;
    tu_rng_seed(&r, 4242);
    for (int i = 0; i < 60; i++) {
        long mb;
        json_t *s = st_random_schema(&r, 2, &mb);
        char *txt = json_dumps(s, JSON_COMPACT);
        js_oracle o = {s};
        oracle orc = {js_ok, NULL, false, &o};
        void *c = must_compile(PAGODA_CONSTRAINT_JSON_SCHEMA, txt);
        walks(c, 6, 500, 1000 + (uint64_t)i, &orc, i < 12);
        O->compiled_free(g_ctx, c);
        free(txt);
        json_decref(s);
    }
}
END_TEST

/* Whitespace between JSON tokens is bounded (docs/structured-output.md):
 * a schema's output takes nothing or one space; any JSON (json_object)
 * also a newline and up to 20 spaces or tabs; never before the root. */
START_TEST(test_json_whitespace)
{
    void *c = must_compile(PAGODA_CONSTRAINT_JSON_SCHEMA,
                           "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":"
                           "{\"type\":\"integer\"}}},\"required\":[\"a\"],\"additionalProperties\":false}");
    ck_assert(accepts_str(c, "{\"a\":[1,2]}"));
    ck_assert(accepts_str(c, "{\"a\": [1, 2]}"));
    ck_assert(accepts_str(c, "{ \"a\" : [ 1 , 2 ] }"));
    ck_assert(!accepts_str(c, "{\"a\":  [1,2]}"));  /* two spaces */
    ck_assert(!accepts_str(c, "{\n\"a\":[1,2]}")); /* a newline */
    ck_assert(!accepts_str(c, "{\"a\":[1,\t2]}"));
    ck_assert(!accepts_str(c, " {\"a\":[1]}"));
    O->compiled_free(g_ctx, c);
    c = must_compile(PAGODA_CONSTRAINT_JSON_OBJECT, NULL);
    char buf[128];
    for (int n = 0; n <= 21; n++) {
        snprintf(buf, sizeof buf, "{\n%*s\"a\": [\n%*s1 ]\n}", n, "", n / 2, "");
        ck_assert_msg(accepts_str(c, buf) == (n <= 20), "newline and %d spaces", n);
    }
    ck_assert(accepts_str(c, "{\n\t\t\"a\": 1}"));
    ck_assert(!accepts_str(c, "{\n\n\"a\": 1}"));  /* one newline a gap */
    ck_assert(!accepts_str(c, "{  \"a\": 1}"));      /* or one space */
    ck_assert(!accepts_str(c, "{\"a\": 1}\n"));     /* nothing after the root */
    O->compiled_free(g_ctx, c);
}
END_TEST

START_TEST(test_json_object)
{
    void *c = must_compile(PAGODA_CONSTRAINT_JSON_OBJECT, NULL);
    ck_assert(accepts_str(c, "{}"));
    ck_assert(accepts_str(c, "{\"a\": [1, {\"b\": null}, \"\xc3\xa9\\n\\u0001\"], \"c\": -1.5e+3}"));
    /* one escape per character: \u00e9 is written as the character itself */
    ck_assert(!accepts_str(c, "{\"a\":\"\\u00e9\"}"));
    ck_assert(!accepts_str(c, "[]"));
    ck_assert(!accepts_str(c, "{\"a\":01}"));
    ck_assert(!accepts_str(c, "{\"a\":\"\x01\"}"));     /* a raw control character */
    ck_assert(!accepts_str(c, "{\"a\":\"\\ud800\"}")); /* escapes are canonical: no \u escape of a surrogate */
    json_t *any = json_object();
    js_oracle o = {any};
    oracle orc = {js_ok, NULL, false, &o};
    walks(c, 30, 200, 21, &orc, true);
    json_decref(any);
    O->compiled_free(g_ctx, c);
}
END_TEST

/* tool_choice "auto" (the grammar plugins/frontend/http/structured.c
 * writes; test_http_tools checks it writes this): free text, in which
 * "<tool_call>" can only open a call, each call held to its function */
static const char AUTO_TOOLS[] =
    "root ::= t0 (call t0){0,8}\n"
    "t0 ::= \"\" | [^<] t0 | \"<\" t1\n"
    "t1 ::= \"\" | \"t\" t2 | \"<\" t1 | [^t<] t0\n"
    "t2 ::= \"\" | \"o\" t3 | \"<\" t1 | [^o<] t0\n"
    "t3 ::= \"\" | \"o\" t4 | \"<\" t1 | [^o<] t0\n"
    "t4 ::= \"\" | \"l\" t5 | \"<\" t1 | [^l<] t0\n"
    "t5 ::= \"\" | \"_\" t6 | \"<\" t1 | [^_<] t0\n"
    "t6 ::= \"\" | \"c\" t7 | \"<\" t1 | [^c<] t0\n"
    "t7 ::= \"\" | \"a\" t8 | \"<\" t1 | [^a<] t0\n"
    "t8 ::= \"\" | \"l\" t9 | \"<\" t1 | [^l<] t0\n"
    "t9 ::= \"\" | \"l\" t10 | \"<\" t1 | [^l<] t0\n"
    "t10 ::= \"\" | \"<\" t1 | [^><] t0\n"
    "call ::= \"<tool_call>\\n\" (fn0 | fn1) \"\\n</tool_call>\"\n"
    "fn0 ::= \"{\\\"name\\\": \\\"f\\\", \\\"arguments\\\": \" %json {\"type\":\"object\",\"properties\":"
    "{\"x\":{\"type\":\"integer\"}},\"required\":[\"x\"],\"additionalProperties\":false} \"}\"\n"
    "fn1 ::= \"{\\\"name\\\": \\\"g\\\", \\\"arguments\\\": \" %json {\"type\":\"object\",\"properties\":"
    "{\"s\":{\"type\":\"string\",\"maxLength\":3}},\"additionalProperties\":false} \"}\"\n";

/* well-formed UTF-8 (no overlong forms, surrogates or cut characters):
 * text is code points, as [^<] is */
static bool utf8_ok(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (!k || i + k > n) return false;
        uint32_t cp = k == 1 ? c : c & (0x7F >> k);
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += k;
    }
    return true;
}

/* the output of AUTO_TOOLS: text without the tag, calls of f or g with
 * valid arguments, at most 8 */
static bool auto_ok(const char *text, size_t n, void *user)
{
    int *called = user, calls = 0; /* *called: outputs judged good that hold a call */
    static const char open[] = "<tool_call>\n", close[] = "\n</tool_call>";
    size_t pos = 0;
    if (!utf8_ok((const unsigned char *)text, n)) return false;
    for (;;) {
        const char *at = memmem(text + pos, n - pos, "<tool_call>", 11);
        if (!at) {
            *called += calls > 0;
            return true;
        }
        size_t p = (size_t)(at - text);
        if (n - p < sizeof open - 1 || memcmp(text + p, open, sizeof open - 1)) return false;
        p += sizeof open - 1;
        json_error_t je;
        json_t *v = json_loadb(text + p, n - p, JSON_DISABLE_EOF_CHECK, &je);
        if (!v) return false;
        p += (size_t)je.position;
        const char *name = json_string_value(json_object_get(v, "name"));
        json_t *args = json_object_get(v, "arguments");
        bool ok = json_object_size(v) == 2 && name && json_is_object(args);
        if (ok && !strcmp(name, "f"))
            ok = json_object_size(args) == 1 && json_is_integer(json_object_get(args, "x"));
        else if (ok && !strcmp(name, "g"))
            ok = json_object_size(args) <= 1 && (json_object_size(args) == 0 ||
                 (json_is_string(json_object_get(args, "s")) && st_utf8_chars(json_string_value(json_object_get(args, "s")),
                  json_string_length(json_object_get(args, "s"))) <= 3));
        else
            ok = false;
        json_decref(v);
        if (!ok || n - p < sizeof close - 1 || memcmp(text + p, close, sizeof close - 1)) return false;
        pos = p + sizeof close - 1;
        if (++calls > 8) return false;
    }
}

START_TEST(test_tools_auto)
{
    void *c = must_compile(PAGODA_CONSTRAINT_GRAMMAR, AUTO_TOOLS);
    /* text, the tag's start as text, a call, text again */
    ck_assert(accepts_str(c, ""));
    ck_assert(accepts_str(c, "Sure. <tool_ <tool_cal> <<tool_call"));
    ck_assert(accepts_str(c, "ok\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 3}}\n</tool_call>"));
    ck_assert(accepts_str(c, "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>\nthen "
                             "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\":-1}}\n</tool_call> done"));
    ck_assert(!accepts_str(c, "<tool_call>\n{\"name\": \"h\", \"arguments\": {}}\n</tool_call>"));
    ck_assert(!accepts_str(c, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": \"3\"}}\n</tool_call>"));
    ck_assert(!accepts_str(c, "text <tool_call> more text"));
    ck_assert(!accepts_str(c, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 3}}")); /* unclosed */
    /* random walks: every output reads back as text and valid calls, and
     * the mask matches advance(); some walks must have called */
    int called = 0;
    oracle orc = {auto_ok, NULL, true, &called};
    for (int k = 0; k < 6; k++) walks(c, 10, 400, 900 + (uint64_t)k, &orc, k == 0);
    ck_assert_int_gt(called, 0);
    O->compiled_free(g_ctx, c);
}
END_TEST

/* ------------------------------------------------------------ cache */

START_TEST(test_mask_cache_and_stats)
{
    void *c = must_compile(PAGODA_CONSTRAINT_JSON_SCHEMA, "{\"type\":\"string\"}");
    void *c2 = must_compile(PAGODA_CONSTRAINT_JSON_SCHEMA, "{\"type\":\"string\"}");
    ck_assert_ptr_eq(c, c2); /* the same text: one compiled spec */
    pagoda_constraint_stats st = {.struct_size = sizeof st};
    ck_assert_int_eq(O->stats(g_ctx, &st), PAGODA_OK);
    ck_assert_int_ge(st.compile_cache_hits, 1);
    int64_t masks0 = st.masks, hits0 = st.mask_cache_hits;
    /* two matchers through the same states: the second is all cache hits */
    for (int k = 0; k < 2; k++) {
        void *m;
        ck_assert_int_eq(O->matcher_new(g_ctx, c, &m, g_err, sizeof g_err), 0);
        uint32_t mask[20];
        const char *txt = "\"abc";
        for (int i = 0; i < 4; i++) {
            ck_assert_int_eq(O->fill_mask(g_ctx, m, mask, g_err, sizeof g_err), 0);
            ck_assert_int_eq(O->advance(g_ctx, m, (uint8_t)txt[i], g_err, sizeof g_err), 0);
        }
        O->matcher_free(g_ctx, m);
    }
    ck_assert_int_eq(O->stats(g_ctx, &st), PAGODA_OK);
    ck_assert_int_eq(st.masks - masks0, 8);
    ck_assert_int_ge(st.mask_cache_hits - hits0, 4 + 2); /* inside the string the state repeats */
    ck_assert_int_gt(st.states, 0);
    ck_assert_int_gt(st.bytes, 0);
    O->compiled_free(g_ctx, c);
    O->compiled_free(g_ctx, c2);
    /* a refused token leaves the matcher where it was */
    c = must_compile(PAGODA_CONSTRAINT_CHOICE, "[\"ab\"]");
    void *m;
    ck_assert_int_eq(O->matcher_new(g_ctx, c, &m, g_err, sizeof g_err), 0);
    ck_assert_int_eq(O->advance(g_ctx, m, 'x', g_err, sizeof g_err), PAGODA_ERR_INVALID);
    ck_assert_int_eq(O->advance(g_ctx, m, V - 1, g_err, sizeof g_err), PAGODA_ERR_INVALID);
    ck_assert_int_eq(O->advance(g_ctx, m, 'a', g_err, sizeof g_err), 0);
    ck_assert(!O->is_complete(g_ctx, m));
    ck_assert_int_eq(O->advance(g_ctx, m, 'b', g_err, sizeof g_err), 0);
    ck_assert(O->is_complete(g_ctx, m));
    O->compiled_free(g_ctx, c); /* the matcher keeps it alive */
    uint32_t mask[20];
    ck_assert_int_eq(O->fill_mask(g_ctx, m, mask, g_err, sizeof g_err), 0);
    for (int w = 0; w < (V + 31) / 32; w++) ck_assert_uint_eq(mask[w], 0);
    O->matcher_free(g_ctx, m);
}
END_TEST

/* ------------------------------------------------------------ bad input */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

START_TEST(test_bad_specs)
{
    refuse(PAGODA_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"object\",", "not valid JSON");
    refuse(PAGODA_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"strin\"}", "'type' \"strin\" is not a JSON Schema type");
    refuse(PAGODA_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"object\", \"required\": \"a\"}", "'required' must be a list");
    refuse(PAGODA_CONSTRAINT_JSON_SCHEMA, "{\"$ref\": \"#/$defs/nope\"}", "points to nothing");
    refuse(PAGODA_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"integer\", \"multipleOf\": 3}", "'multipleOf'");
    refuse(PAGODA_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"object\", \"minProperties\": 1}",
           "#: unsupported keyword 'minProperties'");
    refuse(PAGODA_CONSTRAINT_JSON_SCHEMA, "{\"properties\": {\"a\": {\"type\": \"string\", \"format\": \"email\"}}}",
           "#/properties/a: 'format' \"email\" is not supported");
    /* recursion without a base case, named */
    refuse(PAGODA_CONSTRAINT_JSON_SCHEMA,
           "{\"$defs\": {\"loop\": {\"type\": \"object\", \"properties\": {\"next\": {\"$ref\": \"#/$defs/loop\"}}, "
           "\"required\": [\"next\"]}}, \"$ref\": \"#/$defs/loop\"}", "accepts no output");
    refuse(PAGODA_CONSTRAINT_JSON_SCHEMA, "{\"$ref\": \"#\"}", "accepts no output");
    refuse(PAGODA_CONSTRAINT_JSON_SCHEMA, "{\"enum\": [1, 2], \"type\": \"string\"}", "accepts no output");
    refuse(PAGODA_CONSTRAINT_JSON_SCHEMA, "false", "accepts no output");
    /* not strict: an unsupported keyword is ignored */
    void *c = NULL;
    ck_assert_int_eq(compile(PAGODA_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"integer\", \"multipleOf\": 3}", false, &c), 0);
    O->compiled_free(g_ctx, c);
    /* grammars */
    refuse(PAGODA_CONSTRAINT_GRAMMAR, "root ::= a\na ::= \"x\" a", "accepts no output");
    refuse(PAGODA_CONSTRAINT_GRAMMAR, "root ::= [^\\x00-\\U0010FFFF]", "accepts no output");
    refuse(PAGODA_CONSTRAINT_GRAMMAR, "root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"", "left recursion");
    refuse(PAGODA_CONSTRAINT_GRAMMAR, "root ::= x y\nx ::= \"a\"?\ny ::= x? root \"b\" | \"c\"", "left recursion");
    refuse(PAGODA_CONSTRAINT_GRAMMAR, "root ::= undefined-rule", "'undefined-rule' is used but never defined");
    refuse(PAGODA_CONSTRAINT_GRAMMAR, "start ::= \"a\"", "no rule 'root'");
    refuse(PAGODA_CONSTRAINT_GRAMMAR, "root ::= \"a\"\nroot ::= \"b\"", "defined twice");
    refuse(PAGODA_CONSTRAINT_GRAMMAR, "root ::= \"a", "line 1, column");
    refuse(PAGODA_CONSTRAINT_GRAMMAR, "root ::= (\"a\"", "without its ')'");
    refuse(PAGODA_CONSTRAINT_GRAMMAR, "", "empty");
    refuse(PAGODA_CONSTRAINT_GRAMMAR, "root ::= %json {\"type\": 7}", "a type name");
    /* regexes */
    refuse(PAGODA_CONSTRAINT_REGEX, "(a)\\1", "backreferences");
    refuse(PAGODA_CONSTRAINT_REGEX, "a(?=b)", "lookahead");
    refuse(PAGODA_CONSTRAINT_REGEX, "a\\bc", "word boundaries");
    refuse(PAGODA_CONSTRAINT_REGEX, "(ab", "without its ')'");
    refuse(PAGODA_CONSTRAINT_REGEX, "ab)", "unmatched ')'");
    refuse(PAGODA_CONSTRAINT_REGEX, "*a", "nothing to repeat");
    refuse(PAGODA_CONSTRAINT_REGEX, "[^\\x00-\\u{10FFFF}]", "accepts no output");
    refuse(PAGODA_CONSTRAINT_CHOICE, "[]", "non-empty list");
    refuse(PAGODA_CONSTRAINT_CHOICE, "[\"a\", 3]", "entry 1 is not a string");
    refuse(99, "x", "unknown constraint type");

    /* catastrophic-backtracking patterns are ordinary automata: compiled
     * and walked at once, and correct */
    double t0 = now_s();
    c = must_compile(PAGODA_CONSTRAINT_REGEX, "(a+)+$");
    ck_assert(accepts_str(c, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));
    ck_assert(!accepts_str(c, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab"));
    O->compiled_free(g_ctx, c);
    c = must_compile(PAGODA_CONSTRAINT_REGEX, "(x+x+)+y|(a|a)*|((a*)*)*b");
    ck_assert(accepts_str(c, "xxxxxxxxxxxxxxxxxxxxxxxxxxy"));
    ck_assert(!accepts_str(c, "xxxxxxxxxxxxxxxxxxxxxxxxxx"));
    O->compiled_free(g_ctx, c);
    ck_assert_msg(now_s() - t0 < 5.0, "catastrophic regexes took %.1f s", now_s() - t0);

    /* nested counts share their rules: a{1000} repeated is 1000 references,
     * not a copy, so this compiles small (its automaton grows one state
     * per byte written, under max_states and max_automaton_bytes) */
    c = must_compile(PAGODA_CONSTRAINT_REGEX, "((a{1000}){1000}){1000}");
    O->compiled_free(g_ctx, c);
    /* a grammar too large for the element limit (200000 here) */
    t0 = now_s();
    refuse(PAGODA_CONSTRAINT_REGEX, "[a-z]{100000}[0-9]{100000}[A-Z]{100000}", "too large");
    refuse(PAGODA_CONSTRAINT_REGEX, "a{100001}", "above 100000");
    ck_assert_msg(now_s() - t0 < 5.0, "the limit took %.1f s to refuse", now_s() - t0);

    /* a 1 MiB schema is over max_spec_bytes, refused before parsing */
    size_t big = 1 << 20;
    char *s = malloc(big + 1);
    memset(s, ' ', big);
    memcpy(s, "{\"type\":\"string\"", 16);
    s[big - 1] = '}';
    s[big] = 0;
    refuse(PAGODA_CONSTRAINT_JSON_SCHEMA, s, "more than the limit of 262144");
    free(s);
    /* schemas nested past max_depth */
    char deep[8000] = "";
    for (int i = 0; i < 300; i++) strcat(deep, "{\"type\":\"array\",\"items\":");
    strcat(deep, "true");
    for (int i = 0; i < 300; i++) strcat(deep, "}");
    refuse(PAGODA_CONSTRAINT_JSON_SCHEMA, deep, "nested more than 128 deep");
}
END_TEST

/* A control token that writes markup (harmony's <|channel|>): a <token>
 * reference admits that token and not its spelling in plain pieces; a
 * quoted literal of the same text still takes both; a reference the
 * vocabulary has no control token for is its literal text; <[NAME]> is
 * the token [NAME] (or that text); llama.cpp's <[123]> ids are refused. */
enum { C_LT = 256, C_CHANNEL, C_GT, C_CTL_CHANNEL, C_CTL_MESSAGE, C_COMMENTARY, C_CTL_TC, C_N };
static const char *const ctl_pieces[] = {"<|", "channel", "|>", "<|channel|>", "<|message|>", "commentary",
                                         "[TOOL_CALLS]"};

static int32_t cstep(void *ctx, void *m, int32_t tok) { return O->advance(ctx, m, tok, g_err, sizeof g_err); }

START_TEST(test_control_token_refs)
{
    char *b[C_N];
    uint32_t l[C_N];
    uint8_t ctl[C_N] = {0};
    for (int i = 0; i < 256; i++) {
        b[i] = malloc(1);
        b[i][0] = (char)i;
        l[i] = 1;
    }
    for (int i = C_LT; i < C_N; i++) {
        b[i] = strdup(ctl_pieces[i - C_LT]);
        l[i] = (uint32_t)strlen(b[i]);
    }
    ctl[C_CTL_CHANNEL] = ctl[C_CTL_MESSAGE] = ctl[C_CTL_TC] = 1;
    void *cx = NULL;
    ck_assert_int_eq(g_p->desc.create(&g_host.h, &cx, g_err, sizeof g_err), PAGODA_OK);
    pagoda_constraint_vocab v = {.struct_size = sizeof v, .n_vocab = C_N, .bytes = (const char *const *)b,
                                 .len = l, .control = ctl};
    ck_assert_int_eq(O->set_vocab(cx, &v, g_err, sizeof g_err), PAGODA_OK);
    uint32_t mask[(C_N + 31) / 32];
    void *k = NULL, *m = NULL;

    /* a call header: the control tokens only */
    const char *req = "root ::= <|channel|> \"commentary\" <|message|> \"x\"";
    pagoda_constraint_spec sp = {.struct_size = sizeof sp, .type = PAGODA_CONSTRAINT_GRAMMAR, .text = req,
                                 .len = strlen(req)};
    ck_assert_msg(O->compile(cx, &sp, &k, g_err, sizeof g_err) == PAGODA_OK, "%s", g_err);
    ck_assert_int_eq(O->matcher_new(cx, k, &m, g_err, sizeof g_err), PAGODA_OK);
    ck_assert_int_eq(O->fill_mask(cx, m, mask, g_err, sizeof g_err), PAGODA_OK);
    ck_assert(bit(mask, C_CTL_CHANNEL));
    ck_assert(!bit(mask, '<'));
    ck_assert(!bit(mask, C_LT));
    for (int t = 0; t < C_N; t++) ck_assert_msg(t == C_CTL_CHANNEL || !bit(mask, t), "token %d allowed", t);
    ck_assert_int_ne(cstep(cx, m, C_LT), PAGODA_OK); /* the plain spelling is refused by advance too */
    ck_assert_int_ne(cstep(cx, m, '<'), PAGODA_OK);
    ck_assert_int_eq(cstep(cx, m, C_CTL_CHANNEL), PAGODA_OK);
    ck_assert_int_eq(cstep(cx, m, C_COMMENTARY), PAGODA_OK);
    ck_assert_int_eq(O->fill_mask(cx, m, mask, g_err, sizeof g_err), PAGODA_OK);
    ck_assert(bit(mask, C_CTL_MESSAGE));
    ck_assert(!bit(mask, '<'));
    ck_assert(!bit(mask, C_CTL_CHANNEL));
    ck_assert_int_eq(cstep(cx, m, C_CTL_MESSAGE), PAGODA_OK);
    ck_assert(!O->is_complete(cx, m));
    ck_assert_int_eq(cstep(cx, m, 'x'), PAGODA_OK);
    ck_assert(O->is_complete(cx, m));
    O->matcher_free(cx, m);
    O->compiled_free(cx, k);

    /* text that may hold the markup, or a call after the token itself
     * (harmony's "auto"): the control token goes on both ways */
    const char *aut = "root ::= \"<|channel|>\" [a-z]* | <|channel|> \"commentary!\"";
    sp.text = aut;
    sp.len = strlen(aut);
    ck_assert_msg(O->compile(cx, &sp, &k, g_err, sizeof g_err) == PAGODA_OK, "%s", g_err);
    const int32_t via_ctl_call[] = {C_CTL_CHANNEL, C_COMMENTARY, '!'};
    const int32_t via_ctl_text[] = {C_CTL_CHANNEL, 'a', 'b'};
    const int32_t spelled_call[] = {C_LT, C_CHANNEL, C_GT, C_COMMENTARY, '!'};
    const int32_t *paths[] = {via_ctl_call, via_ctl_text, spelled_call};
    const int n_path[] = {3, 3, 5};
    for (int p = 0; p < 3; p++) {
        ck_assert_int_eq(O->matcher_new(cx, k, &m, g_err, sizeof g_err), PAGODA_OK);
        int ok = 1;
        for (int i = 0; i < n_path[p] && ok; i++) ok = cstep(cx, m, paths[p][i]) == PAGODA_OK;
        ok = ok && O->is_complete(cx, m);
        ck_assert_msg(ok == (p < 2), "path %d: %d", p, ok);
        O->matcher_free(cx, m);
    }
    O->compiled_free(cx, k);

    /* <|start|> is no control token here: its text */
    const char *lit = "root ::= <|start|>";
    sp.text = lit;
    sp.len = strlen(lit);
    ck_assert_msg(O->compile(cx, &sp, &k, g_err, sizeof g_err) == PAGODA_OK, "%s", g_err);
    ck_assert_int_eq(O->matcher_new(cx, k, &m, g_err, sizeof g_err), PAGODA_OK);
    ck_assert_int_eq(cstep(cx, m, C_LT), PAGODA_OK);
    for (const char *q = "start|>"; *q; q++) ck_assert_int_eq(cstep(cx, m, (uint8_t)*q), PAGODA_OK);
    ck_assert(O->is_complete(cx, m));
    O->matcher_free(cx, m);
    O->compiled_free(cx, k);
    /* <[NAME]>: the markup written [NAME] (Mistral's [TOOL_CALLS]), its
     * token only; without that token, the text [NAME] */
    const char *tc = "root ::= <[TOOL_CALLS]> \"[\" | \"x\" <[ARGS]>";
    sp.text = tc;
    sp.len = strlen(tc);
    ck_assert_msg(O->compile(cx, &sp, &k, g_err, sizeof g_err) == PAGODA_OK, "%s", g_err);
    ck_assert_int_eq(O->matcher_new(cx, k, &m, g_err, sizeof g_err), PAGODA_OK);
    ck_assert_int_eq(O->fill_mask(cx, m, mask, g_err, sizeof g_err), PAGODA_OK);
    ck_assert(bit(mask, C_CTL_TC));
    ck_assert(!bit(mask, '['));
    ck_assert(!bit(mask, '<'));
    ck_assert_int_eq(cstep(cx, m, C_CTL_TC), PAGODA_OK);
    ck_assert_int_eq(cstep(cx, m, '['), PAGODA_OK);
    ck_assert(O->is_complete(cx, m));
    O->matcher_free(cx, m);
    ck_assert_int_eq(O->matcher_new(cx, k, &m, g_err, sizeof g_err), PAGODA_OK);
    for (const char *q = "x[ARGS]"; *q; q++) ck_assert_int_eq(cstep(cx, m, (uint8_t)*q), PAGODA_OK);
    ck_assert(O->is_complete(cx, m));
    O->matcher_free(cx, m);
    O->compiled_free(cx, k);
    const char *id = "root ::= <[123]>";
    sp.text = id;
    sp.len = strlen(id);
    ck_assert_int_eq(O->compile(cx, &sp, &k, g_err, sizeof g_err), PAGODA_ERR_INVALID);
    ck_assert_msg(strstr(g_err, "token id reference"), "%s", g_err);
    const char *bad = "root ::= <|start";
    sp.text = bad;
    sp.len = strlen(bad);
    ck_assert_int_eq(O->compile(cx, &sp, &k, g_err, sizeof g_err), PAGODA_ERR_INVALID);
    ck_assert_msg(strstr(g_err, "without its '>'"), "%s", g_err);

    g_p->desc.destroy(cx);
    for (int i = 0; i < C_N; i++) free(b[i]);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("constraint");
    TCase *tc = tcase_create("grammar");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_kind_loads);
    tcase_add_test(tc, test_gbnf_basics);
    tcase_add_test(tc, test_choice);
    tcase_add_test(tc, test_regex_vs_pcre2);
    tcase_add_test(tc, test_regex_unicode);
    tcase_add_test(tc, test_schema_cases);
    tcase_add_test(tc, test_schema_random);
    tcase_add_test(tc, test_schema_horizon);
    tcase_add_test(tc, test_json_object);
    tcase_add_test(tc, test_json_whitespace);
    tcase_add_test(tc, test_tools_auto);
    tcase_add_test(tc, test_mask_cache_and_stats);
    tcase_add_test(tc, test_bad_specs);
    tcase_add_test(tc, test_control_token_refs);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
