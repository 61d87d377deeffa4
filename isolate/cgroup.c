/* cgroups, the common part: mode detection, the layout of the hierarchies xmprun uses, and the
 * public entry points, which dispatch to the unified or the v1 backend through an ops table chosen
 * once from the mode (cgroup_v2.c, cgroup_v1.c); attach and destroy (gc: cgroup_gc.c). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* cpu_set_t macros */
#endif
#include "isolate/cgroup.h"
#include "isolate/array.h"
#include "isolate/cgroup_internal.h"
#include "isolate/cleanup.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libcgroup.h>
#include <link.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

/* ---- objects ---- */

void
xmp_cg_own_dir(const struct xmp_cg_hier *h, char *buf, size_t size)
{
    /* Both parts are below XMP_CG_PATH; a cut result fails later at xmp_cg_new_cgroup's length
     * check. */
    if (snprintf(buf, size, "%s%s", h->mount, strcmp(h->own, "/") == 0 ? "" : h->own) < 0)
        buf[0] = '\0';
}

int
xmp_cg_new_cgroup(struct xmp_cg_layout *layout, struct xmp_cgroup *parent, const char *rel,
                  struct xmp_cgroup **out, struct xmp_error *err)
{
    struct xmp_cgroup *cg = calloc(1, sizeof(*cg));

    if (cg == NULL)
        return xmp_error_set(err, ENOMEM, "cgroup %s", rel);
    cg->layout = layout;
    cg->parent = parent;
    cg->dirfd = -1;
    cg->ops = layout->mode == XMP_CGROUP_MODE_UNIFIED ? &xmp_cg_v2_ops : &xmp_cg_v1_ops;
    cg->mem_limit = cg->memsw_limit = -1;
    if (snprintf(cg->rel, sizeof(cg->rel), "%s", rel) >= (int)sizeof(cg->rel))
        goto too_long;
    /* Each hierarchy's directory and cgroup.procs, one after the other in cg->paths. */
    size_t size = 0, len[XMP_CG_MAX_HIER];
    for (size_t i = 0; i < layout->n; i++) {
        char base[XMP_CG_PATH];
        xmp_cg_own_dir(&layout->h[i], base, sizeof(base));
        len[i] = strlen(base) + 1 + strlen(rel);
        if (len[i] + sizeof("/cgroup.procs") > XMP_CG_PATH)
            goto too_long;
        size += 2 * len[i] + sizeof("/cgroup.procs") + 1;
    }
    if ((cg->paths = malloc(size > 0 ? size : 1)) == NULL) {
        free(cg);
        return xmp_error_set(err, ENOMEM, "cgroup %s", rel);
    }
    for (size_t i = 0, o = 0; i < layout->n; i++) {
        char base[XMP_CG_PATH];
        xmp_cg_own_dir(&layout->h[i], base, sizeof(base));
        cg->dir[i] = cg->paths + o;
        o += (size_t)sprintf(cg->dir[i], "%s/%s", base, rel) + 1;
        cg->procs[i] = cg->paths + o;
        o += (size_t)sprintf(cg->procs[i], "%s/cgroup.procs", cg->dir[i]) + 1;
    }
    const struct xmp_cg_hier *ph = &layout->h[layout->unified >= 0 ? (size_t)layout->unified : 0];
    snprintf(cg->path, sizeof(cg->path), "%s%s%s", ph->own, strcmp(ph->own, "/") ? "/" : "", rel);
    *out = cg;
    return 0;
too_long:
    free(cg);
    return xmp_error_set(err, ENAMETOOLONG, "cgroup name %s", rel);
}

/* A directory that exists already is a leftover of a job with the same name; refuse it rather
 * than share it, and so that a failed create never removes what it did not make. */
static int
check_absent(const struct xmp_cgroup *cg, struct xmp_error *err)
{
    for (size_t i = 0; i < cg->layout->n; i++)
        if (access(cg->dir[i], F_OK) == 0)
            return xmp_error_set(
                err, EEXIST, "cgroup `%s` exists already (left over? see xmprun gc)", cg->dir[i]);
    return 0;
}

