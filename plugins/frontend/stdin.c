/*
 * stdin.c: the line frontend (`frontend = stdin`). Batch mode: every input
 * line is a request (a line starting with '{' is a JSON request, any other
 * a plain prompt), all submitted as they are read so the engine batches
 * them, each result written as one JSON line (or plain text) as soon as it
 * finishes. Chat mode (input is a terminal, or mode = chat): each line is a
 * user turn, rendered with the chat template, the reply streamed to the
 * output and appended to the conversation.
 * Not for: anything network-facing (see http/).
 *
 * Terminal chat: the "> " prompt shows once the weights are in (after the
 * load's log lines) and after each reply. Ctrl-C while a reply streams
 * stops that reply and keeps the conversation (interrupt(), which the core
 * calls on SIGINT); Ctrl-C at the prompt, or a second one before the reply
 * has stopped, quits, with the line the frontend writes ended first so the
 * core's log line does not land inside the reply.
 *
 * Threading: one thread (the core's, in run()) reads, submits and writes.
 * The engine's callback only appends to the request under fe->mu and pokes
 * a pipe; the main loop poll()s the input and that pipe, so output never
 * blocks the engine thread and stop() can interrupt a blocked read.
 * interrupt() runs on the core's signal watcher thread, under fe->mu.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pagoda/pagoda.h"
#include "request_fields.h"

#ifndef PAGODA_VERSION_STRING
#define PAGODA_VERSION_STRING "0.1.0"
#endif

#define MAX_STOP RF_MAX_STOP
#define MAX_LINE (64u << 20)   /* a longer line is refused, the rest still served */
#define RETRY_MS 50            /* queue full: try again this often (and on every FINAL) */

/* sbuf, sb_put: request_fields.h */

typedef struct stdin_fe stdin_fe;

typedef struct sreq {
    struct sreq *next;
    stdin_fe *fe;
    json_t *id;              /* the client's id, else the line number */
    uint64_t eid;
    sbuf text;
    size_t streamed;         /* chat mode: bytes already written */
    int final;
    int finish_reason;
    char *error;
    pagoda_usage usage;
    pagoda_timings timings;
} sreq;

enum { MODE_AUTO, MODE_BATCH, MODE_CHAT };

struct stdin_fe {
    const pagoda_host *host;
    int text_format;
    int mode;
    char input[1024], output[1024];
    int32_t max_tokens;      /* > 0: overrides the engine default */
    double temperature;      /* >= 0: overrides the engine default */
    int in_fd;
    FILE *out;
    int wake[2];
    pthread_mutex_t mu;
    sreq *list;
    int inflight;
    int stop_req;
    int cancelled_all;
    int said_quitting;       /* chat on a terminal: the stop was announced (under mu) */
    int prompt_tty;          /* chat with a terminal for output (under mu) */
    int turn_active;         /* chat: a reply is being generated (under mu) */
    int interrupt_req;       /* chat: Ctrl-C asked to stop that reply (under mu) */
    /* chat */
    pagoda_chat_message *hist;
    int n_hist, cap_hist;
};

/* ---------------------------------------------------------------- events */

static void poke(stdin_fe *fe)
{
    char c = 1;
    ssize_t r = write(fe->wake[1], &c, 1); /* non-blocking: a full pipe is already a wake-up */
    (void)r;
}

/* [engine thread] */
static void on_event(void *user, const pagoda_event *ev)
{
    sreq *r = user;
    stdin_fe *fe = r->fe;
    pthread_mutex_lock(&fe->mu);
    if (ev->text_len) sb_put(&r->text, ev->text, ev->text_len);
    if (ev->type == PAGODA_EVENT_FINAL) {
        r->final = 1;
        r->finish_reason = ev->finish_reason;
        r->usage = ev->usage;
        r->timings = ev->timings;
        if (ev->error) r->error = strdup(ev->error);
    }
    /* poked under the lock: once it is released run() may return and free fe */
    poke(fe);
    pthread_mutex_unlock(&fe->mu);
}

/* ---------------------------------------------------------------- output */

static int stop_asked(stdin_fe *fe);

static void write_line(stdin_fe *fe, const char *s)
{
    fputs(s, fe->out);
    fputc('\n', fe->out);
    fflush(fe->out);
}

