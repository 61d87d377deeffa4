/* cgroups: what dead jobs left. xmprun gc and every start kill what is left in an orphaned job's
 * directories and remove them, found below xmprun's own cgroup, where its state file recorded
 * them, or where another cgroup namespace's view puts them; and the v2 leaf xmprun moves itself
 * into, left by a dead xmprun. */
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
#include <time.h>
#include <unistd.h>
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
    if (xmp_cg_load_layout(mode, layout, err) < 0) {
        free(layout);
        return -1;
    }
    for (size_t i = 0; i < layout->n; i++) {
        char base[XMP_CG_PATH];
        DIR *d;
        struct dirent *de;
        xmp_cg_own_dir(&layout->h[i], base, sizeof(base));
        d = opendir(base);
        if (d == NULL)
            continue;
        while ((de = readdir(d)) != NULL) {
            /* Never the leaf this process moved itself into, whatever is_orphan says. */
            if (de->d_type != DT_DIR || strncmp(de->d_name, "xmprun-", 7) != 0 ||
                strlen(de->d_name) >= 256 || strcmp(de->d_name, self) == 0 ||
                seen_name(names, n, de->d_name) || !is_orphan(de->d_name, data))
                continue;
            if (!xmp_array_reserve(names, cap, n + 1, 8))
                break;
            snprintf(names[n++], sizeof(names[0]), "%s", de->d_name);
        }
        closedir(d);
    }
    for (size_t k = 0; k < n; k++) {
        struct xmp_cgroup *cg = NULL;
        struct xmp_error e = {0};
        bool holds_self = false;
        /* caps are unknown here (zero): the kill and the wait look at every hierarchy. */
        if (xmp_cg_new_cgroup(layout, NULL, names[k], &cg, &e) == 0) {
            cg->own = (1u << layout->n) - 1;
            for (size_t i = 0; i < layout->n; i++)
                holds_self = holds_self || xmp_cg_tree_has_pid(cg->dir[i], getpid());
        }
        /* An xmprun started inside a dead xmprun's leaf (from a process that was there) is in
         * a cgroup this scan finds orphaned: killing it would kill this very process. */
        if (holds_self) {
            xmp_cg_free_cgroup(cg);
            continue;
        }
        /* A freezer left FROZEN (by an older xmprun that died between freeze and thaw, or by
         * anyone) holds its tasks with the SIGKILL pending: thaw first. */
        for (size_t i = 0; cg != NULL && i < layout->n; i++)
            xmp_cg_thaw_tree(cg->dir[i]);
        if (cg == NULL || xmp_cg_kill_and_wait(cg, 5000, &e) < 0 ||
            xmp_cg_remove_dirs(cg, &e) < 0) {
            if (ret == 0 && err != NULL)
                *err = e;
            ret = -1;
        } else {
            removed++;
        }
        if (cg != NULL)
            xmp_cg_free_cgroup(cg);
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
        xmp_cg_sleep_ms(10);
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
    char path[XMP_CG_PATH];
    const char *base;
    pid_t owner;

    if (xmp_cgroup_self("", path, sizeof(path), NULL, 0) < 0)
        return 0; /* no cgroup2 tree: no leaf */
    base = strrchr(path, '/');
    /* Our own leaf, or the one of a dead xmprun that this one was started in. The mount table
     * (long in a container) is read only then. */
    if (base == NULL || !xmp_cgroup_self_leaf_pid(base + 1, &owner) ||
        (owner != getpid() && !(kill(owner, 0) < 0 && errno == ESRCH)))
        return 0;
    return xmp_cgroup_self("", path, sizeof(path), leaf, size) == 0 ? 1 : 0;
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

/* Empties dir's cgroup.subtree_control, in one write (the kernel takes "-a -b"). Only for the
 * parent of an xmprun-self leaf: it held xmprun before, so its subtree_control was empty then
 * (the "no internal processes" rule), and emptying it again lets processes join it. */
static int
restore_subtree_control(const char *dir, struct xmp_error *err)
{
    char sub[256], minus[300] = "";

    if (xmp_cg_read(dir, "cgroup.subtree_control", sub, sizeof(sub), err) < 0)
        return -1;
    for (char *save = NULL, *tok = strtok_r(sub, " \n", &save); tok != NULL;
         tok = strtok_r(NULL, " \n", &save))
        snprintf(minus + strlen(minus), sizeof(minus) - strlen(minus), "%s-%s", minus[0] ? " " : "",
                 tok);
    return minus[0] == '\0' ? 0 : xmp_cg_write(dir, "cgroup.subtree_control", minus, err);
}

/* The parent is a systemd scope that xmprun is alone in (`systemd-run --scope -p Delegate=yes
 * xmprun`, or the scope it asked systemd for): once xmprun exits the scope is empty, systemd
 * stops it and removes its cgroup with everything below, the leaf included. Not a service: its
 * next ExecStart= would be refused by the controllers left enabled. */
static bool
systemd_removes(const char *parent)
{
    const char *base = strrchr(parent, '/'), *dot;

    if (base == NULL || access("/run/systemd/system", F_OK) < 0)
        return false;
    dot = strrchr(base, '.');
    return dot != NULL && strcmp(dot, ".scope") == 0;
}

int
xmp_cgroup_leave_self_leaf(struct xmp_error *err)
{
    char leaf[XMP_CG_PATH], parent[XMP_CG_PATH];

    if (xmp_cgroup_self_leaf(leaf, sizeof(leaf)) == 0)
        return 0;
    xmp_cg_parent_dir(leaf, parent, sizeof(parent));
    /* Only when nothing else is beside the leaf: another job's cgroups there need the
     * controllers this xmprun enabled, and then it cannot move back (the leaf stays for a
     * later gc, once this process is gone). */
    if (!no_other_children(parent, strrchr(leaf, '/') + 1) || systemd_removes(parent))
        return 0;
    /* The parent has controllers enabled (xmprun enabled them when it moved into the leaf),
     * which keep any process out of it: no move is tried before they are gone. */
    if (restore_subtree_control(parent, err) < 0 ||
        xmp_cg_write(parent, "cgroup.procs", "0", err) < 0)
        return xmp_error_wrap(err, "move xmprun back out of `%s`", leaf);
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
    /* A scope is systemd's to remove, not to be made joinable again. */
    if (!systemd_removes(parent) && no_other_children(parent, NULL) &&
        xmp_cg_procs_empty_tree(parent))
        restore_subtree_control(parent, NULL);
    return 1;
}
