/*
 * core/host.h: the pagoda_host tables the core hands plugin instances.
 * Each instance gets its own table whose host_ctx is a core record holding
 * the instance's kind, name, config section and last error. The table
 * comes filled with log, config_str/int/float/bool (its own section
 * [kind.name], defaults when absent), engine_config ([engine], documented
 * defaults when absent), error and free (plain free()); the engine slots
 * (submit, cancel, tokenize, ..., kv_copy_blocks, shutting_down) are NULL
 * until the engine fills them with pagoda_host_set_engine_slots.
 * Not for: loading plugins (plugin_loader.h) or the engine itself.
 */
#ifndef PAGODA_CORE_HOST_H
#define PAGODA_CORE_HOST_H

#include "pagoda/pagoda.h"
#include "config.h"

/* [main thread] A table for one instance of plugin kind/name reading cfg
 * (which must outlive the table). NULL on out of memory. Free with
 * pagoda_host_free after the instance's destroy() returned. */
pagoda_host *pagoda_host_new(const pagoda_config *cfg, int kind, const char *name);
void pagoda_host_free(pagoda_host *h);

/* [main thread, before create()] Copy every non-NULL slot of `slots` from
 * kv_copy_blocks to the end of the table (kv_copy_blocks, submit, cancel,
 * request_defaults, tokenize, detokenize, token_text, chat_render, free,
 * model_info, stats, memory_plan_json, metrics_text, shutting_down) into h.
 * The header fields and the log/config/error slots of `slots` are ignored. */
void pagoda_host_set_engine_slots(pagoda_host *h, const pagoda_host *slots);

/* The engine's own pointer for this table, so engine slots can find the
 * engine from the `h` they are called with. NULL until set. */
void pagoda_host_set_engine(pagoda_host *h, void *engine);
void *pagoda_host_engine(const pagoda_host *h);

/* [any thread] The last message the plugin gave through h->error, or NULL
 * if none. The string is this thread's copy, valid until this thread's next
 * call. pagoda_host_clear_error forgets it. */
const char *pagoda_host_last_error(const pagoda_host *h);
void pagoda_host_clear_error(const pagoda_host *h);

/* "kind.name" of the instance (its section name); never NULL. */
const char *pagoda_host_section(const pagoda_host *h);

#endif /* PAGODA_CORE_HOST_H */
