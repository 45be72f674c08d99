/*
 * gate.h: the HTTP frontend's front door. One thread owns the listening
 * socket and holds every new connection (a descriptor in an epoll set, no
 * thread) until its request line and headers, and a body of up to
 * GATE_HOLD bytes, have arrived; checks the framing (frame.h); and only
 * then hands the connection to libmicrohttpd, whose thread per connection
 * serves it. What it answers itself: 400/413/414/431/501/505 for broken
 * framing or a body cut short by a half-close, 408 when a request does not
 * arrive within request_timeout_s, 503 with Retry-After when every serving
 * thread is busy or too many connections wait; it counts them (/metrics).
 * A body larger than GATE_HOLD is read by MHD's thread, watched by the
 * gate against the same deadline (408 past it); gate_refuse answers for
 * that thread (413, or 400 for a cut body) where MHD can queue nothing.
 * Not for: routing or answering requests (dispatch.c and the rest).
 *
 * Why: MHD 0.9.75's thread-per-connection mode gave every connection a
 * thread from accept on, with an idle timeout only, so slow clients could
 * hold every thread; connections past the limit were closed unanswered;
 * and its listening socket was bound with SO_REUSEPORT when asked, which
 * let a second server share the port.
 */
#ifndef PAGODA_HTTP_GATE_H
#define PAGODA_HTTP_GATE_H

#include <microhttpd.h>
#include <stdint.h>
#include <sys/socket.h>

#define GATE_HOLD (32 * 1024)      /* a request this large waits in the gate whole */
#define GATE_MAX_HEAD (16 * 1024)  /* request line and headers, at most */

/* The 400 for a client that ended its side before its body was whole
 * (it may still read the answer). */
#define GATE_BODY_CUT "the request ended before its body did (a Content-Length body needs all its bytes, " \
                      "a chunked one its last chunk of size 0, with every chunk size within max_body_bytes)"

typedef struct gate gate;

typedef struct gate_opts {
    int threads;              /* connections MHD serves at once; past it: 503 */
    int max_waiting;          /* connections the gate holds at once; past it: 503 */
    int request_timeout_s;    /* from accept to the whole request received; past it: 408 */
    int64_t max_body;         /* a larger declared body or chunk: 413 */
} gate_opts;

/* Binds and listens on sa (no SO_REUSEPORT: a port someone holds is
 * refused). Returns the socket, or -1 with errno set. */
int gate_listen(const struct sockaddr *sa, socklen_t len);

/* Starts the gate thread on a listening socket it then owns, handing
 * connections to d (an MHD daemon started with MHD_USE_NO_LISTEN_SOCKET
 * and MHD_USE_ITC). *out is set before the thread starts (the pointer
 * gate_notify reads). 0, or -1 when out of resources (*out NULL). */
int gate_start(gate **out, int listen_fd, struct MHD_Daemon *d, const gate_opts *o);

/* Stops accepting (the listening socket is closed) and drops connections
 * still waiting in the gate; returns once the thread has ended. The
 * connections MHD serves are not touched. */
void gate_stop(gate *g);

/* Frees the gate; call after MHD_stop_daemon (its callbacks use it). */
void gate_free(gate *g);

/* MHD_OPTION_NOTIFY_CONNECTION callback; cls: a gate ** (the gate exists
 * before MHD has a connection). Ties MHD's connection to the gate's record
 * of it (started) and forgets it (closed). */
void gate_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                 enum MHD_ConnectionNotificationCode code);

/* [connection thread] The request on c has been received whole (MHD calls
 * the handler for the last time): the gate stops watching its deadline.
 * Returns 0, or -1 when the gate already answered it (408, or
 * gate_refuse; the handler then returns MHD_NO, closing the connection). */
int gate_request_received(gate *g, struct MHD_Connection *c);

/* Keep-alive. [connection thread] A request's headers are in (MHD calls
 * the handler for the first time): 1 when the connection may stay open
 * after its response (fewer than threads / 2 connections are allowed to
 * wait for their next request), 0 when the response must close it.
 * *follow_up: not the connection's first request, so MHD read it, not the
 * gate (the caller checks its framing). */
int gate_request_start(gate *g, struct MHD_Connection *c, int *follow_up);

/* [connection thread] c's response went out whole: a connection kept open
 * must bring its next request whole within request_timeout_s of now, or
 * the gate closes it (no answer, as nothing was asked). */
void gate_request_done(gate *g, struct MHD_Connection *c);

/* [connection thread] Answers the request on c while MHD is still reading
 * its body, where MHD 0.9.75 can queue no response: status and msg in the
 * API's error shape, written on the socket as the gate writes its own
 * answers; the socket is shut after a moment (the client's remaining
 * input drained meanwhile), which ends MHD's read. For a chunked body too
 * large (413) and one that ended before its last chunk (400). Returns 0,
 * or -1 when the request was answered already (or is not the gate's). */
int gate_refuse(gate *g, struct MHD_Connection *c, int status, const char *msg);

/* Answers the gate gave itself, by reason, for /metrics. */
typedef struct gate_counts {
    uint64_t server_busy;     /* 503: every serving thread busy, or too many waiting */
    uint64_t request_timeout; /* 408 */
    uint64_t bad_request;     /* 400/413/414/431/501/505: broken framing, a body refused */
} gate_counts;

/* [any thread] A snapshot of the counts (zeros for a NULL gate). */
void gate_get_counts(gate *g, gate_counts *out);

#endif /* PAGODA_HTTP_GATE_H */
