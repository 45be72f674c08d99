/* test_http_tools.c: the HTTP frontend's structured-output fields and
 * tool calls (plugins/frontend/http/structured.c) against the fake engine
 * (fake_engine.h), which echoes the rendered prompt word by word: what
 * each field becomes in the submitted request (constraint type and text,
 * the prompt with tools, tool calls and tool results rendered Hermes-style),
 * the 400s of bad fields, and <tool_call> blocks in the output read back as
 * tool_calls, whole and streamed. The real engine's side is
 * tests/integration/http_structured.c. */
#include <dlfcn.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_engine.h"
#include "testutil.h"

#ifdef PAGODA_HAVE_CURL
#include <curl/curl.h>

typedef struct srv {
    fake_engine *f;
    void *lib;
    const pagoda_plugin_desc *desc;
    const pagoda_frontend_ops *ops;
    void *ctx;
    pthread_t th;
    int rc, port;
    char dir[64], port_file[512];
    fake_kv cfg[4];
} srv;

static srv S;

static void *run_thread(void *arg)
{
    srv *s = arg;
    s->rc = s->ops->run(s->ctx);
    return NULL;
}

static void setup(void)
{
    srv *s = &S;
    memset(s, 0, sizeof *s);
    snprintf(s->dir, sizeof s->dir, "/tmp/pagoda_tools_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(s->dir));
    strcpy(s->port_file, s->dir); /* (snprintf: a false truncation warning) */
    strcat(s->port_file, "/port");
    s->cfg[0] = (fake_kv){"port", "0"};
    s->cfg[1] = (fake_kv){"port_file", s->port_file};
    s->f = fake_engine_new(s->cfg, 2);
    const char *dir = getenv("PAGODA_PLUGIN_PATH");
    char path[1024];
    snprintf(path, sizeof path, "%s/frontend-http.so", dir ? dir : tu_build("plugins"));
    s->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(s->lib != NULL, "dlopen %s: %s", path, dlerror());
    pagoda_plugin_entry_fn entry = (pagoda_plugin_entry_fn)dlsym(s->lib, PAGODA_PLUGIN_ENTRY_SYMBOL);
    s->desc = entry(PAGODA_ABI_MAJOR, PAGODA_ABI_MINOR);
    s->ops = s->desc->ops;
    char err[256] = {0};
    ck_assert_int_eq(s->desc->create(&s->f->host, &s->ctx, err, sizeof err), PAGODA_OK);
    pthread_create(&s->th, NULL, run_thread, s);
    for (int i = 0; i < 1000 && s->port <= 0; i++) {
        FILE *fp = fopen(s->port_file, "r");
        if (fp) {
            if (fscanf(fp, "%d", &s->port) != 1) s->port = 0;
            fclose(fp);
        }
        if (s->port <= 0) usleep(10000);
    }
    ck_assert_int_gt(s->port, 0);
}

static void teardown(void)
{
    srv *s = &S;
    s->ops->stop(s->ctx);
    pthread_join(s->th, NULL);
    ck_assert_int_eq(s->rc, PAGODA_OK);
    ck_assert_int_eq(fake_live(s->f), 0);
    (void)fake_wait_count;
    s->desc->destroy(s->ctx);
    fake_engine_free(s->f);
    dlclose(s->lib);
    unlink(s->port_file);
    rmdir(s->dir);
}

typedef struct body {
    char *p;
    size_t len;
} body;

static size_t on_body(char *p, size_t sz, size_t n, void *u)
{
    body *b = u;
    b->p = realloc(b->p, b->len + sz * n + 1);
    memcpy(b->p + b->len, p, sz * n);
    b->len += sz * n;
    b->p[b->len] = 0;
    return sz * n;
}

/* POST; returns the body (caller frees), *status the HTTP status */
static char *post(const char *path, const char *json, long *status)
{
    CURL *c = curl_easy_init();
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", S.port, path);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    h = curl_slist_append(h, "Expect:");
    body b = {0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, json);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(json));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    *status = curl_easy_perform(c) == CURLE_OK ? 0 : -1;
    if (*status == 0) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return b.p;
}

static json_t *post_json(const char *path, const char *json, long want)
{
    long st;
    char *b = post(path, json, &st);
    ck_assert_msg(st == want, "%s -> %ld: %s", json, st, b ? b : "");
    json_t *j = b ? json_loads(b, 0, NULL) : NULL;
    ck_assert_msg(j, "not JSON: %s", b ? b : "");
    free(b);
    return j;
}

