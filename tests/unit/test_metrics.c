/* test_metrics.c: the Prometheus registry (core/metrics.c): counters,
 * histogram buckets, engine gauges, extra gauges, and `promtool check
 * metrics` on the rendered text when promtool is installed. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "metrics.h"
#include "testutil.h"

/* The value on the line that starts with `series ` (exact series text). */
static double value_of(const char *text, const char *series)
{
    size_t n = strlen(series);
    const char *p = text;
    while (p && *p) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ') return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        if (p) p++;
    }
    ck_abort_msg("series %s not found", series);
    return -1;
}

static int has_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; p && *p;) {
        if (strncmp(p, line, n) == 0 && (p[n] == '\n' || p[n] == 0)) return 1;
        p = strchr(p, '\n');
        if (p) p++;
    }
    return 0;
}

START_TEST(test_counters_and_finished)
{
    pagoda_metrics *m = pagoda_metrics_new();
    ck_assert_ptr_nonnull(m);
    pagoda_metrics_count(m, PAGODA_COUNTER_PROMPT_TOKENS, 10);
    pagoda_metrics_count(m, PAGODA_COUNTER_PROMPT_TOKENS, 5);
    pagoda_metrics_count(m, PAGODA_COUNTER_PROMPT_TOKENS, -3); /* ignored */
    pagoda_metrics_count(m, PAGODA_COUNTER_REQUESTS_REJECTED, 2);
    pagoda_metrics_finished(m, PAGODA_FINISH_STOP);
    pagoda_metrics_finished(m, PAGODA_FINISH_STOP);
    pagoda_metrics_finished(m, PAGODA_FINISH_LENGTH);
    pagoda_metrics_finished(m, 99); /* ignored */
    char *t = pagoda_metrics_render(m, NULL, NULL, 0);
    ck_assert_ptr_nonnull(t);
    ck_assert_double_eq(value_of(t, "pagoda_prompt_tokens_total"), 15);
    ck_assert_double_eq(value_of(t, "pagoda_requests_rejected_total"), 2);
    ck_assert_double_eq(value_of(t, "pagoda_generation_tokens_total"), 0);
    ck_assert_double_eq(value_of(t, "pagoda_request_success_total{finished_reason=\"stop\"}"), 2);
    ck_assert_double_eq(value_of(t, "pagoda_request_success_total{finished_reason=\"length\"}"), 1);
    ck_assert_double_eq(value_of(t, "pagoda_request_success_total{finished_reason=\"cancelled\"}"), 0);
    ck_assert(has_line(t, "# TYPE pagoda_prompt_tokens_total counter"));
    /* no engine gauges without stats */
    ck_assert_ptr_null(strstr(t, "pagoda_num_requests_running"));
    free(t);
    pagoda_metrics_free(m);
}
END_TEST

START_TEST(test_histogram_buckets)
{
    pagoda_metrics *m = pagoda_metrics_new();
    pagoda_metrics_observe(m, PAGODA_HIST_TTFT, 0.001);  /* on the first bound: le="0.001" */
    pagoda_metrics_observe(m, PAGODA_HIST_TTFT, 0.05);   /* le="0.06" */
    pagoda_metrics_observe(m, PAGODA_HIST_TTFT, 10000);  /* only +Inf */
    pagoda_metrics_observe(m, PAGODA_HIST_TTFT, -1);     /* ignored */
    pagoda_metrics_observe(m, PAGODA_HIST_E2E, 1.25);
    char *t = pagoda_metrics_render(m, NULL, NULL, 0);
    ck_assert_ptr_nonnull(t);
    const char *n = "pagoda_time_to_first_token_seconds";
    char s[128];
    snprintf(s, sizeof s, "%s_bucket{le=\"0.001\"}", n);
    ck_assert_double_eq(value_of(t, s), 1);
    snprintf(s, sizeof s, "%s_bucket{le=\"0.04\"}", n);
    ck_assert_double_eq(value_of(t, s), 1);
    snprintf(s, sizeof s, "%s_bucket{le=\"0.06\"}", n);
    ck_assert_double_eq(value_of(t, s), 2);
    snprintf(s, sizeof s, "%s_bucket{le=\"2560\"}", n);
    ck_assert_double_eq(value_of(t, s), 2);
    snprintf(s, sizeof s, "%s_bucket{le=\"+Inf\"}", n);
    ck_assert_double_eq(value_of(t, s), 3);
    snprintf(s, sizeof s, "%s_count", n);
    ck_assert_double_eq(value_of(t, s), 3);
    snprintf(s, sizeof s, "%s_sum", n);
    ck_assert_double_eq_tol(value_of(t, s), 10000.051, 1e-9);
    ck_assert_double_eq(value_of(t, "pagoda_e2e_request_latency_seconds_bucket{le=\"1.5\"}"), 1);
    ck_assert_double_eq(value_of(t, "pagoda_e2e_request_latency_seconds_bucket{le=\"1\"}"), 0);
    ck_assert_double_eq(value_of(t, "pagoda_inter_token_latency_seconds_count"), 0);
    ck_assert(has_line(t, "# TYPE pagoda_request_queue_time_seconds histogram"));
    free(t);
    pagoda_metrics_free(m);
}
END_TEST

