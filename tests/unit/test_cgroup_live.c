/* The cgroup layer on the real cgroups of this machine (hybrid, legacy or pure v2): create, limits
 * read back from the kernel's files, attach, kill, a real OOM kill, gc and destroy. Needs root and
 * a writable cgroupfs; skipped otherwise. Every test checks that it left no "xmprun-test-<pid>-"
 * directory behind, and the fixture removes any it finds so that a failing test cannot leak. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* cpu_set_t macros, pipe2 */
#endif
#include "isolate/cgroup.h"
#include "isolate/cgroup_internal.h" /* the pre-5.14 kill, tested directly */

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_H 8

/* One hierarchy as the test sees it, found independently of the layer's own layout. */
struct hier {
    char ctrl[16]; /* "" for cgroup2 */
    char own[1024];
    char dir[1024]; /* xmprun's own cgroup directory */
    char mnt[1024];
};

static struct hier H[MAX_H];
static size_t NH;
static enum xmp_cgroup_mode MODE;

static char *
slurp(const char *path)
{
    FILE *f = fopen(path, "re");
    static char buf[65536];
    size_t n;

    if (f == NULL)
        return NULL;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return strdup(buf);
}

static void
read_layout(void)
{
    static const char *const v1[] = {"memory", "cpu", "cpuacct", "cpuset", "pids", "freezer"};
    char *proc = slurp("/proc/self/cgroup");
    char *mi = slurp("/proc/self/mountinfo");

    NH = 0;
    cr_assert_not_null(proc);
    cr_assert_not_null(mi);
    for (size_t i = 0; MODE != XMP_CGROUP_MODE_UNIFIED && i < sizeof(v1) / sizeof(v1[0]); i++) {
        char mnt[1024], root[1024];
        struct hier *h = &H[NH];
        if (xmp_cgroup_parse_mountinfo(mi, v1[i], mnt, sizeof(mnt), root, sizeof(root), NULL) < 0)
            continue;
        cr_assert_eq(xmp_cgroup_parse_proc(proc, v1[i], h->own, sizeof(h->own), NULL, NULL), 0);
        cr_assert_eq(xmp_cgroup_join(mnt, root, h->own, h->dir, sizeof(h->dir), NULL), 0);
        strcpy(h->ctrl, v1[i]);
        strcpy(h->mnt, mnt);
        NH++;
    }
    if (MODE != XMP_CGROUP_MODE_LEGACY) {
        char mnt[1024], root[1024];
        struct hier *h = &H[NH];
        cr_assert_eq(
            xmp_cgroup_parse_mountinfo(mi, NULL, mnt, sizeof(mnt), root, sizeof(root), NULL), 0);
        cr_assert_eq(xmp_cgroup_parse_proc(proc, "", h->own, sizeof(h->own), NULL, NULL), 0);
        cr_assert_eq(xmp_cgroup_join(mnt, root, h->own, h->dir, sizeof(h->dir), NULL), 0);
        h->ctrl[0] = '\0';
        strcpy(h->mnt, mnt);
        NH++;
    }
    free(proc);
    free(mi);
}

static const struct hier *
hier(const char *ctrl)
{
    for (size_t i = 0; i < NH; i++)
        if (strcmp(H[i].ctrl, ctrl) == 0)
            return &H[i];
    return NULL;
}

static void
job_name(char *buf, size_t size, const char *what)
{
    snprintf(buf, size, "xmprun-test-%ld-%s", (long)getpid(), what);
}

/* Kills the processes of dir's tree and removes it, deepest first (the fixture's safety net). */
static void
scrub(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char path[2048];

    if (d == NULL)
        return;
    while ((de = readdir(d)) != NULL) {
        if (de->d_type == DT_DIR && de->d_name[0] != '.') {
            snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
            scrub(path);
        }
    }
    closedir(d);
    snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    for (int round = 0; round < 100; round++) {
        char *procs = slurp(path);
        bool any = procs != NULL && procs[0] != '\0';
        for (char *p = procs; any && p && *p;) {
            char *end;
            long pid = strtol(p, &end, 10);
            if (end == p)
                break;
            kill((pid_t)pid, SIGKILL);
            p = end + (*end == '\n');
        }
        free(procs);
        if (!any || rmdir(dir) == 0)
            break;
        usleep(20000);
    }
    rmdir(dir);
}

