/* cgroups, file-level helpers shared by the v1 and v2 backends: small reads and writes of
 * control files, libcgroup calls with their error codes translated, and walks over a cgroup
 * tree (kill every task, check for tasks, remove directories deepest first). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* cpu_set_t macros */
#endif
#include "isolate/array.h"
#include "isolate/cgroup.h"
#include "isolate/cgroup_internal.h"
#include "isolate/cleanup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libcgroup.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int
xmp_cg_write(const char *dir, const char *file, const char *value, struct xmp_error *err)
{
    char path[XMP_CG_PATH + 64];
    cleanup_close int fd = -1;
    size_t len = strlen(value);

    snprintf(path, sizeof(path), "%s/%s", dir, file);
    fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return xmp_error_set(err, errno, "open `%s`", path);
    if (write(fd, value, len) != (ssize_t)len)
        return xmp_error_set(err, errno, "write `%s` to `%s`", value, path);
    return 0;
}

/* Reads fd, dir/file, into buf (NUL-terminated, trailing newline kept): from where it is, or with
 * held (a file read before) from its start, where a seq_file shows its values anew. */
static int
read_fd(int fd, bool held, const char *dir, const char *file, char *buf, size_t size,
        struct xmp_error *err)
{
    size_t o = 0;

    while (o + 1 < size) {
        size_t want = size - 1 - o;
        ssize_t n = held ? pread(fd, buf + o, want, (off_t)o) : read(fd, buf + o, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return xmp_error_set(err, errno, "read `%s/%s`", dir, file);
        o += (size_t)n;
        /* Cgroup files are seq_files, whose read fills what it is given while there is more: a
         * short read is the end, and a second read (one syscall per file, three per reaped
         * worker) would only say so. */
        if ((size_t)n < want)
            break;
    }
    buf[o] = '\0';
    return 0;
}

int
xmp_cg_read(const char *dir, const char *file, char *buf, size_t size, struct xmp_error *err)
{
    char path[XMP_CG_PATH + 64];
    cleanup_close int fd = -1;

    snprintf(path, sizeof(path), "%s/%s", dir, file);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return xmp_error_set(err, errno, "open `%s`", path);
    return read_fd(fd, false, dir, file, buf, size, err);
}

int
xmp_cg_each_pid(const char *procs, bool (*fn)(pid_t pid, void *data), void *data)
{
    cleanup_close int fd = open(procs, O_RDONLY | O_CLOEXEC);

    return fd < 0 ? -1 : xmp_cg_each_pid_fd(fd, false, fn, data);
}

int
xmp_cg_each_pid_fd(int fd, bool held, bool (*fn)(pid_t pid, void *data), void *data)
{
    char buf[4096];
    size_t have = 0;
    off_t at = 0;

    for (;;) {
        size_t want = sizeof(buf) - 1 - have;
        ssize_t n = held ? pread(fd, buf + have, want, at) : read(fd, buf + have, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        at += n;
        bool eof = (size_t)n < want; /* a short read is the end (see read_fd) */
        char *p = buf, *end = buf + have + n, *nl;
        *end = '\0';
        /* Whole lines; at the end of the file, what is left too. */
        while ((nl = memchr(p, '\n', (size_t)(end - p))) != NULL || (eof && p < end)) {
            long pid = strtol(p, NULL, 10);
            if (pid > 0 && !fn((pid_t)pid, data))
                return 0;
            p = nl != NULL ? nl + 1 : end;
        }
        if (eof)
            return 0;
        have = (size_t)(end - p);
        memmove(buf, p, have);
    }
}

bool
xmp_cg_exists(const char *dir, const char *file)
{
    char path[XMP_CG_PATH + 64];

    snprintf(path, sizeof(path), "%s/%s", dir, file);
    return access(path, F_OK) == 0;
}

int64_t
xmp_cg_keyed(const char *text, const char *key)
{
    size_t kl = strlen(key);

    for (const char *p = text; p != NULL && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, key, kl) == 0 && p[kl] == ' ')
            return strtoll(p + kl + 1, NULL, 10);
    }
    return -1;
}

