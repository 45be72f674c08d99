/*
 * inspect.c: GET /v1/inspect and its stream, GET /v1/inspect/stream (see
 * inspect.h). The stream's cost does not grow with its viewers: one hub
 * thread, alive only while someone listens, asks the host for one
 * snapshot per interval and publishes it as one reference-counted SSE
 * frame; each listener's MHD thread copies the newest frame out when it is
 * done with the one before (a slow client skips frames, it never queues
 * them), sends a comment line when nothing changed, and is dropped by MHD
 * when its client takes no byte for INSPECT_STALL_S. A snapshot whose
 * engine version has not moved is not published again, so an idle server
 * streams nothing but keepalives.
 * Not for: the snapshot (core/inspect.c), routing and auth (dispatch.c).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inspect.h"
#include "reply.h"

#define STREAM_BLOCK (64 * 1024)   /* bytes MHD asks the reader for at most */

/* One published frame: "data: {json}\n\n". */
typedef struct snap {
    int refs;                      /* under hub->mu */
    char *text;
    size_t len;
} snap;

struct inspect_hub {
    http_fe *fe;
    pthread_mutex_t mu;
    pthread_cond_t cv;             /* a frame was published, stop, a listener came or went */
    pthread_t th;
    int th_live;                   /* started (joined at stop) */
    int stop;
    int listeners;
    int64_t dropped;               /* listeners MHD dropped for not reading */
    int64_t taken;                 /* snapshots the hub asked for */
    snap *latest;
    uint64_t gen;                  /* frames published */
    uint64_t version;              /* the engine version of latest */
};

typedef struct listener {
    inspect_hub *hub;
    snap *cur;                     /* the frame being sent, with a reference */
    size_t off;
    uint64_t gen;                  /* the last frame taken */
    int64_t last_out_ms;           /* when bytes were last handed to MHD */
    int sock;
} listener;

static void snap_release_locked(snap *s)
{
    if (s && --s->refs == 0) {
        free(s->text);
        free(s);
    }
}

/* The engine version at the start of the host's JSON ({"version":N,...}). */
static uint64_t version_of(const char *j)
{
    const char *p = strstr(j, "\"version\":");
    return p ? strtoull(p + 10, NULL, 10) : 0;
}

/* The host's JSON with the stream's own numbers added at its end; the
 * prefix and suffix wrap it (the SSE framing); malloc'd, or NULL. */
static char *with_stream(inspect_hub *hub, const char *j, const char *prefix, const char *suffix,
                         size_t *len)
{
    size_t n = strlen(j);
    if (n < 2 || j[n - 1] != '}') return NULL;
    char extra[256];
    pthread_mutex_lock(&hub->mu);
    int k = snprintf(extra, sizeof extra,
                     ",\"stream\":{\"listeners\":%d,\"dropped\":%" PRId64 ",\"interval_ms\":%d,"
                     "\"snapshots\":%" PRId64 "}}",
                     hub->listeners, hub->dropped, hub->fe->inspect_interval_ms, hub->taken);
    pthread_mutex_unlock(&hub->mu);
    size_t lp = strlen(prefix), ls = strlen(suffix);
    char *out = malloc(lp + n - 1 + (size_t)k + ls + 1);
    if (!out) return NULL;
    memcpy(out, prefix, lp);
    memcpy(out + lp, j, n - 1);
    memcpy(out + lp + n - 1, extra, (size_t)k);
    memcpy(out + lp + n - 1 + (size_t)k, suffix, ls + 1);
    *len = lp + n - 1 + (size_t)k + ls;
    return out;
}

/* ------------------------------------------------------------- the hub */

static void *hub_main(void *arg)
{
    inspect_hub *hub = arg;
    const pagoda_host *h = hub->fe->host;
    int interval = hub->fe->inspect_interval_ms;
    pthread_mutex_lock(&hub->mu);
    while (!hub->stop) {
        /* nobody listens: no snapshot is taken until someone does */
        if (hub->listeners == 0) {
            pthread_cond_wait(&hub->cv, &hub->mu);
            continue;
        }
        hub->taken++;
        pthread_mutex_unlock(&hub->mu);
        int64_t t0 = now_ms();
        char *j = h->inspect_json ? h->inspect_json(h) : NULL; /* waits at most one engine step */
        uint64_t v = j ? version_of(j) : 0;
        pthread_mutex_lock(&hub->mu);
        int fresh = j && (!hub->latest || v != hub->version);
        pthread_mutex_unlock(&hub->mu);
        snap *s = NULL;
        if (fresh && (s = calloc(1, sizeof *s)) &&
            !(s->text = with_stream(hub, j, "data: ", "\n\n", &s->len))) {
            free(s);
            s = NULL;
        }
        if (j) h->free(h, j);
        pthread_mutex_lock(&hub->mu);
        if (s) {
            s->refs = 1;
            snap_release_locked(hub->latest);
            hub->latest = s;
            hub->version = v;
            hub->gen++;
            pthread_cond_broadcast(&hub->cv);
        }
        /* at most one snapshot per interval, however many listen */
        while (!hub->stop && hub->listeners > 0 && now_ms() < t0 + interval) {
            struct timespec dl;
            deadline_in(&dl, (int)(t0 + interval - now_ms()));
            pthread_cond_timedwait(&hub->cv, &hub->mu, &dl);
        }
    }
    pthread_mutex_unlock(&hub->mu);
    return NULL;
}

inspect_hub *inspect_hub_new(http_fe *fe)
{
    inspect_hub *hub = calloc(1, sizeof *hub);
    if (!hub) return NULL;
    hub->fe = fe;
    pthread_mutex_init(&hub->mu, NULL);
    pthread_cond_init(&hub->cv, NULL);
    return hub;
}

