/*
 * bench_peaks.c: the instruction peaks of `pagoda bench --roofline`: a
 * tight loop of one multiply-accumulate instruction (twelve independent
 * accumulators, so latency never binds) on one core and on every bench
 * thread at once, for each path this CPU has: FMA f32 (256 and 512 bits),
 * AVX2 vpmaddubsw int8, VNNI vpdpbusd (AVX-VNNI 256, AVX-512 256 / 512),
 * AVX512-BF16 vdpbf16ps, AMX tdpbssd and tdpbf16ps (where CPUID has it and the
 * kernel grants the tile state). The loops are inline assembly, so this
 * file needs no ISA flags; each runs only after its CPUID check. And the
 * peak a prefill figure is matched with: the one of the path the CPU
 * backend runs for the model's weight type at the active level.
 * Not for: bandwidth or sgemm (bench_roofline.c), the kernels themselves.
 */
#include <cpuid.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bench_internal.h"

#if defined(__x86_64__)

/* Each loop: `iters` rounds of 12 instructions into r0..r11 from the
 * zeroed r12, r13 (r = "ymm" or "zmm"). */
#define OP(ins, r, d) ins " %%" r "12, %%" r "13, %%" r #d "\n\t"
#define REP12(ins, r)                                                                        \
    OP(ins, r, 0) OP(ins, r, 1) OP(ins, r, 2) OP(ins, r, 3) OP(ins, r, 4) OP(ins, r, 5)      \
    OP(ins, r, 6) OP(ins, r, 7) OP(ins, r, 8) OP(ins, r, 9) OP(ins, r, 10) OP(ins, r, 11)
#define LOOP(fname, ins, r)                                                                  \
    static void fname(uint64_t iters)                                                        \
    {                                                                                        \
        /* VEX xor of the xmm halves zeroes the whole ymm / zmm (and runs on \
         * an AVX2-only CPU, where vpxord would not) */                                     \
        __asm__ volatile("vpxor %%xmm12, %%xmm12, %%xmm12\n\tvpxor %%xmm13, %%xmm13, %%xmm13\n\t" \
                         "1:\n\t" REP12(ins, r) "dec %0\n\tjnz 1b\n\tvzeroupper\n\t"      \
                         : "+r"(iters)::"xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5",      \
                           "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",        \
                           "xmm13", "cc");                                                   \
    }

LOOP(loop_fma256, "vfmadd231ps", "ymm")
LOOP(loop_fma512, "vfmadd231ps", "zmm")
LOOP(loop_maddubs256, "vpmaddubsw", "ymm")
LOOP(loop_avxvnni256, "%{vex%} vpdpbusd", "ymm")
LOOP(loop_vnni256, "%{evex%} vpdpbusd", "ymm")
LOOP(loop_vnni512, "vpdpbusd", "zmm")
LOOP(loop_dpbf16_512, "vdpbf16ps", "zmm")

/* AMX: tiles 0-3 accumulate tile 4 x tile 5, all 16 rows x 64 bytes. */
typedef struct amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

static void loop_amx_int8(uint64_t iters)
{
    amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 6; i++) { c.colsb[i] = 64; c.rows[i] = 16; }
    __asm__ volatile("ldtilecfg %1\n\t"
                     "tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3\n\t"
                     "tilezero %%tmm4\n\ttilezero %%tmm5\n\t"
                     "1:\n\t"
                     "tdpbssd %%tmm5, %%tmm4, %%tmm0\n\ttdpbssd %%tmm5, %%tmm4, %%tmm1\n\t"
                     "tdpbssd %%tmm5, %%tmm4, %%tmm2\n\ttdpbssd %%tmm5, %%tmm4, %%tmm3\n\t"
                     "tdpbssd %%tmm5, %%tmm4, %%tmm0\n\ttdpbssd %%tmm5, %%tmm4, %%tmm1\n\t"
                     "tdpbssd %%tmm5, %%tmm4, %%tmm2\n\ttdpbssd %%tmm5, %%tmm4, %%tmm3\n\t"
                     "tdpbssd %%tmm5, %%tmm4, %%tmm0\n\ttdpbssd %%tmm5, %%tmm4, %%tmm1\n\t"
                     "tdpbssd %%tmm5, %%tmm4, %%tmm2\n\ttdpbssd %%tmm5, %%tmm4, %%tmm3\n\t"
                     "dec %0\n\tjnz 1b\n\ttilerelease\n\t"
                     : "+r"(iters)
                     : "m"(c)
                     : "cc", "memory");
}

