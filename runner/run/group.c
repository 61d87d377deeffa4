/* One run of the worker group: spawning every worker into its cgroup, then one epoll loop over
 * the signalfd, a pidfd per worker, their output pipes and a timerfd for the job deadline and the
 * kill grace, with kill-all, signal forwarding and reaping (also of orphans, as a subreaper). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/run/group_internal.h"
#include "runner/run/zygote.h"

#include "runner/report/stacks.h"

#include "isolate/cleanup.h"
#include "isolate/file.h"
#include "runner/run/spawn.h"
#include "runner/run/state.h"
#include "runner/util/strv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

int
xmp_grp_ep_ctl(struct xmp_supervisor *sv, int op, int fd, uint32_t events, enum xmp_ev_kind kind,
               size_t index)
{
    struct epoll_event ev = {.events = events, .data.u64 = xmp_ev_tag(kind, index)};
    return epoll_ctl(sv->epfd, op, fd, &ev);
}

int
xmp_grp_ep_add(struct xmp_supervisor *sv, int fd, enum xmp_ev_kind kind, size_t index)
{
    /* While the console is backed up, new output pipes start paused like the others. */
    uint32_t events =
        (kind == XMP_EV_STDOUT || kind == XMP_EV_STDERR) && sv->reading_paused ? 0 : EPOLLIN;
    return xmp_grp_ep_ctl(sv, EPOLL_CTL_ADD, fd, events, kind, index);
}

