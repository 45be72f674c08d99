/*
 * progress.c: the start-up progress bar and the weights prefault (see
 * progress.h). The bar is one line redrawn with '\r' and only when the
 * percentage changes, so a slow terminal never slows the load; without a
 * terminal (a log file, systemd, CI) it becomes at most four ordinary log
 * lines, one each time a quarter of the total is passed.
 * Not for: request progress or any timing that is measured.
 */
#include "progress.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"

#define BAR_WIDTH 30
#define PREFAULT_CHUNK (8u << 20) /* bytes between progress updates */

void pagoda_progress_init(pagoda_progress *p, const char *what, uint64_t total, FILE *f, int tty)
{
    memset(p, 0, sizeof *p);
    p->f = f ? f : stderr;
    p->tty = tty < 0 ? isatty(fileno(p->f)) != 0 : tty != 0;
    snprintf(p->what, sizeof p->what, "%s", what ? what : "loading");
    p->total = total;
    p->shown = -1;
}

static void draw(pagoda_progress *p, int pct)
{
    double mib = 1024.0 * 1024.0;
    if (p->tty) {
        char bar[BAR_WIDTH + 1];
        int fill = pct * BAR_WIDTH / 100;
        for (int i = 0; i < BAR_WIDTH; i++) bar[i] = i < fill ? '#' : '.';
        bar[BAR_WIDTH] = 0;
        if (p->unit[0])
            fprintf(p->f, "\r%s [%s] %3d%% %llu/%llu %s%s%s", p->what, bar, pct,
                    (unsigned long long)p->done, (unsigned long long)p->total, p->unit,
                    p->note[0] ? "  " : "", p->note);
        else
            fprintf(p->f, "\r%s [%s] %3d%% %.1f/%.1f MiB", p->what, bar, pct,
                    (double)p->done / mib, (double)p->total / mib);
        fflush(p->f);
    } else {
        pagoda_log(PAGODA_LOG_INFO, "%s: %d%% (%.1f of %.1f MiB)", p->what, pct,
                   (double)p->done / mib, (double)p->total / mib);
    }
    p->shown = pct;
}

void pagoda_progress_set(pagoda_progress *p, uint64_t done)
{
    p->done = done < p->total ? done : p->total;
    int pct = p->total ? (int)(p->done * 100 / p->total) : 100;
    if (p->tty) {
        if (pct > p->shown) draw(p, pct);
    } else if (pct / 25 > (p->shown < 0 ? 0 : p->shown / 25)) {
        /* a log line each time a quarter is passed: 4 lines at most */
        draw(p, pct);
    }
}

void pagoda_progress_finish(pagoda_progress *p)
{
    pagoda_progress_set(p, p->total);
    if (p->shown < 100) draw(p, 100);
    if (p->tty) { fputc('\n', p->f); fflush(p->f); }
}

void pagoda_progress_clear(pagoda_progress *p)
{
    if (!p->tty || p->shown < 0) return;
    fputs("\r\033[K", p->f);
    fflush(p->f);
}

void pagoda_progress_redraw(pagoda_progress *p)
{
    if (!p->tty) return;
    draw(p, p->total ? (int)(p->done * 100 / p->total) : 100);
}

uint64_t pagoda_prefault_weights(const void *data, size_t size, const char *what)
{
    pagoda_progress p;
    pagoda_progress_init(&p, what, size, stderr, -1);
    /* the bar only where someone watches and the log would print it */
    if (p.tty && pagoda_log_get_level() < PAGODA_LOG_WARN) p.tty = false;
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = pg > 0 ? (size_t)pg : 4096;
    const volatile unsigned char *b = data;
    uint64_t sum = 0;
    for (size_t off = 0; off < size; off += PREFAULT_CHUNK) {
        size_t n = size - off < PREFAULT_CHUNK ? size - off : PREFAULT_CHUNK;
        /* ask for read-ahead of the chunk first: one large read, not a fault per page */
        uintptr_t a = (uintptr_t)(b + off) & ~(uintptr_t)(page - 1);
        madvise((void *)a, n + ((uintptr_t)(b + off) - a), MADV_WILLNEED);
        for (size_t i = 0; i < n; i += page) sum += b[off + i];
        pagoda_progress_set(&p, off + n);
    }
    pagoda_progress_finish(&p);
    return sum;
}
