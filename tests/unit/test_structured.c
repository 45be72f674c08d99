/* test_structured.c: structured output through the engine on the bundled
 * stories260K model (which knows no JSON: the mask alone makes its output
 * valid, which is the point):
 *   - many random schemas sampled at temperature 1, all in flight together
 *     with unconstrained requests: every output finishes ("stop"), parses
 *     and validates (schema_testutil.h's independent validator); each
 *     schema's longest output fits max_tokens, so "length" would be a bug;
 *   - the free requests of that batch give the same tokens as when run
 *     alone (constrained neighbours cost them nothing but time);
 *   - grammar, regex and choice requests; an output that is complete with
 *     nothing allowed after it ends without an end token;
 *   - max_tokens cutting an unfinished output: "length" and the prefix;
 *   - bad specs refused by submit with the reason; constraint = none. */
#include <jansson.h>
#include <time.h>

#include "engine_testutil.h"
#include "schema_testutil.h"

#define N_SCHEMAS 96
#define N_FREE 6

static pagoda_config *g_cfg;
static pagoda_runtime *g_rt;

static void setup(void)
{
    const char *set[] = {"engine.kv_dtype=f32", "engine.kv_cache_tokens=16384", "backend.cpu.threads=1",
                         "engine.max_seq_len=512", NULL};
    g_rt = et_open(&g_cfg, set);
}

static void teardown(void) { et_close(g_rt, g_cfg); }

static int submit_c(et_result *r, const char *prompt, int type, const char *spec, int max_tokens,
                    float temp, uint64_t seed, char *err, size_t err_len)
{
    pagoda_request req;
    pagoda_engine_request_defaults(g_rt->engine, &req);
    req.prompt = prompt;
    req.prompt_len = strlen(prompt);
    req.max_tokens = max_tokens;
    req.temperature = temp;
    req.seed = seed;
    req.has_seed = true;
    req.constraint_type = type;
    req.constraint = spec;
    req.constraint_len = spec ? strlen(spec) : 0;
    req.constraint_strict = true;
    uint64_t id;
    err[0] = 0;
    return pagoda_engine_submit(g_rt->engine, &req, et_cb, r, &id, err, err_len);
}

