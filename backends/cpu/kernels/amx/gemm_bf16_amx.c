/*
 * gemm_bf16_amx.c: amx_bf16_gemm.inc on the real tiles (built with
 * -mamx-tile -mamx-int8 -mamx-bf16, as every file named *_amx.c). Called
 * only where pagoda_cpu_bf16_path() is AMX; gemm_bf16_amx_emu.c runs the
 * same source on any host.
 * Not for: anything but that one function.
 */
#define PAGODA_AMXBF16_GEMM_NAME pagoda_amxbf16_gemm_amx
#include "amx_bf16_gemm.inc"
