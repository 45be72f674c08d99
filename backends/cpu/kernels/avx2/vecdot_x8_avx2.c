/*
 * vecdot_x8_avx2.c: the tokens-in-lanes kernels of the AVX2 table
 * (vecdot.h gemm_q8_0_x8 / gemm_q4_0_x8 / gemm_f16_x8, and those of Q5_0,
 * Q5_1, IQ4_NL): batched decode and prefill of those types, eight tokens
 * in the eight lanes of a register.
 * Compiled with AVX2 + FMA + F16C by file name; called only after CPUID
 * says so. Not for: the per-row dots and small tiles (vecdot_avx2.c).
 */
#include "vecdot.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <string.h>

#include "vecdot_avx2.h"

/* ------------------------------------------------- tokens in lanes (x8)
 * Batched decode and small prefills: eight tokens share every instruction.
 * The activations are interleaved (pagoda_q8x8_block: 4-byte group g of
 * token t in lane t), a weight row's four bytes are broadcast, and one
 * maddubs multiplies them with the same four positions of all eight
 * tokens. Per 32 multiply-adds that is sign + maddubs + madd + add for
 * Q8_0 (vecdot_avx2.c's 2 x 4 tiles: sign + maddubs + madd + convert + multiply
 * + FMA, and a horizontal sum per output), and for Q4_0 maddubs + add
 * (16-bit sums of 8 groups stay below 2^15: 8 x 2 x 15 x 127 = 30480) with
 * the nibble unpack shared by the tile's token groups. Measured on this
 * AMD EPYC (Zen 3, one core, K = 768, T = 16): Q8_0 ~100 GFLOP/s against
 * ~60 for the 2 x 4 tiles. */
#define PRAGMA_(x) _Pragma(#x)
#define UNROLL(n) PRAGMA_(GCC unroll n)

static inline __m256 bcast_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_set1_epi16((short)*p));
}

FORCE_INLINE void tile_q8_0_x8(const uint8_t *w, size_t ws, int RB, const pagoda_q8x8_block *x,
                               int nt, int64_t nb, float *out, size_t os)
{
    const __m256i ones = _mm256_set1_epi16(1);
    /* The weight is the magnitude (maddubs' unsigned side) and x takes
     * its sign: a weight of -128, which a file may hold, is 128 as
     * unsigned, while x's sign put onto it would overflow int8
     * (-(-128) = -128). x is the activations' -127..127. The rows'
     * magnitudes are made a block ahead into aw (one abs per 32 values,
     * not one per broadcast), as IQ4_NL's values below. */
    int8_t aw[2][8][32] __attribute__((aligned(32)));
    __m256 acc[8];
    UNROLL(8) for (int r = 0; r < RB; r++) {
        acc[r] = _mm256_setzero_ps();
        __m256i v = _mm256_loadu_si256((const __m256i *)((const pagoda_blk_q8_0 *)(w + r * ws))->qs);
        _mm256_store_si256((__m256i *)aw[0][r], _mm256_sign_epi8(v, v));
    }
    for (int64_t b = 0; b < nb; b++) {
        const pagoda_q8x8_block *xb = &x[b];
        int8_t (*a)[32] = aw[b & 1];
        __m256i ia[8];
        UNROLL(8) for (int r = 0; r < RB; r++) {
            ia[r] = _mm256_setzero_si256();
            /* The same place in the next tile's rows (a row is a few
             * hundred bytes: too short a stream for the hardware
             * prefetcher; 8 tokens, 110M: 30 -> see docs/backend-cpu.md). */
            _mm_prefetch((const char *)((const pagoda_blk_q8_0 *)(w + (r + RB) * ws) + b), _MM_HINT_T0);
            if (b + 1 < nb) {
                __m256i v = _mm256_loadu_si256((const __m256i *)((const pagoda_blk_q8_0 *)(w + r * ws) + b + 1)->qs);
                _mm256_store_si256((__m256i *)aw[(b + 1) & 1][r], _mm256_sign_epi8(v, v));
            }
        }
        UNROLL(2) for (int g = 0; g < 8; g++) {
            __m256i xv = _mm256_load_si256((const __m256i *)xb->qs[g]);
            UNROLL(8) for (int r = 0; r < RB; r++) {
                const pagoda_blk_q8_0 *wb = (const pagoda_blk_q8_0 *)(w + r * ws) + b;
                __m256i p = _mm256_maddubs_epi16(bcast4(a[r] + 4 * g), _mm256_sign_epi8(xv, bcast4(wb->qs + 4 * g)));
                ia[r] = _mm256_add_epi32(ia[r], _mm256_madd_epi16(p, ones));
            }
        }
        __m256 dx = _mm256_load_ps(xb->d);
        UNROLL(8) for (int r = 0; r < RB; r++) {
            const pagoda_blk_q8_0 *wb = (const pagoda_blk_q8_0 *)(w + r * ws) + b;
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dx, bcast_f16(&wb->d)), _mm256_cvtepi32_ps(ia[r]), acc[r]);
        }
    }
    UNROLL(8) for (int r = 0; r < RB; r++) store_x8(acc[r], nt, out + r, os);
}

