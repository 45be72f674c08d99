/* test_api_toolfmt.c: each family's tool-call and reasoning markup
 * (plugins/frontend/http/api/toolfmt.c) read into the frontend's parts:
 * the family's output is normalized, then split (split.c) into text,
 * reasoning and calls; every cut into two pieces, byte by byte, and 300
 * random chunkings give the same parts as the whole. Also harmony.c's
 * tools namespace against jinja2 renders of gpt-oss's template, and the
 * call memo (callmemo.c) per family: what each reader remembers, found by
 * the prompt's rendering of the same call, and nothing else. No model, no
 * server. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "callmemo.h"
#include "harmony.h"
#include "split.h"
#include "split_testutil.h"
#include "testutil.h"
#include "toolfmt.h"

#define DS_CALLS_BEGIN "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>"
#define DS_CALLS_END "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "end\xEF\xBD\x9C>"
#define DS_CALL_BEGIN "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>"
#define DS_CALL_END "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C>"
#define DS_SEP "<\xEF\xBD\x9Ctool\xE2\x96\x81sep\xEF\xBD\x9C>"

typedef struct fcase {
    int fmt;
    const char *in;
    const char *text, *think, *calls;
} fcase;

static const fcase CASES[] = {
    /* Hermes JSON, Qwen3-Coder XML and GLM-4.5 keys in the same tags */
    {FMT_HERMES, "Sure.\n<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
     "Sure.\n", "", "get({\"city\":\"Paris\"})"},
    {FMT_HERMES, "<think>hm</think><tool_call>\n<function=get>\n<parameter=city>\nParis\n</parameter>\n"
                 "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
     "", "hm", "get({\"city\":\"Paris\",\"days\":3})"},
    {FMT_HERMES, "<tool_call>get\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>n</arg_key>"
                 "\n<arg_value>[1, 2]</arg_value>\n</tool_call>",
     "", "", "get({\"city\":\"Paris\",\"n\":[1,2]})"},
    {FMT_HERMES, "a <tool_call>not json</tool_call> b", "a <tool_call>not json</tool_call> b", "", ""},
    /* Qwen3-Coder's own family: values with no schema known are JSON when
     * they parse (Python's True too), else text; one newline either side
     * of a value is markup; Hermes JSON in the same tags */
    {FMT_QWEN3CODER, "Let me look.\n<tool_call>\n<function=read>\n<parameter=path>\n/a b.txt\n</parameter>\n"
                     "<parameter=n>\n2\n</parameter>\n<parameter=all>\nTrue\n</parameter>\n</function>\n</tool_call>"
                     "<tool_call>\n<function=now>\n</function>\n</tool_call>",
     "Let me look.\n", "", "read({\"path\":\"/a b.txt\",\"n\":2,\"all\":true})now({})"},
    {FMT_QWEN3CODER, "<tool_call>\n<function=write>\n<parameter=text>\nline 1\nline 2\n\n</parameter>\n</function>\n"
                     "</tool_call>",
     "", "", "write({\"text\":\"line 1\\nline 2\\n\"})"},
    {FMT_QWEN3CODER, "<tool_call>\n{\"name\": \"get\", \"arguments\": {\"k\": 1}}\n</tool_call>", "", "",
     "get({\"k\":1})"},
    /* no </function>, a name that is no name: the text it was */
    {FMT_QWEN3CODER, "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</tool_call> x",
     "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</tool_call> x", "", ""},
    {FMT_QWEN3CODER, "<tool_call><function=a b></function></tool_call>", "<tool_call><function=a b></function></tool_call>",
     "", ""},
    /* GLM-4.5's own family: reasoning, keys and values, a name alone */
    {FMT_GLM45, "<think>plan</think>On it.\n<tool_call>get\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
                "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call><tool_call>now\n</tool_call>",
     "On it.\n", "plan", "get({\"city\":\"Paris\",\"days\":3})now({})"},
    {FMT_GLM45, "<tool_call>get<arg_key>q</arg_key><arg_value>a </arg_value> b</arg_value></tool_call>",
     "<tool_call>get<arg_key>q</arg_key><arg_value>a </arg_value> b</arg_value></tool_call>", "", ""},
    {FMT_GLM45, "a <tool_call>not a call</tool_call> b", "a <tool_call>not a call</tool_call> b", "", ""},
    /* Llama 3: the whole reply is the call */
    {FMT_LLAMA3, "{\"name\": \"get\", \"parameters\": {\"city\": \"Paris\"}}", "", "", "get({\"city\":\"Paris\"})"},
    {FMT_LLAMA3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", "", "", "f({})"},
    {FMT_LLAMA3, "It is {sunny} today.", "It is {sunny} today.", "", ""},
    {FMT_LLAMA3, "{\"a\": 1}", "{\"a\": 1}", "", ""},
    /* DeepSeek V3/R1 and V3.1 */
    {FMT_DEEPSEEK, "<think>plan</think>Calling." DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP
                   "get\n```json\n{\"city\": \"Paris\"}\n```" DS_CALL_END "\n" DS_CALL_BEGIN "function" DS_SEP
                   "now\n```json\n{}\n```" DS_CALL_END DS_CALLS_END,
     "Calling.\n", "plan", "get({\"city\":\"Paris\"})now({})"},
    {FMT_DEEPSEEK, DS_CALLS_BEGIN DS_CALL_BEGIN "get" DS_SEP "{\"city\":\"Rome\"}" DS_CALL_END DS_CALLS_END, "", "",
     "get({\"city\":\"Rome\"})"},
    /* malformed: a "name" that is no function name (no newline after the separator, the
     * tools example echoed with its newlines turned to spaces) stays text */
    {FMT_DEEPSEEK, DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP "<function-name> ```json {\"a\": 1} ```"
                   DS_CALL_END DS_CALLS_END,
     DS_CALL_BEGIN "function" DS_SEP "<function-name> ```json {\"a\": 1} ```" DS_CALL_END, "", ""},
    {FMT_DEEPSEEK, DS_CALLS_BEGIN DS_CALL_BEGIN "get city" DS_SEP "{}" DS_CALL_END DS_CALLS_END,
     DS_CALL_BEGIN "get city" DS_SEP "{}" DS_CALL_END, "", ""},
    {FMT_DEEPSEEK, DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP "now" DS_CALL_END DS_CALLS_END, "", "", "now({})"},
    /* Kimi K2 */
    {FMT_KIMI, "Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.get:0"
               "<|tool_call_argument_begin|>{\"city\": \"Oslo\"}<|tool_call_end|><|tool_call_begin|>"
               "functions.time:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
     "Let me check.", "", "get({\"city\":\"Oslo\"})time({})"},
    /* Mistral: a JSON list (v3, Nemo: an "id" beside), or v11's N[ARGS]{...}, each after [TOOL_CALLS] */
    {FMT_MISTRAL, "Sure.[TOOL_CALLS][{\"name\": \"get\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"a1b2c3d4e\"},"
                  " {\"name\": \"now\", \"arguments\": {}}]", "Sure.", "", "get({\"city\":\"Paris\"})now({})"},
    {FMT_MISTRAL, "[TOOL_CALLS] [{\"name\": \"get\", \"arguments\": \"{\\\"n\\\": 1}\"}] done", " done", "",
     "get({\"n\":1})"},
    {FMT_MISTRAL, "[TOOL_CALLS]get[ARGS]{\"city\": \"Rome\"}[TOOL_CALLS]now[CALL_ID]x9y8z7w6v[ARGS]{}", "", "",
     "get({\"city\":\"Rome\"})now({})"},
    /* malformed: the text it was, a good call beside a bad one still read */
    {FMT_MISTRAL, "[TOOL_CALLS][{\"name\": \"get\"", "[TOOL_CALLS][{\"name\": \"get\"", "", ""},
    {FMT_MISTRAL, "[TOOL_CALLS][{\"arguments\": {}}]", "[TOOL_CALLS][{\"arguments\": {}}]", "", ""},
    {FMT_MISTRAL, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}, 7]", "[TOOL_CALLS][{\"name\": \"f\", "
                  "\"arguments\": {}}, 7]", "", ""},
    {FMT_MISTRAL, "[TOOL_CALLS]get[ARGS]not json", "[TOOL_CALLS]get[ARGS]not json", "", ""},
    {FMT_MISTRAL, "[TOOL_CALLS]no args here[TOOL_CALLS]f[ARGS]{}", "[TOOL_CALLS]no args here", "", "f({})"},
    {FMT_MISTRAL, "a [TOOL_CALL] b [TOOL_CALLS", "a [TOOL_CALL] b [TOOL_CALLS", "", ""},
    /* harmony: analysis is reasoning, final the answer, commentary to=functions.N a call */
    {FMT_HARMONY, "<|channel|>analysis<|message|>User says hi.<|end|><|start|>assistant<|channel|>final"
                  "<|message|>Hello!", "Hello!", "User says hi.", ""},
    {FMT_HARMONY, "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
                  "to=functions.get <|constrain|>json<|message|>{\"city\":\"Lima\"}<|call|>",
     "", "Need weather.", "get({\"city\":\"Lima\"})"},
    {FMT_HARMONY, " to=functions.get<|channel|>commentary json<|message|>{\"city\": \"Kyiv\"}", "", "",
     "get({\"city\":\"Kyiv\"})"},
    {FMT_HARMONY, "<|channel|>commentary<|message|>Checking now.<|end|><|start|>assistant<|channel|>final"
                  "<|message|>Done.<|return|>", "Checking now.Done.", "", ""},
    {FMT_HARMONY, "<|channel|>weird<|message|>kept<|end|>", "kept", "", ""},
    {FMT_HARMONY, "plain words, no channels", "plain words, no channels", "", ""},
    {FMT_HARMONY, "<|channel|>final<|message|>Hi<|end|><|start|>assistant", "Hi", "", ""},
    {FMT_HARMONY, "<|channel|>analysis<|message|>cut short", "", "cut short", ""},
};

