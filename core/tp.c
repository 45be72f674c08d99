/*
 * tp.c: see tp.h. A step is two broadcasts from rank 0: a fixed header
 * (what follows and how long it is), then one int32 array:
 *   tokens[T] positions[T] slots[T]
 *   per sequence: q_start n_q ctx_len n_blocks      [S x 4]
 *   the sequences' block tables, concatenated       [sum n_blocks]
 *   KV copies: src[C] dst[C]
 *   a sliding-window model's window pool (header.local): its slots[T],
 *   per sequence q_start n_q ctx_len n_blocks [S x 4], its block tables
 *   (the same tokens and sequences as the main batch; engine_swa.c)
 * Not for: what a worker computes (the engine's forward pass).
 */
#include "tp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "seqno.h"

#define ERR(...) snprintf(err, err_len, __VA_ARGS__)

enum { MSG_STEP = 1, MSG_STOP = 2 };

typedef struct step_header {
    int32_t kind;
    int32_t n_tokens, n_seqs, n_table, n_copies;
    int32_t local;          /* 1: the window pool's batch follows the copies */
    int32_t n_ltable;       /* its block tables' total */
    int32_t pad;
    uint64_t seq_no;
    uint64_t n_ints;        /* the array that follows */
} step_header;

static int tp_all_reduce(void *user, float *buf, size_t count, char *err, size_t err_len)
{
    pagoda_tp *tp = user;
    return pagoda_comm_all_reduce_f32(tp->comm, buf, count, err, err_len);
}

int pagoda_tp_new(pagoda_comm *comm, pagoda_tp **out)
{
    pagoda_tp *tp = calloc(1, sizeof *tp);
    if (!tp) return PAGODA_ERR_NOMEM;
    tp->comm = comm;
    tp->rank = comm->info.rank;
    tp->size = comm->info.size;
    tp->fwd = (pagoda_forward_tp){.rank = tp->rank, .size = tp->size, .all_reduce = tp_all_reduce,
                                  .user = tp, .device_memory = comm->info.device_memory};
    *out = tp;
    return PAGODA_OK;
}

void pagoda_tp_free(pagoda_tp *tp)
{
    if (!tp) return;
    free(tp->copy_src);
    free(tp->copy_dst);
    free(tp->msg);
    free(tp);
}

/* FNV-1a: a fingerprint, not a defence against anyone */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

uint64_t pagoda_tp_fingerprint(const pagoda_config *cfg, const gguf_file *f)
{
    uint64_t h = pagoda_config_hash(cfg);
    if (!f) return h;
    uint64_t size = f->size;
    h = fnv(h, &size, sizeof size);
    size_t head = f->data_offset < f->size ? f->data_offset : f->size;
    h = fnv(h, f->map, head);
    size_t data = f->size - head;
    for (int i = 0; i < 16 && data; i++) {
        size_t at = head + data / 16 * (size_t)i, n = f->size - at < 4096 ? f->size - at : 4096;
        h = fnv(h, f->map + at, n);
    }
    return h;
}

int pagoda_tp_agree(pagoda_tp *tp, const char *phase, int status, uint64_t fingerprint, char *err,
                    size_t err_len)
{
    uint64_t mine[2] = {(uint64_t)(int64_t)status, fingerprint};
    uint64_t *all = calloc((size_t)tp->size * 2, sizeof *all);
    if (!all) { ERR("out of memory"); return PAGODA_ERR_NOMEM; }
    char e[512] = "";
    int st = pagoda_comm_all_gather(tp->comm, mine, sizeof mine, all, e, sizeof e);
    if (st) {
        ERR("tensor parallel: %s: the ranks could not compare their state: %s", phase, e);
        free(all);
        return st;
    }
    for (int32_t r = 0; r < tp->size && !st; r++) {
        if (all[2 * r] != 0) {
            ERR("tensor parallel: %s failed on rank %d (%s; see that rank's log): every rank "
                "stops", phase, r, pagoda_status_str((int)(int64_t)all[2 * r]));
            st = PAGODA_ERR_STATE;
        } else if (all[2 * r + 1] != all[1]) {
            ERR("tensor parallel: rank %d's config and model (fingerprint %016llx) differ from "
                "rank 0's (%016llx): start every rank with the same config, --set options and "
                "model file", r, (unsigned long long)all[2 * r + 1], (unsigned long long)all[1]);
            st = PAGODA_ERR_INVALID;
        }
    }
    free(all);
    return st;
}

