/* End to end: the isolation a worker runs under (SPEC.md sections 1 and 7). Under the default
 * seccomp profile the calls Docker denies fail with EPERM, also through the i386 ABI; under
 * strict a forbidden call kills the worker and the report says so; a profile file with a typo
 * is refused with its position; rlimits and the user drop are what the worker sees. The device
 * filter (isolation.devices) has its own file, test_device_filter.c. */
#include "e2e/e2e.h"

#include <pwd.h>
#include <regex.h>

static bool
matches(const char *text, const char *pattern)
{
    regex_t re;
    cr_assert_eq(regcomp(&re, pattern, REG_EXTENDED | REG_NEWLINE | REG_NOSUB), 0);
    bool found = regexec(&re, text, 0, NULL, 0) == 0;
    regfree(&re);
    return found;
}

/* The worker's output line "[0] syscall NAME=RESULT" carries RESULT. */
static void
expect_line(const struct e2e *e, const char *line)
{
    cr_expect_not_null(strstr(e->r.out, line), "expected \"%s\" in:\n%s\nstderr:\n%s", line,
                       e->r.out, e->r.err);
}

Test(isolation, default_profile_denies_with_eperm, .timeout = 60)
{
    struct e2e e;
    e2e_init(&e);
    /* No isolation section: seccomp default is every job's default. */
    e2e_spec(&e, "version: 1\n"
                 "name: seccomp-default\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: [%1$s, syscall, unshare, mount, kexec_load, init_module, keyctl, "
                 "ptrace, personality, vsock, clone3, getpid]\n");
    cr_assert_eq(e2e_run(&e, 30, NULL), 0, "stderr:\n%s", e.r.err);
    expect_line(&e, "[0] syscall unshare=EPERM");
    expect_line(&e, "[0] syscall mount=EPERM");
    expect_line(&e, "[0] syscall kexec_load=EPERM");
    expect_line(&e, "[0] syscall init_module=EPERM");
    expect_line(&e, "[0] syscall keyctl=EPERM");
    /* As Docker, ptrace stays (sanitizers and debuggers need it); the target does not exist. */
    expect_line(&e, "[0] syscall ptrace=ESRCH");
    expect_line(&e, "[0] syscall personality=EPERM");
    expect_line(&e, "[0] syscall vsock=EPERM");
    /* As Docker: clone3 says ENOSYS so that glibc falls back to clone. */
    expect_line(&e, "[0] syscall clone3=ENOSYS");
    expect_line(&e, "[0] syscall getpid=ok");
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "succeeded");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* The i386 ABI (int 0x80 from a 64-bit worker) and the x32 ABI are closed: a call through
 * either kills the worker under the default profile, so no 32-bit call slips past the 64-bit
 * rules; the report names the call. With seccomp off the very same calls get through (so the
 * probe does reach the kernel). */
