/* End to end: the first failure as a newcomer meets it. Every rank failing the same way (a typo,
 * a missing file) is reported as it happened, each worker with its own status, and the stacks
 * (on_failure.stacks) are taken only where they say more than the worker's own words. */
#include "e2e/e2e.h"

#include <sys/stat.h>

/* Six ranks that all exit 3 at once, three times: a rank that ended of itself (a zombie when the
 * first one's end stops the job, or already in its exit) is `exited` with its 3, never
 * `stopped_by_xmprun` with it. The ones the stop reached died of its SIGTERM. */
static void
all_ranks_fail_alike(const char *stacks)
{
    char *text = NULL;

    cr_assert_gt(asprintf(&text,
                          "version: 1\n"
                          "name: typo\n"
                          "workers: 6\n"
                          "devices: {kind: cpu}\n"
                          "command: [sh, -c, 'exit 3']\n"
                          "on_failure: {stacks: %s}\n",
                          stacks),
                 0);
    for (int run = 0; run < 3; run++) {
        struct e2e e;
        e2e_init(&e);
        e2e_set_spec(&e, strdup(text));
        cr_assert_eq(e2e_run(&e, 60, NULL), 3, "stderr:\n%s", e.r.err);
        e2e_load_report(&e);
        for (size_t i = 0; i < 6; i++) {
            json_t *w = e2e_worker(&e, i);
            const char *state = e2e_str(w, "state");
            json_int_t code = json_integer_value(json_object_get(w, "exit_code"));
            if (strcmp(state, "exited") == 0) {
                cr_assert_eq(code, 3);
                /* A process that has ended has no stack to take. */
                cr_assert_null(json_object_get(w, "stacks"), "worker %zu exited but has stacks", i);
            } else {
                cr_assert_str_eq(state, "stopped_by_xmprun", "worker %zu", i);
                cr_assert_str_eq(e2e_str(w, "signal"), "SIGTERM",
                                 "worker %zu was stopped but exited %d of itself:\n%s", i,
                                 (int)code, e.r.err);
            }
        }
        cr_assert_null(strstr(e.r.err, "ptrace"), "%s", e.r.err);
        e2e_assert_clean(&e);
        e2e_fini(&e);
    }
    free(text);
}

Test(first_failure, every_rank_failing_alike_keeps_its_own_status, .timeout = 120)
{
    all_ranks_fail_alike("auto");
}

Test(first_failure, stacks_always_skips_the_workers_that_ended, .timeout = 120)
{
    all_ranks_fail_alike("always");
}

/* A worker's own failure with its own words (an exit status) stops the job without the peers'
 * stacks by default; `always` takes them; a timeout takes them by default, `never` does not. */