void pagoda_cpu_gemm_q8_0_x8_avx2(const void *wv, size_t ws, int64_t nr, const pagoda_q8x8_block *x,
                              int64_t T, int64_t nb, float *out, size_t os)
{
    const uint8_t *w = wv;
    for (int64_t r = 0; r < nr;) {
        int rb = nr - r >= 4 ? 4 : 1;
        for (int64_t t = 0; t < T; t += 8) {
            int nt = T - t < 8 ? (int)(T - t) : 8;
            const pagoda_q8x8_block *xg = x + (t / 8) * nb;
            float *o = (float *)((uint8_t *)out + t * os) + r;
            if (rb == 4)
                tile_q8_0_x8(w + r * ws, ws, 4, xg, nt, nb, o, os);
            else
                tile_q8_0_x8(w + r * ws, ws, 1, xg, nt, nb, o, os);
        }
        r += rb;
    }
}

/* RB rows x NO token groups (x0, x1: nb blocks each; nt0, nt1 real tokens). */
FORCE_INLINE void tile_q4_0_x8(const uint8_t *w, size_t ws, int RB, const pagoda_q8x8_block *x0,
                               const pagoda_q8x8_block *x1, int NO, int nt0, int nt1, int64_t nb,
                               float *out, size_t os)
{
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0F);
    const pagoda_q8x8_block *xs[2] = {x0, x1};
    __m256 acc[8][2];  /* RB <= 8 (GEMM_X8 never asks 8 of this tile) */
    UNROLL(4) for (int r = 0; r < RB; r++)
        UNROLL(2) for (int o = 0; o < NO; o++) acc[r][o] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i i16[8][2];
        UNROLL(4) for (int r = 0; r < RB; r++) {
            UNROLL(2) for (int o = 0; o < NO; o++) i16[r][o] = _mm256_setzero_si256();
            _mm_prefetch((const char *)((const pagoda_blk_q4_0 *)(w + (r + RB) * ws) + b), _MM_HINT_T0);
        }
        UNROLL(4) for (int g = 0; g < 4; g++) {
            UNROLL(4) for (int r = 0; r < RB; r++) {
                const pagoda_blk_q4_0 *wb = (const pagoda_blk_q4_0 *)(w + r * ws) + b;
                __m256i v = bcast4((const int8_t *)wb->qs + 4 * g);
                __m256i lo = _mm256_and_si256(v, m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                UNROLL(2) for (int o = 0; o < NO; o++) {
                    const pagoda_q8x8_block *xb = &xs[o][b];
                    __m256i s = _mm256_add_epi16(
                        _mm256_maddubs_epi16(lo, _mm256_load_si256((const __m256i *)xb->qs[g])),
                        _mm256_maddubs_epi16(hi, _mm256_load_si256((const __m256i *)xb->qs[g + 4])));
                    i16[r][o] = _mm256_add_epi16(i16[r][o], s);
                    /* Pinned here: else GCC computes a block's maddubs
                     * first and spills them (vecdot_k_x8_avx2.c, KEEP). */
                    __asm__("" : "+x"(i16[r][o]));
                }
            }
        }
        UNROLL(4) for (int r = 0; r < RB; r++) {
            const pagoda_blk_q4_0 *wb = (const pagoda_blk_q4_0 *)(w + r * ws) + b;
            __m256 dw = bcast_f16(&wb->d);
            UNROLL(2) for (int o = 0; o < NO; o++) {
                const pagoda_q8x8_block *xb = &xs[o][b];
                __m256i ia = _mm256_sub_epi32(_mm256_madd_epi16(i16[r][o], ones),
                                              _mm256_load_si256((const __m256i *)xb->s8));
                acc[r][o] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_load_ps(xb->d)),
                                            _mm256_cvtepi32_ps(ia), acc[r][o]);
            }
        }
    }
    UNROLL(4) for (int r = 0; r < RB; r++) {
        store_x8(acc[r][0], nt0, out + r, os);
        if (NO > 1) store_x8(acc[r][1], nt1, (float *)((uint8_t *)out + 8 * os) + r, os);
    }
}

