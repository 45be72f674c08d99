/*
 * core/plugin_loader.h: finding, loading and checking plugins.
 *
 * Search order for (kind, name), first file found wins:
 *   1. the key `path` of the plugin's section [kind.name] (reserved in every
 *      plugin section; an explicit path that does not load is an error, no
 *      other place is tried),
 *   2. each folder of $PAGODA_PLUGIN_PATH (colon-separated), in order,
 *   3. the build tree's plugin folder (PAGODA_PLUGIN_BUILD_DIR), only for a
 *      program that runs from the build tree (PAGODA_BUILD_ROOT),
 *   3b. for an installed program, <its folder>/PAGODA_PLUGIN_RELATIVE_DIR when
 *      that exists and is not folder 4 (an install under another prefix),
 *   4. the installed plugin folder (PAGODA_PLUGIN_INSTALL_DIR),
 * looking for the file <kind>-<name>.so.
 *
 * Checks, in this order, each refusal one line naming the file, both ABI
 * versions, the rule and the fix: dlopen (RTLD_NOW|RTLD_LOCAL, dlerror
 * shown), the entry symbol, the ABI version (same major, plugin minor <=
 * host minor), descriptor struct_size (>= ABI 1.0's), ops struct_size (>=
 * ABI 1.0's for that kind), kind and name against what was asked for,
 * required slots present; then (pagoda_plugin_load only) probe() > 0 and the
 * plugin's config section against its config_keys.
 *
 * A loaded plugin is never dlclose'd: libraries such as OpenBLAS start
 * threads when loaded and are not safe to unload, and a server process
 * unloads plugins only to exit. pagoda_plugin_free frees the record only.
 * Not for: making instances' host tables (host.h).
 */
#ifndef PAGODA_CORE_PLUGIN_LOADER_H
#define PAGODA_CORE_PLUGIN_LOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include "pagoda/pagoda.h"
#include "config.h"

typedef struct pagoda_plugin {
    char path[4096];           /* the file loaded */
    void *dl;                  /* dlopen handle (never closed) */
    pagoda_plugin_desc desc;   /* zeroed, then min(struct_size, sizeof) copied */
    uint32_t desc_size;        /* the plugin's desc struct_size */
    union {                    /* the kind's ops, copied the same way */
        size_t struct_size;
        pagoda_backend_ops backend;
        pagoda_scheduler_ops scheduler;
        pagoda_kvcache_ops kvcache;
        pagoda_frontend_ops frontend;
        pagoda_constraint_ops constraint;
        pagoda_comm_ops comm;
    } ops;
    int probe_score;           /* 0..100, 100 when the plugin has no probe */
    char probe_why[256];       /* probe's reason ("" when none) */
} pagoda_plugin;

/* Kind from its INI word ("backend" -> PAGODA_KIND_BACKEND); 0 if unknown. */
int pagoda_plugin_kind_from_name(const char *word);

/* The search: the file <kind>-<name>.so for the config's section
 * [kind.name] (cfg may be NULL: no explicit path). Writes the path found.
 * PAGODA_ERR_NOT_FOUND with err naming every folder looked in and the
 * plugins of that kind that do exist (and the closest name). */
int pagoda_plugin_find(const pagoda_config *cfg, int kind, const char *name, char *path,
                       size_t path_len, char *err, size_t err_len);

/* The plugins of `kind` in the search folders, comma-separated into names
 * ("" when none), and the one whose name is closest to `name` (NULL when
 * none; the string lives until the next call). */
const char *pagoda_plugin_closest(int kind, const char *name, char *names, size_t n);

/* Load and check one file. kind/name: what the config asked for (0/NULL:
 * take whatever the file is, as `pagoda plugins` does). Does not probe or
 * validate config. On success *out is the caller's (pagoda_plugin_free). */
int pagoda_plugin_load_file(const char *path, int kind, const char *name, pagoda_plugin **out,
                            char *err, size_t err_len);

/* Find + load_file + probe (a score of 0 is a refusal with the probe's
 * reason) + validate the section [kind.name] of cfg against the plugin's
 * config_keys. Everything the server needs before create(). */
int pagoda_plugin_load(const pagoda_config *cfg, int kind, const char *name, pagoda_plugin **out,
                       char *err, size_t err_len);

/* Call the plugin's create with the instance's host table; err is always
 * NUL-terminated and names the plugin ("backend.cpu: create failed: ...").
 * The plugin's own message from host->error is used when err is empty. */
int pagoda_plugin_create(const pagoda_plugin *p, const pagoda_host *host, void **ctx, char *err,
                         size_t err_len);
/* Call destroy (ctx may be NULL: nothing is done). */
void pagoda_plugin_destroy(const pagoda_plugin *p, void *ctx);

/* Free the record (the shared object stays mapped; see above). */
void pagoda_plugin_free(pagoda_plugin *p);

/* The folders searched after an explicit path, in order: $PAGODA_PLUGIN_PATH's,
 * then the build and install folders. Returns how many were written (at
 * most cap); each string lives until the next call. */
size_t pagoda_plugin_search_dirs(const char **dirs, size_t cap);

/* Replace the compile-time build / install folders (NULL: back to the
 * compile-time one). For tests of the search order. Not thread-safe. */
void pagoda_plugin_set_builtin_dirs(const char *build_dir, const char *install_dir);

/* `pagoda plugins [-v]`: every <kind>-<name>.so in the search folders, with
 * kind, name, ABI, version, description and probe result, refused ones with
 * the reason, shadowed ones (an earlier folder has the same file) marked;
 * verbose adds config keys. Returns the number of plugins that load. */
int pagoda_plugins_print(FILE *out, bool verbose);

#endif /* PAGODA_CORE_PLUGIN_LOADER_H */
