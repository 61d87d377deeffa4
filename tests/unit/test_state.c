/* State files and the orphan collector: the owner's identity is pid plus start time, a dead
 * owner's workers are killed (but never a process whose start time differs: a recycled pid),
 * a live owner's job is left alone. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "helpers/testlib.h"
#include "isolate/proc.h"
#include "runner/run/state.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <jansson.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

Test(state, start_time_identifies_a_process)
{
    unsigned long long a = 0, b = 0;
    cr_assert_eq(xmp_proc_start_time(getpid(), &a), 0);
    cr_assert_eq(xmp_proc_start_time(getpid(), &b), 0);
    cr_assert_eq(a, b);
    cr_assert_gt(a, 0);
    cr_assert_eq(xmp_proc_start_time(getppid(), &b), 0);
    cr_assert_leq(b, a);
    cr_assert_eq(xmp_proc_start_time(4194304 + 1, &b), -1);
}

Test(state, dir_from_environment)
{
    char *env[] = {"HOME=/root", "XMPRUN_STATE_DIR=/tmp/x", NULL};
    char *none[] = {"HOME=/root", NULL};
    char buf[512];
    cr_assert_str_eq(xmp_state_dir(env, buf, sizeof(buf)), "/tmp/x");
    if (geteuid() == 0)
        cr_assert_str_eq(xmp_state_dir(none, buf, sizeof(buf)), "/run/xmprun");
}

/* uid 0 in a user namespace of its own (rootless Podman, Apptainer's fakeroot, unshare
 * --map-root-user) is not the host's root: /run/xmprun there is the host's, not its own, so it
 * gets the per-uid directory a user gets. */
Test(state, root_of_a_user_namespace_is_not_the_hosts, .timeout = 10)
{
    char *none[] = {"HOME=/", NULL};
    pid_t pid;
    int status = 0;

    if (geteuid() != 0)
        cr_skip_test("needs root to map uid 0 into a new user namespace");
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        char buf[512];
        int fd;
        if (unshare(CLONE_NEWUSER) < 0)
            _exit(77);
        fd = open("/proc/self/uid_map", O_WRONLY);
        if (fd < 0 || write(fd, "0 0 1\n", 6) != 6 || geteuid() != 0)
            _exit(78);
        _exit(strcmp(xmp_state_dir(none, buf, sizeof(buf)), "/tmp/xmprun-0") == 0 ? 0 : 1);
    }
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
        cr_skip_test("no user namespaces here");
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
}

/* A user who is not root gets a directory of their own: $XDG_RUNTIME_DIR/xmprun when that is
 * theirs, else /tmp/xmprun-<uid>, which must be theirs and closed to others before state is
 * kept there (another user could otherwise plant state files for gc to act on). */
