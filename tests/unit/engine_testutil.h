/* engine_testutil.h: build a runtime on a model file (the bundled one
 * unless told) from a list of "section.key=value" settings, and collect a
 * request's events. Header-only
 * (static inline functions) so each suite that needs it includes it. */
#ifndef PAGODA_ENGINE_TESTUTIL_H
#define PAGODA_ENGINE_TESTUTIL_H

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"
#include "testutil.h"

typedef struct et_result {
    pthread_mutex_t mu;
    int32_t tokens[4096];
    int32_t n_tokens;
    char text[65536];
    size_t text_len;
    int n_final;
    int finish_reason;
    pagoda_usage usage;
    int32_t tier_cached;         /* FINAL's tier_cached_tokens */
    pagoda_timings timings;
    char error[512];
    int n_text_events_after_final;
} et_result;

static inline void et_result_init(et_result *r)
{
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
}

static inline void et_cb(void *user, const pagoda_event *ev)
{
    et_result *r = user;
    pthread_mutex_lock(&r->mu);
    if (r->n_final) r->n_text_events_after_final++;
    if (ev->type == PAGODA_EVENT_TOKEN) {
        if (ev->token >= 0 && r->n_tokens < 4096) r->tokens[r->n_tokens++] = ev->token;
        if (r->text_len + ev->text_len < sizeof r->text) {
            memcpy(r->text + r->text_len, ev->text, ev->text_len);
            r->text_len += ev->text_len;
            r->text[r->text_len] = 0;
        }
    } else if (ev->type == PAGODA_EVENT_FINAL) {
        r->n_final++;
        r->finish_reason = ev->finish_reason;
        r->usage = ev->usage;
        r->tier_cached = ev->tier_cached_tokens;
        r->timings = ev->timings;
        if (ev->error) snprintf(r->error, sizeof r->error, "%s", ev->error);
    }
    pthread_mutex_unlock(&r->mu);
}

/* Open a runtime (no frontend) on the model file `model` with
 * engine.log_level=warn and settings (NULL-terminated, may be NULL), its
 * engine not started: requests submitted before pagoda_engine_start all
 * arrive in its first step. Fails the test on error. */
