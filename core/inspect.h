/*
 * inspect.h: the inspection JSON behind GET /v1/inspect (the host's
 * inspect_json slot): an engine snapshot (engine.h) with the memory plan,
 * the device and the process around it, formatted on the asking thread.
 * The schema is docs/http-api.md's.
 * Not for: taking the snapshot (core/engine/engine_inspect.c) or serving
 * it (the HTTP frontend).
 */
#ifndef PAGODA_INSPECT_H
#define PAGODA_INSPECT_H

#include "runtime.h"

/* [any thread] The snapshot of rt's engine as JSON (malloc'd; free()), or
 * NULL while the weights load or when out of memory. */
char *pagoda_inspect_json(pagoda_runtime *rt);

/* The JSON of one snapshot, with the plan and device lines from rt (which
 * may be NULL: then memory holds only the KV pool's lines). For tests. */
char *pagoda_inspect_format(const pagoda_engine_snapshot *s, const pagoda_runtime *rt);

#endif /* PAGODA_INSPECT_H */
