#define _GNU_SOURCE /* strdup, usleep, memmem */
/*
 * bench_http.c: the serving side of `pagoda bench`: a small
 * streaming HTTP/1.1 client driving /v1/completions (--serve, against the
 * in-process frontend, and --http HOST:PORT, against a running server).
 * Not for: the in-process engine driver (bench_run.c) or the HTTP server
 * itself (the frontend plugin).
 */
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_internal.h"

/* The serving benchmark: the same workload through the HTTP frontend, as
 * `stream: true` completions with the prompt given as token ids, from
 * `concurrency` client threads (closed loop). TTFT is the first streamed
 * chunk, ITL the gaps between chunks (a token whose text is held back,
 * e.g. half a UTF-8 character, arrives with the next), token counts from
 * the usage chunk. A small HTTP/1.1 client of its own (chunked transfer
 * decoding included) keeps the binary free of libcurl. */

typedef struct http_run {
    const char *host;
    int port;
    const pagoda_bench_req *reqs;
    req_rec *rec;
    int32_t n, next;
    run_ctx *c;
} http_run;

static int http_connect(const char *host, int port)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, ps, &hints, &ai) || !ai) return -1;
    int fd = -1;
    for (struct addrinfo *p = ai; p && fd < 0; p = p->ai_next) {
        fd = socket(p->ai_family, p->ai_socktype, p->ai_protocol);
        if (fd >= 0 && connect(fd, p->ai_addr, p->ai_addrlen)) { close(fd); fd = -1; }
    }
    freeaddrinfo(ai);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

/* One SSE event's JSON: a text chunk (a token time), the usage, an error. */
static void http_event(run_ctx *c, req_rec *r, const char *data, size_t len)
{
    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) return;
    json_error_t je;
    json_t *o = json_loadb(data, len, 0, &je);
    if (!o) return;
    double t = bench_now_s() - c->t0;
    json_t *usage = json_object_get(o, "usage");
    json_t *choices = json_object_get(o, "choices");
    pthread_mutex_lock(&c->mu);
    if (json_object_get(o, "error")) {
        r->failed = true;
        json_t *m = json_object_get(json_object_get(o, "error"), "message");
        if (!c->first_error[0])
            snprintf(c->first_error, sizeof c->first_error, "%s", json_is_string(m) ? json_string_value(m) : "error");
    }
    if (json_is_object(usage)) {
        r->n_tok = (int32_t)json_integer_value(json_object_get(usage, "completion_tokens"));
        json_t *d = json_object_get(usage, "prompt_tokens_details");
        if (json_is_object(d)) r->cached = (int32_t)json_integer_value(json_object_get(d, "cached_tokens"));
    }
    json_t *ch = json_array_get(choices, 0);
    json_t *text = json_object_get(ch, "text");
    if (json_is_string(text) && json_string_length(text) > 0) {
        if (r->t_first == 0) r->t_first = t;
        else if (c->n_itl < c->cap_itl) c->itl[c->n_itl++] = (t - r->t_last) * 1e3;
        r->t_last = t;
    }
    pthread_mutex_unlock(&c->mu);
    json_decref(o);
}