static inline pagoda_runtime *et_open_model(pagoda_config **cfg_out, const char *model, const char *const *settings)
{
    char err[1024] = "";
    pagoda_config *cfg = pagoda_config_new_empty();
    ck_assert_ptr_nonnull(cfg);
    char buf[4200];
    snprintf(buf, sizeof buf, "engine.model=%s", model);
    ck_assert_msg(pagoda_config_set(cfg, buf, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(pagoda_config_set(cfg, "engine.log_level=warn", err, sizeof err) == 0, "%s", err);
    for (int i = 0; settings && settings[i]; i++)
        ck_assert_msg(pagoda_config_set(cfg, settings[i], err, sizeof err) == 0, "%s: %s",
                      settings[i], err);
    pagoda_runtime *rt = NULL;
    int st = pagoda_runtime_open(cfg, false, false, &rt, err, sizeof err);
    ck_assert_msg(st == 0, "runtime_open %s: %s", model, err);
    *cfg_out = cfg;
    return rt;
}

/* et_open_model on the bundled models/stories260K.gguf. */
static inline pagoda_runtime *et_open_stopped(pagoda_config **cfg_out, const char *const *settings)
{
    return et_open_model(cfg_out, tu_src("models/stories260K.gguf"), settings);
}

/* et_open_stopped, the engine started. */
static inline pagoda_runtime *et_open(pagoda_config **cfg_out, const char *const *settings)
{
    pagoda_runtime *rt = et_open_stopped(cfg_out, settings);
    ck_assert_int_eq(pagoda_engine_start(rt->engine), 0);
    return rt;
}

static inline void et_close(pagoda_runtime *rt, pagoda_config *cfg)
{
    pagoda_runtime_close(rt);
    pagoda_config_free(cfg);
}

/* A request for `prompt` with the engine's defaults, max_tokens and
 * temperature, ignoring EOS (so its length is max_tokens). */
static inline pagoda_request et_request(pagoda_runtime *rt, const char *prompt, int32_t max_tokens, float temperature)
{
    pagoda_request req;
    pagoda_engine_request_defaults(rt->engine, &req);
    req.prompt = prompt;
    req.prompt_len = strlen(prompt);
    req.max_tokens = max_tokens;
    req.temperature = temperature;
    req.ignore_eos = true;
    return req;
}

/* Submit et_request(prompt, ...) collecting into r; returns its id. */
static inline uint64_t et_submit(pagoda_runtime *rt, const char *prompt, int32_t max_tokens,
                                 et_result *r, float temperature)
{
    pagoda_request req = et_request(rt, prompt, max_tokens, temperature);
    uint64_t id = 0;
    char err[512] = "";
    int st = pagoda_engine_submit(rt->engine, &req, et_cb, r, &id, err, sizeof err);
    ck_assert_msg(st == 0, "submit: %s", err);
    return id;
}

/* Submit n greedy requests (prompt i % n_prompts, max_tokens_of(i)
 * tokens, EOS ignored) collecting into r[0..n) to rt's engine, not yet
 * started (et_open_stopped), then start it and wait until all ended: every
 * request is queued before the first step, so the batches (and the step
 * count) do not depend on how fast the submitting thread runs. */
static inline void et_run_greedy(pagoda_runtime *rt, const char *const *prompts, int n_prompts, int n,
                                 int32_t (*max_tokens_of)(int), et_result *r)
{
    for (int i = 0; i < n; i++) {
        et_result_init(&r[i]);
        et_submit(rt, prompts[i % n_prompts], max_tokens_of(i), &r[i], 0.0f);
    }
    ck_assert_int_eq(pagoda_engine_start(rt->engine), 0);
    pagoda_engine_wait_idle(rt->engine);
}

/* The n results of two runs of the same requests: the same tokens, in order. */
static inline void et_assert_same_tokens(const et_result *a, const et_result *b, int n, const char *what)
{
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(a[i].n_tokens, b[i].n_tokens);
        for (int t = 0; t < a[i].n_tokens; t++)
            ck_assert_msg(a[i].tokens[t] == b[i].tokens[t], "%s: request %d differs at token %d (%d vs %d)",
                          what, i, t, a[i].tokens[t], b[i].tokens[t]);
    }
}

/* The reference for scored prompts, apart from the engine: the forward
 * pass run directly over tokens[0..n) as one prefill (F32 KV, one block
 * table), every row's logits kept, and a plain log-softmax in double here:
 * lp[i] = log p(tokens[i] | tokens[0..i)) for i >= 1, lp[0] = NaN;
 * argmax_out[i] (may be NULL) the most likely token at position i - 1. */
static inline void et_reference_logprobs(pagoda_runtime *rt, const int32_t *tokens, int32_t n, double *lp,
                                         int32_t *argmax_out)
{
    const int32_t bs = 16, nb = (n + bs - 1) / bs;
    int32_t V = rt->model->hp.n_vocab;
    pagoda_forward fw;
    char err[1024] = "";
    ck_assert_msg(pagoda_forward_init(&fw, rt->model, &rt->backend, n, n, nb, bs, PAGODA_DTYPE_F32,
                                      err, sizeof err) == 0, "%s", err);
    float *logits = malloc(sizeof(float) * (size_t)n * (size_t)V);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n), *rows = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *table = malloc(sizeof(int32_t) * (size_t)nb);
    ck_assert(logits && pos && rows && table);
    for (int32_t i = 0; i < n; i++) pos[i] = rows[i] = i;
    for (int32_t b = 0; b < nb; b++) table[b] = nb - 1 - b; /* blocks out of order */
    int32_t *slots = malloc(sizeof(int32_t) * (size_t)n);
    ck_assert(slots);
    for (int32_t i = 0; i < n; i++) slots[i] = table[i / bs] * bs + i % bs;
    pagoda_seq_view sv = {.q_start = 0, .n_q = n, .ctx_len = n, .n_blocks = nb, .block_table = table};
    pagoda_batch b = {.seq_no = 1, .n_tokens = n, .tokens = tokens, .positions = pos,
                      .slots = slots, .n_seqs = 1, .seqs = &sv};
    ck_assert_msg(pagoda_forward_run(&fw, &b, rows, n, logits, err, sizeof err) == 0, "%s", err);
    lp[0] = NAN;
    for (int32_t i = 1; i < n; i++) {
        const float *l = logits + (size_t)(i - 1) * (size_t)V;
        double m = -INFINITY;
        int32_t am = 0;
        for (int32_t v = 0; v < V; v++)
            if (l[v] > m) { m = l[v]; am = v; }
        double z = 0;
        for (int32_t v = 0; v < V; v++) z += exp((double)l[v] - m);
        lp[i] = (double)l[tokens[i]] - m - log(z);
        if (argmax_out) argmax_out[i] = am;
    }
    pagoda_forward_free(&fw);
    free(logits);
    free(pos);
    free(rows);
    free(table);
    free(slots);
}

