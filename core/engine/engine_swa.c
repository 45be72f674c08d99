/*
 * engine_swa.c: the sliding-window layers' own KV pool (engine_swa.h has
 * the geometry and why it suffices). The engine owns it, the KV policy
 * never sees it: seats (one per sequence holding window blocks, at most
 * max_num_seqs), a stack of free blocks, and per seat the table from a
 * sequence's logical block (position / block_size) to its window block,
 * of which only the held range lo .. hi - 1 means anything. The window
 * batch of a step is the engine's batch with these slots and tables: a
 * local layer's attention reads only positions inside its window, which
 * are always in the held range, so the other entries (0) are never read.
 * Not for: the global layers' blocks (the KV policy), choosing who runs.
 */
#include "engine_internal.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ geometry */

int pagoda_swa_geometry_compute(int32_t n_layers, int32_t n_swa_layers, int32_t window,
                                int32_t block_size, int32_t max_seq_len, int32_t max_num_seqs,
                                int32_t max_batched_tokens, int swa_kv, pagoda_swa_geometry *g,
                                char *err, size_t err_len)
{
    memset(g, 0, sizeof *g);
    g->n_global = n_layers;
    g->window_tokens = n_swa_layers > 0 ? window : 0;
    g->block_size = block_size;
    if (n_swa_layers <= 0 || window <= 0) return PAGODA_OK;
    if (swa_kv == PAGODA_SWA_KV_FULL) {
        snprintf(g->why_full, sizeof g->why_full,
                 "[engine] swa_kv = full: every layer keeps every position");
        return PAGODA_OK;
    }
    if (n_swa_layers >= n_layers) {
        snprintf(g->why_full, sizeof g->why_full,
                 "every layer slides: the local layers keep their KV in the main pool");
        return PAGODA_OK;
    }
    if (window >= max_seq_len) {
        snprintf(g->why_full, sizeof g->why_full,
                 "the window (%d tokens) is not shorter than max_seq_len (%d): the local layers "
                 "see every earlier key, so they keep it in the main pool", window, max_seq_len);
        return PAGODA_OK;
    }
    if (block_size <= 0 || max_num_seqs <= 0 || max_batched_tokens <= 0) {
        snprintf(err, err_len, "sliding-window pool: block_size %d, max_num_seqs %d and "
                 "max_batched_tokens %d must be positive", block_size, max_num_seqs,
                 max_batched_tokens);
        return PAGODA_ERR_INVALID;
    }
    int64_t S = max_num_seqs, T = max_batched_tokens, bs = block_size, W = window;
    int64_t hold = W >= 2 ? (W - 2) / bs + 2 : 1;
    int64_t step = (T + (S < T ? S : T) * (bs - 1)) / bs;
    int64_t pool = S * hold + step;
    int64_t recompute = (int64_t)n_swa_layers * (W - 1);
    int64_t sink = S * recompute < T ? S * recompute : T;
    if (pool > INT32_MAX || recompute > INT32_MAX) {
        snprintf(err, err_len, "sliding-window pool: %lld seats x %lld blocks + %lld is more than "
                 "2^31 blocks (lower max_num_seqs or raise block_size)", (long long)S,
                 (long long)hold, (long long)step);
        return PAGODA_ERR_INVALID;
    }
    g->window = true;
    g->n_local = n_swa_layers;
    g->n_global = n_layers - n_swa_layers;
    g->seats = (int32_t)S;
    g->hold_blocks = (int32_t)hold;
    g->step_blocks = (int32_t)step;
    g->pool_blocks = (int32_t)pool;
    g->recompute_tokens = (int32_t)recompute;
    g->sink_slots = (int32_t)sink;
    g->sink_blocks = (int32_t)((sink + bs - 1) / bs);
    return PAGODA_OK;
}

/* ------------------------------------------------------------ the pool */

