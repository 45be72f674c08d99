/*
 * kernels.cu: the CUDA kernels of the CUDA backend and their C launchers
 * (declared in kernels.h). Plain, readable kernels: one CUDA block per row
 * or per (token, head), F32 arithmetic everywhere, weight types decoded
 * per element by load_w<DT>(). This is the only CUDA C++ file, to keep the
 * build short. Not for: validation (validate.c, ops.c, matmul.c) or cuBLAS.
 */
#include "kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include "decode.h"
#include "pagoda/types.h"

static_assert(PAGODA_CUDA_GEMV_MAX_T == PCU_GEMV_MAX_T, "kernels.h and decode.h disagree");

/* ------------------------------------------------------------ weight decode */

/* Value k of a weight row of type DT: decode.h's formulas (the ones the
 * unit test checks on the CPU against pagoda_dequantize_row, bit for bit),
 * with DT a constant so the type switch folds away. */
template <int DT> __device__ __forceinline__ float load_w(const uint8_t *row, int k)
{
    return pcu_dq(DT, row, k);
}

/* Calls LAUNCH(DT) for the runtime dtype `dt`; unknown types fall out as
 * cudaErrorInvalidValue (validate.c refuses them first). */
#define DISPATCH_DTYPE(dt, LAUNCH)                                  \
    switch (dt) {                                                   \
    case PAGODA_DTYPE_F32: LAUNCH(PAGODA_DTYPE_F32); break;         \
    case PAGODA_DTYPE_F16: LAUNCH(PAGODA_DTYPE_F16); break;         \
    case PAGODA_DTYPE_BF16: LAUNCH(PAGODA_DTYPE_BF16); break;       \
    case PAGODA_DTYPE_Q8_0: LAUNCH(PAGODA_DTYPE_Q8_0); break;       \
    case PAGODA_DTYPE_Q4_0: LAUNCH(PAGODA_DTYPE_Q4_0); break;       \
    case PAGODA_DTYPE_Q4_1: LAUNCH(PAGODA_DTYPE_Q4_1); break;       \
    case PAGODA_DTYPE_Q5_0: LAUNCH(PAGODA_DTYPE_Q5_0); break;       \
    case PAGODA_DTYPE_Q5_1: LAUNCH(PAGODA_DTYPE_Q5_1); break;       \
    case PAGODA_DTYPE_Q2_K: LAUNCH(PAGODA_DTYPE_Q2_K); break;       \
    case PAGODA_DTYPE_Q3_K: LAUNCH(PAGODA_DTYPE_Q3_K); break;       \
    case PAGODA_DTYPE_Q4_K: LAUNCH(PAGODA_DTYPE_Q4_K); break;       \
    case PAGODA_DTYPE_Q5_K: LAUNCH(PAGODA_DTYPE_Q5_K); break;       \
    case PAGODA_DTYPE_Q6_K: LAUNCH(PAGODA_DTYPE_Q6_K); break;       \
    case PAGODA_DTYPE_IQ4_NL: LAUNCH(PAGODA_DTYPE_IQ4_NL); break;   \
    case PAGODA_DTYPE_IQ4_XS: LAUNCH(PAGODA_DTYPE_IQ4_XS); break;   \
    case PAGODA_DTYPE_MXFP4: LAUNCH(PAGODA_DTYPE_MXFP4); break;     \
    default: return cudaErrorInvalidValue;                          \
    }

/* ------------------------------------------------------------- reductions */

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Every thread gets the block's sum (or max). `red` holds 32 floats; the
 * leading barrier lets a block call this twice in a row. */
__device__ float block_reduce(float v, float *red, bool is_max)
{
    v = is_max ? warp_max(v) : warp_sum(v);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    float r = red[0];
    for (int i = 1; i < nw; i++) r = is_max ? fmaxf(r, red[i]) : r + red[i];
    return r;
}

/* ---------------------------------------------------------------- get_rows */

