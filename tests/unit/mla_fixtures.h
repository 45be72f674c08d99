/* mla_fixtures.h: what test_mla_ref.c and test_mla_prefill.c share: the
 * tiny transformers-made deepseek2 fixtures (tests/fixtures/mla/NAME-tiny:
 * V2-Lite-style, V3-style, V3 with YaRN), each opened as a runtime on its
 * F32 GGUF with an F32 KV cache beside its reference JSON, their prompts'
 * token ids, and the loop that runs one check on every fixture. The
 * fixtures are committed with the tree: one missing is a broken tree and
 * fails, it is not a skip. Not for: the checks (ref_logits.h holds those
 * against the reference). Header-only (static inline functions), for the
 * Check suites. */
#ifndef PAGODA_TEST_MLA_FIXTURES_H
#define PAGODA_TEST_MLA_FIXTURES_H

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine_testutil.h"
#include "testutil.h"

typedef struct mla_fixture {
    json_t *ref;   /* the reference: {"prompts": [{"ids": [...], ...}, ...]} */
    pagoda_config *cfg;
    pagoda_runtime *rt;
    int32_t V;     /* the vocabulary */
} mla_fixture;

/* Opens fixture NAME ("deepseek2-lite", "deepseek3", "deepseek3-yarn"):
 * a deepseek2 model with MLA and routed experts, or the test fails. */
static inline void mla_fixture_open(mla_fixture *fx, const char *name)
{
    char rel[128], gg[128];
    snprintf(rel, sizeof rel, "tests/fixtures/mla/%s-tiny.ref.json", name);
    snprintf(gg, sizeof gg, "tests/fixtures/mla/%s-tiny.f32.gguf", name);
    const char *jpath = tu_src(rel);
    ck_assert_msg(access(jpath, R_OK) == 0, "%s: no fixture %s (committed with the tree)", name, rel);
    json_error_t je;
    fx->ref = json_load_file(jpath, 0, &je);
    ck_assert_msg(fx->ref != NULL, "%s: %s (line %d)", rel, je.text, je.line);
    const char *settings[] = {"engine.kv_dtype=f32", "engine.kv_cache_tokens=256",
                              "engine.max_seq_len=128", "backend.cpu.threads=2", NULL};
    fx->rt = et_open_model(&fx->cfg, tu_src(gg), settings);
    ck_assert_str_eq(fx->rt->model->hp.arch, "deepseek2");
    ck_assert(fx->rt->model->hp.mla);
    ck_assert_int_gt(fx->rt->model->hp.n_experts, 0);
    fx->V = fx->rt->model->hp.n_vocab;
}

static inline void mla_fixture_close(mla_fixture *fx)
{
    json_decref(fx->ref);
    et_close(fx->rt, fx->cfg);
}

/* The reference's prompt p (an object: "ids", then what ref_logits.h reads). */
static inline json_t *mla_prompt(const mla_fixture *fx, size_t p)
{
    json_t *pr = json_array_get(json_object_get(fx->ref, "prompts"), p);
    ck_assert_msg(pr != NULL, "no prompt %zu in the reference", p);
    return pr;
}

/* Prompt pr's token ids into tok[cap]; returns how many. */
static inline int32_t mla_prompt_ids(json_t *pr, int32_t cap, int32_t *tok)
{
    json_t *ids = json_object_get(pr, "ids");
    int32_t n = (int32_t)json_array_size(ids);
    ck_assert_int_le(n, cap);
    for (int32_t i = 0; i < n; i++) tok[i] = (int32_t)json_integer_value(json_array_get(ids, i));
    return n;
}

/* check(name) on every fixture, in the order above. */
static inline void mla_each_fixture(void (*check)(const char *name))
{
    static const char *const names[] = {"deepseek2-lite", "deepseek3", "deepseek3-yarn"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) check(names[i]);
}

#endif
