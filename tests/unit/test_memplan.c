/* test_memplan.c: the memory plan from a GGUF header: the bundled model's
 * KV bytes per token and weight bytes, the documented activation and
 * workspace formulas, the KV pool arithmetic from a budget, a budget too
 * small to fit, sequence lengths beyond max_seq_len, JSON, CLI; a Q4_K
 * model's weight bytes and type name; gemma3's window pool (swa_kv) and
 * the 8-bit KV cache (kv_dtype = q8_0), apart and together, against what
 * a runtime allocates; mixture-of-experts models (Qwen3-30B-A3B's and
 * Qwen1.5-MoE's real shapes as sparse headers, the tiny families): total
 * and active parameters, the bytes a decoded token reads, the experts by
 * type, each rank's share, and bad expert keys; the backend's copies
 * beside the weights (ABI 1.15 weight_extra_bytes), whole and a rank's,
 * and the gauge of what it holds after a request. */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "genmodel.h"
#include "gguf.h"
#include "gguf_writer.h"
#include "forward.h"
#include "memplan.h"
#include "model.h"
#include "engine_testutil.h"
#include "runtime.h"
#include "testutil.h"

static gguf_file *open_stories(void)
{
    char err[512];
    gguf_file *f = pagoda_gguf_open(tu_src("models/stories260K.gguf"), err, sizeof err);
    ck_assert_msg(f, "%s", err);
    return f;
}

static char *plan_text(const pagoda_memplan *p)
{
    char *txt = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&txt, &len);
    pagoda_memplan_print(p, mf);
    fclose(mf);
    return txt;
}

START_TEST(stories_plan)
{
    gguf_file *f = open_stories();
    pagoda_memplan_opts o;
    pagoda_memplan_opts_default(&o);
    o.memory_budget = 1ull << 30;
    pagoda_memplan p;
    char err[256];
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p, err, sizeof err), 0);
    ck_assert_str_eq(p.arch, "llama");
    ck_assert_int_eq(p.n_layers, 5);
    ck_assert_int_eq(p.n_kv_heads, 4);
    ck_assert_int_eq(p.head_dim, 8);  /* dim 64 / 8 heads */
    /* 2 x 5 layers x 4 kv heads x 8 head_dim x 2 bytes (f16). */
    ck_assert_uint_eq(p.kv_bytes_per_token, 2 * 5 * 4 * 8 * 2);
    ck_assert_uint_eq(p.kv_bytes_per_block, 640 * 16);
    uint64_t sum = 0, params = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        sum += f->tensors[i].nbytes;
        params += (uint64_t)(f->tensors[i].ne[0] * f->tensors[i].ne[1] * f->tensors[i].ne[2] * f->tensors[i].ne[3]);
    }
    ck_assert_uint_eq(p.weight_bytes, sum);
    ck_assert_uint_eq(p.weight_bytes_by_type[PAGODA_DTYPE_F32], sum);
    ck_assert_uint_eq(p.n_params, params);
    ck_assert_uint_eq(p.weight_bytes, params * 4);
    /* Activations: 3*64 + 2*64 + 2*32 + 2*172 = 728 floats a token, 512
     * tokens, plus 16 sampled rows of dim + vocab, plus alignment slack:
     * exactly what forward.c carves. */
    ck_assert_uint_eq(p.act_floats_per_token, 728);
    ck_assert_uint_eq(p.logits_bytes, 16 * (512 + 64) * 4);
    ck_assert_uint_eq(p.act_bytes, 512ull * 728 * 4 + 16 * (512 + 64) * 4 + 11 * 64);
    pagoda_hparams hp = {.dim = p.dim, .n_heads = p.n_heads, .n_kv_heads = p.n_kv_heads,
                         .head_dim = p.head_dim, .ffn = p.ffn, .n_vocab = p.vocab};
    ck_assert_uint_eq(p.act_bytes, pagoda_forward_act_bytes(&hp, p.max_batched_tokens, p.max_num_seqs));
    /* Workspace: (512 + 8) x max(64, 172) x 4 bytes + 16 seqs x 8 heads x 512 x 4. */
    ck_assert_uint_eq(p.workspace_bytes, 520ull * 172 * 4 + 16ull * 8 * 512 * 4);
    ck_assert_uint_eq(p.overhead_bytes, 64ull << 20);
    ck_assert_uint_eq(p.fixed_bytes, p.weight_bytes + p.act_bytes + p.workspace_bytes + p.overhead_bytes);
    /* The pool: whole blocks of what is left. */
    uint64_t left = (1ull << 30) - p.fixed_bytes;
    ck_assert_uint_eq(p.kv_blocks, left / (640 * 16));
    ck_assert_uint_eq(p.kv_tokens, p.kv_blocks * 16);
    ck_assert(p.fits);
    ck_assert_str_eq(p.reason, "");
    /* Context 512: only the 512-token row is servable. */
    ck_assert_int_eq(p.max_seq_len, 512);
    ck_assert_int_eq(p.fit[0].len, 512);
    ck_assert(!p.fit[0].exceeds);
    ck_assert_uint_eq(p.fit[0].seqs, p.kv_blocks / 32);
    for (int i = 1; i < 4; i++) {
        ck_assert(p.fit[i].exceeds);
        ck_assert_uint_eq(p.fit[i].seqs, 0);
    }
    /* F32 KV doubles the per-token bytes. */
    o.kv_dtype = PAGODA_DTYPE_F32;
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p, err, sizeof err), 0);
    ck_assert_uint_eq(p.kv_bytes_per_token, 1280);
    pagoda_gguf_close(f);
}
END_TEST

/* A backend's weight_extra_bytes (ABI 1.15) as the plan's weights walk
 * asks it: N x K + N bytes for a weight of `dtype` (a per-row term, so a
 * row split and a column split of the same tensor give different sums),
 * 0 for another type; it counts the calls, those of the output head's
 * shape (N = vocab), and fails when asked to. */
typedef struct fake_extra {
    int dtype, fail;
    int64_t vocab;
    int calls, head_calls;
} fake_extra;

static int fake_extra_bytes(void *ctx, int dtype, int64_t N, int64_t K, uint64_t *out)
{
    fake_extra *x = ctx;
    x->calls++;
    x->head_calls += N == x->vocab;
    if (x->fail) return PAGODA_ERR_UNSUPPORTED;
    *out = dtype == x->dtype ? (uint64_t)N * (uint64_t)K + (uint64_t)N : 0;
    return PAGODA_OK;
}

/* The backend's copies beside the weights (ABI 1.15 weight_extra_bytes,
 * asked in the weights walk) go into the fixed total, the printed table
 * and the JSON; every 2-D tensor is asked, the token embedding only where
 * it is also the head; a refusal fails the plan naming the tensor. */
START_TEST(repacked_counted)
{
    gguf_file *f = open_stories();
    pagoda_memplan_opts o;
    pagoda_memplan_opts_default(&o);
    o.memory_budget = 1ull << 30;
    pagoda_memplan p0, p;
    char err[256];
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p0, err, sizeof err), 0);
    ck_assert_uint_eq(p0.repacked_bytes, 0);
    fake_extra fx = {.dtype = PAGODA_DTYPE_F32, .vocab = p0.vocab};
    o.weight_extra = fake_extra_bytes;
    o.weight_extra_ctx = &fx;
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p, err, sizeof err), 0);
    /* what the fake says for each tensor the rule asks about */
    bool has_head = pagoda_gguf_tensor(f, "output.weight") != NULL;
    uint64_t want = 0, values = 0;
    int asked = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        bool emb = t->name.len == 17 && !memcmp(t->name.ptr, "token_embd.weight", 17);
        if (t->n_dims != 2 || (has_head && emb)) continue;
        asked++;
        if (t->type != PAGODA_DTYPE_F32) continue;
        want += (uint64_t)t->ne[1] * (uint64_t)t->ne[0] + (uint64_t)t->ne[1];
        values += (uint64_t)t->ne[1] * (uint64_t)t->ne[0];
    }
    ck_assert_int_gt(asked, 4);
    ck_assert_int_eq(fx.calls, asked);
    ck_assert_int_eq(fx.head_calls, 1);   /* the head, or the tied embedding, once */
    ck_assert_uint_gt(want, 0);
    ck_assert_uint_eq(p.repacked_bytes, want);
    ck_assert_uint_eq(p.repacked_weight_values, values);
    ck_assert_uint_eq(p.fixed_bytes, p0.fixed_bytes + want);
    ck_assert_uint_eq(p.kv_pool_bytes <= p0.kv_pool_bytes, 1);
    char *js = pagoda_memplan_json(&p);
    ck_assert_ptr_nonnull(js);
    json_t *root = json_loads(js, 0, NULL);
    ck_assert_ptr_nonnull(root);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(root, "bytes"), "repacked")),
                     (json_int_t)want);
    json_decref(root);
    free(js);
    char *txt = plan_text(&p);
    char line[64];
    snprintf(line, sizeof line, "%.2f bytes a weight", (double)want / (double)values);
    ck_assert_msg(strstr(txt, "repacked weights (backend)"), "%s", txt);
    ck_assert_msg(strstr(txt, line), "wanted '%s' in %s", line, txt);
    /* in the core's words: when copies are made is the backend's to say */
    ck_assert_msg(strstr(txt, "upper bound; the backend's start-up line says when copies are made"), "%s", txt);
    ck_assert_msg(!strstr(txt, "PAGODA_CPU"), "%s", txt);
    free(txt);
    /* a type the backend keeps nothing beside: asked, 0 */
    fx = (fake_extra){.dtype = PAGODA_DTYPE_Q8_0, .vocab = p0.vocab};
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p, err, sizeof err), 0);
    ck_assert_int_eq(fx.calls, asked);
    ck_assert_uint_eq(p.repacked_bytes, 0);
    ck_assert_uint_eq(p.fixed_bytes, p0.fixed_bytes);
    txt = plan_text(&p);
    ck_assert_msg(!strstr(txt, "repacked weights"), "%s", txt);
    free(txt);
    /* the backend refuses: the plan fails, naming the tensor and the status */
    fx = (fake_extra){.dtype = PAGODA_DTYPE_F32, .vocab = p0.vocab, .fail = 1};
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p, err, sizeof err), PAGODA_ERR_UNSUPPORTED);
    ck_assert_int_eq(fx.calls, 1);
    ck_assert_msg(strstr(err, "weight_extra_bytes failed for tensor ") && strstr(err, ".weight (F32, "),
                  "%s", err);
    pagoda_gguf_close(f);
}
END_TEST

