/* test_gguf.c: the GGUF reader and writer. Round trips of every value type
 * through the writer; then corrupt, truncated and hostile files, each of
 * which must be refused with a message naming what is wrong (run under the
 * sanitizer build too: every truncation is read from an exact-size heap
 * copy so an out-of-bounds read is caught); then the bundled model. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "gguf_writer.h"
#include "model.h"
#include "pagoda/types.h"
#include "testutil.h"

/* ------------------------------------------------------------ helpers */

/* Bytes of a file built in memory. */
typedef struct bytes { uint8_t *p; size_t n; } bytes;

/* Metadata-only file written to memory. */
static bytes write_mem(gguf_writer *w)
{
    bytes b = {0};
    FILE *fp = open_memstream((char **)&b.p, &b.n);
    ck_assert_ptr_nonnull(fp);
    ck_assert_int_eq(pagoda_gguf_w_begin(w, fp), 0);
    ck_assert_int_eq(pagoda_gguf_w_finish(w, fp), 0);
    fclose(fp);
    return b;
}

/* A raw builder for hand-made (often broken) files. */
typedef struct rb { uint8_t buf[4096]; size_t n; } rb;
static void rb_put(rb *r, const void *p, size_t n) { ck_assert(r->n + n <= sizeof r->buf); memcpy(r->buf + r->n, p, n); r->n += n; }
static void rb_u32(rb *r, uint32_t v) { rb_put(r, &v, 4); }
static void rb_u64(rb *r, uint64_t v) { rb_put(r, &v, 8); }
static void rb_str(rb *r, const char *s) { rb_u64(r, strlen(s)); rb_put(r, s, strlen(s)); }
static void rb_hdr(rb *r, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    r->n = 0;
    rb_put(r, "GGUF", 4);
    rb_u32(r, version);
    rb_u64(r, n_tensors);
    rb_u64(r, n_kv);
}
static void rb_tensor(rb *r, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                      uint64_t off)
{
    rb_str(r, name);
    rb_u32(r, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) rb_u64(r, ne[i]);
    rb_u32(r, type);
    rb_u64(r, off);
}
static void rb_pad(rb *r, size_t a) { while (r->n % a) r->buf[r->n++] = 0; }
static void rb_zeros(rb *r, size_t n) { ck_assert(r->n + n <= sizeof r->buf); memset(r->buf + r->n, 0, n); r->n += n; }

/* Opens from an exact-size heap copy; returns the error text ("" if it opened). */
static char g_err[1024];
static const char *open_err(const void *data, size_t n)
{
    void *copy = malloc(n ? n : 1);
    memcpy(copy, data, n);
    g_err[0] = 0;
    gguf_file *f = pagoda_gguf_open_mem(copy, n, "test.gguf", g_err, sizeof g_err);
    if (f) {
        pagoda_gguf_close(f);
        g_err[0] = 0;
    }
    free(copy);
    return g_err;
}

#define ASSERT_REFUSED(data, n, ...) do {                                         \
        const char *e_ = open_err(data, n);                                       \
        ck_assert_msg(e_[0], "expected a refusal");                               \
        ck_assert_msg(strstr(e_, "test.gguf"), "no file name in: %s", e_);        \
        const char *w_[] = {__VA_ARGS__};                                         \
        for (size_t i_ = 0; i_ < sizeof w_ / sizeof w_[0]; i_++)                  \
            ck_assert_msg(strstr(e_, w_[i_]), "'%s' not in: %s", w_[i_], e_);      \
    } while (0)

/* A small valid file with every value type and three tensors; the last
 * tensor ends on an alignment boundary, so any truncation breaks it. */
static float g_f32data[8] = {1, -2, 3.5f, 0, 1e-3f, -7, 8, 9};
static uint8_t g_q8data[34];
static uint16_t g_f16data[64];

