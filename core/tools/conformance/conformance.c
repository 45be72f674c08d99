/*
 * conformance.c: pagoda-conformance, the backend conformance runner.
 *
 *   pagoda-conformance --backend NAME [--plugin PATH] [--model FILE]
 *                      [--golden FILE] [--seed N] [--set sec.key=value]...
 *                      [--skip-model] [-v]
 *
 * Loads the backend plugin through the core's loader (the same checks the
 * server makes), creates it with a host table, runs every op against the
 * plain-C references in cases.c on fresh random inputs, then runs the
 * bundled model greedily end to end through the backend (the engine with
 * engine.backend=NAME, F32 and F16 KV) and compares its tokens with the
 * golden ones llama2.c produced. Prints each failing case with its shapes
 * and largest error, a summary table per op, and exits 1 on any failure
 * (2 on bad usage or a plugin that does not load).
 *
 * A host program: it links the core. Plugins never do.
 * Not for: the references and op cases (cases.c).
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "conformance.h"
#include "host.h"
#include "log.h"
#include "plugin_loader.h"
#include "runtime.h"
#include "tokenizer.h"

#ifndef PAGODA_SOURCE_DIR
#define PAGODA_SOURCE_DIR ""
#endif
#ifndef PAGODA_DATA_RELATIVE_DIR
#define PAGODA_DATA_RELATIVE_DIR "../share/pagoda"
#endif

/* ------------------------------------------------------------ harness */

uint64_t cf_rand(cf *c)
{
    /* xorshift64*: seeded, the same sequence on every machine */
    c->rng ^= c->rng >> 12;
    c->rng ^= c->rng << 25;
    c->rng ^= c->rng >> 27;
    return c->rng * 2685821657736338717ull;
}

float cf_uniform(cf *c, float lo, float hi)
{
    return lo + (hi - lo) * (float)((cf_rand(c) >> 40) * (1.0 / 16777216.0));
}

int32_t cf_randint(cf *c, int32_t n)
{
    return n <= 0 ? 0 : (int32_t)(cf_rand(c) % (uint64_t)n);
}

void cf_fill(cf *c, float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) x[i] = cf_uniform(c, lo, hi);
}

void cf_record(cf *c, const char *op, const char *shape, double err, double tol, int verdict,
               const char *why_fmt, ...)
{
    if (c->n_res == c->cap_res) {
        size_t cap = c->cap_res ? c->cap_res * 2 : 64;
        cf_result *r = realloc(c->res, cap * sizeof *r);
        if (!r) {
            fprintf(stderr, "pagoda-conformance: out of memory recording %s %s\n", op, shape);
            return;
        }
        c->res = r;
        c->cap_res = cap;
    }
    cf_result *r = &c->res[c->n_res++];
    memset(r, 0, sizeof *r);
    snprintf(r->op, sizeof r->op, "%s", op);
    snprintf(r->shape, sizeof r->shape, "%s", shape);
    r->err = err;
    r->tol = tol;
    r->verdict = verdict;
    if (verdict != CF_PASS) {
        va_list ap;
        va_start(ap, why_fmt);
        vsnprintf(r->why, sizeof r->why, why_fmt, ap);
        va_end(ap);
    }
    if (verdict == CF_FAIL)
        printf("FAIL %-17s %-52s err %.3g (tol %.3g): %s\n", op, shape, err, tol, r->why);
    else if (c->verbose)
        printf("%s %-17s %-52s err %.3g (tol %.3g)%s%s\n", verdict == CF_PASS ? "ok  " : "skip",
               op, shape, err, tol, *r->why ? ": " : "", r->why);
}

void cf_record_call(cf *c, const char *op, const char *shape, const char *call, int st)
{
    const char *msg = pagoda_host_last_error(c->host);
    cf_record(c, op, shape, INFINITY, 0, CF_FAIL, "%s returned %d (%s)%s%s", call, st,
              pagoda_status_str(st), msg ? ": " : "", msg ? msg : "");
    pagoda_host_clear_error(c->host);
}