static void loop_amx_bf16(uint64_t iters)
{
    amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 6; i++) { c.colsb[i] = 64; c.rows[i] = 16; }
    __asm__ volatile("ldtilecfg %1\n\t"
                     "tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3\n\t"
                     "tilezero %%tmm4\n\ttilezero %%tmm5\n\t"
                     "1:\n\t"
                     "tdpbf16ps %%tmm5, %%tmm4, %%tmm0\n\ttdpbf16ps %%tmm5, %%tmm4, %%tmm1\n\t"
                     "tdpbf16ps %%tmm5, %%tmm4, %%tmm2\n\ttdpbf16ps %%tmm5, %%tmm4, %%tmm3\n\t"
                     "tdpbf16ps %%tmm5, %%tmm4, %%tmm0\n\ttdpbf16ps %%tmm5, %%tmm4, %%tmm1\n\t"
                     "tdpbf16ps %%tmm5, %%tmm4, %%tmm2\n\ttdpbf16ps %%tmm5, %%tmm4, %%tmm3\n\t"
                     "tdpbf16ps %%tmm5, %%tmm4, %%tmm0\n\ttdpbf16ps %%tmm5, %%tmm4, %%tmm1\n\t"
                     "tdpbf16ps %%tmm5, %%tmm4, %%tmm2\n\ttdpbf16ps %%tmm5, %%tmm4, %%tmm3\n\t"
                     "dec %0\n\tjnz 1b\n\ttilerelease\n\t"
                     : "+r"(iters)
                     : "m"(c)
                     : "cc", "memory");
}

static bool cpuid_bit(unsigned leaf, unsigned sub, int reg, int bit)
{
    unsigned r[4];
    if (!__get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3])) return false;
    return (r[reg] >> bit) & 1;
}

/* The OS saves the state: XCR0 bits (SSE|AVX = 0x6, + opmask/zmm = 0xe0). */
static bool xcr0_has(uint64_t mask)
{
    if (!cpuid_bit(1, 0, 2, 27)) return false; /* OSXSAVE */
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((((uint64_t)hi << 32) | lo) & mask) == mask;
}

static bool amx_granted(void)
{
    static int g = -1;
    if (g < 0) {
        /* ARCH_REQ_XCOMP_PERM for XTILEDATA (feature 18) */
        g = cpuid_bit(7, 0, 3, 24) && cpuid_bit(7, 0, 3, 25) && xcr0_has(0x60000ull) &&
            syscall(SYS_arch_prctl, 0x1023, 18) == 0;
    }
    return g;
}

typedef struct peak_def {
    const char *key, *name;
    double ops;                       /* operations (multiply and add: 2 per MAC) per instruction */
    void (*loop)(uint64_t);
    int instrs;                       /* instructions per loop round */
} peak_def;

static const peak_def PEAKS[] = {
    {"fma256", "FMA f32 256-bit (vfmadd231ps ymm)", 16, loop_fma256, 12},
    {"fma512", "FMA f32 512-bit (vfmadd231ps zmm)", 32, loop_fma512, 12},
    {"maddubs256", "AVX2 int8 (vpmaddubsw ymm)", 64, loop_maddubs256, 12},
    {"avxvnni256", "AVX-VNNI int8 (vpdpbusd ymm, VEX)", 64, loop_avxvnni256, 12},
    {"vnni256", "AVX-512 VNNI int8 (vpdpbusd ymm)", 64, loop_vnni256, 12},
    {"vnni512", "AVX-512 VNNI int8 (vpdpbusd zmm)", 128, loop_vnni512, 12},
    {"dpbf16", "AVX512-BF16 (vdpbf16ps zmm)", 64, loop_dpbf16_512, 12},
    {"amx_int8", "AMX int8 (tdpbssd, 16x16x64)", 32768, loop_amx_int8, 12},
    {"amx_bf16", "AMX BF16 (tdpbf16ps, 16x16x32)", 16384, loop_amx_bf16, 12},
};
#define N_PEAKS (int)(sizeof PEAKS / sizeof PEAKS[0])

