/*
 * experts.c: the mixture-of-experts ops of the CPU backend (ABI 1.5):
 * matmul_experts, the expert matmuls over a 3-D weight, and moe_combine,
 * the routed rows' weighted sum.
 *
 * matmul_experts groups the (row, expert) pairs by expert (a stable
 * counting sort) and runs each active expert as one matrix of matmul.c's
 * machinery (pagoda_cpu_mm, matmul_task.h) over its own rows, so an expert
 * that several tokens chose is read once per call. The activations are
 * prepared once per call, in three pool runs whatever the number of
 * experts: (1) x's rows quantized once (a token that chose 8 experts is
 * quantized once, not 8 times); (2) per expert, its rows gathered and
 * laid out as its kernels read them (the int8 rows, Q4_0's groups, the
 * tokens-in-lanes interleave, F32 rows for the float types); (3) the dot
 * products, in row parts of the active experts (experts x output-row
 * tiles, at least 4 parts per thread per pool run, so a decode's experts
 * of one row share a run), the heaviest experts first, so decode (one row
 * per expert, many experts) and prefill (dozens of rows per expert) both
 * spread over the threads. Experts whose rows reach the sgemm crossover
 * (F32 from 3 rows, BF16 / Q4_1 from 32) run pagoda_cpu_matmul on their
 * gathered rows afterwards. The results of each expert's rows equal
 * pagoda_cpu_matmul over those rows bit for bit (same plan for the same
 * row count, same bytes of activations, same kernels).
 *
 * Not for: routing, top-k and scoring (the forward pass), argument
 * validation (backend.c), the inner loops (kernels/).
 */
#include "kernels.h"

#include <stdlib.h>
#include <string.h>

#include "matmul_task.h"
#include "vecdot.h"

/* Parts per thread of the dot pass, and its smallest and largest part
 * (rows). The largest keeps parts short (an expert's 768 rows of one
 * token are ~0.1 ms): the caller waits only for parts already claimed, so
 * short ones leave a short tail when a worker is descheduled on a loaded
 * machine. */
#define PARTS_PER_THREAD 4
#define MIN_ROWS_PER_PART 16
#define MAX_ROWS_PER_PART 128
/* A part's cost is rows x (tokens + READ_COST): the weight rows' read
 * counts as this many tokens' dots (decode is bandwidth-bound). */
#define READ_COST 4
/* Below this many floats of x to prepare, the preparation stays on the
 * caller (waking the pool costs more). */
#define PREP_POOL_MIN 32768

typedef struct xp_expert {
    int32_t e;
    int64_t off, n;   /* its rows: sorted rows [off, off + n) */
    int64_t g_off;    /* its first group of eight in the interleaved buffers */
    bool direct;      /* its rows are consecutive in out: written in place */
    bool sgemm;       /* runs pagoda_cpu_matmul on its gathered rows */
    int64_t rpp;      /* rows per part */
    int part0;        /* its first part in the dot pass */
    pagoda_cpu_mm m;
} xp_expert;

typedef struct xp_call {
    const pagoda_vecdot_table *vt;
    const float *x;
    size_t x_stride;
    const int32_t *x_rows;
    int dtype;
    int64_t K, N, R;
    bool quant;               /* int8 activations (xq_stride > 0) */
    bool need_f32;            /* some expert reads gathered F32 rows */
    const int32_t *perm;      /* sorted row -> row r of the call */
    const int32_t *src;       /* x_rows case: the distinct x rows, n_src */
    const int32_t *slot;      /* x_rows case: x row -> its index in src */
    int64_t n_src;
    uint8_t *xq_src;          /* x_rows case: src's rows quantized */
    uint8_t *xq;              /* sorted rows quantized, xq_stride apart */
    size_t xq_stride;
    uint8_t *xp;              /* sorted rows as prep_q4_0 groups, xp_stride apart */
    size_t xp_stride;
    uint8_t *x8;              /* groups of eight (q8x8 / q8kx8 blocks) */
    float *xf;                /* sorted rows, F32, K apart */
    float *xf8;               /* F32 transposed by eights */
    float *ys;                /* sorted output rows, N apart */
    float *out;
    size_t out_stride;
    xp_expert *ex;
    int n_ex;                 /* pool-path experts first, n_pool of them */
    int n_pool;
    int part_base;            /* the dot run's first part (of ex[0]) */
} xp_call;