/* Walk rows x token groups for a tile(w, ws, RB, x0, x1, NO, nt0, nt1, n,
 * out, os) of 8 / 4 / 1 rows against 2 / 1 token groups: rows 8 at a
 * time only where there is a single group (ROWS8), else 4, then 1; groups
 * 2 at a time (the row work shared by 16 tokens), then 1. XG: the x
 * elements of one token group. */
#define GEMM_X8(name, tile, xtype, XG, ROWS8)                                                    \
    void name(const void *wv, size_t ws, int64_t nr, const xtype *x, int64_t T, int64_t n, \
                     float *out, size_t os)                                                       \
    {                                                                                             \
        const uint8_t *w = wv;                                                                    \
        for (int64_t r = 0; r < nr;) {                                                            \
            int rb = (ROWS8) && T <= 8 && nr - r >= 8 ? 8 : nr - r >= 4 ? 4 : 1;                  \
            for (int64_t t = 0; t < T;) {                                                         \
                int nt0 = T - t < 8 ? (int)(T - t) : 8;                                           \
                int nt1 = T - t - 8 <= 0 ? 0 : T - t - 8 < 8 ? (int)(T - t - 8) : 8;              \
                const xtype *x0 = x + (t / 8) * (XG), *x1 = x0 + (XG);                            \
                float *o = (float *)((uint8_t *)out + t * os) + r;                                \
                const uint8_t *wr = w + r * ws;                                                   \
                if (rb == 8)                                                                      \
                    tile(wr, ws, 8, x0, x0, 1, nt0, 0, n, o, os);                                 \
                else if (rb == 4 && nt1)                                                          \
                    tile(wr, ws, 4, x0, x1, 2, nt0, nt1, n, o, os);                               \
                else if (rb == 4)                                                                 \
                    tile(wr, ws, 4, x0, x0, 1, nt0, 0, n, o, os);                                 \
                else if (nt1)                                                                     \
                    tile(wr, ws, 1, x0, x1, 2, nt0, nt1, n, o, os);                               \
                else                                                                              \
                    tile(wr, ws, 1, x0, x0, 1, nt0, 0, n, o, os);                                 \
                t += nt1 ? 16 : 8;                                                                \
            }                                                                                     \
            r += rb;                                                                              \
        }                                                                                         \
    }

/* Q4_0: the nibble unpack of a row's bytes serves 16 tokens (n = blocks). */
GEMM_X8(pagoda_cpu_gemm_q4_0_x8_avx2, tile_q4_0_x8, pagoda_q8x8_block, n, 0)

/* F16 weights x eight tokens in lanes: x transposed per group of eight
 * (xt[k][t], one register per k), a tile's weight rows converted to F32
 * once per K chunk into a small buffer, then per k one broadcast from that
 * buffer per row and one FMA per row and token group: FMA-bound (8 values
 * per FMA) where vecdot_avx2.c's 4 x 2 tiles spend a load of x per two FMAs and
 * a horizontal sum per output. */
#define F16X8_KC 256