static void write_error(stdin_fe *fe, json_t *id, long line, const char *msg)
{
    if (fe->text_format) {
        fe->host->log(fe->host, PAGODA_LOG_WARN, "line %ld: %s", line, msg);
        return;
    }
    json_t *o = json_object();
    json_object_set_new(o, "id", id ? json_incref(id) : json_integer(line));
    json_object_set_new(o, "error", json_string(msg));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (s) write_line(fe, s);
    free(s);
}

static void write_result(stdin_fe *fe, sreq *r)
{
    if (fe->text_format) {
        write_line(fe, r->text.p ? r->text.p : "");
        if (r->finish_reason == PAGODA_FINISH_ERROR)
            fe->host->log(fe->host, PAGODA_LOG_WARN, "request failed: %s", r->error ? r->error : "");
        return;
    }
    json_t *o = json_object();
    json_object_set(o, "id", r->id);
    json_t *t = json_stringn(r->text.p ? r->text.p : "", r->text.len);
    json_object_set_new(o, "text", t ? t : json_string(""));
    json_object_set_new(o, "finish_reason", json_string(pagoda_finish_reason_str(r->finish_reason)));
    if (r->finish_reason == PAGODA_FINISH_ERROR)
        json_object_set_new(o, "error", json_string(r->error ? r->error : "generation failed"));
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(r->usage.prompt_tokens));
    json_object_set_new(u, "completion_tokens", json_integer(r->usage.completion_tokens));
    json_object_set_new(u, "cached_tokens", json_integer(r->usage.cached_tokens));
    json_object_set_new(o, "usage", u);
    json_t *tm = json_object();
    json_object_set_new(tm, "queue_ms", json_real(r->timings.queue_ms));
    json_object_set_new(tm, "ttft_ms", json_real(r->timings.ttft_ms));
    json_object_set_new(tm, "total_ms", json_real(r->timings.total_ms));
    json_object_set_new(o, "timings", tm);
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(o);
    if (s) write_line(fe, s);
    free(s);
}

static void sreq_free(sreq *r)
{
    json_decref(r->id);
    free(r->text.p);
    free(r->error);
    free(r);
}

/* Writes what finished (and, in chat mode, new text); returns the finished
 * chat reply when `chat_reply` is set (caller frees). */
static void drain(stdin_fe *fe, int chat, char **chat_reply)
{
    sreq *done = NULL, **tail = &done;
    sbuf chunk = {0};
    pthread_mutex_lock(&fe->mu);
    for (sreq **pp = &fe->list; *pp;) {
        sreq *r = *pp;
        if (chat && r->text.len > r->streamed) {
            sb_put(&chunk, r->text.p + r->streamed, r->text.len - r->streamed);
            r->streamed = r->text.len;
        }
        if (r->final) {
            *pp = r->next;
            r->next = NULL;
            *tail = r;
            tail = &r->next;
            fe->inflight--;
        } else {
            pp = &r->next;
        }
    }
    pthread_mutex_unlock(&fe->mu);
    if (chunk.len) {
        fwrite(chunk.p, 1, chunk.len, fe->out);
        fflush(fe->out);
    }
    free(chunk.p);
    for (sreq *r = done, *n; r; r = n) {
        n = r->next;
        if (chat) {
            fputc('\n', fe->out);
            if (r->finish_reason == PAGODA_FINISH_CANCELLED && !stop_asked(fe))
                fputs("[reply stopped]\n", fe->out);
            else if (r->finish_reason == PAGODA_FINISH_ERROR)
                fprintf(fe->out, "[error: %s]\n", r->error ? r->error : "generation failed");
            fflush(fe->out);
            if (chat_reply) *chat_reply = strdup(r->text.p ? r->text.p : "");
        } else {
            write_result(fe, r);
        }
        sreq_free(r);
    }
}

/* ------------------------------------------------------------ submitting */

typedef struct parsed {
    pagoda_request req;
    const char *stop[MAX_STOP];
    json_t *root;            /* keeps the strings alive until submitted */
    json_t *id;
    char *rendered;          /* chat: the template's output (host->free) */
    char *line;              /* a plain line's prompt (owned) */
    int32_t stop_ids[16];
    char err[512];
} parsed;

static void parsed_clear(stdin_fe *fe, parsed *p)
{
    json_decref(p->root);
    json_decref(p->id);
    if (p->rendered) fe->host->free(fe->host, p->rendered);
    free(p->line);
    memset(p, 0, sizeof *p);
}

