/* test_http_api.c: the HTTP frontend's agent APIs (plugins/frontend/http/api/)
 * against the fake engine (fake_engine.h), which echoes the rendered prompt
 * word by word, so a prompt holding <think>...</think> makes an output that
 * holds it: reasoning kept out of content in chat completions (whole and
 * streamed), as thinking blocks in /v1/messages and reasoning items in
 * /v1/responses; Anthropic's error shape and x-api-key; the Responses
 * store scoped per API key and an unknown previous_response_id. The
 * official SDKs' side is tests/integration/agents_client.sh. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>

#include "http_testutil.h"

#ifdef PAGODA_HAVE_CURL

static srv S;

static void setup(void) { srv_start(&S, NULL, 0); }
static void teardown(void) { srv_stop(&S); }

/* text gathered from deltas */
typedef struct acc {
    char p[8192];
    size_t len;
} acc;

static void acc_add(acc *a, const char *s)
{
    size_t n = strlen(s);
    ck_assert_int_lt(a->len + n, sizeof a->p);
    memcpy(a->p + a->len, s, n + 1);
    a->len += n;
}

#define THINKING "<think> pondering deeply </think> the answer"

/* POST with an optional header; the body (caller frees) and status */
static char *post(const char *path, const char *body, const char *hdr, long *status)
{
    resp r = {0};
    http_req(&S, "POST", path, body, strlen(body), hdr, &r, 0);
    *status = r.status;
    return r.body ? r.body : strdup("");
}

static json_t *post_ok(const char *path, const char *body, const char *hdr)
{
    long st;
    char *b = post(path, body, hdr, &st);
    ck_assert_msg(st == 200, "%s %s -> %ld: %s", path, body, st, b);
    json_t *j = json_loads(b, 0, NULL);
    ck_assert_msg(j != NULL, "not JSON: %s", b);
    free(b);
    return j;
}

/* the SSE events of body: names (NULL for data-only) and data, n of them */
static int sse_events(const char *body, char names[][64], json_t **data, int cap)
{
    int n = 0;
    const char *p = body;
    while (*p) {
        const char *end = strstr(p, "\n\n");
        ck_assert_msg(end != NULL, "event not ended: %s", p);
        names[n][0] = 0;
        if (!strncmp(p, "event: ", 7)) {
            const char *nl = strchr(p, '\n');
            snprintf(names[n], 64, "%.*s", (int)(nl - p - 7), p + 7);
            p = nl + 1;
        }
        ck_assert_msg(!strncmp(p, "data: ", 6), "no data line: %.40s", p);
        if (strncmp(p + 6, "[DONE]", 6)) {
            ck_assert_int_lt(n, cap);
            data[n] = json_loadb(p + 6, (size_t)(end - p - 6), 0, NULL);
            ck_assert_msg(data[n] != NULL, "bad JSON: %.*s", (int)(end - p - 6), p + 6);
            n++;
        }
        p = end + 2;
    }
    return n;
}

START_TEST(test_chat_reasoning)
{
    json_t *j = post_ok("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"" THINKING "\"}],"
                        "\"max_tokens\":40}", NULL);
    const char *content = jget_str(j, "choices.0.message.content");
    const char *rc = jget_str(j, "choices.0.message.reasoning_content");
    ck_assert_ptr_nonnull(content);
    ck_assert_msg(rc && !strcmp(rc, " pondering deeply "), "reasoning_content %s", rc ? rc : "null");
    ck_assert_str_eq(jget_str(j, "choices.0.message.reasoning"), rc);
    ck_assert_msg(!strstr(content, "pondering") && !strstr(content, "think>") && strstr(content, " the answer"),
                  "content %s", content);
    static char whole[1024];
    snprintf(whole, sizeof whole, "%s", content);
    json_decref(j);
    /* streamed: reasoning deltas apart, content deltas the same answer */
    long st;
    char *b = post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"" THINKING "\"}],"
                   "\"max_tokens\":40,\"stream\":true}", NULL, &st);
    ck_assert_int_eq(st, 200);
    static char names[256][64];
    json_t *ev[256];
    int n = sse_events(b, names, ev, 256);
    static acc text, reason;
    memset(&text, 0, sizeof text);
    memset(&reason, 0, sizeof reason);
    for (int i = 0; i < n; i++) {
        json_t *d = jget(ev[i], "choices.0.delta");
        json_t *c = json_object_get(d, "content"), *r = json_object_get(d, "reasoning_content");
        if (json_is_string(c)) acc_add(&text, json_string_value(c));
        if (json_is_string(r)) {
            acc_add(&reason, json_string_value(r));
            ck_assert_str_eq(json_string_value(json_object_get(d, "reasoning")), json_string_value(r));
        }
        json_decref(ev[i]);
    }
    ck_assert_str_eq(reason.p, " pondering deeply ");
    ck_assert_str_eq(text.p, whole);
    free(b);
}
END_TEST

