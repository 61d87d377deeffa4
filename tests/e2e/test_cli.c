/* The command line on the real binary: help and version, usage errors (exit 2), validate's
 * diagnostics, --set errors, `plan` on the fixture hosts (JSON on stdout, 125 when the spec
 * cannot be planned there) and the spec-less form's exit status. */
#include "e2e/e2e.h"

/* Runs xmprun with argv (NULL-terminated, without the binary) and extra environment. */
static int
cli(struct xt_result *r, char *const envp[], ...)
{
    char *argv[32];
    int n = 0;
    va_list ap;
    char *a;

    argv[n++] = (char *)xt_bin();
    va_start(ap, envp);
    while ((a = va_arg(ap, char *)) != NULL && n < 31)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    cr_assert_eq(xt_run(r, argv, envp, "/tmp", 60), 0);
    return r->status;
}

static char *
host_root(const char *fixture)
{
    char *env = NULL;
    cr_assert_eq(asprintf(&env, "XMPRUN_HOST_ROOT=%s/hosts/%s", xt_fixtures(), fixture) > 0, 1);
    return env;
}

Test(cli, version_and_help)
{
    struct xt_result r;
    cr_assert_eq(cli(&r, NULL, "--version", NULL), 0);
    cr_assert_str_eq(r.out, "xmprun " XMP_VERSION "\n");
    xt_result_free(&r);
    cr_assert_eq(cli(&r, NULL, "--help", NULL), 0);
    cr_assert_not_null(strstr(r.out, "usage: xmprun [OPTIONS] JOB.yaml"), "%s", r.out);
    xt_result_free(&r);
}

Test(cli, usage_errors_exit_2)
{
    struct xt_result r;
    cr_assert_eq(cli(&r, NULL, NULL), 2);
    cr_assert_not_null(strstr(r.err, "xmprun: no job given"), "%s", r.err);
    xt_result_free(&r);
    cr_assert_eq(cli(&r, NULL, "--bogus", "job.yaml", NULL), 2);
    cr_assert_not_null(strstr(r.err, "xmprun: unknown option --bogus"), "%s", r.err);
    xt_result_free(&r);
    cr_assert_eq(cli(&r, NULL, "-n", "0", "--", "true", NULL), 2);
    cr_assert_not_null(strstr(r.err, "-n/--workers: \"0\" is not a worker count"), "%s", r.err);
    xt_result_free(&r);
    cr_assert_eq(cli(&r, NULL, "-n", "2", "--", NULL), 2);
    cr_assert_not_null(strstr(r.err, "nothing after `--`"), "%s", r.err);
    xt_result_free(&r);
    cr_assert_eq(cli(&r, NULL, "--set", "workers", "-n", "2", "--", "true", NULL), 2);
    cr_assert_not_null(strstr(r.err, "--set \"workers\": expected KEY=VALUE"), "%s", r.err);
    xt_result_free(&r);
    cr_assert_eq(cli(&r, NULL, "validate", NULL), 2);
    xt_result_free(&r);
    cr_assert_eq(cli(&r, NULL, "gc", "extra", NULL), 2);
    xt_result_free(&r);
    cr_assert_eq(cli(&r, NULL, "/nonexistent/job.yaml", NULL), 2);
    cr_assert_not_null(strstr(r.err, "/nonexistent/job.yaml"), "%s", r.err);
    xt_result_free(&r);
}

Test(cli, validate_reports_every_error_with_its_position)
{
    struct xt_result r;
    char *dir = xt_tmpdir();
    char *good = xt_write_file(dir, "good.yaml", "version: 1\nname: ok\ncommand: [true]\n");
    char *bad = xt_write_file(dir, "bad.yaml",
                              "version: 1\nname: bad\ncommand: [true]\nresources:\n  worker:\n"
                              "    memory: 8GB\n    memroy: 1Gi\n");
    char want[512];

    cr_assert_eq(cli(&r, NULL, "validate", good, NULL), 0);
    cr_assert_not_null(strstr(r.out, "valid (ok)"), "%s", r.out);
    xt_result_free(&r);
    cr_assert_eq(cli(&r, NULL, "validate", good, bad, NULL), 2);
    snprintf(want, sizeof(want),
             "%s:6:13: resources.worker.memory: \"8GB\" is not a memory quantity (use 8Gi or "
             "8G)\n%s:7:5: resources.worker.memroy: unknown key (did you mean \"memory\"?)\n",
             bad, bad);
    cr_assert_str_eq(r.err, want);
    xt_result_free(&r);
    cr_assert_eq(cli(&r, NULL, "validate", "--set", "resources.worker.memory=4GB", good, NULL), 2);
    cr_assert_str_eq(r.err, "--set:1:25: resources.worker.memory: \"4GB\" is not a memory quantity "
                            "(use 4Gi or 4G)\n");
    xt_result_free(&r);
    xt_tmpdir_remove(dir);
    free(dir);
    free(good);
    free(bad);
}

