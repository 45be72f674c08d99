/*
 * cases_moe.c: the mixture-of-experts ops (ABI 1.5) against plain-C
 * references in double: matmul_experts over a 3-D weight of several types
 * and shapes (decode: one row per expert; batches where experts repeat,
 * some unused, one chosen twice by a token; x_rows given as for gate/up
 * and NULL as for down), and moe_combine with accumulate on and off.
 * matmul_experts is normalized as matmul (cases.c) and held to the same
 * per-type tolerance; moe_combine by max |got - want| / max |want|. A
 * backend without the slots (older than 1.5, or one that leaves them NULL)
 * is skipped with a line: the core has fallbacks for both.
 * Not for: the harness (conformance.c) or the other ops (cases.c, cases_kv.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"
#include "quant.h"

/* T tokens choosing k of E experts each (the last `unused` never chosen;
 * expert 0 takes about a third of the pairs, so it runs many rows while
 * others run one); x_rows: each pair reads its token's row (gate/up), or
 * NULL with one x row per pair (down); pad: padded rows in x, w and out. */
static void case_matmul_experts(cf *c, int dt, int64_t T, int k, int E, int unused, int64_t K, int64_t N,
                                bool x_rows, bool pad)
{
    const char *op = "matmul_experts";
    char shape[192];
    snprintf(shape, sizeof shape, "%s T=%lld top-%d of E=%d (%d unused) K=%lld N=%lld %s%s",
             pagoda_dtype_name(dt), (long long)T, k, E, unused, (long long)K, (long long)N,
             x_rows ? "x_rows" : "no x_rows", pad ? " padded" : "");
    if (!c->ops->matmul_experts) {
        cf_record(c, op, shape, 0, 0, CF_SKIP,
                  "optional slot (ABI 1.5) is NULL: the core runs one matmul per row on views");
        return;
    }
    if (!cf_has_type(c, dt)) {
        cf_record(c, op, shape, 0, 0, CF_SKIP, "%s not in info.weight_types", pagoda_dtype_name(dt));
        return;
    }
    int64_t R = T * k, X = x_rows ? T : R;
    uint8_t *wb = NULL;
    float *wv = NULL, *x = malloc(sizeof(float) * (size_t)(X * K)), *got = malloc(sizeof(float) * (size_t)(R * N));
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)R), *xr = malloc(sizeof(int32_t) * (size_t)R);
    pagoda_buffer *xb = NULL, *wbuf = NULL, *obuf = NULL;
    pagoda_tensor xt, wt, ot;
    int st;
    if (!x || !got || !ids || !xr || cf_make_weights(c, dt, (int64_t)E * N, K, &wb, &wv)) {
        cf_record(c, op, shape, 0, 0, CF_FAIL, "the runner ran out of memory");
        goto out;
    }
    cf_fill(c, x, (size_t)(X * K), -1.0f, 1.0f);
    int used = E - unused;
    for (int64_t t = 0; t < T; t++)
        for (int j = 0; j < k; j++) {
            int64_t i = t * k + j;
            ids[i] = cf_uniform(c, 0.0f, 1.0f) < 0.33f ? 0 : cf_randint(c, used);
            if (t == 1 && j == 1) ids[i] = ids[i - 1]; /* one token, one expert, twice */
            xr[i] = (int32_t)t;
        }
    /* E experts of N rows in one buffer: the 3-D weight, expert e's rows
     * from row e * N */
    size_t wpad = pad ? c->align : 0;
    if ((st = cf_tensor_new(c, PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32, X, K, pad ? c->align : 0, x, &xb, &xt)) ||
        (st = cf_tensor_new(c, PAGODA_BUF_WEIGHTS, dt, (int64_t)E * N, K, wpad, wb, &wbuf, &wt)) ||
        (st = cf_tensor_new(c, PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32, R, N, pad ? c->align : 0, NULL, &obuf, &ot))) {
        cf_record_call(c, op, shape, "buffer_alloc/upload", st);
        goto out;
    }
    size_t expert_stride = (size_t)N * wt.row_stride;
    wt.rows = N;
    if ((st = c->ops->matmul_experts(c->be, &xt, x_rows ? xr : NULL, &wt, E, expert_stride, ids, &ot))) {
        cf_record_call(c, op, shape, op, st);
        goto out;
    }
    if ((st = cf_tensor_get(c, &ot, got))) { cf_record_call(c, op, shape, "download", st); goto out; }
    double err = 0;
    int64_t wr = 0, wc = 0;
    for (int64_t r = 0; r < R; r++) {
        const float *xv = x + (x_rows ? xr[r] : r) * K;
        const float *we = wv + (int64_t)ids[r] * N * K;
        for (int64_t n = 0; n < N; n++) {
            double s = 0.0, mag = 0.0;
            for (int64_t q = 0; q < K; q++) {
                double p = (double)xv[q] * we[n * K + q];
                s += p;
                mag += fabs(p);
            }
            double g = got[r * N + n];
            double e = isfinite(g) ? fabs(g - s) / (mag + 1e-30) : INFINITY;
            if (e > err) { err = e; wr = r; wc = n; }
        }
    }
    double tol = cf_matmul_tol(dt);
    cf_record(c, op, shape, err, tol, err <= tol ? CF_PASS : CF_FAIL, "worst at out[%lld][%lld] (expert %d)",
              (long long)wr, (long long)wc, ids[wr]);
out:
    cf_buffer_free(c, xb); cf_buffer_free(c, wbuf); cf_buffer_free(c, obuf);
    free(wb); free(wv); free(x); free(got); free(ids); free(xr);
}

