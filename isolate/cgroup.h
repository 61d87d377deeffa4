/* cgroups for a job and its workers, on pure v2 (unified), hybrid (v1 controllers plus a cgroup2
 * tree for process tracking) and legacy v1. The backend is picked once from the detected mode
 * (an ops table, as crun's cgroup managers); libcgroup creates, sets, reads and deletes, and what
 * it lacks (cgroup.kill, cgroup.events, memory.events, memory.peak) is done directly. */
#ifndef XMP_CGROUP_H
#define XMP_CGROUP_H

#include "isolate/error.h"

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

enum xmp_cgroup_mode {
    XMP_CGROUP_MODE_NONE = 0, /* no cgroups (isolation.cgroups: off, or optional and unusable) */
    XMP_CGROUP_MODE_LEGACY,
    XMP_CGROUP_MODE_HYBRID,
    XMP_CGROUP_MODE_UNIFIED,
};

/* "none", "legacy", "hybrid", "unified" (the report's cgroup.mode). */
const char *xmp_cgroup_mode_name(enum xmp_cgroup_mode mode);

/* Plain values; -1 (or has_cpus false) means "no limit". */
struct xmp_limits {
    int64_t memory;      /* bytes: memory.max / memory.limit_in_bytes */
    int64_t memory_high; /* bytes: memory.high / memory.soft_limit_in_bytes */
    int64_t swap;        /* bytes on top of memory: memory.swap.max / memsw = memory + swap */
    int64_t cpus_milli;  /* cpu.max / cpu.cfs_quota_us over a 100 ms period */
    int64_t pids;        /* pids.max */
    bool has_cpus;
    cpu_set_t cpus;      /* cpuset.cpus (mems are copied from the parent) */
};

void xmp_limits_init(struct xmp_limits *limits); /* everything unlimited */

/* Usage read back from a cgroup, for the report. -1 when the kernel does not say. */
struct xmp_cgroup_stats {
    int64_t memory_peak;  /* bytes */
    int64_t oom_kills;    /* memory.events oom_kill / memory.oom_control oom_kill */
    int64_t user_usec;
    int64_t system_usec;
};

struct xmp_cgroup; /* one logical cgroup, present in every hierarchy of the mode */

/* Reads the layout under /sys/fs/cgroup (statfs, as crun's libcrun_get_cgroup_mode). */
int xmp_cgroup_detect(enum xmp_cgroup_mode *mode, struct xmp_error *err);

/* Creates the job cgroup `name` below xmprun's own cgroup in each hierarchy, with the job-level
 * limits, and enables the controllers its children need. On v2, if xmprun's own cgroup holds
 * processes, xmprun first moves itself into a leaf so the "no internal processes" rule holds.
 * Fails with a message that says why (read-only cgroupfs, no delegation, not root) and how to fix. */
int xmp_cgroup_create_job(enum xmp_cgroup_mode mode, const char *name,
                          const struct xmp_limits *limits, struct xmp_cgroup **out,
                          struct xmp_error *err);

/* Creates a child (worker-<rank>, zygote) with its limits. */
int xmp_cgroup_create_child(struct xmp_cgroup *parent, const char *name,
                            const struct xmp_limits *limits, struct xmp_cgroup **out,
                            struct xmp_error *err);

/* An O_DIRECTORY fd of the cgroup2 directory (unified or the hybrid tracking tree), for
 * clone3(CLONE_INTO_CGROUP); -1 in legacy mode. Owned by the cgroup. */
int xmp_cgroup_dirfd(const struct xmp_cgroup *cg);

/* Moves pid into the cgroup in every hierarchy that clone3 did not already place it in
 * (all of them when into_unified is false). Used by the child on itself (pid 0) before exec. */
int xmp_cgroup_attach(const struct xmp_cgroup *cg, pid_t pid, bool into_unified,
                      struct xmp_error *err);

/* Kills every process in the cgroup: cgroup.kill where the kernel has it, else freeze, SIGKILL
 * every task, thaw. Returns once the signal is sent, not once the tasks are gone. */
int xmp_cgroup_kill(struct xmp_cgroup *cg, struct xmp_error *err);

/* True when no process is left in the cgroup (cgroup.events populated 0, or empty cgroup.procs). */
bool xmp_cgroup_is_empty(const struct xmp_cgroup *cg);

int xmp_cgroup_read_stats(const struct xmp_cgroup *cg, struct xmp_cgroup_stats *st,
                          struct xmp_error *err);

/* The cgroup's path relative to the hierarchy root (the unified one when there is one), for the
 * report and messages. */
const char *xmp_cgroup_path(const struct xmp_cgroup *cg);

/* Kills what is left, waits (bounded) until empty, removes the directories in every hierarchy,
 * children first, and frees cg. Safe on NULL. */
int xmp_cgroup_destroy(struct xmp_cgroup *cg, struct xmp_error *err);

/* Finds job cgroups named "xmprun-*" below xmprun's own cgroup whose owner pid (recorded by the
 * caller in the name) is dead, kills their processes and removes them. is_orphan decides from
 * the directory name. Returns the number removed, or -1. */
int xmp_cgroup_gc(enum xmp_cgroup_mode mode, bool (*is_orphan)(const char *name, void *data),
                  void *data, struct xmp_error *err);

#endif
