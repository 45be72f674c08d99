/* testutil.c: see testutil.h. */
#include "testutil.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "pagoda/types.h"
#include "quant.h"

#ifndef PAGODA_TEST_SOURCE_DIR
#define PAGODA_TEST_SOURCE_DIR "."
#endif

static char tu_bufs[8][8192];
static int tu_next;

static const char *tu_join(const char *env, const char *fallback, const char *rel)
{
    const char *base = getenv(env);
    char *b = tu_bufs[tu_next++ & 7];
    int n = snprintf(b, sizeof tu_bufs[0], "%s/%s", base ? base : fallback, rel);
    if (n < 0 || (size_t)n >= sizeof tu_bufs[0]) b[0] = 0; /* a path that long is a bug */
    return b;
}

const char *tu_src(const char *rel) { return tu_join("PAGODA_SOURCE_DIR", PAGODA_TEST_SOURCE_DIR, rel); }
const char *tu_build(const char *rel) { return tu_join("PAGODA_BUILD_DIR", ".", rel); }

const char *tu_shared(const char *rel)
{
    char tmp[1024];
    int n = snprintf(tmp, sizeof tmp, "../shared/models/%s", rel);
    if (n < 0 || (size_t)n >= sizeof tmp) return NULL;
    const char *p = tu_src(tmp);
    return access(p, R_OK) == 0 ? p : NULL;
}

void tu_rng_seed(tu_rng *r, uint64_t seed) { r->s = seed * 0x9E3779B97F4A7C15ull + 0x1234567ull; if (!r->s) r->s = 1; }
uint64_t tu_rng_u64(tu_rng *r)
{
    r->s ^= r->s >> 12; r->s ^= r->s << 25; r->s ^= r->s >> 27;
    return r->s * 2685821657736338717ull;
}
float tu_rng_uniform(tu_rng *r) { return (float)((tu_rng_u64(r) >> 40) * (1.0 / 16777216.0)); }
float tu_rng_normal(tu_rng *r)
{
    float u1 = tu_rng_uniform(r), u2 = tu_rng_uniform(r);
    if (u1 < 1e-12f) u1 = 1e-12f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}
void tu_fill_normal(tu_rng *r, float *x, size_t n, float std)
{
    for (size_t i = 0; i < n; i++) x[i] = tu_rng_normal(r) * std;
}

void *tu_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

uint16_t *tu_half_weights(tu_rng *r, int dtype, int64_t N, int64_t K, float *wf)
{
    uint16_t *w = tu_xmalloc(sizeof(uint16_t) * (size_t)(N * K));
    for (int64_t i = 0; i < N * K; i++) {
        float v = tu_rng_normal(r);
        w[i] = dtype == PAGODA_DTYPE_F16 ? pagoda_fp32_to_fp16(v) : pagoda_fp32_to_bf16(v);
        wf[i] = dtype == PAGODA_DTYPE_F16 ? pagoda_fp16_to_fp32(w[i]) : pagoda_bf16_to_fp32(w[i]);
    }
    return w;
}

double tu_dot_exact(const float *x, const float *w, int64_t K, double *mag)
{
    double s = 0.0, m = 0.0;
    for (int64_t k = 0; k < K; k++) {
        double p = (double)x[k] * w[k];
        s += p;
        m += fabs(p);
    }
    if (mag) *mag = m;
    return s;
}

bool tu_near_exact_f32(float got, const float *x, const float *w, int64_t K)
{
    double mag, e = tu_dot_exact(x, w, K, &mag);
    return fabs(got - e) <= 2.0 * (double)(K + 1) * 0x1p-24 * mag;
}

int tu_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
