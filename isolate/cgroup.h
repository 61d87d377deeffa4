/* cgroups for a job and its workers, on pure v2 (unified), hybrid (v1 controllers plus a cgroup2
 * tree for process tracking) and legacy v1. The backend is picked once from the detected mode
 * (an ops table, as crun's cgroup managers); libcgroup creates, sets, reads and deletes, and what
 * it lacks (cgroup.kill, cgroup.events, memory.events, memory.peak) is done directly. */
#ifndef XMP_CGROUP_H
#define XMP_CGROUP_H

#include "isolate/devices.h"
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

/* Who makes the job's cgroup on pure cgroup v2 (isolation.cgroup_manager). cgroupfs: xmprun
 * itself, below its own cgroup. systemd: a transient scope `<job cgroup name>.scope` with
 * Delegate=yes that systemd (the system manager for root, the user's manager for a user) makes
 * over D-Bus and moves xmprun into; the job is then made below it as with cgroupfs, and systemd
 * removes the scope once xmprun and its workers are gone. auto: cgroupfs, and systemd where
 * systemd runs and xmprun's own cgroup cannot host the job (other processes are in it, the
 * controllers are not delegated to it, or it may not be written). */
enum xmp_cgroup_manager {
    XMP_CGROUP_MANAGER_AUTO = 0,
    XMP_CGROUP_MANAGER_CGROUPFS,
    XMP_CGROUP_MANAGER_SYSTEMD,
};

/* "auto", "cgroupfs", "systemd" (the report's cgroup.manager, the spec's words). */
const char *xmp_cgroup_manager_name(enum xmp_cgroup_manager manager);

/* Plain values; -1 (or has_cpus false) means "no limit". The create calls take NULL for "no
 * limits at all". */
struct xmp_limits {
    int64_t memory;      /* bytes: memory.max / memory.limit_in_bytes */
    int64_t memory_high; /* bytes: memory.high / memory.soft_limit_in_bytes */
    /* bytes: memory.min (v2 only; v1 has no protection): start: fork's zygote and job, so that
     * shared file pages are not reclaimed from the zygote under the job's own pressure and
     * charged again to the worker that faults them back in */
    int64_t memory_min;
    int64_t swap;       /* bytes on top of memory: memory.swap.max / memsw = memory + swap */
    int64_t cpus_milli; /* cpu.max / cpu.cfs_quota_us over a 100 ms period */
    int64_t pids;       /* pids.max */
    bool has_cpus;
    cpu_set_t cpus; /* cpuset.cpus (mems are copied from the parent) */
    /* cpus come from `cpuset: auto`: where no cpuset controller is delegated (cgroup v2) the
     * cgroup gets none, and the worker is pinned by sched_setaffinity alone (a note says so) */
    bool cpus_auto;
    /* A job's: xmp_limits_uses() of each of its children, or'ed, so that the controllers they
     * need are enabled with one write, and only those (cgroup v2) */
    unsigned children;
    bool has_devices; /* filter device access: v1 devices controller, v2 BPF device program */
    struct xmp_dev_rules devices; /* what the cgroup may open (an allowlist) */
};

void xmp_limits_init(struct xmp_limits *limits); /* everything unlimited */

/* What limits ask of the cgroup layer, as a mask for a job's xmp_limits.children. */
unsigned xmp_limits_uses(const struct xmp_limits *limits);

/* Usage read back from a cgroup, for the report. -1 when the kernel does not say. */
struct xmp_cgroup_stats {
    int64_t memory_peak; /* bytes */
    int64_t oom_kills;   /* memory.events oom_kill (v2: with descendants) / memory.oom_control
                          * oom_kill (v1: this cgroup only) */
    int64_t user_usec;
    int64_t system_usec;
    int64_t pids_hits; /* pids.events max: forks refused by a pids limit (v1 and v2) */
};

struct xmp_cgroup; /* one logical cgroup, present in every hierarchy of the mode */

/* Reads the layout under /sys/fs/cgroup (statfs, as crun's libcrun_get_cgroup_mode). */
int xmp_cgroup_detect(enum xmp_cgroup_mode *mode, struct xmp_error *err);

/* libcgroup's init (it reads the mounts and zeroes its table, whose zero pages are then given
 * back), done ahead of the next xmp_cgroup_create_job, which then uses its result instead of
 * doing it again: a caller may run it on another thread while it does other work, as long as
 * no other cgroup call runs meanwhile. */
void xmp_cgroup_prepare(void);

