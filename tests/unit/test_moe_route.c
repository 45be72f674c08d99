/* test_moe_route.c: the router's decision on the host (moe_route.c), by
 * hand-computed cases: softmax then top-k with and without renormalising
 * (Qwen3-MoE / Qwen2-MoE), softmax over the selected (equal to the
 * renormalised softmax, Mixtral), sigmoid with a selection bias that
 * chooses but does not weigh (GLM-4.5), the scale, ties (lower index
 * first, whatever the order), k = E, and DeepSeek's group-limited top-k
 * (V3's sum of a group's top two, with the bias; V2's largest). */
#include <math.h>

#include "model.h"
#include "moe_route.h"
#include "testutil.h"

static void route(int gating, bool norm, float scale, const float *bias, const float *logits,
                  int32_t E, int32_t k, int32_t *ids, float *w)
{
    float scratch[3 * 16];
    pagoda_moe_route_params p = {.n_experts = E, .k = k, .gating = gating, .norm_topk = norm,
                                 .scale = scale, .bias = bias};
    pagoda_moe_route(&p, logits, ids, w, scratch);
}

START_TEST(softmax_topk)
{
    const float lg[4] = {0.5f, 2.0f, -1.0f, 1.0f};
    double z = exp(0.5) + exp(2.0) + exp(-1.0) + exp(1.0);
    int32_t ids[2];
    float w[2];
    route(PAGODA_MOE_GATING_SOFTMAX, false, 1.0f, NULL, lg, 4, 2, ids, w);
    ck_assert_int_eq(ids[0], 1);
    ck_assert_int_eq(ids[1], 3);
    ck_assert_double_eq_tol(w[0], exp(2.0) / z, 1e-6);
    ck_assert_double_eq_tol(w[1], exp(1.0) / z, 1e-6);
    /* renormalised: the two weights sum to one, in the same ratio */
    route(PAGODA_MOE_GATING_SOFTMAX, true, 1.0f, NULL, lg, 4, 2, ids, w);
    ck_assert_double_eq_tol(w[0], exp(2.0) / (exp(2.0) + exp(1.0)), 1e-6);
    ck_assert_double_eq_tol(w[0] + w[1], 1.0, 1e-6);
    /* softmax over the selected logits is the same numbers */
    float w2[2];
    int32_t ids2[2];
    route(PAGODA_MOE_GATING_SOFTMAX_WEIGHT, false, 1.0f, NULL, lg, 4, 2, ids2, w2);
    ck_assert_int_eq(ids2[0], 1);
    ck_assert_int_eq(ids2[1], 3);
    ck_assert_double_eq_tol(w2[0], w[0], 1e-6);
    ck_assert_double_eq_tol(w2[1], w[1], 1e-6);
    /* the scale multiplies after the normalisation */
    route(PAGODA_MOE_GATING_SOFTMAX, true, 2.5f, NULL, lg, 4, 2, ids, w);
    ck_assert_double_eq_tol(w[0] + w[1], 2.5, 1e-5);
}
END_TEST

START_TEST(sigmoid_bias_chooses_only)
{
    const float lg[4] = {1.0f, 0.0f, 2.0f, -1.0f};
    const float bias[4] = {0.0f, 5.0f, 0.0f, 0.0f};   /* expert 1 chosen first by its bias */
    int32_t ids[2];
    float w[2];
    route(PAGODA_MOE_GATING_SIGMOID, false, 1.0f, bias, lg, 4, 2, ids, w);
    ck_assert_int_eq(ids[0], 1);
    ck_assert_int_eq(ids[1], 2);
    ck_assert_double_eq_tol(w[0], 0.5, 1e-6);   /* sigmoid(0), not sigmoid(0) + 5 */
    ck_assert_double_eq_tol(w[1], 1.0 / (1.0 + exp(-2.0)), 1e-6);
    route(PAGODA_MOE_GATING_SIGMOID, true, 1.0f, bias, lg, 4, 2, ids, w);
    double s1 = 1.0 / (1.0 + exp(-2.0));
    ck_assert_double_eq_tol(w[0], 0.5 / (0.5 + s1), 1e-6);
    /* without the bias, the two largest logits */
    route(PAGODA_MOE_GATING_SIGMOID, false, 1.0f, NULL, lg, 4, 2, ids, w);
    ck_assert_int_eq(ids[0], 2);
    ck_assert_int_eq(ids[1], 0);
    /* sigmoid of large magnitudes stays finite */
    ck_assert_double_eq_tol(pagoda_moe_sigmoid(-200.0f), 0.0, 1e-30);
    ck_assert_double_eq_tol(pagoda_moe_sigmoid(200.0f), 1.0, 1e-7);
}
END_TEST

