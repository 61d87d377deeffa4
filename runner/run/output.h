/* Workers' stdout/stderr: non-blocking pipe reads assembled into lines, written to xmprun's
 * console ("[rank] line", raw, rank 0 only, none) and to per-rank log files, with the last lines
 * of stderr kept in a ring for the report. Memory per stream is bounded whatever a worker prints.
 */
#ifndef XMP_OUTPUT_H
#define XMP_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define XMP_LINE_MAX      (64 * 1024) /* longer lines are split */
#define XMP_TAIL_LINE_MAX 4096        /* a tail line longer than this is cut */

struct xmp_tail {
    char **lines; /* ring of cap entries */
    size_t cap;
    size_t count;
    size_t head; /* index of the oldest line */
};

/* A destination of the workers' lines: xmprun's stdout or stderr (one console when both are the
 * same file, so that lines from the two never splice). Lines are gathered in a buffer and written
 * in large writes, when the buffer passes XMP_CONSOLE_FLUSH or when the event loop goes idle.
 * A pipe, terminal or socket is written without blocking (through a non-blocking open of its own,
 * so that the O_NONBLOCK does not leak into the shell's file description): what it does not take
 * stays queued, so a slow reader never stalls the event loop (signals, deadlines); above
 * XMP_CONSOLE_HIGH queued bytes the supervisor stops reading the workers' pipes, which makes the
 * workers wait instead. A regular file or /dev/null (which cannot be polled) is written at once. */
#define XMP_CONSOLE_FLUSH (64 * 1024)
#define XMP_CONSOLE_HIGH  (1024 * 1024)
#define XMP_CONSOLE_LOW   (256 * 1024)
/* At the end, a reader that takes nothing for this long is given up on. */
#define XMP_CONSOLE_STALL_MS 2000

struct xmp_console {
    int fd;       /* -1 once writing failed (EPIPE...) or was given up: output is dropped */
    int own_fd;   /* our non-blocking open of the same pipe or terminal, closed at free; or -1 */
    bool direct;  /* cannot be polled (regular file): written with plain, blocking writes */
    bool socket;  /* written with send(MSG_DONTWAIT) */
    bool blocked; /* the last write met EAGAIN: wait for POLLOUT before the next */
    char *buf;
    size_t len;
    size_t cap;
    size_t chunk;    /* a blocking pipe or terminal (no own_fd): the largest write that cannot
                        block once poll says POLLOUT; 0 when writes cannot block */
    size_t dropped;  /* bytes never written: the reader went away, stalled, or a write failed */
    int write_errno; /* why writing stopped (ETIMEDOUT: a stalled reader), 0 while it goes on */
};

void xmp_console_init(struct xmp_console *c, int fd, bool direct);
/* Queues bytes as they are (xmprun's own messages), written with the next flush. */
void xmp_console_put(struct xmp_console *c, const char *data, size_t len);
/* Writes what the fd accepts now without blocking; returns the bytes still queued. */
size_t xmp_console_flush(struct xmp_console *c);
/* Writes everything, waiting for a reader as long as it keeps taking bytes; gives up on one that
 * took nothing for stall_ms (the end of a run: a stalled reader must not hold xmprun's exit). */
void xmp_console_drain(struct xmp_console *c, int stall_ms);
void xmp_console_free(struct xmp_console *c);

struct xmp_stream {
    int fd; /* read end of the pipe, non-blocking; -1 once closed */
    int rank;
    struct xmp_console *console; /* NULL for none */
    bool prefix;                 /* "[rank] " before each console line */
    char prefix_text[16];        /* that prefix, made once */
    size_t prefix_len;
    int log_fd;            /* -1 for none */
    int log_errno;         /* the error that stopped the log file, 0 for none */
    struct xmp_tail *tail; /* NULL: not kept */
    char *buf;             /* the partial line, XMP_LINE_MAX bytes */
    size_t len;
    uint64_t n_read; /* bytes read from the pipe so far */
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
