/*
 * core/host.c: see host.h. The record behind host_ctx is allocated together
 * with the table, so one free releases both and the table's address stays
 * stable for the plugin's lifetime.
 * Not for: the engine slots (host_engine.c fills those).
 */
#include "host.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

typedef struct host_record {
    pagoda_host host;           /* handed to the plugin */
    const pagoda_config *cfg;
    int kind;
    char section[160];          /* "kind.name" */
    void *engine;
    pthread_mutex_t mu;         /* guards last_error */
    char last_error[1024];
    bool has_error;
} host_record;

static host_record *rec(const pagoda_host *h) { return h ? (host_record *)h->host_ctx : NULL; }

static void host_log(const pagoda_host *h, int level, const char *fmt, ...)
{
    if (level > pagoda_log_get_level()) return;
    char msg[3072];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pagoda_log(level, "[%s] %s", rec(h) ? rec(h)->section : "?", msg);
}

static const char *host_config_str(const pagoda_host *h, const char *key, const char *dflt)
{
    host_record *r = rec(h);
    const char *v = r ? pagoda_config_get(r->cfg, r->section, key) : NULL;
    return v ? v : dflt;
}

static int64_t host_config_int(const pagoda_host *h, const char *key, int64_t dflt)
{
    const char *v = host_config_str(h, key, NULL);
    int64_t x;
    uint64_t s;
    if (!v) return dflt;
    if (pagoda_parse_int(v, &x) == 0) return x;
    /* A size key ("512M") reads as its bytes. */
    if (pagoda_parse_size(v, &s) == 0 && s <= (uint64_t)INT64_MAX) return (int64_t)s;
    return dflt;
}

static double host_config_float(const pagoda_host *h, const char *key, double dflt)
{
    const char *v = host_config_str(h, key, NULL);
    double x;
    return v && pagoda_parse_float(v, &x) == 0 ? x : dflt;
}

static bool host_config_bool(const pagoda_host *h, const char *key, bool dflt)
{
    const char *v = host_config_str(h, key, NULL);
    bool x;
    return v && pagoda_parse_bool(v, &x) == 0 ? x : dflt;
}

static const char *host_engine_config(const pagoda_host *h, const char *key)
{
    host_record *r = rec(h);
    return pagoda_config_engine_str(r ? r->cfg : NULL, key);
}

static int host_error(const pagoda_host *h, int status, const char *fmt, ...)
{
    host_record *r = rec(h);
    if (!r) return status;
    char msg[sizeof r->last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&r->mu);
    memcpy(r->last_error, msg, sizeof msg);
    r->has_error = true;
    pthread_mutex_unlock(&r->mu);
    pagoda_log(PAGODA_LOG_DEBUG, "[%s] error (%s): %s", r->section, pagoda_status_str(status), msg);
    return status;
}

static void host_free_mem(const pagoda_host *h, void *p) { free(p); }

pagoda_host *pagoda_host_new(const pagoda_config *cfg, int kind, const char *name)
{
    host_record *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->cfg = cfg;
    r->kind = kind;
    snprintf(r->section, sizeof r->section, "%s.%s", pagoda_kind_name(kind), name ? name : "");
    pthread_mutex_init(&r->mu, NULL);
    pagoda_host *h = &r->host;
    h->struct_size = sizeof *h;
    h->abi_major = PAGODA_ABI_MAJOR;
    h->abi_minor = PAGODA_ABI_MINOR;
    h->host_ctx = r;
    h->log = host_log;
    h->config_str = host_config_str;
    h->config_int = host_config_int;
    h->config_float = host_config_float;
    h->config_bool = host_config_bool;
    h->engine_config = host_engine_config;
    h->error = host_error;
    h->free = host_free_mem;
    return h;
}

void pagoda_host_free(pagoda_host *h)
{
    host_record *r = rec(h);
    if (!r) return;
    pthread_mutex_destroy(&r->mu);
    free(r);
}

void pagoda_host_set_engine_slots(pagoda_host *h, const pagoda_host *s)
{
    if (!h || !s) return;
#define COPY(f) if (s->f) h->f = s->f
    COPY(kv_copy_blocks);
    COPY(kv_block_bytes);
    COPY(kv_read_block);
    COPY(kv_write_block);
    COPY(kv_fingerprint);
    COPY(kv_on_device);
    COPY(submit);
    COPY(cancel);
    COPY(request_defaults);
    COPY(tokenize);
    COPY(detokenize);
    COPY(token_text);
    COPY(chat_render);
    COPY(free);
    COPY(model_info);
    COPY(stats);
    COPY(memory_plan_json);
    COPY(metrics_text);
    COPY(shutting_down);
    COPY(check_constraint);
    COPY(inspect_json);
    COPY(chat_render_opts);
#undef COPY
}

void pagoda_host_set_engine(pagoda_host *h, void *engine)
{
    if (rec(h)) rec(h)->engine = engine;
}

void *pagoda_host_engine(const pagoda_host *h) { return rec(h) ? rec(h)->engine : NULL; }

const char *pagoda_host_last_error(const pagoda_host *h)
{
    static _Thread_local char copy[1024];
    host_record *r = rec(h);
    if (!r) return NULL;
    bool has;
    pthread_mutex_lock(&r->mu);
    has = r->has_error;
    if (has) memcpy(copy, r->last_error, sizeof copy);
    pthread_mutex_unlock(&r->mu);
    return has ? copy : NULL;
}

void pagoda_host_clear_error(const pagoda_host *h)
{
    host_record *r = rec(h);
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->has_error = false;
    r->last_error[0] = '\0';
    pthread_mutex_unlock(&r->mu);
}

const char *pagoda_host_section(const pagoda_host *h) { return rec(h) ? rec(h)->section : "?"; }
