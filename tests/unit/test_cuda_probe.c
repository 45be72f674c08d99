/* test_cuda_probe.c: the CUDA backend plugin as the loader sees it: it
 * dlopens on any machine (libcudart loads without the NVIDIA driver), its
 * descriptor is a backend named "cuda" of this ABI, and probe() scores 0
 * with a reason where there is no GPU (create() then fails with that
 * reason, no crash). On a machine with a GPU, probe scores > 0 and a small
 * smoke test compares a few ops with plain C references (the conformance
 * runner compares everything against the CPU backend).
 * Skips, passing, when backend-cuda.so was not built (no nvcc).
 *
 * On every machine, GPU or not, it also checks the formulas the kernels run:
 * backends/cuda/decode.h compiled here by the C compiler, every weight
 * type's decode against the CPU's scalar dequant bit for bit, and the
 * warp mat-vec's lane sums and butterfly against a double dot; and the
 * verified list's parser and the cut it makes (backends/cuda/verified.c). */
#include <math.h>
#include <unistd.h>

#include "decode.h"
#include "verified.h"
#include "forward.h"
#include "plugin_testhost.h"
#include "quant.h"
#include "testutil.h"
#include "vecdot.h"

static void *g_dl;
static const pagoda_plugin_desc *g_desc;

/* Loads the plugin once; false when it was not built. */
static bool load_plugin(void)
{
    if (g_desc) return true;
    const char *path = tu_build("plugins/backend-cuda.so");
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "test_cuda_probe: %s not built, skipping\n", path);
        return false;
    }
    g_dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(g_dl != NULL, "dlopen %s: %s", path, dlerror());
    pagoda_plugin_entry_fn entry = (pagoda_plugin_entry_fn)dlsym(g_dl, PAGODA_PLUGIN_ENTRY_SYMBOL);
    ck_assert_msg(entry != NULL, "no %s in %s", PAGODA_PLUGIN_ENTRY_SYMBOL, path);
    g_desc = entry(PAGODA_ABI_MAJOR, PAGODA_ABI_MINOR);
    ck_assert_ptr_nonnull(g_desc);
    return true;
}

/* The driver exposes /dev/nvidia0 when a GPU is there. */
static bool gpu_present(void) { return access("/dev/nvidia0", F_OK) == 0; }

START_TEST(test_descriptor)
{
    if (!load_plugin()) return;
    const pagoda_plugin_desc *d = g_desc;
    ck_assert_uint_eq(d->struct_size, sizeof(pagoda_plugin_desc));
    ck_assert_uint_eq(d->abi_major, PAGODA_ABI_MAJOR);
    ck_assert_uint_le(d->abi_minor, PAGODA_ABI_MINOR);
    ck_assert_int_eq(d->kind, PAGODA_KIND_BACKEND);
    ck_assert_str_eq(d->name, "cuda");
    ck_assert_ptr_nonnull(d->probe);
    ck_assert_ptr_nonnull(d->create);
    ck_assert_ptr_nonnull(d->destroy);
    const pagoda_backend_ops *ops = d->ops;
    ck_assert_ptr_nonnull(ops);
    ck_assert_uint_eq(ops->struct_size, sizeof(pagoda_backend_ops));
    /* Every slot of ABI 1.0, required and optional, is implemented; the
     * ABI 1.1 ops (Gemma 3's) are not, until they can be verified on a
     * GPU: the core then refuses a gemma3 model (test_gemma3_refused). */
    ck_assert(ops->info && ops->buffer_alloc && ops->buffer_free && ops->upload &&
              ops->download && ops->weights_from_host && ops->get_rows && ops->rms_norm &&
              ops->matmul && ops->rope && ops->kv_write && ops->attention && ops->swiglu &&
              ops->add && ops->copy_blocks && ops->synchronize);
    /* Every optional slot is filled; the ones with kernels of their own
     * (all but matmul_multi, n matmuls) refuse at the call unless
     * verified.txt lists them. */
    ck_assert(ops->geglu && ops->scale && ops->attention_ext && ops->matmul_multi);
    ck_assert(ops->matmul_experts && ops->moe_combine && ops->swiglu_oai);
    ck_assert_ptr_nonnull(d->config_keys);
    ck_assert_str_eq(d->config_keys[0].name, "device");
    ck_assert_int_eq(d->config_keys[0].type, PAGODA_KEY_INT);
    ck_assert_str_eq(d->config_keys[1].name, "allow_unverified");
    ck_assert_int_eq(d->config_keys[1].type, PAGODA_KEY_BOOL);
    ck_assert_str_eq(d->config_keys[1].default_str, "false");
    ck_assert_str_eq(d->config_keys[2].name, "verified_list");
    ck_assert_ptr_null(d->config_keys[3].name);
}
END_TEST