/* The gauge of what the backend holds beside the weights now (ABI 1.15
 * weight_extra_held, pagoda_memory_repacked_held_bytes) after a prompt of
 * >= 16 tokens on a Q8_0 model: where this host's level makes copies,
 * > 0 and at most the planned figure (the output head's copy waits for 16
 * rows of logits, so less here); where it makes none, 0 and 0 planned.
 * _i 1 and 2: PAGODA_CPU_ISA=scalar and PAGODA_CPU_REPACK_MIN_T=0, each in
 * its own fork (the backend reads them once a load): 0 and 0 planned. */
START_TEST(repacked_held_gauge)
{
    static const char *const envs[][2] = {{NULL, NULL}, {"PAGODA_CPU_ISA", "scalar"},
                                          {"PAGODA_CPU_REPACK_MIN_T", "0"}};
    if (envs[_i][0]) setenv(envs[_i][0], envs[_i][1], 1);
    char path[] = "/tmp/pagoda_memplan_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char err[512];
    pagoda_genmodel_opts g = {.shape = "tiny", .dtype = PAGODA_DTYPE_Q8_0, .out = path, .seed = 3,
                              .vocab = tu_src("models/stories260K.gguf")};
    ck_assert_msg(pagoda_gen_model(&g, err, sizeof err) == 0, "%s", err);
    const char *settings[] = {"engine.kv_cache_tokens=256", "engine.max_seq_len=128", NULL};
    pagoda_config *cfg;
    pagoda_runtime *rt = et_open_model(&cfg, path, settings);
    if (_i == 1 && !strstr(rt->backend.info.name, "scalar")) {
        printf("repacked_held_gauge: PAGODA_CPU_ISA=scalar did not reach the backend (CK_FORK=no: "
               "it was loaded already): '%s': skipped\n", rt->backend.info.name);
        goto out;
    }
    pagoda_metric_gauge gs[32];
    int ng = pagoda_runtime_plan_gauges(rt, gs, 32);
    double held = -1, planned = -1;
    for (int i = 0; i < ng; i++) {
        if (!strcmp(gs[i].name, "pagoda_memory_repacked_held_bytes")) held = gs[i].value;
        if (!strcmp(gs[i].name, "pagoda_memory_repacked_bytes")) planned = gs[i].value;
    }
    ck_assert(held == 0);   /* listed, and nothing before the first pass */
    ck_assert(planned == (double)rt->plan.repacked_bytes);
    ck_assert_int_eq(pagoda_engine_start(rt->engine), 0);
    et_result r;
    et_result_init(&r);
    et_submit(rt, "Once upon a time, there was a little girl named Lily. She loved to play outside "
              "in the sunshine with her big red ball.", 2, &r, 0.0f);
    pagoda_engine_wait_idle(rt->engine);
    ck_assert_int_eq(r.n_final, 1);
    ck_assert_int_ge(r.usage.prompt_tokens, 16);
    ng = pagoda_runtime_plan_gauges(rt, gs, 32);
    held = -1;
    for (int i = 0; i < ng; i++)
        if (!strcmp(gs[i].name, "pagoda_memory_repacked_held_bytes")) held = gs[i].value;
    printf("repacked_held_gauge %s%s%s: %.0f bytes held of %.0f planned (%s)\n", envs[_i][0] ? envs[_i][0] : "default",
           envs[_i][0] ? "=" : "", envs[_i][0] ? envs[_i][1] : "", held, planned, rt->backend.info.name);
    if (_i == 0 && planned > 0) {
        ck_assert_msg(held > 0 && held <= planned, "held %.0f, planned %.0f", held, planned);
        /* one sequence computes one row of logits a step: every copy but the head's */
        const gguf_tensor *head = pagoda_gguf_tensor(rt->model->gguf, "output.weight");
        ck_assert_ptr_nonnull(head);
        uint64_t head_x = 0;
        ck_assert_int_eq(rt->backend.ops.weight_extra_bytes(rt->backend.ctx, head->type, head->ne[1],
                                                            head->ne[0], &head_x), 0);
        ck_assert_uint_gt(head_x, 0);
        ck_assert(held == planned - (double)head_x);
    } else {
        ck_assert(planned == 0);
        ck_assert(held == 0);
    }
out:
    et_close(rt, cfg);
    unlink(path);
    if (envs[_i][0]) unsetenv(envs[_i][0]);
}
END_TEST

START_TEST(too_small)
{
    gguf_file *f = open_stories();
    pagoda_memplan_opts o;
    pagoda_memplan_opts_default(&o);
    o.memory_budget = 32ull << 20;  /* less than the fixed 64 MiB overhead */
    pagoda_memplan p;
    char err[256];
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p, err, sizeof err), 0);
    ck_assert(!p.fits);
    ck_assert_uint_eq(p.kv_blocks, 0);
    ck_assert_uint_eq(p.fit[0].seqs, 0);
    ck_assert_uint_ge(p.shortfall_bytes, p.fixed_bytes - o.memory_budget);
    ck_assert_msg(strstr(p.reason, "budget"), "%s", p.reason);
    ck_assert_msg(!strstr(p.reason, "repacked"), "%s", p.reason);   /* none planned, none named */
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    pagoda_memplan_print(&p, fp);
    fclose(fp);
    ck_assert_msg(strstr(buf, "DOES NOT FIT"), "%s", buf);
    free(buf);
    /* Room for the fixed part but not one whole 512-token sequence (32 blocks). */
    o.memory_budget = p.fixed_bytes + 640 * 16 * 31;
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p, err, sizeof err), 0);
    ck_assert(!p.fits);
    ck_assert_uint_eq(p.kv_blocks, 31);
    ck_assert_uint_eq(p.shortfall_bytes, 640 * 16);
    ck_assert_msg(strstr(p.reason, "max_seq_len"), "%s", p.reason);
    o.memory_budget += 640 * 16;
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p, err, sizeof err), 0);
    ck_assert(p.fits);
    ck_assert_uint_eq(p.fit[0].seqs, 1);
    /* the backend's copies are named among what the budget must hold: the
     * fixed part alone, and the fixed part with a pool fixed too large */
    fake_extra fx = {.dtype = PAGODA_DTYPE_F32, .vocab = p.vocab};
    o.weight_extra = fake_extra_bytes;
    o.weight_extra_ctx = &fx;
    o.memory_budget = 32ull << 20;
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p, err, sizeof err), 0);
    ck_assert(!p.fits);
    ck_assert_uint_gt(p.repacked_bytes, 0);
    char want[96];
    snprintf(want, sizeof want, " + overhead + repacked weights (%llu bytes) need ",
             (unsigned long long)p.repacked_bytes);
    ck_assert_msg(strstr(p.reason, want), "wanted '%s' in: %s", want, p.reason);
    o.memory_budget = 1ull << 30;
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p, err, sizeof err), 0);
    ck_assert(p.fits);
    ck_assert_str_eq(p.reason, "");
    pagoda_memplan_set_pool(&p, (1ull << 30) / p.kv_bytes_per_block);
    ck_assert(!p.fits);
    snprintf(want, sizeof want, ", of which repacked weights %.1f MiB) plus the KV pool of ",
             (double)p.repacked_bytes / 1048576.0);
    ck_assert_msg(strstr(p.reason, want), "wanted '%s' in: %s", want, p.reason);
    o.weight_extra = NULL;
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p, err, sizeof err), 0);
    pagoda_memplan_set_pool(&p, (1ull << 30) / p.kv_bytes_per_block);
    ck_assert_msg(strstr(p.reason, "overhead (") && !strstr(p.reason, "repacked"), "%s", p.reason);
    pagoda_gguf_close(f);
}
END_TEST

