/*
 * test_cpu_swiglu_oai.c: gpt-oss's clamped SwiGLU through the CPU kernel
 * table (vecdot.h swiglu_oai): every path this host runs (cpu_paths.h:
 * scalar, AVX2, AVX-VNNI, AVX-512 natively where the CPU has them, and the
 * AVX-512 entry's SIMDe copy on any AVX2 host) against the scalar entry,
 * which is the reference (test_cuda_probe holds it to the CUDA kernel's
 * formula bit for bit).
 * Tolerance: |simd - scalar| <= 1e-6 |scalar| + 1e-7. The SIMD exp is a
 * polynomial within ~2 ulp of expf's; 1 + e, the division and the product
 * by (y + 1) (computed alike on both sides, so its cancellation near
 * y = -1 is shared, not amplified) add a rounding each: ~5 ulp, 3e-7
 * relative, under any float rounding; 1e-6 leaves a factor 3. The 1e-7
 * absolute covers a large negative gate past expf's overflow, where the
 * scalar value is -0 and a SIMD lane 0 or a value below 1e-35.
 * Inputs: gates from -1000 to 20 and ups from -12 to 12 (the clamp limit 7
 * crossed on both sides, and values at it and one ulp either side), a NaN
 * gate (limit) and a NaN up (NaN), +inf gate and +-inf up; lengths 1..67
 * at two alignments for the tails. Not for: the formula itself (the probe
 * test), the backend op's checks (test_gptoss, conformance).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_features.h"
#include "kernels.h"
#include "testutil.h"
#include "vecdot.h"

#include "cpu_paths.h"

static const pagoda_vecdot_table *path_table(const cpu_path *p)
{
    return p->tab ? p->tab : pagoda_cpu_vecdot_level(p->isa);
}

static void fill(float *g, float *u, int n, uint64_t seed, float limit)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) {
        float span = i % 4 == 0 ? 1020.0f : i % 4 == 1 ? 60.0f : i % 4 == 2 ? 24.0f : 4.0f;
        /* gates in [20 - span, 20): mostly negative for the wide spans */
        g[i] = i % 4 >= 2 ? (tu_rng_uniform(&r) - 0.5f) * span : 20.0f - tu_rng_uniform(&r) * span;
        u[i] = (tu_rng_uniform(&r) - 0.5f) * 24.0f;
    }
    /* the clamp limit exactly and one ulp either side, for gate and up */
    const float edge[] = {limit, nextafterf(limit, 0.0f), nextafterf(limit, 2 * limit), -limit,
                          nextafterf(-limit, 0.0f), nextafterf(-limit, -2 * limit), 0.0f, -0.0f,
                          -1000.0f, -60.0f, -52.2f, -51.0f};
    int ne = (int)(sizeof edge / sizeof edge[0]);
    for (int i = 0; i < ne && 2 * i + 1 < n; i++) {
        g[2 * i] = edge[i];
        u[2 * i + 1] = edge[i];
    }
}

/* Checks got against want; returns the largest relative difference where
 * |want| > 1e-30 (what the report line shows). */
static double check_close(const char *path, const float *g, const float *u, const float *want,
                          const float *got, int n, int at)
{
    double worst = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(want[i])) {
            ck_assert_msg(isnan(got[i]), "%s: n=%d i=%d g=%g u=%g: %g, want NaN", path, at, i,
                          (double)g[i], (double)u[i], (double)got[i]);
            continue;
        }
        double tol = 1e-6 * fabs(want[i]) + 1e-7;
        ck_assert_msg(fabs((double)got[i] - want[i]) <= tol,
                      "%s: n=%d i=%d g=%.9g u=%.9g: %.9g, scalar %.9g (tol %g)", path, at, i,
                      (double)g[i], (double)u[i], (double)got[i], (double)want[i], tol);
        if (fabs(want[i]) > 1e-30 && fabs((double)got[i] - want[i]) / fabs(want[i]) > worst)
            worst = fabs((double)got[i] - want[i]) / fabs(want[i]);
    }
    return worst;
}

/* Long rows: every path's entry near the scalar one, for gpt-oss's
 * constants and another pair. */
