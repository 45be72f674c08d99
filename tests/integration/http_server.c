/*
 * http_server.c: integration test of the HTTP frontend against the real
 * server binary and the real engine (not the fake engine of
 * tests/unit/test_http.c). It starts `pagoda` on a free loopback port
 * (port = 0 + port_file), drives it with libcurl and parses answers with
 * jansson: every endpoint streaming and not, every error status, hostile
 * bodies, greedy output against llama2.c's golden text, /metrics through
 * promtool, a client leaving mid-stream (its KV blocks freed, watched on
 * /metrics), a full queue (429) and SIGTERM while streams are in flight.
 * Not for: timing or throughput (no assertion reads a clock; loops are only
 * bounded so a hang fails instead of blocking CI).
 *
 * Environment (set by ctest): PAGODA_BIN, PAGODA_SOURCE_DIR. Every server
 * is started with PR_SET_PDEATHSIG, killed at exit and on any fatal signal,
 * so a failing test never leaves one behind (integ_util.c).
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "integ_util.h"

/* ------------------------------------------------------------ HTTP */

/* Server-sent events: every "data: X" payload, in order; *done when the
 * last one is [DONE] and nothing follows it. Returns the JSON events. */
static json_t *sse_parse(const char *body, bool *done, int *n_bad)
{
    json_t *evs = json_array();
    *done = false;
    *n_bad = 0;
    if (!body) return evs;
    const char *p = body;
    while (*p) {
        const char *eol = strstr(p, "\n\n");
        size_t n = eol ? (size_t)(eol - p) : strlen(p);
        if (n >= 6 && strncmp(p, "data: ", 6) == 0) {
            if (*done) (*n_bad)++; /* an event after [DONE] */
            if (n - 6 == 6 && strncmp(p + 6, "[DONE]", 6) == 0) {
                *done = true;
            } else {
                json_t *j = json_loadb(p + 6, n - 6, 0, NULL);
                if (j) json_array_append_new(evs, j);
                else (*n_bad)++;
            }
        } else if (n > 0) {
            (*n_bad)++;
        }
        if (!eol) break;
        p = eol + 2;
    }
    return evs;
}

static double scrape(const server *s, const char *name)
{
    resp r;
    double v = NAN;
    if (http(s, "GET", "/metrics", NULL, 0, NULL, &r) == 0 && r.status == 200) v = metric(r.body.p, name);
    resp_free(&r);
    return v;
}

/* Wait (bounded: ~10 s) until the engine holds no request and no KV block. */
static bool wait_engine_idle(const server *s, int *polls)
{
    for (int i = 0; i < 100; i++) {
        resp r;
        bool idle = false;
        if (http(s, "GET", "/metrics", NULL, 0, NULL, &r) == 0 && r.status == 200)
            idle = metric(r.body.p, "pagoda_num_requests_running") == 0 &&
                   metric(r.body.p, "pagoda_num_requests_waiting") == 0 &&
                   metric(r.body.p, "pagoda_kv_cache_blocks_used") == 0 &&
                   metric(r.body.p, "pagoda_kv_cache_usage_perc") == 0;
        resp_free(&r);
        if (polls) *polls = i + 1;
        if (idle) return true;
        msleep(100);
    }
    return false;
}

/* ------------------------------------------------------------ streams */

/* A transfer driven by curl_multi; abort_after > 0 drops the connection
 * once that many SSE events arrived (a client going away). */
typedef struct stream {
    CURL *c;
    struct curl_slist *hl;
    buf body;
    int events;
    int abort_after;
    bool finished;
    long status;
    CURLcode result;
} stream;

static size_t on_stream(char *p, size_t sz, size_t nm, void *ud)
{
    stream *st = ud;
    size_t n = sz * nm;
    buf_put(&st->body, p, n);
    int ev = 0;
    for (const char *q = st->body.p; (q = strstr(q, "\n\n")); q += 2) ev++;
    st->events = ev;
    if (st->abort_after > 0 && ev >= st->abort_after) return 0; /* hang up */
    return n;
}

static void stream_init(stream *st, const server *s, const char *path, const char *body,
                        int abort_after)
{
    memset(st, 0, sizeof *st);
    st->abort_after = abort_after;
    st->c = easy_for(s, "POST", path, body, -1, NULL, &st->hl);
    /* POSTFIELDS is not copied: keep a copy that lives as long as the handle */
    curl_easy_setopt(st->c, CURLOPT_COPYPOSTFIELDS, body);
    curl_easy_setopt(st->c, CURLOPT_WRITEFUNCTION, on_stream);
    curl_easy_setopt(st->c, CURLOPT_WRITEDATA, st);
    curl_easy_setopt(st->c, CURLOPT_PRIVATE, st);
}

static void stream_free(stream *st)
{
    if (st->c) curl_easy_cleanup(st->c);
    curl_slist_free_all(st->hl);
    free(st->body.p);
    memset(st, 0, sizeof *st);
}

typedef bool (*until_fn)(stream *sts, int n);

/* Drive the transfers until `until` holds or all are finished; bounded by
 * max_polls rounds of at most 100 ms. Returns true when `until` held (or
 * everything finished and until is NULL). */
static bool multi_run(CURLM *m, stream *sts, int n, until_fn until, int max_polls)
{
    for (int i = 0; i < max_polls; i++) {
        int running = 0;
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            stream *st = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&st);
            if (!st) continue;
            st->finished = true;
            st->result = msg->data.result;
            curl_easy_getinfo(st->c, CURLINFO_RESPONSE_CODE, &st->status);
        }
        if (until && until(sts, n)) return true;
        if (running == 0) return until == NULL;
        curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    return false;
}

static bool all_started_or_done(stream *sts, int n)
{
    for (int i = 0; i < n; i++)
        if (!sts[i].finished && sts[i].events < 2) return false;
    return true;
}

/* Every transfer is answered: finished, or its status line arrived. */
static bool all_answered(stream *sts, int n)
{
    for (int i = 0; i < n; i++) {
        long code = 0;
        if (!sts[i].finished) curl_easy_getinfo(sts[i].c, CURLINFO_RESPONSE_CODE, &code);
        if (!sts[i].finished && code == 0) return false;
    }
    return true;
}

static bool all_finished(stream *sts, int n)
{
    for (int i = 0; i < n; i++)
        if (!sts[i].finished) return false;
    return true;
}

/* ------------------------------------------------------------ tests */

