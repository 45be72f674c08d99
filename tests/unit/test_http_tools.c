/* test_http_tools.c: the HTTP frontend's structured-output fields and
 * tool calls (plugins/frontend/http/structured.c) against the fake engine
 * (fake_engine.h), which echoes the rendered prompt word by word: what
 * each field becomes in the submitted request (constraint type and text,
 * the prompt with tools, tool calls and tool results rendered Hermes-style),
 * the 400s of bad fields, and <tool_call> blocks in the output read back as
 * tool_calls, whole and streamed; per family, the history's calls and
 * results, the "auto" grammar, and a call the model wrote coming back in
 * the history as written (the call memo). The real engine's side is
 * tests/integration/http_structured.c. */
#include "http_testutil.h"
#include "plugin_loader.h"

#ifdef PAGODA_HAVE_CURL

static srv S;

static void setup(void) { srv_start(&S, NULL, 0); }
static void teardown(void) { srv_stop(&S); }

/* POST that must answer want with a JSON body. */
static json_t *post_expect(const char *path, const char *json, long want)
{
    long st;
    json_t *j = post_json(&S, path, json, &st);
    ck_assert_msg(st == want, "%s -> %ld, want %ld", json, st, want);
    return j;
}

static const fake_logged *last_logged(void)
{
    ck_assert_int_gt(S.f->n_log, 0);
    return &S.f->log[S.f->n_log - 1];
}

static void expect_400(const char *path, const char *json, const char *param, const char *needle)
{
    expect_error(&S, path, json, 400, needle, param);
}

#define TOOLS "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":" \
              "\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}}}}}]"

START_TEST(test_fields_to_request)
{
    json_t *j = post_expect("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                          "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"strict\":true,"
                          "\"schema\":{\"type\":\"object\",\"properties\":{\"b\":{},\"a\":{}}}}}}", 200);
    json_decref(j);
    const fake_logged *l = last_logged();
    ck_assert_int_eq(l->req.constraint_type, PAGODA_CONSTRAINT_JSON_SCHEMA);
    ck_assert(l->req.constraint_strict);
    /* the schema as given, properties in their order */
    ck_assert_str_eq(l->constraint, "{\"type\":\"object\",\"properties\":{\"b\":{},\"a\":{}}}");
    j = post_expect("/v1/completions", "{\"prompt\":\"hi\",\"response_format\":{\"type\":\"json_object\"}}", 200);
    json_decref(j);
    ck_assert_int_eq(last_logged()->req.constraint_type, PAGODA_CONSTRAINT_JSON_OBJECT);
    j = post_expect("/v1/completions", "{\"prompt\":\"hi\",\"guided_choice\":[\"a\",\"b\"]}", 200);
    json_decref(j);
    ck_assert_int_eq(last_logged()->req.constraint_type, PAGODA_CONSTRAINT_CHOICE);
    ck_assert_str_eq(last_logged()->constraint, "[\"a\",\"b\"]");
    j = post_expect("/v1/completions", "{\"prompt\":\"hi\",\"regex\":\"a+\"}", 200);
    json_decref(j);
    ck_assert_int_eq(last_logged()->req.constraint_type, PAGODA_CONSTRAINT_REGEX);
    ck_assert(!last_logged()->req.constraint_strict);
    j = post_expect("/v1/completions", "{\"prompt\":\"hi\",\"response_format\":{\"type\":\"text\"}}", 200);
    json_decref(j);
    ck_assert_int_eq(last_logged()->req.constraint_type, 0);
    ck_assert_ptr_null(last_logged()->constraint);
    /* tool_choice required: a grammar of calls with the parameters schema */
    j = post_expect("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]," TOOLS
                  ",\"tool_choice\":\"required\",\"max_tokens\":3}", 200);
    json_decref(j);
    l = last_logged();
    ck_assert_int_eq(l->req.constraint_type, PAGODA_CONSTRAINT_GRAMMAR);
    ck_assert_msg(strstr(l->constraint, "root ::= call (\"\\n\" call){0,7}\n"), "%s", l->constraint);
    ck_assert_msg(strstr(l->constraint, "fn0 ::= \"{\\\"name\\\": \\\"f\\\", \\\"arguments\\\": \" %json "
                                        "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}}} \"}\""),
                  "%s", l->constraint);
    j = post_expect("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]," TOOLS
                  ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}},\"max_tokens\":3}", 200);
    json_decref(j);
    ck_assert_msg(strstr(last_logged()->constraint, "root ::= call\n"), "%s", last_logged()->constraint);
    /* auto (the default with tools): free text that cannot hold "<tool_call>"
     * except as the start of a call, then calls and text again */
    j = post_expect("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]," TOOLS
                  ",\"max_tokens\":3}", 200);
    json_decref(j);
    l = last_logged();
    ck_assert_int_eq(l->req.constraint_type, PAGODA_CONSTRAINT_GRAMMAR);
    ck_assert_msg(strstr(l->constraint, "root ::= t0 (call t0){0,8}\n"), "%s", l->constraint);
    ck_assert_msg(strstr(l->constraint, "t0 ::= \"\" | \"<\" t1 | [^<] t0\n"), "%s", l->constraint);
    ck_assert_msg(strstr(l->constraint, "t1 ::= \"\" | \"<\" t1 | \"t\" t2 | [^<t] t0\n"), "%s", l->constraint);
    ck_assert_msg(strstr(l->constraint, "t10 ::= \"\" | \"<\" t1 | [^<>] t0\n"), "%s", l->constraint);
    ck_assert_msg(strstr(l->constraint, "call ::= <tool_call> \"\\n\" (fn0"), "%s", l->constraint);
    j = post_expect("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]," TOOLS
                  ",\"tool_choice\":\"auto\",\"parallel_tool_calls\":false,\"max_tokens\":3}", 200);
    json_decref(j);
    ck_assert_msg(strstr(last_logged()->constraint, "root ::= t0 (call t0){0,1}\n"), "%s", last_logged()->constraint);
    /* none: no constraint, no tools in the prompt */
    j = post_expect("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]," TOOLS
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
    /* arguments text that is no JSON would be lost from the prompt: refused */
    expect_400("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\","
               "\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{x: 1\"}}]}]}", "messages",
               "tool_calls[0].function.arguments is not JSON");
    ck_assert_int_eq(S.f->n_log, 0); /* none reached the engine */
}
END_TEST

