/* The v1 backend (legacy and hybrid): one directory per v1 hierarchy, created and set through
 * libcgroup, plus in hybrid mode a directory in the cgroup2 tree for process tracking
 * (clone3 CLONE_INTO_CGROUP, cgroup.kill, cgroup.events), which is handled directly. */
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

static void
parent_dir(const char *dir, char *buf, size_t size)
{
    char *slash;

    snprintf(buf, size, "%s", dir);
    slash = strrchr(buf, '/');
    if (slash != NULL && slash != buf)
        *slash = '\0';
}

static int
hier_of(const struct xmp_cg_layout *l, unsigned bit)
{
    for (size_t i = 0; i < l->n; i++)
        if (!l->h[i].v2 && (l->h[i].ctrls & bit))
            return (int)i;
    return -1;
}

static int
need(const struct xmp_cg_layout *l, unsigned bit, const char *ctrl, const char *why,
     struct xmp_error *err)
{
    int i = hier_of(l, bit);

    if (i < 0)
        return xmp_error_set(err, ENODEV,
                             "%s needs the %s controller, which is not mounted (no cgroup v1 %s "
                             "hierarchy); mount it or set isolation.cgroups: optional",
                             why, ctrl, ctrl);
    return i;
}

static int
set_int(const struct xmp_cgroup *cg, int i, const char *file, int64_t value, struct xmp_error *err)
{
    char v[32];

    snprintf(v, sizeof(v), "%" PRId64, value);
    return xmp_cg_lc_set(&cg->layout->h[i], cg->rel, file, v, err);
}

static int
set_limits(const struct xmp_cgroup *cg, const struct xmp_limits *l, struct xmp_error *err)
{
    const struct xmp_cg_layout *lay = cg->layout;
    int i;

    if (l->memory >= 0 || l->memory_high >= 0 || l->swap >= 0) {
        if ((i = need(lay, XMP_CG_MEMORY, "memory", "a memory limit", err)) < 0)
            return -1;
        /* memsw is memory + swap and must never be below the memory limit: memory first. */
        if (l->memory >= 0 && set_int(cg, i, "memory.limit_in_bytes", l->memory, err) < 0)
            return -1;
        int64_t memsw = xmp_cgroup_memsw(l->memory, l->swap);
        if (memsw >= 0 && xmp_cg_exists(cg->dir[i], "memory.memsw.limit_in_bytes") &&
            set_int(cg, i, "memory.memsw.limit_in_bytes", memsw, err) < 0)
            return -1;
        if (l->memory_high >= 0 &&
            set_int(cg, i, "memory.soft_limit_in_bytes", l->memory_high, err) < 0)
            return -1;
    }
    if (l->cpus_milli >= 0) {
        if ((i = need(lay, XMP_CG_CPU, "cpu", "a CPU quota", err)) < 0)
            return -1;
        if (set_int(cg, i, "cpu.cfs_period_us", 100000, err) < 0 ||
            set_int(cg, i, "cpu.cfs_quota_us", xmp_cgroup_cfs_quota(l->cpus_milli), err) < 0)
            return -1;
    }
    /* A v1 cpuset starts with empty cpus and mems and no task may join it until both are set,
     * so every level gets them: the asked cpus, or the parent's. */
    if ((i = hier_of(lay, XMP_CG_CPUSET)) >= 0) {
        char cpus[1024], mems[256], pdir[XMP_CG_PATH];
        parent_dir(cg->dir[i], pdir, sizeof(pdir));
        if (l->has_cpus) {
            if (xmp_cgroup_format_cpuset(&l->cpus, cpus, sizeof(cpus)) < 0)
                return xmp_error_set(err, ENAMETOOLONG, "cpuset too long");
        } else if (xmp_cg_read(pdir, "cpuset.cpus", cpus, sizeof(cpus), err) < 0) {
            return -1;
        }
        if (xmp_cg_read(pdir, "cpuset.mems", mems, sizeof(mems), err) < 0)
            return -1;
        cpus[strcspn(cpus, "\n")] = '\0';
        mems[strcspn(mems, "\n")] = '\0';
        if (xmp_cg_lc_set(&lay->h[i], cg->rel, "cpuset.cpus", cpus, err) < 0 ||
            xmp_cg_lc_set(&lay->h[i], cg->rel, "cpuset.mems", mems, err) < 0)
            return -1;
    } else if (l->has_cpus) {
        return need(lay, XMP_CG_CPUSET, "cpuset", "a cpuset", err);
    }
    if (l->pids >= 0) {
        if ((i = need(lay, XMP_CG_PIDS, "pids", "a process limit", err)) < 0)
            return -1;
        if (set_int(cg, i, "pids.max", l->pids, err) < 0)
            return -1;
    }
    return 0;
}

static void
remove_created(struct xmp_cgroup *cg, size_t upto)
{
    for (size_t i = 0; i < upto; i++)
        rmdir(cg->dir[i]);
}

