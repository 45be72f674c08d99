/*
 * forward_moe.h: what forward.c and forward_moe.c share (internal to the
 * model library): the expert FFN of a routed layer, and the matmuls helper
 * both use.
 * Not for: callers of the forward pass (forward.h).
 */
#ifndef PAGODA_FORWARD_MOE_H
#define PAGODA_FORWARD_MOE_H

#include "forward.h"

/* out[i] = x * w[i]^T (+ bias[i]) for i < n: the backend's matmul_multi
 * (ABI 1.3: x prepared once for all of them), else n matmuls. bias may be
 * NULL; *what names the matmul that failed (names[i], names[n] for the
 * multi call). */
int pagoda_forward_matmuls(pagoda_forward *fw, const pagoda_tensor *x, int32_t n,
                           const pagoda_tensor *w, const pagoda_tensor *const *bias,
                           const pagoda_tensor *out, const char *const *names, const char **what);

/* gate = act(gate, up) in place, F32 of one shape: the model's gated
 * activation (swiglu; gpt-oss's swiglu_oai through the backend's ABI 1.8
 * op, or on the host where it has none). */
int pagoda_forward_glu(pagoda_forward *fw, const pagoda_tensor *gate, const pagoda_tensor *up);

/* The expert FFN of routed layer L over xb [T x dim] (the normed input)
 * into out [T x dim]: this rank's partial sum under tensor parallelism
 * (the caller all-reduces it once). *what names the op that failed. */
int pagoda_forward_moe(pagoda_forward *fw, const pagoda_forward_layer *L, int32_t T,
                       const pagoda_tensor *xb, const pagoda_tensor *out, const char **what);

#endif /* PAGODA_FORWARD_MOE_H */