START_TEST(test_rendering)
{
    json_t *j = post_expect("/v1/chat/completions",
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
    j = post_expect("/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"add\"},{\"role\":\"assistant\",\"tool_calls\":"
                  "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\","
                  "\"content\":\"5\"}],\"max_tokens\":2}", 200);
    json_decref(j);
    p = last_logged()->prompt;
    ck_assert_msg(!strstr(p, "# Tools") && strstr(p, "<tool_response>"), "%s", p);
}
END_TEST

/* tool_choice "none" keeps the tools in the prompt (it only stops reading
 * calls back): a turn that sets it renders the same prompt as "auto", so
 * the earlier turns' KV is reused; a <tool_call> written then stays text. */
START_TEST(test_tool_choice_none_keeps_prefix)
{
    static const char conv[] = "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\","
                               "\"content\":\"q <tool_call> {\\\"name\\\":\\\"f\\\"} </tool_call>\"}]," TOOLS
                               ",\"max_tokens\":90,\"tool_choice\":";
    char body[2048];
    snprintf(body, sizeof body, "%s\"auto\"}", conv);
    json_decref(post_expect("/v1/chat/completions", body, 200));
    char *with_auto = strdup(last_logged()->prompt);
    snprintf(body, sizeof body, "%s\"none\"}", conv);
    json_t *j = post_expect("/v1/chat/completions", body, 200);
    ck_assert_str_eq(last_logged()->prompt, with_auto);
    ck_assert_ptr_nonnull(strstr(with_auto, "# Tools"));
    ck_assert_ptr_null(jget(j, "choices.0.message.tool_calls"));
    ck_assert_ptr_nonnull(strstr(jget_str(j, "choices.0.message.content"), "<tool_call>"));
    json_decref(j);
    free(with_auto);
}
END_TEST

/* The fake echoes the prompt: the user's block comes back as the model's
 * call; the tools block's example (not JSON) stays text. */
#define CALLING "{\"messages\":[{\"role\":\"user\",\"content\":\"ok <tool_call> {\\\"name\\\":\\\"f\\\"," \
                "\\\"arguments\\\":{\\\"x\\\":1}} </tool_call> done\"}]," TOOLS ",\"max_tokens\":90"

START_TEST(test_calls_read_back)
{
    json_t *j = post_expect("/v1/chat/completions", CALLING "}", 200);
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
    const char *streamed = CALLING ",\"stream\":true}";
    resp r = {0};
    http_req(&S, "POST", "/v1/chat/completions", streamed, strlen(streamed), NULL, &r, 0);
    ck_assert_int_eq(r.status, 200);
    char *b = r.body;
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

/* Template options reach the template (chat_render_opts): OpenAI's
 * reasoning_effort, chat_template_kwargs, Messages' thinking and
 * Responses' reasoning.effort; bad values are 400s naming the field. */
START_TEST(test_template_options)
{
    static const char *const ok[][3] = {
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"chat_template_kwargs\":"
                                 "{\"enable_thinking\":false}}", "0|"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"reasoning_effort\":\"high\"}",
         "-1|high"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"reasoning_effort\":\"low\","
                                 "\"chat_template_kwargs\":{\"thinking\":true,\"reasoning_effort\":\"medium\"}}", "1|medium"},
        {"/v1/messages", "{\"max_tokens\":8,\"thinking\":{\"type\":\"disabled\"},\"messages\":[{\"role\":\"user\","
                         "\"content\":\"hi\"}]}", "0|"},
        {"/v1/messages", "{\"max_tokens\":8,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024},\"messages\":"
                         "[{\"role\":\"user\",\"content\":\"hi\"}]}", "1|"},
        {"/v1/responses", "{\"input\":\"hi\",\"reasoning\":{\"effort\":\"low\"}}", "-1|low"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int before = S.f->render_opts_calls;
        json_decref(post_expect(ok[i][0], ok[i][1], 200));
        char got[48];
        pthread_mutex_lock(&S.f->mu);
        snprintf(got, sizeof got, "%d|%s", S.f->last_enable_thinking, S.f->last_effort);
        int calls = S.f->render_opts_calls;
        pthread_mutex_unlock(&S.f->mu);
        ck_assert_msg(calls > before, "%s: no chat_render_opts call", ok[i][1]);
        ck_assert_msg(!strcmp(got, ok[i][2]), "%s: got %s, want %s", ok[i][1], got, ok[i][2]);
    }
    /* no options: the plain chat_render */
    int before = S.f->render_opts_calls;
    json_decref(post_expect("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 200));
    ck_assert_int_eq(S.f->render_opts_calls, before);
    expect_400("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"reasoning_effort\":\"max\"}",
               "reasoning_effort", "'reasoning_effort' must be \"low\", \"medium\" or \"high\"");
    expect_400("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
               "\"chat_template_kwargs\":{\"enable_thinking\":\"no\"}}",
               "chat_template_kwargs.enable_thinking", "must be true or false");
    expect_400("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"chat_template_kwargs\":[]}",
               "chat_template_kwargs", "must be an object");
}
END_TEST

/* --------------------------------------------------- harmony (gpt-oss) */

/* The fake's template in harmony's shape: user turns only (the echo then
 * starts with the user's text) and the generation prompt <|start|>assistant,
 * which the frontend's probe reads as the harmony family. */
static int harmony_render(const pagoda_host *h, const pagoda_chat_message *msgs, int32_t n, bool gen, char **out,
                          int32_t *stop_ids, int32_t cap, int32_t *n_stop)
{
    pagoda_chat_message users[16];
    int32_t k = 0;
    for (int32_t i = 0; i < n && k < 16; i++)
        if (!strcmp(msgs[i].role, "user")) users[k++] = msgs[i];
    int st = fake_chat_render(h, users, k, false, out, stop_ids, cap, n_stop);
    if (st || !gen) return st;
    size_t l = strlen(*out);
    char *s = realloc(*out, l + 32);
    ck_assert_ptr_nonnull(s);
    strcpy(s + l, "<|start|>assistant");
    *out = s;
    return PAGODA_OK;
}

static void harmony_tweak(fake_engine *f) { f->host.chat_render = harmony_render; }
static void setup_harmony(void) { srv_start_with(&S, NULL, 0, harmony_tweak); }

#define HARMONY_ANSWER "{\"messages\":[{\"role\":\"user\",\"content\":\"<|channel|>analysis<|message|>Thinking" \
                       "<|end|><|start|>assistant<|channel|>final<|message|>Hello world\"}]"

/* The analysis channel is reasoning, the final channel the content, and no
 * harmony markup reaches either, whole or streamed. */
START_TEST(test_harmony_channels)
{
    json_t *j = post_expect("/v1/chat/completions", HARMONY_ANSWER "}", 200);
    json_t *msg = jget(j, "choices.0.message");
    /* the echo puts a space before the probe's last word, <|start|>assistant */
    ck_assert_str_eq(json_string_value(json_object_get(msg, "content")), "Hello world ");
    ck_assert_str_eq(json_string_value(json_object_get(msg, "reasoning_content")), "Thinking");
    json_decref(j);

    const char *streamed = HARMONY_ANSWER ",\"stream\":true}";
    resp r = {0};
    http_req(&S, "POST", "/v1/chat/completions", streamed, strlen(streamed), NULL, &r, 0);
    ck_assert_int_eq(r.status, 200);
    json_t *chunks[64];
    int done = 0, n = parse_sse(r.body, chunks, 64, &done);
    ck_assert(done);
    char text[256] = "", reason[256] = "";
    for (int i = 0; i < n; i++) {
        json_t *d = jget(chunks[i], "choices.0.delta");
        const char *c = json_string_value(json_object_get(d, "content"));
        const char *rc = json_string_value(json_object_get(d, "reasoning_content"));
        if (c) strncat(text, c, sizeof text - strlen(text) - 1);
        if (rc) strncat(reason, rc, sizeof reason - strlen(reason) - 1);
        json_decref(chunks[i]);
    }
    ck_assert_str_eq(text, "Hello world ");
    ck_assert_str_eq(reason, "Thinking");
    free(r.body);

    /* Messages: a thinking block, then the text */
    j = post_expect("/v1/messages", "{\"max_tokens\":64,\"messages\":[{\"role\":\"user\",\"content\":"
                    "\"<|channel|>analysis<|message|>Hmm<|end|><|start|>assistant<|channel|>final<|message|>Yes\"}]}",
                    200);
    ck_assert_str_eq(jget_str(j, "content.0.type"), "thinking");
    ck_assert_str_eq(jget_str(j, "content.0.thinking"), "Hmm");
    ck_assert_str_eq(jget_str(j, "content.1.type"), "text");
    ck_assert_str_eq(jget_str(j, "content.1.text"), "Yes ");
    json_decref(j);
}
END_TEST

/* A call on the commentary channel (to=functions.f) is a tool call. */
START_TEST(test_harmony_call)
{
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"<|channel|>commentary to=functions.f "
                       "<|constrain|>json<|message|>{\\\"x\\\":1}<|call|>\"}]," TOOLS "}";
    json_t *j = post_expect("/v1/chat/completions", body, 200);
    json_t *calls = jget(j, "choices.0.message.tool_calls");
    ck_assert_int_eq(json_array_size(calls), 1);
    ck_assert_str_eq(jget_str(j, "choices.0.message.tool_calls.0.function.name"), "f");
    ck_assert_str_eq(jget_str(j, "choices.0.message.tool_calls.0.function.arguments"), "{\"x\":1}");
    ck_assert(json_is_null(jget(j, "choices.0.message.content")));
    ck_assert_str_eq(jget_str(j, "choices.0.finish_reason"), "tool_calls");
    json_decref(j);
}
END_TEST

/* The fake's template with another family's generation prompt (which the
 * frontend's probe reads): the history's tool calls and results are then
 * written in that family's syntax, and the tools block shows its call. */
static const char *g_gen_prompt;
static const char *g_chat_family; /* model_info's template name; NULL: chatml */

static int family_render(const pagoda_host *h, const pagoda_chat_message *msgs, int32_t n, bool gen, char **out,
                         int32_t *stop_ids, int32_t cap, int32_t *n_stop)
{
    int st = fake_chat_render(h, msgs, n, false, out, stop_ids, cap, n_stop);
    if (st || !gen) return st;
    size_t l = strlen(*out);
    char *s = realloc(*out, l + strlen(g_gen_prompt) + 1);
    ck_assert_ptr_nonnull(s);
    strcpy(s + l, g_gen_prompt);
    *out = s;
    return PAGODA_OK;
}

static void family_tweak(fake_engine *f)
{
    f->host.chat_render = family_render;
    snprintf(f->chat_template, sizeof f->chat_template, "%s", g_chat_family ? g_chat_family : "chatml");
}

/* room for ten tools' system prompt (test_family_auto's sizes) */
static void family_big_tweak(fake_engine *f)
{
    family_tweak(f);
    f->n_ctx = 4096;
}

/* Qwen3's and QwQ's tools text: their templates' own words around the
 * tools (renders.json's "tools with/without a system message" cases show
 * the renderer turning these messages into the templates' text); QwQ's
 * blank line comes before it even without a system message */
START_TEST(test_qwen_tools_text)
{
#define QWEN_TOOLS "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are " \
                   "provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": " \
                   "\"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", " \
                   "\"properties\": {\"x\": {\"type\": \"integer\"}}}}}\n</tools>\n\nFor each function call, " \
                   "return a json object with function name and arguments within <tool_call></tool_call> XML " \
                   "tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n" \
                   "</tool_call>\n<|user|>add\n"
    static const struct {
        const char *family, *sys, *want;
    } cases[] = {
        {"qwen3", "{\"role\":\"system\",\"content\":\"Be brief.\"},", "<|system|>Be brief.\n\n" QWEN_TOOLS},
        {"qwen3", "", "<|system|>" QWEN_TOOLS},
        {"chatml-think", "{\"role\":\"system\",\"content\":\"Be brief.\"},", "<|system|>Be brief.\n\n" QWEN_TOOLS},
        {"chatml-think", "", "<|system|>\n\n" QWEN_TOOLS},
    };
#undef QWEN_TOOLS
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        g_gen_prompt = "";
        g_chat_family = cases[i].family;
        srv_start_with(&S, NULL, 0, family_tweak);
        char b[512];
        snprintf(b, sizeof b, "{\"messages\":[%s{\"role\":\"user\",\"content\":\"add\"}]," TOOLS ",\"max_tokens\":2}",
                 cases[i].sys);
        json_decref(post_expect("/v1/chat/completions", b, 200));
        const char *p = last_logged()->prompt;
        ck_assert_msg(!strncmp(p, cases[i].want, strlen(cases[i].want)), "%s, case %zu:\n got  '%s'\n want '%s'",
                      cases[i].family, i, p, cases[i].want);
        srv_stop(&S);
        g_chat_family = NULL;
    }
}
END_TEST

START_TEST(test_family_history)
{
    static const char body[] =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"add\"},{\"role\":\"assistant\",\"content\":null,"
        "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
        "\"{\\\"x\\\": 1}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"5\"}]," TOOLS
        ",\"max_tokens\":2}";
    static const struct {
        const char *gen, *call, *result, *example;
    } fam[] = {
        {"<|im_assistant|>assistant<|im_middle|>",
         "<|assistant|><|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>"
         "{\"x\": 1}<|tool_call_end|><|tool_calls_section_end|>\n",
         "<|tool|>## Return of functions.f:0\\n5\n", "<|tool_call_begin|>functions.<function-name>:0"},
        {"<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>",
         "<|assistant|><\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C><\xEF\xBD\x9Ctool"
         "\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>function<\xEF\xBD\x9Ctool\xE2\x96\x81sep\xEF\xBD\x9C>f"
         "\n```json\n{\"x\": 1}\n```",
         "<|tool|>5\n", "function<\xEF\xBD\x9Ctool\xE2\x96\x81sep\xEF\xBD\x9C><function-name>"},
        /* harmony: the tools as gpt-oss's TypeScript namespace, a message of its own */
        {"[INST]", "<|assistant|>[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"x\": 1}}]\n",
         "<|tool|><tool_response>\n5\n</tool_response>\n", "[TOOL_CALLS][{\"name\": <function-name>"},
        {"<|start|>assistant", "<|assistant to=functions.f|>{\"x\": 1}\n", "<|functions.f|>5\n",
         "<|tools|>## functions\n\nnamespace functions {\n\ntype f = (_: {\nx?: number,\n}) => any;\n\n"
         "} // namespace functions\n"},
        /* the XML families: the call as their templates write a past one, the
         * result bare (their templates wrap it in <tool_response>) */
        {"", "<|assistant|><tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>\n",
         "<|tool|>5\n", "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>"},
        {"[gMASK]<|assistant|>", "<|assistant|><tool_call>f\n<arg_key>x</arg_key>\n<arg_value>1</arg_value>\n</tool_call>\n",
         /* GLM-4.6's tools text, a system turn of its own before the conversation
          * (the fake renders no [gMASK]) */
         "<|tool|>5\n", "<|system|># Tools\n\nYou may call one or more functions to assist with the user query."
         "\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": "
         "\"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"properties\": "
         "{\"x\": {\"type\": \"integer\"}}}}}\n</tools>\n\nFor each function call, output the function name and "
         "arguments within the following XML format:\n<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n"
         "<arg_value>{arg-value-1}</arg_value>\n<arg_key>{arg-key-2}</arg_key>\n<arg_value>{arg-value-2}"
         "</arg_value>\n...\n</tool_call>\n<|user|>add\n"},
    };
    for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++) {
        g_gen_prompt = fam[i].gen;
        g_chat_family = i == 4 ? "qwen3-coder" : NULL; /* the probe cannot tell it from ChatML */
        srv_start_with(&S, NULL, 0, family_tweak);
        json_decref(post_expect("/v1/chat/completions", body, 200));
        const char *p = last_logged()->prompt;
        ck_assert_msg(strstr(p, fam[i].call), "%s: no call '%s' in %s", fam[i].gen, fam[i].call, p);
        ck_assert_msg(strstr(p, fam[i].result), "%s: no result '%s' in %s", fam[i].gen, fam[i].result, p);
        ck_assert_msg(strstr(p, fam[i].example), "%s: no example '%s' in %s", fam[i].gen, fam[i].example, p);
        ck_assert_msg(i >= 4 || !strstr(p, "<tool_call>"), "%s: Hermes markup in %s", fam[i].gen, p);
        ck_assert_msg(i < 4 || !strstr(p, "<tool_response>"), "%s: Hermes result in %s", fam[i].gen, p);
        ck_assert_msg(i < 4 || !strstr(p, "\"arguments\""), "%s: a Hermes call in %s", fam[i].gen, p);
        /* a list has no parameters to be written as: the XML families refuse it, the rest write it */
        static const char listed[] =
            "{\"messages\":[{\"role\":\"user\",\"content\":\"add\"},{\"role\":\"assistant\",\"content\":null,"
            "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
            "\"[1, 2]\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"5\"}]," TOOLS ",\"max_tokens\":2}";
        if (i >= 4) {
            expect_400("/v1/chat/completions", listed, "messages", "tool_calls[0].function.arguments must be a JSON object");
        } else {
            json_decref(post_expect("/v1/chat/completions", listed, 200));
            ck_assert_msg(strstr(last_logged()->prompt, "[1, 2]"), "%s: the listed arguments lost in %s", fam[i].gen,
                          last_logged()->prompt);
        }
        srv_stop(&S);
        g_chat_family = NULL;
    }
}
END_TEST

/* Mistral: an assistant turn of two calls is the template's one list,
 * [TOOL_CALLS][{a}, {b}], as the model writes it (not a [TOOL_CALLS] each). */
START_TEST(test_family_history_mistral_calls)
{
    static const char body[] =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"add\"},{\"role\":\"assistant\",\"content\":null,"
        "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
        "\"{\\\"x\\\": 1}\"}},{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"f\","
        "\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"5\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c2\",\"content\":\"6\"}]," TOOLS ",\"max_tokens\":2}";
    g_gen_prompt = "[INST]";
    srv_start_with(&S, NULL, 0, family_tweak);
    json_decref(post_expect("/v1/chat/completions", body, 200));
    const char *p = last_logged()->prompt;
    const char *want = "<|assistant|>[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"x\": 1}}, "
                       "{\"name\": \"f\", \"arguments\": {}}]\n";
    ck_assert_msg(strstr(p, want), "no '%s' in %s", want, p);
    ck_assert_msg(!strstr(p, "}][TOOL_CALLS]"), "a [TOOL_CALLS] a call in %s", p);
    srv_stop(&S);
}
END_TEST

/* Posts a chat whose history holds an assistant call of f with the
 * arguments {"x": X} (a client's spelling) and its result 5; returns the
 * prompt the server rendered. */
static const char *post_call_history(int x)
{
    char body[2048];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"add\"},{\"role\":"
                 "\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
                 "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\": %d}\"}}]},{\"role\":\"tool\","
                 "\"tool_call_id\":\"c1\",\"content\":\"5\"}]," TOOLS ",\"max_tokens\":2}", x);
    json_decref(post_expect("/v1/chat/completions", body, 200));
    return last_logged()->prompt;
}

/* The memo end to end (api/callmemo.h), per family: the fake "model"
 * echoes a call the user wrote in the family's syntax, not as the prompt
 * would render it; a history that sends that call back renders the
 * assistant turn with the model's own text; a call it did not write (other
 * arguments) renders canonically. */
START_TEST(test_family_call_memo)
{
#define DS_OPEN "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C><\xEF\xBD\x9Ctool" \
                "\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>"
#define DS_CLOSE "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C><\xEF\xBD\x9Ctool\xE2\x96\x81" \
                 "calls\xE2\x96\x81" "end\xEF\xBD\x9C>"
#define DS_SEP_ "<\xEF\xBD\x9Ctool\xE2\x96\x81sep\xEF\xBD\x9C>"
#define KIMI_OPEN "<|tool_calls_section_begin|><|tool_call_begin|>"
#define KIMI_CLOSE "<|tool_call_end|><|tool_calls_section_end|>"
    static const struct {
        const char *gen, *said, *history, *canonical;
    } fam[] = {
        {"<|assistant|>", "<tool_call>{\\\"name\\\":\\\"f\\\",\\\"arguments\\\":{\\\"x\\\":1}}</tool_call>",
         "<|assistant|><tool_call>{\"name\":\"f\",\"arguments\":{\"x\":1}}</tool_call>\n",
         "<|assistant|><tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 2}}\n</tool_call>\n"},
        /* DeepSeek V3.1's form, rendered back as written rather than V3's */
        {"<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>", DS_OPEN "f" DS_SEP_ "{\\\"x\\\":1}" DS_CLOSE,
         "<|assistant|>" DS_OPEN "f" DS_SEP_ "{\"x\":1}" DS_CLOSE "\n",
         "<|assistant|>" DS_OPEN "function" DS_SEP_ "f\n```json\n{\"x\": 2}\n```" DS_CLOSE "\n"},
        {"<|im_assistant|>assistant<|im_middle|>",
         KIMI_OPEN "functions.f:0<|tool_call_argument_begin|>{\\\"x\\\":1}" KIMI_CLOSE,
         "<|assistant|>" KIMI_OPEN "functions.f:0<|tool_call_argument_begin|>{\"x\":1}" KIMI_CLOSE "\n",
         "<|assistant|>" KIMI_OPEN "functions.f:0<|tool_call_argument_begin|>{\"x\": 2}" KIMI_CLOSE "\n"},
        /* Mistral v11's form, rendered back as written rather than the list */
        {"[INST]", "[TOOL_CALLS]f[ARGS]{\\\"x\\\":1}", "<|assistant|>[TOOL_CALLS]f[ARGS]{\"x\":1}\n",
         "<|assistant|>[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"x\": 2}}]\n"},
    };
    for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++) {
        g_gen_prompt = fam[i].gen;
        srv_start_with(&S, NULL, 0, family_tweak);
        char body[2048];
        snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"ok %s done\"}]," TOOLS
                 ",\"max_tokens\":90}", fam[i].said);
        json_t *j = post_expect("/v1/chat/completions", body, 200);
        /* the call the user wrote (the echoed tools example, its newlines
         * turned to spaces, may read as a call of its own before it) */
        json_t *calls = jget(j, "choices.0.message.tool_calls"), *c = NULL;
        for (size_t k = 0; k < json_array_size(calls) && !c; k++) {
            json_t *fn = json_object_get(json_array_get(calls, k), "function");
            if (!strcmp(json_string_value(json_object_get(fn, "name")), "f")) c = fn;
        }
        ck_assert_msg(c && !strcmp(json_string_value(json_object_get(c, "arguments")), "{\"x\":1}"), "%s: no call",
                      fam[i].gen);
        json_decref(j);
        for (int x = 1; x <= 2; x++) {
            const char *p = post_call_history(x), *want = x == 1 ? fam[i].history : fam[i].canonical;
            ck_assert_msg(strstr(p, want), "%s: no '%s' in %s", fam[i].gen, want, p);
        }
        srv_stop(&S);
    }