START_TEST(test_probe_and_create)
{
    if (!load_plugin()) return;
    char why[256] = "";
    int score = g_desc->probe(why, sizeof why);
    ck_assert_msg(why[0] != '\0', "probe gave no reason (score %d)", score);
    th_host th;
    th_init(&th);
    char err[512] = "";
    void *ctx = (void *)&th; /* must be overwritten */
    int st = g_desc->create(&th.h, &ctx, err, sizeof err);
    if (!gpu_present()) {
        ck_assert_msg(score == 0, "no GPU here, yet probe scored %d (%s)", score, why);
        ck_assert_int_ne(st, PAGODA_OK);
        ck_assert_ptr_null(ctx);
        /* create() says why, with probe's reason in it. */
        ck_assert_msg(strstr(err, why) != NULL, "create: '%s' lacks '%s'", err, why);
        return;
    }
    ck_assert_msg(score > 0, "a GPU is present but probe scored 0: %s", why);
    ck_assert_msg(st == PAGODA_OK, "create: %s", err);
    g_desc->destroy(ctx);
    /* With no verified list every type is cut (the core then refuses any
     * model at start); allow_unverified offers every kernel's type. */
    const pagoda_backend_ops *ops = g_desc->ops;
    for (int allow = 0; allow < 2; allow++) {
        th_init(&th);
        th_set(&th, "verified_list", "/nonexistent/verified.txt");
        if (allow) th_set(&th, "allow_unverified", "true");
        ctx = NULL;
        ck_assert_msg(g_desc->create(&th.h, &ctx, err, sizeof err) == PAGODA_OK, "create: %s", err);
        pagoda_backend_info info;
        memset(&info, 0, sizeof info);
        info.struct_size = sizeof info;
        ck_assert_int_eq(ops->info(ctx, &info), PAGODA_OK);
        ck_assert(info.mem_total > 0 && info.mem_free <= info.mem_total);
        ck_assert(!info.host_memory);
        ck_assert_uint_eq(info.weight_types, allow ? PCU_WEIGHT_TYPES : 0);
        ck_assert_uint_eq(info.kv_types, allow ? (1ull << PAGODA_DTYPE_F32) | (1ull << PAGODA_DTYPE_F16) |
                                                     (1ull << PAGODA_DTYPE_Q8_0) : 0);
        g_desc->destroy(ctx);
    }
    /* A list that does not parse fails create, naming the file and line. */
    char bad[] = "/tmp/pagoda_cuda_verified_XXXXXX";
    int fd = mkstemp(bad);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "weight Q9 x 2026-12-02 404f9f3\n", 31), 31);
    close(fd);
    th_init(&th);
    th_set(&th, "verified_list", bad);
    ctx = NULL;
    ck_assert_int_ne(g_desc->create(&th.h, &ctx, err, sizeof err), PAGODA_OK);
    unlink(bad);
    ck_assert_ptr_null(ctx);
    ck_assert_msg(strstr(err, bad) && strstr(err, ":1:"), "%s", err);

    /* A device index that does not exist is refused by name. */
    th_set(&th, "device", "999");
    ctx = NULL;
    ck_assert_int_ne(g_desc->create(&th.h, &ctx, err, sizeof err), PAGODA_OK);
    ck_assert_ptr_null(ctx);
    ck_assert_ptr_nonnull(strstr(err, "device"));
}
END_TEST

/* A gemma3 model passes the core's slot check on this backend (geglu,
 * scale and attention_ext exist; unverified, they refuse at their first
 * call, naming verified.txt); a gpt-oss or MoE model does not (no
 * matmul_experts, no attention sinks). No GPU needed: it reads the slots. */
START_TEST(test_gemma3_slots)
{
    if (!load_plugin()) return;
    pagoda_backend be;
    memset(&be, 0, sizeof be);
    size_t n = g_desc->ops ? *(const size_t *)g_desc->ops : 0;
    memcpy(&be.ops, g_desc->ops, n < sizeof be.ops ? n : sizeof be.ops);
    snprintf(be.info.name, sizeof be.info.name, "cuda");
    pagoda_hparams hp;
    memset(&hp, 0, sizeof hp);
    snprintf(hp.arch, sizeof hp.arch, "gemma3");
    hp.n_layers = 18;
    hp.ffn_act = PAGODA_FFN_GELU_TANH;
    hp.swa_window = 512;
    hp.n_swa_layers = 15;
    char err[1024] = "";
    ck_assert_msg(pagoda_forward_check_backend(&hp, &be, err, sizeof err) == PAGODA_OK, "%s", err);
    hp.ffn_act = PAGODA_FFN_SILU;
    hp.swa_window = 0;
    hp.n_swa_layers = 0;
    ck_assert_int_eq(pagoda_forward_check_backend(&hp, &be, err, sizeof err), PAGODA_OK);
}
END_TEST

/* ------------------------------------ kernel formulas on the CPU (decode.h) */

static const int k_all_types[] = {
    PAGODA_DTYPE_F32,  PAGODA_DTYPE_F16,  PAGODA_DTYPE_BF16,   PAGODA_DTYPE_Q8_0,
    PAGODA_DTYPE_Q4_0, PAGODA_DTYPE_Q4_1, PAGODA_DTYPE_Q5_0,   PAGODA_DTYPE_Q5_1,
    PAGODA_DTYPE_Q2_K, PAGODA_DTYPE_Q3_K, PAGODA_DTYPE_Q4_K,   PAGODA_DTYPE_Q5_K,
    PAGODA_DTYPE_Q6_K, PAGODA_DTYPE_IQ4_NL, PAGODA_DTYPE_IQ4_XS, PAGODA_DTYPE_MXFP4,
};
#define N_ALL_TYPES ((int)(sizeof k_all_types / sizeof k_all_types[0]))

/* Random rows of `dt`: random bytes everywhere (every bit pattern of the
 * quants and packed scales), then each block's f16 scale fields set to
 * finite halves of either sign and its E8M0 byte to 2^-8..2^8, so values
 * stay finite; the 1-element types get random normal values. */
