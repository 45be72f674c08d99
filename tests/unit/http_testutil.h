/* http_testutil.h: the loopback harness of the HTTP frontend's unit tests
 * (test_http.c, test_http_hostile.c, test_http_tools.c, test_http_inspect.c):
 * load frontend-http.so against the fake engine (fake_engine.h) and run it
 * on a free port; with libcurl (PAGODA_HAVE_CURL) make requests and read
 * JSON and SSE bodies. Header-only (static inline), so each test binary
 * stays one source file.
 * Not for: raw-socket clients (test_http_hostile.c keeps its own, libcurl
 * would fix the framing up) or the real server (tests/integration/). */
#ifndef PAGODA_HTTP_TESTUTIL_H
#define PAGODA_HTTP_TESTUTIL_H

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake_engine.h"
#include "plugin_testhost.h"
#include "testutil.h"

#ifdef PAGODA_HAVE_CURL
#include <curl/curl.h>
#endif

/* ------------------------------------------------------------- server */

typedef struct srv {
    fake_engine *f;
    void *lib;
    const pagoda_plugin_desc *desc;
    const pagoda_frontend_ops *ops;
    void *ctx;
    pthread_t th;
    int rc;
    int port;
    char dir[64];
    char port_file[128];
    fake_kv cfg[16];
    int n_cfg;
} srv;

static inline void *run_thread(void *arg)
{
    srv *s = arg;
    s->rc = s->ops->run(s->ctx);
    return NULL;
}

/* Loads the plugin and creates an instance with extra's keys, port_file
 * added and port 0 unless extra names a port; tweak (may be NULL) adjusts
 * the fake engine first. Does not run it (srv_run). */
static inline void srv_create(srv *s, const fake_kv *extra, int n_extra, void (*tweak)(fake_engine *))
{
    memset(s, 0, sizeof *s);
    ck_assert_int_le(n_extra + 2, (int)(sizeof s->cfg / sizeof *s->cfg));
    snprintf(s->dir, sizeof s->dir, "/tmp/pagoda_http_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(s->dir));
    snprintf(s->port_file, sizeof s->port_file, "%s/port", s->dir);
    s->cfg[s->n_cfg++] = (fake_kv){"port_file", s->port_file};
    int has_port = 0;
    for (int i = 0; i < n_extra; i++) {
        s->cfg[s->n_cfg++] = extra[i];
        has_port |= !strcmp(extra[i].key, "port");
    }
    if (!has_port) s->cfg[s->n_cfg++] = (fake_kv){"port", "0"};
    s->f = fake_engine_new(s->cfg, s->n_cfg);
    if (tweak) tweak(s->f);

    th_plugin p = th_load("frontend", "http"); /* asserts its name, kind and ABI */
    s->lib = p.dl;
    s->desc = p.desc;
    s->ops = s->desc->ops;
    char err[256] = {0};
    ck_assert_msg(s->desc->create(&s->f->host, &s->ctx, err, sizeof err) == PAGODA_OK, "%s", err);
}

/* Runs a created instance on its thread and waits for its port file. */
static inline void srv_run(srv *s)
{
    pthread_create(&s->th, NULL, run_thread, s);
    /* wait for the port file (bounded; the bound is a safety net, not asserted) */
    for (int i = 0; i < 1000; i++) {
        FILE *fp = fopen(s->port_file, "r");
        if (fp) {
            int ok = fscanf(fp, "%d", &s->port) == 1;
            fclose(fp);
            if (ok && s->port > 0) break;
        }
        usleep(10000);
    }
    ck_assert_int_gt(s->port, 0);
}

static inline void srv_start_with(srv *s, const fake_kv *extra, int n_extra, void (*tweak)(fake_engine *))
{
    srv_create(s, extra, n_extra, tweak);
    srv_run(s);
}

static inline void srv_start(srv *s, const fake_kv *extra, int n_extra) { srv_start_with(s, extra, n_extra, NULL); }

/* Destroys an instance that is not running (never ran, or stopped). */
static inline void srv_free(srv *s)
{
    s->desc->destroy(s->ctx);
    fake_engine_free(s->f); /* joins the engine thread, which may still be in plugin code */
    dlclose(s->lib);
    unlink(s->port_file);
    rmdir(s->dir);
}

/* stop() must drain: run returns OK and no request is left live. */
static inline void srv_stop(srv *s)
{
    s->ops->stop(s->ctx);
    pthread_join(s->th, NULL);
    ck_assert_int_eq(s->rc, PAGODA_OK);
    ck_assert_int_eq(fake_live(s->f), 0);
    srv_free(s);
}

/* How many times needle occurs in hay (NULL hay: 0). */
static inline int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; p && (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

#ifdef PAGODA_HAVE_CURL

/* ------------------------------------------------------------- client */

typedef struct resp {
    long status;
    char *body;
    size_t len;
    char ctype[128];
    int abort_after;   /* >0: abort the transfer once this many body bytes arrived */
} resp;

static inline size_t on_body(char *p, size_t sz, size_t n, void *u)
{
    resp *r = u;
    size_t k = sz * n;
    r->body = realloc(r->body, r->len + k + 1);
    memcpy(r->body + r->len, p, k);
    r->len += k;
    r->body[r->len] = 0;
    if (r->abort_after > 0 && r->len >= (size_t)r->abort_after) return 0; /* hang up */
    return k;
}

/* One request; body may be NULL. extra_hdr may be NULL. timeout_ms 0: none. */
static inline void http_req(srv *s, const char *method, const char *path, const char *body, size_t body_len,
                            const char *extra_hdr, resp *r, long timeout_ms)
{
    CURL *c = curl_easy_init();
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", s->port, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    struct curl_slist *h = NULL;
    h = curl_slist_append(h, "Content-Type: application/json");
    h = curl_slist_append(h, "Expect:");
    if (extra_hdr) h = curl_slist_append(h, extra_hdr);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)body_len);
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (timeout_ms) curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    CURLcode cc = curl_easy_perform(c);
    if (cc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
        char *ct = NULL;
        curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
        if (ct) snprintf(r->ctype, sizeof r->ctype, "%s", ct);
    } else {
        r->status = -1;
    }
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
}

