/*
 * backend.c: the "cpu" backend plugin: pagoda_backend_ops over host memory.
 * Buffers are aligned host allocations (weights used in place from the
 * mmap'd model); every op checks its tensors against their buffers here,
 * at the plugin boundary, then calls the kernels in kernels.h, which trust
 * their arguments.
 * Not for: kernels (matmul.c, experts.c, attention.c, ops.c, kernels/).
 */
#include <cblas.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blas_fix.h"
#include "cpu_features.h"
#include "kernels.h"
#include "amx/amx.h"
#include "amx/gemm_bf16_amx.h"
#include "avx512/gemm_fma.h"
#include "repack/repack.h"
#include "repack/repack_matmul.h"
#include "pagoda/backend.h"
#include "pagoda/host.h"
#include "pagoda/plugin.h"

struct pagoda_buffer {
    uint8_t *data;
    size_t size;
    int purpose;
    bool owned;      /* false for weights_from_host: the bytes are the caller's */
};

typedef struct cpu_ctx {
    const pagoda_host *host;
    pagoda_cpu_exec ex;
    int n_threads;
    char blas_core[32];
} cpu_ctx;

#define ERR(c, st, ...) \
    ((c)->host && (c)->host->error ? (c)->host->error((c)->host, (st), __VA_ARGS__) : (st))

/* ------------------------------------------------------------ validation */

/* Does tensor t fit in its buffer, with `dtype` (or any weight type when
 * dtype < 0) and F32 rows 4-byte aligned? */
static int check_tensor(cpu_ctx *c, const char *op, const char *what, const pagoda_tensor *t,
                        int dtype)
{
    if (!t || !t->buf) return ERR(c, PAGODA_ERR_INVALID, "%s: %s is NULL", op, what);
    if (dtype >= 0 && t->dtype != dtype)
        return ERR(c, PAGODA_ERR_INVALID, "%s: %s is %s, expected %s", op, what,
                   pagoda_dtype_name(t->dtype), pagoda_dtype_name(dtype));
    if (t->rows < 0 || t->cols <= 0)
        return ERR(c, PAGODA_ERR_INVALID, "%s: %s has shape %lld x %lld", op, what,
                   (long long)t->rows, (long long)t->cols);
    size_t rb = pagoda_dtype_row_bytes(t->dtype, t->cols);
    if (!rb)
        return ERR(c, PAGODA_ERR_INVALID, "%s: %s: %lld columns of %s (type %d) is not a whole number of blocks",
                   op, what, (long long)t->cols, pagoda_dtype_name(t->dtype), (int)t->dtype);
    if (t->rows > 1 && t->row_stride < rb)
        return ERR(c, PAGODA_ERR_INVALID, "%s: %s row_stride %zu < row size %zu", op, what,
                   t->row_stride, rb);
    if (t->dtype == PAGODA_DTYPE_F32 && ((t->offset | t->row_stride) & 3))
        return ERR(c, PAGODA_ERR_INVALID, "%s: %s offset/row_stride not 4-byte aligned", op, what);
    size_t need = t->rows ? t->offset + (size_t)(t->rows - 1) * t->row_stride + rb : t->offset;
    if (need > t->buf->size)
        return ERR(c, PAGODA_ERR_INVALID, "%s: %s needs %zu bytes, its buffer has %zu", op, what,
                   need, t->buf->size);
    return PAGODA_OK;
}

static void *tptr(const pagoda_tensor *t)
{
    return t->buf->data + t->offset;
}

static int check_layout(cpu_ctx *c, const char *op, const pagoda_buffer *kv,
                        const pagoda_kv_layout *L, int layer)
{
    if (!kv || !L) return ERR(c, PAGODA_ERR_INVALID, "%s: KV buffer or layout is NULL", op);
    if (L->n_layers <= 0 || L->n_blocks <= 0 || L->block_size <= 0 || L->n_kv_heads <= 0 ||
        L->head_dim <= 0)
        return ERR(c, PAGODA_ERR_INVALID, "%s: KV layout has a non-positive dimension", op);
    if (L->dtype != PAGODA_DTYPE_F32 && L->dtype != PAGODA_DTYPE_F16 && L->dtype != PAGODA_DTYPE_Q8_0)
        return ERR(c, PAGODA_ERR_UNSUPPORTED, "%s: KV type %s; the cpu backend stores F32, F16 or Q8_0",
                   op, pagoda_dtype_name(L->dtype));
    if (L->kind != PAGODA_KV_SEPARATE && L->kind != PAGODA_KV_LATENT)
        return ERR(c, PAGODA_ERR_UNSUPPORTED, "%s: KV layout kind %d; the cpu backend stores 0 (K and "
                   "V) and 1 (latent)", op, L->kind);
    if (L->kind == PAGODA_KV_LATENT && L->n_kv_heads != 1)
        return ERR(c, PAGODA_ERR_INVALID, "%s: a latent KV layout has one KV head, not %d", op,
                   L->n_kv_heads);
    if (!pagoda_kv_head_bytes(L))
        return ERR(c, PAGODA_ERR_INVALID, "%s: KV type %s needs head_dim a multiple of 32, not %d", op,
                   pagoda_dtype_name(L->dtype), L->head_dim);
    if (pagoda_kv_pool_bytes(L) > kv->size)
        return ERR(c, PAGODA_ERR_INVALID, "%s: KV layout needs %zu bytes, buffer has %zu", op,
                   pagoda_kv_pool_bytes(L), kv->size);
    if (layer < 0 || layer >= L->n_layers)
        return ERR(c, PAGODA_ERR_INVALID, "%s: layer %d outside 0..%d", op, layer, L->n_layers - 1);
    return PAGODA_OK;
}

static int same_shape(cpu_ctx *c, const char *op, const pagoda_tensor *a, const pagoda_tensor *b)
{
    if (a->rows != b->rows || a->cols != b->cols)
        return ERR(c, PAGODA_ERR_INVALID, "%s: shapes differ: %lld x %lld vs %lld x %lld", op,
                   (long long)a->rows, (long long)a->cols, (long long)b->rows, (long long)b->cols);
    return PAGODA_OK;
}

#define TRY(expr)                     \
    do {                              \
        int st_ = (expr);             \
        if (st_ != PAGODA_OK) return st_; \
    } while (0)

/* ------------------------------------------------------------------ info */

static void meminfo(uint64_t *total, uint64_t *avail)
{
    *total = *avail = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return;
    char line[256];
    unsigned long long kb;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) *total = kb * 1024ull;
        else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) *avail = kb * 1024ull;
    }
    fclose(f);
}

