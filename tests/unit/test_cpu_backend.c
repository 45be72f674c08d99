/*
 * test_cpu_backend.c: the cpu backend as the core sees it: dlopen the
 * built plugin ($PAGODA_PLUGIN_PATH/backend-cpu.so), read its descriptor,
 * create it with a fake host, and drive the ops table end to end
 * (alloc, upload, kernels, download), including the errors the boundary
 * must report instead of crashing.
 */
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pagoda/backend.h"
#include "pagoda/host.h"
#include "cpu_features.h"
#include "pagoda/plugin.h"
#include "quant.h"
#include "testutil.h"

static char last_error[1024];
static int n_errors;
static int64_t cfg_threads = 2;

static char last_log[1024];
static char all_log[16384];   /* every line since the last load_backend */

static void fake_log(const pagoda_host *h, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_log, sizeof last_log, fmt, ap);
    va_end(ap);
    size_t used = strlen(all_log);
    snprintf(all_log + used, sizeof all_log - used, "%s\n", last_log);
    fprintf(stderr, "[cpu test log %d] %s\n", level, last_log);
}

static int fake_error(const pagoda_host *h, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    n_errors++;
    return status;
}

static const char *cfg_f16_gemm; /* NULL: the default */
static const char *fake_str(const pagoda_host *h, const char *key, const char *dflt)
{
    return strcmp(key, "f16_gemm") == 0 && cfg_f16_gemm ? cfg_f16_gemm : dflt;
}
static int64_t fake_int(const pagoda_host *h, const char *key, int64_t dflt)
{
    return strcmp(key, "threads") == 0 ? cfg_threads : dflt;
}
static double fake_float(const pagoda_host *h, const char *key, double dflt) { return dflt; }
static int cfg_batch_invariant = -1; /* -1: the default */
static bool fake_bool(const pagoda_host *h, const char *key, bool dflt)
{
    return strcmp(key, "batch_invariant") == 0 && cfg_batch_invariant >= 0 ? cfg_batch_invariant : dflt;
}
static const char *fake_engine(const pagoda_host *h, const char *key) { return NULL; }

static const pagoda_host fake_host = {
    .struct_size = sizeof(pagoda_host),
    .abi_major = PAGODA_ABI_MAJOR,
    .abi_minor = PAGODA_ABI_MINOR,
    .log = fake_log,
    .config_str = fake_str,
    .config_int = fake_int,
    .config_float = fake_float,
    .config_bool = fake_bool,
    .engine_config = fake_engine,
    .error = fake_error,
};

typedef struct loaded {
    void *dl;
    const pagoda_plugin_desc *desc;
    const pagoda_backend_ops *ops;
    void *ctx;
} loaded;

static loaded load_backend(void)
{
    loaded L = {0};
    const char *dir = getenv("PAGODA_PLUGIN_PATH");
    char path[4096];
    if (dir)
        snprintf(path, sizeof path, "%s/backend-cpu.so", dir);
    else
        snprintf(path, sizeof path, "%s", tu_build("plugins/backend-cpu.so"));
    L.dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(L.dl != NULL, "dlopen %s: %s", path, dlerror());
    pagoda_plugin_entry_fn entry = (pagoda_plugin_entry_fn)dlsym(L.dl, PAGODA_PLUGIN_ENTRY_SYMBOL);
    ck_assert_ptr_nonnull(entry);
    L.desc = entry(PAGODA_ABI_MAJOR, PAGODA_ABI_MINOR);
    ck_assert_ptr_nonnull(L.desc);
    L.ops = L.desc->ops;
    all_log[0] = 0;
    char err[256] = "";
    ck_assert_int_eq(L.desc->create(&fake_host, &L.ctx, err, sizeof err), PAGODA_OK);
    ck_assert_ptr_nonnull(L.ctx);
    return L;
}

static void unload(loaded *L)
{
    L->desc->destroy(L->ctx);
    dlclose(L->dl);
}