/* One request (body may be NULL, hdr may be NULL) whose status alone is checked. */
static inline void expect_status(srv *s, const char *method, const char *path, const char *body, const char *hdr,
                                 long want)
{
    resp r = {0};
    http_req(s, method, path, body, body ? strlen(body) : 0, hdr, &r, 0);
    ck_assert_msg(r.status == want, "%s %s -> %ld, want %ld: %s", method, path, r.status, want,
                  r.body ? r.body : "(no body)");
    free(r.body);
}

static inline json_t *post_json(srv *s, const char *path, const char *body, long *status)
{
    resp r = {0};
    http_req(s, "POST", path, body, strlen(body), NULL, &r, 0);
    *status = r.status;
    json_error_t e;
    json_t *j = r.body ? json_loads(r.body, 0, &e) : NULL;
    ck_assert_msg(j != NULL, "POST %s -> %ld, body not JSON: %s", path, r.status, r.body ? r.body : "(none)");
    free(r.body);
    return j;
}

/* The value at a dotted path, numeric parts indexing arrays ("choices.0.text"); NULL if absent. */
static inline json_t *jget(json_t *j, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *cur = j;
    for (char *tok = strtok(buf, "."); tok && cur; tok = strtok(NULL, ".")) {
        if (json_is_array(cur)) cur = json_array_get(cur, (size_t)atoi(tok));
        else cur = json_object_get(cur, tok);
    }
    return cur;
}

static inline const char *jget_str(json_t *j, const char *path)
{
    json_t *v = jget(j, path);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static inline long long jint(json_t *j, const char *path)
{
    json_t *v = jget(j, path);
    ck_assert_msg(json_is_integer(v), "%s is not an integer", path);
    return json_integer_value(v);
}

/* Parses an SSE body into JSON chunks; *done set when the stream ended with [DONE]. */
static inline int parse_sse(const char *body, json_t **chunks, int cap, int *done)
{
    int n = 0;
    *done = 0;
    const char *p = body;
    while (p && *p) {
        const char *end = strstr(p, "\n\n");
        ck_assert_msg(end != NULL, "SSE event not terminated by a blank line: %s", p);
        ck_assert_msg(strncmp(p, "data: ", 6) == 0, "SSE line not 'data: ': %.40s", p);
        ck_assert_msg(!*done, "data after [DONE]");
        size_t len = (size_t)(end - p - 6);
        if (len == 6 && !strncmp(p + 6, "[DONE]", 6)) {
            *done = 1;
        } else {
            json_error_t e;
            json_t *j = json_loadb(p + 6, len, 0, &e);
            ck_assert_msg(j != NULL, "bad SSE JSON: %.*s", (int)len, p + 6);
            ck_assert_int_lt(n, cap);
            chunks[n++] = j;
        }
        p = end + 2;
    }
    return n;
}

static inline void expect_error(srv *s, const char *path, const char *body, long want, const char *needle,
                                const char *param)
{
    long st;
    json_t *j = post_json(s, path, body, &st);
    ck_assert_msg(st == want, "%s %s -> %ld, want %ld", path, body, st, want);
    const char *msg = jget_str(j, "error.message");
    ck_assert_ptr_nonnull(msg);
    ck_assert_ptr_nonnull(jget_str(j, "error.type"));
    ck_assert_ptr_nonnull(jget(j, "error.code")); /* present (may be null) */
    if (needle) ck_assert_msg(strstr(msg, needle) != NULL, "message '%s' lacks '%s'", msg, needle);
    if (param) {
        const char *pp = jget_str(j, "error.param");
        ck_assert_msg(pp && !strcmp(pp, param), "param %s, want %s", pp ? pp : "null", param);
    }
    json_decref(j);
}

/* main() of a suite that needs libcurl. */
static inline int http_test_main(Suite *s)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = tu_run(s);
    curl_global_cleanup();
    return rc;
}

#else /* !PAGODA_HAVE_CURL */

/* main() of a suite that needs libcurl, built without it: ctest's skip (77). */
static inline int http_test_main_skipped(const char *name)
{
    fprintf(stderr, "%s: libcurl not found at configure time; tests skipped\n", name);
    return 77;
}

#endif /* PAGODA_HAVE_CURL */

#endif /* PAGODA_HTTP_TESTUTIL_H */
