/* Private to isolate/cgroup*.c: the discovered layout (one entry per hierarchy xmprun uses), the
 * cgroup object and the ops table that the unified and the v1 (legacy/hybrid) backends fill. */
#ifndef XMP_CGROUP_INTERNAL_H
#define XMP_CGROUP_INTERNAL_H

#include "isolate/cgroup.h"
#include "isolate/thread.h"

#include <pthread.h>
#include <stddef.h>

#define XMP_CG_MAX_HIER 8
#define CGROUP_ROOT     "/sys/fs/cgroup"
#define XMP_CG_PATH     1024

/* The controllers xmprun uses, as bits (one v1 hierarchy may carry several). */
enum {
    XMP_CG_MEMORY = 1u << 0,
    XMP_CG_CPU = 1u << 1,
    XMP_CG_CPUACCT = 1u << 2,
    XMP_CG_CPUSET = 1u << 3,
    XMP_CG_PIDS = 1u << 4,
    XMP_CG_FREEZER = 1u << 5,
    XMP_CG_DEVICES = 1u << 6,
    /* Not a controller: a cpuset from `cpuset: auto`, which may do without one (cgroup v2) */
    XMP_CG_CPUSET_AUTO = 1u << 7,
};

struct xmp_cg_hier {
    bool v2;
    unsigned ctrls;   /* XMP_CG_* bits of this hierarchy (v1); what is enabled (v2) */
    char lc_ctrl[16]; /* the controller name libcgroup knows the hierarchy by; "" = none */
    char mount[XMP_CG_PATH];
    char root[XMP_CG_PATH]; /* the mount's root in the hierarchy (mountinfo field 4) */
    char own[XMP_CG_PATH];  /* xmprun's own cgroup, relative to the hierarchy's root ("/..") */
    char proc[XMP_CG_PATH]; /* xmprun's own cgroup as /proc/self/cgroup shows it */
    char name[64];          /* the controllers as /proc/self/cgroup lists them; "" for cgroup2 */
    /* libcgroup cannot be used for this hierarchy (its mount scan failed, or it picked a
     * mount that is not the visible one): its files are created, written and read directly. */
    bool direct;
};

/* What the kernel offers, learned once when the job is created (so that a worker costs no extra
 * reads), and the job's cpuset.mems, which its workers copy. All false for gc, which then looks
 * everywhere. */
struct xmp_cg_caps {
    bool tracking;      /* every process of a cgroup is in its cgroup2 directory (unified, or
                         * hybrid, where attach joins that one first): its cgroup.events alone
                         * says whether the cgroup is empty */
    bool v2_kill;       /* the cgroup2 tree has cgroup.kill (5.14+) */
    bool v2_cpu_stat;   /* the cgroup2 tree has cpu.stat (4.15+): CPU time without cpuacct */
    bool swap_max;      /* v2 memory.swap.max exists (swap accounting) */
    bool peak;          /* v2 memory.peak exists (5.19+) */
    bool memsw;         /* v1 memory.memsw.limit_in_bytes exists (swap accounting) */
    bool cpuacct_usage; /* v1 cpuacct.usage_user exists (4.6+; before it only cpuacct.stat) */
    bool mems_known;    /* mems holds the job's value */
    char mems[256];     /* v1 cpuset.mems of the job */
};

/* v1 OOM notifications (an eventfd registered in cgroup.event_control for memory.oom_control):
 * the kernel signals it when that memory cgroup or one above it runs out of memory, and never
 * for page-cache reclaim at a limit, which is all that failcnt sees. Watched: the job, a
 * cgroup of xmprun's with children of its own (the zygote), and the enclosing cgroups; a
 * worker's own limit is what is left when none of them fired. See cgroup_oom.c. */
#define XMP_CG_MAX_WATCH 24
struct xmp_cg_oom_watch {
    const struct xmp_cgroup *cg; /* NULL for an enclosing cgroup */
    int efd;
    int64_t count; /* notifications read so far */
    char dir[XMP_CG_PATH];
};

/* A cgroup above the job that counts its memory (see cgroup_oom.c), learned once per job. */
#define XMP_CG_MAX_ENCL 16
struct xmp_cg_encl {
    int64_t limit;       /* memory.max / memory.limit_in_bytes, -1 for none */
    int64_t memsw_limit; /* v1 memory.memsw.limit_in_bytes, -1 for none */
    char dir[XMP_CG_PATH];
};

/* The job's remover (cgroup.c): the released cgroups, whose directories a helper thread
 * removes in the order they came. */
