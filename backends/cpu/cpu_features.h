/*
 * cpu_features.h: which SIMD level the CPU kernels run at. Detected once
 * from CPUID and XCR0 (the OS must save the YMM / ZMM / opmask state a
 * level uses); a level whose check fails falls back one level and says why
 * (pagoda_cpu_detect_notes). Tests may force a lower level to compare each
 * SIMD path against the scalar reference, and PAGODA_CPU_ISA
 * (scalar, avx2, avxvnni, avx512, amx) does the same for a whole run.
 * Not for: choosing thread counts or BLAS settings (see threadpool.h,
 * blas_fix.h).
 */
#ifndef PAGODA_CPU_FEATURES_H
#define PAGODA_CPU_FEATURES_H

#include <stdbool.h>
#include <stddef.h>

/* The ISA levels, in order (issue 27: the same enum in every branch). */
typedef enum pagoda_cpu_isa {
    PAGODA_CPU_ISA_SCALAR = 0,
    PAGODA_CPU_ISA_AVX2 = 1,      /* AVX2 + FMA + F16C */
    PAGODA_CPU_ISA_AVX_VNNI = 2,  /* + AVX-VNNI (VEX vpdpbusd, 256-bit) */
    PAGODA_CPU_ISA_AVX512 = 3,    /* + AVX-512 F/BW/VL/DQ + VNNI (BF16 is a separate flag) */
    PAGODA_CPU_ISA_AMX = 4        /* + AMX-TILE/INT8 (BF16 flag), arch_prctl granted */
} pagoda_cpu_isa;

/* [any thread] The best level this CPU supports (cached after the first call). */
int pagoda_cpu_detect_isa(void);
/* [any thread] The same from CPUID alone, whatever a test fakes (below),
 * and the real AVX-VNNI bit: what may run here (dispatch.c builds the
 * faster tables only where their fill functions, compiled with those
 * levels' flags, may run). */
int pagoda_cpu_hw_isa(void);
bool pagoda_cpu_hw_avx_vnni(void);

/* [any thread] Feature bits beside the ladder: AVX-VNNI (the VEX form; an
 * AVX-512 CPU may lack it: Zen 4, Ice Lake), AVX512-BF16 (vdpbf16ps) and
 * AMX-BF16. Each is false when its level's XCR0 check failed. */
bool pagoda_cpu_has_avx_vnni(void);
bool pagoda_cpu_has_avx512_bf16(void);
bool pagoda_cpu_has_amx_bf16(void);

/* [any thread] What detection and PAGODA_CPU_ISA decided that a user should
 * hear (a level present in CPUID but not enabled by the OS, a forced level
 * clamped, an unknown PAGODA_CPU_ISA), one line each, "" when nothing. The
 * backend logs it at start-up. */
const char *pagoda_cpu_detect_notes(void);

/* [any thread] The level kernels use now: the detected one, or a forced one. */
int pagoda_cpu_active_isa(void);

/* [main thread] Force kernels to `isa` (clamped to what the CPU supports);
 * -1 returns to the detected level (or PAGODA_CPU_ISA's). Returns the level
 * now active. Meant for tests and benchmarks; not thread-safe against
 * running kernels. */
int pagoda_cpu_force_isa(int isa);

/* Batch-invariant arithmetic ([backend.cpu] batch_invariant): a row's
 * result does not depend on how many rows its call has. On: every
 * integer type with tokens-in-lanes kernels (Q8_0, Q4_0, Q4_1, Q5_0,
 * Q5_1, IQ4_NL, MXFP4, Q2_K..Q6_K, IQ4_XS) and F16 (its exact lanes
 * kernel) runs them from one row on (instead of the per-row dots and row
 * x token tiles below 4-5 rows, whose float sums run in another order),
 * PAGODA_CPU_GEMM_MIN_T's sgemm is ignored for them, the repacked GEMM
 * of many rows takes the VNNI kernels, which repeat the lanes' float
 * steps, never the AMX tiles, and attention never splits a decode row's
 * keys over threads; F32 weights keep their own per-pair dot at every T
 * (no sgemm: slower prefill); F16 never the BF16 GEMM. Not covered: BF16
 * weights (the BF16 GEMM from 16 rows), the scalar level (no lanes kernels), the expert
 * matmul and MLA's own attention (not tested). A setting of each backend:
 * pagoda_cpu_exec.batch_invariant (kernels.h), set by the backend's
 * create from its config and read by the kernels' dispatch at each call,
 * so two CPU backends of one process keep their own. */

/* [any thread] The level whose kernels run: the active one, capped at the
 * highest pagoda has kernels for (AVX-512 VNNI: an AMX CPU runs those), and
 * AVX-VNNI forced on a CPU without the VEX form (an AVX-512 one) runs
 * AVX2. pagoda_cpu_vecdot() picks its table by this. */
int pagoda_cpu_kernel_isa(void);

/* [any thread] The kernels that run and why, in one phrase written to buf:
 * "AVX-512 VNNI kernels", "AVX2 kernels", "AVX2 kernels (forced; the CPU
 * has more)", "AVX-512 VNNI kernels (the CPU has AMX; pagoda has no AMX
 * kernels yet)", "scalar kernels (no AVX2/FMA/F16C)". The probe reason,
 * the info name and the start-up line all print it, so they cannot
 * disagree. Returns buf. */
const char *pagoda_cpu_kernel_path(char *buf, size_t n);

/* [main thread] Tests only: pretend CPUID found `isa` (-1: the real CPU),
 * to check the naming on levels this machine lacks. A faked AVX-512 or AMX
 * level also fakes AVX-VNNI absent (the Zen 4 case). */
void pagoda_cpu_fake_detected_isa(int isa);

/* "scalar", "AVX2", "AVX-VNNI", "AVX-512 VNNI", "AMX". */
const char *pagoda_cpu_isa_name(int isa);

/* PAGODA_CPU_ISA's word for a level ("scalar", "avx2", "avxvnni",
 * "avx512", "amx"), or -1 / NULL. */
int pagoda_cpu_isa_parse(const char *s);
const char *pagoda_cpu_isa_word(int isa);

/* Number of online CPUs (>= 1). */
int pagoda_cpu_count(void);

#endif
