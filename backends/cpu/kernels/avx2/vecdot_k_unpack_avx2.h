/*
 * vecdot_k_unpack_avx2.h: one K-quant / IQ4_XS weight super-block unpacked
 * for a tokens-in-lanes product (kx_row: the quants as bytes in element
 * order, the sub-block scales as int16 pairs, the min / offset multipliers
 * and two floats), shared by the AVX2 lanes kernels (vecdot_k_x8_avx2.c)
 * and the VNNI ones (kernels/avx512/lanes_vnni.h), which patch the row for
 * vpdpbusd (vecdot_k_x8_avx2.c's header says what each field holds).
 * Include only from files compiled with AVX2 + FMA + F16C or more.
 * Not for: the products themselves.
 */
#ifndef PAGODA_CPU_VECDOT_K_UNPACK_AVX2_H
#define PAGODA_CPU_VECDOT_K_UNPACK_AVX2_H

#include <immintrin.h>
#include <stdint.h>

#include "quant.h"
#include "vecdot_avx2.h"

enum { KT_Q2, KT_Q3, KT_Q4, KT_Q5, KT_Q6, KT_IQ4 };

/* One weight row's super-block as the lanes product reads it:
 * value i = d * sc[i / SUB] * q[i] + dm * mm (see above). */
typedef struct kx_row {
    uint8_t q[256];
    int32_t sc[16]; /* (scale, scale) as int16 pairs, per sub-block */
    int32_t mm[8];  /* (m_2i, m_2i+1) as int16 pairs: per 16 (8 used) or per 32 (4) */
    float d, dm;
} __attribute__((aligned(32))) kx_row;

/* 8 int16 as (v, v) int32 pairs, then 4 .. 7. */
static inline void store_pairs8(int32_t *o, __m128i v16)
{
    _mm_storeu_si128((__m128i *)o, _mm_unpacklo_epi16(v16, v16));
    _mm_storeu_si128((__m128i *)(o + 4), _mm_unpackhi_epi16(v16, v16));
}

/* ------------------------------------------------------------- unpacking */

static inline void unpack_q45_k(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh,
                                uint16_t d, uint16_t dmin, kx_row *o)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    __m256i hb = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(v, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if (qh) {
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), one), 4));
            hb = _mm256_srli_epi16(hb, 2);
        }
        _mm256_store_si256((__m256i *)(o->q + 64 * c), lo);
        _mm256_store_si256((__m256i *)(o->q + 64 * c + 32), hi);
    }
    uint32_t u[4];
    pagoda_k4_unpack_scales(scales, u);
    __m128i raw = _mm_setr_epi32((int)u[0], (int)u[1], (int)u[2], (int)u[3]);
    store_pairs8(o->sc, _mm_cvtepu8_epi16(raw));
    _mm_storeu_si128((__m128i *)o->mm, _mm_cvtepu8_epi16(_mm_srli_si128(raw, 8)));
    o->d = f16(d);
    o->dm = -f16(dmin);
}

/* 16 byte scales (signed or not) to sc pairs, and to mm as they are. */
static inline void k16_scales(__m128i sc8, int sign, int32_t *sc, int32_t *mm)
{
    __m128i lo = sign ? _mm_cvtepi8_epi16(sc8) : _mm_cvtepu8_epi16(sc8);
    __m128i hi = sign ? _mm_cvtepi8_epi16(_mm_srli_si128(sc8, 8)) : _mm_cvtepu8_epi16(_mm_srli_si128(sc8, 8));
    store_pairs8(sc, lo);
    store_pairs8(sc + 8, hi);
    if (mm) {
        _mm_storeu_si128((__m128i *)mm, lo);
        _mm_storeu_si128((__m128i *)(mm + 4), hi);
    }
}

static inline void unpack_q2_k(const uint8_t *blk, kx_row *o)
{
    const pagoda_block_q2_K *w = (const pagoda_block_q2_K *)blk;
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int n = 0; n < 2; n++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(w->qs + 32 * n));
        for (int j = 0; j < 4; j++)
            _mm256_store_si256((__m256i *)(o->q + 128 * n + 32 * j),
                               _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3));
    }
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m128i raw = _mm_loadu_si128((const __m128i *)w->scales);
    k16_scales(_mm_and_si128(raw, m4), 0, o->sc, NULL);
    __m128i mn = _mm_and_si128(_mm_srli_epi16(raw, 4), m4);
    _mm_storeu_si128((__m128i *)o->mm, _mm_cvtepu8_epi16(mn));
    _mm_storeu_si128((__m128i *)(o->mm + 4), _mm_cvtepu8_epi16(_mm_srli_si128(mn, 8)));
    o->d = f16(w->d);
    o->dm = -f16(w->dmin);
}