struct xmp_cg_remover {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct xmp_thread thread;
    bool active; /* mu and cv made, the thread started if it could be */
    bool done;   /* no more will come: the thread ends once the queue is empty */
    struct xmp_cgroup **queue;
    size_t n, cap, taken; /* taken: how many the thread has started on */
};

struct xmp_cg_layout {
    enum xmp_cgroup_mode mode;
    size_t n;
    int unified; /* index of the cgroup2 hierarchy, or -1 */
    struct xmp_cg_hier h[XMP_CG_MAX_HIER];
    struct xmp_cg_caps caps;
    struct xmp_cg_oom_watch watch[XMP_CG_MAX_WATCH];
    size_t n_watch;
    char hidden[512]; /* why a v1 controller xmprun uses is missing: its mount is hidden */
    bool encl_known;
    size_t n_encl;
    struct xmp_cg_encl encl[XMP_CG_MAX_ENCL]; /* innermost (xmprun's own cgroup) first */
    struct xmp_dev_prog dev_prog; /* the job's last BPF device program, shared by its workers */
    struct xmp_cg_remover remover;
    char scope[256]; /* the systemd scope xmprun's own cgroup is (cgroup_systemd.c), or "" */
    /* The job's and the workers' directories are the ones Slurm's spank_xmprun plugin made
     * below xmprun's own cgroup (cgroup_slurm.c): used as they are, never made nor removed. */
    bool preset;
    size_t n_preset; /* its worker leaves: worker-0 .. worker-<n_preset - 1> */
};

struct xmp_cg_ops;

struct xmp_cgroup {
    const struct xmp_cg_ops *ops;
    struct xmp_cg_layout *layout; /* owned by the job, shared by its children */
    bool owns_layout;
    struct xmp_cgroup *parent; /* NULL for the job */
    struct xmp_cgroup **children;
    size_t nchildren;
    int dirfd; /* cgroup2 directory, or -1 */
    /* Bit i: the cgroup has a directory of its own in hierarchy i. It gets one only where its
     * limits, its stats or its kill need it (memory and the cgroup2 tree always); elsewhere a
     * worker's processes join the job's directory if the job has one, else that hierarchy is
     * left alone (no cgroup.procs write, which is what attach costs). */
    unsigned own;
    /* The memory limits it was created with (bytes, -1 for none), so that OOM attribution
     * reads the counters of limited cgroups only. */
    int64_t mem_limit;
    int64_t memsw_limit;
    /* Files held open (xmp_cgroup_hold) so that the reap's stats and the stop's sweep are a
     * pread each rather than an open, a read and a close: hierarchy, name (a literal) and fd. */
    struct xmp_cg_held {
        size_t hier;
        const char *file;
        int fd;
    } held[XMP_CGROUP_HELD];
    size_t n_held;
    bool holding;   /* in xmp_cgroup_hold: the reads below open and keep */
    bool released;  /* handed to the remover: nobody else touches it until the settle */
    bool gone;      /* the remover removed all its directories (read after the thread's join) */
    char note[512]; /* what was left out (see xmp_cgroup_note) */
    char rel[XMP_CG_PATH];  /* below xmprun's own cgroup: "xmprun-a-1" or ".../worker-0" */
    char path[XMP_CG_PATH]; /* for the report: relative to the (unified) hierarchy root */
    /* Precomputed per hierarchy, so that attach needs no allocation in a forked child; the
     * strings sit in one allocation of their own size (`paths`), not in 16 fixed buffers of
     * XMP_CG_PATH each: 18 KiB per worker, most of the launcher's heap. */
    char *dir[XMP_CG_MAX_HIER];
    char *procs[XMP_CG_MAX_HIER];
    char *paths;
};

struct xmp_cg_ops {
    /* Creates the directories of cg (dir[] filled) where it needs them (sets cg->own) and
     * applies limits. Removes what it created on failure. */
    int (*create)(struct xmp_cgroup *cg, const struct xmp_limits *limits, struct xmp_error *err);
    int (*kill)(struct xmp_cgroup *cg, struct xmp_error *err);
    int (*read_stats)(struct xmp_cgroup *cg, struct xmp_cgroup_stats *st, struct xmp_error *err);
};

extern const struct xmp_cg_ops xmp_cg_v1_ops;
extern const struct xmp_cg_ops xmp_cg_v2_ops;

/* Starts the v1 OOM watches a new cgroup needs (cgroup_oom.c): for the job, the job and the
 * enclosing cgroups; for a child, its parent when that is not the job. Best effort: without a
 * watch the attribution falls back to failcnt and watermarks. */
void xmp_cg_oom_watch(struct xmp_cgroup *cg);
/* Closes the watches of cg (all of them for the job, which owns the layout). */
void xmp_cg_oom_unwatch(struct xmp_cgroup *cg);