START_TEST(test_messages_thinking)
{
    const char *body = "{\"model\":\"m\",\"max_tokens\":40,\"messages\":[{\"role\":\"user\",\"content\":\"" THINKING "\"}]";
    char full[512];
    snprintf(full, sizeof full, "%s}", body);
    json_t *j = post_ok("/v1/messages", full, NULL);
    ck_assert_str_eq(jget_str(j, "type"), "message");
    json_t *content = jget(j, "content");
    int thinking = 0;
    for (size_t i = 0; i < json_array_size(content); i++) {
        json_t *blk = json_array_get(content, i);
        const char *t = jget_str(blk, "type");
        if (!strcmp(t, "thinking")) {
            thinking++;
            ck_assert_str_eq(jget_str(blk, "thinking"), " pondering deeply ");
            ck_assert_ptr_nonnull(jget_str(blk, "signature"));
        } else {
            ck_assert_str_eq(t, "text");
            ck_assert_ptr_null(strstr(jget_str(blk, "text"), "pondering"));
        }
    }
    ck_assert_int_eq(thinking, 1);
    ck_assert_str_eq(jget_str(j, "stop_reason"), "end_turn");
    ck_assert_int_gt(jint(j, "usage.input_tokens"), 0);
    json_decref(j);
    /* streamed: the documented sequence, a thinking block with thinking_delta */
    snprintf(full, sizeof full, "%s,\"stream\":true}", body);
    long st;
    char *b = post("/v1/messages", full, NULL, &st);
    ck_assert_int_eq(st, 200);
    static char names[256][64];
    json_t *ev[256];
    int n = sse_events(b, names, ev, 256);
    ck_assert_int_ge(n, 6);
    ck_assert_str_eq(names[0], "message_start");
    ck_assert_str_eq(names[1], "ping");
    ck_assert_str_eq(names[n - 2], "message_delta");
    ck_assert_str_eq(names[n - 1], "message_stop");
    ck_assert_str_eq(jget_str(ev[n - 2], "delta.stop_reason"), "end_turn");
    static acc reason;
    memset(&reason, 0, sizeof reason);
    int open = -1;
    for (int i = 0; i < n; i++) {
        ck_assert_str_eq(names[i], jget_str(ev[i], "type"));
        if (!strcmp(names[i], "content_block_start")) {
            ck_assert_int_eq(open, -1);
            open = (int)jint(ev[i], "index");
        } else if (!strcmp(names[i], "content_block_stop")) {
            ck_assert_int_eq(open, (int)jint(ev[i], "index"));
            open = -1;
        } else if (!strcmp(names[i], "content_block_delta")) {
            ck_assert_int_eq(open, (int)jint(ev[i], "index"));
            const char *dt = jget_str(ev[i], "delta.type");
            if (!strcmp(dt, "thinking_delta")) acc_add(&reason, jget_str(ev[i], "delta.thinking"));
            if (!strcmp(dt, "text_delta")) ck_assert_ptr_null(strstr(jget_str(ev[i], "delta.text"), "pondering"));
        }
        json_decref(ev[i]);
    }
    ck_assert_int_eq(open, -1);
    ck_assert_str_eq(reason.p, " pondering deeply ");
    free(b);
}
END_TEST

