/* End to end: the start: fork client (client/python/xmprun): the job-wide serial lock, a
 * worker's traceback in the report, and what the client refuses, in words that reach the report's
 * root cause (a zygote that never calls spawn(), a second call, nprocs, join=False, CUDA already
 * initialised, a shell between xmprun and the zygote, no xmprun at all). */
#include "e2e/fork.h"

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
zygote_fails_ex(const char *args, int status, const char *reason, const char *message,
                const char *stderr_has, const char *error_file_has)
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
    if (error_file_has != NULL) {
        /* The words came from the zygote's error file, which its report keeps. */
        char *ef = json_dumps(json_object_get(json_object_get(e.rep, "zygote"), "error_file"),
                              JSON_ENCODE_ANY);
        bool kept = ef != NULL && ef[0] == '{' && strstr(ef, error_file_has) != NULL;
        free(ef);
        cr_assert(kept, "the report's zygote.error_file is not the zygote's error file");
    }
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

static void
zygote_fails(const char *args, int status, const char *reason, const char *message,
             const char *stderr_has)
{
    zygote_fails_ex(args, status, reason, message, stderr_has, NULL);
}

Test(fork, a_zygote_that_never_spawns_fails_the_job, .timeout = 120)
{
    /* A zygote that fails on its own (an exception while it loads) gets no advice about spawn():
     * that one is for a zygote that ended well without forking. */
    zygote_fails("nospawn --code 1", 1, "zygote_exited",
                 "the zygote exited with status 1 before it forked the workers; its standard "
                 "error says why",
                 "root cause: the zygote exited with status 1");
}

Test(fork, a_zygote_that_exits_0_without_spawning_fails_the_job, .timeout = 120)
{
    zygote_fails("nospawn --code 0", 1, "zygote_exited",
                 "the zygote exited with status 0 before it forked the workers: in start: fork "
                 "the command must call xmprun.spawn()",
                 "must call xmprun.spawn()");
}

/* A zygote whose preload raises (after `import xmprun`): the client writes the exception to the
 * zygote's error file, and the root cause quotes it; the report's zygote keeps the file. */
Test(fork, a_zygote_whose_preload_raises_is_quoted, .timeout = 120)
{
    zygote_fails_ex("load-fails", 1, "zygote_exited",
                    "the zygote exited with status 1 before it forked the workers: "
                    "FileNotFoundError: checkpoint /ckpt/model.pt not found",
                    "checkpoint /ckpt/model.pt not found", "/ckpt/model.pt not found");
}

/* A zygote that raises before it imports the client: no error file, so the root cause quotes
 * the last line of its traceback, which the report's zygote keeps with the lines before it. */
Test(fork, a_zygote_that_raises_before_the_client_is_quoted_from_its_stderr, .timeout = 120)
{
    zygote_fails("import-fails", 1, "zygote_exited",
                 "the zygote exited with status 1 before it forked the workers: "
                 "ModuleNotFoundError: No module named 'trainer_config'",
                 "No module named 'trainer_config'");
}

/* The three ways a zygote fails before it forks, each in its own words in its report object:
 * the client's error file, or the stderr tail. */
static void
zygote_tail_ends_with(const char *args, const char *last)
{
    struct e2e e;
    need_python();
    e2e_init(&e);
    fork_spec(&e, args, "workers: 2\n");
    cr_assert_eq(e2e_run(&e, 240, NULL), 1, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    json_t *tail = json_object_get(json_object_get(e.rep, "zygote"), "stderr_tail");
    cr_assert(json_array_size(tail) > 0, "no stderr_tail in the report's zygote");
    const char *got = json_string_value(json_array_get(tail, json_array_size(tail) - 1));
    cr_assert_not_null(strstr(got, last), "the zygote's tail ends with: %s", got);
    /* Its stderr still reaches xmprun's, unprefixed, as before. */
    const char *tb = strstr(e.r.err, "Traceback (most recent call last):");
    cr_assert(tb != NULL && (tb == e.r.err || tb[-1] == '\n'), "%s", e.r.err);
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(fork, the_zygotes_stderr_tail_is_in_the_report, .timeout = 120)
{
    zygote_tail_ends_with("import-fails", "ModuleNotFoundError: No module named 'trainer_config'");
    zygote_tail_ends_with("cuda", "CUDA is already initialised in the zygote");
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

/* The serial lock works in exec mode too (xmprun puts the client on every worker's PYTHONPATH),
 * and dies with its holder: worker 0 is SIGKILLed while it holds it, worker 1 then gets it. */
Test(fork, serial_lock_in_exec_mode_is_released_when_its_holder_dies, .timeout = 300)
{
    struct e2e e;
    need_python();
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: serial\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "on_failure: {action: continue}\n"
                 "command:\n"
                 "  - /usr/bin/python3\n"
                 "  - -c\n"
                 "  - |\n"
                 "    import os, signal, time, xmprun\n"
                 "    held = '%2$s/held'\n"
                 "    if os.environ['RANK'] == '0':\n"
                 "        with xmprun.serial():\n"
                 "            open(held, 'w').close()\n"
                 "            os.kill(os.getpid(), signal.SIGKILL)\n"
                 "    while not os.path.exists(held):\n"
                 "        time.sleep(0.05)\n"
                 "    with xmprun.serial():\n"
                 "        open('%2$s/got', 'w').close()\n");
    cr_assert_eq(e2e_run(&e, 240, NULL), 137, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 0), "signal"), "SIGKILL");
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 1), "state"), "exited");
    cr_assert_eq(json_integer_value(json_object_get(e2e_worker(&e, 1), "exit_code")), 0);
    char *got = e2e_path(&e, "got");
    cr_assert_eq(access(got, F_OK), 0, "worker 1 never got the lock");
    free(got);
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

/* An installed tree moved elsewhere (an unpacked tarball, /opt in an image): xmprun finds the
 * client library and the Python package relative to its own binary (PREFIX/bin/xmprun,
 * PREFIX/lib/libxmprun.so, PREFIX/lib/python3/dist-packages/xmprun), not at the prefix it was
 * configured with, so a fork-mode job runs; and a user's own XMPRUN_CLIENT_LIB stands. */
Test(fork, a_relocated_install_finds_its_client, .timeout = 240)
{
    struct e2e e;
    need_python();
    e2e_init(&e);
    char *script = NULL;
    cr_assert(asprintf(&script,
                       "set -e; P=$DIR/opt/xmprun; B=$(dirname \"$XMPRUN\")\n"
                       "mkdir -p $P/bin $P/lib/python3/dist-packages\n"
                       "cp \"$XMPRUN\" $P/bin/xmprun; cp $B/libxmprun.so $P/lib/\n"
                       "cp -r %s/client/python/xmprun $P/lib/python3/dist-packages/\n"
                       "set +e; $P/bin/xmprun --report \"$REPORT\" \"$SPEC\"; rc=$?\n"
                       "XMPRUN_CLIENT_LIB=/custom/libxmprun.so $P/bin/xmprun -q --report "
                       "$DIR/exec.json -- sh -c 'echo lib=$XMPRUN_CLIENT_LIB' || rc=99\n"
                       "exit $rc\n",
                       xt_source_dir()) > 0);
    fork_spec(&e, "nprocs --n 2", "workers: 2\n");
    cr_assert_eq(e2e_sh(&e, 200, script), 0, "stdout:\n%s\nstderr:\n%s", e.r.out, e.r.err);
    cr_assert_not_null(strstr(e.r.out, "[0] lib=/custom/libxmprun.so"), "%s", e.r.out);
    free(script);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "succeeded");
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}
