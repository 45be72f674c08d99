/*
 * backend.c: the CUDA backend plugin (backend-cuda.so). Implements
 * pagoda_backend_ops on one CUDA device and one stream: device memory
 * through cudaMalloc only, GEMMs through cuBLAS, everything else through
 * the kernels of kernels.cu. Every op validates its tensors against their
 * buffers on the host, then enqueues asynchronously; `synchronize` and
 * `download` wait. Every CUDA and cuBLAS status is checked and reported
 * through host->error naming the call.
 *
 * This file is the plugin glue: probe, create/destroy, info and the ops
 * table. The rest lives in validate.c (checks, error reports), memory.c
 * (buffers, staging ring, metadata caches, workspace), matmul.c (cuBLAS /
 * GEMV dispatch) and ops.c (the other ops); cuda_internal.h ties them.
 *
 * Not for: the kernels themselves (kernels.cu), tensor parallelism.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "decode.h"
#include "pagoda/plugin.h"
#include "verified.h"

#ifndef PAGODA_CUDA_VERIFIED_LIST
#define PAGODA_CUDA_VERIFIED_LIST "backends/cuda/verified.txt" /* set by CMakeLists.txt */
#endif

/* The KV types the kernels keep (kv_write, attention). */
#define PCU_KV_TYPES \
    ((1ull << PAGODA_DTYPE_F32) | (1ull << PAGODA_DTYPE_F16) | (1ull << PAGODA_DTYPE_Q8_0))
/* The optional ops with kernels of their own (matmul_multi is n matmuls). */
#define PCU_OPS                                                                          \
    ((1u << PCU_OP_GEGLU) | (1u << PCU_OP_SCALE) | (1u << PCU_OP_ATTENTION_EXT) |          \
     (1u << PCU_OP_MATMUL_EXPERTS) | (1u << PCU_OP_MOE_COMBINE) | (1u << PCU_OP_SWIGLU_OAI) | \
     (1u << PCU_OP_ATTENTION_SINKS) | (1u << PCU_OP_KV_LATENT))

#ifndef PAGODA_CUDA_MIN_SM
#define PAGODA_CUDA_MIN_SM 80 /* set by CMakeLists.txt from CMAKE_CUDA_ARCHITECTURES */
#endif

/* ------------------------------------------------- the verified list */

/* Reads verified.txt ([backend.cuda] verified_list overrides the path) and
 * cuts what info advertises to what is on it, unless allow_unverified (or
 * PAGODA_CUDA_ALLOW_UNVERIFIED=1), which is warned about at every start.
 * The core then refuses at start a model or kv_dtype whose type is cut,
 * naming the tensor and type; the log line before says why. A list that
 * does not parse fails create, naming the file and line. */
