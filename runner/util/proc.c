#include "runner/util/proc.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

pid_t
xmp_proc_parent(pid_t pid)
{
    char path[64], buf[1024];
    ssize_t n = -1;
    int fd, ppid = -1;
    char *p;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
    }
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    /* The comm may hold spaces and parentheses: the state follows the last ')'. */
    p = strrchr(buf, ')');
    if (p == NULL || sscanf(p + 1, " %*c %d", &ppid) != 1)
        return -1;
    return (pid_t)ppid;
}
