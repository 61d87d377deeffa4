/* End to end: the hang watchdog (on_failure.hang_timeout) names the worker that stopped first
 * and not one that still prints or burns CPU; a worker that SIGKILL cannot end (in a frozen v1
 * freezer cgroup) is reported unkillable, xmprun exits without it, and `xmprun gc` collects its
 * cgroup once it is gone. */
#include "e2e/e2e.h"

#include <sys/stat.h>
#include <time.h>

/* rank 0 stops first (its last output at ~0.3 s), rank 1 at ~0.6 s, both then idle: they cross
 * the 3 s limit between the same two checks, so only "the oldest progress" tells them apart. */
Test(hang, names_the_worker_that_stopped_first, .timeout = 120)
{
    struct e2e e;
    json_t *cause;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: hang\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: [sh, -c, 'if [ \"$RANK\" = 0 ]; then sleep 0.3; echo a; exec sleep 600; "
                 "else sleep 0.6; echo b; exec sleep 600; fi']\n"
                 "on_failure: {hang_timeout: 3s, grace: 1s}\n");
    cr_assert_eq(e2e_run(&e, 60, NULL), 124, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cause = json_object_get(e.rep, "root_cause");
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "timeout");
    cr_assert_eq(json_integer_value(json_object_get(e.rep, "exit_code")), 124);
    cr_assert_str_eq(e2e_str(cause, "reason"), "hung");
    cr_assert_eq(json_integer_value(json_object_get(cause, "rank")), 0);
    /* Where it was: the stacks taken before the stop name its innermost frame. */
    cr_assert(strncmp(e2e_str(cause, "message"),
                      "worker 0 (cpu) hung: no output and no CPU time for 3s, in `", 58) == 0,
              "%s", e2e_str(cause, "message"));
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 0), "state"), "hung");
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 1), "state"), "stopped_by_xmprun");
    cr_assert_lt(e2e_duration(&e), 10.0);
    cr_assert_not_null(strstr(e.r.err, "root cause: worker 0 (cpu) hung"), "%s", e.r.err);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* Rank 0 works for about 1.5 s the way `first` says, then hangs; rank 1 keeps going the way
 * `other` says, and is not the one called hung although its silence (or its idle CPU) alone
 * would reach the limit first. Rank 0 shows its work the other way than rank 1, so that the
 * rank 1 of a watchdog blind to that kind of progress would be the older. */
static void
other_is_not_hung(const char *first, const char *other, const char *cgroups)
{
    struct e2e e;
    char *text = NULL;
    json_t *cause;

    e2e_init(&e);
    cr_assert_gt(asprintf(&text,
                          "version: 1\n"
                          "name: busy\n"
                          "workers: 2\n"
                          "devices: {kind: cpu}\n"
                          "isolation: {cgroups: %s}\n"
                          "command: [sh, -c, 'if [ \"$RANK\" = 0 ]; then %s; exec sleep 600; else "
                          "%s; fi']\n"
                          "on_failure: {hang_timeout: 3s, grace: 1s}\n",
                          cgroups, first, other),
                 0);
    e2e_set_spec(&e, text);
    cr_assert_eq(e2e_run(&e, 60, NULL), 124, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    cause = json_object_get(e.rep, "root_cause");
    cr_assert_str_eq(e2e_str(cause, "reason"), "hung");
    cr_assert_eq(json_integer_value(json_object_get(cause, "rank")), 0, "%s",
                 e2e_str(cause, "message"));
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 0), "state"), "hung");
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 1), "state"), "stopped_by_xmprun");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* Output alone is progress: without cgroups, a Python loop that prints every second uses too
 * little CPU for /proc's clock ticks to show. Rank 0 burns CPU, silently, for 1.5 s once rank 1's
 * loop has started (its file `ready`), then hangs: rank 1's start-up, slow on a loaded machine,
 * is over before rank 0's last progress, so a watchdog blind to output names rank 1. */
