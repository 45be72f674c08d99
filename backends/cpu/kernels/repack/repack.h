/*
 * repack.h: the row-interleaved int8 layout that the T >= 16 GEMMs read
 * (AMX tiles, AVX-512 VNNI), the once-per-weight cache of it, and the
 * activation layout those GEMMs take.
 *
 * Layout: the weight rows in groups of 16 (the last padded with zero
 * rows); each group's K values in blocks of 32 (a Q8_0 / Q4_0 block), one
 * pagoda_rp_block each, groups one after another ([group][block]). In a
 * block, q[r][4n + i] is row n's value 4r + i: the VNNI order, in which one
 * 64-byte row of q is both an AMX B-tile row (16 columns of 4 bytes) and
 * the zmm that a 4-byte activation broadcast meets in vpdpbusd. Values are
 * int8 (Q4_0's nibbles minus 8), with a float scale per row and block, and
 * 128 x the block's row sum, which the VNNI kernel subtracts because it
 * takes the activations as unsigned (x + 128).
 * Size: 640 bytes per 16 x 32 values, 1.25 bytes a weight: 1.18x a Q8_0
 * matrix, 2.2x a Q4_0 one, held beside the mmap'd original. The K-quants
 * have a block of their own (pagoda_rp_kblock); Q4_1 adds its mins
 * (pagoda_rp_q41block).
 * Not for: the GEMMs themselves (gemm_vnni_avx512.c, ../amx/), choosing
 * one (repack_matmul.c).
 */
#ifndef PAGODA_CPU_REPACK_H
#define PAGODA_CPU_REPACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PAGODA_RP_ROWS 16  /* weight rows per group */
#define PAGODA_RP_QK 32    /* values per block */

typedef struct pagoda_rp_block {
    int8_t q[PAGODA_RP_QK / 4][4 * PAGODA_RP_ROWS]; /* q[r][4n+i]: row n, value 4r+i */
    float d[PAGODA_RP_ROWS];                         /* row scales */
    int32_t s128[PAGODA_RP_ROWS];                    /* 128 * sum of row n's 32 values */
} pagoda_rp_block;

_Static_assert(sizeof(pagoda_rp_block) == 640, "a repacked block is 640 bytes");

/* Q4_1 (value d q + m, q 0..15): pagoda_rp_block's fields with the raw
 * nibbles 0..15 as int8 (the 128 x row sum as for Q4_0), and each row's
 * min m, which meets the activations' xm (dx x sum of the token's block)
 * in one float step per block, as the lanes kernels round it. 704 bytes
 * per 16 x 32, 1.375 bytes a weight (2.2x a Q4_1 matrix). */
typedef struct pagoda_rp_q41block {
    int8_t q[PAGODA_RP_QK / 4][4 * PAGODA_RP_ROWS]; /* q[r][4n+i]: row n, value 4r+i, 0..15 */
    float d[PAGODA_RP_ROWS];                         /* row scales */
    int32_t s128[PAGODA_RP_ROWS];                    /* 128 * sum of row n's 32 values */
    float m[PAGODA_RP_ROWS];                         /* row mins */
} pagoda_rp_q41block;

_Static_assert(sizeof(pagoda_rp_q41block) == 704, "a repacked Q4_1 block is 704 bytes");

/* The K-quants (Q4_K, Q5_K): one block per 16 rows x 256-value
 * super-block, the values unsigned (0..15 / 0..31) in the same VNNI
 * order, the 6-bit sub-block scales as int32 (multiplied into each
 * sub-block's int32 dot: int32 runs across the super-block, one float
 * step per 256 values), the mins as int16 pairs for vpdpwssd against the
 * activations' sums of 32: mp[p][2n + i] = row n's min of sub-block
 * 2p + i. 4,992 bytes per 16 x 256, 1.22 bytes a weight (2.2x a Q4_K
 * matrix, 1.8x Q5_K). */
