/* The unified (pure cgroup v2) backend, and the cgroup2 helpers the hybrid backend uses for its
 * process-tracking tree: controller delegation through cgroup.subtree_control, limits through
 * libcgroup, cgroup.kill / cgroup.freeze and cgroup.events, which libcgroup 2.0.2 lacks. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* cpu_set_t macros, pipe2 */
#endif
#include "isolate/cgroup.h"
#include "isolate/cgroup_internal.h"
#include "isolate/cleanup.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libcgroup.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The controllers a job needs: the first three always (limits of every worker), cpuset when a
 * cpuset is asked for (it is the one delegations most often leave out). */
static const struct {
    const char *name;
    unsigned bit;
} wanted[] = {{"memory", XMP_CG_MEMORY},
              {"cpu", XMP_CG_CPU},
              {"pids", XMP_CG_PIDS},
              {"cpuset", XMP_CG_CPUSET}};
#define N_REQUIRED 3

static void
parent_dir(const char *dir, char *buf, size_t size)
{
    char *slash;

    snprintf(buf, size, "%s", dir);
    slash = strrchr(buf, '/');
    if (slash != NULL && slash != buf)
        *slash = '\0';
}

static bool
word_in(const char *text, const char *word)
{
    size_t wl = strlen(word);

    for (const char *p = text; (p = strstr(p, word)) != NULL; p += wl) {
        bool start = p == text || p[-1] == ' ' || p[-1] == '\n';
        bool end = p[wl] == '\0' || p[wl] == ' ' || p[wl] == '\n';
        if (start && end)
            return true;
    }
    return false;
}

static void
short_sleep(void)
{
    struct timespec ts = {0, 5 * 1000000L};
    nanosleep(&ts, NULL);
}

int
xmp_cg2_freeze_kill(const char *dir, struct xmp_error *err)
{
    char events[256];

    /* Freeze, so that nothing forks between reading cgroup.procs and the kills, SIGKILL every
     * task, thaw so that the kills are delivered. */
    if (xmp_cg_write(dir, "cgroup.freeze", "1", err) < 0)
        return -1;
    for (int i = 0; i < 200; i++) {
        if (xmp_cg_read(dir, "cgroup.events", events, sizeof(events), NULL) == 0 &&
            xmp_cg_keyed(events, "frozen") == 1)
            break;
        short_sleep();
    }
    xmp_cg_kill_procs_tree(dir);
    return xmp_cg_write(dir, "cgroup.freeze", "0", err);
}

int
xmp_cg2_kill(const char *dir, struct xmp_error *err)
{
    struct xmp_error e = {0};

    if (xmp_cg_write(dir, "cgroup.kill", "1", &e) == 0)
        return 0;
    if (e.errnum == ENOENT && access(dir, F_OK) < 0)
        return 0; /* the cgroup is gone already */
    if (e.errnum != ENOENT) {
        if (err != NULL)
            *err = e;
        return -1;
    }
    /* Before Linux 5.14 there is no cgroup.kill. */
    return xmp_cg2_freeze_kill(dir, err);
}

bool
xmp_cg2_is_empty(const char *dir)
{
    char events[256];

    if (access(dir, F_OK) < 0)
        return true;
    if (xmp_cg_read(dir, "cgroup.events", events, sizeof(events), NULL) == 0) {
        int64_t populated = xmp_cg_keyed(events, "populated");
        if (populated >= 0)
            return populated == 0;
    }
    return xmp_cg_procs_empty_tree(dir);
}

/* Moves xmprun into a leaf below its own cgroup, named "xmprun-self-<pid>" so that `xmprun gc`
 * finds it once this process is gone and load_layout still takes the parent as xmprun's own
 * cgroup. It is needed because cgroup v2 lets a cgroup enable controllers for its children only
 * while it holds no process itself (the "no internal processes" rule; the root is exempt). */
static int
move_self_to_leaf(const char *own, struct xmp_error *err)
{
    char leaf[XMP_CG_PATH + 32];

    snprintf(leaf, sizeof(leaf), "%s/xmprun-self-%ld", own, (long)getpid());
    if (mkdir(leaf, 0755) < 0 && errno != EEXIST)
        return xmp_error_set(err, errno, "mkdir `%s`", leaf);
    return xmp_cg_write(leaf, "cgroup.procs", "0", err);
}