static bytes make_full(void)
{
    gguf_writer *w = pagoda_gguf_writer_new();
    ck_assert_ptr_nonnull(w);
    uint8_t u8 = 200; int8_t i8 = -100; uint16_t u16 = 60000; int16_t i16 = -30000;
    uint64_t u64 = 0xFFFFFFFFFFull; int64_t i64 = -1234567890123ll; double f64 = 2.718281828459045;
    ck_assert_int_eq(pagoda_gguf_w_str(w, "general.architecture", "llama"), 0);
    ck_assert_int_eq(pagoda_gguf_w_val(w, "t.u8", GGUF_T_UINT8, &u8), 0);
    ck_assert_int_eq(pagoda_gguf_w_val(w, "t.i8", GGUF_T_INT8, &i8), 0);
    ck_assert_int_eq(pagoda_gguf_w_val(w, "t.u16", GGUF_T_UINT16, &u16), 0);
    ck_assert_int_eq(pagoda_gguf_w_val(w, "t.i16", GGUF_T_INT16, &i16), 0);
    ck_assert_int_eq(pagoda_gguf_w_u32(w, "t.u32", 4000000000u), 0);
    ck_assert_int_eq(pagoda_gguf_w_i32(w, "t.i32", -2000000000), 0);
    ck_assert_int_eq(pagoda_gguf_w_f32(w, "t.f32", 0.25f), 0);
    ck_assert_int_eq(pagoda_gguf_w_bool(w, "t.bool", true), 0);
    ck_assert_int_eq(pagoda_gguf_w_val(w, "t.u64", GGUF_T_UINT64, &u64), 0);
    ck_assert_int_eq(pagoda_gguf_w_val(w, "t.i64", GGUF_T_INT64, &i64), 0);
    ck_assert_int_eq(pagoda_gguf_w_val(w, "t.f64", GGUF_T_FLOAT64, &f64), 0);
    ck_assert_int_eq(pagoda_gguf_w_str(w, "t.empty", ""), 0);
    const char *strs[] = {"a", "", "h\xc3\xa9llo"};
    ck_assert_int_eq(pagoda_gguf_w_arr_str(w, "t.astr", strs, 3), 0);
    float af[] = {1.5f, -2.5f};
    ck_assert_int_eq(pagoda_gguf_w_arr_f32(w, "t.af32", af, 2), 0);
    int32_t ai[] = {7, -8, 9};
    ck_assert_int_eq(pagoda_gguf_w_arr_i32(w, "t.ai32", ai, 3), 0);
    uint8_t ab[] = {1, 0, 1};
    ck_assert_int_eq(pagoda_gguf_w_arr(w, "t.abool", GGUF_T_BOOL, ab, 3), 0);
    int64_t ai64[] = {-1, 1ll << 40};
    ck_assert_int_eq(pagoda_gguf_w_arr(w, "t.ai64", GGUF_T_INT64, ai64, 2), 0);
    double af64[] = {0.5};
    ck_assert_int_eq(pagoda_gguf_w_arr(w, "t.af64", GGUF_T_FLOAT64, af64, 1), 0);
    uint16_t au16[] = {1, 65535};
    ck_assert_int_eq(pagoda_gguf_w_arr(w, "t.au16", GGUF_T_UINT16, au16, 2), 0);
    ck_assert_int_eq(pagoda_gguf_w_arr(w, "t.aempty", GGUF_T_UINT32, NULL, 0), 0);
    /* Nested: [[1,2],[3]] of u8, then [["x"]] of strings. */
    rb r = {.n = 0};
    rb_u32(&r, GGUF_T_ARRAY); rb_u64(&r, 2);
    rb_u32(&r, GGUF_T_UINT8); rb_u64(&r, 2); r.buf[r.n++] = 1; r.buf[r.n++] = 2;
    rb_u32(&r, GGUF_T_UINT8); rb_u64(&r, 1); r.buf[r.n++] = 3;
    ck_assert_int_eq(pagoda_gguf_w_raw(w, "t.nested", GGUF_T_ARRAY, r.buf, r.n), 0);
    r.n = 0;
    rb_u32(&r, GGUF_T_ARRAY); rb_u64(&r, 1);
    rb_u32(&r, GGUF_T_STRING); rb_u64(&r, 1); rb_str(&r, "x");
    ck_assert_int_eq(pagoda_gguf_w_raw(w, "t.nestedstr", GGUF_T_ARRAY, r.buf, r.n), 0);
    /* A repeated key is refused by the writer. */
    ck_assert_int_ne(pagoda_gguf_w_u32(w, "t.u32", 1), 0);

    for (int i = 0; i < 34; i++) g_q8data[i] = (uint8_t)(i * 7 + 1);
    for (int i = 0; i < 64; i++) g_f16data[i] = (uint16_t)(0x3C00 + i);
    int64_t ne_q[2] = {32, 1}, ne_h[2] = {16, 4}, ne_f[1] = {8};
    ck_assert_int_eq(pagoda_gguf_w_tensor(w, "q8", PAGODA_DTYPE_Q8_0, 2, ne_q), 0);
    ck_assert_int_eq(pagoda_gguf_w_tensor(w, "half", PAGODA_DTYPE_F16, 2, ne_h), 0);
    ck_assert_int_eq(pagoda_gguf_w_tensor(w, "f", PAGODA_DTYPE_F32, 1, ne_f), 0);
    ck_assert_int_ne(pagoda_gguf_w_tensor(w, "f", PAGODA_DTYPE_F32, 1, ne_f), 0);
    int64_t bad[1] = {31};
    ck_assert_int_ne(pagoda_gguf_w_tensor(w, "bad", PAGODA_DTYPE_Q4_0, 1, bad), 0);

    bytes b = {0};
    FILE *fp = open_memstream((char **)&b.p, &b.n);
    ck_assert_int_eq(pagoda_gguf_w_begin(w, fp), 0);
    /* Wrong size for the first tensor is refused; then stream it in two pieces. */
    ck_assert_int_ne(pagoda_gguf_w_data(w, fp, g_q8data, 33), 0);
    ck_assert_int_eq(pagoda_gguf_w_data_chunk(w, fp, g_q8data, 10), 0);
    ck_assert_int_ne(pagoda_gguf_w_finish(w, fp), 0);
    ck_assert_int_eq(pagoda_gguf_w_data_chunk(w, fp, g_q8data + 10, 24), 0);
    ck_assert_int_eq(pagoda_gguf_w_data(w, fp, g_f16data, sizeof g_f16data), 0);
    ck_assert_int_eq(pagoda_gguf_w_data(w, fp, g_f32data, sizeof g_f32data), 0);
    ck_assert_int_ne(pagoda_gguf_w_data(w, fp, g_f32data, 4), 0);
    ck_assert_int_eq(pagoda_gguf_w_finish(w, fp), 0);
    fclose(fp);
    pagoda_gguf_writer_free(w);
    return b;
}

