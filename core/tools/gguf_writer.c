/*
 * gguf_writer.c: the streaming GGUF v3 writer declared in gguf_writer.h, used by
 * the model generator and by tests to make fixtures. Metadata and tensor
 * infos are collected in memory, then written with the tensor data in
 * declaration order, each tensor padded to the alignment as ggml does.
 * Not for: reading or validating GGUF files (gguf.c). The writer trusts
 * its caller more than the reader trusts a file: it refuses duplicate
 * keys and bad shapes, but it will write whatever values it is given
 * (tests rely on that to craft hostile files).
 */
#define _GNU_SOURCE /* strndup */
#include "gguf_writer.h"

#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h> /* ftruncate */

#include "gguf_internal.h"
#include "pagoda/types.h"

typedef struct wbuf { uint8_t *p; size_t len, cap; } wbuf;

static int wb_put(wbuf *b, const void *d, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) return PAGODA_ERR_NOMEM;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, d, n);
    b->len += n;
    return PAGODA_OK;
}

typedef struct wtensor {
    char *name;
    int32_t type;
    uint32_t n_dims;
    int64_t ne[4];
    uint64_t nbytes, offset;
} wtensor;

struct gguf_writer {
    wbuf kv;                /* encoded metadata entries */
    uint64_t n_kv;
    char **keys;
    wtensor *t;
    uint64_t n_t, cap_t;
    uint64_t alignment;
    bool begun;
    uint64_t cur;           /* tensor being written */
    uint64_t cur_done;      /* its bytes written so far */
    uint64_t pos;           /* bytes written to the file */
};

gguf_writer *pagoda_gguf_writer_new(void)
{
    gguf_writer *w = calloc(1, sizeof *w);
    if (w) w->alignment = 32;
    return w;
}

void pagoda_gguf_writer_free(gguf_writer *w)
{
    if (!w) return;
    free(w->kv.p);
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    free(w->keys);
    for (uint64_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w);
}

/* Appends the key and the type tag; refuses duplicates and late calls. */
static int w_key(gguf_writer *w, const char *key, uint32_t type)
{
    if (!w || !key || !*key || w->begun) return PAGODA_ERR_INVALID;
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->keys[i], key) == 0) return PAGODA_ERR_INVALID;
    char **k = realloc(w->keys, (w->n_kv + 1) * sizeof *k);
    if (!k) return PAGODA_ERR_NOMEM;
    w->keys = k;
    if (!(k[w->n_kv] = strdup(key))) return PAGODA_ERR_NOMEM;
    w->n_kv++;
    uint64_t len = strlen(key);
    int st = wb_put(&w->kv, &len, 8);
    if (!st) st = wb_put(&w->kv, key, len);
    if (!st) st = wb_put(&w->kv, &type, 4);
    return st;
}

int pagoda_gguf_w_val(gguf_writer *w, const char *key, int32_t type, const void *val)
{
    size_t es = pagoda_gguf_vtype_size((uint32_t)type);
    if (!val) return PAGODA_ERR_INVALID;
    if (type == GGUF_T_STRING) return pagoda_gguf_w_str(w, key, val);
    if (!es) return PAGODA_ERR_INVALID;
    if (type == GGUF_T_UINT32 && key && strcmp(key, "general.alignment") == 0) {
        uint32_t a;
        memcpy(&a, val, 4);
        if (a == 0 || (a & (a - 1)) || a > PAGODA_GGUF_MAX_ALIGN) return PAGODA_ERR_INVALID;
        if (!w->begun) w->alignment = a;
    }
    int st = w_key(w, key, (uint32_t)type);
    return st ? st : wb_put(&w->kv, val, es);
}

int pagoda_gguf_w_u32(gguf_writer *w, const char *key, uint32_t v) { return pagoda_gguf_w_val(w, key, GGUF_T_UINT32, &v); }
int pagoda_gguf_w_i32(gguf_writer *w, const char *key, int32_t v) { return pagoda_gguf_w_val(w, key, GGUF_T_INT32, &v); }
int pagoda_gguf_w_f32(gguf_writer *w, const char *key, float v) { return pagoda_gguf_w_val(w, key, GGUF_T_FLOAT32, &v); }
int pagoda_gguf_w_bool(gguf_writer *w, const char *key, bool v)
{
    uint8_t b = v ? 1 : 0;
    return pagoda_gguf_w_val(w, key, GGUF_T_BOOL, &b);
}

int pagoda_gguf_w_str(gguf_writer *w, const char *key, const char *v)
{
    if (!v) return PAGODA_ERR_INVALID;
    int st = w_key(w, key, GGUF_T_STRING);
    uint64_t len = strlen(v);
    if (!st) st = wb_put(&w->kv, &len, 8);
    if (!st) st = wb_put(&w->kv, v, len);
    return st;
}