static void random_rows(tu_rng *r, int dt, uint8_t *w, int rows, int K)
{
    size_t rb = pagoda_dtype_row_bytes(dt, K);
    if (dt == PAGODA_DTYPE_F32 || dt == PAGODA_DTYPE_F16 || dt == PAGODA_DTYPE_BF16) {
        float *f = malloc(sizeof(float) * (size_t)K);
        for (int i = 0; i < rows; i++) {
            tu_fill_normal(r, f, K, 1.0f);
            ck_assert_int_eq(pagoda_quantize_row(dt, f, w + i * rb, K), PAGODA_OK);
        }
        free(f);
        return;
    }
    for (size_t i = 0; i < rb * (size_t)rows; i++) w[i] = (uint8_t)(tu_rng_u64(r) >> 56);
    int be = 0, bb = 0;
    ck_assert(pagoda_dtype_block(dt, &be, &bb));
    int h[2] = {-1, -1}; /* byte offsets of the block's f16 fields */
    switch (dt) {
    case PAGODA_DTYPE_Q8_0: case PAGODA_DTYPE_Q4_0: case PAGODA_DTYPE_Q5_0:
    case PAGODA_DTYPE_IQ4_NL: case PAGODA_DTYPE_IQ4_XS: h[0] = 0; break;
    case PAGODA_DTYPE_Q4_1: case PAGODA_DTYPE_Q5_1: case PAGODA_DTYPE_Q4_K:
    case PAGODA_DTYPE_Q5_K: h[0] = 0; h[1] = 2; break;
    case PAGODA_DTYPE_Q2_K: h[0] = 80; h[1] = 82; break;
    case PAGODA_DTYPE_Q3_K: h[0] = 108; break;
    case PAGODA_DTYPE_Q6_K: h[0] = 208; break;
    default: break;
    }
    size_t nblocks = rb * (size_t)rows / (size_t)bb;
    for (size_t b = 0; b < nblocks; b++) {
        uint8_t *blk = w + b * (size_t)bb;
        for (int j = 0; j < 2; j++)
            if (h[j] >= 0) {
                float v = 0.0f;
                tu_fill_normal(r, &v, 1, 0.01f);
                uint16_t hv = pagoda_fp32_to_fp16(v);
                memcpy(blk + h[j], &hv, 2);
            }
        if (dt == PAGODA_DTYPE_MXFP4) blk[0] = (uint8_t)(120 + tu_rng_u64(r) % 17);
    }
}

/* Every half, then every type's element k as the kernels decode it, equal
 * to the bit to pagoda_dequantize_row. */
START_TEST(test_decode_every_type)
{
    for (uint32_t h = 0; h < 65536; h++) {
        uint8_t b[2] = {(uint8_t)h, (uint8_t)(h >> 8)};
        float a = pcu_f16(b), e = pagoda_fp16_to_fp32((uint16_t)h);
        ck_assert_msg(memcmp(&a, &e, 4) == 0, "f16 0x%04x: %a, want %a", h, a, e);
        float c = pcu_bf16(b), f = pagoda_bf16_to_fp32((uint16_t)h);
        ck_assert_msg(memcmp(&c, &f, 4) == 0, "bf16 0x%04x", h);
    }
    for (int i = 0; i < 16; i++) {
        ck_assert_int_eq(pcu_iq4nl(i), pagoda_iq4nl_table[i]);
        ck_assert_int_eq(pcu_mxfp4(i), pagoda_mxfp4_table[i]);
    }
    for (int e = 0; e < 256; e++) {
        float a = pcu_e8m0_half((uint8_t)e), w = pagoda_e8m0_to_fp32_half((uint8_t)e);
        ck_assert_msg(memcmp(&a, &w, 4) == 0, "e8m0 %d: %a, want %a", e, a, w);
    }
    enum { K = 512, ROWS = 6 };
    tu_rng r;
    tu_rng_seed(&r, 31);
    uint8_t *w = malloc(ROWS * pagoda_dtype_row_bytes(PAGODA_DTYPE_F32, K));
    float ref[K];
    for (int ti = 0; ti < N_ALL_TYPES; ti++) {
        int dt = k_all_types[ti];
        ck_assert_msg((PCU_WEIGHT_TYPES >> dt) & 1, "%s not in PCU_WEIGHT_TYPES", pagoda_dtype_name(dt));
        size_t rb = pagoda_dtype_row_bytes(dt, K);
        random_rows(&r, dt, w, ROWS, K);
        for (int i = 0; i < ROWS; i++) {
            ck_assert_int_eq(pagoda_dequantize_row(dt, w + i * rb, ref, K), PAGODA_OK);
            for (int k = 0; k < K; k++) {
                float got = pcu_dq(dt, w + i * rb, k);
                ck_assert_msg(memcmp(&got, &ref[k], 4) == 0, "%s row %d element %d: %a, want %a",
                              pagoda_dtype_name(dt), i, k, got, ref[k]);
            }
        }
    }
    ck_assert_float_eq(pcu_dq(PAGODA_DTYPE_COUNT_, w, 0), 0.0f); /* no type: no value */
    free(w);
}
END_TEST

/* The decode mat-vec as k_gemv runs it: 32 lanes of pcu_gemv_lane, the xor
 * butterfly, lane 0's sum; against a double dot of the CPU's dequantized
 * weights, within F32 summation error (K = 4096 in 128 terms a lane). */