typedef struct pagoda_rp_kblock {
    uint8_t q[256 / 4][4 * PAGODA_RP_ROWS]; /* q[r][4n+i]: row n, value 4r+i */
    int32_t sc[8][PAGODA_RP_ROWS];           /* sc[j][n]: sub-block j's scale */
    int16_t mp[4][2 * PAGODA_RP_ROWS];       /* mins, paired by sub-block */
    float d[PAGODA_RP_ROWS], dmin[PAGODA_RP_ROWS];
} pagoda_rp_kblock;

_Static_assert(sizeof(pagoda_rp_kblock) == 4992, "a repacked K block is 4992 bytes");

/* Q6_K: 16-value sub-blocks with signed 8-bit scales, values 0..63 (the
 * stored q; the -32 is taken off through the activations' sums of 16:
 * sum_j sc_j (dot_j - 32 sum_j(x))), scales as int32 for the per-sub-block
 * products and as int16 pairs for that offset. 5,696 bytes per 16 x 256,
 * 1.39 bytes a weight (1.7x a Q6_K matrix). */
typedef struct pagoda_rp_q6block {
    uint8_t q[256 / 4][4 * PAGODA_RP_ROWS]; /* q[r][4n+i]: row n, value 4r+i, 0..63 */
    int32_t sc[16][PAGODA_RP_ROWS];          /* sc[j][n]: sub-block j's scale */
    int16_t scp[8][2 * PAGODA_RP_ROWS];      /* the same, paired by sub-block */
    float d[PAGODA_RP_ROWS];
} pagoda_rp_q6block;

_Static_assert(sizeof(pagoda_rp_q6block) == 5696, "a repacked Q6_K block is 5696 bytes");

typedef struct pagoda_rp_matrix {
    int dtype;            /* the original's type (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K) */
    int64_t N, K;         /* rows, values per row */
    int64_t ng, nb;       /* groups of 16 rows, blocks (32 values; 256 for K) per row */
    pagoda_rp_block *blk; /* [ng][nb], 64-byte aligned (Q8_0, Q4_0) */
    pagoda_rp_kblock *kblk; /* [ng][nb] (Q4_K, Q5_K) */
    pagoda_rp_q6block *q6blk; /* [ng][nb] (Q6_K) */
    pagoda_rp_q41block *q41blk; /* [ng][nb] (Q4_1) */
} pagoda_rp_matrix;

/* Can this type be repacked? (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K) */
bool pagoda_rp_type_supported(int dtype);
/* Is it one of the super-block types (activations per 256)? */
bool pagoda_rp_type_kquant(int dtype);

/* Bytes of the repacked copy of an N x K matrix of dtype. */
size_t pagoda_rp_bytes(int dtype, int64_t N, int64_t K);

/* Repack rows [g0, g1) x 16 of w (N rows of K values, w_stride bytes
 * apart) into m (whose fields and blk are set). Plain C; the cache runs it
 * over the pool. */
void pagoda_rp_pack_groups(pagoda_rp_matrix *m, const void *w, size_t w_stride, int64_t g0, int64_t g1);

/* The activations of T tokens as the repacked GEMMs read them: xq [Tpad]
 * [kp] bytes (kp = K rounded up to 64, Tpad = T rounded up to 16, padding
 * zero), xd [Tpad][nb] scales; unsigned (x + 128, VNNI on Q8_0 / Q4_0) or
 * signed (AMX, and the K-quants everywhere, whose weights are the
 * unsigned side). K-quant activations (kq) are per 256 values (the q8k
 * quantizer's), with xs [Tpad][K / 32] their int16 sums of 32 and xs16
 * [Tpad][K / 16] their sums of 16. Per-32 activations also have xm
 * [Tpad][nb], dx x the block's sum of qs for Q4_1's min, rounded as the
 * lanes kernels round it: (dx / 8) x (8 sum). */
typedef struct pagoda_rp_acts {
    int64_t T, Tpad, K, kp, nb;
    bool is_unsigned, kq;
    uint8_t *xq;
    float *xd;
    int16_t *xs;
    int16_t *xs16;
    float *xm;
} pagoda_rp_acts;

