/*
 * http_load.c: a bounded load-and-fault test of the real server over
 * loopback (issue 15). Two identical rounds of ROUND_REQUESTS requests, 32
 * at a time from 32 client threads over raw sockets (HTTP/1.1, chunked
 * answers de-chunked here): plain and streaming completions, plain and
 * streaming chats, malformed bodies, and 10% of them dropped abruptly (a
 * reset right after sending, or after the first bytes of the answer).
 * Asserts: every well-formed request kept to the end gets exactly one
 * complete answer (200 with a finish reason stop or length and its usage;
 * a stream ends with one finish reason and one [DONE]), every malformed
 * one a 400 error object; after each round the engine is idle (running,
 * waiting and KV blocks in use back to 0, on /metrics); and the server's
 * RSS after round 2 is within RSS_MARGIN of its RSS after round 1 (not
 * under a sanitizer, whose allocator keeps what it frees).
 * Not for: throughput or latency (nothing asserts a time; the bounds on
 * waits only stop a hang from blocking CI).
 *
 * Environment (set by ctest): PAGODA_BIN, PAGODA_SOURCE_DIR. The server
 * is started with PR_SET_PDEATHSIG and killed on any exit.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "integ_util.h"

#define ROUND_REQUESTS 320
#define CONCURRENCY 32
#define RSS_MARGIN_PCT 10           /* round 2's RSS at most 10% over round 1's ... */
#define RSS_MARGIN_MIN (2 << 20)    /* ... or 2 MiB, whichever is larger (measured: +0.2-0.4 MiB) */

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#else
#define UNDER_SANITIZER 0
#endif

static server g_srv;

/* ------------------------------------------------------------ one exchange */

static int tcp_connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_srv.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Closes with a reset (SO_LINGER 0): the abrupt disconnect. */
static void reset_close(int fd)
{
    struct linger l = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
}

/* Sends method path body; reads the answer to EOF (it asks the server to
 * close the connection after its answer) into out. drop: 1 reset after sending,
 * 2 reset after the first bytes. Returns 0, or -1 on a connection error or
 * a 60 s stall. */
static int exchange(const char *method, const char *path, const char *body, int drop, buf *out)
{
    int fd = tcp_connect();
    if (fd < 0) return -1;
    char head[512];
    size_t bl = body ? strlen(body) : 0;
    int hl = snprintf(head, sizeof head,
                      "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\n\r\n", method, path, bl);
    if (send(fd, head, (size_t)hl, MSG_NOSIGNAL) != hl ||
        (bl && send(fd, body, bl, MSG_NOSIGNAL) != (ssize_t)bl)) {
        close(fd);
        return -1;
    }
    if (drop == 1) {
        reset_close(fd);
        return 0;
    }
    int64_t end = now_ms() + 60000;
    char b[16384];
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int left = (int)(end - now_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0) {
            close(fd);
            return -1;
        }
        ssize_t r = recv(fd, b, sizeof b, 0);
        if (r < 0) {
            close(fd);
            return -1;
        }
        if (r == 0) break;
        buf_put(out, b, (size_t)r);
        if (drop == 2) {
            reset_close(fd);
            return 0;
        }
    }
    close(fd);
    return 0;
}

/* Splits a raw answer: status, whether chunked, the body (de-chunked). */
static int parse_answer(const buf *raw, int *status, buf *body, int *n_status_lines)
{
    *status = 0;
    *n_status_lines = 0;
    if (!raw->p) return -1;
    for (const char *p = raw->p; (p = strstr(p, "HTTP/1.1 ")); p += 9) (*n_status_lines)++;
    if (sscanf(raw->p, "HTTP/1.1 %d", status) != 1) return -1;
    const char *hend = strstr(raw->p, "\r\n\r\n");
    if (!hend) return -1;
    bool chunked = false;
    for (const char *h = raw->p; h < hend; h = strstr(h, "\r\n") + 2)
        if (!strncasecmp(h, "Transfer-Encoding: chunked", 26)) chunked = true;
    const char *b = hend + 4, *e = raw->p + raw->len;
    if (!chunked) {
        buf_put(body, b, (size_t)(e - b));
        return 0;
    }
    for (;;) {
        char *nx;
        unsigned long n = strtoul(b, &nx, 16);
        const char *crlf = strstr(b, "\r\n");
        if (!crlf || nx == b) return -1;
        b = crlf + 2;
        if (n == 0) return 0;
        if ((size_t)(e - b) < n + 2) return -1;
        buf_put(body, b, n);
        b += n + 2;
    }
}

