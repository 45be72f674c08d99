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
 * Not for: writing the cache (ops.c kv_write).
 */
#include "kernels.h"

#include <math.h>
#include <stdatomic.h>

#include "vecdot.h"

#define Q_CHUNK 16       /* query rows per work item */
#define KEY_CHUNK 64     /* keys scored before one softmax rescale */
#define MAX_HEAD_DIM 1024
#ifndef KV_PREFETCH_BLOCKS
#define KV_PREFETCH_BLOCKS 2
#endif
/* Running sums of one item's heads live on the worker's stack. */
#define MAX_GROUP_FLOATS 8192

typedef struct attn_task {
    const pagoda_vecdot_table *vt;
    const float *q;
    size_t q_stride;
    const uint8_t *pool;
    const pagoda_kv_layout *L;
    int layer;
    const pagoda_batch *b;
    int n_heads;
    float scale;
    int32_t window;              /* 0, or the sliding window (keys p - window < j <= p) */
    float *out;
    size_t out_stride;
    const int32_t *chunk_start;  /* [n_seqs + 1] prefix sums of query chunks */
    int group;                   /* heads per item */
    int n_groups;                /* items per query chunk */
    int64_t n_items;
    atomic_llong next;
} attn_task;

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
    size_t elt = L->dtype == PAGODA_DTYPE_F32 ? 4 : 2, hd = (size_t)L->head_dim;
    size_t slot_bytes = (size_t)L->n_kv_heads * hd * elt;
    size_t lo = (size_t)(h0 / per_kv) * hd * elt, hi = (size_t)((h1 - 1) / per_kv + 1) * hd * elt;
    int32_t blk = sv->block_table[bi];
    const uint8_t *nk = a->pool + pagoda_kv_offset(L, a->layer, 0, blk);
    const uint8_t *nv = a->pool + pagoda_kv_offset(L, a->layer, 1, blk);
    for (int32_t sl = 0; sl < ns; sl++)
        for (size_t off = lo; off < hi; off += 64) {
            __builtin_prefetch(nk + (size_t)sl * slot_bytes + off);
            __builtin_prefetch(nv + (size_t)sl * slot_bytes + off);
        }
}

/* Query row qrow for heads [h0, h1) over keys first .. n_keys - 1 (first
 * > 0 on a sliding-window layer: the keys before it, whole blocks of them
 * included, are never read). */
static void attend_row(const attn_task *a, const pagoda_seq_view *sv, int h0, int h1, int64_t qrow,
                       int32_t first, int32_t n_keys)
{
    const pagoda_kv_layout *L = a->L;
    const pagoda_vecdot_table *vt = a->vt;
    int hd = L->head_dim, ng = h1 - h0;
    int per_kv = a->n_heads / L->n_kv_heads;
    size_t elt = L->dtype == PAGODA_DTYPE_F32 ? 4 : 2;
    size_t slot_bytes = (size_t)L->n_kv_heads * hd * elt;
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
        const uint8_t *vb0 = a->pool + pagoda_kv_offset(L, a->layer, 1, blk) + (size_t)s0 * slot_bytes;
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
            const uint8_t *kb = kb0 + (size_t)kvh * hd * elt, *vb = vb0 + (size_t)kvh * hd * elt;
            const float *qh = q + (size_t)head * hd;
            float *ah = acc + (size_t)h * hd;
            float cm = -INFINITY;
            if (elt == 4) {
                for (int32_t j = 0; j < cnt; j++)
                    sc[j] = vt->dot_f32((const float *)(kb + (size_t)j * slot_bytes), qh, hd) * a->scale;
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
            if (elt == 4) {
                for (int32_t j = 0; j < cnt; j++)
                    vt->axpy_f32(ah, j == 0 ? alpha : 1.0f, sc[j],
                                 (const float *)(vb + (size_t)j * slot_bytes), hd);
            } else {
                vt->accum_f16(ah, alpha, sc, (const uint16_t *)vb, slot_bytes, cnt, hd);
            }
            m[h] = nm;
            l[h] = lh;
        }
        j0 += cnt;
    }
    for (int h = 0; h < ng; h++) {
        float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
        float *oh = o + (size_t)(h0 + h) * hd;
        const float *ah = acc + (size_t)h * hd;
        for (int d = 0; d < hd; d++) oh[d] = ah[d] * inv;
    }
}

