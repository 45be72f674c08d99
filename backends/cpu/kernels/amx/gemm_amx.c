/*
 * gemm_amx.c: amx_gemm.inc on the real tiles (built with -mamx-tile
 * -mamx-int8 -mamx-bf16, as every file named *_amx.c). Called only where
 * pagoda_amx_usable() said yes; untested on a host without AMX, where
 * gemm_amx_emu.c runs the same source.
 * Not for: anything but that one function.
 */
#include "amx.h"

#define PAGODA_AMX_GEMM_NAME pagoda_rp_gemm_amx
#define PAGODA_AMX_GEMM_K_NAME pagoda_rp_gemm_k_amx
#define PAGODA_AMX_GEMM_Q6_NAME pagoda_rp_gemm_q6_amx
#define PAGODA_AMX_GEMM_Q41_NAME pagoda_rp_gemm_q41_amx
#include "amx_gemm.inc"
