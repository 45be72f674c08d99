/*
 * amx.h: may this process use the AMX tiles, and the int8 tile GEMM on the
 * row-interleaved layout (repack/repack.h) in its two builds: on the real
 * tiles (gemm_amx.c, -mamx-*) and on the plain-C emulation (gemm_amx_emu.c,
 * tests only). Both are amx_gemm.inc compiled twice.
 * Not for: choosing which GEMM runs (repack/repack_matmul.c), the ISA level
 * enum (cpu_features.h).
 */
#ifndef PAGODA_CPU_AMX_H
#define PAGODA_CPU_AMX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* [any thread] True when every check passed, in this order: CPUID leaf 7
 * has AMX-TILE (EDX bit 24) and AMX-INT8 (bit 25); the OS enabled
 * XSAVE (CPUID.1:ECX.OSXSAVE) and XCR0 has XTILECFG and XTILEDATA (bits
 * 17, 18); arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) granted the
 * tile data to this process (asked once per process; the grant covers
 * every thread). On false, `why` (when not NULL) names the check that
 * failed, e.g. "CPUID has no AMX-TILE/AMX-INT8". The result is cached. */
bool pagoda_amx_usable(char *why, size_t n);

/* [any thread] CPUID's AMX-BF16 (leaf 7 EDX bit 22), meaningful only when
 * pagoda_amx_usable(). */
bool pagoda_amx_has_bf16(void);

/* [main thread] Tests only: pretend a check failed (`which` 1: CPUID, 2:
 * XCR0, 3: the grant; 0: the real answer), to see the fallback and its
 * reason on a host that has AMX. */
void pagoda_amx_fake_failure(int which);

struct pagoda_rp_matrix;

/* out[t][n0..n1) for t < T, from the repacked weights' 16-row groups
 * covering [n0, n1) (n0 a multiple of 16) and activations prepared by
 * pagoda_rp_prep_acts(..., signed: true): xq int8 [Tpad][kp], xd float
 * [Tpad][nb], Tpad = T rounded up to 16. Loads its own tile config on the
 * calling thread (each thread of the pool has its own tiles) and releases
 * it before returning. gemm_amx: the real tiles, only where
 * pagoda_amx_usable(); gemm_amx_emu: the emulation (any host, slow). */
void pagoda_rp_gemm_amx(const struct pagoda_rp_matrix *w, int64_t n0, int64_t n1, const int8_t *xq,
                        const float *xd, int64_t T, float *out, size_t out_stride);
void pagoda_rp_gemm_amx_emu(const struct pagoda_rp_matrix *w, int64_t n0, int64_t n1, const int8_t *xq,
                            const float *xd, int64_t T, float *out, size_t out_stride);
/* The same for Q4_1, with xm [Tpad][nb] (pagoda_rp_acts' xm) for its mins. */
void pagoda_rp_gemm_q41_amx(const struct pagoda_rp_matrix *w, int64_t n0, int64_t n1, const int8_t *xq,
                            const float *xd, const float *xm, int64_t T, float *out, size_t out_stride);
void pagoda_rp_gemm_q41_amx_emu(const struct pagoda_rp_matrix *w, int64_t n0, int64_t n1, const int8_t *xq,
                                const float *xd, const float *xm, int64_t T, float *out, size_t out_stride);
/* The same for Q4_K / Q5_K (TDPBSUD: signed activations, unsigned
 * weights) with K-quant activations: xd [Tpad][K / 256], xs [Tpad][K / 32]
 * sums of 32. */
void pagoda_rp_gemm_k_amx(const struct pagoda_rp_matrix *w, int64_t n0, int64_t n1, const int8_t *xq,
                          const float *xd, const int16_t *xs, int64_t T, float *out, size_t out_stride);
void pagoda_rp_gemm_k_amx_emu(const struct pagoda_rp_matrix *w, int64_t n0, int64_t n1, const int8_t *xq,
                              const float *xd, const int16_t *xs, int64_t T, float *out, size_t out_stride);
/* Q6_K: K = 16 tiles (one per sub-block), xs16 the sums of 16. */
void pagoda_rp_gemm_q6_amx(const struct pagoda_rp_matrix *w, int64_t n0, int64_t n1, const int8_t *xq,
                           const float *xd, const int16_t *xs16, int64_t T, float *out, size_t out_stride);
void pagoda_rp_gemm_q6_amx_emu(const struct pagoda_rp_matrix *w, int64_t n0, int64_t n1, const int8_t *xq,
                               const float *xd, const int16_t *xs16, int64_t T, float *out, size_t out_stride);

#endif
