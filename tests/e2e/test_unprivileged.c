/* End to end: the default spec (isolation.cgroups: auto) where xmprun may write no cgroup, run
 * as the people who use it: a regular user without delegation, and uid 0 in a user namespace
 * (rootless Podman, Apptainer's fakeroot). The job runs; a worker over its memory limit is
 * stopped by xmprun's watchdog with that limit named and exit status 137; every worker's peak
 * is in the report, from the samples; a worker within its own limit that takes an enclosing
 * cgroup over its limit is named at that limit; required refuses with advice that fits. */
#include "e2e/e2e.h"
#include "e2e/fork.h"

#include <pwd.h>
#include <sys/stat.h>

#define USER "xmprun-e2e"

/* Lets others search every directory above path (o+x, nothing more), so that the regular user
 * can run the binaries of a build below a private directory (the mutation check's 0700 copy,
 * a checkout in /root), as a user's own install would let it. */
static void
reachable(const char *path)
{
    char *dir = strdup(path);
    struct stat st;

    for (char *slash = strrchr(dir, '/'); slash != NULL && slash != dir;
         slash = strrchr(dir, '/')) {
        *slash = '\0';
        if (stat(dir, &st) == 0 && !(st.st_mode & S_IXOTH))
            cr_assert_eq(chmod(dir, (st.st_mode & 07777) | S_IXOTH), 0, "chmod o+x %s", dir);
    }
    free(dir);
}

/* The regular user the jobs run as (made once, with no home and no delegation), and a test
 * directory it may write. */
static uid_t
regular_user(struct e2e *e)
{
    struct xt_result r;
    char *argv[] = {"/bin/sh", "-c", "id -u " USER " >/dev/null 2>&1 || useradd -M -U " USER, NULL};
    struct passwd *pw;

    if (geteuid() != 0)
        cr_skip_test("needs root to run a job as a regular user");
    cr_assert_eq(xt_run(&r, argv, NULL, NULL, 30), 0);
    cr_assert_eq(r.status, 0, "useradd: %s", r.err);
    xt_result_free(&r);
    pw = getpwnam(USER);
    cr_assert_not_null(pw);
    cr_assert_eq(chmod(e->dir, 0777), 0);
    reachable(xt_bin());
    reachable(xt_probe());
    reachable(xt_source_dir());
    reachable(e->dir);
    return pw->pw_uid;
}

/* Runs xmprun on job.yaml as the regular user, through `wrap` (a command prefix, or ""). */
static int
run_as_user(struct e2e *e, uid_t uid, const char *wrap)
{
    char script[1024];

    snprintf(script, sizeof(script),
             "exec setpriv --reuid=%u --regid=%u --clear-groups %s \"$XMPRUN\" --report "
             "\"$REPORT\" \"$SPEC\"",
             (unsigned)uid, (unsigned)getpwuid(uid)->pw_gid, wrap);
    return e2e_sh(e, 120, script);
}

static const char *
enforced_by(const struct e2e *e, const char *limit)
{
    json_t *l = json_object_get(json_object_get(e->rep, "enforcement"), limit);
    cr_assert_not_null(l, "no enforcement of %s in the report", limit);
    return e2e_str(l, "by");
}

/* Two workers, 128Mi each; worker 1 allocates 300 MiB and holds it; worker 0 prints its
 * oom_score_adj. */
static void
over_limit_spec(struct e2e *e)
{
    e2e_spec(e, "version: 1\n"
                "name: overmem\n"
                "workers: 2\n"
                "devices: {kind: cpu}\n"
                /* Worker 1 waits for worker 0's line, which a stop could otherwise cut. */
                "command: 'if [ \"$RANK\" = 1 ]; then while [ ! -e %2$s/r0 ]; do sleep 0.05; "
                "done; exec %1$s alloc 300 60; fi; cat /proc/self/oom_score_adj; touch %2$s/r0; "
                "exec %1$s sleep 60'\n"
                "resources: {worker: {memory: 128Mi}}\n");
}

/* Runs the over-limit job as the regular user through wrap, and checks what every such run must
 * show: exit 137, worker 1 stopped by the watchdog at its own limit, named so; both workers'
 * peaks from the samples; the per-limit enforcement; why, on stderr. */
