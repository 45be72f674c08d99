/*
 * backend.c: the CUDA backend plugin (backend-cuda.so). Implements
 * pagoda_backend_ops on one CUDA device and one stream: device memory
 * through cudaMalloc only, GEMMs through cuBLAS, everything else through
 * the kernels of kernels.cu. Every op validates its tensors against their
 * buffers on the host, then enqueues asynchronously; `synchronize` and
 * `download` wait. Every CUDA and cuBLAS status is checked and reported
 * through host->error naming the call.
 *
 * Metadata (ids, positions, slots, block tables) travels through a pinned
 * staging ring (so copies stay asynchronous) into device buffers that are
 * reused while their content is unchanged: the same positions, slots and
 * block tables serve every layer of a step.
 *
 * Not for: the kernels themselves (kernels.cu), tensor parallelism.
 */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "pagoda/backend.h"
#include "pagoda/host.h"
#include "pagoda/plugin.h"

#ifndef PAGODA_CUDA_MIN_SM
#define PAGODA_CUDA_MIN_SM 80 /* set by CMakeLists.txt from CMAKE_CUDA_ARCHITECTURES */
#endif

#define RING_BYTES (1u << 20)         /* pinned staging ring for metadata */
#define DEQUANT_CHUNK_BYTES (64u << 20) /* F16 weight rows dequantised per GEMM */

struct pagoda_buffer {
    void *ptr;
    size_t size;
    int purpose;
};

/* A device copy of some metadata, reused while the host bytes match. */
typedef struct meta_cache {
    void *dev;
    size_t cap;
    void *host;   /* the bytes now on the device */
    size_t bytes;
    bool valid;
} meta_cache;

typedef struct cuda_ctx {
    const pagoda_host *host;
    int device;
    char dev_name[256];
    int cc;                 /* compute capability, 90 for sm_90 */
    cudaStream_t stream;
    cublasHandle_t blas;
    uint8_t *ring;          /* pinned host */
    uint8_t *ring_dev;      /* its device mirror, same offsets */
    size_t ring_cap, ring_head;
    void *ws;               /* matmul workspace (F16 activations, dequantised weights) */
    size_t ws_cap;
    int32_t *hmeta;         /* host scratch to build attention metadata */
    size_t hmeta_cap;
    meta_cache m_ids, m_pos, m_freq, m_slots, m_attn, m_copy;
} cuda_ctx;

/* ------------------------------------------------------------- errors */

static int cu_fail(cuda_ctx *c, const char *call, cudaError_t e)
{
    int st = e == cudaErrorMemoryAllocation ? PAGODA_ERR_NOMEM : PAGODA_ERR_DEVICE;
    return c->host->error(c->host, st, "cuda: %s failed: %s (%s)", call, cudaGetErrorString(e),
                          cudaGetErrorName(e));
}

static int blas_fail(cuda_ctx *c, const char *call, cublasStatus_t s)
{
    return c->host->error(c->host, PAGODA_ERR_DEVICE, "cuda: %s failed: %s (%s)", call,
                          cublasGetStatusString(s), cublasGetStatusName(s));
}