START_TEST(test_gemv_formula)
{
    enum { K = 4096, N = 3, T = PCU_GEMV_MAX_T, LDX = K + 16 };
    tu_rng r;
    tu_rng_seed(&r, 47);
    uint8_t *w = malloc(N * pagoda_dtype_row_bytes(PAGODA_DTYPE_F32, K));
    float *x = malloc(sizeof(float) * T * LDX), *wf = malloc(sizeof(float) * K);
    tu_fill_normal(&r, x, T * LDX, 1.0f);
    for (int ti = 0; ti < N_ALL_TYPES; ti++) {
        int dt = k_all_types[ti];
        size_t rb = pagoda_dtype_row_bytes(dt, K);
        random_rows(&r, dt, w, N, K);
        for (int n = 0; n < N; n++) {
            const uint8_t *row = w + n * rb;
            ck_assert_int_eq(pagoda_dequantize_row(dt, row, wf, K), PAGODA_OK);
            for (int Tn = 1; Tn <= T; Tn += T - 1) {
                float lanes[32][PCU_GEMV_MAX_T];
                for (int l = 0; l < 32; l++) pcu_gemv_lane(dt, row, x, LDX, Tn, K, l, 32, lanes[l]);
                for (int o = 16; o > 0; o >>= 1) {
                    float next[32][PCU_GEMV_MAX_T];
                    for (int l = 0; l < 32; l++)
                        for (int t = 0; t < PCU_GEMV_MAX_T; t++) next[l][t] = lanes[l][t] + lanes[l ^ o][t];
                    memcpy(lanes, next, sizeof lanes);
                }
                for (int t = 0; t < Tn; t++) {
                    double want = 0, mag = 0;
                    for (int k = 0; k < K; k++) {
                        want += (double)wf[k] * x[t * LDX + k];
                        mag += fabs((double)wf[k] * x[t * LDX + k]);
                    }
                    double tol = 1e-5 * mag + 1e-30;
                    ck_assert_msg(fabs(lanes[0][t] - want) <= tol, "%s row %d token %d of %d: %g, want %g (tol %g)",
                                  pagoda_dtype_name(dt), n, t, Tn, lanes[0][t], want, tol);
                }
                for (int t = Tn; t < PCU_GEMV_MAX_T; t++) ck_assert_float_eq(lanes[0][t], 0.0f);
            }
        }
    }
    free(w);
    free(x);
    free(wf);
}
END_TEST

/* kv_write's Q8_0 block (decode.h pcu_q8_0_quant, then the f16 of d) is
 * pagoda_quantize_row's to the bit, geglu's formula is GELU-tanh, and
 * swiglu_oai's is the CPU backend's scalar reference to the bit (NaN and
 * clamps included: the table's scalar entry, which its AVX2 / AVX-512
 * entries match within a tolerance, test_cpu_kernels). */
START_TEST(test_kv_and_glu_formulas)
{
    enum { N = 64 * 32 };
    tu_rng r;
    tu_rng_seed(&r, 53);
    float x[N];
    tu_fill_normal(&r, x, N, 2.0f);
    for (int j = 0; j < 32; j++) x[32 + j] = 0.0f; /* an all-zero block: d 0, q 0 */
    x[64] = 1e-30f;                                /* a block whose d is an f16 subnormal */
    for (int j = 1; j < 32; j++) x[64 + j] = 0.0f;
    uint8_t want[N / 32 * 34];
    ck_assert_int_eq(pagoda_quantize_row(PAGODA_DTYPE_Q8_0, x, want, N), PAGODA_OK);
    for (int b = 0; b < N / 32; b++) {
        float d;
        int8_t q[32];
        pcu_q8_0_quant(x + 32 * b, &d, q);
        uint16_t h = pagoda_fp32_to_fp16(d);
        ck_assert_msg(memcmp(&h, want + 34 * b, 2) == 0, "block %d: d", b);
        ck_assert_msg(memcmp(q, want + 34 * b + 2, 32) == 0, "block %d: q", b);
    }
    for (int i = 0; i < N; i++) {
        double g = x[i], u = x[(i * 7 + 3) % N];
        double want_v = 0.5 * g * (1.0 + tanh(sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g))) * u;
        double got = pcu_geglu((float)g, (float)u);
        ck_assert_msg(fabs(got - want_v) <= 1e-6 * (fabs(want_v) + fabs(g * u)) + 1e-30,
                      "geglu(%g, %g) = %g, want %g", g, u, got, want_v);
    }
    float gate[N], up[N], oai[N];
    for (int i = 0; i < N; i++) {
        gate[i] = 5.0f * x[i];
        up[i] = 5.0f * x[(i * 7 + 3) % N];
    }
    gate[0] = NAN;
    up[1] = NAN;
    gate[2] = INFINITY;
    up[3] = -INFINITY;
    pagoda_vecdot_scalar.swiglu_oai(gate, up, 1.702f, 7.0f, oai, N);
    for (int i = 0; i < N; i++) {
        float got = pcu_swiglu_oai(gate[i], up[i], 1.702f, 7.0f);
        ck_assert_msg(memcmp(&got, &oai[i], 4) == 0 || (isnan(got) && isnan(oai[i])),
                      "swiglu_oai(%g, %g) = %a, want %a", gate[i], up[i], got, oai[i]);
    }
}
END_TEST

