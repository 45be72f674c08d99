/*
 * cases_kv.c: the KV cache ops of the conformance runner: kv_write and
 * attention (plain and attention_ext with sliding windows) over shuffled
 * block tables, and copy_blocks, for every KV type a backend lists in
 * info.kv_types (F32, F16, Q8_0). The reference reads the values the
 * cache must hold: F32 as written, F16 rounded the IEEE way, Q8_0 within
 * the rounding of GGUF's Q8_0 blocks (see case_attention). The latent
 * layout (ABI 1.7, when info.kv_kinds has it) in each type too. And
 * get_rows reading a pool's stored slots back (MLA's prefix read-back).
 * Not for: the other ops (cases.c) or the harness (conformance.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"
#include "quant.h"

/* ------------------------------------------------- kv_write + attention */

typedef struct seq_spec { int32_t hist, n_q; } seq_spec;

/* One slot's stored K or V row (n values of `kvdt` at p) as floats. */
static void kv_row_values(int kvdt, const uint8_t *p, int64_t n, float *out)
{
    if (kvdt == PAGODA_DTYPE_F32) memcpy(out, p, sizeof(float) * (size_t)n);
    else pagoda_dequantize_row(kvdt, p, out, n);  /* F16, Q8_0 */
}

/* How far a stored row may be from the row written, and in what unit:
 * F32 and F16 must equal the value rounded the IEEE way (absolute error,
 * tolerance 1e-6); a Q8_0 value within 0.57 of its block's step amax/127
 * (error in steps): half a step for rounding to the nearest int8, plus
 * 127 times the f16 rounding of the scale (2^-11 of it), so a backend may
 * round ties or the scale either way. */
static double kv_row_err(int kvdt, const float *src, const float *got, int64_t n)
{
    double e = 0;
    for (int64_t b = 0; b < n; b += kvdt == PAGODA_DTYPE_Q8_0 ? 32 : n) {
        int64_t m = kvdt == PAGODA_DTYPE_Q8_0 ? 32 : n;
        double step = 1.0;
        if (kvdt == PAGODA_DTYPE_Q8_0) {
            double amax = 0;
            for (int64_t j = 0; j < m; j++) amax = fmax(amax, fabs((double)src[b + j]));
            step = amax > 0 ? amax / 127.0 : 1.0;
        }
        for (int64_t j = 0; j < m; j++) {
            double w = kvdt == PAGODA_DTYPE_F16 ? pagoda_fp16_to_fp32(pagoda_fp32_to_fp16(src[b + j]))
                                                : src[b + j];
            double d = isfinite(got[b + j]) ? fabs((double)got[b + j] - w) / step : INFINITY;
            if (d > e) e = d;
        }
    }
    return e;
}

/* Random valid bytes for a pool of `bytes` of KV type kvdt: finite values
 * (F32, F16) or blocks with a finite positive scale (Q8_0), so writes to
 * the wrong slot or layer show. */
static void kv_fill_pool(cf *c, int kvdt, uint8_t *pool, size_t bytes)
{
    if (kvdt == PAGODA_DTYPE_Q8_0) {
        for (size_t i = 0; i + 34 <= bytes; i += 34) {
            uint16_t d = pagoda_fp32_to_fp16(cf_uniform(c, 1e-3f, 4e-2f));
            memcpy(pool + i, &d, 2);
            for (int j = 0; j < 32; j++) pool[i + 2 + (size_t)j] = (uint8_t)cf_rand(c);
        }
        return;
    }
    size_t elt = kvdt == PAGODA_DTYPE_F32 ? 4 : 2;
    for (size_t i = 0; i < bytes / elt; i++) {
        float v = cf_uniform(c, -4.0f, 4.0f);
        if (elt == 4) memcpy(pool + i * 4, &v, 4);
        else { uint16_t h = pagoda_fp32_to_fp16(v); memcpy(pool + i * 2, &h, 2); }
    }
}

/* window < 0: `attention`; window >= 0: `attention_ext` with that sliding
 * window (0: none, which must equal `attention`).
 * ring (with a window): each sequence's block table is a ring, as the
 * core's sliding-window pool hands blocks on: logical block i is physical
 * block ring[i % R], R the fewest blocks that hold the keys of the step's
 * windows (1 + ceil((window + n_q - 2) / block_size)). Positions whose
 * slot a later one took are not in the pool any more (only the survivors
 * are written), so a kernel that reads a key outside its window, or maps
 * a key's position from anything but its index in the table, reads
 * another position's key. */
static int32_t ring_blocks(int32_t window, int32_t n_q, int32_t bs)
{
    return 1 + (window + n_q - 2 + bs - 1) / bs;
}