Test(state, users_get_a_directory_of_their_own, .timeout = 10)
{
    const uid_t uid = 65534;
    char *xdg = xt_tmpdir(), buf[512], env_xdg[600], tmpdir[64];
    char *with_xdg[2] = {env_xdg, NULL}, *none[] = {"HOME=/", NULL};
    struct xmp_error err = {0};
    struct stat st;

    if (geteuid() != 0)
        cr_skip_test("needs root to act as another uid");
    snprintf(env_xdg, sizeof(env_xdg), "XDG_RUNTIME_DIR=%s", xdg);
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/xmprun-%u", (unsigned)uid);
    cr_assert_neq(stat(tmpdir, &st), 0, "%s exists already", tmpdir);
    cr_assert_eq(chown(xdg, uid, uid), 0);
    cr_assert_eq(seteuid(uid), 0);
    snprintf(buf, sizeof(buf), "%s/xmprun", xdg);
    char expect[512];
    snprintf(expect, sizeof(expect), "%s", buf);
    cr_expect_str_eq(xmp_state_dir(with_xdg, buf, sizeof(buf)), expect);
    cr_expect_str_eq(xmp_state_dir(none, buf, sizeof(buf)), tmpdir);
    /* The per-uid directory is made 0700 and used. */
    cr_expect_eq(xmp_state_write(tmpdir, "xmprun-u-1-cccccc", XMP_CGROUP_MODE_NONE, NULL, NULL, 0,
                                 NULL, NULL, NULL, 0, &err),
                 0, "%s", err.msg);
    cr_expect_eq(stat(tmpdir, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0700);
    xmp_state_remove(tmpdir, "xmprun-u-1-cccccc");
    cr_assert_eq(seteuid(0), 0);
    /* Someone else's directory at that path is refused, with the path named. */
    cr_assert_eq(chown(tmpdir, 0, 0), 0);
    cr_assert_eq(seteuid(uid), 0);
    cr_expect_eq(xmp_state_write(tmpdir, "xmprun-u-1-cccccc", XMP_CGROUP_MODE_NONE, NULL, NULL, 0,
                                 NULL, NULL, NULL, 0, &err),
                 -1);
    cr_expect(strstr(err.msg, tmpdir) != NULL && strstr(err.msg, "XMPRUN_STATE_DIR") != NULL, "%s",
              err.msg);
    cr_assert_eq(seteuid(0), 0);
    rmdir(tmpdir);
    xt_tmpdir_remove(xdg);
    free(xdg);
}

static pid_t
start_sleeper(void)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        execl("/bin/sleep", "sleep", "30", (char *)NULL);
        _exit(127);
    }
    /* Let it reach exec, so that its start time is settled and it is a separate image. */
    usleep(50000);
    return pid;
}

static bool
exited_by_sigkill(pid_t pid)
{
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

Test(state, gc_kills_the_workers_of_a_dead_owner, .timeout = 30)
{
    char *dir = xt_tmpdir(), path[4096];
    struct xmp_error err = {0};
    pid_t worker = start_sleeper(), stranger = start_sleeper(), dead;
    unsigned long long wstart = 0, sstart = 0;
    int status;

    /* A dead owner: a child that has exited and been reaped. */
    dead = fork();
    if (dead == 0)
        _exit(0);
    waitpid(dead, &status, 0);
    cr_assert_eq(xmp_proc_start_time(worker, &wstart), 0);
    cr_assert_eq(xmp_proc_start_time(stranger, &sstart), 0);

    snprintf(path, sizeof(path), "%s/xmprun-t-%d-aaaaaa.json", dir, (int)dead);
    json_t *doc = json_pack("{s:i, s:I, s:s, s:[{s:i, s:I}, {s:i, s:I}]}", "pid", (int)dead,
                            "start_time", (json_int_t)1, "cgroup_name", "xmprun-t-x-aaaaaa",
                            "workers", "pid", (int)worker, "start_time", (json_int_t)wstart, "pid",
                            (int)stranger, "start_time", (json_int_t)(sstart + 12345));
    cr_assert_eq(json_dump_file(doc, path, 0), 0);
    json_decref(doc);

    /* A live job: this process, written through the real writer. */
    cr_assert_eq(xmp_state_write(dir, "xmprun-live-1-bbbbbb", XMP_CGROUP_MODE_NONE, NULL, NULL, 0,
                                 NULL, NULL, &(struct xmp_state_proc){stranger, 0}, 1, &err),
                 0, "%s", err.msg);

    cr_assert_geq(xmp_state_gc(dir, &err), 1, "%s", err.msg);
    cr_assert(exited_by_sigkill(worker), "the dead owner's worker was not killed");
    /* The pid matched but the start time did not: not the worker, left alone. */
    cr_assert_eq(kill(stranger, 0), 0);
    kill(stranger, SIGKILL);
    waitpid(stranger, NULL, 0);

    struct stat st;
    cr_assert_neq(stat(path, &st), 0, "the dead job's state file is still there");
    snprintf(path, sizeof(path), "%s/xmprun-live-1-bbbbbb.json", dir);
    cr_assert_eq(stat(path, &st), 0, "the live job's state file was removed");
    xmp_state_remove(dir, "xmprun-live-1-bbbbbb");
    cr_assert_neq(stat(path, &st), 0);
    xt_tmpdir_remove(dir);
    free(dir);
}
