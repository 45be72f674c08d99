/* test_quant.c: the scalar reference conversions in core/model/quant.c and
 * quant_k.c: exact encodings of known values, exhaustive half/bfloat16
 * round trips, crafted blocks with hand-computed quants, dequantization of
 * every quantized type bit for bit against the gguf package's
 * (tests/data/quant_vectors.json), and random round trips held to each
 * type's error bound; MXFP4's quantizer byte for byte against the
 * package's too. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "testutil.h"

static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

START_TEST(fp16_known)
{
    ck_assert_uint_eq(pagoda_fp32_to_fp16(1.0f), 0x3C00);
    ck_assert_uint_eq(pagoda_fp32_to_fp16(-2.0f), 0xC000);
    ck_assert_uint_eq(pagoda_fp32_to_fp16(0.5f), 0x3800);
    ck_assert_uint_eq(pagoda_fp32_to_fp16(0.0f), 0x0000);
    ck_assert_uint_eq(pagoda_fp32_to_fp16(-0.0f), 0x8000);
    ck_assert_uint_eq(pagoda_fp32_to_fp16(65504.0f), 0x7BFF);
    ck_assert_uint_eq(pagoda_fp32_to_fp16(65519.0f), 0x7BFF);   /* below the halfway point */
    ck_assert_uint_eq(pagoda_fp32_to_fp16(65520.0f), 0x7C00);   /* halfway: even is inf */
    ck_assert_uint_eq(pagoda_fp32_to_fp16(1e10f), 0x7C00);
    ck_assert_uint_eq(pagoda_fp32_to_fp16(-INFINITY), 0xFC00);
    ck_assert_uint_eq(pagoda_fp32_to_fp16(0.333251953125f), 0x3555);
    /* Subnormals: 2^-24 is the smallest; 2^-25 ties to even (0); 3*2^-25 ties to 2. */
    ck_assert_uint_eq(pagoda_fp32_to_fp16(ldexpf(1, -24)), 0x0001);
    ck_assert_uint_eq(pagoda_fp32_to_fp16(ldexpf(1, -25)), 0x0000);
    ck_assert_uint_eq(pagoda_fp32_to_fp16(ldexpf(3, -25)), 0x0002);
    ck_assert_uint_eq(pagoda_fp32_to_fp16(ldexpf(1023, -24)), 0x03FF);
    ck_assert_uint_eq(pagoda_fp32_to_fp16(ldexpf(1, -14)), 0x0400);
    ck_assert_uint_eq(pagoda_fp32_to_fp16(ldexpf(1, -30)), 0x0000);
    ck_assert_uint_eq(pagoda_fp32_to_fp16(-ldexpf(1, -24)), 0x8001);
    /* Normal ties to even: 1 + 2^-11 -> 1.0; 1 + 3*2^-11 -> 1 + 2^-9 (0x3C02). */
    ck_assert_uint_eq(pagoda_fp32_to_fp16(1.0f + ldexpf(1, -11)), 0x3C00);
    ck_assert_uint_eq(pagoda_fp32_to_fp16(1.0f + ldexpf(3, -11)), 0x3C02);
    ck_assert_uint_eq(pagoda_fp32_to_fp16(1.0f + ldexpf(1, -11) + ldexpf(1, -20)), 0x3C01);
    uint16_t nan = pagoda_fp32_to_fp16(NAN);
    ck_assert((nan & 0x7C00) == 0x7C00 && (nan & 0x3FF) != 0);
    ck_assert(pagoda_fp16_to_fp32(0x3C00) == 1.0f);
    ck_assert(pagoda_fp16_to_fp32(0x7BFF) == 65504.0f);
    ck_assert(pagoda_fp16_to_fp32(0x0001) == ldexpf(1, -24));
    ck_assert(pagoda_fp16_to_fp32(0x03FF) == ldexpf(1023, -24));
    ck_assert(isinf(pagoda_fp16_to_fp32(0x7C00)));
    ck_assert(isnan(pagoda_fp16_to_fp32(0x7E00)));
    ck_assert(signbit(pagoda_fp16_to_fp32(0x8000)));
}
END_TEST