static int cpu_info(void *ctx, pagoda_backend_info *info)
{
    cpu_ctx *c = ctx;
    size_t sz = info->struct_size ? info->struct_size : sizeof *info;
    pagoda_backend_info o;
    memset(&o, 0, sizeof o);
    o.struct_size = sz < sizeof o ? sz : sizeof o;
    /* the kernels' level (pagoda_cpu_kernel_path says why, in the probe
     * reason and the start-up line) */
    snprintf(o.name, sizeof o.name, "cpu (%s, %d threads, OpenBLAS %s)",
             pagoda_cpu_isa_name(pagoda_cpu_kernel_isa()), c->n_threads, c->blas_core);
    meminfo(&o.mem_total, &o.mem_free);
    o.alignment = 64;
    /* One list of the types: the kernels' own check. */
    for (int t = 0; t < PAGODA_DTYPE_COUNT_; t++)
        if (pagoda_cpu_weight_type_supported(t)) o.weight_types |= 1ull << t;
    o.kv_types = (1ull << PAGODA_DTYPE_F32) | (1ull << PAGODA_DTYPE_F16) | (1ull << PAGODA_DTYPE_Q8_0);
    o.host_memory = true;
    o.kv_kinds = 1u << PAGODA_KV_LATENT;
    o.attn_sinks = true;
    memcpy(info, &o, o.struct_size);
    return PAGODA_OK;
}

/* --------------------------------------------------------------- buffers */

static int cpu_buffer_alloc(void *ctx, int purpose, size_t size, pagoda_buffer **out)
{
    cpu_ctx *c = ctx;
    if (!out) return ERR(c, PAGODA_ERR_INVALID, "buffer_alloc: out is NULL");
    *out = NULL;
    pagoda_buffer *b = calloc(1, sizeof *b);
    size_t rounded = (size + 63) & ~(size_t)63;
    if (rounded < size) return ERR(c, PAGODA_ERR_NOMEM, "buffer_alloc: %zu bytes is too large", size);
    if (b) b->data = aligned_alloc(64, rounded ? rounded : 64);
    if (!b || !b->data) {
        free(b);
        return ERR(c, PAGODA_ERR_NOMEM, "buffer_alloc: cannot allocate %zu bytes of host memory",
                   size);
    }
    b->size = size;
    b->purpose = purpose;
    b->owned = true;
    /* weights may be repacked (kernels/repack/): register where they live */
    if (purpose == PAGODA_BUF_WEIGHTS && c->ex.repack &&
        pagoda_rp_cache_add_region(c->ex.repack, b->data, size)) {
        free(b->data);
        free(b);
        return ERR(c, PAGODA_ERR_NOMEM, "buffer_alloc: out of memory");
    }
    *out = b;
    return PAGODA_OK;
}

static void cpu_buffer_free(void *ctx, pagoda_buffer *buf)
{
    cpu_ctx *c = ctx;
    if (!buf) return;
    if (buf->purpose == PAGODA_BUF_WEIGHTS && c && c->ex.repack)
        pagoda_rp_cache_remove_region(c->ex.repack, buf->data);
    if (buf->owned) free(buf->data);
    free(buf);
}

static int cpu_upload(void *ctx, pagoda_buffer *buf, size_t offset, const void *src, size_t size)
{
    cpu_ctx *c = ctx;
    if (!buf || (!src && size)) return ERR(c, PAGODA_ERR_INVALID, "upload: NULL buffer or source");
    if (offset > buf->size || size > buf->size - offset)
        return ERR(c, PAGODA_ERR_INVALID, "upload: %zu bytes at offset %zu overrun a %zu-byte buffer",
                   size, offset, buf->size);
    if (!buf->owned) return ERR(c, PAGODA_ERR_INVALID, "upload: buffer wraps read-only host weights");
    if (size) memcpy(buf->data + offset, src, size);
    if (size && c->ex.repack) pagoda_rp_cache_invalidate(c->ex.repack, buf->data + offset, size);
    return PAGODA_OK;
}

static int cpu_download(void *ctx, const pagoda_buffer *buf, size_t offset, void *dst, size_t size)
{
    cpu_ctx *c = ctx;
    if (!buf || (!dst && size)) return ERR(c, PAGODA_ERR_INVALID, "download: NULL buffer or destination");
    if (offset > buf->size || size > buf->size - offset)
        return ERR(c, PAGODA_ERR_INVALID, "download: %zu bytes at offset %zu overrun a %zu-byte buffer",
                   size, offset, buf->size);
    if (size) memcpy(dst, buf->data + offset, size);
    return PAGODA_OK;
}

/* ABI 1.12: host memory is this backend's memory, so a host-memory comm
 * (MPI) reduces tensor-parallel sums in the activation buffer itself. */
static int cpu_buffer_address(void *ctx, const pagoda_buffer *buf, size_t offset, size_t size, void **out)
{
    cpu_ctx *c = ctx;
    if (!buf || !out) return ERR(c, PAGODA_ERR_INVALID, "buffer_address: NULL buffer or output");
    if (offset > buf->size || size > buf->size - offset)
        return ERR(c, PAGODA_ERR_INVALID, "buffer_address: %zu bytes at offset %zu overrun a %zu-byte buffer",
                   size, offset, buf->size);
    if (!buf->owned) return ERR(c, PAGODA_ERR_INVALID, "buffer_address: buffer wraps read-only host weights");
    *out = buf->data + offset;
    return PAGODA_OK;
}

/* ABI 1.15: the repacked copy repack_matmul.c will make of this weight on
 * its first call of >= pagoda_rp_min_t() tokens (the same conditions:
 * a GEMM on the layout at this ISA level, a repackable type, K whole
 * blocks), so the memory plan counts it before loading. */
static int cpu_weight_extra_bytes(void *ctx, int dtype, int64_t N, int64_t K, uint64_t *out)
{
    cpu_ctx *c = ctx;
    if (!out || N < 0 || K < 0) return ERR(c, PAGODA_ERR_INVALID, "weight_extra_bytes: NULL output or negative shape");
    *out = c->ex.repack ? pagoda_rp_planned_bytes(dtype, N, K) : 0;
    return PAGODA_OK;
}

static int cpu_weight_extra_held(void *ctx, uint64_t *out)
{
    cpu_ctx *c = ctx;
    if (!out) return ERR(c, PAGODA_ERR_INVALID, "weight_extra_held: NULL output");
    *out = c->ex.repack ? (uint64_t)pagoda_rp_cache_bytes(c->ex.repack, NULL) : 0;
    return PAGODA_OK;
}