/* Creates the job cgroup `name` below xmprun's own cgroup in each hierarchy, with the job-level
 * limits, and enables the controllers its children need (v2: +memory +cpu +pids, and +cpuset
 * where delegated, in xmprun's own and the job's cgroup.subtree_control). On v2, if xmprun's own
 * cgroup holds processes, xmprun first moves itself into the leaf `<own>/xmprun-self-<pid>` so
 * that the "no internal processes" rule holds (xmp_cgroup_leave_self_leaf undoes that at exit;
 * `xmprun gc` removes a leaf whose xmprun died), and later jobs are still created in <own>, not
 * in the leaf. Fails with a message that says why (read-only cgroupfs, no delegation,
 * not root, missing controllers, named) and how to fix it; errnum keeps the errno. manager
 * (see enum xmp_cgroup_manager) may first move xmprun into a systemd scope, which then is its
 * own cgroup (cgroup_systemd.c). */
int xmp_cgroup_create_job(enum xmp_cgroup_mode mode, enum xmp_cgroup_manager manager,
                          const char *name, const struct xmp_limits *limits,
                          struct xmp_cgroup **out, struct xmp_error *err);

/* True when the job's cgroups are the ones Slurm's spank_xmprun plugin prepared for this task
 * (a regular user in a Slurm step, where xmprun may not write its own cgroup): the job is the
 * directory `xmprun` below xmprun's own cgroup, its workers are `xmprun/worker-<local rank>`,
 * and none of them is made or removed by xmprun. create_job looks for them where it may not
 * make its own; so does xmp_cgroup_check_writable, for `xmprun plan`. */
bool xmp_cgroup_from_slurm(const struct xmp_cgroup *cg);

/* The systemd scope the job was made in ("xmprun-a-1-ab12cd.scope"), or NULL (cgroupfs). */
const char *xmp_cgroup_scope(const struct xmp_cgroup *cg);

/* Creates a child (worker-<rank>, zygote) with its limits. The job keeps track of its children:
 * destroying the job destroys (and frees) the children not yet destroyed. */
int xmp_cgroup_create_child(struct xmp_cgroup *parent, const char *name,
                            const struct xmp_limits *limits, struct xmp_cgroup **out,
                            struct xmp_error *err);

/* An O_DIRECTORY fd of the cgroup2 directory (unified or the hybrid tracking tree), for
 * clone3(CLONE_INTO_CGROUP); -1 in legacy mode. Owned by the cgroup. */
int xmp_cgroup_dirfd(const struct xmp_cgroup *cg);

/* Moves pid into the cgroup in every hierarchy that clone3 did not already place it in
 * (all of them when into_unified is false), with all its threads. Used by the child on itself
 * (pid 0) before exec, which must be single-threaded then (it joins v1 hierarchies through
 * `tasks`, which moves the calling thread: see join_self_v1): it allocates nothing and calls
 * only open/write/close on paths computed at create time (and xmp_error_set on failure). */
int xmp_cgroup_attach(const struct xmp_cgroup *cg, pid_t pid, bool into_unified,
                      struct xmp_error *err);

/* Opens (O_WRONLY | O_CLOEXEC) the `tasks` file of every v1 hierarchy that xmp_cgroup_attach
 * would move a process into, for a child forked elsewhere (a start: fork worker) to join them
 * itself with xmp_cgroup_join_tasks. Returns how many were opened (0 on pure cgroup v2), or -1
 * with err set and none left open. */
int xmp_cgroup_open_tasks(const struct xmp_cgroup *cg, int *fds, size_t max, struct xmp_error *err);

/* In a single-threaded child: joins the cgroup of each `tasks` fd by writing "0" to it (see
 * xmp_cgroup_attach for why through `tasks`). */
int xmp_cgroup_join_tasks(const int *fds, size_t n, struct xmp_error *err);

/* Kills every process in the cgroup: cgroup.kill where the kernel has it, else SIGKILL to every
 * listed task in rounds (never the freezer: a cgroup left frozen by an xmprun that died at the
 * wrong moment keeps its tasks for good). Returns once the signal is sent, not once the tasks
 * are gone. */
int xmp_cgroup_kill(struct xmp_cgroup *cg, struct xmp_error *err);

/* Sends sig to every process listed in the cgroup (except xmprun itself): the cgroup2
 * directory where there is one, else the v1 memory hierarchy, which every cgroup of the job has
 * a directory in. For a graceful SIGTERM; xmp_cgroup_kill is the sure SIGKILL. */
int xmp_cgroup_signal(struct xmp_cgroup *cg, int sig, struct xmp_error *err);

