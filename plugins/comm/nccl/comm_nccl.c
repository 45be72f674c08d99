/*
 * comm_nccl.c: the comm plugin over NVIDIA NCCL (comm-nccl.so), device
 * memory: every buffer the ops take is a CUDA device pointer on this
 * rank's GPU. The group is bootstrapped over MPI (the job is started by
 * mpirun): rank 0 makes the ncclUniqueId, MPI_Bcast hands it to every
 * rank, and each rank picks GPU (local rank mod device count) and joins
 * with ncclCommInitRank. Collectives run on the plugin's own stream and
 * are waited for by polling cudaStreamQuery, so interrupt() can end a
 * wait on a dead peer (then ncclCommAbort frees the communicator).
 *
 * Host pointers (the core's step headers and token lists under tensor
 * parallelism: tp.c) go over MPI instead, on MPI_COMM_WORLD, which the
 * bootstrap keeps: the ops tell the two apart with cudaPointerGetAttributes.
 *
 * Built where the CUDA toolkit and NCCL are found; this file has been
 * compiled but, on the machine it was written on, never run: no GPU.
 * Not for: host memory (comm-mpi), what is sent (the core).
 */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <mpi.h>
#include <nccl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pagoda/pagoda.h"

#define ERR(...) do { if (err && err_len) snprintf(err, err_len, __VA_ARGS__); } while (0)

typedef struct nccl_ctx {
    const pagoda_host *host;
    ncclComm_t comm;
    cudaStream_t stream;
    int rank, size, device;
    bool we_initialized_mpi;
    bool broken;
    volatile sig_atomic_t interrupted;
    char name[64];
} nccl_ctx;

typedef struct pagoda_comm_request {
    int unused;
} nccl_request;

/* Is p host memory (not a device or managed allocation)? Host buffers go
 * over MPI: NCCL takes device memory only. */
static bool host_ptr(const void *p)
{
    struct cudaPointerAttributes a;
    if (!p) return false;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* an unknown pointer is host memory; clear the error */
        return true;
    }
    return a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged;
}

static int mpi_fail(nccl_ctx *c, int rc, const char *what, char *err, size_t err_len)
{
    if (rc == MPI_SUCCESS) return PAGODA_OK;
    ERR("%s (host memory, over MPI) failed on rank %d of %d: MPI error %d", what, c->rank, c->size, rc);
    c->broken = true;
    return PAGODA_ERR_IO;
}

static int nccl_fail(nccl_ctx *c, ncclResult_t r, const char *what, char *err, size_t err_len)
{
    if (r == ncclSuccess) return PAGODA_OK;
    ERR("%s failed on rank %d of %d: %s", what, c->rank, c->size, ncclGetErrorString(r));
    c->broken = true;
    return PAGODA_ERR_DEVICE;
}

/* Wait for the stream, watching interrupt() and NCCL's async errors. */
static int wait_stream(nccl_ctx *c, const char *what, char *err, size_t err_len)
{
    for (long i = 0;; i++) {
        cudaError_t e = cudaStreamQuery(c->stream);
        if (e == cudaSuccess) return PAGODA_OK;
        if (e != cudaErrorNotReady) {
            ERR("%s failed on rank %d of %d: %s", what, c->rank, c->size, cudaGetErrorString(e));
            c->broken = true;
            return PAGODA_ERR_DEVICE;
        }
        ncclResult_t ar = ncclSuccess;
        ncclCommGetAsyncError(c->comm, &ar);
        if (ar != ncclSuccess || c->interrupted) {
            if (!c->broken) ncclCommAbort(c->comm);
            c->broken = true;
            ERR("%s %s on rank %d of %d: %s", what, c->interrupted ? "interrupted" : "failed",
                c->rank, c->size, c->interrupted ? "the job is stopping (a rank died or was stopped)"
                                                 : ncclGetErrorString(ar));
            return PAGODA_ERR_IO;
        }
        if (i > 4096) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        } else {
            sched_yield();
        }
    }
}

