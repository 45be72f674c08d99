/*
 * cases.c: every backend op against a plain-C reference on fresh random
 * inputs. References run in double from the exact inputs the backend got
 * (dequantized with core/quant.c, F16 KV rounded the IEEE way), never
 * through the CPU backend's kernels, which are under test like any other.
 *
 * Errors are normalized so one tolerance fits every shape:
 *   matmul: |got - want| / sum_k |x_k w_nk| per output (the bound that
 *           accumulation and activation quantization errors scale with);
 *   others: max |got - want| / max |want| over the tensor.
 * Not for: the harness (conformance.c) or the end-to-end model run.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"
#include "quant.h"

#define ROWP(base, stride, r) ((float *)((uint8_t *)(base) + (size_t)(r) * (stride)))

bool cf_has_type(const cf *c, int dt)
{
    return (c->info.weight_types >> dt) & 1;
}

/* Every weight type pagoda reads; a backend is tested on those it lists in
 * info.weight_types, against the scalar references (core/model/quant*.c). */
static const int k_all_types[] = {PAGODA_DTYPE_F32,  PAGODA_DTYPE_F16,  PAGODA_DTYPE_BF16,
                                  PAGODA_DTYPE_Q8_0, PAGODA_DTYPE_Q4_0, PAGODA_DTYPE_Q4_1,
                                  PAGODA_DTYPE_Q5_0, PAGODA_DTYPE_Q5_1, PAGODA_DTYPE_IQ4_NL,
                                  PAGODA_DTYPE_Q2_K, PAGODA_DTYPE_Q3_K, PAGODA_DTYPE_Q4_K,
                                  PAGODA_DTYPE_Q5_K, PAGODA_DTYPE_Q6_K, PAGODA_DTYPE_IQ4_XS,
                                  PAGODA_DTYPE_MXFP4};
#define N_TYPES (sizeof k_all_types / sizeof k_all_types[0])

/* Matmul tolerance per weight type (normalized as above). A backend may
 * round activations to the weight's precision (F16, BF16) or to 8 bits
 * (quantized types, as ggml's int8 dots do). */
double cf_matmul_tol(int dt)
{
    switch (dt) {
    case PAGODA_DTYPE_F32: return 1e-4;
    case PAGODA_DTYPE_F16: return 2e-3;
    case PAGODA_DTYPE_BF16: return 1e-2;
    default: return 1.5e-2;
    }
}

/* Random weights of `dt`, n_rows x cols, as stored bytes (packed rows),
 * and their exact f32 values. Q6_K has no quantizer here: its blocks are
 * random bytes with a small scale, which is every bit as valid. */
int cf_make_weights(cf *c, int dt, int64_t rows, int64_t cols, uint8_t **bytes, float **vals)
{
    size_t rb = pagoda_dtype_row_bytes(dt, cols);
    *bytes = malloc(rb * (size_t)rows);
    *vals = malloc(sizeof(float) * (size_t)(rows * cols));
    float *tmp = malloc(sizeof(float) * (size_t)cols);
    int st = PAGODA_ERR_NOMEM;
    if (!*bytes || !*vals || !tmp) goto out;
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = *bytes + rb * (size_t)r;
        if (dt == PAGODA_DTYPE_Q6_K) {
            for (int64_t b = 0; b < cols / PAGODA_QK_K; b++) {
                pagoda_block_q6_K blk;
                for (size_t i = 0; i < sizeof blk.ql; i++) blk.ql[i] = (uint8_t)cf_rand(c);
                for (size_t i = 0; i < sizeof blk.qh; i++) blk.qh[i] = (uint8_t)cf_rand(c);
                for (size_t i = 0; i < sizeof blk.scales; i++)
                    blk.scales[i] = (int8_t)(cf_randint(c, 128) - 64);
                blk.d = pagoda_fp32_to_fp16(cf_uniform(c, 2e-4f, 6e-4f));
                memcpy(row + (size_t)b * sizeof blk, &blk, sizeof blk);
            }
        } else {
            cf_fill(c, tmp, (size_t)cols, -1.0f, 1.0f);
            if ((st = pagoda_quantize_row(dt, tmp, row, cols))) goto out;
        }
        if ((st = pagoda_dequantize_row(dt, row, *vals + r * cols, cols))) goto out;
    }
    st = PAGODA_OK;
