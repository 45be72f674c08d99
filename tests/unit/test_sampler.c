/* test_sampler.c: the sampler (core/sampler.c): greedy, top-k/p, min-p,
 * penalties, seeding, logprobs, a large vocabulary. Every random check uses
 * a fixed seed, so none can flake. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampler.h"
#include "pagoda/types.h"
#include "testutil.h"

static pagoda_sampler_params params(float temp, int32_t top_k, float top_p, float min_p, uint64_t seed)
{
    pagoda_sampler_params p;
    pagoda_sampler_params_default(&p);
    p.temperature = temp;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = seed;
    return p;
}

/* Candidate ids (best first) for a copy of logits. */
static int32_t cands(const pagoda_sampler_params *p, const float *logits, int32_t V, int32_t *ids, int32_t cap)
{
    pagoda_sampler *s = pagoda_sampler_new(p, V);
    ck_assert_ptr_nonnull(s);
    float *l = malloc(sizeof *l * (size_t)V);
    memcpy(l, logits, sizeof *l * (size_t)V);
    int32_t n = pagoda_sampler_candidates(s, l, ids, cap);
    free(l);
    pagoda_sampler_free(s);
    return n;
}

/* probabilities 0.05, 0.5, 0.15, 0.3 at ids 0..3 (best is id 1). */
static void four_logits(float *l)
{
    l[0] = logf(0.05f);
    l[1] = logf(0.5f);
    l[2] = logf(0.15f);
    l[3] = logf(0.3f);
}

START_TEST(greedy_argmax_lowest_tie)
{
    float l[6] = {0.1f, 3.0f, -1.0f, 3.0f, 2.9f, -5.0f};
    pagoda_sampler_params p = params(0.0f, 0, 1.0f, 0.0f, 1);
    pagoda_sampler *s = pagoda_sampler_new(&p, 6);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(pagoda_sampler_sample(s, l, NULL, 0, NULL, NULL), 1);
    float l2[4] = {-1.0f, -0.5f, -2.0f, -0.5f};
    pagoda_sampler_free(s);
    s = pagoda_sampler_new(&p, 4);
    ck_assert_int_eq(pagoda_sampler_sample(s, l2, NULL, 0, NULL, NULL), 1);
    ck_assert_uint_eq(pagoda_sampler_rng_state(s), 0); /* greedy draws nothing */
    pagoda_sampler_free(s);
}
END_TEST

START_TEST(top_k_one_is_greedy)
{
    enum { V = 1000 };
    tu_rng r;
    tu_rng_seed(&r, 7);
    float temps[] = {0.3f, 1.0f, 5.0f, 100.0f};
    for (int t = 0; t < 4; t++) {
        pagoda_sampler_params p = params(temps[t], 1, 0.9f, 0.0f, 1234 + (uint64_t)t);
        pagoda_sampler *s = pagoda_sampler_new(&p, V);
        for (int step = 0; step < 20; step++) {
            float l[V];
            tu_fill_normal(&r, l, V, 2.0f);
            int32_t want = 0;
            for (int i = 1; i < V; i++)
                if (l[i] > l[want]) want = i;
            ck_assert_int_eq(pagoda_sampler_sample(s, l, NULL, 0, NULL, NULL), want);
        }
        pagoda_sampler_free(s);
    }
}
END_TEST

static void run_seq(uint64_t seed, int32_t *out, int n)
{
    enum { V = 64 };
    tu_rng r;
    tu_rng_seed(&r, 99); /* the same logits for every seed */
    pagoda_sampler_params p = params(1.0f, 0, 1.0f, 0.0f, seed);
    pagoda_sampler *s = pagoda_sampler_new(&p, V);
    for (int i = 0; i < n; i++) {
        float l[V];
        tu_fill_normal(&r, l, V, 0.5f);
        out[i] = pagoda_sampler_sample(s, l, NULL, 0, NULL, NULL);
        pagoda_sampler_accept(s, out[i], false);
    }
    pagoda_sampler_free(s);
}

