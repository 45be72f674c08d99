/*
 * http_structured.c: structured output and tool calls over HTTP, against
 * the real server binary on the bundled stories260K model (which knows no
 * JSON: the token mask alone makes its outputs valid). Checks, on both
 * endpoints: response_format json_schema / json_object, grammar, regex,
 * choice and vLLM's guided_* names; n > 1; streaming; tools with
 * tool_choice "required", a named function and "auto" (tool_calls, finish_reason
 * "tool_calls", streamed deltas, the call sent back with a "tool" message);
 * bad input (malformed schema, recursion without a base case, a grammar
 * accepting nothing, a catastrophic regex, a 1 MiB schema, tools with a bad
 * parameters schema): a 400 naming the field and the problem, while a
 * generation in flight goes on undisturbed.
 * Not for: the constraint engine's own correctness (tests/unit/test_constraint.c)
 * or the randomized schema test (tests/unit/test_structured.c).
 *
 * Environment (set by ctest): PAGODA_BIN, PAGODA_SOURCE_DIR.
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "integ_util.h"

static server g_srv;

/* ------------------------------------------------------------ HTTP */

static void post(const char *path, const char *body, resp *r) { http(&g_srv, "POST", path, body, -1, NULL, r); }

/* POST a JSON value (stolen) */
static void post_j(const char *path, json_t *body, resp *r)
{
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    post(path, s, r);
    free(s);
}

static const char *err_msg(const resp *r)
{
    json_t *m = json_object_get(json_object_get(r->json, "error"), "message");
    return json_is_string(m) ? json_string_value(m) : "";
}

static const char *err_param(const resp *r)
{
    json_t *m = json_object_get(json_object_get(r->json, "error"), "param");
    return json_is_string(m) ? json_string_value(m) : "";
}

static json_t *choice0(const resp *r) { return json_array_get(json_object_get(r->json, "choices"), 0); }

static const char *chat_content(const resp *r)
{
    json_t *c = json_object_get(json_object_get(choice0(r), "message"), "content");
    return json_is_string(c) ? json_string_value(c) : NULL;
}

static const char *finish(const resp *r)
{
    json_t *f = json_object_get(choice0(r), "finish_reason");
    return json_is_string(f) ? json_string_value(f) : "";
}

/* ------------------------------------------------------------ cases */

#define PERSON "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8}," \
               "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},\"pet\":{\"enum\":" \
               "[\"cat\",\"dog\",null]}},\"required\":[\"name\",\"age\"],\"additionalProperties\":false}"

static void check_person(const char *text, const char *what)
{
    json_t *v = text ? json_loads(text, 0, NULL) : NULL;
    CHECK(json_is_object(v), "%s: not a JSON object: %s", what, text ? text : "(null)");
    if (!v) return;
    json_t *name = json_object_get(v, "name"), *age = json_object_get(v, "age");
    CHECK(json_is_string(name) && json_string_length(name) <= 8, "%s: name in %s", what, text);
    CHECK(json_is_integer(age) && json_integer_value(age) >= 0 && json_integer_value(age) <= 120,
          "%s: age in %s", what, text);
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) CHECK(!strcmp(k, "name") || !strcmp(k, "age") || !strcmp(k, "pet"),
                                       "%s: extra key %s", what, k);
    json_decref(v);
}