START_TEST(options_and_limits)
{
    gguf_file *f = open_stories();
    pagoda_memplan_opts o;
    pagoda_memplan_opts_default(&o);
    o.memory_budget = 1ull << 30;
    pagoda_memplan p;
    char err[256];
    o.max_seq_len = 100;
    o.block_size = 32;
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p, err, sizeof err), 0);
    ck_assert(p.fit[0].exceeds);  /* 512 > 100 */
    ck_assert_uint_eq(p.fit[0].seqs, 0);
    ck_assert_uint_eq(p.workspace_bytes, 520ull * 172 * 4 + 16ull * 8 * 100 * 4);
    o.max_seq_len = 4096;  /* beyond the model's context */
    ck_assert_int_ne(pagoda_memplan_compute(f, &o, &p, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "max_seq_len 4096"), "%s", err);
    o.max_seq_len = 0;
    /* Q8_0 KV quantizes each head in blocks of 32: stories260K's heads of 8 cannot */
    o.kv_dtype = PAGODA_DTYPE_Q8_0;
    ck_assert_int_ne(pagoda_memplan_compute(f, &o, &p, err, sizeof err), 0);
    ck_assert_str_eq(err, "KV cache type Q8_0 stores blocks of 32 values along each head, but this "
                          "model's heads have 8 values, not a multiple of 32: use kv_dtype = f16 or f32");
    o.kv_dtype = PAGODA_DTYPE_Q4_0;
    ck_assert_int_ne(pagoda_memplan_compute(f, &o, &p, err, sizeof err), 0);
    ck_assert_str_eq(err, "KV cache type Q4_0 is not supported (use f16, q8_0 or f32)");
    o.kv_dtype = PAGODA_DTYPE_F16;
    /* NULL opts: defaults with an auto budget from /proc/meminfo. */
    ck_assert_int_eq(pagoda_memplan_compute(f, NULL, &p, err, sizeof err), 0);
    ck_assert(p.budget_auto);
    ck_assert_uint_gt(p.mem_available, 0);
    ck_assert(p.kv_value_bytes == 2.0);
    pagoda_gguf_close(f);
}
END_TEST

START_TEST(generated_gqa_and_json)
{
    /* A generated tiny model: 2 layers, 2 KV heads of 16. */
    char path[] = "/tmp/pagoda_memplan_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char err[512];
    pagoda_genmodel_opts g = {.shape = "tiny", .dtype = PAGODA_DTYPE_Q8_0, .out = path, .seed = 1};
    ck_assert_msg(pagoda_gen_model(&g, err, sizeof err) == 0, "%s", err);
    gguf_file *f = pagoda_gguf_open(path, err, sizeof err);
    ck_assert_msg(f, "%s", err);
    pagoda_memplan_opts o;
    pagoda_memplan_opts_default(&o);
    o.memory_budget = 256ull << 20;
    pagoda_memplan p;
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p, err, sizeof err), 0);
    ck_assert_uint_eq(p.kv_bytes_per_token, 2 * 2 * 2 * 16 * 2);
    ck_assert_uint_gt(p.weight_bytes_by_type[PAGODA_DTYPE_Q8_0], 0);
    ck_assert_uint_eq(p.weight_bytes_by_type[PAGODA_DTYPE_F32], (2 * 2 + 1) * 64 * 4);
    ck_assert_uint_eq(p.weight_bytes_by_type[PAGODA_DTYPE_F32] + p.weight_bytes_by_type[PAGODA_DTYPE_Q8_0],
                      p.weight_bytes);
    char *js = pagoda_memplan_json(&p);
    ck_assert_ptr_nonnull(js);
    json_error_t je;
    json_t *root = json_loads(js, 0, &je);
    ck_assert_msg(root, "%s", je.text);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(root, "kv"), "bytes_per_token")), 256);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(root, "kv"), "blocks")), (json_int_t)p.kv_blocks);
    ck_assert(json_is_true(json_object_get(root, "fits")));
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(json_object_get(root, "weights_by_type"), "Q8_0"), "bytes")),
                     (json_int_t)p.weight_bytes_by_type[PAGODA_DTYPE_Q8_0]);
    json_t *seqs = json_object_get(root, "sequences");
    ck_assert_int_eq(json_array_size(seqs), 4);
    ck_assert(json_is_true(json_object_get(json_array_get(seqs, 1), "exceeds_max_seq_len")));
    json_decref(root);
    free(js);
    pagoda_gguf_close(f);

    /* The CLI: exit 0 when it fits, 1 when not, 2 for usage. */
    char *a1[] = {"plan", "--model", path, "--memory", "256M", "--json"};
    FILE *saved = stdout;
    stdout = fopen("/dev/null", "w");
    ck_assert_int_eq(pagoda_cmd_plan(6, a1), 0);
    char *a2[] = {"plan", "--model", path, "--memory=16M", "--kv-dtype", "f32"};
    ck_assert_int_eq(pagoda_cmd_plan(6, a2), 1);
    fclose(stdout);
    stdout = saved;
    char *a3[] = {"plan", "--model", path, "--memory", "lots"};
    ck_assert_int_eq(pagoda_cmd_plan(5, a3), 2);
    char *a4[] = {"plan", "--memory", "1G"};
    ck_assert_int_eq(pagoda_cmd_plan(3, a4), 2);
    char *a5[] = {"plan", "--model", path, "--kv-dtype", "q4"};
    ck_assert_int_eq(pagoda_cmd_plan(5, a5), 2);
    char *a6[] = {"plan", "--model", "/nonexistent.gguf", "--memory", "1G"};
    ck_assert_int_eq(pagoda_cmd_plan(5, a6), 1);
    unlink(path);
}
END_TEST

/* The text plan (caller frees) and the JSON plan's weights_by_type bytes
 * of one type. */
static json_int_t plan_json_type_bytes(const pagoda_memplan *p, const char *type)
{
    char *js = pagoda_memplan_json(p);
    json_t *root = json_loads(js, 0, NULL);
    json_int_t v = json_integer_value(json_object_get(json_object_get(json_object_get(root, "weights_by_type"), type), "bytes"));
    json_decref(root);
    free(js);
    return v;
}

/* A generated model in a fresh temporary file (path: its name, to unlink)
 * and its plan with a 256 MiB budget. */
static gguf_file *gen_plan(const pagoda_genmodel_opts *g0, char *path, pagoda_memplan *p)
{
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char err[512];
    pagoda_genmodel_opts g = *g0;
    g.out = path;
    ck_assert_msg(pagoda_gen_model(&g, err, sizeof err) == 0, "%s", err);
    gguf_file *f = pagoda_gguf_open(path, err, sizeof err);
    ck_assert_msg(f, "%s", err);
    pagoda_memplan_opts o;
    pagoda_memplan_opts_default(&o);
    o.memory_budget = 256ull << 20;
    ck_assert_msg(pagoda_memplan_compute(f, &o, p, err, sizeof err) == 0, "%s", err);
    return f;
}

/* A K-quant model: the weight bytes come from the file's tensor sizes
 * (pagoda_dtype_row_bytes: 144 bytes per 256 Q4_K values), and the text
 * and JSON plans name the type. */
START_TEST(k_quant_weights)
{
    char path[] = "/tmp/pagoda_memplan_XXXXXX";
    pagoda_genmodel_opts g = {.shape = "tiny-k", .dtype = PAGODA_DTYPE_Q4_K, .seed = 1};
    pagoda_memplan p;
    gguf_file *f = gen_plan(&g, path, &p);
    /* dim 256, 2 layers, q 256, kv 128, ffn 512, vocab 512, untied:
     * 2 x (256*256*2 + 256*128*2 + 256*512*3) + 2 x 256*512 values. */
    const uint64_t q4k_params = 2 * (256 * 256 * 2 + 256 * 128 * 2 + 256 * 512 * 3) + 2 * 256 * 512;
    ck_assert_uint_eq(p.weight_params_by_type[PAGODA_DTYPE_Q4_K], q4k_params);
    ck_assert_uint_eq(p.weight_bytes_by_type[PAGODA_DTYPE_Q4_K], q4k_params / 256 * 144);
    ck_assert_uint_eq(p.weight_bytes, q4k_params / 256 * 144 + (2 * 2 + 1) * 256 * 4);
    char *txt = plan_text(&p);
    ck_assert_msg(strstr(txt, "weights Q4_K (1.4M params)"), "%s", txt);
    free(txt);
    ck_assert_int_eq(plan_json_type_bytes(&p, "Q4_K"), (json_int_t)(q4k_params / 256 * 144));
    pagoda_gguf_close(f);
    unlink(path);
}
END_TEST

/* The 8-bit KV cache: 34 bytes per 32 values (a 16-bit scale per block),
 * so the same budget holds 32/17 = 1.88x the tokens of F16; the plan shows
 * the factor (text and JSON) and the CLI takes --kv-dtype q8_0. */