Test(hang, a_worker_that_prints_is_not_hung, .timeout = 120)
{
    other_is_not_hung(
        "while [ ! -e ready ]; do sleep 0.1; done; timeout 1.5 sh -c \"while :; do :; "
        "done\"",
        "exec /usr/bin/python3 -c \"import time; open(''ready'', ''w'').close(); "
        "[(print(1, flush=True), time.sleep(1)) for _ in iter(int, 1)]\"",
        "off");
}

/* CPU time alone is progress: a silent busy loop, counted by its cgroup (rank 0 prints,
 * without much CPU, before it hangs). */
Test(hang, a_worker_that_burns_cpu_is_not_hung, .timeout = 120)
{
    other_is_not_hung("for i in 1 2 3 4 5; do echo step $i; sleep 0.3; done", "while :; do :; done",
                      "required");
}

/* The test's own cgroup in the v1 freezer hierarchy, or NULL where there is none (pure v2). */
static char *
own_freezer_dir(void)
{
    char *text = xt_read_file("/proc/self/cgroup"), *line, *save = NULL, *dir = NULL;
    struct stat st;

    if (text == NULL || stat("/sys/fs/cgroup/freezer/freezer.state", &st) == 0 ||
        stat("/sys/fs/cgroup/freezer", &st) != 0) {
        free(text);
        return NULL;
    }
    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        char *f = strstr(line, ":freezer:");
        if (f != NULL) {
            cr_assert_gt(
                asprintf(&dir, "/sys/fs/cgroup/freezer%s", strcmp(f + 9, "/") ? f + 9 : ""), 0);
            break;
        }
    }
    free(text);
    return dir;
}

static void
write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "open %s: %s", path, strerror(errno));
    fputs(text, f);
    cr_assert_eq(fclose(f), 0, "write %s: %s", path, strerror(errno));
}

static size_t
count_state_files(const struct e2e *e)
{
    char *state = e2e_path(e, "state");
    DIR *d = opendir(state);
    struct dirent *de;
    size_t n = 0;

    while (d != NULL && (de = readdir(d)) != NULL)
        n += de->d_name[0] != '.';
    if (d != NULL)
        closedir(d);
    free(state);
    return n;
}

/* Runs after the test even when it failed half way: the test's freezer cgroup is thawed (its
 * task then dies of the SIGKILL it holds, or is killed here) and removed, never left frozen. */
static void
thaw_test_freezer(void)
{
    char *base = own_freezer_dir(), *frz = NULL, *path = NULL, *procs;

    if (base == NULL || asprintf(&frz, "%s/xmp-test-freeze-%d", base, (int)getpid()) < 0) {
        free(base);
        return;
    }
    if (asprintf(&path, "%s/freezer.state", frz) > 0 && access(path, F_OK) == 0) {
        FILE *f = fopen(path, "w");
        if (f != NULL) {
            fputs("THAWED\n", f);
            fclose(f);
        }
        free(path);
        path = NULL;
        for (int i = 0; i < 500 && rmdir(frz) < 0 && errno == EBUSY; i++) {
            if (asprintf(&path, "%s/cgroup.procs", frz) > 0 && (procs = xt_read_file(path))) {
                for (char *p = procs, *end; *p != '\0'; p = end) {
                    long pid = strtol(p, &end, 10);
                    if (end == p)
                        break;
                    kill((pid_t)pid, SIGKILL);
                }
                free(procs);
            }
            free(path);
            path = NULL;
            usleep(10000);
        }
    }
    free(path);
    free(frz);
    free(base);
}

/* The worker moves itself into a v1 freezer cgroup the test made and freezes it: a frozen task
 * does not die of SIGKILL until it is thawed (a task in D state on a GPU, NFS or RDMA wait
 * stands as still). cgroup v2's cgroup.freeze lets SIGKILL through, so there is no such test
 * in a pure v2 guest. */