static void attn_worker(void *arg, int ith, int nth)
{
    attn_task *a = arg;
    const pagoda_batch *b = a->b;
    for (;;) {
        int64_t it = atomic_fetch_add_explicit(&a->next, 1, memory_order_relaxed);
        if (it >= a->n_items) break;
        int64_t chunk = it / a->n_groups;
        int h0 = (int)(it % a->n_groups) * a->group;
        int h1 = h0 + a->group < a->n_heads ? h0 + a->group : a->n_heads;
        /* The sequence holding this chunk (few sequences: a linear scan). */
        int s = 0;
        while (a->chunk_start[s + 1] <= chunk) s++;
        const pagoda_seq_view *sv = &b->seqs[s];
        int64_t c = chunk - a->chunk_start[s];
        int32_t i0 = (int32_t)(c * Q_CHUNK), i1 = i0 + Q_CHUNK < sv->n_q ? i0 + Q_CHUNK : sv->n_q;
        for (int32_t i = i0; i < i1; i++) {
            int32_t pos = sv->ctx_len - sv->n_q + i;
            /* the window check, all of it: key j is seen iff pos - j < window */
            int32_t first = a->window > 0 && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
            attend_row(a, sv, h0, h1, sv->q_start + i, first, pos + 1);
        }
    }
}

int pagoda_cpu_attention(pagoda_cpu_exec *ex, const float *q, size_t q_stride, const void *pool,
                         const pagoda_kv_layout *L, int layer, const pagoda_batch *b, int n_heads,
                         float scale, int32_t window, float *out, size_t out_stride)
{
    if (L->head_dim > MAX_HEAD_DIM) return PAGODA_ERR_UNSUPPORTED;
    int32_t *cs = pagoda_cpu_scratch(ex, sizeof(int32_t) * ((size_t)b->n_seqs + 1));
    if (!cs) return PAGODA_ERR_NOMEM;
    cs[0] = 0;
    for (int s = 0; s < b->n_seqs; s++) cs[s + 1] = cs[s] + (b->seqs[s].n_q + Q_CHUNK - 1) / Q_CHUNK;
    /* As many heads per item as keeps every thread a few items to take
     * (a single decoding sequence still spreads over the threads), at
     * most what the stack sums hold. */
    int64_t n_chunks = cs[b->n_seqs];
    int nth = pagoda_threadpool_size(ex->pool);
    int64_t want = 4 * (int64_t)nth;
    int n_groups = n_chunks >= want ? 1 : (int)((want + n_chunks - 1) / n_chunks);
    if (n_groups > n_heads) n_groups = n_heads;
    int group = (n_heads + n_groups - 1) / n_groups;
    while (group * L->head_dim > MAX_GROUP_FLOATS || group > MAX_GROUP_FLOATS / 8) group--;
    if (group < 1) group = 1;
    n_groups = (n_heads + group - 1) / group;
    attn_task a = {
        .vt = pagoda_cpu_vecdot(), .q = q, .q_stride = q_stride, .pool = pool, .L = L,
        .layer = layer, .b = b, .n_heads = n_heads, .scale = scale, .window = window, .out = out,
        .out_stride = out_stride, .chunk_start = cs, .group = group, .n_groups = n_groups,
        .n_items = n_chunks * n_groups,
    };
    atomic_init(&a.next, 0);
    pagoda_threadpool_run(ex->pool, attn_worker, &a);
    return PAGODA_OK;
}
