/*
 * pagoda/frontend.h: frontends (HTTP, stdin, ...). A frontend turns outside
 * requests into host->submit() calls and streams the events back. It
 * reaches the engine only through the host table it got at create().
 *
 * The core calls run() on the main thread right after create(), while the
 * weights may still be loading (host->stats reports ready = false, and
 * host->submit waits for the load); run() blocks until the frontend is
 * done (stdin at EOF with every request finished) or stop() was called.
 * The core calls stop() on SIGINT/SIGTERM from a watcher thread (never
 * from inside a signal handler), and from the loading thread when the
 * weights fail to load. On SIGINT it first offers the interrupt to
 * interrupt() where the frontend has it (ABI 1.6), which may take it.
 *
 * Not for: anything engine-side; a frontend sees only the host table.
 */
#ifndef PAGODA_FRONTEND_H
#define PAGODA_FRONTEND_H

#include "pagoda/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pagoda_frontend_ops {
    size_t struct_size;

    /* [main thread] required. Serve until done or stopped. Returns PAGODA_OK
     * on a clean end (the process exits 0), an error otherwise (e.g. the port
     * was taken: reported through host->error). Before returning, every
     * request it submitted has had its FINAL event. */
    int (*run)(void *ctx);

    /* [any thread] required. Ask run() to return: stop accepting, cancel or
     * drain what is in flight. Safe to call more than once, before run(). */
    void (*stop)(void *ctx);

    /* ---- minor 6 */
    /* [signal watcher thread] optional. Ctrl-C (SIGINT) arrived: return 1
     * when the frontend took it itself (terminal chat stops the reply that
     * is streaming and keeps the conversation), 0 to have the server stop
     * as on SIGTERM. NULL: the server stops. Must not block; any output it
     * writes (ending a half-written line) comes before the core's log line
     * about stopping. */
    int (*interrupt)(void *ctx);
} pagoda_frontend_ops;

#ifdef __cplusplus
}
#endif
#endif /* PAGODA_FRONTEND_H */
