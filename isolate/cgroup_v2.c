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
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The controllers xmprun enables (cgroup v2 names), and what needs each when one is missing. */
static const struct {
    const char *name;
    unsigned bit;
    const char *why;
} ctrl[] = {{"memory", XMP_CG_MEMORY, "a memory limit"},
            {"cpu", XMP_CG_CPU, "a CPU quota"},
            {"pids", XMP_CG_PIDS, "a process limit"},
            {"cpuset", XMP_CG_CPUSET, "a cpuset"}};

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
    /* Before Linux 5.14 there is no cgroup.kill: SIGKILL every task, in rounds, without the
     * freezer (see xmp_cg_kill_procs_tree for why). */
    xmp_cg_kill_procs_tree(dir);
    return 0;
}

/* From cgroup.events text: 1 populated, 0 not, -1 when it does not say. */
static int
populated_of(const char *events)
{
    int64_t populated = xmp_cg_keyed(events, "populated");

    return populated < 0 ? -1 : populated != 0;
}

bool
xmp_cg2_is_empty(const char *dir)
{
    char events[256];
    struct xmp_error e = {0};
    int populated;

    if (xmp_cg_read(dir, "cgroup.events", events, sizeof(events), &e) < 0)
        return e.errnum == ENOENT && access(dir, F_OK) < 0 ? true : xmp_cg_procs_empty_tree(dir);
    populated = populated_of(events);
    return populated >= 0 ? populated == 0 : xmp_cg_procs_empty_tree(dir);
}