static inline void unpack_q3_k(const uint8_t *blk, kx_row *o)
{
    const pagoda_block_q3_K *w = (const pagoda_block_q3_K *)blk;
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256i hm = _mm256_loadu_si256((const __m256i *)w->hmask);
    for (int n = 0; n < 2; n++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(w->qs + 32 * n));
        for (int j = 0; j < 4; j++) {
            __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
            __m256i hi = _mm256_slli_epi16(_mm256_and_si256(hm, one), 2);
            hm = _mm256_srli_epi16(hm, 1);
            _mm256_store_si256((__m256i *)(o->q + 128 * n + 32 * j), _mm256_or_si256(lo, hi));
        }
    }
    uint32_t u[4];
    pagoda_k3_unpack_scales(w->scales, u);
    __m128i sc8 = _mm_sub_epi8(_mm_setr_epi32((int)u[0], (int)u[1], (int)u[2], (int)u[3]), _mm_set1_epi8(32));
    k16_scales(sc8, 1, o->sc, NULL);
    o->d = f16(w->d);
    o->dm = 0.0f; /* the -4 comes off in int16 (KT_HS) */
}

static inline void unpack_q6_k(const uint8_t *blk, kx_row *o)
{
    const pagoda_blk_q6_k *w = (const pagoda_blk_q6_k *)blk;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    for (int n = 0; n < 2; n++) {
        __m256i b1 = _mm256_loadu_si256((const __m256i *)(w->ql + 64 * n));
        __m256i b2 = _mm256_loadu_si256((const __m256i *)(w->ql + 64 * n + 32));
        __m256i bh = _mm256_loadu_si256((const __m256i *)(w->qh + 32 * n));
        __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(bh, m3), 4);
        __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 2), m3), 4);
        __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 4), m3), 4);
        __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 6), m3), 4);
        uint8_t *q = o->q + 128 * n;
        _mm256_store_si256((__m256i *)q, _mm256_or_si256(_mm256_and_si256(b1, m4), h0));
        _mm256_store_si256((__m256i *)(q + 32), _mm256_or_si256(_mm256_and_si256(b2, m4), h1));
        _mm256_store_si256((__m256i *)(q + 64),
                           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m4), h2));
        _mm256_store_si256((__m256i *)(q + 96),
                           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m4), h3));
    }
    k16_scales(_mm_loadu_si128((const __m128i *)w->scales), 1, o->sc, NULL);
    o->d = f16(w->d);
    o->dm = 0.0f; /* the -32 comes off in int16 (KT_HS) */
}

static inline void unpack_iq4_xs(const uint8_t *blk, kx_row *o)
{
    const pagoda_block_iq4_xs *w = (const pagoda_block_iq4_xs *)blk;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pagoda_iq4nl_table));
    for (int ib = 0; ib < 8; ib++) {
        __m128i t = _mm_loadu_si128((const __m128i *)(w->qs + 16 * ib));
        __m256i idx = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), m4);
        _mm256_store_si256((__m256i *)(o->q + 32 * ib), _mm256_shuffle_epi8(table, idx));
        uint16_t s = (uint16_t)(int16_t)pagoda_iq4_xs_scale(w, ib);
        o->sc[ib] = (int32_t)((uint32_t)s | (uint32_t)s << 16);
    }
    o->d = f16(w->d);
    o->dm = 0.0f;
}

FORCE_INLINE void unpack_k(int kt, const uint8_t *blk, kx_row *o)
{
    switch (kt) {
    case KT_Q2: unpack_q2_k(blk, o); break;
    case KT_Q3: unpack_q3_k(blk, o); break;
    case KT_Q4: {
        const pagoda_block_q4_K *w = (const pagoda_block_q4_K *)blk;
        unpack_q45_k(w->scales, w->qs, NULL, w->d, w->dmin, o);
        break;
    }
    case KT_Q5: {
        const pagoda_block_q5_K *w = (const pagoda_block_q5_K *)blk;
        unpack_q45_k(w->scales, w->qs, w->qh, w->d, w->dmin, o);
        break;
    }
    case KT_Q6: unpack_q6_k(blk, o); break;
    default: unpack_iq4_xs(blk, o); break;
    }
}

#endif
