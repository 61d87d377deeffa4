/* End to end: `xmprun gc` cleans up after an xmprun that was SIGKILLed (no chance to clean up
 * itself): its cgroups, its state file and the grandchild that escaped with setsid(). */
#include "e2e/e2e.h"

#include <errno.h>
#include <sys/stat.h>

static bool
cgroup_exists(const char *name)
{
    static char dirs[16][4096];
    size_t n = e2e_own_cgroup_dirs(dirs, 16);
    for (size_t i = 0; i < n; i++) {
        char path[4400];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", dirs[i], name);
        if (stat(path, &st) == 0)
            return true;
    }
    return false;
}

/* What a SIGKILLed xmprun left is collected by `xmprun gc`, or (by_next_job) by the start of the
 * next job with the same state directory, which runs that gc beside its own setup. */
static void
sigkilled_xmprun_is_collected(bool by_next_job)
{
    struct e2e e;
    char name[256], *text;
    pid_t owner, orphan;

    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: killed\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: ['%1$s', setsid-orphan, '%2$s/orphan.pid', wait]\n");
    /* Start xmprun, wait for the grandchild, SIGKILL xmprun, print its pid. */
    int status = e2e_sh(&e, 90,
                        "\"$XMPRUN\" --report \"$REPORT\" \"$SPEC\" >/dev/null & pid=$!; "
                        "i=0; while [ ! -s \"$DIR/orphan.pid\" ] && [ $i -lt 200 ]; do "
                        "sleep 0.05; i=$((i+1)); done; sleep 0.2; kill -KILL $pid; wait $pid; "
                        "echo $pid");
    cr_assert_eq(status, 0, "stderr:\n%s", e.r.err);
    owner = (pid_t)atoi(e.r.out);
    cr_assert_gt(owner, 0);
    text = xt_read_file(e2e_path(&e, "orphan.pid"));
    cr_assert_not_null(text);
    orphan = (pid_t)atoi(text);
    free(text);

    /* What a SIGKILLed xmprun leaves: its job cgroup (holding the setsid grandchild, which
     * ignores SIGTERM) and its state file. */
    DIR *d = opendir(e2e_path(&e, "state"));
    struct dirent *de;
    name[0] = '\0';
    while (d != NULL && (de = readdir(d)) != NULL)
        if (de->d_name[0] != '.') {
            snprintf(name, sizeof(name), "%.*s", (int)(strlen(de->d_name) - 5), de->d_name);
        }
    if (d != NULL)
        closedir(d);
    cr_assert_neq(name[0], '\0', "no state file was written");
    cr_assert(cgroup_exists(name), "the job cgroup %s was already gone", name);
    cr_assert(!e2e_pid_dead(orphan), "the grandchild is already dead");

    char *next = xt_write_file(e.dir, "next.yaml",
                               "version: 1\nname: next\nworkers: 1\ndevices: {kind: cpu}\n"
                               "command: [/bin/true]\nreport: next.report.json\n");
    char *gc_argv[] = {(char *)xt_bin(), "gc", NULL};
    char *job_argv[] = {(char *)xt_bin(), "-q", next, NULL};
    char *envp[] = {e.state_env, NULL};
    xt_result_free(&e.r);
    cr_assert_eq(xt_run(&e.r, by_next_job ? job_argv : gc_argv, envp, e.dir, 60), 0);
    cr_assert_eq(e.r.status, 0, "%s failed:\n%s", by_next_job ? "the next job" : "gc", e.r.err);
    free(next);

    cr_assert(!cgroup_exists(name), "gc left the cgroup %s", name);
    /* SIGKILL is delivered at once but the process may take a moment to go. */
    for (int i = 0; i < 100 && !e2e_pid_dead(orphan); i++)
        usleep(20000);
    cr_assert(e2e_pid_dead(orphan), "gc left the grandchild %d alive", (int)orphan);
    e2e_assert_no_cgroups(owner);
    /* The job's scratch directory (error files) went with it. */
    const char *tmp = getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp";
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "xmprun-killed-%d-", (int)owner);
    d = opendir(tmp);
    while (d != NULL && (de = readdir(d)) != NULL)
        cr_assert(strncmp(de->d_name, prefix, strlen(prefix)) != 0, "gc left %s/%s", tmp,
                  de->d_name);
    if (d != NULL)
        closedir(d);
    d = opendir(e2e_path(&e, "state"));
    while (d != NULL && (de = readdir(d)) != NULL)
        cr_assert(de->d_name[0] == '.', "gc left the state file %s", de->d_name);
    if (d != NULL)
        closedir(d);
    e2e_fini(&e);
}

Test(gc, cleans_up_after_a_sigkilled_xmprun, .timeout = 120)
{
    if (!e2e_can_cgroup())
        cr_skip_test("needs root or a delegated cgroup");
    sigkilled_xmprun_is_collected(false);
}

Test(gc, the_next_job_cleans_up_after_a_sigkilled_xmprun, .timeout = 120)
{
    if (!e2e_can_cgroup())
        cr_skip_test("needs root or a delegated cgroup");
    sigkilled_xmprun_is_collected(true);
}

