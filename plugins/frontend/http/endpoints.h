/*
 * endpoints.h: the routes that do not generate: GET /health, /v1/models,
 * /metrics, /v1/memory, POST /tokenize and /detokenize. Each answers at
 * once from the host table.
 * Not for: generation (generate.h) or routing and auth (dispatch.h).
 */
#ifndef PAGODA_HTTP_ENDPOINTS_H
#define PAGODA_HTTP_ENDPOINTS_H

#include <microhttpd.h>

#include "hreq.h"

/* [connection thread] each queues its answer on conn */
enum MHD_Result route_health(http_fe *fe, struct MHD_Connection *conn);
enum MHD_Result route_models(http_fe *fe, struct MHD_Connection *conn);
enum MHD_Result route_metrics(http_fe *fe, struct MHD_Connection *conn);
enum MHD_Result route_memory(http_fe *fe, struct MHD_Connection *conn);
enum MHD_Result route_tokenize(http_fe *fe, struct MHD_Connection *conn, conn_state *cs);
enum MHD_Result route_detokenize(http_fe *fe, struct MHD_Connection *conn, conn_state *cs);

#endif /* PAGODA_HTTP_ENDPOINTS_H */
