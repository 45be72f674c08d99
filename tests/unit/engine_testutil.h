/* engine_testutil.h: build a runtime on the bundled model from a list of
 * "section.key=value" settings, and collect a request's events. Header-only
 * (static functions) so each suite that needs it includes it. */
#ifndef PAGODA_ENGINE_TESTUTIL_H
#define PAGODA_ENGINE_TESTUTIL_H

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
    pagoda_timings timings;
    char error[512];
    int n_text_events_after_final;
} et_result;

static void et_result_init(et_result *r)
{
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
}

static void et_cb(void *user, const pagoda_event *ev)
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
        r->timings = ev->timings;
        if (ev->error) snprintf(r->error, sizeof r->error, "%s", ev->error);
    }
    pthread_mutex_unlock(&r->mu);
}

/* Open a runtime (no frontend) on models/stories260K.gguf with settings;
 * NULL-terminated list. Fails the test on error. */
static pagoda_runtime *et_open(pagoda_config **cfg_out, const char *const *settings)
{
    char err[1024] = "";
    pagoda_config *cfg = pagoda_config_new_empty();
    ck_assert_ptr_nonnull(cfg);
    char buf[4200];
    snprintf(buf, sizeof buf, "engine.model=%s", tu_src("models/stories260K.gguf"));
    ck_assert_msg(pagoda_config_set(cfg, buf, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(pagoda_config_set(cfg, "engine.log_level=warn", err, sizeof err) == 0, "%s", err);
    for (int i = 0; settings && settings[i]; i++)
        ck_assert_msg(pagoda_config_set(cfg, settings[i], err, sizeof err) == 0, "%s: %s",
                      settings[i], err);
    pagoda_runtime *rt = NULL;
    int st = pagoda_runtime_open(cfg, false, false, &rt, err, sizeof err);
    ck_assert_msg(st == 0, "runtime_open: %s", err);
    ck_assert_int_eq(pagoda_engine_start(rt->engine), 0);
    *cfg_out = cfg;
    return rt;
}

static void et_close(pagoda_runtime *rt, pagoda_config *cfg)
{
    pagoda_runtime_close(rt);
    pagoda_config_free(cfg);
}

/* Submit a greedy request for `prompt`; returns its id. */
static uint64_t et_submit(pagoda_runtime *rt, const char *prompt, int32_t max_tokens, et_result *r,
                          float temperature)
{
    pagoda_request req;
    pagoda_engine_request_defaults(rt->engine, &req);
    req.prompt = prompt;
    req.prompt_len = strlen(prompt);
    req.max_tokens = max_tokens;
    req.temperature = temperature;
    req.ignore_eos = true;
    uint64_t id = 0;
    char err[512] = "";
    int st = pagoda_engine_submit(rt->engine, &req, et_cb, r, &id, err, sizeof err);
    ck_assert_msg(st == 0, "submit: %s", err);
    return id;
}

#endif
