/* Starting one worker. clone3(CLONE_INTO_CGROUP | CLONE_PIDFD) puts the child in its cgroup
 * before it runs a single instruction, so no allocation it makes escapes the limits; where that
 * is unavailable the child attaches itself before exec. A CLOEXEC pipe carries the child's
 * struct xmp_error to the parent, and EOF on it means execve succeeded (libuv's
 * uv__spawn_and_init_child closes the same race). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/spawn.h"

#include "isolate/cleanup.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
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

static void __attribute__((noreturn)) child_fail(int fd, struct xmp_error *err, int code)
{
    ssize_t n;

    do
        n = write(fd, err, sizeof(*err));
    while (n < 0 && errno == EINTR);
    _exit(code);
}

/* Runs in the child: no allocation (the environment and the path were built by the parent),
 * every failure goes to the pipe. */
static void __attribute__((noreturn))
child_main(const struct xmp_spawn_args *a, int errfd, int gatefd, pid_t parent)
{
    struct xmp_error err = {0};

    for (size_t i = 0; i < sizeof(reset_signals) / sizeof(reset_signals[0]); i++)
        signal(reset_signals[i], SIG_DFL);
    sigprocmask(SIG_SETMASK, a->sigmask, NULL);

    /* Its own process group, so that xmprun can signal the worker and everything it forks
     * (without setsid) at once, and a terminal's ^C reaches only xmprun, which forwards it. */
    if (setpgid(0, 0) < 0) {
        xmp_error_set(&err, errno, "setpgid");
        child_fail(errfd, &err, 125);
    }
    /* If xmprun dies (even by SIGKILL) the worker must not run on unsupervised. The parent may
     * already have died before the prctl took effect, hence the getppid check. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0) {
        xmp_error_set(&err, errno, "prctl(PR_SET_PDEATHSIG)");
        child_fail(errfd, &err, 125);
    }
    if (getppid() != parent) {
        xmp_error_set(&err, 0, "xmprun exited while the worker was starting");
        child_fail(errfd, &err, 125);
    }
    /* The parent writes one byte once this process is in all its cgroups; EOF means it gave up
     * on the worker (and is about to kill it). */
    if (gatefd >= 0) {
        char go = 0;
        ssize_t n;
        do
            n = read(gatefd, &go, 1);
        while (n < 0 && errno == EINTR);
        if (n != 1) {
            xmp_error_set(&err, 0, "xmprun did not let the worker start");
            child_fail(errfd, &err, 125);
        }
        close(gatefd);
    }
    if (a->workdir != NULL && chdir(a->workdir) < 0) {
        xmp_error_set(&err, errno, "chdir `%s`", a->workdir);
        child_fail(errfd, &err, 125);
    }
    if (a->cpus != NULL && sched_setaffinity(0, sizeof(*a->cpus), a->cpus) < 0) {
        xmp_error_set(&err, errno, "sched_setaffinity");
        child_fail(errfd, &err, 125);
    }
    if (restore_inherited_nofile(a, &err) < 0)
        child_fail(errfd, &err, 125);
    if (a->no_new_privs && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
        xmp_error_set(&err, errno, "prctl(PR_SET_NO_NEW_PRIVS)");
        child_fail(errfd, &err, 125);
    }
    int fds[3] = {a->stdin_fd, a->stdout_fd, a->stderr_fd};
    for (int target = 0; target <= 2; target++) {
        int fd = fds[target];
        if (fd < 0)
            continue;
        /* dup2 onto itself would keep FD_CLOEXEC, and the worker would lose the stream. */
        if (fd == target ? fcntl(fd, F_SETFD, 0) < 0 : dup2(fd, target) < 0) {
            xmp_error_set(&err, errno, "dup2");
            child_fail(errfd, &err, 125);
        }
    }
    /* Whatever xmprun or its libraries opened without O_CLOEXEC must not leak into workers. */
    syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);

    if (strchr(a->path, '/') == NULL) {
        xmp_error_set(&err, ENOENT, "exec `%s`", a->path);
        child_fail(errfd, &err, 127);
    }
    execve(a->path, a->argv, a->envp);
    int saved = errno;
    xmp_error_set(&err, saved, "exec `%s`", a->argv[0]);
    if (saved == ENOENT)
        explain_missing_interpreter(a->path, a->argv[0], &err);
    child_fail(errfd, &err, saved == ENOENT ? 127 : 126);
}

