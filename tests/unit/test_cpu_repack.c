/* test_cpu_repack.c: the row-interleaved int8 layout and its GEMMs
 * (kernels/repack/, kernels/amx/): the plain-C AMX tile emulation against
 * naive products (int8 both signednesses, bf16) and its refusals; Q8_0 /
 * Q4_0 / Q4_1 repacked and multiplied by the plain-C, AVX-512 VNNI (where the
 * host has it), emulated-AMX and real-AMX (where granted) GEMMs against a
 * double-precision reference of the same quantized values, over shapes
 * that are no multiple of the tiles (rows, K, T = 16..100); the matmul
 * hook (cache per weight, regions, invalidation, bias) against the
 * scalar kernels; the AMX checks falling back with their reason. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amx/amx.h"
#include "amx/tile.h"
#include "cpu_features.h"
#include "cpu_paths.h"
#include "kernels.h"
#include "quant.h"
#include "repack/repack.h"
#include "repack/repack_matmul.h"
#include "testutil.h"
#include "threadpool.h"
#include "vecdot.h"

static void *xmalloc(size_t n)
{
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* ---------------------------------------------------------- tile emulation */

static pagoda_tile_config cfg3(int m, int kb, int n)
{
    /* C: m x 4n bytes, A: m x kb bytes, B: kb/4 x 4n bytes */
    pagoda_tile_config c;
    memset(&c, 0, sizeof c);
    c.palette_id = 1;
    c.rows[0] = (uint8_t)m; c.colsb[0] = (uint16_t)(4 * n);
    c.rows[1] = (uint8_t)m; c.colsb[1] = (uint16_t)kb;
    c.rows[2] = (uint8_t)(kb / 4); c.colsb[2] = (uint16_t)(4 * n);
    return c;
}

START_TEST(test_tile_emu_int8)
{
    tu_rng r;
    tu_rng_seed(&r, 11);
    static const int shapes[][3] = {{16, 64, 16}, {5, 12, 3}, {1, 4, 1}, {16, 32, 16}, {9, 60, 7}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int us = 0; us < 3; us++) {  /* ss, us, su */
            int M = shapes[s][0], KB = shapes[s][1], N = shapes[s][2];
            uint8_t a[16][64], b[16][64];
            int32_t c0[16][16], c[16][16];
            for (int i = 0; i < 16; i++)
                for (int j = 0; j < 64; j++) {
                    a[i][j] = (uint8_t)tu_rng_u64(&r);
                    b[i][j] = (uint8_t)tu_rng_u64(&r);
                }
            for (int i = 0; i < 16; i++)
                for (int j = 0; j < 16; j++) c0[i][j] = (int32_t)(tu_rng_u64(&r) % 2000001) - 1000000;
            pagoda_tile_config cf = cfg3(M, KB, N);
            pagoda_tile_emu_loadconfig(&cf);
            pagoda_tile_emu_load(0, c0, sizeof c0[0]);
            pagoda_tile_emu_load(1, a, sizeof a[0]);
            pagoda_tile_emu_load(2, b, sizeof b[0]);
            if (us == 1) pagoda_tile_emu_dpbusd(0, 1, 2);
            else if (us == 2) pagoda_tile_emu_dpbsud(0, 1, 2);
            else pagoda_tile_emu_dpbssd(0, 1, 2);
            memset(c, 0x5a, sizeof c);
            pagoda_tile_emu_store(0, c, sizeof c[0]);
            ck_assert_int_eq(pagoda_tile_emu_faults(), 0);
            for (int m = 0; m < 16; m++)
                for (int n = 0; n < 16; n++) {
                    if (m >= M || n >= N) {  /* outside rows x colsb: not written */
                        ck_assert_int_eq(c[m][n], 0x5a5a5a5a);
                        continue;
                    }
                    int64_t want = c0[m][n];
                    for (int k = 0; k < KB; k++) {
                        int av = us == 1 ? a[m][k] : (int8_t)a[m][k];
                        int bv = us == 2 ? b[k / 4][4 * n + k % 4] : (int8_t)b[k / 4][4 * n + k % 4];
                        want += av * bv;
                    }
                    ck_assert_int_eq(c[m][n], (int32_t)want);
                }
            pagoda_tile_emu_release();
        }
}
END_TEST

START_TEST(test_tile_emu_bf16)
{
    tu_rng r;
    tu_rng_seed(&r, 12);
    uint16_t a[16][32], b[16][32];
    float c[16][16];
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 32; j++) {
            a[i][j] = pagoda_fp32_to_bf16(tu_rng_normal(&r));
            b[i][j] = pagoda_fp32_to_bf16(tu_rng_normal(&r));
        }
    pagoda_tile_config cf = cfg3(16, 64, 16);
    pagoda_tile_emu_loadconfig(&cf);
    pagoda_tile_emu_zero(0);
    pagoda_tile_emu_load(1, a, sizeof a[0]);
    pagoda_tile_emu_load(2, b, sizeof b[0]);
    pagoda_tile_emu_dpbf16ps(0, 1, 2);
    pagoda_tile_emu_store(0, c, sizeof c[0]);
    ck_assert_int_eq(pagoda_tile_emu_faults(), 0);
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            double want = 0, mag = 0;
            for (int k = 0; k < 32; k++) {
                double p = (double)pagoda_bf16_to_fp32(a[m][k]) * pagoda_bf16_to_fp32(b[k / 2][2 * n + k % 2]);
                want += p;
                mag += fabs(p);
            }
            ck_assert_double_le(fabs(c[m][n] - want), 1e-6 * mag + 1e-30);
        }
    pagoda_tile_emu_release();
}
END_TEST

/* What the hardware refuses is a fault that changes nothing. */
START_TEST(test_tile_emu_faults)
{
    int32_t buf[16][16];
    pagoda_tile_emu_release();
    pagoda_tile_emu_zero(0);  /* no config yet */
    ck_assert_int_eq(pagoda_tile_emu_faults(), 1);
    pagoda_tile_config bad = cfg3(16, 64, 16);
    bad.rows[1] = 17;
    pagoda_tile_emu_loadconfig(&bad);
    ck_assert_int_eq(pagoda_tile_emu_faults(), 1);
    bad = cfg3(16, 64, 16);
    bad.palette_id = 2;
    pagoda_tile_emu_loadconfig(&bad);
    ck_assert_int_eq(pagoda_tile_emu_faults(), 1);
    pagoda_tile_config cf = cfg3(16, 64, 16);
    cf.rows[2] = 15;  /* B rows != A colsb / 4 */
    pagoda_tile_emu_loadconfig(&cf);
    ck_assert_int_eq(pagoda_tile_emu_faults(), 0);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) buf[i][j] = i * 16 + j;
    pagoda_tile_emu_load(0, buf, sizeof buf[0]);
    pagoda_tile_emu_dpbssd(0, 1, 2);
    ck_assert_int_eq(pagoda_tile_emu_faults(), 1);
    pagoda_tile_emu_dpbssd(0, 0, 2);  /* the same tile twice */
    ck_assert_int_eq(pagoda_tile_emu_faults(), 1);
    pagoda_tile_emu_load(5, buf, 64);  /* a tile of no shape */
    ck_assert_int_eq(pagoda_tile_emu_faults(), 1);
    int32_t out[16][16];
    pagoda_tile_emu_store(0, out, sizeof out[0]);
    ck_assert_int_eq(memcmp(out, buf, sizeof buf), 0);  /* C as loaded */
    pagoda_tile_emu_release();
}
END_TEST

/* -------------------------------------------------------- repacked GEMMs */

typedef struct mat {
    int dtype;
    int64_t N, K;
    size_t stride;
    uint8_t *w;
    float *wf;  /* dequantized (exact: int8 x an f16 scale) */
} mat;

