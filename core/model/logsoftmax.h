/*
 * logsoftmax.h: the two passes over a row of logits that a log-softmax
 * needs (its maximum, and the sum of exp(l - max) in double), with an AVX2
 * variant chosen at run time and the scalar reference beside it. Scoring a
 * prompt runs them once per scored token over the whole vocabulary (262144
 * logits for Gemma 3), so they are a hot loop of the engine thread.
 * Not for: choosing a token (sampler.c), which calls these for its
 * reported logprobs.
 *
 * Logit conventions, as the sampler has them: NaN counts as -inf, +inf as
 * FLT_MAX.
 */
#ifndef PAGODA_LOGSOFTMAX_H
#define PAGODA_LOGSOFTMAX_H

#include <stdbool.h>
#include <stdint.h>

/* The largest logit (-inf when every one is -inf or NaN). */
float pagoda_logits_max(const float *logits, int32_t n);

/* sum over i of exp(logits[i] - m), in double, for m = pagoda_logits_max
 * (m finite). The AVX2 variant's exp is a degree-5 polynomial after range
 * reduction, within 2e-7 relative of libm's expf per term; exp of anything
 * below -87.3 counts as at most 1.2e-38 (libm: 0 or a denormal). */
double pagoda_logits_sumexp(const float *logits, int32_t n, float m);

/* The scalar references (libm's expf), for tests. */
float pagoda_logits_max_scalar(const float *logits, int32_t n);
double pagoda_logits_sumexp_scalar(const float *logits, int32_t n, float m);

/* [tests] Run the scalar references even where AVX2 is there (true), or
 * the best the CPU has again (false). Returns whether AVX2 is in use now. */
bool pagoda_logsoftmax_force_scalar(bool on);

#endif /* PAGODA_LOGSOFTMAX_H */
