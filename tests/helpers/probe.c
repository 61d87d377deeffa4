/* probe: one multi-call worker for the e2e tests (crun's tests/init.c, libuv's spawn helpers).
 * Each subcommand does one observable thing: exit with a code, sleep, allocate and touch memory,
 * fork without end, leave a setsid() grandchild behind, print its cgroup, limits, environment or
 * affinity, flood its output, die by a signal, or write a TORCHELASTIC_ERROR_FILE. Subcommands
 * can be chained with "--": `probe pidfile F -- sleep 30`. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <linux/keyctl.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The one piece of global state: the fd the signal handler of `ignore-term` writes to. */
static int signal_log_fd = -1;

static void
note_signal(int sig)
{
    int saved = errno;
    const char *name = sig == SIGTERM ? "TERM\n" : sig == SIGINT ? "INT\n" : "HUP\n";
    if (signal_log_fd >= 0)
        (void)!write(signal_log_fd, name, strlen(name));
    errno = saved;
}

static void
usage(void)
{
    fputs("usage: probe exit N | sleep S | alloc MiB | forkbomb | setsid-orphan [PIDFILE] | "
          "ignore-term | stamp-term PREFIX | cgroup | limits | env NAME... | affinity | flood N | "
          "signal NAME | errorfile | pidfile PATH [-- CMD...] | syscall NAME... | int80 NAME... | "
          "x32 NAME... | open PATH...\n",
          stderr);
    exit(64);
}

static void
sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* `stamp-term`: the time of the SIGTERM, kept for the loop to write out. */
static volatile sig_atomic_t term_seen;
static struct timespec term_at;

static void
stamp_term(int sig)
{
    (void)sig;
    clock_gettime(CLOCK_REALTIME, &term_at);
    term_seen = 1;
}

/* Writes "<seconds>.<nanoseconds>\n" over the start of fd (clock_gettime and pwrite only, so
 * each stamp costs no fork, even in a slow emulated guest). */
static void
write_stamp(int fd, const struct timespec *ts)
{
    char buf[64];
    int n = snprintf(buf, sizeof(buf), "%lld.%09ld\n", (long long)ts->tv_sec, ts->tv_nsec);
    (void)!pwrite(fd, buf, (size_t)n, 0);
}

/* Traps SIGTERM, notes when it came in PREFIX.term, and stamps the time in PREFIX.alive every
 * 10 ms until SIGKILL ends it: PREFIX.alive - PREFIX.term is how long it lived after SIGTERM. */
static int
do_stamp_term(const char *prefix)
{
    char path[4096];
    struct sigaction sa = {.sa_handler = stamp_term};
    int alive, term;

    snprintf(path, sizeof(path), "%s.alive", prefix);
    alive = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    snprintf(path, sizeof(path), "%s.term", prefix);
    term = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (alive < 0 || term < 0)
        return 2;
    sigaction(SIGTERM, &sa, NULL);
    printf("stamping until SIGKILL\n");
    fflush(stdout);
    for (bool written = false;;) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        write_stamp(alive, &now);
        if (term_seen && !written) {
            write_stamp(term, &term_at);
            written = true;
        }
        sleep_s(0.01);
    }
}

static void
print_file(const char *label, const char *path)
{
    char buf[4096];
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    if (fgets(buf, sizeof(buf), f) != NULL) {
        buf[strcspn(buf, "\n")] = '\0';
        printf("%s=%s\n", label, buf);
    }
    fclose(f);
}

/* Prints the limit files of the cgroups this process is in, v1 and v2 names alike:
 * "memory.max=1073741824". */
