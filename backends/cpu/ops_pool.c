/*
 * ops_pool.c: the row ops (ops.c) spread over the thread pool when a call
 * has enough rows: RMSNorm, RoPE, add, SwiGLU / GeGLU, scale and the KV
 * store are independent per row (token), so each part runs the serial
 * kernel on a range of rows and the results are the serial ones exactly.
 * A decode step's few rows stay on the caller: waking the pool costs more
 * than the work (a 768-wide row is well under a microsecond).
 * Not for: the kernels themselves (ops.c), or matmul and attention, which
 * split their own work (matmul.c, attention.c).
 */
#include "kernels.h"

/* From this many floats of work per call (about 20 us on one core: a
 * 512-token prefill's RMSNorm at dim 768 is 393,216) the rows go to the
 * pool, in up to PARTS_PER_THREAD parts per thread of at least MIN_ROWS. */
#define POOL_MIN_WORK 32768
#define PARTS_PER_THREAD 2
#define MIN_ROWS 4

typedef void (*range_fn)(const void *args, int64_t r0, int64_t r1);

typedef struct rows_job {
    range_fn fn;
    const void *args;
    int64_t rows, per_part;
} rows_job;

static void rows_worker(void *arg, int part, int n_parts)
{
    const rows_job *j = arg;
    (void)n_parts;
    int64_t r0 = (int64_t)part * j->per_part, r1 = r0 + j->per_part < j->rows ? r0 + j->per_part : j->rows;
    if (r0 < r1) j->fn(j->args, r0, r1);
}

/* fn over rows [0, rows), on the pool when rows x work_per_row floats
 * are worth it. */
static void run_rows(pagoda_cpu_exec *ex, int64_t rows, int64_t work_per_row, range_fn fn,
                     const void *args)
{
    int nth = ex ? pagoda_threadpool_size(ex->pool) : 1;
    if (nth < 2 || rows < 2 * MIN_ROWS || rows * work_per_row < POOL_MIN_WORK) {
        fn(args, 0, rows);
        return;
    }
    int64_t parts = (int64_t)nth * PARTS_PER_THREAD;
    if (parts > rows / MIN_ROWS) parts = rows / MIN_ROWS;
    rows_job j = {.fn = fn, .args = args, .rows = rows, .per_part = (rows + parts - 1) / parts};
    pagoda_threadpool_run_parts(ex->pool, rows_worker, &j, (int)((rows + j.per_part - 1) / j.per_part));
}

#define AT(p, stride, r) ((void *)((uint8_t *)(p) + (size_t)(r) * (stride)))
#define CAT(p, stride, r) ((const void *)((const uint8_t *)(p) + (size_t)(r) * (stride)))

/* --------------------------------------------------------------- rms_norm */

typedef struct norm_args {
    const float *x, *w;
    size_t xs, os;
    float eps, *out;
    int64_t cols;
} norm_args;

static void norm_range(const void *v, int64_t r0, int64_t r1)
{
    const norm_args *a = v;
    pagoda_cpu_rms_norm(CAT(a->x, a->xs, r0), a->xs, a->w, a->eps, AT(a->out, a->os, r0), a->os, r1 - r0,
                        a->cols);
}

void pagoda_cpu_rms_norm_mt(pagoda_cpu_exec *ex, const float *x, size_t x_stride, const float *w, float eps,
                            float *out, size_t out_stride, int64_t rows, int64_t cols)
{
    norm_args a = {.x = x, .w = w, .xs = x_stride, .os = out_stride, .eps = eps, .out = out, .cols = cols};
    run_rows(ex, rows, 2 * cols, norm_range, &a);
}

/* ------------------------------------------------------------------- rope */

typedef struct rope_args {
    float *x;
    size_t xs;
    int n_heads, head_dim;
    const int32_t *positions;
    const pagoda_rope_params *p;
} rope_args;

static void rope_range(const void *v, int64_t r0, int64_t r1)
{
    const rope_args *a = v;
    pagoda_cpu_rope(AT(a->x, a->xs, r0), a->xs, r1 - r0, a->n_heads, a->head_dim, a->positions + r0, a->p);
}

void pagoda_cpu_rope_mt(pagoda_cpu_exec *ex, float *x, size_t x_stride, int64_t n_tokens, int n_heads,
                        int head_dim, const int32_t *positions, const pagoda_rope_params *p)
{
    rope_args a = {.x = x, .xs = x_stride, .n_heads = n_heads, .head_dim = head_dim, .positions = positions,
                   .p = p};
    /* a token's cos/sin (in double) cost as much as rotating a few heads */
    run_rows(ex, n_tokens, (int64_t)n_heads * p->n_rot + 16 * p->n_rot, rope_range, &a);
}

/* ------------------------------------------------- add, gated, scale */

