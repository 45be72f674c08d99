/*
 * vecdot_avx2.c: AVX2 + FMA + F16C variants of the vecdot.h inner loops
 * (compiled with those flags by file name; called only after CPUID says
 * so). Int8 dots follow llama.cpp: maddubs (u8 x s8 -> s16 pairs), madd
 * with ones (-> s32), one FMA per block with the two scales.
 * Not for: anything the scalar reference does not also do.
 */
#include "vecdot.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "quant.h"
#include "vecdot_avx2.h"
#include "vecdot_k.h"

/* Software prefetch distance (bytes) on a weight row stream: one row's
 * stream from DRAM went from ~10.5 to ~12.8 GB/s per CPU-second with 4 KiB
 * ahead (mean of 3 alternating runs, Q4_0 T=1, busy dev VM; 2 KiB: 12.2).
 * Q8_0 likewise 12.0 -> 14.9. F16 showed no difference beyond the bench's
 * own run-order bias (~5%), so its dot has none.
 * A prefetch never faults, so running past the matrix's end is harmless. */
#define PREFETCH_AHEAD 4096

static inline float hmax_ps(__m256 v)
{
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_max_ps(lo, hi);
    lo = _mm_max_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_max_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}


/* Round 32 floats (4 vectors, already scaled) to int8 in element order. */
static inline __m256i pack_i8(__m256 a, __m256 b, __m256 c, __m256 d)
{
    __m256i ia = _mm256_cvtps_epi32(a), ib = _mm256_cvtps_epi32(b);
    __m256i ic = _mm256_cvtps_epi32(c), id = _mm256_cvtps_epi32(d);
    __m256i ab = _mm256_packs_epi32(ia, ib);  /* lanes interleave by 128 bits */
    __m256i cd = _mm256_packs_epi32(ic, id);
    __m256i r = _mm256_packs_epi16(ab, cd);
    /* Undo the in-lane packing order: dwords 0 4 1 5 2 6 3 7. */
    return _mm256_permutevar8x32_epi32(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static inline __m256 abs_ps(__m256 v)
{
    return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
}

static void quant_q8a_avx2(const float *x, pagoda_q8a_block *y, int64_t k)
{
    const __m256i ones16 = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < k / 32; b++) {
        const float *xb = x + b * 32;
        __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
        __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(abs_ps(v0), abs_ps(v1)),
                                 _mm256_max_ps(abs_ps(v2), abs_ps(v3)));
        float amax = hmax_ps(m);
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        __m256 vid = _mm256_set1_ps(id);
        /* cvtps_epi32 rounds to nearest even in the default MXCSR mode. */
        __m256i q = pack_i8(_mm256_mul_ps(v0, vid), _mm256_mul_ps(v1, vid),
                            _mm256_mul_ps(v2, vid), _mm256_mul_ps(v3, vid));
        _mm256_storeu_si256((__m256i *)y[b].qs, q);
        __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
        __m256i s32 = _mm256_madd_epi16(s16, ones16);
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
        s = _mm_hadd_epi32(s, s);
        s = _mm_hadd_epi32(s, s);
        y[b].d = d;
        y[b].s = d * (float)_mm_cvtsi128_si32(s);
    }
}

static void quant_q8k_avx2(const float *x, pagoda_q8k_block *y, int64_t k)
{
    for (int64_t b = 0; b < k / 256; b++) {
        const float *xb = x + b * 256;
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < 256; j += 8) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(xb + j)));
        float amax = hmax_ps(m);
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        __m256 vid = _mm256_set1_ps(id);
        const __m256i ones8 = _mm256_set1_epi8(1);
        for (int j = 0; j < 256; j += 32) {
            __m256i q = pack_i8(_mm256_mul_ps(_mm256_loadu_ps(xb + j), vid),
                                _mm256_mul_ps(_mm256_loadu_ps(xb + j + 8), vid),
                                _mm256_mul_ps(_mm256_loadu_ps(xb + j + 16), vid),
                                _mm256_mul_ps(_mm256_loadu_ps(xb + j + 24), vid));
            _mm256_storeu_si256((__m256i *)(y[b].qs + j), q);
            /* Sums of 16: pair sums, then 8 of them per 128-bit half. */
            __m256i s16 = _mm256_maddubs_epi16(ones8, q);
            __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
            s32 = _mm256_hadd_epi32(s32, s32);
            s32 = _mm256_hadd_epi32(s32, s32);
            y[b].bsums[j / 16] = (int16_t)_mm256_extract_epi32(s32, 0);
            y[b].bsums[j / 16 + 1] = (int16_t)_mm256_extract_epi32(s32, 4);
        }
        y[b].d = d;
    }
}

static float dot_f32_avx2(const float *w, const float *x, int64_t k)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= k; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= k; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
    float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < k; i++) s += w[i] * x[i];
    return s;
}