static int apply_verified(cuda_ctx *c, const pagoda_host *host, char *err, size_t err_len)
{
    const char *path = PAGODA_CUDA_VERIFIED_LIST;
    bool allow = false;
    if (host && host->config_str) path = host->config_str(host, "verified_list", path);
    if (host && host->config_bool) allow = host->config_bool(host, "allow_unverified", false);
    const char *env = getenv("PAGODA_CUDA_ALLOW_UNVERIFIED");
    if (env && env[0] && strcmp(env, "0") != 0) allow = true;
    pcu_verified v;
    bool missing = false;
    char why[512] = "";
    int st = pcu_verified_load(path, &v, &missing, why, sizeof why);
    if (st) {
        snprintf(err, err_len, "cuda: the verified-kernel list: %s (backends/cuda/gpu-check.sh "
                 "writes it; [backend.cuda] verified_list names another)", why);
        return st;
    }
    char refused[512];
    pcu_verified_apply(&v, allow, PCU_WEIGHT_TYPES, PCU_KV_TYPES, &c->weight_types, &c->kv_types,
                       refused, sizeof refused);
    c->ops_ok = allow ? PCU_OPS : PCU_OPS & v.ops;
    size_t at = strlen(refused);
    bool first = true;
    for (int op = 0; op < PCU_OP_COUNT_; op++) {
        if (!(((PCU_OPS & ~c->ops_ok) >> op) & 1) || at >= sizeof refused) continue;
        at += (size_t)snprintf(refused + at, sizeof refused - at, "%s%s",
                               first ? (at ? "; ops " : "ops ") : " ", pcu_op_name(op));
        first = false;
    }
    if (!host || !host->log) return PAGODA_OK;
    if (allow)
        host->log(host, PAGODA_LOG_WARN, "cuda: allow_unverified is on: every kernel of this "
                  "backend is offered, including those never checked on a GPU (not in %s%s); "
                  "outputs may be wrong: run backends/cuda/gpu-check.sh on this GPU first",
                  path, missing ? ", which does not exist" : "");
    else if (refused[0])
        host->log(host, PAGODA_LOG_WARN, "cuda: refused, not verified on a GPU (not in %s%s): "
                  "%s; backends/cuda/gpu-check.sh verifies them on this machine, or set "
                  "[backend.cuda] allow_unverified = true to try them anyway", path,
                  missing ? ", which does not exist" : "", refused);
    if (!allow && v.n_entries && strcmp(v.gpu, "") != 0) {
        char mine[sizeof c->dev_name];
        memcpy(mine, c->dev_name, sizeof mine);
        for (char *q = mine; *q; q++)
            if (*q == ' ') *q = '_';
        if (strcmp(mine, v.gpu) != 0)
            host->log(host, PAGODA_LOG_WARN, "cuda: %s was verified on %s, this is %s: run "
                      "backends/cuda/gpu-check.sh here to check this GPU", path, v.gpu, mine);
    }
    return PAGODA_OK;
}

/* ---------------------------------------------------------- probe */

static int cuda_probe(char *why, size_t why_len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(why, why_len, "no usable CUDA driver or GPU: %s (%s)", cudaGetErrorString(e),
                 cudaGetErrorName(e));
        return 0;
    }
    if (n == 0) {
        snprintf(why, why_len, "the CUDA driver reports no device");
        return 0;
    }
    int best = 0;
    for (int i = 0; i < n; i++) {
        int ma = 0, mi = 0;
        if (cudaDeviceGetAttribute(&ma, cudaDevAttrComputeCapabilityMajor, i) == cudaSuccess &&
            cudaDeviceGetAttribute(&mi, cudaDevAttrComputeCapabilityMinor, i) == cudaSuccess &&
            ma * 10 + mi > best)
            best = ma * 10 + mi;
    }
    if (best < PAGODA_CUDA_MIN_SM) {
        snprintf(why, why_len, "%d CUDA device(s), the newest is sm_%d; this build has kernels "
                 "for sm_%d and newer (rebuild with CMAKE_CUDA_ARCHITECTURES)", n, best,
                 PAGODA_CUDA_MIN_SM);
        return 0;
    }
    snprintf(why, why_len, "%d CUDA device(s), up to sm_%d", n, best);
    return 90;
}

/* ---------------------------------------------------- create/destroy */

static void cuda_destroy(void *ctx)
{
    cuda_ctx *c = ctx;
    if (!c) return;
    cudaSetDevice(c->device);
    if (c->stream) cudaStreamSynchronize(c->stream);
    meta_cache *ms[] = {&c->m_ids,   &c->m_pos,  &c->m_freq, &c->m_slots,
                        &c->m_attn,  &c->m_copy, &c->m_moe,  &c->m_experts};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) meta_free(ms[i]);
    cudaFree(c->ws);
    cudaFree(c->scr);
    cudaFree(c->ring_dev);
    cudaFreeHost(c->ring);
    free(c->hmeta);
    if (c->blas) cublasDestroy(c->blas);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
}

