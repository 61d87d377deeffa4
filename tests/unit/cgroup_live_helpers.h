/* Shared by the live cgroup tests (test_cgroup_live*.c): the hierarchies as the tests see them
 * (found with the pure parsers, independently of the layer's own layout), the fixtures that skip
 * without root and remove any "xmprun-test-<pid>-" leftover, and child-process helpers. */
#ifndef XMP_TEST_CGROUP_LIVE_HELPERS_H
#define XMP_TEST_CGROUP_LIVE_HELPERS_H

#include "helpers/testlib.h"
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

static inline void
read_layout(void)
{
    static const char *const v1[] = {"memory", "cpu", "cpuacct", "cpuset", "pids", "freezer"};
    char *proc = xt_read_file("/proc/self/cgroup");
    char *mi = xt_read_file("/proc/self/mountinfo");

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

static inline const struct hier *
hier(const char *ctrl)
{
    for (size_t i = 0; i < NH; i++)
        if (strcmp(H[i].ctrl, ctrl) == 0)
            return &H[i];
    return NULL;
}

static inline void
job_name(char *buf, size_t size, const char *what)
{
    snprintf(buf, size, "xmprun-test-%ld-%s", (long)getpid(), what);
}

/* Kills the processes of dir's tree and removes it, deepest first (the fixture's safety net). */
static inline void
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
        char *procs = xt_read_file(path);
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
static inline void
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

static inline void
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
 * with the mode forced to legacy (no cgroup2 tracking tree: sweep kill, cgroup.procs checks). */
static inline void
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

static inline void
live_fini(void)
{
    char left[4096];

    leftovers(left, sizeof(left), true);
    if (left[0] != '\0')
        cr_log_error("removed leftovers:%s", left);
}

static inline void
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

static inline char *
read_cg(const char *ctrl, const char *rel, const char *file)
{
    const struct hier *h = hier(ctrl);
    char path[2048];
    char *text;

    cr_assert_not_null(h, "no %s hierarchy", ctrl[0] ? ctrl : "cgroup2");
    snprintf(path, sizeof(path), "%s/%s/%s", h->dir, rel, file);
    text = xt_read_file(path);
    cr_assert_not_null(text, "cannot read %s", path);
    text[strcspn(text, "\n")] = '\0';
    return text;
}

static inline void
expect(const char *ctrl, const char *rel, const char *file, const char *want)
{
    char *got = read_cg(ctrl, rel, file);

    cr_expect_str_eq(got, want, "%s/%s: got %s, want %s", rel, file, got, want);
    free(got);
}

static inline bool
exists_in(const char *ctrl, const char *rel)
{
    const struct hier *h = hier(ctrl);
    char path[2048];

    snprintf(path, sizeof(path), "%s/%s", h->dir, rel);
    return access(path, F_OK) == 0;
}

/* True when a controller of hierarchy H[i] (or of one comounted with it) is in list. */
static inline bool
mounted_with(size_t i, const char *const *list)
{
    for (size_t j = 0; j < NH; j++) {
        if (strcmp(H[j].mnt, H[i].mnt) != 0)
            continue;
        for (const char *const *c = list; *c != NULL; c++)
            if (strcmp(H[j].ctrl, *c) == 0)
                return true;
    }
    return false;
}

/* The cgroup (relative to the hierarchy root, as /proc/<pid>/cgroup shows it) in which a worker
 * `worker` of job `job`, created without limits, must be in hierarchy H[i]: its own directory
 * where it needs one (memory and the cgroup2 tree always; in legacy mode also cpuacct, for CPU
 * times), the job's elsewhere. The freezer hierarchy is never used: a cgroup left frozen by an
 * xmprun that dies at the wrong moment would keep its tasks for good. */
/* True when a job made by make_job (a memory limit at most), with workers without limits, has
 * a directory in hierarchy H[i]: the cgroup2 tree and memory always; cpuacct (CPU times) in
 * legacy mode, and in hybrid mode only if the cgroup2 tree has no cpu.stat. cpu, cpuset and pids
 * only when a limit needs them. */
static inline bool
job_uses(size_t i, const char *job)
{
    static const char *const legacy[] = {"memory", "", "cpuacct", NULL};
    static const char *const hybrid[] = {"memory", "", NULL};
    static const char *const hybrid_old[] = {"memory", "", "cpuacct", NULL};
    char stat[2048];

    if (MODE != XMP_CGROUP_MODE_HYBRID)
        return mounted_with(i, MODE == XMP_CGROUP_MODE_LEGACY ? legacy : hybrid);
    snprintf(stat, sizeof(stat), "%s/%s/cpu.stat", hier("")->dir, job);
    return mounted_with(i, access(stat, F_OK) == 0 ? hybrid : hybrid_old);
}

/* The cgroup (relative to the hierarchy root, as /proc/<pid>/cgroup shows it) in which worker
 * `worker` of job `job`, both made without limits other than the job's memory, must be in
 * hierarchy H[i]: its own directory in the hierarchies the job uses (job_uses), and elsewhere
 * the one xmprun runs in (such a hierarchy is left alone: no cgroup.procs write at launch). */
static inline void
want_cgroup(size_t i, const char *job, const char *worker, char *want, size_t size)
{
    const char *own = H[i].own, *sep = strcmp(own, "/") ? "/" : "";

    if (job_uses(i, job))
        snprintf(want, size, "%s%s%s/%s", own, sep, job, worker);
    else
        snprintf(want, size, "%s", own);
}

static inline struct xmp_cgroup *
make_job(const char *what, int64_t memory, char *name, size_t size)
{
    struct xmp_limits l;
    struct xmp_cgroup *job = NULL;
    struct xmp_error err = {0};

    xmp_limits_init(&l);
    l.memory = memory;
    job_name(name, size, what);
    cr_assert_eq(xmp_cgroup_create_job(MODE, XMP_CGROUP_MANAGER_CGROUPFS, name, &l, &job, &err), 0,
                 "create_job: %s", err.msg);
    return job;
}

/* Forks a child that attaches itself to cg, reports the outcome on a pipe, then runs fn (or
 * pauses). Returns the pid once the child is in the cgroup. */
static inline pid_t
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

static inline void
fork_grandchild(void)
{
    if (fork() == 0) {
        for (;;)
            pause();
    }
}

/* Runs fn in a forked child (for what must not touch the test process: namespaces, credentials,
 * its cgroup) and fails the test with the message fn returns, if any. */
static inline void
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
static inline const char *fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline const char *
fail(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(child_msg, sizeof(child_msg), fmt, ap);
    va_end(ap);
    return child_msg;
}

#endif
