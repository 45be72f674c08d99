/*
 * store.h: the Responses API's memory of earlier turns (store: true), so a
 * follow-up with previous_response_id carries only its new input: each
 * response id maps to its conversation (chat messages, the instructions
 * left out, its own answer appended), scoped by the API key it was made
 * with (a key never finds another key's responses). Bounded: at most
 * STORE_MAX_ENTRIES responses and STORE_MAX_BYTES of conversation text;
 * past either the least recently used go first. In memory only: a restart
 * forgets everything.
 * Not for: the Responses shapes (responses.c).
 */
#ifndef PAGODA_HTTP_API_STORE_H
#define PAGODA_HTTP_API_STORE_H

#include <jansson.h>
#include <stddef.h>

#define STORE_MAX_ENTRIES 1024
#define STORE_MAX_BYTES (64u << 20)

typedef struct resp_store resp_store;

resp_store *store_new(void);
void store_free(resp_store *s);

/* Keeps messages (a JSON array; a copy is kept) under (key, id); an entry
 * larger than the whole bound is not kept. 0, or -1 (not kept). */
int store_put(resp_store *s, const char *key, const char *id, json_t *messages);

/* A new reference to (key, id)'s messages, now the most recently used;
 * NULL when there is none. */
json_t *store_get(resp_store *s, const char *key, const char *id);

/* How many entries and bytes it holds (tests). */
void store_size(resp_store *s, size_t *entries, size_t *bytes);

#endif /* PAGODA_HTTP_API_STORE_H */
