/*
 * tile_store.h: the last step the two tokens-in-lanes GEMM tiles share
 * (the F32-FMA one of gemm_fma_avx512.c, the BF16 one of
 * gemm_bf16_avx512.c): a tile's sums, one zmm per (token group, weight
 * row) with token l of the group in lane l, written out as rows of the
 * output, token-major, with the bias added. Written on SIMDe's names, so
 * it is the native store in the AVX-512 compile and SIMDe's in the AVX2
 * one, as the kernels that include it.
 * Not for: the AMX tiles (amx/: their sums leave through tile stores).
 */
#ifndef PAGODA_CPU_TILE_STORE_H
#define PAGODA_CPU_TILE_STORE_H

#include <simde/x86/avx512.h>
#include <stddef.h>
#include <stdint.h>

/* out[16 g + l][j] = lane l of acc[g * acc_rows + j] (+ bias[j]; none when
 * bias is NULL) for the groups g < ng, the rows j < nr and the tokens
 * 16 g + l < nt; output rows out_stride bytes apart. */
static inline void pagoda_tile_store(const simde__m512 *acc, int acc_rows, int ng, int nr, int nt,
                                     const float *bias, float *out, size_t out_stride)
{
    for (int g = 0; g < ng; g++) {
        int lanes = nt - 16 * g < 16 ? nt - 16 * g : 16;
        for (int j = 0; j < nr; j++) {
            float v[16];
            simde_mm512_storeu_ps(v, acc[(size_t)g * (size_t)acc_rows + (size_t)j]);
            float b = bias ? bias[j] : 0.0f;
            for (int l = 0; l < lanes; l++) {
                float *o = (float *)(void *)((uint8_t *)out + (size_t)(16 * g + l) * out_stride);
                o[j] = v[l] + b;
            }
        }
    }
}

#endif
