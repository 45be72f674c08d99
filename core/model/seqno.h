/*
 * seqno.h: the one place the core gives out pagoda_batch.seq_no values
 * (include/pagoda/backend.h), so that no two batches of different content
 * built by the core ever carry the same key. A backend may use seq_no only
 * as an opaque cache key (equal keys: the same batch content); the fields
 * below are the core's own bookkeeping. The layout, bit 0 lowest:
 *
 *   bits  0..39  a counter: the engine's step number, or the draft model's
 *                pass number (counted modulo 2^40)
 *   bits 40..59  the sub-batch index s of an MLA sub-batch (s < 2^20, as a
 *                batch holds at most max_batched_tokens <= 2^20 sequences)
 *   bit  60      an MLA decompressed sub-batch (forward_mla.c: one sequence)
 *   bit  61      an MLA absorbed sub-batch (forward_mla.c: a run of sequences)
 *   bit  62      the draft model's batches (drafter_model.c), not the engine's
 *   bit  63      the sliding-window layers' view of a step (engine_step.c,
 *                tp.c: their own slots and tables)
 *
 * Each user sets only its own field, so the kinds compose without meeting:
 * a draft model's MLA sub-batch is DRAFT | MLA_ABSORBED | s << 40 | pass.
 * Not for: a backend's cache (it reads none of these fields).
 */
#ifndef PAGODA_SEQNO_H
#define PAGODA_SEQNO_H

#include <stdint.h>

#define PAGODA_SEQNO_COUNT_MASK ((1ull << 40) - 1)
#define PAGODA_SEQNO_SUB_SHIFT 40
#define PAGODA_SEQNO_SUB_MASK (((1ull << 20) - 1) << PAGODA_SEQNO_SUB_SHIFT)
#define PAGODA_SEQNO_MLA_DECOMPRESSED (1ull << 60)
#define PAGODA_SEQNO_MLA_ABSORBED (1ull << 61)
#define PAGODA_SEQNO_DRAFT (1ull << 62)
#define PAGODA_SEQNO_WINDOW (1ull << 63)

/* The engine's step number step (1, 2, ...) as its batch's key. */
static inline uint64_t pagoda_seqno_step(uint64_t step)
{
    return step & PAGODA_SEQNO_COUNT_MASK;
}

/* The draft model's pass number pass as its batch's key. */
static inline uint64_t pagoda_seqno_draft(uint64_t pass)
{
    return PAGODA_SEQNO_DRAFT | (pass & PAGODA_SEQNO_COUNT_MASK);
}

/* The sliding-window layers' view of the step keyed seq_no. */
static inline uint64_t pagoda_seqno_window(uint64_t seq_no)
{
    return seq_no | PAGODA_SEQNO_WINDOW;
}

/* Sub-batch s of the batch keyed seq_no; kind: PAGODA_SEQNO_MLA_ABSORBED
 * or PAGODA_SEQNO_MLA_DECOMPRESSED. */
static inline uint64_t pagoda_seqno_mla_sub(uint64_t seq_no, uint64_t kind, int32_t s)
{
    return seq_no | kind | (((uint64_t)(uint32_t)s << PAGODA_SEQNO_SUB_SHIFT) & PAGODA_SEQNO_SUB_MASK);
}

#endif
