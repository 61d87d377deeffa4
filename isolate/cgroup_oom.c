/* cgroups, what the kernel says about limits: which cgroup's memory limit fired for an OOM kill
 * (the job's own cgroups and the enclosing ones xmprun did not create), the smallest enclosing
 * limit, and the job's path in each hierarchy for the report. */
#include "isolate/cgroup.h"
#include "isolate/cgroup_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* v1 reports "no limit" as PAGE_COUNTER_MAX pages (about 2^63 bytes). */
#define UNLIMITED_FROM (INT64_C(1) << 62)

struct level {
    const struct xmp_cgroup *cg; /* NULL above the job */
    const char *dir;
    int64_t limit, memsw_limit; /* -1 for none */
};

/* The hierarchy that holds the memory controller: the unified one, else v1 memory. */
static int
memory_hier(const struct xmp_cg_layout *l)
{
    if (l->mode == XMP_CGROUP_MODE_UNIFIED)
        return l->unified;
    for (size_t i = 0; i < l->n; i++)
        if (!l->h[i].v2 && (l->h[i].ctrls & XMP_CG_MEMORY))
            return (int)i;
    return -1;
}

static int64_t
read_int(const char *dir, const char *file)
{
    char buf[64];

    if (xmp_cg_read(dir, file, buf, sizeof(buf), NULL) < 0)
        return -1;
    if (strncmp(buf, "max", 3) == 0)
        return -1;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    return end == buf || errno != 0 || v < 0 ? -1 : (int64_t)v;
}

/* The memory limit of one level in bytes, -1 for none. */
static int64_t
level_limit(const struct xmp_cg_hier *h, const char *dir)
{
    int64_t v = read_int(dir, h->v2 ? "memory.max" : "memory.limit_in_bytes");

    return v >= UNLIMITED_FROM ? -1 : v;
}

/* 1 when the high watermark of a v1 counter reached its limit (within one charge batch, 64
 * pages, which a charge may fall short by), else 0. */
static int64_t
v1_at_limit(const char *dir, const char *usage, int64_t limit, bool fresh)
{
    int64_t max = limit < 0 ? -1 : fresh ? 0 : read_int(dir, usage);

    return max >= 0 && max + 64 * 4096 >= limit ? 1 : 0;
}

/* A count that grows when this level's limit is hit (see struct xmp_cgroup_oom_snap). v2:
 * memory.events "oom". v1 counts a hit in memory.failcnt, but since Linux 6.14 only for the
 * memory counter, not for memsw (memory plus swap), which is charged first: with swap: 0 both
 * limits are equal and memsw fires, unseen. So a watermark that reached its limit counts as a
 * hit too (it never goes down: xmprun resets none). In a cgroup that nothing has run in yet
 * (fresh) every counter is 0, and none is read. */
static int64_t
level_count(const struct xmp_cg_hier *h, const struct level *lv, bool fresh)
{
    char buf[512];

    if (h->v2) {
        if (fresh)
            return 0;
        if (xmp_cg_read(lv->dir, "memory.events.local", buf, sizeof(buf), NULL) < 0 &&
            xmp_cg_read(lv->dir, "memory.events", buf, sizeof(buf), NULL) < 0)
            return -1;
        return xmp_cg_keyed(buf, "oom");
    }
    int64_t mem = fresh ? 0 : read_int(lv->dir, "memory.failcnt");
    int64_t memsw = lv->memsw_limit < 0 ? -1
                    : fresh             ? 0
                                        : read_int(lv->dir, "memory.memsw.failcnt");
    if (mem < 0)
        return -1;
    return mem + (memsw > 0 ? memsw : 0) +
           v1_at_limit(lv->dir, "memory.max_usage_in_bytes", lv->limit, fresh) +
           v1_at_limit(lv->dir, "memory.memsw.max_usage_in_bytes", lv->memsw_limit, fresh);
}

/* The cgroups above the job that count its memory, learned once per job: xmprun's own cgroup
 * and its ancestors up to the mount's root, each with its limits. On v1 a cgroup counts its
 * children's memory only with memory.use_hierarchy 1 (always, since Linux 5.16): the list
 * stops below the first that does not. Their limits are read once too: an enclosing limit that
 * changes while the job runs is not followed. */
