/* The live status line: while xmprun's stderr is a terminal, one line kept at the bottom of it
 * (elapsed time, workers running and ended, the job's memory against its limit, the worker
 * nearest its own limit, the one using most GPU memory), redrawn on a 1 s timer and only when its
 * text changed. Worker output erases it first; the next tick draws it again. Off (no timer, no
 * wakeup) on anything else. */
#ifndef XMP_STATUS_H
#define XMP_STATUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct xmp_status {
    int fd;         /* the terminal, or -1: no status line */
    int timerfd;    /* 1 s ticks while workers run; -1 when off */
    bool shown;     /* the line is on the terminal now */
    bool due;       /* a tick came: draw once the terminal's output queues are empty */
    bool covers[2]; /* xmprun's stdout / stderr is that terminal: their output erases it */
    char text[512]; /* what it shows, or showed last */
};

/* What the line says; filled by the supervisor on each tick. -1: unknown or no limit. */
struct xmp_status_info {
    int64_t elapsed_ms;
    size_t running;
    size_t ended;
    int64_t job_memory;
    int64_t job_limit;
    int nearest_rank; /* the worker nearest its memory limit (or using most), -1: none */
    int64_t nearest_memory;
    int64_t nearest_limit;
    int gpu_rank; /* the worker using most GPU memory now (NVML), -1: none */
    int64_t gpu_memory;
    int64_t gpu_total; /* its GPU's memory */
};

/* Turns the line on when stderr is a terminal and enabled (not -q); creates the timer. */
void xmp_status_init(struct xmp_status *st, bool enabled);
/* Starts (on) or stops the 1 s ticks. */
void xmp_status_arm(struct xmp_status *st, bool on);
/* Consumes a tick and marks the line due. */
void xmp_status_tick(struct xmp_status *st);
/* The line's text for info, at most width - 1 columns (so that it never wraps). */
void xmp_status_format(const struct xmp_status_info *info, size_t width, char *buf, size_t size);
/* Draws the text if it is not already what the terminal shows. */
void xmp_status_draw(struct xmp_status *st, const struct xmp_status_info *info);
/* Erases the line (before other output reaches the terminal). */
void xmp_status_erase(struct xmp_status *st);
void xmp_status_free(struct xmp_status *st);

#endif