START_TEST(fp16_exhaustive)
{
    /* Every half value survives f16 -> f32 -> f16 unchanged (NaNs stay NaN). */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = pagoda_fp16_to_fp32((uint16_t)h);
        uint16_t back = pagoda_fp32_to_fp16(f);
        if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) {
            ck_assert(isnan(f));
            ck_assert((back & 0x7C00) == 0x7C00 && (back & 0x3FF));
        } else {
            ck_assert_msg(back == h, "0x%04x -> %g -> 0x%04x", h, f, back);
        }
    }
    /* Against the compiler's own conversion where it has _Float16. */
#ifdef __FLT16_MAX__
    tu_rng rng;
    tu_rng_seed(&rng, 1);
    for (int i = 0; i < 500000; i++) {
        uint32_t u = (uint32_t)tu_rng_u64(&rng);
        /* Bias towards the half range: exponents 100..150. */
        u = (u & 0x807FFFFFu) | ((100u + (u >> 23) % 51u) << 23);
        float f = u2f(u);
        _Float16 ref = (_Float16)f;
        uint16_t rb;
        memcpy(&rb, &ref, 2);
        ck_assert_msg(pagoda_fp32_to_fp16(f) == rb, "%a: 0x%04x vs 0x%04x", f,
                      pagoda_fp32_to_fp16(f), rb);
    }
#endif
}
END_TEST

START_TEST(bf16)
{
    ck_assert_uint_eq(pagoda_fp32_to_bf16(1.0f), 0x3F80);
    ck_assert_uint_eq(pagoda_fp32_to_bf16(-2.0f), 0xC000);
    ck_assert_uint_eq(pagoda_fp32_to_bf16(1.0f + ldexpf(1, -8)), 0x3F80);  /* tie to even */
    ck_assert_uint_eq(pagoda_fp32_to_bf16(1.0f + ldexpf(3, -8)), 0x3F82);  /* tie to even, up */
    ck_assert_uint_eq(pagoda_fp32_to_bf16(1.0f + ldexpf(1, -8) + ldexpf(1, -20)), 0x3F81);
    ck_assert_uint_eq(pagoda_fp32_to_bf16(INFINITY), 0x7F80);
    ck_assert(isnan(pagoda_bf16_to_fp32(pagoda_fp32_to_bf16(NAN))));
    /* A NaN whose payload lies only in the low bits must not become inf. */
    ck_assert(isnan(pagoda_bf16_to_fp32(pagoda_fp32_to_bf16(u2f(0x7F800001u)))));
    ck_assert(pagoda_bf16_to_fp32(0x3F80) == 1.0f);
    for (uint32_t h = 0; h < 65536; h++) {
        float f = pagoda_bf16_to_fp32((uint16_t)h);
        if (isnan(f)) continue;
        ck_assert_uint_eq(pagoda_fp32_to_bf16(f), h);
    }
}
END_TEST

START_TEST(q8_0_crafted)
{
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16);
    pagoda_block_q8_0 b;
    ck_assert_int_eq(pagoda_quantize_row(PAGODA_DTYPE_Q8_0, x, &b, 32), 0);
    /* amax 16: d = 16/127, q = round(x * 127/16). */
    ck_assert_uint_eq(b.d, pagoda_fp32_to_fp16(16.0f / 127.0f));
    ck_assert_int_eq(b.qs[0], -127);
    ck_assert_int_eq(b.qs[16], 0);
    ck_assert_int_eq(b.qs[17], 8);    /* 7.9375 */
    ck_assert_int_eq(b.qs[31], 119);  /* 119.0625 */
    ck_assert_int_eq(b.qs[8], -64);   /* -63.5: roundf goes away from zero */
    float y[32];
    ck_assert_int_eq(pagoda_dequantize_row(PAGODA_DTYPE_Q8_0, &b, y, 32), 0);
    ck_assert(y[0] == -127 * pagoda_fp16_to_fp32(b.d));
    /* All zeros: d = 0 and every quant 0. */
    memset(x, 0, sizeof x);
    ck_assert_int_eq(pagoda_quantize_row(PAGODA_DTYPE_Q8_0, x, &b, 32), 0);
    ck_assert_uint_eq(b.d, 0);
    for (int j = 0; j < 32; j++) ck_assert_int_eq(b.qs[j], 0);
}
END_TEST

