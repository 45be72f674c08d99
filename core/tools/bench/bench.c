#define _GNU_SOURCE /* strdup, usleep */
/*
 * bench.c: `pagoda bench`, the CLI: option parsing and --help, the model a
 * run uses (--model, the config's, or one generated into the cache), and
 * the driver that picks the mode (one run, --compare, --http). The rest of
 * the tool: the workload and statistics (bench_workload.c), one run
 * in-process (bench_run.c), the HTTP client (bench_http.c), the rooflines
 * (bench_roofline.c), the comparisons (bench_compare.c), the output
 * (bench_report.c).
 * Not for: correctness checks or anything that asserts a time.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_internal.h"
#include "config.h"
#include "genmodel.h"

enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

static void bench_usage(FILE *f)
{
    fprintf(f,
"usage: pagoda bench [--model FILE | --shape NAME --type T | --config FILE] [--set S.K=V]...\n"
"                    [workload] [--roofline] [--compare NAME] [--json F] [--csv F] [--plot DIR]\n"
"Drives the engine in-process (no HTTP) with synthetic token-id prompts and reports\n"
"throughput, TTFT / inter-token / end-to-end latency (p50/p90/p99), KV utilisation,\n"
"concurrency and preemptions. Outputs are exact lengths (ignore_eos), greedy.\n"
"\n"
"model and engine:\n"
"  --model FILE          a GGUF model\n"
"  --shape NAME          or generate one (llama-110M, tinyllama-1.1B, tiny, tiny-k, a MoE shape:\n"
"                        pagoda gen-model --help) into the cache\n"
"  --type T              F16, Q8_0 (default), Q4_0, ... of the generated model\n"
"  --context N           context length written into a generated model\n"
"  --vocab FILE          vocabulary GGUF for a generated model\n"
"  --cache-dir DIR       where generated models live ($PAGODA_BENCH_CACHE, else\n"
"                        ~/.cache/pagoda/models)\n"
"  --config FILE         a config (default: built-in: cpu backend, continuous, paged)\n"
"  --set S.K=V           any config override (engine.scheduler=static,\n"
"                        engine.kv_cache_tokens=4096, backend.cpu.threads=2, ...)\n"
"workload (default: 32 requests, prompt 128, output 128, concurrency 8):\n"
"  --requests N          requests\n"
"  --prompt-len D        prompt tokens: N, A-B (uniform), log:A-B (log-uniform)\n"
"  --output-len D        output tokens (exact), same forms\n"
"  --shared-prefix LEN   a common prefix of LEN tokens ...\n"
"  --shared-frac F       ... that this share of requests start with (default 1)\n"
"  --concurrency N       closed loop: N requests in flight\n"
"  --rate R              open loop: Poisson arrivals, R requests/s\n"
"  --seed N              workload seed (default 1)\n"
"serving (HTTP, closed loop at --concurrency, streamed completions of token ids):\n"
"  --serve               start the HTTP frontend in-process and drive it over TCP\n"
"  --http HOST:PORT      drive a running pagoda server instead\n"
"  --vocab-size N        --http without --model: draw ids below N (default 32000)\n"
"reports:\n"
"  --roofline            also measure read bandwidth, the sgemm rate and the instruction peaks\n"
"                        of this CPU's paths (FMA, int8 maddubs / VNNI, vdpbf16ps, AMX), single-stream\n"
"                        decode and prefill, and print them against their bounds\n"
"  --decode-tokens N     tokens of the single-stream decode measurement (default 64)\n"
"  --prefill-tokens N    prompt of the prefill measurement (default 512)\n"
"  --compare NAME        run a policy comparison side by side:\n"
"                          sched   continuous vs static, mixed outputs 16-512\n"
"                          kv      paged vs contiguous, same KV budget, short requests\n"
"                          prefix  prefix vs paged, 2000-token shared system prompt\n"
"                          quant   F16 vs Q8_0 vs Q4_0: decode, prefill, memory, KV left\n"
"                          batch   16 concurrent sequences vs a single stream\n"
"                          structured  token-mask time per token of a JSON Schema (p50/p99,\n"
"                                  first walk and cached; --requests walks; --vocab FILE: also\n"
"                                  that model's vocabulary) and --concurrency constrained\n"
"                                  streams vs free ones (--repeat; 0: masks only)\n"
"                          kvdtype f16 vs q8_0 KV cache: one stream decoding after a\n"
"                                  2048-token prompt (decode step p50 kept per side)\n"
"                          spec    speculative decoding (ngram) vs off, real text through the\n"
"                                  chat template: one stream editing a code file, one chatting,\n"
"                                  16 at once (--repeat rounds, default 3; needs --model;\n"
"                                  --set engine.speculative=draft --set\n"
"                                  engine.spec_draft_model=F: the draft drafter instead)\n"
"                          draftbatch  the draft drafter one sequence at a time\n"
"                                  (spec_draft_batch = off) vs batched: 4 streams at once, edit\n"
"                                  and chat mixed (--repeat; needs --model and --set\n"
"                                  engine.spec_draft_model=F)\n"
"                        workload flags given override the comparison's defaults\n"
"  --repeat N            sched/kv/prefix/batch/kvdtype/spec: run the two sides alternately N times and\n"
"                        keep each side's fastest run (other load only slows a run down)\n"
"  --memory SIZE         quant: the budget the KV left is planned under (default 4G)\n"
"  --threads N           threads of the bandwidth and sgemm probes (default: all CPUs)\n"
"  --json FILE           every number, as JSON\n"
"  --csv FILE            one row per request (side, lengths, TTFT, e2e, ...)\n"
"  --plot DIR            PNG plots with gnuplot (when installed)\n");
}

/* ================================================================ models */

