/*
 * gemm_bf16_simde_avx2.c: gemm_bf16_avx512.c compiled a second time, with
 * AVX2 flags only, so SIMDe emulates vdpbf16ps and the AVX-512 loads:
 * pagoda_bf16_simde, the same arithmetic on any AVX2 host, which the
 * unit tests check against the scalar reference everywhere.
 * Not for: serving (matmul_bf16.c never picks it; it is slow).
 */
/* SIMDe's 512-bit types are 64-byte vectors: clang warns that passing
 * them without AVX-512 changes the ABI; only this file's static inline
 * helpers pass them (the table's functions take pointers). */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#endif
#define PAGODA_BF16_SIMDE 1
#define PAGODA_BF16_SFX(name) name##_simde
#define PAGODA_BF16_TABLE pagoda_bf16_simde
#define PAGODA_BF16_NAME "AVX512-BF16 (SIMDe on AVX2)"
#include "gemm_bf16_avx512.c"
