/*
 * bench_cpu_mxfp4.c: a micro-benchmark (not a test: it asserts nothing
 * and prints rates) of the CPU matmul on MXFP4 weights beside Q4_0,
 * IQ4_NL and Q8_0 at one shape (default K = N = 2880, gpt-oss-20b's
 * width), through pagoda_cpu_matmul (the activations' quantization and
 * interleave included), on one thread, at T = 1 (decode: per-row dots),
 * 16 and 64 (tokens in lanes) and 512 (prefill). Each level the CPU has
 * (AVX2; AVX-512, where MXFP4 runs its VNNI kernels) is forced in turn.
 * Reports GFLOP/s (2 T K N per call) per CPU-second of the best rep: on a
 * shared machine CPU time is what time-sharing leaves alone. All the
 * types' reps alternate, so a quiet or loud moment favours none.
 *
 *   bench_cpu_mxfp4 [--reps N] [--K N] [--N N] [--T 1,16,64,512]
 *
 * Weights: N(0, 0.02) quantized by the references (the kernels' speed
 * does not depend on the values); 4 T K + N K bytes in all, in cache
 * for K = N = 2880 except Q8_0's 8.8 MB.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_features.h"
#include "kernels.h"
#include "pagoda/types.h"
#include "quant.h"

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float gauss(void)
{
    /* sum of 4 uniforms, scaled: close enough to normal for weights */
    float s = 0;
    for (int i = 0; i < 4; i++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        s += (float)(rng >> 40) / (float)(1 << 24) - 0.5f;
    }
    return s * 1.732f;
}

int main(int argc, char **argv)
{
    int reps = 5;
    int64_t K = 2880, N = 2880;
    const char *Ts = "1,16,64,512";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--K")) K = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--N")) N = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--T")) Ts = argv[i + 1];
        else {
            fprintf(stderr, "usage: %s [--reps N] [--K N] [--N N] [--T 1,16,64,512]\n", argv[0]);
            return 2;
        }
    }
    if (K % 32 || K <= 0 || N <= 0 || reps < 1) {
        fprintf(stderr, "K must be a positive multiple of 32, N and --reps positive\n");
        return 2;
    }
    static const int types[] = {PAGODA_DTYPE_MXFP4, PAGODA_DTYPE_Q4_0, PAGODA_DTYPE_IQ4_NL, PAGODA_DTYPE_Q8_0};
    enum { NT = 4 };
    uint8_t *w[NT];
    size_t rb[NT];
    float *row = malloc(sizeof(float) * (size_t)K);
    for (int i = 0; i < NT; i++) {
        rb[i] = pagoda_dtype_row_bytes(types[i], K);
        w[i] = malloc(rb[i] * (size_t)N);
        if (!w[i] || !row) return 1;
        for (int64_t n = 0; n < N; n++) {
            for (int64_t k = 0; k < K; k++) row[k] = 0.02f * gauss();
            pagoda_quantize_row(types[i], row, w[i] + (size_t)n * rb[i], K);
        }
    }
    int64_t tlist[16];
    int nts = 0;
    for (const char *p = Ts; *p && nts < 16;) {
        tlist[nts++] = atoll(p);
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    int64_t tmax = 1;
    for (int i = 0; i < nts; i++) tmax = tlist[i] > tmax ? tlist[i] : tmax;
    float *x = malloc(sizeof(float) * (size_t)(tmax * K)), *out = malloc(sizeof(float) * (size_t)(tmax * N));
    if (!x || !out) return 1;
    for (int64_t i = 0; i < tmax * K; i++) x[i] = gauss();
    pagoda_cpu_exec ex = {0}; /* no pool: the caller's thread alone */
    static const int levels[] = {PAGODA_CPU_ISA_AVX2, PAGODA_CPU_ISA_AVX512};
    char path[160];
    printf("K = %lld, N = %lld, one thread, GFLOP/s per CPU-second (best of %d reps)\n", (long long)K,
           (long long)N, reps);
    for (int li = 0; li < 2; li++) {
        if (pagoda_cpu_force_isa(levels[li]) != levels[li]) continue;
        bool vnni = levels[li] == PAGODA_CPU_ISA_AVX512 && __builtin_cpu_supports("avx512vnni");
        printf("\nlevel %s (%s; MXFP4: %s)\n", pagoda_cpu_isa_name(levels[li]),
               pagoda_cpu_kernel_path(path, sizeof path), vnni ? "AVX-512 VNNI kernels" : "AVX2 kernels");
        printf("%6s", "T");
        for (int i = 0; i < NT; i++) printf(" %9s", pagoda_dtype_name(types[i]));
        printf("   MXFP4/Q4_0\n");
        for (int ti = 0; ti < nts; ti++) {
            int64_t T = tlist[ti];
            if (T < 1) continue;
            /* about 0.2 s of one type's work per rep at 100 GFLOP/s */
            double flop = 2.0 * (double)T * (double)K * (double)N;
            int iters = (int)(2e10 / flop);
            iters = iters < 1 ? 1 : iters > 2000 ? 2000 : iters;
            double best[NT] = {0};
            for (int r = 0; r < reps; r++)
                for (int i = 0; i < NT; i++) {
                    double t0 = cpu_s();
                    for (int it = 0; it < iters; it++)
                        pagoda_cpu_matmul(&ex, x, sizeof(float) * (size_t)K, T, K, w[i], types[i], rb[i], N, NULL,
                                          out, sizeof(float) * (size_t)N);
                    double g = flop * iters / (cpu_s() - t0) / 1e9;
                    if (g > best[i]) best[i] = g;
                }
            printf("%6lld", (long long)T);
            for (int i = 0; i < NT; i++) printf(" %9.1f", best[i]);
            printf("   %.2fx\n", best[0] / best[1]);
        }
    }
    pagoda_cpu_force_isa(-1);
    pagoda_cpu_exec_release(&ex);
    for (int i = 0; i < NT; i++) free(w[i]);
    free(row);
    free(x);
    free(out);
    return 0;
}
