/* The cgroup layer on the real cgroups of this machine (hybrid, legacy or pure v2): create, limits
 * read back from the kernel's files, attach, kill, a real OOM kill, gc and destroy. Needs root and
 * a writable cgroupfs; skipped otherwise. Every test checks that it left no "xmprun-test-<pid>-"
 * directory behind, and the fixture removes any it finds so that a failing test cannot leak. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* cpu_set_t macros, pipe2 */
#endif
#include "unit/cgroup_live_helpers.h"

#include <sys/prctl.h>

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
        expect("cpuset", name, "cpuset.mems", pm);
        expect("cpuset", r0, "cpuset.mems", pm);
        free(pm);
        /* worker-1 asks for no cpuset: it has no cpuset directory, its tasks join the job's,
         * which worker-0's cpuset made. */
        cr_expect(!exists_in("cpuset", r1), "%s has a cpuset directory", r1);
        cr_expect(exists_in("pids", r1) && exists_in("cpu", r1), "%s lacks pids or cpu", r1);
        char *pc = read_cg("cpuset", ".", "cpuset.cpus");
        expect("cpuset", name, "cpuset.cpus", pc);
        free(pc);
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

/* A worker without limits gets directories of its own only where it needs them, and is left
 * alone elsewhere (see want_cgroup). */
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
    char *text = xt_read_file(path);
    cr_assert_not_null(text);
    for (size_t i = 0; i < NH; i++) {
        char got[1024], want[1200];
        cr_assert_eq(xmp_cgroup_parse_proc(text, H[i].ctrl, got, sizeof(got), NULL, NULL), 0);
        want_cgroup(i, name, "worker-0", want, sizeof(want));
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

LIVE_TEST(kill_empties_the_cgroup)
{
    struct xmp_cgroup *job, *w0 = NULL;
    struct xmp_limits l;
    struct xmp_error err = {0};
    char name[128], r0[256];
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
    /* A kill never freezes (a freezer left FROZEN by an xmprun that dies at the wrong instant
     * keeps the tasks in D state for good), so a worker has no freezer directory to freeze. (The
     * e2e test that SIGKILLs xmprun in a legacy stop cannot aim at a kill this short.) */
    snprintf(r0, sizeof(r0), "%s/worker-0", name);
    for (size_t h = 0; h < NH; h++)
        if (strcmp(H[h].ctrl, "freezer") == 0)
            cr_expect(!exists_in("freezer", r0), "worker-0 has a directory in %s", H[h].dir);
    cr_assert_eq(xmp_cgroup_destroy(job, &err), 0, "destroy: %s", err.msg);
    assert_clean();
}

static void
fork_setsid_grandchild(void)
{
    if (fork() == 0) {
        setsid();
        for (;;)
            pause();
    }
}

/* The graceful stop: SIGTERM to every process listed in the cgroup, including one that left
 * the worker's process group with setsid(). In legacy mode the list comes from v1. */
LIVE_TEST(signal_reaches_every_process)
{
    struct xmp_cgroup *job, *w0 = NULL;
    struct xmp_limits l;
    struct xmp_error err = {0};
    char name[128];
    int status = 0;
    pid_t pid;

    job = make_job("signal", -1, name, sizeof(name));
    xmp_limits_init(&l);
    cr_assert_eq(xmp_cgroup_create_child(job, "worker-0", &l, &w0, &err), 0, "%s", err.msg);
    pid = spawn_attached(w0, fork_setsid_grandchild);
    /* Until the grandchild shows up in the cgroup, the signal could miss it. */
    bool two = false;
    /* The cgroup2 tree where there is one (unified, hybrid), else v1 memory (legacy). */
    const struct hier *h = hier("") != NULL ? hier("") : hier("memory");
    char path[2048];
    cr_assert_not_null(h);
    snprintf(path, sizeof(path), "%s/%s/worker-0/cgroup.procs", h->dir, name);
    for (int i = 0; i < 500 && !two; i++) {
        char *procs = xt_read_file(path);
        two = procs != NULL && strchr(procs, '\n') != NULL && strchr(procs, '\n')[1] != '\0';
        free(procs);
        if (!two)
            usleep(10000);
    }
    cr_assert(two, "the grandchild never appeared in the cgroup");
    cr_assert_eq(xmp_cgroup_signal(w0, SIGTERM, &err), 0, "signal: %s", err.msg);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM, "status %#x", status);
    bool empty = false;
    for (int i = 0; i < 500 && !(empty = xmp_cgroup_is_empty(w0)); i++)
        usleep(10000);
    cr_expect(empty, "the setsid grandchild survived SIGTERM to the cgroup");
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

/* The fallback for kernels without cgroup.kill (and legacy v1's kill), run on this kernel's
 * cgroup2 tree: SIGKILL sweeps, no freezer. */
LIVE_TEST(sweep_kill_without_cgroup_kill)
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
    cr_assert_gt(xmp_cg_kill_procs_tree(dir), 0, "the sweep signalled nobody");
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "status %#x", status);
    bool empty = false;
    for (int i = 0; i < 500 && !(empty = xmp_cg2_is_empty(dir)); i++)
        usleep(10000);
    cr_expect(empty, "cgroup not empty 5 s after the sweep kill");
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
        cr_expect(!job_uses(i, kname) || exists_in(H[i].ctrl, kname), "gc removed %s in %s", kname,
                  H[i].dir);
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
    cr_expect_eq(
        xmp_cgroup_create_job(MODE, XMP_CGROUP_MANAGER_CGROUPFS, "../escape", &l, &job, &err), -1);
    cr_expect_eq(err.errnum, EINVAL);
    job = make_job("names", -1, name, sizeof(name));
    cr_expect_eq(xmp_cgroup_create_child(job, "a/b", &l, &c, &err), -1);
    cr_expect_null(c);
    /* A name in use is refused, and the failed create leaves the existing cgroups alone. */
    struct xmp_cgroup *again = NULL;
    cr_expect_eq(xmp_cgroup_create_job(MODE, XMP_CGROUP_MANAGER_CGROUPFS, name, NULL, &again, &err),
                 -1);
    cr_expect_eq(err.errnum, EEXIST, "%s", err.msg);
    cr_assert_eq(xmp_cgroup_create_child(job, "worker-0", NULL, &c, &err), 0, "%s", err.msg);
    cr_expect_eq(xmp_cgroup_create_child(job, "worker-0", NULL, &again, &err), -1);
    for (size_t i = 0; i < NH; i++)
        cr_expect(!job_uses(i, name) || exists_in(H[i].ctrl, name), "%s gone from %s", name,
                  H[i].dir);
    cr_assert_eq(xmp_cgroup_destroy(job, &err), 0, "destroy: %s", err.msg);
    assert_clean();
}