START_TEST(test_responses_reasoning)
{
    json_t *j = post_ok("/v1/responses", "{\"input\":\"" THINKING "\",\"max_output_tokens\":40}", NULL);
    ck_assert_str_eq(jget_str(j, "object"), "response");
    ck_assert_str_eq(jget_str(j, "status"), "completed");
    json_t *out = jget(j, "output");
    int rs = 0, msg = 0;
    for (size_t i = 0; i < json_array_size(out); i++) {
        json_t *it = json_array_get(out, i);
        if (!strcmp(jget_str(it, "type"), "reasoning")) {
            rs++;
            ck_assert_str_eq(jget_str(it, "content.0.text"), " pondering deeply ");
        } else {
            ck_assert_str_eq(jget_str(it, "type"), "message");
            ck_assert_ptr_null(strstr(jget_str(it, "content.0.text"), "pondering"));
            msg++;
        }
    }
    ck_assert_int_eq(rs, 1);
    ck_assert_int_ge(msg, 1);
    json_decref(j);
    long st;
    char *b = post("/v1/responses", "{\"input\":\"" THINKING "\",\"max_output_tokens\":40,\"stream\":true}", NULL, &st);
    ck_assert_int_eq(st, 200);
    static char names[256][64];
    json_t *ev[256];
    int n = sse_events(b, names, ev, 256);
    ck_assert_str_eq(names[0], "response.created");
    ck_assert_str_eq(names[1], "response.in_progress");
    ck_assert_str_eq(names[n - 1], "response.completed");
    static acc reason;
    memset(&reason, 0, sizeof reason);
    for (int i = 0; i < n; i++) {
        ck_assert_str_eq(names[i], jget_str(ev[i], "type"));
        ck_assert_int_eq(jint(ev[i], "sequence_number"), i);
        if (!strcmp(names[i], "response.reasoning_text.delta")) acc_add(&reason, jget_str(ev[i], "delta"));
        if (!strcmp(names[i], "response.output_text.delta"))
            ck_assert_ptr_null(strstr(jget_str(ev[i], "delta"), "pondering"));
        json_decref(ev[i]);
    }
    ck_assert_str_eq(reason.p, " pondering deeply ");
    free(b);
}
END_TEST

/* The prefix cache's share in usage, and the disk tier's share of it, as
 * chat completions say it: Messages beside cache_read_input_tokens,
 * Responses in input_tokens_details; streamed and not. */
START_TEST(test_usage_tier_share)
{
    pthread_mutex_lock(&S.f->mu);
    S.f->cached_tokens = 3;
    S.f->tier_cached_tokens = 2;
    pthread_mutex_unlock(&S.f->mu);
    const char *msg = "{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"a b c d e\"}]";
    char body[512];
    snprintf(body, sizeof body, "%s}", msg);
    json_t *j = post_ok("/v1/messages", body, NULL);
    ck_assert_int_eq(jint(j, "usage.cache_read_input_tokens"), 3);
    ck_assert_int_eq(jint(j, "usage.tier_cached_tokens"), 2);
    json_decref(j);
    snprintf(body, sizeof body, "%s,\"stream\":true}", msg);
    long st;
    char *b = post("/v1/messages", body, NULL, &st);
    ck_assert_int_eq(st, 200);
    static char names[256][64];
    json_t *ev[256];
    int n = sse_events(b, names, ev, 256);
    ck_assert_int_ge(n, 2);
    ck_assert_str_eq(names[n - 2], "message_delta");
    ck_assert_int_eq(jint(ev[n - 2], "usage.cache_read_input_tokens"), 3);
    ck_assert_int_eq(jint(ev[n - 2], "usage.tier_cached_tokens"), 2);
    for (int i = 0; i < n; i++) json_decref(ev[i]);
    free(b);

    j = post_ok("/v1/responses", "{\"input\":\"a b c d e\",\"max_output_tokens\":40}", NULL);
    ck_assert_int_eq(jint(j, "usage.input_tokens_details.cached_tokens"), 3);
    ck_assert_int_eq(jint(j, "usage.input_tokens_details.tier_cached_tokens"), 2);
    json_decref(j);
    b = post("/v1/responses", "{\"input\":\"a b c d e\",\"max_output_tokens\":40,\"stream\":true}", NULL, &st);
    ck_assert_int_eq(st, 200);
    n = sse_events(b, names, ev, 256);
    ck_assert_int_ge(n, 1);
    ck_assert_str_eq(names[n - 1], "response.completed");
    ck_assert_int_eq(jint(ev[n - 1], "response.usage.input_tokens_details.tier_cached_tokens"), 2);
    for (int i = 0; i < n; i++) json_decref(ev[i]);
    free(b);

    j = post_ok("/v1/chat/completions",
                "{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"a b c d e\"}]}", NULL);
    ck_assert_int_eq(jint(j, "usage.prompt_tokens_details.cached_tokens"), 3);
    ck_assert_int_eq(jint(j, "usage.prompt_tokens_details.tier_cached_tokens"), 2);
    json_decref(j);
}
END_TEST

