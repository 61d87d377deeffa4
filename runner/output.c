/* Workers' output: line assembly, console and log-file writes, the stderr tail ring. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/output.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

void
xmp_tail_init(struct xmp_tail *t, size_t cap)
{
    t->cap = cap;
    t->count = 0;
    t->head = 0;
    t->lines = cap > 0 ? calloc(cap, sizeof(char *)) : NULL;
    if (t->lines == NULL)
        t->cap = 0;
}

void
xmp_tail_push(struct xmp_tail *t, const char *line, size_t len)
{
    char *copy;

    if (t->cap == 0)
        return;
    if (len > XMP_TAIL_LINE_MAX)
        len = XMP_TAIL_LINE_MAX;
    copy = strndup(line, len);
    if (copy == NULL)
        return;
    if (t->count == t->cap) {
        free(t->lines[t->head]);
        t->lines[t->head] = copy;
        t->head = (t->head + 1) % t->cap;
    } else {
        t->lines[(t->head + t->count) % t->cap] = copy;
        t->count++;
    }
}

char **
xmp_tail_take(struct xmp_tail *t, size_t *n)
{
    char **out = calloc(t->count + 1, sizeof(char *));

    *n = 0;
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < t->count; i++)
        out[i] = t->lines[(t->head + i) % t->cap];
    *n = t->count;
    t->count = 0;
    t->head = 0;
    return out;
}

void
xmp_tail_free(struct xmp_tail *t)
{
    for (size_t i = 0; i < t->count; i++)
        free(t->lines[(t->head + i) % t->cap]);
    free(t->lines);
    t->lines = NULL;
    t->cap = t->count = t->head = 0;
}

int
xmp_stream_init(struct xmp_stream *s, int fd, int rank, struct xmp_console *console, bool prefix,
                int log_fd, struct xmp_tail *tail)
{
    s->fd = fd;
    s->rank = rank;
    s->console = console;
    s->prefix = prefix;
    s->log_fd = log_fd;
    s->tail = tail;
    s->len = 0;
    s->buf = malloc(XMP_LINE_MAX);
    return s->buf != NULL ? 0 : -1;
}

/* Writes everything, waiting when xmprun's own stdout is a full non-blocking pipe. Gives up on
 * errors such as EPIPE: losing console output must not stop supervision. */
static void
write_iov(int fd, struct iovec *iov, int cnt)
{
    while (cnt > 0) {
        ssize_t n = writev(fd, iov, cnt);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            struct pollfd p = {fd, POLLOUT, 0};
            poll(&p, 1, 1000);
            continue;
        }
        if (n < 0)
            return;
        while (cnt > 0 && (size_t)n >= iov->iov_len) {
            n -= (ssize_t)iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (char *)iov->iov_base + n;
            iov->iov_len -= (size_t)n;
        }
    }
}

void
xmp_console_init(struct xmp_console *c, int fd, bool direct)
{
    struct stat st;

    c->fd = fd;
    c->direct = direct;
    c->buf = NULL;
    c->len = c->cap = 0;
    /* POLLOUT on a pipe or socket guarantees room for PIPE_BUF bytes; a terminal promises
     * less, so it gets small writes. */
    c->chunk =
        fstat(fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) ? PIPE_BUF : 256;
}

static void
console_drop(struct xmp_console *c)
{
    c->fd = -1;
    c->len = 0;
}