/* The descriptors cg keeps: its held files and its directory. */
static void
close_fds(struct xmp_cgroup *cg)
{
    xmp_cg_held_close(cg);
    if (cg->dirfd >= 0)
        close(cg->dirfd);
    cg->dirfd = -1;
}

void
xmp_cg_free_cgroup(struct xmp_cgroup *cg)
{
    xmp_cg_oom_unwatch(cg);
    close_fds(cg);
    if (cg->owns_layout) {
        xmp_devices_prog_release(&cg->layout->dev_prog);
        free(cg->layout);
    }
    free(cg->children);
    free(cg->paths);
    free(cg);
}

/* What xmp_cgroup_prepare left for the next create_job: whether it ran, and cgroup_init's
 * return. */
static bool lc_prepared;
static int lc_prepared_ret;

void
xmp_cgroup_prepare(void)
{
    lc_prepared_ret = cgroup_init();
    xmp_cg_release_mount_table();
    lc_prepared = true;
}

int
xmp_cg_create_job_fs(enum xmp_cgroup_mode mode, const char *name, const struct xmp_limits *limits,
                     struct xmp_cgroup **out, struct xmp_error *err)
{
    struct xmp_cg_layout *layout = NULL;
    struct xmp_cgroup *cg = NULL;
    struct xmp_limits none;
    int ret;

    if (limits == NULL) {
        xmp_limits_init(&none);
        limits = &none;
    }
    if (mode == XMP_CGROUP_MODE_NONE)
        return xmp_error_set(err, EINVAL, "cgroup: mode none");
    if (strchr(name, '/') != NULL || name[0] == '.' || name[0] == '\0')
        return xmp_error_set(err, EINVAL, "cgroup: bad job cgroup name \"%s\"", name);
    if (!lc_prepared)
        xmp_cgroup_prepare();
    ret = lc_prepared_ret;
    lc_prepared = false;
    layout = calloc(1, sizeof(*layout));
    if (layout == NULL)
        return xmp_error_set(err, ENOMEM, "cgroup layout");
    if (xmp_cg_load_layout(mode, layout, err) < 0) {
        free(layout);
        if (ret != 0 && err != NULL) {
            /* Neither libcgroup nor the visible mounts give a usable layout: both reasons. */
            struct xmp_error lc = {0};
            xmp_cg_lcerror(&lc, ret, "libcgroup: read mounts for", "/proc/mounts");
            xmp_error_wrap(err, "cgroup layout (%s)", lc.msg);
        }
        return -1;
    }
    xmp_cg_use_visible_mounts(layout, ret == 0);
    if (xmp_cg_check_own_dirs(layout, err) < 0) {
        /* A regular user in a Slurm step: the cgroups spank_xmprun made, if it did. */
        struct xmp_error miss = {0};
        if ((err == NULL || err->errnum == EACCES || err->errnum == EPERM) &&
            xmp_cg_find_preset(layout, &miss) == 0) {
            name = XMP_CG_SLURM_DIR;
            xmp_error_clear(err);
        } else {
            free(layout);
            return -1;
        }
    }
    if (xmp_cg_new_cgroup(layout, NULL, name, &cg, err) < 0) {
        free(layout);
        return -1;
    }
    cg->owns_layout = true;
    if (layout->preset)
        snprintf(cg->note, sizeof(cg->note),
                 "cgroups from Slurm's spank_xmprun plugin: %zu worker cgroups below the task's",
                 layout->n_preset);
    if (!layout->preset && check_absent(cg, err) < 0) {
        xmp_cg_free_cgroup(cg);
        return -1;
    }
    if (cg->ops->create(cg, limits, err) < 0) {
        xmp_cg_note_hidden(err, layout);
        /* A delegation can allow mkdir and still refuse a control file (or the reverse). */
        if (err != NULL &&
            (err->errnum == EACCES || err->errnum == EPERM || err->errnum == EROFS)) {
            char base[XMP_CG_PATH];
            xmp_cg_own_dir(&layout->h[0], base, sizeof(base));
            xmp_cg_explain_access(err, err->errnum, base);
        }
        xmp_cg_free_cgroup(cg);
        return -1;
    }
    cg->mem_limit = limits->memory;
    cg->memsw_limit = xmp_cgroup_memsw(limits->memory, limits->swap);
    xmp_cg_oom_watch(cg);
    *out = cg;
    return 0;
}