FORCE_INLINE void tile_f16_x8(const uint8_t *w, size_t ws, int RB, const float *x0, const float *x1,
                              int NO, int nt0, int nt1, int64_t k, float *out, size_t os)
{
    float buf[8][F16X8_KC] __attribute__((aligned(32)));
    __m256 acc[8][2];
    UNROLL(8) for (int r = 0; r < RB; r++)
        UNROLL(2) for (int o = 0; o < NO; o++) acc[r][o] = _mm256_setzero_ps();
    for (int64_t k0 = 0; k0 < k; k0 += F16X8_KC) {
        int kc = k - k0 < F16X8_KC ? (int)(k - k0) : F16X8_KC;
        UNROLL(8) for (int r = 0; r < RB; r++) {
            const uint16_t *wr = (const uint16_t *)(w + r * ws) + k0;
            int i = 0;
            /* The same place in the next tile's rows, as the int8 tiles. */
            for (; i + 32 <= kc; i += 32) {
                _mm_prefetch((const char *)(wr + i) + RB * ws, _MM_HINT_T0);
                _mm256_store_ps(&buf[r][i], load_f16(wr + i));
                _mm256_store_ps(&buf[r][i + 8], load_f16(wr + i + 8));
                _mm256_store_ps(&buf[r][i + 16], load_f16(wr + i + 16));
                _mm256_store_ps(&buf[r][i + 24], load_f16(wr + i + 24));
            }
            for (; i + 8 <= kc; i += 8) _mm256_store_ps(&buf[r][i], load_f16(wr + i));
            for (; i < kc; i++) buf[r][i] = f16(wr[i]);
        }
        const float *xa = x0 + k0 * 8, *xb = x1 + k0 * 8;
        for (int i = 0; i < kc; i++) {
            __m256 xv0 = _mm256_load_ps(xa + i * 8);
            __m256 xv1 = NO > 1 ? _mm256_load_ps(xb + i * 8) : xv0;
            UNROLL(8) for (int r = 0; r < RB; r++) {
                __m256 b = _mm256_broadcast_ss(&buf[r][i]);
                acc[r][0] = _mm256_fmadd_ps(b, xv0, acc[r][0]);
                if (NO > 1) acc[r][1] = _mm256_fmadd_ps(b, xv1, acc[r][1]);
            }
        }
    }
    UNROLL(8) for (int r = 0; r < RB; r++) {
        store_x8(acc[r][0], nt0, out + r, os);
        if (NO > 1) store_x8(acc[r][1], nt1, (float *)((uint8_t *)out + 8 * os) + r, os);
    }
}

/* F16: rows 4 at a time against pairs of token groups (8 accumulators:
 * enough FMA chains in flight for two FMAs a cycle at latency 4), 8 at a
 * time when there is a single group (n = values per row). The small-T path
 * (batched decode) of the kernel below. */
static GEMM_X8(gemm_f16_x8_small, tile_f16_x8, float, n * 8, 1)

/* F16 prefill (T >= F16B_MIN_T): blocked for the caches. Per F16B_ROWS
 * weight rows and F16B_GC token groups (a chunk), the K axis in blocks of
 * F16B_KC: the rows' block is converted to F32 once into pan (8 KB, L1)
 * and serves the chunk's 96 tokens (the small path converts it again for
 * every 16 tokens), a token triple's x block (12 KB) stays in L1 across
 * the 16 rows (with 256-value blocks the two overflowed L1's 32 KB and it
 * ran slower), and the partial sums of the 16 x 96 outputs wait in part
 * (6 KB) between K blocks. The caller hands over a whole row part and a
 * chunk passes over all its rows before the next chunk, so x is read
 * from L3 once per chunk and part, not once per 16 rows. The register tile is 4 rows x 3 token groups: 12 accumulators,
 * per k 3 loads of x and 4 broadcasts for 12 FMAs (the small path: 2 + 4
 * for 8), which is what lets the FMA units, not the loads, set the pace.
 * Measured on this Zen 3, one core, T = 512, K = 768, N = 2048, CPU
 * time: see docs/backend-cpu.md "F16 prefill". */
#define F16B_MIN_T 24
#define F16B_KC 128
#define F16B_GC 12
#define F16B_ROWS 16

