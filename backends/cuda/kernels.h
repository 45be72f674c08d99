/*
 * kernels.h: the CUDA kernels of the CUDA backend, as plain C launchers
 * (the host files are C; kernels.cu is the only CUDA C++ file). Every launcher
 * enqueues on `stream`, returns cudaGetLastError() of the launch and never
 * synchronizes. Pointers are device pointers; strides are in elements
 * (floats for activations) unless named *_bytes.
 * Not for: argument validation (ops.c and matmul.c check shapes and ranges
 * at the op boundary, with validate.c) or cuBLAS calls.
 */
#ifndef PAGODA_CUDA_KERNELS_H
#define PAGODA_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cudaSuccess when this build holds kernel code the current device can
 * run (else cudaErrorNoKernelImageForDevice or the like). */
cudaError_t pcu_check_image(void);

/* Most tokens the direct dequant-GEMV matmul handles per launch. */
#define PAGODA_CUDA_GEMV_MAX_T 8

/* out[i, c] = f32(table[ids[i], c]); table rows `row_bytes` apart, any of
 * F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q6_K. */
cudaError_t pcu_get_rows(cudaStream_t s, const uint8_t *table, size_t row_bytes, int dtype,
                         const int32_t *ids, int32_t n, int64_t cols, float *out, int64_t ld_out);

/* Dequantise `rows` weight rows into F16, rows contiguous (cols apart). */
cudaError_t pcu_dequant_f16(cudaStream_t s, const uint8_t *w, size_t row_bytes, int dtype,
                            int64_t rows, int64_t cols, void *out_f16);

/* F32 [rows x cols] (ld apart) to contiguous F16 (bf16 = 0) or BF16 (bf16 = 1). */
cudaError_t pcu_f32_to_half(cudaStream_t s, const float *x, int64_t ld, int64_t rows,
                            int64_t cols, int bf16, void *out);

/* out[t, n] = sum_k x[t, k] * w[n, k] (+ bias[n]) for t < T <= GEMV_MAX_T,
 * with w of any weight type, accumulated in F32. */
cudaError_t pcu_gemv(cudaStream_t s, const float *x, int64_t ldx, int32_t T, const uint8_t *w,
                     size_t w_row_bytes, int dtype, int64_t N, int64_t K, const float *bias,
                     float *out, int64_t ldo);

/* out[t, n] += bias[n]. */
cudaError_t pcu_add_bias(cudaStream_t s, float *out, int64_t ldo, int64_t T, int64_t N,
                         const float *bias);

cudaError_t pcu_rms_norm(cudaStream_t s, const float *x, int64_t ldx, const float *w,
                         float eps, int64_t rows, int64_t cols, float *out, int64_t ldo);

/* In place; pos[n_tokens], inv_freq[n_rot/2] on the device. */
cudaError_t pcu_rope(cudaStream_t s, float *x, int64_t ldx, int32_t n_tokens, int32_t n_heads,
                     int32_t head_dim, const int32_t *pos, const float *inv_freq,
                     int32_t n_rot, int neox, float mscale);

/* k_base/v_base: the layer's K and V start in the pool; kv_dtype F32, F16
 * or Q8_0; block_bytes / slot_bytes: one block's and one slot's bytes
 * (pagoda_kv_block_bytes, pagoda_kv_slot_bytes); row = n_kv_heads *
 * head_dim values per slot. */
cudaError_t pcu_kv_write(cudaStream_t s, void *k_base, void *v_base, int kv_dtype,
                         int32_t block_size, size_t block_bytes, size_t slot_bytes, int64_t row,
                         const float *k, int64_t ldk, const float *v, int64_t ldv,
                         const int32_t *slots, int32_t n);

/* Paged causal attention, one CUDA block per (query token, head), reading
 * the block tables in place. tok_kvlen[t]: keys token t sees (its position
 * + 1); tok_bt[t]: offset of its sequence's block table in `block_tables`;
 * head_bytes: one head's bytes in kv_dtype; window > 0: only the last
 * `window` of those keys; sinks: NULL or n_heads sink logits (ABI 1.8). */
cudaError_t pcu_attention(cudaStream_t s, const float *q, int64_t ldq, float *out, int64_t ldo,
                          const void *k_base, const void *v_base, int kv_dtype,
                          int32_t block_size, size_t block_bytes, size_t head_bytes,
                          int32_t n_kv_heads, int32_t head_dim, int32_t n_heads, float scale,
                          int32_t window, const float *sinks, int32_t n_tokens,
                          const int32_t *tok_kvlen, const int32_t *tok_bt,
                          const int32_t *block_tables);

/* out = silu(gate) * up and out = a + b over [rows x cols], each with its ld. */
cudaError_t pcu_swiglu(cudaStream_t s, const float *g, int64_t ldg, const float *u, int64_t ldu,
                       float *out, int64_t ldo, int64_t rows, int64_t cols);
cudaError_t pcu_add(cudaStream_t s, const float *a, int64_t lda, const float *b, int64_t ldb,
                    float *out, int64_t ldo, int64_t rows, int64_t cols);
/* out = gelu_tanh(gate) * up (decode.h's pcu_geglu) and out = x * sc. */
cudaError_t pcu_geglu_k(cudaStream_t s, const float *g, int64_t ldg, const float *u, int64_t ldu,
                        float *out, int64_t ldo, int64_t rows, int64_t cols);
cudaError_t pcu_scale(cudaStream_t s, const float *x, int64_t ldx, float sc, float *out,
                      int64_t ldo, int64_t rows, int64_t cols);
/* gpt-oss's clamped SwiGLU (decode.h's pcu_swiglu_oai). */
cudaError_t pcu_swiglu_oai_k(cudaStream_t s, const float *g, int64_t ldg, const float *u,
                             int64_t ldu, float alpha, float limit, float *out, int64_t ldo,
                             int64_t rows, int64_t cols);

/* out[idx[i]] = y[i] (rows of cols floats), i < n. */
cudaError_t pcu_scatter_rows(cudaStream_t s, const float *y, int64_t ldy, const int32_t *idx,
                             int32_t n, int64_t cols, float *out, int64_t ldo);
/* out (zeroed first unless accumulate) [dst[r]] += wts[r] * y[r], r in order. */
cudaError_t pcu_moe_combine(cudaStream_t s, const float *y, int64_t ldy, int32_t R,
                            const int32_t *dst, const float *wts, int accumulate,
                            int32_t out_rows, float *out, int64_t ldo, int64_t cols);

/* Copy blocks src[i] -> dst[i] (device arrays) in every (layer, K/V) plane:
 * plane p's block b starts at pool + (p * n_blocks + b) * block_bytes. */
cudaError_t pcu_copy_blocks(cudaStream_t s, uint8_t *pool, int32_t n_planes, int32_t n_blocks,
                            size_t block_bytes, const int32_t *src, const int32_t *dst,
                            int32_t n);

#ifdef __cplusplus
}
#endif
#endif /* PAGODA_CUDA_KERNELS_H */
