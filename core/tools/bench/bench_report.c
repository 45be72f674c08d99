#define _GNU_SOURCE /* strdup, usleep, memmem */
/*
 * bench_report.c: the output of `pagoda bench`: the text table,
 * JSON, the per-request CSV and the gnuplot PNGs.
 * Not for: measuring anything (bench_run.c, bench_roofline.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_internal.h"

void bench_print_results(FILE *f, const bench_result *r, int n)
{
    fprintf(f, "%-26s", "");
    for (int i = 0; i < n; i++) fprintf(f, " %16s", r[i].label);
    fprintf(f, "\n");
#define ROW(name, fmt, expr)                                            \
    do {                                                                \
        fprintf(f, "%-26s", name);                                      \
        for (int i = 0; i < n; i++) fprintf(f, " %16" fmt, (expr));     \
        fprintf(f, "\n");                                               \
    } while (0)
    ROW("requests ok", "d", r[i].n_ok);
    ROW("requests failed", "d", r[i].n_err);
    ROW("wall s", ".2f", r[i].wall_s);
    ROW("generated tokens", "lld", (long long)r[i].gen_tokens);
    ROW("generated tok/s", ".1f", r[i].gen_tps);
    ROW("total tok/s", ".1f", r[i].total_tps);
    ROW("decode-phase tok/s", ".1f", r[i].phase_tps);
    ROW("TTFT ms p50", ".1f", r[i].ttft.p50);
    ROW("TTFT ms p90", ".1f", r[i].ttft.p90);
    ROW("TTFT ms p99", ".1f", r[i].ttft.p99);
    ROW("ITL ms p50", ".2f", r[i].itl.p50);
    ROW("ITL ms p90", ".2f", r[i].itl.p90);
    ROW("ITL ms p99", ".2f", r[i].itl.p99);
    ROW("e2e ms p50", ".0f", r[i].e2e.p50);
    ROW("e2e ms p90", ".0f", r[i].e2e.p90);
    ROW("e2e ms p99", ".0f", r[i].e2e.p99);
    ROW("KV util peak %", ".1f", 100 * r[i].kv_util_peak);
    ROW("KV util mean %", ".1f", 100 * r[i].kv_util_mean);
    ROW("running seqs peak", "d", r[i].peak_running);
    ROW("running seqs mean", ".1f", r[i].running_mean);
    ROW("preemptions", "lld", (long long)r[i].preemptions);
    ROW("prefix hit %", ".1f", r[i].prefix_query ? 100.0 * (double)r[i].prefix_hit / (double)r[i].prefix_query : 0.0);
#undef ROW
}

static void print_pcts_json(json_t *o, const char *k, const pagoda_bench_pcts *p)
{
    json_t *x = json_object();
    json_object_set_new(x, "mean", json_real(p->mean));
    json_object_set_new(x, "p50", json_real(p->p50));
    json_object_set_new(x, "p90", json_real(p->p90));
    json_object_set_new(x, "p99", json_real(p->p99));
    json_object_set_new(x, "max", json_real(p->max));
    json_object_set_new(o, k, x);
}

int bench_write_json(const char *path, const bench_opts *o, const char *compare,
                      const bench_result *r, int n, const roofline *rf, json_t *headline)
{
    json_t *root = json_object();
    char b1[64], b2[64];
    json_t *w = json_object();
    json_object_set_new(w, "requests", json_integer(o->w.n_requests));
    json_object_set_new(w, "prompt_len", json_string(pagoda_bench_dist_str(&o->w.prompt_len, b1, sizeof b1)));
    json_object_set_new(w, "output_len", json_string(pagoda_bench_dist_str(&o->w.output_len, b2, sizeof b2)));
    json_object_set_new(w, "shared_prefix", json_integer(o->w.shared_prefix));
    json_object_set_new(w, "shared_frac", json_real(o->w.shared_frac));
    json_object_set_new(w, "concurrency", json_integer(o->w.concurrency));
    json_object_set_new(w, "rate", json_real(o->w.rate));
    json_object_set_new(w, "seed", json_integer((json_int_t)o->w.seed));
    json_object_set_new(root, "workload", w);
    if (compare) {
        json_object_set_new(root, "compare", json_string(compare));
        json_object_set_new(root, "repeat_best_of", json_integer(o->repeat > 1 ? o->repeat : 1));
    }
    if (rf && rf->bw_gbs > 0) {
        json_t *x = json_object();
        json_object_set_new(x, "read_bandwidth_gbs", json_real(rf->bw_gbs));
        json_object_set_new(x, "sgemm_gflops", json_real(rf->sgemm_gflops));
        json_object_set_new(x, "threads", json_integer(rf->threads));
        json_object_set_new(x, "openblas_core", json_string(rf->blas_core));
        json_object_set_new(root, "roofline", x);
    }
    if (headline) json_object_set(root, "headline", headline);
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) {
        const bench_result *x = &r[i];
        json_t *j = json_object();
        json_object_set_new(j, "label", json_string(x->label));
        json_object_set_new(j, "model", json_string(x->model));
        json_object_set_new(j, "weight_type", json_string(x->model_type));
        json_object_set_new(j, "requests_ok", json_integer(x->n_ok));
        json_object_set_new(j, "requests_failed", json_integer(x->n_err));
        json_object_set_new(j, "wall_s", json_real(x->wall_s));
        json_object_set_new(j, "generated_tokens", json_integer(x->gen_tokens));
        json_object_set_new(j, "prompt_tokens", json_integer(x->prompt_tokens));
        json_object_set_new(j, "generated_tok_s", json_real(x->gen_tps));
        json_object_set_new(j, "total_tok_s", json_real(x->total_tps));
        json_object_set_new(j, "decode_phase_tok_s", json_real(x->phase_tps));
        json_object_set_new(j, "decode_phase_s", json_real(x->phase_s));
        print_pcts_json(j, "ttft_ms", &x->ttft);
        print_pcts_json(j, "itl_ms", &x->itl);
        print_pcts_json(j, "e2e_ms", &x->e2e);
        json_object_set_new(j, "kv_util_peak", json_real(x->kv_util_peak));
        json_object_set_new(j, "kv_util_mean", json_real(x->kv_util_mean));
        json_object_set_new(j, "kv_blocks", json_integer(x->kv_blocks));
        json_object_set_new(j, "running_peak", json_integer(x->peak_running));
        json_object_set_new(j, "running_mean", json_real(x->running_mean));
        json_object_set_new(j, "preemptions", json_integer(x->preemptions));
        json_object_set_new(j, "prefix_query_tokens", json_integer(x->prefix_query));
        json_object_set_new(j, "prefix_hit_tokens", json_integer(x->prefix_hit));
        json_object_set_new(j, "weight_bytes", json_integer((json_int_t)x->weight_bytes));
        json_object_set_new(j, "bytes_per_token", json_real(x->bytes_per_token));
        json_object_set_new(j, "flops_per_token", json_real(x->flops_per_token));
        if (x->decode_tps > 0) {
            json_object_set_new(j, "decode_tok_s", json_real(x->decode_tps));
            json_object_set_new(j, "decode_p50_tok_s", json_real(x->decode_p50_tps));
        }
        if (x->prefill_tps > 0) {
            json_object_set_new(j, "prefill_tok_s", json_real(x->prefill_tps));
            json_object_set_new(j, "prefill_len", json_integer(x->prefill_len));
        }
        if (x->plan_budget) {
            json_object_set_new(j, "plan_budget_bytes", json_integer((json_int_t)x->plan_budget));
            json_object_set_new(j, "plan_kv_tokens", json_integer((json_int_t)x->plan_kv_tokens));
            json_object_set_new(j, "plan_full_context_seqs", json_integer(x->plan_seqs_2k));
            json_object_set_new(j, "plan_max_seq_len", json_integer(x->plan_ctx));
        }
        json_array_append_new(arr, j);
    }
    json_object_set_new(root, "results", arr);
    int st = json_dump_file(root, path, JSON_INDENT(2));
    json_decref(root);
    if (st) fprintf(stderr, "bench: cannot write %s\n", path);
    return st ? PAGODA_ERR_IO : PAGODA_OK;
}

int bench_write_csv(const char *path, const bench_result *r, int n)
{
    FILE *f = fopen(path, "w");
    if (!f) { fprintf(stderr, "bench: cannot write %s: %s\n", path, strerror(errno)); return PAGODA_ERR_IO; }
    fprintf(f, "side,request,prompt_tokens,output_tokens,shared,cached_tokens,submit_s,ttft_ms,e2e_ms,"
               "tpot_ms,preemptions,finish\n");
    for (int s = 0; s < n; s++)
        for (int32_t i = 0; r[s].reqs && i < r[s].n_req; i++) {
            const req_rec *q = &r[s].reqs[i];
            double tpot = q->n_tok > 1 ? (q->t_last - q->t_first) * 1e3 / (q->n_tok - 1) : 0;
            fprintf(f, "%s,%d,%d,%d,%d,%d,%.4f,%.2f,%.2f,%.3f,%d,%s\n", r[s].label, i, q->n_prompt,
                    q->n_tok, q->shared, q->cached, q->t_submit,
                    q->failed ? 0 : (q->t_first - q->t_submit) * 1e3,
                    q->failed ? 0 : (q->t_end - q->t_submit) * 1e3, tpot, q->preempt,
                    q->failed ? "error" : pagoda_finish_reason_str(q->finish));
        }
    fclose(f);
    return PAGODA_OK;
}

/* ---- plots: data files next to the PNGs, one gnuplot script per figure */

