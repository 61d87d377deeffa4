/* End to end: isolation.cgroups when the cgroup filesystem is read-only (a private mount
 * namespace where every cgroup mount is bind-remounted read-only, as in an unprivileged
 * container). required: refuse with a message that says why and what to do (125, setup_failed
 * report); optional: warn once, run without limits and say so in the report; off: no cgroups. */
#include "e2e/e2e.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/statfs.h>

/* Runs xmprun on job.yaml with every cgroup mount read-only, in a private mount namespace. */
static int
run_readonly(struct e2e *e)
{
    return e2e_sh(e, 90,
                  "exec unshare -m sh -c '"
                  "for d in $(grep -E \" - cgroup2? \" /proc/self/mountinfo | cut -d\" \" -f5); do "
                  "mount --bind \"$d\" \"$d\" && mount -o remount,bind,ro \"$d\" || exit 99; done; "
                  "exec \"$XMPRUN\" --report \"$REPORT\" \"$SPEC\"'");
}

static bool
can_unshare(void)
{
    struct xt_result r;
    char *argv[] = {"/bin/sh", "-c", "unshare -m true", NULL};
    bool ok = geteuid() == 0 && xt_run(&r, argv, NULL, NULL, 30) == 0 && r.status == 0;
    if (ok || r.out != NULL)
        xt_result_free(&r);
    return ok;
}

Test(cgroup_policy, required_refuses_read_only_cgroupfs, .timeout = 120)
{
    struct e2e e;
    if (!can_unshare())
        cr_skip_test("needs root and unshare -m");
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: needcg\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', pidfile, '%2$s/ran']\n"
                 "resources: {worker: {memory: 64Mi}}\n"
                 "isolation: {cgroups: required}\n");
    cr_assert_eq(run_readonly(&e), 125, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "setup_failed");
    cr_assert_eq(json_array_size(json_object_get(e.rep, "workers")), 0);
    const char *msg = e2e_str(json_object_get(e.rep, "root_cause"), "message");
    cr_assert_not_null(strstr(msg, "read-only"), "%s", msg);
    cr_assert_not_null(strstr(msg, "isolation.cgroups: auto"), "%s", msg);
    cr_assert_not_null(strstr(e.r.err, "read-only"), "stderr:\n%s", e.r.err);
    /* Nothing was started. */
    char *ran = xt_read_file(e2e_path(&e, "ran"));
    cr_assert_null(ran);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* The default (auto) in a read-only cgroupfs, as root in a default Docker or Kubernetes
 * container: the job runs, its memory limit kept by xmprun's watchdog, and says so. */