/* Enables the needed controllers in dir's cgroup.subtree_control (dir = xmprun's own cgroup or
 * the job). allow_move: dir is xmprun's own cgroup, which may hold xmprun itself. */
static int
enable_controllers(const char *dir, bool allow_move, unsigned *enabled, struct xmp_error *err)
{
    char avail[256], sub[256], missing[64] = "";

    if (xmp_cg_read(dir, "cgroup.controllers", avail, sizeof(avail), err) < 0 ||
        xmp_cg_read(dir, "cgroup.subtree_control", sub, sizeof(sub), err) < 0)
        return -1;
    /* Name every missing controller before changing anything. */
    for (size_t i = 0; i < N_REQUIRED; i++)
        if (!word_in(avail, wanted[i].name))
            snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), "%s%s",
                     missing[0] ? ", " : "", wanted[i].name);
    if (missing[0] != '\0') {
        xmp_error_set(err, 0,
                      "cgroup controllers %s are not delegated to `%.64s` (ask for them: systemd "
                      "Delegate=yes or DelegateControllers=, or set isolation.cgroups: optional)",
                      missing, dir);
        if (err != NULL)
            err->errnum = ENODEV;
        return -1;
    }
    *enabled = 0;
    for (size_t i = 0; i < sizeof(wanted) / sizeof(wanted[0]); i++) {
        char plus[32];
        struct xmp_error e = {0};

        if (!word_in(avail, wanted[i].name))
            continue; /* cpuset: create_child says so if a worker asks for a cpuset */
        if (word_in(sub, wanted[i].name)) {
            *enabled |= wanted[i].bit;
            continue;
        }
        snprintf(plus, sizeof(plus), "+%s", wanted[i].name);
        if (xmp_cg_write(dir, "cgroup.subtree_control", plus, &e) < 0 && e.errnum == EBUSY &&
            allow_move) {
            if (move_self_to_leaf(dir, err) < 0)
                return xmp_error_wrap(err, "move xmprun out of its own cgroup");
            allow_move = false;
            xmp_error_clear(&e);
            xmp_cg_write(dir, "cgroup.subtree_control", plus, &e);
        }
        if (e.errnum == EBUSY)
            return xmp_error_set(err, EBUSY,
                                 "cannot enable %s in `%.64s`: other processes are in that "
                                 "cgroup; start xmprun in a cgroup of its own (systemd-run "
                                 "--user -p Delegate=yes --scope xmprun ...)",
                                 wanted[i].name, dir);
        if (e.errnum != 0) {
            if (err != NULL)
                *err = e;
            return -1;
        }
        *enabled |= wanted[i].bit;
    }
    return 0;
}

static int
set_limits(const struct xmp_cgroup *cg, const struct xmp_limits *l, struct xmp_error *err)
{
    const struct xmp_cg_hier *h = &cg->layout->h[cg->layout->unified];
    const char *dir = cg->dir[cg->layout->unified];
    char v[64];

    if (l->memory >= 0) {
        snprintf(v, sizeof(v), "%" PRId64, l->memory);
        if (xmp_cg_lc_set(h, cg->rel, "memory.max", v, err) < 0)
            return -1;
    }
    if (l->memory_high >= 0) {
        snprintf(v, sizeof(v), "%" PRId64, l->memory_high);
        if (xmp_cg_lc_set(h, cg->rel, "memory.high", v, err) < 0)
            return -1;
    }
    /* Without swap accounting (or swap) there is no memory.swap.max, and nothing to limit. */
    if (l->swap >= 0 && xmp_cg_exists(dir, "memory.swap.max")) {
        snprintf(v, sizeof(v), "%" PRId64, l->swap);
        if (xmp_cg_lc_set(h, cg->rel, "memory.swap.max", v, err) < 0)
            return -1;
    }
    if (l->cpus_milli >= 0) {
        xmp_cgroup_format_cpu_max(l->cpus_milli, v, sizeof(v));
        if (xmp_cg_lc_set(h, cg->rel, "cpu.max", v, err) < 0)
            return -1;
    }
    if (l->has_cpus) {
        char cpus[1024], mems[256], pdir[XMP_CG_PATH];
        if (!(h->ctrls & XMP_CG_CPUSET))
            return xmp_error_set(err, ENODEV,
                                 "a cpuset is asked for but the cpuset controller is not "
                                 "delegated to `%s`; set resources.worker.cpuset: none",
                                 dir);
        parent_dir(dir, pdir, sizeof(pdir));
        if (xmp_cgroup_format_cpuset(&l->cpus, cpus, sizeof(cpus)) < 0)
            return xmp_error_set(err, ENAMETOOLONG, "cpuset too long");
        if (xmp_cg_read(pdir, "cpuset.mems.effective", mems, sizeof(mems), err) < 0)
            return -1;
        mems[strcspn(mems, "\n")] = '\0';
        if (xmp_cg_lc_set(h, cg->rel, "cpuset.cpus", cpus, err) < 0 ||
            (mems[0] != '\0' && xmp_cg_lc_set(h, cg->rel, "cpuset.mems", mems, err) < 0))
            return -1;
    }
    if (l->pids >= 0) {
        snprintf(v, sizeof(v), "%" PRId64, l->pids);
        if (xmp_cg_lc_set(h, cg->rel, "pids.max", v, err) < 0)
            return -1;
    }
    return 0;
}

