/* test_mla_ref.c: pagoda's multi-head latent attention and DeepSeek
 * routing (deepseek2) against a reference of another lineage: tiny random
 * V2-Lite-style and V3-style models (and the V3 one with YaRN RoPE: factor
 * 4 over an original context of 64, so the prompts run past it, and
 * DeepSeek's softmax scale mscale(factor, mscale_all_dim)^2) built from
 * transformers configs and
 * converted by llama.cpp's convert_hf_to_gguf.py (tests/fixtures/mla/,
 * made by make_fixtures.py there, not in CI), with transformers' F32
 * logits (its decompressed MLA: K and V per head) for three token-id
 * prompts.
 *  - against_transformers: each prompt in one prefill with an F32 KV
 *    cache; every position's top-5 logits and the last position's whole
 *    vocabulary within 1e-3 of transformers' (the logit spread is
 *    printed); then 32 greedy steps that must follow transformers' greedy
 *    ids up to the first near-tie (reference top-2 gap < 2e-3).
 *  - decode_equals_prefill: the same prompt fed one token a step (decode:
 *    each step's query reads every earlier latent from the cache) gives
 *    every position's whole vocabulary within 1e-4 of the one-prefill
 *    logits, with the KV in F32; in F16 and Q8_0 the latent cache stays
 *    within 0.05 / 0.5 of the F32 logits (their rounding) and picks the
 *    same top token where F32's top-2 gap exceeds that. The pool is the
 *    latent layout (ABI 1.7: one row a slot); with the backend's latent
 *    bit cleared the core's fallback (the row as K and V) gives the same
 *    logits from twice the bytes.
 *  - bad_input: the load errors the issue lists (kv_lora_rank 0 or wider
 *    than the hidden size, a RoPE part as wide as the query head, missing
 *    latent / query norms, expert groups that do not divide the experts or
 *    cannot hold the top-k), each one line naming the key or tensor, on
 *    gen-model's deepseek2-tiny.
 *  - plan_latent: the memory plan of DeepSeek-V3's shape.
 *  - perplexity_beside_llama: `pagoda perplexity` of the V3-style fixture
 *    within 1% of llama-perplexity's recorded number on the same file. */
#define _GNU_SOURCE
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_testutil.h"
#include "forward.h"
#include "genmodel.h"
#include "gguf_writer.h"
#include "memplan.h"
#include "mla_fixtures.h"
#include "model.h"
#include "perplexity.h"
#include "ref_logits.h"
#include "testutil.h"

#define TOL 1e-3
#define NEAR_TIE 2e-3

enum { BS = 16, NB = 8, CAP = NB * BS };

/* a fixture and the block table, positions, rows and slots of its one sequence */
typedef struct fixture {
    mla_fixture m;
    int32_t table[NB], pos[CAP], rows[CAP], slots[CAP];
} fixture;

static void fixture_open(fixture *fx, const char *name)
{
    mla_fixture_open(&fx->m, name);
    for (int32_t b = 0; b < NB; b++) fx->table[b] = (b * 5 + 3) % NB;   /* scrambled blocks */
    for (int32_t i = 0; i < CAP; i++) {
        fx->pos[i] = fx->rows[i] = i;
        fx->slots[i] = fx->table[i / BS] * BS + i % BS;
    }
}

/* One sequence's step: rows [at, at + n) of tok. */
static void step(pagoda_forward *fw, fixture *fx, const int32_t *tok, int32_t at, int32_t n,
                 float *logits, uint64_t seq_no)
{
    char err[1024] = "";
    pagoda_seq_view sv = {.q_start = 0, .n_q = n, .ctx_len = at + n, .n_blocks = NB,
                          .block_table = fx->table};
    pagoda_batch b = {.seq_no = seq_no, .n_tokens = n, .tokens = tok + at, .positions = fx->pos + at,
                      .slots = fx->slots + at, .n_seqs = 1, .seqs = &sv};
    ck_assert_msg(pagoda_forward_run(fw, &b, fx->rows, n, logits, err, sizeof err) == 0, "%s", err);
}

static void init_fw(pagoda_forward *fw, fixture *fx, int32_t kv_dtype)
{
    char err[1024] = "";
    ck_assert_msg(pagoda_forward_init(fw, fx->m.rt->model, &fx->m.rt->backend, CAP, CAP, NB, BS, kv_dtype,
                                      err, sizeof err) == 0, "%s", err);
}

typedef struct greedy_ctx {
    pagoda_forward *fw;
    fixture *fx;
    int32_t *tok, n;
    float *logits;
} greedy_ctx;