/* kind PAGODA_KV_LATENT (ABI 1.7): one KV head whose row is the key and
 * the value; kv_write gets no v (NULL), the reference reads the keys as
 * values, and the pool has no V plane. sinks (ABI 1.8): a logit per head
 * joins each softmax. */
static void case_attention_kind(cf *c, int kvdt, int n_heads, int n_kv, int hd, int bs,
                                const seq_spec *ss, int n_seqs, int32_t window, bool ring, int kind,
                                bool sinks)
{
    const char *aop = window < 0 ? "attention" : "attention_ext";
    bool latent = kind == PAGODA_KV_LATENT;
    char shape[192];
    int len = snprintf(shape, sizeof shape, "KV %s%s heads %d/%d head_dim %d block %d",
                       latent ? "latent " : "", pagoda_dtype_name(kvdt), n_heads, n_kv, hd, bs);
    if (window >= 0) len += snprintf(shape + len, sizeof shape - (size_t)len, " window %d", window);
    if (ring) len += snprintf(shape + len, sizeof shape - (size_t)len, " ring");
    if (sinks) len += snprintf(shape + len, sizeof shape - (size_t)len, " sinks");
    len += snprintf(shape + len, sizeof shape - (size_t)len, " seqs");
    for (int s = 0; s < n_seqs && len < (int)sizeof shape - 16; s++)
        len += snprintf(shape + len, sizeof shape - (size_t)len, " %d+%d", ss[s].hist, ss[s].n_q);
    if (!((c->info.kv_types >> kvdt) & 1)) {
        cf_record(c, aop, shape, 0, 0, CF_SKIP, "KV type %s not advertised in info.kv_types",
                  pagoda_dtype_name(kvdt));
        return;
    }
    if (latent && !(c->info.kv_kinds & (1u << PAGODA_KV_LATENT))) {
        cf_record(c, aop, shape, 0, 0, CF_SKIP, "the latent KV layout (ABI 1.7) is not advertised "
                  "in info.kv_kinds: the core keeps an MLA model's row as K and V");
        return;
    }
    if (window >= 0 && !c->ops->attention_ext) {
        cf_record(c, aop, shape, 0, 0, CF_SKIP, "optional slot (ABI 1.1) is NULL: the core "
                  "refuses models with sliding-window layers (gemma3)");
        return;
    }
    if (sinks && !c->info.attn_sinks) {
        cf_record(c, aop, shape, 0, 0, CF_SKIP, "info.attn_sinks is false (ABI 1.8): the core "
                  "refuses models with attention sinks (gpt-oss)");
        return;
    }
    int64_t kvrow = (int64_t)n_kv * hd, qcols = (int64_t)n_heads * hd;
    pagoda_kv_layout L = {.n_layers = 3, .block_size = bs, .n_kv_heads = n_kv, .head_dim = hd, .dtype = kvdt,
                          .kind = kind};
    /* ring: R physical blocks a sequence, and the history whose slots a
     * later position took is not written (kept(s, p) false) */
    int32_t total_blocks = 0, phys_blocks = 0, T = 0, H = 0, H_all = 0;
#define RING_R(s) (ring ? ring_blocks(window, ss[s].n_q, bs) : 0)
#define KEPT(s, p) (!ring || (p) + RING_R(s) * bs >= ss[s].hist + ss[s].n_q)
    for (int s = 0; s < n_seqs; s++) {
        int32_t nb = (ss[s].hist + ss[s].n_q + bs - 1) / bs + 1; /* +1: an unused table entry */
        total_blocks += nb;
        phys_blocks += ring ? RING_R(s) : nb;
        T += ss[s].n_q;
        H_all += ss[s].hist;
        for (int32_t p = 0; p < ss[s].hist; p++) H += KEPT(s, p);
    }
    L.n_blocks = phys_blocks + 3;
    const int layer = 1;
    size_t pool_bytes = pagoda_kv_pool_bytes(&L);
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)L.n_blocks);
    int32_t *tables = malloc(sizeof(int32_t) * (size_t)total_blocks);
    pagoda_seq_view *views = calloc((size_t)n_seqs, sizeof *views);
    float *kh = malloc(sizeof(float) * (size_t)((H_all + T) * kvrow)), *vh = malloc(sizeof(float) * (size_t)((H_all + T) * kvrow));
    /* the values the cache holds, of the kept positions (the reference
     * reads no other: a dropped one is outside every window of the step) */
    float *ks = malloc(sizeof(float) * (size_t)((H_all + T) * kvrow)), *vs = malloc(sizeof(float) * (size_t)((H_all + T) * kvrow));
    int32_t *hslots = malloc(sizeof(int32_t) * (size_t)(H + 1)), *slots = malloc(sizeof(int32_t) * (size_t)T);
    int32_t *positions = malloc(sizeof(int32_t) * (size_t)T), *tokens = calloc((size_t)T, sizeof(int32_t));
    int64_t *seq_base = malloc(sizeof(int64_t) * (size_t)n_seqs); /* first row of each seq in kh/vh */
    float *q = malloc(sizeof(float) * (size_t)(T * qcols)), *got = malloc(sizeof(float) * (size_t)(T * qcols));
    double *want = malloc(sizeof(double) * (size_t)(T * qcols));
    uint8_t *pool0 = malloc(pool_bytes), *pool1 = malloc(pool_bytes);
    double *sc = NULL;
    /* sink logits of the same order as the scores (|q.k| / sqrt(hd) <~ 2):
     * some above every score of a row, some below */
    float sink[64];
    pagoda_buffer *kvb = NULL, *hkb = NULL, *hvb = NULL, *nkb = NULL, *nvb = NULL, *qb = NULL, *ob = NULL;
    pagoda_buffer *skb = NULL;
    pagoda_tensor hkt, hvt, nkt, nvt, qt, ot, skt = {0};
    int st;
    if (!perm || !tables || !views || !kh || !vh || !ks || !vs || !hslots || !slots || !positions || !tokens ||
        !seq_base || !q || !got || !want || !pool0 || !pool1) {
        cf_record(c, "attention", shape, 0, 0, CF_FAIL, "the runner ran out of memory");
        goto out;
    }
    /* Blocks in a shuffled order so a backend that assumes contiguous
     * blocks fails. */
    for (int32_t i = 0; i < L.n_blocks; i++) perm[i] = i;
    for (int32_t i = L.n_blocks - 1; i > 0; i--) {
        int32_t j = cf_randint(c, i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    /* Rows of kh/vh: each sequence's history then its new tokens. */
    int32_t tb = 0, pb = 0, qrow = 0, hi = 0;
    int64_t base = 0;
    for (int s = 0; s < n_seqs; s++) {
        int32_t ctx = ss[s].hist + ss[s].n_q, nb = (ctx + bs - 1) / bs + 1;
        views[s] = (pagoda_seq_view){.q_start = qrow, .n_q = ss[s].n_q, .ctx_len = ctx,
                                     .n_blocks = nb, .block_table = tables + tb};
        for (int32_t i = 0; i < nb; i++) tables[tb + i] = perm[pb + (ring ? i % RING_R(s) : i)];
        seq_base[s] = base;
        for (int32_t p = 0; p < ctx; p++) {
            int32_t slot = tables[tb + p / bs] * bs + p % bs;
            if (p < ss[s].hist) {
                if (KEPT(s, p)) hslots[hi++] = slot;
            } else {
                slots[qrow + p - ss[s].hist] = slot;
                positions[qrow + p - ss[s].hist] = p;
            }
        }
        tb += nb;
        pb += ring ? RING_R(s) : nb;
        qrow += ss[s].n_q;
        base += ctx;
    }
    cf_fill(c, kh, (size_t)((H_all + T) * kvrow), -1.0f, 1.0f);
    cf_fill(c, vh, (size_t)((H_all + T) * kvrow), -1.0f, 1.0f);
    if (latent) memcpy(vh, kh, sizeof(float) * (size_t)((H_all + T) * kvrow));   /* V = K */
    cf_fill(c, q, (size_t)(T * qcols), -1.0f, 1.0f);
    cf_fill(c, sink, sizeof sink / sizeof sink[0], -3.0f, 3.0f);
    kv_fill_pool(c, kvdt, pool0, pool_bytes);
    /* Packed copies of the history rows and the new rows, in slot order. */
    float *hk = malloc(sizeof(float) * (size_t)((H + 1) * kvrow)), *hv = malloc(sizeof(float) * (size_t)((H + 1) * kvrow));
    float *nk = malloc(sizeof(float) * (size_t)(T * kvrow)), *nv = malloc(sizeof(float) * (size_t)(T * kvrow));
    if (!hk || !hv || !nk || !nv) {
        free(hk); free(hv); free(nk); free(nv);
        cf_record(c, "attention", shape, 0, 0, CF_FAIL, "the runner ran out of memory");
        goto out;
    }
    {
        int32_t h = 0, r = 0;
        for (int s = 0; s < n_seqs; s++)
            for (int32_t p = 0; p < ss[s].hist + ss[s].n_q; p++) {
                const float *ks = kh + (seq_base[s] + p) * kvrow, *vs = vh + (seq_base[s] + p) * kvrow;
                if (p < ss[s].hist && !KEPT(s, p)) continue;
                if (p < ss[s].hist) {
                    memcpy(hk + h * kvrow, ks, sizeof(float) * (size_t)kvrow);
                    memcpy(hv + h * kvrow, vs, sizeof(float) * (size_t)kvrow);
                    h++;
                } else {
                    memcpy(nk + r * kvrow, ks, sizeof(float) * (size_t)kvrow);
                    memcpy(nv + r * kvrow, vs, sizeof(float) * (size_t)kvrow);
                    r++;
                }
            }
    }
    st = c->ops->buffer_alloc(c->be, PAGODA_BUF_KV, pool_bytes, &kvb);
    if (!st) st = c->ops->upload(c->be, kvb, 0, pool0, pool_bytes);
    if (!st && H) st = cf_tensor_new(c, PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32, H, kvrow, 0, hk, &hkb, &hkt);
    if (!st && H) st = cf_tensor_new(c, PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32, H, kvrow, 0, hv, &hvb, &hvt);
    /* The new K/V rows strided, as the forward pass's views of a fused QKV are. */
    if (!st) st = cf_tensor_new(c, PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32, T, kvrow, c->align, nk, &nkb, &nkt);
    if (!st) st = cf_tensor_new(c, PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32, T, kvrow, c->align, nv, &nvb, &nvt);
    if (!st) st = cf_tensor_new(c, PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32, T, qcols, 0, q, &qb, &qt);
    if (!st) st = cf_tensor_new(c, PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32, T, qcols, 0, NULL, &ob, &ot);
    if (!st && sinks) st = cf_tensor_new(c, PAGODA_BUF_WEIGHTS, PAGODA_DTYPE_F32, 1, n_heads, 0, sink, &skb, &skt);
    free(hk); free(hv); free(nk); free(nv);
    if (st) { cf_record_call(c, "kv_write", shape, "buffer_alloc/upload", st); goto out; }

    /* An earlier step wrote the history; this step writes the new tokens. */
    if (H && (st = c->ops->kv_write(c->be, kvb, &L, layer, &hkt, latent ? NULL : &hvt, hslots, H))) {
        cf_record_call(c, "kv_write", shape, "kv_write (history)", st);
        goto out;
    }
    if ((st = c->ops->kv_write(c->be, kvb, &L, layer, &nkt, latent ? NULL : &nvt, slots, T))) {
        cf_record_call(c, "kv_write", shape, "kv_write", st);
        goto out;
    }
    pagoda_batch batch = {.seq_no = 1, .n_tokens = T, .tokens = tokens, .positions = positions,
                          .slots = slots, .n_seqs = n_seqs, .seqs = views};
    float ascale = 1.0f / sqrtf((float)hd);
    if (window < 0) {
        st = c->ops->attention(c->be, &qt, kvb, &L, layer, &batch, n_heads, ascale, &ot);
    } else {
        pagoda_attn_params ap = {.struct_size = sizeof ap, .n_heads = n_heads, .scale = ascale,
                                 .window = window, .sinks = skt};
        st = c->ops->attention_ext(c->be, &qt, kvb, &L, layer, &batch, &ap, &ot);
    }
    if (st) {
        cf_record_call(c, aop, shape, aop, st);
        goto out;
    }
    if ((st = cf_tensor_get(c, &ot, got)) || (st = c->ops->download(c->be, kvb, 0, pool1, pool_bytes))) {
        cf_record_call(c, "attention", shape, "download", st);
        goto out;
    }

    /* kv_write: every written slot holds its row (rounded to the KV type),
     * every other byte of the pool is as it was; ks / vs get the values
     * the cache holds, which the attention reference reads. */
    {
        double kerr = 0, ktol = kvdt == PAGODA_DTYPE_Q8_0 ? 0.57 : 1e-6;
        size_t slot_bytes = pagoda_kv_slot_bytes(&L);
        for (int s = 0; s < n_seqs; s++)
            for (int32_t p = 0; p < views[s].ctx_len; p++) {
                if (!KEPT(s, p)) continue;
                int32_t blk = views[s].block_table[p / bs], sl = p % bs;
                for (int kv = 0; kv < 2; kv++) {
                    /* a latent pool's one row is the key and the value */
                    size_t off = pagoda_kv_offset(&L, layer, latent ? 0 : kv, blk) + (size_t)sl * slot_bytes;
                    const float *src = (kv ? vh : kh) + (seq_base[s] + p) * kvrow;
                    float *held = (kv ? vs : ks) + (seq_base[s] + p) * kvrow;
                    kv_row_values(kvdt, pool1 + off, kvrow, held);
                    double e = kv_row_err(kvdt, src, held, kvrow);
                    if (e > kerr) kerr = e;
                    memcpy(pool0 + off, pool1 + off, slot_bytes); /* expected from here on */
                }
            }
        size_t bad = pool_bytes;
        for (size_t i = 0; i < pool_bytes && bad == pool_bytes; i++) if (pool0[i] != pool1[i]) bad = i;
        if (bad != pool_bytes)
            cf_record(c, "kv_write", shape, 1, 0, CF_FAIL,
                      "byte %zu of the pool changed, outside the slots written (layer %zu, K/V %zu, block %zu)",
                      bad, bad / ((size_t)pagoda_kv_planes(&L) * (size_t)L.n_blocks * pagoda_kv_block_bytes(&L)),
                      bad / ((size_t)L.n_blocks * pagoda_kv_block_bytes(&L)) % (size_t)pagoda_kv_planes(&L),
                      bad / pagoda_kv_block_bytes(&L) % (size_t)L.n_blocks);
        else
            cf_record(c, "kv_write", shape, kerr, ktol, kerr <= ktol ? CF_PASS : CF_FAIL,
                      "stored values differ from the rows written (rounded to %s%s)", pagoda_dtype_name(kvdt),
                      kvdt == PAGODA_DTYPE_Q8_0 ? "; error in steps of amax/127 per block" : "");
    }

    /* attention: causal softmax over each sequence's own keys, GQA; with a
     * window, over the keys j with 0 <= p - j < window only. */
    {
        int32_t maxctx = 0;
        for (int s = 0; s < n_seqs; s++) if (views[s].ctx_len > maxctx) maxctx = views[s].ctx_len;
        sc = malloc(sizeof(double) * (size_t)maxctx);
        if (!sc) { cf_record(c, "attention", shape, 0, 0, CF_FAIL, "the runner ran out of memory"); goto out; }
        double scale = 1.0 / sqrt((double)hd);
        int group = n_heads / n_kv;
        for (int s = 0; s < n_seqs; s++)
            for (int32_t i = 0; i < views[s].n_q; i++) {
                int32_t row = views[s].q_start + i, n_keys = ss[s].hist + i + 1;
                int32_t j0 = window > 0 && n_keys > window ? n_keys - window : 0;
                for (int h = 0; h < n_heads; h++) {
                    const float *qv = q + row * qcols + (int64_t)h * hd;
                    int kvh = h / group;
                    double m = -INFINITY, l = 0;
                    for (int32_t j = j0; j < n_keys; j++) {
                        const float *kr = ks + (seq_base[s] + j) * kvrow + (int64_t)kvh * hd;
                        double d = 0;
                        for (int e = 0; e < hd; e++) d += (double)qv[e] * kr[e];
                        sc[j] = d * scale;
                        if (sc[j] > m) m = sc[j];
                    }
                    /* a sink: one more logit in the denominator, no value */
                    if (sinks && sink[h] > m) m = sink[h];
                    if (sinks) l += exp(sink[h] - m);
                    for (int32_t j = j0; j < n_keys; j++) { sc[j] = exp(sc[j] - m); l += sc[j]; }
                    double *w = want + row * qcols + (int64_t)h * hd;
                    for (int e = 0; e < hd; e++) w[e] = 0;
                    for (int32_t j = j0; j < n_keys; j++) {
                        const float *vr = vs + (seq_base[s] + j) * kvrow + (int64_t)kvh * hd;
                        for (int e = 0; e < hd; e++) w[e] += sc[j] / l * vr[e];
                    }
                }
            }
        double err = cf_max_rel_err(got, want, (size_t)(T * qcols));
        /* Q8_0: a backend may round the query to 8 bits for int8 dots, as
         * ggml's Q8_0 KV does (the CPU backend does not) */
        double tol = kvdt == PAGODA_DTYPE_F32 ? 1e-4 : kvdt == PAGODA_DTYPE_F16 ? 5e-4 : 3e-3;
        cf_record(c, aop, shape, err, tol, err <= tol ? CF_PASS : CF_FAIL,
                  "outputs differ from causal softmax attention over the block tables%s%s",
                  window > 0 ? " within the window" : "", sinks ? " with a sink logit per head" : "");
    }
out:
    cf_buffer_free(c, kvb); cf_buffer_free(c, hkb); cf_buffer_free(c, hvb); cf_buffer_free(c, nkb);
    cf_buffer_free(c, nvb); cf_buffer_free(c, qb); cf_buffer_free(c, ob); cf_buffer_free(c, skb);
    free(perm); free(tables); free(views); free(kh); free(vh); free(ks); free(vs); free(hslots); free(slots);
    free(positions); free(tokens); free(seq_base); free(q); free(got); free(want); free(pool0);
    free(pool1); free(sc);
#undef KEPT
#undef RING_R
}

static void case_attention(cf *c, int kvdt, int n_heads, int n_kv, int hd, int bs,
                           const seq_spec *ss, int n_seqs, int32_t window, bool ring, bool sinks)
{
    case_attention_kind(c, kvdt, n_heads, n_kv, hd, bs, ss, n_seqs, window, ring, PAGODA_KV_SEPARATE,
                        sinks);
}

/* ---------------------------------------------------------- copy_blocks */

static void case_copy_blocks(cf *c, int kvdt, int kind)
{
    const char *op = "copy_blocks";
    bool latent = kind == PAGODA_KV_LATENT;
    pagoda_kv_layout L = {.n_layers = 2, .n_blocks = 12, .block_size = 4, .n_kv_heads = latent ? 1 : 2,
                          .head_dim = kvdt == PAGODA_DTYPE_Q8_0 ? 32 : 16, .dtype = kvdt, .kind = kind};
    int32_t src[] = {0, 5, 7}, dst[] = {3, 9, 1};
    char shape[128];
    snprintf(shape, sizeof shape, "KV %s%s 2 layers, 12 blocks of 4, 0->3 5->9 7->1", latent ? "latent " : "",
             pagoda_dtype_name(kvdt));
    if (latent && !(c->info.kv_kinds & (1u << PAGODA_KV_LATENT))) {
        cf_record(c, op, shape, 0, 0, CF_SKIP, "the latent KV layout (ABI 1.7) is not advertised");
        return;
    }
    if (!c->ops->copy_blocks) {
        cf_record(c, op, shape, 0, 0, CF_SKIP, "optional slot is NULL: the core downloads and uploads blocks");
        return;
    }
    if (!((c->info.kv_types >> kvdt) & 1)) {
        cf_record(c, op, shape, 0, 0, CF_SKIP, "KV type not advertised");
        return;
    }
    size_t n = pagoda_kv_pool_bytes(&L), bb = pagoda_kv_block_bytes(&L);
    uint8_t *a = malloc(n), *b = malloc(n);
    pagoda_buffer *kv = NULL;
    int st;
    if (!a || !b) { cf_record(c, op, shape, 0, 0, CF_FAIL, "the runner ran out of memory"); goto out; }
    for (size_t i = 0; i < n; i++) a[i] = (uint8_t)cf_rand(c);
    if ((st = c->ops->buffer_alloc(c->be, PAGODA_BUF_KV, n, &kv)) || (st = c->ops->upload(c->be, kv, 0, a, n))) {
        cf_record_call(c, op, shape, "buffer_alloc/upload", st);
        goto out;
    }
    if ((st = c->ops->copy_blocks(c->be, kv, &L, src, dst, 3))) { cf_record_call(c, op, shape, "copy_blocks", st); goto out; }
    if ((st = c->ops->download(c->be, kv, 0, b, n))) { cf_record_call(c, op, shape, "download", st); goto out; }
    for (int l = 0; l < L.n_layers; l++)
        for (int k = 0; k < pagoda_kv_planes(&L); k++)
            for (int i = 0; i < 3; i++)
                memcpy(a + pagoda_kv_offset(&L, l, k, dst[i]), a + pagoda_kv_offset(&L, l, k, src[i]), bb);
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++) if (a[i] != b[i]) bad = i;
    if (bad == n) cf_record(c, op, shape, 0, 0, CF_PASS, " ");
    else cf_record(c, op, shape, 1, 0, CF_FAIL, "pool byte %zu (block %zu) differs from the expected copy",
                   bad, bad / bb % (size_t)L.n_blocks);
out:
    if (kv) c->ops->buffer_free(c->be, kv);
    free(a);
    free(b);
}

