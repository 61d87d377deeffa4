/* End to end: start: fork, memory and supervision. A Python zygote (tests/helpers/zygote.py)
 * preloads once and forks the workers into their own cgroups: the shared pages are charged to
 * the zygote, a worker's limit governs only its private memory, OOM kills are attributed to the
 * worker or the zygote, restarts fork again from the living zygote, the job's timeout covers the
 * preload. Every test checks that nothing is left behind. */
#include "e2e/fork.h"

#include <sys/stat.h>

/* The headline: 512 MiB preloaded once (a torch tensor), 4 workers with a 128 MiB limit
 * each read all of it; their peaks stay far below the limit, the zygote's carries the 512 MiB,
 * and gather returns the 4 results in rank order. */
Test(fork, workers_share_the_preload_and_gather, .timeout = 300)
{
    struct e2e e;
    need_python();
    e2e_init(&e);
    char *count = e2e_path(&e, "preloads");
    char args[512];
    snprintf(args, sizeof(args), "share --preload 512 --torch 1 --count %s", count);
    fork_spec(&e, args,
              "workers: 4\nresources: {worker: {memory: 128Mi, swap: 0}, shared: {memory: 1Gi}}\n");
    cr_assert_eq(e2e_run(&e, 240, NULL), 0, "stderr:\n%s\nstdout:\n%s", e.r.err, e.r.out);
    e2e_load_report(&e);
    /* 512 MiB of ones, as float32: 2^27 per worker. */
    cr_assert_not_null(strstr(e.r.out, "gathered [[0, 134217728, 1], [1, 134217728, 1], "
                                       "[2, 134217728, 1], [3, 134217728, 1]]"),
                       "%s", e.r.out);
    for (size_t i = 0; i < 4; i++) {
        json_t *w = e2e_worker(&e, i);
        cr_assert_str_eq(e2e_str(w, "state"), "exited");
        cr_assert_eq(mem_of(w, "limit_bytes"), 128 << 20);
        /* Reading 512 MiB cost a worker almost nothing: the pages are the zygote's. */
        cr_assert_lt(mem_of(w, "peak_bytes"), 48 << 20, "worker %zu peak %lld", i,
                     (long long)mem_of(w, "peak_bytes"));
        cr_assert_gt(mem_of(w, "peak_bytes"), 0);
    }
    json_t *z = json_object_get(e.rep, "zygote");
    cr_assert_str_eq(e2e_str(z, "state"), "exited");
    cr_assert_eq(json_integer_value(json_object_get(z, "exit_code")), 0);
    cr_assert_eq(mem_of(z, "limit_bytes"), 1LL << 30);
    cr_assert_geq(mem_of(z, "peak_bytes"), 512LL << 20, "zygote peak %lld",
                  (long long)mem_of(z, "peak_bytes"));
    char *text = xt_read_file(count);
    cr_assert_str_eq(text, "preload\n");
    free(text);
    free(count);
    /* Pure v2: the zygote's and the job's memory.min protect the shared pages. */
    if (access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0) {
        cr_assert_not_null(strstr(e.r.out, "zygote memory.min=1073741824"), "%s", e.r.out);
        cr_assert_not_null(strstr(e.r.out, "zygote ../memory.min=1073741824"), "%s", e.r.out);
    }
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* A worker that allocates 300 MiB of its own dies at its own 128 MiB limit, and is the root
 * cause: the 256 MiB it read from the zygote do not count against it. */
Test(fork, private_memory_is_limited_per_worker, .timeout = 300)
{
    struct e2e e;
    need_python();
    e2e_init(&e);
    fork_spec(&e, "share --preload 256 --alloc-rank 2 --alloc 300",
              "workers: 4\nresources: {worker: {memory: 128Mi, swap: 0}, shared: {memory: 1Gi}}\n"
              "on_failure: {grace: 5s}\n");
    cr_assert_eq(e2e_run(&e, 240, NULL), 137, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    json_t *rc = json_object_get(e.rep, "root_cause");
    cr_assert_eq(json_integer_value(json_object_get(rc, "rank")), 2);
    cr_assert_str_eq(e2e_str(rc, "reason"), "oom_killed");
    cr_assert_not_null(strstr(e2e_str(rc, "message"), "worker 2 (cpu) was killed by the kernel "
                                                      "OOM killer at its 128.0 MiB memory limit"),
                       "%s", e2e_str(rc, "message"));
    json_t *w2 = e2e_worker(&e, 2);
    cr_assert_str_eq(e2e_str(w2, "state"), "oom_killed");
    cr_assert_geq(mem_of(w2, "oom_kills"), 1);
    json_t *z = json_object_get(e.rep, "zygote");
    cr_assert_eq(mem_of(z, "oom_kills"), 0);
    cr_assert_geq(mem_of(z, "peak_bytes"), 256LL << 20);
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* The zygote outgrowing resources.shared.memory is the root cause, named as such. */
Test(fork, zygote_killed_at_its_shared_limit, .timeout = 300)
{
    struct e2e e;
    need_python();
    e2e_init(&e);
    fork_spec(&e, "share --preload 300",
              "workers: 2\nresources: {worker: {memory: 64Mi}, shared: {memory: 128Mi}}\n");
    cr_assert_eq(e2e_run(&e, 240, NULL), 137, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    json_t *rc = json_object_get(e.rep, "root_cause");
    cr_assert(json_is_null(json_object_get(rc, "rank")));
    cr_assert_str_eq(e2e_str(rc, "reason"), "zygote_oom_killed");
    cr_assert_not_null(strstr(e2e_str(rc, "message"),
                              "the zygote was killed by the kernel OOM killer at its 128.0 MiB "
                              "memory limit (resources.shared.memory)"),
                       "%s", e2e_str(rc, "message"));
    cr_assert_not_null(strstr(e2e_str(rc, "message"), "before it forked the workers"), "%s",
                       e2e_str(rc, "message"));
    json_t *z = json_object_get(e.rep, "zygote");
    cr_assert_str_eq(e2e_str(z, "state"), "oom_killed");
    cr_assert_geq(mem_of(z, "oom_kills"), 1);
    for (size_t i = 0; i < 2; i++)
        cr_assert(json_is_null(json_object_get(e2e_worker(&e, i), "pid")));
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* A restart forks again from the living zygote: the preload ran once. */
Test(fork, restarts_refork_without_preloading_again, .timeout = 300)
{
    struct e2e e;
    need_python();
    e2e_init(&e);
    char *count = e2e_path(&e, "preloads");
    char args[512];
    snprintf(args, sizeof(args), "share --preload 64 --count %s --fail-rank 1 --fail-restart 0",
             count);
    fork_spec(&e, args, "workers: 2\non_failure: {restarts: 2}\n");
    cr_assert_eq(e2e_run(&e, 240, NULL), 0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_eq(json_integer_value(json_object_get(e.rep, "restarts")), 1);
    json_t *a = json_array_get(json_object_get(e.rep, "attempts"), 0);
    cr_assert_eq(json_integer_value(json_object_get(a, "exit_code")), 3);
    char *text = xt_read_file(count);
    cr_assert_str_eq(text, "preload\n", "the preload ran again: %s", text);
    free(text);
    free(count);
    cr_assert_not_null(strstr(e.r.out, "gathered [[0, 67108864, 1], [1, 67108864, 1]]"), "%s",
                       e.r.out);
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* The job's timeout covers the preload: the zygote is stopped, the outcome is a timeout. */
Test(fork, a_timeout_during_the_preload_stops_the_zygote, .timeout = 120)
{
    struct e2e e;
    need_python();
    e2e_init(&e);
    fork_spec(&e, "sleep --seconds 60", "workers: 2\ntimeout: 2s\non_failure: {grace: 2s}\n");
    cr_assert_eq(e2e_run(&e, 100, NULL), 124, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "timeout");
    cr_assert_str_eq(e2e_str(json_object_get(e.rep, "zygote"), "state"), "timeout");
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* A ^C to xmprun reaches the workers and the zygote (which is waiting in spawn()): all stop at
 * once, the job is interrupted (130), and the zygote is reported as stopped by xmprun. */
Test(fork, sigint_stops_the_workers_and_the_zygote, .timeout = 300)
{
    struct e2e e;
    need_python();
    e2e_init(&e);
    char args[512];
    snprintf(args, sizeof(args), "hold --out %s", e.dir);
    fork_spec(&e, args, "workers: 2\n");
    int status = e2e_sh(&e, 240,
                        "\"$XMPRUN\" --report \"$REPORT\" \"$SPEC\" & pid=$!; i=0; "
                        "while { [ ! -e \"$DIR/running-0\" ] || [ ! -e \"$DIR/running-1\" ]; } && "
                        "[ $i -lt 2000 ]; do sleep 0.05; i=$((i+1)); done; kill -INT $pid; "
                        "wait $pid");
    cr_assert_eq(status, 130, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "interrupted");
    cr_assert_str_eq(e2e_str(json_object_get(e.rep, "zygote"), "state"), "stopped_by_xmprun");
    for (size_t i = 0; i < 2; i++)
        cr_assert_str_eq(e2e_str(e2e_worker(&e, i), "state"), "stopped_by_xmprun");
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* A forked worker gets an exec'd worker's isolation (SPEC.md section 7), applied after the fork
 * and before the user's function: its rlimits, the drop to isolation.user, no_new_privs and the
 * seccomp filter (Seccomp: 2 is filter mode). The zygote itself stays unfiltered. Under strict,
 * worker 1's ptrace kills it, and the report says so as for an exec'd worker. */
Test(fork, forked_workers_are_confined, .timeout = 300)
{
    struct e2e e;
    need_python();
    if (geteuid() != 0)
        cr_skip_test("isolation.user needs root");
    e2e_init(&e);
    chmod(e.dir, 0755);
    const char *extra = "workers: 2\n"
                        "on_failure: {grace: 2s}\n"
                        "isolation: {seccomp: strict, user: nobody}\n"
                        "resources: {worker: {rlimits: {nofile: 4321}}}\n";
    fork_spec(&e, "confined", extra);
    cr_assert_eq(e2e_run(&e, 240, NULL), 0, "stderr:\n%s\nstdout:\n%s", e.r.err, e.r.out);
    for (int i = 0; i < 2; i++) {
        char want[128];
        snprintf(want, sizeof(want), "[%d] uid=65534 nofile=4321 nnp=1 seccomp=2", i);
        cr_assert_not_null(strstr(e.r.out, want), "no \"%s\" in:\n%s", want, e.r.out);
    }
    e2e_load_report(&e);
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);

    fork_spec(&e, "confined --ptrace-rank 1", extra);
    cr_assert_eq(e2e_run(&e, 240, NULL), 128 + SIGSYS, "stderr:\n%s\nstdout:\n%s", e.r.err,
                 e.r.out);
    cr_assert_null(strstr(e.r.out, "ptrace returned"), "%s", e.r.out);
    e2e_load_report(&e);
    const char *msg = e2e_str(json_object_get(e.rep, "root_cause"), "message");
    cr_assert_not_null(strstr(msg, "worker 1 (cpu) was killed by its seccomp profile (strict)"),
                       "%s", msg);
    cr_expect_not_null(strstr(msg, "for calling `ptrace`"), "%s", msg);
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* Each forked worker is in its own cgroups, in every hierarchy, as an exec'd one: the zygote
 * clones it into its own cgroup2 directory (on a hybrid host the tracking tree, on pure v2 the
 * only one, where its limits are) and it joins its v1 directories itself. A worker cloned into
 * the zygote's cgroup2 directory would run there with no limit of its own on pure v2 (on this
 * hybrid host its v1 memory limit would still hold, so only this check sees it). */
Test(fork, forked_workers_are_in_their_own_cgroups, .timeout = 300)
{
    struct e2e e;
    need_python();
    e2e_init(&e);
    fork_spec(&e, "cgroups", "workers: 2\nresources: {worker: {memory: 256Mi, pids: 64}}\n");
    cr_assert_eq(e2e_run(&e, 240, NULL), 0, "stderr:\n%s\nstdout:\n%s", e.r.err, e.r.out);
    e2e_load_report(&e);
    json_t *paths = json_object_get(json_object_get(e.rep, "cgroup"), "paths");
    const char *key;
    json_t *v;
    size_t own = 0;
    json_object_foreach(paths, key, v)
    {
        bool v2 = strcmp(key, "unified") == 0;
        for (int i = 0; i < 2; i++) {
            char want[1200], line[1200];
            snprintf(want, sizeof(want), ":%s:%s/worker-%d\n", v2 ? "" : key, json_string_value(v),
                     i);
            snprintf(line, sizeof(line), "[%d] cgroup ", i);
            /* memory and pids have limits here, and cgroup2 holds every worker: those are the
             * worker's own; elsewhere a worker may share the job's directory. */
            if (v2 || strcmp(key, "memory") == 0 || strcmp(key, "pids") == 0) {
                char *at = strstr(e.r.out, want);
                cr_assert_not_null(at, "worker %d is not in %s in %s:\n%s", i, want + 1, key,
                                   e.r.out);
                own++;
            }
        }
    }
    cr_assert_geq(own, 2, "no hierarchy was checked: %s", e.r.out);
    cr_assert_null(strstr(e.r.out, "/zygote\n"), "a worker is in the zygote's cgroup:\n%s",
                   e.r.out);
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}
