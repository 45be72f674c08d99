/*
 * engine_internal.h: what the engine's files share among themselves: the
 * engine struct, the per-request sequence, and the few functions one file
 * calls in another. Threading: submit() and cancel() may be called from any
 * thread; they only touch the inbox under the lock. One engine thread owns
 * everything else: the sequence list, the scheduler and KV policies, the
 * forward pass and the samplers. Callbacks run on the engine thread without
 * the lock held.
 *   engine.c         the engine's life (create, start, stop, free), the
 *                    engine thread's loop, the [any thread] views
 *   engine_submit.c  request intake: defaults, validation, tokenizing,
 *                    the inbox and the cancel list
 *   engine_step.c    one step: the scheduler's environment, the flattened
 *                    batch, the forward pass, sampling
 *   engine_events.c  what a request hears: TOKEN events with stop-string
 *                    hold-back, the FINAL with usage and timings, and the
 *                    sequence's removal after it
 *   engine_constraint.c  structured output: a request's spec compiled at
 *                    submit, its token mask applied before sampling
 *   engine_swa.c     the sliding-window layers' own KV pool: seats, the
 *                    blocks of each sequence's window, its step batch
 *   engine_spec.c    speculative decoding: drafts planned into the step
 *                    within its budgets, adaptive draft lengths, counters
 *                    (the drafters behind drafter.h; verification is the
 *                    commit phase's, engine_step.c)
 *   engine_inspect.c inspection: the record of recent steps, and snapshots
 *                    of the whole state taken between steps
 *   engine_realign.c the recent finished sequences' tokens, and a text
 *                    prompt's tokens realigned to their generated ones
 *                    where both spell the same bytes (prefix reuse)
 * Not for: anything outside core/engine*.c; the public API is engine.h.
 */
#ifndef PAGODA_ENGINE_INTERNAL_H
#define PAGODA_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "drafter.h"
#include "engine.h"
#include "engine_swa.h"
#include "sampler.h"

#define ERR(...) snprintf(err, err_len, __VA_ARGS__)

typedef struct seq {
    pagoda_sched_seq s;          /* what the scheduler sees; s.id is the request id */
    struct seq *next;            /* inbox / list link */
    pagoda_event_cb cb;
    void *user;
    int32_t *tokens;             /* prompt + generated, [cap] */
    int32_t cap;
    int32_t max_new;             /* max_tokens after clamping */
    int32_t n_cached_first;      /* prefix-cache hit at first admission */
    int32_t n_tier_first;        /* of those, read back from the KV policy's tier */
    bool admitted_once;
    bool ignore_eos;
    int32_t logprobs;
    int32_t prompt_logprobs;     /* -1: the prompt is not scored; else its top-N */
    int32_t next_scored;         /* the next prompt index whose PROMPT event is due */
    bool score_only;             /* no generation: finish once the prompt is computed */
    char **stop;
    int32_t n_stop;
    size_t max_stop_len;
    int32_t *stop_ids;
    int32_t n_stop_ids;
    char *cache_salt;
    pagoda_constraint *con;      /* the engine that made matcher (NULL: unconstrained) */
    void *matcher;
    /* the next mask, computed by the prefetch worker while the forward pass
     * runs (engine_constraint.c); pm_state under e->pm_mu */
    uint32_t *premask;
    int pm_state;                /* PM_NONE, PM_QUEUED, PM_RUNNING, PM_DONE */
    int pm_status;
    char pm_err[256];
    struct seq *pm_next;         /* the worker's queue */
    struct pagoda_engine *pm_engine;
    pagoda_sampler *sampler;
    char *out;                   /* every output byte so far */
    size_t out_len, out_cap, emitted;
    double t_arrival, t_scheduled, t_first, t_last;
    bool cancelled;
    bool finished;
    /* window pool (engine_swa.c): seat + 1 while it holds one, else 0; the
     * end of the prefix-cache hit it was admitted with (positions below it
     * are recomputed for the window only: their global KV goes to the sink) */
    int32_t swa_seat;
    int32_t swa_shared_until;
    bool trace;                  /* TOKEN events carry how the token was made */
    int32_t n_cached_now;        /* prefix-cache hit at the latest admission */
    char request_id[64];         /* the frontend's name for it, for inspection */
    /* speculative decoding (engine_spec.c): the drafter's state (NULL: this
     * sequence never drafts), the request's cap, the adaptive length, the
     * steps it sits out after falling below break-even, and its record */
    void *spec_state;
    const pagoda_drafter_ops *spec_drafter;
    int32_t spec_max;
    int32_t spec_k;
    int32_t spec_cooldown;
    int32_t spec_pauses;
    float spec_ema;              /* accepted / drafted, smoothed over its verify steps */
    int32_t spec_since_pause;    /* tokens drafted since it last sat out */
    int64_t spec_drafted, spec_accepted;
} seq;