START_TEST(seeded_reproducible)
{
    int32_t a[64], b[64], c[64];
    run_seq(42, a, 64);
    run_seq(42, b, 64);
    run_seq(43, c, 64);
    ck_assert_mem_eq(a, b, sizeof a);
    int diff = 0;
    for (int i = 0; i < 64; i++) diff += a[i] != c[i];
    /* near-flat over 64 tokens: two streams agree ~1/20 of the time */
    ck_assert_int_gt(diff, 32);
}
END_TEST

START_TEST(rng_state_resume_and_reset)
{
    enum { V = 50 };
    float base[V];
    for (int i = 0; i < V; i++) base[i] = (float)(i % 7) * 0.1f;
    pagoda_sampler_params p = params(1.0f, 0, 0.95f, 0.0f, 5);
    pagoda_sampler *s = pagoda_sampler_new(&p, V);
    int32_t first[10], again[10], resumed[5];
    float l[V];
    for (int i = 0; i < 10; i++) {
        memcpy(l, base, sizeof l);
        first[i] = pagoda_sampler_sample(s, l, NULL, 0, NULL, NULL);
    }
    pagoda_sampler_reset(s);
    for (int i = 0; i < 10; i++) {
        memcpy(l, base, sizeof l);
        again[i] = pagoda_sampler_sample(s, l, NULL, 0, NULL, NULL);
    }
    ck_assert_mem_eq(first, again, sizeof first);
    ck_assert_uint_eq(pagoda_sampler_rng_state(s), 10);
    /* a fresh sampler restored to draw 5 continues like the first one */
    pagoda_sampler *t = pagoda_sampler_new(&p, V);
    pagoda_sampler_set_rng_state(t, 5);
    for (int i = 0; i < 5; i++) {
        memcpy(l, base, sizeof l);
        resumed[i] = pagoda_sampler_sample(t, l, NULL, 0, NULL, NULL);
    }
    ck_assert_mem_eq(resumed, first + 5, sizeof resumed);
    pagoda_sampler_free(t);
    pagoda_sampler_free(s);
}
END_TEST

START_TEST(temperature_frequencies)
{
    enum { V = 4, N = 20000 };
    const float base[V] = {1.0f, 0.5f, 0.0f, -1.0f};
    const float T = 0.7f;
    double z = 0.0, pr[V];
    for (int i = 0; i < V; i++) z += exp(base[i] / T);
    for (int i = 0; i < V; i++) pr[i] = exp(base[i] / T) / z;
    pagoda_sampler_params p = params(T, 0, 1.0f, 0.0f, 2024);
    pagoda_sampler *s = pagoda_sampler_new(&p, V);
    int count[V] = {0};
    for (int k = 0; k < N; k++) {
        float l[V];
        memcpy(l, base, sizeof l);
        int32_t t = pagoda_sampler_sample(s, l, NULL, 0, NULL, NULL);
        ck_assert(t >= 0 && t < V);
        count[t]++;
    }
    for (int i = 0; i < V; i++) {
        double f = (double)count[i] / N, sigma = sqrt(pr[i] * (1 - pr[i]) / N);
        ck_assert_msg(fabs(f - pr[i]) < 5 * sigma, "token %d: freq %.4f want %.4f", i, f, pr[i]);
    }
    pagoda_sampler_free(s);
}
END_TEST

START_TEST(top_p_exact_sets)
{
    float l[4];
    four_logits(l);
    int32_t ids[8];
    pagoda_sampler_params p = params(1.0f, 0, 0.4f, 0.0f, 1);
    ck_assert_int_eq(cands(&p, l, 4, ids, 8), 1);
    ck_assert_int_eq(ids[0], 1);
    p.top_p = 0.75f;
    ck_assert_int_eq(cands(&p, l, 4, ids, 8), 2);
    ck_assert_int_eq(ids[0], 1);
    ck_assert_int_eq(ids[1], 3);
    /* 0.5 + 0.3 < 0.83: the nucleus needs the third token ... */
    p.top_p = 0.83f;
    ck_assert_int_eq(cands(&p, l, 4, ids, 8), 3);
    ck_assert_int_eq(ids[2], 2);
    /* ... but within top-3 (renormalized: 0.526, 0.316, 0.158) two suffice */
    p.top_k = 3;
    ck_assert_int_eq(cands(&p, l, 4, ids, 8), 2);
    p.top_k = 0;
    p.top_p = 1.0f;
    ck_assert_int_eq(cands(&p, l, 4, ids, 8), 4); /* nothing on: everything */
}
END_TEST