static inline __m256 load_bf16(const uint16_t *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static inline float bf16(uint16_t h)
{
    union { uint32_t u; float f; } c = { .u = (uint32_t)h << 16 };
    return c.f;
}

static float dot_f16_avx2(const uint16_t *w, const float *x, int64_t k)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= k; i += 32) {
        a0 = _mm256_fmadd_ps(load_f16(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(load_f16(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_f16(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_f16(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= k; i += 8) a0 = _mm256_fmadd_ps(load_f16(w + i), _mm256_loadu_ps(x + i), a0);
    float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < k; i++) s += f16(w[i]) * x[i];
    return s;
}

static float dot_bf16_avx2(const uint16_t *w, const float *x, int64_t k)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= k; i += 32) {
        a0 = _mm256_fmadd_ps(load_bf16(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(load_bf16(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_bf16(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_bf16(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= k; i += 8) a0 = _mm256_fmadd_ps(load_bf16(w + i), _mm256_loadu_ps(x + i), a0);
    float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < k; i++) s += bf16(w[i]) * x[i];
    return s;
}

/* Sum of products of signed int8 pairs as 8 int32 lanes. */
static inline __m256i dot_i8(__m256i a, __m256i b)
{
    __m256i ax = _mm256_sign_epi8(a, a);
    __m256i sy = _mm256_sign_epi8(b, a);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
}

/* Unsigned a (0..127) times signed b. */
static inline __m256i dot_u8i8(__m256i a, __m256i b)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
}

static float dot_q8_0_avx2(const void *wv, const pagoda_q8a_block *x, int64_t nb)
{
    const pagoda_blk_q8_0 *w = wv;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        _mm_prefetch((const char *)&w[b] + PREFETCH_AHEAD, _MM_HINT_T0);
        __m256i q0 = _mm256_loadu_si256((const __m256i *)w[b].qs);
        __m256i q1 = _mm256_loadu_si256((const __m256i *)w[b + 1].qs);
        __m256i p0 = dot_i8(q0, _mm256_loadu_si256((const __m256i *)x[b].qs));
        __m256i p1 = dot_i8(q1, _mm256_loadu_si256((const __m256i *)x[b + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(w[b].d) * x[b].d), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(f16(w[b + 1].d) * x[b + 1].d),
                               _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; b < nb; b++) {
        __m256i p = dot_i8(_mm256_loadu_si256((const __m256i *)w[b].qs),
                           _mm256_loadu_si256((const __m256i *)x[b].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(w[b].d) * x[b].d), _mm256_cvtepi32_ps(p), acc0);
    }
    return hsum_ps(_mm256_add_ps(acc0, acc1));
}

/* (q - 8) . y = q . y - 8 * sum(y): the nibbles stay unsigned for maddubs
 * (no sign juggling), and sum(y) * d_y is the activation block's s. */
static float dot_q4_0_avx2(const void *wv, const pagoda_q8a_block *x, int64_t nb)
{
    const pagoda_blk_q4_0 *w = wv;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    float corr = 0.0f;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        float d0 = f16(w[b].d), d1 = f16(w[b + 1].d);
        __m256i p0 = dot_u8i8(unpack_nibbles(w[b].qs), _mm256_loadu_si256((const __m256i *)x[b].qs));
        __m256i p1 = dot_u8i8(unpack_nibbles(w[b + 1].qs),
                              _mm256_loadu_si256((const __m256i *)x[b + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0 * x[b].d), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1 * x[b + 1].d), _mm256_cvtepi32_ps(p1), acc1);
        corr += d0 * x[b].s + d1 * x[b + 1].s;
    }
    for (; b < nb; b++) {
        float d0 = f16(w[b].d);
        __m256i p = dot_u8i8(unpack_nibbles(w[b].qs), _mm256_loadu_si256((const __m256i *)x[b].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0 * x[b].d), _mm256_cvtepi32_ps(p), acc0);
        corr += d0 * x[b].s;
    }
    return hsum_ps(_mm256_add_ps(acc0, acc1)) - 8.0f * corr;
}

static float dot_q4_1_avx2(const void *wv, const pagoda_q8a_block *x, int64_t nb)
{
    const pagoda_blk_q4_1 *w = wv;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    float summ = 0.0f;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        __m256i p0 = dot_u8i8(unpack_nibbles(w[b].qs), _mm256_loadu_si256((const __m256i *)x[b].qs));
        __m256i p1 = dot_u8i8(unpack_nibbles(w[b + 1].qs),
                              _mm256_loadu_si256((const __m256i *)x[b + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(w[b].d) * x[b].d), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(f16(w[b + 1].d) * x[b + 1].d),
                               _mm256_cvtepi32_ps(p1), acc1);
        summ += f16(w[b].m) * x[b].s + f16(w[b + 1].m) * x[b + 1].s;
    }
    for (; b < nb; b++) {
        __m256i p = dot_u8i8(unpack_nibbles(w[b].qs), _mm256_loadu_si256((const __m256i *)x[b].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(w[b].d) * x[b].d), _mm256_cvtepi32_ps(p), acc0);
        summ += f16(w[b].m) * x[b].s;
    }
    return hsum_ps(_mm256_add_ps(acc0, acc1)) + summ;
}

/* Shuffles that broadcast scales[2i] to bytes 0..7 and scales[2i+1] to 8..15. */
static const uint8_t q6_shuffle[8][16] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9},
    {10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13},
    {14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};

/* Scales of sub-blocks 2i, 2i+1 as int16 lanes 0..7 and 8..15. */
static inline __m256i q6_scales(__m128i scales, int i)
{
    return _mm256_cvtepi8_epi16(
        _mm_shuffle_epi8(scales, _mm_loadu_si128((const __m128i *)q6_shuffle[i])));
}

static float dot_q6_k_avx2(const void *wv, const pagoda_q8k_block *x, int64_t nb)
{
    const pagoda_blk_q6_k *w = wv;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i m2 = _mm256_set1_epi8(3);
    const __m256i m32s = _mm256_set1_epi8(32);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        /* Every line of the 210-byte block (see vecdot_k_avx2.c). */
        for (int off = 0; off < 256; off += 64)
            _mm_prefetch((const char *)&w[b] + PREFETCH_AHEAD + off, _MM_HINT_T0);
        const uint8_t *q4 = w[b].ql, *qh = w[b].qh;
        const int8_t *q8 = x[b].qs;
        const __m128i scales = _mm_loadu_si128((const __m128i *)w[b].scales);
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 2; j++) {
            __m256i sc0 = q6_scales(scales, 4 * j + 0);
            __m256i sc1 = q6_scales(scales, 4 * j + 1);
            __m256i sc2 = q6_scales(scales, 4 * j + 2);
            __m256i sc3 = q6_scales(scales, 4 * j + 3);
            __m256i bits1 = _mm256_loadu_si256((const __m256i *)q4);
            __m256i bits2 = _mm256_loadu_si256((const __m256i *)(q4 + 32));
            __m256i bitsh = _mm256_loadu_si256((const __m256i *)qh);
            q4 += 64;
            qh += 32;
            __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(bitsh, m2), 4);
            __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bitsh, 2), m2), 4);
            __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bitsh, 4), m2), 4);
            __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bitsh, 6), m2), 4);
            __m256i v0 = _mm256_or_si256(_mm256_and_si256(bits1, m4), h0);
            __m256i v1 = _mm256_or_si256(_mm256_and_si256(bits2, m4), h1);
            __m256i v2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits1, 4), m4), h2);
            __m256i v3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits2, 4), m4), h3);
            __m256i y0 = _mm256_loadu_si256((const __m256i *)q8);
            __m256i y1 = _mm256_loadu_si256((const __m256i *)(q8 + 32));
            __m256i y2 = _mm256_loadu_si256((const __m256i *)(q8 + 64));
            __m256i y3 = _mm256_loadu_si256((const __m256i *)(q8 + 96));
            q8 += 128;
            /* (v - 32) * y = v * y - 32 * y, with v unsigned 0..63. */
            __m256i p0 = _mm256_sub_epi16(_mm256_maddubs_epi16(v0, y0), _mm256_maddubs_epi16(m32s, y0));
            __m256i p1 = _mm256_sub_epi16(_mm256_maddubs_epi16(v1, y1), _mm256_maddubs_epi16(m32s, y1));
            __m256i p2 = _mm256_sub_epi16(_mm256_maddubs_epi16(v2, y2), _mm256_maddubs_epi16(m32s, y2));
            __m256i p3 = _mm256_sub_epi16(_mm256_maddubs_epi16(v3, y3), _mm256_maddubs_epi16(m32s, y3));
            p0 = _mm256_madd_epi16(sc0, p0);
            p1 = _mm256_madd_epi16(sc1, p1);
            p2 = _mm256_madd_epi16(sc2, p2);
            p3 = _mm256_madd_epi16(sc3, p3);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_add_epi32(p0, p1),
                                                           _mm256_add_epi32(p2, p3)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(w[b].d) * x[b].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