out:
    free(tmp);
    if (st) {
        free(*bytes);
        free(*vals);
        *bytes = NULL;
        *vals = NULL;
    }
    return st;
}

/* ------------------------------------------------------- upload/download */

static void case_roundtrip(cf *c)
{
    const char *op = "upload/download";
    size_t sizes[] = {1, 1000, 65536 + 7};
    for (size_t si = 0; si < 3; si++) {
        size_t n = sizes[si];
        char shape[96];
        snprintf(shape, sizeof shape, "%zu bytes + patch + partial", n);
        uint8_t *a = malloc(n), *b = malloc(n);
        pagoda_buffer *buf = NULL;
        int st;
        if (!a || !b) goto next;
        for (size_t i = 0; i < n; i++) a[i] = (uint8_t)cf_rand(c);
        if ((st = c->ops->buffer_alloc(c->be, PAGODA_BUF_ACTIVATIONS, n, &buf)) || !buf) {
            cf_record_call(c, op, shape, "buffer_alloc", st ? st : PAGODA_ERR_INTERNAL);
            goto next;
        }
        if ((st = c->ops->upload(c->be, buf, 0, a, n))) { cf_record_call(c, op, shape, "upload", st); goto next; }
        /* a patch in the middle, then one past the last byte of nothing */
        size_t po = n / 3, pn = n - po > 333 ? 333 : n - po;
        for (size_t i = 0; i < pn; i++) a[po + i] = (uint8_t)cf_rand(c);
        if ((st = c->ops->upload(c->be, buf, po, a + po, pn))) { cf_record_call(c, op, shape, "upload (patch)", st); goto next; }
        if ((st = c->ops->upload(c->be, buf, n, a, 0))) { cf_record_call(c, op, shape, "upload (0 bytes at the end)", st); goto next; }
        memset(b, 0, n);
        if ((st = c->ops->download(c->be, buf, 0, b, n))) { cf_record_call(c, op, shape, "download", st); goto next; }
        size_t bad = n;
        for (size_t i = 0; i < n && bad == n; i++) if (a[i] != b[i]) bad = i;
        if (bad == n) {
            size_t qo = n / 2, qn = n - qo > 77 ? 77 : n - qo;
            memset(b, 0, n);
            if ((st = c->ops->download(c->be, buf, qo, b, qn))) { cf_record_call(c, op, shape, "download (partial)", st); goto next; }
            for (size_t i = 0; i < qn && bad == n; i++) if (a[qo + i] != b[i]) bad = qo + i;
        }
        if (bad == n) cf_record(c, op, shape, 0, 0, CF_PASS, " ");
        else cf_record(c, op, shape, 1, 0, CF_FAIL, "byte %zu differs after the round trip", bad);
next:
        if (buf) c->ops->buffer_free(c->be, buf);
        free(a);
        free(b);
    }
}

/* ------------------------------------------------------------- get_rows */

