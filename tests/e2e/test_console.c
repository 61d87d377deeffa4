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

/* Checks the console text of `probe flood n` run by `workers` workers in prefix mode: every line
 * is whole and well formed ("[r] line i of n: ..." on stdout, "[r] err i" on stderr), none is
 * lost or duplicated, and each stream's lines keep their order. */
static void
assert_flood_intact(const char *text, int workers, long n, bool with_stderr)
{
    long next_out[64] = {0}, next_err[64] = {0};
    char want[256];
    const char *p = text;
    long lines = 0;

    cr_assert_not_null(text);
    cr_assert_leq(workers, 64);
    while (*p != '\0') {
        const char *nl = strchr(p, '\n');
        int rank, used = 0;
        long i;

        if (nl == NULL)
            cr_assert_fail("the last line is cut: \"%.200s\"", p);
        size_t len = (size_t)(nl - p);
        char line[256];
        /* sscanf on a copy: on the whole text it would take strlen() of the rest each time. */
        snprintf(line, sizeof(line), "%.*s", (int)(len < 255 ? len : 255), p);
        if (sscanf(line, "[%d] line %ld of%n", &rank, &i, &used) == 2 && used > 0) {
            if (rank < 0 || rank >= workers)
                cr_assert_fail("bad rank in \"%.*s\"", (int)len, p);
            snprintf(want, sizeof(want),
                     "[%d] line %ld of %ld: the quick brown fox jumps over the lazy dog", rank,
                     next_out[rank], n);
            if (len != strlen(want) || strncmp(p, want, len) != 0)
                cr_assert_fail("line %ld: \"%.*s\", expected \"%s\"", lines, (int)len, p, want);
            next_out[rank]++;
        } else if (sscanf(line, "[%d] err %ld%n", &rank, &i, &used) == 2 && used > 0) {
            if (!with_stderr || rank < 0 || rank >= workers)
                cr_assert_fail("stray line \"%.*s\"", (int)len, p);
            snprintf(want, sizeof(want), "[%d] err %ld", rank, next_err[rank]);
            if (len != strlen(want) || strncmp(p, want, len) != 0)
                cr_assert_fail("line %ld: \"%.*s\", expected \"%s\"", lines, (int)len, p, want);
            next_err[rank] += 10;
        } else {
            cr_assert_fail("line %ld is spliced or cut: \"%.*s\"", lines, (int)len, p);
        }
        lines++;
        p = nl + 1;
    }
    for (int r = 0; r < workers; r++) {
        cr_assert_eq(next_out[r], n, "rank %d: %ld of %ld stdout lines", r, next_out[r], n);
        if (with_stderr)
            cr_assert_eq(next_err[r], (n + 9) / 10 * 10, "rank %d: stderr lines lost", r);
    }
}

static void
flood_spec(struct e2e *e)
{
    e2e_init(e);
    e2e_spec(e, "version: 1\n"
                "name: flood\n"
                "workers: 8\n"
                "devices: {kind: cpu}\n"
                "command: ['%1$s', flood, '20000']\n"
                "logs: {dir: '%2$s/logs'}\n");
}

static void
assert_flood_logs(struct e2e *e)
{
    for (int r = 0; r < 8; r++) {
        char name[64];
        snprintf(name, sizeof(name), "logs/rank-%d.out", r);
        char *path = e2e_path(e, name);
        char *got = xt_read_file(path);
        char *prefixed = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&prefixed, &len);
        /* The log has the raw lines; give them the console's prefix to check them alike. */
        for (char *p = got, *nl; p != NULL && (nl = strchr(p, '\n')) != NULL; p = nl + 1)
            fprintf(f, "[0] %.*s\n", (int)(nl - p), p);
        fclose(f);
        assert_flood_intact(prefixed, 1, 20000, false);
        free(prefixed);
        free(got);
        free(path);
    }
}

/* Eight workers flood stdout and stderr, both going to one regular file: every line arrives
 * whole, once, in order, also in the log files. */
Test(console, flood_to_a_regular_file_keeps_every_line_whole, .timeout = 120)
{
    struct e2e e;
    flood_spec(&e);
    cr_assert_eq(
        e2e_sh(&e, 110, "\"$XMPRUN\" -q --report \"$REPORT\" \"$SPEC\" > \"$DIR/out\" 2>&1"), 0,
        "stderr:\n%.3000s", e.r.err);
    char *path = e2e_path(&e, "out");
    char *text = xt_read_file(path);
    assert_flood_intact(text, 8, 20000, true);
    free(text);
    free(path);
    assert_flood_logs(&e);
    e2e_load_report(&e);
    finish(&e);
}

/* The same through a pipe (2>&1 | cat): xmprun's non-blocking, batched writes to a pipe with a
 * reader of its own pace neither cut nor splice a line. */
Test(console, flood_to_a_pipe_keeps_every_line_whole, .timeout = 120)
{
    struct e2e e;
    flood_spec(&e);
    cr_assert_eq(e2e_sh(&e, 110,
                        "set -e; \"$XMPRUN\" -q --report \"$REPORT\" \"$SPEC\" 2>&1 | "
                        "cat > \"$DIR/out\""),
                 0, "stderr:\n%.3000s", e.r.err);
    char *path = e2e_path(&e, "out");
    char *text = xt_read_file(path);
    assert_flood_intact(text, 8, 20000, true);
    free(text);
    free(path);
    e2e_load_report(&e);
    finish(&e);
}

/* A reader that goes away (`| head -1`) changes nothing: xmprun finishes the job, writes the
 * report, exits with the report's status (not 141 from SIGPIPE) and leaves no run directory. */