/* Calls fn for every process in cg (its cgroup.procs; false from fn stops the walk). */
int xmp_cgroup_each_pid(struct xmp_cgroup *cg, bool (*fn)(pid_t pid, void *data), void *data,
                        struct xmp_error *err);

/* Opens the files that the stats read and the signal sweep of cg read, and keeps them open until
 * the cgroup is released or destroyed, so that each of those reads is a single pread: for the
 * supervisor's idle time while the job runs, which the end of the job then does not spend on
 * opens and closes. Best effort (a file that cannot be opened is opened again when read); up to
 * XMP_CGROUP_HELD fds per cgroup (peak, OOM count, pids hits, two CPU time files, cgroup.procs). */
#define XMP_CGROUP_HELD 6
void xmp_cgroup_hold(struct xmp_cgroup *cg);

/* True when no process is left in the cgroup (cgroup.events populated 0, or empty cgroup.procs). */
bool xmp_cgroup_is_empty(const struct xmp_cgroup *cg);

int xmp_cgroup_read_stats(struct xmp_cgroup *cg, struct xmp_cgroup_stats *st,
                          struct xmp_error *err);

/* OOM attribution: which cgroup's memory limit fired. The chain of a cgroup is the cgroup, its
 * parents up to the job (a worker, the zygote it may sit below, the job) and then the cgroups
 * above the job that xmprun did not create (its own and their ancestors, as far as this mount
 * namespace shows them): a container's, a Slurm step's, a systemd unit's. A snapshot keeps a
 * count per level that grows when that level's limit is hit: v2 memory.events.local "oom"
 * (memory.events "oom", counted up the tree, before 5.2); v1 memory.failcnt and
 * memory.memsw.failcnt, plus one for each high watermark that reached its limit. The limit
 * that fired is the innermost level whose count grew. On v1 the job, the zygote and the
 * enclosing cgroups are also watched for OOM notifications (memory.oom_control through
 * cgroup.event_control), which are exact: the outermost watched level notified since the
 * snapshot wins over the counts, which page-cache reclaim at a limit also makes grow. */
#define XMP_CGROUP_MAX_LEVELS 24
struct xmp_cgroup_oom_snap {
    size_t n;
    int64_t count[XMP_CGROUP_MAX_LEVELS]; /* -1 where the kernel has no counter */
    int64_t notes[XMP_CGROUP_MAX_LEVELS]; /* v1 OOM notifications so far; -1: not watched */
};

struct xmp_cgroup_oom_site {
    const struct xmp_cgroup *cg; /* the cgroup of xmprun's that fired, or NULL */
    bool enclosing;              /* a cgroup above the job fired */
    int64_t limit;               /* its memory limit in bytes, -1 when unknown */
    char path[512];              /* enclosing: its path as /proc/self/cgroup shows it */
};

/* Taken before anything runs in cg, which must be new: its own counters are then 0, and only
 * the levels above it are read. */
void xmp_cgroup_oom_snapshot(const struct xmp_cgroup *cg, struct xmp_cgroup_oom_snap *snap);

/* Compares the chain with `since` (taken by xmp_cgroup_oom_snapshot on the same cgroup): false
 * when no level with a limit shows a hit. */
bool xmp_cgroup_oom_site(const struct xmp_cgroup *cg, const struct xmp_cgroup_oom_snap *since,
                         struct xmp_cgroup_oom_site *site);

/* The smallest memory limit above the job (the enclosing levels of the chain, see above; on
 * v1 only those that count the job's memory, memory.use_hierarchy), with that cgroup's path as
 * /proc/self/cgroup shows it. False when none has a limit. */
bool xmp_cgroup_enclosing_limit(const struct xmp_cgroup *job, int64_t *limit, char *path,
                                size_t size);

/* xmprun's own cgroup, observed and never written: where no job cgroup can be made (a read-only
 * cgroupfs, a user without delegation), the OOM attribution and the enclosing limit above work
 * on it as on a job's, with the enclosing levels alone in its chain. Released with
 * xmp_cgroup_abandon, never destroyed (it is not xmprun's to remove). */
int xmp_cgroup_observe(enum xmp_cgroup_mode mode, struct xmp_cgroup **out, struct xmp_error *err);

/* Whether the job's cgroups could be made below the observed cgroup (xmprun may write it in
 * every hierarchy), without making any: -1 with the reason create_job would give (EROFS for a
 * read-only cgroupfs, EACCES/EPERM without the right). For `xmprun plan`. */
int xmp_cgroup_check_writable(const struct xmp_cgroup *observed, struct xmp_error *err);