static void run(const fcase *c, const size_t *cuts, int ncut, got *g)
{
    fmt_norm f;
    fmt_init(&f, c->fmt);
    splitter sp;
    split_init(&sp, 1, 0, 1);
    split_sink k = {g_text, g_think, g_call, g};
    sbuf o = {0};
    size_t at = 0, n = strlen(c->in);
    for (int i = 0; i <= ncut; i++) {
        size_t end = i < ncut ? cuts[i] : n;
        o.len = 0;
        fmt_feed(&f, c->in + at, end - at, &o);
        if (o.len) split_feed(&sp, o.p, o.len, &k);
        at = end;
    }
    o.len = 0;
    fmt_end(&f, &o);
    if (o.len) split_feed(&sp, o.p, o.len, &k);
    split_end(&sp, &k);
    split_free(&sp);
    fmt_free(&f);
    free(o.p);
}

static void check(const fcase *c, const size_t *cuts, int ncut, const char *how)
{
    got g = {0};
    run(c, cuts, ncut, &g);
    ck_assert_msg(!strcmp(str(&g.text), c->text) && !strcmp(str(&g.think), c->think) &&
                      !strcmp(str(&g.calls), c->calls),
                  "%s '%s' (%s): text '%s' think '%s' calls '%s'", fmt_name(c->fmt), c->in, how, str(&g.text),
                  str(&g.think), str(&g.calls));
    got_free(&g);
}

