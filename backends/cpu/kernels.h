/*
 * kernels.h: the CPU backend's kernels on plain pointers (strides in
 * bytes, as in pagoda_tensor). backend.c validates tensors and calls these;
 * the unit tests call them directly. Each kernel picks its SIMD path from
 * pagoda_cpu_active_isa() at call time, so a test can force the scalar
 * reference and compare.
 * Not for: argument checking (callers validate; kernels trust shapes),
 * buffers, or plugin glue.
 */
#ifndef PAGODA_CPU_KERNELS_H
#define PAGODA_CPU_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagoda/backend.h"
#include "pagoda/types.h"
#include "threadpool.h"

/* What kernels run on: the thread pool (NULL: the caller alone), a
 * scratch area that grows on demand (quantized activations), and the
 * settings of the backend that owns it ([backend.cpu] batch_invariant and
 * f16_gemm), read by the kernels' dispatch at every call. Each CPU
 * backend has its own exec, so two backends of one process keep their own
 * settings. A zeroed exec is the defaults: batch_invariant off, f16_gemm
 * auto. */
typedef struct pagoda_cpu_exec {
    pagoda_threadpool *pool;
    void *scratch;
    size_t scratch_size;
    void *aux;            /* a second scratch: the expert matmul's, while its */
    size_t aux_size;      /* per-expert sgemm calls use the first */
    struct pagoda_rp_cache *repack; /* repacked weights (kernels/repack/), NULL: none */
    bool batch_invariant; /* a row's result independent of its call's rows (cpu_features.h) */
    int f16_gemm;         /* PAGODA_F16GEMM_* (kernels/avx512/gemm_fma.h); 0 = AUTO */
} pagoda_cpu_exec;

/* Scratch of at least `bytes` (64-byte aligned), NULL when out of memory.
 * Valid until the next call on the same exec. */
void *pagoda_cpu_scratch(pagoda_cpu_exec *ex, size_t bytes);
/* The same for the second scratch (experts.c), which matmul never uses;
 * when it grows, its first `keep` bytes are kept. */
void *pagoda_cpu_scratch_aux(pagoda_cpu_exec *ex, size_t bytes, size_t keep);
/* Frees both scratches and the repack cache (not the pool). */
void pagoda_cpu_exec_release(pagoda_cpu_exec *ex);

/* True when matmul/get_rows handle weights of this type. */
int pagoda_cpu_weight_type_supported(int dtype);

/* From this many rows on, BF16 / Q4_1 weights are dequantized a tile at a time and
 * multiplied with OpenBLAS sgemm (prefill: compute-bound, where sgemm beats
 * their kernels); below it Q4_1 quantizes the activations (decode:
 * bandwidth-bound, where reading fewer weight bytes wins) and F16 / BF16
 * run exact F32 products of their own. Q8_0, Q4_0, Q5_0, Q5_1, IQ4_NL,
 * the K-quants (Q2_K..Q6_K) and IQ4_XS keep quantized activations at every
 * T (their tokens-in-lanes kernels beat sgemm). PAGODA_CPU_GEMM_MIN_T in
 * the environment sets one crossover for every type. */
#define PAGODA_CPU_GEMM_MIN_T 32

/* True when pagoda_cpu_matmul on ex computes exact F32 products for T
 * rows of this weight type (F32/F16/BF16 unless ex's f16_gemm sends them
 * to the BF16 GEMM; quantized types on the sgemm path), false when it
 * quantizes the activations first. Only ex's settings are read: a zeroed
 * exec asks about a backend at its defaults. */
bool pagoda_cpu_matmul_exact(const pagoda_cpu_exec *ex, int dtype, int64_t T);

/* out[t, n] = sum_k x[t, k] * w[n, k] (+ bias[n]), t < T, n < N.
 * x F32 rows (x_stride bytes apart), w rows of `w_dtype` (K a multiple of
 * its block), out F32. Quantized weights where pagoda_cpu_matmul_exact is
 * false: the activations are quantized to int8 blocks once, then integer
 * dot products per block (as llama.cpp); otherwise exact F32 products.
 * Returns PAGODA_OK, PAGODA_ERR_NOMEM (scratch) or PAGODA_ERR_UNSUPPORTED. */