/* ------------------------------------------------------------ round trip */

START_TEST(roundtrip_all_types)
{
    bytes b = make_full();
    char err[512] = "";
    gguf_file *f = pagoda_gguf_open_mem(b.p, b.n, "full.gguf", err, sizeof err);
    ck_assert_msg(f, "%s", err);
    ck_assert_uint_eq(f->version, 3);
    ck_assert_uint_eq(f->alignment, 32);
    ck_assert_uint_eq(f->data_offset % 32, 0);
    int64_t i;
    double d;
    bool bo;
    ck_assert(pagoda_gguf_get_int(f, "t.u8", &i) && i == 200);
    ck_assert(pagoda_gguf_get_int(f, "t.i8", &i) && i == -100);
    ck_assert(pagoda_gguf_get_int(f, "t.u16", &i) && i == 60000);
    ck_assert(pagoda_gguf_get_int(f, "t.i16", &i) && i == -30000);
    ck_assert(pagoda_gguf_get_int(f, "t.u32", &i) && i == 4000000000ll);
    ck_assert(pagoda_gguf_get_int(f, "t.i32", &i) && i == -2000000000);
    ck_assert(pagoda_gguf_get_int(f, "t.u64", &i) && i == 0xFFFFFFFFFFll);
    ck_assert(pagoda_gguf_get_int(f, "t.i64", &i) && i == -1234567890123ll);
    ck_assert(pagoda_gguf_get_float(f, "t.f32", &d) && d == 0.25);
    ck_assert(pagoda_gguf_get_float(f, "t.f64", &d) && d == 2.718281828459045);
    ck_assert(!pagoda_gguf_get_float(f, "t.u8", &d));
    ck_assert(!pagoda_gguf_get_int(f, "t.f32", &i));
    ck_assert(!pagoda_gguf_get_int(f, "no.such", &i));
    ck_assert(pagoda_gguf_get_bool(f, "t.bool", &bo) && bo);
    char *s = pagoda_gguf_get_str(f, "general.architecture");
    ck_assert_str_eq(s, "llama");
    free(s);
    s = pagoda_gguf_get_str(f, "t.empty");
    ck_assert_str_eq(s, "");
    free(s);
    ck_assert_ptr_null(pagoda_gguf_get_str(f, "t.u8"));

    const gguf_kv *kv = pagoda_gguf_find(f, "t.astr");
    ck_assert_ptr_nonnull(kv);
    ck_assert_int_eq(kv->val.type, GGUF_T_ARRAY);
    ck_assert_int_eq(kv->val.v.arr.elem_type, GGUF_T_STRING);
    ck_assert_uint_eq(kv->val.v.arr.count, 3);
    ck_assert_uint_eq(kv->val.v.arr.strs[2].len, 6);
    ck_assert(memcmp(kv->val.v.arr.strs[2].ptr, "h\xc3\xa9llo", 6) == 0);
    ck_assert_uint_eq(kv->val.v.arr.strs[1].len, 0);
    kv = pagoda_gguf_find(f, "t.af32");
    ck_assert(pagoda_gguf_arr_num(&kv->val, 1) == -2.5);
    ck_assert(isnan(pagoda_gguf_arr_num(&kv->val, 2)));
    kv = pagoda_gguf_find(f, "t.ai32");
    ck_assert(pagoda_gguf_arr_num(&kv->val, 1) == -8);
    kv = pagoda_gguf_find(f, "t.abool");
    ck_assert(pagoda_gguf_arr_num(&kv->val, 0) == 1 && pagoda_gguf_arr_num(&kv->val, 1) == 0);
    kv = pagoda_gguf_find(f, "t.ai64");
    ck_assert(pagoda_gguf_arr_num(&kv->val, 1) == (double)(1ll << 40));
    kv = pagoda_gguf_find(f, "t.af64");
    ck_assert(pagoda_gguf_arr_num(&kv->val, 0) == 0.5);
    kv = pagoda_gguf_find(f, "t.au16");
    ck_assert(pagoda_gguf_arr_num(&kv->val, 1) == 65535);
    kv = pagoda_gguf_find(f, "t.aempty");
    ck_assert_uint_eq(kv->val.v.arr.count, 0);
    kv = pagoda_gguf_find(f, "t.nested");
    ck_assert_int_eq(kv->val.v.arr.elem_type, GGUF_T_ARRAY);
    ck_assert_uint_eq(kv->val.v.arr.count, 2);
    ck_assert_uint_eq(kv->val.v.arr.nbytes, 12 + 2 + 12 + 1);
    uint32_t et;
    memcpy(&et, kv->val.v.arr.data, 4);
    ck_assert_uint_eq(et, GGUF_T_UINT8);

    ck_assert_uint_eq(f->n_tensors, 3);
    const gguf_tensor *t = pagoda_gguf_tensor(f, "q8");
    ck_assert_int_eq(t->type, PAGODA_DTYPE_Q8_0);
    ck_assert_uint_eq(t->nbytes, 34);
    ck_assert(memcmp(t->data, g_q8data, 34) == 0);
    t = pagoda_gguf_tensor(f, "half");
    ck_assert_int_eq(t->n_dims, 2);
    ck_assert_int_eq(t->ne[0], 16);
    ck_assert_int_eq(t->ne[1], 4);
    ck_assert_int_eq(t->ne[2], 1);
    ck_assert_uint_eq(t->offset % 32, 0);
    ck_assert(memcmp(t->data, g_f16data, sizeof g_f16data) == 0);
    t = pagoda_gguf_tensor(f, "f");
    ck_assert(memcmp(t->data, g_f32data, sizeof g_f32data) == 0);
    ck_assert_ptr_null(pagoda_gguf_tensor(f, "nope"));

    /* Copy every key into a second file (as gen-model does with a vocabulary). */
    gguf_writer *w = pagoda_gguf_writer_new();
    for (uint64_t k = 0; k < f->n_kv; k++) ck_assert_int_eq(pagoda_gguf_w_copy(w, &f->kv[k]), 0);
    bytes b2 = write_mem(w);
    pagoda_gguf_writer_free(w);
    gguf_file *g = pagoda_gguf_open_mem(b2.p, b2.n, "copy.gguf", err, sizeof err);
    ck_assert_msg(g, "%s", err);
    ck_assert_uint_eq(g->n_kv, f->n_kv);
    for (uint64_t k = 0; k < f->n_kv; k++) {
        const gguf_kv *a = &f->kv[k], *c = &g->kv[k];
        ck_assert(a->key.len == c->key.len && !memcmp(a->key.ptr, c->key.ptr, a->key.len));
        ck_assert_int_eq(a->val.type, c->val.type);
        if (a->val.type == GGUF_T_ARRAY) {
            ck_assert_uint_eq(a->val.v.arr.nbytes, c->val.v.arr.nbytes);
            ck_assert(!memcmp(a->val.v.arr.data, c->val.v.arr.data, a->val.v.arr.nbytes));
        } else if (a->val.type == GGUF_T_STRING) {
            ck_assert(a->val.v.str.len == c->val.v.str.len);
        } else if (a->val.type == GGUF_T_BOOL) {
            ck_assert(a->val.v.b == c->val.v.b);
        } else {
            ck_assert(a->val.v.u64 == c->val.v.u64);
        }
    }
    pagoda_gguf_close(g);
    free(b2.p);
    pagoda_gguf_close(f);
    free(b.p);
}
END_TEST

