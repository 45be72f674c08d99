/*
 * engine.h: the serving loop. One engine thread owns the scheduler policy,
 * the KV-cache policy and the backend; frontends submit and cancel from any
 * thread. Each step: take arrivals and cancels, ask the scheduler for a
 * plan, run one flattened forward pass, sample, stream events, finish
 * sequences. Not for: parsing requests (frontends) or the math (forward.c).
 */
#ifndef PAGODA_ENGINE_H
#define PAGODA_ENGINE_H

#include "pagoda/constraint.h"
#include "pagoda/host.h"
#include "pagoda/kvcache.h"
#include "pagoda/scheduler.h"
#include "engine_swa.h"
#include "forward.h"
#include "model.h"

typedef struct pagoda_scheduler {
    pagoda_scheduler_ops ops;
    void *ctx;
    const char *name;
} pagoda_scheduler;

typedef struct pagoda_kvcache {
    pagoda_kvcache_ops ops;
    void *ctx;
    const char *name;
} pagoda_kvcache;

/* A loaded constraint engine (structured output). */
typedef struct pagoda_constraint {
    pagoda_constraint_ops ops;
    void *ctx;
    const char *name;
} pagoda_constraint;

typedef struct pagoda_engine_opts {
    int32_t max_seq_len;        /* context per sequence (<= the model's) */
    int32_t n_blocks;           /* KV pool blocks */
    int32_t block_size;         /* tokens per block */
    int32_t kv_dtype;           /* PAGODA_DTYPE_F16, Q8_0 or F32 (pagoda_kv_layout) */
    int32_t max_queue;          /* waiting requests before submit says NOSPACE */
    uint64_t seed;              /* 0: a random seed per request without one */
    int32_t default_max_tokens; /* when a request gives none */
    float temperature, top_p, min_p;
    int32_t top_k;
    bool check_invariants;      /* verify KV accounting after every step */
    bool no_realign;            /* engine.realign = off: prompts keep their own tokens
                                 * (engine_realign.c does nothing) */
    int32_t mla_decompress_min; /* MLA (deepseek2): a prefill chunk of at least this many
                                 * tokens runs decompressed (forward_mla.h); 0: off
                                 * (engine.mla_decompress_min, default 320, sets it) */
    int32_t mla_decompress_ctx; /* ... when its context (cached prefix + chunk) is at most
                                 * this, capped by max_seq_len (engine.mla_decompress_ctx,
                                 * default 4096; 0: max_batched_tokens) */
    int32_t swa_kv;             /* pagoda_swa_kv: a sliding-window model's local layers keep
                                 * only their window (0, the default) or every position */
    /* speculative decoding (docs/speculation.md): the drafter ("" or "off":
     * none), the most tokens it drafts a step (1 .. max_seq_len - 1), its
     * n-gram length, and the decoding sequences above which a step drafts
     * nothing (the step is compute-bound then; 0: never draft in a batch
     * of more than one) */
    char speculative[16];
    int32_t spec_max_draft;
    int32_t spec_ngram;
    int32_t spec_max_seqs;
    const char *spec_draft_model; /* speculative = draft: its GGUF (NULL or ""); must outlive
                                  * the engine's create */
    bool spec_draft_unbatched;  /* spec_draft_batch = off: the draft model drafts one sequence
                                 * at a time (the side-by-side measurement's other side) */
    const pagoda_forward_tp *tp; /* tensor parallelism: this rank's share (NULL: the whole
                                 * model); must outlive the engine */
} pagoda_engine_opts;

typedef struct pagoda_engine pagoda_engine;
struct pagoda_metrics;

/* The logit rows speculative decoding reserves for draft positions beside
 * the max_num_seqs sampled rows, for these options and scheduler limits
 * (0 when it is off); the memory plan counts them. */
int32_t pagoda_engine_spec_rows(const pagoda_engine_opts *opts, int32_t max_num_seqs,
                                int32_t max_batched_tokens);
/* The seats of the draft drafter's own KV pool (one for each sequence that
 * may draft in a step): what the engine opens it with and the memory plan
 * counts. */
int32_t pagoda_engine_spec_draft_seats(const pagoda_engine_opts *opts, int32_t max_num_seqs);

/* Build the engine: sizes activations from the scheduler's limits, makes the
 * KV pool, initialises the KV policy. Takes no ownership of its arguments. */
int pagoda_engine_create(pagoda_model *m, pagoda_backend *be, pagoda_scheduler *sched,
                         pagoda_kvcache *kv, const pagoda_engine_opts *opts,
                         pagoda_engine **out, char *err, size_t err_len);
/* The constraint engine for requests with a spec (before start; NULL, the
 * default: such requests are refused). Not owned. */
