/*
 * memory.c: device memory of the CUDA backend: buffers (cudaMalloc only),
 * upload / download / weights_from_host / synchronize, the metadata
 * staging and the matmul workspace.
 *
 * Metadata (ids, positions, slots, block tables) travels through a pinned
 * staging ring (so copies stay asynchronous) into device buffers that are
 * reused while their content is unchanged: the same positions, slots and
 * block tables serve every layer of a step.
 *
 * Not for: the ops that read these buffers (ops.c, matmul.c).
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

/* -------------------------------------------------- metadata upload */

/* Copies `bytes` host bytes to `dst` (device) through the pinned ring, in
 * stream order. The ring restarts after a stream synchronisation, the only
 * point where every earlier copy out of it is known to be done. */
int stage_to(cuda_ctx *c, const void *src, size_t bytes, void *dst)
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
int meta_upload(cuda_ctx *c, meta_cache *m, const void *src, size_t bytes, void **dev)
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

void meta_free(meta_cache *m)
{
    cudaFree(m->dev);
    free(m->host);
    memset(m, 0, sizeof *m);
}

/* Grows *buf to at least `bytes` (after the stream drains: kernels may
 * still read the old one). */
static int grow(cuda_ctx *c, void **buf, size_t *cap, size_t bytes, void **out)
{
    if (bytes > *cap) {
        CU(cudaStreamSynchronize(c->stream));
        cudaFree(*buf);
        *buf = NULL;
        *cap = 0;
        CU(cudaMalloc(buf, bytes));
        *cap = bytes;
    }
    *out = *buf;
    return PAGODA_OK;
}

int scratch(cuda_ctx *c, size_t bytes, void **out)
{
    return grow(c, &c->scr, &c->scr_cap, bytes, out);
}

/* Workspace of at least `bytes`, ordered after all earlier kernels. */
int workspace(cuda_ctx *c, size_t bytes, void **out)
{
    return grow(c, &c->ws, &c->ws_cap, bytes, out);
}

/* ---------------------------------------------------------- buffers */

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

int cuda_buffer_alloc(void *ctx, int purpose, size_t size, pagoda_buffer **out)
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

void cuda_buffer_free(void *ctx, pagoda_buffer *buf)
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

int cuda_upload(void *ctx, pagoda_buffer *buf, size_t offset, const void *src, size_t size)
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

int cuda_download(void *ctx, const pagoda_buffer *buf, size_t offset, void *dst,
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

int cuda_weights_from_host(void *ctx, const void *src, size_t size, pagoda_buffer **out)
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

/* ABI 1.12: the device address, for a device-memory comm (NCCL) on this
 * GPU; the core synchronizes first. */
int cuda_buffer_address(void *ctx, const pagoda_buffer *buf, size_t offset, size_t size, void **out)
{
    cuda_ctx *c = ctx;
    if (!out) return BAD("buffer_address: no output");
    TRY(range_ok(c, buf, offset, size, "buffer_address"));
    *out = (uint8_t *)buf->ptr + offset;
    return PAGODA_OK;
}

int cuda_synchronize(void *ctx)
{
    cuda_ctx *c = ctx;
    CU(cudaSetDevice(c->device));
    CU(cudaStreamSynchronize(c->stream));
    c->ring_head = 0;
    return PAGODA_OK;
}
