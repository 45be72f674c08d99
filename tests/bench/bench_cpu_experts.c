/*
 * bench_cpu_experts.c: a micro-benchmark (not a test: it asserts nothing
 * and prints times) of the CPU backend's expert matmuls on one MoE layer
 * of the qwen3-30b-a3b shape: dim 2048, expert FFN 768, 128 experts,
 * top-8; gate and up (x_rows = each pair's token) and down (one row per
 * pair), in Q4_K and Q8_0, at T = 1 (decode), 16 (16 sequences decoding)
 * and 512 (a prefill chunk). Each side runs in turn, alternating, on the
 * same weights and routing:
 *   experts  one pagoda_cpu_matmul_experts call per matrix;
 *   matmuls  the same work as one pagoda_cpu_matmul per active expert (its
 *            rows gathered, the output scattered back): what a caller
 *            without the slot could do at best.
 * Every rep routes anew (both sides the same routing), so the experts'
 * weights come from memory as in a real decode, not from the last rep's
 * cache. Reports per side the best rep's time per byte, quoted in ms for
 * the mean routing's bytes, GB/s of expert weights read (each active
 * expert's bytes once), and the fraction of the read-bandwidth
 * bound measured in the same run (the pool's threads summing slices of a
 * buffer far larger than the cache, as `pagoda bench --roofline` does, in
 * passes as short as a decode layer's). "cpu": the best rep's process CPU
 * time in ms (with --threads 1, the work itself, whatever the load).
 *
 *   bench_cpu_experts [--threads N] [--reps N] [--types q4_k,q8_0] [--T 1,16,512]
 *
 * Weights are random bytes with small scales (every pattern is a valid
 * block; the kernels' speed does not depend on the values).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_features.h"
#include "kernels.h"
#include "pagoda/types.h"
#include "quant.h"
#include "threadpool.h"
#include "bench_util.h"

#define DIM 2048
#define FFN 768
#define N_EXP 128
#define TOP_K 8


/* E experts of N x K of dtype, packed (expert e at e * N * row bytes). */
static uint8_t *make_experts(int dtype, int64_t N, int64_t K, size_t *rb_out)
{
    size_t rb = pagoda_dtype_row_bytes(dtype, K);
    size_t bytes = rb * (size_t)N * N_EXP;
    uint8_t *w = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!w) return NULL;
    uint64_t *q = (uint64_t *)w;
    for (size_t i = 0; i < bytes / 8; i++) q[i] = next();
    int be = 0, bb = 0;
    pagoda_dtype_block(dtype, &be, &bb);
    for (size_t off = 0; off + (size_t)bb <= bytes; off += (size_t)bb) {
        uint16_t d = pagoda_fp32_to_fp16(0.0005f + 0.002f * unif());
        memcpy(w + off, &d, 2); /* Q8_0's d and Q4_K's d lead the block */
        if (dtype == PAGODA_DTYPE_Q4_K) memcpy(w + off + 2, &d, 2);
    }
    *rb_out = rb;
    return w;
}

/* ------------------------------------------------------ read bandwidth */

typedef struct bw_job {
    const uint64_t *p;
    size_t n;
    uint64_t sums[256];
} bw_job;

typedef uint64_t bw_vec __attribute__((vector_size(16)));

