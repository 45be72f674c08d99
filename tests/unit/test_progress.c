/* test_progress.c: the start-up progress (core/progress.c): the bar redrawn
 * in place on a terminal, one log line per quarter otherwise, and the
 * weights prefault reading every page. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "progress.h"
#include "testutil.h"

static char *slurp(FILE *f)
{
    fflush(f);
    long n = ftell(f);
    rewind(f);
    char *s = calloc(1, (size_t)n + 1);
    ck_assert_int_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    return s;
}

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

START_TEST(test_bar)
{
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    pagoda_progress p;
    pagoda_progress_init(&p, "loading weights", 1000, f, 1);
    ck_assert(p.tty);
    pagoda_progress_set(&p, 0);    /* 0% */
    pagoda_progress_set(&p, 5);    /* still 0%: no redraw */
    pagoda_progress_set(&p, 500);  /* 50% */
    pagoda_progress_set(&p, 400);  /* backwards: no redraw */
    pagoda_progress_set(&p, 5000); /* clamped: 100% */
    pagoda_progress_finish(&p);    /* already at 100%: only the newline */
    char *s = slurp(f);
    ck_assert_int_eq(count(s, "\r"), 3);
    ck_assert_ptr_nonnull(strstr(s, "\rloading weights [..............................]   0% 0.0/0.0 MiB"));
    ck_assert_ptr_nonnull(strstr(s, "[###############...............]  50%"));
    ck_assert_ptr_nonnull(strstr(s, "[##############################] 100%"));
    ck_assert_int_eq(s[strlen(s) - 1], '\n');
    ck_assert_int_eq(count(s, "\n"), 1);
    free(s);
    fclose(f);
}
END_TEST

START_TEST(test_log_lines)
{
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    int old = pagoda_log_get_level();
    pagoda_log_set_stream(f);
    pagoda_log_set_level(PAGODA_LOG_INFO);
    pagoda_progress p;
    pagoda_progress_init(&p, "loading weights", 1000, NULL, 0);
    ck_assert(!p.tty);
    pagoda_progress_set(&p, 100); /* 10%: no line yet */
    pagoda_progress_set(&p, 260); /* 26%: first quarter passed */
    pagoda_progress_set(&p, 500); /* 50% */
    pagoda_progress_set(&p, 510); /* same quarter */
    pagoda_progress_set(&p, 999); /* 99% */
    pagoda_progress_finish(&p);   /* 100% */
    pagoda_log_set_stream(NULL);
    pagoda_log_set_level(old);
    char *s = slurp(f);
    ck_assert_int_eq(count(s, "\n"), 4);
    ck_assert_int_eq(count(s, "\r"), 0);
    ck_assert_ptr_nonnull(strstr(s, "loading weights: 26%"));
    ck_assert_ptr_nonnull(strstr(s, "loading weights: 50%"));
    ck_assert_ptr_nonnull(strstr(s, "loading weights: 99%"));
    ck_assert_ptr_nonnull(strstr(s, "loading weights: 100%"));
    ck_assert_ptr_null(strstr(s, "10%"));
    free(s);
    fclose(f);
}
END_TEST

START_TEST(test_prefault)
{
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = pg > 0 ? (size_t)pg : 4096;
    size_t size = page * 5 + 123;
    unsigned char *b = calloc(1, size);
    ck_assert_ptr_nonnull(b);
    uint64_t want = 0;
    for (size_t i = 0; i < size; i += page) { b[i] = (unsigned char)(i / page + 3); want += b[i]; }
    b[1] = 200; /* not a page start: not read */
    int old = pagoda_log_get_level();
    pagoda_log_set_level(PAGODA_LOG_ERROR); /* quiet: no bar, no lines */
    ck_assert_uint_eq(pagoda_prefault_weights(b, size, "test"), want);
    ck_assert_uint_eq(pagoda_prefault_weights(b, 0, "empty"), 0);
    pagoda_log_set_level(old);
    free(b);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("progress");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_bar);
    tcase_add_test(tc, test_log_lines);
    tcase_add_test(tc, test_prefault);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
