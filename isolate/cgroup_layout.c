/* cgroups: the layout. The mode (unified, hybrid, legacy), the hierarchies xmprun uses with their
 * mounts, roots and xmprun's own cgroup in each, from /proc/self/cgroup and mountinfo; mounts
 * that another mount hides; whether xmprun may write its own cgroup, and why not; and releasing
 * what libcgroup's mount scan keeps. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* cpu_set_t macros */
#endif
#include "isolate/array.h"
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
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
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

char *
xmp_cg_slurp(const char *path, struct xmp_error *err)
{
    cleanup_fclose FILE *f = fopen(path, "re");
    char *buf = NULL;
    size_t cap = 0, len = 0;

    if (f == NULL) {
        xmp_error_set(err, errno, "open `%s`", path);
        return NULL;
    }
    for (;;) {
        if (!xmp_array_reserve(buf, cap, len + 4096 + 1, 16384)) {
            free(buf);
            xmp_error_set(err, ENOMEM, "read `%s`", path);
            return NULL;
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
int
xmp_cg_load_layout(enum xmp_cgroup_mode mode, struct xmp_cg_layout *l, struct xmp_error *err)
{
    cleanup_free char *proc = xmp_cg_slurp("/proc/self/cgroup", err);
    cleanup_free char *mountinfo = proc ? xmp_cg_slurp("/proc/self/mountinfo", err) : NULL;

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
                 * is there but hidden under another (see xmp_cg_note_hidden). */
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
void
xmp_cg_release_mount_table(void)
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
 * failed, that hierarchy's files are handled directly. So is a cgroup2 hierarchy: libcgroup's
 * create enables the controllers in every cgroup from the mount's root down, which writes to
 * cgroups that are not xmprun's (system.slice, a Slurm step's parents; for a user, root's
 * user.slice, which fails the create), each a write that may wait in the kernel, while xmprun
 * enables what a job needs in its own cgroup and the job's (cgroup_v2.c). */
void
xmp_cg_use_visible_mounts(struct xmp_cg_layout *l, bool lc_ok)
{
    for (size_t i = 0; i < l->n; i++) {
        struct xmp_cg_hier *h = &l->h[i];
        char *lc_mount = NULL;

        if (h->lc_ctrl[0] == '\0')
            continue;
        h->direct = !lc_ok || h->v2 || cgroup_get_subsys_mount_point(h->lc_ctrl, &lc_mount) != 0 ||
                    lc_mount == NULL || strcmp(lc_mount, h->mount) != 0;
        free(lc_mount);
    }
}

/* A controller that a limit needs is not mounted (ENODEV): if its mount is there but hidden
 * under a later one, that is what the user must fix. */
void
xmp_cg_note_hidden(struct xmp_error *err, const struct xmp_cg_layout *l)
{
    if (err == NULL || err->errnum != ENODEV || l->hidden[0] == '\0')
        return;
    xmp_error_set(err, 0,
                  "%s (a private mount namespace?), and no other is visible: mount it again, or "
                  "set isolation.cgroups: optional",
                  l->hidden);
    err->errnum = ENODEV;
}

/* The message when xmprun may not write its own cgroup: why, and for a container what to do.
 * No strerror text is appended (errnum is kept), so that the advice fits in the message. A
 * user's access() is refused (EACCES) before the mount's read-only flag is looked at: a
 * read-only mount is EROFS whoever asks (a container's default, as root or not). */
int
xmp_cg_explain_access(struct xmp_error *err, int e, const char *dir)
{
    struct statvfs fs;

    if ((e == EACCES || e == EPERM) && statvfs(dir, &fs) == 0 && (fs.f_flag & ST_RDONLY))
        e = EROFS;
    if (e == EROFS)
        xmp_error_set(err, 0,
                      "cannot create cgroups: the cgroup filesystem is mounted read-only (in a "
                      "container: run with --cgroupns=private and a writable /sys/fs/cgroup, or "
                      "--privileged)");
    else if (e == EACCES || e == EPERM) {
        /* A long path keeps only its end, marked as cut, so that the advice fits in the message
         * even with a prefix. */
        size_t len = strlen(dir);
        xmp_error_set(err, 0, "cannot create cgroups in `%s%s`: not root and not delegated",
                      len > 64 ? "..." : "", len > 64 ? dir + len - 61 : dir);
    } else
        return xmp_error_set(err, e, "cannot create cgroups in `%s`", dir);
    if (err != NULL)
        err->errnum = e;
    return -1;
}

int
xmp_cg_check_own_dirs(const struct xmp_cg_layout *layout, struct xmp_error *err)
{
    for (size_t i = 0; i < layout->n; i++) {
        char base[XMP_CG_PATH];
        xmp_cg_own_dir(&layout->h[i], base, sizeof(base));
        if (access(base, W_OK) < 0)
            return xmp_cg_explain_access(err, errno, base);
    }
    return 0;
}

int
xmp_cgroup_self(const char *controller, char *path, size_t size, char *dir, size_t dir_size)
{
    struct xmp_error e = {0};
    cleanup_free char *proc = xmp_cg_slurp("/proc/self/cgroup", &e);
    cleanup_free char *mountinfo = NULL;
    char mnt[XMP_CG_PATH], root[XMP_CG_PATH];

    if (proc == NULL || xmp_cgroup_parse_proc(proc, controller, path, size, NULL, &e) < 0)
        return -1;
    if (dir == NULL)
        return 0;
    /* The mount table (long in a container) is read only when the directory is asked for. */
    mountinfo = xmp_cg_slurp("/proc/self/mountinfo", &e);
    if (mountinfo == NULL ||
        xmp_cgroup_parse_mountinfo(mountinfo, controller[0] != '\0' ? controller : NULL, mnt,
                                   sizeof(mnt), root, sizeof(root), &e) < 0 ||
        xmp_cgroup_join(mnt, root, path, dir, dir_size, &e) < 0)
        return -1;
    return 0;
}
