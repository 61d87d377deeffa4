/* Where the workers were: the stacks xmprun records before it stops a worker (the job timeout),
 * for a Python worker (every thread's Python frames) and a C one (native frames with names),
 * and `xmprun stacks` on a running job, which goes on. Debian's python3 (3.11) only: the 3.12
 * layout has no interpreter to test on here. */
#include "e2e/e2e.h"

#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PYTHON "/usr/bin/python3"

/* The main thread blocks in wait_for_peer (line 4), a second thread in serve_peer (line 7);
 * each reads a pipe nobody writes. With argv[1] set, the main thread's wait ends after that
 * many seconds and the worker exits 0. SIGTERM is ignored, so that only the kill after the
 * grace ends it. */
static const char worker_py[] =
    "import os, select, signal, sys, threading\n"
    "\n"
    "def wait_for_peer(fd, limit):\n"
    "    return select.select([fd], [], [], limit)\n"
    "\n"
    "def serve_peer(fd):\n"
    "    return os.read(fd, 1)\n"
    "\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "r, w = os.pipe()\n"
    "r2, w2 = os.pipe()\n"
    "threading.Thread(target=serve_peer, args=(r2,), daemon=True).start()\n"
    "print('ready', flush=True)\n"
    "wait_for_peer(r, float(sys.argv[1]) if len(sys.argv) > 1 else None)\n";

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The thread's Python frame for function, or NULL. */
static json_t *
python_frame(json_t *thread, const char *function)
{
    size_t i;
    json_t *f;

    json_array_foreach(json_object_get(thread, "python"), i, f)
    {
        if (json_is_string(json_object_get(f, "function")) &&
            strcmp(e2e_str(f, "function"), function) == 0)
            return f;
    }
    return NULL;
}

