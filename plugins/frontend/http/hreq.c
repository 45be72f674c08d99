/*
 * hreq.c: an HTTP request's life: creation, reference counting and
 * freeing, the engine callback that queues a copy of each event and wakes
 * the connection's thread, cancellation, and the clock and socket checks a
 * waiting thread uses to notice a client that went away.
 * Not for: what is done with the events (output.c) or how the request got
 * parsed and submitted (generate.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "api/api.h"
#include "api/reasoning.h"
#include "hreq.h"
#include "structured.h"

static uint64_t splitmix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

void ev_free(ev_item *e)
{
    free(e->blocks);
    free(e->text);
    free(e->error);
    free(e);
}

static void hreq_free(hreq *hr)
{
    for (ev_item *e = hr->head, *n; e; e = n) {
        n = e->next;
        ev_free(e);
    }
    for (int i = 0; i < hr->n_choices; i++) {
        free(hr->choices[i].text.p);
        free(hr->choices[i].error);
        free(hr->choices[i].echo);
        free(hr->choices[i].pieces.p);
        json_decref(hr->choices[i].lp);
        st_choice_free(&hr->choices[i]);
        reasoning_free(&hr->choices[i]);
        api_norm_free(&hr->choices[i]);
        json_decref(hr->choices[i].trace);
    }
    free(hr->choices);
    api_state_free(hr->as);
    free(hr->out.p);
    pthread_mutex_destroy(&hr->mu);
    pthread_cond_destroy(&hr->cv);
    free(hr);
}

void hreq_release(hreq *hr)
{
    pthread_mutex_lock(&hr->mu);
    int left = --hr->refs;
    pthread_mutex_unlock(&hr->mu);
    if (left > 0) return;
    http_fe *fe = hr->fe;
    pthread_mutex_lock(&fe->mu);
    if (hr->prev) hr->prev->next = hr->next;
    else fe->list = hr->next;
    if (hr->next) hr->next->prev = hr->prev;
    fe->live--;
    pthread_cond_broadcast(&fe->cv);
    pthread_mutex_unlock(&fe->mu);
    hreq_free(hr);
}

hreq *hreq_new(http_fe *fe, int kind, int n_choices)
{
    hreq *hr = calloc(1, sizeof *hr);
    if (!hr) return NULL;
    hr->choices = calloc((size_t)n_choices, sizeof *hr->choices);
    if (!hr->choices) {
        free(hr);
        return NULL;
    }
    hr->fe = fe;
    hr->kind = kind;
    hr->n_choices = n_choices;
    hr->refs = 1; /* the connection's */
    hr->logprobs = -1;
    hr->sock = -1;
    pthread_mutex_init(&hr->mu, NULL);
    pthread_cond_init(&hr->cv, NULL);
    for (int i = 0; i < n_choices; i++) {
        hr->choices[i].hr = hr;
        hr->choices[i].index = i;
    }
    uint64_t a = splitmix(atomic_fetch_add(&fe->seq, 1) ^ (uint64_t)time(NULL) << 20);
    uint64_t b = splitmix(a ^ (uint64_t)(uintptr_t)hr);
    snprintf(hr->id, sizeof hr->id, "%s-%016llx%016llx", kind == KIND_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)a, (unsigned long long)b);
    hr->created = time(NULL);
    pthread_mutex_lock(&fe->mu);
    hr->next = fe->list;
    if (fe->list) fe->list->prev = hr;
    fe->list = hr;
    fe->live++;
    pthread_mutex_unlock(&fe->mu);
    return hr;
}