START_TEST(test_descriptor)
{
    loaded L = load_backend();
    const pagoda_plugin_desc *d = L.desc;
    ck_assert_uint_eq(d->struct_size, sizeof(pagoda_plugin_desc));
    ck_assert_uint_eq(d->abi_major, PAGODA_ABI_MAJOR);
    ck_assert_int_eq(d->kind, PAGODA_KIND_BACKEND);
    ck_assert_str_eq(d->name, "cpu");
    ck_assert_ptr_nonnull(d->config_keys);
    ck_assert_str_eq(d->config_keys[0].name, "threads");
    ck_assert_int_eq(d->config_keys[0].type, PAGODA_KEY_INT);
    ck_assert_str_eq(d->config_keys[1].name, "batch_invariant");
    ck_assert_int_eq(d->config_keys[1].type, PAGODA_KEY_BOOL);
    ck_assert_str_eq(d->config_keys[1].default_str, "false");
    ck_assert_str_eq(d->config_keys[2].name, "f16_gemm");
    ck_assert_int_eq(d->config_keys[2].type, PAGODA_KEY_STRING);
    ck_assert_str_eq(d->config_keys[2].default_str, "auto");
    ck_assert_ptr_null(d->config_keys[3].name);
    char why[128] = "";
    int score = d->probe(why, sizeof why);
    ck_assert_int_gt(score, 0);
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))
        ck_assert_int_eq(score, 100);
    const pagoda_backend_ops *o = L.ops;
    ck_assert_uint_eq(o->struct_size, sizeof(pagoda_backend_ops));
    ck_assert(o->info && o->buffer_alloc && o->buffer_free && o->upload && o->download &&
              o->get_rows && o->rms_norm && o->matmul && o->rope && o->kv_write &&
              o->attention && o->swiglu && o->add);
    ck_assert(o->weights_from_host && o->copy_blocks && o->synchronize);

    pagoda_backend_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    ck_assert_int_eq(o->info(L.ctx, &info), PAGODA_OK);
    ck_assert_msg(strncmp(info.name, "cpu (", 5) == 0 && strstr(info.name, "2 threads"),
                  "name '%s'", info.name);
    ck_assert(info.host_memory);
    ck_assert_uint_eq(info.alignment, 64);
    ck_assert_uint_gt(info.mem_total, 0);
    ck_assert_uint_le(info.mem_free, info.mem_total);
    int types[] = {PAGODA_DTYPE_F32,  PAGODA_DTYPE_F16,  PAGODA_DTYPE_BF16, PAGODA_DTYPE_Q8_0,
                   PAGODA_DTYPE_Q4_0, PAGODA_DTYPE_Q4_1, PAGODA_DTYPE_Q6_K, PAGODA_DTYPE_Q5_0,
                   PAGODA_DTYPE_Q5_1, PAGODA_DTYPE_IQ4_NL, PAGODA_DTYPE_Q2_K, PAGODA_DTYPE_Q3_K,
                   PAGODA_DTYPE_Q4_K, PAGODA_DTYPE_Q5_K, PAGODA_DTYPE_IQ4_XS, PAGODA_DTYPE_MXFP4};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        ck_assert(info.weight_types & (1ull << types[i]));
    ck_assert_uint_eq(info.kv_types, (1ull << PAGODA_DTYPE_F32) | (1ull << PAGODA_DTYPE_F16) |
                                         (1ull << PAGODA_DTYPE_Q8_0));
    fprintf(stderr, "cpu backend info: %s\n", info.name);
    unload(&L);
}
END_TEST

static pagoda_tensor tens(pagoda_buffer *b, size_t off, int dtype, int64_t rows, int64_t cols)
{
    return (pagoda_tensor){.buf = b, .offset = off, .dtype = dtype, .rows = rows, .cols = cols,
                           .row_stride = pagoda_dtype_row_bytes(dtype, cols)};
}