static pagoda_engine_stats sample_stats(void)
{
    pagoda_engine_stats st = {.struct_size = sizeof st};
    st.running = 3;
    st.waiting = 7;
    st.kv_total_blocks = 200;
    st.kv_used_blocks = 50;
    st.kv_free_blocks = 150;
    st.kv_cached_blocks = 12;
    st.kv_block_size = 16;
    st.prefix_query_tokens = 1000;
    st.prefix_hit_tokens = 400;
    st.prompt_tokens_total = 123;
    st.generation_tokens_total = 456;
    st.preemptions_total = 2;
    st.steps_total = 99;
    st.ready = true;
    return st;
}

START_TEST(test_engine_gauges_and_extra)
{
    pagoda_metrics *m = pagoda_metrics_new();
    /* counted value larger than the engine's: the larger one wins */
    pagoda_metrics_count(m, PAGODA_COUNTER_GENERATION_TOKENS, 1000);
    pagoda_engine_stats st = sample_stats();
    pagoda_metric_gauge extra[] = {
        {"pagoda_memory_weights_bytes", "Bytes of model weights.", 1048576},
        {"pagoda_memory_kv_pool_bytes", "Bytes of the KV pool\nsecond line", 2e9},
        {"bad name", "skipped", 1},
        {"9starts_with_digit", NULL, 1},
    };
    char *t = pagoda_metrics_render(m, &st, extra, 4);
    ck_assert_ptr_nonnull(t);
    ck_assert_double_eq(value_of(t, "pagoda_num_requests_running"), 3);
    ck_assert_double_eq(value_of(t, "pagoda_num_requests_waiting"), 7);
    ck_assert_double_eq_tol(value_of(t, "pagoda_kv_cache_usage_perc"), 0.25, 1e-12);
    ck_assert_double_eq(value_of(t, "pagoda_kv_cache_num_blocks"), 200);
    ck_assert_double_eq(value_of(t, "pagoda_kv_cache_blocks_used"), 50);
    ck_assert_double_eq(value_of(t, "pagoda_kv_cache_blocks_free"), 150);
    ck_assert_double_eq(value_of(t, "pagoda_kv_cache_blocks_cached"), 12);
    ck_assert_double_eq(value_of(t, "pagoda_prefix_cache_queries_total"), 1000);
    ck_assert_double_eq(value_of(t, "pagoda_prefix_cache_hits_total"), 400);
    ck_assert_double_eq(value_of(t, "pagoda_prompt_tokens_total"), 123);
    ck_assert_double_eq(value_of(t, "pagoda_generation_tokens_total"), 1000);
    ck_assert_double_eq(value_of(t, "pagoda_num_preemptions_total"), 2);
    ck_assert_double_eq(value_of(t, "pagoda_engine_steps_total"), 99);
    ck_assert_double_eq(value_of(t, "pagoda_engine_ready"), 1);
    ck_assert_double_eq(value_of(t, "pagoda_memory_weights_bytes"), 1048576);
    ck_assert_double_eq(value_of(t, "pagoda_memory_kv_pool_bytes"), 2e9);
    ck_assert(has_line(t, "# HELP pagoda_memory_kv_pool_bytes Bytes of the KV pool\\nsecond line"));
    ck_assert_ptr_null(strstr(t, "bad name"));
    ck_assert_ptr_null(strstr(t, "9starts"));
    free(t);
    pagoda_metrics_free(m);
}
END_TEST

