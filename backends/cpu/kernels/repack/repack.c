/*
 * repack.c: Q8_0 / Q4_0 / Q4_1 (and the K-quants') weights into the row-interleaved int8 layout of
 * repack.h, the activations into the layout its GEMMs read, the plain-C
 * GEMM on that layout (the arithmetic every faster one matches), and the
 * cache that repacks each weight matrix once, on first use.
 * Not for: the SIMD / tile GEMMs (gemm_vnni_avx512.c, ../amx/), the choice
 * of path (repack_matmul.c).
 */
#include "repack.h"

#include <stdlib.h>
#include <string.h>

#include "pagoda/types.h"
#include "quant.h"
#include "threadpool.h"
#include "vecdot.h"

bool pagoda_rp_type_kquant(int dtype)
{
    return dtype == PAGODA_DTYPE_Q4_K || dtype == PAGODA_DTYPE_Q5_K || dtype == PAGODA_DTYPE_Q6_K;
}

bool pagoda_rp_type_supported(int dtype)
{
    return dtype == PAGODA_DTYPE_Q8_0 || dtype == PAGODA_DTYPE_Q4_0 || dtype == PAGODA_DTYPE_Q4_1 ||
           pagoda_rp_type_kquant(dtype);
}

size_t pagoda_rp_bytes(int dtype, int64_t N, int64_t K)
{
    size_t ng = (size_t)((N + PAGODA_RP_ROWS - 1) / PAGODA_RP_ROWS);
    if (dtype == PAGODA_DTYPE_Q6_K) return ng * (size_t)(K / 256) * sizeof(pagoda_rp_q6block);
    if (pagoda_rp_type_kquant(dtype)) return ng * (size_t)(K / 256) * sizeof(pagoda_rp_kblock);
    if (dtype == PAGODA_DTYPE_Q4_1) return ng * (size_t)(K / PAGODA_RP_QK) * sizeof(pagoda_rp_q41block);
    return ng * (size_t)(K / PAGODA_RP_QK) * sizeof(pagoda_rp_block);
}

/* Row n's 32 values of block b as int8, and their scale (and Q4_1's min
 * into *m). */
static float unpack_block(int dtype, const uint8_t *row, int64_t b, int8_t v[32], float *m)
{
    if (dtype == PAGODA_DTYPE_Q8_0) {
        pagoda_block_q8_0 q;
        memcpy(&q, row + b * sizeof q, sizeof q);
        memcpy(v, q.qs, 32);
        return pagoda_fp16_to_fp32(q.d);
    }
    if (dtype == PAGODA_DTYPE_Q4_1) {
        pagoda_block_q4_1 q;
        memcpy(&q, row + b * sizeof q, sizeof q);
        for (int j = 0; j < 16; j++) {
            v[j] = (int8_t)(q.qs[j] & 0xF);
            v[j + 16] = (int8_t)(q.qs[j] >> 4);
        }
        *m = pagoda_fp16_to_fp32(q.m);
        return pagoda_fp16_to_fp32(q.d);
    }
    pagoda_block_q4_0 q;
    memcpy(&q, row + b * sizeof q, sizeof q);
    for (int j = 0; j < 16; j++) {
        v[j] = (int8_t)((q.qs[j] & 0xF) - 8);
        v[j + 16] = (int8_t)((q.qs[j] >> 4) - 8);
    }
    return pagoda_fp16_to_fp32(q.d);
}

/* Row n's 256 values of super-block b (Q4_K / Q5_K), unsigned, with its
 * sub-block scales and mins. */
static void unpack_kblock(int dtype, const uint8_t *row, int64_t b, uint8_t v[256], uint8_t sc[8],
                          uint8_t mn[8], float *d, float *dmin)
{
    const uint8_t *scales, *qs, *qh = NULL;
    uint16_t hd, hm;
    pagoda_block_q4_K q4;
    pagoda_block_q5_K q5;
    if (dtype == PAGODA_DTYPE_Q4_K) {
        memcpy(&q4, row + b * sizeof q4, sizeof q4);
        scales = q4.scales, qs = q4.qs, hd = q4.d, hm = q4.dmin;
    } else {
        memcpy(&q5, row + b * sizeof q5, sizeof q5);
        scales = q5.scales, qs = q5.qs, qh = q5.qh, hd = q5.d, hm = q5.dmin;
    }
    for (int j = 0; j < 8; j++) {
        pagoda_get_scale_min_k4(j, scales, &sc[j], &mn[j]);
        for (int l = 0; l < 32; l++) {
            int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;
            if (qh) q |= ((qh[l] >> j) & 1) << 4;
            v[32 * j + l] = (uint8_t)q;
        }
    }
    *d = pagoda_fp16_to_fp32(hd);
    *dmin = pagoda_fp16_to_fp32(hm);
}