START_TEST(test_matmul_end_to_end)
{
    loaded L = load_backend();
    const pagoda_backend_ops *o = L.ops;
    tu_rng r;
    tu_rng_seed(&r, 77);
    enum { T = 3, K = 256, N = 45 };
    float x[T * K], wf[N * K], bias[N], out[T * N], wd[K];
    tu_fill_normal(&r, x, T * K, 1.0f);
    tu_fill_normal(&r, wf, N * K, 0.3f);
    tu_fill_normal(&r, bias, N, 1.0f);
    size_t rb = pagoda_dtype_row_bytes(PAGODA_DTYPE_Q8_0, K);
    uint8_t *wq = malloc(rb * N);
    for (int n = 0; n < N; n++)
        ck_assert_int_eq(pagoda_quantize_row(PAGODA_DTYPE_Q8_0, wf + n * K, wq + n * rb, K), PAGODA_OK);

    /* Activations, bias and output in one activations buffer; weights in place. */
    pagoda_buffer *act = NULL, *wbuf = NULL;
    size_t off_x = 0, off_b = 64 * 64, off_o = off_b + 256;
    ck_assert_int_eq(o->buffer_alloc(L.ctx, PAGODA_BUF_ACTIVATIONS, off_o + sizeof out, &act), PAGODA_OK);
    ck_assert_int_eq(o->weights_from_host(L.ctx, wq, rb * N, &wbuf), PAGODA_OK);
    ck_assert_int_eq(o->upload(L.ctx, act, off_x, x, sizeof x), PAGODA_OK);
    ck_assert_int_eq(o->upload(L.ctx, act, off_b, bias, sizeof bias), PAGODA_OK);
    pagoda_tensor tx = tens(act, off_x, PAGODA_DTYPE_F32, T, K);
    pagoda_tensor tw = tens(wbuf, 0, PAGODA_DTYPE_Q8_0, N, K);
    pagoda_tensor tb = tens(act, off_b, PAGODA_DTYPE_F32, 1, N);
    pagoda_tensor to = tens(act, off_o, PAGODA_DTYPE_F32, T, N);
    ck_assert_int_eq(o->matmul(L.ctx, &tx, &tw, &tb, &to), PAGODA_OK);
    ck_assert_int_eq(o->synchronize(L.ctx), PAGODA_OK);
    ck_assert_int_eq(o->download(L.ctx, act, off_o, out, sizeof out), PAGODA_OK);
    for (int n = 0; n < N; n++) {
        pagoda_dequantize_row(PAGODA_DTYPE_Q8_0, wq + n * rb, wd, K);
        for (int t = 0; t < T; t++) {
            double ref = bias[n], mag = fabs(bias[n]);
            for (int k = 0; k < K; k++) {
                ref += (double)x[t * K + k] * wd[k];
                mag += fabs((double)x[t * K + k] * wd[k]);
            }
            /* int8 activations: about 1% of the magnitude at worst. */
            ck_assert_msg(fabs(out[t * N + n] - ref) <= 0.01 * mag + 1e-4, "t %d n %d: %f vs %f", t, n,
                          out[t * N + n], ref);
        }
    }

    /* The boundary refuses bad shapes and ranges with a message. */
    n_errors = 0;
    pagoda_tensor bad = tens(act, off_x, PAGODA_DTYPE_F32, T, K - 32);
    ck_assert_int_eq(o->matmul(L.ctx, &bad, &tw, NULL, &to), PAGODA_ERR_INVALID);
    ck_assert_int_eq(n_errors, 1);
    ck_assert_ptr_nonnull(strstr(last_error, "matmul"));
    pagoda_tensor huge = tens(act, off_o, PAGODA_DTYPE_F32, 1000, N);
    ck_assert_int_eq(o->matmul(L.ctx, &tx, &tw, NULL, &huge), PAGODA_ERR_INVALID);
    ck_assert_int_eq(o->upload(L.ctx, act, off_o, out, 1 << 20), PAGODA_ERR_INVALID);
    ck_assert_int_eq(o->upload(L.ctx, wbuf, 0, out, 4), PAGODA_ERR_INVALID); /* read-only weights */
    int32_t ids[2] = {0, N};
    pagoda_tensor rows_out = tens(act, off_o, PAGODA_DTYPE_F32, 2, K);
    ck_assert_int_eq(o->get_rows(L.ctx, &tw, ids, 2, &rows_out), PAGODA_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(last_error, "get_rows"));
    pagoda_tensor odd = tens(wbuf, 0, 99, N, K); /* a type the backend does not know */
    odd.row_stride = rb;
    ck_assert_int_ne(o->matmul(L.ctx, &tx, &odd, NULL, &to), PAGODA_OK);

    o->buffer_free(L.ctx, act);
    o->buffer_free(L.ctx, wbuf);
    o->buffer_free(L.ctx, NULL);
    free(wq);
    unload(&L);
}
END_TEST

/* The ABI 1.5 slots through the plugin: matmul_experts on a 3-D Q8_0
 * weight (each row against its expert's dequantized rows) and moe_combine,
 * then the boundary's refusals of bad ids, x_rows, shapes and an expert
 * range past the buffer, each with a message naming the op. */