Test(cgroup_policy, auto_runs_with_the_watchdog_where_the_cgroupfs_is_read_only, .timeout = 120)
{
    struct e2e e;
    if (!can_unshare())
        cr_skip_test("needs root and unshare -m");
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: rocg\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', alloc, '200', '30']\n"
                 "resources: {worker: {memory: 64Mi}}\n");
    cr_assert_eq(run_readonly(&e), 137, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    const char *msg = e2e_str(json_object_get(e.rep, "root_cause"), "message");
    cr_assert_not_null(strstr(msg, "was stopped by xmprun at its 64.0 MiB memory limit"), "%s",
                       msg);
    cr_assert_not_null(strstr(e.r.err, "the cgroup filesystem is mounted read-only"), "%s",
                       e.r.err);
    json_t *mem = json_object_get(json_object_get(e.rep, "enforcement"), "resources.worker.memory");
    cr_assert_str_eq(e2e_str(mem, "by"), "watchdog");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(cgroup_policy, optional_runs_without_limits_and_says_so, .timeout = 120)
{
    struct e2e e;
    if (!can_unshare())
        cr_skip_test("needs root and unshare -m");
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: maybecg\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', exit, '0']\n"
                 "resources: {worker: {memory: 64Mi}}\n"
                 "isolation: {cgroups: optional}\n");
    cr_assert_eq(run_readonly(&e), 0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "succeeded");
    json_t *cg = json_object_get(e.rep, "cgroup");
    cr_assert_str_eq(e2e_str(cg, "mode"), "none");
    cr_assert_not_null(strstr(e2e_str(cg, "note"), "without resource limits"), "%s",
                       e2e_str(cg, "note"));
    cr_assert(
        json_is_null(json_object_get(json_object_get(e2e_worker(&e, 0), "memory"), "limit_bytes")));
    /* Warned once, not once per worker. */
    const char *first = strstr(e.r.err, "warning:");
    cr_assert_not_null(first, "stderr:\n%s", e.r.err);
    cr_assert_null(strstr(first + 1, "warning:"), "stderr:\n%s", e.r.err);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(cgroup_policy, off_uses_no_cgroups, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: nocg\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', cgroup]\n"
                 "isolation: {cgroups: off}\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(json_object_get(e.rep, "cgroup"), "mode"), "none");
    cr_assert_null(strstr(e.r.out, "worker-0"), "out:\n%s", e.r.out);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* ---- cgroup v2 delegation (run in the guest by tests/run-v2.sh) ---- */

/* Runs xmprun alone in cg (a cgroup it may delegate from), quietly. */
static int
run_alone_in(struct e2e *e, const char *cg, const char *args)
{
    return sh_in(e, cg,
                 "sh -c 'echo $$ > \"$CG/cgroup.procs\" && exec \"$XMPRUN\" -q %s --report "
                 "\"$REPORT\" \"$SPEC\"'",
                 args);
}

/* Writes text to dir/cgroup.subtree_control; false when the kernel refuses. */
static bool
subtree_control(const char *dir, const char *text)
{
    char path[4400];
    int fd;
    bool ok;

    snprintf(path, sizeof(path), "%s/cgroup.subtree_control", dir);
    fd = open(path, O_WRONLY | O_CLOEXEC);
    ok = fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text);
    if (fd >= 0)
        close(fd);
    return ok;
}

/* A file a worker wrote, without its trailing newline. */
static char *
worker_file(struct e2e *e, const char *name)
{
    char *path = e2e_path(e, name), *text = xt_read_file(path);

    cr_assert_not_null(text, "the worker wrote no %s", path);
    text[strcspn(text, "\n")] = '\0';
    free(path);
    return text;
}

/* The job enables for its workers the controllers their limits use and no more: memory (also
 * for the report's peak and OOM kills) and cpuset (cpuset: auto) always; cpu only for a CPU
 * quota, pids only for a process limit. Each costs its write, and its disable at the end. */
Test(cgroup_policy, v2_enables_only_the_controllers_the_spec_needs, .timeout = 900)
{
    static const struct {
        const char *set, *want;
    } cases[] = {
        {"", "cpuset memory"},
        {"--set resources.worker.cpus=1 --set resources.worker.pids=64", "cpuset cpu memory pids"}};
    char cg[4200], left[4096];
    struct e2e e;

    make_v2_cgroup("needs", cg, sizeof(cg));
    if (cg[0] == '\0')
        cr_skip_test("needs root on a pure cgroup v2 host (tests/run-v2.sh runs it)");
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: needs\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "resources: {worker: {memory: 64Mi}}\n"
                 "command: ['sh', '-c', 'cat \"/sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup)/"
                 "../cgroup.subtree_control\" > %2$s/ctl']\n");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int status = run_alone_in(&e, cg, cases[i].set);
        subdirs(cg, left, sizeof(left));
        cr_assert_eq(status, 0, "%s: stderr:\n%s", cases[i].set, e.r.err);
        cr_assert_str_eq(left, "", "%s left %s", cases[i].set, left);
        char *ctl = worker_file(&e, "ctl");
        cr_expect_str_eq(ctl, cases[i].want, "%s: the job enabled \"%s\"", cases[i].set, ctl);
        free(ctl);
    }
    rmdir(cg);
    e2e_fini(&e);
}

/* A cgroup that is delegated memory alone (a user manager's default, a GPU node's slice): a job
 * with a memory limit runs, its cpuset: auto pinned by sched_setaffinity and the report saying
 * so; a CPU quota is refused, naming the controller it needs and nothing else. */
