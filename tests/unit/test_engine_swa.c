/* test_engine_swa.c: the sliding-window layers' own KV pool (engine_swa.c)
 * on a tiny gemma3 model (6 layers, 4 of them local with a window of 8,
 * blocks of 4 tokens, steps of at most 12 tokens so that prefill chunks
 * cross the window): greedy output with swa_kv = window is the same as
 * with swa_kv = full (every layer keeps every position, the path before
 * the window pool) and as each request served alone, under every scheduler
 * x KV policy, under preemption, and with prefix-cache hits shorter and
 * longer than what a hit recomputes; the window pool's accounting holds
 * after every step, its seats and blocks are all free when idle, a long
 * sequence holds no more than its window's blocks, and with kv_dtype =
 * q8_0 the window pool (stored in Q8_0 too) still gives full's output. */
#define _GNU_SOURCE
#include <unistd.h>

#include "engine_testutil.h"
#include "genmodel.h"

#define N_REQ 16
#define MAX_SEQ 128

static char g_model[64];

/* Prompts as token ids: a shared 60-token head for some (prefix hits of
 * 60 tokens, 15 blocks: past the 4 x 7 = 28 a hit recomputes), a shared
 * 20-token head for others (hits of 20: all recomputed), and lone ones. */
static int32_t g_prompt[N_REQ][100];
static int32_t g_n_prompt[N_REQ];

static int32_t max_tokens_of(int i) { return 4 + (i * 13) % 37; }

static void make_prompts(void)
{
    uint64_t x = 12345;
    int32_t head60[60], head20[20];
    for (int j = 0; j < 60; j++) { x = x * 6364136223846793005ull + 1442695040888963407ull; head60[j] = 3 + (int32_t)((x >> 33) % 500); }
    for (int j = 0; j < 20; j++) { x = x * 6364136223846793005ull + 1442695040888963407ull; head20[j] = 3 + (int32_t)((x >> 33) % 500); }
    for (int i = 0; i < N_REQ; i++) {
        int32_t n = 0;
        if (i % 3 == 0) { memcpy(g_prompt[i], head60, sizeof head60); n = 60; }
        else if (i % 3 == 1) { memcpy(g_prompt[i], head20, sizeof head20); n = 20; }
        int32_t tail = 1 + (i * 7) % 23;
        for (int j = 0; j < tail; j++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            g_prompt[i][n++] = 3 + (int32_t)((x >> 33) % 500);
        }
        g_n_prompt[i] = n;
        ck_assert_int_le(n + max_tokens_of(i), MAX_SEQ);
    }
}

static void setup(void)
{
    snprintf(g_model, sizeof g_model, "/tmp/pagoda_swa_XXXXXX");
    int fd = mkstemp(g_model);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char err[512];
    pagoda_genmodel_opts g = {.shape = "tiny", .dtype = PAGODA_DTYPE_F32, .out = g_model,
                              .seed = 31, .arch = "gemma3", .layers = 6, .sliding_window = 8,
                              .swa_pattern = 3, .std = 0.1f, .norm_std = 0.1f, .tied = true};
    ck_assert_msg(pagoda_gen_model(&g, err, sizeof err) == 0, "%s", err);
    make_prompts();
}

static void teardown(void) { unlink(g_model); }

typedef struct run_out {
    et_result r[N_REQ];
    pagoda_kv_stats kv;
    pagoda_engine_stats st;
    pagoda_engine_swa_stats swa;
    int32_t max_used_between_steps;   /* window blocks, one sequence alone */
} run_out;

static void hook(void *user, pagoda_engine *e)
{
    run_out *o = user;
    pagoda_engine_swa_stats s;
    pagoda_engine_get_swa_stats(e, &s);
    if (s.used_blocks > o->max_used_between_steps) o->max_used_between_steps = s.used_blocks;
}

/* Serve requests [first, first + n) under settings (NULL-terminated, the
 * model and the test's limits added), all submitted at once; check the
 * invariants and fill out. Under batch_invariant: every comparison here is
 * against each request alone, across batch shapes (and the requests reach
 * a running engine), so a row's logits must not depend on its call's size
 * (docs/speculation.md, "Byte-identical output"). */
