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

struct pagoda_draft_model;
struct pagoda_model;
struct pagoda_backend;

/* What a drafter is configured with ([engine] spec_* keys). */
typedef struct pagoda_drafter_config {
    int32_t ngram;               /* ngram: the length of the suffix matched (1..8) */
    int32_t max_seq_len;         /* the engine's context */
    struct pagoda_draft_model *draft_model; /* draft: the opened spec_draft_model */
} pagoda_drafter_config;

/* One sequence's part of a propose_batch call. */
typedef struct pagoda_draft_req {
    void *state;
    const int32_t *tokens;
    int32_t n, max;
    int32_t *out;                /* [max] */
    int32_t k;                   /* out: tokens proposed */
} pagoda_draft_req;

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
    /* [engine thread] Optional (NULL: the engine calls propose for each).
     * What propose does, for reqs[0 .. count) at once (distinct states):
     * reqs[i].k = what propose(state, tokens, n, max, out) would return, and
     * the same tokens (a model drafter runs one forward pass per draft
     * position for all of them instead of one per sequence). */
    void (*propose_batch)(struct pagoda_draft_req *reqs, int32_t count);
} pagoda_drafter_ops;

/* The drafter of this name, or NULL ("ngram", "draft"; "off" is not a
 * drafter). */
const pagoda_drafter_ops *pagoda_drafter_find(const char *name);

/* The `draft` drafter (drafter_model.c): its model, forward pass and KV
 * pool of n_seats seats of max_seq_len tokens, shared by the sequences
 * (each takes a seat while it drafts). open refuses, naming
 * spec_draft_model, a file that does not load, whose vocabulary is not
 * target's token for token, or whose architecture the forward pass lacks.
 * [engine create / destroy] */
typedef struct pagoda_draft_model pagoda_draft_model;
int pagoda_draft_model_open(const char *path, const struct pagoda_model *target,
                            struct pagoda_backend *be, int32_t n_seats, int32_t max_seq_len,
                            int32_t block_size, pagoda_draft_model **out, char *err, size_t err_len);
void pagoda_draft_model_free(pagoda_draft_model *dm);
/* What open will allocate for these arguments, read from the file's header
 * before anything is (the memory plan's draft lines): its weights (the
 * file's data section), its KV pool (n_seats seats of min(max_seq_len, its
 * context) tokens in F32) and its activations (the forward pass's, and
 * the host rows its logits land in, one a seat). A file that does not
 * open is refused, naming spec_draft_model, as open would. */
typedef struct pagoda_draft_model_bytes {
    uint64_t weights, kv, act;
    uint64_t repacked; /* the backend's copies beside its weights (plan only: weight_extra) */
    int32_t seats, seq_len;
} pagoda_draft_model_bytes;
/* weight_extra (may be NULL: repacked 0): the backend's ABI 1.15
 * weight_extra_bytes, asked for each of the draft's matmul weights as the
 * main model's are (memplan_weights.c; the draft runs whole, on one rank). */
int pagoda_draft_model_plan(const char *path, int32_t n_seats, int32_t max_seq_len, int32_t block_size,
                            int (*weight_extra)(void *ctx, int dtype, int64_t N, int64_t K, uint64_t *out),
                            void *weight_extra_ctx, pagoda_draft_model_bytes *out, char *err,
                            size_t err_len);
/* The bytes an opened draft model holds, counted the same way. */
void pagoda_draft_model_bytes_of(const pagoda_draft_model *dm, pagoda_draft_model_bytes *out);
/* Forward passes the draft model has run, ever, and the rows they held
 * (tests, the bench: batching shows as fewer passes for the same rows). */
void pagoda_draft_model_passes(const pagoda_draft_model *dm, uint64_t *passes, uint64_t *rows);
/* The margin of each draft of state's latest proposal: its logit minus the
 * runner-up's (>= 0; [k], valid until the next proposal). Two runs whose
 * matmuls group rows differently may round a near tie either way; a test
 * comparing them reads this to tell a tie from a wrong token. */
const float *pagoda_drafter_model_margins(const void *state);
/* One line for the start-up log: its shape, weight and KV pool bytes. */
void pagoda_draft_model_describe(const pagoda_draft_model *dm, char *out, size_t len);
extern const pagoda_drafter_ops pagoda_drafter_model_ops;

#endif /* PAGODA_DRAFTER_H */
