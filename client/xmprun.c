/* xmprun's client library (client/xmprun.h): the zygote's side of start: fork and the job-wide
 * serial lock. The forked worker's setup is runner/run/spawn.c's child side, the same code an
 * exec-mode worker runs, so both modes get the same isolation. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "client/xmprun.h"

#include "isolate/error.h"
#include "runner/run/spawn.h"
#include "runner/run/zygote_msg.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

static _Thread_local char last_error[512];

/* The zygote's connection and the worker xmprun announced last. A client library holds this one
 * piece of process state: there is one zygote per process. */
static struct {
    int sock;
    bool opened;
    int n_workers;
    struct xmp_zmsg hdr;
    int fds[XMP_ZMSG_FDS];
    size_t n_fds;
    char *env;                  /* hdr.env_len bytes */
    char **envv;                /* pointers into env */
    void *confine_buf;          /* hdr.confine_len bytes, which confine points into */
    struct xmp_confine confine; /* what the worker applies last */
    struct xmp_scmp_filter filter;
    bool has_confine;
    bool in_worker; /* this process is a forked worker */
    int lock_fd;
} z = {.sock = -1, .lock_fd = -1};

static int __attribute__((format(printf, 1, 2))) fail(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    return -1;
}

const char *
xmprun_last_error(void)
{
    return last_error;
}

static void
drop_pending(void)
{
    for (size_t i = 0; i < z.n_fds; i++)
        close(z.fds[i]);
    z.n_fds = 0;
    free(z.env);
    free(z.envv);
    free(z.confine_buf);
    z.env = NULL;
    z.envv = NULL;
    z.confine_buf = NULL;
    z.has_confine = false;
}

static int
send_msg(const struct xmp_zmsg *m)
{
    ssize_t n;

    do
        n = send(z.sock, m, sizeof(*m), MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(*m))
        return fail("send to xmprun: %s", n < 0 ? strerror(errno) : "short write");
    return 0;
}

/* The socket from XMPRUN_ZYGOTE_FD, or -1. */
static int
zygote_fd(void)
{
    const char *fd_text = getenv("XMPRUN_ZYGOTE_FD");
    char *end = NULL;
    long fd;

    if (fd_text == NULL)
        return -1;
    errno = 0;
    fd = strtol(fd_text, &end, 10);
    if (errno != 0 || end == fd_text || *end != '\0' || fd < 3 || fcntl((int)fd, F_GETFD) < 0)
        return -1;
    return (int)fd;
}

void
xmprun_zygote_abort(const char *why)
{
    struct xmp_zmsg m = {.type = XMP_ZMSG_ERROR};

    if (z.in_worker)
        return;
    if (z.sock < 0)
        z.sock = zygote_fd();
    if (z.sock < 0)
        return;
    snprintf(m.msg, sizeof(m.msg), "%s", why != NULL ? why : "");
    send_msg(&m);
}

int
xmprun_zygote_open(void)
{
    const char *fd_text = getenv("XMPRUN_ZYGOTE_FD");
    const char *n_text = getenv("XMPRUN_ZYGOTE_WORKERS");
    struct xmp_zmsg hello = {.type = XMP_ZMSG_HELLO};
    char *end = NULL;
    long fd;

    last_error[0] = '\0';
    if (z.in_worker)
        return fail("spawn() was called in a worker: only the zygote forks workers");
    if (z.opened)
        return fail("spawn() may be called only once per zygote (it returns once the job is "
                    "over; restarts re-fork from the same zygote)");
    if (fd_text == NULL || n_text == NULL)
        return fail("not started by xmprun with start: fork (XMPRUN_ZYGOTE_FD is not set): run "
                    "this program as the `command` of a job spec with `start: fork`, "
                    "`xmprun job.yaml`");
    errno = 0;
    fd = strtol(fd_text, &end, 10);
    if (errno != 0 || end == fd_text || *end != '\0' || fd < 3 || fcntl((int)fd, F_GETFD) < 0)
        return fail("XMPRUN_ZYGOTE_FD=%s is not an open fd: was the zygote's socket closed "
                    "(close_range, a daemonizing library)?",
                    fd_text);
    /* CLONE_PARENT makes the workers children of the zygote's parent, which must be xmprun
     * for it to supervise them. dash does not exec the last command of `sh -c`, so a string
     * command leaves a shell in between. */
    const char *parent = getenv("XMPRUN_ZYGOTE_PARENT");
    if (parent != NULL && atoi(parent) != (int)getppid()) {
        fail("the zygote is not xmprun's own child (its parent is pid %d, not xmprun's "
             "%s): in start: fork give `command` as a list ([python3, eval.py]), or "
             "begin a string command with `exec` so that no shell stays in between",
             (int)getppid(), parent);
        xmprun_zygote_abort(last_error);
        return -1;
    }
    z.sock = (int)fd;
    z.n_workers = atoi(n_text);
    /* Nothing the zygote execs (a compiler, a shell) may keep xmprun's socket. */
    fcntl(z.sock, F_SETFD, FD_CLOEXEC);
    z.opened = true;
    if (send_msg(&hello) < 0)
        return -1;
    return z.n_workers;
}