bool bench_have_gnuplot(void) { return system("command -v gnuplot >/dev/null 2>&1") == 0; }

static int gnuplot(const char *dir, const char *name, const char *script)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.gp", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return PAGODA_ERR_IO;
    fprintf(f, "set terminal pngcairo size 900,420 font ',10' noenhanced\n"
               "set output '%s/%s.png'\nset grid\nset key outside right top\n%s", dir, name, script);
    fclose(f);
    char cmd[8600];
    snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>&1", path);
    int rc = system(cmd);
    if (rc) {
        /* pngcairo is missing from some builds: retry with the plain png terminal */
        snprintf(cmd, sizeof cmd, "sed -i 's/^set terminal pngcairo.*/set terminal png size 900,420/' "
                                  "'%s' && gnuplot '%s'", path, path);
        rc = system(cmd);
    }
    if (rc) fprintf(stderr, "bench: gnuplot failed on %s\n", path);
    else fprintf(stderr, "bench: wrote %s/%s.png\n", dir, name);
    return rc ? PAGODA_ERR_IO : PAGODA_OK;
}

/* Timeline: running sequences and KV utilisation per side over time. */
void bench_plot_timeline(const char *dir, const char *name, const char *title,
                          const bench_result *r, int n)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.dat", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return;
    for (int s = 0; s < n; s++) {
        fprintf(f, "# %s\n", r[s].label);
        for (size_t i = 0; i < r[s].n_trace; i++) {
            const trace_pt *p = &r[s].trace[i];
            fprintf(f, "%.4f %d %.2f\n", p->t, p->running,
                    p->kv_total ? 100.0 * (double)p->kv_used / (double)p->kv_total : 0.0);
        }
        fprintf(f, "\n\n");
    }
    fclose(f);
    char script[4096];
    int k = snprintf(script, sizeof script,
                     "set title '%s'\nset xlabel 'seconds'\nset ylabel 'running sequences'\n"
                     "set y2label 'KV blocks used %%'\nset y2range [0:100]\nset ytics nomirror\n"
                     "set y2tics\nplot ", title);
    for (int s = 0; s < n && k < (int)sizeof script - 300; s++)
        k += snprintf(script + k, sizeof script - (size_t)k,
                      "%s'%s' index %d using 1:2 with steps lw 2 lc %d title '%s running', "
                      "'%s' index %d using 1:3 axes x1y2 with lines dt 2 lc %d title '%s KV %%'",
                      s ? ", " : "", path, s, s + 1, r[s].label, path, s, s + 1, r[s].label);
    snprintf(script + k, sizeof script - (size_t)k, "\n");
    gnuplot(dir, name, script);
}

