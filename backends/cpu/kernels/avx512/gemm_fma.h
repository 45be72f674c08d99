/*
 * gemm_fma.h: the F32-FMA GEMM for F16 and BF16 weights with many
 * activation rows (prefill): weights converted to F32 while they are
 * packed (vcvtph2ps for F16, u16 << 16 for BF16), products and sums in
 * F32 zmm FMAs, so its arithmetic is the exact F32 one (any summation
 * order): |out - exact| <= ~K * 2^-24 * sum|x*w|, nothing rounded to BF16.
 * The kernels of gemm_fma_avx512.c are compiled natively with AVX-512F
 * (pagoda_fma_native) and, by the tests' SIMDe wrapper, on AVX2
 * (pagoda_fma_simde, the same arithmetic); the driver over the pool and
 * the path choice (f16_gemm) are in the native compile only.
 * Why beside the BF16 GEMM: where vdpbf16ps is slow against the FMA
 * (Sapphire-Rapids class without AMX: 78.6 vs 163.6 G ops/s a core, a
 * quarter of the FMA's flops per weight pair) this runs F16 and BF16
 * prefill; where it is fast (Zen 4/5: 1.8x the FMA's rate) BF16 stays on
 * the BF16 GEMM. docs/backend-cpu.md "F32-FMA GEMM".
 * Not for: decode (T below pagoda_cpu_fma_min_t(dtype)), other weight types,
 * batch_invariant F16 (that stays on the lanes kernel from one row).
 */
#ifndef PAGODA_CPU_GEMM_FMA_H
#define PAGODA_CPU_GEMM_FMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

/* Tokens in one packed activation group (the 16 f32 lanes of a zmm). */
#define PAGODA_FMA_GROUP 16
/* Weight rows one kernel call computes (broadcast one at a time). */
#define PAGODA_FMA_NR 12
/* K values of one cache block (a packed weight row's stride in floats). */
#define PAGODA_FMA_KC 256

/* One compile of the kernels (native or SIMDe). */
typedef struct pagoda_fma_kernels {
    const char *name;
    /* Activations of nt <= 16 tokens (rows x_stride bytes apart, k values)
     * into one group: g[p * 16 + l] = x[l][p], lanes l >= nt zero. */
    void (*pack_x)(const float *x, size_t x_stride, int nt, int64_t k, float *g);
    /* Values k0 .. k0 + kc (kc <= PAGODA_FMA_KC) of 12 weight rows (nr <=
     * 12 of them, w_stride bytes apart, F16 when f16, else BF16; rows past
     * nr repeat the last) into wp[j * PAGODA_FMA_KC + p] as F32 (exact). */
    void (*pack_w)(const void *w, size_t w_stride, bool f16, int nr, int64_t k0, int kc, float *wp);
    /* One K block of the tile of the nr <= 12 rows of wp and the nt <= 32
     * tokens of ng (1 or 2) consecutive groups (group_elems floats apart,
     * xg at the block's first k): sums start at zero when first, else at
     * acc[]; when last, out[t][n] = sum (+ bias[n]) for t < nt, n < nr,
     * else the sums go to acc[] (2 * 12 * 16 floats). */
    void (*tile)(const float *wp, int nr, const float *xg, size_t group_elems, int ng, int nt, int kc,
                 float *acc, bool first, bool last, const float *bias, float *out, size_t out_stride);
} pagoda_fma_kernels;

/* Native (meaningful only where the active level is AVX-512) and SIMDe. */
extern const pagoda_fma_kernels pagoda_fma_native;
extern const pagoda_fma_kernels pagoda_fma_simde;

/* The [backend.cpu] key f16_gemm: which GEMM F16 / BF16 prefill takes. */
enum {
    PAGODA_F16GEMM_AUTO = 0,   /* the host's rule (pagoda_cpu_f16_gemm_path) */
    PAGODA_F16GEMM_FMA = 1,    /* this GEMM, both types */
    PAGODA_F16GEMM_DPBF16 = 2, /* the BF16 GEMMs as before (PAGODA_CPU_BF16's rules) */
    PAGODA_F16GEMM_OFF = 3     /* neither: the exact kernels of the table (lanes, dots) */
};

/* "auto" / "fma" / "dpbf16" / "off" to its mode; -1 for anything else. */
int pagoda_cpu_f16_gemm_parse(const char *s);
/* "auto", "fma", "dpbf16", "off". */
const char *pagoda_cpu_f16_gemm_name(int mode);
/* The setting is each backend's own: pagoda_cpu_exec.f16_gemm (kernels.h),
 * set by the backend's create, read below at each call; tests set it on
 * the exec they pass. */

/* [any thread] Which GEMM family this weight type's prefill takes under
 * ex's setting (ex->f16_gemm; a value outside the enum reads as AUTO): FMA, DPBF16 (the BF16 GEMMs, still subject to
 * pagoda_cpu_bf16_applies' own rules) or OFF. AUTO resolves to: DPBF16
 * when PAGODA_CPU_BF16 is set in the environment (its old meaning kept);
 * else F16 -> FMA (exact, and faster than the 256-bit lanes kernel on
 * every AVX-512 host); BF16 -> DPBF16 where the AMX tiles run it or the
 * vendor is AMD (vdpbf16ps at 1.8x the FMA's rate on Zen 4/5), FMA
 * otherwise (Intel without AMX-BF16: vdpbf16ps at half the FMA's rate).
 * A rule on CPUID (vendor, features), so it is the same on every start. */
int pagoda_cpu_f16_gemm_path(const pagoda_cpu_exec *ex, int dtype);

/* [any thread] True when pagoda_cpu_matmul on ex runs this weight type
 * with T rows through this GEMM now: F16 / BF16, the path above is FMA, T >=
 * pagoda_cpu_fma_min_t(dtype), the active level is AVX-512 or above, and not
 * (ex->batch_invariant and F16). */
bool pagoda_cpu_fma_applies(const pagoda_cpu_exec *ex, int dtype, int64_t T);

/* The smallest T the path takes for this weight type: 32 for F16 (its
 * lanes kernel below), 16 for BF16 (PAGODA_CPU_BF16_MIN_T in the
 * environment sets both, as it does the BF16 GEMM's). */
int64_t pagoda_cpu_fma_min_t(int dtype);

/* The matrices of w[0..n) (each F16 or BF16, N rows of K) times x over
 * the pool with the kernels `kn`: x packed once into 16-token F32 groups
 * (exec scratch), then row blocks claimed by the threads one at a time,
 * each converted to F32 a K block at a time into the thread's slice.
 * Returns PAGODA_OK, PAGODA_ERR_NOMEM (scratch) or PAGODA_ERR_INVALID (K
 * not positive, n out of range, a type other than F16 / BF16). */
int pagoda_cpu_fma_matmul(pagoda_cpu_exec *ex, const pagoda_fma_kernels *kn, const float *x,
                          size_t x_stride, int64_t T, int64_t K, const pagoda_cpu_mat *w, int n);

#endif