/* Whether two fds are the same file (2>&1, or both the same terminal). */
static bool
same_file(int a, int b)
{
    struct stat sa, sb;
    return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

void
xmp_group_setup_consoles(struct xmp_supervisor *sv)
{
    for (int i = 0; i < 2; i++) {
        int fd = i == 0 ? STDOUT_FILENO : STDERR_FILENO;
        bool pollable;

        sv->console_watched[i] = -1;
        /* One console for both when they are the same file: two queues writing to one pipe
         * would splice each other's lines at their write boundaries. */
        if (i == 1 && same_file(STDOUT_FILENO, STDERR_FILENO)) {
            sv->consoles_shared = true;
            xmp_console_init(&sv->consoles[1], -1, true);
            break;
        }
        /* epoll refuses regular files and /dev/null (EPERM): those never block, and are written
         * directly. A console is in the epoll set only while it waits to accept more. */
        pollable = xmp_grp_ep_ctl(sv, EPOLL_CTL_ADD, fd, 0, XMP_EV_CONSOLE, (size_t)i) == 0;
        if (pollable)
            epoll_ctl(sv->epfd, EPOLL_CTL_DEL, fd, NULL);
        xmp_console_init(&sv->consoles[i], fd, !pollable);
    }
    sv->reading_paused = false;
    xmp_status_init(&sv->status, !xmp_quiet(sv));
    if (sv->status.timerfd >= 0 &&
        xmp_grp_ep_ctl(sv, EPOLL_CTL_ADD, sv->status.timerfd, EPOLLIN, XMP_EV_STATUS, 0) < 0)
        xmp_status_free(&sv->status);
}

struct xmp_console *
xmp_group_console(struct xmp_supervisor *sv, int i)
{
    return &sv->consoles[i == 1 && sv->consoles_shared ? 0 : i];
}

/* Writes what the consoles accept, watches for when they accept more, and stops reading the
 * workers' pipes while a console is backed up (the workers then block on their own writes,
 * xmprun does not). Called when the loop goes idle and when a console becomes writable. */
static void
service_consoles(struct xmp_supervisor *sv)
{
    bool high = false, low = true;

    /* Output for the terminal goes where the status line is: erase it first. */
    for (int i = 0; i < 2; i++)
        if (sv->status.covers[i] && sv->consoles[i].len > 0)
            xmp_status_erase(&sv->status);
    for (int i = 0; i < (sv->consoles_shared ? 1 : 2); i++) {
        struct xmp_console *c = &sv->consoles[i];
        size_t left = xmp_console_flush(c);
        if (c->direct)
            continue;
        if (left > 0 && c->fd >= 0 && sv->console_watched[i] < 0) {
            if (xmp_grp_ep_ctl(sv, EPOLL_CTL_ADD, c->fd, EPOLLOUT, XMP_EV_CONSOLE, (size_t)i) == 0)
                sv->console_watched[i] = c->fd;
        } else if ((left == 0 || c->fd < 0) && sv->console_watched[i] >= 0) {
            /* The fd stays open until the end (c->own_fd), so it can still be removed. */
            epoll_ctl(sv->epfd, EPOLL_CTL_DEL, sv->console_watched[i], NULL);
            sv->console_watched[i] = -1;
        }
        high = high || left > XMP_CONSOLE_HIGH;
        low = low && left < XMP_CONSOLE_LOW;
    }
    if (high == sv->reading_paused || (!high && !low))
        return;
    sv->reading_paused = high;
    for (size_t i = 0; i < sv->n_workers; i++) {
        struct xmp_stream *streams[2] = {&sv->workers[i].out, &sv->workers[i].err};
        for (int k = 0; k < 2; k++)
            if (streams[k]->fd >= 0)
                xmp_grp_ep_ctl(sv, EPOLL_CTL_MOD, streams[k]->fd, high ? 0 : EPOLLIN,
                               k == 0 ? XMP_EV_STDOUT : XMP_EV_STDERR, i);
    }
}

/* True when a console holds a full batch: written even while events keep coming, so that the
 * queue (and the backpressure on the workers) does not wait for the loop to go idle. */
static bool
consoles_full(const struct xmp_supervisor *sv)
{
    for (int i = 0; i < (sv->consoles_shared ? 1 : 2); i++)
        if (sv->consoles[i].fd >= 0 && sv->consoles[i].len >= XMP_CONSOLE_FLUSH)
            return true;
    return false;
}

/* True when a console holds lines it has not tried to write yet: the loop writes them before
 * it sleeps. One that waits for its reader (in the epoll set) is not. */
static bool
consoles_pending(const struct xmp_supervisor *sv)
{
    for (int i = 0; i < (sv->consoles_shared ? 1 : 2); i++) {
        const struct xmp_console *c = &sv->consoles[i];
        if (c->fd >= 0 && c->len > 0 && sv->console_watched[i] < 0)
            return true;
    }
    return false;
}

/* Draws the status line when a tick made it due and the terminal has no output queued (that
 * would erase it again at once). */
static void
service_status(struct xmp_supervisor *sv)
{
    struct xmp_status_info info = {
        .nearest_rank = -1, .nearest_memory = -1, .gpu_rank = -1, .gpu_memory = -1};
    double nearest = -1.0;

    if (!sv->status.due)
        return;
    for (int i = 0; i < 2; i++)
        if (sv->status.covers[i] && sv->consoles[i].len > 0)
            return;
    sv->status.due = false;
    info.elapsed_ms = (xmp_now_ns() - sv->report.started_mono_ns) / 1000000;
    info.running = sv->n_running;
    info.ended = sv->n_workers - sv->n_running;
    info.job_memory = sv->job_cg != NULL ? xmp_cgroup_memory_current(sv->job_cg) : -1;
    info.job_limit = sv->plan.job_limits.memory > 0 ? sv->plan.job_limits.memory : -1;
    for (size_t i = 0; i < sv->n_workers; i++) {
        const struct xmp_worker *w = &sv->workers[i];
        int64_t cur = w->running && w->cg != NULL ? xmp_cgroup_memory_current(w->cg) : -1;
        int64_t lim = w->pw->limits.memory;
        /* Nearest its limit; without limits, the one using most. */
        double score = lim > 0 ? (double)cur / (double)lim : (double)cur / 1e18;
        if (cur < 0 || score <= nearest)
            continue;
        nearest = score;
        info.nearest_rank = w->pw->rank;
        info.nearest_memory = cur;
        info.nearest_limit = lim > 0 ? lim : -1;
    }
    xmp_grp_gpumem_status(sv, &info);
    xmp_status_draw(&sv->status, &info);
}

void
xmp_grp_ep_del(struct xmp_supervisor *sv, int fd)
{
    if (fd >= 0)
        epoll_ctl(sv->epfd, EPOLL_CTL_DEL, fd, NULL);
}

void
xmp_grp_ep_close(struct xmp_supervisor *sv, int *fd)
{
    if (*fd < 0)
        return;
    epoll_ctl(sv->epfd, EPOLL_CTL_DEL, *fd, NULL);
    close(*fd);
    *fd = -1;
}

/* The timerfd always holds the next deadline: the job timeout or the end of the kill grace. */
void
xmp_grp_arm_timer(struct xmp_supervisor *sv)
{
    /* Every deadline of the supervisor's (0: none); on_timer acts on each that has come. */
    const int64_t deadlines[] = {
        sv->report.timed_out ? 0 : sv->deadline_ns,
        sv->kill_at_ns,
        sv->peer_wait_ns,
        sv->watch_at_ns,
        sv->unkillable_at_ns,
        sv->gpumem_at_ns,
    };
    int64_t next = 0;
    struct itimerspec its = {0};

    for (size_t i = 0; i < sizeof(deadlines) / sizeof(deadlines[0]); i++)
        if (deadlines[i] > 0 && (next == 0 || deadlines[i] < next))
            next = deadlines[i];
    if (next > 0) {
        its.it_value.tv_sec = next / 1000000000;
        its.it_value.tv_nsec = next % 1000000000;
    }
    timerfd_settime(sv->timerfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void
on_signal(struct xmp_supervisor *sv)
{
    struct signalfd_siginfo fsi;

    while (read(sv->sigfd, &fsi, sizeof(fsi)) == (ssize_t)sizeof(fsi)) {
        int sig = (int)fsi.ssi_signo;

        if (sig == SIGCHLD) {
            xmp_grp_reap_children(sv);
            continue;
        }
        if (xmp_grp_is_stop_signal(sig)) {
            xmp_grp_on_interrupt(sv, sig);
            continue;
        }
        for (size_t i = 0; i < sv->n_workers; i++)
            if (sv->workers[i].running && sv->workers[i].pid > 0)
                kill(-sv->workers[i].pid, sig);
        if (sv->zy.running && sv->zy.pid > 0)
            kill(-sv->zy.pid, sig);
    }
}

void
xmp_group_take_signals(struct xmp_supervisor *sv)
{
    on_signal(sv);
}

static void
on_timer(struct xmp_supervisor *sv)
{
    uint64_t expirations;
    int64_t now = xmp_now_ns();

    if (read(sv->timerfd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
        return;
    if (sv->deadline_ns > 0 && !sv->report.timed_out && now >= sv->deadline_ns) {
        sv->report.timed_out = true;
        sv->report.timeout_mono_ns = now;
        /* Workers that end from here on were stopped by the deadline, unless a failure or a
         * signal had already started stopping them. */
        if (sv->stopping == XMP_STOP_NONE)
            xmp_grp_stop_all(sv, XMP_STOP_TIMEOUT, SIGTERM);
    }
    if (sv->peer_wait_ns > 0 && now >= sv->peer_wait_ns) {
        sv->peer_wait_ns = 0;
        xmp_grp_on_worker_failure(sv);
    }
    xmp_grp_watch_tick(sv, now);
    if (sv->kill_at_ns > 0 && now >= sv->kill_at_ns)
        xmp_grp_kill_all_now(sv);
    if (sv->unkillable_at_ns > 0 && now >= sv->unkillable_at_ns)
        xmp_grp_give_up_unkillable(sv);
    xmp_grp_gpumem_sample(sv, now);
    xmp_grp_arm_timer(sv);
}

/* A worker given up on as unkillable: waiting for it again would only wait as long again. */
static bool
left_behind(const struct xmp_supervisor *sv, pid_t pid)
{
    for (size_t i = 0; sv->left_behind && i < sv->n_workers; i++)
        if (sv->workers[i].unkillable && sv->workers[i].pid == pid)
            return true;
    return false;
}

/* How long the end of a run waits for the orphans it killed to be reaped. */
#define ORPHANS_WAIT_MS 2000

/* The stacks' preload: the dynamic loader's work, a few KiB of stack. */
#define PRELOAD_STACK (256 * 1024)

/* Kills and reaps every remaining child of xmprun: as a subreaper it inherits the grandchildren
 * whose parents exited, including those that left their process group with setsid(). Waits
 * (bounded) until they are reaped, so that none is left as a zombie for init to collect. */
void
xmp_group_kill_orphans(const struct xmp_supervisor *sv, pid_t keep)
{
    pid_t self = getpid();
    int64_t give_up = xmp_now_ns() + ORPHANS_WAIT_MS * 1000000LL;
    char path[64];

    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)self, (int)self);
    for (;;) {
        cleanup_free char *children = NULL;
        size_t len = 0;
        bool any = false;
        siginfo_t si;
        FILE *f = fopen(path, "re");

        if (f == NULL)
            return;
        if (getdelim(&children, &len, '\0', f) < 0) {
            free(children);
            children = NULL;
        }
        fclose(f);
        for (char *p = children; p != NULL && *p != '\0';) {
            char *end;
            long pid = strtol(p, &end, 10);
            if (end == p)
                break;
            if (pid > 1 && pid != keep && !left_behind(sv, (pid_t)pid)) {
                kill((pid_t)pid, SIGKILL);
                any = true;
            }
            p = end;
        }
        for (;;) {
            memset(&si, 0, sizeof(si));
            if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0 ||
                si.si_pid == keep)
                break;
            waitpid(si.si_pid, NULL, WNOHANG);
        }
        if (!any || xmp_now_ns() > give_up)
            return;
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
}

static void
drain_streams(struct xmp_supervisor *sv, struct xmp_worker *w)
{
    struct xmp_stream *streams[2] = {&w->out, &w->err};

    for (int i = 0; i < 2; i++) {
        if (streams[i]->fd >= 0)
            xmp_stream_read(streams[i], FINAL_DRAIN);
        xmp_grp_check_log(w, streams[i]);
        xmp_grp_close_stream(sv, streams[i]);
    }
    w->rep->stderr_tail = xmp_tail_take(&w->tail, &w->rep->n_tail);
    xmp_tail_free(&w->tail);
}

static void
dispatch(struct xmp_supervisor *sv, const struct epoll_event *ev)
{
    enum xmp_ev_kind kind = xmp_ev_tag_kind(ev->data.u64);
    size_t index = xmp_ev_tag_index(ev->data.u64);

    switch (kind) {
    case XMP_EV_SIGNAL:
        on_signal(sv);
        return;
    case XMP_EV_TIMER:
        on_timer(sv);
        return;
    case XMP_EV_PIDFD:
        xmp_grp_try_reap(sv, &sv->workers[index]);
        return;
    case XMP_EV_STDOUT:
        xmp_grp_on_stream(sv, &sv->workers[index], &sv->workers[index].out);
        return;
    case XMP_EV_STDERR:
        xmp_grp_on_stream(sv, &sv->workers[index], &sv->workers[index].err);
        return;
    case XMP_EV_CONSOLE:
        /* Writable again, or its reader is gone (EPOLLERR): the write says which. */
        service_consoles(sv);
        return;
    case XMP_EV_EXEC:
        xmp_grp_read_exec_status(sv, &sv->workers[index], false);
        return;
    case XMP_EV_ZYGOTE:
        xmp_grp_try_reap_zygote(sv);
        return;
    case XMP_EV_ZSOCK:
        xmp_zygote_on_message(sv);
        return;
    case XMP_EV_STATUS:
        xmp_status_tick(&sv->status);
        return;
    case XMP_EV_KMSG:
        xmp_grp_kmsg_read(sv);
        return;
    case XMP_EV_MEMWATCH:
        xmp_grp_memwatch_sample(sv);
        return;
    case XMP_EV_ZSTDERR:
        xmp_grp_on_zygote_stderr(sv, READ_BUDGET);
        return;
    }
}

static void
prepare_run(struct xmp_supervisor *sv)
{
    for (size_t i = 0; i < sv->n_workers; i++) {
        struct xmp_worker *w = &sv->workers[i];
        const struct xmp_plan_worker *pw = w->pw;
        struct xmp_worker_report *rep = &sv->report.workers[i];

        memset(rep, 0, sizeof(*rep));
        rep->rank = pw->rank;
        rep->local_rank = pw->local_rank;
        rep->devices = (const char *const *)pw->devices;
        snprintf(rep->cpuset, sizeof(rep->cpuset), "%s", pw->cpuset);
        rep->exit_code = -1;
        /* A limit is reported where it is enforced: by the worker's cgroup or the watchdog. */
        bool limited = w->cg != NULL || sv->memwatch;
        rep->memory_limit = limited && pw->limits.memory > 0 ? pw->limits.memory : -1;
        rep->job_memory_limit =
            limited && sv->plan.job_limits.memory > 0 ? sv->plan.job_limits.memory : -1;
        rep->memory_peak = rep->oom_kills = rep->oom_limit = rep->pids_hits = -1;
        rep->pids_limit = w->cg != NULL && pw->limits.pids > 0 ? pw->limits.pids : -1;
        rep->job_pids_limit =
            w->cg != NULL && sv->plan.job_limits.pids > 0 ? sv->plan.job_limits.pids : -1;
        w->rep = rep;
        w->pid = 0;
        w->pidfd = -1;
        w->mem_over = false;
        w->mw_private = w->mw_anon = 0;
        w->mw_tree = 0;
        w->spawned = (struct xmp_spawned){.pidfd = -1, .status_fd = -1, .gate_fd = -1};
        w->running = w->start_failed = w->stop_sent = false;
        w->out = (struct xmp_stream){.fd = -1, .log_fd = -1};
        w->err = (struct xmp_stream){.fd = -1, .log_fd = -1};
        xmp_strv_free(w->environ);
        w->environ = xmp_grp_worker_environ(sv, pw);
    }
    sv->stopping = XMP_STOP_NONE;
    sv->peer_wait_ns = 0;
    sv->kill_at_ns = 0;
    sv->held_upto = 0;
    xmp_grp_arm_timer(sv);
}

static void
write_state(struct xmp_supervisor *sv)
{
    cleanup_free struct xmp_state_proc *procs = calloc(sv->n_workers + 1, sizeof(*procs));
    struct xmp_error err = {0};

    if (procs == NULL)
        return;
    for (size_t i = 0; i < sv->n_workers; i++) {
        procs[i].pid = sv->workers[i].pid;
        procs[i].start = sv->workers[i].spawned.start_ticks;
    }
    const char *dirs[16];
    size_t n_dirs = sv->job_cg != NULL ? xmp_cgroup_dirs(sv->job_cg, dirs, 16) : 0;
    char leaf[1024];
    bool in_leaf = sv->job_cg != NULL && xmp_cgroup_self_leaf(leaf, sizeof(leaf)) == 1;

    if (xmp_state_write(sv->state_dir, sv->plan.cgroup_name, sv->mode,
                        sv->job_cg != NULL ? xmp_cgroup_path(sv->job_cg) : NULL, dirs, n_dirs,
                        in_leaf ? leaf : NULL, sv->plan.run_dir, procs, sv->n_workers, &err) == 0) {
        sv->state_written = true;
    } else if (!sv->state_warned && !xmp_quiet(sv)) {
        /* Said once, not only with -v: without it, a SIGKILLed xmprun's leftovers are lost to
         * gc, and the user should know before that happens. */
        fprintf(stderr,
                "xmprun: warning: state file: %s; if xmprun is killed, `xmprun gc` cannot clean "
                "up after this job (set XMPRUN_STATE_DIR to a writable directory)\n",
                err.msg);
        sv->state_warned = true;
    }
}

/* Workers whose cgroup files one idle turn opens (xmp_cgroup_hold: about 40 us a worker). */
#define HOLD_PER_TURN 4

/* While the job runs, the loop's idle turns open each worker's cgroup files for its end, so that
 * the reaps after a failure (the stop's sweep, then every worker's stats) do not open them. */
static bool
holds_pending(const struct xmp_supervisor *sv)
{
    /* In worker order, each once it is started (fork mode starts them after the preload). */
    return sv->hold_files && sv->stopping == XMP_STOP_NONE && sv->held_upto < sv->n_workers &&
           sv->workers[sv->held_upto].pid > 0;
}

static void
hold_some(struct xmp_supervisor *sv)
{
    for (size_t k = 0; k < HOLD_PER_TURN && holds_pending(sv); k++) {
        struct xmp_worker *w = &sv->workers[sv->held_upto++];
        if (w->running && w->cg != NULL)
            xmp_cgroup_hold(w->cg);
    }
}

/* Runs the event loop while more(sv) holds. */
static void
loop_while(struct xmp_supervisor *sv, bool (*more)(const struct xmp_supervisor *sv))
{
    struct epoll_event evs[64];

    while (more(sv)) {
        /* Lines are gathered while events keep coming and written when the loop goes idle. */
        bool pending = consoles_pending(sv), holds = holds_pending(sv);
        int n = epoll_wait(sv->epfd, evs, (int)(sizeof(evs) / sizeof(evs[0])),
                           pending || holds ? 0 : -1);
        if (n == 0 && (pending || holds)) {
            if (pending)
                service_consoles(sv);
            else
                hold_some(sv);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            /* Cannot wait any more: stop everything rather than leave workers unsupervised. */
            sv->zy.stop_sent = sv->zy.running;
            xmp_grp_kill_all_now(sv);
            for (size_t i = 0; i < sv->n_workers; i++) {
                struct xmp_worker *w = &sv->workers[i];
                siginfo_t si;
                struct rusage ru;
                if (w->running && xmp_grp_wait_worker(w, 0, &si, &ru) == 0)
                    xmp_grp_finish_worker(sv, w, &si, &ru);
            }
            if (sv->zy.running) {
                siginfo_t si = {0};
                if (waitid(P_PID, (id_t)sv->zy.pid, &si, WEXITED) == 0)
                    xmp_zygote_finish(sv, &si);
            }
            break;
        }
        for (int i = 0; i < n; i++)
            dispatch(sv, &evs[i]);
        if (consoles_full(sv))
            service_consoles(sv);
        service_status(sv);
    }
}

static bool
workers_running(const struct xmp_supervisor *sv)
{
    return sv->n_running > 0;
}

static bool
zygote_preloading(const struct xmp_supervisor *sv)
{
    return sv->zy.running && !sv->zy.ready;
}

static bool
zygote_running(const struct xmp_supervisor *sv)
{
    return sv->zy.running;
}

/* start: fork: the workers of a run the zygote did not live to fork never existed. */
static void
mark_not_forked(struct xmp_supervisor *sv)
{
    for (size_t i = 0; i < sv->n_workers; i++) {
        struct xmp_worker_report *rep = sv->workers[i].rep;
        rep->state = XMP_WORKER_STOPPED_BY_XMPRUN;
        xmp_now_real(&rep->ended_at);
        rep->ended_mono_ns = xmp_now_ns();
    }
}

/* One run of the whole group, until every worker is reaped. */
void
xmp_group_run(struct xmp_supervisor *sv)
{
    prepare_run(sv);
    if (sv->fork_mode) {
        /* The zygote preloads (as long as it takes, within the job's timeout) and says when it
         * is ready to fork; a restart finds it ready. */
        loop_while(sv, zygote_preloading);
        if (!sv->zy.running || !sv->zy.ready || sv->stopping != XMP_STOP_NONE) {
            mark_not_forked(sv);
            return;
        }
    }
    /* An exec-mode worker has joined its cgroups and exec'd when xmp_spawn returns; a forked
     * one waits at its start gate until every worker exists (see xmp_spawn). */
    for (size_t i = 0; i < sv->n_workers; i++)
        xmp_grp_spawn_worker(sv, &sv->workers[i], i);
    for (size_t i = 0; sv->fork_mode && i < sv->n_workers; i++)
        xmp_grp_start_worker(sv, &sv->workers[i]);
    write_state(sv);
    xmp_grp_watch_start(sv);
    xmp_grp_kmsg_open(sv);
    xmp_grp_gpumem_open(sv);
    xmp_grp_memwatch_open(sv);
    /* On another CPU while the job runs, not on the way of the first stop; where there is no
     * other CPU the first capture loads it. */
    if (sv->spec->stacks == XMP_STACKS_ALWAYS)
        xmp_thread_start(&sv->stacks_preload, xmp_stacks_preload, NULL, PRELOAD_STACK);
    for (size_t i = 0; i < sv->n_workers; i++)
        if (!sv->workers[i].running && xmp_worker_failed(sv->workers[i].rep))
            xmp_grp_on_worker_failure(sv);
    xmp_status_arm(&sv->status, true);

    loop_while(sv, workers_running);
    /* The summary and xmprun's messages come next, on a clean line. */
    xmp_status_arm(&sv->status, false);
    sv->status.due = false;
    xmp_status_erase(&sv->status);
    xmp_grp_gpumem_close(sv);
    xmp_grp_memwatch_close(sv);
    xmp_thread_join(&sv->stacks_preload);

    /* Whatever a worker left behind in its process group is part of the job and ends with it;
     * the cgroups catch the rest when they are destroyed. */
    for (size_t i = 0; i < sv->n_workers; i++) {
        struct xmp_worker *w = &sv->workers[i];
        struct xmp_error err = {0};
        if (w->pid > 0)
            kill(-w->pid, SIGKILL);
        if (w->cg != NULL && !xmp_cgroup_is_empty(w->cg))
            xmp_cgroup_kill(w->cg, &err);
    }
    xmp_grp_try_reap_zygote(sv);
    xmp_group_kill_orphans(sv, sv->zy.running ? sv->zy.pid : 0);
    for (size_t i = 0; i < sv->n_workers; i++)
        drain_streams(sv, &sv->workers[i]);
    service_consoles(sv);
    /* What the driver logged as the workers died (an Xid often comes just before). */
    xmp_grp_kmsg_read(sv);
    xmp_grp_kmsg_close(sv);
}

void
xmp_group_end_zygote(struct xmp_supervisor *sv, bool ok)
{
    struct xmp_zygote *zy = &sv->zy;

    if (!zy->running)
        return;
    xmp_zygote_send_done(sv, ok);
    /* After a failure, or when the job is being stopped, the zygote gets the grace period to
     * exit (spawn() raises in it); after success it finishes its own work, within the job's
     * timeout. */
    if (!ok || sv->stopping != XMP_STOP_NONE) {
        zy->stop_sent = true;
        if (sv->kill_at_ns == 0)
            sv->kill_at_ns = xmp_now_ns() + sv->spec->grace_ms * 1000000;
        xmp_grp_arm_timer(sv);
    }
    loop_while(sv, zygote_running);
}