static void
stopped_by_watchdog(const char *wrap, const char *why)
{
    struct e2e ctx;
    struct e2e *e = &ctx;
    e2e_init(e);
    uid_t uid = regular_user(e);
    over_limit_spec(e);
    cr_assert_eq(run_as_user(e, uid, wrap), 137, "stderr:\n%s", e->r.err);
    e2e_load_report(e);
    json_t *rc = json_object_get(e->rep, "root_cause");
    const char *msg = e2e_str(rc, "message");
    cr_assert_eq(json_integer_value(json_object_get(rc, "rank")), 1, "%s", msg);
    cr_assert_str_eq(e2e_str(rc, "reason"), "memory_limit");
    cr_assert_not_null(strstr(msg, "worker 1 (cpu) was stopped by xmprun at its 128.0 MiB memory "
                                   "limit (it used "),
                       "%s", msg);
    cr_assert_not_null(strstr(msg, "measured every 100 ms: no writable cgroup here)"), "%s", msg);
    json_t *w1 = e2e_worker(e, 1);
    cr_assert_str_eq(e2e_str(w1, "state"), "memory_limit");
    cr_assert_str_eq(e2e_str(w1, "signal"), "SIGKILL");
    json_t *m1 = json_object_get(w1, "memory");
    cr_assert_str_eq(e2e_str(m1, "stopped_at"), "worker");
    cr_assert_gt(mem_of(w1, "used_bytes"), 128 << 20);
    cr_assert_eq(mem_of(w1, "limit_bytes"), 128 << 20);
    for (size_t i = 0; i < 2; i++) {
        json_t *w = e2e_worker(e, i);
        cr_assert_str_eq(e2e_str(json_object_get(w, "memory"), "measured"), "samples");
        cr_assert(json_is_integer(json_object_get(json_object_get(w, "memory"), "peak_bytes")),
                  "worker %zu has no peak", i);
    }
    cr_assert_gt(mem_of(w1, "peak_bytes"), 128 << 20);
    cr_assert_lt(mem_of(e2e_worker(e, 0), "peak_bytes"), 16 << 20);
    cr_assert_str_eq(enforced_by(e, "resources.worker.memory"), "watchdog");
    cr_assert_str_eq(enforced_by(e, "resources.worker.cpuset"), "affinity");
    cr_assert_str_eq(e2e_str(json_object_get(e->rep, "cgroup"), "mode"), "none");
    /* The kernel's OOM killer at an enclosing limit takes a worker first, never xmprun. */
    cr_assert_not_null(strstr(e->r.out, "[0] 1000\n"), "stdout:\n%s", e->r.out);
    cr_assert_not_null(strstr(e->r.err, "xmprun: note: no cgroup per worker here ("), "%s",
                       e->r.err);
    cr_assert_not_null(strstr(e->r.err, why), "stderr does not say \"%s\":\n%s", why, e->r.err);
    e2e_assert_clean(e);
    e2e_fini(e);
}

Test(unprivileged, regular_user_default_spec_stops_a_worker_over_its_limit, .timeout = 180)
{
    stopped_by_watchdog("", "xmprun is not root and has no delegated cgroup");
}

/* Rootless Podman's and Apptainer's fakeroot: uid 0, but in a user namespace of a regular
 * user, with no rights over the host's cgroups. */
Test(unprivileged, root_in_a_user_namespace_runs_with_the_watchdog, .timeout = 180)
{
    stopped_by_watchdog("unshare --user --map-root-user", "uid 0 in a user namespace");
}

