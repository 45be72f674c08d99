/* test_http_inspect.c: the HTTP frontend's inspection (plugins/frontend/
 * http/inspect.c, ui.c, trace.c) over loopback against the fake engine:
 * GET /v1/inspect passes the host's JSON through with the stream's numbers
 * added, needs the API key like every route (the page /ui does not, and
 * holds no external reference), answers 503 while loading; the stream
 * takes one snapshot per interval however many listen, none while nobody
 * listens, publishes a snapshot only when the engine's version moved, and
 * drops a client that reads nothing without holding up generation;
 * "pagoda_trace" puts each token's step, batch, KV and 5 candidates into
 * completions, streamed or not, and changes nothing without it. */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "http_testutil.h"

#ifdef PAGODA_HAVE_CURL

static int inspect_calls(srv *s)
{
    pthread_mutex_lock(&s->f->mu);
    int n = s->f->n_inspect;
    pthread_mutex_unlock(&s->f->mu);
    return n;
}

/* Waits (bounded: 10 s) until the stream counts n listeners. Each look is
 * a GET /v1/inspect, one snapshot. */
static bool wait_listeners(srv *s, int n)
{
    for (int i = 0; i < 500; i++) {
        resp r = {0};
        http_req(s, "GET", "/v1/inspect", NULL, 0, NULL, &r, 0);
        json_t *k = r.body ? json_loads(r.body, 0, NULL) : NULL;
        bool ok = k && jint(k, "stream.listeners") == n;
        json_decref(k);
        free(r.body);
        if (ok) return true;
        usleep(20000);
    }
    return false;
}

START_TEST(test_inspect_route_and_auth)
{
    srv s;
    fake_kv kv[] = {{"api_key", "sekret"}};
    srv_start(&s, kv, 1);
    resp r = {0};
    /* without the key: 401, for the snapshot and the stream alike */
    http_req(&s, "GET", "/v1/inspect", NULL, 0, NULL, &r, 0);
    ck_assert_int_eq(r.status, 401);
    ck_assert_ptr_nonnull(strstr(r.body, "invalid_api_key"));
    free(r.body);
    memset(&r, 0, sizeof r);
    http_req(&s, "GET", "/v1/inspect/stream", NULL, 0, "Authorization: Bearer wrong", &r, 2000);
    ck_assert_int_eq(r.status, 401);
    free(r.body);
    ck_assert_int_eq(inspect_calls(&s), 0);
    /* with it: the host's JSON, the stream's numbers added at its end */
    memset(&r, 0, sizeof r);
    http_req(&s, "GET", "/v1/inspect", NULL, 0, "Authorization: Bearer sekret", &r, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.ctype, "application/json"));
    json_t *j = json_loads(r.body, 0, NULL);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(jget_str(j, "object"), "pagoda.inspect");
    ck_assert_int_eq(jint(j, "stream.listeners"), 0);
    ck_assert_int_eq(jint(j, "stream.interval_ms"), 200);
    ck_assert_int_eq(jint(j, "stream.dropped"), 0);
    json_decref(j);
    free(r.body);
    ck_assert_int_eq(inspect_calls(&s), 1);
    /* the page is open: it holds no data and asks for the key itself */
    expect_status(&s, "GET", "/ui", NULL, NULL, 200);
    /* methods */
    expect_status(&s, "POST", "/v1/inspect", "{}", "Authorization: Bearer sekret", 405);
    srv_stop(&s);
}
END_TEST

static void not_ready(fake_engine *f) { f->ready = 0; }

START_TEST(test_inspect_while_loading)
{
    srv s;
    srv_start_with(&s, NULL, 0, not_ready);
    resp r = {0};
    http_req(&s, "GET", "/v1/inspect", NULL, 0, NULL, &r, 0);
    ck_assert_int_eq(r.status, 503);
    ck_assert_ptr_nonnull(strstr(r.body, "not ready"));
    free(r.body);
    srv_stop(&s);
}
END_TEST