static void base_request(stdin_fe *fe, pagoda_request *req)
{
    fe->host->request_defaults(fe->host, req);
    req->struct_size = sizeof *req;
    if (fe->max_tokens > 0) req->max_tokens = fe->max_tokens;
    if (fe->temperature >= 0) req->temperature = (float)fe->temperature;
}

static int render(stdin_fe *fe, const pagoda_chat_message *m, int n, parsed *p)
{
    int32_t n_stop = 0;
    int st = fe->host->chat_render ? fe->host->chat_render(fe->host, m, n, true, &p->rendered,
                                                           p->stop_ids, 16, &n_stop)
                                   : PAGODA_ERR_UNSUPPORTED;
    if (st != PAGODA_OK || !p->rendered) {
        snprintf(p->err, sizeof p->err, "the chat template could not be rendered: %s",
                 pagoda_status_str(st));
        return -1;
    }
    p->req.prompt = p->rendered;
    p->req.prompt_len = strlen(p->rendered);
    p->req.parse_special = true;
    p->req.add_special = false;
    p->req.stop_token_ids = n_stop ? p->stop_ids : NULL;
    p->req.n_stop_token_ids = n_stop > 16 ? 16 : n_stop;
    return 0;
}

#define FAIL(...) do { snprintf(p->err, sizeof p->err, __VA_ARGS__); return -1; } while (0)

/* A JSON line into p. Returns 0, or -1 with p->err (p->id set when known). */
static int parse_json_line(stdin_fe *fe, const char *line, size_t len, parsed *p)
{
    json_error_t je;
    p->root = json_loadb(line, len, 0, &je);
    if (!p->root) FAIL("malformed JSON: %s (column %d)", je.text, je.column);
    if (!json_is_object(p->root)) FAIL("a JSON line must be an object");
    json_t *o = p->root;
    json_t *id = json_object_get(o, "id");
    if (id && (json_is_string(id) || json_is_integer(id))) p->id = json_incref(id);
    else if (id && !json_is_null(id)) FAIL("'id' must be a string or an integer");

    base_request(fe, &p->req);
    /* The same fields, ranges and messages as the HTTP API's. */
    perr pe;
    if (rf_parse_sampling(o, &p->req, p->stop, NULL, &pe) < 0) FAIL("%s", pe.msg);

    json_t *prompt = json_object_get(o, "prompt");
    json_t *msgs = json_object_get(o, "messages");
    if (prompt && json_is_string(prompt)) {
        p->req.prompt = json_string_value(prompt);
        p->req.prompt_len = json_string_length(prompt); /* "" starts from BOS alone */
        return 0;
    }
    if (prompt && !json_is_null(prompt)) FAIL("'prompt' must be a string");
    if (!msgs || !json_is_array(msgs) || !json_array_size(msgs))
        FAIL("a JSON line needs 'prompt' (a string) or 'messages' (a non-empty list)");
    size_t n = json_array_size(msgs), k;
    pagoda_chat_message *m = calloc(n, sizeof *m);
    if (!m) FAIL("out of memory");
    json_t *e;
    json_array_foreach(msgs, k, e) {
        json_t *role = json_object_get(e, "role"), *content = json_object_get(e, "content");
        if (!json_is_string(role) || !json_is_string(content)) {
            free(m);
            FAIL("messages[%zu] must have string 'role' and 'content'", k);
        }
        m[k].role = json_string_value(role);
        m[k].content = json_string_value(content);
    }
    int r = render(fe, m, (int)n, p);
    free(m);
    return r;
}

/* Submit a prepared request; 1 queue full (retry later), 0 done (submitted
 * or error written), never blocks. */