Test(console, a_reader_that_goes_away_leaves_the_exit_status_alone, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    cr_assert_eq(e2e_sh(&e, 110,
                        "{ TMPDIR=\"$DIR\" \"$XMPRUN\" --report \"$REPORT\" -n 2 -- seq 200000; "
                        "echo $? > \"$DIR/status\"; } 2>&1 | head -1 > \"$DIR/first\""),
                 0, "stderr:\n%.3000s", e.r.err);
    char *path = e2e_path(&e, "status");
    char *st = xt_read_file(path);
    cr_assert_not_null(st);
    cr_assert_str_eq(st, "0\n", "xmprun exited %s", st);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "succeeded");
    cr_assert_eq(json_integer_value(json_object_get(e.rep, "exit_code")), 0);
    DIR *d = opendir(e.dir);
    struct dirent *de;
    while (d != NULL && (de = readdir(d)) != NULL)
        cr_assert(strncmp(de->d_name, "xmprun-", 7) != 0, "run directory %s/%s left behind", e.dir,
                  de->d_name);
    if (d != NULL)
        closedir(d);
    free(st);
    free(path);
    finish(&e);
}

/* A reader that stays but never reads: after SIGTERM xmprun writes its report and exits 143
 * after a bounded wait for the console, instead of blocking on it for as long as the reader
 * lives. (The test's timeout is the hang detector; nothing here is timed.) */
Test(console, a_stalled_reader_does_not_hold_the_exit, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: stalled\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', flood, '100000000']\n");
    cr_assert_eq(
        e2e_sh(&e, 110,
               "mkfifo \"$DIR/fifo\"; exec 5<>\"$DIR/fifo\"; "
               "TMPDIR=\"$DIR\" \"$XMPRUN\" --report \"$REPORT\" \"$SPEC\" "
               "> \"$DIR/fifo\" 2>&1 & pid=$!; "
               "while [ ! -s \"$DIR/state/\"* ] 2>/dev/null; do sleep 0.1; done; sleep 0.5; "
               "kill -TERM $pid; wait $pid; echo $? > \"$DIR/status\""),
        0, "stderr:\n%.3000s", e.r.err);
    char *path = e2e_path(&e, "status");
    char *st = xt_read_file(path);
    cr_assert_not_null(st);
    cr_assert_str_eq(st, "143\n", "xmprun exited %s", st);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "interrupted");
    free(st);
    free(path);
    finish(&e);
}

/* logs.dir on a full disk (a 64 KiB tmpfs in a private mount namespace): the job still runs to
 * its end, and the lost log output is a warning on stderr and a note in the report. */
Test(console, a_full_disk_under_logs_dir_is_said, .timeout = 120)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: fulldisk\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', flood, '20000']\n"
                 "logs: {console: none, dir: '%2$s/logs'}\n");
    if (geteuid() != 0)
        cr_skip_test("needs root for a tmpfs in a private mount namespace");
    int status =
        e2e_sh(&e, 110,
               "mkdir \"$DIR/logs\" && exec unshare -m sh -c 'mount -t tmpfs -o size=64k "
               "xmp-full \"$DIR/logs\" && exec \"$XMPRUN\" --report \"$REPORT\" \"$SPEC\"'");
    cr_assert_eq(status, 0, "stderr:\n%.3000s", e.r.err);
    cr_assert_not_null(strstr(e.r.err, "xmprun: warning: worker 0: logs.dir: write `"),
                       "stderr:\n%.3000s", e.r.err);
    cr_assert_not_null(strstr(e.r.err, "rank-0.out`: No space left on device"), "stderr:\n%.3000s",
                       e.r.err);
    e2e_load_report(&e);
    const char *note = e2e_str(e2e_worker(&e, 0), "log_error");
    cr_assert_not_null(strstr(note, "No space left on device"), "log_error: \"%s\"", note);
    finish(&e);
}

/* rank0 on a two-node job means global rank 0 only: node 1 (global ranks 2 and 3, local ranks 0
 * and 1) shows nothing, its log files still get everything; node 0 shows its local rank 0. */
Test(console, rank0_on_node_1_of_two_shows_nothing, .timeout = 60)
{
    struct e2e e;
    char *text = NULL;

    e2e_init(&e);
    for (int node = 0; node < 2; node++) {
        free(text);
        cr_assert(asprintf(&text,
                           "version: 1\nname: console\nworkers: 2\ndevices: {kind: cpu}\n"
                           "command: 'echo out $RANK local $LOCAL_RANK; echo err $RANK >&2'\n"
                           "distributed: {nnodes: 2, node_rank: %d, master_addr: 127.0.0.1}\n"
                           "logs: {console: rank0, dir: '%s/logs'}\n",
                           node, e.dir) > 0);
        e2e_set_spec(&e, strdup(text));
        cr_assert_eq(e2e_run(&e, 60, "-q", NULL), 0, "stderr:\n%s", e.r.err);
        e2e_load_report(&e);
        if (node == 0) {
            cr_assert_not_null(strstr(e.r.out, "out 0 local 0\n"), "%s", e.r.out);
            cr_assert_null(strstr(e.r.out, "out 1"), "%s", e.r.out);
        } else {
            cr_assert_str_eq(e.r.out, "", "node 1 showed its workers' lines:\n%s", e.r.out);
            cr_assert_null(strstr(e.r.err, "err"), "node 1 showed its workers' lines: %s", e.r.err);
            char *path = e2e_path(&e, "logs/rank-2.out");
            char *got = xt_read_file(path);
            cr_assert_not_null(got, "no %s", path);
            cr_assert_str_eq(got, "out 2 local 0\n");
            free(got);
            free(path);
        }
        e2e_assert_clean(&e);
    }
    free(text);
    e2e_fini(&e);
}