/* ------------------------------------------------------------ the workload */

enum { K_PLAIN, K_STREAM, K_CHAT, K_CHAT_STREAM, K_BAD, K_N };
static const char *const kind_name[] = {"plain", "stream", "chat", "chat-stream", "malformed"};

typedef struct job {
    int kind;
    int drop;             /* 0 none, 1 after sending, 2 after the first bytes */
    int max_tokens;
    char body[512];
    const char *path;
} job;

static job g_jobs[ROUND_REQUESTS];
static atomic_int g_next;
static atomic_int g_ok[K_N], g_dropped, g_conn_err;
static pthread_mutex_t g_print = PTHREAD_MUTEX_INITIALIZER;

#define FAILF(...)                                                            \
    do {                                                                      \
        atomic_fetch_add(&g_fail, 1);                                         \
        pthread_mutex_lock(&g_print);                                         \
        fprintf(stderr, "FAIL: " __VA_ARGS__);                                \
        fputc('\n', stderr);                                                  \
        pthread_mutex_unlock(&g_print);                                       \
    } while (0)

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void make_jobs(void)
{
    static const char *const words[] = {"Once", "upon", "a", "time", "there", "was", "a", "little",
                                        "girl", "named", "Lily", "who", "liked", "to", "play"};
    static const char *const bad[] = {
        "{\"prompt\": \"unterminated",
        "{\"prompt\": 5, \"max_tokens\": 4}",
        "{\"prompt\": \"x\", \"max_tokens\": \"ten\"}",
        "{\"prompt\": \"x\", \"temperature\": -3}",
        "[1, 2, 3]",
        "{\"messages\": \"not a list\"}",
        "",
    };
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < ROUND_REQUESTS; i++) {
        job *j = &g_jobs[i];
        unsigned r = (unsigned)(rng(&s) % 100);
        j->kind = r < 30 ? K_PLAIN : r < 55 ? K_STREAM : r < 70 ? K_CHAT : r < 85 ? K_CHAT_STREAM : K_BAD;
        j->drop = rng(&s) % 10 == 0 ? 1 + (int)(rng(&s) % 2) : 0;
        j->max_tokens = 4 + (int)(rng(&s) % 29);
        char prompt[200] = "";
        int nw = 2 + (int)(rng(&s) % 10);
        for (int w = 0; w < nw; w++) {
            size_t l = strlen(prompt);
            snprintf(prompt + l, sizeof prompt - l, "%s%s", w ? " " : "", words[rng(&s) % 15]);
        }
        bool stream = j->kind == K_STREAM || j->kind == K_CHAT_STREAM;
        if (j->kind == K_PLAIN || j->kind == K_STREAM) {
            j->path = "/v1/completions";
            snprintf(j->body, sizeof j->body,
                     "{\"prompt\": \"%s\", \"max_tokens\": %d, \"stream\": %s%s}", prompt,
                     j->max_tokens, stream ? "true" : "false",
                     stream ? ", \"stream_options\": {\"include_usage\": true}" : "");
        } else if (j->kind == K_CHAT || j->kind == K_CHAT_STREAM) {
            j->path = "/v1/chat/completions";
            snprintf(j->body, sizeof j->body,
                     "{\"messages\": [{\"role\": \"user\", \"content\": \"%s\"}], \"max_tokens\": %d, "
                     "\"stream\": %s}", prompt, j->max_tokens, stream ? "true" : "false");
        } else {
            j->path = i % 2 ? "/v1/completions" : "/v1/chat/completions";
            snprintf(j->body, sizeof j->body, "%s", bad[rng(&s) % (sizeof bad / sizeof *bad)]);
        }
    }
}

static const char *finish_of(json_t *choice)
{
    json_t *f = json_object_get(choice, "finish_reason");
    return json_is_string(f) ? json_string_value(f) : NULL;
}

static bool finish_ok(const char *f) { return f && (!strcmp(f, "stop") || !strcmp(f, "length")); }