static void axpy_f32_avx2(float *acc, float a, float p, const float *v, int64_t n)
{
    __m256 va = _mm256_set1_ps(a), vp = _mm256_set1_ps(p);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 r = _mm256_mul_ps(_mm256_loadu_ps(acc + i), va);
        _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(vp, _mm256_loadu_ps(v + i), r));
    }
    for (; i < n; i++) acc[i] = acc[i] * a + p * v[i];
}

static void axpy_f16_avx2(float *acc, float a, float p, const uint16_t *v, int64_t n)
{
    __m256 va = _mm256_set1_ps(a), vp = _mm256_set1_ps(p);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 r = _mm256_mul_ps(_mm256_loadu_ps(acc + i), va);
        _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(vp, load_f16(v + i), r));
    }
    for (; i < n; i++) acc[i] = acc[i] * a + p * f16(v[i]);
}

/* Four keys at a time share each load of q; a key's sum is one register
 * (hd / 8 dependent FMAs, four chains in flight). */
static void scores_f16_avx2(const uint16_t *k, size_t stride, int n, const float *q, int hd,
                            float scale, float *sc)
{
    int hd8 = hd & ~7;
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        const uint16_t *k0 = (const uint16_t *)((const uint8_t *)k + j * stride);
        const uint16_t *k1 = (const uint16_t *)((const uint8_t *)k0 + stride);
        const uint16_t *k2 = (const uint16_t *)((const uint8_t *)k1 + stride);
        const uint16_t *k3 = (const uint16_t *)((const uint8_t *)k2 + stride);
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int d = 0; d < hd8; d += 8) {
            __m256 qv = _mm256_loadu_ps(q + d);
            a0 = _mm256_fmadd_ps(load_f16(k0 + d), qv, a0);
            a1 = _mm256_fmadd_ps(load_f16(k1 + d), qv, a1);
            a2 = _mm256_fmadd_ps(load_f16(k2 + d), qv, a2);
            a3 = _mm256_fmadd_ps(load_f16(k3 + d), qv, a3);
        }
        float s0 = hsum_ps(a0), s1 = hsum_ps(a1), s2 = hsum_ps(a2), s3 = hsum_ps(a3);
        for (int d = hd8; d < hd; d++) {
            s0 += f16(k0[d]) * q[d];
            s1 += f16(k1[d]) * q[d];
            s2 += f16(k2[d]) * q[d];
            s3 += f16(k3[d]) * q[d];
        }
        sc[j] = scale * s0;
        sc[j + 1] = scale * s1;
        sc[j + 2] = scale * s2;
        sc[j + 3] = scale * s3;
    }
    for (; j < n; j++) sc[j] = scale * dot_f16_avx2((const uint16_t *)((const uint8_t *)k + j * stride), q, hd);
}

