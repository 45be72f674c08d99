/*
 * drafter_model.c: the `draft` drafter: a second, smaller GGUF of the same
 * vocabulary ([engine] spec_draft_model) run greedily k tokens ahead of
 * each sequence. It has its own forward pass and its own KV pool, cut into
 * seats of max_seq_len tokens (one contiguous run of blocks each); a
 * sequence takes a seat at its first proposal and gives it back when it
 * ends, and one that finds every seat taken proposes nothing (it decodes
 * plainly). The drafter remembers which tokens its seat's KV holds, so a
 * step only computes what changed since the last one: the tokens accepted
 * and sampled after the first rejected draft. Several sequences drafting
 * in one step are batched (propose_batch): one forward pass per draft
 * position carries one row of each, each row reading its own seat's KV.
 * Not for: verification (engine_spec.c), the n-gram drafter
 * (drafter_ngram.c).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drafter.h"
#include "forward.h"
#include "memplan.h"
#include "memplan_weights.h"
#include "model.h"
#include "seqno.h"
#include "tokenizer.h"

#define DM_CHUNK 64 /* tokens a catch-up pass computes at most */
/* Catch-up tokens a batched pass takes of a sequence: a step's usual
 * catch-up is the token sampled after the drafts it accepted (and the last
 * draft, never fed, when all agreed). A longer one (a first proposal's
 * prompt) runs alone first, in the passes it runs in when a sequence
 * drafts alone. */
#define DM_SHORT 2
#define DM_MAX_DRAFT 256 /* [engine] spec_max_draft's largest */

struct pagoda_draft_model {
    pagoda_model *m;
    pagoda_forward fw;
    bool fw_ok;
    int32_t block_size, seat_blocks, n_seats, max_seq_len, n_vocab;
    pthread_mutex_t mu;         /* seats: taken at the engine thread, freed where a sequence is */
    uint8_t *seat_busy;         /* [n_seats] */
    int32_t *table;             /* [n_seats * seat_blocks]: seat s's blocks, in order */
    int32_t max_rows;           /* rows of one pass: DM_CHUNK, or DM_SHORT a seat if more */
    int32_t *tok, *pos, *slot;  /* [max_rows] one pass's rows */
    pagoda_seq_view *views;     /* [n_seats] its sequences */
    int32_t *lrow;              /* [n_seats] the row whose logits each wants */
    /* [n_seats] a batched proposal's sequences still drafting: the state,
     * the request, the tokens each feeds next, how many, its draft limit */
    struct dm_seq **run_s;
    pagoda_draft_req **run_r;
    const int32_t **run_feed;
    int32_t *run_nfeed, *run_max;
    float *logits;              /* [n_seats * n_vocab] */
    uint64_t seq_no;
    uint64_t passes, rows;      /* forward passes run, and their rows */
    size_t kv_bytes;
};

typedef struct dm_seq {
    pagoda_draft_model *dm;
    int32_t seat;               /* -1 until the first proposal takes one */
    int32_t *done;              /* [max_total]: the tokens the seat's KV holds */
    int32_t n_done, cap;
    float margin[DM_MAX_DRAFT]; /* of the latest proposal's drafts */
} dm_seq;

/* Token strings of both vocabularies, id by id: drafts are token ids, so
 * another vocabulary would draft nonsense (never a wrong token, but no
 * speed). The first difference is named. */
static int same_vocab(const pagoda_model *a, const pagoda_model *b, char *err, size_t err_len)
{
    int32_t na = pagoda_tokenizer_n_vocab(a->tok), nb = pagoda_tokenizer_n_vocab(b->tok);
    if (na != nb || a->hp.n_vocab != b->hp.n_vocab) {
        snprintf(err, err_len, "%d tokens in its vocabulary, the model has %d", nb, na);
        return -1;
    }
    for (int32_t i = 0; i < na; i++) {
        const char *x = pagoda_tokenizer_piece(a->tok, i), *y = pagoda_tokenizer_piece(b->tok, i);
        if (!x || !y || strcmp(x, y) != 0) {
            snprintf(err, err_len, "token %d is \"%.40s\" in it and \"%.40s\" in the model", i,
                     y ? y : "", x ? x : "");
            return -1;
        }
    }
    return 0;
}

/* The draft's seats and pool blocks for a model of context n_ctx_train
 * (open and plan alike). */