int
xmprun_zygote_next(int *rank)
{
    char cbuf[CMSG_SPACE(sizeof(int) * XMP_ZMSG_FDS)];
    char *buf = NULL;
    struct iovec iov;
    struct msghdr mh = {0};
    ssize_t n;

    if (!z.opened)
        return fail("xmprun_zygote_open() first");
    drop_pending();
    buf = malloc(XMP_ZMSG_MAX);
    if (buf == NULL)
        return fail("out of memory");
    iov = (struct iovec){.iov_base = buf, .iov_len = XMP_ZMSG_MAX};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof(cbuf);
    n = recvmsg(z.sock, &mh, MSG_CMSG_CLOEXEC);
    /* A signal (a ^C xmprun forwarded): the caller's runtime gets to act on it (Python raises
     * KeyboardInterrupt) before it waits again. */
    if (n < 0 && errno == EINTR) {
        free(buf);
        return 3;
    }
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k && z.n_fds < XMP_ZMSG_FDS; i++)
            memcpy(&z.fds[z.n_fds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    }
    if (n <= 0) {
        int saved = errno;
        free(buf);
        return fail("xmprun closed the zygote's connection%s%s", n < 0 ? ": " : "",
                    n < 0 ? strerror(saved) : "");
    }
    if ((size_t)n < sizeof(struct xmp_zmsg)) {
        free(buf);
        return fail("short message from xmprun");
    }
    memcpy(&z.hdr, buf, sizeof(z.hdr));
    if (z.hdr.type == XMP_ZMSG_DONE) {
        free(buf);
        drop_pending();
        return z.hdr.status == 0 ? 0 : 2;
    }
    size_t n_tasks = (z.hdr.flags & XMP_ZW_TASKS) ? z.hdr.n_tasks : 0;
    size_t want = 4 + ((z.hdr.flags & XMP_ZW_STDIN) ? 1 : 0) + n_tasks +
                  ((z.hdr.flags & XMP_ZW_CGROUP) ? 1 : 0);
    if (z.hdr.type != XMP_ZMSG_WORKER || n_tasks > XMP_ZMSG_TASKS || z.n_fds != want ||
        (size_t)n != sizeof(z.hdr) + z.hdr.env_len + z.hdr.confine_len) {
        free(buf);
        drop_pending();
        return fail("malformed message from xmprun (type %u, %zu fds)", z.hdr.type, z.n_fds);
    }
    /* The environment as a vector of pointers into one block, built here so that the child
     * allocates nothing. */
    size_t count = 0;
    z.env = malloc(z.hdr.env_len + 1);
    z.confine_buf = malloc(z.hdr.confine_len + 1);
    if (z.env == NULL || z.confine_buf == NULL) {
        free(buf);
        return fail("out of memory");
    }
    memcpy(z.env, buf + sizeof(z.hdr), z.hdr.env_len);
    z.env[z.hdr.env_len] = '\0';
    memcpy(z.confine_buf, buf + sizeof(z.hdr) + z.hdr.env_len, z.hdr.confine_len);
    free(buf);
    if (z.hdr.confine_len > 0) {
        struct xmp_error err = {0};
        if (xmp_confine_unpack(z.confine_buf, z.hdr.confine_len, &z.confine, &z.filter, &err) < 0)
            return fail("malformed isolation from xmprun: %s", err.msg);
        z.has_confine = true;
    }
    for (size_t i = 0; i < z.hdr.env_len; i++)
        if (z.env[i] == '\0')
            count++;
    z.envv = calloc(count + 1, sizeof(char *));
    if (z.envv == NULL)
        return fail("out of memory");
    count = 0;
    for (size_t i = 0; i < z.hdr.env_len; i += strlen(z.env + i) + 1)
        z.envv[count++] = z.env + i;
    *rank = z.hdr.rank;
    return 1;
}

/* In the new worker: the same setup as an exec-mode worker's, then its environment. */
static void __attribute__((noreturn)) child_fail(int status_fd, struct xmp_error *err)
{
    xmp_spawn_child_fail(status_fd, err, 125);
}