static int usable(nccl_ctx *c, const char *what, char *err, size_t err_len)
{
    if (!c->broken && !c->interrupted) return PAGODA_OK;
    ERR("%s on rank %d of %d: the group is broken (an earlier collective failed or was "
        "interrupted)", what, c->rank, c->size);
    return PAGODA_ERR_IO;
}

static int n_info(void *ctx, pagoda_comm_info *info)
{
    nccl_ctx *c = ctx;
    info->rank = c->rank;
    info->size = c->size;
    info->device_memory = true;
    snprintf(info->name, sizeof info->name, "%s", c->name);
    snprintf(info->transport, sizeof info->transport, "NCCL's choice (NVLink, PCIe, IB)");
    return PAGODA_OK;
}

static int n_all_reduce_start(nccl_ctx *c, void *buf, size_t count, int32_t dtype, int32_t op,
                              const char *what, char *err, size_t err_len)
{
    ncclRedOp_t o;
    if (dtype != PAGODA_DTYPE_F32) {
        ERR("%s: dtype %s not supported (F32)", what, pagoda_dtype_name(dtype));
        return PAGODA_ERR_UNSUPPORTED;
    }
    switch (op) {
    case PAGODA_COMM_SUM: o = ncclSum; break;
    case PAGODA_COMM_MAX: o = ncclMax; break;
    case PAGODA_COMM_MIN: o = ncclMin; break;
    default: ERR("%s: op %d not supported", what, op); return PAGODA_ERR_UNSUPPORTED;
    }
    return nccl_fail(c, ncclAllReduce(buf, buf, count, ncclFloat32, o, c->comm, c->stream), what,
                     err, err_len);
}

/* all_reduce of host memory, over MPI, in place. */
static int host_all_reduce(nccl_ctx *c, void *buf, size_t count, int32_t dtype, int32_t op,
                           const char *what, char *err, size_t err_len)
{
    if (dtype != PAGODA_DTYPE_F32 || op < PAGODA_COMM_SUM || op > PAGODA_COMM_MIN || count > INT32_MAX) {
        ERR("%s: host memory takes F32 sum, max or min of up to 2^31 elements (dtype %s, op %d)",
            what, pagoda_dtype_name(dtype), op);
        return PAGODA_ERR_UNSUPPORTED;
    }
    MPI_Op mo = op == PAGODA_COMM_SUM ? MPI_SUM : op == PAGODA_COMM_MAX ? MPI_MAX : MPI_MIN;
    return mpi_fail(c, MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, mo, MPI_COMM_WORLD),
                    what, err, err_len);
}

static int n_all_reduce(void *ctx, void *buf, size_t count, int32_t dtype, int32_t op, char *err,
                        size_t err_len)
{
    nccl_ctx *c = ctx;
    int st = usable(c, "all_reduce", err, err_len);
    if (!st && host_ptr(buf)) return host_all_reduce(c, buf, count, dtype, op, "all_reduce", err, err_len);
    if (!st) st = n_all_reduce_start(c, buf, count, dtype, op, "all_reduce", err, err_len);
    return st ? st : wait_stream(c, "all_reduce", err, err_len);
}

static int n_broadcast(void *ctx, void *buf, size_t bytes, int32_t root, char *err, size_t err_len)
{
    nccl_ctx *c = ctx;
    int st = usable(c, "broadcast", err, err_len);
    if (st) return st;
    if (root < 0 || root >= c->size) {
        ERR("broadcast: root %d is not a rank (0..%d)", root, c->size - 1);
        return PAGODA_ERR_INVALID;
    }
    if (host_ptr(buf))
        return mpi_fail(c, MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD), "broadcast",
                        err, err_len);
    st = nccl_fail(c, ncclBroadcast(buf, buf, bytes, ncclUint8, root, c->comm, c->stream),
                   "broadcast", err, err_len);
    return st ? st : wait_stream(c, "broadcast", err, err_len);
}

/* NCCL has no gather: every rank sends to root, root receives from each
 * (its own part is a device copy), in one group. */