static mat make_mat(tu_rng *r, int dtype, int64_t N, int64_t K)
{
    mat m = {.dtype = dtype, .N = N, .K = K, .stride = pagoda_dtype_row_bytes(dtype, K)};
    m.w = xmalloc(m.stride * (size_t)N);
    m.wf = xmalloc(sizeof(float) * (size_t)(N * K));
    float *row = xmalloc(sizeof(float) * (size_t)K);
    for (int64_t n = 0; n < N; n++) {
        tu_fill_normal(r, row, (size_t)K, 0.5f);
        if (n == 3) row[5] = 40.0f;  /* a block with one large value: q = -127..127 spread */
        ck_assert_int_eq(pagoda_quantize_row(dtype, row, m.w + (size_t)n * m.stride, K), PAGODA_OK);
        ck_assert_int_eq(pagoda_dequantize_row(dtype, m.w + (size_t)n * m.stride, m.wf + n * K, K), PAGODA_OK);
    }
    free(row);
    return m;
}

static void free_mat(mat *m)
{
    free(m->w);
    free(m->wf);
}

/* out_ref[t][n] in double from the same quantized activations the GEMMs
 * see (the q8a quantizer), and the magnitude sum for the tolerance. */
static void reference(const mat *m, const float *x, int64_t T, double *ref, double *mag)
{
    int64_t nb = m->K / 32;
    pagoda_q8a_block *q = xmalloc(sizeof *q * (size_t)nb);
    for (int64_t t = 0; t < T; t++) {
        pagoda_vecdot_scalar.quant_q8a(x + t * m->K, q, m->K);
        for (int64_t n = 0; n < m->N; n++) {
            double s = 0, a = 0;
            for (int64_t b = 0; b < nb; b++) {
                if (m->dtype == PAGODA_DTYPE_Q4_1) {
                    /* from the block's integers (wf's d q + m is rounded): the
                     * scale and min terms' sizes both bound the float steps */
                    pagoda_block_q4_1 blk;
                    memcpy(&blk, m->w + (size_t)n * m->stride + (size_t)b * sizeof blk, sizeof blk);
                    double dot = 0, sx = 0;
                    for (int k = 0; k < 32; k++) {
                        int v = k < 16 ? blk.qs[k] & 0xF : blk.qs[k - 16] >> 4;
                        dot += (double)v * q[b].qs[k];
                        sx += q[b].qs[k];
                    }
                    double ds = pagoda_fp16_to_fp32(blk.d) * dot * q[b].d, dm = pagoda_fp16_to_fp32(blk.m) * sx * q[b].d;
                    s += ds + dm;
                    a += fabs(ds) + fabs(dm);
                    continue;
                }
                double d = 0;
                for (int k = 0; k < 32; k++) d += (double)m->wf[n * m->K + b * 32 + k] * q[b].qs[k];
                s += d * q[b].d;
                a += fabs(d * q[b].d);
            }
            ref[t * m->N + n] = s;
            mag[t * m->N + n] = a;
        }
    }
    free(q);
}

static void check_out(const mat *m, int64_t T, const float *out, const double *ref, const double *mag,
                      const char *what)
{
    for (int64_t t = 0; t < T; t++)
        for (int64_t n = 0; n < m->N; n++) {
            double e = fabs(out[t * m->N + n] - ref[t * m->N + n]), tol = 2e-6 * mag[t * m->N + n] + 1e-6;
            if (e > tol)
                ck_abort_msg("%s %s N=%lld K=%lld T=%lld: out[%lld][%lld] = %.7g, want %.7g", what,
                             pagoda_dtype_name(m->dtype), (long long)m->N, (long long)m->K, (long long)T,
                             (long long)t, (long long)n, out[t * m->N + n], ref[t * m->N + n]);
        }
}

typedef void (*rp_gemm_fn)(const pagoda_rp_matrix *, int64_t, int64_t, const pagoda_rp_acts *, float *, size_t);

static const int64_t SHAPES[][3] = {  /* N, K, T */
    {16, 64, 16}, {37, 96, 17}, {100, 320, 33}, {5, 32, 100}, {48, 160, 64}, {33, 2048, 21},
};
#define N_SHAPES (int)(sizeof SHAPES / sizeof SHAPES[0])

START_TEST(test_repacked_gemms)
{
    static const int types[] = {PAGODA_DTYPE_Q8_0, PAGODA_DTYPE_Q4_0, PAGODA_DTYPE_Q4_1};
    tu_rng r;
    tu_rng_seed(&r, 21);
    bool vnni = pagoda_cpu_detect_isa() >= PAGODA_CPU_ISA_AVX512 && __builtin_cpu_supports("avx512vnni");
    bool amx = pagoda_amx_usable(NULL, 0);
    for (int ti = 0; ti < 3; ti++)
        for (int s = 0; s < N_SHAPES; s++) {
            int64_t N = SHAPES[s][0], K = SHAPES[s][1], T = SHAPES[s][2];
            mat m = make_mat(&r, types[ti], N, K);
            bool q41 = m.dtype == PAGODA_DTYPE_Q4_1;
            pagoda_rp_matrix rp = {.dtype = m.dtype, .N = N, .K = K, .ng = (N + 15) / 16, .nb = K / 32};
            ck_assert(pagoda_rp_type_supported(m.dtype) && !pagoda_rp_type_kquant(m.dtype));
            ck_assert_uint_eq(pagoda_rp_bytes(m.dtype, N, K),
                              (q41 ? sizeof(pagoda_rp_q41block) : sizeof(pagoda_rp_block)) * (size_t)(rp.ng * rp.nb));
            void *blk = xmalloc(pagoda_rp_bytes(m.dtype, N, K));
            if (q41) rp.q41blk = blk;
            else rp.blk = blk;
            pagoda_rp_pack_groups(&rp, m.w, m.stride, 0, rp.ng);
            rp_gemm_fn ref_fn = q41 ? pagoda_rp_gemm_q41_ref : pagoda_rp_gemm_ref;
            rp_gemm_fn vnni_fn = q41 ? pagoda_rp_gemm_q41_vnni : pagoda_rp_gemm_vnni;
            float *x = xmalloc(sizeof(float) * (size_t)(T * K));
            tu_fill_normal(&r, x, (size_t)(T * K), 1.0f);
            double *ref = xmalloc(sizeof(double) * (size_t)(T * N)), *mag = xmalloc(sizeof(double) * (size_t)(T * N));
            reference(&m, x, T, ref, mag);
            float *out = xmalloc(sizeof(float) * (size_t)(T * N));
            void *scratch = xmalloc(pagoda_rp_acts_bytes(T, K));
            for (int us = 0; us < 2; us++) {
                pagoda_rp_acts a;
                pagoda_rp_acts_init(&a, scratch, T, K, us, false);
                pagoda_rp_prep_acts(&a, x, sizeof(float) * (size_t)K, 0, a.Tpad);
                memset(out, 0xff, sizeof(float) * (size_t)(T * N));
                ref_fn(&rp, 0, N, &a, out, sizeof(float) * (size_t)N);
                check_out(&m, T, out, ref, mag, us ? "ref (unsigned)" : "ref (signed)");
                if (us && vnni) {
                    /* two halves, split inside a group pair: each writes only its rows */
                    int64_t half = (N / 2 + 15) / 16 * 16;
                    if (half > N) half = N;
                    memset(out, 0xff, sizeof(float) * (size_t)(T * N));
                    vnni_fn(&rp, 0, half, &a, out, sizeof(float) * (size_t)N);
                    if (half < N) vnni_fn(&rp, half, N, &a, out, sizeof(float) * (size_t)N);
                    check_out(&m, T, out, ref, mag, "AVX-512 VNNI");
                }
                if (!us) {
                    memset(out, 0xff, sizeof(float) * (size_t)(T * N));
                    if (q41)
                        pagoda_rp_gemm_q41_amx_emu(&rp, 0, N, (const int8_t *)a.xq, a.xd, a.xm, T, out,
                                                   sizeof(float) * (size_t)N);
                    else
                        pagoda_rp_gemm_amx_emu(&rp, 0, N, (const int8_t *)a.xq, a.xd, T, out, sizeof(float) * (size_t)N);
                    ck_assert_int_eq(pagoda_tile_emu_faults(), 0);
                    check_out(&m, T, out, ref, mag, "emulated AMX");
                    if (amx) {
                        memset(out, 0xff, sizeof(float) * (size_t)(T * N));
                        if (q41)
                            pagoda_rp_gemm_q41_amx(&rp, 0, N, (const int8_t *)a.xq, a.xd, a.xm, T, out,
                                                   sizeof(float) * (size_t)N);
                        else
                            pagoda_rp_gemm_amx(&rp, 0, N, (const int8_t *)a.xq, a.xd, T, out, sizeof(float) * (size_t)N);
                        check_out(&m, T, out, ref, mag, "AMX");
                    }
                }
            }
            free(scratch);
            free(out);
            free(ref);
            free(mag);
            free(x);
            free(blk);
            free_mat(&m);
        }
}
END_TEST