/* The start-up line on the repacked GEMMs: which path takes matmuls of
 * many tokens, and when the copies the memory plan counts as an upper
 * bound (cpu_weight_extra_bytes) are made, or that none are. */
static void log_repack(const pagoda_host *host, const pagoda_cpu_exec *ex)
{
    char why[128];
    bool amx = pagoda_amx_usable(why, sizeof why);
    int rp = pagoda_rp_path();
    long long min_t = (long long)pagoda_rp_min_t();
    if (!min_t) {
        host->log(host, PAGODA_LOG_INFO,
                  "cpu backend: repacked GEMMs off (PAGODA_CPU_REPACK_MIN_T=0): no copies beside the "
                  "weights, Q8_0/Q4_0/Q4_1/Q4_K/Q5_K/Q6_K matmuls on the row kernels; AMX tiles %s: %s",
                  amx ? "usable" : "not used", why);
        return;
    }
    if (!rp) {
        host->log(host, PAGODA_LOG_INFO,
                  "cpu backend: Q8_0/Q4_0/Q4_1/Q4_K/Q5_K/Q6_K matmuls of >= %lld tokens: %s (not on this "
                  "level: the row kernels, no copies beside the weights); AMX tiles %s: %s",
                  min_t, pagoda_rp_path_name(rp), amx ? "usable" : "not used", why);
        return;
    }
    host->log(host, PAGODA_LOG_INFO,
              "cpu backend: Q8_0/Q4_0/Q4_1/Q4_K/Q5_K/Q6_K matmuls of >= %lld tokens: %s%s on weights repacked "
              "at first use: a weight's copy (1.22-1.39 bytes a weight, beside the file's) is made when "
              "it first meets a batch of >= %lld tokens, the output head's when %lld rows of logits are "
              "computed in one call (the memory plan counts every copy); PAGODA_CPU_REPACK_MIN_T=0 "
              "holds none; AMX tiles %s: %s",
              min_t, pagoda_rp_path_name(rp),
              rp == PAGODA_RP_PATH_AMX && pagoda_rp_path_for(ex, rp, PAGODA_DTYPE_Q4_0, 1 << 20) != rp
                  ? " for Q8_0 of >= " PAGODA_RP_AMX_MIN_T_STR " tokens, AVX-512 VNNI for the rest "
                    "(PAGODA_CPU_AMX_ALL=1: tiles for all)"
                  : "",
              min_t, min_t, amx ? "usable" : "not used", why);
}

static int cpu_weights_from_host(void *ctx, const void *host, size_t size, pagoda_buffer **out)
{
    cpu_ctx *c = ctx;
    if (!out || (!host && size)) return ERR(c, PAGODA_ERR_INVALID, "weights_from_host: NULL argument");
    pagoda_buffer *b = calloc(1, sizeof *b);
    if (!b) return ERR(c, PAGODA_ERR_NOMEM, "weights_from_host: out of memory");
    b->data = (uint8_t *)host;  /* used in place, never written */
    b->size = size;
    b->purpose = PAGODA_BUF_WEIGHTS;
    b->owned = false;
    if (c->ex.repack && pagoda_rp_cache_add_region(c->ex.repack, host, size)) {
        free(b);
        return ERR(c, PAGODA_ERR_NOMEM, "weights_from_host: out of memory");
    }
    *out = b;
    return PAGODA_OK;
}

/* --------------------------------------------------------------- kernels */

static int cpu_get_rows(void *ctx, const pagoda_tensor *table, const int32_t *ids, int32_t n,
                        const pagoda_tensor *out)
{
    cpu_ctx *c = ctx;
    TRY(check_tensor(c, "get_rows", "table", table, -1));
    TRY(check_tensor(c, "get_rows", "out", out, PAGODA_DTYPE_F32));
    if (!pagoda_cpu_weight_type_supported(table->dtype))
        return ERR(c, PAGODA_ERR_UNSUPPORTED, "get_rows: table type %s", pagoda_dtype_name(table->dtype));
    if (n < 0 || (n && !ids) || out->rows < n || out->cols != table->cols)
        return ERR(c, PAGODA_ERR_INVALID, "get_rows: %d ids into out %lld x %lld (table cols %lld)",
                   n, (long long)out->rows, (long long)out->cols, (long long)table->cols);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= table->rows)
            return ERR(c, PAGODA_ERR_INVALID, "get_rows: id %d at %d outside 0..%lld", ids[i], i,
                       (long long)table->rows - 1);
    return pagoda_cpu_get_rows(tptr(table), table->dtype, table->row_stride, table->cols, ids, n,
                               tptr(out), out->row_stride);
}

static int cpu_rms_norm(void *ctx, const pagoda_tensor *x, const pagoda_tensor *w, float eps,
                        const pagoda_tensor *out)
{
    cpu_ctx *c = ctx;
    TRY(check_tensor(c, "rms_norm", "x", x, PAGODA_DTYPE_F32));
    TRY(check_tensor(c, "rms_norm", "w", w, PAGODA_DTYPE_F32));
    TRY(check_tensor(c, "rms_norm", "out", out, PAGODA_DTYPE_F32));
    TRY(same_shape(c, "rms_norm", x, out));
    if (w->cols != x->cols || w->rows < 1)
        return ERR(c, PAGODA_ERR_INVALID, "rms_norm: w has %lld columns, x %lld",
                   (long long)w->cols, (long long)x->cols);
    pagoda_cpu_rms_norm_mt(&c->ex, tptr(x), x->row_stride, tptr(w), eps, tptr(out), out->row_stride,
                           x->rows, x->cols);
    return PAGODA_OK;
}