static int
v1_create(struct xmp_cgroup *cg, const struct xmp_limits *limits, struct xmp_error *err)
{
    const struct xmp_cg_layout *lay = cg->layout;
    size_t i;

    for (i = 0; i < lay->n; i++) {
        const struct xmp_cg_hier *h = &lay->h[i];
        if (h->v2) {
            /* libcgroup 2.0.2 knows a cgroup2 mount only through the controllers enabled at
             * its root; in hybrid mode the tracking tree has none of them, so it cannot create
             * there: plain mkdir. */
            if (mkdir(cg->dir[i], 0755) < 0) {
                xmp_error_set(err, errno, "mkdir `%s`", cg->dir[i]);
                goto fail;
            }
            continue;
        }
        char name[XMP_CG_PATH];
        struct cgroup *lc = NULL;
        int ret;
        xmp_cg_lc_name(h, cg->rel, name, sizeof(name));
        lc = cgroup_new_cgroup(name);
        if (lc == NULL) {
            xmp_error_set(err, ENOMEM, "cgroup_new_cgroup");
            goto fail;
        }
        /* Names are relative to each hierarchy's root, and xmprun's own cgroup differs per
         * hierarchy, so one libcgroup cgroup per hierarchy. */
        ret =
            cgroup_add_controller(lc, h->lc_ctrl) == NULL ? ECGINVAL : cgroup_create_cgroup(lc, 1);
        cgroup_free(&lc);
        if (ret != 0) {
            xmp_cg_lcerror(err, ret, "create cgroup", cg->dir[i]);
            goto fail;
        }
        if ((h->ctrls & XMP_CG_MEMORY) && cg->parent == NULL) {
            /* Children count against the job's limit only with use_hierarchy, which must be
             * set before the first child exists (recent kernels fix it to 1). */
            char uh[8];
            if (xmp_cg_read(cg->dir[i], "memory.use_hierarchy", uh, sizeof(uh), NULL) == 0 &&
                uh[0] == '0' && xmp_cg_lc_set(h, cg->rel, "memory.use_hierarchy", "1", err) < 0)
                goto fail;
        }
    }
    if (set_limits(cg, limits, err) < 0)
        goto fail;
    if (lay->unified >= 0) {
        cg->dirfd = open(cg->dir[lay->unified], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (cg->dirfd < 0) {
            xmp_error_set(err, errno, "open `%s`", cg->dir[lay->unified]);
            goto fail;
        }
    }
    return 0;
fail:
    /* None of the directories existed before (checked by the caller), so removing up to and
     * including the one that failed is safe. */
    remove_created(cg, i < lay->n ? i + 1 : lay->n);
    return -1;
}

static void
sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int
v1_kill(struct xmp_cgroup *cg, struct xmp_error *err)
{
    const struct xmp_cg_layout *lay = cg->layout;
    int f = hier_of(lay, XMP_CG_FREEZER);
    int ret = 0;

    /* Hybrid: the cgroup2 tracking tree has cgroup.kill (5.14+), which reaches every task even
     * while it forks. The v1 sweep below still runs, for tasks attached only to v1. */
    if (lay->unified >= 0 && xmp_cg2_kill(cg->dir[lay->unified], err) < 0)
        ret = -1;
    if (f >= 0 && access(cg->dir[f], F_OK) == 0) {
        /* Freeze first, so that no task forks between reading cgroup.procs and the kills. */
        char state[32] = "";
        if (xmp_cg_write(cg->dir[f], "freezer.state", "FROZEN", err) < 0)
            return -1;
        for (int k = 0; k < 200; k++) {
            if (xmp_cg_read(cg->dir[f], "freezer.state", state, sizeof(state), NULL) == 0 &&
                strncmp(state, "FROZEN", 6) == 0)
                break;
            sleep_ms(5);
        }
    }
    for (size_t i = 0; i < lay->n; i++)
        if (!lay->h[i].v2)
            xmp_cg_kill_procs_tree(cg->dir[i]);
    if (f >= 0 && access(cg->dir[f], F_OK) == 0 &&
        xmp_cg_write(cg->dir[f], "freezer.state", "THAWED", err) < 0)
        return -1;
    return ret;
}

static int
v1_read_stats(const struct xmp_cgroup *cg, struct xmp_cgroup_stats *st, struct xmp_error *err)
{
    const struct xmp_cg_layout *lay = cg->layout;
    char buf[1024];
    int i;

    if ((i = hier_of(lay, XMP_CG_MEMORY)) >= 0) {
        const struct xmp_cg_hier *h = &lay->h[i];
        if (xmp_cg_lc_read(h, cg->rel, "memory.max_usage_in_bytes", buf, sizeof(buf), err) < 0)
            return -1;
        st->memory_peak = strtoll(buf, NULL, 10);
        if (xmp_cg_lc_read(h, cg->rel, "memory.oom_control", buf, sizeof(buf), err) < 0)
            return -1;
        st->oom_kills = xmp_cg_keyed(buf, "oom_kill");
    }
    if ((i = hier_of(lay, XMP_CG_CPUACCT)) >= 0) {
        const struct xmp_cg_hier *h = &lay->h[i];
        if (xmp_cg_exists(cg->dir[i], "cpuacct.usage_user")) {
            if (xmp_cg_lc_read(h, cg->rel, "cpuacct.usage_user", buf, sizeof(buf), err) < 0)
                return -1;
            st->user_usec = strtoll(buf, NULL, 10) / 1000;
            if (xmp_cg_lc_read(h, cg->rel, "cpuacct.usage_sys", buf, sizeof(buf), err) < 0)
                return -1;
            st->system_usec = strtoll(buf, NULL, 10) / 1000;
        } else {
            /* Before Linux 4.6 only cpuacct.stat, in USER_HZ ticks. */
            long hz = sysconf(_SC_CLK_TCK);
            if (xmp_cg_lc_read(h, cg->rel, "cpuacct.stat", buf, sizeof(buf), err) < 0)
                return -1;
            st->user_usec = xmp_cgroup_ticks_to_usec(xmp_cg_keyed(buf, "user"), hz);
            st->system_usec = xmp_cgroup_ticks_to_usec(xmp_cg_keyed(buf, "system"), hz);
        }
    }
    return 0;
}

const struct xmp_cg_ops xmp_cg_v1_ops = {
    .create = v1_create,
    .kill = v1_kill,
    .read_stats = v1_read_stats,
};
