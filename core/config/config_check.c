/*
 * core/config/config_check.c: see config_check.h. Each plugin is found and
 * its descriptor read through the loader (plugin_loader.h) only for its
 * config_keys; the record is freed at once (the loader never unloads a
 * shared object, so loading it again to serve is cheap).
 * Not for: the checks a config file gets on its own (config.c).
 */
#include "config_check.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "plugin_loader.h"

static void set_err(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t n, const char *fmt, ...)
{
    if (!err || !n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

/* Where section `sec` starts: "FILE:LINE", or "--set" for one only --set named. */
static void section_where(const pagoda_config *c, int line, char *buf, size_t n)
{
    if (line > 0) snprintf(buf, n, "%s:%d", pagoda_config_file(c) ? pagoda_config_file(c) : "?", line);
    else snprintf(buf, n, "--set");
}

/* Is [kind.name] the plugin the engine runs as that kind? */
static bool in_use(const pagoda_engine_config *ec, int kind, const char *name)
{
    switch (kind) {
    case PAGODA_KIND_BACKEND: return strcmp(ec->backend, name) == 0;
    case PAGODA_KIND_SCHEDULER: return strcmp(ec->scheduler, name) == 0;
    case PAGODA_KIND_KVCACHE: return strcmp(ec->kvcache, name) == 0;
    case PAGODA_KIND_FRONTEND: return strcmp(ec->frontend, name) == 0;
    case PAGODA_KIND_CONSTRAINT:
        return strcmp(ec->constraint, "none") != 0 && strcmp(ec->constraint, name) == 0;
    case PAGODA_KIND_COMM: return ec->tensor_parallel > 1 && strcmp(ec->comm, name) == 0;
    default: return false;
    }
}

/* The [engine] keys that name a plugin in use must name one that exists. */
static int check_engine_names(const pagoda_config *c, const pagoda_engine_config *ec, char *err,
                              size_t err_len)
{
    const struct { int kind; const char *key; const char *name; } use[] = {
        {PAGODA_KIND_BACKEND, "backend", ec->backend},
        {PAGODA_KIND_SCHEDULER, "scheduler", ec->scheduler},
        {PAGODA_KIND_KVCACHE, "kvcache", ec->kvcache},
        {PAGODA_KIND_FRONTEND, "frontend", ec->frontend},
        {PAGODA_KIND_CONSTRAINT, "constraint", ec->constraint},
        {PAGODA_KIND_COMM, "comm", ec->comm},
    };
    for (size_t i = 0; i < sizeof use / sizeof use[0]; i++) {
        if (!in_use(ec, use[i].kind, use[i].name)) continue;
        char path[4096], msg[3072];
        int st = pagoda_plugin_find(c, use[i].kind, use[i].name, path, sizeof path, msg, sizeof msg);
        if (st == PAGODA_OK) continue;
        char sec[128];
        snprintf(sec, sizeof sec, "%s.%s", use[i].key, use[i].name);
        if (pagoda_config_get(c, sec, "path")) { /* the message names the path and its line */
            set_err(err, err_len, "%s", msg);
            return st;
        }
        char where[4200];
        if (!pagoda_config_where(c, "engine", use[i].key, where, sizeof where))
            snprintf(where, sizeof where, "%s", pagoda_config_file(c) ? pagoda_config_file(c)
                                                                       : "the defaults");
        set_err(err, err_len, "%s: engine.%s = %s: %s", where, use[i].key, use[i].name, msg);
        return st;
    }
    return PAGODA_OK;
}

/* One [kind.name] section: the plugin exists, and the keys are its own. */
static int check_section(const pagoda_config *c, const pagoda_engine_config *ec, const char *sec,
                         int line, char *err, size_t err_len)
{
    const char *dot = strchr(sec, '.');
    if (!dot) return PAGODA_OK; /* config.c allows only [engine] without a dot */
    char kw[32];
    snprintf(kw, sizeof kw, "%.*s", (int)((size_t)(dot - sec) < 31 ? dot - sec : 31), sec);
    int kind = pagoda_plugin_kind_from_name(kw);
    const char *name = dot + 1;
    if (!kind) return PAGODA_OK; /* config.c refused an unknown kind already */
    char where[4200], path[4096], msg[3072];
    section_where(c, line, where, sizeof where);
    int st = pagoda_plugin_find(c, kind, name, path, sizeof path, msg, sizeof msg);
    if (st != PAGODA_OK) {
        if (pagoda_config_get(c, sec, "path")) {
            set_err(err, err_len, "%s", msg);
            return st;
        }
        char names[2048];
        const char *best = pagoda_plugin_closest(kind, name, names, sizeof names);
        if (best)
            set_err(err, err_len, "%s: [%s]: there is no %s plugin '%s'; did you mean [%s.%s]? "
                    "(%s plugins: %s; see `pagoda plugins`)", where, sec, kw, name, kw, best, kw,
                    names);
        else
            set_err(err, err_len, "%s: [%s]: there is no %s plugin '%s', and no %s plugin at all "
                    "in the plugin folders (see `pagoda plugins`; build the plugins or set "
                    "PAGODA_PLUGIN_PATH)", where, sec, kw, name, kw);
        return PAGODA_ERR_INVALID;
    }
    pagoda_plugin *p = NULL;
    st = pagoda_plugin_load_file(path, kind, name, &p, msg, sizeof msg);
    if (st != PAGODA_OK) {
        if (in_use(ec, kind, name)) {
            set_err(err, err_len, "%s", msg);
            return st;
        }
        pagoda_log(PAGODA_LOG_WARN, "%s: [%s] is for a plugin not in use that does not load here, "
                   "so its keys are not checked: %s", where, sec, msg);
        return PAGODA_OK;
    }
    st = pagoda_config_validate_section(c, sec, p->desc.config_keys, err, err_len);
    pagoda_plugin_free(p);
    return st;
}

int pagoda_config_check_plugins(const pagoda_config *cfg, char *err, size_t err_len)
{
    pagoda_engine_config ec;
    int st = pagoda_config_engine(cfg, &ec, err, err_len);
    if (st) return st;
    if ((st = check_engine_names(cfg, &ec, err, err_len))) return st;
    const char *sec;
    int line;
    for (size_t i = 0; pagoda_config_section_at(cfg, i, &sec, &line); i++) {
        if (strcmp(sec, "engine") == 0) continue;
        if ((st = check_section(cfg, &ec, sec, line, err, err_len))) return st;
    }
    return PAGODA_OK;
}