static void seat_geometry(int32_t n_seats, int32_t max_seq_len, int32_t n_ctx_train, int32_t block_size,
                          int32_t *seats, int32_t *seq_len, int32_t *n_blocks)
{
    *seats = n_seats > 0 ? n_seats : 1;
    *seq_len = max_seq_len < n_ctx_train ? max_seq_len : n_ctx_train;
    *n_blocks = *seats * ((*seq_len + block_size - 1) / block_size);
}

/* Rows of one draft pass for this many seats (open and plan alike): a
 * catch-up chunk, or a batched pass's DM_SHORT rows a seat; and it keeps a
 * logit row a seat. */
static int32_t pass_rows(int32_t seats)
{
    return seats * DM_SHORT > DM_CHUNK ? seats * DM_SHORT : DM_CHUNK;
}

int pagoda_draft_model_open(const char *path, const pagoda_model *target, pagoda_backend *be,
                            int32_t n_seats, int32_t max_seq_len, int32_t block_size,
                            pagoda_draft_model **out, char *err, size_t err_len)
{
    *out = NULL;
    char why[512];
    pagoda_draft_model *dm = calloc(1, sizeof *dm);
    if (!dm) {
        snprintf(err, err_len, "out of memory for the draft model");
        return PAGODA_ERR_NOMEM;
    }
    pthread_mutex_init(&dm->mu, NULL);
    int st = PAGODA_ERR_INVALID;
    dm->m = pagoda_model_open(path, why, sizeof why);
    if (!dm->m) {
        snprintf(err, err_len, "[engine] spec_draft_model = %s: %s", path, why);
        goto fail;
    }
    if (same_vocab(target, dm->m, why, sizeof why)) {
        snprintf(err, err_len, "[engine] spec_draft_model = %s: not the model's vocabulary (%s); a "
                 "draft model must share the model's tokenizer", path, why);
        goto fail;
    }
    dm->n_vocab = dm->m->hp.n_vocab;
    dm->block_size = block_size;
    int32_t n_blocks;
    seat_geometry(n_seats, max_seq_len, dm->m->hp.n_ctx_train, block_size, &dm->n_seats,
                  &dm->max_seq_len, &n_blocks);
    dm->seat_blocks = n_blocks / dm->n_seats;
    dm->max_rows = pass_rows(dm->n_seats);
    size_t ns = (size_t)dm->n_seats, nr = (size_t)dm->max_rows;
    dm->seat_busy = calloc(ns, 1);
    dm->table = malloc(sizeof(int32_t) * (size_t)n_blocks);
    dm->logits = malloc(sizeof(float) * (size_t)dm->n_vocab * ns);
    dm->tok = malloc(sizeof(int32_t) * nr);
    dm->pos = malloc(sizeof(int32_t) * nr);
    dm->slot = malloc(sizeof(int32_t) * nr);
    dm->views = malloc(sizeof(pagoda_seq_view) * ns);
    dm->lrow = malloc(sizeof(int32_t) * ns);
    dm->run_s = malloc(sizeof(dm_seq *) * ns);
    dm->run_r = malloc(sizeof(pagoda_draft_req *) * ns);
    dm->run_feed = malloc(sizeof(int32_t *) * ns);
    dm->run_nfeed = malloc(sizeof(int32_t) * ns);
    dm->run_max = malloc(sizeof(int32_t) * ns);
    if (!dm->seat_busy || !dm->table || !dm->logits || !dm->tok || !dm->pos || !dm->slot ||
        !dm->views || !dm->lrow || !dm->run_s || !dm->run_r || !dm->run_feed || !dm->run_nfeed ||
        !dm->run_max) {
        snprintf(err, err_len, "out of memory for the draft model");
        st = PAGODA_ERR_NOMEM;
        goto fail;
    }
    for (int32_t i = 0; i < n_blocks; i++) dm->table[i] = i;
    st = pagoda_forward_init(&dm->fw, dm->m, be, dm->max_rows, dm->n_seats, n_blocks, block_size,
                             PAGODA_DTYPE_F32, why, sizeof why);
    if (st) {
        snprintf(err, err_len, "[engine] spec_draft_model = %s: %s", path, why);
        goto fail;
    }
    dm->fw_ok = true;
    dm->kv_bytes = dm->fw.kv_bytes + dm->fw.kv_local_bytes;
    dm->seq_no = 1; /* its passes, keyed apart from the engine's steps (seqno.h) */
    *out = dm;
    return PAGODA_OK;
fail:
    pagoda_draft_model_free(dm);
    return st;
}