Test(cgroup_policy, v2_memory_only_delegation, .timeout = 900)
{
    char cg[4200], mem[4300], left[4096];
    struct e2e e;
    int status;

    make_v2_cgroup("memonly", cg, sizeof(cg));
    if (cg[0] == '\0')
        cr_skip_test("needs root on a pure cgroup v2 host (tests/run-v2.sh runs it)");
    snprintf(mem, sizeof(mem), "%s/m", cg);
    cr_assert(subtree_control(cg, "+memory"), "+memory in %s: %s", cg, strerror(errno));
    cr_assert_eq(mkdir(mem, 0755), 0, "mkdir %s: %s", mem, strerror(errno));
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: memonly\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "resources: {worker: {memory: 64Mi}}\n"
                 "command: ['sh', '-c', 'grep Cpus_allowed_list /proc/self/status | cut -f2 > "
                 "%2$s/cpus-$RANK']\n");
    status = run_alone_in(&e, mem, "");
    subdirs(mem, left, sizeof(left));
    cr_assert_eq(status, 0, "stderr:\n%s", e.r.err);
    cr_assert_str_eq(left, "", "left %s", left);
    e2e_load_report(&e);
    const char *note = e2e_str(json_object_get(e.rep, "cgroup"), "note");
    cr_expect(strstr(note, "cpuset controller is not delegated") != NULL &&
                  strstr(note, "sched_setaffinity") != NULL,
              "cgroup.note: %s", note);
    for (size_t i = 0; i < 2; i++) {
        char name[16];
        snprintf(name, sizeof(name), "cpus-%zu", i);
        char *cpus = worker_file(&e, name);
        cr_expect_str_eq(cpus, e2e_str(e2e_worker(&e, i), "cpuset"), "worker %zu", i);
        free(cpus);
    }

    status = run_alone_in(&e, mem, "--set resources.worker.cpus=2");
    subdirs(mem, left, sizeof(left));
    rmdir(mem);
    subtree_control(cg, "-memory");
    rmdir(cg);
    cr_assert_eq(status, 125, "stderr:\n%s", e.r.err);
    cr_expect(strstr(e.r.err, "cgroup controller cpu (for a CPU quota) is not delegated") != NULL,
              "%s", e.r.err);
    cr_assert_str_eq(left, "", "the refused start left %s", left);
    e2e_fini(&e);
}

/* isolation.cgroup_manager: cgroupfs is what the report names, with no systemd scope. */
Test(cgroup_policy, cgroupfs_manager_is_named_in_the_report, .timeout = 120)
{
    struct e2e e;
    if (!e2e_can_cgroup())
        cr_skip_test("needs root or a delegated cgroup");
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: fscg\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', exit, '0']\n"
                 "resources: {worker: {memory: 64Mi}}\n"
                 "isolation: {cgroup_manager: cgroupfs}\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    json_t *cg = json_object_get(e.rep, "cgroup");
    cr_assert_str_eq(e2e_str(cg, "manager"), "cgroupfs");
    cr_assert(json_is_null(json_object_get(cg, "scope")));
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* Forcing systemd where it cannot be asked (a hybrid or v1 host, or no systemd running) is a
 * setup error that says why, not a silent fallback to cgroupfs. scripts/test_systemd runs it
 * where systemd does run. */
Test(cgroup_policy, forced_systemd_where_it_cannot_be_asked_is_refused, .timeout = 120)
{
    struct e2e e;
    struct statfs sf;
    bool unified = statfs("/sys/fs/cgroup", &sf) == 0 && sf.f_type == CGROUP2_SUPER_MAGIC;
    if (unified && access("/run/systemd/system", F_OK) == 0)
        cr_skip_test("systemd runs here: scripts/test_systemd covers the forced manager");
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: sdcg\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', pidfile, '%2$s/ran']\n"
                 "isolation: {cgroup_manager: systemd}\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 125, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "setup_failed");
    const char *msg = e2e_str(json_object_get(e.rep, "root_cause"), "message");
    cr_assert_not_null(strstr(msg, "isolation.cgroup_manager: systemd"), "%s", msg);
    cr_assert_not_null(strstr(msg, unified ? "systemd does not run here" : "needs pure cgroup v2"),
                       "%s", msg);
    cr_assert_null(xt_read_file(e2e_path(&e, "ran")));
    e2e_assert_clean(&e);
    e2e_fini(&e);
}