START_TEST(q4_crafted)
{
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16);
    pagoda_block_q4_0 b;
    ck_assert_int_eq(pagoda_quantize_row(PAGODA_DTYPE_Q4_0, x, &b, 32), 0);
    /* Largest magnitude is -16: d = -16/-8 = 2; q = x/2 + 8, clamped to 15.
     * Byte j: element j low, element j+16 high. */
    ck_assert_uint_eq(b.d, 0x4000);
    ck_assert_uint_eq(b.qs[0], 0x80);             /* x=-16 -> 0, x=0 -> 8 */
    ck_assert_uint_eq(b.qs[1], (9 << 4) | 1);     /* x=-15 -> 1, x=1 -> 9 */
    ck_assert_uint_eq(b.qs[15], (15 << 4) | 8);   /* x=-1 -> 8 (7.5+.5 trunc), x=15 -> 16 -> 15 */
    float y[32];
    ck_assert_int_eq(pagoda_dequantize_row(PAGODA_DTYPE_Q4_0, &b, y, 32), 0);
    ck_assert(y[0] == -16.0f && y[16] == 0.0f && y[31] == 14.0f);

    for (int j = 0; j < 32; j++) x[j] = (float)j;
    pagoda_block_q4_1 c;
    ck_assert_int_eq(pagoda_quantize_row(PAGODA_DTYPE_Q4_1, x, &c, 32), 0);
    ck_assert_uint_eq(c.m, 0);
    ck_assert_uint_eq(c.d, pagoda_fp32_to_fp16(31.0f / 15.0f));
    ck_assert_uint_eq(c.qs[0] & 0xF, 0);
    ck_assert_uint_eq(c.qs[15] >> 4, 15);
    ck_assert_uint_eq(c.qs[1] & 0xF, 0);          /* 1*15/31 + .5 = 0.98 -> 0 */
    ck_assert_uint_eq(c.qs[2] & 0xF, 1);          /* 2*15/31 + .5 = 1.47 -> 1 */
    ck_assert_int_eq(pagoda_dequantize_row(PAGODA_DTYPE_Q4_1, &c, y, 32), 0);
    ck_assert(fabsf(y[31] - 31.0f) < 0.05f);
}
END_TEST

static void roundtrip(int dtype, uint64_t seed, float std, int64_t n)
{
    tu_rng rng;
    tu_rng_seed(&rng, seed);
    float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
    void *q = malloc(pagoda_dtype_row_bytes(dtype, n));
    tu_fill_normal(&rng, x, (size_t)n, std);
    x[3] = 0.0f;
    ck_assert_int_eq(pagoda_quantize_row(dtype, x, q, n), 0);
    ck_assert_int_eq(pagoda_dequantize_row(dtype, q, y, n), 0);
    for (int64_t b = 0; b < n / 32; b++) {
        float amax = 0, mn = INFINITY, mx = -INFINITY;
        for (int j = 0; j < 32; j++) {
            float v = x[b * 32 + j];
            amax = fmaxf(amax, fabsf(v));
            mn = fminf(mn, v);
            mx = fmaxf(mx, v);
        }
        for (int j = 0; j < 32; j++) {
            float v = x[b * 32 + j], e = fabsf(y[b * 32 + j] - v), bound;
            switch (dtype) {
            case PAGODA_DTYPE_F16: bound = fabsf(v) * 0x1p-11f + 0x1p-25f; break;
            case PAGODA_DTYPE_BF16: bound = fabsf(v) * 0x1p-8f; break;
            case PAGODA_DTYPE_Q8_0: bound = amax / 127 * (0.5f + 127 * 0x1p-11f) + 1e-7f; break;
            case PAGODA_DTYPE_Q4_0: bound = amax / 8 * (1.0f + 8 * 0x1p-11f) + 1e-7f; break;
            case PAGODA_DTYPE_Q4_1: {
                float d = (mx - mn) / 15;
                bound = d * 0.5f + (fabsf(mn) + 15 * d) * 0x1p-10f + 1e-7f;
                break;
            }
            default: bound = 0; break;
            }
            ck_assert_msg(e <= bound, "%s elem %lld: %g -> %g (err %g > %g)", pagoda_dtype_name(dtype),
                          (long long)(b * 32 + j), v, y[b * 32 + j], e, bound);
        }
    }
    free(x);
    free(y);
    free(q);
}