int
xmp_cg_lcerror(struct xmp_error *err, int ret, const char *what, const char *path)
{
    int e;

    /* cgroup_strerror() indexes a table and crashes for codes past ECGEOF; map the codes
     * ourselves and keep the text of the ones it knows. */
    switch (ret) {
    case ECGOTHER:
        e = cgroup_get_last_errno();
        return xmp_error_set(err, e ? e : EIO, "%s `%s`", what, path);
    case ECGROUPNOTOWNER:
    case ECGROUPNOTALLOWED:
        e = EPERM;
        break;
    case ECGROUPNOTEXIST:
    case ECGROUPVALUENOTEXIST:
        e = ENOENT;
        break;
    case ECGROUPNOTMOUNTED:
    case ECGROUPSUBSYSNOTMOUNTED:
        e = ENODEV;
        break;
    case ECGNONEMPTY:
        e = EBUSY;
        break;
    case ECGINVAL:
        e = EINVAL;
        break;
    default:
        e = EIO;
        break;
    }
    if (ret >= ECGROUPNOTCOMPILED && ret <= ECGMOUNTFAIL)
        return xmp_error_set(err, e, "%s `%s` (libcgroup: %s)", what, path, cgroup_strerror(ret));
    return xmp_error_set(err, e, "%s `%s` (libcgroup error %d)", what, path, ret);
}

void
xmp_cg_lc_name(const struct xmp_cg_hier *h, const char *rel, char *buf, size_t size)
{
    const char *own = h->own;

    while (*own == '/')
        own++;
    if (snprintf(buf, size, "%s%s%s", own, *own ? "/" : "", rel) < 0)
        buf[0] = '\0';
}

/* libcgroup finds the mounts and makes the job's cgroup; the directories below it are the job's
 * own (rel "xmprun-.../worker-0"), at paths xmprun already knows, and are made, written and read
 * directly: every libcgroup create, value write and read re-reads /proc/mounts and mkdirs each
 * path component (a 32-worker job read /proc/mounts 165 times and made 495 mkdir calls, 7 ms of
 * its 65 ms launch). A hierarchy whose mount libcgroup does not see right is direct throughout. */
static bool
is_direct(const struct xmp_cg_hier *h, const char *rel)
{
    return h->direct || strchr(rel, '/') != NULL;
}

/* Whether libcgroup leaves the cgroup rel of h alone: direct, or a hierarchy it has no controller
 * name for (a hybrid host's cgroup2 tree, which it does not see). */
static bool
not_libcgroups(const struct xmp_cg_hier *h, const char *rel)
{
    return h->lc_ctrl[0] == '\0' || is_direct(h, rel);
}

/* The directory of the cgroup rel in hierarchy h, for the hierarchies handled directly. */
static void
direct_dir(const struct xmp_cg_hier *h, const char *rel, char *buf, size_t size)
{
    if (snprintf(buf, size, "%s%s/%s", h->mount, strcmp(h->own, "/") == 0 ? "" : h->own, rel) < 0)
        buf[0] = '\0';
}

int
xmp_cg_lc_set(const struct xmp_cg_hier *h, const char *rel, const char *file, const char *value,
              struct xmp_error *err)
{
    char name[XMP_CG_PATH];
    char path[XMP_CG_PATH * 2];
    struct cgroup *cg = NULL;
    struct cgroup_controller *c;
    int ret;

    if (is_direct(h, rel)) {
        direct_dir(h, rel, path, sizeof(path));
        return xmp_cg_write(path, file, value, err);
    }
    xmp_cg_lc_name(h, rel, name, sizeof(name));
    if (snprintf(path, sizeof(path), "%s/%s/%s", h->mount, name, file) < 0)
        path[0] = '\0';
    cg = cgroup_new_cgroup(name);
    if (cg == NULL)
        return xmp_error_set(err, ENOMEM, "cgroup_new_cgroup");
    c = cgroup_add_controller(cg, h->lc_ctrl);
    ret = c == NULL ? ECGINVAL : cgroup_add_value_string(c, file, value);
    /* One value per cgroup_modify_cgroup() call, so that a failure names its file. */
    if (ret == 0)
        ret = cgroup_modify_cgroup(cg);
    cgroup_free(&cg);
    if (ret != 0) {
        char what[128];
        snprintf(what, sizeof(what), "write `%s` to", value);
        return xmp_cg_lcerror(err, ret, what, path);
    }
    return 0;
}

int
xmp_cg_values_add(struct xmp_cg_values *vals, int hier, const char *file, const char *value,
                  struct xmp_error *err)
{
    if (vals->n == XMP_CG_MAX_VALUES)
        return xmp_error_set(err, E2BIG, "too many cgroup values (at %s)", file);
    vals->v[vals->n].hier = hier;
    if (snprintf(vals->v[vals->n].file, sizeof(vals->v[0].file), "%s", file) >=
            (int)sizeof(vals->v[0].file) ||
        snprintf(vals->v[vals->n].value, sizeof(vals->v[0].value), "%s", value) >=
            (int)sizeof(vals->v[0].value))
        return xmp_error_set(err, ENAMETOOLONG, "cgroup value for %s too long", file);
    vals->n++;
    return 0;
}

