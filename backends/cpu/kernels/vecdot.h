/*
 * vecdot.h: the inner loops of the CPU matmul: one weight row against one
 * activation row, per weight type, in a scalar reference (scalar/vecdot.c) and an
 * AVX2 variant (avx2/vecdot_avx2.c; the tokens-in-lanes kernels in
 * vecdot_x8_avx2.c, the other Q5_0 / Q5_1 / IQ4_NL ones in vecdot_q5_avx2.c),
 * plus activation quantization and a few row ops. The tables
 * are picked per call by pagoda_cpu_vecdot() (../dispatch.c).
 * Not for: threading or shapes (matmul.c).
 */
#ifndef PAGODA_CPU_VECDOT_H
#define PAGODA_CPU_VECDOT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* Activation block for Q8_0/Q4_0/Q4_1 weights: 32 values as int8 with a
 * float scale (more precise than ggml's f16, same speed); s = d * sum(qs),
 * which the Q4_1 offset term needs. */
typedef struct pagoda_q8a_block {
    float d;
    float s;
    int8_t qs[32];
} pagoda_q8a_block;

/* Activation block for the K-quant and IQ4_XS weights (256-value
 * super-blocks): 256 values, one scale; bsums[j] = sum of qs[16j..16j+15],
 * which the K-quants' min / offset terms need (sum_j m_j * sum(x in j)),
 * so a kernel never sums the activations once per weight row. */
typedef struct pagoda_q8k_block {
    float d;
    int8_t qs[256];
    int16_t bsums[16];
} pagoda_q8k_block;

/* Activations for Q4_0 weights as the AVX2 kernel reads them, four blocks
 * per group: a Q4_0 block keeps element j in the low nibble of byte j and
 * element 16 + j in the high one, so one 256-bit load of two weight blocks
 * masks into [lo halves of both | ...] and [hi halves of both]; the
 * activations are stored already in that order (no shuffle per weight row)
 * with what each pair of blocks needs beside it. Pair p = blocks 2p, 2p+1:
 *   qs[2p]   = block 2p qs[0..15]  | block 2p+1 qs[0..15]
 *   qs[2p+1] = block 2p qs[16..31] | block 2p+1 qs[16..31]
 *   off[p]   = 8 * (adjacent pair sums of qs[2p] + of qs[2p+1]) as int16,
 *              the -8 nibble offset, subtracted in int16 by the tiles
 *   dx[p]    = d of block 2p in lanes 0-3, of block 2p+1 in lanes 4-7
 *   s[j]     = the q8a block's s (d * sum qs), the same offset in float
 * Blocks past the row's end (nb not a multiple of 4) are zero. */
typedef struct pagoda_q4x_group {
    int8_t qs[4][32];
    int16_t off[2][16];
    float dx[2][8];
    float s[4];
} pagoda_q4x_group;

/* Activations of eight tokens for the tokens-in-lanes kernels (gemm_*_x8),
 * one block position: the 4-byte group g of token t sits in 32-bit lane t
 * of row g, so one broadcast of four weight bytes meets the same four
 * positions of all eight tokens in a single maddubs, and the eight sums
 * land in the eight lanes of one register (no horizontal sums, one scale
 * multiply per row and block for all eight tokens). Tokens past the batch
 * are zero (d = 0), so they add nothing and are never stored.
 *   qs[g][4t + j] = token t's qs[4g + j]
 *   d[t]          = token t's scale
 *   s8[t]         = 8 * sum of token t's qs (the Q4_0 nibble offset) */
typedef struct pagoda_q8x8_block {
    int8_t qs[8][32];
    float d[8];
    int32_t s8[8];
} pagoda_q8x8_block;

/* Activations of eight tokens for the K-quant tokens-in-lanes kernels
 * (gemm_q*_k_x8, vecdot_k_x8_avx2.c), one 256-value super-block position:
 * the same lanes as pagoda_q8x8_block over 64 groups of four values, with
 * the per-16 and per-32 sums as int16 pairs so one madd with a weight
 * row's (m_a, m_b) pair gives m_a * sum_a + m_b * sum_b in every lane, and
 * the sums that line up with a maddubs result's two int16 halves (the
 * fixed offsets of Q3_K / Q6_K come off in int16, before the scale):
 *   qs[g][4t + j]   = token t's qs[4g + j]
 *   bs16[i][2t + h] = token t's bsums[2i + h]          (sums of 16)
 *   bs32[i][2t + h] = token t's sum of qs[32(2i+h) ..] (sums of 32)
 *   hs[j][2t + h]   = token t's sum of qs[16j + 4i + 2h + e], i < 4, e < 2
 *   d[t]            = token t's scale
 * Tokens past the batch are zero (d = 0). */
typedef struct pagoda_q8kx8_block {
    int8_t qs[64][32];
    int16_t bs16[8][16];
    int16_t bs32[4][16];
    int16_t hs[16][16];
    float d[8];
} pagoda_q8kx8_block;

/* Interleave nt <= 8 tokens' q8k rows (x_stride bytes apart, nb blocks
 * each) into nb q8kx8 blocks (vecdot_k.c). */
void pagoda_cpu_prep_k_x8(const pagoda_q8k_block *x, size_t x_stride, int nt, int64_t nb,
                          pagoda_q8kx8_block *y);

/* Interleave nt <= 8 tokens' q8a rows (x_stride bytes apart, nb blocks
 * each) into nb x8 blocks. Plain C: it is a copy, T * K bytes per call. */
void pagoda_cpu_prep_x8(const pagoda_q8a_block *x, size_t x_stride, int nt, int64_t nb,
                        pagoda_q8x8_block *y);

/* Transpose nt <= 8 F32 rows (x_stride bytes apart, k values) into
 * y[k][8], lanes past nt zero. */
void pagoda_cpu_prep_f32_x8(const float *x, size_t x_stride, int nt, int64_t k, float *y);

/* Weight blocks as stored in GGUF. */
typedef struct pagoda_blk_q8_0 { uint16_t d; int8_t qs[32]; } pagoda_blk_q8_0;
typedef struct pagoda_blk_q4_0 { uint16_t d; uint8_t qs[16]; } pagoda_blk_q4_0;
typedef struct pagoda_blk_q4_1 { uint16_t d, m; uint8_t qs[16]; } pagoda_blk_q4_1;
typedef struct pagoda_blk_q6_k {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
} pagoda_blk_q6_k;

/* A tile of up to 16 query rows of one attention head over an F16
 * or Q8_0 cache (the table's attn_f16_tile): the queries transposed (qt[d][i],
 * lanes >= nq zero), each row's visible keys (key j is seen by query i
 * iff lo[i] <= j <= hi[i]: causal and sliding-window masks alike; rows
 * >= nq have lo > hi), and the rows' running softmax sums (max m, sum l,
 * unnormalized output acc[i][hd]); kv: scratch of n x hd floats. */
#define PAGODA_ATTN_TILE_Q 16
typedef struct pagoda_attn_tile {
    int nq, hd;            /* rows (<= 16); head_dim, a multiple of 16 (of 32 for Q8_0) */
    int q8;                /* the cache's rows: 0 F16, 1 Q8_0 blocks (pagoda_blk_q8_0) */
    float scale;
    const float *qt;       /* [hd][16], 64-byte aligned */
    float *acc;            /* [16][hd], 64-byte aligned */
    float *kv;             /* [n][hd] scratch, 64-byte aligned */
    int32_t lo[PAGODA_ATTN_TILE_Q] __attribute__((aligned(64)));
    int32_t hi[PAGODA_ATTN_TILE_Q] __attribute__((aligned(64)));
    float m[PAGODA_ATTN_TILE_Q] __attribute__((aligned(64)));
    float l[PAGODA_ATTN_TILE_Q] __attribute__((aligned(64)));
} pagoda_attn_tile;

typedef struct pagoda_vecdot_table {
    /* Quantize k values of x (k a multiple of 32 / 256). Scalar and SIMD
     * produce the same bytes (round half to even, x * (1/d)). */
    void (*quant_q8a)(const float *x, pagoda_q8a_block *y, int64_t k);
    void (*quant_q8k)(const float *x, pagoda_q8k_block *y, int64_t k);
    /* Dot products; nb = number of weight blocks, k = values. */
    float (*dot_f32)(const float *w, const float *x, int64_t k);
    float (*dot_f16)(const uint16_t *w, const float *x, int64_t k);
    float (*dot_bf16)(const uint16_t *w, const float *x, int64_t k);
    float (*dot_q8_0)(const void *w, const pagoda_q8a_block *x, int64_t nb);
    float (*dot_q4_0)(const void *w, const pagoda_q8a_block *x, int64_t nb);
    float (*dot_q4_1)(const void *w, const pagoda_q8a_block *x, int64_t nb);
    float (*dot_q6_k)(const void *w, const pagoda_q8k_block *x, int64_t nb);
    /* A block of weight rows times a block of tokens: out[t][n] = dot(row
     * n of w, token t of x) for n < nr, t < T. The AVX2 kernels load a
     * few rows once for several tokens (register tiles of rows x tokens),
     * which is what makes batched decode and prefill cheaper per token
     * than T separate dots. x: T rows x_stride bytes apart, each nb
     * quantized blocks (q8_0; q4_0: prep_q4_0's groups where the table
     * has one) or k floats (f16); out: rows out_stride
     * bytes apart. Same results as the dots above up to float order. */
    void (*gemm_q8_0)(const void *w, size_t w_stride, int64_t nr, const void *x,
                      size_t x_stride, int64_t T, int64_t nb, float *out, size_t out_stride);
    void (*gemm_q4_0)(const void *w, size_t w_stride, int64_t nr, const void *x,
                      size_t x_stride, int64_t T, int64_t nb, float *out, size_t out_stride);
    void (*gemm_f16)(const void *w, size_t w_stride, int64_t nr, const void *x,
                     size_t x_stride, int64_t T, int64_t k, float *out, size_t out_stride);
    /* Weight rows x T tokens in groups of eight (pagoda_cpu_prep_x8's blocks:
     * group i = tokens 8i..8i+7, nb blocks each, the last group padded):
     * out[t][n] for n < nr, t < T. NULL where the table has none (the
     * matmul then uses gemm_q8_0 / gemm_q4_0). */
    void (*gemm_q8_0_x8)(const void *w, size_t w_stride, int64_t nr, const pagoda_q8x8_block *x,
                         int64_t T, int64_t nb, float *out, size_t out_stride);
    void (*gemm_q4_0_x8)(const void *w, size_t w_stride, int64_t nr, const pagoda_q8x8_block *x,
                         int64_t T, int64_t nb, float *out, size_t out_stride);
    /* F16 weights x T F32 tokens transposed by eights (pagoda_cpu_prep_f32_x8:
     * group i = k x 8 floats, token 8i + j in lane j). NULL: gemm_f16. */
    void (*gemm_f16_x8)(const void *w, size_t w_stride, int64_t nr, const float *x, int64_t T,
                        int64_t k, float *out, size_t out_stride);
    /* Rearrange nb q8a blocks of one token into (nb + 3) / 4 groups for
     * gemm_q4_0. NULL in a table whose gemm_q4_0 reads q8a blocks. */
    void (*prep_q4_0)(const pagoda_q8a_block *x, pagoda_q4x_group *y, int64_t nb);
    /* One weight row of k values to F32 (the sgemm path of prefill). */
    void (*dequant)(int dtype, const void *w, float *out, int64_t k);
    /* out[i] = silu(g[i]) * u[i] = g / (1 + exp(-g)) * u (SwiGLU); the AVX2
     * variant's exp is a polynomial within 2 ulp of expf's. out may alias
     * g or u. */
    void (*swiglu)(const float *g, const float *u, float *out, int64_t n);
    /* out[i] = gelu_tanh(g[i]) * u[i] (GeGLU, Gemma's FFN), computed as
     * g / (1 + exp(-2 sqrt(2/pi) (g + 0.044715 g^3))) * u: the same value as
     * 0.5 g (1 + tanh(...)) without its cancellation for negative g; the
     * AVX2 variant's exp is swiglu's polynomial. out may alias g or u. */
    void (*geglu)(const float *g, const float *u, float *out, int64_t n);
    /* n floats to IEEE half, round to nearest even (the KV store); the
     * AVX2 variant (F16C) gives the same bits as pagoda_fp32_to_fp16 for
     * every non-NaN input. */
    void (*to_f16)(const float *x, uint16_t *y, int64_t n);
    /* KV helpers for attention:
     * acc[d] = acc[d] * a + p * v[d] for f16 / f32 v. */
    void (*axpy_f32)(float *acc, float a, float p, const float *v, int64_t n);
    void (*axpy_f16)(float *acc, float a, float p, const uint16_t *v, int64_t n);
    /* A chunk of n F16 keys / values of one head (rows stride bytes
     * apart, hd values each), so the head's running sums stay in registers
     * across keys instead of a call, a load and a store per key:
     *   sc[j] = scale * dot(k_j, q);   acc = acc * alpha + sum_j p[j] v_j. */
    void (*scores_f16)(const uint16_t *k, size_t stride, int n, const float *q, int hd, float scale,
                       float *sc);
    void (*accum_f16)(float *acc, float alpha, const float *p, const uint16_t *v, size_t stride,
                      int n, int hd);
    /* Prefill over an F16 or Q8_0 cache (t->q8), a tile of query rows at once: keys
     * j0 .. j0 + n - 1 (n <= 64, rows stride bytes apart, hd values each)
     * scored against all of t's rows, the online softmax step, the values
     * summed into t->acc. NULL where the level has none (attention.c then
     * takes one row at a time through scores_f16 / accum_f16). */
    void (*attn_f16_tile)(pagoda_attn_tile *t, const void *k, const void *v, size_t stride, int n, int32_t j0);
    /* K-quants and IQ4_XS (vecdot_k*.c): one row of nb super-blocks
     * against one token's q8k blocks (dot_q6_k above is the sixth). */
    float (*dot_q2_k)(const void *w, const pagoda_q8k_block *x, int64_t nb);
    float (*dot_q3_k)(const void *w, const pagoda_q8k_block *x, int64_t nb);
    float (*dot_q4_k)(const void *w, const pagoda_q8k_block *x, int64_t nb);
    float (*dot_q5_k)(const void *w, const pagoda_q8k_block *x, int64_t nb);
    float (*dot_iq4_xs)(const void *w, const pagoda_q8k_block *x, int64_t nb);
    /* Weight rows x T tokens in groups of eight (pagoda_cpu_prep_k_x8's
     * blocks: group i = tokens 8i..8i+7, nb super-blocks each, the last
     * group padded): out[t][n] for n < nr, t < T. NULL where the
     * table has none (the matmul then does one dot per pair). */
    void (*gemm_q2_k_x8)(const void *w, size_t w_stride, int64_t nr, const pagoda_q8kx8_block *x,
                         int64_t T, int64_t nb, float *out, size_t out_stride);
    void (*gemm_q3_k_x8)(const void *w, size_t w_stride, int64_t nr, const pagoda_q8kx8_block *x,
                         int64_t T, int64_t nb, float *out, size_t out_stride);
    void (*gemm_q4_k_x8)(const void *w, size_t w_stride, int64_t nr, const pagoda_q8kx8_block *x,
                         int64_t T, int64_t nb, float *out, size_t out_stride);
    void (*gemm_q5_k_x8)(const void *w, size_t w_stride, int64_t nr, const pagoda_q8kx8_block *x,
                         int64_t T, int64_t nb, float *out, size_t out_stride);
    void (*gemm_q6_k_x8)(const void *w, size_t w_stride, int64_t nr, const pagoda_q8kx8_block *x,
                         int64_t T, int64_t nb, float *out, size_t out_stride);
    void (*gemm_iq4_xs_x8)(const void *w, size_t w_stride, int64_t nr, const pagoda_q8kx8_block *x,
                           int64_t T, int64_t nb, float *out, size_t out_stride);
    /* The 32-value types Q5_0, Q5_1 and IQ4_NL against q8a activations
     * (Q5_1's m term through the block's s, as Q4_1), per row and in
     * tokens-in-lanes groups (as gemm_q8_0_x8; NULL: the kernels below).
     * Weight blocks: quant.h's pagoda_block_q5_0 / q5_1 / iq4_nl. */
    float (*dot_q5_0)(const void *w, const pagoda_q8a_block *x, int64_t nb);
    float (*dot_q5_1)(const void *w, const pagoda_q8a_block *x, int64_t nb);
    float (*dot_iq4_nl)(const void *w, const pagoda_q8a_block *x, int64_t nb);
    void (*gemm_q5_0_x8)(const void *w, size_t w_stride, int64_t nr, const pagoda_q8x8_block *x,
                         int64_t T, int64_t nb, float *out, size_t out_stride);
    void (*gemm_q5_1_x8)(const void *w, size_t w_stride, int64_t nr, const pagoda_q8x8_block *x,
                         int64_t T, int64_t nb, float *out, size_t out_stride);
    void (*gemm_q4_1_x8)(const void *w, size_t w_stride, int64_t nr, const pagoda_q8x8_block *x,
                         int64_t T, int64_t nb, float *out, size_t out_stride);
    void (*gemm_iq4_nl_x8)(const void *w, size_t w_stride, int64_t nr, const pagoda_q8x8_block *x,
                           int64_t T, int64_t nb, float *out, size_t out_stride);
    /* Their row x token blocks below the x8 kernels' minimum (decode), as
     * gemm_q4_0: on prep_q4_0's groups, which a table has wherever it has
     * these. NULL: one dot per pair. */
    void (*gemm_q5_0)(const void *w, size_t w_stride, int64_t nr, const void *x, size_t x_stride,
                      int64_t T, int64_t nb, float *out, size_t out_stride);
    void (*gemm_q5_1)(const void *w, size_t w_stride, int64_t nr, const void *x, size_t x_stride,
                      int64_t T, int64_t nb, float *out, size_t out_stride);
    void (*gemm_iq4_nl)(const void *w, size_t w_stride, int64_t nr, const void *x, size_t x_stride,
                        int64_t T, int64_t nb, float *out, size_t out_stride);
    /* Q4_1's the same way, below its tokens-in-lanes kernel (gemm_q4_1_x8,
     * from 5 tokens). NULL: one dot_q4_1 per pair. */
    void (*gemm_q4_1)(const void *w, size_t w_stride, int64_t nr, const void *x, size_t x_stride,
                      int64_t T, int64_t nb, float *out, size_t out_stride);
    /* The Q8_0 KV cache (pagoda_kv_layout): GGUF's Q8_0 blocks
     * (pagoda_blk_q8_0), a head's hd values in hd / 32 of them.
     * quant_kv_q8_0: k values (a multiple of 32) to k / 32 blocks, the
     * same bytes as pagoda_quantize_row's Q8_0 (scale amax / 127 stored as
     * f16, q = roundf(x / scale), half away from zero).
     * scores_q8_0 / accum_q8_0: scores_f16 / accum_f16 over Q8_0 rows
     * (stride bytes apart), each block widened to floats in registers and
     * its scale applied once per block: exact products of the stored
     * values with q (scores) and p (accum), no rounding of either. */
    void (*quant_kv_q8_0)(const float *x, void *y, int64_t k);
    void (*scores_q8_0)(const void *k, size_t stride, int n, const float *q, int hd, float scale,
                        float *sc);
    void (*accum_q8_0)(float *acc, float alpha, const float *p, const void *v, size_t stride, int n,
                       int hd);
    /* MXFP4 (quant.h pagoda_block_mxfp4, gpt-oss's experts) against q8a
     * activations: per block (d_x 2^(e-128)) sum(table[code] x q), the
     * codes a pshufb / table lookup into small integers (-12..12). Per row
     * (decode) and tokens in lanes (as gemm_q8_0_x8; NULL: one dot per
     * pair). vecdot_mxfp4*.c in each level's folder. */
    float (*dot_mxfp4)(const void *w, const pagoda_q8a_block *x, int64_t nb);
    void (*gemm_mxfp4_x8)(const void *w, size_t w_stride, int64_t nr, const pagoda_q8x8_block *x,
                          int64_t T, int64_t nb, float *out, size_t out_stride);
    /* gpt-oss's clamped SwiGLU: out[i] = (clamp(u, -limit, limit) + 1) *
     * x / (1 + exp(-alpha x)), x = min(g, limit) (pagoda_swiglu_oai1 per
     * value: a NaN gate gives limit, a NaN up stays NaN). The scalar entry
     * is the reference (the CUDA kernel's formula to the bit,
     * test_cuda_probe); the AVX2 and AVX-512 ones use swiglu's exp
     * polynomial (within ~2 ulp of expf's; their tails are the scalar
     * formula). out may alias g or u. */
    void (*swiglu_oai)(const float *g, const float *u, float alpha, float limit, float *out,
                       int64_t n);
    /* Where a level's tokens-in-lanes kernels hold 16 tokens a register
     * (AVX-512), a table of 8-token (256-bit) ones for T <= 8, where the
     * 16-token registers run half empty; NULL: this table's own. */
    const struct pagoda_vecdot_table *lanes8;
} pagoda_vecdot_table;

/* GELU-tanh's constants: sqrt(2/pi) and the cubic coefficient. */
#define PAGODA_GELU_K 0.7978845608028654f
#define PAGODA_GELU_C 0.044715f

/* gelu_tanh(x) of one value, in the sigmoid form above (the scalar
 * reference and the SIMD tails). */
static inline float pagoda_gelu_tanh(float x)
{
    return x / (1.0f + expf(-2.0f * PAGODA_GELU_K * (x + PAGODA_GELU_C * x * x * x)));
}

/* swiglu_oai of one value (the scalar reference and the SIMD tails):
 * x * sigmoid(alpha x) as x / (1 + e^(-alpha x)), which does not overflow
 * for the large negative x the one-sided clamp leaves (e^(+big) = inf
 * gives -0). */
static inline float pagoda_swiglu_oai1(float g, float u, float alpha, float limit)
{
    float x = g < limit ? g : limit;   /* min(gate, limit); a NaN gate gives limit */
    float y = u < -limit ? -limit : u > limit ? limit : u;   /* a NaN up stays NaN */
    return (y + 1.0f) * (x / (1.0f + expf(-alpha * x)));
}

extern const pagoda_vecdot_table pagoda_vecdot_scalar;
extern const pagoda_vecdot_table pagoda_vecdot_avx2;

/* The MXFP4 kernels of each level (kernels/<level>/vecdot_mxfp4*.c), as
 * the table slots above (the AVX-512 VNNI pair is that level's table's
 * entries; _simde: its test-only SIMDe copy). */
float pagoda_cpu_dot_mxfp4_scalar(const void *w, const pagoda_q8a_block *x, int64_t nb);
float pagoda_cpu_dot_mxfp4_avx2(const void *w, const pagoda_q8a_block *x, int64_t nb);
void pagoda_cpu_gemm_mxfp4_x8_avx2(const void *w, size_t ws, int64_t nr, const pagoda_q8x8_block *x,
                                   int64_t T, int64_t nb, float *out, size_t os);
float pagoda_cpu_dot_mxfp4_avx512(const void *w, const pagoda_q8a_block *x, int64_t nb);
void pagoda_cpu_gemm_mxfp4_x8_avx512(const void *w, size_t ws, int64_t nr, const pagoda_q8x8_block *x,
                                     int64_t T, int64_t nb, float *out, size_t os);
float pagoda_cpu_dot_mxfp4_avx512_simde(const void *w, const pagoda_q8a_block *x, int64_t nb);
void pagoda_cpu_gemm_mxfp4_x8_avx512_simde(const void *w, size_t ws, int64_t nr, const pagoda_q8x8_block *x,
                                           int64_t T, int64_t nb, float *out, size_t os);
/* The AVX-512 VNNI (kernels/avx512) and AVX-VNNI (kernels/avxvnni) tables
 * are the AVX2 one with the entries those folders have written put over
 * it: each fill function writes only its own entries, so every type runs
 * at every level (dispatch.c builds them once). The test-only SIMDe copies
 * of the same sources (libpagoda_cpu_kernels_simde) are the same functions
 * with _simde appended. */
void pagoda_cpu_fill_avx512(pagoda_vecdot_table *t);
/* kernels/avx512/act_avx512.c's entries (swiglu_oai), which
 * pagoda_cpu_fill_avx512 puts in; _simde: the test-only SIMDe copy. */
void pagoda_cpu_fill_avx512_act(pagoda_vecdot_table *t);
void pagoda_cpu_fill_avx512_act_simde(pagoda_vecdot_table *t);
void pagoda_cpu_fill_avxvnni(pagoda_vecdot_table *t);
void pagoda_cpu_fill_avx512_simde(pagoda_vecdot_table *t);
void pagoda_cpu_fill_avxvnni_simde(pagoda_vecdot_table *t);
/* kernels/avx512/lanes_vnni256_avx512.c: the 256-bit lanes kernels with
 * EVEX VNNI (AVX512-VL), the AVX-512 level's lanes8 where there is no
 * AVX-VNNI (no SIMDe copy: under SIMDe it is the AVX-VNNI file's). */
void pagoda_cpu_fill_avx512_256(pagoda_vecdot_table *t);

/* The attention tiles' converter (kernels/avx2/vecdot_act_avx2.c, 256-bit
 * code the AVX-512 tile and its SIMDe copy call too): t->kv = n cache
 * rows (F16, or Q8_0 blocks when t->q8) as floats. */
void pagoda_cpu_attn_kv_rows_avx2(const pagoda_attn_tile *t, const void *src, size_t stride, int n);

/* The table for the active ISA. */
const pagoda_vecdot_table *pagoda_cpu_vecdot(void);

/* The table a kernel level runs (pagoda_cpu_isa: scalar, AVX2, AVX-VNNI,
 * AVX-512; AMX: the AVX-512 one), whatever this CPU has: callers check the
 * level first. */
const pagoda_vecdot_table *pagoda_cpu_vecdot_level(int isa);

/* [main thread] Tests only: make pagoda_cpu_vecdot() return t (NULL: back
 * to the level's), to run the matmul through a table no level picks on
 * this host (the SIMDe copies). */
void pagoda_cpu_vecdot_override(const pagoda_vecdot_table *t);

#endif
