/*
 * conformance.h: the harness shared by the backend conformance runner's
 * files: one backend instance under test, a seeded RNG, helpers that move
 * tensors in and out of the backend's buffers, and the list of results
 * (one per op case: op, shapes, largest error, tolerance, verdict).
 * Not for: the op cases themselves (cases.c, cases_kv.c, cases_moe.c, cases_extra.c) or the command line and the
 * end-to-end model run (conformance.c).
 */
#ifndef PAGODA_CONFORMANCE_H
#define PAGODA_CONFORMANCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagoda/pagoda.h"

typedef struct cf_result {
    char op[32];          /* "matmul", "attention", ... */
    char shape[192];      /* "Q8_0 T=33 K=256 N=130 bias" */
    double err, tol;      /* largest (normalized) error and its bound */
    int verdict;          /* CF_PASS, CF_FAIL, CF_SKIP */
    char why[384];        /* failure or skip reason ("" on pass) */
} cf_result;

enum { CF_PASS = 0, CF_FAIL = 1, CF_SKIP = 2 };

typedef struct cf {
    const pagoda_backend_ops *ops;
    void *be;                 /* the backend instance */
    const pagoda_host *host;  /* its host table (errors come back through it) */
    pagoda_backend_info info;
    size_t align;             /* offsets used in tensors are multiples of this */
    uint64_t rng;
    bool verbose;
    cf_result *res;
    size_t n_res, cap_res;
} cf;

/* ------------------------------------------------------------------ RNG */
uint64_t cf_rand(cf *c);
float cf_uniform(cf *c, float lo, float hi);   /* uniform in [lo, hi) */
int32_t cf_randint(cf *c, int32_t n);          /* 0 .. n-1 */
void cf_fill(cf *c, float *x, size_t n, float lo, float hi);

/* ------------------------------------------------------------- results */
/* Record one case; prints it at once when it fails or in verbose mode. */
void cf_record(cf *c, const char *op, const char *shape, double err, double tol, int verdict,
               const char *why_fmt, ...) __attribute__((format(printf, 7, 8)));
/* Record a failed backend call: status and the plugin's host->error text. */
void cf_record_call(cf *c, const char *op, const char *shape, const char *call, int st);

/* ------------------------------------------------------ device tensors */
/* A tensor in a buffer of its own: `rows` x `cols` of `dtype` starting at
 * byte `c->align` (so offsets are exercised), rows `pad` bytes apart beyond
 * their size (0: packed). host: the bytes, packed rows, or NULL to upload
 * nothing. Returns a backend status; on error *buf is NULL. */
int cf_tensor_new(cf *c, int purpose, int dtype, int64_t rows, int64_t cols, size_t pad,
                  const void *host, pagoda_buffer **buf, pagoda_tensor *t);
/* Download an F32 tensor into packed rows. */
int cf_tensor_get(cf *c, const pagoda_tensor *t, float *dst);
void cf_buffer_free(cf *c, pagoda_buffer *b);

/* Largest |got - want| over n values, divided by max(|want|) (or by 1 when
 * the values are all tiny). NaN in got yields +inf. */
double cf_max_rel_err(const float *got, const double *want, size_t n);

/* --------------------------------------------------------------- cases */
/* Is dt in the backend's info.weight_types? */
bool cf_has_type(const cf *c, int dt);
/* The matmul tolerance of a weight type, normalized per output by
 * sum_k |x_k w_nk| (cases.c says why). */
double cf_matmul_tol(int dt);
/* Random weights of dt, rows x cols, as stored bytes (packed rows) and
 * their exact f32 values; malloc'd, the caller frees both. */
int cf_make_weights(cf *c, int dt, int64_t rows, int64_t cols, uint8_t **bytes, float **vals);

void cf_run_all_ops(cf *c);
/* weight_extra_bytes and weight_extra_held (ABI 1.15, cases_extra.c): run
 * before any other case (held starts at 0); a line where the slots are
 * NULL. */
void cf_run_extra_ops(cf *c);
/* matmul_experts and moe_combine (ABI 1.5, cases_moe.c; cf_run_all_ops
 * calls it): skipped with a line where the slots are NULL. */
void cf_run_moe_ops(cf *c);
/* kv_write, attention, attention_ext and copy_blocks for every KV type
 * (cases_kv.c; cf_run_all_ops calls it). */
void cf_run_kv_ops(cf *c);

#endif /* PAGODA_CONFORMANCE_H */