template <int DT>
__global__ void k_get_rows(const uint8_t *table, size_t row_bytes, const int32_t *ids,
                           int cols, float *out, int64_t ld)
{
    const uint8_t *row = table + (size_t)ids[blockIdx.x] * row_bytes;
    float *o = out + (int64_t)blockIdx.x * ld;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) o[c] = load_w<DT>(row, c);
}

extern "C" cudaError_t pcu_get_rows(cudaStream_t s, const uint8_t *table, size_t row_bytes,
                                    int dtype, const int32_t *ids, int32_t n, int64_t cols,
                                    float *out, int64_t ld_out)
{
    if (n <= 0) return cudaSuccess;
#define L(DT) k_get_rows<DT><<<n, 256, 0, s>>>(table, row_bytes, ids, (int)cols, out, ld_out)
    DISPATCH_DTYPE(dtype, L)
#undef L
    return cudaGetLastError();
}

/* ------------------------------------------------------- matmul helpers */

template <int DT>
__global__ void k_dequant_f16(const uint8_t *w, size_t row_bytes, int cols, __half *out)
{
    const uint8_t *row = w + (size_t)blockIdx.x * row_bytes;
    __half *o = out + (size_t)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) o[c] = __float2half(load_w<DT>(row, c));
}

extern "C" cudaError_t pcu_dequant_f16(cudaStream_t s, const uint8_t *w, size_t row_bytes,
                                       int dtype, int64_t rows, int64_t cols, void *out_f16)
{
    if (rows <= 0) return cudaSuccess;
#define L(DT) k_dequant_f16<DT><<<(unsigned)rows, 256, 0, s>>>(w, row_bytes, (int)cols, (__half *)out_f16)
    DISPATCH_DTYPE(dtype, L)
#undef L
    return cudaGetLastError();
}

__global__ void k_f32_to_half(const float *x, int64_t ld, int cols, int bf16, void *out)
{
    const float *r = x + (int64_t)blockIdx.x * ld;
    size_t base = (size_t)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        if (bf16)
            ((__nv_bfloat16 *)out)[base + c] = __float2bfloat16(r[c]);
        else
            ((__half *)out)[base + c] = __float2half(r[c]);
    }
}

extern "C" cudaError_t pcu_f32_to_half(cudaStream_t s, const float *x, int64_t ld, int64_t rows,
                                       int64_t cols, int bf16, void *out)
{
    if (rows <= 0) return cudaSuccess;
    k_f32_to_half<<<(unsigned)rows, 256, 0, s>>>(x, ld, (int)cols, bf16, out);
    return cudaGetLastError();
}

/* One warp per output column n, all T tokens at once, so each weight byte
 * is read once per launch: the decode path, where T is the batch size.
 * The lane sums are decode.h's pcu_gemv_lane (checked on the CPU by
 * test_cuda_probe, butterfly included). */
template <int DT>
__global__ void k_gemv(const float *x, int64_t ldx, int T, const uint8_t *w, size_t w_row_bytes,
                       int N, int K, const float *bias, float *out, int64_t ldo)
{
    int lane = threadIdx.x & 31;
    int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (n >= N) return;
    float acc[PCU_GEMV_MAX_T];
    pcu_gemv_lane(DT, w + (size_t)n * w_row_bytes, x, ldx, T, K, lane, 32, acc);
#pragma unroll
    for (int t = 0; t < PCU_GEMV_MAX_T; t++) {
        float v = warp_sum(acc[t]);
        if (lane == 0 && t < T) out[(int64_t)t * ldo + n] = v + (bias ? bias[n] : 0.0f);
    }
}

extern "C" cudaError_t pcu_gemv(cudaStream_t s, const float *x, int64_t ldx, int32_t T,
                                const uint8_t *w, size_t w_row_bytes, int dtype, int64_t N,
                                int64_t K, const float *bias, float *out, int64_t ldo)
{
    if (T <= 0 || N <= 0) return cudaSuccess;
    if (T > PAGODA_CUDA_GEMV_MAX_T) return cudaErrorInvalidValue;
    unsigned blocks = (unsigned)((N + 3) / 4);
#define L(DT) k_gemv<DT><<<blocks, 128, 0, s>>>(x, ldx, T, w, w_row_bytes, (int)N, (int)K, bias, out, ldo)
    DISPATCH_DTYPE(dtype, L)
#undef L
    return cudaGetLastError();
}

