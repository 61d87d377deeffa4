/* End to end: signals and stray processes. SIGTERM to xmprun stops the job (143, interrupted,
 * a complete report); a second SIGINT kills at once; a grandchild that setsid()s and ignores
 * SIGTERM is dead when xmprun returns, whether the job fails or succeeds. */
#include "e2e/e2e.h"

Test(signals, sigterm_gives_143_and_a_report, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: interrupted\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', pidfile, '%2$s/started', --, sleep, '60']\n"
                 "on_failure: {grace: 5s}\n");
    /* Wait until a worker runs, then signal xmprun; the shell exits with xmprun's status. */
    int status = e2e_sh(&e, 90,
                        "\"$XMPRUN\" --report \"$REPORT\" \"$SPEC\" & pid=$!; "
                        "i=0; while [ ! -s \"$DIR/started\" ] && [ $i -lt 200 ]; do "
                        "sleep 0.05; i=$((i+1)); done; kill -TERM $pid; wait $pid");
    cr_assert_eq(status, 143, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "interrupted");
    cr_assert_eq(json_integer_value(json_object_get(e.rep, "exit_code")), 143);
    cr_assert_str_eq(e2e_str(json_object_get(e.rep, "root_cause"), "message"),
                     "xmprun received SIGTERM and stopped the job");
    for (size_t i = 0; i < 2; i++) {
        json_t *w = e2e_worker(&e, i);
        cr_assert_str_eq(e2e_str(w, "state"), "stopped_by_xmprun");
        cr_assert(json_is_string(json_object_get(w, "ended_at")));
    }
    /* jansson's get also finds a JSON null: the time must be a string. */
    cr_assert(json_is_string(json_object_get(e.rep, "ended_at")), "ended_at is not a time");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(signals, second_sigint_kills_at_once, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: impatient\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', ignore-term, '60']\n"
                 "env: {PROBE_SIGNAL_LOG: '%2$s/signals'}\n"
                 "on_failure: {grace: 60s}\n");
    /* The worker survives the forwarded first SIGINT (and notes it); the second one, sent
     * once the first has been seen, must not wait for the 60 s grace. */
    int status = e2e_sh(&e, 90,
                        "trap '' INT; \"$XMPRUN\" --report \"$REPORT\" \"$SPEC\" & pid=$!; "
                        "i=0; while ! grep -q ready \"$DIR/signals\" 2>/dev/null && "
                        "[ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; kill -INT $pid; "
                        "i=0; while ! grep -q INT \"$DIR/signals\" 2>/dev/null && "
                        "[ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; kill -INT $pid; "
                        "wait $pid");
    cr_assert_eq(status, 130, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    char *seen = xt_read_file(e2e_path(&e, "signals"));
    cr_assert_not_null(seen, "the first SIGINT was not forwarded");
    /* The second SIGINT is forwarded too, and may arrive before the SIGKILL. */
    cr_assert_eq(strncmp(seen, "ready\nINT\n", 10), 0, "%s", seen);
    free(seen);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "interrupted");
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 0), "signal"), "SIGKILL");
    /* Well before the 60 s grace: the second ^C did not wait. */
    cr_assert_lt(e2e_duration(&e), 30.0);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(signals, setsid_grandchild_is_killed_on_failure, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: escapee\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: 'if [ \"$RANK\" = 1 ]; then sleep 1; exit 2; fi; "
                 "exec %1$s setsid-orphan %2$s/orphan.pid wait'\n"
                 "on_failure: {grace: 1s}\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 2, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    char *pidfile = e2e_path(&e, "orphan.pid");
    char *text = xt_read_file(pidfile);
    cr_assert_not_null(text, "the probe did not start its grandchild");
    free(text);
    free(pidfile);
    e2e_assert_pidfile_dead(&e, "orphan.pid");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(signals, setsid_grandchild_is_killed_when_the_job_succeeds, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: daemon\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', setsid-orphan, '%2$s/orphan.pid']\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    char *text = xt_read_file(e2e_path(&e, "orphan.pid"));
    cr_assert_not_null(text, "the probe did not start its grandchild");
    free(text);
    e2e_assert_pidfile_dead(&e, "orphan.pid");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(signals, usr1_is_forwarded_and_sighup_gives_129, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    /* Rank 0 records SIGUSR1 and keeps running; SIGHUP then stops the job. */
    e2e_spec(&e, "version: 1\n"
                 "name: forward\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: 'trap \"echo $RANK >> %2$s/usr1\" USR1; echo $RANK >> %2$s/started; "
                 "while :; do sleep 0.05; done'\n"
                 "on_failure: {grace: 5s}\n");
    int status = e2e_sh(&e, 90,
                        "\"$XMPRUN\" --report \"$REPORT\" \"$SPEC\" & pid=$!; "
                        "i=0; while [ \"$(wc -l < \"$DIR/started\" 2>/dev/null)\" != 2 ] && "
                        "[ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; kill -USR1 $pid; "
                        "i=0; while [ \"$(wc -l < \"$DIR/usr1\" 2>/dev/null)\" != 2 ] && "
                        "[ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; kill -HUP $pid; "
                        "wait $pid");
    cr_assert_eq(status, 129, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    char *got = xt_read_file(e2e_path(&e, "usr1"));
    cr_assert_not_null(got, "SIGUSR1 did not reach the workers");
    cr_assert(strstr(got, "0\n") != NULL && strstr(got, "1\n") != NULL, "%s", got);
    free(got);
    cr_assert_str_eq(e2e_str(json_object_get(e.rep, "root_cause"), "message"),
                     "xmprun received SIGHUP and stopped the job");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(signals, as_pid_1_it_reaps_and_supervises, .timeout = 120)
{
    struct e2e e;
    struct xt_result probe;
    char *argv[] = {"/bin/sh", "-c", "unshare -fp --mount-proc true", NULL};

    if (geteuid() != 0 || xt_run(&probe, argv, NULL, NULL, 30) < 0 || probe.status != 0)
        cr_skip_test("needs root and unshare -p");
    xt_result_free(&probe);
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: init\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: 'if [ \"$RANK\" = 1 ]; then exit 6; fi; "
                 "exec %1$s setsid-orphan %2$s/orphan.pid wait'\n"
                 "on_failure: {grace: 1s}\n");
    int status =
        e2e_sh(&e, 90, "exec unshare -fp --mount-proc \"$XMPRUN\" --report \"$REPORT\" \"$SPEC\"");
    cr_assert_eq(status, 6, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_eq(strncmp(e2e_str(json_object_get(e.rep, "job"), "id"), "1-", 2), 0,
                 "xmprun was not PID 1: %s", e2e_str(json_object_get(e.rep, "job"), "id"));
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 0), "state"), "stopped_by_xmprun");
    /* The namespace is gone with its init, and so is everything in it; the pids in the report
     * are the namespace's, so only the cgroups are checked here. */
    e2e_assert_no_cgroups(1);
    e2e_fini(&e);
}

Test(signals, sigterm_is_not_answered_with_a_restart, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: noretry\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', pidfile, '%2$s/started', --, sleep, '60']\n"
                 "on_failure: {restarts: 3, grace: 5s}\n");
    int status = e2e_sh(&e, 90,
                        "\"$XMPRUN\" --report \"$REPORT\" \"$SPEC\" & pid=$!; "
                        "i=0; while [ ! -s \"$DIR/started\" ] && [ $i -lt 200 ]; do "
                        "sleep 0.05; i=$((i+1)); done; kill -TERM $pid; wait $pid");
    cr_assert_eq(status, 143, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_eq(json_integer_value(json_object_get(e.rep, "restarts")), 0);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "interrupted");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}
