/*
 * forward_mla.h: multi-head latent attention (deepseek2), the attention
 * block of an MLA layer, internal to the model library.
 * Not for: callers of the forward pass (forward.h).
 */
#ifndef PAGODA_FORWARD_MLA_H
#define PAGODA_FORWARD_MLA_H

#include "forward.h"

/* The attention block of MLA layer L over xb [T x dim] (the normed input)
 * into out [T x dim] (before the residual add): the queries, the latent
 * row of each token written to its KV slot, attention over the latents in
 * the absorbed form, the value decompression and attn_output. rp: the
 * layer's RoPE. *what names the op that failed. */
int pagoda_forward_mla(pagoda_forward *fw, const pagoda_forward_layer *L, const pagoda_batch *b,
                       const pagoda_rope_params *rp, const pagoda_tensor *xb,
                       const pagoda_tensor *out, const char **what);

#endif /* PAGODA_FORWARD_MLA_H */
