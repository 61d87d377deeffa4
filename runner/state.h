/* A running job's state file (owner pid and start time, cgroup, worker pids) and the orphan
 * collector that `xmprun gc` and every xmprun start run: jobs whose owner is gone have their
 * processes killed, their cgroups removed and their state files deleted. */
#ifndef XMP_STATE_H
#define XMP_STATE_H

#include "isolate/cgroup.h"
#include "isolate/error.h"

#include <stddef.h>
#include <sys/types.h>

/* $XMPRUN_STATE_DIR, else /run/xmprun. */
const char *xmp_state_dir(char *const *environ);

/* Field 22 of /proc/<pid>/stat (clock ticks since boot): with the pid, it names a process
 * uniquely, so a recycled pid is not mistaken for the owner. */
int xmp_proc_start_time(pid_t pid, unsigned long long *out);

/* Writes (atomically, replacing) <dir>/<cgroup_name>.json for the current process. */
/* run_dir (may be NULL) is the job's scratch directory, removed by gc with the files in it. */
int xmp_state_write(const char *dir, const char *cgroup_name, enum xmp_cgroup_mode mode,
                    const char *cgroup_path, const char *run_dir, const pid_t *pids, size_t n_pids,
                    struct xmp_error *err);
void xmp_state_remove(const char *dir, const char *cgroup_name);

/* Kills and removes what orphaned jobs left. Returns the number of jobs cleaned, or -1. */
int xmp_state_gc(const char *dir, struct xmp_error *err);

#endif