static int
do_limits(void)
{
    static const char *const files[] = {"memory.max",       "memory.limit_in_bytes",
                                        "memory.high",      "memory.soft_limit_in_bytes",
                                        "memory.swap.max",  "memory.memsw.limit_in_bytes",
                                        "pids.max",         "cpu.max",
                                        "cpu.cfs_quota_us", "cpu.cfs_period_us",
                                        "cpuset.cpus",      "cpuset.cpus.effective"};
    char line[4096];
    FILE *f = fopen("/proc/self/cgroup", "r");

    if (f == NULL)
        return 1;
    while (fgets(line, sizeof(line), f) != NULL) {
        char *ctrls = strchr(line, ':'), *path;
        char dir[4096], file[4352];
        if (ctrls == NULL)
            continue;
        ctrls++;
        path = strchr(ctrls, ':');
        if (path == NULL)
            continue;
        *path++ = '\0';
        path[strcspn(path, "\n")] = '\0';
        if (ctrls[0] == '\0')
            snprintf(dir, sizeof(dir), "/sys/fs/cgroup/unified%s", path);
        else if (strncmp(ctrls, "name=", 5) == 0)
            continue;
        else
            snprintf(dir, sizeof(dir), "/sys/fs/cgroup/%s%s", strtok(ctrls, ","), path);
        if (ctrls[0] == '\0' && access("/sys/fs/cgroup/unified", F_OK) != 0)
            snprintf(dir, sizeof(dir), "/sys/fs/cgroup%s", path);
        for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
            snprintf(file, sizeof(file), "%s/%s", dir, files[i]);
            print_file(files[i], file);
        }
    }
    fclose(f);
    return 0;
}

static int
do_forkbomb(void)
{
    long forks = 0, failures = 0;
    /* Children only sleep, so that the bomb is bounded by pids.max, not by CPU time. */
    for (int i = 0; i < 100000 && failures < 200; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            sleep_s(60);
            _exit(0);
        }
        if (pid < 0)
            failures++;
        else
            forks++;
    }
    printf("forks=%ld failures=%ld\n", forks, failures);
    fflush(stdout);
    return failures > 0 ? 0 : 1;
}

/* A grandchild that leaves the process group (setsid) and ignores SIGTERM: only a cgroup kill
 * (or the subreaper) gets it. Its pid is written to pidfile so the test can check it is gone. */
static int
do_setsid_orphan(const char *pidfile, bool wait_child)
{
    int p[2];
    pid_t child;

    if (pipe(p) < 0)
        return 1;
    child = fork();
    if (child == 0) {
        setsid();
        signal(SIGTERM, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        if (fork() != 0)
            _exit(0); /* the grandchild is reparented to the subreaper */
        if (pidfile != NULL) {
            FILE *f = fopen(pidfile, "w");
            if (f != NULL) {
                fprintf(f, "%d\n", getpid());
                fclose(f);
            }
        }
        write(p[1], "x", 1);
        for (;;)
            pause();
    }
    close(p[1]);
    char c;
    read(p[0], &c, 1);
    waitpid(child, NULL, 0);
    printf("orphan ready\n");
    fflush(stdout);
    if (wait_child)
        sleep_s(60);
    return 0;
}

/* A pid no process has (above the kernel's PID_MAX_LIMIT): ptrace on it fails with ESRCH when
 * the filter lets it through, and attaches to nothing. */
#define NO_SUCH_PID 0x7ffffff0

static void
print_result(const char *what, const char *name, long rc)
{
    printf("%s %s=%s\n", what, name, rc >= 0 ? "ok" : strerrorname_np(errno));
}

/* Each call is harmless when it gets through: its arguments make it fail (or affect only this
 * process), so the printed errno tells whether the filter stopped it (EPERM) or the kernel
 * refused it on its own. */
static int
do_syscalls(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *n = argv[i];
        long rc = -1;
        errno = 0;
        if (strcmp(n, "unshare") == 0)
            rc = syscall(SYS_unshare, CLONE_NEWUSER);
        else if (strcmp(n, "mount") == 0)
            rc = syscall(SYS_mount, "none", "/nonexistent-xmprun-probe", "tmpfs", 0UL, NULL);
        else if (strcmp(n, "kexec_load") == 0)
            rc = syscall(SYS_kexec_load, 0UL, 0UL, NULL, 0xffff0000UL);
        else if (strcmp(n, "init_module") == 0)
            rc = syscall(SYS_finit_module, -1, "", 0);
        else if (strcmp(n, "keyctl") == 0)
            rc = syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0);
        else if (strcmp(n, "ptrace") == 0)
            rc = syscall(SYS_ptrace, 16 /* PTRACE_ATTACH */, NO_SUCH_PID, NULL, NULL);
        else if (strcmp(n, "personality") == 0)
            rc = syscall(SYS_personality, 0x0040000 /* ADDR_NO_RANDOMIZE */);
        else if (strcmp(n, "vsock") == 0)
            rc = syscall(SYS_socket, 40 /* AF_VSOCK */, SOCK_STREAM, 0);
        else if (strcmp(n, "clone3") == 0)
            rc = syscall(SYS_clone3, NULL, 0);
        else if (strcmp(n, "getpid") == 0)
            rc = syscall(SYS_getpid);
        else
            usage();
        print_result("syscall", n, rc);
        fflush(stdout);
    }
    return 0;
}