/* Bytes of scratch pagoda_rp_acts_init needs for T x K. */
size_t pagoda_rp_acts_bytes(int64_t T, int64_t K);
/* Lay a out over `scratch` (64-byte aligned, pagoda_rp_acts_bytes). */
void pagoda_rp_acts_init(pagoda_rp_acts *a, void *scratch, int64_t T, int64_t K, bool is_unsigned, bool kq);
/* Quantize tokens [t0, t1) of x (x_stride bytes apart) into a, per 32
 * values as the q8a quantizer does (per 256 as q8k's when a->kq; the same
 * d and bytes); t1 may reach Tpad (padding rows get zeros). */
void pagoda_rp_prep_acts(pagoda_rp_acts *a, const float *x, size_t x_stride, int64_t t0, int64_t t1);

/* out[t][n0..n1) for t < T over 16-row groups [n0/16, ceil(n1/16)), the
 * VNNI kernel (unsigned activations), and its plain-C twin (the same
 * arithmetic: the reference of tests, and the path where neither VNNI
 * nor AMX runs). */
void pagoda_rp_gemm_vnni(const pagoda_rp_matrix *w, int64_t n0, int64_t n1, const pagoda_rp_acts *a,
                         float *out, size_t out_stride);
void pagoda_rp_gemm_ref(const pagoda_rp_matrix *w, int64_t n0, int64_t n1, const pagoda_rp_acts *a,
                        float *out, size_t out_stride);
/* The same for Q4_1 (per-32 activations, with xm). */
void pagoda_rp_gemm_q41_vnni(const pagoda_rp_matrix *w, int64_t n0, int64_t n1, const pagoda_rp_acts *a,
                             float *out, size_t out_stride);
void pagoda_rp_gemm_q41_ref(const pagoda_rp_matrix *w, int64_t n0, int64_t n1, const pagoda_rp_acts *a,
                            float *out, size_t out_stride);
/* The same for the K-quants (signed kq activations; Q4_K / Q5_K and Q6_K). */
void pagoda_rp_gemm_k_vnni(const pagoda_rp_matrix *w, int64_t n0, int64_t n1, const pagoda_rp_acts *a,
                           float *out, size_t out_stride);
void pagoda_rp_gemm_k_ref(const pagoda_rp_matrix *w, int64_t n0, int64_t n1, const pagoda_rp_acts *a,
                          float *out, size_t out_stride);
void pagoda_rp_gemm_q6_vnni(const pagoda_rp_matrix *w, int64_t n0, int64_t n1, const pagoda_rp_acts *a,
                            float *out, size_t out_stride);
void pagoda_rp_gemm_q6_ref(const pagoda_rp_matrix *w, int64_t n0, int64_t n1, const pagoda_rp_acts *a,
                           float *out, size_t out_stride);

/* ------------------------------------------------------------- the cache */

/* Repacked copies keyed by the weight's address, shape and type, made on
 * first use. Only addresses inside a registered weights region are
 * repacked (the backend registers its weight buffers, read-only for their
 * life), and a region's copies are dropped when it is removed or written. */
typedef struct pagoda_rp_cache pagoda_rp_cache;

pagoda_rp_cache *pagoda_rp_cache_create(void);
void pagoda_rp_cache_destroy(pagoda_rp_cache *c);
/* [engine thread] Register / forget [base, base + size). */
int pagoda_rp_cache_add_region(pagoda_rp_cache *c, const void *base, size_t size);
void pagoda_rp_cache_remove_region(pagoda_rp_cache *c, const void *base);
/* Drop the copies of matrices overlapping [base, base + size). */
void pagoda_rp_cache_invalidate(pagoda_rp_cache *c, const void *base, size_t size);
/* Bytes held in repacked copies, and how many. */
size_t pagoda_rp_cache_bytes(const pagoda_rp_cache *c, int *count);

struct pagoda_threadpool;
/* The repacked copy of w (found, or made now over `pool`), NULL when w is
 * outside every region, its type is not repackable or memory ran out. */
const pagoda_rp_matrix *pagoda_rp_cache_get(pagoda_rp_cache *c, struct pagoda_threadpool *pool,
                                            const void *w, int dtype, size_t w_stride, int64_t N,
                                            int64_t K);

#endif