START_TEST(roundtrip_file_and_alignment)
{
    /* Through a real file, with a non-default alignment and version 2. */
    char path[] = "/tmp/pagoda_test_gguf_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *fp = fdopen(fd, "wb");
    gguf_writer *w = pagoda_gguf_writer_new();
    ck_assert_int_eq(pagoda_gguf_w_u32(w, "general.alignment", 64), 0);
    int64_t ne[1] = {3};
    float v[3] = {1, 2, 3};
    ck_assert_int_eq(pagoda_gguf_w_tensor(w, "a", PAGODA_DTYPE_F32, 1, ne), 0);
    ck_assert_int_eq(pagoda_gguf_w_tensor(w, "b", PAGODA_DTYPE_F32, 1, ne), 0);
    ck_assert_int_eq(pagoda_gguf_w_begin(w, fp), 0);
    ck_assert_int_eq(pagoda_gguf_w_data(w, fp, v, 12), 0);
    ck_assert_int_eq(pagoda_gguf_w_data(w, fp, v, 12), 0);
    ck_assert_int_eq(pagoda_gguf_w_finish(w, fp), 0);
    fclose(fp);
    pagoda_gguf_writer_free(w);
    /* Patch the version to 2: the layout is the same. */
    FILE *pf = fopen(path, "r+b");
    uint32_t ver = 2;
    fseek(pf, 4, SEEK_SET);
    fwrite(&ver, 4, 1, pf);
    fclose(pf);
    char err[512] = "";
    gguf_file *f = pagoda_gguf_open(path, err, sizeof err);
    ck_assert_msg(f, "%s", err);
    ck_assert_uint_eq(f->version, 2);
    ck_assert_uint_eq(f->alignment, 64);
    ck_assert_uint_eq(f->data_offset % 64, 0);
    ck_assert_uint_eq(pagoda_gguf_tensor(f, "b")->offset, 64);
    ck_assert(((const float *)pagoda_gguf_tensor(f, "b")->data)[2] == 3.0f);
    pagoda_gguf_close(f);
    /* Truncated on disk: the message names the path. */
    ck_assert_int_eq(truncate(path, 10), 0);
    ck_assert_ptr_null(pagoda_gguf_open(path, err, sizeof err));
    ck_assert_msg(strstr(err, path) && strstr(err, "truncated"), "%s", err);
    ck_assert_int_eq(truncate(path, 0), 0);
    ck_assert_ptr_null(pagoda_gguf_open(path, err, sizeof err));
    ck_assert_msg(strstr(err, "truncated") && strstr(err, "magic"), "%s", err);
    unlink(path);
    ck_assert_ptr_null(pagoda_gguf_open(path, err, sizeof err));
    ck_assert_msg(strstr(err, path) && strstr(err, "cannot open"), "%s", err);
}
END_TEST