typedef struct bin_args {
    const float *a, *b;
    size_t as, bs, os;
    float *out, s, lim;
    int64_t cols;
    int op;  /* 0 add, 1 swiglu, 2 geglu, 3 scale, 4 swiglu_oai (alpha s, limit lim) */
} bin_args;

static void bin_range(const void *v, int64_t r0, int64_t r1)
{
    const bin_args *a = v;
    const float *x = CAT(a->a, a->as, r0), *y = a->b ? CAT(a->b, a->bs, r0) : NULL;
    float *o = AT(a->out, a->os, r0);
    switch (a->op) {
    case 0: pagoda_cpu_add(x, a->as, y, a->bs, o, a->os, r1 - r0, a->cols); break;
    case 1: pagoda_cpu_swiglu(x, a->as, y, a->bs, o, a->os, r1 - r0, a->cols); break;
    case 2: pagoda_cpu_geglu(x, a->as, y, a->bs, o, a->os, r1 - r0, a->cols); break;
    case 4: pagoda_cpu_swiglu_oai(x, a->as, y, a->bs, a->s, a->lim, o, a->os, r1 - r0, a->cols); break;
    default: pagoda_cpu_scale(x, a->as, a->s, o, a->os, r1 - r0, a->cols); break;
    }
}

void pagoda_cpu_add_mt(pagoda_cpu_exec *ex, const float *a, size_t a_stride, const float *b, size_t b_stride,
                       float *out, size_t out_stride, int64_t rows, int64_t cols)
{
    bin_args x = {.a = a, .b = b, .as = a_stride, .bs = b_stride, .os = out_stride, .out = out, .cols = cols, .op = 0};
    run_rows(ex, rows, cols, bin_range, &x);
}

void pagoda_cpu_swiglu_mt(pagoda_cpu_exec *ex, const float *gate, size_t g_stride, const float *up,
                          size_t u_stride, float *out, size_t out_stride, int64_t rows, int64_t cols)
{
    bin_args x = {.a = gate, .b = up, .as = g_stride, .bs = u_stride, .os = out_stride, .out = out, .cols = cols,
                  .op = 1};
    run_rows(ex, rows, 4 * cols, bin_range, &x);
}

void pagoda_cpu_geglu_mt(pagoda_cpu_exec *ex, const float *gate, size_t g_stride, const float *up,
                         size_t u_stride, float *out, size_t out_stride, int64_t rows, int64_t cols)
{
    bin_args x = {.a = gate, .b = up, .as = g_stride, .bs = u_stride, .os = out_stride, .out = out, .cols = cols,
                  .op = 2};
    run_rows(ex, rows, 4 * cols, bin_range, &x);
}

void pagoda_cpu_swiglu_oai_mt(pagoda_cpu_exec *ex, const float *gate, size_t g_stride, const float *up,
                              size_t u_stride, float alpha, float limit, float *out, size_t out_stride,
                              int64_t rows, int64_t cols)
{
    bin_args x = {.a = gate, .b = up, .as = g_stride, .bs = u_stride, .os = out_stride, .out = out,
                  .s = alpha, .lim = limit, .cols = cols, .op = 4};
    run_rows(ex, rows, 4 * cols, bin_range, &x);
}

void pagoda_cpu_scale_mt(pagoda_cpu_exec *ex, const float *x, size_t x_stride, float s, float *out,
                         size_t out_stride, int64_t rows, int64_t cols)
{
    bin_args a = {.a = x, .as = x_stride, .os = out_stride, .out = out, .s = s, .cols = cols, .op = 3};
    run_rows(ex, rows, cols, bin_range, &a);
}

/* --------------------------------------------------------------- kv_write */

typedef struct kvw_args {
    void *pool;
    const pagoda_kv_layout *L;
    int layer;
    const float *k, *v;
    size_t ks, vs;
    const int32_t *slots;
} kvw_args;

static void kvw_range(const void *p, int64_t r0, int64_t r1)
{
    const kvw_args *a = p;
    pagoda_cpu_kv_write(a->pool, a->L, a->layer, CAT(a->k, a->ks, r0), a->ks, CAT(a->v, a->vs, r0), a->vs,
                        a->slots + r0, (int32_t)(r1 - r0));
}

void pagoda_cpu_kv_write_mt(pagoda_cpu_exec *ex, void *pool, const pagoda_kv_layout *L, int layer,
                            const float *k, size_t k_stride, const float *v, size_t v_stride,
                            const int32_t *slots, int32_t n)
{
    kvw_args a = {.pool = pool, .L = L, .layer = layer, .k = k, .v = v, .ks = k_stride, .vs = v_stride,
                  .slots = slots};
    /* distinct tokens write distinct slots (the batch's slots are unique) */
    run_rows(ex, n, 4 * (int64_t)L->n_kv_heads * L->head_dim, kvw_range, &a);
}
