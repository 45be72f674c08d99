#define _GNU_SOURCE
/*
 * perplexity.c: `pagoda perplexity` (see perplexity.h, docs/perplexity.md).
 * The file is tokenized once; chunk c is tokens [c*ctx, (c+1)*ctx) with its
 * first token replaced by BOS where the model adds one, submitted to the
 * engine as a score-only request with prompt logprobs from index
 * ctx/2 + 1 on, several chunks in flight so the scheduler batches them.
 * The PROMPT events' logprobs are summed per chunk; the running estimate is
 * printed in chunk order, whatever order the chunks finish in.
 * Not for: the engine's scoring itself (engine_step.c) or other metrics
 * (KL divergence, HellaSwag: llama-perplexity has them, this does not).
 */
#include "perplexity.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "progress.h"
#include "runtime.h"
#include "tokenizer.h"

#define ERR(...) snprintf(err, err_len, __VA_ARGS__)

enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

/* What the engine thread fills for one chunk in flight. */
typedef struct ppl_chunk {
    struct ppl_run *run;
    double nll, nll2;
    int32_t count;
    bool done;
    int finish;
    char error[256];
} ppl_chunk;

typedef struct ppl_run {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t first;              /* the first scored prompt index is first + 1 */
    int32_t in_flight;
} ppl_run;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* [engine thread] */
static void on_event(void *user, const pagoda_event *ev)
{
    ppl_chunk *c = user;
    ppl_run *r = c->run;
    pthread_mutex_lock(&r->mu);
    if (ev->type == PAGODA_EVENT_PROMPT && ev->position > r->first) {
        double v = -(double)ev->logprob;
        c->nll += v;
        c->nll2 += v * v;
        c->count++;
    } else if (ev->type == PAGODA_EVENT_FINAL) {
        c->finish = ev->finish_reason;
        if (ev->error) snprintf(c->error, sizeof c->error, "%s", ev->error);
        c->done = true;
        r->in_flight--;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
}

static int read_file(const char *path, char **out, size_t *len, char *err, size_t err_len)
{
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) { ERR("cannot open %s: %s", path, strerror(errno)); return PAGODA_ERR_IO; }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    int st = PAGODA_OK;
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        cap *= 2;
        char *p = realloc(buf, cap + 1);
        if (!p) { free(buf); buf = NULL; }
        else buf = p;
    }
    if (!buf) { ERR("out of memory reading %s", path); st = PAGODA_ERR_NOMEM; }
    else if (ferror(f)) { ERR("cannot read %s: %s", path, strerror(errno)); st = PAGODA_ERR_IO; }
    fclose(f);
    if (st) { free(buf); return st; }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return PAGODA_OK;
}

/* The runtime: the built-in defaults (as `pagoda bench` has them) or the
 * user's config, the model, a batch budget of `parallel` chunks, then the
 * user's --set, which win. */
static int open_runtime(const pagoda_ppl_opts *o, pagoda_config **cfg_out, pagoda_runtime **rt_out,
                        char *err, size_t err_len)
{
    *cfg_out = NULL;
    *rt_out = NULL;
    pagoda_config *cfg = o->config ? pagoda_config_load(o->config, err, err_len) : pagoda_config_new_empty();
    if (!cfg) return PAGODA_ERR_INVALID;
    int st = PAGODA_OK;
    char buf[4200];
    if (!o->config) {
        static const char *const defaults[] = {
            "engine.backend=cpu", "engine.scheduler=continuous", "engine.kvcache=paged",
            "engine.log_level=warn", "engine.chat_template=chatml", NULL};
        for (int i = 0; defaults[i] && !st; i++) st = pagoda_config_set(cfg, defaults[i], err, err_len);
        /* whole chunks batched together: one step can prefill all in flight */
        snprintf(buf, sizeof buf, "scheduler.continuous.max_batched_tokens=%lld",
                 (long long)o->ctx * o->parallel);
        if (!st) st = pagoda_config_set(cfg, buf, err, err_len);
    }
    if (!st && o->model) {
        snprintf(buf, sizeof buf, "engine.model=%s", o->model);
        st = pagoda_config_set(cfg, buf, err, err_len);
    }
    for (int i = 0; i < o->n_sets && !st; i++) st = pagoda_config_set(cfg, o->sets[i], err, err_len);
    if (!st) st = pagoda_runtime_open(cfg, false, false, rt_out, err, err_len);
    if (!st && pagoda_engine_start((*rt_out)->engine)) {
        ERR("the engine did not start");
        st = PAGODA_ERR_INTERNAL;
    }
    if (st) {
        pagoda_runtime_close(*rt_out);
        *rt_out = NULL;
        pagoda_config_free(cfg);
        return st;
    }
    *cfg_out = cfg;
    return PAGODA_OK;
}

