/* test_http.c: the HTTP frontend plugin (plugins/frontend/http/) driven
 * over loopback with libcurl against the fake engine host (fake_engine.h):
 * every route, streaming and not, OpenAI response shapes, every error
 * status, cancel on client disconnect, and drain on stop(). */
#include "http_testutil.h"

#ifdef PAGODA_HAVE_CURL

/* --------------------------------------------------------------- tests */

START_TEST(test_simple_routes)
{
    srv s;
    srv_start(&s, NULL, 0);
    resp r = {0};
    expect_status(&s, "GET", "/health", NULL, NULL, 200);

    memset(&r, 0, sizeof r);
    http_req(&s, "GET", "/v1/models", NULL, 0, NULL, &r, 0);
    ck_assert_int_eq(r.status, 200);
    json_t *j = json_loads(r.body, 0, NULL);
    ck_assert_str_eq(jget_str(j, "object"), "list");
    ck_assert_str_eq(jget_str(j, "data.0.id"), "fake-model");
    ck_assert_str_eq(jget_str(j, "data.0.object"), "model");
    ck_assert_int_eq(json_array_size(jget(j, "data")), 1);
    json_decref(j);
    free(r.body);

    memset(&r, 0, sizeof r);
    http_req(&s, "GET", "/metrics", NULL, 0, NULL, &r, 0);
    ck_assert_int_eq(r.status, 200);
    /* the host's text, then the gate's own answers (none yet) */
    const char *host_text = "# HELP fake_metric A test metric.\n# TYPE fake_metric gauge\nfake_metric 42\n";
    ck_assert_msg(!strncmp(r.body, host_text, strlen(host_text)), "%s", r.body);
    ck_assert_ptr_nonnull(strstr(r.body, "\n# TYPE pagoda_http_rejected_total counter\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "\npagoda_http_rejected_total{reason=\"server_busy\"} 0\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "\npagoda_http_rejected_total{reason=\"request_timeout\"} 0\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "\npagoda_http_rejected_total{reason=\"bad_request\"} 0\n"));
    ck_assert_ptr_nonnull(strstr(r.ctype, "text/plain; version=0.0.4"));
    free(r.body);

    memset(&r, 0, sizeof r);
    http_req(&s, "GET", "/v1/memory", NULL, 0, NULL, &r, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "{\"weights_bytes\":1234,\"kv_blocks\":56}");
    ck_assert_ptr_nonnull(strstr(r.ctype, "application/json"));
    free(r.body);

    memset(&r, 0, sizeof r);
    http_req(&s, "GET", "/nope", NULL, 0, NULL, &r, 0);
    ck_assert_int_eq(r.status, 404);
    ck_assert_ptr_nonnull(strstr(r.body, "\"error\""));
    free(r.body);

    expect_status(&s, "GET", "/v1/completions", NULL, NULL, 405);

    expect_status(&s, "POST", "/health", "{}", NULL, 405);
    srv_stop(&s);
}
END_TEST

START_TEST(test_completion_basic)
{
    srv s;
    srv_start(&s, NULL, 0);
    long st;
    json_t *j = post_json(&s, "/v1/completions",
                          "{\"model\":\"whatever\",\"prompt\":\"hello big world\",\"max_tokens\":10,"
                          "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":5,\"min_p\":0.1,\"seed\":42,"
                          "\"stop\":[\"xx\",\"yy\"],\"presence_penalty\":0.5,\"frequency_penalty\":0.25,"
                          "\"repetition_penalty\":1.1,\"ignore_eos\":true,\"priority\":3,"
                          "\"cache_salt\":\"s1\",\"unknown_field\":{\"a\":[1,2]}}",
                          &st);
    ck_assert_int_eq(st, 200);
    ck_assert_str_eq(jget_str(j, "object"), "text_completion");
    ck_assert_int_eq(strncmp(jget_str(j, "id"), "cmpl-", 5), 0);
    ck_assert_str_eq(jget_str(j, "model"), "fake-model");
    ck_assert_int_eq(strncmp(jget_str(j, "system_fingerprint"), "pagoda-", 7), 0);
    ck_assert_int_gt(jint(j, "created"), 1600000000);
    ck_assert_int_eq(json_array_size(jget(j, "choices")), 1);
    ck_assert_str_eq(jget_str(j, "choices.0.text"), "hello big world");
    ck_assert_str_eq(jget_str(j, "choices.0.finish_reason"), "stop");
    ck_assert_int_eq(jint(j, "choices.0.index"), 0);
    ck_assert(json_is_null(jget(j, "choices.0.logprobs")));
    ck_assert_int_eq(jint(j, "usage.prompt_tokens"), 4); /* BOS + 3 words */
    ck_assert_int_eq(jint(j, "usage.completion_tokens"), 3);
    ck_assert_int_eq(jint(j, "usage.total_tokens"), 7);
    ck_assert_int_eq(jint(j, "usage.prompt_tokens_details.cached_tokens"), 0);
    json_decref(j);

    /* what reached the engine */
    fake_engine *f = s.f;
    ck_assert_int_eq(f->n_log, 1);
    fake_logged *l = &f->log[0];
    ck_assert_str_eq(l->prompt, "hello big world");
    ck_assert_int_eq(l->req.max_tokens, 10);
    ck_assert_float_eq_tol(l->req.temperature, 0.5f, 1e-6);
    ck_assert_float_eq_tol(l->req.top_p, 0.9f, 1e-6);
    ck_assert_int_eq(l->req.top_k, 5);
    ck_assert_float_eq_tol(l->req.min_p, 0.1f, 1e-6);
    ck_assert(l->req.has_seed);
    ck_assert_uint_eq(l->req.seed, 42);
    ck_assert_int_eq(l->n_stop, 2);
    ck_assert_str_eq(l->stop[0], "xx");
    ck_assert_str_eq(l->stop[1], "yy");
    ck_assert_float_eq_tol(l->req.presence_penalty, 0.5f, 1e-6);
    ck_assert_float_eq_tol(l->req.frequency_penalty, 0.25f, 1e-6);
    ck_assert_float_eq_tol(l->req.repetition_penalty, 1.1f, 1e-6);
    ck_assert(l->req.ignore_eos);
    ck_assert_int_eq(l->req.priority, 3);
    ck_assert_str_eq(l->cache_salt, "s1");
    ck_assert(l->req.add_special);
    ck_assert(!l->req.parse_special);
    ck_assert_int_eq(l->req.logprobs, -1);

    /* max_tokens reached -> length; a stop string ends with stop */
    j = post_json(&s, "/v1/completions", "{\"prompt\":\"a b c d e\",\"max_tokens\":2}", &st);
    ck_assert_int_eq(st, 200);
    ck_assert_str_eq(jget_str(j, "choices.0.text"), "a b");
    ck_assert_str_eq(jget_str(j, "choices.0.finish_reason"), "length");
    json_decref(j);
    j = post_json(&s, "/v1/completions", "{\"prompt\":\"a b c d e\",\"stop\":\"c\"}", &st);
    ck_assert_str_eq(jget_str(j, "choices.0.text"), "a b");
    ck_assert_str_eq(jget_str(j, "choices.0.finish_reason"), "stop");
    json_decref(j);
    /* max_completion_tokens wins over max_tokens */
    j = post_json(&s, "/v1/completions", "{\"prompt\":\"a b c d e\",\"max_tokens\":4,\"max_completion_tokens\":1}", &st);
    ck_assert_str_eq(jget_str(j, "choices.0.text"), "a");
    json_decref(j);
    /* token-id prompt */
    j = post_json(&s, "/v1/completions", "{\"prompt\":[10,11]}", &st);
    ck_assert_int_eq(st, 200);
    ck_assert_str_eq(jget_str(j, "choices.0.text"), "hello big");
    json_decref(j);
    srv_stop(&s);
}
END_TEST

START_TEST(test_completion_multi)
{
    srv s;
    srv_start(&s, NULL, 0);
    long st;
    json_t *j = post_json(&s, "/v1/completions",
                          "{\"prompt\":[\"one two\",\"three\"],\"n\":2,\"seed\":7,\"max_tokens\":5}", &st);
    ck_assert_int_eq(st, 200);
    ck_assert_int_eq(json_array_size(jget(j, "choices")), 4);
    const char *want[] = {"one two", "one two", "three", "three"};
    for (int i = 0; i < 4; i++) {
        char p[64];
        snprintf(p, sizeof p, "choices.%d.text", i);
        ck_assert_str_eq(jget_str(j, p), want[i]);
        snprintf(p, sizeof p, "choices.%d.index", i);
        ck_assert_int_eq(jint(j, p), i);
    }
    ck_assert_int_eq(jint(j, "usage.prompt_tokens"), 3 + 2); /* once per prompt, not per n */
    ck_assert_int_eq(jint(j, "usage.completion_tokens"), 6);
    json_decref(j);
    ck_assert_int_eq(s.f->n_log, 4);
    ck_assert_uint_eq(s.f->log[0].req.seed, 7);
    ck_assert_uint_eq(s.f->log[1].req.seed, 8);
    ck_assert_uint_eq(s.f->log[2].req.seed, 7);
    srv_stop(&s);
}
END_TEST

START_TEST(test_chat_basic)
{
    srv s;
    srv_start(&s, NULL, 0);
    long st;
    json_t *j = post_json(&s, "/v1/chat/completions",
                          "{\"model\":\"x\",\"messages\":[{\"role\":\"system\",\"content\":\"be nice\"},"
                          "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi \"},"
                          "{\"type\":\"text\",\"text\":\"there\"}]}],\"max_completion_tokens\":50}",
                          &st);
    ck_assert_int_eq(st, 200);
    ck_assert_str_eq(s.f->last_render, "<|system|>be nice\n<|user|>hi there\n<|assistant|>");
    ck_assert_str_eq(jget_str(j, "object"), "chat.completion");
    ck_assert_int_eq(strncmp(jget_str(j, "id"), "chatcmpl-", 9), 0);
    ck_assert_str_eq(jget_str(j, "choices.0.message.role"), "assistant");
    ck_assert_str_eq(jget_str(j, "choices.0.message.content"),
                     "<|system|>be nice <|user|>hi there <|assistant|>");
    ck_assert_str_eq(jget_str(j, "choices.0.finish_reason"), "stop");
    json_decref(j);
    fake_logged *l = &s.f->log[0];
    ck_assert(l->req.parse_special);
    ck_assert(!l->req.add_special);
    ck_assert_int_eq(l->req.n_stop_token_ids, 1);
    ck_assert_int_eq(l->stop_ids[0], FAKE_EOS);
    ck_assert_int_eq(l->req.max_tokens, 50);
    srv_stop(&s);
}
END_TEST

START_TEST(test_logprobs)
{
    srv s;
    srv_start(&s, NULL, 0);
    long st;
    json_t *j = post_json(&s, "/v1/completions", "{\"prompt\":\"hello big world\",\"logprobs\":2}", &st);
    ck_assert_int_eq(st, 200);
    ck_assert_int_eq(s.f->log[0].req.logprobs, 2);
    json_t *lp = jget(j, "choices.0.logprobs");
    ck_assert_int_eq(json_array_size(json_object_get(lp, "tokens")), 3);
    ck_assert_str_eq(jget_str(lp, "tokens.0"), "hello");
    ck_assert_str_eq(jget_str(lp, "tokens.2"), "world");
    ck_assert_double_eq_tol(json_real_value(jget(lp, "token_logprobs.1")), -0.5, 1e-6);
    ck_assert_double_eq_tol(json_real_value(jget(lp, "top_logprobs.0.hello")), -0.5, 1e-6);
    ck_assert_double_eq_tol(json_real_value(jget(lp, "top_logprobs.0.</s>")), -1.5, 1e-6);
    ck_assert_int_eq(jint(lp, "text_offset.0"), 0);
    ck_assert_int_eq(jint(lp, "text_offset.1"), 5);  /* "hello" */
    ck_assert_int_eq(jint(lp, "text_offset.2"), 9);  /* "hello big" */
    json_decref(j);

    j = post_json(&s, "/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"logprobs\":true,\"top_logprobs\":1}", &st);
    ck_assert_int_eq(st, 200);
    ck_assert_int_eq(s.f->log[1].req.logprobs, 1);
    json_t *c = jget(j, "choices.0.logprobs.content");
    ck_assert_int_eq(json_array_size(c), 2); /* "<|user|>hi", "<|assistant|>" */
    ck_assert_str_eq(jget_str(c, "0.token"), "<|user|>hi");
    ck_assert_double_eq_tol(json_real_value(jget(c, "0.logprob")), -0.5, 1e-6);
    ck_assert_int_eq(json_array_size(jget(c, "0.bytes")), 10);
    ck_assert_int_eq(jint(c, "0.bytes.0"), '<');
    ck_assert_int_eq(json_array_size(jget(c, "0.top_logprobs")), 1);
    ck_assert_str_eq(jget_str(c, "0.top_logprobs.0.token"), "<|user|>hi");
    json_decref(j);

    /* logprobs: true without top_logprobs -> logprobs 0 (chosen token only) */
    j = post_json(&s, "/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"logprobs\":true}", &st);
    ck_assert_int_eq(s.f->log[2].req.logprobs, 0);
    ck_assert_int_eq(json_array_size(jget(j, "choices.0.logprobs.content.0.top_logprobs")), 0);
    json_decref(j);
    srv_stop(&s);
}
END_TEST

START_TEST(test_stream_completion)
{
    srv s;
    srv_start(&s, NULL, 0);
    resp r = {0};
    const char *body = "{\"prompt\":\"hello big world\",\"stream\":true}";
    http_req(&s, "POST", "/v1/completions", body, strlen(body), NULL, &r, 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.ctype, "text/event-stream"));
    json_t *ch[64];
    int done;
    int n = parse_sse(r.body, ch, 64, &done);
    ck_assert(done);
    ck_assert_int_eq(n, 4); /* 3 tokens + final */
    char text[256] = {0};
    for (int i = 0; i < n; i++) {
        ck_assert_str_eq(jget_str(ch[i], "object"), "text_completion");
        ck_assert_int_eq(strncmp(jget_str(ch[i], "id"), "cmpl-", 5), 0);
        ck_assert_int_eq(json_array_size(jget(ch[i], "choices")), 1);
        strcat(text, jget_str(ch[i], "choices.0.text"));
        if (i < n - 1) ck_assert(json_is_null(jget(ch[i], "choices.0.finish_reason")));
        ck_assert_ptr_null(json_object_get(ch[i], "usage")); /* only with include_usage */
    }
    ck_assert_str_eq(text, "hello big world");
    ck_assert_str_eq(jget_str(ch[n - 1], "choices.0.finish_reason"), "stop");
    /* every chunk has the same id */
    ck_assert_str_eq(jget_str(ch[0], "id"), jget_str(ch[n - 1], "id"));
    for (int i = 0; i < n; i++) json_decref(ch[i]);
    free(r.body);
    srv_stop(&s);
}
END_TEST

START_TEST(test_stream_chat_usage)
{
    srv s;
    srv_start(&s, NULL, 0);
    resp r = {0};
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"yo\"}],\"stream\":true,"
                       "\"stream_options\":{\"include_usage\":true},\"n\":2}";
    http_req(&s, "POST", "/v1/chat/completions", body, strlen(body), NULL, &r, 0);
    ck_assert_int_eq(r.status, 200);
    json_t *ch[64];
    int done;
    int n = parse_sse(r.body, ch, 64, &done);
    ck_assert(done);
    /* per choice: role + 2 tokens + final = 4; 2 choices; + usage chunk */
    ck_assert_int_eq(n, 9);
    char text[2][128] = {{0}, {0}};
    int roles = 0, finals = 0;
    for (int i = 0; i < n - 1; i++) {
        ck_assert_str_eq(jget_str(ch[i], "object"), "chat.completion.chunk");
        ck_assert(json_is_null(json_object_get(ch[i], "usage")));
        ck_assert_ptr_nonnull(json_object_get(ch[i], "usage"));
        int idx = (int)jint(ch[i], "choices.0.index");
        json_t *delta = jget(ch[i], "choices.0.delta");
        ck_assert_ptr_nonnull(delta);
        if (json_object_get(delta, "role")) {
            ck_assert_str_eq(jget_str(delta, "role"), "assistant");
            ck_assert_int_eq(finals, 0);
            roles++;
        } else if (json_is_string(jget(ch[i], "choices.0.finish_reason"))) {
            ck_assert_str_eq(jget_str(ch[i], "choices.0.finish_reason"), "stop");
            ck_assert_int_eq(json_object_size(delta), 0);
            finals++;
        } else {
            strcat(text[idx], jget_str(delta, "content"));
        }
    }
    ck_assert_int_eq(roles, 2);
    ck_assert_int_eq(finals, 2);
    ck_assert_str_eq(text[0], "<|user|>yo <|assistant|>");
    ck_assert_str_eq(text[1], "<|user|>yo <|assistant|>");
    json_t *u = ch[n - 1];
    ck_assert_int_eq(json_array_size(json_object_get(u, "choices")), 0);
    ck_assert_int_eq(jint(u, "usage.prompt_tokens"), 2); /* counted once for n = 2 */
    ck_assert_int_eq(jint(u, "usage.completion_tokens"), 4);
    ck_assert_int_eq(jint(u, "usage.total_tokens"), 6);
    for (int i = 0; i < n; i++) json_decref(ch[i]);
    free(r.body);
    srv_stop(&s);
}
END_TEST

/* echo: the prompt's text first; with logprobs its tokens' entries first
 * (token_logprobs[0] and top_logprobs[0] null), the generated ones' offsets
 * after the echoed text; max_tokens 0 scores the prompt alone; token ids
 * are the model's input as sent (no BOS added); the lm-evaluation-harness
 * loglikelihood body works as it is sent. */
START_TEST(test_echo)
{
    srv s;
    srv_start(&s, NULL, 0);
    long st;
    json_t *j = post_json(&s, "/v1/completions",
                          "{\"prompt\":\"hello big world\",\"echo\":true,\"logprobs\":1,\"max_tokens\":2}", &st);
    ck_assert_int_eq(st, 200);
    ck_assert_int_eq(s.f->log[0].req.prompt_logprobs, 1);
    ck_assert(!s.f->log[0].req.score_only);
    ck_assert_str_eq(jget_str(j, "choices.0.text"), "hello big worldhello big");
    json_t *lp = jget(j, "choices.0.logprobs");
    /* BOS + 3 prompt words, then 2 generated */
    ck_assert_int_eq(json_array_size(json_object_get(lp, "tokens")), 6);
    ck_assert_int_eq(json_array_size(json_object_get(lp, "token_logprobs")), 6);
    ck_assert_int_eq(json_array_size(json_object_get(lp, "top_logprobs")), 6);
    ck_assert_int_eq(json_array_size(json_object_get(lp, "text_offset")), 6);
    ck_assert_str_eq(jget_str(lp, "tokens.0"), "<s>");
    ck_assert_str_eq(jget_str(lp, "tokens.1"), "hello");
    ck_assert_str_eq(jget_str(lp, "tokens.3"), "world");
    ck_assert_str_eq(jget_str(lp, "tokens.4"), "hello");
    ck_assert(json_is_null(jget(lp, "token_logprobs.0")));
    ck_assert(json_is_null(jget(lp, "top_logprobs.0")));
    ck_assert_double_eq_tol(json_real_value(jget(lp, "token_logprobs.1")), -0.25, 1e-6);
    ck_assert_double_eq_tol(json_real_value(jget(lp, "token_logprobs.3")), -0.75, 1e-6);
    ck_assert_double_eq_tol(json_real_value(jget(lp, "top_logprobs.2.big")), -0.5, 1e-6);
    ck_assert_int_eq(json_object_size(jget(lp, "top_logprobs.2")), 1);
    ck_assert_double_eq_tol(json_real_value(jget(lp, "token_logprobs.4")), -0.5, 1e-6);
    /* offsets never decrease, stay in the echoed text for the prompt, and
     * the generated ones start after it */
    for (int i = 1; i < 6; i++) {
        char a[32], b[32];
        snprintf(a, sizeof a, "text_offset.%d", i - 1);
        snprintf(b, sizeof b, "text_offset.%d", i);
        ck_assert_int_le(jint(lp, a), jint(lp, b));
    }
    ck_assert_int_le(jint(lp, "text_offset.3"), 15);
    ck_assert_int_eq(jint(lp, "text_offset.4"), 15);  /* "hello big world" */
    ck_assert_int_eq(jint(lp, "text_offset.5"), 20);  /* + "hello" */
    ck_assert_int_eq(jint(j, "usage.prompt_tokens"), 4);
    ck_assert_int_eq(jint(j, "usage.completion_tokens"), 2);
    json_decref(j);

    /* max_tokens 0: the prompt alone, finish_reason length */
    j = post_json(&s, "/v1/completions",
                  "{\"prompt\":\"hello big world\",\"echo\":true,\"logprobs\":0,\"max_tokens\":0}", &st);
    ck_assert_int_eq(st, 200);
    ck_assert(s.f->log[1].req.score_only);
    ck_assert_str_eq(jget_str(j, "choices.0.text"), "hello big world");
    ck_assert_str_eq(jget_str(j, "choices.0.finish_reason"), "length");
    ck_assert_int_eq(json_array_size(jget(j, "choices.0.logprobs.tokens")), 4);
    ck_assert_int_eq(json_object_size(jget(j, "choices.0.logprobs.top_logprobs.1")), 0);
    ck_assert_int_eq(jint(j, "usage.completion_tokens"), 0);
    json_decref(j);

    /* echo without logprobs: the text only, nothing scored */
    j = post_json(&s, "/v1/completions", "{\"prompt\":\"hello big\",\"echo\":true,\"max_tokens\":1}", &st);
    ck_assert_int_eq(st, 200);
    ck_assert_int_eq(s.f->log[2].req.prompt_logprobs, -1);
    ck_assert_str_eq(jget_str(j, "choices.0.text"), "hello bighello");
    ck_assert(json_is_null(jget(j, "choices.0.logprobs")));
    json_decref(j);

    /* lm-evaluation-harness's loglikelihood body: token ids in a list of
     * lists, max_tokens 1, logprobs 1, echo; one choice per prompt, and one
     * entry per id sent plus the generated one (no BOS added) */
    j = post_json(&s, "/v1/completions",
                  "{\"model\":\"m\",\"prompt\":[[10,11,12],[12,10]],\"temperature\":0,\"max_tokens\":1,"
                  "\"logprobs\":1,\"seed\":1234,\"echo\":true}", &st);
    ck_assert_int_eq(st, 200);
    ck_assert(!s.f->log[3].req.add_special && !s.f->log[4].req.add_special);
    ck_assert_int_eq(json_array_size(jget(j, "choices")), 2);
    ck_assert_int_eq(json_array_size(jget(j, "choices.0.logprobs.token_logprobs")), 4);
    ck_assert_int_eq(json_array_size(jget(j, "choices.1.logprobs.token_logprobs")), 3);
    ck_assert(json_is_null(jget(j, "choices.1.logprobs.token_logprobs.0")));
    ck_assert_double_eq_tol(json_real_value(jget(j, "choices.1.logprobs.token_logprobs.1")), -0.25, 1e-6);
    /* the harness checks is_greedy as token_logprob == max(top_logprobs) */
    ck_assert_double_eq_tol(json_real_value(jget(j, "choices.0.logprobs.top_logprobs.2.world")), -0.5, 1e-6);
    ck_assert_str_eq(jget_str(j, "choices.0.text"), "hello big worldhello");
    json_decref(j);
    srv_stop(&s);
}
END_TEST

START_TEST(test_bad_requests)
{
    srv s;
    srv_start(&s, NULL, 0);
    const char *C = "/v1/completions", *CH = "/v1/chat/completions";
    expect_error(&s, C, "{\"prompt\": \"a\"", 400, "malformed JSON", NULL);
    expect_error(&s, C, "[1,2]", 400, "JSON object", NULL);
    expect_error(&s, C, "", 400, "malformed JSON", NULL);
    expect_error(&s, C, "{\"prompt\":\"a\",\"temperature\":3}", 400, "[0, 2]", "temperature");
    expect_error(&s, C, "{\"prompt\":\"a\",\"temperature\":\"hot\"}", 400, "temperature", "temperature");
    expect_error(&s, C, "{\"prompt\":\"a\",\"top_p\":0}", 400, "(0, 1]", "top_p");
    expect_error(&s, C, "{\"prompt\":\"a\",\"max_tokens\":0}", 400, "max_tokens", "max_tokens");
    expect_error(&s, C, "{\"prompt\":\"a\",\"max_tokens\":1.5}", 400, "integer", "max_tokens");
    expect_error(&s, C, "{\"prompt\":\"a\",\"n\":17}", 400, "[1, 16]", "n");
    expect_error(&s, C, "{\"prompt\":\"a\",\"min_p\":-1}", 400, "min_p", "min_p");
    expect_error(&s, C, "{\"prompt\":\"a\",\"presence_penalty\":5}", 400, "[-2, 2]", "presence_penalty");
    expect_error(&s, C, "{\"prompt\":\"a\",\"logprobs\":21}", 400, "logprobs", "logprobs");
    expect_error(&s, C, "{\"prompt\":\"a\",\"echo\":true,\"n\":2}", 400, "'n' > 1", "echo");
    expect_error(&s, C, "{\"prompt\":\"a\",\"echo\":true,\"stream\":true}", 400, "'stream'", "echo");
    expect_error(&s, C, "{\"prompt\":\"a\",\"echo\":\"yes\"}", 400, "true or false", "echo");
    expect_error(&s, C, "{\"prompt\":\"a\",\"max_completion_tokens\":0}", 400, "'echo'",
                 "max_completion_tokens");
    expect_error(&s, C, "{\"prompt\":\"a\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\","
                        "\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}", 400, "at most 16", "stop");
    expect_error(&s, C, "{\"prompt\":\"a\",\"stop\":5}", 400, "stop", "stop");
    expect_error(&s, C, "{\"prompt\":\"a\",\"stream\":\"yes\"}", 400, "stream", "stream");
    expect_error(&s, C, "{\"max_tokens\":3}", 400, "required", "prompt");
    expect_error(&s, C, "{\"prompt\":5}", 400, "prompt", "prompt");
    expect_error(&s, C, "{\"prompt\":[]}", 400, "prompt", "prompt");
    expect_error(&s, C, "{\"prompt\":[\"a\", 5]}", 400, "prompt", "prompt");
    expect_error(&s, C, "{\"prompt\":[1, -2]}", 400, "token ids", "prompt");
    expect_error(&s, C, "{\"prompt\":\"a\",\"seed\":99999999999999999999999999}", 400, "malformed JSON", NULL);
    expect_error(&s, C, "{\"prompt\":\"a\",\"temperature\":1e999}", 400, "malformed JSON", NULL);
    expect_error(&s, C, "{\"prompt\":\"a\",\"model\":5}", 400, "model", "model");
    expect_error(&s, CH, "{\"messages\":[]}", 400, "messages", "messages");
    expect_error(&s, CH, "{\"messages\":[{\"content\":\"x\"}]}", 400, "role", "messages");
    expect_error(&s, CH, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "content", "messages");
    /* no content key: 400 naming it (it generated from an empty turn) */
    expect_error(&s, CH, "{\"messages\":[{\"role\":\"user\"}]}", 400, "'messages[0].content'",
                 "messages[0].content");
    expect_error(&s, CH, "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\"}]}", 400,
                 "Missing required parameter", "messages[1].content");
    /* an assistant turn may leave it out only when it calls tools */
    expect_error(&s, CH, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\"},"
                         "{\"role\":\"user\",\"content\":\"y\"}]}", 400, "tool_calls", "messages[1].content");
    expect_error(&s, CH, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", 400,
                 "text", "messages");
    expect_error(&s, CH, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", 400,
                 "logprobs", "top_logprobs");
    expect_error(&s, CH, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":3}", 400,
                 "true or false", "logprobs");
    /* prompt + max_tokens over the context: the engine's numbers pass through */
    expect_error(&s, C, "{\"prompt\":\"a b\",\"max_tokens\":200}", 400, "maximum context length is 128", NULL);

    /* invalid UTF-8 inside a JSON string */
    expect_error(&s, C, "{\"prompt\":\"a\xff\xfe\"}", 400, "malformed JSON", NULL);
    /* nested far deeper than jansson's depth limit */
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 32);
    size_t k = 0;
    k += (size_t)sprintf(deep, "{\"prompt\":");
    for (size_t i = 0; i < depth; i++) deep[k++] = '[';
    for (size_t i = 0; i < depth; i++) deep[k++] = ']';
    deep[k++] = '}';
    deep[k] = 0;
    expect_error(&s, C, deep, 400, "malformed JSON", NULL);
    free(deep);
    /* an embedded NUL */
    expect_status(&s, "POST", C, "{\"prompt\":\"a\\u0000b\"}", NULL, 400);
    ck_assert_int_eq(s.f->n_log, 0); /* nothing reached the engine */

    /* the server still answers after all that */
    long st;
    json_t *j = post_json(&s, C, "{\"prompt\":\"ok\"}", &st);
    ck_assert_int_eq(st, 200);
    json_decref(j);
    srv_stop(&s);
}
END_TEST

START_TEST(test_engine_failure)
{
    srv s;
    srv_start(&s, NULL, 0);
    long st;
    json_t *j = post_json(&s, "/v1/completions", "{\"prompt\":\"please FAIL\"}", &st);
    ck_assert_int_eq(st, 500);
    ck_assert_ptr_nonnull(strstr(jget_str(j, "error.message"), "fake failure"));
    json_decref(j);
    /* streaming: an error object in the stream, then [DONE] */
    resp r = {0};
    const char *body = "{\"prompt\":\"FAIL\",\"stream\":true}";
    http_req(&s, "POST", "/v1/completions", body, strlen(body), NULL, &r, 0);
    ck_assert_int_eq(r.status, 200);
    json_t *ch[8];
    int done;
    int n = parse_sse(r.body, ch, 8, &done);
    ck_assert(done);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(jget_str(ch[0], "error.message"), "fake failure");
    json_decref(ch[0]);
    free(r.body);
    srv_stop(&s);
}
END_TEST

START_TEST(test_auth)
{
    srv s;
    fake_kv extra[] = {{"api_key", "sekrit"}};
    srv_start(&s, extra, 1);
    resp r = {0};
    http_req(&s, "GET", "/v1/models", NULL, 0, NULL, &r, 0);
    ck_assert_int_eq(r.status, 401);
    ck_assert_ptr_nonnull(strstr(r.body, "invalid_api_key"));
    free(r.body);
    expect_status(&s, "GET", "/v1/models", NULL, "Authorization: Bearer wrong", 401);
    expect_status(&s, "GET", "/v1/models", NULL, "Authorization: Bearer sekri", 401);
    expect_status(&s, "GET", "/metrics", NULL, NULL, 401);
    const char *b = "{\"prompt\":\"a\"}";
    expect_status(&s, "POST", "/v1/completions", b, NULL, 401);
    ck_assert_int_eq(s.f->n_log, 0);
    expect_status(&s, "POST", "/v1/completions", b, "Authorization: Bearer sekrit", 200);
    expect_status(&s, "GET", "/health", NULL, NULL, 200);
    srv_stop(&s);
}
END_TEST

START_TEST(test_body_limit)
{
    srv s;
    fake_kv extra[] = {{"max_body_bytes", "2048"}};
    srv_start(&s, extra, 1);
    char *big = malloc(5000);
    memset(big, ' ', 4999);
    memcpy(big, "{\"prompt\":\"", 11);
    memcpy(big + 4999 - 3, "x\"}", 3);
    big[4999] = 0;
    expect_error(&s, "/v1/completions", big, 413, "max_body_bytes", NULL);
    free(big);
    long st;
    json_t *j = post_json(&s, "/v1/completions", "{\"prompt\":\"small\"}", &st);
    ck_assert_int_eq(st, 200);
    json_decref(j);
    srv_stop(&s);
}
END_TEST

START_TEST(test_busy_and_shutdown_status)
{
    srv s;
    srv_start(&s, NULL, 0);
    s.f->submit_status = PAGODA_ERR_NOSPACE;
    snprintf(s.f->submit_err, sizeof s.f->submit_err, "queue full (256 waiting)");
    expect_error(&s, "/v1/completions", "{\"prompt\":\"a\"}", 429, "queue full", NULL);
    /* with n = 3 the first failure refuses the whole request */
    expect_error(&s, "/v1/completions", "{\"prompt\":\"a\",\"n\":3}", 429, "queue full", NULL);
    s.f->submit_status = 0;

    s.f->ready = 0;
    expect_status(&s, "GET", "/health", NULL, NULL, 503);
    s.f->ready = 1;

    s.f->shutting = 1;
    expect_error(&s, "/v1/completions", "{\"prompt\":\"a\"}", 503, "shutting down", NULL);
    expect_status(&s, "GET", "/health", NULL, NULL, 503);
    s.f->shutting = 0;
    srv_stop(&s);
}
END_TEST

START_TEST(test_tokenize)
{
    srv s;
    srv_start(&s, NULL, 0);
    long st;
    json_t *j = post_json(&s, "/tokenize", "{\"prompt\":\"a b a\"}", &st);
    ck_assert_int_eq(st, 200);
    ck_assert_int_eq(jint(j, "count"), 4);
    ck_assert_int_eq(jint(j, "max_model_len"), 128);
    ck_assert_int_eq(jint(j, "tokens.0"), FAKE_BOS);
    ck_assert_int_eq(jint(j, "tokens.1"), jint(j, "tokens.3"));
    ck_assert_int_ne(jint(j, "tokens.1"), jint(j, "tokens.2"));
    int a = (int)jint(j, "tokens.1"), b = (int)jint(j, "tokens.2");
    json_decref(j);
    j = post_json(&s, "/tokenize", "{\"prompt\":\"a b a\",\"add_special_tokens\":false}", &st);
    ck_assert_int_eq(jint(j, "count"), 3);
    ck_assert_int_eq(jint(j, "tokens.0"), a);
    json_decref(j);
    char body[128];
    snprintf(body, sizeof body, "{\"tokens\":[%d,%d]}", b, a);
    j = post_json(&s, "/detokenize", body, &st);
    ck_assert_int_eq(st, 200);
    ck_assert_str_eq(jget_str(j, "prompt"), "b a");
    json_decref(j);
    expect_error(&s, "/detokenize", "{\"tokens\":[99999]}", 400, "vocabulary", "tokens");
    expect_error(&s, "/detokenize", "{\"tokens\":\"x\"}", 400, "tokens", "tokens");
    expect_error(&s, "/tokenize", "{\"prompt\":3}", 400, "prompt", "prompt");
    expect_error(&s, "/tokenize", "nope", 400, "malformed", NULL);
    srv_stop(&s);
}
END_TEST

/* A client that hangs up mid-stream cancels its request. */
static void slow(fake_engine *f) { f->step_us = 5000; }

START_TEST(test_disconnect_stream)
{
    srv s;
    srv_start_with(&s, NULL, 0, slow);
    resp r = {.abort_after = 1};
    const char *body = "{\"prompt\":\"go on forever\",\"stream\":true,\"max_tokens\":100}";
    http_req(&s, "POST", "/v1/completions", body, strlen(body), NULL, &r, 0);
    ck_assert_int_eq(r.status, -1); /* we aborted */
    free(r.body);
    ck_assert_int_eq(fake_wait_count(s.f, &s.f->n_cancel, 1, 30), 1);
    ck_assert_uint_eq(s.f->cancels[0], s.f->log[0].id);
    ck_assert_int_eq(fake_wait_count(s.f, &s.f->n_final, 1, 30), 1);
    ck_assert_int_lt(s.f->n_tokens_emitted, 100);
    srv_stop(&s);
}
END_TEST

START_TEST(test_disconnect_blocking)
{
    srv s;
    srv_start_with(&s, NULL, 0, slow);
    resp r = {0};
    const char *body = "{\"prompt\":\"go on forever\",\"max_tokens\":100}";
    /* the client gives up long before 100 tokens at 5 ms each */
    http_req(&s, "POST", "/v1/completions", body, strlen(body), NULL, &r, 150);
    ck_assert_int_eq(r.status, -1);
    free(r.body);
    ck_assert_int_eq(fake_wait_count(s.f, &s.f->n_cancel, 1, 30), 1);
    ck_assert_int_eq(fake_wait_count(s.f, &s.f->n_final, 1, 30), 1);
    ck_assert_int_lt(s.f->n_tokens_emitted, 100);
    srv_stop(&s);
}
END_TEST

typedef struct bg {
    srv *s;
    const char *body;
    resp r;
} bg;

static void *bg_post(void *arg)
{
    bg *b = arg;
    http_req(b->s, "POST", "/v1/completions", b->body, strlen(b->body), NULL, &b->r, 0);
    return NULL;
}

/* stop() with requests in flight: each is cancelled, gets its FINAL, the
 * stream ends properly, and run() returns 0. */
START_TEST(test_stop_drains)
{
    srv s;
    srv_start_with(&s, NULL, 0, slow);
    bg a = {.s = &s, .body = "{\"prompt\":\"stream forever\",\"stream\":true,\"max_tokens\":120}"};
    bg b = {.s = &s, .body = "{\"prompt\":\"block forever\",\"max_tokens\":120}"};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, bg_post, &a);
    pthread_create(&tb, NULL, bg_post, &b);
    ck_assert_int_eq(fake_wait_count(s.f, &s.f->n_log, 2, 30), 2);
    ck_assert_int_ge(fake_wait_count(s.f, &s.f->n_tokens_emitted, 4, 30), 4);
    s.f->shutting = 1; /* as the core does on SIGTERM */
    s.ops->stop(s.ctx);
    pthread_join(s.th, NULL);
    ck_assert_int_eq(s.rc, PAGODA_OK);
    ck_assert_int_eq(fake_live(s.f), 0);
    ck_assert_int_eq(s.f->n_final, 2);
    ck_assert_int_ge(s.f->n_cancel, 2);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    /* the stream was finished, not cut */
    ck_assert_int_eq(a.r.status, 200);
    json_t *ch[256];
    int done;
    int n = parse_sse(a.r.body, ch, 256, &done);
    ck_assert(done);
    ck_assert_str_eq(jget_str(ch[n - 1], "choices.0.finish_reason"), "abort");
    for (int i = 0; i < n; i++) json_decref(ch[i]);
    /* the blocking one was answered with what it had (test_stop_partial_text) */
    ck_assert_int_eq(b.r.status, 200);
    free(a.r.body);
    free(b.r.body);
    /* stop() twice is fine; run() after stop returns at once */
    s.ops->stop(s.ctx);
    ck_assert_int_eq(s.ops->run(s.ctx), PAGODA_OK);
    srv_free(&s);
}
END_TEST