static int n_gather(void *ctx, const void *send, size_t bytes, void *recv, int32_t root, char *err,
                    size_t err_len)
{
    nccl_ctx *c = ctx;
    int st = usable(c, "gather", err, err_len);
    if (st) return st;
    if (root < 0 || root >= c->size) {
        ERR("gather: root %d is not a rank (0..%d)", root, c->size - 1);
        return PAGODA_ERR_INVALID;
    }
    if (host_ptr(send))
        return mpi_fail(c, MPI_Gather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, root,
                                      MPI_COMM_WORLD), "gather", err, err_len);
    if ((st = nccl_fail(c, ncclGroupStart(), "gather", err, err_len))) return st;
    if (c->rank == root) {
        for (int r = 0; r < c->size && !st; r++) {
            char *dst = (char *)recv + (size_t)r * bytes;
            if (r == root) {
                if (bytes && cudaMemcpyAsync(dst, send, bytes, cudaMemcpyDeviceToDevice, c->stream) !=
                                 cudaSuccess)
                    st = PAGODA_ERR_DEVICE;
            } else {
                st = nccl_fail(c, ncclRecv(dst, bytes, ncclUint8, r, c->comm, c->stream), "gather",
                               err, err_len);
            }
        }
    } else {
        st = nccl_fail(c, ncclSend(send, bytes, ncclUint8, root, c->comm, c->stream), "gather", err,
                       err_len);
    }
    int st2 = nccl_fail(c, ncclGroupEnd(), "gather", err, err_len);
    if (st == PAGODA_ERR_DEVICE && !st2) ERR("gather: device copy failed on rank %d", c->rank);
    if (st || st2) return st ? st : st2;
    return wait_stream(c, "gather", err, err_len);
}

static int n_all_gather(void *ctx, const void *send, size_t bytes, void *recv, char *err,
                        size_t err_len)
{
    nccl_ctx *c = ctx;
    int st = usable(c, "all_gather", err, err_len);
    if (!st && host_ptr(send))
        return mpi_fail(c, MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE,
                                         MPI_COMM_WORLD), "all_gather", err, err_len);
    if (!st)
        st = nccl_fail(c, ncclAllGather(send, recv, bytes, ncclUint8, c->comm, c->stream),
                       "all_gather", err, err_len);
    return st ? st : wait_stream(c, "all_gather", err, err_len);
}

/* A barrier is a one-float all_reduce on the device. */
static int n_barrier(void *ctx, char *err, size_t err_len)
{
    nccl_ctx *c = ctx;
    float *d = NULL;
    if (cudaMalloc((void **)&d, sizeof *d) != cudaSuccess) {
        ERR("barrier: cudaMalloc failed on rank %d", c->rank);
        return PAGODA_ERR_DEVICE;
    }
    cudaMemsetAsync(d, 0, sizeof *d, c->stream);
    int st = n_all_reduce(ctx, d, 1, PAGODA_DTYPE_F32, PAGODA_COMM_SUM, err, err_len);
    cudaFree(d);
    return st;
}

static int n_all_reduce_async(void *ctx, void *buf, size_t count, int32_t dtype, int32_t op,
                              pagoda_comm_request **req, char *err, size_t err_len)
{
    nccl_ctx *c = ctx;
    *req = NULL;
    int st = usable(c, "all_reduce_async", err, err_len);
    /* host memory: done now, over MPI; the wait then finds an idle stream */
    if (!st && host_ptr(buf)) st = host_all_reduce(c, buf, count, dtype, op, "all_reduce_async", err, err_len);
    else if (!st) st = n_all_reduce_start(c, buf, count, dtype, op, "all_reduce_async", err, err_len);
    if (st) return st;
    nccl_request *r = malloc(sizeof *r);
    if (!r) {
        ERR("out of memory");
        return PAGODA_ERR_NOMEM;
    }
    *req = r;
    return PAGODA_OK;
}

static int n_wait(void *ctx, pagoda_comm_request *req, char *err, size_t err_len)
{
    free(req);
    return wait_stream(ctx, "all_reduce_async", err, err_len);
}

static void n_interrupt(void *ctx)
{
    ((nccl_ctx *)ctx)->interrupted = 1;
}

static int n_probe(char *why, size_t n)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(why, n, "no CUDA device: %s", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 0;
    }
    return 100;
}

