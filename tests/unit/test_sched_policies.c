/* test_sched_policies: the scheduler plugins (scheduler-continuous,
 * scheduler-static, scheduler-priority) loaded from the built .so files
 * with a fake host, driven through a fake engine env over a simulated KV
 * pool (a count of free blocks; a sequence holds ceil(tokens / block_size)
 * blocks). Crafted queues check each decision; a simulation drives many
 * sequences to completion and checks the budgets on every plan. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "pagoda/scheduler.h"
#include "plugin_testhost.h"
#include "testutil.h"

#define FE_MAX 256

typedef struct fseq {
    pagoda_sched_seq s;
    int32_t blocks;      /* held */
    int32_t n_gen, max_gen;
    bool finished, arrived;
} fseq;

typedef struct fenv {
    th_host host;
    th_plugin pl;
    const pagoda_scheduler_ops *ops;
    void *ctx;
    int32_t lim_seqs, lim_tokens;
    fseq seqs[FE_MAX];   /* in arrival order */
    int n;
    fseq *running[FE_MAX];
    int n_running;
    int32_t free_blocks, total_blocks, bs;
    /* this step */
    fseq *plan_s[FE_MAX];
    int32_t plan_n[FE_MAX];
    int n_plan, n_preempted, n_admitted;
    uint64_t preempted[FE_MAX], admitted[FE_MAX];
    int64_t steps, preemptions_total;
} fenv;

static int32_t blocks_for(const fenv *e, int32_t n)
{
    return (n + e->bs - 1) / e->bs;
}

static fseq *fe_find(fenv *e, uint64_t id)
{
    for (int i = 0; i < e->n; i++)
        if (e->seqs[i].s.id == id) return &e->seqs[i];
    ck_abort_msg("scheduler named unknown sequence %llu", (unsigned long long)id);
    return NULL;
}

static void fe_drop_running(fenv *e, fseq *q)
{
    for (int i = 0; i < e->n_running; i++)
        if (e->running[i] == q) {
            memmove(&e->running[i], &e->running[i + 1], (size_t)(e->n_running - i - 1) * sizeof(fseq *));
            e->n_running--;
            return;
        }
}

static int env_admit(void *o, uint64_t id)
{
    fenv *e = o;
    fseq *q = fe_find(e, id);
    ck_assert_msg(q->s.state == PAGODA_SEQ_WAITING && !q->finished, "admit of seq %llu not waiting",
                  (unsigned long long)id);
    int32_t need = blocks_for(e, q->s.n_tokens);
    if (need > e->free_blocks) return PAGODA_ERR_NOSPACE;
    e->free_blocks -= need;
    q->blocks = need;
    q->s.state = PAGODA_SEQ_RUNNING;
    q->s.n_computed = 0;
    e->running[e->n_running++] = q;
    e->admitted[e->n_admitted++] = id;
    return PAGODA_OK;
}

static int env_grow(void *o, uint64_t id, int32_t n_total)
{
    fenv *e = o;
    fseq *q = fe_find(e, id);
    ck_assert_int_eq(q->s.state, PAGODA_SEQ_RUNNING);
    ck_assert_int_le(n_total, q->s.n_tokens);
    int32_t need = blocks_for(e, n_total) - q->blocks;
    if (need <= 0) return PAGODA_OK;
    if (need > e->free_blocks) return PAGODA_ERR_NOSPACE;
    e->free_blocks -= need;
    q->blocks += need;
    return PAGODA_OK;
}

static int env_preempt(void *o, uint64_t id)
{
    fenv *e = o;
    fseq *q = fe_find(e, id);
    ck_assert_int_eq(q->s.state, PAGODA_SEQ_RUNNING);
    e->free_blocks += q->blocks;
    q->blocks = 0;
    q->s.state = PAGODA_SEQ_WAITING;
    q->s.n_computed = 0;
    q->s.n_preemptions++;
    fe_drop_running(e, q);
    e->preempted[e->n_preempted++] = id;
    e->preemptions_total++;
    return PAGODA_OK;
}

static int32_t env_blocks_needed(void *o, uint64_t id)
{
    fenv *e = o;
    return blocks_for(e, fe_find(e, id)->s.n_tokens);
}

