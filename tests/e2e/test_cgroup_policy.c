/* End to end: isolation.cgroups when the cgroup filesystem is read-only (a private mount
 * namespace where every cgroup mount is bind-remounted read-only, as in an unprivileged
 * container). required: refuse with a message that says why and what to do (125, setup_failed
 * report); optional: warn once, run without limits and say so in the report; off: no cgroups. */
#include "e2e/e2e.h"

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
    cr_assert_not_null(strstr(msg, "isolation.cgroups: optional"), "%s", msg);
    cr_assert_not_null(strstr(e.r.err, "read-only"), "stderr:\n%s", e.r.err);
    /* Nothing was started. */
    char *ran = xt_read_file(e2e_path(&e, "ran"));
    cr_assert_null(ran);
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