static void test_response_format(void)
{
    for (int seed = 1; seed <= 4; seed++) {
        resp r;
        char body[2048];
        snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"A person, as JSON\"}],"
                 "\"temperature\":1,\"seed\":%d,\"max_tokens\":300,\"response_format\":{\"type\":"
                 "\"json_schema\",\"json_schema\":{\"name\":\"person\",\"strict\":true,\"schema\":" PERSON "}}}", seed);
        post("/v1/chat/completions", body, &r);
        CHECK(r.status == 200, "chat json_schema: %ld %s", r.status, r.body.p);
        CHECK(!strcmp(finish(&r), "stop"), "finish %s", finish(&r));
        check_person(chat_content(&r), "chat json_schema");
        resp_free(&r);
        /* completions, n = 2 */
        snprintf(body, sizeof body, "{\"prompt\":\"Once upon a time\",\"temperature\":1,\"seed\":%d,"
                 "\"max_tokens\":300,\"n\":2,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                 "{\"name\":\"person\",\"schema\":" PERSON "}}}", seed);
        post("/v1/completions", body, &r);
        CHECK(r.status == 200, "completions json_schema: %ld %s", r.status, r.body.p);
        for (int i = 0; i < 2; i++) {
            json_t *c = json_array_get(json_object_get(r.json, "choices"), (size_t)i);
            json_t *t = json_object_get(c, "text");
            check_person(json_string_value(t), "completions json_schema n=2");
        }
        resp_free(&r);
    }
    resp r;
    post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"JSON\"}],\"temperature\":0,"
         "\"max_tokens\":200,\"response_format\":{\"type\":\"json_object\"}}", &r);
    CHECK(r.status == 200, "json_object: %ld %s", r.status, r.body.p);
    if (!strcmp(finish(&r), "stop")) {
        json_t *v = json_loads(chat_content(&r), 0, NULL);
        CHECK(json_is_object(v), "json_object output: %s", chat_content(&r));
        json_decref(v);
    }
    resp_free(&r);
    /* text: no constraint */
    post("/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":5,\"response_format\":{\"type\":\"text\"}}", &r);
    CHECK(r.status == 200, "text: %ld %s", r.status, r.body.p);
    resp_free(&r);
}

static void test_grammar_regex_choice(void)
{
    resp r;
    post("/v1/completions", "{\"prompt\":\"Once upon a time\",\"temperature\":1,\"max_tokens\":60,\"seed\":5,"
         "\"grammar\":\"root ::= \\\"Mood: \\\" (\\\"happy\\\" | \\\"sad\\\") \\\".\\\"\"}", &r);
    CHECK(r.status == 200, "grammar: %ld %s", r.status, r.body.p);
    const char *t = json_string_value(json_object_get(choice0(&r), "text"));
    CHECK(t && (!strcmp(t, "Mood: happy.") || !strcmp(t, "Mood: sad.")), "grammar output %s", t ? t : "");
    CHECK(!strcmp(finish(&r), "stop"), "finish %s", finish(&r));
    resp_free(&r);
    post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"pick\"}],\"temperature\":1,"
         "\"max_tokens\":20,\"choice\":[\"red\",\"green\",\"blue\"]}", &r);
    const char *c = chat_content(&r);
    CHECK(r.status == 200 && c && (!strcmp(c, "red") || !strcmp(c, "green") || !strcmp(c, "blue")),
          "choice: %ld %s", r.status, r.body.p);
    resp_free(&r);
    post("/v1/completions", "{\"prompt\":\"Call\",\"temperature\":1,\"max_tokens\":30,"
         "\"guided_regex\":\"[0-9]{3}-[0-9]{4}\"}", &r);
    t = json_string_value(json_object_get(choice0(&r), "text"));
    CHECK(r.status == 200 && t && strlen(t) == 8 && t[3] == '-', "guided_regex: %ld %s", r.status, r.body.p);
    resp_free(&r);
    /* stream a constrained completion: the chunks concatenate to a valid output */
    post("/v1/completions", "{\"prompt\":\"Once\",\"temperature\":1,\"max_tokens\":300,\"stream\":true,"
         "\"guided_json\":" PERSON "}", &r);
    CHECK(r.status == 200, "stream: %ld", r.status);
    char text[4096] = "";
    for (char *line = r.body.p ? strstr(r.body.p, "data: {") : NULL; line; line = strstr(line + 1, "data: {")) {
        char *end = strstr(line, "\n\n");
        json_t *j = json_loadb(line + 6, end ? (size_t)(end - line - 6) : strlen(line + 6), 0, NULL);
        const char *piece = json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
        if (piece && strlen(text) + strlen(piece) < sizeof text) strcat(text, piece);
        json_decref(j);
    }
    check_person(text, "streamed guided_json");
    resp_free(&r);
}

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"add\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":0,"
    "\"maximum\":99},\"b\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99}},\"required\":[\"a\",\"b\"],"
    "\"additionalProperties\":false}}}]";