static int32_t env_free(void *o)
{
    return ((fenv *)o)->free_blocks;
}

/* The plan is checked here against the contract and limits(). */
static int env_plan(void *o, uint64_t id, int32_t n)
{
    fenv *e = o;
    fseq *q = fe_find(e, id);
    int32_t total = n;
    ck_assert_int_eq(q->s.state, PAGODA_SEQ_RUNNING);
    ck_assert_int_ge(n, 1);
    ck_assert_int_le(q->s.n_computed + n, q->s.n_tokens);
    ck_assert_msg(q->blocks * e->bs >= q->s.n_computed + n, "seq %llu planned without grow",
                  (unsigned long long)id);
    for (int i = 0; i < e->n_plan; i++) {
        ck_assert_msg(e->plan_s[i] != q, "seq %llu planned twice", (unsigned long long)id);
        total += e->plan_n[i];
    }
    ck_assert_int_lt(e->n_plan, e->lim_seqs);
    ck_assert_int_le(total, e->lim_tokens);
    e->plan_s[e->n_plan] = q;
    e->plan_n[e->n_plan++] = n;
    return PAGODA_OK;
}

/* A scheduler with key/value pairs (NULL-terminated) over a pool. */
static fenv *fe_open(const char *name, int32_t total_blocks, int32_t bs, ...)
{
    fenv *e = calloc(1, sizeof(*e));
    char err[256] = "";
    va_list ap;
    ck_assert_ptr_nonnull(e);
    th_init(&e->host);
    va_start(ap, bs);
    for (const char *k; (k = va_arg(ap, const char *)) != NULL;) {
        const char *v = va_arg(ap, const char *);
        if (strcmp(k, "engine.max_seq_len") == 0) th_set_engine(&e->host, "max_seq_len", v);
        else th_set(&e->host, k, v);
    }
    va_end(ap);
    e->pl = th_load("scheduler", name);
    e->ops = e->pl.desc->ops;
    ck_assert_uint_ge(e->ops->struct_size, sizeof(pagoda_scheduler_ops));
    for (int i = 0; i < e->host.n_keys; i++)
        ck_assert_msg(th_declares_key(e->pl.desc, e->host.keys[i]), "%s does not declare %s", name,
                      e->host.keys[i]);
    ck_assert_int_eq(e->pl.desc->create(&e->host.h, &e->ctx, err, sizeof(err)), PAGODA_OK);
    ck_assert_int_eq(e->ops->limits(e->ctx, &e->lim_seqs, &e->lim_tokens), PAGODA_OK);
    e->free_blocks = e->total_blocks = total_blocks;
    e->bs = bs;
    return e;
}

static void fe_close(fenv *e)
{
    e->pl.desc->destroy(e->ctx);
    th_unload(&e->pl);
    free(e);
}

/* A request: prompt tokens, tokens to generate, priority. Returns its id. */
static uint64_t fe_add(fenv *e, int32_t prompt, int32_t max_gen, int32_t priority)
{
    ck_assert_int_lt(e->n, FE_MAX);
    fseq *q = &e->seqs[e->n];
    memset(q, 0, sizeof(*q));
    q->s.id = 100 + (uint64_t)e->n;
    q->s.arrival = (uint64_t)e->n + 1;
    q->s.priority = priority;
    q->s.state = PAGODA_SEQ_WAITING;
    q->s.n_prompt = q->s.n_tokens = prompt;
    q->s.max_total = prompt + max_gen;
    q->max_gen = max_gen;
    q->arrived = true;
    e->n++;
    if (e->ops->on_arrival) e->ops->on_arrival(e->ctx, &q->s);
    return q->s.id;
}

