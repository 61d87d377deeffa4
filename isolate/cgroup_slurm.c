/* cgroups: the tree Slurm's spank_xmprun plugin (slurm/) prepares for a regular user's task: below
 * the task's cgroup in every hierarchy, a directory `xmprun` made by root with the leaves
 * worker-0 .. worker-<n-1>, whose files xmprun writes are given to the user. xmprun finds it
 * where it may not write its own cgroup, checks it, and uses it as the job's tree without
 * making or removing a directory. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "isolate/cgroup.h"
#include "isolate/cgroup_internal.h"

#include <errno.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#define MAX_LEAVES 1024

/* Only the plugin, as root, can have made `xmprun` below a cgroup the user may not write, and only
 * root can have given the user its leaves' cgroup.procs: a user cannot fake either. Symlinks are
 * refused (lstat), and so is anything not on a cgroup filesystem. */
static int
check_hier(const struct xmp_cg_hier *h, size_t *n, struct xmp_error *err)
{
    char base[XMP_CG_PATH], top[XMP_CG_PATH + 16], leaf[XMP_CG_PATH + 64];
    struct stat st;
    struct statfs sf;
    size_t k = 0;

    xmp_cg_own_dir(h, base, sizeof(base));
    snprintf(top, sizeof(top), "%s/" XMP_CG_SLURM_DIR, base);
    if (lstat(top, &st) < 0 || !S_ISDIR(st.st_mode))
        return xmp_error_set(err, errno ? errno : ENOTDIR, "no `%s`", top);
    if (statfs(top, &sf) < 0 ||
        (unsigned long)sf.f_type != (h->v2 ? CGROUP2_SUPER_MAGIC : CGROUP_SUPER_MAGIC))
        return xmp_error_set(err, EXDEV, "`%s` is not a cgroup", top);
    if (st.st_uid != 0)
        return xmp_error_set(err, EPERM, "`%s` was not made by root", top);
    for (; k < MAX_LEAVES; k++) {
        snprintf(leaf, sizeof(leaf), "%s/worker-%zu/cgroup.procs", top, k);
        if (lstat(leaf, &st) < 0)
            break;
        if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & S_IWOTH))
            return xmp_error_set(err, EPERM, "`%s` is not given to uid %u", leaf,
                                 (unsigned)geteuid());
    }
    if (k == 0)
        return xmp_error_set(err, ENOENT, "no worker cgroup in `%s`", top);
    if (k < *n)
        *n = k;
    return 0;
}

int
xmp_cg_find_preset(struct xmp_cg_layout *l, struct xmp_error *err)
{
    size_t n = MAX_LEAVES;

    /* On pure cgroup v2 a delegated cgroup (files the kernel lists as delegable) is what xmprun
     * uses as any delegated one; the pre-made v1 leaves are what this is for. */
    if (l->mode == XMP_CGROUP_MODE_UNIFIED)
        return xmp_error_set(err, ENOENT, "cgroup v2");
    for (size_t i = 0; i < l->n; i++) {
        /* The freezer is Slurm's proctrack/cgroup's; the plugin leaves it alone. */
        if (!l->h[i].v2 && (l->h[i].ctrls & ~(unsigned)XMP_CG_FREEZER) == 0)
            continue;
        if (check_hier(&l->h[i], &n, err) < 0)
            return -1;
    }
    l->preset = true;
    l->n_preset = n;
    for (size_t i = 0; i < l->n; i++)
        l->h[i].direct = true; /* libcgroup's create would mkdir, chown and remove */
    return 0;
}

int
xmp_cg_check_preset_leaf(const struct xmp_cgroup *cg, struct xmp_error *err)
{
    const char *name = strrchr(cg->rel, '/') ? strrchr(cg->rel, '/') + 1 : cg->rel;
    unsigned long k = 0;
    char end = 0;

    if (!cg->layout->preset || cg->parent == NULL)
        return 0;
    if (sscanf(name, "worker-%lu%c", &k, &end) == 1 && k < cg->layout->n_preset)
        return 0;
    return xmp_error_set(err, EDQUOT,
                         "cgroup %s: Slurm's spank_xmprun plugin prepared %zu worker cgroups for "
                         "this task (one per CPU of the task, up to its max_workers), and xmprun "
                         "may make no other",
                         name, cg->layout->n_preset);
}

bool
xmp_cgroup_from_slurm(const struct xmp_cgroup *cg)
{
    return cg != NULL && cg->layout->preset;
}
