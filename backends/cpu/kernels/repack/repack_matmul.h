/*
 * repack_matmul.h: which GEMM on the row-interleaved layout runs here, and
 * the hook matmul.c calls for the matrices it takes (repack_matmul.c).
 * Not for: the layouts (repack.h).
 */
#ifndef PAGODA_CPU_REPACK_MATMUL_H
#define PAGODA_CPU_REPACK_MATMUL_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels.h"

enum {
    PAGODA_RP_PATH_NONE = 0,    /* this level has no GEMM on the layout: matmul.c's kernels */
    PAGODA_RP_PATH_VNNI = 1,    /* AVX-512 VNNI (gemm_vnni_avx512.c) */
    PAGODA_RP_PATH_AMX = 2,     /* AMX-INT8 tiles (../amx/gemm_amx.c) */
    PAGODA_RP_PATH_AMX_EMU = 3  /* the same on the plain-C tiles: tests only */
};

/* From this many tokens the repacked GEMMs take Q8_0 / Q4_0 / Q4_1 / Q4_K / Q5_K /
 * Q6_K matrices
 * (docs/backend-cpu.md has the measurement). PAGODA_CPU_REPACK_MIN_T in
 * the environment overrides it (read once); 0 turns them off. */
#define PAGODA_RP_MIN_T 16
int64_t pagoda_rp_min_t(void);
/* [any thread] The bytes of the repacked copy the GEMMs will make of a
 * dtype weight of N rows of K values at the active level (its first call
 * of >= pagoda_rp_min_t() tokens): pagoda_rp_bytes() where the level has a
 * path, repacking is on and the type and K fit the layout, else 0. The
 * memory plan counts it (ABI 1.15 weight_extra_bytes). */
uint64_t pagoda_rp_planned_bytes(int dtype, int64_t N, int64_t K);

/* [any thread] The path for the active ISA level: AMX where the level is
 * AMX and pagoda_amx_usable(), else VNNI where the level is AVX-512 and
 * the CPU has AVX-512 VNNI, else none. */
int pagoda_rp_path(void);
/* The path a call of T tokens on weights of dtype takes at level path on ex
 * (ex->batch_invariant: the VNNI GEMM, never the tiles): at
 * the AMX level the tiles take only what measured faster there than the
 * AVX-512 VNNI GEMM on the first AMX host (docs/benchmarks.md, "Issue 27 on
 * the AMX host"): Q8_0 from PAGODA_RP_AMX_MIN_T tokens (96.7 against 68.9
 * tok/s at 512; Q4_0 53.6 against 74.8, Q4_K_M 76.6 against 99.3, 16
 * sequences of the 110M Q8_0 shape 198 against 308); the rest VNNI (Q4_1
 * too: unmeasured on AMX, taken as Q4_0).
 * PAGODA_CPU_AMX_ALL=1 sends every type and size to the tiles. */
#define PAGODA_RP_AMX_MIN_T 64
#define PAGODA_RP_AMX_MIN_T_STR "64"
int pagoda_rp_path_for(const pagoda_cpu_exec *ex, int path, int dtype, int64_t T);
const char *pagoda_rp_path_name(int path);

/* [main thread] Tests only: run the emulated AMX path whatever the host
 * (never set by the server). */
void pagoda_rp_force_amx_emulation(bool on);

/* [engine thread] Computes every matrix of w[0..n) the repacked GEMMs
 * take (see above; ex->repack must be set, done[i] false) and sets its
 * done[i]; the rest are left to the caller. PAGODA_OK, or
 * PAGODA_ERR_NOMEM (nothing marked done). */
int pagoda_cpu_rp_matmul(pagoda_cpu_exec *ex, const float *x, size_t x_stride, int64_t T, int64_t K,
                         const pagoda_cpu_mat *w, int n, bool *done);

#endif