static int settle(struct xmp_cg_layout *layout, struct xmp_error *err);

int
xmp_cgroup_create_child(struct xmp_cgroup *parent, const char *name,
                        const struct xmp_limits *limits, struct xmp_cgroup **out,
                        struct xmp_error *err)
{
    struct xmp_cgroup *cg = NULL;
    struct xmp_cgroup **nc;
    struct xmp_limits none;
    char rel[XMP_CG_PATH];

    if (limits == NULL) {
        xmp_limits_init(&none);
        limits = &none;
    }
    if (strchr(name, '/') != NULL || name[0] == '.' || name[0] == '\0')
        return xmp_error_set(err, EINVAL, "cgroup: bad child name \"%s\"", name);
    if (snprintf(rel, sizeof(rel), "%s/%s", parent->rel, name) >= (int)sizeof(rel))
        return xmp_error_set(err, ENAMETOOLONG, "cgroup: child name %s", name);
    /* A released child of the same name must be gone first (a restart's new workers). */
    if (settle(parent->layout, err) < 0)
        return xmp_error_wrap(err, "cgroup %s", name);
    /* The job's directories are new (create_job checked), so only this object knows which
     * children exist: no per-hierarchy access() for each one. */
    for (size_t i = 0; i < parent->nchildren; i++)
        if (strcmp(parent->children[i]->rel, rel) == 0)
            return xmp_error_set(err, EEXIST, "cgroup %s: exists already", name);
    nc = realloc(parent->children, (parent->nchildren + 1) * sizeof(*nc));
    if (nc == NULL)
        return xmp_error_set(err, ENOMEM, "cgroup child %s", name);
    parent->children = nc;
    if (xmp_cg_new_cgroup(parent->layout, parent, rel, &cg, err) < 0)
        return -1;
    if (xmp_cg_check_preset_leaf(cg, err) < 0) {
        xmp_cg_free_cgroup(cg);
        return -1;
    }
    if (cg->ops->create(cg, limits, err) < 0) {
        xmp_cg_note_hidden(err, cg->layout);
        xmp_cg_free_cgroup(cg);
        return xmp_error_wrap(err, "cgroup %s", name);
    }
    cg->mem_limit = limits->memory;
    cg->memsw_limit = xmp_cgroup_memsw(limits->memory, limits->swap);
    xmp_cg_oom_watch(cg);
    parent->children[parent->nchildren++] = cg;
    *out = cg;
    return 0;
}

int
xmp_cgroup_dirfd(const struct xmp_cgroup *cg)
{
    return cg->dirfd;
}

const char *
xmp_cgroup_path(const struct xmp_cgroup *cg)
{
    return cg->path;
}

const char *
xmp_cgroup_note(const struct xmp_cgroup *cg)
{
    return cg->note;
}

int64_t
xmp_cgroup_memory_current(const struct xmp_cgroup *cg)
{
    const struct xmp_cg_layout *lay = cg->layout;
    struct xmp_error err = {0};
    char buf[64];

    for (size_t i = 0; i < lay->n; i++) {
        if (!(cg->own & (1u << i)) || !(lay->h[i].ctrls & XMP_CG_MEMORY))
            continue;
        if (xmp_cg_read(cg->dir[i], lay->h[i].v2 ? "memory.current" : "memory.usage_in_bytes", buf,
                        sizeof(buf), &err) == 0)
            return strtoll(buf, NULL, 10);
    }
    return -1;
}

static int
write_pid(const char *procs, const char *num, size_t len, struct xmp_error *err)
{
    int fd = open(procs, O_WRONLY | O_CLOEXEC);

    if (fd < 0)
        return xmp_error_set(err, errno, "open `%s`", procs);
    if (write(fd, num, len) != (ssize_t)len) {
        int e = errno;
        close(fd);
        return xmp_error_set(err, e, "write pid to `%s`", procs);
    }
    close(fd);
    return 0;
}

