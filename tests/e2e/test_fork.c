/* End to end: start: fork. A Python zygote (tests/helpers/zygote.py) preloads once and forks the
 * workers into their own cgroups: the shared pages are charged to the zygote, a worker's limit
 * governs only its private memory, and everything else (OOM attribution, tracebacks, restarts
 * from the living zygote, the serial lock, the zygote's own failures, the client's refusals)
 * shows in the report. Every test checks that nothing is left behind. */
#include "e2e/e2e.h"

#define PY "/usr/bin/python3"

/* job.yaml for zygote.py MODE ARGS (space-separated, given as an argv list: the zygote must
 * be xmprun's own child) with extra spec lines. */
static void
fork_spec(struct e2e *e, const char *args, const char *extra)
{
    char *text = NULL, list[2048] = "";
    char *copy = strdup(args), *save = NULL;

    for (char *tok = strtok_r(copy, " ", &save); tok != NULL; tok = strtok_r(NULL, " ", &save)) {
        strncat(list, ", '", sizeof(list) - strlen(list) - 1);
        strncat(list, tok, sizeof(list) - strlen(list) - 1);
        strncat(list, "'", sizeof(list) - strlen(list) - 1);
    }
    free(copy);
    cr_assert_eq(asprintf(&text,
                          "version: 1\nname: fork\nstart: fork\ndevices: {kind: cpu}\n"
                          "command: [" PY ", '%s/tests/helpers/zygote.py'%s]\n%s",
                          xt_source_dir(), list, extra) > 0,
                 1);
    e2e_set_spec(e, text);
}

static int64_t
mem_of(json_t *obj, const char *key)
{
    return json_integer_value(json_object_get(json_object_get(obj, "memory"), key));
}

static void
need_python(void)
{
    if (!e2e_can_cgroup())
        cr_skip_test("needs root or a delegated cgroup");
    if (access(PY, X_OK) != 0)
        cr_skip_test(PY " is not installed");
}