START_TEST(every_chunking)
{
    unsigned seed = 12345;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const fcase *c = &CASES[i];
        size_t n = strlen(c->in);
        check(c, NULL, 0, "whole");
        for (size_t a = 1; a < n; a++) check(c, &a, 1, "two pieces");
        size_t *cuts = malloc(sizeof *cuts * n);
        for (size_t a = 1; a < n; a++) cuts[a - 1] = a;
        check(c, cuts, (int)n - 1, "byte by byte");
        for (int r = 0; r < 300; r++) {
            int k = 0;
            for (size_t a = 1; a < n; a++) {
                seed = seed * 1103515245u + 12345u;
                if ((seed >> 16) % 5 == 0) cuts[k++] = a;
            }
            check(c, cuts, k, "random");
        }
        free(cuts);
    }
}
END_TEST

START_TEST(bodies_and_probe)
{
    sbuf o = {0};
    static const char str_args[] = "{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}";
    ck_assert_int_eq(fmt_call_json(str_args, strlen(str_args), &o), 0);
    ck_assert_str_eq(o.p, "{\"name\":\"f\",\"arguments\":{\"a\":1}}");
    o.len = 0;
    static const char *const bad[] = {
        "{\"arguments\": {}}",                             /* no name */
        "<function=f>\n<parameter=a>\n1\n</parameter>\n",  /* no </function> */
        "f<arg_key>a</arg_key><arg_value>",                 /* an unclosed value */
        "{\"name\": \"f\", \"arguments\": [1]}",             /* arguments not an object */
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(fmt_call_json(bad[i], strlen(bad[i]), &o) == -1, "'%s'", bad[i]);
    ck_assert_uint_eq(o.len, 0);
    free(o.p);
    ck_assert_int_eq(fmt_from_probe("<|start|>user<|message|>hi<|end|><|start|>assistant"), FMT_HARMONY);
    ck_assert_int_eq(fmt_from_probe("<|im_user|>user<|im_middle|>hi<|im_end|><|im_assistant|>assistant<|im_middle|>"),
                     FMT_KIMI);
    ck_assert_int_eq(fmt_from_probe("<\xEF\xBD\x9CUser\xEF\xBD\x9Chi<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>"),
                     FMT_DEEPSEEK);
    ck_assert_int_eq(fmt_from_probe("<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"), FMT_LLAMA3);
    ck_assert_int_eq(fmt_from_probe("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"), FMT_HERMES);
    ck_assert_int_eq(fmt_from_probe("<s>[INST] s\n\nhi [/INST]"), FMT_MISTRAL);
    ck_assert_int_eq(fmt_from_probe("<s>[INST] <<SYS>>\ns\n<</SYS>>\n\nhi [/INST]"), FMT_HERMES);
    ck_assert_int_eq(fmt_from_probe(NULL), FMT_HERMES);
    ck_assert_int_eq(fmt_from_probe("[gMASK]<sop><|user|>\nhi<|assistant|>"), FMT_GLM45);
    /* Mistral's bodies: a list of one call, v11's N[ARGS]{...}; a name
     * that is no name, a list of two, arguments that are no object: none */
    static const char *const mi[][2] = {
        {"[{\"name\": \"f\", \"arguments\": {\"a\": 1}}]", "{\"name\":\"f\",\"arguments\":{\"a\":1}}"},
        {"f[CALL_ID]abc[ARGS]{\"a\": 1}", "{\"name\":\"f\",\"arguments\":{\"a\":1}}"},
    };
    for (size_t i = 0; i < 2; i++) {
        o = (sbuf){0};
        ck_assert_int_eq(fmt_call_json(mi[i][0], strlen(mi[i][0]), &o), 0);
        ck_assert_str_eq(o.p, mi[i][1]);
        free(o.p);
    }
    static const char *const mi_bad[] = {"a b[ARGS]{}", "[{\"name\": \"f\"}, {\"name\": \"g\"}]", "f[ARGS][1]", "[]"};
    o = (sbuf){0};
    for (size_t i = 0; i < sizeof mi_bad / sizeof mi_bad[0]; i++)
        ck_assert_msg(fmt_call_json(mi_bad[i], strlen(mi_bad[i]), &o) == -1, "'%s'", mi_bad[i]);
    ck_assert_uint_eq(o.len, 0);
    free(o.p);
}
END_TEST

/* The XML families' values by the tool's schema: a string parameter's
 * text is the string whatever it holds ("42", "true"; an enum of strings
 * too), an integer's or a boolean's text is JSON (True as Python writes
 * it), a parameter the schema does not list is JSON when it parses; the
 * reader gets the tools through fmt_set_tools. */
START_TEST(typed_values)
{
    json_t *tools = json_loads(
        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{"
        "\"s\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"},\"b\":{\"type\":\"boolean\"},"
        "\"k\":{\"enum\":[\"true\",\"no\"]},\"o\":{\"type\":\"object\"}}}}}]", 0, NULL);
    ck_assert_ptr_nonnull(tools);
    static const char want[] = "{\"name\":\"f\",\"arguments\":{\"s\":\"42\",\"n\":7,\"b\":true,\"k\":\"true\","
                               "\"o\":{\"a\":[1]},\"q\":[2]}}";
    static const char coder[] = "<function=f>\n<parameter=s>\n42\n</parameter>\n<parameter=n>\n7\n</parameter>\n"
                                "<parameter=b>\nTrue\n</parameter>\n<parameter=k>\ntrue\n</parameter>\n"
                                "<parameter=o>\n{\"a\": [1]}\n</parameter>\n<parameter=q>\n[2]\n</parameter>\n</function>";
    static const char glm[] = "f\n<arg_key>s</arg_key>\n<arg_value>42</arg_value>\n<arg_key>n</arg_key>\n"
                              "<arg_value>7</arg_value>\n<arg_key>b</arg_key>\n<arg_value>true</arg_value>\n"
                              "<arg_key>k</arg_key>\n<arg_value>true</arg_value>\n<arg_key>o</arg_key>\n"
                              "<arg_value>{\"a\": [1]}</arg_value>\n<arg_key>q</arg_key>\n<arg_value>[2]</arg_value>\n";
    sbuf o = {0};
    ck_assert_int_eq(fmt_call_read(FMT_QWEN3CODER, tools, coder, strlen(coder), &o), 0);
    ck_assert_str_eq(o.p, want);
    o.len = 0;
    ck_assert_int_eq(fmt_call_read(FMT_GLM45, tools, glm, strlen(glm), &o), 0);
    ck_assert_str_eq(o.p, want);
    /* without the schema the same text reads by what it holds */
    o.len = 0;
    ck_assert_int_eq(fmt_call_read(FMT_GLM45, NULL, glm, strlen(glm), &o), 0);
    ck_assert_str_eq(o.p, "{\"name\":\"f\",\"arguments\":{\"s\":42,\"n\":7,\"b\":true,\"k\":true,"
                          "\"o\":{\"a\":[1]},\"q\":[2]}}");
    /* through the reader, streamed a byte at a time */
    fmt_norm f;
    fmt_init(&f, FMT_QWEN3CODER);
    fmt_set_tools(&f, tools);
    json_decref(tools); /* the reader holds its own copy */
    char in[1024];
    snprintf(in, sizeof in, "<tool_call>\n%s\n</tool_call>", coder);
    o.len = 0;
    for (size_t i = 0; in[i]; i++) fmt_feed(&f, in + i, 1, &o);
    fmt_end(&f, &o);
    fmt_free(&f);
    char expect[1024];
    snprintf(expect, sizeof expect, "<tool_call>\n%s\n</tool_call>", want);
    ck_assert_str_eq(o.p, expect);
    free(o.p);
    static const char *const text[] = {"{\"type\":\"string\",\"enum\":[\"a\"]}", "{\"const\":\"a\"}",
                                       "{\"enum\":[\"a\",\"b\"]}"};
    static const char *const not_text[] = {"{\"type\":[\"string\",\"null\"]}", "{\"enum\":[\"a\",1]}", "{}",
                                           "{\"type\":\"number\"}", "{\"anyOf\":[{\"type\":\"string\"}]}"};
    for (int i = 0; i < 8; i++) {
        json_t *sc = json_loads(i < 3 ? text[i] : not_text[i - 3], 0, NULL);
        ck_assert_msg(fmt_param_is_text(sc) == (i < 3), "%d", i);
        json_decref(sc);
    }
}
END_TEST

/* gpt-oss's tools namespace: harmony_tools_ns on each renders.json case's
 * tools is the "tools" message its expected text was rendered with (the
 * template's render_tool_namespace; make_renders.py), and that text stands
 * in the expected render (test_chat_template checks the rest). */
START_TEST(harmony_tools_reference)
{
    json_error_t je;
    json_t *root = json_load_file(tu_src("tests/data/chat/renders.json"), 0, &je);
    ck_assert_msg(root != NULL, "renders.json: %s", je.text);
    size_t i, n_checked = 0;
    json_t *c;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        json_t *tools = json_object_get(c, "tools");
        /* the other families' tools cases (Qwen3's, QwQ's and GLM's tools
         * text) are test_chat_template's and test_http_tools' */
        if (!json_array_size(tools) || strcmp(json_string_value(json_object_get(c, "family")), "harmony")) continue;
        const char *want = NULL;
        size_t k;
        json_t *m;
        json_array_foreach(json_object_get(c, "messages"), k, m)
            if (!strcmp(json_string_value(json_object_get(m, "role")), "tools"))
                want = json_string_value(json_object_get(m, "content"));
        ck_assert_ptr_nonnull(want);
        char *got = harmony_tools_ns(tools);
        ck_assert_ptr_nonnull(got);
        ck_assert_msg(!strcmp(got, want), "%s:\n got  '%s'\n want '%s'",
                      json_string_value(json_object_get(c, "name")), got, want);
        ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(c, "expected")), got));
        free(got);
        n_checked++;
    }
    ck_assert_uint_ge(n_checked, 3);
    /* a tool without description or parameters, the flat (Responses) form */
    json_t *flat = json_loads("[{\"type\": \"function\", \"name\": \"f\"}]", 0, NULL);
    char *got = harmony_tools_ns(flat);
    ck_assert_str_eq(got, "## functions\n\nnamespace functions {\n\ntype f = () => any;\n\n} // namespace functions");
    free(got);
    json_decref(flat);
    json_decref(root);
}
END_TEST