int
xmp_cg_values_add_int(struct xmp_cg_values *vals, int hier, const char *file, int64_t value,
                      struct xmp_error *err)
{
    char v[32];

    snprintf(v, sizeof(v), "%" PRId64, value);
    return xmp_cg_values_add(vals, hier, file, v, err);
}

/* The slow path of xmp_cg_lc_create: the same work, one directory and one value per libcgroup
 * call, so that the first failure names its directory or file. libcgroup's mkdir -p takes the
 * directories the fast path already made. */
static int
lc_create_slowly(const struct xmp_cgroup *cg, unsigned mask, const struct xmp_cg_values *vals,
                 struct xmp_error *err)
{
    const struct xmp_cg_layout *lay = cg->layout;

    for (size_t i = 0; i < lay->n; i++) {
        const struct xmp_cg_hier *h = &lay->h[i];
        char name[XMP_CG_PATH];
        struct cgroup *lc;
        int ret;

        if (!(mask & (1u << i)) || not_libcgroups(h, cg->rel))
            continue;
        xmp_cg_lc_name(h, cg->rel, name, sizeof(name));
        lc = cgroup_new_cgroup(name);
        if (lc == NULL)
            return xmp_error_set(err, ENOMEM, "cgroup_new_cgroup");
        ret =
            cgroup_add_controller(lc, h->lc_ctrl) == NULL ? ECGINVAL : cgroup_create_cgroup(lc, 1);
        cgroup_free(&lc);
        if (ret != 0)
            return xmp_cg_lcerror(err, ret, "create cgroup", cg->dir[i]);
        for (size_t k = 0; k < vals->n; k++)
            if (vals->v[k].hier == (int)i &&
                xmp_cg_lc_set(h, cg->rel, vals->v[k].file, vals->v[k].value, err) < 0)
                return -1;
    }
    return 0;
}

/* Adds the controllers of the hierarchies of mask whose libcgroup name is `name` (and their
 * values) to lc, and marks them in *done. Returns a libcgroup code. */
static int
add_same_name(struct cgroup *lc, const struct xmp_cgroup *cg, unsigned mask, const char *name,
              const struct xmp_cg_values *vals, unsigned *done)
{
    const struct xmp_cg_layout *lay = cg->layout;

    for (size_t j = 0; j < lay->n; j++) {
        const struct xmp_cg_hier *h = &lay->h[j];
        struct cgroup_controller *c;
        char other[XMP_CG_PATH];
        int ret = 0;

        if (!(mask & (1u << j)) || (*done & (1u << j)) || h->lc_ctrl[0] == '\0')
            continue;
        xmp_cg_lc_name(h, cg->rel, other, sizeof(other));
        if (strcmp(other, name) != 0)
            continue;
        *done |= 1u << j;
        c = cgroup_add_controller(lc, h->lc_ctrl);
        if (c == NULL)
            return ECGINVAL;
        for (size_t k = 0; k < vals->n && ret == 0; k++)
            if (vals->v[k].hier == (int)j)
                ret = cgroup_add_value_string(c, vals->v[k].file, vals->v[k].value);
        if (ret != 0)
            return ret;
    }
    return 0;
}

int
xmp_cg_lc_create(const struct xmp_cgroup *cg, unsigned mask, const struct xmp_cg_values *vals,
                 struct xmp_error *err)
{
    const struct xmp_cg_layout *lay = cg->layout;
    unsigned done = 0;
    int ret = 0;

    for (size_t i = 0; i < lay->n; i++) {
        if (!(mask & (1u << i)) || !is_direct(&lay->h[i], cg->rel))
            continue;
        done |= 1u << i;
        if (mkdir(cg->dir[i], 0755) < 0 && !(errno == EEXIST && lay->preset))
            return xmp_error_set(err, errno, "mkdir `%s`", cg->dir[i]);
        for (size_t k = 0; k < vals->n; k++)
            if (vals->v[k].hier == (int)i &&
                xmp_cg_write(cg->dir[i], vals->v[k].file, vals->v[k].value, err) < 0)
                return -1;
    }
    /* libcgroup names a cgroup relative to each hierarchy's root, and xmprun's own cgroup can
     * differ per hierarchy (here memory is below /process_api/..., the rest at /), so one
     * struct cgroup per distinct name. Every libcgroup create and value write re-reads
     * /proc/mounts (cg_test_mounted_fs) and mkdirs each path component, so fewer calls and
     * fewer directories are what makes creation cheap. */
    for (size_t i = 0; i < lay->n && ret == 0; i++) {
        char name[XMP_CG_PATH];
        struct cgroup *lc;

        if (!(mask & (1u << i)) || (done & (1u << i)) || lay->h[i].lc_ctrl[0] == '\0')
            continue;
        xmp_cg_lc_name(&lay->h[i], cg->rel, name, sizeof(name));
        lc = cgroup_new_cgroup(name);
        if (lc == NULL)
            return xmp_error_set(err, ENOMEM, "cgroup_new_cgroup");
        ret = add_same_name(lc, cg, mask, name, vals, &done);
        if (ret == 0)
            ret = cgroup_create_cgroup(lc, 1);
        cgroup_free(&lc);
    }
    if (ret == 0)
        return 0;
    /* libcgroup 2.0.2 stops at the first failing directory or value and says only why (its
     * last errno), not where: redo it step by step for a message that names the file. */
    if (lc_create_slowly(cg, mask, vals, err) < 0)
        return -1;
    return 0;
}

