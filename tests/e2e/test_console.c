/* logs.console and logs.dir on the real binary: where each worker's stdout and stderr lines go
 * in every console mode, and that the per-rank log files get everything whatever the console
 * shows. */
#include "e2e/e2e.h"

static void
run_console(struct e2e *e, const char *mode)
{
    char *text = NULL;

    e2e_init(e);
    cr_assert_eq(asprintf(&text,
                          "version: 1\nname: console\nworkers: 2\ndevices: {kind: cpu}\n"
                          "command: 'echo out $RANK; echo err $RANK >&2'\n"
                          "logs: {console: %s, dir: '%s/logs'}\n",
                          mode, e->dir) > 0,
                 1);
    e2e_set_spec(e, text);
    cr_assert_eq(e2e_run(e, 60, "-q", NULL), 0, "stderr:\n%s", e->r.err);
    e2e_load_report(e);
    for (int r = 0; r < 2; r++) {
        char name[64], want[64];
        snprintf(name, sizeof(name), "logs/rank-%d.out", r);
        snprintf(want, sizeof(want), "out %d\n", r);
        char *path = e2e_path(e, name);
        char *got = xt_read_file(path);
        cr_assert_not_null(got, "no %s", name);
        cr_assert_str_eq(got, want);
        free(got);
        free(path);
    }
}

static void
finish(struct e2e *e)
{
    e2e_assert_clean(e);
    e2e_fini(e);
}

Test(console, prefix_marks_each_line_with_its_rank, .timeout = 60)
{
    struct e2e e;
    run_console(&e, "prefix");
    cr_assert_not_null(strstr(e.r.out, "[0] out 0\n"), "%s", e.r.out);
    cr_assert_not_null(strstr(e.r.out, "[1] out 1\n"), "%s", e.r.out);
    cr_assert_not_null(strstr(e.r.err, "[1] err 1\n"), "%s", e.r.err);
    cr_assert_null(strstr(e.r.out, "err"), "stderr lines went to stdout: %s", e.r.out);
    finish(&e);
}

Test(console, raw_passes_lines_through_unchanged, .timeout = 60)
{
    struct e2e e;
    run_console(&e, "raw");
    cr_assert_not_null(strstr(e.r.out, "out 0\n"), "%s", e.r.out);
    cr_assert_not_null(strstr(e.r.out, "out 1\n"), "%s", e.r.out);
    cr_assert_null(strstr(e.r.out, "[0]"), "%s", e.r.out);
    cr_assert_not_null(strstr(e.r.err, "err 0\n"), "%s", e.r.err);
    finish(&e);
}

Test(console, rank0_shows_only_rank_0, .timeout = 60)
{
    struct e2e e;
    run_console(&e, "rank0");
    cr_assert_not_null(strstr(e.r.out, "out 0\n"), "%s", e.r.out);
    cr_assert_null(strstr(e.r.out, "out 1"), "%s", e.r.out);
    cr_assert_null(strstr(e.r.err, "err 1"), "%s", e.r.err);
    finish(&e);
}

Test(console, none_shows_nothing_but_logs_keep_everything, .timeout = 60)
{
    struct e2e e;
    run_console(&e, "none");
    cr_assert_str_eq(e.r.out, "");
    cr_assert_null(strstr(e.r.err, "err "), "%s", e.r.err);
    finish(&e);
}