int64_t
xmp_cg_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int
xmp_cg2_kill_and_wait(struct xmp_cgroup *cg, long timeout_ms, struct xmp_error *err)
{
    const char *dir = cg->dir[cg->layout->unified];
    char path[XMP_CG_PATH + 32];
    cleanup_close int fd = -1;
    int64_t start = xmp_cg_now_ms(), next_kill = start;

    snprintf(path, sizeof(path), "%s/cgroup.events", dir);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : xmp_error_set(err, errno, "open `%s`", path);
    for (;;) {
        int64_t now = xmp_cg_now_ms();
        struct pollfd pfd = {.fd = fd, .events = POLLPRI};
        char events[256];
        int populated;
        ssize_t n;

        if (now >= next_kill) {
            if (cg->ops->kill(cg, err) < 0)
                return -1;
            next_kill = now + 100;
        }
        /* Reading re-arms the notification, so a change after this read wakes the poll. A
         * cgroup removed under the open file reads ENODEV: nothing is left in it. */
        n = pread(fd, events, sizeof(events) - 1, 0);
        if (n < 0 && errno != ENODEV && errno != ENOENT)
            return xmp_error_set(err, errno, "read `%s`", path);
        events[n < 0 ? 0 : n] = '\0';
        populated = n < 0 ? 0 : populated_of(events);
        if (populated < 0)
            populated = !xmp_cg_procs_empty_tree(dir);
        if (populated == 0)
            return 0;
        if (now - start >= timeout_ms)
            return xmp_error_set(err, EBUSY, "cgroup `%s` still has processes after %ld ms",
                                 cg->path, timeout_ms);
        int64_t until = next_kill < start + timeout_ms ? next_kill : start + timeout_ms;
        if (poll(&pfd, 1, (int)(until > now ? until - now : 0)) < 0 && errno != EINTR)
            return xmp_error_set(err, errno, "poll `%s`", path);
    }
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

/* Enables in dir's cgroup.subtree_control the controllers in need, and those in want that are
 * delegated to it, with one write (the kernel takes "+a +b"); *enabled gets what is enabled
 * after. A missing controller in need is an error that names it and what needs it; one in
 * want is left out (the job's note says what that costs). allow_move: dir is xmprun's own
 * cgroup, which may hold xmprun itself; the move into a leaf is then made only when the kernel
 * refuses the write for it, since threaded controllers (cpu, pids, cpuset) may be enabled
 * beside processes and only the domain ones (memory) may not. */
static int
enable_controllers(const char *dir, unsigned need, unsigned want, bool allow_move,
                   unsigned *enabled, struct xmp_error *err)
{
    char avail[256], sub[256], missing[160] = "", plus[64] = "", names[64] = "";
    unsigned have = 0, add = 0;
    struct xmp_error e = {0};

    if (xmp_cg_read(dir, "cgroup.controllers", avail, sizeof(avail), err) < 0 ||
        xmp_cg_read(dir, "cgroup.subtree_control", sub, sizeof(sub), err) < 0)
        return -1;
    for (size_t i = 0; i < sizeof(ctrl) / sizeof(ctrl[0]); i++) {
        size_t len = strlen(missing);
        if (word_in(sub, ctrl[i].name))
            have |= ctrl[i].bit;
        else if (word_in(avail, ctrl[i].name) && ((need | want) & ctrl[i].bit))
            add |= ctrl[i].bit;
        else if (need & ctrl[i].bit)
            snprintf(missing + len, sizeof(missing) - len, "%s%s (for %s)", len ? ", " : "",
                     ctrl[i].name, ctrl[i].why);
    }
    if (missing[0] != '\0') {
        xmp_error_set(err, 0,
                      "cgroup controller%s %s %s not delegated to `%.64s` (ask for %s: systemd "
                      "Delegate=yes or DelegateControllers=, or set isolation.cgroups: optional)",
                      strchr(missing, ',') ? "s" : "", missing, strchr(missing, ',') ? "are" : "is",
                      dir, strchr(missing, ',') ? "them" : "it");
        if (err != NULL)
            err->errnum = ENODEV;
        return -1;
    }
    *enabled = have;
    if (add == 0)
        return 0;
    for (size_t i = 0; i < sizeof(ctrl) / sizeof(ctrl[0]); i++)
        if (add & ctrl[i].bit) {
            snprintf(plus + strlen(plus), sizeof(plus) - strlen(plus), "%s+%s", plus[0] ? " " : "",
                     ctrl[i].name);
            snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
                     names[0] ? ", " : "", ctrl[i].name);
        }
    if (xmp_cg_write(dir, "cgroup.subtree_control", plus, &e) < 0 && e.errnum == EBUSY &&
        allow_move) {
        if (move_self_to_leaf(dir, err) < 0)
            return xmp_error_wrap(err, "move xmprun out of its own cgroup");
        xmp_error_clear(&e);
        xmp_cg_write(dir, "cgroup.subtree_control", plus, &e);
    }
    /* The advice fits who runs xmprun: root's scopes live in the system manager, a user's in
     * their own (`systemd-run --user`, whose Delegate= a user may ask for). */
    if (e.errnum == EBUSY)
        return xmp_error_set(err, EBUSY,
                             "cannot enable %s in `%.64s`: other processes are in it; run xmprun "
                             "in a cgroup of its own (%s)",
                             names, dir,
                             geteuid() == 0 ? "systemd-run --scope -p Delegate=yes xmprun ..., "
                                              "or a dedicated child cgroup"
                                            : "systemd-run --user --scope -p Delegate=yes "
                                              "xmprun ...");
    if (e.errnum != 0) {
        if (err != NULL)
            *err = e;
        return -1;
    }
    *enabled = have | add;
    return 0;
}

/* The values of cg's directory, in the order set_limits used to write them. */
static int
v2_values(struct xmp_cgroup *cg, const struct xmp_limits *l, struct xmp_cg_values *vals,
          struct xmp_error *err)
{
    struct xmp_cg_layout *lay = cg->layout;
    const struct xmp_cg_hier *h = &lay->h[lay->unified];
    const char *dir = cg->dir[lay->unified];
    int u = lay->unified;
    char v[64];

