/* test_smollm2.c: SmolLM2-135M-Instruct (Q4_1 GGUF, fetched by
 * `models/get-model smollm2`) end to end against an independent reference:
 * tests/data/smollm2_reference.json, written by tests/reference/
 * smollm2_gen.py with Hugging Face transformers + torch (float32 on the
 * dequantized GGUF) and the `tokenizers` library.
 * Not for: the kernels' own arithmetic (test_cpu_kernels.c) or the
 * tokenizer's other vocabularies (test_tokenizer.c).
 *
 * The reference has two arithmetics, and the CPU backend has both:
 *   f32: activations in float32. The backend's dequantize + sgemm path
 *        (T >= PAGODA_CPU_GEMM_MIN_T rows) computes exactly this.
 *   q8:  every quantized matmul first rounds its input to 8-bit blocks of
 *        32 (the backend's decode path, as in llama.cpp), emulated in the
 *        reference from the contract in backends/cpu/kernels/vecdot.h.
 * They differ by up to ~1 logit on this model (the reference file measures
 * it), so each is checked against its own arithmetic, forced with the
 * backend's PAGODA_CPU_GEMM_MIN_T override (read once per process; Check
 * runs each test in its own forked process, so each test sets its own).
 * What remains between pagoda and the reference is float summation order:
 * tiny in f32 (F32_TOL), but amplified in q8, where it moves activations
 * across rounding boundaries (the q8 bound below, and docs/models.md).
 *
 * Skipping: without the model file only the reference data's own checks
 * run; the suite then prints why the rest were skipped and exits 77, which
 * ctest reports as "Skipped" (tests/CMakeLists.txt: SKIP_RETURN_CODE 77).
 */
#include <jansson.h>
#include <math.h>
#include <sys/stat.h>

#include "chat_template.h"
#include "engine_testutil.h"
#include "forward.h"

#define MODEL_REL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define REF_REL "tests/data/smollm2_reference.json"
#define GET_MODEL_REL "models/get-model"
/* Greedy tokens that must agree with the reference per prompt (issue 8). */
#define MIN_MATCH 64
/* |pagoda - reference| for the reference's top-5 logits at every position.
 * f32 (dequantize + sgemm, exact float products): only float summation
 * order differs; measured <= 2e-4 on logits of |x| < 30, allowed 1e-2. */
#define F32_TOL 0.01
/* q8 (int8 activations, the decode path): the kernel equals dequant(W) .
 * q8(x) to ~2e-5 per dot, but the whole model is ill-conditioned under
 * this rounding: SmolLM2 carries a few huge activations, a block holding
 * one has a coarse step, and a float difference of one ulp can move one of
 * its values a whole step. Two correct q8 implementations (pagoda and the
 * reference's emulation) therefore differ by as much as either differs
 * from f32. The bound is twice the f32-vs-q8 spread the reference measured
 * ("tolerance": "measured_f32_vs_q8_max"), and the mean over all compared
 * logits must stay small (measured ~0.1; a wrong rope theta, norm or
 * tensor gives several logits). */
#define Q8_MEAN_TOL 0.3
/* An argmax may differ only where the reference's best two logits are
 * within twice the tolerance (both moved by at most the tolerance). */

typedef enum arith { ARITH_F32, ARITH_Q8 } arith;

static const char *arith_name(arith a) { return a == ARITH_F32 ? "f32" : "q8"; }

static json_t *ref_load(void)
{
    json_error_t je;
    json_t *j = json_load_file(tu_src(REF_REL), JSON_ALLOW_NUL, &je);   /* "\x00" is a test string */
    ck_assert_msg(j != NULL, "%s: %s (line %d)", REF_REL, je.text, je.line);
    return j;
}

static bool model_present(void)
{
    struct stat st;
    return stat(tu_src(MODEL_REL), &st) == 0 && st.st_size > 0;
}

