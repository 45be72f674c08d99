/*
 * cpu_features.h: which SIMD level the CPU kernels run at. Detected once
 * from CPUID (__builtin_cpu_supports); tests may force a lower level to
 * compare each SIMD path against the scalar reference, and PAGODA_CPU_ISA
 * (scalar, avx2) does the same for a whole run.
 * Not for: choosing thread counts or BLAS settings (see threadpool.h,
 * blas_fix.h).
 */
#ifndef PAGODA_CPU_FEATURES_H
#define PAGODA_CPU_FEATURES_H

#include <stdbool.h>
#include <stddef.h>

typedef enum pagoda_cpu_isa {
    PAGODA_CPU_ISA_SCALAR = 0,
    PAGODA_CPU_ISA_AVX2 = 1,      /* AVX2 + FMA + F16C */
    PAGODA_CPU_ISA_AVX_VNNI = 2,  /* + AVX-VNNI (VEX vpdpbusd, 256-bit) */
    PAGODA_CPU_ISA_AVX512 = 3,    /* + AVX-512 F/BW/VL/DQ + VNNI (BF16 is a separate flag) */
    PAGODA_CPU_ISA_AMX = 4        /* + AMX-TILE/INT8 (BF16 flag), arch_prctl granted */
} pagoda_cpu_isa;

/* [any thread] The best level this CPU supports (cached after the first call). */
int pagoda_cpu_detect_isa(void);

/* [any thread] The level kernels use now: the detected one, or a forced one. */
int pagoda_cpu_active_isa(void);

/* [main thread] Force kernels to `isa` (clamped to what the CPU supports);
 * -1 returns to the detected level (or PAGODA_CPU_ISA's). Returns the level
 * now active. Meant for tests and benchmarks; not thread-safe against
 * running kernels. */
int pagoda_cpu_force_isa(int isa);

/* [any thread] The level whose kernels run: the active one, capped at the
 * highest pagoda has kernels for (AVX2; on an AVX-512 CPU the AVX2 kernels
 * run). pagoda_cpu_vecdot() picks its table by this. */
int pagoda_cpu_kernel_isa(void);

/* [any thread] The kernels that run and why, in one phrase written to buf:
 * "AVX2 kernels", "AVX2 kernels (the CPU has AVX-512 F/BW/VL; pagoda has
 * no AVX-512 kernels yet)", "scalar kernels (no AVX2/FMA/F16C)", "scalar
 * kernels (forced; the CPU has more)". The probe reason, the info name and
 * the start-up line all print it, so they cannot disagree. Returns buf. */
const char *pagoda_cpu_kernel_path(char *buf, size_t n);

/* [main thread] Tests only: pretend CPUID found `isa` (-1: the real CPU),
 * to check the naming on levels this machine lacks. */
void pagoda_cpu_fake_detected_isa(int isa);

/* "scalar", "AVX2", "AVX-512". */
const char *pagoda_cpu_isa_name(int isa);

/* Number of online CPUs (>= 1). */
int pagoda_cpu_count(void);

#endif
