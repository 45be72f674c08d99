/*
 * http.c: the HTTP frontend (`frontend = http`): an OpenAI-compatible server
 * on libmicrohttpd + jansson. /v1/completions and /v1/chat/completions
 * (streaming as server-sent events or one JSON answer), /v1/models,
 * /tokenize, /detokenize, /health, /metrics, /v1/memory, and inspection:
 * /v1/inspect, /v1/inspect/stream and the page /ui.
 * This file is the plugin itself: its config keys, create/destroy, run()
 * (start MHD, wait for stop, drain, name the answers the drain cuts) and
 * stop(). The rest of the folder:
 * dispatch.c (MHD callbacks, auth, routing), endpoints.c (the routes that
 * do not generate), generate.c (submitting completions and chats), parse.c
 * (request bodies), output.c (SSE and JSON answers from engine events),
 * hreq.c (a request's state and lifetime), reply.c (plain answers, errors),
 * inspect.c (the inspection routes), trace.c (pagoda_trace entries), ui.c
 * (the page, compiled in from ui/inspect.html); api/ (POST /v1/messages and
 * /v1/responses, reasoning apart: api/README.md).
 * Not for: tokenizing, templates or sampling: all of that is the engine's,
 * reached through the host table.
 *
 * Connections arrive through the gate (gate.c): it owns the listening
 * socket, holds each connection without a thread until its request has
 * arrived, answers broken framing (frame.c), slow requests (408) and
 * overload (503) itself, and hands the rest to MHD. Every response closes
 * its connection, so every request passes the gate.
 *
 * Threading: MHD runs one thread per connection (MHD_USE_THREAD_PER_CONNECTION),
 * so a handler may block: a non-streaming request waits in its handler for
 * its FINAL events, a streaming one blocks in the content reader until the
 * next event. The engine's callback never blocks: it copies the event onto
 * the request's queue under the request's mutex and signals. While waiting,
 * a thread peeks at its socket every POLL_MS so a client that went away
 * cancels its requests even when no byte is being written.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <microhttpd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "api/callmemo.h"
#include "pagoda/pagoda.h"
#include "api/store.h"
#include "dispatch.h"
#include "gate.h"
#include "hreq.h"
#include "inspect.h"


static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    http_fe *fe = cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n') line[--n] = 0;
    fe->host->log(fe->host, PAGODA_LOG_DEBUG, "microhttpd: %s", line);
}

/* ------------------------------------------------------------- plugin */

/* [under fe->mu] The answers still going out when the grace is over: their
 * clients stopped reading (a full socket), so MHD_stop_daemon cuts them;
 * each is named, so a client's truncated stream can be matched to it. */
static void log_cut(http_fe *fe)
{
    const pagoda_host *h = fe->host;
    for (hreq *hr = fe->list; hr; hr = hr->next) {
        /* hr->out is the connection thread's (it formats outside the lock) */
        pthread_mutex_lock(&hr->mu);
        int stream = hr->stream, eos = hr->eos;
        pthread_mutex_unlock(&hr->mu);
        if (stream)
            h->log(h, PAGODA_LOG_WARN, "stopping: request %s: its client stopped reading; the stream is cut "
                   "after the %d s grace (shutdown_grace_s) %s", hr->id, fe->grace_s,
                   eos ? "with its final event and [DONE] written, unread" : "before its final event was sent");
        else
            h->log(h, PAGODA_LOG_WARN, "stopping: request %s: its client stopped reading; the answer is cut "
                   "after the %d s grace (shutdown_grace_s)", hr->id, fe->grace_s);
    }
}

