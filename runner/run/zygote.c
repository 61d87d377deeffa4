/* start: fork, xmprun's side: the zygote (`command` run once in the job's `zygote` cgroup, with a
 * socket to xmprun), what each worker's fork needs sent to it (environment, cpus, the worker's
 * pipes, its cgroup2 directory), its pid taken back, and the client's paths. The event loop that
 * supervises the zygote next to the workers is group.c's. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/run/zygote.h"

#include "isolate/cleanup.h"
#include "isolate/proc.h"
#include "runner/run/zygote_msg.h"
#include "runner/util/strv.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* How long a zygote may take to fork one worker before xmprun gives up on it. */
#define FORK_REPLY_MS 60000

/* The variables that belong to one worker, not to the zygote: it gets the job's environment
 * without them, and each worker gets its own in the fork. */
static const char *const per_worker_vars[] = {
    "RANK",
    "LOCAL_RANK",
    "GROUP_RANK",
    "ROLE_RANK",
    "PJRT_LOCAL_PROCESS_RANK",
    "TORCHELASTIC_ERROR_FILE",
    "CUDA_VISIBLE_DEVICES",
    "TPU_VISIBLE_CHIPS",
    "CLOUD_TPU_TASK_ID",
    "TPU_PROCESS_PORT",
    "XMPRUN_RESTART_COUNT",
    "TORCHELASTIC_RESTART_COUNT",
};

static bool
is_per_worker(const char *entry)
{
    size_t len = strcspn(entry, "=");

    for (size_t i = 0; i < sizeof(per_worker_vars) / sizeof(per_worker_vars[0]); i++)
        if (strlen(per_worker_vars[i]) == len && strncmp(per_worker_vars[i], entry, len) == 0)
            return true;
    return false;
}

static const char *
env_get(char *const *env, const char *name)
{
    size_t len = strlen(name);

    for (size_t i = 0; env != NULL && env[i] != NULL; i++)
        if (strncmp(env[i], name, len) == 0 && env[i][len] == '=')
            return env[i] + len + 1;
    return NULL;
}

