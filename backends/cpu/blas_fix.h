/*
 * blas_fix.h: choosing OpenBLAS's kernel set (its "core type") for this
 * CPU. Header-only so the server's main() can use it without linking the
 * CPU backend.
 *
 * Why: Debian's OpenBLAS 0.3.21 (DYNAMIC_ARCH) detects some CPUs, notably
 * newer ones it does not know and some VMs, as a generic core such as
 * "Prescott", and then runs sgemm about 5x slower (measured here: 25 vs
 * 130 GFLOPS for 512^3 on 2 EPYC cores). The core is chosen once, in the
 * library's constructor, from the OPENBLAS_CORETYPE environment variable or
 * CPUID; nothing can change it later. So:
 *
 *   1. main() calls pagoda_blas_fix_env() first thing. The pagoda binary
 *      does not link OpenBLAS; the CPU backend plugin brings it in at
 *      dlopen time, after main() ran, so the variable is seen. When
 *      OPENBLAS_CORETYPE is already set, the user's choice stands.
 *   2. The CPU backend calls pagoda_blas_core_is_slow(openblas_get_corename())
 *      at create and logs a warning if the fix did not take (e.g. a program
 *      that linked OpenBLAS directly).
 *
 * The value: "SkylakeX" when the CPU has AVX-512 F/BW/VL/DQ, else "Haswell"
 * when it has AVX2 + FMA (Haswell's kernels are the AVX2 ones; AMD Zen gets
 * the same speed from them, measured), else nothing (leave OpenBLAS's own
 * choice: there is no faster kernel set to force).
 *
 * Not for: thread counts (the backend calls openblas_set_num_threads).
 */
#ifndef PAGODA_CPU_BLAS_FIX_H
#define PAGODA_CPU_BLAS_FIX_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The OPENBLAS_CORETYPE value for this CPU, or NULL to leave it alone. */
static inline const char *pagoda_blas_coretype_for_cpu(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
    return NULL;
}

/* Set OPENBLAS_CORETYPE for this CPU unless the user set it. Must run
 * before libopenblas is loaded. Returns the value now in effect (NULL when
 * none). */
static inline const char *pagoda_blas_fix_env(void)
{
    const char *cur = getenv("OPENBLAS_CORETYPE");
    if (cur && *cur) return cur;
    const char *want = pagoda_blas_coretype_for_cpu();
    if (want) setenv("OPENBLAS_CORETYPE", want, 0);
    return want;
}

/* True when `corename` (openblas_get_corename()) is a kernel set without
 * AVX2 FMA kernels although this CPU has them: sgemm is then several times
 * slower than it could be. */
static inline bool pagoda_blas_core_is_slow(const char *corename)
{
    if (!pagoda_blas_coretype_for_cpu() || !corename) return false;
    static const char *const fast[] = {"haswell", "zen", "skylakex", "cooperlake",
                                       "sapphirerapids", NULL};
    for (int i = 0; fast[i]; i++)
        if (strcasecmp(corename, fast[i]) == 0) return false;
    return true;
}

#endif