int pagoda_cpu_matmul(pagoda_cpu_exec *ex, const float *x, size_t x_stride, int64_t T, int64_t K,
                      const void *w, int w_dtype, size_t w_stride, int64_t N, const float *bias,
                      float *out, size_t out_stride);

/* One matrix of pagoda_cpu_matmul_multi: out[t, :N] = x[t] * w^T (+ bias). */
typedef struct pagoda_cpu_mat {
    const void *w;
    int dtype;
    size_t w_stride;
    int64_t N;
    const float *bias;     /* [N] or NULL */
    float *out;
    size_t out_stride;
} pagoda_cpu_mat;

/* Matrices one multi call takes (Q/K/V, gate/up: 3 and 2). */
#define PAGODA_CPU_MATMUL_MAX 8

/* pagoda_cpu_matmul for n <= PAGODA_CPU_MATMUL_MAX matrices over one x
 * (each K columns): the matrices whose activations are prepared alike (the
 * same int8 layout, interleave or transpose) share one preparation of x
 * and one pool run over all their rows; the others (another layout,
 * sgemm) run as separate matmuls. Results equal n pagoda_cpu_matmul calls
 * exactly. PAGODA_ERR_INVALID for n outside 1..PAGODA_CPU_MATMUL_MAX. */
int pagoda_cpu_matmul_multi(pagoda_cpu_exec *ex, const float *x, size_t x_stride, int64_t T, int64_t K,
                            const pagoda_cpu_mat *w, int n);

/* Expert matmuls over a 3-D weight (ABI 1.5 matmul_experts, experts.c):
 * out[r] = x[xr] * W_e^T for r < R, xr = x_rows ? x_rows[r] : r, e =
 * ids[r], W_e = the N x K matrix of `dtype` at w + e * expert_stride (rows
 * w_stride apart). The rows are grouped by expert, the activations
 * prepared once per call (x's rows quantized once however many experts
 * read them) and every active expert's weights read once, in row parts of
 * all experts over the pool. Each expert's rows equal pagoda_cpu_matmul
 * over them gathered, bit for bit. ids / x_rows already checked. */
int pagoda_cpu_matmul_experts(pagoda_cpu_exec *ex, const float *x, size_t x_stride, int64_t X,
                              const int32_t *x_rows, const void *w, int dtype, size_t w_stride,
                              int64_t N, int64_t K, size_t expert_stride, const int32_t *ids,
                              int64_t R, float *out, size_t out_stride);

/* The routed rows' weighted sum (ABI 1.5 moe_combine): out[:out_rows] = 0
 * unless accumulate, then for r = 0 .. R-1 in order out[dst_rows[r]] +=
 * weights[r] * y[r] (C columns); the pool splits columns, so the bits are
 * the serial ones. */
void pagoda_cpu_moe_combine(pagoda_cpu_exec *ex, const float *y, size_t y_stride, int64_t R, int64_t C,
                            const int32_t *dst_rows, const float *weights, bool accumulate, float *out,
                            size_t out_stride, int64_t out_rows);

/* out[i, :] = f32(table[ids[i], :]); ids already checked against the table. */
int pagoda_cpu_get_rows(const void *table, int dtype, size_t row_stride, int64_t cols,
                        const int32_t *ids, int32_t n, float *out, size_t out_stride);

/* out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w. out may alias x. */
void pagoda_cpu_rms_norm(const float *x, size_t x_stride, const float *w, float eps, float *out,
                         size_t out_stride, int64_t rows, int64_t cols);

/* Rotate x in place (rows = tokens, n_heads * head_dim values each). */
void pagoda_cpu_rope(float *x, size_t x_stride, int64_t n_tokens, int n_heads, int head_dim,
                     const int32_t *positions, const pagoda_rope_params *p);

/* Store K and V rows of n tokens into their slots of `layer` (pool = the
 * KV buffer's base). */
void pagoda_cpu_kv_write(void *pool, const pagoda_kv_layout *L, int layer, const float *k,
                         size_t k_stride, const float *v, size_t v_stride, const int32_t *slots,
                         int32_t n);

/* Causal attention of every sequence in `b` over its own blocks; GQA.
 * window > 0: the query at position p reads only the keys j with
 * 0 <= p - j < window (sliding-window layers); 0: every key up to p. */
