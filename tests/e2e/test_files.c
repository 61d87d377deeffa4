/* End to end: the files xmprun writes and reads for the user. A report path that cannot be
 * written is refused before anything starts (125), a full disk at the end is said and is not an
 * exit 0; nothing planted at a report, log or error-file path (a link, FIFO, device node) is
 * written through, blocked on or replaced; error files are read up to a bound; durations that
 * would overflow are refused; a big job gets the descriptors it needs, or a clear refusal; a
 * script whose interpreter is missing says so. */
#include "e2e/e2e.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

/* The pid a script wrote to $DIR/xmprun.pid before it exec'd xmprun. */
static pid_t
script_pid(const struct e2e *e)
{
    char *path = e2e_path(e, "xmprun.pid");
    char *text = xt_read_file(path);
    pid_t pid;

    cr_assert_not_null(text, "the script did not write %s:\n%s", path, e->r.err);
    pid = (pid_t)atoi(text);
    free(text);
    free(path);
    return pid;
}

/* The leak checks of a run that wrote no report: no cgroup of that xmprun, no state file. */
static void
assert_clean_without_report(const struct e2e *e, pid_t pid)
{
    char *state = e2e_path(e, "state");
    DIR *d = opendir(state);
    struct dirent *de;

    e2e_assert_no_cgroups(pid);
    while (d != NULL && (de = readdir(d)) != NULL)
        cr_assert(de->d_name[0] == '.', "state file %s/%s was left behind", state, de->d_name);
    if (d != NULL)
        closedir(d);
    free(state);
}

static bool
exists(const struct e2e *e, const char *name)
{
    char *path = e2e_path(e, name);
    struct stat st;
    bool found = lstat(path, &st) == 0;
    free(path);
    return found;
}

/* A refused report path: exit 125, the path named, no worker started, nothing left. */
static void
expect_refused(struct e2e *e, const char *report, const char *why)
{
    char *script = NULL;

    cr_assert(asprintf(&script,
                       "echo $$ > \"$DIR/xmprun.pid\"; exec \"$XMPRUN\" --report '%s' \"$SPEC\"",
                       report) > 0);
    cr_assert_eq(e2e_sh(e, 60, script), 125, "report %s: stderr:\n%s", report, e->r.err);
    free(script);
    cr_assert_not_null(strstr(e->r.err, report), "the path is not named:\n%s", e->r.err);
    cr_assert_not_null(strstr(e->r.err, why), "expected \"%s\" in:\n%s", why, e->r.err);
    cr_assert(!exists(e, "started"), "a worker started although the report path was refused");
    assert_clean_without_report(e, script_pid(e));
}

