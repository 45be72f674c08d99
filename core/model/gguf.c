/*
 * gguf.c: the validating GGUF reader (v2, v3) declared in gguf.h: open
 * (file or memory), parse the header, metadata and tensor table, and the
 * key/tensor lookups and typed getters. Every count, length and offset
 * read from the file is checked against the bytes that remain before it
 * is used or allocated for, so a truncated or hostile file ends in one
 * clear message (file, what, byte offset) and never in a crash or a huge
 * allocation.
 * Not for: writing GGUF files (gguf_writer.c), interpreting the model or
 * the vocabulary.
 */
#define _GNU_SOURCE
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf_internal.h"
#include "pagoda/types.h"

#define GGUF_MAX_DEPTH 4        /* nested arrays deeper than this are refused */

/* ------------------------------------------------------------ cursor */

typedef struct cur {
    const uint8_t *p;
    size_t size;
    size_t off;
    const char *name;
    char *err;
    size_t err_len;
    bool failed;
} cur;

static void fail_at(cur *c, size_t off, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail_at(cur *c, size_t off, const char *fmt, ...)
{
    if (c->failed) return;
    c->failed = true;
    if (!c->err || !c->err_len) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->err_len, "%s: %s (at byte %zu of %zu)", c->name, msg, off, c->size);
}

static size_t remaining(const cur *c) { return c->size - c->off; }

/* True when n more bytes can be read; otherwise records a truncation error. */
static bool need(cur *c, uint64_t n, const char *what)
{
    if (n > remaining(c)) {
        fail_at(c, c->off, "truncated: %s needs %llu bytes, only %zu left", what,
                (unsigned long long)n, remaining(c));
        return false;
    }
    return true;
}

static bool rd(cur *c, void *dst, size_t n, const char *what)
{
    if (!need(c, n, what)) return false;
    memcpy(dst, c->p + c->off, n);
    c->off += n;
    return true;
}

static bool rd_u32(cur *c, uint32_t *v, const char *what) { return rd(c, v, 4, what); }
static bool rd_u64(cur *c, uint64_t *v, const char *what) { return rd(c, v, 8, what); }

static bool rd_str(cur *c, gguf_str *s, const char *what)
{
    size_t at = c->off;
    uint64_t len;
    if (!rd_u64(c, &len, what)) return false;
    if (len > remaining(c)) {
        fail_at(c, at, "%s length %llu exceeds the %zu bytes left in the file", what,
                (unsigned long long)len, remaining(c));
        return false;
    }
    s->ptr = (const char *)(c->p + c->off);
    s->len = len;
    c->off += len;
    return true;
}

/* ------------------------------------------------------------ names */

const char *pagoda_gguf_vtype_name(int t)
{
    static const char *const names[] = {"uint8", "int8", "uint16", "int16", "uint32",
                                        "int32", "float32", "bool", "string", "array",
                                        "uint64", "int64", "float64"};
    return (t >= 0 && t <= GGUF_T_FLOAT64) ? names[t] : "unknown";
}

