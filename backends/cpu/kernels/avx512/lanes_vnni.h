/*
 * lanes_vnni.h: the tokens-in-lanes kernels on vpdpbusd, one source for two
 * levels (vnni.h's width layer: kernels/avx512 includes it at 512 bits,
 * kernels/avxvnni at 256): vecdot.h's gemm_*_x8 of Q8_0, Q4_0, Q5_0, Q5_1,
 * IQ4_NL (q8x8 activations) and of Q2_K..Q6_K, IQ4_XS (q8kx8).
 * Included once per level by its lanes file; defines the static kernels
 * vnni_gemm_*_x8 and vnni_fill_lanes(table).
 *
 * How. The activations are as the AVX2 kernels read them (4-byte group g
 * of token t in 32-bit lane t of a group of eight tokens); a zmm holds two
 * such groups (16 tokens), a ymm one. Per weight row and block of 32 (or
 * super-block of 256) values the weights are first unpacked once into a
 * small buffer as unsigned bytes in element order (signed Q8_0 / IQ4
 * values + 128: the bias comes off as 128 x the tokens' sums), shared by
 * all the call's token registers; then per group of four values one
 * broadcast of the row's four bytes meets the same four positions of 16
 * (8) tokens in one vpdpbusd, which sums u8 x s8 products straight into
 * int32 lanes: no int16 step, so no headroom limits and no madd (the AVX2
 * kernels spend maddubs + add + a madd every few groups on what this does
 * in one instruction). Per block (32-value types) one convert + FMA per row
 * and register applies d_w x d_x; the K-quants multiply each sub-block's
 * int32 sum by its integer scale (vpmulld) and take the fixed offsets
 * (Q3_K -4, Q6_K -32, IQ4_XS's +128 bias) off in int32 as offset x sum_j
 * scale_j x (tokens' sums of sub-block j), one vpdpwssd per pair of
 * sub-blocks, so the integer result is exact; the mins of Q2_K / Q4_K /
 * Q5_K as in AVX2 (their own convert + FMA).
 */
#include "vecdot_k.h"
#include "vecdot_k_unpack_avx2.h"

/* Weight rows per tile, token registers per step; float sums of up to
 * LN_MAXR registers of a token chunk live in a small array. */
#define LN_RB 4
#if PAGODA_VNNI_W == 512
#define LN_NO 2
#else
#define LN_NO 1
#endif
#define LN_MAXR (64 / V_TOK)
/* 32-value blocks unpacked per step. */
#define LN_XB 8

enum { XT_Q8_0, XT_Q4_0, XT_Q5_0, XT_Q5_1, XT_IQ4_NL, XT_Q4_1 };

/* One weight row's LN_XB blocks of 32 as the product reads them: value i
 * of block j = d[j] * (q[32 j + i] - offset) + m[j]. */
typedef struct xn_row {
    uint8_t q[LN_XB * 32];
    float d[LN_XB], m[LN_XB];
} __attribute__((aligned(64))) xn_row;

/* The offset as a shift of the tokens' s8 (= 8 x sum qs): Q8_0 / IQ4_NL
 * +128 bias (16 x s8), Q4_0 8 (1x), Q5_0 16 (2x); -1: none (Q5_1, Q4_1). */
#define XT_OFF_SHIFT(xt) ((xt) == XT_Q8_0 || (xt) == XT_IQ4_NL ? 4 : (xt) == XT_Q4_0 ? 0 : (xt) == XT_Q5_0 ? 1 : -1)
#define XT_BSZ(xt)                                                                      \
    ((xt) == XT_Q8_0 ? sizeof(pagoda_blk_q8_0) : (xt) == XT_Q4_0 ? sizeof(pagoda_blk_q4_0) \
     : (xt) == XT_Q5_0 ? sizeof(pagoda_block_q5_0) : (xt) == XT_Q5_1 ? sizeof(pagoda_block_q5_1) \
     : (xt) == XT_Q4_1 ? sizeof(pagoda_blk_q4_1) : sizeof(pagoda_block_iq4_nl))

