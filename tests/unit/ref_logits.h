/* ref_logits.h: the checks test_moe_ref and test_mla_ref make against a
 * transformers reference JSON (the ARCH-tiny.ref.json files of tests/fixtures/moe and mla): one
 * prompt's logits after its prefill (every position's top-5 and the last
 * position's whole vocabulary within a tolerance), then greedy decoding on
 * pagoda's own choices, which must follow the reference's greedy ids up to
 * the first near-tie (a reference top-2 gap under near_tie, where two
 * float orders may choose differently) and past it only while they agree.
 * Header-only (static functions), for the Check suites. */
#ifndef PAGODA_TEST_REF_LOGITS_H
#define PAGODA_TEST_REF_LOGITS_H

#include <jansson.h>
#include <math.h>
#include <stdio.h>

#include "testutil.h"

static inline int32_t ref_argmax(const float *x, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* logits [n x V] of prompt pr's n positions against its top5 and
 * last_logits; the largest difference into *worst. */
static inline void ref_check_prefill(json_t *pr, const float *logits, int32_t n, int32_t V, double tol,
                                     const char *name, size_t p, double *worst)
{
    json_t *t5i = json_object_get(pr, "top5_ids"), *t5l = json_object_get(pr, "top5_logits");
    ck_assert_int_eq((int)json_array_size(t5i), n);
    for (int32_t r = 0; r < n; r++)
        for (size_t j = 0; j < json_array_size(json_array_get(t5i, (size_t)r)); j++) {
            int32_t id = (int32_t)json_integer_value(json_array_get(json_array_get(t5i, (size_t)r), j));
            double want = json_number_value(json_array_get(json_array_get(t5l, (size_t)r), j));
            double d = fabs(logits[(size_t)r * V + id] - want);
            *worst = fmax(*worst, d);
            ck_assert_msg(d <= tol, "%s prompt %zu position %d token %d: %.6f, transformers %.6f",
                          name, p, r, id, logits[(size_t)r * V + id], want);
        }
    json_t *last = json_object_get(pr, "last_logits");
    ck_assert_int_eq((int)json_array_size(last), V);
    const float *lr = logits + (size_t)(n - 1) * V;
    for (int32_t v = 0; v < V; v++) {
        double d = fabs(lr[v] - json_number_value(json_array_get(last, (size_t)v)));
        *worst = fmax(*worst, d);
        ck_assert_msg(d <= tol, "%s prompt %zu last position, token %d off by %g", name, p, v, d);
    }
}

/* Greedy from the prompt's last logits `lr`: step(user, g, token) runs
 * token as the (g+1)-th generated position and leaves its logits in
 * `out` [V]. Prints and checks the agreement. */
static inline void ref_check_greedy(json_t *pr, const float *lr, int32_t n, int32_t V, double near_tie,
                                    const char *name, size_t p,
                                    void (*step)(void *user, int32_t g, int32_t token), void *user,
                                    const float *out)
{
    json_t *greedy = json_object_get(pr, "greedy_ids"), *gaps = json_object_get(pr, "greedy_top2_gap");
    int32_t n_gen = (int32_t)json_array_size(greedy);
    int32_t next = ref_argmax(lr, V), agree = 0, tie_at = -1;
    for (int32_t g = 0; g < n_gen; g++) {
        int32_t want = (int32_t)json_integer_value(json_array_get(greedy, (size_t)g));
        double gap = json_number_value(json_array_get(gaps, (size_t)g));
        if (tie_at < 0 && gap < near_tie) tie_at = g;
        if (next != want) {
            ck_assert_msg(tie_at >= 0 && g >= tie_at, "%s prompt %zu: greedy step %d is %d, "
                          "transformers %d (top-2 gap %g, no near-tie before)", name, p, g, next,
                          want, gap);
            break;
        }
        agree++;
        if (g == n_gen - 1) break;
        step(user, g, next);
        next = ref_argmax(out, V);
    }
    printf("%s prompt %zu (%d tokens): greedy agrees for %d of %d steps%s\n", name, p, n, agree,
           n_gen, tie_at >= 0 ? " (a near-tie on the way)" : "");
    if (tie_at < 0) ck_assert_int_eq(agree, n_gen);
}

#endif /* PAGODA_TEST_REF_LOGITS_H */
