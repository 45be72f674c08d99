/*
 * request_fields.h: what the http and stdin frontends share: a growable
 * byte buffer, and the parsing of a JSON request's sampling fields
 * (max_tokens, temperature, top_p, top_k, min_p, the penalties, seed,
 * ignore_eos, priority, cache_salt, spec_max_draft, stop) into a pagoda_request, with the
 * same ranges and the same error messages in both.
 * Compiled once into the static library pagoda_frontend_shared, which
 * each frontend plugin links (hidden: no plugin exports these names).
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
int sb_put(sbuf *b, const char *s, size_t n);

int sb_str(sbuf *b, const char *s);

/* ---------------------------------------------------------- field parsing */

/* A parameter error: the field and the message (HTTP: the 400's body). */
typedef struct perr {
    char param[64];
    char msg[512];
} perr;

int rf_fail(perr *pe, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Number field in [lo, hi] (lo excluded when lo_open). 1 set, 0 absent or null, -1 bad. */
int rf_get_num(json_t *o, const char *key, double lo, double hi, int lo_open, double *out, perr *pe);

/* Integer field in [lo, hi]; a real with no fraction (3.0) counts, as
 * OpenAI's clients may send one. 1 set, 0 absent or null, -1 bad. */
int rf_get_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, perr *pe);

int rf_get_bool(json_t *o, const char *key, int *out, perr *pe);

/*
 * The sampling fields of object o into req, which already holds the
 * defaults (host->request_defaults). stop[RF_MAX_STOP] receives the stop
 * strings and req->stop points at it. Strings point into o: keep o alive
 * until the request is submitted. max_tokens_zero: NULL, and max_tokens
 * must be >= 1; else max_tokens 0 is taken too and *max_tokens_zero says
 * whether it was given (req->max_tokens then stays as it was: the caller
 * decides what 0 means). 0, or -1 with pe filled.
 */
int rf_parse_sampling(json_t *o, pagoda_request *req, const char **stop, int *max_tokens_zero,
                      perr *pe);

#endif
