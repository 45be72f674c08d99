/*
 * test_engine_realign.c: engine_realign.c alone, on the GPT-2 vocabulary
 * (byte-level BPE, as SmolLM2's): a prompt's tokens take a recent
 * sequence's generated tokens where both spell the same bytes, and only
 * there: not across a salt, not inside the recent sequence's own prompt
 * (but its last token, which the next prompt's text merges with the
 * reply),
 * not where the bytes differ, not past the request's limit, never through
 * a control token, nothing with engine.realign = off; a
 * conversation's second call realigns against the later sequence; a
 * reply of more stretches than the old cap of 16 realigns whole.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "gguf.h"
#include "model.h"
#include "testutil.h"
#include "tokenizer.h"

static pagoda_tokenizer *g_tok;
static pagoda_model g_model;
static struct pagoda_engine g_e;

static void setup(void)
{
    char err[512] = "";
    gguf_file *f = pagoda_gguf_open(tu_src("tests/data/vocab/ggml-vocab-gpt-2.gguf"), err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    g_tok = pagoda_tokenizer_load(f, err, sizeof err);
    ck_assert_msg(g_tok != NULL, "%s", err);
    pagoda_gguf_close(f);
    memset(&g_model, 0, sizeof g_model);
    memset(&g_e, 0, sizeof g_e);
    g_model.tok = g_tok;
    g_e.model = &g_model;
    pthread_mutex_init(&g_e.recent_mu, NULL);
}

static void teardown(void)
{
    engine_recent_free(&g_e);
    pthread_mutex_destroy(&g_e.recent_mu);
    pagoda_tokenizer_free(g_tok);
}

/* a token list being built */
typedef struct toks {
    int32_t v[256];
    int32_t n;
} toks;

static void add_text(toks *t, const char *s)
{
    int32_t n = 0;
    ck_assert_int_eq(pagoda_tokenize(g_tok, s, strlen(s), false, false, t->v + t->n, 256 - t->n, &n), PAGODA_OK);
    ck_assert_int_le(t->n + n, 256);
    t->n += n;
}

static void add_id(toks *t, int32_t id) { t->v[t->n++] = id; }

static int32_t one(const char *s)
{
    toks t = {0};
    add_text(&t, s);
    ck_assert_msg(t.n == 1, "'%s' is %d tokens", s, t.n);
    return t.v[0];
}

/* the recent sequence slot r: tokens h, of which the first n_prompt its prompt */
static void recent(int r, const toks *h, int32_t n_prompt, const char *salt)
{
    engine_recent *x = &g_e.recent[r];
    free(x->tokens);
    free(x->salt);
    x->tokens = malloc(sizeof(int32_t) * (size_t)h->n);
    memcpy(x->tokens, h->v, sizeof(int32_t) * (size_t)h->n);
    x->n = h->n;
    x->n_prompt = n_prompt;
    x->salt = salt ? strdup(salt) : NULL;
}

static char *text_of(const int32_t *v, int32_t n)
{
    char *s = calloc(4096, 1);
    size_t o = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t l;
        const char *b = pagoda_token_bytes(g_tok, v[i], true, &l);
        memcpy(s + o, b, l);
        o += l;
    }
    return s;
}