static int cpu_matmul(void *ctx, const pagoda_tensor *x, const pagoda_tensor *w,
                      const pagoda_tensor *bias, const pagoda_tensor *out)
{
    cpu_ctx *c = ctx;
    TRY(check_tensor(c, "matmul", "x", x, PAGODA_DTYPE_F32));
    TRY(check_tensor(c, "matmul", "w", w, -1));
    TRY(check_tensor(c, "matmul", "out", out, PAGODA_DTYPE_F32));
    if (!pagoda_cpu_weight_type_supported(w->dtype))
        return ERR(c, PAGODA_ERR_UNSUPPORTED, "matmul: weight type %s (%d) is not supported by the cpu backend",
                   pagoda_dtype_name(w->dtype), (int)w->dtype);
    if (w->cols != x->cols || out->rows != x->rows || out->cols != w->rows)
        return ERR(c, PAGODA_ERR_INVALID,
                   "matmul: x %lld x %lld, w %lld x %lld, out %lld x %lld do not match", (long long)x->rows,
                   (long long)x->cols, (long long)w->rows, (long long)w->cols, (long long)out->rows,
                   (long long)out->cols);
    if (bias) {
        TRY(check_tensor(c, "matmul", "bias", bias, PAGODA_DTYPE_F32));
        if (bias->cols != w->rows || bias->rows < 1)
            return ERR(c, PAGODA_ERR_INVALID, "matmul: bias has %lld columns, expected %lld",
                       (long long)bias->cols, (long long)w->rows);
    }
    int st = pagoda_cpu_matmul(&c->ex, tptr(x), x->row_stride, x->rows, x->cols, tptr(w), w->dtype,
                               w->row_stride, w->rows, bias ? tptr(bias) : NULL, tptr(out),
                               out->row_stride);
    if (st == PAGODA_ERR_NOMEM) return ERR(c, st, "matmul: cannot allocate activation scratch");
    if (st) return ERR(c, st, "matmul: %s", pagoda_status_str(st));
    return PAGODA_OK;
}

static int cpu_matmul_multi(void *ctx, const pagoda_tensor *x, int32_t n, const pagoda_tensor *w,
                            const pagoda_tensor *const *bias, const pagoda_tensor *out)
{
    cpu_ctx *c = ctx;
    _Static_assert(PAGODA_MATMUL_MULTI_MAX <= PAGODA_CPU_MATMUL_MAX, "the kernels take every matrix");
    if (n < 1 || n > PAGODA_MATMUL_MULTI_MAX || !w || !out)
        return ERR(c, PAGODA_ERR_INVALID, "matmul_multi: %d matrices (1..%d, w and out non-NULL)", n,
                   PAGODA_MATMUL_MULTI_MAX);
    TRY(check_tensor(c, "matmul_multi", "x", x, PAGODA_DTYPE_F32));
    pagoda_cpu_mat m[PAGODA_MATMUL_MULTI_MAX];
    for (int32_t i = 0; i < n; i++) {
        const pagoda_tensor *b = bias ? bias[i] : NULL;
        char wn[16], on[16];
        snprintf(wn, sizeof wn, "w[%d]", i);
        snprintf(on, sizeof on, "out[%d]", i);
        TRY(check_tensor(c, "matmul_multi", wn, &w[i], -1));
        TRY(check_tensor(c, "matmul_multi", on, &out[i], PAGODA_DTYPE_F32));
        if (!pagoda_cpu_weight_type_supported(w[i].dtype))
            return ERR(c, PAGODA_ERR_UNSUPPORTED, "matmul_multi: %s type %s (%d) is not supported by the cpu backend",
                       wn, pagoda_dtype_name(w[i].dtype), (int)w[i].dtype);
        if (w[i].cols != x->cols || out[i].rows != x->rows || out[i].cols != w[i].rows)
            return ERR(c, PAGODA_ERR_INVALID,
                       "matmul_multi: x %lld x %lld, %s %lld x %lld, %s %lld x %lld do not match",
                       (long long)x->rows, (long long)x->cols, wn, (long long)w[i].rows,
                       (long long)w[i].cols, on, (long long)out[i].rows, (long long)out[i].cols);
        if (b) {
            TRY(check_tensor(c, "matmul_multi", "bias", b, PAGODA_DTYPE_F32));
            if (b->cols != w[i].rows || b->rows < 1)
                return ERR(c, PAGODA_ERR_INVALID, "matmul_multi: bias[%d] has %lld columns, expected %lld", i,
                           (long long)b->cols, (long long)w[i].rows);
        }
        m[i] = (pagoda_cpu_mat){.w = tptr(&w[i]), .dtype = w[i].dtype, .w_stride = w[i].row_stride,
                                .N = w[i].rows, .bias = b ? tptr(b) : NULL, .out = tptr(&out[i]),
                                .out_stride = out[i].row_stride};
    }
    int st = pagoda_cpu_matmul_multi(&c->ex, tptr(x), x->row_stride, x->rows, x->cols, m, n);
    if (st == PAGODA_ERR_NOMEM) return ERR(c, st, "matmul_multi: cannot allocate activation scratch");
    if (st) return ERR(c, st, "matmul_multi: %s", pagoda_status_str(st));
    return PAGODA_OK;
}

static int cpu_rope(void *ctx, const pagoda_tensor *x, int32_t n_heads, int32_t head_dim,
                    const int32_t *positions, const pagoda_rope_params *p)
{
    cpu_ctx *c = ctx;
    TRY(check_tensor(c, "rope", "x", x, PAGODA_DTYPE_F32));
    if (!p || !p->inv_freq || (x->rows && !positions))
        return ERR(c, PAGODA_ERR_INVALID, "rope: NULL params, inv_freq or positions");
    if (n_heads <= 0 || head_dim <= 0 || (int64_t)n_heads * head_dim > x->cols)
        return ERR(c, PAGODA_ERR_INVALID, "rope: %d heads x %d dims do not fit %lld columns", n_heads,
                   head_dim, (long long)x->cols);
    if (p->n_rot < 0 || p->n_rot % 2 || p->n_rot > head_dim || p->n_rot > 1024)
        return ERR(c, PAGODA_ERR_INVALID, "rope: n_rot %d must be even and <= head_dim %d (and 1024)",
                   p->n_rot, head_dim);
    pagoda_cpu_rope_mt(&c->ex, tptr(x), x->row_stride, x->rows, n_heads, head_dim, positions, p);
    return PAGODA_OK;
}

static int cpu_kv_write(void *ctx, pagoda_buffer *kv, const pagoda_kv_layout *L, int32_t layer,
                        const pagoda_tensor *k, const pagoda_tensor *v, const int32_t *slots,
                        int32_t n)
{
    cpu_ctx *c = ctx;
    TRY(check_layout(c, "kv_write", kv, L, layer));
    TRY(check_tensor(c, "kv_write", "k", k, PAGODA_DTYPE_F32));
    bool latent = L->kind == PAGODA_KV_LATENT;   /* v is not read */
    if (!latent) TRY(check_tensor(c, "kv_write", "v", v, PAGODA_DTYPE_F32));
    int64_t row = (int64_t)L->n_kv_heads * L->head_dim;
    if (n < 0 || k->rows < n || k->cols != row || (n && !slots) ||
        (!latent && (v->rows < n || v->cols != row)))
        return ERR(c, PAGODA_ERR_INVALID, "kv_write: %d tokens, k %lld x %lld, v %lld x %lld, want cols %lld",
                   n, (long long)k->rows, (long long)k->cols, latent ? 0ll : (long long)v->rows,
                   latent ? 0ll : (long long)v->cols, (long long)row);
    int64_t n_slots = (int64_t)L->n_blocks * L->block_size;
    for (int32_t i = 0; i < n; i++)
        if (slots[i] < 0 || slots[i] >= n_slots)
            return ERR(c, PAGODA_ERR_INVALID, "kv_write: slot %d of token %d outside 0..%lld", slots[i],
                       i, (long long)n_slots - 1);
    pagoda_cpu_kv_write_mt(&c->ex, kv->data, L, layer, tptr(k), k->row_stride, latent ? NULL : tptr(v),
                           latent ? 0 : v->row_stride, slots, n);
    return PAGODA_OK;
}