/* feeds a whole output through a family's reader (the memo notes its calls) */
static void feed_fmt(int fmt, const char *in)
{
    fmt_norm f;
    fmt_init(&f, fmt);
    sbuf o = {0};
    fmt_feed(&f, in, strlen(in), &o);
    fmt_end(&f, &o);
    fmt_free(&f);
    free(o.p);
}

/* the span the memo holds for (fmt, name, the prompt's rendering of args
 * at index), or NULL */
static char *memo_for(int fmt, const char *name, const char *args, int index)
{
    char *r = callmemo_render(fmt, name, args, index);
    ck_assert_ptr_nonnull(r);
    char *w = callmemo_written(fmt, name, r);
    free(r);
    return w;
}

/* Each family's call comes back in the history as the model wrote it: the
 * model's output goes through its family's reader, and the span the prompt
 * renders for the same call (callmemo_render, what ../structured.c
 * writes) finds the written span; a call the model did not emit (other
 * arguments, another name, another index, another family) is a miss. */
START_TEST(call_memo_families)
{
    static const struct {
        int fmt;
        const char *out;     /* the model's output */
        const char *name, *args; /* the call as the client sends it back (json_dumps) */
        int index;
        const char *written; /* the span the memo gives the prompt */
    } F[] = {
        /* the constraint let the model space its object its own way */
        {FMT_HERMES, "<tool_call>\n{\"name\": \"get\", \"arguments\": { \"city\": \"Paris\" , \"n\": 2 }}\n</tool_call>",
         "get", "{\"city\": \"Paris\", \"n\": 2}", 0,
         "\n{\"name\": \"get\", \"arguments\": { \"city\": \"Paris\" , \"n\": 2 }}\n"},
        /* Qwen3-Coder's and GLM-4.5's forms inside the Hermes tags */
        {FMT_HERMES, "<tool_call>\n<function=get>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
         "get", "{\"city\": \"Paris\"}", 0, "\n<function=get>\n<parameter=city>\nParis\n</parameter>\n</function>\n"},
        {FMT_HERMES, "<tool_call>get\n<arg_key>n</arg_key>\n<arg_value>[1, 2]</arg_value>\n</tool_call>", "get",
         "{\"n\": [1, 2]}", 0, "get\n<arg_key>n</arg_key>\n<arg_value>[1, 2]</arg_value>\n"},
        {FMT_LLAMA3, " {\"name\": \"get\", \"parameters\": {\"city\":\"Paris\"}}\n", "get", "{\"city\": \"Paris\"}", 0,
         "{\"name\": \"get\", \"parameters\": {\"city\":\"Paris\"}}"},
        {FMT_LLAMA3, "<|python_tag|>{\"parameters\": {\"n\": 1}, \"name\": \"get\"}", "get", "{\"n\": 1}", 0,
         "{\"parameters\": {\"n\": 1}, \"name\": \"get\"}"},
        {FMT_DEEPSEEK, DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP "get\n```json\n{\"city\":\"Paris\"}\n```"
                       DS_CALL_END DS_CALLS_END,
         "get", "{\"city\": \"Paris\"}", 0, "function" DS_SEP "get\n```json\n{\"city\":\"Paris\"}\n```"},
        /* V3.1's form, read by the same reader */
        {FMT_DEEPSEEK, DS_CALLS_BEGIN DS_CALL_BEGIN "get" DS_SEP "{\"n\": 3}" DS_CALL_END DS_CALLS_END, "get",
         "{\"n\": 3}", 0, "get" DS_SEP "{\"n\": 3}"},
        {FMT_KIMI, "<|tool_calls_section_begin|><|tool_call_begin|>functions.get:1<|tool_call_argument_begin|>"
                   "{\"city\":\"Paris\"}<|tool_call_end|><|tool_calls_section_end|>",
         "get", "{\"city\": \"Paris\"}", 1, "functions.get:1<|tool_call_argument_begin|>{\"city\":\"Paris\"}"},
        /* harmony: the whole call message after <|start|>assistant, the
         * recipient after the channel as the model writes it (the template
         * writes it in the role); after an analysis message too */
        {FMT_HARMONY, "<|channel|>commentary to=functions.get <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
         "get", "{\"city\": \"Paris\"}", 0,
         "<|channel|>commentary to=functions.get <|constrain|>json<|message|>{\"city\":\"Paris\"}"},
        {FMT_HARMONY, "<|channel|>commentary to=functions.get <|constrain|>json<|message|>{\"city\": \"Paris\"}",
         "get", "{\"city\": \"Paris\"}", 0,
         "<|channel|>commentary to=functions.get <|constrain|>json<|message|>{\"city\": \"Paris\"}"},
        {FMT_HARMONY, "<|channel|>analysis<|message|>Need it.<|end|><|start|>assistant<|channel|>commentary "
                      "to=functions.get json<|message|> {\"city\": \"Paris\"}<|call|>",
         "get", "{\"city\": \"Paris\"}", 0, "<|channel|>commentary to=functions.get json<|message|> {\"city\": \"Paris\"}"},
        /* the template's header, the model's own spacing */
        {FMT_HARMONY, " to=functions.get<|channel|>commentary json<|message|>{\"city\":\"Paris\"}<|call|>", "get",
         "{\"city\": \"Paris\"}", 0, " to=functions.get<|channel|>commentary json<|message|>{\"city\":\"Paris\"}"},
        {FMT_MISTRAL, "[TOOL_CALLS][{\"name\":\"get\",\"arguments\":{\"city\":\"Paris\"}}]", "get",
         "{\"city\": \"Paris\"}", 0, "[{\"name\":\"get\",\"arguments\":{\"city\":\"Paris\"}}]"},
        {FMT_MISTRAL, "[TOOL_CALLS] [{\"name\": \"get\", \"arguments\": {\"city\": \"Paris\"}}] ok", "get",
         "{\"city\": \"Paris\"}", 0, " [{\"name\": \"get\", \"arguments\": {\"city\": \"Paris\"}}]"},
        /* Qwen3-Coder's and GLM-4.5's own families, the newlines the model left out */
        {FMT_QWEN3CODER, "<tool_call>\n<function=get>\n<parameter=city>\nParis</parameter>\n</function>\n</tool_call>",
         "get", "{\"city\": \"Paris\"}", 0, "\n<function=get>\n<parameter=city>\nParis</parameter>\n</function>\n"},
        {FMT_GLM45, "<tool_call>get\n<arg_key>city</arg_key><arg_value>Paris</arg_value>\n</tool_call>", "get",
         "{\"city\": \"Paris\"}", 0, "get\n<arg_key>city</arg_key><arg_value>Paris</arg_value>\n"},
        /* v11's form stands in for the list the prompt would write */
        {FMT_MISTRAL, "OK.[TOOL_CALLS]get[ARGS]{\"city\": \"Paris\"}", "get", "{\"city\": \"Paris\"}", 0,
         "get[ARGS]{\"city\": \"Paris\"}"},
    };
    for (size_t i = 0; i < sizeof F / sizeof F[0]; i++) {
        callmemo_clear();
        ck_assert_ptr_null(memo_for(F[i].fmt, F[i].name, F[i].args, F[i].index));
        feed_fmt(F[i].fmt, F[i].out);
        char *w = memo_for(F[i].fmt, F[i].name, F[i].args, F[i].index);
        ck_assert_msg(w && !strcmp(w, F[i].written), "%s case %zu: %s", fmt_name(F[i].fmt), i, w ? w : "(miss)");
        free(w);
        /* not emitted: other arguments, their keys in another order, another
         * name, another index (Kimi's is part of the call), another family */
        ck_assert_ptr_null(memo_for(F[i].fmt, F[i].name, "{\"city\": \"Pari\"}", F[i].index));
        ck_assert_ptr_null(memo_for(F[i].fmt, F[i].name, "{\"n\": 2, \"city\": \"Paris\"}", F[i].index));
        ck_assert_ptr_null(memo_for(F[i].fmt, "put", F[i].args, F[i].index));
        if (F[i].fmt == FMT_KIMI) ck_assert_ptr_null(memo_for(F[i].fmt, F[i].name, F[i].args, 0));
        int other = F[i].fmt == FMT_HERMES ? FMT_KIMI : FMT_HERMES;
        ck_assert_ptr_null(memo_for(other, F[i].name, F[i].args, F[i].index));
    }
    /* written as the prompt renders it: nothing to remember (the prompt's
     * text already); text that is no call, or a call cut short, neither */
    static const struct {
        int fmt;
        const char *out;
    } N[] = {
        {FMT_HERMES, "<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"},
        {FMT_HERMES, "<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\":\"Paris\"}\n</tool_call>"},
        {FMT_HERMES, "<tool_call>{\"name\": \"get\", \"arguments\": {\"city\":\"Paris\"}, \"id\": 1}</tool_call>"},
        {FMT_HERMES, "<tool_call>{\"name\": \"get\", \"arguments\": {\"city\":\"Paris\",\"city\":\"Rome\"}}</tool_call>"},
        {FMT_LLAMA3, "{\"name\": \"get\", \"parameters\": {\"city\": \"Paris\"}}"},
        {FMT_DEEPSEEK, DS_CALL_BEGIN "function" DS_SEP "get\n```json\n{\"city\": \"Paris\"}\n```" DS_CALL_END},
        {FMT_KIMI, "<|tool_call_begin|>functions.get:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}"
                   "<|tool_call_end|>"},
        {FMT_KIMI, "<|tool_call_begin|>functions.get<|tool_call_argument_begin|>{\"city\":\"Paris\"}<|tool_call_end|>"},
        /* harmony: the template's own header and spacing; arguments that
         * are no object; a header the history would not replay: text in
         * it, a recipient outside functions. or twice, another channel */
        {FMT_HARMONY, " to=functions.get<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>"},
        {FMT_HARMONY, "<|channel|>commentary to=functions.get <|constrain|>json<|message|>[1]<|call|>"},
        {FMT_HARMONY, "Sure thing<|channel|>commentary to=functions.get <|constrain|>json<|message|>{\"city\":\"Paris\"}"},
        {FMT_HARMONY, "<|channel|>commentary to=get <|constrain|>json<|message|>{\"city\":\"Paris\"}"},
        {FMT_HARMONY, "<|channel|>commentary to=functions.get to=functions.get json<|message|>{\"city\":\"Paris\"}"},
        {FMT_HARMONY, "<|channel|>analysis to=functions.get <|constrain|>json<|message|>{\"city\":\"Paris\"}"},
        {FMT_HARMONY, "<|channel|>commentary to=functions.get <|constrain|>json json<|message|>{\"city\":\"Paris\"}"},
        {FMT_MISTRAL, "[TOOL_CALLS][{\"name\": \"get\", \"arguments\": {\"city\": \"Paris\"}}]"},
        {FMT_QWEN3CODER, "<tool_call>\n<function=get>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"},
        {FMT_GLM45, "<tool_call>get\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"},
        /* two calls in one list, or an id beside: not the one call the prompt writes */
        {FMT_MISTRAL, "[TOOL_CALLS][{\"name\":\"get\",\"arguments\":{\"city\":\"Paris\"}},"
                      "{\"name\":\"get\",\"arguments\":{\"city\":\"Paris\"}}]"},
        {FMT_MISTRAL, "[TOOL_CALLS][{\"name\":\"get\",\"arguments\":{\"city\":\"Paris\"},\"id\":\"a1b2c3d4e\"}]"},
    };
    for (size_t i = 0; i < sizeof N / sizeof N[0]; i++) { /* one at a time: the latest writing would win */
        callmemo_clear();
        feed_fmt(N[i].fmt, N[i].out);
        for (int fmt = 0; fmt < FMT_COUNT; fmt++)
            for (int idx = 0; idx < 2; idx++) {
                char *w = memo_for(fmt, "get", "{\"city\": \"Paris\"}", idx);
                ck_assert_msg(!w, "%s case %zu: remembered %s", fmt_name(fmt), i, w);
            }
    }
    callmemo_clear();
}
END_TEST

