/* test_api_split.c: the output splitter of the agent APIs
 * (plugins/frontend/http/api/split.c): text, reasoning (<think> blocks, or
 * from the start when the template opened one) and Hermes <tool_call>
 * blocks told apart whatever the pieces the text arrives in: every split of
 * each case into two and three pieces, and byte by byte, gives the same
 * parts as the whole. No model, no server. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "split.h"
#include "split_testutil.h"
#include "testutil.h"

/* feeds s cut at the given offsets (sorted, ncut of them) */
static void run(const char *s, const size_t *cuts, int ncut, int think, int open, int calls, got *g)
{
    splitter sp;
    split_init(&sp, think, open, calls);
    split_sink k = {g_text, g_think, g_call, g};
    size_t at = 0, n = strlen(s);
    for (int i = 0; i <= ncut; i++) {
        size_t end = i < ncut ? cuts[i] : n;
        split_feed(&sp, s + at, end - at, &k);
        at = end;
    }
    split_end(&sp, &k);
    split_free(&sp);
}

typedef struct tcase_ {
    const char *in;
    int think, open, calls;
    const char *text, *reason, *calls_out;
} tcase_;

static const tcase_ cases[] = {
    {"plain text", 1, 0, 1, "plain text", "", ""},
    {"<think>let me see</think>The answer", 1, 0, 1, "The answer", "let me see", ""},
    {"\n<think>\nhmm\n</think>\n\nyes", 1, 0, 0, "\n\n\nyes", "\nhmm\n", ""},
    /* DeepSeek-R1: the prompt opened the block */
    {"reasoning here</think>answer", 1, 1, 0, "answer", "reasoning here", ""},
    /* reasoning off: the tags are text */
    {"<think>x</think>y", 0, 0, 0, "<think>x</think>y", "", ""},
    {"a <tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call> b", 1, 0, 1, "a  b", "",
     "f({\"x\":1})"},
    /* a block that is no call stays text */
    {"<tool_call>nope</tool_call>!", 1, 0, 1, "<tool_call>nope</tool_call>!", "", ""},
    /* calls off: the block is text */
    {"<tool_call>{\"name\":\"f\"}</tool_call>", 1, 0, 0, "<tool_call>{\"name\":\"f\"}</tool_call>", "", ""},
    {"<think>plan</think><tool_call>{\"name\":\"g\",\"arguments\":{}}</tool_call><tool_call>{\"name\":\"h\","
     "\"arguments\":\"{\\\"a\\\":2}\"}</tool_call>", 1, 0, 1, "", "plan", "g({})h({\"a\":2})"},
    /* cut short: an open think block is reasoning, an open call is text */
    {"<think>unfinished", 1, 0, 1, "", "unfinished", ""},
    {"x <tool_call>{\"name\"", 1, 0, 1, "x <tool_call>{\"name\"", "", ""},
    /* what only looks like a tag's start */
    {"a < b <thin c <tool_ d </thinking>", 1, 0, 1, "a < b <thin c <tool_ d </thinking>", "", ""},
    {"ends with <thi", 1, 0, 1, "ends with <thi", "", ""},
};

static void expect(const tcase_ *c, got *g, const char *how)
{
    ck_assert_msg(!strcmp(str(&g->text), c->text), "%s [%s]: text '%s', want '%s'", c->in, how, str(&g->text),
                  c->text);
    ck_assert_msg(!strcmp(str(&g->think), c->reason), "%s [%s]: reasoning '%s', want '%s'", c->in, how,
                  str(&g->think), c->reason);
    ck_assert_msg(!strcmp(str(&g->calls), c->calls_out), "%s [%s]: calls '%s', want '%s'", c->in, how,
                  str(&g->calls), c->calls_out);
}

START_TEST(test_whole_and_pieces)
{
    for (size_t t = 0; t < sizeof cases / sizeof *cases; t++) {
        const tcase_ *c = &cases[t];
        size_t n = strlen(c->in);
        got g = {0};
        run(c->in, NULL, 0, c->think, c->open, c->calls, &g);
        expect(c, &g, "whole");
        got_free(&g);
        for (size_t a = 0; a <= n; a++) {
            size_t cut[1] = {a};
            run(c->in, cut, 1, c->think, c->open, c->calls, &g);
            expect(c, &g, "two pieces");
            got_free(&g);
            for (size_t b = a; b <= n; b += 3) {
                size_t cut2[2] = {a, b};
                run(c->in, cut2, 2, c->think, c->open, c->calls, &g);
                expect(c, &g, "three pieces");
                got_free(&g);
            }
        }
        size_t *bytes = malloc(sizeof *bytes * (n + 1));
        for (size_t i = 0; i < n; i++) bytes[i] = i;
        run(c->in, bytes, (int)n, c->think, c->open, c->calls, &g);
        expect(c, &g, "byte by byte");
        got_free(&g);
        free(bytes);
    }
}
END_TEST

/* text goes out as soon as it cannot start a tag: nothing is held longer */
START_TEST(test_holds_only_a_tag_start)
{
    splitter sp;
    got g = {0};
    split_sink k = {g_text, g_think, g_call, &g};
    split_init(&sp, 1, 0, 1);
    split_feed(&sp, "Hello <", 7, &k);
    ck_assert_str_eq(str(&g.text), "Hello ");
    split_feed(&sp, "b", 1, &k);
    ck_assert_str_eq(str(&g.text), "Hello <b");
    split_feed(&sp, " <think>ab", 10, &k);
    ck_assert_str_eq(str(&g.think), "ab");
    split_feed(&sp, "c</thi", 6, &k);
    ck_assert_str_eq(str(&g.think), "abc");
    split_feed(&sp, "nk>z", 4, &k);
    ck_assert_str_eq(str(&g.text), "Hello <b z");
    split_end(&sp, &k);
    split_free(&sp);
    got_free(&g);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("api_split");
    TCase *tc = tcase_create("split");
    tcase_add_test(tc, test_whole_and_pieces);
    tcase_add_test(tc, test_holds_only_a_tag_start);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
