#define _GNU_SOURCE /* strdup, usleep, memmem */
/*
 * bench_compare.c: the policy comparisons of `pagoda bench
 * --compare` (sched, kv, prefix, quant, batch; docs/benchmarks.md): each
 * comparison's workload defaults, its sides run one after the other in this
 * process on the same workload, and its headline ratios.
 * Not for: running a side (bench_run.c) or the output formats
 * (bench_report.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_internal.h"
#include "memplan.h"

/* Apply a comparison's workload defaults before the user's flags. */
int bench_compare_defaults(const char *name, bench_opts *o)
{
    pagoda_bench_workload *w = &o->w;
    if (strcmp(name, "sched") == 0) {
        /* four waves of the static batch, all queued at once: continuous
         * batching gains only when a queue waits behind the seats */
        w->n_requests = 32;
        w->prompt_len = (pagoda_bench_dist){PAGODA_BENCH_UNIFORM, 32, 128};
        w->output_len = (pagoda_bench_dist){PAGODA_BENCH_UNIFORM, 16, 512};
        w->concurrency = 32;
    } else if (strcmp(name, "kv") == 0) {
        w->n_requests = 48;
        w->prompt_len = (pagoda_bench_dist){PAGODA_BENCH_UNIFORM, 16, 32};
        w->output_len = (pagoda_bench_dist){PAGODA_BENCH_UNIFORM, 16, 32};
        w->concurrency = 48;
    } else if (strcmp(name, "prefix") == 0) {
        w->n_requests = 4;
        w->prompt_len = (pagoda_bench_dist){PAGODA_BENCH_UNIFORM, 16, 48};
        w->output_len = (pagoda_bench_dist){PAGODA_BENCH_FIXED, 16, 16};
        w->shared_prefix = 2000;
        w->shared_frac = 1.0;
        w->concurrency = 1;
        if (!o->context) o->context = 4096;
    } else if (strcmp(name, "structured") == 0) {
        /* 32 mask walks; 8 constrained streams against 8 free ones */
        w->n_requests = 32;
        w->concurrency = 8;
    } else if (strcmp(name, "kvdtype") == 0) {
        /* decode at long context, one stream: the KV cache read per step
         * is what the two types differ in */
        w->n_requests = 2;
        w->prompt_len = (pagoda_bench_dist){PAGODA_BENCH_FIXED, 2048, 2048};
        w->output_len = (pagoda_bench_dist){PAGODA_BENCH_FIXED, 64, 64};
        w->concurrency = 1;
        if (!o->context) o->context = 4096;
    } else if (strcmp(name, "spec") == 0 || strcmp(name, "draftbatch") == 0) {
        /* its own workloads of text (bench_spec.c); --repeat rounds */
        o->repeat = 3;
    } else if (strcmp(name, "quant") == 0 || strcmp(name, "batch") == 0) {
        w->n_requests = 16;
        w->prompt_len = (pagoda_bench_dist){PAGODA_BENCH_FIXED, 16, 16};
        w->output_len = (pagoda_bench_dist){PAGODA_BENCH_FIXED, 64, 64};
        w->concurrency = 16;
    } else {
        return -1;
    }
    return 0;
}

/* Sides a and b alternately o->repeat times; each keeps its run with the
 * highest generated tok/s (the same workload each time, so the shortest
 * wall: on a shared machine other load only ever slows a run down), or
 * with by_step the shortest median decode step (when the sides differ in
 * decode, not in the prefill that dominates the wall). */
static int run_pair_by(const bench_opts *oa, const char *la, const char *const *sa,
                       const bench_opts *ob, const char *lb, const char *const *sb, const char *mp,
                       bool by_step, bench_result *ra, bench_result *rb, char *err, size_t err_len)
{
    int n = oa->repeat > 1 ? oa->repeat : 1;
    for (int i = 0; i < n; i++) {
        for (int side = 0; side < 2; side++) {
            bench_result cur, *best = side ? rb : ra;
            memset(&cur, 0, sizeof cur);
            if (n > 1 && !(side ? ob : oa)->quiet)
                fprintf(stderr, "bench: round %d of %d, side %s\n", i + 1, n, side ? lb : la);
            int st = bench_run_side(side ? ob : oa, side ? lb : la, mp, side ? sb : sa, SIDE_WORKLOAD,
                                    &cur, err, err_len);
            if (st) {
                bench_result_free(&cur);
                return st;
            }
            bool better = by_step ? cur.itl.p50 > 0 && cur.itl.p50 < best->itl.p50 : cur.gen_tps > best->gen_tps;
            if (i == 0 || better) {
                if (i > 0) bench_result_free(best);
                *best = cur;
            } else {
                bench_result_free(&cur);
            }
        }
    }
    if (n > 1) printf("best of %d alternating runs per side\n", n);
    return PAGODA_OK;
}