/* ------------------------------------------------------------ corruption */

START_TEST(truncation_at_every_byte)
{
    bytes b = make_full();
    ck_assert_str_eq(open_err(b.p, b.n), "");
    for (size_t n = 0; n < b.n; n++) {
        const char *e = open_err(b.p, n);
        ck_assert_msg(e[0], "a file cut to %zu of %zu bytes was accepted", n, b.n);
        ck_assert_msg(strstr(e, "test.gguf") && strstr(e, "at byte"), "cut %zu: %s", n, e);
    }
    free(b.p);
}
END_TEST

START_TEST(bad_magic_and_version)
{
    rb r;
    rb_hdr(&r, 3, 0, 0);
    ck_assert_str_eq(open_err(r.buf, r.n), "");
    r.buf[0] = 'X';
    ASSERT_REFUSED(r.buf, r.n, "bad magic", "not a GGUF", "at byte 0");
    rb_hdr(&r, 1, 0, 0);
    ASSERT_REFUSED(r.buf, r.n, "version 1", "at byte 4");
    rb_hdr(&r, 4, 0, 0);
    ASSERT_REFUSED(r.buf, r.n, "unsupported version 4");
    rb_hdr(&r, 0x03000000u, 0, 0);
    ASSERT_REFUSED(r.buf, r.n, "big-endian");
}
END_TEST

START_TEST(huge_counts_and_lengths)
{
    rb r;
    rb_hdr(&r, 3, 0, UINT64_MAX);
    ASSERT_REFUSED(r.buf, r.n, "metadata count", "cannot fit");
    rb_hdr(&r, 3, 1ull << 40, 0);
    ASSERT_REFUSED(r.buf, r.n, "tensor count", "cannot fit");
    /* A key whose length runs past the end. */
    rb_hdr(&r, 3, 0, 1);
    rb_u64(&r, 1ull << 62);
    rb_zeros(&r, 8);
    ASSERT_REFUSED(r.buf, r.n, "key length", "exceeds", "at byte 24");
    /* A string value that is too long. */
    rb_hdr(&r, 3, 0, 1);
    rb_str(&r, "k");
    rb_u32(&r, GGUF_T_STRING);
    rb_u64(&r, 1000);
    rb_zeros(&r, 8);
    ASSERT_REFUSED(r.buf, r.n, "string value length 1000", "exceeds");
    /* Array counts whose element bytes are not in the file. */
    rb_hdr(&r, 3, 0, 1);
    rb_str(&r, "arr");
    rb_u32(&r, GGUF_T_ARRAY);
    rb_u32(&r, GGUF_T_UINT64);
    rb_u64(&r, 1ull << 61);
    rb_zeros(&r, 8);
    ASSERT_REFUSED(r.buf, r.n, "key 'arr'", "array of 2305843009213693952 uint64");
    rb_hdr(&r, 3, 0, 1);
    rb_str(&r, "arr");
    rb_u32(&r, GGUF_T_ARRAY);
    rb_u32(&r, GGUF_T_STRING);
    rb_u64(&r, UINT64_MAX);
    rb_zeros(&r, 8);
    ASSERT_REFUSED(r.buf, r.n, "key 'arr'", "strings cannot fit");
}
END_TEST

START_TEST(bad_values)
{
    rb r;
    rb_hdr(&r, 3, 0, 1);
    rb_str(&r, "k");
    rb_u32(&r, 13);
    rb_zeros(&r, 8);
    ASSERT_REFUSED(r.buf, r.n, "key 'k'", "unknown value type 13", "at byte 33");
    rb_hdr(&r, 3, 0, 1);
    rb_str(&r, "k");
    rb_u32(&r, GGUF_T_BOOL);
    r.buf[r.n++] = 2;
    rb_zeros(&r, 8);
    ASSERT_REFUSED(r.buf, r.n, "bool value is 2");
    rb_hdr(&r, 3, 0, 1);
    rb_str(&r, "k");
    rb_u32(&r, GGUF_T_ARRAY);
    rb_u32(&r, 77);
    rb_u64(&r, 1);
    rb_zeros(&r, 8);
    ASSERT_REFUSED(r.buf, r.n, "unknown array element type 77");
    /* Nesting deeper than the limit. */
    rb_hdr(&r, 3, 0, 1);
    rb_str(&r, "deep");
    rb_u32(&r, GGUF_T_ARRAY);
    for (int i = 0; i < 10; i++) { rb_u32(&r, GGUF_T_ARRAY); rb_u64(&r, 1); }
    rb_u32(&r, GGUF_T_UINT8);
    rb_u64(&r, 0);
    ASSERT_REFUSED(r.buf, r.n, "key 'deep'", "nested deeper");
    /* Duplicate key. */
    rb_hdr(&r, 3, 0, 2);
    rb_str(&r, "dup"); rb_u32(&r, GGUF_T_UINT8); r.buf[r.n++] = 1;
    rb_str(&r, "dup"); rb_u32(&r, GGUF_T_UINT8); r.buf[r.n++] = 2;
    rb_zeros(&r, 16);
    ASSERT_REFUSED(r.buf, r.n, "duplicate key 'dup'");
    /* Alignment that is not a power of two, or not uint32. */
    rb_hdr(&r, 3, 0, 1);
    rb_str(&r, "general.alignment"); rb_u32(&r, GGUF_T_UINT32); rb_u32(&r, 48);
    ASSERT_REFUSED(r.buf, r.n, "general.alignment 48", "power of two");
    rb_hdr(&r, 3, 0, 1);
    rb_str(&r, "general.alignment"); rb_u32(&r, GGUF_T_STRING); rb_str(&r, "32");
    ASSERT_REFUSED(r.buf, r.n, "general.alignment has type string");
}
END_TEST

