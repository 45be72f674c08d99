/* test_constraint_masks.c: the built-in constraint engine's fast mask paths
 * (per-state cache, shared truncated masks, counts sharing one mask, mask
 * eviction) against the plain one: every mask is also made by a second
 * plugin instance with plain_masks (one walk of the whole vocabulary trie
 * from the state, nothing cached or shared), on the same random walks, and
 * the two must be equal bit for bit.
 *
 * The vocabulary is made here to look like a byte-level BPE one: every
 * byte, words with and without a leading space, digit runs, JSON
 * punctuation, runs of spaces and newlines up to 80 bytes (so the horizon,
 * the longest token, is far beyond most counts, as on SmolLM2), multi-byte
 * characters whole and cut, long words, tokens that close a string and go
 * on. PAGODA_MASK_VOCAB=model.gguf runs the same on that model's
 * vocabulary instead (slow: for a manual check on a real one).
 * Not for: whether masks are right about the language (test_constraint.c
 * checks them against advance() and independent oracles). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "gguf.h"
#include "plugin_loader.h"
#include "plugin_testhost.h"
#include "schema_testutil.h"
#include "testutil.h"
#include "tokenizer.h"

/* the random schemas come from schema_testutil.h; its validator is not needed here */
static bool (*const keep_valid)(json_t *, json_t *, json_t *, char *, size_t) __attribute__((unused)) = st_valid;

#define CHECK(cond, ...) do { if (!(cond)) ck_abort_msg(__VA_ARGS__); } while (0)

typedef struct inst {
    pagoda_plugin *p;
    void *ctx;
    th_host host;
} inst;

static const pagoda_constraint_ops *O;
static char g_err[1024];
static int32_t V;
static char **vb;
static uint32_t *vl;

static void add_tok(const char *b, size_t n)
{
    vb[V] = malloc(n ? n : 1);
    memcpy(vb[V], b, n);
    vl[V++] = (uint32_t)n;
}

static void add_str(const char *s) { add_tok(s, strlen(s)); }

static void make_vocab(void)
{
    const int cap = 12000;
    vb = calloc(cap, sizeof *vb);
    vl = calloc(cap, sizeof *vl);
    V = 0;
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        add_tok(&c, 1);
    }
    static const char *const punct[] = {
        "{\"", "\":", "\": ", "\":\"", "\": \"", "\",", "\", \"", "\",\"", "\"}", "\"},", "\"}]", "\"]",
        "[{\"", "[\"", "},", "}]", "},{", "}, {", "\n", "\n\n", "\",\n", ",\n", "{\n", "null", "true",
        "false", "\\n", "\\\"", "\\\\", "\\u00", "\\t", "--", "==", "://", ".com", "@", "-0", "0.", ".5",
        "e+", "E-", "2024-", "-01", "T12", ":00", "Z\"", "\"order_id\"", "\"name\":\"", "\"sku\": \"",
        "quantity", "unit_price", "\"notes\": null", "pending", "\"paid\"", "<tool_call>", "</tool_call>",
        "\xc3\xa9", "\xc3\xa9t\xc3\xa9", " caf\xc3\xa9", "\xe4\xb8\xad", "\xe4\xb8\xad\xe6\x96\x87",
        "\xf0\x9f\x98\x80", "\xc3", "\xa9x", "\xe2\x82", "\xac", "\xe4\xb8", " \xe2\x80\x94",
    };
    for (size_t i = 0; i < sizeof punct / sizeof punct[0]; i++) add_str(punct[i]);
    char buf[128];
    for (int n = 2; n <= 80; n++) { /* runs of spaces, and a newline before them */
        memset(buf, ' ', (size_t)n);
        add_tok(buf, (size_t)n);
        buf[0] = '\n';
        add_tok(buf, (size_t)n);
    }
    for (int n = 2; n <= 32; n += 3) {
        memset(buf, '-', (size_t)n);
        add_tok(buf, (size_t)n);
    }
    tu_rng r;
    tu_rng_seed(&r, 99);
    for (int i = 0; i < 100; i++) snprintf(buf, sizeof buf, "%d", i), add_str(buf);
    for (int i = 0; i < 300; i++) snprintf(buf, sizeof buf, "%d", (int)(tu_rng_u64(&r) % 100000)), add_str(buf);
    while (V < 6000) {
        /* a word: 1-12 letters (a few up to 30), maybe a leading space,
         * a capital, an accented letter, a closing quote and more */
        int n = 1 + (int)(tu_rng_u64(&r) % 12), k = 0;
        if (tu_rng_u64(&r) % 20 == 0) n = 12 + (int)(tu_rng_u64(&r) % 19);
        if (tu_rng_u64(&r) % 2) buf[k++] = ' ';
        for (int j = 0; j < n; j++) {
            uint64_t x = tu_rng_u64(&r) % 60;
            if (x == 0) {
                buf[k++] = '\xc3';
                buf[k++] = '\xa9';
            } else if (j == 0 && x < 8) {
                buf[k++] = (char)('A' + (int)(tu_rng_u64(&r) % 26));
            } else {
                buf[k++] = (char)('a' + (int)(tu_rng_u64(&r) % 26));
            }
        }
        uint64_t e = tu_rng_u64(&r) % 30;
        if (e == 0) buf[k++] = '"';
        else if (e == 1) { buf[k++] = '"'; buf[k++] = ','; }
        else if (e == 2) { buf[k++] = '"'; buf[k++] = '}'; }
        else if (e == 3) buf[k++] = '.';
        add_tok(buf, (size_t)k);
    }
    add_tok("", 0); /* writes nothing: never allowed */
}

