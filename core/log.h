/*
 * core/log.h: the core's logging: one line per call to stderr (or a stream
 * the caller picks), with a timestamp and a level, filtered by a global
 * level. Thread-safe: a line is formatted first and written in one call
 * under a lock, so lines of different threads never interleave.
 * Not for: plugin logging directly (plugins log through pagoda_host.log,
 * which core/host.c forwards here with a "[kind.name]" prefix).
 */
#ifndef PAGODA_CORE_LOG_H
#define PAGODA_CORE_LOG_H

#include <stdarg.h>
#include <stdio.h>
#include "pagoda/types.h" /* PAGODA_LOG_ERROR .. PAGODA_LOG_DEBUG */

/* [any thread] Write one line if `level` <= the current level. A trailing
 * newline in fmt is not needed (one is added, never doubled). */
void pagoda_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pagoda_logv(int level, const char *fmt, va_list ap);

/* [any thread] The level filter; PAGODA_LOG_INFO at start. Values outside
 * ERROR..DEBUG are clamped. */
void pagoda_log_set_level(int level);
/* Text after the level on every line ("rank 1: "), "" for none; set it
 * before other threads log. */
void pagoda_log_set_prefix(const char *prefix);
int pagoda_log_get_level(void);

/* Where lines go; NULL means stderr (the default). The stream must stay
 * open until it is replaced. Meant for tests capturing log output. */
void pagoda_log_set_stream(FILE *f);

/* "error", "warn", "info", "debug" -> *level; returns 0, or -1 for any
 * other word (case-insensitive; "warning" is accepted too). */
int pagoda_log_level_parse(const char *s, int *level);
/* The word for a level ("info"); never NULL. */
const char *pagoda_log_level_name(int level);

#endif /* PAGODA_CORE_LOG_H */