/* Names of the leftovers of this test process, "" when there are none. */
static void
leftovers(char *out, size_t size, bool remove)
{
    char prefix[64];

    snprintf(prefix, sizeof(prefix), "xmprun-test-%ld-", (long)getpid());
    out[0] = '\0';
    for (size_t i = 0; i < NH; i++) {
        DIR *d = opendir(H[i].dir);
        struct dirent *de;
        if (d == NULL)
            continue;
        while ((de = readdir(d)) != NULL) {
            char path[2048];
            if (strncmp(de->d_name, prefix, strlen(prefix)) != 0)
                continue;
            snprintf(path, sizeof(path), "%s/%s", H[i].dir, de->d_name);
            snprintf(out + strlen(out), size - strlen(out), " %s", path);
            if (remove)
                scrub(path);
        }
        closedir(d);
    }
}

static void
live_init(void)
{
    struct xmp_error err = {0};

    if (geteuid() != 0)
        cr_skip_test("needs root to create cgroups");
    if (xmp_cgroup_detect(&MODE, &err) < 0)
        cr_skip_test("no cgroup filesystem: %s", err.msg);
    if (access("/sys/fs/cgroup", W_OK) < 0 && errno == EROFS)
        cr_skip_test("cgroupfs is read-only");
    read_layout();
    cr_log_info("cgroup mode %s, %zu hierarchies", xmp_cgroup_mode_name(MODE), NH);
}

/* On a hybrid host the v1 hierarchies alone are a real legacy layout: the same tests run again
 * with the mode forced to legacy (no cgroup2 tracking tree: freezer kill, cgroup.procs checks). */
static void
legacy_init(void)
{
    struct xmp_error err = {0};
    enum xmp_cgroup_mode detected;

    if (geteuid() != 0)
        cr_skip_test("needs root to create cgroups");
    if (xmp_cgroup_detect(&detected, &err) < 0 || detected != XMP_CGROUP_MODE_HYBRID)
        cr_skip_test("legacy mode is tested on hybrid hosts only");
    MODE = XMP_CGROUP_MODE_LEGACY;
    read_layout();
}

static void
live_fini(void)
{
    char left[4096];

    leftovers(left, sizeof(left), true);
    if (left[0] != '\0')
        cr_log_error("removed leftovers:%s", left);
}

static void
assert_clean(void)
{
    char left[4096];

    leftovers(left, sizeof(left), false);
    cr_assert_str_empty(left, "cgroups left behind:%s", left);
}

TestSuite(cgroup_live, .init = live_init, .fini = live_fini, .timeout = 30);
TestSuite(cgroup_legacy, .init = legacy_init, .fini = live_fini, .timeout = 30);

/* Each test runs in the detected mode and, on a hybrid host, in legacy mode. */
#define LIVE_TEST(name)                                                                            \
    static void name##_body(void);                                                                 \
    Test(cgroup_live, name)                                                                        \
    {                                                                                              \
        name##_body();                                                                             \
    }                                                                                              \
    Test(cgroup_legacy, name)                                                                      \
    {                                                                                              \
        name##_body();                                                                             \
    }                                                                                              \
    static void name##_body(void)

static char *
read_cg(const char *ctrl, const char *rel, const char *file)
{
    const struct hier *h = hier(ctrl);
    char path[2048];
    char *text;

    cr_assert_not_null(h, "no %s hierarchy", ctrl[0] ? ctrl : "cgroup2");
    snprintf(path, sizeof(path), "%s/%s/%s", h->dir, rel, file);
    text = slurp(path);
    cr_assert_not_null(text, "cannot read %s", path);
    text[strcspn(text, "\n")] = '\0';
    return text;
}

static void
expect(const char *ctrl, const char *rel, const char *file, const char *want)
{
    char *got = read_cg(ctrl, rel, file);

    cr_expect_str_eq(got, want, "%s/%s: got %s, want %s", rel, file, got, want);
    free(got);
}