static void run(const char *const *extra, int first, int n, run_out *out)
{
    const char *settings[24] = {"engine.kv_dtype=f32", "engine.block_size=4", "engine.max_seq_len=128",
                                "scheduler.continuous.max_batched_tokens=12",
                                "scheduler.priority.max_batched_tokens=12",
                                "scheduler.static.max_batched_tokens=12",
                                "scheduler.continuous.max_num_seqs=6",
                                "scheduler.priority.max_num_seqs=6", "scheduler.static.batch_size=6",
                                "backend.cpu.batch_invariant=on"};
    int ns = 10;
    for (int i = 0; extra && extra[i]; i++) settings[ns++] = extra[i];
    settings[ns] = NULL;
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open_model(&cfg, g_model, settings);
    char err[1024] = "";
    pagoda_engine_set_check_invariants(rt->engine, true);
    pagoda_engine_set_step_hook(rt->engine, hook, out);
    ck_assert_int_eq(pagoda_engine_start(rt->engine), 0);
    for (int i = first; i < first + n; i++) {
        et_result_init(&out->r[i]);
        pagoda_request req;
        pagoda_engine_request_defaults(rt->engine, &req);
        req.prompt = NULL;
        req.prompt_tokens = g_prompt[i];
        req.n_prompt_tokens = g_n_prompt[i];
        req.max_tokens = max_tokens_of(i);
        req.temperature = 0;
        req.ignore_eos = true;
        uint64_t id;
        ck_assert_msg(pagoda_engine_submit(rt->engine, &req, et_cb, &out->r[i], &id, err,
                                           sizeof err) == 0, "%s", err);
    }
    pagoda_engine_wait_idle(rt->engine);
    for (int i = first; i < first + n; i++) {
        ck_assert_msg(out->r[i].n_final == 1 && out->r[i].finish_reason == PAGODA_FINISH_LENGTH,
                      "request %d: %d finals, %s (%s)", i, out->r[i].n_final,
                      pagoda_finish_reason_str(out->r[i].finish_reason), out->r[i].error);
        ck_assert_int_eq(out->r[i].n_tokens, max_tokens_of(i));
    }
    ck_assert_int_eq(pagoda_engine_invariant_failures(rt->engine), 0);
    pagoda_engine_kv_stats(rt->engine, &out->kv);
    pagoda_engine_get_stats(rt->engine, &out->st);
    pagoda_engine_get_swa_stats(rt->engine, &out->swa);
    ck_assert_int_eq(out->kv.used_blocks, 0);
    ck_assert_int_eq(out->kv.free_blocks + out->kv.cached_blocks, out->kv.total_blocks);
    if (out->swa.geometry.window) {
        /* idle: every seat and block of the window pool back */
        ck_assert_int_eq(out->swa.free_seats, out->swa.geometry.seats);
        ck_assert_int_eq(out->swa.free_blocks, out->swa.geometry.pool_blocks);
        ck_assert_int_eq(out->swa.used_blocks, 0);
    }
    et_close(rt, cfg);
}

static void assert_same(const run_out *a, const run_out *b, const char *what)
{
    et_assert_same_tokens(a->r, b->r, N_REQ, what);
}

/* Each request alone, every layer at every position. */
static run_out *reference(void)
{
    static run_out *ref;
    if (!ref) {
        ref = calloc(1, sizeof *ref);
        const char *s[] = {"engine.swa_kv=full", "scheduler.continuous.max_num_seqs=1", NULL};
        run(s, 0, N_REQ, ref);
        ck_assert(!ref->swa.geometry.window);
    }
    return ref;
}

static const char *scheds[] = {"continuous", "static", "priority"};
static const char *kvs[] = {"paged", "contiguous", "prefix"};