void
xmp_zygote_find_client(struct xmp_supervisor *sv)
{
    char exe[PATH_MAX], lib_dir[PATH_MAX], prefix[PATH_MAX], lib[PATH_MAX + 64], py[PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    const char *slash;

    /* An xmprun run from its build tree uses the client beside it and the Python package in
     * the source tree. */
    exe[n > 0 ? n : 0] = '\0';
    slash = strrchr(XMP_CLIENT_BUILD_LIB, '/');
    snprintf(lib_dir, sizeof(lib_dir), "%.*s", (int)(slash - XMP_CLIENT_BUILD_LIB),
             XMP_CLIENT_BUILD_LIB);
    slash = strrchr(exe, '/');
    if (slash != NULL && (size_t)(slash - exe) == strlen(lib_dir) &&
        strncmp(exe, lib_dir, strlen(lib_dir)) == 0 && access(XMP_CLIENT_BUILD_LIB, R_OK) == 0) {
        snprintf(sv->client_python, sizeof(sv->client_python), "%s", XMP_CLIENT_BUILD_PYTHON);
        snprintf(sv->client_lib, sizeof(sv->client_lib), "%s", XMP_CLIENT_BUILD_LIB);
        return;
    }
    /* An installed tree wherever it now is (an unpacked tarball, /opt in an image): the client
     * where the install put it relative to the binary, PREFIX/bin/xmprun. */
    snprintf(prefix, sizeof(prefix), "%s", exe);
    for (int up = 0; up < 2; up++) {
        char *s = strrchr(prefix, '/');
        if (s != NULL)
            *s = '\0';
    }
    static const char *const libdirs[] = {XMP_CLIENT_REL_LIBDIR, "lib"};
    for (size_t i = 0; i < sizeof(libdirs) / sizeof(libdirs[0]) && n > 0; i++) {
        snprintf(lib, sizeof(lib), "%s/%s/libxmprun.so", prefix, libdirs[i]);
        snprintf(py, sizeof(py), "%s/%s/xmprun", prefix, XMP_CLIENT_REL_PYTHON);
        if (access(lib, R_OK) != 0 || snprintf(sv->client_lib, sizeof(sv->client_lib), "%s", lib) >=
                                          (int)sizeof(sv->client_lib))
            continue;
        /* The package beside it, or the one the install put in the system Python's path. */
        bool here = access(py, R_OK) == 0;
        py[strlen(py) - strlen("/xmprun")] = '\0';
        if (!here || snprintf(sv->client_python, sizeof(sv->client_python), "%s", py) >=
                         (int)sizeof(sv->client_python))
            snprintf(sv->client_python, sizeof(sv->client_python), "%s", XMP_CLIENT_INSTALL_PYTHON);
        return;
    }
    snprintf(sv->client_python, sizeof(sv->client_python), "%s", XMP_CLIENT_INSTALL_PYTHON);
    snprintf(sv->client_lib, sizeof(sv->client_lib), "%s", XMP_CLIENT_INSTALL_LIB);
}

char **
xmp_zygote_client_env(struct xmp_supervisor *sv, char **env)
{
    const char *pp = env_get(env, "PYTHONPATH");
    char *joined = NULL;

    if (sv->client_python[0] != '\0') {
        /* Appended, so that an installed or user-chosen xmprun package comes first. */
        if (asprintf(&joined, "%s%s%s", pp != NULL ? pp : "", pp != NULL && pp[0] ? ":" : "",
                     sv->client_python) >= 0)
            env = xmp_strv_setenv(env, "PYTHONPATH", joined);
        free(joined);
        /* A user's own choice stands (a client built elsewhere, a relocated one). */
        const char *user = env_get(env, "XMPRUN_CLIENT_LIB");
        if (user == NULL || user[0] == '\0')
            env = xmp_strv_setenv(env, "XMPRUN_CLIENT_LIB", sv->client_lib);
    }
    if (sv->serial_lock != NULL)
        env = xmp_strv_setenv(env, "XMPRUN_SERIAL_LOCK", sv->serial_lock);
    return env;
}

int
xmp_zygote_start(struct xmp_supervisor *sv, struct xmp_error *err)
{
    struct xmp_zygote *zy = &sv->zy;
    char **base = xmp_plan_worker_environ(&sv->plan, &sv->plan.workers[0], sv->opts->environ);
    char **env = NULL;
    size_t n = 0, k = 0;
    int pair[2];
    char num[32];
    struct xmp_spawned sp;

    if (base == NULL)
        return xmp_error_set(err, ENOMEM, "zygote environment");
    while (base[n] != NULL)
        n++;
    env = calloc(n + 1, sizeof(char *));
    if (env == NULL) {
        xmp_strv_free(base);
        return xmp_error_set(err, ENOMEM, "zygote environment");
    }
    for (size_t i = 0; i < n; i++) {
        if (is_per_worker(base[i]))
            free(base[i]);
        else
            env[k++] = base[i];
    }
    free(base);
    /* SOCK_SEQPACKET keeps messages whole and says EOF when the zygote is gone. */
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0) {
        xmp_strv_free(env);
        return xmp_error_set(err, errno, "socketpair");
    }
    zy->sock = pair[0];
    snprintf(num, sizeof(num), "%d", pair[1]);
    env = xmp_strv_setenv(env, "XMPRUN_ZYGOTE_FD", num);
    snprintf(num, sizeof(num), "%zu", sv->n_workers);
    env = xmp_strv_setenv(env, "XMPRUN_ZYGOTE_WORKERS", num);
    snprintf(num, sizeof(num), "%d", (int)getpid());
    env = xmp_strv_setenv(env, "XMPRUN_ZYGOTE_PARENT", num);
    env = xmp_zygote_client_env(sv, env);
    /* Where the client writes the exception that ends the zygote (the workers get theirs in the
     * fork), so that the report can say what it was. */
    free(zy->error_file);
    zy->error_file = NULL;
    if (sv->plan.run_dir != NULL &&
        asprintf(&zy->error_file, "%s/zygote-error.json", sv->plan.run_dir) >= 0)
        env = xmp_strv_setenv(env, "TORCHELASTIC_ERROR_FILE", zy->error_file);
    zy->environ = env;
    zy->path = xmp_spawn_resolve(sv->plan.workers[0].argv[0], env);
    if (zy->path == NULL) {
        close(pair[1]);
        return xmp_error_set(err, ENOMEM, "zygote");
    }

    /* The zygote stays xmprun's user, unfiltered (it clones into the workers' cgroups, which
     * a filter or a user drop could forbid); each worker confines itself once forked. */
    struct xmp_confine own = {.no_new_privs = sv->spec->no_new_privs};
    int keep[1] = {pair[1]};
    int pe[2] = {-1, -1};

    /* Its stderr through a pipe, as a worker's: passed on unchanged (no prefix), and its last
     * lines kept for the report, whose root cause quotes them when it fails on its own. */
    if (pipe2(pe, O_CLOEXEC) < 0) {
        close(pair[1]);
        return xmp_error_set(err, errno, "pipe2");
    }
    fcntl(pe[0], F_SETFL, O_NONBLOCK);
    xmp_tail_init(&zy->tail, sv->spec->log_tail > 0 ? (size_t)sv->spec->log_tail : 0);
    xmp_stream_init(&zy->err, pe[0], -1, &sv->consoles[sv->consoles_shared ? 0 : 1], false, -1,
                    &zy->tail);
    struct xmp_spawn_args args = {
        .path = zy->path,
        .argv = sv->plan.workers[0].argv,
        .envp = env,
        .workdir = sv->plan.workdir,
        .confine = &own,
        .stdin_fd = sv->stdin_fd,
        .stdout_fd = -1,
        .stderr_fd = pe[1],
        .cg = zy->cg,
        .sigmask = &sv->old_mask,
        .inherited_nofile = sv->have_inherited_nofile ? &sv->inherited_nofile : NULL,
        .keep_fds = keep,
        .n_keep_fds = 1,
    };
    memset(&zy->rep, 0, sizeof(zy->rep));
    zy->rep.rank = -1;
    zy->rep.exit_code = -1;
    zy->rep.memory_peak = zy->rep.oom_kills = -1;
    zy->rep.memory_limit =
        zy->cg != NULL && sv->spec->shared_memory > 0 ? sv->spec->shared_memory : -1;
    zy->rep.job_memory_limit =
        zy->cg != NULL && sv->plan.job_limits.memory > 0 ? sv->plan.job_limits.memory : -1;
    xmp_now_real(&zy->rep.started_at);
    sv->report.zygote = &zy->rep;
    int rc = xmp_spawn(&args, &sp, err);
    close(pair[1]);
    close(pe[1]);
    if (rc < 0) {
        zy->rep.state = XMP_WORKER_FAILED_TO_START;
        snprintf(zy->rep.start_error, sizeof(zy->rep.start_error), "%s", err->msg);
        xmp_now_real(&zy->rep.ended_at);
        zy->rep.ended_mono_ns = xmp_now_ns();
        sv->report.zygote_failed = true;
        return xmp_error_wrap(err, "zygote");
    }
    zy->spawned = sp;
    zy->pid = zy->rep.pid = sp.pid;
    zy->pidfd = sp.pidfd;
    zy->running = true;
    struct epoll_event pev = {.events = EPOLLIN, .data.u64 = xmp_ev_tag(XMP_EV_ZYGOTE, 0)};
    struct epoll_event sev = {.events = EPOLLIN, .data.u64 = xmp_ev_tag(XMP_EV_ZSOCK, 0)};
    if (zy->pidfd >= 0)
        epoll_ctl(sv->epfd, EPOLL_CTL_ADD, zy->pidfd, &pev);
    epoll_ctl(sv->epfd, EPOLL_CTL_ADD, zy->sock, &sev);
    struct epoll_event eev = {.events = EPOLLIN, .data.u64 = xmp_ev_tag(XMP_EV_ZSTDERR, 0)};
    epoll_ctl(sv->epfd, EPOLL_CTL_ADD, zy->err.fd, &eev);
    return 0;
}

