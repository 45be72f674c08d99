/*
 * engine_inspect.c: what inspection sees of the engine. The engine thread
 * remembers its last PAGODA_STEP_HISTORY steps (a ring it writes after each
 * step) and, when some thread asks, takes a snapshot of its whole state at
 * the boundary between two steps: every KV block's state and references
 * (from the KV policy's inspect op, or the block tables when it has none),
 * the live sequences with their block tables, the counters and the steps.
 * The snapshot is a copy of arrays, no formatting: the asking thread turns
 * it into JSON (core/inspect.c), so the engine thread pays a memcpy's worth
 * per snapshot, and callers who ask at once share one.
 * Not for: JSON or HTTP (core/inspect.c, the frontend), the step itself
 * (engine_step.c).
 */
#include "engine_internal.h"

#include <stdlib.h>
#include <string.h>

void engine_record_step(pagoda_engine *e, uint64_t step, int32_t n_seqs, int32_t prefill,
                        int32_t decode, int32_t drafted, int32_t accepted, double seconds)
{
    pagoda_step_record *r = &e->step_ring[e->n_step_records % PAGODA_STEP_HISTORY];
    *r = (pagoda_step_record){.step = step, .n_seqs = n_seqs, .prefill_tokens = prefill,
                              .decode_tokens = decode, .draft_tokens = drafted,
                              .accepted_tokens = accepted, .ms = (float)(seconds * 1e3)};
    e->n_step_records++;
}

void pagoda_engine_snapshot_release(pagoda_engine_snapshot *s)
{
    if (!s || __atomic_sub_fetch(&s->refs_, 1, __ATOMIC_ACQ_REL) > 0) return;
    free(s->blocks);
    free(s->seqs);
    free(s->table);
    free(s);
}

static void fill_seq(pagoda_snapshot_seq *o, const seq *q)
{
    memset(o, 0, sizeof *o);
    o->id = q->s.id;
    memcpy(o->request_id, q->request_id, sizeof o->request_id);
    o->state = q->s.state;
    o->n_prompt = q->s.n_prompt;
    o->n_tokens = q->s.n_tokens;
    o->n_computed = q->s.n_computed;
    o->n_cached = q->s.state == PAGODA_SEQ_RUNNING ? q->n_cached_now : 0;
    o->max_total = q->s.max_total;
    o->n_preemptions = q->s.n_preemptions;
}

/* Without the policy's inspect op: a block in some live table is used, as
 * many times as tables list it; nothing else can be told apart from free. */
static void blocks_from_tables(pagoda_engine_snapshot *s)
{
    memset(s->blocks, 0, sizeof(*s->blocks) * (size_t)s->n_blocks);
    for (int32_t i = 0; i < s->n_seqs; i++) {
        const pagoda_snapshot_seq *q = &s->seqs[i];
        for (int32_t j = 0; j < q->n_blocks; j++) {
            int32_t b = s->table[q->first_block + j];
            if (b < 0 || b >= s->n_blocks) continue;
            s->blocks[b].state = PAGODA_KV_BLOCK_USED;
            s->blocks[b].refs++;
        }
    }
}

/* Build a snapshot. Runs on the engine thread with mu held, or on any
 * thread (mu held) while the engine thread does not run. */
