/* pagoda/pagoda.h: the whole public SDK in one include.
 * Not for: declarations of its own; see the headers it includes. */
#ifndef PAGODA_PAGODA_H
#define PAGODA_PAGODA_H
#include "pagoda/types.h"
#include "pagoda/plugin.h"
#include "pagoda/backend.h"
#include "pagoda/kvcache.h"
#include "pagoda/scheduler.h"
#include "pagoda/frontend.h"
#include "pagoda/constraint.h"
#include "pagoda/comm.h"
#include "pagoda/host.h"
#endif
