/*
 * fake_engine.h: a fake engine behind a pagoda_host table, for frontend
 * tests (HTTP, stdin). Header-only, static functions. It is for driving a
 * frontend plugin through the whole host contract without a model: not a
 * model of the real engine's scheduling or timing.
 *
 * The "model" echoes the prompt's words, one TOKEN event per word (" word"
 * after the first), then a FINAL:
 *   - words exhausted -> STOP; max_tokens reached -> LENGTH;
 *   - a word equal to a stop string ends with STOP (the word not emitted);
 *   - a prompt containing the word "forever" repeats its words until
 *     max_tokens or cancel (for disconnect and shutdown tests);
 *   - a prompt containing "FAIL" ends with a FINAL of reason ERROR;
 *   - with prompt_logprobs >= 0, first one PROMPT event per prompt token
 *     (BOS included when added): position p has logprob -0.25 p, NaN at 0;
 *     score_only then ends with LENGTH and no word;
 *   - with trace, each TOKEN event carries step (the fake's step count),
 *     step_seqs = step_tokens = the requests live in that step, kv_tokens =
 *     prompt tokens + words so far, blocks 0 .. of 4 tokens each, and 5 top
 *     candidates (the word at -0.5, then EOS and ids 3..5 lower).
 * inspect_json answers {"version":V,...,"pad":"xx.."} (V moves on every call
 * when inspect_bump; inspect_pad bytes of padding), NULL when not ready,
 * and counts its calls.
 * Events come from one engine thread of its own, one step every step_us.
 * tokenize splits on whitespace (ids from a growing vocabulary, from 10;
 * BOS = 1, EOS = 2); chat_render writes "<|role|>content\n" per message and
 * "<|assistant|>" with the generation prompt, and names stop id 2;
 * chat_render_opts records its options and renders the same.
 * Every submit and cancel is recorded for the test to assert on, and
 * every log line (fake_log_count).
 */
#ifndef PAGODA_FAKE_ENGINE_H
#define PAGODA_FAKE_ENGINE_H

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pagoda/pagoda.h"

#define FAKE_MAX_LOG 128
#define FAKE_MAX_VOCAB 4096
#define FAKE_BOS 1
#define FAKE_EOS 2

typedef struct fake_kv {
    const char *key, *val;
} fake_kv;

/* A copy of one submitted request, pointers replaced by owned copies. */
typedef struct fake_logged {
    pagoda_request req;          /* prompt/stop/... pointers cleared */
    char *prompt;                /* the text (or the tokens' words) */
    char *stop[16];
    int n_stop;
    int32_t stop_ids[16];
    char *cache_salt;
    char *constraint;            /* the structured-output spec, when one was given */
    char request_id[64];
    uint64_t id;
    int finals_at_submit;        /* FINALs sent before this request came */
} fake_logged;

typedef struct fake_req {
    uint64_t id;
    char **words;
    int n_words;
    int emitted;
    int max_tokens;
    int forever, fail;
    int32_t logprobs;
    int trace;
    int prompt_tokens;
    int32_t prompt_ids[64];      /* the prompt as the fake "engine" sees it (BOS first if added) */
    int32_t prompt_logprobs;     /* scored: one PROMPT event a step before any word */
    int scored;
    int score_only;
    char *stop[16];
    int n_stop;
    int cancelled;
    pagoda_event_cb cb;
    void *user;
    struct fake_req *next;
} fake_req;