static void
child_start(int status_fd, int gate_fd)
{
    struct xmp_error err = {0};
    int keep[1] = {status_fd};
    struct xmp_spawn_args a = {
        .cpus = (z.hdr.flags & XMP_ZW_CPUS) ? &z.hdr.cpus : NULL,
        .stdin_fd = (z.hdr.flags & XMP_ZW_STDIN) ? z.fds[4] : -1,
        .stdout_fd = z.fds[2],
        .stderr_fd = z.fds[3],
        .keep_fds = keep,
        .n_keep_fds = 1,
        .close_fds = true,
        .oom_first = true,
    };

    size_t first_task = (z.hdr.flags & XMP_ZW_STDIN) ? 5 : 4;

    /* Its v1 cgroups first (the cgroup2 one it was cloned into): what it faults from here on is
     * charged to the worker, not to the zygote. */
    if (((z.hdr.flags & XMP_ZW_TASKS) &&
         xmp_cgroup_join_tasks(z.fds + first_task, z.hdr.n_tasks, &err) < 0) ||
        xmp_spawn_child_enter(&a, gate_fd, (pid_t)z.hdr.pid, &err) < 0 ||
        xmp_spawn_child_setup(&a, &err) < 0)
        child_fail(status_fd, &err);
    if (clearenv() != 0) {
        xmp_error_set(&err, errno, "clearenv");
        child_fail(status_fd, &err);
    }
    for (size_t i = 0; z.envv[i] != NULL; i++)
        if (strchr(z.envv[i], '=') != NULL && putenv(z.envv[i]) != 0) {
            xmp_error_set(&err, errno, "putenv");
            child_fail(status_fd, &err);
        }
    /* Last, as before an exec: rlimits, the user, no_new_privs and the seccomp filter, which
     * must then allow only the close below and what the user's function does. */
    if (z.has_confine && xmp_confine_apply(&z.confine, &err) < 0)
        child_fail(status_fd, &err);
    /* EOF on the status pipe tells xmprun that the worker started, as a successful exec does. */
    close(status_fd);
    z.sock = -1;
    z.lock_fd = -1; /* the zygote's, closed with the rest */
    z.n_fds = 0;
    z.in_worker = true;
}

pid_t
xmprun_zygote_fork(void)
{
    struct xmp_zmsg reply = {.type = XMP_ZMSG_FORKED};
    int cgfd = (z.hdr.flags & XMP_ZW_CGROUP) ? z.fds[z.n_fds - 1] : -1;
    pid_t pid = -1;

    if (z.envv == NULL)
        return fail("no worker to fork: xmprun_zygote_next() first");
    reply.rank = z.hdr.rank;
    /* Buffered output would otherwise be written once by the zygote and once by every worker. */
    fflush(NULL);
    /* CLONE_PARENT makes the worker xmprun's child, not the zygote's: xmprun reaps it through a
     * pidfd exactly like an exec-mode worker, and the zygote has nothing to wait for. clone3
     * wants exit_signal 0 with it (the parent's own exit signal is used). On cgroup v2 the
     * worker starts in its own cgroup, so not one page it faults is charged to the zygote's. */
    for (int attempt = 0; attempt < 2 && pid < 0; attempt++) {
        bool into = attempt == 0 && cgfd >= 0;
        struct clone_args ca = {
            .flags = CLONE_PARENT | (into ? CLONE_INTO_CGROUP : 0),
            .cgroup = into ? (uint64_t)cgfd : 0,
        };
        pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
        if (pid == 0) {
            child_start(z.fds[1], z.fds[0]);
            return 0;
        }
        if (pid > 0 && into)
            reply.flags |= XMP_ZF_IN_UNIFIED;
        /* A cgroup clone3 refuses (EBUSY, EOPNOTSUPP...): xmprun attaches the worker at the
         * gate instead. */
        if (pid < 0 && (errno == ENOSYS || cgfd < 0))
            break;
    }
    int saved = errno;
    drop_pending();
    if (pid < 0) {
        reply.status = saved;
        snprintf(reply.msg, sizeof(reply.msg), "clone3(CLONE_PARENT) in the zygote: %s",
                 strerror(saved));
        send_msg(&reply);
        return fail("%s", reply.msg);
    }
    reply.pid = (int32_t)pid;
    if (send_msg(&reply) < 0)
        return -1;
    return pid;
}

const char *
xmprun_worker_environ(size_t *len)
{
    *len = z.in_worker ? z.hdr.env_len : 0;
    return z.in_worker ? z.env : NULL;
}

int
xmprun_spawn(int (*fn)(int rank, void *arg), void *arg)
{
    int rank = -1;

    if (xmprun_zygote_open() < 0)
        return -1;
    for (;;) {
        int r = xmprun_zygote_next(&rank);
        if (r == 3)
            continue;
        if (r != 1)
            return r == 2 ? 1 : r;
        pid_t pid = xmprun_zygote_fork();
        if (pid == 0) {
            int code = fn(rank, arg);
            fflush(NULL);
            _exit(code);
        }
        /* A worker that could not be forked is reported by xmprun, which ends the run. */
    }
}

int
xmprun_serial_lock(void)
{
    const char *path = getenv("XMPRUN_SERIAL_LOCK");
    int r;

    if (path == NULL || path[0] == '\0')
        return 0;
    if (z.lock_fd < 0) {
        z.lock_fd = open(path, O_RDWR | O_CLOEXEC);
        if (z.lock_fd < 0)
            return fail("open `%s`: %s", path, strerror(errno));
    }
    do
        r = flock(z.lock_fd, LOCK_EX);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return fail("flock `%s`: %s", path, strerror(errno));
    return 0;
}

int
xmprun_serial_unlock(void)
{
    if (z.lock_fd >= 0 && flock(z.lock_fd, LOCK_UN) < 0)
        return fail("flock: %s", strerror(errno));
    return 0;
}
