/*
 * tp.h: tensor parallelism's wire between rank 0 and the other ranks.
 * Rank 0 runs the frontend, scheduler and KV policy; before each forward
 * pass it broadcasts the step (the flattened batch: tokens, positions, KV
 * slots, sequence views with their block tables, the KV block copies
 * its KV policy made since the last step, and a sliding-window model's
 * window-pool slots and tables); every other rank runs a worker
 * loop that takes the step and runs the same forward pass on its shard.
 * Also: the start-up agreement (every rank's status and a fingerprint of
 * its config and model file, compared so ranks that disagree refuse
 * together instead of computing garbage or hanging).
 * Not for: the collectives themselves (comm.h) or the split (tp_shard.h).
 */
#ifndef PAGODA_CORE_TP_H
#define PAGODA_CORE_TP_H

#include <stdint.h>

#include "comm.h"
#include "config.h"
#include "forward.h"
#include "gguf.h"

typedef struct pagoda_tp {
    pagoda_comm *comm;
    int32_t rank, size;
    pagoda_forward_tp fwd;          /* what the forward pass calls */
    /* rank 0: KV block copies since the last step */
    int32_t *copy_src, *copy_dst;
    int32_t n_copies, cap_copies;
    int32_t *msg;                   /* the packed step */
    size_t msg_cap;
    int64_t steps;
} pagoda_tp;

int pagoda_tp_new(pagoda_comm *comm, pagoda_tp **out);
void pagoda_tp_free(pagoda_tp *tp);

/* A fingerprint of cfg (every key and value in order) and of the model
 * file (its size, its header and tensor table, and 16 samples of its data). */
uint64_t pagoda_tp_fingerprint(const pagoda_config *cfg, const gguf_file *f);

/* Every rank calls it at the same point with its own status (0: fine) and
 * fingerprint: PAGODA_OK when every rank is fine and the fingerprints
 * agree, else an error naming the first rank that failed or differs. */
int pagoda_tp_agree(pagoda_tp *tp, const char *phase, int status, uint64_t fingerprint, char *err,
                    size_t err_len);

/* [rank 0, engine thread] KV blocks copied src[i] -> dst[i] (already done
 * on rank 0): the workers replay them before the next step. */
int pagoda_tp_record_copies(pagoda_tp *tp, const int32_t *src, const int32_t *dst, int32_t n);
/* [rank 0, engine thread] Broadcast the step b, and local: the same step's
 * view of a sliding-window model's window pool (its slots and block
 * tables; NULL: none, every layer in the main pool). */
int pagoda_tp_send_step(pagoda_tp *tp, const pagoda_batch *b, const pagoda_batch *local, char *err,
                        size_t err_len);
/* [rank 0] Tell the workers to leave their loop. */
int pagoda_tp_send_stop(pagoda_tp *tp, char *err, size_t err_len);

/* [other ranks] What a worker does with a step. */
typedef struct pagoda_tp_worker {
    void *user;
    int (*copy_blocks)(void *user, const int32_t *src, const int32_t *dst, int32_t n);
    /* local: the window pool's view of the step, as send_step's (NULL: none) */
    int (*forward)(void *user, const pagoda_batch *b, const pagoda_batch *local, char *err,
                   size_t err_len);
} pagoda_tp_worker;
/* [other ranks] Take steps until rank 0 says stop (PAGODA_OK) or a
 * collective or forward pass fails (the error). */
int pagoda_tp_worker_run(pagoda_tp *tp, const pagoda_tp_worker *w, char *err, size_t err_len);

#endif /* PAGODA_CORE_TP_H */
