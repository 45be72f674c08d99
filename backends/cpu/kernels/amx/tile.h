/*
 * tile.h: the few AMX tile instructions pagoda's tile GEMMs use, behind one
 * set of macros with two bindings, so a GEMM is written once and runs both
 * on the real tiles and on a plain-C emulation of them:
 *   - real (PAGODA_TILE_EMULATE undefined): the compiler's intrinsics, in a
 *     file built with -mamx-tile -mamx-int8 -mamx-bf16 (a name ending in
 *     _amx.c); runs only where pagoda_amx_usable() said yes;
 *   - emulated (PAGODA_TILE_EMULATE defined): calls into tile_emu.c, which
 *     follows the instructions' documented semantics (palette 1: 8 tiles of
 *     at most 16 rows x 64 bytes; rows/colsb per tile from the config; int32
 *     accumulation that wraps; K = colsb(A) / 4 dword groups per row). Used
 *     by tests only, so the tiling, repacking and scale logic of a tile
 *     GEMM runs on every host.
 * Tile numbers must be integer literals (gcc's intrinsics stringify them).
 * Not for: the GEMMs (amx_gemm.inc), CPUID / the arch_prctl grant (amx.h).
 */
#ifndef PAGODA_CPU_AMX_TILE_H
#define PAGODA_CPU_AMX_TILE_H

#include <stdint.h>

/* The 64-byte operand of LDTILECFG (palette 1). */
typedef struct pagoda_tile_config {
    uint8_t palette_id;   /* 1: 8 tiles of 16 rows x 64 bytes; 0: release all */
    uint8_t start_row;    /* 0 except on a restart after a fault */
    uint8_t reserved[14];
    uint16_t colsb[16];   /* bytes per row of tile i (i < 8; the rest 0) */
    uint8_t rows[16];     /* rows of tile i (i < 8; the rest 0) */
} __attribute__((aligned(64))) pagoda_tile_config;

_Static_assert(sizeof(pagoda_tile_config) == 64, "LDTILECFG reads 64 bytes");

#define PAGODA_TILE_MAX_ROWS 16
#define PAGODA_TILE_MAX_COLSB 64
#define PAGODA_TILE_COUNT 8

/* ---------------------------------------------------------- emulation */

/* [any thread] Each thread has its own emulated tile state, as each core
 * has its own tiles. A use the hardware would refuse (#GP / #UD: a bad
 * config, shapes that do not match, an instruction before a config)
 * leaves the tiles as they were and counts a fault, which tests read. */
void pagoda_tile_emu_loadconfig(const pagoda_tile_config *cfg);
void pagoda_tile_emu_release(void);
void pagoda_tile_emu_zero(int t);
void pagoda_tile_emu_load(int t, const void *base, long stride);
void pagoda_tile_emu_store(int t, void *base, long stride);
void pagoda_tile_emu_dpbssd(int c, int a, int b);  /* int8 x int8 -> int32 */
void pagoda_tile_emu_dpbusd(int c, int a, int b);  /* uint8 (A) x int8 (B) -> int32 */
void pagoda_tile_emu_dpbsud(int c, int a, int b);  /* int8 (A) x uint8 (B) -> int32 */
void pagoda_tile_emu_dpbf16ps(int c, int a, int b); /* bf16 pairs -> fp32 */
/* Faults counted on this thread since the last call (and reset to 0). */
int pagoda_tile_emu_faults(void);

#ifdef PAGODA_TILE_EMULATE

#define PAGODA_TILE_LOADCONFIG(cfg) pagoda_tile_emu_loadconfig(cfg)
#define PAGODA_TILE_RELEASE() pagoda_tile_emu_release()
#define PAGODA_TILE_ZERO(t) pagoda_tile_emu_zero(t)
#define PAGODA_TILE_LOAD(t, base, stride) pagoda_tile_emu_load((t), (base), (long)(stride))
#define PAGODA_TILE_STORE(t, base, stride) pagoda_tile_emu_store((t), (base), (long)(stride))
#define PAGODA_TILE_DPBSSD(c, a, b) pagoda_tile_emu_dpbssd((c), (a), (b))
#define PAGODA_TILE_DPBUSD(c, a, b) pagoda_tile_emu_dpbusd((c), (a), (b))
#define PAGODA_TILE_DPBSUD(c, a, b) pagoda_tile_emu_dpbsud((c), (a), (b))
#define PAGODA_TILE_DPBF16PS(c, a, b) pagoda_tile_emu_dpbf16ps((c), (a), (b))

#else /* the real instructions */

#include <immintrin.h>

/* gcc's tile intrinsics are asm statements that name no memory they read
 * or write: a compiler barrier on each side keeps the plain loads and
 * stores around them in order. */
#define PAGODA_TILE_BARRIER() __asm__ __volatile__("" ::: "memory")
#define PAGODA_TILE_LOADCONFIG(cfg)                                                            \
    do { PAGODA_TILE_BARRIER(); _tile_loadconfig((const void *)(cfg)); } while (0)
#define PAGODA_TILE_RELEASE() _tile_release()
#define PAGODA_TILE_ZERO(t) _tile_zero(t)
#define PAGODA_TILE_LOAD(t, base, stride)                                                      \
    do { PAGODA_TILE_BARRIER(); _tile_loadd(t, (const void *)(base), (long)(stride)); } while (0)
#define PAGODA_TILE_STORE(t, base, stride)                                                     \
    do { _tile_stored(t, (void *)(base), (long)(stride)); PAGODA_TILE_BARRIER(); } while (0)
#define PAGODA_TILE_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#define PAGODA_TILE_DPBUSD(c, a, b) _tile_dpbusd(c, a, b)
#define PAGODA_TILE_DPBSUD(c, a, b) _tile_dpbsud(c, a, b)
#define PAGODA_TILE_DPBF16PS(c, a, b) _tile_dpbf16ps(c, a, b)

#endif

#endif
