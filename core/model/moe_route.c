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
