/* cgroups, the common part: mode detection, the layout of the hierarchies xmprun uses, and the
 * public entry points, which dispatch to the unified or the v1 backend through an ops table chosen
 * once from the mode (cgroup_v2.c, cgroup_v1.c); attach, destroy and gc. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* cpu_set_t macros */
#endif
#include "isolate/cgroup.h"
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

#define CGROUP_ROOT "/sys/fs/cgroup"

/* ---- layout ---- */

int
xmp_cgroup_detect(enum xmp_cgroup_mode *mode, struct xmp_error *err)
{
    struct statfs sf;
    bool missing = false;

    /* `ip netns exec` mounts a fresh /sys for the namespace, where /sys/fs/cgroup is an empty
     * sysfs directory; a container may have no /sys/fs/cgroup at all. */
    if (statfs(CGROUP_ROOT, &sf) < 0) {
        if (errno != ENOENT)
            return xmp_error_set(err, errno, "statfs `%s`", CGROUP_ROOT);
        missing = true;
    }
    if (missing || sf.f_type == SYSFS_MAGIC)
        return xmp_error_set(err, 0,
                             "no cgroup filesystem is mounted at `%s` (`ip netns exec` mounts a "
                             "fresh /sys without one); use `nsenter --net=/run/netns/NAME`, which "
                             "keeps the host's mounts",
                             CGROUP_ROOT);
    if (sf.f_type != CGROUP2_SUPER_MAGIC && sf.f_type != TMPFS_MAGIC)
        return xmp_error_set(err, ENODEV, "`%s` is neither cgroup2 nor a tmpfs of v1 hierarchies",
                             CGROUP_ROOT);
    if (sf.f_type == CGROUP2_SUPER_MAGIC) {
        *mode = XMP_CGROUP_MODE_UNIFIED;
        return 0;
    }
    if (statfs(CGROUP_ROOT "/unified", &sf) == 0 && sf.f_type == CGROUP2_SUPER_MAGIC)
        *mode = XMP_CGROUP_MODE_HYBRID;
    else
        *mode = XMP_CGROUP_MODE_LEGACY;
    return 0;
}