Test(stacks, python_worker_timeout_records_every_thread, .timeout = 120)
{
    struct e2e e;
    double t0, wall;

    e2e_init(&e);
    char *script = xt_write_file(e.dir, "w.py", worker_py);
    e2e_spec(&e, "version: 1\n"
                 "name: stacks-py\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "timeout: 4s\n"
                 "on_failure: {action: kill-all, grace: 1s}\n"
                 "command: [" PYTHON ", %2$s/w.py]\n");
    t0 = now_s();
    cr_assert_eq(e2e_run(&e, 90, NULL), 124, "stderr:\n%s", e.r.err);
    wall = now_s() - t0;
    e2e_load_report(&e);
    /* The timeout (4 s: the worker's second thread must have started, in an emulated guest
     * under load too), the grace (1 s), at most the capture's budget (1 s): loosely, as the
     * machine may be busy. */
    cr_assert_lt(wall, 4.0 + 1.0 + 1.0 + 2.0, "took %.1f s", wall);

    json_t *w = e2e_worker(&e, 0);
    cr_assert_str_eq(e2e_str(w, "state"), "timeout");
    json_t *st = json_object_get(w, "stacks");
    cr_assert(json_is_object(st), "no stacks in the report:\n%s", e.r.err);
    cr_assert_str_eq(e2e_str(st, "python"), "3.11");
    json_t *threads = json_object_get(st, "threads");
    cr_assert_eq(json_array_size(threads), 2);

    json_t *main_thread = json_array_get(threads, 0);
    cr_assert_eq(json_integer_value(json_object_get(main_thread, "tid")),
                 json_integer_value(json_object_get(w, "pid")));
    json_t *f = python_frame(main_thread, "wait_for_peer");
    cr_assert(f != NULL, "main thread: no wait_for_peer frame");
    cr_assert_str_eq(e2e_str(f, "file"), script);
    cr_assert_eq(json_integer_value(json_object_get(f, "line")), 4);
    cr_assert(python_frame(main_thread, "<module>") != NULL);
    /* Its native stack too, from the blocking call out. */
    cr_assert_gt(json_array_size(json_object_get(main_thread, "native")), 2);

    f = python_frame(json_array_get(threads, 1), "serve_peer");
    cr_assert(f != NULL, "second thread: no serve_peer frame");
    cr_assert_str_eq(e2e_str(f, "file"), script);
    cr_assert_eq(json_integer_value(json_object_get(f, "line")), 7);

    /* The text file beside the report, and the summaries in a line. */
    const char *file = e2e_str(st, "file");
    char *want_file = e2e_path(&e, "report.stacks/worker-0.txt");
    cr_assert_str_eq(file, want_file);
    char *text = xt_read_file(file);
    cr_assert(text != NULL && strstr(text, "wait_for_peer (") != NULL &&
                  strstr(text, "serve_peer (") != NULL,
              "%s", text != NULL ? text : "(no file)");
    cr_assert(strstr(e.r.err, "worker 0 was stopped in wait_for_peer (") != NULL, "%s", e.r.err);
    cr_assert_eq(e2e_sh(&e, 30, "\"$XMPRUN\" report \"$REPORT\""), 124);
    cr_assert(strstr(e.r.out, "worker 0 was stopped in wait_for_peer (") != NULL, "%s", e.r.out);
    free(text);
    free(want_file);
    free(script);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(stacks, c_worker_native_stack_names_the_caller, .timeout = 120)
{
    struct e2e e;
    const char *bin = getenv("XMPRUN_BLOCK_READ");
    size_t i;
    json_t *f;
    bool read_seen = false, caller_seen = false;

    cr_assert(bin != NULL, "XMPRUN_BLOCK_READ is not set (run through ctest)");
    e2e_init(&e);
    char *text = NULL;
    cr_assert_eq(asprintf(&text,
                          "version: 1\nname: stacks-c\nworkers: 1\ndevices: {kind: cpu}\n"
                          "timeout: 1s\non_failure: {action: kill-all, grace: 2s}\n"
                          "command: [%s]\n",
                          bin) > 0,
                 1);
    e2e_set_spec(&e, text);
    /* A stacks file of an earlier run, longer than this run's, is written over and cut to its
     * new length (not truncated first: ext4 would write it to disk at its close). */
    char *stacks_dir = e2e_path(&e, "report.stacks");
    cr_assert_eq(mkdir(stacks_dir, 0755), 0);
    char *stale = malloc(200001);
    memset(stale, 'z', 200000);
    stale[200000] = '\0';
    free(xt_write_file(stacks_dir, "worker-0.txt", stale));
    free(stale);
    cr_assert_eq(e2e_run(&e, 60, NULL), 124, "stderr:\n%s", e.r.err);
    char *stacks_file = e2e_path(&e, "report.stacks/worker-0.txt");
    char *first = xt_read_file(stacks_file);
    cr_assert(first != NULL && strchr(first, 'z') == NULL && strstr(first, "block_in_read"),
              "%.300s", first != NULL ? first : "(none)");
    e2e_load_report(&e);
    /* Read, then let go: the SIGTERM after the capture ends it, not the kill after the grace
     * (a worker left stopped under ptrace could not act on it). */
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 0), "signal"), "SIGTERM");
    json_t *st = json_object_get(e2e_worker(&e, 0), "stacks");
    cr_assert(json_is_object(st), "no stacks in the report");
    cr_assert(json_is_null(json_object_get(st, "python")));
    json_t *t = json_array_get(json_object_get(st, "threads"), 0);
    json_array_foreach(json_object_get(t, "native"), i, f)
    {
        const char *fn = json_string_value(json_object_get(f, "function"));
        if (fn != NULL && strcmp(fn, "read") == 0)
            read_seen = true;
        if (fn != NULL && strcmp(fn, "block_in_read") == 0) {
            caller_seen = true;
            cr_assert(strstr(e2e_str(f, "module"), "block_read") != NULL);
        }
    }
    cr_assert(read_seen && caller_seen, "native frames: %s",
              json_dumps(json_object_get(t, "native"), 0));
    cr_assert(strstr(e.r.err, "worker 0 was stopped in read < block_in_read") != NULL, "%s",
              e.r.err);
    /* A stacks file with another link (a copy kept with ln) is replaced: the copy keeps what it
     * had. */
    char *kept = e2e_path(&e, "report.stacks/kept.txt");
    cr_assert_eq(link(stacks_file, kept), 0);
    cr_assert_eq(e2e_run(&e, 60, NULL), 124, "stderr:\n%s", e.r.err);
    char *kept_text = xt_read_file(kept);
    cr_assert(kept_text != NULL && strcmp(kept_text, first) == 0, "the kept copy changed");
    /* A run that takes none removes the earlier run's, which would be taken for its own. */
    cr_assert(asprintf(&text,
                       "version: 1\nname: stacks-c\nworkers: 1\ndevices: {kind: cpu}\n"
                       "timeout: 1s\non_failure: {action: kill-all, grace: 2s, stacks: never}\n"
                       "command: [%s]\n",
                       bin) > 0);
    e2e_set_spec(&e, text);
    cr_assert_eq(e2e_run(&e, 60, NULL), 124, "stderr:\n%s", e.r.err);
    cr_assert_neq(access(stacks_file, F_OK), 0, "%s is left from the run before", stacks_file);
    cr_assert_eq(access(kept, F_OK), 0);
    unlink(kept);
    free(kept_text);
    free(kept);
    free(first);
    free(stacks_file);
    free(stacks_dir);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(stacks, stacks_command_reads_a_running_job_that_goes_on, .timeout = 120)
{
    struct e2e e;

    e2e_init(&e);
    free(xt_write_file(e.dir, "w.py", worker_py));
    /* Each worker waits 9 s, then exits 0 by itself (its second thread is a daemon). */
    e2e_spec(&e, "version: 1\n"
                 "name: stacks-live\n"
                 "workers: 3\n"
                 "devices: {kind: cpu}\n"
                 "command: [" PYTHON ", %2$s/w.py, '9']\n");
    int status = e2e_sh(&e, 60,
                        "\"$XMPRUN\" --report \"$REPORT\" \"$SPEC\" > run.out 2> run.err &\n"
                        "pid=$!\n"
                        "n=0\n"
                        "while [ \"$(grep -c ready run.out)\" != 3 ] && [ $n -lt 100 ]; do\n"
                        "  sleep 0.1; n=$((n + 1))\n"
                        "done\n"
                        "sleep 0.5\n"
                        /* Out of time early: the captures given up on still run inside libdw
                         * when the command ends, which must neither crash it nor lose what was
                         * read. Where in a capture a budget ends depends on the machine's
                         * speed: a sweep. */
                        "for t in 1 2 3 4 5 6 8 10 13 16 20 25 30 40 50 65 80 100; do\n"
                        "  XMPRUN_STACKS_TIMEOUT=${t}ms \"$XMPRUN\" stacks stacks-live >> short.txt"
                        " 2>> short.err\n"
                        "  echo $? >> short.rc\n"
                        "done\n"
                        /* The libraries a capture loads (the dynamic loader's own account). */
                        "env -u DEBUGINFOD_URLS LD_DEBUG=files \"$XMPRUN\" stacks stacks-live"
                        " > /dev/null 2> libs.txt\n"
                        "XMPRUN_STACKS_TIMEOUT=soon \"$XMPRUN\" stacks stacks-live 2> bad.err\n"
                        "echo $? > bad.rc\n"
                        "\"$XMPRUN\" stacks stacks-live > stacks.txt 2> stacks.err\n"
                        "echo $? > stacks.rc\n"
                        "wait $pid\n");
    cr_assert_eq(status, 0, "xmprun: %d\n%s", status, e.r.err);
    char *rc = xt_read_file(e2e_path(&e, "stacks.rc"));
    char *out = xt_read_file(e2e_path(&e, "stacks.txt"));
    char *err = xt_read_file(e2e_path(&e, "stacks.err"));
    cr_assert(rc != NULL && strcmp(rc, "0\n") == 0, "xmprun stacks: %s %s", rc, err);
    char *short_rc = xt_read_file(e2e_path(&e, "short.rc"));
    char *short_err = xt_read_file(e2e_path(&e, "short.err"));
    char *short_out = xt_read_file(e2e_path(&e, "short.txt"));
    cr_assert(short_rc != NULL && strspn(short_rc, "0\n") == strlen(short_rc) &&
                  strlen(short_rc) == 2 * 18,
              "xmprun stacks within 1 to 100 ms: %s\n%s", short_rc, short_err);
    cr_assert(strstr(short_out, "ms budget") != NULL, "%s", short_out);
    /* libdw, and no debuginfod client: it would bring libcurl and its TLS stack into xmprun
     * (about 30 libraries, a download within the budget) even with no server set. */
    char *libs = xt_read_file(e2e_path(&e, "libs.txt"));
    cr_assert(libs != NULL && strstr(libs, "file=libdw.so.1") != NULL, "%s", libs);
    cr_assert(strstr(libs, "libdebuginfod") == NULL && strstr(libs, "libcurl") == NULL, "%s", libs);
    free(libs);
    char *bad_rc = xt_read_file(e2e_path(&e, "bad.rc"));
    char *bad_err = xt_read_file(e2e_path(&e, "bad.err"));
    cr_assert(bad_rc != NULL && strcmp(bad_rc, "2\n") == 0 &&
                  strstr(bad_err, "XMPRUN_STACKS_TIMEOUT") != NULL,
              "%s %s", bad_rc, bad_err);
    free(short_rc);
    free(short_err);
    free(short_out);
    free(bad_rc);
    free(bad_err);
    cr_assert(strstr(out, "=== worker 0 ===") != NULL && strstr(out, "=== worker 2 ===") != NULL,
              "%s", out);
    /* Every worker, both threads: three, so that a capture thread reads two (the second from
     * the modules and interpreter offsets the first left it). */
    for (const char *fn = "wait_for_peer ("; fn != NULL;
         fn = strcmp(fn, "wait_for_peer (") == 0 ? "serve_peer (" : NULL) {
        const char *p = out;
        for (int k = 0; k < 3; k++) {
            p = strstr(p, fn);
            cr_assert(p != NULL, "%s %d times:\n%s", fn, k + 1, out);
            p++;
        }
    }
    /* The job went on and ended by itself. */
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "succeeded");
    cr_assert(json_object_get(e2e_worker(&e, 0), "stacks") == NULL);
    free(rc);
    free(out);
    free(err);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* A worker run through a shell, as the examples and most specs run Python: its stacks reach the
 * Python child, the summary names the Python child's frame (not the shell's wait, nor that of the
 * sleep started before it), and the text file has every process. Without cgroups the processes
 * are found below the worker; with them, in its cgroup. */
