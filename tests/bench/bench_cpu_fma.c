/*
 * bench_cpu_fma.c: a micro-benchmark (not a test: it asserts nothing and
 * prints rates) of F16 / BF16 matmuls of tinyllama-1.1B's shapes (K x N =
 * 2048 x 2048, 2048 x 5632, 5632 x 2048) at several T through
 * pagoda_cpu_matmul with f16_gemm forced each way (kernels/avx512/
 * gemm_fma.h): fma (the F32-FMA GEMM), dpbf16 (the BF16 GEMM for BF16;
 * for F16 the exact lanes kernel unless PAGODA_CPU_BF16=2), off (the
 * exact lanes / dot kernels), beside dequantize + OpenBLAS sgemm (the
 * conversion on one thread, so compare that column at --threads 1),
 * alternating rep by rep on the same weights. Prints GFLOP/s of the best
 * rep per side, process CPU time (with --threads 1 the kernel's own rate
 * whatever the machine's load) and, with --wall, wall time instead.
 *
 *   bench_cpu_fma [--threads N] [--reps N] [--T 16,32,64,512] [--wall 1]
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "avx512/gemm_fma.h"
#include "cpu_features.h"
#include "kernels.h"
#include "pagoda/types.h"
#include "quant.h"
#include "threadpool.h"

static double now(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    int threads = 1, reps = 3, wall = 0;
    char tlist[256] = "16,32,64,512";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--T")) snprintf(tlist, sizeof tlist, "%s", argv[i + 1]);
        else if (!strcmp(argv[i], "--wall")) wall = atoi(argv[i + 1]);
    }
    if (pagoda_cpu_active_isa() < PAGODA_CPU_ISA_AVX512) {
        printf("bench_cpu_fma: the active level is below AVX-512: nothing to compare\n");
        return 0;
    }
    pagoda_threadpool *pool = NULL;
    if (pagoda_threadpool_create(threads, &pool)) return 1;
    openblas_set_num_threads(threads);
    static const int64_t shapes[3][2] = {{2048, 2048}, {2048, 5632}, {5632, 2048}};
    static const int modes[3] = {PAGODA_F16GEMM_FMA, PAGODA_F16GEMM_DPBF16, PAGODA_F16GEMM_OFF};
    printf("threads %d, best of %d reps; GFLOP/s (%s time)\n", threads, reps, wall ? "wall" : "process CPU");
    printf("%-5s %-5s %-11s %8s %8s %8s %8s\n", "type", "T", "K x N", "fma", "dpbf16", "off", "sgemm");
    char *save = NULL;
    clockid_t clk = wall ? CLOCK_MONOTONIC : CLOCK_PROCESS_CPUTIME_ID;
    for (char *tok = strtok_r(tlist, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int64_t T = atoll(tok);
        for (int dt = 0; dt < 2; dt++) {
            int dtype = dt ? PAGODA_DTYPE_BF16 : PAGODA_DTYPE_F16;
            for (int s = 0; s < 3; s++) {
                int64_t K = shapes[s][0], N = shapes[s][1];
                float *x = malloc(sizeof(float) * (size_t)(T * K));
                float *out = malloc(sizeof(float) * (size_t)(T * N));
                float *wf = malloc(sizeof(float) * (size_t)(N * K));
                uint16_t *w = malloc(sizeof(uint16_t) * (size_t)(N * K));
                if (!x || !out || !w || !wf) return 1;
                for (int64_t i = 0; i < T * K; i++) x[i] = (float)((i * 7) % 13) * 0.01f;
                for (int64_t i = 0; i < N * K; i++)
                    w[i] = dt ? 0x3c00 + (uint16_t)(i % 97) : 0x2c00 + (uint16_t)(i % 97);
                pagoda_cpu_exec ex = {.pool = pool};
                double best[4] = {1e9, 1e9, 1e9, 1e9};
                for (int r = 0; r < reps; r++)
                    for (int side = 0; side < 4; side++) {
                        double t0 = now(clk);
                        if (side < 3) {
                            ex.f16_gemm = modes[side];
                            pagoda_cpu_matmul(&ex, x, sizeof(float) * (size_t)K, T, K, w, dtype, 2 * (size_t)K, N,
                                              NULL, out, sizeof(float) * (size_t)N);
                        } else {
                            for (int64_t n = 0; n < N; n++)
                                pagoda_dequantize_row(dtype, w + n * K, wf + n * K, K);
                            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)N, (int)K, 1.0f, x,
                                        (int)K, wf, (int)K, 0.0f, out, (int)N);
                        }
                        double d = now(clk) - t0;
                        if (d < best[side]) best[side] = d;
                    }
                double fl = 2.0 * (double)T * (double)K * (double)N / 1e9;
                char kn[32];
                snprintf(kn, sizeof kn, "%lldx%lld", (long long)K, (long long)N);
                printf("%-5s %-5lld %-11s %8.1f %8.1f %8.1f %8.1f\n", dt ? "BF16" : "F16", (long long)T, kn,
                       fl / best[0], fl / best[1], fl / best[2], fl / best[3]);
                pagoda_cpu_exec_release(&ex);
                free(x); free(out); free(w); free(wf);
            }
        }
    }
    pagoda_threadpool_destroy(pool);
    return 0;
}
