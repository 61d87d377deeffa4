/* A slow disk for tests, preloaded into xmprun (LD_PRELOAD): every fsync waits
 * SLOW_FSYNC_MS milliseconds (default 1000) before the real one, as on a busy network or
 * spinning disk. A test sees with it that xmprun waits for its durable writes before it exits;
 * on a fast disk they are over before anyone could look. With SLOW_FSYNC_LOG set, each call
 * appends a line to that file, so that the test knows the library was in effect. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int
fsync(int fd)
{
    static int (*real)(int);
    const char *ms_text = getenv("SLOW_FSYNC_MS");
    long ms = ms_text != NULL ? strtol(ms_text, NULL, 10) : 1000;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    const char *log = getenv("SLOW_FSYNC_LOG");

    if (log != NULL) {
        int lfd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (lfd >= 0) {
            (void)!write(lfd, "fsync\n", 6);
            close(lfd);
        }
    }
    if (real == NULL)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    while (nanosleep(&ts, &ts) < 0)
        ;
    return real(fd);
}