static int32_t json_ids(json_t *a, int32_t *out, int32_t cap)
{
    int32_t n = (int32_t)json_array_size(a);
    ck_assert_int_le(n, cap);
    for (int32_t i = 0; i < n; i++) out[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    return n;
}

/* ---------------------------------------------- the reference data itself */

START_TEST(reference_data_is_complete)
{
    json_t *r = ref_load();
    /* the data was computed on the file get-model fetches */
    const char *sha = json_string_value(json_object_get(r, "sha256"));
    ck_assert_ptr_nonnull(sha);
    ck_assert_uint_eq(strlen(sha), 64);
    FILE *f = fopen(tu_src(GET_MODEL_REL), "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    bool found = false;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "sha=") && strstr(line, sha)) found = true;
    fclose(f);
    ck_assert_msg(found, "models/get-model does not pin the reference's sha256 %s", sha);

    json_t *cases = json_object_get(r, "cases");
    ck_assert_uint_ge(json_array_size(cases), 6);
    int n_raw = 0, n_chat = 0;
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *kind = json_string_value(json_object_get(c, "kind"));
        ck_assert_ptr_nonnull(kind);
        if (!strcmp(kind, "raw")) n_raw++;
        if (!strcmp(kind, "chat")) n_chat++;
        ck_assert_uint_gt(json_array_size(json_object_get(c, "prompt_ids")), 0);
        for (int a = 0; a < 2; a++) {
            json_t *m = json_object_get(c, arith_name((arith)a));
            json_t *toks = json_object_get(m, "tokens"), *top = json_object_get(m, "top");
            ck_assert_uint_ge(json_array_size(toks), MIN_MATCH);
            ck_assert_uint_eq(json_array_size(top), json_array_size(toks));
            /* top-5 sorted, the greedy token first, gap consistent */
            json_t *t0 = json_array_get(top, 0);
            json_t *lg = json_object_get(t0, "logits");
            ck_assert_uint_eq(json_array_size(lg), 5);
            ck_assert(json_real_value(json_array_get(lg, 0)) >= json_real_value(json_array_get(lg, 4)));
            ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(t0, "ids"), 0)),
                             json_integer_value(json_array_get(toks, 0)));
        }
    }
    ck_assert_int_ge(n_raw, 2);
    ck_assert_int_ge(n_chat, 2);
    ck_assert_uint_ge(json_array_size(json_object_get(r, "tokenize")), 50);
    /* the tolerance here must be well under the arithmetic spread, or the
     * two checks could not tell the paths apart */
    double spread = json_real_value(json_object_get(json_object_get(r, "tolerance"),
                                                    "measured_f32_vs_q8_max"));
    ck_assert_msg(spread > 10 * F32_TOL && spread < 5.0, "spread %g", spread);
    json_decref(r);
}
END_TEST

/* ------------------------------------------------------------ the model */

static pagoda_runtime *open_rt(pagoda_config **cfg_out, arith a)
{
    /* before the backend's first matmul: which path quantized weights take */
    setenv("PAGODA_CPU_GEMM_MIN_T", a == ARITH_F32 ? "1" : "1000000000", 1);
    const char *settings[] = {"engine.kv_dtype=f32", "engine.max_seq_len=512", "engine.kv_cache_tokens=2048",
                              "backend.cpu.threads=2", NULL};
    return et_open_model(cfg_out, tu_src(MODEL_REL), settings);
}