static json_t *
peer_stacks(const char *stacks, const char *command, int want_status)
{
    struct e2e e;
    char *text = NULL;
    json_t *st;

    e2e_init(&e);
    cr_assert_gt(asprintf(&text,
                          "version: 1\n"
                          "name: peers\n"
                          "workers: 2\n"
                          "devices: {kind: cpu}\n"
                          "command: [sh, -c, '%s']\n"
                          "timeout: 2s\n"
                          "on_failure: {stacks: %s, grace: 1s}\n",
                          command, stacks),
                 0);
    e2e_set_spec(&e, text);
    cr_assert_eq(e2e_run(&e, 60, NULL), want_status, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    st = json_incref(json_object_get(e2e_worker(&e, 1), "stacks"));
    e2e_assert_clean(&e);
    e2e_fini(&e);
    return st;
}

#define FAILS_AT_ONCE "if [ \"$RANK\" = 0 ]; then sleep 0.3; exit 3; fi; exec sleep 60"

Test(first_failure, stacks_policy, .timeout = 120)
{
    json_t *st;

    st = peer_stacks("auto", FAILS_AT_ONCE, 3);
    cr_assert_null(st, "auto took the peers' stacks after an exit status");
    st = peer_stacks("always", FAILS_AT_ONCE, 3);
    cr_assert(json_is_object(st), "always took no stacks");
    json_decref(st);
    st = peer_stacks("auto", "exec sleep 60", 124);
    cr_assert(json_is_object(st), "auto took no stacks at the timeout");
    json_decref(st);
    st = peer_stacks("auto",
                     "if [ \"$RANK\" = 0 ]; then sleep 0.3; kill -SEGV $$; fi; exec sleep 60",
                     128 + SIGSEGV);
    cr_assert(json_is_object(st), "auto took no stacks after a death by SIGSEGV");
    json_decref(st);
    st = peer_stacks("never", "exec sleep 60", 124);
    cr_assert_null(st, "never took stacks");
}

/* A stop from outside (SIGTERM to xmprun, as scancel and docker stop send) takes the stacks by
 * default, and not with `never`. */
static json_t *
interrupted_stacks(const char *stacks)
{
    struct e2e e;
    json_t *st;

    char *text = NULL;

    e2e_init(&e);
    cr_assert_gt(asprintf(&text,
                          "version: 1\nname: stopped\nworkers: 2\ndevices: {kind: cpu}\n"
                          "command: [sleep, '60']\non_failure: {stacks: %s, grace: 1s}\n",
                          stacks),
                 0);
    e2e_set_spec(&e, text);
    /* SIGTERM once xmprun has its workers (its children), as a scheduler sends it. */
    cr_assert_eq(e2e_sh(&e, 60,
                        "\"$XMPRUN\" --report \"$REPORT\" \"$SPEC\" 2>err & p=$!\n"
                        "until [ -n \"$(cat /proc/$p/task/$p/children)\" ]; do sleep 0.05; done\n"
                        "sleep 0.5; kill -TERM $p; wait $p"),
                 143, "%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "interrupted");
    st = json_incref(json_object_get(e2e_worker(&e, 0), "stacks"));
    e2e_assert_clean(&e);
    e2e_fini(&e);
    return st;
}

Test(first_failure, stacks_at_an_outside_stop, .timeout = 120)
{
    json_t *st = interrupted_stacks("auto");
    cr_assert(json_is_object(st), "auto took no stacks at an outside stop");
    json_decref(st);
    cr_assert_null(interrupted_stacks("never"), "never took stacks at an outside stop");
}

/* The root cause quotes the worker's own words on why: its traceback's last line, the shell's
 * "not found" (127) or "Permission denied" (126), and exec's word for a directory. */
static void
cause_says(const char *command, int status, const char *want)
{
    struct e2e e;
    char *text = NULL;
    const char *message;

    e2e_init(&e);
    cr_assert_eq(mkdir(e2e_path(&e, "data"), 0755), 0);
    cr_assert_gt(asprintf(&text,
                          "version: 1\nname: words\nworkers: 2\ndevices: {kind: cpu}\n"
                          "command: %s\n",
                          command),
                 0);
    e2e_set_spec(&e, text);
    cr_assert_eq(e2e_run(&e, 60, NULL), status, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    message = e2e_str(json_object_get(e.rep, "root_cause"), "message");
    cr_assert_not_null(strstr(message, want), "root cause: %s", message);
    cr_assert_not_null(strstr(e.r.err, want), "%s", e.r.err);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(first_failure, the_root_cause_quotes_the_worker, .timeout = 120)
{
    cause_says("[/usr/bin/python3, -c, \"cfg = {}\\nprint(cfg['learning_rate'])\"]", 1,
               "exited with status 1: KeyError: 'learning_rate'");
    cause_says("[sh, -c, 'pyhton3 train.py']", 127,
               "exited with status 127: sh: 1: pyhton3: not found");
    cause_says("[sh, -c, ./data]", 126, "exited with status 126: sh: 1: ./data: Permission denied");
    cause_says("[./data]", 126, "could not start: exec `./data`: it is a directory, not a program");
}

/* An NCCL watchdog timeout in every rank that reached the collective, and one rank that never
 * did (it sleeps): that rank is the cause, named with where it was, and the others are victims.
 * The lines are PyTorch 2.5's (tests/fixtures/peer/nccl-timeout-pg.txt). */
Test(first_failure, collective_timeout_names_the_rank_that_fell_behind, .timeout = 120)
{
    struct e2e e;
    json_t *cause;
    const char *message;

    e2e_init(&e);
    free(xt_write_file(
        e.dir, "timeout.sh",
        "echo \"[rank$RANK]:[E1103 07:34:57.460801783 ProcessGroupNCCL.cpp:1834] [PG ID 0 PG GUID "
        "0(default_pg) Rank $RANK] Timeout at NCCL work: 42, last enqueued NCCL work: 42, last "
        "completed NCCL work: 41.\" >&2\n"
        "echo \"[rank$RANK]:[E1103 07:34:57.462234381 ProcessGroupNCCL.cpp:1595] [Rank $RANK] "
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE, "
        "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600087 milliseconds before timing "
        "out.\" >&2\n"
        "exit 1\n"));
    e2e_spec(&e, "version: 1\n"
                 "name: nccl\n"
                 "workers: 3\n"
                 "devices: {kind: cpu}\n"
                 "command: [sh, -c, 'if [ \"$RANK\" = 1 ]; then exec sleep 60; fi; sleep 0.5; "
                 "exec sh %2$s/timeout.sh']\n"
                 "on_failure: {grace: 1s}\n");
    cr_assert_eq(e2e_run(&e, 60, NULL), 1, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cause = json_object_get(e.rep, "root_cause");
    message = e2e_str(cause, "message");
    cr_assert_str_eq(e2e_str(cause, "reason"), "collective_timeout", "%s", message);
    cr_assert_eq(json_integer_value(json_object_get(cause, "rank")), 1, "%s", message);
    cr_assert(strncmp(message,
                      "worker 1 (cpu) fell behind: the other ranks timed out waiting in NCCL "
                      "ALLREDUCE (SeqNum 42, timeout 600000 ms), first worker ",
                      120) == 0,
              "%s", message);
    /* Its stacks were taken (a lost peer is worth them) and say where it was. */
    cr_assert_not_null(strstr(message, ", while it was elsewhere, in `"), "%s", message);
    cr_assert(json_is_object(json_object_get(e2e_worker(&e, 1), "stacks")));
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 1), "state"), "stopped_by_xmprun");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}