/* The K-quants' reference in double from the blocks' integers (the
 * scalar kernel's definition): dx (d sum_j sc_j dot_j - dmin sum_j m_j
 * sum_j(x)) per super-block; mag bounds each float step's size. */
static void reference_k(const mat *m, const float *x, int64_t T, double *ref, double *mag)
{
    int64_t nb = m->K / 256;
    pagoda_q8k_block *q = xmalloc(sizeof *q * (size_t)nb);
    for (int64_t t = 0; t < T; t++) {
        pagoda_vecdot_scalar.quant_q8k(x + t * m->K, q, m->K);
        for (int64_t n = 0; n < m->N; n++) {
            double s = 0, a = 0;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *blk = m->w + (size_t)n * m->stride + (size_t)b * (m->dtype == PAGODA_DTYPE_Q4_K ? 144 : 176);
                uint16_t hd, hm;
                memcpy(&hd, blk, 2);
                memcpy(&hm, blk + 2, 2);
                const uint8_t *scales = blk + 4, *qh = m->dtype == PAGODA_DTYPE_Q5_K ? blk + 16 : NULL;
                const uint8_t *qs = blk + (qh ? 48 : 16);
                int64_t S = 0, M = 0;
                for (int j = 0; j < 8; j++) {
                    uint8_t sc, mn;
                    pagoda_get_scale_min_k4(j, scales, &sc, &mn);
                    int64_t dot = 0, sy = 0;
                    for (int l = 0; l < 32; l++) {
                        int v = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;
                        if (qh) v |= ((qh[l] >> j) & 1) << 4;
                        dot += v * q[b].qs[32 * j + l];
                        sy += q[b].qs[32 * j + l];
                    }
                    S += sc * dot;
                    M += mn * sy;
                }
                double d = pagoda_fp16_to_fp32(hd), dm = pagoda_fp16_to_fp32(hm);
                s += q[b].d * (d * (double)S - dm * (double)M);
                a += fabs(q[b].d) * (fabs(d * (double)S) + fabs(dm * (double)M));
            }
            ref[t * m->N + n] = s;
            mag[t * m->N + n] = a;
        }
    }
    free(q);
}

/* Random Q6_K rows (pagoda_quantize_row has no Q6_K): every byte random,
 * the scale a small f16; the reference in double mirrors the scalar
 * kernel's value order. */
static mat make_q6(tu_rng *r, int64_t N, int64_t K)
{
    mat m = {.dtype = PAGODA_DTYPE_Q6_K, .N = N, .K = K, .stride = pagoda_dtype_row_bytes(PAGODA_DTYPE_Q6_K, K)};
    m.w = xmalloc(m.stride * (size_t)N);
    m.wf = xmalloc(sizeof(float));
    for (size_t i = 0; i < m.stride * (size_t)N; i++) m.w[i] = (uint8_t)tu_rng_u64(r);
    for (int64_t n = 0; n < N; n++)
        for (int64_t b = 0; b < K / 256; b++) {
            uint16_t d = pagoda_fp32_to_fp16(0.001f + 0.01f * tu_rng_uniform(r));
            memcpy(m.w + (size_t)n * m.stride + (size_t)b * 210 + 208, &d, 2);
        }
    return m;
}

static void reference_q6(const mat *m, const float *x, int64_t T, double *ref, double *mag)
{
    int64_t nb = m->K / 256;
    pagoda_q8k_block *q = xmalloc(sizeof *q * (size_t)nb);
    for (int64_t t = 0; t < T; t++) {
        pagoda_vecdot_scalar.quant_q8k(x + t * m->K, q, m->K);
        for (int64_t n = 0; n < m->N; n++) {
            double s = 0, a = 0;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *blk = m->w + (size_t)n * m->stride + (size_t)b * 210;
                const uint8_t *ql = blk, *qh = blk + 128;
                const int8_t *sc = (const int8_t *)(blk + 192);
                const int8_t *q8 = q[b].qs;
                int64_t sum = 0;
                for (int half = 0; half < 2; half++) {
                    for (int l = 0; l < 32; l++) {
                        int is = l / 16;
                        int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                        int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                        int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                        int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                        sum += sc[is] * q1 * q8[l] + sc[is + 2] * q2 * q8[l + 32] + sc[is + 4] * q3 * q8[l + 64] +
                               sc[is + 6] * q4 * q8[l + 96];
                    }
                    ql += 64;
                    qh += 32;
                    sc += 8;
                    q8 += 128;
                }
                uint16_t hd;
                memcpy(&hd, blk + 208, 2);
                double v = (double)q[b].d * pagoda_fp16_to_fp32(hd) * (double)sum;
                s += v;
                a += fabs(v);
            }
            ref[t * m->N + n] = s;
            mag[t * m->N + n] = a;
        }
    }
    free(q);
}

typedef void (*rp_amx_fn)(const pagoda_rp_matrix *, int64_t, int64_t, const int8_t *, const float *,
                          const int16_t *, int64_t, float *, size_t);

/* One super-block type (Q4_K / Q5_K / Q6_K) at one shape: its plain-C,
 * VNNI (where the host has it), emulated-AMX and real-AMX (where granted)
 * GEMMs against the double reference. */
