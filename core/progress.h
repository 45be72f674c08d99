/*
 * progress.h: start-up progress for loading model weights: a bar redrawn in
 * place when the output is a terminal, plain log lines (one per quarter)
 * otherwise, and pagoda_prefault_weights(), which reads every page of the
 * mapped weights once so the load happens at start-up, under the bar,
 * instead of as page faults inside the first requests.
 * Also a count with a unit and a note (pagoda perplexity's chunks).
 * Not for: rates or ETAs.
 */
#ifndef PAGODA_CORE_PROGRESS_H
#define PAGODA_CORE_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct pagoda_progress {
    FILE *f;          /* where the bar goes (TTY mode) */
    bool tty;         /* bar in place; else pagoda_log lines at INFO */
    char what[64];    /* "loading weights" */
    uint64_t total;
    uint64_t done;
    int shown;        /* last percentage drawn (bar) or logged (lines); -1: none */
    char unit[16];    /* "" : total and done are bytes (shown in MiB); else what they count */
    char note[96];    /* shown after the bar when set (a running figure) */
} pagoda_progress;

/* tty: 1 bar, 0 log lines, -1 decide by isatty(fileno(f)). f NULL: stderr. */
void pagoda_progress_init(pagoda_progress *p, const char *what, uint64_t total, FILE *f, int tty);
/* Record progress (clamped to total); redraws only when the percentage moves. */
void pagoda_progress_set(pagoda_progress *p, uint64_t done);
/* Show 100% and end the bar's line. */
void pagoda_progress_finish(pagoda_progress *p);
/* TTY mode: erase the bar's line, so that another line can be printed on
 * the terminal; pagoda_progress_redraw() puts the bar back under it. */
void pagoda_progress_clear(pagoda_progress *p);
void pagoda_progress_redraw(pagoda_progress *p);

/* Read one byte of every page of [data, data + size) with progress shown as
 * `what` on stderr; returns a sum of the bytes read (so the reads are not
 * optimised away; callers ignore it). */
uint64_t pagoda_prefault_weights(const void *data, size_t size, const char *what);

#endif /* PAGODA_CORE_PROGRESS_H */