/* Return from the calling op on a failed CUDA / cuBLAS call. */
#define CU(call)                                                  \
    do {                                                          \
        cudaError_t e_ = (call);                                  \
        if (e_ != cudaSuccess) return cu_fail(c, #call, e_);      \
    } while (0)
#define BL(call)                                                  \
    do {                                                          \
        cublasStatus_t s_ = (call);                               \
        if (s_ != CUBLAS_STATUS_SUCCESS) return blas_fail(c, #call, s_); \
    } while (0)
#define BAD(...) c->host->error(c->host, PAGODA_ERR_INVALID, "cuda: " __VA_ARGS__)

/* ------------------------------------------------------ validation */

static bool weight_type_ok(int dt)
{
    switch (dt) {
    case PAGODA_DTYPE_F32: case PAGODA_DTYPE_F16: case PAGODA_DTYPE_BF16:
    case PAGODA_DTYPE_Q8_0: case PAGODA_DTYPE_Q4_0: case PAGODA_DTYPE_Q4_1:
    case PAGODA_DTYPE_Q6_K:
        return true;
    default:
        return false;
    }
}

/* Checks that `t` (of dtype `want`, or any weight type when want < 0) lies
 * inside its buffer and writes its device address. */
static int tensor_at(cuda_ctx *c, const pagoda_tensor *t, const char *what, int want,
                     uint8_t **p)
{
    if (!t || !t->buf) return BAD("%s: no tensor or buffer given", what);
    if (want >= 0 && t->dtype != want)
        return BAD("%s: expected %s, found %s", what, pagoda_dtype_name(want),
                   pagoda_dtype_name(t->dtype));
    if (want < 0 && !weight_type_ok(t->dtype))
        return c->host->error(c->host, PAGODA_ERR_UNSUPPORTED, "cuda: %s: type %s (%d) is not "
                              "supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q6_K are)", what,
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
static int64_t ld_of(const pagoda_tensor *t, size_t elt)
{
    int64_t ld = (int64_t)(t->row_stride / elt);
    return ld < t->cols ? t->cols : ld;
}

static int layout_ok(cuda_ctx *c, const pagoda_buffer *kv, const pagoda_kv_layout *L, int layer)
{
    if (!kv || !L) return BAD("KV pool or layout missing");
    if (L->dtype != PAGODA_DTYPE_F32 && L->dtype != PAGODA_DTYPE_F16)
        return c->host->error(c->host, PAGODA_ERR_UNSUPPORTED,
                              "cuda: KV type %s is not supported (F32, F16 are)",
                              pagoda_dtype_name(L->dtype));
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

/* -------------------------------------------------- metadata upload */

/* Copies `bytes` host bytes to `dst` (device) through the pinned ring, in
 * stream order. The ring restarts after a stream synchronisation, the only
 * point where every earlier copy out of it is known to be done. */
static int stage_to(cuda_ctx *c, const void *src, size_t bytes, void *dst)
{
    size_t need = (bytes + 255) & ~(size_t)255;
    if (need > c->ring_cap) {
        size_t cap = c->ring_cap * 2 > need ? c->ring_cap * 2 : need;
        CU(cudaStreamSynchronize(c->stream));
        cudaFreeHost(c->ring);
        cudaFree(c->ring_dev);
        c->ring = NULL;
        c->ring_dev = NULL;
        c->ring_cap = c->ring_head = 0;
        CU(cudaMallocHost((void **)&c->ring, cap));
        CU(cudaMalloc((void **)&c->ring_dev, cap));
        c->ring_cap = cap;
    } else if (c->ring_head + need > c->ring_cap) {
        CU(cudaStreamSynchronize(c->stream));
        c->ring_head = 0;
    }
    uint8_t *h = c->ring + c->ring_head;
    memcpy(h, src, bytes);
    if (!dst) dst = c->ring_dev + c->ring_head;
    c->ring_head += need;
    CU(cudaMemcpyAsync(dst, h, bytes, cudaMemcpyHostToDevice, c->stream));
    return PAGODA_OK;
}

/* Device copy of `bytes` (> 0) host bytes of metadata, uploaded only when
 * they differ from the last ones. */
static int meta_upload(cuda_ctx *c, meta_cache *m, const void *src, size_t bytes, void **dev)
{
    if (m->valid && m->bytes == bytes && memcmp(m->host, src, bytes) == 0) {
        *dev = m->dev;
        return PAGODA_OK;
    }
    if (bytes > m->cap) {
        size_t cap = bytes * 2 < 4096 ? 4096 : bytes * 2;
        void *h = realloc(m->host, cap);
        if (!h) return c->host->error(c->host, PAGODA_ERR_NOMEM, "cuda: metadata copy of %zu bytes", cap);
        m->host = h;
        CU(cudaStreamSynchronize(c->stream)); /* kernels may still read the old one */
        cudaFree(m->dev);
        m->dev = NULL;
        m->cap = 0;
        m->valid = false;
        CU(cudaMalloc(&m->dev, cap));
        m->cap = cap;
    }
    m->valid = false;
    int st = stage_to(c, src, bytes, m->dev);
    if (st) return st;
    memcpy(m->host, src, bytes);
    m->bytes = bytes;
    m->valid = true;
    *dev = m->dev;
    return PAGODA_OK;
}

static void meta_free(meta_cache *m)
{
    cudaFree(m->dev);
    free(m->host);
    memset(m, 0, sizeof *m);
}

/* Workspace of at least `bytes`, ordered after all earlier kernels. */
static int workspace(cuda_ctx *c, size_t bytes, void **out)
{
    if (bytes > c->ws_cap) {
        CU(cudaStreamSynchronize(c->stream));
        cudaFree(c->ws);
        c->ws = NULL;
        c->ws_cap = 0;
        CU(cudaMalloc(&c->ws, bytes));
        c->ws_cap = bytes;
    }
    *out = c->ws;
    return PAGODA_OK;
}

/* ---------------------------------------------------------- probe */

static int cuda_probe(char *why, size_t why_len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(why, why_len, "no usable CUDA driver or GPU: %s (%s)", cudaGetErrorString(e),
                 cudaGetErrorName(e));
        return 0;
    }
    if (n == 0) {
        snprintf(why, why_len, "the CUDA driver reports no device");
        return 0;
    }
    int best = 0;
    for (int i = 0; i < n; i++) {
        int ma = 0, mi = 0;
        if (cudaDeviceGetAttribute(&ma, cudaDevAttrComputeCapabilityMajor, i) == cudaSuccess &&
            cudaDeviceGetAttribute(&mi, cudaDevAttrComputeCapabilityMinor, i) == cudaSuccess &&
            ma * 10 + mi > best)
            best = ma * 10 + mi;
    }
    if (best < PAGODA_CUDA_MIN_SM) {
        snprintf(why, why_len, "%d CUDA device(s), the newest is sm_%d; this build has kernels "
                 "for sm_%d and newer (rebuild with CMAKE_CUDA_ARCHITECTURES)", n, best,
                 PAGODA_CUDA_MIN_SM);
        return 0;
    }
    snprintf(why, why_len, "%d CUDA device(s), up to sm_%d", n, best);
    return 90;
}

/* ---------------------------------------------------- create/destroy */

static void cuda_destroy(void *ctx)
{
    cuda_ctx *c = ctx;
    if (!c) return;
    cudaSetDevice(c->device);
    if (c->stream) cudaStreamSynchronize(c->stream);
    meta_cache *ms[] = {&c->m_ids, &c->m_pos, &c->m_freq, &c->m_slots, &c->m_attn, &c->m_copy};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) meta_free(ms[i]);
    cudaFree(c->ws);
    cudaFree(c->ring_dev);
    cudaFreeHost(c->ring);
    free(c->hmeta);
    if (c->blas) cublasDestroy(c->blas);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
}

static int cuda_create(const pagoda_host *host, void **out, char *err, size_t err_len)
{
    char why[256];
    int st = PAGODA_ERR_DEVICE;
    cudaError_t e = cudaSuccess;
    const char *call = NULL;
    cuda_ctx *c = NULL;
    *out = NULL;
    if (cuda_probe(why, sizeof why) == 0) {
        snprintf(err, err_len, "cuda: cannot run here: %s", why);
        return PAGODA_ERR_DEVICE;
    }
    int n = 0;
    cudaGetDeviceCount(&n);
    int64_t dev = host && host->config_int ? host->config_int(host, "device", 0) : 0;
    if (dev < 0 || dev >= n) {
        snprintf(err, err_len, "cuda: [backend.cuda] device = %lld, but there are %d device(s) "
                 "(0..%d); set CUDA_VISIBLE_DEVICES or device", (long long)dev, n, n - 1);
        return PAGODA_ERR_INVALID;
    }
    c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_len, "cuda: out of memory for the context");
        return PAGODA_ERR_NOMEM;
    }
    c->host = host;
    c->device = (int)dev;

#define STEP(x)                           \
    do {                                  \
        e = (x);                          \
        if (e != cudaSuccess) {           \
            call = #x;                    \
            goto fail;                    \
        }                                 \
    } while (0)
    struct cudaDeviceProp prop;
    STEP(cudaSetDevice(c->device));
    STEP(cudaGetDeviceProperties(&prop, c->device));
    snprintf(c->dev_name, sizeof c->dev_name, "%s", prop.name);
    c->cc = prop.major * 10 + prop.minor;
    STEP(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    /* Are our kernels runnable on this device (an image for its sm)? */
    STEP(pcu_check_image());
    STEP(cudaMallocHost((void **)&c->ring, RING_BYTES));
    STEP(cudaMalloc((void **)&c->ring_dev, RING_BYTES));
    c->ring_cap = RING_BYTES;
#undef STEP
    cublasStatus_t bs = cublasCreate(&c->blas);
    if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetStream(c->blas, c->stream);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, err_len, "cuda: cublasCreate/cublasSetStream failed: %s",
                 cublasGetStatusString(bs));
        goto out_fail;
    }
    if (host && host->log)
        host->log(host, PAGODA_LOG_INFO, "cuda: device %d: %s, sm_%d, %.1f GiB", c->device,
                  c->dev_name, c->cc, (double)prop.totalGlobalMem / (1024.0 * 1024 * 1024));
    *out = c;
    return PAGODA_OK;

fail:
    snprintf(err, err_len, "cuda: %s failed on device %d: %s (%s)", call, c->device,
             cudaGetErrorString(e), cudaGetErrorName(e));
    if (e == cudaErrorMemoryAllocation) st = PAGODA_ERR_NOMEM;
out_fail:
    cuda_destroy(c);
    return st;
}