int engine_swa_create(pagoda_engine *e, char *err, size_t err_len)
{
    engine_swa *w = &e->swa;
    const pagoda_hparams *hp = &e->model->hp;
    int st = pagoda_swa_geometry_compute(hp->n_layers, hp->n_swa_layers, hp->swa_window,
                                         e->opts.block_size, e->opts.max_seq_len,
                                         e->max_num_seqs, e->max_batched_tokens, e->opts.swa_kv,
                                         &w->g, err, err_len);
    if (st || !w->g.window) return st;
    const pagoda_swa_geometry *g = &w->g;
    int32_t bs = e->opts.block_size;
    w->max_blocks = (e->opts.max_seq_len + bs - 1) / bs;
    w->free_ids = malloc(sizeof(int32_t) * (size_t)g->pool_blocks);
    w->free_seats = malloc(sizeof(int32_t) * (size_t)g->seats);
    w->tables = calloc((size_t)g->seats * (size_t)w->max_blocks, sizeof(int32_t));
    w->lo = calloc((size_t)g->seats, sizeof(int32_t));
    w->hi = calloc((size_t)g->seats, sizeof(int32_t));
    w->slots = malloc(sizeof(int32_t) * (size_t)e->max_batched_tokens);
    w->views = malloc(sizeof(pagoda_seq_view) * (size_t)e->max_num_seqs);
    if (!w->free_ids || !w->free_seats || !w->tables || !w->lo || !w->hi || !w->slots || !w->views) {
        ERR("out of memory for the sliding-window pool's tables (%d seats x %d blocks)", g->seats,
            w->max_blocks);
        return PAGODA_ERR_NOMEM;
    }
    /* popped from the top: blocks 0, 1, 2, ... and seat 0 first */
    for (int32_t i = 0; i < g->pool_blocks; i++) w->free_ids[i] = g->pool_blocks - 1 - i;
    w->n_free = g->pool_blocks;
    for (int32_t i = 0; i < g->seats; i++) w->free_seats[i] = g->seats - 1 - i;
    w->n_free_seats = g->seats;
    w->sink_first_slot = e->policy_blocks * bs;
    return PAGODA_OK;
}

void engine_swa_destroy(pagoda_engine *e)
{
    engine_swa *w = &e->swa;
    free(w->free_ids);
    free(w->free_seats);
    free(w->tables);
    free(w->lo);
    free(w->hi);
    free(w->slots);
    free(w->views);
    memset(w, 0, sizeof *w);
}

int engine_swa_admit(pagoda_engine *e, seq *q)
{
    engine_swa *w = &e->swa;
    if (!w->g.window || q->swa_seat) return PAGODA_OK;
    if (w->n_free_seats == 0) return PAGODA_ERR_NOSPACE;
    int32_t seat = w->free_seats[--w->n_free_seats];
    w->lo[seat] = w->hi[seat] = 0;
    q->swa_seat = seat + 1;
    q->swa_shared_until = 0;
    return PAGODA_OK;
}

/* Give back the seat's blocks lo .. upto - 1 (its table entries become 0). */
static void drop_below(engine_swa *w, int32_t seat, int32_t upto)
{
    int32_t *table = w->tables + (size_t)seat * (size_t)w->max_blocks;
    while (w->lo[seat] < w->hi[seat] && w->lo[seat] < upto) {
        w->free_ids[w->n_free++] = table[w->lo[seat]];
        table[w->lo[seat]++] = 0;
    }
    /* nothing held: the range restarts where the window does */
    if (w->lo[seat] == w->hi[seat] && w->lo[seat] < upto) w->lo[seat] = w->hi[seat] = upto;
}

void engine_swa_release(pagoda_engine *e, seq *q)
{
    engine_swa *w = &e->swa;
    if (!w->g.window || !q->swa_seat) return;
    int32_t seat = q->swa_seat - 1;
    drop_below(w, seat, w->hi[seat]);
    w->lo[seat] = w->hi[seat] = 0;
    w->free_seats[w->n_free_seats++] = seat;
    q->swa_seat = 0;
    q->swa_shared_until = 0;
}

int32_t engine_swa_resume_at(pagoda_engine *e, seq *q, int32_t cached)
{
    engine_swa *w = &e->swa;
    if (!w->g.window || cached <= 0) return cached;
    q->swa_shared_until = cached;
    return cached > w->g.recompute_tokens ? cached - w->g.recompute_tokens : 0;
}

/* The first logical block a query at position p still reads. */
static int32_t window_first_block(const engine_swa *w, int32_t p)
{
    int32_t first = p - w->g.window_tokens + 1;
    return (first > 0 ? first : 0) / w->g.block_size;
}