START_TEST(q8_0_kv)
{
    char path[] = "/tmp/pagoda_memplan_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char err[512];
    /* 2 layers, 2 KV heads of 64 */
    pagoda_genmodel_opts g = {.shape = "tiny-k", .dtype = PAGODA_DTYPE_Q8_0, .out = path, .seed = 1};
    ck_assert_msg(pagoda_gen_model(&g, err, sizeof err) == 0, "%s", err);
    gguf_file *f = pagoda_gguf_open(path, err, sizeof err);
    ck_assert_msg(f, "%s", err);
    pagoda_memplan_opts o;
    pagoda_memplan_opts_default(&o);
    o.memory_budget = 256ull << 20;
    pagoda_memplan p16, p8;
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p16, err, sizeof err), 0);
    o.kv_dtype = PAGODA_DTYPE_Q8_0;
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p8, err, sizeof err), 0);
    ck_assert_uint_eq(p16.kv_bytes_per_token, 2 * 2 * 2 * 64 * 2);
    ck_assert_uint_eq(p8.kv_bytes_per_token, 2 * 2 * 2 * (64 / 32) * 34);
    ck_assert(p8.kv_value_bytes == 1.0625);
    ck_assert_int_eq(p8.kv_block_values, 32);
    ck_assert_int_eq(p8.kv_block_bytes, 34);
    ck_assert_uint_eq(p8.kv_bytes_per_block, p8.kv_bytes_per_token * 16);
    /* the same bytes left for the pool hold 32/17 the tokens */
    ck_assert_uint_eq(p8.fixed_bytes, p16.fixed_bytes);
    ck_assert_uint_eq(p8.kv_blocks, (o.memory_budget - p8.fixed_bytes) / p8.kv_bytes_per_block);
    double ratio = (double)p8.kv_tokens / (double)p16.kv_tokens;
    ck_assert_msg(ratio > 1.88 && ratio < 1.885, "%f", ratio);
    char *txt = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&txt, &len);
    pagoda_memplan_print(&p8, mf);
    fclose(mf);
    ck_assert_msg(strstr(txt, ", KV Q8_0\n"), "%s", txt);
    ck_assert_msg(strstr(txt, "KV cache: 544 bytes/token = 2 x 2 layers x 2 kv_heads x 64 head_dim x 1.0625 "
                              "bytes (Q8_0: 34 bytes per 32 values; 1.88x the tokens of F16 in the same bytes)\n"),
                  "%s", txt);
    free(txt);
    char *js = pagoda_memplan_json(&p8);
    json_t *root = json_loads(js, 0, NULL), *kv = json_object_get(root, "kv");
    ck_assert_str_eq(json_string_value(json_object_get(kv, "dtype")), "Q8_0");
    ck_assert(json_real_value(json_object_get(kv, "value_bytes")) == 1.0625);
    ck_assert_int_eq(json_integer_value(json_object_get(kv, "block_values")), 32);
    ck_assert_int_eq(json_integer_value(json_object_get(kv, "block_bytes")), 34);
    ck_assert_int_eq(json_integer_value(json_object_get(kv, "bytes_per_token")), 544);
    json_decref(root);
    free(js);
    pagoda_gguf_close(f);
    char *a1[] = {"plan", "--model", path, "--memory", "256M", "--kv-dtype", "q8_0"};
    FILE *saved = stdout;
    stdout = fopen("/dev/null", "w");
    ck_assert_int_eq(pagoda_cmd_plan(7, a1), 0);
    fclose(stdout);
    stdout = saved;
    unlink(path);
}
END_TEST

/* gemma3: the plan says which layers slide; with swa_kv = window (the
 * default) the main pool holds the 2 global layers and the 11 local ones
 * keep their window in a pool of their own (engine_swa.h's geometry), with
 * swa_kv = full every layer is in the pool. */
START_TEST(gemma3_sliding_window)
{
    char path[] = "/tmp/pagoda_memplan_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char err[512];
    /* 13 layers: 5 and 11 global; 2 KV heads of 16; window 40; context 512 */
    pagoda_genmodel_opts g = {.shape = "tiny", .dtype = PAGODA_DTYPE_F32, .out = path, .seed = 1,
                              .arch = "gemma3", .layers = 13, .sliding_window = 40};
    ck_assert_msg(pagoda_gen_model(&g, err, sizeof err) == 0, "%s", err);
    gguf_file *f = pagoda_gguf_open(path, err, sizeof err);
    ck_assert_msg(f, "%s", err);
    pagoda_memplan_opts o;
    pagoda_memplan_opts_default(&o);
    o.memory_budget = 256ull << 20;
    pagoda_memplan p;
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p, err, sizeof err), 0);
    const uint64_t per_layer = 2 * 2 * 16 * 2;  /* K and V, 2 heads of 16, F16 */
    ck_assert_int_eq(p.n_swa_layers, 11);
    ck_assert_int_eq(p.swa_window, 40);
    ck_assert_uint_eq(p.kv_swa_bytes_per_token, 11 * per_layer);
    ck_assert(p.swa.window);
    /* the main pool: the 2 global layers */
    ck_assert_int_eq(p.kv_pool_layers, 2);
    ck_assert_uint_eq(p.kv_bytes_per_token, 2 * per_layer);
    ck_assert_uint_eq(p.kv_bytes_per_token_full, 13 * per_layer);
    ck_assert_uint_eq(p.kv_bytes_per_block, 2 * per_layer * 16);
    /* the window pool, 16 seats (max_num_seqs) of (40 - 2) / 16 + 2 = 4
     * blocks, and (512 + 16 x 15) / 16 = 47 for a step's 512 new tokens */
    ck_assert_int_eq(p.swa.seats, 16);
    ck_assert_int_eq(p.swa.hold_blocks, 4);
    ck_assert_int_eq(p.swa.step_blocks, 47);
    ck_assert_int_eq(p.swa.pool_blocks, 16 * 4 + 47);
    ck_assert_uint_eq(p.swa_block_bytes, 11 * per_layer * 16);
    ck_assert_uint_eq(p.swa_pool_bytes, 111 * 11 * per_layer * 16);
    /* a hit recomputes 11 x 39 tokens; the sink takes a step's 512 rows */
    ck_assert_int_eq(p.swa.recompute_tokens, 429);
    ck_assert_int_eq(p.swa.sink_slots, 512);
    ck_assert_int_eq(p.swa.sink_blocks, 32);
    ck_assert_uint_eq(p.kv_sink_bytes, 32 * 2 * per_layer * 16);
    /* 512 tokens (the context) = 32 blocks of 16: every layer, or the 2
     * global layers and the window's 4 blocks */
    ck_assert_uint_eq(p.kv_bytes_per_seq_full, 13 * per_layer * 512);
    ck_assert_uint_eq(p.kv_bytes_per_seq, 2 * per_layer * 512 + 11 * per_layer * 64);
    /* the budget pays the window pool and the sink first */
    uint64_t kv_fixed = p.swa_pool_bytes + p.kv_sink_bytes;
    ck_assert_uint_eq(p.kv_blocks, ((256ull << 20) - p.fixed_bytes - kv_fixed) / (2 * per_layer * 16));
    ck_assert_uint_eq(p.kv_total_bytes, p.kv_pool_bytes + kv_fixed);
    ck_assert_uint_eq(p.fit[0].seqs, p.kv_blocks / 32);
    ck_assert_uint_eq(p.fit[0].seqs_full, p.kv_total_bytes / (13 * per_layer * 16) / 32);
    ck_assert_uint_gt(p.fit[0].seqs, 5 * p.fit[0].seqs_full);
    char *js = pagoda_memplan_json(&p);
    json_t *root = json_loads(js, 0, NULL);
    json_t *sw = json_object_get(json_object_get(root, "kv"), "sliding_window");
    ck_assert_int_eq(json_integer_value(json_object_get(sw, "layers")), 11);
    ck_assert_int_eq(json_integer_value(json_object_get(sw, "window")), 40);
    ck_assert(json_is_true(json_object_get(sw, "window_pool")));
    ck_assert_int_eq(json_integer_value(json_object_get(sw, "pool_blocks")), 111);
    ck_assert_int_eq(json_integer_value(json_object_get(sw, "pool_bytes")), (json_int_t)p.swa_pool_bytes);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(root, "kv"), "pool_layers")), 2);
    json_decref(root);
    free(js);
    char *text = NULL;
    size_t tn = 0;
    FILE *mf = open_memstream(&text, &tn);
    pagoda_memplan_print(&p, mf);
    fclose(mf);
    ck_assert_msg(strstr(text, "KV cache: 256 bytes/token = 2 x 2 global layers") &&
                  strstr(text, "sliding window: 11 of 13 layers read only their last 40 tokens and keep only those") &&
                  strstr(text, "111 blocks of 16 tokens") &&
                  strstr(text, "(every layer at every position: "), "%s", text);
    free(text);

    /* swa_kv = full: every layer in the pool, as before the window pool */
    o.swa_kv = PAGODA_SWA_KV_FULL;
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p, err, sizeof err), 0);
    ck_assert(!p.swa.window);
    ck_assert_int_eq(p.kv_pool_layers, 13);
    ck_assert_uint_eq(p.kv_bytes_per_token, 13 * per_layer);
    ck_assert_uint_eq(p.swa_pool_bytes + p.kv_sink_bytes, 0);
    ck_assert_uint_eq(p.kv_bytes_per_seq, p.kv_bytes_per_seq_full);
    ck_assert_uint_eq(p.fit[0].seqs, p.fit[0].seqs_full);
    text = NULL;
    mf = open_memstream(&text, &tn);
    pagoda_memplan_print(&p, mf);
    fclose(mf);
    ck_assert_msg(strstr(text, "but keep every position: [engine] swa_kv = full"), "%s", text);
    free(text);
    /* a window not shorter than max_seq_len: nothing to save */
    o.swa_kv = PAGODA_SWA_KV_WINDOW;
    o.max_seq_len = 40;
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p, err, sizeof err), 0);
    ck_assert(!p.swa.window);
    ck_assert_msg(strstr(p.swa.why_full, "not shorter than max_seq_len (40)"), "%s", p.swa.why_full);
    pagoda_gguf_close(f);

    /* a malformed window is the model's error, also in the plan */
    o.max_seq_len = 0;
    g.sliding_window = 4096;
    ck_assert_msg(pagoda_gen_model(&g, err, sizeof err) == 0, "%s", err);
    f = pagoda_gguf_open(path, err, sizeof err);
    ck_assert_int_ne(pagoda_memplan_compute(f, &o, &p, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "gemma3.attention.sliding_window = 4096 is outside 1..512"), "%s", err);
    pagoda_gguf_close(f);
    unlink(path);
}
END_TEST