static int http_run(void *ctx)
{
    http_fe *fe = ctx;
    const pagoda_host *h = fe->host;
    pthread_mutex_lock(&fe->mu);
    int early = fe->stop_req;
    pthread_mutex_unlock(&fe->mu);
    if (early) return PAGODA_OK;

    struct sockaddr_in sa4;
    struct sockaddr_in6 sa6;
    struct sockaddr *sa;
    socklen_t sa_len;
    memset(&sa4, 0, sizeof sa4);
    memset(&sa6, 0, sizeof sa6);
    if (inet_pton(AF_INET, fe->bind_host, &sa4.sin_addr) == 1) {
        sa4.sin_family = AF_INET;
        sa4.sin_port = htons((uint16_t)fe->port);
        sa = (struct sockaddr *)&sa4;
        sa_len = sizeof sa4;
    } else if (inet_pton(AF_INET6, fe->bind_host, &sa6.sin6_addr) == 1) {
        sa6.sin6_family = AF_INET6;
        sa6.sin6_port = htons((uint16_t)fe->port);
        sa = (struct sockaddr *)&sa6;
        sa_len = sizeof sa6;
    } else {
        return h->error(h, PAGODA_ERR_INVALID,
                        "[frontend.http] host = %s is not an IPv4 or IPv6 address (e.g. 127.0.0.1, "
                        "0.0.0.0, ::1)", fe->bind_host);
    }
    /* Waiting connections cost a descriptor each: let the soft limit rise
     * to what max_waiting_connections and the threads need (the hard limit
     * bounds it; the gate answers 503 when descriptors run out anyway). */
    struct rlimit rl;
    rlim_t want = (rlim_t)fe->max_waiting + 2 * (rlim_t)fe->threads + 512;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want) {
        rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    int lfd = gate_listen(sa, sa_len);
    if (lfd < 0)
        return h->error(h, PAGODA_ERR_IO,
                        "cannot listen on %s:%d (%s): pick another [frontend.http] port, or 0 for any "
                        "free one", fe->bind_host, fe->port,
                        errno == EADDRINUSE ? "port taken" : strerror(errno));
    struct sockaddr_storage bound;
    socklen_t bl = sizeof bound;
    int port = fe->port;
    if (getsockname(lfd, (struct sockaddr *)&bound, &bl) == 0)
        port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                 : ((struct sockaddr_in *)&bound)->sin_port);
    fe->started = time(NULL);
    /* MHD gets no socket of its own: the gate hands it connections */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET;
    fe->d = MHD_start_daemon(flags, 0, NULL, NULL, on_access, fe,
                             MHD_OPTION_NOTIFY_COMPLETED, on_completed, fe,
                             MHD_OPTION_NOTIFY_CONNECTION, gate_notify, &fe->gate,
                             /* the gate keeps to fe->threads; this is a backstop */
                             MHD_OPTION_CONNECTION_LIMIT, (unsigned)fe->threads + 16,
                             MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)fe->timeout_s,
                             MHD_OPTION_EXTERNAL_LOGGER, mhd_log, fe,
                             MHD_OPTION_END);
    if (!fe->d) {
        close(lfd);
        return h->error(h, PAGODA_ERR_IO, "cannot start libmicrohttpd for %s:%d", fe->bind_host, port);
    }
    gate_opts go = {.threads = fe->threads, .max_waiting = fe->max_waiting,
                    .request_timeout_s = fe->request_timeout_s, .max_body = fe->max_body};
    if (gate_start(&fe->gate, lfd, fe->d, &go) != 0) {
        close(lfd);
        MHD_stop_daemon(fe->d);
        fe->d = NULL;
        return h->error(h, PAGODA_ERR_NOMEM, "cannot start the connection gate thread");
    }
    if (fe->port_file[0]) {
        char tmp[1100];
        snprintf(tmp, sizeof tmp, "%s.tmp", fe->port_file);
        FILE *f = fopen(tmp, "w");
        /* written then renamed, so a reader never sees a half-written number */
        if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) != 0 || rename(tmp, fe->port_file) != 0)
            h->log(h, PAGODA_LOG_WARN, "cannot write port_file %s: %s", fe->port_file, strerror(errno));
    }
    h->log(h, PAGODA_LOG_INFO, "listening on http://%s:%d (model %s)", fe->bind_host, port,
           fe->served_name);

    pthread_mutex_lock(&fe->mu);
    fe->running = 1;
    while (!fe->stop_req) pthread_cond_wait(&fe->cv, &fe->mu);
    pthread_mutex_unlock(&fe->mu);

    /* Drain: stop accepting, cancel everything in flight, wait for every FINAL
     * (the engine guarantees one each), give responses a grace period, close. */
    gate_stop(fe->gate);
    inspect_hub_stop(fe->hub); /* inspection streams end now */
    uint64_t *ids = NULL;
    int n = 0;
    pthread_mutex_lock(&fe->mu);
    int cap = 0;
    for (hreq *hr = fe->list; hr; hr = hr->next) cap += hr->n_choices;
    ids = malloc(sizeof *ids * (size_t)(cap + 1));
    for (hreq *hr = fe->list; hr && ids; hr = hr->next) n += hreq_take_cancels(hr, ids + n);
    pthread_mutex_unlock(&fe->mu);
    h->log(h, PAGODA_LOG_INFO, "stopping: cancelling %d request(s) in flight", n);
    for (int i = 0; i < n; i++) h->cancel(h, ids[i]);
    free(ids);
    pthread_mutex_lock(&fe->mu);
    while (fe->inflight > 0) pthread_cond_wait(&fe->cv, &fe->mu);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += fe->grace_s;
    while (fe->live > 0)
        if (pthread_cond_timedwait(&fe->cv, &fe->mu, &dl) == ETIMEDOUT) break;
    log_cut(fe);
    pthread_mutex_unlock(&fe->mu);
    MHD_stop_daemon(fe->d);
    fe->d = NULL;
    gate_free(fe->gate);
    fe->gate = NULL;
    h->log(h, PAGODA_LOG_INFO, "stopped");
    return PAGODA_OK;
}