FORCE_INLINE void unpack_x(int xt, const uint8_t *blk, uint8_t *q, float *d, float *m)
{
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    __m256i v;
    switch (xt) {
    case XT_Q8_0: {
        const pagoda_blk_q8_0 *b = (const pagoda_blk_q8_0 *)blk;
        v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)b->qs), bias);
        *d = f16(b->d);
        break;
    }
    case XT_Q4_0: {
        const pagoda_blk_q4_0 *b = (const pagoda_blk_q4_0 *)blk;
        v = unpack_nibbles(b->qs);
        *d = f16(b->d);
        break;
    }
    case XT_Q5_0: {
        const pagoda_block_q5_0 *b = (const pagoda_block_q5_0 *)blk;
        v = q5_values(b->qs, b->qh);
        *d = f16(b->d);
        break;
    }
    case XT_Q5_1: {
        const pagoda_block_q5_1 *b = (const pagoda_block_q5_1 *)blk;
        v = q5_values(b->qs, b->qh);
        *d = f16(b->d);
        *m = f16(b->m); /* times d_x s8 / 8 = d_x sum(x), as the AVX2 kernels round it */
        break;
    }
    case XT_Q4_1: {
        const pagoda_blk_q4_1 *b = (const pagoda_blk_q4_1 *)blk;
        v = unpack_nibbles(b->qs);
        *d = f16(b->d);
        *m = f16(b->m); /* as Q5_1's */
        break;
    }
    default: {
        const pagoda_block_iq4_nl *b = (const pagoda_block_iq4_nl *)blk;
        v = _mm256_xor_si256(iq4nl_values(b->qs, iq4nl_table256()), bias);
        *d = f16(b->d);
        break;
    }
    }
    _mm256_store_si256((__m256i *)q, v);
}

/* Token register o of a chunk: q8x8 groups V_GRP*o .. (the second one the
 * first again past the chunk's last group: its lanes are never stored). */
#define XG(x, nb, ng, o, h) ((x) + (V_GRP * (o) + (h) < (ng) ? V_GRP * (o) + (h) : V_GRP * (o)) * (nb))

/* RB unpacked rows x NO token registers (first: o0), blocks b0 .. b0+nbs. */
FORCE_INLINE void lanes_x(int xt, const xn_row *rw, int RB, const pagoda_q8x8_block *x, int64_t nb,
                          int ng, int o0, int NO, int64_t b0, int nbs, vf_t (*acc)[LN_MAXR])
{
    const int SH = XT_OFF_SHIFT(xt);
    vf_t a[LN_RB][LN_NO];
    UNROLL(4) for (int r = 0; r < RB; r++)
        UNROLL(2) for (int o = 0; o < NO; o++) a[r][o] = acc[r][o0 + o];
    for (int j = 0; j < nbs; j++) {
        const pagoda_q8x8_block *xa[LN_NO], *xb[LN_NO];
        UNROLL(2) for (int o = 0; o < NO; o++) {
            xa[o] = XG(x, nb, ng, o0 + o, 0) + b0 + j;
            xb[o] = XG(x, nb, ng, o0 + o, 1) + b0 + j;
        }
        vi_t s[LN_RB][LN_NO];
        UNROLL(4) for (int r = 0; r < RB; r++)
            UNROLL(2) for (int o = 0; o < NO; o++) s[r][o] = vi_zero();
        UNROLL(8) for (int g = 0; g < 8; g++) {
            vi_t xv[LN_NO];
            UNROLL(2) for (int o = 0; o < NO; o++) xv[o] = vi_load2(xa[o]->qs[g], xb[o]->qs[g]);
            UNROLL(4) for (int r = 0; r < RB; r++) {
                vi_t wv = vi_set1(load32(rw[r].q + 32 * j + 4 * g));
                UNROLL(2) for (int o = 0; o < NO; o++) s[r][o] = v_dpbusd(s[r][o], wv, xv[o]);
            }
        }
        UNROLL(2) for (int o = 0; o < NO; o++) {
            vf_t dx = vf_load2(xa[o]->d, xb[o]->d);
            vi_t s8 = vi_load2(xa[o]->s8, xb[o]->s8);
            vi_t off = SH > 0 ? vi_slli(s8, SH) : s8;
            /* Q5_1 / Q4_1: m_w (d_x / 8 x s8), rounded as the AVX2 lanes
             * kernel (tile_q5_x8) rounds it, so a token's logits do not
             * depend on which kernel its batch size picks */
            vf_t xs8 = vf_zero();
            if (xt == XT_Q5_1 || xt == XT_Q4_1) xs8 = vf_mul(vf_mul(dx, vf_set1(0.125f)), vf_cvt(s8));
            UNROLL(4) for (int r = 0; r < RB; r++) {
                vi_t v = SH >= 0 ? vi_sub(s[r][o], off) : s[r][o];
                a[r][o] = vf_fma(vf_cvt(v), vf_mul(dx, vf_set1(rw[r].d[j])), a[r][o]);
                if (xt == XT_Q5_1 || xt == XT_Q4_1) a[r][o] = vf_fma(vf_set1(rw[r].m[j]), xs8, a[r][o]);
            }
        }
    }
    UNROLL(4) for (int r = 0; r < RB; r++)
        UNROLL(2) for (int o = 0; o < NO; o++) acc[r][o0 + o] = a[r][o];
}