static void pack_kgroups(pagoda_rp_matrix *m, const void *w, size_t w_stride, int64_t g0, int64_t g1)
{
    for (int64_t g = g0; g < g1; g++)
        for (int64_t b = 0; b < m->nb; b++) {
            pagoda_rp_kblock *o = &m->kblk[g * m->nb + b];
            memset(o, 0, sizeof *o);
            for (int n = 0; n < PAGODA_RP_ROWS; n++) {
                int64_t row = g * PAGODA_RP_ROWS + n;
                if (row >= m->N) break;
                uint8_t v[256], sc[8], mn[8];
                unpack_kblock(m->dtype, (const uint8_t *)w + (size_t)row * w_stride, b, v, sc, mn, &o->d[n],
                              &o->dmin[n]);
                for (int k = 0; k < 256; k++) o->q[k / 4][4 * n + k % 4] = v[k];
                for (int j = 0; j < 8; j++) {
                    o->sc[j][n] = sc[j];
                    o->mp[j / 2][2 * n + j % 2] = mn[j];
                }
            }
        }
}

/* Q6_K: value v = 128 h + 32 k + l has its low 4 bits in ql[64 h + l +
 * 32 (k & 1)] (high nibble when k >= 2), its high 2 in qh[32 h + l] at
 * bit 2k, its scale in sub-block v / 16. */
static void pack_q6groups(pagoda_rp_matrix *m, const void *w, size_t w_stride, int64_t g0, int64_t g1)
{
    for (int64_t g = g0; g < g1; g++)
        for (int64_t b = 0; b < m->nb; b++) {
            pagoda_rp_q6block *o = &m->q6blk[g * m->nb + b];
            memset(o, 0, sizeof *o);
            for (int n = 0; n < PAGODA_RP_ROWS; n++) {
                int64_t row = g * PAGODA_RP_ROWS + n;
                if (row >= m->N) break;
                pagoda_block_q6_K q;
                memcpy(&q, (const uint8_t *)w + (size_t)row * w_stride + b * sizeof q, sizeof q);
                for (int v = 0; v < 256; v++) {
                    int h = v / 128, k = (v % 128) / 32, l = v % 32;
                    int lo = (q.ql[64 * h + l + 32 * (k & 1)] >> (4 * (k >> 1))) & 0xF;
                    int hi = (q.qh[32 * h + l] >> (2 * k)) & 3;
                    o->q[v / 4][4 * n + v % 4] = (uint8_t)(lo | hi << 4);
                }
                for (int j = 0; j < 16; j++) {
                    o->sc[j][n] = q.scales[j];
                    o->scp[j / 2][2 * n + j % 2] = q.scales[j];
                }
                o->d[n] = pagoda_fp16_to_fp32(q.d);
            }
        }
}

void pagoda_rp_pack_groups(pagoda_rp_matrix *m, const void *w, size_t w_stride, int64_t g0, int64_t g1)
{
    if (m->dtype == PAGODA_DTYPE_Q6_K) {
        pack_q6groups(m, w, w_stride, g0, g1);
        return;
    }
    if (pagoda_rp_type_kquant(m->dtype)) {
        pack_kgroups(m, w, w_stride, g0, g1);
        return;
    }
    const bool q41 = m->dtype == PAGODA_DTYPE_Q4_1;
    for (int64_t g = g0; g < g1; g++)
        for (int64_t b = 0; b < m->nb; b++) {
            /* Q4_1's block begins with pagoda_rp_block's fields */
            pagoda_rp_q41block *o4 = q41 ? &m->q41blk[g * m->nb + b] : NULL;
            pagoda_rp_block *o = q41 ? NULL : &m->blk[g * m->nb + b];
            int8_t (*oq)[4 * PAGODA_RP_ROWS] = q41 ? o4->q : o->q;
            float *od = q41 ? o4->d : o->d;
            int32_t *os = q41 ? o4->s128 : o->s128;
            if (q41) memset(o4, 0, sizeof *o4);
            else memset(o, 0, sizeof *o);
            for (int n = 0; n < PAGODA_RP_ROWS; n++) {
                int64_t row = g * PAGODA_RP_ROWS + n;
                if (row >= m->N) break;  /* padding rows stay zero (scale 0, min 0) */
                int8_t v[32];
                float mn = 0.0f;
                od[n] = unpack_block(m->dtype, (const uint8_t *)w + (size_t)row * w_stride, b, v, &mn);
                if (q41) o4->m[n] = mn;
                int32_t s = 0;
                for (int k = 0; k < 32; k++) {
                    oq[k / 4][4 * n + k % 4] = v[k];
                    s += v[k];
                }
                os[n] = 128 * s;
            }
        }
}

