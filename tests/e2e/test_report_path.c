/* End to end: no report is lost to another run of the same job. Two live runs whose default
 * report path is the same (quick mode twice in one directory, a sweep, an array job) each keep
 * their report: the second takes a path with its job id, says so, and its stacks follow it; a run
 * that died (its lock file left behind) blocks nothing; a path the user gave is kept, with a
 * warning that the run that ends last replaces the other's report. */
#include "e2e/e2e.h"

/* The text of line "key=" in out (up to the end of its line), or "". */
static const char *
value_of(const char *out, const char *key, char *buf, size_t size)
{
    const char *p = strstr(out, key);
    size_t n = 0;

    buf[0] = '\0';
    if (p == NULL)
        return buf;
    p += strlen(key);
    while (p[n] != '\0' && p[n] != '\n' && n + 1 < size)
        n++;
    snprintf(buf, size, "%.*s", (int)n, p);
    return buf;
}

static char *
read_in(const struct e2e *e, const char *name)
{
    char *path = e2e_path(e, name), *text = xt_read_file(path);
    cr_assert_not_null(text, "no %s", path);
    free(path);
    return text;
}

static const char *
outcome_of(const char *path)
{
    static char outcome[32];
    json_error_t jerr;
    char msg[4096];
    json_t *rep = json_load_file(path, 0, &jerr);

    cr_assert_not_null(rep, "no report at %s (%s)", path, jerr.text);
    cr_assert_eq(xt_validate_json("report.schema.json", path, msg, sizeof(msg)), 0, "%s: %s", path,
                 msg);
    snprintf(outcome, sizeof(outcome), "%s", e2e_str(rep, "outcome"));
    json_decref(rep);
    return outcome;
}