    if (l->memory >= 0 && xmp_cg_values_add_int(vals, u, "memory.max", l->memory, err) < 0)
        return -1;
    if (l->memory_high >= 0 &&
        xmp_cg_values_add_int(vals, u, "memory.high", l->memory_high, err) < 0)
        return -1;
    if (l->memory_min >= 0 && xmp_cg_values_add_int(vals, u, "memory.min", l->memory_min, err) < 0)
        return -1;
    /* Without swap accounting (or swap) there is no memory.swap.max, and nothing to limit. A
     * job does not know yet (see v2_create). */
    if (l->swap >= 0 && cg->parent != NULL && lay->caps.swap_max &&
        xmp_cg_values_add_int(vals, u, "memory.swap.max", l->swap, err) < 0)
        return -1;
    if (l->cpus_milli >= 0) {
        xmp_cgroup_format_cpu_max(l->cpus_milli, v, sizeof(v));
        if (xmp_cg_values_add(vals, u, "cpu.max", v, err) < 0)
            return -1;
    }
    /* cpuset: auto without a cpuset controller: pinned by affinity alone (the job's note). */
    if (l->has_cpus && ((h->ctrls & XMP_CG_CPUSET) || !l->cpus_auto)) {
        char cpus[1024];
        if (!(h->ctrls & XMP_CG_CPUSET))
            return xmp_error_set(err, ENODEV,
                                 "a cpuset is asked for but the cpuset controller is not "
                                 "delegated to `%s`; set resources.worker.cpuset: none",
                                 dir);
        if (xmp_cpulist_format(&l->cpus, cpus, sizeof(cpus)) < 0)
            return xmp_error_set(err, ENAMETOOLONG, "cpuset too long");
        /* cpuset.mems stays empty: on v2 that is the parent's memory nodes. */
        if (xmp_cg_values_add(vals, u, "cpuset.cpus", cpus, err) < 0)
            return -1;
    }
    if (l->pids >= 0 && xmp_cg_values_add_int(vals, u, "pids.max", l->pids, err) < 0)
        return -1;
    return 0;
}

/* The controllers uses (xmp_limits_uses bits) cannot do without, and those worth enabling where
 * delegated: memory always (a worker's peak and its OOM kills in the report), cpuset for
 * `cpuset: auto` (sched_setaffinity pins the worker without one). */
static unsigned
needed(unsigned uses)
{
    return uses & (XMP_CG_MEMORY | XMP_CG_CPU | XMP_CG_PIDS | XMP_CG_CPUSET);
}

static unsigned
wanted(unsigned uses)
{
    return XMP_CG_MEMORY | (uses & XMP_CG_CPUSET_AUTO ? XMP_CG_CPUSET : 0);
}

/* The job's note: what its workers go without because a wanted controller is not delegated. */
static void
note_missing(struct xmp_cgroup *job, const char *own, unsigned uses, unsigned enabled)
{
    size_t len = 0;

    if (!(enabled & XMP_CG_MEMORY))
        len += (size_t)snprintf(job->note, sizeof(job->note),
                                "the memory controller is not delegated to `%.200s`: no memory "
                                "peak or OOM kill counts for the workers",
                                own);
    if ((uses & XMP_CG_CPUSET_AUTO) && !(enabled & XMP_CG_CPUSET) && len < sizeof(job->note))
        snprintf(job->note + len, sizeof(job->note) - len,
                 "%sthe cpuset controller is not delegated to `%.200s`: the workers are pinned to "
                 "their CPUs (cpuset: auto) by sched_setaffinity alone",
                 len > 0 ? "; " : "", own);
}

