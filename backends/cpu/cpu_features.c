/*
 * cpu_features.c: run-time SIMD level detection (CPUID and XCR0), the
 * override for tests and benchmarks (pagoda_cpu_force_isa, PAGODA_CPU_ISA),
 * and the one phrase that names the kernels that run, which the probe
 * reason (`pagoda plugins`), the backend's info name and its start-up line
 * all print.
 * Not for: kernels themselves, or which table a level runs (dispatch.c).
 */
#include "cpu_features.h"

#include <stdarg.h>
#include <stdint.h>
#include "amx/amx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static int detected = -1;
static bool f_avx_vnni, f_avx512_bf16, f_amx_bf16;
static int forced = -1;
static int env_forced = -2;  /* -2: PAGODA_CPU_ISA not read yet; -1: not set */
static int faked = -1;
static char notes[512];

__attribute__((format(printf, 1, 2))) static void note(const char *fmt, ...)
{
    size_t len = strlen(notes);
    if (len + 1 >= sizeof notes) return;
    if (len) notes[len++] = '\n';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(notes + len, sizeof notes - len, fmt, ap);
    va_end(ap);
}

#if defined(__x86_64__) || defined(__i386__)
/* XCR0: which register state the OS saves on a context switch (bit 1 SSE,
 * 2 AVX's upper YMM, 5 opmask, 6 ZMM 0-15 upper, 7 ZMM 16-31). Only valid
 * when CPUID says OSXSAVE. */
static uint64_t xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}
#define BIT(r, n) (((r) >> (n)) & 1u)
#endif

/* Each level from CPUID and XCR0 together; a level CPUID offers but the OS
 * does not enable (or a partial AVX-512: Skylake-X has no VNNI) falls back
 * one level with a note. */
static int detect(void)
{
    int isa = PAGODA_CPU_ISA_SCALAR;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return isa;
    bool osxsave = BIT(c, 27), avx = BIT(c, 28), fma = BIT(c, 12), f16c = BIT(c, 29);
    unsigned b7 = 0, c7 = 0, a71 = 0;
    if (__get_cpuid_count(7, 0, &a, &b7, &c7, &d)) {
        unsigned b71, c71, d71;
        if (__get_cpuid_count(7, 1, &a71, &b71, &c71, &d71) == 0) a71 = 0;
    }
    uint64_t x = osxsave ? xcr0() : 0;
    bool ymm = (x & 0x6) == 0x6, zmm = (x & 0xe6) == 0xe6;
    char xs[32];
    snprintf(xs, sizeof xs, "0x%llx", (unsigned long long)x);
    if (avx && fma && f16c && BIT(b7, 5)) {
        if (ymm)
            isa = PAGODA_CPU_ISA_AVX2;
        else
            note("cpu: the CPU has AVX2/FMA/F16C but the OS does not save the YMM state (XCR0 %s): "
                 "scalar kernels", xs);
    }
    if (isa < PAGODA_CPU_ISA_AVX2) return isa;
    f_avx_vnni = BIT(a71, 4);
    if (f_avx_vnni) isa = PAGODA_CPU_ISA_AVX_VNNI;
    const char *below = f_avx_vnni ? "AVX-VNNI" : "AVX2";
    bool f512 = BIT(b7, 16) && BIT(b7, 17) && BIT(b7, 30) && BIT(b7, 31); /* F DQ BW VL */
    if (f512 && !BIT(c7, 11))
        note("cpu: the CPU has AVX-512 F/BW/VL/DQ without VNNI: %s kernels", below);
    else if (f512 && !zmm)
        note("cpu: the CPU has AVX-512 but the OS does not save the ZMM/opmask state (XCR0 %s): %s kernels",
             xs, below);
    else if (f512) {
        isa = PAGODA_CPU_ISA_AVX512;
        f_avx512_bf16 = BIT(a71, 5);
    }
    /* AMX: CPUID.7.0:EDX 24/25, XCR0 bits 17-18 and the arch_prctl grant
     * (kernels/amx/amx_detect.c, which keeps why it failed) */
    if (isa == PAGODA_CPU_ISA_AVX512) {
        char why[128];
        if (pagoda_amx_usable(why, sizeof why)) isa = PAGODA_CPU_ISA_AMX;
    }
#endif
    return isa;
}

int pagoda_cpu_hw_isa(void)
{
    if (detected < 0) detected = detect();
    return detected;
}

bool pagoda_cpu_hw_avx_vnni(void)
{
    pagoda_cpu_hw_isa();
    return f_avx_vnni;
}

int pagoda_cpu_detect_isa(void)
{
    if (faked >= 0) return faked;
    if (detected < 0) detected = detect();
    return detected;
}

