/*
 * comm_check.c: `pagoda comm-check`, the conformance test of a comm
 * plugin, run under the launcher with every rank: `mpirun -n 3 pagoda
 * comm-check --comm mpi`. Every collective at sizes from one element to
 * 16 MiB, odd sizes among them, every root; values chosen so that sums are
 * exact in F32 (small integers), so every result is asserted exactly, and
 * random floats whose sums every rank must get bit for bit alike. A
 * device-memory plugin (comm-nccl) gets its buffers from the CUDA runtime,
 * opened at run time (libcudart.so), so this tool links no CUDA.
 * Rank 0 prints the summary; the exit code is 0 only when every rank
 * passed every check.
 * Not for: timing (docs/scaling.md's numbers come from --bench here, a
 * plain loop, not a benchmark harness).
 */
#define _GNU_SOURCE
#include "comm_check.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "log.h"

/* ---------------------------------------------------------------- memory */

/* Where the plugin's buffers live: host (malloc) or device (cudaMalloc). */
typedef struct mem {
    bool device;
    void *lib;
    int (*cmalloc)(void **, size_t);
    int (*cfree)(void *);
    int (*cmemcpy)(void *, const void *, size_t, int);   /* 1 H2D, 2 D2H */
} mem;

static int mem_open(mem *m, bool device, char *err, size_t n)
{
    memset(m, 0, sizeof *m);
    m->device = device;
    if (!device) return 0;
    m->lib = dlopen("libcudart.so", RTLD_NOW | RTLD_LOCAL);
    if (!m->lib) m->lib = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!m->lib) m->lib = dlopen("libcudart.so.12", RTLD_NOW | RTLD_LOCAL);
    if (!m->lib) {
        snprintf(err, n, "the plugin takes device memory and libcudart.so cannot be opened: %s",
                 dlerror());
        return -1;
    }
    *(void **)&m->cmalloc = dlsym(m->lib, "cudaMalloc");
    *(void **)&m->cfree = dlsym(m->lib, "cudaFree");
    *(void **)&m->cmemcpy = dlsym(m->lib, "cudaMemcpy");
    if (!m->cmalloc || !m->cfree || !m->cmemcpy) {
        snprintf(err, n, "libcudart.so lacks cudaMalloc/cudaFree/cudaMemcpy");
        return -1;
    }
    return 0;
}

static void *mem_alloc(mem *m, size_t n)
{
    if (!m->device) return malloc(n ? n : 1);
    void *p = NULL;
    return m->cmalloc(&p, n ? n : 1) == 0 ? p : NULL;
}

static void mem_free(mem *m, void *p)
{
    if (!p) return;
    if (m->device) m->cfree(p);
    else free(p);
}

static void mem_put(mem *m, void *dst, const void *src, size_t n)
{
    if (m->device) m->cmemcpy(dst, src, n, 1);
    else memcpy(dst, src, n);
}

static void mem_get(mem *m, void *dst, const void *src, size_t n)
{
    if (m->device) m->cmemcpy(dst, src, n, 2);
    else memcpy(dst, src, n);
}

/* ---------------------------------------------------------------- checks */

typedef struct ck {
    pagoda_comm *c;
    mem m;
    int rank, size;
    long checks, failures;
    bool verbose;
} ck;

#define FAIL(k, ...)                                                          \
    do {                                                                      \
        if ((k)->failures++ < 20) {                                           \
            fprintf(stderr, "comm-check: rank %d: FAIL ", (k)->rank);         \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
        }                                                                     \
    } while (0)

/* An integer pattern exact in F32 whatever the rank count (|v| < 2^20). */
static float ival(size_t i, int rank) { return (float)((long)((i * 7 + (size_t)rank * 13) % 1024) - 512); }
static unsigned char bval(size_t i, int root) { return (unsigned char)((i * 31 + (size_t)root * 101 + 7) & 0xff); }

static int op_status(ck *k, int st, const char *what, size_t size, const char *err)
{
    k->checks++;
    if (st) FAIL(k, "%s of %zu: %s (%s)", what, size, err, pagoda_status_str(st));
    return st;
}

