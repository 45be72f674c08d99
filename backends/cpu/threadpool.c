/*
 * threadpool.c: see threadpool.h. A task is cut into parts; the caller and
 * the workers claim parts from one atomic word (generation << 32 | next
 * part) and the caller returns when the count of finished parts reaches
 * the total. Nobody waits for a particular thread: on a loaded machine a
 * worker the kernel has descheduled simply claims nothing, and the caller
 * (or the other workers) do its share; a worker that wakes late sees a new
 * generation in the word and cannot claim a part of a finished task.
 * Workers spin on the word for a short time (a decode step dispatches a few
 * hundred tasks, each well under a millisecond) and then sleep on a
 * condition variable so an idle server burns no CPU.
 * Not for: nested parallelism (a task must not call run on the same pool).
 */
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
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
    /* generation << 32 | parts not yet claimed; a new generation with
     * n_parts once per task, then counts down to 0 */
    _Alignas(64) atomic_uint_least64_t state;
    _Alignas(64) atomic_int done;   /* parts finished in this generation */
    _Atomic(pagoda_task_fn) fn;
    _Atomic(void *) arg;
    atomic_int n_parts;
    atomic_int stop;
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

/* Claim and run parts of generation `gen` until none are left. The task's
 * fields are read between loading the word and the compare-exchange; its
 * success proves the word did not move in between (generations only grow,
 * the count only falls within one), so the fields were still `gen`'s: a
 * new task is published only after every part of the old one finished. */
static void work(pagoda_threadpool *p, uint32_t gen)
{
    uint64_t s = atomic_load_explicit(&p->state, memory_order_acquire);
    for (;;) {
        if ((uint32_t)(s >> 32) != gen) return;
        int left = (int)(uint32_t)s;
        if (left <= 0) return;
        int n_parts = atomic_load_explicit(&p->n_parts, memory_order_relaxed);
        pagoda_task_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
        void *arg = atomic_load_explicit(&p->arg, memory_order_relaxed);
        if (!atomic_compare_exchange_weak_explicit(&p->state, &s, s - 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        fn(arg, n_parts - left, n_parts);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
        s = atomic_load_explicit(&p->state, memory_order_acquire);
    }
}

static void *worker_main(void *varg)
{
    worker_arg *wa = varg;
    pagoda_threadpool *p = wa->p;
    free(wa);
    /* Generation 0 is never a task: the first run publishes generation 1. */
    uint32_t seen = 0;
    for (;;) {
        uint32_t g;
        long t0 = now_ns();
        for (int i = 0;; i++) {
            g = (uint32_t)(atomic_load_explicit(&p->state, memory_order_acquire) >> 32);
            if (g != seen || atomic_load_explicit(&p->stop, memory_order_relaxed)) break;
            CPU_RELAX();
            if ((i & 255) == 255 && now_ns() - t0 > SPIN_NS) {
                pthread_mutex_lock(&p->mu);
                while ((g = (uint32_t)(atomic_load_explicit(&p->state, memory_order_acquire) >>
                                       32)) == seen &&
                       !atomic_load_explicit(&p->stop, memory_order_relaxed))
                    pthread_cond_wait(&p->cv, &p->mu);
                pthread_mutex_unlock(&p->mu);
                break;
            }
        }
        if (atomic_load_explicit(&p->stop, memory_order_relaxed)) break;
        seen = g;
        work(p, g);
    }
    return NULL;
}

int pagoda_threadpool_create(int n_threads, pagoda_threadpool **out)
{
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    pagoda_threadpool *p = aligned_alloc(64, (sizeof *p + 63) / 64 * 64);
    if (!p) return PAGODA_ERR_NOMEM;
    p->n = n_threads;
    p->threads = NULL;
    p->started = 0;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    atomic_init(&p->state, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->fn, NULL);
    atomic_init(&p->arg, NULL);
    atomic_init(&p->n_parts, 0);
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

void pagoda_threadpool_run_parts(pagoda_threadpool *p, pagoda_task_fn fn, void *arg, int n_parts)
{
    if (n_parts <= 0) return;
    if (!p || p->n == 1 || n_parts == 1) {
        for (int i = 0; i < n_parts; i++) fn(arg, i, n_parts);
        return;
    }
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&p->n_parts, n_parts, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    uint32_t gen = (uint32_t)(atomic_load_explicit(&p->state, memory_order_relaxed) >> 32) + 1;
    if (gen == 0) gen = 1;  /* 0 is the workers' "nothing seen yet" */
    /* The mutex orders the bump against a worker that is about to sleep;
     * the release publishes fn/arg/n_parts/done with the new generation. */
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->state, (uint64_t)gen << 32 | (uint32_t)n_parts, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    work(p, gen);
    /* Only parts a worker claimed and has not finished remain. Yield after
     * a while: on an oversubscribed machine that worker may be waiting for
     * our core. */
    for (long i = 0; atomic_load_explicit(&p->done, memory_order_acquire) < n_parts; i++) {
        if (i < (1L << 14))
            CPU_RELAX();
        else
            sched_yield();
    }
}

void pagoda_threadpool_run(pagoda_threadpool *p, pagoda_task_fn fn, void *arg)
{
    pagoda_threadpool_run_parts(p, fn, arg, pagoda_threadpool_size(p));
}