static void test_endpoints(const server *s)
{
    resp r;
    http(s, "GET", "/health", NULL, 0, NULL, &r);
    CHECK(r.status == 200, "health: %ld", r.status);
    CHECK(r.json && jget_str(r.json, "status") && !strcmp(jget_str(r.json, "status"), "ok"),
          "health body: %s", r.body.p);
    resp_free(&r);

    http(s, "GET", "/v1/models", NULL, 0, NULL, &r);
    CHECK(r.status == 200, "models: %ld", r.status);
    CHECK(jget_str(r.json, "object") && !strcmp(jget_str(r.json, "object"), "list"), "%s", r.body.p);
    CHECK(jget_str(r.json, "data.0.id") != NULL, "model id: %s", r.body.p);
    CHECK(jget_int(r.json, "data.0.max_model_len") == 256, "max_model_len: %s", r.body.p);
    resp_free(&r);

    /* tokenize / detokenize round trip through the model's tokenizer */
    http(s, "POST", "/tokenize", "{\"prompt\": \"Once upon a time\"}", -1, NULL, &r);
    CHECK(r.status == 200, "tokenize: %ld %s", r.status, r.body.p);
    json_t *toks = json_incref(jget(r.json, "tokens"));
    CHECK(json_array_size(toks) == 5 && jget_int(r.json, "count") == 5, "tokens: %s", r.body.p);
    CHECK(json_integer_value(json_array_get(toks, 0)) == 1, "BOS first: %s", r.body.p);
    resp_free(&r);
    http(s, "POST", "/tokenize", "{\"prompt\": \"Once upon a time\", \"add_special_tokens\": false}",
         -1, NULL, &r);
    CHECK(r.status == 200 && jget_int(r.json, "count") == 4, "no BOS: %s", r.body.p);
    resp_free(&r);
    json_t *dreq = json_pack("{sO}", "tokens", toks);
    char *dbody = json_dumps(dreq, 0);
    http(s, "POST", "/detokenize", dbody, -1, NULL, &r);
    CHECK(r.status == 200, "detokenize: %ld %s", r.status, r.body.p);
    const char *back = jget_str(r.json, "prompt");
    CHECK(back && strstr(back, "Once upon a time"), "round trip: %s", r.body.p);
    resp_free(&r);
    free(dbody);
    json_decref(dreq);
    json_decref(toks);

    /* /v1/memory: the plan as JSON, the same numbers as the metrics */
    http(s, "GET", "/v1/memory", NULL, 0, NULL, &r);
    CHECK(r.status == 200 && r.json, "memory: %ld", r.status);
    json_t *wb = jget(r.json, "bytes.weights");
    double mw = scrape(s, "pagoda_memory_weights_bytes");
    CHECK(json_is_integer(wb) && (double)json_integer_value(wb) == mw,
          "weights bytes in /v1/memory (%s) vs metrics (%g)", r.body.p ? "present" : "none", mw);
    CHECK(jget_int(r.json, "limits.block_size") == 16, "block_size in plan");
    resp_free(&r);

    /* chat, non-streaming */
    const char *chat = "{\"model\": \"x\", \"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
                       " {\"role\": \"user\", \"content\": \"Tell me a story.\"}], \"max_tokens\": 12,"
                       " \"temperature\": 0, \"unknown_field\": {\"ignored\": true}}";
    http(s, "POST", "/v1/chat/completions", chat, -1, NULL, &r);
    CHECK(r.status == 200, "chat: %ld %s", r.status, r.body.p);
    CHECK(jget_str(r.json, "object") && !strcmp(jget_str(r.json, "object"), "chat.completion"),
          "chat object: %s", r.body.p);
    CHECK(jget_str(r.json, "id") && !strncmp(jget_str(r.json, "id"), "chatcmpl-", 9), "id");
    CHECK(jget_str(r.json, "choices.0.message.role") &&
          !strcmp(jget_str(r.json, "choices.0.message.role"), "assistant"), "role");
    CHECK(jget_str(r.json, "choices.0.message.content") != NULL, "content");
    const char *fr = jget_str(r.json, "choices.0.finish_reason");
    CHECK(fr && (!strcmp(fr, "length") || !strcmp(fr, "stop")), "finish_reason %s", fr ? fr : "-");
    long long ct = jget_int(r.json, "usage.completion_tokens");
    CHECK(ct >= 1 && ct <= 12, "completion_tokens %lld", ct);
    CHECK(jget_int(r.json, "usage.total_tokens") ==
              jget_int(r.json, "usage.prompt_tokens") + ct, "usage sums");
    CHECK(json_is_integer(jget(r.json, "created")) && jget_str(r.json, "system_fingerprint"), "fields");
    char *chat_text = strdup(jget_str(r.json, "choices.0.message.content") ?: "");
    resp_free(&r);

    /* chat, streaming with include_usage: the same text as the non-streaming answer */
    const char *chat_s = "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
                         " {\"role\": \"user\", \"content\": \"Tell me a story.\"}], \"max_tokens\": 12,"
                         " \"temperature\": 0, \"stream\": true, \"stream_options\": {\"include_usage\": true}}";
    http(s, "POST", "/v1/chat/completions", chat_s, -1, NULL, &r);
    CHECK(r.status == 200, "chat stream: %ld", r.status);
    const char *ctype = r.hdrs.p ? strcasestr(r.hdrs.p, "content-type: text/event-stream") : NULL;
    CHECK(ctype != NULL, "SSE content type: %s", r.hdrs.p);
    bool done;
    int bad;
    json_t *evs = sse_parse(r.body.p, &done, &bad);
    CHECK(done && bad == 0, "stream ends with [DONE], nothing malformed (bad %d)", bad);
    size_t ne = json_array_size(evs);
    CHECK(ne >= 3, "chat chunks: %zu", ne);
    CHECK(jget_str(evs, "0.choices.0.delta.role") &&
          !strcmp(jget_str(evs, "0.choices.0.delta.role"), "assistant"), "first chunk has the role");
    char text[4096] = "";
    int n_finish = 0;
    for (size_t i = 0; i + 1 < ne; i++) {
        json_t *e = json_array_get(evs, i);
        CHECK(jget_str(e, "object") && !strcmp(jget_str(e, "object"), "chat.completion.chunk"), "chunk object");
        CHECK(json_is_null(jget(e, "usage")), "usage null before the last chunk");
        const char *d = jget_str(e, "choices.0.delta.content");
        if (d) strncat(text, d, sizeof text - strlen(text) - 1);
        if (jget_str(e, "choices.0.finish_reason")) n_finish++;
    }
    CHECK(n_finish == 1, "one finish_reason chunk, got %d", n_finish);
    json_t *last = json_array_get(evs, ne - 1);
    CHECK(json_array_size(jget(last, "choices")) == 0 && jget_int(last, "usage.completion_tokens") == ct,
          "usage chunk: completion_tokens %lld vs %lld", jget_int(last, "usage.completion_tokens"), ct);
    CHECK(!strcmp(text, chat_text), "streamed chat text \"%s\" != \"%s\"", text, chat_text);
    json_decref(evs);
    resp_free(&r);
    free(chat_text);

    /* completions, list of prompts, n = 2 with temperature 0: equal choices */
    http(s, "POST", "/v1/completions",
         "{\"prompt\": [\"Once upon a time\", \"One day\"], \"max_tokens\": 8, \"temperature\": 0, \"n\": 2}",
         -1, NULL, &r);
    CHECK(r.status == 200, "multi: %ld %s", r.status, r.body.p);
    CHECK(json_array_size(jget(r.json, "choices")) == 4, "4 choices: %s", r.body.p);
    const char *a0 = jget_str(r.json, "choices.0.text"), *a1 = jget_str(r.json, "choices.1.text");
    CHECK(a0 && a1 && !strcmp(a0, a1), "greedy n=2 equal");
    CHECK(jget_int(r.json, "usage.completion_tokens") == 32, "usage: %s", r.body.p);
    resp_free(&r);

    /* completions logprobs: the OpenAI shape */
    http(s, "POST", "/v1/completions",
         "{\"prompt\": \"Once upon a time\", \"max_tokens\": 3, \"temperature\": 0, \"logprobs\": 2}",
         -1, NULL, &r);
    CHECK(r.status == 200, "logprobs: %ld", r.status);
    CHECK(json_array_size(jget(r.json, "choices.0.logprobs.tokens")) == 3 &&
          json_array_size(jget(r.json, "choices.0.logprobs.token_logprobs")) == 3 &&
          json_array_size(jget(r.json, "choices.0.logprobs.top_logprobs")) == 3, "logprobs shape: %s", r.body.p);
    resp_free(&r);

    /* HEAD where GET is accepted */
    http(s, "HEAD", "/v1/models", NULL, 0, NULL, &r);
    CHECK(r.status == 200, "HEAD /v1/models: %ld", r.status);
    resp_free(&r);
}

