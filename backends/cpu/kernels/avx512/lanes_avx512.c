/*
 * lanes_avx512.c: the AVX-512 VNNI tokens-in-lanes kernels (lanes_vnni.h
 * at 512 bits: 16 tokens a zmm, EVEX vpdpbusd) and the table's fill
 * function: the entries kernels/avx512 has written (these, decode_avx512.c's
 * dots, act_avx512.c's swiglu_oai and vecdot_mxfp4_avx512.c's lanes
 * kernel), put over the AVX2 table by
 * dispatch.c.
 * Compiled with -mavx512f/bw/vl/dq/vnni by folder (and a second time
 * against SIMDe on AVX2 alone, PAGODA_SIMDE, for the tests); called only
 * after the CPUID + XCR0 check. Not for: the per-row dots of decode
 * (decode_avx512.c, whose entries the fill function adds).
 */
#include "vecdot.h"

#if (defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)) || \
    (defined(PAGODA_SIMDE) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
#define PAGODA_VNNI_W 512
#include "vnni.h"
#include "lanes_vnni.h"

void PAGODA_VNNI_FN(pagoda_cpu_fill_avx512)(pagoda_vecdot_table *t)
{
    vnni_fill_lanes(t);
    PAGODA_VNNI_FN(pagoda_cpu_fill_avx512_decode)(t);
    PAGODA_VNNI_FN(pagoda_cpu_fill_avx512_act)(t);   /* act_avx512.c: swiglu_oai */
    /* MXFP4's VNNI lanes kernel; its VNNI dot stays out: on the Sapphire-Rapids-class host it ran
     * 0.92x of the AVX2 dot (43 vs 47 GFLOP/s per CPU-second, bench_cpu_mxfp4 --T 1, 2880 x 2880),
     * the 512-bit multiplies having one port there to AVX2's two */
    t->gemm_mxfp4_x8 = PAGODA_VNNI_FN(pagoda_cpu_gemm_mxfp4_x8_avx512);
}
#else
/* A compiler without the flags: the AVX2 table runs at this level. */
void pagoda_cpu_fill_avx512(pagoda_vecdot_table *t) { (void)t; }
#endif