/* ------------------------------------------ the verified list (verified.c) */

START_TEST(test_verified_parse)
{
    pcu_verified v;
    char err[256] = "";
    const char *ok = "# comment\n\n"
                     "weight Q4_K NVIDIA_H200 2026-12-02 404f9f3\n"
                     "  weight f16 NVIDIA_H200 2026-12-02 404f9f3  # trailing\n"
                     "kv Q8_0 NVIDIA_H200 2026-12-02 404f9f3a\r\n"
                     "op geglu NVIDIA_H200 2026-12-02 404f9f3";
    ck_assert_msg(pcu_verified_parse(ok, "v.txt", &v, err, sizeof err) == PAGODA_OK, "%s", err);
    ck_assert_int_eq(v.n_entries, 4);
    ck_assert_uint_eq(v.weights, (1ull << PAGODA_DTYPE_Q4_K) | (1ull << PAGODA_DTYPE_F16));
    ck_assert_uint_eq(v.kv, 1ull << PAGODA_DTYPE_Q8_0);
    ck_assert_uint_eq(v.ops, 1u << PCU_OP_GEGLU);
    ck_assert_str_eq(v.gpu, "NVIDIA_H200");
    ck_assert_int_eq(pcu_verified_parse("# nothing has run\n", "v.txt", &v, err, sizeof err), PAGODA_OK);
    ck_assert_int_eq(v.n_entries, 0);
    ck_assert_uint_eq(v.weights | v.kv | v.ops, 0);

    static const struct { const char *text, *msg; } bad[] = {
        {"weight Q4_K NVIDIA_H200 2026-12-02\n", "v.txt:1: 4 fields, expected 5"},
        {"\nweight Q4_K NVIDIA H200 2026-12-02 404f9f3\n", "v.txt:2: 6 fields"},
        {"weight Q9_K NVIDIA_H200 2026-12-02 404f9f3\n", "v.txt:1: 'Q9_K' is not a dtype name"},
        {"kv Q4_K x 2026-1-02 404f9f3\n", "v.txt:1: date '2026-1-02' is not YYYY-MM-DD"},
        {"kv Q4_K x 2026-12-02 zz4f9f3\n", "v.txt:1: commit 'zz4f9f3' is not 7 to 40 hex"},
        {"op gelu x 2026-12-02 404f9f3\n", "v.txt:1: 'gelu' is not an optional op"},
        {"matmul Q4_K x 2026-12-02 404f9f3\n", "v.txt:1: kind 'matmul' is not weight, kv or op"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        ck_assert_int_eq(pcu_verified_parse(bad[i].text, "v.txt", &v, err, sizeof err), PAGODA_ERR_INVALID);
        ck_assert_msg(strstr(err, bad[i].msg) != NULL, "case %zu: '%s' lacks '%s'", i, err, bad[i].msg);
    }
    /* a missing file is an empty list, a directory is an error */
    bool missing = false;
    ck_assert_int_eq(pcu_verified_load("/nonexistent/verified.txt", &v, &missing, err, sizeof err), PAGODA_OK);
    ck_assert(missing);
    ck_assert_int_ne(pcu_verified_load("/", &v, &missing, err, sizeof err), PAGODA_OK);
    ck_assert_ptr_nonnull(strstr(err, "/"));
    /* the list in the tree parses, and ships with no entry: no kernel of
     * this backend has run on a GPU yet */
    char path[1024];
    snprintf(path, sizeof path, "%s/backends/cuda/verified.txt", PAGODA_TEST_SOURCE_DIR);
    ck_assert_msg(pcu_verified_load(path, &v, &missing, err, sizeof err) == PAGODA_OK, "%s", err);
    ck_assert_msg(!missing, "%s missing", path);
    ck_assert_int_eq(v.n_entries, 0);
}
END_TEST

/* The cut: types off the list are not advertised (the core then refuses a
 * model that needs one at start, naming the tensor and type), and named
 * in `refused`; allow_unverified keeps every kernel's type. */
START_TEST(test_verified_apply)
{
    pcu_verified v;
    char err[256];
    ck_assert_int_eq(pcu_verified_parse("weight Q4_K g 2026-12-02 404f9f3\nkv F16 g 2026-12-02 404f9f3\n",
                                        "v", &v, err, sizeof err), PAGODA_OK);
    uint64_t hw = (1ull << PAGODA_DTYPE_Q4_K) | (1ull << PAGODA_DTYPE_Q5_0);
    uint64_t hk = (1ull << PAGODA_DTYPE_F32) | (1ull << PAGODA_DTYPE_F16);
    uint64_t w, k;
    char refused[256];
    pcu_verified_apply(&v, false, hw, hk, &w, &k, refused, sizeof refused);
    ck_assert_uint_eq(w, 1ull << PAGODA_DTYPE_Q4_K);
    ck_assert_uint_eq(k, 1ull << PAGODA_DTYPE_F16);
    ck_assert_str_eq(refused, "weights Q5_0; kv F32");
    pcu_verified_apply(&v, true, hw, hk, &w, &k, refused, sizeof refused);
    ck_assert_uint_eq(w, hw);
    ck_assert_uint_eq(k, hk);
    ck_assert_str_eq(refused, "");
    /* the empty list refuses everything; the core's start check then names
     * the first tensor */
    memset(&v, 0, sizeof v);
    pcu_verified_apply(&v, false, hw, hk, &w, &k, refused, sizeof refused);
    ck_assert_uint_eq(w | k, 0);
    ck_assert_str_eq(refused, "weights Q5_0 Q4_K; kv F32 F16"); /* by dtype number */
    ck_assert_str_eq(pcu_op_name(PCU_OP_MATMUL_MULTI), "matmul_multi");
    ck_assert_ptr_null(pcu_op_name(PCU_OP_COUNT_));
}
END_TEST

/* ------------------------------------------------ GPU smoke (GPU only) */

typedef struct gpu {
    th_host th;
    void *ctx;
    const pagoda_backend_ops *ops;
} gpu;

static bool gpu_open(gpu *g)
{
    if (!load_plugin() || !gpu_present()) return false;
    char err[512];
    th_init(&g->th);
    th_set(&g->th, "allow_unverified", "true"); /* the smoke test is what verifies */
    g->ops = g_desc->ops;
    ck_assert_msg(g_desc->create(&g->th.h, &g->ctx, err, sizeof err) == PAGODA_OK, "%s", err);
    return true;
}

/* A device tensor holding host rows (of any type, `bytes` per row). */
static pagoda_tensor dev_tensor(gpu *g, pagoda_buffer **buf, const void *host, int dtype,
                                int64_t rows, int64_t cols)
{
    size_t rb = pagoda_dtype_row_bytes(dtype, cols);
    ck_assert_int_eq(g->ops->buffer_alloc(g->ctx, PAGODA_BUF_ACTIVATIONS, rb * rows, buf),
                     PAGODA_OK);
    if (host) ck_assert_int_eq(g->ops->upload(g->ctx, *buf, 0, host, rb * rows), PAGODA_OK);
    pagoda_tensor t = {*buf, 0, dtype, rows, cols, rb};
    return t;
}

static void expect_close(const float *got, const float *want, size_t n, float tol, const char *what)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabsf(got[i] - want[i]) <= tol * (1.0f + fabsf(want[i])),
                      "%s[%zu]: got %g, want %g", what, i, got[i], want[i]);
}