static int mkdir_p(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) && errno != EEXIST) return -1;
    return 0;
}

/* The path of a generated model of shape/type (made now if missing). */
int bench_model_for(const bench_opts *o, const char *type, char *out, size_t out_len, char *err,
                     size_t err_len)
{
    const char *shape = o->shape ? o->shape : "llama-110M";
    int dt = pagoda_genmodel_parse_type(type);
    if (dt < 0) { ERR("--type %s: expected " PAGODA_GENMODEL_TYPES, type); return PAGODA_ERR_INVALID; }
    if (!pagoda_model_shape_find(shape)) {
        ERR("--shape %s: expected one of %s", shape, pagoda_model_shape_names());
        return PAGODA_ERR_INVALID;
    }
    char dir[3072];
    const char *env = getenv("PAGODA_BENCH_CACHE"), *home = getenv("HOME");
    if (o->cache_dir) snprintf(dir, sizeof dir, "%s", o->cache_dir);
    else if (env && *env) snprintf(dir, sizeof dir, "%s", env);
    else snprintf(dir, sizeof dir, "%s/.cache/pagoda/models", home && *home ? home : "/tmp");
    char ctx[32] = "";
    if (o->context > 0) snprintf(ctx, sizeof ctx, "-ctx%d", o->context);
    snprintf(out, out_len, "%s/%s-%s%s%s.gguf", dir, shape, pagoda_dtype_name(dt), ctx,
             o->vocab ? "-vocab" : "");
    if (access(out, R_OK) == 0) return PAGODA_OK;
    if (mkdir_p(dir)) { ERR("cannot create %s: %s", dir, strerror(errno)); return PAGODA_ERR_IO; }
    fprintf(stderr, "bench: generating %s (once; later runs reuse it)\n", out);
    pagoda_genmodel_opts g = {.shape = shape, .dtype = dt, .out = out, .vocab = o->vocab,
                              .seed = 42, .context = o->context};
    int st = pagoda_gen_model(&g, err, err_len);
    if (!st && err_len && err[0]) { /* a note: matrices that fell back to another type */
        fprintf(stderr, "bench: note: %s\n", err);
        err[0] = 0;
    }
    return st;
}

int bench_resolve_model(const bench_opts *o, const char *type, char *path, size_t n, char *err,
                         size_t err_len)
{
    path[0] = 0;
    if (o->model) { snprintf(path, n, "%s", o->model); return PAGODA_OK; }
    if (o->config && !o->shape && !type) return PAGODA_OK; /* the config's model */
    return bench_model_for(o, type ? type : (o->type ? o->type : "Q8_0"), path, n, err, err_len);
}

