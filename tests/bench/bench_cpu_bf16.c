/*
 * bench_cpu_bf16.c: a micro-benchmark (not a test: it asserts nothing and
 * prints rates) of F16 / BF16 matmuls of a tinyllama-1.1B layer's shapes
 * (K x N = 2048 x 2048, 2048 x 5632, 5632 x 2048) at several T, the BF16
 * GEMM (kernels/avx512/matmul_bf16.c) beside the exact F32 path of the
 * AVX2 table (PAGODA_CPU_ISA=avx2's), alternating rep by rep on the same
 * weights. Prints GFLOP/s of the best rep per side (wall and process CPU
 * time: with --threads 1 the CPU figure is the kernel's own rate whatever
 * the machine's load) and their ratio. On an AMX-BF16 host the detected
 * level runs the tile GEMM (kernels/amx/amx_bf16_matmul.c) and a third
 * side forces avx512 (vdpbf16ps), so the two BF16 GEMMs alternate too.
 * F16 takes the BF16 GEMMs only with PAGODA_CPU_BF16=2 in the environment.
 *
 *   bench_cpu_bf16 [--threads N] [--reps N] [--T 16,64,512]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amx/gemm_bf16_amx.h"
#include "avx512/gemm_bf16.h"
#include "cpu_features.h"
#include "kernels.h"
#include "pagoda/types.h"
#include "threadpool.h"

static double now(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    int threads = 1, reps = 3;
    char tlist[256] = "16,64,512";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--T")) snprintf(tlist, sizeof tlist, "%s", argv[i + 1]);
    }
    if (!pagoda_cpu_has_avx512_bf16() || pagoda_cpu_active_isa() < PAGODA_CPU_ISA_AVX512) {
        printf("bench_cpu_bf16: this CPU has no AVX512-BF16 (or a lower level is forced): nothing to compare\n");
        return 0;
    }
    pagoda_threadpool *pool = NULL;
    if (pagoda_threadpool_create(threads, &pool)) return 1;
    static const int64_t shapes[3][2] = {{2048, 2048}, {2048, 5632}, {5632, 2048}};
    int nsides = pagoda_cpu_bf16_path() == PAGODA_BF16_PATH_AMX ? 3 : 2;
    printf("threads %d, best of %d reps; GFLOP/s wall (cpu); bf16 gemm: %s\n", threads, reps,
           pagoda_cpu_bf16_path_name(pagoda_cpu_bf16_path()));
    printf("%-5s %-5s %-11s %-22s %-22s %-12s %-22s %s\n", "type", "T", "K x N", "bf16 gemm", "avx2 f32",
           "ratio (wall)", nsides == 3 ? "avx512 forced" : "", nsides == 3 ? "amx/avx512 (wall)" : "");
    char *save = NULL;
    for (char *tok = strtok_r(tlist, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int64_t T = atoll(tok);
        for (int dt = 0; dt < 2; dt++) {
            int dtype = dt ? PAGODA_DTYPE_F16 : PAGODA_DTYPE_BF16;
            for (int s = 0; s < 3; s++) {
                int64_t K = shapes[s][0], N = shapes[s][1];
                float *x = malloc(sizeof(float) * (size_t)(T * K));
                float *out = malloc(sizeof(float) * (size_t)(T * N));
                uint16_t *w = malloc(sizeof(uint16_t) * (size_t)(N * K));
                if (!x || !out || !w) return 1;
                for (int64_t i = 0; i < T * K; i++) x[i] = (float)((i * 7) % 13) * 0.01f;
                for (int64_t i = 0; i < N * K; i++) w[i] = dt ? 0x2c00 + (uint16_t)(i % 97) : 0x3c00 + (uint16_t)(i % 97);
                pagoda_cpu_exec ex = {.pool = pool};
                double best[3][2] = {{1e9, 1e9}, {1e9, 1e9}, {1e9, 1e9}};
                for (int r = 0; r < reps; r++)
                    for (int side = 0; side < nsides; side++) {
                        pagoda_cpu_force_isa(side == 2 ? PAGODA_CPU_ISA_AVX512 : side ? PAGODA_CPU_ISA_AVX2 : -1);
                        double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
                        pagoda_cpu_matmul(&ex, x, sizeof(float) * (size_t)K, T, K, w, dtype, 2 * (size_t)K, N,
                                          NULL, out, sizeof(float) * (size_t)N);
                        double dw = now(CLOCK_MONOTONIC) - t0, dc = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
                        if (dw < best[side][0]) best[side][0] = dw;
                        if (dc < best[side][1]) best[side][1] = dc;
                    }
                pagoda_cpu_force_isa(-1);
                double fl = 2.0 * (double)T * (double)K * (double)N / 1e9;
                char a[32], b[32], c[32] = "", cr[32] = "", kn[32];
                if (nsides == 3) {
                    snprintf(c, sizeof c, "%.1f (%.1f)", fl / best[2][0], fl / best[2][1]);
                    snprintf(cr, sizeof cr, "%.2fx", best[2][0] / best[0][0]);
                }
                snprintf(a, sizeof a, "%.1f (%.1f)", fl / best[0][0], fl / best[0][1]);
                snprintf(b, sizeof b, "%.1f (%.1f)", fl / best[1][0], fl / best[1][1]);
                snprintf(kn, sizeof kn, "%lldx%lld", (long long)K, (long long)N);
                printf("%-5s %-5lld %-11s %-22s %-22s %-12.2f %-22s %s\n", dt ? "F16" : "BF16", (long long)T, kn,
                       a, b, best[1][0] / best[0][0], c, cr);
                pagoda_cpu_exec_release(&ex);
                free(x); free(out); free(w);
            }
        }
    }
    pagoda_threadpool_destroy(pool);
    return 0;
}
