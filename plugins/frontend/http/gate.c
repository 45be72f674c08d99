/*
 * gate.c: see gate.h. One thread, one epoll set: the listening socket, an
 * eventfd to stop, and every connection still arriving. A connection's
 * bytes are only peeked (MSG_PEEK), never read, so MHD later reads the
 * request whole from the socket as if it had accepted it itself.
 * Not for: anything after a request is handed over, except watching the
 * deadline of a large body MHD's thread is still reading, and answering
 * for that thread when MHD cannot (gate_refuse).
 *
 * Costs: a waiting connection is a descriptor and ~100 bytes. A trickling
 * one is peeked at most once per PEEK_GAP_MS, so a flood of tiny writes
 * cannot make the gate copy its buffers without bound.
 * Lock: g->mu guards the record of connections MHD holds (the gate thread,
 * MHD's thread and the connection threads all touch it); the list of
 * waiting connections is the gate thread's alone.
 */
#define _GNU_SOURCE
#include "gate.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "frame.h"

#define PEEK_GAP_MS 10       /* a connection is peeked at most this often */
#define TICK_MS 50           /* deadlines are checked at least this often */
#define LINGER_MS 2000       /* after an answer, input is drained this long before close */
#define STALE_MS 10000       /* handed to MHD but never started: MHD dropped it */
#define ACCEPT_PAUSE_MS 100  /* out of descriptors: accept again after this */

typedef struct pconn {       /* a connection waiting in the gate */
    int fd;
    int64_t deadline;
    int64_t next_peek;
    int dirty;               /* new bytes (or a hang-up) since the last look */
    int rdhup;               /* the client will send nothing more */
    int closing;             /* answered: draining input until EOF or close_at */
    int64_t close_at;
    struct sockaddr_storage addr;
    socklen_t alen;
    struct pconn *prev, *next;
} pconn;

typedef struct mconn {       /* a connection handed to MHD */
    int fd;
    int64_t deadline;
    int64_t handed;
    int started;             /* MHD announced it (NOTIFY_STARTED) */
    int received;            /* its request arrived whole */
    int killed;              /* the gate answered 408 on it */
    int forced;              /* and then shut it down */
    int64_t kill_at;
    int requests;            /* requests MHD began on it (keep-alive: more than one) */
    int kept;                /* may stay open after its response (counted in n_kept) */
    int idle;                /* kept open after a response; the next request's headers not in yet */
    struct mconn *prev, *next;
} mconn;

