/* End to end: how a job fails. The first failing worker's exit code becomes xmprun's and
 * kill-all stops the others; a missing program is failed_to_start (127); the deadline gives 124;
 * restarts rerun the whole group; a worker's TORCHELASTIC_ERROR_FILE and stderr tail reach the
 * report. Every test checks the status, the report against its schema, and that nothing leaked. */
#include "e2e/e2e.h"

Test(failures, first_failure_exit_code_and_kill_all, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: failfast\n"
                 "workers: 3\n"
                 "devices: {kind: cpu}\n"
                 "command: 'if [ \"$RANK\" = 1 ]; then sleep 0.5; exit 3; fi; exec %1$s sleep 60'\n"
                 "on_failure: {action: kill-all, grace: 5s}\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 3, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "failed");
    cr_assert_eq(json_integer_value(json_object_get(e.rep, "exit_code")), 3);
    json_t *rc = json_object_get(e.rep, "root_cause");
    cr_assert_eq(json_integer_value(json_object_get(rc, "rank")), 1);
    cr_assert_str_eq(e2e_str(rc, "reason"), "exited");
    cr_assert_str_eq(e2e_str(rc, "message"), "worker 1 (cpu) exited with status 3");
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 0), "state"), "stopped_by_xmprun");
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 1), "state"), "exited");
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 2), "state"), "stopped_by_xmprun");
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 0), "signal"), "SIGTERM");
    /* The sleeping workers were stopped at once, not after their 60 s. */
    cr_assert_lt(e2e_duration(&e), 30.0);
    cr_assert_not_null(strstr(e.r.err, "root cause: worker 1 (cpu) exited with status 3"));
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* Two workers: rank 1 prints gloo's line for a lost peer and exits 1 at once; rank 0 runs
 * rank0 (shell, with the probe as %1$s). */
#define PEER_LOSS_SPEC(rank0)                                                                      \
    "version: 1\n"                                                                                 \
    "name: peerloss\n"                                                                             \
    "workers: 2\n"                                                                                 \
    "devices: {kind: cpu}\n"                                                                       \
    "command: 'if [ \"$RANK\" = 1 ]; then echo \"RuntimeError: "                                   \
    "[./gloo/transport/tcp/pair.cc:598] Connection closed by peer "                                \
    "[10.0.0.2]:18344\" >&2; exit 1; fi; " rank0 "'\n"

/* A worker that lost its peer is a symptom: the worker that failed on its own may close its
 * connections well before it is reaped (Python's teardown after sys.exit). Rank 1 prints gloo's
 * "Connection closed by peer" and exits at once; rank 0, the cause, exits 7 0.4 s later. The
 * stop waits for it, so rank 0 is not SIGTERMed and the root cause names it. */