size_t
xmp_console_flush(struct xmp_console *c)
{
    size_t off = 0;

    while (c->fd >= 0 && off < c->len) {
        struct pollfd p = {c->fd, POLLOUT, 0};
        size_t n = c->len - off < c->chunk ? c->len - off : c->chunk;
        ssize_t w;

        if (poll(&p, 1, 0) <= 0 || !(p.revents & POLLOUT)) {
            if (p.revents & (POLLERR | POLLHUP | POLLNVAL))
                console_drop(c);
            break;
        }
        w = write(c->fd, c->buf + off, n);
        if (w < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (w < 0) {
            console_drop(c); /* EPIPE and the like: nobody reads; keep supervising */
            break;
        }
        off += (size_t)w;
    }
    if (c->fd >= 0 && off > 0) {
        memmove(c->buf, c->buf + off, c->len - off);
        c->len -= off;
    }
    return c->len;
}

void
xmp_console_drain(struct xmp_console *c)
{
    if (c->fd >= 0 && c->len > 0) {
        struct iovec iov = {c->buf, c->len};
        write_iov(c->fd, &iov, 1);
    }
    c->len = 0;
}

void
xmp_console_free(struct xmp_console *c)
{
    free(c->buf);
    c->buf = NULL;
    c->len = c->cap = 0;
}

static void
console_write(struct xmp_console *c, struct iovec *iov, int n)
{
    size_t need = 0;

    if (c->fd < 0)
        return;
    if (c->direct) {
        write_iov(c->fd, iov, n);
        return;
    }
    for (int i = 0; i < n; i++)
        need += iov[i].iov_len;
    if (c->len + need > c->cap) {
        size_t cap = c->cap > 0 ? c->cap : 64 * 1024;
        while (cap < c->len + need)
            cap *= 2;
        char *grown = realloc(c->buf, cap);
        if (grown == NULL) {
            /* No memory for the queue: fall back to writing synchronously. */
            xmp_console_drain(c);
            write_iov(c->fd, iov, n);
            return;
        }
        c->buf = grown;
        c->cap = cap;
    }
    for (int i = 0; i < n; i++) {
        memcpy(c->buf + c->len, iov[i].iov_base, iov[i].iov_len);
        c->len += iov[i].iov_len;
    }
}

static void
emit_line(struct xmp_stream *s, const char *line, size_t len)
{
    char prefix[32];
    struct iovec iov[3];
    int n = 0;

    if (s->console != NULL) {
        if (s->prefix) {
            iov[n].iov_base = prefix;
            iov[n++].iov_len = (size_t)snprintf(prefix, sizeof(prefix), "[%d] ", s->rank);
        }
        iov[n].iov_base = (void *)line;
        iov[n++].iov_len = len;
        iov[n].iov_base = "\n";
        iov[n++].iov_len = 1;
        console_write(s->console, iov, n);
    }
    if (s->tail != NULL)
        xmp_tail_push(s->tail, line, len);
}

/* Emits every complete line in the buffer (and a full buffer as one line), keeping the rest. */
static void
split_lines(struct xmp_stream *s, bool flush)
{
    size_t start = 0;

    for (size_t i = 0; i < s->len; i++) {
        if (s->buf[i] == '\n') {
            emit_line(s, s->buf + start, i - start);
            start = i + 1;
        }
    }
    if (start < s->len && (flush || (start == 0 && s->len == XMP_LINE_MAX))) {
        emit_line(s, s->buf + start, s->len - start);
        start = s->len;
    }
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
}

int
xmp_stream_read(struct xmp_stream *s, size_t budget)
{
    if (s->buf == NULL)
        return 1; /* no line buffer (allocation failed): treat as closed */
    while (s->fd >= 0 && budget > 0) {
        size_t room = XMP_LINE_MAX - s->len;
        ssize_t n = read(s->fd, s->buf + s->len, room < budget ? room : budget);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n <= 0)
            return 1;
        if (s->log_fd >= 0) {
            struct iovec iov = {s->buf + s->len, (size_t)n};
            write_iov(s->log_fd, &iov, 1);
        }
        s->len += (size_t)n;
        budget -= (size_t)n;
        split_lines(s, false);
    }
    return 0;
}

void
xmp_stream_close(struct xmp_stream *s)
{
    if (s->buf != NULL && s->len > 0)
        split_lines(s, true);
    free(s->buf);
    s->buf = NULL;
    s->len = 0;
    if (s->fd >= 0)
        close(s->fd);
    if (s->log_fd >= 0)
        close(s->log_fd);
    s->fd = s->log_fd = -1;
}
