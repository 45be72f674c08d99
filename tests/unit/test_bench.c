/* test_bench.c: the bench's workload generator and statistics (pure
 * functions), and two small runs of `pagoda bench` on the bundled model
 * whose counts (never times) are checked through its JSON report. */
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "pagoda/types.h"
#include "testutil.h"

START_TEST(dist_parse)
{
    pagoda_bench_dist d;
    char err[256];
    ck_assert_int_eq(pagoda_bench_dist_parse("128", &d, err, sizeof err), 0);
    ck_assert_int_eq(d.kind, PAGODA_BENCH_FIXED);
    ck_assert_int_eq(d.lo, 128);
    ck_assert_int_eq(d.hi, 128);
    ck_assert_int_eq(pagoda_bench_dist_parse("16-512", &d, err, sizeof err), 0);
    ck_assert_int_eq(d.kind, PAGODA_BENCH_UNIFORM);
    ck_assert_int_eq(d.lo, 16);
    ck_assert_int_eq(d.hi, 512);
    ck_assert_int_eq(pagoda_bench_dist_parse("uniform:1-2", &d, err, sizeof err), 0);
    ck_assert_int_eq(d.kind, PAGODA_BENCH_UNIFORM);
    ck_assert_int_eq(pagoda_bench_dist_parse("log:16-512", &d, err, sizeof err), 0);
    ck_assert_int_eq(d.kind, PAGODA_BENCH_LOGUNIFORM);
    char buf[64];
    ck_assert_str_eq(pagoda_bench_dist_str(&d, buf, sizeof buf), "log:16-512");
    static const char *const bad[] = {"", "0", "-5", "5-", "9-3", "abc", "12x", "log:7",
                                      "uniform:", "1-2000000", "log:3-2", NULL};
    for (int i = 0; bad[i]; i++) {
        err[0] = 0;
        ck_assert_msg(pagoda_bench_dist_parse(bad[i], &d, err, sizeof err) == PAGODA_ERR_INVALID,
                      "'%s' accepted", bad[i]);
        ck_assert_msg(strstr(err, "distribution") != NULL, "'%s': %s", bad[i], err);
    }
}
END_TEST

START_TEST(dist_draw_range)
{
    pagoda_bench_dist u = {PAGODA_BENCH_UNIFORM, 16, 20};
    uint64_t s = 7;
    int seen[5] = {0};
    for (int i = 0; i < 5000; i++) {
        int32_t v = pagoda_bench_dist_draw(&u, &s);
        ck_assert_int_ge(v, 16);
        ck_assert_int_le(v, 20);
        seen[v - 16]++;
    }
    for (int i = 0; i < 5; i++) ck_assert_int_gt(seen[i], 800); /* ~1000 each */
    pagoda_bench_dist f = {PAGODA_BENCH_FIXED, 33, 33};
    ck_assert_int_eq(pagoda_bench_dist_draw(&f, &s), 33);

    /* log-uniform over 16..511: each octave gets about a fifth */
    pagoda_bench_dist l = {PAGODA_BENCH_LOGUNIFORM, 16, 511};
    int oct[5] = {0};
    for (int i = 0; i < 20000; i++) {
        int32_t v = pagoda_bench_dist_draw(&l, &s);
        ck_assert_int_ge(v, 16);
        ck_assert_int_le(v, 511);
        int k = 0;
        while ((16 << (k + 1)) <= v) k++;
        oct[k]++;
    }
    for (int k = 0; k < 5; k++) ck_assert_msg(oct[k] > 3600 && oct[k] < 4400, "octave %d: %d", k, oct[k]);
}
END_TEST

START_TEST(rng_deterministic)
{
    uint64_t a = 42, b = 42, c = 43;
    uint64_t x = pagoda_bench_rng_next(&a);
    ck_assert_uint_eq(x, pagoda_bench_rng_next(&b));
    ck_assert_uint_ne(x, pagoda_bench_rng_next(&c));
    for (int i = 0; i < 1000; i++) {
        double u = pagoda_bench_rng_unit(&a);
        ck_assert(u >= 0 && u < 1);
    }
}
END_TEST