START_TEST(model_hparams)
{
    char err[512] = "";
    pagoda_model *m = pagoda_model_open(tu_src(MODEL_REL), err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    ck_assert_str_eq(m->hp.arch, "llama");
    ck_assert_int_eq(m->hp.n_layers, 30);
    ck_assert_int_eq(m->hp.dim, 576);
    ck_assert_int_eq(m->hp.n_heads, 9);
    ck_assert_int_eq(m->hp.n_kv_heads, 3);
    ck_assert_int_eq(m->hp.head_dim, 64);
    ck_assert_int_eq(m->hp.ffn, 1536);
    ck_assert_int_eq(m->hp.n_vocab, 49152);
    ck_assert_float_eq(m->hp.rope_theta, 100000.0f);
    ck_assert(!m->hp.rope_neox);
    ck_assert(m->hp.tied_output);
    ck_assert_int_eq(pagoda_tokenizer_n_vocab(m->tok), 49152);
    ck_assert(!pagoda_tokenizer_add_bos(m->tok));
    /* a chat reply ends at <|im_end|> as well as at EOS */
    int32_t im_end = pagoda_tokenizer_find(m->tok, "<|im_end|>");
    ck_assert_int_eq(im_end, 2);
    ck_assert(pagoda_tokenizer_is_eog(m->tok, im_end));
    ck_assert(pagoda_tokenizer_is_eog(m->tok, pagoda_tokenizer_eos(m->tok)));
    ck_assert(!pagoda_tokenizer_is_eog(m->tok, pagoda_tokenizer_find(m->tok, "<|im_start|>")));
    pagoda_model_free(m);
}
END_TEST

START_TEST(tokenize_matches_reference)
{
    char err[512] = "";
    pagoda_model *m = pagoda_model_open(tu_src(MODEL_REL), err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    json_t *r = ref_load();
    static int32_t ids[4096], want[4096];
    int bad = 0;
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(r, "tokenize"), i, s) {
        const char *text = json_string_value(json_object_get(s, "text"));
        size_t tlen = json_string_length(json_object_get(s, "text"));
        bool special = json_is_true(json_object_get(s, "parse_special"));
        int32_t nw = json_ids(json_object_get(s, "ids"), want, 4096), n = 0;
        ck_assert_int_eq(pagoda_tokenize(m->tok, text, tlen, false, special, ids, 4096, &n), 0);
        bool same = n == nw && !memcmp(ids, want, sizeof(int32_t) * (size_t)n);
        if (!same) {
            bad++;
            fprintf(stderr, "tokenize %zu differs: got %d ids, want %d\n", i, n, nw);
        }
        /* and back: the ids decode to the text (special ones as their text) */
        char back[8192];
        size_t bl = 0;
        for (int32_t k = 0; k < n; k++) {
            size_t l = 0;
            const char *b = pagoda_token_bytes(m->tok, ids[k], true, &l);
            ck_assert_uint_lt(bl + l, sizeof back);
            memcpy(back + bl, b, l);
            bl += l;
        }
        ck_assert_msg(bl == tlen && !memcmp(back, text, bl), "string %zu does not round-trip", i);
    }
    ck_assert_msg(bad == 0, "%d of %zu strings tokenize differently from the reference", bad,
                  json_array_size(json_object_get(r, "tokenize")));
    json_decref(r);
    pagoda_model_free(m);
}
END_TEST

/* Chat prompts: the model's template rendered by pagoda (ChatML, with the
 * default system prompt the template adds when there is none) is the text
 * transformers rendered, and both tokenize the same. */
START_TEST(chat_prompts_match_reference)
{
    char err[512] = "";
    pagoda_model *m = pagoda_model_open(tu_src(MODEL_REL), err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    pagoda_chat_family fam;
    char msg[256] = "";
    ck_assert_int_eq(pagoda_chat_select("auto", m->chat_template, &fam, msg, sizeof msg), 0);
    ck_assert_int_eq(fam, PAGODA_CHAT_CHATML);
    char sys[512];
    ck_assert(pagoda_chat_default_system(m->chat_template, sys, sizeof sys));
    json_t *r = ref_load();
    static int32_t ids[4096], want[4096];
    int n_chat = 0;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(r, "cases"), i, c) {
        const char *text = json_string_value(json_object_get(c, "text"));
        int32_t nw = json_ids(json_object_get(c, "prompt_ids"), want, 4096), n = 0;
        ck_assert_int_eq(pagoda_tokenize(m->tok, text, strlen(text), false, true, ids, 4096, &n), 0);
        ck_assert_msg(n == nw && !memcmp(ids, want, sizeof(int32_t) * (size_t)n),
                      "prompt %zu tokenizes differently", i);
        if (strcmp(json_string_value(json_object_get(c, "kind")), "chat")) continue;
        n_chat++;
        json_t *msgs = json_object_get(c, "messages");
        pagoda_chat_message pm[8];
        int32_t np = 0;
        if (strcmp(json_string_value(json_object_get(json_array_get(msgs, 0), "role")), "system"))
            pm[np++] = (pagoda_chat_message){.role = "system", .content = sys};
        size_t k;
        json_t *mm;
        json_array_foreach(msgs, k, mm) {
            ck_assert_int_lt(np, 8);
            pm[np++] = (pagoda_chat_message){.role = json_string_value(json_object_get(mm, "role")),
                                             .content = json_string_value(json_object_get(mm, "content"))};
        }
        char *out = NULL;
        ck_assert_int_eq(pagoda_chat_render(fam, pm, np, true, NULL, NULL, &out, err, sizeof err), 0);
        ck_assert_str_eq(out, text);
        free(out);
    }
    ck_assert_int_ge(n_chat, 2);
    json_decref(r);
    pagoda_model_free(m);
}
END_TEST

/* Logits of pagoda's forward pass at the positions that predict each
 * reference token, given the prompt and the reference's tokens before it.
 * one_by_one: one token per step (decode); else one batch of all rows
 * (prefill, several threads over rows). out: [n_gen x n_vocab]. */
static void forced_logits(pagoda_runtime *rt, const int32_t *seq, int32_t n_prompt, int32_t n_gen,
                          bool one_by_one, float *out)
{
    const int32_t bs = 16, n = n_prompt + n_gen - 1, V = rt->model->hp.n_vocab;
    const int32_t nb = (n + bs - 1) / bs;
    char err[512] = "";
    pagoda_forward fw;
    memset(&fw, 0, sizeof fw);
    int st = pagoda_forward_init(&fw, rt->model, &rt->backend, n, n_gen, nb, bs, PAGODA_DTYPE_F32,
                                 err, sizeof err);
    ck_assert_msg(st == 0, "forward_init: %s", err);
    int32_t *table = malloc(sizeof(int32_t) * (size_t)nb);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)n_gen);
    ck_assert(table && pos && rows);
    for (int32_t b = 0; b < nb; b++) table[b] = b;
    for (int32_t t = 0; t < n; t++) pos[t] = t;   /* slot = position: blocks in order */
    if (!one_by_one) {
        for (int32_t j = 0; j < n_gen; j++) rows[j] = n_prompt - 1 + j;
        pagoda_seq_view sv = {.q_start = 0, .n_q = n, .ctx_len = n, .n_blocks = nb, .block_table = table};
        pagoda_batch b = {.seq_no = 1, .n_tokens = n, .tokens = seq, .positions = pos, .slots = pos,
                          .n_seqs = 1, .seqs = &sv};
        st = pagoda_forward_run(&fw, &b, rows, n_gen, out, err, sizeof err);
        ck_assert_msg(st == 0, "forward: %s", err);
    } else {
        for (int32_t t = 0; t < n; t++) {
            pagoda_seq_view sv = {.q_start = 0, .n_q = 1, .ctx_len = t + 1, .n_blocks = t / bs + 1,
                                  .block_table = table};
            pagoda_batch b = {.seq_no = (uint64_t)t + 1, .n_tokens = 1, .tokens = seq + t,
                              .positions = pos + t, .slots = pos + t, .n_seqs = 1, .seqs = &sv};
            int32_t row = 0, j = t - (n_prompt - 1);
            st = pagoda_forward_run(&fw, &b, &row, j >= 0 ? 1 : 0, j >= 0 ? out + (size_t)j * V : NULL,
                                    err, sizeof err);
            ck_assert_msg(st == 0, "forward at %d: %s", t, err);
        }
    }
    free(rows);
    free(pos);
    free(table);
    pagoda_forward_free(&fw);
}