/* POST one request and read its stream to the end. */
static void http_one(http_run *h, int32_t i)
{
    run_ctx *c = h->c;
    req_rec *r = &h->rec[i];
    const pagoda_bench_req *q = &h->reqs[i];
    r->run = c;
    r->n_prompt = q->n_prompt;
    r->max_tokens = q->max_tokens;
    r->shared = q->shared;
    json_t *body = json_object(), *ids = json_array();
    for (int32_t k = 0; k < q->n_prompt; k++) json_array_append_new(ids, json_integer(q->prompt[k]));
    json_object_set_new(body, "prompt", ids);
    json_object_set_new(body, "max_tokens", json_integer(q->max_tokens));
    json_object_set_new(body, "temperature", json_real(0));
    json_object_set_new(body, "ignore_eos", json_true());
    json_object_set_new(body, "stream", json_true());
    json_t *so = json_object();
    json_object_set_new(so, "include_usage", json_true());
    json_object_set_new(body, "stream_options", so);
    char *js = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    size_t jl = js ? strlen(js) : 0;
    char head[512];
    int hl = snprintf(head, sizeof head,
                      "POST /v1/completions HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n", h->host, h->port, jl);
    char *raw = NULL, *bodybuf = NULL;
    size_t raw_len = 0, raw_cap = 0, body_len = 0, body_cap = 0, raw_pos = 0, ev_pos = 0;
    bool in_body = false, chunked = false, done = false;
    int status = 0;
    int64_t chunk_left = -1; /* -1: a size line comes next */
    pthread_mutex_lock(&c->mu);
    r->t_submit = bench_now_s() - c->t0;
    pthread_mutex_unlock(&c->mu);
    int fd = js ? http_connect(h->host, h->port) : -1;
    if (fd < 0 || write(fd, head, (size_t)hl) != hl || write(fd, js, jl) != (ssize_t)jl) {
        pthread_mutex_lock(&c->mu);
        r->failed = true;
        if (!c->first_error[0])
            snprintf(c->first_error, sizeof c->first_error, "cannot reach %s:%d: %s", h->host, h->port, strerror(errno));
        pthread_mutex_unlock(&c->mu);
        goto out;
    }
    for (;;) {
        if (raw_cap - raw_len < 16384) {
            size_t nc = raw_cap ? raw_cap * 2 : 65536;
            char *p = realloc(raw, nc);
            if (!p) break;
            raw = p;
            raw_cap = nc;
        }
        ssize_t got = read(fd, raw + raw_len, raw_cap - raw_len);
        if (got <= 0) break;
        raw_len += (size_t)got;
        if (!in_body) {
            char *e = memmem(raw, raw_len, "\r\n\r\n", 4);
            if (!e) continue;
            *e = 0;
            sscanf(raw, "HTTP/%*s %d", &status);
            for (char *p = raw; *p; p++) *p = (char)tolower((unsigned char)*p);
            chunked = strstr(raw, "transfer-encoding: chunked") != NULL;
            raw_pos = (size_t)(e - raw) + 4;
            in_body = true;
        }
        /* move decoded bytes to bodybuf */
        while (raw_pos < raw_len && !done) {
            size_t take;
            if (chunked) {
                if (chunk_left < 0) {
                    char *nl = memmem(raw + raw_pos, raw_len - raw_pos, "\r\n", 2);
                    if (!nl) break;
                    chunk_left = strtoll(raw + raw_pos, NULL, 16);
                    raw_pos = (size_t)(nl - raw) + 2;
                    if (chunk_left == 0) { done = true; break; }
                    continue;
                }
                if (chunk_left == 0) { /* the CRLF after a chunk's data */
                    if (raw_len - raw_pos < 2) break;
                    raw_pos += 2;
                    chunk_left = -1;
                    continue;
                }
                take = raw_len - raw_pos < (size_t)chunk_left ? raw_len - raw_pos : (size_t)chunk_left;
                chunk_left -= (int64_t)take;
            } else {
                take = raw_len - raw_pos;
            }
            if (body_len + take + 1 > body_cap) {
                size_t nc = (body_cap ? body_cap * 2 : 65536) + take;
                char *p = realloc(bodybuf, nc);
                if (!p) { done = true; break; }
                bodybuf = p;
                body_cap = nc;
            }
            memcpy(bodybuf + body_len, raw + raw_pos, take);
            body_len += take;
            raw_pos += take;
        }
        /* complete events */
        for (;;) {
            char *e = body_len > ev_pos ? memmem(bodybuf + ev_pos, body_len - ev_pos, "\n\n", 2) : NULL;
            if (!e) break;
            if (status == 200 && e - (bodybuf + ev_pos) > 6 && !memcmp(bodybuf + ev_pos, "data: ", 6))
                http_event(c, r, bodybuf + ev_pos + 6, (size_t)(e - bodybuf) - ev_pos - 6);
            ev_pos = (size_t)(e - bodybuf) + 2;
        }
        if (done) break;
        /* drop consumed raw bytes (headers included) */
        if (raw_pos > 0) {
            memmove(raw, raw + raw_pos, raw_len - raw_pos);
            raw_len -= raw_pos;
            raw_pos = 0;
        }
    }
    pthread_mutex_lock(&c->mu);
    if (status != 200) {
        r->failed = true;
        if (!c->first_error[0]) {
            size_t bl = body_len < 200 ? body_len : 200;
            snprintf(c->first_error, sizeof c->first_error, "HTTP %d: %.*s", status, (int)bl, bodybuf ? bodybuf : "");
        }
    }
    pthread_mutex_unlock(&c->mu);
out:
    if (fd >= 0) close(fd);
    pthread_mutex_lock(&c->mu);
    r->t_end = bench_now_s() - c->t0;
    if (r->t_first == 0 && !r->failed) {
        r->failed = true;
        if (!c->first_error[0]) snprintf(c->first_error, sizeof c->first_error, "no token was streamed");
    }
    c->n_done++;
    pthread_mutex_unlock(&c->mu);
    free(js);
    free(raw);
    free(bodybuf);
}

static void *http_client(void *arg)
{
    http_run *h = arg;
    for (;;) {
        pthread_mutex_lock(&h->c->mu);
        int32_t i = h->next < h->n ? h->next++ : -1;
        pthread_mutex_unlock(&h->c->mu);
        if (i < 0) return NULL;
        http_one(h, i);
    }
}