/* R routed rows of C into O output rows (repeats: several rows into one;
 * some output rows get none), out starting from random values. */
static void case_moe_combine(cf *c, int64_t R, int64_t C, int64_t O, bool accumulate)
{
    const char *op = "moe_combine";
    char shape[160];
    snprintf(shape, sizeof shape, "R=%lld C=%lld into %lld rows%s", (long long)R, (long long)C, (long long)O,
             accumulate ? " accumulate" : "");
    if (!c->ops->moe_combine) {
        cf_record(c, op, shape, 0, 0, CF_SKIP, "optional slot (ABI 1.5) is NULL: the core sums on the host");
        return;
    }
    float *y = malloc(sizeof(float) * (size_t)(R * C)), *o0 = malloc(sizeof(float) * (size_t)(O * C));
    float *got = malloc(sizeof(float) * (size_t)(O * C)), *wt = malloc(sizeof(float) * (size_t)R);
    double *want = malloc(sizeof(double) * (size_t)(O * C));
    int32_t *dst = malloc(sizeof(int32_t) * (size_t)R);
    pagoda_buffer *yb = NULL, *ob = NULL;
    pagoda_tensor yt, ot;
    int st;
    if (!y || !o0 || !got || !wt || !want || !dst) {
        cf_record(c, op, shape, 0, 0, CF_FAIL, "the runner ran out of memory");
        goto out;
    }
    cf_fill(c, y, (size_t)(R * C), -1.0f, 1.0f);
    cf_fill(c, o0, (size_t)(O * C), -1.0f, 1.0f);
    for (int64_t r = 0; r < R; r++) {
        dst[r] = cf_randint(c, (int32_t)(O > 1 ? O - 1 : 1)); /* the last row stays untouched */
        wt[r] = cf_uniform(c, 0.0f, 1.0f);
    }
    if ((st = cf_tensor_new(c, PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32, R, C, c->align, y, &yb, &yt)) ||
        (st = cf_tensor_new(c, PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32, O, C, 0, o0, &ob, &ot))) {
        cf_record_call(c, op, shape, "buffer_alloc/upload", st);
        goto out;
    }
    if ((st = c->ops->moe_combine(c->be, &yt, dst, wt, accumulate, &ot))) {
        cf_record_call(c, op, shape, op, st);
        goto out;
    }
    if ((st = cf_tensor_get(c, &ot, got))) { cf_record_call(c, op, shape, "download", st); goto out; }
    for (int64_t i = 0; i < O * C; i++) want[i] = accumulate ? o0[i] : 0.0;
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < C; j++) want[dst[r] * C + j] += (double)wt[r] * y[r * C + j];
    double err = cf_max_rel_err(got, want, (size_t)(O * C)), tol = 1e-5;
    cf_record(c, op, shape, err, tol, err <= tol ? CF_PASS : CF_FAIL, "rows differ from the weighted sum");
out:
    cf_buffer_free(c, yb); cf_buffer_free(c, ob);
    free(y); free(o0); free(got); free(wt); free(want); free(dst);
}

void cf_run_moe_ops(cf *c)
{
    /* decode (top-8 of 16, one row per expert), a batch with repeats, a
     * prefill-like batch, in the types a MoE file ships */
    static const int types[] = {PAGODA_DTYPE_Q4_K, PAGODA_DTYPE_Q8_0, PAGODA_DTYPE_Q6_K, PAGODA_DTYPE_F16,
                                PAGODA_DTYPE_Q4_0, PAGODA_DTYPE_BF16, PAGODA_DTYPE_F32};
    if (!c->ops->matmul_experts) /* one line for the op, not one per case */
        cf_record(c, "matmul_experts", "-", 0, 0, CF_SKIP,
                  "optional slot (ABI 1.5) is NULL: the core runs one matmul per row on views");
    for (size_t i = 0; c->ops->matmul_experts && i < sizeof types / sizeof types[0]; i++) {
        int dt = types[i];
        case_matmul_experts(c, dt, 1, 8, 16, 0, 256, 48, true, false);
        case_matmul_experts(c, dt, 7, 4, 12, 3, 512, 40, false, true);
        case_matmul_experts(c, dt, 48, 2, 6, 1, 256, 72, true, true);
    }
    if (c->ops->matmul_experts) {
        case_matmul_experts(c, PAGODA_DTYPE_Q5_0, 9, 2, 5, 1, 256, 24, true, false);
        case_matmul_experts(c, PAGODA_DTYPE_IQ4_XS, 9, 2, 5, 1, 256, 24, false, false);
        /* MXFP4, gpt-oss's expert type: a decode step (top-4 of 32), a
         * batch with repeats, a prefill-like batch (the lanes kernels) */
        case_matmul_experts(c, PAGODA_DTYPE_MXFP4, 1, 4, 32, 0, 256, 48, true, false);
        case_matmul_experts(c, PAGODA_DTYPE_MXFP4, 7, 4, 12, 3, 512, 40, false, true);
        case_matmul_experts(c, PAGODA_DTYPE_MXFP4, 48, 4, 8, 1, 320, 72, true, true);
    }
    if (!c->ops->moe_combine)
        cf_record(c, "moe_combine", "-", 0, 0, CF_SKIP, "optional slot (ABI 1.5) is NULL: the core sums on the host");
    for (int acc = 0; c->ops->moe_combine && acc < 2; acc++) {
        case_moe_combine(c, 8, 256, 1, acc);     /* decode: 8 choices into one token */
        case_moe_combine(c, 300, 320, 40, acc);  /* a prefill chunk */
        case_moe_combine(c, 5, 64, 5, acc);      /* one row per token: a shared expert's gate */
    }
}
