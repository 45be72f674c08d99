/*
 * callmemo.c: the recent Hermes calls as the model wrote them
 * (callmemo.h): a fixed ring of canonical -> written bodies under one
 * mutex, searched linearly (256 short strings, once per call in a
 * prompt's history).
 * Not for: parsing calls out of a stream (split.c, ../structured.c).
 */
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "callmemo.h"

typedef struct memo_entry {
    char *canonical, *written;
} memo_entry;

static pthread_mutex_t memo_mu = PTHREAD_MUTEX_INITIALIZER;
static memo_entry memo[CALLMEMO_SIZE];
static size_t memo_next; /* the slot replaced next */

char *hermes_call_body(const char *name, const char *args)
{
    json_t *av = args ? json_loads(args, JSON_DECODE_ANY, NULL) : NULL;
    json_t *call = av ? json_pack("{s:s,s:o}", "name", name ? name : "", "arguments", av) : NULL;
    char *txt = call ? json_dumps(call, 0) : strdup("{}");
    json_decref(call);
    if (!txt) return NULL;
    size_t l = strlen(txt);
    char *b = malloc(l + 3);
    if (b) {
        b[0] = '\n';
        memcpy(b + 1, txt, l);
        b[l + 1] = '\n';
        b[l + 2] = 0;
    }
    free(txt);
    return b;
}

/* the canonical body of a written one, or NULL when it is no call */
static char *canonical_of(const char *body, size_t n)
{
    json_t *v = json_loadb(body, n, 0, NULL);
    json_t *nm = json_is_object(v) ? json_object_get(v, "name") : NULL;
    json_t *a = json_is_object(v) ? json_object_get(v, "arguments") : NULL;
    char *out = NULL;
    /* only the shape the prompt writes back: a name and an arguments object */
    if (json_is_string(nm) && json_is_object(a) && json_object_size(v) == 2) {
        char *args = json_dumps(a, JSON_COMPACT);
        if (args) out = hermes_call_body(json_string_value(nm), args);
        free(args);
    }
    json_decref(v);
    return out;
}

void callmemo_note(const char *body, size_t n)
{
    if (!body || n == 0 || n > CALLMEMO_MAX_BODY) return;
    char *canon = canonical_of(body, n);
    if (!canon) return;
    if (strlen(canon) == n && !memcmp(canon, body, n)) {
        free(canon); /* written canonically: the prompt's own text already */
        return;
    }
    char *written = strndup(body, n);
    if (!written || strlen(written) != n) { /* a NUL inside: not a body to write back */
        free(canon);
        free(written);
        return;
    }
    pthread_mutex_lock(&memo_mu);
    size_t at = CALLMEMO_SIZE;
    for (size_t i = 0; i < CALLMEMO_SIZE && at == CALLMEMO_SIZE; i++)
        if (memo[i].canonical && !strcmp(memo[i].canonical, canon)) at = i; /* the latest writing wins */
    if (at == CALLMEMO_SIZE) {
        at = memo_next;
        memo_next = (memo_next + 1) % CALLMEMO_SIZE;
    }
    free(memo[at].canonical);
    free(memo[at].written);
    memo[at] = (memo_entry){canon, written};
    pthread_mutex_unlock(&memo_mu);
}

char *callmemo_written(const char *canonical)
{
    char *out = NULL;
    if (!canonical) return NULL;
    pthread_mutex_lock(&memo_mu);
    for (size_t i = 0; i < CALLMEMO_SIZE && !out; i++)
        if (memo[i].canonical && !strcmp(memo[i].canonical, canonical)) out = strdup(memo[i].written);
    pthread_mutex_unlock(&memo_mu);
    return out;
}

void callmemo_clear(void)
{
    pthread_mutex_lock(&memo_mu);
    for (size_t i = 0; i < CALLMEMO_SIZE; i++) {
        free(memo[i].canonical);
        free(memo[i].written);
        memo[i] = (memo_entry){NULL, NULL};
    }
    memo_next = 0;
    pthread_mutex_unlock(&memo_mu);
}

/* The plugin unloaded (dlclose): its memo goes with it, or the sanitizer
 * would see the entries as lost once the array is unmapped. */
__attribute__((destructor)) static void callmemo_unload(void) { callmemo_clear(); }