int cf_tensor_new(cf *c, int purpose, int dtype, int64_t rows, int64_t cols, size_t pad,
                  const void *host, pagoda_buffer **buf, pagoda_tensor *t)
{
    size_t rb = pagoda_dtype_row_bytes(dtype, cols);
    size_t stride = rb + pad;
    size_t size = c->align + stride * (size_t)(rows > 0 ? rows : 0);
    *buf = NULL;
    int st = c->ops->buffer_alloc(c->be, purpose, size, buf);
    if (st || !*buf) return st ? st : PAGODA_ERR_INTERNAL;
    *t = (pagoda_tensor){.buf = *buf, .offset = c->align, .dtype = dtype, .rows = rows,
                         .cols = cols, .row_stride = stride};
    if (host) {
        if (!pad) {
            st = c->ops->upload(c->be, *buf, c->align, host, rb * (size_t)rows);
        } else {
            for (int64_t r = 0; r < rows && !st; r++)
                st = c->ops->upload(c->be, *buf, c->align + stride * (size_t)r,
                                    (const uint8_t *)host + rb * (size_t)r, rb);
        }
        if (st) {
            c->ops->buffer_free(c->be, *buf);
            *buf = NULL;
        }
    }
    return st;
}

int cf_tensor_get(cf *c, const pagoda_tensor *t, float *dst)
{
    size_t rb = (size_t)t->cols * sizeof(float);
    int st = PAGODA_OK;
    if (t->row_stride == rb)
        return c->ops->download(c->be, t->buf, t->offset, dst, rb * (size_t)t->rows);
    for (int64_t r = 0; r < t->rows && !st; r++)
        st = c->ops->download(c->be, t->buf, t->offset + t->row_stride * (size_t)r,
                              dst + r * t->cols, rb);
    return st;
}

void cf_buffer_free(cf *c, pagoda_buffer *b)
{
    if (b) c->ops->buffer_free(c->be, b);
}

double cf_max_rel_err(const float *got, const double *want, size_t n)
{
    double mx = 0, scale = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs(want[i]) > scale) scale = fabs(want[i]);
    if (scale < 1e-6) scale = 1;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        double e = fabs((double)got[i] - want[i]);
        if (e > mx) mx = e;
    }
    return mx / scale;
}

/* ------------------------------------------------------------ options */

typedef struct opts {
    const char *backend;
    const char *plugin;
    const char *model;
    const char *golden;
    uint64_t seed;
    bool verbose;
    bool skip_model;
    const char *sets[64];
    int n_sets;
} opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: pagoda-conformance --backend NAME [--plugin PATH] [--model FILE]\n"
            "                          [--golden FILE] [--seed N] [--set section.key=value]...\n"
            "                          [--skip-model] [-v]\n"
            "Runs every op of the backend plugin NAME against plain-C references on random\n"
            "inputs (tolerances per weight type), then the bundled model's greedy tokens\n"
            "end to end through it. --plugin loads that file instead of searching\n"
            "PAGODA_PLUGIN_PATH and the plugin folders. --model: another GGUF (its tokens\n"
            "are then compared with the cpu backend's, for information). Exit 0:\n"
            "conformant; 1: a case\n"
            "failed; 2: usage or load error.\n");
}

static int parse_args(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 1234;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); exit(0); }
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) o->verbose = true;
        else if (!strcmp(a, "--skip-model")) o->skip_model = true;
        else if (!v) { fprintf(stderr, "pagoda-conformance: %s needs a value\n", a); return -1; }
        else if (!strcmp(a, "--backend")) { o->backend = v; i++; }
        else if (!strcmp(a, "--plugin")) { o->plugin = v; i++; }
        else if (!strcmp(a, "--model")) { o->model = v; i++; }
        else if (!strcmp(a, "--golden")) { o->golden = v; i++; }
        else if (!strcmp(a, "--seed")) {
            char *end;
            o->seed = strtoull(v, &end, 10);
            if (*end || !*v) { fprintf(stderr, "pagoda-conformance: --seed %s is not a number\n", v); return -1; }
            i++;
        } else if (!strcmp(a, "--set")) {
            if (o->n_sets == 64) { fprintf(stderr, "pagoda-conformance: too many --set\n"); return -1; }
            o->sets[o->n_sets++] = v;
            i++;
        } else {
            fprintf(stderr, "pagoda-conformance: unknown argument '%s' (see --help)\n", a);
            return -1;
        }
    }
    if (!o->backend) { fprintf(stderr, "pagoda-conformance: --backend NAME is required\n"); return -1; }
    if (o->seed == 0) o->seed = 1; /* xorshift's one bad seed */
    return 0;
}

/* A data file: beside the installed binary (../share/pagoda/...), else in
 * the source tree this runner was built from. */
