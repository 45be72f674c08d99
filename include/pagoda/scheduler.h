/*
 * pagoda/scheduler.h: scheduler policies. Each engine step the core asks
 * the policy for a batch plan: which sequences run, how many of their
 * tokens (a prefill chunk or one decode token), and whom to preempt when KV
 * blocks run out. The policy decides; the core carries the plan out.
 *
 * Threads: limits() is also called on the loading thread (memory plan,
 * engine creation) before the engine thread starts; every other op is
 * [engine thread]. Never two at once.
 *
 * Token accounting of a sequence: n_tokens tokens are known (the prompt,
 * then each sampled token); the first n_computed of them have KV in the
 * cache. Scheduling n tokens of a sequence computes tokens n_computed ..
 * n_computed + n - 1; when that reaches n_tokens the step samples the next
 * token. A decoding sequence therefore has n_tokens - n_computed == 1.
 *
 * Not for: block bookkeeping (kvcache.h) or running the plan (the core).
 */
#ifndef PAGODA_SCHEDULER_H
#define PAGODA_SCHEDULER_H

#include "pagoda/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pagoda_seq_state {
    PAGODA_SEQ_WAITING = 0,  /* holds no KV blocks */
    PAGODA_SEQ_RUNNING = 1   /* admitted: holds KV blocks for n_computed tokens at least */
} pagoda_seq_state;

/* A sequence as a scheduler sees it. Owned by the engine; read-only to the
 * policy; the env callbacks below update it in place. */
typedef struct pagoda_sched_seq {
    uint64_t id;
    uint64_t arrival;        /* arrival order, strictly increasing */
    double arrival_time;     /* seconds, monotonic clock */
    int32_t priority;        /* lower runs first (priority policy); 0 by default */
    int32_t state;           /* pagoda_seq_state */
    int32_t n_prompt;        /* prompt tokens */
    int32_t n_tokens;        /* tokens known: prompt + generated */
    int32_t n_computed;      /* tokens whose KV is cached */
    int32_t max_total;       /* the most tokens this sequence may reach */
    int32_t n_preemptions;   /* times it was preempted so far */
} pagoda_sched_seq;

/*
 * What schedule() works with. The waiting and running arrays are snapshots
 * taken before the call (waiting in arrival order, running in admission
 * order); admit/preempt change a sequence's state and counters at once but
 * not the arrays, which the core rebuilds after schedule() returns.
 */
typedef struct pagoda_sched_env {
    size_t struct_size;
    void *opaque;                          /* pass to every callback */
    pagoda_sched_seq *const *waiting;
    int32_t n_waiting;
    pagoda_sched_seq *const *running;
    int32_t n_running;
    int32_t block_size;                    /* tokens per KV block */

    /* Ask the KV policy to take a waiting sequence in: 0 and the sequence
     * is RUNNING with n_computed = its cached prefix, or PAGODA_ERR_NOSPACE. */
    int (*admit)(void *opaque, uint64_t seq_id);
    /* Make KV room for n_total tokens of a running sequence: 0 or NOSPACE. */
    int (*grow)(void *opaque, uint64_t seq_id, int32_t n_total);
    /* Preempt a running sequence by recompute: its blocks are released, it
     * becomes WAITING with n_computed = 0 and keeps every token produced.
     * If it was already planned this step, that plan entry is dropped. */
    int (*preempt)(void *opaque, uint64_t seq_id);
    /* Blocks the sequence would need to be admitted now (the KV policy's
     * blocks_needed, or ceil(n_tokens / block_size) without it), and
     * blocks free or evictable now. Both always set by the core. */
    int32_t (*blocks_needed)(void *opaque, uint64_t seq_id);
    int32_t (*free_blocks)(void *opaque);
    /* Add to this step's plan: run n_tokens (>= 1) of a RUNNING sequence
     * for which grow(n_computed + n_tokens) succeeded. */
    int (*plan)(void *opaque, uint64_t seq_id, int32_t n_tokens);
    /* The context per sequence in use (the resolved [engine] max_seq_len). */
    int32_t max_seq_len;
} pagoda_sched_env;

typedef struct pagoda_scheduler_ops {
    size_t struct_size;

    /* required. The most sequences and tokens one step may hold; the core
     * sizes activations by them. */
    int (*limits)(void *ctx, int32_t *max_num_seqs, int32_t *max_batched_tokens);

    /* required. Fill this step's plan through env->plan. env and its arrays
     * are valid only during the call. Planning nothing while sequences wait
     * and none run is allowed only if nothing fits (the engine then fails
     * the head of the queue with a "needs N KV blocks" error). An error
     * return is logged and the step is skipped (nothing runs this step). */
    int (*schedule)(void *ctx, const pagoda_sched_env *env);

    /* optional. A sequence arrived / finished (finished, cancelled or failed).
     * seq is the engine's and valid only during the call. Fallback:
     * nothing (a policy can find out from the env snapshots instead). */
    void (*on_arrival)(void *ctx, const pagoda_sched_seq *seq);
    void (*on_finish)(void *ctx, uint64_t seq_id);
} pagoda_scheduler_ops;

#ifdef __cplusplus
}
#endif
#endif /* PAGODA_SCHEDULER_H */