/* A recent finished sequence's tokens, for engine_realign.c. */
#define ENGINE_RECENT_SEQS 16   /* finished sequences kept */
#define ENGINE_REALIGN_SPAN 64  /* tokens of one realigned stretch, each side, at most */
#define ENGINE_REALIGN_SWAPS 64 /* realigned stretches of one prompt, at most */
typedef struct engine_recent {
    int32_t *tokens;             /* prompt + generated (NULL: an empty slot) */
    int32_t n, n_prompt;
    char *salt;                  /* its cache_salt, or NULL */
} engine_recent;

/* Speculative decoding's engine-wide part (engine_spec.c). */
typedef struct engine_spec {
    const pagoda_drafter_ops *drafter; /* NULL: speculation is off on this engine */
    pagoda_drafter_config cfg;
    pagoda_draft_model *draft;   /* speculative = draft: its model, forward pass, KV pool */
    int32_t max_draft;           /* [engine] spec_max_draft */
    int32_t max_seqs;            /* decoding sequences above which a step drafts nothing */
    int32_t rows;                /* logit rows reserved for draft positions */
    int32_t *plan_draft;         /* [max_num_seqs] draft tokens of plan entry i this step */
    pagoda_draft_req *reqs;      /* [max_num_seqs] a batched proposal's requests */
    int32_t *req_plan;           /* [max_num_seqs] the plan entry of each */
    int32_t step_drafted, step_accepted; /* this step's, for its record */
    int64_t shrunk_blocks;       /* blocks given back after rejected drafts, ever (tests) */
    /* under e->mu */
    int64_t drafted_total, accepted_total, verify_steps_total;
} engine_spec;

/* The sliding-window layers' own pool (engine_swa.h). Engine thread only. */
typedef struct engine_swa {
    pagoda_swa_geometry g;       /* g.window false: nothing below is used */
    int32_t max_blocks;          /* logical blocks of a max_seq_len sequence */
    int32_t *free_ids;           /* [g.pool_blocks] stack of free window blocks */
    int32_t n_free;
    int32_t *free_seats;         /* [g.seats] stack */
    int32_t n_free_seats;
    int32_t *tables;             /* [g.seats x max_blocks] block of each logical block */
    int32_t *lo, *hi;            /* [g.seats] held logical blocks lo .. hi - 1 */
    int32_t sink_first_slot;     /* the main pool's slot of the sink's first */
    /* the step's window batch: slots [max_batched_tokens], views [max_num_seqs] */
    int32_t *slots;
    pagoda_seq_view *views;
    int32_t sink_used;           /* sink slots given out this step */
    int64_t sink_rows_total;     /* ever: rows whose global KV went to the sink */
} engine_swa;