int
xmp_cg_lc_read(const struct xmp_cg_hier *h, const char *rel, const char *file, char *buf,
               size_t size, struct xmp_error *err)
{
    char name[XMP_CG_PATH], path[XMP_CG_PATH * 2];
    void *handle = NULL;
    size_t o = 0;
    int ret;

    if (not_libcgroups(h, rel)) {
        direct_dir(h, rel, path, sizeof(path));
        return xmp_cg_read(path, file, buf, size, err);
    }
    xmp_cg_lc_name(h, rel, name, sizeof(name));
    buf[0] = '\0';
    /* The iterator reads one line per call, like fgets, into what is left of buf. */
    ret = cgroup_read_value_begin(h->lc_ctrl, name, (char *)file, &handle, buf, (int)size);
    while (ret == 0) {
        o += strlen(buf + o);
        if (o > 0 && buf[o - 1] != '\n' && o + 1 < size) {
            buf[o++] = '\n';
            buf[o] = '\0';
        }
        if (o + 1 >= size)
            break;
        ret = cgroup_read_value_next(&handle, buf + o, (int)(size - o));
    }
    if (handle != NULL)
        cgroup_read_value_end(&handle);
    if (ret != 0 && ret != ECGEOF) {
        if (snprintf(path, sizeof(path), "%s/%s/%s", h->mount, name, file) < 0)
            path[0] = '\0';
        return xmp_cg_lcerror(err, ret, "read", path);
    }
    return 0;
}

/* ---- process-tree helpers ---- */

typedef void (*dir_fn)(const char *dir, void *data);

static void
walk_tree(const char *dir, dir_fn fn, void *data)
{
    DIR *d = opendir(dir);
    struct dirent *de;

    fn(dir, data);
    if (d == NULL)
        return;
    while ((de = readdir(d)) != NULL) {
        char sub[XMP_CG_PATH + 256];
        if (de->d_type != DT_DIR || de->d_name[0] == '.')
            continue;
        snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name);
        walk_tree(sub, fn, data);
    }
    closedir(d);
}

/* The pids one sweep has signalled, so that it knows whether a round found anyone new. */
struct sweep {
    pid_t self;
    pid_t *seen;
    size_t n, cap;
    bool fresh;
};

static bool
sweep_saw(struct sweep *s, pid_t pid)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->seen[i] == pid)
            return true;
    if (!xmp_array_reserve(s->seen, s->cap, s->n + 1, 64))
        return false; /* counted as new: one more round, never one too few */
    s->seen[s->n++] = pid;
    return false;
}

static bool
kill_pid(pid_t pid, void *data)
{
    struct sweep *s = data;

    /* Never xmprun itself (gc may run inside a cgroup it collects, see xmp_cgroup_gc). */
    if (pid <= 1 || pid == s->self)
        return true;
    kill(pid, SIGKILL);
    if (!sweep_saw(s, pid))
        s->fresh = true;
    return true;
}

static void
kill_procs(const char *dir, void *data)
{
    char path[XMP_CG_PATH + 32];

    snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    xmp_cg_each_pid(path, kill_pid, data);
}