/* attention and attention_ext: the checks, then the kernel. */
static int attention_run(cpu_ctx *c, const pagoda_tensor *q, const pagoda_buffer *kv,
                         const pagoda_kv_layout *L, int32_t layer, const pagoda_batch *b,
                         int32_t n_heads, float scale, int32_t window, const pagoda_tensor *sinks,
                         const pagoda_tensor *out)
{
    TRY(check_layout(c, "attention", kv, L, layer));
    TRY(check_tensor(c, "attention", "q", q, PAGODA_DTYPE_F32));
    TRY(check_tensor(c, "attention", "out", out, PAGODA_DTYPE_F32));
    TRY(same_shape(c, "attention", q, out));
    if (!b || b->n_seqs < 0 || (b->n_seqs && !b->seqs))
        return ERR(c, PAGODA_ERR_INVALID, "attention: NULL batch or sequences");
    if (n_heads <= 0 || n_heads % L->n_kv_heads || (int64_t)n_heads * L->head_dim != q->cols)
        return ERR(c, PAGODA_ERR_INVALID,
                   "attention: %d heads (KV heads %d, head_dim %d) do not match q's %lld columns",
                   n_heads, L->n_kv_heads, L->head_dim, (long long)q->cols);
    if (L->head_dim > 1024)
        return ERR(c, PAGODA_ERR_UNSUPPORTED, "attention: head_dim %d > 1024", L->head_dim);
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const pagoda_seq_view *sv = &b->seqs[s];
        if (sv->n_q < 0 || sv->q_start < 0 || (int64_t)sv->q_start + sv->n_q > q->rows ||
            sv->n_q > sv->ctx_len || (int64_t)sv->n_blocks * L->block_size < sv->ctx_len ||
            (sv->n_blocks && !sv->block_table))
            return ERR(c, PAGODA_ERR_INVALID,
                       "attention: sequence %d (q_start %d, n_q %d, ctx_len %d, %d blocks) does not fit %lld query rows / block size %d",
                       s, sv->q_start, sv->n_q, sv->ctx_len, sv->n_blocks, (long long)q->rows,
                       L->block_size);
        int32_t used = (sv->ctx_len + L->block_size - 1) / L->block_size;
        for (int32_t i = 0; i < used; i++)
            if (sv->block_table[i] < 0 || sv->block_table[i] >= L->n_blocks)
                return ERR(c, PAGODA_ERR_INVALID, "attention: sequence %d block %d is %d, outside 0..%d",
                           s, i, sv->block_table[i], L->n_blocks - 1);
    }
    if (window < 0) return ERR(c, PAGODA_ERR_INVALID, "attention: window %d is negative", window);
    if (sinks) {
        TRY(check_tensor(c, "attention", "sinks", sinks, PAGODA_DTYPE_F32));
        if (sinks->rows != 1 || sinks->cols != n_heads)
            return ERR(c, PAGODA_ERR_INVALID, "attention: sinks is [%lld x %lld], expected [1 x %d] "
                       "(one logit a query head)", (long long)sinks->rows, (long long)sinks->cols,
                       n_heads);
    }
    int st = pagoda_cpu_attention_sinks(&c->ex, tptr(q), q->row_stride, kv->data, L, layer, b,
                                        n_heads, scale, window, sinks ? tptr(sinks) : NULL,
                                        tptr(out), out->row_stride);
    if (st) return ERR(c, st, "attention: %s", pagoda_status_str(st));
    return PAGODA_OK;
}

static int cpu_attention(void *ctx, const pagoda_tensor *q, const pagoda_buffer *kv,
                         const pagoda_kv_layout *L, int32_t layer, const pagoda_batch *b,
                         int32_t n_heads, float scale, const pagoda_tensor *out)
{
    return attention_run(ctx, q, kv, L, layer, b, n_heads, scale, 0, NULL, out);
}

static int cpu_attention_ext(void *ctx, const pagoda_tensor *q, const pagoda_buffer *kv,
                             const pagoda_kv_layout *L, int32_t layer, const pagoda_batch *b,
                             const pagoda_attn_params *p, const pagoda_tensor *out)
{
    cpu_ctx *c = ctx;
    /* the fields this backend reads: struct_size .. window (ABI 1.1) */
    size_t need = offsetof(pagoda_attn_params, window) + sizeof p->window;
    if (!p || p->struct_size < need)
        return ERR(c, PAGODA_ERR_INVALID, "attention_ext: params %s (struct_size %zu, need >= %zu)",
                   p ? "too short" : "NULL", p ? p->struct_size : 0, need);
    /* ABI 1.8: the sinks, where the caller's struct has them */
    size_t with_sinks = offsetof(pagoda_attn_params, sinks) + sizeof p->sinks;
    const pagoda_tensor *sinks = p->struct_size >= with_sinks && p->sinks.buf ? &p->sinks : NULL;
    return attention_run(c, q, kv, L, layer, b, p->n_heads, p->scale, p->window, sinks, out);
}

/* The gated activations' tensors: gate, up and out F32 of one shape. */
static int check_glu(cpu_ctx *c, const char *op, const pagoda_tensor *gate, const pagoda_tensor *up,
                     const pagoda_tensor *out)
{
    TRY(check_tensor(c, op, "gate", gate, PAGODA_DTYPE_F32));
    TRY(check_tensor(c, op, "up", up, PAGODA_DTYPE_F32));
    TRY(check_tensor(c, op, "out", out, PAGODA_DTYPE_F32));
    TRY(same_shape(c, op, gate, up));
    TRY(same_shape(c, op, gate, out));
    return PAGODA_OK;
}

