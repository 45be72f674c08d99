/*
 * dispatch.h: the MHD callbacks of a connection: collecting the body
 * (within max_body_bytes), checking the API key, routing by path and
 * method, and releasing the request when MHD is done with it.
 * Not for: what a route does (endpoints.h, generate.h).
 */
#ifndef PAGODA_HTTP_DISPATCH_H
#define PAGODA_HTTP_DISPATCH_H

#include <microhttpd.h>

/* [connection thread] MHD_AccessHandlerCallback; cls: the http_fe. */
enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                          const char *method, const char *version, const char *upload_data,
                          size_t *upload_data_size, void **con_cls);

/* [connection thread] MHD_RequestCompletedCallback: cancels what a request
 * that did not complete left running, drops the connection's reference. */
void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                  enum MHD_RequestTerminationCode toe);

#endif /* PAGODA_HTTP_DISPATCH_H */