static void greedy_step(void *user, int32_t g, int32_t token)
{
    greedy_ctx *gc = user;
    gc->tok[gc->n + g] = token;
    step(gc->fw, gc->fx, gc->tok, gc->n + g, 1, gc->logits, (uint64_t)g + 2);
}

static void check_reference(const char *name)
{
    fixture fx;
    fixture_open(&fx, name);
    const int32_t V = fx.m.rt->model->hp.n_vocab;
    float *logits = malloc(sizeof(float) * CAP * (size_t)V);
    json_t *prompts = json_object_get(fx.m.ref, "prompts");
    double worst = 0, spread = 0;
    for (size_t p = 0; p < json_array_size(prompts); p++) {
        json_t *pr = json_array_get(prompts, p);
        int32_t tok[CAP];
        int32_t n = mla_prompt_ids(pr, CAP, tok);
        ck_assert_int_le(n + (int32_t)json_array_size(json_object_get(pr, "greedy_ids")), CAP);
        pagoda_forward fw;
        init_fw(&fw, &fx, PAGODA_DTYPE_F32);
        step(&fw, &fx, tok, 0, n, logits, 1);
        ref_check_prefill(pr, logits, n, V, TOL, name, p, &worst);
        spread = fmax(spread, json_number_value(json_object_get(pr, "last_logit_spread")));
        /* the prompt's last row first, then each step's one row over it */
        float *last = malloc(sizeof(float) * (size_t)V);
        memcpy(last, logits + (size_t)(n - 1) * V, sizeof(float) * (size_t)V);
        greedy_ctx gc = {.fw = &fw, .fx = &fx, .tok = tok, .n = n, .logits = logits};
        ref_check_greedy(pr, last, n, V, NEAR_TIE, name, p, greedy_step, &gc, logits);
        free(last);
        pagoda_forward_free(&fw);
    }
    printf("%s: max |logit - transformers| %.3g (logit spread up to %.3g; allowed %g)\n", name, worst,
           spread, TOL);
    free(logits);
    mla_fixture_close(&fx.m);
}

START_TEST(against_transformers)
{
    mla_each_fixture(check_reference);
}
END_TEST

/* A 5-token prefill, then one token a step: every position's logits into
 * `into` [n x V] (one: a row of scratch). */
static void decode_each(pagoda_forward *fw, fixture *fx, const int32_t *tok, int32_t n, float *into,
                        float *one)
{
    const size_t V = (size_t)fx->m.rt->model->hp.n_vocab;
    step(fw, fx, tok, 0, 5, into, 1);
    for (int32_t i = 5; i < n; i++) {
        step(fw, fx, tok, i, 1, one, (uint64_t)i);
        memcpy(into + (size_t)i * V, one, sizeof(float) * V);
    }
}