START_TEST(test_swiglu_oai_paths_near_scalar)
{
    enum { N = 20003 };
    float *g = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N);
    float *want = malloc(sizeof(float) * N), *got = malloc(sizeof(float) * N);
    ck_assert(g && u && want && got);
    const float consts[2][2] = {{1.702f, 7.0f}, {1.0f, 2.5f}};
    int np = cpu_paths_count(), checked = 0;
    for (int c = 0; c < 2; c++) {
        float alpha = consts[c][0], limit = consts[c][1];
        fill(g, u, N, 31 + (uint64_t)c, limit);
        g[N - 1] = NAN;
        u[N - 2] = NAN;
        g[N - 3] = INFINITY;
        u[N - 4] = INFINITY;
        u[N - 5] = -INFINITY;
        pagoda_vecdot_scalar.swiglu_oai(g, u, alpha, limit, want, N);
        /* the reference's own specials: a NaN gate is min'ed to the limit */
        ck_assert(isfinite(want[N - 1]) && isnan(want[N - 2]) && isfinite(want[N - 3]));
        for (int p = 1; p < np; p++) {
            const pagoda_vecdot_table *t = path_table(&PATHS[p]);
            ck_assert_ptr_nonnull(t->swiglu_oai);
            /* the AVX-512 tables (native and SIMDe) hold act_avx512.c's entry */
            if (strstr(PATHS[p].name, "AVX-512"))
                ck_assert_msg(t->swiglu_oai != pagoda_vecdot_avx2.swiglu_oai, "%s: AVX2's entry",
                              PATHS[p].name);
            t->swiglu_oai(g, u, alpha, limit, got, N);
            double w = check_close(PATHS[p].name, g, u, want, got, N, N);
            printf("swiglu_oai %s (alpha %g, limit %g): largest relative difference from scalar %.3g\n",
                   PATHS[p].name, (double)alpha, (double)limit, w);
            checked++;
        }
    }
    printf("swiglu_oai: %d path(s) beside scalar within 1e-6 rel + 1e-7 abs over %d values\n",
           checked / 2, 2 * N);
    free(g);
    free(u);
    free(want);
    free(got);
}
END_TEST

/* Every length 1..67 (the 8- and 16-wide bodies and their tails) at two
 * alignments, in place as well (out aliasing the gate). */
START_TEST(test_swiglu_oai_tails)
{
    enum { M = 70 };
    float g[M + 1], u[M + 1], want[M + 1], got[M + 1], inpl[M + 1];
    int np = cpu_paths_count();
    for (int n = 1; n <= 67; n++)
        for (int off = 0; off < 2; off++) {
            fill(g, u, M + 1, 100 + (uint64_t)n, 7.0f);
            pagoda_vecdot_scalar.swiglu_oai(g + off, u + off, 1.702f, 7.0f, want, n);
            for (int p = 1; p < np; p++) {
                const pagoda_vecdot_table *t = path_table(&PATHS[p]);
                for (int i = 0; i < M + 1; i++) got[i] = -12345.0f;
                t->swiglu_oai(g + off, u + off, 1.702f, 7.0f, got, n);
                check_close(PATHS[p].name, g + off, u + off, want, got, n, n);
                ck_assert_msg(got[n] == -12345.0f, "%s: n=%d wrote past the end", PATHS[p].name, n);
                for (int i = 0; i < n; i++) inpl[i] = g[off + i];
                t->swiglu_oai(inpl, u + off, 1.702f, 7.0f, inpl, n);
                for (int i = 0; i < n; i++)
                    ck_assert_msg(inpl[i] == got[i] || (isnan(inpl[i]) && isnan(got[i])),
                                  "%s: n=%d i=%d in place %g, apart %g", PATHS[p].name, n, i,
                                  (double)inpl[i], (double)got[i]);
            }
        }
}
END_TEST

/* pagoda_cpu_swiglu_oai (ops.c, what the backend op runs) calls the
 * forced level's entry: with each native level forced, its rows equal that
 * level's table entry bit for bit. */
START_TEST(test_swiglu_oai_ops_dispatch)
{
    enum { R = 3, C = 45 };
    float g[R * C], u[R * C], out[R * C], want[C];
    fill(g, u, R * C, 7, 7.0f);
    int np = cpu_paths_count();
    for (int p = 0; p < np; p++) {
        if (PATHS[p].tab) continue;   /* the SIMDe copies are no level's table */
        cpu_path_use(&PATHS[p]);
        pagoda_cpu_swiglu_oai(g, C * sizeof(float), u, C * sizeof(float), 1.702f, 7.0f, out,
                              C * sizeof(float), R, C);
        cpu_path_reset();
        const pagoda_vecdot_table *t = pagoda_cpu_vecdot_level(PATHS[p].isa);
        for (int r = 0; r < R; r++) {
            t->swiglu_oai(g + r * C, u + r * C, 1.702f, 7.0f, want, C);
            for (int i = 0; i < C; i++)
                ck_assert_msg(memcmp(&out[r * C + i], &want[i], sizeof(float)) == 0,
                              "%s: row %d col %d: ops %a, table %a", PATHS[p].name, r, i,
                              (double)out[r * C + i], (double)want[i]);
        }
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cpu_swiglu_oai");
    TCase *tc = tcase_create("paths");
    tcase_add_test(tc, test_swiglu_oai_paths_near_scalar);
    tcase_add_test(tc, test_swiglu_oai_tails);
    tcase_add_test(tc, test_swiglu_oai_ops_dispatch);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