START_TEST(test_random_schemas_validate)
{
    tu_rng rng;
    tu_rng_seed(&rng, 20251201);
    static et_result res[N_SCHEMAS], free_res[N_FREE], alone[N_FREE];
    json_t *schemas[N_SCHEMAS];
    char err[512];
    const char *free_prompts[N_FREE] = {"Once upon a time", "The cat", "Lily and Tom", "One day",
                                        "The sun", "A little bird"};
    int32_t V = g_rt->model->hp.n_vocab;
    (void)V;
    /* free requests alone first (greedy, so comparable) */
    for (int i = 0; i < N_FREE; i++) {
        et_result_init(&alone[i]);
        et_submit(g_rt, free_prompts[i], 40, &alone[i], 0.0f);
        pagoda_engine_wait_idle(g_rt->engine);
    }
    int n_obj = 0;
    for (int i = 0; i < N_SCHEMAS; i++) {
        long mb = 0;
        json_t *s;
        do { /* only schemas whose longest output fits the context */
            s = st_random_schema(&rng, 2, &mb);
            if (mb > 440) json_decref(s);
        } while (mb > 440);
        schemas[i] = s;
        n_obj += json_object_get(s, "properties") != NULL;
        char *txt = json_dumps(s, JSON_COMPACT);
        et_result_init(&res[i]);
        int st = submit_c(&res[i], "Once upon a time", PAGODA_CONSTRAINT_JSON_SCHEMA, txt,
                          (int)mb + 1, 1.0f, 1000 + (uint64_t)i, err, sizeof err);
        ck_assert_msg(st == 0, "schema %s: %s", txt, err);
        free(txt);
        if (i % 16 == 0 && i / 16 < N_FREE) {
            et_result_init(&free_res[i / 16]);
            et_submit(g_rt, free_prompts[i / 16], 40, &free_res[i / 16], 0.0f);
        }
    }
    pagoda_engine_wait_idle(g_rt->engine);
    ck_assert_int_gt(n_obj, 5);
    for (int i = 0; i < N_SCHEMAS; i++) {
        char *txt = json_dumps(schemas[i], JSON_COMPACT);
        et_result *r = &res[i];
        ck_assert_int_eq(r->n_final, 1);
        ck_assert_msg(r->finish_reason == PAGODA_FINISH_STOP, "schema %s: finish %d (%s) after '%s'",
                      txt, r->finish_reason, r->error, r->text);
        if (getenv("PAGODA_TEST_VERBOSE")) printf("%s\n  -> %s\n", txt, r->text);
        json_error_t je;
        json_t *v = json_loadb(r->text, r->text_len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        ck_assert_msg(v, "schema %s: output is not JSON (%s): %s", txt, je.text, r->text);
        char why[128] = "";
        ck_assert_msg(st_valid(schemas[i], schemas[i], v, why, sizeof why), "schema %s: invalid (%s): %s",
                      txt, why, r->text);
        json_decref(v);
        free(txt);
        json_decref(schemas[i]);
    }
    for (int i = 0; i < N_FREE; i++) {
        ck_assert_int_eq(free_res[i].n_tokens, alone[i].n_tokens);
        ck_assert_msg(memcmp(free_res[i].tokens, alone[i].tokens, sizeof(int32_t) * (size_t)alone[i].n_tokens) == 0,
                      "free request %d changed beside constrained ones", i);
    }
}
END_TEST

static void run_one(et_result *r, int type, const char *spec, int max_tokens, float temp, uint64_t seed)
{
    char err[512];
    et_result_init(r);
    int st = submit_c(r, "Once upon a time", type, spec, max_tokens, temp, seed, err, sizeof err);
    ck_assert_msg(st == 0, "%s: %s", spec ? spec : "", err);
    pagoda_engine_wait_idle(g_rt->engine);
    ck_assert_int_eq(r->n_final, 1);
}

START_TEST(test_grammar_regex_choice)
{
    et_result r;
    for (uint64_t seed = 1; seed <= 6; seed++) {
        run_one(&r, PAGODA_CONSTRAINT_GRAMMAR,
                "root ::= \"The answer is \" (\"yes\" | \"no\" | [0-9]{1,3}) \".\"", 40, 1.0f, seed);
        ck_assert_int_eq(r.finish_reason, PAGODA_FINISH_STOP);
        ck_assert_msg(st_re_search("^The answer is (yes|no|[0-9]{1,3})\\.$", r.text, r.text_len) == 1, "%s", r.text);
        run_one(&r, PAGODA_CONSTRAINT_REGEX, "[A-Z][a-z]{2,6}( [a-z]{1,5}){0,3}!", 60, 1.0f, seed);
        ck_assert_int_eq(r.finish_reason, PAGODA_FINISH_STOP);
        ck_assert_msg(st_re_search("^[A-Z][a-z]{2,6}( [a-z]{1,5}){0,3}!$", r.text, r.text_len) == 1, "%s", r.text);
        run_one(&r, PAGODA_CONSTRAINT_CHOICE, "[\"happy\", \"sad\", \"a dragon\"]", 20, 1.0f, seed);
        ck_assert_int_eq(r.finish_reason, PAGODA_FINISH_STOP);
        ck_assert_msg(!strcmp(r.text, "happy") || !strcmp(r.text, "sad") || !strcmp(r.text, "a dragon"),
                      "%s", r.text);
    }
    /* greedy works too, and json_object */
    run_one(&r, PAGODA_CONSTRAINT_JSON_OBJECT, NULL, 400, 0.0f, 1);
    if (r.finish_reason == PAGODA_FINISH_STOP) {
        json_t *v = json_loadb(r.text, r.text_len, JSON_ALLOW_NUL, NULL);
        ck_assert_msg(json_is_object(v), "%s", r.text);
        json_decref(v);
    } else {
        ck_assert_int_eq(r.finish_reason, PAGODA_FINISH_LENGTH);
        ck_assert_int_eq(r.usage.completion_tokens, 400);
    }
}
END_TEST

static int g_observed, g_prefetched;

static void observe(void *user, double seconds, bool prefetched)
{
    (void)user;
    ck_assert(seconds >= 0);
    g_observed++;
    g_prefetched += prefetched;
}

/* Every constrained sample asks for one mask (prefetched by the worker or
 * filled inline; which one depends on timing, so only the sum is checked). */
START_TEST(test_mask_per_sample)
{
    pagoda_engine_set_mask_observer(g_rt->engine, observe, NULL);
    et_result r;
    run_one(&r, PAGODA_CONSTRAINT_JSON_SCHEMA, "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},"
            "\"minItems\":3,\"maxItems\":3}", 200, 1.0f, 9);
    ck_assert_int_eq(r.finish_reason, PAGODA_FINISH_STOP);
    /* one mask per token, and one more when the output ended without an end token */
    ck_assert_msg(g_observed == r.usage.completion_tokens || g_observed == r.usage.completion_tokens + 1,
                  "%d masks for %d tokens", g_observed, r.usage.completion_tokens);
    ck_assert_int_le(g_prefetched, g_observed);
    pagoda_engine_set_mask_observer(g_rt->engine, NULL, NULL);
}
END_TEST

/* Cancelled while their masks are being prefetched: each gets one FINAL
 * (cancelled or finished) and nothing is used after it is freed (the
 * sanitizer build runs this). */
START_TEST(test_cancel_constrained)
{
    static et_result r[8];
    uint64_t ids[8];
    char err[512];
    for (int i = 0; i < 8; i++) {
        et_result_init(&r[i]);
        pagoda_request req;
        pagoda_engine_request_defaults(g_rt->engine, &req);
        req.prompt = "Once upon a time";
        req.prompt_len = strlen(req.prompt);
        req.max_tokens = 300;
        req.temperature = 1.0f;
        req.constraint_type = i % 2 ? PAGODA_CONSTRAINT_JSON_OBJECT : PAGODA_CONSTRAINT_REGEX;
        req.constraint = i % 2 ? NULL : "[a-z ]{200,290}\\.";
        req.constraint_len = req.constraint ? strlen(req.constraint) : 0;
        ck_assert_int_eq(pagoda_engine_submit(g_rt->engine, &req, et_cb, &r[i], &ids[i], err, sizeof err), 0);
    }
    for (int i = 0; i < 8; i++) {
        struct timespec ts = {0, 200000L * (i + 1)};
        nanosleep(&ts, NULL);
        pagoda_engine_cancel(g_rt->engine, ids[i]);
    }
    pagoda_engine_wait_idle(g_rt->engine);
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(r[i].n_final, 1);
        ck_assert_int_eq(r[i].n_text_events_after_final, 0);
    }
}
END_TEST