FORCE_INLINE void f16b_tile(const float *pan, int RB, const float *x, int64_t xg, int NO, int kc,
                            float *part, int first, int last, const int *nt, float *out, size_t os)
{
    __m256 acc[4][3];
    UNROLL(4) for (int r = 0; r < RB; r++)
        UNROLL(3) for (int o = 0; o < NO; o++)
            acc[r][o] = first ? _mm256_setzero_ps() : _mm256_load_ps(part + (r * F16B_GC + o) * 8);
    for (int i = 0; i < kc; i++) {
        __m256 x0 = _mm256_load_ps(x + i * 8);
        __m256 x1 = NO > 1 ? _mm256_load_ps(x + xg + i * 8) : x0;
        __m256 x2 = NO > 2 ? _mm256_load_ps(x + 2 * xg + i * 8) : x0;
        UNROLL(4) for (int r = 0; r < RB; r++) {
            __m256 b = _mm256_broadcast_ss(pan + r * F16B_KC + i);
            acc[r][0] = _mm256_fmadd_ps(b, x0, acc[r][0]);
            if (NO > 1) acc[r][1] = _mm256_fmadd_ps(b, x1, acc[r][1]);
            if (NO > 2) acc[r][2] = _mm256_fmadd_ps(b, x2, acc[r][2]);
        }
    }
    if (!last) {
        UNROLL(4) for (int r = 0; r < RB; r++)
            UNROLL(3) for (int o = 0; o < NO; o++) _mm256_store_ps(part + (r * F16B_GC + o) * 8, acc[r][o]);
        return;
    }
    UNROLL(4) for (int r = 0; r < RB; r++)
        UNROLL(3) for (int o = 0; o < NO; o++)
            store_x8(acc[r][o], nt[o], (float *)((uint8_t *)out + 8 * o * os) + r, os);
}

/* The RB x NO variants (RB 4 or 1, NO 1..3) as constants for the unroll. */
static void f16b_tile_any(const float *pan, int rb, const float *x, int64_t xg, int no, int kc,
                          float *part, int first, int last, const int *nt, float *out, size_t os)
{
    if (rb == 4) {
        if (no == 3) f16b_tile(pan, 4, x, xg, 3, kc, part, first, last, nt, out, os);
        else if (no == 2) f16b_tile(pan, 4, x, xg, 2, kc, part, first, last, nt, out, os);
        else f16b_tile(pan, 4, x, xg, 1, kc, part, first, last, nt, out, os);
    } else {
        if (no == 3) f16b_tile(pan, 1, x, xg, 3, kc, part, first, last, nt, out, os);
        else if (no == 2) f16b_tile(pan, 1, x, xg, 2, kc, part, first, last, nt, out, os);
        else f16b_tile(pan, 1, x, xg, 1, kc, part, first, last, nt, out, os);
    }
}

void pagoda_cpu_gemm_f16_x8_avx2(const void *wv, size_t ws, int64_t nr, const float *x, int64_t T,
                                 int64_t k, float *out, size_t os)
{
    if (T < F16B_MIN_T) {
        gemm_f16_x8_small(wv, ws, nr, x, T, k, out, os);
        return;
    }
    const uint8_t *w = wv;
    float pan[F16B_ROWS][F16B_KC] __attribute__((aligned(32)));
    float part[F16B_ROWS * F16B_GC * 8] __attribute__((aligned(32)));
    int64_t ng = (T + 7) / 8, xg = k * 8;
    for (int64_t g0 = 0; g0 < ng; g0 += F16B_GC) {
        int gn = ng - g0 < F16B_GC ? (int)(ng - g0) : F16B_GC;
        for (int64_t r0 = 0; r0 < nr; r0 += F16B_ROWS) {
            int rn = nr - r0 < F16B_ROWS ? (int)(nr - r0) : F16B_ROWS;
            for (int64_t k0 = 0; k0 < k; k0 += F16B_KC) {
                int kc = k - k0 < F16B_KC ? (int)(k - k0) : F16B_KC;
                int first = k0 == 0, last = k0 + kc >= k;
                for (int r = 0; r < rn; r++) {
                    const uint16_t *wr = (const uint16_t *)(w + (r0 + r) * ws) + k0;
                    /* The next panel's bytes of this row (its next K block, or
                     * the next 16 rows' first) on their way while this panel
                     * is used: 256 bytes a row are too short a stream for the
                     * hardware prefetcher, and without this the conversion
                     * waited on them (12% of the kernel's samples at T = 512). */
                    const char *nx = !last ? (const char *)(wr + F16B_KC)
                                   : r0 + F16B_ROWS + r < nr ? (const char *)(w + (r0 + F16B_ROWS + r) * ws)
                                                             : NULL;
                    if (nx)
                        for (int b = 0; b < F16B_KC * 2; b += 64) _mm_prefetch(nx + b, _MM_HINT_T0);
                    int i = 0;
                    for (; i + 8 <= kc; i += 8) _mm256_store_ps(&pan[r][i], load_f16(wr + i));
                    for (; i < kc; i++) pan[r][i] = f16(wr[i]);
                }
                for (int g = 0; g < gn;) {
                    int no = gn - g >= 3 ? 3 : gn - g, nt[3];
                    for (int o = 0; o < no; o++) {
                        int64_t left = T - 8 * (g0 + g + o);
                        nt[o] = left < 8 ? (int)left : 8;
                    }
                    const float *xb = x + (g0 + g) * xg + k0 * 8;
                    float *ob = (float *)((uint8_t *)out + 8 * (g0 + g) * os) + r0;
                    for (int r = 0; r < rn;) {
                        int rb = rn - r >= 4 ? 4 : 1;
                        f16b_tile_any(pan[r], rb, xb, xg, no, kc, part + (r * F16B_GC + g) * 8, first,
                                      last, nt, ob + r, os);
                        r += rb;
                    }
                    g += no;
                }
            }
        }
    }
}

