/* test_spec.c: speculative decoding (core/engine/engine_spec.c, the ngram
 * drafter, the commit phase's verification) on the bundled model: the
 * drafter's proposals; greedy output byte-identical with and without
 * speculation over every scheduler x KV policy (and under preemption);
 * seeded sampled output identical too (penalties, top-k/p, stop strings,
 * logprobs); the sampled distribution unchanged over thousands of draws
 * (a two-sample chi-square test at a 1e-6 false-alarm rate); the metrics
 * and the inspected steps; bad settings and requests refused by name. */
#include "engine_testutil.h"

#include <sys/stat.h>
#include <unistd.h>

#include "drafter.h"
#include "genmodel.h"
#include "engine_internal.h" /* kv_watch reads the running sequences' block tables */
#include "metrics.h"
#include "tokenizer.h"

/* ------------------------------------------------------------- the drafter */

START_TEST(ngram_proposes_latest_continuation)
{
    const pagoda_drafter_ops *d = pagoda_drafter_find("ngram");
    ck_assert_ptr_nonnull(d);
    ck_assert_ptr_null(pagoda_drafter_find("off"));
    ck_assert_ptr_null(pagoda_drafter_find("bogus"));
    pagoda_drafter_config cfg = {.ngram = 2, .max_seq_len = 64};
    void *st = d->seq_new(&cfg, 64);
    ck_assert_ptr_nonnull(st);
    int32_t t[64] = {5, 6, 7, 8, 9, 1, 2, 5, 6, 3, 4, 5, 6};
    int32_t out[8];
    /* "5 6" ended at 2 and at 9: the latest (followed by 3 4 5 6) wins */
    int32_t n = d->propose(st, t, 13, 8, out);
    ck_assert_int_eq(n, 4);
    ck_assert_int_eq(out[0], 3);
    ck_assert_int_eq(out[1], 4);
    ck_assert_int_eq(out[3], 6);
    /* capped by max */
    ck_assert_int_eq(d->propose(st, t, 13, 2, out), 2);
    /* a suffix never seen before: nothing */
    t[13] = 40;
    ck_assert_int_eq(d->propose(st, t, 14, 8, out), 0);
    /* grown at the end: "40 5" is new, then "6 7" (after 5 6 at the start) */
    t[14] = 6;
    t[15] = 7;
    n = d->propose(st, t, 16, 8, out);
    ck_assert_int_eq(n, 8);
    ck_assert_int_eq(out[0], 8);
    ck_assert_int_eq(out[1], 9);
    d->seq_free(st);
    /* too short to have an earlier occurrence */
    st = d->seq_new(&cfg, 1 << 20); /* its table stays bounded whatever the length */
    ck_assert_ptr_nonnull(st);
    ck_assert_int_eq(d->propose(st, t, 2, 8, out), 0);
    d->seq_free(st);
}
END_TEST

/* ---------------------------------------------------- same output, greedy */

/* Prompts that repeat themselves (what prompt lookup predicts) and ones
 * that do not; greedy stories260K falls into loops the drafter predicts. */
static const char *prompts[] = {
    "Once upon a time, there was a little girl named Lily. Once upon a time, there was a little",
    "Tom had a red ball. Tom had a red ball. Tom had a",
    "The cat sat",
    "Lily and Ben went to the park. They saw a big dog. Lily and Ben went to the park. They",
    "One day, a big bear",
    "",
};
#define N_PROMPTS (int)(sizeof prompts / sizeof prompts[0])
#define N_REQ 12

static int32_t max_tokens_of(int i) { return 20 + (i * 29) % 70; }

/* KV occupancy after every step (the engine's step hook, on its thread):
 * a decoding sequence should hold the blocks its computed tokens need and
 * no more, as plain decoding does, and the pool's used blocks should be
 * what the tables hold (the paged policy shares none). */
typedef struct kv_watch {
    bool no_shrink;              /* take the policy's shrink slot away (a pre-1.13 policy) */
    int32_t steps, excess_steps; /* steps seen; of them, ones where a sequence held more */
    int32_t max_excess;          /* blocks over its need, the most one sequence held */
    int32_t pool_mismatch;       /* steps where used blocks != the tables' blocks */
} kv_watch;

static void kv_watch_hook(void *user, pagoda_engine *e)
{
    kv_watch *w = user;
    int32_t bs = e->opts.block_size, excess = 0;
    int64_t held = 0;
    for (int32_t i = 0; i < e->n_running; i++) {
        const seq *q = e->running[i];
        const int32_t *table = NULL;
        int32_t nb = 0;
        e->kv->ops.block_table(e->kv->ctx, q->s.id, &table, &nb);
        held += nb;
        /* decoding: past its prompt, the token sampled last not computed */
        if (q->s.n_computed < q->s.n_prompt || q->s.n_computed != q->s.n_tokens - 1) continue;
        int32_t over = nb - (q->s.n_computed + bs - 1) / bs;
        if (over > excess) excess = over;
    }
    pagoda_kv_stats ks = {.struct_size = sizeof ks};
    e->kv->ops.stats(e->kv->ctx, &ks);
    w->steps++;
    w->excess_steps += excess > 0;
    if (excess > w->max_excess) w->max_excess = excess;
    w->pool_mismatch += ks.used_blocks != held;
}

typedef struct run_out {
    et_result r[N_REQ];
    pagoda_engine_stats st;
    int32_t step_drafted, step_accepted; /* over the inspected steps */
    int64_t shrunk_blocks;               /* blocks the engine gave back after rejected drafts */
    uint64_t draft_passes, draft_rows;   /* the draft model's forward passes and their rows */
} run_out;

/* A drafter put in place of the configured one once the engine is open
 * (NULL: none), before any request: its sequences' states are its own. */
static const pagoda_drafter_ops *g_drafter;

/* extra2 (NULL or up to two settings more, e.g. another drafter).
 * Under batch_invariant: the runs compared (drafts or not) differ in
 * their batches' shapes (a verify row is in a call of 1 + k rows, a decode
 * row in one of 1), so a row's logits must not depend on its call's size
 * (docs/speculation.md, "Byte-identical output"). */
static void run_watched(const char *sched, const char *kv, bool spec, const char *extra,
                        const char *const *extra2, kv_watch *w, run_out *out)
{
    char s1[64], s2[64];
    snprintf(s1, sizeof s1, "engine.scheduler=%s", sched);
    snprintf(s2, sizeof s2, "engine.kvcache=%s", kv);
    /* extra and extra2 beside spec_max_draft = 8, never in its place (the
     * NULLs of absent ones packed out, so none ends the list early) */
    const char *opt[] = {extra, extra2 ? extra2[0] : NULL, extra2 && extra2[0] ? extra2[1] : NULL};
    const char *settings[12] = {s1, s2, "engine.max_seq_len=256", "engine.kv_dtype=f32",
                                "backend.cpu.batch_invariant=on",
                                spec ? "engine.speculative=ngram" : "engine.speculative=off",
                                "engine.spec_max_seqs=16", "engine.spec_max_draft=8"};
    int ns = 8;
    for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++)
        if (opt[i]) settings[ns++] = opt[i];
    settings[ns] = NULL;
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open_stopped(&cfg, settings);
    pagoda_engine_set_check_invariants(rt->engine, true);
    if (g_drafter) rt->engine->spec.drafter = g_drafter;
    if (w) {
        if (w->no_shrink) rt->kv.ops.shrink = NULL;
        pagoda_engine_set_step_hook(rt->engine, kv_watch_hook, w);
    }
    et_run_greedy(rt, prompts, N_PROMPTS, N_REQ, max_tokens_of, out->r);
    /* stopped, so that steps_total is the last step's number (a running
     * engine publishes it at the top of its next loop) */
    pagoda_engine_stop(rt->engine);
    for (int i = 0; i < N_REQ; i++) {
        ck_assert_msg(out->r[i].n_final == 1 && out->r[i].finish_reason == PAGODA_FINISH_LENGTH,
                      "%s/%s request %d: %s (%s)", sched, kv, i,
                      pagoda_finish_reason_str(out->r[i].finish_reason), out->r[i].error);
        ck_assert_int_eq(out->r[i].n_tokens, max_tokens_of(i));
        ck_assert_int_eq(out->r[i].usage.completion_tokens, max_tokens_of(i));
    }
    ck_assert_int_eq(pagoda_engine_invariant_failures(rt->engine), 0);
    pagoda_kv_stats ks;
    pagoda_engine_kv_stats(rt->engine, &ks);
    ck_assert_int_eq(ks.used_blocks, 0);
    ck_assert_int_eq(ks.free_blocks + ks.cached_blocks, ks.total_blocks);
    pagoda_engine_get_stats(rt->engine, &out->st);
    out->shrunk_blocks = rt->engine->spec.shrunk_blocks;
    out->draft_passes = out->draft_rows = 0;
    if (rt->engine->spec.draft)
        pagoda_draft_model_passes(rt->engine->spec.draft, &out->draft_passes, &out->draft_rows);
    pagoda_engine_snapshot *snap = NULL;
    ck_assert_int_eq(pagoda_engine_snapshot_take(rt->engine, &snap), 0);
    out->step_drafted = out->step_accepted = 0;
    for (int32_t i = 0; i < snap->n_steps; i++) {
        out->step_drafted += snap->steps[i].draft_tokens;
        out->step_accepted += snap->steps[i].accepted_tokens;
        ck_assert_int_le(snap->steps[i].accepted_tokens, snap->steps[i].draft_tokens);
    }
    pagoda_engine_snapshot_release(snap);
    et_close(rt, cfg);
}

