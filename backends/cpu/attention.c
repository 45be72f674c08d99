/*
 * attention.c: causal attention over a paged KV cache for a flattened
 * batch: each sequence reads its own block table; prefill chunks and single
 * decode tokens mix in one call. Online softmax (one pass over the keys,
 * rescaling the running sum when the max grows), keys taken a chunk at a
 * time so the rescale and exp are per chunk. Work items are (sequence,
 * query chunk, group of heads), handed out through an atomic counter
 * because their sizes differ by orders of magnitude (a 512-token prefill
 * next to decodes). Within an item the keys are the outer loop and the
 * group's heads the inner one: a block holds every head's row of a slot
 * side by side, so a chunk of keys is read once, contiguously, for all
 * heads, where a head at a time read 128 of every 1536 bytes and came back
 * for the rest later (at 16 sequences x 144 tokens that was 25% of a
 * decode step on 110M Q4_0, the KV streaming from DRAM once per head).
 * Sliding-window layers (Gemma 3's local layers) pass a window: a query
 * starts at the first key inside it, so the blocks before are never read;
 * that one line in attn_worker is the whole window check.
 * A decode row (a sequence with one query) over a long context has its
 * keys cut into splits (flash-decoding): each item is one split with every
 * head, the splits' partial softmax sums (max, sum, unnormalized output)
 * are merged after the pool run. Without them one decoding sequence could
 * only spread over threads by heads, and an item holding one or two heads
 * reads one or two heads' bytes out of each slot: 128 of 1536 bytes for
 * F16, 68 of 816 straddling two cache lines for Q8_0, so the 8-bit cache
 * read as many lines as F16. With all heads an item reads whole slots.
 * How many splits depends on the row's own context length only, so a row's
 * arithmetic does not depend on what else the batch holds.
 * Attention sinks (gpt-oss, ABI 1.8): a per-head logit that joins each
 * softmax's denominator only; added where a row's sums are normalized (the
 * end of attend_row, or merge_row for a split row), never per key.
 * KV types: F32 and F16 rows, Q8_0 blocks (vecdot.h scores_q8_0 /
 * accum_q8_0); the layout's helpers give every byte offset.
 * Not for: writing the cache (ops.c kv_write).
 */
#include "kernels.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_features.h"
#include "vecdot.h"

#define Q_CHUNK 16       /* query rows per work item */
#define KEY_CHUNK 64     /* keys scored before one softmax rescale */
#define MAX_HEAD_DIM 1024
#ifndef KV_PREFETCH_BLOCKS
#define KV_PREFETCH_BLOCKS 2
#endif
/* Running sums of one item's heads live on the worker's stack. */
#define MAX_GROUP_FLOATS 8192
/* A decode row's keys per split, and the most splits (a 2048-token
 * context: 8 splits of 256 keys, every head in each). */
#define SPLIT_KEYS 256
#define MAX_SPLITS 8
/* The tile path (attend_tile): head_dim up to this, and the floats of
 * its key / value scratch (64 keys of 128 values; fewer keys a chunk for
 * wider heads). */
#define TILE_MAX_HD 256
#define TILE_KV_FLOATS 8192
_Static_assert(Q_CHUNK == PAGODA_ATTN_TILE_Q, "a full query chunk is one tile");

typedef struct attn_task {
    const pagoda_vecdot_table *vt;
    bool tile;                   /* full query chunks through vt->attn_f16_tile */
    const float *q;
    size_t q_stride;
    const uint8_t *pool;
    const pagoda_kv_layout *L;
    int layer;
    const pagoda_batch *b;
    int n_heads;
    float scale;
    int32_t window;              /* 0, or the sliding window (keys p - window < j <= p) */
    const float *sinks;          /* [n_heads] sink logits, or NULL */
    float *out;
    size_t out_stride;
    const int32_t *unit_start;   /* [n_seqs + 1] prefix sums of (query chunk, split) units */
    const int32_t *n_splits;     /* [n_seqs] key splits of its rows (> 1: one decode row) */
    const int32_t *part_start;   /* [n_seqs] its first partial slot in `part` (split rows) */
    float *part;                 /* per split and head: m, l, acc[head_dim] */
    int group;                   /* heads per item */
    int n_groups;                /* items per unit */
    int64_t n_items;
    atomic_llong next;
} attn_task;

