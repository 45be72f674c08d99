/*
 * moe_route.h: a mixture-of-experts router's decision for one token, on the
 * host: from the router's logits over every expert to the k experts the
 * token goes to and the weight each one's output gets. Pure scalar
 * functions; the forward pass downloads the router logits of a step and
 * calls them per token.
 *
 *   SOFTMAX         p = softmax(logits); choose the k largest p (+ bias);
 *                   weight = p of each (Qwen, Mixtral with norm_topk)
 *   SIGMOID         p = sigmoid(logits); choose the k largest p + bias (the
 *                   selection bias only chooses); weight = p (GLM-4.5)
 *   SOFTMAX_WEIGHT  choose the k largest logits (+ bias); weight = the
 *                   softmax over those k logits
 * (with groups: only among the experts of the best groups, below), then,
 * with norm_topk, the k weights divided by their sum, and all of them
 * times scale. Ties choose the lower expert index; the k choices come
 * in order of decreasing score (ties: lower index first).
 *
 * Not for: running the experts (forward.c) or reading the keys (model.c).
 * Threads: pure, [any thread].
 */
#ifndef PAGODA_MOE_ROUTE_H
#define PAGODA_MOE_ROUTE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct pagoda_moe_route_params {
    int32_t n_experts;      /* E >= 1 */
    int32_t k;              /* 1 <= k <= E */
    int32_t gating;         /* pagoda_moe_gating (model.h) */
    bool norm_topk;         /* divide the k weights by their sum */
    float scale;            /* then multiply them by it (1: none) */
    const float *bias;      /* [E] selection bias added for choosing only, or NULL */
    /* Group-limited top-k (DeepSeek): the E experts are n_groups groups of
     * E / n_groups; only the n_group_used groups of highest group score
     * are chosen from (0 or 1 group: no limit). A group's score is the
     * largest choice score in it with SOFTMAX gating (DeepSeek-V2's
     * group_limited_greedy) and the sum of its two largest choice scores
     * (bias included) otherwise (DeepSeek-V3's noaux_tc); ties choose the
     * lower group. n_groups <= PAGODA_MOE_MAX_GROUPS, dividing E. */
    int32_t n_groups;
    int32_t n_group_used;
} pagoda_moe_route_params;

#define PAGODA_MOE_MAX_GROUPS 64

/* Route one token: logits [E] -> ids[k] (0 <= id < E, distinct) and
 * weights[k]. scratch holds 3 * E floats. */
void pagoda_moe_route(const pagoda_moe_route_params *p, const float *logits, int32_t *ids,
                      float *weights, float *scratch);

/* The same for n tokens: logits [n x E] row-major, ids and weights
 * [n x k]. */
void pagoda_moe_route_rows(const pagoda_moe_route_params *p, const float *logits, int32_t n,
                           int32_t *ids, float *weights, float *scratch);

/* sigmoid(x) = 1 / (1 + exp(-x)), without overflow for large |x|. */
float pagoda_moe_sigmoid(float x);

#endif /* PAGODA_MOE_ROUTE_H */