#undef DS_OPEN
#undef DS_CLOSE
#undef DS_SEP_
#undef KIMI_OPEN
#undef KIMI_CLOSE
}
END_TEST

/* The XML families' values reach the client typed by the request's tool
 * schema (the reader gets the tools): the fake "model" echoes a
 * Qwen3-Coder call the user wrote whose string parameter holds 42 and
 * whose integer parameter holds 7; a Hermes-family model writing the same
 * form reads alike. */
START_TEST(test_family_typed_values)
{
    static const char body[] =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"ok <tool_call><function=f><parameter=s>42</parameter>"
        "<parameter=n>7</parameter></function></tool_call> done\"}],\"tools\":[{\"type\":\"function\",\"function\":"
        "{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\"},"
        "\"n\":{\"type\":\"integer\"}}}}}],\"max_tokens\":120}";
    for (int i = 0; i < 2; i++) {
        g_gen_prompt = "";
        g_chat_family = i == 0 ? "qwen3-coder" : NULL;
        srv_start_with(&S, NULL, 0, family_big_tweak);
        json_t *j = post_expect("/v1/chat/completions", body, 200);
        json_t *calls = jget(j, "choices.0.message.tool_calls"), *c = NULL;
        for (size_t k = 0; k < json_array_size(calls) && !c; k++) {
            json_t *fn = json_object_get(json_array_get(calls, k), "function");
            if (!strcmp(json_string_value(json_object_get(fn, "name")), "f")) c = fn;
        }
        ck_assert_msg(c, "%d: no call", i);
        ck_assert_str_eq(json_string_value(json_object_get(c, "arguments")), "{\"s\":\"42\",\"n\":7}");
        json_decref(j);
        srv_stop(&S);
        g_chat_family = NULL;
    }
}
END_TEST

