/*
 * comm.h: the core's handle on a comm plugin (collectives, include/pagoda/
 * comm.h): loading and creating it, and the calls the core makes through
 * it, each timed and its bytes counted, so rank 0 can export what the
 * links cost (pagoda_comm_* metrics). Host memory only: the core hands a
 * device-memory plugin (comm-nccl) nothing yet (docs/scaling.md).
 * Not for: what tensor parallelism sends (tp.c) or the plugins themselves.
 */
#ifndef PAGODA_CORE_COMM_H
#define PAGODA_CORE_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "pagoda/comm.h"

struct pagoda_plugin;
struct pagoda_host;

/* What the collectives cost, ever (since open). Written by the one thread
 * that calls collectives; read by any thread (doubles and int64s read
 * whole on x86-64: a reader may see one call's update half done, which a
 * metrics scrape tolerates). */
typedef struct pagoda_comm_stats {
    int64_t calls;
    int64_t bytes;              /* payload bytes this rank handed in (all_reduce: count x 4) */
    double seconds;             /* wall time inside the plugin's calls */
    int64_t all_reduce_calls, all_reduce_bytes;
    double all_reduce_seconds;
    int64_t broadcast_calls, broadcast_bytes;
    double broadcast_seconds;
} pagoda_comm_stats;

typedef struct pagoda_comm {
    struct pagoda_plugin *p;
    struct pagoda_host *h;
    pagoda_config *own_cfg;     /* made by open when given none */
    pagoda_comm_ops ops;
    void *ctx;
    pagoda_comm_info info;
    const char *name;
    bool broken;                /* an op failed: no more calls */
    pagoda_comm_stats st;
} pagoda_comm;

/* Load [engine] comm = name (cfg may be NULL), create it (this joins the
 * group: MPI_Init) and read its info. *out is freed with
 * pagoda_comm_close. */
int pagoda_comm_open(const pagoda_config *cfg, const char *name, pagoda_comm **out, char *err,
                     size_t err_len);
void pagoda_comm_close(pagoda_comm *c);

/* The collectives, timed; each refuses once the group broke. */
int pagoda_comm_all_reduce_f32(pagoda_comm *c, float *buf, size_t count, char *err, size_t err_len);
int pagoda_comm_broadcast(pagoda_comm *c, void *buf, size_t bytes, int32_t root, char *err,
                          size_t err_len);
int pagoda_comm_all_gather(pagoda_comm *c, const void *send, size_t bytes, void *recv, char *err,
                           size_t err_len);
int pagoda_comm_barrier(pagoda_comm *c, char *err, size_t err_len);
/* [any thread, async-signal-safe] end waits on a dead peer (the plugin's
 * interrupt, when it has one). */
void pagoda_comm_interrupt(pagoda_comm *c);

#endif /* PAGODA_CORE_COMM_H */
