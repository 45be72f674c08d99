/*
 * pagoda/types.h: the small vocabulary every plugin kind shares: status
 * codes, tensor element types (numbered as GGUF/ggml number them, so a
 * GGUF tensor's type field is a pagoda_dtype as it stands), and the tensor
 * descriptor kernels take. Not for: anything with behaviour; see the
 * per-kind headers for ops tables.
 *
 * Part of the public SDK. ABI names here are permanent.
 */
#ifndef PAGODA_TYPES_H
#define PAGODA_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every fallible call returns one of these; 0 is success, errors are < 0.
 * The message that goes with an error is written through the host's
 * error reporting or an (err, err_len) out-buffer the call takes. */
typedef enum pagoda_status {
    PAGODA_OK = 0,
    PAGODA_ERR_INVALID = -1,     /* bad argument or input (a caller's fault) */
    PAGODA_ERR_NOMEM = -2,       /* an allocation failed */
    PAGODA_ERR_UNSUPPORTED = -3, /* not implemented by this plugin / on this device */
    PAGODA_ERR_NOSPACE = -4,     /* a pool (KV blocks, queue) is full: try later */
    PAGODA_ERR_IO = -5,          /* a file or socket failed */
    PAGODA_ERR_NOT_FOUND = -6,   /* no such id / key / file */
    PAGODA_ERR_STATE = -7,       /* called in the wrong state (not loaded, stopped) */
    PAGODA_ERR_DEVICE = -8,      /* the device or its runtime failed */
    PAGODA_ERR_INTERNAL = -9     /* a bug: an invariant did not hold */
} pagoda_status;

/* A short English name for a status ("invalid argument"); never NULL. */
static inline const char *pagoda_status_str(int st)
{
    switch (st) {
    case PAGODA_OK: return "ok";
    case PAGODA_ERR_INVALID: return "invalid argument";
    case PAGODA_ERR_NOMEM: return "out of memory";
    case PAGODA_ERR_UNSUPPORTED: return "not supported";
    case PAGODA_ERR_NOSPACE: return "no space";
    case PAGODA_ERR_IO: return "I/O error";
    case PAGODA_ERR_NOT_FOUND: return "not found";
    case PAGODA_ERR_STATE: return "wrong state";
    case PAGODA_ERR_DEVICE: return "device error";
    case PAGODA_ERR_INTERNAL: return "internal error";
    default: return "unknown error";
    }
}

/* Element types, numbered as in GGUF (ggml_type). Only the ones pagoda
 * reads are named; a GGUF holding another number is refused by name. */
typedef enum pagoda_dtype {
    PAGODA_DTYPE_F32 = 0,
    PAGODA_DTYPE_F16 = 1,
    PAGODA_DTYPE_Q4_0 = 2,
    PAGODA_DTYPE_Q4_1 = 3,
    PAGODA_DTYPE_Q5_0 = 6,
    PAGODA_DTYPE_Q5_1 = 7,
    PAGODA_DTYPE_Q8_0 = 8,
    PAGODA_DTYPE_Q2_K = 10,
    PAGODA_DTYPE_Q3_K = 11,
    PAGODA_DTYPE_Q4_K = 12,
    PAGODA_DTYPE_Q5_K = 13,
    PAGODA_DTYPE_Q6_K = 14,
    PAGODA_DTYPE_IQ4_NL = 20,
    PAGODA_DTYPE_IQ4_XS = 23,
    PAGODA_DTYPE_BF16 = 30,
    PAGODA_DTYPE_MXFP4 = 39, /* ABI 1.9 */
    PAGODA_DTYPE_COUNT_ = 40 /* one past the largest number a type may have */
} pagoda_dtype;

/* Block geometry of a type: `block_elems` values are stored in
 * `block_bytes` bytes (1 and 4 for F32). Returns false for an unknown type. */