/* The grammar engine itself (constraint-grammar.so) on single-byte
 * tokens: does the grammar text accept exactly these bytes? */
static bool grammar_accepts(const pagoda_constraint_ops *o, void *ctx, void *comp, const char *s)
{
    void *m = NULL;
    char err[256];
    ck_assert_int_eq(o->matcher_new(ctx, comp, &m, err, sizeof err), PAGODA_OK);
    bool ok = true;
    for (size_t i = 0; s[i] && ok; i++) ok = o->advance(ctx, m, (uint8_t)s[i], err, sizeof err) == 0;
    ok = ok && o->is_complete(ctx, m);
    o->matcher_free(ctx, m);
    return ok;
}

/* The automaton a call grammar grows to: compiled from text, then walked
 * over s a token at a time with a mask before each step (as the engine
 * does): a byte each, or with n_ctl > 0 each markup text ctl[k] in s as
 * token 256 + k; the plugin's states and bytes after, less before. True
 * when s is accepted. */
static bool grammar_size_ctl(const pagoda_constraint_ops *o, void *ctx, const char *text, const char *s,
                             const char *const *ctl, int n_ctl, int64_t *states, int64_t *bytes)
{
    char err[512];
    pagoda_constraint_stats a = {.struct_size = sizeof a}, b = {.struct_size = sizeof b};
    ck_assert_int_eq(o->stats(ctx, &a), PAGODA_OK);
    pagoda_constraint_spec sp = {.struct_size = sizeof sp, .type = PAGODA_CONSTRAINT_GRAMMAR, .text = text,
                                 .len = strlen(text)};
    void *comp = NULL, *m = NULL;
    ck_assert_msg(o->compile(ctx, &sp, &comp, err, sizeof err) == PAGODA_OK, "%s", err);
    ck_assert_int_eq(o->matcher_new(ctx, comp, &m, err, sizeof err), PAGODA_OK);
    uint32_t mask[(256 + 64 + 31) / 32];
    ck_assert_int_le(n_ctl, 64);
    bool ok = true;
    for (size_t i = 0; s[i] && ok;) {
        int32_t tok = (uint8_t)s[i];
        size_t n = 1;
        for (int k = 0; k < n_ctl; k++)
            if (!strncmp(s + i, ctl[k], strlen(ctl[k]))) {
                tok = 256 + k;
                n = strlen(ctl[k]);
            }
        ck_assert_int_eq(o->fill_mask(ctx, m, mask, err, sizeof err), PAGODA_OK);
        ok = o->advance(ctx, m, tok, err, sizeof err) == 0;
        i += n;
    }
    ok = ok && o->is_complete(ctx, m);
    ck_assert_int_eq(o->stats(ctx, &b), PAGODA_OK);
    *states = b.states - a.states;
    *bytes = b.bytes - a.bytes;
    o->matcher_free(ctx, m);
    o->compiled_free(ctx, comp);
    return ok;
}

static bool grammar_size(const pagoda_constraint_ops *o, void *ctx, const char *text, const char *s, int64_t *states,
                         int64_t *bytes)
{
    return grammar_size_ctl(o, ctx, text, s, NULL, 0, states, bytes);
}

/* As grammar_accepts over a vocabulary of the 256 bytes and the control
 * tokens ctl[k] (ids 256 + k): with `tokens`, each markup text in s is
 * written as its control token, else every byte as its byte token. */
static bool grammar_accepts_ctl(const pagoda_constraint_ops *o, void *ctx, void *comp, const char *s,
                                const char *const *ctl, int n_ctl, bool tokens)
{
    void *m = NULL;
    char err[256];
    ck_assert_int_eq(o->matcher_new(ctx, comp, &m, err, sizeof err), PAGODA_OK);
    bool ok = true;
    for (size_t i = 0; s[i] && ok;) {
        int32_t tok = (uint8_t)s[i];
        size_t n = 1;
        for (int k = 0; tokens && k < n_ctl; k++)
            if (!strncmp(s + i, ctl[k], strlen(ctl[k]))) {
                tok = 256 + k;
                n = strlen(ctl[k]);
            }
        ok = o->advance(ctx, m, tok, err, sizeof err) == 0;
        i += n;
    }
    ok = ok && o->is_complete(ctx, m);
    o->matcher_free(ctx, m);
    return ok;
}

/* tool_choice "auto" in each family's own syntax: the request's grammar,
 * compiled by the real engine, takes free text (pieces of the family's
 * opener included) and a call in the family's syntax after it; once the
 * opener is written, only a valid call; Hermes markup is text for the
 * others. Llama 3's call is the whole reply: text that starts as one is
 * refused. */