/* A non-streaming request cut short by shutdown: 200 with the text
 * generated so far and finish_reason "abort", as a stream ends (not a 503
 * that throws the text away). Alone in the engine, so every token counted
 * is its own. */
START_TEST(test_stop_partial_text)
{
    srv s;
    srv_start_with(&s, NULL, 0, slow);
    bg b = {.s = &s, .body = "{\"prompt\":\"block forever\",\"max_tokens\":120}"};
    pthread_t tb;
    pthread_create(&tb, NULL, bg_post, &b);
    ck_assert_int_eq(fake_wait_count(s.f, &s.f->n_log, 1, 30), 1);
    ck_assert_int_ge(fake_wait_count(s.f, &s.f->n_tokens_emitted, 3, 30), 3);
    s.f->shutting = 1; /* as the core does on SIGTERM */
    s.ops->stop(s.ctx);
    pthread_join(s.th, NULL);
    ck_assert_int_eq(s.rc, PAGODA_OK);
    ck_assert_int_eq(fake_live(s.f), 0);
    pthread_join(tb, NULL);
    int emitted = s.f->n_tokens_emitted; /* the engine is done with it */
    ck_assert_int_lt(emitted, 120);
    ck_assert_int_eq(b.r.status, 200);
    json_error_t e;
    json_t *j = json_loads(b.r.body, 0, &e);
    ck_assert_msg(j != NULL, "body not JSON: %s", b.r.body);
    ck_assert_str_eq(jget_str(j, "object"), "text_completion");
    ck_assert_str_eq(jget_str(j, "choices.0.finish_reason"), "abort");
    ck_assert_int_eq(jint(j, "usage.completion_tokens"), emitted);
    /* the text is exactly the words emitted: "block forever block ..." */
    char want[2048] = "";
    for (int i = 0; i < emitted; i++) {
        strcat(want, i ? " " : "");
        strcat(want, i % 2 ? "forever" : "block");
    }
    ck_assert_str_eq(jget_str(j, "choices.0.text"), want);
    json_decref(j);
    free(b.r.body);
    srv_free(&s);
}
END_TEST

