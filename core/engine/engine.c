/*
 * engine.c: the serving loop of DESIGN.md, its outer half: the engine's
 * life (create, start, stop, free), the engine thread's loop (arrivals,
 * cancels, the drain at stop, one step, the invariant check and step hook),
 * the [any thread] views (stats, wait_idle) and the KV block copy offered
 * to KV policies. Not for: request intake (engine_submit.c), what happens
 * inside a step (engine_step.c), events and finishing (engine_events.c),
 * HTTP/JSON (frontends) or kernels (backends). engine_internal.h holds
 * what these files share.
 */
#include "engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "log.h"
#include "tp.h"

/* ------------------------------------------------------------ lifecycle */

int pagoda_engine_create(pagoda_model *m, pagoda_backend *be, pagoda_scheduler *sched,
                         pagoda_kvcache *kv, const pagoda_engine_opts *opts,
                         pagoda_engine **out, char *err, size_t err_len)
{
    *out = NULL;
    pagoda_engine *e = calloc(1, sizeof *e);
    if (!e) { ERR("out of memory"); return PAGODA_ERR_NOMEM; }
    e->model = m;
    e->be = be;
    e->sched = sched;
    e->kv = kv;
    e->opts = *opts;
    e->next_id = 1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    pthread_mutex_init(&e->pm_mu, NULL);
    pthread_mutex_init(&e->recent_mu, NULL);
    pthread_cond_init(&e->pm_cv, NULL);
    pthread_cond_init(&e->idle_cv, NULL);
    pthread_cond_init(&e->insp_cv, NULL);
    int st;
    if (e->opts.max_seq_len <= 0 || e->opts.max_seq_len > m->hp.n_ctx_train)
        e->opts.max_seq_len = m->hp.n_ctx_train;
    if (e->opts.block_size <= 0) e->opts.block_size = 16;
    if (e->opts.max_queue <= 0) e->opts.max_queue = 1024;
    if (e->opts.default_max_tokens < 0) e->opts.default_max_tokens = 0;

    st = sched->ops.limits(sched->ctx, &e->max_num_seqs, &e->max_batched_tokens);
    if (st || e->max_num_seqs <= 0 || e->max_batched_tokens <= 0) {
        ERR("scheduler %s gave no valid limits (max_num_seqs %d, max_batched_tokens %d)",
            sched->name, e->max_num_seqs, e->max_batched_tokens);
        st = PAGODA_ERR_INVALID;
        goto fail;
    }
    if (e->opts.n_blocks <= 0) {
        ERR("the KV pool has no blocks");
        st = PAGODA_ERR_INVALID;
        goto fail;
    }
    /* A sliding-window model's local layers get a pool of their own, and
     * the main pool a sink for prefix hits beyond the policy's blocks
     * (engine_swa.h); without one, every layer is in the main pool. */
    e->policy_blocks = e->opts.n_blocks;
    st = engine_swa_create(e, err, err_len);
    if (st) goto fail;
    pagoda_forward_kv fkv = {.n_blocks = e->opts.n_blocks + e->swa.g.sink_blocks,
                             .block_size = e->opts.block_size, .dtype = e->opts.kv_dtype,
                             .local_blocks = e->swa.g.pool_blocks};
    /* draft positions have logits too: rows for them (engine_spec.c) */
    st = engine_spec_create(e, err, err_len);
    if (st) goto fail;
    st = pagoda_forward_init_tp(&e->fw, m, be, e->max_batched_tokens, e->max_num_seqs + e->spec.rows,
                                &fkv, opts->tp, err, err_len);
    if (st) goto fail;
    if (m->hp.mla && e->opts.mla_decompress_min > 0) {
        int32_t ctx = e->opts.mla_decompress_ctx;
        if (e->opts.max_seq_len > 0 && ctx > e->opts.max_seq_len) ctx = e->opts.max_seq_len;
        st = pagoda_forward_mla_decompress(&e->fw, e->opts.mla_decompress_min, ctx, err, err_len);
        if (st == PAGODA_ERR_UNSUPPORTED) {
            /* an optimisation this backend cannot take (the copies' weight
             * type): the prefill stays absorbed, as with the knob at 0 */
            pagoda_log(PAGODA_LOG_WARN, "MLA prefill stays absorbed: %s", err);
            err[0] = '\0';
            st = PAGODA_OK;
        }
        if (st) goto fail;
        if (e->fw.mla.decompress_min > 0 && !e->fw.mla.read_prefix)
            pagoda_log(PAGODA_LOG_INFO, "MLA prefill: only chunks from position 0 decompress; chunks "
                       "after a cached prefix stay absorbed: %s", e->fw.mla.no_prefix_why);
    }
    st = kv->ops.init(kv->ctx, e->opts.n_blocks, e->opts.block_size, e->opts.max_seq_len);
    if (st) {
        ERR("KV policy %s refused init(%d blocks of %d)", kv->name, e->opts.n_blocks,
            e->opts.block_size);
        goto fail;
    }
    e->kv_pub.struct_size = sizeof e->kv_pub;
    kv->ops.stats(kv->ctx, &e->kv_pub);
    int32_t T = e->max_batched_tokens, S = e->max_num_seqs, V = m->hp.n_vocab;
    int32_t L = S + e->spec.rows; /* sampled rows: one a sequence, plus draft positions */
    e->b_tokens = malloc(sizeof(int32_t) * (size_t)T);
    e->b_pos = malloc(sizeof(int32_t) * (size_t)T);
    e->b_slots = malloc(sizeof(int32_t) * (size_t)T);
    e->logit_rows = malloc(sizeof(int32_t) * (size_t)L);
    e->views = malloc(sizeof(pagoda_seq_view) * (size_t)S);
    e->plan_seq = malloc(sizeof(seq *) * (size_t)S);
    e->plan_n = malloc(sizeof(int32_t) * (size_t)S);
    e->logits = malloc(sizeof(float) * (size_t)L * (size_t)V);
    e->top_ids = malloc(sizeof(int32_t) * PAGODA_MAX_TOP_LOGPROBS);
    e->top_lp = malloc(sizeof(float) * PAGODA_MAX_TOP_LOGPROBS);
    e->score_rows = malloc(sizeof(int32_t) * (size_t)T);
    e->score_index = malloc(sizeof(int32_t) * (size_t)T);
    e->score_seq = malloc(sizeof(seq *) * (size_t)T);
    if (!e->b_tokens || !e->b_pos || !e->b_slots || !e->logit_rows || !e->views ||
        !e->plan_seq || !e->plan_n || !e->logits || !e->top_ids || !e->top_lp ||
        !e->score_rows || !e->score_index || !e->score_seq) {
        ERR("out of memory for the step buffers");
        st = PAGODA_ERR_NOMEM;
        goto fail;
    }
    *out = e;
    return PAGODA_OK;
fail:
    pagoda_engine_free(e);
    return st;
}

