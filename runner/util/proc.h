/* What /proc says of a process, for the stages that follow a worker's descendants. */
#ifndef XMP_PROC_H
#define XMP_PROC_H

#include <sys/types.h>

/* The parent of pid (/proc/PID/stat: "pid (comm) S ppid ..."), or -1 when it cannot be read. */
pid_t xmp_proc_parent(pid_t pid);

#endif
