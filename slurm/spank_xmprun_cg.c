/* spank_xmprun's cgroup work: below a task's cgroup, in every hierarchy xmprun uses, a directory
 * `xmprun` with the leaves `worker-0` .. `worker-<n-1>`, made by root and given to the job's user
 * file by file, and their removal. Runs as root in slurmstepd, so every path is opened with
 * openat and O_NOFOLLOW below a directory checked (fstatfs) to be on a cgroup filesystem, and
 * only the kernel (mountinfo, /proc/<pid>/cgroup) says where things are. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "slurm/spank_xmprun_cg.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#define TOP "xmprun"

/* What xmprun writes in a v1 hierarchy, and so all the user is given there: the job's limits in
 * `xmprun`, the workers' limits and their membership (tasks, cgroup.procs) in each leaf, and
 * the OOM notification registration. Never the directories (mkdir in a v1 hierarchy is how a
 * user would exhaust the node's cgroup IDs), nor devices.* (the kernel wants CAP_SYS_ADMIN for
 * those anyway), memory.oom_control or memory.use_hierarchy. */
static const char *const v1_files[] = {
    "memory.limit_in_bytes",
    "memory.memsw.limit_in_bytes",
    "memory.soft_limit_in_bytes",
    "cgroup.event_control",
    "cpu.cfs_period_us",
    "cpu.cfs_quota_us",
    "cpuset.cpus",
    "cpuset.mems",
    "pids.max",
};
#define N_V1_FILES (sizeof(v1_files) / sizeof(v1_files[0]))
static const char *const v1_leaf_files[] = {"tasks", "cgroup.procs"};

/* The controllers whose hierarchies xmprun uses; a v1 mount carrying any other one (freezer,
 * which proctrack/cgroup owns; blkio; a named hierarchy) is left alone. */
static const char *const v1_used[] = {"memory", "cpu", "cpuacct", "cpuset", "pids", "devices"};

static void
say(char *msg, size_t size, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, size, fmt, ap);
    va_end(ap);
}

static bool
on_cgroupfs(int fd, bool v2)
{
    struct statfs sf;

    return fstatfs(fd, &sf) == 0 &&
           (unsigned long)sf.f_type == (v2 ? CGROUP2_SUPER_MAGIC : CGROUP_SUPER_MAGIC);
}

/* Opens the directory rel (components separated by '/') below the mount, one component at a
 * time with O_NOFOLLOW, each checked to be on the hierarchy's filesystem. */
