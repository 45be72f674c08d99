/* test_gptoss.c: the gpt-oss architecture (issue 26) against a reference
 * of another lineage: tests/fixtures/gptoss/gptoss-tiny.f16.gguf, a tiny
 * random GptOssForCausalLM (3 layers: sliding window 16, full, sliding;
 * 4 query heads on 2 KV heads of 16; 8 experts, top-4 of width 16; every
 * weight F16-exact) converted by llama.cpp's convert_hf_to_gguf.py, with
 * transformers' F32 logits for four prompts (the longest 150 tokens, so
 * every local layer's window slides past 128 positions), and its twin
 * with YaRN (factor 8 over 64 positions, truncate false as gpt-oss has
 * it). Made by make_fixtures.py there (not in CI).
 *
 *   - against_transformers: each prompt in one prefill over a scrambled
 *     block table: every position's top-5 and the last position's whole
 *     vocabulary within 1e-3 of transformers (logit spread printed
 *     beside); then 32 greedy steps on pagoda's own choices, equal to
 *     transformers' up to the first reference near-tie (top-2 gap < 2e-3);
 *   - window_pool: the same greedy runs through the engine (continuous
 *     batching, all four queued before it starts so every one of its 32
 *     steps holds them together; paged KV, the sliding-window pool whose
 *     blocks are reused as the window slides) with swa_kv = window and
 *     swa_kv = full: the same tokens, and transformers' up to the first
 *     near-tie;
 *   - fallbacks: without the backend's swiglu_oai (the host computes it),
 *     matmul_experts and moe_combine (the core's per-expert matmuls), the
 *     logits of the long prompt are the backend's within 1e-5;
 *   - hparams: what model.c read and bound (alternating windows, SWA RoPE
 *     = global RoPE, routing, clamp constants, every bias and sink);
 *   - refusals: a backend without sinks (info.attn_sinks, ABI 1.8) or
 *     attention_ext, each refused with one line; under tensor
 *     parallelism a rank's sinks are its heads', rank 0 alone adds
 *     attn_output.bias;
 *   - bad_input: a sink tensor of the wrong length, a missing sink or
 *     expert bias, an expert bias of the wrong shape, no sliding_window:
 *     one line naming the tensor or key. */
#define _GNU_SOURCE
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_testutil.h"
#include "forward.h"
#include "gguf_writer.h"
#include "model_testutil.h"
#include "ref_logits.h"
#include "testutil.h"

#define FIXTURE "tests/fixtures/gptoss/gptoss-tiny.f16.gguf"
#define REF "tests/fixtures/gptoss/gptoss-tiny.ref.json"
/* the same with YaRN: factor 8 over an original context of 64, beta 32 / 1,
 * truncate false, as gpt-oss's config has it (scaled to the tiny context) */
#define FIXTURE_YARN "tests/fixtures/gptoss/gptoss-yarn-tiny.f16.gguf"
#define REF_YARN "tests/fixtures/gptoss/gptoss-yarn-tiny.ref.json"
#define TOL 1e-3
#define NEAR_TIE 2e-3

enum { BS = 16, NB = 16, CAP = NB * BS };

static char g_dir[] = "/tmp/pagoda_gptoss_XXXXXX";
static void setup(void) { ck_assert_ptr_nonnull(mkdtemp(g_dir)); }
static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    ck_assert_int_eq(system(cmd), 0);
}

static json_t *load_ref_file(const char *rel)
{
    json_error_t je;
    json_t *ref = json_load_file(tu_src(rel), 0, &je);
    ck_assert_msg(ref != NULL, "%s: %s (line %d)", rel, je.text, je.line);
    ck_assert_str_eq(json_string_value(json_object_get(ref, "arch")), "gpt-oss");
    return ref;
}

static json_t *load_ref(void) { return load_ref_file(REF); }