/* Prefill vs decode, and the F16 / Q8_0 latent caches against F32. */
static void check_decode(const char *name)
{
    fixture fx;
    fixture_open(&fx, name);
    const int32_t V = fx.m.rt->model->hp.n_vocab;
    float *pre = malloc(sizeof(float) * CAP * (size_t)V), *dec = malloc(sizeof(float) * CAP * (size_t)V);
    float *one = malloc(sizeof(float) * (size_t)V);
    json_t *pr = json_array_get(json_object_get(fx.m.ref, "prompts"), 2);   /* 40 random ids */
    int32_t tok[CAP];
    int32_t n = mla_prompt_ids(pr, CAP, tok);
    static const int32_t types[] = {PAGODA_DTYPE_F32, PAGODA_DTYPE_F16, PAGODA_DTYPE_Q8_0};
    static const double tol[] = {1e-4, 0.05, 0.5};
    for (int ti = 0; ti < 3; ti++) {
        pagoda_forward fw;
        init_fw(&fw, &fx, types[ti]);
        float *into = ti == 0 ? pre : dec;
        if (ti == 0) {
            step(&fw, &fx, tok, 0, n, pre, 1);
            pagoda_forward_free(&fw);
            init_fw(&fw, &fx, types[ti]);
            into = dec;
        }
        decode_each(&fw, &fx, tok, n, into, one);
        /* the latent layout: one row a slot, no V plane */
        const pagoda_hparams *hp = &fx.m.rt->model->hp;
        ck_assert_int_eq(fw.kv_layout.kind, PAGODA_KV_LATENT);
        ck_assert_int_eq(fw.kv_layout.n_kv_heads, 1);
        ck_assert_int_eq(fw.kv_layout.head_dim, hp->kv_lora_rank + hp->rope_dims);
        ck_assert_uint_eq(fw.kv_bytes, (size_t)hp->n_layers * NB * BS *
                                           pagoda_dtype_row_bytes(types[ti], fw.kv_layout.head_dim));
        double worst = 0;
        int32_t same_top = 0, clear = 0;
        for (int32_t r = 0; r < n; r++) {
            const float *a = pre + (size_t)r * V, *d = into + (size_t)r * V;
            for (int32_t v = 0; v < V; v++) worst = fmax(worst, fabs(a[v] - d[v]));
            int32_t t = ref_argmax(a, V);
            float second = -INFINITY;
            for (int32_t v = 0; v < V; v++)
                if (v != t && a[v] > second) second = a[v];
            if (a[t] - second > 2 * tol[ti]) {
                clear++;
                same_top += ref_argmax(d, V) == t;
            }
        }
        printf("%s: KV %s, decode vs prefill: max |diff| %.3g over %d positions x %d tokens "
               "(allowed %g); top token the same at %d of %d clear positions\n", name,
               pagoda_dtype_name(types[ti]), worst, n, V, tol[ti], same_top, clear);
        ck_assert_msg(worst <= tol[ti], "%s: KV %s decode differs from prefill by %g", name,
                      pagoda_dtype_name(types[ti]), worst);
        ck_assert_int_eq(same_top, clear);
        pagoda_forward_free(&fw);
    }
    /* a backend without the latent kind (kv_kinds 0, as before ABI 1.7)
     * gets the row as both K and V of a separate layout: twice the bytes,
     * the same logits */
    pagoda_forward fw;
    uint32_t kinds = fx.m.rt->backend.info.kv_kinds;
    fx.m.rt->backend.info.kv_kinds = 0;
    init_fw(&fw, &fx, PAGODA_DTYPE_F32);
    fx.m.rt->backend.info.kv_kinds = kinds;
    ck_assert_int_eq(fw.kv_layout.kind, PAGODA_KV_SEPARATE);
    ck_assert_uint_eq(fw.kv_bytes, 2 * (size_t)fx.m.rt->model->hp.n_layers * NB * BS *
                                       pagoda_dtype_row_bytes(PAGODA_DTYPE_F32, fw.kv_layout.head_dim));
    decode_each(&fw, &fx, tok, n, dec, one);
    double worst = 0;
    for (size_t i = 0; i < (size_t)n * V; i++) worst = fmax(worst, fabs(pre[i] - dec[i]));
    printf("%s: K-and-V fallback layout vs prefill: max |diff| %.3g\n", name, worst);
    ck_assert_msg(worst <= 1e-4, "%s: the K-and-V fallback differs by %g", name, worst);
    pagoda_forward_free(&fw);
    free(pre);
    free(dec);
    free(one);
    mla_fixture_close(&fx.m);
}

START_TEST(decode_equals_prefill)
{
    mla_each_fixture(check_decode);
}
END_TEST

/* ---- bad input: each refused at load with one line naming the key */

static void gen_tiny(const char *path)
{
    char *gen[] = {"gen-model", "--shape", "deepseek2-tiny", "--type", "F32", "--out", (char *)path, NULL};
    ck_assert_int_eq(pagoda_cmd_gen_model(7, gen), 0);
}

static char *slurp(const char *path, long *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    char *buf = malloc((size_t)*n);
    rewind(f);
    ck_assert_int_eq(fread(buf, 1, (size_t)*n, f), (size_t)*n);
    fclose(f);
    return buf;
}

