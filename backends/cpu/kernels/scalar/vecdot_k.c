/*
 * vecdot_k.c: the scalar references of the K-quant (Q2_K, Q3_K, Q4_K,
 * Q5_K) and IQ4_XS dots against int8 activations (pagoda_q8k_block),
 * written from the block layouts for clarity, one value at a time: the
 * AVX2 kernels (vecdot_k_avx2.c, vecdot_k_x8_avx2.c) are tested against
 * these; the scale unpacking and the IQ4 table are quant.h's. Also the interleave of eight tokens' q8k rows for the lanes
 * kernels. (Q6_K's reference is in vecdot.c, older than this file.)
 * Not for: speed.
 */
#include "vecdot_k.h"

#include <string.h>

#include "quant.h"

/* Q4_K / Q5_K: 8 sub-blocks of 32 values, value = d * sc_j * q - dmin * m_j.
 * qs holds 4 runs of 32 bytes: run c's low nibbles are sub-block 2c, its
 * high nibbles sub-block 2c + 1; Q5_K's 5th bit of value i (in sub-block
 * j, position l) is bit j of qh[l]. */
static float dot_q45_k(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh, uint16_t d,
                       uint16_t dmin, const pagoda_q8k_block *x)
{
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        int dot = 0, sy = 0;
        pagoda_get_scale_min_k4(j, scales, &sc, &m);
        for (int l = 0; l < 32; l++) {
            int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;
            if (qh) q |= ((qh[l] >> j) & 1) << 4;
            dot += q * x->qs[32 * j + l];
            sy += x->qs[32 * j + l];
        }
        sumi += sc * dot;
        summ += m * sy;
    }
    return x->d * (pagoda_fp16_to_fp32(d) * (float)sumi - pagoda_fp16_to_fp32(dmin) * (float)summ);
}

float pagoda_cpu_dot_q4_k_scalar(const void *wv, const pagoda_q8k_block *x, int64_t nb)
{
    const pagoda_block_q4_K *w = wv;
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++) s += dot_q45_k(w[b].scales, w[b].qs, NULL, w[b].d, w[b].dmin, &x[b]);
    return s;
}

float pagoda_cpu_dot_q5_k_scalar(const void *wv, const pagoda_q8k_block *x, int64_t nb)
{
    const pagoda_block_q5_K *w = wv;
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++)
        s += dot_q45_k(w[b].scales, w[b].qs, w[b].qh, w[b].d, w[b].dmin, &x[b]);
    return s;
}

/* Q2_K / Q3_K share a geometry: value i = 128 n + 32 j + l (n < 2, j < 4,
 * l < 32) has its 2 low bits at bits 2j of qs[32 n + l] and its scale in
 * sub-block i / 16. Q2_K: byte scales[i / 16] = scale (low nibble) | min
 * (high nibble), value = d * sc * q - dmin * m. Q3_K: the 3rd bit is bit
 * 4 n + j of hmask[l], set meaning q as is, clear meaning q - 4; 16 signed
 * 6-bit scales (stored + 32), value = d * sc * q. */
static int q2_bits(const uint8_t *qs, int i)
{
    return (qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
}

float pagoda_cpu_dot_q2_k_scalar(const void *wv, const pagoda_q8k_block *x, int64_t nb)
{
    const pagoda_block_q2_K *w = wv;
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int sumi = 0, summ = 0;
        for (int i = 0; i < 256; i++) {
            int sc = w[b].scales[i / 16] & 0xF, m = w[b].scales[i / 16] >> 4;
            sumi += sc * q2_bits(w[b].qs, i) * x[b].qs[i];
            summ += m * x[b].qs[i];
        }
        s += x[b].d * (pagoda_fp16_to_fp32(w[b].d) * (float)sumi -
                       pagoda_fp16_to_fp32(w[b].dmin) * (float)summ);
    }
    return s;
}