/* Zero total blocks must not divide by zero. */
START_TEST(test_empty_pool)
{
    pagoda_metrics *m = pagoda_metrics_new();
    pagoda_engine_stats st = {.struct_size = sizeof st};
    char *t = pagoda_metrics_render(m, &st, NULL, 0);
    ck_assert_double_eq(value_of(t, "pagoda_kv_cache_usage_perc"), 0);
    ck_assert_double_eq(value_of(t, "pagoda_engine_ready"), 0);
    free(t);
    pagoda_metrics_free(m);
}
END_TEST

static void *hammer(void *arg)
{
    pagoda_metrics *m = arg;
    for (int i = 0; i < 10000; i++) {
        pagoda_metrics_count(m, PAGODA_COUNTER_GENERATION_TOKENS, 1);
        pagoda_metrics_observe(m, PAGODA_HIST_ITL, 0.02);
    }
    return NULL;
}

START_TEST(test_threads)
{
    pagoda_metrics *m = pagoda_metrics_new();
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, hammer, m);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    char *t = pagoda_metrics_render(m, NULL, NULL, 0);
    ck_assert_double_eq(value_of(t, "pagoda_generation_tokens_total"), 40000);
    ck_assert_double_eq(value_of(t, "pagoda_inter_token_latency_seconds_count"), 40000);
    ck_assert_double_eq(value_of(t, "pagoda_inter_token_latency_seconds_bucket{le=\"0.01\"}"), 0);
    ck_assert_double_eq(value_of(t, "pagoda_inter_token_latency_seconds_bucket{le=\"0.025\"}"), 40000);
    free(t);
    pagoda_metrics_free(m);
}
END_TEST

static const char *find_promtool(void)
{
    static const char *cands[] = {"/usr/bin/promtool", "/usr/local/bin/promtool", NULL};
    for (int i = 0; cands[i]; i++)
        if (access(cands[i], X_OK) == 0) return cands[i];
    return NULL;
}

START_TEST(test_promtool)
{
    const char *pt = find_promtool();
    if (!pt) {
        fprintf(stderr, "test_metrics: promtool not found, skipping `promtool check metrics` "
                        "(apt-get install prometheus)\n");
        return;
    }
    pagoda_metrics *m = pagoda_metrics_new();
    pagoda_metrics_observe(m, PAGODA_HIST_TTFT, 0.3);
    pagoda_metrics_observe(m, PAGODA_HIST_QUEUE, 0.01);
    pagoda_metrics_finished(m, PAGODA_FINISH_CANCELLED);
    pagoda_engine_stats st = sample_stats();
    pagoda_metric_gauge extra[] = {{"pagoda_memory_weights_bytes", "Bytes of model weights.", 5}};
    char *t = pagoda_metrics_render(m, &st, extra, 1);
    ck_assert_ptr_nonnull(t);
    char path[] = "/tmp/pagoda_metrics_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, t, strlen(t)), (ssize_t)strlen(t));
    close(fd);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s check metrics < %s 2>&1", pt, path);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char out[4096] = {0};
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int rc = pclose(p);
    unlink(path);
    /* Any lint finding is printed; the exposition must be clean. */
    ck_assert_msg(rc == 0 && n == 0, "promtool rc=%d output:\n%s", rc, out);
    free(t);
    pagoda_metrics_free(m);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_counters_and_finished);
    tcase_add_test(tc, test_histogram_buckets);
    tcase_add_test(tc, test_engine_gauges_and_extra);
    tcase_add_test(tc, test_empty_pool);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_promtool);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