void inspect_hub_stop(inspect_hub *hub)
{
    if (!hub) return;
    pthread_mutex_lock(&hub->mu);
    hub->stop = 1;
    pthread_cond_broadcast(&hub->cv);
    int join = hub->th_live;
    hub->th_live = 0;
    pthread_mutex_unlock(&hub->mu);
    if (join) pthread_join(hub->th, NULL);
}

void inspect_hub_free(inspect_hub *hub)
{
    if (!hub) return;
    inspect_hub_stop(hub);
    snap_release_locked(hub->latest);
    pthread_mutex_destroy(&hub->mu);
    pthread_cond_destroy(&hub->cv);
    free(hub);
}

/* ------------------------------------------------------------ listeners */

/* [connection thread] MHD pulls the stream from here: the rest of the
 * frame in hand, else the next frame, a keepalive, or the end. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    listener *l = cls;
    inspect_hub *hub = l->hub;
    (void)pos;
    if (!l->cur) {
        int64_t next_check = now_ms() + POLL_MS;
        pthread_mutex_lock(&hub->mu);
        for (;;) {
            if (hub->stop) {
                pthread_mutex_unlock(&hub->mu);
                return MHD_CONTENT_READER_END_OF_STREAM;
            }
            if (hub->latest && hub->gen != l->gen) {
                l->cur = hub->latest;
                l->cur->refs++;
                l->gen = hub->gen;
                l->off = 0;
                break;
            }
            int64_t t = now_ms();
            if (t - l->last_out_ms >= INSPECT_KEEPALIVE_MS) {
                pthread_mutex_unlock(&hub->mu);
                static const char ka[] = ": keepalive\n\n";
                size_t n = sizeof ka - 1 < max ? sizeof ka - 1 : max;
                memcpy(buf, ka, n);
                l->last_out_ms = t;
                return (ssize_t)n;
            }
            struct timespec dl;
            deadline_in(&dl, POLL_MS);
            pthread_cond_timedwait(&hub->cv, &hub->mu, &dl);
            if (check_due(&next_check)) {
                pthread_mutex_unlock(&hub->mu);
                if (peer_gone(l->sock)) return MHD_CONTENT_READER_END_WITH_ERROR;
                pthread_mutex_lock(&hub->mu);
            }
        }
        pthread_mutex_unlock(&hub->mu);
    }
    size_t n = l->cur->len - l->off;
    if (n > max) n = max;
    memcpy(buf, l->cur->text + l->off, n);
    l->off += n;
    if (l->off == l->cur->len) {
        pthread_mutex_lock(&hub->mu);
        snap_release_locked(l->cur);
        pthread_mutex_unlock(&hub->mu);
        l->cur = NULL;
    }
    l->last_out_ms = now_ms();
    return (ssize_t)n;
}

/* MHD is done with the stream: the client left, the server stops, or MHD
 * dropped a client that read nothing for INSPECT_STALL_S (then this
 * reader was last asked for bytes about that long ago). */
static void stream_free(void *cls)
{
    listener *l = cls;
    inspect_hub *hub = l->hub;
    pthread_mutex_lock(&hub->mu);
    snap_release_locked(l->cur);
    hub->listeners--;
    if (!hub->stop && now_ms() - l->last_out_ms >= INSPECT_STALL_S * 1000 - 250) hub->dropped++;
    pthread_cond_broadcast(&hub->cv);
    pthread_mutex_unlock(&hub->mu);
    free(l);
}

/* ------------------------------------------------------------- routes */

enum MHD_Result route_inspect(http_fe *fe, struct MHD_Connection *conn)
{
    const pagoda_host *h = fe->host;
    char *j = h->inspect_json ? h->inspect_json(h) : NULL;
    if (!j)
        return send_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "server_error", NULL, NULL,
                          "the engine is not ready (the weights are loading)");
    size_t len = 0;
    char *body = with_stream(fe->hub, j, "", "", &len);
    h->free(h, j);
    if (!body) return MHD_NO;
    return send_body(conn, MHD_HTTP_OK, "application/json", body, len);
}

enum MHD_Result route_inspect_stream(http_fe *fe, struct MHD_Connection *conn)
{
    inspect_hub *hub = fe->hub;
    listener *l = calloc(1, sizeof *l);
    if (!l) return MHD_NO;
    l->hub = hub;
    l->last_out_ms = now_ms();
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    l->sock = ci ? ci->connect_fd : -1;

    pthread_mutex_lock(&hub->mu);
    int err = hub->stop;
    if (!err) {
        /* the first listener after a pause waits for a fresh snapshot
         * rather than the one the last listener saw */
        if (hub->listeners == 0) {
            snap_release_locked(hub->latest);
            hub->latest = NULL;
        }
        hub->listeners++;
        /* the hub's thread starts with the first listener ever and sleeps
         * whenever nobody listens */
        if (!hub->th_live) {
            if (pthread_create(&hub->th, NULL, hub_main, hub)) {
                hub->listeners--;
                err = 1;
            } else {
                hub->th_live = 1;
            }
        }
        pthread_cond_broadcast(&hub->cv);
    }
    pthread_mutex_unlock(&hub->mu);
    if (err) {
        free(l);
        return send_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "server_error", NULL, NULL,
                          "the inspection stream is not available (shutting down)");
    }
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK,
                                                               stream_reader, l, stream_free);
    if (!r) {
        stream_free(l);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    /* a client that takes no byte for this long is dropped by MHD */
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)INSPECT_STALL_S);
    enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}