/* matmul of every path and every weight type: F32 (cuBLAS SGEMM), the
 * dequant-GEMV with few tokens and dequantise + cublasGemmEx with many,
 * with a bias; and matmul_multi over two of them. */
START_TEST(test_gpu_matmul)
{
    gpu g;
    if (!gpu_open(&g)) return;
    enum { K = 256, N = 48, TMAX = 20 };
    tu_rng r;
    tu_rng_seed(&r, 7);
    static float x[TMAX * K], bias[N], wq[N * K], ref[TMAX * N], mag[TMAX * N], got[TMAX * N];
    static uint8_t wbytes[N * K * 4];
    tu_fill_normal(&r, x, TMAX * K, 1.0f);
    tu_fill_normal(&r, bias, N, 1.0f);
    const int Ts[] = {2, TMAX};
    for (int ti = 0; ti < N_ALL_TYPES; ti++) {
        int dt = k_all_types[ti];
        size_t rb = pagoda_dtype_row_bytes(dt, K);
        random_rows(&r, dt, wbytes, N, K);
        for (int n = 0; n < N; n++)
            ck_assert_int_eq(pagoda_dequantize_row(dt, wbytes + n * rb, wq + n * K, K), PAGODA_OK);
        for (int k = 0; k < 2; k++) {
            int T = Ts[k];
            for (int t = 0; t < T; t++)
                for (int n = 0; n < N; n++) {
                    double sm = bias[n], mg = fabs(bias[n]);
                    for (int kk = 0; kk < K; kk++) {
                        sm += (double)x[t * K + kk] * wq[n * K + kk];
                        mg += fabs((double)x[t * K + kk] * wq[n * K + kk]);
                    }
                    ref[t * N + n] = (float)sm;
                    mag[t * N + n] = (float)mg;
                }
            pagoda_buffer *bw, *bx, *bb, *bo;
            pagoda_tensor tw = dev_tensor(&g, &bw, wbytes, dt, N, K);
            pagoda_tensor tx = dev_tensor(&g, &bx, x, PAGODA_DTYPE_F32, T, K);
            pagoda_tensor tb = dev_tensor(&g, &bb, bias, PAGODA_DTYPE_F32, 1, N);
            pagoda_tensor to = dev_tensor(&g, &bo, NULL, PAGODA_DTYPE_F32, T, N);
            ck_assert_msg(g.ops->matmul(g.ctx, &tx, &tw, &tb, &to) == PAGODA_OK, "%s",
                          g.th.last_error);
            ck_assert_int_eq(g.ops->download(g.ctx, bo, 0, got, sizeof(float) * T * N), PAGODA_OK);
            /* F32 accumulation: 1e-5 of sum |w x|; the GemmEx path rounds
             * activations and weights to F16 (2^-11 each: 3e-3) or, for
             * BF16 weights, activations to BF16 (2^-8: 1e-2) */
            double rel = T <= PCU_GEMV_MAX_T || dt == PAGODA_DTYPE_F32 ? 1e-5
                         : dt == PAGODA_DTYPE_BF16 ? 1e-2 : 3e-3;
            for (int i = 0; i < T * N; i++)
                ck_assert_msg(fabs((double)got[i] - ref[i]) <= rel * mag[i] + 1e-30,
                              "%s T=%d [%d]: got %g, want %g", pagoda_dtype_name(dt), T, i, got[i], ref[i]);
            if (k == 0) { /* matmul_multi: the same weights twice, one without bias */
                pagoda_buffer *bo2;
                pagoda_tensor to2 = dev_tensor(&g, &bo2, NULL, PAGODA_DTYPE_F32, T, N);
                pagoda_tensor ws[2] = {tw, tw}, outs[2] = {to, to2};
                const pagoda_tensor *bs[2] = {&tb, NULL};
                ck_assert_msg(g.ops->matmul_multi(g.ctx, &tx, 2, ws, bs, outs) == PAGODA_OK, "%s",
                              g.th.last_error);
                float got2[TMAX * N];
                ck_assert_int_eq(g.ops->download(g.ctx, bo2, 0, got2, sizeof(float) * T * N), PAGODA_OK);
                for (int i = 0; i < T * N; i++)
                    ck_assert_msg(fabs((double)got2[i] + bias[i % N] - ref[i]) <= rel * mag[i] + 1e-6,
                                  "%s matmul_multi [%d]", pagoda_dtype_name(dt), i);
                g.ops->buffer_free(g.ctx, bo2);
            }
            g.ops->buffer_free(g.ctx, bw);
            g.ops->buffer_free(g.ctx, bx);
            g.ops->buffer_free(g.ctx, bb);
            g.ops->buffer_free(g.ctx, bo);
        }
    }
    g_desc->destroy(g.ctx);
}
END_TEST

