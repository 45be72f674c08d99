/*
 * request_fields.c: the definitions behind request_fields.h (the byte
 * buffer and the sampling-field parsing the http and stdin frontends
 * share). Not for: endpoint-specific fields.
 */
#include "request_fields.h"

int sb_put(sbuf *b, const char *s, size_t n)
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

int sb_str(sbuf *b, const char *s) { return sb_put(b, s, strlen(s)); }

int rf_fail(perr *pe, const char *param, const char *fmt, ...)
{
    snprintf(pe->param, sizeof pe->param, "%s", param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pe->msg, sizeof pe->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int rf_get_num(json_t *o, const char *key, double lo, double hi, int lo_open, double *out, perr *pe)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    const char *range_l = lo_open ? "(" : "[";
    if (!json_is_number(v))
        return rf_fail(pe, key, "'%s' must be a number in %s%g, %g]", key, range_l, lo, hi);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi) || (lo_open && d == lo))
        return rf_fail(pe, key, "'%s' must be in %s%g, %g], got %g", key, range_l, lo, hi, d);
    *out = d;
    return 1;
}

int rf_get_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, perr *pe)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    /* the range first: casting a double outside int64's is undefined */
    if (json_is_real(v) && json_real_value(v) > -9e18 && json_real_value(v) < 9e18 &&
        json_real_value(v) == (double)(int64_t)json_real_value(v)) {
        *out = (int64_t)json_real_value(v);
    } else if (json_is_integer(v)) {
        *out = json_integer_value(v);
    } else {
        return rf_fail(pe, key, "'%s' must be an integer in [%lld, %lld]", key, (long long)lo, (long long)hi);
    }
    if (*out < lo || *out > hi)
        return rf_fail(pe, key, "'%s' must be in [%lld, %lld], got %lld", key, (long long)lo,
                    (long long)hi, (long long)*out);
    return 1;
}

int rf_get_bool(json_t *o, const char *key, int *out, perr *pe)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return rf_fail(pe, key, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return 1;
}

int rf_parse_sampling(json_t *o, pagoda_request *req, const char **stop, int *max_tokens_zero,
                      perr *pe)
{
    double d = 0;
    int64_t i = 0;
    int b = 0, r;
    if ((r = rf_get_int(o, "max_tokens", max_tokens_zero ? 0 : 1, INT32_MAX, &i, pe)) < 0) return -1;
    if (max_tokens_zero) *max_tokens_zero = r && i == 0;
    if (r && i > 0) req->max_tokens = (int32_t)i;
    if ((r = rf_get_num(o, "temperature", 0, 2, 0, &d, pe)) < 0) return -1;
    if (r) req->temperature = (float)d;
    if ((r = rf_get_num(o, "top_p", 0, 1, 1, &d, pe)) < 0) return -1;
    if (r) req->top_p = (float)d;
    if ((r = rf_get_int(o, "top_k", -1, INT32_MAX, &i, pe)) < 0) return -1;
    if (r) req->top_k = (int32_t)i;
    if ((r = rf_get_num(o, "min_p", 0, 1, 0, &d, pe)) < 0) return -1;
    if (r) req->min_p = (float)d;
    if ((r = rf_get_num(o, "presence_penalty", -2, 2, 0, &d, pe)) < 0) return -1;
    if (r) req->presence_penalty = (float)d;
    if ((r = rf_get_num(o, "frequency_penalty", -2, 2, 0, &d, pe)) < 0) return -1;
    if (r) req->frequency_penalty = (float)d;
    if ((r = rf_get_num(o, "repetition_penalty", 0, 10, 1, &d, pe)) < 0) return -1;
    if (r) req->repetition_penalty = (float)d;
    if ((r = rf_get_int(o, "seed", INT64_MIN, INT64_MAX, &i, pe)) < 0) return -1;
    if (r) {
        req->seed = (uint64_t)i;
        req->has_seed = true;
    }
    if ((r = rf_get_bool(o, "ignore_eos", &b, pe)) < 0) return -1;
    if (r) req->ignore_eos = b;
    if ((r = rf_get_int(o, "priority", INT32_MIN, INT32_MAX, &i, pe)) < 0) return -1;
    if (r) req->priority = (int32_t)i;
    /* speculative decoding (docs/speculation.md): -1 off, 0 the server's,
     * N at most N draft tokens a step; the engine checks it against the
     * context and the server's setting */
    if ((r = rf_get_int(o, "spec_max_draft", -1, INT32_MAX, &i, pe)) < 0) return -1;
    if (r) req->spec_max_draft = (int32_t)i;
    json_t *salt = json_object_get(o, "cache_salt");
    if (salt && !json_is_null(salt)) {
        if (!json_is_string(salt) || !json_string_length(salt))
            return rf_fail(pe, "cache_salt", "'cache_salt' must be a non-empty string");
        req->cache_salt = json_string_value(salt);
    }

    json_t *st = json_object_get(o, "stop");
    req->n_stop = 0;
    if (st && json_is_string(st)) {
        if (!json_string_length(st)) return rf_fail(pe, "stop", "'stop' strings must not be empty");
        stop[req->n_stop++] = json_string_value(st);
    } else if (st && json_is_array(st)) {
        if (json_array_size(st) > RF_MAX_STOP)
            return rf_fail(pe, "stop", "'stop' takes at most %d strings, got %zu", RF_MAX_STOP, json_array_size(st));
        size_t k;
        json_t *s;
        json_array_foreach(st, k, s) {
            if (!json_is_string(s) || !json_string_length(s))
                return rf_fail(pe, "stop", "'stop' must be a non-empty string or a list of them");
            stop[req->n_stop++] = json_string_value(s);
        }
    } else if (st && !json_is_null(st)) {
        return rf_fail(pe, "stop", "'stop' must be a string or a list of at most %d strings", RF_MAX_STOP);
    }
    req->stop = req->n_stop ? stop : NULL;
    return 0;
}