static pagoda_bench_req *make(const pagoda_bench_workload *w, int32_t lo, int32_t hi)
{
    pagoda_bench_req *r = NULL;
    char err[256] = "";
    ck_assert_msg(pagoda_bench_workload_make(w, lo, hi, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_nonnull(r);
    return r;
}

START_TEST(workload_deterministic)
{
    pagoda_bench_workload w;
    pagoda_bench_workload_default(&w);
    w.n_requests = 20;
    w.prompt_len = (pagoda_bench_dist){PAGODA_BENCH_UNIFORM, 5, 50};
    w.output_len = (pagoda_bench_dist){PAGODA_BENCH_UNIFORM, 16, 512};
    w.seed = 5;
    pagoda_bench_req *a = make(&w, 259, 32000), *b = make(&w, 259, 32000);
    bool any_len_diff = false;
    for (int i = 0; i < 20; i++) {
        ck_assert_int_eq(a[i].n_prompt, b[i].n_prompt);
        ck_assert_int_eq(a[i].max_tokens, b[i].max_tokens);
        ck_assert_int_ge(a[i].n_prompt, 5);
        ck_assert_int_le(a[i].n_prompt, 50);
        ck_assert_int_ge(a[i].max_tokens, 16);
        ck_assert_int_le(a[i].max_tokens, 512);
        ck_assert(!a[i].shared);
        ck_assert(a[i].arrival_s == 0); /* closed loop */
        ck_assert_mem_eq(a[i].prompt, b[i].prompt, sizeof(int32_t) * (size_t)a[i].n_prompt);
        for (int k = 0; k < a[i].n_prompt; k++) {
            ck_assert_int_ge(a[i].prompt[k], 259);
            ck_assert_int_lt(a[i].prompt[k], 32000);
        }
        if (i && a[i].n_prompt != a[0].n_prompt) any_len_diff = true;
    }
    ck_assert(any_len_diff);
    /* another seed, other prompts */
    w.seed = 6;
    pagoda_bench_req *c = make(&w, 259, 32000);
    int same = 0;
    for (int i = 0; i < 20; i++)
        same += c[i].n_prompt == a[i].n_prompt &&
                !memcmp(c[i].prompt, a[i].prompt, sizeof(int32_t) * (size_t)a[i].n_prompt);
    ck_assert_int_eq(same, 0);
    pagoda_bench_workload_free(a, 20);
    pagoda_bench_workload_free(b, 20);
    pagoda_bench_workload_free(c, 20);
}
END_TEST

START_TEST(workload_shared_prefix)
{
    pagoda_bench_workload w;
    pagoda_bench_workload_default(&w);
    w.n_requests = 400;
    w.prompt_len = (pagoda_bench_dist){PAGODA_BENCH_UNIFORM, 8, 16};
    w.shared_prefix = 100;
    w.shared_frac = 0.25;
    pagoda_bench_req *r = make(&w, 3, 512);
    const int32_t *prefix = NULL;
    int n_shared = 0;
    for (int i = 0; i < 400; i++) {
        ck_assert_int_ge(r[i].n_prompt, 108);
        ck_assert_int_le(r[i].n_prompt, 116);
        if (!r[i].shared) {
            /* its own tokens: it does not start with the prefix */
            if (prefix) ck_assert(memcmp(r[i].prompt, prefix, sizeof(int32_t) * 100) != 0);
            continue;
        }
        n_shared++;
        if (!prefix) prefix = r[i].prompt;
        else ck_assert_mem_eq(r[i].prompt, prefix, sizeof(int32_t) * 100);
    }
    ck_assert_msg(n_shared > 70 && n_shared < 130, "%d of 400 shared at 0.25", n_shared);
    pagoda_bench_workload_free(r, 400);

    w.shared_frac = 1.0;
    w.n_requests = 10;
    r = make(&w, 3, 512);
    for (int i = 0; i < 10; i++) {
        ck_assert(r[i].shared);
        ck_assert_mem_eq(r[i].prompt, r[0].prompt, sizeof(int32_t) * 100);
        /* the parts after the prefix differ */
        if (i) ck_assert(memcmp(r[i].prompt + 100, r[0].prompt + 100, sizeof(int32_t) * 8) != 0);
    }
    pagoda_bench_workload_free(r, 10);
}
END_TEST

START_TEST(workload_poisson)
{
    pagoda_bench_workload w;
    pagoda_bench_workload_default(&w);
    w.n_requests = 20000;
    w.prompt_len = (pagoda_bench_dist){PAGODA_BENCH_FIXED, 1, 1};
    w.output_len = (pagoda_bench_dist){PAGODA_BENCH_FIXED, 1, 1};
    w.rate = 4.0;
    pagoda_bench_req *r = make(&w, 3, 10);
    ck_assert(r[0].arrival_s == 0);
    int small = 0;
    for (int i = 1; i < w.n_requests; i++) {
        double gap = r[i].arrival_s - r[i - 1].arrival_s;
        ck_assert(gap >= 0);
        small += gap < 0.25; /* P(gap < mean) = 1 - 1/e = 0.632 */
    }
    double mean_gap = r[w.n_requests - 1].arrival_s / (w.n_requests - 1);
    ck_assert_msg(fabs(mean_gap - 0.25) < 0.01, "mean gap %f", mean_gap);
    double frac = (double)small / (w.n_requests - 1);
    ck_assert_msg(fabs(frac - 0.632) < 0.02, "share below the mean %f", frac);
    pagoda_bench_workload_free(r, w.n_requests);
}
END_TEST

START_TEST(workload_refusals)
{
    pagoda_bench_workload w;
    pagoda_bench_workload_default(&w);
    pagoda_bench_req *r = (pagoda_bench_req *)1;
    char err[256];
    ck_assert_int_eq(pagoda_bench_workload_make(&w, 10, 10, &r, err, sizeof err), PAGODA_ERR_INVALID);
    ck_assert_ptr_null(r);
    w.n_requests = 0;
    ck_assert_int_eq(pagoda_bench_workload_make(&w, 3, 10, &r, err, sizeof err), PAGODA_ERR_INVALID);
    pagoda_bench_workload_default(&w);
    w.shared_frac = 1.5;
    ck_assert_int_eq(pagoda_bench_workload_make(&w, 3, 10, &r, err, sizeof err), PAGODA_ERR_INVALID);
    pagoda_bench_workload_default(&w);
    w.concurrency = 0;
    ck_assert_int_eq(pagoda_bench_workload_make(&w, 3, 10, &r, err, sizeof err), PAGODA_ERR_INVALID);
    ck_assert(strstr(err, "--concurrency") != NULL);
}
END_TEST

START_TEST(percentiles)
{
    double v[100];
    for (int i = 0; i < 100; i++) v[i] = 100 - i; /* 100..1, unsorted */
    ck_assert_double_eq_tol(pagoda_bench_percentile(v, 100, 50), 50.5, 1e-9);
    ck_assert_double_eq_tol(pagoda_bench_percentile(v, 100, 90), 90.1, 1e-9);
    ck_assert_double_eq_tol(pagoda_bench_percentile(v, 100, 99), 99.01, 1e-9);
    ck_assert_double_eq_tol(pagoda_bench_percentile(v, 100, 0), 1, 1e-9);
    ck_assert_double_eq_tol(pagoda_bench_percentile(v, 100, 100), 100, 1e-9);
    double one = 7;
    ck_assert_double_eq_tol(pagoda_bench_percentile(&one, 1, 99), 7, 1e-12);
    ck_assert_double_eq_tol(pagoda_bench_percentile(NULL, 0, 50), 0, 1e-12);
    double w[4] = {4, 1, 3, 2};
    pagoda_bench_pcts p;
    pagoda_bench_pcts_of(w, 4, &p);
    ck_assert_double_eq_tol(p.mean, 2.5, 1e-12);
    ck_assert_double_eq_tol(p.p50, 2.5, 1e-12);
    ck_assert_double_eq_tol(p.p90, 3.7, 1e-12);
    ck_assert_double_eq_tol(p.max, 4, 1e-12);
}
END_TEST

/* ---- runs on the bundled model: counts only */

static json_t *run_bench(const char *const *args, int n)
{
    char json[4200];
    snprintf(json, sizeof json, "%s", tu_build("test_bench_out.json"));
    unlink(json);
    char *argv[64];
    int argc = 0;
    argv[argc++] = (char *)"bench";
    argv[argc++] = (char *)"--model";
    argv[argc++] = (char *)tu_src("models/stories260K.gguf");
    argv[argc++] = (char *)"--json";
    argv[argc++] = json;
    for (int i = 0; i < n; i++) argv[argc++] = (char *)args[i];
    argv[argc] = NULL;
    ck_assert_int_eq(pagoda_cmd_bench(argc, argv), 0);
    json_error_t je;
    json_t *root = json_load_file(json, 0, &je);
    ck_assert_msg(root, "%s", je.text);
    unlink(json);
    return root;
}

static json_int_t jint(json_t *o, const char *k)
{
    json_t *x = json_object_get(o, k);
    ck_assert_msg(json_is_integer(x), "%s missing", k);
    return json_integer_value(x);
}

START_TEST(union_length)
{
    /* overlapping, nested, touching, disjoint, unsorted */
    double a[] = {7, 8, 1, 3, 2, 5, 2.5, 4, 5, 6};
    ck_assert_double_eq_tol(pagoda_bench_union_length(a, 5), 6.0, 1e-12);
    double b[] = {0, 1};
    ck_assert_double_eq_tol(pagoda_bench_union_length(b, 1), 1.0, 1e-12);
    ck_assert_double_eq_tol(pagoda_bench_union_length(b, 0), 0.0, 1e-12);
    double c[] = {3, 4, 0, 10, 5, 6};   /* one holds the others */
    ck_assert_double_eq_tol(pagoda_bench_union_length(c, 3), 10.0, 1e-12);
}
END_TEST

START_TEST(bench_run_counts)
{
    static const char *const args[] = {"--requests", "6", "--prompt-len", "10-20", "--output-len",
                                       "5", "--concurrency", "3", "--set", "engine.kv_cache_tokens=2048"};
    json_t *root = run_bench(args, 10);
    json_t *r = json_array_get(json_object_get(root, "results"), 0);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(jint(r, "requests_ok"), 6);
    ck_assert_int_eq(jint(r, "requests_failed"), 0);
    ck_assert_int_eq(jint(r, "generated_tokens"), 30); /* 6 x 5, exact with ignore_eos */
    json_int_t pt = jint(r, "prompt_tokens");
    ck_assert(pt >= 60 && pt <= 120);
    ck_assert_int_le(jint(r, "running_peak"), 3); /* the closed loop holds 3 in flight */
    ck_assert_int_ge(jint(r, "running_peak"), 1);
    ck_assert_int_eq(jint(r, "kv_blocks"), 128);
    ck_assert_int_eq(jint(r, "preemptions"), 0);
    json_decref(root);
}
END_TEST

/* `pagoda bench` says what it is doing on stderr (issue 23: two minutes
 * with no line): each round and side of a comparison, each phase, and the
 * workload's requests done, up to all of them. */
START_TEST(bench_progress_lines)
{
    char path[4200];
    snprintf(path, sizeof path, "%s", tu_build("test_bench_stderr.txt"));
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_ge(dup2(fd, STDERR_FILENO), 0);
    close(fd);
    static const char *const args[] = {"--compare", "sched", "--repeat", "2", "--requests", "8",
                                       "--concurrency", "4", "--prompt-len", "8", "--output-len", "4"};
    json_t *root = run_bench(args, 12);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    json_decref(root);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    unlink(path);
    const char *want[] = {
        "bench: round 1 of 2, side continuous\n", "bench: [continuous] warm-up\n",
        "bench: [continuous] workload: 8 requests\n",
        "bench: [continuous] workload: 8 of 8 requests done\n",
        "bench: round 1 of 2, side static\n", "bench: round 2 of 2, side continuous\n",
        "bench: round 2 of 2, side static\n", "bench: [static] workload: 8 of 8 requests done\n",
    };
    const char *at = text;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *hit = strstr(at, want[i]);
        ck_assert_msg(hit, "'%s' missing (in this order) from:\n%s", want[i], text);
        at = hit + strlen(want[i]);
    }
}
END_TEST

START_TEST(bench_compare_kv_counts)
{
    /* same pool (4096 tokens = 256 blocks); contiguous reserves the model's
     * whole 512-token context per sequence, so at most 8 run; paged holds
     * 64 short ones. */
    static const char *const args[] = {"--compare", "kv", "--requests", "24", "--concurrency", "24",
                                       "--prompt-len", "8-16", "--output-len", "4-8"};
    json_t *root = run_bench(args, 10);
    json_t *res = json_object_get(root, "results");
    ck_assert_int_eq((int)json_array_size(res), 2);
    json_t *paged = json_array_get(res, 0), *contig = json_array_get(res, 1);
    ck_assert_str_eq(json_string_value(json_object_get(paged, "label")), "paged");
    ck_assert_str_eq(json_string_value(json_object_get(contig, "label")), "contiguous");
    ck_assert_int_eq(jint(paged, "requests_ok"), 24);
    ck_assert_int_eq(jint(contig, "requests_ok"), 24);
    ck_assert_int_eq(jint(paged, "kv_blocks"), jint(contig, "kv_blocks"));
    ck_assert_int_le(jint(contig, "running_peak"), 8);
    ck_assert_int_gt(jint(paged, "running_peak"), 8);
    ck_assert_int_eq(jint(paged, "generated_tokens"), jint(contig, "generated_tokens"));
    json_decref(root);
}
END_TEST

START_TEST(bench_serve_counts)
{
    /* the same workload through the in-process HTTP frontend: token counts
     * come from the streamed usage chunk */
    static const char *const args[] = {"--serve", "--requests", "5", "--prompt-len", "6-12",
                                       "--output-len", "7", "--concurrency", "2"};
    json_t *root = run_bench(args, 9);
    json_t *r = json_array_get(json_object_get(root, "results"), 0);
    ck_assert_int_eq(jint(r, "requests_ok"), 5);
    ck_assert_int_eq(jint(r, "requests_failed"), 0);
    ck_assert_int_eq(jint(r, "generated_tokens"), 35);
    ck_assert_int_le(jint(r, "running_peak"), 2);
    json_decref(root);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("bench");
    TCase *tc = tcase_create("workload");
    tcase_add_test(tc, dist_parse);
    tcase_add_test(tc, dist_draw_range);
    tcase_add_test(tc, rng_deterministic);
    tcase_add_test(tc, workload_deterministic);
    tcase_add_test(tc, workload_shared_prefix);
    tcase_add_test(tc, workload_poisson);
    tcase_add_test(tc, workload_refusals);
    tcase_add_test(tc, percentiles);
    tcase_add_test(tc, union_length);
    suite_add_tcase(s, tc);
    TCase *tr = tcase_create("runs");
    tcase_set_timeout(tr, 600);
    tcase_add_test(tr, bench_run_counts);
    tcase_add_test(tr, bench_progress_lines);
    tcase_add_test(tr, bench_compare_kv_counts);
    tcase_add_test(tr, bench_serve_counts);
    suite_add_tcase(s, tr);
    return s;
}

int main(void) { return tu_run(suite()); }
