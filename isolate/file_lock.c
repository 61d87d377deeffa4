/* Lock files: an exclusive flock on a file beside what a process writes, held for as long as the
 * process lives, so that a second process can tell that the path is taken. The kernel drops the
 * lock when its holder dies, however it dies: a crashed holder never blocks the next one. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "isolate/file.h"

#include "isolate/cleanup.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* The pid a holder wrote into the lock file, or 0. */
static pid_t
read_holder(int fd)
{
    char buf[32];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    long pid;

    if (n <= 0)
        return 0;
    buf[n] = '\0';
    pid = strtol(buf, NULL, 10);
    return pid > 0 ? (pid_t)pid : 0;
}

int
xmp_file_lock_take(const char *path, int *out, pid_t *holder, struct xmp_error *err)
{
    *out = -1;
    *holder = 0;
    /* A holder removes the file at its end while it still holds the lock; a lock taken on a file
     * that is no longer at path locks nothing, so the new one at path is tried. */
    for (int tries = 0; tries < 16; tries++) {
        cleanup_close int fd = -1;
        struct stat held, now;
        char pid[32];

        fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
        /* Another user's lock file (a shared directory) can still be locked, read-only. */
        if (fd < 0 && errno == EACCES)
            fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
            return xmp_error_set(err, errno, "open `%s`", path);
        if (fstat(fd, &held) < 0)
            return xmp_error_set(err, errno, "stat `%s`", path);
        if (!S_ISREG(held.st_mode))
            return xmp_error_set(err, EINVAL, "`%s` is not a regular file", path);
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
            if (errno != EWOULDBLOCK)
                return xmp_error_set(err, errno, "flock `%s`", path);
            *holder = read_holder(fd);
            return 1;
        }
        if (lstat(path, &now) < 0 || now.st_dev != held.st_dev || now.st_ino != held.st_ino)
            continue;
        /* Who holds it, for the message of the next one (a lock file opened read-only holds
         * the lock without it). */
        int len = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
        ssize_t written = ftruncate(fd, 0) == 0 ? pwrite(fd, pid, (size_t)len, 0) : -1;
        (void)written;
        *out = steal_fd(&fd);
        return 0;
    }
    return xmp_error_set(err, EAGAIN, "`%s` keeps being replaced", path);
}

void
xmp_file_lock_drop(const char *path, int fd)
{
    if (fd < 0)
        return;
    /* Removed before the lock is released: whoever opened it meanwhile finds it gone from path
     * once they hold it, and tries again (xmp_file_lock_take). */
    unlink(path);
    close(fd);
}