static int
v2_create(struct xmp_cgroup *cg, const struct xmp_limits *limits, struct xmp_error *err)
{
    struct xmp_cg_hier *h = &cg->layout->h[cg->layout->unified];
    const char *dir = cg->dir[cg->layout->unified];
    char name[XMP_CG_PATH], pdir[XMP_CG_PATH];
    struct cgroup *lc = NULL;
    int ret;

    if (cg->parent == NULL) {
        parent_dir(dir, pdir, sizeof(pdir));
        if (enable_controllers(pdir, true, &h->ctrls, err) < 0)
            return -1;
    }
    xmp_cg_lc_name(h, cg->rel, name, sizeof(name));
    lc = cgroup_new_cgroup(name);
    if (lc == NULL)
        return xmp_error_set(err, ENOMEM, "cgroup_new_cgroup");
    ret = cgroup_add_controller(lc, h->lc_ctrl) == NULL ? ECGINVAL : cgroup_create_cgroup(lc, 1);
    cgroup_free(&lc);
    if (ret != 0) {
        xmp_cg_lcerror(err, ret, "create cgroup", dir);
        goto fail;
    }
    if (cg->parent == NULL) {
        unsigned enabled = 0;
        if (enable_controllers(dir, false, &enabled, err) < 0)
            goto fail;
    }
    if (set_limits(cg, limits, err) < 0)
        goto fail;
    cg->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cg->dirfd < 0) {
        xmp_error_set(err, errno, "open `%s`", dir);
        goto fail;
    }
    return 0;
fail:
    rmdir(dir);
    return -1;
}

static int
v2_kill(struct xmp_cgroup *cg, struct xmp_error *err)
{
    return xmp_cg2_kill(cg->dir[cg->layout->unified], err);
}

static int
v2_read_stats(const struct xmp_cgroup *cg, struct xmp_cgroup_stats *st, struct xmp_error *err)
{
    const struct xmp_cg_hier *h = &cg->layout->h[cg->layout->unified];
    const char *dir = cg->dir[cg->layout->unified];
    char buf[1024];

    /* memory.peak exists from Linux 5.19; before it the report says "unknown" (-1). */
    if (xmp_cg_exists(dir, "memory.peak")) {
        if (xmp_cg_lc_read(h, cg->rel, "memory.peak", buf, sizeof(buf), err) < 0)
            return -1;
        st->memory_peak = strtoll(buf, NULL, 10);
    }
    if (xmp_cg_lc_read(h, cg->rel, "memory.events", buf, sizeof(buf), err) < 0)
        return -1;
    st->oom_kills = xmp_cg_keyed(buf, "oom_kill");
    if (xmp_cg_lc_read(h, cg->rel, "cpu.stat", buf, sizeof(buf), err) < 0)
        return -1;
    st->user_usec = xmp_cg_keyed(buf, "user_usec");
    st->system_usec = xmp_cg_keyed(buf, "system_usec");
    return 0;
}

const struct xmp_cg_ops xmp_cg_v2_ops = {
    .create = v2_create,
    .kill = v2_kill,
    .read_stats = v2_read_stats,
};
