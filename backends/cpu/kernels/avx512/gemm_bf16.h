/*
 * gemm_bf16.h: the BF16 dot-product GEMM (vdpbf16ps) for F16 and BF16
 * weights with many activation rows (prefill, large batches): the kernels
 * of gemm_bf16_avx512.c, compiled twice: natively with AVX512-BF16
 * (pagoda_bf16_native) and against SIMDe on AVX2
 * (gemm_bf16_simde_avx2.c, pagoda_bf16_simde: the same arithmetic, so the
 * tests run on a host without AVX512-BF16), and the driver over the pool
 * (matmul_bf16.c).
 * Arithmetic: activations rounded to BF16 (round to nearest even; a
 * relative error of at most 2^-8 each), weights exact for BF16 and
 * rounded F16 -> BF16 (another 2^-8) for F16, products exact in F32 and
 * summed in F32. So |out - exact| <= (2^-8 or 2^-7) * sum|x*w| + F32
 * summation; docs/backend-cpu.md "BF16 GEMM" has the measured effect on
 * a model's logits.
 * Not for: decode (T below pagoda_cpu_bf16_min_t(): the exact F32 dots of
 * the AVX2 table), or other weight types.
 */
#ifndef PAGODA_CPU_GEMM_BF16_H
#define PAGODA_CPU_GEMM_BF16_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

/* Tokens in one packed activation group (the 16 f32 lanes of a zmm). */
#define PAGODA_BF16_GROUP 16
/* Weight rows one kernel call computes (broadcast one at a time). */
#define PAGODA_BF16_NR 12

/* One compile of the kernels (native or SIMDe). */
typedef struct pagoda_bf16_kernels {
    const char *name;
    /* Activations of nt <= 16 tokens (rows x_stride bytes apart, k values,
     * k even) into one group: g[p * 32 + 2 l + e] = bf16(x[l][2p + e]),
     * lanes l >= nt zero. bf16() is pagoda_fp32_to_bf16 (nearest even,
     * NaN quieted). */
    void (*pack_x)(const float *x, size_t x_stride, int nt, int64_t k, uint16_t *g);
    /* n F16 values to BF16 (via their exact F32 value, nearest even). */
    void (*f16_to_bf16)(const uint16_t *src, uint16_t *dst, int64_t n);
    /* 12 weight rows (nr <= 12 of them, w_stride bytes apart, F16 when
     * f16, else BF16; rows past nr repeat the last) into wp[p * 12 + j] =
     * the BF16 pair (k = 2p, 2p + 1) of row j; row: k values of scratch
     * (F16's conversion). */
    void (*pack_w)(const void *w, size_t w_stride, bool f16, int nr, int64_t k, uint32_t *wp,
                   uint16_t *row);
    /* out[t][n] = sum_k x[t][k] w[n][k] (+ bias[n]) for the n < nr <= 12
     * rows of pack_w's wp and the tokens t < nt <= 32 of ng (1 or 2, nt
     * <= 16 ng) consecutive packed groups (group_elems uint16 apart), k
     * even. */
    void (*tile)(const uint32_t *wp, int nr, const uint16_t *xg, size_t group_elems, int ng, int nt,
                 int64_t k, const float *bias, float *out, size_t out_stride);
} pagoda_bf16_kernels;

/* Native (meaningful only where pagoda_cpu_bf16_native_ok()) and SIMDe. */
extern const pagoda_bf16_kernels pagoda_bf16_native;
extern const pagoda_bf16_kernels pagoda_bf16_simde;

/* [any thread] True when this CPU has AVX512-BF16 with AVX-512 and the OS
 * saves zmm state (cpu_features.c: CPUID + XCR0), whatever level is forced;
 * false while a test fakes the detected level. */
bool pagoda_cpu_has_avx512_bf16(void);

/* [any thread] True when pagoda_cpu_matmul on ex runs this weight type with T
 * rows and K columns through the BF16 GEMM now (ex->f16_gemm resolving to
 * dpbf16, gemm_fma.h): F16 / BF16, K even, T >=
 * pagoda_cpu_bf16_min_t(dtype), the CPU has AVX512-BF16 and the active level
 * (PAGODA_CPU_ISA, pagoda_cpu_force_isa) is AVX-512 or above.
 * Unset PAGODA_CPU_BF16: BF16 weights, and F16 too (rounded to BF16: three
 * bits of each lost) where ex->f16_gemm is dpbf16 said explicitly; set: 0
 * turns the path off (exact F32 everywhere, the AVX2 kernels), 1 BF16
 * weights only, 2 F16 weights too. F16 never under ex->batch_invariant. */
bool pagoda_cpu_bf16_applies(const pagoda_cpu_exec *ex, int dtype, int64_t T, int64_t K);

/* The smallest T the path takes for this weight type: 16 for BF16, 32
 * for F16 (PAGODA_CPU_BF16_MIN_T in the environment sets both). */
int64_t pagoda_cpu_bf16_min_t(int dtype);

/* The matrices of w[0..n) (each F16 or BF16, N rows of K) times x over
 * the pool with the kernels `kn`: x packed once into the exec's scratch
 * for all n, weight rows packed (F16 converted) a block at a time per
 * thread.
 * Returns PAGODA_OK, PAGODA_ERR_NOMEM (scratch) or PAGODA_ERR_INVALID (K
 * odd, a type other than F16 / BF16). */
int pagoda_cpu_bf16_matmul(pagoda_cpu_exec *ex, const pagoda_bf16_kernels *kn, const float *x,
                           size_t x_stride, int64_t T, int64_t K, const pagoda_cpu_mat *w, int n);

#endif
