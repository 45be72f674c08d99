#define _GNU_SOURCE /* strdup, usleep, memmem */
/*
 * bench_roofline.c: the machine's rooflines for `pagoda bench
 * --roofline` (read bandwidth, the OpenBLAS sgemm rate), a model's bytes
 * and FLOPs per token, and decode / prefill printed against their bounds.
 * Not for: the engine's own kernels or any run of the workload.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_internal.h"

typedef struct bw_arg {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} bw_arg;

typedef uint64_t bw_vec __attribute__((vector_size(16)));

static void *bw_thread(void *arg)
{
    bw_arg *a = arg;
    /* eight independent 16-byte sums (SSE2, every x86-64 has it): the
     * loop is bound by memory, not by loads or adds */
    const bw_vec *v = (const bw_vec *)a->p;
    size_t nv = a->n / 2;
    bw_vec s[8] = {{0}};
    size_t i = 0;
    for (; i + 8 <= nv; i += 8)
        for (int k = 0; k < 8; k++) s[k] += v[i + k];
    uint64_t t = 0;
    for (; i < nv; i++) t += v[i][0] + v[i][1];
    for (int k = 0; k < 8; k++) t += s[k][0] + s[k][1];
    a->sum = t;
    return NULL;
}

/* Read bandwidth in GB/s: `threads` threads summing their share of a buffer
 * far larger than the last-level cache, best of `reps`. */
static double measure_bandwidth(int threads, size_t bytes, int reps)
{
    size_t n = bytes / sizeof(uint64_t);
    uint64_t *buf = aligned_alloc(64, n * sizeof *buf);
    if (!buf) return 0;
    for (size_t i = 0; i < n; i++) buf[i] = i; /* touch every page first */
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    pthread_t th[64];
    bw_arg a[64];
    double best = 0;
    volatile uint64_t sink = 0;
    for (int r = 0; r < reps; r++) {
        double t = bench_now_s();
        for (int k = 0; k < threads; k++) {
            /* even offsets keep each share 16-byte aligned */
            size_t lo = (n * (size_t)k / (size_t)threads) & ~(size_t)1,
                   hi = k + 1 == threads ? n : (n * (size_t)(k + 1) / (size_t)threads) & ~(size_t)1;
            a[k] = (bw_arg){buf + lo, hi - lo, 0};
            if (pthread_create(&th[k], NULL, bw_thread, &a[k])) a[k].n = 0, bw_thread(&a[k]), th[k] = 0;
        }
        for (int k = 0; k < threads; k++) {
            if (th[k]) pthread_join(th[k], NULL);
            sink += a[k].sum;
        }
        double dt = bench_now_s() - t;
        double gbs = (double)(n * sizeof *buf) / dt / 1e9;
        if (gbs > best) best = gbs;
    }
    (void)sink;
    free(buf);
    return best;
}

typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                         int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* The sgemm rate in GFLOP/s of OpenBLAS at `threads` threads, on the
 * shape of a 512-token prefill through a 2048-wide layer, best of reps.
 * OpenBLAS is opened here (not linked) so main()'s OPENBLAS_CORETYPE choice
 * is in place when it loads. Returns 0 when OpenBLAS cannot be opened. */
static double measure_sgemm(int threads, int reps, char *core, size_t core_len)
{
    void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_GLOBAL);
    if (!h) h = dlopen("libopenblas.so", RTLD_NOW | RTLD_GLOBAL);
    if (!h) return 0;
    sgemm_fn gemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
    void (*set_threads)(int) = (void (*)(int))dlsym(h, "openblas_set_num_threads");
    char *(*get_core)(void) = (char *(*)(void))dlsym(h, "openblas_get_corename");
    if (core && core_len) snprintf(core, core_len, "%s", get_core ? get_core() : "?");
    if (!gemm) return 0;
    if (set_threads) set_threads(threads);
    const int M = 512, N = 2048, K = 2048;
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * N * K),
          *c = malloc(sizeof(float) * M * N);
    double best = 0;
    if (a && b && c) {
        for (int i = 0; i < M * K; i++) a[i] = (float)(i % 7) * 0.01f;
        for (int i = 0; i < N * K; i++) b[i] = (float)(i % 5) * 0.01f;
        for (int r = 0; r < reps + 1; r++) {
            double t = bench_now_s();
            /* C = A B^T, row-major: the layout the CPU backend's prefill uses */
            gemm(101, 111, 112, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
            double dt = bench_now_s() - t;
            double g = 2.0 * M * N * K / dt / 1e9;
            if (r > 0 && g > best) best = g; /* the first run starts OpenBLAS's threads */
        }
    }
    free(a);
    free(b);
    free(c);
    return best;
}