/* ---------------------------------------------------- info, buffers */

static int cuda_info(void *ctx, pagoda_backend_info *info)
{
    cuda_ctx *c = ctx;
    pagoda_backend_info full;
    memset(&full, 0, sizeof full);
    CU(cudaSetDevice(c->device));
    size_t fr = 0, tot = 0;
    CU(cudaMemGetInfo(&fr, &tot));
    snprintf(full.name, sizeof full.name, "cuda %d: %.40s (sm_%d)", c->device % 100, c->dev_name,
             c->cc % 1000);
    full.mem_total = tot;
    full.mem_free = fr;
    full.alignment = 256;
    full.weight_types = (1ull << PAGODA_DTYPE_F32) | (1ull << PAGODA_DTYPE_F16) |
                        (1ull << PAGODA_DTYPE_BF16) | (1ull << PAGODA_DTYPE_Q8_0) |
                        (1ull << PAGODA_DTYPE_Q4_0) | (1ull << PAGODA_DTYPE_Q4_1) |
                        (1ull << PAGODA_DTYPE_Q6_K);
    full.kv_types = (1ull << PAGODA_DTYPE_F32) | (1ull << PAGODA_DTYPE_F16);
    full.host_memory = false;
    /* An older core's struct is shorter: fill only what it has. */
    size_t n = info->struct_size && info->struct_size < sizeof full ? info->struct_size : sizeof full;
    size_t keep = info->struct_size;
    memcpy(info, &full, n);
    info->struct_size = keep;
    return PAGODA_OK;
}

