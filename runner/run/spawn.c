/* Starting one worker, as posix_spawn does: the child shares xmprun's memory
 * (CLONE_VM | CLONE_VFORK) while xmprun waits, so no page table is copied for it and torn down
 * again at its exec, and whether the exec worked is known when clone returns. clone3
 * (CLONE_INTO_CGROUP | CLONE_PIDFD) puts it into its cgroup2 directory before it runs a single
 * instruction; it joins the v1 hierarchies itself before exec. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/run/spawn.h"

#include "isolate/cleanup.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#define XMP_STR_(x) #x
#define XMP_STR(x)  XMP_STR_(x)

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* The signals xmprun blocks or ignores; the child puts them back to their defaults, because an
 * ignored disposition and a blocked mask both survive execve (tini's restore_signals). */
static const int reset_signals[] = {SIGCHLD, SIGINT,  SIGTERM, SIGHUP,  SIGQUIT,
                                    SIGUSR1, SIGUSR2, SIGPIPE, SIGTTOU, SIGTTIN};

char *
xmp_spawn_resolve(const char *argv0, char *const *envp)
{
    const char *path = "/usr/local/bin:/usr/bin:/bin";
    char *found_noexec = NULL;

    if (argv0 == NULL || argv0[0] == '\0' || strchr(argv0, '/') != NULL)
        return strdup(argv0 != NULL ? argv0 : "");
    for (size_t i = 0; envp != NULL && envp[i] != NULL; i++)
        if (strncmp(envp[i], "PATH=", 5) == 0)
            path = envp[i] + 5;

    for (const char *p = path; p != NULL;) {
        const char *colon = strchr(p, ':');
        size_t len = colon != NULL ? (size_t)(colon - p) : strlen(p);
        char *cand = NULL;
        struct stat st;

        /* An empty PATH element means the current directory, as for execvp. */
        if (asprintf(&cand, "%.*s%s%s", (int)len, len > 0 ? p : ".", "/", argv0) < 0)
            break;
        if (stat(cand, &st) == 0 && S_ISREG(st.st_mode)) {
            if (access(cand, X_OK) == 0) {
                free(found_noexec);
                return cand;
            }
            /* Like execvp, report "Permission denied" rather than "not found" when the only
             * match is not executable. */
            if (found_noexec == NULL)
                found_noexec = steal_pointer(&cand);
        }
        free(cand);
        p = colon != NULL ? colon + 1 : NULL;
    }
    return found_noexec != NULL ? found_noexec : strdup(argv0);
}

/* xmprun raised its own soft RLIMIT_NOFILE to the hard limit for the descriptors it holds per
 * worker; the worker gets back the limit xmprun inherited, because programs that use select()
 * or size tables by the limit misbehave above the usual 1024. */
static int
restore_inherited_nofile(const struct xmp_spawn_args *a, struct xmp_error *err)
{
    if (a->inherited_nofile != NULL && setrlimit(RLIMIT_NOFILE, a->inherited_nofile) < 0)
        return xmp_error_set(err, errno, "setrlimit(RLIMIT_NOFILE)");
    return 0;
}

/* The path in a 64-bit ELF file's PT_INTERP header (its dynamic loader), or "" if none. */
static void
elf_interpreter(int fd, char *out, size_t size)
{
    Elf64_Ehdr eh;
    Elf64_Phdr ph;

    out[0] = '\0';
    if (pread(fd, &eh, sizeof(eh), 0) != (ssize_t)sizeof(eh) ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(ph))
        return;
    for (unsigned i = 0; i < eh.e_phnum; i++) {
        if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + (Elf64_Off)i * sizeof(ph))) !=
            (ssize_t)sizeof(ph))
            return;
        if (ph.p_type != PT_INTERP)
            continue;
        size_t n = ph.p_filesz < size ? (size_t)ph.p_filesz : size - 1;
        ssize_t got = pread(fd, out, n, (off_t)ph.p_offset);
        out[got > 0 ? (size_t)got : 0] = '\0';
        return;
    }
}

/* After execve failed with ENOENT on a file that exists, what is missing is its interpreter:
 * the program of its #! line, or an ELF program's dynamic loader. Say so, rather than "No such
 * file or directory" about a file the user can see. Runs in the child: stack buffers only. */
