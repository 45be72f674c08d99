/*
 * server.h: `pagoda --config FILE`: build the runtime with its frontend,
 * start the engine, run the frontend until it returns or SIGINT/SIGTERM
 * asks it to stop, drain, and tear everything down.
 * Not for: tests and tools that drive an engine in-process (runtime.h).
 */
#ifndef PAGODA_SERVER_H
#define PAGODA_SERVER_H

#include "config.h"

/* Returns the process exit code: 0 after a clean run or a signal, 1 on a
 * runtime error, 2 on a config error. */
int pagoda_serve(pagoda_config *cfg);

#endif /* PAGODA_SERVER_H */