typedef struct cmp_stats {
    double max_diff;
    int worst_case, worst_pos;
    double sum_diff;
    int64_t n_diff;
    int argmax_diff, argmax_diff_not_tie;
    int first_argmax_diff;   /* -1: none */
} cmp_stats;

/* The logit tolerance of arithmetic a (see F32_TOL and Q8_MEAN_TOL). */
static double tol_of(arith a, json_t *r)
{
    if (a == ARITH_F32) return F32_TOL;
    return 2.0 * json_real_value(json_object_get(json_object_get(r, "tolerance"),
                                                 "measured_f32_vs_q8_max"));
}

/* Compare logits [n_gen x V] with one case's reference top-5 in arithmetic a. */
static void compare_logits(json_t *ref_arith, const float *lg, int32_t n_gen, int32_t V, int ci,
                           double tie_gap, cmp_stats *cs)
{
    json_t *top = json_object_get(ref_arith, "top");
    for (int32_t j = 0; j < n_gen; j++) {
        json_t *t = json_array_get(top, (size_t)j);
        json_t *ids = json_object_get(t, "ids"), *vals = json_object_get(t, "logits");
        const float *row = lg + (size_t)j * V;
        for (size_t k = 0; k < json_array_size(ids); k++) {
            int32_t id = (int32_t)json_integer_value(json_array_get(ids, k));
            double d = fabs((double)row[id] - json_real_value(json_array_get(vals, k)));
            if (d > cs->max_diff) { cs->max_diff = d; cs->worst_case = ci; cs->worst_pos = j; }
            cs->sum_diff += d;
            cs->n_diff++;
        }
        int32_t am = 0;
        for (int32_t v = 1; v < V; v++)
            if (row[v] > row[am]) am = v;
        if (am != (int32_t)json_integer_value(json_array_get(ids, 0))) {
            cs->argmax_diff++;
            if (cs->first_argmax_diff < 0) cs->first_argmax_diff = j;
            if (json_real_value(json_object_get(t, "gap")) > tie_gap) cs->argmax_diff_not_tie++;
        }
    }
}