static void
explain_missing_interpreter(const char *path, const char *shown, struct xmp_error *err)
{
    char line[256];
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

    if (fd < 0)
        return;
    n = read(fd, line, sizeof(line) - 1);
    if (n >= 4 && memcmp(line, ELFMAG, SELFMAG) == 0) {
        elf_interpreter(fd, line, sizeof(line));
        close(fd);
        if (line[0] != '\0' && access(line, F_OK) < 0)
            xmp_error_set(err, 0,
                          "exec `%s`: its ELF interpreter `%s` (the dynamic loader) was not found",
                          shown, line);
        return;
    }
    close(fd);
    if (n < 3 || line[0] != '#' || line[1] != '!')
        return;
    line[n] = '\0';
    char *interp = line + 2;
    interp += strspn(interp, " \t");
    interp[strcspn(interp, " \t\n")] = '\0';
    size_t len = strlen(interp);
    /* A script saved with Windows line endings asks the kernel for "/bin/sh\r". */
    if (len > 0 && interp[len - 1] == '\r') {
        interp[len - 1] = '\0';
        xmp_error_set(err, 0,
                      "exec `%s`: its #! line ends in a carriage return (Windows line endings), so "
                      "its interpreter `%s\\r` was not found",
                      shown, interp);
    } else if (interp[0] != '\0' && access(interp, F_OK) < 0) {
        xmp_error_set(err, 0, "exec `%s`: its interpreter `%s` (#! line) was not found", shown,
                      interp);
    }
}

void
xmp_spawn_child_fail(int fd, struct xmp_error *err, int code)
{
    ssize_t n;

    do
        n = write(fd, err, sizeof(*err));
    while (n < 0 && errno == EINTR);
    _exit(code);
}

int
xmp_spawn_child_enter(const struct xmp_spawn_args *a, int gatefd, pid_t parent,
                      struct xmp_error *err)
{
    /* A forked (start: fork) worker keeps the zygote's dispositions, as after os.fork(): its
     * runtime (Python's SIGINT and SIGPIPE handling) set them up and expects them. */
    if (a->sigmask != NULL) {
        for (size_t i = 0; i < sizeof(reset_signals) / sizeof(reset_signals[0]); i++)
            signal(reset_signals[i], SIG_DFL);
        sigprocmask(SIG_SETMASK, a->sigmask, NULL);
    }

    /* Its own process group, so that xmprun can signal the worker and everything it forks
     * (without setsid) at once, and a terminal's ^C reaches only xmprun, which forwards it. */
    if (setpgid(0, 0) < 0)
        return xmp_error_set(err, errno, "setpgid");
    /* If xmprun dies (even by SIGKILL) the worker must not run on unsupervised. The parent may
     * already have died before the prctl took effect, hence the getppid check. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
        return xmp_error_set(err, errno, "prctl(PR_SET_PDEATHSIG)");
    if (getppid() != parent)
        return xmp_error_set(err, 0, "xmprun exited while the worker was starting");
    /* The parent writes one byte once this process is in all its cgroups; EOF means it gave up
     * on the worker (and is about to kill it). */
    if (gatefd >= 0) {
        char go = 0;
        ssize_t n;
        do
            n = read(gatefd, &go, 1);
        while (n < 0 && errno == EINTR);
        if (n != 1)
            return xmp_error_set(err, 0, "xmprun did not let the worker start");
        close(gatefd);
    }
    return 0;
}

/* Closes every fd from 3 up but those in keep (which close_range cannot express in one call:
 * one call per gap). */
static void
close_all_but(const int *keep, size_t n_keep)
{
    unsigned int from = 3;

    for (;;) {
        unsigned int next = ~0U;
        for (size_t i = 0; i < n_keep; i++)
            if (keep[i] >= (int)from && (unsigned int)keep[i] < next)
                next = (unsigned int)keep[i];
        if (next > from)
            syscall(SYS_close_range, from, next == ~0U ? ~0U : next - 1, 0U);
        if (next == ~0U)
            return;
        from = next + 1;
    }
}