START_TEST(test_moe_slots)
{
    loaded L = load_backend();
    const pagoda_backend_ops *o = L.ops;
    ck_assert_ptr_nonnull(o->matmul_experts);
    ck_assert_ptr_nonnull(o->moe_combine);
    tu_rng r;
    tu_rng_seed(&r, 78);
    enum { T = 3, KC = 2, R = T * KC, E = 4, K = 64, N = 24 };
    float x[T * K], wf[E * N * K], out[R * N], comb[T * N], wd[K];
    tu_fill_normal(&r, x, T * K, 1.0f);
    tu_fill_normal(&r, wf, E * N * K, 0.3f);
    size_t rb = pagoda_dtype_row_bytes(PAGODA_DTYPE_Q8_0, K);
    uint8_t *wq = malloc(rb * E * N);
    for (int n = 0; n < E * N; n++)
        ck_assert_int_eq(pagoda_quantize_row(PAGODA_DTYPE_Q8_0, wf + n * K, wq + n * rb, K), PAGODA_OK);
    pagoda_buffer *act = NULL, *wbuf = NULL;
    size_t off_x = 0, off_o = 4096, off_c = off_o + sizeof out;
    ck_assert_int_eq(o->buffer_alloc(L.ctx, PAGODA_BUF_ACTIVATIONS, off_c + sizeof comb, &act), PAGODA_OK);
    ck_assert_int_eq(o->weights_from_host(L.ctx, wq, rb * E * N, &wbuf), PAGODA_OK);
    ck_assert_int_eq(o->upload(L.ctx, act, off_x, x, sizeof x), PAGODA_OK);
    pagoda_tensor tx = tens(act, off_x, PAGODA_DTYPE_F32, T, K);
    pagoda_tensor tw = tens(wbuf, 0, PAGODA_DTYPE_Q8_0, N, K);
    pagoda_tensor to = tens(act, off_o, PAGODA_DTYPE_F32, R, N);
    pagoda_tensor tc = tens(act, off_c, PAGODA_DTYPE_F32, T, N);
    int32_t ids[R] = {3, 1, 1, 1, 0, 3}, xr[R] = {0, 0, 1, 1, 2, 2}, dst[R] = {0, 0, 1, 1, 2, 2};
    float wts[R] = {0.25f, 0.75f, 0.5f, 0.5f, 1.0f, 0.125f};
    ck_assert_int_eq(o->matmul_experts(L.ctx, &tx, xr, &tw, E, rb * N, ids, &to), PAGODA_OK);
    ck_assert_int_eq(o->download(L.ctx, act, off_o, out, sizeof out), PAGODA_OK);
    for (int i = 0; i < R; i++)
        for (int n = 0; n < N; n++) {
            pagoda_dequantize_row(PAGODA_DTYPE_Q8_0, wq + (size_t)(ids[i] * N + n) * rb, wd, K);
            double ref = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                ref += (double)x[xr[i] * K + k] * wd[k];
                mag += fabs((double)x[xr[i] * K + k] * wd[k]);
            }
            ck_assert_msg(fabs(out[i * N + n] - ref) <= 0.01 * mag + 1e-4, "row %d n %d: %f vs %f", i, n,
                          out[i * N + n], ref);
        }
    ck_assert_int_eq(o->moe_combine(L.ctx, &to, dst, wts, false, &tc), PAGODA_OK);
    ck_assert_int_eq(o->download(L.ctx, act, off_c, comb, sizeof comb), PAGODA_OK);
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            float want = 0.0f;
            for (int i = 0; i < R; i++)
                if (dst[i] == t) want += wts[i] * out[i * N + n];
            ck_assert_float_eq(comb[t * N + n], want);
        }

    n_errors = 0;
    int32_t bad_ids[R] = {0, 1, 2, 3, 4, 0};
    ck_assert_int_eq(o->matmul_experts(L.ctx, &tx, xr, &tw, E, rb * N, bad_ids, &to), PAGODA_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(last_error, "matmul_experts: ids[4]"));
    int32_t bad_xr[R] = {0, 0, 1, 3, 2, 2};
    ck_assert_int_eq(o->matmul_experts(L.ctx, &tx, bad_xr, &tw, E, rb * N, ids, &to), PAGODA_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(last_error, "x_rows[3]"));
    /* x_rows NULL: one x row per output row, and x has only T */
    ck_assert_int_eq(o->matmul_experts(L.ctx, &tx, NULL, &tw, E, rb * N, ids, &to), PAGODA_ERR_INVALID);
    /* five experts do not fit in a buffer of four */
    ck_assert_int_eq(o->matmul_experts(L.ctx, &tx, xr, &tw, E + 1, rb * N, ids, &to), PAGODA_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(last_error, "do not fit"));
    pagoda_tensor wrong = tens(act, off_o, PAGODA_DTYPE_F32, R, N - 1);
    ck_assert_int_eq(o->matmul_experts(L.ctx, &tx, xr, &tw, E, rb * N, ids, &wrong), PAGODA_ERR_INVALID);
    int32_t bad_dst[R] = {0, 0, 1, 1, 2, 3};
    ck_assert_int_eq(o->moe_combine(L.ctx, &to, bad_dst, wts, true, &tc), PAGODA_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(last_error, "moe_combine: dst_rows[5]"));
    ck_assert_int_eq(o->moe_combine(L.ctx, &to, dst, wts, true, &to), PAGODA_ERR_INVALID); /* aliasing */
    ck_assert_int_eq(n_errors, 7);

    o->buffer_free(L.ctx, act);
    o->buffer_free(L.ctx, wbuf);
    free(wq);
    unload(&L);
}
END_TEST