/* Gives back the pages of [addr, addr + len) that are resident and hold only zeroes: the next
 * access finds a zero page again, so what the memory reads does not change. Only for private
 * anonymous memory (bss, MAP_ANONYMOUS) that no other thread writes meanwhile; a page that is
 * not resident (never touched, or swapped out) is left alone. */
void xmp_cg_release_zero_pages(void *addr, size_t len);

/* Shared helpers (cgroup_fs.c). */
int xmp_cg_write(const char *dir, const char *file, const char *value, struct xmp_error *err);
/* Reads a small file into buf (NUL-terminated, trailing newline kept). */
int xmp_cg_read(const char *dir, const char *file, char *buf, size_t size, struct xmp_error *err);
/* The directory above dir ("/a/b" -> "/a"), into buf. */
void xmp_cg_parent_dir(const char *dir, char *buf, size_t size);
bool xmp_cg_exists(const char *dir, const char *file);
/* Calls fn with each pid a cgroup.procs file lists, until fn returns false. -1 with errno when
 * the file cannot be opened or read. No stdio: a stop of the job lists every worker's file. */
int xmp_cg_each_pid(const char *procs, bool (*fn)(pid_t pid, void *data), void *data);
/* The same through an open cgroup.procs: from where it is, or with held from its start. */
int xmp_cg_each_pid_fd(int fd, bool held, bool (*fn)(pid_t pid, void *data), void *data);
/* file of cg in hierarchy i, read as xmp_cg_lc_read does; through the fd held for it if there is
 * one, and while cg->holding, opened and kept (directly handled hierarchies only). */
int xmp_cg_held_read(struct xmp_cgroup *cg, size_t i, const char *file, char *buf, size_t size,
                     struct xmp_error *err);
/* The fd held for file of cg in hierarchy i; while cg->holding, opened now. -1 if none. */
int xmp_cg_held_fd(struct xmp_cgroup *cg, size_t i, const char *file);
/* Closes every held file of cg. */
void xmp_cg_held_close(struct xmp_cgroup *cg);
/* Value of "key N" in a flat-keyed file text (memory.events, cpu.stat, oom_control); -1 if absent.
 */
int64_t xmp_cg_keyed(const char *text, const char *key);

/* CLOCK_MONOTONIC in milliseconds, for the cgroup code's bounded waits. */
int64_t xmp_cg_now_ms(void);
/* Translates a libcgroup return code into err (errno and message). Always returns -1. */
int xmp_cg_lcerror(struct xmp_error *err, int ret, const char *what, const char *path);
/* The values a new cgroup gets, in the order they must be written (memory before memsw). */
#define XMP_CG_MAX_VALUES 16
struct xmp_cg_values {
    size_t n;
    struct {
        int hier; /* layout index */
        char file[48];
        char value[1024];
    } v[XMP_CG_MAX_VALUES];
};
int xmp_cg_values_add(struct xmp_cg_values *vals, int hier, const char *file, const char *value,
                      struct xmp_error *err);
int xmp_cg_values_add_int(struct xmp_cg_values *vals, int hier, const char *file, int64_t value,
                          struct xmp_error *err);
/* Creates cg's directories in the libcgroup-managed hierarchies of mask with their values,
 * through libcgroup: one cgroup_create_cgroup() per distinct name, i.e. one struct cgroup
 * carrying the controllers of every hierarchy where xmprun's own cgroup has the same path, and
 * the values written by the create itself. libcgroup's error does not say which directory or
 * file failed, so on failure it is redone one directory and one value at a time, which names
 * them. Leaves what it created on failure (the caller removes it). */
int xmp_cg_lc_create(const struct xmp_cgroup *cg, unsigned mask, const struct xmp_cg_values *vals,
                     struct xmp_error *err);
/* Sets file=value in hierarchy h on the cgroup at rel (below own) through libcgroup. */
int xmp_cg_lc_set(const struct xmp_cg_hier *h, const char *rel, const char *file, const char *value,
                  struct xmp_error *err);
/* Reads file (all its lines) of the cgroup rel in hierarchy h through libcgroup's value
 * iterator, which opens just that file (cgroup_get_cgroup() would read every file of every
 * controller). */
int xmp_cg_lc_read(const struct xmp_cg_hier *h, const char *rel, const char *file, char *buf,
                   size_t size, struct xmp_error *err);
/* libcgroup's name of the cgroup rel in hierarchy h: "<own>/<rel>" relative to the mount root. */
void xmp_cg_lc_name(const struct xmp_cg_hier *h, const char *rel, char *buf, size_t size);
/* SIGKILLs every pid in cgroup.procs of dir and all its descendants (never the caller), in
 * rounds until one finds no new pid; no freezer. Returns the number of pids signalled. */