int
xmp_spawn_child_setup(const struct xmp_spawn_args *a, struct xmp_error *err)
{
    if (a->workdir != NULL && chdir(a->workdir) < 0)
        return xmp_error_set(err, errno, "chdir `%s`", a->workdir);
    if (a->cpus != NULL && sched_setaffinity(0, sizeof(*a->cpus), a->cpus) < 0)
        return xmp_error_set(err, errno, "sched_setaffinity");
    if (restore_inherited_nofile(a, err) < 0)
        return -1;
    if (a->oom_first) {
        int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
        bool ok = fd >= 0 && write(fd, "1000", 4) == 4;
        int e = errno;
        if (fd >= 0)
            close(fd);
        if (!ok)
            return xmp_error_set(err, e, "write /proc/self/oom_score_adj");
    }
    int fds[3] = {a->stdin_fd, a->stdout_fd, a->stderr_fd};
    for (int target = 0; target <= 2; target++) {
        int fd = fds[target];
        if (fd < 0)
            continue;
        /* dup2 onto itself would keep FD_CLOEXEC, and the worker would lose the stream. */
        if (fd == target ? fcntl(fd, F_SETFD, 0) < 0 : dup2(fd, target) < 0)
            return xmp_error_set(err, errno, "dup2");
    }
    if (a->close_fds) {
        /* No exec follows in a forked worker: what it must not keep (its older siblings' pipe
         * ends, which would keep their EOF from ever coming) is closed for real. */
        close_all_but(a->keep_fds, a->n_keep_fds);
    } else {
        /* Whatever xmprun or its libraries opened without O_CLOEXEC must not leak into
         * workers; the fds in keep_fds (the zygote's socket) are passed on. */
        syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
        for (size_t i = 0; i < a->n_keep_fds; i++)
            if (fcntl(a->keep_fds[i], F_SETFD, 0) < 0)
                return xmp_error_set(err, errno, "fcntl(F_SETFD)");
    }
    return 0;
}

/* What the child shares with the parent, which is suspended until the child execs or exits
 * (CLONE_VM | CLONE_VFORK, as posix_spawn): its arguments in, why it failed out. */
struct child_ctx {
    const struct xmp_spawn_args *a;
    pid_t parent;
    bool in_unified; /* clone3 placed it in its cgroup2 directory */
    bool failed;     /* err and the exit code are the child's last words */
    struct xmp_error err;
};

/* Not instrumented: under AddressSanitizer the _exit of a child on a stack of its own would
 * otherwise print a warning about that stack into the worker's stderr. */
static void __attribute__((noreturn, no_sanitize_address)) child_fail(struct child_ctx *c, int code)
{
    c->failed = true;
    _exit(code);
}

/* Runs in the child, in the parent's memory: no allocation, nothing written but c->err and
 * c->failed, no signal handler that could run (xmprun installs none: its signals come through
 * a signalfd). The environment and the path were built by the parent. */
static int
child_main(void *arg)
{
    struct child_ctx *c = arg;
    const struct xmp_spawn_args *a = c->a;

    if (xmp_spawn_child_enter(a, -1, c->parent, &c->err) < 0)
        child_fail(c, 125);
    /* The hierarchies clone3 did not place it in (through `tasks` on v1: see join_self_v1 in
     * isolate/cgroup.c). */
    if (a->cg != NULL && xmp_cgroup_attach(a->cg, 0, c->in_unified, &c->err) < 0) {
        xmp_error_wrap(&c->err, "join cgroup `%s`", xmp_cgroup_path(a->cg));
        child_fail(c, 125);
    }
    if (xmp_spawn_child_setup(a, &c->err) < 0)
        child_fail(c, 125);
    /* Last before exec: the seccomp filter it ends with then has to allow only execve (and
     * the exit of a failed one). */
    if (a->confine != NULL && xmp_confine_apply(a->confine, &c->err) < 0)
        child_fail(c, 125);

    if (strchr(a->path, '/') == NULL) {
        xmp_error_set(&c->err, ENOENT, "exec `%s`", a->path);
        child_fail(c, 127);
    }
    execve(a->path, a->argv, a->envp);
    int saved = errno;
    struct stat st;
    xmp_error_set(&c->err, saved, "exec `%s`", a->argv[0]);
    if (saved == ENOENT)
        explain_missing_interpreter(a->path, a->argv[0], &c->err);
    if (saved == EACCES && stat(a->path, &st) == 0 && S_ISDIR(st.st_mode))
        xmp_error_set(&c->err, 0, "exec `%s`: it is a directory, not a program", a->argv[0]);
    child_fail(c, saved == ENOENT ? 127 : 126);
}