static bool find_data(const char *rel, char *out, size_t n)
{
    char exe[PATH_MAX];
    ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (l > 0) {
        exe[l] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            int w = snprintf(out, n, "%s/%s/%s", exe, PAGODA_DATA_RELATIVE_DIR, rel);
            if (w > 0 && (size_t)w < n && access(out, R_OK) == 0) return true;
        }
    }
    const char *src[] = {"models/", "tests/data/"};
    for (int i = 0; i < 2; i++) {
        const char *base = strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel;
        snprintf(out, n, "%s/%s%s", PAGODA_SOURCE_DIR, src[i], base);
        if (*PAGODA_SOURCE_DIR && access(out, R_OK) == 0) return true;
    }
    return false;
}

static int config_for(const opts *o, pagoda_config **out)
{
    char err[1024] = "", buf[PATH_MAX + 64];
    pagoda_config *cfg = pagoda_config_new_empty();
    if (!cfg) return PAGODA_ERR_NOMEM;
    int st = PAGODA_OK;
    if (o->plugin) {
        char abs[PATH_MAX];
        snprintf(buf, sizeof buf, "backend.%s.path=%s", o->backend,
                 realpath(o->plugin, abs) ? abs : o->plugin);
        st = pagoda_config_set(cfg, buf, err, sizeof err);
    }
    for (int i = 0; i < o->n_sets && !st; i++) st = pagoda_config_set(cfg, o->sets[i], err, sizeof err);
    if (st) {
        fprintf(stderr, "pagoda-conformance: %s\n", err);
        pagoda_config_free(cfg);
        return st;
    }
    *out = cfg;
    return PAGODA_OK;
}

/* --------------------------------------------------------- end to end */

typedef struct e2e_result {
    pthread_mutex_t mu;
    int32_t tokens[1024];
    int32_t n;
    int n_final, finish;
    char error[512];
} e2e_result;

static void e2e_cb(void *user, const pagoda_event *ev)
{
    e2e_result *r = user;
    pthread_mutex_lock(&r->mu);
    if (ev->type == PAGODA_EVENT_TOKEN && ev->token >= 0 && r->n < 1024) r->tokens[r->n++] = ev->token;
    if (ev->type == PAGODA_EVENT_FINAL) {
        r->n_final++;
        r->finish = ev->finish_reason;
        if (ev->error) snprintf(r->error, sizeof r->error, "%s", ev->error);
    }
    pthread_mutex_unlock(&r->mu);
}

/* Greedy generation after `prompt` through `backend`: n_gen tokens, or
 * when n_total > 0, as many as make n_total with the prompt's own tokens.
 * Fills prompt_ids (without BOS), *n_gen_out and the generated tokens. */