int xmp_cg_kill_procs_tree(const char *dir);
/* Thaws dir and its descendants (v1 freezer.state, v2 cgroup.freeze), where they have one. */
void xmp_cg_thaw_tree(const char *dir);
/* True when pid is listed in cgroup.procs of dir or one of its descendants. */
bool xmp_cg_tree_has_pid(const char *dir, pid_t pid);
/* True when cgroup.procs of dir and all its descendants are empty. */
bool xmp_cg_procs_empty_tree(const char *dir);
/* Removes dir's subdirectories (depth first) and dir itself with rmdir. */
int xmp_cg_rmdir_tree(const char *dir, struct xmp_error *err);
/* The cgroup2 tracking side (hybrid) and unified helpers (cgroup_v2.c). */
int xmp_cg2_kill(const char *dir, struct xmp_error *err);
bool xmp_cg2_is_empty(const char *dir);
/* Kills cg (its ops) and waits until cgroup.events of its cgroup2 directory says "populated 0",
 * up to timeout_ms, sleeping in poll() on that file (the kernel raises POLLPRI when it changes)
 * and killing again every 100 ms (a process may fork past a kill). 0 once empty; -1 with EBUSY
 * on timeout, or the kill's error. */
int xmp_cg2_kill_and_wait(struct xmp_cgroup *cg, long timeout_ms, struct xmp_error *err);

/* The layout (cgroup_layout.c): which mounts are visible, what is hidden, the mount table
 * libcgroup keeps. */
char *xmp_cg_slurp(const char *path, struct xmp_error *err);
int xmp_cg_load_layout(enum xmp_cgroup_mode mode, struct xmp_cg_layout *l, struct xmp_error *err);
void xmp_cg_release_mount_table(void);
void xmp_cg_use_visible_mounts(struct xmp_cg_layout *l, bool lc_ok);
void xmp_cg_note_hidden(struct xmp_error *err, const struct xmp_cg_layout *l);

/* xmp_cgroup_create_job with the cgroupfs manager: the job below xmprun's own cgroup as it is
 * (cgroup.c). cgroup_systemd.c calls it, after it has moved xmprun into a scope where needed;
 * libxmprun, which never creates a job, is built without cgroup_systemd.c and libsystemd. */
int xmp_cg_create_job_fs(enum xmp_cgroup_mode mode, const char *name,
                         const struct xmp_limits *limits, struct xmp_cgroup **out,
                         struct xmp_error *err);

/* Slurm's spank_xmprun plugin (cgroup_slurm.c). XMP_CG_SLURM_DIR is the directory it makes below
 * each task's cgroup, with the leaves worker-<i>. find_preset: where xmprun may not write its
 * own cgroup, whether that tree is there for it in every hierarchy of the layout (made by root,
 * its leaves' cgroup.procs given to this uid), and if so marks the layout preset. */
#define XMP_CG_SLURM_DIR "xmprun"
int xmp_cg_find_preset(struct xmp_cg_layout *layout, struct xmp_error *err);
/* A preset child: its leaf must be one the plugin made. -1 (EDQUOT) with how many there are. */
int xmp_cg_check_preset_leaf(const struct xmp_cgroup *cg, struct xmp_error *err);

/* Shared by cgroup.c and cgroup_gc.c (the collector of what dead jobs left, which builds cgroup
 * objects of their directories to kill and remove). */
void xmp_cg_own_dir(const struct xmp_cg_hier *h, char *buf, size_t size);
/* Whether xmprun may write its own cgroup in every hierarchy of the layout: -1 with why (EROFS
 * for a read-only mount, EACCES/EPERM without the right) where it may not. */
int xmp_cg_check_own_dirs(const struct xmp_cg_layout *layout, struct xmp_error *err);
/* The message for an access error e on dir (xmprun's own cgroup): why, and for a read-only
 * cgroupfs what a container needs; errnum is e (EROFS for a read-only mount). Returns -1. */
int xmp_cg_explain_access(struct xmp_error *err, int e, const char *dir);
int xmp_cg_new_cgroup(struct xmp_cg_layout *layout, struct xmp_cgroup *parent, const char *rel,
                      struct xmp_cgroup **out, struct xmp_error *err);
void xmp_cg_free_cgroup(struct xmp_cgroup *cg);
void xmp_cg_sleep_ms(long ms);
int xmp_cg_kill_and_wait(struct xmp_cgroup *cg, long timeout_ms, struct xmp_error *err);
int xmp_cg_remove_dirs(struct xmp_cgroup *cg, struct xmp_error *err);

#endif
