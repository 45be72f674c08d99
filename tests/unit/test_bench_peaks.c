/*
 * test_bench_peaks.c: `pagoda bench --roofline`'s instruction peaks
 * (core/tools/bench/bench_peaks.c): every path this CPU has is measured
 * (a positive, finite rate on one core and on all threads; the figures
 * themselves are the machine's, never asserted), and each weight type's
 * prefill is matched with the peak of the path the CPU backend runs at
 * the level PAGODA_CPU_ISA allows.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench_internal.h"
#include "testutil.h"

static const bench_peak *find(const roofline *rf, const char *key)
{
    for (int i = 0; i < rf->n_peaks; i++)
        if (!strcmp(rf->peaks[i].key, key)) return &rf->peaks[i];
    return NULL;
}

START_TEST(peaks_measured)
{
    roofline rf;
    memset(&rf, 0, sizeof rf);
    rf.threads = 2;
    bench_measure_peaks(&rf);
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        ck_assert_ptr_nonnull(find(&rf, "fma256"));
        ck_assert_ptr_nonnull(find(&rf, "maddubs256"));
    }
    if (__builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512f"))
        ck_assert_ptr_nonnull(find(&rf, "dpbf16"));
    if (!__builtin_cpu_supports("avx512f")) ck_assert_ptr_null(find(&rf, "fma512"));
#endif
    for (int i = 0; i < rf.n_peaks; i++) {
        ck_assert_msg(rf.peaks[i].core_gops > 0 && isfinite(rf.peaks[i].core_gops), "%s: %g",
                      rf.peaks[i].key, rf.peaks[i].core_gops);
        ck_assert_msg(rf.peaks[i].all_gops > 0 && isfinite(rf.peaks[i].all_gops), "%s: %g",
                      rf.peaks[i].key, rf.peaks[i].all_gops);
        ck_assert(rf.peaks[i].name[0]);
    }
}
END_TEST

static void add(roofline *rf, const char *key)
{
    bench_peak *p = &rf->peaks[rf->n_peaks++];
    memset(p, 0, sizeof *p);
    snprintf(p->key, sizeof p->key, "%s", key);
    p->core_gops = p->all_gops = 1;
}

static const char *match_g(const roofline *rf, const char *isa, const char *type, const char *f16_gemm)
{
    if (isa) setenv("PAGODA_CPU_ISA", isa, 1); else unsetenv("PAGODA_CPU_ISA");
    const bench_peak *p = bench_matching_peak(rf, type, f16_gemm);
    return p ? p->key : "none";
}

/* f16_gemm as unset in the config */
static const char *match(const roofline *rf, const char *isa, const char *type)
{
    return match_g(rf, isa, type, NULL);
}

START_TEST(peaks_matching)
{
    roofline all;
    memset(&all, 0, sizeof all);
    const char *keys[] = {"fma256", "fma512", "maddubs256", "avxvnni256", "vnni256", "vnni512", "dpbf16", "amx_int8",
                          "amx_bf16"};
    for (int i = 0; i < 9; i++) add(&all, keys[i]);
    unsetenv("PAGODA_CPU_BF16");
    /* f16_gemm = auto (gemm_fma.h): F16 on the F32-FMA GEMM at AVX-512,
     * BF16 on the tiles at AMX, at AVX-512 vdpbf16ps on AMD, else the FMA
     * GEMM */
    __builtin_cpu_init();
    bool amd = __builtin_cpu_is("amd");
    ck_assert_str_eq(match(&all, NULL, "F16"), "fma512");
    ck_assert_str_eq(match(&all, NULL, "BF16"), "amx_bf16");
    ck_assert_str_eq(match(&all, "avx512", "F16"), "fma512");
    ck_assert_str_eq(match(&all, "avx512", "BF16"), amd ? "dpbf16" : "fma512");
    ck_assert_str_eq(match_g(&all, "avx512", "BF16", "auto"), amd ? "dpbf16" : "fma512");
    /* f16_gemm said: dpbf16 both types on the BF16 GEMMs (the tiles at
     * AMX), fma both on the FMA GEMM, off the 256-bit exact kernels */
    ck_assert_str_eq(match_g(&all, "avx512", "F16", "dpbf16"), "dpbf16");
    ck_assert_str_eq(match_g(&all, "avx512", "BF16", "dpbf16"), "dpbf16");
    ck_assert_str_eq(match_g(&all, NULL, "F16", "dpbf16"), "amx_bf16");
    ck_assert_str_eq(match_g(&all, "avx512", "BF16", "fma"), "fma512");
    ck_assert_str_eq(match_g(&all, "avx512", "F16", "fma"), "fma512");
    ck_assert_str_eq(match_g(&all, "avx512", "F16", "off"), "fma256");
    ck_assert_str_eq(match_g(&all, "avx2", "F16", "dpbf16"), "fma256");
    /* PAGODA_CPU_BF16 set: its rules (F16 exact lanes unless 2 asks for BF16) */
    setenv("PAGODA_CPU_BF16", "1", 1);
    ck_assert_str_eq(match(&all, NULL, "F16"), "fma256");
    ck_assert_str_eq(match(&all, NULL, "BF16"), "amx_bf16");
    setenv("PAGODA_CPU_BF16", "2", 1);
    ck_assert_str_eq(match(&all, NULL, "F16"), "amx_bf16");
    ck_assert_str_eq(match(&all, "avx512", "F16"), "dpbf16");
    unsetenv("PAGODA_CPU_BF16");
    ck_assert_str_eq(match(&all, NULL, "Q8_0"), "amx_int8");
    ck_assert_str_eq(match(&all, NULL, "F32"), "fma512");
    ck_assert_str_eq(match(&all, "avx512", "Q4_K"), "vnni512");
    setenv("PAGODA_CPU_BF16", "1", 1);
    ck_assert_str_eq(match(&all, "avx512", "BF16"), "dpbf16");
    unsetenv("PAGODA_CPU_BF16");
    ck_assert_str_eq(match(&all, "avxvnni", "Q8_0"), "avxvnni256");
    ck_assert_str_eq(match(&all, "avxvnni", "F16"), "fma256");
    ck_assert_str_eq(match(&all, "AVX2", "Q4_0"), "maddubs256");
    ck_assert_str_eq(match(&all, "avx2", "F32"), "fma256");
    ck_assert_str_eq(match(&all, "avx2", "BF16"), "fma256");
    setenv("PAGODA_CPU_BF16", "0", 1);
    ck_assert_str_eq(match(&all, NULL, "F16"), "fma256");
    unsetenv("PAGODA_CPU_BF16");
    /* an AVX2-only host (Zen 3): every type on its AVX2 path */
    roofline zen3;
    memset(&zen3, 0, sizeof zen3);
    add(&zen3, "fma256");
    add(&zen3, "maddubs256");
    ck_assert_str_eq(match(&zen3, NULL, "F16"), "fma256");
    ck_assert_str_eq(match(&zen3, NULL, "F32"), "fma256");
    ck_assert_str_eq(match(&zen3, NULL, "Q8_0"), "maddubs256");
    roofline none;
    memset(&none, 0, sizeof none);
    ck_assert_str_eq(match(&none, NULL, "Q8_0"), "none");
    unsetenv("PAGODA_CPU_ISA");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("bench_peaks");
    TCase *tc = tcase_create("peaks");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, peaks_measured);
    tcase_add_test(tc, peaks_matching);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