static const char *purpose_name(int p)
{
    switch (p) {
    case PAGODA_BUF_WEIGHTS: return "weights";
    case PAGODA_BUF_KV: return "KV pool";
    case PAGODA_BUF_ACTIVATIONS: return "activations";
    case PAGODA_BUF_WORKSPACE: return "workspace";
    default: return "buffer";
    }
}

static int cuda_buffer_alloc(void *ctx, int purpose, size_t size, pagoda_buffer **out)
{
    cuda_ctx *c = ctx;
    *out = NULL;
    CU(cudaSetDevice(c->device));
    pagoda_buffer *b = calloc(1, sizeof *b);
    if (!b) return c->host->error(c->host, PAGODA_ERR_NOMEM, "cuda: out of host memory");
    b->size = size;
    b->purpose = purpose;
    cudaError_t e = cudaMalloc(&b->ptr, size ? size : 1);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaGetLastError(); /* an allocation failure is not sticky: clear it */
        cudaMemGetInfo(&fr, &tot);
        free(b);
        return c->host->error(c->host, e == cudaErrorMemoryAllocation ? PAGODA_ERR_NOMEM
                                                                     : PAGODA_ERR_DEVICE,
                              "cuda: cudaMalloc of %zu bytes for the %s failed: %s (%zu of %zu "
                              "bytes free on device %d)", size, purpose_name(purpose),
                              cudaGetErrorString(e), fr, tot, c->device);
    }
    *out = b;
    return PAGODA_OK;
}

static void cuda_buffer_free(void *ctx, pagoda_buffer *buf)
{
    cuda_ctx *c = ctx;
    if (!buf) return;
    cudaSetDevice(c->device);
    /* Kernels queued earlier may still use it. */
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e == cudaSuccess) e = cudaFree(buf->ptr);
    if (e != cudaSuccess && c->host->log)
        c->host->log(c->host, PAGODA_LOG_WARN, "cuda: freeing a %s buffer: %s",
                     purpose_name(buf->purpose), cudaGetErrorString(e));
    free(buf);
}

static int range_ok(cuda_ctx *c, const pagoda_buffer *b, size_t off, size_t size, const char *op)
{
    if (!b) return BAD("%s: no buffer", op);
    if (off > b->size || size > b->size - off)
        return BAD("%s: %zu bytes at offset %zu overrun a buffer of %zu bytes", op, size, off,
                   b->size);
    return PAGODA_OK;
}

static int cuda_upload(void *ctx, pagoda_buffer *buf, size_t offset, const void *src, size_t size)
{
    cuda_ctx *c = ctx;
    int st = range_ok(c, buf, offset, size, "upload");
    if (st || size == 0) return st;
    CU(cudaSetDevice(c->device));
    uint8_t *dst = (uint8_t *)buf->ptr + offset;
    if (size <= c->ring_cap / 4) return stage_to(c, src, size, dst);
    /* Large: from pageable memory, then wait so `src` may be reused. */
    CU(cudaMemcpyAsync(dst, src, size, cudaMemcpyHostToDevice, c->stream));
    CU(cudaStreamSynchronize(c->stream));
    c->ring_head = 0;
    return PAGODA_OK;
}