void pagoda_engine_set_metrics(pagoda_engine *e, struct pagoda_metrics *m) { e->metrics = m; }

void pagoda_engine_set_step_hook(pagoda_engine *e, void (*hook)(void *, pagoda_engine *), void *user)
{
    e->step_hook = hook;
    e->step_user = user;
}

static void *engine_main(void *arg);

int pagoda_engine_start(pagoda_engine *e)
{
    if (e->started) return PAGODA_ERR_STATE;
    if (pthread_create(&e->thread, NULL, engine_main, e)) return PAGODA_ERR_NOMEM;
    e->started = true;
    return PAGODA_OK;
}

void pagoda_engine_stop(pagoda_engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->stopping = true;
    pthread_cond_broadcast(&e->cv);
    seq *unrun = e->started ? NULL : e->inbox_head;
    if (unrun) {
        e->inbox_head = e->inbox_tail = NULL;
        e->n_inbox = 0;
    }
    pthread_mutex_unlock(&e->mu);
    if (e->started && !e->stopped) {
        pthread_join(e->thread, NULL);
        e->stopped = true;
    }
    /* An engine that never ran still owes each request it accepted its one
     * FINAL (cancelled), and owes it now, before the runtime destroys the
     * frontend whose callback it is. */
    for (seq *q = unrun, *n; q; q = n) {
        n = q->next;
        pagoda_event ev = {.struct_size = sizeof ev, .id = q->s.id, .type = PAGODA_EVENT_FINAL,
                           .text = "", .token = -1, .finish_reason = PAGODA_FINISH_CANCELLED,
                           .position = -1};
        ev.usage.prompt_tokens = q->s.n_prompt;
        ev.timings.queue_ms = ev.timings.total_ms = (engine_now_s() - q->t_arrival) * 1e3;
        q->cb(q->user, &ev);
        engine_seq_free(q);
        pthread_mutex_lock(&e->mu);
        if (--e->n_live == 0) pthread_cond_broadcast(&e->idle_cv);
        pthread_mutex_unlock(&e->mu);
    }
}