static int generate(const opts *o, const char *backend, const char *model, const char *kv_dtype,
                    const char *prompt, int32_t n_gen, int32_t n_total, int32_t *prompt_ids,
                    int32_t *n_prompt, int32_t *n_gen_out, e2e_result *r, char *err, size_t err_len)
{
    pagoda_config *cfg = NULL;
    pagoda_runtime *rt = NULL;
    opts o2 = *o;
    if (strcmp(backend, o->backend) != 0) o2.plugin = NULL; /* the reference run uses the cpu plugin */
    int st = config_for(&o2, &cfg);
    if (st) { snprintf(err, err_len, "bad settings"); return st; }
    char buf[PATH_MAX + 64];
    const char *kv[] = {o->verbose ? "engine.log_level=warn" : "engine.log_level=error", "engine.kv_cache_tokens=1024", NULL};
    snprintf(buf, sizeof buf, "engine.model=%s", model);
    st = pagoda_config_set(cfg, buf, err, err_len);
    for (int i = 0; kv[i] && !st; i++) st = pagoda_config_set(cfg, kv[i], err, err_len);
    if (!st) { snprintf(buf, sizeof buf, "engine.backend=%s", backend); st = pagoda_config_set(cfg, buf, err, err_len); }
    if (!st) { snprintf(buf, sizeof buf, "engine.kv_dtype=%s", kv_dtype); st = pagoda_config_set(cfg, buf, err, err_len); }
    if (st) goto out;
    if ((st = pagoda_runtime_open(cfg, false, false, &rt, err, err_len))) goto out;
    int32_t ids[512], n = 0;
    if ((st = pagoda_tokenize(rt->model->tok, prompt, strlen(prompt), true, false, ids, 512, &n))) {
        snprintf(err, err_len, "cannot tokenize the prompt");
        goto out;
    }
    *n_prompt = 0;
    for (int32_t i = 0; i < n && i < 512; i++)
        if (i > 0 || ids[0] != pagoda_tokenizer_bos(rt->model->tok)) prompt_ids[(*n_prompt)++] = ids[i];
    if (n_total > 0) n_gen = n_total - *n_prompt;
    *n_gen_out = n_gen;
    if (n_gen <= 0) {
        snprintf(err, err_len, "the prompt alone has %d tokens", *n_prompt);
        st = PAGODA_ERR_INVALID;
        goto out;
    }
    if ((st = pagoda_engine_start(rt->engine))) { snprintf(err, err_len, "engine start failed"); goto out; }
    pagoda_request req;
    pagoda_engine_request_defaults(rt->engine, &req);
    req.prompt = prompt;
    req.prompt_len = strlen(prompt);
    req.max_tokens = n_gen;
    req.temperature = 0.0f;
    req.ignore_eos = true;
    uint64_t id;
    if ((st = pagoda_engine_submit(rt->engine, &req, e2e_cb, r, &id, err, err_len))) goto out;
    pagoda_engine_wait_idle(rt->engine);
    if (r->n_final != 1 || r->finish == PAGODA_FINISH_ERROR) {
        snprintf(err, err_len, "request ended with %d final events, reason %s%s%s", r->n_final,
                 pagoda_finish_reason_str(r->finish), *r->error ? ": " : "", r->error);
        st = PAGODA_ERR_INTERNAL;
    }
out:
    if (rt) pagoda_runtime_close(rt);
    pagoda_config_free(cfg);
    return st;
}

static void e2e(cf *c, const opts *o, const char *model, const char *golden, bool use_golden)
{
    char err[2048] = "";
    const char *prompt = "Once upon a time";
    int32_t want[1024], n_want = 0;
    json_t *g = NULL;
    if (use_golden) {
        json_error_t je;
        g = json_load_file(golden, 0, &je);
        json_t *cs = g ? json_array_get(json_object_get(g, "cases"), 0) : NULL;
        json_t *toks = cs ? json_object_get(cs, "generated_tokens") : NULL;
        const char *p = cs ? json_string_value(json_object_get(cs, "prompt")) : NULL;
        if (!toks || !p) {
            cf_record(c, "model", golden, 0, 0, CF_FAIL, "cannot read golden tokens: %s",
                      g ? "no cases[0].prompt/generated_tokens" : je.text);
            json_decref(g);
            return;
        }
        prompt = p;
        for (size_t i = 0; i < json_array_size(toks) && n_want < 1024; i++)
            want[n_want++] = (int32_t)json_integer_value(json_array_get(toks, i));
    }
    const char *kvs[] = {"f32", "f16"};
    const int kvdt[] = {PAGODA_DTYPE_F32, PAGODA_DTYPE_F16};
    for (int k = 0; k < 2; k++) {
        char shape[192];
        const char *base = strrchr(model, '/') ? strrchr(model, '/') + 1 : model;
        snprintf(shape, sizeof shape, "%.120s, KV %s, greedy", base, kvs[k]);
        if (!((c->info.kv_types >> kvdt[k]) & 1)) {
            cf_record(c, "model", shape, 0, 0, CF_SKIP, "KV type not advertised");
            continue;
        }
        int32_t pids[512], np = 0, n_gen = 0;
        e2e_result *r = calloc(1, sizeof *r), *ref = NULL;
        if (!r) return;
        pthread_mutex_init(&r->mu, NULL);
        int st = generate(o, o->backend, model, kvs[k], prompt, 64, use_golden ? n_want : 0, pids,
                          &np, &n_gen, r, err, sizeof err);
        if (st) {
            cf_record(c, "model", shape, 0, 0, CF_FAIL, "%s", err);
            goto next;
        }
        if (use_golden)
            for (int32_t i = 0; i < np && i < n_want; i++)
                if (pids[i] != want[i]) {
                    cf_record(c, "model", shape, 0, 0, CF_FAIL, "prompt token %d is %d, golden %d", i,
                              pids[i], want[i]);
                    goto next;
                }
        const int32_t *w = want + np;
        if (!use_golden) {
            ref = calloc(1, sizeof *ref);
            if (!ref) goto next;
            pthread_mutex_init(&ref->mu, NULL);
            int32_t p2[512], n2, g2;
            if ((st = generate(o, "cpu", model, kvs[k], prompt, n_gen, 0, p2, &n2, &g2, ref, err, sizeof err))) {
                cf_record(c, "model", shape, 0, 0, CF_FAIL, "reference run on the cpu backend: %s", err);
                goto next;
            }
            w = ref->tokens;
        }
        int32_t first = -1, n_diff = 0;
        for (int32_t i = 0; i < n_gen; i++)
            if (i >= r->n || r->tokens[i] != w[i]) { n_diff++; if (first < 0) first = i; }
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), ", %d tokens vs %s", n_gen,
                 use_golden ? "golden" : "cpu");
        if (n_diff && !use_golden) {
            /* Another model has no golden tokens, and the cpu backend rounds
             * activations (8-bit for quantized weights), which legitimately
             * changes greedy paths on near-ties: reported, not failed. */
            cf_record(c, "model", shape, n_diff, 0, CF_SKIP,
                      "informational: %d of %d tokens differ from the cpu backend's, first at %d (got %d, cpu %d)",
                      n_diff, n_gen, first, first < r->n ? r->tokens[first] : -1, w[first]);
            printf("NOTE model %s: %s\n", shape, c->res[c->n_res - 1].why);
        } else if (n_diff) {
            cf_record(c, "model", shape, n_diff, 0, CF_FAIL,
                      "%d of %d tokens differ, first at %d (got %d, want %d)", n_diff, n_gen, first,
                      first < r->n ? r->tokens[first] : -1, w[first]);
        }
        else
            cf_record(c, "model", shape, 0, 0, CF_PASS, " ");