START_TEST(roundtrips)
{
    int types[] = {PAGODA_DTYPE_F32, PAGODA_DTYPE_F16, PAGODA_DTYPE_BF16, PAGODA_DTYPE_Q8_0,
                   PAGODA_DTYPE_Q4_0, PAGODA_DTYPE_Q4_1};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        roundtrip(types[i], 11 + i, 0.02f, 4096);
        roundtrip(types[i], 99 + i, 3.0f, 4096);
    }
}
END_TEST

/* pagoda's own quantizers for the new types (round to nearest with a small
 * scale/min search, not llama.cpp's): relative RMS error on Gaussian data
 * at three magnitudes held to a bound per type, measured with margin
 * (worst of 90 runs of 4096 values: Q5_0 0.044, Q5_1 0.039, IQ4_NL 0.076,
 * Q2_K 0.277, Q3_K 0.149, Q4_K 0.075, Q5_K 0.037, IQ4_XS 0.077; docs/gguf.md).
 * Quantizing the dequantized values again gives the same values (Q5_K:
 * nearly: a sub-block spanning fewer steps than the grid may refit to
 * another grid, a change well under its own error). */
static const struct { int dtype; float bound, second; } k_bounds[] = {
    {PAGODA_DTYPE_Q5_0, 0.05f, 0},    {PAGODA_DTYPE_Q5_1, 0.045f, 0}, {PAGODA_DTYPE_IQ4_NL, 0.085f, 0},
    {PAGODA_DTYPE_Q2_K, 0.30f, 0},    {PAGODA_DTYPE_Q3_K, 0.17f, 0},  {PAGODA_DTYPE_Q4_K, 0.085f, 0},
    {PAGODA_DTYPE_Q5_K, 0.045f, 0.01f}, {PAGODA_DTYPE_IQ4_XS, 0.085f, 0},
};

static double rel_rms(const float *a, const float *b, int64_t n)
{
    double e = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return r > 0 ? sqrt(e / r) : sqrt(e);
}

START_TEST(roundtrips_new_types)
{
    const int64_t n = 256 * 16;
    float *x = malloc(n * 4), *y = malloc(n * 4), *z = malloc(n * 4);
    uint8_t *q = malloc(n * 4), *q2 = malloc(n * 4);
    for (size_t t = 0; t < sizeof k_bounds / sizeof k_bounds[0]; t++) {
        const int dt = k_bounds[t].dtype;
        const char *name = pagoda_dtype_name(dt);
        for (int run = 0; run < 6; run++) {
            tu_rng rng;
            tu_rng_seed(&rng, 500 + 10 * t + run);
            tu_fill_normal(&rng, x, (size_t)n, run % 3 == 0 ? 0.02f : run % 3 == 1 ? 1.0f : 30.0f);
            ck_assert_int_eq(pagoda_quantize_row(dt, x, q, n), 0);
            ck_assert_int_eq(pagoda_dequantize_row(dt, q, y, n), 0);
            double e = rel_rms(y, x, n);
            ck_assert_msg(e < k_bounds[t].bound, "%s run %d: relative RMS %.4f >= %.3f", name, run, e,
                          k_bounds[t].bound);
            ck_assert_int_eq(pagoda_quantize_row(dt, y, q2, n), 0);
            ck_assert_int_eq(pagoda_dequantize_row(dt, q2, z, n), 0);
            double e2 = rel_rms(z, y, n);
            ck_assert_msg(e2 <= k_bounds[t].second, "%s run %d: requantized values moved by %.2e", name,
                          run, e2);
        }
    }
    free(x);
    free(y);
    free(z);
    free(q);
    free(q2);
}
END_TEST

/* Degenerate blocks: zeros stay zeros, constants and a lone outlier stay
 * finite and close, tiny values (scales below f16's normal range) give no
 * NaN, and a row handed over unaligned quantizes the same. */