/* One engine step: schedule, then compute and sample what was planned. */
static void fe_step(fenv *e)
{
    pagoda_sched_seq *waiting[FE_MAX], *running[FE_MAX];
    int32_t n_wait = 0;
    for (int i = 0; i < e->n; i++)
        if (!e->seqs[i].finished && e->seqs[i].s.state == PAGODA_SEQ_WAITING) waiting[n_wait++] = &e->seqs[i].s;
    for (int i = 0; i < e->n_running; i++) running[i] = &e->running[i]->s;
    pagoda_sched_env env = {
        .struct_size = sizeof(env), .opaque = e, .waiting = waiting, .n_waiting = n_wait,
        .running = running, .n_running = e->n_running, .block_size = e->bs,
        .admit = env_admit, .grow = env_grow, .preempt = env_preempt,
        .blocks_needed = env_blocks_needed, .free_blocks = env_free, .plan = env_plan,
    };
    e->n_plan = e->n_preempted = e->n_admitted = 0;
    ck_assert_int_eq(e->ops->schedule(e->ctx, &env), PAGODA_OK);
    e->steps++;
    ck_assert_int_le(e->n_running, e->lim_seqs);
    int32_t held = 0;
    for (int i = 0; i < e->n; i++) held += e->seqs[i].blocks;
    ck_assert_int_eq(held + e->free_blocks, e->total_blocks);

    for (int i = 0; i < e->n_plan; i++) {
        fseq *q = e->plan_s[i];
        q->s.n_computed += e->plan_n[i];
        if (q->s.n_computed < q->s.n_tokens) continue;
        if (++q->n_gen >= q->max_gen) {
            q->finished = true;
            e->free_blocks += q->blocks;
            q->blocks = 0;
            fe_drop_running(e, q);
            if (e->ops->on_finish) e->ops->on_finish(e->ctx, q->s.id);
        } else {
            q->s.n_tokens++;
        }
    }
}

static int32_t planned(const fenv *e, uint64_t id)
{
    for (int i = 0; i < e->n_plan; i++)
        if (e->plan_s[i]->s.id == id) return e->plan_n[i];
    return 0;
}

static fseq *seq_of(fenv *e, uint64_t id)
{
    return fe_find(e, id);
}

/* ---------------------------------------------------------- continuous */

START_TEST(continuous_fcfs_budgets)
{
    fenv *e = fe_open("continuous", 100, 4, "max_num_seqs", "3", "max_batched_tokens", "16", NULL);
    ck_assert_int_eq(e->lim_seqs, 3);
    ck_assert_int_eq(e->lim_tokens, 16);
    uint64_t a = fe_add(e, 4, 5, 0), b = fe_add(e, 4, 5, 0), c = fe_add(e, 4, 5, 0);
    uint64_t d = fe_add(e, 4, 5, 0);
    fe_step(e);
    ck_assert_int_eq(e->n_plan, 3); /* seats */
    ck_assert_int_eq(planned(e, a), 4);
    ck_assert_int_eq(planned(e, b), 4);
    ck_assert_int_eq(planned(e, c), 4);
    ck_assert_int_eq(seq_of(e, d)->s.state, PAGODA_SEQ_WAITING);
    fe_step(e); /* decodes */
    ck_assert_int_eq(e->n_plan, 3);
    ck_assert_int_eq(planned(e, a) + planned(e, b) + planned(e, c), 3);
    fe_close(e);

    /* token budget: the second prompt gets what is left */
    e = fe_open("continuous", 100, 4, "max_batched_tokens", "16", NULL);
    ck_assert_int_eq(e->lim_seqs, 64);
    a = fe_add(e, 10, 3, 0);
    b = fe_add(e, 10, 3, 0);
    c = fe_add(e, 3, 3, 0);
    fe_step(e);
    ck_assert_int_eq(planned(e, a), 10);
    ck_assert_int_eq(planned(e, b), 6);
    ck_assert_int_eq(e->n_plan, 2); /* budget spent: c waits */
    ck_assert_int_eq(seq_of(e, c)->s.state, PAGODA_SEQ_WAITING);
    fe_step(e);
    ck_assert_int_eq(planned(e, a), 1);
    ck_assert_int_eq(planned(e, b), 4);
    ck_assert_int_eq(planned(e, c), 3);
    fe_close(e);

    /* FCFS: a big request that does not fit is not overtaken */
    e = fe_open("continuous", 10, 4, NULL);
    a = fe_add(e, 16, 20, 0); /* 4 blocks, then grows */
    fe_step(e);
    b = fe_add(e, 28, 2, 0);  /* 7 blocks: 6 free */
    c = fe_add(e, 4, 2, 0);   /* 1 block: would fit */
    fe_step(e);
    ck_assert_int_eq(planned(e, a), 1);
    ck_assert_int_eq(seq_of(e, b)->s.state, PAGODA_SEQ_WAITING);
    ck_assert_int_eq(seq_of(e, c)->s.state, PAGODA_SEQ_WAITING);
    ck_assert_int_eq(e->n_admitted, 0);
    fe_close(e);
}
END_TEST

