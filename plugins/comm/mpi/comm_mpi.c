/*
 * comm_mpi.c: the comm plugin over Open MPI (comm-mpi.so), host memory.
 * Joins the job mpirun started (MPI_Init_thread, SERIALIZED: the core
 * calls from one thread at a time, first the main thread, then the engine
 * thread) and runs every collective as MPI's non-blocking one, polled with
 * MPI_Test, so that interrupt() can end a wait on a peer that died (MPI
 * has no timeout of its own, and Open MPI 4 without ULFM would spin
 * forever). Waiting backs off from spinning to short sleeps: an idle worker
 * rank waits for the next step in a broadcast for as long as the server
 * is idle, and must not hold a core meanwhile.
 * Not for: what is sent (the core), device memory (comm-nccl).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pagoda/pagoda.h"

#define ERR(...) do { if (err && err_len) snprintf(err, err_len, __VA_ARGS__); } while (0)

typedef struct mpi_ctx {
    const pagoda_host *host;
    MPI_Comm comm;
    int rank, size;
    bool we_initialized;           /* MPI_Init was ours: we finalize */
    volatile sig_atomic_t interrupted;
    double spin_s;                 /* wait this long spinning before sleeping */
    long sleep_ns;                 /* then poll every sleep_ns */
    char name[64];
} mpi_ctx;

typedef struct pagoda_comm_request {
    MPI_Request r;
} mpi_request;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void mpi_msg(int rc, char *out, size_t n)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
    snprintf(out, n, "%s", s);
}

/* Poll r until it completes, the group is interrupted, or MPI reports an
 * error. */
static int wait_req(mpi_ctx *c, MPI_Request *r, const char *what, char *err, size_t err_len)
{
    double t0 = 0;
    for (long i = 0;; i++) {
        if (c->interrupted) {
            ERR("%s interrupted on rank %d of %d: the job is stopping (a rank died or was "
                "stopped); the group cannot be used again", what, c->rank, c->size);
            return PAGODA_ERR_IO;
        }
        int done = 0;
        int rc = MPI_Test(r, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            char m[256];
            mpi_msg(rc, m, sizeof m);
            ERR("%s failed on rank %d of %d: %s", what, c->rank, c->size, m);
            return PAGODA_ERR_IO;
        }
        if (done) return PAGODA_OK;
        if (i < 64) continue;
        if (i == 64) t0 = now_s();
        if ((i & 63) == 0 && now_s() - t0 > c->spin_s) {
            struct timespec ts = {0, c->sleep_ns};
            nanosleep(&ts, NULL);
        } else {
            sched_yield();   /* ranks may share cores (mpirun --oversubscribe) */
        }
    }
}

static int check(mpi_ctx *c, int rc, const char *what, char *err, size_t err_len)
{
    if (rc == MPI_SUCCESS) return PAGODA_OK;
    char m[256];
    mpi_msg(rc, m, sizeof m);
    ERR("%s failed on rank %d of %d: %s", what, c->rank, c->size, m);
    return PAGODA_ERR_IO;
}

static int dtype_of(int32_t dtype, MPI_Datatype *t, size_t *elt)
{
    if (dtype != PAGODA_DTYPE_F32) return PAGODA_ERR_UNSUPPORTED;
    *t = MPI_FLOAT;
    *elt = 4;
    return PAGODA_OK;
}

static int op_of(int32_t op, MPI_Op *o)
{
    switch (op) {
    case PAGODA_COMM_SUM: *o = MPI_SUM; return PAGODA_OK;
    case PAGODA_COMM_MAX: *o = MPI_MAX; return PAGODA_OK;
    case PAGODA_COMM_MIN: *o = MPI_MIN; return PAGODA_OK;
    default: return PAGODA_ERR_UNSUPPORTED;
    }
}

/* The MPI type and op of a reduction (both reduce calls take the same
 * pairs); PAGODA_ERR_UNSUPPORTED with err naming the call `what` when
 * either has none. */
static int reduce_of(int32_t dtype, int32_t op, MPI_Datatype *t, MPI_Op *o, size_t *elt, const char *what,
                     char *err, size_t err_len)
{
    if (dtype_of(dtype, t, elt) || op_of(op, o)) {
        ERR("%s: dtype %s / op %d not supported (F32 with sum, max or min)", what, pagoda_dtype_name(dtype),
            op);
        return PAGODA_ERR_UNSUPPORTED;
    }
    return PAGODA_OK;
}

/* MPI counts are int: larger buffers go in pieces of at most CHUNK units. */
#define CHUNK ((size_t)1 << 30)

