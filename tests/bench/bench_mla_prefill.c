/*
 * bench_mla_prefill.c: a benchmark (not a test: it prints times and
 * asserts nothing) of MLA's decompressed prefill against the absorbed form
 * on a deepseek2 GGUF (a shallow `pagoda gen-model --shape
 * deepseek-v2-lite --layers 2`, say): one from-scratch prefill of each
 * length, decompressed on and off, on the CPU backend. The two sides run
 * alternately, rep after rep (the order swapped each rep), so a shared
 * machine's load falls on both; reported per side: the best and the
 * median rep's prompt tokens a second, and their ratio; and the last
 * row's max |logit difference| as a check that both computed the same.
 * With --prefix P each timed chunk starts after P cached positions (a
 * prefix hit, a later chunk of a chunked prefill: written once, before
 * the reps), which the decompressed side reads back from the KV pool.
 *
 *   bench_mla_prefill --model FILE [--threads 2] [--lens 512,2048] [--reps 5]
 *                     [--min 320] [--kv f16|f32|q8_0] [--prefix P]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "config.h"
#include "forward.h"
#include "runtime.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One prefill chunk of T tokens at positions [at, at + T) on fw (the
 * cache holding the positions before it); seconds, the last row's logits
 * into logits. */
static double prefill(pagoda_forward *fw, const int32_t *tok, int32_t at, int32_t T, int32_t *pos,
                      int32_t *slots, int32_t *table, float *logits, uint64_t seq_no)
{
    for (int32_t i = 0; i < T; i++) pos[i] = slots[i] = at + i;
    for (int32_t b = 0; b < (at + T + 15) / 16; b++) table[b] = b;
    pagoda_seq_view sv = {.q_start = 0, .n_q = T, .ctx_len = at + T, .n_blocks = (at + T + 15) / 16,
                          .block_table = table};
    pagoda_batch b = {.seq_no = seq_no, .n_tokens = T, .tokens = tok + at, .positions = pos,
                      .slots = slots, .n_seqs = 1, .seqs = &sv};
    int32_t last = T - 1;
    char err[1024] = "";
    double t0 = now_s();
    if (pagoda_forward_run(fw, &b, &last, 1, logits, err, sizeof err)) {
        fprintf(stderr, "forward: %s\n", err);
        exit(1);
    }
    return now_s() - t0;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *lens_s = "512,2048";
    int threads = 2, reps = 5, min_tok = 320, kv_dtype = PAGODA_DTYPE_F16, prefix = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--lens") && i + 1 < argc) lens_s = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--min") && i + 1 < argc) min_tok = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prefix") && i + 1 < argc) prefix = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kv") && i + 1 < argc) {
            const char *k = argv[++i];
            kv_dtype = !strcmp(k, "f32") ? PAGODA_DTYPE_F32 : !strcmp(k, "q8_0") ? PAGODA_DTYPE_Q8_0
                                                                                 : PAGODA_DTYPE_F16;
        }
        else {
            fprintf(stderr, "usage: bench_mla_prefill --model FILE [--threads N] [--lens 512,2048] "
                            "[--reps N] [--min N] [--kv f16|f32|q8_0] [--prefix P]\n");
            return 2;
        }
    }
    if (!model || threads < 1 || reps < 1 || reps > 100 || min_tok < 1 || prefix < 0) {
        fprintf(stderr, "bench_mla_prefill: --model FILE is required (a deepseek2 GGUF); "
                        "threads >= 1, reps 1..100, min >= 1, prefix >= 0\n");
        return 2;
    }
    char err[2048] = "", buf[4200];
    pagoda_config *cfg = pagoda_config_new_empty();
    snprintf(buf, sizeof buf, "engine.model=%s", model);
    const char *sets[4] = {buf, "engine.log_level=warn", "engine.kv_cache_tokens=64", NULL};
    char th[64];
    snprintf(th, sizeof th, "backend.cpu.threads=%d", threads);
    for (int i = 0; sets[i]; i++)
        if (pagoda_config_set(cfg, sets[i], err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    if (pagoda_config_set(cfg, th, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    pagoda_runtime *rt = NULL;
    if (pagoda_runtime_open(cfg, false, false, &rt, err, sizeof err)) {
        fprintf(stderr, "bench_mla_prefill: %s\n", err);
        return 1;
    }
    const pagoda_hparams *hp = &rt->model->hp;
    if (!hp->mla) {
        fprintf(stderr, "bench_mla_prefill: %s is %s, not an MLA (deepseek2) model\n", model, hp->arch);
        return 1;
    }
    printf("MLA prefill, %s: %d layers, %d heads, kv_lora %d, nope %d, rope %d, v %d; "
           "%d threads, %d reps a side, alternating; %s KV; chunks after %d cached positions\n", model,
           hp->n_layers, hp->n_heads, hp->kv_lora_rank, hp->qk_nope, hp->rope_dims, hp->v_head_dim,
           threads, reps, pagoda_dtype_name(kv_dtype), prefix);
    printf("%6s %14s %14s %14s %14s %8s %8s %10s %10s\n", "tokens", "absorbed best", "(median)",
           "decomp. best", "(median)", "best x", "median x", "max |dl|", "max |l|");
    uint64_t seq_no = 1;
    for (const char *p = lens_s; p && *p;) {
        int32_t T = atoi(p);
        p = strchr(p, ',');
        if (p) p++;
        if (T < 1) continue;
        pagoda_forward fw[2];
        const int32_t C = prefix + T;   /* the context */
        int32_t mt = T > prefix ? T : prefix;
        for (int s = 0; s < 2; s++) {
            if (pagoda_forward_init(&fw[s], rt->model, &rt->backend, mt, 1, (C + 15) / 16, 16,
                                    kv_dtype, err, sizeof err) ||
                (s == 1 && pagoda_forward_mla_decompress(&fw[s], min_tok, C, err, sizeof err))) {
                fprintf(stderr, "bench_mla_prefill: %s\n", err);
                return 1;
            }
        }
        int32_t *tok = malloc(sizeof(int32_t) * (size_t)C), *pos = malloc(sizeof(int32_t) * (size_t)C);
        int32_t *slots = malloc(sizeof(int32_t) * (size_t)C), *table = malloc(sizeof(int32_t) * (size_t)C);
        float *lg[2] = {malloc(sizeof(float) * (size_t)hp->n_vocab), malloc(sizeof(float) * (size_t)hp->n_vocab)};
        for (int32_t i = 0; i < C; i++) tok[i] = (int32_t)(next() % (uint64_t)hp->n_vocab);
        double t[2][100];
        /* the prefix, once each (absorbed on both: it is the cache's
         * latents either way), then one warm-up each (the backend's
         * first-touch and repacking) */
        for (int s = 0; s < 2 && prefix > 0; s++) {
            int32_t dm = fw[s].mla.decompress_min;
            fw[s].mla.decompress_min = 0;
            prefill(&fw[s], tok, 0, prefix, pos, slots, table, lg[s], seq_no++);
            fw[s].mla.decompress_min = dm;
        }
        for (int s = 0; s < 2; s++) prefill(&fw[s], tok, prefix, T, pos, slots, table, lg[s], seq_no++);
        for (int r = 0; r < reps; r++)
            for (int k = 0; k < 2; k++) {
                int s = (r + k) % 2;
                t[s][r] = prefill(&fw[s], tok, prefix, T, pos, slots, table, lg[s], seq_no++);
            }
        double dl = 0, lmax = 0;
        for (int32_t v = 0; v < hp->n_vocab; v++) {
            dl = fmax(dl, fabs((double)lg[0][v] - lg[1][v]));
            lmax = fmax(lmax, fabs((double)lg[0][v]));
        }
        double best[2], med[2];
        for (int s = 0; s < 2; s++) {
            qsort(t[s], (size_t)reps, sizeof(double), cmp_d);
            best[s] = T / t[s][0];
            med[s] = T / t[s][reps / 2];
        }
        printf("%6d %10.1f t/s %10.1f t/s %10.1f t/s %10.1f t/s %7.2fx %7.2fx %10.3g %10.3g%s\n", T,
               best[0], med[0], best[1], med[1], best[1] / best[0], med[1] / med[0], dl, lmax,
               fw[1].mla.decompressed_tokens ? "" : " (below --min: not decompressed)");
        for (int s = 0; s < 2; s++) {
            pagoda_forward_free(&fw[s]);
            free(lg[s]);
        }
        free(tok);
        free(pos);
        free(slots);
        free(table);
    }
    pagoda_runtime_close(rt);
    pagoda_config_free(cfg);
    return 0;
}