/* Greedy output through HTTP equals llama2.c's (tests/data/stories260K.golden.json). */
static void test_golden(const server *s)
{
    char path[512];
    snprintf(path, sizeof path, "%s/tests/data/stories260K.golden.json", g_src);
    json_t *g = json_load_file(path, 0, NULL);
    CHECK(g != NULL, "cannot read %s", path);
    if (!g) return;
    json_t *cs = jget(g, "cases.0");
    const char *prompt = jget_str(cs, "prompt");
    const char *gtext = jget_str(cs, "text");
    json_t *gt = jget(cs, "generated_tokens");
    CHECK(prompt && gtext && json_array_size(gt) > 100, "golden case");
    if (!prompt || !gtext || json_array_size(gt) <= 100) { json_decref(g); return; }

    /* how many of the generated ids are the prompt's (forced) */
    resp r;
    json_t *tq = json_pack("{sssb}", "prompt", prompt, "add_special_tokens", 0);
    char *tb = json_dumps(tq, 0);
    http(s, "POST", "/tokenize", tb, -1, NULL, &r);
    size_t np = (size_t)jget_int(r.json, "count");
    CHECK(r.status == 200 && np > 0 && np < 10, "prompt tokens %zu", np);
    resp_free(&r);
    free(tb);
    json_decref(tq);

    size_t n_gen = 120; /* prompt (4) + 120 < max_seq_len 256 */
    json_t *want_ids = json_array();
    for (size_t i = np; i < np + n_gen; i++) json_array_append(want_ids, json_array_get(gt, i));
    json_t *dq = json_pack("{sO}", "tokens", want_ids);
    char *db = json_dumps(dq, 0);
    http(s, "POST", "/detokenize", db, -1, NULL, &r);
    char *want = strdup(jget_str(r.json, "prompt") ?: "?");
    resp_free(&r);
    free(db);
    json_decref(dq);
    json_decref(want_ids);
    /* the expected continuation is also llama2.c's printed text after the prompt */
    CHECK(strncmp(gtext, prompt, strlen(prompt)) == 0 &&
          strncmp(gtext + strlen(prompt), want, strlen(want)) == 0,
          "detokenized golden ids are a prefix of llama2.c's text: \"%.60s\"", want);

    char body[512];
    snprintf(body, sizeof body,
             "{\"prompt\": \"%s\", \"max_tokens\": %zu, \"temperature\": 0, \"ignore_eos\": true}",
             prompt, n_gen);
    http(s, "POST", "/v1/completions", body, -1, NULL, &r);
    CHECK(r.status == 200, "golden completion: %ld", r.status);
    const char *got = jget_str(r.json, "choices.0.text");
    CHECK(got && !strcmp(got, want), "greedy HTTP text differs from llama2.c:\n got: %.200s\nwant: %.200s",
          got ? got : "(none)", want);
    CHECK(jget_int(r.json, "usage.completion_tokens") == (long long)n_gen &&
          jget_int(r.json, "usage.prompt_tokens") == (long long)np + 1, "usage: %s", r.body.p);
    resp_free(&r);

    /* the same through a stream: the text chunks concatenate to the same */
    snprintf(body, sizeof body,
             "{\"prompt\": \"%s\", \"max_tokens\": %zu, \"temperature\": 0, \"ignore_eos\": true,"
             " \"stream\": true}", prompt, n_gen);
    http(s, "POST", "/v1/completions", body, -1, NULL, &r);
    bool done;
    int bad;
    json_t *evs = sse_parse(r.body.p, &done, &bad);
    CHECK(r.status == 200 && done && bad == 0, "completion stream: %ld done %d bad %d", r.status, done, bad);
    buf acc = {0};
    const char *last_fr = NULL;
    for (size_t i = 0; i < json_array_size(evs); i++) {
        json_t *e = json_array_get(evs, i);
        const char *t = jget_str(e, "choices.0.text");
        if (t) buf_put(&acc, t, strlen(t));
        if (jget_str(e, "choices.0.finish_reason")) last_fr = jget_str(e, "choices.0.finish_reason");
        CHECK(jget_str(e, "object") && !strcmp(jget_str(e, "object"), "text_completion"), "chunk object");
    }
    CHECK(last_fr && !strcmp(last_fr, "length"), "stream finish_reason %s", last_fr ? last_fr : "-");
    CHECK(acc.p && !strcmp(acc.p, want), "streamed greedy text differs:\n got: %.200s", acc.p ? acc.p : "");
    free(acc.p);
    json_decref(evs);
    resp_free(&r);
    free(want);
    json_decref(g);
}