/* The job gets a pids directory only when a worker first needs one; a worker made before that
 * then joins the job's, one with the limit its own. */
LIVE_TEST(job_grows_where_a_worker_needs_it)
{
    struct xmp_cgroup *job, *w0 = NULL, *w1 = NULL;
    struct xmp_limits l;
    struct xmp_error err = {0};
    char name[128], r1[160], path[64], got[1024], want[1400];
    const struct hier *h = hier(MODE == XMP_CGROUP_MODE_UNIFIED ? "" : "pids");
    pid_t p0, p1;

    cr_assert_not_null(h, "no pids hierarchy");
    job = make_job("grow", -1, name, sizeof(name));
    xmp_limits_init(&l);
    cr_assert_eq(xmp_cgroup_create_child(job, "worker-0", &l, &w0, &err), 0, "%s", err.msg);
    if (MODE != XMP_CGROUP_MODE_UNIFIED)
        cr_expect(!exists_in("pids", name), "a pids directory nothing needs");
    l.pids = 32;
    cr_assert_eq(xmp_cgroup_create_child(job, "worker-1", &l, &w1, &err), 0, "%s", err.msg);
    snprintf(r1, sizeof(r1), "%s/worker-1", name);
    expect(h->ctrl, r1, "pids.max", "32");
    p0 = spawn_attached(w0, NULL);
    p1 = spawn_attached(w1, NULL);
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof(path), "/proc/%ld/cgroup", (long)(k ? p1 : p0));
        char *text = xt_read_file(path);
        cr_assert_not_null(text);
        cr_assert_eq(xmp_cgroup_parse_proc(text, h->ctrl, got, sizeof(got), NULL, NULL), 0);
        free(text);
        snprintf(want, sizeof(want), "%s%s%s%s", strcmp(h->own, "/") ? h->own : "", "/", name,
                 k                                 ? "/worker-1"
                 : MODE == XMP_CGROUP_MODE_UNIFIED ? "/worker-0"
                                                   : "");
        cr_expect_str_eq(got, want, "worker-%d in %s, want %s", k, got, want);
    }
    cr_assert_eq(xmp_cgroup_destroy(job, &err), 0, "destroy: %s", err.msg);
    waitpid(p0, NULL, 0);
    waitpid(p1, NULL, 0);
    assert_clean();
}