/* Submit chunk c: its tokens as given (no BOS added by the engine: the
 * first one already is BOS where the model wants it), scored from index
 * first + 1, nothing generated. */
static int submit_chunk(pagoda_engine *e, const int32_t *tokens, int32_t ctx, int32_t first,
                        ppl_chunk *c, char *err, size_t err_len)
{
    pagoda_request req;
    pagoda_engine_request_defaults(e, &req);
    req.prompt = NULL;
    req.prompt_tokens = tokens;
    req.n_prompt_tokens = ctx;
    req.add_special = false;
    req.temperature = 0;
    req.prompt_logprobs = 0;
    req.prompt_logprobs_from = first + 1;
    req.score_only = true;
    uint64_t id = 0;
    return pagoda_engine_submit(e, &req, on_event, c, &id, err, err_len);
}

/* "[k]PPL" after chunk k, as llama-perplexity prints it: ten to a line. */
static void print_running(FILE *f, const pagoda_ppl_result *res, int32_t k, int32_t per_chunk,
                          int32_t n_chunks)
{
    double nll = 0;
    for (int32_t c = 0; c < k; c++) nll += res->chunk_nll[c];
    fprintf(f, "[%d]%.4f%s", k, exp(nll / ((double)k * per_chunk)),
            k % 10 == 0 || k == n_chunks ? "\n" : ",");
    fflush(f);
}

static void finish_estimate(pagoda_ppl_result *res)
{
    if (res->count <= 0) return;
    double mean = res->nll / (double)res->count;
    res->ppl = exp(mean);
    /* the standard error of the mean NLL, carried through exp() */
    double var = res->nll2 / (double)res->count - mean * mean;
    res->ppl_err = var > 0 && res->count > 1 ? sqrt(var / (double)(res->count - 1)) * res->ppl : 0;
}

