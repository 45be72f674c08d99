/* test_perplexity.c: `pagoda perplexity` (core/tools/perplexity.c) on the
 * bundled model: each chunk's negative log-likelihood equals a sum
 * computed here from the forward pass's own logits (the chunking, the BOS
 * in front, the second half scored), the estimate and its error follow the
 * documented formulas, the printed lines have llama-perplexity's shape,
 * and bad input is refused with a reason. */
#include "engine_testutil.h"

#include <unistd.h>

#include "perplexity.h"
#include "tokenizer.h"

static const char *sentences[] = {
    "Once upon a time, there was a little girl named Lily.",
    "She loved to play outside in the park with her friends.",
    "One day, she saw a big red ball under a tree.",
    "Tom had a small dog. The dog liked to run and jump.",
    "The sun was warm and the sky was blue.",
    "Mom said they could have cake after dinner, and everyone was happy.",
};

/* A text of about n_sent sentences, the same every run. */
static void write_text(const char *path, int n_sent)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < n_sent; i++)
        fprintf(f, "%s%s", sentences[(i * 7 + i / 6) % 6], i % 5 == 4 ? "\n" : " ");
    fclose(f);
}

static char g_path[256];

static void setup(void)
{
    snprintf(g_path, sizeof g_path, "/tmp/pagoda-ppl-%d.txt", (int)getpid());
    write_text(g_path, 60);
}

static void teardown(void) { unlink(g_path); }