static void
learn_enclosing(struct xmp_cg_layout *l, int m)
{
    const struct xmp_cg_hier *h = &l->h[m];
    char dir[XMP_CG_PATH];

    l->encl_known = true;
    if (snprintf(dir, sizeof(dir), "%s%s", h->mount, strcmp(h->own, "/") == 0 ? "" : h->own) >=
        (int)sizeof(dir))
        return;
    while (l->n_encl < XMP_CG_MAX_ENCL) {
        struct xmp_cg_encl *e = &l->encl[l->n_encl];
        char uh[8];
        if (!h->v2 && xmp_cg_read(dir, "memory.use_hierarchy", uh, sizeof(uh), NULL) == 0 &&
            uh[0] == '0')
            break;
        snprintf(e->dir, sizeof(e->dir), "%s", dir);
        e->limit = level_limit(h, dir);
        e->memsw_limit = h->v2 ? -1 : read_int(dir, "memory.memsw.limit_in_bytes");
        if (e->memsw_limit >= UNLIMITED_FROM)
            e->memsw_limit = -1;
        l->n_encl++;
        if (strlen(dir) <= strlen(h->mount))
            break;
        char up[XMP_CG_PATH];
        xmp_cg_parent_dir(dir, up, sizeof(up));
        snprintf(dir, sizeof(dir), "%s", up);
    }
}

/* The levels of cg's chain in the memory hierarchy that have a limit (only those can fire):
 * cg and its parents that have a memory directory, then the enclosing cgroups. */
static size_t
chain(const struct xmp_cgroup *cg, struct level *lv, size_t max)
{
    struct xmp_cg_layout *l = cg->layout;
    int m = memory_hier(l);
    size_t n = 0;

    if (m < 0)
        return 0;
    for (const struct xmp_cgroup *c = cg; c != NULL && n < max; c = c->parent) {
        if (!(c->own & (1u << m)) || (c->mem_limit < 0 && c->memsw_limit < 0))
            continue;
        lv[n++] = (struct level){c, c->dir[m], c->mem_limit, c->memsw_limit};
    }
    if (!l->encl_known)
        learn_enclosing(l, m);
    for (size_t i = 0; i < l->n_encl && n < max; i++) {
        const struct xmp_cg_encl *e = &l->encl[i];
        if (e->limit >= 0 || e->memsw_limit >= 0)
            lv[n++] = (struct level){NULL, e->dir, e->limit, e->memsw_limit};
    }
    return n;
}

/* An enclosing level's path as /proc/self/cgroup shows it: the mount's root plus the
 * directory's place below the mount point. */
static void
proc_path(const struct xmp_cg_hier *h, const char *dir, char *buf, size_t size)
{
    const char *rel = dir + strlen(h->mount);

    if (strcmp(h->root, "/") == 0)
        snprintf(buf, size, "%s", rel[0] ? rel : "/");
    else
        snprintf(buf, size, "%s%s", h->root, rel);
}

/* ---- v1 OOM notifications ---- */