/* Run the workload against host:port; rt (in-process server) or NULL. */
static int run_workload_http(pagoda_runtime *rt, const char *host, int port,
                             const pagoda_bench_workload *w, const pagoda_bench_req *reqs,
                             bench_result *res, char *err, size_t err_len)
{
    int32_t n = w->n_requests;
    size_t cap_itl = 0;
    for (int32_t i = 0; i < n; i++) cap_itl += (size_t)reqs[i].max_tokens;
    run_ctx c;
    req_rec *rec = calloc((size_t)n, sizeof *rec);
    if (!rec || bench_run_ctx_init(&c, cap_itl)) {
        free(rec);
        ERR("out of memory for the run");
        return PAGODA_ERR_NOMEM;
    }
    pagoda_engine_stats s0 = {0}, s1 = {0};
    if (rt) pagoda_engine_get_stats(rt->engine, &s0);
    c.t0 = bench_now_s();
    if (rt) bench_hook_attach(&c);
    http_run h = {.host = host, .port = port, .reqs = reqs, .rec = rec, .n = n, .c = &c};
    int nt = w->concurrency < n ? w->concurrency : n;
    pthread_t *th = calloc((size_t)nt, sizeof *th);
    int started = 0;
    for (int i = 0; th && i < nt; i++)
        if (pthread_create(&th[i], NULL, http_client, &h) == 0) started++;
    if (started == 0) http_client(&h);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    free(th);
    if (rt) {
        pagoda_engine_wait_idle(rt->engine);
        bench_hook_attach(NULL);
        pagoda_engine_get_stats(rt->engine, &s1);
    }
    return bench_finish_result(&c, rec, n, &s0, &s1, res, err, err_len);
}
static void *frontend_thread(void *arg)
{
    pagoda_runtime *rt = arg;
    int st = rt->p_front->ops.frontend.run(rt->front_ctx);
    if (st) pagoda_log(PAGODA_LOG_ERROR, "bench: the HTTP frontend stopped: %s", pagoda_status_str(st));
    return NULL;
}

/* Start the runtime's HTTP frontend, run the workload through it, stop it. */
int bench_serve_workload(pagoda_runtime *rt, const char *port_file, const pagoda_bench_workload *w,
                          const pagoda_bench_req *reqs, bench_result *res, char *err, size_t err_len)
{
    pthread_t th;
    if (pthread_create(&th, NULL, frontend_thread, rt)) { ERR("cannot start the frontend thread"); return PAGODA_ERR_INTERNAL; }
    int port = 0;
    for (int i = 0; i < 1000 && port <= 0; i++) { /* up to 10 s for the port file */
        FILE *f = fopen(port_file, "r");
        if (f) {
            if (fscanf(f, "%d", &port) != 1) port = 0;
            fclose(f);
        }
        if (port <= 0) usleep(10000);
    }
    int st;
    if (port <= 0) {
        ERR("the HTTP frontend wrote no port to %s", port_file);
        st = PAGODA_ERR_IO;
    } else {
        st = run_workload_http(rt, "127.0.0.1", port, w, reqs, res, err, err_len);
    }
    rt->p_front->ops.frontend.stop(rt->front_ctx);
    pthread_join(th, NULL);
    unlink(port_file);
    return st;
}

/* --http HOST:PORT: the workload against a running server. */
int bench_do_http(const bench_opts *o)
{
    char err[2048] = "", host[256];
    const char *colon = strrchr(o->http, ':');
    int port = colon ? atoi(colon + 1) : 0;
    if (!colon || port <= 0 || port > 65535 || (size_t)(colon - o->http) >= sizeof host) {
        fprintf(stderr, "pagoda bench: --http %s: expected HOST:PORT\n", o->http);
        return PAGODA_ERR_INVALID;
    }
    snprintf(host, sizeof host, "%.*s", (int)(colon - o->http), o->http);
    int32_t V = o->vocab_size;
    if (o->model) {
        gguf_file *g = pagoda_gguf_open(o->model, err, sizeof err);
        pagoda_hparams hp;
        if (!g || pagoda_hparams_read(g, &hp, err, sizeof err)) {
            fprintf(stderr, "bench: %s\n", err);
            pagoda_gguf_close(g);
            return PAGODA_ERR_INVALID;
        }
        V = hp.n_vocab;
        const gguf_tensor *te = pagoda_gguf_tensor(g, "token_embd.weight");
        if (V <= 0 && te) V = (int32_t)te->ne[1]; /* the header may leave it to the tokenizer */
        pagoda_gguf_close(g);
    }
    pagoda_bench_req *reqs = NULL;
    bench_result r;
    memset(&r, 0, sizeof r);
    snprintf(r.label, sizeof r.label, "http");
    int st = pagoda_bench_workload_make(&o->w, V > 1024 ? 259 : 3, V, &reqs, err, sizeof err);
    if (!st) st = run_workload_http(NULL, host, port, &o->w, reqs, &r, err, sizeof err);
    if (!st && r.n_ok == 0) st = PAGODA_ERR_IO; /* the reason was logged */
    if (st) {
        if (err[0]) fprintf(stderr, "bench: %s\n", err);
    } else {
        printf("\nserving %s:%d, %d requests at concurrency %d\n", host, port, o->w.n_requests, o->w.concurrency);
        bench_print_results(stdout, &r, 1);
        if (o->json) bench_write_json(o->json, o, NULL, &r, 1, NULL, NULL);
        if (o->csv) bench_write_csv(o->csv, &r, 1);
    }
    pagoda_bench_workload_free(reqs, o->w.n_requests);
    bench_result_free(&r);
    return st;
}
