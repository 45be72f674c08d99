/*
 * memplan_weights.h: the weights part of the memory plan, from the tensor
 * table and the expert keys alone: every tensor's bytes and parameters by
 * type; a mixture of experts' routed experts (count, top-k, width, bytes by
 * type); the active parameters and the bytes one decoded token reads (the
 * decode bandwidth bound), for the whole model and, under tensor
 * parallelism, for one rank (its experts, its bytes); what the backend
 * holds beside the matmul weights. Their lines in the printed plan and in
 * its JSON.
 * Not for: the KV cache, activations, workspace or the budget (memplan.c).
 */
#ifndef PAGODA_MEMPLAN_WEIGHTS_H
#define PAGODA_MEMPLAN_WEIGHTS_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "gguf.h"
#include "memplan.h"

/* Fill p's weight fields (n_params through decode_bytes_per_token_rank_max,
 * weight_bytes as one rank's of tp) from f; p->arch must be set and f must
 * split tp ways (pagoda_tp_check). With o->weight_extra (o may be NULL)
 * also repacked_bytes and repacked_weight_values: the backend asked for
 * each 2-D tensor but the token embedding when an output head exists,
 * with the rank's rows (row splits) or columns (column splits). 0, or
 * PAGODA_ERR_INVALID with one line naming the key or tensor: expert
 * tensors that are not 3-D or hold different expert counts, expert_count
 * missing or other than theirs, expert_used_count missing or outside
 * 1..expert_count (a file with no expert tensor is dense, whatever its
 * expert_count); or weight_extra's status, the line naming the tensor. */
int pagoda_memplan_weights(const gguf_file *f, const pagoda_memplan_opts *o, int64_t tp,
                           pagoda_memplan *p, char *err, size_t n);

/* The experts, parameters and decode lines of the printed plan. */
void pagoda_memplan_weights_print(const pagoda_memplan *p, FILE *fp);

/* The same into the plan's JSON root: model.n_params_active,
 * bytes.decode_per_token, a "moe" object, and per_rank's experts and
 * decode bytes. */
void pagoda_memplan_weights_json(const pagoda_memplan *p, json_t *root);

#endif /* PAGODA_MEMPLAN_WEIGHTS_H */