static void split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi)
{
    int64_t per = (n + nth - 1) / nth;
    *lo = per * ith < n ? per * ith : n;
    *hi = *lo + per < n ? *lo + per : n;
}

static const float *xrow(const xp_call *c, int64_t r)
{
    return (const float *)((const uint8_t *)c->x + (size_t)r * c->x_stride);
}

static void quant_one(const xp_call *c, const float *x, void *y)
{
    if (pagoda_cpu_act_q8k(c->dtype))
        c->vt->quant_q8k(x, y, c->K);
    else
        c->vt->quant_q8a(x, y, c->K);
}

/* (1) quantize: x_rows given: each distinct x row once; else the rows in
 * sorted order. */
static void quant_task(void *arg, int ith, int nth)
{
    const xp_call *c = arg;
    int64_t lo, hi;
    if (c->x_rows) {
        split(c->n_src, ith, nth, &lo, &hi);
        for (int64_t i = lo; i < hi; i++) quant_one(c, xrow(c, c->src[i]), c->xq_src + (size_t)i * c->xq_stride);
        return;
    }
    split(c->R, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) quant_one(c, xrow(c, c->perm[i]), c->xq + (size_t)i * c->xq_stride);
}

/* (2) one expert's rows gathered and laid out as its plan reads them. */
static void prep_expert(const xp_call *c, const xp_expert *x)
{
    const pagoda_cpu_mm *m = &x->m;
    for (int64_t i = x->off; i < x->off + x->n; i++) {
        int64_t r = c->perm[i];
        int64_t xr = c->x_rows ? c->x_rows[r] : r;
        if (c->quant && c->x_rows && !x->sgemm)
            memcpy(c->xq + (size_t)i * c->xq_stride, c->xq_src + (size_t)c->slot[xr] * c->xq_stride, c->xq_stride);
        if (m->xp)
            c->vt->prep_q4_0((const pagoda_q8a_block *)(c->xq + (size_t)i * c->xq_stride),
                             (pagoda_q4x_group *)(c->xp + (size_t)i * c->xp_stride), c->K / 32);
        if (!c->quant || x->sgemm)
            memcpy(c->xf + (size_t)i * (size_t)c->K, xrow(c, xr), sizeof(float) * (size_t)c->K);
    }
    if (x->sgemm) return;
    for (int64_t g = 0; g < (x->n + 7) / 8; g++) {
        int64_t t0 = 8 * g, nt = x->n - t0 < 8 ? x->n - t0 : 8;
        const uint8_t *q = c->xq + (size_t)(x->off + t0) * c->xq_stride;
        if (m->kx8)
            pagoda_cpu_prep_k_x8((const pagoda_q8k_block *)q, c->xq_stride, (int)nt, c->K / 256,
                                 m->kx8 + g * (c->K / 256));
        else if (m->x8)
            pagoda_cpu_prep_x8((const pagoda_q8a_block *)q, c->xq_stride, (int)nt, c->K / 32, m->x8 + g * (c->K / 32));
        else if (m->xf8)
            pagoda_cpu_prep_f32_x8(c->xf + (size_t)(x->off + t0) * (size_t)c->K, sizeof(float) * (size_t)c->K,
                                   (int)nt, c->K, m->xf8 + g * c->K * 8);
        else
            break;
    }
}

static void prep_task(void *arg, int part, int n_parts)
{
    const xp_call *c = arg;
    (void)n_parts;
    prep_expert(c, &c->ex[part]);
}

/* (3) one part: rows [n0, n1) of one expert, then its rows scattered to
 * out unless they were written in place. */