static bool peak_available(const char *key)
{
    __builtin_cpu_init();
    bool avx = xcr0_has(0x6), zmm = avx && xcr0_has(0xe6);
    bool avx2 = avx && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    bool avx512 = zmm && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl");
    if (!strcmp(key, "fma256") || !strcmp(key, "maddubs256")) return avx2;
    if (!strcmp(key, "fma512")) return avx512;
    if (!strcmp(key, "avxvnni256")) return avx2 && cpuid_bit(7, 1, 0, 4);
    if (!strcmp(key, "vnni256") || !strcmp(key, "vnni512")) return avx512 && cpuid_bit(7, 0, 2, 11);
    if (!strcmp(key, "dpbf16")) return avx512 && cpuid_bit(7, 1, 0, 5);
    if (!strcmp(key, "amx_int8")) return amx_granted();
    if (!strcmp(key, "amx_bf16")) return amx_granted() && cpuid_bit(7, 0, 3, 22);
    return false;
}

typedef struct peak_thr {
    const peak_def *d;
    uint64_t iters;
    pthread_barrier_t *bar;
} peak_thr;

static void *peak_thread(void *arg)
{
    peak_thr *t = arg;
    pthread_barrier_wait(t->bar);
    t->d->loop(t->iters);
    return NULL;
}

/* Operations per second of `threads` threads running the loop at once,
 * best of three runs of at least ~20 ms each. */
static double run_peak(const peak_def *d, int threads)
{
    uint64_t iters = 1u << 14;
    for (;;) { /* calibrate on one thread */
        double t = bench_now_s();
        d->loop(iters);
        double dt = bench_now_s() - t;
        if (dt > 0.02 || iters > (1ull << 34)) break;
        iters *= dt > 0.002 ? 2 : 8;
    }
    if (threads > 64) threads = 64;
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        pthread_t th[64];
        peak_thr a[64];
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)threads);
        int started = 1;
        for (int k = 1; k < threads; k++) {
            a[k] = (peak_thr){d, iters, &bar};
            if (pthread_create(&th[k], NULL, peak_thread, &a[k])) break;
            started++;
        }
        if (started < threads) { /* cannot start them all: no all-threads figure */
            for (int k = 1; k < started; k++) pthread_cancel(th[k]);
            pthread_barrier_destroy(&bar);
            return 0;
        }
        a[0] = (peak_thr){d, iters, &bar};
        double t = bench_now_s();
        peak_thread(&a[0]);
        for (int k = 1; k < threads; k++) pthread_join(th[k], NULL);
        double dt = bench_now_s() - t;
        pthread_barrier_destroy(&bar);
        double ops = (double)threads * (double)iters * d->instrs * d->ops / dt;
        if (ops > best) best = ops;
    }
    return best;
}

#endif /* __x86_64__ */

void bench_measure_peaks(roofline *rf)
{
    rf->n_peaks = 0;
#if defined(__x86_64__)
    for (int i = 0; i < N_PEAKS && rf->n_peaks < BENCH_MAX_PEAKS; i++) {
        if (!peak_available(PEAKS[i].key)) continue;
        bench_peak *p = &rf->peaks[rf->n_peaks++];
        snprintf(p->key, sizeof p->key, "%s", PEAKS[i].key);
        snprintf(p->name, sizeof p->name, "%s", PEAKS[i].name);
        p->core_gops = run_peak(&PEAKS[i], 1) / 1e9;
        p->all_gops = rf->threads > 1 ? run_peak(&PEAKS[i], rf->threads) / 1e9 : p->core_gops;
    }
#endif
}

/* CPUID's vendor is AMD (or Hygon): gemm_fma.h's rule for BF16 */
static bool vendor_amd(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    char v[13] = {0};
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    memcpy(v, &b, 4);
    memcpy(v + 4, &d, 4);
    memcpy(v + 8, &c, 4);
    return !strcmp(v, "AuthenticAMD") || !strcmp(v, "HygonGenuine");
#else
    return false;
#endif
}