static const fake_logged *last_logged(void)
{
    ck_assert_int_gt(S.f->n_log, 0);
    return &S.f->log[S.f->n_log - 1];
}

static void expect_400(const char *path, const char *json, const char *param, const char *needle)
{
    json_t *j = post_json(path, json, 400);
    json_t *e = json_object_get(j, "error");
    const char *p = json_string_value(json_object_get(e, "param"));
    const char *m = json_string_value(json_object_get(e, "message"));
    ck_assert_msg(p && !strcmp(p, param), "%s: param %s, want %s", json, p ? p : "null", param);
    ck_assert_msg(m && strstr(m, needle), "%s: message '%s' lacks '%s'", json, m ? m : "", needle);
    json_decref(j);
}

#define TOOLS "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":" \
              "\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}}}}}]"

START_TEST(test_fields_to_request)
{
    json_t *j = post_json("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                          "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"strict\":true,"
                          "\"schema\":{\"type\":\"object\",\"properties\":{\"b\":{},\"a\":{}}}}}}", 200);
    json_decref(j);
    const fake_logged *l = last_logged();
    ck_assert_int_eq(l->req.constraint_type, PAGODA_CONSTRAINT_JSON_SCHEMA);
    ck_assert(l->req.constraint_strict);
    /* the schema as given, properties in their order */
    ck_assert_str_eq(l->constraint, "{\"type\":\"object\",\"properties\":{\"b\":{},\"a\":{}}}");
    j = post_json("/v1/completions", "{\"prompt\":\"hi\",\"response_format\":{\"type\":\"json_object\"}}", 200);
    json_decref(j);
    ck_assert_int_eq(last_logged()->req.constraint_type, PAGODA_CONSTRAINT_JSON_OBJECT);
    j = post_json("/v1/completions", "{\"prompt\":\"hi\",\"guided_choice\":[\"a\",\"b\"]}", 200);
    json_decref(j);
    ck_assert_int_eq(last_logged()->req.constraint_type, PAGODA_CONSTRAINT_CHOICE);
    ck_assert_str_eq(last_logged()->constraint, "[\"a\",\"b\"]");
    j = post_json("/v1/completions", "{\"prompt\":\"hi\",\"regex\":\"a+\"}", 200);
    json_decref(j);
    ck_assert_int_eq(last_logged()->req.constraint_type, PAGODA_CONSTRAINT_REGEX);
    ck_assert(!last_logged()->req.constraint_strict);
    j = post_json("/v1/completions", "{\"prompt\":\"hi\",\"response_format\":{\"type\":\"text\"}}", 200);
    json_decref(j);
    ck_assert_int_eq(last_logged()->req.constraint_type, 0);
    ck_assert_ptr_null(last_logged()->constraint);
    /* tool_choice required: a grammar of calls with the parameters schema */
    j = post_json("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]," TOOLS
                  ",\"tool_choice\":\"required\",\"max_tokens\":3}", 200);
    json_decref(j);
    l = last_logged();
    ck_assert_int_eq(l->req.constraint_type, PAGODA_CONSTRAINT_GRAMMAR);
    ck_assert_msg(strstr(l->constraint, "root ::= call (\"\\n\" call){0,7}\n"), "%s", l->constraint);
    ck_assert_msg(strstr(l->constraint, "fn0 ::= \"{\\\"name\\\": \\\"f\\\", \\\"arguments\\\": \" %json "
                                        "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}}} \"}\""),
                  "%s", l->constraint);
    j = post_json("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]," TOOLS
                  ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}},\"max_tokens\":3}", 200);
    json_decref(j);
    ck_assert_msg(strstr(last_logged()->constraint, "root ::= call\n"), "%s", last_logged()->constraint);
    /* auto (the default with tools): free text that cannot hold "<tool_call>"
     * except as the start of a call, then calls and text again */
    j = post_json("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]," TOOLS
                  ",\"max_tokens\":3}", 200);
    json_decref(j);
    l = last_logged();
    ck_assert_int_eq(l->req.constraint_type, PAGODA_CONSTRAINT_GRAMMAR);
    ck_assert_msg(strstr(l->constraint, "root ::= t0 (call t0){0,8}\n"), "%s", l->constraint);
    ck_assert_msg(strstr(l->constraint, "t0 ::= \"\" | [^<] t0 | \"<\" t1\n"), "%s", l->constraint);
    ck_assert_msg(strstr(l->constraint, "t1 ::= \"\" | \"t\" t2 | \"<\" t1 | [^t<] t0\n"), "%s", l->constraint);
    ck_assert_msg(strstr(l->constraint, "t10 ::= \"\" | \"<\" t1 | [^><] t0\n"), "%s", l->constraint);
    ck_assert_msg(strstr(l->constraint, "call ::= \"<tool_call>\\n\" (fn0"), "%s", l->constraint);
    j = post_json("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]," TOOLS
                  ",\"tool_choice\":\"auto\",\"parallel_tool_calls\":false,\"max_tokens\":3}", 200);
    json_decref(j);
    ck_assert_msg(strstr(last_logged()->constraint, "root ::= t0 (call t0){0,1}\n"), "%s", last_logged()->constraint);
    /* none: no constraint, no tools in the prompt */
    j = post_json("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]," TOOLS
                  ",\"tool_choice\":\"none\",\"max_tokens\":3}", 200);
    json_decref(j);
    ck_assert_int_eq(last_logged()->req.constraint_type, 0);
}
END_TEST