int pagoda_engine_set_constraint(pagoda_engine *e, pagoda_constraint *c);
/* For the bench and tests: fn gets, on the engine thread, the time each
 * constrained sample waited for its mask (0 when the prefetch had it
 * ready; the inline fill when there was none). Before start, or while
 * the engine is idle. */
void pagoda_engine_set_mask_observer(pagoda_engine *e,
                                     void (*fn)(void *user, double seconds, bool prefetched),
                                     void *user);
/* [any thread] Compile a spec with c as submit() would (host check_constraint). */
int pagoda_constraint_check(pagoda_constraint *c, int32_t type, const char *text, size_t len,
                            bool strict, char *err, size_t err_len);
struct pagoda_tp;
/* Tensor parallelism on rank 0 (before start): every step is broadcast to
 * the other ranks before its forward pass, and KV block copies are
 * recorded for them. Not owned. */
void pagoda_engine_set_tp(pagoda_engine *e, struct pagoda_tp *tp);
/* Tensor parallelism on the other ranks: the engine is never started;
 * this runs the worker loop (tp.h) on the caller's thread until rank 0
 * says stop or something fails. */
int pagoda_engine_tp_worker(pagoda_engine *e, struct pagoda_tp *tp, char *err, size_t err_len);
/* Optional metrics sink (before start). */
void pagoda_engine_set_metrics(pagoda_engine *e, struct pagoda_metrics *m);
/* Start the engine thread. */
int pagoda_engine_start(pagoda_engine *e);
/* Stop accepting, end every request with a FINAL (cancelled), join the
 * thread. Safe to call twice. */
void pagoda_engine_stop(pagoda_engine *e);
/* Stop (if running) and free. */
void pagoda_engine_free(pagoda_engine *e);

/* [any thread] see pagoda_host.submit / cancel. */
int pagoda_engine_submit(pagoda_engine *e, const pagoda_request *req, pagoda_event_cb cb,
                         void *user, uint64_t *id, char *err, size_t err_len);
int pagoda_engine_cancel(pagoda_engine *e, uint64_t id);
void pagoda_engine_request_defaults(const pagoda_engine *e, pagoda_request *req);
void pagoda_engine_get_stats(pagoda_engine *e, pagoda_engine_stats *st);
/* [any thread] What the backend held beside the weights after the last
 * forward pass (ABI 1.15 weight_extra_held, read on the engine thread and
 * published under the engine's lock before the step's events); 0 before
 * the first pass or without the op. /metrics'
 * pagoda_memory_repacked_held_bytes. */
uint64_t pagoda_engine_extra_held_bytes(pagoda_engine *e);
/* Wait until no request is queued or running (for tests and the bench). */
void pagoda_engine_wait_idle(pagoda_engine *e);
/* The KV policy's stats, read directly: call it on the engine thread (a step
 * hook) or while the engine is idle. pagoda_engine_get_stats is the
 * [any thread] view. */
int pagoda_engine_kv_stats(pagoda_engine *e, pagoda_kv_stats *st);
/* A hook called on the engine thread after every step (tests, bench). */
void pagoda_engine_set_step_hook(pagoda_engine *e, void (*hook)(void *user, pagoda_engine *e),
                                 void *user);
/* Verify KV accounting after every step (tests); violations are logged
 * and counted. */
void pagoda_engine_set_check_invariants(pagoda_engine *e, bool on);
/* Invariant violations seen so far (check_invariants). */
int64_t pagoda_engine_invariant_failures(const pagoda_engine *e);
const pagoda_model *pagoda_engine_model(const pagoda_engine *e);
/* [any thread] A text prompt's tokens p[0..n) as submit would realign
 * them to the recent replies' tokens (engine_realign.c; no cache_salt,
 * at most max_seq_len - 1 tokens): a malloc'd array of *n_out tokens, or
 * NULL when they stay as they are. For counting a prompt as the engine
 * will (the host's tokenize). */
int32_t *pagoda_engine_realign(pagoda_engine *e, const int32_t *p, int32_t n, int32_t *n_out);
const pagoda_engine_opts *pagoda_engine_get_opts(const pagoda_engine *e);
/* The sliding-window layers' pool (engine_swa.h): its geometry, and how
 * much of it is in use now. Read it on the engine thread (a step hook) or
 * while the engine is idle. */
typedef struct pagoda_engine_swa_stats {
    pagoda_swa_geometry geometry;   /* geometry.window false: no such pool */
    int32_t free_seats;
    int32_t free_blocks, used_blocks;
    size_t pool_bytes;              /* the window pool as allocated */
    size_t main_pool_bytes;         /* the main pool as allocated (the sink included) */
    int64_t sink_rows_total;        /* rows recomputed inside a prefix hit, ever: their global
                                     * KV went to the sink, not to the shared blocks */
} pagoda_engine_swa_stats;
int pagoda_engine_get_swa_stats(pagoda_engine *e, pagoda_engine_swa_stats *st);