/* Two greedy runs of the same n requests (prompt ids[0..n_ids) each)
 * under batch shapes that differ (speculation's verify rows, a prefix
 * hit's recomputed rows): a quantized model's rows are not bit-identical
 * across batch shapes, so they may part at a near tie and only there. At
 * the first token where a request differs, the reference forward pass
 * (et_reference_logprobs) over the prompt and the tokens both runs agree
 * on scores the two choices: they must be within near_tie nats, else the
 * runs differ for another reason than rounding. After a near tie the
 * request is not compared further (the trajectories legitimately part).
 * Returns how many requests parted at a near tie. */
static inline int et_assert_same_or_near_tie(pagoda_runtime *rt, const int32_t *ids, int32_t n_ids,
                                             const et_result *a, const et_result *b, int n, double near_tie,
                                             const char *what)
{
    int parted = 0;
    for (int i = 0; i < n; i++) {
        int32_t t = 0, m = a[i].n_tokens < b[i].n_tokens ? a[i].n_tokens : b[i].n_tokens;
        while (t < m && a[i].tokens[t] == b[i].tokens[t]) t++;
        if (t == m) {
            ck_assert_msg(a[i].n_tokens == b[i].n_tokens, "%s: request %d lengths %d vs %d with no token apart",
                          what, i, a[i].n_tokens, b[i].n_tokens);
            continue;
        }
        int32_t len = n_ids + t + 1;
        int32_t *seq = malloc(sizeof(int32_t) * (size_t)len);
        double *lp = malloc(sizeof(double) * (size_t)len);
        ck_assert(seq && lp);
        memcpy(seq, ids, sizeof(int32_t) * (size_t)n_ids);
        memcpy(seq + n_ids, a[i].tokens, sizeof(int32_t) * (size_t)t);
        double l2[2];
        for (int k = 0; k < 2; k++) {
            seq[len - 1] = (k ? b : a)[i].tokens[t];
            et_reference_logprobs(rt, seq, len, lp, NULL);
            l2[k] = lp[len - 1];
        }
        free(seq);
        free(lp);
        ck_assert_msg(fabs(l2[0] - l2[1]) < near_tie,
                      "%s: request %d differs at token %d (%d vs %d), not a near tie: reference logprobs %.6f vs %.6f",
                      what, i, t, a[i].tokens[t], b[i].tokens[t], l2[0], l2[1]);
        printf("%s: request %d parted at token %d, a near tie (reference logprobs %.6f vs %.6f)\n", what, i, t,
               l2[0], l2[1]);
        parted++;
    }
    return parted;
}

#endif
