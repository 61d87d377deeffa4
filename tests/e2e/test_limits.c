/* End to end: the cgroup limits hold. A worker above its memory limit is OOM-killed (137, a root
 * cause that names the limit); each worker runs in its own cgroup with the spec's values; a fork
 * bomb is contained by pids.max. Every test checks the report and that nothing leaked. */
#include "e2e/e2e.h"

#include <sched.h>
#include <seccomp.h>

Test(limits, oom_kill_names_the_limit, .timeout = 120)
{
    struct e2e e;
    if (!e2e_can_cgroup())
        cr_skip_test("needs root or a delegated cgroup");
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: oom\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: 'if [ \"$RANK\" = 1 ]; then exec %1$s alloc 512; fi; "
                 "exec %1$s sleep 60'\n"
                 "resources: {worker: {memory: 64Mi, swap: 0}}\n"
                 "on_failure: {grace: 5s}\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 137, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    json_t *rc = json_object_get(e.rep, "root_cause");
    cr_assert_eq(json_integer_value(json_object_get(rc, "rank")), 1);
    cr_assert_str_eq(e2e_str(rc, "reason"), "oom_killed");
    cr_assert_not_null(strstr(e2e_str(rc, "message"), "worker 1 (cpu) was killed by the kernel "
                                                      "OOM killer at its 64.0 MiB memory limit"),
                       "%s", e2e_str(rc, "message"));
    json_t *w1 = e2e_worker(&e, 1), *mem = json_object_get(w1, "memory");
    cr_assert_str_eq(e2e_str(w1, "state"), "oom_killed");
    cr_assert_str_eq(e2e_str(w1, "signal"), "SIGKILL");
    cr_assert_eq(json_integer_value(json_object_get(mem, "limit_bytes")), 64 << 20);
    cr_assert_geq(json_integer_value(json_object_get(mem, "oom_kills")), 1);
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 0), "state"), "stopped_by_xmprun");
    cr_assert_neq(strcmp(e2e_str(json_object_get(e.rep, "cgroup"), "mode"), "none"), 0);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* The value printed by `probe limits` for the first of the given file names found in out for
 * rank r, or -2 when none is there ("max" reads as -1). */
static long long
limit_of(const char *out, int rank, const char *const *names)
{
    char key[128];
    for (size_t i = 0; names[i] != NULL; i++) {
        snprintf(key, sizeof(key), "[%d] %s=", rank, names[i]);
        const char *p = strstr(out, key);
        if (p != NULL) {
            p += strlen(key);
            return strncmp(p, "max", 3) == 0 ? -1 : atoll(p);
        }
    }
    return -2;
}