int
xmp_spawn(const struct xmp_spawn_args *a, struct xmp_spawned *out, struct xmp_error *err)
{
    cleanup_close int rfd = -1;
    cleanup_close int wfd = -1;
    cleanup_close int gate_r = -1;
    cleanup_close int gate_w = -1;
    int fds[2];
    int pidfd = -1;
    int cgfd = a->cg != NULL ? xmp_cgroup_dirfd(a->cg) : -1;
    pid_t parent = getpid(), pid;

    memset(out, 0, sizeof(*out));
    out->pidfd = -1;
    out->status_fd = -1;
    out->gate_fd = -1;
    if (pipe2(fds, O_CLOEXEC) < 0)
        return xmp_error_set(err, errno, "pipe2");
    rfd = fds[0];
    wfd = fds[1];
    /* Without a cgroup there is nothing to join before exec, hence no gate. */
    if (a->cg != NULL) {
        if (pipe2(fds, O_CLOEXEC) < 0)
            return xmp_error_set(err, errno, "pipe2");
        gate_r = fds[0];
        gate_w = fds[1];
    }

    /* clone3 with a NULL stack behaves like fork (the child runs on a copy of this stack), and
     * gives a pidfd atomically, with or without a cgroup to start in. */
    struct clone_args ca = {
        .flags = CLONE_PIDFD | (cgfd >= 0 ? CLONE_INTO_CGROUP : 0),
        .pidfd = (uint64_t)(uintptr_t)&pidfd,
        .exit_signal = SIGCHLD,
        .cgroup = cgfd >= 0 ? (uint64_t)cgfd : 0,
    };
    pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
    if (pid >= 0) {
        /* In hybrid mode clone3 placed the child in the cgroup2 tracking tree only; the v1
         * controller hierarchies are joined in xmp_spawn_start. */
        out->in_unified = cgfd >= 0;
    } else {
        /* Old kernel (ENOSYS), legacy v1 only, or a cgroup clone3 refuses (EINVAL, EBUSY,
         * EOPNOTSUPP): fork, and every hierarchy is joined in xmp_spawn_start. */
        pidfd = -1;
        pid = fork();
        if (pid < 0)
            return xmp_error_set(err, errno, "fork");
        out->in_unified = false;
    }
    if (pid == 0) {
        close(rfd);
        if (gate_w >= 0)
            close(gate_w);
        child_main(a, wfd, gate_r, parent);
    }

    if (pidfd < 0)
        pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    /* Also from here, so the group exists whichever of the two runs first; EACCES after the
     * child's exec is harmless. */
    setpgid(pid, pid);

    out->pid = pid;
    out->pidfd = pidfd;
    out->status_fd = steal_fd(&rfd);
    out->gate_fd = steal_fd(&gate_w);
    fcntl(out->status_fd, F_SETFL, O_NONBLOCK);
    return 0;
}

int
xmp_spawn_start(struct xmp_spawned *sp, const struct xmp_cgroup *cg, enum xmp_cgroup_mode mode,
                struct xmp_error *err)
{
    cleanup_close int gate = steal_fd(&sp->gate_fd);
    bool joined = mode == XMP_CGROUP_MODE_UNIFIED && sp->in_unified;
    ssize_t n;

    if (gate < 0)
        return 0;
    if (!joined && xmp_cgroup_attach(cg, sp->pid, sp->in_unified, err) < 0) {
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
