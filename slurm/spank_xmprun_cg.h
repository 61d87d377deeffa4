/* spank_xmprun's cgroup work, apart from Slurm's API: preparing a task's worker leaves as root
 * and removing them. Every path is opened with openat and O_NOFOLLOW below a directory checked
 * to be on a cgroup filesystem; nothing comes from the task's environment. */
#ifndef XMP_SPANK_XMPRUN_CG_H
#define XMP_SPANK_XMPRUN_CG_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define XSP_MAX_HIER 8
#define XSP_PATH     512

/* One hierarchy the plugin prepared for a task: where (the mount and the task's cgroup in it),
 * and whether the base (the cgroup xmprun runs in) is the plugin's own per-task directory. */
struct xsp_hier {
    bool v2;
    char ctrls[64];       /* "memory", "cpu,cpuacct"; "" for cgroup2 */
    char mount[XSP_PATH]; /* the mount point */
    char base[XSP_PATH];  /* the base, relative to the mount ("a/b/task_0", no leading '/') */
    bool made_base;       /* the base is xmprun_task_<...>, made and entered here */
    bool made_top;        /* base/xmprun exists and is ours */
    size_t n_leaves;      /* base/xmprun/worker-0 .. worker-<n-1> made */
};

struct xsp_task {
    bool active;
    size_t n;
    struct xsp_hier h[XSP_MAX_HIER];
};

/* Prepares, for the task pid (not yet exec'd) of user uid:gid, n_leaves worker leaves below its
 * cgroup in every hierarchy xmprun uses (see spank_xmprun_cg.c). tag names a per-task
 * directory ("<job>.<step>.<task>"). On failure everything made is removed again and msg says
 * why; the task then runs without (xmprun falls back to its sampled limits). */
int xsp_prepare(struct xsp_task *t, pid_t pid, uid_t uid, gid_t gid, size_t n_leaves,
                const char *tag, char *msg, size_t msg_size);

/* Kills what still runs in the task's leaves (and, where the plugin made the base, in the base),
 * waits for it (bounded) and removes every directory xsp_prepare made. msg says what is left. */
int xsp_cleanup(struct xsp_task *t, char *msg, size_t msg_size);

/* The CPUs pid may run on (its affinity), at least 1. */
size_t xsp_task_cpus(pid_t pid);

#endif