/* 32 columns of acc at a time stay in registers over all n values. */
static void accum_f16_avx2(float *acc, float alpha, const float *p, const uint16_t *v, size_t stride,
                           int n, int hd)
{
    __m256 va = _mm256_set1_ps(alpha);
    int d = 0;
    for (; d + 32 <= hd; d += 32) {
        __m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(acc + d), va);
        __m256 a1 = _mm256_mul_ps(_mm256_loadu_ps(acc + d + 8), va);
        __m256 a2 = _mm256_mul_ps(_mm256_loadu_ps(acc + d + 16), va);
        __m256 a3 = _mm256_mul_ps(_mm256_loadu_ps(acc + d + 24), va);
        for (int j = 0; j < n; j++) {
            const uint16_t *vj = (const uint16_t *)((const uint8_t *)v + j * stride) + d;
            __m256 pj = _mm256_broadcast_ss(p + j);
            a0 = _mm256_fmadd_ps(pj, load_f16(vj), a0);
            a1 = _mm256_fmadd_ps(pj, load_f16(vj + 8), a1);
            a2 = _mm256_fmadd_ps(pj, load_f16(vj + 16), a2);
            a3 = _mm256_fmadd_ps(pj, load_f16(vj + 24), a3);
        }
        _mm256_storeu_ps(acc + d, a0);
        _mm256_storeu_ps(acc + d + 8, a1);
        _mm256_storeu_ps(acc + d + 16, a2);
        _mm256_storeu_ps(acc + d + 24, a3);
    }
    for (; d + 8 <= hd; d += 8) {
        __m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(acc + d), va);
        for (int j = 0; j < n; j++)
            a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(p + j),
                                 load_f16((const uint16_t *)((const uint8_t *)v + j * stride) + d), a0);
        _mm256_storeu_ps(acc + d, a0);
    }
    for (; d < hd; d++) {
        float a = acc[d] * alpha;
        for (int j = 0; j < n; j++) a += p[j] * f16(((const uint16_t *)((const uint8_t *)v + j * stride))[d]);
        acc[d] = a;
    }
}

static void dequant_avx2(int dtype, const void *wv, float *out, int64_t k)
{
    switch (dtype) {
    case PAGODA_DTYPE_F16: {
        const uint16_t *w = wv;
        int64_t i = 0;
        for (; i + 8 <= k; i += 8) _mm256_storeu_ps(out + i, load_f16(w + i));
        for (; i < k; i++) out[i] = f16(w[i]);
        return;
    }
    case PAGODA_DTYPE_BF16: {
        const uint16_t *w = wv;
        int64_t i = 0;
        for (; i + 8 <= k; i += 8) _mm256_storeu_ps(out + i, load_bf16(w + i));
        for (; i < k; i++) out[i] = bf16(w[i]);
        return;
    }
    case PAGODA_DTYPE_Q8_0: {
        const pagoda_blk_q8_0 *w = wv;
        for (int64_t b = 0; b < k / 32; b++)
            store_scaled_i8(out + b * 32, _mm256_loadu_si256((const __m256i *)w[b].qs),
                            _mm256_set1_ps(f16(w[b].d)));
        return;
    }
    case PAGODA_DTYPE_Q4_0: {
        const pagoda_blk_q4_0 *w = wv;
        for (int64_t b = 0; b < k / 32; b++)
            store_scaled_i8(out + b * 32, _mm256_sub_epi8(unpack_nibbles(w[b].qs), _mm256_set1_epi8(8)),
                            _mm256_set1_ps(f16(w[b].d)));
        return;
    }
    case PAGODA_DTYPE_Q4_1: {
        const pagoda_blk_q4_1 *w = wv;
        for (int64_t b = 0; b < k / 32; b++) {
            float *o = out + b * 32;
            store_scaled_i8(o, unpack_nibbles(w[b].qs), _mm256_set1_ps(f16(w[b].d)));
            __m256 m = _mm256_set1_ps(f16(w[b].m));
            for (int j = 0; j < 32; j += 8) _mm256_storeu_ps(o + j, _mm256_add_ps(_mm256_loadu_ps(o + j), m));
        }
        return;
    }
    case PAGODA_DTYPE_Q5_0:
    case PAGODA_DTYPE_Q5_1:
    case PAGODA_DTYPE_IQ4_NL:
        pagoda_cpu_dequant_q5_avx2(dtype, wv, out, k);
        return;
    default:
        pagoda_dequantize_row(dtype, wv, out, k);
        return;
    }
}