START_TEST(continuous_chunks_long_prompt)
{
    fenv *e = fe_open("continuous", 100, 4, "max_batched_tokens", "8", NULL);
    uint64_t a = fe_add(e, 20, 2, 0);
    int32_t want[] = {8, 8, 4, 1};
    for (int i = 0; i < 4; i++) {
        fe_step(e);
        ck_assert_int_eq(planned(e, a), want[i]);
    }
    ck_assert(seq_of(e, a)->finished);
    fe_close(e);

    e = fe_open("continuous", 100, 4, "max_batched_tokens", "8", "long_prefill_token_threshold", "3", NULL);
    a = fe_add(e, 7, 1, 0);
    uint64_t b = fe_add(e, 7, 1, 0);
    fe_step(e);
    ck_assert_int_eq(planned(e, a), 3);
    ck_assert_int_eq(planned(e, b), 3);
    fe_step(e);
    ck_assert_int_eq(planned(e, a), 3);
    ck_assert_int_eq(planned(e, b), 3);
    fe_step(e);
    ck_assert_int_eq(planned(e, a), 1);
    ck_assert_int_eq(planned(e, b), 1);
    fe_close(e);
}
END_TEST

START_TEST(continuous_preempts_latest)
{
    /* 7 blocks of 4; three prompts of 8 take 6 */
    fenv *e = fe_open("continuous", 7, 4, NULL);
    uint64_t a = fe_add(e, 8, 10, 0), b = fe_add(e, 8, 10, 0), c = fe_add(e, 8, 10, 0);
    fe_step(e);
    ck_assert_int_eq(e->n_plan, 3);
    ck_assert_int_eq(e->free_blocks, 1);
    uint64_t d = fe_add(e, 1, 1, 0); /* would fit once c is gone */
    fe_step(e);
    /* a takes the free block; b cannot grow: c (latest) is preempted for it */
    ck_assert_int_eq(e->n_preempted, 1);
    ck_assert_uint_eq(e->preempted[0], c);
    ck_assert_int_eq(seq_of(e, c)->s.state, PAGODA_SEQ_WAITING);
    ck_assert_int_eq(seq_of(e, c)->s.n_computed, 0);
    ck_assert_int_eq(seq_of(e, c)->s.n_preemptions, 1);
    ck_assert_int_eq(planned(e, a), 1);
    ck_assert_int_eq(planned(e, b), 1);
    ck_assert_int_eq(e->n_plan, 2);
    /* nothing admitted in a step that preempted */
    ck_assert_int_eq(e->n_admitted, 0);
    ck_assert_int_eq(seq_of(e, d)->s.state, PAGODA_SEQ_WAITING);
    ck_assert_int_eq(e->free_blocks, 1);
    /* next step: c is back first (FCFS by arrival), d behind it */
    fe_step(e);
    ck_assert_int_eq(e->n_preempted, 0);
    ck_assert_int_eq(seq_of(e, c)->s.state, PAGODA_SEQ_WAITING); /* 3 blocks, 1 free */
    ck_assert_int_eq(seq_of(e, d)->s.state, PAGODA_SEQ_WAITING);
    fe_close(e);

    /* the latest is the sequence itself */
    e = fe_open("continuous", 3, 4, NULL);
    a = fe_add(e, 12, 5, 0);
    fe_step(e);
    ck_assert_int_eq(planned(e, a), 12);
    fe_step(e);
    ck_assert_int_eq(e->n_preempted, 1);
    ck_assert_uint_eq(e->preempted[0], a);
    ck_assert_int_eq(e->n_plan, 0);
    ck_assert_int_eq(e->n_admitted, 0);
    fe_close(e);
}
END_TEST