static bool
exists_in(const char *ctrl, const char *rel)
{
    const struct hier *h = hier(ctrl);
    char path[2048];

    snprintf(path, sizeof(path), "%s/%s", h->dir, rel);
    return access(path, F_OK) == 0;
}

static struct xmp_cgroup *
make_job(const char *what, int64_t memory, char *name, size_t size)
{
    struct xmp_limits l;
    struct xmp_cgroup *job = NULL;
    struct xmp_error err = {0};

    xmp_limits_init(&l);
    l.memory = memory;
    job_name(name, size, what);
    cr_assert_eq(xmp_cgroup_create_job(MODE, name, &l, &job, &err), 0, "create_job: %s", err.msg);
    return job;
}

LIVE_TEST(create_limits_destroy)
{
    struct xmp_cgroup *job, *w0 = NULL, *w1 = NULL;
    struct xmp_limits l;
    struct xmp_error err = {0};
    char name[128], r0[160], r1[160];

    job = make_job("limits", 512 << 20, name, sizeof(name));
    xmp_limits_init(&l);
    l.memory = 128 << 20;
    l.memory_high = 100 << 20;
    l.swap = 0;
    l.cpus_milli = 500;
    l.pids = 64;
    l.has_cpus = true;
    CPU_SET(0, &l.cpus);
    cr_assert_eq(xmp_cgroup_create_child(job, "worker-0", &l, &w0, &err), 0, "%s", err.msg);
    xmp_limits_init(&l);
    l.memory = 256 << 20;
    l.cpus_milli = 1500;
    l.pids = 128;
    cr_assert_eq(xmp_cgroup_create_child(job, "worker-1", &l, &w1, &err), 0, "%s", err.msg);
    snprintf(r0, sizeof(r0), "%s/worker-0", name);
    snprintf(r1, sizeof(r1), "%s/worker-1", name);
    cr_expect(strstr(xmp_cgroup_path(w0), r0) != NULL, "path %s", xmp_cgroup_path(w0));

    if (MODE == XMP_CGROUP_MODE_UNIFIED) {
        expect("", name, "memory.max", "536870912");
        expect("", r0, "memory.max", "134217728");
        expect("", r0, "memory.high", "104857600");
        char swapfile[200];
        snprintf(swapfile, sizeof(swapfile), "%s/memory.swap.max", r0);
        if (exists_in("", swapfile))
            expect("", r0, "memory.swap.max", "0");
        expect("", r0, "cpu.max", "50000 100000");
        expect("", r0, "cpuset.cpus", "0");
        expect("", r0, "pids.max", "64");
        expect("", r1, "memory.max", "268435456");
        expect("", r1, "cpu.max", "150000 100000");
        expect("", r1, "pids.max", "128");
        expect("", r1, "memory.high", "max");
    } else {
        expect("memory", name, "memory.limit_in_bytes", "536870912");
        expect("memory", r0, "memory.limit_in_bytes", "134217728");
        expect("memory", r0, "memory.soft_limit_in_bytes", "104857600");
        if (exists_in("memory", "memory.memsw.limit_in_bytes"))
            expect("memory", r0, "memory.memsw.limit_in_bytes", "134217728");
        expect("cpu", r0, "cpu.cfs_period_us", "100000");
        expect("cpu", r0, "cpu.cfs_quota_us", "50000");
        expect("cpu", r1, "cpu.cfs_quota_us", "150000");
        expect("cpuset", r0, "cpuset.cpus", "0");
        char *pm = read_cg("cpuset", ".", "cpuset.mems");
        expect("cpuset", r0, "cpuset.mems", pm);
        expect("cpuset", r1, "cpuset.mems", pm);
        free(pm);
        expect("pids", r0, "pids.max", "64");
        expect("pids", r1, "pids.max", "128");
        expect("memory", r1, "memory.limit_in_bytes", "268435456");
        if (MODE == XMP_CGROUP_MODE_HYBRID)
            cr_expect(exists_in("", r1), "no %s in the cgroup2 tracking tree", r1);
    }
    if (MODE != XMP_CGROUP_MODE_LEGACY)
        cr_expect_geq(xmp_cgroup_dirfd(w0), 0);
    cr_assert_eq(xmp_cgroup_destroy(job, &err), 0, "destroy: %s", err.msg);
    for (size_t i = 0; i < NH; i++)
        cr_expect(!exists_in(H[i].ctrl, name), "%s left in %s", name, H[i].dir);
    assert_clean();
}

