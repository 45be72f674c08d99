/* test_golden.c: greedy generation of the bundled stories260K model through
 * the whole runtime (CPU backend plugin, continuous scheduler, paged KV)
 * reproduces llama2.c run.c's tokens and text exactly (tests/data/
 * stories260K.golden.json, copied from ../shared/models). */
#include <jansson.h>

#include "engine_testutil.h"

static json_t *golden(void)
{
    json_error_t je;
    json_t *j = json_load_file(tu_src("tests/data/stories260K.golden.json"), 0, &je);
    ck_assert_msg(j != NULL, "golden file: %s", je.text);
    return j;
}

static void check_case(const char *kv_dtype, const char *kvcache)
{
    json_t *g = golden();
    json_t *c = json_array_get(json_object_get(g, "cases"), 0);
    const char *prompt = json_string_value(json_object_get(c, "prompt"));
    json_t *want = json_object_get(c, "generated_tokens");
    size_t n_want = json_array_size(want);
    ck_assert_uint_gt(n_want, 100);

    char s1[64], s2[64];
    snprintf(s1, sizeof s1, "engine.kv_dtype=%s", kv_dtype);
    snprintf(s2, sizeof s2, "engine.kvcache=%s", kvcache);
    const char *settings[] = {s1, s2, "engine.kv_cache_tokens=1024", NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open(&cfg, settings);

    /* the prompt's own tokens (after BOS) are the golden list's head */
    int32_t ids[64], n = 0;
    ck_assert_int_eq(pagoda_tokenize(rt->model->tok, prompt, strlen(prompt), true, false, ids, 64, &n), 0);
    ck_assert_int_eq(ids[0], 1);
    for (int32_t i = 1; i < n; i++)
        ck_assert_int_eq(ids[i], (int32_t)json_integer_value(json_array_get(want, (size_t)i - 1)));

    et_result *r = malloc(sizeof *r);
    et_result_init(r);
    int32_t n_gen = (int32_t)n_want - (n - 1);
    et_submit(rt, prompt, n_gen, r, 0.0f);
    pagoda_engine_wait_idle(rt->engine);
    ck_assert_int_eq(r->n_final, 1);
    ck_assert_int_eq(r->finish_reason, PAGODA_FINISH_LENGTH);
    ck_assert_int_eq(r->n_tokens, n_gen);
    int mismatches = 0, first = -1;
    for (int32_t i = 0; i < n_gen; i++) {
        int32_t w = (int32_t)json_integer_value(json_array_get(want, (size_t)(n - 1 + i)));
        if (r->tokens[i] != w) { mismatches++; if (first < 0) first = i; }
    }
    ck_assert_msg(mismatches == 0, "kv %s/%s: %d of %d generated tokens differ, first at %d",
                  kv_dtype, kvcache, mismatches, n_gen, first);
    /* text: run.c prints the prompt then the continuation */
    const char *want_text = json_string_value(json_object_get(c, "text"));
    char full[70000];
    snprintf(full, sizeof full, "%s%s", prompt, r->text);
    ck_assert_msg(strncmp(full, want_text, strlen(full) < strlen(want_text) ? strlen(full) : strlen(want_text)) == 0,
                  "text differs:\n got: %s\nwant: %s", full, want_text);
    ck_assert_uint_ge(strlen(full) + 2, strlen(want_text));
    free(r);
    et_close(rt, cfg);
    json_decref(g);
}

START_TEST(golden_f32_kv) { check_case("f32", "paged"); }
END_TEST

START_TEST(golden_f16_kv) { check_case("f16", "paged"); }
END_TEST

START_TEST(golden_text_case)
{
    json_t *g = golden();
    json_t *c = json_array_get(json_object_get(g, "text_cases"), 0);
    const char *prompt = json_string_value(json_object_get(c, "prompt"));
    const char *want = json_string_value(json_object_get(c, "text"));
    const char *settings[] = {"engine.kv_dtype=f32", "engine.kv_cache_tokens=1024", NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open(&cfg, settings);
    int32_t ids[64], n = 0;
    pagoda_tokenize(rt->model->tok, prompt, strlen(prompt), true, false, ids, 64, &n);
    et_result *r = malloc(sizeof *r);
    et_result_init(r);
    et_submit(rt, prompt, 121 - n, r, 0.0f); /* run.c -n 120: tokens at positions 1..120 */
    pagoda_engine_wait_idle(rt->engine);
    char full[70000];
    snprintf(full, sizeof full, "%s%s", prompt, r->text);
    /* run.c's output ends with a newline after the last token */
    size_t lw = strlen(want);
    if (lw && want[lw - 1] == '\n') lw--;
    ck_assert_msg(strlen(full) >= lw && strncmp(full, want, lw) == 0,
                  "text differs:\n got: %s\nwant: %.*s", full, (int)lw, want);
    free(r);
    et_close(rt, cfg);
    json_decref(g);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("golden");
    TCase *tc = tcase_create("stories260K");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, golden_f32_kv);
    tcase_add_test(tc, golden_f16_kv);
    tcase_add_test(tc, golden_text_case);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