START_TEST(edge_blocks_new_types)
{
    float x[512], y[512];
    uint8_t q[1024], q2[1025];
    for (size_t t = 0; t < sizeof k_bounds / sizeof k_bounds[0]; t++) {
        const int dt = k_bounds[t].dtype;
        const char *name = pagoda_dtype_name(dt);
        const size_t rb = pagoda_dtype_row_bytes(dt, 512);
        for (int c = 0; c < 5; c++) {
            for (int i = 0; i < 512; i++) {
                switch (c) {
                case 0: x[i] = 0; break;
                case 1: x[i] = i < 256 ? 0.5f : -0.25f; break;
                case 2: x[i] = i == 77 ? 8.0f : (i % 7 - 3) * 0.01f; break;
                case 3: x[i] = (i % 5 - 2) * 1e-9f; break;
                default: x[i] = (float)((i * 37) % 101 - 50); break;
                }
            }
            ck_assert_int_eq(pagoda_quantize_row(dt, x, q, 512), 0);
            ck_assert_int_eq(pagoda_quantize_row(dt, x, q2 + 1, 512), 0);
            ck_assert_msg(memcmp(q, q2 + 1, rb) == 0, "%s case %d: unaligned output differs", name, c);
            ck_assert_int_eq(pagoda_dequantize_row(dt, q, y, 512), 0);
            for (int i = 0; i < 512; i++) {
                ck_assert_msg(isfinite(y[i]), "%s case %d elem %d: %g", name, c, i, y[i]);
                if (c == 0) ck_assert_msg(y[i] == 0, "%s: zero became %g", name, y[i]);
                if (c == 1) ck_assert_msg(fabsf(y[i] - x[i]) <= 0.02f * fabsf(x[i]), "%s constant %g -> %g",
                                          name, x[i], y[i]);
                if (c == 3) ck_assert_msg(fabsf(y[i]) <= 3e-9f, "%s tiny %g -> %g", name, x[i], y[i]);
            }
            if (c == 2) /* the outlier itself survives within a few percent */
                ck_assert_msg(fabsf(y[77] - 8.0f) < 0.4f, "%s outlier -> %g", name, y[77]);
            if (c == 4) {
                double e = rel_rms(y, x, 512);
                ck_assert_msg(e < k_bounds[t].bound * 1.5, "%s ramp: relative RMS %.4f", name, e);
            }
        }
    }
}
END_TEST

/* Pack 6-bit quants q[256] and scales into ggml's Q6_K layout, written from
 * the layout's description (lane l of each 128-half holds elements l,
 * l+32, l+64, l+96; ql nibbles low/high for the first/second 64, qh bit
 * pairs by quarter; one scale per 16 elements). */
static void pack_q6_K(pagoda_block_q6_K *b, const int *q, const int8_t *sc, uint16_t d)
{
    memset(b, 0, sizeof *b);
    for (int i = 0; i < 256; i++) {
        int half = i / 128, r = i % 128, l = r % 32, quarter = r / 32;
        int lo = q[i] & 0xF, hi = q[i] >> 4;
        int qli = half * 64 + l + ((quarter & 1) ? 32 : 0);
        b->ql[qli] |= (uint8_t)(quarter >= 2 ? lo << 4 : lo);
        b->qh[half * 32 + l] |= (uint8_t)(hi << (2 * quarter));
    }
    memcpy(b->scales, sc, 16);
    b->d = d;
}

START_TEST(q6_K_dequant)
{
    int q[256];
    int8_t sc[16];
    for (int i = 0; i < 256; i++) q[i] = (i * 7 + 3) % 64;
    for (int k = 0; k < 16; k++) sc[k] = (int8_t)(k * 9 - 70);
    pagoda_block_q6_K b[2];
    pack_q6_K(&b[0], q, sc, 0x3800);  /* d = 0.5 */
    pack_q6_K(&b[1], q, sc, 0x4000);  /* d = 2 */
    float y[512];
    ck_assert_int_eq(pagoda_dequantize_row(PAGODA_DTYPE_Q6_K, b, y, 512), 0);
    for (int i = 0; i < 512; i++) {
        float d = i < 256 ? 0.5f : 2.0f;
        float want = d * sc[(i % 256) / 16] * (q[i % 256] - 32);
        ck_assert_msg(y[i] == want, "elem %d: %g != %g", i, y[i], want);
    }
}
END_TEST

static uint8_t *unhex(const char *s, size_t *len)
{
    size_t n = strlen(s) / 2;
    /* One spare byte in front so the row can be handed over unaligned. */
    uint8_t *b = malloc(n + 1);
    ck_assert_ptr_nonnull(b);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        ck_assert_int_eq(sscanf(s + 2 * i, "%2x", &v), 1);
        b[i + 1] = (uint8_t)v;
    }
    *len = n;
    return b;
}