static pagoda_runtime *open_model(pagoda_config **cfg, const char *rel, const char *swa_kv)
{
    char kv[64];
    snprintf(kv, sizeof kv, "engine.swa_kv=%s", swa_kv);
    const char *settings[] = {"engine.kv_dtype=f32", "engine.kv_cache_tokens=1024",
                              "engine.max_seq_len=256", "backend.cpu.threads=2", kv, NULL};
    return et_open_model(cfg, tu_src(rel), settings);
}

static pagoda_runtime *open_fixture(pagoda_config **cfg, const char *swa_kv)
{
    return open_model(cfg, FIXTURE, swa_kv);
}

static int32_t argmax(const float *x, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static int32_t prompt_ids(json_t *pr, int32_t *tok, int32_t cap)
{
    json_t *ids = json_object_get(pr, "ids");
    int32_t n = (int32_t)json_array_size(ids);
    ck_assert_int_le(n, cap);
    for (int32_t i = 0; i < n; i++) tok[i] = (int32_t)json_integer_value(json_array_get(ids, (size_t)i));
    return n;
}

/* How many of the reference's greedy steps must agree: all of them, or up
 * to its first near-tie. */
static int32_t must_agree(json_t *pr)
{
    json_t *gaps = json_object_get(pr, "greedy_top2_gap");
    for (size_t g = 0; g < json_array_size(gaps); g++)
        if (json_number_value(json_array_get(gaps, g)) < NEAR_TIE) return (int32_t)g;
    return (int32_t)json_array_size(gaps);
}

/* One prefill of tok[0..n) over a scrambled table of the forward pass's
 * single pool; logits of every row into out [n x V]. */
typedef struct seq_run {
    int32_t table[NB], pos[CAP], rows[CAP], slots[CAP];
} seq_run;

static void seq_init(seq_run *s)
{
    for (int32_t b = 0; b < NB; b++) s->table[b] = (b * 7 + 3) % NB;
    for (int32_t i = 0; i < CAP; i++) {
        s->pos[i] = s->rows[i] = i;
        s->slots[i] = s->table[i / BS] * BS + i % BS;
    }
}

static void run_rows(pagoda_forward *fw, seq_run *s, const int32_t *tok, int32_t at, int32_t n,
                     int32_t n_logits, float *out, uint64_t seq_no)
{
    char err[1024] = "";
    pagoda_seq_view sv = {.q_start = 0, .n_q = n, .ctx_len = at + n, .n_blocks = NB,
                          .block_table = s->table};
    pagoda_batch b = {.seq_no = seq_no, .n_tokens = n, .tokens = tok + at, .positions = s->pos + at,
                      .slots = s->slots + at, .n_seqs = 1, .seqs = &sv};
    const int32_t *rows = n_logits == 1 ? s->rows + (n - 1) : s->rows;
    ck_assert_msg(pagoda_forward_run(fw, &b, rows, n_logits, out, err, sizeof err) == 0, "%s", err);
}

static pagoda_model *open_file(const char *rel)
{
    char err[512] = "";
    pagoda_model *m = pagoda_model_open(tu_src(rel), err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    return m;
}

/* The local and global layers' RoPE tables are one (gpt-oss): the global
 * one into a [rope_dims / 2 <= 8]. */
static void one_rope(const pagoda_model *m, float *a)
{
    float b[8];
    ck_assert_int_le(m->hp.rope_dims / 2, 8);
    pagoda_model_rope_inv_freq(m, a);
    pagoda_model_rope_inv_freq_swa(m, b);
    for (int i = 0; i < m->hp.rope_dims / 2; i++) ck_assert_float_eq(a[i], b[i]);
}

static void check_against(const char *gguf_rel, const char *ref_rel)
{
    json_t *ref = load_ref_file(ref_rel);
    pagoda_config *cfg;
    pagoda_runtime *rt = open_model(&cfg, gguf_rel, "window");
    const int32_t V = rt->model->hp.n_vocab;
    float *logits = malloc(sizeof(float) * CAP * (size_t)V);
    seq_run s;
    seq_init(&s);
    json_t *prompts = json_object_get(ref, "prompts");
    ck_assert_int_eq((int)json_array_size(prompts), 4);
    double worst = 0, spread = 0;
    int32_t longest = 0;
    for (size_t p = 0; p < json_array_size(prompts); p++) {
        json_t *pr = json_array_get(prompts, p);
        int32_t tok[CAP], n = prompt_ids(pr, tok, CAP);
        longest = n > longest ? n : longest;
        json_t *greedy = json_object_get(pr, "greedy_ids");
        int32_t n_gen = (int32_t)json_array_size(greedy);
        ck_assert_int_le(n + n_gen, CAP);
        pagoda_forward fw;
        char err[1024] = "";
        ck_assert_msg(pagoda_forward_init(&fw, rt->model, &rt->backend, CAP, CAP, NB, BS,
                                          PAGODA_DTYPE_F32, err, sizeof err) == 0, "%s", err);
        run_rows(&fw, &s, tok, 0, n, n, logits, 1);
        ref_check_prefill(pr, logits, n, V, TOL, gguf_rel, p, &worst);
        const float *lr = logits + (size_t)(n - 1) * V;
        spread = fmax(spread, json_number_value(json_object_get(pr, "last_logit_spread")));
        int32_t next = argmax(lr, V), agree = 0, need = must_agree(pr);
        for (int32_t g = 0; g < n_gen; g++) {
            int32_t want = (int32_t)json_integer_value(json_array_get(greedy, (size_t)g));
            if (next != want) {
                ck_assert_msg(g >= need, "prompt %zu: greedy step %d is %d, transformers %d (no "
                              "near-tie before)", p, g, next, want);
                break;
            }
            agree++;
            if (g == n_gen - 1) break;
            tok[n + g] = next;
            run_rows(&fw, &s, tok, n + g, 1, 1, logits, (uint64_t)g + 2);
            next = argmax(logits, V);
        }
        printf("prompt %zu (%d tokens): greedy agrees for %d of %d steps (%d required)\n", p, n,
               agree, n_gen, need);
        pagoda_forward_free(&fw);
    }
    ck_assert_int_gt(longest, 128);
    printf("%s: max |logit - transformers| %.3g (logit spread up to %.3g; allowed %g)\n", gguf_rel,
           worst, spread, TOL);
    free(logits);
    json_decref(ref);
    et_close(rt, cfg);
}

START_TEST(against_transformers) { check_against(FIXTURE, REF); }
END_TEST

START_TEST(against_transformers_yarn)
{
    /* what the YaRN fixture's file says, and what pagoda makes of it */
    pagoda_model *m = open_file(FIXTURE_YARN);
    const pagoda_hparams *hp = &m->hp;
    ck_assert_int_eq(hp->rope_scaling, PAGODA_ROPE_SCALING_YARN);
    ck_assert_float_eq(hp->rope_factor, 8.0f);
    ck_assert_int_eq(hp->rope_orig_ctx, 64);
    ck_assert(!hp->rope_yarn_truncate);   /* gpt-oss's truncate false: no key, the row says it */
    ck_assert_float_eq_tol(hp->rope_mscale, 0.1f * logf(8.0f) + 1.0f, 1e-6f);
    float a[8];
    one_rope(m, a);
    ck_assert_float_lt(a[7], powf(150000.0f, -14.0f / 16.0f) / 4.0f);  /* interpolated */
    pagoda_model_free(m);
    check_against(FIXTURE_YARN, REF_YARN);
}
END_TEST

/* Greedy through the engine from token ids, max_tokens n. */
static void engine_greedy(pagoda_runtime *rt, const int32_t *tok, int32_t n, int32_t max_tokens,
                          et_result *r)
{
    et_result_init(r);
    pagoda_request req;
    pagoda_engine_request_defaults(rt->engine, &req);
    req.prompt = NULL;
    req.prompt_tokens = tok;
    req.n_prompt_tokens = n;
    req.max_tokens = max_tokens;
    req.temperature = 0.0f;
    req.ignore_eos = true;
    uint64_t id = 0;
    char err[512] = "";
    ck_assert_msg(pagoda_engine_submit(rt->engine, &req, et_cb, r, &id, err, sizeof err) == 0, "%s", err);
}

START_TEST(window_pool)
{
    json_t *ref = load_ref();
    json_t *prompts = json_object_get(ref, "prompts");
    const size_t np = json_array_size(prompts);
    static et_result res[2][4];
    static const char *const modes[2] = {"window", "full"};
    for (int m = 0; m < 2; m++) {
        pagoda_config *cfg;
        pagoda_runtime *rt = open_fixture(&cfg, modes[m]);
        pagoda_engine_set_check_invariants(rt->engine, true);
        int32_t tok[4][CAP], n[4];
        /* all four queued before the engine starts, so they arrive in its
         * first step (264 prompt tokens: one step's budget of 512) and
         * every step batches them together, whatever the timing */
        for (size_t p = 0; p < np; p++) {
            n[p] = prompt_ids(json_array_get(prompts, p), tok[p], CAP);
            engine_greedy(rt, tok[p], n[p], 32, &res[m][p]);
        }
        ck_assert_int_eq(pagoda_engine_start(rt->engine), 0);
        pagoda_engine_wait_idle(rt->engine);
        /* stopped, so that steps_total is the last step's number (a running
         * engine publishes it at the top of its next loop) */
        pagoda_engine_stop(rt->engine);
        pagoda_engine_stats st;
        pagoda_engine_get_stats(rt->engine, &st);
        /* together indeed: one prefill step (each prompt's first token)
         * and 31 decode steps of all four */
        ck_assert_int_eq(st.steps_total, 32);
        for (size_t p = 0; p < np; p++) {
            json_t *pr = json_array_get(prompts, p), *greedy = json_object_get(pr, "greedy_ids");
            ck_assert_msg(res[m][p].error[0] == 0 && res[m][p].n_final == 1, "%s", res[m][p].error);
            ck_assert_int_eq(res[m][p].n_tokens, 32);
            int32_t agree = 0, need = must_agree(pr);
            while (agree < 32 &&
                   res[m][p].tokens[agree] == (int32_t)json_integer_value(json_array_get(greedy, (size_t)agree)))
                agree++;
            ck_assert_msg(agree >= need, "swa_kv=%s prompt %zu: engine greedy leaves transformers' at "
                          "step %d (first near-tie at %d)", modes[m], p, agree, need);
            printf("engine swa_kv=%s prompt %zu: %d of 32 steps agree with transformers\n", modes[m],
                   p, agree);
        }
        et_close(rt, cfg);
    }
    et_assert_same_tokens(res[0], res[1], (int)np, "swa_kv window vs full");
    json_decref(ref);
}
END_TEST

/* An all-reduce that is never called (init only). */
static int no_reduce(void *user, float *buf, size_t count, char *err, size_t err_len)
{
    (void)user, (void)buf, (void)count;
    snprintf(err, err_len, "not reached");
    return PAGODA_ERR_INTERNAL;
}

/* The long prompt's logits (every row) with backend be. */
static void long_logits(pagoda_runtime *rt, pagoda_backend *be, json_t *pr, float *out, int32_t *n)
{
    int32_t tok[CAP];
    *n = prompt_ids(pr, tok, CAP);
    seq_run s;
    seq_init(&s);
    pagoda_forward fw;
    char err[1024] = "";
    ck_assert_msg(pagoda_forward_init(&fw, rt->model, be, CAP, CAP, NB, BS, PAGODA_DTYPE_F32, err,
                                      sizeof err) == 0, "%s", err);
    run_rows(&fw, &s, tok, 0, *n, *n, out, 1);
    pagoda_forward_free(&fw);
}

START_TEST(fallbacks)
{
    json_t *ref = load_ref();
    json_t *pr = json_array_get(json_object_get(ref, "prompts"), 3);
    pagoda_config *cfg;
    pagoda_runtime *rt = open_fixture(&cfg, "window");
    const int32_t V = rt->model->hp.n_vocab;
    float *a = malloc(sizeof(float) * CAP * (size_t)V), *b = malloc(sizeof(float) * CAP * (size_t)V);
    int32_t n, n2;
    long_logits(rt, &rt->backend, pr, a, &n);
    pagoda_backend be = rt->backend;
    be.ops.swiglu_oai = NULL;
    be.ops.matmul_experts = NULL;
    be.ops.moe_combine = NULL;
    long_logits(rt, &be, pr, b, &n2);
    double d = 0, amax = 0;
    for (size_t i = 0; i < (size_t)n * (size_t)V; i++) {
        d = fmax(d, fabs(a[i] - b[i]));
        amax = fmax(amax, fabs(a[i]));
    }
    printf("fallbacks: max |diff| %.3g over logits up to %.3g\n", d, amax);
    ck_assert_msg(d <= 1e-5 * fmax(1.0, amax), "host swiglu_oai / expert fallbacks differ by %g", d);
    free(a);
    free(b);
    json_decref(ref);
    et_close(rt, cfg);
}
END_TEST

START_TEST(hparams)
{
    pagoda_model *m = open_file(FIXTURE);
    const pagoda_hparams *hp = &m->hp;
    ck_assert_str_eq(hp->arch, "gpt-oss");
    ck_assert_int_eq(hp->n_layers, 3);
    ck_assert_int_eq(hp->swa_window, 16);
    /* layer 0 local, then alternating (HF layer_types) */
    ck_assert(pagoda_hparams_is_swa(hp, 0) && !pagoda_hparams_is_swa(hp, 1) && pagoda_hparams_is_swa(hp, 2));
    ck_assert_int_eq(hp->n_swa_layers, 2);
    ck_assert(hp->swa_rope_global);
    ck_assert(hp->rope_neox);
    ck_assert_int_eq(hp->ffn_act, PAGODA_FFN_SWIGLU_OAI);
    ck_assert_float_eq(hp->swiglu_alpha, 1.702f);
    ck_assert_float_eq(hp->swiglu_limit, 7.0f);
    ck_assert_int_eq(hp->moe_gating, PAGODA_MOE_GATING_SOFTMAX_WEIGHT);
    ck_assert_int_eq(hp->n_experts, 8);
    ck_assert_int_eq(hp->n_experts_used, 4);
    ck_assert_int_eq(hp->ffn_exp, 16);
    ck_assert(hp->qkv_bias && hp->attn_sinks && hp->attn_out_bias && hp->router_bias && hp->exp_bias);
    ck_assert(!hp->tied_output && !hp->post_norms);
    float a[8];
    one_rope(m, a);
    ck_assert_float_eq_tol(a[1], powf(150000.0f, -2.0f / 16.0f), 1e-9f);
    for (int l = 0; l < 3; l++) {
        const pagoda_layer_tensors *L = &m->layers[l];
        ck_assert(L->attn_sinks && L->bo && L->bq && L->ffn_gate_inp_b && L->ffn_gate_exps_b &&
                  L->ffn_up_exps_b && L->ffn_down_exps_b && L->ffn_gate_exps);
        ck_assert_int_eq(L->attn_sinks->ne[0], 4);
        char want[64], got[64];
        snprintf(want, sizeof want, "blk.%d.post_attention_norm.weight", l);
        snprintf(got, sizeof got, "%.*s", (int)L->ffn_norm->name.len, L->ffn_norm->name.ptr);
        ck_assert_str_eq(got, want);   /* the pre-FFN norm */
        ck_assert(!L->w_gate && !L->post_attn_norm);
    }
    pagoda_model_free(m);
}
END_TEST

START_TEST(refusals)
{
    pagoda_config *cfg;
    pagoda_runtime *rt = open_fixture(&cfg, "window");
    pagoda_backend be = rt->backend;
    snprintf(be.info.name, sizeof be.info.name, "old");
    char err[1024] = "";
    ck_assert_int_eq(pagoda_forward_check_backend(&rt->model->hp, &be, err, sizeof err), PAGODA_OK);
    be.info.attn_sinks = false;
    ck_assert_int_eq(pagoda_forward_check_backend(&rt->model->hp, &be, err, sizeof err),
                     PAGODA_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err, "backend old does not honour attention sinks (info.attn_sinks, plugin "
                              "ABI 1.8), which gpt-oss models need"), "%s", err);
    ck_assert(!strchr(err, '\n'));
    pagoda_forward fw;
    ck_assert_int_eq(pagoda_forward_init(&fw, rt->model, &be, 8, 8, 4, 16, PAGODA_DTYPE_F32, err,
                                         sizeof err), PAGODA_ERR_UNSUPPORTED);
    pagoda_forward_free(&fw);
    be = rt->backend;
    be.ops.attention_ext = NULL;
    ck_assert_int_eq(pagoda_forward_check_backend(&rt->model->hp, &be, err, sizeof err),
                     PAGODA_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err, "has no attention_ext op"), "%s", err);
    /* sinks alone (no local layer) still need attention_ext */
    pagoda_hparams hp = rt->model->hp;
    hp.n_swa_layers = 0;
    ck_assert_int_eq(pagoda_forward_check_backend(&hp, &be, err, sizeof err), PAGODA_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err, "for its attention sinks"), "%s", err);
    /* tensor parallelism is no longer refused: each rank's sinks are its
     * heads' share, and only rank 0 adds attn_output.bias (the logits of
     * a split: test_tp's split_gptoss_2 and tests/tp/gptoss_split.sh) */
    pagoda_forward_kv kv = {.n_blocks = 4, .block_size = 16, .dtype = PAGODA_DTYPE_F32};
    const pagoda_hparams *mh = &rt->model->hp;
    for (int r = 0; r < 2; r++) {
        pagoda_forward_tp tp = {.rank = r, .size = 2, .all_reduce = no_reduce};
        ck_assert_msg(pagoda_forward_init_tp(&fw, rt->model, &rt->backend, 8, 8, &kv, &tp, err,
                                             sizeof err) == PAGODA_OK, "rank %d: %s", r, err);
        for (int l = 0; l < mh->n_layers; l++) {
            ck_assert_int_eq(fw.layers[l].sinks.cols, mh->n_heads / 2);
            ck_assert_int_eq(fw.layers[l].has_bo, r == 0);
            ck_assert_int_eq(fw.layers[l].gate_exps_b.rows, mh->n_experts / 2);
        }
        pagoda_forward_free(&fw);
    }
    et_close(rt, cfg);
}
END_TEST

