/*
 * output.h: a request's engine events into its response: the SSE stream
 * (MHD pulls it from sse_reader) or, for a non-streaming request, waiting
 * for every FINAL and then one JSON body, both in the OpenAI shapes.
 * Not for: errors before anything was submitted (reply.h).
 */
#ifndef PAGODA_HTTP_OUTPUT_H
#define PAGODA_HTTP_OUTPUT_H

#include <microhttpd.h>
#include <stdint.h>
#include <sys/types.h>

#include "hreq.h"

/* Appends one chunk to hr->out: chat (delta, stolen) or completion
 * (delta's "content" as text), with logprobs (stolen, may be NULL) and a
 * finish reason (NULL: null). */
void sse_chunk(hreq *hr, int index, json_t *delta, json_t *logprobs, const char *finish);

/* Appends the chat streams' first chunks (role "assistant") to hr->out. */
void sse_role_chunks(hreq *hr);

/* [connection thread] MHD's content reader for a streaming response
 * (cls: the hreq); blocks until there is something to send. */
ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max);

/* MHD's free callback of a streaming response: drops its reference. */
void sse_free(void *cls);

/* [connection thread] Wait for every FINAL, watching the client meanwhile.
 * Returns 0, or -1 when the client went away (its requests are cancelled). */
int wait_finals(hreq *hr);

/* The JSON answer of a non-streaming request once wait_finals returned 0:
 * 500 when a choice failed, else 200 with every choice's text so far (a
 * cancelled one, e.g. by shutdown, with finish_reason "abort"). */
enum MHD_Result answer_full(struct MHD_Connection *conn, hreq *hr);

#endif /* PAGODA_HTTP_OUTPUT_H */