START_TEST(test_family_auto)
{
#define DS_CALLS "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>"
#define DS_CALL "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>function<\xEF\xBD\x9Ctool" \
                "\xE2\x96\x81sep\xEF\xBD\x9C>"
#define DS_END "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C><\xEF\xBD\x9Ctool\xE2\x96\x81" \
               "calls\xE2\x96\x81" "end\xEF\xBD\x9C>"
    static const struct {
        const char *gen, *text, *call, *bad[3];
    } fam[] = {
        {"", "Sure. <tool_ <tool_cal> <<tool_call",
         "Let me see.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 3}}\n</tool_call>",
         {"<tool_call> what", "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>", NULL}},
        {"<|im_assistant|>assistant<|im_middle|>", "Sure. <|tool_calls_section <|tool_call_begin|> <tool_call>x",
         "ok <|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"x\": 2}"
         "<|tool_call_end|><|tool_calls_section_end|> done",
         {"<|tool_calls_section_begin|>hello", "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
          "<|tool_call_argument_begin|>{\"x\": \"2\"}<|tool_call_end|><|tool_calls_section_end|>", NULL}},
        {"<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>", "Sure. <\xEF\xBD\x9Ctool\xE2\x96\x81" "calls <tool_call>",
         "ok" DS_CALLS DS_CALL "f\n```json\n{\"x\": 1}\n```" DS_END,
         {DS_CALLS "text", DS_CALLS DS_CALL "h\n```json\n{}\n```" DS_END, NULL}},
        {"<|start|>assistant", "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>commentary"
         "<|message|>hm <|channel|>commentary to=web",
         "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"x\": 4}",
         {"<|channel|>commentary to=functions.g <|constrain|>json<|message|>{}",
          "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"x\": 4.5}", NULL}},
        {"<|start_header_id|>assistant<|end_header_id|>\n\n", "Paris. {\"name\": \"f\"} <|python_tag|> <tool_call>x",
         "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": 5}}",
         {"{\"city\": \"Paris\"}", "\n <|python_tag|>print(1)", "{\"name\": \"g\", \"parameters\": {}}"}},
        /* Mistral: [TOOL_CALLS] and a list of one call */
        {"[INST]", "Sure. [TOOL_CALL] [TOOL_CALLS <tool_call>x",
         "ok [TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"x\": 6}}] done",
         {"[TOOL_CALLS]hello", "[TOOL_CALLS][{\"name\": \"g\", \"arguments\": {}}]",
          "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"x\": 6}}, {\"name\": \"f\", \"arguments\": {}}]"}},
        /* Qwen3-Coder: <function=N> and a parameter each argument, the
         * integer's value JSON; Hermes JSON is not its syntax */
        {"", "Sure. <tool_ <function=f> <<tool_call",
         "Let me see.\n<tool_call>\n<function=f>\n<parameter=x>\n3\n</parameter>\n</function>\n</tool_call>",
         {"<tool_call>\n<function=g>\n</function>\n</tool_call>",
          "<tool_call>\n<function=f>\n<parameter=x>\nthree\n</parameter>\n</function>\n</tool_call>",
          "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 3}}\n</tool_call>"}},
        /* GLM-4.5: N, then a key and a value each argument */
        {"[gMASK]<|assistant|>", "Sure. <tool_ <arg_key>x</arg_key> <tool_cal",
         "ok\n<tool_call>f\n<arg_key>x</arg_key>\n<arg_value>3</arg_value>\n</tool_call> done",
         {"<tool_call>g\n</tool_call>", "<tool_call>f\n<arg_key>x</arg_key>\n<arg_value>\"3\"</arg_value>\n</tool_call>",
          "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 3}}</tool_call>"}},
    };
    static const char body[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"add\"}]," TOOLS ",\"max_tokens\":2,"
                               "\"parallel_tool_calls\":false}";
#define FN(n, props, req) "{\"type\":\"function\",\"function\":{\"name\":\"" n "\",\"parameters\":{\"type\":" \
                          "\"object\",\"properties\":{" props "},\"required\":[" req "]}}}"
#define STR(k) "\"" k "\":{\"type\":\"string\"}"
    static const char big_body[] =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"add\"}],\"tools\":["
        FN("read_file", STR("path") ",\"offset\":{\"type\":\"integer\"}", "\"path\"") ","
        FN("write_file", STR("path") "," STR("content"), "\"path\",\"content\"") ","
        FN("edit_file", STR("path") "," STR("old") "," STR("new") ",\"all\":{\"type\":\"boolean\"}",
           "\"path\",\"old\",\"new\"") ","
        FN("list_dir", STR("path"), "\"path\"") ","
        FN("run_shell", STR("command") ",\"timeout\":{\"type\":\"integer\",\"maximum\":600}", "\"command\"") ","
        FN("grep", STR("pattern") "," STR("path") ",\"max\":{\"type\":\"integer\"}", "\"pattern\"") ","
        FN("fetch_url", STR("url"), "\"url\"") ","
        FN("get_weather", STR("city") ",\"unit\":{\"enum\":[\"c\",\"f\"]}", "\"city\"") ","
        FN("todo", "\"items\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}", "\"items\"") ","
        "{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
        "{\"x\":{\"type\":\"integer\"}}}}}],\"max_tokens\":2,\"parallel_tool_calls\":false}";
#undef FN
#undef STR
    char err[512];
    pagoda_plugin *p = NULL;
    int st = pagoda_plugin_load_file(tu_build("plugins/constraint-grammar.so"), PAGODA_KIND_CONSTRAINT, "grammar", &p,
                                     err, sizeof err);
    ck_assert_msg(st == PAGODA_OK, "%s", err);
    const pagoda_constraint_ops *o = &p->ops.constraint;
    th_host host;
    th_init(&host);
    void *ctx = NULL;
    ck_assert_int_eq(p->desc.create(&host.h, &ctx, err, sizeof err), PAGODA_OK);
    char *vb[256];
    uint32_t vl[256];
    for (int b = 0; b < 256; b++) {
        vb[b] = malloc(1);
        vb[b][0] = (char)b;
        vl[b] = 1;
    }
    pagoda_constraint_vocab v = {.struct_size = sizeof v, .n_vocab = 256, .bytes = (const char *const *)vb, .len = vl};
    ck_assert_int_eq(o->set_vocab(ctx, &v, err, sizeof err), PAGODA_OK);
    char *harmony = NULL, *ctl_fam[4] = {NULL, NULL, NULL, NULL}; /* Hermes, Llama 3, Mistral, GLM-4.5 */
    enum { N_FAM = sizeof fam / sizeof fam[0] };
    char *big[N_FAM] = {NULL}, *walks[N_FAM] = {NULL};
    static const char *const names[N_FAM] = {"Hermes", "Kimi K2", "DeepSeek-V3", "harmony", "Llama 3", "Mistral",
                                             "Qwen3-Coder", "GLM-4.5"};
    for (size_t i = 0; i < N_FAM; i++) {
        g_gen_prompt = fam[i].gen;
        g_chat_family = i == 6 ? "qwen3-coder" : NULL;
        srv_start_with(&S, NULL, 0, family_big_tweak);
        json_decref(post_expect("/v1/chat/completions", body, 200));
        const fake_logged *l = last_logged();
        ck_assert_int_eq(l->req.constraint_type, PAGODA_CONSTRAINT_GRAMMAR);
        pagoda_constraint_spec sp = {.struct_size = sizeof sp, .type = PAGODA_CONSTRAINT_GRAMMAR,
                                     .text = l->constraint, .len = strlen(l->constraint)};
        void *comp = NULL;
        st = o->compile(ctx, &sp, &comp, err, sizeof err);
        ck_assert_msg(st == PAGODA_OK, "family %zu: %s in\n%s", i, err, l->constraint);
        ck_assert_msg(grammar_accepts(o, ctx, comp, ""), "family %zu: empty", i);
        ck_assert_msg(grammar_accepts(o, ctx, comp, fam[i].text), "family %zu: text %s\n%s", i, fam[i].text,
                      l->constraint);
        ck_assert_msg(grammar_accepts(o, ctx, comp, fam[i].call), "family %zu: call %s\n%s", i, fam[i].call,
                      l->constraint);
        for (int k = 0; k < 3 && fam[i].bad[k]; k++)
            ck_assert_msg(!grammar_accepts(o, ctx, comp, fam[i].bad[k]), "family %zu: took %s\n%s", i, fam[i].bad[k],
                          l->constraint);
        o->compiled_free(ctx, comp);
        if (!strcmp(fam[i].gen, "<|start|>assistant")) harmony = strdup(l->constraint);
        if (i == 0 || i == 4 || i == 5 || i == 7) ctl_fam[i == 0 ? 0 : i == 7 ? 3 : i - 3] = strdup(l->constraint);
        /* the size with one tool and with a coding agent's ten (f among
         * them): text, then the call, as "auto" (Llama 3: the call alone,
         * the whole reply); printed for docs/structured-output.md */
        char walk[1024];
        snprintf(walk, sizeof walk, "%s%s", i == 4 ? "" : fam[i].text, fam[i].call); /* Llama 3: a call is all */
        int64_t ns1, nb1, ns, nb;
        ck_assert(grammar_size(o, ctx, l->constraint, walk, &ns1, &nb1));
        long bst;
        json_t *bj = post_json(&S, "/v1/chat/completions", big_body, &bst);
        char *bt = json_dumps(bj, 0);
        ck_assert_msg(bst == 200, "%s", bt);
        free(bt);
        json_decref(bj);
        ck_assert_msg(grammar_size(o, ctx, last_logged()->constraint, walk, &ns, &nb), "family %zu: %s\n%s", i,
                      walk, last_logged()->constraint);
        printf("call grammar size: %-11s one tool %4lld states, %6lld bytes; ten tools (%5zu bytes of grammar) "
               "%4lld states, %6lld bytes, after text and a call\n", names[i], (long long)ns1, (long long)nb1,
               strlen(last_logged()->constraint), (long long)ns, (long long)nb);
        big[i] = strdup(last_logged()->constraint);
        walks[i] = strdup(walk);
        srv_stop(&S);
        g_chat_family = NULL;
    }
    /* the XML families under "required": the calls alone, several apart by
     * a newline; GLM-4.5's first after the empty reasoning its template
     * renders for a past call's turn (the reply is the next history) */
    static const struct {
        const char *gen, *chat, *good[2], *bad[3];
    } req[] = {
        {"", "qwen3-coder",
         {"<tool_call>\n<function=f>\n<parameter=x>\n3\n</parameter>\n</function>\n</tool_call>",
          "<tool_call>\n<function=f>\n</function>\n</tool_call>\n<tool_call>\n<function=f>\n<parameter=x>\n-1\n"
          "</parameter>\n</function>\n</tool_call>"},
         {"ok <tool_call>\n<function=f>\n</function>\n</tool_call>",
          "<tool_call>\n<function=f>\n<parameter=y>\n3\n</parameter>\n</function>\n</tool_call>",
          "<tool_call>\n<function=f>\n<parameter=x>\n3\n</parameter>\n<parameter=x>\n3\n</parameter>\n</function>\n"
          "</tool_call>"}},
        {"[gMASK]<|assistant|>", NULL,
         {"\n<think></think>\n<tool_call>f\n<arg_key>x</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
          "\n<think></think>\n<tool_call>f\n</tool_call>\n<tool_call>f\n</tool_call>"},
         {"<tool_call>f\n</tool_call>", "\n<think>hm</think>\n<tool_call>f\n</tool_call>",
          "\n<think></think>\n<tool_call>f\n<arg_key>x</arg_key>\n<arg_value>3.5</arg_value>\n</tool_call>"}},
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        g_gen_prompt = req[i].gen;
        g_chat_family = req[i].chat;
        srv_start_with(&S, NULL, 0, family_big_tweak);
        json_decref(post_expect("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"add\"}],"
                                TOOLS ",\"max_tokens\":2,\"tool_choice\":\"required\"}", 200));
        const char *g = last_logged()->constraint;
        pagoda_constraint_spec sp = {.struct_size = sizeof sp, .type = PAGODA_CONSTRAINT_GRAMMAR, .text = g,
                                     .len = strlen(g)};
        void *comp = NULL;
        ck_assert_msg(o->compile(ctx, &sp, &comp, err, sizeof err) == PAGODA_OK, "%s in\n%s", err, g);
        for (int k = 0; k < 2; k++)
            ck_assert_msg(grammar_accepts(o, ctx, comp, req[i].good[k]), "%zu: refused %s\n%s", i, req[i].good[k], g);
        for (int k = 0; k < 3; k++)
            ck_assert_msg(!grammar_accepts(o, ctx, comp, req[i].bad[k]), "%zu: took %s\n%s", i, req[i].bad[k], g);
        o->compiled_free(ctx, comp);
        srv_stop(&S);
        g_chat_family = NULL;
    }
    p->desc.destroy(ctx);
    /* harmony with its markup as control tokens (a real harmony vocabulary):
     * the call's header takes the tokens and not their spelling in plain
     * pieces (the next prompt re-tokenizes to the tokens: a spelled header
     * misses the prefix cache); free text takes both */
    ck_assert_ptr_nonnull(harmony);
    static const char *const ctl[] = {"<|channel|>", "<|constrain|>", "<|message|>", "<|end|>", "<|start|>",
                                      "<tool_call>", "</tool_call>", "<|python_tag|>", "[TOOL_CALLS]",
                                      "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                                      "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
                                      "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>",
                                      "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "end\xEF\xBD\x9C>",
                                      "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>",
                                      "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C>",
                                      "<\xEF\xBD\x9Ctool\xE2\x96\x81sep\xEF\xBD\x9C>", "<arg_key>", "</arg_key>",
                                      "<arg_value>", "</arg_value>"};
    enum { N_CTL = sizeof ctl / sizeof ctl[0], N_V = 256 + N_CTL };
    char *cb[N_V];
    uint32_t cl[N_V];
    uint8_t cf[N_V] = {0};
    for (int b = 0; b < N_V; b++) {
        cb[b] = b < 256 ? vb[b] : (char *)ctl[b - 256];
        cl[b] = b < 256 ? 1 : (uint32_t)strlen(ctl[b - 256]);
        cf[b] = b >= 256;
    }
    ck_assert_int_eq(p->desc.create(&host.h, &ctx, err, sizeof err), PAGODA_OK);
    pagoda_constraint_vocab cv = {.struct_size = sizeof cv, .n_vocab = N_V, .bytes = (const char *const *)cb,
                                  .len = cl, .control = cf};
    ck_assert_int_eq(o->set_vocab(ctx, &cv, err, sizeof err), PAGODA_OK);
    /* the sizes again with every family's markup as control tokens (each
     * family's real vocabulary has them): the references take the one
     * token, so the markup's bytes are no states */
    for (int f = 0; f < N_FAM; f++) {
        int64_t ns, nb;
        ck_assert_msg(grammar_size_ctl(o, ctx, big[f], walks[f], ctl, N_CTL, &ns, &nb), "%s: %s\n%s", names[f],
                      walks[f], big[f]);
        printf("call grammar size, ten tools, markup as tokens: %-11s %4lld states, %7lld bytes after text "
               "and a call\n", names[f], (long long)ns, (long long)nb);
        free(big[f]);
        free(walks[f]);
    }
    /* Hermes' tags, Llama 3's <|python_tag|>, Mistral's [TOOL_CALLS],
     * GLM-4.5's tags and argument tags as control tokens (Qwen's, Llama
     * 3.1's, Mistral's, GLM's vocabularies): the same, the call opened
     * (and Hermes' and GLM's closed) by the token only; a vocabulary
     * without them took the spelling above */
    for (int f = 0; f < 4; f++) {
        static const int fi[] = {0, 4, 5, 7};
        ck_assert_ptr_nonnull(ctl_fam[f]);
        pagoda_constraint_spec fs = {.struct_size = sizeof fs, .type = PAGODA_CONSTRAINT_GRAMMAR,
                                     .text = ctl_fam[f], .len = strlen(ctl_fam[f])};
        void *fc = NULL;
        ck_assert_msg(o->compile(ctx, &fs, &fc, err, sizeof err) == PAGODA_OK, "%s in\n%s", err, ctl_fam[f]);
        const char *call = fam[fi[f]].call;
        ck_assert_msg(grammar_accepts_ctl(o, ctx, fc, call, ctl, N_CTL, true), "%s\n%s", call, ctl_fam[f]);
        ck_assert_msg(!grammar_accepts_ctl(o, ctx, fc, call, ctl, N_CTL, false), "spelled %s taken:\n%s", call,
                      ctl_fam[f]);
        ck_assert(grammar_accepts_ctl(o, ctx, fc, fam[fi[f]].text, ctl, N_CTL, true));
        ck_assert(grammar_accepts_ctl(o, ctx, fc, fam[fi[f]].text, ctl, N_CTL, false));
        o->compiled_free(ctx, fc);
        free(ctl_fam[f]);
    }
    pagoda_constraint_spec hs = {.struct_size = sizeof hs, .type = PAGODA_CONSTRAINT_GRAMMAR, .text = harmony,
                                 .len = strlen(harmony)};
    void *hc = NULL;
    ck_assert_msg(o->compile(ctx, &hs, &hc, err, sizeof err) == PAGODA_OK, "%s in\n%s", err, harmony);
    const char *call = "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"x\": 4}";
    const char *text = "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>hi";
    ck_assert_msg(grammar_accepts_ctl(o, ctx, hc, call, ctl, N_CTL, true), "%s", harmony);
    ck_assert_msg(!grammar_accepts_ctl(o, ctx, hc, call, ctl, N_CTL, false), "spelled header taken:\n%s", harmony);
    ck_assert(grammar_accepts_ctl(o, ctx, hc, text, ctl, N_CTL, true));
    ck_assert(grammar_accepts_ctl(o, ctx, hc, text, ctl, N_CTL, false));
    char both[512];
    snprintf(both, sizeof both, "%s<|end|><|start|>assistant%s", text, call);
    ck_assert(grammar_accepts_ctl(o, ctx, hc, both, ctl, N_CTL, true));
    o->compiled_free(ctx, hc);
    p->desc.destroy(ctx);
    free(harmony);
    pagoda_plugin_free(p);
    for (int b = 0; b < 256; b++) free(vb[b]);
#undef DS_CALLS
#undef DS_CALL
#undef DS_END
}
END_TEST