/* A job cgroup with no state file is judged by the owner pid in its name. From inside a pid
 * namespace that pid may just be invisible, so gc there must leave it alone; from the namespace
 * the pid belongs to, a dead owner means an orphan. */
Test(gc, judges_owner_pids_only_where_it_can_see_them, .timeout = 120)
{
    static char dirs[16][4096];
    struct e2e e;
    char name[64], path[4400];
    size_t all = e2e_own_cgroup_dirs(dirs, 16), n = 0;
    pid_t dead = 4194000;
    struct xt_result probe;
    char *unshare_argv[] = {"/bin/sh", "-c", "unshare -fp --mount-proc true", NULL};

    if (!e2e_can_cgroup())
        cr_skip_test("needs root or a delegated cgroup");
    if (xt_run(&probe, unshare_argv, NULL, NULL, 30) < 0 || probe.status != 0)
        cr_skip_test("needs unshare -p");
    xt_result_free(&probe);
    while (dead > 1000 && !(kill(dead, 0) < 0 && errno == ESRCH))
        dead--;
    /* The fake job goes where xmprun keeps jobs on every layout: the cgroup2 tree (pure v2, or
     * hybrid's tracking tree) and the v1 pids hierarchy; not in hierarchies it never uses. */
    for (size_t i = 0; i < all; i++)
        if (all == 1 || strstr(dirs[i], "/unified") != NULL || strstr(dirs[i], "/pids") != NULL)
            memmove(dirs[n++], dirs[i], sizeof(dirs[i]));
    cr_assert_gt(n, 0);
    e2e_init(&e);
    snprintf(name, sizeof(name), "xmprun-fake-%d-abcdef", (int)dead);
    for (size_t i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/%s", dirs[i], name);
        cr_assert(mkdir(path, 0755) == 0 || errno == EEXIST, "mkdir %s: %s", path, strerror(errno));
    }
    int status = e2e_sh(&e, 60, "unshare -fp --mount-proc \"$XMPRUN\" gc");
    cr_assert_eq(status, 0, "stderr:\n%s", e.r.err);
    cr_assert(cgroup_exists(name), "gc in a pid namespace took %s", name);

    status = e2e_sh(&e, 60, "\"$XMPRUN\" gc");
    bool gone = !cgroup_exists(name);
    for (size_t i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/%s", dirs[i], name);
        rmdir(path); /* so that a failing assertion below leaves nothing behind */
    }
    cr_assert_eq(status, 0, "stderr:\n%s", e.r.err);
    cr_assert(gone, "gc left the orphan %s of dead pid %d:\n%s", name, (int)dead, e.r.err);
    e2e_fini(&e);
}

/* xmprun SIGKILLed in a cgroup namespace of its own with fresh cgroup mounts (a Slurm step's
 * under task/cgroup, whose slurmd has both), its workers still running: its state file names
 * its directories as that namespace sees them. `xmprun gc` from outside (a login shell) finds
 * them below the visible mounts by that path, kills the workers by membership and removes every
 * directory, so that the namespace's own cgroups can go. */
Test(gc, finds_a_dead_jobs_cgroups_made_in_another_cgroup_namespace, .timeout = 120)
{
    struct e2e e;
    if (!e2e_can_cgroup() || geteuid() != 0)
        cr_skip_test("needs root");
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: gcns\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "resources: {worker: {memory: 64Mi, pids: 32}}\n"
                 "command: ['%1$s', pidfile, '%2$s/w.pid', '--', sleep, '600']\n");
    int status = e2e_run_hidden_mounts(
        &e, "", "",
        "run_xmprun & bg=$!\n"
        "for i in $(seq 200); do [ -s $DIR/w.pid ] && break; sleep 0.05; done\n"
        /* xmprun is the worker's parent */
        "x=$(awk '{print $4}' /proc/$(cat $DIR/w.pid)/stat); kill -9 $x; wait $bg\n"
        "left=$(find /sys/fs/cgroup -type d -name 'xmprun-gcns-*' | wc -l)\n"
        "[ $left -gt 0 ] || { echo 'nothing to collect' >&2; exit 97; }\n"
        "\"$XMPRUN\" gc; rc=$?\n"
        /* (a worker killed is a zombie until PID 1 reaps it) */
        "w=$(cat $DIR/w.pid); s=$(awk '{print $3}' /proc/$w/stat 2>/dev/null)\n"
        "[ -z \"$s\" ] || [ \"$s\" = Z ] || { echo \"worker $w lives\" >&2; rc=98; }\n"
        "left=$(find /sys/fs/cgroup -type d -name 'xmprun-gcns-*')\n"
        "[ -z \"$left\" ] || { echo \"gc left $left\" >&2; rc=96; }\n"
        /* what a failed gc left goes, so that the next tests start clean */
        "for d in $left; do for p in $(find $d -name cgroup.procs -exec cat {} +); do\n"
        "  kill -9 $p; done; done; sleep 0.2\n"
        "for d in $left; do find $d -depth -type d -exec rmdir {} +; done\n");
    cr_assert_eq(status, 0, "stdout:\n%s\nstderr:\n%s", e.r.out, e.r.err);
    cr_assert_not_null(strstr(e.r.out, "cleaned up 1 orphaned job"), "%s", e.r.out);
    e2e_fini(&e);
}
