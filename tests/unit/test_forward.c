/* test_forward.c: the forward pass's use of optional backend ops with a
 * fallback: with matmul_multi (ABI 1.3: Q/K/V and gate/up handed over
 * together) and without it (n matmuls) the logits are the same bits, on a
 * generated llama (Q8_0), qwen2 (QKV biases, Q4_0) and gemma3 (GeGLU,
 * sliding windows, Q8_0), over a prefill and decode steps. */
#include <unistd.h>

#include "engine_testutil.h"
#include "forward.h"
#include "genmodel.h"

enum { N_TOK = 40, PREFILL = 32, BS = 16 };

static void logits_of(pagoda_runtime *rt, pagoda_backend *be, const int32_t *tok, float *logits)
{
    const int32_t nb = (N_TOK + BS - 1) / BS;
    int32_t V = rt->model->hp.n_vocab;
    pagoda_forward fw;
    char err[1024] = "";
    ck_assert_msg(pagoda_forward_init(&fw, rt->model, be, PREFILL, PREFILL, nb, BS, PAGODA_DTYPE_F16, err,
                                      sizeof err) == 0, "%s", err);
    int32_t table[8], pos[N_TOK], slots[N_TOK], rows[PREFILL];
    for (int32_t b = 0; b < nb; b++) table[b] = b;
    for (int32_t i = 0; i < N_TOK; i++) {
        pos[i] = i;
        slots[i] = i;
    }
    for (int32_t i = 0; i < PREFILL; i++) rows[i] = i;
    for (int32_t t0 = 0; t0 < N_TOK;) {
        int32_t n = t0 == 0 ? PREFILL : 1;
        pagoda_seq_view sv = {.q_start = 0, .n_q = n, .ctx_len = t0 + n, .n_blocks = nb, .block_table = table};
        pagoda_batch b = {.seq_no = (uint64_t)t0 + 1, .n_tokens = n, .tokens = tok + t0, .positions = pos + t0,
                          .slots = slots + t0, .n_seqs = 1, .seqs = &sv};
        ck_assert_msg(pagoda_forward_run(&fw, &b, rows, n, logits + (size_t)t0 * (size_t)V, err, sizeof err) == 0,
                      "%s", err);
        t0 += n;
    }
    pagoda_forward_free(&fw);
}

static void check_arch(const char *arch, int dtype)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/pagoda_fwd_XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char err[1024];
    pagoda_genmodel_opts g = {.shape = "tiny-k", .dtype = dtype, .out = path, .seed = 11, .arch = arch,
                              .layers = 3, .sliding_window = 20};
    ck_assert_msg(pagoda_gen_model(&g, err, sizeof err) == 0, "%s", err);
    pagoda_config *cfg = pagoda_config_new_empty();
    char buf[256];
    snprintf(buf, sizeof buf, "engine.model=%s", path);
    ck_assert_int_eq(pagoda_config_set(cfg, buf, err, sizeof err), 0);
    ck_assert_int_eq(pagoda_config_set(cfg, "engine.log_level=warn", err, sizeof err), 0);
    ck_assert_int_eq(pagoda_config_set(cfg, "engine.max_seq_len=128", err, sizeof err), 0);
    ck_assert_int_eq(pagoda_config_set(cfg, "backend.cpu.threads=2", err, sizeof err), 0);
    pagoda_runtime *rt = NULL;
    ck_assert_msg(pagoda_runtime_open(cfg, false, false, &rt, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_nonnull(rt->backend.ops.matmul_multi);
    int32_t V = rt->model->hp.n_vocab, tok[N_TOK];
    for (int i = 0; i < N_TOK; i++) tok[i] = (i * 97 + 5) % V;
    size_t n = (size_t)N_TOK * (size_t)V;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    ck_assert(a && b);
    logits_of(rt, &rt->backend, tok, a);
    pagoda_backend plain = rt->backend;
    plain.ops.matmul_multi = NULL;  /* a backend built for ABI 1.2 or older */
    logits_of(rt, &plain, tok, b);
    ck_assert_msg(memcmp(a, b, n * sizeof(float)) == 0, "%s: logits with matmul_multi differ from n matmuls",
                  arch ? arch : "llama");
    free(a);
    free(b);
    et_close(rt, cfg);
    unlink(path);
}

START_TEST(matmul_multi_same_logits_llama) { check_arch(NULL, PAGODA_DTYPE_Q8_0); }
END_TEST
START_TEST(matmul_multi_same_logits_qwen2) { check_arch("qwen2", PAGODA_DTYPE_Q4_0); }
END_TEST
START_TEST(matmul_multi_same_logits_gemma3) { check_arch("gemma3", PAGODA_DTYPE_Q8_0); }
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("forward");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, matmul_multi_same_logits_llama);
    tcase_add_test(tc, matmul_multi_same_logits_qwen2);
    tcase_add_test(tc, matmul_multi_same_logits_gemma3);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