/* One decode token through kv_write + attention: with a single cached key
 * the softmax is 1, so the output is that token's V row (per KV group). */
START_TEST(test_attention_end_to_end)
{
    loaded L = load_backend();
    const pagoda_backend_ops *o = L.ops;
    pagoda_kv_layout lay = {.n_layers = 1, .n_blocks = 4, .block_size = 4, .n_kv_heads = 1,
                            .head_dim = 8, .dtype = PAGODA_DTYPE_F32};
    pagoda_buffer *kv = NULL, *act = NULL;
    ck_assert_int_eq(o->buffer_alloc(L.ctx, PAGODA_BUF_KV, pagoda_kv_pool_bytes(&lay), &kv), PAGODA_OK);
    ck_assert_int_eq(o->buffer_alloc(L.ctx, PAGODA_BUF_ACTIVATIONS, 4096, &act), PAGODA_OK);
    float k[8], v[8], q[16];
    for (int i = 0; i < 8; i++) {
        k[i] = 0.1f * i;
        v[i] = (float)i - 3.0f;
    }
    for (int i = 0; i < 16; i++) q[i] = 0.5f;
    o->upload(L.ctx, act, 0, k, sizeof k);
    o->upload(L.ctx, act, 64, v, sizeof v);
    o->upload(L.ctx, act, 128, q, sizeof q);
    pagoda_tensor tk = tens(act, 0, PAGODA_DTYPE_F32, 1, 8), tv = tens(act, 64, PAGODA_DTYPE_F32, 1, 8);
    pagoda_tensor tq = tens(act, 128, PAGODA_DTYPE_F32, 1, 16), tout = tens(act, 256, PAGODA_DTYPE_F32, 1, 16);
    int32_t slot = 2 * 4 + 0; /* block 2, first slot */
    ck_assert_int_eq(o->kv_write(L.ctx, kv, &lay, 0, &tk, &tv, &slot, 1), PAGODA_OK);
    int32_t table[1] = {2};
    pagoda_seq_view sv = {.q_start = 0, .n_q = 1, .ctx_len = 1, .n_blocks = 1, .block_table = table};
    int32_t pos = 0;
    pagoda_batch b = {.seq_no = 1, .n_tokens = 1, .tokens = &pos, .positions = &pos, .slots = &slot,
                      .n_seqs = 1, .seqs = &sv};
    ck_assert_int_eq(o->attention(L.ctx, &tq, kv, &lay, 0, &b, 2, 0.35f, &tout), PAGODA_OK);
    float out[16];
    ck_assert_int_eq(o->download(L.ctx, act, 256, out, sizeof out), PAGODA_OK);
    for (int h = 0; h < 2; h++)
        for (int d = 0; d < 8; d++) ck_assert_float_eq_tol(out[h * 8 + d], v[d], 1e-6f);
    /* A block id outside the pool is refused. */
    table[0] = 9;
    ck_assert_int_eq(o->attention(L.ctx, &tq, kv, &lay, 0, &b, 2, 0.35f, &tout), PAGODA_ERR_INVALID);
    slot = 99;
    ck_assert_int_eq(o->kv_write(L.ctx, kv, &lay, 0, &tk, &tv, &slot, 1), PAGODA_ERR_INVALID);
    /* Q8_0 needs heads of whole 32-value blocks; Q4_0 is no KV type */
    slot = 2 * 4;
    pagoda_kv_layout q8 = lay;
    q8.dtype = PAGODA_DTYPE_Q8_0;
    ck_assert_int_eq(o->kv_write(L.ctx, kv, &q8, 0, &tk, &tv, &slot, 1), PAGODA_ERR_INVALID);
    q8.dtype = PAGODA_DTYPE_Q4_0;
    ck_assert_int_eq(o->kv_write(L.ctx, kv, &q8, 0, &tk, &tv, &slot, 1), PAGODA_ERR_UNSUPPORTED);
    /* copy_blocks moves block 2 to block 0. */
    int32_t src = 2, dst = 0;
    ck_assert_int_eq(o->copy_blocks(L.ctx, kv, &lay, &src, &dst, 1), PAGODA_OK);
    float back[8];
    ck_assert_int_eq(o->download(L.ctx, kv, pagoda_kv_offset(&lay, 0, 1, 0), back, sizeof back), PAGODA_OK);
    ck_assert_int_eq(memcmp(back, v, sizeof v), 0);
    o->buffer_free(L.ctx, kv);
    o->buffer_free(L.ctx, act);
    unload(&L);
}
END_TEST