START_TEST(top_p_large_nucleus)
{
    /* A flat vocabulary of 5000: half the mass is ids 0..2499 (ties go to
     * the lower id), which takes several selection chunks to reach. */
    enum { V = 5000 };
    static float l[V];
    static int32_t ids[V];
    for (int i = 0; i < V; i++) l[i] = 0.0f;
    pagoda_sampler_params p = params(1.0f, 0, 0.5f, 0.0f, 1);
    ck_assert_int_eq(cands(&p, l, V, ids, V), 2500);
    for (int i = 0; i < 2500; i++) ck_assert_int_eq(ids[i], i);
    /* and a peaked one, shuffled ids: the top 300 by logit hold > 0.9 */
    tu_rng r;
    tu_rng_seed(&r, 3);
    for (int i = 0; i < V; i++) l[i] = -20.0f - tu_rng_uniform(&r);
    for (int i = 0; i < 300; i++) l[(i * 7919) % V] = 5.0f - 0.001f * (float)i;
    p.top_p = 0.9f;
    int32_t n = cands(&p, l, V, ids, V);
    ck_assert_int_gt(n, 200);
    ck_assert_int_le(n, 300);
    for (int i = 0; i < n; i++) ck_assert_int_eq(ids[i], (i * 7919) % V);
}
END_TEST

START_TEST(min_p_exact_sets)
{
    float l[4];
    four_logits(l);
    int32_t ids[8];
    /* p_max 0.5: min_p 0.2 keeps p >= 0.1, min_p 0.5 keeps p >= 0.25 */
    pagoda_sampler_params p = params(1.0f, 0, 1.0f, 0.2f, 1);
    ck_assert_int_eq(cands(&p, l, 4, ids, 8), 3);
    ck_assert_int_eq(ids[0], 1);
    ck_assert_int_eq(ids[1], 3);
    ck_assert_int_eq(ids[2], 2);
    p.min_p = 0.5f;
    ck_assert_int_eq(cands(&p, l, 4, ids, 8), 2);
    /* temperature 2 flattens: ratios to the max are sqrt(p / 0.5) =
     * 1, .775, .548, .316, so min_p 0.5 now keeps three */
    p.temperature = 2.0f;
    ck_assert_int_eq(cands(&p, l, 4, ids, 8), 3);
    /* with top-p too (listed path): top_p 0.75 keeps {1, 3}; min_p 0.7 of
     * the tempered max keeps 1 and 3 (0.775) */
    p.temperature = 1.0f;
    p.top_p = 0.75f;
    p.min_p = 0.7f;
    ck_assert_int_eq(cands(&p, l, 4, ids, 8), 1);
    p.temperature = 2.0f;
    ck_assert_int_eq(cands(&p, l, 4, ids, 8), 2);
    /* sampled tokens stay inside the set */
    p = params(1.0f, 0, 1.0f, 0.5f, 77);
    pagoda_sampler *s = pagoda_sampler_new(&p, 4);
    int seen[4] = {0};
    for (int k = 0; k < 2000; k++) {
        float x[4];
        memcpy(x, l, sizeof x);
        seen[pagoda_sampler_sample(s, x, NULL, 0, NULL, NULL)]++;
    }
    ck_assert_int_eq(seen[0], 0);
    ck_assert_int_eq(seen[2], 0);
    ck_assert_int_gt(seen[1], 0);
    ck_assert_int_gt(seen[3], 0);
    pagoda_sampler_free(s);
}
END_TEST