/* The caller joins the v1 cgroup dir alone: "0" to its `tasks`, which moves the calling thread
 * only, and so the whole of a single-threaded process. For that move the kernel takes no
 * cgroup_threadgroup_rwsem, which any cgroup.procs write takes for writing; and the first
 * writer after a quiet spell waits for an RCU grace period in it while holding cgroup_mutex
 * (4-15 ms here, through `tasks` 0.02 ms: the first worker of every job paid it, and every
 * mkdir and clone into a cgroup waited behind it). */
static int
join_self_v1(const char *dir, struct xmp_error *err)
{
    char tasks[XMP_CG_PATH + sizeof("/tasks")];
    size_t len = strlen(dir);

    if (len + sizeof("/tasks") > sizeof(tasks))
        return xmp_error_set(err, ENAMETOOLONG, "join `%s`", dir);
    memcpy(tasks, dir, len);
    memcpy(tasks + len, "/tasks", sizeof("/tasks"));
    return write_pid(tasks, "0", 1, err);
}

/* The cgroup whose directory in hierarchy i a process of cg joins: cg where it has one of its
 * own there, else the job's if that has one (the job may have got it after cg was made), else
 * NULL (the hierarchy is left alone). */
static const struct xmp_cgroup *
joined_in(const struct xmp_cgroup *cg, size_t i)
{
    if (cg->own & (1u << i))
        return cg;
    if (cg->parent != NULL && (cg->parent->own & (1u << i)))
        return cg->parent;
    return NULL;
}

/* Runs in a freshly forked child: no allocation, no stdio; only open/write/close on the paths
 * computed at create time. Another process is moved with all its threads (cgroup.procs, on v1
 * too: libcgroup's cgroup_attach_task writes `tasks`, which moves one thread only). */