START_TEST(test_bad_fields)
{
    expect_400("/v1/completions", "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
               "{\"name\":\"n\",\"schema\":{\"description\":\"BAD\"}}}}", "response_format", "fake: the spec says BAD");
    expect_400("/v1/completions", "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\"}}", "response_format",
               "'response_format.json_schema' must be an object");
    expect_400("/v1/completions", "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
               "{\"name\":\"n\"}}}", "response_format", "schema' is required");
    expect_400("/v1/completions", "{\"prompt\":\"x\",\"response_format\":\"json\"}", "response_format", "must be an object");
    expect_400("/v1/completions", "{\"prompt\":\"x\",\"grammar\":7}", "grammar", "must be a string");
    expect_400("/v1/completions", "{\"prompt\":\"x\",\"choice\":[]}", "choice", "non-empty list");
    expect_400("/v1/completions", "{\"prompt\":\"x\",\"regex\":\"a\",\"grammar\":\"root ::= \\\"a\\\"\"}", "regex",
               "cannot be combined with 'grammar'");
    expect_400("/v1/completions", "{\"prompt\":\"x\",\"regex\":\"a\",\"echo\":true,\"max_tokens\":1}", "regex",
               "cannot be combined with 'echo'");
    expect_400("/v1/completions", "{\"prompt\":\"x\"," TOOLS "}", "tools", "for /v1/chat/completions");
    expect_400("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
               "\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"title\":\"BAD\"}}}],\"tool_choice\":\"none\"}",
               "tools", "tools[0].function.parameters: json_schema: fake: the spec says BAD");
    expect_400("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
               "\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
               "tools", "used twice");
    expect_400("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":{}}", "tools",
               "must be a list");
    expect_400("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]," TOOLS
               ",\"tool_choice\":\"always\"}", "tool_choice", "must be \"none\"");
    expect_400("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]," TOOLS
               ",\"response_format\":{\"type\":\"json_object\"}}", "response_format", "no way to call a tool");
    expect_400("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\","
               "\"tool_calls\":[{\"function\":{\"name\":3}}]}]}", "messages", "tool_calls[0] must be");
    ck_assert_int_eq(S.f->n_log, 0); /* none reached the engine */
}
END_TEST

START_TEST(test_rendering)
{
    json_t *j = post_json("/v1/chat/completions",
                          "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":"
                          "\"add\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":"
                          "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\": 1}\"}}]},{\"role\":"
                          "\"tool\",\"tool_call_id\":\"c1\",\"content\":\"5\"}]," TOOLS ",\"max_tokens\":2}", 200);
    json_decref(j);
    const char *p = last_logged()->prompt;
    /* the fake renders "<|role|>content\n" per message */
    ck_assert_msg(strstr(p, "<|system|>Be brief.\n\n# Tools\n\nYou may call these functions:\n<tools>\n"
                            "{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
                            "\"object\", \"properties\": {\"x\": {\"type\": \"integer\"}}}}}\n</tools>\n"), "%s", p);
    ck_assert_msg(strstr(p, "<|assistant|><tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"),
                  "%s", p);
    ck_assert_msg(strstr(p, "<|tool|><tool_response>\n5\n</tool_response>\n"), "%s", p);
    /* without tools the history still renders, and no tools block */
    j = post_json("/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"add\"},{\"role\":\"assistant\",\"tool_calls\":"
                  "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\","
                  "\"content\":\"5\"}],\"max_tokens\":2}", 200);
    json_decref(j);
    p = last_logged()->prompt;
    ck_assert_msg(!strstr(p, "# Tools") && strstr(p, "<tool_response>"), "%s", p);
}
END_TEST