/* Bytes of weights one decode step streams, and matmul FLOPs per token:
 * every tensor, except that the token embedding is read one row per token
 * (unless the output layer is tied to it) and is no matmul, and a MoE
 * layer's experts count n_experts_used of n_experts. */
void bench_model_traffic(const pagoda_model *m, double *bytes, double *flops)
{
    double b = 0, f = 0;
    const gguf_file *g = m->gguf;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        double elems = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) elems *= (double)t->ne[d];
        if (t == m->tok_embd) {
            if (m->hp.tied_output) { b += (double)t->nbytes; f += 2 * elems; }
            else b += (double)t->nbytes / (double)(t->ne[1] > 0 ? t->ne[1] : 1);
            continue;
        }
        /* a 3-D expert tensor: a token reads and multiplies n_experts_used
         * of its n_experts (the memory plan's decode bytes count the same) */
        double share = 1;
        if (t->n_dims == 3 && m->hp.n_experts > 0 && t->ne[2] == m->hp.n_experts)
            share = (double)m->hp.n_experts_used / (double)m->hp.n_experts;
        b += (double)t->nbytes * share;
        if (t->n_dims >= 2) f += 2 * elems * share;
    }
    *bytes = b;
    *flops = f;
}

void bench_print_roofline(const roofline *rf)
{
    printf("machine: read bandwidth %.1f GB/s, sgemm %.1f GFLOP/s (%d threads, OpenBLAS core %s)\n",
           rf->bw_gbs, rf->sgemm_gflops, rf->threads, rf->blas_core);
    bench_print_peaks(rf);
}

void bench_measure_roofline(const bench_opts *o, roofline *rf)
{
    rf->threads = o->threads;
    fprintf(stderr, "bench: measuring read bandwidth (512 MiB, %d threads) and sgemm...\n", rf->threads);
    rf->bw_gbs = measure_bandwidth(rf->threads, 512u << 20, 5);
    rf->sgemm_gflops = measure_sgemm(rf->threads, 5, rf->blas_core, sizeof rf->blas_core);
    bench_measure_peaks(rf);
}

/* decode and prefill against their bounds */
void bench_print_bounds(const bench_result *x, const roofline *rf)
{
    double dec_bound = rf->bw_gbs > 0 ? rf->bw_gbs * 1e9 / x->bytes_per_token : 0;
    double pre_bound = rf->sgemm_gflops > 0 ? rf->sgemm_gflops * 1e9 / x->flops_per_token : 0;
    if (x->decode_tps > 0)
        printf("  %-10s decode  %7.1f tok/s   bound %7.1f tok/s (%.1f MB/token / %.1f GB/s)  ratio %.2f"
               "  (median step: %.1f tok/s, ratio %.2f)\n",
               x->label, x->decode_tps, dec_bound, x->bytes_per_token / 1e6, rf->bw_gbs,
               bench_ratio(x->decode_tps, dec_bound), x->decode_p50_tps, bench_ratio(x->decode_p50_tps, dec_bound));
    if (x->prefill_tps > 0)
        printf("  %-10s prefill %7.1f tok/s   bound %7.1f tok/s (%.2f GFLOP/token / %.1f GFLOP/s)  ratio %.2f  (%d-token prompt)\n",
               x->label, x->prefill_tps, pre_bound, x->flops_per_token / 1e9, rf->sgemm_gflops,
               bench_ratio(x->prefill_tps, pre_bound), x->prefill_len);
    /* the same figure against the instruction peak of its path, on the
     * bench's threads (the backend's own count may differ: --threads) */
    const bench_peak *pk = x->prefill_tps > 0 ? bench_matching_peak(rf, x->model_type, x->f16_gemm) : NULL;
    if (pk && pk->all_gops > 0)
        printf("  %-10s prefill %7.1f GFLOP/s  %.2f of the %s peak (%.1f G ops/s, %d threads; one core %.1f)\n",
               x->label, x->prefill_tps * x->flops_per_token / 1e9,
               bench_ratio(x->prefill_tps * x->flops_per_token / 1e9, pk->all_gops), pk->name,
               pk->all_gops, rf->threads, pk->core_gops);
}
