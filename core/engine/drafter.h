/*
 * drafter.h: the drafter slot of speculative decoding. A drafter proposes
 * the next few tokens of a sequence; the engine verifies them in one
 * batched forward pass (engine_spec.c, docs/speculation.md), so a drafter
 * only ever affects speed, never which tokens come out. Drafters live in
 * the core behind this small versioned table (the slot is the core's, not
 * the plugin ABI's: a drafter needs the sequence's tokens every step and
 * nothing a plugin could not be given later through a new kind).
 * Not for: verification, adaptive draft lengths or budgets (engine_spec.c).
 *
 * Versioning: ops.struct_size first; fields are only ever appended, and
 * the engine checks the size before using an optional one (SQLite's vfs).
 */
#ifndef PAGODA_DRAFTER_H
#define PAGODA_DRAFTER_H

#include <stddef.h>
#include <stdint.h>

/* What a drafter is configured with ([engine] spec_* keys). */
typedef struct pagoda_drafter_config {
    int32_t ngram;               /* ngram: the length of the suffix matched (1..8) */
    int32_t max_seq_len;         /* the engine's context */
} pagoda_drafter_config;

typedef struct pagoda_drafter_ops {
    size_t struct_size;
    const char *name;            /* "ngram": the INI's and the metrics' name */
    /* [engine thread] State for one new sequence of at most max_total
     * tokens; NULL when out of memory (the sequence then runs without
     * speculation). Its memory is bounded whatever max_total is. */
    void *(*seq_new)(const pagoda_drafter_config *cfg, int32_t max_total);
    /* [engine thread] Free what seq_new made (NULL is fine). */
    void (*seq_free)(void *state);
    /* [engine thread] Propose up to max tokens to follow tokens[0 .. n)
     * (prompt and output so far; tokens[0 .. n) only ever grows at its end
     * between calls) into out[max]; returns how many (0: nothing to
     * propose). */
    int32_t (*propose)(void *state, const int32_t *tokens, int32_t n, int32_t max, int32_t *out);
} pagoda_drafter_ops;

/* The drafter of this name, or NULL ("ngram"; "off" is not a drafter). */
const pagoda_drafter_ops *pagoda_drafter_find(const char *name);

#endif /* PAGODA_DRAFTER_H */
