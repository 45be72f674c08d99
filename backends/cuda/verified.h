/*
 * verified.h: the list of CUDA kernels that have run on a GPU and passed
 * backends/cuda/gpu-check.sh (backends/cuda/verified.txt), its parser and
 * what it lets the backend advertise. Plain C with no CUDA header, so
 * tests/unit/test_cuda_probe.c checks the parser and the refusal on any
 * machine.
 *
 * The list's lines (# starts a comment, blank lines are skipped):
 *     <kind> <name> <gpu> <date> <commit>
 * kind: weight (matmul and get_rows of that weight type), kv (kv_write,
 * attention and copy_blocks over that KV type), op (an optional op:
 * geglu, scale, attention_ext, matmul_multi, matmul_experts, moe_combine,
 * swiglu_oai, attention_sinks, kv_latent); name: a dtype name (Q4_K) or op name; gpu: the device name
 * with spaces as underscores (NVIDIA_H200); date YYYY-MM-DD; commit: the
 * git commit the check ran on. gpu-check.sh writes it.
 *
 * Not for: reading files on the device or running anything.
 */
#ifndef PAGODA_CUDA_VERIFIED_H
#define PAGODA_CUDA_VERIFIED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The optional ops the list can name, a bit each in pcu_verified.ops. */
enum {
    PCU_OP_GEGLU = 0,
    PCU_OP_SCALE,
    PCU_OP_ATTENTION_EXT,
    PCU_OP_MATMUL_MULTI,
    PCU_OP_MATMUL_EXPERTS,
    PCU_OP_MOE_COMBINE,
    PCU_OP_SWIGLU_OAI,
    PCU_OP_ATTENTION_SINKS, /* attention_ext's sinks (info.attn_sinks) */
    PCU_OP_KV_LATENT,       /* the latent KV layout (info.kv_kinds) */
    PCU_OP_COUNT_
};

typedef struct pcu_verified {
    uint64_t weights; /* a bit per dtype */
    uint64_t kv;      /* a bit per dtype */
    uint32_t ops;     /* a bit per PCU_OP_* */
    int n_entries;
    char gpu[64];     /* the GPU of the last entry ("" when none) */
} pcu_verified;

/* Parses the list's text (NUL-terminated) into *v. PAGODA_ERR_INVALID with
 * a message naming `name` (the file, for the message), the line and the
 * field for a line it cannot read. */
int pcu_verified_parse(const char *text, const char *name, pcu_verified *v, char *err,
                       size_t err_len);

/* Reads and parses the file at `path`. A missing file is an empty list
 * (*missing = true), not an error; an unreadable or bad one is. */
int pcu_verified_load(const char *path, pcu_verified *v, bool *missing, char *err,
                      size_t err_len);

/* What the backend advertises: the kernels' types (`have_*`) cut to those
 * on the list, unless allow_unverified. `refused` gets the names of the
 * types left out ("" when none), e.g. "weights Q4_K Q5_K; kv F16". */
void pcu_verified_apply(const pcu_verified *v, bool allow_unverified, uint64_t have_weights,
                        uint64_t have_kv, uint64_t *weights, uint64_t *kv, char *refused,
                        size_t refused_len);

/* The op's name in the list ("geglu"), NULL out of range. */
const char *pcu_op_name(int op);

#endif /* PAGODA_CUDA_VERIFIED_H */