static pagoda_engine_snapshot *build(pagoda_engine *e)
{
    double t0 = engine_now_s();
    pagoda_engine_snapshot *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->refs_ = 1;
    s->version = e->state_version;
    s->step = __atomic_load_n(&e->step_no, __ATOMIC_RELAXED);
    s->block_size = e->opts.block_size;
    s->n_blocks = e->opts.n_blocks;
    s->kv_block_bytes = (uint64_t)pagoda_kv_block_bytes(&e->fw.kv_layout) *
                        (uint64_t)pagoda_kv_planes(&e->fw.kv_layout) *
                        (uint64_t)e->fw.kv_layout.n_layers;
    s->kv.struct_size = sizeof s->kv;
    e->kv->ops.stats(e->kv->ctx, &s->kv);

    /* running in admission order, then waiting (taken, then still in the inbox) */
    int32_t n = e->n_running, n_tab = 0;
    for (int32_t i = 0; i < e->n_seqs; i++) n += e->seqs[i]->s.state == PAGODA_SEQ_WAITING;
    for (seq *q = e->inbox_head; q; q = q->next) n++;
    for (int32_t i = 0; i < e->n_running; i++) {
        const int32_t *t = NULL;
        int32_t nb = 0;
        if (e->kv->ops.block_table(e->kv->ctx, e->running[i]->s.id, &t, &nb) == PAGODA_OK)
            n_tab += nb;
    }
    s->blocks = malloc(sizeof(*s->blocks) * (size_t)s->n_blocks);
    s->seqs = malloc(sizeof(*s->seqs) * (size_t)(n > 0 ? n : 1));
    s->table = malloc(sizeof(int32_t) * (size_t)(n_tab > 0 ? n_tab : 1));
    if (!s->blocks || !s->seqs || !s->table) {
        pagoda_engine_snapshot_release(s);
        return NULL;
    }
    int32_t k = 0, at = 0;
    for (int32_t i = 0; i < e->n_running; i++) {
        const seq *q = e->running[i];
        pagoda_snapshot_seq *o = &s->seqs[k++];
        fill_seq(o, q);
        const int32_t *t = NULL;
        int32_t nb = 0;
        if (e->kv->ops.block_table(e->kv->ctx, q->s.id, &t, &nb) != PAGODA_OK || at + nb > n_tab)
            nb = 0;
        o->first_block = at;
        o->n_blocks = nb;
        if (nb) memcpy(s->table + at, t, sizeof(int32_t) * (size_t)nb);
        at += nb;
    }
    for (int32_t i = 0; i < e->n_seqs; i++)
        if (e->seqs[i]->s.state == PAGODA_SEQ_WAITING) fill_seq(&s->seqs[k++], e->seqs[i]);
    for (seq *q = e->inbox_head; q; q = q->next) fill_seq(&s->seqs[k++], q);
    s->n_seqs = k;
    s->running = e->n_running;
    s->waiting = k - e->n_running;

    s->blocks_from_policy = e->kv->ops.inspect &&
                            e->kv->ops.inspect(e->kv->ctx, s->blocks, s->n_blocks) == PAGODA_OK;
    if (!s->blocks_from_policy) blocks_from_tables(s);

    s->prompt_tokens_total = e->prompt_tokens_total;
    s->generation_tokens_total = e->generation_tokens_total;
    s->requests_finished_total = e->finished_total;
    s->preemptions_total = e->preemptions_total;
    uint64_t nr = e->n_step_records;
    s->n_steps = nr < PAGODA_STEP_HISTORY ? (int32_t)nr : PAGODA_STEP_HISTORY;
    for (int32_t i = 0; i < s->n_steps; i++)
        s->steps[i] = e->step_ring[(nr - (uint64_t)s->n_steps + (uint64_t)i) % PAGODA_STEP_HISTORY];

    s->t_s = engine_now_s();
    s->build_us = (s->t_s - t0) * 1e6;
    e->insp_total_s += s->t_s - t0;
    e->insp_count++;
    s->inspect_total_ms = e->insp_total_s * 1e3;
    s->inspect_count = e->insp_count;
    return s;
}

void engine_inspect_serve(pagoda_engine *e)
{
    /* out of memory: NULL, and the askers get NOMEM rather than an old state */
    pagoda_engine_snapshot_release(e->insp_last);
    e->insp_last = build(e);
    e->insp_served = e->insp_asked;
    pthread_cond_broadcast(&e->insp_cv);
}

void engine_inspect_free(pagoda_engine *e)
{
    pagoda_engine_snapshot_release(e->insp_last);
    e->insp_last = NULL;
}

int pagoda_engine_snapshot_take(pagoda_engine *e, pagoda_engine_snapshot **out)
{
    *out = NULL;
    pthread_mutex_lock(&e->mu);
    bool served = false;
    if (e->started && !e->thread_done) {
        uint64_t ticket = ++e->insp_asked;
        pthread_cond_broadcast(&e->cv);
        while (e->insp_served < ticket && !e->thread_done) pthread_cond_wait(&e->insp_cv, &e->mu);
        served = e->insp_served >= ticket;
    }
    if (!served) engine_inspect_serve(e); /* the thread does not run: nobody else touches the state */
    pagoda_engine_snapshot *s = e->insp_last;
    if (s) __atomic_add_fetch(&s->refs_, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&e->mu);
    *out = s;
    return s ? PAGODA_OK : PAGODA_ERR_NOMEM;
}
