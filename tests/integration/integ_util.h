/*
 * integ_util.h: what the C integration tests (http_server.c,
 * http_structured.c, http_load.c) share: the CHECK counter, the run's
 * set-up (environment, watchdog, scratch folder) and its end, starting and
 * stopping the real `pagoda` binary on a free loopback port (killed on any
 * exit or fatal signal, so a failing test never leaves one behind), growing
 * buffers, one libcurl request with its answer parsed as JSON, dotted JSON
 * paths and Prometheus samples.
 * Not for: the fake-engine unit tests (tests/unit/http_testutil.h), or
 * anything one test alone needs (raw sockets, curl_multi streams).
 * Linked into every C program under tests/integration/ (tests/CMakeLists.txt).
 */
#ifndef PAGODA_INTEG_UTIL_H
#define PAGODA_INTEG_UTIL_H

#include <curl/curl.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

extern const char *g_bin, *g_src; /* PAGODA_BIN, PAGODA_SOURCE_DIR */
extern char g_tmp[256];           /* this run's scratch folder: server logs, port files */
/* atomic: http_load's client threads count failures too */
extern atomic_int g_fail, g_checks;

#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        g_checks++;                                                               \
        if (!(cond)) {                                                            \
            g_fail++;                                                             \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                         \
            fputc('\n', stderr);                                                  \
        }                                                                         \
    } while (0)

/* Reads PAGODA_BIN and PAGODA_SOURCE_DIR, ignores SIGPIPE, kills every
 * server on exit and on a fatal signal, arms the watchdog (alarm: a bound
 * on a hang, not a timing assertion), makes g_tmp (/tmp/pagoda-NAME-XXXXXX)
 * and initialises libcurl. Returns 0, or 2 when the run cannot start. */
int integ_init(const char *name, unsigned watchdog_s);

/* Prints the counts; removes g_tmp when nothing failed, else says where the
 * logs are. Returns the exit status: 0, or 1 when a check failed. */
int integ_finish(void);

void msleep(int ms);
int64_t now_ms(void); /* monotonic */

typedef struct buf {
    char *p; /* NUL-terminated once anything was put */
    size_t len, cap;
} buf;

void buf_put(buf *b, const char *s, size_t n);

/* ------------------------------------------------------------ servers */

typedef struct server {
    pid_t pid;
    int port;
    char name[32];
    char log[512];
} server;

/* Starts pagoda on configs/cpu-ci.ini with one CPU thread (the CI machine
 * has 2 cores shared with other tests), port 0 and a port file, plus the
 * given --set overrides (NULL-terminated, may be NULL). Its output goes to
 * g_tmp/NAME.log. Returns 0 once the port file is written, -1 (log tail
 * printed) when it exits first or writes none within 60 s. */
int server_start(server *s, const char *name, const char *const *sets);

/* Sends sig (0: none, it was signalled already) and waits (bounded: 30 s,
 * then SIGKILL) for the exit. Returns the wait status, or -1. */
int server_stop(server *s, int sig);

void print_log_tail(const server *s);

/* ------------------------------------------------------------ HTTP */

typedef struct resp {
    long status; /* 0 when no answer came */
    buf body;
    buf hdrs;
    json_t *json; /* the body parsed, when it is JSON */
    double secs;  /* the exchange's wall time */
} resp;

/* An easy handle for one request to s: Content-Type JSON, no 100-continue,
 * "Authorization: Bearer key" when key is set, body (body_len < 0:
 * strlen) as given; a 120 s bound. *hl receives the header list to free. */
CURL *easy_for(const server *s, const char *method, const char *path, const char *body, long body_len,
               const char *key, struct curl_slist **hl);

/* One request, answer in r (resp_free it). Returns 0, or -1 on a transport
 * error (said on stderr). */
int http(const server *s, const char *method, const char *path, const char *body, long body_len,
         const char *key, resp *r);
void resp_free(resp *r);

/* The value at a dotted path, a number selecting an array element
 * ("choices.0.text"); NULL when absent. */
json_t *jget(json_t *j, const char *path);
const char *jget_str(json_t *j, const char *path); /* NULL unless a string */
long long jget_int(json_t *j, const char *path);   /* -1 unless an integer */

/* The sample `name` (labels included) in Prometheus text; NAN if absent. */
double metric(const char *text, const char *name);

#endif /* PAGODA_INTEG_UTIL_H */