/* A file with one kv-less header and the given tensors, data zeroed. */
START_TEST(bad_tensors)
{
    rb r;
    uint64_t ne32[2] = {32, 2}, ne8[1] = {8};
    /* Valid baseline: two F32 tensors side by side. */
    rb_hdr(&r, 3, 2, 0);
    rb_tensor(&r, "a", 1, ne8, 0, 0);
    rb_tensor(&r, "b", 1, ne8, 0, 32);
    rb_pad(&r, 32);
    rb_zeros(&r, 64);
    ck_assert_str_eq(open_err(r.buf, r.n), "");
    /* Overlap. */
    rb_hdr(&r, 3, 2, 0);
    rb_tensor(&r, "a", 2, ne32, 0, 0);
    rb_tensor(&r, "b", 1, ne8, 0, 32);
    rb_pad(&r, 32);
    rb_zeros(&r, 256);
    ASSERT_REFUSED(r.buf, r.n, "tensor 'b'", "overlaps tensor 'a'");
    /* Misaligned offset. */
    rb_hdr(&r, 3, 1, 0);
    rb_tensor(&r, "a", 1, ne8, 0, 4);
    rb_pad(&r, 32);
    rb_zeros(&r, 64);
    ASSERT_REFUSED(r.buf, r.n, "tensor 'a'", "offset 4", "not aligned to 32");
    /* Unknown types: a ggml type pagoda lacks, and a number ggml lacks. */
    rb_hdr(&r, 3, 1, 0);
    rb_tensor(&r, "k", 2, (uint64_t[]){256, 1}, 16, 0);
    rb_pad(&r, 32);
    rb_zeros(&r, 256);
    ASSERT_REFUSED(r.buf, r.n, "tensor 'k'", "IQ2_XXS (16)", "not support", "at byte 53");
    /* The issue-14 types are read; a K type's row must fill 256-value blocks. */
    rb_hdr(&r, 3, 1, 0);
    rb_tensor(&r, "k", 2, (uint64_t[]){256, 1}, PAGODA_DTYPE_Q4_K, 0);
    rb_pad(&r, 32);
    rb_zeros(&r, 144);
    ck_assert_str_eq(open_err(r.buf, r.n), "");
    rb_hdr(&r, 3, 1, 0);
    rb_tensor(&r, "k", 2, (uint64_t[]){128, 2}, PAGODA_DTYPE_Q4_K, 0);
    rb_pad(&r, 32);
    rb_zeros(&r, 144);
    ASSERT_REFUSED(r.buf, r.n, "tensor 'k'", "row length 128", "Q4_K block size 256");
    rb_hdr(&r, 3, 1, 0);
    rb_tensor(&r, "k", 1, ne8, 99, 0);
    rb_pad(&r, 32);
    rb_zeros(&r, 64);
    ASSERT_REFUSED(r.buf, r.n, "unknown type 99");
    /* MXFP4 (gpt-oss's experts): a 3-D expert tensor of whole 32-value
     * blocks is read (17 bytes a block); rows of 48 values are refused,
     * naming the tensor, its row length and the block. */
    rb_hdr(&r, 3, 1, 0);
    rb_tensor(&r, "blk.0.ffn_up_exps.weight", 3, (uint64_t[]){64, 2, 3}, PAGODA_DTYPE_MXFP4, 0);
    rb_pad(&r, 32);
    rb_zeros(&r, 2 * 17 * 6);
    ck_assert_str_eq(open_err(r.buf, r.n), "");
    rb_hdr(&r, 3, 1, 0);
    rb_tensor(&r, "blk.0.ffn_up_exps.weight", 3, (uint64_t[]){48, 2, 3}, PAGODA_DTYPE_MXFP4, 0);
    rb_pad(&r, 32);
    rb_zeros(&r, 2 * 17 * 6);
    ASSERT_REFUSED(r.buf, r.n, "tensor 'blk.0.ffn_up_exps.weight'", "row length 48", "MXFP4 block size 32");
    /* Row length not a multiple of the block. */
    rb_hdr(&r, 3, 1, 0);
    rb_tensor(&r, "q", 1, (uint64_t[]){33}, PAGODA_DTYPE_Q8_0, 0);
    rb_pad(&r, 32);
    rb_zeros(&r, 128);
    ASSERT_REFUSED(r.buf, r.n, "tensor 'q'", "row length 33", "block size 32");
    /* Dimensions: too many, zero, overflowing. */
    rb_hdr(&r, 3, 1, 0);
    rb_tensor(&r, "d", 5, (uint64_t[]){1, 1, 1, 1, 1}, 0, 0);
    rb_zeros(&r, 64);
    ASSERT_REFUSED(r.buf, r.n, "tensor 'd'", "5 dimensions");
    rb_hdr(&r, 3, 1, 0);
    rb_tensor(&r, "d", 2, (uint64_t[]){8, 0}, 0, 0);
    rb_zeros(&r, 64);
    ASSERT_REFUSED(r.buf, r.n, "tensor 'd'", "dimension 1 is 0");
    rb_hdr(&r, 3, 1, 0);
    rb_tensor(&r, "d", 3, (uint64_t[]){1ull << 31, 1ull << 31, 1ull << 31}, 0, 0);
    rb_zeros(&r, 64);
    ASSERT_REFUSED(r.buf, r.n, "tensor 'd'", "overflows");
    rb_hdr(&r, 3, 1, 0);
    rb_tensor(&r, "d", 2, (uint64_t[]){1ull << 31, 1ull << 31}, 0, 0);
    rb_zeros(&r, 64);
    ASSERT_REFUSED(r.buf, r.n, "tensor 'd'", "byte size overflows");
    rb_hdr(&r, 3, 1, 0);
    rb_tensor(&r, "d", 2, (uint64_t[]){1ull << 31, 1ull << 31}, PAGODA_DTYPE_F16, 0);
    rb_zeros(&r, 64);
    ASSERT_REFUSED(r.buf, r.n, "tensor 'd'", "outside the file");
    /* Data past the end, and at an offset past the end. */
    rb_hdr(&r, 3, 1, 0);
    rb_tensor(&r, "a", 2, ne32, 0, 0);
    rb_pad(&r, 32);
    rb_zeros(&r, 100);
    ASSERT_REFUSED(r.buf, r.n, "tensor 'a'", "outside the file");
    rb_hdr(&r, 3, 1, 0);
    rb_tensor(&r, "a", 1, ne8, 0, 1ull << 60);
    rb_pad(&r, 32);
    rb_zeros(&r, 32);
    ASSERT_REFUSED(r.buf, r.n, "tensor 'a'", "outside the file");
    /* Duplicate and empty names. */
    rb_hdr(&r, 3, 2, 0);
    rb_tensor(&r, "a", 1, ne8, 0, 0);
    rb_tensor(&r, "a", 1, ne8, 0, 32);
    rb_pad(&r, 32);
    rb_zeros(&r, 64);
    ASSERT_REFUSED(r.buf, r.n, "duplicate tensor name 'a'");
    rb_hdr(&r, 3, 1, 0);
    rb_tensor(&r, "", 1, ne8, 0, 0);
    rb_pad(&r, 32);
    rb_zeros(&r, 32);
    ASSERT_REFUSED(r.buf, r.n, "empty name");
}
END_TEST