static void check_call(json_t *call, const char *what)
{
    json_t *fn = json_object_get(call, "function");
    CHECK(json_is_string(json_object_get(call, "id")) &&
          !strncmp(json_string_value(json_object_get(call, "id")), "call_", 5), "%s: id", what);
    CHECK(json_is_string(json_object_get(call, "type")) &&
          !strcmp(json_string_value(json_object_get(call, "type")), "function"), "%s: type", what);
    CHECK(json_is_string(json_object_get(fn, "name")) &&
          !strcmp(json_string_value(json_object_get(fn, "name")), "add"), "%s: name", what);
    json_t *args = json_loads(json_string_value(json_object_get(fn, "arguments")), 0, NULL);
    json_t *a = json_object_get(args, "a"), *b = json_object_get(args, "b");
    CHECK(json_is_integer(a) && json_is_integer(b) && json_integer_value(a) <= 99 && json_integer_value(b) <= 99,
          "%s: arguments %s", what, json_string_value(json_object_get(fn, "arguments")));
    json_decref(args);
}

static void test_tools(void)
{
    json_t *tools = json_loads(TOOLS, 0, NULL);
    for (int mode = 0; mode < 3; mode++) {
        json_t *b = json_pack("{s:[{s:s,s:s}],s:i,s:f,s:i,s:O}", "messages", "role", "user", "content", "add 2 and 3",
                              "max_tokens", 90, "temperature", 1.0, "seed", 7 + mode, "tools", tools);
        if (mode == 0) {
            json_object_set_new(b, "tool_choice", json_string("required"));
            json_object_set_new(b, "parallel_tool_calls", json_false());
        } else {
            json_object_set_new(b, "tool_choice", json_pack("{s:s,s:{s:s}}", "type", "function", "function", "name", "add"));
        }
        if (mode == 2) json_object_set_new(b, "stream", json_true());
        resp r;
        post_j("/v1/chat/completions", b, &r);
        CHECK(r.status == 200, "tools mode %d: %ld %s", mode, r.status, r.body.p);
        if (mode < 2) {
            json_t *msg = json_object_get(choice0(&r), "message");
            json_t *calls = json_object_get(msg, "tool_calls");
            CHECK(json_array_size(calls) == 1, "tools mode %d: one call: %s", mode, r.body.p);
            check_call(json_array_get(calls, 0), "tool call");
            CHECK(json_is_null(json_object_get(msg, "content")), "content null: %s", r.body.p);
            CHECK(!strcmp(finish(&r), "tool_calls"), "finish %s", finish(&r));
            if (mode == 0 && calls) {
                /* the round trip: the call and its result go back in */
                /* (without the tools list, which stories260K's context has
                 * no room for twice) */
                json_t *b2 = json_pack("{s:[{s:s,s:s},{s:s,s:n,s:O},{s:s,s:s,s:s}],s:i,s:f}", "messages",
                                       "role", "user", "content", "add 2 and 3", "role", "assistant", "content",
                                       "tool_calls", calls, "role", "tool", "tool_call_id", "x", "content", "5",
                                       "max_tokens", 8, "temperature", 0.0);
                resp r2;
                post_j("/v1/chat/completions", b2, &r2);
                CHECK(r2.status == 200, "round trip: %ld %s", r2.status, r2.body.p);
                resp_free(&r2);
            }
        } else {
            int deltas = 0, role = 0;
            const char *fr = NULL;
            json_t *last = NULL;
            for (char *line = r.body.p ? strstr(r.body.p, "data: {") : NULL; line; line = strstr(line + 1, "data: {")) {
                char *end = strstr(line, "\n\n");
                json_t *j = json_loadb(line + 6, end ? (size_t)(end - line - 6) : strlen(line + 6), 0, NULL);
                json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
                json_t *d = json_object_get(ch, "delta");
                role += json_object_get(d, "role") != NULL;
                json_t *tc = json_object_get(d, "tool_calls");
                if (tc) {
                    deltas++;
                    CHECK(json_integer_value(json_object_get(json_array_get(tc, 0), "index")) == 0, "index");
                    check_call(json_array_get(tc, 0), "streamed call");
                }
                if (json_is_string(json_object_get(ch, "finish_reason"))) {
                    json_decref(last);
                    last = json_incref(json_object_get(ch, "finish_reason"));
                }
                json_decref(j);
            }
            fr = last ? json_string_value(last) : "";
            CHECK(role == 1 && deltas == 1, "stream: %d role chunks, %d tool_calls deltas: %s", role, deltas, r.body.p);
            CHECK(!strcmp(fr, "tool_calls"), "stream finish %s", fr);
            json_decref(last);
        }
        resp_free(&r);
    }
    /* "auto": constrained too (free text until a <tool_call> block opens,
     * then a call): whatever stories260K writes, every call read back is a
     * valid call of add, and the finish reason says whether it called */
    for (int k = 0; k < 4; k++) {
        json_t *b = json_pack("{s:[{s:s,s:s}],s:i,s:f,s:i,s:O,s:s}", "messages", "role", "user", "content",
                              "add 2 and 3", "max_tokens", 40, "temperature", 1.0, "seed", 70 + k, "tools", tools,
                              "tool_choice", "auto");
        resp r;
        post_j("/v1/chat/completions", b, &r);
        CHECK(r.status == 200, "auto: %ld %s", r.status, r.body.p);
        json_t *msg = json_object_get(choice0(&r), "message");
        json_t *calls = json_object_get(msg, "tool_calls");
        size_t i;
        json_t *call;
        json_array_foreach(calls, i, call) check_call(call, "auto call");
        const char *fr = finish(&r);
        CHECK(!strcmp(fr, json_array_size(calls) ? "tool_calls" : "stop") || !strcmp(fr, "length"),
              "auto: finish %s: %s", fr, r.body.p);
        CHECK(json_array_size(calls) || json_is_string(json_object_get(msg, "content")), "auto: %s", r.body.p);
        resp_free(&r);
    }
    json_decref(tools);
}

