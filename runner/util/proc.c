/* What /proc says of a process: its parent and its start time, from /proc/PID/stat. */
#include "runner/util/proc.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* /proc/PID/stat's fields after the comm (from the state on) into buf; false when it cannot be
 * read (the process is gone). */
static bool
stat_fields(pid_t pid, char *buf, size_t size, const char **rest)
{
    char path[64];
    ssize_t n = -1;
    int fd;
    const char *p;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = read(fd, buf, size - 1);
        close(fd);
    }
    if (n <= 0)
        return false;
    buf[n] = '\0';
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