/* A value the kernel refuses fails the batched create; the error must still name the file (the
 * step-by-step redo), and the worker's directories must be gone while the job's stay. */
LIVE_TEST(refused_value_names_its_file)
{
    struct xmp_cgroup *job, *w0 = NULL;
    struct xmp_limits l;
    struct xmp_error err = {0};
    char name[128], r0[160];

    job = make_job("refused", -1, name, sizeof(name));
    xmp_limits_init(&l);
    l.pids = 16;
    l.has_cpus = true;
    CPU_SET(CPU_SETSIZE - 1, &l.cpus); /* no such CPU */
    cr_assert_eq(xmp_cgroup_create_child(job, "worker-0", &l, &w0, &err), -1, "created");
    cr_expect_null(w0);
    cr_expect(strstr(err.msg, "cpuset.cpus") != NULL, "message: %s", err.msg);
    cr_expect(strstr(err.msg, "worker-0") != NULL, "message: %s", err.msg);
    cr_expect_neq(err.errnum, 0);
    cr_log_info("refused: %s", err.msg);
    snprintf(r0, sizeof(r0), "%s/worker-0", name);
    for (size_t i = 0; i < NH; i++) {
        cr_expect(!exists_in(H[i].ctrl, r0), "%s left in %s", r0, H[i].dir);
        cr_expect(!job_uses(i, name) || exists_in(H[i].ctrl, name), "%s gone from %s", name,
                  H[i].dir);
    }
    cr_assert_eq(xmp_cgroup_destroy(job, &err), 0, "destroy: %s", err.msg);
    assert_clean();
}

/* Dies with the test, should the test fail before it kills it. */
static void
sleep_forever(void)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (;;)
        pause();
}

/* A released cgroup goes on the remover's thread while the caller goes on; one that still
 * holds a process (what a worker left running) stays until the settle of the next create
 * (a restart's new worker of the same name), which kills and removes it first. */
LIVE_TEST(release_removes_and_settle_kills_what_was_left)
{
    struct xmp_cgroup *job, *w0 = NULL, *w1 = NULL, *again = NULL;
    struct xmp_error err = {0};
    char name[128], r0[256], r1[256];
    int status = 0;
    bool gone = false;
    pid_t pid;

    job = make_job("release", -1, name, sizeof(name));
    cr_assert_eq(xmp_cgroup_create_child(job, "worker-0", NULL, &w0, &err), 0, "%s", err.msg);
    cr_assert_eq(xmp_cgroup_create_child(job, "worker-1", NULL, &w1, &err), 0, "%s", err.msg);
    pid = spawn_attached(w1, sleep_forever);
    xmp_cgroup_release(w0);
    xmp_cgroup_release(w1);
    snprintf(r0, sizeof(r0), "%s/worker-0", name);
    snprintf(r1, sizeof(r1), "%s/worker-1", name);
    /* Nothing settles meanwhile: the thread removes worker-0 on its own. */
    for (int i = 0; i < 500 && !gone; i++) {
        gone = true;
        for (size_t h = 0; h < NH; h++)
            gone = gone && !exists_in(H[h].ctrl, r0);
        if (!gone)
            usleep(10000);
    }
    cr_expect(gone, "worker-0 still there 5 s after its release");
    gone = true;
    for (size_t h = 0; h < NH; h++)
        gone = gone && !exists_in(H[h].ctrl, r1);
    cr_expect(!gone, "worker-1 removed while its process ran");
    cr_assert_eq(kill(pid, 0), 0, "the release killed worker-1's process");
    cr_assert_eq(xmp_cgroup_create_child(job, "worker-1", NULL, &again, &err), 0, "%s", err.msg);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "status %#x", status);
    cr_assert_eq(xmp_cgroup_destroy(job, &err), 0, "destroy: %s", err.msg);
    assert_clean();
}