void pagoda_draft_model_free(pagoda_draft_model *dm)
{
    if (!dm) return;
    if (dm->fw_ok) pagoda_forward_free(&dm->fw);
    if (dm->m) pagoda_model_free(dm->m);
    free(dm->seat_busy);
    free(dm->table);
    free(dm->logits);
    free(dm->tok);
    free(dm->pos);
    free(dm->slot);
    free(dm->views);
    free(dm->lrow);
    free(dm->run_s);
    free(dm->run_r);
    free(dm->run_feed);
    free(dm->run_nfeed);
    free(dm->run_max);
    pthread_mutex_destroy(&dm->mu);
    free(dm);
}

int pagoda_draft_model_plan(const char *path, int32_t n_seats, int32_t max_seq_len, int32_t block_size,
                            int (*weight_extra)(void *ctx, int dtype, int64_t N, int64_t K, uint64_t *out),
                            void *weight_extra_ctx, pagoda_draft_model_bytes *out, char *err,
                            size_t err_len)
{
    memset(out, 0, sizeof *out);
    char why[512];
    pagoda_model *m = pagoda_model_open(path, why, sizeof why);
    if (!m) {
        snprintf(err, err_len, "[engine] spec_draft_model = %s: %s", path, why);
        return PAGODA_ERR_INVALID;
    }
    int32_t n_blocks;
    seat_geometry(n_seats, max_seq_len, m->hp.n_ctx_train, block_size, &out->seats, &out->seq_len,
                  &n_blocks);
    /* the pools pagoda_forward_init makes: F32, no window pool */
    pagoda_forward_kv kv = {.n_blocks = n_blocks, .block_size = block_size, .dtype = PAGODA_DTYPE_F32};
    pagoda_kv_layout main_l, local_l;
    pagoda_forward_kv_layouts(&m->hp, &kv, &main_l, &local_l);
    out->kv = pagoda_kv_pool_bytes(&main_l) + pagoda_kv_pool_bytes(&local_l);
    /* the forward's buffers, and the host rows its logits land in */
    out->act = pagoda_forward_act_bytes(&m->hp, pass_rows(out->seats), out->seats) +
               sizeof(float) * (uint64_t)m->hp.n_vocab * (uint64_t)out->seats;
    out->weights = m->gguf->size - m->gguf->data_offset;
    if (weight_extra) {
        /* the plan's own weights walk over the draft's file, for its repacked copies alone */
        pagoda_memplan_opts o;
        pagoda_memplan_opts_default(&o);
        o.weight_extra = weight_extra;
        o.weight_extra_ctx = weight_extra_ctx;
        pagoda_memplan *wp = calloc(1, sizeof *wp);
        if (!wp) {
            pagoda_model_free(m);
            snprintf(err, err_len, "[engine] spec_draft_model = %s: out of memory", path);
            return PAGODA_ERR_NOMEM;
        }
        /* the walk reads a mixture of experts' keys under the file's architecture */
        snprintf(wp->arch, sizeof wp->arch, "%s", m->hp.arch);
        int st = pagoda_memplan_weights(m->gguf, &o, 1, wp, err, err_len);
        out->repacked = wp->repacked_bytes;
        free(wp);
        if (st) {
            pagoda_model_free(m);
            return st;
        }
    }
    pagoda_model_free(m);
    return PAGODA_OK;
}

void pagoda_draft_model_bytes_of(const pagoda_draft_model *dm, pagoda_draft_model_bytes *out)
{
    out->weights = dm->m->gguf->size - dm->m->gguf->data_offset;
    out->kv = dm->kv_bytes;
    out->act = dm->fw.act_bytes + sizeof(float) * (uint64_t)dm->n_vocab * (uint64_t)dm->n_seats;
    out->seats = dm->n_seats;
    out->seq_len = dm->max_seq_len;
}

void pagoda_draft_model_passes(const pagoda_draft_model *dm, uint64_t *passes, uint64_t *rows)
{
    *passes = dm->passes;
    *rows = dm->rows;
}

const float *pagoda_drafter_model_margins(const void *state)
{
    return ((const dm_seq *)state)->margin;
}

void pagoda_draft_model_describe(const pagoda_draft_model *dm, char *out, size_t len)
{
    snprintf(out, len, "%d layers, dim %d, %.1f MiB of weights; its KV pool %.1f MiB (%d seats of %d "
             "tokens, F32)", dm->m->hp.n_layers, dm->m->hp.dim,
             (double)(dm->m->gguf->size - dm->m->gguf->data_offset) / (1 << 20), (double)dm->kv_bytes / (1 << 20), dm->n_seats,
             dm->max_seq_len);
}