/* Random byte flips over a valid file: any outcome but a crash is fine,
 * and a refusal always names the file (the sanitizer build checks reads). */
START_TEST(random_corruption)
{
    bytes b = make_full();
    tu_rng rng;
    tu_rng_seed(&rng, 7);
    uint8_t *copy = malloc(b.n);
    int refused = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(copy, b.p, b.n);
        int flips = 1 + (int)(tu_rng_u64(&rng) % 4);
        for (int k = 0; k < flips; k++) {
            size_t at = (size_t)(tu_rng_u64(&rng) % 400);
            if (at < b.n) copy[at] = (uint8_t)tu_rng_u64(&rng);
        }
        const char *e = open_err(copy, b.n);
        if (e[0]) {
            refused++;
            ck_assert_msg(strstr(e, "test.gguf"), "%s", e);
        }
    }
    ck_assert_int_gt(refused, 100);
    free(copy);
    free(b.p);
}
END_TEST

/* ------------------------------------------------------------ model metadata */

/* Issue 15 finding 6: the metadata a model is run with is not trusted. A
 * llama header with an 8-token vocabulary, the epsilon given (NAN: the key
 * left out) and one id key set (NULL: none); returns hparams_read's error
 * text, "" when it read. */
static const char *hparams_err(double eps, const char *id_key, uint32_t id)
{
    static const char *const toks[] = {"<unk>", "<s>", "</s>", "a", "b", "c", "d", "e"};
    gguf_writer *w = pagoda_gguf_writer_new();
    ck_assert_int_eq(pagoda_gguf_w_str(w, "general.architecture", "llama"), 0);
    ck_assert_int_eq(pagoda_gguf_w_u32(w, "llama.block_count", 1), 0);
    ck_assert_int_eq(pagoda_gguf_w_u32(w, "llama.embedding_length", 16), 0);
    ck_assert_int_eq(pagoda_gguf_w_u32(w, "llama.attention.head_count", 2), 0);
    ck_assert_int_eq(pagoda_gguf_w_u32(w, "llama.feed_forward_length", 32), 0);
    ck_assert_int_eq(pagoda_gguf_w_u32(w, "llama.context_length", 64), 0);
    if (!isnan(eps))
        ck_assert_int_eq(pagoda_gguf_w_f32(w, "llama.attention.layer_norm_rms_epsilon", (float)eps), 0);
    ck_assert_int_eq(pagoda_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 8), 0);
    if (id_key) ck_assert_int_eq(pagoda_gguf_w_u32(w, id_key, id), 0);
    bytes b = write_mem(w);
    pagoda_gguf_writer_free(w);
    char err[512] = "";
    gguf_file *f = pagoda_gguf_open_mem(b.p, b.n, "meta.gguf", err, sizeof err);
    ck_assert_msg(f, "%s", err);
    pagoda_hparams hp;
    g_err[0] = 0;
    if (pagoda_hparams_read(f, &hp, g_err, sizeof g_err) == PAGODA_OK) g_err[0] = 0;
    else ck_assert_msg(g_err[0], "refused without a message");
    pagoda_gguf_close(f);
    free(b.p);
    return g_err;
}