/* ---------------------------------------------------------------- tiles
 * Register tiles of RB weight rows x TB tokens, one accumulator each, over
 * all blocks of the rows: a row's block is loaded (and prepared: sign,
 * nibble unpack, scale) once for TB tokens, a token's block once for RB
 * rows. Per pair and block that leaves sign + maddubs + madd + convert +
 * scale + fma (Q8_0), where single dots also repeat every load and the
 * scale conversion. RB * TB <= 8 accumulators, plus the prepared rows,
 * fit the 16 ymm registers. */

FORCE_INLINE void store_tile(__m256 acc[4][4], int RB, int TB, float *out, size_t os)
{
    for (int t = 0; t < TB; t++) {
        float *o = (float *)((uint8_t *)out + t * os);
        for (int r = 0; r < RB; r++) o[r] = hsum_ps(acc[r][t]);
    }
}

FORCE_INLINE void tile_q8_0(const uint8_t *w, size_t ws, int RB, const uint8_t *x, size_t xs,
                            int TB, int64_t nb, float *out, size_t os)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4][4];
    for (int r = 0; r < RB; r++)
        for (int t = 0; t < TB; t++) acc[r][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i wv[4], aw[4];
        __m256 dw[4];
        for (int r = 0; r < RB; r++) {
            const pagoda_blk_q8_0 *wb = (const pagoda_blk_q8_0 *)(w + r * ws) + b;
            wv[r] = _mm256_loadu_si256((const __m256i *)wb->qs);
            aw[r] = _mm256_sign_epi8(wv[r], wv[r]);
            dw[r] = _mm256_set1_ps(f16(wb->d));
        }
        for (int t = 0; t < TB; t++) {
            const pagoda_q8a_block *xb = (const pagoda_q8a_block *)(x + t * xs) + b;
            __m256i xv = _mm256_loadu_si256((const __m256i *)xb->qs);
            __m256 dx = _mm256_broadcast_ss(&xb->d);
            for (int r = 0; r < RB; r++) {
                __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw[r], _mm256_sign_epi8(xv, wv[r])), ones);
                acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], dx), _mm256_cvtepi32_ps(p), acc[r][t]);
            }
        }
    }
    store_tile(acc, RB, TB, out, os);
}

/* ------------------------------------------------------------ Q4_0 groups
 * The Q4_0 kernels read activations in pagoda_q4x_group order (vecdot.h):
 * per pair of weight blocks one 256-bit load + two masks unpack 64
 * nibbles, two maddubs and one add give both blocks' int16 pair sums (at
 * most 2 x 2 x 15 x 127 + 4096 in magnitude: no saturation), one madd
 * widens them, one convert and one FMA with [d0 x4 | d1 x4] scale them.
 * That is half the madd / convert / FMA of a block at a time, and the
 * f16 weight scales of four blocks convert in one instruction. */
static void prep_q4_0_avx2(const pagoda_q8a_block *x, pagoda_q4x_group *y, int64_t nb)
{
    const __m256i eights = _mm256_set1_epi8(8);
    for (int64_t g = 0; g < (nb + 3) / 4; g++) {
        pagoda_q4x_group *o = &y[g];
        for (int p = 0; p < 2; p++) {
            int64_t b0 = 4 * g + 2 * p, b1 = b0 + 1;
            __m256i x0 = b0 < nb ? _mm256_loadu_si256((const __m256i *)x[b0].qs) : _mm256_setzero_si256();
            __m256i x1 = b1 < nb ? _mm256_loadu_si256((const __m256i *)x[b1].qs) : _mm256_setzero_si256();
            __m256i lo = _mm256_permute2x128_si256(x0, x1, 0x20);
            __m256i hi = _mm256_permute2x128_si256(x0, x1, 0x31);
            _mm256_storeu_si256((__m256i *)o->qs[2 * p], lo);
            _mm256_storeu_si256((__m256i *)o->qs[2 * p + 1], hi);
            _mm256_storeu_si256((__m256i *)o->off[p],
                                _mm256_add_epi16(_mm256_maddubs_epi16(eights, lo),
                                                 _mm256_maddubs_epi16(eights, hi)));
            __m128 d0 = _mm_set1_ps(b0 < nb ? x[b0].d : 0.0f), d1 = _mm_set1_ps(b1 < nb ? x[b1].d : 0.0f);
            _mm256_storeu_ps(o->dx[p], _mm256_set_m128(d1, d0));
        }
        for (int j = 0; j < 4; j++) o->s[j] = 4 * g + j < nb ? x[4 * g + j].s : 0.0f;
    }
}