static void run(const char *sched, const char *kv, bool spec, const char *extra, run_out *out)
{
    run_watched(sched, kv, spec, extra, NULL, NULL, out);
}

static const char *scheds[] = {"continuous", "static", "priority"};
static const char *kvs[] = {"paged", "contiguous", "prefix"};

static void assert_same(const run_out *a, const run_out *b, const char *what)
{
    et_assert_same_tokens(a->r, b->r, N_REQ, what);
    for (int i = 0; i < N_REQ; i++) ck_assert_str_eq(a->r[i].text, b->r[i].text);
}

START_TEST(greedy_identical_every_combo)
{
    run_out *off = calloc(1, sizeof *off), *on = calloc(1, sizeof *on);
    const char *sched = scheds[_i / 3], *kv = kvs[_i % 3];
    run(sched, kv, false, NULL, off);
    run(sched, kv, true, NULL, on);
    char what[96];
    snprintf(what, sizeof what, "%s x %s, ngram vs off", sched, kv);
    assert_same(off, on, what);
    /* it did speculate, and the drafts were worth something */
    ck_assert_int_eq(off->st.spec_drafted_total, 0);
    ck_assert_str_eq(on->st.spec_drafter, "ngram");
    ck_assert_int_gt(on->st.spec_drafted_total, 0);
    ck_assert_int_gt(on->st.spec_accepted_total, 0);
    ck_assert_int_le(on->st.spec_accepted_total, on->st.spec_drafted_total);
    /* fewer steps: what speculation is for. Every request is queued before
     * the engine starts (et_run_greedy), so both runs see the same batches:
     * when they were submitted to a running engine, the static scheduler's
     * batches depended on how many requests had arrived when one formed,
     * and the step count with drafts came out above the one without under
     * ASan (186 vs 154; issue 29) though no step drafted more than it
     * saved. */
    fprintf(stderr, "test_spec: %s: %lld steps with drafts, %lld without\n", what,
            (long long)on->st.steps_total, (long long)off->st.steps_total);
    ck_assert_int_lt(on->st.steps_total, off->st.steps_total);
    free(off);
    free(on);
}
END_TEST

/* A pool so small that sequences are preempted, drafts or not; and a
 * draft length of 1 (the shortest). */
START_TEST(greedy_identical_under_preemption)
{
    run_out *off = calloc(1, sizeof *off), *on = calloc(1, sizeof *on);
    run("continuous", "prefix", false, "engine.kv_cache_tokens=320", off);
    run("continuous", "prefix", true, "engine.kv_cache_tokens=320", on);
    assert_same(off, on, "preempted, ngram vs off");
    ck_assert_int_gt(on->st.preemptions_total, 0);
    ck_assert_int_gt(on->st.spec_accepted_total, 0);
    run("continuous", "paged", true, "engine.spec_max_draft=1", on);
    assert_same(off, on, "spec_max_draft 1 vs off");
    ck_assert_int_gt(on->st.spec_accepted_total, 0);
    free(off);
    free(on);
}
END_TEST

/* Blocks grown for drafts that were rejected go back to the pool in the
 * step that rejected them (the KV policy's shrink), so between steps every
 * decoding sequence holds just what its computed tokens need, and the
 * pool's used blocks are the tables' blocks; a policy without the slot
 * (before ABI 1.13) keeps them, and still gives the same tokens. Blocks of
 * 4 tokens, so a run of drafts often reaches into a block of its own. */
START_TEST(rejected_drafts_give_blocks_back)
{
    run_out *off = calloc(1, sizeof *off), *on = calloc(1, sizeof *on);
    run("continuous", kvs[_i], false, "engine.block_size=4", off);
    kv_watch w = {0};
    run_watched("continuous", kvs[_i], true, "engine.block_size=4", NULL, &w, on);
    assert_same(off, on, "block_size 4, ngram vs off");
    fprintf(stderr, "rejected_drafts_give_blocks_back %s: %lld blocks given back, %d steps\n",
            kvs[_i], (long long)on->shrunk_blocks, w.steps);
    ck_assert_int_gt(on->st.spec_drafted_total, on->st.spec_accepted_total); /* some were rejected */
    ck_assert_int_gt(on->shrunk_blocks, 0);
    ck_assert_int_gt(w.steps, 0);
    ck_assert_int_eq(w.excess_steps, 0);
    if (strcmp(kvs[_i], "paged") == 0) ck_assert_int_eq(w.pool_mismatch, 0);
    /* the same without the slot: the blocks stay, the output does not change */
    kv_watch w0 = {.no_shrink = true};
    run_watched("continuous", kvs[_i], true, "engine.block_size=4", NULL, &w0, on);
    assert_same(off, on, "block_size 4, ngram without shrink vs off");
    ck_assert_int_eq(on->shrunk_blocks, 0);
    ck_assert_int_gt(w0.excess_steps, 0);
    ck_assert_int_ge(w0.max_excess, 1);
    free(off);
    free(on);
}
END_TEST

/* ------------------------------------------------------ the draft drafter */

/* A random-weight "tiny" model of F32 weights and `layers` layers at a new
 * temporary path[64] (the caller unlinks it), with vocab's tokenizer (a
 * GGUF) or a generated one (NULL). */