START_TEST(continuous_unchunked)
{
    fenv *e = fe_open("continuous", 100, 4, "max_batched_tokens", "8", "chunked_prefill", "false",
                      "engine.max_seq_len", "32", NULL);
    ck_assert_int_eq(e->lim_tokens, 32); /* room for a lone long prompt */
    uint64_t a = fe_add(e, 6, 3, 0), b = fe_add(e, 6, 1, 0);
    fe_step(e);
    ck_assert_int_eq(planned(e, a), 6);
    ck_assert_int_eq(seq_of(e, b)->s.state, PAGODA_SEQ_WAITING); /* 2 tokens left: no partial prompt */
    uint64_t c = fe_add(e, 20, 1, 0);
    fe_step(e);
    ck_assert_int_eq(planned(e, a), 1);
    ck_assert_int_eq(planned(e, b), 6);
    fe_step(e); /* a decodes; c (20 > 8) waits for a step of its own */
    ck_assert_int_eq(planned(e, a), 1);
    ck_assert_int_eq(seq_of(e, c)->s.state, PAGODA_SEQ_WAITING);
    ck_assert(seq_of(e, a)->finished);
    fe_step(e);
    ck_assert_int_eq(e->n_plan, 1);
    ck_assert_int_eq(planned(e, c), 20);
    fe_close(e);
}
END_TEST

/* --------------------------------------------------------------- static */

START_TEST(static_waits_for_batch)
{
    fenv *e = fe_open("static", 100, 4, "batch_size", "2", "max_batched_tokens", "6", NULL);
    ck_assert_int_eq(e->lim_seqs, 2);
    ck_assert_int_eq(e->lim_tokens, 6);
    uint64_t a = fe_add(e, 4, 1, 0), b = fe_add(e, 4, 4, 0), c = fe_add(e, 4, 1, 0);
    fe_step(e);
    ck_assert_int_eq(e->n_admitted, 2);
    ck_assert_int_eq(planned(e, a), 4);
    ck_assert_int_eq(planned(e, b), 2); /* prefill chunked under the budget */
    ck_assert(seq_of(e, a)->finished);
    int steps = 0;
    while (!seq_of(e, b)->finished) {
        fe_step(e);
        ck_assert_int_eq(e->n_admitted, 0); /* c waits for the whole batch */
        ck_assert_int_eq(seq_of(e, c)->s.state, PAGODA_SEQ_WAITING);
        ck_assert_int_le(++steps, 10);
    }
    fe_step(e);
    ck_assert_int_eq(planned(e, c), 4);
    ck_assert(seq_of(e, c)->finished);
    fe_close(e);
}
END_TEST

START_TEST(static_preempts_and_readmits_member)
{
    /* 5 blocks; two prompts of 8 (2 blocks each) growing to 13 tokens */
    fenv *e = fe_open("static", 5, 4, "batch_size", "2", NULL);
    uint64_t a = fe_add(e, 8, 6, 0), b = fe_add(e, 8, 6, 0);
    fe_step(e);
    uint64_t c = fe_add(e, 1, 1, 0);
    bool saw_preempt = false;
    for (int i = 0; i < 60 && !(seq_of(e, a)->finished && seq_of(e, b)->finished); i++) {
        fe_step(e);
        for (int j = 0; j < e->n_preempted; j++) {
            ck_assert_uint_eq(e->preempted[j], b); /* the latest member */
            saw_preempt = true;
        }
        if (!(seq_of(e, a)->finished && seq_of(e, b)->finished))
            ck_assert_int_eq(seq_of(e, c)->s.state, PAGODA_SEQ_WAITING);
    }
    ck_assert(saw_preempt);
    ck_assert(seq_of(e, a)->finished && seq_of(e, b)->finished);
    fe_step(e);
    ck_assert(seq_of(e, c)->finished);
    fe_close(e);
}
END_TEST

/* ------------------------------------------------------------- priority */