static void
watch_dir(struct xmp_cg_layout *l, const struct xmp_cgroup *cg, const char *dir)
{
    char ctl[64];
    int ofd, efd;

    for (size_t i = 0; i < l->n_watch; i++)
        if (strcmp(l->watch[i].dir, dir) == 0)
            return;
    if (l->n_watch == XMP_CG_MAX_WATCH || strlen(dir) >= sizeof(l->watch[0].dir))
        return;
    char path[XMP_CG_PATH + 32];
    snprintf(path, sizeof(path), "%s/memory.oom_control", dir);
    if ((ofd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return;
    efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    snprintf(ctl, sizeof(ctl), "%d %d", efd, ofd);
    /* The kernel keeps what it needs of the control file; the eventfd carries the watch. */
    if (efd < 0 || xmp_cg_write(dir, "cgroup.event_control", ctl, NULL) < 0) {
        if (efd >= 0)
            close(efd);
        close(ofd);
        return;
    }
    close(ofd);
    struct xmp_cg_oom_watch *w = &l->watch[l->n_watch++];
    w->cg = cg;
    w->efd = efd;
    w->count = 0;
    snprintf(w->dir, sizeof(w->dir), "%s", dir);
}

void
xmp_cg_oom_watch(struct xmp_cgroup *cg)
{
    struct xmp_cg_layout *l = cg->layout;
    struct level lv[XMP_CGROUP_MAX_LEVELS];
    int m = memory_hier(l);

    if (m < 0 || l->h[m].v2)
        return;
    if (cg->parent == NULL) {
        size_t n = chain(cg, lv, XMP_CGROUP_MAX_LEVELS);
        for (size_t i = 0; i < n; i++)
            watch_dir(l, lv[i].cg, lv[i].dir);
    } else if (cg->parent->parent != NULL && (cg->parent->own & (1u << m)) &&
               (cg->parent->mem_limit >= 0 || cg->parent->memsw_limit >= 0)) {
        watch_dir(l, cg->parent, cg->parent->dir[m]);
    }
}

void
xmp_cg_oom_unwatch(struct xmp_cgroup *cg)
{
    struct xmp_cg_layout *l = cg->layout;

    for (size_t i = 0; l != NULL && i < l->n_watch;) {
        if (l->watch[i].cg == cg || cg->owns_layout) {
            close(l->watch[i].efd);
            l->watch[i] = l->watch[--l->n_watch];
        } else {
            i++;
        }
    }
}

/* The notifications of the watch on dir so far (read now), or -1 when dir is not watched. */
static int64_t
level_notes(struct xmp_cg_layout *l, const char *dir)
{
    for (size_t i = 0; i < l->n_watch; i++) {
        struct xmp_cg_oom_watch *w = &l->watch[i];
        eventfd_t v;
        if (strcmp(w->dir, dir) != 0)
            continue;
        while (eventfd_read(w->efd, &v) == 0)
            w->count += (int64_t)v;
        return w->count;
    }
    return -1;
}

void
xmp_cgroup_oom_snapshot(const struct xmp_cgroup *cg, struct xmp_cgroup_oom_snap *snap)
{
    struct level lv[XMP_CGROUP_MAX_LEVELS];
    int m = memory_hier(cg->layout);

    snap->n = chain(cg, lv, XMP_CGROUP_MAX_LEVELS);
    for (size_t i = 0; i < snap->n; i++) {
        snap->count[i] = level_count(&cg->layout->h[m], &lv[i], lv[i].cg == cg);
        snap->notes[i] = level_notes(cg->layout, lv[i].dir);
    }
}

bool
xmp_cgroup_oom_site(const struct xmp_cgroup *cg, const struct xmp_cgroup_oom_snap *since,
                    struct xmp_cgroup_oom_site *site)
{
    struct level lv[XMP_CGROUP_MAX_LEVELS];
    int m = memory_hier(cg->layout);
    size_t n = chain(cg, lv, XMP_CGROUP_MAX_LEVELS);

    memset(site, 0, sizeof(*site));
    site->limit = -1;
    /* v1 with watches: a notification reaches the cgroup that ran out of memory and every
     * cgroup below it, so the outermost watched level that got one is where the limit fired. */
    size_t at = n, from = 0;
    for (size_t i = 0; i < n && i < since->n; i++)
        if (since->notes[i] >= 0 && level_notes(cg->layout, lv[i].dir) > since->notes[i])
            at = i;
    /* Otherwise the innermost level whose count grew: with v2's hierarchical memory.events
     * the level that fired and all above it grow, never the ones below it. A level without a
     * limit cannot have fired, nor a watched one that got no notification. After a
     * notification the limit fired there or at an unwatched level above it (a cgroup whose
     * cgroup.event_control xmprun may not write): one of those whose count grew wins. */
    if (at < n)
        from = at + 1;
    for (size_t i = from; i < n && i < since->n; i++) {
        if (since->count[i] >= 0 && since->notes[i] < 0 &&
            level_count(&cg->layout->h[m], &lv[i], false) > since->count[i]) {
            at = i;
            break;
        }
    }
    if (at == n)
        return false;
    const struct xmp_cg_hier *h = &cg->layout->h[m];
    site->cg = lv[at].cg;
    site->enclosing = lv[at].cg == NULL;
    site->limit = lv[at].limit >= 0 ? lv[at].limit : lv[at].memsw_limit;
    if (site->enclosing)
        proc_path(h, lv[at].dir, site->path, sizeof(site->path));
    return true;
}

bool
xmp_cgroup_enclosing_limit(const struct xmp_cgroup *job, int64_t *limit, char *path, size_t size)
{
    struct level lv[XMP_CGROUP_MAX_LEVELS];
    int m = memory_hier(job->layout);
    size_t n = chain(job, lv, XMP_CGROUP_MAX_LEVELS);
    bool found = false;

    *limit = -1;
    for (size_t i = 0; i < n; i++) {
        if (lv[i].cg != NULL || lv[i].limit < 0)
            continue;
        if (!found || lv[i].limit < *limit) {
            *limit = lv[i].limit;
            proc_path(&job->layout->h[m], lv[i].dir, path, size);
            found = true;
        }
    }
    return found;
}

size_t
xmp_cgroup_paths(const struct xmp_cgroup *cg, struct xmp_cgroup_hier_path *out, size_t max)
{
    const struct xmp_cg_layout *l = cg->layout;
    size_t n = 0;

    for (size_t i = 0; i < l->n && n < max; i++) {
        const struct xmp_cg_hier *h = &l->h[i];
        if (!(cg->own & (1u << i)))
            continue;
        snprintf(out[n].hier, sizeof(out[n].hier), "%s", h->v2 ? "unified" : h->name);
        if (snprintf(out[n].path, sizeof(out[n].path), "%s/%s",
                     strcmp(h->proc, "/") == 0 ? "" : h->proc, cg->rel) >= (int)sizeof(out[n].path))
            continue; /* too long for the report: left out rather than cut */
        n++;
    }
    return n;
}

const char *
xmp_cgroup_owner_kind(const char *path)
{
    static const char *const containers[] = {"libpod",   "docker",        "containerd", "crio-",
                                             "kubepods", "machine.slice", "lxc"};
    const char *last = strrchr(path, '/');
    size_t ll;

    /* The real root has no limit: a limited "/" is the root of a cgroup namespace, which is
     * what a container with its own cgroup namespace shows. */
    if (strcmp(path, "/") == 0)
        return "cgroup namespace root";
    for (size_t i = 0; i < sizeof(containers) / sizeof(containers[0]); i++)
        if (strstr(path, containers[i]) != NULL)
            return "container";
    if (strstr(path, "/step_") != NULL)
        return "Slurm step";
    if (strstr(path, "/job_") != NULL)
        return "Slurm job";
    last = last != NULL ? last + 1 : path;
    ll = strlen(last);
    if ((ll > 8 && strcmp(last + ll - 8, ".service") == 0) ||
        (ll > 6 && strcmp(last + ll - 6, ".scope") == 0) ||
        (ll > 6 && strcmp(last + ll - 6, ".slice") == 0))
        return "systemd unit";
    return "cgroup";
}

int
xmp_cgroup_observe(enum xmp_cgroup_mode mode, struct xmp_cgroup **out, struct xmp_error *err)
{
    struct xmp_cg_layout *layout = calloc(1, sizeof(*layout));
    struct xmp_cgroup *cg = NULL;

    if (layout == NULL)
        return xmp_error_set(err, ENOMEM, "cgroup layout");
    if (xmp_cg_load_layout(mode, layout, err) < 0 ||
        xmp_cg_new_cgroup(layout, NULL, "", &cg, err) < 0) {
        free(layout);
        return xmp_error_wrap(err, "own cgroup");
    }
    /* It owns no directory (own is 0): its chain is the enclosing levels alone. */
    cg->owns_layout = true;
    *out = cg;
    return 0;
}

int
xmp_cgroup_check_writable(const struct xmp_cgroup *observed, struct xmp_error *err)
{
    struct xmp_error none = {0};

    if (xmp_cg_check_own_dirs(observed->layout, err) == 0)
        return 0;
    /* A regular user in a Slurm step: the cgroups spank_xmprun made, if it did. */
    if ((err == NULL || err->errnum == EACCES || err->errnum == EPERM) &&
        xmp_cg_find_preset(observed->layout, &none) == 0) {
        xmp_error_clear(err);
        return 0;
    }
    return -1;
}