#if defined(__x86_64__)
/* clone3 on a stack of the child's own, which glibc does not wrap: long
 * xmp_clone3_run(struct clone_args *, size_t, int (*fn)(void *), void *arg) returns the child's
 * pid or -errno in the parent; the child calls fn(arg) and exits with what it returns. The
 * syscall keeps every register but rax, rcx and r11, in the child too. */
// clang-format off
__asm__(".pushsection .text\n"
        ".p2align 4\n"
        ".type xmp_clone3_run, @function\n"
        "xmp_clone3_run:\n"
        "    mov %rcx, %r8\n"
        "    mov $" XMP_STR(SYS_clone3) ", %eax\n"
        "    syscall\n"
        "    test %rax, %rax\n"
        "    jz 1f\n"
        "    ret\n"
        "1:  xor %ebp, %ebp\n"
        "    mov %r8, %rdi\n"
        "    call *%rdx\n"
        "    mov %eax, %edi\n"
        "    mov $" XMP_STR(SYS_exit) ", %eax\n"
        "    syscall\n"
        "    hlt\n"
        ".size xmp_clone3_run, . - xmp_clone3_run\n"
        ".popsection\n");
// clang-format on
long xmp_clone3_run(struct clone_args *ca, size_t size, int (*fn)(void *), void *arg);
#endif

/* Enough for the child's setup and its error message; glibc's posix_spawn takes less. */
#define CHILD_STACK (64 * 1024)

/* One stack for every child, made at the first: a child is done with it when clone returns (it
 * has exec'd or exited, CLONE_VFORK), and a munmap after each clone cost a TLB flush on every CPU
 * that child had run on (N=128 launch, cgroups off: 61.7 -> 59.9 ms). Kept for the process's
 * life; xmp_spawn is called from one thread. */