START_TEST(realigns_the_model_tokens)
{
    int32_t g = one("g"), et = one("et"), get = one("get");
    ck_assert_int_ne(get, g);
    toks head = {0}, h = {0}, p = {0};
    add_text(&head, "The weather: <tool_call>{\"name\": \"");
    /* the model wrote g et for get */
    h = head;
    add_id(&h, g);
    add_id(&h, et);
    add_text(&h, "_weather\"}");
    recent(0, &h, head.n, NULL);
    /* the next turn: the same text, tokenized again, and more */
    p = head;
    add_id(&p, get);
    add_text(&p, "_weather\"}</tool_call> and then");
    int32_t n_out = -1, swapped = -1;
    int32_t *r = engine_realign(&g_e, p.v, p.n, NULL, 1000, &n_out, &swapped);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(swapped, 1);
    ck_assert_int_eq(n_out, p.n + 1);
    ck_assert_mem_eq(r, h.v, sizeof(int32_t) * (size_t)h.n); /* the recent sequence's tokens, all of them */
    ck_assert_mem_eq(r + head.n + 2, p.v + head.n + 1, sizeof(int32_t) * (size_t)(p.n - head.n - 1));
    char *a = text_of(r, n_out), *b = text_of(p.v, p.n);
    ck_assert_str_eq(a, b); /* the same text */
    free(a);
    free(b);
    free(r);

    /* engine.realign = off: the prompt keeps its own tokens */
    g_e.opts.no_realign = true;
    ck_assert_ptr_null(engine_realign(&g_e, p.v, p.n, NULL, 1000, &n_out, &swapped));
    ck_assert_int_eq(n_out, p.n);
    ck_assert_int_eq(swapped, 0);
    ck_assert_ptr_null(pagoda_engine_realign(&g_e, p.v, p.n, &n_out));
    g_e.opts.no_realign = false;
    g_e.opts.max_seq_len = 1000;  /* and on again, through the /tokenize entry too */
    r = pagoda_engine_realign(&g_e, p.v, p.n, &n_out);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(n_out, p.n + 1);
    free(r);

    /* never past the request's limit: one token more does not fit p.n */
    ck_assert_ptr_null(engine_realign(&g_e, p.v, p.n, NULL, p.n, &n_out, &swapped));
    ck_assert_int_eq(n_out, p.n);

    /* another salt's sequence is not used */
    ck_assert_ptr_null(engine_realign(&g_e, p.v, p.n, "tenant-b", 1000, &n_out, &swapped));
    ck_assert_int_eq(swapped, 0);
    ck_assert_int_eq(n_out, p.n);
    recent(0, &h, head.n, "tenant-b");
    r = engine_realign(&g_e, p.v, p.n, "tenant-b", 1000, &n_out, &swapped);
    ck_assert_ptr_nonnull(r);
    free(r);
    ck_assert_ptr_null(engine_realign(&g_e, p.v, p.n, NULL, 1000, &n_out, &swapped));

    /* inside the recent sequence's prompt: its tokenizer's tokens stand */
    recent(0, &h, head.n + 2, NULL);
    ck_assert_ptr_null(engine_realign(&g_e, p.v, p.n, NULL, 1000, &n_out, &swapped));

    /* other bytes: g ot is no get */
    toks h2 = head;
    add_id(&h2, g);
    add_id(&h2, one("ot"));
    recent(0, &h2, head.n, NULL);
    ck_assert_ptr_null(engine_realign(&g_e, p.v, p.n, NULL, 1000, &n_out, &swapped));
}
END_TEST

START_TEST(never_through_a_control_token)
{
    int32_t eot = pagoda_tokenizer_find(g_tok, "<|endoftext|>");
    ck_assert_int_ge(eot, 0);
    ck_assert(!pagoda_tokenizer_is_plain(g_tok, eot));
    ck_assert(pagoda_tokenizer_is_plain(g_tok, one("get")));
    toks head = {0}, h, p;
    add_text(&head, "Once upon a time");
    h = head;
    add_id(&h, eot);
    add_text(&h, " there");
    recent(0, &h, head.n, NULL);
    /* the same characters as text (not parsed as special) */
    p = head;
    add_text(&p, "<|endoftext|> there");
    int32_t n_out, swapped;
    ck_assert_ptr_null(engine_realign(&g_e, p.v, p.n, NULL, 1000, &n_out, &swapped));
    ck_assert_int_eq(n_out, p.n);
}
END_TEST

START_TEST(second_call_from_the_later_sequence)
{
    int32_t g = one("g"), et = one("et"), get = one("get");
    toks t1p = {0}, t1 = {0}, t2 = {0}, p = {0};
    add_text(&t1p, "Q1: weather?\nA: ");
    /* turn 1: the model wrote g et */
    t1 = t1p;
    add_id(&t1, g);
    add_id(&t1, et);
    add_text(&t1, " Paris\nQ2: and Rome?\nA: ");
    recent(0, &t1, t1p.n, NULL);
    /* turn 2: its prompt realigned through turn 1's call, then its own g et */
    t2 = t1;
    int32_t t2p = t2.n;
    add_id(&t2, g);
    add_id(&t2, et);
    add_text(&t2, " Rome");
    recent(1, &t2, t2p, NULL);
    /* turn 3: both calls tokenized again */
    p = t1p;
    add_id(&p, get);
    add_text(&p, " Paris\nQ2: and Rome?\nA: ");
    add_id(&p, get);
    add_text(&p, " Rome\nQ3: warmer?");
    int32_t n_out, swapped;
    int32_t *r = engine_realign(&g_e, p.v, p.n, NULL, 1000, &n_out, &swapped);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(swapped, 2);
    ck_assert_int_eq(n_out, p.n + 2);
    ck_assert_mem_eq(r, t2.v, sizeof(int32_t) * (size_t)t2.n);
    free(r);
}
END_TEST