START_TEST(window_equals_full_every_combo)
{
    run_out *ref = reference();
    const char *sched = scheds[_i / 3], *kv = kvs[_i % 3];
    char s1[64], s2[64], what[96];
    snprintf(s1, sizeof s1, "engine.scheduler=%s", sched);
    snprintf(s2, sizeof s2, "engine.kvcache=%s", kv);
    for (int mode = 0; mode < 2; mode++) {
        run_out *got = calloc(1, sizeof *got);
        const char *s[] = {s1, s2, mode ? "engine.swa_kv=full" : "engine.swa_kv=window", NULL};
        run(s, 0, N_REQ, got);
        ck_assert_int_eq(got->swa.geometry.window, mode == 0);
        snprintf(what, sizeof what, "%s x %s, swa_kv = %s", sched, kv, mode ? "full" : "window");
        assert_same(ref, got, what);
        if (!strcmp(kv, "prefix")) {
            /* the shared heads were hit (60 and 20 tokens: whole blocks) */
            ck_assert_int_gt(got->kv.hit_tokens, 0);
        }
        if (mode == 0) {
            /* 6 seats x ((8 - 2) / 4 + 2) + (12 + 6 x 3) / 4; a hit
             * recomputes 4 local layers x 7 tokens */
            ck_assert_int_eq(got->swa.geometry.pool_blocks, 6 * 3 + 7);
            ck_assert_int_eq(got->swa.geometry.recompute_tokens, 28);
        }
        free(got);
    }
}
END_TEST

/* Prefix hits: a hit of 60 tokens resumes at 60 - 28 = 32 (cached_tokens
 * says so), one of 20 recomputes everything; the output is unchanged. */
START_TEST(prefix_hits_recompute_the_window)
{
    run_out *ref = reference();
    run_out *got = calloc(1, sizeof *got);
    /* one at a time, so each later request finds the earlier ones' blocks
     * (a pool large enough that none is evicted) */
    const char *s[] = {"engine.kvcache=prefix", "scheduler.continuous.max_num_seqs=1",
                       "engine.kv_cache_tokens=4000", NULL};
    run(s, 0, N_REQ, got);
    assert_same(ref, got, "prefix, one at a time");
    bool saw_partial = false;
    for (int i = 3; i < N_REQ; i++) {
        int32_t c = got->r[i].usage.cached_tokens;
        if (i % 3 == 0) {
            ck_assert_msg(c == 60 - 28, "request %d: cached_tokens %d, want 32", i, c);
            saw_partial = true;
        } else if (i % 3 == 1) {
            ck_assert_msg(c == 0, "request %d: a hit of 20 recomputes all, cached_tokens %d", i, c);
        }
    }
    ck_assert(saw_partial);
    ck_assert_int_ge(got->kv.hit_tokens, 5 * 60);
    /* the recomputed rows inside the hits wrote their global KV to the
     * sink, never to the shared blocks: 5 hits x 28 + 4 hits x 20 */
    ck_assert_int_eq(got->swa.sink_rows_total, 5 * 28 + 4 * 20);
    free(got);
}
END_TEST

START_TEST(preemption_keeps_output)
{
    run_out *ref = reference();
    run_out *got = calloc(1, sizeof *got);
    /* 40 blocks of 4 for 6 seats of sequences up to ~110 tokens */
    for (int k = 0; k < 2; k++) {
        const char *s[] = {"engine.kv_cache_tokens=160", k ? "engine.kvcache=prefix" : "engine.kvcache=paged", NULL};
        run(s, 0, N_REQ, got);
        ck_assert_msg(got->st.preemptions_total > 0, "no preemption happened; the test needs a smaller pool");
        assert_same(ref, got, k ? "preempted, prefix" : "preempted, paged");
    }
    free(got);
}
END_TEST

/* A long sequence alone: between steps it holds at most hold_blocks of the
 * window pool, however long it grows. */
START_TEST(long_sequence_holds_its_window)
{
    run_out *got = calloc(1, sizeof *got);
    /* the request with the longest prompt + output */
    int best = 0;
    for (int i = 0; i < N_REQ; i++)
        if (g_n_prompt[i] + max_tokens_of(i) > g_n_prompt[best] + max_tokens_of(best)) best = i;
    ck_assert_int_gt(g_n_prompt[best] + max_tokens_of(best), 60);
    run(NULL, best, 1, got);
    ck_assert(got->swa.geometry.window);
    ck_assert_int_eq(got->swa.geometry.hold_blocks, 3);
    ck_assert_int_gt(got->max_used_between_steps, 0);
    ck_assert_int_le(got->max_used_between_steps, got->swa.geometry.hold_blocks);
    free(got);
}
END_TEST