next:
        if (ref) { pthread_mutex_destroy(&ref->mu); free(ref); }
        pthread_mutex_destroy(&r->mu);
        free(r);
    }
    json_decref(g);
}

/* --------------------------------------------------------------- main */

/* The CPU backend's OpenBLAS picks a slow core type on some CPUs unless
 * told before it loads (pagoda's main does the same). */
static void openblas_coretype_setup(void)
{
    if (getenv("OPENBLAS_CORETYPE")) return;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        setenv("OPENBLAS_CORETYPE", "SkylakeX", 0);
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        setenv("OPENBLAS_CORETYPE", "Haswell", 0);
#endif
}

static void summary(const cf *c)
{
    typedef struct row { char op[32]; int pass, fail, skip; double worst, tol; char worst_shape[192]; } row;
    row rows[32];
    int nr = 0;
    for (size_t i = 0; i < c->n_res; i++) {
        const cf_result *r = &c->res[i];
        int j = 0;
        while (j < nr && strcmp(rows[j].op, r->op)) j++;
        if (j == nr) {
            if (nr == 32) continue;
            memset(&rows[nr], 0, sizeof rows[nr]);
            snprintf(rows[nr].op, sizeof rows[nr].op, "%s", r->op);
            rows[nr].worst = -1;
            nr++;
        }
        row *w = &rows[j];
        if (r->verdict == CF_PASS) w->pass++;
        else if (r->verdict == CF_FAIL) w->fail++;
        else w->skip++;
        /* worst as a fraction of its own tolerance, so types compare */
        double frac = r->tol > 0 ? r->err / r->tol : (r->err > 0 ? INFINITY : 0);
        double wfrac = w->tol > 0 ? w->worst / w->tol : (w->worst > 0 ? INFINITY : 0);
        if (r->verdict != CF_SKIP && (w->worst < 0 || frac > wfrac)) {
            w->worst = r->err;
            w->tol = r->tol;
            snprintf(w->worst_shape, sizeof w->worst_shape, "%s", r->shape);
        }
    }
    printf("\n%-18s %5s %5s %5s  %-10s %-10s %s\n", "op", "pass", "FAIL", "skip", "worst err", "its tol",
           "worst case");
    for (int j = 0; j < nr; j++) {
        const row *w = &rows[j];
        if (w->worst < 0)
            printf("%-18s %5d %5d %5d  %-10s %-10s\n", w->op, w->pass, w->fail, w->skip, "-", "-");
        else
            printf("%-18s %5d %5d %5d  %-10.3g %-10.3g %s\n", w->op, w->pass, w->fail, w->skip,
                   w->worst, w->tol, w->worst_shape);
    }
}