struct pagoda_engine {
    pagoda_model *model;
    char *kv_fp;                  /* pagoda_engine_kv_fingerprint's line, made once */
    struct pagoda_tp *tp;         /* rank 0 of a tensor-parallel group, else NULL */
    pagoda_backend *be;
    pagoda_scheduler *sched;
    pagoda_kvcache *kv;
    pagoda_engine_opts opts;
    pagoda_forward fw;
    engine_swa swa;
    engine_spec spec;
    int32_t policy_blocks;       /* blocks the KV policy manages (the main pool less the sink) */
    struct pagoda_metrics *metrics;
    int32_t max_num_seqs, max_batched_tokens;

    pthread_mutex_t mu;
    pthread_cond_t cv;           /* inbox or cancels changed, or stop */
    pthread_cond_t idle_cv;      /* nothing queued or running */
    pthread_t thread;
    bool started, stopping, stopped;
    seq *inbox_head, *inbox_tail;
    int32_t n_inbox;
    uint64_t *cancels;
    int32_t n_cancels, cap_cancels;
    uint64_t next_id, next_arrival;
    int32_t n_live;              /* inbox + seqs, for wait_idle and max_queue */
    int32_t n_waiting_pub, n_running_pub;
    uint64_t steps_pub;          /* step_no when the counts above were published */
    pagoda_kv_stats kv_pub;      /* the KV policy's stats as of the last step */
    uint64_t extra_held_pub;     /* the backend's weight_extra_held (ABI 1.15) after the
                                  * last forward pass; 0 without the op */

    /* engine thread only */
    uint64_t extra_held_last;    /* extra_held_pub as last published */
    seq **seqs;                  /* live sequences, arrival order */
    int32_t n_seqs, cap_seqs;
    seq **running;               /* admission order */
    int32_t n_running;
    /* per-step scratch */
    int32_t *b_tokens, *b_pos, *b_slots, *logit_rows;
    pagoda_seq_view *views;
    seq **plan_seq;
    int32_t *plan_n;
    int32_t n_plan;
    float *logits;
    int32_t *top_ids;
    float *top_lp;
    /* prompt scoring rows of the step [max_batched_tokens]: the batch row,
     * the sequence and the prompt index whose logprob that row's logits give */
    int32_t *score_rows, *score_index;
    seq **score_seq;
    /* structured output: the constraint engine, a mask buffer
     * [(n_vocab + 31) / 32], the end-of-generation ids */
    pagoda_constraint *con;
    uint32_t *cmask;
    int32_t *eog_ids;
    int32_t n_eog;
    /* the mask prefetch worker: its queue, lock and thread */
    pthread_mutex_t pm_mu;
    pthread_cond_t pm_cv;        /* queue changed, a job finished, or stop */
    seq *pm_head, *pm_tail;
    pthread_t pm_thread;
    bool pm_started, pm_stop;
    void (*mask_observer)(void *user, double seconds, bool prefetched);
    void *mask_user;
    uint64_t step_no;
    void (*step_hook)(void *, pagoda_engine *);
    void *step_user;

    /* counters (under mu) */
    int64_t prompt_tokens_total, generation_tokens_total, finished_total, preemptions_total;
    int64_t invariant_failures;

    /* inspection (engine_inspect.c). Under mu: */
    pthread_cond_t insp_cv;      /* a snapshot was served, or the thread ended */
    uint64_t insp_asked, insp_served; /* snapshot tickets */
    pagoda_engine_snapshot *insp_last; /* the latest snapshot, shared by reference */
    bool thread_done;            /* the engine thread left its loop */
    double insp_total_s;         /* engine-thread time spent on snapshots, ever */
    uint64_t insp_count;
    /* engine thread only (or while it does not run): */
    uint64_t state_version;      /* moves whenever what a snapshot shows may have changed */
    pagoda_step_record step_ring[PAGODA_STEP_HISTORY];
    uint64_t n_step_records;
    uint64_t cur_step;           /* the step being sampled, for traced events */
    int32_t cur_step_seqs, cur_step_tokens;

    /* the recent finished sequences (engine_realign.c), under recent_mu */
    pthread_mutex_t recent_mu;
    engine_recent recent[ENGINE_RECENT_SEQS];
    int32_t recent_next;
};

