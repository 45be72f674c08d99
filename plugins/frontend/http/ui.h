/*
 * ui.h: GET /ui, the inspection page: one self-contained HTML file (its
 * CSS and JS inline, no CDN, no build step) compiled into the plugin from
 * ui/inspect.html. It draws the KV pool, the batch of each step and memory
 * from GET /v1/inspect/stream and streams a traced completion. The page is
 * served without the API key (it holds no data); when the server wants
 * one, the page asks for it and sends it with every request it makes.
 * Not for: the data (inspect.h).
 */
#ifndef PAGODA_HTTP_UI_H
#define PAGODA_HTTP_UI_H

#include <microhttpd.h>
#include <stddef.h>

#include "hreq.h"

/* The page's bytes (generated from ui/inspect.html at build time). */
extern const unsigned char http_ui_page[];
extern const size_t http_ui_page_len;

/* [connection thread] GET /ui. */
enum MHD_Result route_ui(http_fe *fe, struct MHD_Connection *conn);

#endif /* PAGODA_HTTP_UI_H */