/* The plan counts exactly what the engine allocates: a runtime on a tiny
 * gemma3 model, both swa_kv modes, an explicit pool and one from the
 * budget, and the engine's pools as the forward pass allocated them. */
static void plan_equals_allocation_kv(const char *model, const char *swa_kv, const char *pool,
                                      const char *kv_dtype)
{
    char err[1024] = "", buf[700];
    pagoda_config *cfg = pagoda_config_new_empty();
    snprintf(buf, sizeof buf, "engine.model=%s", model);
    char s_swa[64], s_pool[64], s_dt[64];
    snprintf(s_swa, sizeof s_swa, "engine.swa_kv=%s", swa_kv);
    snprintf(s_pool, sizeof s_pool, "%s", pool);
    snprintf(s_dt, sizeof s_dt, "engine.kv_dtype=%s", kv_dtype);
    const char *settings[] = {buf, "engine.log_level=warn", "engine.max_seq_len=300",
                              "engine.block_size=8", "scheduler.continuous.max_num_seqs=5",
                              "scheduler.continuous.max_batched_tokens=24", s_swa, s_pool, s_dt,
                              NULL};
    for (int i = 0; settings[i]; i++)
        ck_assert_msg(pagoda_config_set(cfg, settings[i], err, sizeof err) == 0, "%s: %s",
                      settings[i], err);
    pagoda_runtime *rt = NULL;
    ck_assert_msg(pagoda_runtime_open(cfg, false, false, &rt, err, sizeof err) == 0, "%s", err);
    const pagoda_memplan *p = &rt->plan;
    ck_assert_str_eq(pagoda_dtype_name(p->kv_dtype), strcmp(kv_dtype, "q8_0") ? "F16" : "Q8_0");
    pagoda_engine_swa_stats st;
    ck_assert_int_eq(pagoda_engine_get_swa_stats(rt->engine, &st), 0);
    bool window = strcmp(swa_kv, "window") == 0;
    ck_assert_int_eq(st.geometry.window, window);
    ck_assert_int_eq(p->swa.window, window);
    ck_assert_int_eq(st.geometry.pool_blocks, p->swa.pool_blocks);
    ck_assert_int_eq(st.geometry.sink_blocks, p->swa.sink_blocks);
    ck_assert_uint_eq(st.pool_bytes, p->swa_pool_bytes);
    ck_assert_uint_eq(st.main_pool_bytes, p->kv_pool_bytes + p->kv_sink_bytes);
    ck_assert_uint_eq(st.pool_bytes + st.main_pool_bytes, p->kv_total_bytes);
    if (window) {
        /* 5 seats x ((6 - 2) / 8 + 2) + (24 + 5 x 7) / 8 */
        ck_assert_int_eq(p->swa.pool_blocks, 5 * 2 + 7);
        ck_assert_uint_gt(st.pool_bytes, 0);
        ck_assert_int_eq(st.free_seats, 5);
        ck_assert_int_eq(st.free_blocks, p->swa.pool_blocks);
    } else {
        ck_assert_uint_eq(st.pool_bytes, 0);
    }
    pagoda_runtime_close(rt);
    pagoda_config_free(cfg);
}

static void plan_equals_allocation(const char *model, const char *swa_kv, const char *pool)
{
    plan_equals_allocation_kv(model, swa_kv, pool, "f16");
}

START_TEST(gemma3_plan_is_what_is_allocated)
{
    char path[] = "/tmp/pagoda_memplan_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char err[512];
    pagoda_genmodel_opts g = {.shape = "tiny", .dtype = PAGODA_DTYPE_F32, .out = path, .seed = 2,
                              .arch = "gemma3", .layers = 7, .sliding_window = 6};
    ck_assert_msg(pagoda_gen_model(&g, err, sizeof err) == 0, "%s", err);
    plan_equals_allocation(path, "window", "engine.kv_cache_tokens=1000");
    plan_equals_allocation(path, "full", "engine.kv_cache_tokens=1000");
    plan_equals_allocation(path, "window", "engine.memory_budget=120M");
    plan_equals_allocation(path, "full", "engine.memory_budget=120M");
    unlink(path);
}
END_TEST

/* The 8-bit KV cache with gemma3's window pool: the local layers' pool is
 * stored in kv_dtype too, so every KV figure of the plan (the main pool,
 * the window pool, the sink, a sequence) takes Q8_0's 34 bytes per 32
 * values, and a runtime allocates exactly those bytes. head_dim 32: one
 * Q8_0 block per head. */
START_TEST(gemma3_q8_0_window_pool)
{
    char path[] = "/tmp/pagoda_memplan_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char err[512];
    /* 13 layers: 5 and 11 global; 2 KV heads of 32; window 40; context 512 */
    pagoda_genmodel_opts g = {.shape = "tiny", .dtype = PAGODA_DTYPE_F32, .out = path, .seed = 1,
                              .arch = "gemma3", .layers = 13, .sliding_window = 40, .head_dim = 32};
    ck_assert_msg(pagoda_gen_model(&g, err, sizeof err) == 0, "%s", err);
    gguf_file *f = pagoda_gguf_open(path, err, sizeof err);
    ck_assert_msg(f, "%s", err);
    pagoda_memplan_opts o;
    pagoda_memplan_opts_default(&o);
    o.memory_budget = 256ull << 20;
    pagoda_memplan p16, p8;
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p16, err, sizeof err), 0);
    o.kv_dtype = PAGODA_DTYPE_Q8_0;
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p8, err, sizeof err), 0);
    const uint64_t pl16 = 2 * 2 * 32 * 2;          /* K and V, 2 heads of 32, F16 */
    const uint64_t pl8 = 2 * 2 * (32 / 32) * 34;   /* ... as one Q8_0 block each */
    ck_assert(p8.swa.window);
    ck_assert_int_eq(p8.n_swa_layers, 11);
    ck_assert_int_eq(p8.kv_pool_layers, 2);
    ck_assert_uint_eq(p16.kv_bytes_per_token, 2 * pl16);
    ck_assert_uint_eq(p8.kv_bytes_per_token, 2 * pl8);
    ck_assert_uint_eq(p8.kv_bytes_per_token_full, 13 * pl8);
    ck_assert_uint_eq(p8.kv_swa_bytes_per_token, 11 * pl8);
    ck_assert_uint_eq(p8.kv_bytes_per_block, 2 * pl8 * 16);
    /* the same geometry (it does not depend on the type), in Q8_0 bytes */
    ck_assert_int_eq(p8.swa.pool_blocks, p16.swa.pool_blocks);
    ck_assert_int_eq(p8.swa.pool_blocks, 16 * 4 + 47);
    ck_assert_int_eq(p8.swa.sink_blocks, 32);
    ck_assert_uint_eq(p8.swa_block_bytes, 11 * pl8 * 16);
    ck_assert_uint_eq(p8.swa_pool_bytes, 111 * 11 * pl8 * 16);
    ck_assert_uint_eq(p16.swa_pool_bytes, 111 * 11 * pl16 * 16);
    ck_assert_uint_eq(p8.kv_sink_bytes, 32 * 2 * pl8 * 16);
    ck_assert_uint_eq(p8.kv_bytes_per_seq_full, 13 * pl8 * 512);
    ck_assert_uint_eq(p8.kv_bytes_per_seq, 2 * pl8 * 512 + 11 * pl8 * 64);
    /* the budget pays the (smaller) window pool and sink first; the rest
     * holds 32/17 the global layers' tokens of F16, and more in all */
    uint64_t fixed8 = p8.swa_pool_bytes + p8.kv_sink_bytes;
    ck_assert_uint_eq(p8.fixed_bytes, p16.fixed_bytes);
    ck_assert_uint_eq(p8.kv_blocks, ((256ull << 20) - p8.fixed_bytes - fixed8) / (2 * pl8 * 16));
    ck_assert_uint_eq(p8.kv_total_bytes, p8.kv_pool_bytes + fixed8);
    ck_assert_uint_gt(p8.kv_tokens, p16.kv_tokens * 188 / 100);
    ck_assert_uint_eq(p8.fit[0].seqs_full, p8.kv_total_bytes / (13 * pl8 * 16) / 32);
    /* text and JSON name the type and the window pool's Q8_0 bytes */
    char *text = NULL;
    size_t tn = 0;
    FILE *mf = open_memstream(&text, &tn);
    pagoda_memplan_print(&p8, mf);
    fclose(mf);
    ck_assert_msg(strstr(text, ", KV Q8_0\n") &&
                  strstr(text, "KV cache: 272 bytes/token = 2 x 2 global layers x 2 kv_heads x 32 "
                               "head_dim x 1.0625 bytes (Q8_0: 34 bytes per 32 values; 1.88x the "
                               "tokens of F16 in the same bytes)\n") &&
                  strstr(text, "sliding window: 11 of 13 layers read only their last 40 tokens and keep only those"),
                  "%s", text);
    free(text);
    char *js = pagoda_memplan_json(&p8);
    json_t *root = json_loads(js, 0, NULL), *kv = json_object_get(root, "kv");
    json_t *sw = json_object_get(kv, "sliding_window");
    ck_assert_str_eq(json_string_value(json_object_get(kv, "dtype")), "Q8_0");
    ck_assert_int_eq(json_integer_value(json_object_get(kv, "pool_layers")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(kv, "bytes_per_token")), 272);
    ck_assert_int_eq(json_integer_value(json_object_get(sw, "bytes_per_token")), 11 * 136);
    ck_assert_int_eq(json_integer_value(json_object_get(sw, "pool_bytes")), (json_int_t)p8.swa_pool_bytes);
    ck_assert_int_eq(json_integer_value(json_object_get(sw, "sink_bytes")), (json_int_t)p8.kv_sink_bytes);
    json_decref(root);
    free(js);
    pagoda_gguf_close(f);
    /* the CLI takes both: --kv-dtype q8_0 with --swa-kv */
    char *a1[] = {"plan", "--model", path, "--memory", "256M", "--kv-dtype", "q8_0", "--swa-kv", "window"};
    FILE *saved = stdout;
    stdout = fopen("/dev/null", "w");
    ck_assert_int_eq(pagoda_cmd_plan(9, a1), 0);
    fclose(stdout);
    stdout = saved;

    /* what a runtime allocates is the plan, Q8_0 window pool included */
    g.layers = 7;
    g.sliding_window = 6;
    g.seed = 2;
    ck_assert_msg(pagoda_gen_model(&g, err, sizeof err) == 0, "%s", err);
    plan_equals_allocation_kv(path, "window", "engine.kv_cache_tokens=1000", "q8_0");
    plan_equals_allocation_kv(path, "full", "engine.kv_cache_tokens=1000", "q8_0");
    plan_equals_allocation_kv(path, "window", "engine.memory_budget=120M", "q8_0");
    unlink(path);
}
END_TEST

