/*
 * gemm_bf16_amx.h: the BF16 GEMM on the AMX-BF16 tiles (TDPBF16PS) for F16
 * and BF16 weights with many activation rows, the same arithmetic as
 * ../avx512/gemm_bf16.h (activations rounded to BF16, F16 weights rounded
 * to BF16, products exact, F32 sums) with the roles that let the weights
 * go in unpacked: the weights are the A operand (16 rows x 32 values, one
 * 64-byte row of the matrix per tile row, read straight from the weights
 * when they are BF16 and whole tiles), the activations the B operand in
 * the 16-token groups of BF16 pairs that pack_x of gemm_bf16.h makes
 * (1,024 contiguous bytes per 32 values), C = 16 rows x 16 tokens, F32,
 * kept in the tiles across the whole of K.
 * The tile kernel (amx_bf16_gemm.inc) is compiled twice: gemm_bf16_amx.c
 * (the real tiles) and gemm_bf16_amx_emu.c (tile_emu.c: any host, tests);
 * the driver over the pool is amx_bf16_matmul.c.
 * Not for: the vdpbf16ps kernels (../avx512/), deciding whether BF16
 * rounding is wanted (pagoda_cpu_bf16_applies).
 */
#ifndef PAGODA_CPU_GEMM_BF16_AMX_H
#define PAGODA_CPU_GEMM_BF16_AMX_H

#include <stddef.h>
#include <stdint.h>

#include "avx512/gemm_bf16.h"
#include "kernels.h"

/* Values of K per tile step (64 bytes of BF16). */
#define PAGODA_AMXBF16_KC 32

/* out[t][r] = sum_k x[t][k] w[r][k] (+ bias[r]) for r < nr, t < T, over
 * nc steps of 32 values. w: BF16 rows lda bytes apart, ceil(nr / 16) * 16
 * of them readable and nc * 32 values each (the caller pads); xp: the
 * activations as ceil(T / 16) groups of nc * 16 pair rows of 16 tokens
 * (group_elems uint16 apart, padding zero). Loads its own tile config on
 * the calling thread and releases it before returning. */
typedef void (*pagoda_amxbf16_gemm_fn)(const uint16_t *w, size_t lda, int64_t nr, const uint16_t *xp,
                                       size_t group_elems, int64_t T, int64_t nc, const float *bias,
                                       float *out, size_t out_stride);

/* The real tiles (only where pagoda_amx_has_bf16()) and the emulation. */
void pagoda_amxbf16_gemm_amx(const uint16_t *w, size_t lda, int64_t nr, const uint16_t *xp,
                             size_t group_elems, int64_t T, int64_t nc, const float *bias, float *out,
                             size_t out_stride);
void pagoda_amxbf16_gemm_amx_emu(const uint16_t *w, size_t lda, int64_t nr, const uint16_t *xp,
                                 size_t group_elems, int64_t T, int64_t nc, const float *bias, float *out,
                                 size_t out_stride);

enum {
    PAGODA_BF16_PATH_NONE = 0,   /* exact F32 kernels (the table's) */
    PAGODA_BF16_PATH_AVX512 = 1, /* vdpbf16ps (../avx512/matmul_bf16.c) */
    PAGODA_BF16_PATH_AMX = 2     /* TDPBF16PS (this GEMM) */
};

/* [any thread] Which BF16 GEMM the active level runs: AMX where the level
 * is AMX (PAGODA_CPU_ISA, pagoda_cpu_force_isa) and pagoda_amx_has_bf16()
 * (CPUID AMX-BF16 on top of the AMX grant) and the CPU has AVX512-BF16 (the
 * activation packing's instructions); AVX512 where the level is AVX-512 or
 * above with AVX512-BF16; else none. Whether a given matmul takes it is
 * still pagoda_cpu_bf16_applies(). */
int pagoda_cpu_bf16_path(void);
/* "AMX-BF16 tiles", "AVX512-BF16", "none". */
const char *pagoda_cpu_bf16_path_name(int path);

/* The matrices of w[0..n) (F16 / BF16, N rows of K, K even) times x over
 * the pool: x packed once with kn->pack_x into 16-token groups padded to
 * a multiple of 32 values, then row blocks claimed by the threads one at
 * a time; a block whose rows are BF16 whole tiles is read in place, any
 * other (F16, K not a multiple of 32, a last group of fewer than 16 rows)
 * is converted or copied into the thread's zero-padded slice first.
 * Memory: 2 * Kp * Tpad bytes of packed activations plus threads * 128 *
 * Kp * 2 bytes (Kp = K rounded up to 32, Tpad = T to 16), all exec
 * scratch: nothing is kept between calls and no weight copy is made.
 * Returns PAGODA_OK, PAGODA_ERR_NOMEM or PAGODA_ERR_INVALID (K odd or not
 * positive, a type other than F16 / BF16, n out of range). */
int pagoda_cpu_amxbf16_matmul(pagoda_cpu_exec *ex, const pagoda_bf16_kernels *kn,
                              pagoda_amxbf16_gemm_fn gemm, const float *x, size_t x_stride, int64_t T,
                              int64_t K, const pagoda_cpu_mat *w, int n);

#endif