/* content may be null (the docs allow it), and left out on an assistant
 * turn with tool_calls, as OpenAI takes both. */
START_TEST(test_chat_content_optional)
{
    srv s;
    srv_start(&s, NULL, 0);
    long st;
    json_t *j = post_json(&s, "/v1/chat/completions",
                          "{\"messages\":[{\"role\":\"system\",\"content\":null},"
                          "{\"role\":\"user\",\"content\":\"hi there\"}],\"max_tokens\":2}", &st);
    ck_assert_msg(st == 200, "%ld", st);
    json_decref(j);
    j = post_json(&s, "/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"add\"},{\"role\":\"assistant\",\"tool_calls\":"
                  "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"add\",\"arguments\":\"{}\"}}]},"
                  "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"3\"}],\"max_tokens\":2}", &st);
    ck_assert_msg(st == 200, "%ld", st);
    json_decref(j);
    ck_assert_int_eq(s.f->n_log, 2);
    srv_stop(&s);
}
END_TEST

/* A model name other than the served one: served, and logged once per
 * name (agents send their own names, so it is no error by default). */
START_TEST(test_model_other_name)
{
    srv s;
    srv_start(&s, NULL, 0);
    const char *bodies[] = {"{\"prompt\":\"one two\",\"model\":\"gpt-4o\",\"max_tokens\":1}",
                            "{\"prompt\":\"one two\",\"model\":\"gpt-4o\",\"max_tokens\":1}",
                            "{\"prompt\":\"one two\",\"model\":\"fake-model\",\"max_tokens\":1}",
                            "{\"prompt\":\"one two\",\"model\":\"llama\\n3\",\"max_tokens\":1}",
                            "{\"prompt\":\"one two\",\"max_tokens\":1}"};
    for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
        long st;
        json_t *j = post_json(&s, "/v1/completions", bodies[i], &st);
        ck_assert_msg(st == 200, "%s -> %ld", bodies[i], st);
        ck_assert_str_eq(jget_str(j, "model"), "fake-model");
        json_decref(j);
    }
    ck_assert_int_eq(fake_log_count(s.f, "'gpt-4o'", "not served here", "'fake-model'", "strict_model", NULL), 1);
    ck_assert_int_eq(fake_log_count(s.f, "'llama?3'", "not served here", NULL), 1); /* no newline logged */
    ck_assert_int_eq(fake_log_count(s.f, "not served here", NULL), 2);
    /* bounded: past MODEL_SEEN_MAX names nothing more is remembered or logged */
    for (int i = 0; i < 80; i++) {
        char b[128];
        snprintf(b, sizeof b, "{\"prompt\":\"one\",\"model\":\"agent-%d\",\"max_tokens\":1}", i);
        expect_status(&s, "POST", "/v1/completions", b, NULL, 200);
    }
    ck_assert_int_eq(fake_log_count(s.f, "not served here", NULL), 64);
    ck_assert_int_eq(fake_log_count(s.f, "not served here", "the last name logged", NULL), 1);
    srv_stop(&s);
}
END_TEST