/* POST a JSON object (stolen) to /v1/completions; r filled. */
static void post_obj(const server *s, json_t *body, resp *r)
{
    char *b = json_dumps(body, JSON_COMPACT);
    http(s, "POST", "/v1/completions", b, -1, NULL, r);
    free(b);
    json_decref(body);
}

/* The ids of text as the engine tokenizes a prompt (BOS first). */
static json_t *tokenize_ids(const server *s, const char *text)
{
    resp r;
    json_t *q = json_pack("{sssb}", "prompt", text, "add_special_tokens", 1);
    char *b = json_dumps(q, 0);
    http(s, "POST", "/tokenize", b, -1, NULL, &r);
    free(b);
    json_decref(q);
    json_t *ids = json_incref(jget(r.json, "tokens"));
    resp_free(&r);
    return ids;
}

/* A copy of ids[from, to). */
static json_t *slice(json_t *ids, size_t from, size_t to)
{
    json_t *a = json_array();
    for (size_t i = from; i < to && i < json_array_size(ids); i++) json_array_append(a, json_array_get(ids, i));
    return a;
}

/* Echo with logprobs on the real model: token_logprobs[0] null; a prompt
 * token's entry equals what a greedy single step from the prefix before it
 * gives; the text offsets of a SentencePiece prompt land on the echoed
 * text; lm-evaluation-harness's loglikelihood body; and the sum over a
 * chunk's second half equals `pagoda perplexity`'s for that chunk. */
static void test_echo_scoring(const server *s)
{
    resp r;
    const char *prompt = "Once upon a time";
    json_t *ids = tokenize_ids(s, prompt);
    size_t n = json_array_size(ids);
    CHECK(n == 5, "\"%s\" is BOS + 4 tokens, got %zu", prompt, n);
    if (n != 5) { json_decref(ids); return; }

    /* the text prompt: echoed as sent, offsets on it */
    post_obj(s, json_pack("{sssbsisisf}", "prompt", prompt, "echo", 1, "logprobs", 5, "max_tokens", 0,
                          "temperature", 0.0), &r);
    CHECK(r.status == 200, "echo: %ld %s", r.status, r.body.p);
    json_t *lp = jget(r.json, "choices.0.logprobs");
    CHECK(jget_str(r.json, "choices.0.text") && !strcmp(jget_str(r.json, "choices.0.text"), prompt),
          "echoed text: %s", r.body.p);
    CHECK(!strcmp(jget_str(r.json, "choices.0.finish_reason") ?: "", "length"), "finish_reason length");
    CHECK(json_array_size(jget(lp, "token_logprobs")) == n && json_is_null(jget(lp, "token_logprobs.0")) &&
          json_is_null(jget(lp, "top_logprobs.0")), "entries: %s", r.body.p);
    long long want_off[5] = {0, 0, 4, 9, 11}; /* "", " Once", " upon", " a", " time" on "Once upon a time" */
    for (int i = 0; i < 5; i++) {
        char k[32];
        snprintf(k, sizeof k, "text_offset.%d", i);
        CHECK(jget_int(lp, k) == want_off[i], "text_offset[%d] = %lld, want %lld", i, jget_int(lp, k), want_off[i]);
    }
    double echo_last = json_real_value(jget(lp, "token_logprobs.4"));
    json_t *echo_top = json_incref(jget(lp, "top_logprobs.4"));
    double echo_sum = 0;
    for (size_t i = 1; i < n; i++) {
        char k[32];
        snprintf(k, sizeof k, "token_logprobs.%zu", i);
        echo_sum += json_real_value(jget(lp, k));
    }
    resp_free(&r);

    /* the greedy single step from the prefix before the last token */
    post_obj(s, json_pack("{sosisisf}", "prompt", slice(ids, 0, n - 1), "max_tokens", 1, "logprobs", 5,
                          "temperature", 0.0), &r);
    CHECK(r.status == 200, "single step: %ld", r.status);
    json_t *step_top = jget(r.json, "choices.0.logprobs.top_logprobs.0");
    CHECK(!strcmp(jget_str(r.json, "choices.0.text") ?: "", " time"), "greedy step: %s", r.body.p);
    CHECK(fabs(json_real_value(jget(r.json, "choices.0.logprobs.token_logprobs.0")) - echo_last) < 1e-4,
          "last prompt token: echo %.6f, single step %s", echo_last, r.body.p);
    const char *key;
    json_t *v;
    int same = json_object_size(step_top) == 5 && json_object_size(echo_top) == 5;
    json_object_foreach(step_top, key, v) {
        json_t *e = json_object_get(echo_top, key);
        same &= e && fabs(json_real_value(e) - json_real_value(v)) < 1e-4;
    }
    CHECK(same, "top 5 at the last prompt position differ from the single step's");
    json_decref(echo_top);
    resp_free(&r);

    /* lm-evaluation-harness local-completions, loglikelihood: ids as lists,
     * max_tokens 1, logprobs 1, echo; it sums token_logprobs[ctxlen:-1] */
    json_t *prompts = json_array();
    json_array_append_new(prompts, json_deep_copy(ids));
    json_array_append_new(prompts, slice(ids, 1, n)); /* no BOS: taken as sent */
    post_obj(s, json_pack("{sssosfsisisisb}", "model", "m", "prompt", prompts, "temperature", 0.0,
                          "max_tokens", 1, "logprobs", 1, "seed", 1234, "echo", 1), &r);
    CHECK(r.status == 200, "harness body: %ld %s", r.status, r.body.p);
    CHECK(json_array_size(jget(r.json, "choices.0.logprobs.token_logprobs")) == n + 1 &&
          json_array_size(jget(r.json, "choices.1.logprobs.token_logprobs")) == n,
          "one entry per id sent plus the generated one: %s", r.body.p);
    double harness = 0;
    int greedy = 1;
    for (size_t i = 2; i < n; i++) { /* ctxlen 2: "Once" is context */
        char k[48];
        snprintf(k, sizeof k, "choices.0.logprobs.token_logprobs.%zu", i);
        double t = json_real_value(jget(r.json, k));
        harness += t;
        snprintf(k, sizeof k, "choices.0.logprobs.top_logprobs.%zu", i);
        json_object_foreach(jget(r.json, k), key, v) greedy &= json_real_value(v) == t;
    }
    CHECK(greedy, "\"upon a time\" is the greedy continuation of \"Once\"");
    resp_free(&r);
    post_obj(s, json_pack("{sosisisbsf}", "prompt", slice(ids, 0, n), "max_tokens", 0, "logprobs", 0,
                          "echo", 1, "temperature", 0.0), &r);
    double score_only = 0, whole = 0;
    for (size_t i = 1; i < n; i++) {
        char k[48];
        snprintf(k, sizeof k, "choices.0.logprobs.token_logprobs.%zu", i);
        double t = json_real_value(jget(r.json, k));
        whole += t;
        if (i >= 2) score_only += t;
    }
    CHECK(fabs(harness - score_only) < 1e-4, "harness sum %.6f, score-only %.6f", harness, score_only);
    CHECK(fabs(echo_sum - whole) < 1e-4, "the text prompt's sum %.6f, its ids' %.6f", echo_sum, whole);
    resp_free(&r);
    json_decref(ids);

    /* pagoda perplexity's first chunk of 64 tokens against the same ids
     * scored through HTTP */
    char path[512], cmd[2048];
    snprintf(path, sizeof path, "%s/ppl.txt", g_tmp);
    FILE *f = fopen(path, "w");
    for (int i = 0; f && i < 12; i++)
        fprintf(f, "Once upon a time, there was a little girl named Lily. She liked to play with "
                   "her ball in the park. One day %d birds came to sing.\n", i);
    if (f) fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' perplexity --model '%s/models/stories260K.gguf' --file '%s' --ctx 64 "
             "--chunks 2 --no-progress --set engine.kv_dtype=f32 --set backend.cpu.threads=1 2>&1",
             g_bin, g_src, path);
    FILE *p = popen(cmd, "r");
    char line[4096], all[8192] = "";
    double ppl1 = 0;
    while (p && fgets(line, sizeof line, p)) {
        strncat(all, line, sizeof all - strlen(all) - 1);
        if (!strncmp(line, "[1]", 3)) ppl1 = strtod(line + 3, NULL);
    }
    int pst = p ? pclose(p) : -1;
    CHECK(pst == 0 && ppl1 > 1, "pagoda perplexity: %s", all);
    FILE *tf = fopen(path, "r");
    char text[8192];
    size_t tl = tf ? fread(text, 1, sizeof text - 1, tf) : 0;
    if (tf) fclose(tf);
    text[tl] = 0;
    json_t *all_ids = tokenize_ids(s, text);
    CHECK(json_array_size(all_ids) >= 128, "the text has %zu tokens", json_array_size(all_ids));
    /* chunk 1: the first 64 ids (BOS already first); scored from 33 on */
    post_obj(s, json_pack("{sosisisbsf}", "prompt", slice(all_ids, 0, 64), "max_tokens", 0, "logprobs", 0,
                          "echo", 1, "temperature", 0.0), &r);
    double nll = 0;
    for (int i = 33; i < 64; i++) {
        char k[48];
        snprintf(k, sizeof k, "choices.0.logprobs.token_logprobs.%d", i);
        nll -= json_real_value(jget(r.json, k));
    }
    /* the tool prints exp(nll / 31) to 4 decimals: its NLL to ~1e-5 */
    double tool_nll = 31.0 * log(ppl1);
    CHECK(fabs(nll - tool_nll) < 1e-3, "chunk 1: HTTP NLL %.6f, pagoda perplexity's %.6f (PPL %.4f)",
          nll, tool_nll, ppl1);
    resp_free(&r);
    json_decref(all_ids);
}

