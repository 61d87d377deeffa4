/* End to end: `xmprun report FILE.json` prints a saved report's summary table and root cause
 * exactly as the live run printed them (the same code draws both), and exits with the job's
 * status; a file that is not an xmprun report is refused with exit 2. */
#include "e2e/fork.h"

/* The summary lines of a run's stderr (from "xmprun: job " on, up to the run's last line that
 * names its report file), with every duration ("0.4s") replaced by "T": the report keeps times to
 * the millisecond, a live run to the nanosecond, so a rounding may differ; everything else must
 * match byte for byte. */
static char *
summary_of(const char *text)
{
    const char *start = strstr(text, "xmprun: job ");
    const char *end = start != NULL ? strstr(start, "xmprun: report: ") : NULL;
    char *out = calloc(1, strlen(text) + 1), *o = out;

    cr_assert_not_null(start, "no summary in:\n%s", text);
    if (end == NULL)
        end = start + strlen(start);
    for (const char *p = start; p < end;) {
        const char *q = p;
        while (*q >= '0' && *q <= '9')
            q++;
        if (q > p && *q == '.' && q[1] >= '0' && q[1] <= '9' && q[2] == 's' &&
            (p == start || p[-1] == ' ')) {
            *o++ = 'T';
            p = q + 3;
        } else {
            *o++ = *p++;
        }
    }
    return out;
}

Test(report_cmd, prints_the_summary_of_a_saved_report_like_the_live_run, .timeout = 120)
{
    struct e2e e;
    char *argv[] = {(char *)xt_bin(), "report", NULL, NULL};
    struct xt_result r = {0};

    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: reported\n"
                 "workers: 3\n"
                 "devices: {kind: cpu}\n"
                 "resources: {worker: {memory: 64Mi}}\n"
                 "isolation: {cgroups: optional}\n"
                 "command: '[ $RANK = 2 ] && { sleep 0.3; exit 7; }; exec %1$s sleep 60'\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 7, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    argv[2] = e.report;
    cr_assert_eq(xt_run(&r, argv, NULL, e.dir, 30), 0);
    cr_assert_eq(r.status, 7, "xmprun report exits with the job's status; stderr:\n%s", r.err);
    char *live = summary_of(e.r.err), *saved = summary_of(r.out);
    cr_assert_str_eq(saved, live, "xmprun report printed:\n%s\nthe live run:\n%s", r.out, e.r.err);
    cr_assert_not_null(strstr(r.out, "root cause: worker 2 (cpu) exited with status 7"));
    cr_assert_not_null(strstr(r.out, "stopped_by_xmprun"));
    free(live);
    free(saved);
    xt_result_free(&r);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(report_cmd, a_setup_failure_and_a_succeeded_job_read_back, .timeout = 120)
{
    struct e2e e;
    char *argv[] = {(char *)xt_bin(), "report", NULL, NULL};
    struct xt_result r = {0};

    e2e_init(&e);
    /* A program that cannot be planned on this host (GPU 7 of a CPU-only host): setup_failed. */
    e2e_spec(&e, "version: 1\n"
                 "name: nosuchgpu\n"
                 "devices: {kind: cuda, ids: [7]}\n"
                 "command: [/bin/true]\n");
    cr_assert_eq(e2e_run(&e, 60, NULL), 125, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    argv[2] = e.report;
    cr_assert_eq(xt_run(&r, argv, NULL, e.dir, 30), 0);
    cr_assert_eq(r.status, 125, "stdout:\n%s\nstderr:\n%s", r.out, r.err);
    cr_assert_not_null(strstr(r.out, "setup_failed"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "xmprun: root cause: "), "%s", r.out);

    e2e_spec(&e, "version: 1\nname: fine\nworkers: 2\ndevices: {kind: cpu}\n"
                 "isolation: {cgroups: optional}\ncommand: [/bin/true]\n");
    cr_assert_eq(e2e_run(&e, 60, NULL), 0, "stderr:\n%s", e.r.err);
    xt_result_free(&r);
    cr_assert_eq(xt_run(&r, argv, NULL, e.dir, 30), 0);
    cr_assert_eq(r.status, 0, "stdout:\n%s\nstderr:\n%s", r.out, r.err);
    char *live = summary_of(e.r.err), *saved = summary_of(r.out);
    cr_assert_str_eq(saved, live);
    cr_assert_null(strstr(r.out, "root cause"));
    free(live);
    free(saved);
    xt_result_free(&r);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* start: fork: the table's first row is the zygote's (its peak is the job's shared memory), in
 * the saved report as in the live run. */
Test(report_cmd, a_fork_mode_report_keeps_the_zygote_row, .timeout = 120)
{
    struct e2e e;
    char *argv[] = {(char *)xt_bin(), "report", NULL, NULL};
    struct xt_result r = {0};

    need_python();
    e2e_init(&e);
    fork_spec(&e, "share --preload 1", "workers: 2\n");
    cr_assert_eq(e2e_run(&e, 90, NULL), 0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    /* The row's time: from when the zygote started to when it ended, both in the report. */
    json_t *z = json_object_get(e.rep, "zygote");
    cr_assert_neq(e2e_str(z, "started_at")[0], '\0', "no zygote.started_at");
    cr_assert_geq(strcmp(e2e_str(z, "ended_at"), e2e_str(z, "started_at")), 0);
    argv[2] = e.report;
    cr_assert_eq(xt_run(&r, argv, NULL, e.dir, 30), 0);
    cr_assert_eq(r.status, 0, "stdout:\n%s\nstderr:\n%s", r.out, r.err);
    char *live = summary_of(e.r.err), *saved = summary_of(r.out);
    cr_assert_not_null(strstr(live, "\n  zygote (shared)      exited "), "%s", live);
    cr_assert_str_eq(saved, live, "xmprun report printed:\n%s\nthe live run:\n%s", r.out, e.r.err);
    free(live);
    free(saved);
    xt_result_free(&r);
    assert_zygote_gone(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(report_cmd, refuses_what_is_not_a_report)
{
    struct e2e e;
    struct xt_result r = {0};

    e2e_init(&e);
    char *json = xt_write_file(e.dir, "other.json", "{\"schema\": \"something/v2\"}\n");
    char *text = xt_write_file(e.dir, "job.yaml", "version: 1\n");
    char *missing = e2e_path(&e, "missing.json");
    char *cases[][2] = {
        {json, "not an xmprun report"}, {text, "job.yaml:1:"}, {missing, "missing.json"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *argv[] = {(char *)xt_bin(), "report", cases[i][0], NULL};
        cr_assert_eq(xt_run(&r, argv, NULL, e.dir, 30), 0);
        cr_assert_eq(r.status, 2, "%s: status %d", cases[i][0], r.status);
        cr_assert_not_null(strstr(r.err, cases[i][1]), "%s: stderr:\n%s", cases[i][0], r.err);
        cr_assert_str_eq(r.out, "");
        xt_result_free(&r);
    }
    char *none[] = {(char *)xt_bin(), "report", NULL};
    cr_assert_eq(xt_run(&r, none, NULL, e.dir, 30), 0);
    cr_assert_eq(r.status, 2);
    xt_result_free(&r);
    free(json);
    free(text);
    free(missing);
    e2e_fini(&e);
}
