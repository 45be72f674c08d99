/* test_prompt_logprobs.c: the engine's prompt scoring on the bundled model
 * (engine_step.c's scored rows, forward.c's logit scan, the sampler's
 * pagoda_logprob_of): every PROMPT event equals a log-softmax computed here
 * from the forward pass's own logits; each prompt index is reported once,
 * in order, before any generated token, whatever scheduler and KV policy
 * serve it, with chunked prefill and under preemption; a scored request
 * neither reads nor feeds the prefix cache; score_only generates nothing. */
#include "engine_testutil.h"

#include "tokenizer.h"

#define MAX_POS 1024
#define TOL 1e-4

typedef struct sc_result {
    pthread_mutex_t mu;
    int32_t n_prompt_events;
    int32_t pos[MAX_POS], tok[MAX_POS], n_top[MAX_POS];
    float lp[MAX_POS];
    pagoda_top_logprob top[MAX_POS][4];
    int32_t gen[256];
    int32_t n_gen;
    int prompt_after_token;      /* PROMPT events that came after a TOKEN event */
    int n_final, finish_reason;
    pagoda_usage usage;
    char error[256];
} sc_result;

static void sc_cb(void *user, const pagoda_event *ev)
{
    sc_result *r = user;
    pthread_mutex_lock(&r->mu);
    if (ev->type == PAGODA_EVENT_PROMPT) {
        if (r->n_gen) r->prompt_after_token++;
        int32_t k = r->n_prompt_events++;
        if (k < MAX_POS) {
            r->pos[k] = ev->position;
            r->tok[k] = ev->token;
            r->lp[k] = ev->logprob;
            r->n_top[k] = ev->n_top;
            for (int32_t j = 0; j < ev->n_top && j < 4; j++) r->top[k][j] = ev->top[j];
        }
    } else if (ev->type == PAGODA_EVENT_TOKEN) {
        if (ev->token >= 0 && r->n_gen < 256) r->gen[r->n_gen++] = ev->token;
    } else {
        r->n_final++;
        r->finish_reason = ev->finish_reason;
        r->usage = ev->usage;
        if (ev->error) snprintf(r->error, sizeof r->error, "%s", ev->error);
    }
    pthread_mutex_unlock(&r->mu);
}

