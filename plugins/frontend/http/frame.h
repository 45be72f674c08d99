/*
 * frame.h: checks the framing of an HTTP/1.x request from its first bytes,
 * before libmicrohttpd reads it: the request line, header syntax,
 * Content-Length and Transfer-Encoding, and a chunked body as far as it
 * has arrived. What MHD 0.9.75 gets wrong is refused here with a status
 * (two different Content-Length headers were taken as the first,
 * "Content-Length: -1" was answered with its header block twice, a 64-bit
 * chunk size closed the connection unanswered). A pure function: no I/O,
 * no allocation, so it is unit-tested and fuzzed alone.
 * Not for: routing, the body's JSON, or anything MHD does right (it still
 * parses the request it is handed).
 */
#ifndef PAGODA_HTTP_FRAME_H
#define PAGODA_HTTP_FRAME_H

#include <stddef.h>
#include <stdint.h>

enum { FRAME_MORE = 0, FRAME_READY = 1, FRAME_ERROR = -1 };

typedef struct http_frame {
    size_t head_len;         /* READY: bytes of the request line and headers, blank line included */
    int64_t content_length;  /* READY: -1 when there is none */
    int chunked;             /* READY: Transfer-Encoding: chunked */
    int expect_continue;     /* READY: Expect: 100-continue (the client waits for the 100) */
    int body_complete;       /* READY: the whole body is in the bytes given (checked, when chunked) */
    int status;              /* ERROR: the HTTP status to answer (400, 413, 431, 501, 505) */
    char msg[192];           /* ERROR: why, for the client */
} http_frame;

/* Looks at buf[0..n), the start of a request as received so far.
 * FRAME_MORE: nothing wrong yet, the headers are not complete.
 * FRAME_READY: headers complete and sound; *f says how the body is framed
 *   and whether it is all there.
 * FRAME_ERROR: f->status and f->msg say what to answer.
 * max_head bounds the request line and headers (431 past it); max_body
 * bounds a declared length or one chunk (413 past it). */
int http_frame_check(const char *buf, size_t n, size_t max_head, int64_t max_body, http_frame *f);

#endif /* PAGODA_HTTP_FRAME_H */