Test(files, unusable_report_paths_are_refused_before_starting, .timeout = 300)
{
    struct e2e e;
    struct stat st;
    char *p;

    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: refuse\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: 'touch %2$s/started'\n");
    p = e2e_path(&e, "missing/report.json");
    expect_refused(&e, p, "No such file or directory");
    free(p);
    expect_refused(&e, e.dir, "is a directory, not a regular file");

    /* A FIFO and a character device (a copy of /dev/null's numbers, as --report /dev/null
     * would be) stay what they are. */
    p = e2e_path(&e, "fifo");
    cr_assert_eq(mkfifo(p, 0600), 0);
    expect_refused(&e, p, "is a FIFO, not a regular file");
    cr_assert(lstat(p, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO was replaced");
    free(p);
    p = e2e_path(&e, "null");
    cr_assert_eq(mknod(p, S_IFCHR | 0666, makedev(1, 3)), 0, "mknod: %s", strerror(errno));
    expect_refused(&e, p, "is a character device, not a regular file");
    cr_assert(lstat(p, &st) == 0 && S_ISCHR(st.st_mode), "the device node was replaced");
    free(p);

    /* A link planted at the path is neither followed nor replaced. */
    free(xt_write_file(e.dir, "victim", "precious\n"));
    p = e2e_path(&e, "link.json");
    cr_assert_eq(symlink("victim", p), 0);
    expect_refused(&e, p, "is a symbolic link, not a regular file");
    char *victim = xt_read_file(e2e_path(&e, "victim"));
    cr_assert_str_eq(victim, "precious\n");
    free(victim);
    free(p);

    /* A read-only directory (a read-only bind mount in a private mount namespace: root
     * ignores permission bits). */
    cr_assert_eq(e2e_sh(&e, 60,
                        "mkdir -p \"$DIR/ro\" && exec unshare -m sh -c '"
                        "mount --bind \"$DIR/ro\" \"$DIR/ro\" && "
                        "mount -o remount,bind,ro \"$DIR/ro\" && "
                        "echo $$ > \"$DIR/xmprun.pid\" && "
                        "exec \"$XMPRUN\" --report \"$DIR/ro/report.json\" \"$SPEC\"'"),
                 125, "stderr:\n%s", e.r.err);
    cr_assert_not_null(strstr(e.r.err, "/ro/report.json"), "%s", e.r.err);
    cr_assert_not_null(strstr(e.r.err, "Read-only file system"), "%s", e.r.err);
    cr_assert(!exists(&e, "started"));
    assert_clean_without_report(&e, script_pid(&e));

    /* And a good path still works, with no temp file left beside it. */
    cr_assert_eq(e2e_run(&e, 60, NULL), 0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert(exists(&e, "started"));
    DIR *d = opendir(e.dir);
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        cr_assert(strncmp(de->d_name, ".report.json.", 13) != 0, "temp file %s left", de->d_name);
    closedir(d);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* Runs the spec with its report on a full 64 KiB tmpfs in a private mount namespace. */
static int
run_on_full_disk(struct e2e *e)
{
    return e2e_sh(e, 120,
                  "mkdir -p \"$DIR/full\" && exec unshare -m sh -c '"
                  "mount -t tmpfs -o size=64k tmpfs \"$DIR/full\" && "
                  "{ cat /dev/zero > \"$DIR/full/fill\" 2>/dev/null; true; } && "
                  "echo $$ > \"$DIR/xmprun.pid\" && "
                  "\"$XMPRUN\" --report \"$DIR/full/report.json\" \"$SPEC\"; rc=$?; "
                  "ls -A \"$DIR/full\" > \"$DIR/full.ls\"; exit $rc'");
}

Test(files, report_on_a_full_disk_is_said_and_not_exit_0, .timeout = 300)
{
    struct e2e e;
    char *listing;

    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: fulldisk\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: 'true'\n");
    cr_assert_eq(run_on_full_disk(&e), 125, "stderr:\n%s", e.r.err);
    cr_assert_not_null(strstr(e.r.err, "xmprun: the report was not written: write `"),
                       "stderr:\n%s", e.r.err);
    cr_assert_not_null(strstr(e.r.err, "/full/report.json`: No space left on device"),
                       "stderr:\n%s", e.r.err);
    /* The summary says the job succeeded and the status it really exits with. */
    cr_assert_not_null(strstr(e.r.err, "succeeded after"), "stderr:\n%s", e.r.err);
    cr_assert_not_null(strstr(e.r.err, "exit status 125"), "stderr:\n%s", e.r.err);
    /* Neither a report nor a temp file is left on the full disk, only the filler. */
    listing = xt_read_file(e2e_path(&e, "full.ls"));
    cr_assert_str_eq(listing, "fill\n");
    free(listing);
    assert_clean_without_report(&e, script_pid(&e));

    /* A failed job keeps its own exit status. */
    e2e_spec(&e, "version: 1\n"
                 "name: fulldisk\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: 'exit 3'\n");
    cr_assert_eq(run_on_full_disk(&e), 3, "stderr:\n%s", e.r.err);
    cr_assert_not_null(strstr(e.r.err, "No space left on device"), "stderr:\n%s", e.r.err);
    assert_clean_without_report(&e, script_pid(&e));
    e2e_fini(&e);
}

Test(files, planted_log_link_is_not_written_through, .timeout = 300)
{
    struct e2e e;
    char *victim, *link;

    e2e_init(&e);
    victim = xt_write_file(e.dir, "victim", "precious\n");
    cr_assert_eq(mkdir(e2e_path(&e, "logs"), 0755), 0);
    link = e2e_path(&e, "logs/rank-0.out");
    cr_assert_eq(symlink(victim, link), 0);
    e2e_spec(&e, "version: 1\n"
                 "name: loglink\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: 'echo overwritten; touch %2$s/started'\n"
                 "logs: {dir: '%2$s/logs'}\n");
    cr_assert_eq(e2e_run(&e, 60, NULL), 125, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "setup_failed");
    cr_assert_not_null(strstr(e.r.err, "logs.dir: `"), "%s", e.r.err);
    cr_assert_not_null(strstr(e.r.err, "/logs/rank-0.out` is a symbolic link"), "%s", e.r.err);
    cr_assert(!exists(&e, "started"), "a worker started");
    char *text = xt_read_file(victim);
    cr_assert_str_eq(text, "precious\n");
    free(text);
    e2e_assert_clean(&e);

    /* A link planted after the start (here by the worker itself, before the restart reopens
     * its log) is not followed either: that worker cannot start, and says why. */
    cr_assert_eq(unlink(link), 0);
    e2e_spec(&e,
             "version: 1\n"
             "name: loglink\n"
             "workers: 1\n"
             "devices: {kind: cpu}\n"
             "command: 'echo run $XMPRUN_RESTART_COUNT; ln -sf %2$s/victim %2$s/logs/rank-0.out;"
             " exit 1'\n"
             "logs: {dir: '%2$s/logs'}\n"
             "on_failure: {restarts: 1}\n");
    cr_assert_eq(e2e_run(&e, 60, NULL), 125, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    json_t *w = e2e_worker(&e, 0);
    cr_assert_str_eq(e2e_str(w, "state"), "failed_to_start");
    cr_assert_not_null(strstr(e2e_str(w, "start_error"),
                              "/logs/rank-0.out` is a symbolic link; xmprun does not follow it"),
                       "%s", e2e_str(w, "start_error"));
    text = xt_read_file(victim);
    cr_assert_str_eq(text, "precious\n");
    free(text);
    e2e_assert_clean(&e);

    /* A FIFO planted at a log's name is refused, not blocked on. */
    cr_assert_eq(unlink(link), 0);
    cr_assert_eq(mkfifo(link, 0600), 0);
    e2e_spec(&e, "version: 1\n"
                 "name: logfifo\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: 'true'\n"
                 "logs: {dir: '%2$s/logs'}\n");
    cr_assert_eq(e2e_run(&e, 60, NULL), 125, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_not_null(strstr(e.r.err, "/logs/rank-0.out` is a FIFO"), "%s", e.r.err);
    e2e_assert_clean(&e);
    free(link);
    free(victim);
    e2e_fini(&e);
}

Test(files, error_file_fifo_does_not_hang_xmprun, .timeout = 300)
{
    struct e2e e;

    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: errfifo\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: 'if [ $RANK = 0 ]; then mkfifo \"$TORCHELASTIC_ERROR_FILE\"; exit 1; fi;"
                 " exec %1$s sleep 60'\n"
                 "on_failure: {grace: 2s}\n");
    /* Before, xmprun blocked in open() on the FIFO for good (the run limit kills it: 137). */
    cr_assert_eq(e2e_run(&e, 60, NULL), 1, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    json_t *w = e2e_worker(&e, 0);
    cr_assert(json_is_null(json_object_get(w, "error_file")));
    cr_assert_not_null(strstr(e2e_str(w, "error_file_note"), "is a FIFO, not a regular file"), "%s",
                       e2e_str(w, "error_file_note"));
    /* The other worker was still stopped by kill-all. */
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 1), "state"), "stopped_by_xmprun");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(files, error_file_is_read_up_to_a_bound, .timeout = 300)
{
    struct e2e e;
    struct stat st;

    e2e_init(&e);
    /* 20 MiB of valid JSON: one message of 20 Mi x's. */
    free(xt_write_file(e.dir, "bigerr.sh",
                       "{ printf '{\"message\": \"'; head -c 20971520 /dev/zero | tr '\\0' x;"
                       " printf '\"}'; } > \"$TORCHELASTIC_ERROR_FILE\"\nexit 1\n"));
    e2e_spec(&e, "version: 1\n"
                 "name: errbig\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: [sh, '%2$s/bigerr.sh']\n");
    cr_assert_eq(e2e_run(&e, 120, NULL), 1, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    json_t *w = e2e_worker(&e, 0);
    json_t *ef = json_object_get(w, "error_file");
    cr_assert(json_is_string(ef), "error_file is not the cut text");
    cr_assert_eq(json_string_length(ef), 65536);
    cr_assert_eq(strncmp(json_string_value(ef), "{\"message\": \"xxx", 16), 0);
    cr_assert_str_eq(e2e_str(w, "error_file_note"),
                     "cut: the error file is 20.0 MiB, only its first 64.0 KiB are kept, as text");
    cr_assert_eq(stat(e.report, &st), 0);
    cr_assert_lt(st.st_size, 200 * 1024, "the report is %lld bytes", (long long)st.st_size);
    e2e_assert_clean(&e);

    /* A link at the error file's path is not followed: it could name a file only xmprun (root)
     * may read. */
    free(xt_write_file(e.dir, "secret", "{\"secret\": \"only root reads this\"}\n"));
    e2e_spec(&e, "version: 1\n"
                 "name: errlink\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: 'ln -s %2$s/secret \"$TORCHELASTIC_ERROR_FILE\"; exit 1'\n");
    cr_assert_eq(e2e_run(&e, 60, NULL), 1, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    w = e2e_worker(&e, 0);
    cr_assert(json_is_null(json_object_get(w, "error_file")));
    cr_assert_not_null(strstr(e2e_str(w, "error_file_note"), "is a symbolic link"), "%s",
                       e2e_str(w, "error_file_note"));
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* What a worker leaves in the job's scratch directory (beside its error file) goes with it. */
Test(files, scratch_directory_is_removed_with_what_workers_left, .timeout = 120)
{
    struct e2e e;

    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: scratch\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: 'd=$(dirname \"$TORCHELASTIC_ERROR_FILE\"); echo x > \"$d/left-$RANK\";"
                 " mkdir \"$d/sub-$RANK\"; echo {} > \"$TORCHELASTIC_ERROR_FILE\"'\n");
    cr_assert_eq(e2e_run(&e, 60, NULL), 0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(files, overflowing_durations_are_refused, .timeout = 120)
{
    struct e2e e;

    e2e_init(&e);
    /* 18446744073710 ms is 2^64 ns and a bit: it wrapped to a deadline 10 ms away. */
    e2e_spec(&e, "version: 1\n"
                 "name: longtimeout\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', sleep, '1']\n"
                 "timeout: 18446744073710ms\n");
    cr_assert_eq(e2e_run(&e, 60, NULL), 2, "stderr:\n%s", e.r.err);
    cr_assert_not_null(strstr(e.r.err, "job.yaml:7:10: timeout: \"18446744073710ms\" is too long "
                                       "(at most 8760h, 365 days)"),
                       "stderr:\n%s", e.r.err);
    cr_assert(!exists(&e, "report.json"), "a spec error starts nothing and writes no report");
    cr_assert_eq(
        e2e_run(&e, 60, "--set", "timeout=0", "--set", "on_failure.grace=9999999999h", NULL), 2,
        "stderr:\n%s", e.r.err);
    cr_assert_not_null(
        strstr(e.r.err, "on_failure.grace: \"9999999999h\" is too long (at most 8760h, 365 days)"),
        "stderr:\n%s", e.r.err);
    /* The longest allowed values run normally. */
    cr_assert_eq(e2e_run(&e, 60, "--set", "timeout=8760h", "--set", "on_failure.grace=8760h", NULL),
                 0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "succeeded");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(files, many_workers_get_the_descriptors_they_need, .timeout = 600)
{
    struct e2e e;
    struct rlimit rl;

    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < 4096)
        cr_skip_test("SKIPPED: the hard RLIMIT_NOFILE is %llu; 200 workers need about 1700",
                     (unsigned long long)rl.rlim_max);
    e2e_init(&e);
    /* Each worker records the soft limit it got: the one xmprun inherited, not its raised one. */
    e2e_spec(&e, "version: 1\n"
                 "name: manyfds\n"
                 "workers: 200\n"
                 "devices: {kind: cpu}\n"
                 "command: 'ulimit -Sn > %2$s/nofile.$RANK'\n"
                 "logs: {console: none}\n");
    cr_assert_eq(
        e2e_sh(&e, 300, "exec prlimit --nofile=1024: \"$XMPRUN\" --report \"$REPORT\" \"$SPEC\""),
        0, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_eq(json_array_size(json_object_get(e.rep, "workers")), 200);
    for (int r = 0; r < 200; r += 199) {
        char name[32];
        snprintf(name, sizeof(name), "nofile.%d", r);
        char *text = xt_read_file(e2e_path(&e, name));
        cr_assert_str_eq(text, "1024\n", "worker %d got soft limit %s", r, text);
        free(text);
    }
    e2e_assert_clean(&e);

    /* With the hard limit at 64 no raise helps: a clear refusal before anything starts. */
    cr_assert_eq(
        e2e_sh(&e, 120, "exec prlimit --nofile=64 \"$XMPRUN\" --report \"$REPORT\" \"$SPEC\""), 125,
        "stderr:\n%s", e.r.err);
    cr_assert_not_null(strstr(e.r.err, "out of file descriptors (RLIMIT_NOFILE 64): 200 workers "
                                       "need about"),
                       "stderr:\n%s", e.r.err);
    cr_assert_null(strstr(e.r.err, "not mounted"), "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "setup_failed");
    cr_assert_not_null(strstr(e2e_str(json_object_get(e.rep, "root_cause"), "message"),
                              "out of file descriptors (RLIMIT_NOFILE 64)"));
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* Runs ./NAME in the test directory as one worker: exit 127, and the root cause says want. */
static void
expect_interpreter_message(struct e2e *e, const char *name, const char *want)
{
    char *spec = NULL;

    cr_assert(asprintf(&spec,
                       "version: 1\nname: nointerp\nworkers: 1\ndevices: {kind: cpu}\n"
                       "workdir: '%s'\ncommand: [./%s]\n",
                       e->dir, name) > 0);
    e2e_set_spec(e, spec);
    cr_assert_eq(e2e_run(e, 60, NULL), 127, "stderr:\n%s", e->r.err);
    e2e_load_report(e);
    json_t *rc = json_object_get(e->rep, "root_cause");
    cr_assert_str_eq(e2e_str(rc, "reason"), "failed_to_start");
    cr_assert_str_eq(e2e_str(rc, "message"), want);
    e2e_assert_clean(e);
}

Test(files, missing_interpreter_is_named, .timeout = 120)
{
    struct e2e e;
    char *path, *elf;
    size_t len = 0;

    e2e_init(&e);
    path = xt_write_file(e.dir, "x.sh", "#!/nonexistent/python\nprint('hi')\n");
    cr_assert_eq(chmod(path, 0755), 0);
    free(path);
    expect_interpreter_message(&e, "x.sh",
                               "worker 0 (cpu) could not start: exec `./x.sh`: its interpreter "
                               "`/nonexistent/python` (#! line) was not found");

    path = xt_write_file(e.dir, "crlf.sh", "#!/bin/sh\r\necho hi\r\n");
    cr_assert_eq(chmod(path, 0755), 0);
    free(path);
    expect_interpreter_message(&e, "crlf.sh",
                               "worker 0 (cpu) could not start: exec `./crlf.sh`: its #! line ends "
                               "in a carriage return (Windows line endings), so its interpreter "
                               "`/bin/sh\\r` was not found");

    /* A copy of the probe whose dynamic loader's name was changed to one that does not exist. */
    FILE *f = fopen(xt_probe(), "rb");
    cr_assert_not_null(f);
    elf = malloc(1 << 20);
    len = fread(elf, 1, 1 << 20, f);
    fclose(f);
    char *ld = memmem(elf, len, "/ld-linux", 9);
    cr_assert_not_null(ld, "no ld-linux loader named in the probe");
    ld[1] = 'X';
    path = e2e_path(&e, "noloader");
    f = fopen(path, "wb");
    cr_assert_eq(fwrite(elf, 1, len, f), len);
    fclose(f);
    cr_assert_eq(chmod(path, 0755), 0);
    char want[512];
    size_t ld_len = strlen(ld);
    char *start = ld;
    while (start > elf && start[-1] != '\0')
        start--;
    snprintf(want, sizeof(want),
             "worker 0 (cpu) could not start: exec `./noloader`: its ELF interpreter `%.*s` (the "
             "dynamic loader) was not found",
             (int)(ld - start + ld_len), start);
    expect_interpreter_message(&e, "noloader", want);
    free(path);
    free(elf);
    e2e_fini(&e);
}
