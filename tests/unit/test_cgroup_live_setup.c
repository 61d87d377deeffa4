/* The cgroup layer on real cgroups, in the conditions xmprun meets at setup: a read-only
 * cgroupfs, no permission, no delegated controllers (v2), a cgroup that holds processes (v2: the
 * move into xmprun-self-<pid>), and clone3(CLONE_INTO_CGROUP). Root only; each check that needs
 * a namespace, other credentials or another cgroup runs in a forked child. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* cpu_set_t macros, pipe2 */
#endif
#include "unit/cgroup_live_helpers.h"

/* Child side: create_job (with limits l, NULL for none) must fail with errno e1 (or e2) and a
 * message holding both hints. */
static const char *
expect_create_error(const char *what, const struct xmp_limits *l, int e1, int e2, const char *hint1,
                    const char *hint2)
{
    struct xmp_cgroup *job = NULL;
    struct xmp_error err = {0};
    char name[128];

    job_name(name, sizeof(name), what);
    if (xmp_cgroup_create_job(MODE, XMP_CGROUP_MANAGER_CGROUPFS, name, l, &job, &err) == 0) {
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
    return expect_create_error("ro", NULL, EROFS, EROFS, "read-only", "--cgroupns=private");
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
    /* The cgroup layer says why; the advice that fits the place is the runner's (see
     * e2e/test_unprivileged's required_refuses_with_advice_that_fits). */
    return expect_create_error("nobody", NULL, EACCES, EPERM, "not root", "not delegated");
}

LIVE_TEST(no_permission_says_what_to_do)
{
    in_child(create_unprivileged);
    assert_clean();
}

static struct xmp_cgroup *CLONE_CG;
static char CLONE_JOB[128];

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
    text = xt_read_file(path);
    kill((pid_t)pid, SIGKILL);
    waitpid((pid_t)pid, &status, 0);
    if (text == NULL)
        return "cannot read the clone's /proc/pid/cgroup";
    for (size_t i = 0; i < NH; i++) {
        char want[1200];
        want_cgroup(i, CLONE_JOB, "worker-0", want, sizeof(want));
        if (xmp_cgroup_parse_proc(text, H[i].ctrl, got, sizeof(got), NULL, NULL) < 0 ||
            strcmp(got, want) != 0) {
            fail("clone not in %s in %s: %s", want, H[i].ctrl[0] ? H[i].ctrl : "cgroup2", text);
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
    snprintf(CLONE_JOB, sizeof(CLONE_JOB), "%s", name);
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
    if (xmp_cgroup_create_job(MODE, XMP_CGROUP_MANAGER_CGROUPFS, name, &l, &job, &err) < 0) {
        fail("create_job in a cgroup with processes: %s", err.msg);
        return child_msg;
    }
    if (xmp_cgroup_create_child(job, "worker-0", &l, &w0, &err) < 0) {
        fail("create_child: %s", err.msg);
        return child_msg;
    }
    text = xt_read_file("/proc/self/cgroup");
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
    /* Each controller the limits need is named with what needs it. */
    struct xmp_limits l;
    xmp_limits_init(&l);
    l.memory = 64 << 20;
    l.cpus_milli = 500;
    l.pids = 64;
    return expect_create_error("bare", &l, ENODEV, ENODEV,
                               "controllers memory (for a memory limit), cpu (for a CPU quota), "
                               "pids (for a process limit) are not delegated",
                               "Delegate");
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