static int do_single(const bench_opts *o, roofline *rf)
{
    char err[2048] = "", model[4096];
    bench_result r;
    memset(&r, 0, sizeof r);
    int st = bench_resolve_model(o, NULL, model, sizeof model, err, sizeof err);
    if (!st)
        st = bench_run_side(o, "run", model[0] ? model : NULL, NULL,
                      SIDE_WORKLOAD | (o->roofline ? SIDE_DECODE | SIDE_PREFILL : 0), &r, err, sizeof err);
    if (st) {
        fprintf(stderr, "bench: %s\n", err);
        bench_result_free(&r);
        return st;
    }
    char b1[64], b2[64];
    printf("\nworkload: %d requests, prompt %s, output %s, shared prefix %d (frac %.2f), %s %g\n",
           o->w.n_requests, pagoda_bench_dist_str(&o->w.prompt_len, b1, sizeof b1),
           pagoda_bench_dist_str(&o->w.output_len, b2, sizeof b2), o->w.shared_prefix,
           o->w.shared_frac, o->w.rate > 0 ? "rate" : "concurrency",
           o->w.rate > 0 ? o->w.rate : (double)o->w.concurrency);
    printf("model: %s (%s, %.1f MB of weights)\n", r.model, r.model_type, (double)r.weight_bytes / 1e6);
    bench_print_results(stdout, &r, 1);
    if (o->roofline) {
        bench_print_roofline(rf);
        bench_print_bounds(&r, rf);
    }
    if (o->json) bench_write_json(o->json, o, NULL, &r, 1, rf, NULL);
    if (o->csv) bench_write_csv(o->csv, &r, 1);
    if (o->plot) bench_plot_timeline(o->plot, "bench-timeline", "pagoda bench", &r, 1);
    bench_result_free(&r);
    return PAGODA_OK;
}

/* ================================================================ CLI */

int pagoda_cmd_bench(int argc, char **argv)
{
    bench_opts o;
    memset(&o, 0, sizeof o);
    pagoda_bench_workload_default(&o.w);
    o.decode_tokens = 64;
    o.prefill_tokens = 512;
    o.memory = 4ull << 30;
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    o.threads = nc > 0 ? (int)nc : 1;
    o.repeat = 1;
    o.vocab_size = 32000;
    char err[512];
    bool frac_given = false;
    /* the comparison first: its defaults sit under the user's flags */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--compare") == 0 && i + 1 < argc) o.compare = argv[i + 1];
        else if (strncmp(argv[i], "--compare=", 10) == 0) o.compare = argv[i] + 10;
    }
    if (o.compare && bench_compare_defaults(o.compare, &o)) {
        fprintf(stderr, "pagoda bench: unknown comparison '%s' (sched, kv, prefix, quant, batch, "
                "structured, kvdtype, spec, draftbatch)\n", o.compare);
        return EXIT_USAGE;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) { bench_usage(stdout); return EXIT_OK; }
        if (strcmp(a, "--roofline") == 0) { o.roofline = true; continue; }
        if (strcmp(a, "--serve") == 0) { o.serve = true; continue; }
        const char *eq = strchr(a, '=');
        size_t alen = eq && strncmp(a, "--", 2) == 0 ? (size_t)(eq - a) : strlen(a);
        if (eq && strncmp(a, "--", 2) == 0) v = eq + 1;
        else if (i + 1 < argc) v = argv[++i];
        if (!v) {
            fprintf(stderr, "pagoda bench: %s needs a value (see pagoda bench --help)\n", a);
            return EXIT_USAGE;
        }
