/* test_inspect.c: inspection (core/inspect.c, core/engine/engine_inspect.c)
 * on the bundled model through the real plugins. Snapshots taken from
 * another thread while requests run are consistent in themselves (block
 * states against the KV stats, every block's refs against the block tables
 * of the live sequences, running + waiting against the sequences listed,
 * the step record in order), for every KV policy and for the core's
 * fallback when a policy has no inspect op; a prompt prefix shared by
 * three live sequences shows as blocks with refs 3 under the prefix
 * policy; an idle snapshot equals the engine's stats; the JSON says what
 * the snapshot holds; traced requests carry their step, batch, KV length,
 * block table and candidates on every token. */
#include <jansson.h>
#include <unistd.h>

#include "engine_testutil.h"
#include "inspect.h"

/* A prompt of more than 3 blocks of 16 tokens on stories260K. */
static const char *long_prompt =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park with her friends. One day, she saw a big red ball under a tree and";

/* Everything a snapshot must hold in itself; returns the largest refs seen.
 * Plain checks with check's asserts only on failure: a passing assert costs
 * a syscall, and the watcher runs this on every snapshot it takes. */
#define SNAP_FAIL(...) ck_abort_msg(__VA_ARGS__)
static int32_t check_snapshot(const pagoda_engine_snapshot *s, bool exact_refs)
{
    int64_t n[3] = {0, 0, 0};
    int32_t max_refs = 0;
    int32_t *holders = calloc((size_t)s->n_blocks, sizeof(int32_t));
    if (!holders) SNAP_FAIL("out of memory");
    int32_t running = 0;
    for (int32_t i = 0; i < s->n_seqs; i++) {
        const pagoda_snapshot_seq *q = &s->seqs[i];
        /* running first, then waiting */
        if (q->state == PAGODA_SEQ_RUNNING) {
            if (i != running) SNAP_FAIL("seq %d running after a waiting one", i);
            running++;
            if ((int64_t)q->n_blocks * s->block_size < q->n_computed)
                SNAP_FAIL("seq %llu: %d blocks for %d computed", (unsigned long long)q->id, q->n_blocks,
                          q->n_computed);
        } else if (q->n_blocks != 0) {
            SNAP_FAIL("waiting seq %llu holds %d blocks", (unsigned long long)q->id, q->n_blocks);
        }
        if (q->n_computed > q->n_tokens || q->n_prompt > q->n_tokens)
            SNAP_FAIL("seq %llu: %d computed, %d prompt, %d tokens", (unsigned long long)q->id,
                      q->n_computed, q->n_prompt, q->n_tokens);
        for (int32_t j = 0; j < q->n_blocks; j++) {
            int32_t b = s->table[q->first_block + j];
            if (b < 0 || b >= s->n_blocks) SNAP_FAIL("seq %llu: block %d", (unsigned long long)q->id, b);
            holders[b]++;
        }
        for (int32_t k = 0; k < i; k++)
            if (s->seqs[k].id == q->id) SNAP_FAIL("seq %llu listed twice", (unsigned long long)q->id);
    }
    if (running != s->running || s->running + s->waiting != s->n_seqs)
        SNAP_FAIL("running %d (listed %d), waiting %d, %d listed", s->running, running, s->waiting, s->n_seqs);
    for (int32_t b = 0; b < s->n_blocks; b++) {
        const pagoda_kv_block_info *x = &s->blocks[b];
        n[x->state]++;
        if (x->refs > max_refs) max_refs = x->refs;
        bool reserved = (x->flags & PAGODA_KV_BLOCK_RESERVED) != 0;
        bool ok = holders[b] ? x->state == PAGODA_KV_BLOCK_USED && (!exact_refs || x->refs == holders[b])
                             : x->state != PAGODA_KV_BLOCK_USED || reserved;
        if (!ok) SNAP_FAIL("block %d: state %d refs %d, in %d tables", b, x->state, x->refs, holders[b]);
    }
    if (s->blocks_from_policy && (n[PAGODA_KV_BLOCK_FREE] != s->kv.free_blocks ||
                                  n[PAGODA_KV_BLOCK_USED] != s->kv.used_blocks ||
                                  n[PAGODA_KV_BLOCK_CACHED] != s->kv.cached_blocks))
        SNAP_FAIL("block states %lld/%lld/%lld, stats %lld/%lld/%lld", (long long)n[0], (long long)n[1],
                  (long long)n[2], (long long)s->kv.free_blocks, (long long)s->kv.used_blocks,
                  (long long)s->kv.cached_blocks);
    if (s->kv.free_blocks + s->kv.used_blocks + s->kv.cached_blocks != s->n_blocks)
        SNAP_FAIL("free + used + cached != %d", s->n_blocks);
    /* the step record: consecutive, the latest no later than the snapshot */
    for (int32_t i = 0; i < s->n_steps; i++) {
        const pagoda_step_record *r = &s->steps[i];
        if ((i && r->step != s->steps[i - 1].step + 1) || r->n_seqs < 1 ||
            r->prefill_tokens + r->decode_tokens < 1 || r->decode_tokens > r->n_seqs || !(r->ms >= 0))
            SNAP_FAIL("step record %d: step %llu, %d seqs, %d + %d tokens, %g ms", i,
                      (unsigned long long)r->step, r->n_seqs, r->prefill_tokens, r->decode_tokens,
                      (double)r->ms);
    }
    if (s->n_steps && s->steps[s->n_steps - 1].step != s->step)
        SNAP_FAIL("latest step record %llu, snapshot at %llu",
                  (unsigned long long)s->steps[s->n_steps - 1].step, (unsigned long long)s->step);
    free(holders);
    return max_refs;
}