/* Copy KV blocks (for KV policies through the host table). */
int pagoda_engine_copy_blocks(pagoda_engine *e, const int32_t *src, const int32_t *dst, int32_t n);

/* A KV policy's slower tier, through the host table (host.h, ABI 1.11):
 * the bytes of one block (every layer, K then V; 0 with the reason in why
 * when blocks cannot leave the pool whole), one block copied out (dst) or
 * in (src), and the fingerprint of what those bytes depend on. [engine
 * thread] */
size_t pagoda_engine_kv_block_bytes(pagoda_engine *e, char *why, size_t why_len);
int pagoda_engine_kv_move_block(pagoda_engine *e, int32_t block, void *dst, const void *src,
                                size_t n);
const char *pagoda_engine_kv_fingerprint(pagoda_engine *e);
/* Whether the KV pool is device memory (the backend's buffers are not host
 * RAM): host RAM is then a tier of its own (host.h, ABI 1.14). */
bool pagoda_engine_kv_on_device(const pagoda_engine *e);

/* ----------------------------------------------------------- inspection */

/* One step as inspection remembers it. */
typedef struct pagoda_step_record {
    uint64_t step;               /* its number (stats' steps_total after it) */
    int32_t n_seqs;              /* sequences in its batch */
    int32_t prefill_tokens;      /* prompt tokens (and recomputed ones after a preemption) */
    int32_t decode_tokens;       /* one per sequence computing the token it last sampled */
    int32_t draft_tokens;        /* speculative decoding: drafted positions verified (not in
                                  * prefill_tokens or decode_tokens) */
    int32_t accepted_tokens;     /* of those, the drafts that agreed with the model */
    float ms;                    /* wall time: schedule, forward pass, sampling, events */
} pagoda_step_record;

#define PAGODA_STEP_HISTORY 256  /* steps a snapshot holds */

/* One live sequence in a snapshot. */
typedef struct pagoda_snapshot_seq {
    uint64_t id;
    char request_id[64];         /* "" when the frontend gave none */
    int32_t state;               /* PAGODA_SEQ_WAITING or PAGODA_SEQ_RUNNING */
    int32_t n_prompt, n_tokens, n_computed;
    int32_t n_cached;            /* prompt tokens found in the prefix cache at its admission */
    int32_t max_total;           /* prompt + max_tokens */
    int32_t n_preemptions;
    int32_t n_blocks;            /* its block table: table[first_block .. + n_blocks) */
    int32_t first_block;
} pagoda_snapshot_seq;

/* The engine between two steps. Every field is as of one moment; the
 * counts agree with pagoda_engine_get_stats at that moment. */
typedef struct pagoda_engine_snapshot {
    uint64_t version;            /* moves whenever anything below may have changed */
    uint64_t step;               /* steps run so far */
    double t_s;                  /* CLOCK_MONOTONIC seconds when taken */
    double build_us;             /* engine-thread time this snapshot took */
    double inspect_total_ms;     /* engine-thread time every snapshot took, this one included */
    uint64_t inspect_count;      /* snapshots taken, this one included */
    int32_t block_size, n_blocks;
    uint64_t kv_block_bytes;     /* one block's K and V in every layer */
    pagoda_kv_stats kv;          /* the KV policy's stats */
    bool blocks_from_policy;     /* the policy's inspect op filled blocks (else: block tables) */
    pagoda_kv_block_info *blocks;/* [n_blocks] */
    int32_t n_seqs;              /* running first (admission order), then waiting (arrival) */
    pagoda_snapshot_seq *seqs;
    int32_t *table;              /* the running sequences' block tables, concatenated */
    int32_t running, waiting;
    int64_t prompt_tokens_total, generation_tokens_total, requests_finished_total,
        preemptions_total;
    int32_t n_steps;             /* steps[0] oldest .. steps[n_steps - 1] the latest */
    pagoda_step_record steps[PAGODA_STEP_HISTORY];
    int refs_;                   /* engine_inspect.c */
} pagoda_engine_snapshot;

/* [any thread] A snapshot of the engine, taken by the engine thread at its
 * next step boundary (it wakes an idle engine; callers waiting at once
 * share one). Before start and after stop it is taken on this thread.
 * Release it with pagoda_engine_snapshot_release. PAGODA_ERR_NOMEM, or
 * PAGODA_OK with *out set. */
int pagoda_engine_snapshot_take(pagoda_engine *e, pagoda_engine_snapshot **out);
void pagoda_engine_snapshot_release(pagoda_engine_snapshot *s);

#endif /* PAGODA_ENGINE_H */
