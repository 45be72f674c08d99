/* test_stdin_frontend.c: the stdin frontend plugin (plugins/frontend/stdin.c)
 * against the fake engine host: plain, JSON and malformed lines, text
 * format, queue-full retry, submission without waiting, chat mode, chat's
 * Ctrl-C (interrupt()), stop(). */
#include <dlfcn.h>
#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_engine.h"
#include "plugin_testhost.h"
#include "testutil.h"

typedef struct fe_run {
    fake_engine *f;
    void *lib;
    const pagoda_plugin_desc *desc;
    const pagoda_frontend_ops *ops;
    void *ctx;
    char dir[64], in[128], out[128];
    fake_kv cfg[8];
    int n_cfg;
    int rc;
    pthread_t th;
} fe_run;

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char *buf = calloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* Sets up the fake host and the plugin; input text written to a file unless NULL. */
static void setup(fe_run *r, const char *input, const fake_kv *extra, int n_extra, int step_us)
{
    memset(r, 0, sizeof *r);
    snprintf(r->dir, sizeof r->dir, "/tmp/pagoda_stdin_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(r->dir));
    snprintf(r->in, sizeof r->in, "%s/in.txt", r->dir);
    snprintf(r->out, sizeof r->out, "%s/out.txt", r->dir);
    if (input) {
        write_file(r->in, input);
        r->cfg[r->n_cfg++] = (fake_kv){"input", r->in};
    }
    r->cfg[r->n_cfg++] = (fake_kv){"output", r->out};
    for (int i = 0; i < n_extra; i++) r->cfg[r->n_cfg++] = extra[i];
    r->f = fake_engine_new(r->cfg, r->n_cfg);
    r->f->step_us = step_us;
    th_plugin p = th_load("frontend", "stdin"); /* asserts its name, kind and ABI */
    r->lib = p.dl;
    r->desc = p.desc;
    r->ops = r->desc->ops;
    char err[256] = {0};
    ck_assert_int_eq(r->desc->create(&r->f->host, &r->ctx, err, sizeof err), PAGODA_OK);
}

static void teardown(fe_run *r)
{
    ck_assert_int_eq(fake_live(r->f), 0);
    r->desc->destroy(r->ctx);
    fake_engine_free(r->f); /* joins the engine thread, which may still be in plugin code */
    dlclose(r->lib);
    unlink(r->in);
    unlink(r->out);
    rmdir(r->dir);
}

/* Output lines parsed as JSON, looked up by their "id" (a string or an integer). */
static int parse_lines(const char *text, json_t **lines, int cap)
{
    int n = 0;
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        ck_assert_msg(nl != NULL, "output does not end with a newline");
        json_error_t e;
        json_t *j = json_loadb(p, (size_t)(nl - p), 0, &e);
        ck_assert_msg(j != NULL, "output line is not JSON: %.*s", (int)(nl - p), p);
        ck_assert_int_lt(n, cap);
        lines[n++] = j;
        p = nl + 1;
    }
    return n;
}

static json_t *by_id(json_t **lines, int n, json_t *want)
{
    for (int i = 0; i < n; i++)
        if (json_equal(json_object_get(lines[i], "id"), want)) return lines[i];
    return NULL;
}

static json_t *by_int(json_t **l, int n, long id)
{
    json_t *k = json_integer(id);
    json_t *r = by_id(l, n, k);
    json_decref(k);
    ck_assert_msg(r != NULL, "no output with id %ld", id);
    return r;
}

static json_t *by_str(json_t **l, int n, const char *id)
{
    json_t *k = json_string(id);
    json_t *r = by_id(l, n, k);
    json_decref(k);
    ck_assert_msg(r != NULL, "no output with id %s", id);
    return r;
}