START_TEST(test_ui_page_self_contained)
{
    srv s;
    srv_start(&s, NULL, 0);
    resp r = {0};
    http_req(&s, "GET", "/ui", NULL, 0, NULL, &r, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.ctype, "text/html"));
    /* the page as committed, byte for byte */
    struct stat sb;
    ck_assert_int_eq(stat(tu_src("plugins/frontend/http/ui/inspect.html"), &sb), 0);
    ck_assert_uint_eq(r.len, (size_t)sb.st_size);
    ck_assert_ptr_nonnull(strstr(r.body, "<canvas id=\"kv-grid\""));
    ck_assert_ptr_nonnull(strstr(r.body, "/v1/inspect/stream"));
    ck_assert_ptr_nonnull(strstr(r.body, "pagoda_trace"));
    /* nothing from elsewhere: no scheme-qualified or protocol-relative URL */
    ck_assert_ptr_null(strstr(r.body, "http://"));
    ck_assert_ptr_null(strstr(r.body, "https://"));
    ck_assert_ptr_null(strstr(r.body, "src=\"//"));
    ck_assert_ptr_null(strstr(r.body, "<link"));
    free(r.body);
    srv_stop(&s);
}
END_TEST

/* ------------------------------------------------------------- streaming */

typedef struct reader_arg {
    srv *s;
    long ms;
    resp r;
} reader_arg;

static void *read_stream(void *arg)
{
    reader_arg *a = arg;
    http_req(a->s, "GET", "/v1/inspect/stream", NULL, 0, NULL, &a->r, a->ms);
    return NULL;
}

static void bump(fake_engine *f) { f->inspect_bump = 1; }

START_TEST(test_stream_shared_and_paced)
{
    srv s;
    fake_kv kv[] = {{"inspect_interval_ms", "50"}};
    srv_start_with(&s, kv, 1, bump);
    /* nobody listens: nothing is taken */
    usleep(200000);
    ck_assert_int_eq(inspect_calls(&s), 0);
    /* three listeners for 1.5 s */
    enum { N = 3 };
    reader_arg a[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        memset(&a[i], 0, sizeof a[i]);
        a[i].s = &s;
        a[i].ms = 1500;
        pthread_create(&th[i], NULL, read_stream, &a[i]);
    }
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    int calls = inspect_calls(&s);
    /* one snapshot per 50 ms for all three together: ~30, never 3 x 30; the floor only says snapshots went on (a slow host takes fewer) */
    ck_assert_msg(calls >= 2 && calls <= 1500 / 50 + 5, "%d snapshots taken", calls);
    int seen3 = 0;
    for (int i = 0; i < N; i++) {
        ck_assert_ptr_nonnull(a[i].r.body);
        int frames = count_of(a[i].r.body, "data: {\"version\":");
        ck_assert_msg(frames >= 2 && frames <= calls, "listener %d: %d frames of %d", i, frames, calls);
        /* every frame whole: data line, blank line */
        ck_assert_int_eq(count_of(a[i].r.body, "\"pad\":\"\"") , frames);
        ck_assert_int_eq(count_of(a[i].r.body, "}}\n\n"), frames);
        seen3 += strstr(a[i].r.body, "\"listeners\":3") != NULL;
        free(a[i].r.body);
    }
    ck_assert_int_gt(seen3, 0);
    /* they left: once the server has seen them go (an event, bounded: 10 s,
     * not a fixed delay), the hub stops asking */
    ck_assert_msg(wait_listeners(&s, 0), "listeners still counted 10 s after they left");
    int after = inspect_calls(&s);
    usleep(400000);
    ck_assert_int_eq(inspect_calls(&s), after);
    srv_stop(&s);
}
END_TEST

START_TEST(test_stream_unchanged_sends_keepalives)
{
    srv s;
    fake_kv kv[] = {{"inspect_interval_ms", "50"}};
    srv_start(&s, kv, 1); /* the version never moves */
    reader_arg a = {.s = &s, .ms = 2600};
    read_stream(&a);
    ck_assert_ptr_nonnull(a.r.body);
    /* asked about 50 times, published once, then a keepalive comment */
    ck_assert_int_gt(inspect_calls(&s), 2); /* several asks (about 50 on a healthy host), one frame */
    ck_assert_int_eq(count_of(a.r.body, "data: "), 1);
    ck_assert_int_ge(count_of(a.r.body, ": keepalive\n\n"), 1);
    free(a.r.body);
    srv_stop(&s);
}
END_TEST