/* The Hermes rendering, and the memo's bounds: the latest writing of a
 * call wins, the oldest of CALLMEMO_SIZE + 1 written calls is gone, the
 * newest kept. */
/* The memo reads a written XML call with the request's tools, as the
 * reader did for the client: a string parameter the model wrote as True
 * reached the client as the text "True", so the memo must not hold that
 * span for a call whose argument is the boolean true (or the text "abc"'s
 * span for abc written with quotes). */
START_TEST(call_memo_typed_like_the_reader)
{
    json_error_t je;
    json_t *tools = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"get\", \"parameters\": "
                               "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}]",
                               0, &je);
    ck_assert_ptr_nonnull(tools);
    static const char *outs[] = {
        "<tool_call>\n<function=get>\n<parameter=city>\nTrue</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=get>\n<parameter=city>\n\"abc\"</parameter>\n</function>\n</tool_call>",
    };
    static const char *untyped[] = {"{\"city\": true}", "{\"city\": \"abc\"}"};
    static const char *typed[] = {"{\"city\": \"True\"}", "{\"city\": \"\\\"abc\\\"\"}"};
    for (int i = 0; i < 2; i++) {
        callmemo_clear();
        fmt_norm f;
        fmt_init(&f, FMT_QWEN3CODER);
        fmt_set_tools(&f, tools);
        sbuf o = {0};
        fmt_feed(&f, outs[i], strlen(outs[i]), &o);
        fmt_end(&f, &o);
        fmt_free(&f);
        free(o.p);
        char *w = memo_for(FMT_QWEN3CODER, "get", untyped[i], 0);
        ck_assert_msg(!w, "case %d: the untyped reading's key holds %s", i, w);
        /* the client's own (typed) arguments find the span the model wrote */
        w = memo_for(FMT_QWEN3CODER, "get", typed[i], 0);
        ck_assert_msg(w && strstr(w, i ? "\"abc\"</parameter>" : "True</parameter>"), "case %d: %s", i,
                      w ? w : "(miss)");
        free(w);
    }
    callmemo_clear();
    json_decref(tools);
}
END_TEST