START_TEST(priority_orders_and_preempts)
{
    fenv *e = fe_open("priority", 100, 4, "max_num_seqs", "2", NULL);
    uint64_t a = fe_add(e, 4, 50, 5), b = fe_add(e, 4, 50, 0), c = fe_add(e, 4, 50, 5);
    fe_step(e);
    ck_assert_int_eq(e->n_admitted, 2);
    ck_assert_uint_eq(e->admitted[0], b); /* priority first */
    ck_assert_uint_eq(e->admitted[1], a); /* then arrival */
    ck_assert_int_eq(seq_of(e, c)->s.state, PAGODA_SEQ_WAITING);
    /* equal priority never preempts: c waits */
    fe_step(e);
    ck_assert_int_eq(e->n_preempted, 0);
    ck_assert_int_eq(seq_of(e, c)->s.state, PAGODA_SEQ_WAITING);
    /* a more urgent request takes a's seat (the lowest priority running) */
    uint64_t d = fe_add(e, 4, 50, -1);
    fe_step(e);
    ck_assert_int_eq(e->n_preempted, 1);
    ck_assert_uint_eq(e->preempted[0], a);
    ck_assert_int_eq(planned(e, a), 0); /* its decode was taken back */
    ck_assert_int_eq(planned(e, d), 4);
    ck_assert_int_eq(planned(e, b), 1);
    ck_assert_int_eq(seq_of(e, a)->s.n_preemptions, 1);
    /* with b (0) and d (-1) running, neither a nor c (5) gets in */
    fe_step(e);
    ck_assert_int_eq(e->n_admitted, 0);
    fe_close(e);

    /* growth: 4 blocks in all, two priority-3 prompts hold them; when both
     * need a third block, the later of equals (b) is preempted, and nothing
     * is admitted in that step, however urgent */
    e = fe_open("priority", 4, 4, NULL);
    a = fe_add(e, 8, 50, 3);
    b = fe_add(e, 8, 50, 3);
    fe_step(e);
    ck_assert_int_eq(e->free_blocks, 0);
    c = fe_add(e, 8, 1, 1);
    fe_step(e);
    ck_assert_int_eq(e->n_preempted, 1);
    ck_assert_uint_eq(e->preempted[0], b);
    ck_assert_int_eq(planned(e, a), 1);
    ck_assert_int_eq(e->n_admitted, 0);
    ck_assert_int_eq(seq_of(e, c)->s.state, PAGODA_SEQ_WAITING);
    fe_close(e);

    /* blocks at admission: pool 5; two 6-token prompts decode within their
     * 2 blocks each; an urgent 8-token prompt needs 2 blocks, 1 is free */
    e = fe_open("priority", 5, 4, NULL);
    a = fe_add(e, 6, 50, 7);
    b = fe_add(e, 6, 50, 3);
    fe_step(e);
    ck_assert_int_eq(e->free_blocks, 1);
    c = fe_add(e, 8, 2, 0);
    fe_step(e);
    /* c needs 2 blocks, 1 free: a (priority 7) goes, b (3) stays */
    ck_assert_int_eq(e->n_preempted, 1);
    ck_assert_uint_eq(e->preempted[0], a);
    ck_assert_int_eq(seq_of(e, b)->s.state, PAGODA_SEQ_RUNNING);
    ck_assert_int_eq(planned(e, c), 8);
    ck_assert_int_eq(planned(e, b), 1);
    fe_close(e);
}
END_TEST

START_TEST(priority_skips_what_never_fits)
{
    /* 4 blocks in all: the urgent 40-token prompt can never be admitted;
     * it must not hold up the rest (the engine fails it once alone) */
    fenv *e = fe_open("priority", 4, 4, NULL);
    uint64_t big = fe_add(e, 40, 1, 0), small = fe_add(e, 4, 1, 1);
    fe_step(e);
    ck_assert_int_eq(seq_of(e, big)->s.state, PAGODA_SEQ_WAITING);
    ck_assert_int_eq(planned(e, small), 4);
    fe_close(e);
}
END_TEST

/* ----------------------------------------------------------- simulation */