static int m_info(void *ctx, pagoda_comm_info *info)
{
    mpi_ctx *c = ctx;
    info->rank = c->rank;
    info->size = c->size;
    info->device_memory = false;
    snprintf(info->name, sizeof info->name, "%s", c->name);
    const char *btl = getenv("OMPI_MCA_btl");
    snprintf(info->transport, sizeof info->transport, "%s%s", btl ? "btl " : "",
             btl ? btl : "Open MPI's choice (shared memory on one host)");
    return PAGODA_OK;
}

static int m_all_reduce(void *ctx, void *buf, size_t count, int32_t dtype, int32_t op, char *err,
                        size_t err_len)
{
    mpi_ctx *c = ctx;
    MPI_Datatype t = MPI_DATATYPE_NULL;
    MPI_Op o = MPI_OP_NULL; /* set by reduce_of; GCC cannot see through its || */
    size_t elt = 0;
    int bad = reduce_of(dtype, op, &t, &o, &elt, "all_reduce", err, err_len);
    if (bad) return bad;
    for (size_t off = 0; off < count || (count == 0 && off == 0); off += CHUNK) {
        int n = (int)(count - off < CHUNK ? count - off : CHUNK);
        MPI_Request r;
        int st = check(c, MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + off * elt, n, t, o, c->comm, &r),
                       "all_reduce", err, err_len);
        if (!st) st = wait_req(c, &r, "all_reduce", err, err_len);
        if (st) return st;
        if (count == 0) break;
    }
    return PAGODA_OK;
}

static int m_broadcast(void *ctx, void *buf, size_t bytes, int32_t root, char *err, size_t err_len)
{
    mpi_ctx *c = ctx;
    if (root < 0 || root >= c->size) {
        ERR("broadcast: root %d is not a rank (0..%d)", root, c->size - 1);
        return PAGODA_ERR_INVALID;
    }
    for (size_t off = 0; off < bytes || (bytes == 0 && off == 0); off += CHUNK) {
        int n = (int)(bytes - off < CHUNK ? bytes - off : CHUNK);
        MPI_Request r;
        int st = check(c, MPI_Ibcast((char *)buf + off, n, MPI_BYTE, root, c->comm, &r), "broadcast",
                       err, err_len);
        if (!st) st = wait_req(c, &r, "broadcast", err, err_len);
        if (st) return st;
        if (bytes == 0) break;
    }
    return PAGODA_OK;
}

static int m_gather(void *ctx, const void *send, size_t bytes, void *recv, int32_t root, char *err,
                    size_t err_len)
{
    mpi_ctx *c = ctx;
    if (root < 0 || root >= c->size) {
        ERR("gather: root %d is not a rank (0..%d)", root, c->size - 1);
        return PAGODA_ERR_INVALID;
    }
    if (bytes > (size_t)INT_MAX) {
        ERR("gather: %zu bytes per rank is more than MPI's %d", bytes, INT_MAX);
        return PAGODA_ERR_UNSUPPORTED;
    }
    MPI_Request r;
    int st = check(c, MPI_Igather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, root,
                                  c->comm, &r), "gather", err, err_len);
    return st ? st : wait_req(c, &r, "gather", err, err_len);
}

static int m_all_gather(void *ctx, const void *send, size_t bytes, void *recv, char *err,
                        size_t err_len)
{
    mpi_ctx *c = ctx;
    if (bytes > (size_t)INT_MAX) {
        ERR("all_gather: %zu bytes per rank is more than MPI's %d", bytes, INT_MAX);
        return PAGODA_ERR_UNSUPPORTED;
    }
    MPI_Request r;
    int st = check(c, MPI_Iallgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE,
                                     c->comm, &r), "all_gather", err, err_len);
    return st ? st : wait_req(c, &r, "all_gather", err, err_len);
}

static int m_barrier(void *ctx, char *err, size_t err_len)
{
    mpi_ctx *c = ctx;
    MPI_Request r;
    int st = check(c, MPI_Ibarrier(c->comm, &r), "barrier", err, err_len);
    return st ? st : wait_req(c, &r, "barrier", err, err_len);
}