typedef struct fake_engine {
    pagoda_host host; /* first: host_ctx points back here */
    const fake_kv *config;
    int n_config;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    int quit;
    fake_req *live;
    uint64_t next_id;

    /* controls, set by the test (under no lock before use, or fake_lock) */
    int submit_status;           /* != 0: submit fails with it */
    int nospace_left;            /* > 0: that many more submits fail with NOSPACE */
    char submit_err[256];
    int ready, shutting;
    int n_ctx;
    char chat_template[24];   /* model_info's family name; "chatml" unless a test sets it */
    int step_us;
    int hold_submits;            /* > 0: no step runs until that many submits came, or
                                    hold_ms passed (a test of pipelining that does not
                                    depend on how fast this machine is) */
    int hold_ms;
    int cached_tokens;           /* reported in every FINAL's usage */
    int tier_cached_tokens;      /* and, of those, in its tier_cached_tokens */
    int inspect_bump;            /* inspect_json's version moves on every call */
    int inspect_pad;             /* bytes of padding in inspect_json's answer */
    int n_inspect;               /* inspect_json calls */
    uint64_t inspect_version;
    uint64_t steps;

    /* records */
    fake_logged log[FAKE_MAX_LOG];
    int n_log;
    uint64_t cancels[FAKE_MAX_LOG];
    int n_cancel;
    int n_final;
    int n_tokens_emitted;
    char *last_render;
    int render_opts_calls;       /* chat_render_opts calls, and what the last one passed */
    int last_enable_thinking;
    char last_effort[16];
    char last_error[512];
    char logs[16384];            /* the plugin's log lines, every level, while they fit */
    size_t logs_len;

    char *vocab[FAKE_MAX_VOCAB];
    int n_vocab;
} fake_engine;

static fake_engine *fake_of(const pagoda_host *h) { return (fake_engine *)h->host_ctx; }

static char *fake_strndup(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ------------------------------------------------------------- config */

static const char *fake_cfg(const pagoda_host *h, const char *key)
{
    fake_engine *f = fake_of(h);
    for (int i = 0; i < f->n_config; i++)
        if (strcmp(f->config[i].key, key) == 0) return f->config[i].val;
    return NULL;
}
static const char *fake_config_str(const pagoda_host *h, const char *key, const char *dflt)
{
    const char *v = fake_cfg(h, key);
    return v ? v : dflt;
}
static int64_t fake_config_int(const pagoda_host *h, const char *key, int64_t dflt)
{
    const char *v = fake_cfg(h, key);
    if (!v) return dflt;
    /* sizes with a binary suffix, like the core's PAGODA_KEY_SIZE */
    char *end;
    long long n = strtoll(v, &end, 10);
    if (*end == 'K') n <<= 10;
    else if (*end == 'M') n <<= 20;
    else if (*end == 'G') n <<= 30;
    return n;
}
static double fake_config_float(const pagoda_host *h, const char *key, double dflt)
{
    const char *v = fake_cfg(h, key);
    return v ? strtod(v, NULL) : dflt;
}
static bool fake_config_bool(const pagoda_host *h, const char *key, bool dflt)
{
    const char *v = fake_cfg(h, key);
    if (!v) return dflt;
    return !strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes") || !strcmp(v, "on");
}
static const char *fake_engine_config(const pagoda_host *h, const char *key) { return NULL; }

static void fake_log(const pagoda_host *h, int level, const char *fmt, ...)
{
    fake_engine *f = fake_of(h);
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* every level is kept for the test (fake_log_has), as far as it fits */
    pthread_mutex_lock(&f->mu);
    size_t n = strlen(line);
    if (f->logs_len + n + 2 <= sizeof f->logs) {
        memcpy(f->logs + f->logs_len, line, n);
        f->logs_len += n;
        f->logs[f->logs_len++] = '\n';
        f->logs[f->logs_len] = 0;
    }
    pthread_mutex_unlock(&f->mu);
    if (level > PAGODA_LOG_WARN && !getenv("FAKE_VERBOSE")) return;
    fprintf(stderr, "[fake host] %s\n", line);
}
static int fake_error(const pagoda_host *h, int status, const char *fmt, ...)
{
    fake_engine *f = fake_of(h);
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&f->mu);
    vsnprintf(f->last_error, sizeof f->last_error, fmt, ap);
    pthread_mutex_unlock(&f->mu);
    va_end(ap);
    return status;
}

/* ------------------------------------------------------------ vocabulary */