START_TEST(test_length_cut)
{
    et_result r;
    run_one(&r, PAGODA_CONSTRAINT_JSON_SCHEMA, "{\"type\":\"string\",\"minLength\":40}", 5, 1.0f, 3);
    ck_assert_int_eq(r.finish_reason, PAGODA_FINISH_LENGTH);
    ck_assert_int_eq(r.usage.completion_tokens, 5);
    ck_assert_msg(r.text[0] == '"', "%s", r.text);
}
END_TEST

START_TEST(test_bad_specs_refused)
{
    et_result r;
    char err[512];
    et_result_init(&r);
    ck_assert_int_eq(submit_c(&r, "x", PAGODA_CONSTRAINT_JSON_SCHEMA, "{\"type\": 3}", 10, 1, 1, err, sizeof err),
                     PAGODA_ERR_INVALID);
    ck_assert_msg(strstr(err, "json_schema: #: 'type' must be a type name"), "%s", err);
    ck_assert_int_eq(submit_c(&r, "x", PAGODA_CONSTRAINT_GRAMMAR, "root ::= r\nr ::= \"a\" r", 10, 1, 1, err,
                              sizeof err), PAGODA_ERR_INVALID);
    ck_assert_msg(strstr(err, "grammar: the spec accepts no output"), "%s", err);
    ck_assert_int_eq(submit_c(&r, "x", 42, "x", 10, 1, 1, err, sizeof err), PAGODA_ERR_INVALID);
    ck_assert_int_eq(r.n_final, 0);
    /* the engine still serves */
    run_one(&r, PAGODA_CONSTRAINT_CHOICE, "[\"ok\"]", 10, 1.0f, 1);
    ck_assert_str_eq(r.text, "ok");
    ck_assert_int_eq(r.finish_reason, PAGODA_FINISH_STOP);
}
END_TEST

START_TEST(test_constraint_off)
{
    pagoda_config *cfg;
    const char *set[] = {"engine.constraint=none", "backend.cpu.threads=1", NULL};
    pagoda_runtime *rt = et_open(&cfg, set);
    ck_assert_ptr_null(pagoda_runtime_constraint(rt));
    pagoda_request req;
    pagoda_engine_request_defaults(rt->engine, &req);
    req.prompt = "x";
    req.prompt_len = 1;
    req.constraint_type = PAGODA_CONSTRAINT_REGEX;
    req.constraint = "a";
    req.constraint_len = 1;
    uint64_t id;
    char err[256];
    et_result r;
    et_result_init(&r);
    ck_assert_int_eq(pagoda_engine_submit(rt->engine, &req, et_cb, &r, &id, err, sizeof err), PAGODA_ERR_INVALID);
    ck_assert_msg(strstr(err, "structured output is off"), "%s", err);
    et_close(rt, cfg);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("structured");
    TCase *tc = tcase_create("engine");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_random_schemas_validate);
    tcase_add_test(tc, test_grammar_regex_choice);
    tcase_add_test(tc, test_length_cut);
    tcase_add_test(tc, test_mask_per_sample);
    tcase_add_test(tc, test_cancel_constrained);
    tcase_add_test(tc, test_bad_specs_refused);
    suite_add_tcase(s, tc);
    TCase *off = tcase_create("off");
    tcase_set_timeout(off, 120);
    tcase_add_test(off, test_constraint_off);
    suite_add_tcase(s, off);
    return s;
}

int main(void) { return tu_run(suite()); }
