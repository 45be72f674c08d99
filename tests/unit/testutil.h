/* testutil.h: small helpers shared by the Check suites: where the source
 * and build trees are, a seeded random generator, and a runner. */
#ifndef PAGODA_TESTUTIL_H
#define PAGODA_TESTUTIL_H
#include <check.h>
#include <stdint.h>
#include <stddef.h>

/* Path under the source tree ($PAGODA_SOURCE_DIR, else the compile-time
 * one), written into a static buffer rotated over 8 calls. */
const char *tu_src(const char *rel);
/* Path under the build tree ($PAGODA_BUILD_DIR). */
const char *tu_build(const char *rel);
/* Path of a file in ../shared/models if it exists, else NULL (extra data
 * only; no test may depend on it alone). */
const char *tu_shared(const char *rel);

/* xorshift64* generator: deterministic per seed. */
typedef struct tu_rng { uint64_t s; } tu_rng;
void tu_rng_seed(tu_rng *r, uint64_t seed);
uint64_t tu_rng_u64(tu_rng *r);
float tu_rng_uniform(tu_rng *r);          /* [0, 1) */
float tu_rng_normal(tu_rng *r);           /* N(0, 1) */
void tu_fill_normal(tu_rng *r, float *x, size_t n, float std);

/* Run one suite; returns the process exit code. */
int tu_run(Suite *s);
#endif
