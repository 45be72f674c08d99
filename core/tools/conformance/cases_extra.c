/*
 * cases_extra.c: the ops that tell the memory plan what a backend holds
 * beside its weights (ABI 1.15, both optional): weight_extra_bytes is 0
 * for every type not in info.weight_types (the backend cannot hold a copy
 * of a weight it cannot take); weight_extra_held is 0 before any matmul,
 * and after matmuls of T = 64 tokens (enough for the CPU backend's
 * repacked GEMMs) over one weight of each advertised type of a list, at
 * most the sum of weight_extra_bytes for those weights: what is held is
 * never more than the plan counted. Run first, before any other case has
 * run a matmul. A backend whose slots are NULL passes with a line saying
 * the plan counts nothing beside its weights; one with only one of them
 * gets the checks that one allows, and a line for the rest.
 * Not for: the harness (conformance.c) or the other ops (cases*.c).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"
#include "host.h"

#define OP "weight_extra"

/* weight_extra_bytes of every type the backend does not take: 0. A type
 * not in info.weight_types must answer 0; a number that names no type
 * (the enum's gaps, PAGODA_DTYPE_COUNT_) may instead be refused with a
 * status, but never given bytes. */
static void case_bytes_unsupported(cf *c)
{
    char bad[160] = "", seen[160] = "";
    size_t nb = 0, ns = 0;
    int n = 0;
    for (int dt = 0; dt <= PAGODA_DTYPE_COUNT_; dt++) {
        if (dt < PAGODA_DTYPE_COUNT_ && cf_has_type(c, dt)) continue;
        bool named = dt < PAGODA_DTYPE_COUNT_ && strcmp(pagoda_dtype_name(dt), "unknown") != 0;
        uint64_t b = 0;
        int st = c->ops->weight_extra_bytes(c->be, dt, 64, 512, &b);
        if (st && named) {
            cf_record_call(c, OP, "bytes of a type not in info.weight_types", "weight_extra_bytes", st);
            return;
        }
        if (st) {
            pagoda_host_clear_error(c->host);   /* a refusal of a number that is no type: fine */
            b = 0;
        }
        n++;
        if (named && ns < sizeof seen - 16)
            ns += (size_t)snprintf(seen + ns, sizeof seen - ns, "%s%s", ns ? "," : "", pagoda_dtype_name(dt));
        if (b && nb < sizeof bad - 40)
            nb += (size_t)snprintf(bad + nb, sizeof bad - nb, "%s%s (%d): %llu", nb ? ", " : "",
                                   pagoda_dtype_name(dt), dt, (unsigned long long)b);
    }
    char shape[192];
    if (ns) snprintf(shape, sizeof shape, "bytes, 64 x 512, of %.100s and numbers naming no type", seen);
    else snprintf(shape, sizeof shape, "bytes, 64 x 512, of numbers naming no type (all types taken)");
    cf_record(c, OP, shape, 0, 0, nb ? CF_FAIL : CF_PASS,
              "bytes beside a weight of a type the backend does not take (want 0): %s", bad);
}

/* held before any matmul (0), then after T = 64 matmuls over weights of
 * the types below that the backend takes: at most what the plan counts. */