Test(unprivileged, required_refuses_with_advice_that_fits, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    uid_t uid = regular_user(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: needcg\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', pidfile, '%2$s/ran']\n"
                 "resources: {worker: {memory: 64Mi}}\n"
                 "isolation: {cgroups: required}\n");
    cr_assert_eq(run_as_user(&e, uid, ""), 125, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    const char *msg = e2e_str(json_object_get(e.rep, "root_cause"), "message");
    cr_assert_not_null(strstr(msg, "not root and not delegated"), "%s", msg);
    cr_assert_not_null(strstr(msg, "set isolation.cgroups: auto"), "%s", msg);
    /* A host without systemd has no user manager to ask. */
    if (access("/run/systemd/system", F_OK) != 0)
        cr_assert_null(strstr(msg, "systemd-run"), "%s", msg);
    cr_assert_null(xt_read_file(e2e_path(&e, "ran")), "a worker ran");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* start: fork as a regular user: the workers read the zygote's 256 MiB preload, which is not
 * charged to them (each stays far below its 128Mi), and the one that allocates 300 MiB of its
 * own is stopped at its own limit. */
Test(unprivileged, fork_workers_are_not_charged_for_the_preload, .timeout = 300)
{
    struct e2e e;
    e2e_init(&e);
    uid_t uid = regular_user(&e);
    if (access(PY, X_OK) != 0)
        cr_skip_test(PY " is not installed");
    /* It holds what it allocated for 2 s: the watchdog samples every 100 ms, and an allocation
     * made and freed between two samples is one no sampler stops (the enforcement note says so). */
    fork_spec(&e, "share --preload 256 --alloc-rank 2 --alloc 300 --hold 2",
              "workers: 4\nresources: {worker: {memory: 128Mi}}\n");
    cr_assert_eq(run_as_user(&e, uid, ""), 137, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    json_t *rc = json_object_get(e.rep, "root_cause");
    cr_assert_eq(json_integer_value(json_object_get(rc, "rank")), 2, "%s", e2e_str(rc, "message"));
    cr_assert_str_eq(e2e_str(rc, "reason"), "memory_limit");
    for (size_t i = 0; i < 4; i++) {
        json_t *w = e2e_worker(&e, i);
        if (i == 2)
            continue;
        cr_assert_neq(strcmp(e2e_str(w, "state"), "memory_limit"), 0, "worker %zu stopped", i);
        cr_assert_lt(mem_of(w, "peak_bytes"), 64 << 20, "worker %zu peak %lld", i,
                     (long long)mem_of(w, "peak_bytes"));
    }
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* A worker within its own 1Gi that takes the cgroup xmprun runs in over that cgroup's 96Mi (a
 * container's --memory, a Slurm step's --mem) is killed by the kernel there, and that limit is
 * named: xmprun reads the enclosing cgroups it may not write. */
Test(unprivileged, enclosing_limit_is_named_without_a_cgroup_of_our_own, .timeout = 180)
{
    struct e2e e;
    char script[2048];
    e2e_init(&e);
    uid_t uid = regular_user(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: userencl\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', alloc, '512']\n"
                 "resources: {worker: {memory: 1Gi}}\n");
    snprintf(script, sizeof(script),
             "if [ -f /sys/fs/cgroup/cgroup.controllers ]; then V2=1\n"
             "  OWN=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)\n"
             "else V2=0\n"
             "  OWN=/sys/fs/cgroup/memory$(grep -E '^[0-9]+:([^:]*,)?memory(,[^:]*)?:' "
             "/proc/self/cgroup | cut -d: -f3)\n"
             "fi\n"
             "E=${OWN%%/}/xmp-uencl-$$\n"
             "mkdir \"$E\" || exit 90\n"
             "if [ $V2 = 1 ]; then echo 100663296 > \"$E/memory.max\"; (echo 0 > "
             "\"$E/memory.swap.max\") 2>/dev/null; :\n"
             "else echo 100663296 > \"$E/memory.limit_in_bytes\"; fi || exit 91\n"
             "sh -c 'echo $$ > \"$1/cgroup.procs\" || exit 92; exec setpriv --reuid=%u "
             "--regid=%u --clear-groups \"$XMPRUN\" --report \"$REPORT\" \"$SPEC\"' sh \"$E\"\n"
             "rc=$?\n"
             "rmdir \"$E\" || { echo LEFT >&2; exit 99; }\n"
             "exit $rc\n",
             (unsigned)uid, (unsigned)getpwuid(uid)->pw_gid);
    cr_assert_eq(e2e_sh(&e, 120, script), 137, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    json_t *rc = json_object_get(e.rep, "root_cause");
    const char *msg = e2e_str(rc, "message");
    cr_assert_str_eq(e2e_str(rc, "reason"), "oom_killed", "%s", msg);
    cr_assert_not_null(strstr(msg, "worker 0 (cpu) was killed by the kernel OOM killer at the "
                                   "enclosing cgroup's 96.0 MiB limit (cgroup "),
                       "%s", msg);
    cr_assert_not_null(strstr(msg, "/xmp-uencl-"), "%s", msg);
    cr_assert_str_eq(e2e_str(json_object_get(e2e_worker(&e, 0), "memory"), "oom_at"), "enclosing");
    /* Said before the job ran: its 1Gi can never be reached there. */
    cr_assert_not_null(strstr(e.r.err, "larger than the enclosing cgroup's 96.0 MiB limit"), "%s",
                       e.r.err);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* `xmprun plan` says how each limit will be kept, as the run's report does: by a cgroup as root,
 * by the watchdog and affinity as the regular user, without making a cgroup. */
Test(unprivileged, plan_says_how_each_limit_will_be_kept, .timeout = 60)
{
    struct e2e e;
    e2e_init(&e);
    uid_t uid = regular_user(&e);
    over_limit_spec(&e);
    char script[512];
    snprintf(script, sizeof(script),
             "\"$XMPRUN\" plan \"$SPEC\" > \"$DIR/root.json\" && setpriv --reuid=%u --regid=%u "
             "--clear-groups \"$XMPRUN\" plan \"$SPEC\" > \"$DIR/user.json\"",
             (unsigned)uid, (unsigned)getpwuid(uid)->pw_gid);
    cr_assert_eq(e2e_sh(&e, 60, script), 0, "stderr:\n%s", e.r.err);
    json_error_t jerr;
    json_t *root = json_load_file(e2e_path(&e, "root.json"), 0, &jerr);
    json_t *user = json_load_file(e2e_path(&e, "user.json"), 0, &jerr);
    cr_assert_not_null(root);
    cr_assert_not_null(user);
    json_t *r = json_object_get(json_object_get(root, "enforcement"), "resources.worker.memory");
    json_t *u = json_object_get(json_object_get(user, "enforcement"), "resources.worker.memory");
    cr_assert_str_eq(e2e_str(r, "by"), "cgroup");
    cr_assert_str_eq(e2e_str(u, "by"), "watchdog");
    cr_assert_not_null(strstr(e2e_str(u, "why"), "no delegated cgroup"), "%s", e2e_str(u, "why"));
    json_decref(root);
    json_decref(user);
    e2e_fini(&e);
}

/* A worker whose pages cannot be counted (non-dumpable: smaps_rollup needs ptrace access, which
 * its own user then lacks) has its memory limit "not enforced" with the reason, in the report and
 * on stderr: never a silent 0. */
Test(unprivileged, an_unreadable_worker_is_said_to_be_unmeasured, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    uid_t uid = regular_user(&e);
    if (access(PY, X_OK) != 0)
        cr_skip_test(PY " is not installed");
    char *zygote = xt_write_file(e.dir, "zygote.py",
                                 "import ctypes, time\n"
                                 "import xmprun\n"
                                 "def work(index):\n"
                                 "    ctypes.CDLL(None).prctl(4, 0)  # PR_SET_DUMPABLE, 0\n"
                                 "    time.sleep(1)\n"
                                 "xmprun.spawn(work)\n");
    char *text = NULL;
    cr_assert(asprintf(&text,
                       "version: 1\nname: nodump\nstart: fork\nworkers: 1\ndevices: {kind: cpu}\n"
                       "resources: {worker: {memory: 128Mi}}\ncommand: [" PY ", '%s']\n",
                       zygote) > 0);
    e2e_set_spec(&e, text);
    cr_assert_eq(run_as_user(&e, uid, ""), 0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    const char *why = e2e_str(json_object_get(e2e_worker(&e, 0), "memory"), "not_measured");
    cr_assert_not_null(strstr(why, "could not be read"), "%s", why);
    cr_assert_not_null(strstr(why, "its memory limit is not enforced"), "%s", why);
    cr_assert_not_null(strstr(e.r.err, "xmprun: warning: worker 0: /proc/"), "%s", e.r.err);
    free(zygote);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* A regular user's stacks: the kernel's are root's to read, and the report says so; the rest
 * (the native frames) is read all the same. */
Test(unprivileged, stacks_without_the_kernel_stack_say_why, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    uid_t uid = regular_user(&e);
    e2e_spec(&e, "version: 1\nname: userstacks\nworkers: 1\ndevices: {kind: cpu}\n"
                 "command: [sleep, '60']\ntimeout: 1s\non_failure: {grace: 1s}\n");
    cr_assert_eq(run_as_user(&e, uid, ""), 124, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    json_t *st = json_object_get(e2e_worker(&e, 0), "stacks");
    cr_assert(json_is_object(st), "no stacks:\n%s", e.r.err);
    cr_assert_not_null(strstr(e2e_str(st, "error"), "no kernel stacks: /proc/PID/stack needs "
                                                    "CAP_SYS_ADMIN"),
                       "%s", e2e_str(st, "error"));
    json_t *thread = json_array_get(json_object_get(st, "threads"), 0);
    cr_assert_gt(json_array_size(json_object_get(thread, "native")), 0, "no native frames");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}
