/* Starting one worker: clone3 straight into its cgroup, sharing xmprun's memory until it execs
 * (posix_spawn's way), the child's setup (signals, process group, death signal, v1 cgroups,
 * workdir, affinity, stdio, then xmp_confine_apply) and execve. */
#ifndef XMP_SPAWN_H
#define XMP_SPAWN_H

#include "isolate/cgroup.h"
#include "isolate/confine.h"
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
    const char *workdir;               /* NULL: stay */
    const cpu_set_t *cpus;             /* NULL: inherit xmprun's affinity */
    const struct xmp_confine *confine; /* applied last before execve; NULL: none */
    int stdin_fd;                      /* -1 (or 0) inherits xmprun's */
    int stdout_fd;                     /* write ends; -1 inherits xmprun's */
    int stderr_fd;
    const struct xmp_cgroup *cg; /* NULL: no cgroup */
    const sigset_t *sigmask;     /* the mask xmprun started with, restored in the child; NULL (a
                                  * forked worker): signals are left as the zygote had them */
    const struct rlimit *inherited_nofile; /* NULL: keep xmprun's RLIMIT_NOFILE */
    const int *keep_fds;                   /* passed on to the worker (the zygote's socket) */
    size_t n_keep_fds;
    bool close_fds; /* close every other fd from 3 up (no exec follows); else set CLOEXEC */
    /* A worker: its oom_score_adj goes to the maximum (any process may raise its own), so that
     * an OOM kill at an enclosing limit (a container's, a Slurm step's) takes a worker, never
     * xmprun, whose report would be lost, nor the zygote, which holds every worker's preload. */
    bool oom_first;
};

struct xmp_spawned {
    pid_t pid;
    int pidfd;                  /* owned by the caller; -1 if none could be had */
    int status_fd;              /* read end of the exec-status pipe (non-blocking); -1 once read */
    int gate_fd;                /* write end of the start gate; -1 once opened */
    bool in_unified;            /* clone3 placed it in its cgroup2 directory */
    bool joins_itself;          /* and it joins the rest itself (fork mode, v1 `tasks` fds) */
    size_t status_got;          /* bytes of child_err read so far */
    bool exec_failed;           /* the child reported child_err and exits 127/126/125 */
    struct xmp_error child_err; /* "exec `nosuch`: No such file or directory" */
    /* Its start time as field 22 of /proc/<pid>/stat gives it (clock ticks since boot), when
     * xmp_spawn could tell it without reading that file; 0 when not known. */
    unsigned long long start_ticks;
};

/* Resolves argv0 the way execvp would, against the PATH in envp (or a default), so that the
 * child needs no allocation. Returns a malloc'd path; argv0 itself when nothing matches (the
 * child's execve then reports why). */
char *xmp_spawn_resolve(const char *argv0, char *const *envp);

/* Creates the worker process: returns 0 when a child exists (to reap through out->pidfd or
 * out->pid), -1 when none could be created. The child has set itself up, joined its cgroups and
 * exec'd by then, or failed: out->exec_failed and out->child_err say so at once (the child exits
 * 127, 126 or 125), and out->status_fd and out->gate_fd are -1.
 *
 * The child joins its v1 hierarchies itself, through `tasks` (see xmp_cgroup_attach). A worker
 * forked by the zygote (fork mode) runs alongside the zygote instead: it joins its v1
 * hierarchies itself too, through the `tasks` files xmprun opened and passed with the fork
 * request (on pure v2 the zygote clones it into its cgroup), waits at a start gate, which
 * xmp_spawn_start opens once every worker exists, and reports on a status pipe
 * (xmp_spawn_read_status). */
int xmp_spawn(const struct xmp_spawn_args *args, struct xmp_spawned *out, struct xmp_error *err);

/* For a worker at a start gate (sp->gate_fd, fork mode; a no-op without one): puts it into every
 * cgroup hierarchy that neither clone3 nor the worker itself (sp->joins_itself) placed it in,
 * then opens the gate. On failure the
 * child is killed (it never ran the command) and -1 returned; it must still be reaped. */
int xmp_spawn_start(struct xmp_spawned *sp, const struct xmp_cgroup *cg, enum xmp_cgroup_mode mode,
                    struct xmp_error *err);

/* Reads the exec status from sp->status_fd (fork mode; 0 at once without one). Returns 0 when
 * it is complete (exec_failed and child_err are final, status_fd is closed), 1 while the child
 * has not exec'd or failed yet (only when block is false). A caller that has seen the child exit
 * may block: its end of the pipe is closed by then, so the read ends at once. */
int xmp_spawn_read_status(struct xmp_spawned *sp, bool block);

/* The child's side, shared by exec-mode workers (below, before execve) and forked workers
 * (the client library in the zygote, client/xmprun.c), so that both get the same isolation.
 * Neither allocates; both return -1 with err set.
 *
 * enter: signal dispositions and mask, its own process group, the death signal (parent is the
 * pid that must stay its parent: xmprun), then waits at the start gate (gatefd, -1 for none)
 * until xmprun has put it into its cgroups. */
int xmp_spawn_child_enter(const struct xmp_spawn_args *a, int gatefd, pid_t parent,
                          struct xmp_error *err);
/* setup, once in its cgroups: workdir, affinity, stdio, and the fds it keeps. Then the caller
 * applies a->confine (rlimits, user, no_new_privs, seccomp) last, just before it execs or runs
 * the user's function. */
int xmp_spawn_child_setup(const struct xmp_spawn_args *a, struct xmp_error *err);
/* Writes err to the status pipe fd and exits with code. */
void xmp_spawn_child_fail(int fd, struct xmp_error *err, int code) __attribute__((noreturn));

#endif