typedef struct watcher {
    pagoda_engine *e;
    volatile int stop;
    int n_snapshots, max_refs, max_running;
    uint64_t last_version, last_step;
    bool exact_refs;
} watcher;

static void *watch(void *arg)
{
    watcher *w = arg;
    while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
        pagoda_engine_snapshot *s = NULL;
        if (pagoda_engine_snapshot_take(w->e, &s) != PAGODA_OK) SNAP_FAIL("no snapshot");
        int32_t m = check_snapshot(s, w->exact_refs);
        if (m > w->max_refs) w->max_refs = m;
        if (s->running > w->max_running) w->max_running = s->running;
        if (s->version < w->last_version || s->step < w->last_step)
            SNAP_FAIL("went back: version %llu after %llu, step %llu after %llu",
                      (unsigned long long)s->version, (unsigned long long)w->last_version,
                      (unsigned long long)s->step, (unsigned long long)w->last_step);
        w->last_version = s->version;
        w->last_step = s->step;
        w->n_snapshots++;
        pagoda_engine_snapshot_release(s);
    }
    return NULL;
}

/* A shared prefix under load: A runs first (its prompt committed), then B
 * and C arrive with the same prompt; a watcher thread checks snapshots. */
static watcher run_shared_prefix(const char *kv, bool drop_inspect, int32_t *max_refs_idle)
{
    char s1[64];
    snprintf(s1, sizeof s1, "engine.kvcache=%s", kv);
    const char *settings[] = {s1, "engine.max_seq_len=512", "engine.kv_dtype=f32", NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open(&cfg, settings);
    /* the core's fallback: as if the policy had no inspect op */
    if (drop_inspect) rt->kv.ops.inspect = NULL;
    pagoda_engine_set_check_invariants(rt->engine, true);
    watcher w = {.e = rt->engine, .exact_refs = true};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, watch, &w), 0);
    et_result r[3];
    for (int i = 0; i < 3; i++) et_result_init(&r[i]);
    et_submit(rt, long_prompt, 300, &r[0], 0.0f);
    for (int spin = 0; spin < 100000; spin++) {
        pthread_mutex_lock(&r[0].mu);
        int got = r[0].n_tokens;
        pthread_mutex_unlock(&r[0].mu);
        if (got > 0) break;
        usleep(200);
    }
    et_submit(rt, long_prompt, 280, &r[1], 0.0f);
    et_submit(rt, long_prompt, 280, &r[2], 0.0f);
    pagoda_engine_wait_idle(rt->engine);
    __atomic_store_n(&w.stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(r[i].n_final, 1);
    ck_assert_int_eq(pagoda_engine_invariant_failures(rt->engine), 0);

    /* idle: the snapshot equals the engine's published stats */
    pagoda_engine_snapshot *s = NULL;
    ck_assert_int_eq(pagoda_engine_snapshot_take(rt->engine, &s), PAGODA_OK);
    pagoda_engine_stats st;
    pagoda_engine_get_stats(rt->engine, &st);
    ck_assert_int_eq(s->running, st.running);
    ck_assert_int_eq(s->waiting, st.waiting);
    ck_assert_int_eq(s->kv.used_blocks, st.kv_used_blocks);
    ck_assert_int_eq(s->kv.free_blocks, st.kv_free_blocks);
    ck_assert_int_eq(s->kv.cached_blocks, st.kv_cached_blocks);
    ck_assert_int_eq((int64_t)s->step, st.steps_total);
    ck_assert_int_eq(s->generation_tokens_total, st.generation_tokens_total);
    ck_assert_int_eq(s->generation_tokens_total, 300 + 280 + 280);
    ck_assert_int_eq(s->requests_finished_total, 3);
    ck_assert_int_eq(s->n_seqs, 0);
    ck_assert_int_eq(s->n_steps, PAGODA_STEP_HISTORY); /* more steps than that ran */
    *max_refs_idle = check_snapshot(s, true);
    ck_assert_int_eq(s->blocks_from_policy, !drop_inspect);
    /* nothing changed: the same version */
    pagoda_engine_snapshot *s2 = NULL;
    ck_assert_int_eq(pagoda_engine_snapshot_take(rt->engine, &s2), PAGODA_OK);
    ck_assert_uint_eq(s2->version, s->version);
    ck_assert_uint_gt(s2->inspect_count, s->inspect_count);
    pagoda_engine_snapshot_release(s2);
    if (!strcmp(kv, "prefix") && !drop_inspect) {
        /* the shared prompt's full blocks stay cached, known to the policy */
        ck_assert_int_ge(s->kv.cached_blocks, 3);
        int cached = 0;
        for (int32_t b = 0; b < s->n_blocks; b++) cached += s->blocks[b].state == PAGODA_KV_BLOCK_CACHED;
        ck_assert_int_eq(cached, s->kv.cached_blocks);
    }
    pagoda_engine_snapshot_release(s);
    et_close(rt, cfg);
    return w;
}