/* Every quantized type's dequantization against the gguf package's numpy
 * reference (tests/reference/quant_vectors.py), compared as bits: random
 * block bytes exercise every packed field, and a zero and a subnormal f16
 * scale are in there too. The rows are read from an odd address, as they
 * may lie inside an mmap. */
START_TEST(dequant_vectors)
{
    json_error_t je;
    json_t *root = json_load_file(tu_src("tests/data/quant_vectors.json"), 0, &je);
    ck_assert_msg(root, "quant_vectors.json: %s", je.text);
    json_t *types = json_object_get(root, "types"), *t;
    size_t i;
    int seen = 0;
    ck_assert(json_array_size(types) >= 12);
    json_array_foreach(types, i, t) {
        const char *name = json_string_value(json_object_get(t, "name"));
        int dtype = (int)json_integer_value(json_object_get(t, "dtype"));
        int64_t n = json_integer_value(json_object_get(t, "n"));
        ck_assert_str_eq(pagoda_dtype_name(dtype), name);
        size_t nb, ne;
        uint8_t *blocks = unhex(json_string_value(json_object_get(t, "blocks")), &nb);
        uint8_t *expect = unhex(json_string_value(json_object_get(t, "expect")), &ne);
        ck_assert_uint_eq(nb, pagoda_dtype_row_bytes(dtype, n));
        ck_assert_uint_eq(ne, (size_t)n * 4);
        float *y = malloc((size_t)n * 4);
        ck_assert_int_eq(pagoda_dequantize_row(dtype, blocks + 1, y, n), 0);
        for (int64_t k = 0; k < n; k++) {
            float want;
            memcpy(&want, expect + 1 + 4 * k, 4);
            ck_assert_msg(memcmp(&y[k], &want, 4) == 0, "%s elem %lld: %a != %a", name, (long long)k,
                          y[k], want);
        }
        seen |= dtype == PAGODA_DTYPE_Q2_K || dtype == PAGODA_DTYPE_IQ4_XS ? 1 : 0;
        seen |= dtype == PAGODA_DTYPE_MXFP4 ? 2 : 0;
        free(y);
        free(blocks);
        free(expect);
    }
    ck_assert_int_eq(seen, 3);
    json_decref(root);
}
END_TEST

/* MXFP4's quantizer against the gguf package's quantize_blocks (the
 * "quantize" vectors: Gaussian blocks from 1e-30 to 1e30, constants, an
 * outlier, zeros, exact ties between grid points, values past the clip),
 * byte for byte, from an unaligned input and into an unaligned output. */
START_TEST(mxfp4_quant_vectors)
{
    json_error_t je;
    json_t *root = json_load_file(tu_src("tests/data/quant_vectors.json"), 0, &je);
    ck_assert_msg(root, "quant_vectors.json: %s", je.text);
    json_t *qv = json_object_get(root, "quantize"), *t;
    size_t i;
    ck_assert(json_array_size(qv) >= 1);
    json_array_foreach(qv, i, t) {
        int dtype = (int)json_integer_value(json_object_get(t, "dtype"));
        int64_t n = json_integer_value(json_object_get(t, "n"));
        ck_assert_int_eq(dtype, PAGODA_DTYPE_MXFP4);
        size_t nx, ne;
        uint8_t *x = unhex(json_string_value(json_object_get(t, "x")), &nx);
        uint8_t *expect = unhex(json_string_value(json_object_get(t, "expect")), &ne);
        ck_assert_uint_eq(nx, (size_t)n * 4);
        ck_assert_uint_eq(ne, pagoda_dtype_row_bytes(dtype, n));
        float *xf = malloc(nx);
        uint8_t *q = malloc(ne + 1);
        memcpy(xf, x + 1, nx);
        ck_assert_int_eq(pagoda_quantize_row(dtype, xf, q + 1, n), 0);
        for (size_t k = 0; k < ne; k++)
            ck_assert_msg(q[1 + k] == expect[1 + k], "MXFP4 block %zu byte %zu: %02x != %02x", k / 17,
                          k % 17, q[1 + k], expect[1 + k]);
        free(xf);
        free(q);
        free(x);
        free(expect);
    }
    json_decref(root);
}
END_TEST

