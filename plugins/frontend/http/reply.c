/*
 * reply.c: sending a plain HTTP answer with MHD: bodies, JSON, OpenAI
 * error objects, and the UTF-8 repair of strings put into JSON.
 * Not for: completion bodies and SSE (output.c).
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request_fields.h"
#include "reply.h"

json_t *jstr(const char *s, size_t n)
{
    json_t *j = json_stringn(s ? s : "", s ? n : 0);
    if (j) return j;
    sbuf b = {0};
    size_t i = 0;
    const unsigned char *u = (const unsigned char *)s;
    while (i < n) {
        unsigned c = u[i];
        size_t len = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3
                                                                 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        int ok = len > 0 && i + len <= n;
        for (size_t k = 1; ok && k < len; k++)
            if ((u[i + k] & 0xC0) != 0x80) ok = 0;
        if (ok && len == 3) {
            if (c == 0xE0 && u[i + 1] < 0xA0) ok = 0;       /* overlong */
            if (c == 0xED && u[i + 1] >= 0xA0) ok = 0;      /* surrogate */
        }
        if (ok && len == 4) {
            if (c == 0xF0 && u[i + 1] < 0x90) ok = 0;       /* overlong */
            if (c == 0xF4 && u[i + 1] >= 0x90) ok = 0;      /* > U+10FFFF */
        }
        if (ok) {
            sb_put(&b, s + i, len);
            i += len;
        } else {
            sb_put(&b, "\xEF\xBF\xBD", 3);
            i++;
        }
    }
    j = json_stringn(b.p ? b.p : "", b.len);
    free(b.p);
    return j ? j : json_string("");
}

enum MHD_Result send_body(struct MHD_Connection *c, unsigned status, const char *ctype,
                                 char *body, size_t len)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result send_json_hdr(struct MHD_Connection *c, unsigned status, json_t *j,
                                     const char *hname, const char *hval)
{
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(j);
    if (!s) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(s);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (hname) MHD_add_response_header(r, hname, hval);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *j)
{
    return send_json_hdr(c, status, j, NULL, NULL);
}

_Thread_local int reply_flavor;

static json_t *anthropic_error(const char *type, const char *msg, const char *code)
{
    const char *t = type;
    if (code && !strcmp(code, "invalid_api_key")) t = "authentication_error";
    else if (code && !strcmp(code, "request_too_large")) t = "request_too_large";
    else if (!strcmp(type, "server_error")) t = "api_error";
    return json_pack("{s:s,s:{s:s,s:o}}", "type", "error", "error", "type", t, "message", jstr(msg, strlen(msg)));
}

json_t *error_json(const char *type, const char *msg, const char *param, const char *code)
{
    if (reply_flavor == REPLY_ANTHROPIC) return anthropic_error(type, msg, code);
    json_t *e = json_object();
    json_object_set_new(e, "message", jstr(msg, strlen(msg)));
    json_object_set_new(e, "type", json_string(type));
    json_object_set_new(e, "param", param ? json_string(param) : json_null());
    json_object_set_new(e, "code", code ? json_string(code) : json_null());
    json_t *o = json_object();
    json_object_set_new(o, "error", e);
    return o;
}

enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *type,
                                  const char *param, const char *code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return send_json(c, status, error_json(type, msg, param, code));
}