__global__ void k_add_bias(float *out, int64_t ldo, int N, const float *bias)
{
    float *o = out + (int64_t)blockIdx.x * ldo;
    for (int n = threadIdx.x; n < N; n += blockDim.x) o[n] += bias[n];
}

extern "C" cudaError_t pcu_add_bias(cudaStream_t s, float *out, int64_t ldo, int64_t T, int64_t N,
                                    const float *bias)
{
    if (T <= 0) return cudaSuccess;
    k_add_bias<<<(unsigned)T, 256, 0, s>>>(out, ldo, (int)N, bias);
    return cudaGetLastError();
}

/* ---------------------------------------------------------------- rms_norm */

__global__ void k_rms_norm(const float *x, int64_t ldx, const float *w, float eps, int cols,
                           float *out, int64_t ldo)
{
    __shared__ float red[32];
    const float *r = x + (int64_t)blockIdx.x * ldx;
    float *o = out + (int64_t)blockIdx.x * ldo;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) ss += r[c] * r[c];
    ss = block_reduce(ss, red, false);
    float inv = 1.0f / sqrtf(ss / (float)cols + eps);
    /* out may alias x: each element is read before it is written, by the
     * same thread, and the sum was complete before any write. */
    for (int c = threadIdx.x; c < cols; c += blockDim.x) o[c] = r[c] * inv * w[c];
}

extern "C" cudaError_t pcu_rms_norm(cudaStream_t s, const float *x, int64_t ldx, const float *w,
                                    float eps, int64_t rows, int64_t cols, float *out, int64_t ldo)
{
    if (rows <= 0) return cudaSuccess;
    k_rms_norm<<<(unsigned)rows, 256, 0, s>>>(x, ldx, w, eps, (int)cols, out, ldo);
    return cudaGetLastError();
}

/* -------------------------------------------------------------------- rope */

__global__ void k_rope(float *x, int64_t ldx, int head_dim, const int32_t *pos,
                       const float *inv_freq, int n_rot, int neox, float mscale)
{
    float *hx = x + (int64_t)blockIdx.x * ldx + (int64_t)blockIdx.y * head_dim;
    int half = n_rot / 2;
    double p = (double)pos[blockIdx.x];
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        /* The angle in double, as the CPU backend does: pos * inv_freq
         * reaches thousands of radians, where a float angle is off. */
        double theta = p * (double)inv_freq[i];
        float c = (float)cos(theta) * mscale, sn = (float)sin(theta) * mscale;
        int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        float x0 = hx[a], x1 = hx[b];
        hx[a] = x0 * c - x1 * sn;
        hx[b] = x0 * sn + x1 * c;
    }
}

extern "C" cudaError_t pcu_rope(cudaStream_t s, float *x, int64_t ldx, int32_t n_tokens,
                                int32_t n_heads, int32_t head_dim, const int32_t *pos,
                                const float *inv_freq, int32_t n_rot, int neox, float mscale)
{
    if (n_tokens <= 0 || n_rot <= 0) return cudaSuccess;
    dim3 grid((unsigned)n_tokens, (unsigned)n_heads);
    k_rope<<<grid, 64, 0, s>>>(x, ldx, head_dim, pos, inv_freq, n_rot, neox, mscale);
    return cudaGetLastError();
}

/* ---------------------------------------------------------------- kv_write */

/* One slot's K and V rows of type KDT. F32 and F16: a thread per value
 * (F16 rounded to nearest even, as pagoda_fp32_to_fp16); Q8_0: a thread
 * per 32-value block, decode.h's pcu_q8_0_quant. head_bytes: one head's
 * bytes; rows are n_kv_heads heads side by side. */