/* MXFP4 by hand: the value table, the E8M0 scales at their edges, a
 * block's packing (element j low nibble, 16 + j high), the error bound on
 * Gaussian data (worst of 90 runs of 4096 values through the gguf
 * package: 0.120), and the refusal of a row that is not whole blocks. */
START_TEST(mxfp4_crafted)
{
    ck_assert(pagoda_e8m0_to_fp32_half(0) == ldexpf(1, -128));
    ck_assert(pagoda_e8m0_to_fp32_half(1) == ldexpf(1, -127));
    ck_assert(pagoda_e8m0_to_fp32_half(2) == ldexpf(1, -126));
    ck_assert(pagoda_e8m0_to_fp32_half(127) == 0.5f);
    ck_assert(pagoda_e8m0_to_fp32_half(128) == 1.0f);
    ck_assert(pagoda_e8m0_to_fp32_half(255) == ldexpf(1, 127));
    static const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int k = 0; k < 16; k++)
        ck_assert(pagoda_mxfp4_table[k] == (k < 8 ? 2 : -2) * e2m1[k % 8]);
    /* e = 129: d = 2, so code k is 2 * table[k] = 4 * E2M1 value. */
    uint8_t b[17] = {129};
    for (int j = 0; j < 16; j++) b[1 + j] = (uint8_t)(j | (15 - j) << 4);
    float y[32];
    ck_assert_int_eq(pagoda_dequantize_row(PAGODA_DTYPE_MXFP4, b, y, 32), 0);
    for (int j = 0; j < 16; j++) {
        ck_assert(y[j] == 2.0f * pagoda_mxfp4_table[j]);
        ck_assert(y[16 + j] == 2.0f * pagoda_mxfp4_table[15 - j]);
    }
    /* Quantizing: amax 6 gives e = floor(log2 6) - 2 + 127 = 127 (scale
     * 1/2 x 2 = 1): the grid values themselves come back exactly. */
    float x[32], z[32];
    uint8_t q[17];
    for (int j = 0; j < 32; j++) x[j] = (j % 2 ? -1 : 1) * e2m1[j % 8];
    x[3] = 6.0f;
    ck_assert_int_eq(pagoda_quantize_row(PAGODA_DTYPE_MXFP4, x, q, 32), 0);
    ck_assert_uint_eq(q[0], 127);
    ck_assert_int_eq(pagoda_dequantize_row(PAGODA_DTYPE_MXFP4, q, z, 32), 0);
    for (int j = 0; j < 32; j++) ck_assert_msg(z[j] == x[j], "elem %d: %g -> %g", j, x[j], z[j]);
    const int64_t n = 4096;
    float *g = malloc(n * 4), *h = malloc(n * 4);
    uint8_t *gq = malloc((size_t)n);
    for (int run = 0; run < 6; run++) {
        tu_rng rng;
        tu_rng_seed(&rng, 900 + run);
        tu_fill_normal(&rng, g, (size_t)n, run % 3 == 0 ? 0.02f : run % 3 == 1 ? 1.0f : 30.0f);
        ck_assert_int_eq(pagoda_quantize_row(PAGODA_DTYPE_MXFP4, g, gq, n), 0);
        ck_assert_int_eq(pagoda_dequantize_row(PAGODA_DTYPE_MXFP4, gq, h, n), 0);
        double e = rel_rms(h, g, n);
        ck_assert_msg(e < 0.13, "MXFP4 run %d: relative RMS %.4f", run, e);
    }
    free(g);
    free(h);
    free(gq);
    ck_assert_uint_eq(pagoda_dtype_row_bytes(PAGODA_DTYPE_MXFP4, 2880), 90 * 17);
    ck_assert_uint_eq(pagoda_dtype_row_bytes(PAGODA_DTYPE_MXFP4, 40), 0);
    ck_assert_int_eq(pagoda_quantize_row(PAGODA_DTYPE_MXFP4, x, q, 33), PAGODA_ERR_INVALID);
    ck_assert_int_eq(pagoda_dequantize_row(PAGODA_DTYPE_MXFP4, q, x, 48), PAGODA_ERR_INVALID);
    ck_assert_str_eq(pagoda_dtype_name(PAGODA_DTYPE_MXFP4), "MXFP4");
}
END_TEST

