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

void PAGODA_VNNI_FN(pagoda_cpu_fill_avxvnni)(pagoda_vecdot_table *t)
{
    vnni_fill_lanes(t);
}
#else
void pagoda_cpu_fill_avxvnni(pagoda_vecdot_table *t) { (void)t; }
#endif
