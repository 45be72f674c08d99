/*
 * row_blocks.h: the row blocks of up to PAGODA_CPU_MATMUL_MAX weight
 * matrices as one list that a pool's threads claim one block at a time
 * (an atomic counter, relaxed: each block is written by the thread that
 * claims it alone, and the pool's run ends with a barrier). The GEMM
 * drivers over packed activations share it: the F32-FMA GEMM
 * (avx512/gemm_fma_avx512.c), the BF16 GEMM (avx512/matmul_bf16.c) and the
 * AMX-BF16 one (amx/amx_bf16_matmul.c); each picks its own block height.
 * Not for: the kernels, or the table's matmuls (matmul.c,
 * matmul_task.h: their own row parts).
 */
#ifndef PAGODA_CPU_ROW_BLOCKS_H
#define PAGODA_CPU_ROW_BLOCKS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels.h"

typedef struct pagoda_row_blocks {
    int64_t rows;                                /* rows of one block (the last of a matrix may hold fewer) */
    int64_t start[PAGODA_CPU_MATMUL_MAX + 1];   /* matrix i: blocks [start[i], start[i + 1]) */
    int n;                                       /* matrices */
    atomic_llong next;                           /* the next block to claim */
} pagoda_row_blocks;

/* [main thread] The blocks of `rows` rows (> 0) of w[0..n) (n <=
 * PAGODA_CPU_MATMUL_MAX; a matrix of N <= 0 rows has none), nothing
 * claimed yet. Call before the pool runs the claimers. */
static inline void pagoda_row_blocks_init(pagoda_row_blocks *rb, const pagoda_cpu_mat *w, int n, int64_t rows)
{
    rb->rows = rows;
    rb->n = n;
    rb->start[0] = 0;
    for (int i = 0; i < n; i++) {
        int64_t N = w[i].N > 0 ? w[i].N : 0;
        rb->start[i + 1] = rb->start[i] + (N + rows - 1) / rows;
    }
    atomic_init(&rb->next, 0);
}

/* [any thread] Claims the next block: true with *mi its matrix and rows
 * [*n0, *n1) of w[*mi] (w as given to init), false when none is left. */
static inline bool pagoda_row_blocks_claim(pagoda_row_blocks *rb, const pagoda_cpu_mat *w, int *mi, int64_t *n0,
                                           int64_t *n1)
{
    int64_t b = atomic_fetch_add_explicit(&rb->next, 1, memory_order_relaxed);
    if (b >= rb->start[rb->n]) return false;
    int i = 0;
    while (b >= rb->start[i + 1]) i++;
    *mi = i;
    *n0 = (b - rb->start[i]) * rb->rows;
    *n1 = *n0 + rb->rows < w[i].N ? *n0 + rb->rows : w[i].N;
    return true;
}

#endif