/* The generation prompt's last token merged, in the next prompt's text,
 * with the reply's first bytes (GPT-2 splits "\n\n{" as "\n" "\n" "{",
 * while the generation prompt alone ends in one "\n\n"): the stretch ends
 * at the reply's start, and is taken when the prompt goes on as the reply
 * did (token for token, or by a stretch of its own); not without a reply
 * after it, nor when the prompt goes on otherwise. */
START_TEST(the_generation_prompt_boundary)
{
    int32_t nn = one("\n\n"), n1 = one("\n"), g = one("g"), et = one("et");
    toks head = {0}, h, p;
    add_text(&head, "assistant:");
    /* the recent sequence: the generation prompt's "\n\n", then the reply {"g" "et"} */
    h = head;
    add_id(&h, nn);
    int32_t np = h.n;
    add_text(&h, "{\"");
    add_id(&h, g);
    add_id(&h, et);
    add_text(&h, "\": 1}");
    recent(0, &h, np, NULL);
    /* the next prompt: the same text, tokenized again ("\n" "\n" "{" ... "get") */
    p = head;
    add_text(&p, "\n\n{\"get\": 1} and then");
    ck_assert_int_eq(p.v[head.n], n1);
    ck_assert_int_eq(p.v[head.n + 1], n1);
    int32_t n_out = -1, swapped = -1;
    int32_t *r = engine_realign(&g_e, p.v, p.n, NULL, 1000, &n_out, &swapped);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(swapped, 2); /* the boundary, then g et */
    ck_assert_mem_eq(r, h.v, sizeof(int32_t) * (size_t)h.n);
    char *a = text_of(r, n_out), *b = text_of(p.v, p.n);
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
    free(r);
    /* no reply after the stretch: the prompt's own tokens stand */
    toks h2 = head;
    add_id(&h2, nn);
    recent(0, &h2, h2.n, NULL);
    ck_assert_ptr_null(engine_realign(&g_e, p.v, p.n, NULL, 1000, &n_out, &swapped));
    /* the prompt goes on other than the reply: nor then */
    recent(0, &h, np, NULL);
    toks p2 = head;
    add_text(&p2, "\n\nhello there");
    ck_assert_ptr_null(engine_realign(&g_e, p2.v, p2.n, NULL, 1000, &n_out, &swapped));
}
END_TEST

/* A reply spelled in odd pieces all along (DeepSeek's markup in a
 * vocabulary where it is plain text: 16 stretches were gone before the
 * arguments): every stretch of it realigns, up to ENGINE_REALIGN_SWAPS. */
START_TEST(many_stretches)
{
    int32_t g = one("g"), et = one("et"), get = one("get");
    enum { N = 40 };
    ck_assert_int_gt(N, 16);
    ck_assert_int_le(N, ENGINE_REALIGN_SWAPS);
    toks head = {0}, h, p;
    add_text(&head, "user: go\nassistant:");
    h = head;
    p = head;
    for (int i = 0; i < N; i++) { /* " get" N times: the model wrote g et each time */
        add_text(&h, " ");
        add_id(&h, g);
        add_id(&h, et);
        add_text(&p, " ");
        add_id(&p, get);
    }
    ck_assert_int_eq(p.v[head.n], h.v[head.n]); /* " " is its own token here, so N stretches */
    recent(0, &h, head.n, NULL);
    add_text(&p, " and then");
    int32_t n_out = -1, swapped = -1;
    int32_t *r = engine_realign(&g_e, p.v, p.n, NULL, 1000, &n_out, &swapped);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(swapped, N);
    ck_assert_int_eq(n_out, p.n + N);
    ck_assert_mem_eq(r, h.v, sizeof(int32_t) * (size_t)h.n); /* the whole reply, the model's tokens */
    char *a = text_of(r, n_out), *b = text_of(p.v, p.n);
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
    free(r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("engine_realign");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, realigns_the_model_tokens);
    tcase_add_test(tc, never_through_a_control_token);
    tcase_add_test(tc, second_call_from_the_later_sequence);
    tcase_add_test(tc, the_generation_prompt_boundary);
    tcase_add_test(tc, many_stretches);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
