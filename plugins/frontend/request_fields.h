/*
 * request_fields.h: what the http and stdin frontends share: a growable
 * byte buffer, and the parsing of a JSON request's sampling fields
 * (max_tokens, temperature, top_p, top_k, min_p, the penalties, seed,
 * ignore_eos, priority, cache_salt, stop) into a pagoda_request, with the
 * same ranges and the same error messages in both.
 * Header-only with static inline functions: each frontend is one shared
 * object and must not link another, so this text is compiled into each.
 * Not for: endpoint-specific fields (n, stream, logprobs, prompt, messages,
 * id): each frontend parses those itself.
 */
#ifndef PAGODA_FRONTEND_REQUEST_FIELDS_H
#define PAGODA_FRONTEND_REQUEST_FIELDS_H

#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pagoda/pagoda.h"

#define RF_MAX_STOP 16 /* most stop strings of one request */

/* ------------------------------------------------------------ byte buffer */

typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

/* Appends n bytes and keeps the buffer NUL-terminated; -1 when out of memory. */
static inline int sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->len + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) return -1;
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

static inline int sb_str(sbuf *b, const char *s) { return sb_put(b, s, strlen(s)); }

/* ---------------------------------------------------------- field parsing */

/* A parameter error: the field and the message (HTTP: the 400's body). */
typedef struct perr {
    char param[64];
    char msg[512];
} perr;

static inline int fail(perr *pe, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline int fail(perr *pe, const char *param, const char *fmt, ...)
{
    snprintf(pe->param, sizeof pe->param, "%s", param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pe->msg, sizeof pe->msg, fmt, ap);
    va_end(ap);
    return -1;
}

/* Number field in [lo, hi] (lo excluded when lo_open). 1 set, 0 absent or null, -1 bad. */
static inline int get_num(json_t *o, const char *key, double lo, double hi, int lo_open, double *out, perr *pe)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    const char *range_l = lo_open ? "(" : "[";
    if (!json_is_number(v))
        return fail(pe, key, "'%s' must be a number in %s%g, %g]", key, range_l, lo, hi);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi) || (lo_open && d == lo))
        return fail(pe, key, "'%s' must be in %s%g, %g], got %g", key, range_l, lo, hi, d);
    *out = d;
    return 1;
}

/* Integer field in [lo, hi]; a real with no fraction (3.0) counts, as
 * OpenAI's clients may send one. 1 set, 0 absent or null, -1 bad. */
static inline int get_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, perr *pe)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (json_is_real(v) && json_real_value(v) == (double)(int64_t)json_real_value(v) &&
        json_real_value(v) > -9e18 && json_real_value(v) < 9e18) {
        *out = (int64_t)json_real_value(v);
    } else if (json_is_integer(v)) {
        *out = json_integer_value(v);
    } else {
        return fail(pe, key, "'%s' must be an integer in [%lld, %lld]", key, (long long)lo, (long long)hi);
    }
    if (*out < lo || *out > hi)
        return fail(pe, key, "'%s' must be in [%lld, %lld], got %lld", key, (long long)lo,
                    (long long)hi, (long long)*out);
    return 1;
}

static inline int get_bool(json_t *o, const char *key, int *out, perr *pe)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return fail(pe, key, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return 1;
}

/*
 * The sampling fields of object o into req, which already holds the
 * defaults (host->request_defaults). stop[RF_MAX_STOP] receives the stop
 * strings and req->stop points at it. Strings point into o: keep o alive
 * until the request is submitted. 0, or -1 with pe filled.
 */
static inline int rf_parse_sampling(json_t *o, pagoda_request *req, const char **stop, perr *pe)
{
    double d = 0;
    int64_t i = 0;
    int b = 0, r;
    if ((r = get_int(o, "max_tokens", 1, INT32_MAX, &i, pe)) < 0) return -1;
    if (r) req->max_tokens = (int32_t)i;
    if ((r = get_num(o, "temperature", 0, 2, 0, &d, pe)) < 0) return -1;
    if (r) req->temperature = (float)d;
    if ((r = get_num(o, "top_p", 0, 1, 1, &d, pe)) < 0) return -1;
    if (r) req->top_p = (float)d;
    if ((r = get_int(o, "top_k", -1, INT32_MAX, &i, pe)) < 0) return -1;
    if (r) req->top_k = (int32_t)i;
    if ((r = get_num(o, "min_p", 0, 1, 0, &d, pe)) < 0) return -1;
    if (r) req->min_p = (float)d;
    if ((r = get_num(o, "presence_penalty", -2, 2, 0, &d, pe)) < 0) return -1;
    if (r) req->presence_penalty = (float)d;
    if ((r = get_num(o, "frequency_penalty", -2, 2, 0, &d, pe)) < 0) return -1;
    if (r) req->frequency_penalty = (float)d;
    if ((r = get_num(o, "repetition_penalty", 0, 10, 1, &d, pe)) < 0) return -1;
    if (r) req->repetition_penalty = (float)d;
    if ((r = get_int(o, "seed", INT64_MIN, INT64_MAX, &i, pe)) < 0) return -1;
    if (r) {
        req->seed = (uint64_t)i;
        req->has_seed = true;
    }
    if ((r = get_bool(o, "ignore_eos", &b, pe)) < 0) return -1;
    if (r) req->ignore_eos = b;
    if ((r = get_int(o, "priority", INT32_MIN, INT32_MAX, &i, pe)) < 0) return -1;
    if (r) req->priority = (int32_t)i;
    json_t *salt = json_object_get(o, "cache_salt");
    if (salt && !json_is_null(salt)) {
        if (!json_is_string(salt) || !json_string_length(salt))
            return fail(pe, "cache_salt", "'cache_salt' must be a non-empty string");
        req->cache_salt = json_string_value(salt);
    }

    json_t *st = json_object_get(o, "stop");
    req->n_stop = 0;
    if (st && json_is_string(st)) {
        if (!json_string_length(st)) return fail(pe, "stop", "'stop' strings must not be empty");
        stop[req->n_stop++] = json_string_value(st);
    } else if (st && json_is_array(st)) {
        if (json_array_size(st) > RF_MAX_STOP)
            return fail(pe, "stop", "'stop' takes at most %d strings, got %zu", RF_MAX_STOP, json_array_size(st));
        size_t k;
        json_t *s;
        json_array_foreach(st, k, s) {
            if (!json_is_string(s) || !json_string_length(s))
                return fail(pe, "stop", "'stop' must be a non-empty string or a list of them");
            stop[req->n_stop++] = json_string_value(s);
        }
    } else if (st && !json_is_null(st)) {
        return fail(pe, "stop", "'stop' must be a string or a list of at most %d strings", RF_MAX_STOP);
    }
    req->stop = req->n_stop ? stop : NULL;
    return 0;
}

#endif