int pagoda_gguf_w_arr(gguf_writer *w, const char *key, int32_t elem_type, const void *v, uint64_t n)
{
    size_t es = pagoda_gguf_vtype_size((uint32_t)elem_type);
    if (!es || (!v && n)) return PAGODA_ERR_INVALID;
    int st = w_key(w, key, GGUF_T_ARRAY);
    uint32_t et = (uint32_t)elem_type;
    if (!st) st = wb_put(&w->kv, &et, 4);
    if (!st) st = wb_put(&w->kv, &n, 8);
    if (!st) st = wb_put(&w->kv, v, n * es);
    return st;
}

int pagoda_gguf_w_raw(gguf_writer *w, const char *key, int32_t type, const void *bytes, size_t n)
{
    if (!bytes && n) return PAGODA_ERR_INVALID;
    int st = w_key(w, key, (uint32_t)type);
    return st ? st : wb_put(&w->kv, bytes, n);
}

int pagoda_gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n)
{
    if (!v && n) return PAGODA_ERR_INVALID;
    int st = w_key(w, key, GGUF_T_ARRAY);
    uint32_t et = GGUF_T_STRING;
    if (!st) st = wb_put(&w->kv, &et, 4);
    if (!st) st = wb_put(&w->kv, &n, 8);
    for (uint64_t i = 0; !st && i < n; i++) {
        uint64_t len = v[i] ? strlen(v[i]) : 0;
        st = wb_put(&w->kv, &len, 8);
        if (!st) st = wb_put(&w->kv, v[i], len);
    }
    return st;
}

int pagoda_gguf_w_arr_f32(gguf_writer *w, const char *key, const float *v, uint64_t n)
{
    return pagoda_gguf_w_arr(w, key, GGUF_T_FLOAT32, v, n);
}

int pagoda_gguf_w_arr_i32(gguf_writer *w, const char *key, const int32_t *v, uint64_t n)
{
    return pagoda_gguf_w_arr(w, key, GGUF_T_INT32, v, n);
}

int pagoda_gguf_w_copy(gguf_writer *w, const gguf_kv *kv)
{
    if (!w || !kv) return PAGODA_ERR_INVALID;
    char *key = strndup(kv->key.ptr, kv->key.len);
    if (!key) return PAGODA_ERR_NOMEM;
    const gguf_value *v = &kv->val;
    int st;
    switch (v->type) {
    case GGUF_T_STRING: {
        st = w_key(w, key, GGUF_T_STRING);
        if (!st) st = wb_put(&w->kv, &v->v.str.len, 8);
        if (!st) st = wb_put(&w->kv, v->v.str.ptr, v->v.str.len);
        break;
    }
    case GGUF_T_ARRAY: {
        /* The element bytes were validated at open: copy them as they are. */
        uint32_t et = (uint32_t)v->v.arr.elem_type;
        st = w_key(w, key, GGUF_T_ARRAY);
        if (!st) st = wb_put(&w->kv, &et, 4);
        if (!st) st = wb_put(&w->kv, &v->v.arr.count, 8);
        if (!st) st = wb_put(&w->kv, v->v.arr.data, v->v.arr.nbytes);
        break;
    }
    case GGUF_T_BOOL: st = pagoda_gguf_w_bool(w, key, v->v.b); break;
    case GGUF_T_FLOAT32: st = pagoda_gguf_w_f32(w, key, (float)v->v.f64); break;
    case GGUF_T_FLOAT64: st = pagoda_gguf_w_val(w, key, GGUF_T_FLOAT64, &v->v.f64); break;
    default: {
        size_t es = pagoda_gguf_vtype_size((uint32_t)v->type);
        if (!es) { st = PAGODA_ERR_INVALID; break; }
        /* Little-endian: the low bytes of the 64-bit value are the narrow one. */
        uint64_t u = v->v.u64;
        st = pagoda_gguf_w_val(w, key, v->type, &u);
        break;
    }
    }
    free(key);
    return st;
}

int pagoda_gguf_w_tensor(gguf_writer *w, const char *name, int32_t type, uint32_t n_dims,
                         const int64_t *ne)
{
    if (!w || !name || !*name || !ne || w->begun || n_dims < 1 || n_dims > 4)
        return PAGODA_ERR_INVALID;
    int be, bb;
    if (!pagoda_dtype_block(type, &be, &bb) || ne[0] % be) return PAGODA_ERR_INVALID;
    uint64_t nel = 1;
    for (uint32_t i = 0; i < n_dims; i++) {
        if (ne[i] <= 0 || nel > (uint64_t)INT64_MAX / (uint64_t)ne[i]) return PAGODA_ERR_INVALID;
        nel *= (uint64_t)ne[i];
    }
    for (uint64_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) return PAGODA_ERR_INVALID;
    if (w->n_t == w->cap_t) {
        uint64_t cap = w->cap_t ? w->cap_t * 2 : 32;
        wtensor *t = realloc(w->t, cap * sizeof *t);
        if (!t) return PAGODA_ERR_NOMEM;
        w->t = t;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) return PAGODA_ERR_NOMEM;
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t i = 0; i < 4; i++) t->ne[i] = i < n_dims ? ne[i] : 1;
    t->nbytes = nel / (uint64_t)be * (uint64_t)bb;
    w->n_t++;
    return PAGODA_OK;
}

