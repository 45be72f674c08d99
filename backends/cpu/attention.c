/*
 * attention.c: causal attention over a paged KV cache for a flattened
 * batch: each sequence reads its own block table; prefill chunks and single
 * decode tokens mix in one call. Online softmax (one pass over the keys,
 * rescaling the running sum when the max grows), keys taken a chunk at a
 * time so the rescale and exp are per chunk. Work items are (sequence,
 * query chunk, head), handed out through an atomic counter because their
 * sizes differ by orders of magnitude (a 512-token prefill next to decodes).
 * Not for: writing the cache (ops.c kv_write).
 */
#include "kernels.h"

#include <math.h>
#include <stdatomic.h>

#include "vecdot.h"

#define Q_CHUNK 16       /* query rows per work item */
#define KEY_CHUNK 64     /* keys scored before one softmax rescale */
#define MAX_HEAD_DIM 1024

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
    float *out;
    size_t out_stride;
    const int32_t *chunk_start;  /* [n_seqs + 1] prefix sums of query chunks */
    int64_t n_items;
    atomic_llong next;
} attn_task;

static void attend_row(const attn_task *a, const pagoda_seq_view *sv, int head, int64_t qrow,
                       int32_t n_keys)
{
    const pagoda_kv_layout *L = a->L;
    const pagoda_vecdot_table *vt = a->vt;
    int hd = L->head_dim;
    int kvh = head / (a->n_heads / L->n_kv_heads);
    size_t elt = L->dtype == PAGODA_DTYPE_F32 ? 4 : 2;
    size_t slot_bytes = (size_t)L->n_kv_heads * hd * elt;
    const float *q = (const float *)((const uint8_t *)a->q + qrow * a->q_stride) + (size_t)head * hd;
    float *o = (float *)((uint8_t *)a->out + qrow * a->out_stride) + (size_t)head * hd;
    float acc[MAX_HEAD_DIM];
    float sc[KEY_CHUNK];
    for (int d = 0; d < hd; d++) acc[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    for (int32_t j0 = 0; j0 < n_keys;) {
        int32_t blk = sv->block_table[j0 / L->block_size];
        int32_t s0 = j0 % L->block_size;
        int32_t cnt = L->block_size - s0;
        if (cnt > n_keys - j0) cnt = n_keys - j0;
        if (cnt > KEY_CHUNK) cnt = KEY_CHUNK;
        const uint8_t *kb = a->pool + pagoda_kv_offset(L, a->layer, 0, blk) +
                            (size_t)kvh * hd * elt + (size_t)s0 * slot_bytes;
        const uint8_t *vb = a->pool + pagoda_kv_offset(L, a->layer, 1, blk) +
                            (size_t)kvh * hd * elt + (size_t)s0 * slot_bytes;
        float cm = -INFINITY;
        if (elt == 4) {
            for (int32_t j = 0; j < cnt; j++)
                sc[j] = vt->dot_f32((const float *)(kb + (size_t)j * slot_bytes), q, hd) * a->scale;
        } else {
            vt->scores_f16((const uint16_t *)kb, slot_bytes, cnt, q, hd, a->scale, sc);
        }
        for (int32_t j = 0; j < cnt; j++)
            if (sc[j] > cm) cm = sc[j];
        float nm = cm > m ? cm : m;
        float alpha = m == -INFINITY ? 0.0f : expf(m - nm);
        l *= alpha;
        /* sc becomes the weights p. */
        for (int32_t j = 0; j < cnt; j++) {
            sc[j] = expf(sc[j] - nm);
            l += sc[j];
        }
        if (elt == 4) {
            for (int32_t j = 0; j < cnt; j++)
                vt->axpy_f32(acc, j == 0 ? alpha : 1.0f, sc[j],
                             (const float *)(vb + (size_t)j * slot_bytes), hd);
        } else {
            vt->accum_f16(acc, alpha, sc, (const uint16_t *)vb, slot_bytes, cnt, hd);
        }
        m = nm;
        j0 += cnt;
    }
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int d = 0; d < hd; d++) o[d] = acc[d] * inv;
}

static void attn_worker(void *arg, int ith, int nth)
{
    attn_task *a = arg;
    const pagoda_batch *b = a->b;
    for (;;) {
        int64_t it = atomic_fetch_add_explicit(&a->next, 1, memory_order_relaxed);
        if (it >= a->n_items) break;
        int64_t chunk = it / a->n_heads;
        int head = (int)(it % a->n_heads);
        /* The sequence holding this chunk (few sequences: a linear scan). */
        int s = 0;
        while (a->chunk_start[s + 1] <= chunk) s++;
        const pagoda_seq_view *sv = &b->seqs[s];
        int64_t c = chunk - a->chunk_start[s];
        int32_t i0 = (int32_t)(c * Q_CHUNK), i1 = i0 + Q_CHUNK < sv->n_q ? i0 + Q_CHUNK : sv->n_q;
        for (int32_t i = i0; i < i1; i++) {
            int32_t pos = sv->ctx_len - sv->n_q + i;
            attend_row(a, sv, head, sv->q_start + i, pos + 1);
        }
    }
}

int pagoda_cpu_attention(pagoda_cpu_exec *ex, const float *q, size_t q_stride, const void *pool,
                         const pagoda_kv_layout *L, int layer, const pagoda_batch *b, int n_heads,
                         float scale, float *out, size_t out_stride)
{
    if (L->head_dim > MAX_HEAD_DIM) return PAGODA_ERR_UNSUPPORTED;
    int32_t *cs = pagoda_cpu_scratch(ex, sizeof(int32_t) * ((size_t)b->n_seqs + 1));
    if (!cs) return PAGODA_ERR_NOMEM;
    cs[0] = 0;
    for (int s = 0; s < b->n_seqs; s++) cs[s + 1] = cs[s] + (b->seqs[s].n_q + Q_CHUNK - 1) / Q_CHUNK;
    attn_task a = {
        .vt = pagoda_cpu_vecdot(), .q = q, .q_stride = q_stride, .pool = pool, .L = L,
        .layer = layer, .b = b, .n_heads = n_heads, .scale = scale, .out = out,
        .out_stride = out_stride, .chunk_start = cs,
        .n_items = (int64_t)cs[b->n_seqs] * n_heads,
    };
    atomic_init(&a.next, 0);
    pagoda_threadpool_run(ex->pool, attn_worker, &a);
    return PAGODA_OK;
}
