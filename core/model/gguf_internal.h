/*
 * gguf_internal.h: what the GGUF reader (gguf.c) and writer
 * (gguf_writer.c) share: the element sizes of the value types and the
 * largest alignment either accepts.
 * Not for: anything outside core/gguf*.c; the public API is gguf.h.
 */
#ifndef PAGODA_GGUF_INTERNAL_H
#define PAGODA_GGUF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

/* general.alignment above this is refused by the reader and the writer. */
#define PAGODA_GGUF_MAX_ALIGN (1u << 20)

/* Size of one fixed-size element, 0 for strings and arrays. */
static inline size_t pagoda_gguf_vtype_size(uint32_t t)
{
    switch (t) {
    case GGUF_T_UINT8: case GGUF_T_INT8: case GGUF_T_BOOL: return 1;
    case GGUF_T_UINT16: case GGUF_T_INT16: return 2;
    case GGUF_T_UINT32: case GGUF_T_INT32: case GGUF_T_FLOAT32: return 4;
    case GGUF_T_UINT64: case GGUF_T_INT64: case GGUF_T_FLOAT64: return 8;
    default: return 0;
    }
}

#endif /* PAGODA_GGUF_INTERNAL_H */