/* ggml's type names, to say what an unsupported tensor is. */
static const char *ggml_type_name(uint32_t t)
{
    static const char *const n[] = {
        "F32", "F16", "Q4_0", "Q4_1", "Q4_2 (removed)", "Q4_3 (removed)", "Q5_0", "Q5_1",
        "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS",
        "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16",
        "I32", "I64", "F64", "IQ1_M", "BF16", "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
        "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
    return t < sizeof n / sizeof n[0] ? n[t] : NULL;
}

/* ------------------------------------------------------------ values */

/* Skip-validate an array body (after elem type and count) of `elem` type.
 * Used for nested arrays, whose strings are checked but not indexed. */
static bool check_array_body(cur *c, const char *key, uint32_t elem, uint64_t count, int depth)
{
    size_t es = pagoda_gguf_vtype_size(elem);
    if (es) {
        if (count > remaining(c) / es) {
            fail_at(c, c->off, "key '%s': array of %llu %s needs %llu bytes, only %zu left",
                    key, (unsigned long long)count, pagoda_gguf_vtype_name((int)elem),
                    (unsigned long long)count * es, remaining(c));
            return false;
        }
        if (elem == GGUF_T_BOOL) {
            for (uint64_t i = 0; i < count; i++)
                if (c->p[c->off + i] > 1) {
                    fail_at(c, c->off + i, "key '%s': bool element %llu is %u, not 0 or 1", key,
                            (unsigned long long)i, c->p[c->off + i]);
                    return false;
                }
        }
        c->off += count * es;
        return true;
    }
    if (elem == GGUF_T_STRING) {
        if (count > remaining(c) / 8) {
            fail_at(c, c->off, "key '%s': array of %llu strings cannot fit in the %zu bytes left",
                    key, (unsigned long long)count, remaining(c));
            return false;
        }
        for (uint64_t i = 0; i < count; i++) {
            gguf_str s;
            if (!rd_str(c, &s, "array string")) return false;
        }
        return true;
    }
    if (elem == GGUF_T_ARRAY) {
        if (depth >= GGUF_MAX_DEPTH) {
            fail_at(c, c->off, "key '%s': arrays nested deeper than %d", key, GGUF_MAX_DEPTH);
            return false;
        }
        if (count > remaining(c) / 12) {
            fail_at(c, c->off, "key '%s': array of %llu arrays cannot fit in the %zu bytes left",
                    key, (unsigned long long)count, remaining(c));
            return false;
        }
        for (uint64_t i = 0; i < count; i++) {
            size_t at = c->off;
            uint32_t et;
            uint64_t n;
            if (!rd_u32(c, &et, "nested array type") || !rd_u64(c, &n, "nested array count"))
                return false;
            if (et > GGUF_T_FLOAT64) {
                fail_at(c, at, "key '%s': nested array has unknown element type %u", key, et);
                return false;
            }
            if (!check_array_body(c, key, et, n, depth + 1)) return false;
        }
        return true;
    }
    fail_at(c, c->off, "key '%s': unknown array element type %u", key, elem);
    return false;
}

static bool read_value(cur *c, const char *key, gguf_value *v)
{
    size_t at = c->off;
    uint32_t t;
    if (!rd_u32(c, &t, "value type")) return false;
    v->type = (int32_t)t;
    union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
            float f32; uint64_t u64; int64_t i64; double f64; } b;
    switch (t) {
    case GGUF_T_UINT8: if (!rd(c, &b, 1, "uint8 value")) return false; v->v.u64 = b.u8; break;
    case GGUF_T_INT8: if (!rd(c, &b, 1, "int8 value")) return false; v->v.i64 = b.i8; break;
    case GGUF_T_UINT16: if (!rd(c, &b, 2, "uint16 value")) return false; v->v.u64 = b.u16; break;
    case GGUF_T_INT16: if (!rd(c, &b, 2, "int16 value")) return false; v->v.i64 = b.i16; break;
    case GGUF_T_UINT32: if (!rd(c, &b, 4, "uint32 value")) return false; v->v.u64 = b.u32; break;
    case GGUF_T_INT32: if (!rd(c, &b, 4, "int32 value")) return false; v->v.i64 = b.i32; break;
    case GGUF_T_FLOAT32: if (!rd(c, &b, 4, "float32 value")) return false; v->v.f64 = b.f32; break;
    case GGUF_T_UINT64: if (!rd(c, &b, 8, "uint64 value")) return false; v->v.u64 = b.u64; break;
    case GGUF_T_INT64: if (!rd(c, &b, 8, "int64 value")) return false; v->v.i64 = b.i64; break;
    case GGUF_T_FLOAT64: if (!rd(c, &b, 8, "float64 value")) return false; v->v.f64 = b.f64; break;
    case GGUF_T_BOOL:
        if (!rd(c, &b, 1, "bool value")) return false;
        if (b.u8 > 1) {
            fail_at(c, c->off - 1, "key '%s': bool value is %u, not 0 or 1", key, b.u8);
            return false;
        }
        v->v.b = b.u8 != 0;
        break;
    case GGUF_T_STRING:
        if (!rd_str(c, &v->v.str, "string value")) return false;
        break;
    case GGUF_T_ARRAY: {
        uint32_t et;
        uint64_t n;
        size_t eat = c->off;
        if (!rd_u32(c, &et, "array element type") || !rd_u64(c, &n, "array count")) return false;
        if (et > GGUF_T_FLOAT64) {
            fail_at(c, eat, "key '%s': unknown array element type %u", key, et);
            return false;
        }
        v->v.arr.elem_type = (int32_t)et;
        v->v.arr.count = n;
        v->v.arr.data = c->p + c->off;
        v->v.arr.strs = NULL;
        size_t start = c->off;
        if (et == GGUF_T_STRING) {
            if (n > remaining(c) / 8) {
                fail_at(c, c->off, "key '%s': array of %llu strings cannot fit in the %zu bytes left",
                        key, (unsigned long long)n, remaining(c));
                return false;
            }
            /* Bounded by the file size / 8 just above. */
            gguf_str *s = calloc(n ? n : 1, sizeof *s);
            if (!s) {
                fail_at(c, c->off, "out of memory for %llu strings of key '%s'",
                        (unsigned long long)n, key);
                return false;
            }
            v->v.arr.strs = s;
            for (uint64_t i = 0; i < n; i++)
                if (!rd_str(c, &s[i], "array string")) return false;
        } else if (!check_array_body(c, key, et, n, 1)) {
            return false;
        }
        v->v.arr.nbytes = c->off - start;
        break;
    }
    default:
        fail_at(c, at, "key '%s': unknown value type %u", key, t);
        return false;
    }
    return true;
}