/* Forks a child that attaches itself to cg, reports the outcome on a pipe, then runs fn (or
 * pauses). Returns the pid once the child is in the cgroup. */
static pid_t
spawn_attached(struct xmp_cgroup *cg, void (*fn)(void))
{
    int p[2];
    pid_t pid;
    struct xmp_error err = {0};
    char msg[sizeof(err.msg)] = "";

    cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(p[0]);
        if (xmp_cgroup_attach(cg, 0, false, &err) < 0) {
            if (write(p[1], err.msg, strlen(err.msg) + 1) < 0)
                _exit(2);
            _exit(1);
        }
        if (write(p[1], "", 1) < 0)
            _exit(2);
        close(p[1]);
        if (fn != NULL)
            fn();
        for (;;)
            pause();
    }
    close(p[1]);
    cr_assert_gt(read(p[0], msg, sizeof(msg) - 1), 0, "child died before reporting");
    close(p[0]);
    if (msg[0] != '\0') {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        cr_assert_fail("attach: %s", msg);
    }
    return pid;
}

LIVE_TEST(attach_shows_in_every_hierarchy)
{
    struct xmp_cgroup *job, *w0 = NULL;
    struct xmp_limits l;
    struct xmp_error err = {0};
    char name[128], path[64];
    pid_t pid;

    job = make_job("attach", -1, name, sizeof(name));
    xmp_limits_init(&l);
    cr_assert_eq(xmp_cgroup_create_child(job, "worker-0", &l, &w0, &err), 0, "%s", err.msg);
    pid = spawn_attached(w0, NULL);
    snprintf(path, sizeof(path), "/proc/%ld/cgroup", (long)pid);
    char *text = slurp(path);
    cr_assert_not_null(text);
    for (size_t i = 0; i < NH; i++) {
        char got[1024], want[1200];
        cr_assert_eq(xmp_cgroup_parse_proc(text, H[i].ctrl, got, sizeof(got), NULL, NULL), 0);
        snprintf(want, sizeof(want), "%s%s%s/worker-0", H[i].own, strcmp(H[i].own, "/") ? "/" : "",
                 name);
        cr_expect_str_eq(got, want, "%s: %s, want %s", H[i].ctrl[0] ? H[i].ctrl : "cgroup2", got,
                         want);
    }
    free(text);
    cr_expect(!xmp_cgroup_is_empty(w0));
    cr_expect(!xmp_cgroup_is_empty(job));
    /* destroy kills what is left; the unreaped zombie must not hold the cgroup up. */
    struct timespec t0, t1;
    int status = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert_eq(xmp_cgroup_destroy(job, &err), 0, "destroy: %s", err.msg);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "status %#x", status);
    cr_expect_lt(t1.tv_sec - t0.tv_sec, 3, "destroy took %ld s", (long)(t1.tv_sec - t0.tv_sec));
    assert_clean();
}

static void
fork_grandchild(void)
{
    if (fork() == 0) {
        for (;;)
            pause();
    }
}

LIVE_TEST(kill_empties_the_cgroup)
{
    struct xmp_cgroup *job, *w0 = NULL;
    struct xmp_limits l;
    struct xmp_error err = {0};
    char name[128];
    int status = 0;
    pid_t pid;

    job = make_job("kill", -1, name, sizeof(name));
    xmp_limits_init(&l);
    cr_assert_eq(xmp_cgroup_create_child(job, "worker-0", &l, &w0, &err), 0, "%s", err.msg);
    pid = spawn_attached(w0, fork_grandchild);
    cr_assert_eq(xmp_cgroup_kill(job, &err), 0, "kill: %s", err.msg);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "status %#x", status);
    /* The grandchild is reaped by init or a subreaper: wait for the cgroup to report empty. */
    bool empty = false;
    for (int i = 0; i < 500 && !(empty = xmp_cgroup_is_empty(job)); i++)
        usleep(10000);
    cr_expect(empty, "cgroup not empty 5 s after kill");
    cr_assert_eq(xmp_cgroup_destroy(job, &err), 0, "destroy: %s", err.msg);
    assert_clean();
}