START_TEST(repetition_penalty_formula)
{
    pagoda_sampler_params p = params(0.0f, 0, 1.0f, 0.0f, 1);
    p.repetition_penalty = 2.0f;
    p.penalty_last_n = 0; /* all history */
    pagoda_sampler *s = pagoda_sampler_new(&p, 5);
    pagoda_sampler_accept(s, 0, true);
    pagoda_sampler_accept(s, 1, false);
    pagoda_sampler_accept(s, 1, false); /* counted once: a multiplier, not per occurrence */
    float l[5] = {2.0f, -2.0f, 1.0f, 0.5f, 0.0f};
    /* 1, -4, 1, 0.5, 0: a tie, to the lower id */
    ck_assert_int_eq(pagoda_sampler_sample(s, l, NULL, 0, NULL, NULL), 0);
    ck_assert_float_eq(l[0], 1.0f);
    ck_assert_float_eq(l[1], -4.0f);
    ck_assert_float_eq(l[2], 1.0f);
    ck_assert_float_eq(l[3], 0.5f);
    pagoda_sampler_free(s);

    /* window of 2: after 0, 1, 2 only 1 and 2 are penalized */
    p.penalty_last_n = 2;
    s = pagoda_sampler_new(&p, 5);
    pagoda_sampler_accept(s, 0, true);
    pagoda_sampler_accept(s, 1, true);
    pagoda_sampler_accept(s, 2, false);
    float m[5] = {2.0f, -2.0f, 1.0f, 0.5f, 0.0f};
    pagoda_sampler_sample(s, m, NULL, 0, NULL, NULL);
    ck_assert_float_eq(m[0], 2.0f);
    ck_assert_float_eq(m[1], -4.0f);
    ck_assert_float_eq(m[2], 0.5f);
    /* reset forgets the history */
    pagoda_sampler_reset(s);
    float q[5] = {2.0f, -2.0f, 1.0f, 0.5f, 0.0f};
    pagoda_sampler_sample(s, q, NULL, 0, NULL, NULL);
    ck_assert_float_eq(q[1], -2.0f);
    pagoda_sampler_free(s);
}
END_TEST

START_TEST(presence_frequency_formula)
{
    pagoda_sampler_params p = params(0.0f, 0, 1.0f, 0.0f, 1);
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    pagoda_sampler *s = pagoda_sampler_new(&p, 5);
    pagoda_sampler_accept(s, 0, true); /* prompt: not counted */
    pagoda_sampler_accept(s, 3, false);
    pagoda_sampler_accept(s, 3, false);
    pagoda_sampler_accept(s, 2, false);
    float l[5] = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
    ck_assert_int_eq(pagoda_sampler_sample(s, l, NULL, 0, NULL, NULL), 0);
    ck_assert_float_eq(l[0], 1.0f);
    ck_assert_float_eq(l[1], 1.0f);
    ck_assert_float_eq(l[2], 0.25f); /* 1 - 0.5 - 0.25 */
    ck_assert_float_eq(l[3], 0.0f);  /* 1 - 0.5 - 0.5 */
    ck_assert_float_eq(l[4], 1.0f);
    pagoda_sampler_free(s);
}
END_TEST

START_TEST(logprobs_sum_to_one)
{
    enum { V = 1000 };
    tu_rng r;
    tu_rng_seed(&r, 11);
    static float l[V], lp[V];
    static int32_t ids[V];
    tu_fill_normal(&r, l, V, 3.0f);
    pagoda_sampler_params p = params(0.8f, 50, 0.9f, 0.0f, 3);
    pagoda_sampler *s = pagoda_sampler_new(&p, V);
    float chosen = 0.0f;
    int32_t tok = pagoda_sampler_sample(s, l, &chosen, V, ids, lp);
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        sum += exp(lp[i]);
        if (i) ck_assert(lp[i] <= lp[i - 1]);
        if (ids[i] == tok) ck_assert_float_eq_tol(lp[i], chosen, 1e-6f);
    }
    ck_assert_double_eq_tol(sum, 1.0, 1e-4);
    /* log-softmax at temperature 1, whatever the sampling temperature */
    double z = 0.0;
    for (int i = 0; i < V; i++) z += exp((double)l[i]);
    ck_assert_double_eq_tol(chosen, (double)l[tok] - log(z), 1e-4);
    /* the top 5 are the 5 best logits, best first */
    float t5[5];
    int32_t i5[5];
    pagoda_sampler_sample(s, l, NULL, 5, i5, t5);
    for (int i = 0; i < 5; i++) ck_assert_int_eq(i5[i], ids[i]);
    pagoda_sampler_free(s);
}
END_TEST