/* ------------------------------------------------------------ duplicates */

static uint64_t hash_str(const char *p, uint64_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
    return h;
}

/* Returns the index of a duplicate of strs[i] among earlier entries, or -1;
 * open addressing over a table sized for n. -2 on allocation failure. */
static int64_t find_dup(const gguf_str *const *strs, uint64_t n, uint64_t *dup_i)
{
    if (n < 2) return -1;
    uint64_t cap = 1;
    while (cap < n * 2) cap <<= 1;
    uint64_t *tab = malloc(cap * sizeof *tab);
    if (!tab) return -2;
    for (uint64_t i = 0; i < cap; i++) tab[i] = UINT64_MAX;
    int64_t found = -1;
    for (uint64_t i = 0; i < n && found < 0; i++) {
        uint64_t h = hash_str(strs[i]->ptr, strs[i]->len) & (cap - 1);
        while (tab[h] != UINT64_MAX) {
            const gguf_str *o = strs[tab[h]];
            if (o->len == strs[i]->len && memcmp(o->ptr, strs[i]->ptr, o->len) == 0) {
                found = (int64_t)tab[h];
                *dup_i = i;
                break;
            }
            h = (h + 1) & (cap - 1);
        }
        if (found < 0) tab[h] = i;
    }
    free(tab);
    return found;
}

/* ------------------------------------------------------------ open */