/* Speculative decoding on a sliding-window model: draft rows take window
 * blocks like any computed row, and those of rejected drafts go back at
 * the step's trim, so the output is the reference's (every request
 * alone, every layer at every position) under each drafter, and after
 * every step no sequence holds a window block past its computed
 * positions or more than `hold` (engine_swa_check, through run()'s
 * invariant count). The same model drafts for itself in `draft` (every
 * draft agrees); `ngram` drafts from the random model's loops (some
 * agree, some not). */
START_TEST(speculation_keeps_output_and_window)
{
    run_out *ref = reference();
    run_out *got = calloc(1, sizeof *got);
    char draft[128];
    snprintf(draft, sizeof draft, "engine.spec_draft_model=%s", g_model);
    const char *kv = _i ? "engine.kvcache=prefix" : "engine.kvcache=paged";
    const char *sn[] = {kv, "engine.speculative=ngram", "engine.spec_max_seqs=6", NULL};
    run(sn, 0, N_REQ, got);
    ck_assert(got->swa.geometry.window);
    assert_same(ref, got, "windowed, ngram drafts");
    ck_assert_int_gt(got->st.spec_accepted_total, 0);
    ck_assert_int_lt(got->st.spec_accepted_total, got->st.spec_drafted_total);
    const char *sd[] = {kv, "engine.speculative=draft", draft, "engine.spec_max_seqs=6", NULL};
    run(sd, 0, N_REQ, got);
    assert_same(ref, got, "windowed, the model drafting itself");
    ck_assert_int_gt(got->st.spec_accepted_total, 0);
    free(got);
}
END_TEST

/* The 8-bit KV cache in the window pool: the local layers store kv_dtype
 * = q8_0 as the main pool does (heads of 32 here: one Q8_0 block each),
 * and the greedy output with swa_kv = window, 6 at a time under prefix
 * hits, is the same as with swa_kv = full, each request alone: the same
 * rows rounded the same way wherever they are kept. */
START_TEST(q8_0_window_equals_full)
{
    char err[512];
    pagoda_genmodel_opts g = {.shape = "tiny", .dtype = PAGODA_DTYPE_F32, .out = g_model,
                              .seed = 31, .arch = "gemma3", .layers = 6, .sliding_window = 8,
                              .swa_pattern = 3, .std = 0.1f, .norm_std = 0.1f, .tied = true,
                              .head_dim = 32};
    ck_assert_msg(pagoda_gen_model(&g, err, sizeof err) == 0, "%s", err);
    run_out *ref = calloc(1, sizeof *ref), *got = calloc(1, sizeof *got);
    const char *sr[] = {"engine.kv_dtype=q8_0", "engine.swa_kv=full",
                        "scheduler.continuous.max_num_seqs=1", NULL};
    run(sr, 0, N_REQ, ref);
    ck_assert(!ref->swa.geometry.window);
    const char *sg[] = {"engine.kv_dtype=q8_0", "engine.swa_kv=window", "engine.kvcache=prefix", NULL};
    run(sg, 0, N_REQ, got);
    ck_assert(got->swa.geometry.window);
    ck_assert_int_gt(got->kv.hit_tokens, 0);
    assert_same(ref, got, "q8_0, swa_kv = window under prefix hits vs full alone");
    free(ref);
    free(got);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("engine_swa");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, window_equals_full_every_combo, 0, 9);
    tcase_add_test(tc, prefix_hits_recompute_the_window);
    tcase_add_test(tc, preemption_keeps_output);
    tcase_add_test(tc, long_sequence_holds_its_window);
    tcase_add_test(tc, q8_0_window_equals_full);
    tcase_add_loop_test(tc, speculation_keeps_output_and_window, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
