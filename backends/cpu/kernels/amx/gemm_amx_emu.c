/*
 * gemm_amx_emu.c: amx_gemm.inc on the plain-C tile emulation (tile_emu.c),
 * so the tile GEMM's tiling, repacking and scale logic runs on every host.
 * Tests only (pagoda_rp_force_amx_emulation); far too slow to serve.
 * Not for: the backend's real path (gemm_amx.c).
 */
#include "amx.h"

#define PAGODA_TILE_EMULATE 1
#define PAGODA_AMX_GEMM_NAME pagoda_rp_gemm_amx_emu
#define PAGODA_AMX_GEMM_K_NAME pagoda_rp_gemm_k_amx_emu
#define PAGODA_AMX_GEMM_Q6_NAME pagoda_rp_gemm_q6_amx_emu
#define PAGODA_AMX_GEMM_Q41_NAME pagoda_rp_gemm_q41_amx_emu
#include "amx_gemm.inc"