static void check_super(mat *m, int64_t T, tu_rng *r, rp_gemm_fn ref_fn, rp_gemm_fn vnni_fn, rp_amx_fn emu_fn,
                        rp_amx_fn amx_fn)
{
    const int64_t N = m->N, K = m->K;
    const bool q6 = m->dtype == PAGODA_DTYPE_Q6_K;
    bool vnni = pagoda_cpu_detect_isa() >= PAGODA_CPU_ISA_AVX512 && __builtin_cpu_supports("avx512vnni");
    bool amx = pagoda_amx_usable(NULL, 0);
    pagoda_rp_matrix rp = {.dtype = m->dtype, .N = N, .K = K, .ng = (N + 15) / 16, .nb = K / 256};
    size_t bs = q6 ? sizeof(pagoda_rp_q6block) : sizeof(pagoda_rp_kblock);
    ck_assert_uint_eq(pagoda_rp_bytes(m->dtype, N, K), bs * (size_t)(rp.ng * rp.nb));
    void *blk = xmalloc(pagoda_rp_bytes(m->dtype, N, K));
    if (q6) rp.q6blk = blk; else rp.kblk = blk;
    pagoda_rp_pack_groups(&rp, m->w, m->stride, 0, rp.ng);
    float *x = xmalloc(sizeof(float) * (size_t)(T * K));
    tu_fill_normal(r, x, (size_t)(T * K), 1.0f);
    double *ref = xmalloc(sizeof(double) * (size_t)(T * N)), *mag = xmalloc(sizeof(double) * (size_t)(T * N));
    if (q6) reference_q6(m, x, T, ref, mag); else reference_k(m, x, T, ref, mag);
    float *out = xmalloc(sizeof(float) * (size_t)(T * N));
    const size_t os = sizeof(float) * (size_t)N;
    void *scratch = xmalloc(pagoda_rp_acts_bytes(T, K));
    pagoda_rp_acts a;
    pagoda_rp_acts_init(&a, scratch, T, K, false, true);
    pagoda_rp_prep_acts(&a, x, sizeof(float) * (size_t)K, 0, a.Tpad);
    const int16_t *xs = q6 ? a.xs16 : a.xs;
    memset(out, 0xff, os * (size_t)T);
    ref_fn(&rp, 0, N, &a, out, os);
    check_out(m, T, out, ref, mag, "ref");
    if (vnni) {
        memset(out, 0xff, os * (size_t)T);
        vnni_fn(&rp, 0, 16, &a, out, os);
        if (N > 16) vnni_fn(&rp, 16, N, &a, out, os);
        check_out(m, T, out, ref, mag, "AVX-512 VNNI");
    }
    memset(out, 0xff, os * (size_t)T);
    emu_fn(&rp, 0, N, (const int8_t *)a.xq, a.xd, xs, T, out, os);
    ck_assert_int_eq(pagoda_tile_emu_faults(), 0);
    check_out(m, T, out, ref, mag, "emulated AMX");
    if (amx) {
        memset(out, 0xff, os * (size_t)T);
        amx_fn(&rp, 0, N, (const int8_t *)a.xq, a.xd, xs, T, out, os);
        check_out(m, T, out, ref, mag, "AMX");
    }
    free(scratch);
    free(out);
    free(ref);
    free(mag);
    free(x);
    free(blk);
}

static const int64_t SUPER_SHAPES[][3] = {{16, 256, 16}, {37, 512, 17}, {50, 256, 100}, {20, 768, 33}};

START_TEST(test_repacked_gemms_k)
{
    static const int types[] = {PAGODA_DTYPE_Q4_K, PAGODA_DTYPE_Q5_K};
    tu_rng r;
    tu_rng_seed(&r, 22);
    for (int ti = 0; ti < 2; ti++)
        for (size_t s = 0; s < sizeof SUPER_SHAPES / sizeof SUPER_SHAPES[0]; s++) {
            mat m = make_mat(&r, types[ti], SUPER_SHAPES[s][0], SUPER_SHAPES[s][1]);
            check_super(&m, SUPER_SHAPES[s][2], &r, pagoda_rp_gemm_k_ref, pagoda_rp_gemm_k_vnni,
                        pagoda_rp_gemm_k_amx_emu, pagoda_rp_gemm_k_amx);
            free_mat(&m);
        }
}
END_TEST

START_TEST(test_repacked_gemms_q6)
{
    tu_rng r;
    tu_rng_seed(&r, 23);
    for (size_t s = 0; s < sizeof SUPER_SHAPES / sizeof SUPER_SHAPES[0]; s++) {
        mat m = make_q6(&r, SUPER_SHAPES[s][0], SUPER_SHAPES[s][1]);
        check_super(&m, SUPER_SHAPES[s][2], &r, pagoda_rp_gemm_q6_ref, pagoda_rp_gemm_q6_vnni,
                    pagoda_rp_gemm_q6_amx_emu, pagoda_rp_gemm_q6_amx);
        free_mat(&m);
    }
}
END_TEST

/* ------------------------------------------------------------ the hook */

/* matmul through the hook (cache, regions, bias, the pool) on every path
 * this host has, against the scalar row kernels. */
/* At the AMX level only Q8_0 of >= PAGODA_RP_AMX_MIN_T tokens takes the
 * tiles (the measured rule, repack_matmul.h), the rest the VNNI GEMM;
 * PAGODA_CPU_AMX_ALL=1 sends all to the tiles; other paths are kept. */
START_TEST(test_amx_type_rule)
{
    int amx = PAGODA_RP_PATH_AMX, vnni = PAGODA_RP_PATH_VNNI, emu = PAGODA_RP_PATH_AMX_EMU;
    pagoda_cpu_exec ex = {0}, bi = {.batch_invariant = true};
    unsetenv("PAGODA_CPU_AMX_ALL");
    ck_assert_int_eq(pagoda_rp_path_for(&ex, amx, PAGODA_DTYPE_Q8_0, 512), amx);
    ck_assert_int_eq(pagoda_rp_path_for(&ex, amx, PAGODA_DTYPE_Q8_0, PAGODA_RP_AMX_MIN_T), amx);
    int below = pagoda_rp_path_for(&ex, amx, PAGODA_DTYPE_Q8_0, PAGODA_RP_AMX_MIN_T - 1);
    ck_assert(below == vnni || below == PAGODA_RP_PATH_NONE);
    static const int others[] = {PAGODA_DTYPE_Q4_0, PAGODA_DTYPE_Q4_1, PAGODA_DTYPE_Q4_K, PAGODA_DTYPE_Q5_K,
                                 PAGODA_DTYPE_Q6_K};
    for (int i = 0; i < 5; i++) ck_assert_int_eq(pagoda_rp_path_for(&ex, amx, others[i], 512), below);
    ck_assert_int_eq(pagoda_rp_path_for(&ex, vnni, PAGODA_DTYPE_Q8_0, 512), vnni);
    ck_assert_int_eq(pagoda_rp_path_for(&ex, emu, PAGODA_DTYPE_Q4_0, 512), emu);
    setenv("PAGODA_CPU_AMX_ALL", "1", 1);
    ck_assert_int_eq(pagoda_rp_path_for(&ex, amx, PAGODA_DTYPE_Q4_K, 16), amx);
    ck_assert_int_eq(pagoda_rp_path_for(&ex, amx, PAGODA_DTYPE_Q4_1, 16), amx);
    /* a batch-invariant exec: the VNNI GEMM at the AMX level whatever the
     * type, size or PAGODA_CPU_AMX_ALL, while the other exec keeps the tiles */
    ck_assert_int_eq(pagoda_rp_path_for(&bi, amx, PAGODA_DTYPE_Q8_0, 512), vnni);
    ck_assert_int_eq(pagoda_rp_path_for(&bi, amx, PAGODA_DTYPE_Q4_K, 16), vnni);
    ck_assert_int_eq(pagoda_rp_path_for(&bi, amx, PAGODA_DTYPE_Q4_1, 512), vnni);
    ck_assert_int_eq(pagoda_rp_path_for(&ex, amx, PAGODA_DTYPE_Q8_0, 512), amx);
    ck_assert_int_eq(pagoda_rp_path_for(&bi, vnni, PAGODA_DTYPE_Q8_0, 512), vnni);
    unsetenv("PAGODA_CPU_AMX_ALL");
}
END_TEST