static void expect_error(const server *s, const char *method, const char *path, const char *body,
                         long body_len, const char *key, long status, const char *param,
                         const char *needle, const char *what)
{
    resp r;
    http(s, method, path, body, body_len, key, &r);
    CHECK(r.status == status, "%s: status %ld, want %ld (%s)", what, r.status, status,
          r.body.p ? r.body.p : "");
    const char *msg = jget_str(r.json, "error.message");
    CHECK(msg != NULL && jget_str(r.json, "error.type") != NULL, "%s: OpenAI error shape: %s", what,
          r.body.p ? r.body.p : "");
    if (param) {
        const char *p = jget_str(r.json, "error.param");
        CHECK(p && !strcmp(p, param), "%s: param %s, want %s", what, p ? p : "null", param);
    }
    if (needle) CHECK(msg && strstr(msg, needle), "%s: message \"%s\" lacks \"%s\"", what, msg ? msg : "", needle);
    resp_free(&r);
}

static void test_errors(const server *s)
{
    expect_error(s, "POST", "/v1/completions", "{\"prompt\": ", -1, NULL, 400, NULL, "malformed JSON",
                 "truncated JSON");
    expect_error(s, "POST", "/v1/completions", "{\"prompt\": \"x\", \"temperature\": 3}", -1, NULL, 400,
                 "temperature", "[0, 2]", "temperature out of range");
    expect_error(s, "POST", "/v1/completions", "{\"prompt\": \"x\", \"top_p\": 0}", -1, NULL, 400,
                 "top_p", "top_p", "top_p out of range");
    expect_error(s, "POST", "/v1/completions", "{\"prompt\": \"x\", \"n\": 17}", -1, NULL, 400, "n", "17",
                 "n out of range");
    expect_error(s, "POST", "/v1/chat/completions", "{\"messages\": []}", -1, NULL, 400, "messages", NULL,
                 "empty messages");
    /* prompt + max_tokens over the context: the numbers are in the message */
    expect_error(s, "POST", "/v1/completions", "{\"prompt\": \"Once upon a time\", \"max_tokens\": 1000}", -1,
                 NULL, 400, NULL, "1005", "over the context (total)");
    expect_error(s, "POST", "/v1/completions", "{\"prompt\": \"Once upon a time\", \"max_tokens\": 1000}", -1,
                 NULL, 400, NULL, "256", "over the context (limit)");
    expect_error(s, "GET", "/no/such/path", NULL, 0, NULL, 404, NULL, NULL, "unknown path");
    expect_error(s, "POST", "/v1/models", "{}", -1, NULL, 405, NULL, NULL, "POST to a GET route");
    resp r;
    http(s, "GET", "/v1/completions", NULL, 0, NULL, &r);
    CHECK(r.status == 405 && r.hdrs.p && strcasestr(r.hdrs.p, "Allow: POST"), "405 with Allow: %s",
          r.hdrs.p ? r.hdrs.p : "");
    resp_free(&r);

    /* hostile input: wrong types, invalid UTF-8, nesting 10,000 deep */
    expect_error(s, "POST", "/v1/completions", "{\"prompt\": 5}", -1, NULL, 400, "prompt", NULL, "prompt number");
    expect_error(s, "POST", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": \"5\"}", -1, NULL, 400,
                 "max_tokens", NULL, "max_tokens string");
    expect_error(s, "POST", "/v1/completions", "{\"prompt\": \"x\", \"stop\": [1, 2]}", -1, NULL, 400,
                 "stop", NULL, "stop numbers");
    expect_error(s, "POST", "/v1/chat/completions", "{\"messages\": {\"role\": \"user\"}}", -1, NULL, 400,
                 "messages", NULL, "messages object");
    expect_error(s, "POST", "/v1/chat/completions", "{\"messages\": [{\"role\": 7, \"content\": \"x\"}]}", -1,
                 NULL, 400, NULL, NULL, "role number");
    expect_error(s, "POST", "/v1/completions", "[1, 2, 3]", -1, NULL, 400, NULL, NULL, "array body");
    expect_error(s, "POST", "/tokenize", "{\"prompt\": 7}", -1, NULL, 400, "prompt", NULL, "tokenize number");
    expect_error(s, "POST", "/detokenize", "{\"tokens\": [99999999]}", -1, NULL, 400, "tokens", NULL,
                 "detokenize id out of range");
    expect_error(s, "POST", "/detokenize", "{\"tokens\": \"abc\"}", -1, NULL, 400, "tokens", NULL,
                 "detokenize string");
    static const char bad_utf8[] = "{\"prompt\": \"a\xff\xfe\xc3\x28 b\"}";
    expect_error(s, "POST", "/v1/completions", bad_utf8, (long)sizeof bad_utf8 - 1, NULL, 400, NULL,
                 "malformed JSON", "invalid UTF-8");
    static const char nul_body[] = "{\"prompt\": \"a\0b\"}";
    expect_error(s, "POST", "/v1/completions", nul_body, (long)sizeof nul_body - 1, NULL, 400, NULL, NULL,
                 "NUL byte in the body");
    size_t depth = 10000;
    char *deep = malloc(depth * 2 + 32);
    size_t k = (size_t)sprintf(deep, "{\"prompt\": ");
    for (size_t i = 0; i < depth; i++) deep[k++] = '[';
    for (size_t i = 0; i < depth; i++) deep[k++] = ']';
    deep[k++] = '}';
    deep[k] = 0;
    expect_error(s, "POST", "/v1/completions", deep, (long)k, NULL, 400, NULL, "depth", "nesting 10,000 deep");
    expect_error(s, "POST", "/v1/chat/completions", deep, (long)k, NULL, 400, NULL, NULL, "deep chat");
    free(deep);
    expect_error(s, "POST", "/v1/completions", "", 0, NULL, 400, NULL, NULL, "empty body");

    /* the server is still serving, and generating */
    http(s, "GET", "/health", NULL, 0, NULL, &r);
    CHECK(r.status == 200, "health after hostile input: %ld", r.status);
    resp_free(&r);
    http(s, "POST", "/v1/completions", "{\"prompt\": \"Once\", \"max_tokens\": 4}", -1, NULL, &r);
    CHECK(r.status == 200 && jget_int(r.json, "usage.completion_tokens") >= 1, "still generating: %ld",
          r.status);
    resp_free(&r);
}

