/* Starting one worker: clone3 straight into its cgroup (or fork and attach), the child's setup
 * (signals, process group, death signal, workdir, affinity, no_new_privs, stdio) and execve,
 * with a CLOEXEC pipe that tells the parent whether exec worked. */
#ifndef XMP_SPAWN_H
#define XMP_SPAWN_H

#include "isolate/cgroup.h"
#include "isolate/error.h"

#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/types.h>

struct xmp_spawn_args {
    const char *path; /* what execve gets: argv[0] resolved against PATH, or as given */
    char *const *argv;
    char *const *envp;
    const char *workdir;   /* NULL: stay */
    const cpu_set_t *cpus; /* NULL: inherit xmprun's affinity */
    bool no_new_privs;
    int stdin_fd;  /* -1 (or 0) inherits xmprun's */
    int stdout_fd; /* write ends; -1 inherits xmprun's */
    int stderr_fd;
    const struct xmp_cgroup *cg; /* NULL: no cgroup */
    enum xmp_cgroup_mode mode;
    const sigset_t *sigmask;               /* the mask xmprun started with, restored in the child */
    const struct rlimit *inherited_nofile; /* NULL: keep xmprun's RLIMIT_NOFILE */
};

struct xmp_spawned {
    pid_t pid;
    int pidfd;                  /* owned by the caller; -1 if none could be had */
    int status_fd;              /* read end of the exec-status pipe (non-blocking); -1 once read */
    int gate_fd;                /* write end of the start gate; -1 once opened */
    bool in_unified;            /* clone3 placed it in its cgroup2 directory */
    size_t status_got;          /* bytes of child_err read so far */
    bool exec_failed;           /* the child reported child_err and exits 127/126/125 */
    struct xmp_error child_err; /* "exec `nosuch`: No such file or directory" */
};

/* Resolves argv0 the way execvp would, against the PATH in envp (or a default), so that the
 * child needs no allocation. Returns a malloc'd path; argv0 itself when nothing matches (the
 * child's execve then reports why). */
char *xmp_spawn_resolve(const char *argv0, char *const *envp);

/* Creates the worker process and returns at once: 0 when a child exists (to reap through
 * out->pidfd or out->pid), -1 when none could be created. The child sets itself up, then waits
 * at a start gate until xmp_spawn_start() has put it into its cgroups; only then does it exec.
 * Whether the exec worked arrives later on out->status_fd: the child's struct xmp_error on
 * failure, EOF alone on success.
 *
 * Why a gate: joining a v1 hierarchy (a write to cgroup.procs) takes the kernel's cgroup
 * threadgroup lock for writing, and every fork waits for that lock. Children that joined their
 * cgroups themselves stalled the parent's next clone3 by milliseconds each; creating all
 * workers first and attaching them afterwards keeps the forks and the joins apart. */
int xmp_spawn(const struct xmp_spawn_args *args, struct xmp_spawned *out, struct xmp_error *err);

/* Puts the child into every cgroup hierarchy that clone3 did not already place it in, then opens
 * its start gate. On failure the child is killed (it never ran the command) and -1 returned; it
 * must still be reaped. */
int xmp_spawn_start(struct xmp_spawned *sp, const struct xmp_cgroup *cg, enum xmp_cgroup_mode mode,
                    struct xmp_error *err);

/* Reads the exec status from sp->status_fd. Returns 0 when it is complete (exec_failed and
 * child_err are final, status_fd is closed), 1 while the child has not exec'd or failed yet
 * (only when block is false). A caller that has seen the child exit may block: its end of the
 * pipe is closed by then, so the read ends at once. */
int xmp_spawn_read_status(struct xmp_spawned *sp, bool block);

#endif