static int cmp_by_offset(const void *a, const void *b)
{
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static void free_parsed(gguf_file *f)
{
    if (f->kv)
        for (uint64_t i = 0; i < f->n_kv; i++)
            if (f->kv[i].val.type == GGUF_T_ARRAY) free((void *)f->kv[i].val.v.arr.strs);
    free(f->kv);
    free(f->tensors);
    f->kv = NULL;
    f->tensors = NULL;
}

static bool parse(gguf_file *f, cur *c)
{
    const gguf_str **names = NULL;
    const gguf_tensor **order = NULL;
    bool ok = false;
    char magic[4];
    if (!rd(c, magic, 4, "magic")) goto out;
    if (memcmp(magic, "GGUF", 4) != 0) {
        fail_at(c, 0, "bad magic %02x %02x %02x %02x: not a GGUF file (expected \"GGUF\")",
                (uint8_t)magic[0], (uint8_t)magic[1], (uint8_t)magic[2], (uint8_t)magic[3]);
        goto out;
    }
    if (!rd_u32(c, &f->version, "version")) goto out;
    if (f->version != 2 && f->version != 3) {
        if (f->version == 1)
            fail_at(c, 4, "unsupported version 1 (32-bit counts); reconvert the model to GGUF v3");
        else if (f->version == 0x02000000u || f->version == 0x03000000u)
            fail_at(c, 4, "unsupported version %u: a big-endian GGUF; only little-endian is read",
                    f->version);
        else
            fail_at(c, 4, "unsupported version %u (expected 2 or 3)", f->version);
        goto out;
    }
    if (!rd_u64(c, &f->n_tensors, "tensor count") || !rd_u64(c, &f->n_kv, "metadata count"))
        goto out;
    /* Each entry needs a minimum number of bytes, so refuse counts the rest of
     * the file cannot hold before allocating for them. */
    if (f->n_kv > remaining(c) / 13) {
        fail_at(c, 16, "metadata count %llu cannot fit in the %zu bytes left (13 bytes each at least)",
                (unsigned long long)f->n_kv, remaining(c));
        goto out;
    }
    if (f->n_tensors > remaining(c) / 32) {
        fail_at(c, 8, "tensor count %llu cannot fit in the %zu bytes left (32 bytes each at least)",
                (unsigned long long)f->n_tensors, remaining(c));
        goto out;
    }
    f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kv);
    f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
    if (!f->kv || !f->tensors) {
        fail_at(c, 8, "out of memory for %llu keys and %llu tensors",
                (unsigned long long)f->n_kv, (unsigned long long)f->n_tensors);
        goto out;
    }
    char keybuf[128];
    for (uint64_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        size_t at = c->off;
        if (!rd_str(c, &kv->key, "key")) goto out;
        if (kv->key.len == 0) {
            fail_at(c, at, "metadata entry %llu has an empty key", (unsigned long long)i);
            goto out;
        }
        snprintf(keybuf, sizeof keybuf, "%.*s", (int)(kv->key.len > 100 ? 100 : kv->key.len),
                 kv->key.ptr);
        if (!read_value(c, keybuf, &kv->val)) goto out;
    }
    /* Duplicate keys. */
    names = malloc((f->n_kv > f->n_tensors ? f->n_kv : f->n_tensors) * sizeof *names + 1);
    if (!names) { fail_at(c, c->off, "out of memory"); goto out; }
    for (uint64_t i = 0; i < f->n_kv; i++) names[i] = &f->kv[i].key;
    uint64_t di = 0;
    int64_t d = find_dup(names, f->n_kv, &di);
    if (d == -2) { fail_at(c, c->off, "out of memory"); goto out; }
    if (d >= 0) {
        fail_at(c, (size_t)((const uint8_t *)f->kv[di].key.ptr - c->p), "duplicate key '%.*s' (entries %lld and %llu)",
                (int)(f->kv[di].key.len > 100 ? 100 : f->kv[di].key.len), f->kv[di].key.ptr,
                (long long)d, (unsigned long long)di);
        goto out;
    }
    /* Alignment. */
    f->alignment = 32;
    const gguf_kv *al = pagoda_gguf_find(f, "general.alignment");
    if (al) {
        size_t at = (size_t)((const uint8_t *)al->key.ptr - c->p);
        if (al->val.type != GGUF_T_UINT32) {
            fail_at(c, at, "general.alignment has type %s, expected uint32",
                    pagoda_gguf_vtype_name(al->val.type));
            goto out;
        }
        uint64_t a = al->val.v.u64;
        if (a == 0 || (a & (a - 1)) || a > PAGODA_GGUF_MAX_ALIGN) {
            fail_at(c, at, "general.alignment %llu is not a power of two in 1..%u",
                    (unsigned long long)a, PAGODA_GGUF_MAX_ALIGN);
            goto out;
        }
        f->alignment = a;
    }
    /* Tensor infos. */
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        size_t at = c->off;
        if (!rd_str(c, &t->name, "tensor name")) goto out;
        int nl = (int)(t->name.len > 100 ? 100 : t->name.len);
        if (t->name.len == 0) {
            fail_at(c, at, "tensor %llu has an empty name", (unsigned long long)i);
            goto out;
        }
        at = c->off;
        if (!rd_u32(c, &t->n_dims, "tensor dimension count")) goto out;
        if (t->n_dims < 1 || t->n_dims > 4) {
            fail_at(c, at, "tensor '%.*s' has %u dimensions (expected 1..4)", nl, t->name.ptr,
                    t->n_dims);
            goto out;
        }
        uint64_t nel = 1;
        for (uint32_t j = 0; j < 4; j++) t->ne[j] = 1;
        for (uint32_t j = 0; j < t->n_dims; j++) {
            uint64_t ne;
            at = c->off;
            if (!rd_u64(c, &ne, "tensor dimension")) goto out;
            if (ne == 0 || ne > (uint64_t)INT64_MAX) {
                fail_at(c, at, "tensor '%.*s' dimension %u is %llu (expected > 0)", nl, t->name.ptr,
                        j, (unsigned long long)ne);
                goto out;
            }
            if (nel > (uint64_t)INT64_MAX / ne) {
                fail_at(c, at, "tensor '%.*s' element count overflows", nl, t->name.ptr);
                goto out;
            }
            nel *= ne;
            t->ne[j] = (int64_t)ne;
        }
        uint32_t type;
        at = c->off;
        if (!rd_u32(c, &type, "tensor type")) goto out;
        int be, bb;
        if (!pagoda_dtype_block((int)type, &be, &bb)) {
            const char *gn = ggml_type_name(type);
            if (gn)
                fail_at(c, at, "tensor '%.*s' has type %s (%u), which pagoda does not support "
                        "(supported: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 IQ4_NL Q2_K Q3_K Q4_K "
                        "Q5_K Q6_K IQ4_XS MXFP4)", nl, t->name.ptr, gn, type);
            else
                fail_at(c, at, "tensor '%.*s' has unknown type %u", nl, t->name.ptr, type);
            goto out;
        }
        t->type = (int32_t)type;
        if (t->ne[0] % be) {
            fail_at(c, at, "tensor '%.*s' row length %lld is not a multiple of the %s block size %d",
                    nl, t->name.ptr, (long long)t->ne[0], pagoda_dtype_name(t->type), be);
            goto out;
        }
        uint64_t blocks = nel / (uint64_t)be;
        if (blocks > UINT64_MAX / (uint64_t)bb) {
            fail_at(c, at, "tensor '%.*s' byte size overflows", nl, t->name.ptr);
            goto out;
        }
        t->nbytes = blocks * (uint64_t)bb;
        at = c->off;
        if (!rd_u64(c, &t->offset, "tensor data offset")) goto out;
        if (t->offset % f->alignment) {
            fail_at(c, at, "tensor '%.*s' data offset %llu is not aligned to %llu", nl, t->name.ptr,
                    (unsigned long long)t->offset, (unsigned long long)f->alignment);
            goto out;
        }
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) names[i] = &f->tensors[i].name;
    d = find_dup(names, f->n_tensors, &di);
    if (d == -2) { fail_at(c, c->off, "out of memory"); goto out; }
    if (d >= 0) {
        fail_at(c, (size_t)((const uint8_t *)f->tensors[di].name.ptr - c->p),
                "duplicate tensor name '%.*s' (tensors %lld and %llu)",
                (int)(f->tensors[di].name.len > 100 ? 100 : f->tensors[di].name.len),
                f->tensors[di].name.ptr, (long long)d, (unsigned long long)di);
        goto out;
    }
    /* Data section: starts at the next alignment boundary after the infos. */
    uint64_t end_infos = c->off;
    f->data_offset = (end_infos + f->alignment - 1) / f->alignment * f->alignment;
    if (f->n_tensors && f->data_offset > c->size) {
        fail_at(c, end_infos, "truncated: tensor data section would start at byte %llu",
                (unsigned long long)f->data_offset);
        goto out;
    }
    uint64_t data_len = f->n_tensors ? c->size - f->data_offset : 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (t->offset > data_len || t->nbytes > data_len - t->offset) {
            fail_at(c, f->data_offset + (t->offset < data_len ? t->offset : data_len),
                    "tensor '%.*s' data [%llu, %llu) of the data section lies outside the file "
                    "(data section holds %llu bytes)",
                    (int)(t->name.len > 100 ? 100 : t->name.len), t->name.ptr,
                    (unsigned long long)t->offset,
                    (unsigned long long)(t->offset + (t->nbytes < UINT64_MAX - t->offset ? t->nbytes : 0)),
                    (unsigned long long)data_len);
            goto out;
        }
        t->data = c->p + f->data_offset + t->offset;
    }
    /* Overlap: sort by offset and compare neighbours. */
    if (f->n_tensors > 1) {
        order = malloc(f->n_tensors * sizeof *order);
        if (!order) { fail_at(c, c->off, "out of memory"); goto out; }
        for (uint64_t i = 0; i < f->n_tensors; i++) order[i] = &f->tensors[i];
        qsort(order, f->n_tensors, sizeof *order, cmp_by_offset);
        for (uint64_t i = 1; i < f->n_tensors; i++) {
            const gguf_tensor *a = order[i - 1], *b = order[i];
            if (a->offset + a->nbytes > b->offset) {
                fail_at(c, f->data_offset + b->offset,
                        "tensor '%.*s' data [%llu, %llu) overlaps tensor '%.*s' data [%llu, %llu)",
                        (int)(b->name.len > 100 ? 100 : b->name.len), b->name.ptr,
                        (unsigned long long)b->offset, (unsigned long long)(b->offset + b->nbytes),
                        (int)(a->name.len > 100 ? 100 : a->name.len), a->name.ptr,
                        (unsigned long long)a->offset, (unsigned long long)(a->offset + a->nbytes));
                goto out;
            }
        }
    }
    ok = true;
