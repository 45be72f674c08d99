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
 *
 * Every level also has the activation quantizers, dequant, the gated
 * activations, to_f16 and the attention helpers. AVX-512 (VNNI, BF16) and
 * AMX tiles have no table yet: they run AVX2, except that for T >= 16
 * Q8_0 / Q4_0 / Q4_K / Q5_K / Q6_K go to the row-interleaved layout (kernels/repack/): the
 * AMX-INT8 tile GEMM on the AMX level, the AVX-512 VNNI one on AVX-512
 * (kernels/repack/repack_matmul.c picks; matmul.c calls it first).
 */
#include "cpu_features.h"
#include "vecdot.h"

const pagoda_vecdot_table *pagoda_cpu_vecdot(void)
{
    return pagoda_cpu_kernel_isa() == PAGODA_CPU_ISA_AVX2 ? &pagoda_vecdot_avx2
                                                          : &pagoda_vecdot_scalar;
}
