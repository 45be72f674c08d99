/*
 * vecdot_mxfp4.c: the scalar reference MXFP4 dot (vecdot.h dot_mxfp4):
 * one weight row of MXFP4 blocks against one token's q8a blocks, one
 * value at a time. The AVX2 and AVX-512 VNNI kernels are tested against
 * it; PAGODA_CPU_ISA=scalar runs it.
 * Not for: speed (kernels/avx2, kernels/avx512).
 */
#include "quant.h"
#include "vecdot.h"

/* Per block: the integer sum of table[code] x q (|sum| <= 32 x 12 x 127),
 * then times d_x and the block's 2^(e-128), in the order the SIMD levels
 * use (the scale product first: exact, a power of two). */
float pagoda_cpu_dot_mxfp4_scalar(const void *wv, const pagoda_q8a_block *x, int64_t nb)
{
    const pagoda_block_mxfp4 *w = wv;
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int sum = 0;
        for (int j = 0; j < 16; j++) {
            sum += pagoda_mxfp4_table[w[b].qs[j] & 0x0F] * x[b].qs[j];
            sum += pagoda_mxfp4_table[w[b].qs[j] >> 4] * x[b].qs[j + 16];
        }
        s += (float)sum * (pagoda_e8m0_to_fp32_half(w[b].e) * x[b].d);
    }
    return s;
}