static void *dm_new(const pagoda_drafter_config *cfg, int32_t max_total)
{
    dm_seq *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->dm = cfg->draft_model;
    s->seat = -1;
    s->cap = max_total > 0 ? max_total : 1;
    s->done = malloc(sizeof(int32_t) * (size_t)s->cap);
    if (!s->dm || !s->done) {
        free(s->done);
        free(s);
        return NULL;
    }
    return s;
}

static void dm_free(void *state)
{
    dm_seq *s = state;
    if (!s) return;
    if (s->seat >= 0) {
        pthread_mutex_lock(&s->dm->mu);
        s->dm->seat_busy[s->seat] = 0;
        pthread_mutex_unlock(&s->dm->mu);
    }
    free(s->done);
    free(s);
}

/* One forward pass: sequence ss[i] computes toks[i][0 .. ns[i]) at its
 * positions from ss[i]->n_done on (appending them to what its seat holds)
 * and gets the logits of the last in dm->logits row i. The rows fit
 * (sum ns <= max_rows, m <= n_seats). Returns 0, or -1 when the pass
 * failed. */
static int dm_pass(pagoda_draft_model *dm, dm_seq *const *ss, const int32_t *const *toks,
                   const int32_t *ns, int32_t m)
{
    int32_t T = 0;
    for (int32_t i = 0; i < m; i++) {
        const dm_seq *s = ss[i];
        const int32_t *table = dm->table + (size_t)s->seat * dm->seat_blocks;
        int32_t start = s->n_done;
        for (int32_t j = 0; j < ns[i]; j++) {
            int32_t p = start + j;
            dm->tok[T + j] = toks[i][j];
            dm->pos[T + j] = p;
            dm->slot[T + j] = table[p / dm->block_size] * dm->block_size + p % dm->block_size;
        }
        dm->views[i] = (pagoda_seq_view){.q_start = T, .n_q = ns[i], .ctx_len = start + ns[i],
                                         .n_blocks = (start + ns[i] + dm->block_size - 1) / dm->block_size,
                                         .block_table = table};
        T += ns[i];
        dm->lrow[i] = T - 1;
    }
    pagoda_batch b = {.seq_no = pagoda_seqno_draft(dm->seq_no++), .n_tokens = T,
                      .tokens = dm->tok, .positions = dm->pos, .slots = dm->slot, .n_seqs = m,
                      .seqs = dm->views};
    char err[256];
    if (pagoda_forward_run(&dm->fw, &b, dm->lrow, m, dm->logits, err, sizeof err)) return -1;
    dm->passes++;
    dm->rows += (uint64_t)T;
    for (int32_t i = 0; i < m; i++) {
        dm_seq *s = ss[i];
        memcpy(s->done + s->n_done, toks[i], sizeof(int32_t) * (size_t)ns[i]);
        s->n_done += ns[i];
    }
    return 0;
}

/* s alone computes toks[0 .. n) in passes of at most DM_CHUNK; the logits
 * of the last land in dm->logits row 0. Returns 0, or -1 (no drafts). */
static int dm_feed(dm_seq *s, const int32_t *toks, int32_t n)
{
    while (n > 0) {
        int32_t T = n < DM_CHUNK ? n : DM_CHUNK;
        if (dm_pass(s->dm, &s, &toks, &T, 1)) return -1;
        toks += T;
        n -= T;
    }
    return 0;
}

/* The largest logit's index; *margin: by how much it beats the runner-up. */
static int32_t argmax(const float *x, int32_t n, float *margin)
{
    int32_t best = 0;
    float second = -INFINITY;
    for (int32_t i = 1; i < n; i++) {
        if (x[i] > x[best]) {
            second = x[best];
            best = i;
        } else if (x[i] > second) {
            second = x[i];
        }
    }
    *margin = n > 1 ? x[best] - second : INFINITY;
    return best;
}

/* r's sequence takes a seat if it has none and keeps what its seat holds
 * of r->tokens; returns the drafts it may make (r->max, less near the
 * seat's end), 0 when it makes none this step. */