static int check_all_reduce(ck *k, size_t count, int op)
{
    char err[512] = "";
    size_t bytes = count * sizeof(float);
    float *h = malloc(bytes ? bytes : 1);
    void *d = mem_alloc(&k->m, bytes);
    int st = PAGODA_ERR_NOMEM;
    if (!h || !d) goto out;
    for (size_t i = 0; i < count; i++) h[i] = ival(i, k->rank);
    mem_put(&k->m, d, h, bytes);
    st = k->c->ops.all_reduce(k->c->ctx, d, count, PAGODA_DTYPE_F32, op, err, sizeof err);
    const char *on = op == PAGODA_COMM_SUM ? "sum" : op == PAGODA_COMM_MAX ? "max" : "min";
    char what[64];
    snprintf(what, sizeof what, "all_reduce(%s) count", on);
    if (op_status(k, st, what, count, err)) goto out;
    mem_get(&k->m, h, d, bytes);
    for (size_t i = 0; i < count; i++) {
        float want = ival(i, 0);
        for (int r = 1; r < k->size; r++) {
            float v = ival(i, r);
            if (op == PAGODA_COMM_SUM) want += v;
            else if (op == PAGODA_COMM_MAX) want = v > want ? v : want;
            else want = v < want ? v : want;
        }
        if (h[i] != want) {
            FAIL(k, "%s of %zu: element %zu is %.9g, want %.9g", what, count, i, h[i], want);
            break;
        }
    }
out:
    if (st == PAGODA_ERR_NOMEM) FAIL(k, "out of memory for %zu floats", count);
    free(h);
    mem_free(&k->m, d);
    return st;
}

/* Random floats: every rank must hold the same bits afterwards (the
 * forward pass relies on ranks agreeing on the residual stream), and the
 * sum must be near the double-precision one. */