static void case_get_rows(cf *c, int dt, int64_t n_rows, int64_t cols, int32_t n, bool from_host)
{
    const char *op = from_host ? "weights_from_host" : "get_rows";
    char shape[160];
    snprintf(shape, sizeof shape, "%s table %lld x %lld, %d ids", pagoda_dtype_name(dt),
             (long long)n_rows, (long long)cols, n);
    uint8_t *wb = NULL;
    float *wv = NULL, *got = NULL;
    double *want = NULL;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    pagoda_buffer *tb = NULL, *ob = NULL;
    pagoda_tensor tt, ot;
    int st;
    if (!ids || cf_make_weights(c, dt, n_rows, cols, &wb, &wv)) goto oom;
    for (int32_t i = 0; i < n; i++) ids[i] = cf_randint(c, (int32_t)n_rows);
    if (n > 2) ids[1] = ids[0];                    /* a repeated id */
    if (n > 3) ids[n - 1] = (int32_t)n_rows - 1;   /* the last row */
    size_t rb = pagoda_dtype_row_bytes(dt, cols);
    if (from_host) {
        if ((st = c->ops->weights_from_host(c->be, wb, rb * (size_t)n_rows, &tb)) || !tb) {
            cf_record_call(c, op, shape, "weights_from_host", st ? st : PAGODA_ERR_INTERNAL);
            goto out;
        }
        tt = (pagoda_tensor){.buf = tb, .offset = 0, .dtype = dt, .rows = n_rows, .cols = cols,
                             .row_stride = rb};
    } else if ((st = cf_tensor_new(c, PAGODA_BUF_WEIGHTS, dt, n_rows, cols, 0, wb, &tb, &tt))) {
        cf_record_call(c, op, shape, "buffer_alloc/upload (table)", st);
        goto out;
    }
    if ((st = cf_tensor_new(c, PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32, n, cols, 0, NULL, &ob, &ot))) {
        cf_record_call(c, op, shape, "buffer_alloc (out)", st);
        goto out;
    }
    if ((st = c->ops->get_rows(c->be, &tt, ids, n, &ot))) { cf_record_call(c, op, shape, "get_rows", st); goto out; }
    got = malloc(sizeof(float) * (size_t)(n * cols));
    want = malloc(sizeof(double) * (size_t)(n * cols));
    if (!got || !want) goto oom;
    if ((st = cf_tensor_get(c, &ot, got))) { cf_record_call(c, op, shape, "download", st); goto out; }
    for (int32_t i = 0; i < n; i++)
        for (int64_t j = 0; j < cols; j++) want[i * cols + j] = wv[ids[i] * cols + j];
    double err = cf_max_rel_err(got, want, (size_t)(n * cols)), tol = 1e-6;
    cf_record(c, op, shape, err, tol, err <= tol ? CF_PASS : CF_FAIL, "rows differ from the dequantized table");
    goto out;
oom:
    cf_record(c, op, shape, 0, 0, CF_FAIL, "the runner ran out of memory");
out:
    cf_buffer_free(c, tb);
    cf_buffer_free(c, ob);
    free(wb); free(wv); free(got); free(want); free(ids);
}

/* --------------------------------------------------------------- matmul */

