/* Spawning without cgroups: PATH resolution, the exec-failure handshake (127/126 and the
 * message), the environment and argv reaching the child, its own process group, affinity and
 * stdout through a pipe. Each test forks real children (Criterion isolates tests in processes). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "isolate/proc.h"
#include "runner/run/spawn.h"
#include "runner/run/state.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

static int
reap(const struct xmp_spawned *sp, siginfo_t *si)
{
    memset(si, 0, sizeof(*si));
    if (sp->pidfd >= 0)
        return waitid((idtype_t)P_PIDFD, (id_t)sp->pidfd, si, WEXITED);
    return waitid(P_PID, (id_t)sp->pid, si, WEXITED);
}

static void
spawn_argv(char *const *argv, char *const *envp, int out_fd, const cpu_set_t *cpus,
           struct xmp_spawned *sp)
{
    struct xmp_error err = {0};
    sigset_t mask;
    char *path = xmp_spawn_resolve(argv[0], envp);
    sigemptyset(&mask);
    struct xmp_spawn_args a = {
        .path = path,
        .argv = argv,
        .envp = envp,
        .workdir = "/",
        .cpus = cpus,
        .confine = &(struct xmp_confine){.no_new_privs = true},
        .stdout_fd = out_fd,
        .stderr_fd = -1,
        .cg = NULL,
        .sigmask = &mask,
    };
    cr_assert_eq(xmp_spawn(&a, sp, &err), 0, "%s", err.msg);
    cr_assert_eq(xmp_spawn_start(sp, a.cg, XMP_CGROUP_MODE_NONE, &err), 0, "%s", err.msg);
    cr_assert_eq(xmp_spawn_read_status(sp, true), 0);
    free(path);
}

static char *
read_all(int fd)
{
    static char buf[8192];
    size_t len = 0;
    ssize_t n;
    while ((n = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
        len += (size_t)n;
    buf[len] = '\0';
    return buf;
}

Test(spawn, resolve_uses_the_workers_path)
{
    char *env[] = {"PATH=/nonexistent:/bin:/usr/bin", NULL};
    char *p = xmp_spawn_resolve("sh", env);
    cr_assert(strcmp(p, "/bin/sh") == 0 || strcmp(p, "/usr/bin/sh") == 0, "%s", p);
    free(p);
    p = xmp_spawn_resolve("./relative", env);
    cr_assert_str_eq(p, "./relative");
    free(p);
    p = xmp_spawn_resolve("xmprun-no-such-program", env);
    cr_assert_str_eq(p, "xmprun-no-such-program");
    free(p);
}

Test(spawn, missing_program_reports_127, .timeout = 10)
{
    char *argv[] = {"xmprun-no-such-program", NULL};
    char *env[] = {"PATH=/bin", NULL};
    struct xmp_spawned sp;
    siginfo_t si;

    spawn_argv(argv, env, -1, NULL, &sp);
    cr_assert(sp.exec_failed);
    cr_assert_str_eq(sp.child_err.msg, "exec `xmprun-no-such-program`: No such file or directory");
    cr_assert_eq(reap(&sp, &si), 0);
    cr_assert_eq(si.si_code, CLD_EXITED);
    cr_assert_eq(si.si_status, 127);
}

Test(spawn, not_executable_reports_126, .timeout = 10)
{
    char path[] = "/tmp/xmprun-spawn-XXXXXX";
    int fd = mkstemp(path); /* mode 0600: no execute bit, so even root gets EACCES */
    char *argv[] = {path, NULL};
    struct xmp_spawned sp;
    siginfo_t si;

    cr_assert_geq(fd, 0);
    close(fd);
    spawn_argv(argv, NULL, -1, NULL, &sp);
    unlink(path);
    cr_assert(sp.exec_failed);
    cr_assert_not_null(strstr(sp.child_err.msg, "Permission denied"), "%s", sp.child_err.msg);
    cr_assert_eq(reap(&sp, &si), 0);
    cr_assert_eq(si.si_status, 126);
}

/* The start time xmp_spawn tells from the clock is the one /proc shows, when it tells one:
 * the state file names workers by it, and gc would leave one it got wrong alone. */
Test(spawn, start_time_matches_proc, .timeout = 20)
{
    char *argv[] = {"/bin/true", NULL};
    int known = 0;

    for (int i = 0; i < 40; i++) {
        struct xmp_spawned sp;
        unsigned long long proc = 0;
        siginfo_t si;

        spawn_argv(argv, NULL, -1, NULL, &sp);
        /* Exited or not, it is not reaped yet: /proc still shows it. */
        cr_assert_eq(xmp_proc_start_time(sp.pid, &proc), 0);
        if (sp.start_ticks != 0) {
            cr_assert_eq(sp.start_ticks, proc, "spawn %d: %llu from the clock, %llu in /proc", i,
                         sp.start_ticks, proc);
            known++;
        }
        cr_assert_eq(reap(&sp, &si), 0);
        close(sp.pidfd);
    }
    /* Unknown only when a clock tick (10 ms) passed during the clone: rarely. */
    cr_assert_geq(known, 20, "the start time was known for %d of 40 workers", known);
}