static void gen_tiny_type(char *path, uint64_t seed, const char *vocab, int layers, int dtype)
{
    snprintf(path, 64, "/tmp/pagoda_spec_XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char err[512];
    pagoda_genmodel_opts g = {.shape = "tiny", .dtype = dtype, .out = path, .seed = seed,
                              .vocab = vocab, .layers = layers, .tied = true};
    ck_assert_msg(pagoda_gen_model(&g, err, sizeof err) == 0, "%s", err);
}

static void gen_tiny(char *path, uint64_t seed, const char *vocab, int layers)
{
    gen_tiny_type(path, seed, vocab, layers, PAGODA_DTYPE_F32);
}

/* The bundled model drafting for itself (greedy, the same weights): the
 * drafts are what the model would say, so nearly all agree (the draft
 * pass runs one row at a time, the verify rows in a batch: at the default
 * kernel mode a near tie may round the other way; run_watched runs under
 * batch_invariant, where the two passes take the same kernels), and the
 * output is the same as without. */
START_TEST(draft_model_self_identical)
{
    run_out *off = calloc(1, sizeof *off), *on = calloc(1, sizeof *on);
    const char *sched = _i ? "static" : "continuous", *kv = _i ? "prefix" : "paged";
    char path[4200];
    snprintf(path, sizeof path, "engine.spec_draft_model=%s", tu_src("models/stories260K.gguf"));
    const char *draft[] = {"engine.speculative=draft", path};
    run(sched, kv, false, NULL, off);
    run_watched(sched, kv, true, NULL, draft, NULL, on);
    assert_same(off, on, "stories260K drafting itself vs off");
    ck_assert_str_eq(on->st.spec_drafter, "draft");
    fprintf(stderr, "draft_model_self_identical %s x %s: %lld drafted, %lld accepted; %lld steps "
            "with drafts, %lld without\n", sched, kv, (long long)on->st.spec_drafted_total,
            (long long)on->st.spec_accepted_total, (long long)on->st.steps_total,
            (long long)off->st.steps_total);
    ck_assert_int_gt(on->st.spec_drafted_total, 200);
    ck_assert_int_ge(on->st.spec_accepted_total * 100, on->st.spec_drafted_total * 95);
    ck_assert_int_lt(on->st.steps_total, off->st.steps_total);
    free(off);
    free(on);
}
END_TEST

/* A different model of the same vocabulary (random weights, the bundled
 * model's tokenizer): its drafts mostly disagree, the output does not
 * change, and the break-even rule keeps the cost bounded. */
START_TEST(draft_model_other_weights_identical)
{
    char model[64];
    gen_tiny(model, 7, tu_src("models/stories260K.gguf"), 2);
    run_out *off = calloc(1, sizeof *off), *on = calloc(1, sizeof *on);
    char path[200];
    snprintf(path, sizeof path, "engine.spec_draft_model=%s", model);
    const char *draft[] = {"engine.speculative=draft", path};
    run("continuous", "prefix", false, NULL, off);
    run_watched("continuous", "prefix", true, NULL, draft, NULL, on);
    assert_same(off, on, "a random draft model of the same vocabulary vs off");
    ck_assert_int_gt(on->st.spec_drafted_total, 0);
    ck_assert_int_lt(on->st.spec_accepted_total, on->st.spec_drafted_total);
    free(off);
    free(on);
    unlink(model);
}
END_TEST

/* Several sequences drafted in one propose_batch call get the tokens each
 * gets drafted alone (propose), round after round of a simulated
 * verification (some drafts accepted, then another token), through a
 * sequence ending and a new one of a long prompt taking its seat. The
 * draft passes group rows differently (one row of each sequence a pass
 * against one row a pass), so a matmul may round a near tie either way: a
 * difference is allowed only where the alone run's best draft beat its
 * runner-up by less than the tie bound, at most max_ties times, and ends that sequence's
 * comparison for the round. When nothing differed, both sides computed
 * the same rows, the batched side in fewer passes. The tie bound is the
 * model's: 1e-3 for stories260K's F32 weights (float order alone); 0.1
 * for SmolLM2's Q4_1, whose activations are int8 at every row count: a
 * float-order difference that moves an activation across a rounding
 * boundary changes it by a whole step (amax / 127), batched rows (4
 * tokens, the tokens-in-lanes kernels) and alone rows (1, the group
 * tiles) sum in different orders, and each side's draft KV carries its
 * own roundings from round to round. Seen: Release 3 ties in 235 drafts,
 * widest 0.077; ASan+UBSan (-O1) 9 in 218, widest 0.35. Allowed: 1.0
 * nats, 16 ties, at least 150 the same. A broken batched path parts by
 * whole nats (3.29 with the wrong logits row), and everywhere. */
#define DB_SEQS 4
#define DB_ROUNDS 14
#define DB_CAP 600

typedef struct db_hist {
    int32_t tok[DB_CAP + 1];
    int32_t n;
} db_hist;

static void db_prompt(const pagoda_tokenizer *t, const char *text, int reps, db_hist *h)
{
    char buf[1024] = "";
    for (int r = 0; r < reps; r++) strncat(buf, text, sizeof buf - strlen(buf) - 1);
    int32_t n = 0;
    ck_assert_int_eq(pagoda_tokenize(t, buf, strlen(buf), true, false, h->tok, DB_CAP, &n), 0);
    ck_assert_int_gt(n, 0);
    ck_assert_int_le(n, DB_CAP / 2);
    h->n = n;
}

static void draft_batched_vs_alone(const char *model, const char *what, float tie, int max_ties)
{
    char path[4200];
    snprintf(path, sizeof path, "engine.spec_draft_model=%s", model);
    const char *settings[] = {"engine.speculative=draft", path, "engine.spec_max_seqs=8",
                              "engine.max_seq_len=512", NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open_model(&cfg, model, settings);
    pagoda_engine *e = rt->engine; /* not started: the drafter is this thread's */
    const pagoda_drafter_ops *d = e->spec.drafter;
    ck_assert_ptr_eq(d, &pagoda_drafter_model_ops);
    ck_assert_ptr_nonnull(d->propose_batch);
    pagoda_draft_model_bytes b;
    pagoda_draft_model_bytes_of(e->spec.draft, &b);
    ck_assert_int_ge(b.seats, 2 * DB_SEQS); /* both sides' sequences hold a seat */
    const pagoda_tokenizer *t = e->model->tok;
    int32_t V = e->model->hp.n_vocab;
    static db_hist h[DB_SEQS];
    void *alone[DB_SEQS], *batched[DB_SEQS];
    for (int i = 0; i < DB_SEQS; i++) {
        db_prompt(t, prompts[i], 1, &h[i]);
        alone[i] = d->seq_new(&e->spec.cfg, DB_CAP);
        batched[i] = d->seq_new(&e->spec.cfg, DB_CAP);
        ck_assert(alone[i] && batched[i]);
    }
    int32_t out_a[DB_SEQS][16], out_b[DB_SEQS][16];
    float margin[16];
    int compared = 0, ties = 0;
    float worst = 0.0f; /* the widest margin a tie had */
    uint64_t pa = 0, ra = 0, pb = 0, rb = 0, p0, r0, p1, r1;
    for (int round = 0; round < DB_ROUNDS; round++) {
        if (round == DB_ROUNDS / 2) {
            /* the last sequence ends; a new one of a long prompt (a catch-up
             * of several passes) takes its seat on both sides */
            d->seq_free(alone[DB_SEQS - 1]);
            d->seq_free(batched[DB_SEQS - 1]);
            db_prompt(t, prompts[3], 4, &h[DB_SEQS - 1]);
            ck_assert_int_gt(h[DB_SEQS - 1].n, 64);
            alone[DB_SEQS - 1] = d->seq_new(&e->spec.cfg, DB_CAP);
            batched[DB_SEQS - 1] = d->seq_new(&e->spec.cfg, DB_CAP);
            ck_assert(alone[DB_SEQS - 1] && batched[DB_SEQS - 1]);
        }
        int32_t max[DB_SEQS], k_a[DB_SEQS];
        pagoda_draft_req req[DB_SEQS];
        for (int i = 0; i < DB_SEQS; i++) max[i] = 1 + (round * 3 + i * 5) % 8;
        pagoda_draft_model_passes(e->spec.draft, &p0, &r0);
        for (int i = 0; i < DB_SEQS; i++)
            k_a[i] = d->propose(alone[i], h[i].tok, h[i].n, max[i], out_a[i]);
        pagoda_draft_model_passes(e->spec.draft, &p1, &r1);
        pa += p1 - p0;
        ra += r1 - r0;
        for (int i = 0; i < DB_SEQS; i++)
            req[i] = (pagoda_draft_req){.state = batched[i], .tokens = h[i].tok, .n = h[i].n,
                                        .max = max[i], .out = out_b[i], .k = -1};
        d->propose_batch(req, DB_SEQS);
        pagoda_draft_model_passes(e->spec.draft, &p0, &r0);
        pb += p0 - p1;
        rb += r0 - r1;
        for (int i = 0; i < DB_SEQS; i++) {
            ck_assert_int_eq(k_a[i], max[i]); /* a seat each, room enough: every draft made */
            ck_assert_int_eq(req[i].k, k_a[i]);
            memcpy(margin, pagoda_drafter_model_margins(alone[i]), sizeof(float) * (size_t)k_a[i]);
            for (int j = 0; j < k_a[i]; j++) {
                ck_assert(margin[j] >= 0.0f);
                if (out_a[i][j] == out_b[i][j]) {
                    compared++;
                    continue;
                }
                if (margin[j] > worst) worst = margin[j];
                ck_assert_msg(margin[j] < tie, "%s: round %d sequence %d draft %d: %d batched, "
                              "%d alone (ahead by %g, no tie)", what, round, i, j, out_b[i][j],
                              out_a[i][j], (double)margin[j]);
                ties++;
                break;
            }
            /* verified: the first a drafts agree, then another token */
            int32_t a = (round + i) % (k_a[i] + 1);
            memcpy(h[i].tok + h[i].n, out_a[i], sizeof(int32_t) * (size_t)a);
            h[i].n += a;
            h[i].tok[h[i].n] = a < k_a[i] ? (out_a[i][a] + 1) % V : h[i].tok[round % 4];
            h[i].n++;
            ck_assert_int_lt(h[i].n, DB_CAP - 16);
        }
    }
    fprintf(stderr, "draft_batched_vs_alone %s: %d drafts the same, %d near ties (widest %g); alone %llu "
            "passes of %llu rows, batched %llu passes of %llu rows\n", what, compared, ties, (double)worst,
            (unsigned long long)pa, (unsigned long long)ra, (unsigned long long)pb,
            (unsigned long long)rb);
    ck_assert_int_le(ties, max_ties);
    ck_assert_int_ge(compared, 150);
    if (ties == 0) ck_assert_uint_eq(rb, ra);
    ck_assert_uint_lt(pb * 2, pa); /* 4 sequences: well under half the passes */
    for (int i = 0; i < DB_SEQS; i++) {
        d->seq_free(alone[i]);
        d->seq_free(batched[i]);
    }
    et_close(rt, cfg);
}

START_TEST(draft_batched_matches_alone)
{
    draft_batched_vs_alone(tu_src("models/stories260K.gguf"), "stories260K", 1e-3f, 2);
}
END_TEST

/* The engine with the draft model batched and with spec_draft_batch = off:
 * the same output as without speculation, drafts made, and the batched
 * side in fewer draft passes. */
START_TEST(draft_model_batched_identical)
{
    run_out *off = calloc(1, sizeof *off), *on = calloc(1, sizeof *on), *one = calloc(1, sizeof *one);
    char path[4200];
    snprintf(path, sizeof path, "engine.spec_draft_model=%s", tu_src("models/stories260K.gguf"));
    const char *draft[] = {"engine.speculative=draft", path};
    run("continuous", "paged", false, NULL, off);
    run_watched("continuous", "paged", true, NULL, draft, NULL, on);
    run_watched("continuous", "paged", true, "engine.spec_draft_batch=off", draft, NULL, one);
    assert_same(off, on, "draft batched vs off");
    assert_same(off, one, "draft one sequence at a time vs off");
    fprintf(stderr, "draft_model_batched_identical: batched %lld drafted, %lld accepted, %llu "
            "passes of %llu rows; one at a time %lld drafted, %lld accepted, %llu passes of %llu "
            "rows\n", (long long)on->st.spec_drafted_total, (long long)on->st.spec_accepted_total,
            (unsigned long long)on->draft_passes, (unsigned long long)on->draft_rows,
            (long long)one->st.spec_drafted_total, (long long)one->st.spec_accepted_total,
            (unsigned long long)one->draft_passes, (unsigned long long)one->draft_rows);
    ck_assert_int_gt(on->st.spec_drafted_total, 200);
    ck_assert_int_gt(one->st.spec_drafted_total, 200);
    ck_assert_uint_gt(on->draft_rows, 0);
    /* drafting itself, batched or not, the drafts are the model's own
     * (draft_model_self_identical's bound: a near tie may round apart) */
    ck_assert_int_ge(on->st.spec_accepted_total * 100, on->st.spec_drafted_total * 95);
    ck_assert_int_ge(one->st.spec_accepted_total * 100, one->st.spec_drafted_total * 95);
    /* 12 requests, several decoding at once: far fewer passes batched */
    ck_assert_uint_lt(on->draft_passes * 2, one->draft_passes);
    free(off);
    free(on);
    free(one);
}
END_TEST

/* The draft model's weights, pool and activations are in the memory plan
 * before anything is allocated, as large as what the engine then opens,
 * and come out of the same budget: the main pool is smaller by them. */
START_TEST(draft_model_in_memory_plan)
{
    char model[64], path[128];
    gen_tiny(model, 5, tu_src("models/stories260K.gguf"), 2);
    snprintf(path, sizeof path, "engine.spec_draft_model=%s", model);
    const char *off_set[] = {"engine.memory_budget=256M", "engine.max_seq_len=256", NULL};
    const char *on_set[] = {"engine.memory_budget=256M", "engine.max_seq_len=256",
                            "engine.speculative=draft", path, "engine.spec_max_seqs=3", NULL};
    pagoda_config *c_off, *c_on;
    pagoda_runtime *r_off = et_open_stopped(&c_off, off_set), *r_on = et_open_stopped(&c_on, on_set);
    const pagoda_memplan *p0 = &r_off->plan, *p1 = &r_on->plan;
    ck_assert_int_eq(p0->draft_weight_bytes + p0->draft_kv_bytes + p0->draft_act_bytes, 0);
    /* what the engine opened, counted the way the plan counts */
    pagoda_draft_model_bytes got;
    pagoda_draft_model_bytes_of(r_on->engine->spec.draft, &got);
    struct stat sb;
    ck_assert_int_eq(stat(model, &sb), 0);
    ck_assert(got.weights > 0 && got.weights < (uint64_t)sb.st_size);
    ck_assert_uint_eq(p1->draft_weight_bytes, got.weights);
    ck_assert_uint_eq(p1->draft_kv_bytes, got.kv);
    ck_assert_uint_eq(p1->draft_act_bytes, got.act);
    ck_assert_int_eq(p1->draft_seats, 3);
    ck_assert_int_eq(got.seats, 3);
    ck_assert_int_eq(p1->draft_seq_len, 256);
    /* 3 seats x 256 tokens x 2 layers x K and V x the tiny shape's KV width, F32 */
    ck_assert_uint_ge(got.kv, 3ull * 256 * 2 * 2 * 4);
    uint64_t draft = got.weights + got.kv + got.act;
    /* (the draft positions' logit rows make the activations larger too) */
    ck_assert_uint_eq(p1->fixed_bytes, p1->weight_bytes + p1->act_bytes + p1->workspace_bytes +
                                       p1->overhead_bytes + draft);
    ck_assert_uint_ge(p1->fixed_bytes, p0->fixed_bytes + draft);
    ck_assert_uint_eq(p1->kv_blocks, (256ull * 1048576 - p1->fixed_bytes - p1->swa_pool_bytes -
                                      p1->kv_sink_bytes) / p1->kv_bytes_per_block);
    ck_assert_uint_lt(p1->kv_blocks, p0->kv_blocks);
    /* the JSON plan (/v1/inspect, pagoda plan --json) names it too */
    char *js = pagoda_memplan_json(p1);
    ck_assert_ptr_nonnull(strstr(js, "\"draft_model\""));
    free(js);
    et_close(r_off, c_off);
    et_close(r_on, c_on);
    unlink(model);
}
END_TEST

/* The backend's repacked copies of the draft model's weights (ABI 1.15
 * weight_extra_bytes: the CPU backend's int8 copies of Q8_0 weights at
 * the AVX-512 and AMX levels) are planned too: a Q8_0 draft file's figure
 * is the one the plan gives the same file as the main model, and it is in
 * the fixed total. On a level that repacks nothing both are 0 (checked,
 * and said; draft_model_plan_asks_every_weight below checks the sum with
 * a fake op on every host). */
START_TEST(draft_model_repacked_in_memory_plan)
{
    char model[64], path[128];
    gen_tiny_type(model, 6, tu_src("models/stories260K.gguf"), 2, PAGODA_DTYPE_Q8_0);
    snprintf(path, sizeof path, "engine.spec_draft_model=%s", model);
    const char *main_set[] = {"engine.memory_budget=256M", "engine.max_seq_len=256", NULL};
    const char *on_set[] = {"engine.memory_budget=256M", "engine.max_seq_len=256",
                            "engine.speculative=draft", path, "engine.spec_max_seqs=3", NULL};
    pagoda_config *c_main, *c_on;
    pagoda_runtime *r_main = et_open_model(&c_main, model, main_set);
    pagoda_runtime *r_on = et_open_stopped(&c_on, on_set);
    const pagoda_memplan *pm = &r_main->plan, *p1 = &r_on->plan;
    ck_assert_uint_eq(p1->draft_repacked_bytes, pm->repacked_bytes);
    ck_assert_uint_eq(p1->fixed_bytes, p1->weight_bytes + p1->act_bytes + p1->workspace_bytes + p1->overhead_bytes +
                                       p1->repacked_bytes + p1->draft_weight_bytes + p1->draft_kv_bytes +
                                       p1->draft_act_bytes + p1->draft_repacked_bytes);
    char *js = pagoda_memplan_json(p1);
    char want[64];
    snprintf(want, sizeof want, "\"repacked\": %llu", (unsigned long long)p1->draft_repacked_bytes);
    ck_assert_msg(strstr(js, want), "no '%s' in the JSON plan", want);
    free(js);
    printf("draft_model_repacked_in_memory_plan: the Q8_0 draft's copies %llu bytes%s\n",
           (unsigned long long)p1->draft_repacked_bytes,
           p1->draft_repacked_bytes ? "" : " (this level repacks nothing: 0 = 0)");
    et_close(r_main, c_main);
    et_close(r_on, c_on);
    unlink(model);
}
END_TEST

/* A backend's weight_extra_bytes that answers on every host (the CPU
 * backend's is 0 where it repacks nothing): N x K + N bytes a weight. */
static int fake_extra(void *ctx, int dtype, int64_t N, int64_t K, uint64_t *out)
{
    (void)ctx;
    (void)dtype;
    *out = (uint64_t)(N * K + N);
    return 0;
}

/* The draft's repacked figure is the backend's answer summed over its 2-D
 * matmul weights (the token embedding only as the head; no biases), with a
 * fake op so that it is not 0 = 0 on a level that repacks nothing. */
START_TEST(draft_model_plan_asks_every_weight)
{
    char model[64], err[512] = "";
    gen_tiny(model, 8, tu_src("models/stories260K.gguf"), 2);
    pagoda_draft_model_bytes db;
    ck_assert_msg(pagoda_draft_model_plan(model, 2, 128, 16, fake_extra, NULL, &db, err, sizeof err) == 0, "%s",
                  err);
    gguf_file *f = pagoda_gguf_open(model, err, sizeof err);
    ck_assert_msg(f, "%s", err);
    bool has_head = pagoda_gguf_tensor(f, "output.weight") != NULL;
    uint64_t want = 0;
    int asked = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        bool emb = t->name.len == 17 && !memcmp(t->name.ptr, "token_embd.weight", 17);
        bool bias = t->name.len > 5 && !memcmp(t->name.ptr + t->name.len - 5, ".bias", 5);
        if (t->n_dims != 2 || bias || (emb && has_head)) continue;
        want += (uint64_t)(t->ne[1] * t->ne[0] + t->ne[1]);
        asked++;
    }
    pagoda_gguf_close(f);
    ck_assert_int_gt(asked, 2);
    ck_assert_uint_eq(db.repacked, want);
    pagoda_draft_model_bytes none;
    ck_assert_int_eq(pagoda_draft_model_plan(model, 2, 128, 16, NULL, NULL, &none, err, sizeof err), 0);
    ck_assert_uint_eq(none.repacked, 0);
    unlink(model);
}
END_TEST

/* A mixture-of-experts draft file plans too: the weights walk the
 * repacked figure comes from reads its expert keys under the file's
 * architecture (it was refused: "expert_count is missing"). */
START_TEST(draft_model_plan_moe)
{
    char model[64];
    snprintf(model, sizeof model, "/tmp/pagoda_spec_XXXXXX");
    int fd = mkstemp(model);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char err[512] = "";
    pagoda_genmodel_opts g = {.shape = "qwen3moe-tiny", .dtype = PAGODA_DTYPE_Q8_0, .out = model, .seed = 3};
    ck_assert_msg(pagoda_gen_model(&g, err, sizeof err) == 0, "%s", err);
    const char *set[] = {"engine.max_seq_len=256", NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open_stopped(&cfg, set);
    ck_assert_ptr_nonnull(rt->backend.ops.weight_extra_bytes);
    pagoda_draft_model_bytes db;
    int st = pagoda_draft_model_plan(model, 2, 256, 16, rt->backend.ops.weight_extra_bytes, rt->backend.ctx, &db,
                                     err, sizeof err);
    ck_assert_msg(st == 0, "%s", err);
    ck_assert_uint_gt(db.weights, 0);
    et_close(rt, cfg);
    unlink(model);
}
END_TEST

/* -------------------------------------------------- same output, sampled */

/* Every row is sampled with the sequence's own sampler exactly as plain
 * decoding samples it, so a seeded request gives the same bytes. */
START_TEST(seeded_sampling_identical)
{
    static et_result r[2][4];
    static const char *const stops[] = {"Lily and Ben went"};
    for (int spec = 0; spec < 2; spec++) {
        /* batch_invariant: the four requests reach a running engine and
         * meet in batches the timing picks, and verify rows are bigger
         * calls than decode rows; F32 rows of 1-2 tokens (own dot) and of
         * 3 or more (sgemm) round apart, which once flipped a seeded draw
         * (CI: request 3 at token 71). The mode keeps every F32 row on the
         * dot, so the bytes hold for any batching. */
        const char *settings[] = {spec ? "engine.speculative=ngram" : "engine.speculative=off",
                                  "engine.spec_max_seqs=8", "backend.cpu.batch_invariant=on", NULL};
        pagoda_config *cfg;
        pagoda_runtime *rt = et_open(&cfg, settings);
        for (int i = 0; i < 4; i++) {
            et_result_init(&r[spec][i]);
            pagoda_request req = et_request(rt, prompts[i % 4], 80, 0.8f);
            req.has_seed = true;
            req.seed = 1000 + (uint64_t)i;
            req.top_k = i == 1 ? 40 : 0;
            req.top_p = i == 2 ? 0.9f : 1.0f;
            req.repetition_penalty = i == 3 ? 1.1f : 1.0f;
            req.presence_penalty = i == 0 ? 0.2f : 0.0f;
            req.frequency_penalty = i == 2 ? 0.1f : 0.0f;
            req.logprobs = 2;
            req.stop = stops;
            req.n_stop = i == 3 ? 1 : 0;
            uint64_t id;
            char err[256] = "";
            ck_assert_msg(pagoda_engine_submit(rt->engine, &req, et_cb, &r[spec][i], &id, err,
                                               sizeof err) == 0, "%s", err);
        }
        pagoda_engine_wait_idle(rt->engine);
        pagoda_engine_stats st;
        pagoda_engine_get_stats(rt->engine, &st);
        et_close(rt, cfg);
    }
    et_assert_same_tokens(r[0], r[1], 4, "seeded, ngram vs off");
    for (int i = 0; i < 4; i++) {
        ck_assert_str_eq(r[0][i].text, r[1][i].text);
        ck_assert_int_eq(r[0][i].finish_reason, r[1][i].finish_reason);
    }
}
END_TEST

/* ------------------------------------------------------ structured output */

/* A constrained request speculates: row j is sampled under the mask of
 * the matcher advanced by the tokens of rows 0 .. j - 1, so greedy and
 * seeded sampled output are the bytes plain decoding gives, and drafts
 * the spec forbids are simply rejected. Outputs that repeat themselves
 * (what the ngram drafter predicts), greedy and at temperature 0.8. */
START_TEST(structured_output_identical)
{
    static et_result r[2][6];
    static const struct { int type; const char *spec; float temp; } reqs[] = {
        {PAGODA_CONSTRAINT_REGEX, "(Tom had a red ball\\. ){2,5}Tom had", 0.0f},
        {PAGODA_CONSTRAINT_REGEX, "(Lily and Ben went to the park\\. |They saw a big dog\\. ){3,8}",
         0.8f},
        {PAGODA_CONSTRAINT_JSON_SCHEMA,
         "{\"type\":\"object\",\"properties\":{\"names\":{\"type\":\"array\",\"items\":"
         "{\"enum\":[\"Lily\",\"Ben\",\"Tom\"]},\"minItems\":6,\"maxItems\":12}},"
         "\"required\":[\"names\"]}", 0.0f},
        {PAGODA_CONSTRAINT_JSON_SCHEMA,
         "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"name\":"
         "{\"enum\":[\"Lily\",\"Ben\"]},\"age\":{\"enum\":[3,4,5]}},\"required\":"
         "[\"name\",\"age\"]},\"minItems\":3,\"maxItems\":6}", 0.8f},
        {PAGODA_CONSTRAINT_CHOICE, "[\"Tom had a red ball. Tom had a red ball.\",\"Tom had a cat.\"]",
         0.8f},
        {PAGODA_CONSTRAINT_JSON_OBJECT, NULL, 0.0f},
    };
    int64_t drafted = 0, accepted = 0;
    for (int spec = 0; spec < 2; spec++) {
        /* batch_invariant: verify rows are bigger calls than decode rows */
        const char *settings[] = {spec ? "engine.speculative=ngram" : "engine.speculative=off",
                                  "engine.spec_max_seqs=8", "backend.cpu.batch_invariant=on", NULL};
        pagoda_config *cfg;
        pagoda_runtime *rt = et_open_stopped(&cfg, settings);
        for (int i = 0; i < 6; i++) {
            et_result_init(&r[spec][i]);
            pagoda_request req = et_request(rt, prompts[i % 4], 120, reqs[i].temp);
            req.ignore_eos = false;
            req.has_seed = true;
            req.seed = 77 + (uint64_t)i;
            req.constraint_type = reqs[i].type;
            req.constraint = reqs[i].spec;
            req.constraint_len = reqs[i].spec ? strlen(reqs[i].spec) : 0;
            req.constraint_strict = true;
            uint64_t id;
            char err[256] = "";
            ck_assert_msg(pagoda_engine_submit(rt->engine, &req, et_cb, &r[spec][i], &id, err,
                                               sizeof err) == 0, "request %d: %s", i, err);
        }
        ck_assert_int_eq(pagoda_engine_start(rt->engine), 0);
        pagoda_engine_wait_idle(rt->engine);
        pagoda_engine_stats st;
        pagoda_engine_get_stats(rt->engine, &st);
        drafted = st.spec_drafted_total;
        accepted = st.spec_accepted_total;
        et_close(rt, cfg);
    }
    et_assert_same_tokens(r[0], r[1], 6, "structured, ngram vs off");
    for (int i = 0; i < 6; i++) {
        ck_assert_msg(r[0][i].n_final == 1 && r[0][i].finish_reason != PAGODA_FINISH_ERROR,
                      "request %d: %s", i, r[0][i].error);
        ck_assert_str_eq(r[0][i].text, r[1][i].text);
        ck_assert_int_eq(r[0][i].finish_reason, r[1][i].finish_reason);
        if (getenv("PAGODA_TEST_VERBOSE")) printf("%d: %s\n", i, r[0][i].text);
    }
    fprintf(stderr, "structured_output_identical: %lld drafted, %lld accepted\n", (long long)drafted,
            (long long)accepted);
    ck_assert_int_gt(drafted, 0);
    ck_assert_int_gt(accepted, 0);
    ck_assert_int_lt(accepted, drafted); /* some drafts were not what the spec or model allowed */
}
END_TEST

/* ------------------------------------------------------- the distribution */

/* Thousands of sampled continuations of a prompt the drafter predicts,
 * with speculation and without, under different seeds: the joint of the
 * 2nd, 3rd and 4th output tokens (the positions verified drafts decide
 * when speculating) must come from one distribution. Two-sample chi-square
 * over the categories seen at least 5 times in all (the rest pooled); the
 * threshold is the chi-square quantile at 1 - 1e-6 (Wilson-Hilferty), so
 * equal distributions fail it about once in a million runs. A wrong
 * acceptance rule (docs/speculation.md shows one) fails it by far. */
#define N_DRAWS 3000
#define MAX_CAT 4096

typedef struct draw_set {
    et_result *r;
    int64_t drafted, accepted;
} draw_set;

static void draws(bool spec, uint64_t seed0, draw_set *out)
{
    const char *settings[] = {spec ? "engine.speculative=ngram" : "engine.speculative=off",
                              "engine.spec_max_seqs=64", "engine.max_queue=8192",
                              "scheduler.continuous.max_num_seqs=64",
                              /* room for a whole wave of prompts and the drafts beside them
                               * (drafts only take what prefill leaves of the token budget) */
                              "scheduler.continuous.max_batched_tokens=4096", NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open_stopped(&cfg, settings);
    out->r = calloc(N_DRAWS, sizeof *out->r);
    ck_assert_ptr_nonnull(out->r);
    const char *prompt = "Tom had a big ball. Tom had a big ball. Tom had a big ball. Tom had";
    for (int i = 0; i < N_DRAWS; i++) {
        et_result_init(&out->r[i]);
        pagoda_request req = et_request(rt, prompt, 4, 0.7f);
        req.has_seed = true;
        req.seed = seed0 + (uint64_t)i;
        uint64_t id;
        char err[256] = "";
        ck_assert_msg(pagoda_engine_submit(rt->engine, &req, et_cb, &out->r[i], &id, err, sizeof err) == 0,
                      "%s", err);
    }
    ck_assert_int_eq(pagoda_engine_start(rt->engine), 0);
    pagoda_engine_wait_idle(rt->engine);
    pagoda_engine_stats st;
    pagoda_engine_get_stats(rt->engine, &st);
    out->drafted = st.spec_drafted_total;
    out->accepted = st.spec_accepted_total;
    et_close(rt, cfg);
}

static int64_t key_of(const et_result *r)
{
    ck_assert_int_eq(r->n_tokens, 4);
    return ((int64_t)r->tokens[1] * 512 + r->tokens[2]) * 512 + r->tokens[3];
}

START_TEST(sampled_distribution_unchanged)
{
    draw_set a, b;
    draws(false, 1u << 20, &a);
    draws(true, 1u << 30, &b); /* other seeds: the two sets are independent */
    ck_assert_int_eq(a.drafted, 0);
    /* the drafts were made and decided the positions compared */
    ck_assert_int_gt(b.drafted, N_DRAWS);
    ck_assert_int_gt(b.accepted, N_DRAWS / 4);
    static int64_t keys[MAX_CAT];
    static int32_t ca[MAX_CAT], cb[MAX_CAT];
    int n = 0;
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < N_DRAWS; i++) {
            int64_t k = key_of(s ? &b.r[i] : &a.r[i]);
            int j = 0;
            while (j < n && keys[j] != k) j++;
            if (j == n) {
                ck_assert_int_lt(n, MAX_CAT);
                keys[n] = k;
                ca[n] = cb[n] = 0;
                n++;
            }
            if (s) cb[j]++; else ca[j]++;
        }
    /* pool the rare categories, so every expected count is >= 2.5 */
    double chi = 0, pa = 0, pb = 0;
    int df = -1;
    for (int j = 0; j < n; j++) {
        if (ca[j] + cb[j] < 5) {
            pa += ca[j];
            pb += cb[j];
            continue;
        }
        double e = (ca[j] + cb[j]) / 2.0; /* equal sample sizes */
        chi += (ca[j] - e) * (ca[j] - e) / e + (cb[j] - e) * (cb[j] - e) / e;
        df++;
    }
    if (pa + pb >= 5) {
        double e = (pa + pb) / 2.0;
        chi += (pa - e) * (pa - e) / e + (pb - e) * (pb - e) / e;
        df++;
    }
    ck_assert_int_ge(df, 3); /* the test has categories to compare */
    const double z = 4.753; /* the standard normal's 1 - 1e-6 quantile */
    double h = 2.0 / (9.0 * df);
    double crit = df * pow(1.0 - h + z * sqrt(h), 3.0);
    fprintf(stderr, "sampled_distribution_unchanged: %d categories, chi-square %.1f on %d df "
            "(threshold %.1f at 1e-6); %lld drafted, %lld accepted\n", n, chi, df, crit,
            (long long)b.drafted, (long long)b.accepted);
    ck_assert_msg(chi < crit, "chi-square %.1f on %d df is above %.1f: speculation changed the "
                  "sampled distribution", chi, df, crit);
    free(a.r);
    free(b.r);
}
END_TEST

/* SmolLM2 (where models/get-model fetched it): an edit-style prompt
 * through its chat template, greedy, the same tokens with and without,
 * paged with F16 KV and prefix with F32 KV. */
#define SMOLLM2_REL "models/SmolLM2-135M-Instruct.Q4_1.gguf"

static const char SMOLLM2_PROMPT[] =
    "<|im_start|>user\nRewrite this C file with the function add renamed to "
    "sum everywhere. Reply with the whole file only.\n\n"
    "static int add(int a, int b)\n{\n    return a + b;\n}\n\n"
    "int main(void)\n{\n    int x = add(1, 2);\n    int y = add(x, 3);\n"
    "    return add(x, y);\n}\n<|im_end|>\n<|im_start|>assistant\n";

/* The two requests of SMOLLM2_PROMPT without (r[0]) and with (r[1]) ngram
 * speculation, paged with F16 KV (prefix_f32 false) or prefix with F32 KV,
 * batch_invariant on or at the default. Both requests are queued before the
 * engine starts: the same batches with and without speculation (a quantized
 * model's rows are not bit-identical across batch shapes, so timing must
 * not pick them). */
static void smollm2_run_pair(bool prefix_f32, bool batch_invariant, et_result r[2][2])
{
    for (int spec = 0; spec < 2; spec++) {
        const char *settings[] = {spec ? "engine.speculative=ngram" : "engine.speculative=off",
                                  prefix_f32 ? "engine.kvcache=prefix" : "engine.kvcache=paged",
                                  prefix_f32 ? "engine.kv_dtype=f32" : "engine.kv_dtype=f16",
                                  "engine.max_seq_len=512",
                                  batch_invariant ? "backend.cpu.batch_invariant=on" : NULL, NULL};
        pagoda_config *cfg;
        pagoda_runtime *rt = et_open_model(&cfg, tu_src(SMOLLM2_REL), settings);
        for (int i = 0; i < 2; i++) {
            et_result_init(&r[spec][i]);
            pagoda_request req = et_request(rt, SMOLLM2_PROMPT, 40, 0.0f);
            req.parse_special = true;
            req.ignore_eos = false;
            uint64_t id;
            char err[256] = "";
            ck_assert_msg(pagoda_engine_submit(rt->engine, &req, et_cb, &r[spec][i], &id, err,
                                               sizeof err) == 0, "%s", err);
        }
        ck_assert_int_eq(pagoda_engine_start(rt->engine), 0);
        pagoda_engine_wait_idle(rt->engine);
        pagoda_engine_stats st;
        pagoda_engine_get_stats(rt->engine, &st);
        /* drafts were verified (the path under test ran); how many were
         * accepted follows the trajectory, which the KV dtype and the
         * kernels' rounding move: 2 accepted of 10 in Release, 0 of 8 under
         * ASan (-O1 kernels) with prefix x F32 here */
        if (spec) ck_assert_int_gt(st.spec_drafted_total, 0);
        et_close(rt, cfg);
    }
}

START_TEST(smollm2_greedy_identical)
{
    static et_result r[2][2];
    smollm2_run_pair(_i != 0, false, r);
    /* The same tokens, or (verify rows are batches of 1 + drafts where
     * decode runs one row: another kernel, another float order) the same
     * up to a near tie, scored by the reference forward pass: 0.5 nats
     * (a probability ratio of 1.65). A float-order difference that moves an
     * activation across an int8 rounding boundary changes it by a whole
     * step (amax / 127), so int8-activation models part by more than
     * float noise, and the reference (the plain F32 forward pass) is
     * itself that far from both runs (test_smollm2: logits 0.15 apart on
     * average, 1.0 at most). Seen here: 0.021 at token 33, two choices of
     * p ~ 0.16 each; 0.20 at token 18 once the prompt's attention took the
     * AVX-512 F16 tile (accurate to 3e-6 of the double reference, as the
     * row path: test_cpu_kernels), the decode run's choice the lower; the
     * batched-draft test below sees roundings to 0.35 after several
     * rounds of drift and allows 1.0. A broken verify path parts by whole
     * nats. */
    const char *settings[] = {"engine.max_seq_len=512", "engine.kv_dtype=f32", NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open_model(&cfg, tu_src(SMOLLM2_REL), settings);
    pagoda_request req = et_request(rt, SMOLLM2_PROMPT, 40, 0.0f);
    int32_t ids[512], n_ids = 0;
    ck_assert_int_eq(pagoda_tokenize(rt->model->tok, SMOLLM2_PROMPT, strlen(SMOLLM2_PROMPT), req.add_special, true, ids, 512, &n_ids), 0);
    ck_assert_int_le(n_ids, 512);
    int parted = et_assert_same_or_near_tie(rt, ids, n_ids, r[0], r[1], 2, 0.5, "SmolLM2, ngram vs off");
    et_close(rt, cfg);
    for (int i = 0; i < 2 && !parted; i++) ck_assert_str_eq(r[0][i].text, r[1][i].text);
    ck_assert_int_gt(r[0][0].n_tokens, 10);
}
END_TEST

/* The same two requests with [backend.cpu] batch_invariant = on: a row's
 * logits no longer depend on its call's size (the lanes kernels from one
 * row on, unsplit attention: cpu_features.h), so ngram speculation gives
 * the bytes of plain decoding exactly, no near tie allowed, for both KV
 * policies and dtypes above (on the scalar level, which has no lanes
 * kernels, the mode does not apply: skipped under PAGODA_CPU_ISA=scalar). */
START_TEST(smollm2_greedy_identical_batch_invariant)
{
    const char *isa = getenv("PAGODA_CPU_ISA");
    if (isa && strcmp(isa, "scalar") == 0) return;   /* no lanes kernels there (every host here has AVX2) */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    /* four SmolLM2 runs at -O1 under a sanitizer cost CI minutes the
     * 30-minute bound does not have; the Release suite runs it, and the
     * spec path's memory is checked here by the stories260K tests */
    printf("smollm2_greedy_identical_batch_invariant: not run under a sanitizer (the Release suite runs it)\n");
    return;
#endif
    static et_result r[2][2];
    smollm2_run_pair(_i != 0, true, r);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(r[0][i].n_tokens, r[1][i].n_tokens);
        ck_assert_int_eq(memcmp(r[0][i].tokens, r[1][i].tokens, sizeof(int32_t) * (size_t)r[0][i].n_tokens), 0);
        ck_assert_str_eq(r[0][i].text, r[1][i].text);
    }
    ck_assert_int_gt(r[0][0].n_tokens, 10);
}
END_TEST

/* SmolLM2 drafting for itself, batched against alone (Q4_1: below 32 rows
 * a pass runs one dot per row, so the rows should not even round apart) */
START_TEST(smollm2_draft_batched_matches_alone)
{
    draft_batched_vs_alone(tu_src(SMOLLM2_REL), "SmolLM2", 1.0f, 16);
}
END_TEST

/* ------------------------------------------------------ seeing it, bad input */

START_TEST(metrics_and_steps_show_drafts)
{
    run_out *on = calloc(1, sizeof *on);
    run("continuous", "paged", true, NULL, on);
    ck_assert_int_gt(on->step_drafted, 0);
    ck_assert_int_gt(on->step_accepted, 0);
    ck_assert_int_le(on->step_drafted, on->st.spec_drafted_total);
    pagoda_metrics *m = pagoda_metrics_new();
    char *text = pagoda_metrics_render(m, &on->st, NULL, 0);
    ck_assert_ptr_nonnull(text);
    char want[128];
    snprintf(want, sizeof want, "pagoda_spec_drafted_tokens_total{drafter=\"ngram\"} %lld\n",
             (long long)on->st.spec_drafted_total);
    ck_assert_msg(strstr(text, want), "no '%s' in the metrics", want);
    snprintf(want, sizeof want, "pagoda_spec_accepted_tokens_total{drafter=\"ngram\"} %lld\n",
             (long long)on->st.spec_accepted_total);
    ck_assert_msg(strstr(text, want), "no '%s' in the metrics", want);
    ck_assert_ptr_nonnull(strstr(text, "pagoda_spec_acceptance_rate{drafter=\"ngram\"} 0."));
    free(text);
    /* off: no spec series at all */
    pagoda_engine_stats st0 = {.struct_size = sizeof st0};
    text = pagoda_metrics_render(m, &st0, NULL, 0);
    ck_assert_ptr_null(strstr(text, "pagoda_spec_"));
    free(text);
    pagoda_metrics_free(m);
    free(on);
}
END_TEST

/* The ngram drafter, batched, making fewer drafts than each request asks
 * (at most max - 1; none when one is asked), as a model drafter does at
 * its seat's end or without a seat. */
static int64_t g_short_asked, g_short_made;

static void short_propose_batch(pagoda_draft_req *reqs, int32_t count)
{
    const pagoda_drafter_ops *ng = pagoda_drafter_find("ngram");
    for (int32_t i = 0; i < count; i++) {
        pagoda_draft_req *r = &reqs[i];
        r->k = r->max > 1 ? ng->propose(r->state, r->tokens, r->n, r->max - 1, r->out) : 0;
        g_short_asked += r->max;
        g_short_made += r->k;
    }
}

/* A batched proposal that comes back shorter than asked is charged what
 * it made: the step verifies (and counts in its draft_tokens and the
 * drafted total) the drafts that came back, not the ones asked for, and
 * the output is plain decoding's. */
START_TEST(short_batched_drafts_count_what_was_made)
{
    static pagoda_drafter_ops short_ops;
    short_ops = *pagoda_drafter_find("ngram");
    short_ops.struct_size = sizeof short_ops;
    short_ops.propose_batch = short_propose_batch;
    run_out *off = calloc(1, sizeof *off), *on = calloc(1, sizeof *on);
    run("continuous", "paged", false, "engine.kv_cache_tokens=8192", off);
    g_drafter = &short_ops;
    run("continuous", "paged", true, "engine.kv_cache_tokens=8192", on);
    g_drafter = NULL;
    assert_same(off, on, "ngram batched, short, vs off");
    fprintf(stderr, "short_batched_drafts_count_what_was_made: %lld asked, %lld made, %lld drafted "
            "(steps: %d), %lld steps\n", (long long)g_short_asked, (long long)g_short_made,
            (long long)on->st.spec_drafted_total, on->step_drafted, (long long)on->st.steps_total);
    ck_assert_int_gt(g_short_made, 0);
    ck_assert_int_lt(g_short_made, g_short_asked);
    ck_assert_int_eq(on->st.spec_drafted_total, g_short_made);
    if (on->st.steps_total <= PAGODA_STEP_HISTORY) ck_assert_int_eq(on->step_drafted, g_short_made);
    else ck_assert_int_le(on->step_drafted, g_short_made);
    free(off);
    free(on);
}
END_TEST

static void open_fails(const char *const *settings, const char *want)
{
    char err[1024] = "";
    pagoda_config *cfg = pagoda_config_new_empty();
    char buf[4200];
    snprintf(buf, sizeof buf, "engine.model=%s", tu_src("models/stories260K.gguf"));
    ck_assert_int_eq(pagoda_config_set(cfg, buf, err, sizeof err), 0);
    int st = 0;
    for (int i = 0; settings[i] && !st; i++) st = pagoda_config_set(cfg, settings[i], err, sizeof err);
    pagoda_runtime *rt = NULL;
    if (!st) st = pagoda_runtime_open(cfg, false, false, &rt, err, sizeof err);
    ck_assert_msg(st != 0, "%s was accepted", settings[0]);
    ck_assert_msg(strstr(err, want), "error '%s' does not name '%s'", err, want);
    pagoda_config_free(cfg);
}

START_TEST(bad_settings_and_requests_refused)
{
    open_fails((const char *[]){"engine.speculative=medusa", NULL}, "speculative");
    open_fails((const char *[]){"engine.spec_max_draft=0", NULL}, "spec_max_draft");
    open_fails((const char *[]){"engine.spec_ngram=9", NULL}, "spec_ngram");
    open_fails((const char *[]){"engine.speculative=ngram", "engine.max_seq_len=64",
                                "engine.spec_max_draft=64", NULL}, "spec_max_draft");
    /* the draft drafter: no file, a file that is not there, another vocabulary */
    open_fails((const char *[]){"engine.speculative=draft", NULL}, "needs spec_draft_model");
    open_fails((const char *[]){"engine.speculative=draft",
                                "engine.spec_draft_model=/nonexistent/draft.gguf", NULL},
               "spec_draft_model = /nonexistent/draft.gguf");
    char model[64], set[128];
    gen_tiny(model, 3, NULL, 1); /* its own generated vocabulary */
    snprintf(set, sizeof set, "engine.spec_draft_model=%s", model);
    open_fails((const char *[]){"engine.speculative=draft", set, NULL}, "not the model's vocabulary");
    unlink(model);

    for (int spec = 0; spec < 2; spec++) {
        const char *settings[] = {"engine.max_seq_len=128",
                                  spec ? "engine.speculative=ngram" : "engine.speculative=off", NULL};
        pagoda_config *cfg;
        pagoda_runtime *rt = et_open(&cfg, settings);
        struct { int32_t k; const char *want; } bad[] = {
            {-2, "spec_max_draft -2 is out of range"},
            {128, "spec_max_draft 128 is not below the context"},
            {4, spec ? NULL : "speculative decoding is off on this server"},
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            et_result r;
            et_result_init(&r);
            pagoda_request req = et_request(rt, "Tom had a red ball. Tom had a red ball.", 8, 0.0f);
            req.spec_max_draft = bad[i].k;
            uint64_t id;
            char err[256] = "";
            int st = pagoda_engine_submit(rt->engine, &req, et_cb, &r, &id, err, sizeof err);
            if (!bad[i].want) {
                ck_assert_msg(st == 0, "%s", err);
                pagoda_engine_wait_idle(rt->engine);
                ck_assert_int_eq(r.n_tokens, 8);
                continue;
            }
            ck_assert_int_eq(st, PAGODA_ERR_INVALID);
            ck_assert_msg(strstr(err, bad[i].want), "'%s' does not say '%s'", err, bad[i].want);
        }
        /* -1: this request decodes without drafts, on either server */
        et_result r;
        et_result_init(&r);
        pagoda_request req = et_request(rt, "Tom had a red ball. Tom had a red ball.", 16, 0.0f);
        req.spec_max_draft = -1;
        uint64_t id;
        char err[256] = "";
        pagoda_engine_stats s0, s1;
        pagoda_engine_get_stats(rt->engine, &s0);
        ck_assert_int_eq(pagoda_engine_submit(rt->engine, &req, et_cb, &r, &id, err, sizeof err), 0);
        pagoda_engine_wait_idle(rt->engine);
        pagoda_engine_get_stats(rt->engine, &s1);
        ck_assert_int_eq(r.n_tokens, 16);
        ck_assert_int_eq(s1.spec_drafted_total, s0.spec_drafted_total);
        et_close(rt, cfg);
    }
}
END_TEST

static TCase *tcase(Suite *s, const char *name)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, 600);
    suite_add_tcase(s, tc);
    return tc;
}