static int
open_below(const struct xsp_hier *h, const char *rel)
{
    char buf[XSP_PATH];
    int fd = open(h->mount, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

    if (fd < 0)
        return -1;
    if (!on_cgroupfs(fd, h->v2)) {
        close(fd);
        errno = EXDEV;
        return -1;
    }
    snprintf(buf, sizeof(buf), "%s", rel);
    for (char *save = NULL, *c = strtok_r(buf, "/", &save); c != NULL;
         c = strtok_r(NULL, "/", &save)) {
        int next = strcmp(c, "..") == 0
                       ? (errno = EINVAL, -1)
                       : openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        close(fd);
        if (next < 0)
            return -1;
        if (!on_cgroupfs(next, h->v2)) {
            close(next);
            errno = EXDEV;
            return -1;
        }
        fd = next;
    }
    return fd;
}

static int
read_at(int dfd, const char *file, char *buf, size_t size)
{
    int fd = openat(dfd, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    ssize_t n;

    if (fd < 0)
        return -1;
    n = read(fd, buf, size - 1);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    return 0;
}

static int
write_at(int dfd, const char *file, const char *value)
{
    int fd = openat(dfd, file, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
    ssize_t n;

    if (fd < 0)
        return -1;
    n = write(fd, value, strlen(value));
    close(fd);
    return n < 0 ? -1 : 0;
}

/* A new v1 cpuset takes no task until it has cpus and mems: its parent's. */
static int
copy_cpuset(int from, int to)
{
    static const char *const files[] = {"cpuset.cpus", "cpuset.mems"};
    char buf[4096];

    for (size_t i = 0; i < 2; i++)
        if (read_at(from, files[i], buf, sizeof(buf)) < 0 || write_at(to, files[i], buf) < 0)
            return -1;
    return 0;
}

/* Gives uid:gid the files of names that exist in dfd. */
static int
chown_files(int dfd, const char *const *names, size_t n, uid_t uid, gid_t gid)
{
    for (size_t i = 0; i < n; i++)
        if (fchownat(dfd, names[i], uid, gid, AT_SYMLINK_NOFOLLOW) < 0 && errno != ENOENT)
            return -1;
    return 0;
}

/* cgroup v2: the files the kernel lists as safe to delegate (/sys/kernel/cgroup/delegate:
 * cgroup.procs, cgroup.threads, cgroup.subtree_control, memory.reclaim, ...). */
static int
chown_delegate(int dfd, uid_t uid, gid_t gid)
{
    char buf[1024];
    int fd = open("/sys/kernel/cgroup/delegate", O_RDONLY | O_CLOEXEC);
    ssize_t len = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);

    if (fd >= 0)
        close(fd);
    if (len < 0)
        snprintf(buf, sizeof(buf), "cgroup.procs\ncgroup.threads\ncgroup.subtree_control\n");
    else
        buf[len] = '\0';
    for (char *save = NULL, *name = strtok_r(buf, "\n", &save); name != NULL;
         name = strtok_r(NULL, "\n", &save))
        if (strchr(name, '/') == NULL && name[0] != '.' &&
            fchownat(dfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0 && errno != ENOENT)
            return -1;
    return 0;
}

/* SIGKILLs every process listed in dfd's cgroup.procs (never slurmstepd itself); returns how
 * many were listed. */
static int
kill_listed(int dfd)
{
    char buf[16384];
    int n = 0;

    if (read_at(dfd, "cgroup.procs", buf, sizeof(buf)) < 0)
        return 0;
    for (char *p = buf, *end; *p != '\0'; p = end) {
        long pid = strtol(p, &end, 10);
        if (end == p)
            break;
        if (pid > 0 && pid != getpid()) {
            kill((pid_t)pid, SIGKILL);
            n++;
        }
    }
    return n;
}

static void
sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* Kills what runs in the directory name below dfd until it is empty (bounded: 5 s), then
 * removes it. */
static int
empty_and_remove(int dfd, const char *name)
{
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    for (int round = 0; round < 250 && kill_listed(fd) > 0; round++)
        sleep_ms(20);
    close(fd);
    for (int round = 0; round < 50; round++) {
        if (unlinkat(dfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
            return 0;
        if (errno != EBUSY)
            return -1;
        sleep_ms(20); /* a killed process leaves its cgroup a moment after it is reaped */
    }
    return -1;
}

/* Removes what xsp_prepare made in one hierarchy, deepest first. */
static int
cleanup_hier(struct xsp_hier *h, char *msg, size_t size)
{
    char parent[XSP_PATH], *slash;
    int bfd = open_below(h, h->base), status = 0;

    if (bfd < 0) {
        say(msg, size, "open %s/%s: %s", h->mount, h->base, strerror(errno));
        return -1;
    }
    if (h->made_top) {
        int tfd = openat(bfd, TOP, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        for (size_t i = 0; tfd >= 0 && i < h->n_leaves; i++) {
            char leaf[32];
            snprintf(leaf, sizeof(leaf), "worker-%zu", i);
            if (empty_and_remove(tfd, leaf) < 0) {
                say(msg, size, "remove %s/%s/" TOP "/%s: %s", h->mount, h->base, leaf,
                    strerror(errno));
                status = -1;
            }
        }
        if (tfd >= 0)
            close(tfd);
        /* What the user may have made in a v2 `xmprun` (up to its cgroup.max.descendants)
         * is below a leaf or beside them: a leftover there makes this rmdir fail, named. */
        if (empty_and_remove(bfd, TOP) < 0) {
            say(msg, size, "remove %s/%s/" TOP ": %s", h->mount, h->base, strerror(errno));
            status = -1;
        }
        h->made_top = false;
    }
    close(bfd);
    if (h->made_base && status == 0) {
        char name[XSP_PATH];
        snprintf(parent, sizeof(parent), "%s", h->base);
        slash = strrchr(parent, '/');
        snprintf(name, sizeof(name), "%s", slash != NULL ? slash + 1 : parent);
        if (slash != NULL)
            *slash = '\0';
        else
            parent[0] = '\0';
        int pfd = open_below(h, parent);
        if (pfd < 0 || empty_and_remove(pfd, name) < 0) {
            say(msg, size, "remove %s/%s: %s", h->mount, h->base, strerror(errno));
            status = -1;
        } else {
            h->made_base = false;
        }
        if (pfd >= 0)
            close(pfd);
    }
    return status;
}

int
xsp_cleanup(struct xsp_task *t, char *msg, size_t size)
{
    int status = 0;

    for (size_t i = t->n; i-- > 0;)
        if (cleanup_hier(&t->h[i], msg, size) < 0)
            status = -1;
    t->active = false;
    t->n = 0;
    return status;
}

/* The base: Slurm's task cgroup where task/cgroup made one (".../step_<s>/task_<k>", v1), else
 * a per-task directory made here below the task's cgroup, which the task is moved into, so that
 * xmprun's own cgroup is the task's alone whoever else shares slurmd's cgroup (linuxproc, or a
 * hierarchy task/cgroup does not constrain: cpu, pids, the cgroup2 tree). */
static int
open_base(struct xsp_hier *h, pid_t pid, uid_t uid, gid_t gid, const char *tag)
{
    const char *last = strrchr(h->base, '/') ? strrchr(h->base, '/') + 1 : h->base;
    unsigned k;
    char name[96], num[32], end;
    int pfd, bfd;

    if (!h->v2 && sscanf(last, "task_%u%c", &k, &end) == 1 && strstr(h->base, "/step_") != NULL)
        return open_below(h, h->base);
    if ((pfd = open_below(h, h->base)) < 0)
        return -1;
    snprintf(name, sizeof(name), "xmprun_task_%s", tag);
    if (mkdirat(pfd, name, 0755) < 0) {
        close(pfd);
        return -1;
    }
    bfd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    snprintf(num, sizeof(num), "%d", (int)pid);
    if (bfd < 0 || !on_cgroupfs(bfd, h->v2) ||
        (strstr(h->ctrls, "cpuset") != NULL && copy_cpuset(pfd, bfd) < 0) ||
        write_at(bfd, "cgroup.procs", num) < 0 ||
        /* cgroup v2 moves a process only for a writer who may write cgroup.procs of the common
         * ancestor of where it is and where it goes: here, xmprun's own cgroup. */
        (h->v2 && fchownat(bfd, "cgroup.procs", uid, gid, AT_SYMLINK_NOFOLLOW) < 0)) {
        int e = errno;
        if (bfd >= 0)
            close(bfd);
        unlinkat(pfd, name, AT_REMOVEDIR);
        close(pfd);
        errno = e;
        return -1;
    }
    close(pfd);
    size_t len = strlen(h->base);
    snprintf(h->base + len, sizeof(h->base) - len, "%s%s", len > 0 ? "/" : "", name);
    h->made_base = true;
    return bfd;
}

static int
prepare_hier(struct xsp_hier *h, pid_t pid, uid_t uid, gid_t gid, size_t n, const char *tag,
             char *msg, size_t size)
{
    bool cpuset = strstr(h->ctrls, "cpuset") != NULL;
    int bfd = open_base(h, pid, uid, gid, tag), tfd = -1;
    char value[32];

    if (bfd < 0) {
        say(msg, size, "%s: the task's cgroup %s: %s", h->v2 ? "cgroup2" : h->ctrls, h->base,
            strerror(errno));
        return -1;
    }
    if (mkdirat(bfd, TOP, 0755) < 0) {
        say(msg, size, "mkdir %s/%s/" TOP ": %s", h->mount, h->base, strerror(errno));
        close(bfd);
        return -1;
    }
    h->made_top = true;
    tfd = openat(bfd, TOP, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (tfd < 0 || !on_cgroupfs(tfd, h->v2))
        goto fail;
    if (cpuset && copy_cpuset(bfd, tfd) < 0)
        goto fail;
    if (strstr(h->ctrls, "memory") != NULL)
        write_at(tfd, "memory.use_hierarchy", "1"); /* fixed to 1 on recent kernels */
    if (h->v2) {
        /* The leaves are all the user may ever have below `xmprun`: mkdir there is refused. */
        snprintf(value, sizeof(value), "%zu", n);
        if (write_at(tfd, "cgroup.max.descendants", value) < 0 ||
            write_at(tfd, "cgroup.max.depth", "1") < 0)
            goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        char leaf[32];
        int lfd;
        snprintf(leaf, sizeof(leaf), "worker-%zu", i);
        if (mkdirat(tfd, leaf, 0755) < 0)
            goto fail;
        h->n_leaves = i + 1;
        lfd = openat(tfd, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (lfd < 0)
            goto fail;
        bool ok = (!cpuset || copy_cpuset(tfd, lfd) == 0) &&
                  (h->v2 ? chown_delegate(lfd, uid, gid) == 0
                         : chown_files(lfd, v1_files, N_V1_FILES, uid, gid) == 0 &&
                               chown_files(lfd, v1_leaf_files, 2, uid, gid) == 0);
        close(lfd);
        if (!ok)
            goto fail;
    }
    if ((h->v2 ? chown_delegate(tfd, uid, gid) : chown_files(tfd, v1_files, N_V1_FILES, uid, gid)) <
        0)
        goto fail;
    close(tfd);
    close(bfd);
    return 0;
fail:
    say(msg, size, "prepare %s/%s/" TOP ": %s", h->mount, h->base, strerror(errno));
    if (tfd >= 0)
        close(tfd);
    close(bfd);
    return -1;
}

/* The controllers of a v1 mount's super options that xmprun uses, comma-separated, into out;
 * false when the mount carries one it must leave alone, or none it uses. */
static bool
used_ctrls(const char *superopts, char *out, size_t size)
{
    char buf[512];
    bool foreign = false;

    out[0] = '\0';
    snprintf(buf, sizeof(buf), "%s", superopts);
    for (char *save = NULL, *o = strtok_r(buf, ",", &save); o != NULL;
         o = strtok_r(NULL, ",", &save)) {
        bool used = false;
        for (size_t i = 0; i < sizeof(v1_used) / sizeof(v1_used[0]); i++)
            used |= strcmp(o, v1_used[i]) == 0;
        if (used) {
            size_t len = strlen(out);
            snprintf(out + len, size - len, "%s%s", len ? "," : "", o);
        } else if (strcmp(o, "freezer") == 0 || strcmp(o, "blkio") == 0 ||
                   strcmp(o, "net_cls") == 0 || strcmp(o, "perf_event") == 0 ||
                   strcmp(o, "hugetlb") == 0 || strcmp(o, "rdma") == 0 ||
                   strcmp(o, "net_prio") == 0 || strcmp(o, "misc") == 0 ||
                   strncmp(o, "name=", 5) == 0) {
            foreign = true;
        }
    }
    return !foreign && out[0] != '\0';
}

/* The task's cgroup in the hierarchy whose /proc/<pid>/cgroup line lists the first controller
 * of ctrls ("" for the cgroup2 line "0::"), into path. */
static int
task_path(const char *proc, const char *ctrls, char *path, size_t size)
{
    char first[32];

    snprintf(first, sizeof(first), "%.*s", (int)strcspn(ctrls, ","), ctrls);
    for (const char *line = proc; *line != '\0';) {
        const char *nl = strchr(line, '\n'), *c1 = strchr(line, ':');
        const char *c2 = c1 != NULL ? strchr(c1 + 1, ':') : NULL;
        size_t len = nl != NULL ? (size_t)(nl - line) : strlen(line);
        if (c2 != NULL && c2 < line + len) {
            char list[256];
            snprintf(list, sizeof(list), ",%.*s,", (int)(c2 - c1 - 1), c1 + 1);
            char want[40];
            snprintf(want, sizeof(want), ",%s,", first);
            if ((first[0] == '\0' && c2 == c1 + 1) || (first[0] != '\0' && strstr(list, want))) {
                snprintf(path, size, "%.*s", (int)(line + len - c2 - 1), c2 + 1);
                return 0;
            }
        }
        line += len + (nl != NULL);
    }
    return -1;
}

/* Whether the mount point shows the filesystem dev (a mount that a later one hides, such as the
 * host's hierarchies under the tmpfs of a cgroup namespace's fresh mounts, does not). */
static bool
visible(const char *mnt, dev_t dev)
{
    struct stat st;
    int fd = open(mnt, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    bool ok = fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == dev;

    if (fd >= 0)
        close(fd);
    return ok;
}

/* Reads a whole /proc file. */
static char *
slurp(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    size_t cap = 65536, len = 0;
    char *buf = fd < 0 ? NULL : malloc(cap);
    ssize_t n = 0;

    while (buf != NULL && (n = read(fd, buf + len, cap - len - 1)) > 0) {
        len += (size_t)n;
        if (len + 1 == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (nb == NULL)
                free(buf);
            buf = nb;
        }
    }
    if (fd >= 0)
        close(fd);
    if (buf != NULL)
        buf[len] = '\0';
    return buf;
}

/* Fills t->h from slurmstepd's mountinfo (the task shares its mount namespace) and the task's
 * /proc/<pid>/cgroup: one entry per hierarchy xmprun uses. */
static int
find_hierarchies(struct xsp_task *t, pid_t pid, char *msg, size_t size)
{
    char procpath[64];
    char *mi = slurp("/proc/self/mountinfo"), *proc = NULL;

    snprintf(procpath, sizeof(procpath), "/proc/%d/cgroup", (int)pid);
    proc = slurp(procpath);
    if (mi == NULL || proc == NULL) {
        say(msg, size, "read mountinfo or %s: %s", procpath, strerror(errno));
        free(mi);
        free(proc);
        return -1;
    }
    t->n = 0;
    for (char *save = NULL, *line = strtok_r(mi, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        char root[XSP_PATH], mnt[XSP_PATH], fstype[32], superopts[512], path[XSP_PATH];
        const char *dash = strstr(line, " - ");
        struct xsp_hier cand = {0}, *h = NULL;
        unsigned maj = 0, min = 0;
        if (dash == NULL || sscanf(line, "%*s %*s %u:%u %511s %511s", &maj, &min, root, mnt) != 4 ||
            sscanf(dash, " - %31s %*s %511s", fstype, superopts) != 2)
            continue;
        cand.v2 = strcmp(fstype, "cgroup2") == 0;
        if (!cand.v2 && (strcmp(fstype, "cgroup") != 0 ||
                         !used_ctrls(superopts, cand.ctrls, sizeof(cand.ctrls))))
            continue;
        /* Escaped names (\040) are not what a node looks like; a mount whose root the task is
         * not below shows another part of the tree (one that a later mount hides, made in
         * another cgroup namespace): the last mount of a hierarchy that holds the task wins. */
        if (strchr(mnt, '\\') != NULL || strchr(root, '\\') != NULL ||
            task_path(proc, cand.ctrls, path, sizeof(path)) < 0 ||
            strncmp(path, root, strlen(root)) != 0 ||
            (strcmp(root, "/") != 0 && path[strlen(root)] != '/' && path[strlen(root)] != '\0'))
            continue;
        if (!visible(mnt, makedev(maj, min)))
            continue;
        const char *rel = strcmp(root, "/") == 0 ? path : path + strlen(root);
        while (*rel == '/')
            rel++;
        snprintf(cand.mount, sizeof(cand.mount), "%s", mnt);
        snprintf(cand.base, sizeof(cand.base), "%s", rel);
        for (size_t i = 0; i < t->n && h == NULL; i++)
            if (t->h[i].v2 == cand.v2 && strcmp(t->h[i].ctrls, cand.ctrls) == 0)
                h = &t->h[i];
        if (h == NULL && t->n < XSP_MAX_HIER)
            h = &t->h[t->n++];
        if (h != NULL)
            *h = cand;
    }
    free(mi);
    free(proc);
    bool v1 = false;
    for (size_t i = 0; i < t->n; i++)
        v1 |= !t->h[i].v2;
    /* Pure cgroup v2 (Slurm's cgroup/v2): the task's cgroup, task_<k>, holds the task, so the
     * kernel enables no controller below it, and Slurm finds a step's processes in task_<k>'s
     * own cgroup.procs only: a leaf of xmprun's would take the task out of Slurm's sight. Not
     * prepared; see xmprun(1), SLURM. */
    if (!v1) {
        say(msg, size,
            "no cgroup v1 hierarchy that xmprun uses is mounted (a cgroup v2 node is not "
            "supported: see xmprun(1), SLURM)");
        return -1;
    }
    return 0;
}

int
xsp_prepare(struct xsp_task *t, pid_t pid, uid_t uid, gid_t gid, size_t n_leaves, const char *tag,
            char *msg, size_t size)
{
    char ignored[256];

    memset(t, 0, sizeof(*t));
    if (uid == 0 || n_leaves == 0 || strchr(tag, '/') != NULL) {
        say(msg, size, "nothing to prepare (uid %u, %zu leaves)", (unsigned)uid, n_leaves);
        return -1;
    }
    if (find_hierarchies(t, pid, msg, size) < 0) {
        t->n = 0;
        return -1;
    }
    t->active = true;
    for (size_t i = 0; i < t->n; i++) {
        if (prepare_hier(&t->h[i], pid, uid, gid, n_leaves, tag, msg, size) < 0) {
            /* Everything made so far goes; so does the move into a per-task directory, whose
             * removal needs the task out of it first: back into the cgroup it came from. */
            for (size_t j = 0; j <= i; j++) {
                struct xsp_hier *h = &t->h[j];
                if (h->made_base) {
                    char parent[XSP_PATH], num[32];
                    snprintf(parent, sizeof(parent), "%s", h->base);
                    char *slash = strrchr(parent, '/');
                    if (slash != NULL)
                        *slash = '\0';
                    else
                        parent[0] = '\0';
                    int pfd = open_below(h, parent);
                    snprintf(num, sizeof(num), "%d", (int)pid);
                    if (pfd >= 0) {
                        write_at(pfd, "cgroup.procs", num);
                        close(pfd);
                    }
                }
            }
            t->n = i + 1;
            xsp_cleanup(t, ignored, sizeof(ignored));
            return -1;
        }
    }
    return 0;
}

size_t
xsp_task_cpus(pid_t pid)
{
    cpu_set_t set;

    CPU_ZERO(&set);
    if (sched_getaffinity(pid, sizeof(set), &set) < 0 || CPU_COUNT(&set) < 1)
        return 1;
    return (size_t)CPU_COUNT(&set);
}