static inline double engine_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* [any thread] Free a sequence and everything it owns (NULL is fine).
 * engine_submit.c */
void engine_seq_free(seq *q);
/* [engine thread] Move arrivals from the inbox to the sequence list and
 * tell the scheduler. Called with mu held; returns with it held.
 * engine_submit.c */
void engine_take_inbox(pagoda_engine *e);

/* [engine thread] The live sequence with this id, or NULL. engine_step.c */
seq *engine_find_seq(pagoda_engine *e, uint64_t id);
/* Take q out of an ordered list of sequences. engine_step.c */
void engine_drop_seq(seq **arr, int32_t *n, const seq *q);
/* [any thread] Compile req's spec (if any) into q->matcher; PAGODA_OK or
 * an error with err filled (the submit's refusal). engine_constraint.c */
int engine_constraint_attach(pagoda_engine *e, seq *q, const pagoda_request *req, char *err,
                             size_t err_len);
/* [engine thread] Before sampling q from its logits lg: only the tokens
 * its spec allows keep their logits (end tokens where the spec may end).
 * 0: sample; 1: the output is complete and nothing may follow, end it
 * now; -1: the spec cannot go on (err). engine_constraint.c */
int engine_constraint_mask(pagoda_engine *e, seq *q, float *lg, char *err, size_t err_len);
/* [engine thread] q sampled tok (not an end token): move its matcher on
 * and queue its next mask for the prefetch worker. 0 or -1 (err).
 * engine_constraint.c */
int engine_constraint_advance(pagoda_engine *e, seq *q, int32_t tok, char *err, size_t err_len);
/* [engine thread] q arrived: queue its first mask. engine_constraint.c */
void engine_constraint_arrived(pagoda_engine *e, seq *q);
/* Free q's matcher, after any prefetch of it ([any thread]). engine_constraint.c */
void engine_constraint_release(seq *q);
/* Stop the prefetch worker (engine free, after every sequence is gone). */
void engine_constraint_shutdown(pagoda_engine *e);

/* [any thread] The prompt p[0..n) realigned to a recent sequence's tokens
 * where both spell the same bytes (engine_realign.c), growing it to no
 * more than max_n tokens: a new malloc'd array of *n_out tokens with
 * *n_swapped stretches exchanged, or NULL when nothing changes (or out of
 * memory). */
int32_t *engine_realign(pagoda_engine *e, const int32_t *p, int32_t n, const char *salt, int32_t max_n,
                        int32_t *n_out, int32_t *n_swapped);
/* [engine thread] q finished: keep its tokens among the recent ones. */
void engine_recent_note(pagoda_engine *e, const seq *q);
/* Free the recent sequences (engine free). */
void engine_recent_free(pagoda_engine *e);

/* [engine thread] One step: schedule, run, sample. Returns false when
 * there was nothing to do. engine_step.c */
bool engine_step(pagoda_engine *e);

/* Speculative decoding, engine_spec.c. create: the drafter named by the
 * options (an error naming the key when it is unknown or its numbers are
 * out of range); destroy frees what create made. */
int engine_spec_create(pagoda_engine *e, char *err, size_t err_len);
void engine_spec_destroy(pagoda_engine *e);
/* [any thread, at submit] q's drafter state from the request's cap
 * (req_max: 0 the server's, -1 off, else at most that many): an error
 * for a cap the server cannot honour. */
int engine_spec_attach(pagoda_engine *e, seq *q, int32_t req_max, char *err, size_t err_len);
/* Free q's drafter state (at the sequence's free). */
void engine_spec_release(seq *q);
/* [engine thread, plan phase] After the scheduler planned: give decoding
 * entries draft tokens (written at q->tokens[n_tokens ..], counted in
 * e->plan_n and e->spec.plan_draft; NULL when off) within the token,
 * logit-row and KV budgets. */
