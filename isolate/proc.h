/* What /proc says of a process, for the stages that follow a worker's descendants. */
#ifndef XMP_PROC_H
#define XMP_PROC_H

#include <stdbool.h>
#include <sys/types.h>

/* Reads a small /proc file whole into buf (NUL-terminated); -1 with errno when it cannot be
 * read. */
ssize_t xmp_proc_read(const char *path, char *buf, size_t size);

/* The parent of pid (/proc/PID/stat: "pid (comm) S ppid ..."), or -1 when it cannot be read. */
pid_t xmp_proc_parent(pid_t pid);

/* Field 22 of /proc/<pid>/stat (clock ticks since boot) into *out, or -1 when it cannot be
 * read: with the pid, it names a process uniquely, so a recycled pid is not mistaken for it. */
int xmp_proc_start_time(pid_t pid, unsigned long long *out);

/* /proc/PID/stat's state letter (field 3) and CPU time in clock ticks: its own and that of the
 * children it reaped (fields 14-17); false when it cannot be read. */
bool xmp_proc_cpu_ticks(pid_t pid, char *state, long long *ticks);

/* The live processes below pid (the children of each of its threads, then theirs), breadth
 * first, at most max of them into out; returns how many. */
size_t xmp_proc_descendants(pid_t pid, pid_t *out, size_t max);

#endif