static int cuda_create(const pagoda_host *host, void **out, char *err, size_t err_len)
{
    char why[256];
    int st = PAGODA_ERR_DEVICE;
    cudaError_t e = cudaSuccess;
    const char *call = NULL;
    cuda_ctx *c = NULL;
    *out = NULL;
    if (cuda_probe(why, sizeof why) == 0) {
        snprintf(err, err_len, "cuda: cannot run here: %s", why);
        return PAGODA_ERR_DEVICE;
    }
    int n = 0;
    cudaGetDeviceCount(&n);
    int64_t dev = host && host->config_int ? host->config_int(host, "device", -1) : -1;
    if (dev == -1) {
        /* auto: under mpirun the rank's local rank mod the devices, as
         * comm-nccl picks its GPU (so buffer_address hands NCCL pointers on
         * its own device); else device 0 */
        const char *names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                               "PMI_LOCAL_RANK"};
        dev = 0;
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            const char *v = getenv(names[i]);
            if (v && *v && n > 0) {
                dev = strtol(v, NULL, 10) % n;
                break;
            }
        }
    }
    if (dev < 0 || dev >= n) {
        snprintf(err, err_len, "cuda: [backend.cuda] device = %lld, but there are %d device(s) "
                 "(0..%d); set CUDA_VISIBLE_DEVICES or device", (long long)dev, n, n - 1);
        return PAGODA_ERR_INVALID;
    }
    c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_len, "cuda: out of memory for the context");
        return PAGODA_ERR_NOMEM;
    }
    c->host = host;
    c->device = (int)dev;

#define STEP(x)                           \
    do {                                  \
        e = (x);                          \
        if (e != cudaSuccess) {           \
            call = #x;                    \
            goto fail;                    \
        }                                 \
    } while (0)
    struct cudaDeviceProp prop;
    STEP(cudaSetDevice(c->device));
    STEP(cudaGetDeviceProperties(&prop, c->device));
    snprintf(c->dev_name, sizeof c->dev_name, "%s", prop.name);
    c->cc = prop.major * 10 + prop.minor;
    STEP(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    /* Are our kernels runnable on this device (an image for its sm)? */
    STEP(pcu_check_image());
    STEP(cudaMallocHost((void **)&c->ring, RING_BYTES));
    STEP(cudaMalloc((void **)&c->ring_dev, RING_BYTES));
    c->ring_cap = RING_BYTES;
#undef STEP
    st = apply_verified(c, host, err, err_len);
    if (st) goto out_fail;
    st = PAGODA_ERR_DEVICE;
    cublasStatus_t bs = cublasCreate(&c->blas);
    if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetStream(c->blas, c->stream);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, err_len, "cuda: cublasCreate/cublasSetStream failed: %s",
                 cublasGetStatusString(bs));
        goto out_fail;
    }
    if (host && host->log)
        host->log(host, PAGODA_LOG_INFO, "cuda: device %d: %s, sm_%d, %.1f GiB", c->device,
                  c->dev_name, c->cc, (double)prop.totalGlobalMem / (1024.0 * 1024 * 1024));
    *out = c;
    return PAGODA_OK;

fail:
    snprintf(err, err_len, "cuda: %s failed on device %d: %s (%s)", call, c->device,
             cudaGetErrorString(e), cudaGetErrorName(e));
    if (e == cudaErrorMemoryAllocation) st = PAGODA_ERR_NOMEM;
out_fail:
    cuda_destroy(c);
    return st;
}

/* ------------------------------------------------------------- info */