/* ------------------------------------------------------------ experts */

static void gen_header(const char *shape, int dtype, const char *path)
{
    char err[512];
    pagoda_genmodel_opts g = {.shape = shape, .dtype = dtype, .out = path, .seed = 1,
                              .header_only = true};
    ck_assert_msg(pagoda_gen_model(&g, err, sizeof err) == 0, "%s", err);
}

#define Q8(params) ((uint64_t)(params) / 32 * 34)

/* Qwen3-30B-A3B's real shape (a header over a sparse file: 32 GB of Q8_0
 * that occupy no disk): 30.53B parameters of which 3.35B are active a
 * token, as its model card counts them (embedding and head whole); the
 * bytes a decoded token reads; the experts by type; the KV formula as for
 * a dense model; each rank's share under tensor parallelism. */
START_TEST(qwen3_30b_a3b_plan)
{
    char path[] = "/tmp/pagoda_memplan_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    gen_header("qwen3-30b-a3b", PAGODA_DTYPE_Q8_0, path);
    char err[512];
    gguf_file *f = pagoda_gguf_open(path, err, sizeof err);
    ck_assert_msg(f, "%s", err);
    pagoda_memplan_opts o;
    pagoda_memplan_opts_default(&o);
    o.memory_budget = 64ull << 30;
    pagoda_memplan p;
    ck_assert_msg(pagoda_memplan_compute(f, &o, &p, err, sizeof err) == 0, "%s", err);
    /* a layer: attention 2048x4096 + 2x 2048x512 + 4096x2048, norms 2x2048
     * + 2x128, router 2048x128, experts 3 x 2048x768 x 128 */
    const uint64_t attn = 2048ull * 4096 * 2 + 2048ull * 512 * 2, f32 = 2 * 2048 + 2 * 128 + 2048 * 128;
    const uint64_t expert = 3ull * 2048 * 768, emb = 151936ull * 2048;
    ck_assert_uint_eq(p.n_params, 48 * (attn + f32 + 128 * expert) + 2 * emb + 2048);
    ck_assert_uint_eq(p.n_params, 30532122624ull);
    ck_assert_uint_eq(p.n_params_active, 48 * (attn + f32 + 8 * expert) + 2 * emb + 2048);
    ck_assert_uint_eq(p.n_params_active, 3353032704ull);
    ck_assert_int_eq(p.n_experts, 128);
    ck_assert_int_eq(p.n_experts_used, 8);
    ck_assert_int_eq(p.ffn_exp, 768);
    ck_assert_int_eq(p.n_moe_layers, 48);
    ck_assert_uint_eq(p.expert_params, 48 * 128 * expert);
    ck_assert_uint_eq(p.expert_bytes_by_type[PAGODA_DTYPE_Q8_0], Q8(48 * 128 * expert));
    ck_assert_uint_eq(p.expert_bytes, p.expert_bytes_by_type[PAGODA_DTYPE_Q8_0]);
    /* decode: every non-expert weight, 8 experts a layer, one embedding row */
    const uint64_t decode = 48 * (Q8(attn) + 4 * f32 + 8 * Q8(expert)) + Q8(emb) + 4 * 2048 + Q8(2048);
    ck_assert_uint_eq(p.decode_bytes_per_token, decode);
    ck_assert_uint_eq(p.weight_bytes, 48 * (Q8(attn) + 4 * f32 + 128 * Q8(expert)) + 2 * Q8(emb) + 4 * 2048);
    /* KV: 2 x 48 layers x 4 KV heads x 128 x 2 bytes, as for any model */
    ck_assert_uint_eq(p.kv_bytes_per_token, 2 * 48 * 4 * 128 * 2);
    char *txt = plan_text(&p);
    ck_assert_msg(strstr(txt, "experts: 128 a layer in 48 of 48 layers, 8 run a token (width 768)"), "%s", txt);
    ck_assert_msg(strstr(txt, "parameters: 30.53B, 3.35B active a token"), "%s", txt);
    ck_assert_msg(strstr(txt, "experts Q8_0 (28.99B params)"), "%s", txt);
    ck_assert_msg(strstr(txt, "decode: 3.05 GiB read a token"), "%s", txt);
    free(txt);
    /* the backend's copies (weight_extra_bytes, fake_extra: N x K + N for
     * Q8_0): attention q [2048 -> 4096], k, v [2048 -> 512], o [4096 ->
     * 2048] and the head; the F32 router asked (0), the 3-D experts and
     * the token embedding (there is a head) not */
    fake_extra fx = {.dtype = PAGODA_DTYPE_Q8_0, .vocab = p.vocab};
    o.weight_extra = fake_extra_bytes;
    o.weight_extra_ctx = &fx;
    uint64_t fixed1 = p.fixed_bytes;
    ck_assert_msg(pagoda_memplan_compute(f, &o, &p, err, sizeof err) == 0, "%s", err);
    const uint64_t head_x = 151936ull * 2048 + 151936;
    ck_assert_int_eq(fx.calls, 48 * 5 + 1);
    ck_assert_int_eq(fx.head_calls, 1);
    ck_assert_uint_eq(p.repacked_bytes, 48 * (attn + 4096 + 512 + 512 + 2048) + head_x);
    ck_assert_uint_eq(p.repacked_weight_values, 48 * attn + 151936ull * 2048);
    ck_assert_uint_eq(p.fixed_bytes, fixed1 + p.repacked_bytes);
    uint64_t repacked1 = p.repacked_bytes;
    o.weight_extra = NULL;
    char *js = pagoda_memplan_json(&p);
    json_t *root = json_loads(js, 0, NULL);
    ck_assert_ptr_nonnull(root);
    json_t *moe = json_object_get(root, "moe");
    ck_assert_int_eq(json_integer_value(json_object_get(moe, "n_experts")), 128);
    ck_assert_int_eq(json_integer_value(json_object_get(moe, "n_experts_used")), 8);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(root, "model"), "n_params_active")),
                     3353032704ll);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(root, "bytes"), "decode_per_token")),
                     (json_int_t)decode);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(json_object_get(moe, "experts_by_type"),
                                                                        "Q8_0"), "bytes")),
                     (json_int_t)p.expert_bytes);
    json_decref(root);
    free(js);

    /* two ranks: 64 whole experts each, half the attention and experts,
     * the rest whole; a token reads 4 of a rank's experts a layer on
     * average, 8 at most */
    o.tensor_parallel = 2;
    ck_assert_msg(pagoda_memplan_compute(f, &o, &p, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(p.experts_per_rank, 64);
    ck_assert_uint_eq(p.expert_bytes_per_rank, Q8(48 * 128 * expert) / 2);
    const uint64_t rank_base = 48 * (Q8(attn) / 2 + 4 * f32) + Q8(emb) + 4 * 2048 + Q8(2048);
    ck_assert_uint_eq(p.weight_bytes, 48 * (Q8(attn) / 2 + 4 * f32 + 64 * Q8(expert)) + 2 * Q8(emb) + 4 * 2048);
    ck_assert_uint_eq(p.weight_bytes_model, 48 * (Q8(attn) + 4 * f32 + 128 * Q8(expert)) + 2 * Q8(emb) + 4 * 2048);
    ck_assert_uint_eq(p.decode_bytes_per_token_rank, rank_base + 48 * 4 * Q8(expert));
    ck_assert_uint_eq(p.decode_bytes_per_token_rank_max, rank_base + 48 * 8 * Q8(expert));
    ck_assert_uint_eq(p.decode_bytes_per_token, decode);   /* the whole model's, unchanged */
    ck_assert_uint_eq(p.kv_bytes_per_token, 2 * 48 * 2 * 128 * 2);
    txt = plan_text(&p);
    ck_assert_msg(strstr(txt, "a rank of 2: 64 experts a layer (rank r: experts 64r..64r+63, 14.34 GiB)"),
                  "%s", txt);
    free(txt);
    /* a rank's copies are of its shard: q, k, v by half their rows, o by
     * half its columns (its 2048 rows whole), the head whole */
    uint64_t fixed2 = p.fixed_bytes;
    fx = (fake_extra){.dtype = PAGODA_DTYPE_Q8_0, .vocab = p.vocab};
    o.weight_extra = fake_extra_bytes;
    ck_assert_msg(pagoda_memplan_compute(f, &o, &p, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(fx.calls, 48 * 5 + 1);
    ck_assert_uint_eq(p.repacked_bytes, 48 * (attn / 2 + 2048 + 256 + 256 + 2048) + head_x);
    ck_assert_uint_eq(p.repacked_weight_values, 48 * attn / 2 + 151936ull * 2048);
    ck_assert_uint_lt(p.repacked_bytes, repacked1);
    ck_assert_uint_eq(p.fixed_bytes, fixed2 + p.repacked_bytes);
    o.weight_extra = NULL;
    js = pagoda_memplan_json(&p);
    root = json_loads(js, 0, NULL);
    json_t *rank = json_object_get(root, "per_rank");
    ck_assert_int_eq(json_integer_value(json_object_get(rank, "experts")), 64);
    ck_assert_int_eq(json_integer_value(json_object_get(rank, "decode_bytes_per_token_max")),
                     (json_int_t)(rank_base + 48 * 8 * Q8(expert)));
    json_decref(root);
    free(js);
    /* three ranks split neither the heads nor the experts */
    o.tensor_parallel = 3;
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p, err, sizeof err), PAGODA_ERR_INVALID);
    ck_assert_msg(strstr(err, "values that work: 1, 2, 4"), "%s", err);
    pagoda_gguf_close(f);
    unlink(path);
}
END_TEST

/* Qwen1.5-MoE-A2.7B's shape: the shared expert (and its gate) counts whole
 * for every token; 60 experts split 1, 2 or 4 ways, not 8, though its 16
 * heads would. */
START_TEST(qwen2_moe_shared_expert)
{
    char path[] = "/tmp/pagoda_memplan_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    gen_header("qwen2-moe-a2.7b", PAGODA_DTYPE_Q8_0, path);
    char err[512];
    gguf_file *f = pagoda_gguf_open(path, err, sizeof err);
    ck_assert_msg(f, "%s", err);
    pagoda_memplan_opts o;
    pagoda_memplan_opts_default(&o);
    o.memory_budget = 64ull << 30;
    pagoda_memplan p;
    ck_assert_msg(pagoda_memplan_compute(f, &o, &p, err, sizeof err) == 0, "%s", err);
    const uint64_t attn = 4ull * 2048 * 2048, bias = 3 * 2048, norms = 2 * 2048, router = 2048ull * 60 + 2048;
    const uint64_t shexp = 3ull * 2048 * 5632, expert = 3ull * 2048 * 1408, emb = 151936ull * 2048;
    ck_assert_uint_eq(p.n_params, 24 * (attn + bias + norms + router + shexp + 60 * expert) + 2 * emb + 2048);
    ck_assert_uint_eq(p.n_params_active, 24 * (attn + bias + norms + router + shexp + 4 * expert) + 2 * emb + 2048);
    /* 14.32B and 2.69B: Qwen's own 14.3B total, 2.7B activated */
    ck_assert_uint_eq(p.n_params / 10000000, 1431);
    ck_assert_uint_eq(p.n_params_active / 10000000, 268);
    ck_assert_int_eq(p.ffn_exp, 1408);
    const uint64_t decode = 24 * (Q8(attn) + 4 * (bias + norms + router) + Q8(shexp) + 4 * Q8(expert)) +
                            Q8(emb) + 4 * 2048 + Q8(2048);
    ck_assert_uint_eq(p.decode_bytes_per_token, decode);
    o.tensor_parallel = 4;
    ck_assert_msg(pagoda_memplan_compute(f, &o, &p, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(p.experts_per_rank, 15);
    o.tensor_parallel = 8;
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p, err, sizeof err), PAGODA_ERR_INVALID);
    ck_assert_msg(strstr(err, "tensor_parallel = 8 cannot split this model: its 60 experts must divide by 8 "
                              "(each rank holds whole experts); values that work: 1, 2, 4"), "%s", err);
    pagoda_gguf_close(f);
    unlink(path);
}
END_TEST

/* MXFP4 experts (gen-model --type mxfp4 on a MoE shape: the experts
 * MXFP4, 17 bytes per 32 values = 4.25 bits, every other matrix Q8_0):
 * the plan's weights and experts by type, the decode bytes (2 of 8
 * experts a layer), and the type named in the text and JSON plans. */
START_TEST(mxfp4_experts_plan)
{
    char path[] = "/tmp/pagoda_memplan_XXXXXX";
    pagoda_genmodel_opts g = {.shape = "qwen3moe-tiny", .dtype = PAGODA_DTYPE_MXFP4, .seed = 1};
    pagoda_memplan p;
    gguf_file *f = gen_plan(&g, path, &p);
    /* 2 layers x 3 matrices x 8 experts x dim 256 x ffn_exp 256 */
    const uint64_t exp_params = 2ull * 3 * 8 * 256 * 256, exp_bytes = exp_params / 32 * 17;
    ck_assert_uint_eq(p.expert_params_by_type[PAGODA_DTYPE_MXFP4], exp_params);
    ck_assert_uint_eq(p.expert_bytes_by_type[PAGODA_DTYPE_MXFP4], exp_bytes);
    ck_assert_uint_eq(p.expert_bytes, exp_bytes);
    ck_assert_uint_eq(p.weight_params_by_type[PAGODA_DTYPE_MXFP4], exp_params);
    ck_assert_uint_eq(p.weight_bytes_by_type[PAGODA_DTYPE_MXFP4], exp_params * 17 / 32);
    ck_assert_uint_gt(p.weight_bytes_by_type[PAGODA_DTYPE_Q8_0], 0);
    uint64_t rest_b = 0, emb_b = 0, emb_row = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (t->n_dims != 3) rest_b += t->nbytes;
        if (t->name.len == 17 && !memcmp(t->name.ptr, "token_embd.weight", 17)) {
            emb_b = t->nbytes;
            emb_row = pagoda_dtype_row_bytes(t->type, t->ne[0]);
        }
    }
    ck_assert_uint_eq(p.decode_bytes_per_token, rest_b - emb_b + emb_row + exp_bytes / 4);
    char *txt = plan_text(&p);
    ck_assert_msg(strstr(txt, "MXFP4"), "%s", txt);
    free(txt);
    ck_assert_int_eq(plan_json_type_bytes(&p, "MXFP4"), (json_int_t)exp_bytes);
    pagoda_gguf_close(f);
    unlink(path);
}
END_TEST

