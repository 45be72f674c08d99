/* plugin_testhost.h: a fake pagoda_host for unit tests that load one
 * built plugin .so straight from the plugin folder, without the core's
 * loader: log/error/config_* are served from a small in-test key table.
 * Header-only (static functions) because each test executable links only
 * its own .c and testutil.c. Not for: frontends' host (no engine slots:
 * fake_engine.h), though th_load loads frontends too. */
#ifndef PAGODA_PLUGIN_TESTHOST_H
#define PAGODA_PLUGIN_TESTHOST_H

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pagoda/host.h"
#include "pagoda/plugin.h"
#include "testutil.h"

#define TH_MAX_KEYS 16

typedef struct th_host {
    pagoda_host h;                  /* first, so a pagoda_host * is a th_host * */
    const char *keys[TH_MAX_KEYS];
    const char *vals[TH_MAX_KEYS];
    int n_keys;
    const char *engine_keys[TH_MAX_KEYS];
    const char *engine_vals[TH_MAX_KEYS];
    int n_engine_keys;
    char last_error[512];
    int n_errors;
    bool quiet;                     /* drop log lines */
} th_host;

static inline const char *th_lookup(const pagoda_host *h, const char *key)
{
    const th_host *t = (const th_host *)h;
    for (int i = 0; i < t->n_keys; i++)
        if (strcmp(t->keys[i], key) == 0) return t->vals[i];
    return NULL;
}

__attribute__((format(printf, 3, 4))) static inline void th_log(const pagoda_host *h, int level,
                                                         const char *fmt, ...)
{
    const th_host *t = (const th_host *)h;
    va_list ap;
    if (t->quiet) return;
    va_start(ap, fmt);
    fprintf(stderr, "[plugin %d] ", level);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

__attribute__((format(printf, 3, 4))) static inline int th_error(const pagoda_host *h, int status,
                                                          const char *fmt, ...)
{
    th_host *t = (th_host *)h;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->last_error, sizeof(t->last_error), fmt, ap);
    va_end(ap);
    t->n_errors++;
    return status;
}

static inline const char *th_config_str(const pagoda_host *h, const char *key, const char *dflt)
{
    const char *v = th_lookup(h, key);
    return v ? v : dflt;
}

static inline int64_t th_config_int(const pagoda_host *h, const char *key, int64_t dflt)
{
    const char *v = th_lookup(h, key);
    return v ? strtoll(v, NULL, 10) : dflt;
}

static inline double th_config_float(const pagoda_host *h, const char *key, double dflt)
{
    const char *v = th_lookup(h, key);
    return v ? strtod(v, NULL) : dflt;
}

static inline bool th_config_bool(const pagoda_host *h, const char *key, bool dflt)
{
    const char *v = th_lookup(h, key);
    if (!v) return dflt;
    return strcasecmp(v, "true") == 0 || strcmp(v, "1") == 0 || strcasecmp(v, "yes") == 0 ||
           strcasecmp(v, "on") == 0;
}

static inline const char *th_engine_config(const pagoda_host *h, const char *key)
{
    const th_host *t = (const th_host *)h;
    for (int i = 0; i < t->n_engine_keys; i++)
        if (strcmp(t->engine_keys[i], key) == 0) return t->engine_vals[i];
    return NULL;
}

/* A host with no keys set. */
static inline void th_init(th_host *t)
{
    memset(t, 0, sizeof(*t));
    t->h.struct_size = sizeof(pagoda_host);
    t->h.abi_major = PAGODA_ABI_MAJOR;
    t->h.abi_minor = PAGODA_ABI_MINOR;
    t->h.log = th_log;
    t->h.config_str = th_config_str;
    t->h.config_int = th_config_int;
    t->h.config_float = th_config_float;
    t->h.config_bool = th_config_bool;
    t->h.engine_config = th_engine_config;
    t->h.error = th_error;
    t->quiet = true;
}

static inline void th_set(th_host *t, const char *key, const char *val)
{
    ck_assert_int_lt(t->n_keys, TH_MAX_KEYS);
    t->keys[t->n_keys] = key;
    t->vals[t->n_keys] = val;
    t->n_keys++;
}

static inline void th_set_engine(th_host *t, const char *key, const char *val)
{
    ck_assert_int_lt(t->n_engine_keys, TH_MAX_KEYS);
    t->engine_keys[t->n_engine_keys] = key;
    t->engine_vals[t->n_engine_keys] = val;
    t->n_engine_keys++;
}

/* A loaded plugin: its handle and descriptor. */
typedef struct th_plugin {
    void *dl;
    const pagoda_plugin_desc *desc;
} th_plugin;

/* dlopen <plugin dir>/<kind>-<name>.so ($PAGODA_PLUGIN_PATH, else the
 * build tree's plugins folder) and fetch its descriptor; fails the test
 * with dlerror() when it cannot. */
static inline th_plugin th_load(const char *kind, const char *name)
{
    th_plugin p = {0};
    char path[4096];
    const char *dir = getenv("PAGODA_PLUGIN_PATH");
    if (dir && *dir) snprintf(path, sizeof(path), "%s/%s-%s.so", dir, kind, name);
    else snprintf(path, sizeof(path), "%s/%s-%s.so", tu_build("plugins"), kind, name);
    p.dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(p.dl != NULL, "dlopen %s: %s (build the plugin targets first)", path, dlerror());
    pagoda_plugin_entry_fn entry = (pagoda_plugin_entry_fn)dlsym(p.dl, PAGODA_PLUGIN_ENTRY_SYMBOL);
    ck_assert_msg(entry != NULL, "%s has no %s", path, PAGODA_PLUGIN_ENTRY_SYMBOL);
    p.desc = entry(PAGODA_ABI_MAJOR, PAGODA_ABI_MINOR);
    ck_assert_ptr_nonnull(p.desc);
    ck_assert_uint_eq(p.desc->abi_major, PAGODA_ABI_MAJOR);
    ck_assert_str_eq(p.desc->name, name);
    ck_assert_str_eq(pagoda_kind_name(p.desc->kind), kind);
    ck_assert_ptr_nonnull(p.desc->create);
    ck_assert_ptr_nonnull(p.desc->destroy);
    ck_assert_ptr_nonnull(p.desc->ops);
    return p;
}

static inline void th_unload(th_plugin *p)
{
    if (p->dl) dlclose(p->dl);
    p->dl = NULL;
    p->desc = NULL;
}

/* True when `key` is declared in the descriptor's config_keys. */
static inline bool th_declares_key(const pagoda_plugin_desc *d, const char *key)
{
    for (const pagoda_config_key *k = d->config_keys; k && k->name; k++)
        if (strcmp(k->name, key) == 0) return true;
    return false;
}

#endif
