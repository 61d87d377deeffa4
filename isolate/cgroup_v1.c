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

/* The values for cg's v1 directories (hierarchies in mask), in the order the kernel needs. */
static int
v1_values(const struct xmp_cgroup *cg, const struct xmp_limits *l, unsigned mask,
          struct xmp_cg_values *vals, struct xmp_error *err)
{
    const struct xmp_cg_layout *lay = cg->layout;
    int i;

    /* Slurm's spank_xmprun leaves outlive a job (several xmprun in one task): the memory limits
     * an earlier job set go first, memsw before memory, which it must never be below. */
    if (lay->preset && (i = hier_of(lay, XMP_CG_MEMORY)) >= 0 && (mask & (1u << i)) &&
        ((lay->caps.memsw &&
          xmp_cg_values_add_int(vals, i, "memory.memsw.limit_in_bytes", -1, err) < 0) ||
         (l->memory < 0 && xmp_cg_values_add_int(vals, i, "memory.limit_in_bytes", -1, err) < 0) ||
         (l->memory_high < 0 &&
          xmp_cg_values_add_int(vals, i, "memory.soft_limit_in_bytes", -1, err) < 0)))
        return -1;
    if (l->memory >= 0 || l->memory_high >= 0 || l->swap >= 0) {
        if ((i = need(lay, XMP_CG_MEMORY, "memory", "a memory limit", err)) < 0)
            return -1;
        /* memsw is memory + swap and must never be below the memory limit: memory first. */
        int64_t memsw = xmp_cgroup_memsw(l->memory, l->swap);
        if ((l->memory >= 0 &&
             xmp_cg_values_add_int(vals, i, "memory.limit_in_bytes", l->memory, err) < 0) ||
            (memsw >= 0 && lay->caps.memsw &&
             xmp_cg_values_add_int(vals, i, "memory.memsw.limit_in_bytes", memsw, err) < 0) ||
            (l->memory_high >= 0 &&
             xmp_cg_values_add_int(vals, i, "memory.soft_limit_in_bytes", l->memory_high, err) < 0))
            return -1;
    }
    if (l->cpus_milli >= 0) {
        if ((i = need(lay, XMP_CG_CPU, "cpu", "a CPU quota", err)) < 0)
            return -1;
        if (xmp_cg_values_add_int(vals, i, "cpu.cfs_period_us", 100000, err) < 0 ||
            xmp_cg_values_add_int(vals, i, "cpu.cfs_quota_us", xmp_cgroup_cfs_quota(l->cpus_milli),
                                  err) < 0)
            return -1;
    }
    /* A v1 cpuset starts with empty cpus and mems and no task may join it until both are set,
     * so every directory gets them: the asked cpus, or the parent's (a worker without a cpuset
     * has no cpuset directory of its own: it joins the job's). mems are the job's, read once. */
    if ((i = hier_of(lay, XMP_CG_CPUSET)) >= 0 && (mask & (1u << i))) {
        char cpus[1024], pdir[XMP_CG_PATH];
        if (l->has_cpus) {
            if (xmp_cpulist_format(&l->cpus, cpus, sizeof(cpus)) < 0)
                return xmp_error_set(err, ENAMETOOLONG, "cpuset too long");
        } else {
            xmp_cg_parent_dir(cg->dir[i], pdir, sizeof(pdir));
            if (xmp_cg_read(pdir, "cpuset.cpus", cpus, sizeof(cpus), err) < 0)
                return -1;
        }
        cpus[strcspn(cpus, "\n")] = '\0';
        if (xmp_cg_values_add(vals, i, "cpuset.cpus", cpus, err) < 0 ||
            xmp_cg_values_add(vals, i, "cpuset.mems", lay->caps.mems, err) < 0)
            return -1;
    } else if (l->has_cpus) {
        return need(lay, XMP_CG_CPUSET, "cpuset", "a cpuset", err);
    }
    if (l->has_devices && lay->unified < 0 &&
        need(lay, XMP_CG_DEVICES, "devices", "device filtering (isolation.devices)", err) < 0)
        return -1;
    if (l->pids >= 0) {
        if ((i = need(lay, XMP_CG_PIDS, "pids", "a process limit", err)) < 0)
            return -1;
        if (xmp_cg_values_add_int(vals, i, "pids.max", l->pids, err) < 0)
            return -1;
    }
    return 0;
}

/* True when the cgroup2 tracking tree holds every process of a job, so that killing there
 * reaches them all. */
static bool
tracked(const struct xmp_cg_layout *lay)
{
    return lay->caps.tracking;
}