START_TEST(nan_and_inf_logits)
{
    float l[4] = {NAN, 1.0f, -INFINITY, 0.5f};
    pagoda_sampler_params p = params(1.0f, 0, 1.0f, 0.0f, 9);
    pagoda_sampler *s = pagoda_sampler_new(&p, 4);
    for (int k = 0; k < 200; k++) {
        float x[4];
        memcpy(x, l, sizeof x);
        int32_t t = pagoda_sampler_sample(s, x, NULL, 0, NULL, NULL);
        ck_assert(t == 1 || t == 3);
    }
    float all[4] = {-INFINITY, -INFINITY, -INFINITY, NAN};
    float lp;
    ck_assert_int_eq(pagoda_sampler_sample(s, all, &lp, 0, NULL, NULL), 0);
    ck_assert(isfinite(lp));
    pagoda_sampler_free(s);
}
END_TEST

/* pagoda_logprob_of: the greedy sampler's logprob and top list, for any
 * token, and a 262144-token vocabulary of nearly equal logits summed
 * without loss. */
START_TEST(logprob_of_scores_any_token)
{
    enum { V = 1000 };
    tu_rng r;
    tu_rng_seed(&r, 12);
    static float l[V], copy[V], lp[V];
    static int32_t ids[V];
    tu_fill_normal(&r, l, V, 3.0f);
    memcpy(copy, l, sizeof l);
    pagoda_sampler_params p = params(0.0f, 0, 1.0f, 0.0f, 1);
    pagoda_sampler *s = pagoda_sampler_new(&p, V);
    float chosen = 0.0f;
    int32_t tok = pagoda_sampler_sample(s, copy, &chosen, V, ids, lp);
    pagoda_sampler_free(s);
    int32_t tids[5];
    float tlp[5];
    ck_assert(pagoda_logprob_of(l, V, tok, 5, tids, tlp) == chosen);
    double z = 0.0;
    for (int i = 0; i < V; i++) z += exp((double)l[i]);
    for (int i = 0; i < V; i += 37) {
        float x = pagoda_logprob_of(l, V, i, 0, NULL, NULL);
        ck_assert_double_eq_tol(x, (double)l[i] - log(z), 1e-5);
    }
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(tids[i], ids[i]);
        ck_assert(tlp[i] == lp[i]);
    }

    /* NaN is -inf, a -inf token has -inf, all -inf is uniform */
    float odd[4] = {NAN, 1.0f, -INFINITY, 1.0f};
    ck_assert_double_eq_tol(pagoda_logprob_of(odd, 4, 1, 0, NULL, NULL), log(0.5), 1e-6);
    ck_assert(pagoda_logprob_of(odd, 4, 0, 0, NULL, NULL) == -INFINITY);
    ck_assert(pagoda_logprob_of(odd, 4, 2, 0, NULL, NULL) == -INFINITY);
    float none[3] = {-INFINITY, NAN, -INFINITY};
    ck_assert_double_eq_tol(pagoda_logprob_of(none, 3, 1, 0, NULL, NULL), -log(3.0), 1e-6);

    /* 262144 logits a hair apart: the float sum would drift, the double
     * one gives log(1/V) to float precision */
    enum { BIG = 262144 };
    float *big = malloc(sizeof(float) * BIG);
    for (int i = 0; i < BIG; i++) big[i] = 5.0f + (float)(i % 3) * 1e-7f;
    double zb = 0.0;
    for (int i = 0; i < BIG; i++) zb += exp((double)big[i] - 5.0);
    ck_assert_double_eq_tol(pagoda_logprob_of(big, BIG, 7, 0, NULL, NULL),
                            (double)big[7] - 5.0 - log(zb), 1e-6);
    free(big);
}
END_TEST