/* Per-request TTFT in submission order, per side (prefix comparison). */
void bench_plot_ttft(const char *dir, const char *name, const char *title, const bench_result *r,
                      int n)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.dat", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return;
    for (int s = 0; s < n; s++) {
        for (int32_t i = 0; r[s].reqs && i < r[s].n_req; i++) {
            const req_rec *q = &r[s].reqs[i];
            fprintf(f, "%d %.2f\n", i, q->failed ? 0 : (q->t_first - q->t_submit) * 1e3);
        }
        fprintf(f, "\n\n");
    }
    fclose(f);
    char script[4096];
    int k = snprintf(script, sizeof script,
                     "set title '%s'\nset xlabel 'request'\nset ylabel 'TTFT ms (log)'\n"
                     "set logscale y\nset style fill solid 0.7\nset boxwidth 0.4\nplot ", title);
    for (int s = 0; s < n && k < (int)sizeof script - 200; s++)
        k += snprintf(script + k, sizeof script - (size_t)k,
                      "%s'%s' index %d using ($1+%.2f):2 with boxes lc %d title '%s'", s ? ", " : "",
                      path, s, -0.2 + 0.4 * s, s + 1, r[s].label);
    snprintf(script + k, sizeof script - (size_t)k, "\n");
    gnuplot(dir, name, script);
}

/* Bars of one value per side (a label and a number per line). */
void bench_plot_bars(const char *dir, const char *name, const char *title, const char *ylabel,
                      const char *const *labels, const double *v, int n)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.dat", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return;
    for (int i = 0; i < n; i++) fprintf(f, "\"%s\" %.3f\n", labels[i], v[i]);
    fclose(f);
    char script[4096];
    snprintf(script, sizeof script,
             "set title '%s'\nset ylabel '%s'\nset style fill solid 0.7\nset boxwidth 0.6\n"
             "set yrange [0:*]\nunset key\n"
             "plot '%s' using 0:2:xtic(1) with boxes lc 1, '' using 0:2:(sprintf('%%.1f',$2)) "
             "with labels offset 0,0.7\n", title, ylabel, path);
    gnuplot(dir, name, script);
}