/* The fixture rewritten: tensor `name` dropped (ne0 < 0) or given ne[0] =
 * ne0 (its data cut or zero-padded), key `drop_key` left out. */
static const char *rewrite(const char *out_name, const char *name, int64_t ne0, const char *drop_key)
{
    static char path[600];
    snprintf(path, sizeof path, "%s/%s", g_dir, out_name);
    char err[512] = "";
    gguf_file *g = pagoda_gguf_open(tu_src(FIXTURE), err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    gguf_writer *w = pagoda_gguf_writer_new();
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const gguf_kv *kv = &g->kv[i];
        if (drop_key && kv->key.len == strlen(drop_key) && !memcmp(kv->key.ptr, drop_key, kv->key.len))
            continue;
        ck_assert_int_eq(pagoda_gguf_w_copy(w, kv), 0);
    }
    size_t *bytes = calloc(g->n_tensors, sizeof *bytes);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        bool hit = name && t->name.len == strlen(name) && !memcmp(t->name.ptr, name, t->name.len);
        if (hit && ne0 < 0) continue;
        int64_t ne[4];
        memcpy(ne, t->ne, sizeof ne);
        if (hit) ne[0] = ne0;
        char tn[128];
        snprintf(tn, sizeof tn, "%.*s", (int)t->name.len, t->name.ptr);
        ck_assert_int_eq(pagoda_gguf_w_tensor(w, tn, t->type, t->n_dims, ne), 0);
        size_t n = pagoda_dtype_row_bytes(t->type, ne[0]);
        for (uint32_t d = 1; d < t->n_dims; d++) n *= (size_t)ne[d];
        bytes[i] = n;
    }
    FILE *fp = fopen(path, "wb");
    ck_assert_ptr_nonnull(fp);
    ck_assert_int_eq(pagoda_gguf_w_begin(w, fp), 0);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        if (!bytes[i]) continue;
        const gguf_tensor *t = &g->tensors[i];
        unsigned char *buf = calloc(1, bytes[i]);
        memcpy(buf, t->data, bytes[i] < t->nbytes ? bytes[i] : t->nbytes);
        ck_assert_int_eq(pagoda_gguf_w_data(w, fp, buf, bytes[i]), 0);
        free(buf);
    }
    ck_assert_int_eq(pagoda_gguf_w_finish(w, fp), 0);
    fclose(fp);
    free(bytes);
    pagoda_gguf_writer_free(w);
    pagoda_gguf_close(g);
    return path;
}

