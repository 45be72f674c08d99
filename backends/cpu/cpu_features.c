/*
 * cpu_features.c: run-time SIMD level detection and the test override.
 * Not for: kernels themselves.
 */
#include "cpu_features.h"

#include <unistd.h>

static int detected = -1;
static int forced = -1;

int pagoda_cpu_detect_isa(void)
{
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
#endif
    detected = isa;
    return isa;
}

int pagoda_cpu_active_isa(void)
{
    int d = pagoda_cpu_detect_isa();
    return forced >= 0 && forced < d ? forced : d;
}

int pagoda_cpu_force_isa(int isa)
{
    forced = isa < 0 ? -1 : isa;
    return pagoda_cpu_active_isa();
}

const char *pagoda_cpu_isa_name(int isa)
{
    switch (isa) {
    case PAGODA_CPU_ISA_AVX2: return "AVX2";
    case PAGODA_CPU_ISA_AVX512: return "AVX-512";
    default: return "scalar";
    }
}

int pagoda_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 ? (int)n : 1;
}