static const char *kvs[] = {"paged", "contiguous", "prefix"};

START_TEST(snapshots_consistent_under_load)
{
    int32_t idle_refs = -1;
    watcher w = run_shared_prefix(kvs[_i], false, &idle_refs);
    ck_assert_int_gt(w.n_snapshots, 0);
    ck_assert_int_ge(w.max_running, 2);
    ck_assert_int_eq(idle_refs, 0);
    /* only the prefix policy shares: A, B and C on the same blocks */
    ck_assert_int_eq(w.max_refs, !strcmp(kvs[_i], "prefix") ? 3 : 1);
}
END_TEST

START_TEST(fallback_from_block_tables)
{
    int32_t idle_refs = -1;
    watcher w = run_shared_prefix("prefix", true, &idle_refs);
    ck_assert_int_gt(w.n_snapshots, 0);
    /* refs from the tables alone agree; the cached blocks cannot be seen */
    ck_assert_int_eq(w.max_refs, 3);
    ck_assert_int_eq(idle_refs, 0);
}
END_TEST

/* ------------------------------------------------------------------ JSON */

START_TEST(json_says_what_the_snapshot_holds)
{
    const char *settings[] = {"engine.kvcache=prefix", "engine.max_seq_len=512", NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open(&cfg, settings);
    et_result r[2];
    et_result_init(&r[0]);
    et_result_init(&r[1]);
    /* a named request, then snapshots until it runs with blocks */
    pagoda_request req;
    pagoda_engine_request_defaults(rt->engine, &req);
    req.prompt = long_prompt;
    req.prompt_len = strlen(long_prompt);
    req.max_tokens = 400;
    req.ignore_eos = true;
    req.temperature = 0;
    req.request_id = "cmpl-\"quoted\"\x01";
    uint64_t id = 0;
    char err[256];
    ck_assert_int_eq(pagoda_engine_submit(rt->engine, &req, et_cb, &r[0], &id, err, sizeof err), 0);
    pagoda_engine_snapshot *s = NULL;
    for (int tries = 0; tries < 100000; tries++) {
        ck_assert_int_eq(pagoda_engine_snapshot_take(rt->engine, &s), PAGODA_OK);
        if (s->running == 1 && s->seqs[0].n_computed > 0) break;
        pagoda_engine_snapshot_release(s);
        s = NULL;
    }
    ck_assert_ptr_nonnull(s);
    char *text = pagoda_inspect_format(s, rt);
    ck_assert_ptr_nonnull(text);
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    ck_assert_msg(j != NULL, "%s: %.200s", je.text, text);
    /* version first, for readers that only look there */
    char want[64];
    snprintf(want, sizeof want, "{\"version\":%llu,", (unsigned long long)s->version);
    ck_assert_msg(!strncmp(text, want, strlen(want)), "%.80s", text);
    ck_assert_str_eq(json_string_value(json_object_get(j, "object")), "pagoda.inspect");
    ck_assert_str_eq(json_string_value(json_object_get(j, "kvcache")), "prefix");
    ck_assert_int_eq(json_integer_value(json_object_get(j, "step")), (json_int_t)s->step);
    json_t *kv = json_object_get(j, "kv");
    ck_assert_int_eq(json_integer_value(json_object_get(kv, "n_blocks")), s->n_blocks);
    ck_assert_int_eq(json_integer_value(json_object_get(kv, "used")), s->kv.used_blocks);
    ck_assert_int_eq(json_integer_value(json_object_get(kv, "free")), s->kv.free_blocks);
    ck_assert_str_eq(json_string_value(json_object_get(kv, "source")), "policy");
    json_t *blocks = json_object_get(kv, "blocks");
    ck_assert_int_eq((int)json_array_size(blocks), s->n_blocks);
    json_t *seqs = json_object_get(j, "seqs");
    ck_assert_int_eq((int)json_array_size(seqs), 1);
    json_t *q = json_array_get(seqs, 0);
    ck_assert_int_eq(json_integer_value(json_object_get(q, "id")), (json_int_t)id);
    ck_assert_str_eq(json_string_value(json_object_get(q, "request_id")), "cmpl-\"quoted\"\x01");
    ck_assert_str_eq(json_string_value(json_object_get(q, "state")), "running");
    ck_assert_int_eq(json_integer_value(json_object_get(q, "n_computed")), s->seqs[0].n_computed);
    json_t *qb = json_object_get(q, "blocks");
    ck_assert_int_eq((int)json_array_size(qb), s->seqs[0].n_blocks);
    /* each of its blocks names it, used, refs 1; every other block names nobody */
    size_t k;
    json_t *bj;
    int used = 0;
    json_array_foreach(blocks, k, bj) {
        ck_assert_int_eq(json_integer_value(json_object_get(bj, "id")), (json_int_t)k);
        json_t *bs = json_object_get(bj, "seqs");
        const char *state = json_string_value(json_object_get(bj, "state"));
        bool mine = false;
        for (int32_t b = 0; b < s->seqs[0].n_blocks; b++) mine |= s->table[b] == (int32_t)k;
        if (mine) {
            used++;
            ck_assert_str_eq(state, "used");
            ck_assert_int_eq(json_integer_value(json_object_get(bj, "refs")), 1);
            ck_assert_int_eq((int)json_array_size(bs), 1);
            ck_assert_int_eq(json_integer_value(json_array_get(bs, 0)), (json_int_t)id);
        } else {
            ck_assert_int_eq((int)json_array_size(bs), 0);
            ck_assert_str_ne(state, "used");
        }
    }
    ck_assert_int_eq(used, s->seqs[0].n_blocks);
    ck_assert_int_eq((int)json_array_size(json_object_get(j, "steps")), s->n_steps);
    /* memory: the plan's lines and the KV pool by state */
    json_t *mem = json_object_get(j, "memory");
    json_t *plan = json_object_get(mem, "plan");
    ck_assert_int_eq((int)json_array_size(plan), 5);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(plan, 0), "name")), "weights");
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(plan, 0), "bytes")),
                     (json_int_t)rt->plan.weight_bytes);
    json_t *now = json_object_get(mem, "now");
    ck_assert_int_eq(json_integer_value(json_object_get(now, "kv_used")),
                     (json_int_t)((uint64_t)s->kv.used_blocks * s->kv_block_bytes));
    ck_assert_int_eq(json_integer_value(json_object_get(now, "kv_used")) +
                     json_integer_value(json_object_get(now, "kv_free")) +
                     json_integer_value(json_object_get(now, "kv_cached")),
                     json_integer_value(json_object_get(json_array_get(plan, 1), "bytes")));
    ck_assert_int_gt(json_integer_value(json_object_get(json_object_get(mem, "device"), "total_bytes")), 0);
    ck_assert_int_gt(json_integer_value(json_object_get(mem, "process_rss_bytes")), 0);
    json_decref(j);
    free(text);
    pagoda_engine_snapshot_release(s);
    pagoda_engine_cancel(rt->engine, id);
    pagoda_engine_wait_idle(rt->engine);
    /* the host's path: a whole JSON from the runtime */
    char *whole = pagoda_inspect_json(rt);
    ck_assert_ptr_nonnull(whole);
    j = json_loads(whole, 0, &je);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "counts"), "running")), 0);
    json_decref(j);
    free(whole);
    /* after stop the asker takes the snapshot itself */
    pagoda_engine_stop(rt->engine);
    ck_assert_int_eq(pagoda_engine_snapshot_take(rt->engine, &s), PAGODA_OK);
    ck_assert_int_eq(s->n_seqs, 0);
    pagoda_engine_snapshot_release(s);
    et_close(rt, cfg);
}
END_TEST