/* RB weight rows x the chunk's nreg token registers (ng groups, tn real
 * tokens), over all nb blocks. */
FORCE_INLINE void tile_x(int xt, const uint8_t *w, size_t ws, int RB, const pagoda_q8x8_block *x, int ng,
                         int64_t tn, int64_t nb, float *out, size_t os)
{
    const size_t bsz = XT_BSZ(xt);
    const int nreg = (ng + V_GRP - 1) / V_GRP;
    xn_row rows[LN_RB];
    vf_t acc[LN_RB][LN_MAXR];
    for (int r = 0; r < RB; r++)
        for (int o = 0; o < nreg; o++) acc[r][o] = vf_zero();
    for (int64_t b0 = 0; b0 < nb; b0 += LN_XB) {
        int nbs = nb - b0 < LN_XB ? (int)(nb - b0) : LN_XB;
        UNROLL(4) for (int r = 0; r < RB; r++) {
            const uint8_t *blk = w + r * ws + (size_t)b0 * bsz;
            for (size_t off = 0; off < bsz * (size_t)nbs; off += 64)
                _mm_prefetch((const char *)blk + RB * ws + off, _MM_HINT_T0);
            for (int j = 0; j < nbs; j++)
                unpack_x(xt, blk + (size_t)j * bsz, rows[r].q + 32 * j, &rows[r].d[j], &rows[r].m[j]);
        }
        int o = 0;
        if (LN_NO > 1)
            for (; o + LN_NO <= nreg; o += LN_NO) lanes_x(xt, rows, RB, x, nb, ng, o, LN_NO, b0, nbs, acc);
        for (; o < nreg; o++) lanes_x(xt, rows, RB, x, nb, ng, o, 1, b0, nbs, acc);
    }
    for (int r = 0; r < RB; r++)
        for (int o = 0; o < nreg; o++) {
            int64_t left = tn - (int64_t)V_TOK * o;
            vf_store_tokens(acc[r][o], left < V_TOK ? (int)left : V_TOK,
                            (float *)((uint8_t *)out + (size_t)V_TOK * o * os) + r, os);
        }
}

FORCE_INLINE void gemm_x(int xt, const void *wv, size_t ws, int64_t nr, const pagoda_q8x8_block *x,
                         int64_t T, int64_t nb, float *out, size_t os)
{
    const uint8_t *w = wv;
    for (int64_t t0 = 0; t0 < T; t0 += 64) {
        int64_t tn = T - t0 < 64 ? T - t0 : 64;
        int ng = (int)((tn + 7) / 8);
        const pagoda_q8x8_block *xc = x + (t0 / 8) * nb;
        float *oc = (float *)((uint8_t *)out + t0 * os);
        int64_t r = 0;
        for (; r + LN_RB <= nr; r += LN_RB) tile_x(xt, w + r * ws, ws, LN_RB, xc, ng, tn, nb, oc + r, os);
        for (; r < nr; r++) tile_x(xt, w + r * ws, ws, 1, xc, ng, tn, nb, oc + r, os);
    }
}

