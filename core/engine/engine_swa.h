/*
 * engine_swa.h: what a sliding-window model's KV costs when its local
 * layers keep only their window (the engine's swa_kv = window): the
 * geometry of the window pool that engine_swa.c manages, computed the same
 * way for the memory plan (memplan.c) and the engine, so the plan counts
 * exactly what is allocated.
 *
 * The window pool. A local layer's query at position p reads the keys of
 * positions p - W + 1 .. p only (W = the window). Its KV lives in a pool of
 * its own, of blocks of block_size tokens, handed out by the engine: a
 * sequence holds the blocks of its window's positions, takes new ones as
 * it computes tokens and gives back those that fall out of the window
 * after each step. Between steps a sequence holds at most
 *     hold = (W - 2) / block_size + 2  blocks (1 for W = 1)
 * (the positions p - W + 1 .. p - 1 before its next token p, and the
 * block p itself fills); a step's new tokens add at most
 *     step = (T + min(S, T) x (block_size - 1)) / block_size
 * blocks over all its sequences (T = max_batched_tokens, at most
 * ceil(n / block_size) for a sequence computing n of them). So a pool of
 *     S x hold + step  blocks (S = max_num_seqs seats)
 * never runs out while at most S sequences hold blocks, which the engine
 * makes sure of with seats (a sequence takes one when admitted and gives
 * it back when released). The main pool, whose block ids the KV policy
 * manages, holds the global layers only.
 *
 * Prefix-cache hits. A hit of C tokens gives the global layers' KV (shared
 * blocks) but no window. The local layers' KV of a token depends, through
 * the earlier local layers, on the W - 1 tokens before it in each of them:
 * to get every local layer's KV of positions C - W + 1 .. C - 1 exactly,
 * the engine recomputes from position C - m x (W - 1) (m local layers; 0
 * when the hit is shorter), writing the global layers' KV of the positions
 * below C to a sink (sink_slots slots at the end of the main pool, owned
 * by no policy) so that shared cached blocks are never rewritten.
 *
 * Not for: the pool's bookkeeping (engine_swa.c) or the plan's budget
 * arithmetic (memplan.c).
 */
#ifndef PAGODA_ENGINE_SWA_H
#define PAGODA_ENGINE_SWA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* [engine] swa_kv */
typedef enum pagoda_swa_kv {
    PAGODA_SWA_KV_WINDOW = 0,   /* local layers keep only their window (default) */
    PAGODA_SWA_KV_FULL = 1      /* every layer keeps every position (the main pool) */
} pagoda_swa_kv;

typedef struct pagoda_swa_geometry {
    bool window;                /* a window pool is used; false: every layer in the main pool */
    char why_full[200];         /* when the model has local layers but !window: why */
    int32_t n_local, n_global;  /* layers in the window pool / the main pool */
    int32_t window_tokens;      /* W */
    int32_t block_size;
    int32_t seats;              /* S: sequences holding window blocks at once */
    int32_t hold_blocks;        /* per sequence between steps */
    int32_t step_blocks;        /* a step's new tokens, all sequences */
    int32_t pool_blocks;        /* S x hold + step */
    int32_t recompute_tokens;   /* m x (W - 1): recomputed before a prefix hit's end */
    int32_t sink_slots;         /* min(T, S x recompute), 0 without a window pool */
    int32_t sink_blocks;        /* ceil(sink_slots / block_size) */
} pagoda_swa_geometry;

/* The geometry for a model of n_layers with n_swa_layers local ones of
 * window W, the engine's block_size, max_seq_len and swa_kv, and the
 * scheduler's limits. A window pool is used when the model has local
 * layers, swa_kv is window and W < max_seq_len (otherwise the local layers
 * see every earlier key and keep it in the main pool: why_full says so).
 * PAGODA_OK, or PAGODA_ERR_INVALID with err filled when the sizes do not
 * fit 32 bits. */
int pagoda_swa_geometry_compute(int32_t n_layers, int32_t n_swa_layers, int32_t window,
                                int32_t block_size, int32_t max_seq_len, int32_t max_num_seqs,
                                int32_t max_batched_tokens, int swa_kv, pagoda_swa_geometry *g,
                                char *err, size_t err_len);

#endif /* PAGODA_ENGINE_SWA_H */