/* Checks one answer against what its request was. */
static void check(int idx, const job *j, const buf *raw)
{
    g_checks++; /* one per answer kept to the end (failures: FAILF) */
    int status, n_lines;
    buf body = {0};
    if (parse_answer(raw, &status, &body, &n_lines) < 0) {
        FAILF("#%d %s: unreadable answer: %.200s", idx, kind_name[j->kind], raw->p ? raw->p : "(none)");
        free(body.p);
        return;
    }
    if (n_lines != 1) FAILF("#%d %s: %d status lines", idx, kind_name[j->kind], n_lines);
    json_error_t je;
    if (j->kind == K_BAD) {
        json_t *o = json_loads(body.p ? body.p : "", 0, &je);
        if (status != 400 || !json_is_object(json_object_get(o, "error")))
            FAILF("#%d malformed %s: status %d, %.200s", idx, j->body, status, body.p ? body.p : "");
        else
            atomic_fetch_add(&g_ok[j->kind], 1);
        json_decref(o);
        free(body.p);
        return;
    }
    if (status != 200) {
        FAILF("#%d %s: status %d: %.300s", idx, kind_name[j->kind], status, body.p ? body.p : "");
        free(body.p);
        return;
    }
    bool chat = j->kind == K_CHAT || j->kind == K_CHAT_STREAM;
    if (j->kind == K_PLAIN || j->kind == K_CHAT) {
        json_t *o = json_loads(body.p ? body.p : "", 0, &je);
        json_t *c0 = json_array_get(json_object_get(o, "choices"), 0);
        json_t *ct = json_object_get(json_object_get(o, "usage"), "completion_tokens");
        json_t *text = chat ? json_object_get(json_object_get(c0, "message"), "content")
                            : json_object_get(c0, "text");
        if (!finish_ok(finish_of(c0)) || !json_is_string(text) || !json_is_integer(ct) ||
            json_integer_value(ct) > j->max_tokens)
            FAILF("#%d %s: incomplete answer: %.300s", idx, kind_name[j->kind], body.p ? body.p : "");
        else
            atomic_fetch_add(&g_ok[j->kind], 1);
        json_decref(o);
        free(body.p);
        return;
    }
    /* a stream: data events, one finish reason, [DONE] once and last */
    int finals = 0, dones = 0, bad = 0, events = 0;
    bool usage = false;
    for (char *p = body.p; p && (p = strstr(p, "data: ")); ) {
        p += 6;
        char *e = strstr(p, "\n\n");
        if (!e) { bad++; break; }
        *e = 0;
        events++;
        if (!strcmp(p, "[DONE]")) {
            dones++;
            if (e[2]) bad++; /* something after [DONE] */
        } else {
            json_t *o = json_loads(p, 0, &je);
            if (!o) bad++;
            json_t *c0 = json_array_get(json_object_get(o, "choices"), 0);
            const char *f = finish_of(c0);
            if (f) finals += finish_ok(f) ? 1 : 100;
            if (json_is_object(json_object_get(o, "usage"))) usage = true;
            json_decref(o);
        }
        p = e + 2;
    }
    if (finals != 1 || dones != 1 || bad || (!chat && !usage))
        FAILF("#%d %s: stream of %d events: %d finish reasons, %d [DONE], %d bad, usage %d", idx,
              kind_name[j->kind], events, finals, dones, bad, usage);
    else
        atomic_fetch_add(&g_ok[j->kind], 1);
    free(body.p);
}

static void *client(void *arg)
{
    (void)arg;
    for (;;) {
        int i = atomic_fetch_add(&g_next, 1);
        if (i >= ROUND_REQUESTS) return NULL;
        const job *j = &g_jobs[i];
        buf raw = {0};
        int r = exchange("POST", j->path, j->body, j->drop, &raw);
        if (j->drop) {
            atomic_fetch_add(&g_dropped, 1);
        } else if (r < 0) {
            atomic_fetch_add(&g_conn_err, 1);
            FAILF("#%d %s: connection error or stall (%zu bytes read)", i, kind_name[j->kind], raw.len);
        } else {
            check(i, j, &raw);
        }
        free(raw.p);
    }
}

/* ------------------------------------------------------------ the server's state */