static void http_stop(void *ctx)
{
    http_fe *fe = ctx;
    pthread_mutex_lock(&fe->mu);
    fe->stop_req = 1;
    pthread_cond_broadcast(&fe->cv);
    pthread_mutex_unlock(&fe->mu);
}

static int http_create(const pagoda_host *h, void **ctx, char *err, size_t err_len)
{
    http_fe *fe = calloc(1, sizeof *fe);
    if (!fe) {
        snprintf(err, err_len, "out of memory");
        return PAGODA_ERR_NOMEM;
    }
    fe->host = h;
    snprintf(fe->bind_host, sizeof fe->bind_host, "%s", h->config_str(h, "host", "127.0.0.1"));
    fe->port = (int)h->config_int(h, "port", 8080);
    snprintf(fe->api_key, sizeof fe->api_key, "%s", h->config_str(h, "api_key", ""));
    fe->max_body = h->config_int(h, "max_body_bytes", 8 << 20);
    fe->threads = (int)h->config_int(h, "threads", 256);
    fe->timeout_s = (int)h->config_int(h, "timeout_s", 600);
    fe->request_timeout_s = (int)h->config_int(h, "request_timeout_s", 30);
    fe->max_waiting = (int)h->config_int(h, "max_waiting_connections", 4096);
    snprintf(fe->port_file, sizeof fe->port_file, "%s", h->config_str(h, "port_file", ""));
    fe->strict_model = h->config_bool(h, "strict_model", false);
    callmemo_set_enabled(h->config_bool(h, "call_memo", true));
    fe->grace_s = (int)h->config_int(h, "shutdown_grace_s", 10);
    const char *name = h->config_str(h, "served_model_name", "");
    if (name && name[0]) {
        snprintf(fe->served_name, sizeof fe->served_name, "%s", name);
    } else {
        pagoda_model_info mi = {.struct_size = sizeof mi};
        if (h->model_info(h, &mi) == PAGODA_OK && mi.name[0])
            snprintf(fe->served_name, sizeof fe->served_name, "%s", mi.name);
        else
            snprintf(fe->served_name, sizeof fe->served_name, "pagoda");
    }
    if (fe->port < 0 || fe->port > 65535 || fe->max_body < 1 || fe->threads < 1 || fe->timeout_s < 0 ||
        fe->request_timeout_s < 1 || fe->max_waiting < 1 || fe->grace_s < 0) {
        snprintf(err, err_len, "[frontend.http] port must be 0..65535, max_body_bytes >= 1, threads >= 1, "
                 "timeout_s >= 0, request_timeout_s >= 1, max_waiting_connections >= 1, "
                 "shutdown_grace_s >= 0");
        free(fe);
        return PAGODA_ERR_INVALID;
    }
    fe->inspect_interval_ms = (int)h->config_int(h, "inspect_interval_ms", 200);
    if (!(fe->hub = inspect_hub_new(fe))) {
        snprintf(err, err_len, "out of memory");
        free(fe);
        return PAGODA_ERR_NOMEM;
    }
    pthread_mutex_init(&fe->mu, NULL);
    pthread_cond_init(&fe->cv, NULL);
    *ctx = fe;
    return PAGODA_OK;
}

