/*
 * repack_matmul.c: the repacked GEMMs' share of a CPU matmul. For T >=
 * pagoda_rp_min_t() tokens, a Q8_0 / Q4_0 / Q4_1 / Q4_K / Q5_K / Q6_K weight inside a registered
 * weights region, and a level with a GEMM on the layout (AMX tiles, else
 * AVX-512 VNNI), matmul.c hands the matrix here: its repacked copy comes
 * from the exec's cache (made on first use), the activations are
 * quantized once for all such matrices of the call, and the row groups
 * are spread over the pool. Everything else stays on matmul.c's kernels.
 * Not for: the layouts (repack.c), the kernels (gemm_vnni_avx512.c,
 * ../amx/).
 */
#include "repack_matmul.h"

#include <stdlib.h>
#include <string.h>

#include "amx/amx.h"
#include "cpu_features.h"
#include "matmul_task.h"
#include "pagoda/types.h"
#include "repack.h"
#include "threadpool.h"

static bool force_emu;

void pagoda_rp_force_amx_emulation(bool on)
{
    force_emu = on;
}

static bool cpu_has_vnni512(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
    return false;
#endif
}

int pagoda_rp_path(void)
{
    if (force_emu) return PAGODA_RP_PATH_AMX_EMU;
    int isa = pagoda_cpu_active_isa();
    if (isa >= PAGODA_CPU_ISA_AMX && pagoda_amx_usable(NULL, 0)) return PAGODA_RP_PATH_AMX;
    if (isa >= PAGODA_CPU_ISA_AVX512 && cpu_has_vnni512()) return PAGODA_RP_PATH_VNNI;
    return PAGODA_RP_PATH_NONE;
}

int pagoda_rp_path_for(const pagoda_cpu_exec *ex, int path, int dtype, int64_t T)
{
    if (path != PAGODA_RP_PATH_AMX) return path;
    /* batch-invariant: the VNNI GEMM, whose float steps are the lanes
     * kernels' (the tiles store and scale C per block: another order) */
    if (ex->batch_invariant) return PAGODA_RP_PATH_VNNI;
    const char *e = getenv("PAGODA_CPU_AMX_ALL");   /* once a call: calls are large */
    bool all = e && !strcmp(e, "1");
    if (all || (dtype == PAGODA_DTYPE_Q8_0 && T >= PAGODA_RP_AMX_MIN_T)) return path;
    return cpu_has_vnni512() ? PAGODA_RP_PATH_VNNI : PAGODA_RP_PATH_NONE;
}

const char *pagoda_rp_path_name(int path)
{
    switch (path) {
    case PAGODA_RP_PATH_VNNI: return "AVX-512 VNNI";
    case PAGODA_RP_PATH_AMX: return "AMX-INT8 tiles";
    case PAGODA_RP_PATH_AMX_EMU: return "emulated AMX tiles (tests)";
    default: return "none";
    }
}

int64_t pagoda_rp_min_t(void)
{
    static int64_t v = -1;
    if (v < 0) {
        const char *e = getenv("PAGODA_CPU_REPACK_MIN_T");
        v = e && *e ? atoll(e) : PAGODA_RP_MIN_T;
        if (v < 0) v = 0;
    }
    return v;
}

uint64_t pagoda_rp_planned_bytes(int dtype, int64_t N, int64_t K)
{
    if (pagoda_rp_min_t() == 0 || pagoda_rp_path() == PAGODA_RP_PATH_NONE) return 0;
    if (!pagoda_rp_type_supported(dtype) || N <= 0 || K <= 0) return 0;
    if (K % (pagoda_rp_type_kquant(dtype) ? 256 : PAGODA_RP_QK)) return 0;
    return (uint64_t)pagoda_rp_bytes(dtype, N, K);
}