START_TEST(test_matmul_hook)
{
    tu_rng r;
    tu_rng_seed(&r, 31);
    pagoda_cpu_exec ex = {0};
    ck_assert_int_eq(pagoda_threadpool_create(2, &ex.pool), PAGODA_OK);
    ex.repack = pagoda_rp_cache_create();
    ck_assert_ptr_nonnull(ex.repack);
    static const int types[] = {PAGODA_DTYPE_Q8_0, PAGODA_DTYPE_Q4_0};
    const int64_t K = 96, T = 37;
    const int64_t Ns[2] = {70, 16};
    mat m[2];
    float *bias = xmalloc(sizeof(float) * 70);
    tu_fill_normal(&r, bias, 70, 1.0f);
    for (int i = 0; i < 2; i++) {
        m[i] = make_mat(&r, types[i], Ns[i], K);
        ck_assert_int_eq(pagoda_rp_cache_add_region(ex.repack, m[i].w, m[i].stride * (size_t)Ns[i]), PAGODA_OK);
    }
    float *x = xmalloc(sizeof(float) * (size_t)(T * K));
    tu_fill_normal(&r, x, (size_t)(T * K), 1.0f);
    float *want[2], *got[2], *lanes[2];
    for (int i = 0; i < 2; i++) {
        want[i] = xmalloc(sizeof(float) * (size_t)(T * Ns[i]));
        got[i] = xmalloc(sizeof(float) * (size_t)(T * Ns[i]));
        lanes[i] = xmalloc(sizeof(float) * (size_t)(T * Ns[i]));
    }
    pagoda_cpu_force_isa(PAGODA_CPU_ISA_SCALAR);
    ck_assert_int_eq(pagoda_rp_path(), PAGODA_RP_PATH_NONE);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pagoda_cpu_matmul(&ex, x, sizeof(float) * K, T, K, m[i].w, m[i].dtype, m[i].stride,
                                           Ns[i], i ? NULL : bias, want[i], sizeof(float) * (size_t)Ns[i]),
                         PAGODA_OK);
    int count;
    ck_assert_uint_eq(pagoda_rp_cache_bytes(ex.repack, &count), 0);  /* the scalar level repacks nothing */
    for (int i = 0; i < 2; i++)  /* and the memory plan counts nothing for it */
        ck_assert_uint_eq(pagoda_rp_planned_bytes(types[i], Ns[i], K), 0);
    bool avx2 = pagoda_cpu_detect_isa() >= PAGODA_CPU_ISA_AVX2;
    pagoda_cpu_force_isa(PAGODA_CPU_ISA_AVX2);
    for (int i = 0; i < 2 && avx2; i++)
        ck_assert_int_eq(pagoda_cpu_matmul(&ex, x, sizeof(float) * K, T, K, m[i].w, m[i].dtype, m[i].stride,
                                           Ns[i], i ? NULL : bias, lanes[i], sizeof(float) * (size_t)Ns[i]),
                         PAGODA_OK);
    pagoda_cpu_force_isa(-1);
    int paths[2] = {PAGODA_RP_PATH_AMX_EMU, pagoda_rp_path()};
    setenv("PAGODA_CPU_AMX_ALL", "1", 1);   /* the real tiles for every type, where granted */
    for (int p = 0; p < 2; p++) {
        if (p == 1 && paths[1] == PAGODA_RP_PATH_NONE) break;  /* an AVX2 host: nothing native */
        pagoda_rp_force_amx_emulation(p == 0);
        ck_assert_int_eq(pagoda_rp_path(), paths[p]);
        for (int rep = 0; rep < 2; rep++) {
            pagoda_cpu_mat mm[2];
            for (int i = 0; i < 2; i++) {
                memset(got[i], 0xff, sizeof(float) * (size_t)(T * Ns[i]));
                mm[i] = (pagoda_cpu_mat){.w = m[i].w, .dtype = m[i].dtype, .w_stride = m[i].stride, .N = Ns[i],
                                         .bias = i ? NULL : bias, .out = got[i],
                                         .out_stride = sizeof(float) * (size_t)Ns[i]};
            }
            ck_assert_int_eq(pagoda_cpu_matmul_multi(&ex, x, sizeof(float) * K, T, K, mm, 2), PAGODA_OK);
            ck_assert_uint_eq(pagoda_rp_cache_bytes(ex.repack, &count), pagoda_rp_bytes(PAGODA_DTYPE_Q8_0, 70, K) +
                                                                       pagoda_rp_bytes(PAGODA_DTYPE_Q4_0, 16, K));
            ck_assert_int_eq(count, 2);  /* made once, found the second time */
            /* what the memory plan counted for them (ABI 1.15 weight_extra_bytes) is what is held */
            ck_assert_uint_eq(pagoda_rp_cache_bytes(ex.repack, &count),
                              pagoda_rp_planned_bytes(types[0], Ns[0], K) + pagoda_rp_planned_bytes(types[1], Ns[1], K));
            for (int i = 0; i < 2; i++)
                for (int64_t j = 0; j < T * Ns[i]; j++)
                    ck_assert_msg(fabsf(got[i][j] - want[i][j]) <= 1e-4f * (1.0f + fabsf(want[i][j])),
                                  "%s path %s [%lld]: %g vs %g", pagoda_dtype_name(m[i].dtype),
                                  pagoda_rp_path_name(paths[p]), (long long)j, got[i][j], want[i][j]);
            for (int i = 0; i < 2 && paths[p] == PAGODA_RP_PATH_VNNI; i++)  /* the lanes kernels' bits */
                ck_assert_int_eq(memcmp(got[i], lanes[i], sizeof(float) * (size_t)(T * Ns[i])), 0);
        }
    }
    pagoda_rp_force_amx_emulation(false);
    unsetenv("PAGODA_CPU_AMX_ALL");
    /* fewer tokens than the threshold, and weights outside every region:
     * the row kernels (nothing new in the cache) */
    pagoda_rp_cache_invalidate(ex.repack, m[0].w, 1);
    ck_assert_uint_eq(pagoda_rp_cache_bytes(ex.repack, &count), pagoda_rp_bytes(PAGODA_DTYPE_Q4_0, 16, K));
    pagoda_rp_cache_remove_region(ex.repack, m[1].w);
    ck_assert_uint_eq(pagoda_rp_cache_bytes(ex.repack, &count), 0);
    ck_assert_int_eq(pagoda_cpu_matmul(&ex, x, sizeof(float) * K, 8, K, m[0].w, m[0].dtype, m[0].stride, 70,
                                       NULL, got[0], sizeof(float) * 70), PAGODA_OK);
    ck_assert_int_eq(pagoda_cpu_matmul(&ex, x, sizeof(float) * K, T, K, m[1].w, m[1].dtype, m[1].stride, 16,
                                       NULL, got[1], sizeof(float) * 16), PAGODA_OK);
    ck_assert_uint_eq(pagoda_rp_cache_bytes(ex.repack, &count), 0);
    ck_assert_int_eq(count, 0);
    for (int i = 0; i < 2; i++) {
        free(want[i]);
        free(got[i]);
        free(lanes[i]);
        free_mat(&m[i]);
    }
    free(x);
    free(bias);
    pagoda_threadpool_destroy(ex.pool);
    pagoda_cpu_exec_release(&ex);
}
END_TEST

/* Q4_1 through pagoda_cpu_matmul at T >= 16 (two matrices, one with a
 * bias, N no multiple of 16): on the VNNI repacked GEMM the bits of the
 * lanes kernels (the AVX2 tile_q4_1_x8 and every other path cpu_paths.h
 * runs, on an unregistered copy of the weights the repack never takes),
 * so a batch_invariant token's logits do not depend on its batch; the
 * emulated (and real, where granted) AMX tiles within the scalar
 * kernels' tolerance; one copy per weight, the planned bytes held. */