static void http_destroy(void *ctx)
{
    http_fe *fe = ctx;
    if (!fe) return;
    if (fe->gate) gate_stop(fe->gate);
    if (fe->d) MHD_stop_daemon(fe->d);
    gate_free(fe->gate);
    inspect_hub_free(fe->hub);
    store_free(fe->store);
    pthread_mutex_destroy(&fe->mu);
    pthread_cond_destroy(&fe->cv);
    free(fe);
}

static const pagoda_config_key http_keys[] = {
    {"host", PAGODA_KEY_STRING, "127.0.0.1", 0, 0, "address to listen on (IPv4 or IPv6 literal)"},
    {"port", PAGODA_KEY_INT, "8080", 0, 65535, "TCP port; 0 picks a free one (see port_file)"},
    {"api_key", PAGODA_KEY_STRING, "", 0, 0, "when set, every route but /health and /ui needs 'Authorization: Bearer <key>'"},
    {"max_body_bytes", PAGODA_KEY_SIZE, "8M", 1024, 1073741824.0, "largest request body; more is a 413"},
    {"threads", PAGODA_KEY_INT, "256", 1, 65536, "most requests served at once (one thread each); past it: 503 with Retry-After"},
    {"timeout_s", PAGODA_KEY_INT, "600", 0, 86400, "idle timeout of a request being served, in seconds (0: none)"},
    {"request_timeout_s", PAGODA_KEY_INT, "30", 1, 3600, "most seconds from connecting to the whole request (headers and body) received; past it: 408"},
    {"max_waiting_connections", PAGODA_KEY_INT, "4096", 1, 1048576, "connections held (without a thread) while their request arrives; past it: 503"},
    {"port_file", PAGODA_KEY_STRING, "", 0, 0, "write the bound port to this file once listening"},
    {"served_model_name", PAGODA_KEY_STRING, "", 0, 0, "model id in /v1/models and responses (default: the model's name)"},
    {"inspect_interval_ms", PAGODA_KEY_INT, "200", 10, 60000, "GET /v1/inspect/stream sends at most one snapshot this often"},
    {"shutdown_grace_s", PAGODA_KEY_INT, "10", 0, 3600, "at stop, after every request's final event, seconds given to answers still being sent; then they are cut (and logged)"},
    {"call_memo", PAGODA_KEY_BOOL, "true", 0, 0, "write a recent tool call back into the history as the model wrote it, so the next turn reuses its KV (off: as the prompt renders it)"},
    {"strict_model", PAGODA_KEY_BOOL, "false", 0, 0, "a request whose 'model' is not served_model_name gets 404 model_not_found (default: served anyway, logged once per name)"},
    {NULL, 0, NULL, 0, 0, NULL},
};

static const pagoda_frontend_ops http_ops = {
    .struct_size = sizeof(pagoda_frontend_ops),
    .run = http_run,
    .stop = http_stop,
};

static const pagoda_plugin_desc http_desc = {
    PAGODA_DESC_HEADER(PAGODA_KIND_FRONTEND),
    .name = "http",
    .version = PAGODA_VERSION_STRING,
    .description = "OpenAI-compatible HTTP server (completions, chat, SSE streaming, metrics)",
    .config_keys = http_keys,
    .probe = NULL,
    .create = http_create,
    .destroy = http_destroy,
    .ops = &http_ops,
};

PAGODA_PLUGIN(http_desc)