/* Anthropic's error shape, with the field named */
static void anthropic_400(const char *body, const char *needle)
{
    long st;
    char *b = post("/v1/messages", body, NULL, &st);
    ck_assert_msg(st == 400, "%s -> %ld", body, st);
    json_t *j = json_loads(b, 0, NULL);
    ck_assert_msg(j && !strcmp(jget_str(j, "type"), "error") &&
                      !strcmp(jget_str(j, "error.type"), "invalid_request_error"), "%s", b);
    ck_assert_msg(strstr(jget_str(j, "error.message"), needle), "'%s' lacks '%s'", jget_str(j, "error.message"),
                  needle);
    json_decref(j);
    free(b);
}

START_TEST(test_messages_errors)
{
    anthropic_400("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", "max_tokens: Field required");
    anthropic_400("{\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}",
                  "messages.0.content.0.type: 'image'");
    anthropic_400("{\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
                  "\"tool_use_id\":\"t9\",\"content\":\"x\"}]}]}", "'t9' matches no tool_use");
    anthropic_400("{\"max_tokens\":4,\"tools\":[{\"name\":\"f\"}],\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                  "tools.0.input_schema");
    anthropic_400("{\"max_tokens\":4,\"tool_choice\":{\"type\":\"sometimes\"},\"tools\":[{\"name\":\"f\",\"input_schema\":"
                  "{\"type\":\"object\"}}],\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", "tool_choice.type");
    /* a tool schema that does not compile (the fake engine refuses "BAD"), other content kinds */
    anthropic_400("{\"max_tokens\":4,\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\",\"title\":"
                  "\"BAD\"}}],\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                  "tools.0.input_schema: json_schema: fake: the spec says BAD");
    anthropic_400("{\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"document\",\"source\":"
                  "{}}]}]}", "messages.0.content.0.type: 'document'");
    anthropic_400("{\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\","
                  "\"content\":[{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"f\",\"input\":{}}]},{\"role\":\"user\","
                  "\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\",\"content\":[{\"type\":\"image\","
                  "\"source\":{}}]}]}]}", "'image'");
    ck_assert_int_eq(S.f->n_log, 0); /* none reached the engine */
    /* a 404 on these routes is Anthropic-shaped too; the OpenAI routes keep theirs */
    long st;
    char *b = post("/v1/messages/nope", "{}", NULL, &st);
    ck_assert_int_eq(st, 404);
    ck_assert_ptr_nonnull(strstr(b, "\"type\":\"error\""));
    free(b);
    b = post("/v1/chat/completions", "{}", NULL, &st);
    ck_assert_int_eq(st, 400);
    ck_assert_ptr_nonnull(strstr(b, "\"param\""));
    free(b);
    /* count_tokens: the rendered prompt's tokens, what the answer's usage counts */
    json_t *c = post_ok("/v1/messages/count_tokens", "{\"messages\":[{\"role\":\"user\",\"content\":\"a b c\"}]}", NULL);
    json_t *m = post_ok("/v1/messages", "{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"a b c\"}]}", NULL);
    ck_assert_int_eq(jint(c, "input_tokens"), jint(m, "usage.input_tokens") + jint(m, "usage.cache_read_input_tokens"));
    json_decref(c);
    json_decref(m);
}
END_TEST

/* The Responses API's bad input: OpenAI's error shape, the field named in
 * param and the message, nothing submitted */
START_TEST(test_responses_errors)
{
    expect_error(&S, "/v1/responses", "{\"max_output_tokens\":4,\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
                 "\"input_image\",\"image_url\":\"data:image/png;base64,AAAA\"}]}]}", 400, "'input_image' is not supported",
                 "input");
    expect_error(&S, "/v1/responses", "{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c9\",\"output\":"
                 "\"5\"}]}", 400, "'c9' matches no function_call", "input");
    expect_error(&S, "/v1/responses", "{\"input\":\"hi\",\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":"
                 "{\"type\":\"object\",\"title\":\"BAD\"}}]}", 400,
                 "tools[0].parameters: json_schema: fake: the spec says BAD", "tools");
    expect_error(&S, "/v1/responses", "{\"input\":\"hi\",\"tools\":[{\"type\":\"web_search\"}]}", 400, NULL, "tools");
    expect_error(&S, "/v1/responses", "{\"input\":\"hi\",\"previous_response_id\":\"resp_nope\"}", 400,
                 "'resp_nope' not found", "previous_response_id");
    expect_error(&S, "/v1/responses", "{\"input\":[]}", 400, "'input'", "input");
    expect_error(&S, "/v1/responses", "{\"input\":\"hi\",\"store\":\"yes\"}", 400, "'store'", "store");
    ck_assert_int_eq(S.f->n_log, 0);
}
END_TEST

START_TEST(test_x_api_key)
{
    srv s;
    fake_kv extra[] = {{"api_key", "sekrit"}};
    srv_start(&s, extra, 1);
    const char *b = "{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    expect_status(&s, "POST", "/v1/messages", b, "x-api-key: sekrit", 200);
    expect_status(&s, "POST", "/v1/messages", b, "Authorization: Bearer sekrit", 200);
    expect_status(&s, "POST", "/v1/messages", b, "x-api-key: wrong", 401);
    resp r = {0};
    http_req(&s, "POST", "/v1/messages", b, strlen(b), NULL, &r, 0);
    ck_assert_int_eq(r.status, 401);
    ck_assert_ptr_nonnull(strstr(r.body, "\"authentication_error\""));
    free(r.body);
    srv_stop(&s);
}
END_TEST

START_TEST(test_responses_store)
{
    /* no api_key configured: the key a client sends still scopes its store */
    json_t *a = post_ok("/v1/responses", "{\"input\":\"first turn\",\"max_output_tokens\":3}", "Authorization: Bearer alice");
    const char *id = jget_str(a, "id");
    char body[256];
    snprintf(body, sizeof body, "{\"input\":\"second\",\"previous_response_id\":\"%s\",\"max_output_tokens\":40}", id);
    json_t *f = post_ok("/v1/responses", body, "Authorization: Bearer alice");
    /* the follow-up's prompt holds the first turn and its answer */
    const fake_logged *l = &S.f->log[S.f->n_log - 1];
    ck_assert_msg(strstr(l->prompt, "<|user|>first turn\n<|assistant|>") && strstr(l->prompt, "<|user|>second"),
                  "%s", l->prompt);
    ck_assert_str_eq(jget_str(f, "previous_response_id"), id);
    json_decref(f);
    long st;
    char *b = post("/v1/responses", body, "Authorization: Bearer bob", &st);
    ck_assert_int_eq(st, 400);
    json_t *e = json_loads(b, 0, NULL);
    ck_assert_str_eq(jget_str(e, "error.code"), "previous_response_not_found");
    ck_assert_str_eq(jget_str(e, "error.param"), "previous_response_id");
    json_decref(e);
    free(b);
    /* store: false keeps nothing */
    json_t *n = post_ok("/v1/responses", "{\"input\":\"x\",\"store\":false,\"max_output_tokens\":40}", NULL);
    snprintf(body, sizeof body, "{\"input\":\"y\",\"previous_response_id\":\"%s\"}", jget_str(n, "id"));
    b = post("/v1/responses", body, NULL, &st);
    ck_assert_int_eq(st, 400);
    free(b);
    json_decref(n);
    json_decref(a);
}
END_TEST

/* ------------------------------------------------------------ keep-alive */

static int64_t now_ms_(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

/* one response read whole (by its Content-Length); 1 when the peer then
 * closed (read ended at EOF), in *closed; the status returned */
static int one_response(int fd, char *out, size_t cap, int *closed)
{
    size_t n = 0;
    *closed = 0;
    int64_t end = now_ms_() + 10000;
    for (;;) {
        char *h = strstr(out, "\r\n\r\n");
        if (n && h) {
            const char *cl = strcasestr(out, "\r\nContent-Length:");
            size_t head = (size_t)(h - out) + 4;
            if (cl && n >= head + strtoull(cl + 17, NULL, 10)) break;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int left = (int)(end - now_ms_());
        ck_assert_msg(left > 0 && poll(&p, 1, left) == 1, "no response in 10 s: %s", out);
        ssize_t r = recv(fd, out + n, cap - 1 - n, 0);
        if (r <= 0) {
            *closed = 1;
            break;
        }
        n += (size_t)r;
        out[n] = 0;
    }
    int st = 0;
    sscanf(out, "HTTP/1.%*d %d", &st);
    return st;
}

/* waits (bounded) for the server to close fd: 1 when it did */
static int closed_within(int fd, int ms)
{
    int64_t end = now_ms_() + ms;
    char c;
    for (;;) {
        int left = (int)(end - now_ms_());
        if (left <= 0) return 0;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, left) == 1) return recv(fd, &c, 1, 0) <= 0;
    }
}

#define KA_REQ "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" \
               "Content-Length: 35\r\n\r\n{\"prompt\":\"one two\",\"max_tokens\":2}"

START_TEST(test_keep_alive)
{
    srv s;
    fake_kv extra[] = {{"threads", "4"}, {"request_timeout_s", "1"}};
    srv_start(&s, extra, 2);
    static char out[16384];
    int closed;
    int fd = connect_to(s.port);
    for (int i = 0; i < 3; i++) { /* three requests in turn on one connection */
        memset(out, 0, sizeof out);
        ck_assert_int_eq(send(fd, KA_REQ, strlen(KA_REQ), 0), (ssize_t)strlen(KA_REQ));
        ck_assert_int_eq(one_response(fd, out, sizeof out, &closed), 200);
        ck_assert_msg(!closed && !strcasestr(out, "Connection: close"), "request %d: %s", i, out);
        ck_assert_ptr_nonnull(strstr(out, "\"text\""));
    }
    /* a follow-up with two different lengths: 400 and closed (MHD, not the gate, read it) */
    const char *bad = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 35\r\nContent-Length: 3\r\n\r\n"
                      "{\"prompt\":\"one two\",\"max_tokens\":2}";
    memset(out, 0, sizeof out);
    send(fd, bad, strlen(bad), 0);
    ck_assert_int_eq(one_response(fd, out, sizeof out, &closed), 400);
    ck_assert_ptr_nonnull(strstr(out, "Content-Length"));
    ck_assert(closed_within(fd, 5000));
    close(fd);
    /* kept open and idle past request_timeout_s (1 s): closed, unanswered */
    fd = connect_to(s.port);
    memset(out, 0, sizeof out);
    send(fd, KA_REQ, strlen(KA_REQ), 0);
    ck_assert_int_eq(one_response(fd, out, sizeof out, &closed), 200);
    ck_assert_msg(closed_within(fd, 5000), "an idle kept connection stays open");
    close(fd);
    /* threads 4: at most 2 connections kept between requests */
    int fds[3];
    int kept = 0;
    for (int i = 0; i < 3; i++) {
        fds[i] = connect_to(s.port);
        memset(out, 0, sizeof out);
        send(fds[i], KA_REQ, strlen(KA_REQ), 0);
        ck_assert_int_eq(one_response(fds[i], out, sizeof out, &closed), 200);
        kept += !strcasestr(out, "Connection: close");
    }
    ck_assert_int_eq(kept, 2);
    for (int i = 0; i < 3; i++) close(fds[i]);
    srv_stop(&s);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("http_api");
    TCase *tc = tcase_create("api");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_chat_reasoning);
    tcase_add_test(tc, test_messages_thinking);
    tcase_add_test(tc, test_responses_reasoning);
    tcase_add_test(tc, test_usage_tier_share);
    tcase_add_test(tc, test_messages_errors);
    tcase_add_test(tc, test_responses_errors);
    tcase_add_test(tc, test_x_api_key);
    tcase_add_test(tc, test_responses_store);
    tcase_add_test(tc, test_keep_alive);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return http_test_main(suite()); }

#else /* !PAGODA_HAVE_CURL */
int main(void) { return http_test_main_skipped("test_http_api"); }
#endif