/* The f16 scales of four weight blocks (18 bytes apart) as floats, in both
 * 128-bit lanes; the packing runs on the integer ALUs, not the vector
 * pipes the dot products saturate. */
static inline __m256 q4_scales4(const pagoda_blk_q4_0 *w)
{
    uint64_t pk = (uint64_t)w[0].d | (uint64_t)w[1].d << 16 | (uint64_t)w[2].d << 32 |
                  (uint64_t)w[3].d << 48;
    return _mm256_cvtph_ps(_mm_set1_epi64x((long long)pk));
}

/* Blocks [4 * g0, nb) of one weight row against one token's groups, one at
 * a time (the end of a row whose block count is not a multiple of 4). */
static float q4x_tail(const pagoda_blk_q4_0 *w, const pagoda_q4x_group *x, int64_t b0, int64_t nb)
{
    float s = 0.0f;
    for (int64_t b = b0; b < nb; b++) {
        const pagoda_q4x_group *gx = &x[b / 4];
        int p = (int)(b % 4) / 2, h = (int)(b % 2);
        int sum = 0;
        for (int j = 0; j < 16; j++) {
            sum += ((w[b].qs[j] & 0x0F) - 8) * gx->qs[2 * p][16 * h + j];
            sum += ((w[b].qs[j] >> 4) - 8) * gx->qs[2 * p + 1][16 * h + j];
        }
        s += (float)sum * f16(w[b].d) * gx->dx[p][4 * h];
    }
    return s;
}

/* RB = 1 weight row x TB tokens: a row's pair of blocks is unpacked once
 * for TB tokens; the tokens' parts come from memory operands (loads are
 * not the bottleneck, the vector ALUs are). One row keeps the weights a
 * single sequential stream (the fastest DRAM pattern here, see below). */
FORCE_INLINE void tile_q4x(const pagoda_blk_q4_0 *w, const uint8_t *x, size_t xs, int TB, int64_t nb,
                           float *out, size_t os)
{
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0F);
    const __m256i idx_a = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256i idx_b = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    __m256 acc[8];
    for (int t = 0; t < TB; t++) acc[t] = _mm256_setzero_ps();
    int64_t ng = nb / 4;
    for (int64_t g = 0; g < ng; g++) {
        const pagoda_blk_q4_0 *wb = w + 4 * g;
        __m256 dw = q4_scales4(wb);
        _mm_prefetch((const char *)wb + PREFETCH_AHEAD, _MM_HINT_T0);
        for (int p = 0; p < 2; p++) {
            __m256 dwp = _mm256_permutevar_ps(dw, p ? idx_b : idx_a);
            __m256i v = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)wb[2 * p + 1].qs),
                                         _mm_loadu_si128((const __m128i *)wb[2 * p].qs));
            __m256i lo = _mm256_and_si256(v, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            for (int t = 0; t < TB; t++) {
                const pagoda_q4x_group *gx = (const pagoda_q4x_group *)(x + t * xs) + g;
                __m256i s16 = _mm256_add_epi16(
                    _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)gx->qs[2 * p])),
                    _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)gx->qs[2 * p + 1])));
                s16 = _mm256_sub_epi16(s16, _mm256_loadu_si256((const __m256i *)gx->off[p]));
                __m256 sc = _mm256_mul_ps(dwp, _mm256_loadu_ps(gx->dx[p]));
                acc[t] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(_mm256_madd_epi16(s16, ones)), acc[t]);
            }
        }
    }
    for (int t = 0; t < TB; t++) {
        float *o = (float *)((uint8_t *)out + t * os);
        o[0] = hsum_ps(acc[t]);
        if (nb % 4) o[0] += q4x_tail(w, (const pagoda_q4x_group *)(x + t * xs), 4 * ng, nb);
    }
}

/* Rows one at a time, tokens 8 at a time (then 4, 2, 1). */
static void gemm_q4_0_avx2(const void *wv, size_t ws, int64_t nr, const void *xv, size_t xs,
                           int64_t T, int64_t nb, float *out, size_t os)
{
    const uint8_t *w = wv, *x = xv;
    int64_t t = 0;
    while (t < T) {
        int64_t left = T - t;
        int tb = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
        const uint8_t *xt = x + t * xs;
        float *ot = (float *)((uint8_t *)out + t * os);
        for (int64_t r = 0; r < nr; r++) {
            const pagoda_blk_q4_0 *wr = (const pagoda_blk_q4_0 *)(w + r * ws);
            switch (tb) {
            case 8: tile_q4x(wr, xt, xs, 8, nb, ot + r, os); break;
            case 4: tile_q4x(wr, xt, xs, 4, nb, ot + r, os); break;
            case 2: tile_q4x(wr, xt, xs, 2, nb, ot + r, os); break;
            default: tile_q4x(wr, xt, xs, 1, nb, ot + r, os); break;
            }
        }
        t += tb;
    }
}