/* harmony's fake template for the memo: a fresh turn renders as its last
 * user text and the generation prompt (the echo then is the call message
 * as a model writes it after <|start|>assistant); a history as the fake
 * renders every message, to read. */
static int harmony_memo_render(const pagoda_host *h, const pagoda_chat_message *msgs, int32_t n, bool gen,
                               char **out, int32_t *stop_ids, int32_t cap, int32_t *n_stop)
{
    bool users = true;
    for (int32_t i = 0; i < n; i++) users &= !strcmp(msgs[i].role, "user") || !strcmp(msgs[i].role, "tools");
    if (!users || !gen) return family_render(h, msgs, n, gen, out, stop_ids, cap, n_stop);
    const char *last = n ? msgs[n - 1].content : "";
    size_t l = strlen(last) + sizeof "<|start|>assistant";
    *out = malloc(l);
    ck_assert_ptr_nonnull(*out);
    snprintf(*out, l, "%s<|start|>assistant", last);
    if (n_stop) *n_stop = 1;
    if (stop_ids && cap > 0) stop_ids[0] = FAKE_EOS;
    return PAGODA_OK;
}

static void harmony_memo_tweak(fake_engine *f) { f->host.chat_render = harmony_memo_render; }

/* harmony: the call comes back in the history as the model wrote its whole
 * message (the recipient after the channel, <|constrain|>json, its own
 * spacing), as "assistant written"; another call as the template writes
 * it. Without this a harmony history missed the cache from the call's
 * header on (family_reuse.sh). */
START_TEST(test_harmony_call_memo)
{
    g_gen_prompt = "<|start|>assistant";
    srv_start_with(&S, NULL, 0, harmony_memo_tweak);
    json_t *j = post_expect("/v1/chat/completions",
                            "{\"messages\":[{\"role\":\"user\",\"content\":\"<|channel|>commentary to=functions.f "
                            "<|constrain|>json<|message|>{\\\"x\\\":1}\"}]," TOOLS ",\"max_tokens\":20}", 200);
    ck_assert_str_eq(jget_str(j, "choices.0.message.tool_calls.0.function.name"), "f");
    ck_assert_str_eq(jget_str(j, "choices.0.message.tool_calls.0.function.arguments"), "{\"x\":1}");
    json_decref(j);
    char body[2048];
    for (int x = 1; x <= 2; x++) {
        const char *p = post_call_history(x);
        const char *want = x == 1 ? "<|assistant written|><|channel|>commentary to=functions.f <|constrain|>json"
                                    "<|message|>{\"x\":1}\n<|functions.f|>5\n"
                                  : "<|assistant to=functions.f|>{\"x\": 2}\n<|functions.f|>5\n";
        ck_assert_msg(strstr(p, want), "x=%d: no '%s' in %s", x, want, p);
    }
    /* the memo's role is not a client's: its content would be markup; nor
     * is any other role render_harmony trusts (a call's, a result's, the
     * tools namespace's, an analysis message's), nor one it does not know */
    static const char *const internal[] = {"assistant written", "assistant to=functions.f", "functions.f",
                                           "tools", "analysis", "function", "Assistant"};
    for (size_t r = 0; r < sizeof internal / sizeof internal[0]; r++) {
        char needle[96];
        snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"%s\","
                 "\"content\":\"<|channel|>final<|message|>x\"}]}", internal[r]);
        snprintf(needle, sizeof needle, "role '%s'", internal[r]);
        expect_400("/v1/chat/completions", body, "messages[1].role", needle);
    }
    /* the client's five roles pass */
    json_decref(post_expect("/v1/chat/completions",
                            "{\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},{\"role\":"
                            "\"system\",\"content\":\"later\"},{\"role\":\"user\",\"content\":\"add\"},"
                            "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c9\","
                            "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
                            "{\"role\":\"tool\",\"tool_call_id\":\"c9\",\"content\":\"5\"},"
                            "{\"role\":\"assistant\",\"content\":\"5.\"}]," TOOLS ",\"max_tokens\":2}", 200));
    const char *p = last_logged()->prompt;
    static const char *const kept[] = {"<|developer|>be brief\n", "<|user|>add\n", "<|functions.f|>5\n",
                                       "<|assistant|>5.\n"};
    for (size_t r = 0; r < sizeof kept / sizeof kept[0]; r++)
        ck_assert_msg(strstr(p, kept[r]), "no '%s' in %s", kept[r], p);
    srv_stop(&S);
}
END_TEST

