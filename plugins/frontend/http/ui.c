/*
 * ui.c: GET /ui (see ui.h): the page compiled into the plugin, sent from
 * its static bytes without a copy, never cached stale (it changes with the
 * plugin), and kept out of frames (it may hold an API key the user typed).
 * Not for: what the page shows (ui/inspect.html) or the data (inspect.c).
 */
#include <microhttpd.h>

#include "ui.h"

enum MHD_Result route_ui(http_fe *fe, struct MHD_Connection *conn)
{
    (void)fe;
    struct MHD_Response *r = MHD_create_response_from_buffer(http_ui_page_len, (void *)http_ui_page,
                                                             MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
                            "img-src 'self' data:; frame-ancestors 'none'");
    enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}