static void
shell_worker(const char *cgroups)
{
    struct e2e e;
    char *text = NULL;
    json_t *st, *child, *main_thread;

    e2e_init(&e);
    free(xt_write_file(e.dir, "worker.py", worker_py));
    cr_assert_gt(asprintf(&text,
                          "version: 1\nname: stacks-sh\nworkers: 1\ndevices: {kind: cpu}\n"
                          "isolation: {cgroups: %s}\n"
                          "command: [sh, -c, 'sleep 60 & " PYTHON " %s/worker.py']\n"
                          "timeout: 3s\non_failure: {grace: 1s}\n",
                          cgroups, e.dir),
                 0);
    e2e_set_spec(&e, text);
    cr_assert_eq(e2e_run(&e, 60, NULL), 124, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    st = json_object_get(e2e_worker(&e, 0), "stacks");
    cr_assert(json_is_object(st), "no stacks:\n%s", e.r.err);
    cr_assert_str_eq(e2e_str(st, "comm"), "sh");
    cr_assert_eq(json_array_size(json_object_get(st, "children")), 2, "%s", e.r.err);
    child = json_array_get(json_object_get(st, "children"), 1);
    cr_assert_str_eq(e2e_str(json_array_get(json_object_get(st, "children"), 0), "comm"), "sleep");
    cr_assert_str_eq(e2e_str(child, "comm"), "python3");
    main_thread = json_array_get(json_object_get(child, "threads"), 0);
    cr_assert_not_null(python_frame(main_thread, "wait_for_peer"), "%s", e.r.err);
    cr_assert_not_null(strstr(e.r.err, "xmprun: worker 0 was stopped in wait_for_peer ("), "%s",
                       e.r.err);
    cr_assert_not_null(strstr(e.r.err, ") (its child "), "%s", e.r.err);
    char *file = xt_read_file(e2e_path(&e, "report.stacks/worker-0.txt"));
    cr_assert_not_null(file);
    cr_assert_not_null(strstr(file, "--- its process pid "), "%s", file);
    free(file);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(stacks, a_shell_workers_python_child, .timeout = 120)
{
    shell_worker("off");
    shell_worker("required");
}