int pagoda_tp_record_copies(pagoda_tp *tp, const int32_t *src, const int32_t *dst, int32_t n)
{
    if (tp->n_copies + n > tp->cap_copies) {
        int32_t cap = (tp->n_copies + n) * 2;
        int32_t *s = realloc(tp->copy_src, sizeof *s * (size_t)cap);
        if (!s) return PAGODA_ERR_NOMEM;
        tp->copy_src = s;
        int32_t *d = realloc(tp->copy_dst, sizeof *d * (size_t)cap);
        if (!d) return PAGODA_ERR_NOMEM;
        tp->copy_dst = d;
        tp->cap_copies = cap;
    }
    memcpy(tp->copy_src + tp->n_copies, src, sizeof *src * (size_t)n);
    memcpy(tp->copy_dst + tp->n_copies, dst, sizeof *dst * (size_t)n);
    tp->n_copies += n;
    return PAGODA_OK;
}

static int reserve(pagoda_tp *tp, size_t n)
{
    if (n <= tp->msg_cap) return PAGODA_OK;
    int32_t *m = realloc(tp->msg, sizeof *m * n);
    if (!m) return PAGODA_ERR_NOMEM;
    tp->msg = m;
    tp->msg_cap = n;
    return PAGODA_OK;
}

/* The per-sequence views and their tables of b at sv (4 ints a
 * sequence, then the tables); the end of what was written. */
static int32_t *pack_views(const pagoda_batch *b, int32_t *sv)
{
    int32_t *tab = sv + 4 * b->n_seqs;
    for (int32_t i = 0; i < b->n_seqs; i++) {
        const pagoda_seq_view *s = &b->seqs[i];
        sv[4 * i] = s->q_start;
        sv[4 * i + 1] = s->n_q;
        sv[4 * i + 2] = s->ctx_len;
        sv[4 * i + 3] = s->n_blocks;
        memcpy(tab, s->block_table, sizeof *tab * (size_t)s->n_blocks);
        tab += s->n_blocks;
    }
    return tab;
}

/* The ints a step of this header carries. */
static uint64_t step_ints(const step_header *h)
{
    uint64_t n = 3 * (uint64_t)h->n_tokens + 4 * (uint64_t)h->n_seqs + (uint64_t)h->n_table +
                 2 * (uint64_t)h->n_copies;
    if (h->local) n += (uint64_t)h->n_tokens + 4 * (uint64_t)h->n_seqs + (uint64_t)h->n_ltable;
    return n;
}

int pagoda_tp_send_step(pagoda_tp *tp, const pagoda_batch *b, const pagoda_batch *local, char *err,
                        size_t err_len)
{
    if (local && (local->n_tokens != b->n_tokens || local->n_seqs != b->n_seqs)) {
        ERR("internal: the window pool's batch (%d tokens, %d sequences) is not the step's (%d, %d)",
            local->n_tokens, local->n_seqs, b->n_tokens, b->n_seqs);
        return PAGODA_ERR_INTERNAL;
    }
    step_header h = {.kind = MSG_STEP, .n_tokens = b->n_tokens, .n_seqs = b->n_seqs,
                     .n_copies = tp->n_copies, .local = local != NULL, .seq_no = b->seq_no};
    for (int32_t i = 0; i < b->n_seqs; i++) h.n_table += b->seqs[i].n_blocks;
    for (int32_t i = 0; local && i < local->n_seqs; i++) h.n_ltable += local->seqs[i].n_blocks;
    h.n_ints = step_ints(&h);
    if (reserve(tp, h.n_ints)) { ERR("out of memory for the step message"); return PAGODA_ERR_NOMEM; }
    int32_t *m = tp->msg, T = b->n_tokens;
    memcpy(m, b->tokens, sizeof *m * (size_t)T);
    memcpy(m + T, b->positions, sizeof *m * (size_t)T);
    memcpy(m + 2 * T, b->slots, sizeof *m * (size_t)T);
    int32_t *tab = pack_views(b, m + 3 * T);
    if (tp->n_copies) {   /* the lists are NULL until a first copy */
        memcpy(tab, tp->copy_src, sizeof *tab * (size_t)tp->n_copies);
        memcpy(tab + tp->n_copies, tp->copy_dst, sizeof *tab * (size_t)tp->n_copies);
    }
    tab += 2 * tp->n_copies;
    if (local) {
        memcpy(tab, local->slots, sizeof *tab * (size_t)T);
        pack_views(local, tab + T);
    }
    int st = pagoda_comm_broadcast(tp->comm, &h, sizeof h, 0, err, err_len);
    if (!st) st = pagoda_comm_broadcast(tp->comm, m, sizeof *m * h.n_ints, 0, err, err_len);
    if (!st) {
        tp->n_copies = 0;
        tp->steps++;
    }
    return st;
}

