/*
 * threadpool.c: see threadpool.h. A generation counter announces each
 * task; workers spin on it for a short time (a decode step dispatches a
 * few hundred tasks, each well under a millisecond) and then sleep on a
 * condition variable so an idle server burns no CPU. The caller works as
 * thread 0 and then waits for a pending counter to drop to zero.
 * Not for: nested parallelism (a task must not call run on the same pool).
 */
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "pagoda/types.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* How long a worker spins for the next task before it sleeps. */
#define SPIN_NS 200000L

struct pagoda_threadpool {
    int n;                      /* threads including the caller */
    pthread_t *threads;         /* [n - 1] */
    int started;                /* workers actually started */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;            /* bumped once per task */
    atomic_int pending;         /* workers still running the current task */
    atomic_int stop;
    pagoda_task_fn fn;
    void *arg;
};

typedef struct worker_arg {
    pagoda_threadpool *p;
    int ith;
} worker_arg;

static long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static void *worker_main(void *varg)
{
    worker_arg *wa = varg;
    pagoda_threadpool *p = wa->p;
    int ith = wa->ith;
    free(wa);
    /* Not a load of gen: a task may have been announced before this
     * thread got to run, and it must not be skipped. */
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        long t0 = now_ns();
        for (int i = 0;; i++) {
            g = atomic_load_explicit(&p->gen, memory_order_acquire);
            if (g != seen || atomic_load_explicit(&p->stop, memory_order_relaxed)) break;
            CPU_RELAX();
            if ((i & 255) == 255 && now_ns() - t0 > SPIN_NS) {
                pthread_mutex_lock(&p->mu);
                while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
                       !atomic_load_explicit(&p->stop, memory_order_relaxed))
                    pthread_cond_wait(&p->cv, &p->mu);
                pthread_mutex_unlock(&p->mu);
                break;
            }
        }
        if (atomic_load_explicit(&p->stop, memory_order_relaxed)) break;
        seen = g;
        p->fn(p->arg, ith, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
    return NULL;
}

int pagoda_threadpool_create(int n_threads, pagoda_threadpool **out)
{
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    pagoda_threadpool *p = calloc(1, sizeof *p);
    if (!p) return PAGODA_ERR_NOMEM;
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->stop, 0);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
        if (!p->threads) {
            pagoda_threadpool_destroy(p);
            return PAGODA_ERR_NOMEM;
        }
        for (int i = 1; i < n_threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (!wa) {
                pagoda_threadpool_destroy(p);
                return PAGODA_ERR_NOMEM;
            }
            wa->p = p;
            wa->ith = i;
            if (pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0) {
                free(wa);
                pagoda_threadpool_destroy(p);
                return PAGODA_ERR_INTERNAL;
            }
            p->started++;
        }
    }
    *out = p;
    return PAGODA_OK;
}

void pagoda_threadpool_destroy(pagoda_threadpool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++) pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
}

int pagoda_threadpool_size(const pagoda_threadpool *p)
{
    return p ? p->n : 1;
}

void pagoda_threadpool_run(pagoda_threadpool *p, pagoda_task_fn fn, void *arg)
{
    if (!p || p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    /* The mutex orders the bump against a worker that is about to sleep. */
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_acq_rel);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, p->n);
    /* Yield after a while: on an oversubscribed machine a worker may be
     * waiting for our core. */
    for (long i = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; i++) {
        if (i < (1L << 16))
            CPU_RELAX();
        else
            sched_yield();
    }
}