START_TEST(params_validation)
{
    char err[200];
    pagoda_sampler_params p = params(0.7f, 40, 0.9f, 0.05f, 1);
    ck_assert_int_eq(pagoda_sampler_params_validate(&p, err, sizeof err), PAGODA_OK);
    p.top_p = 0.0f;
    ck_assert_int_eq(pagoda_sampler_params_validate(&p, err, sizeof err), PAGODA_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err, "top_p"));
    /* new() takes it as "off": top_p 0 samples like top_p 1 */
    pagoda_sampler *s = pagoda_sampler_new(&p, 10);
    ck_assert_ptr_nonnull(s);
    float l[10] = {0};
    int32_t ids[10];
    ck_assert_int_eq(pagoda_sampler_candidates(s, l, ids, 10), 10);
    pagoda_sampler_free(s);
    p = params(-1.0f, 0, 1.0f, 0.0f, 1);
    ck_assert_int_eq(pagoda_sampler_params_validate(&p, err, sizeof err), PAGODA_ERR_INVALID);
    p = params(1.0f, 0, 1.0f, 0.0f, 1);
    p.repetition_penalty = 0.0f;
    ck_assert_int_eq(pagoda_sampler_params_validate(&p, err, sizeof err), PAGODA_ERR_INVALID);
    p.repetition_penalty = 1.0f;
    p.frequency_penalty = 3.0f;
    ck_assert_int_eq(pagoda_sampler_params_validate(&p, err, sizeof err), PAGODA_ERR_INVALID);
    p.frequency_penalty = 0.0f;
    ck_assert_ptr_null(pagoda_sampler_new(&p, 0));
}
END_TEST

START_TEST(large_vocab)
{
    enum { V = 151936 };
    float *base = malloc(sizeof *base * V), *l = malloc(sizeof *l * V);
    tu_rng r;
    tu_rng_seed(&r, 150);
    tu_fill_normal(&r, base, V, 4.0f);
    struct { int32_t k; float tp, mp, t; } cfg[] = {
        {40, 0.95f, 0.0f, 0.8f}, {0, 0.9f, 0.0f, 1.0f}, {0, 1.0f, 0.05f, 1.0f}, {0, 1.0f, 0.0f, 1.5f},
        {0, 0.999f, 0.0f, 3.0f},
    };
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        pagoda_sampler_params p = params(cfg[c].t, cfg[c].k, cfg[c].tp, cfg[c].mp, 100 + c);
        p.repetition_penalty = 1.1f;
        p.penalty_last_n = 256;
        pagoda_sampler *s = pagoda_sampler_new(&p, V);
        for (int step = 0; step < 8; step++) {
            memcpy(l, base, sizeof *l * V);
            float lp;
            int32_t ids[5];
            float tl[5];
            int32_t t = pagoda_sampler_sample(s, l, &lp, 5, ids, tl);
            ck_assert(t >= 0 && t < V);
            ck_assert(lp <= 0.0f && lp >= tl[0] - 1e3f);
            if (cfg[c].k == 40) { /* fewer than 40 (penalized) logits beat it */
                int better = 0;
                for (int i = 0; i < V; i++) better += l[i] > l[t];
                ck_assert_int_lt(better, 40);
            }
            pagoda_sampler_accept(s, t, false);
        }
        pagoda_sampler_free(s);
    }
    free(base);
    free(l);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, greedy_argmax_lowest_tie);
    tcase_add_test(tc, top_k_one_is_greedy);
    tcase_add_test(tc, seeded_reproducible);
    tcase_add_test(tc, rng_state_resume_and_reset);
    tcase_add_test(tc, temperature_frequencies);
    tcase_add_test(tc, top_p_exact_sets);
    tcase_add_test(tc, top_p_large_nucleus);
    tcase_add_test(tc, min_p_exact_sets);
    tcase_add_test(tc, repetition_penalty_formula);
    tcase_add_test(tc, presence_frequency_formula);
    tcase_add_test(tc, logprobs_sum_to_one);
    tcase_add_test(tc, nan_and_inf_logits);
    tcase_add_test(tc, logprob_of_scores_any_token);
    tcase_add_test(tc, params_validation);
    tcase_add_test(tc, large_vocab);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
