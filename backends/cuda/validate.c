/*
 * validate.c: the CUDA backend's checks at the op boundary and its error
 * reports. Every op calls these on the host before it enqueues anything:
 * a tensor must have the expected type and lie inside its buffer, a KV
 * layout must fit its pool; a failed CUDA or cuBLAS call becomes a status
 * plus a message naming the call.
 *
 * Not for: launching work (ops.c, matmul.c), buffers (memory.c).
 */
#include <stdio.h>

#include "cuda_internal.h"
#include "decode.h"

/* ------------------------------------------------------------- errors */

int cu_fail(cuda_ctx *c, const char *call, cudaError_t e)
{
    int st = e == cudaErrorMemoryAllocation ? PAGODA_ERR_NOMEM : PAGODA_ERR_DEVICE;
    return c->host->error(c->host, st, "cuda: %s failed: %s (%s)", call, cudaGetErrorString(e),
                          cudaGetErrorName(e));
}

int blas_fail(cuda_ctx *c, const char *call, cublasStatus_t s)
{
    return c->host->error(c->host, PAGODA_ERR_DEVICE, "cuda: %s failed: %s (%s)", call,
                          cublasGetStatusString(s), cublasGetStatusName(s));
}

/* ------------------------------------------------------ validation */

/* A type the kernels decode (decode.h); whether it has run on a GPU is
 * info.weight_types' business (verified.txt, backend.c). */
static bool weight_type_ok(int dt) { return dt >= 0 && dt < 64 && ((PCU_WEIGHT_TYPES >> dt) & 1); }

/* Checks that `t` (of dtype `want`, or any weight type when want < 0) lies
 * inside its buffer and writes its device address. */
int tensor_at(cuda_ctx *c, const pagoda_tensor *t, const char *what, int want,
              uint8_t **p)
{
    if (!t || !t->buf) return BAD("%s: no tensor or buffer given", what);
    if (want >= 0 && t->dtype != want)
        return BAD("%s: expected %s, found %s", what, pagoda_dtype_name(want),
                   pagoda_dtype_name(t->dtype));
    if (want < 0 && !weight_type_ok(t->dtype))
        return c->host->error(c->host, PAGODA_ERR_UNSUPPORTED, "cuda: %s: type %s (%d) is not "
                              "supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, "
                              "IQ4_NL, IQ4_XS, MXFP4 are)", what,
                              pagoda_dtype_name(t->dtype), t->dtype);
    if (t->rows < 0 || t->cols < 0 || t->cols > INT32_MAX || t->rows > INT32_MAX)
        return BAD("%s: bad shape %lld x %lld", what, (long long)t->rows, (long long)t->cols);
    size_t rb = pagoda_dtype_row_bytes(t->dtype, t->cols);
    if (rb == 0 && t->cols > 0)
        return BAD("%s: %lld columns is not a whole number of %s blocks", what,
                   (long long)t->cols, pagoda_dtype_name(t->dtype));
    if (t->rows > 1 && t->row_stride < rb)
        return BAD("%s: row stride %zu is below the row size %zu", what, t->row_stride, rb);
    size_t size = t->buf->size;
    if (t->rows > 0) {
        size_t span = (size_t)(t->rows - 1);
        if (t->offset > size || rb > size - t->offset ||
            (t->row_stride && span > (size - t->offset - rb) / t->row_stride))
            return BAD("%s: %lld rows of %zu bytes (stride %zu) at offset %zu overrun its buffer"
                       " of %zu bytes", what, (long long)t->rows, rb, t->row_stride, t->offset,
                       size);
    }
    if (t->dtype == PAGODA_DTYPE_F32 && (t->offset % 4 || t->row_stride % 4))
        return BAD("%s: F32 offset %zu / stride %zu not 4-byte aligned", what, t->offset,
                   t->row_stride);
    if ((t->dtype == PAGODA_DTYPE_F16 || t->dtype == PAGODA_DTYPE_BF16) &&
        (t->offset % 2 || t->row_stride % 2))
        return BAD("%s: 16-bit offset %zu / stride %zu not 2-byte aligned", what, t->offset,
                   t->row_stride);
    *p = (uint8_t *)t->buf->ptr + t->offset;
    return PAGODA_OK;
}

/* Leading dimension in elements of `elt` bytes; a one-row tensor may have
 * any stride, but cuBLAS wants ld >= the row length. */
int64_t ld_of(const pagoda_tensor *t, size_t elt)
{
    int64_t ld = (int64_t)(t->row_stride / elt);
    return ld < t->cols ? t->cols : ld;
}

int layout_ok(cuda_ctx *c, const pagoda_buffer *kv, const pagoda_kv_layout *L, int layer)
{
    if (!kv || !L) return BAD("KV pool or layout missing");
    if (L->dtype != PAGODA_DTYPE_F32 && L->dtype != PAGODA_DTYPE_F16 &&
        L->dtype != PAGODA_DTYPE_Q8_0)
        return c->host->error(c->host, PAGODA_ERR_UNSUPPORTED,
                              "cuda: KV type %s is not supported (F32, F16, Q8_0 are)",
                              pagoda_dtype_name(L->dtype));
    if (L->dtype == PAGODA_DTYPE_Q8_0 && L->head_dim % 32)
        return BAD("Q8_0 KV layout with head_dim %d, not a multiple of 32", L->head_dim);
    if (L->kind != PAGODA_KV_SEPARATE && L->kind != PAGODA_KV_LATENT)
        return c->host->error(c->host, PAGODA_ERR_UNSUPPORTED,
                              "cuda: KV layout kind %d is not supported (0, K and V; 1, latent)",
                              L->kind);
    if (L->kind == PAGODA_KV_LATENT && L->n_kv_heads != 1)
        return BAD("latent KV layout with %d KV heads (expected 1)", L->n_kv_heads);
    if (L->n_layers <= 0 || L->n_blocks <= 0 || L->block_size <= 0 || L->n_kv_heads <= 0 ||
        L->head_dim <= 0)
        return BAD("KV layout has a non-positive field (layers %d, blocks %d, block size %d, "
                   "kv heads %d, head dim %d)", L->n_layers, L->n_blocks, L->block_size,
                   L->n_kv_heads, L->head_dim);
    if (layer < 0 || layer >= L->n_layers)
        return BAD("layer %d outside 0..%d", layer, L->n_layers - 1);
    if (pagoda_kv_pool_bytes(L) > kv->size)
        return BAD("KV pool buffer of %zu bytes is smaller than its layout's %zu", kv->size,
                   pagoda_kv_pool_bytes(L));
    return PAGODA_OK;
}