static int cuda_download(void *ctx, const pagoda_buffer *buf, size_t offset, void *dst,
                         size_t size)
{
    cuda_ctx *c = ctx;
    int st = range_ok(c, buf, offset, size, "download");
    if (st) return st;
    CU(cudaSetDevice(c->device));
    if (size)
        CU(cudaMemcpyAsync(dst, (const uint8_t *)buf->ptr + offset, size, cudaMemcpyDeviceToHost,
                           c->stream));
    CU(cudaStreamSynchronize(c->stream));
    c->ring_head = 0;
    return PAGODA_OK;
}

static int cuda_weights_from_host(void *ctx, const void *src, size_t size, pagoda_buffer **out)
{
    cuda_ctx *c = ctx;
    int st = cuda_buffer_alloc(ctx, PAGODA_BUF_WEIGHTS, size, out);
    if (st) return st;
    cudaError_t e = cudaMemcpyAsync((*out)->ptr, src, size, cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        st = cu_fail(c, "cudaMemcpyAsync(weights from host)", e);
        cuda_buffer_free(ctx, *out);
        *out = NULL;
    }
    return st;
}

static int cuda_synchronize(void *ctx)
{
    cuda_ctx *c = ctx;
    CU(cudaSetDevice(c->device));
    CU(cudaStreamSynchronize(c->stream));
    c->ring_head = 0;
    return PAGODA_OK;
}

/* ------------------------------------------------------------ kernels */

#define TRY(x)                 \
    do {                       \
        int st_ = (x);         \
        if (st_) return st_;   \
    } while (0)

static int cuda_get_rows(void *ctx, const pagoda_tensor *table, const int32_t *ids, int32_t n,
                         const pagoda_tensor *out)
{
    cuda_ctx *c = ctx;
    uint8_t *tp, *op;
    void *d_ids;
    TRY(tensor_at(c, table, "get_rows table", -1, &tp));
    TRY(tensor_at(c, out, "get_rows out", PAGODA_DTYPE_F32, &op));
    if (n > 0 && !ids) return BAD("get_rows: no ids");
    if (n < 0 || out->rows < n || out->cols != table->cols)
        return BAD("get_rows: out is %lld x %lld, expected at least %d x %lld",
                   (long long)out->rows, (long long)out->cols, n, (long long)table->cols);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= table->rows)
            return BAD("get_rows: id %d at %d outside the table's 0..%lld", ids[i], i,
                       (long long)table->rows - 1);
    if (n == 0) return PAGODA_OK;
    CU(cudaSetDevice(c->device));
    TRY(meta_upload(c, &c->m_ids, ids, (size_t)n * sizeof *ids, &d_ids));
    CU(pcu_get_rows(c->stream, tp, table->row_stride, table->dtype, d_ids, n, table->cols,
                    (float *)op, ld_of(out, 4)));
    return PAGODA_OK;
}

static int cuda_rms_norm(void *ctx, const pagoda_tensor *x, const pagoda_tensor *w, float eps,
                         const pagoda_tensor *out)
{
    cuda_ctx *c = ctx;
    uint8_t *xp, *wp, *op;
    TRY(tensor_at(c, x, "rms_norm x", PAGODA_DTYPE_F32, &xp));
    TRY(tensor_at(c, w, "rms_norm w", PAGODA_DTYPE_F32, &wp));
    TRY(tensor_at(c, out, "rms_norm out", PAGODA_DTYPE_F32, &op));
    if (w->cols != x->cols || w->rows < 1 || out->rows != x->rows || out->cols != x->cols)
        return BAD("rms_norm: x %lld x %lld, w %lld x %lld, out %lld x %lld do not match",
                   (long long)x->rows, (long long)x->cols, (long long)w->rows,
                   (long long)w->cols, (long long)out->rows, (long long)out->cols);
    CU(cudaSetDevice(c->device));
    CU(pcu_rms_norm(c->stream, (const float *)xp, ld_of(x, 4), (const float *)wp, eps, x->rows,
                    x->cols, (float *)op, ld_of(out, 4)));
    return PAGODA_OK;
}