int engine_swa_plan_entry(pagoda_engine *e, seq *q, int32_t i, int32_t start, int32_t n, int32_t t0,
                          char *err, size_t err_len)
{
    engine_swa *w = &e->swa;
    if (!w->g.window) return PAGODA_OK;
    if (!q->swa_seat) {
        ERR("internal: sequence %llu runs without a seat in the sliding-window pool",
            (unsigned long long)q->s.id);
        return PAGODA_ERR_INTERNAL;
    }
    int32_t seat = q->swa_seat - 1, bs = w->g.block_size;
    int32_t *table = w->tables + (size_t)seat * (size_t)w->max_blocks;
    /* blocks from the first one the step's first query reads to the one
     * its last token goes to */
    drop_below(w, seat, window_first_block(w, start));
    int32_t last = (start + n - 1) / bs;
    if (last >= w->max_blocks) {
        ERR("internal: sequence %llu computes position %d beyond max_seq_len %d",
            (unsigned long long)q->s.id, start + n - 1, e->opts.max_seq_len);
        return PAGODA_ERR_INTERNAL;
    }
    while (w->hi[seat] <= last) {
        if (w->n_free == 0) {
            ERR("internal: the sliding-window pool (%d blocks) ran out: its size does not hold "
                "what engine_swa.h says it does", w->g.pool_blocks);
            return PAGODA_ERR_INTERNAL;
        }
        table[w->hi[seat]++] = w->free_ids[--w->n_free];
    }
    w->views[i] = (pagoda_seq_view){.q_start = t0, .n_q = n, .ctx_len = start + n,
                                    .n_blocks = last + 1, .block_table = table};
    for (int32_t j = 0; j < n; j++) {
        int32_t pos = start + j;
        w->slots[t0 + j] = table[pos / bs] * bs + pos % bs;
        /* a prefix hit's position, recomputed for the window: its global
         * KV is in a shared block already, so the new one goes to the sink */
        if (pos < q->swa_shared_until) {
            if (w->sink_used >= w->g.sink_slots) {
                ERR("internal: the sink (%d slots) ran out", w->g.sink_slots);
                return PAGODA_ERR_INTERNAL;
            }
            e->b_slots[t0 + j] = w->sink_first_slot + w->sink_used++;
            w->sink_rows_total++;
        }
    }
    return PAGODA_OK;
}

void engine_swa_trim(pagoda_engine *e, seq *q)
{
    engine_swa *w = &e->swa;
    if (!w->g.window || !q->swa_seat) return;
    int32_t seat = q->swa_seat - 1, bs = w->g.block_size;
    drop_below(w, seat, window_first_block(w, q->s.n_computed));
    /* blocks past the computed positions held only rejected draft tokens
     * (engine_spec.c): they go back, so a sequence holds no more than
     * engine_swa.h's `hold` between steps, drafts or not */
    int32_t keep_hi = (q->s.n_computed + bs - 1) / bs;
    int32_t *table = w->tables + (size_t)seat * (size_t)w->max_blocks;
    while (w->hi[seat] > w->lo[seat] && w->hi[seat] > keep_hi) {
        w->free_ids[w->n_free++] = table[--w->hi[seat]];
        table[w->hi[seat]] = 0;
    }
}

bool engine_swa_check(pagoda_engine *e, char *why, size_t n)
{
    engine_swa *w = &e->swa;
    if (!w->g.window) return true;
    int64_t held = 0;
    int32_t seats_held = w->g.seats - w->n_free_seats;
    for (int32_t s = 0; s < w->g.seats; s++) held += w->hi[s] - w->lo[s];
    if (held + w->n_free != w->g.pool_blocks || seats_held != e->n_running ||
        (e->n_running == 0 && held != 0)) {
        snprintf(why, n, "sliding-window pool: free %d + held %lld != %d blocks, or %d seats held "
                 "for %d running sequences", w->n_free, (long long)held, w->g.pool_blocks,
                 seats_held, e->n_running);
        return false;
    }
    /* between steps a sequence holds no block past its computed positions
     * (rejected drafts' ones went back) and at most `hold` (engine_swa.h) */
    for (int32_t i = 0; i < e->n_running; i++) {
        const seq *q = e->running[i];
        if (!q->swa_seat) continue;
        int32_t s = q->swa_seat - 1, top = (q->s.n_computed + w->g.block_size - 1) / w->g.block_size;
        if (w->hi[s] > top || (q->s.n_computed > 0 && w->hi[s] - w->lo[s] > w->g.hold_blocks &&
                               q->s.n_computed >= q->s.n_prompt)) {
            snprintf(why, n, "sliding-window pool: sequence %llu holds window blocks %d .. %d "
                     "with %d positions computed (hold %d)", (unsigned long long)q->s.id,
                     w->lo[s], w->hi[s] - 1, q->s.n_computed, w->g.hold_blocks);
            return false;
        }
    }
    return true;
}

int pagoda_engine_get_swa_stats(pagoda_engine *e, pagoda_engine_swa_stats *st)
{
    engine_swa *w = &e->swa;
    memset(st, 0, sizeof *st);
    st->geometry = w->g;
    st->pool_bytes = e->fw.kv_local_bytes;
    st->main_pool_bytes = e->fw.kv_bytes;
    if (!w->g.window) return PAGODA_OK;
    st->free_seats = w->n_free_seats;
    st->free_blocks = w->n_free;
    st->used_blocks = w->g.pool_blocks - w->n_free;
    st->sink_rows_total = w->sink_rows_total;
    return PAGODA_OK;
}