#define VNNI_GEMM_X(name, xt)                                                                      \
    static void name(const void *w, size_t ws, int64_t nr, const pagoda_q8x8_block *x, int64_t T,  \
                     int64_t nb, float *out, size_t os)                                            \
    {                                                                                              \
        gemm_x(xt, w, ws, nr, x, T, nb, out, os);                                                  \
    }
VNNI_GEMM_X(vnni_gemm_q8_0_x8, XT_Q8_0)
VNNI_GEMM_X(vnni_gemm_q4_0_x8, XT_Q4_0)
VNNI_GEMM_X(vnni_gemm_q5_0_x8, XT_Q5_0)
VNNI_GEMM_X(vnni_gemm_q5_1_x8, XT_Q5_1)
VNNI_GEMM_X(vnni_gemm_q4_1_x8, XT_Q4_1)
VNNI_GEMM_X(vnni_gemm_iq4_nl_x8, XT_IQ4_NL)

/* ------------------------------------------------------------ K-quants */

/* Values per scale; the fixed offset taken off in int32 (log2: Q3_K 4,
 * Q6_K 32, IQ4_XS 128; 0 none); the float mins' pair registers (Q2_K per
 * 16: 8, Q4_K / Q5_K per 32: 4). */
#define KV_SUB(kt) ((kt) == KT_Q4 || (kt) == KT_Q5 || (kt) == KT_IQ4 ? 32 : 16)
#define KV_ISH(kt) ((kt) == KT_Q6 ? 5 : (kt) == KT_Q3 ? 2 : (kt) == KT_IQ4 ? 7 : 0)
#define KV_NMIN(kt) ((kt) == KT_Q4 || (kt) == KT_Q5 ? 4 : (kt) == KT_Q2 ? 8 : 0)

/* The AVX2 unpack, made vpdpbusd's: IQ4_XS's signed values + 128, and for
 * the int32 offsets the sub-block scales as (sc_2i, sc_2i+1) pairs in mm
 * (as the mins are), against the tokens' sums of 16 (Q3/Q6) or 32 (IQ4). */
FORCE_INLINE void unpack_kv(int kt, const uint8_t *blk, kx_row *o)
{
    unpack_k(kt, blk, o);
    if (kt == KT_IQ4)
        for (int i = 0; i < 256; i += 32)
            _mm256_store_si256((__m256i *)(o->q + i), _mm256_xor_si256(_mm256_load_si256((const __m256i *)(o->q + i)),
                                                                      _mm256_set1_epi8((char)0x80)));
    if (KV_ISH(kt)) {
        int n = 256 / KV_SUB(kt) / 2;
        for (int i = 0; i < n; i++)
            o->mm[i] = (int32_t)(((uint32_t)o->sc[2 * i] & 0xffffu) | ((uint32_t)o->sc[2 * i + 1] << 16));
    }
}

#define KG(x, nb, ng, o, h) XG(x, nb, ng, o, h)