static void case_matmul(cf *c, int dt, int64_t T, int64_t K, int64_t N, bool bias)
{
    const char *op = "matmul";
    char shape[160];
    snprintf(shape, sizeof shape, "%s T=%lld K=%lld N=%lld%s", pagoda_dtype_name(dt), (long long)T,
             (long long)K, (long long)N, bias ? " +bias" : "");
    uint8_t *wb = NULL;
    float *wv = NULL, *x = malloc(sizeof(float) * (size_t)(T * K)), *bv = malloc(sizeof(float) * (size_t)N);
    float *got = malloc(sizeof(float) * (size_t)(T * N));
    pagoda_buffer *xb = NULL, *wbuf = NULL, *bb = NULL, *obuf = NULL;
    pagoda_tensor xt, wt, bt, ot;
    int st;
    if (!x || !bv || !got || cf_make_weights(c, dt, N, K, &wb, &wv)) {
        cf_record(c, op, shape, 0, 0, CF_FAIL, "the runner ran out of memory");
        goto out;
    }
    cf_fill(c, x, (size_t)(T * K), -1.0f, 1.0f);
    /* Bias as large as a typical output, so a bias dropped or halved shows
     * through the quantized types' tolerance too. */
    for (int64_t n = 0; n < N; n++) {
        double rs = 0;
        for (int64_t k = 0; k < K; k++) rs += fabs(wv[n * K + k]);
        bv[n] = cf_uniform(c, -0.5f, 0.5f) * (float)rs;
    }
    /* x with padded rows when T > 1: the forward pass hands views too */
    if ((st = cf_tensor_new(c, PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32, T, K, T > 1 ? c->align : 0, x, &xb, &xt)) ||
        (st = cf_tensor_new(c, PAGODA_BUF_WEIGHTS, dt, N, K, 0, wb, &wbuf, &wt)) ||
        (bias && (st = cf_tensor_new(c, PAGODA_BUF_WEIGHTS, PAGODA_DTYPE_F32, 1, N, 0, bv, &bb, &bt))) ||
        (st = cf_tensor_new(c, PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32, T, N, 0, NULL, &obuf, &ot))) {
        cf_record_call(c, op, shape, "buffer_alloc/upload", st);
        goto out;
    }
    if ((st = c->ops->matmul(c->be, &xt, &wt, bias ? &bt : NULL, &ot))) { cf_record_call(c, op, shape, "matmul", st); goto out; }
    if ((st = cf_tensor_get(c, &ot, got))) { cf_record_call(c, op, shape, "download", st); goto out; }
    double err = 0;
    int64_t wr = 0, wc = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t n = 0; n < N; n++) {
            double s = bias ? bv[n] : 0.0, mag = bias ? fabs(bv[n]) : 0.0;
            for (int64_t k = 0; k < K; k++) {
                double p = (double)x[t * K + k] * wv[n * K + k];
                s += p;
                mag += fabs(p);
            }
            double g = got[t * N + n];
            double e = isfinite(g) ? fabs(g - s) / (mag + 1e-30) : INFINITY;
            if (e > err) { err = e; wr = t; wc = n; }
        }
    double tol = cf_matmul_tol(dt);
    cf_record(c, op, shape, err, tol, err <= tol ? CF_PASS : CF_FAIL, "worst at out[%lld][%lld]",
              (long long)wr, (long long)wc);
out:
    cf_buffer_free(c, xb); cf_buffer_free(c, wbuf); cf_buffer_free(c, bb); cf_buffer_free(c, obuf);
    free(wb); free(wv); free(x); free(bv); free(got);
}

/* --------------------------------------------------------- matmul_multi */

/* n matmuls over one x (ABI 1.3): each output against its reference, with
 * its type's tolerance; biases on matrices 0 and 2 only (the others NULL
 * entries), x strided. */