static void scatter(const xp_call *c, const xp_expert *x, int64_t n0, int64_t n1)
{
    if (x->direct) return;
    for (int64_t i = x->off; i < x->off + x->n; i++)
        memcpy((uint8_t *)c->out + (size_t)c->perm[i] * c->out_stride + (size_t)n0 * sizeof(float),
               c->ys + (size_t)i * (size_t)c->N + n0, sizeof(float) * (size_t)(n1 - n0));
}

static void dot_task(void *arg, int part, int n_parts)
{
    const xp_call *c = arg;
    (void)n_parts;
    part += c->part_base;
    int lo = 0, hi = c->n_pool - 1;
    while (lo < hi) { /* the last expert whose first part is <= part */
        int mid = (lo + hi + 1) / 2;
        if (c->ex[mid].part0 <= part) lo = mid; else hi = mid - 1;
    }
    const xp_expert *x = &c->ex[lo];
    int64_t n0 = (int64_t)(part - x->part0) * x->rpp, n1 = n0 + x->rpp < c->N ? n0 + x->rpp : c->N;
    pagoda_cpu_mm_rows(&x->m, n0, n1);
    scatter(c, x, n0, n1);
}

/* Pool-path experts first, then the sgemm ones; each group by rows, the
 * most first (their parts are the longest: claimed first, they do not
 * trail at the end), ties by expert id. */
static int cmp_expert(const void *a, const void *b)
{
    const xp_expert *x = a, *y = b;
    if (x->sgemm != y->sgemm) return x->sgemm ? 1 : -1;
    if (x->n != y->n) return x->n > y->n ? -1 : 1;
    return x->e < y->e ? -1 : x->e > y->e;
}

static size_t align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