/* Waits (bounded: 30 s) for no request running or waiting and no KV block used. */
static bool wait_idle(void)
{
    for (int i = 0; i < 300; i++) {
        buf raw = {0}, body = {0};
        int st, nl;
        bool idle = false;
        if (exchange("GET", "/metrics", NULL, 0, &raw) == 0 && parse_answer(&raw, &st, &body, &nl) == 0 &&
            st == 200)
            idle = metric(body.p, "pagoda_num_requests_running") == 0 &&
                   metric(body.p, "pagoda_num_requests_waiting") == 0 &&
                   metric(body.p, "pagoda_kv_cache_blocks_used") == 0;
        free(raw.p);
        free(body.p);
        if (idle) return true;
        msleep(100);
    }
    return false;
}

static long rss_bytes(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = strtol(line + 6, NULL, 10);
    if (f) fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

static int run_round(int round)
{
    atomic_store(&g_next, 0);
    atomic_store(&g_dropped, 0);
    for (int k = 0; k < K_N; k++) atomic_store(&g_ok[k], 0);
    int fail0 = atomic_load(&g_fail);
    int64_t t0 = now_ms();
    pthread_t th[CONCURRENCY];
    for (int i = 0; i < CONCURRENCY; i++) pthread_create(&th[i], NULL, client, NULL);
    for (int i = 0; i < CONCURRENCY; i++) pthread_join(th[i], NULL);
    printf("round %d: %d requests at concurrency %d in %.1f s: ok plain %d, stream %d, chat %d, "
           "chat-stream %d, malformed %d; dropped %d\n",
           round, ROUND_REQUESTS, CONCURRENCY, (double)(now_ms() - t0) / 1000, atomic_load(&g_ok[K_PLAIN]),
           atomic_load(&g_ok[K_STREAM]), atomic_load(&g_ok[K_CHAT]), atomic_load(&g_ok[K_CHAT_STREAM]),
           atomic_load(&g_ok[K_BAD]), atomic_load(&g_dropped));
    if (!wait_idle()) FAILF("round %d: the engine is not idle 30 s after the round", round);
    return atomic_load(&g_fail) - fail0;
}

int main(void)
{
    /* a watchdog, not a timing assertion */
    if (integ_init("load", UNDER_SANITIZER ? 1500 : 600)) return 2;
    /* a pool and queue that take a round's 32 at once */
    static const char *const sets[] = {"engine.max_queue=256", "engine.kv_cache_tokens=8192", NULL};
    if (server_start(&g_srv, "server", sets) < 0) {
        FAILF("the server did not start");
        return integ_finish();
    }
    make_jobs();
    int expected_ok[K_N] = {0};
    for (int i = 0; i < ROUND_REQUESTS; i++)
        if (!g_jobs[i].drop) expected_ok[g_jobs[i].kind]++;

    run_round(1);
    long rss1 = rss_bytes(g_srv.pid);
    run_round(2);
    long rss2 = rss_bytes(g_srv.pid);
    for (int k = 0; k < K_N; k++)
        if (atomic_load(&g_ok[k]) != expected_ok[k])
            FAILF("round 2: %d of %d %s requests answered completely", atomic_load(&g_ok[k]),
                  expected_ok[k], kind_name[k]);
    long margin = rss1 / 100 * RSS_MARGIN_PCT;
    if (margin < RSS_MARGIN_MIN) margin = RSS_MARGIN_MIN;
    printf("server RSS: %.1f MiB after round 1, %.1f MiB after round 2 (margin %.1f MiB%s)\n",
           rss1 / 1048576.0, rss2 / 1048576.0, margin / 1048576.0,
           UNDER_SANITIZER ? ", not checked under a sanitizer" : "");
    if (!UNDER_SANITIZER && (rss1 < 0 || rss2 < 0 || rss2 > rss1 + margin))
        FAILF("RSS grew from %ld to %ld bytes over an identical round", rss1, rss2);

    /* still serving, and it stops cleanly */
    buf raw = {0}, body = {0};
    int st = 0, nl;
    if (exchange("GET", "/health", NULL, 0, &raw) < 0 || parse_answer(&raw, &st, &body, &nl) < 0 || st != 200)
        FAILF("health after the rounds: %d", st);
    free(raw.p);
    free(body.p);
    int wst = server_stop(&g_srv, SIGTERM);
    if (wst == -1 || !WIFEXITED(wst) || WEXITSTATUS(wst) != 0)
        FAILF("the server did not exit 0 after SIGTERM (status %d)", wst);
    if (atomic_load(&g_fail)) print_log_tail(&g_srv);
    return integ_finish();
}