bool pagoda_cpu_has_avx_vnni(void)
{
    if (faked >= 0) return faked == PAGODA_CPU_ISA_AVX_VNNI;
    pagoda_cpu_detect_isa();
    return f_avx_vnni;
}

bool pagoda_cpu_has_avx512_bf16(void)
{
    if (faked >= 0) return false;
    pagoda_cpu_detect_isa();
    return f_avx512_bf16;
}

bool pagoda_cpu_has_amx_bf16(void)
{
    if (faked >= 0) return false;
    pagoda_cpu_detect_isa();
    return f_amx_bf16;
}

static const char *const WORDS[] = {"scalar", "avx2", "avxvnni", "avx512", "amx"};

int pagoda_cpu_isa_parse(const char *s)
{
    for (int i = 0; s && i < (int)(sizeof WORDS / sizeof WORDS[0]); i++)
        if (!strcasecmp(s, WORDS[i])) return i;
    return -1;
}

const char *pagoda_cpu_isa_word(int isa)
{
    return isa >= 0 && isa < (int)(sizeof WORDS / sizeof WORDS[0]) ? WORDS[isa] : NULL;
}

/* PAGODA_CPU_ISA, read once: a level up to the CPU's (a higher one is
 * clamped, with a note); anything else is ignored with a note. */
static int env_isa(void)
{
    if (env_forced == -2) {
        const char *e = getenv("PAGODA_CPU_ISA");
        env_forced = -1;
        if (e && *e) {
            env_forced = pagoda_cpu_isa_parse(e);
            int d = pagoda_cpu_detect_isa();
            if (env_forced < 0)
                note("cpu: PAGODA_CPU_ISA='%s' is not one of scalar, avx2, avxvnni, avx512, amx: ignored", e);
            else if (env_forced > d)
                note("cpu: PAGODA_CPU_ISA=%s is above what this CPU has: %s", e, pagoda_cpu_isa_name(d));
        }
    }
    return env_forced;
}

const char *pagoda_cpu_detect_notes(void)
{
    pagoda_cpu_detect_isa();
    env_isa();
    return notes;
}

int pagoda_cpu_active_isa(void)
{
    int d = pagoda_cpu_detect_isa();
    int f = forced >= 0 ? forced : env_isa();
    return f >= 0 && f < d ? f : d;
}

int pagoda_cpu_force_isa(int isa)
{
    forced = isa < 0 ? -1 : isa;
    return pagoda_cpu_active_isa();
}

void pagoda_cpu_fake_detected_isa(int isa)
{
    faked = isa;
}

int pagoda_cpu_kernel_isa(void)
{
    int a = pagoda_cpu_active_isa();
    /* the AMX level's table is the AVX-512 one: AMX tiles run only the
     * repacked GEMMs of many tokens (kernels/repack/), which pick AMX
     * themselves at this level */
    if (a > PAGODA_CPU_ISA_AVX512) a = PAGODA_CPU_ISA_AVX512;
    /* an AVX-512 CPU without the VEX form (Zen 4) forced to AVX-VNNI */
    if (a == PAGODA_CPU_ISA_AVX_VNNI && !pagoda_cpu_has_avx_vnni()) a = PAGODA_CPU_ISA_AVX2;
    return a;
}

const char *pagoda_cpu_kernel_path(char *buf, size_t n)
{
    int d = pagoda_cpu_detect_isa(), a = pagoda_cpu_active_isa(), k = pagoda_cpu_kernel_isa();
    const char *why = "";
    if (a == PAGODA_CPU_ISA_AVX_VNNI && k < a)
        why = " (forced to AVX-VNNI; the CPU has AVX-512 VNNI but not the VEX AVX-VNNI)";
    else if (a < d)
        why = " (forced; the CPU has more)";
    else if (d == PAGODA_CPU_ISA_AMX)
        why = " (and AMX tiles for the repacked GEMMs of >= 16 tokens)";
    else if (d == PAGODA_CPU_ISA_SCALAR)
        why = " (no AVX2/FMA/F16C)";
    snprintf(buf, n, "%s kernels%s", pagoda_cpu_isa_name(k), why);
    return buf;
}

const char *pagoda_cpu_isa_name(int isa)
{
    switch (isa) {
    case PAGODA_CPU_ISA_AVX2: return "AVX2";
    case PAGODA_CPU_ISA_AVX_VNNI: return "AVX-VNNI";
    case PAGODA_CPU_ISA_AVX512: return "AVX-512 VNNI";
    case PAGODA_CPU_ISA_AMX: return "AMX";
    default: return "scalar";
    }
}

int pagoda_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 ? (int)n : 1;
}