Test(isolation, i386_and_x32_calls_do_not_slip_past, .timeout = 60)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: seccomp-int80\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: [%1$s, int80, unshare, getpid]\n");
    cr_assert_eq(e2e_run(&e, 30, "--set", "isolation.seccomp=off", NULL), 0, "stderr:\n%s",
                 e.r.err);
    if (strstr(e.r.out, "int80 getpid=ENOSYS") != NULL)
        cr_skip_test("this kernel has no i386 ABI (ia32_emulation off): nothing to slip past");
    expect_line(&e, "[0] int80 unshare=ok");
    cr_assert_eq(e2e_run(&e, 30, NULL), 128 + SIGSYS, "stderr:\n%s", e.r.err);
    cr_assert_null(strstr(e.r.out, "int80 unshare="), "%s", e.r.out);
    e2e_load_report(&e);
    const char *msg = e2e_str(json_object_get(e.rep, "root_cause"), "message");
    cr_assert_not_null(strstr(msg, "worker 0 (cpu) was killed by its seccomp profile (default)"),
                       "%s", msg);
    if (geteuid() == 0)
        cr_expect_not_null(strstr(msg, "for calling `unshare`"), "%s", msg);

    /* The x32 bit on a 64-bit number: the filter sees it whether or not the kernel has x32. */
    e2e_spec(&e, "version: 1\n"
                 "name: seccomp-x32\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: [%1$s, x32, unshare]\n");
    cr_assert_eq(e2e_run(&e, 30, NULL), 128 + SIGSYS, "stderr:\n%s", e.r.err);
    cr_assert_eq(e2e_run(&e, 30, "--set", "isolation.seccomp=off", NULL), 0, "stderr:\n%s",
                 e.r.err);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(isolation, strict_kills_and_names_the_call, .timeout = 60)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: seccomp-strict\n"
                 "workers: 2\n"
                 "devices: {kind: cpu}\n"
                 "command: 'if [ \"$RANK\" = 1 ]; then exec %1$s syscall ptrace; fi; "
                 "exec %1$s sleep 30'\n"
                 "isolation: {seccomp: strict}\n"
                 "on_failure: {grace: 2s}\n");
    /* The shell and the probe's sleep run under strict too. */
    cr_assert_eq(e2e_run(&e, 30, NULL), 128 + SIGSYS, "stderr:\n%s", e.r.err);
    e2e_load_report(&e);
    json_t *rc = json_object_get(e.rep, "root_cause");
    cr_assert_eq(json_integer_value(json_object_get(rc, "rank")), 1);
    const char *msg = e2e_str(rc, "message");
    cr_assert_not_null(strstr(msg, "worker 1 (cpu) was killed by its seccomp profile (strict)"),
                       "%s", msg);
    /* The call's name comes from the kernel's audit record, where it can be read (root). */
    if (geteuid() == 0)
        cr_expect_not_null(strstr(msg, "for calling `ptrace`"), "%s", msg);
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 1), "signal"), "SIGSYS");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(isolation, profile_file_typo_is_a_spec_error, .timeout = 60)
{
    struct e2e e;
    e2e_init(&e);
    char *profile = xt_write_file(e.dir, "profile.yaml",
                                  "default_action: allow\n"
                                  "syscalls:\n"
                                  "  - names: [mount, ptrac]\n"
                                  "    action: kill\n");
    e2e_spec(&e, "version: 1\n"
                 "name: seccomp-typo\n"
                 "command: [%1$s, exit, '0']\n"
                 "isolation: {seccomp: profile.yaml}\n");
    cr_assert_eq(e2e_run(&e, 30, NULL), 2, "stderr:\n%s", e.r.err);
    char want[4200];
    snprintf(want, sizeof(want),
             "%s:3:20: syscalls[0].names[1]: unknown syscall \"ptrac\" (did you mean "
             "\"ptrace\"?)",
             profile);
    cr_assert_not_null(strstr(e.r.err, want), "%s", e.r.err);
    /* Nothing was started, so no report either (as for any spec error). */
    cr_assert_neq(access(e.report, F_OK), 0);
    free(profile);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(isolation, profile_file_rules_apply, .timeout = 60)
{
    struct e2e e;
    e2e_init(&e);
    free(xt_write_file(e.dir, "profile.yaml",
                       "default_action: allow\n"
                       "syscalls:\n"
                       "  - {names: [unshare], action: errno, errno: ENOSPC}\n"
                       "  - {names: [mount], action: errno}\n"
                       "  - {names: [ptrace], action: kill}\n"));
    e2e_spec(&e, "version: 1\n"
                 "name: seccomp-file\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: [%1$s, syscall, unshare, mount, keyctl, ptrace]\n"
                 "isolation: {seccomp: profile.yaml}\n");
    cr_assert_eq(e2e_run(&e, 30, NULL), 128 + SIGSYS, "stderr:\n%s", e.r.err);
    expect_line(&e, "[0] syscall unshare=ENOSPC");
    expect_line(&e, "[0] syscall mount=EPERM");
    expect_line(&e, "[0] syscall keyctl=ok");
    e2e_load_report(&e);
    const char *msg = e2e_str(json_object_get(e.rep, "root_cause"), "message");
    cr_assert_not_null(strstr(msg, "was killed by its seccomp profile ("), "%s", msg);
    cr_assert_not_null(strstr(msg, "profile.yaml)"), "%s", msg);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* resources.worker.rlimits as the worker sees them in /proc/self/limits. */
Test(isolation, rlimits_reach_the_worker, .timeout = 60)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: rlimits\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: 'grep -E \"^Max (open files|locked memory|core file size)\" "
                 "/proc/self/limits'\n"
                 "resources: {worker: {rlimits: {nofile: 4321, memlock: 4096, core: 0}}}\n");
    cr_assert_eq(e2e_run(&e, 30, NULL), 0, "stderr:\n%s", e.r.err);
    cr_assert(matches(e.r.out, "Max open files +4321 +4321 +files"), "%s", e.r.out);
    cr_assert(matches(e.r.out, "Max locked memory +4096 +4096 +bytes"), "%s", e.r.out);
    cr_assert(matches(e.r.out, "Max core file size +0 +0 +bytes"), "%s", e.r.out);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* A limit the kernel refuses (nofile above fs.nr_open, refused even to root) is the worker's
 * setup failure with the reason, not a worker that runs without it. */
Test(isolation, rlimit_refused_says_why, .timeout = 60)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: rlimit-hard\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: [%1$s, exit, '0']\n"
                 "resources: {worker: {rlimits: {nofile: 2147483648}}}\n");
    cr_assert_eq(e2e_run(&e, 30, NULL), 125, "stderr:\n%s", e.r.err);
    cr_assert_not_null(strstr(e.r.err, "could not start: rlimits.nofile: cannot raise it (the "
                                       "hard limit is "),
                       "%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e2e_worker(&e, 0), "state"), "failed_to_start");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

/* A worker as nobody: its ids and HOME are nobody's, its error file (in xmprun's run dir) is
 * writable, and xmprun still writes the logs and the report. */
Test(isolation, worker_runs_as_nobody, .timeout = 60)
{
    struct e2e e;
    struct passwd *pw = getpwnam("nobody");
    if (geteuid() != 0)
        cr_skip_test("isolation.user needs root");
    cr_assert_not_null(pw);
    e2e_init(&e);
    /* The test dir is private to root; the worker must be able to reach its workdir. */
    chmod(e.dir, 0755);
    e2e_spec(&e, "version: 1\n"
                 "name: as-nobody\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: 'echo ids=$(id -u):$(id -g) home=$HOME; "
                 "echo oops > \"$TORCHELASTIC_ERROR_FILE\" && echo errorfile=ok; exit 3'\n"
                 "isolation: {user: nobody}\n"
                 "logs: {dir: %2$s/logs}\n");
    cr_assert_eq(e2e_run(&e, 30, NULL), 3, "stderr:\n%s", e.r.err);
    char want[256];
    snprintf(want, sizeof(want), "[0] ids=%u:%u home=%s", (unsigned)pw->pw_uid,
             (unsigned)pw->pw_gid, pw->pw_dir);
    expect_line(&e, want);
    expect_line(&e, "[0] errorfile=ok");
    e2e_load_report(&e);
    cr_assert_eq(json_integer_value(json_object_get(e2e_worker(&e, 0), "exit_code")), 3);
    char *log = e2e_path(&e, "logs/rank-0.out");
    struct stat st;
    cr_assert_eq(stat(log, &st), 0, "no log %s", log);
    cr_assert_eq(st.st_uid, 0, "the log is xmprun's, not the worker's");
    free(log);
    e2e_assert_clean(&e);
    e2e_fini(&e);
}

Test(isolation, user_needs_root, .timeout = 60)
{
    struct e2e e;
    e2e_init(&e);
    e2e_spec(&e, "version: 1\n"
                 "name: user-not-root\n"
                 "workers: 1\n"
                 "devices: {kind: cpu}\n"
                 "command: [%1$s, exit, '0']\n"
                 "isolation: {user: no-such-user-xmprun}\n");
    cr_assert_eq(e2e_run(&e, 30, NULL), 125, "stderr:\n%s", e.r.err);
    if (geteuid() == 0)
        cr_assert_not_null(
            strstr(e.r.err, "isolation.user: no user named `no-such-user-xmprun` on this host"),
            "%s", e.r.err);
    else
        cr_assert_not_null(strstr(e.r.err, "needs xmprun to run as root"), "%s", e.r.err);
    e2e_load_report(&e);
    cr_assert_str_eq(e2e_str(e.rep, "outcome"), "setup_failed");
    e2e_assert_clean(&e);
    e2e_fini(&e);
}