/* After the traffic above: the exposition passes promtool and the counters moved. */
static void test_metrics(const server *s)
{
    resp r;
    http(s, "GET", "/metrics", NULL, 0, NULL, &r);
    CHECK(r.status == 200 && r.body.p, "metrics: %ld", r.status);
    CHECK(r.hdrs.p && strcasestr(r.hdrs.p, "text/plain"), "metrics content type");
    if (!r.body.p) { resp_free(&r); return; }
    const char *t = r.body.p;
    CHECK(metric(t, "pagoda_prompt_tokens_total") >= 20, "prompt tokens %g", metric(t, "pagoda_prompt_tokens_total"));
    CHECK(metric(t, "pagoda_generation_tokens_total") >= 120 + 32 + 12,
          "generation tokens %g", metric(t, "pagoda_generation_tokens_total"));
    CHECK(metric(t, "pagoda_time_to_first_token_seconds_count") >= 5, "ttft count");
    CHECK(metric(t, "pagoda_e2e_request_latency_seconds_count") >= 5, "e2e count");
    CHECK(metric(t, "pagoda_request_queue_time_seconds_count") >= 5, "queue count");
    CHECK(metric(t, "pagoda_inter_token_latency_seconds_count") >= 100, "itl count");
    CHECK(metric(t, "pagoda_e2e_request_latency_seconds_bucket{le=\"+Inf\"}") ==
              metric(t, "pagoda_e2e_request_latency_seconds_count"), "+Inf bucket == count");
    CHECK(metric(t, "pagoda_request_success_total{finished_reason=\"length\"}") >= 5, "finished length");
    CHECK(metric(t, "pagoda_requests_rejected_total") >= 1, "the over-context request was rejected");
    CHECK(metric(t, "pagoda_kv_cache_num_blocks") == 256, "256 blocks (4096 tokens / 16)");
    CHECK(metric(t, "pagoda_engine_ready") == 1, "ready");
    CHECK(strstr(t, "# TYPE pagoda_prompt_tokens_total counter") != NULL, "counter TYPE line");
    CHECK(strstr(t, "# TYPE pagoda_time_to_first_token_seconds histogram") != NULL, "histogram TYPE line");

    /* promtool (Debian package prometheus) checks the format and the names */
    if (access("/usr/bin/promtool", X_OK) != 0 && system("command -v promtool >/dev/null 2>&1") != 0) {
        printf("SKIP promtool check: promtool not installed (apt-get install prometheus)\n");
    } else {
        char path[600], cmd[1400];
        snprintf(path, sizeof path, "%s/metrics.txt", g_tmp);
        FILE *f = fopen(path, "w");
        if (f) { fwrite(t, 1, r.body.len, f); fclose(f); }
        snprintf(cmd, sizeof cmd, "promtool check metrics < %s > %s.out 2>&1", path, path);
        int rc = system(cmd);
        {
            snprintf(cmd, sizeof cmd, "cat %s.out >&2", path);
            if (system(cmd)) {}
        }
        struct stat sb;
        snprintf(cmd, sizeof cmd, "%s.out", path);
        /* lint findings are printed with a zero status in some versions: none allowed */
        CHECK(rc == 0 && stat(cmd, &sb) == 0 && sb.st_size == 0, "promtool check metrics failed (rc %d)", rc);
    }
    resp_free(&r);
}

