/* test_engine.c: the invariants of DESIGN.md on the bundled model, through
 * the real plugins: greedy output is the same whatever scheduler and KV
 * policy serve it, also under preemption (batch_invariant), and at the
 * default mode the same up to a near tie; KV accounting holds after every
 * step and an idle engine holds no sequence blocks; every request gets
 * exactly one final event, also under cancel and shutdown; stop strings
 * never leak. */
#include "engine_testutil.h"
#include "tokenizer.h"

#define N_REQ 24

static const char *prompts[] = {
    "Once upon a time",
    "Once upon a time, there was a little girl",
    "One day, a big bear",
    "The cat sat",
    "Lily and Ben went to the park. They saw",
    "Once upon a time, there was a little girl named Lily. She loved to play",
    "Tom had a red ball",
    "",
};
#define N_PROMPTS (int)(sizeof prompts / sizeof prompts[0])

static int32_t max_tokens_of(int i) { return 5 + (i * 37) % 90; }

typedef struct run_out {
    et_result r[N_REQ];
} run_out;

/* The comparisons here are across batch shapes (each request alone against
 * many at once, preempted and resumed, requests reaching a running engine
 * in batches the timing picks), so every run is under batch_invariant: a
 * row's logits do not depend on its call's size (F32 rows on their own dot
 * at every size, not sgemm from 3 rows), and a near tie cannot round apart
 * (docs/speculation.md, "Byte-identical output"). */
#define BATCH_INVARIANT "backend.cpu.batch_invariant=on"

/* Run the mixed workload on one scheduler x KV policy, under
 * batch_invariant when `invariant`, else the backend's default mode;
 * check invariants. */
static void run_combo_mode(const char *sched, const char *kv, const char *extra, bool invariant, run_out *out)
{
    char s1[64], s2[64];
    snprintf(s1, sizeof s1, "engine.scheduler=%s", sched);
    snprintf(s2, sizeof s2, "engine.kvcache=%s", kv);
    /* extra beside the F32 cache, never in its place: the reference run
     * (extra: one sequence at a time) once took the default F16 cache while
     * every combo it is compared with ran F32 */
    const char *settings[] = {s1, s2, "engine.max_seq_len=256", "engine.kv_dtype=f32", NULL, NULL, NULL};
    int ns = 4;
    if (invariant) settings[ns++] = BATCH_INVARIANT;
    if (extra) settings[ns++] = extra;
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open(&cfg, settings);
    pagoda_engine_set_check_invariants(rt->engine, true);
    for (int i = 0; i < N_REQ; i++) {
        et_result_init(&out->r[i]);
        et_submit(rt, prompts[i % N_PROMPTS], max_tokens_of(i), &out->r[i], 0.0f);
    }
    pagoda_engine_wait_idle(rt->engine);
    for (int i = 0; i < N_REQ; i++) {
        ck_assert_msg(out->r[i].n_final == 1, "%s/%s request %d: %d final events", sched, kv, i,
                      out->r[i].n_final);
        ck_assert_msg(out->r[i].finish_reason == PAGODA_FINISH_LENGTH, "%s/%s request %d: %s (%s)",
                      sched, kv, i, pagoda_finish_reason_str(out->r[i].finish_reason), out->r[i].error);
        ck_assert_int_eq(out->r[i].n_tokens, max_tokens_of(i));
        ck_assert_int_eq(out->r[i].n_text_events_after_final, 0);
    }
    ck_assert_int_eq(pagoda_engine_invariant_failures(rt->engine), 0);
    pagoda_kv_stats st;
    pagoda_engine_kv_stats(rt->engine, &st);
    ck_assert_int_eq(st.used_blocks, 0);
    ck_assert_int_eq(st.free_blocks + st.cached_blocks, st.total_blocks);
    et_close(rt, cfg);
}

static void run_combo(const char *sched, const char *kv, const char *extra, run_out *out)
{
    run_combo_mode(sched, kv, extra, true, out);
}

static void assert_same(const run_out *a, const run_out *b, const char *what)
{
    et_assert_same_tokens(a->r, b->r, N_REQ, what);
    for (int i = 0; i < N_REQ; i++) ck_assert_str_eq(a->r[i].text, b->r[i].text);
}

static run_out *reference(void)
{
    static run_out *ref;
    if (!ref) {
        ref = calloc(1, sizeof *ref);
        /* each request alone: max_num_seqs 1 serves them one at a time */
        run_combo("continuous", "paged", "scheduler.continuous.max_num_seqs=1", ref);
    }
    return ref;
}