/* The vocabulary of a GGUF's tokenizer (PAGODA_MASK_VOCAB). */
static bool load_vocab(const char *path)
{
    char err[512];
    gguf_file *g = pagoda_gguf_open(path, err, sizeof err);
    if (!g) return false;
    pagoda_tokenizer *t = pagoda_tokenizer_load(g, err, sizeof err);
    if (!t) {
        pagoda_gguf_close(g);
        return false;
    }
    int32_t n = pagoda_tokenizer_n_vocab(t);
    vb = calloc((size_t)n, sizeof *vb);
    vl = calloc((size_t)n, sizeof *vl);
    V = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t len = 0;
        const char *b = pagoda_token_bytes(t, i, false, &len);
        add_tok(b, pagoda_tokenizer_is_eog(t, i) ? 0 : len);
    }
    pagoda_tokenizer_free(t);
    pagoda_gguf_close(g);
    return true;
}

static void inst_open(inst *in, const char *const *keys)
{
    char path[1200];
    snprintf(path, sizeof path, "%s", tu_build("plugins/constraint-grammar.so"));
    int st = pagoda_plugin_load_file(path, PAGODA_KIND_CONSTRAINT, "grammar", &in->p, g_err, sizeof g_err);
    ck_assert_msg(st == PAGODA_OK, "%s", g_err);
    O = &in->p->ops.constraint;
    th_init(&in->host);
    for (int i = 0; keys && keys[i]; i += 2) th_set(&in->host, keys[i], keys[i + 1]);
    st = in->p->desc.create(&in->host.h, &in->ctx, g_err, sizeof g_err);
    ck_assert_msg(st == PAGODA_OK, "%s", g_err);
    pagoda_constraint_vocab v = {.struct_size = sizeof v, .n_vocab = V, .bytes = (const char *const *)vb,
                                 .len = vl};
    ck_assert_int_eq(O->set_vocab(in->ctx, &v, g_err, sizeof g_err), PAGODA_OK);
}

static void inst_close(inst *in)
{
    in->p->desc.destroy(in->ctx);
    pagoda_plugin_free(in->p);
}

static inline bool bit(const uint32_t *m, int32_t t) { return m[t >> 5] >> (t & 31) & 1; }

/* n_walks random walks of spec through fast and plain together; every
 * mask compared. Returns the masks compared. */