static void simulate(const char *name, const char *chunked, uint64_t seed)
{
    const int32_t n_req = 120;
    fenv *e = fe_open(name, 48, 4, "max_batched_tokens", "24",
                      strcmp(name, "static") == 0 ? "batch_size" : "max_num_seqs", "6",
                      strcmp(name, "static") == 0 ? NULL : "chunked_prefill", chunked,
                      "engine.max_seq_len", "64", NULL);
    tu_rng r;
    tu_rng_seed(&r, seed);
    int32_t added = 0;
    int64_t tokens = 0, idle_with_work = 0;
    for (;;) {
        /* arrivals: 0-2 per step */
        int k = (int)(tu_rng_u64(&r) % 3);
        for (int i = 0; i < k && added < n_req; i++, added++)
            fe_add(e, 1 + (int32_t)(tu_rng_u64(&r) % 40), 1 + (int32_t)(tu_rng_u64(&r) % 20),
                   (int32_t)(tu_rng_u64(&r) % 4));
        bool waiting = false;
        for (int i = 0; i < e->n; i++) waiting |= !e->seqs[i].finished && e->seqs[i].s.state == PAGODA_SEQ_WAITING;
        if (!waiting && e->n_running == 0) {
            if (added >= n_req) break;
            continue;
        }
        fe_step(e);
        for (int i = 0; i < e->n_plan; i++) tokens += e->plan_n[i];
        /* progress: something runs whenever there is work and the pool is idle */
        if (e->n_plan == 0 && e->n_running == 0) idle_with_work++;
        ck_assert_int_le(e->steps, 20000);
    }
    for (int i = 0; i < e->n; i++)
        ck_assert_msg(e->seqs[i].finished, "%s: seq %d did not finish", name, i);
    ck_assert_int_eq(e->n, n_req);
    ck_assert_int_eq(e->free_blocks, e->total_blocks);
    ck_assert_int_eq(idle_with_work, 0);
    if (getenv("SIM_VERBOSE")) fprintf(stderr, "%s chunked=%s: %lld steps, %lld preemptions, %lld tokens\n", name, chunked, (long long)e->steps, (long long)e->preemptions_total, (long long)tokens);
    ck_assert_int_gt(tokens, 0);
    fe_close(e);
}

START_TEST(simulate_continuous) { simulate("continuous", "true", 7 + (uint64_t)_i); }
END_TEST
START_TEST(simulate_continuous_unchunked) { simulate("continuous", "false", 17 + (uint64_t)_i); }
END_TEST
START_TEST(simulate_static) { simulate("static", "true", 27 + (uint64_t)_i); }
END_TEST
START_TEST(simulate_priority) { simulate("priority", "true", 37 + (uint64_t)_i); }
END_TEST

START_TEST(bad_config_refused)
{
    const char *names[] = {"continuous", "priority", "static"};
    for (int i = 0; i < 3; i++) {
        th_host h;
        th_init(&h);
        th_set(&h, "max_batched_tokens", "0");
        th_plugin pl = th_load("scheduler", names[i]);
        void *ctx = NULL;
        char err[256] = "";
        ck_assert_int_eq(pl.desc->create(&h.h, &ctx, err, sizeof(err)), PAGODA_ERR_INVALID);
        ck_assert_ptr_nonnull(strstr(err, "max_batched_tokens"));
        th_unload(&pl);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("sched_policies");
    TCase *tc = tcase_create("policies");
    tcase_add_test(tc, continuous_fcfs_budgets);
    tcase_add_test(tc, continuous_chunks_long_prompt);
    tcase_add_test(tc, continuous_preempts_latest);
    tcase_add_test(tc, continuous_unchunked);
    tcase_add_test(tc, static_waits_for_batch);
    tcase_add_test(tc, static_preempts_and_readmits_member);
    tcase_add_test(tc, priority_orders_and_preempts);
    tcase_add_test(tc, priority_skips_what_never_fits);
    tcase_add_loop_test(tc, simulate_continuous, 0, 3);
    tcase_add_loop_test(tc, simulate_continuous_unchunked, 0, 2);
    tcase_add_loop_test(tc, simulate_static, 0, 2);
    tcase_add_loop_test(tc, simulate_priority, 0, 3);
    tcase_add_test(tc, bad_config_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