/* api_key and max_body_bytes on a server of their own. */
static void test_auth_and_size(void)
{
    server s;
    const char *sets[] = {"frontend.http.api_key=s3cret", "frontend.http.max_body_bytes=4096", NULL};
    CHECK(server_start(&s, "auth", sets) == 0, "auth server start");
    if (!s.pid) return;
    expect_error(&s, "GET", "/v1/models", NULL, 0, NULL, 401, NULL, NULL, "no key");
    expect_error(&s, "GET", "/v1/models", NULL, 0, "wrong", 401, NULL, NULL, "wrong key");
    expect_error(&s, "POST", "/v1/completions", "{\"prompt\": \"x\"}", -1, NULL, 401, NULL, NULL,
                 "no key on completions");
    expect_error(&s, "GET", "/metrics", NULL, 0, NULL, 401, NULL, NULL, "no key on metrics");
    resp r;
    http(&s, "GET", "/health", NULL, 0, NULL, &r);
    CHECK(r.status == 200, "health needs no key: %ld", r.status);
    resp_free(&r);
    http(&s, "GET", "/v1/models", NULL, 0, "s3cret", &r);
    CHECK(r.status == 200, "right key: %ld", r.status);
    resp_free(&r);
    http(&s, "POST", "/v1/completions", "{\"prompt\": \"Once\", \"max_tokens\": 3}", -1, "s3cret", &r);
    CHECK(r.status == 200, "completion with key: %ld %s", r.status, r.body.p);
    resp_free(&r);

    char big[8192 + 64];
    int k = snprintf(big, sizeof big, "{\"prompt\": \"");
    while (k < 8192) big[k++] = 'a';
    k += snprintf(big + k, sizeof big - (size_t)k, "\"}");
    expect_error(&s, "POST", "/v1/completions", big, k, "s3cret", 413, NULL, NULL, "body over max_body_bytes");
    http(&s, "GET", "/health", NULL, 0, NULL, &r);
    CHECK(r.status == 200, "up after 413: %ld", r.status);
    resp_free(&r);
    int wst = server_stop(&s, SIGTERM);
    CHECK(wst != -1 && WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "auth server exit status %d", wst);
}

/* A model slow enough that a request is still generating while the test
 * acts on it: llama-110M's shape cut to 4 layers, random Q4_0 weights. */
static int make_slow_model(char *path, size_t n)
{
    snprintf(path, n, "%s/slow.gguf", g_tmp);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "'%s' gen-model --shape llama-110M --type Q4_0 --layers 4 --out '%s' >/dev/null 2>&1",
             g_bin, path);
    return system(cmd) == 0 ? 0 : -1;
}

#define SLOW_BODY(stream_) \
    "{\"prompt\": \"Once upon a time\", \"max_tokens\": 480, \"ignore_eos\": true, \"stream\": " stream_ "}"

/* A client that hangs up mid-stream (or mid-wait) cancels its request and
 * its KV blocks are free at once; a full queue answers 429. */
static void test_disconnect_and_queue(const char *slow)
{
    char mset[600];
    snprintf(mset, sizeof mset, "engine.model=%s", slow);
    server s;
    const char *sets[] = {mset, "engine.max_seq_len=512", "engine.kv_cache_tokens=2048",
                          "engine.max_queue=1", "scheduler.continuous.max_num_seqs=2", NULL};
    CHECK(server_start(&s, "slow", sets) == 0, "slow server start");
    if (!s.pid) return;
    CURLM *m = curl_multi_init();

    /* 1. one stream, dropped after two events */
    stream st;
    stream_init(&st, &s, "/v1/completions", SLOW_BODY("true"), 3);
    curl_multi_add_handle(m, st.c);
    multi_run(m, &st, 1, all_finished, 300);
    CHECK(st.finished && st.result == CURLE_WRITE_ERROR, "the client hung up (result %d)", st.result);
    int polls = 0;
    CHECK(wait_engine_idle(&s, &polls), "blocks not freed after a client left mid-stream");
    printf("disconnect mid-stream: engine idle after %d metrics poll(s)\n", polls);
    double cancelled = scrape(&s, "pagoda_request_success_total{finished_reason=\"cancelled\"}");
    CHECK(cancelled == 1, "cancelled count %g", cancelled);
    double gen = scrape(&s, "pagoda_generation_tokens_total");
    CHECK(gen < 480, "generation stopped early (%g tokens of 480)", gen);
    curl_multi_remove_handle(m, st.c);
    stream_free(&st);

    /* 2. a non-streaming request whose client leaves while it generates */
    stream_init(&st, &s, "/v1/completions", SLOW_BODY("false"), 0);
    curl_multi_add_handle(m, st.c);
    bool in_flight = false;
    for (int i = 0; i < 100 && !in_flight; i++) {
        multi_run(m, &st, 1, NULL, 1);
        in_flight = scrape(&s, "pagoda_num_requests_running") == 1;
    }
    CHECK(in_flight && !st.finished, "the plain request is generating");
    curl_multi_remove_handle(m, st.c);
    stream_free(&st); /* closes the connection */
    CHECK(wait_engine_idle(&s, &polls), "blocks not freed after a non-streaming client left");
    cancelled = scrape(&s, "pagoda_request_success_total{finished_reason=\"cancelled\"}");
    CHECK(cancelled == 2, "cancelled count after the non-streaming client %g", cancelled);

    /* 3. max_num_seqs 2 + max_queue 1: of 5 concurrent long requests 3 are
     * taken and the rest are answered 429; then every client hangs up. */
    enum { NQ = 5 };
    stream qs[NQ];
    for (int i = 0; i < NQ; i++) {
        stream_init(&qs[i], &s, "/v1/completions", SLOW_BODY("true"), 0);
        curl_multi_add_handle(m, qs[i].c);
    }
    multi_run(m, qs, NQ, all_answered, 300);
    int n_ok = 0, n_429 = 0;
    for (int i = 0; i < NQ; i++) {
        if (qs[i].finished) {
            json_t *j = json_loadb(qs[i].body.p ? qs[i].body.p : "", qs[i].body.len, 0, NULL);
            const char *code = jget_str(j, "error.code");
            if (qs[i].status == 429 && code && !strcmp(code, "queue_full")) n_429++;
            else fprintf(stderr, "queue test: request %d finished with %ld: %.300s\n", i, qs[i].status,
                         qs[i].body.p ? qs[i].body.p : "");
            json_decref(j);
        } else {
            long st_code = 0;
            curl_easy_getinfo(qs[i].c, CURLINFO_RESPONSE_CODE, &st_code);
            if (st_code == 200) n_ok++; /* a queued request streams nothing yet */
        }
    }
    CHECK(n_ok == 3 && n_429 == 2, "queue full: %d streaming, %d answered 429 (want 3 and 2)", n_ok, n_429);
    double waiting = 0, running = 0;
    for (int i = 0; i < 50 && !(running == 2 && waiting == 1); i++) {
        multi_run(m, qs, NQ, NULL, 1);
        waiting = scrape(&s, "pagoda_num_requests_waiting");
        running = scrape(&s, "pagoda_num_requests_running");
    }
    CHECK(running == 2 && waiting == 1, "running %g waiting %g", running, waiting);
    for (int i = 0; i < NQ; i++) {
        curl_multi_remove_handle(m, qs[i].c);
        stream_free(&qs[i]); /* closes the connection: the client is gone */
    }
    CHECK(wait_engine_idle(&s, &polls), "blocks not freed after 3 clients left");
    cancelled = scrape(&s, "pagoda_request_success_total{finished_reason=\"cancelled\"}");
    CHECK(cancelled == 5, "cancelled count after the queue test %g", cancelled);
    double rejected = scrape(&s, "pagoda_requests_rejected_total");
    CHECK(rejected == 2, "rejected %g", rejected);

    resp r;
    http(&s, "GET", "/health", NULL, 0, NULL, &r);
    CHECK(r.status == 200, "slow server health: %ld", r.status);
    resp_free(&r);
    curl_multi_cleanup(m);
    int wst = server_stop(&s, SIGTERM);
    CHECK(wst != -1 && WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "slow server exit status %d", wst);
    if (g_fail) print_log_tail(&s);
}