struct gate {
    int lfd, ep, evfd;
    struct MHD_Daemon *d;
    gate_opts o;
    pthread_t th;
    int running;
    pthread_mutex_t mu;
    mconn *mlist;            /* under mu */
    int n_mhd;               /* under mu: connections MHD holds (or is being handed) */
    int n_kept;              /* under mu: connections allowed to stay open between requests */
    pconn *plist;
    int n_wait;
    int accept_off;
    int64_t accept_at;
    /* answers given, by reason (gate_counts) */
    atomic_uint_fast64_t n_busy, n_timeout, n_bad;
    char peek[GATE_HOLD];
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int gate_listen(const struct sockaddr *sa, socklen_t len)
{
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    /* SO_REUSEADDR: a restart may bind while old connections sit in
     * TIME_WAIT; on Linux it never lets two sockets listen on one port.
     * No SO_REUSEPORT, which would. */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (sa->sa_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, sa, len) < 0 || listen(fd, 1024) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

static const char *reason(int st)
{
    switch (st) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

/* Writes a complete answer in the API's error shape (best effort: a small
 * answer fits a fresh socket's send buffer), ends the sending side, and
 * counts it. */
static void send_answer(gate *g, int fd, int st, const char *msg, int retry_after)
{
    atomic_fetch_add(st == 503 ? &g->n_busy : st == 408 ? &g->n_timeout : &g->n_bad, 1);
    char body[512], esc[300], out[1024];
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p && k < sizeof esc - 3; p++) {
        if (*p == '"' || *p == '\\') esc[k++] = '\\';
        esc[k++] = (*p < 0x20 || *p >= 0x7F) ? '?' : (char)*p; /* keeps the JSON valid UTF-8 */
    }
    esc[k] = 0;
    int bl = snprintf(body, sizeof body,
                      "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":%s}}",
                      esc, st == 503 ? "server_error" : "invalid_request_error",
                      st == 408 ? "\"request_timeout\"" : st == 503 ? "\"server_busy\""
                      : st == 413 ? "\"request_too_large\"" : "null");
    if (bl < 0 || (size_t)bl >= sizeof body) bl = (int)strlen(body);
    int n = snprintf(out, sizeof out,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     "Connection: close\r\n%s\r\n%s",
                     st, reason(st), bl, retry_after ? "Retry-After: 1\r\n" : "", body);
    if (n > 0) {
        ssize_t w = send(fd, out, (size_t)n < sizeof out ? (size_t)n : sizeof out - 1,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
    }
    shutdown(fd, SHUT_WR);
}

static void p_unlink(gate *g, pconn *p)
{
    if (p->prev) p->prev->next = p->next;
    else g->plist = p->next;
    if (p->next) p->next->prev = p->prev;
    g->n_wait--;
}

static void p_close(gate *g, pconn *p)
{
    epoll_ctl(g->ep, EPOLL_CTL_DEL, p->fd, NULL);
    close(p->fd);
    p_unlink(g, p);
    free(p);
}

/* Answers and keeps the connection a moment to drain what the client still
 * sends: closing with unread input would reset it and could lose the answer. */
static void p_answer(gate *g, pconn *p, int st, const char *msg, int retry_after)
{
    send_answer(g, p->fd, st, msg, retry_after);
    p->closing = 1;
    p->close_at = mono_ms() + LINGER_MS;
}

static void p_drain(gate *g, pconn *p)
{
    char buf[4096];
    for (;;) {
        ssize_t r = recv(p->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (r > 0) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        p_close(g, p);
        return;
    }
}

/* Hands a connection with a whole request (or whole headers and a large
 * body coming) to MHD, or answers 503 when every serving thread is busy. */
static void p_handoff(gate *g, pconn *p)
{
    mconn *m = calloc(1, sizeof *m);
    pthread_mutex_lock(&g->mu);
    int busy = g->n_mhd >= g->o.threads;
    if (!busy && m) {
        /* a record MHD never started, for this descriptor number, is one
         * MHD dropped (closing the socket) without telling */
        for (mconn *x = g->mlist, *nx; x; x = nx) {
            nx = x->next;
            if (x->fd == p->fd && !x->started) {
                if (x->prev) x->prev->next = x->next;
                else g->mlist = x->next;
                if (x->next) x->next->prev = x->prev;
                g->n_mhd--;
                free(x);
            }
        }
        m->fd = p->fd;
        m->deadline = p->deadline;
        m->handed = mono_ms();
        m->next = g->mlist;
        if (g->mlist) g->mlist->prev = m;
        g->mlist = m;
        g->n_mhd++;
    }
    pthread_mutex_unlock(&g->mu);
    if (busy || !m) {
        free(m);
        char msg[160];
        snprintf(msg, sizeof msg, "all %d connections the server serves at once are busy; retry shortly",
                 g->o.threads);
        p_answer(g, p, 503, msg, 1);
        return;
    }
    int fd = p->fd;
    epoll_ctl(g->ep, EPOLL_CTL_DEL, fd, NULL);
    struct sockaddr_storage addr = p->addr;
    socklen_t alen = p->alen;
    p_unlink(g, p);
    free(p);
    if (MHD_add_connection(g->d, fd, (struct sockaddr *)&addr, alen) != MHD_YES) {
        /* MHD closed the socket; forget the record */
        pthread_mutex_lock(&g->mu);
        if (m->prev) m->prev->next = m->next;
        else g->mlist = m->next;
        if (m->next) m->next->prev = m->prev;
        g->n_mhd--;
        pthread_mutex_unlock(&g->mu);
        free(m);
    }
}

/* Looks at what a waiting connection has sent so far. */
static void p_examine(gate *g, pconn *p)
{
    ssize_t r = recv(p->fd, g->peek, sizeof g->peek, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        p_close(g, p); /* gone before sending a whole request */
        return;
    }
    if (r < 0) {
        if (p->rdhup) p_close(g, p);
        return;
    }
    http_frame f;
    int st = http_frame_check(g->peek, (size_t)r, GATE_MAX_HEAD, g->o.max_body, &f);
    if (st == FRAME_ERROR) {
        p_answer(g, p, f.status, f.msg, 0);
        return;
    }
    if (st == FRAME_READY) {
        int hand = f.body_complete || f.expect_continue ||
                   (f.content_length >= 0 && (int64_t)f.head_len + f.content_length > GATE_HOLD) ||
                   (f.chunked && (size_t)r >= sizeof g->peek);
        if (hand) {
            p_handoff(g, p);
            return;
        }
    }
    /* half a request and the client said it is done: with its headers
     * whole it can still read why (past GATE_HOLD, dispatch.c says the same) */
    if (p->rdhup) {
        if (st == FRAME_READY) p_answer(g, p, 400, GATE_BODY_CUT, 0);
        else p_close(g, p);
    }
}

static void accept_all(gate *g)
{
    for (;;) {
        pconn *p = calloc(1, sizeof *p);
        if (!p) return;
        p->alen = sizeof p->addr;
        p->fd = accept4(g->lfd, (struct sockaddr *)&p->addr, &p->alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (p->fd < 0) {
            int e = errno;
            free(p);
            if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
                /* out of descriptors: stop polling the listener for a while
                 * (it would wake the loop at once, forever) */
                epoll_ctl(g->ep, EPOLL_CTL_DEL, g->lfd, NULL);
                g->accept_off = 1;
                g->accept_at = mono_ms() + ACCEPT_PAUSE_MS;
            }
            return;
        }
        if (g->n_wait >= g->o.max_waiting) {
            /* overload: a short answer and close, holding nothing */
            char msg[160];
            snprintf(msg, sizeof msg, "too many connections are waiting (%d); retry shortly",
                     g->o.max_waiting);
            send_answer(g, p->fd, 503, msg, 1);
            close(p->fd);
            free(p);
            continue;
        }
        int64_t now = mono_ms();
        p->deadline = now + (int64_t)g->o.request_timeout_s * 1000;
        p->dirty = 1; /* a request may already be there */
        p->next = g->plist;
        if (g->plist) g->plist->prev = p;
        g->plist = p;
        g->n_wait++;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = p};
        if (epoll_ctl(g->ep, EPOLL_CTL_ADD, p->fd, &ev) < 0) {
            close(p->fd);
            p_unlink(g, p);
            free(p);
        }
    }
}

/* The record of connections MHD holds: answer 408 on a request whose body
 * MHD is still reading past its deadline; then, after a grace, shut the
 * socket so MHD's thread ends; forget records MHD never started. */
static void watch_mhd(gate *g, int64_t now)
{
    pthread_mutex_lock(&g->mu);
    for (mconn *m = g->mlist, *nx; m; m = nx) {
        nx = m->next;
        if (!m->started) {
            if (now - m->handed > STALE_MS) {
                if (m->prev) m->prev->next = m->next;
                else g->mlist = m->next;
                if (m->next) m->next->prev = m->prev;
                g->n_mhd--;
                free(m);
            }
            continue;
        }
        if (m->idle && !m->killed && now >= m->deadline) {
            /* kept alive, and no next request within request_timeout_s:
             * closed without an answer (nothing was asked) */
            shutdown(m->fd, SHUT_RDWR);
            m->killed = m->forced = 1;
        } else if (!m->received && !m->killed && now >= m->deadline) {
            char msg[128];
            snprintf(msg, sizeof msg, "the request did not arrive within request_timeout_s (%d s)",
                     g->o.request_timeout_s);
            send_answer(g, m->fd, 408, msg, 0);
            m->killed = 1;
            m->kill_at = now + LINGER_MS;
        } else if (m->killed && !m->forced && now >= m->kill_at) {
            shutdown(m->fd, SHUT_RDWR);
            m->forced = 1;
        }
    }
    pthread_mutex_unlock(&g->mu);
}

static void *gate_main(void *arg)
{
    gate *g = arg;
    struct epoll_event evs[128];
    int64_t next_tick = 0;
    for (;;) {
        int64_t now = mono_ms();
        int timeout = TICK_MS;
        for (pconn *p = g->plist; p; p = p->next)
            if (p->dirty && !p->closing) {
                int64_t w = p->next_peek - now;
                if (w < timeout) timeout = w < 0 ? 0 : (int)w;
            }
        int n = epoll_wait(g->ep, evs, 128, timeout);
        if (n < 0 && errno != EINTR) break;
        int stop = 0;
        for (int i = 0; i < n; i++) {
            void *ptr = evs[i].data.ptr;
            if (ptr == &g->evfd) {
                stop = 1;
            } else if (ptr == &g->lfd) {
                accept_all(g);
            } else {
                pconn *p = ptr;
                if (p->closing) {
                    p_drain(g, p);
                    continue;
                }
                p->dirty = 1;
                if (evs[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) p->rdhup = 1;
            }
        }
        if (stop) break;
        now = mono_ms();
        for (pconn *p = g->plist, *nx; p; p = nx) {
            nx = p->next;
            if (p->closing) {
                if (now >= p->close_at) p_close(g, p);
                continue;
            }
            if (p->dirty && now >= p->next_peek) {
                p->dirty = 0;
                p->next_peek = now + PEEK_GAP_MS;
                p_examine(g, p); /* may free p */
                continue;
            }
            if (now >= p->deadline) {
                char msg[128];
                snprintf(msg, sizeof msg, "the request did not arrive within request_timeout_s (%d s)",
                         g->o.request_timeout_s);
                p_answer(g, p, 408, msg, 0);
            }
        }
        if (g->accept_off && now >= g->accept_at) {
            struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &g->lfd};
            if (epoll_ctl(g->ep, EPOLL_CTL_ADD, g->lfd, &ev) == 0) g->accept_off = 0;
            else g->accept_at = now + ACCEPT_PAUSE_MS;
        }
        if (now >= next_tick) {
            watch_mhd(g, now);
            next_tick = now + TICK_MS;
        }
    }
    /* stopping: nothing more is accepted; waiting connections are dropped
     * (none has sent a whole request, or it would have been handed over) */
    close(g->lfd);
    g->lfd = -1;
    while (g->plist) p_close(g, g->plist);
    return NULL;
}

int gate_start(gate **out, int listen_fd, struct MHD_Daemon *d, const gate_opts *o)
{
    gate *g = calloc(1, sizeof *g);
    if (!g) return -1;
    g->lfd = listen_fd;
    g->d = d;
    g->o = *o;
    g->ep = epoll_create1(EPOLL_CLOEXEC);
    g->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&g->mu, NULL);
    struct epoll_event el = {.events = EPOLLIN, .data.ptr = &g->lfd};
    struct epoll_event ee = {.events = EPOLLIN, .data.ptr = &g->evfd};
    /* published before the thread starts: MHD's callbacks read *out as
     * soon as a connection is handed over */
    *out = g;
    if (g->ep < 0 || g->evfd < 0 || epoll_ctl(g->ep, EPOLL_CTL_ADD, listen_fd, &el) < 0 ||
        epoll_ctl(g->ep, EPOLL_CTL_ADD, g->evfd, &ee) < 0 ||
        pthread_create(&g->th, NULL, gate_main, g) != 0) {
        *out = NULL;
        if (g->ep >= 0) close(g->ep);
        if (g->evfd >= 0) close(g->evfd);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return -1;
    }
    g->running = 1;
    return 0;
}