static void spit(const char *path, const char *buf, long n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fwrite(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
}

/* Set the u32 metadata value of `key` (its exact length-prefixed name). */
static void patch_u32(const char *path, const char *key, uint32_t val)
{
    long n;
    char *buf = slurp(path, &n);
    char pat[128];
    uint64_t len = strlen(key);
    memcpy(pat, &len, 8);
    memcpy(pat + 8, key, len);
    char *hit = memmem(buf, (size_t)n, pat, 8 + len);
    ck_assert_msg(hit, "key %s not in %s", key, path);
    uint32_t type;
    memcpy(&type, hit + 8 + len, 4);
    ck_assert_int_eq(type, 4);   /* GGUF UINT32 */
    memcpy(hit + 8 + len + 4, &val, 4);
    spit(path, buf, n);
    free(buf);
}

/* Rename the first `from` to `to` (same length). */
static void patch_name(const char *path, const char *from, const char *to)
{
    long n;
    char *buf = slurp(path, &n);
    char *hit = memmem(buf, (size_t)n, from, strlen(from));
    ck_assert_msg(hit, "%s not in %s", from, path);
    ck_assert_uint_eq(strlen(from), strlen(to));
    memcpy(hit, to, strlen(to));
    spit(path, buf, n);
    free(buf);
}

static void expect_refused(const char *path, const char *want)
{
    char err[512] = "";
    pagoda_model *m = pagoda_model_open(path, err, sizeof err);
    ck_assert_msg(m == NULL, "%s opened, expected: %s", path, want);
    ck_assert_msg(strstr(err, want), "error '%s' lacks '%s'", err, want);
    ck_assert_msg(!strchr(err, '\n'), "error is not one line: %s", err);
    printf("refused: %s\n", err);
}

START_TEST(bad_input)
{
    char dir[] = "/tmp/pagoda-mla-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/bad.gguf", dir);
    /* the shape itself loads */
    gen_tiny(path);
    char err[512] = "";
    pagoda_model *m = pagoda_model_open(path, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    ck_assert(m->hp.mla);
    ck_assert_int_eq(m->hp.kv_lora_rank, 64);
    ck_assert_int_eq(m->hp.n_expert_groups, 2);
    pagoda_model_free(m);

    patch_u32(path, "deepseek2.attention.kv_lora_rank", 0);
    expect_refused(path, "key deepseek2.attention.kv_lora_rank = 0 must be 1..256");
    gen_tiny(path);
    patch_u32(path, "deepseek2.attention.kv_lora_rank", 300);
    expect_refused(path, "key deepseek2.attention.kv_lora_rank = 300 must be 1..256");
    gen_tiny(path);
    patch_u32(path, "deepseek2.rope.dimension_count", 64);   /* = nope + rope: no no-RoPE part */
    expect_refused(path, "key deepseek2.rope.dimension_count = 64 must be below "
                         "deepseek2.attention.key_length_mla = 64");
    gen_tiny(path);
    patch_u32(path, "deepseek2.attention.key_length", 128);
    expect_refused(path, "key deepseek2.attention.key_length = 128, expected kv_lora_rank + "
                         "rope.dimension_count = 96");
    gen_tiny(path);
    patch_name(path, "blk.1.attn_kv_a_norm.weight", "blk.1.attn_kv_a_norX.weight");
    expect_refused(path, "tensor blk.1.attn_kv_a_norm.weight is missing");
    gen_tiny(path);
    patch_name(path, "blk.2.attn_q_a_norm.weight", "blk.2.attn_q_a_norX.weight");
    expect_refused(path, "tensor blk.2.attn_q_a_norm.weight is missing");
    gen_tiny(path);
    patch_u32(path, "deepseek2.expert_group_count", 3);
    expect_refused(path, "key deepseek2.expert_group_count = 3 does not divide "
                         "deepseek2.expert_count = 8");
    gen_tiny(path);
    patch_u32(path, "deepseek2.expert_group_used_count", 3);
    expect_refused(path, "key deepseek2.expert_group_used_count = 3 must be 1..2");
    gen_tiny(path);
    patch_u32(path, "deepseek2.expert_used_count", 5);   /* 1 group of 4 cannot give 5 */
    expect_refused(path, "hold fewer than deepseek2.expert_used_count = 5");
    gen_tiny(path);
    patch_name(path, "deepseek2.attention.kv_lora_rank", "deepseek2.attention.kv_lora_ranX");
    expect_refused(path, "missing key deepseek2.attention.kv_lora_rank");
    unlink(path);
    rmdir(dir);
}
END_TEST

/* The memory plan of DeepSeek-V3's shape (a header-only file): KV bytes a
 * token = layers x (kv_lora_rank + qk_rope) x bytes, beside plain MHA's;
 * twice that where the backend keeps the row as K and V; and the
 * activations are what the forward pass carves. */
START_TEST(plan_latent)
{
    char dir[] = "/tmp/pagoda-mla-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[128], err[512] = "";
    snprintf(path, sizeof path, "%s/v3.gguf", dir);
    char *gen[] = {"gen-model", "--shape", "deepseek-v3", "--type", "Q4_K", "--out", path,
                   "--header-only", NULL};
    ck_assert_int_eq(pagoda_cmd_gen_model(8, gen), 0);
    gguf_file *f = pagoda_gguf_open(path, err, sizeof err);
    ck_assert_msg(f != NULL, "%s", err);
    pagoda_memplan_opts o;
    pagoda_memplan_opts_default(&o);
    o.kv_dtype = PAGODA_DTYPE_F16;
    o.memory_budget = 1ull << 50;   /* the pool: whatever is left of it */
    o.max_seq_len = 32768;
    pagoda_memplan p;
    ck_assert_msg(pagoda_memplan_compute(f, &o, &p, err, sizeof err) == 0, "%s", err);
    ck_assert(p.mla);
    ck_assert_uint_eq(p.kv_bytes_per_token, 61ull * (512 + 64) * 2);
    ck_assert_uint_eq(p.mha_bytes_per_token, 61ull * 128 * (192 + 128) * 2);
    /* one 32K sequence: llama.cpp's 2,196 MiB for V3's F16 latent cache */
    ck_assert_uint_eq(p.kv_bytes_per_seq, 32768ull * 61 * 576 * 2);
    printf("deepseek-v3 plan: %llu KV bytes a token (MHA %llu, %.1fx); 32K tokens %.1f MiB\n",
           (unsigned long long)p.kv_bytes_per_token, (unsigned long long)p.mha_bytes_per_token,
           (double)p.mha_bytes_per_token / (double)p.kv_bytes_per_token,
           (double)p.kv_bytes_per_seq / 1048576.0);
    pagoda_hparams hp;
    ck_assert_msg(pagoda_hparams_read(f, &hp, err, sizeof err) == 0, "%s", err);
    hp.n_vocab = (int32_t)p.vocab;
    ck_assert_uint_eq(p.act_bytes, pagoda_forward_act_bytes(&hp, (int32_t)p.max_batched_tokens,
                                                            (int32_t)p.max_num_seqs));
    uint64_t tokens = p.kv_tokens;
    /* the K-and-V fallback: twice the bytes, half the tokens in one budget */
    o.kv_no_latent = true;
    ck_assert_msg(pagoda_memplan_compute(f, &o, &p, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(p.kv_bytes_per_token, 2ull * 61 * 576 * 2);
    ck_assert_uint_le(p.kv_tokens, tokens / 2 + 16);
    /* tensor parallelism: each rank holds the whole latent row a token
     * (replicated, not split with the heads), and a share of the weights */
    o.kv_no_latent = false;
    uint64_t whole = p.weight_bytes_model;
    o.tensor_parallel = 2;
    ck_assert_msg(pagoda_memplan_compute(f, &o, &p, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(p.kv_bytes_per_token, 61ull * (512 + 64) * 2);
    ck_assert_uint_lt(p.weight_bytes, whole * 6 / 10);
    ck_assert_uint_gt(p.weight_bytes, whole / 2);
    /* 128 heads do not split 3 ways: refused, naming them */
    o.tensor_parallel = 3;
    ck_assert_int_ne(pagoda_memplan_compute(f, &o, &p, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "128 attention heads must divide by 3"), "%s", err);
    pagoda_gguf_close(f);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* pagoda perplexity on the V3-style fixture against llama-perplexity's
 * number on the same file and text (tests/fixtures/mla/README.md:
 * llama.cpp's own tokenizer and forward pass; -c 128 -b 128, 11 chunks). */
START_TEST(perplexity_beside_llama)
{
    const double llama_ppl = 674965633.0134;   /* llama-perplexity, F32 */
    const char *model = tu_src("tests/fixtures/mla/deepseek3-tiny.f32.gguf");
    if (access(model, R_OK) != 0) {
        printf("no fixture %s: skipped\n", model);
        return;
    }
    char text[1024];
    snprintf(text, sizeof text, "%s", tu_src("tests/fixtures/moe/ppl.txt"));
    const char *sets[] = {"engine.kv_dtype=f32", "backend.cpu.threads=2"};
    pagoda_ppl_opts o = {.model = model, .sets = sets, .n_sets = 2, .file = text, .ctx = 128,
                         .parallel = 2, .progress = 0};
    pagoda_ppl_result res;
    char err[1024] = "";
    ck_assert_msg(pagoda_perplexity_run(&o, &res, err, sizeof err) == 0, "%s", err);
    double rel = fabs(res.ppl - llama_ppl) / llama_ppl;
    printf("deepseek3-tiny F32: pagoda perplexity %.4f over %d chunks, llama-perplexity %.4f: "
           "%.2g apart (allowed 1%%)\n", res.ppl, res.n_chunks, llama_ppl, rel);
    ck_assert_int_eq(res.n_chunks, 11);
    ck_assert_msg(rel < 0.01, "perplexity %.4f vs llama.cpp's %.4f", res.ppl, llama_ppl);
    pagoda_ppl_result_free(&res);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("mla_ref");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, against_transformers);
    tcase_add_test(tc, decode_equals_prefill);
    tcase_add_test(tc, bad_input);
    tcase_add_test(tc, plan_latent);
    tcase_add_test(tc, perplexity_beside_llama);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