static int run_pair(const bench_opts *oa, const char *la, const char *const *sa,
                    const bench_opts *ob, const char *lb, const char *const *sb, const char *mp,
                    bench_result *ra, bench_result *rb, char *err, size_t err_len)
{
    return run_pair_by(oa, la, sa, ob, lb, sb, mp, false, ra, rb, err, err_len);
}

int bench_do_compare(const bench_opts *o, roofline *rf)
{
    if (strcmp(o->compare, "structured") == 0) return bench_do_structured(o);
    if (strcmp(o->compare, "spec") == 0 || strcmp(o->compare, "draftbatch") == 0)
        return bench_do_spec(o);
    char err[2048] = "", model[4096];
    bench_result r[3];
    memset(r, 0, sizeof r);
    int n = 0, st = PAGODA_OK;
    const char *name = o->compare;
    json_t *head = json_object();
    if (strcmp(name, "quant") == 0) {
        static const char *const types[] = {"F16", "Q8_0", "Q4_0"};
        static const char *const side[] = {"engine.kv_cache_tokens=4096", NULL};
        for (n = 0; n < 3; n++) {
            if ((st = bench_model_for(o, types[n], model, sizeof model, err, sizeof err))) goto out;
            st = bench_run_side(o, types[n], model, side, SIDE_DECODE | SIDE_PREFILL, &r[n], err, sizeof err);
            if (st) goto out;
            /* the KV left: the memory plan under the same budget */
            gguf_file *g = pagoda_gguf_open(model, err, sizeof err);
            if (!g) { st = PAGODA_ERR_IO; goto out; }
            pagoda_memplan_opts po;
            pagoda_memplan_opts_default(&po);
            po.memory_budget = o->memory;
            pagoda_memplan p;
            if (!pagoda_memplan_compute(g, &po, &p, err, sizeof err)) {
                r[n].plan_budget = p.budget_bytes;
                r[n].plan_kv_tokens = p.kv_tokens;
                r[n].plan_seqs_2k = p.max_seq_len > 0 ? (int64_t)(p.kv_tokens / (uint64_t)p.max_seq_len) : 0;
                r[n].plan_ctx = p.max_seq_len;
            }
            pagoda_gguf_close(g);
        }
        printf("\nquantization: %s, decode single stream (%d tokens), prefill %d tokens\n",
               o->shape ? o->shape : "llama-110M", o->decode_tokens, r[0].prefill_len);
        printf("%-8s %10s %12s %12s %12s %14s %16s\n", "type", "weights MB", "decode tok/s",
               "(p50 step)", "prefill t/s", "KV tokens left", "full-context seqs");
        for (int i = 0; i < n; i++)
            printf("%-8s %10.1f %12.1f %12.1f %12.1f %14llu %6lld x %lld (budget %.1fG)\n", r[i].label,
                   (double)r[i].weight_bytes / 1e6, r[i].decode_tps, r[i].decode_p50_tps, r[i].prefill_tps,
                   (unsigned long long)r[i].plan_kv_tokens, (long long)r[i].plan_seqs_2k,
                   (long long)r[i].plan_ctx, (double)r[i].plan_budget / (1u << 30));
        printf("decode speed-up vs F16: Q8_0 %.2fx, Q4_0 %.2fx; weights vs F16: Q8_0 %.2f, Q4_0 %.2f\n",
               bench_ratio(r[1].decode_tps, r[0].decode_tps), bench_ratio(r[2].decode_tps, r[0].decode_tps),
               bench_ratio((double)r[1].weight_bytes, (double)r[0].weight_bytes),
               bench_ratio((double)r[2].weight_bytes, (double)r[0].weight_bytes));
        json_object_set_new(head, "decode_q8_over_f16", json_real(bench_ratio(r[1].decode_tps, r[0].decode_tps)));
        json_object_set_new(head, "decode_q4_over_f16", json_real(bench_ratio(r[2].decode_tps, r[0].decode_tps)));
        if (o->roofline) {
            bench_print_roofline(rf);
            for (int i = 0; i < n; i++) bench_print_bounds(&r[i], rf);
        }
        if (o->plot) {
            const char *labels[3] = {types[0], types[1], types[2]};
            double v[3];
            for (int i = 0; i < 3; i++) v[i] = r[i].decode_tps;
            char t1[160];
            snprintf(t1, sizeof t1, "%s: single-stream decode tok/s", o->shape ? o->shape : "llama-110M");
            char f1[160];
            snprintf(f1, sizeof f1, "compare-quant-%s-decode", o->shape ? o->shape : "llama-110M");
            bench_plot_bars(o->plot, f1, t1, "tok/s", labels, v, 3);
            for (int i = 0; i < 3; i++) v[i] = (double)r[i].weight_bytes / 1e6;
            snprintf(t1, sizeof t1, "%s: weights MB", o->shape ? o->shape : "llama-110M");
            snprintf(f1, sizeof f1, "compare-quant-%s-weights", o->shape ? o->shape : "llama-110M");
            bench_plot_bars(o->plot, f1, t1, "MB", labels, v, 3);
        }
        goto report;
    }

    if ((st = bench_resolve_model(o, NULL, model, sizeof model, err, sizeof err))) goto out;
    const char *mp = model[0] ? model : NULL;
    if (strcmp(name, "sched") == 0) {
        static const char *const a[] = {"engine.scheduler=continuous", "scheduler.continuous.max_num_seqs=8",
                                        "engine.kv_cache_tokens=16384", NULL};
        static const char *const b[] = {"engine.scheduler=static", "scheduler.static.batch_size=8",
                                        "engine.kv_cache_tokens=16384", NULL};
        if ((st = run_pair(o, "continuous", a, o, "static", b, mp, &r[0], &r[1], err, sizeof err))) goto out;
        n = 2;
        bench_print_results(stdout, r, n);
        double tr = bench_ratio(r[0].gen_tps, r[1].gen_tps);
        printf("continuous / static: throughput %.2fx (target >= 2x), p99 e2e latency %.0f vs %.0f ms "
               "(%.2fx lower), p99 TTFT %.0f vs %.0f ms; seats busy %.1f vs %.1f (%.2fx), "
               "decode step p50 %.1f vs %.1f ms\n", tr, r[0].e2e.p99, r[1].e2e.p99,
               bench_ratio(r[1].e2e.p99, r[0].e2e.p99), r[0].ttft.p99, r[1].ttft.p99,
               r[0].running_mean, r[1].running_mean, bench_ratio(r[0].running_mean, r[1].running_mean),
               r[0].itl.p50, r[1].itl.p50);
        json_object_set_new(head, "occupancy_ratio", json_real(bench_ratio(r[0].running_mean, r[1].running_mean)));
        json_object_set_new(head, "throughput_ratio", json_real(tr));
        json_object_set_new(head, "p99_e2e_ratio", json_real(bench_ratio(r[1].e2e.p99, r[0].e2e.p99)));
    } else if (strcmp(name, "kv") == 0) {
        static const char *const a[] = {"engine.kvcache=paged", "engine.kv_cache_tokens=4096",
                                        "scheduler.continuous.max_num_seqs=64", NULL};
        static const char *const b[] = {"engine.kvcache=contiguous", "engine.kv_cache_tokens=4096",
                                        "scheduler.continuous.max_num_seqs=64", NULL};
        if ((st = run_pair(o, "paged", a, o, "contiguous", b, mp, &r[0], &r[1], err, sizeof err))) goto out;
        n = 2;
        bench_print_results(stdout, r, n);
        double cr = bench_ratio(r[0].peak_running, r[1].peak_running);
        printf("paged / contiguous (same %lld-block KV pool): peak concurrent sequences %d vs %d = "
               "%.2fx (target >= 4x), throughput %.2fx\n", (long long)r[0].kv_blocks,
               r[0].peak_running, r[1].peak_running, cr, bench_ratio(r[0].gen_tps, r[1].gen_tps));
        json_object_set_new(head, "concurrency_ratio", json_real(cr));
        json_object_set_new(head, "throughput_ratio", json_real(bench_ratio(r[0].gen_tps, r[1].gen_tps)));
    } else if (strcmp(name, "prefix") == 0) {
        static const char *const a[] = {"engine.kvcache=prefix", "engine.kv_cache_tokens=16384",
                                        "engine.max_seq_len=2560", NULL};
        static const char *const b[] = {"engine.kvcache=paged", "engine.kv_cache_tokens=16384",
                                        "engine.max_seq_len=2560", NULL};
        if ((st = run_pair(o, "prefix", a, o, "paged", b, mp, &r[0], &r[1], err, sizeof err))) goto out;
        n = 2;
        bench_print_results(stdout, r, n);
        double hit = r[0].prefix_query ? (double)r[0].prefix_hit / (double)r[0].prefix_query : 0;
        printf("prefix / paged (%d-token shared prompt): TTFT p50 %.1f vs %.1f ms = %.1fx lower "
               "(target >= 5x), mean %.1fx lower; prefix hit rate %.1f%%; throughput %.2fx\n",
               o->w.shared_prefix, r[0].ttft.p50, r[1].ttft.p50, bench_ratio(r[1].ttft.p50, r[0].ttft.p50),
               bench_ratio(r[1].ttft.mean, r[0].ttft.mean), 100 * hit, bench_ratio(r[0].gen_tps, r[1].gen_tps));
        json_object_set_new(head, "ttft_p50_ratio", json_real(bench_ratio(r[1].ttft.p50, r[0].ttft.p50)));
        json_object_set_new(head, "ttft_mean_ratio", json_real(bench_ratio(r[1].ttft.mean, r[0].ttft.mean)));
        json_object_set_new(head, "prefix_hit_rate", json_real(hit));
    } else if (strcmp(name, "kvdtype") == 0) {
        int64_t plen = o->w.prompt_len.hi, olen = o->w.output_len.hi;
        char s_len[64], s_tok[64];
        snprintf(s_len, sizeof s_len, "engine.max_seq_len=%lld", (long long)(plen + olen));
        snprintf(s_tok, sizeof s_tok, "engine.kv_cache_tokens=%lld", (long long)(plen + olen + 64));
        const char *const a[] = {"engine.kv_dtype=f16", s_len, s_tok, NULL};
        const char *const b[] = {"engine.kv_dtype=q8_0", s_len, s_tok, NULL};
        if ((st = run_pair_by(o, "f16", a, o, "q8_0", b, mp, true, &r[0], &r[1], err, sizeof err))) goto out;
        n = 2;
        bench_print_results(stdout, r, n);
        double sr = bench_ratio(r[0].itl.p50, r[1].itl.p50);
        printf("q8_0 / f16 KV, decode after a %lld-token prompt: step p50 %.2f vs %.2f ms = %.3fx "
               "faster (target > 1), decode-phase tok/s %.1f vs %.1f; KV bytes per token %.4f of f16's\n",
               (long long)plen, r[1].itl.p50, r[0].itl.p50, sr, r[1].phase_tps, r[0].phase_tps, 34.0 / 64.0);
        json_object_set_new(head, "decode_step_ratio", json_real(sr));
        json_object_set_new(head, "decode_phase_ratio", json_real(bench_ratio(r[1].phase_tps, r[0].phase_tps)));
    } else if (strcmp(name, "batch") == 0) {
        /* the single stream: the same requests, one at a time */
        bench_opts o1 = *o;
        o1.w.concurrency = 1;
        o1.w.n_requests = o->w.n_requests / 4 > 0 ? o->w.n_requests / 4 : 1;
        static const char *const a[] = {"scheduler.continuous.max_num_seqs=64", NULL};
        char la[32], lb[32];
        snprintf(la, sizeof la, "conc%d", o->w.concurrency);
        snprintf(lb, sizeof lb, "single");
        if ((st = run_pair(o, la, a, &o1, lb, a, mp, &r[0], &r[1], err, sizeof err))) goto out;
        n = 2;
        bench_print_results(stdout, r, n);
        /* The target is on decode throughput (the issue: "aggregate decode
         * tokens/s"); end to end, prefill included, is printed beside it. */
        double br = bench_ratio(r[0].phase_tps, r[1].phase_tps);
        double er = bench_ratio(r[0].gen_tps, r[1].gen_tps);
        printf("%d concurrent / single stream: aggregate decode-phase tok/s %.1f vs %.1f = %.2fx "
               "(target >= 4x); end to end with prefill %.1f vs %.1f = %.2fx\n",
               o->w.concurrency, r[0].phase_tps, r[1].phase_tps, br, r[0].gen_tps, r[1].gen_tps, er);
        json_object_set_new(head, "batch_ratio", json_real(br));
        json_object_set_new(head, "batch_ratio_end_to_end", json_real(er));
    } else {
        fprintf(stderr, "bench: unknown comparison '%s' (sched, kv, prefix, quant, batch, kvdtype, spec, draftbatch)\n", name);
        st = PAGODA_ERR_INVALID;
        goto out;
    }
    if (o->roofline) bench_print_roofline(rf);
    if (o->plot) {
        char title[128];
        snprintf(title, sizeof title, "%s: %s vs %s", name, r[0].label, r[1].label);
        char fname[64];
        snprintf(fname, sizeof fname, "compare-%s-timeline", name);
        bench_plot_timeline(o->plot, fname, title, r, n);
        if (strcmp(name, "prefix") == 0) bench_plot_ttft(o->plot, "compare-prefix-ttft", title, r, n);
    }
report:
    if (o->json) bench_write_json(o->json, o, name, r, n, rf, head);
    if (o->csv) bench_write_csv(o->csv, r, n);
out:
    if (st && err[0]) fprintf(stderr, "bench: %s\n", err);
    json_decref(head);
    for (int i = 0; i < 3; i++) bench_result_free(&r[i]);
    return st;
}
