/*
 * store.c: the Responses store (store.h): a doubly linked LRU list under
 * one mutex, each entry the serialized conversation. Lookups walk the
 * list: at most STORE_MAX_ENTRIES, and each lookup precedes a model run
 * that costs far more.
 * Not for: what a conversation holds (responses.c).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"

typedef struct entry {
    struct entry *prev, *next;  /* most recent first */
    char *key, *id;
    char *text;                 /* the messages, serialized */
    size_t bytes;
} entry;

struct resp_store {
    pthread_mutex_t mu;
    entry *head, *tail;
    size_t n, bytes;
};

resp_store *store_new(void)
{
    resp_store *s = calloc(1, sizeof *s);
    if (s) pthread_mutex_init(&s->mu, NULL);
    return s;
}

static void entry_free(entry *e)
{
    free(e->key);
    free(e->id);
    free(e->text);
    free(e);
}

static void unlink_entry(resp_store *s, entry *e)
{
    if (e->prev) e->prev->next = e->next;
    else s->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else s->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(resp_store *s, entry *e)
{
    e->prev = NULL;
    e->next = s->head;
    if (s->head) s->head->prev = e;
    s->head = e;
    if (!s->tail) s->tail = e;
}

void store_free(resp_store *s)
{
    if (!s) return;
    for (entry *e = s->head, *n; e; e = n) {
        n = e->next;
        entry_free(e);
    }
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static entry *find(resp_store *s, const char *key, const char *id)
{
    for (entry *e = s->head; e; e = e->next)
        if (!strcmp(e->id, id) && !strcmp(e->key, key)) return e;
    return NULL;
}

int store_put(resp_store *s, const char *key, const char *id, json_t *messages)
{
    char *text = json_dumps(messages, JSON_COMPACT);
    if (!text) return -1;
    size_t bytes = strlen(text) + strlen(key) + strlen(id);
    if (bytes > STORE_MAX_BYTES) {
        free(text);
        return -1;
    }
    entry *e = calloc(1, sizeof *e);
    if (e) {
        e->key = strdup(key);
        e->id = strdup(id);
    }
    if (!e || !e->key || !e->id) {
        free(text);
        if (e) entry_free(e);
        return -1;
    }
    e->text = text;
    e->bytes = bytes;
    pthread_mutex_lock(&s->mu);
    entry *old = find(s, key, id);
    if (old) {
        unlink_entry(s, old);
        s->n--;
        s->bytes -= old->bytes;
        entry_free(old);
    }
    while (s->tail && (s->n + 1 > STORE_MAX_ENTRIES || s->bytes + bytes > STORE_MAX_BYTES)) {
        entry *t = s->tail;
        unlink_entry(s, t);
        s->n--;
        s->bytes -= t->bytes;
        entry_free(t);
    }
    push_front(s, e);
    s->n++;
    s->bytes += bytes;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

json_t *store_get(resp_store *s, const char *key, const char *id)
{
    json_t *m = NULL;
    pthread_mutex_lock(&s->mu);
    entry *e = find(s, key, id);
    if (e) {
        unlink_entry(s, e);
        push_front(s, e);
        m = json_loads(e->text, 0, NULL);
    }
    pthread_mutex_unlock(&s->mu);
    return m;
}

void store_size(resp_store *s, size_t *entries, size_t *bytes)
{
    pthread_mutex_lock(&s->mu);
    *entries = s->n;
    *bytes = s->bytes;
    pthread_mutex_unlock(&s->mu);
}