Test(hang, an_unkillable_worker_is_left_to_gc, .timeout = 180, .fini = thaw_test_freezer)
{
    struct e2e e;
    char *base = own_freezer_dir(), *frz = NULL, *state = NULL, *text;
    json_t *w, *u;
    pid_t pid;

    if (base == NULL || geteuid() != 0)
        cr_skip_test("no cgroup v1 freezer hierarchy to hold a task against SIGKILL (pure "
                     "cgroup v2, whose cgroup.freeze lets SIGKILL through), or not root");
    e2e_init(&e);
    cr_assert_gt(asprintf(&frz, "%s/xmp-test-freeze-%d", base, (int)getpid()), 0);
    cr_assert_eq(mkdir(frz, 0755), 0, "mkdir %s: %s", frz, strerror(errno));
    cr_assert_gt(asprintf(&text,
                          "version: 1\n"
                          "name: stuck\n"
                          "workers: 2\n"
                          "devices: {kind: cpu}\n"
                          "command: [sh, -c, 'if [ \"$RANK\" = 1 ]; then echo $$ > %s/cgroup.procs "
                          "&& echo FROZEN > %s/freezer.state; fi; exec sleep 600']\n"
                          "timeout: 1s\n"
                          "on_failure: {grace: 1s}\n",
                          frz, frz),
                 0);
    e2e_set_spec(&e, text);
    cr_assert_eq(e2e_run(&e, 60, NULL), 124, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    /* timeout 1 s, grace 1 s, then 5 s for SIGKILL to work: well below the minute it waited. */
    cr_assert_lt(e2e_duration(&e), 12.0);
    cr_assert_str_eq(e2e_str(json_object_get(e.rep, "root_cause"), "reason"), "timeout");
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 0), "state"), "timeout");
    w = e2e_worker(&e, 1);
    cr_assert_str_eq(e2e_str(w, "state"), "unkillable");
    u = json_object_get(w, "unkillable");
    cr_assert_str_eq(e2e_str(u, "state"), "D");
    cr_assert(json_is_string(json_object_get(u, "wchan")), "no wchan");
    cr_assert(json_array_size(json_object_get(u, "kernel_stack")) > 0, "no kernel stack");
    cr_assert_not_null(strstr(e2e_str(u, "cgroup"), "/worker-1"), "%s", e2e_str(u, "cgroup"));
    cr_assert_not_null(strstr(e2e_str(json_object_get(e.rep, "cgroup"), "note"), "xmprun gc"));
    cr_assert_not_null(strstr(e.r.err, "is left for `xmprun gc`"), "%s", e.r.err);
    pid = (pid_t)json_integer_value(json_object_get(w, "pid"));
    cr_assert(!e2e_pid_dead(pid), "the frozen worker died");
    cr_assert_eq(count_state_files(&e), 1, "the state file did not stay for gc");

    /* gc while it is still frozen: says so and keeps it for a later gc, without waiting on. */
    {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        cr_assert_neq(e2e_gc(&e), 0, "gc took a cgroup it could not empty:\n%s", e.r.err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        cr_assert_lt(t1.tv_sec - t0.tv_sec, 15);
        cr_assert_eq(count_state_files(&e), 1, "gc dropped the state file:\n%s", e.r.err);
    }

    /* Thawed, it dies of the SIGKILL it holds; gc then removes everything. */
    cr_assert_gt(asprintf(&state, "%s/freezer.state", frz), 0);
    write_text(state, "THAWED\n");
    for (int i = 0; i < 500 && !e2e_pid_dead(pid); i++)
        usleep(10000);
    cr_assert(e2e_pid_dead(pid), "the thawed worker %d is still alive", (int)pid);
    cr_assert_eq(e2e_gc(&e), 0, "gc failed:\n%s", e.r.err);
    cr_assert_eq(rmdir(frz), 0, "rmdir %s: %s", frz, strerror(errno));
    cr_assert(access(frz, F_OK) != 0, "the test's freezer cgroup %s is left", frz);
    e2e_assert_clean(&e);
    free(state);
    free(frz);
    free(base);
    e2e_fini(&e);
}