static long compare_walks(inst *fast, inst *plain, int type, const char *text, int n_walks, int max_len,
                          uint64_t seed)
{
    pagoda_constraint_spec sp = {.struct_size = sizeof sp, .type = type, .text = text,
                                 .len = text ? strlen(text) : 0, .strict = false};
    void *cf = NULL, *cp = NULL;
    CHECK(O->compile(fast->ctx, &sp, &cf, g_err, sizeof g_err) == PAGODA_OK, "%s: %s", text, g_err);
    CHECK(O->compile(plain->ctx, &sp, &cp, g_err, sizeof g_err) == PAGODA_OK, "%s: %s", text, g_err);
    int words = (V + 31) / 32;
    uint32_t *mf = malloc(sizeof *mf * (size_t)words), *mp = malloc(sizeof *mp * (size_t)words);
    int32_t *allowed = malloc(sizeof *allowed * (size_t)V);
    static char out[65536];
    tu_rng r;
    tu_rng_seed(&r, seed);
    long n_masks = 0;
    for (int w = 0; w < n_walks; w++) {
        void *a = NULL, *b = NULL;
        CHECK(O->matcher_new(fast->ctx, cf, &a, g_err, sizeof g_err) == PAGODA_OK, "%s", g_err);
        CHECK(O->matcher_new(plain->ctx, cp, &b, g_err, sizeof g_err) == PAGODA_OK, "%s", g_err);
        size_t ol = 0;
        for (int step = 0; step < max_len; step++) {
            CHECK(O->fill_mask(fast->ctx, a, mf, g_err, sizeof g_err) == PAGODA_OK, "%s", g_err);
            CHECK(O->fill_mask(plain->ctx, b, mp, g_err, sizeof g_err) == PAGODA_OK, "%s", g_err);
            n_masks++;
            int32_t na = 0;
            for (int32_t t = 0; t < V; t++) {
                CHECK(bit(mf, t) == bit(mp, t), "%.80s: walk %d step %d: token %d ('%.*s') fast %d plain %d "
                      "after '%.*s'", text ? text : "json_object", w, step, t, (int)vl[t], vb[t], bit(mf, t),
                      bit(mp, t), (int)(ol > 300 ? 300 : ol), ol > 300 ? out + ol - 300 : out);
                if (bit(mf, t)) allowed[na++] = t;
            }
            bool complete = O->is_complete(fast->ctx, a);
            CHECK(complete == O->is_complete(plain->ctx, b), "is_complete differs");
            if (!na || (complete && tu_rng_uniform(&r) < 0.1f)) break;
            int32_t t = allowed[tu_rng_u64(&r) % (uint64_t)na];
            CHECK(O->advance(fast->ctx, a, t, g_err, sizeof g_err) == PAGODA_OK, "%s", g_err);
            CHECK(O->advance(plain->ctx, b, t, g_err, sizeof g_err) == PAGODA_OK, "%s", g_err);
            if (ol + vl[t] < sizeof out) {
                memcpy(out + ol, vb[t], vl[t]);
                ol += vl[t];
            }
        }
        O->matcher_free(fast->ctx, a);
        O->matcher_free(plain->ctx, b);
    }
    O->compiled_free(fast->ctx, cf);
    O->compiled_free(plain->ctx, cp);
    free(mf);
    free(mp);
    free(allowed);
    return n_masks;
}

typedef struct spec {
    int type;
    const char *text;
} spec;

/* counted repetition of every shape: optional and mandatory counts below,
 * at and above the horizon, nullable items, nested counts, strings with
 * both bounds, counts inside arrays and inside a grammar's tool call */