/* ------------------------------------------ get_rows over a KV pool */

/* The core reads a pool's stored rows back with get_rows (MLA's
 * decompressed prefill after a cached prefix, forward_mla.c): a view of
 * layer 1's K plane (a latent layout's one plane) as a table of one row a
 * slot (n_kv_heads x head_dim values of the pool's type, slot_bytes
 * apart), from a nonzero offset. The rows kv_write stored into shuffled
 * slots must come back exactly as the pool's bytes say. MLA's pool has
 * one KV head; kv_heads > 1 checks the row is every head's side by side,
 * as backend.h promises. */
static void case_kv_get_rows(cf *c, int kvdt, int kind, int32_t kv_heads)
{
    const char *op = "get_rows";
    bool latent = kind == PAGODA_KV_LATENT;
    pagoda_kv_layout L = {.n_layers = 3, .n_blocks = 6, .block_size = 4, .n_kv_heads = kv_heads,
                          .head_dim = kvdt == PAGODA_DTYPE_Q8_0 ? 96 : 40, .dtype = kvdt, .kind = kind};
    enum { T = 10, N = 12 };
    char shape[128], heads[48] = "";
    if (kv_heads > 1) snprintf(heads, sizeof heads, " (%d KV heads of %d)", kv_heads, L.head_dim);
    snprintf(shape, sizeof shape, "KV %s%s pool as a table%s: layer 1's slots, %d ids", latent ? "latent " : "",
             pagoda_dtype_name(kvdt), heads, N);
    if (latent && !(c->info.kv_kinds & (1u << PAGODA_KV_LATENT))) {
        cf_record(c, op, shape, 0, 0, CF_SKIP, "the latent KV layout (ABI 1.7) is not advertised");
        return;
    }
    if (!((c->info.kv_types >> kvdt) & 1) || !cf_has_type(c, kvdt)) {
        cf_record(c, op, shape, 0, 0, CF_SKIP, "not in both info.kv_types and info.weight_types "
                  "(the core then keeps MLA chunks after a prefix absorbed)");
        return;
    }
    const int64_t D = (int64_t)kv_heads * L.head_dim;   /* a row: every head's values */
    size_t n = pagoda_kv_pool_bytes(&L), sb = pagoda_kv_slot_bytes(&L);
    uint8_t *pool = calloc(1, n);
    float *rows = malloc(sizeof(float) * (size_t)(T * D)), *got = malloc(sizeof(float) * (size_t)(N * D));
    double *want = malloc(sizeof(double) * (size_t)(N * D));
    float *row = malloc(sizeof(float) * (size_t)D);
    pagoda_buffer *kv = NULL, *rb = NULL, *ob = NULL;
    pagoda_tensor rt, ot;
    int32_t slots[T], ids[N];
    int st;
    if (!pool || !rows || !got || !want || !row) {
        cf_record(c, op, shape, 0, 0, CF_FAIL, "the runner ran out of memory");
        goto out;
    }
    /* T distinct slots of the 24, shuffled */
    int32_t all[24];
    for (int32_t i = 0; i < 24; i++) all[i] = i;
    for (int32_t i = 23; i > 0; i--) {
        int32_t j = cf_randint(c, i + 1), t = all[i];
        all[i] = all[j];
        all[j] = t;
    }
    memcpy(slots, all, sizeof slots);
    for (int32_t i = 0; i < N; i++) ids[i] = slots[i % T];   /* two read twice */
    cf_fill(c, rows, (size_t)(T * D), -2.0f, 2.0f);
    if ((st = c->ops->buffer_alloc(c->be, PAGODA_BUF_KV, n, &kv)) || (st = c->ops->upload(c->be, kv, 0, pool, n))) {
        cf_record_call(c, op, shape, "buffer_alloc/upload (pool)", st);
        goto out;
    }
    if ((st = cf_tensor_new(c, PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32, T, D, 0, rows, &rb, &rt))) {
        cf_record_call(c, op, shape, "buffer_alloc/upload (rows)", st);
        goto out;
    }
    if ((st = c->ops->kv_write(c->be, kv, &L, 1, &rt, latent ? NULL : &rt, slots, T))) {
        cf_record_call(c, op, shape, "kv_write", st);
        goto out;
    }
    if ((st = cf_tensor_new(c, PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32, N, D, 0, NULL, &ob, &ot))) {
        cf_record_call(c, op, shape, "buffer_alloc (out)", st);
        goto out;
    }
    pagoda_tensor table = {.buf = kv, .offset = pagoda_kv_offset(&L, 1, 0, 0), .dtype = kvdt,
                           .rows = (int64_t)L.n_blocks * L.block_size, .cols = D, .row_stride = sb};
    if ((st = c->ops->get_rows(c->be, &table, ids, N, &ot))) { cf_record_call(c, op, shape, "get_rows", st); goto out; }
    if ((st = cf_tensor_get(c, &ot, got))) { cf_record_call(c, op, shape, "download (out)", st); goto out; }
    if ((st = c->ops->download(c->be, kv, 0, pool, n))) { cf_record_call(c, op, shape, "download (pool)", st); goto out; }
    for (int32_t i = 0; i < N; i++) {
        kv_row_values(kvdt, pool + table.offset + (size_t)ids[i] * sb, D, row);
        for (int64_t j = 0; j < D; j++) want[i * D + j] = row[j];
    }
    /* and the pool holds what was written, within its type's rounding (a
     * read of zeros would pass the comparison above alone) */
    double stored = 0;
    for (int32_t i = 0; i < N; i++)
        for (int64_t j = 0; j < D; j++)
            stored = fmax(stored, fabs(want[i * D + j] - rows[(i % T) * D + j]));
    double err = cf_max_rel_err(got, want, (size_t)(N * D)), tol = 1e-6;
    double stol = kvdt == PAGODA_DTYPE_F32 ? 0 : kvdt == PAGODA_DTYPE_F16 ? 2e-3 : 2.0 / 127;
    if (stored > stol)
        cf_record(c, op, shape, stored, stol, CF_FAIL, "the pool does not hold the rows kv_write stored");
    else
        cf_record(c, op, shape, err, tol, err <= tol ? CF_PASS : CF_FAIL,
                  "rows differ from the pool's stored slots");
out:
    if (kv) c->ops->buffer_free(c->be, kv);
    cf_buffer_free(c, rb);
    cf_buffer_free(c, ob);
    free(pool); free(rows); free(got); free(want); free(row);
}