void
xmp_zygote_on_message(struct xmp_supervisor *sv)
{
    struct xmp_zygote *zy = &sv->zy;
    struct xmp_zmsg m;
    ssize_t n = recv(zy->sock, &m, sizeof(m), MSG_DONTWAIT);

    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    /* From here on the socket is used synchronously (one fork at a time), and at EOF it would
     * stay readable: the pidfd says when the zygote is gone. */
    epoll_ctl(sv->epfd, EPOLL_CTL_DEL, zy->sock, NULL);
    if (n == (ssize_t)sizeof(m) && m.type == XMP_ZMSG_HELLO)
        zy->ready = true;
    /* Why it will not fork: for the root cause when it exits. */
    if (n == (ssize_t)sizeof(m) && m.type == XMP_ZMSG_ERROR) {
        m.msg[sizeof(m.msg) - 1] = '\0';
        snprintf(zy->rep.start_error, sizeof(zy->rep.start_error), "%s", m.msg);
    }
}

static int
send_worker(struct xmp_zygote *zy, const struct xmp_zmsg *hdr, const char *env, size_t env_len,
            const int *fds, size_t n_fds, struct xmp_error *err)
{
    char cbuf[CMSG_SPACE(sizeof(int) * XMP_ZMSG_FDS)] = {0};
    struct iovec iov[2] = {{.iov_base = (void *)hdr, .iov_len = sizeof(*hdr)},
                           {.iov_base = (void *)env, .iov_len = env_len}};
    struct msghdr mh = {.msg_iov = iov,
                        .msg_iovlen = 2,
                        .msg_control = cbuf,
                        .msg_controllen = CMSG_SPACE(sizeof(int) * n_fds)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    ssize_t n;

    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
    do
        n = sendmsg(zy->sock, &mh, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return xmp_error_set(err, errno, "send the worker to the zygote");
    return 0;
}

/* Waits for the zygote's FORKED reply, or its death. */
static int
recv_forked(struct xmp_zygote *zy, struct xmp_zmsg *m, struct xmp_error *err)
{
    struct pollfd p[2] = {{.fd = zy->sock, .events = POLLIN}, {.fd = zy->pidfd, .events = POLLIN}};
    int64_t give_up = xmp_now_ns() + (int64_t)FORK_REPLY_MS * 1000000;

    for (;;) {
        int left = (int)((give_up - xmp_now_ns()) / 1000000);
        int r = poll(p, zy->pidfd >= 0 ? 2 : 1, left > 0 ? left : 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            return xmp_error_set(err, ETIMEDOUT, "the zygote did not fork the worker in %d s",
                                 FORK_REPLY_MS / 1000);
        if (p[0].revents & POLLIN) {
            ssize_t n = recv(zy->sock, m, sizeof(*m), MSG_DONTWAIT);
            if (n == (ssize_t)sizeof(*m) && m->type == XMP_ZMSG_FORKED)
                return 0;
            if (n < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            return xmp_error_set(err, 0, "the zygote exited before it forked the worker");
        }
        if (p[0].revents & (POLLHUP | POLLERR) || p[1].revents & POLLIN)
            return xmp_error_set(err, 0, "the zygote exited before it forked the worker");
    }
}

int
xmp_zygote_fork_worker(struct xmp_supervisor *sv, const struct xmp_spawn_args *a,
                       const struct xmp_worker *w, struct xmp_spawned *out, struct xmp_error *err)
{
    struct xmp_zygote *zy = &sv->zy;
    cleanup_close int gate_r = -1, gate_w = -1, st_r = -1, st_w = -1;
    cleanup_free char *env = NULL;
    cleanup_free void *confine = NULL;
    struct xmp_zmsg hdr = {.type = XMP_ZMSG_WORKER}, reply;
    size_t env_len = 0, confine_len = 0, n_fds = 0, n_tasks = 0, first_task = 0;
    int fds[XMP_ZMSG_FDS], p[2];
    int cgfd = a->cg != NULL ? xmp_cgroup_dirfd(a->cg) : -1;

    memset(out, 0, sizeof(*out));
    out->pidfd = out->status_fd = out->gate_fd = -1;
    if (!zy->running || !zy->ready)
        return xmp_error_set(err, 0, "the zygote is not running");
    /* The worker confines itself as an exec'd one does (xmp_confine_apply), from a flat copy. */
    if (a->confine != NULL && xmp_confine_pack(a->confine, &confine, &confine_len, err) < 0)
        return -1;
    for (size_t i = 0; a->envp[i] != NULL; i++)
        env_len += strlen(a->envp[i]) + 1;
    if (env_len + confine_len + sizeof(hdr) > XMP_ZMSG_MAX)
        return xmp_error_set(err, E2BIG, "the worker's environment (%zu bytes)", env_len);
    env = malloc(env_len + confine_len + 1);
    if (env == NULL)
        return xmp_error_set(err, ENOMEM, "worker environment");
    env_len = 0;
    for (size_t i = 0; a->envp[i] != NULL; i++) {
        size_t len = strlen(a->envp[i]) + 1;
        memcpy(env + env_len, a->envp[i], len);
        env_len += len;
    }
    if (confine_len > 0)
        memcpy(env + env_len, confine, confine_len);
    if (pipe2(p, O_CLOEXEC) < 0)
        return xmp_error_set(err, errno, "pipe2");
    gate_r = p[0];
    gate_w = p[1];
    if (pipe2(p, O_CLOEXEC) < 0)
        return xmp_error_set(err, errno, "pipe2");
    st_r = p[0];
    st_w = p[1];

    hdr.rank = w->pw->rank;
    hdr.local_rank = w->pw->local_rank;
    hdr.pid = (int32_t)getpid();
    hdr.restart = sv->restart;
    hdr.env_len = (uint32_t)env_len;
    hdr.confine_len = (uint32_t)confine_len;
    if (a->cpus != NULL) {
        hdr.flags |= XMP_ZW_CPUS;
        hdr.cpus = *a->cpus;
    }
    fds[n_fds++] = gate_r;
    fds[n_fds++] = st_w;
    fds[n_fds++] = a->stdout_fd;
    fds[n_fds++] = a->stderr_fd;
    if (a->stdin_fd >= 0) {
        hdr.flags |= XMP_ZW_STDIN;
        fds[n_fds++] = a->stdin_fd;
    }
    /* The worker joins its v1 cgroups itself, as an exec-mode worker does (through `tasks`,
     * without the lock and the wait a move by pid takes: see xmp_cgroup_attach). */
    if (a->cg != NULL) {
        int n = xmp_cgroup_open_tasks(a->cg, fds + n_fds, XMP_ZMSG_TASKS, err);
        if (n < 0)
            return xmp_error_wrap(err, "join cgroup `%s`", xmp_cgroup_path(a->cg));
        first_task = n_fds;
        n_tasks = (size_t)n;
        hdr.flags |= n_tasks > 0 ? XMP_ZW_TASKS : 0;
        hdr.n_tasks = (uint32_t)n_tasks;
        n_fds += n_tasks;
    }
    if (cgfd >= 0) {
        hdr.flags |= XMP_ZW_CGROUP;
        fds[n_fds++] = cgfd;
    }
    int sent = send_worker(zy, &hdr, env, env_len + confine_len, fds, n_fds, err);
    for (size_t i = 0; i < n_tasks; i++)
        close(fds[first_task + i]);
    if (sent < 0 || recv_forked(zy, &reply, err) < 0)
        return -1;
    if (reply.pid <= 0)
        return xmp_error_set(err, reply.status, "%s", reply.msg);
    /* A zygote below an intermediate process (a shell) forks its workers as that process's
     * children, which xmprun could not reap: refuse them. */
    if (xmp_proc_parent(reply.pid) != getpid()) {
        kill(reply.pid, SIGKILL);
        return xmp_error_set(err, 0,
                             "the zygote is not xmprun's own child, so its workers are not "
                             "either: in start: fork give `command` as a list, or begin a "
                             "string command with `exec`");
    }
    zy->forked = true;
    /* CLONE_PARENT made the worker xmprun's own child: nobody else can reap it, so its pid is
     * stable until xmprun does, and the pidfd opened now is the worker's. */
    out->pid = (pid_t)reply.pid;
    out->pidfd = (int)syscall(SYS_pidfd_open, out->pid, 0);
    out->in_unified = (reply.flags & XMP_ZF_IN_UNIFIED) != 0;
    /* In every hierarchy once it has joined its v1 ones: clone3 put it into its cgroup2
     * directory, or there is none. */
    out->joins_itself = n_tasks > 0 && (out->in_unified || cgfd < 0);
    setpgid(out->pid, out->pid);
    out->status_fd = steal_fd(&st_r);
    out->gate_fd = steal_fd(&gate_w);
    fcntl(out->status_fd, F_SETFL, O_NONBLOCK);
    return 0;
}

void
xmp_zygote_finish(struct xmp_supervisor *sv, const siginfo_t *si)
{
    struct xmp_zygote *zy = &sv->zy;
    struct xmp_worker_report *rep = &zy->rep;
    struct xmp_cgroup_stats st = {-1, -1, -1, -1};
    struct xmp_error err = {0};

    xmp_now_real(&rep->ended_at);
    rep->ended_mono_ns = xmp_now_ns();
    if (si->si_code == CLD_EXITED) {
        rep->exit_code = si->si_status;
    } else {
        rep->signal = si->si_status;
        rep->exit_code = -1;
    }
    if (zy->cg != NULL && xmp_cgroup_read_stats(zy->cg, &st, &err) == 0) {
        rep->memory_peak = st.memory_peak;
        rep->oom_kills = st.oom_kills;
    }
    if (zy->spawned.exec_failed || rep->state == XMP_WORKER_FAILED_TO_START) {
        rep->state = XMP_WORKER_FAILED_TO_START;
        if (rep->start_error[0] == '\0')
            snprintf(rep->start_error, sizeof(rep->start_error), "%s", zy->spawned.child_err.msg);
    } else if (rep->signal == SIGKILL && rep->oom_kills > 0) {
        rep->state = XMP_WORKER_OOM_KILLED;
    } else if (zy->stop_sent) {
        rep->state =
            sv->stopping == XMP_STOP_TIMEOUT ? XMP_WORKER_TIMEOUT : XMP_WORKER_STOPPED_BY_XMPRUN;
    } else if (rep->signal > 0) {
        rep->state = XMP_WORKER_SIGNALED;
    } else {
        rep->state = XMP_WORKER_EXITED;
    }
    /* The zygote fails the job when it dies on its own: before it forked (it never called
     * spawn()), while its workers ran, or with an error after a successful job. After a failed
     * job it was told so, and how it ends is a consequence. */
    if (!(zy->stop_sent && rep->state != XMP_WORKER_OOM_KILLED) && (!zy->done_sent || zy->done_ok))
        sv->report.zygote_failed =
            rep->state != XMP_WORKER_EXITED || rep->exit_code != 0 || !zy->done_sent;
    sv->report.zygote_before_fork = !zy->forked;
    sv->report.zygote_after_done = zy->done_sent;
    if (zy->pidfd >= 0) {
        epoll_ctl(sv->epfd, EPOLL_CTL_DEL, zy->pidfd, NULL);
        close(zy->pidfd);
    }
    zy->pidfd = -1;
    zy->running = false;
}

void
xmp_zygote_send_done(struct xmp_supervisor *sv, bool ok)
{
    struct xmp_zmsg m = {.type = XMP_ZMSG_DONE, .status = ok ? 0 : 1};
    struct xmp_zygote *zy = &sv->zy;

    if (zy->sock < 0 || zy->done_sent)
        return;
    zy->done_sent = true;
    zy->done_ok = ok;
    if (send(zy->sock, &m, sizeof(m), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        /* Gone, or not listening: its pidfd will say which. */
    }
}

void
xmp_zygote_free(struct xmp_zygote *zy)
{
    if (zy->sock >= 0)
        close(zy->sock);
    if (zy->pidfd >= 0)
        close(zy->pidfd);
    zy->sock = zy->pidfd = -1;
    free(zy->path);
    free(zy->error_file);
    zy->path = zy->error_file = NULL;
    xmp_worker_report_clear(&zy->rep);
    xmp_stream_close(&zy->err);
    xmp_tail_free(&zy->tail);
    xmp_strv_free(zy->environ);
    zy->environ = NULL;
}