/* strict_model: 404 model_not_found in OpenAI's shape, before the engine. */
START_TEST(test_model_strict)
{
    fake_kv kv[] = {{"strict_model", "true"}};
    srv s;
    srv_start(&s, kv, 1);
    expect_error(&s, "/v1/completions", "{\"prompt\":\"one two\",\"model\":\"gpt-4o\"}", 404,
                 "`gpt-4o` does not exist", "model");
    long st;
    json_t *j = post_json(&s, "/v1/chat/completions",
                          "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"model\":\"other\"}", &st);
    ck_assert_int_eq(st, 404);
    ck_assert_str_eq(jget_str(j, "error.code"), "model_not_found");
    ck_assert_str_eq(jget_str(j, "error.type"), "invalid_request_error");
    ck_assert_ptr_nonnull(strstr(jget_str(j, "error.message"), "`fake-model`"));
    json_decref(j);
    ck_assert_int_eq(s.f->n_log, 0);
    /* the served name, or none, is served */
    expect_status(&s, "POST", "/v1/completions", "{\"prompt\":\"one\",\"model\":\"fake-model\",\"max_tokens\":1}",
                  NULL, 200);
    expect_status(&s, "POST", "/v1/completions", "{\"prompt\":\"one\",\"max_tokens\":1}", NULL, 200);
    ck_assert_int_eq(s.f->n_log, 2);
    ck_assert_int_eq(fake_log_count(s.f, "not served here", NULL), 0);
    srv_stop(&s);
}
END_TEST