void engine_spec_plan(pagoda_engine *e);
/* [engine thread, commit phase] q verified `drafted` tokens of which
 * `accepted` agreed: its adaptive length and the counters move on. */
void engine_spec_verified(pagoda_engine *e, seq *q, int32_t drafted, int32_t accepted);
/* [engine thread, commit phase, after the KV commit] The blocks grown for
 * q's rejected drafts go back to the pool (the KV policy's shrink, ABI
 * 1.13; without it they stay until q grows into them or ends). */
void engine_spec_shrink(pagoda_engine *e, seq *q);

/* The window pool, engine_swa.c. create: the geometry and the bookkeeping
 * (before the forward pass is made: it sizes the pools); destroy frees it. */
int engine_swa_create(pagoda_engine *e, char *err, size_t err_len);
void engine_swa_destroy(pagoda_engine *e);
/* [engine thread] A sequence being admitted takes a seat (NOSPACE when
 * none is free) / a released one gives back its blocks and seat (nothing
 * when it holds none). */
int engine_swa_admit(pagoda_engine *e, seq *q);
void engine_swa_release(pagoda_engine *e, seq *q);
/* [engine thread] Where an admitted sequence with a prefix-cache hit of
 * `cached` tokens resumes computing (and it records the hit's end). */
int32_t engine_swa_resume_at(pagoda_engine *e, seq *q, int32_t cached);
/* [engine thread] Plan entry i: q computes n tokens from `start` at batch
 * rows t0 ..: take its window blocks, fill the window batch's view i and
 * slots, and point the global slots (e->b_slots) of positions inside its
 * prefix hit at the sink. Call with e->swa.sink_used = 0 for the step's
 * first. An internal error when the pool or the sink ran out. */
int engine_swa_plan_entry(pagoda_engine *e, seq *q, int32_t i, int32_t start, int32_t n, int32_t t0,
                          char *err, size_t err_len);
/* [engine thread] After the step: q gives back the blocks its next token's
 * window no longer reaches. */
void engine_swa_trim(pagoda_engine *e, seq *q);
/* [engine thread] The pool's accounting holds (free + held = total, seats
 * free + held = seats, and all free with nothing running); else false with
 * why. */
bool engine_swa_check(pagoda_engine *e, char *why, size_t n);

/* [engine thread] Send a TOKEN event carrying q's output up to byte upto.
 * engine_events.c */
void engine_emit_text(pagoda_engine *e, seq *q, size_t upto, int32_t token, float logprob,
                      int32_t n_top);
/* [engine thread] Append a sampled token's text and stream what is safe;
 * true when a stop string ended the sequence. engine_events.c */
bool engine_push_text(pagoda_engine *e, seq *q, int32_t token, float logprob, int32_t n_top);
/* [engine thread] Send the PROMPT event of q's prompt token `index`
 * (logprob NaN for index 0); top ids and logprobs from e->top_ids/top_lp.
 * engine_events.c */
void engine_emit_prompt(pagoda_engine *e, seq *q, int32_t index, float logprob, int32_t n_top);
/* [engine thread] Send the FINAL, release q's KV, drop it from the lists
 * and free it. engine_events.c */
void engine_finish_and_remove(pagoda_engine *e, seq *q, int reason, const char *error);

/* [engine thread] Remember one step for inspection (drafted: its draft
 * positions, accepted: the drafts that agreed). engine_inspect.c */
void engine_record_step(pagoda_engine *e, uint64_t step, int32_t n_seqs, int32_t prefill,
                        int32_t decode, int32_t drafted, int32_t accepted, double seconds);
/* [engine thread, mu held] Serve the snapshots asked for since the last
 * one: build one, share it, wake the askers. engine_inspect.c */
void engine_inspect_serve(pagoda_engine *e);
/* Drop the engine's reference to its latest snapshot (at free). */
void engine_inspect_free(pagoda_engine *e);

#endif /* PAGODA_ENGINE_INTERNAL_H */