static void case_held(cf *c)
{
    static const int types[] = {PAGODA_DTYPE_Q8_0, PAGODA_DTYPE_Q4_0, PAGODA_DTYPE_Q4_1, PAGODA_DTYPE_Q4_K,
                                PAGODA_DTYPE_Q5_K, PAGODA_DTYPE_Q6_K, PAGODA_DTYPE_F16, PAGODA_DTYPE_F32};
    enum { NT = sizeof types / sizeof types[0] };
    const int64_t T = 64, K = 512, N = 48;
    uint64_t held = 1;
    int st = c->ops->weight_extra_held(c->be, &held);
    if (st) { cf_record_call(c, OP, "held before any matmul", "weight_extra_held", st); return; }
    cf_record(c, OP, "held before any matmul", (double)held, 0, held ? CF_FAIL : CF_PASS,
              "%llu bytes held before any weight met a matmul (want 0)", (unsigned long long)held);

    pagoda_buffer *xb = NULL, *ob = NULL, *wbuf[NT] = {0};
    pagoda_tensor xt, ot, wt[NT];
    uint8_t *wb = NULL;
    float *wv = NULL, *x = malloc(sizeof(float) * (size_t)(T * K));
    char shape[192];
    size_t o = (size_t)snprintf(shape, sizeof shape, "held after T=%lld matmuls K=%lld N=%lld of", (long long)T,
                                (long long)K, (long long)N);
    uint64_t planned = 0;
    int used = 0;
    if (!x) { cf_record(c, OP, "held after matmuls", 0, 0, CF_FAIL, "the runner ran out of memory"); return; }
    cf_fill(c, x, (size_t)(T * K), -1.0f, 1.0f);
    if ((st = cf_tensor_new(c, PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32, T, K, 0, x, &xb, &xt)) ||
        (st = cf_tensor_new(c, PAGODA_BUF_ACTIVATIONS, PAGODA_DTYPE_F32, T, N, 0, NULL, &ob, &ot))) {
        cf_record_call(c, OP, "held after matmuls", "buffer_alloc/upload", st);
        goto out;
    }
    /* every weight stays allocated until held is read: the copies of a
     * freed weight may go with it */
    for (int i = 0; i < NT; i++) {
        int dt = types[i];
        if (!cf_has_type(c, dt)) continue;
        uint64_t b = 0;
        if (cf_make_weights(c, dt, N, K, &wb, &wv)) {
            cf_record(c, OP, "held after matmuls", 0, 0, CF_FAIL, "the runner ran out of memory");
            goto out;
        }
        st = cf_tensor_new(c, PAGODA_BUF_WEIGHTS, dt, N, K, 0, wb, &wbuf[i], &wt[i]);
        free(wb);
        free(wv);
        wb = NULL;
        wv = NULL;
        if (st) { cf_record_call(c, OP, "held after matmuls", "buffer_alloc/upload", st); goto out; }
        if ((st = c->ops->matmul(c->be, &xt, &wt[i], NULL, &ot))) {
            cf_record_call(c, OP, "held after matmuls", "matmul", st);
            goto out;
        }
        if ((st = c->ops->weight_extra_bytes(c->be, dt, N, K, &b))) {
            cf_record_call(c, OP, "held after matmuls", "weight_extra_bytes", st);
            goto out;
        }
        planned += b;
        used++;
        if (o < sizeof shape - 8) o += (size_t)snprintf(shape + o, sizeof shape - o, " %s", pagoda_dtype_name(dt));
    }
    if (!used) {
        cf_record(c, OP, "held after matmuls", 0, 0, CF_SKIP, "none of Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K, F16, "
                  "F32 in info.weight_types");
        goto out;
    }
    if (c->ops->synchronize && (st = c->ops->synchronize(c->be))) {
        cf_record_call(c, OP, shape, "synchronize", st);
        goto out;
    }
    if ((st = c->ops->weight_extra_held(c->be, &held))) {
        cf_record_call(c, OP, shape, "weight_extra_held", st);
        goto out;
    }
    /* err: held / planned (held itself when nothing was planned), tol 1 */
    double ratio = planned ? (double)held / (double)planned : (double)held;
    cf_record(c, OP, shape, ratio, 1.0, held <= planned ? CF_PASS : CF_FAIL,
              "%llu bytes held, more than the %llu weight_extra_bytes planned for these weights",
              (unsigned long long)held, (unsigned long long)planned);
    printf("NOTE %s: %llu bytes held of %llu planned after T=%lld matmuls over %d weights\n", OP,
           (unsigned long long)held, (unsigned long long)planned, (long long)T, used);
out:
    for (int i = 0; i < NT; i++) cf_buffer_free(c, wbuf[i]);
    cf_buffer_free(c, xb);
    cf_buffer_free(c, ob);
    free(wb);
    free(wv);
    free(x);
}

void cf_run_extra_ops(cf *c)
{
    if (!c->ops->weight_extra_bytes && !c->ops->weight_extra_held) {
        cf_record(c, OP, "-", 0, 0, CF_SKIP, "optional slots (ABI 1.15) are NULL: the memory plan counts "
                  "nothing beside the weights");
        printf("NOTE %s: weight_extra_bytes and weight_extra_held are NULL (optional, ABI 1.15): passes; "
               "the memory plan counts nothing beside this backend's weights\n", OP);
        return;
    }
    if (c->ops->weight_extra_bytes) case_bytes_unsupported(c);
    if (c->ops->weight_extra_bytes && c->ops->weight_extra_held) {
        case_held(c);
        return;
    }
    /* one without the other: what is held cannot be held to the plan */
    const char *null = c->ops->weight_extra_bytes ? "weight_extra_held" : "weight_extra_bytes";
    cf_record(c, OP, "held against planned", 0, 0, CF_SKIP, "%s is NULL (optional, ABI 1.15)", null);
    printf("NOTE %s: %s is NULL (optional, ABI 1.15): held against planned not checked\n", OP, null);
}