/* The hierarchies cg (job or worker) gets a directory of its own in: the cgroup2 tree, memory
 * (limits and the report's memory figures), and the others only where its limits or its stats
 * need them. The v1 freezer is never used (see xmp_cg_kill_procs_tree); in hybrid mode the
 * cgroup2 tree does the kill and its cpu.stat gives CPU times, so cpuacct is needed only in
 * legacy mode. A job gets the others when a worker first needs them (see
 * extend_job): every v1 hierarchy costs a directory, its removal and a write in the child. */
static unsigned
v1_mask(const struct xmp_cgroup *cg, const struct xmp_limits *l)
{
    const struct xmp_cg_layout *lay = cg->layout;
    unsigned want = XMP_CG_MEMORY, mask = 0;

    if (l->cpus_milli >= 0)
        want |= XMP_CG_CPU;
    if (l->has_cpus)
        want |= XMP_CG_CPUSET;
    if (l->pids >= 0)
        want |= XMP_CG_PIDS;
    if (l->has_devices && lay->unified < 0)
        want |= XMP_CG_DEVICES;
    if (lay->unified < 0 || !lay->caps.v2_cpu_stat)
        want |= XMP_CG_CPUACCT;
    for (size_t i = 0; i < lay->n; i++)
        if (lay->h[i].v2 || (lay->h[i].ctrls & want))
            mask |= 1u << i;
    return mask;
}

/* What the job's directories tell about the kernel, once per job (see struct xmp_cg_caps). The
 * v1 answers are read in xmprun's own cgroup, which exists before the job does. */
static int
learn_caps(struct xmp_cgroup *cg, struct xmp_error *err)
{
    struct xmp_cg_layout *lay = cg->layout;
    struct xmp_cg_caps *caps = &lay->caps;
    char pdir[XMP_CG_PATH];
    int i;

    if (lay->unified >= 0) {
        const char *dir = cg->dir[lay->unified];
        caps->v2_kill = xmp_cg_exists(dir, "cgroup.kill");
        caps->v2_cpu_stat = xmp_cg_exists(dir, "cpu.stat");
        caps->tracking = true;
    }
    if ((i = hier_of(lay, XMP_CG_MEMORY)) >= 0) {
        xmp_cg_parent_dir(cg->dir[i], pdir, sizeof(pdir));
        caps->memsw = xmp_cg_exists(pdir, "memory.memsw.limit_in_bytes");
    }
    if ((i = hier_of(lay, XMP_CG_CPUACCT)) >= 0) {
        xmp_cg_parent_dir(cg->dir[i], pdir, sizeof(pdir));
        caps->cpuacct_usage = xmp_cg_exists(pdir, "cpuacct.usage_user");
    }
    if ((i = hier_of(lay, XMP_CG_CPUSET)) >= 0) {
        xmp_cg_parent_dir(cg->dir[i], pdir, sizeof(pdir));
        if (xmp_cg_read(pdir, "cpuset.mems", caps->mems, sizeof(caps->mems), err) < 0)
            return -1;
        caps->mems[strcspn(caps->mems, "\n")] = '\0';
        caps->mems_known = true;
    }
    return 0;
}

/* Gives the job directories in the hierarchies of `missing`, which a worker is about to need:
 * a worker's directory must be below the job's so that the job's directory is all that gc and
 * the job's kill have to look at. A cpuset gets the parent's cpus and the job's mems. */
static int
extend_job(struct xmp_cgroup *job, unsigned missing, struct xmp_error *err)
{
    struct xmp_cg_values vals = {0};
    struct xmp_limits none;

    xmp_limits_init(&none);
    if (v1_values(job, &none, missing, &vals, err) < 0 ||
        xmp_cg_lc_create(job, missing, &vals, err) < 0) {
        for (size_t i = 0; i < job->layout->n && !job->layout->preset; i++)
            if (missing & (1u << i))
                rmdir(job->dir[i]);
        return -1;
    }
    job->own |= missing;
    return 0;
}

static void
remove_created(struct xmp_cgroup *cg, unsigned mask)
{
    for (size_t i = 0; i < cg->layout->n && !cg->layout->preset; i++)
        if (mask & (1u << i))
            rmdir(cg->dir[i]);
}

/* One allow write; 1 when the kernel refused it (EPERM: the parent does not hold it). */
static int
allow_device(const char *dir, const struct xmp_dev_rule *r, struct xmp_error *err)
{
    char line[64];

    xmp_devices_format(r, line, sizeof(line));
    if (xmp_cg_write(dir, "devices.allow", line, err) == 0)
        return 0;
    if (err->errnum == EPERM) {
        xmp_error_clear(err);
        return 1;
    }
    return xmp_error_wrap(err, "device filter: allow `%s`", line);
}