int pagoda_tp_send_stop(pagoda_tp *tp, char *err, size_t err_len)
{
    step_header h = {.kind = MSG_STOP};
    return pagoda_comm_broadcast(tp->comm, &h, sizeof h, 0, err, err_len);
}

/* Views of n sequences packed at sv (pack_views) into views; the end of
 * the tables, or NULL when a table runs past end. */
static const int32_t *unpack_views(const int32_t *sv, int32_t n, const int32_t *end,
                                   pagoda_seq_view *views)
{
    const int32_t *tab = sv + 4 * n;
    for (int32_t i = 0; i < n; i++) {
        int32_t nb = sv[4 * i + 3];
        if (nb < 0 || nb > end - tab) return NULL;
        views[i] = (pagoda_seq_view){.q_start = sv[4 * i], .n_q = sv[4 * i + 1],
                                     .ctx_len = sv[4 * i + 2], .n_blocks = nb, .block_table = tab};
        tab += nb;
    }
    return tab;
}

int pagoda_tp_worker_run(pagoda_tp *tp, const pagoda_tp_worker *w, char *err, size_t err_len)
{
    pagoda_seq_view *views = NULL;
    int32_t cap_views = 0;
    int st = PAGODA_OK;
    for (;;) {
        step_header h;
        if ((st = pagoda_comm_broadcast(tp->comm, &h, sizeof h, 0, err, err_len))) break;
        if (h.kind == MSG_STOP) break;
        if (h.kind != MSG_STEP || h.n_tokens < 0 || h.n_seqs < 0 || h.n_table < 0 ||
            h.n_copies < 0 || h.n_ltable < 0 || (h.local != 0 && h.local != 1) ||
            h.n_ints != step_ints(&h)) {
            ERR("tensor parallel: rank %d got a malformed step (kind %d, %d tokens): ranks out "
                "of step", tp->rank, h.kind, h.n_tokens);
            st = PAGODA_ERR_INTERNAL;
            break;
        }
        if (reserve(tp, h.n_ints ? h.n_ints : 1)) { ERR("out of memory"); st = PAGODA_ERR_NOMEM; break; }
        if ((st = pagoda_comm_broadcast(tp->comm, tp->msg, sizeof(int32_t) * h.n_ints, 0, err,
                                        err_len)))
            break;
        /* the main views, then the window pool's */
        int32_t nv = h.n_seqs * (h.local ? 2 : 1);
        if (nv > cap_views) {
            pagoda_seq_view *v = realloc(views, sizeof *v * (size_t)nv);
            if (!v) { ERR("out of memory"); st = PAGODA_ERR_NOMEM; break; }
            views = v;
            cap_views = nv;
        }
        int32_t *m = tp->msg, T = h.n_tokens;
        const int32_t *end = m + h.n_ints;
        const int32_t *tab = unpack_views(m + 3 * T, h.n_seqs, end, views);
        if (tab != m + 3 * T + 4 * h.n_seqs + h.n_table) tab = NULL;
        const int32_t *lt = tab ? tab + 2 * h.n_copies : NULL;
        if (lt && h.local && unpack_views(lt + T, h.n_seqs, end, views + h.n_seqs) != end) lt = NULL;
        if (!tab || !lt) {
            ERR("tensor parallel: rank %d got block tables longer than the step: ranks out of step",
                tp->rank);
            st = PAGODA_ERR_INTERNAL;
            break;
        }
        if (h.n_copies && (st = w->copy_blocks(w->user, tab, tab + h.n_copies, h.n_copies))) {
            ERR("tensor parallel: rank %d could not replay %d KV block copies (%s)", tp->rank,
                h.n_copies, pagoda_status_str(st));
            break;
        }
        pagoda_batch b = {.seq_no = h.seq_no, .n_tokens = T, .tokens = m, .positions = m + T,
                          .slots = m + 2 * T, .n_seqs = h.n_seqs, .seqs = views};
        /* the engine's own seq_no for the window pool's view (engine_step.c) */
        pagoda_batch lb = {.seq_no = pagoda_seqno_window(h.seq_no), .n_tokens = T, .tokens = m,
                           .positions = m + T, .slots = tab + 2 * h.n_copies, .n_seqs = h.n_seqs,
                           .seqs = views + h.n_seqs};
        if ((st = w->forward(w->user, &b, h.local ? &lb : NULL, err, err_len))) break;
        tp->steps++;
    }
    free(views);
    return st;
}