static char *
slurp(const char *path, struct xmp_error *err)
{
    cleanup_fclose FILE *f = fopen(path, "re");
    char *buf = NULL;
    size_t cap = 0, len = 0;

    if (f == NULL) {
        xmp_error_set(err, errno, "open `%s`", path);
        return NULL;
    }
    for (;;) {
        if (len + 4096 + 1 > cap) {
            char *nb = realloc(buf, cap = cap ? cap * 2 : 16384);
            if (nb == NULL) {
                free(buf);
                xmp_error_set(err, ENOMEM, "read `%s`", path);
                return NULL;
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0)
            break;
    }
    buf[len] = '\0';
    return buf;
}

static const struct {
    unsigned bit;
    const char *name;
} v1_ctrls[] = {
    {XMP_CG_MEMORY, "memory"},   {XMP_CG_CPU, "cpu"},   {XMP_CG_CPUACCT, "cpuacct"},
    {XMP_CG_CPUSET, "cpuset"},   {XMP_CG_PIDS, "pids"}, {XMP_CG_FREEZER, "freezer"},
    {XMP_CG_DEVICES, "devices"},
};

static int
add_hier(struct xmp_cg_layout *l, const char *proc, const char *mountinfo, const char *ctrl,
         unsigned bit, struct xmp_error *err)
{
    struct xmp_cg_hier *h = &l->h[l->n];
    char path[XMP_CG_PATH];

    int id = -1;

    if (xmp_cgroup_parse_proc(proc, ctrl ? ctrl : "", path, sizeof(path), &id, err) < 0)
        return -1;
    /* The controller list of that line ("cpu,cpuacct"), the hierarchy's name in the report. */
    for (const char *p = proc; ctrl != NULL && p != NULL && *p;
         p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        char *end = NULL;
        if (strtol(p, &end, 10) == id && *end == ':') {
            size_t len = strcspn(end + 1, ":\n");
            snprintf(h->name, sizeof(h->name), "%.*s", (int)len, end + 1);
            break;
        }
    }
    if (xmp_cgroup_parse_mountinfo(mountinfo, ctrl, h->mount, sizeof(h->mount), h->root,
                                   sizeof(h->root), err) < 0)
        return -1;
    xmp_cgroup_own_normalize(path);
    snprintf(h->proc, sizeof(h->proc), "%s", path);
    /* own is kept relative to the mount root, which is what libcgroup's names are relative to:
     * in a cgroup namespace or a container's bind mount that is not the same as path. */
    if (xmp_cgroup_join("", h->root, path, h->own, sizeof(h->own), NULL) < 0)
        return xmp_error_set(err, ENOENT,
                             "xmprun's cgroup %s is not below the root %s of the hierarchy "
                             "mounted at %s: that mount shows another part of the tree (made in "
                             "another cgroup namespace?); mount the hierarchy from this namespace",
                             path, h->root, h->mount);
    if (h->own[0] == '\0')
        strcpy(h->own, "/");
    h->v2 = ctrl == NULL;
    h->ctrls = bit;
    snprintf(h->lc_ctrl, sizeof(h->lc_ctrl), "%s", ctrl ? ctrl : "");
    l->n++;
    return 0;
}

/* Fills the layout for mode: one v1 hierarchy per distinct mount of the controllers xmprun uses
 * (cpu and cpuacct are often comounted), plus the cgroup2 one in hybrid and unified mode. */
static int
load_layout(enum xmp_cgroup_mode mode, struct xmp_cg_layout *l, struct xmp_error *err)
{
    cleanup_free char *proc = slurp("/proc/self/cgroup", err);
    cleanup_free char *mountinfo = proc ? slurp("/proc/self/mountinfo", err) : NULL;

    if (mountinfo == NULL)
        return -1;
    memset(l, 0, sizeof(*l));
    l->mode = mode;
    l->unified = -1;
    l->dev_prog.fd = -1;
    if (mode == XMP_CGROUP_MODE_LEGACY || mode == XMP_CGROUP_MODE_HYBRID) {
        for (size_t i = 0; i < sizeof(v1_ctrls) / sizeof(v1_ctrls[0]); i++) {
            char mnt[XMP_CG_PATH], root[XMP_CG_PATH];
            bool merged = false;
            struct xmp_error miss = {0};
            if (xmp_cgroup_parse_mountinfo(mountinfo, v1_ctrls[i].name, mnt, sizeof(mnt), root,
                                           sizeof(root), &miss) < 0) {
                /* Not mounted: create says so when a limit needs it, and names a mount that
                 * is there but hidden under another (see note_hidden). */
                if (l->hidden[0] == '\0' && strstr(miss.msg, " is hidden by ") != NULL)
                    snprintf(l->hidden, sizeof(l->hidden), "%s", miss.msg);
                continue;
            }
            for (size_t j = 0; j < l->n; j++) {
                if (strcmp(l->h[j].mount, mnt) == 0) {
                    l->h[j].ctrls |= v1_ctrls[i].bit;
                    merged = true;
                }
            }
            if (!merged && add_hier(l, proc, mountinfo, v1_ctrls[i].name, v1_ctrls[i].bit, err) < 0)
                return xmp_error_wrap(err, "%s hierarchy", v1_ctrls[i].name);
        }
        if (l->n == 0) {
            /* A pure v2 machine's cgroup2 mount may be what a tmpfs hides. */
            struct xmp_error miss = {0};
            char mnt[XMP_CG_PATH], root[XMP_CG_PATH];
            if (l->hidden[0] == '\0' &&
                xmp_cgroup_parse_mountinfo(mountinfo, NULL, mnt, sizeof(mnt), root, sizeof(root),
                                           &miss) < 0 &&
                strstr(miss.msg, " is hidden by ") != NULL)
                snprintf(l->hidden, sizeof(l->hidden), "%s", miss.msg);
            return xmp_error_set(err, ENODEV, "no cgroup v1 controller is mounted%s%s",
                                 l->hidden[0] ? "; " : "", l->hidden[0] ? l->hidden : "");
        }
    }
    if (mode == XMP_CGROUP_MODE_HYBRID || mode == XMP_CGROUP_MODE_UNIFIED) {
        l->unified = (int)l->n;
        if (add_hier(l, proc, mountinfo, NULL, 0, err) < 0)
            return xmp_error_wrap(err, "cgroup2 hierarchy");
        /* libcgroup knows a v2 hierarchy by the controllers enabled at its root; in hybrid mode
         * those are none of the ones xmprun needs, so the tracking tree is handled directly. */
        if (mode == XMP_CGROUP_MODE_UNIFIED)
            strcpy(l->h[l->unified].lc_ctrl, "memory");
    }
    return 0;
}

static bool
page_is_zero(const void *page, size_t size)
{
    const uint64_t *w = page;
    uint64_t any = 0;

    for (size_t i = 0; i < size / sizeof(*w); i++)
        any |= w[i];
    return any == 0;
}

void
xmp_cg_release_zero_pages(void *addr, size_t len)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t from = ((uintptr_t)addr + page - 1) & ~(page - 1);
    uintptr_t to = ((uintptr_t)addr + len) & ~(page - 1);
    unsigned char resident[64];

    for (uintptr_t chunk = from; chunk < to; chunk += sizeof(resident) * page) {
        size_t n = (to - chunk) / page;
        uintptr_t run = 0; /* the first page of a run of zero pages */

        if (n > sizeof(resident))
            n = sizeof(resident);
        if (mincore((void *)chunk, n * page, resident) < 0)
            return;
        for (size_t i = 0; i <= n; i++) {
            uintptr_t p = chunk + i * page;
            bool zero = i < n && (resident[i] & 1) && page_is_zero((const void *)p, page);
            if (zero && run == 0)
                run = p;
            else if (!zero && run != 0) {
                madvise((void *)run, p - run, MADV_DONTNEED);
                run = 0;
            }
        }
    }
}

