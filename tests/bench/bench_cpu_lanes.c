/*
 * bench_cpu_lanes.c: a micro-benchmark (not a test: it asserts nothing and
 * prints rates) of the quantized matmul at each ISA level side by side:
 * one thread, N x K weights of each type (default 2048 x 2048, a
 * TinyLlama-1.1B projection) times T tokens (default 1, 16, 64, 512),
 * the levels (AVX2, AVX-VNNI, AVX-512 VNNI, those this CPU has) run in
 * turn round after round, alternating, on the same weights and input.
 * Reports per level the best round's GFLOP/s by process CPU time (the
 * work itself, whatever a shared machine's load) and its ratio to AVX2.
 * The activations' quantization and interleave are in the time, as in
 * the engine. On an AVX-512 VNNI CPU a last column, alternating with the
 * others, is the repacked GEMM (kernels/repack/: the weights registered,
 * repacked once before the rounds) for the types it takes at T >= its
 * threshold, with its ratio to the AVX-512 lanes column.
 *
 *   bench_cpu_lanes [--rounds N] [--types q8_0,q4_0,q4_k,q6_k] [--T 1,16,512] [--K 2048] [--N 2048]
 *
 * Weights: pagoda_quantize_row of uniform values (real blocks; Q6_K,
 * which has no quantizer: random bytes with a small d).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cpu_features.h"
#include "kernels.h"
#include "pagoda/types.h"
#include "quant.h"
#include "repack/repack.h"
#include "repack/repack_matmul.h"
#include "bench_util.h"

static int type_of(const char *s)
{
    for (int t = 0; t < PAGODA_DTYPE_COUNT_; t++)
        if (!strcasecmp(s, pagoda_dtype_name(t))) return t;
    return -1;
}

int main(int argc, char **argv)
{
    int rounds = 3;
    int64_t K = 2048, N = 2048;
    char types[256] = "q8_0,q4_0,q4_1,q4_k,q6_k,q5_0,iq4_xs", ts[128] = "1,16,64,512";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--types")) snprintf(types, sizeof types, "%s", argv[i + 1]);
        else if (!strcmp(argv[i], "--T")) snprintf(ts, sizeof ts, "%s", argv[i + 1]);
        else if (!strcmp(argv[i], "--K")) K = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--N")) N = atoll(argv[i + 1]);
        else {
            fprintf(stderr, "bench_cpu_lanes: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    int levels[3], nl = 0, d = pagoda_cpu_detect_isa();
    if (d >= PAGODA_CPU_ISA_AVX2) levels[nl++] = PAGODA_CPU_ISA_AVX2;
    if (pagoda_cpu_has_avx_vnni()) levels[nl++] = PAGODA_CPU_ISA_AVX_VNNI;
    if (d >= PAGODA_CPU_ISA_AVX512) levels[nl++] = PAGODA_CPU_ISA_AVX512;
    if (!nl) {
        fprintf(stderr, "bench_cpu_lanes: no AVX2 on this CPU\n");
        return 1;
    }
    /* the repacked GEMM's column: the AVX-512 level's path on the layout */
    pagoda_cpu_force_isa(PAGODA_CPU_ISA_AVX512);
    bool rp_col = d >= PAGODA_CPU_ISA_AVX512 && pagoda_rp_path() == PAGODA_RP_PATH_VNNI;
    pagoda_cpu_force_isa(-1);
    char load[64] = "?";
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        if (!fgets(load, sizeof load, lf)) load[0] = 0;
        fclose(lf);
        load[strcspn(load, "\n")] = 0;
    }
    printf("one thread, %lld x %lld weights, best of %d alternating rounds by CPU time; load %s\n",
           (long long)N, (long long)K, rounds, load);
    float *src = malloc(sizeof(float) * (size_t)K);
    char *tsave = NULL;
    for (char *tn = strtok_r(types, ",", &tsave); tn; tn = strtok_r(NULL, ",", &tsave)) {
        int dt = type_of(tn);
        if (dt < 0) {
            fprintf(stderr, "bench_cpu_lanes: unknown type '%s'\n", tn);
            return 2;
        }
        size_t rb = pagoda_dtype_row_bytes(dt, K);
        uint8_t *w = malloc(rb * (size_t)N);
        for (int64_t n = 0; n < N; n++) {
            for (int64_t k = 0; k < K; k++) src[k] = (unif() - 0.5f);
            if (dt == PAGODA_DTYPE_Q6_K) {
                /* no quantizer: random bytes, a small f16 d ending each block */
                uint8_t *row = w + (size_t)n * rb;
                for (size_t i = 0; i < rb; i++) row[i] = (uint8_t)(unif() * 256.0f);
                uint16_t dh = pagoda_fp32_to_fp16(0.001f);
                for (size_t off = 208; off + 2 <= rb; off += 210) memcpy(row + off, &dh, 2);
            } else if (pagoda_quantize_row(dt, src, w + (size_t)n * rb, K)) {
                fprintf(stderr, "bench_cpu_lanes: cannot quantize %s\n", tn);
                return 1;
            }
        }
        char tl[128];
        snprintf(tl, sizeof tl, "%s", ts);
        char *tsv = NULL;
        for (char *tt = strtok_r(tl, ",", &tsv); tt; tt = strtok_r(NULL, ",", &tsv)) {
            int64_t T = atoll(tt);
            float *x = malloc(sizeof(float) * (size_t)(T * K)), *out = malloc(sizeof(float) * (size_t)(T * N));
            for (int64_t i = 0; i < T * K; i++) x[i] = (unif() - 0.5f);
            pagoda_cpu_exec ex = {.pool = NULL}, exr = {.pool = NULL};
            /* column nl: the repacked GEMM (exr's cache holds w's copy) */
            bool rp = rp_col && pagoda_rp_type_supported(dt) && T >= pagoda_rp_min_t() && pagoda_rp_min_t() > 0;
            if (rp) {
                exr.repack = pagoda_rp_cache_create();
                rp = exr.repack && !pagoda_rp_cache_add_region(exr.repack, w, rb * (size_t)N);
            }
            double best[4] = {1e30, 1e30, 1e30, 1e30};
            /* enough calls per measurement for ~0.1 s of work at 100 GFLOP/s */
            int reps = (int)(1e10 / (2.0 * (double)(N * K * T))) + 1;
            for (int r = 0; r < rounds; r++)
                for (int l = 0; l < nl + rp; l++) {
                    pagoda_cpu_exec *e = l < nl ? &ex : &exr;
                    pagoda_cpu_force_isa(l < nl ? levels[l] : PAGODA_CPU_ISA_AVX512);
                    pagoda_cpu_matmul(e, x, sizeof(float) * (size_t)K, T, K, w, dt, rb, N, NULL, out,
                                      sizeof(float) * (size_t)N);
                    double t0 = cpu_s();
                    for (int i = 0; i < reps; i++)
                        pagoda_cpu_matmul(e, x, sizeof(float) * (size_t)K, T, K, w, dt, rb, N, NULL, out,
                                          sizeof(float) * (size_t)N);
                    double s = (cpu_s() - t0) / reps;
                    if (s < best[l]) best[l] = s;
                }
            pagoda_cpu_force_isa(-1);
            if (rp) {  /* the copy was made and used: else the column measured the lanes kernels */
                int count = 0;
                pagoda_rp_cache_bytes(exr.repack, &count);
                rp = count == 1;
            }
            printf("%-7s T=%-4lld", pagoda_dtype_name(dt), (long long)T);
            for (int l = 0; l < nl; l++)
                printf("  %s %6.1f GFLOP/s (%.2fx)", pagoda_cpu_isa_name(levels[l]),
                       2.0 * (double)(N * K * T) / best[l] * 1e-9, best[0] / best[l]);
            if (rp)
                printf("  repacked %6.1f GFLOP/s (%.2fx; %.2fx the avx512 lanes)",
                       2.0 * (double)(N * K * T) / best[nl] * 1e-9, best[0] / best[nl], best[nl - 1] / best[nl]);
            printf("\n");
            fflush(stdout);
            pagoda_cpu_exec_release(&ex);
            pagoda_cpu_exec_release(&exr);
            free(x);
            free(out);
        }
        free(w);
    }
    free(src);
    return 0;
}