void pagoda_engine_free(pagoda_engine *e)
{
    if (!e) return;
    pagoda_engine_stop(e);
    /* pagoda_engine_stop emptied the inbox of an engine that never ran */
    for (int i = 0; i < e->n_seqs; i++) engine_seq_free(e->seqs[i]);
    engine_constraint_shutdown(e); /* after the sequences: their prefetches are done */
    pagoda_forward_free(&e->fw);
    engine_swa_destroy(e);
    free(e->kv_fp);
    engine_spec_destroy(e);
    free(e->seqs); free(e->running); free(e->cancels);
    free(e->b_tokens); free(e->b_pos); free(e->b_slots); free(e->logit_rows);
    free(e->views); free(e->plan_seq); free(e->plan_n); free(e->logits);
    free(e->top_ids); free(e->top_lp);
    free(e->score_rows); free(e->score_index); free(e->score_seq);
    free(e->cmask); free(e->eog_ids);
    engine_inspect_free(e);
    engine_recent_free(e);
    pthread_mutex_destroy(&e->recent_mu);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->pm_mu);
    pthread_cond_destroy(&e->pm_cv);
    pthread_cond_destroy(&e->idle_cv);
    pthread_cond_destroy(&e->insp_cv);
    free(e);
}

/* ------------------------------------------------------- engine thread */

static void check_invariants(pagoda_engine *e)
{
    pagoda_kv_stats st = {.struct_size = sizeof st};
    if (e->kv->ops.stats(e->kv->ctx, &st)) return;
    bool bad = st.free_blocks + st.used_blocks + st.cached_blocks != st.total_blocks ||
               st.free_blocks < 0 || st.used_blocks < 0 || st.cached_blocks < 0;
    if (e->n_running == 0 && st.used_blocks != 0) bad = true;
    char why[256];
    bool swa_ok = engine_swa_check(e, why, sizeof why);
    if (!swa_ok) pagoda_log(PAGODA_LOG_ERROR, "KV invariant broken after step %llu: %s",
                            (unsigned long long)e->step_no, why);
    if (bad)
        pagoda_log(PAGODA_LOG_ERROR,
                   "KV invariant broken after step %llu: free %lld + used %lld + cached %lld != "
                   "total %lld (running %d)", (unsigned long long)e->step_no,
                   (long long)st.free_blocks, (long long)st.used_blocks,
                   (long long)st.cached_blocks, (long long)st.total_blocks, e->n_running);
    if (bad || !swa_ok) {
        pthread_mutex_lock(&e->mu);
        e->invariant_failures++;
        pthread_mutex_unlock(&e->mu);
    }
}

