/* Workers' stdout/stderr: non-blocking pipe reads assembled into lines, written to xmprun's
 * console ("[rank] line", raw, rank 0 only, none) and to per-rank log files, with the last lines
 * of stderr kept in a ring for the report. Memory per stream is bounded whatever a worker prints.
 */
#ifndef XMP_OUTPUT_H
#define XMP_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>

#define XMP_LINE_MAX      (64 * 1024) /* longer lines are split */
#define XMP_TAIL_LINE_MAX 4096        /* a tail line longer than this is cut */

struct xmp_tail {
    char **lines; /* ring of cap entries */
    size_t cap;
    size_t count;
    size_t head; /* index of the oldest line */
};

/* xmprun's stdout or stderr as the workers' console. A pipe or terminal is written only as far
 * as it accepts without blocking, the rest queued, so that a slow reader never stalls the event
 * loop (signals, deadlines); above XMP_CONSOLE_HIGH queued bytes the supervisor stops reading
 * the workers' pipes, which makes the workers wait instead. A regular file is written at once. */
#define XMP_CONSOLE_HIGH (1024 * 1024)
#define XMP_CONSOLE_LOW  (256 * 1024)

struct xmp_console {
    int fd;      /* -1 once writing failed (EPIPE...): output is dropped */
    bool direct; /* cannot be polled (regular file): written synchronously */
    char *buf;
    size_t len;
    size_t cap;
    size_t chunk; /* largest write that cannot block once poll says POLLOUT */
};

void xmp_console_init(struct xmp_console *c, int fd, bool direct);
/* Writes what the fd accepts now without blocking; returns the bytes still queued. */
size_t xmp_console_flush(struct xmp_console *c);
/* Writes everything, blocking (the end of a run). */
void xmp_console_drain(struct xmp_console *c);
void xmp_console_free(struct xmp_console *c);

struct xmp_stream {
    int fd; /* read end of the pipe, non-blocking; -1 once closed */
    int rank;
    struct xmp_console *console; /* NULL for none */
    bool prefix;                 /* "[rank] " before each console line */
    int log_fd;                  /* -1 for none */
    struct xmp_tail *tail;       /* NULL: not kept */
    char *buf;                   /* the partial line, XMP_LINE_MAX bytes */
    size_t len;
};

void xmp_tail_init(struct xmp_tail *t, size_t cap);
void xmp_tail_push(struct xmp_tail *t, const char *line, size_t len);
/* Moves the lines out, oldest first; the ring is empty afterwards. */
char **xmp_tail_take(struct xmp_tail *t, size_t *n);
void xmp_tail_free(struct xmp_tail *t);

int xmp_stream_init(struct xmp_stream *s, int fd, int rank, struct xmp_console *console,
                    bool prefix, int log_fd, struct xmp_tail *tail);
/* Reads at most budget bytes (so one flooding worker cannot starve the others). Returns 1 at
 * EOF or on a read error (the caller closes the stream), 0 otherwise. */
int xmp_stream_read(struct xmp_stream *s, size_t budget);
/* Emits a partial last line, closes the pipe and the log file, frees the buffer. */
void xmp_stream_close(struct xmp_stream *s);

#endif