/* Teacher-forced logits in arithmetic a (decode steps or one prefill batch)
 * against the reference's top-5 in the same arithmetic. */
static void check_forced(arith a, bool one_by_one, int max_cases, int32_t max_gen)
{
    pagoda_config *cfg;
    pagoda_runtime *rt = open_rt(&cfg, a);
    json_t *r = ref_load();
    const int32_t V = rt->model->hp.n_vocab;
    const double tol = tol_of(a, r);
    cmp_stats cs = {0};
    size_t ci;
    json_t *c;
    json_array_foreach(json_object_get(r, "cases"), ci, c) {
        if ((int)ci >= max_cases) break;
        json_t *ra = json_object_get(c, arith_name(a));
        static int32_t seq[1024];
        int32_t np = json_ids(json_object_get(c, "prompt_ids"), seq, 512);
        int32_t ng = json_ids(json_object_get(ra, "tokens"), seq + np, 512);
        if (ng > max_gen) ng = max_gen;
        float *lg = malloc(sizeof(float) * (size_t)ng * (size_t)V);
        ck_assert_ptr_nonnull(lg);
        forced_logits(rt, seq, np, ng, one_by_one, lg);
        cmp_stats one = {.first_argmax_diff = -1};
        compare_logits(ra, lg, ng, V, (int)ci, 2 * tol, &one);
        fprintf(stderr, "smollm2 %s %s case %zu: |logit diff| max %.5f mean %.5f, argmax differs "
                "at %d of %d positions (%d not near-ties)\n", arith_name(a),
                one_by_one ? "decode" : "batch", ci, one.max_diff, one.sum_diff / (double)one.n_diff,
                one.argmax_diff, ng, one.argmax_diff_not_tie);
        if (one.max_diff > cs.max_diff) {
            cs.max_diff = one.max_diff;
            cs.worst_case = one.worst_case;
            cs.worst_pos = one.worst_pos;
        }
        cs.argmax_diff_not_tie += one.argmax_diff_not_tie;
        cs.sum_diff += one.sum_diff;
        cs.n_diff += one.n_diff;
        free(lg);
    }
    ck_assert_msg(cs.max_diff <= tol, "%s: logits differ by %.4f (> %.4f) at case %d position %d",
                  arith_name(a), cs.max_diff, tol, cs.worst_case, cs.worst_pos);
    if (a == ARITH_Q8)
        ck_assert_msg(cs.sum_diff / (double)cs.n_diff <= Q8_MEAN_TOL, "q8: mean |logit diff| %.4f",
                      cs.sum_diff / (double)cs.n_diff);
    ck_assert_int_eq(cs.argmax_diff_not_tie, 0);
    json_decref(r);
    et_close(rt, cfg);
}

/* Under the sanitizers (an unoptimized build, ~10x slower: 6 minutes for
 * the full suite) the same checks run on one prompt and 16 generated
 * tokens, and the f32 greedy check, which dequantizes every weight at
 * every step, is left out: there they look for memory errors, the Release
 * run checks the numbers in full. */