/* Where the loader's anonymous zeroes begin in the segment that holds range[0] (in): past its
 * file-backed part (range[1], out). */
static int
anon_start(struct dl_phdr_info *info, size_t size, void *arg)
{
    uintptr_t *range = arg;

    (void)size;
    for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t seg = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && range[0] >= seg && range[0] < seg + ph->p_memsz) {
            range[1] = seg + ph->p_filesz;
            return 1;
        }
    }
    return 0;
}

/* cgroup_init zeroes libcgroup's mount table (cg_mount_table: 100 controllers with their mount
 * paths, 800 KiB of .bss) whole, at every call, and so keeps all of it resident for the life of
 * the process although only its first entries are ever filled: 0.85 MiB, most of an idle
 * launcher's private memory. Its zero pages are given back. The table is looked up rather than
 * referenced, which would copy it into xmprun at load (a copy relocation). */
static void
release_mount_table(void)
{
    void *table = dlsym(RTLD_DEFAULT, "cg_mount_table");
    const ElfW(Sym) *sym = NULL;
    Dl_info info;

    if (table == NULL || dladdr1(table, &info, (void **)&sym, RTLD_DL_SYMENT) == 0 || sym == NULL ||
        info.dli_saddr != table)
        return;
    uintptr_t range[2] = {(uintptr_t)table, 0};
    if (dl_iterate_phdr(anon_start, range) == 0)
        return;
    uintptr_t from = range[1] > range[0] ? range[1] : range[0];
    uintptr_t end = range[0] + sym->st_size;
    if (end > from)
        xmp_cg_release_zero_pages((void *)from, end - from);
}

/* libcgroup 2.0.2 reads /proc/mounts once (cgroup_init) and takes the first mount of each
 * controller. In a private mount namespace that lists cgroup mounts hidden under later ones
 * (a tmpfs over /sys/fs/cgroup, then fresh mounts) its scan fails (a hidden cgroup2 mount point
 * has no cgroup.controllers) or picks a mount point that is no longer there. The layout holds
 * the mount visible at each path (from mountinfo); where libcgroup's differs, or its scan
 * failed, that hierarchy's files are handled directly. */
static void
use_visible_mounts(struct xmp_cg_layout *l, bool lc_ok)
{
    for (size_t i = 0; i < l->n; i++) {
        struct xmp_cg_hier *h = &l->h[i];
        char *lc_mount = NULL;

        if (h->lc_ctrl[0] == '\0')
            continue;
        h->direct = !lc_ok || cgroup_get_subsys_mount_point(h->lc_ctrl, &lc_mount) != 0 ||
                    lc_mount == NULL || strcmp(lc_mount, h->mount) != 0;
        free(lc_mount);
    }
}

