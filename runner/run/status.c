/* The live status line on a terminal stderr: its timer, text, drawing and erasing. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/run/status.h"

#include "runner/report/report.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/timerfd.h>
#include <termios.h>
#include <unistd.h>

void
xmp_status_init(struct xmp_status *st, bool enabled)
{
    memset(st, 0, sizeof(*st));
    st->fd = -1;
    st->timerfd = -1;
    if (!enabled || !isatty(STDERR_FILENO))
        return;
    st->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    if (st->timerfd < 0)
        return;
    st->fd = STDERR_FILENO;
    st->covers[1] = true;
    /* Workers' stdout goes to the same screen when xmprun's stdout is a terminal too. */
    st->covers[0] = isatty(STDOUT_FILENO);
}

void
xmp_status_arm(struct xmp_status *st, bool on)
{
    struct itimerspec its = {0};

    if (st->timerfd < 0)
        return;
    if (on) {
        its.it_value.tv_sec = 1;
        its.it_interval.tv_sec = 1;
    }
    timerfd_settime(st->timerfd, 0, &its, NULL);
}

void
xmp_status_tick(struct xmp_status *st)
{
    uint64_t n;

    if (st->timerfd >= 0 && read(st->timerfd, &n, sizeof(n)) == (ssize_t)sizeof(n))
        st->due = true;
}

/* Appends to buf at *len, keeping the text within max bytes (all of it is ASCII, so bytes are
 * columns). */
static void append(char *buf, size_t *len, size_t max, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void
append(char *buf, size_t *len, size_t max, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (*len >= max)
        return;
    va_start(ap, fmt);
    n = vsnprintf(buf + *len, max - *len + 1, fmt, ap);
    va_end(ap);
    if (n > 0)
        *len = *len + (size_t)n < max ? *len + (size_t)n : max;
}

void
xmp_status_format(const struct xmp_status_info *info, size_t width, char *buf, size_t size)
{
    size_t len = 0, max = width > 1 ? width - 1 : 0;
    char a[32], b[32], t[32];
    int64_t secs = info->elapsed_ms / 1000;

    if (max > size - 1)
        max = size - 1;
    buf[0] = '\0';
    xmp_format_duration(secs * 1000, t, sizeof(t));
    append(buf, &len, max, "xmprun: %s | %zu running, %zu ended", secs > 0 ? t : "0s",
           info->running, info->ended);
    if (info->job_memory >= 0) {
        xmp_format_bytes(info->job_memory, a, sizeof(a));
        if (info->job_limit > 0) {
            xmp_format_bytes(info->job_limit, b, sizeof(b));
            append(buf, &len, max, " | job %s of %s", a, b);
        } else {
            append(buf, &len, max, " | job %s", a);
        }
    }
    if (info->nearest_rank >= 0 && info->nearest_memory >= 0) {
        xmp_format_bytes(info->nearest_memory, a, sizeof(a));
        if (info->nearest_limit > 0) {
            xmp_format_bytes(info->nearest_limit, b, sizeof(b));
            append(buf, &len, max, " | worker %d at %d%% of %s (%s)", info->nearest_rank,
                   (int)(info->nearest_memory * 100 / info->nearest_limit), b, a);
        } else {
            append(buf, &len, max, " | worker %d uses most: %s", info->nearest_rank, a);
        }
    }
    if (info->gpu_rank >= 0 && info->gpu_memory >= 0) {
        xmp_format_bytes(info->gpu_memory, a, sizeof(a));
        if (info->gpu_total > 0) {
            xmp_format_bytes(info->gpu_total, b, sizeof(b));
            append(buf, &len, max, " | GPU: worker %d %s of %s", info->gpu_rank, a, b);
        } else {
            append(buf, &len, max, " | GPU: worker %d %s", info->gpu_rank, a);
        }
    }
}

static void
write_tty(int fd, const char *s, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, s, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return; /* a full or gone terminal: the status line is not worth waiting for */
        s += n;
        len -= (size_t)n;
    }
}

void
xmp_status_draw(struct xmp_status *st, const struct xmp_status_info *info)
{
    struct winsize ws = {0};
    char text[sizeof(st->text)], out[sizeof(st->text) + 16];
    size_t width = 80;

    if (st->fd < 0)
        return;
    if (ioctl(st->fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        width = ws.ws_col;
    xmp_status_format(info, width, text, sizeof(text));
    if (st->shown && strcmp(text, st->text) == 0)
        return;
    memcpy(st->text, text, sizeof(text));
    /* Carriage return and erase-to-end-of-line: the old line goes, the new one stays on the
     * same row, with the cursor after it, where the next output line erases it again. */
    int n = snprintf(out, sizeof(out), "\r\033[K%s", text);
    write_tty(st->fd, out, (size_t)n);
    st->shown = true;
}

void
xmp_status_erase(struct xmp_status *st)
{
    if (st->fd < 0 || !st->shown)
        return;
    write_tty(st->fd, "\r\033[K", 4);
    st->shown = false;
}

void
xmp_status_free(struct xmp_status *st)
{
    if (st->timerfd >= 0)
        close(st->timerfd);
    st->timerfd = st->fd = -1;
}