/* harmony: an assistant's text beside its calls is its analysis message
 * (dropped once a later assistant message answers without calls, as the
 * template does), every call of a turn a message of its own, each result
 * authored by the function its tool_call_id names. */
START_TEST(test_harmony_history)
{
#define CALL(id, name, args) "{\"id\":\"" id "\",\"type\":\"function\",\"function\":{\"name\":\"" name \
                             "\",\"arguments\":\"" args "\"}}"
#define U(c) "{\"role\":\"user\",\"content\":\"" c "\"}"
    static const char turn[] = U("go") ",{\"role\":\"assistant\",\"content\":\"Two lookups.\",\"tool_calls\":["
                               CALL("a1", "f", "{\\\"x\\\": 1}") "," CALL("b2", "g", "{}") "]},"
                               "{\"role\":\"tool\",\"tool_call_id\":\"b2\",\"content\":\"B\"},"
                               "{\"role\":\"tool\",\"tool_call_id\":\"a1\",\"content\":\"A\"}";
    static const char tools[] = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},"
                                "{\"type\":\"function\",\"function\":{\"name\":\"g\"}}],\"max_tokens\":2}";
    g_gen_prompt = "<|start|>assistant";
    srv_start_with(&S, NULL, 0, family_tweak);
    char body[2048];
    snprintf(body, sizeof body, "{\"messages\":[%s],%s", turn, tools);
    json_decref(post_expect("/v1/chat/completions", body, 200));
    const char *p = last_logged()->prompt;
    static const char head[] = "<|tools|>## functions\n\nnamespace functions {\n\ntype f = () => any;\n\n"
                               "type g = () => any;\n\n} // namespace functions\n<|user|>go\n";
    ck_assert_msg(!strncmp(p, head, sizeof head - 1), "%s", p);
    ck_assert_ptr_nonnull(strstr(p, "<|analysis|>Two lookups.\n<|assistant to=functions.f|>{\"x\": 1}\n"
                                    "<|assistant to=functions.g|>{}\n<|functions.g|>B\n<|functions.f|>A\n"));
    /* a later answer without calls: the analysis is dropped */
    snprintf(body, sizeof body, "{\"messages\":[%s,{\"role\":\"assistant\",\"content\":\"done\"}," U("more") "],%s",
             turn, tools);
    json_decref(post_expect("/v1/chat/completions", body, 200));
    p = last_logged()->prompt;
    ck_assert_msg(!strstr(p, "<|analysis|>") && strstr(p, "<|assistant to=functions.g|>{}\n"), "%s", p);
    /* reasoning_content beside the calls is the analysis; with content too, a 400 */
    snprintf(body, sizeof body, "{\"messages\":[" U("go") ",{\"role\":\"assistant\",\"content\":null,"
             "\"reasoning_content\":\"Hmm.\",\"tool_calls\":[" CALL("a1", "f", "{}") "]}],%s", tools);
    json_decref(post_expect("/v1/chat/completions", body, 200));
    ck_assert_ptr_nonnull(strstr(last_logged()->prompt, "<|analysis|>Hmm.\n<|assistant to=functions.f|>{}\n"));
    snprintf(body, sizeof body, "{\"messages\":[" U("go") ",{\"role\":\"assistant\",\"content\":\"x\","
             "\"thinking\":\"Hmm.\",\"tool_calls\":[" CALL("a1", "f", "{}") "]}],%s", tools);
    expect_400("/v1/chat/completions", body, "messages", "both content and reasoning");
    srv_stop(&S);
#undef CALL
#undef U
}
END_TEST

/* A message's channel must be one of harmony's three. */
START_TEST(test_harmony_bad_channel)
{
    expect_400("/v1/chat/completions",
               "{\"messages\":[{\"role\":\"assistant\",\"channel\":\"secret\",\"content\":\"x\"},"
               "{\"role\":\"user\",\"content\":\"hi\"}]}",
               "messages[0].channel", "unknown channel 'secret'");
    expect_400("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"channel\":7,\"content\":\"hi\"}]}",
               "messages[0].channel", "unknown channel (not a string)");
    json_decref(post_expect("/v1/chat/completions",
                            "{\"messages\":[{\"role\":\"assistant\",\"channel\":\"final\",\"content\":\"x\"},"
                            "{\"role\":\"user\",\"content\":\"hi\"}]}", 200));
}
END_TEST

/* A template whose generation prompt opens the reasoning (DeepSeek-R1's,
 * Qwen3.5's "<think>\n") and closes it empty when enable_thinking is false:
 * the user turns, then the generation prompt. The echo then writes the
 * user's words, then the prompt's tags. */
static _Thread_local int g_think_off;

static int think_render(const pagoda_host *h, const pagoda_chat_message *msgs, int32_t n, bool gen, char **out,
                        int32_t *stop_ids, int32_t cap, int32_t *n_stop)
{
    pagoda_chat_message users[16];
    int32_t k = 0;
    for (int32_t i = 0; i < n && k < 16; i++)
        if (!strcmp(msgs[i].role, "user")) users[k++] = msgs[i];
    int st = fake_chat_render(h, users, k, false, out, stop_ids, cap, n_stop);
    if (st || !gen) return st;
    const char *g = g_think_off ? " <think>\n</think>\n\n" : " <think>\n";
    size_t l = strlen(*out);
    char *s = realloc(*out, l + strlen(g) + 1);
    ck_assert_ptr_nonnull(s);
    strcpy(s + l, g);
    *out = s;
    return PAGODA_OK;
}

static int think_render_opts(const pagoda_host *h, const pagoda_chat_message *msgs, int32_t n,
                             const pagoda_chat_options *opts, bool gen, char **out, int32_t *stop_ids, int32_t cap,
                             int32_t *n_stop)
{
    g_think_off = opts && opts->enable_thinking == 0;
    int st = think_render(h, msgs, n, gen, out, stop_ids, cap, n_stop);
    g_think_off = 0;
    return st;
}

static void think_tweak(fake_engine *f)
{
    f->host.chat_render = think_render;
    f->host.chat_render_opts = think_render_opts;
}

/* Whether the reply starts inside the reasoning is each request's own
 * prompt's say: with thinking off the prompt closes the block, and the
 * answer is content (it was all reasoning when the probe's default
 * rendering decided). */
START_TEST(test_think_open_per_request)
{
    srv_start_with(&S, NULL, 0, think_tweak);
    json_t *j = post_expect("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello world\"}],"
                            "\"max_tokens\":2}", 200);
    const char *rc = jget_str(j, "choices.0.message.reasoning_content");
    ck_assert_msg(rc && strstr(rc, "Hello world"), "thinking on: reasoning %s", rc ? rc : "null");
    json_decref(j);
    j = post_expect("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello world\"}],"
                    "\"max_tokens\":2,\"chat_template_kwargs\":{\"enable_thinking\":false}}", 200);
    const char *c = jget_str(j, "choices.0.message.content");
    rc = jget_str(j, "choices.0.message.reasoning_content");
    ck_assert_msg(c && strstr(c, "Hello world"), "thinking off: content %s", c ? c : "null");
    ck_assert_msg(!rc || !strstr(rc, "Hello"), "thinking off: reasoning %s", rc);
    json_decref(j);
    /* Messages: thinking disabled, the answer is a text block */
    j = post_expect("/v1/messages", "{\"max_tokens\":2,\"thinking\":{\"type\":\"disabled\"},\"messages\":"
                    "[{\"role\":\"user\",\"content\":\"Hello world\"}]}", 200);
    const char *t0 = jget_str(j, "content.0.type"), *x0 = jget_str(j, "content.0.text");
    ck_assert_msg(t0 && !strcmp(t0, "text") && x0 && strstr(x0, "Hello world"), "messages: %s %s", t0 ? t0 : "null",
                  x0 ? x0 : "null");
    json_decref(j);
    srv_stop(&S);
}
END_TEST

/* Qwen3.5 (the engine's template name): Qwen3-Coder's calls, and a prompt
 * that opens the reasoning, so a required call's grammar closes it first
 * (empty, as the template writes a turn without reasoning back), unless
 * the request turns thinking off; a family that does not open it has no
 * such lead. */