static void case_matmul_multi(cf *c, int n, const int *types, const int64_t *Ns, int64_t T, int64_t K)
{
    const char *op = "matmul_multi";
    char shape[192];
    int len = snprintf(shape, sizeof shape, "T=%lld K=%lld", (long long)T, (long long)K);
    for (int i = 0; i < n && len < (int)sizeof shape - 32; i++)
        len += snprintf(shape + len, sizeof shape - (size_t)len, " %s[%lld]%s", pagoda_dtype_name(types[i]),
                        (long long)Ns[i], i % 2 ? "" : "+bias");
    if (!c->ops->matmul_multi) {
        cf_record(c, op, shape, 0, 0, CF_SKIP, "optional slot (ABI 1.3) is NULL: the core runs n matmuls");
        return;
    }
    for (int i = 0; i < n; i++)
        if (!cf_has_type(c, types[i])) {
            cf_record(c, op, shape, 0, 0, CF_SKIP, "%s not in info.weight_types", pagoda_dtype_name(types[i]));
            return;
        }
    enum { MAXN = 4 };
    uint8_t *wb[MAXN] = {0};
    float *wv[MAXN] = {0}, *bv[MAXN] = {0}, *got[MAXN] = {0};
    pagoda_buffer *wbuf[MAXN] = {0}, *bbuf[MAXN] = {0}, *obuf[MAXN] = {0}, *xb = NULL;
    pagoda_tensor wt[MAXN], bt[MAXN], ot[MAXN], xt;
    const pagoda_tensor *bp[MAXN] = {0};
    float *x = malloc(sizeof(float) * (size_t)(T * K));
    int st = x ? 0 : PAGODA_ERR_NOMEM;
    for (int i = 0; i < n && !st; i++) {
        bv[i] = malloc(sizeof(float) * (size_t)Ns[i]);
        got[i] = malloc(sizeof(float) * (size_t)(T * Ns[i]));
        st = !bv[i] || !got[i] ? PAGODA_ERR_NOMEM : cf_make_weights(c, types[i], Ns[i], K, &wb[i], &wv[i]);
    }
    if (st) {
        cf_record(c, op, shape, 0, 0, CF_FAIL, "the runner ran out of memory");
        goto out;
    }
    cf_fill(c, x, (size_t)(T * K), -1.0f, 1.0f);
    st = cf_tensor_new(c, PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32, T, K, c->align, x, &xb, &xt);
    for (int i = 0; i < n && !st; i++) {
        for (int64_t r = 0; r < Ns[i]; r++) {
            double rs = 0;
            for (int64_t k = 0; k < K; k++) rs += fabs(wv[i][r * K + k]);
            bv[i][r] = cf_uniform(c, -0.5f, 0.5f) * (float)rs;
        }
        st = cf_tensor_new(c, PAGODA_BUF_WEIGHTS, types[i], Ns[i], K, 0, wb[i], &wbuf[i], &wt[i]);
        if (!st && i % 2 == 0)
            st = cf_tensor_new(c, PAGODA_BUF_WEIGHTS, PAGODA_DTYPE_F32, 1, Ns[i], 0, bv[i], &bbuf[i], &bt[i]);
        if (!st && i % 2 == 0) bp[i] = &bt[i];
        if (!st) st = cf_tensor_new(c, PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32, T, Ns[i], 0, NULL, &obuf[i], &ot[i]);
    }
    if (st) { cf_record_call(c, op, shape, "buffer_alloc/upload", st); goto out; }
    if ((st = c->ops->matmul_multi(c->be, &xt, n, wt, bp, ot))) { cf_record_call(c, op, shape, op, st); goto out; }
    double worst = 0, worst_tol = 0;
    int wi = 0;
    for (int i = 0; i < n; i++) {
        if ((st = cf_tensor_get(c, &ot[i], got[i]))) { cf_record_call(c, op, shape, "download", st); goto out; }
        double err = 0;
        for (int64_t t = 0; t < T; t++)
            for (int64_t r = 0; r < Ns[i]; r++) {
                double s = bp[i] ? bv[i][r] : 0.0, mag = bp[i] ? fabs(bv[i][r]) : 0.0;
                for (int64_t k = 0; k < K; k++) {
                    double p = (double)x[t * K + k] * wv[i][r * K + k];
                    s += p;
                    mag += fabs(p);
                }
                double g = got[i][t * Ns[i] + r];
                double e = isfinite(g) ? fabs(g - s) / (mag + 1e-30) : INFINITY;
                if (e > err) err = e;
            }
        /* the worst matrix relative to its own tolerance */
        if (i == 0 || err / cf_matmul_tol(types[i]) > worst / worst_tol) {
            worst = err;
            worst_tol = cf_matmul_tol(types[i]);
            wi = i;
        }
    }
    cf_record(c, op, shape, worst, worst_tol, worst <= worst_tol ? CF_PASS : CF_FAIL,
              "output %d (%s) differs from its matmul", wi, pagoda_dtype_name(types[wi]));
out:
    cf_buffer_free(c, xb);
    for (int i = 0; i < n; i++) {
        cf_buffer_free(c, wbuf[i]); cf_buffer_free(c, bbuf[i]); cf_buffer_free(c, obuf[i]);
        free(wb[i]); free(wv[i]); free(bv[i]); free(got[i]);
    }
    free(x);
}

/* ------------------------------------------- rms_norm, swiglu, add, rope */

/* op 0 rms_norm (b = weights, 1 row), 1 swiglu, 2 add, 3 geglu, 4 scale
 * (by 1.75; b unused), 5 swiglu_oai (alpha 1.702, limit 1.25: inside the
 * inputs' range, so both clamps are hit); alias: out is a. geglu and scale
 * are optional (ABI 1.1), swiglu_oai (ABI 1.8): skipped where the slot is
 * NULL. */