/* ----------------------------------------------------------- activations */

static int64_t round_up(int64_t v, int64_t m)
{
    return (v + m - 1) / m * m;
}

size_t pagoda_rp_acts_bytes(int64_t T, int64_t K)
{
    int64_t tp = round_up(T, PAGODA_RP_ROWS), kp = round_up(K, 64);
    return (size_t)round_up(tp * kp, 64) + (size_t)round_up(tp * (K / PAGODA_RP_QK) * 4, 64) +
           (size_t)round_up(tp * (K / PAGODA_RP_QK) * 2, 64) + (size_t)round_up(tp * (K / 16) * 2, 64) +
           (size_t)(tp * (K / PAGODA_RP_QK)) * sizeof(float);
}

void pagoda_rp_acts_init(pagoda_rp_acts *a, void *scratch, int64_t T, int64_t K, bool is_unsigned, bool kq)
{
    a->T = T;
    a->Tpad = round_up(T, PAGODA_RP_ROWS);
    a->K = K;
    a->kp = round_up(K, 64);
    a->kq = kq;
    a->nb = K / (kq ? 256 : PAGODA_RP_QK);
    a->is_unsigned = is_unsigned;
    a->xq = scratch;
    a->xd = (float *)((uint8_t *)scratch + round_up(a->Tpad * a->kp, 64));
    a->xs = (int16_t *)((uint8_t *)a->xd + round_up(a->Tpad * (K / PAGODA_RP_QK) * 4, 64));
    a->xs16 = (int16_t *)((uint8_t *)a->xs + round_up(a->Tpad * (K / PAGODA_RP_QK) * 2, 64));
    a->xm = (float *)((uint8_t *)a->xs16 + round_up(a->Tpad * (K / 16) * 2, 64));
}

/* One token's K-quant activations: the q8k quantizer's bytes and scale
 * per 256 values, and sums of 32 from its sums of 16. */
static void prep_kq_row(pagoda_rp_acts *a, const pagoda_vecdot_table *vt, const float *xr, uint8_t *q,
                        float *d, int16_t *xs, int16_t *xs16)
{
    pagoda_q8k_block blk;
    for (int64_t b = 0; b < a->nb; b++) {
        vt->quant_q8k(xr + b * 256, &blk, 256);
        d[b] = blk.d;
        memcpy(q + b * 256, blk.qs, 256);
        for (int j = 0; j < 8; j++) xs[8 * b + j] = (int16_t)(blk.bsums[2 * j] + blk.bsums[2 * j + 1]);
        memcpy(xs16 + 16 * b, blk.bsums, sizeof blk.bsums);
    }
}

void pagoda_rp_prep_acts(pagoda_rp_acts *a, const float *x, size_t x_stride, int64_t t0, int64_t t1)
{
    const pagoda_vecdot_table *vt = pagoda_cpu_vecdot();
    uint8_t flip = a->is_unsigned ? 0x80 : 0;
    for (int64_t t = t0; t < t1; t++) {
        uint8_t *q = a->xq + t * a->kp;
        float *d = a->xd + t * a->nb;
        int16_t *xs = a->xs + t * (a->K / PAGODA_RP_QK), *xs16 = a->xs16 + t * (a->K / 16);
        float *xm = a->xm + t * (a->K / PAGODA_RP_QK);
        memset(q + a->K, flip, (size_t)(a->kp - a->K));
        if (t >= a->T) {
            memset(q, flip, (size_t)a->K);
            memset(d, 0, sizeof(float) * (size_t)a->nb);
            memset(xm, 0, sizeof(float) * (size_t)(a->K / PAGODA_RP_QK));
            memset(xs, 0, sizeof(int16_t) * (size_t)(a->K / PAGODA_RP_QK));
            memset(xs16, 0, sizeof(int16_t) * (size_t)(a->K / 16));
            continue;
        }
        const float *xr = (const float *)((const uint8_t *)x + t * x_stride);
        if (a->kq) {
            prep_kq_row(a, vt, xr, q, d, xs, xs16);
            continue;
        }
        enum { CHUNK = 16 };
        pagoda_q8a_block blk[CHUNK];
        for (int64_t b0 = 0; b0 < a->nb; b0 += CHUNK) {
            int64_t nb = a->nb - b0 < CHUNK ? a->nb - b0 : CHUNK;
            vt->quant_q8a(xr + b0 * 32, blk, nb * 32);
            for (int64_t i = 0; i < nb; i++) {
                d[b0 + i] = blk[i].d;
                int32_t sum = 0;
                for (int j = 0; j < 32; j++) {
                    q[(b0 + i) * 32 + j] = (uint8_t)blk[i].qs[j] ^ flip;
                    sum += blk[i].qs[j];
                }
                /* the lanes kernels' d_x / 8 x s8 (s8 = 8 sum: pagoda_q8x8_block) */
                xm[b0 + i] = (blk[i].d * 0.125f) * (float)(8 * sum);
            }
        }
    }
}