template <int KDT>
__device__ __forceinline__ void kv_store_row(uint8_t *dst, const float *src, int row)
{
    if (KDT == PAGODA_DTYPE_F32) {
        for (int j = threadIdx.x; j < row; j += blockDim.x) ((float *)dst)[j] = src[j];
    } else if (KDT == PAGODA_DTYPE_F16) {
        for (int j = threadIdx.x; j < row; j += blockDim.x)
            ((__half *)dst)[j] = __float2half_rn(src[j]);
    } else { /* Q8_0: row is a multiple of 32 (the head dims are) */
        for (int blk = threadIdx.x; blk < row / 32; blk += blockDim.x) {
            float d;
            int8_t q[32];
            pcu_q8_0_quant(src + 32 * blk, &d, q);
            uint8_t *o = dst + 34 * (size_t)blk;
            unsigned short h = __half_as_ushort(__float2half_rn(d));
            o[0] = (uint8_t)h;
            o[1] = (uint8_t)(h >> 8);
            for (int j = 0; j < 32; j++) o[2 + j] = (uint8_t)q[j];
        }
    }
}

template <int KDT>
__global__ void k_kv_write(uint8_t *kb, uint8_t *vb, int block_size, size_t block_bytes,
                           size_t slot_bytes, int row, const float *k, int64_t ldk,
                           const float *v, int64_t ldv, const int32_t *slots)
{
    int slot = slots[blockIdx.x];
    size_t off = (size_t)(slot / block_size) * block_bytes + (size_t)(slot % block_size) * slot_bytes;
    kv_store_row<KDT>(kb + off, k + (int64_t)blockIdx.x * ldk, row);
    kv_store_row<KDT>(vb + off, v + (int64_t)blockIdx.x * ldv, row);
}

#define DISPATCH_KV(dt, LAUNCH)                                     \
    switch (dt) {                                                   \
    case PAGODA_DTYPE_F32: LAUNCH(PAGODA_DTYPE_F32); break;         \
    case PAGODA_DTYPE_F16: LAUNCH(PAGODA_DTYPE_F16); break;         \
    case PAGODA_DTYPE_Q8_0: LAUNCH(PAGODA_DTYPE_Q8_0); break;       \
    default: return cudaErrorInvalidValue;                          \
    }

extern "C" cudaError_t pcu_kv_write(cudaStream_t s, void *k_base, void *v_base, int kv_dtype,
                                    int32_t block_size, size_t block_bytes, size_t slot_bytes,
                                    int64_t row, const float *k, int64_t ldk, const float *v,
                                    int64_t ldv, const int32_t *slots, int32_t n)
{
    if (n <= 0) return cudaSuccess;
#define L(DT) k_kv_write<DT><<<n, 128, 0, s>>>((uint8_t *)k_base, (uint8_t *)v_base, block_size, \
                                               block_bytes, slot_bytes, (int)row, k, ldk, v, ldv, slots)
    DISPATCH_KV(kv_dtype, L)
#undef L
    return cudaGetLastError();
}

/* --------------------------------------------------------------- attention */

#define ATT_THREADS 128 /* also the key tile: one score per thread slot */

/* One block per (query token, head). Keys are visited in tiles of
 * ATT_THREADS: a warp per key computes the score, then the tile is folded
 * into the running (max, sum, acc) of the online softmax, a thread per
 * output dimension. The block table is read directly (no gather): key j
 * of the token's sequence is slot j % block_size of block bt[j /
 * block_size]. window > 0: only the last `window` keys (positions p - W +
 * 1 .. p), and no key before them is read. Values are decoded with
 * decode.h (F32, F16, Q8_0 heads). */