static int submit(stdin_fe *fe, parsed *p, long line)
{
    sreq *r = calloc(1, sizeof *r);
    if (!r) {
        write_error(fe, p->id, line, "out of memory");
        return 0;
    }
    r->fe = fe;
    r->id = p->id ? json_incref(p->id) : json_integer(line);
    /* on the list before submit: the FINAL may come before submit returns */
    pthread_mutex_lock(&fe->mu);
    r->next = fe->list;
    fe->list = r;
    fe->inflight++;
    pthread_mutex_unlock(&fe->mu);
    char err[512] = {0};
    int st = fe->host->submit(fe->host, &p->req, on_event, r, &r->eid, err, sizeof err);
    if (st == PAGODA_OK) return 0;
    pthread_mutex_lock(&fe->mu);
    for (sreq **pp = &fe->list; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    fe->inflight--;
    pthread_mutex_unlock(&fe->mu);
    sreq_free(r);
    if (st == PAGODA_ERR_NOSPACE) return 1;
    char msg[700];
    snprintf(msg, sizeof msg, "%s%s%s", pagoda_status_str(st), err[0] ? ": " : "", err);
    write_error(fe, p->id, line, msg);
    return 0;
}

/* Batch mode: prepare one line; returns -1 when it is skipped or answered
 * with an error already, 0 when p is ready to submit. */
static int prepare_line(stdin_fe *fe, const char *line, size_t len, long lineno, parsed *p)
{
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t')) i++;
    if (i == len) return -1; /* a blank line is not a request */
    if (line[i] == '{') {
        if (parse_json_line(fe, line, len, p) < 0) {
            write_error(fe, p->id, lineno, p->err);
            parsed_clear(fe, p);
            return -1;
        }
        return 0;
    }
    base_request(fe, &p->req);
    p->line = strndup(line, len);
    if (!p->line) {
        write_error(fe, NULL, lineno, "out of memory");
        return -1;
    }
    p->req.prompt = p->line;
    p->req.prompt_len = len;
    return 0;
}

static void cancel_all(stdin_fe *fe)
{
    uint64_t *ids = NULL;
    int n = 0;
    pthread_mutex_lock(&fe->mu);
    ids = malloc(sizeof *ids * (size_t)(fe->inflight + 1));
    for (sreq *r = fe->list; r && ids; r = r->next)
        if (!r->final) ids[n++] = r->eid;
    pthread_mutex_unlock(&fe->mu);
    for (int i = 0; i < n; i++) fe->host->cancel(fe->host, ids[i]);
    free(ids);
}

/* --------------------------------------------------------------- the loop */

static int stop_asked(stdin_fe *fe)
{
    pthread_mutex_lock(&fe->mu);
    int s = fe->stop_req;
    pthread_mutex_unlock(&fe->mu);
    return s;
}

static int inflight(stdin_fe *fe)
{
    pthread_mutex_lock(&fe->mu);
    int n = fe->inflight;
    pthread_mutex_unlock(&fe->mu);
    return n;
}

static int hist_push(stdin_fe *fe, const char *role, char *content)
{
    if (fe->n_hist == fe->cap_hist) {
        int nc = fe->cap_hist ? fe->cap_hist * 2 : 16;
        pagoda_chat_message *nh = realloc(fe->hist, sizeof *nh * (size_t)nc);
        if (!nh) return -1;
        fe->hist = nh;
        fe->cap_hist = nc;
    }
    fe->hist[fe->n_hist].role = role;
    fe->hist[fe->n_hist].content = content;
    fe->n_hist++;
    return 0;
}

static int interrupt_asked(stdin_fe *fe)
{
    pthread_mutex_lock(&fe->mu);
    int s = fe->interrupt_req;
    pthread_mutex_unlock(&fe->mu);
    return s;
}

/* Chat mode: one user turn; waits for the reply, streaming it. */
static void chat_turn(stdin_fe *fe, const char *line, size_t len, long lineno)
{
    char *user = strndup(line, len);
    if (!user || hist_push(fe, "user", user) < 0) {
        free(user);
        return;
    }
    parsed p;
    memset(&p, 0, sizeof p);
    base_request(fe, &p.req);
    if (render(fe, fe->hist, fe->n_hist, &p) < 0) {
        /* no template: complete the line as it is */
        p.req.prompt = user;
        p.req.prompt_len = len;
    }
    int busy;
    pthread_mutex_lock(&fe->mu);
    fe->turn_active = 1; /* from here a Ctrl-C stops this turn, not pagoda */
    fe->interrupt_req = 0;
    pthread_mutex_unlock(&fe->mu);
    while ((busy = submit(fe, &p, lineno)) == 1 && !stop_asked(fe) && !interrupt_asked(fe))
        usleep(RETRY_MS * 1000);
    parsed_clear(fe, &p);
    char *reply = NULL;
    int cancelled = 0;
    while (!busy && inflight(fe) > 0) {
        if ((stop_asked(fe) || interrupt_asked(fe)) && !cancelled) {
            cancel_all(fe);
            cancelled = 1;
        }
        struct pollfd pf = {.fd = fe->wake[0], .events = POLLIN};
        if (poll(&pf, 1, RETRY_MS) > 0) {
            char b[256];
            while (read(fe->wake[0], b, sizeof b) > 0) {}
        }
        drain(fe, 1, &reply);
    }
    if (!busy) drain(fe, 1, &reply);
    /* a stopped reply stays in the conversation as far as it got: the
     * next turn follows on from what the user saw */
    if (reply && hist_push(fe, "assistant", reply) < 0) free(reply);
    pthread_mutex_lock(&fe->mu);
    fe->turn_active = 0;
    fe->interrupt_req = 0;
    pthread_mutex_unlock(&fe->mu);
}

/* SIGTERM, and Ctrl-C at the prompt, stop the whole server: on a
 * terminal, say so once instead of leaving a prompt that nothing will
 * read. Caller holds fe->mu. */
static void say_quitting_locked(stdin_fe *fe)
{
    if (fe->said_quitting || !fe->prompt_tty || !fe->out) return;
    fe->said_quitting = 1;
    fputs("\n[interrupted: pagoda is quitting]\n", fe->out);
    fflush(fe->out);
}

static void say_quitting(stdin_fe *fe)
{
    pthread_mutex_lock(&fe->mu);
    say_quitting_locked(fe);
    pthread_mutex_unlock(&fe->mu);
}

/* Has the engine got its weights in? (The prompt waits for it, so that it
 * comes after the load's log lines.) */
static int engine_ready(stdin_fe *fe)
{
    pagoda_engine_stats es;
    memset(&es, 0, sizeof es);
    es.struct_size = sizeof es;
    if (!fe->host->stats || fe->host->stats(fe->host, &es) != PAGODA_OK) return 1;
    return es.ready || (fe->host->shutting_down && fe->host->shutting_down(fe->host));
}

static int stdin_run(void *ctx)
{
    stdin_fe *fe = ctx;
    const pagoda_host *h = fe->host;
    int rc = PAGODA_OK;
    int own_in = 0, own_out = 0;
    if (strcmp(fe->input, "-")) {
        fe->in_fd = open(fe->input, O_RDONLY | O_CLOEXEC);
        if (fe->in_fd < 0)
            return h->error(h, PAGODA_ERR_IO, "[frontend.stdin] input = %s: %s", fe->input, strerror(errno));
        own_in = 1;
    } else {
        fe->in_fd = STDIN_FILENO;
    }
    if (strcmp(fe->output, "-")) {
        fe->out = fopen(fe->output, "w");
        if (!fe->out) {
            rc = h->error(h, PAGODA_ERR_IO, "[frontend.stdin] output = %s: %s", fe->output, strerror(errno));
            goto out;
        }
        own_out = 1;
    } else {
        fe->out = stdout;
    }
    int chat = fe->mode == MODE_CHAT || (fe->mode == MODE_AUTO && isatty(fe->in_fd));
    int prompt_tty = chat && isatty(fileno(fe->out));
    pthread_mutex_lock(&fe->mu);
    fe->prompt_tty = prompt_tty;
    pthread_mutex_unlock(&fe->mu);
    int need_prompt = prompt_tty; /* the first one: once the weights are in */

    sbuf buf = {0};
    size_t scan = 0;
    long lineno = 0;
    int eof = 0, skipping = 0;
    parsed pending;          /* a line refused with "queue full", to retry */
    int have_pending = 0;
    long pending_line = 0;
    memset(&pending, 0, sizeof pending);

    for (;;) {
        drain(fe, 0, NULL);
        int stopping = stop_asked(fe);
        if (stopping && !fe->cancelled_all) {
            fe->cancelled_all = 1;
            cancel_all(fe);
            if (prompt_tty) say_quitting(fe);
        }
        if (have_pending && !stopping) {
            if (submit(fe, &pending, pending_line) == 0) {
                parsed_clear(fe, &pending);
                have_pending = 0;
            }
        } else if (have_pending) {
            parsed_clear(fe, &pending);
            have_pending = 0;
        }
        if (need_prompt && !stopping && engine_ready(fe)) {
            need_prompt = 0;
            fputs("> ", fe->out);
            fflush(fe->out);
        }
        /* lines already buffered */
        while (!have_pending && !stopping) {
            char *nl = buf.len > scan ? memchr(buf.p + scan, '\n', buf.len - scan) : NULL;
            if (!nl && !(eof && scan < buf.len)) break;
            size_t end = nl ? (size_t)(nl - buf.p) : buf.len;
            size_t len = end - scan;
            const char *line = buf.p + scan;
            if (len && line[len - 1] == '\r') len--;
            lineno++;
            /* a copy: buf may move when more input is read */
            char *copy = strndup(line, len);
            scan = nl ? end + 1 : buf.len;
            if (!copy) break;
            if (chat) {
                if (len) chat_turn(fe, copy, len, lineno);
                /* a stop during the turn ends the program: a fresh prompt
                 * would wait for a line that is then ignored */
                stopping = stop_asked(fe);
                if (prompt_tty && stopping) say_quitting(fe);
                else if (prompt_tty) {
                    need_prompt = 0;
                    fputs("> ", fe->out);
                    fflush(fe->out);
                }
            } else {
                parsed p;
                memset(&p, 0, sizeof p);
                if (prepare_line(fe, copy, len, lineno, &p) == 0) {
                    if (submit(fe, &p, lineno) == 1) {
                        /* queue full: hold the line (and stop reading) until a FINAL */
                        pending = p;
                        have_pending = 1;
                        pending_line = lineno;
                    } else {
                        parsed_clear(fe, &p);
                    }
                }
            }
            free(copy);
            drain(fe, 0, NULL);
        }
        if (scan && scan == buf.len) scan = buf.len = 0;
        else if (scan > (1u << 20)) {
            memmove(buf.p, buf.p + scan, buf.len - scan);
            buf.len -= scan;
            scan = 0;
        }
        if ((eof || stopping) && !have_pending && inflight(fe) == 0) break;

        struct pollfd pf[2] = {{.fd = fe->wake[0], .events = POLLIN}, {.fd = fe->in_fd, .events = POLLIN}};
        int nfds = (eof || stopping || have_pending) ? 1 : 2;
        int pr = poll(pf, (nfds_t)nfds, have_pending || need_prompt ? RETRY_MS : -1);
        if (pr < 0 && errno != EINTR) {
            rc = h->error(h, PAGODA_ERR_IO, "poll: %s", strerror(errno));
            pthread_mutex_lock(&fe->mu);
            fe->stop_req = 1;
            pthread_mutex_unlock(&fe->mu);
            continue;
        }
        if (pr > 0 && (pf[0].revents & POLLIN)) {
            char b[256];
            while (read(fe->wake[0], b, sizeof b) > 0) {}
        }
        if (nfds == 2 && (pf[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            char chunk[65536];
            ssize_t n = read(fe->in_fd, chunk, sizeof chunk);
            if (n > 0) {
                const char *c = chunk;
                size_t cn = (size_t)n;
                if (skipping) { /* dropping the rest of an overlong line */
                    const char *nl = memchr(c, '\n', cn);
                    if (nl) {
                        skipping = 0;
                        cn -= (size_t)(nl + 1 - c);
                        c = nl + 1;
                    } else {
                        cn = 0;
                    }
                }
                if (buf.len - scan + cn > MAX_LINE && !memchr(c, '\n', cn)) {
                    lineno++;
                    write_error(fe, NULL, lineno, "the line is longer than 64 MiB: skipped");
                    scan = buf.len = 0;
                    skipping = 1;
                } else if (cn && sb_put(&buf, c, cn) < 0) {
                    rc = h->error(h, PAGODA_ERR_NOMEM, "out of memory reading input");
                    pthread_mutex_lock(&fe->mu);
                    fe->stop_req = 1;
                    pthread_mutex_unlock(&fe->mu);
                }
            } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
                eof = 1;
            }
        }
    }
    drain(fe, 0, NULL);
    free(buf.p);
    pthread_mutex_lock(&fe->mu);
    fe->prompt_tty = 0; /* interrupt() writes no more */
    pthread_mutex_unlock(&fe->mu);
out:
    if (own_in) close(fe->in_fd);
    if (own_out && fe->out) fclose(fe->out);
    else if (fe->out) fflush(fe->out);
    fe->out = NULL;
    return rc;
}

static void stdin_stop(void *ctx)
{
    stdin_fe *fe = ctx;
    pthread_mutex_lock(&fe->mu);
    fe->stop_req = 1;
    pthread_mutex_unlock(&fe->mu);
    poke(fe);
}

/* [signal watcher thread] Ctrl-C: a reply streaming in chat is stopped
 * (the run loop cancels it) and the chat goes on; otherwise, or when one
 * was already asked to stop, the server quits, the terminal line ended
 * first. */
static int stdin_interrupt(void *ctx)
{
    stdin_fe *fe = ctx;
    int took = 0;
    pthread_mutex_lock(&fe->mu);
    if (fe->turn_active && !fe->interrupt_req && !fe->stop_req) {
        fe->interrupt_req = 1;
        took = 1;
        poke(fe);
    } else {
        say_quitting_locked(fe);
    }
    pthread_mutex_unlock(&fe->mu);
    return took;
}

static int stdin_create(const pagoda_host *h, void **ctx, char *err, size_t err_len)
{
    stdin_fe *fe = calloc(1, sizeof *fe);
    if (!fe) {
        snprintf(err, err_len, "out of memory");
        return PAGODA_ERR_NOMEM;
    }
    fe->host = h;
    const char *fmt = h->config_str(h, "format", "json");
    const char *mode = h->config_str(h, "mode", "auto");
    if (!strcmp(fmt, "json")) fe->text_format = 0;
    else if (!strcmp(fmt, "text")) fe->text_format = 1;
    else {
        snprintf(err, err_len, "[frontend.stdin] format = %s: expected json or text", fmt);
        free(fe);
        return PAGODA_ERR_INVALID;
    }
    if (!strcmp(mode, "auto")) fe->mode = MODE_AUTO;
    else if (!strcmp(mode, "batch")) fe->mode = MODE_BATCH;
    else if (!strcmp(mode, "chat")) fe->mode = MODE_CHAT;
    else {
        snprintf(err, err_len, "[frontend.stdin] mode = %s: expected auto, batch or chat", mode);
        free(fe);
        return PAGODA_ERR_INVALID;
    }
    snprintf(fe->input, sizeof fe->input, "%s", h->config_str(h, "input", "-"));
    snprintf(fe->output, sizeof fe->output, "%s", h->config_str(h, "output", "-"));
    fe->max_tokens = (int32_t)h->config_int(h, "max_tokens", 0);
    fe->temperature = h->config_float(h, "temperature", -1);
    if (pipe2(fe->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
        snprintf(err, err_len, "pipe: %s", strerror(errno));
        free(fe);
        return PAGODA_ERR_IO;
    }
    pthread_mutex_init(&fe->mu, NULL);
    *ctx = fe;
    return PAGODA_OK;
}

static void stdin_destroy(void *ctx)
{
    stdin_fe *fe = ctx;
    if (!fe) return;
    for (sreq *r = fe->list, *n; r; r = n) { /* only if run() never ran to its end */
        n = r->next;
        sreq_free(r);
    }
    for (int i = 0; i < fe->n_hist; i++) free((char *)fe->hist[i].content);
    free(fe->hist);
    close(fe->wake[0]);
    close(fe->wake[1]);
    pthread_mutex_destroy(&fe->mu);
    free(fe);
}

static const pagoda_config_key stdin_keys[] = {
    {"format", PAGODA_KEY_STRING, "json", 0, 0, "json: one JSON object per result line; text: the text alone"},
    {"mode", PAGODA_KEY_STRING, "auto", 0, 0, "auto (chat when input is a terminal), batch or chat"},
    {"input", PAGODA_KEY_STRING, "-", 0, 0, "file to read requests from; - is standard input"},
    {"output", PAGODA_KEY_STRING, "-", 0, 0, "file to write results to; - is standard output"},
    {"max_tokens", PAGODA_KEY_INT, "0", 0, 2147483647.0, "default max_tokens (0: the engine's default)"},
    {"temperature", PAGODA_KEY_FLOAT, "-1", -1, 2, "default temperature (-1: the engine's default)"},
    {NULL, 0, NULL, 0, 0, NULL},
};

static const pagoda_frontend_ops stdin_ops = {
    .struct_size = sizeof(pagoda_frontend_ops),
    .run = stdin_run,
    .stop = stdin_stop,
    .interrupt = stdin_interrupt,
};

static const pagoda_plugin_desc stdin_desc = {
    PAGODA_DESC_HEADER(PAGODA_KIND_FRONTEND),
    .name = "stdin",
    .version = PAGODA_VERSION_STRING,
    .description = "requests from lines of standard input (plain or JSON), results as JSON lines; chat on a terminal",
    .config_keys = stdin_keys,
    .probe = NULL,
    .create = stdin_create,
    .destroy = stdin_destroy,
    .ops = &stdin_ops,
};

PAGODA_PLUGIN(stdin_desc)