/* ----------------------------------------------------------- plain-C GEMM */

/* Token t's outputs of group g that fall in [n0, n1). */
static void store_rows(float *out, size_t out_stride, int64_t t, int64_t g, int64_t n0, int64_t n1,
                       const float acc[PAGODA_RP_ROWS])
{
    float *o = (float *)((uint8_t *)out + t * out_stride);
    for (int n = 0; n < PAGODA_RP_ROWS; n++) {
        int64_t row = g * PAGODA_RP_ROWS + n;
        if (row >= n0 && row < n1) o[row] = acc[n];
    }
}

/* The 32-value blocks' reference: Q8_0 / Q4_0 (pagoda_rp_block) and Q4_1
 * (pagoda_rp_q41block: the same fields, then the mins, added after the
 * scale step as the lanes kernels do). */
static void gemm_ref32(const pagoda_rp_matrix *w, int64_t n0, int64_t n1, const pagoda_rp_acts *a, float *out,
                       size_t out_stride, bool q41)
{
    int off = a->is_unsigned ? 128 : 0;
    for (int64_t g = n0 / PAGODA_RP_ROWS; g * PAGODA_RP_ROWS < n1; g++)
        for (int64_t t = 0; t < a->T; t++) {
            float acc[PAGODA_RP_ROWS] = {0};
            const uint8_t *xq = a->xq + t * a->kp;
            for (int64_t b = 0; b < w->nb; b++) {
                const int8_t (*q)[4 * PAGODA_RP_ROWS];
                const float *d, *m = NULL;
                const int32_t *s128;
                if (q41) {
                    const pagoda_rp_q41block *blk = &w->q41blk[g * w->nb + b];
                    q = blk->q, d = blk->d, s128 = blk->s128, m = blk->m;
                } else {
                    const pagoda_rp_block *blk = &w->blk[g * w->nb + b];
                    q = blk->q, d = blk->d, s128 = blk->s128;
                }
                float dx = a->xd[t * a->nb + b], xm = m ? a->xm[t * a->nb + b] : 0.0f;
                for (int n = 0; n < PAGODA_RP_ROWS; n++) {
                    int32_t s = 0;
                    for (int k = 0; k < 32; k++) {
                        int xv = a->is_unsigned ? xq[b * 32 + k] : (int8_t)xq[b * 32 + k];
                        s += xv * q[k / 4][4 * n + k % 4];
                    }
                    if (off) s -= s128[n];
                    acc[n] += (float)s * (d[n] * dx);
                    if (m) acc[n] += m[n] * xm;
                }
            }
            store_rows(out, out_stride, t, g, n0, n1, acc);
        }
}

void pagoda_rp_gemm_ref(const pagoda_rp_matrix *w, int64_t n0, int64_t n1, const pagoda_rp_acts *a,
                        float *out, size_t out_stride)
{
    gemm_ref32(w, n0, n1, a, out, out_stride, false);
}

void pagoda_rp_gemm_q41_ref(const pagoda_rp_matrix *w, int64_t n0, int64_t n1, const pagoda_rp_acts *a,
                            float *out, size_t out_stride)
{
    gemm_ref32(w, n0, n1, a, out, out_stride, true);
}

