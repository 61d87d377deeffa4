/* Workers' output: line assembly, console and log-file writes, the stderr tail ring. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/run/output.h"
#include "isolate/array.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
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
    s->prefix_len = (size_t)snprintf(s->prefix_text, sizeof(s->prefix_text), "[%d] ", rank);
    if (s->prefix_len >= sizeof(s->prefix_text))
        s->prefix_len = sizeof(s->prefix_text) - 1;
    s->log_fd = log_fd;
    s->log_errno = 0;
    s->tail = tail;
    s->len = 0;
    s->n_read = 0;
    s->buf = malloc(XMP_LINE_MAX);
    return s->buf != NULL ? 0 : -1;
}

/* Advances an iovec array past n written bytes. */
static void
iov_advance(struct iovec **iov, int *cnt, size_t n)
{
    while (*cnt > 0 && n >= (*iov)->iov_len) {
        n -= (*iov)->iov_len;
        (*iov)++;
        (*cnt)--;
    }
    if (*cnt > 0) {
        (*iov)->iov_base = (char *)(*iov)->iov_base + n;
        (*iov)->iov_len -= n;
    }
}

/* Writes everything to a file that does not block (a regular file, /dev/null). Returns the
 * bytes written, which is less than asked only when errno says why. */
static size_t
write_full(int fd, struct iovec *iov, int cnt)
{
    size_t done = 0;

    while (cnt > 0) {
        ssize_t n = writev(fd, iov, cnt > IOV_MAX ? IOV_MAX : cnt);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = ENOSPC;
            return done;
        }
        done += (size_t)n;
        iov_advance(&iov, &cnt, (size_t)n);
    }
    return done;
}