/* The fake echoes the prompt: the user's block comes back as the model's
 * call; the tools block's example (not JSON) stays text. */
#define CALLING "{\"messages\":[{\"role\":\"user\",\"content\":\"ok <tool_call> {\\\"name\\\":\\\"f\\\"," \
                "\\\"arguments\\\":{\\\"x\\\":1}} </tool_call> done\"}]," TOOLS ",\"max_tokens\":90"

START_TEST(test_calls_read_back)
{
    json_t *j = post_json("/v1/chat/completions", CALLING "}", 200);
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    json_t *calls = json_object_get(msg, "tool_calls");
    ck_assert_int_eq(json_array_size(calls), 1);
    json_t *c = json_array_get(calls, 0);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(c, "function"), "name")), "f");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(c, "function"), "arguments")), "{\"x\":1}");
    ck_assert_str_eq(json_string_value(json_object_get(c, "type")), "function");
    ck_assert(!strncmp(json_string_value(json_object_get(c, "id")), "call_", 5));
    const char *content = json_string_value(json_object_get(msg, "content"));
    ck_assert_msg(content && strstr(content, "<tool_call> {\"name\": <function-name>,") && strstr(content, "done"),
                  "%s", content ? content : "(null)");
    ck_assert_msg(!strstr(content, "\"name\":\"f\""), "the call stayed in the content: %s", content);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0),
                                                       "finish_reason")), "tool_calls");
    json_decref(j);

    /* streamed: one tool_calls delta, the content deltas the same text */
    long st;
    char *b = post("/v1/chat/completions", CALLING ",\"stream\":true}", &st);
    ck_assert_int_eq(st, 200);
    int n_calls = 0;
    char text[16384] = "";
    const char *fin = NULL;
    json_t *last = NULL;
    for (char *line = strstr(b, "data: {"); line; line = strstr(line + 1, "data: {")) {
        char *end = strstr(line, "\n\n");
        json_t *ch = json_loadb(line + 6, (size_t)(end - line - 6), 0, NULL);
        json_t *c0 = json_array_get(json_object_get(ch, "choices"), 0);
        json_t *d = json_object_get(c0, "delta");
        json_t *tc = json_object_get(d, "tool_calls");
        if (tc) {
            n_calls++;
            ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(tc, 0), "index")), 0);
            ck_assert_str_eq(json_string_value(json_object_get(json_object_get(json_array_get(tc, 0), "function"),
                                                               "arguments")), "{\"x\":1}");
        }
        const char *piece = json_string_value(json_object_get(d, "content"));
        if (piece) strncat(text, piece, sizeof text - strlen(text) - 1);
        if (json_is_string(json_object_get(c0, "finish_reason"))) {
            json_decref(last);
            last = json_incref(json_object_get(c0, "finish_reason"));
        }
        json_decref(ch);
    }
    fin = last ? json_string_value(last) : "";
    ck_assert_int_eq(n_calls, 1);
    ck_assert_str_eq(fin, "tool_calls");
    ck_assert_msg(strstr(text, "<tool_call> {\"name\": <function-name>,") && strstr(text, " done"), "%s", text);
    ck_assert_msg(!strstr(text, "\"name\":\"f\""), "%s", text);
    json_decref(last);
    free(b);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("http_tools");
    TCase *tc = tcase_create("fields");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_fields_to_request);
    tcase_add_test(tc, test_bad_fields);
    tcase_add_test(tc, test_rendering);
    tcase_add_test(tc, test_calls_read_back);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }

#else
int main(void)
{
    printf("test_http_tools: built without libcurl; skipped\n");
    return 77;
}
#endif