/* Q5_0 / Q5_1 / IQ4_NL: a tile's RB weight blocks are first made 32 bytes
 * each in element order (vecdot_avx2.h q5_values / iq4nl_values) in a
 * small buffer in L1, from which each group of four is broadcast as
 * Q8_0's bytes are: the 5-bit unpack (or the table lookup) is done once per
 * row and block for all the tile's token groups, and a broadcast from L1
 * costs a load, no vector ALU work. The next block is unpacked into the
 * other half of the buffer while this one is used: broadcasting right
 * after the store waited on it (Q5_0, one core, K = 2048, T = 8 / 16:
 * 98 / 133 GFLOP/s with one buffer, 133 / 161 with two). Block sizes:
 * Q5_0 22 bytes, Q5_1 24, IQ4_NL 18 (quant.h). */
#define Q5_0_BYTES 22
#define Q5_1_BYTES 24
#define IQ4_NL_BYTES 18
#define Q4_1_BYTES 20

/* tile_q5_x8's kinds: Q5_0 (values - 16), Q5_1 and Q4_1 (d q + m; Q4_1's
 * values are its nibbles, no qh). */
enum { X5_Q5_0, X5_Q5_1, X5_Q4_1 };

/* Block wb's 32 values (kind's layout) in element order. */
FORCE_INLINE __m256i x5_values(const uint8_t *wb, int kind)
{
    if (kind == X5_Q4_1) return unpack_nibbles(wb + 4);
    const uint8_t *qh = wb + (kind == X5_Q5_1 ? 4 : 2);
    return q5_values(qh + 4, qh);
}

/* RB rows x NO token groups of Q5_0, Q5_1 or Q4_1 (kind). The values are
 * 0..31, unsigned for maddubs: four maddubs (8 products of at most 31 x
 * 127 per 16-bit lane, 31496 < 2^15) add in int16 before one madd widens
 * them. Q5_0's -16: 16 sum(x) = 2 s8, in int32. Q5_1's and Q4_1's m:
 * d_w d_x isum + m_w (d_x s8 / 8). */