void
xmp_console_init(struct xmp_console *c, int fd, bool direct)
{
    struct stat st;
    char self[64];

    c->fd = fd;
    c->own_fd = -1;
    c->direct = direct;
    c->socket = false;
    c->blocked = false;
    c->buf = NULL;
    c->len = c->cap = 0;
    c->chunk = 0;
    c->dropped = 0;
    c->write_errno = 0;
    if (direct || fstat(fd, &st) < 0)
        return;
    if (S_ISSOCK(st.st_mode)) {
        c->socket = true;
        return;
    }
    /* A pipe or terminal: open it again, non-blocking. Setting O_NONBLOCK on the fd we were
     * given would change the file description the shell and its other children share. */
    snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
    c->own_fd = open(self, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (c->own_fd >= 0) {
        c->fd = c->own_fd;
        return;
    }
    /* No /proc: write only what poll promises room for. POLLOUT on a pipe guarantees PIPE_BUF
     * bytes; a terminal promises less, so it gets small writes. */
    c->chunk = S_ISFIFO(st.st_mode) ? PIPE_BUF : 256;
}

static void
console_drop(struct xmp_console *c, int errnum)
{
    c->dropped += c->len;
    c->len = 0;
    c->fd = -1;
    c->write_errno = errnum;
}

/* One write of what is queued, without blocking unless the console is direct. Returns the bytes
 * written, 0 when the fd takes no more now (c->blocked) or writing failed (c->fd is then -1). */
static size_t
console_write_some(struct xmp_console *c, const char *data, size_t len)
{
    for (;;) {
        ssize_t n;

        if (c->direct) {
            struct iovec iov = {(void *)data, len};
            size_t done = write_full(c->fd, &iov, 1);
            if (done < len)
                console_drop(c, errno);
            return done;
        }
        if (c->chunk > 0) {
            struct pollfd p = {c->fd, POLLOUT, 0};
            if (poll(&p, 1, 0) <= 0 || !(p.revents & POLLOUT)) {
                if (p.revents & (POLLERR | POLLHUP | POLLNVAL))
                    console_drop(c, EPIPE);
                else
                    c->blocked = true;
                return 0;
            }
            n = write(c->fd, data, len < c->chunk ? len : c->chunk);
        } else if (c->socket) {
            n = send(c->fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        } else {
            n = write(c->fd, data, len);
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            c->blocked = true;
            return 0;
        }
        if (n <= 0) {
            /* EPIPE and the like: nobody reads; keep supervising. */
            console_drop(c, n < 0 ? errno : EPIPE);
            return 0;
        }
        return (size_t)n;
    }
}

size_t
xmp_console_flush(struct xmp_console *c)
{
    size_t off = 0;

    c->blocked = false;
    while (c->fd >= 0 && off < c->len) {
        size_t n = console_write_some(c, c->buf + off, c->len - off);
        if (n == 0)
            break;
        off += n;
    }
    if (c->fd >= 0 && off > 0) {
        memmove(c->buf, c->buf + off, c->len - off);
        c->len -= off;
    }
    return c->len;
}

static int64_t
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void
xmp_console_drain(struct xmp_console *c, int stall_ms)
{
    int64_t give_up = now_ms() + stall_ms;

    while (c->fd >= 0 && c->len > 0) {
        size_t before = c->len;
        struct pollfd p = {c->fd, POLLOUT, 0};
        int64_t wait;

        if (xmp_console_flush(c) == 0 || c->fd < 0)
            break;
        if (c->len < before)
            give_up = now_ms() + stall_ms; /* the reader is slow, not stalled */
        wait = give_up - now_ms();
        if (wait <= 0) {
            console_drop(c, ETIMEDOUT);
            break;
        }
        if (poll(&p, 1, (int)wait) < 0 && errno != EINTR) {
            console_drop(c, errno);
            break;
        }
    }
}

void
xmp_console_free(struct xmp_console *c)
{
    free(c->buf);
    c->buf = NULL;
    c->len = c->cap = 0;
    if (c->own_fd >= 0)
        close(c->own_fd);
    c->own_fd = -1;
}

/* Makes room for need more bytes; false when there is no memory for them. */
static bool
console_reserve(struct xmp_console *c, size_t need)
{
    return xmp_array_reserve(c->buf, c->cap, c->len + need, 2 * XMP_CONSOLE_FLUSH);
}

/* Queues one line (with its prefix and newline) whole, and writes the queue once it passes
 * XMP_CONSOLE_FLUSH. Either the whole line is queued or none of it: a line is never cut. */
static void
console_put_line(struct xmp_console *c, const char *prefix, size_t plen, const char *line,
                 size_t len)
{
    if (c->fd < 0) {
        c->dropped += plen + len + 1;
        return;
    }
    if (!console_reserve(c, plen + len + 1)) {
        /* No memory for the queue: write what is queued, then try once more. */
        xmp_console_flush(c);
        if (c->fd < 0 || !console_reserve(c, plen + len + 1)) {
            c->dropped += plen + len + 1;
            return;
        }
    }
    memcpy(c->buf + c->len, prefix, plen);
    memcpy(c->buf + c->len + plen, line, len);
    c->buf[c->len + plen + len] = '\n';
    c->len += plen + len + 1;
}

void
xmp_console_put(struct xmp_console *c, const char *data, size_t len)
{
    if (c->fd < 0 || !console_reserve(c, len)) {
        c->dropped += len;
        return;
    }
    memcpy(c->buf + c->len, data, len);
    c->len += len;
}

static void
console_maybe_flush(struct xmp_console *c)
{
    if (c != NULL && c->len >= XMP_CONSOLE_FLUSH && !c->blocked && c->chunk == 0)
        xmp_console_flush(c);
}

static void
emit_line(struct xmp_stream *s, const char *line, size_t len)
{
    if (s->console != NULL)
        console_put_line(s->console, s->prefix_text, s->prefix ? s->prefix_len : 0, line, len);
    if (s->tail != NULL)
        xmp_tail_push(s->tail, line, len);
}

/* Emits every complete line in the buffer (and a full buffer as one line), keeping the rest. */
static void
split_lines(struct xmp_stream *s, bool flush)
{
    size_t start = 0;
    char *nl;

    while (start < s->len && (nl = memchr(s->buf + start, '\n', s->len - start)) != NULL) {
        size_t end = (size_t)(nl - s->buf);
        emit_line(s, s->buf + start, end - start);
        start = end + 1;
    }
    if (start < s->len && (flush || (start == 0 && s->len == XMP_LINE_MAX))) {
        emit_line(s, s->buf + start, s->len - start);
        start = s->len;
    }
    if (start > 0) {
        memmove(s->buf, s->buf + start, s->len - start);
        s->len -= start;
    }
    console_maybe_flush(s->console);
}

/* Appends raw bytes to the log file. On a write error (a full disk) the log stops there, with the
 * error kept for the supervisor to warn about and to note in the report. */
static void
log_write(struct xmp_stream *s, const char *data, size_t len)
{
    struct iovec iov = {(void *)data, len};
    size_t done = write_full(s->log_fd, &iov, 1);

    if (done == len)
        return;
    s->log_errno = errno != 0 ? errno : EIO;
    close(s->log_fd);
    s->log_fd = -1;
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
        if (s->log_fd >= 0)
            log_write(s, s->buf + s->len, (size_t)n);
        s->len += (size_t)n;
        s->n_read += (uint64_t)n;
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
