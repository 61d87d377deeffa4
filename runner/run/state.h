/* A running job's state file (owner pid and start time, cgroup, worker pids) and the orphan
 * collector that `xmprun gc` and every xmprun start run: jobs whose owner is gone have their
 * processes killed, their cgroups removed and their state files deleted. */
#ifndef XMP_STATE_H
#define XMP_STATE_H

#include "isolate/cgroup.h"
#include "isolate/error.h"

#include <stddef.h>
#include <sys/types.h>

/* Where state files go: $XMPRUN_STATE_DIR; else /run/xmprun for root; else a directory the
 * user owns, $XDG_RUNTIME_DIR/xmprun or /tmp/xmprun-<uid> (made 0700 and checked for its owner
 * before use). The result is either in environ or in buf. */
const char *xmp_state_dir(char *const *environ, char *buf, size_t size);

/* A worker the state file names: its pid and start time (xmp_proc_start_time's; 0 when the
 * caller does not know it, and it is read from /proc). */
struct xmp_state_proc {
    pid_t pid;
    unsigned long long start;
};

/* Writes (atomically, replacing) <dir>/<cgroup_name>.json for the current process: its workers,
 * the job's cgroup directories in every hierarchy (absolute paths, so that gc finds them from
 * anywhere), self_leaf (may be NULL), the cgroup v2 leaf xmprun moved itself into, and run_dir
 * (may be NULL), the job's scratch directory; gc removes them all once the owner is dead. */
int xmp_state_write(const char *dir, const char *cgroup_name, enum xmp_cgroup_mode mode,
                    const char *cgroup_path, const char *const *cgroup_dirs, size_t n_dirs,
                    const char *self_leaf, const char *run_dir, const struct xmp_state_proc *procs,
                    size_t n_procs, struct xmp_error *err);
void xmp_state_remove(const char *dir, const char *cgroup_name);

/* A running job as its state file names it (`xmprun stacks`). */
struct xmp_state_job {
    char cgroup_name[256]; /* "xmprun-<name>-<owner pid>-<hex>" */
    pid_t owner;
    pid_t pids[1024]; /* its workers, in rank order (0: a worker not started or gone) */
    size_t n_pids;
};

/* Finds the running job (its owner alive) named by job: its name, its id ("<pid>-<hex>", as the
 * report's job_id), its owner's pid or its cgroup name; with job NULL, the only running job.
 * -1 with err when none or several match (err names them). */
int xmp_state_find_job(const char *dir, const char *job, struct xmp_state_job *out,
                       struct xmp_error *err);

/* Kills and removes what orphaned jobs left: by their state files (their processes by pid and
 * start time and by cgroup membership, their directories in every hierarchy, wherever they
 * are), then "xmprun-*" cgroups below this process's own cgroup that no live xmprun owns.
 * Returns the number of jobs it really cleaned (something killed or removed), or -1 when one
 * could not be cleaned (err says which; its state file is kept for a later try). */
int xmp_state_gc(const char *dir, struct xmp_error *err);

#endif