FORCE_INLINE void tile_q5_x8(const uint8_t *w, size_t ws, int RB, const pagoda_q8x8_block *x0,
                             const pagoda_q8x8_block *x1, int NO, int nt0, int nt1, int64_t nb,
                             float *out, size_t os, int kind)
{
    const __m256i ones = _mm256_set1_epi16(1);
    const int Q51 = kind != X5_Q5_0; /* has m */
    const size_t bs = kind == X5_Q4_1 ? Q4_1_BYTES : kind == X5_Q5_1 ? Q5_1_BYTES : Q5_0_BYTES;
    const pagoda_q8x8_block *xs[2] = {x0, x1};
    uint8_t qq[2][8][32] __attribute__((aligned(32)));
    __m256 acc[8][2];
    UNROLL(4) for (int r = 0; r < RB; r++)
        UNROLL(2) for (int o = 0; o < NO; o++) acc[r][o] = _mm256_setzero_ps();
    UNROLL(4) for (int r = 0; r < RB; r++) _mm256_store_si256((__m256i *)qq[0][r], x5_values(w + r * ws, kind));
    for (int64_t b = 0; b < nb; b++) {
        uint8_t (*q)[32] = qq[b & 1];
        if (b + 1 < nb)
            UNROLL(4) for (int r = 0; r < RB; r++) {
                const uint8_t *wb = w + r * ws + (b + 1) * bs;
                _mm_prefetch((const char *)wb + RB * ws, _MM_HINT_T0);
                _mm256_store_si256((__m256i *)qq[(b + 1) & 1][r], x5_values(wb, kind));
            }
        __m256i ia[8][2];
        UNROLL(2) for (int h = 0; h < 2; h++) {
            UNROLL(4) for (int r = 0; r < RB; r++) {
                __m256i v0 = bcast4((const int8_t *)q[r] + 16 * h);
                __m256i v1 = bcast4((const int8_t *)q[r] + 16 * h + 4);
                __m256i v2 = bcast4((const int8_t *)q[r] + 16 * h + 8);
                __m256i v3 = bcast4((const int8_t *)q[r] + 16 * h + 12);
                UNROLL(2) for (int o = 0; o < NO; o++) {
                    const pagoda_q8x8_block *xb = &xs[o][b];
                    __m256i s = maddubs4_x8(v0, v1, v2, v3, xb->qs + 4 * h);
                    __m256i p = _mm256_madd_epi16(s, ones);
                    ia[r][o] = h ? _mm256_add_epi32(ia[r][o], p) : p;
                }
            }
        }
        /* Per token group, shared by the rows: d_x, and Q5_0's 2 s8 or
         * Q5_1's d_x sum(x) = d_x s8 / 8. */
        __m256 dx[2], xs8[2];
        __m256i s16[2];
        UNROLL(2) for (int o = 0; o < NO; o++) {
            __m256i s8 = _mm256_load_si256((const __m256i *)xs[o][b].s8);
            dx[o] = _mm256_load_ps(xs[o][b].d);
            if (Q51)
                xs8[o] = _mm256_mul_ps(_mm256_mul_ps(dx[o], _mm256_set1_ps(0.125f)), _mm256_cvtepi32_ps(s8));
            else
                s16[o] = _mm256_slli_epi32(s8, 1);
        }
        UNROLL(4) for (int r = 0; r < RB; r++) {
            const uint8_t *wb = w + r * ws + b * bs;
            __m256 dw = bcast_f16((const uint16_t *)wb);
            UNROLL(2) for (int o = 0; o < NO; o++) {
                if (Q51) {
                    acc[r][o] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx[o]), _mm256_cvtepi32_ps(ia[r][o]), acc[r][o]);
                    acc[r][o] = _mm256_fmadd_ps(bcast_f16((const uint16_t *)wb + 1), xs8[o], acc[r][o]);
                } else {
                    __m256i iv = _mm256_sub_epi32(ia[r][o], s16[o]);
                    acc[r][o] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx[o]), _mm256_cvtepi32_ps(iv), acc[r][o]);
                }
            }
        }
    }
    UNROLL(4) for (int r = 0; r < RB; r++) {
        store_x8(acc[r][0], nt0, out + r, os);
        if (NO > 1) store_x8(acc[r][1], nt1, (float *)((uint8_t *)out + 8 * os) + r, os);
    }
}

FORCE_INLINE void tile_q5_0_x8(const uint8_t *w, size_t ws, int RB, const pagoda_q8x8_block *x0,
                               const pagoda_q8x8_block *x1, int NO, int nt0, int nt1, int64_t nb,
                               float *out, size_t os)
{
    tile_q5_x8(w, ws, RB, x0, x1, NO, nt0, nt1, nb, out, os, X5_Q5_0);
}

FORCE_INLINE void tile_q5_1_x8(const uint8_t *w, size_t ws, int RB, const pagoda_q8x8_block *x0,
                               const pagoda_q8x8_block *x1, int NO, int nt0, int nt1, int64_t nb,
                               float *out, size_t os)
{
    tile_q5_x8(w, ws, RB, x0, x1, NO, nt0, nt1, nb, out, os, X5_Q5_1);
}