static void
assert_zygote_gone(const struct e2e *e)
{
    json_t *z = json_object_get(e->rep, "zygote");
    cr_assert_not_null(z, "no zygote in the report");
    pid_t pid = (pid_t)json_integer_value(json_object_get(z, "pid"));
    cr_assert(e2e_pid_dead(pid), "the zygote %d is still alive", (int)pid);
}

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
    cr_assert_not_null(strstr(e.r.out, "gathered [[0, 134217728], [1, 134217728], [2, 134217728], "
                                       "[3, 134217728]]"),
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
    cr_assert_not_null(strstr(e.r.out, "gathered [[0, 67108864], [1, 67108864]]"), "%s", e.r.out);
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* MpSerialExecutor.run never overlaps across workers. */
Test(fork, serial_executor_never_overlaps, .timeout = 300)
{
    struct e2e e;
    double start[4], end[4];
    need_python();
    e2e_init(&e);
    char args[512];
    snprintf(args, sizeof(args), "serial --out %s", e.dir);
    fork_spec(&e, args, "workers: 4\n");
    cr_assert_eq(e2e_run(&e, 240, NULL), 0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    for (int i = 0; i < 4; i++) {
        char name[32];
        snprintf(name, sizeof(name), "serial-%d", i);
        char *path = e2e_path(&e, name), *text = xt_read_file(path);
        cr_assert_not_null(text, "worker %d wrote nothing", i);
        cr_assert_eq(sscanf(text, "%lf %lf", &start[i], &end[i]), 2);
        free(text);
        free(path);
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            if (i != j)
                cr_assert(end[i] <= start[j] || end[j] <= start[i],
                          "workers %d and %d overlapped: [%f, %f] [%f, %f]", i, j, start[i], end[i],
                          start[j], end[j]);
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* A worker's exception reaches the report through TORCHELASTIC_ERROR_FILE and its stderr. */
Test(fork, a_raising_worker_shows_its_traceback, .timeout = 300)
{
    struct e2e e;
    need_python();
    e2e_init(&e);
    fork_spec(&e, "raise", "workers: 2\n");
    cr_assert_eq(e2e_run(&e, 240, NULL), 1, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    json_t *rc = json_object_get(e.rep, "root_cause");
    cr_assert_eq(json_integer_value(json_object_get(rc, "rank")), 1);
    json_t *ef = json_object_get(e2e_worker(&e, 1), "error_file");
    json_t *msg = json_object_get(ef, "message");
    cr_assert_str_eq(e2e_str(msg, "message"), "ValueError: boom from rank 1");
    const char *stack = e2e_str(json_object_get(msg, "extraInfo"), "py_callstack");
    cr_assert_not_null(strstr(stack, "Traceback"), "%s", stack);
    cr_assert_not_null(strstr(stack, "in boom"), "%s", stack);
    json_t *tail = json_object_get(e2e_worker(&e, 1), "stderr_tail");
    const char *last = json_string_value(json_array_get(tail, json_array_size(tail) - 1));
    cr_assert_str_eq(last, "ValueError: boom from rank 1");
    /* After a failed job the zygote is told so; its end is a consequence, not a cause. */
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

static void
zygote_fails(const char *args, int status, const char *reason, const char *message,
             const char *stderr_has)
{
    struct e2e e;
    need_python();
    e2e_init(&e);
    fork_spec(&e, args, "workers: 2\n");
    cr_assert_eq(e2e_run(&e, 240, NULL), status, "stderr:\n%s", e.r.err);
    cr_assert_not_null(strstr(e.r.err, stderr_has), "%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "failed");
    json_t *rc = json_object_get(e.rep, "root_cause");
    cr_assert_str_eq(e2e_str(rc, "reason"), reason);
    cr_assert_not_null(strstr(e2e_str(rc, "message"), message), "%s", e2e_str(rc, "message"));
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(fork, a_zygote_that_never_spawns_fails_the_job, .timeout = 120)
{
    zygote_fails("nospawn --code 1", 1, "zygote_exited",
                 "the zygote exited with status 1 before it forked the workers: in start: fork "
                 "the command must call xmprun.spawn()",
                 "root cause: the zygote exited with status 1");
}

Test(fork, a_zygote_that_exits_0_without_spawning_fails_the_job, .timeout = 120)
{
    zygote_fails("nospawn --code 0", 1, "zygote_exited",
                 "the zygote exited with status 0 before it forked the workers: in start: fork "
                 "the command must call xmprun.spawn()",
                 "must call xmprun.spawn()");
}

Test(fork, spawn_twice_is_refused, .timeout = 120)
{
    zygote_fails("twice", 1, "zygote_exited",
                 "the zygote exited with status 1 after its workers finished",
                 "spawn() may be called once per zygote");
}

Test(fork, nprocs_mismatch_is_refused, .timeout = 120)
{
    zygote_fails("nprocs --n 5", 1, "zygote_exited",
                 "the zygote exited with status 1 before it forked the workers: xmprun.spawn: "
                 "nprocs=5, but xmprun planned 2 workers on this node",
                 "nprocs=5, but xmprun planned 2 workers");
}

Test(fork, join_false_is_refused, .timeout = 120)
{
    zygote_fails("nojoin", 1, "zygote_exited",
                 "the zygote exited with status 1 before it forked the workers: xmprun.spawn: "
                 "join=False is not supported",
                 "join=False is not supported");
}

Test(fork, cuda_initialised_before_spawn_is_refused, .timeout = 120)
{
    zygote_fails("cuda", 1, "zygote_exited",
                 "the zygote exited with status 1 before it forked the workers: xmprun.spawn: "
                 "CUDA is already initialised in the zygote",
                 "CUDA is already initialised in the zygote");
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

/* A string command run by a shell that stays in between: clear words, nothing left behind. */
Test(fork, a_shell_between_xmprun_and_the_zygote_is_refused, .timeout = 120)
{
    struct e2e e;
    need_python();
    e2e_init(&e);
    char *text = NULL;
    cr_assert_eq(asprintf(&text,
                          "version: 1\nname: fork\nstart: fork\nworkers: 2\n"
                          "devices: {kind: cpu}\n"
                          "command: '" PY " %s/tests/helpers/zygote.py raise; true'\n",
                          xt_source_dir()) > 0,
                 1);
    e2e_set_spec(&e, text);
    cr_assert_eq(e2e_run(&e, 120, NULL), 1, "stderr:\n%s", e.r.err);
    cr_assert_not_null(strstr(e.r.err, "the zygote is not xmprun's own child"), "%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_not_null(strstr(e2e_str(json_object_get(e.rep, "root_cause"), "message"),
                              "before it forked the workers: the zygote is not xmprun's own child"),
                       "%s", e2e_str(json_object_get(e.rep, "root_cause"), "message"));
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* Outside xmprun, spawn says how to run it. */
Test(fork, spawn_outside_xmprun_says_how_to_run_it, .timeout = 60)
{
    struct e2e e;
    char *path = NULL, *pp = NULL;
    if (access(PY, X_OK) != 0)
        cr_skip_test(PY " is not installed");
    e2e_init(&e);
    cr_assert_eq(asprintf(&path, "%s/tests/helpers/zygote.py", xt_source_dir()) > 0, 1);
    cr_assert_eq(asprintf(&pp, "PYTHONPATH=%s/client/python", xt_source_dir()) > 0, 1);
    char *argv[] = {PY, path, "twice", NULL};
    char *envp[] = {pp, NULL};
    cr_assert_eq(xt_run(&e.r, argv, envp, e.dir, 60), 0);
    cr_assert_eq(e.r.status, 1);
    cr_assert_not_null(strstr(e.r.err, "RuntimeError: xmprun.spawn: not running under xmprun "
                                       "with start: fork"),
                       "%s", e.r.err);
    free(path);
    free(pp);
    e2e_fini(&e);
}

/* Runs an example from the repository root, as the README says, with extra options. */
static int
run_example(struct e2e *e, const char *name, const char *options)
{
    char *script = NULL;
    cr_assert_eq(asprintf(&script,
                          "cd '%s' && exec \"$XMPRUN\" --report \"$REPORT\" %s examples/%s.yaml",
                          xt_source_dir(), options, name) > 0,
                 1);
    int status = e2e_sh(e, 280, script);
    free(script);
    return status;
}

/* examples/fork-c.yaml: a C zygote linked with -lxmprun. */
Test(fork, example_fork_c, .timeout = 300)
{
    struct e2e e;
    if (!e2e_can_cgroup())
        cr_skip_test("needs root or a delegated cgroup");
    e2e_init(&e);
    cr_assert_eq(run_example(&e, "fork-c", ""), 0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_not_null(strstr(e.r.out, "worker 1 (RANK=1): read 256 MiB, sum 268435456"), "%s",
                       e.r.out);
    for (size_t i = 0; i < 2; i++)
        cr_assert_lt(mem_of(e2e_worker(&e, i), "peak_bytes"), 16 << 20);
    cr_assert_geq(mem_of(json_object_get(e.rep, "zygote"), "peak_bytes"), 256LL << 20);
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* examples/fork-torch.yaml, a torch_xla-style script (module-level MpModelWrapper, _mp_fn(index,
 * flags), xmp.spawn(_mp_fn, args=(FLAGS,), start_method='fork')) that differs from one only by
 * `import xmprun as xmp`; with a 256 MiB model here to keep the suite short. */
Test(fork, example_fork_torch, .timeout = 300)
{
    struct e2e e;
    need_python();
    e2e_init(&e);
    cr_assert_eq(run_example(&e, "fork-torch",
                             "--set 'command=[/usr/bin/python3,examples/fork-torch.py,256]'"),
                 0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_not_null(strstr(e.r.out, "zygote: built a 256 MiB model"), "%s", e.r.out);
    cr_assert_not_null(strstr(e.r.out, "[3] rank 3: 5 forward passes, output (8, 4096)"), "%s",
                       e.r.out);
    cr_assert_not_null(strstr(e.r.out, "zygote: results by rank: ["), "%s", e.r.out);
    for (size_t i = 0; i < 4; i++)
        cr_assert_lt(mem_of(e2e_worker(&e, i), "peak_bytes"), 128 << 20);
    cr_assert_geq(mem_of(json_object_get(e.rep, "zygote"), "peak_bytes"), 256LL << 20);
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}