static int cuda_matmul(void *ctx, const pagoda_tensor *x, const pagoda_tensor *w,
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

static int cuda_rope(void *ctx, const pagoda_tensor *x, int32_t n_heads, int32_t head_dim,
                     const int32_t *positions, const pagoda_rope_params *p)
{
    cuda_ctx *c = ctx;
    uint8_t *xp;
    void *d_pos, *d_freq;
    TRY(tensor_at(c, x, "rope x", PAGODA_DTYPE_F32, &xp));
    if (!p || n_heads <= 0 || head_dim <= 0 || (int64_t)n_heads * head_dim > x->cols)
        return BAD("rope: %d heads x %d dims do not fit rows of %lld values", n_heads, head_dim,
                   (long long)x->cols);
    if (p->n_rot < 0 || p->n_rot % 2 || p->n_rot > head_dim || (p->n_rot && !p->inv_freq))
        return BAD("rope: n_rot %d must be even and within 0..%d, with inv_freq", p->n_rot,
                   head_dim);
    if (x->rows == 0 || p->n_rot == 0) return PAGODA_OK;
    if (!positions) return BAD("rope: no positions");
    CU(cudaSetDevice(c->device));
    TRY(meta_upload(c, &c->m_pos, positions, (size_t)x->rows * sizeof *positions, &d_pos));
    TRY(meta_upload(c, &c->m_freq, p->inv_freq, (size_t)(p->n_rot / 2) * sizeof(float), &d_freq));
    CU(pcu_rope(c->stream, (float *)xp, ld_of(x, 4), (int32_t)x->rows, n_heads, head_dim,
                d_pos, d_freq, p->n_rot, p->neox, p->mscale));
    return PAGODA_OK;
}

static int cuda_kv_write(void *ctx, pagoda_buffer *kv, const pagoda_kv_layout *L, int32_t layer,
                         const pagoda_tensor *k, const pagoda_tensor *v, const int32_t *slots,
                         int32_t n)
{
    cuda_ctx *c = ctx;
    uint8_t *kp, *vp;
    void *d_slots;
    TRY(layout_ok(c, kv, L, layer));
    TRY(tensor_at(c, k, "kv_write k", PAGODA_DTYPE_F32, &kp));
    TRY(tensor_at(c, v, "kv_write v", PAGODA_DTYPE_F32, &vp));
    int64_t row = (int64_t)L->n_kv_heads * L->head_dim;
    if (n < 0 || k->rows < n || v->rows < n || k->cols != row || v->cols != row)
        return BAD("kv_write: k %lld x %lld, v %lld x %lld for %d tokens of %lld values",
                   (long long)k->rows, (long long)k->cols, (long long)v->rows,
                   (long long)v->cols, n, (long long)row);
    if (n > 0 && !slots) return BAD("kv_write: no slots");
    int64_t n_slots = (int64_t)L->n_blocks * L->block_size;
    for (int32_t i = 0; i < n; i++)
        if (slots[i] < 0 || slots[i] >= n_slots)
            return BAD("kv_write: slot %d of token %d outside 0..%lld", slots[i], i,
                       (long long)n_slots - 1);
    if (n == 0) return PAGODA_OK;
    CU(cudaSetDevice(c->device));
    TRY(meta_upload(c, &c->m_slots, slots, (size_t)n * sizeof *slots, &d_slots));
    uint8_t *pool = kv->ptr;
    CU(pcu_kv_write(c->stream, pool + pagoda_kv_offset(L, layer, 0, 0),
                    pool + pagoda_kv_offset(L, layer, 1, 0), L->dtype == PAGODA_DTYPE_F16,
                    L->block_size, (int64_t)L->block_size * row, row, (const float *)kp,
                    ld_of(k, 4), (const float *)vp, ld_of(v, 4), d_slots, n));
    return PAGODA_OK;
}

static int cuda_attention(void *ctx, const pagoda_tensor *q, const pagoda_buffer *kv,
                          const pagoda_kv_layout *L, int32_t layer, const pagoda_batch *b,
                          int32_t n_heads, float scale, const pagoda_tensor *out)
{
    cuda_ctx *c = ctx;
    uint8_t *qp, *op;
    TRY(layout_ok(c, kv, L, layer));
    TRY(tensor_at(c, q, "attention q", PAGODA_DTYPE_F32, &qp));
    TRY(tensor_at(c, out, "attention out", PAGODA_DTYPE_F32, &op));
    if (!b || b->n_tokens < 0 || b->n_seqs < 0 || (b->n_seqs && !b->seqs))
        return BAD("attention: no batch");
    int hd = L->head_dim;
    if (n_heads <= 0 || n_heads % L->n_kv_heads || q->cols != (int64_t)n_heads * hd ||
        out->cols != q->cols || q->rows < b->n_tokens || out->rows < b->n_tokens)
        return BAD("attention: q %lld x %lld / out %lld x %lld for %d tokens, %d heads (a "
                   "multiple of %d KV heads) of %d dims", (long long)q->rows,
                   (long long)q->cols, (long long)out->rows, (long long)out->cols, b->n_tokens,
                   n_heads, L->n_kv_heads, hd);
    if (b->n_tokens == 0) return PAGODA_OK;

    /* Per token: keys it sees and where its table starts; then the tables
     * (only the blocks covering ctx_len). */
    size_t n_bt = 0;
    int32_t next_q = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const pagoda_seq_view *sv = &b->seqs[s];
        if (sv->q_start != next_q || sv->n_q < 0 || sv->ctx_len < sv->n_q ||
            (int64_t)sv->n_blocks * L->block_size < sv->ctx_len || (sv->n_blocks && !sv->block_table))
            return BAD("attention: sequence %d (q_start %d, n_q %d, ctx_len %d, %d blocks of %d) "
                       "is not the next rows %d.. of the batch or its blocks do not hold its "
                       "context", s, sv->q_start, sv->n_q, sv->ctx_len, sv->n_blocks,
                       L->block_size, next_q);
        next_q += sv->n_q;
        n_bt += (size_t)((sv->ctx_len + L->block_size - 1) / L->block_size);
    }
    if (next_q != b->n_tokens)
        return BAD("attention: the sequences cover %d rows, the batch has %d tokens", next_q,
                   b->n_tokens);
    size_t words = 2 * (size_t)b->n_tokens + n_bt;
    if (words > c->hmeta_cap) {
        int32_t *h = realloc(c->hmeta, words * 2 * sizeof *h);
        if (!h) return c->host->error(c->host, PAGODA_ERR_NOMEM, "cuda: attention metadata");
        c->hmeta = h;
        c->hmeta_cap = words * 2;
    }
    int32_t *kvlen = c->hmeta, *btoff = kvlen + b->n_tokens, *bt = btoff + b->n_tokens;
    size_t at = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const pagoda_seq_view *sv = &b->seqs[s];
        int32_t nb = (sv->ctx_len + L->block_size - 1) / L->block_size;
        for (int32_t i = 0; i < sv->n_q; i++) {
            kvlen[sv->q_start + i] = sv->ctx_len - sv->n_q + i + 1;
            btoff[sv->q_start + i] = (int32_t)at;
        }
        for (int32_t j = 0; j < nb; j++) {
            if (sv->block_table[j] < 0 || sv->block_table[j] >= L->n_blocks)
                return BAD("attention: sequence %d block %d is %d, outside 0..%d", s, j,
                           sv->block_table[j], L->n_blocks - 1);
            bt[at++] = sv->block_table[j];
        }
    }
    CU(cudaSetDevice(c->device));
    void *d_meta;
    TRY(meta_upload(c, &c->m_attn, c->hmeta, words * sizeof(int32_t), &d_meta));
    const int32_t *dm = d_meta;
    const uint8_t *pool = kv->ptr;
    int64_t row = (int64_t)L->n_kv_heads * hd;
    CU(pcu_attention(c->stream, (const float *)qp, ld_of(q, 4), (float *)op, ld_of(out, 4),
                     pool + pagoda_kv_offset(L, layer, 0, 0), pool + pagoda_kv_offset(L, layer, 1, 0),
                     L->dtype == PAGODA_DTYPE_F16, L->block_size, (int64_t)L->block_size * row,
                     L->n_kv_heads, hd, n_heads, scale, b->n_tokens, dm, dm + b->n_tokens,
                     dm + 2 * b->n_tokens));
    return PAGODA_OK;
}