out:
    free(names);
    free(order);
    return ok;
}

static gguf_file *open_common(const uint8_t *map, size_t size, int fd, const char *name,
                              char *err, size_t err_len)
{
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        if (err && err_len) snprintf(err, err_len, "%s: out of memory", name);
        return NULL;
    }
    f->fd = fd;
    f->map = map;
    f->size = size;
    f->path = strdup(name);
    cur c = {.p = map, .size = size, .name = name, .err = err, .err_len = err_len};
    if (!f->path) {
        fail_at(&c, 0, "out of memory");
        goto fail;
    }
    if (!parse(f, &c)) goto fail;
    return f;
fail:
    /* The caller still owns map/fd: detach them before closing. */
    f->fd = -1;
    f->map = NULL;
    pagoda_gguf_close(f);
    return NULL;
}

gguf_file *pagoda_gguf_open_mem(const void *data, size_t size, const char *name, char *err,
                                size_t err_len)
{
    if (!name) name = "<memory>";
    if (!data && size) {
        if (err && err_len) snprintf(err, err_len, "%s: no data", name);
        return NULL;
    }
    return open_common(data, size, -1, name, err, err_len);
}

gguf_file *pagoda_gguf_open(const char *path, char *err, size_t err_len)
{
    if (!path) {
        if (err && err_len) snprintf(err, err_len, "(null): no path given");
        return NULL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (err && err_len) snprintf(err, err_len, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (err && err_len) snprintf(err, err_len, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    if (size < 24) {
        /* Too small for a header; parse a copy so the message says what is missing. */
        uint8_t small[24];
        ssize_t n = size ? pread(fd, small, size, 0) : 0;
        close(fd);
        gguf_file *f = open_common(small, n > 0 ? (size_t)n : 0, -1, path, err, err_len);
        if (f) pagoda_gguf_close(f); /* cannot happen: a header needs 24 bytes */
        return NULL;
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        if (err && err_len) snprintf(err, err_len, "%s: mmap of %zu bytes failed: %s", path, size,
                                     strerror(errno));
        close(fd);
        return NULL;
    }
    gguf_file *f = open_common(map, size, fd, path, err, err_len);
    if (!f) {
        munmap(map, size);
        close(fd);
    }
    return f;
}

void pagoda_gguf_close(gguf_file *f)
{
    if (!f) return;
    free_parsed(f);
    if (f->fd >= 0) {
        if (f->map) munmap((void *)f->map, f->size);
        close(f->fd);
    }
    free(f->path);
    free(f);
}

/* ------------------------------------------------------------ lookups */

static bool str_eq(const gguf_str *s, const char *z)
{
    size_t n = strlen(z);
    return s->len == n && memcmp(s->ptr, z, n) == 0;
}

const gguf_kv *pagoda_gguf_find(const gguf_file *f, const char *key)
{
    if (!f || !key || !f->kv) return NULL;
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (str_eq(&f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

const gguf_tensor *pagoda_gguf_tensor(const gguf_file *f, const char *name)
{
    if (!f || !name || !f->tensors) return NULL;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (str_eq(&f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

bool pagoda_gguf_get_int(const gguf_file *f, const char *key, int64_t *out)
{
    const gguf_kv *kv = pagoda_gguf_find(f, key);
    if (!kv) return false;
    switch (kv->val.type) {
    case GGUF_T_UINT8: case GGUF_T_UINT16: case GGUF_T_UINT32: case GGUF_T_UINT64:
        if (kv->val.v.u64 > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)kv->val.v.u64;
        return true;
    case GGUF_T_INT8: case GGUF_T_INT16: case GGUF_T_INT32: case GGUF_T_INT64:
        *out = kv->val.v.i64;
        return true;
    default: return false;
    }
}

bool pagoda_gguf_get_float(const gguf_file *f, const char *key, double *out)
{
    const gguf_kv *kv = pagoda_gguf_find(f, key);
    if (!kv || (kv->val.type != GGUF_T_FLOAT32 && kv->val.type != GGUF_T_FLOAT64)) return false;
    *out = kv->val.v.f64;
    return true;
}

bool pagoda_gguf_get_bool(const gguf_file *f, const char *key, bool *out)
{
    const gguf_kv *kv = pagoda_gguf_find(f, key);
    if (!kv || kv->val.type != GGUF_T_BOOL) return false;
    *out = kv->val.v.b;
    return true;
}

char *pagoda_gguf_get_str(const gguf_file *f, const char *key)
{
    const gguf_kv *kv = pagoda_gguf_find(f, key);
    if (!kv || kv->val.type != GGUF_T_STRING) return NULL;
    return strndup(kv->val.v.str.ptr, kv->val.v.str.len);
}

double pagoda_gguf_arr_num(const gguf_value *v, uint64_t i)
{
    if (!v || v->type != GGUF_T_ARRAY || i >= v->v.arr.count) return NAN;
    const uint8_t *p = v->v.arr.data;
    union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
            float f32; uint64_t u64; int64_t i64; double f64; } b;
    size_t es = pagoda_gguf_vtype_size((uint32_t)v->v.arr.elem_type);
    if (!es) return NAN;
    memcpy(&b, p + i * es, es);
    switch (v->v.arr.elem_type) {
    case GGUF_T_UINT8: return b.u8;
    case GGUF_T_INT8: return b.i8;
    case GGUF_T_UINT16: return b.u16;
    case GGUF_T_INT16: return b.i16;
    case GGUF_T_UINT32: return b.u32;
    case GGUF_T_INT32: return b.i32;
    case GGUF_T_FLOAT32: return b.f32;
    case GGUF_T_BOOL: return b.u8;
    case GGUF_T_UINT64: return (double)b.u64;
    case GGUF_T_INT64: return (double)b.i64;
    case GGUF_T_FLOAT64: return b.f64;
    default: return NAN;
    }
}