static Suite *suite(void)
{
    Suite *s = suite_create("spec");
    tcase_add_test(tcase(s, "drafter"), ngram_proposes_latest_continuation);
    TCase *tc = tcase(s, "greedy");
    tcase_add_loop_test(tc, greedy_identical_every_combo, 0, 9);
    tcase_add_test(tc, greedy_identical_under_preemption);
    tcase_add_loop_test(tc, rejected_drafts_give_blocks_back, 0, 3);
    tc = tcase(s, "draft");
    tcase_add_loop_test(tc, draft_model_self_identical, 0, 2);
    tcase_add_test(tc, draft_model_other_weights_identical);
    tcase_add_test(tc, draft_model_in_memory_plan);
    tcase_add_test(tc, draft_model_repacked_in_memory_plan);
    tcase_add_test(tc, draft_model_plan_moe);
    tcase_add_test(tc, draft_model_plan_asks_every_weight);
    tcase_add_test(tc, draft_batched_matches_alone);
    tcase_add_test(tc, draft_model_batched_identical);
    tc = tcase(s, "sampled");
    tcase_add_test(tc, seeded_sampling_identical);
    tcase_add_test(tc, structured_output_identical);
    tcase_add_test(tc, sampled_distribution_unchanged);
    tc = tcase(s, "seeing");
    tcase_add_test(tc, metrics_and_steps_show_drafts);
    tcase_add_test(tc, short_batched_drafts_count_what_was_made);
    tcase_add_test(tc, bad_settings_and_requests_refused);
    /* SmolLM2 only where it was fetched: the case does not exist otherwise */
    FILE *f = fopen(tu_src(SMOLLM2_REL), "rb");
    if (f) {
        fclose(f);
        TCase *ts = tcase(s, "smollm2");
        tcase_add_loop_test(ts, smollm2_greedy_identical, 0, 2);
        tcase_add_loop_test(ts, smollm2_greedy_identical_batch_invariant, 0, 2);
        tcase_add_test(ts, smollm2_draft_batched_matches_alone);
    } else {
        printf("test_spec: %s not present: smollm2_greedy_identical and "
               "smollm2_draft_batched_matches_alone not run\n", SMOLLM2_REL);
    }
    return s;
}

int main(void) { return tu_run(suite()); }
