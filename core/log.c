/*
 * core/log.c: see log.h. Timestamps are local wall-clock time with
 * milliseconds; they are for people reading the log, never for measuring.
 * Not for: metrics (metrics.c) or user-facing CLI output (stdout).
 */
#include "log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

static atomic_int g_level = PAGODA_LOG_INFO;
static FILE *g_stream; /* NULL: stderr */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

void pagoda_log_set_level(int level)
{
    if (level < PAGODA_LOG_ERROR) level = PAGODA_LOG_ERROR;
    if (level > PAGODA_LOG_DEBUG) level = PAGODA_LOG_DEBUG;
    atomic_store(&g_level, level);
}

int pagoda_log_get_level(void) { return atomic_load(&g_level); }

void pagoda_log_set_stream(FILE *f)
{
    pthread_mutex_lock(&g_mu);
    g_stream = f;
    pthread_mutex_unlock(&g_mu);
}

const char *pagoda_log_level_name(int level)
{
    switch (level) {
    case PAGODA_LOG_ERROR: return "error";
    case PAGODA_LOG_WARN: return "warn";
    case PAGODA_LOG_INFO: return "info";
    case PAGODA_LOG_DEBUG: return "debug";
    default: return "unknown";
    }
}

int pagoda_log_level_parse(const char *s, int *level)
{
    static const struct { const char *w; int l; } words[] = {
        { "error", PAGODA_LOG_ERROR }, { "warn", PAGODA_LOG_WARN },
        { "warning", PAGODA_LOG_WARN }, { "info", PAGODA_LOG_INFO },
        { "debug", PAGODA_LOG_DEBUG },
    };
    if (!s) return -1;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strcasecmp(s, words[i].w) == 0) {
            if (level) *level = words[i].l;
            return 0;
        }
    return -1;
}

static char g_prefix[32];   /* "rank 1: " under tensor parallelism; set before threads */

void pagoda_log_set_prefix(const char *prefix)
{
    snprintf(g_prefix, sizeof g_prefix, "%s", prefix ? prefix : "");
}

void pagoda_logv(int level, const char *fmt, va_list ap)
{
    if (level > atomic_load(&g_level)) return;
    static const char *tags[] = { "ERROR", "WARN ", "INFO ", "DEBUG" };
    const char *tag = (level >= 0 && level <= 3) ? tags[level] : "?    ";

    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);

    /* Format the whole line first so it is written in one call. */
    char line[4096];
    int n = (int)strftime(line, sizeof line, "%Y-%m-%d %H:%M:%S", &tm);
    n += snprintf(line + n, sizeof line - (size_t)n, ".%03d %s %s", (int)(tv.tv_usec / 1000), tag,
                  g_prefix);
    int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    if (m < 0) m = 0;
    n += m;
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2; /* truncated */
    if (n > 0 && line[n - 1] == '\n') n--;
    line[n++] = '\n';
    line[n] = '\0';

    pthread_mutex_lock(&g_mu);
    FILE *f = g_stream ? g_stream : stderr;
    fputs(line, f);
    fflush(f);
    pthread_mutex_unlock(&g_mu);
}

void pagoda_log(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pagoda_logv(level, fmt, ap);
    va_end(ap);
}
