/*
 * gemm_bf16_amx_emu.c: amx_bf16_gemm.inc on the plain-C tile emulation
 * (tile_emu.c), so the AMX-BF16 GEMM's tiling, padding and edge logic runs
 * on every host. Tests only; far too slow to serve.
 * Not for: the backend's real path (gemm_bf16_amx.c).
 */
#define PAGODA_TILE_EMULATE 1
#define PAGODA_AMXBF16_GEMM_NAME pagoda_amxbf16_gemm_amx_emu
#include "amx_bf16_gemm.inc"
