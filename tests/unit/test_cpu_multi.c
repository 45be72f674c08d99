/* test_cpu_multi.c: the CPU backend's work that shares one input or one
 * pool run: pagoda_cpu_matmul_multi (Q/K/V and gate/up over one prepared
 * input) equals separate matmuls bit for bit, for matrices of one type,
 * of types that share the int8 layout (Q4_K + Q5_K), of types that do not
 * (Q8_0 + F16 + F32 on sgemm), with biases, at decode and prefill sizes;
 * and the row ops spread over the pool (ops_pool.c) equal their serial
 * kernels bit for bit. Both on the scalar and AVX2 paths. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_features.h"
#include "kernels.h"
#include "quant.h"
#include "testutil.h"
#include "threadpool.h"

#include "cpu_paths.h"
/* scalar, then every faster path this host runs (cpu_paths.h: PATHS) */
#define N_ISAS cpu_paths_count()

/* Quantized random weights [N x K] of dtype. */
static uint8_t *weights(tu_rng *r, int dtype, int64_t N, int64_t K, size_t *stride)
{
    size_t rb = pagoda_dtype_row_bytes(dtype, K);
    ck_assert_uint_gt(rb, 0);
    *stride = rb;
    uint8_t *w = tu_xmalloc(rb * (size_t)N);
    float *row = tu_xmalloc(sizeof(float) * (size_t)K);
    for (int64_t n = 0; n < N; n++) {
        tu_fill_normal(r, row, (size_t)K, 0.5f);
        ck_assert_int_eq(pagoda_quantize_row(dtype, row, w + (size_t)n * rb, K), PAGODA_OK);
    }
    free(row);
    return w;
}

typedef struct mm_case {
    int64_t T, K;
    int n;
    int types[4];
    int64_t N[4];
    bool bias;
} mm_case;

static void check_multi(const mm_case *c, pagoda_cpu_exec *ex, tu_rng *r)
{
    int64_t T = c->T, K = c->K;
    size_t xs = sizeof(float) * (size_t)(K + 4);
    float *x = tu_xmalloc(xs * (size_t)T);
    tu_fill_normal(r, x, xs / sizeof(float) * (size_t)T, 1.0f);
    pagoda_cpu_mat m[4];
    uint8_t *w[4];
    float *bias[4], *want[4];
    for (int i = 0; i < c->n; i++) {
        size_t ws;
        w[i] = weights(r, c->types[i], c->N[i], K, &ws);
        bias[i] = tu_xmalloc(sizeof(float) * (size_t)c->N[i]);
        tu_fill_normal(r, bias[i], (size_t)c->N[i], 1.0f);
        size_t os = sizeof(float) * (size_t)(c->N[i] + 1);
        want[i] = tu_xmalloc(os * (size_t)T);
        m[i] = (pagoda_cpu_mat){.w = w[i], .dtype = c->types[i], .w_stride = ws, .N = c->N[i],
                                .bias = c->bias && i != 1 ? bias[i] : NULL, .out = tu_xmalloc(os * (size_t)T),
                                .out_stride = os};
    }
    for (int ii = 0; ii < N_ISAS; ii++) {
        cpu_path_use(&PATHS[ii]);
        for (int i = 0; i < c->n; i++)
            ck_assert_int_eq(pagoda_cpu_matmul(ex, x, xs, T, K, m[i].w, m[i].dtype, m[i].w_stride, m[i].N,
                                               m[i].bias, want[i], m[i].out_stride),
                             PAGODA_OK);
        ck_assert_int_eq(pagoda_cpu_matmul_multi(ex, x, xs, T, K, m, c->n), PAGODA_OK);
        for (int i = 0; i < c->n; i++)
            for (int64_t t = 0; t < T; t++)
                ck_assert_msg(memcmp((uint8_t *)m[i].out + (size_t)t * m[i].out_stride,
                                     (uint8_t *)want[i] + (size_t)t * m[i].out_stride,
                                     sizeof(float) * (size_t)m[i].N) == 0,
                              "path %s T=%lld K=%lld matrix %d (%s): row %lld differs from a lone matmul",
                              PATHS[ii].name, (long long)T, (long long)K, i, pagoda_dtype_name(c->types[i]),
                              (long long)t);
    }
    cpu_path_reset();
    for (int i = 0; i < c->n; i++) {
        free(w[i]);
        free(bias[i]);
        free(want[i]);
        free(m[i].out);
    }
    free(x);
}