START_TEST(chunks_match_the_forward_pass)
{
    const int32_t ctx = 64;
    char model[1024];
    snprintf(model, sizeof model, "%s", tu_src("models/stories260K.gguf"));
    const char *sets[] = {"engine.kv_dtype=f32", "backend.cpu.threads=2"};
    char out_path[300];
    snprintf(out_path, sizeof out_path, "%s.out", g_path);
    FILE *out = fopen(out_path, "w+");
    ck_assert_ptr_nonnull(out);
    pagoda_ppl_opts o = {.model = model, .sets = sets, .n_sets = 2, .file = g_path, .ctx = ctx,
                         .parallel = 3, .out = out, .progress = 0};
    pagoda_ppl_result res;
    char err[1024] = "";
    int st = pagoda_perplexity_run(&o, &res, err, sizeof err);
    ck_assert_msg(st == 0, "%s", err);
    ck_assert_int_ge(res.n_chunks, 4);
    ck_assert_int_eq(res.n_chunks, (int32_t)(res.n_file_tokens / ctx));
    ck_assert_int_eq(res.first, ctx / 2);
    ck_assert_int_eq(res.count, (int64_t)res.n_chunks * (ctx - 1 - ctx / 2));

    /* the reference: the same tokens, chunk by chunk, through the forward
     * pass directly */
    const char *settings[] = {"engine.kv_dtype=f32", NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open(&cfg, settings);
    const pagoda_tokenizer *tok = rt->model->tok;
    ck_assert(pagoda_tokenizer_add_bos(tok));
    FILE *f = fopen(g_path, "r");
    static char text[65536];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    static int32_t ids[65536];
    int32_t n = 0;
    ids[0] = pagoda_tokenizer_bos(tok);
    ck_assert_int_eq(pagoda_tokenize(tok, text, len, false, false, ids + 1, 65535, &n), 0);
    ck_assert_int_eq(n + 1, res.n_file_tokens);
    double nll = 0, nll2 = 0;
    for (int32_t c = 0; c < res.n_chunks; c++) {
        int32_t chunk[64];
        memcpy(chunk, ids + c * ctx, sizeof chunk);
        chunk[0] = pagoda_tokenizer_bos(tok);
        double lp[64], sum = 0;
        et_reference_logprobs(rt, chunk, ctx, lp, NULL);
        for (int32_t i = ctx / 2 + 1; i < ctx; i++) {
            sum -= lp[i];
            nll2 += lp[i] * lp[i];
        }
        nll += sum;
        ck_assert_msg(fabs(sum - res.chunk_nll[c]) < 1e-3, "chunk %d: NLL %.6f, reference %.6f", c,
                      res.chunk_nll[c], sum);
    }
    et_close(rt, cfg);
    ck_assert_double_eq_tol(res.nll, nll, 1e-2);
    ck_assert_double_eq_tol(res.nll2, nll2, 1e-2);
    /* PPL = exp(mean NLL); its error: the standard error of the mean NLL,
     * sqrt((mean of squares - square of mean) / (N - 1)), times PPL */
    double N = (double)res.count, mean = nll / N;
    ck_assert_double_eq_tol(res.ppl, exp(mean), exp(mean) * 1e-5);
    double se = sqrt((nll2 / N - mean * mean) / (N - 1)) * exp(mean);
    ck_assert_double_eq_tol(res.ppl_err, se, se * 1e-3);
    ck_assert(res.ppl > 1 && res.ppl < 512);
    ck_assert(res.tokens_per_s > 0);

    /* the lines: "[k]running PPL," per chunk, then the final estimate */
    rewind(out);
    static char printed[8192];
    size_t pl = fread(printed, 1, sizeof printed - 1, out);
    printed[pl] = 0;
    fclose(out);
    unlink(out_path);
    char want[128];
    snprintf(want, sizeof want, "[%d]%.4f\n", res.n_chunks, res.ppl);
    ck_assert_msg(strstr(printed, "[1]") && strstr(printed, want), "%s", printed);
    snprintf(want, sizeof want, "Final estimate: PPL = %.4f +/- %.5f\n", res.ppl, res.ppl_err);
    ck_assert_msg(strstr(printed, want), "%s", printed);
    double chunk0 = res.chunk_nll[0];
    pagoda_ppl_result_free(&res);

    /* --chunks caps the count; the first chunk's NLL is the same */
    double first = 0;
    {
        pagoda_ppl_opts o2 = o;
        o2.out = NULL;
        o2.max_chunks = 1;
        o2.parallel = 1;
        pagoda_ppl_result r2;
        ck_assert_int_eq(pagoda_perplexity_run(&o2, &r2, err, sizeof err), 0);
        ck_assert_int_eq(r2.n_chunks, 1);
        first = r2.chunk_nll[0];
        pagoda_ppl_result_free(&r2);
    }
    ck_assert_msg(fabs(first - chunk0) < 1e-3, "chunk 1 alone %.6f, among others %.6f", first, chunk0);
}
END_TEST

START_TEST(bad_input_is_refused)
{
    char model[1024];
    snprintf(model, sizeof model, "%s", tu_src("models/stories260K.gguf"));
    pagoda_ppl_opts o = {.model = model, .file = "/nonexistent/text.txt", .ctx = 64, .parallel = 2,
                         .progress = 0};
    pagoda_ppl_result res;
    char err[1024] = "";
    ck_assert_int_eq(pagoda_perplexity_run(&o, &res, err, sizeof err), PAGODA_ERR_IO);
    ck_assert_msg(strstr(err, "/nonexistent/text.txt"), "%s", err);
    pagoda_ppl_result_free(&res);

    /* a chunk longer than the model's context (stories260K: 512) */
    o.file = g_path;
    o.ctx = 1024;
    ck_assert_int_eq(pagoda_perplexity_run(&o, &res, err, sizeof err), PAGODA_ERR_INVALID);
    ck_assert_msg(strstr(err, "--ctx 1024") && strstr(err, "512"), "%s", err);
    pagoda_ppl_result_free(&res);

    /* a text shorter than one chunk */
    write_text(g_path, 2);
    o.ctx = 256;
    ck_assert_int_eq(pagoda_perplexity_run(&o, &res, err, sizeof err), PAGODA_ERR_INVALID);
    ck_assert_msg(strstr(err, "fewer than one chunk"), "%s", err);
    pagoda_ppl_result_free(&res);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("perplexity");
    TCase *tc = tcase_create("tool");
    tcase_set_timeout(tc, 600);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, chunks_match_the_forward_pass);
    tcase_add_test(tc, bad_input_is_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