static void
eat_256m(void)
{
    size_t size = 256u << 20;
    char *p = malloc(size);

    if (p == NULL)
        _exit(3);
    for (size_t i = 0; i < size; i += 4096)
        p[i] = 1;
    _exit(0);
}

/* The fallback for kernels without cgroup.kill, run on this kernel's cgroup2 tree. */
LIVE_TEST(freeze_kill_without_cgroup_kill)
{
    struct xmp_cgroup *job, *w0 = NULL;
    struct xmp_limits l;
    struct xmp_error err = {0};
    char name[128], dir[1300];
    int status = 0;
    pid_t pid;

    if (MODE == XMP_CGROUP_MODE_LEGACY)
        cr_skip_test("no cgroup2 tree in legacy mode");
    job = make_job("freeze", -1, name, sizeof(name));
    xmp_limits_init(&l);
    cr_assert_eq(xmp_cgroup_create_child(job, "worker-0", &l, &w0, &err), 0, "%s", err.msg);
    pid = spawn_attached(w0, fork_grandchild);
    snprintf(dir, sizeof(dir), "%s/%s", hier("")->dir, name);
    cr_assert_eq(xmp_cg2_freeze_kill(dir, &err), 0, "freeze kill: %s", err.msg);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "status %#x", status);
    bool empty = false;
    for (int i = 0; i < 500 && !(empty = xmp_cg2_is_empty(dir)); i++)
        usleep(10000);
    cr_expect(empty, "cgroup not empty 5 s after the freeze kill");
    cr_assert_eq(xmp_cgroup_destroy(job, &err), 0, "destroy: %s", err.msg);
    assert_clean();
}

LIVE_TEST(oom_kill_is_reported)
{
    struct xmp_cgroup *job, *w0 = NULL;
    struct xmp_limits l;
    struct xmp_error err = {0};
    struct xmp_cgroup_stats st;
    char name[128];
    int status = 0;
    pid_t pid;

    job = make_job("oom", -1, name, sizeof(name));
    xmp_limits_init(&l);
    l.memory = 64 << 20;
    l.swap = 0;
    cr_assert_eq(xmp_cgroup_create_child(job, "worker-0", &l, &w0, &err), 0, "%s", err.msg);
    pid = spawn_attached(w0, eat_256m);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "status %#x", status);
    cr_assert_eq(xmp_cgroup_read_stats(w0, &st, &err), 0, "stats: %s", err.msg);
    cr_expect_geq(st.oom_kills, 1, "oom_kills %ld", (long)st.oom_kills);
    cr_expect_gt(st.memory_peak, 48 << 20, "peak %ld", (long)st.memory_peak);
    cr_expect_leq(st.memory_peak, 65 << 20, "peak %ld", (long)st.memory_peak);
    cr_expect_gt(st.user_usec + st.system_usec, 0, "no CPU time accounted");
    cr_log_info("worker stats: peak %ld, oom_kills %ld, user %ld us, system %ld us",
                (long)st.memory_peak, (long)st.oom_kills, (long)st.user_usec, (long)st.system_usec);
    cr_assert_eq(xmp_cgroup_read_stats(job, &st, &err), 0, "job stats: %s", err.msg);
    /* memory.events is hierarchical on v2; v1's memory.oom_control counts the cgroup itself. */
    if (MODE == XMP_CGROUP_MODE_UNIFIED)
        cr_expect_geq(st.oom_kills, 1, "job oom_kills %ld", (long)st.oom_kills);
    cr_assert_eq(xmp_cgroup_destroy(job, &err), 0, "destroy: %s", err.msg);
    assert_clean();
}

static bool
orphan_by_suffix(const char *name, void *data)
{
    const char *prefix = data;
    size_t pl = strlen(prefix);

    /* Only this test's own jobs: never touch another process's cgroups. */
    return strncmp(name, prefix, pl) == 0 && strcmp(name + pl, "orphan") == 0;
}

