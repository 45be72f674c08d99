/*
 * generate.h: POST /v1/completions and /v1/chat/completions: parse the
 * body, render a chat, submit one engine request per prompt x n, and hand
 * the response to the stream or to the blocking answer.
 * Not for: the other routes (endpoints.h) or routing (dispatch.h).
 */
#ifndef PAGODA_HTTP_GENERATE_H
#define PAGODA_HTTP_GENERATE_H

#include <jansson.h>
#include <microhttpd.h>

#include "hreq.h"

/* [connection thread] kind: KIND_COMPLETION or KIND_CHAT. cs->hr is set
 * once the request exists (on_completed releases it). */
enum MHD_Result route_generate(http_fe *fe, struct MHD_Connection *conn, conn_state *cs, int kind);

/* The same on a body already parsed: root (taken) is an OpenAI body of
 * kind; as (taken, may be NULL) makes the response another API's
 * (api/api.h: /v1/messages, /v1/responses built their body from theirs). */
struct api_state;
enum MHD_Result generate_body(http_fe *fe, struct MHD_Connection *conn, conn_state *cs, int kind,
                              json_t *root, struct api_state *as);

#endif /* PAGODA_HTTP_GENERATE_H */