/* The probe reason (what `pagoda plugins [-v]` prints), the start-up line
 * and the info name say which kernels run, in the same words: on this
 * machine, and with PAGODA_CPU_ISA=scalar forcing the reference kernels.
 * (The naming of the levels this machine lacks is checked with a faked
 * CPUID in test_cpu_kernels.) */
static void check_path_agrees(const char *want_path, const char *want_isa)
{
    loaded L = load_backend();
    char why[256] = "";
    L.desc->probe(why, sizeof why);
    ck_assert_msg(strncmp(why, want_path, strlen(want_path)) == 0, "probe: '%s', want '%s'", why, want_path);
    char line[512];
    snprintf(line, sizeof line, "cpu backend: %s, 2 threads, OpenBLAS ", want_path);
    ck_assert_msg(strncmp(last_log, line, strlen(line)) == 0, "log: '%s', want '%s'", last_log, line);
    pagoda_backend_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    ck_assert_int_eq(L.ops->info(L.ctx, &info), PAGODA_OK);
    char name[96];
    snprintf(name, sizeof name, "cpu (%s, 2 threads,", want_isa);
    ck_assert_msg(strncmp(info.name, name, strlen(name)) == 0, "info: '%s', want '%s'", info.name, name);
    unload(&L);
}

START_TEST(test_kernel_path_named_alike)
{
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                __builtin_cpu_supports("f16c");
    bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512vnni");
    /* AVX-VNNI beside AVX2 alone: the detection's word (this binary's copy) */
    int d = pagoda_cpu_detect_isa();
    const char *isa = !avx2 ? "scalar" : avx512 ? "AVX-512 VNNI" : d == PAGODA_CPU_ISA_AVX_VNNI ? "AVX-VNNI" : "AVX2";
    char want[96];
    /* an AMX host runs the AVX-512 table and says where its tiles run */
    snprintf(want, sizeof want, !avx2 ? "%s kernels (no AVX2/FMA/F16C)"
                                : d == PAGODA_CPU_ISA_AMX ? "%s kernels (and AMX tiles for the repacked GEMMs of >= 16 tokens)"
                                                          : "%s kernels",
             isa);
    unsetenv("PAGODA_CPU_ISA");
    check_path_agrees(want, isa);
    if (!avx2) return;
    setenv("PAGODA_CPU_ISA", "scalar", 1);
    check_path_agrees("scalar kernels (forced; the CPU has more)", "scalar");
    if (d > PAGODA_CPU_ISA_AVX2) {
        setenv("PAGODA_CPU_ISA", "avx2", 1);
        check_path_agrees("AVX2 kernels (forced; the CPU has more)", "AVX2");
    }
    if (d == PAGODA_CPU_ISA_AMX) {
        setenv("PAGODA_CPU_ISA", "avx512", 1);
        check_path_agrees("AVX-512 VNNI kernels (forced; the CPU has more)", "AVX-512 VNNI");
    }
    unsetenv("PAGODA_CPU_ISA");
}
END_TEST

/* The start-up line says when the repacked copies the memory plan counts
 * (weight_extra_bytes, an upper bound there) are made, and how to hold
 * none; with PAGODA_CPU_REPACK_MIN_T=0 (read once a load) that there are
 * none, and the plan's op agrees. */
START_TEST(test_repack_startup_line)
{
    unsetenv("PAGODA_CPU_REPACK_MIN_T");
    loaded L = load_backend();
    ck_assert_ptr_nonnull(L.ops->weight_extra_bytes);
    uint64_t planned = 1;
    ck_assert_int_eq(L.ops->weight_extra_bytes(L.ctx, PAGODA_DTYPE_Q8_0, 64, 256, &planned), PAGODA_OK);
    if (planned)   /* a level with a GEMM on the layout (AVX-512 VNNI, AMX) */
        ck_assert_msg(strstr(all_log, "is made when it first meets a batch of >= 16 tokens") &&
                      strstr(all_log, "PAGODA_CPU_REPACK_MIN_T=0 holds none"), "%s", all_log);
    else
        ck_assert_msg(strstr(all_log, "(not on this level: the row kernels, no copies beside the weights)"),
                      "%s", all_log);
    unload(&L);
    setenv("PAGODA_CPU_REPACK_MIN_T", "0", 1);
    L = load_backend();
    ck_assert_int_eq(L.ops->weight_extra_bytes(L.ctx, PAGODA_DTYPE_Q8_0, 64, 256, &planned), PAGODA_OK);
    ck_assert_uint_eq(planned, 0);
    ck_assert_msg(strstr(all_log, "cpu backend: repacked GEMMs off (PAGODA_CPU_REPACK_MIN_T=0): no copies "
                                  "beside the weights"), "%s", all_log);
    unload(&L);
    unsetenv("PAGODA_CPU_REPACK_MIN_T");
}
END_TEST