START_TEST(test_qwen35_family)
{
    static const char req[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"add\"},{\"role\":\"assistant\","
                              "\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":"
                              "{\"name\":\"f\",\"arguments\":\"{\\\"x\\\": 1}\"}}]},{\"role\":\"tool\","
                              "\"tool_call_id\":\"c1\",\"content\":\"5\"}]," TOOLS ",\"tool_choice\":\"required\","
                              "\"max_tokens\":2%s}";
    static const struct {
        const char *family, *gen, *kwargs;
        bool lead;
    } cases[] = {
        {"qwen3.5", "<think>\n", "", true},
        {"qwen3.5", "<think>\n", ",\"chat_template_kwargs\":{\"enable_thinking\":false}", false},
        {"qwen3-coder", "", "", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        g_gen_prompt = cases[i].gen;
        g_chat_family = cases[i].family;
        srv_start_with(&S, NULL, 0, family_tweak);
        char body[1024];
        snprintf(body, sizeof body, req, cases[i].kwargs);
        json_decref(post_expect("/v1/chat/completions", body, 200));
        const fake_logged *l = last_logged();
        ck_assert_msg(strstr(l->prompt, "<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>"),
                      "%s: the past call not in Qwen3-Coder's form: %s", cases[i].family, l->prompt);
        ck_assert_int_eq(l->req.constraint_type, PAGODA_CONSTRAINT_GRAMMAR);
        const char *lead = strstr(l->constraint, "</think>"), *call = strstr(l->constraint, "<function=");
        ck_assert_msg(call, "%s: no call in the grammar", cases[i].family);
        ck_assert_msg(cases[i].lead ? lead && lead < call : !lead, "%s%s: the grammar's lead is wrong:\n%s",
                      cases[i].family, cases[i].kwargs, l->constraint);
        srv_stop(&S);
        g_chat_family = NULL;
    }
}
END_TEST

/* An assistant message's reasoning_content reaches the history as the
 * <think> block the template writes, where the template writes one back
 * (qwen3, qwen3.5, glm4: the renderer keeps it after the last user
 * message only); other families never see it, and a block already in the
 * content is not written twice. */
START_TEST(test_reasoning_into_history)
{
    static const char body[] =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"add\"},{\"role\":\"assistant\",\"content\":\"%s\","
        "\"reasoning_content\":\"R1\"%s},{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"5\"}]," TOOLS
        ",\"max_tokens\":2}";
    static const char call[] = ",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
                               "\"arguments\":\"{}\"}}]";
    static const struct {
        const char *family, *content, *calls, *want;
    } cases[] = {
        {"qwen3", "A1", "", "<|assistant|><think>\nR1\n</think>\n\nA1\n"},
        {"qwen3.5", "", call, "<|assistant|><think>\nR1\n</think>\n\n<tool_call>\n<function=f>\n</function>\n"},
        {"glm4", "A1", "", "<|assistant|><think>\nR1\n</think>\n\nA1\n"},
        {"qwen3", "<think>mine</think>A1", "", "<|assistant|><think>mine</think>A1\n"},
        {"chatml", "A1", "", "<|assistant|>A1\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        g_gen_prompt = "";
        g_chat_family = cases[i].family;
        srv_start_with(&S, NULL, 0, family_tweak);
        char b[1024];
        snprintf(b, sizeof b, body, cases[i].content, cases[i].calls);
        if (!*cases[i].calls) { /* a result needs its call: drop it */
            char *t = strstr(b, ",{\"role\":\"tool\"");
            char *e = t ? strstr(t, "}]") : NULL;
            ck_assert_ptr_nonnull(e);
            memmove(t, e + 1, strlen(e + 1) + 1);
        }
        json_decref(post_expect("/v1/chat/completions", b, 200));
        const char *p = last_logged()->prompt;
        ck_assert_msg(strstr(p, cases[i].want), "%s: no '%s' in %s", cases[i].family, cases[i].want, p);
        ck_assert_msg(!strstr(p, "R1") || strstr(cases[i].want, "R1"), "%s: the reasoning written in %s",
                      cases[i].family, p);
        srv_stop(&S);
        g_chat_family = NULL;
    }
    static const char *const fams[] = {"qwen3", "chatml"}, *const *fams_r = fams;
    /* Responses: a reasoning item is the next assistant turn's reasoning,
     * given as input or kept in a stored response */
    for (int i = 0; i < 2; i++) {
        g_chat_family = fams_r[i];
        srv_start_with(&S, NULL, 0, family_tweak);
        json_decref(post_expect("/v1/responses", "{\"input\":[{\"type\":\"message\",\"role\":\"user\",\"content\":"
                                "\"add\"},{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[],\"content\":[{\"type\":"
                                "\"reasoning_text\",\"text\":\"R1\"}]},{\"type\":\"message\",\"role\":\"assistant\","
                                "\"content\":[{\"type\":\"output_text\",\"text\":\"A1\"}]}],\"max_output_tokens\":2}", 200));
        const char *p = last_logged()->prompt;
        ck_assert_msg(i ? strstr(p, "<|assistant|>A1") && !strstr(p, "R1")
                        : strstr(p, "<|assistant|><think>\nR1\n</think>\n\nA1") != NULL,
                      "responses, %s: %s", fams_r[i], p);
        /* the fake echoes the prompt's words: its reply reasons " R2 " */
        json_t *j = post_expect("/v1/responses", "{\"input\":\"<think> R2 </think> A2\",\"max_output_tokens\":8}", 200);
        const char *id = jget_str(j, "id");
        ck_assert_ptr_nonnull(id);
        char b[256];
        snprintf(b, sizeof b, "{\"previous_response_id\":\"%s\",\"input\":\"more\",\"max_output_tokens\":2}", id);
        json_decref(j);
        json_decref(post_expect("/v1/responses", b, 200));
        p = last_logged()->prompt;
        const char *turn = strstr(p, "<|assistant|>"), *kept = "<|assistant|><think>\n R2 \n</think>";
        ck_assert_msg(turn && (i ? !strstr(turn, "R2") : !strncmp(turn, kept, strlen(kept))),
                      "responses, stored, %s: %s", fams_r[i], p);
        srv_stop(&S);
        g_chat_family = NULL;
    }
    /* Messages: an assistant's thinking blocks are its reasoning */
    for (int i = 0; i < 2; i++) {
        g_chat_family = fams[i];
        srv_start_with(&S, NULL, 0, family_tweak);
        json_decref(post_expect("/v1/messages", "{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":"
                                "\"add\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":"
                                "\"R1\",\"signature\":\"\"},{\"type\":\"text\",\"text\":\"A1\"}]}]}", 200));
        const char *p = last_logged()->prompt;
        ck_assert_msg(i ? strstr(p, "<|assistant|>A1") && !strstr(p, "R1")
                        : strstr(p, "<|assistant|><think>\nR1\n</think>\n\nA1") != NULL,
                      "messages, %s: %s", fams[i], p);
        srv_stop(&S);
        g_chat_family = NULL;
    }
}
END_TEST

/* DeepSeek-V3.1 (its probe closes the reasoning): a past call is written
 * N<｜tool▁sep｜>{...} between the call markers, calls back to back; a
 * required call is held to it. */
START_TEST(test_deepseek31_family)
{
#define DSB(x) "<\xEF\xBD\x9Ctool\xE2\x96\x81" x "\xEF\xBD\x9C>"
    g_gen_prompt = "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C><think></think>";
    srv_start_with(&S, NULL, 0, family_tweak);
    static const char body[] =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"add\"},{\"role\":\"assistant\",\"content\":null,"
        "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
        "\"{\\\"x\\\": 1}\"}},{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
        "\"{\\\"x\\\": 2}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"5\"}]," TOOLS
        ",\"tool_choice\":\"required\",\"max_tokens\":2}";
    json_decref(post_expect("/v1/chat/completions", body, 200));
    const fake_logged *l = last_logged();
    static const char want[] = DSB("calls\xE2\x96\x81" "begin") DSB("call\xE2\x96\x81" "begin") "f" DSB("sep")
        "{\"x\": 1}" DSB("call\xE2\x96\x81" "end") DSB("call\xE2\x96\x81" "begin") "f" DSB("sep") "{\"x\": 2}"
        DSB("call\xE2\x96\x81" "end") DSB("calls\xE2\x96\x81" "end");
    ck_assert_msg(strstr(l->prompt, want), "no V3.1 calls in %s", l->prompt);
    ck_assert_msg(!strstr(l->prompt, "```json"), "V3's call form in %s", l->prompt);
    ck_assert_msg(strstr(l->constraint, DSB("sep")) && !strstr(l->constraint, "```json"), "the grammar: %s",
                  l->constraint);
    srv_stop(&S);
#undef DSB
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
    tcase_add_test(tc, test_tool_choice_none_keeps_prefix);
    tcase_add_test(tc, test_template_options);
    suite_add_tcase(s, tc);
    TCase *hm = tcase_create("harmony");
    tcase_add_checked_fixture(hm, setup_harmony, teardown);
    tcase_set_timeout(hm, 60);
    tcase_add_test(hm, test_harmony_channels);
    tcase_add_test(hm, test_harmony_call);
    tcase_add_test(hm, test_harmony_bad_channel);
    suite_add_tcase(s, hm);
    TCase *fm = tcase_create("families");
    tcase_set_timeout(fm, 60);
    tcase_add_test(fm, test_family_history);
    tcase_add_test(fm, test_family_history_mistral_calls);
    tcase_add_test(fm, test_family_call_memo);
    tcase_add_test(fm, test_family_typed_values);
    tcase_add_test(fm, test_family_auto);
    tcase_add_test(fm, test_harmony_history);
    tcase_add_test(fm, test_harmony_call_memo);
    tcase_add_test(fm, test_think_open_per_request);
    tcase_add_test(fm, test_qwen35_family);
    tcase_add_test(fm, test_reasoning_into_history);
    tcase_add_test(fm, test_qwen_tools_text);
    tcase_add_test(fm, test_deepseek31_family);
    suite_add_tcase(s, fm);
    return s;
}

int main(void) { return http_test_main(suite()); }

#else /* !PAGODA_HAVE_CURL */
int main(void) { return http_test_main_skipped("test_http_tools"); }
#endif