/* SIGTERM while three streams and one plain request are generating: each
 * gets its final event, and the server exits 0. */
static void test_sigterm(const char *slow)
{
    char mset[600];
    snprintf(mset, sizeof mset, "engine.model=%s", slow);
    server s;
    const char *sets[] = {mset, "engine.max_seq_len=512", "engine.kv_cache_tokens=2048", NULL};
    CHECK(server_start(&s, "drain", sets) == 0, "drain server start");
    if (!s.pid) return;
    CURLM *m = curl_multi_init();
    enum { NS = 4 };
    stream sts[NS];
    for (int i = 0; i < NS; i++) {
        const char *body = i == NS - 1 ? SLOW_BODY("false") : SLOW_BODY("true");
        const char *path = i == 1 ? "/v1/chat/completions" : "/v1/completions";
        if (i == 1)
            body = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 400,"
                   " \"ignore_eos\": true, \"stream\": true, \"stream_options\": {\"include_usage\": true}}";
        stream_init(&sts[i], &s, path, body, 0);
        curl_multi_add_handle(m, sts[i].c);
    }
    /* the streams have started; the plain request is running when the engine runs 4 */
    multi_run(m, sts, NS - 1, all_started_or_done, 300);
    bool all_running = false;
    for (int i = 0; i < 100 && !all_running; i++) {
        all_running = scrape(&s, "pagoda_num_requests_running") == NS;
        if (!all_running) multi_run(m, sts, NS, NULL, 1);
    }
    CHECK(all_running, "4 requests running before SIGTERM");
    kill(s.pid, SIGTERM);
    CHECK(multi_run(m, sts, NS, all_finished, 300), "every client got its answer after SIGTERM");
    for (int i = 0; i < NS - 1; i++) {
        bool done;
        int bad;
        json_t *evs = sse_parse(sts[i].body.p, &done, &bad);
        size_t ne = json_array_size(evs);
        const char *fr = NULL;
        for (size_t k = 0; k < ne; k++) {
            const char *f = jget_str(json_array_get(evs, k), "choices.0.finish_reason");
            if (f) fr = f;
        }
        CHECK(sts[i].result == CURLE_OK && sts[i].status == 200, "stream %d: result %d status %ld", i,
              sts[i].result, sts[i].status);
        CHECK(done && bad == 0, "stream %d ends with [DONE] (bad %d)", i, bad);
        CHECK(fr && !strcmp(fr, "abort"), "stream %d final finish_reason %s", i, fr ? fr : "(none)");
        if (i == 1) {
            json_t *last = json_array_get(evs, ne - 1);
            CHECK(jget_int(last, "usage.completion_tokens") >= 1, "usage chunk after drain");
        }
        json_decref(evs);
    }
    /* the plain request: like the streams, 200 with the text generated so
     * far and finish_reason "abort" (not a 503 that drops the text) */
    stream *p = &sts[NS - 1];
    json_t *j = p->body.p ? json_loadb(p->body.p, p->body.len, 0, NULL) : NULL;
    CHECK(p->result == CURLE_OK && j, "plain request answered: result %d body %.200s", p->result,
          p->body.p ? p->body.p : "");
    const char *pfr = jget_str(j, "choices.0.finish_reason");
    CHECK(p->status == 200 && pfr && !strcmp(pfr, "abort") && jget_str(j, "choices.0.text") &&
              jget_int(j, "usage.completion_tokens") >= 0,
          "plain request: %ld %.200s", p->status, p->body.p ? p->body.p : "");
    printf("SIGTERM: the plain request was answered %ld\n", p->status);
    json_decref(j);
    int wst = server_stop(&s, 0 /* already signalled: just wait */);
    CHECK(wst != -1 && WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "drain exit status %d", wst);
    for (int i = 0; i < NS; i++) {
        curl_multi_remove_handle(m, sts[i].c);
        stream_free(&sts[i]);
    }
    curl_multi_cleanup(m);
    if (g_fail) print_log_tail(&s);
}

int main(void)
{
    /* watchdog: the whole test is a few seconds when healthy */
    if (integ_init("http_server", 240)) return 2;

    server s;
    if (server_start(&s, "main", NULL) == 0) {
        printf("main server on port %d\n", s.port);
        test_endpoints(&s);
        test_golden(&s);
        test_echo_scoring(&s);
        test_errors(&s);
        test_metrics(&s);
        int wst = server_stop(&s, SIGTERM);
        CHECK(wst != -1 && WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "main exit status %d", wst);
        if (g_fail) print_log_tail(&s);
    } else {
        CHECK(0, "the main server did not start");
    }
    test_auth_and_size();

    char slow[400];
    if (make_slow_model(slow, sizeof slow) == 0) {
        test_disconnect_and_queue(slow);
        test_sigterm(slow);
    } else {
        CHECK(0, "gen-model for the slow model failed");
    }

    return integ_finish();
}