#define XMP_DEV_MAX_PARENT 256

/* The enclosing devices cgroup's list, read in dir (a new directory starts with its parent's;
 * xmprun's own one is the enclosing one itself), composed with want into allow and denied. */
static int
compose_enclosing(const char *dir, const char *encl, const struct xmp_dev_rules *want,
                  struct xmp_dev_rules *allow, struct xmp_dev_rules *denied, struct xmp_error *err)
{
    cleanup_free struct xmp_dev_rule *parent = NULL;
    cleanup_free char *list = NULL;
    int n;

    parent = calloc(XMP_DEV_MAX_PARENT, sizeof(*parent));
    list = malloc(XMP_DEV_MAX_PARENT * 32);
    if (parent == NULL || list == NULL)
        return xmp_error_set(err, ENOMEM, "device filter");
    if (xmp_cg_read(dir, "devices.list", list, XMP_DEV_MAX_PARENT * 32, err) < 0)
        return xmp_error_wrap(err, "device filter");
    if ((n = xmp_devices_parse_list(list, parent, XMP_DEV_MAX_PARENT)) < 0)
        return xmp_error_set(err, 0,
                             "device filter: cannot compose with the enclosing devices cgroup %s "
                             "(its devices.list is too long or not understood)",
                             encl);
    if (!xmp_devices_compose(want, parent, (size_t)n, allow, denied))
        return xmp_error_set(err, ENOMEM, "device filter");
    return 0;
}

/* The nodes of the worker's rules that the enclosing devices cgroup encl denies: a node the
 * worker cannot run without (its GPU, the job's GPUs) is a setup error, before anything starts;
 * the others are left out of its filter, and cg's note says which. */
static int
judge_denied(struct xmp_cgroup *cg, const char *encl, const struct xmp_dev_rules *denied,
             struct xmp_error *err)
{
    char nodes[256] = "";

    for (size_t i = 0; i < denied->n; i++) {
        const struct xmp_dev_rule *r = &denied->r[i];
        char what[64];
        if (r->what[0] != '\0')
            snprintf(what, sizeof(what), "%s", r->what);
        else
            xmp_devices_format(r, what, sizeof(what));
        if (r->required)
            return xmp_error_set(err, 0,
                                 "%s is not allowed by the enclosing devices cgroup %s: the job "
                                 "was not given this device (under Slurm, the step was not given "
                                 "this GPU)",
                                 what, encl);
        size_t len = strlen(nodes);
        snprintf(nodes + len, sizeof(nodes) - len, "%s%s", len > 0 ? ", " : "", what);
    }
    /* (a truncated note is still a note; testing the result keeps -Wformat-truncation quiet) */
    if (nodes[0] != '\0' &&
        snprintf(cg->note, sizeof(cg->note),
                 "the enclosing devices cgroup %s does not allow %s: left out of the workers' "
                 "device filter",
                 encl, nodes) < 0)
        cg->note[0] = '\0';
    return 0;
}

/* The worker's device allowlist in its devices directory dir, composed with the enclosing
 * devices cgroup (a Slurm step's under ConstrainDevices, a container's, a unit's with
 * DevicePolicy=closed): v1 refuses any allow its parent does not hold. The list a new directory
 * starts with is its parent's: an allowlist is intersected with the worker's rules before the
 * writes; a parent in default-allow mode lists "a *:* rwm" whatever it denies, so there the
 * kernel's EPERM tells: a refused wildcard becomes the worker's own nodes with its access, a
 * refused node is denied. A denied node that the worker needs fails the setup; others are left
 * out, and cg's note says which. */
static int
write_devices(struct xmp_cgroup *cg, const char *dir, const struct xmp_dev_rules *want,
              struct xmp_error *err)
{
    const struct xmp_cg_hier *h = &cg->layout->h[hier_of(cg->layout, XMP_CG_DEVICES)];
    cleanup_dev_rules struct xmp_dev_rules allow = {0};
    cleanup_dev_rules struct xmp_dev_rules denied = {0};
    int rc;