static int cpu_swiglu_oai(void *ctx, const pagoda_tensor *gate, const pagoda_tensor *up, float alpha,
                          float limit, const pagoda_tensor *out)
{
    cpu_ctx *c = ctx;
    TRY(check_glu(c, "swiglu_oai", gate, up, out));
    if (!(limit > 0.0f) || !isfinite(alpha))
        return ERR(c, PAGODA_ERR_INVALID, "swiglu_oai: limit %g must be positive and alpha %g finite",
                   (double)limit, (double)alpha);
    pagoda_cpu_swiglu_oai_mt(&c->ex, tptr(gate), gate->row_stride, tptr(up), up->row_stride, alpha,
                             limit, tptr(out), out->row_stride, gate->rows, gate->cols);
    return PAGODA_OK;
}

static int cpu_swiglu(void *ctx, const pagoda_tensor *gate, const pagoda_tensor *up,
                      const pagoda_tensor *out)
{
    cpu_ctx *c = ctx;
    TRY(check_glu(c, "swiglu", gate, up, out));
    pagoda_cpu_swiglu_mt(&c->ex, tptr(gate), gate->row_stride, tptr(up), up->row_stride, tptr(out),
                      out->row_stride, gate->rows, gate->cols);
    return PAGODA_OK;
}

static int cpu_geglu(void *ctx, const pagoda_tensor *gate, const pagoda_tensor *up,
                     const pagoda_tensor *out)
{
    cpu_ctx *c = ctx;
    TRY(check_glu(c, "geglu", gate, up, out));
    pagoda_cpu_geglu_mt(&c->ex, tptr(gate), gate->row_stride, tptr(up), up->row_stride, tptr(out),
                     out->row_stride, gate->rows, gate->cols);
    return PAGODA_OK;
}

static int cpu_scale(void *ctx, const pagoda_tensor *x, float s, const pagoda_tensor *out)
{
    cpu_ctx *c = ctx;
    TRY(check_tensor(c, "scale", "x", x, PAGODA_DTYPE_F32));
    TRY(check_tensor(c, "scale", "out", out, PAGODA_DTYPE_F32));
    TRY(same_shape(c, "scale", x, out));
    pagoda_cpu_scale_mt(&c->ex, tptr(x), x->row_stride, s, tptr(out), out->row_stride, x->rows, x->cols);
    return PAGODA_OK;
}

static int cpu_add(void *ctx, const pagoda_tensor *a, const pagoda_tensor *b,
                   const pagoda_tensor *out)
{
    cpu_ctx *c = ctx;
    TRY(check_tensor(c, "add", "a", a, PAGODA_DTYPE_F32));
    TRY(check_tensor(c, "add", "b", b, PAGODA_DTYPE_F32));
    TRY(check_tensor(c, "add", "out", out, PAGODA_DTYPE_F32));
    TRY(same_shape(c, "add", a, b));
    TRY(same_shape(c, "add", a, out));
    pagoda_cpu_add_mt(&c->ex, tptr(a), a->row_stride, tptr(b), b->row_stride, tptr(out), out->row_stride,
                   a->rows, a->cols);
    return PAGODA_OK;
}

static int cpu_copy_blocks(void *ctx, pagoda_buffer *kv, const pagoda_kv_layout *L,
                           const int32_t *src, const int32_t *dst, int32_t n)
{
    cpu_ctx *c = ctx;
    TRY(check_layout(c, "copy_blocks", kv, L, 0));
    if (n < 0 || (n && (!src || !dst))) return ERR(c, PAGODA_ERR_INVALID, "copy_blocks: bad block lists");
    for (int32_t i = 0; i < n; i++)
        if (src[i] < 0 || src[i] >= L->n_blocks || dst[i] < 0 || dst[i] >= L->n_blocks)
            return ERR(c, PAGODA_ERR_INVALID, "copy_blocks: pair %d (%d -> %d) outside 0..%d", i, src[i],
                       dst[i], L->n_blocks - 1);
    pagoda_cpu_copy_blocks(kv->data, L, src, dst, n);
    return PAGODA_OK;
}

/* Do two tensors' byte ranges in one buffer overlap? */
static bool overlaps(const pagoda_tensor *a, const pagoda_tensor *b)
{
    if (a->buf != b->buf || !a->rows || !b->rows) return false;
    size_t a1 = a->offset + (size_t)(a->rows - 1) * a->row_stride + pagoda_dtype_row_bytes(a->dtype, a->cols);
    size_t b1 = b->offset + (size_t)(b->rows - 1) * b->row_stride + pagoda_dtype_row_bytes(b->dtype, b->cols);
    return a->offset < b1 && b->offset < a1;
}

static int cpu_matmul_experts(void *ctx, const pagoda_tensor *x, const int32_t *x_rows,
                              const pagoda_tensor *w, int32_t n_experts, size_t expert_stride,
                              const int32_t *ids, const pagoda_tensor *out)
{
    cpu_ctx *c = ctx;
    TRY(check_tensor(c, "matmul_experts", "x", x, PAGODA_DTYPE_F32));
    TRY(check_tensor(c, "matmul_experts", "w", w, -1));
    TRY(check_tensor(c, "matmul_experts", "out", out, PAGODA_DTYPE_F32));
    if (!pagoda_cpu_weight_type_supported(w->dtype))
        return ERR(c, PAGODA_ERR_UNSUPPORTED, "matmul_experts: weight type %s (%d) is not supported by the cpu backend",
                   pagoda_dtype_name(w->dtype), (int)w->dtype);
    if (w->cols != x->cols || out->cols != w->rows || w->rows < 1)
        return ERR(c, PAGODA_ERR_INVALID, "matmul_experts: x %lld x %lld, w %lld x %lld, out %lld x %lld do not match",
                   (long long)x->rows, (long long)x->cols, (long long)w->rows, (long long)w->cols,
                   (long long)out->rows, (long long)out->cols);
    if (n_experts < 1) return ERR(c, PAGODA_ERR_INVALID, "matmul_experts: %d experts", n_experts);
    /* the last expert inside w's buffer */
    size_t one = (size_t)(w->rows - 1) * w->row_stride + pagoda_dtype_row_bytes(w->dtype, w->cols);
    size_t room = w->buf->size - w->offset; /* check_tensor: offset + one <= size */
    if (n_experts > 1 && (expert_stride == 0 || (size_t)(n_experts - 1) > (room - one) / expert_stride))
        return ERR(c, PAGODA_ERR_INVALID,
                   "matmul_experts: %d experts %zu bytes apart (%zu bytes each) do not fit in w's buffer of %zu bytes "
                   "from offset %zu", n_experts, expert_stride, one, w->buf->size, w->offset);
    if (overlaps(x, out)) return ERR(c, PAGODA_ERR_INVALID, "matmul_experts: out aliases x");
    if (out->rows && !ids) return ERR(c, PAGODA_ERR_INVALID, "matmul_experts: ids is NULL");
    if (!x_rows && out->rows > x->rows)
        return ERR(c, PAGODA_ERR_INVALID, "matmul_experts: %lld output rows but x has %lld (x_rows NULL)",
                   (long long)out->rows, (long long)x->rows);
    for (int64_t r = 0; r < out->rows; r++) {
        if (ids[r] < 0 || ids[r] >= n_experts)
            return ERR(c, PAGODA_ERR_INVALID, "matmul_experts: ids[%lld] = %d outside 0..%d", (long long)r, ids[r],
                       n_experts - 1);
        if (x_rows && (x_rows[r] < 0 || x_rows[r] >= x->rows))
            return ERR(c, PAGODA_ERR_INVALID, "matmul_experts: x_rows[%lld] = %d outside 0..%lld", (long long)r,
                       x_rows[r], (long long)x->rows - 1);
    }
    int st = pagoda_cpu_matmul_experts(&c->ex, tptr(x), x->row_stride, x->rows, x_rows, tptr(w), w->dtype,
                                       w->row_stride, w->rows, w->cols, expert_stride, ids, out->rows, tptr(out),
                                       out->row_stride);
    if (st == PAGODA_ERR_NOMEM) return ERR(c, st, "matmul_experts: cannot allocate activation scratch");
    if (st) return ERR(c, st, "matmul_experts: %s", pagoda_status_str(st));
    return PAGODA_OK;
}