/* One call's repacked matrices and the row groups of each part. */
typedef struct rp_job {
    int path;
    pagoda_rp_acts acts;
    const pagoda_rp_matrix *m[PAGODA_CPU_MATMUL_MAX];
    const pagoda_cpu_mat *w[PAGODA_CPU_MATMUL_MAX];
    int n;
    int part_start[PAGODA_CPU_MATMUL_MAX + 1];
    int64_t groups_per_part;
    const float *x;
    size_t x_stride;
    int64_t tokens_per_part;
} rp_job;

static void prep_task(void *arg, int part, int n_parts)
{
    rp_job *j = arg;
    (void)n_parts;
    int64_t t0 = j->tokens_per_part * part, t1 = t0 + j->tokens_per_part;
    if (t1 > j->acts.Tpad) t1 = j->acts.Tpad;
    pagoda_rp_prep_acts(&j->acts, j->x, j->x_stride, t0, t1);
}

static void gemm_task(void *arg, int part, int n_parts)
{
    rp_job *j = arg;
    (void)n_parts;
    int i = 0;
    while (part >= j->part_start[i + 1]) i++;
    const pagoda_rp_matrix *m = j->m[i];
    const pagoda_cpu_mat *w = j->w[i];
    int64_t g0 = (int64_t)(part - j->part_start[i]) * j->groups_per_part;
    int64_t n0 = g0 * PAGODA_RP_ROWS, n1 = (g0 + j->groups_per_part) * PAGODA_RP_ROWS;
    if (n1 > m->N) n1 = m->N;
    const pagoda_rp_acts *a = &j->acts;
    if (m->dtype == PAGODA_DTYPE_Q6_K) {
        if (j->path == PAGODA_RP_PATH_AMX)
            pagoda_rp_gemm_q6_amx(m, n0, n1, (const int8_t *)a->xq, a->xd, a->xs16, a->T, w->out, w->out_stride);
        else if (j->path == PAGODA_RP_PATH_AMX_EMU)
            pagoda_rp_gemm_q6_amx_emu(m, n0, n1, (const int8_t *)a->xq, a->xd, a->xs16, a->T, w->out,
                                      w->out_stride);
        else
            pagoda_rp_gemm_q6_vnni(m, n0, n1, a, w->out, w->out_stride);
    } else if (a->kq) {
        if (j->path == PAGODA_RP_PATH_AMX)
            pagoda_rp_gemm_k_amx(m, n0, n1, (const int8_t *)a->xq, a->xd, a->xs, a->T, w->out, w->out_stride);
        else if (j->path == PAGODA_RP_PATH_AMX_EMU)
            pagoda_rp_gemm_k_amx_emu(m, n0, n1, (const int8_t *)a->xq, a->xd, a->xs, a->T, w->out,
                                     w->out_stride);
        else
            pagoda_rp_gemm_k_vnni(m, n0, n1, a, w->out, w->out_stride);
    } else if (m->dtype == PAGODA_DTYPE_Q4_1) {
        if (j->path == PAGODA_RP_PATH_AMX)
            pagoda_rp_gemm_q41_amx(m, n0, n1, (const int8_t *)a->xq, a->xd, a->xm, a->T, w->out, w->out_stride);
        else if (j->path == PAGODA_RP_PATH_AMX_EMU)
            pagoda_rp_gemm_q41_amx_emu(m, n0, n1, (const int8_t *)a->xq, a->xd, a->xm, a->T, w->out,
                                       w->out_stride);
        else
            pagoda_rp_gemm_q41_vnni(m, n0, n1, a, w->out, w->out_stride);
    } else switch (j->path) {
    case PAGODA_RP_PATH_AMX:
        pagoda_rp_gemm_amx(m, n0, n1, (const int8_t *)a->xq, a->xd, a->T, w->out, w->out_stride);
        break;
    case PAGODA_RP_PATH_AMX_EMU:
        pagoda_rp_gemm_amx_emu(m, n0, n1, (const int8_t *)a->xq, a->xd, a->T, w->out, w->out_stride);
        break;
    default:
        pagoda_rp_gemm_vnni(m, n0, n1, a, w->out, w->out_stride);
        break;
    }
    if (w->bias)
        for (int64_t t = 0; t < a->T; t++) {
            float *o = (float *)((uint8_t *)w->out + t * w->out_stride);
            for (int64_t r = n0; r < n1; r++) o[r] += w->bias[r];
        }
}