/* The same calls through the i386 ABI (int 0x80 from a 64-bit process) or with the x32 bit,
 * the ways a 32-bit call could slip past a filter that checks only x86-64 numbers. */
static long
int80(long nr, long a, long b)
{
#if defined(__x86_64__)
    long ret;
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(nr), "b"(a), "c"(b) : "memory");
    if (ret < 0 && ret > -4096) {
        errno = (int)-ret;
        return -1;
    }
    return ret;
#else
    (void)nr, (void)a, (void)b;
    errno = ENOSYS;
    return -1;
#endif
}

static int
do_compat(bool x32, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *n = argv[i];
        long rc;
        errno = 0;
        if (strcmp(n, "unshare") == 0)
            rc = x32 ? syscall(0x40000000L | SYS_unshare, CLONE_NEWUSER)
                     : int80(310, CLONE_NEWUSER, 0);
        else if (strcmp(n, "ptrace") == 0)
            rc = x32 ? syscall(0x40000000L | 521 /* x32 ptrace */, 16, NO_SUCH_PID, 0, 0)
                     : int80(26, 16, NO_SUCH_PID);
        else if (strcmp(n, "getpid") == 0)
            rc = x32 ? syscall(0x40000000L | SYS_getpid) : int80(20, 0, 0);
        else
            usage();
        print_result(x32 ? "x32" : "int80", n, rc);
        fflush(stdout);
    }
    return 0;
}

static int
do_open(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        int fd = open(argv[i], O_RDWR | O_CLOEXEC | O_NOCTTY);
        print_result("open", argv[i], fd);
        if (fd >= 0)
            close(fd);
    }
    return 0;
}