/* The small generated families: the plan's sums over the tensor table
 * (GLM's dense leading layer and shared expert read whole, Mixtral's
 * experts in a llama file), and the text of a dense plan. */
START_TEST(moe_tiny_plans)
{
    const char *shapes[] = {"qwen3moe-tiny", "qwen2moe-tiny", "mixtral-tiny", "glm4moe-tiny"};
    const int64_t moe_layers[] = {2, 2, 2, 2}, layers[] = {2, 2, 2, 3};
    for (int s = 0; s < 4; s++) {
        char path[] = "/tmp/pagoda_memplan_XXXXXX";
        int fd = mkstemp(path);
        ck_assert_int_ge(fd, 0);
        close(fd);
        char err[512];
        pagoda_genmodel_opts g = {.shape = shapes[s], .dtype = PAGODA_DTYPE_Q8_0, .out = path, .seed = 1};
        if (s == 3) g.layers = 3;
        ck_assert_msg(pagoda_gen_model(&g, err, sizeof err) == 0, "%s", err);
        gguf_file *f = pagoda_gguf_open(path, err, sizeof err);
        ck_assert_msg(f, "%s", err);
        pagoda_memplan_opts o;
        pagoda_memplan_opts_default(&o);
        o.memory_budget = 256ull << 20;
        pagoda_memplan p;
        ck_assert_msg(pagoda_memplan_compute(f, &o, &p, err, sizeof err) == 0, "%s: %s", shapes[s], err);
        ck_assert_int_eq(p.n_experts, 8);
        ck_assert_int_eq(p.n_experts_used, 2);
        ck_assert_int_eq(p.n_moe_layers, moe_layers[s]);
        ck_assert_int_eq(p.n_layers, layers[s]);
        uint64_t exp_b = 0, rest_b = 0, emb_row = 0, emb_b = 0;
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            const gguf_tensor *t = &f->tensors[i];
            if (t->n_dims == 3) exp_b += t->nbytes;
            else rest_b += t->nbytes;
            if (t->name.len == 17 && !memcmp(t->name.ptr, "token_embd.weight", 17)) {
                emb_b = t->nbytes;
                emb_row = pagoda_dtype_row_bytes(t->type, t->ne[0]);
            }
        }
        ck_assert_uint_eq(p.expert_bytes, exp_b);
        ck_assert_uint_eq(p.expert_bytes_by_type[PAGODA_DTYPE_Q8_0], exp_b);
        ck_assert_uint_eq(p.decode_bytes_per_token, rest_b - emb_b + emb_row + exp_b / 4);
        ck_assert_uint_lt(p.n_params_active, p.n_params);
        /* activations: what the forward pass carves, whole and a rank's */
        pagoda_hparams hp;
        ck_assert_msg(pagoda_hparams_read(f, &hp, err, sizeof err) == 0, "%s", err);
        hp.n_vocab = (int32_t)p.vocab;
        ck_assert_uint_eq(p.act_bytes, pagoda_forward_act_bytes(&hp, (int32_t)p.max_batched_tokens,
                                                                (int32_t)p.max_num_seqs));
        o.tensor_parallel = 2;
        ck_assert_msg(pagoda_memplan_compute(f, &o, &p, err, sizeof err) == 0, "%s: %s", shapes[s], err);
        hp.n_heads /= 2;
        hp.n_kv_heads /= 2;
        hp.ffn /= 2;
        hp.ffn_shexp /= 2;
        ck_assert_uint_eq(p.act_bytes, pagoda_forward_act_bytes(&hp, (int32_t)p.max_batched_tokens,
                                                                (int32_t)p.max_num_seqs));
        ck_assert_int_eq(p.experts_per_rank, 4);
        pagoda_gguf_close(f);
        unlink(path);
    }
    /* a dense model: all parameters active, every byte read but the
     * embedding table's other rows */
    gguf_file *f = open_stories();
    pagoda_memplan_opts o;
    pagoda_memplan_opts_default(&o);
    o.memory_budget = 1ull << 30;
    pagoda_memplan p;
    char err[256];
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p, err, sizeof err), 0);
    ck_assert_int_eq(p.n_experts, 0);
    ck_assert_uint_eq(p.n_params_active, p.n_params);
    bool tied = !pagoda_gguf_tensor(f, "output.weight");
    const gguf_tensor *emb = pagoda_gguf_tensor(f, "token_embd.weight");
    ck_assert_uint_eq(p.decode_bytes_per_token,
                      tied ? p.weight_bytes : p.weight_bytes - emb->nbytes + (uint64_t)emb->ne[0] * 4);
    char *txt = plan_text(&p);
    ck_assert_msg(!strstr(txt, "experts:"), "%s", txt);
    ck_assert_msg(strstr(txt, "decode: "), "%s", txt);
    free(txt);
    pagoda_gguf_close(f);
}
END_TEST