static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rval(size_t i, int rank)
{
    uint64_t s = (uint64_t)i * 1000003u + (uint64_t)rank * 7919u + 1;
    return (float)((double)(splitmix(&s) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static int check_all_reduce_random(ck *k, size_t count)
{
    char err[512] = "";
    size_t bytes = count * sizeof(float);
    float *h = malloc(bytes);
    void *d = mem_alloc(&k->m, bytes);
    uint64_t *hashes = calloc((size_t)k->size, sizeof *hashes);
    void *dh = mem_alloc(&k->m, (size_t)k->size * 8), *dmine = mem_alloc(&k->m, 8);
    int st = PAGODA_ERR_NOMEM;
    if (!h || !d || !hashes || !dh || !dmine) goto out;
    for (size_t i = 0; i < count; i++) h[i] = rval(i, k->rank);
    mem_put(&k->m, d, h, bytes);
    st = k->c->ops.all_reduce(k->c->ctx, d, count, PAGODA_DTYPE_F32, PAGODA_COMM_SUM, err, sizeof err);
    if (op_status(k, st, "all_reduce(random floats) count", count, err)) goto out;
    mem_get(&k->m, h, d, bytes);
    uint64_t hash = 1469598103934665603ull;
    for (size_t i = 0; i < count; i++) {
        double want = 0;
        for (int r = 0; r < k->size; r++) want += rval(i, r);
        double diff = h[i] - want;
        if (diff < 0) diff = -diff;
        if (diff > 1e-6 * k->size) {
            FAIL(k, "all_reduce(random floats) of %zu: element %zu is %.9g, want %.9g", count, i,
                 h[i], want);
            break;
        }
        uint32_t b;
        memcpy(&b, &h[i], 4);
        hash = (hash ^ b) * 1099511628211ull;
    }
    mem_put(&k->m, dmine, &hash, 8);
    st = k->c->ops.all_gather(k->c->ctx, dmine, 8, dh, err, sizeof err);
    if (op_status(k, st, "all_gather(hash) bytes", 8, err)) goto out;
    mem_get(&k->m, hashes, dh, (size_t)k->size * 8);
    k->checks++;
    for (int r = 1; r < k->size; r++)
        if (hashes[r] != hashes[0]) {
            FAIL(k, "all_reduce(random floats) of %zu: rank %d's result differs from rank 0's "
                 "(hash %016llx vs %016llx): ranks must get the same bits", count, r,
                 (unsigned long long)hashes[r], (unsigned long long)hashes[0]);
            break;
        }
out:
    if (st == PAGODA_ERR_NOMEM) FAIL(k, "out of memory for %zu floats", count);
    free(h);
    free(hashes);
    mem_free(&k->m, d);
    mem_free(&k->m, dh);
    mem_free(&k->m, dmine);
    return st;
}

static int check_broadcast(ck *k, size_t bytes, int root)
{
    char err[512] = "";
    unsigned char *h = malloc(bytes ? bytes : 1);
    void *d = mem_alloc(&k->m, bytes);
    int st = PAGODA_ERR_NOMEM;
    if (!h || !d) goto out;
    for (size_t i = 0; i < bytes; i++) h[i] = k->rank == root ? bval(i, root) : 0xEE;
    mem_put(&k->m, d, h, bytes);
    st = k->c->ops.broadcast(k->c->ctx, d, bytes, root, err, sizeof err);
    char what[64];
    snprintf(what, sizeof what, "broadcast(root %d) bytes", root);
    if (op_status(k, st, what, bytes, err)) goto out;
    mem_get(&k->m, h, d, bytes);
    for (size_t i = 0; i < bytes; i++)
        if (h[i] != bval(i, root)) {
            FAIL(k, "%s %zu: byte %zu is %u, want %u", what, bytes, i, h[i], bval(i, root));
            break;
        }
out:
    if (st == PAGODA_ERR_NOMEM) FAIL(k, "out of memory for %zu bytes", bytes);
    free(h);
    mem_free(&k->m, d);
    return st;
}

/* gather (root >= 0) or all_gather (root < 0) of `bytes` per rank. */
static int check_gather(ck *k, size_t bytes, int root)
{
    char err[512] = "";
    size_t total = bytes * (size_t)k->size;
    unsigned char *h = malloc(total ? total : 1);
    void *ds = mem_alloc(&k->m, bytes), *dr = mem_alloc(&k->m, total);
    int st = PAGODA_ERR_NOMEM;
    if (!h || !ds || !dr) goto out;
    for (size_t i = 0; i < bytes; i++) h[i] = bval(i, k->rank);
    mem_put(&k->m, ds, h, bytes);
    memset(h, 0xEE, total ? total : 1);
    mem_put(&k->m, dr, h, total);
    char what[64];
    if (root >= 0) {
        snprintf(what, sizeof what, "gather(root %d) bytes", root);
        st = k->c->ops.gather(k->c->ctx, ds, bytes, dr, root, err, sizeof err);
    } else {
        snprintf(what, sizeof what, "all_gather bytes");
        st = k->c->ops.all_gather(k->c->ctx, ds, bytes, dr, err, sizeof err);
    }
    if (op_status(k, st, what, bytes, err)) goto out;
    if (root >= 0 && k->rank != root) goto out;   /* recv is root's only */
    mem_get(&k->m, h, dr, total);
    for (int r = 0; r < k->size; r++)
        for (size_t i = 0; i < bytes; i++)
            if (h[(size_t)r * bytes + i] != bval(i, r)) {
                FAIL(k, "%s %zu: rank %d's byte %zu is %u, want %u", what, bytes, r, i,
                     h[(size_t)r * bytes + i], bval(i, r));
                goto out;
            }
out:
    if (st == PAGODA_ERR_NOMEM) FAIL(k, "out of memory for %zu bytes", total);
    free(h);
    mem_free(&k->m, ds);
    mem_free(&k->m, dr);
    return st;
}

static int check_async(ck *k, size_t count)
{
    if (!k->c->ops.all_reduce_async) return 0;
    char err[512] = "";
    size_t bytes = count * sizeof(float);
    float *h = malloc(bytes);
    void *d = mem_alloc(&k->m, bytes);
    int st = PAGODA_ERR_NOMEM;
    if (!h || !d) goto out;
    for (size_t i = 0; i < count; i++) h[i] = ival(i, k->rank);
    mem_put(&k->m, d, h, bytes);
    pagoda_comm_request *req = NULL;
    st = k->c->ops.all_reduce_async(k->c->ctx, d, count, PAGODA_DTYPE_F32, PAGODA_COMM_SUM, &req,
                                    err, sizeof err);
    if (op_status(k, st, "all_reduce_async count", count, err)) goto out;
    st = k->c->ops.wait(k->c->ctx, req, err, sizeof err);
    if (op_status(k, st, "wait(all_reduce_async) count", count, err)) goto out;
    mem_get(&k->m, h, d, bytes);
    for (size_t i = 0; i < count; i++) {
        float want = 0;
        for (int r = 0; r < k->size; r++) want += ival(i, r);
        if (h[i] != want) {
            FAIL(k, "all_reduce_async of %zu: element %zu is %.9g, want %.9g", count, i, h[i], want);
            break;
        }
    }
out:
    free(h);
    mem_free(&k->m, d);
    return st;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --bench: all_reduce latency and bandwidth (the median of `reps` calls per
 * size; rank 0 prints). */
static int bench(ck *k, int reps)
{
    static const size_t counts[] = {1, 576, 2304, 8192, 65536, 262144, 1048576, 4194304};
    char err[512];
    if (k->rank == 0)
        printf("%12s %12s %12s %14s\n", "floats", "bytes", "median_us", "algbw_MB/s");
    for (size_t s = 0; s < sizeof counts / sizeof counts[0]; s++) {
        size_t n = counts[s];
        void *d = mem_alloc(&k->m, n * 4);
        double *t = calloc((size_t)reps, sizeof *t);
        if (!d || !t) return PAGODA_ERR_NOMEM;
        float *h = calloc(n, 4);
        if (h) mem_put(&k->m, d, h, n * 4);
        free(h);
        int r_eff = n >= 1048576 ? (reps < 20 ? reps : 20) : reps;
        for (int i = 0; i < 3; i++)
            k->c->ops.all_reduce(k->c->ctx, d, n, PAGODA_DTYPE_F32, PAGODA_COMM_SUM, err, sizeof err);
        for (int i = 0; i < r_eff; i++) {
            k->c->ops.barrier(k->c->ctx, err, sizeof err);
            double t0 = now_s();
            if (k->c->ops.all_reduce(k->c->ctx, d, n, PAGODA_DTYPE_F32, PAGODA_COMM_SUM, err, sizeof err))
                return PAGODA_ERR_IO;
            t[i] = now_s() - t0;
        }
        for (int i = 1; i < r_eff; i++)   /* insertion sort: a few dozen */
            for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
                double x = t[j];
                t[j] = t[j - 1];
                t[j - 1] = x;
            }
        double med = t[r_eff / 2];
        if (k->rank == 0)
            printf("%12zu %12zu %12.1f %14.1f\n", n, n * 4, med * 1e6, (double)n * 4 / med / 1e6);
        free(t);
        mem_free(&k->m, d);
    }
    return 0;
}

static int usage(void)
{
    fprintf(stderr,
            "usage: mpirun -n N pagoda comm-check [--comm NAME] [--max-bytes SIZE] [--bench [REPS]]\n"
            "  Runs every collective of the comm plugin NAME (default mpi) at sizes from one\n"
            "  element to --max-bytes (default 16 MiB) on every rank and asserts the results.\n"
            "  --bench: all_reduce latency and bandwidth instead (median of REPS, default 200).\n"
            "  As root, Open MPI needs mpirun --allow-run-as-root; more ranks than cores need\n"
            "  --oversubscribe.\n");
    return 2;
}

int pagoda_cmd_comm_check(int argc, char **argv)
{
    const char *name = "mpi";
    size_t max_bytes = 16u << 20;
    int bench_reps = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--comm") && i + 1 < argc) name = argv[++i];
        else if (!strcmp(argv[i], "--max-bytes") && i + 1 < argc) max_bytes = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--bench")) {
            bench_reps = 200;
            if (i + 1 < argc && argv[i + 1][0] != '-') bench_reps = atoi(argv[++i]);
            if (bench_reps < 3) bench_reps = 3;
        } else return usage();
    }
    char err[1024];
    ck k = {0};
    int st = pagoda_comm_open(NULL, name, &k.c, err, sizeof err);
    if (st) {
        fprintf(stderr, "comm-check: %s\n", err);
        return 1;
    }
    k.rank = k.c->info.rank;
    k.size = k.c->info.size;
    if (mem_open(&k.m, k.c->info.device_memory, err, sizeof err)) {
        fprintf(stderr, "comm-check: rank %d: %s\n", k.rank, err);
        pagoda_comm_close(k.c);
        return 1;
    }
    if (k.rank == 0)
        printf("comm-check: comm.%s: %s, %d ranks, %s memory, transport %s\n", name,
               k.c->info.name, k.size, k.c->info.device_memory ? "device" : "host",
               k.c->info.transport[0] ? k.c->info.transport : "?");
    double t0 = now_s();
    if (bench_reps) {
        st = bench(&k, bench_reps);
        goto done;
    }
    /* the group: every rank's number, once */
    int32_t me = k.rank, *all = calloc((size_t)k.size, sizeof *all);
    void *dme = mem_alloc(&k.m, 4), *dall = mem_alloc(&k.m, (size_t)k.size * 4);
    if (!all || !dme || !dall) {
        fprintf(stderr, "comm-check: out of memory\n");
        return 1;
    }
    mem_put(&k.m, dme, &me, 4);
    if (!op_status(&k, k.c->ops.all_gather(k.c->ctx, dme, 4, dall, err, sizeof err), "all_gather(rank)", 4, err)) {
        mem_get(&k.m, all, dall, (size_t)k.size * 4);
        k.checks++;
        for (int r = 0; r < k.size; r++)
            if (all[r] != r) FAIL(&k, "all_gather of ranks: slot %d holds %d", r, all[r]);
    }
    free(all);
    mem_free(&k.m, dme);
    mem_free(&k.m, dall);
    op_status(&k, k.c->ops.barrier(k.c->ctx, err, sizeof err), "barrier", 0, err);

    /* element counts: 1 .. max_bytes / 4, odd ones and powers of two */
    size_t max_f = max_bytes / 4;
    static const size_t counts[] = {1, 2, 3, 7, 31, 32, 33, 576, 1000, 4097, 65536, 65537,
                                    262147, 1048576, 1048579, 4194304};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0] && !k.failures; i++) {
        if (counts[i] > max_f) continue;
        check_all_reduce(&k, counts[i], PAGODA_COMM_SUM);
    }
    for (size_t i = 0; i < sizeof counts / sizeof counts[0] && !k.failures; i++)
        if (counts[i] <= 65537) {
            check_all_reduce(&k, counts[i], PAGODA_COMM_MAX);
            check_all_reduce(&k, counts[i], PAGODA_COMM_MIN);
        }
    if (!k.failures) check_all_reduce_random(&k, 4097);
    if (!k.failures && max_f >= 262147) check_all_reduce_random(&k, 262147);
    if (!k.failures) check_async(&k, 1000);
    if (!k.failures) check_async(&k, max_f < 1048579 ? max_f : 1048579);

    static const size_t bsizes[] = {0, 1, 3, 64, 4095, 65537, 1048575, 16u << 20};
    for (size_t i = 0; i < sizeof bsizes / sizeof bsizes[0] && !k.failures; i++) {
        if (bsizes[i] > max_bytes) continue;
        /* every root at the small sizes, rank 0 and the last at the large */
        for (int root = 0; root < k.size && !k.failures; root++)
            if (bsizes[i] <= 65537 || root == 0 || root == k.size - 1) check_broadcast(&k, bsizes[i], root);
    }
    static const size_t gsizes[] = {1, 5, 4096, 65539, 1048583};
    for (size_t i = 0; i < sizeof gsizes / sizeof gsizes[0] && !k.failures; i++) {
        if (gsizes[i] * (size_t)k.size > max_bytes) continue;
        check_gather(&k, gsizes[i], 0);
        if (k.size > 1) check_gather(&k, gsizes[i], k.size - 1);
        check_gather(&k, gsizes[i], -1);
    }
    /* the largest all_gather: 16 MiB in all */
    if (!k.failures) check_gather(&k, max_bytes / (size_t)k.size, -1);
    op_status(&k, k.c->ops.barrier(k.c->ctx, err, sizeof err), "barrier", 0, err);

done:;
    /* every rank's failures, summed (the group still works unless an op
     * failed; then this fails too and the exit code says so) */
    float f[2] = {(float)k.failures, (float)k.checks};
    void *df = mem_alloc(&k.m, sizeof f);
    int sum_st = df ? 0 : PAGODA_ERR_NOMEM;
    if (df) {
        mem_put(&k.m, df, f, sizeof f);
        sum_st = k.c->ops.all_reduce(k.c->ctx, df, 2, PAGODA_DTYPE_F32, PAGODA_COMM_SUM, err, sizeof err);
        if (!sum_st) mem_get(&k.m, f, df, sizeof f);
        mem_free(&k.m, df);
    }
    int rc = (st || sum_st || f[0] != 0) ? 1 : 0;
    if (k.rank == 0 && !bench_reps)
        printf("comm-check: comm.%s on %d ranks: %s (%.0f checks on all ranks, %.0f failed) in %.2f s\n",
               name, k.size, rc ? "FAILED" : "passed", f[1], f[0], now_s() - t0);
    pagoda_comm_close(k.c);
    if (k.m.lib) dlclose(k.m.lib);
    return rc;
}
