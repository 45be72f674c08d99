/* model_testutil.h: checks that the suites of model files share (static
 * inline functions, so each suite that needs them includes this): a file
 * refused at open with one line, and a prefill's logits against a
 * transformers reference JSON (tests/fixtures/moe/README.md describes its
 * fields; tests/fixtures/gptoss/ writes the same). */
#ifndef PAGODA_MODEL_TESTUTIL_H
#define PAGODA_MODEL_TESTUTIL_H

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "model.h"

/* pagoda_model_open(path) fails with one line containing `want`. */
static inline void mt_expect_open_error(const char *path, const char *want)
{
    char err[512] = "";
    pagoda_model *m = pagoda_model_open(path, err, sizeof err);
    ck_assert_msg(m == NULL, "%s opened, expected: %s", path, want);
    ck_assert_msg(strstr(err, want), "error '%s' lacks '%s'", err, want);
    ck_assert_msg(!strchr(err, '\n'), "error is not one line: %s", err);
}

/* The n rows of logits [n x V] of prompt `pr` (one prefill of its ids)
 * against the reference: every position's top5_ids / top5_logits and the
 * last position's last_logits, each within tol; *worst is raised to the
 * largest difference seen. what and p name the case in a failure. */
static inline void mt_check_ref_logits(json_t *pr, const float *logits, int32_t n, int32_t V,
                                       double tol, double *worst, const char *what, size_t p)
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
                          what, p, r, id, logits[(size_t)r * V + id], want);
        }
    json_t *last = json_object_get(pr, "last_logits");
    ck_assert_int_eq((int)json_array_size(last), V);
    const float *lr = logits + (size_t)(n - 1) * V;
    for (int32_t v = 0; v < V; v++) {
        double d = fabs(lr[v] - json_number_value(json_array_get(last, (size_t)v)));
        *worst = fmax(*worst, d);
        ck_assert_msg(d <= tol, "%s prompt %zu last position, token %d off by %g", what, p, v, d);
    }
}

#endif /* PAGODA_MODEL_TESTUTIL_H */