static json_t *
plan_json(const struct xt_result *r)
{
    json_error_t jerr;
    json_t *j = json_loads(r->out, 0, &jerr);
    cr_assert_not_null(j, "plan output is not JSON (%s):\n%s", jerr.text, r->out);
    return j;
}

static const char *
worker_env(json_t *plan, size_t i, const char *name)
{
    json_t *w = json_array_get(json_object_get(plan, "workers"), i);
    cr_assert_not_null(w);
    return json_string_value(json_object_get(json_object_get(w, "env"), name));
}

Test(cli, plan_pins_one_gpu_per_worker_on_the_8_gpu_fixture)
{
    struct xt_result r;
    char *root = host_root("gpu8-2numa");
    char *envp[] = {root, NULL};

    cr_assert_eq(cli(&r, envp, "plan", "--", "python3", "train.py", NULL), 0, "%s", r.err);
    json_t *plan = plan_json(&r);
    json_t *job = json_object_get(plan, "job");
    cr_assert_str_eq(json_string_value(json_object_get(job, "kind")), "cuda");
    cr_assert_eq(json_integer_value(json_object_get(job, "world_size")), 8);
    cr_assert_eq(json_array_size(json_object_get(plan, "workers")), 8);
    for (size_t i = 0; i < 8; i++) {
        char want[8];
        snprintf(want, sizeof(want), "%zu", i);
        cr_assert_str_eq(worker_env(plan, i, "CUDA_VISIBLE_DEVICES"), want);
        cr_assert_str_eq(worker_env(plan, i, "LOCAL_RANK"), want);
        cr_assert_str_eq(worker_env(plan, i, "CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
    }
    /* GPUs 0-3 sit on NUMA node 0 (CPUs 0-15), 4-7 on node 1 (16-31): 4 CPUs each. */
    json_t *w5 = json_array_get(json_object_get(plan, "workers"), 5);
    cr_assert_str_eq(json_string_value(json_object_get(w5, "cpuset")), "20-23");
    json_decref(plan);
    xt_result_free(&r);
    free(root);
}

Test(cli, plan_follows_an_inherited_cuda_visible_devices)
{
    struct xt_result r;
    char *root = host_root("gpu8-2numa");
    char *envp[] = {root, "CUDA_VISIBLE_DEVICES=3,5", NULL};

    cr_assert_eq(cli(&r, envp, "plan", "--", "python3", "train.py", NULL), 0, "%s", r.err);
    json_t *plan = plan_json(&r);
    cr_assert_eq(json_array_size(json_object_get(plan, "workers")), 2);
    cr_assert_str_eq(worker_env(plan, 0, "CUDA_VISIBLE_DEVICES"), "3");
    cr_assert_str_eq(worker_env(plan, 1, "CUDA_VISIBLE_DEVICES"), "5");
    json_decref(plan);
    xt_result_free(&r);
    free(root);
}

Test(cli, plan_that_does_not_fit_the_host_exits_125)
{
    struct xt_result r;
    char *root = host_root("gpu8-2numa");
    char *envp[] = {root, NULL};

    cr_assert_eq(cli(&r, envp, "plan", "--set", "devices.ids=[9]", "--", "python3", NULL), 125);
    /* The message names the missing id and what is visible (any error would contain a "9"). */
    cr_assert_not_null(strstr(r.err, "xmprun: <command line>: devices.ids: no cuda device 9; "
                                     "visible: 0 (0 GPU-"),
                       "%s", r.err);
    cr_assert_str_eq(r.out, "");
    xt_result_free(&r);
    free(root);
}

/* Quick mode asking for more workers than GPUs: what is missing, in good grammar, and the two
 * ways to run anyway (fewer workers, or CPU workers that share no GPU). */
Test(cli, more_workers_than_gpus_names_the_ways_out)
{
    static const struct {
        const char *visible, *n, *want;
    } cases[] = {
        {"CUDA_VISIBLE_DEVICES=3", "8",
         "workers 8 x devices.per_worker 1 need 8 cuda devices, but only 1 is visible (narrowed "
         "by CUDA_VISIBLE_DEVICES=3): run at most 1 worker (-n 1), or run the workers on CPUs "
         "with --set devices.kind=cpu (they then get no cuda device)"},
        {"CUDA_VISIBLE_DEVICES=3,5", "3",
         "need 3 cuda devices, but only 2 are visible (narrowed by CUDA_VISIBLE_DEVICES=3,5): "
         "run at most 2 workers (-n 2), or"},
    };
    char *root = host_root("gpu8-2numa");

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct xt_result r;
        char *envp[] = {root, (char *)cases[i].visible, NULL};
        cr_assert_eq(cli(&r, envp, "plan", "-n", cases[i].n, "--", "python3", NULL), 125, "%s",
                     r.err);
        cr_expect_not_null(strstr(r.err, cases[i].want), "%s", r.err);
        xt_result_free(&r);
    }
    free(root);
}

Test(cli, spec_less_run_exits_with_the_workers_status, .timeout = 60)
{
    struct xt_result r;
    char *dir = xt_tmpdir();
    char report[4096];

    snprintf(report, sizeof(report), "%s/false.report.json", dir);
    /* Rank 0 fails, rank 1 would sleep: kill-all stops it and rank 0's status is xmprun's. */
    cr_assert_eq(cli(&r, NULL, "-q", "--report", report, "-n", "2", "--", "sh", "-c",
                     "[ $RANK = 0 ] && exit 3; exec sleep 30", NULL),
                 3, "%s", r.err);
    char msg[4096];
    cr_assert_eq(xt_validate_json("report.schema.json", report, msg, sizeof(msg)), 0, "%s", msg);
    xt_result_free(&r);
    xt_tmpdir_remove(dir);
    free(dir);
}

/* A mistyped subcommand is not taken for a spec file, and a spec-less command whose options
 * xmprun took for its own (no `--`) is told where the `--` goes. A spec file that exists is never
 * taken for a typo, nor an unknown option before one for the command's. */
Test(cli, hints_for_a_mistyped_command_and_a_missing_dashdash)
{
    static const struct {
        const char *typo, *want;
    } typos[] = {
        {"vaildate",
         "\"vaildate\" is neither a command nor a spec file (did you mean `validate`?)"},
        {"paln", "(did you mean `plan`?)"},
        {"reprot", "(did you mean `report`?)"},
        {"stakcs", "(did you mean `stacks`?)"},
        {"gcc", "(did you mean `gc`?)"},
    };
    struct xt_result r;
    char *dir = xt_tmpdir();

    for (size_t i = 0; i < sizeof(typos) / sizeof(typos[0]); i++) {
        cr_assert_eq(cli(&r, NULL, typos[i].typo, "x.yaml", NULL), 2, "%s", r.err);
        cr_expect_not_null(strstr(r.err, typos[i].want), "%s: %s", typos[i].typo, r.err);
        xt_result_free(&r);
    }
    cr_assert_eq(cli(&r, NULL, "-n", "2", "sh", "-c", "exit 3", NULL), 2);
    cr_expect_not_null(strstr(r.err, "xmprun: unknown option -c; to run `sh` with options of its "
                                     "own, put `--` before it: xmprun -n 2 -- sh ...\n"),
                       "%s", r.err);
    xt_result_free(&r);
    /* A spec named like a subcommand's typo is the spec. */
    char *spec = xt_write_file(dir, "gcc", "version: 1\nname: [bad\n");
    cr_assert_eq(cli(&r, NULL, spec, NULL), 2);
    cr_expect_null(strstr(r.err, "did you mean"), "%s", r.err);
    xt_result_free(&r);
    cr_assert_eq(cli(&r, NULL, "--bogus", "job.yaml", NULL), 2);
    cr_expect_null(strstr(r.err, "put `--`"), "%s", r.err);
    xt_result_free(&r);
    free(spec);
    xt_tmpdir_remove(dir);
    free(dir);
}

/* The end of every run names the report file; -q keeps only a failed job's root cause and that
 * line, and a job that succeeded under -q says nothing at all. */
Test(cli, the_end_of_a_run_names_its_report_and_q_keeps_a_failure, .timeout = 60)
{
    struct xt_result r;
    char *dir = xt_tmpdir();
    char report[4096], want[4200];

    snprintf(report, sizeof(report), "%s/end.report.json", dir);
    cr_assert_eq(cli(&r, NULL, "-q", "--report", report, "-n", "2", "--", "sh", "-c",
                     "[ $RANK = 0 ] && exit 3; exec sleep 30", NULL),
                 3, "%s", r.err);
    snprintf(want, sizeof(want),
             "xmprun: root cause: worker 0 (cpu) exited with status 3\nxmprun: report: %s\n",
             report);
    cr_assert_str_eq(r.err, want);
    xt_result_free(&r);
    cr_assert_eq(cli(&r, NULL, "-q", "--report", report, "-n", "2", "--", "true", NULL), 0);
    cr_assert_str_eq(r.err, "", "a -q run that succeeded said:\n%s", r.err);
    xt_result_free(&r);
    /* Without -q, success or failure: the summary, then the report's path, last. */
    snprintf(want, sizeof(want), "\nxmprun: report: %s\n", report);
    for (int fail = 0; fail < 2; fail++) {
        cr_assert_eq(cli(&r, NULL, "--report", report, "-n", "1", "--", "sh", "-c",
                         fail ? "exit 4" : "true", NULL),
                     fail ? 4 : 0, "%s", r.err);
        size_t n = strlen(r.err), k = strlen(want);
        cr_assert(n >= k && strcmp(r.err + n - k, want) == 0, "stderr:\n%s", r.err);
        xt_result_free(&r);
    }
    xt_tmpdir_remove(dir);
    free(dir);
}