static int cpu_moe_combine(void *ctx, const pagoda_tensor *y, const int32_t *dst_rows, const float *weights,
                           bool accumulate, const pagoda_tensor *out)
{
    cpu_ctx *c = ctx;
    TRY(check_tensor(c, "moe_combine", "y", y, PAGODA_DTYPE_F32));
    TRY(check_tensor(c, "moe_combine", "out", out, PAGODA_DTYPE_F32));
    if (y->cols != out->cols)
        return ERR(c, PAGODA_ERR_INVALID, "moe_combine: y has %lld columns, out %lld", (long long)y->cols,
                   (long long)out->cols);
    if (overlaps(y, out)) return ERR(c, PAGODA_ERR_INVALID, "moe_combine: out aliases y");
    if (y->rows && (!dst_rows || !weights))
        return ERR(c, PAGODA_ERR_INVALID, "moe_combine: dst_rows or weights is NULL");
    for (int64_t r = 0; r < y->rows; r++)
        if (dst_rows[r] < 0 || dst_rows[r] >= out->rows)
            return ERR(c, PAGODA_ERR_INVALID, "moe_combine: dst_rows[%lld] = %d outside 0..%lld", (long long)r,
                       dst_rows[r], (long long)out->rows - 1);
    pagoda_cpu_moe_combine(&c->ex, tptr(y), y->row_stride, y->rows, y->cols, dst_rows, weights, accumulate,
                           tptr(out), out->row_stride, out->rows);
    return PAGODA_OK;
}

static int cpu_synchronize(void *ctx)
{
    return PAGODA_OK;  /* every op finishes before it returns */
}

/* ------------------------------------------------------------ the plugin */

/* The reason says which kernels run (`pagoda plugins` prints it), in the
 * words of the start-up line. */
static int cpu_probe(char *why, size_t why_len)
{
    char path[128];
    pagoda_cpu_kernel_path(path, sizeof path);
    int slow = pagoda_cpu_detect_isa() < PAGODA_CPU_ISA_AVX2;
    if (why && why_len) snprintf(why, why_len, "%s%s", path, slow ? ", slow" : "");
    return slow ? 40 : 100;
}