static const bench_peak *peak_of(const roofline *rf, const char *key)
{
    for (int i = 0; i < rf->n_peaks; i++)
        if (!strcmp(rf->peaks[i].key, key)) return &rf->peaks[i];
    return NULL;
}

/* The level PAGODA_CPU_ISA asks for (the backend clamps it to the CPU's):
 * 0 scalar .. 4 amx, 99 when unset (the best the CPU has). */
static int env_level(void)
{
    const char *e = getenv("PAGODA_CPU_ISA");
    if (!e || !*e) return 99;
    static const char *const names[] = {"scalar", "avx2", "avxvnni", "avx512", "amx"};
    for (int i = 0; i < 5; i++)
        if (!strcasecmp(e, names[i])) return i;
    return 99;
}

const bench_peak *bench_matching_peak(const roofline *rf, const char *weight_type, const char *f16_gemm)
{
    int lv = env_level();
    const char *t = weight_type ? weight_type : "";
    if (!strcmp(t, "F32")) {
        const bench_peak *p = lv >= 3 ? peak_of(rf, "fma512") : NULL;
        return p ? p : peak_of(rf, "fma256");
    }
    if (!strcmp(t, "F16") || !strcmp(t, "BF16")) {
        /* [backend.cpu] f16_gemm (kernels/avx512/gemm_fma.h), as the
         * bench's config says it, without PAGODA_CPU_BF16 in the
         * environment: auto sends F16 to the F32-FMA GEMM at AVX-512, BF16
         * to the AMX tiles where they run it, vdpbf16ps on AMD, the FMA
         * GEMM elsewhere; fma both to the FMA GEMM; dpbf16 both to the BF16
         * GEMMs (matmul_bf16.c); off: the 256-bit exact kernels */
        const char *e = getenv("PAGODA_CPU_BF16");
        const char *fg = f16_gemm && *f16_gemm ? f16_gemm : "auto";
        if (!e && lv >= 3 && !strcasecmp(fg, "off")) return peak_of(rf, "fma256");
        if (!e && lv >= 3 && !strcasecmp(fg, "dpbf16")) {
            if (lv >= 4 && peak_of(rf, "amx_bf16")) return peak_of(rf, "amx_bf16");
            if (peak_of(rf, "dpbf16")) return peak_of(rf, "dpbf16");
            return peak_of(rf, "fma256");
        }
        if (!e && lv >= 3 && peak_of(rf, "fma512")) {
            if (!strcmp(t, "F16") || !strcasecmp(fg, "fma")) return peak_of(rf, "fma512");
            if (lv >= 4 && peak_of(rf, "amx_bf16")) return peak_of(rf, "amx_bf16");
            if (peak_of(rf, "dpbf16") && vendor_amd()) return peak_of(rf, "dpbf16");
            return peak_of(rf, "fma512");
        }
        /* PAGODA_CPU_BF16 (matmul_bf16.c): 0 off, 1 (default) BF16 weights, 2 F16 too */
        int mode = e && *e ? atoi(e) : 1;
        bool on = mode >= 2 || (mode == 1 && !strcmp(t, "BF16"));
        /* the AMX level runs them on the tiles where CPUID has AMX-BF16 */
        if (lv >= 4 && on && peak_of(rf, "amx_bf16")) return peak_of(rf, "amx_bf16");
        if (lv >= 3 && on && peak_of(rf, "dpbf16")) return peak_of(rf, "dpbf16");
        return peak_of(rf, "fma256");
    }
    /* integer weight types: the best int8 path the level allows */
    if (lv >= 4 && peak_of(rf, "amx_int8")) return peak_of(rf, "amx_int8");
    if (lv >= 3 && peak_of(rf, "vnni512")) return peak_of(rf, "vnni512");
    if (lv >= 2 && peak_of(rf, "avxvnni256")) return peak_of(rf, "avxvnni256");
    return peak_of(rf, "maddubs256");
}

void bench_print_peaks(const roofline *rf)
{
    if (!rf->n_peaks) return;
    printf("peaks (a tight loop of the instruction; G ops/s: one core, %d threads):\n", rf->threads);
    for (int i = 0; i < rf->n_peaks; i++)
        printf("  %-38s %8.1f  %8.1f\n", rf->peaks[i].name, rf->peaks[i].core_gops, rf->peaks[i].all_gops);
}