FORCE_INLINE void tile_q4_1_x8(const uint8_t *w, size_t ws, int RB, const pagoda_q8x8_block *x0,
                               const pagoda_q8x8_block *x1, int NO, int nt0, int nt1, int64_t nb,
                               float *out, size_t os)
{
    tile_q5_x8(w, ws, RB, x0, x1, NO, nt0, nt1, nb, out, os, X5_Q4_1);
}

GEMM_X8(pagoda_cpu_gemm_q5_0_x8_avx2, tile_q5_0_x8, pagoda_q8x8_block, n, 0)
GEMM_X8(pagoda_cpu_gemm_q5_1_x8_avx2, tile_q5_1_x8, pagoda_q8x8_block, n, 0)
GEMM_X8(pagoda_cpu_gemm_q4_1_x8_avx2, tile_q4_1_x8, pagoda_q8x8_block, n, 0)

/* IQ4_NL: signed values (-127..113) x signed tokens, Q8_0's way (|x| once
 * per group of four for the tile's rows, the weight's sign onto x, madd
 * per maddubs: two pair sums of 127 x 127 would overflow int16). */
FORCE_INLINE void tile_iq4_nl_x8(const uint8_t *w, size_t ws, int RB, const pagoda_q8x8_block *x0,
                                 const pagoda_q8x8_block *x1, int NO, int nt0, int nt1, int64_t nb,
                                 float *out, size_t os)
{
    const __m256i ones = _mm256_set1_epi16(1), tab = iq4nl_table256();
    const pagoda_q8x8_block *xs[2] = {x0, x1};
    int8_t qq[2][8][32] __attribute__((aligned(32)));
    __m256 acc[8][2];
    UNROLL(4) for (int r = 0; r < RB; r++) {
        UNROLL(2) for (int o = 0; o < NO; o++) acc[r][o] = _mm256_setzero_ps();
        _mm256_store_si256((__m256i *)qq[0][r], iq4nl_values(w + r * ws + 2, tab));
    }
    for (int64_t b = 0; b < nb; b++) {
        int8_t (*q)[32] = qq[b & 1];
        __m256i ia[8][2];
        UNROLL(4) for (int r = 0; r < RB; r++) {
            const uint8_t *wb = w + r * ws + (b + 1) * IQ4_NL_BYTES;
            _mm_prefetch((const char *)wb + RB * ws, _MM_HINT_T0);
            if (b + 1 < nb) _mm256_store_si256((__m256i *)qq[(b + 1) & 1][r], iq4nl_values(wb + 2, tab));
            UNROLL(2) for (int o = 0; o < NO; o++) ia[r][o] = _mm256_setzero_si256();
        }
        UNROLL(2) for (int g = 0; g < 8; g++) {
            UNROLL(2) for (int o = 0; o < NO; o++) {
                __m256i xv = _mm256_load_si256((const __m256i *)xs[o][b].qs[g]);
                __m256i ax = _mm256_sign_epi8(xv, xv);
                UNROLL(4) for (int r = 0; r < RB; r++) {
                    __m256i p = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(bcast4(q[r] + 4 * g), xv));
                    ia[r][o] = _mm256_add_epi32(ia[r][o], _mm256_madd_epi16(p, ones));
                }
            }
        }
        UNROLL(4) for (int r = 0; r < RB; r++) {
            __m256 dw = bcast_f16((const uint16_t *)(w + r * ws + b * IQ4_NL_BYTES));
            UNROLL(2) for (int o = 0; o < NO; o++)
                acc[r][o] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_load_ps(xs[o][b].d)),
                                            _mm256_cvtepi32_ps(ia[r][o]), acc[r][o]);
        }
    }
    UNROLL(4) for (int r = 0; r < RB; r++) {
        store_x8(acc[r][0], nt0, out + r, os);
        if (NO > 1) store_x8(acc[r][1], nt1, (float *)((uint8_t *)out + 8 * os) + r, os);
    }
}

GEMM_X8(pagoda_cpu_gemm_iq4_nl_x8_avx2, tile_iq4_nl_x8, pagoda_q8x8_block, n, 0)

#endif