static void case_rowwise(cf *c, int which, int64_t rows, int64_t cols, bool alias, bool padded)
{
    static const char *names[] = {"rms_norm", "swiglu", "add", "geglu", "scale", "swiglu_oai"};
    const char *op = names[which];
    char shape[160];
    snprintf(shape, sizeof shape, "%lld x %lld%s%s", (long long)rows, (long long)cols,
             alias ? " in place" : "", padded ? " strided" : "");
    if ((which == 3 && !c->ops->geglu) || (which == 4 && !c->ops->scale)) {
        cf_record(c, op, shape, 0, 0, CF_SKIP, "optional slot (ABI 1.1) is NULL: %s",
                  which == 3 ? "the core refuses models with a GELU-tanh FFN (gemma3)"
                             : "the core scales on the host");
        return;
    }
    if (which == 5 && !c->ops->swiglu_oai) {
        cf_record(c, op, shape, 0, 0, CF_SKIP, "optional slot (ABI 1.8) is NULL: the core computes "
                  "it on the host (gpt-oss's experts)");
        return;
    }
    const float alpha = 1.702f, limit = 1.25f;
    size_t n = (size_t)(rows * cols);
    int64_t brows = which == 0 ? 1 : rows;
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * (size_t)(brows * cols));
    float *got = malloc(sizeof(float) * n);
    double *want = malloc(sizeof(double) * n);
    pagoda_buffer *ab = NULL, *bb = NULL, *ob = NULL;
    pagoda_tensor at, bt, ot;
    int st;
    float eps = 1e-5f;
    if (!a || !b || !got || !want) {
        cf_record(c, op, shape, 0, 0, CF_FAIL, "the runner ran out of memory");
        goto out;
    }
    cf_fill(c, a, n, -3.0f, 3.0f);
    cf_fill(c, b, (size_t)(brows * cols), which == 0 ? 0.5f : -2.0f, which == 0 ? 1.5f : 2.0f);
    size_t pad = padded ? c->align : 0;
    if ((st = cf_tensor_new(c, PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32, rows, cols, pad, a, &ab, &at)) ||
        (st = cf_tensor_new(c, which == 0 ? PAGODA_BUF_WEIGHTS : PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32,
                            brows, cols, pad, b, &bb, &bt)) ||
        (!alias && (st = cf_tensor_new(c, PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32, rows, cols, 0, NULL, &ob, &ot)))) {
        cf_record_call(c, op, shape, "buffer_alloc/upload", st);
        goto out;
    }
    const pagoda_tensor *out = alias ? &at : &ot;
    const float sc = 1.75f;
    if (which == 0) st = c->ops->rms_norm(c->be, &at, &bt, eps, out);
    else if (which == 1) st = c->ops->swiglu(c->be, &at, &bt, out);
    else if (which == 2) st = c->ops->add(c->be, &at, &bt, out);
    else if (which == 3) st = c->ops->geglu(c->be, &at, &bt, out);
    else if (which == 5) st = c->ops->swiglu_oai(c->be, &at, &bt, alpha, limit, out);
    else st = c->ops->scale(c->be, &at, sc, out);
    if (st) { cf_record_call(c, op, shape, op, st); goto out; }
    if ((st = cf_tensor_get(c, out, got))) { cf_record_call(c, op, shape, "download", st); goto out; }
    for (int64_t r = 0; r < rows; r++) {
        const float *ar = a + r * cols, *br = b + (which == 0 ? 0 : r * cols);
        double ss = 0;
        if (which == 0) {
            for (int64_t j = 0; j < cols; j++) ss += (double)ar[j] * ar[j];
            ss = 1.0 / sqrt(ss / (double)cols + eps);
        }
        for (int64_t j = 0; j < cols; j++) {
            double v;
            double g = ar[j];
            if (which == 0) v = g * ss * br[j];
            else if (which == 1) v = g / (1.0 + exp(-g)) * br[j];
            else if (which == 2) v = g + br[j];
            else if (which == 3)   /* gelu_tanh by its definition */
                v = 0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * br[j];
            else if (which == 5) {   /* gpt-oss's definition (transformers GptOssExperts) */
                double x = fmin(g, limit), u = fmax(fmin((double)br[j], limit), -(double)limit);
                v = (u + 1.0) * x / (1.0 + exp(-(double)alpha * x));
            } else v = g * sc;
            want[r * cols + j] = v;
        }
    }
    double err = cf_max_rel_err(got, want, n), tol = 1e-5;
    cf_record(c, op, shape, err, tol, err <= tol ? CF_PASS : CF_FAIL, "values differ from the reference");