void pagoda_rp_gemm_k_ref(const pagoda_rp_matrix *w, int64_t n0, int64_t n1, const pagoda_rp_acts *a,
                          float *out, size_t out_stride)
{
    for (int64_t g = n0 / PAGODA_RP_ROWS; g * PAGODA_RP_ROWS < n1; g++)
        for (int64_t t = 0; t < a->T; t++) {
            float acc[PAGODA_RP_ROWS] = {0};
            const int8_t *xq = (const int8_t *)a->xq + t * a->kp;
            const int16_t *xs = a->xs + t * (a->K / PAGODA_RP_QK);
            for (int64_t b = 0; b < w->nb; b++) {
                const pagoda_rp_kblock *blk = &w->kblk[g * w->nb + b];
                for (int n = 0; n < PAGODA_RP_ROWS; n++) {
                    int32_t s = 0, mm = 0;
                    for (int j = 0; j < 8; j++) {
                        int32_t dot = 0;
                        for (int k = 32 * j; k < 32 * j + 32; k++) dot += xq[b * 256 + k] * blk->q[k / 4][4 * n + k % 4];
                        s += dot * blk->sc[j][n];
                        mm += blk->mp[j / 2][2 * n + j % 2] * xs[8 * b + j];
                    }
                    acc[n] += a->xd[t * a->nb + b] * (blk->d[n] * (float)s - blk->dmin[n] * (float)mm);
                }
            }
            store_rows(out, out_stride, t, g, n0, n1, acc);
        }
}

void pagoda_rp_gemm_q6_ref(const pagoda_rp_matrix *w, int64_t n0, int64_t n1, const pagoda_rp_acts *a,
                           float *out, size_t out_stride)
{
    for (int64_t g = n0 / PAGODA_RP_ROWS; g * PAGODA_RP_ROWS < n1; g++)
        for (int64_t t = 0; t < a->T; t++) {
            float acc[PAGODA_RP_ROWS] = {0};
            const int8_t *xq = (const int8_t *)a->xq + t * a->kp;
            const int16_t *xs16 = a->xs16 + t * (a->K / 16);
            for (int64_t b = 0; b < w->nb; b++) {
                const pagoda_rp_q6block *blk = &w->q6blk[g * w->nb + b];
                for (int n = 0; n < PAGODA_RP_ROWS; n++) {
                    int32_t s = 0, off = 0;
                    for (int j = 0; j < 16; j++) {
                        int32_t dot = 0;
                        for (int k = 16 * j; k < 16 * j + 16; k++) dot += xq[b * 256 + k] * blk->q[k / 4][4 * n + k % 4];
                        s += dot * blk->sc[j][n];
                        off += blk->scp[j / 2][2 * n + j % 2] * xs16[16 * b + j];
                    }
                    acc[n] += a->xd[t * a->nb + b] * (blk->d[n] * (float)(s - 32 * off));
                }
            }
            store_rows(out, out_stride, t, g, n0, n1, acc);
        }
}

/* ------------------------------------------------------------------ cache */

typedef struct rp_region {
    const uint8_t *base;
    size_t size;
} rp_region;

typedef struct rp_entry {
    const void *w;
    int dtype;
    size_t w_stride;
    pagoda_rp_matrix m;
} rp_entry;

struct pagoda_rp_cache {
    rp_region *regions;
    int n_regions, cap_regions;
    rp_entry **entries;   /* each its own allocation: a matrix handed out stays put */
    int n_entries, cap_entries;
    size_t bytes;
};

pagoda_rp_cache *pagoda_rp_cache_create(void)
{
    return calloc(1, sizeof(pagoda_rp_cache));
}

void pagoda_rp_cache_destroy(pagoda_rp_cache *c)
{
    if (!c) return;
    for (int i = 0; i < c->n_entries; i++) {
        free(c->entries[i]->m.blk);
        free(c->entries[i]->m.kblk);
        free(c->entries[i]->m.q6blk);
        free(c->entries[i]->m.q41blk);
        free(c->entries[i]);
    }
    free(c->entries);
    free(c->regions);
    free(c);
}

int pagoda_rp_cache_add_region(pagoda_rp_cache *c, const void *base, size_t size)
{
    if (c->n_regions == c->cap_regions) {
        int cap = c->cap_regions ? 2 * c->cap_regions : 8;
        rp_region *r = realloc(c->regions, sizeof *r * (size_t)cap);
        if (!r) return PAGODA_ERR_NOMEM;
        c->regions = r;
        c->cap_regions = cap;
    }
    c->regions[c->n_regions++] = (rp_region){.base = base, .size = size};
    return PAGODA_OK;
}