    if (compose_enclosing(dir, h->proc, want, &allow, &denied, err) < 0)
        return -1;
    /* Deny first: a new v1 devices cgroup starts with its parent's list (usually "a *:* rwm"),
     * and only an empty list turns it into an allowlist. */
    if (xmp_cg_write(dir, "devices.deny", "a", err) < 0)
        return xmp_error_wrap(err, "device filter");
    for (size_t i = 0; i < allow.n; i++) {
        const struct xmp_dev_rule *r = &allow.r[i];
        if ((rc = allow_device(dir, r, err)) <= 0) {
            if (rc < 0)
                return -1;
            continue;
        }
        if (r->major != XMP_DEV_ANY && r->minor != XMP_DEV_ANY) {
            if (!xmp_devices_append(&denied, r))
                return xmp_error_set(err, ENOMEM, "device filter");
            continue;
        }
        for (size_t k = 0; k < want->n; k++) {
            struct xmp_dev_rule x;
            if (want->r[k].major != XMP_DEV_ANY && want->r[k].minor != XMP_DEV_ANY &&
                xmp_devices_intersect(r, &want->r[k], &x) && allow_device(dir, &x, err) < 0)
                return -1; /* a refused one is its own rule's to report */
        }
    }
    return judge_denied(cg, h->proc, &denied, err);
}

/* Hybrid: the worker's filter is a BPF program in the cgroup2 tree, which nothing above it
 * composes with, but the v1 devices cgroup xmprun runs in (a Slurm step's under
 * ConstrainDevices, a container's device rules) still refuses at open what it does not hold: a
 * job on a GPU it denies would start and fail later inside CUDA. So its list is composed with
 * the worker's rules as on v1, before the program is attached: a GPU of the job that it denies
 * is a setup error, another node a note. A list in default-allow mode reads "a *:* rwm" whatever
 * it denies (on v1 the kernel's EPERM at each write tells those; here nothing is written), so
 * it is taken at its word. */
static int
check_enclosing_devices(struct xmp_cgroup *cg, const struct xmp_dev_rules *want,
                        struct xmp_error *err)
{
    int i = hier_of(cg->layout, XMP_CG_DEVICES);
    cleanup_dev_rules struct xmp_dev_rules allow = {0};
    cleanup_dev_rules struct xmp_dev_rules denied = {0};
    char own[XMP_CG_PATH];

    if (i < 0)
        return 0; /* no v1 devices hierarchy: nothing encloses the job there */
    xmp_cg_own_dir(&cg->layout->h[i], own, sizeof(own));
    if (compose_enclosing(own, cg->layout->h[i].proc, want, &allow, &denied, err) < 0)
        return -1;
    return judge_denied(cg, cg->layout->h[i].proc, &denied, err);
}

