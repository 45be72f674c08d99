/*
 * moe_route.c: see moe_route.h. Plain loops over E values: the top-k is a
 * k-pass selection (k <= 8 and E <= 256 in the models served), cheaper than
 * a sort at these sizes and obviously deterministic.
 * Not for: anything on the device.
 */
#include "moe_route.h"

#include <math.h>

#include "model.h"

float pagoda_moe_sigmoid(float x)
{
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

/* prob[e] = softmax(v)[e] over n values, the sum in double. */
static void softmax(const float *v, int32_t n, float *prob)
{
    float mx = v[0];
    for (int32_t i = 1; i < n; i++)
        if (v[i] > mx) mx = v[i];
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        prob[i] = expf(v[i] - mx);
        sum += prob[i];
    }
    for (int32_t i = 0; i < n; i++) prob[i] = (float)(prob[i] / sum);
}

/* Group-limited routing: mark (taken = 1) every expert outside the
 * n_group_used best groups, so the top-k never picks one. */
static void limit_groups(const pagoda_moe_route_params *p, const float *score, float *taken)
{
    const int32_t G = p->n_groups, per = p->n_experts / G;
    float gs[PAGODA_MOE_MAX_GROUPS];
    bool keep[PAGODA_MOE_MAX_GROUPS];
    for (int32_t g = 0; g < G; g++) {
        const float *s = score + (size_t)g * (size_t)per;
        float a = s[0], b = -INFINITY;   /* the largest two */
        for (int32_t i = 1; i < per; i++) {
            if (s[i] > a) {
                b = a;
                a = s[i];
            } else if (s[i] > b) {
                b = s[i];
            }
        }
        gs[g] = p->gating == PAGODA_MOE_GATING_SOFTMAX || per < 2 ? a : a + b;
        keep[g] = false;
    }
    for (int32_t j = 0; j < p->n_group_used; j++) {
        int32_t best = -1;
        for (int32_t g = 0; g < G; g++)
            if (!keep[g] && (best < 0 || gs[g] > gs[best] || (isnan(gs[best]) && !isnan(gs[g]))))
                best = g;
        if (best >= 0) keep[best] = true;
    }
    for (int32_t e = 0; e < p->n_experts; e++)
        if (!keep[e / per]) taken[e] = 1.0f;
}

void pagoda_moe_route(const pagoda_moe_route_params *p, const float *logits, int32_t *ids,
                      float *weights, float *scratch)
{
    const int32_t E = p->n_experts, k = p->k;
    float *prob = scratch, *score = scratch + E, *taken = scratch + 2 * (size_t)E;
    switch (p->gating) {
    case PAGODA_MOE_GATING_SIGMOID:
        for (int32_t e = 0; e < E; e++) prob[e] = pagoda_moe_sigmoid(logits[e]);
        break;
    case PAGODA_MOE_GATING_SOFTMAX_WEIGHT:
        for (int32_t e = 0; e < E; e++) prob[e] = logits[e];
        break;
    default:   /* SOFTMAX */
        softmax(logits, E, prob);
        break;
    }
    for (int32_t e = 0; e < E; e++) {
        score[e] = p->bias ? prob[e] + p->bias[e] : prob[e];
        taken[e] = 0.0f;
    }
    if (p->n_groups > 1 && p->n_groups <= PAGODA_MOE_MAX_GROUPS && E % p->n_groups == 0 &&
        p->n_group_used < p->n_groups)
        limit_groups(p, score, taken);
    /* k passes: the largest score not yet taken, the lower index on a tie
     * (a NaN score is taken only after every number; ids stay distinct) */
    for (int32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (int32_t e = 0; e < E; e++) {
            if (taken[e] != 0.0f) continue;
            if (best < 0 || score[e] > score[best] || (isnan(score[best]) && !isnan(score[e])))
                best = e;
        }
        if (best < 0) best = 0;   /* unreachable: k <= E */
        ids[j] = best;
        weights[j] = prob[best];
        taken[best] = 1.0f;
    }
    if (p->gating == PAGODA_MOE_GATING_SOFTMAX_WEIGHT) softmax(weights, k, weights);
    if (p->norm_topk) {
        double sum = 0.0;
        for (int32_t j = 0; j < k; j++) sum += weights[j];
        if (sum > 0.0)
            for (int32_t j = 0; j < k; j++) weights[j] = (float)(weights[j] / sum);
    }
    if (p->scale != 1.0f)
        for (int32_t j = 0; j < k; j++) weights[j] *= p->scale;
}

void pagoda_moe_route_rows(const pagoda_moe_route_params *p, const float *logits, int32_t n,
                           int32_t *ids, float *weights, float *scratch)
{
    for (int32_t t = 0; t < n; t++)
        pagoda_moe_route(p, logits + (size_t)t * (size_t)p->n_experts, ids + (size_t)t * (size_t)p->k,
                         weights + (size_t)t * (size_t)p->k, scratch);
}