static int cpu_create(const pagoda_host *host, void **ctxp, char *err, size_t err_len)
{
    *ctxp = NULL;
    /* f16_gemm: which GEMM F16 / BF16 prefill takes (kernels/avx512/
     * gemm_fma.h); checked before anything is made */
    const char *fg = host && host->config_str ? host->config_str(host, "f16_gemm", "auto") : "auto";
    int fgm = pagoda_cpu_f16_gemm_parse(fg ? fg : "auto");
    if (fgm < 0) {
        snprintf(err, err_len, "cpu backend: f16_gemm = \"%s\": expected auto, fma, dpbf16 or off", fg);
        return PAGODA_ERR_INVALID;
    }
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_len, "cpu backend: out of memory");
        return PAGODA_ERR_NOMEM;
    }
    c->host = host;
    int64_t n = host && host->config_int ? host->config_int(host, "threads", 0) : 0;
    if (n <= 0) n = pagoda_cpu_count();
    if (n > 256) n = 256;
    c->n_threads = (int)n;
    int st = pagoda_threadpool_create(c->n_threads, &c->ex.pool);
    if (st) {
        snprintf(err, err_len, "cpu backend: cannot start %d threads: %s", c->n_threads,
                 pagoda_status_str(st));
        free(c);
        return st;
    }
    c->ex.repack = pagoda_rp_cache_create();
    if (!c->ex.repack) {
        snprintf(err, err_len, "cpu backend: out of memory");
        pagoda_threadpool_destroy(c->ex.pool);
        free(c);
        return PAGODA_ERR_NOMEM;
    }
    /* this backend's settings, on its own exec (kernels.h): the kernels
     * read them at each call, so other CPU backends of the process keep
     * theirs */
    c->ex.batch_invariant =
        host && host->config_bool ? host->config_bool(host, "batch_invariant", false) : false;
    c->ex.f16_gemm = fgm;
    /* sgemm runs on the engine thread while our workers wait: give
     * OpenBLAS the same number of threads. */
    openblas_set_num_threads(c->n_threads);
    const char *core = openblas_get_corename();
    snprintf(c->blas_core, sizeof c->blas_core, "%s", core ? core : "unknown");
    if (host && host->log) {
        if (pagoda_blas_core_is_slow(core))
            host->log(host, PAGODA_LOG_WARN,
                      "OpenBLAS chose core type '%s' on a CPU with AVX2: F32 matmuls will run several "
                      "times slower; start with OPENBLAS_CORETYPE=%s (pagoda's main sets it unless "
                      "already set)",
                      c->blas_core, pagoda_blas_coretype_for_cpu());
        /* what detection and PAGODA_CPU_ISA decided (a level the OS
         * does not enable, a forced level clamped), a line each */
        const char *notes = pagoda_cpu_detect_notes();
        while (*notes) {
            const char *eol = strchr(notes, '\n');
            int len = eol ? (int)(eol - notes) : (int)strlen(notes);
            host->log(host, PAGODA_LOG_WARN, "%.*s", len, notes);
            notes += len + (eol ? 1 : 0);
        }
        log_repack(host, &c->ex);
        /* which BF16 GEMM F16 / BF16 weights of many tokens take (kernels/
         * amx/gemm_bf16_amx.h, kernels/avx512/gemm_bf16.h), and why not the
         * tiles on an AMX level without AMX-BF16 */
        int bp = pagoda_cpu_bf16_path();
        char desc[2][160];
        for (int d = 0; d < 2; d++) {
            int dt = d ? PAGODA_DTYPE_BF16 : PAGODA_DTYPE_F16;
            if (pagoda_cpu_fma_applies(&c->ex, dt, INT64_MAX / 2))
                snprintf(desc[d], sizeof desc[d], "F32-FMA GEMM from %lld tokens", (long long)pagoda_cpu_fma_min_t(dt));
            else if (pagoda_cpu_bf16_applies(&c->ex, dt, INT64_MAX / 2, 2))
                snprintf(desc[d], sizeof desc[d], "BF16 GEMM on %s from %lld tokens%s%s", pagoda_cpu_bf16_path_name(bp),
                         (long long)pagoda_cpu_bf16_min_t(dt),
                         dt == PAGODA_DTYPE_F16 ? " (weights rounded to BF16)" : "",
                         bp == PAGODA_BF16_PATH_AVX512 && pagoda_cpu_active_isa() >= PAGODA_CPU_ISA_AMX
                             ? " (AMX granted, but CPUID has no AMX-BF16)"
                             : "");
            else
                snprintf(desc[d], sizeof desc[d], "exact F32 kernels%s",
                         dt == PAGODA_DTYPE_F16 && c->ex.batch_invariant ? " (batch_invariant)" : "");
        }
        host->log(host, PAGODA_LOG_INFO, "cpu backend: F16/BF16 matmuls (f16_gemm = %s%s): F16 %s; BF16 %s",
                  pagoda_cpu_f16_gemm_name(c->ex.f16_gemm),
                  c->ex.f16_gemm == PAGODA_F16GEMM_AUTO && getenv("PAGODA_CPU_BF16")
                      ? ", PAGODA_CPU_BF16 set: dpbf16"
                      : "",
                  desc[0], desc[1]);
        if (c->ex.batch_invariant)
            host->log(host, PAGODA_LOG_INFO,
                      "cpu backend: batch_invariant = on: integer and F16 weights run the tokens-in-lanes "
                      "kernels from one row on, the VNNI repacked GEMM and unsplit attention, so a row's "
                      "logits do not depend on its batch (F32 weights: their own dot at every size; "
                      "BF16 weights, the expert matmul and MLA attention are not covered)%s",
                      pagoda_cpu_kernel_isa() < PAGODA_CPU_ISA_AVX2 ? "; the scalar level has no lanes "
                                                                      "kernels: not batch-invariant here"
                                                                    : "");
        char path[128];
        host->log(host, PAGODA_LOG_INFO, "cpu backend: %s, %d threads, OpenBLAS %s",
                  pagoda_cpu_kernel_path(path, sizeof path), c->n_threads, c->blas_core);
    }
    *ctxp = c;
    return PAGODA_OK;
}

static void cpu_destroy(void *ctx)
{
    cpu_ctx *c = ctx;
    if (!c) return;
    pagoda_threadpool_destroy(c->ex.pool);
    pagoda_cpu_exec_release(&c->ex);
    free(c);
}

static const pagoda_backend_ops cpu_ops = {
    .struct_size = sizeof(pagoda_backend_ops),
    .info = cpu_info,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_free = cpu_buffer_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .weights_from_host = cpu_weights_from_host,
    .get_rows = cpu_get_rows,
    .rms_norm = cpu_rms_norm,
    .matmul = cpu_matmul,
    .rope = cpu_rope,
    .kv_write = cpu_kv_write,
    .attention = cpu_attention,
    .swiglu = cpu_swiglu,
    .add = cpu_add,
    .copy_blocks = cpu_copy_blocks,
    .synchronize = cpu_synchronize,
    .geglu = cpu_geglu,
    .scale = cpu_scale,
    .attention_ext = cpu_attention_ext,
    .swiglu_oai = cpu_swiglu_oai,
    .matmul_multi = cpu_matmul_multi,
    .matmul_experts = cpu_matmul_experts,
    .moe_combine = cpu_moe_combine,
    .buffer_address = cpu_buffer_address,
    .weight_extra_bytes = cpu_weight_extra_bytes,
    .weight_extra_held = cpu_weight_extra_held,
};

static const pagoda_config_key cpu_keys[] = {
    {.name = "threads", .type = PAGODA_KEY_INT, .default_str = "0", .min = 0, .max = 256,
     .help = "kernel threads (and OpenBLAS threads); 0 = number of online CPUs"},
    {.name = "batch_invariant", .type = PAGODA_KEY_BOOL, .default_str = "false",
     .help = "a row's result independent of its batch's size (integer and F16 weights: the lanes "
             "kernels from one row on, no AMX tiles, unsplit attention), so speculation gives plain "
             "decoding's greedy bytes; F32 on its own dot; not BF16 weights, experts, MLA, the scalar "
             "level; costs decode speed"},
    {.name = "f16_gemm", .type = PAGODA_KEY_STRING, .default_str = "auto",
     .help = "GEMM of F16/BF16 prefill: auto (F16 -> fma; BF16 -> fma on Intel without AMX-BF16, dpbf16 "
             "on AMD or AMX), fma (exact F32 FMAs, weights converted while packed), dpbf16 (the BF16 GEMMs for "
             "both, F16 weights rounded to BF16), off (the exact lanes/dot kernels)"},
    {.name = NULL},
};

static const pagoda_plugin_desc cpu_desc = {
    PAGODA_DESC_HEADER(PAGODA_KIND_BACKEND),
    .name = "cpu",
    .version = "0.1.0",
    .description = "CPU kernels: OpenBLAS sgemm, int8/F16 matmul and paged attention (SIMD level chosen at run time)",
    .config_keys = cpu_keys,
    .probe = cpu_probe,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .ops = &cpu_ops,
};

PAGODA_PLUGIN(cpu_desc)