static int w_out(gguf_writer *w, FILE *fp, const void *d, size_t n)
{
    if (n && fwrite(d, 1, n, fp) != n) return PAGODA_ERR_IO;
    w->pos += n;
    return PAGODA_OK;
}

static int w_pad(gguf_writer *w, FILE *fp)
{
    static const uint8_t zero[64];
    uint64_t pad = (w->alignment - w->pos % w->alignment) % w->alignment;
    while (pad) {
        size_t k = pad > sizeof zero ? sizeof zero : (size_t)pad;
        int st = w_out(w, fp, zero, k);
        if (st) return st;
        pad -= k;
    }
    return PAGODA_OK;
}

int pagoda_gguf_w_begin(gguf_writer *w, FILE *fp)
{
    if (!w || !fp || w->begun) return PAGODA_ERR_INVALID;
    w->begun = true;
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        off += (w->t[i].nbytes + w->alignment - 1) / w->alignment * w->alignment;
    }
    uint32_t version = 3;
    int st = w_out(w, fp, "GGUF", 4);
    if (!st) st = w_out(w, fp, &version, 4);
    if (!st) st = w_out(w, fp, &w->n_t, 8);
    if (!st) st = w_out(w, fp, &w->n_kv, 8);
    if (!st) st = w_out(w, fp, w->kv.p, w->kv.len);
    for (uint64_t i = 0; !st && i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        uint64_t len = strlen(t->name);
        uint32_t type = (uint32_t)t->type;
        st = w_out(w, fp, &len, 8);
        if (!st) st = w_out(w, fp, t->name, len);
        if (!st) st = w_out(w, fp, &t->n_dims, 4);
        for (uint32_t j = 0; !st && j < t->n_dims; j++) st = w_out(w, fp, &t->ne[j], 8);
        if (!st) st = w_out(w, fp, &type, 4);
        if (!st) st = w_out(w, fp, &t->offset, 8);
    }
    if (!st && w->n_t) st = w_pad(w, fp);
    return st;
}

int pagoda_gguf_w_data_chunk(gguf_writer *w, FILE *fp, const void *data, size_t nbytes)
{
    if (!w || !fp || !w->begun || w->cur >= w->n_t) return PAGODA_ERR_STATE;
    const wtensor *t = &w->t[w->cur];
    if (nbytes > t->nbytes - w->cur_done) return PAGODA_ERR_INVALID;
    int st = w_out(w, fp, data, nbytes);
    if (st) return st;
    w->cur_done += nbytes;
    if (w->cur_done == t->nbytes) {
        w->cur++;
        w->cur_done = 0;
        /* Pad after every tensor, as ggml does, so the next starts aligned. */
        st = w_pad(w, fp);
    }
    return st;
}

int pagoda_gguf_w_data(gguf_writer *w, FILE *fp, const void *data, size_t nbytes)
{
    if (!w || !w->begun || w->cur >= w->n_t) return PAGODA_ERR_STATE;
    if (w->cur_done != 0 || nbytes != w->t[w->cur].nbytes) return PAGODA_ERR_INVALID;
    return pagoda_gguf_w_data_chunk(w, fp, data, nbytes);
}

int pagoda_gguf_w_finish(gguf_writer *w, FILE *fp)
{
    if (!w || !fp || !w->begun) return PAGODA_ERR_STATE;
    if (w->cur != w->n_t) return PAGODA_ERR_STATE;
    return fflush(fp) == 0 ? PAGODA_OK : PAGODA_ERR_IO;
}

int pagoda_gguf_w_data_hole(gguf_writer *w, FILE *fp)
{
    if (!w || !fp || !w->begun || w->cur != 0 || w->cur_done) return PAGODA_ERR_STATE;
    uint64_t total = 0;
    if (w->n_t) {
        const wtensor *t = &w->t[w->n_t - 1];
        total = t->offset + (t->nbytes + w->alignment - 1) / w->alignment * w->alignment;
    }
    off_t end = (off_t)(w->pos + total);
    if (fflush(fp) != 0 || ftruncate(fileno(fp), end) != 0 || fseeko(fp, end, SEEK_SET) != 0)
        return PAGODA_ERR_IO;
    w->pos += total;
    w->cur = w->n_t;
    return PAGODA_OK;
}
