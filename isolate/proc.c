/* What /proc says of a process: its parent and its start time, from /proc/PID/stat, and the
 * processes below it. */
#include "isolate/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

ssize_t
xmp_proc_read(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    size_t len = 0;
    ssize_t n = 0;

    if (fd < 0)
        return -1;
    /* To its end or the buffer's: /proc's seq files may give a long one in several reads. */
    while (len < size - 1) {
        n = read(fd, buf + len, size - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    int e = errno;
    close(fd);
    errno = e;
    /* An error at the start is the file's answer (/proc/PID/stack refuses its read, EACCES,
     * to all but CAP_SYS_ADMIN); after some text, what was read is kept. */
    if (n < 0 && len == 0)
        return -1;
    buf[len] = '\0';
    return (ssize_t)len;
}

/* /proc/PID/stat's fields after the comm (from the state on): *rest points into buf; false
 * when it cannot be read (the process is gone). */
static bool
stat_fields(pid_t pid, char *buf, size_t size, const char **rest)
{
    char path[64];
    const char *p;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (xmp_proc_read(path, buf, size) <= 0)
        return false;
    /* The comm may hold spaces and parentheses: the state follows the last ')'. */
    p = strrchr(buf, ')');
    if (p == NULL)
        return false;
    *rest = p + 1;
    return true;
}

pid_t
xmp_proc_parent(pid_t pid)
{
    char buf[1024];
    const char *rest;
    int ppid = -1;

    if (!stat_fields(pid, buf, sizeof(buf), &rest) || sscanf(rest, " %*c %d", &ppid) != 1)
        return -1;
    return (pid_t)ppid;
}

bool
xmp_proc_cpu_ticks(pid_t pid, char *state, long long *ticks)
{
    char buf[1024];
    const char *rest;
    long long ut, st, cut, cst;

    if (!stat_fields(pid, buf, sizeof(buf), &rest) ||
        sscanf(rest, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld %lld %lld", state, &ut,
               &st, &cut, &cst) != 5)
        return false;
    *ticks = ut + st + cut + cst;
    return true;
}

int
xmp_proc_start_time(pid_t pid, unsigned long long *out)
{
    char buf[1024];
    const char *rest;

    /* Field 22 (starttime); the rest begins at field 3 (state). */
    if (!stat_fields(pid, buf, sizeof(buf), &rest) ||
        sscanf(rest,
               " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d "
               "%llu",
               out) != 1)
        return -1;
    return 0;
}

/* Appends the pids of one /proc/PID/task/TID/children file to out[*n, max). */
static void
add_children(const char *path, pid_t *out, size_t *n, size_t max)
{
    char buf[4096];

    if (xmp_proc_read(path, buf, sizeof(buf)) <= 0)
        return;
    for (char *p = buf, *end; *p != '\0' && *n < max; p = end) {
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        out[(*n)++] = (pid_t)v;
    }
}

/* Appends the children of every thread of parent (a child is listed under the thread that
 * forked it). */
static void
add_thread_children(pid_t parent, pid_t *out, size_t *n, size_t max)
{
    char path[96];
    DIR *d;
    struct dirent *e;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)parent);
    if ((d = opendir(path)) == NULL)
        return;
    while ((e = readdir(d)) != NULL && *n < max) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/%d/task/%.16s/children", (int)parent, e->d_name);
        add_children(path, out, n, max);
    }
    closedir(d);
}

size_t
xmp_proc_descendants(pid_t pid, pid_t *out, size_t max)
{
    size_t n = 0;

    /* out is the queue: each process's children go behind it. */
    add_thread_children(pid, out, &n, max);
    for (size_t i = 0; i < n && n < max; i++)
        add_thread_children(out[i], out, &n, max);
    return n;
}