int pagoda_cpu_matmul_experts(pagoda_cpu_exec *ex, const float *x, size_t x_stride, int64_t X,
                              const int32_t *x_rows, const void *w, int dtype, size_t w_stride,
                              int64_t N, int64_t K, size_t expert_stride, const int32_t *ids,
                              int64_t R, float *out, size_t out_stride)
{
    if (!pagoda_cpu_weight_type_supported(dtype)) return PAGODA_ERR_UNSUPPORTED;
    if (R <= 0 || N <= 0) return PAGODA_OK;
    int32_t E = 0; /* experts spanned: ids are checked, so the largest + 1 */
    for (int64_t r = 0; r < R; r++)
        if (ids[r] + 1 > E) E = ids[r] + 1;

    /* Sizes of the scratch pieces, before anything is placed. */
    pagoda_cpu_mm probe = {.vt = pagoda_cpu_vecdot(), .T = 1, .K = K, .N = N, .dtype = dtype};
    pagoda_cpu_mm_plan(ex, &probe);
    size_t xq_stride = probe.xq_stride;
    size_t grp_stride = (size_t)((K / 32 + 3) / 4) * sizeof(pagoda_q4x_group);
    size_t x8_per_group = pagoda_cpu_act_q8k(dtype) ? (size_t)(K / 256) * sizeof(pagoda_q8kx8_block)
                        : (size_t)(K / 32) * sizeof(pagoda_q8x8_block);
    size_t f8_per_group = sizeof(float) * 8 * (size_t)K;
    int64_t n_src = 0;
    size_t sz_idx = align64(sizeof(int32_t) * (size_t)(R + 2 * E + 1)) +
                    align64(sizeof(xp_expert) * (size_t)E) +
                    (x_rows ? align64(sizeof(int32_t) * (size_t)(X + R)) : 0);
    uint8_t *base = pagoda_cpu_scratch_aux(ex, sz_idx, 0);
    if (!base) return PAGODA_ERR_NOMEM;

    /* Counting sort of the rows by expert (stable). */
    int32_t *perm = (int32_t *)base;
    int32_t *start = perm + R;          /* [E + 1] */
    int32_t *fill = start + E + 1;      /* [E]: each expert's cursor */
    xp_expert *exps = (xp_expert *)(base + align64(sizeof(int32_t) * (size_t)(R + 2 * E + 1)));
    int32_t *slot = NULL, *src = NULL;
    memset(start, 0, sizeof(int32_t) * (size_t)(E + 1));
    for (int64_t r = 0; r < R; r++) start[ids[r] + 1]++;
    for (int32_t e = 0; e < E; e++) start[e + 1] += start[e];
    memcpy(fill, start, sizeof(int32_t) * (size_t)E);
    for (int64_t r = 0; r < R; r++) perm[fill[ids[r]]++] = (int32_t)r;
    if (x_rows) {
        slot = (int32_t *)((uint8_t *)exps + align64(sizeof(xp_expert) * (size_t)E));
        src = slot + X;
        for (int64_t i = 0; i < X; i++) slot[i] = -1;
        for (int64_t r = 0; r < R; r++)
            if (slot[x_rows[r]] < 0) {
                slot[x_rows[r]] = (int32_t)n_src;
                src[n_src++] = x_rows[r];
            }
    }

    /* The active experts, each planned for its row count. */
    xp_call c = {.vt = probe.vt, .x = x, .x_stride = x_stride, .x_rows = x_rows, .dtype = dtype,
                 .K = K, .N = N, .R = R, .quant = xq_stride > 0, .perm = perm, .src = src,
                 .slot = slot, .n_src = n_src, .xq_stride = xq_stride, .xp_stride = grp_stride,
                 .out = out, .out_stride = out_stride, .ex = exps};
    int64_t groups = 0;
    bool any_xp = false, any_ys = false;
    for (int32_t e = 0; e < E; e++) {
        int64_t n = start[e + 1] - start[e];
        if (!n) continue;
        xp_expert *xe = &exps[c.n_ex++];
        *xe = (xp_expert){.e = e, .off = start[e], .n = n, .sgemm = pagoda_cpu_mm_sgemm_path(ex, dtype, n)};
        xe->direct = true;
        for (int64_t j = 1; j < n && xe->direct; j++) xe->direct = perm[xe->off + j] == perm[xe->off] + j;
        if (!xe->direct) any_ys = true;
        if (xe->sgemm) {
            c.need_f32 = true;
            continue;
        }
        xe->m = (pagoda_cpu_mm){.vt = c.vt, .T = n, .K = K, .N = N, .dtype = dtype,
                                .w = (const uint8_t *)w + (size_t)e * expert_stride, .w_stride = w_stride};
        pagoda_cpu_mm_plan(ex, &xe->m);
        if (xe->m.xp_stride) any_xp = true;
        if (xe->m.gemm_x8 || xe->m.gemm_kx8 || xe->m.gemm_f16_x8) {
            xe->g_off = groups;
            groups += (n + 7) / 8;
        }
        if (!c.quant) c.need_f32 = true;
        c.n_pool++;
    }
    qsort(exps, (size_t)c.n_ex, sizeof *exps, cmp_expert);

    /* The rest of the aux scratch: activations and sorted outputs. */
    size_t o_xqs = sz_idx, o_xq = o_xqs + (x_rows && c.quant ? align64(xq_stride * (size_t)n_src) : 0);
    size_t o_xp = o_xq + (c.quant ? align64(xq_stride * (size_t)R) : 0);
    size_t o_x8 = o_xp + (any_xp ? align64(grp_stride * (size_t)R) : 0);
    size_t o_xf = o_x8 + (c.quant ? align64(x8_per_group * (size_t)groups) : 0);
    size_t o_xf8 = o_xf + (c.need_f32 ? align64(sizeof(float) * (size_t)K * (size_t)R) : 0);
    size_t o_ys = o_xf8 + (!c.quant ? align64(f8_per_group * (size_t)groups) : 0);
    size_t total = o_ys + (any_ys ? align64(sizeof(float) * (size_t)N * (size_t)R) : 0);
    uint8_t *nb = pagoda_cpu_scratch_aux(ex, total, sz_idx);
    if (!nb) return PAGODA_ERR_NOMEM;
    base = nb; /* the index part was kept if the scratch grew: rebase its pointers */
    perm = (int32_t *)base;
    exps = (xp_expert *)(base + align64(sizeof(int32_t) * (size_t)(R + 2 * E + 1)));
    c.perm = perm;
    c.ex = exps;
    if (x_rows) {
        c.slot = (int32_t *)((uint8_t *)exps + align64(sizeof(xp_expert) * (size_t)E));
        c.src = c.slot + X;
    }
    c.xq_src = base + o_xqs;
    c.xq = base + o_xq;
    c.xp = any_xp ? base + o_xp : NULL;
    c.x8 = base + o_x8;
    c.xf = (float *)(base + o_xf);
    c.xf8 = (float *)(base + o_xf8);
    c.ys = (float *)(base + o_ys);

    /* Point each pool expert's plan at its pieces; its parts. */
    int nth = pagoda_threadpool_size(ex->pool);
    int64_t cost = 0;
    for (int i = 0; i < c.n_pool; i++) cost += (exps[i].n + READ_COST) * N;
    int64_t per_part = cost / ((int64_t)nth * PARTS_PER_THREAD);
    if (per_part < 1) per_part = 1;
    int parts = 0;
    for (int i = 0; i < c.n_ex; i++) {
        xp_expert *xe = &exps[i];
        pagoda_cpu_mm *m = &xe->m;
        float *o = xe->direct ? (float *)((uint8_t *)out + (size_t)perm[xe->off] * out_stride)
                              : c.ys + (size_t)xe->off * (size_t)N;
        size_t os = xe->direct ? out_stride : sizeof(float) * (size_t)N;
        m->out = o;
        m->out_stride = os;
        if (xe->sgemm) continue;
        m->x = c.xf + (size_t)xe->off * (size_t)K;
        m->x_stride = sizeof(float) * (size_t)K;
        if (c.quant) m->xq = c.xq + (size_t)xe->off * xq_stride;
        if (m->xp_stride) m->xp = c.xp + (size_t)xe->off * grp_stride;
        if (m->gemm_kx8) m->kx8 = (pagoda_q8kx8_block *)(c.x8 + (size_t)xe->g_off * x8_per_group);
        else if (m->gemm_x8) m->x8 = (pagoda_q8x8_block *)(c.x8 + (size_t)xe->g_off * x8_per_group);
        if (m->gemm_f16_x8) m->xf8 = c.xf8 + (size_t)xe->g_off * (size_t)K * 8;
        int64_t np = ((xe->n + READ_COST) * N + per_part - 1) / per_part;
        int64_t max_np = (N + MIN_ROWS_PER_PART - 1) / MIN_ROWS_PER_PART;
        if (np > max_np) np = max_np;
        if (np < 1) np = 1;
        int64_t rpp = (N + np - 1) / np;
        rpp = (rpp + 3) / 4 * 4;
        if (rpp < MIN_ROWS_PER_PART) rpp = MIN_ROWS_PER_PART;
        if (rpp > MAX_ROWS_PER_PART) rpp = MAX_ROWS_PER_PART;
        xe->rpp = rpp;
        xe->part0 = parts;
        parts += (int)((N + rpp - 1) / rpp);
    }

    /* (1) + (2): the activations, on the pool when there is enough. */
    bool pool = (R * K >= PREP_POOL_MIN) && nth > 1;
    if (c.quant) {
        if (pool)
            pagoda_threadpool_run(ex->pool, quant_task, &c);
        else
            quant_task(&c, 0, 1);
    }
    if (pool)
        pagoda_threadpool_run_parts(ex->pool, prep_task, &c, c.n_ex);
    else
        for (int i = 0; i < c.n_ex; i++) prep_expert(&c, &exps[i]);

    /* (3): the dots, in runs of consecutive experts of at least
     * PARTS_PER_THREAD parts per thread each (decode: a couple of experts
     * per run; prefill: one). Measured on the 2-core VM at load 25, one
     * run over every expert's parts took 3x the wall time of these runs
     * for the same CPU time (16 sequences, Q4_K / Q8_0): threads kept busy
     * through one long run are preempted mid-part and the run waits for
     * them; short runs end, and start again, between slices. */
    int run_min = nth * PARTS_PER_THREAD;
    for (int i = 0; i < c.n_pool;) {
        int j = i, np = 0;
        while (j < c.n_pool && np < run_min) np += (int)((N + exps[j].rpp - 1) / exps[j].rpp), j++;
        xp_call run = c;
        run.ex = exps + i;
        run.n_pool = j - i;
        run.part_base = exps[i].part0;
        pagoda_threadpool_run_parts(ex->pool, dot_task, &run, np);
        i = j;
    }

    /* The sgemm experts, one after another (OpenBLAS's threads inside). */
    for (int i = c.n_pool; i < c.n_ex; i++) {
        xp_expert *xe = &exps[i];
        int st = pagoda_cpu_matmul(ex, c.xf + (size_t)xe->off * (size_t)K, sizeof(float) * (size_t)K, xe->n, K,
                                   (const uint8_t *)w + (size_t)xe->e * expert_stride, dtype, w_stride, N, NULL,
                                   xe->m.out, xe->m.out_stride);
        if (st) return st;
        scatter(&c, xe, 0, N);
    }
    return PAGODA_OK;
}