/* ----------------------------------------------------------------- trace */

typedef struct trace_rec {
    pthread_mutex_t mu;
    int n;
    uint64_t step[512];
    int32_t step_seqs[512], step_tokens[512], kv_tokens[512], n_blocks[512], n_top[512], token[512], top0[512];
    int32_t first_block[512], last_block[512];
    float logprob[512];
    int finals;
} trace_rec;

static void trace_cb(void *user, const pagoda_event *ev)
{
    trace_rec *t = user;
    pthread_mutex_lock(&t->mu);
    if (ev->type == PAGODA_EVENT_FINAL) t->finals++;
    if (ev->type == PAGODA_EVENT_TOKEN && ev->token >= 0 && t->n < 512) {
        int i = t->n++;
        t->step[i] = ev->step;
        t->step_seqs[i] = ev->step_seqs;
        t->step_tokens[i] = ev->step_tokens;
        t->kv_tokens[i] = ev->kv_tokens;
        t->n_blocks[i] = ev->n_blocks;
        t->first_block[i] = ev->n_blocks ? ev->blocks[0] : -1;
        t->last_block[i] = ev->n_blocks ? ev->blocks[ev->n_blocks - 1] : -1;
        t->n_top[i] = ev->n_top;
        t->token[i] = ev->token;
        t->top0[i] = ev->n_top ? ev->top[0].token : -1;
        t->logprob[i] = ev->logprob;
    }
    pthread_mutex_unlock(&t->mu);
}