#define OPT(s) (alen == strlen(s) && strncmp(a, s, alen) == 0)
        char *end = NULL;
        int st = PAGODA_OK;
        errno = 0;
        if (OPT("--model")) o.model = v;
        else if (OPT("--config") || OPT("-c")) o.config = v;
        else if (OPT("--shape")) o.shape = v;
        else if (OPT("--type")) o.type = v;
        else if (OPT("--vocab")) o.vocab = v;
        else if (OPT("--cache-dir")) o.cache_dir = v;
        else if (OPT("--set") || OPT("-s")) {
            if (o.n_sets == MAX_SETS) { fprintf(stderr, "pagoda bench: more than %d --set\n", MAX_SETS); return EXIT_USAGE; }
            o.sets[o.n_sets++] = v;
        } else if (OPT("--json")) o.json = v;
        else if (OPT("--csv")) o.csv = v;
        else if (OPT("--plot")) o.plot = v;
        else if (OPT("--compare")) o.compare = v;
        else if (OPT("--http")) o.http = v;
        else if (OPT("--prompt-len")) st = pagoda_bench_dist_parse(v, &o.w.prompt_len, err, sizeof err);
        else if (OPT("--output-len")) st = pagoda_bench_dist_parse(v, &o.w.output_len, err, sizeof err);
        else if (OPT("--memory")) {
            if (pagoda_parse_size(v, &o.memory) || o.memory == 0) { snprintf(err, sizeof err, "--memory %s: expected a size like 4G", v); st = PAGODA_ERR_INVALID; }
        } else if (OPT("--shared-frac")) {
            o.w.shared_frac = strtod(v, &end);
            frac_given = true;
            if (errno || end == v || *end || !(o.w.shared_frac >= 0 && o.w.shared_frac <= 1)) {
                snprintf(err, sizeof err, "--shared-frac %s: expected 0..1", v);
                st = PAGODA_ERR_INVALID;
            }
        } else if (OPT("--rate")) {
            o.w.rate = strtod(v, &end);
            if (errno || end == v || *end || !(o.w.rate > 0 && o.w.rate < 1e6)) {
                snprintf(err, sizeof err, "--rate %s: expected requests per second > 0", v);
                st = PAGODA_ERR_INVALID;
            }
        } else {
            long long x = strtoll(v, &end, 10);
            bool bad = errno || end == v || *end;
#define INTOPT(s, field, lo, hi)                                                       \
    else if (OPT(s)) {                                                                 \
        if (bad || x < (lo) || x > (hi)) {                                             \
            snprintf(err, sizeof err, "%s %s: expected %lld..%lld", s, v, (long long)(lo), \
                     (long long)(hi));                                                 \
            st = PAGODA_ERR_INVALID;                                                   \
        } else field = x;                                                              \
    }
            if (0) {}
            INTOPT("--requests", o.w.n_requests, 1, 1000000)
            INTOPT("--shared-prefix", o.w.shared_prefix, 0, 1000000)
            INTOPT("--concurrency", o.w.concurrency, 1, 1000000)
            INTOPT("--seed", o.w.seed, 0, INT64_MAX)
            INTOPT("--context", o.context, 1, 1 << 20)
            INTOPT("--decode-tokens", o.decode_tokens, 2, 100000)
            INTOPT("--prefill-tokens", o.prefill_tokens, 1, 1000000)
            INTOPT("--threads", o.threads, 1, 64)
            INTOPT("--repeat", o.repeat, 0, 100)
            INTOPT("--vocab-size", o.vocab_size, 2, 10000000)
            else {
                fprintf(stderr, "pagoda bench: unknown option '%s' (see pagoda bench --help)\n", a);
                return EXIT_USAGE;
            }
#undef INTOPT
        }
#undef OPT
        if (st) {
            fprintf(stderr, "pagoda bench: %s\n", err);
            return EXIT_USAGE;
        }
    }
    if (o.w.shared_prefix > 0 && !frac_given && !o.compare) o.w.shared_frac = 1.0;
    if (o.repeat == 0 && !(o.compare && !strcmp(o.compare, "structured"))) {
        fprintf(stderr, "pagoda bench: --repeat 0 is only for --compare structured (masks only)\n");
        return EXIT_USAGE;
    }
    if (o.model && o.shape) {
        fprintf(stderr, "pagoda bench: give --model or --shape, not both\n");
        return EXIT_USAGE;
    }
    if (o.plot) {
        if (mkdir_p(o.plot)) {
            fprintf(stderr, "pagoda bench: cannot create %s: %s\n", o.plot, strerror(errno));
            return EXIT_RUNTIME;
        }
        if (!bench_have_gnuplot()) {
            fprintf(stderr, "pagoda bench: gnuplot not found: no plots (apt-get install gnuplot-nox)\n");
            o.plot = NULL;
        }
    }
    roofline rf;
    memset(&rf, 0, sizeof rf);
    if (o.roofline) bench_measure_roofline(&o, &rf);
    if (o.http && (o.serve || o.compare)) {
        fprintf(stderr, "pagoda bench: --http drives a server of its own: no --serve or --compare\n");
        return EXIT_USAGE;
    }
    int st = o.http ? bench_do_http(&o) : o.compare ? bench_do_compare(&o, &rf) : do_single(&o, &rf);
    return st == PAGODA_OK ? EXIT_OK : st == PAGODA_ERR_INVALID ? EXIT_USAGE : EXIT_RUNTIME;
}

