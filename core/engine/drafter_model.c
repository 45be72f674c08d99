/*
 * drafter_model.c: the `draft` drafter: a second, smaller GGUF of the same
 * vocabulary ([engine] spec_draft_model) run greedily k tokens ahead of
 * each sequence. It has its own forward pass and its own KV pool, cut into
 * seats of max_seq_len tokens (one contiguous run of blocks each); a
 * sequence takes a seat at its first proposal and gives it back when it
 * ends, and one that finds every seat taken proposes nothing (it decodes
 * plainly). The drafter remembers which tokens its seat's KV holds, so a
 * step only computes what changed since the last one: the tokens accepted
 * and sampled after the first rejected draft.
 * Not for: verification (engine_spec.c), the n-gram drafter
 * (drafter_ngram.c).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drafter.h"
#include "forward.h"
#include "model.h"
#include "tokenizer.h"

#define DM_CHUNK 64 /* tokens a catch-up pass computes at most */

struct pagoda_draft_model {
    pagoda_model *m;
    pagoda_forward fw;
    bool fw_ok;
    int32_t block_size, seat_blocks, n_seats, max_seq_len, n_vocab;
    pthread_mutex_t mu;         /* seats: taken at the engine thread, freed where a sequence is */
    uint8_t *seat_busy;         /* [n_seats] */
    int32_t *table;             /* [n_seats * seat_blocks]: seat s's blocks, in order */
    int32_t tok[DM_CHUNK], pos[DM_CHUNK], slot[DM_CHUNK];
    float *logits;              /* [n_vocab] */
    uint64_t seq_no;
    size_t kv_bytes;
};

typedef struct dm_seq {
    pagoda_draft_model *dm;
    int32_t seat;               /* -1 until the first proposal takes one */
    int32_t *done;              /* [max_total]: the tokens the seat's KV holds */
    int32_t n_done, cap;
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
    dm->seat_busy = calloc((size_t)dm->n_seats, 1);
    dm->table = malloc(sizeof(int32_t) * (size_t)n_blocks);
    dm->logits = malloc(sizeof(float) * (size_t)dm->n_vocab);
    if (!dm->seat_busy || !dm->table || !dm->logits) {
        snprintf(err, err_len, "out of memory for the draft model");
        st = PAGODA_ERR_NOMEM;
        goto fail;
    }
    for (int32_t i = 0; i < n_blocks; i++) dm->table[i] = i;
    st = pagoda_forward_init(&dm->fw, dm->m, be, DM_CHUNK, 1, n_blocks, block_size, PAGODA_DTYPE_F32,
                             why, sizeof why);
    if (st) {
        snprintf(err, err_len, "[engine] spec_draft_model = %s: %s", path, why);
        goto fail;
    }
    dm->fw_ok = true;
    dm->kv_bytes = dm->fw.kv_bytes + dm->fw.kv_local_bytes;
    dm->seq_no = 1ull << 62; /* apart from the engine's steps (a backend may key caches on it) */
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
    pthread_mutex_destroy(&dm->mu);
    free(dm);
}

int pagoda_draft_model_plan(const char *path, int32_t n_seats, int32_t max_seq_len, int32_t block_size,
                            pagoda_draft_model_bytes *out, char *err, size_t err_len)
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
    out->act = pagoda_forward_act_bytes(&m->hp, DM_CHUNK, 1);
    out->weights = m->gguf->size - m->gguf->data_offset;
    pagoda_model_free(m);
    return PAGODA_OK;
}

void pagoda_draft_model_bytes_of(const pagoda_draft_model *dm, pagoda_draft_model_bytes *out)
{
    out->weights = dm->m->gguf->size - dm->m->gguf->data_offset;
    out->kv = dm->kv_bytes;
    out->act = dm->fw.act_bytes;
    out->seats = dm->n_seats;
    out->seq_len = dm->max_seq_len;
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

/* Computes toks[0 .. n) at positions from s->n_done on (appending them to
 * what the seat holds); the logits of the last one land in dm->logits.
 * Returns 0, or -1 when the pass failed (no drafts then). */
static int dm_feed(dm_seq *s, const int32_t *toks, int32_t n)
{
    pagoda_draft_model *dm = s->dm;
    const int32_t *table = dm->table + (size_t)s->seat * dm->seat_blocks;
    char err[256];
    while (n > 0) {
        int32_t T = n < DM_CHUNK ? n : DM_CHUNK, start = s->n_done;
        for (int32_t j = 0; j < T; j++) {
            int32_t p = start + j;
            dm->tok[j] = toks[j];
            dm->pos[j] = p;
            dm->slot[j] = table[p / dm->block_size] * dm->block_size + p % dm->block_size;
        }
        pagoda_seq_view v = {.q_start = 0, .n_q = T, .ctx_len = start + T,
                             .n_blocks = (start + T + dm->block_size - 1) / dm->block_size,
                             .block_table = table};
        pagoda_batch b = {.seq_no = dm->seq_no++, .n_tokens = T, .tokens = dm->tok,
                          .positions = dm->pos, .slots = dm->slot, .n_seqs = 1, .seqs = &v};
        int32_t row = T - 1;
        if (pagoda_forward_run(&dm->fw, &b, &row, 1, dm->logits, err, sizeof err)) return -1;
        memcpy(s->done + start, toks, sizeof(int32_t) * (size_t)T);
        s->n_done += T;
        toks += T;
        n -= T;
    }
    return 0;
}

static int32_t argmax(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static int32_t dm_propose(void *state, const int32_t *tokens, int32_t n, int32_t max, int32_t *out)
{
    dm_seq *s = state;
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
    /* the last draft is never fed, so the seat holds n + max - 1 tokens */
    if (n + max - 1 > dm->max_seq_len) max = dm->max_seq_len - n + 1;
    if (max <= 0 || n > s->cap) return 0;
    /* what the seat holds and tokens share; the rest (rejected drafts) is
     * overwritten. At least the last token is fed, for its logits. */
    int32_t same = 0, lim = s->n_done < n - 1 ? s->n_done : n - 1;
    while (same < lim && s->done[same] == tokens[same]) same++;
    s->n_done = same;
    if (dm_feed(s, tokens + same, n - same)) {
        s->n_done = 0;
        return 0;
    }
    int32_t k = 0;
    for (;;) {
        out[k] = argmax(dm->logits, dm->n_vocab);
        if (++k == max || n + k > s->cap) break;
        if (dm_feed(s, &out[k - 1], 1)) {
            s->n_done = 0;
            break;
        }
    }
    return k;
}

const pagoda_drafter_ops pagoda_drafter_model_ops = {
    .struct_size = sizeof(pagoda_drafter_ops),
    .name = "draft",
    .seq_new = dm_new,
    .seq_free = dm_free,
    .propose = dm_propose,
};
