/*
 * lanes_avxvnni.c: the AVX-VNNI tokens-in-lanes kernels (lanes_vnni.h at
 * 256 bits: 8 tokens a ymm, VEX vpdpbusd / vpdpwssd) and the table's fill
 * function: the entries kernels/avxvnni has written, put over the AVX2
 * table by dispatch.c.
 * Compiled with -mavxvnni by folder (and a second time against SIMDe on
 * AVX2 alone, PAGODA_SIMDE, for the tests); called only after CPUID says
 * AVX-VNNI. Not for: anything else (the AVX2 entries run).
 */
#include "vecdot.h"

#if (defined(__AVXVNNI__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)) || \
    (defined(PAGODA_SIMDE) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
#define PAGODA_VNNI_W 256
#include "vnni.h"
#include "lanes_vnni.h"

/* Only the entries that beat AVX2's: measured on a Zen 5 EPYC (one core,
 * 2048 x 2048, T = 64, by CPU time, tests/bench/bench_cpu_lanes), the
 * 256-bit VNNI kernels win where AVX2 needs the sign trick (Q8_0 1.12-1.47x,
 * IQ4_NL 1.29x, IQ4_XS 1.62x) and lose where AVX2 sums unsigned nibbles
 * in int16 with one madd a block (Q4_0 0.75-0.99x, Q5_0 / Q5_1 0.87x,
 * Q2_K 0.88x, Q4_K 0.93-0.97x, Q6_K 0.96x; Q3_K / Q5_K even): those keep
 * their AVX2 entries. (An AVX-VNNI-only CPU, Alder Lake, may differ: its
 * figures are owed.) */
void PAGODA_VNNI_FN(pagoda_cpu_fill_avxvnni)(pagoda_vecdot_table *t)
{
    vnni_fill_lanes(t);
    t->gemm_q4_0_x8 = pagoda_vecdot_avx2.gemm_q4_0_x8;
    t->gemm_q5_0_x8 = pagoda_vecdot_avx2.gemm_q5_0_x8;
    t->gemm_q5_1_x8 = pagoda_vecdot_avx2.gemm_q5_1_x8;
    t->gemm_q4_1_x8 = pagoda_vecdot_avx2.gemm_q4_1_x8;
    t->gemm_q2_k_x8 = pagoda_vecdot_avx2.gemm_q2_k_x8;
    t->gemm_q3_k_x8 = pagoda_vecdot_avx2.gemm_q3_k_x8;
    t->gemm_q4_k_x8 = pagoda_vecdot_avx2.gemm_q4_k_x8;
    t->gemm_q5_k_x8 = pagoda_vecdot_avx2.gemm_q5_k_x8;
    t->gemm_q6_k_x8 = pagoda_vecdot_avx2.gemm_q6_k_x8;
}
#else
void pagoda_cpu_fill_avxvnni(pagoda_vecdot_table *t) { (void)t; }
#endif