static sc_result *sc_new(void)
{
    sc_result *r = calloc(1, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    return r;
}

static const char *story =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park with her friends. One day, she saw a big red ball under a tree. She ran to get it, "
    "but a dog got there first. The dog was happy and wagged its tail.";

/* The prompt as the engine will see it (BOS added). */
static int32_t tokenize(pagoda_runtime *rt, const char *text, int32_t *ids, int32_t cap)
{
    int32_t n = 0;
    ck_assert_int_eq(pagoda_tokenize(rt->model->tok, text, strlen(text), true, false, ids, cap, &n), 0);
    ck_assert_int_le(n, cap);
    return n;
}

static uint64_t submit_scored(pagoda_runtime *rt, const int32_t *ids, int32_t n, int32_t top,
                              int32_t from, int32_t max_tokens, bool score_only, sc_result *r)
{
    pagoda_request req;
    pagoda_engine_request_defaults(rt->engine, &req);
    req.prompt = NULL;
    req.prompt_tokens = ids;
    req.n_prompt_tokens = n;
    req.add_special = false;
    req.temperature = 0;
    req.ignore_eos = true;
    req.max_tokens = max_tokens;
    req.logprobs = 0;
    req.prompt_logprobs = top;
    req.prompt_logprobs_from = from;
    req.score_only = score_only;
    uint64_t id = 0;
    char err[256] = "";
    ck_assert_msg(pagoda_engine_submit(rt->engine, &req, sc_cb, r, &id, err, sizeof err) == 0,
                  "submit: %s", err);
    return id;
}

/* r's PROMPT events are indices from..n-1, once each, in order, matching
 * the reference within TOL, before any generated token. */
static void check_scored(const sc_result *r, const int32_t *ids, int32_t n, int32_t from,
                         const double *ref, const char *what)
{
    ck_assert_msg(r->n_final == 1, "%s: %d finals (%s)", what, r->n_final, r->error);
    ck_assert_msg(r->n_prompt_events == n - from, "%s: %d PROMPT events, want %d", what,
                  r->n_prompt_events, n - from);
    ck_assert_int_eq(r->prompt_after_token, 0);
    for (int32_t k = 0; k < r->n_prompt_events; k++) {
        int32_t i = from + k;
        ck_assert_msg(r->pos[k] == i, "%s: event %d has position %d, want %d", what, k, r->pos[k], i);
        ck_assert_int_eq(r->tok[k], ids[i]);
        if (i == 0) {
            ck_assert_msg(isnan(r->lp[k]) && r->n_top[k] == 0, "%s: position 0 has a logprob", what);
            continue;
        }
        ck_assert_msg(fabs((double)r->lp[k] - ref[i]) < TOL, "%s: position %d logprob %.6f, "
                      "reference %.6f", what, i, (double)r->lp[k], ref[i]);
    }
}

START_TEST(prompt_logprobs_match_the_forward_pass)
{
    const char *settings[] = {"engine.max_seq_len=256", "engine.kv_dtype=f32", NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open(&cfg, settings);
    int32_t ids[256];
    int32_t n = tokenize(rt, story, ids, 256);
    ck_assert_int_gt(n, 40);
    double ref[256];
    int32_t am[256];
    et_reference_logprobs(rt, ids, n, ref, am);

    /* score only, top 3 */
    sc_result *a = sc_new();
    submit_scored(rt, ids, n, 3, 0, 0, true, a);
    pagoda_engine_wait_idle(rt->engine);
    check_scored(a, ids, n, 0, ref, "score_only");
    ck_assert_int_eq(a->finish_reason, PAGODA_FINISH_LENGTH);
    ck_assert_int_eq(a->n_gen, 0);
    ck_assert_int_eq(a->usage.prompt_tokens, n);
    ck_assert_int_eq(a->usage.completion_tokens, 0);
    double sum = 0, ref_sum = 0;
    for (int32_t i = 1; i < n; i++) {
        sum += a->lp[i];
        ref_sum += ref[i];
        /* the top list: best first, the reference argmax first, and the
         * token's own logprob no better than the best */
        ck_assert_int_eq(a->n_top[i], 3);
        ck_assert(a->top[i][0].logprob >= a->top[i][1].logprob);
        ck_assert(a->top[i][1].logprob >= a->top[i][2].logprob);
        ck_assert_int_eq(a->top[i][0].token, am[i]);
        ck_assert(a->lp[i] <= a->top[i][0].logprob);
        if (ids[i] == a->top[i][0].token) ck_assert(a->lp[i] == a->top[i][0].logprob);
    }
    ck_assert_msg(fabs(sum - ref_sum) < n * TOL, "sum %.6f, reference %.6f", sum, ref_sum);

    /* from an index on: only those, the same values */
    sc_result *b = sc_new();
    submit_scored(rt, ids, n, 0, 30, 0, true, b);
    pagoda_engine_wait_idle(rt->engine);
    check_scored(b, ids, n, 30, ref, "from 30");
    ck_assert_int_eq(b->n_top[0], 0);

    /* scored and generating: prompt events first, then the same greedy
     * tokens as an unscored request */
    sc_result *c = sc_new(), *d = sc_new();
    submit_scored(rt, ids, n, 1, 0, 12, false, c);
    submit_scored(rt, ids, n, -1, 0, 12, false, d);
    pagoda_engine_wait_idle(rt->engine);
    check_scored(c, ids, n, 0, ref, "generating");
    ck_assert_int_eq(d->n_prompt_events, 0);
    ck_assert_int_eq(c->n_gen, 12);
    ck_assert_int_eq(d->n_gen, 12);
    for (int32_t i = 0; i < 12; i++) ck_assert_int_eq(c->gen[i], d->gen[i]);
    /* the first generated token is the greedy choice at the prompt's end */
    free(a); free(b); free(c); free(d);
    et_close(rt, cfg);
}
END_TEST

START_TEST(score_only_may_fill_the_context)
{
    const char *settings[] = {"engine.max_seq_len=32", "engine.kv_dtype=f32", NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open(&cfg, settings);
    int32_t ids[256];
    int32_t n = tokenize(rt, story, ids, 256);
    ck_assert_int_gt(n, 33);
    double ref[32];
    et_reference_logprobs(rt, ids, 32, ref, NULL);
    sc_result *a = sc_new();
    submit_scored(rt, ids, 32, 0, 0, 0, true, a);
    pagoda_engine_wait_idle(rt->engine);
    check_scored(a, ids, 32, 0, ref, "whole context");
    /* one more token is refused; generating from a full context too */
    pagoda_request req;
    pagoda_engine_request_defaults(rt->engine, &req);
    req.prompt_tokens = ids;
    req.n_prompt_tokens = 33;
    req.add_special = false;
    req.prompt_logprobs = 0;
    req.score_only = true;
    uint64_t id;
    char err[256] = "";
    ck_assert_int_eq(pagoda_engine_submit(rt->engine, &req, sc_cb, a, &id, err, sizeof err),
                     PAGODA_ERR_INVALID);
    ck_assert_msg(strstr(err, "33") && strstr(err, "32"), "%s", err);
    req.n_prompt_tokens = 32;
    req.score_only = false;
    ck_assert_int_eq(pagoda_engine_submit(rt->engine, &req, sc_cb, a, &id, err, sizeof err),
                     PAGODA_ERR_INVALID);
    req.score_only = true;
    req.prompt_logprobs = 21;
    ck_assert_int_eq(pagoda_engine_submit(rt->engine, &req, sc_cb, a, &id, err, sizeof err),
                     PAGODA_ERR_INVALID);
    ck_assert_msg(strstr(err, "prompt_logprobs"), "%s", err);
    req.prompt_logprobs = 0;
    req.prompt_logprobs_from = -1;
    ck_assert_int_eq(pagoda_engine_submit(rt->engine, &req, sc_cb, a, &id, err, sizeof err),
                     PAGODA_ERR_INVALID);
    ck_assert_int_eq(a->n_final, 1);
    free(a);
    et_close(rt, cfg);
}
END_TEST

static const char *scheds[] = {"continuous", "static", "priority"};
static const char *kvs[] = {"paged", "contiguous", "prefix"};

/* Every scheduler x KV policy, prefill in chunks of 24 tokens, scored
 * requests among plain ones; with the prefix policy the scored prompt is
 * cached beforehand by a plain request and must not be served from it. */
START_TEST(every_policy_chunked)
{
    const char *sched = scheds[_i / 3], *kv = kvs[_i % 3];
    char s1[64], s2[64], s3[96];
    snprintf(s1, sizeof s1, "engine.scheduler=%s", sched);
    snprintf(s2, sizeof s2, "engine.kvcache=%s", kv);
    snprintf(s3, sizeof s3, "scheduler.%s.max_batched_tokens=24", sched);
    const char *settings[] = {s1, s2, s3, "engine.max_seq_len=256", "engine.kv_dtype=f32", NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open(&cfg, settings);
    pagoda_engine_set_check_invariants(rt->engine, true);
    int32_t ids[256];
    int32_t n = tokenize(rt, story, ids, 256);
    double ref[256];
    et_reference_logprobs(rt, ids, n, ref, NULL);

    sc_result *warm = sc_new();
    submit_scored(rt, ids, n, -1, 0, 4, false, warm);   /* caches the prompt (prefix policy) */
    pagoda_engine_wait_idle(rt->engine);
    enum { N = 6 };
    sc_result *r[N];
    for (int k = 0; k < N; k++) {
        r[k] = sc_new();
        if (k % 2 == 0) submit_scored(rt, ids, n, 2, k == 4 ? 50 : 0, 3 + k, k == 2, r[k]);
        else submit_scored(rt, ids + k, n - k, -1, 0, 20, false, r[k]);
    }
    pagoda_engine_wait_idle(rt->engine);
    char what[96];
    for (int k = 0; k < N; k += 2) {
        snprintf(what, sizeof what, "%s x %s, request %d", sched, kv, k);
        check_scored(r[k], ids, n, k == 4 ? 50 : 0, ref, what);
        ck_assert_msg(r[k]->usage.cached_tokens == 0, "%s: %d cached tokens", what,
                      r[k]->usage.cached_tokens);
        ck_assert_int_eq(r[k]->n_gen, k == 2 ? 0 : 3 + k);
    }
    for (int k = 1; k < N; k += 2) ck_assert_int_eq(r[k]->n_final, 1);
    /* the prefix cache still serves plain requests afterwards */
    sc_result *again = sc_new();
    submit_scored(rt, ids, n, -1, 0, 4, false, again);
    pagoda_engine_wait_idle(rt->engine);
    if (!strcmp(kv, "prefix")) ck_assert_int_gt(again->usage.cached_tokens, 0);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(again->gen[i], warm->gen[i]);
    ck_assert_int_eq(pagoda_engine_invariant_failures(rt->engine), 0);
    pagoda_kv_stats st;
    pagoda_engine_kv_stats(rt->engine, &st);
    ck_assert_int_eq(st.used_blocks, 0);
    for (int k = 0; k < N; k++) free(r[k]);
    free(warm);
    free(again);
    et_close(rt, cfg);
}
END_TEST

/* A pool so small that sequences are preempted and recomputed: a scored
 * prompt still reports each index exactly once, with the same values. */
START_TEST(preempted_prompts_score_once)
{
    const char *settings[] = {"engine.max_seq_len=256", "engine.kv_dtype=f32",
                              "engine.kv_cache_tokens=224",
                              "scheduler.continuous.max_batched_tokens=32", NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open(&cfg, settings);
    pagoda_engine_set_check_invariants(rt->engine, true);
    int32_t ids[256];
    int32_t n = tokenize(rt, story, ids, 256);
    double ref[256];
    et_reference_logprobs(rt, ids, n, ref, NULL);
    enum { N = 6 };
    sc_result *r[N];
    for (int k = 0; k < N; k++) {
        r[k] = sc_new();
        submit_scored(rt, ids, n, 1, 0, 90, false, r[k]);
    }
    pagoda_engine_wait_idle(rt->engine);
    pagoda_engine_stats st;
    pagoda_engine_get_stats(rt->engine, &st);
    ck_assert_msg(st.preemptions_total > 0, "no preemption: the test needs a smaller pool");
    for (int k = 0; k < N; k++) {
        check_scored(r[k], ids, n, 0, ref, "preempted");
        ck_assert_int_eq(r[k]->n_gen, 90);
        for (int i = 0; i < 90; i++) ck_assert_int_eq(r[k]->gen[i], r[0]->gen[i]);
    }
    for (int k = 0; k < N; k++) free(r[k]);
    ck_assert_int_eq(pagoda_engine_invariant_failures(rt->engine), 0);
    et_close(rt, cfg);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("prompt_logprobs");
    TCase *tc = tcase_create("scoring");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, prompt_logprobs_match_the_forward_pass);
    tcase_add_test(tc, score_only_may_fill_the_context);
    tcase_add_loop_test(tc, every_policy_chunked, 0, 9);
    tcase_add_test(tc, preempted_prompts_score_once);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