START_TEST(ties_lower_index_first)
{
    const float lg[6] = {1.0f, 3.0f, 3.0f, 0.0f, 3.0f, 1.0f};
    int32_t ids[4];
    float w[4];
    route(PAGODA_MOE_GATING_SOFTMAX, false, 1.0f, NULL, lg, 6, 4, ids, w);
    ck_assert_int_eq(ids[0], 1);
    ck_assert_int_eq(ids[1], 2);
    ck_assert_int_eq(ids[2], 4);
    ck_assert_int_eq(ids[3], 0);   /* 0 and 5 tie at 1.0: the lower index */
    ck_assert_float_eq(w[0], w[1]);
    /* every logit equal, k = E: each expert once, in index order, 1/E each */
    const float eq[5] = {0.25f, 0.25f, 0.25f, 0.25f, 0.25f};
    int32_t all[5];
    float wa[5];
    route(PAGODA_MOE_GATING_SOFTMAX, true, 1.0f, NULL, eq, 5, 5, all, wa);
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(all[i], i);
        ck_assert_double_eq_tol(wa[i], 0.2, 1e-7);
    }
}
END_TEST

START_TEST(rows_route_each_token)
{
    const float lg[2 * 3] = {0.0f, 1.0f, 2.0f, 2.0f, 1.0f, 0.0f};
    int32_t ids[2];
    float w[2], scratch[9];
    pagoda_moe_route_params p = {.n_experts = 3, .k = 1, .gating = PAGODA_MOE_GATING_SOFTMAX,
                                 .norm_topk = true, .scale = 1.0f};
    pagoda_moe_route_rows(&p, lg, 2, ids, w, scratch);
    ck_assert_int_eq(ids[0], 2);
    ck_assert_int_eq(ids[1], 0);
    ck_assert_float_eq(w[0], 1.0f);
    ck_assert_float_eq(w[1], 1.0f);
}
END_TEST

/* Group-limited top-k (DeepSeek): 8 experts in 4 groups of 2. V3 scores a
 * group by the sum of its two largest (biased) scores, V2 by its largest;
 * the top-k is taken only inside the chosen groups. */
START_TEST(group_limited)
{
    /* sigmoid scores; group 0 = {0,1}, 1 = {2,3}, 2 = {4,5}, 3 = {6,7} */
    const float lg[8] = {3.0f, -3.0f, 1.0f, 1.0f, -2.0f, -2.0f, 0.5f, 0.4f};
    float scratch[3 * 8];
    int32_t ids[2];
    float w[2];
    pagoda_moe_route_params p = {.n_experts = 8, .k = 2, .gating = PAGODA_MOE_GATING_SIGMOID,
                                 .norm_topk = false, .scale = 1.0f, .n_groups = 4,
                                 .n_group_used = 1};
    /* sums: g0 0.953+0.047 = 1.0, g1 2 x 0.731 = 1.462, g2 0.24, g3 0.622+0.599:
     * group 1 wins though expert 0 has the largest score */
    pagoda_moe_route(&p, lg, ids, w, scratch);
    ck_assert_int_eq(ids[0], 2);
    ck_assert_int_eq(ids[1], 3);
    ck_assert_double_eq_tol(w[0], 1.0 / (1.0 + exp(-1.0)), 1e-6);
    /* two groups: 1 and 3 (1.221 > 1.0); the top-2 of {2,3,6,7} */
    p.n_group_used = 2;
    pagoda_moe_route(&p, lg, ids, w, scratch);
    ck_assert_int_eq(ids[0], 2);
    ck_assert_int_eq(ids[1], 3);
    /* a bias moves a group's sum, and so which group is chosen */
    const float bias[8] = {0, 0, 0, 0, 0, 0, 0.5f, 0.0f};
    p.bias = bias;
    p.n_group_used = 1;
    pagoda_moe_route(&p, lg, ids, w, scratch);   /* g3: 1.122 + 0.599 = 1.721 */
    ck_assert_int_eq(ids[0], 6);
    ck_assert_int_eq(ids[1], 7);
    ck_assert_double_eq_tol(w[0], 1.0 / (1.0 + exp(-0.5)), 1e-6);   /* the bias only chose */
    /* V2 (softmax): a group's score is its largest; group 0 (expert 0) wins */
    p.bias = NULL;
    p.gating = PAGODA_MOE_GATING_SOFTMAX;
    pagoda_moe_route(&p, lg, ids, w, scratch);
    ck_assert_int_eq(ids[0], 0);
    ck_assert_int_eq(ids[1], 1);
    /* every group allowed: the plain top-k */
    p.n_group_used = 4;
    pagoda_moe_route(&p, lg, ids, w, scratch);
    ck_assert_int_eq(ids[0], 0);
    ck_assert(ids[1] == 2 || ids[1] == 3);
    ck_assert_int_eq(ids[1], 2);   /* tie: the lower index */
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("moe_route");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, softmax_topk);
    tcase_add_test(tc, sigmoid_bias_chooses_only);
    tcase_add_test(tc, ties_lower_index_first);
    tcase_add_test(tc, rows_route_each_token);
    tcase_add_test(tc, group_limited);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