/* ------------------------------------------------------------ moe_combine */

typedef struct comb_call {
    const float *y;
    size_t y_stride;
    int64_t R, C;
    const int32_t *dst;
    const float *wt;
    bool accumulate;
    float *out;
    size_t out_stride;
    int64_t out_rows, per_part;
} comb_call;

static void combine_cols(const comb_call *c, int64_t c0, int64_t c1)
{
    if (!c->accumulate)
        for (int64_t i = 0; i < c->out_rows; i++)
            memset((uint8_t *)c->out + (size_t)i * c->out_stride + (size_t)c0 * sizeof(float), 0,
                   sizeof(float) * (size_t)(c1 - c0));
    for (int64_t r = 0; r < c->R; r++) {
        const float *y = (const float *)((const uint8_t *)c->y + (size_t)r * c->y_stride);
        float *o = (float *)((uint8_t *)c->out + (size_t)c->dst[r] * c->out_stride);
        float a = c->wt[r];
        for (int64_t j = c0; j < c1; j++) o[j] += a * y[j];
    }
}

static void combine_task(void *arg, int part, int n_parts)
{
    const comb_call *c = arg;
    (void)n_parts;
    int64_t c0 = (int64_t)part * c->per_part, c1 = c0 + c->per_part < c->C ? c0 + c->per_part : c->C;
    if (c0 < c1) combine_cols(c, c0, c1);
}

void pagoda_cpu_moe_combine(pagoda_cpu_exec *ex, const float *y, size_t y_stride, int64_t R, int64_t C,
                            const int32_t *dst_rows, const float *weights, bool accumulate, float *out,
                            size_t out_stride, int64_t out_rows)
{
    comb_call c = {.y = y, .y_stride = y_stride, .R = R, .C = C, .dst = dst_rows, .wt = weights,
                   .accumulate = accumulate, .out = out, .out_stride = out_stride, .out_rows = out_rows};
    int nth = ex ? pagoda_threadpool_size(ex->pool) : 1;
    if (nth < 2 || (R + out_rows) * C < PREP_POOL_MIN || C < 32) {
        combine_cols(&c, 0, C);
        return;
    }
    /* Column ranges of whole cache lines (16 floats), a couple per thread:
     * every part adds the rows in the stated order, so the bits are the
     * serial ones. */
    int64_t parts = (int64_t)nth * 2;
    int64_t per = (C + parts - 1) / parts;
    per = (per + 15) / 16 * 16;
    c.per_part = per;
    pagoda_threadpool_run_parts(ex->pool, combine_task, &c, (int)((C + per - 1) / per));
}
