/*
 * cpu_features.c: run-time SIMD level detection, the override for tests
 * and benchmarks (pagoda_cpu_force_isa, PAGODA_CPU_ISA), and the one
 * phrase that names the kernels that run, which the probe reason (`pagoda
 * plugins`), the backend's info name and its start-up line all print.
 * Not for: kernels themselves.
 */
#include "cpu_features.h"

#include "amx/amx.h"

#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

static int detected = -1;
static int forced = -1;
static int env_forced = -2;  /* -2: PAGODA_CPU_ISA not read yet; -1: not set */
static int faked = -1;

int pagoda_cpu_detect_isa(void)
{
    if (faked >= 0) return faked;
    if (detected >= 0) return detected;
    int isa = PAGODA_CPU_ISA_SCALAR;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))
        isa = PAGODA_CPU_ISA_AVX2;
    if (isa == PAGODA_CPU_ISA_AVX2 && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
        isa = PAGODA_CPU_ISA_AVX512;
    /* AMX: CPUID, XCR0 and the arch_prctl grant (amx/amx_detect.c) */
    if (isa == PAGODA_CPU_ISA_AVX512 && pagoda_amx_usable(NULL, 0)) isa = PAGODA_CPU_ISA_AMX;
#endif
    detected = isa;
    return isa;
}

/* PAGODA_CPU_ISA=scalar|avx2|avx512, read once: a lower level than the
 * CPU's (a higher one is clamped); anything else is ignored. */
static int env_isa(void)
{
    if (env_forced == -2) {
        const char *e = getenv("PAGODA_CPU_ISA");
        env_forced = !e || !*e                    ? -1
                     : !strcasecmp(e, "scalar")   ? PAGODA_CPU_ISA_SCALAR
                     : !strcasecmp(e, "avx2")     ? PAGODA_CPU_ISA_AVX2
                     : !strcasecmp(e, "avx512")   ? PAGODA_CPU_ISA_AVX512
                     : !strcasecmp(e, "amx")      ? PAGODA_CPU_ISA_AMX
                                                  : -1;
    }
    return env_forced;
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
    /* no AVX-512 kernels yet (docs/backend-cpu.md): the AVX2 ones run */
    return a > PAGODA_CPU_ISA_AVX2 ? PAGODA_CPU_ISA_AVX2 : a;
}

const char *pagoda_cpu_kernel_path(char *buf, size_t n)
{
    int d = pagoda_cpu_detect_isa(), a = pagoda_cpu_active_isa(), k = pagoda_cpu_kernel_isa();
    const char *why = "";
    if (a < d)
        why = " (forced; the CPU has more)";
    else if (d == PAGODA_CPU_ISA_AVX512)
        why = " (the CPU has AVX-512 F/BW/VL; pagoda has no AVX-512 kernels yet)";
    else if (d == PAGODA_CPU_ISA_SCALAR)
        why = " (no AVX2/FMA/F16C)";
    snprintf(buf, n, "%s kernels%s", pagoda_cpu_isa_name(k), why);
    return buf;
}

const char *pagoda_cpu_isa_name(int isa)
{
    switch (isa) {
    case PAGODA_CPU_ISA_AVX2: return "AVX2";
    case PAGODA_CPU_ISA_AVX512: return "AVX-512";
    case PAGODA_CPU_ISA_AMX: return "AMX";
    default: return "scalar";
    }
}

int pagoda_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 ? (int)n : 1;
}