out:
    cf_buffer_free(c, ab); cf_buffer_free(c, bb); cf_buffer_free(c, ob);
    free(a); free(b); free(got); free(want);
}

static void case_rope(cf *c, int64_t T, int n_heads, int hd, int n_rot, bool neox, float mscale)
{
    const char *op = "rope";
    char shape[160];
    snprintf(shape, sizeof shape, "%s T=%lld heads=%d head_dim=%d n_rot=%d mscale=%g",
             neox ? "neox" : "normal", (long long)T, n_heads, hd, n_rot, mscale);
    int64_t cols = (int64_t)n_heads * hd;
    size_t n = (size_t)(T * cols);
    float *x = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
    double *want = malloc(sizeof(double) * n);
    float inv[512];
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)T);
    pagoda_buffer *xb = NULL;
    pagoda_tensor xt;
    int st;
    if (!x || !got || !want || !pos) {
        cf_record(c, op, shape, 0, 0, CF_FAIL, "the runner ran out of memory");
        goto out;
    }
    cf_fill(c, x, n, -2.0f, 2.0f);
    for (int i = 0; i < n_rot / 2; i++) inv[i] = powf(10000.0f, -2.0f * (float)i / (float)n_rot);
    /* positions from 0 to a few thousand, where angle precision matters */
    for (int64_t t = 0; t < T; t++) pos[t] = t == 0 ? 0 : cf_randint(c, 4096);
    pagoda_rope_params p = {.n_rot = n_rot, .neox = neox, .mscale = mscale, .inv_freq = inv};
    if ((st = cf_tensor_new(c, PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32, T, cols, T > 1 ? c->align : 0, x, &xb, &xt))) {
        cf_record_call(c, op, shape, "buffer_alloc/upload", st);
        goto out;
    }
    if ((st = c->ops->rope(c->be, &xt, n_heads, hd, pos, &p))) { cf_record_call(c, op, shape, "rope", st); goto out; }
    if ((st = cf_tensor_get(c, &xt, got))) { cf_record_call(c, op, shape, "download", st); goto out; }
    for (size_t i = 0; i < n; i++) want[i] = x[i];
    int half = n_rot / 2;
    for (int64_t t = 0; t < T; t++)
        for (int h = 0; h < n_heads; h++) {
            const float *v = x + t * cols + (int64_t)h * hd;
            double *w = want + t * cols + (int64_t)h * hd;
            for (int i = 0; i < half; i++) {
                int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
                double ang = (double)pos[t] * (double)inv[i];
                double cs = cos(ang) * mscale, sn = sin(ang) * mscale;
                w[ia] = v[ia] * cs - v[ib] * sn;
                w[ib] = v[ia] * sn + v[ib] * cs;
            }
        }
    /* 1e-4 allows an angle computed in float at positions of a few thousand
     * only barely: the CPU backend computes it in double. */
    double err = cf_max_rel_err(got, want, n), tol = 1e-4;
    cf_record(c, op, shape, err, tol, err <= tol ? CF_PASS : CF_FAIL, "values differ from the reference");
out:
    cf_buffer_free(c, xb);
    free(x); free(got); free(want); free(pos);
}

/* ------------------------------------------------------------- the list */