/* geglu and scale against the CPU's formulas (GPU expf: a few ulps). */
START_TEST(test_gpu_glu_scale)
{
    gpu g;
    if (!gpu_open(&g)) return;
    enum { R = 3, C = 300 };
    tu_rng r;
    tu_rng_seed(&r, 9);
    float ga[R * C], up[R * C], got[R * C];
    tu_fill_normal(&r, ga, R * C, 3.0f);
    tu_fill_normal(&r, up, R * C, 1.0f);
    pagoda_buffer *bg, *bu, *bo;
    pagoda_tensor tg = dev_tensor(&g, &bg, ga, PAGODA_DTYPE_F32, R, C);
    pagoda_tensor tu = dev_tensor(&g, &bu, up, PAGODA_DTYPE_F32, R, C);
    pagoda_tensor to = dev_tensor(&g, &bo, NULL, PAGODA_DTYPE_F32, R, C);
    ck_assert_msg(g.ops->geglu(g.ctx, &tg, &tu, &to) == PAGODA_OK, "%s", g.th.last_error);
    ck_assert_int_eq(g.ops->download(g.ctx, bo, 0, got, sizeof got), PAGODA_OK);
    for (int i = 0; i < R * C; i++) {
        float w = pcu_geglu(ga[i], up[i]);
        ck_assert_msg(fabsf(got[i] - w) <= 1e-5f * (fabsf(w) + fabsf(ga[i] * up[i])) + 1e-30f,
                      "geglu[%d]: got %g, want %g", i, got[i], w);
    }
    ck_assert_msg(g.ops->scale(g.ctx, &tg, 0.125f, &to) == PAGODA_OK, "%s", g.th.last_error);
    ck_assert_int_eq(g.ops->download(g.ctx, bo, 0, got, sizeof got), PAGODA_OK);
    for (int i = 0; i < R * C; i++) ck_assert_float_eq(got[i], ga[i] * 0.125f);
    g.ops->buffer_free(g.ctx, bg);
    g.ops->buffer_free(g.ctx, bu);
    g.ops->buffer_free(g.ctx, bo);
    g_desc->destroy(g.ctx);
}
END_TEST

/* The KV values as a layout of type dt keeps them (what a reference reads). */
static float kv_kept(int dt, const float *head, int d)
{
    if (dt == PAGODA_DTYPE_F16) return pagoda_fp16_to_fp32(pagoda_fp32_to_fp16(head[d]));
    if (dt != PAGODA_DTYPE_Q8_0) return head[d];
    uint8_t blk[34];
    float out[32];
    ck_assert_int_eq(pagoda_quantize_row(dt, head + d / 32 * 32, blk, 32), PAGODA_OK);
    ck_assert_int_eq(pagoda_dequantize_row(dt, blk, out, 32), PAGODA_OK);
    return out[d % 32];
}

/* Paged attention over two sequences (a 5-token prefill chunk after 3
 * cached tokens, and one decode token at position 6), GQA 4 heads on 2 KV
 * heads, blocks scattered in the pool, the tables read in place; F32, F16
 * and Q8_0 KV, causal (attention) and a window of 3 (attention_ext);
 * against a dense reference. */
