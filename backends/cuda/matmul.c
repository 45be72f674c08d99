/*
 * matmul.c: the CUDA backend's matmul, out[T x N] = x[T x K] * W[N x K]^T
 * (+ bias), and its choice of path by weight type and token count: cuBLAS
 * SGEMM for F32 weights, the dequant-GEMV kernel for decode (T <= 8),
 * cublasGemmEx on F16/BF16 activations for F16/BF16 weights, and chunks of
 * weights dequantised to F16 for quantised prefill.
 *
 * Not for: the kernels (kernels.cu), the other ops (ops.c).
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "verified.h"

int cuda_matmul(void *ctx, const pagoda_tensor *x, const pagoda_tensor *w,
                const pagoda_tensor *bias, const pagoda_tensor *out)
{
    cuda_ctx *c = ctx;
    uint8_t *xp, *wp, *op, *bp = NULL;
    TRY(tensor_at(c, x, "matmul x", PAGODA_DTYPE_F32, &xp));
    TRY(tensor_at(c, w, "matmul w", -1, &wp));
    TRY(tensor_at(c, out, "matmul out", PAGODA_DTYPE_F32, &op));
    int64_t T = x->rows, K = x->cols, N = w->rows;
    if (w->cols != K || out->rows != T || out->cols != N)
        return BAD("matmul: x %lld x %lld, w %lld x %lld, out %lld x %lld: expected x [T x K], "
                   "w [N x K], out [T x N]", (long long)T, (long long)K, (long long)w->rows,
                   (long long)w->cols, (long long)out->rows, (long long)out->cols);
    if (bias) {
        TRY(tensor_at(c, bias, "matmul bias", PAGODA_DTYPE_F32, &bp));
        if (bias->cols != N || bias->rows < 1)
            return BAD("matmul: bias is %lld x %lld, expected 1 x %lld", (long long)bias->rows,
                       (long long)bias->cols, (long long)N);
    }
    if (T == 0 || N == 0) return PAGODA_OK;
    CU(cudaSetDevice(c->device));
    const float one = 1.0f, zero = 0.0f;
    const float *xf = (const float *)xp;
    float *of = (float *)op;
    int64_t ldx = ld_of(x, 4), ldo = ld_of(out, 4);
    int dt = w->dtype;
    bool needs_bias = bp != NULL;

    /* cuBLAS is column-major: out^T [N x T] = w [N x K] * x^T, i.e.
     * gemm(op(A) = W^T as stored, B = x as stored). */
    if (dt == PAGODA_DTYPE_F32) {
        int ldw = (int)ld_of(w, 4);
        BL(cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)T, (int)K, &one,
                       (const float *)wp, ldw, xf, (int)ldx, &zero, of, (int)ldo));
    } else if (T <= PAGODA_CUDA_GEMV_MAX_T) {
        /* Decode: read each weight once, F32 activations, fused bias. */
        CU(pcu_gemv(c->stream, xf, ldx, (int32_t)T, wp, w->row_stride ? w->row_stride
                    : pagoda_dtype_row_bytes(dt, K), dt, N, K, (const float *)bp, of, ldo));
        needs_bias = false;
    } else if (dt == PAGODA_DTYPE_F16 || dt == PAGODA_DTYPE_BF16) {
        int bf = dt == PAGODA_DTYPE_BF16;
        cudaDataType ty = bf ? CUDA_R_16BF : CUDA_R_16F;
        void *xh;
        TRY(workspace(c, (size_t)T * (size_t)K * 2, &xh));
        CU(pcu_f32_to_half(c->stream, xf, ldx, T, K, bf, xh));
        BL(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)T, (int)K, &one, wp, ty,
                        (int)ld_of(w, 2), xh, ty, (int)K, &zero, of, CUDA_R_32F, (int)ldo,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else {
        /* Quantised weights, a prefill: dequantise chunks of rows to F16
         * and run F16 x F16 -> F32 GEMMs on them. */
        size_t xh_bytes = ((size_t)T * (size_t)K * 2 + 255) & ~(size_t)255;
        int64_t chunk = (int64_t)(DEQUANT_CHUNK_BYTES / ((size_t)K * 2));
        if (chunk < 1) chunk = 1;
        if (chunk > N) chunk = N;
        void *ws;
        TRY(workspace(c, xh_bytes + (size_t)chunk * (size_t)K * 2, &ws));
        void *xh = ws, *wh = (uint8_t *)ws + xh_bytes;
        CU(pcu_f32_to_half(c->stream, xf, ldx, T, K, 0, xh));
        for (int64_t n0 = 0; n0 < N; n0 += chunk) {
            int64_t nc = N - n0 < chunk ? N - n0 : chunk;
            CU(pcu_dequant_f16(c->stream, wp + (size_t)n0 * w->row_stride, w->row_stride, dt, nc,
                               K, wh));
            BL(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nc, (int)T, (int)K, &one, wh,
                            CUDA_R_16F, (int)K, xh, CUDA_R_16F, (int)K, &zero, of + n0,
                            CUDA_R_32F, (int)ldo, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        }
    }
    if (needs_bias) CU(pcu_add_bias(c->stream, of, ldo, T, N, (const float *)bp));
    return PAGODA_OK;
}

/* n matmuls over one x, each exactly `matmul` (the core's fallback, done
 * here so every one is validated before any is enqueued): no kernel of its
 * own, so it needs no entry in verified.txt beyond its weight types. */
int cuda_matmul_multi(void *ctx, const pagoda_tensor *x, int32_t n, const pagoda_tensor *w,
                      const pagoda_tensor *const *bias, const pagoda_tensor *out)
{
    cuda_ctx *c = ctx;
    if (n < 1 || n > PAGODA_MATMUL_MULTI_MAX || !w || !out)
        return BAD("matmul_multi: n = %d (1..%d) or no weights/outputs", n,
                   PAGODA_MATMUL_MULTI_MAX);
    for (int32_t i = 0; i < n; i++) TRY(cuda_matmul(ctx, x, &w[i], bias ? bias[i] : NULL, &out[i]));
    return PAGODA_OK;
}

/* Expert matmuls (ABI 1.5): the rows are sorted by expert on the host
 * (stable), their x rows gathered into one scratch matrix, each active
 * expert's weights read once by one `matmul` over its rows (the GEMV or
 * GEMM path by its row count), and the results scattered to their output
 * rows: 2 + (active experts) launches. */
int cuda_matmul_experts(void *ctx, const pagoda_tensor *x, const int32_t *x_rows,
                        const pagoda_tensor *w, int32_t n_experts, size_t expert_stride,
                        const int32_t *ids, const pagoda_tensor *out)
{
    cuda_ctx *c = ctx;
    uint8_t *xp, *op, *wp;
    TRY(tensor_at(c, x, "matmul_experts x", PAGODA_DTYPE_F32, &xp));
    TRY(tensor_at(c, out, "matmul_experts out", PAGODA_DTYPE_F32, &op));
    if (!w || n_experts < 1) return BAD("matmul_experts: no weights or n_experts = %d", n_experts);
    TRY(tensor_at(c, w, "matmul_experts w (expert 0)", -1, &wp));
    pagoda_tensor last = *w;
    if (expert_stride && (size_t)(n_experts - 1) > (SIZE_MAX - w->offset) / expert_stride)
        return BAD("matmul_experts: %d experts %zu bytes apart overflow", n_experts, expert_stride);
    last.offset = w->offset + (size_t)(n_experts - 1) * expert_stride;
    TRY(tensor_at(c, &last, "matmul_experts w (last expert)", -1, &wp));
    int64_t R = out->rows, K = w->cols, N = w->rows;
    if (x->cols != K || out->cols != N)
        return BAD("matmul_experts: x %lld x %lld, w %lld x %lld, out %lld x %lld: expected x "
                   "[X x K], w [N x K] per expert, out [R x N]", (long long)x->rows,
                   (long long)x->cols, (long long)N, (long long)K, (long long)R,
                   (long long)out->cols);
    if (R > 0 && !ids) return BAD("matmul_experts: no ids");
    for (int64_t r = 0; r < R; r++) {
        if (ids[r] < 0 || ids[r] >= n_experts)
            return BAD("matmul_experts: ids[%lld] = %d outside 0..%d", (long long)r, ids[r],
                       n_experts - 1);
        int64_t xr = x_rows ? x_rows[r] : r;
        if (xr < 0 || xr >= x->rows)
            return BAD("matmul_experts: row %lld reads x row %lld of %lld", (long long)r,
                       (long long)xr, (long long)x->rows);
    }
    TRY(op_gate(c, PCU_OP_MATMUL_EXPERTS));
    if (R == 0 || N == 0) return PAGODA_OK;
    CU(cudaSetDevice(c->device));

    int st = PAGODA_OK;
    int32_t *start = calloc((size_t)n_experts + 1, sizeof *start);
    int32_t *idx = malloc(2 * (size_t)R * sizeof *idx); /* gather sources, then scatter targets */
    if (!start || !idx) {
        st = c->host->error(c->host, PAGODA_ERR_NOMEM, "cuda: matmul_experts lists");
        goto out;
    }
    for (int64_t r = 0; r < R; r++) start[ids[r] + 1]++;
    for (int32_t e = 0; e < n_experts; e++) start[e + 1] += start[e];
    {
        int32_t *fill = malloc((size_t)n_experts * sizeof *fill);
        if (!fill) {
            st = c->host->error(c->host, PAGODA_ERR_NOMEM, "cuda: matmul_experts lists");
            goto out;
        }
        memcpy(fill, start, (size_t)n_experts * sizeof *fill);
        for (int64_t r = 0; r < R; r++) {
            int32_t at = fill[ids[r]]++;
            idx[at] = (int32_t)(x_rows ? x_rows[r] : r);
            idx[R + at] = (int32_t)r;
        }
        free(fill);
    }
    void *d_idx, *scr;
    st = meta_upload(c, &c->m_experts, idx, 2 * (size_t)R * sizeof *idx, &d_idx);
    if (st) goto out;
    size_t xs_bytes = ((size_t)R * (size_t)K * 4 + 255) & ~(size_t)255;
    st = scratch(c, xs_bytes + (size_t)R * (size_t)N * 4, &scr);
    if (st) goto out;
    float *xs = scr, *ys = (float *)((uint8_t *)scr + xs_bytes);
    cudaError_t e = pcu_get_rows(c->stream, xp, x->rows > 1 ? x->row_stride : (size_t)K * 4,
                                 PAGODA_DTYPE_F32, d_idx, (int32_t)R, K, xs, K);
    if (e != cudaSuccess) {
        st = cu_fail(c, "pcu_get_rows(experts' x)", e);
        goto out;
    }
    pagoda_buffer sb = {scr, xs_bytes + (size_t)R * (size_t)N * 4, PAGODA_BUF_WORKSPACE};
    for (int32_t ex = 0; ex < n_experts && !st; ex++) {
        int32_t m = start[ex + 1] - start[ex];
        if (!m) continue;
        pagoda_tensor xv = {&sb, (size_t)start[ex] * (size_t)K * 4, PAGODA_DTYPE_F32, m, K,
                            (size_t)K * 4};
        pagoda_tensor yv = {&sb, xs_bytes + (size_t)start[ex] * (size_t)N * 4, PAGODA_DTYPE_F32,
                            m, N, (size_t)N * 4};
        pagoda_tensor wv = *w;
        wv.offset = w->offset + (size_t)ex * expert_stride;
        st = cuda_matmul(ctx, &xv, &wv, NULL, &yv);
    }
    if (st) goto out;
    e = pcu_scatter_rows(c->stream, ys, N, (const int32_t *)d_idx + R, (int32_t)R, N,
                         (float *)op, ld_of(out, 4));
    if (e != cudaSuccess) st = cu_fail(c, "pcu_scatter_rows(experts' out)", e);
out:
    free(start);
    free(idx);
    return st;
}