static inline bool pagoda_dtype_block(int dtype, int *block_elems, int *block_bytes)
{
    int e = 0, b = 0;
    switch (dtype) {
    case PAGODA_DTYPE_F32: e = 1; b = 4; break;
    case PAGODA_DTYPE_F16: e = 1; b = 2; break;
    case PAGODA_DTYPE_BF16: e = 1; b = 2; break;
    case PAGODA_DTYPE_Q4_0: e = 32; b = 18; break;  /* f16 d; 16 bytes of nibbles */
    case PAGODA_DTYPE_Q4_1: e = 32; b = 20; break;  /* f16 d, f16 m; 16 bytes */
    case PAGODA_DTYPE_Q8_0: e = 32; b = 34; break;  /* f16 d; 32 int8 */
    case PAGODA_DTYPE_Q5_0: e = 32; b = 22; break;  /* f16 d; qh[4]; 16 bytes */
    case PAGODA_DTYPE_Q5_1: e = 32; b = 24; break;  /* f16 d, f16 m; qh[4]; 16 bytes */
    case PAGODA_DTYPE_IQ4_NL: e = 32; b = 18; break;/* f16 d; 16 bytes of table indices */
    case PAGODA_DTYPE_Q2_K: e = 256; b = 84; break; /* sc[16] qs[64] f16 d, dmin */
    case PAGODA_DTYPE_Q3_K: e = 256; b = 110; break;/* hmask[32] qs[64] sc[12] f16 d */
    case PAGODA_DTYPE_Q4_K: e = 256; b = 144; break;/* f16 d, dmin; sc[12] qs[128] */
    case PAGODA_DTYPE_Q5_K: e = 256; b = 176; break;/* f16 d, dmin; sc[12] qh[32] qs[128] */
    case PAGODA_DTYPE_Q6_K: e = 256; b = 210; break;/* ql[128] qh[64] sc[16] f16 d */
    case PAGODA_DTYPE_IQ4_XS: e = 256; b = 136; break;/* f16 d; u16 sc_h; sc_l[4]; qs[128] */
    case PAGODA_DTYPE_MXFP4: e = 32; b = 17; break; /* E8M0 e; 16 bytes of E2M1 codes */
    default: return false;
    }
    if (block_elems) *block_elems = e;
    if (block_bytes) *block_bytes = b;
    return true;
}

/* "F32", "Q4_0", ...; "unknown" for a type this SDK does not name. */
static inline const char *pagoda_dtype_name(int dtype)
{
    switch (dtype) {
    case PAGODA_DTYPE_F32: return "F32";
    case PAGODA_DTYPE_F16: return "F16";
    case PAGODA_DTYPE_BF16: return "BF16";
    case PAGODA_DTYPE_Q4_0: return "Q4_0";
    case PAGODA_DTYPE_Q4_1: return "Q4_1";
    case PAGODA_DTYPE_Q8_0: return "Q8_0";
    case PAGODA_DTYPE_Q5_0: return "Q5_0";
    case PAGODA_DTYPE_Q5_1: return "Q5_1";
    case PAGODA_DTYPE_Q2_K: return "Q2_K";
    case PAGODA_DTYPE_Q3_K: return "Q3_K";
    case PAGODA_DTYPE_Q4_K: return "Q4_K";
    case PAGODA_DTYPE_Q5_K: return "Q5_K";
    case PAGODA_DTYPE_Q6_K: return "Q6_K";
    case PAGODA_DTYPE_IQ4_NL: return "IQ4_NL";
    case PAGODA_DTYPE_IQ4_XS: return "IQ4_XS";
    case PAGODA_DTYPE_MXFP4: return "MXFP4";
    default: return "unknown";
    }
}

/* Bytes of one row of `cols` values of `dtype` (cols must be a multiple of
 * the block size); 0 for an unknown type. */
static inline size_t pagoda_dtype_row_bytes(int dtype, int64_t cols)
{
    int e, b;
    if (!pagoda_dtype_block(dtype, &e, &b) || cols % e) return 0;
    return (size_t)(cols / e) * (size_t)b;
}

/* Memory a backend allocates. Opaque to everyone but its backend. */
typedef struct pagoda_buffer pagoda_buffer;

/* A 2-D view into a backend buffer: `rows` rows of `cols` values of `dtype`,
 * row r starting at byte offset + r * row_stride. Kernels never own the
 * memory a tensor names. Activations are always F32. */
typedef struct pagoda_tensor {
    pagoda_buffer *buf;
    size_t offset;      /* bytes from the start of buf */
    int32_t dtype;      /* pagoda_dtype */
    int64_t rows;
    int64_t cols;
    size_t row_stride;  /* bytes between row starts */
} pagoda_tensor;

/* Log levels for pagoda_host.log. */
enum { PAGODA_LOG_ERROR = 0, PAGODA_LOG_WARN = 1, PAGODA_LOG_INFO = 2, PAGODA_LOG_DEBUG = 3 };

#ifdef __cplusplus
}
#endif
#endif /* PAGODA_TYPES_H */