static int
run(int argc, char **argv)
{
    const char *cmd;

    if (argc < 1)
        usage();
    cmd = argv[0];
    if (strcmp(cmd, "exit") == 0 && argc >= 2)
        return atoi(argv[1]);
    if (strcmp(cmd, "sleep") == 0 && argc >= 2) {
        sleep_s(atof(argv[1]));
        return 0;
    }
    if (strcmp(cmd, "alloc") == 0 && argc >= 2) {
        size_t mib = (size_t)atol(argv[1]);
        char **blocks = calloc(mib > 0 ? mib : 1, sizeof(*blocks));
        if (blocks == NULL)
            return 3;
        for (size_t i = 0; i < mib; i++) {
            if ((blocks[i] = malloc(1 << 20)) == NULL)
                return 3;
            memset(blocks[i], 0x5a, 1 << 20);
        }
        printf("allocated %zu MiB\n", mib);
        fflush(stdout);
        sleep_s(argc >= 3 ? atof(argv[2]) : 30);
        /* Given back, so that a probe built with LeakSanitizer exits 0 when it ends by itself. */
        for (size_t i = 0; i < mib; i++)
            free(blocks[i]);
        free(blocks);
        return 0;
    }
    if (strcmp(cmd, "forkbomb") == 0)
        return do_forkbomb();
    if (strcmp(cmd, "setsid-orphan") == 0)
        return do_setsid_orphan(argc >= 2 ? argv[1] : NULL, argc >= 3 && !strcmp(argv[2], "wait"));
    if (strcmp(cmd, "ignore-term") == 0) {
        /* Survives the stop signals (SIGTERM, SIGINT, SIGHUP), noting each one in the file
         * $PROBE_SIGNAL_LOG names, so a test knows it arrived; only SIGKILL ends it. */
        const char *log = getenv("PROBE_SIGNAL_LOG");
        struct sigaction sa = {.sa_handler = note_signal};
        if (log != NULL)
            signal_log_fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        if (signal_log_fd >= 0)
            (void)!write(signal_log_fd, "ready\n", 6);
        printf("ignoring SIGTERM, SIGINT and SIGHUP\n");
        fflush(stdout);
        sleep_s(argc >= 2 ? atof(argv[1]) : 60);
        return 0;
    }
    if (strcmp(cmd, "stamp-term") == 0 && argc >= 2)
        return do_stamp_term(argv[1]);
    if (strcmp(cmd, "cgroup") == 0) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = fopen("/proc/self/cgroup", "r");
        if (f == NULL)
            return 1;
        while (getline(&text, &len, f) > 0)
            fputs(text, stdout);
        free(text);
        fclose(f);
        return 0;
    }
    if (strcmp(cmd, "limits") == 0)
        return do_limits();
    if (strcmp(cmd, "env") == 0) {
        for (int i = 1; i < argc; i++) {
            const char *v = getenv(argv[i]);
            printf("%s=%s\n", argv[i], v != NULL ? v : "<unset>");
        }
        return 0;
    }
    if (strcmp(cmd, "affinity") == 0) {
        cpu_set_t set;
        if (sched_getaffinity(0, sizeof(set), &set) < 0)
            return 1;
        printf("affinity=");
        for (int c = 0, first = 1; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set)) {
                printf("%s%d", first ? "" : ",", c);
                first = 0;
            }
        printf("\n");
        return 0;
    }
    if (strcmp(cmd, "flood") == 0 && argc >= 2) {
        long n = atol(argv[1]);
        for (long i = 0; i < n; i++) {
            printf("line %ld of %ld: the quick brown fox jumps over the lazy dog\n", i, n);
            if (i % 10 == 0)
                fprintf(stderr, "err %ld\n", i);
        }
        return 0;
    }
    if (strcmp(cmd, "signal") == 0 && argc >= 2) {
        const char *name = argv[1];
        if (strncmp(name, "SIG", 3) == 0)
            name += 3;
        for (int s = 1; s < NSIG; s++) {
            const char *abbrev = sigabbrev_np(s);
            if (abbrev != NULL && strcmp(abbrev, name) == 0) {
                signal(s, SIG_DFL);
                fflush(stdout);
                kill(getpid(), s);
                sleep_s(5);
                return 1;
            }
        }
        usage();
    }
    if (strcmp(cmd, "errorfile") == 0) {
        const char *path = getenv("TORCHELASTIC_ERROR_FILE");
        FILE *f = path != NULL ? fopen(path, "w") : NULL;
        if (f == NULL)
            return 2;
        fprintf(f,
                "{\"message\": {\"message\": \"RuntimeError: probe failed on purpose\", "
                "\"extraInfo\": {\"timestamp\": \"%ld\"}}}\n",
                (long)time(NULL));
        fclose(f);
        fprintf(stderr, "RuntimeError: probe failed on purpose\n");
        return 1;
    }
    if (strcmp(cmd, "syscall") == 0)
        return do_syscalls(argc, argv);
    if (strcmp(cmd, "int80") == 0 || strcmp(cmd, "x32") == 0)
        return do_compat(strcmp(cmd, "x32") == 0, argc, argv);
    if (strcmp(cmd, "open") == 0)
        return do_open(argc, argv);
    if (strcmp(cmd, "pidfile") == 0 && argc >= 2) {
        FILE *f = fopen(argv[1], "w");
        if (f != NULL) {
            fprintf(f, "%d\n", getpid());
            fclose(f);
        }
        if (argc >= 4 && strcmp(argv[2], "--") == 0)
            return run(argc - 3, argv + 3);
        return 0;
    }
    usage();
    return 64;
}

int
main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    return run(argc - 1, argv + 1);
}