/* [backend.cpu] f16_gemm: the start-up line names the setting and each
 * type's path; a value outside auto/fma/dpbf16/off fails create. */
START_TEST(test_f16_gemm_key)
{
    bool env_bf16 = getenv("PAGODA_CPU_BF16") != NULL;
    loaded L = load_backend();
    ck_assert_msg(strstr(all_log, "cpu backend: F16/BF16 matmuls (f16_gemm = auto"), "%s", all_log);
    if (pagoda_cpu_active_isa() >= PAGODA_CPU_ISA_AVX512 && !env_bf16)
        ck_assert_msg(strstr(all_log, "F16 F32-FMA GEMM from "), "%s", all_log);
    unload(&L);
    cfg_f16_gemm = "fma";
    L = load_backend();
    ck_assert_msg(strstr(all_log, "(f16_gemm = fma): "), "%s", all_log);
    if (pagoda_cpu_active_isa() >= PAGODA_CPU_ISA_AVX512)
        ck_assert_msg(strstr(all_log, "F16 F32-FMA GEMM from ") && strstr(all_log, "BF16 F32-FMA GEMM from "), "%s",
                      all_log);
    else
        ck_assert_msg(strstr(all_log, "F16 exact F32 kernels; BF16 exact F32 kernels"), "%s", all_log);
    unload(&L);
    cfg_f16_gemm = "off";
    L = load_backend();
    ck_assert_msg(strstr(all_log, "(f16_gemm = off): F16 exact F32 kernels; BF16 exact F32 kernels"), "%s", all_log);
    unload(&L);
    cfg_f16_gemm = "fast";
    loaded B = {0};
    char path[4096];
    const char *dir = getenv("PAGODA_PLUGIN_PATH");
    if (dir)
        snprintf(path, sizeof path, "%s/backend-cpu.so", dir);
    else
        snprintf(path, sizeof path, "%s", tu_build("plugins/backend-cpu.so"));
    B.dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_ptr_nonnull(B.dl);
    pagoda_plugin_entry_fn entry = (pagoda_plugin_entry_fn)dlsym(B.dl, PAGODA_PLUGIN_ENTRY_SYMBOL);
    B.desc = entry(PAGODA_ABI_MAJOR, PAGODA_ABI_MINOR);
    char err[256] = "";
    ck_assert_int_eq(B.desc->create(&fake_host, &B.ctx, err, sizeof err), PAGODA_ERR_INVALID);
    ck_assert_ptr_null(B.ctx);
    ck_assert_msg(strstr(err, "f16_gemm = \"fast\": expected auto, fma, dpbf16 or off"), "%s", err);
    dlclose(B.dl);
    cfg_f16_gemm = NULL;
}
END_TEST

/* Two CPU backends of one process (one plugin, two contexts) with other
 * settings keep their own: A (batch_invariant on, f16_gemm = fma) created
 * first, B (off, f16_gemm = off) after it, both alive. A's F16 matmul of
 * one row equals that row in A's call of 70 rows bit for bit (batch
 * invariance: its lanes kernel from one row on), with B's calls between;
 * each start-up line names its own setting, and nothing warns. */
static void f16_matmul(loaded *L, pagoda_buffer *act, pagoda_buffer *wbuf, size_t off_x, size_t off_o, int64_t T,
                       int64_t K, int64_t N, float *out)
{
    pagoda_tensor tx = tens(act, off_x, PAGODA_DTYPE_F32, T, K);
    pagoda_tensor tw = tens(wbuf, 0, PAGODA_DTYPE_F16, N, K);
    pagoda_tensor to = tens(act, off_o, PAGODA_DTYPE_F32, T, N);
    ck_assert_int_eq(L->ops->matmul(L->ctx, &tx, &tw, NULL, &to), PAGODA_OK);
    ck_assert_int_eq(L->ops->synchronize(L->ctx), PAGODA_OK);
    ck_assert_int_eq(L->ops->download(L->ctx, act, off_o, out, sizeof(float) * (size_t)(T * N)), PAGODA_OK);
}