Test(report_path, a_second_live_run_of_one_job_keeps_its_own_report, .timeout = 120)
{
    struct e2e e;
    char b_path[1024], line[1024], *path;

    e2e_init(&e);
    /* Run a (job "sh") holds sh.report.json while run b, same job, same directory, times out. */
    cr_assert_eq(e2e_sh(&e, 90,
                        "\"$XMPRUN\" -n 1 -- sh -c 'touch started; sleep 3' 2>a.err & a=$!\n"
                        "i=0; while [ ! -e started ] && [ $i -lt 400 ]; do sleep 0.05; "
                        "i=$((i + 1)); done\n"
                        "\"$XMPRUN\" -q --set timeout=1s -n 1 -- sh -c 'exec sleep 30' 2>b.err\n"
                        "echo b=$?\nwait $a; echo a=$?\n"),
                 0, "%s", e.r.err);
    cr_assert_not_null(strstr(e.r.out, "b=124\n"), "%s", e.r.out);
    cr_assert_not_null(strstr(e.r.out, "a=0\n"), "%s", e.r.out);
    char *b_err = read_in(&e, "b.err");
    /* b says where its report goes (under -q too): sh.<job id>.report.json. */
    cr_assert_not_null(strstr(b_err, "xmprun: another run of job sh (xmprun pid "), "%s", b_err);
    value_of(b_err, "is writing sh.report.json: this run's report goes to ", b_path,
             sizeof(b_path));
    cr_assert(strncmp(b_path, "sh.", 3) == 0 && strlen(b_path) > 15 &&
                  strcmp(b_path + strlen(b_path) - 12, ".report.json") == 0,
              "%s", b_err);
    cr_assert_str_eq(value_of(b_err, "xmprun: report: ", line, sizeof(line)), b_path, "%s", b_err);
    /* Both reports are there, each its own run's; b's stacks are beside b's report. */
    path = e2e_path(&e, b_path);
    cr_assert_str_eq(outcome_of(path), "timeout");
    free(path);
    path = e2e_path(&e, "sh.report.json");
    cr_assert_str_eq(outcome_of(path), "succeeded");
    free(path);
    snprintf(line, sizeof(line), "%.*s.stacks/worker-0.txt", (int)strlen(b_path) - 5, b_path);
    path = e2e_path(&e, line);
    cr_assert_eq(access(path, F_OK), 0, "no %s", path);
    free(path);
    path = e2e_path(&e, "sh.report.stacks");
    cr_assert_neq(access(path, F_OK), 0, "b's stacks went to %s", path);
    free(path);
    /* Nothing of the lock is left. */
    path = e2e_path(&e, ".sh.report.json.lock");
    cr_assert_neq(access(path, F_OK), 0, "%s is left", path);
    free(path);
    free(b_err);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(report_path, a_dead_runs_lock_file_blocks_nothing, .timeout = 60)
{
    struct e2e e;

    e2e_init(&e);
    /* What an xmprun killed with SIGKILL leaves: the lock file, its pid in it, no lock. */
    free(xt_write_file(e.dir, ".sh.report.json.lock", "1\n"));
    cr_assert_eq(e2e_sh(&e, 60, "\"$XMPRUN\" -n 1 -- sh -c 'exit 0'"), 0, "%s", e.r.err);
    cr_assert_null(strstr(e.r.err, "another run"), "%s", e.r.err);
    cr_assert_not_null(strstr(e.r.err, "xmprun: report: sh.report.json\n"), "%s", e.r.err);
    char *path = e2e_path(&e, "sh.report.json");
    cr_assert_str_eq(outcome_of(path), "succeeded");
    free(path);
    path = e2e_path(&e, ".sh.report.json.lock");
    cr_assert_neq(access(path, F_OK), 0, "%s is left", path);
    free(path);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(report_path, a_given_path_is_kept_and_a_shared_one_said, .timeout = 120)
{
    struct e2e e;

    e2e_init(&e);
    cr_assert_eq(
        e2e_sh(&e, 90,
               "\"$XMPRUN\" --report same.report.json -n 1 -- sh -c 'touch started; sleep 2' "
               "2>a.err & a=$!\n"
               "i=0; while [ ! -e started ] && [ $i -lt 400 ]; do sleep 0.05; "
               "i=$((i + 1)); done\n"
               "\"$XMPRUN\" -q --report same.report.json -n 1 -- sh -c 'exit 6' 2>b.err\n"
               "echo b=$?\nwait $a; echo a=$?\n"),
        0, "%s", e.r.err);
    cr_assert_not_null(strstr(e.r.out, "b=6\na=0\n"), "%s", e.r.out);
    char *b_err = read_in(&e, "b.err");
    cr_assert_not_null(strstr(b_err, "xmprun: warning: another run (xmprun pid "), "%s", b_err);
    cr_assert_not_null(strstr(b_err,
                              "is writing its report to same.report.json too: the run that ends "
                              "last replaces the other's report"),
                       "%s", b_err);
    cr_assert_not_null(strstr(b_err, "xmprun: report: same.report.json\n"), "%s", b_err);
    free(b_err);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* The report is on disk when xmprun exits, however slow the disk: its fsyncs (on a thread of
 * their own while the cgroups go) are waited for. A slow disk is a preloaded fsync that waits
 * 1 s (helpers/slow_fsync.c); without the wait, xmprun would exit with the report still a
 * temp file. */
Test(report_path, the_report_is_in_place_when_xmprun_exits_on_a_slow_disk, .timeout = 60)
{
    struct e2e e;
    char *path, *log;

    e2e_init(&e);
    cr_assert_eq(e2e_sh(&e, 50,
                        "mkdir r && LD_PRELOAD=\"$XMPRUN_SLOW_FSYNC\" "
                        "SLOW_FSYNC_LOG=\"$DIR/fsync.log\" "
                        "ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0\" "
                        "\"$XMPRUN\" -q --report \"$DIR/r/job.report.json\" -n 2 -- true\n"
                        "echo status=$?; ls -A \"$DIR/r\"\n"),
                 0, "%s", e.r.err);
    cr_assert_not_null(strstr(e.r.out, "status=0\n"), "%s\n%s", e.r.out, e.r.err);
    /* The slow disk was in effect: the report and its directory were fsynced through it. */
    log = read_in(&e, "fsync.log");
    cr_assert_str_eq(log, "fsync\nfsync\n", "%s", log);
    free(log);
    /* The report, whole, and nothing else: no temp file left beside it. */
    cr_assert_str_eq(strstr(e.r.out, "\n") + 1, "job.report.json\n", "%s", e.r.out);
    path = e2e_path(&e, "r/job.report.json");
    cr_assert_str_eq(outcome_of(path), "succeeded");
    free(path);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}