/* [engine thread] Copy the event and wake the connection's thread. */
void on_event(void *user, const pagoda_event *ev)
{
    choice *ch = user;
    hreq *hr = ch->hr;
    http_fe *fe = hr->fe;
    ev_item *e = calloc(1, sizeof *e);
    int final = ev->type == PAGODA_EVENT_FINAL;
    if (e) {
        e->choice = ch->index;
        e->type = ev->type;
        if (ev->text_len) {
            e->text = malloc(ev->text_len + 1);
            if (e->text) {
                memcpy(e->text, ev->text, ev->text_len);
                e->text[ev->text_len] = 0;
                e->text_len = ev->text_len;
            }
        }
        e->token = ev->token;
        e->logprob = ev->logprob;
        e->n_top = ev->n_top < 0 ? 0 : ev->n_top > PAGODA_MAX_TOP_LOGPROBS ? PAGODA_MAX_TOP_LOGPROBS : ev->n_top;
        if (e->n_top && ev->top) memcpy(e->top, ev->top, sizeof(*e->top) * (size_t)e->n_top);
        else e->n_top = 0;
        e->finish_reason = ev->finish_reason;
        if (ev->error) e->error = strdup(ev->error);
        e->usage = ev->usage;
        e->tier_cached = ev->struct_size >= offsetof(pagoda_event, tier_cached_tokens) +
                                                sizeof ev->tier_cached_tokens
                             ? ev->tier_cached_tokens : 0;
        /* position came with ABI minor 1; the host is never older than the plugin */
        e->position = ev->struct_size >= offsetof(pagoda_event, position) + sizeof ev->position
                      ? ev->position : -1;
        /* the trace came with minor 2 */
        if (hr->trace && ev->struct_size >= offsetof(pagoda_event, blocks) + sizeof ev->blocks &&
            ev->step) {
            e->step = ev->step;
            e->step_seqs = ev->step_seqs;
            e->step_tokens = ev->step_tokens;
            e->kv_tokens = ev->kv_tokens;
            if (ev->n_blocks > 0 && ev->blocks &&
                (e->blocks = malloc(sizeof(int32_t) * (size_t)ev->n_blocks))) {
                memcpy(e->blocks, ev->blocks, sizeof(int32_t) * (size_t)ev->n_blocks);
                e->n_blocks = ev->n_blocks;
            }
        }
    }
    pthread_mutex_lock(&hr->mu);
    if (e) {
        if (hr->tail) hr->tail->next = e;
        else hr->head = e;
        hr->tail = e;
    }
    if (final) {
        ch->final = 1;
        hr->finals_pending--;
        if (!e) { /* out of memory: still record how it ended */
            ch->finish_reason = PAGODA_FINISH_ERROR;
        }
    }
    pthread_cond_broadcast(&hr->cv);
    pthread_mutex_unlock(&hr->mu);
    if (final) {
        /* release first: run() waits for inflight == 0, so fe must not be
         * touched after that count drops */
        hreq_release(hr);
        pthread_mutex_lock(&fe->mu);
        fe->inflight--;
        pthread_cond_broadcast(&fe->cv);
        pthread_mutex_unlock(&fe->mu);
    }
}

int hreq_take_cancels(hreq *hr, uint64_t *ids)
{
    int n = 0;
    pthread_mutex_lock(&hr->mu);
    for (int i = 0; i < hr->n_choices; i++) {
        choice *c = &hr->choices[i];
        if (c->id_known && !c->final && !c->cancel_sent) {
            c->cancel_sent = 1;
            ids[n++] = c->id;
        }
    }
    pthread_mutex_unlock(&hr->mu);
    return n;
}

/* Cancel every submission of hr that has no FINAL yet. */
void hreq_cancel(hreq *hr)
{
    uint64_t ids[MAX_CHOICES];
    int n = hreq_take_cancels(hr, ids);
    for (int i = 0; i < n; i++) hr->fe->host->cancel(hr->fe->host, ids[i]);
}

/* Has the peer closed its end? A pending next request (pipelining) reads as alive. */
int peer_gone(int fd)
{
    if (fd < 0) return 0;
    char c;
    ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0) return 1;
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return 1;
    return 0;
}

int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Time to peek at the client again? Events wake a waiter far more often than
 * POLL_MS, so this goes by the clock, not by the wait timing out. */
int check_due(int64_t *next)
{
    int64_t t = now_ms();
    if (t < *next) return 0;
    *next = t + POLL_MS;
    return 1;
}

void deadline_in(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_nsec += (long)ms * 1000000L;
    ts->tv_sec += ts->tv_nsec / 1000000000L;
    ts->tv_nsec %= 1000000000L;
}
