/* End to end: `xmprun gc` cleans up after an xmprun that was SIGKILLed (no chance to clean up
 * itself): its cgroups, its state file and the grandchild that escaped with setsid(). */
#include "e2e/e2e.h"

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

Test(gc, cleans_up_after_a_sigkilled_xmprun, .timeout = 120)
{
    struct e2e e;
    char name[256], *text;
    pid_t owner, orphan;

    if (!e2e_can_cgroup())
        cr_skip_test("needs root or a delegated cgroup");
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

    char *argv[] = {(char *)xt_bin(), "gc", NULL};
    char *envp[] = {e.state_env, NULL};
    xt_result_free(&e.r);
    cr_assert_eq(xt_run(&e.r, argv, envp, e.dir, 60), 0);
    cr_assert_eq(e.r.status, 0, "gc failed:\n%s", e.r.err);

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
