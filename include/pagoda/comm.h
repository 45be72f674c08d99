/*
 * pagoda/comm.h: collectives (ABI 1.4), the layer tensor parallelism talks
 * through. A comm plugin joins this process to a group of `size` ranks that
 * an outside launcher started (mpirun) and moves data among them:
 * all_reduce, broadcast, gather, all_gather, barrier. pagoda never opens
 * sockets of its own for this: the plugins wrap existing engines (Open MPI
 * for host memory: comm-mpi.so; NCCL for GPU memory, bootstrapped over
 * MPI: comm-nccl.so).
 *
 * The core loads one comm plugin when [engine] tensor_parallel > 1
 * ([engine] comm = NAME) and creates it first, before the model is read,
 * so every rank logs and refuses in step with the others. Rank 0 runs the
 * frontend, scheduler and KV policy; every step it broadcasts the batch,
 * and every rank runs the forward pass on its shard with two all_reduces
 * per layer (docs/scaling.md).
 *
 * Memory: info.device_memory says where the buffers passed to the ops
 * live: host memory (false) or the device of the plugin's rank (true; a
 * device pointer of the runtime the plugin names, e.g. CUDA). The core
 * hands host-memory plugins host pointers only.
 *
 * Collective semantics (MPI's): every rank of the group calls the same
 * collectives in the same order with the same counts and root; a call
 * returns when this rank's part is done (its buffer may be reused). Sizes
 * are in bytes except all_reduce's count (elements). Zero bytes is valid
 * and moves nothing (but still synchronizes where the op does).
 *
 * Errors: every op returns a pagoda_status and writes a one-line reason
 * to err (err_len may be 0). A peer that died makes a collective fail or
 * block; a plugin with the optional interrupt slot lets another thread
 * (or a signal handler) end such a wait. Once an op failed the group is
 * broken: the core stops using it and exits.
 *
 * Threads: [engine thread] means one thread at a time (the core
 * serializes: the main thread during start-up, then the engine thread, or
 * a worker rank's main thread). Not for: what is sent (the core's batch
 * and activations), launching processes (mpirun's job).
 *
 * ABI: the ops table starts with struct_size; slots are only appended,
 * each commented with the minor that added it; the core copies
 * min(struct_size, sizeof) into a zeroed table and checks an optional
 * slot for NULL before calling it.
 */
#ifndef PAGODA_COMM_H
#define PAGODA_COMM_H

#include "pagoda/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reductions of all_reduce. */
typedef enum pagoda_comm_op {
    PAGODA_COMM_SUM = 0,
    PAGODA_COMM_MAX = 1,
    PAGODA_COMM_MIN = 2
} pagoda_comm_op;

typedef struct pagoda_comm_info {
    size_t struct_size;       /* the caller's sizeof(pagoda_comm_info) */
    int32_t rank;             /* 0 .. size-1 */
    int32_t size;             /* ranks in the group */
    bool device_memory;       /* buffers are device pointers (see above) */
    char name[64];            /* "Open MPI 4.1.4 (host memory)" */
    char transport[64];       /* what carries the bytes, as far as the plugin can tell:
                               * "shared memory", "tcp", "NVLink" ("" if unknown) */
} pagoda_comm_info;

/* An async collective in flight (the plugin's object). */
typedef struct pagoda_comm_request pagoda_comm_request;

typedef struct pagoda_comm_ops {
    size_t struct_size;

    /* [any thread] required. Fill *info (the core sets struct_size). */
    int (*info)(void *ctx, pagoda_comm_info *info);

    /* [engine thread] required. buf[0..count) = the element-wise reduction
     * over every rank's buf, on every rank (in place). dtype: a
     * pagoda_dtype; PAGODA_DTYPE_F32 is required, others may answer
     * PAGODA_ERR_UNSUPPORTED. Every rank gets the same bits. */
    int (*all_reduce)(void *ctx, void *buf, size_t count, int32_t dtype, int32_t op, char *err,
                      size_t err_len);

    /* [engine thread] required. buf[0..bytes) of rank root, to every rank. */
    int (*broadcast)(void *ctx, void *buf, size_t bytes, int32_t root, char *err, size_t err_len);

    /* [engine thread] required. Rank r's send[0..bytes) lands at
     * recv[r * bytes .. (r + 1) * bytes) on root only (recv is read only on
     * root; it may be NULL elsewhere). send and recv do not overlap. */
    int (*gather)(void *ctx, const void *send, size_t bytes, void *recv, int32_t root, char *err,
                  size_t err_len);

    /* [engine thread] required. gather to every rank: recv holds size x
     * bytes on every rank. */
    int (*all_gather)(void *ctx, const void *send, size_t bytes, void *recv, char *err,
                      size_t err_len);

    /* [engine thread] required. Returns once every rank has called it. */
    int (*barrier)(void *ctx, char *err, size_t err_len);

    /* [engine thread] optional. all_reduce started, finished by wait (the
     * buffer is not to be touched before). At most one request in flight
     * per instance. Fallback: all_reduce (the core's step does not overlap
     * then). */
    int (*all_reduce_async)(void *ctx, void *buf, size_t count, int32_t dtype, int32_t op,
                            pagoda_comm_request **req, char *err, size_t err_len);
    /* [engine thread] optional, required with all_reduce_async. Wait for
     * req and free it. */
    int (*wait)(void *ctx, pagoda_comm_request *req, char *err, size_t err_len);

    /* [any thread, async-signal-safe] optional. Make every collective in
     * flight, and every later one, fail with PAGODA_ERR_IO ("interrupted")
     * instead of waiting for a peer that may be dead. The core calls it
     * when it is told to stop (SIGTERM: mpirun ends a job whose rank died
     * that way), so rank 0 answers its in-flight requests with an error.
     * Fallback: none; a wait on a dead peer lasts until the launcher kills
     * the process. */
    void (*interrupt)(void *ctx);
} pagoda_comm_ops;

#ifdef __cplusplus
}
#endif
#endif /* PAGODA_COMM_H */