LIVE_TEST(gc_removes_orphans_only)
{
    struct xmp_cgroup *orphan, *keep, *w0 = NULL, *k0 = NULL;
    struct xmp_limits l;
    struct xmp_error err = {0};
    char oname[128], kname[128], prefix[64];
    int status = 0;
    pid_t pid;

    orphan = make_job("orphan", 256 << 20, oname, sizeof(oname));
    keep = make_job("keep", 256 << 20, kname, sizeof(kname));
    xmp_limits_init(&l);
    cr_assert_eq(xmp_cgroup_create_child(orphan, "worker-0", &l, &w0, &err), 0, "%s", err.msg);
    cr_assert_eq(xmp_cgroup_create_child(keep, "worker-0", &l, &k0, &err), 0, "%s", err.msg);
    pid = spawn_attached(w0, NULL);
    snprintf(prefix, sizeof(prefix), "xmprun-test-%ld-", (long)getpid());
    cr_assert_eq(xmp_cgroup_gc(MODE, orphan_by_suffix, prefix, &err), 1, "gc: %s", err.msg);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "status %#x", status);
    for (size_t i = 0; i < NH; i++) {
        cr_expect(!exists_in(H[i].ctrl, oname), "gc left %s in %s", oname, H[i].dir);
        cr_expect(exists_in(H[i].ctrl, kname), "gc removed %s in %s", kname, H[i].dir);
    }
    /* The orphan's object is stale now; destroying it must still succeed and free it. */
    cr_expect_eq(xmp_cgroup_destroy(orphan, &err), 0, "destroy stale: %s", err.msg);
    cr_assert_eq(xmp_cgroup_destroy(keep, &err), 0, "destroy: %s", err.msg);
    assert_clean();
}

LIVE_TEST(destroy_null_and_bad_names)
{
    struct xmp_cgroup *job, *c = NULL;
    struct xmp_limits l;
    struct xmp_error err = {0};
    char name[128];

    cr_expect_eq(xmp_cgroup_destroy(NULL, &err), 0);
    xmp_limits_init(&l);
    cr_expect_eq(xmp_cgroup_create_job(MODE, "../escape", &l, &job, &err), -1);
    cr_expect_eq(err.errnum, EINVAL);
    job = make_job("names", -1, name, sizeof(name));
    cr_expect_eq(xmp_cgroup_create_child(job, "a/b", &l, &c, &err), -1);
    cr_expect_null(c);
    /* A name in use is refused, and the failed create leaves the existing cgroups alone. */
    struct xmp_cgroup *again = NULL;
    cr_expect_eq(xmp_cgroup_create_job(MODE, name, NULL, &again, &err), -1);
    cr_expect_eq(err.errnum, EEXIST, "%s", err.msg);
    cr_assert_eq(xmp_cgroup_create_child(job, "worker-0", NULL, &c, &err), 0, "%s", err.msg);
    cr_expect_eq(xmp_cgroup_create_child(job, "worker-0", NULL, &again, &err), -1);
    for (size_t i = 0; i < NH; i++)
        cr_expect(exists_in(H[i].ctrl, name), "%s gone from %s", name, H[i].dir);
    cr_assert_eq(xmp_cgroup_destroy(job, &err), 0, "destroy: %s", err.msg);
    assert_clean();
}

/* Runs fn in a forked child (for what must not touch the test process: namespaces, credentials,
 * its cgroup) and fails the test with the message fn returns, if any. */
static void
in_child(const char *(*fn)(void))
{
    int p[2];
    char msg[512] = "";
    int status = 0;
    pid_t pid;

    cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        const char *m = fn();
        close(p[0]);
        if (m != NULL && write(p[1], m, strlen(m)) < 0)
            _exit(2);
        _exit(m == NULL ? 0 : 1);
    }
    close(p[1]);
    if (read(p[0], msg, sizeof(msg) - 1) < 0)
        msg[0] = '\0';
    close(p[0]);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert_str_empty(msg, "%s", msg);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
}

static char child_msg[512];

/* The failure message of a child-side check (see in_child). */
static const char *fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *
fail(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(child_msg, sizeof(child_msg), fmt, ap);
    va_end(ap);
    return child_msg;
}