void cf_run_all_ops(cf *c)
{
    case_roundtrip(c);

    for (size_t i = 0; i < N_TYPES; i++) {
        int dt = k_all_types[i];
        if (!cf_has_type(c, dt)) {
            cf_record(c, "get_rows", pagoda_dtype_name(dt), 0, 0, CF_SKIP, "not in info.weight_types");
            cf_record(c, "matmul", pagoda_dtype_name(dt), 0, 0, CF_SKIP, "not in info.weight_types");
            continue;
        }
        case_get_rows(c, dt, 50, 256, 1, false);
        case_get_rows(c, dt, 50, 512, 37, false);
        static const int64_t shapes[][3] = {{1, 256, 96}, {5, 512, 64}, {33, 256, 130}, {64, 512, 48}};
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int bias = 0; bias < 2; bias++)
                case_matmul(c, dt, shapes[s][0], shapes[s][1], shapes[s][2], bias);
        int be = 0;
        pagoda_dtype_block(dt, &be, NULL);
        if (be <= 32) case_matmul(c, dt, 3, 96, 40, true); /* K of 3 blocks of 32 */
    }
    /* Q/K/V and gate/up as the forward pass hands them over: one type,
     * Q4_K_M's Q4_K + Q6_K, and types with nothing in common */
    {
        static const int qkv8[] = {PAGODA_DTYPE_Q8_0, PAGODA_DTYPE_Q8_0, PAGODA_DTYPE_Q8_0};
        static const int kmix[] = {PAGODA_DTYPE_Q4_K, PAGODA_DTYPE_Q4_K, PAGODA_DTYPE_Q6_K};
        static const int other[] = {PAGODA_DTYPE_F16, PAGODA_DTYPE_Q4_0, PAGODA_DTYPE_F32, PAGODA_DTYPE_Q8_0};
        static const int64_t n3[] = {96, 32, 32}, n2[] = {80, 80}, n4[] = {40, 24, 24, 40};
        case_matmul_multi(c, 3, qkv8, n3, 1, 256);
        case_matmul_multi(c, 3, qkv8, n3, 33, 256);
        case_matmul_multi(c, 2, qkv8, n2, 5, 512);
        case_matmul_multi(c, 3, kmix, n3, 1, 512);
        case_matmul_multi(c, 3, kmix, n3, 9, 512);
        case_matmul_multi(c, 4, other, n4, 1, 256);
        case_matmul_multi(c, 4, other, n4, 6, 256);
    }
    if (c->ops->weights_from_host) {
        if (cf_has_type(c, PAGODA_DTYPE_F32)) case_get_rows(c, PAGODA_DTYPE_F32, 20, 64, 9, true);
    } else {
        cf_record(c, "weights_from_host", "-", 0, 0, CF_SKIP, "optional slot is NULL: the core uses buffer_alloc + upload");
    }

    case_rowwise(c, 0, 1, 64, false, false);
    case_rowwise(c, 0, 7, 256, false, true);
    case_rowwise(c, 0, 33, 172, true, false);
    case_rowwise(c, 1, 1, 172, false, false);
    case_rowwise(c, 1, 37, 256, true, true);
    case_rowwise(c, 2, 1, 64, false, false);
    case_rowwise(c, 2, 37, 172, true, true);
    case_rowwise(c, 3, 1, 172, false, false);
    case_rowwise(c, 3, 37, 256, true, true);
    case_rowwise(c, 4, 1, 64, false, false);
    case_rowwise(c, 4, 37, 640, true, true);
    case_rowwise(c, 5, 1, 64, false, false);
    case_rowwise(c, 5, 37, 256, true, true);

    for (int neox = 0; neox < 2; neox++) {
        case_rope(c, 1, 4, 64, 64, neox, 1.0f);
        case_rope(c, 40, 8, 32, 16, neox, 1.0f);   /* partial rotation */
        case_rope(c, 5, 2, 128, 128, neox, 0.75f); /* scaled */
    }

    cf_run_kv_ops(c);
    cf_run_moe_ops(c);

    if (c->ops->synchronize) {
        int st = c->ops->synchronize(c->be);
        if (st) cf_record_call(c, "synchronize", "-", "synchronize", st);
        else cf_record(c, "synchronize", "-", 0, 0, CF_PASS, " ");
    }
}