/* RB unpacked rows x NO token registers (first: o0), super-block b. */
FORCE_INLINE void lanes_kv(int kt, const kx_row *rw, int RB, const pagoda_q8kx8_block *x, int64_t nb, int ng,
                           int o0, int NO, int64_t b, vf_t (*acc)[LN_MAXR])
{
    const int SUB = KV_SUB(kt), ISH = KV_ISH(kt), NMIN = KV_NMIN(kt);
    const pagoda_q8kx8_block *xa[LN_NO], *xb[LN_NO];
    UNROLL(2) for (int o = 0; o < NO; o++) {
        xa[o] = KG(x, nb, ng, o0 + o, 0) + b;
        xb[o] = KG(x, nb, ng, o0 + o, 1) + b;
    }
    vi_t i32[LN_RB][LN_NO];
    UNROLL(4) for (int r = 0; r < RB; r++)
        UNROLL(2) for (int o = 0; o < NO; o++) i32[r][o] = vi_zero();
    for (int s = 0; s < 256 / SUB; s++) {
        vi_t sub[LN_RB][LN_NO];
        UNROLL(4) for (int r = 0; r < RB; r++)
            UNROLL(2) for (int o = 0; o < NO; o++) sub[r][o] = vi_zero();
        UNROLL(8) for (int gi = 0; gi < SUB / 4; gi++) {
            int g = s * (SUB / 4) + gi;
            vi_t xv[LN_NO];
            UNROLL(2) for (int o = 0; o < NO; o++) xv[o] = vi_load2(xa[o]->qs[g], xb[o]->qs[g]);
            UNROLL(4) for (int r = 0; r < RB; r++) {
                vi_t wv = vi_set1(load32(rw[r].q + 4 * g));
                UNROLL(2) for (int o = 0; o < NO; o++) sub[r][o] = v_dpbusd(sub[r][o], wv, xv[o]);
            }
        }
        UNROLL(4) for (int r = 0; r < RB; r++) {
            vi_t scv = vi_set1((int16_t)(rw[r].sc[s] & 0xffff));
            UNROLL(2) for (int o = 0; o < NO; o++) i32[r][o] = vi_add(i32[r][o], vi_mullo(sub[r][o], scv));
        }
    }
    UNROLL(2) for (int o = 0; o < NO; o++) {
        vf_t dx = vf_load2(xa[o]->d, xb[o]->d);
        UNROLL(4) for (int r = 0; r < RB; r++) {
            vi_t v = i32[r][o];
            if (ISH) {
                const int n = 256 / SUB / 2;
                vi_t off = vi_zero();
                UNROLL(8) for (int i = 0; i < n; i++) {
                    const int16_t *ba = SUB == 16 ? xa[o]->bs16[i] : xa[o]->bs32[i];
                    const int16_t *bb = SUB == 16 ? xb[o]->bs16[i] : xb[o]->bs32[i];
                    off = v_dpwssd(off, vi_load2(ba, bb), vi_set1(rw[r].mm[i]));
                }
                v = vi_sub(v, vi_slli(off, ISH));
            }
            vf_t a = vf_fma(vf_cvt(v), vf_mul(dx, vf_set1(rw[r].d)), acc[r][o0 + o]);
            if (NMIN) {
                vi_t off = vi_zero();
                UNROLL(8) for (int i = 0; i < NMIN; i++) {
                    const int16_t *ba = NMIN == 4 ? xa[o]->bs32[i] : xa[o]->bs16[i];
                    const int16_t *bb = NMIN == 4 ? xb[o]->bs32[i] : xb[o]->bs16[i];
                    off = v_dpwssd(off, vi_load2(ba, bb), vi_set1(rw[r].mm[i]));
                }
                a = vf_fma(vf_cvt(off), vf_mul(dx, vf_set1(rw[r].dm)), a);
            }
            acc[r][o0 + o] = a;
        }
    }
}

FORCE_INLINE void tile_kv(int kt, size_t bsz, const uint8_t *w, size_t ws, int RB, const pagoda_q8kx8_block *x,
                          int ng, int64_t tn, int64_t nb, float *out, size_t os)
{
    const int nreg = (ng + V_GRP - 1) / V_GRP;
    kx_row rows[LN_RB];
    vf_t acc[LN_RB][LN_MAXR];
    for (int r = 0; r < RB; r++)
        for (int o = 0; o < nreg; o++) acc[r][o] = vf_zero();
    for (int64_t b = 0; b < nb; b++) {
        UNROLL(4) for (int r = 0; r < RB; r++) {
            const uint8_t *blk = w + r * ws + (size_t)b * bsz;
            for (size_t off = 0; off < bsz; off += 64) _mm_prefetch((const char *)blk + RB * ws + off, _MM_HINT_T0);
            unpack_kv(kt, blk, &rows[r]);
        }
        int o = 0;
        if (LN_NO > 1)
            for (; o + LN_NO <= nreg; o += LN_NO) lanes_kv(kt, rows, RB, x, nb, ng, o, LN_NO, b, acc);
        for (; o < nreg; o++) lanes_kv(kt, rows, RB, x, nb, ng, o, 1, b, acc);
    }
    for (int r = 0; r < RB; r++)
        for (int o = 0; o < nreg; o++) {
            int64_t left = tn - (int64_t)V_TOK * o;
            vf_store_tokens(acc[r][o], left < V_TOK ? (int)left : V_TOK,
                            (float *)((uint8_t *)out + (size_t)V_TOK * o * os) + r, os);
        }
}