int
xmp_cg_kill_procs_tree(const char *dir)
{
    struct sweep s = {.self = getpid()};
    int rounds = 0;

    /* Without cgroup.kill there is a window between reading cgroup.procs and the kill in which
     * a task can fork. Freezing the cgroup first closes it, but a freezer left FROZEN by an
     * xmprun that dies before it thaws (a container stop's SIGKILL) keeps its tasks in D state
     * with the SIGKILL pending, for good. So no freezer: sweep again while a round finds a pid
     * that the earlier ones did not. A task with SIGKILL pending cannot fork any more (the
     * kernel aborts a fork when a fatal signal is pending), so only children forked before
     * their parent's kill can still appear, and the rounds end; a child that is not yet listed
     * when the last round reads is left to the callers, which check for emptiness and sweep
     * again. */
    do {
        s.fresh = false;
        walk_tree(dir, kill_procs, &s);
        rounds++;
    } while (s.fresh && rounds < 100);
    free(s.seen);
    return (int)s.n;
}

static void
thaw(const char *dir, void *data)
{
    (void)data;
    /* v1 freezer.state and v2 cgroup.freeze: whichever the hierarchy has (writes to a file
     * that is not there fail, harmlessly). */
    if (xmp_cg_exists(dir, "freezer.state"))
        xmp_cg_write(dir, "freezer.state", "THAWED", NULL);
    if (xmp_cg_exists(dir, "cgroup.freeze"))
        xmp_cg_write(dir, "cgroup.freeze", "0", NULL);
}

void
xmp_cg_thaw_tree(const char *dir)
{
    walk_tree(dir, thaw, NULL);
}

struct find_pid {
    pid_t pid;
    bool found;
};

static bool
is_pid(pid_t pid, void *data)
{
    struct find_pid *fp = data;

    fp->found = pid == fp->pid;
    return !fp->found;
}

static void
find_pid(const char *dir, void *data)
{
    struct find_pid *fp = data;
    char path[XMP_CG_PATH + 32];

    snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    if (!fp->found)
        xmp_cg_each_pid(path, is_pid, fp);
}

bool
xmp_cg_tree_has_pid(const char *dir, pid_t pid)
{
    struct find_pid fp = {pid, false};

    walk_tree(dir, find_pid, &fp);
    return fp.found;
}

static void
check_empty(const char *dir, void *data)
{
    char buf[64];
    bool *empty = data;

    if (xmp_cg_read(dir, "cgroup.procs", buf, sizeof(buf), NULL) == 0 && buf[0] != '\0')
        *empty = false;
}

bool
xmp_cg_procs_empty_tree(const char *dir)
{
    bool empty = true;

    walk_tree(dir, check_empty, &empty);
    return empty;
}

int
xmp_cg_rmdir_tree(const char *dir, struct xmp_error *err)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int ret = 0;

    if (d == NULL)
        return errno == ENOENT ? 0 : xmp_error_set(err, errno, "opendir `%s`", dir);
    while ((de = readdir(d)) != NULL) {
        char sub[XMP_CG_PATH + 256];
        if (de->d_type != DT_DIR || de->d_name[0] == '.')
            continue;
        snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name);
        if (xmp_cg_rmdir_tree(sub, err) < 0)
            ret = -1;
    }
    closedir(d);
    if (ret == 0 && rmdir(dir) < 0 && errno != ENOENT)
        return xmp_error_set(err, errno, "rmdir `%s`", dir);
    return ret;
}

void
xmp_cg_parent_dir(const char *dir, char *buf, size_t size)
{
    char *slash;

    snprintf(buf, size, "%s", dir);
    slash = strrchr(buf, '/');
    if (slash != NULL && slash != buf)
        *slash = '\0';
}

/* ---- files held open while the job runs ---- */

int
xmp_cg_held_fd(struct xmp_cgroup *cg, size_t i, const char *file)
{
    char path[XMP_CG_PATH + 64];
    int fd;

    for (size_t k = 0; k < cg->n_held; k++)
        if (cg->held[k].hier == i && strcmp(cg->held[k].file, file) == 0)
            return cg->held[k].fd;
    if (!cg->holding || cg->n_held == XMP_CGROUP_HELD ||
        !not_libcgroups(&cg->layout->h[i], cg->rel))
        return -1;
    snprintf(path, sizeof(path), "%s/%s", cg->dir[i], file);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0)
        cg->held[cg->n_held++] = (struct xmp_cg_held){i, file, fd};
    return fd;
}

int
xmp_cg_held_read(struct xmp_cgroup *cg, size_t i, const char *file, char *buf, size_t size,
                 struct xmp_error *err)
{
    int fd = xmp_cg_held_fd(cg, i, file);

    if (fd < 0)
        return xmp_cg_lc_read(&cg->layout->h[i], cg->rel, file, buf, size, err);
    return read_fd(fd, true, cg->dir[i], file, buf, size, err);
}

void
xmp_cg_held_close(struct xmp_cgroup *cg)
{
    while (cg->n_held > 0)
        close(cg->held[--cg->n_held].fd);
}
