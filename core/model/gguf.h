/*
 * gguf.h: a validating reader of GGUF files (versions 2 and 3) over mmap
 * (the writer is core/tools/gguf_writer.h). Reading checks
 * everything against the file size and against itself before anyone sees
 * it; after pagoda_gguf_open succeeds, callers may trust the structure.
 * Not for: interpreting the model (model.c) or the vocabulary (tokenizer.c).
 */
#ifndef PAGODA_GGUF_H
#define PAGODA_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum gguf_vtype {
    GGUF_T_UINT8 = 0, GGUF_T_INT8 = 1, GGUF_T_UINT16 = 2, GGUF_T_INT16 = 3,
    GGUF_T_UINT32 = 4, GGUF_T_INT32 = 5, GGUF_T_FLOAT32 = 6, GGUF_T_BOOL = 7,
    GGUF_T_STRING = 8, GGUF_T_ARRAY = 9, GGUF_T_UINT64 = 10, GGUF_T_INT64 = 11,
    GGUF_T_FLOAT64 = 12
} gguf_vtype;

/* A string inside the mapping: not NUL-terminated. */
typedef struct gguf_str {
    const char *ptr;
    uint64_t len;
} gguf_str;

/* One metadata value. Arrays point into the mapping: `data` holds `count`
 * packed elements of `elem_type` (for strings, see pagoda_gguf_arr_str). */
typedef struct gguf_value {
    int32_t type;               /* gguf_vtype */
    union {
        uint64_t u64; int64_t i64; double f64; bool b; gguf_str str;
        struct {
            int32_t elem_type;  /* nested arrays: GGUF_T_ARRAY, with data at the nested header */
            uint64_t count;
            const uint8_t *data;
            uint64_t nbytes;    /* bytes the elements occupy in the file, from data
                                 * (the 12-byte type+count header excluded) */
            const gguf_str *strs; /* for string arrays: count entries, parsed at open */
        } arr;
    } v;
} gguf_value;

typedef struct gguf_kv {
    gguf_str key;
    gguf_value val;
} gguf_kv;

typedef struct gguf_tensor {
    gguf_str name;
    uint32_t n_dims;
    int64_t ne[4];              /* ne[0] is the innermost (row length) */
    int32_t type;               /* pagoda_dtype numbering */
    uint64_t offset;            /* from the start of the data section */
    uint64_t nbytes;
    const void *data;           /* inside the mapping */
} gguf_tensor;

typedef struct gguf_file {
    char *path;
    int fd;
    const uint8_t *map;
    size_t size;
    uint32_t version;
    uint64_t n_kv;
    gguf_kv *kv;
    uint64_t n_tensors;
    gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_offset;       /* start of the tensor data section */
} gguf_file;

/* Map and validate a file. On failure returns NULL and writes a message
 * naming the file, what is wrong and where (byte offset) to err. Only the
 * header, metadata and tensor infos are read (tensor data bounds are
 * checked against the file size, its bytes are not touched), so opening is
 * cheap for `pagoda plan` whatever the model size. */
gguf_file *pagoda_gguf_open(const char *path, char *err, size_t err_len);
/* Same, over bytes in memory (not copied; must outlive the file). */
gguf_file *pagoda_gguf_open_mem(const void *data, size_t size, const char *name, char *err,
                                size_t err_len);
void pagoda_gguf_close(gguf_file *f);

/* Lookups: NULL / -1 when absent. */
const gguf_kv *pagoda_gguf_find(const gguf_file *f, const char *key);
const gguf_tensor *pagoda_gguf_tensor(const gguf_file *f, const char *name);

/* Typed getters: true and *out set when the key exists and has a
 * compatible type (any integer type for _int, f32/f64 for _float). */
bool pagoda_gguf_get_int(const gguf_file *f, const char *key, int64_t *out);
bool pagoda_gguf_get_float(const gguf_file *f, const char *key, double *out);
bool pagoda_gguf_get_bool(const gguf_file *f, const char *key, bool *out);
/* A malloc'd NUL-terminated copy, or NULL. */
char *pagoda_gguf_get_str(const gguf_file *f, const char *key);
/* An array's element i as a double (numeric arrays). */
double pagoda_gguf_arr_num(const gguf_value *v, uint64_t i);

const char *pagoda_gguf_vtype_name(int t);

#endif /* PAGODA_GGUF_H */
