/*
 * threadpool.h: a fixed pool of worker threads that run one data-parallel
 * task at a time ("every thread runs fn(arg, ith, nth)"), built for the
 * many short kernels of a decode step: workers spin briefly between tasks
 * before they sleep, so a dispatch costs microseconds, not a wake-up.
 * Not for: queues of independent jobs, or calls from several threads at
 * once (one caller at a time, the engine thread).
 */
#ifndef PAGODA_CPU_THREADPOOL_H
#define PAGODA_CPU_THREADPOOL_H

typedef struct pagoda_threadpool pagoda_threadpool;

/* Work of one task: part `ith` of `nth`. */
typedef void (*pagoda_task_fn)(void *arg, int ith, int nth);

/* Start n_threads - 1 workers (the caller is the n-th). n_threads < 1 is
 * taken as 1. Returns PAGODA_OK or PAGODA_ERR_NOMEM / PAGODA_ERR_INTERNAL. */
int pagoda_threadpool_create(int n_threads, pagoda_threadpool **out);

/* Stop and join the workers. NULL is a no-op. */
void pagoda_threadpool_destroy(pagoda_threadpool *p);

/* Threads a task is split over (1 for a NULL pool). */
int pagoda_threadpool_size(const pagoda_threadpool *p);

/* Run fn(arg, part, n_parts) once for every part in [0, n_parts), on
 * whichever thread claims it first (the caller works too), and return when
 * all are done. A descheduled worker delays nothing but a part it already
 * holds, so cut work into a few parts per thread. A NULL pool runs every
 * part on the caller. */
void pagoda_threadpool_run_parts(pagoda_threadpool *p, pagoda_task_fn fn, void *arg, int n_parts);

/* run_parts with one part per thread: fn(arg, ith, nth) for ith < nth
 * (any thread may run any ith). A NULL pool runs fn(arg, 0, 1). */
void pagoda_threadpool_run(pagoda_threadpool *p, pagoda_task_fn fn, void *arg);

#endif
