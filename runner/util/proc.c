/* What /proc says of a process: its parent and its start time, from /proc/PID/stat. */
#include "runner/util/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

ssize_t
xmp_proc_read(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n;

    if (fd < 0)
        return -1;
    do
        n = read(fd, buf, size - 1);
    while (n < 0 && errno == EINTR);
    int e = errno;
    close(fd);
    errno = e;
    if (n >= 0)
        buf[n] = '\0';
    return n;
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