START_TEST(test_matmul_hook_q4_1)
{
    tu_rng r;
    tu_rng_seed(&r, 41);
    pagoda_cpu_exec ex = {0};
    ck_assert_int_eq(pagoda_threadpool_create(2, &ex.pool), PAGODA_OK);
    ex.repack = pagoda_rp_cache_create();
    ck_assert_ptr_nonnull(ex.repack);
    const int64_t K = 256, Ns[2] = {70, 32}, Ts[2] = {16, 37};
    mat m[2];
    uint8_t *copy[2];
    float *bias = xmalloc(sizeof(float) * 70);
    tu_fill_normal(&r, bias, 70, 1.0f);
    for (int i = 0; i < 2; i++) {
        m[i] = make_mat(&r, PAGODA_DTYPE_Q4_1, Ns[i], K);
        ck_assert_int_eq(pagoda_rp_cache_add_region(ex.repack, m[i].w, m[i].stride * (size_t)Ns[i]), PAGODA_OK);
        copy[i] = xmalloc(m[i].stride * (size_t)Ns[i]);
        memcpy(copy[i], m[i].w, m[i].stride * (size_t)Ns[i]);
    }
    const int64_t TM = 37;
    float *x = xmalloc(sizeof(float) * (size_t)(TM * K));
    tu_fill_normal(&r, x, (size_t)(TM * K), 1.0f);
    for (int64_t k = 0; k < K; k++) x[3 * K + k] += 2.0f;  /* a token whose sums are far from 0: a large min term */
    float *want[2], *got[2], *lanes[2], *other = xmalloc(sizeof(float) * (size_t)(TM * 70));
    for (int i = 0; i < 2; i++) {
        want[i] = xmalloc(sizeof(float) * (size_t)(TM * Ns[i]));
        got[i] = xmalloc(sizeof(float) * (size_t)(TM * Ns[i]));
        lanes[i] = xmalloc(sizeof(float) * (size_t)(TM * Ns[i]));
    }
    bool avx2 = pagoda_cpu_detect_isa() >= PAGODA_CPU_ISA_AVX2;
    int paths[2] = {PAGODA_RP_PATH_AMX_EMU, pagoda_rp_path()};
    int n_bits = 0;
    for (int ti = 0; ti < 2; ti++) {
        const int64_t T = Ts[ti];
        pagoda_cpu_force_isa(PAGODA_CPU_ISA_SCALAR);
        for (int i = 0; i < 2; i++)
            ck_assert_int_eq(pagoda_cpu_matmul(&ex, x, sizeof(float) * K, T, K, m[i].w, m[i].dtype, m[i].stride,
                                               Ns[i], i ? NULL : bias, want[i], sizeof(float) * (size_t)Ns[i]),
                             PAGODA_OK);
        /* the AVX2 lanes kernel (tile_q4_1_x8): the bits to meet */
        pagoda_cpu_force_isa(PAGODA_CPU_ISA_AVX2);
        for (int i = 0; i < 2 && avx2; i++)
            ck_assert_int_eq(pagoda_cpu_matmul(&ex, x, sizeof(float) * K, T, K, copy[i], m[i].dtype, m[i].stride,
                                               Ns[i], i ? NULL : bias, lanes[i], sizeof(float) * (size_t)Ns[i]),
                             PAGODA_OK);
        /* and every other path's lanes kernels give them (XT_Q4_1 of lanes_vnni.h among them) */
        for (int p = 1; p < cpu_paths_count() && avx2; p++) {
            cpu_path_use(&PATHS[p]);
            for (int i = 0; i < 2; i++) {
                ck_assert_int_eq(pagoda_cpu_matmul(&ex, x, sizeof(float) * K, T, K, copy[i], m[i].dtype,
                                                   m[i].stride, Ns[i], i ? NULL : bias, other,
                                                   sizeof(float) * (size_t)Ns[i]),
                                 PAGODA_OK);
                ck_assert_msg(memcmp(other, lanes[i], sizeof(float) * (size_t)(T * Ns[i])) == 0,
                              "Q4_1 T=%lld: the %s lanes kernels are not the AVX2 ones bit for bit", (long long)T,
                              PATHS[p].name);
            }
        }
        cpu_path_reset();
        int count;
        ck_assert_uint_eq(pagoda_rp_cache_bytes(ex.repack, &count), 0);  /* no lanes call repacked anything */
        setenv("PAGODA_CPU_AMX_ALL", "1", 1);   /* the real tiles for Q4_1 too, where granted */
        for (int p = 0; p < 2; p++) {
            if (p == 1 && paths[1] == PAGODA_RP_PATH_NONE) break;  /* an AVX2 host: nothing native */
            pagoda_rp_force_amx_emulation(p == 0);
            ck_assert_int_eq(pagoda_rp_path(), paths[p]);
            pagoda_cpu_mat mm[2];
            for (int i = 0; i < 2; i++) {
                memset(got[i], 0xff, sizeof(float) * (size_t)(T * Ns[i]));
                mm[i] = (pagoda_cpu_mat){.w = m[i].w, .dtype = m[i].dtype, .w_stride = m[i].stride, .N = Ns[i],
                                         .bias = i ? NULL : bias, .out = got[i],
                                         .out_stride = sizeof(float) * (size_t)Ns[i]};
            }
            ck_assert_int_eq(pagoda_cpu_matmul_multi(&ex, x, sizeof(float) * K, T, K, mm, 2), PAGODA_OK);
            ck_assert_uint_eq(pagoda_rp_cache_bytes(ex.repack, &count),
                              pagoda_rp_bytes(PAGODA_DTYPE_Q4_1, 70, K) + pagoda_rp_bytes(PAGODA_DTYPE_Q4_1, 32, K));
            ck_assert_int_eq(count, 2);  /* made once, found after */
            if (paths[1] != PAGODA_RP_PATH_NONE)  /* what the memory plan counts is what is held */
                ck_assert_uint_eq(pagoda_rp_cache_bytes(ex.repack, NULL),
                                  pagoda_rp_planned_bytes(PAGODA_DTYPE_Q4_1, 70, K) +
                                      pagoda_rp_planned_bytes(PAGODA_DTYPE_Q4_1, 32, K));
            for (int i = 0; i < 2; i++)
                for (int64_t j = 0; j < T * Ns[i]; j++)
                    ck_assert_msg(fabsf(got[i][j] - want[i][j]) <= 1e-4f * (1.0f + fabsf(want[i][j])),
                                  "Q4_1 T=%lld path %s [%lld]: %g vs %g", (long long)T, pagoda_rp_path_name(paths[p]),
                                  (long long)j, got[i][j], want[i][j]);
            if (paths[p] == PAGODA_RP_PATH_VNNI && avx2) {  /* the lanes kernels' bits */
                for (int i = 0; i < 2; i++)
                    for (int64_t j = 0; j < T * Ns[i]; j++)
                        ck_assert_msg(memcmp(&got[i][j], &lanes[i][j], sizeof(float)) == 0,
                                      "Q4_1 T=%lld N=%lld: VNNI on the repacked layout [%lld][%lld] = %.9g, the "
                                      "AVX2 lanes kernel %.9g",
                                      (long long)T, (long long)Ns[i], (long long)(j / Ns[i]), (long long)(j % Ns[i]),
                                      got[i][j], lanes[i][j]);
                n_bits++;
            }
        }
        pagoda_rp_force_amx_emulation(false);
        unsetenv("PAGODA_CPU_AMX_ALL");
        for (int i = 0; i < 2; i++) pagoda_rp_cache_invalidate(ex.repack, m[i].w, 1);  /* made again next T */
    }
    if (paths[1] == PAGODA_RP_PATH_VNNI) ck_assert_int_eq(n_bits, 2);
    else printf("test_matmul_hook_q4_1: no AVX-512 VNNI here: the bit-for-bit check did not run\n");
    for (int i = 0; i < 2; i++) {
        free(want[i]);
        free(got[i]);
        free(lanes[i]);
        free(copy[i]);
        free_mat(&m[i]);
    }
    free(other);
    free(x);
    free(bias);
    pagoda_threadpool_destroy(ex.pool);
    pagoda_cpu_exec_release(&ex);
}
END_TEST

/* [backend.cpu] batch_invariant (cpu_features.h): a token's outputs are
 * the same bits whether its call had 1 row or 70 (the lanes kernels from
 * one row on, the VNNI repacked GEMM from 16, never the AMX tiles, even
 * with PAGODA_CPU_AMX_ALL), for every integer type with lanes kernels, at
 * each level this host has. This is what makes speculative verification
 * (a decode row plus its drafts in one call) and batching give a lone
 * stream's greedy bytes. Without it the per-row dots and row x token
 * tiles of T < 4-5 sum in another order (seen: Q4_1 parts at T = 1). */