/* A worker may make cgroups of its own below its directories (a container runtime inside it):
 * the one-rmdir removal must fall back to removing them, deepest first. */
LIVE_TEST(destroy_removes_what_a_worker_made_below)
{
    struct xmp_cgroup *job, *w0 = NULL;
    struct xmp_error err = {0};
    char name[128], sub[2048];
    int made = 0;

    job = make_job("below", -1, name, sizeof(name));
    cr_assert_eq(xmp_cgroup_create_child(job, "worker-0", NULL, &w0, &err), 0, "%s", err.msg);
    for (size_t i = 0; i < NH; i++) {
        snprintf(sub, sizeof(sub), "%s/%s/worker-0", H[i].dir, name);
        if (access(sub, F_OK) < 0)
            continue;
        snprintf(sub, sizeof(sub), "%s/%s/worker-0/inner", H[i].dir, name);
        cr_assert_eq(mkdir(sub, 0755), 0, "mkdir %s: %s", sub, strerror(errno));
        made++;
    }
    cr_expect_geq(made, MODE == XMP_CGROUP_MODE_UNIFIED ? 1 : 2, "worker-0 has %d directories",
                  made);
    cr_assert_eq(xmp_cgroup_destroy(w0, &err), 0, "destroy worker: %s", err.msg);
    cr_assert_eq(xmp_cgroup_destroy(job, &err), 0, "destroy: %s", err.msg);
    assert_clean();
}

/* Opens /dev/null (allowed) and /dev/zero (not in the list): exit 0 when the filter holds. */
static void
open_devices(void)
{
    int ok = open("/dev/null", O_RDWR | O_CLOEXEC);
    int refused = open("/dev/zero", O_RDONLY | O_CLOEXEC);
    _exit(ok >= 0 && refused < 0 && errno == EPERM ? 0 : 3);
}

/* isolation.devices at the cgroup layer: an allowlist of device numbers, enforced by the v1
 * devices controller in legacy mode and by a BPF device program on the cgroup2 directory in
 * hybrid and unified mode. */
LIVE_TEST(devices_allowlist)
{
    struct xmp_cgroup *job, *w0 = NULL;
    struct xmp_limits l;
    struct xmp_error err = {0};
    char name[128];
    int status = 0;

    job = make_job("devices", -1, name, sizeof(name));
    xmp_limits_init(&l);
    l.has_devices = true;
    cr_assert(xmp_devices_add(&l.devices, 'c', 1, 3, XMP_DEV_READ | XMP_DEV_WRITE));
    cr_assert_eq(xmp_cgroup_create_child(job, "worker-0", &l, &w0, &err), 0, "%s", err.msg);
    pid_t pid = spawn_attached(w0, open_devices);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x", status);
    cr_assert_eq(xmp_cgroup_destroy(job, &err), 0, "destroy: %s", err.msg);
    xmp_devices_free(&l.devices);
    assert_clean();
}

/* The same with a list far beyond what a fixed-size one held (48 rules): a node with many GPUs
 * and HCAs whose workers may all open all of them. The v1 list takes every rule, and the BPF
 * program grows with them (the verifier accepts it; /dev/zero, in none of them, stays refused). */
LIVE_TEST(devices_allowlist_without_a_ceiling)
{
    struct xmp_cgroup *job, *w0 = NULL;
    struct xmp_limits l;
    struct xmp_error err = {0};
    char name[128];
    int status = 0;

    job = make_job("devmany", -1, name, sizeof(name));
    xmp_limits_init(&l);
    l.has_devices = true;
    cr_assert(xmp_devices_add(&l.devices, 'c', 1, 3, XMP_DEV_READ | XMP_DEV_WRITE));
    for (int i = 0; i < 300; i++)
        cr_assert(xmp_devices_add(&l.devices, 'c', 240 + i / 100, i, XMP_DEV_READ | XMP_DEV_WRITE));
    cr_assert_eq(xmp_cgroup_create_child(job, "worker-0", &l, &w0, &err), 0, "%s", err.msg);
    pid_t pid = spawn_attached(w0, open_devices);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x", status);
    cr_assert_eq(xmp_cgroup_destroy(job, &err), 0, "destroy: %s", err.msg);
    xmp_devices_free(&l.devices);
    assert_clean();
}