static int m_all_reduce_async(void *ctx, void *buf, size_t count, int32_t dtype, int32_t op,
                              pagoda_comm_request **req, char *err, size_t err_len)
{
    mpi_ctx *c = ctx;
    MPI_Datatype t = MPI_DATATYPE_NULL;
    MPI_Op o = MPI_OP_NULL; /* set by reduce_of; GCC cannot see through its || */
    size_t elt = 0;
    *req = NULL;
    int bad = reduce_of(dtype, op, &t, &o, &elt, "all_reduce_async", err, err_len);
    if (bad) return bad;
    if (count > (size_t)INT_MAX) {
        ERR("all_reduce_async: %zu elements is more than MPI's %d", count, INT_MAX);
        return PAGODA_ERR_UNSUPPORTED;
    }
    mpi_request *r = malloc(sizeof *r);
    if (!r) {
        ERR("out of memory");
        return PAGODA_ERR_NOMEM;
    }
    int st = check(c, MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, t, o, c->comm, &r->r),
                   "all_reduce_async", err, err_len);
    if (st) {
        free(r);
        return st;
    }
    *req = r;
    return PAGODA_OK;
}

static int m_wait(void *ctx, pagoda_comm_request *req, char *err, size_t err_len)
{
    if (!req) return PAGODA_OK;
    int st = wait_req(ctx, &req->r, "all_reduce_async", err, err_len);
    free(req);   /* an interrupted request is abandoned with the group */
    return st;
}

static void m_interrupt(void *ctx)
{
    ((mpi_ctx *)ctx)->interrupted = 1;
}

/* Open MPI opens its own components with dlopen and expects libmpi's
 * symbols to be global; the core opens plugins RTLD_LOCAL, so promote the
 * library this plugin linked to RTLD_GLOBAL before MPI_Init. */
static void promote_libmpi(void)
{
    Dl_info di;
    void *sym = (void *)&MPI_Init;
    if (dladdr(sym, &di) && di.dli_fname) (void)dlopen(di.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
}

static int m_create(const pagoda_host *h, void **ctx, char *err, size_t err_len)
{
    mpi_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        ERR("out of memory");
        return PAGODA_ERR_NOMEM;
    }
    c->host = h;
    c->spin_s = h ? h->config_float(h, "spin_us", 2000) * 1e-6 : 2e-3;
    c->sleep_ns = (long)((h ? h->config_float(h, "sleep_us", 50) : 50) * 1e3);
    promote_libmpi();
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
            ERR("MPI_Init_thread failed: is this process started by mpirun (or as a singleton)?");
            free(c);
            return PAGODA_ERR_IO;
        }
        c->we_initialized = true;
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED) {
        ERR("this MPI gives thread level %d, below MPI_THREAD_SERIALIZED (%d), which the engine "
            "thread needs; use an MPI built with thread support", provided, MPI_THREAD_SERIALIZED);
        if (c->we_initialized) MPI_Finalize();
        free(c);
        return PAGODA_ERR_UNSUPPORTED;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &c->comm);
    /* errors come back as return codes, so they become messages */
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    /* "Open MPI v4.1.4, package: ..." -> "Open MPI v4.1.4" */
    char *comma = strchr(lib, ',');
    if (comma) *comma = '\0';
    snprintf(c->name, sizeof c->name, "%.48s (host memory)", lib);
    *ctx = c;
    return PAGODA_OK;
}

static void m_destroy(void *ctx)
{
    mpi_ctx *c = ctx;
    /* a broken group cannot finalize (it would wait for the dead rank):
     * the process ends without it and mpirun reports the job's end */
    if (!c->interrupted) {
        MPI_Comm_free(&c->comm);
        if (c->we_initialized) MPI_Finalize();
    }
    free(c);
}

static int m_probe(char *why, size_t n)
{
    (void)why;
    (void)n;
    return 100;
}

static const pagoda_comm_ops mpi_ops = {
    .struct_size = sizeof(pagoda_comm_ops),
    .info = m_info,
    .all_reduce = m_all_reduce,
    .broadcast = m_broadcast,
    .gather = m_gather,
    .all_gather = m_all_gather,
    .barrier = m_barrier,
    .all_reduce_async = m_all_reduce_async,
    .wait = m_wait,
    .interrupt = m_interrupt,
};

static const pagoda_config_key mpi_keys[] = {
    {"spin_us", PAGODA_KEY_FLOAT, "2000", 0, 1e7,
     "a wait spins (yielding the core) this long before it polls with sleeps"},
    {"sleep_us", PAGODA_KEY_FLOAT, "50", 1, 1e6, "the poll interval after that"},
    {NULL, 0, NULL, 0, 0, NULL},
};

static const pagoda_plugin_desc mpi_desc = {
    PAGODA_DESC_HEADER(PAGODA_KIND_COMM),
    .name = "mpi",
    .version = "0.1",
    .description = "collectives over MPI (Open MPI), host memory; launch with mpirun",
    .config_keys = mpi_keys,
    .probe = m_probe,
    .create = m_create,
    .destroy = m_destroy,
    .ops = &mpi_ops,
};

PAGODA_PLUGIN(mpi_desc)