int pagoda_cpu_attention(pagoda_cpu_exec *ex, const float *q, size_t q_stride, const void *pool,
                         const pagoda_kv_layout *L, int layer, const pagoda_batch *b, int n_heads,
                         float scale, int32_t window, float *out, size_t out_stride);

/* attention with attention sinks: sinks [n_heads] (NULL: none) join each
 * head's softmax denominator (pagoda_attn_params.sinks, ABI 1.8). */
int pagoda_cpu_attention_sinks(pagoda_cpu_exec *ex, const float *q, size_t q_stride,
                               const void *pool, const pagoda_kv_layout *L, int layer,
                               const pagoda_batch *b, int n_heads, float scale, int32_t window,
                               const float *sinks, float *out, size_t out_stride);

/* out = (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha g), g = min(gate,
 * limit) (gpt-oss's experts), through the active table's swiglu_oai (the
 * SIMD levels within ~2 ulp of the scalar reference); out may alias either. */
void pagoda_cpu_swiglu_oai(const float *gate, size_t g_stride, const float *up, size_t u_stride,
                           float alpha, float limit, float *out, size_t out_stride, int64_t rows,
                           int64_t cols);

/* out = silu(gate) * up; out may alias either. */
void pagoda_cpu_swiglu(const float *gate, size_t g_stride, const float *up, size_t u_stride,
                       float *out, size_t out_stride, int64_t rows, int64_t cols);

/* out = gelu_tanh(gate) * up; out may alias either. */
void pagoda_cpu_geglu(const float *gate, size_t g_stride, const float *up, size_t u_stride,
                      float *out, size_t out_stride, int64_t rows, int64_t cols);

/* out = x * s; out may alias x. */
void pagoda_cpu_scale(const float *x, size_t x_stride, float s, float *out, size_t out_stride,
                      int64_t rows, int64_t cols);

/* out = a + b; out may alias either. */
void pagoda_cpu_add(const float *a, size_t a_stride, const float *b, size_t b_stride, float *out,
                    size_t out_stride, int64_t rows, int64_t cols);

/* The row ops above over the thread pool when the call has enough rows
 * (ops_pool.c: a prefill's; a decode step's stay on the caller); the same
 * results exactly. kv_write_mt: the slots of one call are distinct. */
void pagoda_cpu_rms_norm_mt(pagoda_cpu_exec *ex, const float *x, size_t x_stride, const float *w, float eps,
                            float *out, size_t out_stride, int64_t rows, int64_t cols);
void pagoda_cpu_rope_mt(pagoda_cpu_exec *ex, float *x, size_t x_stride, int64_t n_tokens, int n_heads,
                        int head_dim, const int32_t *positions, const pagoda_rope_params *p);
void pagoda_cpu_add_mt(pagoda_cpu_exec *ex, const float *a, size_t a_stride, const float *b, size_t b_stride,
                       float *out, size_t out_stride, int64_t rows, int64_t cols);
void pagoda_cpu_swiglu_mt(pagoda_cpu_exec *ex, const float *gate, size_t g_stride, const float *up,
                          size_t u_stride, float *out, size_t out_stride, int64_t rows, int64_t cols);
void pagoda_cpu_geglu_mt(pagoda_cpu_exec *ex, const float *gate, size_t g_stride, const float *up,
                         size_t u_stride, float *out, size_t out_stride, int64_t rows, int64_t cols);
void pagoda_cpu_swiglu_oai_mt(pagoda_cpu_exec *ex, const float *gate, size_t g_stride, const float *up,
                              size_t u_stride, float alpha, float limit, float *out, size_t out_stride,
                              int64_t rows, int64_t cols);
void pagoda_cpu_scale_mt(pagoda_cpu_exec *ex, const float *x, size_t x_stride, float s, float *out,
                         size_t out_stride, int64_t rows, int64_t cols);
void pagoda_cpu_kv_write_mt(pagoda_cpu_exec *ex, void *pool, const pagoda_kv_layout *L, int layer,
                            const float *k, size_t k_stride, const float *v, size_t v_stride,
                            const int32_t *slots, int32_t n);

/* Copy whole blocks src[i] -> dst[i] in every layer, K and V. */
void pagoda_cpu_copy_blocks(void *pool, const pagoda_kv_layout *L, const int32_t *src,
                            const int32_t *dst, int32_t n);

#endif