static int32_t dm_start(dm_seq *s, const pagoda_draft_req *r)
{
    pagoda_draft_model *dm = s->dm;
    if (s->seat < 0) {
        pthread_mutex_lock(&dm->mu);
        for (int32_t i = 0; i < dm->n_seats && s->seat < 0; i++)
            if (!dm->seat_busy[i]) {
                dm->seat_busy[i] = 1;
                s->seat = i;
            }
        pthread_mutex_unlock(&dm->mu);
        if (s->seat < 0) return 0; /* every seat taken: this step decodes plainly */
    }
    int32_t n = r->n, max = r->max < DM_MAX_DRAFT ? r->max : DM_MAX_DRAFT;
    /* the last draft is never fed, so the seat holds n + max - 1 tokens */
    if (n + max - 1 > dm->max_seq_len) max = dm->max_seq_len - n + 1;
    if (max <= 0 || n > s->cap || n <= 0) return 0;
    /* what the seat holds and tokens share; the rest (rejected drafts) is
     * overwritten. At least the last token is fed, for its logits. */
    int32_t same = 0, lim = s->n_done < n - 1 ? s->n_done : n - 1;
    while (same < lim && s->done[same] == r->tokens[same]) same++;
    s->n_done = same;
    return max;
}

/* Takes the draft after the logits of row `row` for run i; false when the
 * run is over (its max reached, or its state full). */
static bool dm_take(pagoda_draft_model *dm, int32_t i, int32_t row)
{
    int32_t max = dm->run_max[i];
    dm_seq *s = dm->run_s[i];
    pagoda_draft_req *r = dm->run_r[i];
    r->out[r->k] = argmax(dm->logits + (size_t)row * dm->n_vocab, dm->n_vocab, &s->margin[r->k]);
    r->k++;
    if (r->k == max || r->n + r->k > s->cap) return false;
    dm->run_feed[i] = &r->out[r->k - 1];
    dm->run_nfeed[i] = 1;
    return true;
}

/* Every request's catch-up, then its drafts: one pass per draft position
 * for all the sequences still drafting, one row (two at the catch-up) of
 * each. A sequence's own rows are what it computes drafting alone; only
 * the pass's other rows differ, and a row never reads another's KV. */
static void dm_propose_batch(pagoda_draft_req *reqs, int32_t count)
{
    if (count <= 0) return;
    pagoda_draft_model *dm = ((dm_seq *)reqs[0].state)->dm;
    int32_t m = 0;
    for (int32_t i = 0; i < count; i++) {
        pagoda_draft_req *r = &reqs[i];
        dm_seq *s = r->state;
        r->k = 0;
        int32_t max = dm_start(s, r);
        if (max <= 0) continue;
        int32_t same = s->n_done, nfeed = r->n - same;
        dm->run_s[m] = s;
        dm->run_r[m] = r;
        dm->run_max[m] = max;
        if (nfeed > DM_SHORT) {
            /* a long catch-up (a first proposal's prompt): alone, in chunks */
            if (dm_feed(s, r->tokens + same, nfeed)) {
                s->n_done = 0;
                continue;
            }
            if (dm_take(dm, m, 0)) m++;
            continue;
        }
        dm->run_feed[m] = r->tokens + same;
        dm->run_nfeed[m] = nfeed;
        m++;
    }
    while (m > 0) {
        if (dm_pass(dm, dm->run_s, dm->run_feed, dm->run_nfeed, m)) {
            for (int32_t i = 0; i < m; i++) dm->run_s[i]->n_done = 0;
            return;
        }
        int32_t live = 0;
        for (int32_t i = 0; i < m; i++) {
            if (!dm_take(dm, i, i)) continue;
            dm->run_s[live] = dm->run_s[i];
            dm->run_r[live] = dm->run_r[i];
            dm->run_feed[live] = dm->run_feed[i];
            dm->run_nfeed[live] = dm->run_nfeed[i];
            dm->run_max[live] = dm->run_max[i];
            live++;
        }
        m = live;
    }
}

static int32_t dm_propose(void *state, const int32_t *tokens, int32_t n, int32_t max, int32_t *out)
{
    pagoda_draft_req r = {.state = state, .tokens = tokens, .n = n, .max = max, .out = out};
    dm_propose_batch(&r, 1);
    return r.k;
}

const pagoda_drafter_ops pagoda_drafter_model_ops = {
    .struct_size = sizeof(pagoda_drafter_ops),
    .name = "draft",
    .seq_new = dm_new,
    .seq_free = dm_free,
    .propose = dm_propose,
    .propose_batch = dm_propose_batch,
};