Test(failures, peer_loss_waits_for_the_worker_that_failed_first, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, PEER_LOSS_SPEC("%1$s sleep 0.4; exit 7"));
    cr_assert_eq(e2e_run(&e, 90, NULL), 7, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    json_t *rc = json_object_get(e.rep, "root_cause");
    cr_assert_str_eq(e2e_str(rc, "message"), "worker 0 (cpu) exited with status 7");
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 0), "state"), "exited");
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 1), "state"), "exited");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* ...but only for a moment: when no other worker fails, the job stops after the wait (not after
 * rank 0's 60 s) and the peer loss is the root cause. */
Test(failures, peer_loss_alone_stops_the_job_after_a_moment, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, PEER_LOSS_SPEC("exec %1$s sleep 60"));
    cr_assert_eq(e2e_run(&e, 90, NULL), 1, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    json_t *rc = json_object_get(e.rep, "root_cause");
    cr_assert_str_eq(e2e_str(rc, "message"),
                     "worker 1 (cpu) lost its connection to a peer (10.0.0.2)");
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 0), "state"), "stopped_by_xmprun");
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 0), "signal"), "SIGTERM");
    cr_assert_lt(e2e_duration(&e), 30.0);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(failures, continue_lets_the_others_finish, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: keepgoing\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: 'if [ \"$RANK\" = 0 ]; then exit 5; fi; exec %1$s sleep 1'\n"
                 "on_failure: {action: continue}\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 5, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 0), "state"), "exited");
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 1), "state"), "exited");
    cr_assert_eq(json_integer_value(json_object_get(e2e_worker(&e, 1), "exit_code")), 0);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(failures, missing_executable_is_failed_to_start, .timeout = 120)
{
    struct e2e e;

    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: nosuch\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: [xmprun-no-such-program, --flag]\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 127, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    json_t *rc = json_object_get(e.rep, "root_cause");
    cr_assert_str_eq(e2e_str(rc, "reason"), "failed_to_start");
    cr_assert_not_null(strstr(e2e_str(rc, "message"), "could not start: exec "
                                                      "`xmprun-no-such-program`: No such file "
                                                      "or directory"),
                       "%s", e2e_str(rc, "message"));
    /* Workers start concurrently: the first to fail is the root cause, and kill-all may stop
     * the other before it reached its own exec. */
    size_t first = (size_t)json_integer_value(json_object_get(rc, "rank"));
    cr_assert_str_eq(e2e_str(e2e_worker(&e, first), "state"), "failed_to_start");
    cr_assert_eq(json_integer_value(json_object_get(e2e_worker(&e, first), "exit_code")), 127);
    const char *other = e2e_str(e2e_worker(&e, 1 - first), "state");
    cr_assert(strcmp(other, "failed_to_start") == 0 || strcmp(other, "stopped_by_xmprun") == 0,
              "%s", other);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(failures, not_executable_is_126, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    free(xt_write_file(e.dir, "data.txt", "not a program\n"));
    e2e_spec(&e, "version: 1\n"
                 "name: noexec\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%2$s/data.txt']\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 126, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_not_null(
        strstr(e2e_str(json_object_get(e.rep, "root_cause"), "message"), "Permission denied"));
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(failures, timeout_gives_124, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: slow\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', sleep, '60']\n"
                 "timeout: 1s\n"
                 "on_failure: {grace: 2s}\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 124, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "timeout");
    cr_assert_str_eq(e2e_str(json_object_get(e.rep, "root_cause"), "message"),
                     "the job hit its 1s timeout");
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 0), "state"), "timeout");
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 1), "state"), "timeout");
    cr_assert_lt(e2e_duration(&e), 30.0);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(failures, timeout_kills_what_ignores_sigterm_after_grace, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: stubborn\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', ignore-term, '60']\n"
                 "timeout: 2s\n"
                 "on_failure: {grace: 1s}\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 124, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 0), "signal"), "SIGKILL");
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 0), "state"), "timeout");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(failures, restarts_rerun_the_group, .timeout = 120)
{
    struct e2e e;
    char *log;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: flaky\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: 'echo \"$RANK:$XMPRUN_RESTART_COUNT torchelastic "
                 "$TORCHELASTIC_RESTART_COUNT/$TORCHELASTIC_MAX_RESTARTS\" >> %2$s/runs.log; "
                 "[ \"$XMPRUN_RESTART_COUNT\" = 2 ] || [ \"$RANK\" = 1 ] || exit 4; "
                 "exec %1$s sleep 0.2'\n"
                 "on_failure: {action: kill-all, restarts: 3, grace: 2s}\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "succeeded");
    cr_assert_eq(json_integer_value(json_object_get(e.rep, "restarts")), 2);
    cr_assert_eq(json_array_size(json_object_get(e.rep, "attempts")), 2);
    json_t *a0 = json_array_get(json_object_get(e.rep, "attempts"), 0);
    cr_assert_eq(json_integer_value(json_object_get(a0, "exit_code")), 4);
    log = xt_read_file(e2e_path(&e, "runs.log"));
    cr_assert_not_null(log);
    cr_assert_not_null(strstr(log, "0:0"));
    cr_assert_not_null(strstr(log, "0:1"));
    cr_assert_not_null(strstr(log, "0:2"));
    cr_assert_null(strstr(log, "0:3"));
    /* torchrun's names for the same counts. */
    cr_assert_not_null(strstr(log, "0:0 torchelastic 0/3"), "%s", log);
    cr_assert_not_null(strstr(log, "1:2 torchelastic 2/3"), "%s", log);
    free(log);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(failures, restarts_run_out, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: broken\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', exit, '9']\n"
                 "on_failure: {restarts: 2}\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 9, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_eq(json_integer_value(json_object_get(e.rep, "restarts")), 2);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "failed");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(failures, error_file_and_stderr_tail, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: pyerror\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', errorfile]\n"
                 "logs: {tail: 5, dir: '%2$s/logs'}\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 1, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    json_t *w = e2e_worker(&e, 0);
    json_t *ef = json_object_get(w, "error_file");
    cr_assert(json_is_object(ef), "error_file is not an object");
    cr_assert_str_eq(e2e_str(json_object_get(ef, "message"), "message"),
                     "RuntimeError: probe failed on purpose");
    json_t *tail = json_object_get(w, "stderr_tail");
    cr_assert_eq(json_array_size(tail), 1);
    cr_assert_str_eq(json_string_value(json_array_get(tail, 0)),
                     "RuntimeError: probe failed on purpose");
    char *logged = xt_read_file(e2e_path(&e, "logs/rank-0.err"));
    cr_assert_not_null(logged);
    cr_assert_str_eq(logged, "RuntimeError: probe failed on purpose\n");
    free(logged);
    /* Console prefix mode. */
    cr_assert_not_null(strstr(e.r.err, "[0] RuntimeError: probe failed on purpose\n"));
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(failures, flood_of_output, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: flood\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', flood, '100000']\n"
                 "logs: {console: rank0, tail: 3}\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 0, "stderr:\n%.2000s", e.r.err);
    e2e_load_report(&e);
    /* rank0: only rank 0's lines, unprefixed, all of them. */
    size_t lines = 0;
    for (const char *p = e.r.out; (p = strchr(p, '\n')) != NULL; p++)
        lines++;
    cr_assert_eq(lines, 100000);
    cr_assert_null(strstr(e.r.out, "[1]"));
    json_t *tail = json_object_get(e2e_worker(&e, 1), "stderr_tail");
    cr_assert_eq(json_array_size(tail), 3);
    cr_assert_str_eq(json_string_value(json_array_get(tail, 2)), "err 99990");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(failures, example_failfast, .timeout = 120)
{
    struct e2e e;
    char *spec = NULL;
    e2e_init(&e);
    cr_assert_eq(asprintf(&spec, "%s/examples/failfast.yaml", xt_source_dir()) > 0, 1);
    e.spec = spec;
    cr_assert_eq(e2e_run(&e, 90, NULL), 3, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(e.rep, "root_cause"), "rank")),
                 2);
    /* The others sleep for 60 s: kill-all must have stopped them. */
    for (size_t i = 0; i < 4; i++)
        if (i != 2)
            cr_assert_str_eq(e2e_str(e2e_worker(&e, i), "state"), "stopped_by_xmprun");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(failures, example_flaky, .timeout = 120)
{
    struct e2e e;
    char *spec = NULL;
    e2e_init(&e);
    cr_assert_eq(asprintf(&spec, "%s/examples/flaky.yaml", xt_source_dir()) > 0, 1);
    e.spec = spec;
    cr_assert_eq(e2e_run(&e, 90, NULL), 0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_eq(json_integer_value(json_object_get(e.rep, "restarts")), 1);
    cr_assert_not_null(strstr(e.r.out, "[0] rank 0, attempt 1"), "%s", e.r.out);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* xmprun's stdout is a pipe whose reader sleeps: a flooding worker fills it, yet xmprun keeps
 * supervising (the deadline fires on time) instead of blocking in write(). */
Test(failures, slow_console_does_not_stall_supervision, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: backedup\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', flood, '100000000']\n"
                 "timeout: 1s\n"
                 "on_failure: {grace: 1s}\n");
    int status = e2e_sh(&e, 90,
                        "{ \"$XMPRUN\" --report \"$REPORT\" \"$SPEC\"; echo $? > \"$DIR/status\"; }"
                        " | { sleep 5; cat > /dev/null; }");
    cr_assert_eq(status, 0, "stderr:\n%.3000s", e.r.err);
    char *st = xt_read_file(e2e_path(&e, "status"));
    cr_assert_not_null(st);
    cr_assert_eq(atoi(st), 124, "xmprun exited %s", st);
    free(st);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "timeout");
    cr_assert_lt(e2e_duration(&e), 4.0);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* The grace, seen from the worker: rank 1 traps SIGTERM and keeps stamping the time; it must
 * live on for most of the 3 s grace after its SIGTERM before the SIGKILL comes. This is a lower
 * bound on a promised delay, not a speed check: a grace cut short fails it. */
Test(failures, worker_gets_its_grace_before_sigkill, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: graceful\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: 'if [ \"$RANK\" = 0 ]; then while [ ! -s %2$s/w.alive ]; do sleep 0.05; "
                 "done; exit 4; fi; exec %1$s stamp-term %2$s/w'\n"
                 "on_failure: {action: kill-all, grace: 3s}\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 4, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    json_t *w1 = e2e_worker(&e, 1);
    cr_assert_str_eq(e2e_str(w1, "state"), "stopped_by_xmprun");
    cr_assert_str_eq(e2e_str(w1, "signal"), "SIGKILL");
    char *term = xt_read_file(e2e_path(&e, "w.term"));
    char *alive = xt_read_file(e2e_path(&e, "w.alive"));
    cr_assert(term != NULL && term[0] != '\0', "rank 1 never got SIGTERM");
    cr_assert_not_null(alive);
    double lived = atof(alive) - atof(term);
    cr_assert_geq(lived, 2.0, "SIGKILL came %.3f s after SIGTERM; the grace is 3 s", lived);
    free(term);
    free(alive);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* A worker that dies by its own signal: state signaled, the signal's name, and xmprun exits
 * 128+n as a shell would (SIGUSR1 = 10 -> 138). */
Test(failures, worker_killed_by_its_own_signal_gives_128_plus_n, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: selfkill\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: 'if [ \"$RANK\" = 1 ]; then exec %1$s signal USR1; fi; "
                 "exec %1$s sleep 60'\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 138, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "failed");
    cr_assert_eq(json_integer_value(json_object_get(e.rep, "exit_code")), 138);
    json_t *rc = json_object_get(e.rep, "root_cause");
    cr_assert_eq(json_integer_value(json_object_get(rc, "rank")), 1);
    cr_assert_str_eq(e2e_str(rc, "reason"), "signaled");
    json_t *w1 = e2e_worker(&e, 1);
    cr_assert_str_eq(e2e_str(w1, "state"), "signaled");
    cr_assert_str_eq(e2e_str(w1, "signal"), "SIGUSR1");
    cr_assert(json_is_null(json_object_get(w1, "exit_code")) ||
                  json_integer_value(json_object_get(w1, "exit_code")) == 138,
              "exit_code of a signaled worker");
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 0), "state"), "stopped_by_xmprun");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* A worker that fails after a GPU failure its stderr names (the real text of tests/fixtures/gpu,
 * printed by the worker): the root cause's reason and words are the GPU's, the exit status stays
 * the worker's own. */
static void
gpu_failure_is_named(const char *fixture, const char *reason, const char *message)
{
    struct e2e e;
    char *text = NULL;

    e2e_init(&e);
    cr_assert(asprintf(&text,
                       "version: 1\nname: gpufail\nworkers: 1\ndevices: {kind: cpu}\n"
                       "command: 'cat %s/gpu/%s.tail >&2; exit 1'\n",
                       xt_fixtures(), fixture) > 0);
    e2e_set_spec(&e, text);
    cr_assert_eq(e2e_run(&e, 60, NULL), 1, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    json_t *rc = json_object_get(e.rep, "root_cause");
    cr_expect_str_eq(e2e_str(rc, "reason"), reason);
    cr_expect_str_eq(e2e_str(rc, "message"), message);
    cr_expect_eq(json_integer_value(json_object_get(e.rep, "exit_code")), 1);
    cr_expect_str_eq(e2e_str(e2e_worker(&e, 0), "state"), "exited");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(failures, gpu_out_of_memory_is_named_with_its_numbers, .timeout = 60)
{
    gpu_failure_is_named("gpu_oom_after_use", "gpu_oom",
                         "worker 0 (cpu) ran out of GPU memory: it tried to allocate 60.0 GiB "
                         "with 100.5 GiB of 139.8 GiB in use");
}

Test(failures, cuda_device_assert_is_named, .timeout = 60)
{
    gpu_failure_is_named("device_assert", "cuda_error",
                         "worker 0 (cpu) hit a CUDA error: device-side assert triggered "
                         "(IndexKernel.cu:111: index out of bounds)");
}

Test(failures, cuda_illegal_memory_access_is_named, .timeout = 60)
{
    gpu_failure_is_named("illegal_access", "cuda_error",
                         "worker 0 (cpu) hit a CUDA error: an illegal memory access was "
                         "encountered");
}

Test(failures, nccl_error_is_named, .timeout = 60)
{
    gpu_failure_is_named("nccl_duplicate", "nccl_error",
                         "worker 0 (cpu) hit an NCCL error: invalid usage (Duplicate GPU "
                         "detected : rank 0 and rank 1 both on CUDA device 60)");
}

/* A GPU fault the driver logs while a worker runs (a stand-in for /dev/kmsg: a FIFO below the
 * fixture host's root, which the worker writes the driver's line to, for its own GPU's PCI
 * address): the root cause names the GPU, its PCI address and the Xid first, and the report
 * keeps the event; the exit status stays the worker's. */
/* A one-GPU job (cuda:0, 0000:18:00.0 on the gpu4 fixture) whose worker writes the driver's Xid
 * line for the GPU at pci to the fixture's /dev/kmsg, then exits 1: the report. */
static void
gpu_fault_run(struct e2e *e, const char *pci)
{
    char *root = NULL, *text = NULL, *env = NULL, *copy = NULL, *xid = NULL;

    e2e_init(e);
    cr_assert(asprintf(&root, "%s/host", e->dir) > 0);
    cr_assert(asprintf(&copy, "cp -r %s/hosts/gpu4 %s && mkdir -p %s/dev && mkfifo %s/dev/kmsg",
                       xt_fixtures(), root, root, root) > 0);
    cr_assert_eq(e2e_sh(e, 30, copy), 0, "%s", e->r.err);
    free(copy);
    /* The driver's line as /dev/kmsg gives it; cp blocks on the FIFO until xmprun reads it (an
     * xmprun that does not read it: the worker gives up after 5 s and just fails). */
    cr_assert(asprintf(&xid,
                       "6,981,84645562,-;NVRM: Xid (PCI:%s): 79, pid=1, GPU has fallen off the "
                       "bus.\n",
                       pci) > 0);
    free(xt_write_file(e->dir, "xid.txt", xid));
    free(xid);
    cr_assert(asprintf(&text,
                       "version: 1\nname: gpufault\nworkers: 1\ndevices: {kind: cuda}\n"
                       "resources: {worker: {cpuset: none}}\n"
                       "command: 'timeout 5 cp %s/xid.txt %s/dev/kmsg; sleep 0.2; exit 1'\n",
                       e->dir, root) > 0);
    e2e_set_spec(e, text);
    cr_assert(asprintf(&env, "XMPRUN_HOST_ROOT=%s", root) > 0);
    char *argv[] = {(char *)xt_bin(), "--report", e->report, e->spec, NULL};
    char *envp[] = {e->state_env, env, NULL};
    cr_assert_eq(xt_run(&e->r, argv, envp, e->dir, 60), 0);
    cr_assert_eq(e->r.status, 1, "stderr:\n%s", e->r.err);
    e2e_load_report(e);
    free(env);
    free(root);
}

Test(failures, gpu_fault_from_the_kernel_log_is_named_first, .timeout = 60)
{
    struct e2e e;

    gpu_fault_run(&e, "0000:18:00");
    json_t *rc = json_object_get(e.rep, "root_cause");
    cr_expect_str_eq(e2e_str(rc, "reason"), "gpu_fault");
    const char *msg = e2e_str(rc, "message");
    const char *want = "GPU cuda:0 (0000:18:00.0) reported Xid 79 (GPU has fallen off the bus) "
                       "at ";
    cr_expect(strncmp(msg, want, strlen(want)) == 0 &&
                  strstr(msg, "; then worker 0 (cuda:0) exited with status 1") != NULL,
              "%s", msg);
    json_t *f = json_array_get(json_object_get(e2e_worker(&e, 0), "gpu_faults"), 0);
    cr_expect_eq(json_integer_value(json_object_get(f, "xid")), 79);
    cr_expect_str_eq(e2e_str(f, "pci"), "0000:18:00.0");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* An Xid of a GPU that is not the worker's (another job's, cuda:2 here) leaves it alone: its
 * failure is its own. */
Test(failures, gpu_fault_of_another_gpu_is_not_the_workers, .timeout = 60)
{
    struct e2e e;

    gpu_fault_run(&e, "0000:3a:00");
    json_t *rc = json_object_get(e.rep, "root_cause");
    cr_expect_str_eq(e2e_str(rc, "reason"), "exited", "%s", e2e_str(rc, "message"));
    cr_expect_null(json_object_get(e2e_worker(&e, 0), "gpu_faults"), "%s", e.r.err);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* Kubernetes' termination message: where its file exists, a failed job's root cause goes there
 * (kubectl describe pod shows it); where it does not, nothing is created. */
Test(failures, the_root_cause_is_the_termination_message, .timeout = 60)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: termlog\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: 'if [ \"$RANK\" = 1 ]; then exit 3; fi; exec %1$s sleep 30'\n");
    cr_assert_eq(
        e2e_sh(&e, 60,
               ": > \"$DIR/termination-log\" && XMPRUN_TERMINATION_LOG=\"$DIR/termination-log\" "
               "\"$XMPRUN\" -q --report \"$REPORT\" \"$SPEC\""),
        3);
    char *text = xt_read_file(e2e_path(&e, "termination-log"));
    cr_assert_not_null(text);
    cr_assert_str_eq(text, "xmprun: exit status 3: worker 1 (cpu) exited with status 3\n");
    free(text);
    cr_assert_eq(e2e_sh(&e, 60,
                        "XMPRUN_TERMINATION_LOG=\"$DIR/absent\" \"$XMPRUN\" -q --report "
                        "\"$REPORT\" \"$SPEC\""),
                 3);
    cr_assert_null(xt_read_file(e2e_path(&e, "absent")), "a termination log was created");
    e2e_load_report(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}