/* Child side: create_job must fail with errno e1 (or e2) and a message holding both hints. */
static const char *
expect_create_error(const char *what, int e1, int e2, const char *hint1, const char *hint2)
{
    struct xmp_cgroup *job = NULL;
    struct xmp_limits l;
    struct xmp_error err = {0};
    char name[128];

    xmp_limits_init(&l);
    job_name(name, sizeof(name), what);
    if (xmp_cgroup_create_job(MODE, name, &l, &job, &err) == 0) {
        xmp_cgroup_destroy(job, NULL);
        return fail("create_job succeeded (%s)", what);
    }
    if ((err.errnum != e1 && err.errnum != e2) || strstr(err.msg, hint1) == NULL ||
        strstr(err.msg, hint2) == NULL)
        return fail("%s: errnum %d, message: %s", what, err.errnum, err.msg);
    return NULL;
}

static const char *
create_read_only(void)
{
    /* A private mount namespace in which every cgroup mount is read-only, as in a container
     * started without a writable /sys/fs/cgroup. */
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return "unshare/mount private failed";
    for (size_t i = 0; i < NH; i++)
        if (mount(NULL, H[i].mnt, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) < 0)
            return "remount read-only failed";
    return expect_create_error("ro", EROFS, EROFS, "read-only", "--cgroupns=private");
}

LIVE_TEST(read_only_cgroupfs_says_what_to_do)
{
    in_child(create_read_only);
    assert_clean();
}

static const char *
create_unprivileged(void)
{
    if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
        setresuid(65534, 65534, 65534) < 0)
        return "cannot drop to nobody";
    return expect_create_error("nobody", EACCES, EPERM, "Delegate=yes", "optional");
}

LIVE_TEST(no_permission_says_what_to_do)
{
    in_child(create_unprivileged);
    assert_clean();
}

static struct xmp_cgroup *CLONE_CG;

static const char *
clone_into(void)
{
    struct clone_args args = {0};
    struct xmp_error err = {0};
    char path[64], *text, got[1024];
    int status = 0;
    long pid;

    args.flags = CLONE_INTO_CGROUP;
    args.exit_signal = SIGCHLD;
    args.cgroup = (uint64_t)xmp_cgroup_dirfd(CLONE_CG);
    pid = syscall(SYS_clone3, &args, sizeof(args));
    if (pid < 0)
        return "clone3(CLONE_INTO_CGROUP) failed";
    if (pid == 0) {
        /* Already in the cgroup2 directory: attach only joins the v1 hierarchies. */
        if (xmp_cgroup_attach(CLONE_CG, 0, true, &err) < 0)
            _exit(1);
        for (;;)
            pause();
    }
    usleep(100000);
    snprintf(path, sizeof(path), "/proc/%ld/cgroup", pid);
    text = slurp(path);
    kill((pid_t)pid, SIGKILL);
    waitpid((pid_t)pid, &status, 0);
    if (text == NULL)
        return "cannot read the clone's /proc/pid/cgroup";
    for (size_t i = 0; i < NH; i++) {
        if (xmp_cgroup_parse_proc(text, H[i].ctrl, got, sizeof(got), NULL, NULL) < 0 ||
            strstr(got, "/worker-0") == NULL) {
            fail("clone not in worker-0 in %s: %s", H[i].ctrl[0] ? H[i].ctrl : "cgroup2", text);
            free(text);
            return child_msg;
        }
    }
    free(text);
    if (!WIFSIGNALED(status))
        return "the clone exited: attach failed";
    return NULL;
}

LIVE_TEST(clone3_into_cgroup)
{
    struct xmp_cgroup *job, *w0 = NULL;
    struct xmp_limits l;
    struct xmp_error err = {0};
    char name[128];

    if (MODE == XMP_CGROUP_MODE_LEGACY)
        cr_skip_test("no cgroup2 tree in legacy mode");
    job = make_job("clone3", -1, name, sizeof(name));
    xmp_limits_init(&l);
    cr_assert_eq(xmp_cgroup_create_child(job, "worker-0", &l, &w0, &err), 0, "%s", err.msg);
    cr_assert_geq(xmp_cgroup_dirfd(w0), 0);
    CLONE_CG = w0;
    in_child(clone_into);
    cr_assert_eq(xmp_cgroup_destroy(job, &err), 0, "destroy: %s", err.msg);
    assert_clean();
}