#if defined(__SANITIZE_ADDRESS__)
#define N_CASES_HEAVY 1
#define N_GEN_HEAVY 16
#define SANITIZED 1
#else
#define N_CASES_HEAVY 100
#define N_GEN_HEAVY 1000
#define SANITIZED 0
#endif

/* One step per token is the slow part: two prompts (a raw one and a chat
 * one); the batch test covers all of them in the same arithmetic. */
START_TEST(logits_q8_decode) { check_forced(ARITH_Q8, true, SANITIZED ? 1 : 2, N_GEN_HEAVY); }
END_TEST

START_TEST(logits_q8_batch) { check_forced(ARITH_Q8, false, N_CASES_HEAVY, N_GEN_HEAVY); }
END_TEST

START_TEST(logits_f32_batch) { check_forced(ARITH_F32, false, N_CASES_HEAVY, N_GEN_HEAVY); }
END_TEST

/* Free-running greedy generation through the engine (tokenizing the prompt
 * text itself, scheduling every prompt at once, paged KV) against the
 * reference's greedy tokens in the same arithmetic. A divergence is
 * accepted only at a near-tie (reference gap <= 2 x tolerance); in f32,
 * only after MIN_MATCH equal tokens as well. In q8 the ill-conditioning
 * (see Q8_MEAN_TOL) makes that guarantee impossible for any two
 * implementations, so only the near-tie rule holds there. */
static void check_greedy(arith a, int32_t max_tokens)
{
    pagoda_config *cfg;
    pagoda_runtime *rt = open_rt(&cfg, a);
    ck_assert_int_eq(pagoda_engine_start(rt->engine), 0);
    json_t *r = ref_load();
    const double tie_gap = 2 * tol_of(a, r);
    json_t *cases = json_object_get(r, "cases");
    size_t nc = json_array_size(cases);
    if (nc > (size_t)N_CASES_HEAVY) nc = (size_t)N_CASES_HEAVY;
    /* the sanitizer subset: one raw prompt and one chat prompt */
    size_t pick[16], np = 0;
    for (size_t i = 0; i < json_array_size(cases) && np < 16; i++) {
        if (N_CASES_HEAVY < 100) {
            const char *kind = json_string_value(json_object_get(json_array_get(cases, i), "kind"));
            bool have = false;
            for (size_t k = 0; k < np; k++)
                if (!strcmp(kind, json_string_value(json_object_get(json_array_get(cases, pick[k]), "kind"))))
                    have = true;
            if (have) continue;
        }
        pick[np++] = i;
        if (np >= nc) break;
    }
    et_result *res = calloc(np, sizeof *res);
    ck_assert_ptr_nonnull(res);
    for (size_t k = 0; k < np; k++) {
        json_t *c = json_array_get(cases, pick[k]);
        et_result_init(&res[k]);
        const char *text = json_string_value(json_object_get(c, "text"));
        pagoda_request req;
        pagoda_engine_request_defaults(rt->engine, &req);
        req.prompt = text;
        req.prompt_len = strlen(text);
        req.parse_special = true;
        req.add_special = false;
        req.max_tokens = (int32_t)json_array_size(json_object_get(json_object_get(c, arith_name(a)), "tokens"));
        if (req.max_tokens > max_tokens) req.max_tokens = max_tokens;
        req.temperature = 0.0f;
        req.ignore_eos = true;
        uint64_t id;
        char err[512] = "";
        ck_assert_msg(pagoda_engine_submit(rt->engine, &req, et_cb, &res[k], &id, err, sizeof err) == 0,
                      "submit: %s", err);
    }
    pagoda_engine_wait_idle(rt->engine);
    for (size_t k = 0; k < np; k++) {
        json_t *c = json_array_get(cases, pick[k]), *ra = json_object_get(c, arith_name(a));
        json_t *toks = json_object_get(ra, "tokens"), *top = json_object_get(ra, "top");
        int32_t n = (int32_t)json_array_size(toks);
        if (n > max_tokens) n = max_tokens;
        ck_assert_int_eq(res[k].n_final, 1);
        ck_assert_msg(res[k].n_tokens == n, "case %zu: %d tokens, want %d (%s)", pick[k],
                      res[k].n_tokens, n, res[k].error);
        int32_t j = 0;
        while (j < n && res[k].tokens[j] == (int32_t)json_integer_value(json_array_get(toks, (size_t)j))) j++;
        double gap = j < n ? json_real_value(json_object_get(json_array_get(top, (size_t)j), "gap")) : 0;
        if (j < n)
            fprintf(stderr, "smollm2 %s greedy case %zu: the first %d of %d tokens as the reference; "
                    "its gap at the first difference: %.4f\n", arith_name(a), pick[k], j, n, gap);
        else
            fprintf(stderr, "smollm2 %s greedy case %zu: all %d tokens as the reference\n",
                    arith_name(a), pick[k], n);
        if (j < n) {
            ck_assert_msg((a == ARITH_Q8 || j >= MIN_MATCH) && gap <= tie_gap,
                          "case %zu: token %d differs (got %d, want %d) where the reference's gap is %.4f",
                          pick[k], j, res[k].tokens[j],
                          (int)json_integer_value(json_array_get(toks, (size_t)j)), gap);
        }
    }
    free(res);
    json_decref(r);
    et_close(rt, cfg);
}