static void bw_task(void *arg, int ith, int nth)
{
    bw_job *j = arg;
    /* eight independent 16-byte sums (SSE2): bound by memory, not adds */
    size_t nv = j->n / 2, lo = nv * (size_t)ith / (size_t)nth, hi = nv * (size_t)(ith + 1) / (size_t)nth;
    const bw_vec *v = (const bw_vec *)j->p;
    bw_vec acc[8] = {{0}};
    size_t i = lo;
    for (; i + 8 <= hi; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += v[i + k];
    uint64_t t = 0;
    for (; i < hi; i++) t += v[i][0] + v[i][1];
    for (int k = 0; k < 8; k++) t += acc[k][0] + acc[k][1];
    j->sums[ith & 255] = t;
}

/* Best read rate over many short passes, each over another 32 MiB slice
 * of a 1 GiB buffer (never the last pass's, so never from cache): the
 * same window length as a decode layer's expert reads, so a shared
 * machine's quiet moments favour neither side. */
static double read_bandwidth(pagoda_threadpool *tp)
{
    size_t total = (size_t)1 << 30, slice = (size_t)32 << 20;
    uint64_t *b = aligned_alloc(64, total);
    if (!b) return 0;
    for (size_t i = 0; i < total / 8; i++) b[i] = i;
    double best = 0;
    for (int r = 0; r < 96; r++) {
        bw_job j = {.p = b + (size_t)(r % 32) * (slice / 8), .n = slice / 8};
        double t = now_s();
        pagoda_threadpool_run(tp, bw_task, &j);
        double gbs = (double)slice / (now_s() - t) / 1e9;
        if (gbs > best) best = gbs;
    }
    free(b);
    return best;
}

/* --------------------------------------------------------------- a layer */

typedef struct layer {
    int dtype;
    uint8_t *gate, *up, *down;
    size_t rb_gu, rb_d;
} layer;

typedef struct work {
    int64_t T, R;
    float *x;        /* [T x DIM] */
    int32_t *ids, *xr;
    float *g, *u;    /* [R x FFN] */
    float *y;        /* [R x DIM] */
    /* per-expert side */
    float *xg, *og;  /* gathered rows and outputs */
    int32_t *rows;
    int n_active;
    double bytes;    /* expert weight bytes read per layer */
} work;

static int side_experts(pagoda_cpu_exec *ex, const layer *L, work *w)
{
    int st = pagoda_cpu_matmul_experts(ex, w->x, DIM * 4, w->T, w->xr, L->gate, L->dtype, L->rb_gu, FFN, DIM,
                                       L->rb_gu * FFN, w->ids, w->R, w->g, FFN * 4);
    if (!st)
        st = pagoda_cpu_matmul_experts(ex, w->x, DIM * 4, w->T, w->xr, L->up, L->dtype, L->rb_gu, FFN, DIM,
                                       L->rb_gu * FFN, w->ids, w->R, w->u, FFN * 4);
    if (!st)
        st = pagoda_cpu_matmul_experts(ex, w->g, FFN * 4, w->R, NULL, L->down, L->dtype, L->rb_d, DIM, FFN,
                                       L->rb_d * DIM, w->ids, w->R, w->y, DIM * 4);
    return st;
}

/* One matrix as per-expert matmuls: gather, multiply, scatter. */
static int per_expert_t(pagoda_cpu_exec *ex, int dtype, const float *x, int64_t K, const int32_t *xr,
                        const uint8_t *W, size_t rb, int64_t N, work *w, float *out)
{
    for (int e = 0; e < N_EXP; e++) {
        int64_t n = 0;
        for (int64_t r = 0; r < w->R; r++)
            if (w->ids[r] == e) w->rows[n++] = (int32_t)r;
        if (!n) continue;
        for (int64_t j = 0; j < n; j++)
            memcpy(w->xg + j * K, x + (xr ? xr[w->rows[j]] : w->rows[j]) * K, sizeof(float) * (size_t)K);
        int st = pagoda_cpu_matmul(ex, w->xg, sizeof(float) * (size_t)K, n, K, W + (size_t)e * rb * (size_t)N,
                                   dtype, rb, N, NULL, w->og, sizeof(float) * (size_t)N);
        if (st) return st;
        for (int64_t j = 0; j < n; j++)
            memcpy(out + w->rows[j] * N, w->og + j * N, sizeof(float) * (size_t)N);
    }
    return 0;
}

static int side_matmuls(pagoda_cpu_exec *ex, const layer *L, work *w)
{
    int st = per_expert_t(ex, L->dtype, w->x, DIM, w->xr, L->gate, L->rb_gu, FFN, w, w->g);
    if (!st) st = per_expert_t(ex, L->dtype, w->x, DIM, w->xr, L->up, L->rb_gu, FFN, w, w->u);
    if (!st) st = per_expert_t(ex, L->dtype, w->g, FFN, NULL, L->down, L->rb_d, DIM, w, w->y);
    return st;
}

static void route(work *w)
{
    bool used[N_EXP] = {false};
    for (int64_t t = 0; t < w->T; t++) {
        bool pick[N_EXP] = {false};
        for (int j = 0; j < TOP_K; j++) {
            int e;
            do e = (int)(next() % N_EXP); while (pick[e]);
            pick[e] = used[e] = true;
            w->ids[t * TOP_K + j] = e;
            w->xr[t * TOP_K + j] = (int32_t)t;
        }
    }
    w->n_active = 0;
    for (int e = 0; e < N_EXP; e++) w->n_active += used[e];
}

int main(int argc, char **argv)
{
    int threads = 0, reps = 5;
    const char *types = "q4_k,q8_0", *Ts = "1,16,512";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--types")) types = argv[i + 1];
        else if (!strcmp(argv[i], "--T")) Ts = argv[i + 1];
        else {
            fprintf(stderr, "usage: %s [--threads N] [--reps N] [--types q4_k,q8_0] [--T 1,16,512]\n", argv[0]);
            return 2;
        }
    }
    if (threads <= 0) threads = pagoda_cpu_count();
    pagoda_threadpool *tp = NULL;
    if (pagoda_threadpool_create(threads, &tp)) return 1;
    pagoda_cpu_exec ex = {.pool = tp};
    char path[128];
    double bw = read_bandwidth(tp);
    printf("qwen3-30b-a3b MoE layer: dim %d, expert ffn %d, %d experts, top-%d (gate + up + down)\n", DIM, FFN,
           N_EXP, TOP_K);
    char load[64] = "?";
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        if (!fgets(load, sizeof load, lf)) snprintf(load, sizeof load, "?");
        fclose(lf);
        load[strcspn(load, "\n")] = 0;
    }
    printf("%s, %d threads; read bandwidth %.1f GB/s (pool threads, best of 96 passes of 32 MiB); "
           "load average %s\n", pagoda_cpu_kernel_path(path, sizeof path), threads, bw, load);
    printf("%-5s %4s %6s  %10s %10s  %8s %8s  %8s %8s  %6s  %9s %9s\n", "type", "T", "active", "experts ms",
           "matmuls ms", "exp GB/s", "mm GB/s", "exp/bw", "mm/bw", "speed", "exp cpu", "mm cpu");
    char tbuf[64];
    snprintf(tbuf, sizeof tbuf, "%s", types);
    for (char *tn = strtok(tbuf, ","); tn; tn = strtok(NULL, ",")) {
        layer L = {.dtype = !strcmp(tn, "q8_0") ? PAGODA_DTYPE_Q8_0 : PAGODA_DTYPE_Q4_K};
        L.gate = make_experts(L.dtype, FFN, DIM, &L.rb_gu);
        L.up = make_experts(L.dtype, FFN, DIM, &L.rb_gu);
        L.down = make_experts(L.dtype, DIM, FFN, &L.rb_d);
        if (!L.gate || !L.up || !L.down) {
            fprintf(stderr, "out of memory for the %s weights\n", tn);
            return 1;
        }
        char Tb[64];
        snprintf(Tb, sizeof Tb, "%s", Ts);
        char *save = NULL;
        for (char *ts = strtok_r(Tb, ",", &save); ts; ts = strtok_r(NULL, ",", &save)) {
            work w = {.T = atoll(ts)};
            w.R = w.T * TOP_K;
            w.x = malloc(sizeof(float) * (size_t)(w.T * DIM));
            w.ids = malloc(sizeof(int32_t) * (size_t)w.R);
            w.xr = malloc(sizeof(int32_t) * (size_t)w.R);
            w.rows = malloc(sizeof(int32_t) * (size_t)w.R);
            w.g = malloc(sizeof(float) * (size_t)(w.R * FFN));
            w.u = malloc(sizeof(float) * (size_t)(w.R * FFN));
            w.y = malloc(sizeof(float) * (size_t)(w.R * DIM));
            w.xg = malloc(sizeof(float) * (size_t)(w.R * DIM));
            w.og = malloc(sizeof(float) * (size_t)(w.R * DIM));
            if (!w.x || !w.ids || !w.xr || !w.rows || !w.g || !w.u || !w.y || !w.xg || !w.og) return 1;
            for (int64_t i = 0; i < w.T * DIM; i++) w.x[i] = unif() * 2.0f - 1.0f;
            for (int64_t i = 0; i < w.R * FFN; i++) w.g[i] = unif() * 2.0f - 1.0f;
            route(&w);
            w.bytes = (double)w.n_active * (double)(2 * L.rb_gu * FFN + L.rb_d * DIM);
            double best_e = 1e30, best_m = 1e30, cpu_e = 1e30, cpu_m = 1e30;
            /* T=1: many reps to smooth the noise of a shared machine */
            int nrep = w.T == 1 ? reps * 20 : w.T <= 16 ? reps * 4 : reps;
            side_experts(&ex, &L, &w); /* warm both */
            side_matmuls(&ex, &L, &w);
            double bytes = 0;
            int active = 0;
            for (int r = 0; r < nrep; r++) {
                /* a fresh routing per rep (both sides the same): decode reads
                 * other experts every layer, never the last call's from cache */
                route(&w);
                active += w.n_active;
                bytes += (double)w.n_active * (double)(2 * L.rb_gu * FFN + L.rb_d * DIM);
                double t = now_s(), c0 = cpu_s();
                if (side_experts(&ex, &L, &w)) return 1;
                double te = now_s() - t, ce = cpu_s() - c0;
                t = now_s();
                c0 = cpu_s();
                if (side_matmuls(&ex, &L, &w)) return 1;
                double tm = now_s() - t, cm = cpu_s() - c0;
                /* per byte: the routings differ in how many experts they wake */
                double b = (double)w.n_active * (double)(2 * L.rb_gu * FFN + L.rb_d * DIM);
                if (te / b < best_e) best_e = te / b;
                if (tm / b < best_m) best_m = tm / b;
                if (ce / b < cpu_e) cpu_e = ce / b;
                if (cm / b < cpu_m) cpu_m = cm / b;
            }
            /* times quoted for the mean routing's bytes */
            w.bytes = bytes / nrep;
            w.n_active = (active + nrep / 2) / nrep;
            best_e *= w.bytes;
            best_m *= w.bytes;
            cpu_e *= w.bytes;
            cpu_m *= w.bytes;
            double ge = w.bytes / best_e / 1e9, gm = w.bytes / best_m / 1e9;
            printf("%-5s %4lld %6d  %10.3f %10.3f  %8.1f %8.1f  %8.2f %8.2f  %5.2fx  %9.3f %9.3f\n", tn,
                   (long long)w.T, w.n_active, best_e * 1e3, best_m * 1e3, ge, gm, ge / bw, gm / bw,
                   best_m / best_e, cpu_e * 1e3, cpu_m * 1e3);
            fflush(stdout);
            free(w.x); free(w.ids); free(w.xr); free(w.rows); free(w.g); free(w.u); free(w.y); free(w.xg);
            free(w.og);
        }
        free(L.gate);
        free(L.up);
        free(L.down);
    }
    pagoda_cpu_exec_release(&ex);
    pagoda_threadpool_destroy(tp);
    return 0;
}