/* Two F32 tensors of one shape plus an output of that shape. */
static int same_shape3(cuda_ctx *c, const char *op, const pagoda_tensor *a, const pagoda_tensor *b,
                       const pagoda_tensor *o, uint8_t **ap, uint8_t **bp, uint8_t **opp)
{
    TRY(tensor_at(c, a, op, PAGODA_DTYPE_F32, ap));
    TRY(tensor_at(c, b, op, PAGODA_DTYPE_F32, bp));
    TRY(tensor_at(c, o, op, PAGODA_DTYPE_F32, opp));
    if (a->rows != b->rows || a->cols != b->cols || o->rows != a->rows || o->cols != a->cols)
        return BAD("%s: shapes %lld x %lld, %lld x %lld, out %lld x %lld differ", op,
                   (long long)a->rows, (long long)a->cols, (long long)b->rows,
                   (long long)b->cols, (long long)o->rows, (long long)o->cols);
    return PAGODA_OK;
}

static int cuda_swiglu(void *ctx, const pagoda_tensor *gate, const pagoda_tensor *up,
                       const pagoda_tensor *out)
{
    cuda_ctx *c = ctx;
    uint8_t *gp, *up_, *op;
    TRY(same_shape3(c, "swiglu", gate, up, out, &gp, &up_, &op));
    CU(cudaSetDevice(c->device));
    CU(pcu_swiglu(c->stream, (const float *)gp, ld_of(gate, 4), (const float *)up_, ld_of(up, 4),
                  (float *)op, ld_of(out, 4), out->rows, out->cols));
    return PAGODA_OK;
}