Test(limits, workers_see_their_own_cgroup_and_limits, .timeout = 120)
{
    struct e2e e;
    char want[256];
    static const char *const mem[] = {"memory.max", "memory.limit_in_bytes", NULL};
    static const char *const pids[] = {"pids.max", NULL};
    static const char *const quota[] = {"cpu.max", "cpu.cfs_quota_us", NULL};

    if (!e2e_can_cgroup())
        cr_skip_test("needs root or a delegated cgroup");
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: limits\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: '%1$s cgroup && %1$s limits'\n"
                 "resources: {worker: {memory: 96Mi, pids: 64, cpus: 0.5}}\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    const char *id = e2e_str(json_object_get(e.rep, "job"), "id");
    for (int r = 0; r < 2; r++) {
        /* In every hierarchy the worker's /proc/self/cgroup line ends in its own cgroup. */
        snprintf(want, sizeof(want), "/xmprun-limits-%s/worker-%d\n", id, r);
        cr_assert_not_null(strstr(e.r.out, want), "no %s in:\n%s", want, e.r.out);
        cr_assert_eq(limit_of(e.r.out, r, mem), 96LL << 20, "out:\n%s", e.r.out);
        cr_assert_eq(limit_of(e.r.out, r, pids), 64, "out:\n%s", e.r.out);
        /* 0.5 CPU over the 100 ms period: 50000 us ("50000 100000" on v2). */
        cr_assert_eq(limit_of(e.r.out, r, quota), 50000, "out:\n%s", e.r.out);
    }
    snprintf(want, sizeof(want), "/xmprun-limits-%s", id);
    cr_assert(strstr(e2e_str(json_object_get(e.rep, "cgroup"), "path"), want) != NULL);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(limits, fork_bomb_is_contained, .timeout = 120)
{
    struct e2e e;
    if (!e2e_can_cgroup())
        cr_skip_test("needs root or a delegated cgroup");
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: forkbomb\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', forkbomb]\n"
                 "resources: {worker: {pids: 32}}\n"
                 /* In a sanitizer build LeakSanitizer's exit check needs a thread that the
                  * exhausted pids.max refuses. */
                 "env: {ASAN_OPTIONS: detect_leaks=0}\n"
                 "timeout: 60s\n");
    /* The bomb stops at pids.max and exits 0 having seen fork fail; its sleeping children die
     * with the job. */
    cr_assert_eq(e2e_run(&e, 90, NULL), 0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    const char *p = strstr(e.r.out, "forks=");
    cr_assert_not_null(p, "out:\n%s", e.r.out);
    cr_assert_lt(atol(p + 6), 32);
    cr_assert_not_null(strstr(e.r.out, "failures=200"));
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(limits, example_oom, .timeout = 120)
{
    struct e2e e;
    char *spec = NULL;
    if (!e2e_can_cgroup())
        cr_skip_test("needs root or a delegated cgroup");
    e2e_init(&e);
    cr_assert_eq(asprintf(&spec, "%s/examples/oom.yaml", xt_source_dir()) > 0, 1);
    e.spec = spec;
    cr_assert_eq(e2e_run(&e, 90, NULL), 137, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    json_t *rc = json_object_get(e.rep, "root_cause");
    cr_assert_str_eq(e2e_str(rc, "reason"), "oom_killed");
    cr_assert_not_null(strstr(e2e_str(rc, "message"), "at its 128.0 MiB memory limit"), "%s",
                       e2e_str(rc, "message"));
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* Without clone3 (old kernel, or a seccomp profile answering ENOSYS) workers are forked and
 * join their cgroups themselves before exec: same cgroups, same limits. */
Test(limits, fork_fallback_joins_the_same_cgroups, .timeout = 120)
{
    struct e2e e;
    char want[256];
    static const char *const mem[] = {"memory.max", "memory.limit_in_bytes", NULL};

    if (!e2e_can_cgroup())
        cr_skip_test("needs root or a delegated cgroup");
    /* Criterion runs each test in its own process: the filter stays in this one and is
     * inherited by xmprun. */
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    cr_assert_not_null(ctx);
    cr_assert_eq(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0), 0);
    cr_assert_eq(seccomp_load(ctx), 0);
    seccomp_release(ctx);

    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: forked\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: '%1$s cgroup && %1$s limits'\n"
                 "resources: {worker: {memory: 80Mi}}\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    const char *id = e2e_str(json_object_get(e.rep, "job"), "id");
    for (int r = 0; r < 2; r++) {
        snprintf(want, sizeof(want), "/xmprun-forked-%s/worker-%d\n", id, r);
        cr_assert_not_null(strstr(e.r.out, want), "no %s in:\n%s", want, e.r.out);
        cr_assert_eq(limit_of(e.r.out, r, mem), 80LL << 20, "out:\n%s", e.r.out);
    }
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* The OOM killer takes a child of the worker (as with a data-loader process); the worker then
 * fails on its own, and the root cause says what happened below it. */
Test(limits, oom_kill_of_a_child_is_named, .timeout = 120)
{
    struct e2e e;
    if (!e2e_can_cgroup())
        cr_skip_test("needs root or a delegated cgroup");
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: childoom\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: '%1$s alloc 512 || exit 1'\n"
                 "resources: {worker: {memory: 64Mi, swap: 0}}\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 1, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    json_t *rc = json_object_get(e.rep, "root_cause");
    cr_assert_str_eq(e2e_str(rc, "reason"), "exited");
    cr_assert_str_eq(e2e_str(rc, "message"), "worker 0 (cpu) exited with status 1 after the kernel "
                                             "OOM killer killed a process in it at its 64.0 MiB "
                                             "memory limit");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* The root cause is worker 0, killed by the OOM killer at the job's memory limit of `limit`. */
static void
assert_killed_at_job_limit(struct e2e *e, const char *limit)
{
    json_t *rc = json_object_get(e->rep, "root_cause");
    char want[128];

    snprintf(want, sizeof(want),
             "worker 0 (cpu) was killed by the kernel OOM killer at the job's %s memory limit",
             limit);
    cr_assert_eq(json_integer_value(json_object_get(rc, "rank")), 0);
    cr_assert_not_null(strstr(e2e_str(rc, "message"), want), "%s", e2e_str(rc, "message"));
}

Test(limits, oom_at_the_job_limit, .timeout = 120)
{
    struct e2e e;
    if (!e2e_can_cgroup())
        cr_skip_test("needs root or a delegated cgroup");
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: jobmem\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: 'if [ \"$RANK\" = 0 ]; then exec %1$s alloc 512; fi; "
                 "exec %1$s sleep 60'\n"
                 "resources: {job: {memory: 64Mi}}\n"
                 "on_failure: {grace: 5s}\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 137, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    assert_killed_at_job_limit(&e, "64.0 MiB");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* A restart gives the workers new cgroups, whose OOM counters start at 0: an OOM kill at the
 * job's limit in the second run is the job's, although worker 0 was killed at its own limit in
 * the first, and the final report counts only the second run's kill. Rank 1 starts allocating a
 * second late, so that rank 0 holds more and is the victim again. */
Test(limits, oom_after_a_restart_is_placed_anew, .timeout = 120)
{
    struct e2e e;
    if (!e2e_can_cgroup())
        cr_skip_test("needs root or a delegated cgroup");
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: reoom\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: 'if [ \"$XMPRUN_RESTART_COUNT\" = 0 ]; then "
                 "if [ \"$RANK\" = 0 ]; then exec %1$s alloc 512; fi; exec %1$s sleep 60; fi; "
                 "if [ \"$RANK\" = 0 ]; then exec %1$s alloc 56 60; fi; "
                 "sleep 1; exec %1$s alloc 48 60'\n"
                 "resources: {worker: {memory: 64Mi}, job: {memory: 80Mi}}\n"
                 "on_failure: {restarts: 1, grace: 5s}\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 137, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_eq(json_integer_value(json_object_get(e.rep, "restarts")), 1);
    json_t *a0 = json_array_get(json_object_get(e.rep, "attempts"), 0);
    cr_assert_not_null(strstr(json_dumps(a0, 0), "at its 64.0 MiB memory limit"), "first run: %s",
                       json_dumps(a0, 0));
    json_t *w0 = json_array_get(json_object_get(e.rep, "workers"), 0);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(w0, "memory"), "oom_kills")), 1,
                 "the second run's count only");
    assert_killed_at_job_limit(&e, "80.0 MiB");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(limits, affinity_follows_the_cpuset, .timeout = 120)
{
    struct e2e e;
    cpu_set_t mine;
    int last = -1;
    char want[64];

    cr_assert_eq(sched_getaffinity(0, sizeof(mine), &mine), 0);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &mine))
            last = c;
    e2e_init(&e);
    /* Both workers pinned to the last CPU this test may use. */
    char *spec = NULL;
    cr_assert_eq(asprintf(&spec,
                          "version: 1\n"
                          "name: pinned\n"
                          "workers: 2\n"
                          "devices: {kind: cpu}\n"
                          "command: ['%s', affinity]\n"
                          "resources: {worker: {cpuset: '%d'}}\n",
                          xt_probe(), last) > 0,
                 1);
    e2e_set_spec(&e, spec);
    cr_assert_eq(e2e_run(&e, 90, NULL), 0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    for (int r = 0; r < 2; r++) {
        snprintf(want, sizeof(want), "[%d] affinity=%d\n", r, last);
        cr_assert_not_null(strstr(e.r.out, want), "no %s in:\n%s", want, e.r.out);
    }
    snprintf(want, sizeof(want), "%d", last);
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 1), "cpuset"), want);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}
