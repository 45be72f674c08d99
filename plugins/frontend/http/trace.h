/*
 * trace.h: "pagoda_trace": true in a completion request returns, for each
 * generated token, how it was made: the engine step it came from, that
 * step's batch, the sequence's KV length and block table after it, and the
 * 5 most likely candidates with their probabilities (docs/http-api.md).
 * Not for: collecting the trace (the engine, minor 2 of the event) or
 * where the entries go in a response (output.c).
 */
#ifndef PAGODA_HTTP_TRACE_H
#define PAGODA_HTTP_TRACE_H

#include <jansson.h>

#include "hreq.h"

#define TRACE_TOP 5            /* candidates shown per token */

/* One token's trace entry (a new reference). */
json_t *trace_entry(const pagoda_host *h, const ev_item *e);

#endif /* PAGODA_HTTP_TRACE_H */
