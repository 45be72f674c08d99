/*
 * dispatch.c: the run-time choice of kernel table (kernels/<level>/), and
 * the map of which weight type runs on which ISA level.
 * Not for: the kernels (kernels/), the CPUID checks (cpu_features.c) or
 * shapes and threads (matmul.c).
 *
 * Per weight type, what matmul.c calls on each level (T = rows of x):
 *
 * | type          | scalar (kernels/scalar) | avx2 (kernels/avx2)                       |
 * |---------------|-------------------------|-------------------------------------------|
 * | F32           | dot; T >= 3 sgemm       | dot; T >= 3 sgemm (OpenBLAS)              |
 * | F16           | dot, gemm; T>=256 sgemm | gemm (T < 4), gemm_x8, blocked from 24    |
 * | BF16          | dot; T >= 32 sgemm      | dot; T >= 32 dequant + sgemm              |
 * | Q8_0, Q4_0    | dot, gemm (per pair)    | gemm tiles (T < 4), gemm_x8               |
 * | Q4_1          | dot; T >= 32 sgemm      | dot; T >= 32 dequant + sgemm              |
 * | Q5_0/1 IQ4_NL | dot                     | gemm (T < 5, prep_q4_0 groups), gemm_x8   |
 * | Q2_K..Q6_K    | dot (per pair)          | dot (T < 4), gemm_k_x8                    |
 * | IQ4_XS        | dot (per pair)          | dot (T < 4), gemm_k_x8                    |
 * | MXFP4         | dot (per pair)          | dot (T < 4), gemm_mxfp4_x8 (1)            |
 *
 * (1) On a CPU with AVX-512 VNNI, MXFP4's dot and x8 kernels are
 * kernels/avx512/vecdot_mxfp4_avx512.c's, picked by matmul.c's
 * mxfp4_vnni() (the only place), until an AVX-512 table holds the slots.
 *
 * F16 / BF16 at the AVX-512 level on a CPU with AVX512-BF16 leave this
 * table from T >= 32 / 16: the BF16 GEMM (kernels/avx512/gemm_bf16.h),
 * which matmul.c calls before the table's kernels.
 *
 * Every level also has the activation quantizers, dequant, the gated
 * activations, to_f16 and the attention helpers. AVX-512 (VNNI, BF16) and
 * AMX tiles are detected (cpu_features.c) but have no table yet: they run
 * AVX2 (issue 27 adds kernels/avx512/ and kernels/amx/).
 */
#include "cpu_features.h"
#include "vecdot.h"

const pagoda_vecdot_table *pagoda_cpu_vecdot(void)
{
    return pagoda_cpu_kernel_isa() == PAGODA_CPU_ISA_AVX2 ? &pagoda_vecdot_avx2
                                                          : &pagoda_vecdot_scalar;
}
