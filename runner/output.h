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

struct xmp_stream {
    int fd; /* read end of the pipe, non-blocking; -1 once closed */
    int rank;
    int console_fd;        /* 1 or 2, or -1 for none */
    bool prefix;           /* "[rank] " before each console line */
    int log_fd;            /* -1 for none */
    struct xmp_tail *tail; /* NULL: not kept */
    char *buf;             /* the partial line, XMP_LINE_MAX bytes */
    size_t len;
};

void xmp_tail_init(struct xmp_tail *t, size_t cap);
void xmp_tail_push(struct xmp_tail *t, const char *line, size_t len);
/* Moves the lines out, oldest first; the ring is empty afterwards. */
char **xmp_tail_take(struct xmp_tail *t, size_t *n);
void xmp_tail_free(struct xmp_tail *t);

int xmp_stream_init(struct xmp_stream *s, int fd, int rank, int console_fd, bool prefix, int log_fd,
                    struct xmp_tail *tail);
/* Reads at most budget bytes (so one flooding worker cannot starve the others). Returns 1 at
 * EOF or on a read error (the caller closes the stream), 0 otherwise. */
int xmp_stream_read(struct xmp_stream *s, size_t budget);
/* Emits a partial last line, closes the pipe and the log file, frees the buffer. */
void xmp_stream_close(struct xmp_stream *s);

#endif
