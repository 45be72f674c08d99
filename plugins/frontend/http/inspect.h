/*
 * inspect.h: the inspection routes of the HTTP frontend. GET /v1/inspect
 * answers the engine's state between two steps (the host's inspect_json);
 * GET /v1/inspect/stream sends it as server-sent events, at most once per
 * [frontend.http] inspect_interval_ms and only while someone listens: one
 * thread (the hub) takes one snapshot per interval and every listener
 * sends that same text; a listener whose client reads nothing for
 * INSPECT_STALL_S is dropped, and none ever holds up the engine.
 * Not for: the snapshot or its JSON (core/inspect.c), the page (ui.h).
 */
#ifndef PAGODA_HTTP_INSPECT_H
#define PAGODA_HTTP_INSPECT_H

#include <microhttpd.h>

#include "hreq.h"

#define INSPECT_STALL_S 5          /* a stream that sends nothing this long is dropped */
#define INSPECT_KEEPALIVE_MS 2000  /* a comment line this often when nothing changed */

typedef struct inspect_hub inspect_hub;

/* A hub for fe (no thread yet: it starts with the first listener); NULL
 * when out of memory. */
inspect_hub *inspect_hub_new(http_fe *fe);
/* Ends every stream (each sends what it holds and closes) and the hub's
 * thread; new streams are refused. [run's drain] */
void inspect_hub_stop(inspect_hub *hub);
/* Stop, then free. NULL is fine. */
void inspect_hub_free(inspect_hub *hub);

/* [connection thread] GET /v1/inspect and GET /v1/inspect/stream. */
enum MHD_Result route_inspect(http_fe *fe, struct MHD_Connection *conn);
enum MHD_Result route_inspect_stream(http_fe *fe, struct MHD_Connection *conn);

#endif /* PAGODA_HTTP_INSPECT_H */