void gate_stop(gate *g)
{
    if (!g || !g->running) return;
    uint64_t one = 1;
    ssize_t w = write(g->evfd, &one, sizeof one);
    (void)w;
    pthread_join(g->th, NULL);
    g->running = 0;
}

void gate_free(gate *g)
{
    if (!g) return;
    gate_stop(g);
    for (mconn *m = g->mlist, *n; m; m = n) {
        n = m->next;
        free(m);
    }
    close(g->ep);
    close(g->evfd);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

void gate_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                 enum MHD_ConnectionNotificationCode code)
{
    gate *g = *(gate **)cls;
    if (!g) return;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = NULL;
        if (!ci) return;
        pthread_mutex_lock(&g->mu);
        for (mconn *m = g->mlist; m; m = m->next)
            if (m->fd == ci->connect_fd && !m->started) {
                m->started = 1;
                *socket_context = m;
                break;
            }
        pthread_mutex_unlock(&g->mu);
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        mconn *m = *socket_context;
        if (!m) return;
        pthread_mutex_lock(&g->mu);
        if (m->prev) m->prev->next = m->next;
        else g->mlist = m->next;
        if (m->next) m->next->prev = m->prev;
        g->n_mhd--;
        if (m->kept) g->n_kept--;
        pthread_mutex_unlock(&g->mu);
        free(m);
        *socket_context = NULL;
    }
}