static void *engine_main(void *arg)
{
    pagoda_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        int32_t n_before = e->n_seqs;
        engine_take_inbox(e);
        if (e->n_seqs != n_before) e->state_version++;
        /* cancels: ids not live (already finished) are dropped */
        int32_t nc = e->n_cancels;
        uint64_t ids[nc > 0 ? nc : 1];
        if (nc) memcpy(ids, e->cancels, sizeof(uint64_t) * (size_t)nc);
        e->n_cancels = 0;
        bool stopping = e->stopping;
        e->n_waiting_pub = 0;
        for (int32_t i = 0; i < e->n_seqs; i++)
            e->n_waiting_pub += e->seqs[i]->s.state == PAGODA_SEQ_WAITING;
        e->n_running_pub = e->n_running;
        e->steps_pub = e->step_no;
        /* published under the lock so other threads never read a policy's
         * counters while this thread changes them */
        e->kv_pub.struct_size = sizeof e->kv_pub;
        e->kv->ops.stats(e->kv->ctx, &e->kv_pub);
        /* snapshots are taken here, where the published counts were just
         * taken too, so an inspection agrees with stats() at this moment */
        if (e->insp_asked != e->insp_served) engine_inspect_serve(e);
        if (!stopping && nc == 0 && e->n_seqs == 0) {
            pthread_cond_wait(&e->cv, &e->mu);
            continue;
        }
        pthread_mutex_unlock(&e->mu);
        e->state_version++; /* what follows changes what a snapshot would show */

        for (int32_t i = 0; i < nc; i++) {
            seq *q = engine_find_seq(e, ids[i]);
            if (q) engine_finish_and_remove(e, q, PAGODA_FINISH_CANCELLED, NULL);
        }
        if (stopping) {
            while (e->n_seqs > 0)
                engine_finish_and_remove(e, e->seqs[e->n_seqs - 1], PAGODA_FINISH_CANCELLED, NULL);
            pthread_mutex_lock(&e->mu);
            engine_take_inbox(e);
            if (e->n_seqs == 0 && !e->inbox_head) break;
            continue;
        }
        if (e->n_seqs > 0) engine_step(e);
        if (e->opts.check_invariants) check_invariants(e);
        if (e->step_hook) e->step_hook(e->step_user, e);
        pthread_mutex_lock(&e->mu);
    }
    e->n_waiting_pub = e->n_running_pub = 0;
    e->steps_pub = e->step_no;
    e->kv->ops.stats(e->kv->ctx, &e->kv_pub);
    e->thread_done = true; /* snapshots are taken by the askers from now on */
    pthread_cond_broadcast(&e->insp_cv);
    pthread_cond_broadcast(&e->idle_cv);
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---------------------------------------------------------------- views */

