/*
 * core/config/config_check.h: a loaded config checked against the plugins
 * it names, before anything is loaded or computed (the server and `pagoda
 * plan` run it first, runtime.c). Every [kind.name] section must name a
 * plugin in the search path and hold only that plugin's keys, with valid
 * values; the plugin names in [engine] that are in use must exist. A typo
 * is then one line naming file:line, the section or key and the closest
 * name, instead of a section silently ignored or an error that comes only
 * after the memory plan.
 * Not for: the INI syntax and the [engine] values (config.h, checked at
 * load), loading a plugin to serve it (plugin_loader.h).
 */
#ifndef PAGODA_CORE_CONFIG_CHECK_H
#define PAGODA_CORE_CONFIG_CHECK_H

#include <stddef.h>

#include "config.h"

/* [main thread] Returns PAGODA_OK, or PAGODA_ERR_INVALID / NOT_FOUND with
 * the first problem in err (file order: the [engine] plugin names first,
 * then the sections as they appear). A section of a plugin that is not in
 * use and whose file does not load here (a CUDA backend on a machine
 * without CUDA) is logged as a warning with its keys unchecked. */
int pagoda_config_check_plugins(const pagoda_config *cfg, char *err, size_t err_len);

#endif /* PAGODA_CORE_CONFIG_CHECK_H */