START_TEST(test_batch_invariant_rows)
{
    if (pagoda_cpu_detect_isa() < PAGODA_CPU_ISA_AVX2) return; /* the scalar level has no lanes kernels */
    static const int types[] = {PAGODA_DTYPE_Q8_0, PAGODA_DTYPE_Q4_0, PAGODA_DTYPE_Q4_1, PAGODA_DTYPE_Q5_0,
                                PAGODA_DTYPE_Q5_1, PAGODA_DTYPE_IQ4_NL, PAGODA_DTYPE_MXFP4, PAGODA_DTYPE_Q2_K,
                                PAGODA_DTYPE_Q3_K, PAGODA_DTYPE_Q4_K, PAGODA_DTYPE_Q5_K, PAGODA_DTYPE_Q6_K,
                                PAGODA_DTYPE_IQ4_XS, PAGODA_DTYPE_F16, PAGODA_DTYPE_F32};
    enum { NT = sizeof types / sizeof types[0] };
    static const int64_t Ts[] = {1, 2, 3, 4, 5, 8, 9, 16, 17, 24, 33};
    /* K = 2048: 8 super-blocks of 256 (64 blocks of 32), so a kernel that
     * splits a row's blocks over several accumulators sums in another
     * order than one that does not */
    const int64_t K = 2048, N = 40, TMAX = 70;
    tu_rng r;
    tu_rng_seed(&r, 43);
    pagoda_cpu_exec ex = {0};
    ck_assert_int_eq(pagoda_threadpool_create(2, &ex.pool), PAGODA_OK);
    ex.repack = pagoda_rp_cache_create();
    float *x = xmalloc(sizeof(float) * (size_t)(TMAX * K)), *row = xmalloc(sizeof(float) * (size_t)K);
    float *full = xmalloc(sizeof(float) * (size_t)(TMAX * N)), *part = xmalloc(sizeof(float) * (size_t)(TMAX * N));
    tu_fill_normal(&r, x, (size_t)(TMAX * K), 1.0f);
    uint8_t *w[NT];
    size_t ws[NT];
    bool have[NT];
    int n_have = 0;
    for (int i = 0; i < NT; i++) {
        ws[i] = pagoda_dtype_row_bytes(types[i], K);
        have[i] = true;
        if (types[i] == PAGODA_DTYPE_Q6_K) {
            mat q6 = make_q6(&r, N, K);   /* random quants, sane scales (no Q6_K quantizer) */
            w[i] = q6.w;
            free(q6.wf);
        } else {
            w[i] = xmalloc(ws[i] * (size_t)N);
            for (int64_t n = 0; n < N && have[i]; n++) {
                tu_fill_normal(&r, row, (size_t)K, 0.5f);
                int st = pagoda_quantize_row(types[i], row, w[i] + (size_t)n * ws[i], K);
                ck_assert(st == PAGODA_OK || st == PAGODA_ERR_UNSUPPORTED);
                have[i] = st == PAGODA_OK;
            }
        }
        if (!have[i]) {
            printf("test_batch_invariant_rows: no quantizer for %s: not checked\n", pagoda_dtype_name(types[i]));
            continue;
        }
        n_have++;
        ck_assert_int_eq(pagoda_rp_cache_add_region(ex.repack, w[i], ws[i] * (size_t)N), PAGODA_OK);
    }
    ck_assert_int_ge(n_have, 10);  /* the 32-value types, MXFP4, Q4_K, Q5_K, Q6_K, F16 at least */
    int levels[4], nl = 0;
    levels[nl++] = PAGODA_CPU_ISA_AVX2;
    if (pagoda_cpu_has_avx_vnni()) levels[nl++] = PAGODA_CPU_ISA_AVX_VNNI;
    if (pagoda_cpu_detect_isa() >= PAGODA_CPU_ISA_AVX512) levels[nl++] = PAGODA_CPU_ISA_AVX512;
    if (pagoda_cpu_detect_isa() >= PAGODA_CPU_ISA_AMX) levels[nl++] = PAGODA_CPU_ISA_AMX;
    setenv("PAGODA_CPU_AMX_ALL", "1", 1);   /* the tiles for every type, were it not for batch_invariant */
    ex.batch_invariant = true;
    int compared = 0;
    for (int l = 0; l < nl; l++) {
        pagoda_cpu_force_isa(levels[l]);
        for (int i = 0; i < NT; i++) {
            if (!have[i]) continue;
            ck_assert_int_eq(pagoda_cpu_matmul(&ex, x, sizeof(float) * K, TMAX, K, w[i], types[i], ws[i], N, NULL,
                                               full, sizeof(float) * N),
                             PAGODA_OK);
            for (size_t k = 0; k < sizeof Ts / sizeof Ts[0]; k++) {
                int64_t T = Ts[k];
                memset(part, 0xff, sizeof(float) * (size_t)(T * N));
                ck_assert_int_eq(pagoda_cpu_matmul(&ex, x, sizeof(float) * K, T, K, w[i], types[i], ws[i], N,
                                                   NULL, part, sizeof(float) * N),
                                 PAGODA_OK);
                for (int64_t j = 0; j < T * N; j++)
                    ck_assert_msg(memcmp(&part[j], &full[j], sizeof(float)) == 0,
                                  "%s level %d: token %lld row %lld: %.9g in a call of %lld rows, %.9g in one of %lld",
                                  pagoda_dtype_name(types[i]), levels[l], (long long)(j / N), (long long)(j % N),
                                  part[j], (long long)T, full[j], (long long)TMAX);
                compared++;
            }
        }
    }
    ck_assert_int_eq(compared, nl * n_have * (int)(sizeof Ts / sizeof Ts[0]));
    ex.batch_invariant = false;
    unsetenv("PAGODA_CPU_AMX_ALL");
    pagoda_cpu_force_isa(-1);
    /* What the mode removes, said (not asserted: which calls part with it
     * off is the kernels' business): at the detected level */
    int differ = 0, calls = 0;
    for (int i = 0; i < NT; i++) {
        if (!have[i]) continue;
        ck_assert_int_eq(pagoda_cpu_matmul(&ex, x, sizeof(float) * K, TMAX, K, w[i], types[i], ws[i], N, NULL, full,
                                           sizeof(float) * N),
                         PAGODA_OK);
        for (size_t k = 0; k < sizeof Ts / sizeof Ts[0]; k++) {
            ck_assert_int_eq(pagoda_cpu_matmul(&ex, x, sizeof(float) * K, Ts[k], K, w[i], types[i], ws[i], N, NULL,
                                               part, sizeof(float) * N),
                             PAGODA_OK);
            differ += memcmp(part, full, sizeof(float) * (size_t)(Ts[k] * N)) != 0;
            calls++;
        }
    }
    printf("test_batch_invariant_rows: with batch_invariant off, %d of %d calls of 1..33 rows differ from "
           "their rows in a call of %lld\n", differ, calls, (long long)TMAX);
    for (int i = 0; i < NT; i++) free(w[i]);
    free(x);
    free(row);
    free(full);
    free(part);
    pagoda_threadpool_destroy(ex.pool);
    pagoda_cpu_exec_release(&ex);
}
END_TEST

/* One call with matrices of both activation kinds (per 32, per 256) and
 * one the layout lacks (Q5_0), Q6_K among them: each gets its own path, all equal the
 * scalar kernels, and the VNNI ones the AVX2 lanes kernels bit for bit; both kinds end up repacked over two calls. */