static char NEST[1200];

static bool
self_is_orphan(const char *name, void *data)
{
    (void)data;
    return strncmp(name, "xmprun-self-", 12) == 0;
}

static const char *
nested_self_move(void)
{
    struct xmp_cgroup *job = NULL, *w0 = NULL;
    struct xmp_limits l;
    struct xmp_error err = {0};
    char name[128], path[1400], *text, got[1024], want[1400];
    int fd;

    snprintf(path, sizeof(path), "%s/cgroup.procs", NEST);
    fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "0", 1) != 1)
        return "cannot enter the nest cgroup";
    close(fd);
    xmp_limits_init(&l);
    l.memory = 64 << 20;
    job_name(name, sizeof(name), "inner");
    if (xmp_cgroup_create_job(MODE, name, &l, &job, &err) < 0) {
        fail("create_job in a cgroup with processes: %s", err.msg);
        return child_msg;
    }
    if (xmp_cgroup_create_child(job, "worker-0", &l, &w0, &err) < 0) {
        fail("create_child: %s", err.msg);
        return child_msg;
    }
    text = slurp("/proc/self/cgroup");
    xmp_cgroup_parse_proc(text, "", got, sizeof(got), NULL, NULL);
    free(text);
    snprintf(want, sizeof(want), "/xmprun-self-%ld", (long)getpid());
    if (strstr(got, want) == NULL) {
        fail("xmprun is in %s, not in its leaf", got);
        return child_msg;
    }
    snprintf(path, sizeof(path), "%s/%s/worker-0/memory.max", NEST, name);
    if (access(path, F_OK) < 0)
        return "the job is not below the nest (xmprun's own cgroup)";
    /* gc must never remove the leaf xmprun itself lives in. */
    if (xmp_cgroup_gc(MODE, self_is_orphan, NULL, &err) != 0)
        return "gc removed something";
    if (xmp_cgroup_destroy(job, &err) < 0) {
        fail("destroy: %s", err.msg);
        return child_msg;
    }
    return NULL;
}

LIVE_TEST(v2_moves_itself_into_a_leaf)
{
    const struct hier *h;

    if (MODE != XMP_CGROUP_MODE_UNIFIED)
        cr_skip_test("the no-internal-processes rule is a cgroup v2 matter");
    h = hier("");
    snprintf(NEST, sizeof(NEST), "%s/xmprun-test-%ld-nest", h->dir, (long)getpid());
    cr_assert_eq(mkdir(NEST, 0755), 0, "mkdir %s: %s", NEST, strerror(errno));
    in_child(nested_self_move);
    /* The leaf outlives the process that moved there (gc's job); the test removes it. */
    scrub(NEST);
    cr_expect(access(NEST, F_OK) < 0, "cannot remove %s", NEST);
    assert_clean();
}

static const char *
create_without_controllers(void)
{
    char path[1300];
    int fd;

    snprintf(path, sizeof(path), "%s/bare/cgroup.procs", NEST);
    fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "0", 1) != 1)
        return "cannot enter the bare cgroup";
    close(fd);
    return expect_create_error("bare", ENODEV, ENODEV, "memory, cpu, pids", "Delegate");
}

LIVE_TEST(v2_missing_controllers_are_named)
{
    char bare[1300];

    if (MODE != XMP_CGROUP_MODE_UNIFIED)
        cr_skip_test("controller delegation is a cgroup v2 matter");
    /* nest/bare: nothing enabled in nest's subtree_control, so bare has no controllers. */
    snprintf(NEST, sizeof(NEST), "%s/xmprun-test-%ld-nest", hier("")->dir, (long)getpid());
    snprintf(bare, sizeof(bare), "%s/bare", NEST);
    cr_assert_eq(mkdir(NEST, 0755), 0, "mkdir %s: %s", NEST, strerror(errno));
    cr_assert_eq(mkdir(bare, 0755), 0, "mkdir %s: %s", bare, strerror(errno));
    in_child(create_without_controllers);
    scrub(NEST);
    assert_clean();
}
