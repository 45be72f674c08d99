/* test_moe_ref.c: pagoda's mixture-of-experts forward pass against a
 * reference of another lineage: tiny random models built from a
 * transformers config and converted by llama.cpp's convert_hf_to_gguf.py
 * (tests/fixtures/moe/, made by make_fixtures.py there, not in CI), with
 * transformers' F32 logits for three token-id prompts. For each fixture
 * present (qwen3moe, qwen2moe, mixtral, glm4moe): the prompt in one
 * prefill, every position's top-5 logits and the last position's whole
 * vocabulary within 1e-3 of transformers' (the spread of those logits,
 * 12-17, is printed beside the measured difference); then 32 greedy steps
 * on pagoda's own choices, which must be transformers' greedy ids up to
 * the first step whose reference top-2 gap is under 2e-3 (a near-tie:
 * there the two float orders may choose differently) and past it only
 * while they still agree. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_testutil.h"
#include "forward.h"
#include "model_testutil.h"
#include "testutil.h"

#define TOL 1e-3
#define NEAR_TIE 2e-3

enum { BS = 16, NB = 8, CAP = NB * BS };

static int32_t argmax(const float *x, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Returns false when the fixture is absent. */
static bool check_fixture(const char *arch)
{
    char rel[128], gg[128];
    snprintf(rel, sizeof rel, "tests/fixtures/moe/%s-tiny.ref.json", arch);
    snprintf(gg, sizeof gg, "tests/fixtures/moe/%s-tiny.f32.gguf", arch);
    const char *jpath = tu_src(rel);
    if (access(jpath, R_OK) != 0) {
        printf("%s: no fixture (%s): skipped\n", arch, rel);
        return false;
    }
    json_error_t je;
    json_t *ref = json_load_file(jpath, 0, &je);
    ck_assert_msg(ref != NULL, "%s: %s (line %d)", rel, je.text, je.line);
    ck_assert_str_eq(json_string_value(json_object_get(ref, "arch")), arch);

    pagoda_config *cfg;
    const char *settings[] = {"engine.kv_dtype=f32", "engine.kv_cache_tokens=256",
                              "engine.max_seq_len=128", "backend.cpu.threads=2", NULL};
    pagoda_runtime *rt = et_open_model(&cfg, tu_src(gg), settings);
    /* Mixtral is written as general.architecture llama with expert tensors */
    ck_assert_str_eq(rt->model->hp.arch, strcmp(arch, "mixtral") ? arch : "llama");
    ck_assert_int_gt(rt->model->hp.n_experts, 0);
    const int32_t V = rt->model->hp.n_vocab;
    float *logits = malloc(sizeof(float) * CAP * (size_t)V);
    int32_t table[NB], pos[CAP], rows[CAP];
    for (int32_t b = 0; b < NB; b++) table[b] = (b * 5 + 3) % NB;   /* scrambled blocks */
    int32_t slots[CAP];
    for (int32_t i = 0; i < CAP; i++) {
        pos[i] = rows[i] = i;
        slots[i] = table[i / BS] * BS + i % BS;
    }
    json_t *prompts = json_object_get(ref, "prompts");
    double worst = 0, spread = 0;
    for (size_t p = 0; p < json_array_size(prompts); p++) {
        json_t *pr = json_array_get(prompts, p);
        json_t *ids = json_object_get(pr, "ids");
        int32_t n = (int32_t)json_array_size(ids), tok[CAP];
        json_t *greedy = json_object_get(pr, "greedy_ids"), *gaps = json_object_get(pr, "greedy_top2_gap");
        int32_t n_gen = (int32_t)json_array_size(greedy);
        ck_assert_int_le(n + n_gen, CAP);
        for (int32_t i = 0; i < n; i++) tok[i] = (int32_t)json_integer_value(json_array_get(ids, i));
        pagoda_forward fw;
        char err[1024] = "";
        ck_assert_msg(pagoda_forward_init(&fw, rt->model, &rt->backend, CAP, CAP, NB, BS,
                                          PAGODA_DTYPE_F32, err, sizeof err) == 0, "%s", err);
        pagoda_seq_view sv = {.q_start = 0, .n_q = n, .ctx_len = n, .n_blocks = NB, .block_table = table};
        pagoda_batch b = {.seq_no = 1, .n_tokens = n, .tokens = tok, .positions = pos, .slots = slots,
                          .n_seqs = 1, .seqs = &sv};
        ck_assert_msg(pagoda_forward_run(&fw, &b, rows, n, logits, err, sizeof err) == 0, "%s", err);
        /* every position's top-5, the last position's whole vocabulary */
        mt_check_ref_logits(pr, logits, n, V, TOL, &worst, arch, p);
        const float *lr = logits + (size_t)(n - 1) * V;
        spread = fmax(spread, json_number_value(json_object_get(pr, "last_logit_spread")));
        /* greedy on pagoda's own choices */
        int32_t next = argmax(lr, V), agree = 0, tie_at = -1;
        for (int32_t g = 0; g < n_gen; g++) {
            int32_t want = (int32_t)json_integer_value(json_array_get(greedy, (size_t)g));
            double gap = json_number_value(json_array_get(gaps, (size_t)g));
            if (tie_at < 0 && gap < NEAR_TIE) tie_at = g;
            if (next != want) {
                ck_assert_msg(tie_at >= 0 && g >= tie_at, "%s prompt %zu: greedy step %d is %d, "
                              "transformers %d (top-2 gap %g, no near-tie before)", arch, p, g, next,
                              want, gap);
                break;
            }
            agree++;
            if (g == n_gen - 1) break;
            tok[n + g] = next;
            int32_t at = n + g, row = 0;
            sv = (pagoda_seq_view){.q_start = 0, .n_q = 1, .ctx_len = at + 1, .n_blocks = NB,
                                   .block_table = table};
            b = (pagoda_batch){.seq_no = (uint64_t)g + 2, .n_tokens = 1, .tokens = tok + at,
                               .positions = pos + at, .slots = slots + at, .n_seqs = 1, .seqs = &sv};
            ck_assert_msg(pagoda_forward_run(&fw, &b, &row, 1, logits, err, sizeof err) == 0, "%s", err);
            next = argmax(logits, V);
        }
        printf("%s prompt %zu (%d tokens): greedy agrees for %d of %d steps%s\n", arch, p, n, agree,
               n_gen, tie_at >= 0 ? " (a near-tie on the way)" : "");
        if (tie_at < 0) ck_assert_int_eq(agree, n_gen);
        pagoda_forward_free(&fw);
    }
    printf("%s: max |logit - transformers| %.3g (logit spread up to %.3g; allowed %g)\n", arch, worst,
           spread, TOL);
    free(logits);
    json_decref(ref);
    et_close(rt, cfg);
    return true;
}

START_TEST(against_transformers)
{
    static const char *const archs[] = {"qwen3moe", "qwen2moe", "mixtral", "glm4moe"};
    int found = 0;
    for (int i = 0; i < 4; i++) found += check_fixture(archs[i]);
    ck_assert_msg(found >= 1, "no fixture in tests/fixtures/moe");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("moe_ref");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, against_transformers);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