START_TEST(test_two_backends_own_settings)
{
    cfg_batch_invariant = 1;
    cfg_f16_gemm = "fma";
    loaded A = load_backend();
    ck_assert_msg(strstr(all_log, "(f16_gemm = fma): "), "%s", all_log);
    ck_assert_msg(strstr(all_log, "cpu backend: batch_invariant = on"), "%s", all_log);
    cfg_batch_invariant = 0;
    cfg_f16_gemm = "off";
    loaded B = load_backend();
    ck_assert_msg(strstr(all_log, "(f16_gemm = off): F16 exact F32 kernels; BF16 exact F32 kernels"), "%s",
                  all_log);
    ck_assert_msg(!strstr(all_log, "batch_invariant = on"), "%s", all_log);
    ck_assert_msg(!strstr(all_log, "another CPU backend"), "%s", all_log);
    cfg_batch_invariant = -1;
    cfg_f16_gemm = NULL;

    enum { T = 70, K = 320, N = 40, T0 = 37 };
    tu_rng r;
    tu_rng_seed(&r, 91);
    float *x = malloc(sizeof(float) * T * K), *wf = malloc(sizeof(float) * N * K);
    float *full = malloc(sizeof(float) * T * N), *other = malloc(sizeof(float) * T * N), one[N], oneb[N];
    tu_fill_normal(&r, x, T * K, 1.0f);
    uint16_t *w = tu_half_weights(&r, PAGODA_DTYPE_F16, N, K, wf);
    size_t off_x = 0, off_o = sizeof(float) * T * K, bytes = off_o + sizeof(float) * T * N;
    pagoda_buffer *act[2] = {NULL, NULL}, *wb[2] = {NULL, NULL};
    loaded *be[2] = {&A, &B};
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(be[i]->ops->buffer_alloc(be[i]->ctx, PAGODA_BUF_ACTIVATIONS, bytes, &act[i]), PAGODA_OK);
        ck_assert_int_eq(be[i]->ops->weights_from_host(be[i]->ctx, w, sizeof(uint16_t) * N * K, &wb[i]),
                         PAGODA_OK);
        ck_assert_int_eq(be[i]->ops->upload(be[i]->ctx, act[i], off_x, x, sizeof(float) * T * K), PAGODA_OK);
    }
    size_t off_row = sizeof(float) * T0 * K;
    f16_matmul(&A, act[0], wb[0], off_x, off_o, T, K, N, full);
    f16_matmul(&B, act[1], wb[1], off_x, off_o, T, K, N, other);
    f16_matmul(&B, act[1], wb[1], off_row, off_o, 1, K, N, oneb);
    f16_matmul(&A, act[0], wb[0], off_row, off_o, 1, K, N, one);
    if (pagoda_cpu_kernel_isa() >= PAGODA_CPU_ISA_AVX2)
        ck_assert_msg(!memcmp(one, full + T0 * N, sizeof one),
                      "backend A (batch_invariant): row %d alone differs from it in a call of %d rows", T0, T);
    else
        printf("test_two_backends_own_settings: no F16 lanes kernel at the scalar level: rows not compared\n");
    /* both near the exact sums (F16 and F32: exact products either way) */
    for (int n = 0; n < N; n++) {
        ck_assert(tu_near_exact_f32(full[T0 * N + n], x + T0 * K, wf + n * K, K));
        ck_assert(tu_near_exact_f32(other[T0 * N + n], x + T0 * K, wf + n * K, K));
        ck_assert(tu_near_exact_f32(oneb[n], x + T0 * K, wf + n * K, K));
    }
    for (int i = 0; i < 2; i++) {
        be[i]->ops->buffer_free(be[i]->ctx, act[i]);
        be[i]->ops->buffer_free(be[i]->ctx, wb[i]);
    }
    free(x); free(wf); free(full); free(other); free(w);
    unload(&B);
    unload(&A);
}
END_TEST

START_TEST(test_threads_default_is_cpu_count)
{
    cfg_threads = 0;
    loaded L = load_backend();
    pagoda_backend_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    ck_assert_int_eq(L.ops->info(L.ctx, &info), PAGODA_OK);
    char want[32];
    snprintf(want, sizeof want, "%ld threads", sysconf(_SC_NPROCESSORS_ONLN));
    ck_assert_msg(strstr(info.name, want) != NULL, "'%s' lacks '%s'", info.name, want);
    unload(&L);
    cfg_threads = 2;
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cpu_backend");
    TCase *tc = tcase_create("plugin");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_descriptor);
    tcase_add_test(tc, test_matmul_end_to_end);
    tcase_add_test(tc, test_moe_slots);
    tcase_add_test(tc, test_attention_end_to_end);
    tcase_add_test(tc, test_repack_startup_line);
    tcase_add_test(tc, test_f16_gemm_key);
    tcase_add_test(tc, test_two_backends_own_settings);
    tcase_add_test(tc, test_threads_default_is_cpu_count);
    tcase_add_test(tc, test_kernel_path_named_alike);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