START_TEST(test_matmul_hook_kinds)
{
    tu_rng r;
    tu_rng_seed(&r, 32);
    pagoda_cpu_exec ex = {0};
    ck_assert_int_eq(pagoda_threadpool_create(2, &ex.pool), PAGODA_OK);
    ex.repack = pagoda_rp_cache_create();
    static const int types[] = {PAGODA_DTYPE_Q4_K, PAGODA_DTYPE_Q8_0, PAGODA_DTYPE_Q5_0, PAGODA_DTYPE_Q5_K};
    const int64_t K = 512, T = 19, N = 40;
    mat m[5];
    float *want[5], *got[5], *lanes[5];
    for (int i = 0; i < 5; i++) {
        m[i] = i < 4 ? make_mat(&r, types[i], N, K) : make_q6(&r, N, K);
        ck_assert_int_eq(pagoda_rp_cache_add_region(ex.repack, m[i].w, m[i].stride * (size_t)N), PAGODA_OK);
        want[i] = xmalloc(sizeof(float) * (size_t)(T * N));
        got[i] = xmalloc(sizeof(float) * (size_t)(T * N));
        lanes[i] = xmalloc(sizeof(float) * (size_t)(T * N));
    }
    float *x = xmalloc(sizeof(float) * (size_t)(T * K));
    tu_fill_normal(&r, x, (size_t)(T * K), 1.0f);
    pagoda_cpu_force_isa(PAGODA_CPU_ISA_SCALAR);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(pagoda_cpu_matmul(&ex, x, sizeof(float) * K, T, K, m[i].w, m[i].dtype, m[i].stride, N,
                                           NULL, want[i], sizeof(float) * N),
                         PAGODA_OK);
    /* the AVX2 lanes kernels (T >= 4), whose float steps the VNNI kernels
     * repeat: a token's logits must not depend on the batch's size */
    bool avx2 = pagoda_cpu_detect_isa() >= PAGODA_CPU_ISA_AVX2;
    pagoda_cpu_force_isa(PAGODA_CPU_ISA_AVX2);
    for (int i = 0; i < 5 && avx2; i++)
        ck_assert_int_eq(pagoda_cpu_matmul(&ex, x, sizeof(float) * K, T, K, m[i].w, m[i].dtype, m[i].stride, N,
                                           NULL, lanes[i], sizeof(float) * N),
                         PAGODA_OK);
    pagoda_cpu_force_isa(-1);
    int paths[2] = {PAGODA_RP_PATH_AMX_EMU, pagoda_rp_path()};
    setenv("PAGODA_CPU_AMX_ALL", "1", 1);   /* the real tiles for every type, where granted */
    for (int p = 0; p < 2; p++) {
        if (p == 1 && paths[1] == PAGODA_RP_PATH_NONE) break;
        pagoda_rp_force_amx_emulation(p == 0);
        pagoda_cpu_mat mm[5];
        for (int i = 0; i < 5; i++) {
            memset(got[i], 0xff, sizeof(float) * (size_t)(T * N));
            mm[i] = (pagoda_cpu_mat){.w = m[i].w, .dtype = m[i].dtype, .w_stride = m[i].stride, .N = N,
                                     .out = got[i], .out_stride = sizeof(float) * N};
        }
        ck_assert_int_eq(pagoda_cpu_matmul_multi(&ex, x, sizeof(float) * K, T, K, mm, 5), PAGODA_OK);
        int count;
        pagoda_rp_cache_bytes(ex.repack, &count);
        ck_assert_int_eq(count, 3 + (p == 0 ? 0 : 1));  /* Q4_K, Q5_K, Q6_K; Q8_0 on the second call */
        for (int i = 0; i < 5; i++)
            for (int64_t j = 0; j < T * N; j++)
                ck_assert_msg(fabsf(got[i][j] - want[i][j]) <= 1e-4f * (1.0f + fabsf(want[i][j])),
                              "%s path %s [%lld]: %g vs %g", pagoda_dtype_name(m[i].dtype),
                              pagoda_rp_path_name(paths[p]), (long long)j, got[i][j], want[i][j]);
        if (paths[p] == PAGODA_RP_PATH_VNNI)
            for (int i = 0; i < 5; i++)
                ck_assert_msg(memcmp(got[i], lanes[i], sizeof(float) * (size_t)(T * N)) == 0,
                              "%s: VNNI on the repacked layout is not the AVX2 lanes kernel bit for bit",
                              pagoda_dtype_name(m[i].dtype));
        /* the second call: Q8_0 first, so its kind goes first */
        pagoda_cpu_mat t0 = mm[0];
        mm[0] = mm[1];
        mm[1] = t0;
        ck_assert_int_eq(pagoda_cpu_matmul_multi(&ex, x, sizeof(float) * K, T, K, mm, 2), PAGODA_OK);
        pagoda_rp_cache_bytes(ex.repack, &count);
        ck_assert_int_eq(count, 4);
    }
    pagoda_rp_force_amx_emulation(false);
    unsetenv("PAGODA_CPU_AMX_ALL");
    for (int i = 0; i < 5; i++) {
        free(want[i]);
        free(got[i]);
        free(lanes[i]);
        free_mat(&m[i]);
    }
    free(x);
    pagoda_threadpool_destroy(ex.pool);
    pagoda_cpu_exec_release(&ex);
}
END_TEST

/* Each failing AMX check falls back, names itself, and never selects the
 * real tiles, even where the ISA level says AMX. */
START_TEST(test_amx_fallback)
{
    char why[128];
    static const char *const names[] = {"CPUID", "XCR0", "arch_prctl"};
    for (int f = 1; f <= 3; f++) {
        pagoda_amx_fake_failure(f);
        ck_assert(!pagoda_amx_usable(why, sizeof why));
        if (f == 1 || __builtin_cpu_supports("avx512f")) {
            /* a host without AMX fails at CPUID whatever is faked after it */
            bool named = strstr(why, names[f - 1]) || strstr(why, "CPUID");
            ck_assert_msg(named, "fake failure %d: '%s'", f, why);
        }
        pagoda_cpu_fake_detected_isa(PAGODA_CPU_ISA_AMX);
        ck_assert_int_ne(pagoda_rp_path(), PAGODA_RP_PATH_AMX);
        pagoda_cpu_fake_detected_isa(-1);
    }
    pagoda_amx_fake_failure(0);
    bool real = pagoda_amx_usable(why, sizeof why);
    ck_assert(strlen(why) > 0);
    if (!real) {
        pagoda_cpu_fake_detected_isa(PAGODA_CPU_ISA_AMX);
        ck_assert_int_ne(pagoda_rp_path(), PAGODA_RP_PATH_AMX);
        pagoda_cpu_fake_detected_isa(-1);
    }
    /* forced below AMX: never the tiles */
    pagoda_cpu_force_isa(PAGODA_CPU_ISA_AVX512);
    ck_assert_int_ne(pagoda_rp_path(), PAGODA_RP_PATH_AMX);
    pagoda_cpu_force_isa(PAGODA_CPU_ISA_AVX2);
    ck_assert_int_eq(pagoda_rp_path(), PAGODA_RP_PATH_NONE);
    pagoda_cpu_force_isa(-1);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cpu_repack");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_tile_emu_int8);
    tcase_add_test(tc, test_tile_emu_bf16);
    tcase_add_test(tc, test_tile_emu_faults);
    tcase_add_test(tc, test_repacked_gemms);
    tcase_add_test(tc, test_repacked_gemms_k);
    tcase_add_test(tc, test_repacked_gemms_q6);
    tcase_add_test(tc, test_amx_type_rule);
    tcase_add_test(tc, test_matmul_hook);
    tcase_add_test(tc, test_matmul_hook_kinds);
    tcase_add_test(tc, test_matmul_hook_q4_1);
    tcase_add_test(tc, test_batch_invariant_rows);
    tcase_add_test(tc, test_amx_fallback);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