/* The job cgroup's path in each hierarchy it has a directory in, as /proc/self/cgroup shows it
 * (so that an admin finds it from the host): hier is the hierarchy's controllers as
 * /proc/self/cgroup lists them ("memory", "cpu,cpuacct"), or "unified" for cgroup2. Returns
 * how many were filled (at most max). */
struct xmp_cgroup_hier_path {
    char hier[32];
    char path[512];
};
size_t xmp_cgroup_paths(const struct xmp_cgroup *cg, struct xmp_cgroup_hier_path *out, size_t max);

/* A word for what an enclosing cgroup path belongs to, from its name: "container" (libpod,
 * docker, containerd, cri-o, kubepods), "Slurm step", "Slurm job", "systemd unit" (.service,
 * .scope, .slice), "cgroup namespace root" for "/" (a container with a cgroup namespace),
 * else "cgroup". */
const char *xmp_cgroup_owner_kind(const char *path);

/* The cgroup's path relative to the hierarchy root (the unified one when there is one), for the
 * report and messages. */
const char *xmp_cgroup_path(const struct xmp_cgroup *cg);

/* What the cgroup layer left out for cg, a sentence or "": for a worker the device nodes an
 * enclosing v1 devices cgroup does not allow, which its device filter left out; for a job the
 * controllers its own cgroup was not delegated and that it could do without (cgroup v2: memory
 * accounting without a memory limit, a `cpuset: auto` pinned by affinity alone). */
const char *xmp_cgroup_note(const struct xmp_cgroup *cg);

/* The memory the cgroup uses now (v2 memory.current, v1 memory.usage_in_bytes), or -1 when it
 * has no memory controller or the read fails. One small read: the live status line calls it
 * every second per worker. */
int64_t xmp_cgroup_memory_current(const struct xmp_cgroup *cg);

/* Hands a child cgroup whose processes are gone to the job's remover, a helper thread that
 * removes its directories (one rmdir per hierarchy, no wait, no kill) while the caller goes on;
 * the caller must not use cg again. It is freed at the job's next settle (xmp_cgroup_destroy of
 * any cgroup of the job, or xmp_cgroup_create_child), which waits for the remover and
 * destroys, as xmp_cgroup_destroy does, a cgroup that still held something. The job, and a
 * cgroup with children, are left to xmp_cgroup_destroy. */
void xmp_cgroup_release(struct xmp_cgroup *cg);
/* Kills what is left, waits (bounded, 5 s) until empty, removes the directories in every
 * hierarchy, children first, and frees cg (even on failure; the error names what is left).
 * Settles the job's released cgroups first. Safe on NULL; not on a released cgroup. */
int xmp_cgroup_destroy(struct xmp_cgroup *cg, struct xmp_error *err);

/* Frees cg and its children without touching their directories or processes: what a process
 * that SIGKILL cannot end holds stays for gc. Settles the job's released cgroups first. Safe on
 * NULL; not on a released cgroup. */
void xmp_cgroup_abandon(struct xmp_cgroup *cg);

/* Finds the directories named "xmprun-*" below xmprun's own cgroup in every hierarchy (jobs, and
 * the xmprun-self-<pid> leaves) for which is_orphan(name, data) is true, kills their processes,
 * waits (bounded) and removes them. Never takes xmprun-self-<getpid()>. Returns the number of
 * names removed, or -1 (err names the first that could not be removed). */
int xmp_cgroup_gc(enum xmp_cgroup_mode mode, bool (*is_orphan)(const char *name, void *data),
                  void *data, struct xmp_error *err);

/* The job cgroup's directory in every hierarchy of its layout (absolute paths, owned by cg),
 * for the state file, so that gc finds them wherever this xmprun ran. Returns how many. */
size_t xmp_cgroup_dirs(const struct xmp_cgroup *cg, const char **dirs, size_t max);

/* gc of one orphaned job known by its directories (from its state file, in any cgroup):
 * thaws them, SIGKILLs every process in them by membership (setsid grandchildren included;
 * never the caller), waits (bounded, 5 s) until they are empty and removes them, deepest
 * first. Refuses paths that are not "xmprun-" directories on a cgroup filesystem, and one that
 * holds the caller. Returns 1 when it removed something, 0 when nothing was there, -1. */
int xmp_cgroup_gc_dirs(const char *const *dirs, size_t n, struct xmp_error *err);