/* The shared unpacking helpers on hand-built fields. */
START_TEST(unpack_helpers)
{
    /* Q4_K/Q5_K: scales 0..3 = 1,2,3,63, mins 0..3 = 4,5,6,0; sub-block 4:
     * scale 0x2A = 42 (low nibble 0xA in byte 8, top bits 2 in byte 0),
     * min 0x35 = 53 (high nibble 5 in byte 8, top bits 3 in byte 4). */
    uint8_t q[12] = {1 | 2 << 6, 2, 3, 63, 4 | 3 << 6, 5, 6, 0, 0x5A, 0, 0, 0xFF};
    uint8_t sc, m;
    pagoda_get_scale_min_k4(0, q, &sc, &m);
    ck_assert(sc == 1 && m == 4);
    pagoda_get_scale_min_k4(3, q, &sc, &m);
    ck_assert(sc == 63 && m == 0);
    pagoda_get_scale_min_k4(4, q, &sc, &m);
    ck_assert_msg(sc == 42 && m == 53, "%d %d", sc, m);
    pagoda_get_scale_min_k4(7, q, &sc, &m);
    ck_assert_msg(sc == 15 && m == 15, "%d %d", sc, m);
    /* Q3_K: scale 0 = 0 - 32, scale 9 = high nibble of byte 1 (7) with top
     * bits from byte 9 bits 4..5 (2): 0x27 - 32 = 7. */
    uint8_t p3[12] = {0};
    p3[1] = 0x70;
    p3[9] = 2 << 4;
    int8_t s3[16];
    pagoda_q3_K_scales(p3, s3);
    ck_assert_int_eq(s3[0], -32);
    ck_assert_int_eq(s3[9], 7);
    ck_assert_int_eq(s3[1], -32);
    /* IQ4_XS: sub-block 5 = high nibble of scales_l[2] | bits 10..11 of scales_h. */
    pagoda_block_iq4_xs b;
    memset(&b, 0, sizeof b);
    b.scales_l[2] = 0x90;
    b.scales_h = 3 << 10;
    ck_assert_int_eq(pagoda_iq4_xs_scale(&b, 5), 0x39 - 32);
    ck_assert_int_eq(pagoda_iq4_xs_scale(&b, 4), -32);
    ck_assert_int_eq(pagoda_iq4nl_table[0], -127);
    ck_assert_int_eq(pagoda_iq4nl_table[15], 113);
}
END_TEST

START_TEST(bad_arguments)
{
    float x[64] = {0};
    uint8_t out[256];
    ck_assert_int_eq(pagoda_quantize_row(PAGODA_DTYPE_Q6_K, x, out, 256), PAGODA_ERR_UNSUPPORTED);
    ck_assert_int_eq(pagoda_quantize_row(PAGODA_DTYPE_Q8_0, x, out, 33), PAGODA_ERR_INVALID);
    ck_assert_int_eq(pagoda_quantize_row(5, x, out, 32), PAGODA_ERR_UNSUPPORTED); /* Q4_2: gone */
    ck_assert_int_eq(pagoda_dequantize_row(PAGODA_DTYPE_Q4_0, out, x, 31), PAGODA_ERR_INVALID);
    ck_assert_int_eq(pagoda_dequantize_row(PAGODA_DTYPE_Q6_K, out, x, 128), PAGODA_ERR_INVALID);
    ck_assert_int_eq(pagoda_dequantize_row(99, out, x, 32), PAGODA_ERR_UNSUPPORTED);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, fp16_known);
    tcase_add_test(tc, fp16_exhaustive);
    tcase_add_test(tc, bf16);
    tcase_add_test(tc, q8_0_crafted);
    tcase_add_test(tc, q4_crafted);
    tcase_add_test(tc, roundtrips);
    tcase_add_test(tc, q6_K_dequant);
    tcase_add_test(tc, dequant_vectors);
    tcase_add_test(tc, mxfp4_quant_vectors);
    tcase_add_test(tc, mxfp4_crafted);
    tcase_add_test(tc, unpack_helpers);
    tcase_add_test(tc, roundtrips_new_types);
    tcase_add_test(tc, edge_blocks_new_types);
    tcase_add_test(tc, bad_arguments);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
