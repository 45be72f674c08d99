/*
 * lanes_vnni256_avx512.c: the tokens-in-lanes kernels at 256 bits with the
 * EVEX vpdpbusd / vpdpwssd of AVX512-VL + AVX512-VNNI (lanes_vnni.h with
 * PAGODA_VNNI_W 256: 8 tokens a ymm), for the AVX-512 level's 4..8 token
 * batches (the table's lanes8, dispatch.c) on a CPU that has AVX-512 VNNI
 * but no AVX-VNNI (AMD Zen 4): there the zmm kernels run half empty and,
 * before this file, those batches took AVX2's maddubs kernels. The
 * arithmetic is kernels/avxvnni's (same source, the VEX instruction's
 * EVEX twin); only the encoding, and so the CPUID bit, differs.
 * Compiled with the AVX-512 flags its _avx512.c name gets
 * (core/cmake/PagodaPlugin.cmake; not against SIMDe,
 * where it would be kernels/avxvnni's copy: the tests run it natively on
 * AVX-512 hosts, tests/unit/cpu_paths.h); its fill and kernels run only
 * after CPUID says AVX-512 VNNI (dispatch.c). Not for: CPUs with AVX-VNNI (they take kernels/avxvnni's
 * table) or batches of 9 tokens and up (lanes_avx512.c).
 */
#include "vecdot.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && \
    !defined(PAGODA_SIMDE)
#define PAGODA_VNNI_W 256
/* lanes_vnni.h at 256 bits names the VEX forms; here their EVEX twins */
#define _mm256_dpbusd_avx_epi32 _mm256_dpbusd_epi32
#define _mm256_dpwssd_avx_epi32 _mm256_dpwssd_epi32
#include "vnni.h"
#include "lanes_vnni.h"

/* The VNNI entries that beat or tie AVX2's for 4 and 8 tokens on Zen 4
 * (tests/bench/bench_cpu_lanes, one core, 2048 x 2048, by CPU time, T = 4
 * / 8 against AVX2: Q8_0 1.28x / 1.43x, IQ4_XS 1.68x / 2.05x, Q5_0 1.17x /
 * 1.10x, Q5_K 1.10x / 1.15x, Q2_K 1.11x / 1.04x, Q4_1 1.07x / 1.05x, Q4_0
 * 1.00x / 1.03x); Q3_K (0.79x / 0.85x), Q6_K (0.80x / 0.82x) and Q4_K
 * (0.99x / 0.98x) keep AVX2's, as kernels/avxvnni keeps them at T = 64.
 * docs/benchmarks.md, "lanes8 on Zen 4". */
void pagoda_cpu_fill_avx512_256(pagoda_vecdot_table *t)
{
    vnni_fill_lanes(t);
    t->gemm_q3_k_x8 = pagoda_vecdot_avx2.gemm_q3_k_x8;
    t->gemm_q4_k_x8 = pagoda_vecdot_avx2.gemm_q4_k_x8;
    t->gemm_q6_k_x8 = pagoda_vecdot_avx2.gemm_q6_k_x8;
}
#else
void pagoda_cpu_fill_avx512_256(pagoda_vecdot_table *t) { (void)t; }
#endif