template <int KDT>
__global__ void k_attention(const float *q, int64_t ldq, float *out, int64_t ldo,
                            const uint8_t *kb, const uint8_t *vb, int block_size,
                            size_t block_bytes, size_t head_bytes, int n_kv_heads, int hd,
                            int group, float scale, int window, const float *sinks,
                            const int32_t *tok_kvlen, const int32_t *tok_bt,
                            const int32_t *block_tables)
{
    extern __shared__ float sm[];
    float *q_s = sm, *acc = sm + hd, *p_s = acc + hd, *red = p_s + ATT_THREADS;
    const int t = blockIdx.x, h = blockIdx.y, kvh = h / group;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int n_keys = tok_kvlen[t];
    const int first = window > 0 && n_keys > window ? n_keys - window : 0;
    const int32_t *bt = block_tables + tok_bt[t];
    const float *qr = q + (int64_t)t * ldq + (int64_t)h * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        q_s[d] = qr[d];
        acc[d] = 0.0f;
    }
    __syncthreads();
    /* A sink (ABI 1.8) is one more logit with a zero value row: start the
     * running max at it with its e^0 = 1 in the sum. */
    float m = sinks ? sinks[h] : -INFINITY, l = sinks ? 1.0f : 0.0f;
    for (int j0 = first; j0 < n_keys; j0 += ATT_THREADS) {
        int tile = min(ATT_THREADS, n_keys - j0);
        for (int jj = warp; jj < tile; jj += nwarps) {
            int j = j0 + jj;
            const uint8_t *kp = kb + (size_t)bt[j / block_size] * block_bytes +
                                ((size_t)(j % block_size) * n_kv_heads + kvh) * head_bytes;
            float sacc = 0.0f;
            for (int d = lane; d < hd; d += 32) sacc += q_s[d] * pcu_dq(KDT, kp, d);
            sacc = warp_sum(sacc);
            if (lane == 0) p_s[jj] = sacc * scale;
        }
        __syncthreads();
        float lm = -INFINITY;
        for (int jj = threadIdx.x; jj < tile; jj += blockDim.x) lm = fmaxf(lm, p_s[jj]);
        float m_new = fmaxf(m, block_reduce(lm, red, true));
        float alpha = expf(m - m_new);
        float ls = 0.0f;
        for (int jj = threadIdx.x; jj < tile; jj += blockDim.x) {
            float p = expf(p_s[jj] - m_new);
            p_s[jj] = p;
            ls += p;
        }
        l = l * alpha + block_reduce(ls, red, false); /* its barriers publish p_s */
        m = m_new;
        for (int d = threadIdx.x; d < hd; d += blockDim.x) {
            float a = acc[d] * alpha;
            for (int jj = 0; jj < tile; jj++) {
                int j = j0 + jj;
                const uint8_t *vp = vb + (size_t)bt[j / block_size] * block_bytes +
                                    ((size_t)(j % block_size) * n_kv_heads + kvh) * head_bytes;
                a += p_s[jj] * pcu_dq(KDT, vp, d);
            }
            acc[d] = a;
        }
        __syncthreads(); /* p_s is rewritten by the next tile */
    }
    float *o = out + (int64_t)t * ldo + (int64_t)h * hd;
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) o[d] = acc[d] * inv;
}

extern "C" cudaError_t pcu_attention(cudaStream_t s, const float *q, int64_t ldq, float *out,
                                     int64_t ldo, const void *k_base, const void *v_base,
                                     int kv_dtype, int32_t block_size, size_t block_bytes,
                                     size_t head_bytes, int32_t n_kv_heads, int32_t head_dim,
                                     int32_t n_heads, float scale, int32_t window,
                                     const float *sinks, int32_t n_tokens,
                                     const int32_t *tok_kvlen,
                                     const int32_t *tok_bt, const int32_t *block_tables)
{
    if (n_tokens <= 0) return cudaSuccess;
    dim3 grid((unsigned)n_tokens, (unsigned)n_heads);
    size_t shmem = (size_t)(2 * head_dim + ATT_THREADS + 32) * sizeof(float);
    int group = n_heads / n_kv_heads;
#define L(DT) k_attention<DT><<<grid, ATT_THREADS, shmem, s>>>(q, ldq, out, ldo, \
        (const uint8_t *)k_base, (const uint8_t *)v_base, block_size, block_bytes, head_bytes, \
        n_kv_heads, head_dim, group, scale, window, sinks, tok_kvlen, tok_bt, block_tables)
    DISPATCH_KV(kv_dtype, L)
#undef L
    return cudaGetLastError();
}

/* ------------------------------------------------------ elementwise ops */