/* A controller that a limit needs is not mounted (ENODEV): if its mount is there but hidden
 * under a later one, that is what the user must fix. */
static void
note_hidden(struct xmp_error *err, const struct xmp_cg_layout *l)
{
    if (err == NULL || err->errnum != ENODEV || l->hidden[0] == '\0')
        return;
    xmp_error_set(err, 0,
                  "%s (a private mount namespace?), and no other is visible: mount it again, or "
                  "set isolation.cgroups: optional",
                  l->hidden);
    err->errnum = ENODEV;
}

/* ---- objects ---- */

static void
own_dir(const struct xmp_cg_hier *h, char *buf, size_t size)
{
    /* Both parts are below XMP_CG_PATH; a cut result fails later at new_cgroup's length check. */
    if (snprintf(buf, size, "%s%s", h->mount, strcmp(h->own, "/") == 0 ? "" : h->own) < 0)
        buf[0] = '\0';
}

static int
new_cgroup(struct xmp_cg_layout *layout, struct xmp_cgroup *parent, const char *rel,
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
        own_dir(&layout->h[i], base, sizeof(base));
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
        own_dir(&layout->h[i], base, sizeof(base));
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

static void
free_cgroup(struct xmp_cgroup *cg)
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

/* The message for isolation.cgroups: required when xmprun may not write its own cgroup: why,
 * and what to do. No strerror text is appended (errnum is kept), so that the advice, not the
 * errno's name, fits in the message. */
static int
explain_access(struct xmp_error *err, int e, const char *dir)
{
    if (e == EROFS)
        xmp_error_set(err, 0,
                      "cannot create cgroups: the cgroup filesystem is mounted read-only (in a "
                      "container: run with --cgroupns=private and a writable /sys/fs/cgroup, or "
                      "--privileged; or set isolation.cgroups: optional)");
    else if (e == EACCES || e == EPERM) {
        /* A long path keeps only its end, marked as cut, so that the advice fits in the message
         * even with a prefix. */
        size_t len = strlen(dir);
        xmp_error_set(err, 0,
                      "cannot create cgroups in `%s%s`: not root and not delegated (ask for a "
                      "delegated cgroup: systemd-run --user -p Delegate=yes --scope ..., or set "
                      "isolation.cgroups: optional)",
                      len > 64 ? "..." : "", len > 64 ? dir + len - 61 : dir);
    } else
        return xmp_error_set(err, e, "cannot create cgroups in `%s`", dir);
    if (err != NULL)
        err->errnum = e;
    return -1;
}

/* What xmp_cgroup_prepare left for the next create_job: whether it ran, and cgroup_init's
 * return. */
static bool lc_prepared;
static int lc_prepared_ret;

void
xmp_cgroup_prepare(void)
{
    lc_prepared_ret = cgroup_init();
    release_mount_table();
    lc_prepared = true;
}

int
xmp_cgroup_create_job(enum xmp_cgroup_mode mode, const char *name, const struct xmp_limits *limits,
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
    if (load_layout(mode, layout, err) < 0) {
        free(layout);
        if (ret != 0 && err != NULL) {
            /* Neither libcgroup nor the visible mounts give a usable layout: both reasons. */
            struct xmp_error lc = {0};
            xmp_cg_lcerror(&lc, ret, "libcgroup: read mounts for", "/proc/mounts");
            xmp_error_wrap(err, "cgroup layout (%s)", lc.msg);
        }
        return -1;
    }
    use_visible_mounts(layout, ret == 0);
    for (size_t i = 0; i < layout->n; i++) {
        char base[XMP_CG_PATH];
        own_dir(&layout->h[i], base, sizeof(base));
        if (access(base, W_OK) < 0) {
            int e = errno;
            free(layout);
            return explain_access(err, e, base);
        }
    }
    if (new_cgroup(layout, NULL, name, &cg, err) < 0) {
        free(layout);
        return -1;
    }
    cg->owns_layout = true;
    if (check_absent(cg, err) < 0) {
        free_cgroup(cg);
        return -1;
    }
    if (cg->ops->create(cg, limits, err) < 0) {
        note_hidden(err, layout);
        /* A delegation can allow mkdir and still refuse a control file (or the reverse). */
        if (err != NULL &&
            (err->errnum == EACCES || err->errnum == EPERM || err->errnum == EROFS)) {
            char base[XMP_CG_PATH];
            own_dir(&layout->h[0], base, sizeof(base));
            explain_access(err, err->errnum, base);
        }
        free_cgroup(cg);
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
    if (new_cgroup(parent->layout, parent, rel, &cg, err) < 0)
        return -1;
    if (cg->ops->create(cg, limits, err) < 0) {
        note_hidden(err, cg->layout);
        free_cgroup(cg);
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
xmp_cgroup_devices_note(const struct xmp_cgroup *cg)
{
    return cg->dev_note;
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
xmp_cgroup_signal(struct xmp_cgroup *cg, int sig, struct xmp_error *err)
{
    struct signal_pids s = {sig, getpid()};
    int i = procs_hier(cg), fd;

    if (i < 0)
        return 0;
    fd = xmp_cg_held_fd(cg, (size_t)i, "cgroup.procs");
    if ((fd >= 0 ? xmp_cg_each_pid_fd(fd, true, signal_pid, &s)
                 : xmp_cg_each_pid(cg->procs[i], signal_pid, &s)) < 0)
        return xmp_error_set(err, errno, "read `%s`", cg->procs[i]);
    return 0;
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

static void
sleep_ms(long ms)
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
static int
kill_and_wait(struct xmp_cgroup *cg, long timeout_ms, struct xmp_error *err)
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
        sleep_ms(step);
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
static int
remove_dirs(struct xmp_cgroup *cg, struct xmp_error *err)
{
    int ret = 0;

    for (size_t i = 0; i < cg->layout->n; i++) {
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

    for (size_t i = 0; i < cg->layout->n; i++) {
        struct xmp_error e = {0};
        if (!(cg->own & (1u << i)) || rmdir(cg->dir[i]) == 0 || errno == ENOENT)
            continue;
        for (int tries = 0;; tries++) {
            xmp_error_clear(&e);
            if (xmp_cg_rmdir_tree(cg->dir[i], &e) == 0 || e.errnum != EBUSY || tries == 20)
                break;
            xmp_cg_kill_procs_tree(cg->dir[i]);
            sleep_ms(10);
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

    if (wait && kill_and_wait(cg, 5000, err) < 0)
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
    free_cgroup(cg);
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
    for (size_t i = 0; i < cg->layout->n; i++)
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
    if (rm->n == rm->cap) {
        size_t cap = rm->cap > 0 ? rm->cap * 2 : 64;
        struct xmp_cgroup **q = realloc(rm->queue, cap * sizeof(*q));
        if (q != NULL) {
            rm->queue = q;
            rm->cap = cap;
        }
    }
    if (rm->n < rm->cap) {
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
            free_cgroup(cg);
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

static bool
seen_name(char (*names)[256], size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return true;
    return false;
}

int
xmp_cgroup_gc(enum xmp_cgroup_mode mode, bool (*is_orphan)(const char *name, void *data),
              void *data, struct xmp_error *err)
{
    struct xmp_cg_layout *layout = NULL;
    char(*names)[256] = NULL;
    size_t n = 0, cap = 0;
    int removed = 0, ret = 0;
    char self[64];

    if (mode == XMP_CGROUP_MODE_NONE)
        return 0;
    snprintf(self, sizeof(self), "xmprun-self-%ld", (long)getpid());
    layout = calloc(1, sizeof(*layout));
    if (layout == NULL)
        return xmp_error_set(err, ENOMEM, "cgroup gc");
    if (load_layout(mode, layout, err) < 0) {
        free(layout);
        return -1;
    }
    for (size_t i = 0; i < layout->n; i++) {
        char base[XMP_CG_PATH];
        DIR *d;
        struct dirent *de;
        own_dir(&layout->h[i], base, sizeof(base));
        d = opendir(base);
        if (d == NULL)
            continue;
        while ((de = readdir(d)) != NULL) {
            /* Never the leaf this process moved itself into, whatever is_orphan says. */
            if (de->d_type != DT_DIR || strncmp(de->d_name, "xmprun-", 7) != 0 ||
                strlen(de->d_name) >= 256 || strcmp(de->d_name, self) == 0 ||
                seen_name(names, n, de->d_name) || !is_orphan(de->d_name, data))
                continue;
            if (n == cap) {
                void *nn = realloc(names, (cap = cap ? cap * 2 : 8) * sizeof(*names));
                if (nn == NULL)
                    break;
                names = nn;
            }
            snprintf(names[n++], sizeof(names[0]), "%s", de->d_name);
        }
        closedir(d);
    }
    for (size_t k = 0; k < n; k++) {
        struct xmp_cgroup *cg = NULL;
        struct xmp_error e = {0};
        bool holds_self = false;
        /* caps are unknown here (zero): the kill and the wait look at every hierarchy. */
        if (new_cgroup(layout, NULL, names[k], &cg, &e) == 0) {
            cg->own = (1u << layout->n) - 1;
            for (size_t i = 0; i < layout->n; i++)
                holds_self = holds_self || xmp_cg_tree_has_pid(cg->dir[i], getpid());
        }
        /* An xmprun started inside a dead xmprun's leaf (from a process that was there) is in
         * a cgroup this scan finds orphaned: killing it would kill this very process. */
        if (holds_self) {
            free_cgroup(cg);
            continue;
        }
        /* A freezer left FROZEN (by an older xmprun that died between freeze and thaw, or by
         * anyone) holds its tasks with the SIGKILL pending: thaw first. */
        for (size_t i = 0; cg != NULL && i < layout->n; i++)
            xmp_cg_thaw_tree(cg->dir[i]);
        if (cg == NULL || kill_and_wait(cg, 5000, &e) < 0 || remove_dirs(cg, &e) < 0) {
            if (ret == 0 && err != NULL)
                *err = e;
            ret = -1;
        } else {
            removed++;
        }
        if (cg != NULL)
            free_cgroup(cg);
    }
    free(names);
    free(layout);
    return ret < 0 ? -1 : removed;
}

size_t
xmp_cgroup_dirs(const struct xmp_cgroup *cg, const char **dirs, size_t max)
{
    size_t n = 0;

    for (size_t i = 0; i < cg->layout->n && n < max; i++)
        dirs[n++] = cg->dir[i];
    return n;
}

/* A directory gc may take on the word of a state file: absolute, named xmprun-..., no "..",
 * on a cgroup filesystem. A state file is only written by xmprun, but its directory may be
 * one that others can write (a shared /tmp), so its paths are not trusted blindly. */
static int
check_gc_dir(const char *dir, struct xmp_error *err)
{
    const char *base = strrchr(dir, '/');
    char parent[XMP_CG_PATH];
    struct statfs sf;

    if (dir[0] != '/' || base == NULL || strncmp(base + 1, "xmprun-", 7) != 0 ||
        strstr(dir, "/..") != NULL || strlen(dir) >= XMP_CG_PATH)
        return xmp_error_set(err, EINVAL, "`%s` is not a directory xmprun makes", dir);
    xmp_cg_parent_dir(dir, parent, sizeof(parent));
    if (statfs(parent, &sf) < 0)
        return errno == ENOENT ? 0 : xmp_error_set(err, errno, "statfs `%s`", parent);
    if (sf.f_type != CGROUP_SUPER_MAGIC && sf.f_type != CGROUP2_SUPER_MAGIC)
        return xmp_error_set(err, EINVAL, "`%s` is not on a cgroup filesystem", dir);
    return 0;
}

/* Looks below base (depth levels at most) for a directory X with X/rel a directory: the one
 * whose path ends in rel. */
static bool
find_below(const char *base, const char *rel, int depth, char *out, size_t size)
{
    char path[XMP_CG_PATH * 2];
    struct dirent *de;
    bool found = false;
    DIR *d;

    if (snprintf(path, sizeof(path), "%s/%s", base, rel) < (int)sizeof(path) &&
        access(path, F_OK) == 0)
        return snprintf(out, size, "%s", path) < (int)size;
    if (depth == 0 || (d = opendir(base)) == NULL)
        return false;
    while (!found && (de = readdir(d)) != NULL) {
        if (de->d_type != DT_DIR || de->d_name[0] == '.' ||
            snprintf(path, sizeof(path), "%s/%s", base, de->d_name) >= (int)sizeof(path))
            continue;
        found = find_below(path, rel, depth - 1, out, size);
    }
    closedir(d);
    return found;
}

/* A job's directory as the state file recorded it, where it is not: the xmprun that wrote it ran
 * in another cgroup namespace (a Slurm step's under task/cgroup, a container's), whose root is
 * some cgroup further down here. The path below the mount point is the same; so is the mount
 * point where both see the hierarchies at /sys/fs/cgroup/<controller>. The job's name is unique,
 * so the one directory that ends in that path is the job's. Searched only for dead jobs whose
 * directories are not where recorded. */
static bool
resolve_gc_dir(const char *dir, char *out, size_t size)
{
    cleanup_fclose FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[4096], mnt[XMP_CG_PATH], fstype[32];
    bool found = false;

    while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL) {
        const char *dash = strstr(line, " - ");
        size_t len;
        if (dash == NULL || sscanf(line, "%*s %*s %*s %*s %1023s", mnt) != 1 ||
            sscanf(dash + 3, "%31s", fstype) != 1 ||
            (strcmp(fstype, "cgroup") != 0 && strcmp(fstype, "cgroup2") != 0))
            continue;
        len = strlen(mnt);
        if (strncmp(dir, mnt, len) == 0 && dir[len] == '/')
            found = find_below(mnt, dir + len + 1, 8, out, size);
    }
    return found;
}

int
xmp_cgroup_gc_dirs(const char *const *dirs, size_t n, struct xmp_error *err)
{
    bool found = false, busy = true;
    int64_t waited = 0;

    char resolved[16][XMP_CG_PATH];
    const char *at[16];

    if (n > 16)
        n = 16;
    for (size_t i = 0; i < n; i++) {
        at[i] = dirs[i];
        if (check_gc_dir(dirs[i], err) < 0)
            return -1;
        if (access(dirs[i], F_OK) != 0 && resolve_gc_dir(dirs[i], resolved[i], XMP_CG_PATH) &&
            check_gc_dir(resolved[i], err) == 0)
            at[i] = resolved[i];
        if (access(at[i], F_OK) != 0)
            continue;
        found = true;
        if (xmp_cg_tree_has_pid(at[i], getpid()))
            return xmp_error_set(err, EBUSY, "`%s` holds this xmprun itself", at[i]);
        xmp_cg_thaw_tree(at[i]);
    }
    if (!found)
        return 0;
    /* Kill by membership, in every hierarchy (a v1 directory may hold a process that the
     * cgroup2 one does not), until all are empty; kill again every 100 ms, since a task may
     * become visible after a sweep (see xmp_cg_kill_procs_tree). */
    while (busy) {
        busy = false;
        for (size_t i = 0; i < n; i++) {
            if (access(at[i], F_OK) != 0 || xmp_cg_procs_empty_tree(at[i]))
                continue;
            busy = true;
            if (waited % 100 == 0)
                xmp_cg_kill_procs_tree(at[i]);
        }
        if (!busy)
            break;
        if (waited >= 5000)
            return xmp_error_set(err, EBUSY, "processes are still in `%s` after 5 s", at[0]);
        sleep_ms(10);
        waited += 10;
    }
    for (size_t i = 0; i < n; i++)
        if (xmp_cg_rmdir_tree(at[i], err) < 0)
            return -1;
    return 1;
}

int
xmp_cgroup_self_leaf(char *leaf, size_t size)
{
    struct xmp_error e = {0};
    cleanup_free char *proc = slurp("/proc/self/cgroup", &e);
    cleanup_free char *mountinfo = NULL;
    char path[XMP_CG_PATH], mnt[XMP_CG_PATH], root[XMP_CG_PATH];
    const char *base;
    pid_t owner;

    if (proc == NULL || xmp_cgroup_parse_proc(proc, "", path, sizeof(path), NULL, &e) < 0)
        return 0; /* no cgroup2 tree: no leaf */
    base = strrchr(path, '/');
    /* Our own leaf, or the one of a dead xmprun that this one was started in. The mount table
     * (long in a container) is read only then. */
    if (base == NULL || !xmp_cgroup_self_leaf_pid(base + 1, &owner) ||
        (owner != getpid() && !(kill(owner, 0) < 0 && errno == ESRCH)))
        return 0;
    mountinfo = slurp("/proc/self/mountinfo", &e);
    if (mountinfo == NULL ||
        xmp_cgroup_parse_mountinfo(mountinfo, NULL, mnt, sizeof(mnt), root, sizeof(root), &e) < 0)
        return 0;
    return xmp_cgroup_join(mnt, root, path, leaf, size, &e) == 0 ? 1 : 0;
}

/* True when dir has no subdirectory other than `except` (may be NULL). */
static bool
no_other_children(const char *dir, const char *except)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    bool alone = true;

    while (d != NULL && (de = readdir(d)) != NULL)
        if (de->d_type == DT_DIR && de->d_name[0] != '.' &&
            (except == NULL || strcmp(de->d_name, except) != 0))
            alone = false;
    if (d != NULL)
        closedir(d);
    return alone;
}

/* Empties dir's cgroup.subtree_control. Only for the parent of an xmprun-self leaf: it held
 * xmprun before, so its subtree_control was empty then (the "no internal processes" rule),
 * and emptying it again lets processes join it. */
static void
restore_subtree_control(const char *dir)
{
    char sub[256];

    if (xmp_cg_read(dir, "cgroup.subtree_control", sub, sizeof(sub), NULL) < 0)
        return;
    for (char *tok = strtok(sub, " \n"); tok != NULL; tok = strtok(NULL, " \n")) {
        char minus[64];
        snprintf(minus, sizeof(minus), "-%s", tok);
        xmp_cg_write(dir, "cgroup.subtree_control", minus, NULL);
    }
}

int
xmp_cgroup_leave_self_leaf(struct xmp_error *err)
{
    char leaf[XMP_CG_PATH], parent[XMP_CG_PATH];
    struct xmp_error e = {0};

    if (xmp_cgroup_self_leaf(leaf, sizeof(leaf)) == 0)
        return 0;
    xmp_cg_parent_dir(leaf, parent, sizeof(parent));
    /* Only when nothing else is beside the leaf: another job's cgroups there need the
     * controllers this xmprun enabled, and then it cannot move back (the leaf stays for a
     * later gc, once this process is gone). */
    if (!no_other_children(parent, strrchr(leaf, '/') + 1))
        return 0;
    if (xmp_cg_write(parent, "cgroup.procs", "0", &e) < 0 && e.errnum == EBUSY) {
        restore_subtree_control(parent);
        xmp_error_clear(&e);
        xmp_cg_write(parent, "cgroup.procs", "0", &e);
    }
    if (e.errnum != 0) {
        if (err != NULL)
            *err = e;
        return xmp_error_wrap(err, "move xmprun back out of `%s`", leaf);
    }
    if (rmdir(leaf) < 0)
        return xmp_error_set(err, errno, "rmdir `%s`", leaf);
    return 0;
}

int
xmp_cgroup_gc_leaf(const char *leaf, struct xmp_error *err)
{
    const char *base = strrchr(leaf, '/');
    char parent[XMP_CG_PATH];
    struct statfs sf;
    pid_t owner;

    if (leaf[0] != '/' || base == NULL || !xmp_cgroup_self_leaf_pid(base + 1, &owner) ||
        strstr(leaf, "/..") != NULL || strlen(leaf) >= XMP_CG_PATH)
        return xmp_error_set(err, EINVAL, "`%s` is not a leaf xmprun makes", leaf);
    if (access(leaf, F_OK) != 0)
        return 0;
    if (statfs(leaf, &sf) < 0 || sf.f_type != CGROUP2_SUPER_MAGIC)
        return xmp_error_set(err, EINVAL, "`%s` is not a cgroup2 directory", leaf);
    /* Its xmprun is gone; what is still in it (a process that was started there) is not
     * ours to kill: leave it, and the leaf, alone. */
    if (!xmp_cg_procs_empty_tree(leaf))
        return 0;
    if (rmdir(leaf) < 0 && errno != ENOENT)
        return xmp_error_set(err, errno, "rmdir `%s`", leaf);
    xmp_cg_parent_dir(leaf, parent, sizeof(parent));
    if (no_other_children(parent, NULL) && xmp_cg_procs_empty_tree(parent))
        restore_subtree_control(parent);
    return 1;
}
