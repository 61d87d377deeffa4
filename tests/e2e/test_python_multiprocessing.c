/* End to end: CPython's own test of multiprocessing passes in a worker under the default
 * seccomp profile and the device filter. Host only (tests/run-v2.sh leaves it out): it takes
 * minutes here and would take an hour in the emulated v2 guest, and nothing in it depends on
 * the cgroup mode. */
#include "e2e/e2e.h"

#define PYTHON "/usr/bin/python3"

/* CPython's test of multiprocessing with the fork start method (Debian's
 * libpython3.11-testsuite): pipes, queues, shared memory, semaphores, managers, process pools,
 * all under the default profile and the device filter. */
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
                 "command: [" PYTHON ", -m, test, test_multiprocessing_fork]\n"
                 "resources: {worker: {cpuset: none}}\n"
                 "logs: {console: none, dir: logs}\n"
                 "timeout: 9m\n");
    int status = e2e_run(&e, 580, NULL);
    char *log = e2e_path(&e, "logs/rank-0.out");
    char *out = xt_read_file(log);
    cr_assert_eq(status, 0, "stderr:\n%s\noutput:\n%s", e.r.err, out ? out : "(none)");
    cr_assert_not_null(strstr(out, "Tests result: SUCCESS"), "%s", out);
    free(out);
    free(log);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}