float pagoda_cpu_dot_q3_k_scalar(const void *wv, const pagoda_q8k_block *x, int64_t nb)
{
    const pagoda_block_q3_K *w = wv;
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int8_t sc[16];
        pagoda_q3_K_scales(w[b].scales, sc);
        int sumi = 0;
        for (int i = 0; i < 256; i++) {
            int h = (w[b].hmask[i % 32] >> (4 * (i / 128) + (i % 128) / 32)) & 1;
            int q = q2_bits(w[b].qs, i) - (h ? 0 : 4);
            sumi += sc[i / 16] * q * x[b].qs[i];
        }
        s += x[b].d * pagoda_fp16_to_fp32(w[b].d) * (float)sumi;
    }
    return s;
}

/* IQ4_XS: 8 sub-blocks of 32; sub-block ib's 16 bytes hold values 0..15
 * in their low nibbles and 16..31 in their high ones, each an index into
 * the IQ4 table; value = d * (ls - 32) * table[index], ls 6 bits: low 4
 * from nibble ib of scales_l, top 2 from bits 2 ib of scales_h. */
float pagoda_cpu_dot_iq4_xs_scalar(const void *wv, const pagoda_q8k_block *x, int64_t nb)
{
    const pagoda_block_iq4_xs *w = wv;
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int sumi = 0;
        for (int ib = 0; ib < 8; ib++) {
            int dot = 0;
            for (int l = 0; l < 32; l++) {
                int idx = (w[b].qs[16 * ib + l % 16] >> (l < 16 ? 0 : 4)) & 0xF;
                dot += pagoda_iq4nl_table[idx] * x[b].qs[32 * ib + l];
            }
            sumi += pagoda_iq4_xs_scale(&w[b], ib) * dot;
        }
        s += x[b].d * pagoda_fp16_to_fp32(w[b].d) * (float)sumi;
    }
    return s;
}

/* The lanes kernels load qs rows, the sums and d with aligned 256-bit
 * loads from consecutive blocks of a 64-byte aligned scratch. */
_Static_assert(sizeof(pagoda_q8kx8_block) % 32 == 0, "q8kx8 blocks keep 32-byte alignment");

void pagoda_cpu_prep_k_x8(const pagoda_q8k_block *x, size_t x_stride, int nt, int64_t nb,
                          pagoda_q8kx8_block *y)
{
    for (int64_t b = 0; b < nb; b++) {
        pagoda_q8kx8_block *o = &y[b];
        for (int t = 0; t < 8; t++) {
            if (t >= nt) {
                for (int g = 0; g < 64; g++) memset(&o->qs[g][4 * t], 0, 4);
                for (int i = 0; i < 8; i++) o->bs16[i][2 * t] = o->bs16[i][2 * t + 1] = 0;
                for (int i = 0; i < 4; i++) o->bs32[i][2 * t] = o->bs32[i][2 * t + 1] = 0;
                for (int j = 0; j < 16; j++) o->hs[j][2 * t] = o->hs[j][2 * t + 1] = 0;
                o->d[t] = 0.0f;
                continue;
            }
            const pagoda_q8k_block *xb = (const pagoda_q8k_block *)((const uint8_t *)x + t * x_stride) + b;
            for (int g = 0; g < 64; g++) memcpy(&o->qs[g][4 * t], &xb->qs[4 * g], 4);
            for (int i = 0; i < 8; i++) {
                o->bs16[i][2 * t] = xb->bsums[2 * i];
                o->bs16[i][2 * t + 1] = xb->bsums[2 * i + 1];
            }
            for (int i = 0; i < 4; i++) {
                o->bs32[i][2 * t] = (int16_t)(xb->bsums[4 * i] + xb->bsums[4 * i + 1]);
                o->bs32[i][2 * t + 1] = (int16_t)(xb->bsums[4 * i + 2] + xb->bsums[4 * i + 3]);
            }
            for (int j = 0; j < 16; j++)
                for (int h = 0; h < 2; h++) {
                    int sum = 0;
                    for (int i = 0; i < 4; i++) sum += xb->qs[16 * j + 4 * i + 2 * h] + xb->qs[16 * j + 4 * i + 2 * h + 1];
                    o->hs[j][2 * t + h] = (int16_t)sum;
                }
            o->d[t] = xb->d;
        }
    }
}