/* A generation in flight while bad requests come: they are answered at
 * once and it finishes as if alone. It is streamed, so that the bad
 * requests start after its first token (an event, not a fixed delay). */
typedef struct bg_gen {
    buf body;
    long status;
    atomic_int started; /* a first event arrived */
} bg_gen;

static size_t bg_data(char *p, size_t sz, size_t nm, void *ud)
{
    bg_gen *g = ud;
    buf_put(&g->body, p, sz * nm);
    if (strstr(g->body.p, "data: ")) atomic_store(&g->started, 1);
    return sz * nm;
}

static void *long_gen(void *arg)
{
    bg_gen *g = arg;
    struct curl_slist *hl = NULL;
    CURL *c = easy_for(&g_srv, "POST", "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":200,"
                       "\"temperature\":0,\"ignore_eos\":true,\"stream\":true,"
                       "\"stream_options\":{\"include_usage\":true}}", -1, NULL, &hl);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, bg_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, g);
    curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &g->status);
    curl_easy_cleanup(c);
    curl_slist_free_all(hl);
    atomic_store(&g->started, 1); /* also when it failed: the waiter goes on */
    return NULL;
}

static void expect_400(const char *path, const char *body, const char *param, const char *msg)
{
    resp r;
    post(path, body, &r);
    CHECK(r.status == 400, "%.80s: status %ld %s", body, r.status, r.body.p);
    CHECK(!strcmp(err_param(&r), param), "%.80s: param '%s', wanted '%s'", body, err_param(&r), param);
    CHECK(strstr(err_msg(&r), msg), "%.80s: message '%s' lacks '%s'", body, err_msg(&r), msg);
    CHECK(r.secs < 10.0, "%.80s: took %.1f s", body, r.secs);
    resp_free(&r);
}

