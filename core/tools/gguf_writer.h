/*
 * core/tools/gguf_writer.h: a streaming GGUF v3 writer for the model
 * generator and for tests that craft fixtures. Not for: reading or
 * validating GGUF files (core/model/gguf.h); the serving core never writes
 * a model.
 */
#ifndef PAGODA_GGUF_WRITER_H
#define PAGODA_GGUF_WRITER_H

#include <stdio.h>

#include "gguf.h"

/* A streaming writer: add metadata and tensor infos, then the data in the
 * same order. Used by the model generator and by tests to make fixtures. */
typedef struct gguf_writer gguf_writer;

gguf_writer *pagoda_gguf_writer_new(void);
void pagoda_gguf_writer_free(gguf_writer *w);
int pagoda_gguf_w_u32(gguf_writer *w, const char *key, uint32_t v);
int pagoda_gguf_w_i32(gguf_writer *w, const char *key, int32_t v);
int pagoda_gguf_w_f32(gguf_writer *w, const char *key, float v);
int pagoda_gguf_w_bool(gguf_writer *w, const char *key, bool v);
int pagoda_gguf_w_str(gguf_writer *w, const char *key, const char *v);
/* Copy a whole metadata entry from a reader (e.g. a vocabulary). */
int pagoda_gguf_w_copy(gguf_writer *w, const gguf_kv *kv);
int pagoda_gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n);
int pagoda_gguf_w_arr_f32(gguf_writer *w, const char *key, const float *v, uint64_t n);
int pagoda_gguf_w_arr_i32(gguf_writer *w, const char *key, const int32_t *v, uint64_t n);
/* Any scalar type (val points at a value of that type's C width; strings:
 * a NUL-terminated char *), any fixed-size element array, and raw value
 * bytes after the type tag (for tests crafting nested arrays). Keys must be
 * unique: a repeated key is refused with PAGODA_ERR_INVALID. */
int pagoda_gguf_w_val(gguf_writer *w, const char *key, int32_t type, const void *val);
int pagoda_gguf_w_arr(gguf_writer *w, const char *key, int32_t elem_type, const void *v, uint64_t n);
int pagoda_gguf_w_raw(gguf_writer *w, const char *key, int32_t type, const void *bytes, size_t n);
/* Declare a tensor (ne[0] innermost). Its bytes come later, in order. */
int pagoda_gguf_w_tensor(gguf_writer *w, const char *name, int32_t type, uint32_t n_dims,
                         const int64_t *ne);
/* Write header, metadata and tensor infos to fp; then call
 * pagoda_gguf_w_data once per tensor in declaration order. */
int pagoda_gguf_w_begin(gguf_writer *w, FILE *fp);
int pagoda_gguf_w_data(gguf_writer *w, FILE *fp, const void *data, size_t nbytes);
/* Streaming alternative: a tensor's bytes in pieces; the tensor is done
 * when its size is reached. pagoda_gguf_w_finish checks every declared
 * tensor was written in full and flushes. */
int pagoda_gguf_w_data_chunk(gguf_writer *w, FILE *fp, const void *data, size_t nbytes);
int pagoda_gguf_w_finish(gguf_writer *w, FILE *fp);
/* Instead of any tensor data: extend the file over the whole data section
 * as a hole (a sparse file of zeros), right after pagoda_gguf_w_begin; fp
 * must be a regular file. For headers a memory plan reads, never a model
 * to run. Then pagoda_gguf_w_finish. */
int pagoda_gguf_w_data_hole(gguf_writer *w, FILE *fp);

#endif /* PAGODA_GGUF_WRITER_H */