static int cuda_add(void *ctx, const pagoda_tensor *a, const pagoda_tensor *b,
                    const pagoda_tensor *out)
{
    cuda_ctx *c = ctx;
    uint8_t *ap, *bp, *op;
    TRY(same_shape3(c, "add", a, b, out, &ap, &bp, &op));
    CU(cudaSetDevice(c->device));
    CU(pcu_add(c->stream, (const float *)ap, ld_of(a, 4), (const float *)bp, ld_of(b, 4),
               (float *)op, ld_of(out, 4), out->rows, out->cols));
    return PAGODA_OK;
}

static int cuda_copy_blocks(void *ctx, pagoda_buffer *kv, const pagoda_kv_layout *L,
                            const int32_t *src, const int32_t *dst, int32_t n)
{
    cuda_ctx *c = ctx;
    TRY(layout_ok(c, kv, L, 0));
    if (n < 0) return BAD("copy_blocks: n = %d", n);
    if (n == 0) return PAGODA_OK;
    if (!src || !dst) return BAD("copy_blocks: no block lists");
    int32_t *pairs = malloc(2 * (size_t)n * sizeof *pairs);
    if (!pairs) return c->host->error(c->host, PAGODA_ERR_NOMEM, "cuda: copy_blocks list");
    int st = PAGODA_OK;
    for (int32_t i = 0; i < n; i++) {
        if (src[i] < 0 || src[i] >= L->n_blocks || dst[i] < 0 || dst[i] >= L->n_blocks) {
            st = BAD("copy_blocks: pair %d (%d -> %d) outside blocks 0..%d", i, src[i], dst[i],
                     L->n_blocks - 1);
            goto out;
        }
        pairs[i] = src[i];
        pairs[n + i] = dst[i];
    }
    cudaError_t e = cudaSetDevice(c->device);
    if (e != cudaSuccess) {
        st = cu_fail(c, "cudaSetDevice", e);
        goto out;
    }
    void *d;
    st = meta_upload(c, &c->m_copy, pairs, 2 * (size_t)n * sizeof *pairs, &d);
    if (st) goto out;
    e = pcu_copy_blocks(c->stream, kv->ptr, 2 * L->n_layers, L->n_blocks,
                        pagoda_kv_block_bytes(L), d, (const int32_t *)d + n, n);
    if (e != cudaSuccess) st = cu_fail(c, "pcu_copy_blocks", e);
out:
    free(pairs);
    return st;
}

/* ------------------------------------------------------------- plugin */

static const pagoda_backend_ops cuda_ops = {
    .struct_size = sizeof(pagoda_backend_ops),
    .info = cuda_info,
    .buffer_alloc = cuda_buffer_alloc,
    .buffer_free = cuda_buffer_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .weights_from_host = cuda_weights_from_host,
    .get_rows = cuda_get_rows,
    .rms_norm = cuda_rms_norm,
    .matmul = cuda_matmul,
    .rope = cuda_rope,
    .kv_write = cuda_kv_write,
    .attention = cuda_attention,
    .swiglu = cuda_swiglu,
    .add = cuda_add,
    .copy_blocks = cuda_copy_blocks,
    .synchronize = cuda_synchronize,
};

static const pagoda_config_key cuda_keys[] = {
    {"device", PAGODA_KEY_INT, "0", 0, 1024,
     "CUDA device index as the CUDA runtime numbers them (after CUDA_VISIBLE_DEVICES)"},
    {NULL, 0, NULL, 0, 0, NULL},
};

static const pagoda_plugin_desc cuda_desc = {
    PAGODA_DESC_HEADER(PAGODA_KIND_BACKEND),
    .name = "cuda",
    .version = "0.1.0",
    .description = "NVIDIA GPUs: cuBLAS GEMMs, CUDA kernels, paged attention",
    .config_keys = cuda_keys,
    .probe = cuda_probe,
    .create = cuda_create,
    .destroy = cuda_destroy,
    .ops = &cuda_ops,
};

PAGODA_PLUGIN(cuda_desc)