Test(spawn, child_gets_env_argv_group_and_affinity, .timeout = 10)
{
    char *argv[] = {"sh", "-c",
                    "echo \"$FOO $0 $(cut -d' ' -f5 /proc/self/stat) $$\"; "
                    "grep Cpus_allowed_list /proc/self/status; "
                    "grep NoNewPrivs /proc/self/status",
                    "arg1", NULL};
    char *env[] = {"PATH=/bin:/usr/bin", "FOO=bar", NULL};
    struct xmp_spawned sp;
    siginfo_t si;
    int p[2];
    cpu_set_t one;
    char want[128];

    CPU_ZERO(&one);
    CPU_SET(0, &one);
    cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
    spawn_argv(argv, env, p[1], &one, &sp);
    close(p[1]);
    cr_assert(!sp.exec_failed, "%s", sp.child_err.msg);
    cr_assert_geq(sp.pidfd, 0);
    char *out = read_all(p[0]);
    cr_assert_eq(reap(&sp, &si), 0);
    cr_assert_eq(si.si_status, 0);
    /* "$FOO $0 <process group of cut> <pid of sh>": the worker leads its own group. */
    snprintf(want, sizeof(want), "bar arg1 %d %d\n", (int)sp.pid, (int)sp.pid);
    cr_assert(strncmp(out, want, strlen(want)) == 0, "got:\n%swant:\n%s", out, want);
    cr_assert_not_null(strstr(out, "Cpus_allowed_list:\t0\n"), "%s", out);
    cr_assert_not_null(strstr(out, "NoNewPrivs:\t1\n"), "%s", out);
}

Test(spawn, blocked_signals_are_restored, .timeout = 10)
{
    char *argv[] = {"sh", "-c", "grep -E '^Sig(Blk|Ign)' /proc/self/status", NULL};
    char *env[] = {"PATH=/bin:/usr/bin", NULL};
    struct xmp_spawned sp;
    siginfo_t si;
    sigset_t block;
    int p[2];

    /* The supervisor blocks these for its signalfd and ignores SIGPIPE; workers must not
     * inherit either. */
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigprocmask(SIG_BLOCK, &block, NULL);
    signal(SIGPIPE, SIG_IGN);
    cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
    spawn_argv(argv, env, p[1], NULL, &sp);
    close(p[1]);
    char *out = read_all(p[0]);
    cr_assert_eq(reap(&sp, &si), 0);
    cr_assert_not_null(strstr(out, "SigBlk:\t0000000000000000"), "%s", out);
    /* sh itself may ignore some signals, but never SIGPIPE (bit 13) unless inherited. */
    const char *ign = strstr(out, "SigIgn:\t");
    cr_assert_not_null(ign);
    unsigned long long mask = strtoull(ign + 8, NULL, 16);
    cr_assert_eq(mask & (1ULL << (SIGPIPE - 1)), 0, "%s", out);
}

/* Where clone3 is missing (old kernels, or a seccomp profile such as older Docker defaults
 * that returns ENOSYS), spawning falls back to fork + pidfd_open and still works. */
Test(spawn, falls_back_to_fork_without_clone3, .timeout = 10)
{
    char *argv[] = {"sh", "-c", "echo fallback $$", NULL};
    char *env[] = {"PATH=/bin:/usr/bin", NULL};
    struct xmp_spawned sp;
    siginfo_t si;
    char want[64];
    int p[2];
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);

    cr_assert_not_null(ctx);
    cr_assert_eq(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0), 0);
    cr_assert_eq(seccomp_load(ctx), 0);
    seccomp_release(ctx);
    cr_assert_eq(syscall(SYS_clone3, NULL, 0), -1);
    cr_assert_eq(errno, ENOSYS);

    cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
    spawn_argv(argv, env, p[1], NULL, &sp);
    close(p[1]);
    cr_assert(!sp.exec_failed, "%s", sp.child_err.msg);
    cr_assert_geq(sp.pidfd, 0, "no pidfd from pidfd_open");
    char *out = read_all(p[0]);
    cr_assert_eq(reap(&sp, &si), 0);
    cr_assert_eq(si.si_status, 0);
    snprintf(want, sizeof(want), "fallback %d\n", (int)sp.pid);
    cr_assert_str_eq(out, want);
}