static const spec specs[] = {
    {PAGODA_CONSTRAINT_JSON_SCHEMA, pagoda_bench_order_schema},
    {PAGODA_CONSTRAINT_JSON_SCHEMA, "{\"type\":\"string\",\"maxLength\":40}"},
    {PAGODA_CONSTRAINT_JSON_SCHEMA, "{\"type\":\"string\",\"minLength\":30,\"maxLength\":95}"},
    {PAGODA_CONSTRAINT_JSON_SCHEMA, "{\"type\":\"string\",\"minLength\":120,\"maxLength\":200}"},
    {PAGODA_CONSTRAINT_JSON_SCHEMA, "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":12},"
                                    "\"minItems\":3,\"maxItems\":30}"},
    {PAGODA_CONSTRAINT_JSON_SCHEMA, "{\"type\":\"array\",\"items\":{\"enum\":[1,22,\"ab\"]},\"minItems\":18,"
                                    "\"maxItems\":100}"},
    {PAGODA_CONSTRAINT_JSON_SCHEMA, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\","
                                    "\"maxLength\":25},\"b\":{\"type\":\"array\",\"items\":{\"type\":\"string\","
                                    "\"minLength\":2,\"maxLength\":9},\"maxItems\":20}},\"required\":[\"a\"]}"},
    {PAGODA_CONSTRAINT_GRAMMAR, "root ::= (\"a\"? \"b\"?){3,60} \"!\""},
    {PAGODA_CONSTRAINT_GRAMMAR, "root ::= (\"ab\" | [0-9] | \" \"){10,90} \"\\n\" ([a-z ]{0,50} \".\")?"},
    {PAGODA_CONSTRAINT_GRAMMAR, "root ::= \"<tool_call>\\n\" %json {\"type\":\"object\",\"properties\":"
                                "{\"q\":{\"type\":\"string\",\"maxLength\":70}},\"required\":[\"q\"]} "
                                "\"\\n</tool_call>\""},
    {PAGODA_CONSTRAINT_REGEX, "[a-z \\xe9]{0,100}"},
    {PAGODA_CONSTRAINT_REGEX, "(\\d{2,40}-){1,3}x"},
    {PAGODA_CONSTRAINT_REGEX, "((ab){2,5} ){3,30}"},
    {PAGODA_CONSTRAINT_JSON_OBJECT, NULL},
};

/* fast-path configurations: the defaults, no truncation (every state's
 * own mask, counts still shared), deep and shallow truncation (few and
 * many escape roots) */
static const char *const *fast_keys(int i)
{
    static const char *const k0[] = {NULL};
    static const char *const k1[] = {"trunc_depth", "0", NULL};
    static const char *const k2[] = {"trunc_depth", "6", NULL};
    static const char *const k3[] = {"trunc_depth", "1", NULL};
    static const char *const *all[] = {k0, k1, k2, k3};
    return all[i];
}

START_TEST(test_masks_equal_plain)
{
    const char *vpath = getenv("PAGODA_MASK_VOCAB");
    if (vpath && *vpath) ck_assert_msg(load_vocab(vpath), "cannot read the vocabulary of %s", vpath);
    else make_vocab();
    static const char *const plain_keys[] = {"plain_masks", "true", NULL};
    inst plain;
    inst_open(&plain, plain_keys);
    long total = 0;
    int n_walks = vpath ? 3 : 6;
    for (int cfg = 0; cfg < 4; cfg++) {
        inst fast;
        inst_open(&fast, fast_keys(cfg));
        for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
            total += compare_walks(&fast, &plain, specs[i].type, specs[i].text, n_walks, 300,
                                   1000 * (uint64_t)cfg + i);
        /* random schemas of the validator's generator */
        tu_rng r;
        tu_rng_seed(&r, 77 + (uint64_t)cfg);
        for (int i = 0; i < (vpath ? 4 : 12); i++) {
            long mb;
            json_t *s = st_random_schema(&r, 2, &mb);
            char *txt = json_dumps(s, JSON_COMPACT);
            total += compare_walks(&fast, &plain, PAGODA_CONSTRAINT_JSON_SCHEMA, txt, 3, 300, 5000 + (uint64_t)i);
            free(txt);
            json_decref(s);
        }
        pagoda_constraint_stats st = {.struct_size = sizeof st};
        ck_assert_int_eq(O->stats(fast.ctx, &st), PAGODA_OK);
        /* the cache and the sharing were exercised, not only plain walks */
        ck_assert_int_gt(st.mask_cache_hits, st.masks / 10);
        inst_close(&fast);
    }
    inst_close(&plain);
    fprintf(stderr, "compared %ld masks of %d tokens\n", total, V);
    ck_assert_int_gt(total, vpath ? 100 : 5000);
    for (int32_t i = 0; i < V; i++) free(vb[i]);
    free(vb);
    free(vl);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("constraint_masks");
    TCase *tc = tcase_create("equal");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_masks_equal_plain);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
