/*
 * bench_util.h: what the CPU micro-benchmarks share: wall and process CPU
 * clocks, and a seeded xorshift generator (the same sequence every run).
 * Not for: tests (tests/unit/testutil.h).
 */
#ifndef PAGODA_BENCH_UTIL_H
#define PAGODA_BENCH_UTIL_H

#include <stdint.h>
#include <time.h>

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU time of the whole process (every pool thread): with one thread a
 * measure of the work that a loaded machine's time-sharing leaves alone. */
static inline double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t bench_rng = 0x9E3779B97F4A7C15ull;
static inline uint64_t next(void)
{
    bench_rng ^= bench_rng << 13;
    bench_rng ^= bench_rng >> 7;
    bench_rng ^= bench_rng << 17;
    return bench_rng;
}
/* uniform in [0, 1) */
static inline float unif(void) { return (float)(next() >> 40) / (float)(1 << 24); }

#endif