/* Bad expert keys and tensors: one line naming the key or tensor. */
static void bad_moe_header(const char *path, int64_t key_e, int64_t key_k, int64_t tensor_e,
                           uint32_t dims)
{
    gguf_writer *w = pagoda_gguf_writer_new();
    ck_assert_ptr_nonnull(w);
    const char *tok[4] = {"a", "b", "c", "d"};
    ck_assert_int_eq(pagoda_gguf_w_str(w, "general.architecture", "llama"), 0);
    const char *keys[] = {"llama.block_count", "llama.embedding_length", "llama.attention.head_count",
                          "llama.feed_forward_length", "llama.context_length"};
    const uint32_t vals[] = {1, 64, 4, 128, 256};
    for (int i = 0; i < 5; i++) ck_assert_int_eq(pagoda_gguf_w_u32(w, keys[i], vals[i]), 0);
    if (key_e >= 0) ck_assert_int_eq(pagoda_gguf_w_u32(w, "llama.expert_count", (uint32_t)key_e), 0);
    if (key_k >= 0) ck_assert_int_eq(pagoda_gguf_w_u32(w, "llama.expert_used_count", (uint32_t)key_k), 0);
    ck_assert_int_eq(pagoda_gguf_w_arr_str(w, "tokenizer.ggml.tokens", tok, 4), 0);
    int64_t ne[3] = {64, 128, tensor_e};
    ck_assert_int_eq(pagoda_gguf_w_tensor(w, "blk.0.ffn_gate_exps.weight", PAGODA_DTYPE_F32, dims, ne), 0);
    int64_t ne2[3] = {128, 64, 4};
    ck_assert_int_eq(pagoda_gguf_w_tensor(w, "blk.0.ffn_down_exps.weight", PAGODA_DTYPE_F32, 3, ne2), 0);
    FILE *fp = fopen(path, "wb");
    ck_assert_ptr_nonnull(fp);
    ck_assert_int_eq(pagoda_gguf_w_begin(w, fp), 0);
    ck_assert_int_eq(pagoda_gguf_w_data_hole(w, fp), 0);
    ck_assert_int_eq(pagoda_gguf_w_finish(w, fp), 0);
    fclose(fp);
    pagoda_gguf_writer_free(w);
}

static void expect_refusal(const char *path, const char *want)
{
    char err[512] = "";
    gguf_file *f = pagoda_gguf_open(path, err, sizeof err);
    ck_assert_msg(f, "%s", err);
    pagoda_memplan_opts o;
    pagoda_memplan_opts_default(&o);
    o.memory_budget = 1ull << 30;
    pagoda_memplan p;
    ck_assert_int_eq(pagoda_memplan_compute(f, &o, &p, err, sizeof err), PAGODA_ERR_INVALID);
    ck_assert_msg(strstr(err, want), "wanted '%s' in: %s", want, err);
    pagoda_gguf_close(f);
}

START_TEST(moe_bad_input)
{
    char path[] = "/tmp/pagoda_memplan_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    bad_moe_header(path, 4, 5, 4, 3);
    expect_refusal(path, "key llama.expert_used_count = 5 must be 1..4 (llama.expert_count)");
    bad_moe_header(path, 4, 0, 4, 3);
    expect_refusal(path, "key llama.expert_used_count = 0 must be 1..4");
    bad_moe_header(path, 4, -1, 4, 3);
    expect_refusal(path, "missing key llama.expert_used_count");
    bad_moe_header(path, 8, 2, 4, 3);
    expect_refusal(path, "llama.expert_count is 8 but tensor blk.0.ffn_gate_exps.weight holds 4 experts");
    bad_moe_header(path, -1, 2, 4, 3);
    expect_refusal(path, "llama.expert_count is missing but tensor blk.0.ffn_gate_exps.weight holds 4 experts");
    bad_moe_header(path, 4, 2, 6, 3);
    expect_refusal(path, "tensor blk.0.ffn_down_exps.weight holds 4 experts, blk.0.ffn_gate_exps.weight 6");
    bad_moe_header(path, 4, 2, 1, 2);
    expect_refusal(path, "tensor blk.0.ffn_gate_exps.weight has 2 dimensions; an expert tensor has 3");
    unlink(path);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("memplan");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, stories_plan);
    tcase_add_test(tc, too_small);
    tcase_add_test(tc, options_and_limits);
    tcase_add_test(tc, generated_gqa_and_json);
    tcase_add_test(tc, k_quant_weights);
    tcase_add_test(tc, gemma3_sliding_window);
    tcase_add_test(tc, gemma3_plan_is_what_is_allocated);
    tcase_add_test(tc, q8_0_kv);
    tcase_add_test(tc, gemma3_q8_0_window_pool);
    tcase_add_test(tc, qwen3_30b_a3b_plan);
    tcase_add_test(tc, qwen2_moe_shared_expert);
    tcase_add_test(tc, moe_tiny_plans);
    tcase_add_test(tc, mxfp4_experts_plan);
    tcase_add_test(tc, moe_bad_input);
    tcase_add_test(tc, repacked_counted);
    tcase_add_loop_test(tc, repacked_held_gauge, 0, 3);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