int pagoda_cpu_rp_matmul(pagoda_cpu_exec *ex, const float *x, size_t x_stride, int64_t T, int64_t K,
                         const pagoda_cpu_mat *w, int n, bool *done)
{
    int64_t min_t = pagoda_rp_min_t();
    if (!ex->repack || min_t == 0 || T < min_t || K % PAGODA_RP_QK) return PAGODA_OK;
    /* one activation layout per call: the kind (per 32 / per 256) of the
     * first matrix taken; matrices of the other kind stay with matmul.c */
    int kind = -1;
    int path = pagoda_rp_path();
    if (path == PAGODA_RP_PATH_NONE) return PAGODA_OK;
    rp_job j = {.path = path, .x = x, .x_stride = x_stride};
    int64_t groups = 0;
    for (int i = 0; i < n; i++) {
        if (done[i] || w[i].N <= 0 || !pagoda_rp_type_supported(w[i].dtype)) continue;
        /* PAGODA_CPU_GEMM_MIN_T's dequantize + sgemm (exact F32 products) comes first */
        if (pagoda_cpu_mm_sgemm_path(ex, w[i].dtype, T)) continue;
        int k = pagoda_rp_type_kquant(w[i].dtype);
        if (kind >= 0 && k != kind) continue;
        const pagoda_rp_matrix *m =
            pagoda_rp_cache_get(ex->repack, ex->pool, w[i].w, w[i].dtype, w[i].w_stride, w[i].N, K);
        if (!m) continue;  /* not a registered weight, or no memory: matmul.c's kernels */
        if (!j.n) j.path = path = pagoda_rp_path_for(ex, path, w[i].dtype, T);
        kind = k;
        j.m[j.n] = m;
        j.w[j.n] = &w[i];
        j.n++;
        groups += m->ng;
        done[i] = true;
    }
    if (!j.n) return PAGODA_OK;
    void *scratch = pagoda_cpu_scratch(ex, pagoda_rp_acts_bytes(T, K));
    if (!scratch) {
        for (int i = 0; i < n; i++) done[i] = false;  /* let matmul.c try; it will report */
        return PAGODA_ERR_NOMEM;
    }
    bool is_unsigned = path == PAGODA_RP_PATH_VNNI && !kind;
    pagoda_rp_acts_init(&j.acts, scratch, T, K, is_unsigned, kind == 1);
    int nth = pagoda_threadpool_size(ex->pool);
    int64_t tiles = j.acts.Tpad / PAGODA_RP_ROWS;
    int64_t tpp_tiles = (tiles + nth - 1) / nth;
    j.tokens_per_part = tpp_tiles * PAGODA_RP_ROWS;
    pagoda_threadpool_run_parts(ex->pool, prep_task, &j, (int)((tiles + tpp_tiles - 1) / tpp_tiles));
    /* a few parts per thread, each an even number of groups (the kernels
     * take two at a time) */
    int64_t want = (int64_t)nth * 4;
    int64_t gpp = (groups + want - 1) / want;
    gpp = (gpp + 1) / 2 * 2;
    if (gpp < 2) gpp = 2;
    j.groups_per_part = gpp;
    for (int i = 0; i < j.n; i++) j.part_start[i + 1] = j.part_start[i] + (int)((j.m[i]->ng + gpp - 1) / gpp);
    pagoda_threadpool_run_parts(ex->pool, gemm_task, &j, j.part_start[j.n]);
    return PAGODA_OK;
}