static int cuda_info(void *ctx, pagoda_backend_info *info)
{
    cuda_ctx *c = ctx;
    pagoda_backend_info full;
    memset(&full, 0, sizeof full);
    CU(cudaSetDevice(c->device));
    size_t fr = 0, tot = 0;
    CU(cudaMemGetInfo(&fr, &tot));
    snprintf(full.name, sizeof full.name, "cuda %d: %.40s (sm_%d)", c->device % 100, c->dev_name,
             c->cc % 1000);
    full.mem_total = tot;
    full.mem_free = fr;
    full.alignment = 256;
    /* the kernels' types cut to verified.txt (apply_verified): the core
     * refuses at start a model or kv_dtype of a type left out */
    full.weight_types = c->weight_types;
    full.kv_types = c->kv_types;
    /* sinks (ABI 1.8) only once verified: the core refuses gpt-oss at start */
    full.attn_sinks = (c->ops_ok >> PCU_OP_ATTENTION_SINKS) & 1;
    /* the latent layout (ABI 1.7) likewise: without the bit the core gives
     * an MLA model an ordinary layout */
    full.kv_kinds = (c->ops_ok >> PCU_OP_KV_LATENT) & 1 ? 1u << PAGODA_KV_LATENT : 0;
    full.host_memory = false;
    /* An older core's struct is shorter: fill only what it has. */
    size_t n = info->struct_size && info->struct_size < sizeof full ? info->struct_size : sizeof full;
    size_t keep = info->struct_size;
    memcpy(info, &full, n);
    info->struct_size = keep;
    return PAGODA_OK;
}

/* ------------------------------------------------------------- plugin */

static const pagoda_backend_ops cuda_ops = {
    .struct_size = sizeof(pagoda_backend_ops),
    .info = cuda_info,
    .buffer_alloc = cuda_buffer_alloc,
    .buffer_free = cuda_buffer_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .weights_from_host = cuda_weights_from_host,
    .get_rows = cuda_get_rows,
    .rms_norm = cuda_rms_norm,
    .matmul = cuda_matmul,
    .rope = cuda_rope,
    .kv_write = cuda_kv_write,
    .attention = cuda_attention,
    .swiglu = cuda_swiglu,
    .add = cuda_add,
    .copy_blocks = cuda_copy_blocks,
    .synchronize = cuda_synchronize,
    /* ABI 1.1 / 1.3: refused at the call unless verified (ops.c op_gate);
     * attention_ext with window 0 and no sinks is `attention` */
    .geglu = cuda_geglu,
    .scale = cuda_scale,
    .attention_ext = cuda_attention_ext,
    .matmul_multi = cuda_matmul_multi,
    /* ABI 1.5 / 1.8, refused at the call unless verified, too */
    .matmul_experts = cuda_matmul_experts,
    .moe_combine = cuda_moe_combine,
    .swiglu_oai = cuda_swiglu_oai,
    /* ABI 1.12: tensor parallelism over NCCL on device pointers */
    .buffer_address = cuda_buffer_address,
};

static const pagoda_config_key cuda_keys[] = {
    {"device", PAGODA_KEY_INT, "-1", -1, 1024,
     "CUDA device index as the CUDA runtime numbers them (after CUDA_VISIBLE_DEVICES); -1: the "
     "MPI local rank mod the device count under mpirun (as comm-nccl picks), else 0"},
    {"allow_unverified", PAGODA_KEY_BOOL, "false", 0, 0,
     "offer kernels not yet verified on a GPU (not in verified.txt); warned at every start"},
    {"verified_list", PAGODA_KEY_STRING, PAGODA_CUDA_VERIFIED_LIST, 0, 0,
     "the list of kernels backends/cuda/gpu-check.sh verified on a GPU"},
    {NULL, 0, NULL, 0, 0, NULL},
};

static const pagoda_plugin_desc cuda_desc = {
    PAGODA_DESC_HEADER(PAGODA_KIND_BACKEND),
    .name = "cuda",
    .version = "0.1.0",
    .description = "NVIDIA GPUs: cuBLAS GEMMs, CUDA kernels, paged attention",
    .config_keys = cuda_keys,
    .probe = cuda_probe,
    .create = cuda_create,
    .destroy = cuda_destroy,
    .ops = &cuda_ops,
};

PAGODA_PLUGIN(cuda_desc)