/* At exit, on cgroup v2: if this process is in an xmprun-self-<pid> leaf (its own, or a dead
 * xmprun's) with no other cgroup beside it, empties the parent's subtree_control again, moves
 * back into the parent and removes the leaf, so that a run leaves the cgroup as it found it.
 * With other cgroups beside it (a concurrent job), the leaf stays for a later gc. In a systemd
 * scope of xmprun's it does nothing: systemd removes the scope, leaf and all, once it is empty. */
int xmp_cgroup_leave_self_leaf(struct xmp_error *err);

/* The directory of the xmprun-self leaf this process is in (its own, or a dead xmprun's), for
 * the state file. Returns 1 with leaf filled, 0 when it is in none. */
int xmp_cgroup_self_leaf(char *leaf, size_t size);

/* gc of a dead xmprun's leaf (from its state file): removes it if it is empty and, when its
 * parent is then left with no child and no process, empties the parent's subtree_control
 * again, so that processes can join it. Returns 1 when removed, 0 when absent or in use. */
int xmp_cgroup_gc_leaf(const char *leaf, struct xmp_error *err);

/* Pure helpers, exposed for the unit tests (they work on in-memory text). */

/* From /proc/<pid>/cgroup text ("4:memory:/a/b", "2:cpu,cpuacct:/", "9:name=systemd:/", "0::/"):
 * the path of the hierarchy whose controller list holds `controller` ("memory", "name=systemd"),
 * or of the cgroup2 line ("0::...") when controller is "". hier_id (may be NULL) gets the
 * hierarchy number. -1 with ENOENT when no line matches, EINVAL on a malformed line. */
int xmp_cgroup_parse_proc(const char *text, const char *controller, char *path, size_t size,
                          int *hier_id, struct xmp_error *err);

/* From /proc/<pid>/mountinfo text: mount point and mount root (both \ooo-unescaped) of the first
 * cgroup2 mount (controller NULL) or of the first v1 "cgroup" mount whose super options list
 * `controller`. -1 with ENOENT when there is none. */
int xmp_cgroup_parse_mountinfo(const char *text, const char *controller, char *mnt, size_t mnt_size,
                               char *root, size_t root_size, struct xmp_error *err);

/* The directory of cgroup `path` (from /proc/self/cgroup) in a hierarchy mounted at `mnt` with
 * mount root `root`: mnt + path minus root. A container's bind mount shows a subtree (root
 * "/docker/x"), a cgroup namespace shows "/" for both. -1 with ENOENT if path is not below root. */
int xmp_cgroup_join(const char *mnt, const char *root, const char *path, char *buf, size_t size,
                    struct xmp_error *err);

/* Where this process is in the hierarchy of controller ("memory", "pids"; "" for the cgroup2
 * tree), from /proc/self/cgroup: its path there and, when dir is not NULL, its directory (the
 * mount table read then). -1 when it is in no such hierarchy, or it is not mounted. */
int xmp_cgroup_self(const char *controller, char *path, size_t size, char *dir, size_t dir_size);

/* Strips a last component "xmprun-self-<pid>" (the leaf xmprun may move itself into on cgroup
 * v2), so that xmprun's own cgroup stays the one it was started in. */
void xmp_cgroup_own_normalize(char *path);

/* True when name is a leaf "xmprun-self-<pid>" (see xmp_cgroup_create_job), with its pid, so
 * that gc's is_orphan can tell whether that xmprun still runs. */
bool xmp_cgroup_self_leaf_pid(const char *name, pid_t *pid);

/* CFS quota in microseconds per 100 ms period for cpus_milli (at least 1000, the kernel's
 * minimum); -1 when cpus_milli < 0 (unlimited). */
int64_t xmp_cgroup_cfs_quota(int64_t cpus_milli);
/* cpu.max text: "max 100000" or "<quota> 100000". Returns 0, -1 if buf is too small. */
int xmp_cgroup_format_cpu_max(int64_t cpus_milli, char *buf, size_t size);
/* memory.memsw.limit_in_bytes for a memory limit and swap on top: -1 (unlimited) when either
 * is unlimited or the sum overflows. */
int64_t xmp_cgroup_memsw(int64_t memory, int64_t swap);
/* Linux list format ("0-3,8,10-11") <-> cpu_set_t. Parse returns -1 on a malformed list;
 * format gives "" for an empty set, and returns -1 when buf is too small (what it holds then
 * ends at the last whole range). */
int xmp_cpulist_parse(const char *text, cpu_set_t *out, struct xmp_error *err);
int xmp_cpulist_format(const cpu_set_t *set, char *buf, size_t size);
/* cpuacct.stat ticks (USER_HZ) to microseconds. */
int64_t xmp_cgroup_ticks_to_usec(int64_t ticks, long hz);

#endif