static const char *sget(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static long long iget(json_t *o, const char *a, const char *b)
{
    json_t *v = json_object_get(o, a);
    if (b) v = json_object_get(v, b);
    ck_assert_msg(json_is_integer(v), "%s.%s is not an integer", a, b ? b : "");
    return json_integer_value(v);
}

START_TEST(test_mixed_lines)
{
    fe_run r;
    const char *input =
        "hello world\n"                                                      /* 1 */
        "{\"prompt\":\"a b c\",\"max_tokens\":2,\"id\":\"x1\",\"temperature\":0.3,\"seed\":5,"
        "\"stop\":[\"zz\"],\"ignore_eos\":true,\"priority\":2,\"cache_salt\":\"s\",\"top_k\":4,"
        "\"top_p\":0.5,\"min_p\":0.05}\n"                                    /* 2 */
        "{bad json\n"                                                        /* 3 */
        "\n"                                                                 /* 4: skipped */
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hey\"}],\"id\":\"c\"}\n" /* 5 */
        "{\"prompt\":\"\"}\n"                                                /* 6 */
        "{\"prompt\":5}\n"                                                   /* 7 */
        "please FAIL\r\n"                                                    /* 8 */
        "{\"prompt\":\"t\",\"temperature\":9}\n"                             /* 9 */
        "last line without newline";                                         /* 10 */
    setup(&r, input, NULL, 0, 1000);
    ck_assert_int_eq(r.ops->run(r.ctx), PAGODA_OK);
    char *out = read_file(r.out);
    json_t *l[32];
    int n = parse_lines(out, l, 32);
    ck_assert_int_eq(n, 9);

    json_t *o = by_int(l, n, 1);
    ck_assert_str_eq(sget(o, "text"), "hello world");
    ck_assert_str_eq(sget(o, "finish_reason"), "stop");
    ck_assert_int_eq(iget(o, "usage", "prompt_tokens"), 3);
    ck_assert_int_eq(iget(o, "usage", "completion_tokens"), 2);
    ck_assert_int_eq(iget(o, "usage", "cached_tokens"), 0);
    ck_assert(json_is_number(json_object_get(json_object_get(o, "timings"), "queue_ms")));
    ck_assert(json_is_number(json_object_get(json_object_get(o, "timings"), "ttft_ms")));
    ck_assert_double_eq_tol(json_number_value(json_object_get(json_object_get(o, "timings"), "total_ms")), 3, 1e-9);

    o = by_str(l, n, "x1");
    ck_assert_str_eq(sget(o, "text"), "a b");
    ck_assert_str_eq(sget(o, "finish_reason"), "length");

    o = by_int(l, n, 3);
    ck_assert_ptr_nonnull(strstr(sget(o, "error"), "malformed JSON"));

    o = by_str(l, n, "c");
    ck_assert_str_eq(sget(o, "text"), "<|user|>hey <|assistant|>");

    o = by_int(l, n, 6);
    ck_assert_str_eq(sget(o, "text"), "");
    ck_assert_int_eq(iget(o, "usage", "prompt_tokens"), 1); /* BOS alone */

    o = by_int(l, n, 7);
    ck_assert_ptr_nonnull(strstr(sget(o, "error"), "'prompt' must be a string"));

    o = by_int(l, n, 8);
    ck_assert_str_eq(sget(o, "finish_reason"), "error");
    ck_assert_str_eq(sget(o, "error"), "fake failure");

    o = by_int(l, n, 9);
    ck_assert_ptr_nonnull(strstr(sget(o, "error"), "temperature"));

    o = by_int(l, n, 10);
    ck_assert_str_eq(sget(o, "text"), "last line without newline");

    /* what reached the engine: lines 1, 2, 5, 6, 8, 10 */
    fake_engine *f = r.f;
    ck_assert_int_eq(f->n_log, 6);
    fake_logged *x1 = NULL, *chat = NULL, *empty = NULL;
    for (int i = 0; i < f->n_log; i++) {
        if (!strcmp(f->log[i].prompt, "a b c")) x1 = &f->log[i];
        if (f->log[i].req.parse_special) chat = &f->log[i];
        if (!strcmp(f->log[i].prompt, "")) empty = &f->log[i];
    }
    ck_assert_ptr_nonnull(x1);
    ck_assert_int_eq(x1->req.max_tokens, 2);
    ck_assert_float_eq_tol(x1->req.temperature, 0.3f, 1e-6);
    ck_assert(x1->req.has_seed);
    ck_assert_uint_eq(x1->req.seed, 5);
    ck_assert_int_eq(x1->n_stop, 1);
    ck_assert_str_eq(x1->stop[0], "zz");
    ck_assert(x1->req.ignore_eos);
    ck_assert_int_eq(x1->req.priority, 2);
    ck_assert_str_eq(x1->cache_salt, "s");
    ck_assert_int_eq(x1->req.top_k, 4);
    ck_assert_float_eq_tol(x1->req.top_p, 0.5f, 1e-6);
    ck_assert_float_eq_tol(x1->req.min_p, 0.05f, 1e-6);
    ck_assert_ptr_nonnull(chat);
    ck_assert(!chat->req.add_special);
    ck_assert_int_eq(chat->req.n_stop_token_ids, 1);
    ck_assert_ptr_nonnull(empty);
    ck_assert(empty->req.add_special);

    for (int i = 0; i < n; i++) json_decref(l[i]);
    free(out);
    teardown(&r);
}
END_TEST

/* Every line is submitted before the first one finishes (batching). */
START_TEST(test_no_waiting)
{
    fe_run r;
    setup(&r, "one forever\ntwo forever\nthree forever\n", (fake_kv[]){{"max_tokens", "30"}}, 1, 1000);
    /* The engine makes no token until all three lines were submitted, or 10 s
     * passed: a frontend that waits for one answer before it reads the next
     * line gets its first answer only after the 10 s, and the third submit
     * then sees a FINAL. (It was a 20 ms step race, which a loaded machine
     * running the sanitizer builds could lose.) */
    r.f->hold_submits = 3;
    r.f->hold_ms = 10000;
    ck_assert_int_eq(r.ops->run(r.ctx), PAGODA_OK);
    ck_assert_int_eq(r.f->n_log, 3);
    ck_assert_int_eq(r.f->log[2].finals_at_submit, 0);
    ck_assert_int_eq(r.f->log[0].req.max_tokens, 30); /* the section's default */
    char *out = read_file(r.out);
    json_t *l[8];
    int n = parse_lines(out, l, 8);
    ck_assert_int_eq(n, 3);
    for (int i = 0; i < n; i++) {
        ck_assert_str_eq(sget(l[i], "finish_reason"), "length");
        ck_assert_int_eq(iget(l[i], "usage", "completion_tokens"), 30);
        json_decref(l[i]);
    }
    free(out);
    teardown(&r);
}
END_TEST

START_TEST(test_text_format_and_queue_full)
{
    fe_run r;
    setup(&r, "a b\nc\n{\"prompt\":\"d e f\"}\n", (fake_kv[]){{"format", "text"}}, 1, 1000);
    r.f->nospace_left = 3; /* the first three submits find the queue full */
    ck_assert_int_eq(r.ops->run(r.ctx), PAGODA_OK);
    char *out = read_file(r.out);
    /* order is by completion; compare as a set */
    ck_assert_ptr_nonnull(strstr(out, "a b\n"));
    ck_assert_ptr_nonnull(strstr(out, "c\n"));
    ck_assert_ptr_nonnull(strstr(out, "d e f\n"));
    ck_assert_int_eq(strlen(out), strlen("a b\nc\nd e f\n"));
    ck_assert_int_eq(r.f->n_log, 3);
    ck_assert_int_eq(r.f->nospace_left, 0);
    free(out);
    teardown(&r);
}
END_TEST

START_TEST(test_chat_mode)
{
    fe_run r;
    setup(&r, "hi\nthere\n", (fake_kv[]){{"mode", "chat"}}, 1, 1000);
    ck_assert_int_eq(r.ops->run(r.ctx), PAGODA_OK);
    char *out = read_file(r.out);
    const char *reply1 = "<|user|>hi <|assistant|>";
    char want_render[512];
    snprintf(want_render, sizeof want_render, "<|user|>hi\n<|assistant|>%s\n<|user|>there\n<|assistant|>", reply1);
    ck_assert_str_eq(r.f->last_render, want_render);
    ck_assert_int_eq(r.f->n_log, 2);
    ck_assert(r.f->log[1].req.parse_special);
    /* second reply echoes the whole second render */
    char want_out[1024];
    snprintf(want_out, sizeof want_out, "%s\n%s\n", reply1,
             "<|user|>hi <|assistant|><|user|>hi <|assistant|> <|user|>there <|assistant|>");
    ck_assert_str_eq(out, want_out);
    free(out);
    teardown(&r);
}
END_TEST

static void *run_bg(void *arg)
{
    fe_run *r = arg;
    r->rc = r->ops->run(r->ctx);
    return NULL;
}

/* stop() while reading an open pipe with a request in flight. */
START_TEST(test_stop)
{
    fe_run r;
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    char inpath[64];
    snprintf(inpath, sizeof inpath, "/dev/fd/%d", pfd[0]);
    fake_kv extra[] = {{"input", inpath}};
    setup(&r, NULL, extra, 1, 5000);
    pthread_create(&r.th, NULL, run_bg, &r);
    const char *line = "{\"prompt\":\"go forever\",\"max_tokens\":100,\"id\":\"s\"}\n";
    ck_assert_int_eq(write(pfd[1], line, strlen(line)), (ssize_t)strlen(line));
    /* at least 2: the engine thread may emit another before this thread wakes */
    ck_assert_int_ge(fake_wait_count(r.f, &r.f->n_tokens_emitted, 2, 30), 2);
    r.ops->stop(r.ctx);
    pthread_join(r.th, NULL);
    ck_assert_int_eq(r.rc, PAGODA_OK);
    ck_assert_int_eq(r.f->n_cancel, 1);
    char *out = read_file(r.out);
    json_t *l[4];
    int n = parse_lines(out, l, 4);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(sget(l[0], "id"), "s");
    ck_assert_str_eq(sget(l[0], "finish_reason"), "cancelled");
    json_decref(l[0]);
    free(out);
    close(pfd[0]);
    close(pfd[1]);
    teardown(&r);
}
END_TEST

/* Terminal chat's Ctrl-C (interrupt(), from the core's signal watcher
 * thread): while a reply streams it is taken, the reply is cancelled and
 * the chat goes on with that partial reply in the conversation; a second
 * one before the reply has stopped is left to the core (quit). */
START_TEST(test_chat_interrupt)
{
    fe_run r;
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    char inpath[64];
    snprintf(inpath, sizeof inpath, "/dev/fd/%d", pfd[0]);
    /* replies that outlast any host's delay: only the interrupt ends them */
    fake_kv extra[] = {{"input", inpath}, {"mode", "chat"}, {"max_tokens", "100000000"}};
    setup(&r, NULL, extra, 3, 2000);
    r.f->n_ctx = 1 << 30;
    ck_assert_ptr_nonnull(r.ops->interrupt);
    ck_assert_int_eq(r.ops->interrupt(r.ctx), 0); /* no reply streaming: the core stops */
    pthread_create(&r.th, NULL, run_bg, &r);
    const char *lines[] = {"tell forever\n", "again forever\n", "third forever\n"};
    int tokens = 0;
    for (int turn = 0; turn < 3; turn++) {
        ck_assert_int_eq(write(pfd[1], lines[turn], strlen(lines[turn])), (ssize_t)strlen(lines[turn]));
        ck_assert_int_eq(fake_wait_count(r.f, &r.f->n_log, turn + 1, 30), turn + 1);
        tokens = fake_wait_count(r.f, &r.f->n_tokens_emitted, tokens + 3, 30);
        ck_assert_int_eq(r.ops->interrupt(r.ctx), 1); /* the reply, not pagoda */
        if (turn < 2) {
            ck_assert_int_eq(fake_wait_count(r.f, &r.f->n_final, turn + 1, 30), turn + 1);
        } else {
            /* a second Ctrl-C before the reply stopped: the core's to take */
            ck_assert_int_eq(r.ops->interrupt(r.ctx), 0);
            r.ops->stop(r.ctx);
        }
    }
    pthread_join(r.th, NULL);
    ck_assert_int_eq(r.rc, PAGODA_OK);
    ck_assert_int_eq(r.f->n_cancel, 3);
    /* the third turn was rendered from the whole conversation, the stopped
     * replies included */
    const char *render = r.f->last_render;
    const char *u1 = strstr(render, "<|user|>tell forever\n<|assistant|>");
    const char *u2 = strstr(render, "<|user|>again forever\n<|assistant|>");
    const char *u3 = strstr(render, "<|user|>third forever\n<|assistant|>");
    ck_assert_msg(u1 && u2 && u3 && u1 < u2 && u2 < u3, "render: %s", render);
    ck_assert_msg(u2 - u1 > (ptrdiff_t)strlen("<|user|>tell forever\n<|assistant|>\n"),
                  "the first reply is not in the conversation: %s", render);
    char *out = read_file(r.out);
    const char *a = strstr(out, "[reply stopped]\n");
    ck_assert_msg(a && strstr(a + 1, "[reply stopped]\n"), "output: %s", out);
    free(out);
    close(pfd[0]);
    close(pfd[1]);
    teardown(&r);
}
END_TEST

START_TEST(test_bad_config)
{
    fe_run r;
    setup(&r, "", NULL, 0, 1000);
    r.desc->destroy(r.ctx);
    fake_kv bad[] = {{"format", "xml"}};
    fake_engine *f = fake_engine_new(bad, 1);
    void *ctx = NULL;
    char err[256] = {0};
    ck_assert_int_eq(r.desc->create(&f->host, &ctx, err, sizeof err), PAGODA_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err, "format"));
    fake_engine_free(f);
    /* a missing input file is an error from run(), not a crash */
    fake_kv missing[] = {{"input", "/nonexistent/pagoda/in.txt"}};
    f = fake_engine_new(missing, 1);
    ck_assert_int_eq(r.desc->create(&f->host, &ctx, err, sizeof err), PAGODA_OK);
    ck_assert_int_eq(r.desc->ops ? ((const pagoda_frontend_ops *)r.desc->ops)->run(ctx) : 0, PAGODA_ERR_IO);
    r.desc->destroy(ctx);
    fake_engine_free(f);
    r.ctx = NULL;
    /* teardown without a second destroy */
    fake_engine_free(r.f);
    dlclose(r.lib);
    unlink(r.in);
    unlink(r.out);
    rmdir(r.dir);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("stdin_frontend");
    TCase *tc = tcase_create("stdin");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_mixed_lines);
    tcase_add_test(tc, test_no_waiting);
    tcase_add_test(tc, test_text_format_and_queue_full);
    tcase_add_test(tc, test_chat_mode);
    tcase_add_test(tc, test_chat_interrupt);
    tcase_add_test(tc, test_stop);
    tcase_add_test(tc, test_bad_config);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