int
xmp_cgroup_attach(const struct xmp_cgroup *cg, pid_t pid, bool into_unified, struct xmp_error *err)
{
    char num[24];
    size_t len = 0;
    char tmp[24];
    unsigned long v = pid > 0 ? (unsigned long)pid : 0;
    int u = cg->layout->unified;

    do {
        tmp[len++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    for (size_t i = 0; i < len; i++)
        num[i] = tmp[len - 1 - i];
    /* The cgroup2 directory first (unless clone3 put the process there already): then any
     * process in a worker's v1 cgroups is in its cgroup2 one too, which is what lets the kill
     * and the emptiness check look at that one alone. */
    if (u >= 0 && !into_unified && write_pid(cg->procs[u], num, len, err) < 0)
        return -1;
    for (size_t i = 0; i < cg->layout->n; i++) {
        const struct xmp_cgroup *in = joined_in(cg, i);
        if ((int)i == u || in == NULL)
            continue;
        if ((pid > 0 ? write_pid(in->procs[i], num, len, err) : join_self_v1(in->dir[i], err)) < 0)
            return -1;
    }
    return 0;
}

int
xmp_cgroup_open_tasks(const struct xmp_cgroup *cg, int *fds, size_t max, struct xmp_error *err)
{
    size_t n = 0;

    for (size_t i = 0; i < cg->layout->n; i++) {
        const struct xmp_cgroup *in = joined_in(cg, i);
        char tasks[XMP_CG_PATH + sizeof("/tasks")];
        if ((int)i == cg->layout->unified || in == NULL)
            continue;
        snprintf(tasks, sizeof(tasks), "%s/tasks", in->dir[i]);
        if (n == max) {
            xmp_error_set(err, E2BIG, "more than %zu cgroup v1 hierarchies", max);
            goto fail;
        }
        if ((fds[n] = open(tasks, O_WRONLY | O_CLOEXEC)) < 0) {
            xmp_error_set(err, errno, "open `%s`", tasks);
            goto fail;
        }
        n++;
    }
    return (int)n;
fail:
    while (n > 0)
        close(fds[--n]);
    return -1;
}

int
xmp_cgroup_join_tasks(const int *fds, size_t n, struct xmp_error *err)
{
    for (size_t i = 0; i < n; i++)
        if (write(fds[i], "0", 1) != 1)
            return xmp_error_set(err, errno, "join a cgroup v1 hierarchy (write to `tasks`)");
    return 0;
}

struct signal_pids {
    int sig;
    pid_t self;
};

static bool
signal_pid(pid_t pid, void *data)
{
    const struct signal_pids *s = data;

    if (pid > 1 && pid != s->self)
        kill(pid, s->sig);
    return true;
}

/* The hierarchy whose cgroup.procs lists every process of cg: the cgroup2 one where there is
 * one, else the first it has a directory in; -1 if none. */
static int
procs_hier(const struct xmp_cgroup *cg)
{
    if (cg->layout->unified >= 0)
        return cg->layout->unified;
    for (size_t i = 0; i < cg->layout->n; i++)
        if (cg->own & (1u << i))
            return (int)i;
    return -1;
}

int
xmp_cgroup_each_pid(struct xmp_cgroup *cg, bool (*fn)(pid_t pid, void *data), void *data,
                    struct xmp_error *err)
{
    int i = procs_hier(cg), fd;

    if (i < 0)
        return 0;
    fd = xmp_cg_held_fd(cg, (size_t)i, "cgroup.procs");
    if ((fd >= 0 ? xmp_cg_each_pid_fd(fd, true, fn, data)
                 : xmp_cg_each_pid(cg->procs[i], fn, data)) < 0)
        return xmp_error_set(err, errno, "read `%s`", cg->procs[i]);
    return 0;
}

int
xmp_cgroup_signal(struct xmp_cgroup *cg, int sig, struct xmp_error *err)
{
    struct signal_pids s = {sig, getpid()};

    return xmp_cgroup_each_pid(cg, signal_pid, &s, err);
}

void
xmp_cgroup_hold(struct xmp_cgroup *cg)
{
    struct xmp_cgroup_stats st;
    int i = procs_hier(cg);

    if (cg->n_held > 0)
        return;
    cg->holding = true;
    cg->ops->read_stats(cg, &st, NULL);
    if (i >= 0)
        xmp_cg_held_fd(cg, (size_t)i, "cgroup.procs");
    cg->holding = false;
}

int
xmp_cgroup_kill(struct xmp_cgroup *cg, struct xmp_error *err)
{
    return cg->ops->kill(cg, err);
}

bool
xmp_cgroup_is_empty(const struct xmp_cgroup *cg)
{
    if (cg->layout->caps.tracking)
        return xmp_cg2_is_empty(cg->dir[cg->layout->unified]);
    for (size_t i = 0; i < cg->layout->n; i++) {
        if (!(cg->own & (1u << i)))
            continue;
        bool empty = cg->layout->h[i].v2 ? xmp_cg2_is_empty(cg->dir[i])
                                         : xmp_cg_procs_empty_tree(cg->dir[i]);
        if (!empty)
            return false;
    }
    return true;
}

int
xmp_cgroup_read_stats(struct xmp_cgroup *cg, struct xmp_cgroup_stats *st, struct xmp_error *err)
{
    st->memory_peak = st->oom_kills = st->user_usec = st->system_usec = st->pids_hits = -1;
    return cg->ops->read_stats(cg, st, err);
}

void
xmp_cg_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* Kills and waits until the tree is empty, up to timeout_ms, killing again every 100 ms (a task
 * may have forked past a v1 sweep). Normally the supervisor has reaped its workers already, so
 * one read of cgroup.events settles it; otherwise, with a cgroup2 directory, it sleeps in poll()
 * on that file. Only legacy mode (or gc, which does not know how a cgroup was made) polls with
 * short sleeps and cgroup.procs scans. */
int
xmp_cg_kill_and_wait(struct xmp_cgroup *cg, long timeout_ms, struct xmp_error *err)
{
    long waited = 0, step = 5, next_kill = 0;

    if (cg->layout->caps.tracking)
        return xmp_cgroup_is_empty(cg) ? 0 : xmp_cg2_kill_and_wait(cg, timeout_ms, err);
    while (!xmp_cgroup_is_empty(cg)) {
        if (waited >= timeout_ms)
            return xmp_error_set(err, EBUSY, "cgroup `%s` still has processes after %ld ms",
                                 cg->path, timeout_ms);
        if (waited >= next_kill) {
            if (xmp_cgroup_kill(cg, err) < 0)
                return -1;
            next_kill = waited + 100;
        }
        xmp_cg_sleep_ms(step);
        waited += step;
        if (step < 50)
            step *= 2;
    }
    return 0;
}

/* Removes cg's directories, deepest first, in every hierarchy (gc: it does not know which
 * directories a cgroup has); libcgroup's delete would move live tasks to the parent instead of
 * failing, so the caller has emptied the cgroup already and plain rmdir reports EBUSY if that
 * did not hold. */
int
xmp_cg_remove_dirs(struct xmp_cgroup *cg, struct xmp_error *err)
{
    int ret = 0;

    for (size_t i = 0; i < cg->layout->n && !cg->layout->preset; i++) {
        struct xmp_error e = {0};
        if (xmp_cg_rmdir_tree(cg->dir[i], &e) < 0) {
            if (ret == 0 && err != NULL)
                *err = e;
            ret = -1;
        }
    }
    return ret;
}

/* Removes the directories cg made, once it is empty: one rmdir each. Only when one fails does it
 * look further: subdirectories a worker made itself (removed deepest first) or, in a v1
 * hierarchy, a process that is there and not in the cgroup2 directory (killed, then waited for
 * briefly). The final rmdir's error names what is left. */
static int
remove_own_dirs(struct xmp_cgroup *cg, struct xmp_error *err)
{
    int ret = 0;

    for (size_t i = 0; i < cg->layout->n && !cg->layout->preset; i++) {
        struct xmp_error e = {0};
        if (!(cg->own & (1u << i)) || rmdir(cg->dir[i]) == 0 || errno == ENOENT)
            continue;
        for (int tries = 0;; tries++) {
            xmp_error_clear(&e);
            if (xmp_cg_rmdir_tree(cg->dir[i], &e) == 0 || e.errnum != EBUSY || tries == 20)
                break;
            xmp_cg_kill_procs_tree(cg->dir[i]);
            xmp_cg_sleep_ms(10);
        }
        if (e.errnum != 0) {
            if (ret == 0 && err != NULL)
                *err = e;
            ret = -1;
        }
    }
    return ret;
}

static void
unlink_child(struct xmp_cgroup *cg)
{
    struct xmp_cgroup *p = cg->parent;

    for (size_t i = 0; p != NULL && i < p->nchildren; i++) {
        if (p->children[i] == cg) {
            p->children[i] = p->children[--p->nchildren];
            break;
        }
    }
}

/* Frees cg and its children; removes their directories (children first) when they are empty.
 * Only the outermost call waits: the job's wait covers its whole tree. */
static int
destroy_tree(struct xmp_cgroup *cg, bool wait, struct xmp_error *err)
{
    int ret = 0;

    if (wait && xmp_cg_kill_and_wait(cg, 5000, err) < 0)
        ret = -1;
    while (cg->nchildren > 0) {
        struct xmp_error e = {0};
        if (destroy_tree(cg->children[cg->nchildren - 1], false, &e) < 0 && ret == 0) {
            if (err != NULL)
                *err = e;
            ret = -1;
        }
    }
    /* Even after a failed wait, remove what is empty; rmdir's EBUSY names what is left. */
    {
        struct xmp_error e = {0};
        if (remove_own_dirs(cg, &e) < 0 && ret == 0) {
            if (err != NULL)
                *err = e;
            ret = -1;
        }
    }
    unlink_child(cg);
    xmp_cg_free_cgroup(cg);
    return ret;
}

/* ---- the remover ----
 * A worker's end costs the kernel the teardown of its cgroups (here a memory cgroup, a cpuset
 * and a cgroup2 directory, 40-70 us an rmdir: a third of the main thread's time between a
 * failure and the exit of a 32-worker job). On a helper thread that overlaps the reaps, stats
 * reads and report that follow on the main one. */

#define REMOVER_STACK (64 * 1024)

static bool
remove_released(struct xmp_cgroup *cg)
{
    for (size_t i = 0; i < cg->layout->n && !cg->layout->preset; i++)
        if ((cg->own & (1u << i)) && rmdir(cg->dir[i]) < 0 && errno != ENOENT)
            return false;
    return true;
}

static void *
remover_main(void *arg)
{
    struct xmp_cg_remover *rm = arg;

    pthread_mutex_lock(&rm->mu);
    for (;;) {
        struct xmp_cgroup *cg;
        while (rm->taken == rm->n && !rm->done)
            pthread_cond_wait(&rm->cv, &rm->mu);
        if (rm->taken == rm->n)
            break;
        cg = rm->queue[rm->taken++];
        pthread_mutex_unlock(&rm->mu);
        cg->gone = remove_released(cg);
        pthread_mutex_lock(&rm->mu);
    }
    pthread_mutex_unlock(&rm->mu);
    return NULL;
}

void
xmp_cgroup_release(struct xmp_cgroup *cg)
{
    struct xmp_cg_remover *rm = &cg->layout->remover;
    bool queued = false;

    /* The job, and a cgroup with children, are destroy's. */
    if (cg->parent == NULL || cg->nchildren > 0 || cg->released)
        return;
    /* Its descriptors are closed here rather than on the remover, whose rmdirs are what the end
     * of a job waits for: 13-19 us a worker for its six held files, against 35-40 us for the
     * memory cgroup's rmdir. */
    close_fds(cg);
    if (!rm->active) {
        pthread_mutex_init(&rm->mu, NULL);
        pthread_cond_init(&rm->cv, NULL);
        rm->active = true;
        xmp_thread_start(&rm->thread, remover_main, rm, REMOVER_STACK);
    }
    pthread_mutex_lock(&rm->mu);
    if (xmp_array_reserve(rm->queue, rm->cap, rm->n + 1, 64)) {
        cg->released = true;
        rm->queue[rm->n++] = cg;
        queued = true;
        pthread_cond_signal(&rm->cv);
    }
    pthread_mutex_unlock(&rm->mu);
    /* Without the thread, in line; without memory for the queue, it stays a child of its parent
     * for destroy to remove. */
    if (queued && !rm->thread.started)
        cg->gone = remove_released(cg);
}

/* Waits for the remover, frees the cgroups whose directories it removed, and destroys (kill,
 * wait, remove) those still in use: what a worker left running there. */
static int
settle(struct xmp_cg_layout *layout, struct xmp_error *err)
{
    struct xmp_cg_remover *rm = &layout->remover;
    int ret = 0;

    if (!rm->active)
        return 0;
    pthread_mutex_lock(&rm->mu);
    rm->done = true;
    pthread_cond_signal(&rm->cv);
    pthread_mutex_unlock(&rm->mu);
    xmp_thread_join(&rm->thread);
    for (size_t i = 0; i < rm->n; i++) {
        struct xmp_cgroup *cg = rm->queue[i];
        struct xmp_error e = {0};

        if (cg->gone) {
            unlink_child(cg);
            xmp_cg_free_cgroup(cg);
        } else if (destroy_tree(cg, true, &e) < 0 && ret == 0) {
            if (err != NULL)
                *err = e;
            ret = -1;
        }
    }
    free(rm->queue);
    pthread_cond_destroy(&rm->cv);
    pthread_mutex_destroy(&rm->mu);
    *rm = (struct xmp_cg_remover){0};
    return ret;
}

int
xmp_cgroup_destroy(struct xmp_cgroup *cg, struct xmp_error *err)
{
    int ret;

    if (cg == NULL)
        return 0;
    /* destroy_tree sets err only when it fails, so settle's error stays otherwise. */
    ret = settle(cg->layout, err);
    return destroy_tree(cg, true, err) < 0 ? -1 : ret;
}

static void
abandon_tree(struct xmp_cgroup *cg)
{
    while (cg->nchildren > 0)
        abandon_tree(cg->children[cg->nchildren - 1]);
    unlink_child(cg);
    xmp_cg_free_cgroup(cg);
}

void
xmp_cgroup_abandon(struct xmp_cgroup *cg)
{
    if (cg == NULL)
        return;
    settle(cg->layout, NULL);
    abandon_tree(cg);
}
