/*
 * sampler.h: picks the next token of one sequence from its logits: greedy,
 * temperature, top-k, top-p, min-p, repetition / presence / frequency
 * penalties, seeded, with the chosen token's log-probability and the top-N.
 * Not for: stop strings, EOS handling or detokenizing (the engine's), nor
 * batching (one sampler per sequence; the engine calls it per row).
 *
 * Order of operations in pagoda_sampler_sample (as vLLM / HF do it):
 *   1. penalties on the raw logits, in place: repetition (llama.cpp / HF:
 *      a positive logit is divided by r, a negative one multiplied by r) over
 *      the distinct tokens of the last penalty_last_n accepted tokens (prompt
 *      and output; <= 0: all of them); then presence and frequency (OpenAI:
 *      l -= presence * [count > 0] + frequency * count) over output tokens.
 *   2. logprobs reported = log-softmax of the penalized logits over the whole
 *      vocabulary at temperature 1, before any truncation: the model's
 *      distribution as the penalties left it, comparable across temperatures.
 *   3. temperature <= 0 or top_k == 1: argmax, ties to the lowest id. No
 *      random draw is consumed.
 *   4. else, on logits / temperature: top-k, then top-p over the (renormalized)
 *      top-k set, then min-p (keep p >= min_p * p_max), then one draw from
 *      what is left. Ties in the ordering go to the lower id.
 *
 * No full sort of the vocabulary: top-k is a quickselect and a sort of k
 * entries; top-p without top-k selects and sorts growing chunks of the best
 * tokens until the nucleus mass is reached; min-p alone and plain
 * temperature sampling are a linear scan. A sampler allocates O(n_vocab)
 * scratch (8 bytes a token) on the first step that needs a selection.
 *
 * Randomness: a counter-based generator (splitmix64 of seed and draw
 * number), so the whole RNG state is one uint64 (the number of draws made).
 * The engine keeps a sampler alive across a preemption, so a preempted and
 * resumed seeded request gives the same tokens; should it ever re-create
 * one, replay accept() and restore pagoda_sampler_rng_state().
 *
 * Threads: a sampler is used by one thread at a time [engine thread].
 */
#ifndef PAGODA_SAMPLER_H
#define PAGODA_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pagoda_sampler_params {
    float temperature;        /* <= 0: greedy */
    int32_t top_k;            /* <= 0: off */
    float top_p;              /* 1: off; (0, 1] */
    float min_p;              /* 0: off; [0, 1] */
    float repetition_penalty; /* 1: off; > 0 */
    float presence_penalty;   /* 0: off; [-2, 2] */
    float frequency_penalty;  /* 0: off; [-2, 2] */
    int32_t penalty_last_n;   /* window for repetition penalty, <= 0: all */
    uint64_t seed;
} pagoda_sampler_params;

typedef struct pagoda_sampler pagoda_sampler;

/* Greedy, every filter and penalty off, seed 0. */
void pagoda_sampler_params_default(pagoda_sampler_params *p);

/* PAGODA_OK, or PAGODA_ERR_INVALID with a message naming the parameter,
 * its allowed range and the value found. For the engine's submit(). */
int pagoda_sampler_params_validate(const pagoda_sampler_params *p, char *err, size_t err_len);

/* A new sampler for a vocabulary of n_vocab tokens; the caller frees it
 * with pagoda_sampler_free. Parameters outside their range are taken as
 * "off" (top_p 0 -> 1, repetition_penalty <= 0 -> 1, negative or NaN
 * temperature -> greedy, min_p clamped to [0, 1]): refuse them earlier with
 * pagoda_sampler_params_validate. NULL only for p == NULL, n_vocab <= 0 or
 * out of memory. */
pagoda_sampler *pagoda_sampler_new(const pagoda_sampler_params *p, int32_t n_vocab);
void pagoda_sampler_free(pagoda_sampler *s);

/* Forget the token history and restart the random stream from the seed. */
void pagoda_sampler_reset(pagoda_sampler *s);

/* Record a token for the penalties: prompt tokens count for the repetition
 * penalty only, output tokens (is_prompt false) for all three. Call it for
 * every prompt token, then for every sampled token. Ids outside
 * [0, n_vocab) are ignored. */
void pagoda_sampler_accept(pagoda_sampler *s, int32_t token, bool is_prompt);

/* logits [n_vocab] may be modified in place (penalties; NaN becomes -inf).
 * Returns the token; *logprob if not NULL; top_ids/top_lp [n_top] filled
 * with the most likely tokens (ordered, ties to the lower id) and their
 * logprobs when n_top > 0 (at most n_vocab are filled; the rest get id -1).
 * Does not accept the token: call pagoda_sampler_accept(s, tok, false). */
int32_t pagoda_sampler_sample(pagoda_sampler *s, float *logits, float *logprob, int32_t n_top,
                              int32_t *top_ids, float *top_lp);

/* Scoring a given token (prompt logprobs, perplexity): log p(token) under
 * softmax(logits) at temperature 1, without penalties or any truncation:
 * the model's own distribution. The normalizer is max + log(sum exp(l -
 * max)) with the sum in double, so a vocabulary of 262144 logits loses
 * nothing. logits is read only; NaN counts as -inf, +inf as FLT_MAX (as in
 * sample()). Every logit -inf: the uniform distribution, -log(n_vocab).
 * top_ids/top_lp [n_top], when n_top > 0, get the most likely tokens
 * (ordered, ties to the lower id) and their logprobs, computed the same way
 * (so a token that is the argmax has exactly top_lp[0]). */
float pagoda_logprob_of(const float *logits, int32_t n_vocab, int32_t token, int32_t n_top,
                        int32_t *top_ids, float *top_lp);

/* The random stream's position (draws made since the seed), and setting it
 * back, for a sampler re-created after a preemption. */
uint64_t pagoda_sampler_rng_state(const pagoda_sampler *s);
void pagoda_sampler_set_rng_state(pagoda_sampler *s, uint64_t state);

/* For tests and debugging: run steps 1-4 of sample() on logits (modified in
 * place like sample()) without drawing, and write the ids the draw would
 * choose from, best first, into ids[cap]. Returns how many there are (may
 * exceed cap; only cap are written). Greedy returns the argmax alone. */
int32_t pagoda_sampler_candidates(pagoda_sampler *s, float *logits, int32_t *ids, int32_t cap);

#ifdef __cplusplus
}
#endif
#endif /* PAGODA_SAMPLER_H */