static int
v1_create(struct xmp_cgroup *cg, const struct xmp_limits *limits, struct xmp_error *err)
{
    struct xmp_cg_layout *lay = cg->layout;
    struct xmp_cg_values vals = {0};
    unsigned mask = 0;
    int u = lay->unified, m;

    /* libcgroup 2.0.2 knows a cgroup2 mount only through the controllers enabled at its root;
     * in hybrid mode the tracking tree has none of them, so it cannot create there: plain
     * mkdir, first, so that the job can learn from it what the kernel offers. */
    if (u >= 0) {
        if (mkdir(cg->dir[u], 0755) < 0 && !(errno == EEXIST && lay->preset))
            return xmp_error_set(err, errno, "mkdir `%s`", cg->dir[u]);
        mask = 1u << u;
    }
    if (cg->parent == NULL && learn_caps(cg, err) < 0)
        goto fail;
    mask = v1_mask(cg, limits);
    if (cg->parent != NULL && (mask & ~cg->parent->own) != 0 &&
        extend_job(cg->parent, mask & ~cg->parent->own, err) < 0)
        goto fail;
    if (v1_values(cg, limits, mask, &vals, err) < 0)
        goto fail;
    if (xmp_cg_lc_create(cg, mask & ~(u >= 0 ? 1u << u : 0u), &vals, err) < 0)
        goto fail;
    /* Legacy: the devices controller, whose list takes one write per rule (more than
     * libcgroup's one value per file can carry), written once the directory exists. */
    if (limits->has_devices && u < 0 &&
        write_devices(cg, cg->dir[hier_of(lay, XMP_CG_DEVICES)], &limits->devices, err) < 0)
        goto fail;
    m = hier_of(lay, XMP_CG_MEMORY);
    if (m >= 0 && cg->parent == NULL) {
        /* Children count against the job's limit only with use_hierarchy, which must be set
         * before the first child exists (recent kernels fix it to 1). */
        char uh[8];
        if (xmp_cg_read(cg->dir[m], "memory.use_hierarchy", uh, sizeof(uh), NULL) == 0 &&
            uh[0] == '0' &&
            xmp_cg_lc_set(&lay->h[m], cg->rel, "memory.use_hierarchy", "1", err) < 0)
            goto fail;
    }
    cg->own = mask;
    if (u >= 0) {
        cg->dirfd = open(cg->dir[u], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (cg->dirfd < 0) {
            xmp_error_set(err, errno, "open `%s`", cg->dir[u]);
            goto fail;
        }
        /* Hybrid: the kernel runs the device programs of a process's cgroup2 cgroup whatever
         * is mounted beside it, and the worker is in its tracking directory from its clone3
         * on. That spares the worker a directory and a join in one more v1 hierarchy. */
        if (limits->has_devices &&
            (check_enclosing_devices(cg, &limits->devices, err) < 0 ||
             xmp_devices_attach_bpf(cg->dirfd, &limits->devices, &lay->dev_prog, err) < 0))
            goto fail;
    }
    return 0;
fail:
    if (cg->dirfd >= 0) {
        close(cg->dirfd);
        cg->dirfd = -1;
    }
    /* None of the directories existed before (the job's were checked, a child's are new in a
     * new job directory), so removing every one it may have made is safe. */
    remove_created(cg, mask | (u >= 0 ? 1u << u : 0u));
    return -1;
}

static int
v1_kill(struct xmp_cgroup *cg, struct xmp_error *err)
{
    const struct xmp_cg_layout *lay = cg->layout;

    /* Hybrid: every process of the worker is in its cgroup2 directory too (attach joins it
     * first), and cgroup.kill (5.14+) reaches every task there even while it forks. */
    if (tracked(lay))
        return xmp_cg2_kill(cg->dir[lay->unified], err);
    /* Legacy: every hierarchy the cgroup has a directory in, swept without freezing, so that
     * no instant at which xmprun may die leaves a frozen cgroup behind. */
    for (size_t i = 0; i < lay->n; i++)
        if (cg->own & (1u << i))
            xmp_cg_kill_procs_tree(cg->dir[i]);
    return 0;
}

static int
v1_read_stats(struct xmp_cgroup *cg, struct xmp_cgroup_stats *st, struct xmp_error *err)
{
    const struct xmp_cg_layout *lay = cg->layout;
    char buf[1024];
    int i;

    if ((i = hier_of(lay, XMP_CG_MEMORY)) >= 0 && (cg->own & (1u << i))) {
        if (xmp_cg_held_read(cg, (size_t)i, "memory.max_usage_in_bytes", buf, sizeof(buf), err) < 0)
            return -1;
        st->memory_peak = strtoll(buf, NULL, 10);
        if (xmp_cg_held_read(cg, (size_t)i, "memory.oom_control", buf, sizeof(buf), err) < 0)
            return -1;
        st->oom_kills = xmp_cg_keyed(buf, "oom_kill");
    }
    if ((i = hier_of(lay, XMP_CG_PIDS)) >= 0 && (cg->own & (1u << i)) &&
        xmp_cg_held_read(cg, (size_t)i, "pids.events", buf, sizeof(buf), NULL) == 0)
        st->pids_hits = xmp_cg_keyed(buf, "max");
    if (lay->unified >= 0 && lay->caps.v2_cpu_stat) {
        /* The tracking tree's cpu.stat (core cgroup2 accounting, no controller needed; so
         * libcgroup, which sees no controller there, cannot read it). */
        if (xmp_cg_held_read(cg, (size_t)lay->unified, "cpu.stat", buf, sizeof(buf), err) < 0)
            return -1;
        st->user_usec = xmp_cg_keyed(buf, "user_usec");
        st->system_usec = xmp_cg_keyed(buf, "system_usec");
    } else if ((i = hier_of(lay, XMP_CG_CPUACCT)) >= 0 && (cg->own & (1u << i))) {
        if (lay->caps.cpuacct_usage) {
            if (xmp_cg_held_read(cg, (size_t)i, "cpuacct.usage_user", buf, sizeof(buf), err) < 0)
                return -1;
            st->user_usec = strtoll(buf, NULL, 10) / 1000;
            if (xmp_cg_held_read(cg, (size_t)i, "cpuacct.usage_sys", buf, sizeof(buf), err) < 0)
                return -1;
            st->system_usec = strtoll(buf, NULL, 10) / 1000;
        } else {
            /* Before Linux 4.6 only cpuacct.stat, in USER_HZ ticks. */
            long hz = sysconf(_SC_CLK_TCK);
            if (xmp_cg_held_read(cg, (size_t)i, "cpuacct.stat", buf, sizeof(buf), err) < 0)
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