START_TEST(bad_input)
{
    /* the rewriter itself keeps a good file good */
    char err[512] = "";
    pagoda_model *m = pagoda_model_open(rewrite("same.gguf", NULL, 0, NULL), err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    ck_assert(m->layers[1].attn_sinks != NULL);
    pagoda_model_free(m);
    mt_expect_open_error(rewrite("sinks3.gguf", "blk.1.attn_sinks.weight", 3, NULL),
                      "tensor blk.1.attn_sinks.weight has shape [3, 0] (1 dims), expected [4, 0]");
    mt_expect_open_error(rewrite("nosinks.gguf", "blk.2.attn_sinks.weight", -1, NULL),
                      "tensor blk.2.attn_sinks.weight is missing (architecture gpt-oss needs it)");
    mt_expect_open_error(rewrite("nobias.gguf", "blk.0.ffn_up_exps.bias", -1, NULL),
                      "tensor blk.0.ffn_up_exps.bias is missing");
    mt_expect_open_error(rewrite("bias15.gguf", "blk.1.ffn_down_exps.bias", 31, NULL),
                      "tensor blk.1.ffn_down_exps.bias has shape [31, 8] (2 dims), expected [32, 8]");
    mt_expect_open_error(rewrite("norouterb.gguf", "blk.0.ffn_gate_inp.bias", -1, NULL),
                      "tensor blk.0.ffn_gate_inp.bias is missing");
    mt_expect_open_error(rewrite("nobo.gguf", "blk.1.attn_output.bias", -1, NULL),
                      "tensor blk.1.attn_output.bias is missing");
    mt_expect_open_error(rewrite("nowin.gguf", NULL, 0, "gpt-oss.attention.sliding_window"),
                      "missing key gpt-oss.attention.sliding_window (gpt-oss's sliding window of "
                      "its local layers)");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("gptoss");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, hparams);
    tcase_add_test(tc, against_transformers);
    tcase_add_test(tc, against_transformers_yarn);
    tcase_add_test(tc, window_pool);
    tcase_add_test(tc, fallbacks);
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, bad_input);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