void pagoda_rp_cache_invalidate(pagoda_rp_cache *c, const void *base, size_t size)
{
    const uint8_t *lo = base, *hi = lo + size;
    for (int i = 0; i < c->n_entries;) {
        rp_entry *e = c->entries[i];
        const uint8_t *elo = e->w, *ehi = elo + (size_t)e->m.N * e->w_stride;
        if (elo < hi && lo < ehi) {
            c->bytes -= pagoda_rp_bytes(e->dtype, e->m.N, e->m.K);
            free(e->m.blk);
            free(e->m.kblk);
            free(e->m.q6blk);
            free(e->m.q41blk);
            free(e);
            c->entries[i] = c->entries[--c->n_entries];
        } else {
            i++;
        }
    }
}

void pagoda_rp_cache_remove_region(pagoda_rp_cache *c, const void *base)
{
    for (int i = 0; i < c->n_regions; i++)
        if (c->regions[i].base == base) {
            pagoda_rp_cache_invalidate(c, base, c->regions[i].size);
            c->regions[i] = c->regions[--c->n_regions];
            return;
        }
}

size_t pagoda_rp_cache_bytes(const pagoda_rp_cache *c, int *count)
{
    if (count) *count = c ? c->n_entries : 0;
    return c ? c->bytes : 0;
}

static bool in_region(const pagoda_rp_cache *c, const void *w, size_t bytes)
{
    const uint8_t *p = w;
    for (int i = 0; i < c->n_regions; i++) {
        const rp_region *r = &c->regions[i];
        if (p >= r->base && bytes <= r->size && (size_t)(p - r->base) <= r->size - bytes) return true;
    }
    return false;
}

typedef struct pack_task {
    pagoda_rp_matrix *m;
    const void *w;
    size_t w_stride;
    int64_t per;
} pack_task;

static void pack_part(void *arg, int part, int n_parts)
{
    pack_task *p = arg;
    (void)n_parts;
    int64_t g0 = p->per * part, g1 = g0 + p->per < p->m->ng ? g0 + p->per : p->m->ng;
    pagoda_rp_pack_groups(p->m, p->w, p->w_stride, g0, g1);
}

const pagoda_rp_matrix *pagoda_rp_cache_get(pagoda_rp_cache *c, struct pagoda_threadpool *pool,
                                            const void *w, int dtype, size_t w_stride, int64_t N,
                                            int64_t K)
{
    bool kq = pagoda_rp_type_kquant(dtype);
    if (!c || !pagoda_rp_type_supported(dtype) || N <= 0 || K <= 0 || K % (kq ? 256 : PAGODA_RP_QK))
        return NULL;
    for (int i = 0; i < c->n_entries; i++) {
        rp_entry *e = c->entries[i];
        if (e->w == w && e->dtype == dtype && e->w_stride == w_stride && e->m.N == N && e->m.K == K)
            return &e->m;
    }
    size_t row_bytes = pagoda_dtype_row_bytes(dtype, K);
    if (!in_region(c, w, (size_t)(N - 1) * w_stride + row_bytes)) return NULL;
    if (c->n_entries == c->cap_entries) {
        int cap = c->cap_entries ? 2 * c->cap_entries : 64;
        rp_entry **e = realloc(c->entries, sizeof *e * (size_t)cap);
        if (!e) return NULL;
        c->entries = e;
        c->cap_entries = cap;
    }
    pagoda_rp_matrix m = {.dtype = dtype, .N = N, .K = K, .ng = (N + PAGODA_RP_ROWS - 1) / PAGODA_RP_ROWS,
                          .nb = K / (kq ? 256 : PAGODA_RP_QK)};
    size_t bytes = pagoda_rp_bytes(dtype, N, K);
    void *blk = aligned_alloc(64, bytes);
    if (dtype == PAGODA_DTYPE_Q6_K)
        m.q6blk = blk;
    else if (dtype == PAGODA_DTYPE_Q4_1)
        m.q41blk = blk;
    else if (kq)
        m.kblk = blk;
    else
        m.blk = blk;
    rp_entry *e = malloc(sizeof *e);
    if (!blk || !e) {
        free(blk);
        free(e);
        return NULL;
    }
    int nth = pagoda_threadpool_size(pool);
    int parts = nth * 4;
    pack_task p = {.m = &m, .w = w, .w_stride = w_stride, .per = (m.ng + parts - 1) / parts};
    pagoda_threadpool_run_parts(pool, pack_part, &p, (int)((m.ng + p.per - 1) / p.per));
    *e = (rp_entry){.w = w, .dtype = dtype, .w_stride = w_stride, .m = m};
    c->entries[c->n_entries++] = e;
    c->bytes += bytes;
    return &e->m;
}