FORCE_INLINE void gemm_kv(int kt, size_t bsz, const void *wv, size_t ws, int64_t nr, const pagoda_q8kx8_block *x,
                          int64_t T, int64_t nb, float *out, size_t os)
{
    const uint8_t *w = wv;
    for (int64_t t0 = 0; t0 < T; t0 += 64) {
        int64_t tn = T - t0 < 64 ? T - t0 : 64;
        int ng = (int)((tn + 7) / 8);
        const pagoda_q8kx8_block *xc = x + (t0 / 8) * nb;
        float *oc = (float *)((uint8_t *)out + t0 * os);
        int64_t r = 0;
        for (; r + LN_RB <= nr; r += LN_RB) tile_kv(kt, bsz, w + r * ws, ws, LN_RB, xc, ng, tn, nb, oc + r, os);
        for (; r < nr; r++) tile_kv(kt, bsz, w + r * ws, ws, 1, xc, ng, tn, nb, oc + r, os);
    }
}

#define VNNI_GEMM_K(name, kt, blk)                                                                 \
    static void name(const void *w, size_t ws, int64_t nr, const pagoda_q8kx8_block *x, int64_t T, \
                     int64_t nb, float *out, size_t os)                                            \
    {                                                                                              \
        gemm_kv(kt, sizeof(blk), w, ws, nr, x, T, nb, out, os);                                    \
    }
VNNI_GEMM_K(vnni_gemm_q2_k_x8, KT_Q2, pagoda_block_q2_K)
VNNI_GEMM_K(vnni_gemm_q3_k_x8, KT_Q3, pagoda_block_q3_K)
VNNI_GEMM_K(vnni_gemm_q4_k_x8, KT_Q4, pagoda_block_q4_K)
VNNI_GEMM_K(vnni_gemm_q5_k_x8, KT_Q5, pagoda_block_q5_K)
VNNI_GEMM_K(vnni_gemm_q6_k_x8, KT_Q6, pagoda_block_q6_K)
VNNI_GEMM_K(vnni_gemm_iq4_xs_x8, KT_IQ4, pagoda_block_iq4_xs)

/* The lanes entries of a VNNI table. */
static void vnni_fill_lanes(pagoda_vecdot_table *t)
{
    t->gemm_q8_0_x8 = vnni_gemm_q8_0_x8;
    t->gemm_q4_0_x8 = vnni_gemm_q4_0_x8;
    t->gemm_q5_0_x8 = vnni_gemm_q5_0_x8;
    t->gemm_q5_1_x8 = vnni_gemm_q5_1_x8;
    t->gemm_q4_1_x8 = vnni_gemm_q4_1_x8;
    t->gemm_iq4_nl_x8 = vnni_gemm_iq4_nl_x8;
    t->gemm_q2_k_x8 = vnni_gemm_q2_k_x8;
    t->gemm_q3_k_x8 = vnni_gemm_q3_k_x8;
    t->gemm_q4_k_x8 = vnni_gemm_q4_k_x8;
    t->gemm_q5_k_x8 = vnni_gemm_q5_k_x8;
    t->gemm_q6_k_x8 = vnni_gemm_q6_k_x8;
    t->gemm_iq4_xs_x8 = vnni_gemm_iq4_xs_x8;
}