__global__ void k_swiglu(const float *g, int64_t ldg, const float *u, int64_t ldu, float *out,
                         int64_t ldo, int cols)
{
    const float *gr = g + (int64_t)blockIdx.x * ldg, *ur = u + (int64_t)blockIdx.x * ldu;
    float *o = out + (int64_t)blockIdx.x * ldo;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float gv = gr[c];
        o[c] = gv / (1.0f + expf(-gv)) * ur[c];
    }
}

extern "C" cudaError_t pcu_swiglu(cudaStream_t s, const float *g, int64_t ldg, const float *u,
                                  int64_t ldu, float *out, int64_t ldo, int64_t rows, int64_t cols)
{
    if (rows <= 0) return cudaSuccess;
    k_swiglu<<<(unsigned)rows, 256, 0, s>>>(g, ldg, u, ldu, out, ldo, (int)cols);
    return cudaGetLastError();
}

__global__ void k_geglu(const float *g, int64_t ldg, const float *u, int64_t ldu, float *out,
                        int64_t ldo, int cols)
{
    const float *gr = g + (int64_t)blockIdx.x * ldg, *ur = u + (int64_t)blockIdx.x * ldu;
    float *o = out + (int64_t)blockIdx.x * ldo;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) o[c] = pcu_geglu(gr[c], ur[c]);
}

extern "C" cudaError_t pcu_geglu_k(cudaStream_t s, const float *g, int64_t ldg, const float *u,
                                   int64_t ldu, float *out, int64_t ldo, int64_t rows, int64_t cols)
{
    if (rows <= 0) return cudaSuccess;
    k_geglu<<<(unsigned)rows, 256, 0, s>>>(g, ldg, u, ldu, out, ldo, (int)cols);
    return cudaGetLastError();
}

__global__ void k_scale(const float *x, int64_t ldx, float sc, float *out, int64_t ldo, int cols)
{
    const float *r = x + (int64_t)blockIdx.x * ldx;
    float *o = out + (int64_t)blockIdx.x * ldo;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) o[c] = r[c] * sc;
}

extern "C" cudaError_t pcu_scale(cudaStream_t s, const float *x, int64_t ldx, float sc, float *out,
                                 int64_t ldo, int64_t rows, int64_t cols)
{
    if (rows <= 0) return cudaSuccess;
    k_scale<<<(unsigned)rows, 256, 0, s>>>(x, ldx, sc, out, ldo, (int)cols);
    return cudaGetLastError();
}

__global__ void k_add(const float *a, int64_t lda, const float *b, int64_t ldb, float *out,
                      int64_t ldo, int cols)
{
    const float *ar = a + (int64_t)blockIdx.x * lda, *br = b + (int64_t)blockIdx.x * ldb;
    float *o = out + (int64_t)blockIdx.x * ldo;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) o[c] = ar[c] + br[c];
}

extern "C" cudaError_t pcu_add(cudaStream_t s, const float *a, int64_t lda, const float *b,
                               int64_t ldb, float *out, int64_t ldo, int64_t rows, int64_t cols)
{
    if (rows <= 0) return cudaSuccess;
    k_add<<<(unsigned)rows, 256, 0, s>>>(a, lda, b, ldb, out, ldo, (int)cols);
    return cudaGetLastError();
}

__global__ void k_swiglu_oai(const float *g, int64_t ldg, const float *u, int64_t ldu,
                             float alpha, float limit, float *out, int64_t ldo, int cols)
{
    const float *gr = g + (int64_t)blockIdx.x * ldg, *ur = u + (int64_t)blockIdx.x * ldu;
    float *o = out + (int64_t)blockIdx.x * ldo;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        o[c] = pcu_swiglu_oai(gr[c], ur[c], alpha, limit);
}

extern "C" cudaError_t pcu_swiglu_oai_k(cudaStream_t s, const float *g, int64_t ldg,
                                        const float *u, int64_t ldu, float alpha, float limit,
                                        float *out, int64_t ldo, int64_t rows, int64_t cols)
{
    if (rows <= 0) return cudaSuccess;
    k_swiglu_oai<<<(unsigned)rows, 256, 0, s>>>(g, ldg, u, ldu, alpha, limit, out, ldo, (int)cols);
    return cudaGetLastError();
}