/* Caller holds f->mu. */
static int32_t fake_word_id(fake_engine *f, const char *w, size_t n)
{
    for (int i = 0; i < f->n_vocab; i++)
        if (strlen(f->vocab[i]) == n && memcmp(f->vocab[i], w, n) == 0) return 10 + i;
    if (f->n_vocab == FAKE_MAX_VOCAB) return 3; /* <unk> */
    f->vocab[f->n_vocab] = fake_strndup(w, n);
    return 10 + f->n_vocab++;
}

static int fake_split(const char *s, size_t len, char ***out)
{
    int n = 0, cap = 8;
    char **w = malloc(sizeof *w * (size_t)cap);
    size_t i = 0;
    while (i < len) {
        while (i < len && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t')) i++;
        size_t st = i;
        while (i < len && s[i] != ' ' && s[i] != '\n' && s[i] != '\t') i++;
        if (i > st) {
            if (n == cap) w = realloc(w, sizeof *w * (size_t)(cap *= 2));
            w[n++] = fake_strndup(s + st, i - st);
        }
    }
    *out = w;
    return n;
}

static int fake_tokenize(const pagoda_host *h, const char *text, size_t len, bool add_special,
                         bool parse_special, int32_t *ids, int32_t cap, int32_t *n)
{
    fake_engine *f = fake_of(h);
    char **w;
    int nw = fake_split(text, len, &w);
    int32_t k = 0;
    pthread_mutex_lock(&f->mu);
    if (add_special) {
        if (k < cap) ids[k] = FAKE_BOS;
        k++;
    }
    for (int i = 0; i < nw; i++) {
        int32_t id = fake_word_id(f, w[i], strlen(w[i]));
        if (k < cap) ids[k] = id;
        k++;
        free(w[i]);
    }
    pthread_mutex_unlock(&f->mu);
    free(w);
    *n = k;
    return PAGODA_OK;
}

static char *fake_token_text(const pagoda_host *h, int32_t id)
{
    fake_engine *f = fake_of(h);
    if (id == FAKE_BOS) return strdup("<s>");
    if (id == FAKE_EOS) return strdup("</s>");
    pthread_mutex_lock(&f->mu);
    char *r = (id >= 10 && id - 10 < f->n_vocab) ? strdup(f->vocab[id - 10]) : NULL;
    pthread_mutex_unlock(&f->mu);
    return r;
}

static char *fake_detokenize(const pagoda_host *h, const int32_t *ids, int32_t n)
{
    size_t cap = 64, len = 0;
    char *out = malloc(cap);
    out[0] = 0;
    for (int32_t i = 0; i < n; i++) {
        char *t = fake_token_text(h, ids[i]);
        if (!t) {
            free(out);
            fake_error(h, PAGODA_ERR_INVALID, "token id %d is not in the vocabulary", ids[i]);
            return NULL;
        }
        size_t tl = strlen(t);
        while (len + tl + 2 > cap) out = realloc(out, cap *= 2);
        if (i) out[len++] = ' ';
        memcpy(out + len, t, tl + 1);
        len += tl;
        free(t);
    }
    return out;
}

static void fake_free(const pagoda_host *h, void *p) { free(p); }

static int fake_chat_render(const pagoda_host *h, const pagoda_chat_message *msgs, int32_t n,
                            bool add_generation_prompt, char **out, int32_t *stop_ids, int32_t cap,
                            int32_t *n_stop)
{
    fake_engine *f = fake_of(h);
    size_t total = 32;
    for (int32_t i = 0; i < n; i++) total += strlen(msgs[i].role) + strlen(msgs[i].content) + 8;
    char *s = malloc(total);
    size_t len = 0;
    for (int32_t i = 0; i < n; i++)
        len += (size_t)sprintf(s + len, "<|%s|>%s\n", msgs[i].role, msgs[i].content);
    if (add_generation_prompt) len += (size_t)sprintf(s + len, "<|assistant|>");
    s[len] = 0;
    *out = s;
    if (n_stop) *n_stop = 1;
    if (stop_ids && cap > 0) stop_ids[0] = FAKE_EOS;
    pthread_mutex_lock(&f->mu);
    free(f->last_render);
    f->last_render = strdup(s);
    pthread_mutex_unlock(&f->mu);
    return PAGODA_OK;
}

/* chat_render_opts: chat_render's rendering, the options recorded */
static int fake_chat_render_opts(const pagoda_host *h, const pagoda_chat_message *msgs, int32_t n,
                                 const pagoda_chat_options *opts, bool add_generation_prompt, char **out,
                                 int32_t *stop_ids, int32_t cap, int32_t *n_stop)
{
    fake_engine *f = fake_of(h);
    pthread_mutex_lock(&f->mu);
    f->render_opts_calls++;
    f->last_enable_thinking = opts ? opts->enable_thinking : -1;
    snprintf(f->last_effort, sizeof f->last_effort, "%s", opts && opts->reasoning_effort ? opts->reasoning_effort : "");
    pthread_mutex_unlock(&f->mu);
    return h->chat_render(h, msgs, n, add_generation_prompt, out, stop_ids, cap, n_stop);
}

/* ------------------------------------------------------------- requests */

static void fake_request_defaults(const pagoda_host *h, pagoda_request *r)
{
    memset(r, 0, sizeof *r);
    r->struct_size = sizeof *r;
    r->add_special = true;
    r->max_tokens = (int32_t)fake_config_int(h, "max_tokens", 16);
    r->temperature = 1.0f;
    r->top_p = 1.0f;
    r->repetition_penalty = 1.0f;
    r->logprobs = -1;
    r->prompt_logprobs = -1;
}

static int fake_submit(const pagoda_host *h, const pagoda_request *req, pagoda_event_cb cb,
                       void *user, uint64_t *id, char *err, size_t err_len)
{
    fake_engine *f = fake_of(h);
    if (f->submit_status) {
        snprintf(err, err_len, "%s", f->submit_err);
        return f->submit_status;
    }
    pthread_mutex_lock(&f->mu);
    int full = f->nospace_left > 0;
    if (full) f->nospace_left--;
    pthread_mutex_unlock(&f->mu);
    if (full) {
        snprintf(err, err_len, "queue full");
        return PAGODA_ERR_NOSPACE;
    }
    if (f->shutting) {
        snprintf(err, err_len, "the server is shutting down");
        return PAGODA_ERR_STATE;
    }
    fake_req *r = calloc(1, sizeof *r);
    char *prompt;
    if (req->prompt) {
        prompt = fake_strndup(req->prompt, req->prompt_len);
    } else {
        prompt = fake_detokenize(h, req->prompt_tokens, req->n_prompt_tokens);
        if (!prompt) {
            free(r);
            snprintf(err, err_len, "bad token id in the prompt");
            return PAGODA_ERR_INVALID;
        }
    }
    r->n_words = fake_split(prompt, strlen(prompt), &r->words);
    r->prompt_tokens = r->n_words + (req->add_special ? 1 : 0);
    int32_t want = req->max_tokens > 0 ? req->max_tokens : 0;
    if (r->prompt_tokens + want > f->n_ctx) {
        snprintf(err, err_len,
                 "This model's maximum context length is %d tokens. However, you requested %d "
                 "tokens (%d in the prompt, %d in the completion).",
                 f->n_ctx, r->prompt_tokens + want, r->prompt_tokens, want);
        for (int i = 0; i < r->n_words; i++) free(r->words[i]);
        free(r->words);
        free(r);
        free(prompt);
        return PAGODA_ERR_INVALID;
    }
    r->max_tokens = req->max_tokens;
    r->logprobs = req->logprobs;
    r->trace = req->struct_size >= offsetof(pagoda_request, trace) + sizeof req->trace && req->trace;
    r->prompt_logprobs = req->prompt_logprobs;
    r->score_only = req->score_only;
    {
        int k = 0;
        if (req->add_special) r->prompt_ids[k++] = FAKE_BOS;
        pthread_mutex_lock(&f->mu);
        for (int i = 0; i < r->n_words && k < 64; i++)
            r->prompt_ids[k++] = fake_word_id(f, r->words[i], strlen(r->words[i]));
        pthread_mutex_unlock(&f->mu);
    }
    for (int i = 0; i < r->n_words; i++) {
        if (!strcmp(r->words[i], "forever")) r->forever = 1;
        if (!strcmp(r->words[i], "FAIL")) r->fail = 1;
    }
    for (int i = 0; i < req->n_stop && i < 16; i++) r->stop[r->n_stop++] = strdup(req->stop[i]);
    r->cb = cb;
    r->user = user;

    pthread_mutex_lock(&f->mu);
    r->id = ++f->next_id;
    *id = r->id;
    if (f->n_log < FAKE_MAX_LOG) {
        fake_logged *l = &f->log[f->n_log++];
        memset(l, 0, sizeof *l);
        l->req = *req;
        l->req.prompt = NULL;
        l->req.prompt_tokens = NULL;
        l->req.stop = NULL;
        l->req.cache_salt = NULL;
        l->req.stop_token_ids = NULL;
        l->req.constraint = NULL;
        if (req->constraint) l->constraint = fake_strndup(req->constraint, req->constraint_len);
        l->req.request_id = NULL;
        if (req->request_id) snprintf(l->request_id, sizeof l->request_id, "%s", req->request_id);
        l->prompt = strdup(prompt);
        for (int i = 0; i < req->n_stop && i < 16; i++) l->stop[l->n_stop++] = strdup(req->stop[i]);
        for (int i = 0; i < req->n_stop_token_ids && i < 16; i++) l->stop_ids[i] = req->stop_token_ids[i];
        l->cache_salt = req->cache_salt ? strdup(req->cache_salt) : NULL;
        l->id = r->id;
        l->finals_at_submit = f->n_final;
    }
    fake_req **tail = &f->live;
    while (*tail) tail = &(*tail)->next;
    *tail = r;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    free(prompt);
    return PAGODA_OK;
}

/* A spec holding "BAD" is refused; every other one compiles. */
static int fake_check_constraint(const pagoda_host *h, int32_t type, const char *text, size_t len,
                                 bool strict, char *err, size_t err_len)
{
    (void)h;
    (void)strict;
    bool bad = false;
    for (size_t i = 0; text && i + 3 <= len && !bad; i++) bad = !memcmp(text + i, "BAD", 3);
    if (bad) {
        snprintf(err, err_len, "%s: fake: the spec says BAD", pagoda_constraint_type_name(type));
        return PAGODA_ERR_INVALID;
    }
    return PAGODA_OK;
}

static int fake_cancel(const pagoda_host *h, uint64_t id)
{
    fake_engine *f = fake_of(h);
    int st = PAGODA_ERR_NOT_FOUND;
    pthread_mutex_lock(&f->mu);
    if (f->n_cancel < FAKE_MAX_LOG) f->cancels[f->n_cancel++] = id;
    for (fake_req *r = f->live; r; r = r->next)
        if (r->id == id) {
            r->cancelled = 1;
            st = PAGODA_OK;
        }
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    return st;
}

static int fake_model_info(const pagoda_host *h, pagoda_model_info *out)
{
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    snprintf(out->name, sizeof out->name, "fake-model");
    snprintf(out->arch, sizeof out->arch, "llama");
    out->n_ctx = fake_of(h)->n_ctx;
    out->n_vocab = FAKE_MAX_VOCAB + 10;
    out->bos = FAKE_BOS;
    out->eos = FAKE_EOS;
    out->has_chat_template = true;
    snprintf(out->chat_template, sizeof out->chat_template, "%s", fake_of(h)->chat_template);
    return PAGODA_OK;
}

static int fake_stats(const pagoda_host *h, pagoda_engine_stats *out)
{
    fake_engine *f = fake_of(h);
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    pthread_mutex_lock(&f->mu);
    for (fake_req *r = f->live; r; r = r->next) out->running++;
    out->ready = f->ready;
    pthread_mutex_unlock(&f->mu);
    return PAGODA_OK;
}

static char *fake_memory_plan_json(const pagoda_host *h)
{
    return strdup("{\"weights_bytes\":1234,\"kv_blocks\":56}");
}
static char *fake_metrics_text(const pagoda_host *h)
{
    return strdup("# HELP fake_metric A test metric.\n# TYPE fake_metric gauge\nfake_metric 42\n");
}
static bool fake_shutting_down(const pagoda_host *h) { return fake_of(h)->shutting; }

static char *fake_inspect_json(const pagoda_host *h)
{
    fake_engine *f = fake_of(h);
    pthread_mutex_lock(&f->mu);
    f->n_inspect++;
    if (f->inspect_bump) f->inspect_version++;
    int running = 0, ready = f->ready, pad = f->inspect_pad;
    for (fake_req *r = f->live; r; r = r->next) running++;
    uint64_t v = f->inspect_version, steps = f->steps;
    pthread_mutex_unlock(&f->mu);
    if (!ready) return NULL;
    char *s = malloc((size_t)pad + 256);
    if (!s) return NULL;
    int n = snprintf(s, 256, "{\"version\":%llu,\"object\":\"pagoda.inspect\",\"step\":%llu,"
                     "\"counts\":{\"running\":%d},\"pad\":\"", (unsigned long long)v,
                     (unsigned long long)steps, running);
    memset(s + n, 'x', (size_t)pad);
    memcpy(s + n + pad, "\"}", 3);
    return s;
}

/* ----------------------------------------------------------- the thread */

typedef struct fake_out {
    fake_req *r;
    pagoda_event ev;
    char text[256];
    pagoda_top_logprob top[5];
    int32_t blocks[64];
    int final;
} fake_out;

static void *fake_thread(void *arg)
{
    fake_engine *f = arg;
    pthread_mutex_lock(&f->mu);
    while (!f->quit || f->live) {
        if (!f->live) {
            pthread_cond_wait(&f->cv, &f->mu);
            continue;
        }
        if (f->hold_submits > 0 && f->n_log < f->hold_submits && !f->quit) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += f->hold_ms / 1000;
            until.tv_nsec += (long)(f->hold_ms % 1000) * 1000000L;
            if (until.tv_nsec >= 1000000000L) { until.tv_sec++; until.tv_nsec -= 1000000000L; }
            while (f->n_log < f->hold_submits && !f->quit)
                if (pthread_cond_timedwait(&f->cv, &f->mu, &until) == ETIMEDOUT) break;
            f->hold_submits = 0; /* once */
        }
        int n = 0;
        for (fake_req *r = f->live; r; r = r->next) n++;
        f->steps++;
        fake_out *outs = calloc((size_t)n, sizeof *outs);
        int k = 0;
        for (fake_req **pp = &f->live; *pp;) {
            fake_req *r = *pp;
            fake_out *o = &outs[k++];
            o->r = r;
            pagoda_event *ev = &o->ev;
            ev->struct_size = sizeof *ev;
            ev->id = r->id;
            ev->token = -1;
            ev->position = -1;
            ev->text = o->text;
            int fin = PAGODA_FINISH_NONE;
            const char *word = NULL;
            if (!f->quit && !r->cancelled && r->prompt_logprobs >= 0 && r->scored < r->prompt_tokens &&
                r->scored < 64) {
                /* a scored prompt: token p has logprob -0.25 p (p > 0), the
                 * token itself best and EOS second */
                int p = r->scored++;
                ev->type = PAGODA_EVENT_PROMPT;
                ev->text = "";
                ev->token = r->prompt_ids[p];
                ev->position = p;
                ev->logprob = p ? -0.25f * (float)p : NAN;
                o->top[0].token = ev->token;
                o->top[0].logprob = ev->logprob;
                o->top[1].token = FAKE_EOS;
                o->top[1].logprob = -3.0f;
                ev->n_top = p == 0 ? 0 : r->prompt_logprobs < 2 ? r->prompt_logprobs : 2;
                ev->top = o->top;
                pp = &r->next;
                continue;
            }
            if (f->quit || r->cancelled) fin = PAGODA_FINISH_CANCELLED;
            else if (r->score_only) fin = PAGODA_FINISH_LENGTH;
            else if (r->fail) fin = PAGODA_FINISH_ERROR;
            else if (r->max_tokens > 0 && r->emitted >= r->max_tokens) fin = PAGODA_FINISH_LENGTH;
            else if (r->n_words == 0 || (!r->forever && r->emitted >= r->n_words)) fin = PAGODA_FINISH_STOP;
            else {
                word = r->words[r->emitted % r->n_words];
                for (int i = 0; i < r->n_stop; i++)
                    if (!strcmp(word, r->stop[i])) fin = PAGODA_FINISH_STOP;
            }
            if (fin != PAGODA_FINISH_NONE) {
                ev->type = PAGODA_EVENT_FINAL;
                ev->finish_reason = fin;
                ev->error = fin == PAGODA_FINISH_ERROR ? "fake failure" : NULL;
                ev->usage.prompt_tokens = r->prompt_tokens;
                ev->usage.completion_tokens = r->emitted;
                ev->usage.cached_tokens = f->cached_tokens;
                ev->tier_cached_tokens = f->tier_cached_tokens;
                ev->timings.queue_ms = 1;
                ev->timings.ttft_ms = 2;
                ev->timings.total_ms = 3;
                o->final = 1;
                f->n_final++;
                *pp = r->next; /* off the live list; freed after its callback */
                continue;
            }
            ev->type = PAGODA_EVENT_TOKEN;
            snprintf(o->text, sizeof o->text, "%s%s", r->emitted ? " " : "", word);
            ev->text_len = strlen(o->text);
            ev->token = fake_word_id(f, word, strlen(word));
            if (r->logprobs >= 0 || r->trace) {
                ev->logprob = -0.5f;
                o->top[0].token = ev->token;
                o->top[0].logprob = -0.5f;
                o->top[1].token = FAKE_EOS;
                o->top[1].logprob = -1.5f;
                for (int t = 2; t < 5; t++) {
                    o->top[t].token = 1 + t;
                    o->top[t].logprob = -2.0f - (float)t;
                }
                ev->n_top = r->trace ? 5 : r->logprobs < 2 ? r->logprobs : 2;
                ev->top = o->top;
            }
            if (r->trace) {
                ev->step = f->steps;
                ev->step_seqs = ev->step_tokens = n;
                ev->kv_tokens = r->prompt_tokens + r->emitted;
                ev->n_blocks = (ev->kv_tokens + 3) / 4 < 64 ? (ev->kv_tokens + 3) / 4 : 64;
                for (int b = 0; b < ev->n_blocks; b++) o->blocks[b] = b;
                ev->blocks = o->blocks;
            }
            r->emitted++;
            f->n_tokens_emitted++;
            pp = &r->next;
        }
        pthread_mutex_unlock(&f->mu);
        /* callbacks outside the lock: a frontend may call cancel() from one */
        for (int i = 0; i < k; i++) {
            outs[i].r->cb(outs[i].r->user, &outs[i].ev);
            if (outs[i].final) {
                fake_req *r = outs[i].r;
                for (int j = 0; j < r->n_words; j++) free(r->words[j]);
                for (int j = 0; j < r->n_stop; j++) free(r->stop[j]);
                free(r->words);
                free(r);
            }
        }
        free(outs);
        if (f->step_us > 0) usleep((useconds_t)f->step_us);
        pthread_mutex_lock(&f->mu);
        pthread_cond_broadcast(&f->cv);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

/* ---------------------------------------------------------------- public */

static fake_engine *fake_engine_new(const fake_kv *config, int n_config)
{
    fake_engine *f = calloc(1, sizeof *f);
    pagoda_host *h = &f->host;
    h->struct_size = sizeof *h;
    h->abi_major = PAGODA_ABI_MAJOR;
    h->abi_minor = PAGODA_ABI_MINOR;
    h->host_ctx = f;
    h->log = fake_log;
    h->config_str = fake_config_str;
    h->config_int = fake_config_int;
    h->config_float = fake_config_float;
    h->config_bool = fake_config_bool;
    h->engine_config = fake_engine_config;
    h->error = fake_error;
    h->submit = fake_submit;
    h->cancel = fake_cancel;
    h->request_defaults = fake_request_defaults;
    h->tokenize = fake_tokenize;
    h->detokenize = fake_detokenize;
    h->token_text = fake_token_text;
    h->chat_render = fake_chat_render;
    h->chat_render_opts = fake_chat_render_opts;
    h->free = fake_free;
    h->model_info = fake_model_info;
    h->stats = fake_stats;
    h->memory_plan_json = fake_memory_plan_json;
    h->metrics_text = fake_metrics_text;
    h->shutting_down = fake_shutting_down;
    h->check_constraint = fake_check_constraint;
    h->inspect_json = fake_inspect_json;
    f->config = config;
    f->n_config = n_config;
    f->ready = 1;
    f->n_ctx = 128;
    snprintf(f->chat_template, sizeof f->chat_template, "chatml");
    f->step_us = 1000;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    pthread_create(&f->th, NULL, fake_thread, f);
    return f;
}

/* Stops the thread (live requests get a cancelled FINAL first) and frees. */
static void fake_engine_free(fake_engine *f)
{
    pthread_mutex_lock(&f->mu);
    f->quit = 1;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->th, NULL);
    for (int i = 0; i < f->n_log; i++) {
        free(f->log[i].prompt);
        free(f->log[i].cache_salt);
        free(f->log[i].constraint);
        for (int j = 0; j < f->log[i].n_stop; j++) free(f->log[i].stop[j]);
    }
    for (int i = 0; i < f->n_vocab; i++) free(f->vocab[i]);
    free(f->last_render);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

/* Wait (bounded by timeout_s, a safety net only) until *counter >= n under
 * the fake's lock; returns the counter's value. */
static inline int fake_wait_count(fake_engine *f, const int *counter, int n, int timeout_s)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_s;
    pthread_mutex_lock(&f->mu);
    while (*counter < n) {
        if (pthread_cond_timedwait(&f->cv, &f->mu, &dl) == ETIMEDOUT) break;
    }
    int v = *counter;
    pthread_mutex_unlock(&f->mu);
    return v;
}

/* How many logged lines hold every one of the needles (NULL-ended). */
static inline int fake_log_count(fake_engine *f, const char *needle, ...)
{
    const char *need[8];
    int k = 0;
    va_list ap;
    va_start(ap, needle);
    for (const char *x = needle; x && k < 8; x = va_arg(ap, const char *)) need[k++] = x;
    va_end(ap);
    int n = 0;
    pthread_mutex_lock(&f->mu);
    for (char *line = f->logs; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        int all = 1;
        for (int i = 0; i < k && all; i++) all = strstr(line, need[i]) != NULL;
        n += all;
        if (nl) *nl = '\n';
        line = nl ? nl + 1 : NULL;
    }
    pthread_mutex_unlock(&f->mu);
    return n;
}

/* Number of requests still live (submitted, no FINAL yet). */
static int fake_live(fake_engine *f)
{
    int n = 0;
    pthread_mutex_lock(&f->mu);
    for (fake_req *r = f->live; r; r = r->next) n++;
    pthread_mutex_unlock(&f->mu);
    return n;
}

#endif /* PAGODA_FAKE_ENGINE_H */