void pagoda_engine_wait_idle(pagoda_engine *e)
{
    pthread_mutex_lock(&e->mu);
    while (e->n_live > 0 && !(e->stopped))
        pthread_cond_wait(&e->idle_cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

uint64_t pagoda_engine_extra_held_bytes(pagoda_engine *e)
{
    pthread_mutex_lock(&e->mu);
    uint64_t b = e->extra_held_pub;
    pthread_mutex_unlock(&e->mu);
    return b;
}

int pagoda_engine_kv_stats(pagoda_engine *e, pagoda_kv_stats *st)
{
    memset(st, 0, sizeof *st);
    st->struct_size = sizeof *st;
    return e->kv->ops.stats(e->kv->ctx, st);
}

void pagoda_engine_get_stats(pagoda_engine *e, pagoda_engine_stats *st)
{
    memset(st, 0, sizeof *st);
    st->struct_size = sizeof *st;
    pthread_mutex_lock(&e->mu);
    pagoda_kv_stats kv = e->kv_pub;
    st->running = e->n_running_pub;
    st->waiting = e->n_waiting_pub + e->n_inbox;
    st->prompt_tokens_total = e->prompt_tokens_total;
    st->generation_tokens_total = e->generation_tokens_total;
    st->requests_finished_total = e->finished_total;
    st->preemptions_total = e->preemptions_total;
    st->spec_drafted_total = e->spec.drafted_total;
    st->spec_accepted_total = e->spec.accepted_total;
    st->spec_verify_steps_total = e->spec.verify_steps_total;
    /* as of the step boundary the counts were published at, so that every
     * gauge here (and in an inspection snapshot) describes one moment */
    st->steps_total = (int64_t)e->steps_pub;
    st->ready = e->started && !e->stopping;
    pthread_mutex_unlock(&e->mu);
    st->kv_total_blocks = kv.total_blocks;
    st->kv_used_blocks = kv.used_blocks;
    st->kv_free_blocks = kv.free_blocks;
    st->kv_cached_blocks = kv.cached_blocks;
    st->kv_block_size = e->opts.block_size;
    st->prefix_query_tokens = kv.query_tokens;
    st->prefix_hit_tokens = kv.hit_tokens;
    st->tier_on = kv.tier_on;
    st->tier_hit_tokens = kv.tier_hit_tokens;
    st->tier_blocks = kv.tier_blocks;
    st->tier_bytes = kv.tier_bytes;
    st->tier_written_blocks = kv.tier_written_blocks;
    st->tier_dropped_blocks = kv.tier_dropped_blocks;
    st->tier_bad_blocks = kv.tier_bad_blocks;
    st->tier_evicted_blocks = kv.tier_evicted_blocks;
    st->tier_prefetched_blocks = kv.tier_prefetched_blocks;
    st->tier_prefetch_hit_blocks = kv.tier_prefetch_hit_blocks;
    st->tier_ram_blocks = kv.tier_ram_blocks;
    st->tier_ram_bytes = kv.tier_ram_bytes;
    st->tier_ram_hit_blocks = kv.tier_ram_hit_blocks;
    st->tier_restore_us = kv.tier_restore_us;
    if (e->spec.drafter) snprintf(st->spec_drafter, sizeof st->spec_drafter, "%s", e->spec.drafter->name);
}

void pagoda_engine_set_check_invariants(pagoda_engine *e, bool on) { e->opts.check_invariants = on; }
int64_t pagoda_engine_invariant_failures(const pagoda_engine *e) { return e->invariant_failures; }
const pagoda_model *pagoda_engine_model(const pagoda_engine *e) { return e->model; }
const pagoda_engine_opts *pagoda_engine_get_opts(const pagoda_engine *e) { return &e->opts; }

static int copy_blocks_here(pagoda_engine *e, const int32_t *src, const int32_t *dst, int32_t n);

int pagoda_engine_copy_blocks(pagoda_engine *e, const int32_t *src, const int32_t *dst, int32_t n)
{
    int st = copy_blocks_here(e, src, dst, n);
    /* the other ranks hold their KV heads of the same blocks: they copy
     * before the next step */
    if (!st && e->tp) st = pagoda_tp_record_copies(e->tp, src, dst, n);
    return st;
}

void pagoda_engine_set_tp(pagoda_engine *e, struct pagoda_tp *tp) { e->tp = tp; }

static int worker_copy(void *user, const int32_t *src, const int32_t *dst, int32_t n)
{
    return copy_blocks_here(user, src, dst, n);
}

static int worker_forward(void *user, const pagoda_batch *b, const pagoda_batch *local, char *err,
                          size_t err_len)
{
    pagoda_engine *e = user;
    if (b->n_tokens > e->fw.max_tokens) {
        ERR("tensor parallel: a step of %d tokens is more than this rank's %d: ranks started "
            "with different limits", b->n_tokens, e->fw.max_tokens);
        return PAGODA_ERR_INVALID;
    }
    /* the logits are rank 0's (the output head is replicated): none here */
    return pagoda_forward_run_scan(&e->fw, b, local, NULL, 0, NULL, NULL, err, err_len);
}

int pagoda_engine_tp_worker(pagoda_engine *e, struct pagoda_tp *tp, char *err, size_t err_len)
{
    pagoda_tp_worker w = {.user = e, .copy_blocks = worker_copy, .forward = worker_forward};
    return pagoda_tp_worker_run(tp, &w, err, err_len);
}

size_t pagoda_engine_kv_block_bytes(pagoda_engine *e, char *why, size_t why_len)
{
    if (e->tp) {
        snprintf(why, why_len, "KV blocks cannot leave the pool under tensor parallelism "
                 "(each rank holds its own heads of a block)");
        return 0;
    }
    if (e->swa.g.window) {
        snprintf(why, why_len, "KV blocks of a sliding-window model cannot leave the pool "
                 "(its local layers live in a pool of their own)");
        return 0;
    }
    return (size_t)e->fw.kv_layout.n_layers * 2 * pagoda_kv_block_bytes(&e->fw.kv_layout);
}

bool pagoda_engine_kv_on_device(const pagoda_engine *e) { return !e->be->info.host_memory; }

int pagoda_engine_kv_move_block(pagoda_engine *e, int32_t block, void *dst, const void *src,
                                size_t n)
{
    char why[256];
    size_t need = pagoda_engine_kv_block_bytes(e, why, sizeof why);
    if (!need || n != need || block < 0 || block >= e->policy_blocks || (!dst == !src))
        return PAGODA_ERR_INVALID;
    pagoda_backend *be = e->be;
    size_t bb = pagoda_kv_block_bytes(&e->fw.kv_layout);
    int st = PAGODA_OK;
    for (int l = 0; l < e->fw.kv_layout.n_layers && !st; l++)
        for (int kv = 0; kv < 2 && !st; kv++) {
            size_t off = pagoda_kv_offset(&e->fw.kv_layout, l, kv, block);
            size_t at = ((size_t)l * 2 + (size_t)kv) * bb;
            st = dst ? be->ops.download(be->ctx, e->fw.kv, off, (char *)dst + at, bb)
                     : be->ops.upload(be->ctx, e->fw.kv, off, (const char *)src + at, bb);
        }
    return st;
}

/* XXH3 of the GGUF header (metadata and tensor table) and of 64 chunks of
 * 4 KiB spread over the tensor data: files of one shape written from other
 * weights (another seed, a fine-tune) differ here. */
static uint64_t model_file_hash(const gguf_file *g)
{
    XXH3_state_t *s = XXH3_createState();
    if (!s) return 0;
    XXH3_64bits_reset(s);
    size_t head = g->data_offset < g->size ? (size_t)g->data_offset : g->size;
    XXH3_64bits_update(s, g->map, head);
    size_t data = g->size - head, chunk = 4096;
    for (int i = 0; i < 64 && data; i++) {
        size_t at = head + (size_t)((double)i / 64.0 * (double)data);
        size_t len = g->size - at < chunk ? g->size - at : chunk;
        XXH3_64bits_update(s, g->map + at, len);
    }
    uint64_t h = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    return h;
}

const char *pagoda_engine_kv_fingerprint(pagoda_engine *e)
{
    if (e->kv_fp) return e->kv_fp;
    const gguf_file *g = e->model->gguf;
    const pagoda_kv_layout *L = &e->fw.kv_layout;
    char buf[512];
    snprintf(buf, sizeof buf,
             "pagoda-kv 1 model_size=%zu model_hash=%016llx arch=%s kv_dtype=%s layers=%d "
             "kv_heads=%d head_dim=%d block_size=%d",
             g->size, (unsigned long long)model_file_hash(g), e->model->hp.arch,
             pagoda_dtype_name(L->dtype), L->n_layers, L->n_kv_heads, L->head_dim,
             L->block_size);
    e->kv_fp = strdup(buf);
    return e->kv_fp;
}

static int copy_blocks_here(pagoda_engine *e, const int32_t *src, const int32_t *dst, int32_t n)
{
    pagoda_backend *be = e->be;
    if (be->ops.copy_blocks) return be->ops.copy_blocks(be->ctx, e->fw.kv, &e->fw.kv_layout, src, dst, n);
    /* fallback: through host memory, block by block, K and V (a latent
     * layout's one row) of every layer */
    size_t bb = pagoda_kv_block_bytes(&e->fw.kv_layout);
    void *tmp = malloc(bb);
    if (!tmp) return PAGODA_ERR_NOMEM;
    int st = PAGODA_OK;
    for (int32_t i = 0; i < n && !st; i++)
        for (int l = 0; l < e->fw.kv_layout.n_layers && !st; l++)
            for (int kv = 0; kv < pagoda_kv_planes(&e->fw.kv_layout) && !st; kv++) {
                st = be->ops.download(be->ctx, e->fw.kv, pagoda_kv_offset(&e->fw.kv_layout, l, kv, src[i]), tmp, bb);
                if (!st) st = be->ops.upload(be->ctx, e->fw.kv, pagoda_kv_offset(&e->fw.kv_layout, l, kv, dst[i]), tmp, bb);
            }
    free(tmp);
    return st;
}