/* f32 dequantizes all weights at every step: MIN_MATCH tokens, not more. */
START_TEST(greedy_f32_matches_reference) { check_greedy(ARITH_F32, MIN_MATCH); }
END_TEST

START_TEST(greedy_q8_matches_reference) { check_greedy(ARITH_Q8, N_GEN_HEAVY); }
END_TEST

/* The reference's greedy text is what pagoda's detokenizer makes of the
 * same ids (special tokens rendered as their text, as transformers does). */
START_TEST(detokenize_matches_reference)
{
    char err[512] = "";
    pagoda_model *m = pagoda_model_open(tu_src(MODEL_REL), err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    json_t *r = ref_load();
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(r, "cases"), i, c) {
        for (int a = 0; a < 2; a++) {
            json_t *ra = json_object_get(c, arith_name((arith)a));
            const char *want = json_string_value(json_object_get(ra, "text_out"));
            char buf[16384];
            size_t bl = 0, k;
            json_t *t;
            json_array_foreach(json_object_get(ra, "tokens"), k, t) {
                size_t l = 0;
                const char *b = pagoda_token_bytes(m->tok, (int32_t)json_integer_value(t), true, &l);
                ck_assert_uint_lt(bl + l, sizeof buf);
                memcpy(buf + bl, b, l);
                bl += l;
            }
            buf[bl] = 0;
            ck_assert_str_eq(buf, want);
        }
    }
    json_decref(r);
    pagoda_model_free(m);
}
END_TEST

int main(void)
{
    (void)et_open;     /* engine_testutil.h's stories260K helpers: not used here */
    (void)et_submit;
    Suite *s = suite_create("smollm2");
    TCase *tc = tcase_create("reference_data");
    tcase_add_test(tc, reference_data_is_complete);
    suite_add_tcase(s, tc);

    bool present = model_present();
    if (present) {
        TCase *m = tcase_create("model");
        tcase_set_timeout(m, 600);
        tcase_add_test(m, model_hparams);
        tcase_add_test(m, tokenize_matches_reference);
        tcase_add_test(m, chat_prompts_match_reference);
        tcase_add_test(m, detokenize_matches_reference);
        tcase_add_test(m, logits_q8_decode);
        tcase_add_test(m, logits_q8_batch);
        /* the f32 check needs its own process (the path override is read
         * once); without fork every test shares one */
        const char *fork = getenv("CK_FORK");
        if (!fork || strcmp(fork, "no")) {
            tcase_add_test(m, logits_f32_batch);
            if (!SANITIZED) tcase_add_test(m, greedy_f32_matches_reference);
            else fprintf(stderr, "test_smollm2: sanitizer build: greedy_f32 not run (too slow)\n");
        } else {
            fprintf(stderr, "test_smollm2: CK_FORK=no: the f32 checks are not run\n");
        }
        tcase_add_test(m, greedy_q8_matches_reference);
        suite_add_tcase(s, m);
    }
    int rc = tu_run(s);
    if (rc == 0 && !present) {
        printf("test_smollm2: skipped: %s not present (fetch it with `models/get-model smollm2`); "
               "only the reference data was checked\n", MODEL_REL);
        return 77;
    }
    return rc;
}
