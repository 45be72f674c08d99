/*
 * upcycle.h: `pagoda gen-model --upcycle`: a dense llama GGUF turned into a
 * Mixtral-style mixture of experts whose experts are all the dense FFN.
 * Each layer's ffn_{gate,up,down}.weight becomes ffn_{gate,up,down}_exps
 * (3-D, [cols, rows, experts]) holding n_experts identical copies of the
 * same quantization blocks, byte for byte, and gains a random F32 router
 * ffn_gate_inp.weight [dim, n_experts]; llama.expert_count and
 * llama.expert_used_count are added, every other key and tensor is copied
 * as it is. Since Mixtral's top-k weights sum to one, the MoE path must
 * give the dense model's output (up to the rounding of the weighted sum):
 * a check of the expert FFN on real weights.
 * Not for: making a better model (the experts are all the same).
 */
#ifndef PAGODA_UPCYCLE_H
#define PAGODA_UPCYCLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct pagoda_upcycle_opts {
    const char *src;        /* a dense llama GGUF */
    const char *out;        /* written via OUT.tmp, renamed when complete */
    int n_experts;          /* 1..256 */
    int n_used;             /* 1..n_experts */
    uint64_t seed;          /* the router's */
    float router_std;       /* 0: 1/sqrt(dim), unit-spread logits of a normed row */
} pagoda_upcycle_opts;

/* Writes the upcycled model; 0 or a pagoda_status with one line in err
 * naming the file, key or tensor. */
int pagoda_upcycle(const pagoda_upcycle_opts *o, char *err, size_t err_len);

#endif /* PAGODA_UPCYCLE_H */
