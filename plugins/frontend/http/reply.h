/*
 * reply.h: sending a plain HTTP answer with MHD: a body, a JSON value, an
 * OpenAI-shaped error ({"error": {message, type, param, code}}), and JSON
 * strings made safe from bytes that may not be valid UTF-8.
 * Not for: completion bodies and SSE (output.h).
 */
#ifndef PAGODA_HTTP_REPLY_H
#define PAGODA_HTTP_REPLY_H

#include <jansson.h>
#include <microhttpd.h>
#include <stddef.h>

/* Bytes as a JSON string; invalid UTF-8 (a partial token text) becomes U+FFFD. */
json_t *jstr(const char *s, size_t n);

/* Queues body (malloc'd; taken, freed by MHD) with its content type. */
enum MHD_Result send_body(struct MHD_Connection *c, unsigned status, const char *ctype,
                          char *body, size_t len);

/* Sends j (reference stolen), with one extra header when hname is set. */
enum MHD_Result send_json_hdr(struct MHD_Connection *c, unsigned status, json_t *j,
                              const char *hname, const char *hval);
enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *j);

/* The error shape this thread's current request is answered in: the
 * OpenAI one, or Anthropic's {"type": "error", "error": {type, message}}
 * for /v1/messages (set by dispatch.c per request; MHD runs one thread
 * per connection, so a thread-local is the request's). */
enum { REPLY_OPENAI = 0, REPLY_ANTHROPIC = 1 };
extern _Thread_local int reply_flavor;

/* The error object in reply_flavor's shape; param and code may be NULL
 * (JSON null). Anthropic's has no param or code: its type is derived from
 * them (invalid_api_key: authentication_error, server_error: api_error). */
json_t *error_json(const char *type, const char *msg, const char *param, const char *code);

enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *type,
                           const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

#define BAD(c, param, ...) send_error(c, MHD_HTTP_BAD_REQUEST, "invalid_request_error", param, NULL, __VA_ARGS__)

#endif /* PAGODA_HTTP_REPLY_H */