void gate_get_counts(gate *g, gate_counts *out)
{
    memset(out, 0, sizeof *out);
    if (!g) return;
    out->server_busy = atomic_load(&g->n_busy);
    out->request_timeout = atomic_load(&g->n_timeout);
    out->bad_request = atomic_load(&g->n_bad);
}

int gate_refuse(gate *g, struct MHD_Connection *c, int status, const char *msg)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    mconn *m = ci ? ci->socket_context : NULL;
    if (!g || !m) return -1;
    pthread_mutex_lock(&g->mu);
    int done = m->killed || m->received;
    if (!done) {
        /* under mu: watch_mhd cannot answer 408 on it meanwhile */
        send_answer(g, m->fd, status, msg, 0);
        m->killed = 1;
        m->kill_at = mono_ms() + LINGER_MS;
    }
    pthread_mutex_unlock(&g->mu);
    return done ? -1 : 0;
}

int gate_request_received(gate *g, struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    mconn *m = ci ? ci->socket_context : NULL;
    if (!g || !m) return 0;
    pthread_mutex_lock(&g->mu);
    int killed = m->killed;
    m->received = 1;
    pthread_mutex_unlock(&g->mu);
    return killed ? -1 : 0;
}

/* at most half the serving threads may be held by connections waiting
 * for their next request, so kept-alive clients cannot take them all */
static int max_kept(const gate *g) { return g->o.threads / 2 > 0 ? g->o.threads / 2 : 1; }

int gate_request_start(gate *g, struct MHD_Connection *c, int *follow_up)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    mconn *m = ci ? ci->socket_context : NULL;
    *follow_up = 0;
    if (!g || !m) return 0;
    pthread_mutex_lock(&g->mu);
    *follow_up = m->requests++ > 0;
    m->idle = 0;
    if (m->kept) { /* the slot its last response took is given back, and maybe taken again */
        m->kept = 0;
        g->n_kept--;
    }
    int keep = !m->killed && g->n_kept < max_kept(g);
    if (keep) {
        m->kept = 1;
        g->n_kept++;
    }
    pthread_mutex_unlock(&g->mu);
    return keep;
}

void gate_request_done(gate *g, struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    mconn *m = ci ? ci->socket_context : NULL;
    if (!g || !m) return;
    pthread_mutex_lock(&g->mu);
    if (m->kept && !m->killed) {
        m->received = 0;
        m->idle = 1;
        m->deadline = mono_ms() + (int64_t)g->o.request_timeout_s * 1000;
    }
    pthread_mutex_unlock(&g->mu);
}