START_TEST(test_matmul_multi_equals_separate)
{
    tu_rng r;
    tu_rng_seed(&r, 5);
    pagoda_threadpool *tp = NULL;
    ck_assert_int_eq(pagoda_threadpool_create(3, &tp), PAGODA_OK);
    pagoda_cpu_exec ex = {.pool = tp};
    const int Q8 = PAGODA_DTYPE_Q8_0, Q4 = PAGODA_DTYPE_Q4_0, F16 = PAGODA_DTYPE_F16,
              F32 = PAGODA_DTYPE_F32, Q4K = PAGODA_DTYPE_Q4_K, Q5K = PAGODA_DTYPE_Q5_K,
              Q5 = PAGODA_DTYPE_Q5_0;
    const mm_case cases[] = {
        /* Q/K/V of one type: decode, a small batch (row tiles), x8, prefill-sized */
        {1, 256, 3, {Q8, Q8, Q8}, {96, 32, 32}, true},
        {3, 256, 3, {Q4, Q4, Q4}, {64, 16, 16}, false},
        {5, 512, 3, {Q8, Q8, Q8}, {128, 64, 64}, true},
        {70, 256, 2, {Q4, Q4}, {96, 96}, false},
        {2, 512, 3, {Q5, Q5, Q5}, {64, 32, 32}, false},
        /* K-quants of two types (Q4_K + Q5_K, as Q4_K_M mixes Q4_K with Q6_K) share the q8k activations */
        {1, 512, 3, {Q4K, Q4K, Q5K}, {64, 32, 32}, true},
        {9, 512, 2, {Q4K, Q5K}, {80, 80}, false},
        /* layouts that differ: Q8_0 + F16 + F32 (sgemm from 3 rows) + Q4_0 */
        {1, 256, 4, {Q8, F16, F32, Q4}, {40, 24, 24, 40}, true},
        {6, 256, 4, {Q8, F16, F32, Q4}, {40, 24, 24, 40}, true},
        /* F16 gate/up on the blocked lanes kernel (T >= 24): 5 groups, 3 K blocks */
        {40, 384, 2, {F16, F16}, {72, 72}, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_multi(&cases[i], &ex, &r);
    /* n outside 1..PAGODA_CPU_MATMUL_MAX */
    float x[32] = {0}, o[4];
    pagoda_cpu_mat m = {.w = x, .dtype = F32, .w_stride = 128, .N = 1, .out = o, .out_stride = 4};
    ck_assert_int_eq(pagoda_cpu_matmul_multi(&ex, x, 128, 1, 32, &m, 0), PAGODA_ERR_INVALID);
    ck_assert_int_eq(pagoda_cpu_matmul_multi(&ex, x, 128, 1, 32, &m, PAGODA_CPU_MATMUL_MAX + 1),
                     PAGODA_ERR_INVALID);
    pagoda_cpu_exec_release(&ex);
    pagoda_threadpool_destroy(tp);
}
END_TEST

/* ------------------------------------------------- the row ops on the pool */

START_TEST(test_row_ops_pool_equal_serial)
{
    tu_rng r;
    tu_rng_seed(&r, 9);
    pagoda_threadpool *tp = NULL;
    ck_assert_int_eq(pagoda_threadpool_create(3, &tp), PAGODA_OK);
    pagoda_cpu_exec ex = {.pool = tp};
    /* 300 rows (a prefill: on the pool) and 3 (a decode: on the caller) */
    const int64_t rows_of[] = {300, 3}, C = 256;
    size_t s = sizeof(float) * (size_t)C;
    for (int ii = 0; ii < N_ISAS; ii++) {
        cpu_path_use(&PATHS[ii]);
        for (int ri = 0; ri < 2; ri++) {
            int64_t R = rows_of[ri];
            size_t n = (size_t)(R * C);
            float *a = tu_xmalloc(n * 4), *b = tu_xmalloc(n * 4), *w = tu_xmalloc(s), *o1 = tu_xmalloc(n * 4),
                  *o2 = tu_xmalloc(n * 4);
            tu_fill_normal(&r, a, n, 1.0f);
            tu_fill_normal(&r, b, n, 1.0f);
            tu_fill_normal(&r, w, (size_t)C, 1.0f);
#define SAME(what) ck_assert_msg(memcmp(o1, o2, n * 4) == 0, "%s: pool differs from serial (path %s, %lld rows)", \
                                 what, PATHS[ii].name, (long long)R)
            pagoda_cpu_rms_norm(a, s, w, 1e-5f, o1, s, R, C);
            pagoda_cpu_rms_norm_mt(&ex, a, s, w, 1e-5f, o2, s, R, C);
            SAME("rms_norm");
            pagoda_cpu_add(a, s, b, s, o1, s, R, C);
            pagoda_cpu_add_mt(&ex, a, s, b, s, o2, s, R, C);
            SAME("add");
            pagoda_cpu_swiglu(a, s, b, s, o1, s, R, C);
            pagoda_cpu_swiglu_mt(&ex, a, s, b, s, o2, s, R, C);
            SAME("swiglu");
            pagoda_cpu_geglu(a, s, b, s, o1, s, R, C);
            pagoda_cpu_geglu_mt(&ex, a, s, b, s, o2, s, R, C);
            SAME("geglu");
            pagoda_cpu_scale(a, s, 0.7f, o1, s, R, C);
            pagoda_cpu_scale_mt(&ex, a, s, 0.7f, o2, s, R, C);
            SAME("scale");
            /* rope in place: 4 heads of 64, positions far apart */
            float inv[32];
            for (int i = 0; i < 32; i++) inv[i] = powf(10000.0f, -(float)i / 32.0f);
            pagoda_rope_params p = {.n_rot = 64, .neox = true, .mscale = 1.0f, .inv_freq = inv};
            int32_t *pos = tu_xmalloc(sizeof(int32_t) * (size_t)R);
            for (int64_t t = 0; t < R; t++) pos[t] = (int32_t)(t * 37 % 4000);
            memcpy(o1, a, n * 4);
            memcpy(o2, a, n * 4);
            pagoda_cpu_rope(o1, s, R, 4, 64, pos, &p);
            pagoda_cpu_rope_mt(&ex, o2, s, R, 4, 64, pos, &p);
            SAME("rope");
            /* kv_write: 4 KV heads of 64 (a 256-wide row), F16 and Q8_0 */
            int dts[] = {PAGODA_DTYPE_F16, PAGODA_DTYPE_Q8_0};
            for (int d = 0; d < 2; d++) {
                pagoda_kv_layout L = {.n_layers = 2, .n_blocks = (int32_t)(R + 15) / 16 + 2, .block_size = 16,
                                      .n_kv_heads = 4, .head_dim = 64, .dtype = dts[d]};
                size_t pb = pagoda_kv_pool_bytes(&L);
                uint8_t *p1 = tu_xmalloc(pb), *p2 = tu_xmalloc(pb);
                memset(p1, 0x33, pb);
                memset(p2, 0x33, pb);
                int32_t *slots = tu_xmalloc(sizeof(int32_t) * (size_t)R);
                for (int64_t t = 0; t < R; t++) slots[t] = (int32_t)((t * 11) % (L.n_blocks * 16));
                /* distinct: 11 is prime to the slot counts (336, 48) */
                pagoda_cpu_kv_write(p1, &L, 1, a, s, b, s, slots, (int32_t)R);
                pagoda_cpu_kv_write_mt(&ex, p2, &L, 1, a, s, b, s, slots, (int32_t)R);
                ck_assert_msg(memcmp(p1, p2, pb) == 0, "kv_write %s: pool differs from serial",
                              pagoda_dtype_name(dts[d]));
                free(p1);
                free(p2);
                free(slots);
            }
#undef SAME
            free(pos);
            free(a);
            free(b);
            free(w);
            free(o1);
            free(o2);
        }
    }
    cpu_path_reset();
    pagoda_threadpool_destroy(tp);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cpu_multi");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_matmul_multi_equals_separate);
    tcase_add_test(tc, test_row_ops_pool_equal_serial);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