/* Splits of a row with n_keys keys to read (decode rows only); one when
 * batch-invariant (bi): a decode row's keys in one pass, as a row of a
 * longer batch reads them (cpu_features.h). bi is read once per call by
 * the caller, since the scratch is sized from the same answers. */
static int32_t splits_of(int32_t n_q, int32_t n_keys, bool bi)
{
    if (n_q != 1 || bi) return 1;
    int32_t s = n_keys / SPLIT_KEYS;
    return s < 1 ? 1 : s > MAX_SPLITS ? MAX_SPLITS : s;
}

static int32_t first_key(int32_t window, int32_t pos)
{
    /* the window check, all of it: key j is seen iff pos - j < window */
    return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

/* Prefetch the K and V rows of heads [h0, h1) in block number bi of the
 * sequence (if it holds any of the first n_keys keys). */
static void prefetch_block(const attn_task *a, const pagoda_seq_view *sv, int32_t bi, int32_t n_keys,
                           int h0, int h1)
{
    const pagoda_kv_layout *L = a->L;
    int32_t k0 = bi * L->block_size;
    if (k0 >= n_keys) return;
    int32_t ns = n_keys - k0 < L->block_size ? n_keys - k0 : L->block_size;
    int per_kv = a->n_heads / L->n_kv_heads;
    size_t head_bytes = pagoda_kv_head_bytes(L), slot_bytes = pagoda_kv_slot_bytes(L);
    size_t lo = (size_t)(h0 / per_kv) * head_bytes, hi = (size_t)((h1 - 1) / per_kv + 1) * head_bytes;
    int32_t blk = sv->block_table[bi];
    const uint8_t *nk = a->pool + pagoda_kv_offset(L, a->layer, 0, blk);
    /* a latent layout's value is the key's row */
    const uint8_t *nv = a->pool + pagoda_kv_offset(L, a->layer, pagoda_kv_planes(L) - 1, blk);
    for (int32_t sl = 0; sl < ns; sl++)
        for (size_t off = lo; off < hi; off += 64) {
            __builtin_prefetch(nk + (size_t)sl * slot_bytes + off);
            __builtin_prefetch(nv + (size_t)sl * slot_bytes + off);
        }
}

/* The factor that turns a head's running sums (max m, sum l of e^(s - m),
 * acc of e^(s - m) v) into its output: 1 / l, or with a sink logit s0
 * 1 / (l + e^(s0 - m)), computed as e^(m - M) / (l e^(m - M) + e^(s0 - M))
 * with M = max(m, s0) so a sink far above the scores cannot overflow. */
static float normalizer(const attn_task *a, int head, float m, float l)
{
    if (!a->sinks) return l > 0.0f ? 1.0f / l : 0.0f;
    if (m == -INFINITY) return 0.0f;   /* no key: acc is 0 */
    float s0 = a->sinks[head], M = m > s0 ? m : s0, em = expf(m - M);
    return em / (l * em + expf(s0 - M));
}

/* Query row qrow for heads [h0, h1) over keys first .. n_keys - 1 (first
 * > 0 on a sliding-window layer: the keys before it, whole blocks of them
 * included, are never read). part == NULL: the normalized output goes to
 * the row of out; else per head (m, l, acc[head_dim]) to part, for the
 * merge of a split row. */
static void attend_row(const attn_task *a, const pagoda_seq_view *sv, int h0, int h1, int64_t qrow,
                       int32_t first, int32_t n_keys, float *part)
{
    const pagoda_kv_layout *L = a->L;
    const pagoda_vecdot_table *vt = a->vt;
    int hd = L->head_dim, ng = h1 - h0;
    int per_kv = a->n_heads / L->n_kv_heads;
    size_t head_bytes = pagoda_kv_head_bytes(L), slot_bytes = pagoda_kv_slot_bytes(L);
    const float *q = (const float *)((const uint8_t *)a->q + qrow * a->q_stride);
    float *o = (float *)((uint8_t *)a->out + qrow * a->out_stride);
    float acc[MAX_GROUP_FLOATS];
    float m[MAX_GROUP_FLOATS / 8], l[MAX_GROUP_FLOATS / 8];
    float sc[KEY_CHUNK];
    for (int i = 0; i < ng * hd; i++) acc[i] = 0.0f;
    for (int h = 0; h < ng; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
    }

    for (int32_t j0 = first; j0 < n_keys;) {
        int32_t blk = sv->block_table[j0 / L->block_size];
        int32_t s0 = j0 % L->block_size;
        int32_t cnt = L->block_size - s0;
        if (cnt > n_keys - j0) cnt = n_keys - j0;
        if (cnt > KEY_CHUNK) cnt = KEY_CHUNK;
        const uint8_t *kb0 = a->pool + pagoda_kv_offset(L, a->layer, 0, blk) + (size_t)s0 * slot_bytes;
        const uint8_t *vb0 = a->pool + pagoda_kv_offset(L, a->layer, pagoda_kv_planes(L) - 1, blk) +
                             (size_t)s0 * slot_bytes;
        /* The blocks ahead are elsewhere in the pool (paged): ask for the
         * group's rows of the one KV_PREFETCH_BLOCKS ahead now, while this
         * one is computed, instead of waiting for DRAM when it starts
         * (16 sequences x 144 tokens, 110M Q4_0: decode step 34 -> 27 ms). */
        if (s0 == 0 || j0 == first) {
            int32_t from = j0 == first ? 1 : KV_PREFETCH_BLOCKS;
            for (int32_t ahead = from; ahead <= KV_PREFETCH_BLOCKS; ahead++)
                prefetch_block(a, sv, j0 / L->block_size + ahead, n_keys, h0, h1);
        }
        for (int h = 0; h < ng; h++) {
            int head = h0 + h, kvh = head / per_kv;
            const uint8_t *kb = kb0 + (size_t)kvh * head_bytes, *vb = vb0 + (size_t)kvh * head_bytes;
            const float *qh = q + (size_t)head * hd;
            float *ah = acc + (size_t)h * hd;
            float cm = -INFINITY;
            if (L->dtype == PAGODA_DTYPE_F32) {
                for (int32_t j = 0; j < cnt; j++)
                    sc[j] = vt->dot_f32((const float *)(kb + (size_t)j * slot_bytes), qh, hd) * a->scale;
            } else if (L->dtype == PAGODA_DTYPE_Q8_0) {
                vt->scores_q8_0(kb, slot_bytes, cnt, qh, hd, a->scale, sc);
            } else {
                vt->scores_f16((const uint16_t *)kb, slot_bytes, cnt, qh, hd, a->scale, sc);
            }
            for (int32_t j = 0; j < cnt; j++)
                if (sc[j] > cm) cm = sc[j];
            float nm = cm > m[h] ? cm : m[h];
            float alpha = m[h] == -INFINITY ? 0.0f : expf(m[h] - nm);
            float lh = l[h] * alpha;
            /* sc becomes the weights p. */
            for (int32_t j = 0; j < cnt; j++) {
                sc[j] = expf(sc[j] - nm);
                lh += sc[j];
            }
            if (L->dtype == PAGODA_DTYPE_F32) {
                for (int32_t j = 0; j < cnt; j++)
                    vt->axpy_f32(ah, j == 0 ? alpha : 1.0f, sc[j],
                                 (const float *)(vb + (size_t)j * slot_bytes), hd);
            } else if (L->dtype == PAGODA_DTYPE_Q8_0) {
                vt->accum_q8_0(ah, alpha, sc, vb, slot_bytes, cnt, hd);
            } else {
                vt->accum_f16(ah, alpha, sc, (const uint16_t *)vb, slot_bytes, cnt, hd);
            }
            m[h] = nm;
            l[h] = lh;
        }
        j0 += cnt;
    }
    for (int h = 0; h < ng; h++) {
        const float *ah = acc + (size_t)h * hd;
        if (part) {
            float *ph = part + (size_t)(h0 + h) * ((size_t)hd + 2);
            ph[0] = m[h];
            ph[1] = l[h];
            for (int d = 0; d < hd; d++) ph[2 + d] = ah[d];
            continue;
        }
        float *oh = o + (size_t)(h0 + h) * hd;
        float inv = normalizer(a, h0 + h, m[h], l[h]);
        for (int d = 0; d < hd; d++) oh[d] = ah[d] * inv;
    }
}

/* Query rows [i0, i1) of sequence sv (at most PAGODA_ATTN_TILE_Q) for
 * heads [h0, h1) through the level's F16 tile: per head, the rows' keys
 * (from the first row's first to the last row's own) in chunks of at most
 * 64 inside a block, each chunk converted and scored once for all rows;
 * each row masked to its own keys (causal, and the window's start). The
 * same sums as attend_row (the max, e^(s - m), the rescale per chunk),
 * in another float order. */
static void attend_tile(const attn_task *a, const pagoda_seq_view *sv, int h0, int h1, int32_t i0, int32_t i1)
{
    const pagoda_kv_layout *L = a->L;
    int hd = L->head_dim, per_kv = a->n_heads / L->n_kv_heads, nq = i1 - i0;
    size_t head_bytes = pagoda_kv_head_bytes(L), slot_bytes = pagoda_kv_slot_bytes(L);
    float qt[TILE_MAX_HD * PAGODA_ATTN_TILE_Q] __attribute__((aligned(64)));
    float acc[PAGODA_ATTN_TILE_Q * TILE_MAX_HD] __attribute__((aligned(64)));
    float kv[TILE_KV_FLOATS] __attribute__((aligned(64)));
    pagoda_attn_tile t = {.nq = nq, .hd = hd, .q8 = L->dtype == PAGODA_DTYPE_Q8_0, .scale = a->scale, .qt = qt,
                          .acc = acc, .kv = kv};
    for (int i = 0; i < PAGODA_ATTN_TILE_Q; i++) {
        int32_t pos = sv->ctx_len - sv->n_q + i0 + i;
        t.lo[i] = i < nq ? first_key(a->window, pos) : INT32_MAX;
        t.hi[i] = i < nq ? pos : -1;
    }
    int32_t kc = TILE_KV_FLOATS / hd < KEY_CHUNK ? TILE_KV_FLOATS / hd : KEY_CHUNK;
    int32_t jend = t.hi[nq - 1] + 1;
    for (int head = h0; head < h1; head++) {
        int kvh = head / per_kv;
        for (int i = 0; i < PAGODA_ATTN_TILE_Q; i++) {
            const float *qh = (const float *)((const uint8_t *)a->q + (sv->q_start + i0 + i) * a->q_stride) +
                              (size_t)head * hd;
            for (int d = 0; d < hd; d++) qt[d * PAGODA_ATTN_TILE_Q + i] = i < nq ? qh[d] : 0.0f;
            t.m[i] = -INFINITY;
            t.l[i] = 0.0f;
        }
        for (int i = 0; i < nq * hd; i++) acc[i] = 0.0f;
        for (int32_t j0 = t.lo[0]; j0 < jend;) {
            int32_t blk = sv->block_table[j0 / L->block_size];
            int32_t s0 = j0 % L->block_size;
            int32_t cnt = L->block_size - s0;
            if (cnt > jend - j0) cnt = jend - j0;
            if (cnt > kc) cnt = kc;
            const uint8_t *kb = a->pool + pagoda_kv_offset(L, a->layer, 0, blk) + (size_t)s0 * slot_bytes +
                                (size_t)kvh * head_bytes;
            const uint8_t *vb = a->pool + pagoda_kv_offset(L, a->layer, pagoda_kv_planes(L) - 1, blk) +
                                (size_t)s0 * slot_bytes + (size_t)kvh * head_bytes;
            a->vt->attn_f16_tile(&t, kb, vb, slot_bytes, cnt, j0);
            j0 += cnt;
        }
        for (int i = 0; i < nq; i++) {
            float *oh = (float *)((uint8_t *)a->out + (sv->q_start + i0 + i) * a->out_stride) + (size_t)head * hd;
            float inv = normalizer(a, head, t.m[i], t.l[i]);
            for (int d = 0; d < hd; d++) oh[d] = acc[(size_t)i * hd + d] * inv;
        }
    }
}

/* A split row's output from its splits' partial sums: with M the largest
 * m, o = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s (an empty split
 * has m = -inf and adds nothing). */
static void merge_row(const attn_task *a, const float *part, int32_t n_splits, int64_t qrow)
{
    int hd = a->L->head_dim;
    size_t per_split = (size_t)a->n_heads * ((size_t)hd + 2);
    float *o = (float *)((uint8_t *)a->out + qrow * a->out_stride);
    for (int h = 0; h < a->n_heads; h++) {
        float mx = -INFINITY;
        for (int32_t s = 0; s < n_splits; s++) {
            float m = part[(size_t)s * per_split + (size_t)h * ((size_t)hd + 2)];
            if (m > mx) mx = m;
        }
        float *oh = o + (size_t)h * hd, l = 0.0f;
        for (int d = 0; d < hd; d++) oh[d] = 0.0f;
        for (int32_t s = 0; s < n_splits; s++) {
            const float *ph = part + (size_t)s * per_split + (size_t)h * ((size_t)hd + 2);
            if (ph[0] == -INFINITY) continue;
            float w = expf(ph[0] - mx);
            l += w * ph[1];
            for (int d = 0; d < hd; d++) oh[d] += w * ph[2 + d];
        }
        float inv = normalizer(a, h, mx, l);
        for (int d = 0; d < hd; d++) oh[d] *= inv;
    }
}

static void attn_worker(void *arg, int ith, int nth)
{
    attn_task *a = arg;
    const pagoda_batch *b = a->b;
    for (;;) {
        int64_t it = atomic_fetch_add_explicit(&a->next, 1, memory_order_relaxed);
        if (it >= a->n_items) break;
        int64_t unit = it / a->n_groups;
        int h0 = (int)(it % a->n_groups) * a->group;
        int h1 = h0 + a->group < a->n_heads ? h0 + a->group : a->n_heads;
        /* The sequence holding this unit (few sequences: a linear scan). */
        int s = 0;
        while (a->unit_start[s + 1] <= unit) s++;
        const pagoda_seq_view *sv = &b->seqs[s];
        int64_t u = unit - a->unit_start[s];
        if (a->n_splits[s] > 1) {
            /* split u of the sequence's one row: keys [k0, k1) of its range */
            int32_t pos = sv->ctx_len - 1, first = first_key(a->window, pos), n = pos + 1 - first;
            int32_t k0 = first + (int32_t)((int64_t)n * u / a->n_splits[s]);
            int32_t k1 = first + (int32_t)((int64_t)n * (u + 1) / a->n_splits[s]);
            float *part = a->part + ((size_t)a->part_start[s] + (size_t)u) * (size_t)a->n_heads *
                                        ((size_t)a->L->head_dim + 2);
            attend_row(a, sv, h0, h1, sv->q_start, k0, k1, part);
            continue;
        }
        int32_t i0 = (int32_t)(u * Q_CHUNK), i1 = i0 + Q_CHUNK < sv->n_q ? i0 + Q_CHUNK : sv->n_q;
        if (a->tile && i1 - i0 == Q_CHUNK) {
            attend_tile(a, sv, h0, h1, i0, i1);
            continue;
        }
        for (int32_t i = i0; i < i1; i++) {
            int32_t pos = sv->ctx_len - sv->n_q + i;
            attend_row(a, sv, h0, h1, sv->q_start + i, first_key(a->window, pos), pos + 1, NULL);
        }
    }
}

int pagoda_cpu_attention(pagoda_cpu_exec *ex, const float *q, size_t q_stride, const void *pool,
                         const pagoda_kv_layout *L, int layer, const pagoda_batch *b, int n_heads,
                         float scale, int32_t window, float *out, size_t out_stride)
{
    return pagoda_cpu_attention_sinks(ex, q, q_stride, pool, L, layer, b, n_heads, scale, window,
                                      NULL, out, out_stride);
}

int pagoda_cpu_attention_sinks(pagoda_cpu_exec *ex, const float *q, size_t q_stride,
                               const void *pool, const pagoda_kv_layout *L, int layer,
                               const pagoda_batch *b, int n_heads, float scale, int32_t window,
                               const float *sinks, float *out, size_t out_stride)
{
    if (L->head_dim > MAX_HEAD_DIM) return PAGODA_ERR_UNSUPPORTED;
    const bool bi = ex->batch_invariant;   /* once: both loops below must agree */
    /* One scratch: unit_start [n_seqs + 1], n_splits and part_start [n_seqs],
     * then the partial sums of the split rows. */
    size_t n_ints = 3 * (size_t)b->n_seqs + 1, ints_bytes = (n_ints * sizeof(int32_t) + 63) & ~(size_t)63;
    int32_t n_parts = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        const pagoda_seq_view *sv = &b->seqs[s];
        int32_t sp = splits_of(sv->n_q, sv->ctx_len - first_key(window, sv->ctx_len - 1), bi);
        if (sp > 1) n_parts += sp;
    }
    size_t part_floats = (size_t)n_parts * (size_t)n_heads * ((size_t)L->head_dim + 2);
    int32_t *cs = pagoda_cpu_scratch(ex, ints_bytes + part_floats * sizeof(float));
    if (!cs) return PAGODA_ERR_NOMEM;
    int32_t *nsp = cs + b->n_seqs + 1, *ps = nsp + b->n_seqs;
    float *part = (float *)((uint8_t *)cs + ints_bytes);
    cs[0] = 0;
    n_parts = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        const pagoda_seq_view *sv = &b->seqs[s];
        nsp[s] = splits_of(sv->n_q, sv->ctx_len - first_key(window, sv->ctx_len - 1), bi);
        ps[s] = n_parts;
        if (nsp[s] > 1) n_parts += nsp[s];
        cs[s + 1] = cs[s] + (nsp[s] > 1 ? nsp[s] : (sv->n_q + Q_CHUNK - 1) / Q_CHUNK);
    }
    /* As many heads per item as keeps every thread a few items to take
     * (a single decoding sequence over a short context still spreads over
     * the threads), at most what the stack sums hold. */
    int64_t n_units = cs[b->n_seqs];
    int nth = pagoda_threadpool_size(ex->pool);
    int64_t want = 4 * (int64_t)nth;
    int n_groups = n_units >= want ? 1 : (int)((want + n_units - 1) / n_units);
    if (n_groups > n_heads) n_groups = n_heads;
    int group = (n_heads + n_groups - 1) / n_groups;
    while (group * L->head_dim > MAX_GROUP_FLOATS || group > MAX_GROUP_FLOATS / 8) group--;
    if (group < 1) group = 1;
    n_groups = (n_heads + group - 1) / group;
    /* Full chunks of 16 query rows (prefill) over an F16 or Q8_0 cache take the level's tile
     * where it has one; never under batch_invariant (a row's sums would
     * then depend on whether its chunk was full), never for the rows of
     * a speculative verify step (at most 9 rows: not a full chunk), so a
     * verify row sums in the order of the decode row it replaces. */
    const pagoda_vecdot_table *vt = pagoda_cpu_vecdot();
    static _Atomic int tile_env = -1;   /* PAGODA_CPU_ATTN_TILE=0: the row path (benchmarks) */
    if (tile_env < 0) {
        const char *e = getenv("PAGODA_CPU_ATTN_TILE");
        tile_env = !(e && !strcmp(e, "0"));
    }
    bool tile = tile_env && vt->attn_f16_tile && !bi && L->head_dim <= TILE_MAX_HD &&
                ((L->dtype == PAGODA_DTYPE_F16 && L->head_dim % 16 == 0) ||
                 (L->dtype == PAGODA_DTYPE_Q8_0 && L->head_dim % 32 == 0));
    attn_task a = {
        .vt = vt, .tile = tile, .q = q, .q_stride = q_stride, .pool = pool, .L = L,
        .layer = layer, .b = b, .n_heads = n_heads, .scale = scale, .window = window,
        .sinks = sinks, .out = out,
        .out_stride = out_stride, .unit_start = cs, .n_splits = nsp, .part_start = ps,
        .part = part, .group = group, .n_groups = n_groups, .n_items = n_units * n_groups,
    };
    atomic_init(&a.next, 0);
    pagoda_threadpool_run(ex->pool, attn_worker, &a);
    for (int s = 0; s < b->n_seqs; s++)
        if (nsp[s] > 1)
            merge_row(&a, part + (size_t)ps[s] * (size_t)n_heads * ((size_t)L->head_dim + 2), nsp[s],
                      b->seqs[s].q_start);
    return PAGODA_OK;
}