static const char *scheds[] = {"continuous", "static", "priority"};
static const char *kvs[] = {"paged", "contiguous", "prefix"};

START_TEST(same_output_every_combo)
{
    run_out *ref = reference();
    run_out *got = calloc(1, sizeof *got);
    const char *sched = scheds[_i / 3], *kv = kvs[_i % 3];
    run_combo(sched, kv, NULL, got);
    char what[64];
    snprintf(what, sizeof what, "%s x %s", sched, kv);
    assert_same(ref, got, what);
    free(got);
}
END_TEST

/* The default mode (batch_invariant off, as a server runs unless asked):
 * the same workload, each request alone against all of them at once on the
 * prefix cache. There an F32 row of 1-2 tokens takes its own dot and one
 * of 3 or more sgemm, so a request may part from its lone run, but only at
 * a near tie: at its first differing token the reference forward pass
 * (et_assert_same_or_near_tie) scores the two choices within 0.01 nats
 * (F32 weights and KV: the two orders' rounding moves a logit by ~1e-6,
 * far below that; a wrong cache hit or a batching bug moves it by more).
 * Requests that did not part must match in text too. */
START_TEST(same_output_default_mode)
{
    run_out *ref = calloc(1, sizeof *ref), *got = calloc(1, sizeof *got);
    ck_assert(ref && got);
    run_combo_mode("continuous", "paged", "scheduler.continuous.max_num_seqs=1", false, ref);
    run_combo_mode("continuous", "prefix", NULL, false, got);
    const char *settings[] = {"engine.max_seq_len=256", "engine.kv_dtype=f32", NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open_stopped(&cfg, settings);
    int parted = 0;
    for (int i = 0; i < N_REQ; i++) {
        const char *p = prompts[i % N_PROMPTS];
        pagoda_request req = et_request(rt, p, 1, 0.0f);
        int32_t ids[256], n_ids = 0;
        ck_assert_int_eq(pagoda_tokenize(rt->model->tok, p, strlen(p), req.add_special, true, ids, 256, &n_ids), 0);
        ck_assert_int_gt(n_ids, 0);
        char what[64];
        snprintf(what, sizeof what, "default mode, request %d alone vs batched", i);
        if (et_assert_same_or_near_tie(rt, ids, n_ids, &ref->r[i], &got->r[i], 1, 0.01, what))
            parted++;
        else
            ck_assert_str_eq(ref->r[i].text, got->r[i].text);
    }
    et_close(rt, cfg);
    ck_assert_int_lt(parted, N_REQ); /* a near tie now and then, not every request */
    free(ref);
    free(got);
}
END_TEST

/* max_queue holds under concurrent submits: 8 threads submit to an engine
 * that is not started (nothing leaves the queue), and exactly max_num_seqs
 * + max_queue of them are taken, round after round. The check and the
 * place it grants were once taken under two locks, and two submits could
 * both pass the check (a long prompt widens what lay between; this test
 * did not catch that race here, integ_http_server under load did). Each
 * accepted request gets its FINAL when the never-started engine stops. */
typedef struct admit_arg {
    pagoda_runtime *rt;
    const char *prompt;
    int ok, full, other;
} admit_arg;

static int g_admit_finals;

static void admit_cb(void *user, const pagoda_event *ev)
{
    (void)user;
    if (ev->type == PAGODA_EVENT_FINAL) __atomic_add_fetch(&g_admit_finals, 1, __ATOMIC_RELAXED);
}

static void *admit_thread(void *p)
{
    admit_arg *a = p;
    for (int i = 0; i < 4; i++) {
        pagoda_request req = et_request(a->rt, a->prompt, 4, 0);
        uint64_t id = 0;
        char err[256];
        int st = pagoda_engine_submit(a->rt->engine, &req, admit_cb, NULL, &id, err, sizeof err);
        if (st == PAGODA_OK) a->ok++;
        else if (st == PAGODA_ERR_NOSPACE) a->full++;
        else a->other++;
    }
    return NULL;
}

START_TEST(queue_admission_is_atomic)
{
    char prompt[4000] = "";
    for (int i = 0; i < 60; i++) strcat(prompt, "Once upon a time ");
    const char *sets[] = {"engine.max_queue=3", "scheduler.continuous.max_num_seqs=2", NULL};
    enum { NT = 8, ROUNDS = 20 };
    for (int round = 0; round < ROUNDS; round++) {
        pagoda_config *cfg;
        pagoda_runtime *rt = et_open_stopped(&cfg, sets);
        __atomic_store_n(&g_admit_finals, 0, __ATOMIC_RELAXED);
        pthread_t th[NT];
        admit_arg a[NT];
        for (int i = 0; i < NT; i++) {
            a[i] = (admit_arg){.rt = rt, .prompt = prompt};
            ck_assert_int_eq(pthread_create(&th[i], NULL, admit_thread, &a[i]), 0);
        }
        int ok = 0, full = 0, other = 0;
        for (int i = 0; i < NT; i++) {
            pthread_join(th[i], NULL);
            ok += a[i].ok;
            full += a[i].full;
            other += a[i].other;
        }
        ck_assert_int_eq(other, 0);
        ck_assert_msg(ok == 5, "round %d: %d requests taken, max_num_seqs 2 + max_queue 3 = 5", round, ok);
        ck_assert_int_eq(full, NT * 4 - 5);
        et_close(rt, cfg);
        ck_assert_int_eq(__atomic_load_n(&g_admit_finals, __ATOMIC_RELAXED), 5);
    }
}
END_TEST

START_TEST(preemption_keeps_output)
{
    run_out *ref = reference();
    run_out *got = calloc(1, sizeof *got);
    /* 10 blocks of 16 tokens for 24 requests of up to ~110 tokens: the
     * continuous scheduler must preempt, and resume with identical text */
    char s1[64];
    snprintf(s1, sizeof s1, "engine.kv_cache_tokens=%d", 160);
    const char *settings[] = {"engine.max_seq_len=256", "engine.kv_dtype=f32", s1, BATCH_INVARIANT, NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open(&cfg, settings);
    pagoda_engine_set_check_invariants(rt->engine, true);
    for (int i = 0; i < N_REQ; i++) {
        et_result_init(&got->r[i]);
        et_submit(rt, prompts[i % N_PROMPTS], max_tokens_of(i), &got->r[i], 0.0f);
    }
    pagoda_engine_wait_idle(rt->engine);
    pagoda_engine_stats st;
    pagoda_engine_get_stats(rt->engine, &st);
    ck_assert_msg(st.preemptions_total > 0, "no preemption happened; the test needs a smaller pool");
    ck_assert_int_eq(pagoda_engine_invariant_failures(rt->engine), 0);
    for (int i = 0; i < N_REQ; i++) ck_assert_int_eq(got->r[i].n_final, 1);
    assert_same(ref, got, "preempted");
    et_close(rt, cfg);
    free(got);
}
END_TEST

START_TEST(cancel_and_shutdown_give_one_final)
{
    const char *settings[] = {"engine.max_seq_len=512", NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open(&cfg, settings);
    pagoda_engine_set_check_invariants(rt->engine, true);
    enum { N = 16 };
    et_result *r = calloc(N, sizeof *r);
    uint64_t ids[N];
    for (int i = 0; i < N; i++) {
        et_result_init(&r[i]);
        ids[i] = et_submit(rt, prompts[i % N_PROMPTS], 400, &r[i], 0.8f);
    }
    for (int i = 0; i < N; i += 2) ck_assert_int_eq(pagoda_engine_cancel(rt->engine, ids[i]), 0);
    ck_assert_int_eq(pagoda_engine_cancel(rt->engine, 999999), PAGODA_ERR_NOT_FOUND);
    /* shut down with the rest in flight */
    pagoda_engine_stop(rt->engine);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(r[i].n_final, 1);
        if (i % 2 == 0) ck_assert_int_eq(r[i].finish_reason, PAGODA_FINISH_CANCELLED);
        ck_assert_int_eq(r[i].n_text_events_after_final, 0);
    }
    pagoda_kv_stats st;
    pagoda_engine_kv_stats(rt->engine, &st);
    ck_assert_int_eq(st.used_blocks, 0);
    ck_assert_int_eq(pagoda_engine_invariant_failures(rt->engine), 0);
    /* submit after shutdown is refused */
    pagoda_request req;
    pagoda_engine_request_defaults(rt->engine, &req);
    req.prompt = "x";
    req.prompt_len = 1;
    uint64_t id;
    char err[256];
    ck_assert_int_eq(pagoda_engine_submit(rt->engine, &req, et_cb, &r[0], &id, err, sizeof err),
                     PAGODA_ERR_STATE);
    free(r);
    et_close(rt, cfg);
}
END_TEST

START_TEST(stop_strings_never_leak)
{
    const char *settings[] = {NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open(&cfg, settings);
    et_result *base = calloc(1, sizeof *base), *r = calloc(1, sizeof *r);
    et_result_init(base);
    et_submit(rt, "Once upon a time", 80, base, 0.0f);
    pagoda_engine_wait_idle(rt->engine);
    /* pick a stop string that spans a token boundary: 5 bytes from the middle */
    const char *text = base->text;
    ck_assert_uint_gt(strlen(text), 40);
    char stop[8];
    memcpy(stop, text + 30, 5);
    stop[5] = 0;
    const char *first = strstr(text, stop);
    size_t want_len = (size_t)(first - text);

    pagoda_request req = et_request(rt, "Once upon a time", 80, 0);
    const char *stops[] = {"zzzz-never", stop};
    req.stop = stops;
    req.n_stop = 2;
    uint64_t id;
    char err[256];
    et_result_init(r);
    ck_assert_int_eq(pagoda_engine_submit(rt->engine, &req, et_cb, r, &id, err, sizeof err), 0);
    pagoda_engine_wait_idle(rt->engine);
    ck_assert_int_eq(r->finish_reason, PAGODA_FINISH_STOP);
    ck_assert_uint_eq(r->text_len, want_len);
    ck_assert_int_eq(strncmp(r->text, text, want_len), 0);
    ck_assert_ptr_null(strstr(r->text, stop));
    free(base);
    free(r);
    et_close(rt, cfg);
}
END_TEST

START_TEST(bad_requests_refused_with_numbers)
{
    const char *settings[] = {"engine.max_seq_len=64", NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open(&cfg, settings);
    pagoda_request req;
    pagoda_engine_request_defaults(rt->engine, &req);
    req.prompt = "Once upon a time";
    req.prompt_len = strlen(req.prompt);
    req.max_tokens = 100;
    uint64_t id;
    char err[256] = "";
    et_result r;
    et_result_init(&r);
    ck_assert_int_eq(pagoda_engine_submit(rt->engine, &req, et_cb, &r, &id, err, sizeof err),
                     PAGODA_ERR_INVALID);
    ck_assert_msg(strstr(err, "100") && strstr(err, "64"), "message: %s", err);
    req.max_tokens = 10;
    req.temperature = -1;
    ck_assert_int_eq(pagoda_engine_submit(rt->engine, &req, et_cb, &r, &id, err, sizeof err),
                     PAGODA_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err, "temperature"));
    ck_assert_int_eq(r.n_final, 0);
    /* no max_tokens given: the default (256) is capped to what the 64-token
     * context leaves, not refused */
    req.temperature = 0;
    req.max_tokens = 0;
    req.ignore_eos = true;
    ck_assert_int_eq(pagoda_engine_submit(rt->engine, &req, et_cb, &r, &id, err, sizeof err), 0);
    pagoda_engine_wait_idle(rt->engine);
    ck_assert_int_eq(r.n_final, 1);
    ck_assert_int_eq(r.finish_reason, PAGODA_FINISH_LENGTH);
    ck_assert_int_eq(r.usage.prompt_tokens + r.usage.completion_tokens, 64);
    et_close(rt, cfg);
}
END_TEST

START_TEST(seeded_sampling_reproducible)
{
    /* the two requests of seed 42 reach a running engine: not always in
     * the same batches */
    const char *settings[] = {BATCH_INVARIANT, NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open(&cfg, settings);
    et_result *r = calloc(3, sizeof *r);
    for (int i = 0; i < 3; i++) {
        et_result_init(&r[i]);
        pagoda_request req = et_request(rt, "Once upon a time", 60, 1.0f);
        req.has_seed = true;
        req.seed = i == 2 ? 43 : 42;
        uint64_t id;
        char err[256];
        ck_assert_int_eq(pagoda_engine_submit(rt->engine, &req, et_cb, &r[i], &id, err, sizeof err), 0);
    }
    pagoda_engine_wait_idle(rt->engine);
    ck_assert_str_eq(r[0].text, r[1].text);
    ck_assert_str_ne(r[0].text, r[2].text);
    free(r);
    et_close(rt, cfg);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("engine");
    TCase *tc = tcase_create("invariants");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, same_output_every_combo, 0, 9);
    tcase_add_test(tc, same_output_default_mode);
    tcase_add_test(tc, queue_admission_is_atomic);
    tcase_add_test(tc, preemption_keeps_output);
    tcase_add_test(tc, cancel_and_shutdown_give_one_final);
    tcase_add_test(tc, stop_strings_never_leak);
    tcase_add_test(tc, bad_requests_refused_with_numbers);
    tcase_add_test(tc, seeded_sampling_reproducible);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