int pagoda_perplexity_run(const pagoda_ppl_opts *o, pagoda_ppl_result *res, char *err,
                          size_t err_len)
{
    memset(res, 0, sizeof *res);
    pagoda_config *cfg = NULL;
    pagoda_runtime *rt = NULL;
    char *text = NULL;
    int32_t *toks = NULL, *chunk_toks = NULL;
    ppl_chunk *chunks = NULL;
    ppl_run run = {.first = o->ctx / 2};
    pthread_mutex_init(&run.mu, NULL);
    pthread_cond_init(&run.cv, NULL);
    pagoda_progress bar;
    bool show = false;
    size_t len = 0;
    int st;
    if (o->ctx < 4) { ERR("--ctx %d: a chunk needs at least 4 tokens", o->ctx); st = PAGODA_ERR_INVALID; goto out; }
    if (o->parallel < 1) { ERR("--parallel %d: at least 1", o->parallel); st = PAGODA_ERR_INVALID; goto out; }
    if ((st = read_file(o->file, &text, &len, err, err_len))) goto out;
    if ((st = open_runtime(o, &cfg, &rt, err, err_len))) goto out;
    pagoda_engine *e = rt->engine;
    const pagoda_tokenizer *tok = rt->model->tok;
    int32_t serve_ctx = pagoda_engine_get_opts(e)->max_seq_len;
    if (o->ctx > serve_ctx) {
        ERR("--ctx %d is more than the %d tokens a sequence may hold here (the model's training "
            "context or [engine] max_seq_len)", o->ctx, serve_ctx);
        st = PAGODA_ERR_INVALID;
        goto out;
    }

    /* The whole text as llama-perplexity tokenizes it: BOS in front where
     * the model adds one, no EOS, special-token text taken literally. */
    bool add_bos = pagoda_tokenizer_add_bos(tok);
    int32_t bos = pagoda_tokenizer_bos(tok);
    int32_t cap = (int32_t)(len < INT32_MAX - 16 ? len + 16 : INT32_MAX), n = 0;
    toks = malloc(sizeof(int32_t) * (size_t)cap);
    if (!toks) { ERR("out of memory"); st = PAGODA_ERR_NOMEM; goto out; }
    int32_t k0 = add_bos ? 1 : 0;
    if (add_bos) toks[0] = bos;
    st = pagoda_tokenize(tok, text, len, false, false, toks + k0, cap - k0, &n);
    if (!st && n > cap - k0) {
        ERR("%s: more tokens (%d) than bytes: the tokenizer misbehaves", o->file, n);
        st = PAGODA_ERR_INTERNAL;
    }
    if (st) {
        if (!err[0]) ERR("%s could not be tokenized (%s)", o->file, pagoda_status_str(st));
        goto out;
    }
    res->n_file_tokens = n + k0;
    int32_t n_chunks = (int32_t)(res->n_file_tokens / o->ctx);
    if (o->max_chunks > 0 && o->max_chunks < n_chunks) n_chunks = o->max_chunks;
    if (n_chunks < 1) {
        ERR("%s has %lld tokens, fewer than one chunk of --ctx %d", o->file,
            (long long)res->n_file_tokens, o->ctx);
        st = PAGODA_ERR_INVALID;
        goto out;
    }
    res->n_chunks = n_chunks;
    res->first = run.first;
    chunks = calloc((size_t)n_chunks, sizeof *chunks);
    chunk_toks = malloc(sizeof(int32_t) * (size_t)n_chunks * (size_t)o->ctx);
    res->chunk_nll = calloc((size_t)n_chunks, sizeof(double));
    if (!chunks || !chunk_toks || !res->chunk_nll) { ERR("out of memory"); st = PAGODA_ERR_NOMEM; goto out; }
    for (int32_t c = 0; c < n_chunks; c++) {
        int32_t *ct = chunk_toks + (size_t)c * (size_t)o->ctx;
        memcpy(ct, toks + (size_t)c * (size_t)o->ctx, sizeof(int32_t) * (size_t)o->ctx);
        if (add_bos) ct[0] = bos;
        chunks[c].run = &run;
    }
    int32_t per_chunk = o->ctx - 1 - run.first;
    if (o->out)
        fprintf(o->out, "perplexity: %lld tokens, %d chunks of %d, scoring the last %d of each%s\n",
                (long long)res->n_file_tokens, n_chunks, o->ctx, per_chunk,
                add_bos ? " (BOS first)" : "");
    show = o->progress > 0 || (o->progress < 0 && isatty(fileno(stderr)));
    /* the bar and the running figures on one terminal would overwrite each
     * other: then the bar carries the running figure and the list follows it */
    bool defer = show && o->out && isatty(fileno(o->out));
    if (show) {
        pagoda_progress_init(&bar, "perplexity", (uint64_t)n_chunks, stderr, 1);
        snprintf(bar.unit, sizeof bar.unit, "chunks");
        pagoda_progress_set(&bar, 0);
    }

    double t0 = now_s();
    int32_t next = 0, printed = 0;
    pthread_mutex_lock(&run.mu);
    while (printed < n_chunks) {
        while (next < n_chunks && run.in_flight < o->parallel) {
            run.in_flight++;
            pthread_mutex_unlock(&run.mu);
            st = submit_chunk(e, chunk_toks + (size_t)next * (size_t)o->ctx, o->ctx, run.first,
                              &chunks[next], err, err_len);
            pthread_mutex_lock(&run.mu);
            if (st) {
                run.in_flight--;
                goto drain;
            }
            next++;
        }
        while (printed < n_chunks && chunks[printed].done) {
            ppl_chunk *c = &chunks[printed];
            if (c->finish != PAGODA_FINISH_LENGTH || c->count != per_chunk) {
                ERR("chunk %d: %s (%d of %d tokens scored)%s%s", printed + 1,
                    pagoda_finish_reason_str(c->finish), c->count, per_chunk,
                    c->error[0] ? ": " : "", c->error);
                st = PAGODA_ERR_INTERNAL;
                goto drain;
            }
            res->nll += c->nll;
            res->nll2 += c->nll2;
            res->count += c->count;
            res->chunk_nll[printed] = c->nll;
            printed++;
            finish_estimate(res);
            if (show) {
                pagoda_progress_clear(&bar);
                snprintf(bar.note, sizeof bar.note, "PPL %.4f", res->ppl);
            }
            if (o->out && !defer) print_running(o->out, res, printed, per_chunk, n_chunks);
            if (show) {
                bar.done = (uint64_t)printed;
                pagoda_progress_redraw(&bar);
            }
        }
        if (printed < n_chunks) pthread_cond_wait(&run.cv, &run.mu);
    }
    pthread_mutex_unlock(&run.mu);
    res->seconds = now_s() - t0;
    res->tokens_per_s = res->seconds > 0 ? (double)n_chunks * o->ctx / res->seconds : 0;
    if (show) pagoda_progress_finish(&bar);
    for (int32_t k = 1; defer && k <= n_chunks; k++) print_running(o->out, res, k, per_chunk, n_chunks);
    if (o->out) {
        fprintf(o->out, "Final estimate: PPL = %.4f +/- %.5f\n", res->ppl, res->ppl_err);
        fprintf(o->out, "%d chunks of %d tokens in %.2f s: %.1f tokens/s\n", n_chunks, o->ctx,
                res->seconds, res->tokens_per_s);
    }
    st = PAGODA_OK;
    goto out;

drain:
    /* the chunks already submitted still get their FINAL: wait for them so
     * no callback outlives `chunks` */
    while (run.in_flight > 0) pthread_cond_wait(&run.cv, &run.mu);
    pthread_mutex_unlock(&run.mu);
    if (show) { pagoda_progress_clear(&bar); fputc('\n', stderr); }
out:
    pagoda_runtime_close(rt);
    pagoda_config_free(cfg);
    free(text);
    free(toks);
    free(chunk_toks);
    free(chunks);
    pthread_mutex_destroy(&run.mu);
    pthread_cond_destroy(&run.cv);
    return st;
}