START_TEST(call_memo_bounds)
{
    callmemo_clear();
    char *canon = callmemo_render(FMT_HERMES, "get_weather", "{\"city\":\"Paris\",\"n\":2}", 0);
    ck_assert_str_eq(canon, "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": 2}}\n");
    free(canon);
    canon = callmemo_render(FMT_HERMES, "f", "not json", 0);
    ck_assert_str_eq(canon, "\n{}\n");
    free(canon);
    /* a client's name holding a quote or a backslash stays valid JSON in the JSON families */
    canon = callmemo_render(FMT_LLAMA3, "a\"b\\c", "{}", 0);
    ck_assert_str_eq(canon, "{\"name\": \"a\\\"b\\\\c\", \"parameters\": {}}");
    free(canon);
    canon = callmemo_render(FMT_MISTRAL, "get", "{}", 0);
    ck_assert_str_eq(canon, "[{\"name\": \"get\", \"arguments\": {}}]");
    free(canon);
    /* the XML families: a string's text, other values as JSON */
    static const char xa[] = "{\"s\":\"a\\nb\",\"n\":2,\"o\":{\"x\":[1,true]}}";
    canon = callmemo_render(FMT_QWEN3CODER, "f", xa, 0);
    ck_assert_str_eq(canon, "\n<function=f>\n<parameter=s>\na\nb\n</parameter>\n<parameter=n>\n2\n</parameter>\n"
                            "<parameter=o>\n{\"x\": [1, true]}\n</parameter>\n</function>\n");
    free(canon);
    canon = callmemo_render(FMT_GLM45, "f", xa, 0);
    ck_assert_str_eq(canon, "f\n<arg_key>s</arg_key>\n<arg_value>a\nb</arg_value>\n<arg_key>n</arg_key>\n"
                            "<arg_value>2</arg_value>\n<arg_key>o</arg_key>\n<arg_value>{\"x\": [1, true]}</arg_value>\n");
    free(canon);
    canon = callmemo_render(FMT_GLM45, "f", "{}", 0);
    ck_assert_str_eq(canon, "f\n");
    free(canon);
    feed_fmt(FMT_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": {\"i\":1}}</tool_call>");
    feed_fmt(FMT_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": { \"i\": 1 }}</tool_call>");
    char *w = memo_for(FMT_HERMES, "f", "{\"i\": 1}", 0);
    ck_assert_str_eq(w, "{\"name\": \"f\", \"arguments\": { \"i\": 1 }}");
    free(w);
    char in[128], args[64];
    for (int i = 0; i <= CALLMEMO_SIZE; i++) {
        snprintf(in, sizeof in, "<tool_call>{\"name\": \"f\", \"arguments\": { \"i\": %d }}</tool_call>", i + 2);
        feed_fmt(FMT_HERMES, in);
    }
    ck_assert_ptr_null(memo_for(FMT_HERMES, "f", "{\"i\": 1}", 0));
    ck_assert_ptr_null(memo_for(FMT_HERMES, "f", "{\"i\": 2}", 0));
    snprintf(args, sizeof args, "{\"i\": %d}", CALLMEMO_SIZE + 2);
    w = memo_for(FMT_HERMES, "f", args, 0);
    ck_assert_ptr_nonnull(w);
    snprintf(in, sizeof in, "{\"name\": \"f\", \"arguments\": { \"i\": %d }}", CALLMEMO_SIZE + 2);
    ck_assert_str_eq(w, in);
    free(w);
    callmemo_clear();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("api_toolfmt");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, every_chunking);
    tcase_add_test(tc, bodies_and_probe);
    tcase_add_test(tc, typed_values);
    tcase_add_test(tc, harmony_tools_reference);
    tcase_add_test(tc, call_memo_families);
    tcase_add_test(tc, call_memo_bounds);
    tcase_add_test(tc, call_memo_typed_like_the_reader);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
