/*
 * cuda_internal.h: what the C files of the CUDA backend plugin share: the
 * context and buffer structs, the error / early-return macros, and the
 * functions one file calls in another. Internal to backend-cuda.so (hidden
 * visibility; nothing here is exported or part of the plugin ABI).
 *
 * Files: backend.c (plugin glue: probe, create/destroy, info, ops table),
 * validate.c (checks at the op boundary, CUDA/cuBLAS error reports),
 * memory.c (buffers, upload/download, staging ring, metadata caches,
 * workspace), matmul.c (the matmul paths), ops.c (the other ops),
 * kernels.cu / kernels.h (the kernels).
 *
 * Not for: the kernel launchers (kernels.h), anything the core sees.
 */
#ifndef PAGODA_CUDA_INTERNAL_H
#define PAGODA_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "pagoda/backend.h"
#include "pagoda/host.h"

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
    void *scr;              /* matmul_experts' gathered rows and results */
    size_t scr_cap;
    meta_cache m_ids, m_pos, m_freq, m_slots, m_attn, m_copy, m_moe, m_experts;
    uint64_t weight_types;  /* what info advertises: the kernels' types cut to verified.txt */
    uint64_t kv_types;
    uint32_t ops_ok;        /* a bit per PCU_OP_* (verified.h) that may run */
} cuda_ctx;

/* ------------------------------------------------------------- errors */

/* Report a failed CUDA / cuBLAS call through c->host->error; return its
 * status (PAGODA_ERR_NOMEM for an allocation, else PAGODA_ERR_DEVICE). */
int cu_fail(cuda_ctx *c, const char *call, cudaError_t e);
int blas_fail(cuda_ctx *c, const char *call, cublasStatus_t s);

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

#define TRY(x)                 \
    do {                       \
        int st_ = (x);         \
        if (st_) return st_;   \
    } while (0)

/* ------------------------------------------------ validate.c: checks */

/* Checks that `t` (of dtype `want`, or any weight type when want < 0) lies
 * inside its buffer and writes its device address. */
int tensor_at(cuda_ctx *c, const pagoda_tensor *t, const char *what, int want, uint8_t **p);
/* Leading dimension in elements of `elt` bytes (at least the row length). */
int64_t ld_of(const pagoda_tensor *t, size_t elt);
/* Checks a KV layout (types, positive fields, layer) against its pool. */
int layout_ok(cuda_ctx *c, const pagoda_buffer *kv, const pagoda_kv_layout *L, int layer);

/* -------------------------------- memory.c: staging, caches, workspace */

/* Copies `bytes` host bytes to `dst` (device; NULL: the ring's own device
 * mirror) through the pinned ring, in stream order. */
int stage_to(cuda_ctx *c, const void *src, size_t bytes, void *dst);
/* Device copy of `bytes` (> 0) host bytes of metadata, uploaded only when
 * they differ from the last ones. */
int meta_upload(cuda_ctx *c, meta_cache *m, const void *src, size_t bytes, void **dev);
void meta_free(meta_cache *m);
/* Workspace of at least `bytes`, ordered after all earlier kernels. */
int workspace(cuda_ctx *c, size_t bytes, void **out);
/* A second one, for matmul_experts, whose matmuls use the first. */
int scratch(cuda_ctx *c, size_t bytes, void **out);

/* ops.c: PAGODA_OK when the optional op `op` (PCU_OP_*, verified.h) may
 * run here (verified.txt lists it, or allow_unverified), else a refusal
 * naming the list. */
int op_gate(cuda_ctx *c, int op);

/* --------------------------------------- the ops (pagoda_backend_ops) */

/* memory.c */
int cuda_buffer_alloc(void *ctx, int purpose, size_t size, pagoda_buffer **out);
void cuda_buffer_free(void *ctx, pagoda_buffer *buf);
int cuda_upload(void *ctx, pagoda_buffer *buf, size_t offset, const void *src, size_t size);
int cuda_download(void *ctx, const pagoda_buffer *buf, size_t offset, void *dst, size_t size);
int cuda_weights_from_host(void *ctx, const void *src, size_t size, pagoda_buffer **out);
int cuda_synchronize(void *ctx);
int cuda_buffer_address(void *ctx, const pagoda_buffer *buf, size_t offset, size_t size, void **out);

/* matmul.c */
int cuda_matmul(void *ctx, const pagoda_tensor *x, const pagoda_tensor *w,
                const pagoda_tensor *bias, const pagoda_tensor *out);
int cuda_matmul_multi(void *ctx, const pagoda_tensor *x, int32_t n, const pagoda_tensor *w,
                      const pagoda_tensor *const *bias, const pagoda_tensor *out);
int cuda_matmul_experts(void *ctx, const pagoda_tensor *x, const int32_t *x_rows,
                        const pagoda_tensor *w, int32_t n_experts, size_t expert_stride,
                        const int32_t *ids, const pagoda_tensor *out);

/* ops.c */
int cuda_get_rows(void *ctx, const pagoda_tensor *table, const int32_t *ids, int32_t n,
                  const pagoda_tensor *out);
int cuda_rms_norm(void *ctx, const pagoda_tensor *x, const pagoda_tensor *w, float eps,
                  const pagoda_tensor *out);
int cuda_rope(void *ctx, const pagoda_tensor *x, int32_t n_heads, int32_t head_dim,
              const int32_t *positions, const pagoda_rope_params *p);
int cuda_kv_write(void *ctx, pagoda_buffer *kv, const pagoda_kv_layout *L, int32_t layer,
                  const pagoda_tensor *k, const pagoda_tensor *v, const int32_t *slots,
                  int32_t n);
int cuda_attention(void *ctx, const pagoda_tensor *q, const pagoda_buffer *kv,
                   const pagoda_kv_layout *L, int32_t layer, const pagoda_batch *b,
                   int32_t n_heads, float scale, const pagoda_tensor *out);
int cuda_swiglu(void *ctx, const pagoda_tensor *gate, const pagoda_tensor *up,
                const pagoda_tensor *out);
int cuda_add(void *ctx, const pagoda_tensor *a, const pagoda_tensor *b,
             const pagoda_tensor *out);
int cuda_geglu(void *ctx, const pagoda_tensor *gate, const pagoda_tensor *up,
               const pagoda_tensor *out);
int cuda_scale(void *ctx, const pagoda_tensor *x, float s, const pagoda_tensor *out);
int cuda_swiglu_oai(void *ctx, const pagoda_tensor *gate, const pagoda_tensor *up, float alpha,
                    float limit, const pagoda_tensor *out);
int cuda_moe_combine(void *ctx, const pagoda_tensor *y, const int32_t *dst_rows,
                     const float *weights, bool accumulate, const pagoda_tensor *out);
int cuda_attention_ext(void *ctx, const pagoda_tensor *q, const pagoda_buffer *kv,
                       const pagoda_kv_layout *L, int32_t layer, const pagoda_batch *b,
                       const pagoda_attn_params *p, const pagoda_tensor *out);
int cuda_copy_blocks(void *ctx, pagoda_buffer *kv, const pagoda_kv_layout *L,
                     const int32_t *src, const int32_t *dst, int32_t n);

#endif /* PAGODA_CUDA_INTERNAL_H */