START_TEST(hparams_metadata_checked)
{
    /* accepted: the usual epsilons, none given, ids inside the vocabulary or "none" */
    ck_assert_str_eq(hparams_err(1e-5, NULL, 0), "");
    ck_assert_str_eq(hparams_err(1e-6, NULL, 0), "");
    ck_assert_str_eq(hparams_err(NAN, NULL, 0), "");
    ck_assert_str_eq(hparams_err(1e-5, "tokenizer.ggml.bos_token_id", 1), "");
    ck_assert_str_eq(hparams_err(1e-5, "tokenizer.ggml.eos_token_id", 7), "");
    ck_assert_str_eq(hparams_err(1e-5, "tokenizer.ggml.padding_token_id", 0xFFFFFFFFu), "");
    /* refused, naming the key and the value */
    static const struct { double eps; const char *shown; } bad_eps[] = {
        {-1, "-1"}, {0, "0"}, {INFINITY, "inf"}, {1e38, "1e+38"}, {0.5, "0.5"},
    };
    for (size_t i = 0; i < sizeof bad_eps / sizeof bad_eps[0]; i++) {
        const char *e = hparams_err(bad_eps[i].eps, NULL, 0);
        char want[128];
        snprintf(want, sizeof want, "llama.attention.layer_norm_rms_epsilon = %s", bad_eps[i].shown);
        ck_assert_msg(strstr(e, want) && strstr(e, "meta.gguf"), "eps %g: '%s' not in: %s",
                      bad_eps[i].eps, want, e);
    }
    static const char *const id_keys[] = {
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.seperator_token_id", "tokenizer.ggml.padding_token_id",
        "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.eot_token_id",
    };
    for (size_t i = 0; i < sizeof id_keys / sizeof id_keys[0]; i++) {
        static const uint32_t bad[] = {8, 1000000, 0x7FFFFFFFu, 0xFFFFFFFEu};
        for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
            const char *e = hparams_err(1e-5, id_keys[i], bad[j]);
            char want[160];
            snprintf(want, sizeof want, "%s = %u is outside the vocabulary (8 tokens)", id_keys[i], bad[j]);
            ck_assert_msg(strstr(e, want), "'%s' not in: %s", want, e);
        }
    }
}
END_TEST

/* ------------------------------------------------------------ real model */

START_TEST(stories260k)
{
    char err[512] = "";
    gguf_file *f = pagoda_gguf_open(tu_src("models/stories260K.gguf"), err, sizeof err);
    ck_assert_msg(f, "%s", err);
    char *arch = pagoda_gguf_get_str(f, "general.architecture");
    ck_assert_str_eq(arch, "llama");
    free(arch);
    int64_t v;
    ck_assert(pagoda_gguf_get_int(f, "llama.block_count", &v) && v == 5);
    ck_assert(pagoda_gguf_get_int(f, "llama.embedding_length", &v) && v == 64);
    ck_assert(pagoda_gguf_get_int(f, "llama.attention.head_count", &v) && v == 8);
    ck_assert(pagoda_gguf_get_int(f, "llama.attention.head_count_kv", &v) && v == 4);
    double eps;
    ck_assert(pagoda_gguf_get_float(f, "llama.attention.layer_norm_rms_epsilon", &eps));
    ck_assert(fabs(eps - 1e-5) < 1e-9);
    const gguf_kv *tok = pagoda_gguf_find(f, "tokenizer.ggml.tokens");
    ck_assert_ptr_nonnull(tok);
    ck_assert_uint_eq(tok->val.v.arr.count, 512);
    ck_assert_uint_eq(f->n_tensors, 48);
    const gguf_tensor *t = pagoda_gguf_tensor(f, "token_embd.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->type, PAGODA_DTYPE_F32);
    ck_assert_uint_eq(t->n_dims, 2);
    ck_assert_int_eq(t->ne[0], 64);
    ck_assert_int_eq(t->ne[1], 512);
    ck_assert_uint_eq(t->nbytes, 64 * 512 * 4);
    ck_assert_ptr_nonnull(pagoda_gguf_tensor(f, "blk.4.ffn_down.weight"));
    ck_assert_ptr_null(pagoda_gguf_tensor(f, "blk.5.ffn_down.weight"));
    pagoda_gguf_close(f);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, roundtrip_all_types);
    tcase_add_test(tc, roundtrip_file_and_alignment);
    tcase_add_test(tc, truncation_at_every_byte);
    tcase_add_test(tc, bad_magic_and_version);
    tcase_add_test(tc, huge_counts_and_lengths);
    tcase_add_test(tc, bad_values);
    tcase_add_test(tc, bad_tensors);
    tcase_add_test(tc, random_corruption);
    tcase_add_test(tc, hparams_metadata_checked);
    tcase_add_test(tc, stories260k);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