static void *
child_stack(struct xmp_error *err)
{
    static void *stack;

    if (stack == NULL) {
        void *s = mmap(NULL, CHILD_STACK, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (s == MAP_FAILED) {
            xmp_error_set(err, errno, "mmap the child's stack");
            return NULL;
        }
        stack = s;
    }
    return stack;
}

/* CLOCK_BOOTTIME in the clock ticks of /proc/<pid>/stat's start time: the kernel stamps a new
 * process with the boot clock in nanoseconds and shows it divided down to USER_HZ. */
static unsigned long long
boot_ticks(void)
{
    struct timespec ts;
    long hz = sysconf(_SC_CLK_TCK);

    if (hz <= 0 || 1000000000L % hz != 0 || clock_gettime(CLOCK_BOOTTIME, &ts) < 0)
        return 0;
    return ((unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec) /
           (unsigned long long)(1000000000L / hz);
}

int
xmp_spawn(const struct xmp_spawn_args *a, struct xmp_spawned *out, struct xmp_error *err)
{
    struct child_ctx c = {.a = a, .parent = getpid()};
    int pidfd = -1;
    int cgfd = a->cg != NULL ? xmp_cgroup_dirfd(a->cg) : -1;
    pid_t pid = -1;
    void *stack;

    memset(out, 0, sizeof(*out));
    out->pidfd = -1;
    out->status_fd = -1;
    out->gate_fd = -1;
    if ((stack = child_stack(err)) == NULL)
        return -1;
    /* The child is stamped while clone runs: when the clock shows the same tick before and
     * after, that tick is its start time, and the state file (which names it by pid and start
     * time) need not read it back from /proc, 15 us a worker. */
    unsigned long long before = boot_ticks();

#if defined(__x86_64__)
    /* The child shares this process's memory and runs until it execs or exits while this one
     * waits: no copy of xmprun's page tables to make and tear down again at exec, and the
     * child's failure is known when clone returns. clone3 puts it into its cgroup2 directory
     * before it runs (CLONE_INTO_CGROUP) and gives a pidfd atomically. */
    struct clone_args ca = {
        .flags = CLONE_VM | CLONE_VFORK | CLONE_PIDFD | (cgfd >= 0 ? CLONE_INTO_CGROUP : 0),
        .pidfd = (uint64_t)(uintptr_t)&pidfd,
        .exit_signal = SIGCHLD,
        .stack = (uint64_t)(uintptr_t)stack,
        .stack_size = CHILD_STACK,
        .cgroup = cgfd >= 0 ? (uint64_t)cgfd : 0,
    };
    c.in_unified = cgfd >= 0;
    pid = (pid_t)xmp_clone3_run(&ca, sizeof(ca), child_main, &c);
#endif
    if (pid < 0) {
        /* Old kernel (ENOSYS), a cgroup clone3 refuses (EINVAL, EBUSY, EOPNOTSUPP), or
         * another architecture: clone, and the child joins every hierarchy itself. */
        pidfd = -1;
        c.in_unified = false;
        pid = clone(child_main, (char *)stack + CHILD_STACK,
                    CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, &c, &pidfd);
    }
    int saved = errno;
    if (pid < 0)
        return xmp_error_set(err, saved, "clone");
    if (before != 0 && boot_ticks() == before)
        out->start_ticks = before;

    if (pidfd < 0)
        pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    /* Also from here, so that the group exists even if the child died before its setpgid;
     * EACCES after the child's exec is harmless. */
    setpgid(pid, pid);
    out->pid = pid;
    out->pidfd = pidfd;
    out->in_unified = c.in_unified;
    if (c.failed) {
        out->exec_failed = true;
        out->child_err = c.err;
        out->child_err.msg[sizeof(out->child_err.msg) - 1] = '\0';
    }
    return 0;
}

int
xmp_spawn_start(struct xmp_spawned *sp, const struct xmp_cgroup *cg, enum xmp_cgroup_mode mode,
                struct xmp_error *err)
{
    cleanup_close int gate = steal_fd(&sp->gate_fd);
    bool joined = sp->joins_itself || (mode == XMP_CGROUP_MODE_UNIFIED && sp->in_unified);
    ssize_t n;

    if (gate < 0)
        return 0;
    /* Without cgroups (none could be made here) there is nothing to join. */
    if (!joined && cg != NULL && xmp_cgroup_attach(cg, sp->pid, sp->in_unified, err) < 0) {
        /* Closing the gate unwritten tells the child to give up; the SIGKILL makes sure. */
        kill(sp->pid, SIGKILL);
        return xmp_error_wrap(err, "join cgroup `%s`", xmp_cgroup_path(cg));
    }
    do
        n = write(gate, "g", 1);
    while (n < 0 && errno == EINTR);
    if (n != 1) {
        kill(sp->pid, SIGKILL);
        return xmp_error_set(err, errno, "open the start gate");
    }
    return 0;
}

int
xmp_spawn_read_status(struct xmp_spawned *sp, bool block)
{
    char sink[64];
    ssize_t n;

    if (sp->status_fd < 0)
        return 0;
    if (block)
        fcntl(sp->status_fd, F_SETFL, 0);
    /* Read until EOF: after a failure that is the child's _exit, so it cannot be caught between
     * its report and its exit by a signal xmprun sends next. */
    for (;;) {
        size_t room = sizeof(sp->child_err) - sp->status_got;
        char *dst = (char *)&sp->child_err + sp->status_got;
        n = read(sp->status_fd, room > 0 ? dst : sink, room > 0 ? room : sizeof(sink));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 1;
        if (n <= 0)
            break;
        if (room > 0)
            sp->status_got += (size_t)n;
    }
    close(sp->status_fd);
    sp->status_fd = -1;
    if (sp->status_got == sizeof(sp->child_err)) {
        sp->exec_failed = true;
        sp->child_err.msg[sizeof(sp->child_err.msg) - 1] = '\0';
    } else if (sp->status_got > 0) {
        sp->exec_failed = true;
        xmp_error_set(&sp->child_err, 0, "the worker failed before exec");
    }
    return 0;
}