static void test_bad_input(void)
{
    static bg_gen bg;
    pthread_t th;
    pthread_create(&th, NULL, long_gen, &bg);
    for (int i = 0; i < 3000 && !atomic_load(&bg.started); i++) msleep(10); /* bounded: 30 s */
    CHECK(atomic_load(&bg.started), "no token of the generation beside the bad requests in 30 s");
    expect_400("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":"
               "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"object\","
               "\"properties\":{\"a\":{\"type\":\"strng\"}}}}}}", "response_format", "#/properties/a: 'type' \"strng\"");
    expect_400("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":"
               "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"$defs\":{\"n\":{\"type\":"
               "\"object\",\"properties\":{\"next\":{\"$ref\":\"#/$defs/n\"}},\"required\":[\"next\"]}},\"$ref\":"
               "\"#/$defs/n\"}}}}", "response_format", "accepts no output: '#/$defs/n'");
    expect_400("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":"
               "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"strict\":true,\"schema\":{\"type\":"
               "\"array\",\"contains\":{\"type\":\"integer\"}}}}}", "response_format", "unsupported keyword 'contains'");
    expect_400("/v1/completions", "{\"prompt\":\"x\",\"grammar\":\"root ::= a\\na ::= \\\"x\\\" a\"}", "grammar",
               "accepts no output");
    expect_400("/v1/completions", "{\"prompt\":\"x\",\"grammar\":\"root ::= [\"}", "grammar", "unterminated");
    expect_400("/v1/completions", "{\"prompt\":\"x\",\"regex\":\"(a)\\\\1\"}", "regex", "backreferences");
    expect_400("/v1/completions", "{\"prompt\":\"x\",\"regex\":\"a\",\"choice\":[\"b\"]}", "choice", "cannot be combined");
    expect_400("/v1/completions", "{\"prompt\":\"x\",\"response_format\":{\"type\":\"yaml\"}}", "response_format",
               "\"yaml\" is not one of");
    expect_400("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
               "\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
               "{\"a\":{\"$ref\":\"#/$defs/missing\"}}}}}]}", "tools", "tools[0].function.parameters");
    expect_400("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
               "\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
               "{\"a\":{\"type\":7}}}}}],\"tool_choice\":\"auto\"}", "tools", "must be a type name");
    expect_400("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
               "\"function\",\"function\":{\"name\":\"f g\"}}]}", "tools", "letters, digits");
    expect_400("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":"
               "\"required\"}", "tool_choice", "needs 'tools'");
    expect_400("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
               "\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":\"function\",\"function\":"
               "{\"name\":\"g\"}}}", "tool_choice", "names 'g'");
    /* a catastrophic regex is an ordinary automaton: 200, at once */
    resp r;
    post("/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":20,\"temperature\":1,\"regex\":\"(a+)+$|(x+x+)+y\"}", &r);
    CHECK(r.status == 200 && r.secs < 10.0, "catastrophic regex: %ld in %.1f s %s", r.status, r.secs, r.body.p);
    resp_free(&r);
    /* a 1 MiB schema: over max_spec_bytes */
    size_t big = 1 << 20;
    char *body = malloc(big + 512);
    int k = snprintf(body, 512, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                     "{\"name\":\"big\",\"schema\":{\"type\":\"object\",\"description\":\"");
    memset(body + k, 'x', big);
    strcpy(body + k + big, "\"}}}}");
    expect_400("/v1/completions", body, "response_format", "more than the limit of 262144");
    free(body);
    pthread_join(th, NULL);
    /* all 200 tokens (the usage chunk says so), ended by "length" */
    CHECK(bg.status == 200 && bg.body.p && strstr(bg.body.p, "\"finish_reason\":\"length\"") &&
              strstr(bg.body.p, "\"completion_tokens\":200") && strstr(bg.body.p, "data: [DONE]"),
          "the generation beside the bad requests: %ld: %.300s", bg.status, bg.body.p ? bg.body.p : "");
    free(bg.body.p);
}

int main(void)
{
    if (integ_init("structured", 600)) return 2;
    static const char *const sets[] = {"engine.max_seq_len=512", "engine.kv_cache_tokens=8192",
                                       "frontend.http.max_body_bytes=4M", NULL};
    if (server_start(&g_srv, "server", sets) < 0) {
        CHECK(0, "the server did not start");
        return integ_finish();
    }
    test_response_format();
    test_grammar_regex_choice();
    test_tools();
    test_bad_input();
    int wst = server_stop(&g_srv, SIGTERM);
    CHECK(wst != -1 && WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "server exit status %d", wst);
    if (g_fail) print_log_tail(&g_srv);
    return integ_finish();
}
