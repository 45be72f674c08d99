/* test_logsoftmax.c: core/model/logsoftmax.c: the AVX2 max and sum of
 * exponentials against the scalar reference (forced), on rows of every
 * tail length and the sizes of real vocabularies, with NaN and infinities
 * mixed in; the AVX2 exp per term over its whole range; and the sampler's
 * pagoda_logprob_of the same on both paths. Skips the AVX2 half (saying
 * so) on a CPU without AVX2. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "logsoftmax.h"
#include "sampler.h"
#include "testutil.h"

static bool g_avx2;

static void fill(float *l, int32_t n, uint64_t seed, bool odd)
{
    tu_rng r;
    tu_rng_seed(&r, seed);
    tu_fill_normal(&r, l, n, 4.0f);
    if (!odd) return;
    for (int32_t i = 3; i < n; i += 97) l[i] = NAN;
    for (int32_t i = 5; i < n; i += 89) l[i] = -INFINITY;
    if (n > 40) l[n / 3] = 1e30f;
}

START_TEST(avx2_matches_scalar)
{
    if (!g_avx2) {
        printf("test_logsoftmax: no AVX2 on this CPU: only the scalar path runs\n");
        return;
    }
    const int32_t sizes[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 100, 512, 32000, 49152, 151936, 262144};
    float *l = malloc(sizeof(float) * 262144);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        for (int odd = 0; odd < 2; odd++) {
            int32_t n = sizes[k];
            fill(l, n, 100 + k, odd);
            pagoda_logsoftmax_force_scalar(true);
            float ms = pagoda_logits_max(l, n);
            double zs = pagoda_logits_sumexp(l, n, ms);
            ck_assert(pagoda_logsoftmax_force_scalar(false));
            float mv = pagoda_logits_max(l, n);
            double zv = pagoda_logits_sumexp(l, n, mv);
            ck_assert_msg(ms == mv, "n %d: max %g vs %g", n, ms, mv);
            ck_assert(ms == pagoda_logits_max_scalar(l, n));
            ck_assert_msg(fabs(zv - zs) <= 3e-7 * zs, "n %d odd %d: sum %.9g vs %.9g", n, odd, zv, zs);
        }
    }
    /* NaN never counts, +inf is FLT_MAX, all -inf is -inf */
    float w[20];
    for (int i = 0; i < 20; i++) w[i] = -INFINITY;
    ck_assert(isinf(pagoda_logits_max(w, 20)) && pagoda_logits_max(w, 20) < 0);
    w[11] = NAN;
    ck_assert(isinf(pagoda_logits_max(w, 20)) && pagoda_logits_max(w, 20) < 0);
    w[12] = INFINITY;
    ck_assert(pagoda_logits_max(w, 20) == 3.40282347e38f);
    free(l);
}
END_TEST

/* Every term's exp: 8 equal values go through one vector; their sum / 8
 * against libm's expf, over the range the sum meets (x - max <= 0). */
START_TEST(avx2_exp_per_term)
{
    if (!g_avx2) return;
    pagoda_logsoftmax_force_scalar(false);
    double worst = 0;
    for (double x = -87.0; x <= 0.0; x += 0.0137) {
        float v[8];
        for (int i = 0; i < 8; i++) v[i] = (float)x;
        double got = pagoda_logits_sumexp(v, 8, 0.0f) / 8.0;
        double want = exp((double)(float)x);
        double rel = fabs(got - want) / want;
        if (rel > worst) worst = rel;
    }
    ck_assert_msg(worst < 2e-7, "worst relative error %.3g", worst);
    /* below the range: at most exp(-87.3) each, not 0 but negligible */
    float tiny[8] = {-100, -1000, -INFINITY, NAN, -88, -90, -200, -1e30f};
    ck_assert(pagoda_logits_sumexp(tiny, 8, 0.0f) <= 8 * 1.3e-38);
}
END_TEST

/* The sampler's scoring on both paths: the same token order, logprobs
 * within 1e-6, and summing to one. */
START_TEST(logprob_of_both_paths)
{
    enum { V = 49152 };
    static float l[V];
    fill(l, V, 7, false);
    int32_t ids_s[5], ids_v[5];
    float lp_s[5], lp_v[5];
    pagoda_logsoftmax_force_scalar(true);
    float a = pagoda_logprob_of(l, V, 123, 5, ids_s, lp_s);
    pagoda_logsoftmax_force_scalar(false);
    float b = pagoda_logprob_of(l, V, 123, 5, ids_v, lp_v);
    ck_assert_msg(fabs(a - b) < 1e-6, "%.9g vs %.9g", a, b);
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(ids_s[i], ids_v[i]);
        ck_assert(fabs(lp_s[i] - lp_v[i]) < 1e-6);
    }
    /* the best alone is the argmax, the first of equals */
    float eq[10] = {1, 3, 2, 3, 0, -1, 3, NAN, 2, 1};
    int32_t id;
    float lp;
    pagoda_logprob_of(eq, 10, 0, 1, &id, &lp);
    ck_assert_int_eq(id, 1);
    double z = 0;
    for (int32_t i = 0; i < V; i++) z += exp((double)pagoda_logprob_of(l, V, i, 0, NULL, NULL));
    ck_assert_double_eq_tol(z, 1.0, 1e-5);
}
END_TEST

static Suite *suite(void)
{
    pagoda_logsoftmax_force_scalar(false);
    g_avx2 = pagoda_logsoftmax_force_scalar(false);
    Suite *s = suite_create("logsoftmax");
    TCase *tc = tcase_create("paths");
    tcase_add_test(tc, avx2_matches_scalar);
    tcase_add_test(tc, avx2_exp_per_term);
    tcase_add_test(tc, logprob_of_both_paths);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