int main(int argc, char **argv)
{
    opts o;
    if (parse_args(argc, argv, &o)) return 2;
    openblas_coretype_setup();
    pagoda_log_set_level(o.verbose ? PAGODA_LOG_INFO : PAGODA_LOG_WARN);

    int rc = 2;
    char err[4096] = "";
    pagoda_config *cfg = NULL;
    pagoda_plugin *p = NULL;
    pagoda_host *host = NULL;
    void *be = NULL;
    cf c;
    memset(&c, 0, sizeof c);
    c.rng = o.seed;
    c.verbose = o.verbose;

    if (config_for(&o, &cfg)) goto out;
    if (pagoda_plugin_load(cfg, PAGODA_KIND_BACKEND, o.backend, &p, err, sizeof err)) {
        fprintf(stderr, "pagoda-conformance: %s\n", err);
        goto out;
    }
    if (!(host = pagoda_host_new(cfg, PAGODA_KIND_BACKEND, o.backend))) {
        fprintf(stderr, "pagoda-conformance: out of memory\n");
        goto out;
    }
    if (pagoda_plugin_create(p, host, &be, err, sizeof err)) {
        fprintf(stderr, "pagoda-conformance: %s\n", err);
        goto out;
    }
    c.ops = &p->ops.backend;
    c.be = be;
    c.host = host;
    c.info.struct_size = sizeof c.info;
    if (c.ops->info(be, &c.info)) {
        const char *m = pagoda_host_last_error(host);
        fprintf(stderr, "pagoda-conformance: backend.%s: info failed%s%s\n", o.backend, m ? ": " : "", m ? m : "");
        goto out;
    }
    c.align = c.info.alignment ? c.info.alignment : 16;
    if (c.align < 4) c.align = 4;
    printf("pagoda-conformance: backend %s from %s\n  %s, plugin %s, ABI %u.%u, seed %llu\n  weight types:",
           o.backend, p->path, c.info.name, p->desc.version ? p->desc.version : "?",
           p->desc.abi_major, p->desc.abi_minor, (unsigned long long)o.seed);
    for (int t = 0; t < 64; t++)
        if ((c.info.weight_types >> t) & 1) printf(" %s", pagoda_dtype_name(t));
    printf("; KV types:");
    for (int t = 0; t < 64; t++)
        if ((c.info.kv_types >> t) & 1) printf(" %s", pagoda_dtype_name(t));
    printf("; alignment %u\n\n", c.info.alignment);

    cf_run_extra_ops(&c);   /* first: nothing has met a matmul yet */
    cf_run_all_ops(&c);
    /* The op instance goes before the engine makes its own. */
    pagoda_plugin_destroy(p, be);
    be = NULL;

    if (o.skip_model) {
        cf_record(&c, "model", "-", 0, 0, CF_SKIP, "--skip-model");
    } else {
        char model[PATH_MAX], golden[PATH_MAX];
        bool use_golden = !o.model;
        if (o.model) snprintf(model, sizeof model, "%s", o.model);
        else if (!find_data("models/stories260K.gguf", model, sizeof model)) {
            cf_record(&c, "model", "stories260K", 0, 0, CF_FAIL,
                      "bundled model not found (share/pagoda/models beside the binary, or the source tree); give --model");
            use_golden = false;
            model[0] = '\0';
        }
        if (use_golden) {
            if (o.golden) snprintf(golden, sizeof golden, "%s", o.golden);
            else if (!find_data("stories260K.golden.json", golden, sizeof golden)) {
                cf_record(&c, "model", "stories260K", 0, 0, CF_FAIL, "golden tokens not found; give --golden");
                model[0] = '\0';
            }
        }
        if (*model) e2e(&c, &o, model, golden, use_golden);
    }

    summary(&c);
    size_t fails = 0;
    for (size_t i = 0; i < c.n_res; i++) fails += c.res[i].verdict == CF_FAIL;
    printf("\n%s: backend %s, %zu cases, %zu failed\n", fails ? "NOT CONFORMANT" : "CONFORMANT",
           o.backend, c.n_res, fails);
    rc = fails ? 1 : 0;
out:
    if (be) pagoda_plugin_destroy(p, be);
    pagoda_host_free(host);
    pagoda_plugin_free(p);
    pagoda_config_free(cfg);
    free(c.res);
    return rc;
}