START_TEST(test_gpu_attention)
{
    gpu g;
    if (!gpu_open(&g)) return;
    enum { H = 4, KVH = 2, HD = 32, BS = 4, NB = 8, NT = 6 };
    const int kv_types[] = {PAGODA_DTYPE_F32, PAGODA_DTYPE_F16, PAGODA_DTYPE_Q8_0};
    for (int kt = 0; kt < 3; kt++)
    for (int window = 0; window <= 3; window += 3) {
    int kdt = kv_types[kt];
    pagoda_kv_layout L = {1, NB, BS, KVH, HD, kdt, PAGODA_KV_SEPARATE};
    int32_t bt0[] = {5, 2}, bt1[] = {7, 0};
    /* seq 0: ctx 8, queries at 3..7; seq 1: ctx 7, query at 6 */
    pagoda_seq_view sv[2] = {{0, 5, 8, 2, bt0}, {5, 1, 7, 2, bt1}};
    int32_t ctx_len[2] = {8, 7};
    const int32_t *bts[2] = {bt0, bt1};
    tu_rng r;
    tu_rng_seed(&r, 11);
    /* All keys/values of both sequences, written through kv_write. */
    float k[2][8][KVH * HD], v[2][8][KVH * HD];
    tu_fill_normal(&r, &k[0][0][0], sizeof k / sizeof(float), 1.0f);
    tu_fill_normal(&r, &v[0][0][0], sizeof v / sizeof(float), 1.0f);
    pagoda_buffer *kv;
    ck_assert_int_eq(g.ops->buffer_alloc(g.ctx, PAGODA_BUF_KV, pagoda_kv_pool_bytes(&L), &kv),
                     PAGODA_OK);
    for (int s = 0; s < 2; s++) {
        int32_t slots[8];
        for (int p = 0; p < ctx_len[s]; p++) slots[p] = bts[s][p / BS] * BS + p % BS;
        pagoda_buffer *bk, *bv;
        pagoda_tensor tk = dev_tensor(&g, &bk, k[s], PAGODA_DTYPE_F32, ctx_len[s], KVH * HD);
        pagoda_tensor tv = dev_tensor(&g, &bv, v[s], PAGODA_DTYPE_F32, ctx_len[s], KVH * HD);
        ck_assert_int_eq(g.ops->kv_write(g.ctx, kv, &L, 0, &tk, &tv, slots, ctx_len[s]),
                         PAGODA_OK);
        g.ops->buffer_free(g.ctx, bk);
        g.ops->buffer_free(g.ctx, bv);
    }
    float q[NT * H * HD], ref[NT * H * HD], got[NT * H * HD];
    tu_fill_normal(&r, q, NT * H * HD, 1.0f);
    float scale = 1.0f / sqrtf((float)HD);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < sv[s].n_q; i++) {
            int t = sv[s].q_start + i, pos = ctx_len[s] - sv[s].n_q + i;
            int j0 = window > 0 && pos + 1 > window ? pos + 1 - window : 0;
            for (int h = 0; h < H; h++) {
                int kh = h / (H / KVH);
                double sc[8], mx = -1e30, sum = 0;
                for (int j = j0; j <= pos; j++) {
                    double d = 0;
                    for (int e = 0; e < HD; e++)
                        d += q[(t * H + h) * HD + e] * kv_kept(kdt, &k[s][j][kh * HD], e);
                    sc[j] = d * scale;
                    if (sc[j] > mx) mx = sc[j];
                }
                for (int j = j0; j <= pos; j++) sum += (sc[j] = exp(sc[j] - mx));
                for (int e = 0; e < HD; e++) {
                    double o = 0;
                    for (int j = j0; j <= pos; j++) o += sc[j] * kv_kept(kdt, &v[s][j][kh * HD], e);
                    ref[(t * H + h) * HD + e] = (float)(o / sum);
                }
            }
        }
    int32_t toks[NT] = {0}, pos[NT] = {3, 4, 5, 6, 7, 6}, slots[NT] = {0};
    pagoda_batch b = {1, NT, toks, pos, slots, 2, sv};
    pagoda_buffer *bq, *bo;
    pagoda_tensor tq = dev_tensor(&g, &bq, q, PAGODA_DTYPE_F32, NT, H * HD);
    pagoda_tensor to = dev_tensor(&g, &bo, NULL, PAGODA_DTYPE_F32, NT, H * HD);
    pagoda_attn_params ap;
    memset(&ap, 0, sizeof ap);
    ap.struct_size = sizeof ap;
    ap.n_heads = H;
    ap.scale = scale;
    ap.window = window;
    int st = window ? g.ops->attention_ext(g.ctx, &tq, kv, &L, 0, &b, &ap, &to)
                    : g.ops->attention(g.ctx, &tq, kv, &L, 0, &b, H, scale, &to);
    ck_assert_msg(st == PAGODA_OK, "%s", g.th.last_error);
    ck_assert_int_eq(g.ops->download(g.ctx, bo, 0, got, sizeof got), PAGODA_OK);
    expect_close(got, ref, NT * H * HD, 1e-4f, window ? "attention_ext window 3" : pagoda_dtype_name(kdt));
    g.ops->buffer_free(g.ctx, bq);
    g.ops->buffer_free(g.ctx, bo);
    g.ops->buffer_free(g.ctx, kv);
    }
    g_desc->destroy(g.ctx);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cuda_probe");
    TCase *tc = tcase_create("plugin");
    tcase_add_test(tc, test_descriptor);
    tcase_add_test(tc, test_probe_and_create);
    tcase_add_test(tc, test_gemma3_slots);
    tcase_add_test(tc, test_kv_and_glu_formulas);
    tcase_add_test(tc, test_decode_every_type);
    tcase_add_test(tc, test_gemv_formula);
    tcase_add_test(tc, test_verified_parse);
    tcase_add_test(tc, test_verified_apply);
    tcase_add_test(tc, test_gpu_matmul);
    tcase_add_test(tc, test_gpu_attention);
    tcase_add_test(tc, test_gpu_glu_scale);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