START_TEST(test_descriptor_keys)
{
    th_plugin p = th_load("frontend", "http");
    const pagoda_plugin_desc *d = p.desc;
    const char *want[] = {"host", "port", "api_key", "max_body_bytes", "threads", "timeout_s", "port_file",
                          "served_model_name", "strict_model", "shutdown_grace_s"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        ck_assert_msg(th_declares_key(d, want[i]), "key %s not declared", want[i]);
    ck_assert_uint_eq(d->struct_size, sizeof(pagoda_plugin_desc));
    ck_assert_uint_eq(((const pagoda_frontend_ops *)d->ops)->struct_size, sizeof(pagoda_frontend_ops));
    th_unload(&p);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("http");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_descriptor_keys);
    tcase_add_test(tc, test_simple_routes);
    tcase_add_test(tc, test_completion_basic);
    tcase_add_test(tc, test_completion_multi);
    tcase_add_test(tc, test_chat_basic);
    tcase_add_test(tc, test_logprobs);
    tcase_add_test(tc, test_echo);
    tcase_add_test(tc, test_stream_completion);
    tcase_add_test(tc, test_stream_chat_usage);
    tcase_add_test(tc, test_bad_requests);
    tcase_add_test(tc, test_engine_failure);
    tcase_add_test(tc, test_auth);
    tcase_add_test(tc, test_body_limit);
    tcase_add_test(tc, test_busy_and_shutdown_status);
    tcase_add_test(tc, test_tokenize);
    tcase_add_test(tc, test_disconnect_stream);
    tcase_add_test(tc, test_disconnect_blocking);
    tcase_add_test(tc, test_stop_drains);
    tcase_add_test(tc, test_stop_partial_text);
    tcase_add_test(tc, test_chat_content_optional);
    tcase_add_test(tc, test_model_other_name);
    tcase_add_test(tc, test_model_strict);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return http_test_main(suite()); }

#else /* !PAGODA_HAVE_CURL */
int main(void) { return http_test_main_skipped("test_http"); }
#endif