static void big_frames(fake_engine *f)
{
    f->inspect_bump = 1;
    f->inspect_pad = 256 * 1024;
    f->step_us = 2000;
}

/* A client that sends its request and never reads: its frames fill the
 * socket, MHD drops it after INSPECT_STALL_S, and all the while the
 * engine side goes on (a completion is served, other listeners get
 * frames). */
START_TEST(test_stream_stalled_listener_dropped)
{
    srv s;
    fake_kv kv[] = {{"inspect_interval_ms", "10"}};
    srv_start_with(&s, kv, 1, big_frames);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s.port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    const char *req = "GET /v1/inspect/stream HTTP/1.1\r\nHost: x\r\n\r\n";
    ck_assert_int_eq(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    /* while it stalls: generation goes on, a second listener keeps getting frames */
    usleep(1500000);
    long st;
    json_t *j = post_json(&s, "/v1/completions", "{\"prompt\":\"a b c\",\"max_tokens\":3}", &st);
    ck_assert_int_eq(st, 200);
    ck_assert_str_eq(jget_str(j, "choices.0.text"), "a b c");
    json_decref(j);
    reader_arg a = {.s = &s, .ms = 800};
    read_stream(&a);
    ck_assert_int_ge(count_of(a.r.body, "data: {"), 2);
    ck_assert_ptr_nonnull(strstr(a.r.body, "\"listeners\":2"));
    free(a.r.body);
    /* dropped within the stall limit (+ slack), counted */
    int dropped = 0;
    for (int i = 0; i < 100 && !dropped; i++) {
        usleep(100000);
        resp r = {0};
        http_req(&s, "GET", "/v1/inspect", NULL, 0, NULL, &r, 0);
        json_t *k = json_loads(r.body, 0, NULL);
        ck_assert_ptr_nonnull(k);
        dropped = jint(k, "stream.dropped") == 1 && jint(k, "stream.listeners") == 0;
        json_decref(k);
        free(r.body);
    }
    ck_assert_msg(dropped, "the stalled listener was not dropped");
    close(fd);
    srv_stop(&s);
}
END_TEST

/* ----------------------------------------------------------------- trace */

static void check_trace_entry(json_t *e, const char *word, int i, int prompt_tokens)
{
    ck_assert_str_eq(jget_str(e, "text"), word);
    ck_assert_int_gt(jint(e, "step"), 0);
    ck_assert_int_eq(jint(e, "batch_seqs"), 1);
    ck_assert_int_eq(jint(e, "batch_tokens"), 1);
    ck_assert_int_eq(jint(e, "kv_tokens"), prompt_tokens + i);
    ck_assert_int_eq((int)json_array_size(jget(e, "kv_blocks")), (prompt_tokens + i + 3) / 4);
    ck_assert_int_eq((int)json_array_size(jget(e, "top")), 5);
    ck_assert_str_eq(jget_str(e, "top.0.text"), word);
    ck_assert_str_eq(jget_str(e, "top.1.text"), "</s>");
    double lp = json_real_value(jget(e, "top.1.logprob")), p = json_real_value(jget(e, "top.1.prob"));
    ck_assert_double_eq_tol(lp, -1.5, 1e-6);
    ck_assert_double_eq_tol(p, exp(-1.5), 1e-6);
    ck_assert_double_eq_tol(json_real_value(jget(e, "prob")), exp(-0.5), 1e-6);
}

START_TEST(test_trace_in_completions)
{
    srv s;
    srv_start(&s, NULL, 0);
    long st;
    /* not streamed: one entry per token beside the text; logprobs stay off */
    json_t *j = post_json(&s, "/v1/completions", "{\"prompt\":\"one two three\",\"max_tokens\":3,"
                          "\"pagoda_trace\":true}", &st);
    ck_assert_int_eq(st, 200);
    ck_assert_str_eq(jget_str(j, "choices.0.text"), "one two three");
    ck_assert(json_is_null(jget(j, "choices.0.logprobs")));
    json_t *tr = jget(j, "choices.0.pagoda_trace");
    ck_assert_int_eq((int)json_array_size(tr), 3);
    const char *words[] = {"one", "two", "three"};
    for (int i = 0; i < 3; i++) check_trace_entry(json_array_get(tr, (size_t)i), words[i], i, 4);
    ck_assert_int_lt(jint(j, "choices.0.pagoda_trace.0.step"), jint(j, "choices.0.pagoda_trace.1.step"));
    /* the engine was told, and given the response's id for inspection */
    pthread_mutex_lock(&s.f->mu);
    fake_logged l = s.f->log[s.f->n_log - 1];
    pthread_mutex_unlock(&s.f->mu);
    ck_assert(l.req.trace);
    ck_assert_str_eq(l.request_id, jget_str(j, "id"));
    json_decref(j);

    /* streamed: each chunk with its token's entry */
    resp r = {0};
    const char *body = "{\"prompt\":\"one two three\",\"max_tokens\":3,\"stream\":true,\"pagoda_trace\":true}";
    http_req(&s, "POST", "/v1/completions", body, strlen(body), NULL, &r, 0);
    ck_assert_int_eq(r.status, 200);
    json_t *chunks[16];
    int done = 0, n = parse_sse(r.body, chunks, 16, &done);
    ck_assert(done);
    int k = 0;
    for (int i = 0; i < n; i++) {
        json_t *e = jget(chunks[i], "choices.0.pagoda_trace");
        if (e) check_trace_entry(e, words[k], k, 4), k++;
        json_decref(chunks[i]);
    }
    ck_assert_int_eq(k, 3);
    free(r.body);

    /* chat, streamed */
    memset(&r, 0, sizeof r);
    body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2,\"stream\":true,\"pagoda_trace\":true}";
    http_req(&s, "POST", "/v1/chat/completions", body, strlen(body), NULL, &r, 0);
    ck_assert_int_eq(r.status, 200);
    n = parse_sse(r.body, chunks, 16, &done);
    k = 0;
    for (int i = 0; i < n; i++) {
        k += jget(chunks[i], "choices.0.pagoda_trace") != NULL;
        json_decref(chunks[i]);
    }
    ck_assert_int_eq(k, 2);
    free(r.body);

    /* without it: no trace, and the engine is not asked */
    j = post_json(&s, "/v1/completions", "{\"prompt\":\"one two\",\"max_tokens\":2}", &st);
    ck_assert_int_eq(st, 200);
    ck_assert_ptr_null(jget(j, "choices.0.pagoda_trace"));
    json_decref(j);
    pthread_mutex_lock(&s.f->mu);
    ck_assert(!s.f->log[s.f->n_log - 1].req.trace);
    pthread_mutex_unlock(&s.f->mu);
    /* with logprobs too: the client's 1 shown, the trace's 5 kept apart */
    j = post_json(&s, "/v1/completions", "{\"prompt\":\"one two\",\"max_tokens\":2,\"logprobs\":1,"
                  "\"pagoda_trace\":true}", &st);
    ck_assert_int_eq(st, 200);
    ck_assert_int_eq((int)json_object_size(jget(j, "choices.0.logprobs.top_logprobs.0")), 1);
    ck_assert_int_eq((int)json_array_size(jget(j, "choices.0.pagoda_trace.0.top")), 5);
    json_decref(j);
    expect_error(&s, "/v1/completions", "{\"prompt\":\"x\",\"pagoda_trace\":\"yes\"}", 400, "pagoda_trace",
                 "pagoda_trace");
    srv_stop(&s);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("http_inspect");
    TCase *tc = tcase_create("inspect");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_inspect_route_and_auth);
    tcase_add_test(tc, test_inspect_while_loading);
    tcase_add_test(tc, test_ui_page_self_contained);
    tcase_add_test(tc, test_stream_shared_and_paced);
    tcase_add_test(tc, test_stream_unchanged_sends_keepalives);
    tcase_add_test(tc, test_stream_stalled_listener_dropped);
    tcase_add_test(tc, test_trace_in_completions);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return http_test_main(suite()); }

#else /* !PAGODA_HAVE_CURL */
int main(void) { return http_test_main_skipped("test_http_inspect"); }
#endif