static int
v2_create(struct xmp_cgroup *cg, const struct xmp_limits *limits, struct xmp_error *err)
{
    struct xmp_cg_layout *lay = cg->layout;
    struct xmp_cg_hier *h = &lay->h[lay->unified];
    const char *dir = cg->dir[lay->unified];
    struct xmp_cg_values vals = {0};
    unsigned uses = xmp_limits_uses(limits) | limits->children, p_enabled = 0;
    char pdir[XMP_CG_PATH];

    xmp_cg_parent_dir(dir, pdir, sizeof(pdir));
    if (cg->parent == NULL) {
        if (enable_controllers(pdir, needed(uses), wanted(uses), true, &p_enabled, err) < 0)
            return -1;
        h->ctrls = p_enabled; /* what the job's own directory has */
    } else if (needed(uses) & ~h->ctrls) {
        /* A child that needs more than the job's limits.children said: enable it in xmprun's
         * own cgroup and the job, as the job's creation would have. */
        char own[XMP_CG_PATH];
        xmp_cg_parent_dir(pdir, own, sizeof(own));
        if (enable_controllers(own, needed(uses), 0, false, &p_enabled, err) < 0 ||
            enable_controllers(pdir, needed(uses), 0, false, &h->ctrls, err) < 0)
            return -1;
    }
    if (v2_values(cg, limits, &vals, err) < 0)
        return -1;
    cg->own = 1u << lay->unified;
    if (xmp_cg_lc_create(cg, cg->own, &vals, err) < 0)
        goto fail;
    if (cg->parent == NULL) {
        /* The job enables for its workers what they use, from what its own cgroup has. */
        unsigned children = needed(limits->children);
        if (enable_controllers(dir, children, wanted(limits->children) & p_enabled, false,
                               &h->ctrls, err) < 0)
            goto fail;
        note_missing(cg, pdir, limits->children, h->ctrls);
        /* Once per job, what the kernel offers (see struct xmp_cg_caps). */
        lay->caps.v2_kill = xmp_cg_exists(dir, "cgroup.kill");
        lay->caps.v2_cpu_stat = true;
        lay->caps.tracking = true;
        lay->caps.swap_max = xmp_cg_exists(dir, "memory.swap.max");
        lay->caps.peak = xmp_cg_exists(dir, "memory.peak");
        if (limits->swap >= 0 && lay->caps.swap_max) {
            char v[32];
            snprintf(v, sizeof(v), "%" PRId64, limits->swap);
            if (xmp_cg_lc_set(h, cg->rel, "memory.swap.max", v, err) < 0)
                goto fail;
        }
    }
    cg->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cg->dirfd < 0) {
        xmp_error_set(err, errno, "open `%s`", dir);
        goto fail;
    }
    if (limits->has_devices &&
        xmp_devices_attach_bpf(cg->dirfd, &limits->devices, &lay->dev_prog, err) < 0) {
        close(cg->dirfd);
        cg->dirfd = -1;
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
v2_read_stats(struct xmp_cgroup *cg, struct xmp_cgroup_stats *st, struct xmp_error *err)
{
    size_t u = (size_t)cg->layout->unified;
    char buf[1024];

    /* memory.peak exists from Linux 5.19; before it the report says "unknown" (-1), as it does
     * without a memory controller (see note_missing). */
    if (cg->layout->caps.peak && (cg->layout->h[u].ctrls & XMP_CG_MEMORY)) {
        if (xmp_cg_held_read(cg, u, "memory.peak", buf, sizeof(buf), err) < 0)
            return -1;
        st->memory_peak = strtoll(buf, NULL, 10);
    }
    if (cg->layout->h[u].ctrls & XMP_CG_MEMORY) {
        if (xmp_cg_held_read(cg, u, "memory.events", buf, sizeof(buf), err) < 0)
            return -1;
        st->oom_kills = xmp_cg_keyed(buf, "oom_kill");
    }
    /* pids.events exists where a process limit enabled the pids controller. */
    if (xmp_cg_held_read(cg, u, "pids.events", buf, sizeof(buf), NULL) == 0)
        st->pids_hits = xmp_cg_keyed(buf, "max");
    if (xmp_cg_held_read(cg, u, "cpu.stat", buf, sizeof(buf), err) < 0)
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
