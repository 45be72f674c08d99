/*
 * dispatch.c: the run-time choice of kernel table (kernels/<level>/), and
 * the map of which weight type runs which kernel on which ISA level.
 * Not for: the kernels (kernels/), the CPUID checks (cpu_features.c) or
 * shapes and threads (matmul.c).
 *
 * Per weight type, what matmul.c calls on each level (T = rows of x;
 * "lanes": the tokens-in-lanes kernels gemm_*_x8, from T >= 4, 5 for
 * Q5_0/Q5_1/IQ4_NL; "vnni": those of kernels/avx512 and kernels/avxvnni,
 * vpdpbusd on 16 tokens a zmm / 8 a ymm; "= avx2": the AVX2 entry):
 *
 * | type          | scalar                  | avx2                         | avxvnni          | avx512           |
 * |---------------|-------------------------|------------------------------|------------------|------------------|
 * | F32           | dot; T >= 3 sgemm       | dot; T >= 3 sgemm (OpenBLAS) | = avx2           | = avx2           |
 * | F16           | dot, gemm; T>=256 sgemm | gemm (T < 4), gemm_x8        | = avx2           | = avx2           |
 * | BF16          | dot; T >= 32 sgemm      | dot; T >= 32 dequant + sgemm | = avx2           | = avx2           |
 * | Q8_0, Q4_0    | dot, gemm (per pair)    | dot, gemm tiles (T<4), lanes | lanes vnni       | = avx2 (T<4), lanes vnni |
 * | Q4_1          | dot (per pair)          | dot, gemm (T<5), lanes       | = avx2           | lanes vnni       |
 * | Q5_0/1 IQ4_NL | dot                     | dot, gemm (T<5), lanes       | lanes vnni       | lanes vnni       |
 * | Q2_K, Q3_K    | dot (per pair)          | dot (T < 4), lanes           | lanes vnni       | lanes vnni       |
 * | Q4_K..Q6_K    | dot (per pair)          | dot (T < 4), lanes           | lanes vnni       | dot (2), lanes vnni |
 * | IQ4_XS        | dot (per pair)          | dot (T < 4), lanes           | lanes vnni       | lanes vnni       |
 * | MXFP4         | dot (per pair)          | dot (T < 4), gemm_mxfp4_x8   | = avx2           | = avx2 (T<4), x8 vnni (1) |
 *
 * (1) MXFP4's AVX-512 VNNI x8 kernel, kernels/avx512/vecdot_mxfp4_avx512.c's,
 * an entry of the level's table (its VNNI dot is slower than AVX2's on the
 * Sapphire-Rapids-class host: lanes_avx512.c).
 * (2) kernels/avx512/decode_avx512.c's 512-bit dots (decode, T < 4).
 * At avx512, "lanes vnni" is T >= 9: for 4 <= T <= 8 the lanes kernels
 * are the avxvnni column's (on a CPU without AVX-VNNI, Zen 4, the same
 * kernels with EVEX vpdpbusd, kernels/avx512/lanes_vnni256_avx512.c, but
 * for Q3_K / Q4_K / Q6_K, AVX2's): the table's lanes8, build() below.
 *
 * BF16 weights (and F16 with f16_gemm = dpbf16 or PAGODA_CPU_BF16=2, not
 * under batch_invariant) at the AVX-512 level on a
 * CPU with AVX512-BF16 leave this table from T >= 16 (32): the BF16 GEMM
 * (kernels/avx512/gemm_bf16.h), which matmul.c calls before the table's
 * kernels.
 *
 * Every level also has the activation quantizers, dequant, the gated
 * activations, to_f16 and the attention helpers, the F16 prefill tile
 * attn_f16_tile among them but on the scalar level (the AVX2 ones above
 * AVX2, but for the AVX-512 level's swiglu_oai and attn_f16_tile:
 * kernels/avx512/act_avx512.c). The AMX level's table is the AVX-512 one; apart from every table,
 * for T >= 16 Q8_0 / Q4_0 / Q4_1 / Q4_K / Q5_K / Q6_K go to the row-interleaved
 * layout (kernels/repack/): the AMX-INT8 tile GEMM on the AMX level, the
 * AVX-512 VNNI one on AVX-512 (kernels/repack/repack_matmul.c picks;
 * matmul.c calls it after the BF16 GEMM and before the table's kernels).
 */
#include <pthread.h>

#include "cpu_features.h"
#include "vecdot.h"

static pagoda_vecdot_table t_avxvnni, t_avx512, t_avx512_256;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static const pagoda_vecdot_table *override;

static void build(void)
{
    /* The fill functions are compiled with their level's flags (the
     * compiler may store their pointers with that level's vector
     * instructions), so each runs only on a CPU that has the level; a
     * table this CPU cannot have stays AVX2's (only a faked CPUID, in the
     * tests' naming checks, asks for one). */
    int hw = pagoda_cpu_hw_isa();
    t_avxvnni = pagoda_vecdot_avx2;
    if (pagoda_cpu_hw_avx_vnni()) pagoda_cpu_fill_avxvnni(&t_avxvnni);
    t_avx512 = pagoda_vecdot_avx2;
    if (hw >= PAGODA_CPU_ISA_AVX512) pagoda_cpu_fill_avx512(&t_avx512);
    /* T <= 8 (one group of eight tokens) half fills the 512-bit lanes
     * kernels' 16-token registers: there the 256-bit ones win (one core,
     * 2048 x 2048, T = 4 / 8, GFLOP/s, AVX-512 VNNI against the AVX-VNNI
     * table: Q8_0 64 / 126 vs 94 / 187, Q4_0 63 / 131 vs 82 / 170, Q4_K
     * 59 / 120 vs 82 / 163, Q6_K 50 / 97 vs 79 / 149; T = 12: 512-bit
     * ahead, Q8_0 183 vs 160, Q4_K 170 vs 145; bench_cpu_lanes,
     * Sapphire-Rapids-class host). A CPU without AVX-VNNI (Zen 4) gets
     * the same 256-bit kernels with the EVEX vpdpbusd of AVX512-VL
     * (kernels/avx512/lanes_vnni256_avx512.c) over AVX2's table. */
    t_avx512_256 = pagoda_vecdot_avx2;
    if (hw >= PAGODA_CPU_ISA_AVX512) pagoda_cpu_fill_avx512_256(&t_avx512_256);
    t_avx512.lanes8 = pagoda_cpu_hw_avx_vnni() ? &t_avxvnni : &t_avx512_256;
}

const pagoda_vecdot_table *pagoda_cpu_vecdot_level(int isa)
{
    switch (isa) {
    case PAGODA_CPU_ISA_SCALAR: return &pagoda_vecdot_scalar;
    case PAGODA_CPU_ISA_AVX2: return &pagoda_vecdot_avx2;
    case PAGODA_CPU_ISA_AVX_VNNI:
        pthread_once(&once, build);
        return &t_avxvnni;
    default:
        pthread_once(&once, build);
        return &t_avx512;
    }
}

const pagoda_vecdot_table *pagoda_cpu_vecdot(void)
{
    if (override) return override;
    return pagoda_cpu_vecdot_level(pagoda_cpu_kernel_isa());
}

void pagoda_cpu_vecdot_override(const pagoda_vecdot_table *t)
{
    override = t;
}
