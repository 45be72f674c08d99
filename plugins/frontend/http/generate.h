/*
 * generate.h: POST /v1/completions and /v1/chat/completions: parse the
 * body, render a chat, submit one engine request per prompt x n, and hand
 * the response to the stream or to the blocking answer.
 * Not for: the other routes (endpoints.h) or routing (dispatch.h).
 */
#ifndef PAGODA_HTTP_GENERATE_H
#define PAGODA_HTTP_GENERATE_H

#include <microhttpd.h>

#include "hreq.h"

/* [connection thread] kind: KIND_COMPLETION or KIND_CHAT. cs->hr is set
 * once the request exists (on_completed releases it). */
enum MHD_Result route_generate(http_fe *fe, struct MHD_Connection *conn, conn_state *cs, int kind);

#endif /* PAGODA_HTTP_GENERATE_H */