START_TEST(trace_tells_how_each_token_was_made)
{
    const char *settings[] = {"engine.kvcache=paged", "engine.max_seq_len=512", NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open_stopped(&cfg, settings);
    trace_rec t[3];
    memset(t, 0, sizeof t);
    for (int i = 0; i < 3; i++) pthread_mutex_init(&t[i].mu, NULL);
    /* two traced requests at once and one untraced: same prompt length */
    uint64_t ids[3];
    int32_t n_prompt = 0;
    for (int i = 0; i < 3; i++) {
        pagoda_request req = et_request(rt, "Once upon a time", 40, 0);
        req.trace = i < 2;
        char err[256];
        ck_assert_int_eq(pagoda_engine_submit(rt->engine, &req, trace_cb, &t[i], &ids[i], err, sizeof err), 0);
    }
    int32_t toks[64];
    ck_assert_int_eq(pagoda_tokenize(rt->model->tok, "Once upon a time", 16, true, false, toks, 64, &n_prompt), 0);
    ck_assert_int_eq(pagoda_engine_start(rt->engine), 0);
    pagoda_engine_wait_idle(rt->engine);
    int32_t bs = pagoda_engine_get_opts(rt->engine)->block_size;
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(t[r].finals, 1);
        ck_assert_int_eq(t[r].n, 40);
        for (int i = 0; i < t[r].n; i++) {
            ck_assert_uint_gt(t[r].step[i], 0);
            if (i) ck_assert_uint_gt(t[r].step[i], t[r].step[i - 1]);
            ck_assert(t[r].step_seqs[i] >= 1 && t[r].step_seqs[i] <= 3);
            /* the KV holds every token before this one */
            ck_assert_int_eq(t[r].kv_tokens[i], n_prompt + i);
            ck_assert_int_eq(t[r].n_blocks[i], (t[r].kv_tokens[i] + bs - 1) / bs);
            /* greedy: the best candidate is the token, at least 5 shown though none were asked */
            ck_assert_int_ge(t[r].n_top[i], 5);
            ck_assert_int_eq(t[r].top0[i], t[r].token[i]);
            ck_assert(t[r].logprob[i] <= 0 && t[r].logprob[i] > -1e9);
        }
        /* the three arrived before the first step and ran together: the
         * prefill (3 x the prompt) then 39 decode steps of 3 */
        ck_assert_int_eq(t[r].step[0], 1);
        for (int i = 0; i < t[r].n; i++) ck_assert_int_eq(t[r].step_seqs[i], 3);
        ck_assert_int_eq(t[r].step_tokens[0], 3 * n_prompt);
        for (int i = 1; i < t[r].n; i++) ck_assert_int_eq(t[r].step_tokens[i], 3);
        /* the table grows a block at a time and keeps its first block */
        ck_assert_int_eq(t[r].first_block[t[r].n - 1], t[r].first_block[0]);
    }
    /* one batch: the same steps for both traced requests */
    for (int i = 0; i < 40; i++) ck_assert_uint_eq(t[0].step[i], t[1].step[i]);
    /* the untraced one: nothing extra, and its logprobs stay off */
    ck_assert_int_eq(t[2].n, 40);
    for (int i = 0; i < t[2].n; i++) {
        ck_assert_uint_eq(t[2].step[i], 0);
        ck_assert_int_eq(t[2].n_blocks[i], 0);
        ck_assert_int_eq(t[2].n_top[i], 0);
        ck_assert_int_eq(t[2].token[i], t[0].token[i]);
    }
    for (int i = 0; i < 3; i++) pthread_mutex_destroy(&t[i].mu);
    et_close(rt, cfg);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("inspect");
    TCase *tc = tcase_create("inspect");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, snapshots_consistent_under_load, 0, 3);
    tcase_add_test(tc, fallback_from_block_tables);
    tcase_add_test(tc, json_says_what_the_snapshot_holds);
    tcase_add_test(tc, trace_tells_how_each_token_was_made);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
