/*
 * host_engine.h: fills the engine slots of a plugin instance's host table
 * (submit, cancel, tokenize, ... for frontends; kv_copy_blocks for all).
 * Not for: the table itself, logging or config lookups (host.h).
 */
#ifndef PAGODA_HOST_ENGINE_H
#define PAGODA_HOST_ENGINE_H

#include "runtime.h"

/* [main thread, before the plugin's create()] frontend: also the request
 * and view slots. */
void pagoda_host_attach_engine(pagoda_host *h, pagoda_runtime *rt, bool frontend);

#endif