void pagoda_ppl_result_free(pagoda_ppl_result *res)
{
    free(res->chunk_nll);
    res->chunk_nll = NULL;
}

/* ================================================================ CLI */

static void usage(FILE *f)
{
    fputs("usage: pagoda perplexity --model FILE --file TEXT [--ctx 512] [--chunks N]\n"
          "                         [--parallel 4] [--config FILE] [--set S.K=V]...\n"
          "\n"
          "llama-perplexity's measure: the text is tokenized whole (BOS first where the\n"
          "model adds one) and cut into chunks of --ctx tokens; each chunk starts with BOS\n"
          "(where the model adds one) and the negative log-likelihood of its second half,\n"
          "each token predicted from everything before it in the chunk, is averaged over\n"
          "all chunks. Prints the running estimate per chunk, then PPL +/- its standard\n"
          "error and tokens/s. See docs/perplexity.md.\n"
          "\n"
          "  --model FILE      a GGUF model\n"
          "  --file TEXT       the text to score\n"
          "  --ctx N           tokens per chunk (default 512)\n"
          "  --chunks N        score at most N chunks (default: all)\n"
          "  --parallel N      chunks in flight at once, batched together (default 4)\n"
          "  --config FILE     a config (default: built-in: cpu, continuous, paged)\n"
          "  --set S.K=V       any config override (backend.cpu.threads=2, ...)\n"
          "  --no-progress     no progress bar on a terminal\n", f);
}

int pagoda_cmd_perplexity(int argc, char **argv)
{
    pagoda_ppl_opts o = {.ctx = 512, .parallel = 4, .out = stdout, .progress = -1};
    enum { MAX_SETS = 64 };
    const char *sets[MAX_SETS];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return EXIT_OK; }
        if (!strcmp(a, "--no-progress")) { o.progress = 0; continue; }
        const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        size_t alen = eq ? (size_t)(eq - a) : strlen(a);
        if (eq) v = eq + 1;
        else if (i + 1 < argc) v = argv[++i];
        if (!v) {
            fprintf(stderr, "pagoda perplexity: %s needs a value (see pagoda perplexity --help)\n", a);
            return EXIT_USAGE;
        }
#define OPT(s) (alen == strlen(s) && strncmp(a, s, alen) == 0)
        if (OPT("--model") || OPT("-m")) o.model = v;
        else if (OPT("--file") || OPT("-f")) o.file = v;
        else if (OPT("--config")) o.config = v;
        else if (OPT("--set") || OPT("-s")) {
            if (o.n_sets == MAX_SETS) { fprintf(stderr, "pagoda perplexity: more than %d --set\n", MAX_SETS); return EXIT_USAGE; }
            sets[o.n_sets++] = v;
        } else if (OPT("--ctx") || OPT("-c") || OPT("--chunks") || OPT("--parallel")) {
            char *end = NULL;
            errno = 0;
            long x = strtol(v, &end, 10);
            long lo = OPT("--chunks") ? 1 : OPT("--parallel") ? 1 : 4;
            if (errno || end == v || *end || x < lo || x > (1 << 20)) {
                fprintf(stderr, "pagoda perplexity: %.*s %s: expected an integer %ld..%d\n",
                        (int)alen, a, v, lo, 1 << 20);
                return EXIT_USAGE;
            }
            if (OPT("--chunks")) o.max_chunks = (int32_t)x;
            else if (OPT("--parallel")) o.parallel = (int32_t)x;
            else o.ctx = (int32_t)x;
        } else {
            fprintf(stderr, "pagoda perplexity: unknown option '%s' (see pagoda perplexity --help)\n", a);
            return EXIT_USAGE;
        }
#undef OPT
    }
    o.sets = sets;
    if (!o.file || (!o.model && !o.config)) {
        fprintf(stderr, "pagoda perplexity: give --model (or --config) and --file\n");
        usage(stderr);
        return EXIT_USAGE;
    }
    char err[2048] = "";
    pagoda_ppl_result res;
    int st = pagoda_perplexity_run(&o, &res, err, sizeof err);
    pagoda_ppl_result_free(&res);
    if (st) {
        fprintf(stderr, "pagoda perplexity: %s\n", err);
        return st == PAGODA_ERR_INVALID || st == PAGODA_ERR_IO ? EXIT_USAGE : EXIT_RUNTIME;
    }
    return EXIT_OK;
}
