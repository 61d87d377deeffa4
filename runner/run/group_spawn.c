/* One run of the worker group: starting each worker (its environment for this run, its log
 * files, spawned or forked from the zygote into its cgroup, its pidfd and pipes on the loop). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/run/group_internal.h"
#include "runner/run/zygote.h"

#include "isolate/file.h"
#include "runner/run/spawn.h"
#include "runner/util/strv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef P_PIDFD
#define P_PIDFD 3
#endif
/* The worker's environment for this run: the plan's, with XMPRUN_RESTART_COUNT and (unless the
 * spec set it) TORCHELASTIC_RESTART_COUNT set to the current restart. Built here, before the
 * fork, so the child allocates nothing. */
char **
xmp_grp_worker_environ(struct xmp_supervisor *sv, const struct xmp_plan_worker *pw)
{
    char **env = xmp_isolation_environ(&sv->iso, sv->spec,
                                       xmp_plan_worker_environ(&sv->plan, pw, sv->opts->environ));
    bool spec_sets = false;

    for (size_t i = 0; i < sv->spec->env_len; i++)
        spec_sets |= strcmp(sv->spec->env[i].name, "TORCHELASTIC_RESTART_COUNT") == 0;
    env = xmp_zygote_client_env(sv, env);
    char count[16];

    snprintf(count, sizeof(count), "%d", sv->restart);
    env = xmp_strv_setenv(env, "XMPRUN_RESTART_COUNT", count);
    if (!spec_sets)
        env = xmp_strv_setenv(env, "TORCHELASTIC_RESTART_COUNT", count);
    return env;
}

/* Opens a log file below logs.dir without following a link planted there; *fd is -1 when the
 * worker has no log file. */
static int
open_log(const char *path, bool truncate, int *fd, struct xmp_error *err)
{
    *fd = -1;
    if (path == NULL)
        return 0;
    *fd = xmp_file_open_below(-1, path, O_WRONLY | O_CREAT | (truncate ? O_TRUNC : O_APPEND), 0644,
                              err);
    return *fd < 0 ? xmp_error_wrap(err, "logs.dir") : 0;
}

void
xmp_grp_spawn_worker(struct xmp_supervisor *sv, struct xmp_worker *w, size_t index)
{
    const struct xmp_spec *spec = sv->spec;
    const struct xmp_plan_worker *pw = w->pw;
    struct xmp_worker_report *rep = w->rep;
    int po[2] = {-1, -1}, pe[2] = {-1, -1};
    struct xmp_console *con_out = NULL, *con_err = NULL;
    bool prefix = spec->console == XMP_CONSOLE_PREFIX;
    struct xmp_spawned sp;
    struct xmp_error err = {0};
    bool streams = false;
    int log_out = -1, log_err = -1;

    if (spec->console == XMP_CONSOLE_PREFIX || spec->console == XMP_CONSOLE_RAW ||
        (spec->console == XMP_CONSOLE_RANK0 && pw->rank == 0)) {
        con_out = xmp_group_console(sv, 0);
        con_err = xmp_group_console(sv, 1);
    }
    xmp_now_real(&rep->started_at);
    if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
        xmp_error_set(&err, errno, "pipe2");
        goto fail;
    }
    if (open_log(pw->stdout_path, sv->restart == 0, &log_out, &err) < 0 ||
        open_log(pw->stderr_path, sv->restart == 0, &log_err, &err) < 0) {
        if (log_out >= 0)
            close(log_out);
        goto fail;
    }
    fcntl(po[0], F_SETFL, O_NONBLOCK);
    fcntl(pe[0], F_SETFL, O_NONBLOCK);
    xmp_tail_init(&w->tail, spec->log_tail > 0 ? (size_t)spec->log_tail : 0);
    xmp_stream_init(&w->out, po[0], pw->rank, con_out, prefix, log_out, NULL);
    xmp_stream_init(&w->err, pe[0], pw->rank, con_err, prefix, log_err, &w->tail);
    streams = true;
    xmp_grp_ep_add(sv, po[0], XMP_EV_STDOUT, index);
    xmp_grp_ep_add(sv, pe[0], XMP_EV_STDERR, index);

    /* A stale error file from an earlier run must not be reported as this run's. (The first
     * run's directory was just made, empty.) */
    if (pw->error_file != NULL && sv->restart > 0 && sv->run_fd >= 0)
        unlinkat(sv->run_fd, strrchr(pw->error_file, '/') + 1, 0);
    /* Every run has new cgroups (a restart makes them again), so all they count is this run's. */
    if (w->cg != NULL)
        xmp_cgroup_oom_snapshot(w->cg, &w->oom_snap);
    else if (sv->own_cg != NULL)
        xmp_cgroup_oom_snapshot(sv->own_cg, &w->oom_snap);

    struct xmp_spawn_args args = {
        .path = w->path,
        .argv = pw->argv,
        .envp = w->environ,
        .workdir = sv->plan.workdir,
        .cpus = w->has_cpus ? &w->cpus : NULL,
        .confine = &sv->iso.confine,
        .stdin_fd = sv->stdin_fd,
        .stdout_fd = po[1],
        .stderr_fd = pe[1],
        .cg = w->cg,
        .sigmask = &sv->old_mask,
        .inherited_nofile = sv->have_inherited_nofile ? &sv->inherited_nofile : NULL,
        .oom_first = true,
    };
    if ((sv->fork_mode ? xmp_zygote_fork_worker(sv, &args, w, &sp, &err)
                       : xmp_spawn(&args, &sp, &err)) < 0)
        goto fail;
    close(po[1]);
    close(pe[1]);
    w->pid = rep->pid = sp.pid;
    w->pidfd = sp.pidfd;
    w->spawned = sp;
    w->running = true;
    sv->n_running++;
    if (w->pidfd >= 0)
        xmp_grp_ep_add(sv, w->pidfd, XMP_EV_PIDFD, index);
    if (sp.status_fd >= 0)
        xmp_grp_ep_add(sv, sp.status_fd, XMP_EV_EXEC, index);
    else
        xmp_grp_read_exec_status(sv, w, false);
    return;

fail:
    /* The limit in words, while the descriptors that exhausted it are still open. */
    xmp_file_explain_emfile(&err);
    /* Once the streams exist they own the read ends. */
    for (int i = streams ? 1 : 0; i < 2; i++) {
        if (po[i] >= 0)
            close(po[i]);
        if (pe[i] >= 0)
            close(pe[i]);
    }
    rep->state = XMP_WORKER_FAILED_TO_START;
    rep->exit_code = -1;
    snprintf(rep->start_error, sizeof(rep->start_error), "%s", err.msg);
    xmp_now_real(&rep->ended_at);
    rep->ended_mono_ns = xmp_now_ns();
}

void
xmp_grp_start_worker(struct xmp_supervisor *sv, struct xmp_worker *w)
{
    struct xmp_error err = {0};

    if (!w->running || xmp_spawn_start(&w->spawned, w->cg, sv->mode, &err) == 0)
        return;
    /* The child is killed and will be reaped like any other; it never ran the command. */
    w->start_failed = true;
    snprintf(w->rep->start_error, sizeof(w->rep->start_error), "%s", err.msg);
}
