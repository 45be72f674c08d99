/*
 * cpu_paths.h: the kernel paths a CPU test runs in turn: each level this
 * host has natively (scalar, AVX2, AVX-VNNI, AVX-512 VNNI, and on an
 * AVX-512 host the 256-bit EVEX VNNI table, the level's lanes8 on Zen 4,
 * run at every T) and, on any
 * AVX2 host, the SIMDe copies of the AVX-VNNI and AVX-512 tables (the same
 * sources compiled against SIMDe on AVX2 alone, libpagoda_cpu_kernels_simde),
 * so the VNNI kernels' arithmetic is checked on every host and natively
 * where the instructions exist. A test that includes this links
 * pagoda_cpu_kernels_simde (tests/CMakeLists.txt).
 */
#ifndef PAGODA_TEST_CPU_PATHS_H
#define PAGODA_TEST_CPU_PATHS_H

#include "cpu_features.h"
#include "vecdot.h"

typedef struct cpu_path {
    const char *name;
    int isa;                        /* forced level */
    const pagoda_vecdot_table *tab; /* NULL: the level's own table */
} cpu_path;

#define CPU_PATHS_MAX 7

static pagoda_vecdot_table cpu_path_simde512, cpu_path_simdevnni, cpu_path_evex256;

/* Fills p (CPU_PATHS_MAX entries) and returns the count; p[0] is scalar. */
static inline int cpu_paths(cpu_path *p)
{
    int n = 0, d = pagoda_cpu_detect_isa();
    p[n++] = (cpu_path){"scalar", PAGODA_CPU_ISA_SCALAR, NULL};
    if (d < PAGODA_CPU_ISA_AVX2) return n;
    p[n++] = (cpu_path){"AVX2", PAGODA_CPU_ISA_AVX2, NULL};
    if (pagoda_cpu_has_avx_vnni()) p[n++] = (cpu_path){"AVX-VNNI", PAGODA_CPU_ISA_AVX_VNNI, NULL};
    if (d >= PAGODA_CPU_ISA_AVX512) p[n++] = (cpu_path){"AVX-512 VNNI", PAGODA_CPU_ISA_AVX512, NULL};
#if defined(__SANITIZE_THREAD__)
    /* Under TSan the kernel tests are there for the pool's threads; the
     * SIMDe copies' arithmetic (and the 256-bit EVEX table's, below) is
     * the Release and ASan runs' to check (the SIMDe copies were two
     * thirds of test_cpu_kernels' 220 s under TSan in CI) */
    return n;
#endif
    if (d >= PAGODA_CPU_ISA_AVX512) {
        /* the level's table with its 256-bit lanes kernels at every T */
        cpu_path_evex256 = *pagoda_cpu_vecdot_level(PAGODA_CPU_ISA_AVX512);
        cpu_path_evex256.lanes8 = NULL;
        pagoda_cpu_fill_avx512_256(&cpu_path_evex256);
        p[n++] = (cpu_path){"AVX-512 VNNI 256-bit", PAGODA_CPU_ISA_AVX512, &cpu_path_evex256};
    }
    cpu_path_simdevnni = pagoda_vecdot_avx2;
    pagoda_cpu_fill_avxvnni_simde(&cpu_path_simdevnni);
    cpu_path_simde512 = pagoda_vecdot_avx2;
    pagoda_cpu_fill_avx512_simde(&cpu_path_simde512);
    p[n++] = (cpu_path){"AVX-VNNI (SIMDe)", PAGODA_CPU_ISA_AVX2, &cpu_path_simdevnni};
    p[n++] = (cpu_path){"AVX-512 VNNI (SIMDe)", PAGODA_CPU_ISA_AVX2, &cpu_path_simde512};
    return n;
}

/* The paths of this host, filled on first use: PATHS[0 .. cpu_paths_count() - 1]. */
static cpu_path PATHS[CPU_PATHS_MAX];
static inline int cpu_paths_count(void)
{
    static int n;
    if (!n) n = cpu_paths(PATHS);
    return n;
}

static inline void cpu_path_use(const cpu_path *p)
{
    pagoda_cpu_force_isa(p->isa);
    pagoda_cpu_vecdot_override(p->tab);
}

static inline void cpu_path_reset(void)
{
    pagoda_cpu_vecdot_override(NULL);
    pagoda_cpu_force_isa(-1);
}

#endif