/* F16 rows converted with F16C, F32 tokens: RB x TB FMAs per 8 values. */
FORCE_INLINE void tile_f16(const uint8_t *w, size_t ws, int RB, const uint8_t *x, size_t xs,
                           int TB, int64_t k, float *out, size_t os)
{
    __m256 acc[4][4];
    for (int r = 0; r < RB; r++)
        for (int t = 0; t < TB; t++) acc[r][t] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        __m256 wv[4];
        for (int r = 0; r < RB; r++) wv[r] = load_f16((const uint16_t *)(w + r * ws) + i);
        for (int t = 0; t < TB; t++) {
            __m256 xv = _mm256_loadu_ps((const float *)(x + t * xs) + i);
            for (int r = 0; r < RB; r++) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    store_tile(acc, RB, TB, out, os);
    for (; i < k; i++)
        for (int t = 0; t < TB; t++) {
            float *o = (float *)((uint8_t *)out + t * os);
            const float *xr = (const float *)(x + t * xs);
            for (int r = 0; r < RB; r++) o[r] += f16(((const uint16_t *)(w + r * ws))[i]) * xr[i];
        }
}

/* Walk the rows x tokens block in tiles: 2 rows x 4 tokens where there
 * are 4 tokens to share (compute-bound), then the leftover 1..3 tokens one
 * row at a time. One row at a time is also the single-token case: a single
 * sequential stream through the weights reads DRAM at ~13 GB/s per core
 * here where two or four interleaved row streams get 7-9 (measured on the
 * dev VM); the dots (dot1) are the plain per-row loops above. */
#define GEMM_TILES(name, tile, dot1, xtype, nblk)                                               \
    static void name(const void *wv, size_t ws, int64_t nr, const void *xv, size_t xs,          \
                     int64_t T, int64_t n, float *out, size_t os)                                \
    {                                                                                            \
        const uint8_t *w = wv, *x = xv;                                                          \
        int64_t t = 0;                                                                           \
        for (; t + 4 <= T; t += 4) {                                                             \
            const uint8_t *xt = x + t * xs;                                                      \
            float *ot = (float *)((uint8_t *)out + t * os);                                      \
            int64_t r = 0;                                                                       \
            for (; r + 2 <= nr; r += 2) tile(w + r * ws, ws, 2, xt, xs, 4, n, ot + r, os);       \
            if (r < nr) tile(w + r * ws, ws, 1, xt, xs, 4, n, ot + r, os);                       \
        }                                                                                        \
        const uint8_t *xt = x + t * xs;                                                          \
        float *ot = (float *)((uint8_t *)out + t * os);                                          \
        switch (T - t) {                                                                         \
        case 1:                                                                                  \
            for (int64_t r = 0; r < nr; r++) ot[r] = dot1((const void *)(w + r * ws), (const xtype *)xt, nblk); \
            break;                                                                               \
        case 2:                                                                                  \
            for (int64_t r = 0; r < nr; r++) tile(w + r * ws, ws, 1, xt, xs, 2, n, ot + r, os);  \
            break;                                                                               \
        case 3:                                                                                  \
            for (int64_t r = 0; r < nr; r++) tile(w + r * ws, ws, 1, xt, xs, 3, n, ot + r, os);  \
            break;                                                                               \
        default:                                                                                 \
            break;                                                                               \
        }                                                                                        \
    }
GEMM_TILES(gemm_q8_0_avx2, tile_q8_0, dot_q8_0_avx2, pagoda_q8a_block, n)
/* F16 x F32 tiles of 4 rows x 2 tokens: per 8 values 4 conversions, 2
 * token loads, 8 FMAs. The 2 x 4 tiles of the int8 types (2 conversions, 4
 * F32 token loads per 8 FMAs) ran at ~48 GFLOPS per core at T = 16, these
 * at ~75 (one core, CPU time, K = 2048; T = 2: 26 -> 76, T = 4: 47 -> 78):
 * the F32 token loads, not the conversions, were the limit. */
#define F16_RB 4
#define F16_TB 2
static void gemm_f16_avx2(const void *wv, size_t ws, int64_t nr, const void *xv, size_t xs,
                          int64_t T, int64_t n, float *out, size_t os)
{
    const uint8_t *w = wv, *x = xv;
    int64_t t = 0;
    for (; t + F16_TB <= T; t += F16_TB) {
        const uint8_t *xt = x + t * xs;
        float *ot = (float *)((uint8_t *)out + t * os);
        int64_t r = 0;
        for (; r + F16_RB <= nr; r += F16_RB) tile_f16(w + r * ws, ws, F16_RB, xt, xs, F16_TB, n, ot + r, os);
        for (; r < nr; r++) tile_f16(w + r * ws, ws, 1, xt, xs, F16_TB, n, ot + r, os);
    }
    if (t < T) {
        /* One token left: T = 1 streams one row at a time (decode, see
         * GEMM_TILES); after pairs the rows are in cache: 4 rows share
         * the token's loads. */
        const uint8_t *xt = x + t * xs;
        float *ot = (float *)((uint8_t *)out + t * os);
        int64_t r = 0;
        if (T > 1)
            for (; r + F16_RB <= nr; r += F16_RB) tile_f16(w + r * ws, ws, F16_RB, xt, xs, 1, n, ot + r, os);
        for (; r < nr; r++) ot[r] = dot_f16_avx2((const uint16_t *)(w + r * ws), (const float *)xt, n);
    }
}

static void to_f16_avx2(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = pagoda_fp32_to_fp16(x[i]);
}

const pagoda_vecdot_table pagoda_vecdot_avx2 = {
    .gemm_q8_0 = gemm_q8_0_avx2,
    .gemm_q4_0 = gemm_q4_0_avx2,
    .prep_q4_0 = prep_q4_0_avx2,
    .gemm_q8_0_x8 = pagoda_cpu_gemm_q8_0_x8_avx2,
    .gemm_q4_0_x8 = pagoda_cpu_gemm_q4_0_x8_avx2,
    .gemm_f16_x8 = pagoda_cpu_gemm_f16_x8_avx2,
    .gemm_f16 = gemm_f16_avx2,
    .to_f16 = to_f16_avx2,
    .swiglu = pagoda_cpu_swiglu_avx2,
    .geglu = pagoda_cpu_geglu_avx2,
    .swiglu_oai = pagoda_cpu_swiglu_oai_avx2,
    .attn_f16_tile = pagoda_cpu_attn_f16_tile_avx2,
    .dequant = dequant_avx2,
    .quant_q8a = quant_q8a_avx2,
    .quant_q8k = quant_q8k_avx2,
    .dot_f32 = dot_f32_avx2,
    .dot_f16 = dot_f16_avx2,
    .dot_bf16 = dot_bf16_avx2,
    .dot_q8_0 = dot_q8_0_avx2,
    .dot_q4_0 = dot_q4_0_avx2,
    .dot_q4_1 = dot_q4_1_avx2,
    .dot_q6_k = dot_q6_k_avx2,
    .axpy_f32 = axpy_f32_avx2,
    .axpy_f16 = axpy_f16_avx2,
    .scores_f16 = scores_f16_avx2,
    .accum_f16 = accum_f16_avx2,
    .dot_q2_k = pagoda_cpu_dot_q2_k_avx2,
    .dot_q3_k = pagoda_cpu_dot_q3_k_avx2,
    .dot_q4_k = pagoda_cpu_dot_q4_k_avx2,
    .dot_q5_k = pagoda_cpu_dot_q5_k_avx2,
    .dot_iq4_xs = pagoda_cpu_dot_iq4_xs_avx2,
    .gemm_q2_k_x8 = pagoda_cpu_gemm_q2_k_x8_avx2,
    .gemm_q3_k_x8 = pagoda_cpu_gemm_q3_k_x8_avx2,
    .gemm_q4_k_x8 = pagoda_cpu_gemm_q4_k_x8_avx2,
    .gemm_q5_k_x8 = pagoda_cpu_gemm_q5_k_x8_avx2,
    .gemm_q6_k_x8 = pagoda_cpu_gemm_q6_k_x8_avx2,
    .gemm_iq4_xs_x8 = pagoda_cpu_gemm_iq4_xs_x8_avx2,
    .dot_q5_0 = pagoda_cpu_dot_q5_0_avx2,
    .dot_q5_1 = pagoda_cpu_dot_q5_1_avx2,
    .dot_iq4_nl = pagoda_cpu_dot_iq4_nl_avx2,
    .gemm_q5_0_x8 = pagoda_cpu_gemm_q5_0_x8_avx2,
    .gemm_q5_1_x8 = pagoda_cpu_gemm_q5_1_x8_avx2,
    .gemm_q4_1_x8 = pagoda_cpu_gemm_q4_1_x8_avx2,
    .gemm_iq4_nl_x8 = pagoda_cpu_gemm_iq4_nl_x8_avx2,
    .gemm_q5_0 = pagoda_cpu_gemm_q5_0_avx2,
    .gemm_q5_1 = pagoda_cpu_gemm_q5_1_avx2,
    .gemm_q4_1 = pagoda_cpu_gemm_q4_1_avx2,
    .gemm_iq4_nl = pagoda_cpu_gemm_iq4_nl_avx2,
    .quant_kv_q8_0 = pagoda_cpu_quant_kv_q8_0_avx2,
    .scores_q8_0 = pagoda_cpu_scores_q8_0_avx2,
    .accum_q8_0 = pagoda_cpu_accum_q8_0_avx2,
    .dot_mxfp4 = pagoda_cpu_dot_mxfp4_avx2,
    .gemm_mxfp4_x8 = pagoda_cpu_gemm_mxfp4_x8_avx2,
};

#else
/* Built without AVX2 flags (another architecture): the scalar table. */
const pagoda_vecdot_table pagoda_vecdot_avx2;
#endif
