/* End to end: CPython's own test of multiprocessing passes in a worker under the default
 * seccomp profile and the device filter. Host only (tests/run-v2.sh leaves it out): it takes
 * minutes here and would take an hour in the emulated v2 guest, and nothing in it depends on
 * the cgroup mode. */
#include "e2e/e2e.h"

#define PYTHON "/usr/bin/python3"

/* CPython's test of multiprocessing with the fork start method (Debian's
 * libpython3.11-testsuite): pipes, queues, shared memory, semaphores, managers, process pools,
 * all under the default profile and the device filter.
 *
 * The suite has timing-dependent tests of its own that hang now and then (one CI run hung for
 * the whole 9 minutes here, never reproduced in 8 runs on the host). So regrtest runs it in a
 * child with a 200 s timeout (a hang dumps every thread's stack to the log and kills that
 * child) and reruns a failed module once in verbose mode (-w). What the profile or the filter
 * breaks fails both times; a rerun that passed is logged with the first run's output, so a
 * flake is seen, not hidden. Logged as info: Criterion exits 1 after any cr_log_warn, even
 * when every test passed (a CI run whose rerun passed was red for it). */
Test(python, multiprocessing_test_suite_passes_under_default, .timeout = 600)
{
    struct e2e e;

    if (access("/usr/lib/python3.11/test/test_multiprocessing_fork.py", F_OK) != 0)
        cr_assert_fail("Debian's libpython3.11-testsuite is missing (scripts/install-deps.sh)");
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: mp-tests\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: [" PYTHON ", -m, test, -j1, --timeout=200, -w,"
                 " test_multiprocessing_fork]\n"
                 "resources: {worker: {cpuset: none}}\n"
                 "logs: {console: none, dir: logs}\n"
                 "timeout: 9m\n");
    int status = e2e_run(&e, 580, NULL);
    char *log = e2e_path(&e, "logs/rank-0.out");
    char *out = xt_read_file(log);
    cr_assert_eq(status, 0, "stderr:\n%s\noutput:\n%s", e.r.err, out ? out : "(none)");
    /* The last line is "Tests result: SUCCESS", or "FAILURE then SUCCESS" after a rerun. */
    const char *result = out ? strstr(out, "\nTests result: ") : NULL;
    cr_assert_not_null(result, "%s", out ? out : "(none)");
    cr_assert_not_null(strstr(result, "SUCCESS"), "%s", out);
    if (strstr(result, "FAILURE then SUCCESS"))
        cr_log_info("CPython's suite failed once and passed on its rerun; first run:\n%.4000s",
                    out);
    free(out);
    free(log);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}
