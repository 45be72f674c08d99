/*
 * amx_detect.c: may this process use the AMX tiles? CPUID (AMX-TILE,
 * AMX-INT8, AMX-BF16), XCR0 (the OS saves tile state) and Linux's
 * arch_prctl(ARCH_REQ_XCOMP_PERM) grant of the tile data, asked once per
 * process; the first failing check is kept as the reason pagoda logs
 * when it falls back to AVX-512.
 * Not for: the tile instructions (tile.h), the ISA level of other kernels
 * (cpu_features.c).
 */
#include "amx.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILECFG 17
#define XFEATURE_XTILEDATA 18
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool usable;
static bool has_bf16;
static char reason[128] = "not checked";
static int faked;

static void check(void)
{
#if defined(__x86_64__) && defined(__linux__)
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25)) ||
        faked == 1) {
        snprintf(reason, sizeof reason, "CPUID has no AMX-TILE/AMX-INT8");
        return;
    }
    has_bf16 = (d >> 22) & 1;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) {
        snprintf(reason, sizeof reason, "the OS has not enabled XSAVE (CPUID.1:ECX.OSXSAVE is 0)");
        return;
    }
    unsigned lo, hi;
    __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    unsigned tiles = (1u << XFEATURE_XTILECFG) | (1u << XFEATURE_XTILEDATA);
    if ((lo & tiles) != tiles || faked == 2) {
        snprintf(reason, sizeof reason, "XCR0 lacks XTILECFG/XTILEDATA (bits 17/18: 0x%x)", lo);
        return;
    }
    long r = faked == 3 ? -1 : syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
    unsigned long perm = 0;
    if (r == 0) r = syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &perm);
    if (r != 0 || !(perm & (1ul << XFEATURE_XTILEDATA))) {
        snprintf(reason, sizeof reason, "arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) was refused%s",
                 faked == 3 ? " (faked by a test)" : "");
        return;
    }
    usable = true;
    snprintf(reason, sizeof reason, "AMX-TILE/INT8%s granted", has_bf16 ? "/BF16" : "");
#else
    snprintf(reason, sizeof reason, "not an x86-64 Linux build");
#endif
}

/* A fake failure re-runs the checks without the once (tests, main thread). */
static void ensure(void)
{
    if (faked) {
        usable = false;
        check();
        return;
    }
    pthread_once(&once, check);
}

bool pagoda_amx_usable(char *why, size_t n)
{
    ensure();
    if (why && n) snprintf(why, n, "%s", reason);
    return usable;
}

bool pagoda_amx_has_bf16(void)
{
    ensure();
    return usable && has_bf16;
}

void pagoda_amx_fake_failure(int which)
{
    faked = which;
    if (!which) {
        /* back to the real answer: check again once */
        usable = false;
        check();
    }
}
