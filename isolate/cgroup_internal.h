/* Private to isolate/cgroup*.c: the discovered layout (one entry per hierarchy xmprun uses), the
 * cgroup object and the ops table that the unified and the v1 (legacy/hybrid) backends fill. */
#ifndef XMP_CGROUP_INTERNAL_H
#define XMP_CGROUP_INTERNAL_H

#include "isolate/cgroup.h"

#include <stddef.h>

#define XMP_CG_MAX_HIER 8
#define XMP_CG_PATH     1024

/* The controllers xmprun uses, as bits (one v1 hierarchy may carry several). */
enum {
    XMP_CG_MEMORY = 1u << 0,
    XMP_CG_CPU = 1u << 1,
    XMP_CG_CPUACCT = 1u << 2,
    XMP_CG_CPUSET = 1u << 3,
    XMP_CG_PIDS = 1u << 4,
    XMP_CG_FREEZER = 1u << 5,
};

struct xmp_cg_hier {
    bool v2;
    unsigned ctrls;   /* XMP_CG_* bits of this hierarchy (v1); what is enabled (v2) */
    char lc_ctrl[16]; /* the controller name libcgroup knows the hierarchy by; "" = none */
    char mount[XMP_CG_PATH];
    char own[XMP_CG_PATH]; /* xmprun's own cgroup, relative to the hierarchy's root ("/..") */
};

struct xmp_cg_layout {
    enum xmp_cgroup_mode mode;
    size_t n;
    int unified; /* index of the cgroup2 hierarchy, or -1 */
    struct xmp_cg_hier h[XMP_CG_MAX_HIER];
};

struct xmp_cg_ops;

struct xmp_cgroup {
    const struct xmp_cg_ops *ops;
    struct xmp_cg_layout *layout; /* owned by the job, shared by its children */
    bool owns_layout;
    struct xmp_cgroup *parent; /* NULL for the job */
    struct xmp_cgroup **children;
    size_t nchildren;
    int dirfd;              /* cgroup2 directory, or -1 */
    char rel[XMP_CG_PATH];  /* below xmprun's own cgroup: "xmprun-a-1" or ".../worker-0" */
    char path[XMP_CG_PATH]; /* for the report: relative to the (unified) hierarchy root */
    /* Precomputed per hierarchy, so that attach needs no allocation in a forked child. */
    char dir[XMP_CG_MAX_HIER][XMP_CG_PATH];
    char procs[XMP_CG_MAX_HIER][XMP_CG_PATH];
};

struct xmp_cg_ops {
    /* Creates the directories of cg (dir[] filled) in every hierarchy and applies limits.
     * Removes what it created on failure. */
    int (*create)(struct xmp_cgroup *cg, const struct xmp_limits *limits, struct xmp_error *err);
    int (*kill)(struct xmp_cgroup *cg, struct xmp_error *err);
    int (*read_stats)(const struct xmp_cgroup *cg, struct xmp_cgroup_stats *st,
                      struct xmp_error *err);
};

extern const struct xmp_cg_ops xmp_cg_v1_ops;
extern const struct xmp_cg_ops xmp_cg_v2_ops;

/* Shared helpers (cgroup.c). */
int xmp_cg_write(const char *dir, const char *file, const char *value, struct xmp_error *err);
/* Reads a small file into buf (NUL-terminated, trailing newline kept). */
int xmp_cg_read(const char *dir, const char *file, char *buf, size_t size, struct xmp_error *err);
bool xmp_cg_exists(const char *dir, const char *file);
/* Value of "key N" in a flat-keyed file text (memory.events, cpu.stat, oom_control); -1 if absent.
 */
int64_t xmp_cg_keyed(const char *text, const char *key);
/* Translates a libcgroup return code into err (errno and message). Always returns -1. */
int xmp_cg_lcerror(struct xmp_error *err, int ret, const char *what, const char *path);
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
/* SIGKILLs every pid in cgroup.procs of dir and all its descendants. */
void xmp_cg_kill_procs_tree(const char *dir);
/* True when cgroup.procs of dir and all its descendants are empty. */
bool xmp_cg_procs_empty_tree(const char *dir);
/* Removes dir's subdirectories (depth first) and dir itself with rmdir. */
int xmp_cg_rmdir_tree(const char *dir, struct xmp_error *err);
/* The cgroup2 tracking side (hybrid) and unified helpers (cgroup_v2.c). */
int xmp_cg2_kill(const char *dir, struct xmp_error *err);
/* The kill for kernels before 5.14 (no cgroup.kill): cgroup.freeze, SIGKILL each task, thaw. */
int xmp_cg2_freeze_kill(const char *dir, struct xmp_error *err);
bool xmp_cg2_is_empty(const char *dir);

#endif
