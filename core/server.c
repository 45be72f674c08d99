/*
 * server.c: `pagoda --config FILE`. Signals are blocked in every thread and
 * taken by one watcher thread with sigwait, which asks the frontend to stop
 * (never from inside a signal handler); SIGINT is first offered to the
 * frontend's interrupt op (terminal chat takes it to stop a reply). Once the frontend returns, the
 * engine is stopped, which ends every request still in flight with a FINAL.
 * The weights load on a thread of their own while the frontend already
 * answers. Not for: building the runtime (runtime.c) or other subcommands
 * (main.c).
 */
#include "server.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "host.h"
#include "runtime.h"

typedef struct watcher {
    pagoda_runtime *rt;
    sigset_t set;
} watcher;

static void *watch_signals(void *arg)
{
    watcher *w = arg;
    for (;;) {
        int sig = 0;
        if (sigwait(&w->set, &sig)) continue;
        if (sig == SIGUSR2) return NULL; /* our own wake-up at exit */
        const pagoda_frontend_ops *fo = w->rt->p_front ? &w->rt->p_front->ops.frontend : NULL;
        if (sig == SIGINT && fo && fo->interrupt && w->rt->front_ctx &&
            !pagoda_runtime_shutting_down(w->rt) && fo->interrupt(w->rt->front_ctx)) {
            /* terminal chat stopped its reply and goes on */
            pagoda_log(PAGODA_LOG_DEBUG, "SIGINT: taken by frontend %s",
                       pagoda_host_section(w->rt->h_front));
            continue;
        }
        /* before the stop is published: a worker rank whose collective the
         * interrupt below ends then knows that it was asked to stop */
        __atomic_store_n(&w->rt->shutting_down, 1, __ATOMIC_RELEASE);
        pagoda_log(PAGODA_LOG_INFO, "%s: stopping (in-flight requests end with a final event)",
                   sig == SIGINT ? "SIGINT" : "SIGTERM");
        if (w->rt->tp) {
            /* the launcher signals every rank of a job that ends (mpirun does so
             * at once when a rank dies, then SIGKILLs a second later): a
             * collective waiting on another rank is ended, so the step in
             * flight fails and its requests hear the error now. A stop that
             * was asked for is no failure: INFO, and each rank exits 0. */
            pagoda_log(PAGODA_LOG_INFO, "tensor parallel: rank %d stops with the group (a step in "
                       "flight ends its requests with an error)", w->rt->tp->rank);
            pagoda_runtime_interrupt_comm(w->rt);
        }
        if (w->rt->p_front && w->rt->front_ctx) w->rt->p_front->ops.frontend.stop(w->rt->front_ctx);
    }
}

typedef struct loader {
    pagoda_runtime *rt;
    int st;
    char err[1024];
} loader;

/* Reads the weights in and starts the engine while the frontend already
 * answers (health: 503, requests wait). A failure stops the frontend. */
static void *load_weights(void *arg)
{
    loader *l = arg;
    /* the "serving" line is logged inside, before the engine is published:
     * a frontend that waits for ready (terminal chat's prompt) then writes
     * after it */
    l->st = pagoda_runtime_load(l->rt, true, l->err, sizeof l->err);
    if (l->st) {
        pagoda_log(PAGODA_LOG_ERROR, "%s", l->err);
        pagoda_runtime_load_failed(l->rt);
        l->rt->p_front->ops.frontend.stop(l->rt->front_ctx);
    }
    return NULL;
}

int pagoda_serve(pagoda_config *cfg)
{
    char err[1024] = "";
    watcher w = {0};
    sigemptyset(&w.set);
    sigaddset(&w.set, SIGINT);
    sigaddset(&w.set, SIGTERM);
    sigaddset(&w.set, SIGUSR2);
    /* blocked before any thread exists, so every thread inherits the mask */
    pthread_sigmask(SIG_BLOCK, &w.set, NULL);
    signal(SIGPIPE, SIG_IGN);

    pagoda_runtime *rt = NULL;
    int st = pagoda_runtime_prepare(cfg, true, true, &rt, err, sizeof err);
    if (st) {
        pagoda_log(PAGODA_LOG_ERROR, "%s", err);
        return st == PAGODA_ERR_INVALID ? 2 : 1;
    }
    w.rt = rt;
    pthread_t th, lt;
    bool have_watcher = pthread_create(&th, NULL, watch_signals, &w) == 0;
    if (pagoda_runtime_is_worker(rt)) {
        /* tensor parallelism: a rank other than 0 serves no one; it runs
         * rank 0's steps on its shard until rank 0 says stop */
        st = pagoda_runtime_work(rt, err, sizeof err);
        if (st && pagoda_runtime_shutting_down(rt)) {
            /* the signal ended the wait for rank 0's next step: asked for */
            pagoda_log(PAGODA_LOG_INFO, "tensor parallel: rank %d stopped on the signal (after "
                       "%lld steps)", rt->tp->rank, (long long)rt->tp->steps);
            st = PAGODA_OK;
        } else if (st) {
            pagoda_log(PAGODA_LOG_ERROR, "%s", err);
        }
        if (have_watcher) {
            pthread_kill(th, SIGUSR2);
            pthread_join(th, NULL);
        }
        pagoda_runtime_close(rt);
        return st ? 1 : 0;
    }
    loader l = {.rt = rt};
    if (pthread_create(&lt, NULL, load_weights, &l)) {
        pagoda_log(PAGODA_LOG_ERROR, "could not start the loading thread");
        pagoda_runtime_close(rt);
        return 1;
    }
    st = rt->p_front->ops.frontend.run(rt->front_ctx);
    if (st) {
        const char *e = pagoda_host_last_error(rt->h_front);
        pagoda_log(PAGODA_LOG_ERROR, "frontend %s: %s", pagoda_host_section(rt->h_front),
                   e && *e ? e : pagoda_status_str(st));
    }
    pthread_join(lt, NULL);
    if (!st && l.st) st = l.st;
    if (have_watcher) {
        pthread_kill(th, SIGUSR2);
        pthread_join(th, NULL);
    }
    pagoda_runtime_close(rt);
    return st ? 1 : 0;
}
