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

/* The reference logits' checks: ref_logits.h. */

#endif /* PAGODA_MODEL_TESTUTIL_H */
