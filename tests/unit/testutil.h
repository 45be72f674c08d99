/* testutil.h: small helpers shared by the Check suites: where the source
 * and build trees are, a seeded random generator, a checked malloc, the
 * CPU kernel suites' weights and exact dot, and a runner. */
#ifndef PAGODA_TESTUTIL_H
#define PAGODA_TESTUTIL_H
#include <check.h>
#include <stdbool.h>
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

/* malloc(n) (n = 0: one byte) that fails the test on NULL; free() it. */
void *tu_xmalloc(size_t n);

/* The CPU kernel suites' scaffolding (test_cpu_gemm_fma, test_cpu_bf16,
 * test_cpu_kernels): N x K N(0, 1) weights stored as F16 (dtype
 * PAGODA_DTYPE_F16) or else BF16, returned (tu_xmalloc'd), with their
 * exact F32 values in wf[N * K]. */
uint16_t *tu_half_weights(tu_rng *r, int dtype, int64_t N, int64_t K, float *wf);
/* sum x[k] w[k] over k < K in double (a reference far more exact than
 * any F32 kernel), and in *mag (when not NULL) sum |x[k] w[k]|, the scale
 * the kernels' error bounds are relative to. */
double tu_dot_exact(const float *x, const float *w, int64_t K, double *mag);
/* got within an F32 sum's bound of the exact dot of x and w (K terms, any
 * order: 2 (K + 1) 2^-24 sum |x w|). */
bool tu_near_exact_f32(float got, const float *x, const float *w, int64_t K);

/* Run one suite; returns the process exit code. */
int tu_run(Suite *s);
#endif