static void promote_libmpi(void)
{
    Dl_info di;
    void *sym = (void *)&MPI_Init;
    if (dladdr(sym, &di) && di.dli_fname) (void)dlopen(di.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
}

static int n_create(const pagoda_host *h, void **ctx, char *err, size_t err_len)
{
    nccl_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        ERR("out of memory");
        return PAGODA_ERR_NOMEM;
    }
    c->host = h;
    promote_libmpi();
    int inited = 0, provided = 0, st = PAGODA_ERR_DEVICE;
    MPI_Initialized(&inited);
    if (!inited) {
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
            ERR("MPI_Init_thread failed (NCCL is bootstrapped over MPI: start the job with mpirun)");
            free(c);
            return PAGODA_ERR_IO;
        }
        c->we_initialized_mpi = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    /* this rank's GPU: its index among the ranks on its host */
    MPI_Comm local;
    int local_rank = 0, n_dev = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &local_rank);
    MPI_Comm_free(&local);
    cudaError_t ce = cudaGetDeviceCount(&n_dev);
    if (ce != cudaSuccess || n_dev == 0) {
        ERR("rank %d: no CUDA device (%s)", c->rank, ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
        goto fail;
    }
    c->device = (int)(h ? h->config_int(h, "device_offset", 0) : 0) + local_rank % n_dev;
    if (c->device >= n_dev) c->device %= n_dev;
    if ((ce = cudaSetDevice(c->device)) != cudaSuccess ||
        (ce = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        ERR("rank %d: GPU %d: %s", c->rank, c->device, cudaGetErrorString(ce));
        goto fail;
    }
    ncclUniqueId id;
    if (c->rank == 0 && (st = nccl_fail(c, ncclGetUniqueId(&id), "ncclGetUniqueId", err, err_len)))
        goto fail;
    if (MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) {
        ERR("rank %d: MPI_Bcast of the NCCL unique id failed", c->rank);
        st = PAGODA_ERR_IO;
        goto fail;
    }
    if ((st = nccl_fail(c, ncclCommInitRank(&c->comm, c->size, id, c->rank), "ncclCommInitRank", err,
                        err_len)))
        goto fail;
    int v = 0;
    ncclGetVersion(&v);
    snprintf(c->name, sizeof c->name, "NCCL %d.%d.%d (GPU %d, device memory)", v / 10000,
             (v / 100) % 100, v % 100, c->device);
    *ctx = c;
    return PAGODA_OK;
fail:
    if (c->stream) cudaStreamDestroy(c->stream);
    if (c->we_initialized_mpi) MPI_Finalize();
    free(c);
    return st ? st : PAGODA_ERR_DEVICE;
}

static void n_destroy(void *ctx)
{
    nccl_ctx *c = ctx;
    if (c->broken) ncclCommAbort(c->comm);
    else ncclCommDestroy(c->comm);
    cudaStreamDestroy(c->stream);
    if (c->we_initialized_mpi && !c->interrupted) MPI_Finalize();
    free(c);
}

static const pagoda_comm_ops nccl_ops = {
    .struct_size = sizeof(pagoda_comm_ops),
    .info = n_info,
    .all_reduce = n_all_reduce,
    .broadcast = n_broadcast,
    .gather = n_gather,
    .all_gather = n_all_gather,
    .barrier = n_barrier,
    .all_reduce_async = n_all_reduce_async,
    .wait = n_wait,
    .interrupt = n_interrupt,
};

static const pagoda_config_key nccl_keys[] = {
    {"device_offset", PAGODA_KEY_INT, "0", 0, 1024, "the first GPU a host's ranks use"},
    {NULL, 0, NULL, 0, 0, NULL},
};

static const pagoda_plugin_desc nccl_desc = {
    PAGODA_DESC_HEADER(PAGODA_KIND_COMM),
    .name = "nccl",
    .version = "0.1",
    .description = "collectives over NCCL, device memory, bootstrapped over MPI (untested: no GPU "
                   "where it was written)",
    .config_keys = nccl_keys,
    .probe = n_probe,
    .create = n_create,
    .destroy = n_destroy,
    .ops = &nccl_ops,
};

PAGODA_PLUGIN(nccl_desc)
