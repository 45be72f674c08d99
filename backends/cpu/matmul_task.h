/*
 * matmul_task.h: one matrix of the CPU matmul as matmul.c runs it (its
 * kernels, activation layouts and row parts), shared with experts.c, which
 * plans each active expert as one of these over its own rows and prepares
 * the activations itself, once per call.
 * Not for: callers outside the backend (kernels.h), the inner loops
 * (kernels/).
 */
#ifndef PAGODA_CPU_MATMUL_TASK_H
#define PAGODA_CPU_MATMUL_TASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "vecdot.h"

typedef void (*pagoda_cpu_gemm_kx8_fn)(const void *, size_t, int64_t, const pagoda_q8kx8_block *,
                                       int64_t, int64_t, float *, size_t);

typedef struct pagoda_cpu_mm {
    const pagoda_vecdot_table *vt;
    const float *x;
    size_t x_stride;
    int64_t T, K, N;
    const uint8_t *w;
    int dtype;
    size_t w_stride;
    const float *bias;
    float *out;
    size_t out_stride;
    uint8_t *xq;          /* quantized activations, xq_stride bytes per row */
    size_t xq_stride;
    uint8_t *xp;          /* xq rearranged by vt->prep_q4_0 (Q4_0, Q5, IQ4_NL), or NULL */
    size_t xp_stride;
    pagoda_q8x8_block *x8; /* xq interleaved by eights (gemm_x8), or NULL */
    void (*gemm_x8)(const void *, size_t, int64_t, const pagoda_q8x8_block *, int64_t, int64_t,
                    float *, size_t);
    float *xf8;           /* x transposed by eights (gemm_f16_x8), or NULL */
    void (*gemm_f16_x8)(const void *, size_t, int64_t, const float *, int64_t, int64_t, float *,
                        size_t);
    pagoda_q8kx8_block *kx8; /* q8k rows interleaved by eights (gemm_kx8), or NULL */
    pagoda_cpu_gemm_kx8_fn gemm_kx8;
    int64_t rows_per_part;
    void (*gemm)(const void *, size_t, int64_t, const void *, size_t, int64_t, int64_t, float *,
                 size_t);
} pagoda_cpu_mm;

/* From these many rows (tokens) of x the int8 types run their
 * tokens-in-lanes kernels (matmul.c says why). */
#define PAGODA_CPU_X8_MIN_T 4
#define PAGODA_CPU_X8_MIN_T_Q5 5

/* Fill m's kernels and activation strides from vt, T, K, dtype and ex's
 * batch_invariant (no allocation): xq_stride (0: F32 activations),
 * xp_stride (prep_q4_0 groups, 0: none), gemm_x8 / gemm_kx8 / gemm_f16_x8
 * (lanes), gemm. */
void pagoda_cpu_mm_plan(const pagoda_cpu_exec *ex, pagoda_cpu_mm *m);

/* Output columns [n0, n1) for every token of a planned, prepared m. */
void pagoda_cpu_mm_rows(const pagoda_cpu_mm *m, int64_t n0, int64_t n1);

/* Weight types whose activations are per-256 int8 blocks (q8k). */
bool pagoda_cpu_act_q8k(int dtype);

/* Does a matrix of this type over T rows go to sgemm (F32 weights, or
 * dequantize + sgemm) rather than the pagoda_cpu_mm path, under ex's
 * batch_invariant? */
bool pagoda_cpu_mm_sgemm_path(const pagoda_cpu_exec *ex, int dtype, int64_t T);

#endif