/* ------------------------------------------------------ experts (MoE) */

/* out[idx[i]] = y[i] for i < n, rows of `cols` floats. */
__global__ void k_scatter_rows(const float *y, int64_t ldy, const int32_t *idx, int cols,
                               float *out, int64_t ldo)
{
    const float *r = y + (int64_t)blockIdx.x * ldy;
    float *o = out + (int64_t)idx[blockIdx.x] * ldo;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) o[c] = r[c];
}

extern "C" cudaError_t pcu_scatter_rows(cudaStream_t s, const float *y, int64_t ldy,
                                        const int32_t *idx, int32_t n, int64_t cols, float *out,
                                        int64_t ldo)
{
    if (n <= 0) return cudaSuccess;
    k_scatter_rows<<<(unsigned)n, 256, 0, s>>>(y, ldy, idx, (int)cols, out, ldo);
    return cudaGetLastError();
}

/* moe_combine: a thread per column runs r = 0, 1, ... in order, so every
 * out element gets its terms in the contract's order. */
__global__ void k_moe_combine(const float *y, int64_t ldy, int R, const int32_t *dst,
                              const float *wts, int accumulate, int out_rows, float *out,
                              int64_t ldo, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    if (!accumulate)
        for (int i = 0; i < out_rows; i++) out[(int64_t)i * ldo + c] = 0.0f;
    for (int r = 0; r < R; r++) {
        float *o = out + (int64_t)dst[r] * ldo + c;
        *o += wts[r] * y[(int64_t)r * ldy + c];
    }
}

extern "C" cudaError_t pcu_moe_combine(cudaStream_t s, const float *y, int64_t ldy, int32_t R,
                                       const int32_t *dst, const float *wts, int accumulate,
                                       int32_t out_rows, float *out, int64_t ldo, int64_t cols)
{
    if (cols <= 0) return cudaSuccess;
    k_moe_combine<<<(unsigned)((cols + 127) / 128), 128, 0, s>>>(y, ldy, R, dst, wts, accumulate,
                                                                  out_rows, out, ldo, (int)cols);
    return cudaGetLastError();
}

/* ------------------------------------------------------------ copy_blocks */

__global__ void k_copy_blocks(uint8_t *pool, int n_blocks, size_t block_bytes,
                              const int32_t *src, const int32_t *dst)
{
    size_t plane = (size_t)blockIdx.y * (size_t)n_blocks;
    const uint8_t *sp = pool + (plane + (size_t)src[blockIdx.x]) * block_bytes;
    uint8_t *dp = pool + (plane + (size_t)dst[blockIdx.x]) * block_bytes;
    if (block_bytes % 16 == 0) { /* cudaMalloc bases are 256-aligned */
        const uint4 *s4 = (const uint4 *)sp;
        uint4 *d4 = (uint4 *)dp;
        for (size_t i = threadIdx.x; i < block_bytes / 16; i += blockDim.x) d4[i] = s4[i];
    } else {
        for (size_t i = threadIdx.x; i < block_bytes; i += blockDim.x) dp[i] = sp[i];
    }
}

extern "C" cudaError_t pcu_copy_blocks(cudaStream_t s, uint8_t *pool, int32_t n_planes,
                                       int32_t n_blocks, size_t block_bytes, const int32_t *src,
                                       const int32_t *dst, int32_t n)
{
    if (n <= 0 || n_planes <= 0) return cudaSuccess;
    if (n_planes > 65535) return cudaErrorInvalidValue;
    dim3 grid((unsigned)n, (unsigned)n_planes);
    k_copy_blocks<<<grid, 256, 0, s>>>(pool, n_blocks, block_bytes, src, dst);
    return cudaGetLastError();
}

/* ------------------------------------------------------------ image check */

extern "C" cudaError_t pcu_check_image(void)
{
    cudaFuncAttributes a;
    return cudaFuncGetAttributes(&a, k_add);
}