/* ------------------------------------------------------------- the list */

void cf_run_kv_ops(cf *c)
{
    static const seq_spec mixed[] = {{0, 37}, {49, 1}, {15, 10}, {0, 1}};
    static const seq_spec long_mix[] = {{0, 5}, {100, 1}, {31, 33}, {7, 1}};
    static const seq_spec decode[] = {{0, 1}, {3, 1}, {16, 1}};
    static const int kvtypes[] = {PAGODA_DTYPE_F32, PAGODA_DTYPE_F16, PAGODA_DTYPE_Q8_0};
    /* Gemma 3 270M's heads: 4 query heads on 1 KV head of 256 */
    static const seq_spec gemma[] = {{0, 40}, {70, 1}, {21, 12}};
    /* ... and long enough that each ring wraps: a decode at 600, a
     * 24-token chunk at 300 */
    static const seq_spec gemma_ring[] = {{600, 1}, {300, 24}, {5, 3}};
    /* a decode row past 512 keys (split), a chunk past the window of 128 */
    static const seq_spec gptoss[] = {{700, 1}, {150, 20}, {3, 2}};
    for (int k = 0; k < 3; k++) {
        bool q8 = kvtypes[k] == PAGODA_DTYPE_Q8_0;
        case_attention(c, kvtypes[k], 4, 4, 64, 16, mixed, 4, -1, false, false);    /* MHA, prefill + decode */
        case_attention(c, kvtypes[k], 8, 2, 32, 8, long_mix, 4, -1, false, false);  /* GQA 4:1, T > 32 */
        /* the bundled model's heads of 8 (Q8_0 needs whole blocks of 32: heads of 32) */
        case_attention(c, kvtypes[k], 8, 4, q8 ? 32 : 8, 16, decode, 3, -1, false, false);
        /* sliding windows: inside a block, across skipped blocks, none */
        case_attention(c, kvtypes[k], 8, 2, 32, 8, long_mix, 4, 5, false, false);
        case_attention(c, kvtypes[k], 4, 1, 256, 16, gemma, 3, 19, false, false);
        case_attention(c, kvtypes[k], 4, 4, 64, 16, mixed, 4, 0, false, false);
        /* ring-shaped block tables (the core's sliding-window pool): the
         * same physical block for logical blocks i and i + R, in each KV
         * type (the window pool stores kv_dtype like the main pool) */
        case_attention(c, kvtypes[k], 8, 2, 32, 8, long_mix, 4, 5, true, false);
        case_attention(c, kvtypes[k], 4, 1, 256, 16, gemma_ring, 3, 19, true, false);
        /* attention sinks (ABI 1.8; gpt-oss's 64 heads of 64 on 8 KV
         * heads, scaled down): full causal, a window, a ring, and a long
         * decode row (split into several key ranges, merged with the sink) */
        case_attention(c, kvtypes[k], 8, 2, 32, 8, long_mix, 4, 0, false, true);
        case_attention(c, kvtypes[k], 8, 2, 32, 8, long_mix, 4, 5, false, true);
        case_attention(c, kvtypes[k], 8, 2, 32, 8, long_mix, 4, 5, true, true);
        case_attention(c, kvtypes[k], 16, 2, 64, 16, gptoss, 3, 0, false, true);
        case_attention(c, kvtypes[k], 16, 2, 64, 16, gptoss, 3, 128, true, true);
    }
    /* the latent layout (ABI 1.7): DeepSeek's 128 heads read one row of 512 + 64
     * (a decode-heavy mix), and small heads of 64 + 32 with chunks */
    static const seq_spec mla_decode[] = {{0, 3}, {40, 1}, {17, 1}};
    for (int k = 0; k < 3; k++) {
        case_attention_kind(c, kvtypes[k], 128, 1, 576, 16, mla_decode, 3, -1, false, PAGODA_KV_LATENT, false);
        case_attention_kind(c, kvtypes[k], 4, 1, 96, 8, mixed, 4, -1, false, PAGODA_KV_LATENT, false);
    }
    for (int k = 0; k < 3; k++) {
        case_copy_blocks(c, kvtypes[k], PAGODA_KV_SEPARATE);
        case_copy_blocks(c, kvtypes[k], PAGODA_KV_LATENT);
        case_kv_get_rows(c, kvtypes[k], PAGODA_KV_SEPARATE, 1);
        case_kv_get_rows(c, kvtypes[k], PAGODA_KV_LATENT, 1);
        case_kv_get_rows(c, kvtypes[k], PAGODA_KV_SEPARATE, 2);
    }
}
