/* One run of the worker group: spawning every worker into its cgroup, then one epoll loop over
 * the signalfd, a pidfd per worker, their output pipes and a timerfd for the job deadline and the
 * kill grace, with kill-all, signal forwarding and reaping (also of orphans, as a subreaper). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/run/group.h"
#include "runner/run/zygote.h"

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

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

/* One read per stream per wakeup is capped, so that a worker flooding its output cannot starve
 * the signalfd, the other workers or the deadline. */
#define READ_BUDGET (64 * 1024)
/* At the end of a run, what is still buffered in a pipe is drained up to this much. */
#define FINAL_DRAIN (4 * 1024 * 1024)
/* A TORCHELASTIC_ERROR_FILE is read up to this much: a traceback fits, and the report of a
 * worker that writes gigabytes there stays small. */
#define ERROR_FILE_MAX (64 * 1024)

static int
ep_ctl(struct xmp_supervisor *sv, int op, int fd, uint32_t events, enum xmp_ev_kind kind,
       size_t index)
{
    struct epoll_event ev = {.events = events, .data.u64 = ((uint64_t)kind << 32) | index};
    return epoll_ctl(sv->epfd, op, fd, &ev);
}

static int
ep_add(struct xmp_supervisor *sv, int fd, enum xmp_ev_kind kind, size_t index)
{
    /* While the console is backed up, new output pipes start paused like the others. */
    uint32_t events =
        (kind == XMP_EV_STDOUT || kind == XMP_EV_STDERR) && sv->reading_paused ? 0 : EPOLLIN;
    return ep_ctl(sv, EPOLL_CTL_ADD, fd, events, kind, index);
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
        pollable = ep_ctl(sv, EPOLL_CTL_ADD, fd, 0, XMP_EV_CONSOLE, (size_t)i) == 0;
        if (pollable)
            epoll_ctl(sv->epfd, EPOLL_CTL_DEL, fd, NULL);
        xmp_console_init(&sv->consoles[i], fd, !pollable);
    }
    sv->reading_paused = false;
    xmp_status_init(&sv->status, !xmp_quiet(sv));
    if (sv->status.timerfd >= 0 &&
        ep_ctl(sv, EPOLL_CTL_ADD, sv->status.timerfd, EPOLLIN, XMP_EV_STATUS, 0) < 0)
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
            if (ep_ctl(sv, EPOLL_CTL_ADD, c->fd, EPOLLOUT, XMP_EV_CONSOLE, (size_t)i) == 0)
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
                ep_ctl(sv, EPOLL_CTL_MOD, streams[k]->fd, high ? 0 : EPOLLIN,
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
    struct xmp_status_info info = {.nearest_rank = -1, .nearest_memory = -1};
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
    xmp_status_draw(&sv->status, &info);
}

static void
ep_del(struct xmp_supervisor *sv, int fd)
{
    if (fd >= 0)
        epoll_ctl(sv->epfd, EPOLL_CTL_DEL, fd, NULL);
}

/* The timerfd always holds the next deadline: the job timeout or the end of the kill grace. */
static void
arm_timer(struct xmp_supervisor *sv)
{
    int64_t next = 0;
    struct itimerspec its = {0};

    if (sv->deadline_ns > 0 && !sv->report.timed_out)
        next = sv->deadline_ns;
    if (sv->kill_at_ns > 0 && (next == 0 || sv->kill_at_ns < next))
        next = sv->kill_at_ns;
    if (sv->peer_wait_ns > 0 && (next == 0 || sv->peer_wait_ns < next))
        next = sv->peer_wait_ns;
    if (next > 0) {
        its.it_value.tv_sec = next / 1000000000;
        its.it_value.tv_nsec = next % 1000000000;
    }
    timerfd_settime(sv->timerfd, TFD_TIMER_ABSTIME, &its, NULL);
}

/* Sends sig to every process of the worker: its process group (what it forked without setsid)
 * and every process in its cgroup (what left the group). A failure to list the cgroup leaves the
 * group signalled and the cgroup kill after the grace period to do the rest. */
static void
signal_worker(struct xmp_worker *w, int sig)
{
    struct xmp_error err = {0};

    if (w->running && w->pid > 0) {
        kill(-w->pid, sig);
        kill(w->pid, sig);
    }
    if (w->cg != NULL)
        xmp_cgroup_signal(w->cg, sig, &err);
}

/* The zygote is stopped with the job (interrupt, timeout, the end of a failed job), not when a
 * worker fails: the next restart forks from it. */
static void
signal_zygote(struct xmp_supervisor *sv, int sig)
{
    struct xmp_zygote *zy = &sv->zy;

    if (!zy->running || zy->pid <= 0)
        return;
    zy->stop_sent = true;
    kill(-zy->pid, sig);
    kill(zy->pid, sig);
}

static void
kill_all_now(struct xmp_supervisor *sv)
{
    struct xmp_error err = {0};

    if (sv->zy.stop_sent)
        signal_zygote(sv, SIGKILL);

    for (size_t i = 0; i < sv->n_workers; i++) {
        struct xmp_worker *w = &sv->workers[i];
        /* cgroup.kill (or freeze, kill, thaw) also gets the grandchildren that called setsid()
         * or ignore SIGTERM, which the process group misses. */
        if (w->cg != NULL && xmp_cgroup_kill(w->cg, &err) < 0 && !xmp_quiet(sv)) {
            xmp_status_erase(&sv->status);
            fprintf(stderr, "xmprun: warning: worker %d: %s\n", w->pw->rank, err.msg);
        }
        signal_worker(w, SIGKILL);
    }
    sv->kill_at_ns = 0;
    arm_timer(sv);
}

static void
stop_all(struct xmp_supervisor *sv, enum xmp_stop_reason reason, int sig)
{
    if (sv->stopping == XMP_STOP_NONE)
        sv->stopping = reason;
    sv->peer_wait_ns = 0;
    if (reason != XMP_STOP_FAILURE)
        signal_zygote(sv, sig);
    for (size_t i = 0; i < sv->n_workers; i++) {
        struct xmp_worker *w = &sv->workers[i];
        if (!w->running)
            continue;
        w->stop_sent = true;
        signal_worker(w, sig);
    }
    if (sv->kill_at_ns == 0)
        sv->kill_at_ns = xmp_now_ns() + (sv->spec->grace_ms > 0 ? sv->spec->grace_ms : 0) * 1000000;
    arm_timer(sv);
}

static void
on_worker_failure(struct xmp_supervisor *sv)
{
    if (sv->stopping != XMP_STOP_NONE || sv->spec->on_failure != XMP_FAILURE_KILL_ALL)
        return;
    stop_all(sv, XMP_STOP_FAILURE, SIGTERM);
}

static void
close_stream(struct xmp_supervisor *sv, struct xmp_stream *s)
{
    ep_del(sv, s->fd);
    xmp_stream_close(s);
}

/* Takes in the worker's exec status once the child has exec'd or said why it could not. At exit
 * it is read to the end first, so that a worker that could not start is reported as such. */
static void
read_exec_status(struct xmp_supervisor *sv, struct xmp_worker *w, bool block)
{
    int fd = w->spawned.status_fd;

    /* Out of the epoll set before the read can close it: closing does not remove it while a
     * worker forked later still holds a copy (until its exec), and its EOF would then wake the
     * loop again and again, spinning on a core those workers need to start. (An exec-mode
     * worker has no pipe: xmp_spawn knew at once.) */
    if (fd >= 0) {
        ep_del(sv, fd);
        if (xmp_spawn_read_status(&w->spawned, block) != 0) {
            ep_ctl(sv, EPOLL_CTL_ADD, fd, EPOLLIN, XMP_EV_EXEC, (size_t)(w - sv->workers));
            return;
        }
    }
    /* A worker that could not join its cgroups already has the reason; what the child says
     * about the closed gate adds nothing. */
    if (w->spawned.exec_failed && !w->start_failed) {
        w->start_failed = true;
        snprintf(w->rep->start_error, sizeof(w->rep->start_error), "%s", w->spawned.child_err.msg);
    }
}

/* memory.oom_at for the cgroup whose limit fired. isolate/ walks the chain generically (the
 * worker's cgroup, its parents, the cgroups above the job); a cgroup of xmprun's that is neither
 * the worker's nor the job's is the zygote's, which its workers share (fork mode). */
static const char *
oom_at_name(const struct xmp_supervisor *sv, const struct xmp_worker *w,
            const struct xmp_cgroup_oom_site *site)
{
    if (site->enclosing)
        return "enclosing";
    if (site->cg == w->cg)
        return "worker";
    if (site->cg == sv->job_cg)
        return "job";
    return "shared";
}

/* How long a worker's death by SIGINT, SIGTERM or SIGHUP that xmprun did not send waits for
 * the same kind of signal to reach xmprun before it counts as the worker's own failure. An
 * outside stop (Slurm's scancel, a container stop, ^C to the process group) signals the
 * workers and xmprun at nearly the same instant, but in no set order: the worker may die, and
 * its pidfd be read, before xmprun's own signal is. Only such a death waits, and only once. */
#define OUTSIDE_SIGNAL_WINDOW_MS 1000

static bool
is_stop_signal(int sig)
{
    return sig == SIGINT || sig == SIGTERM || sig == SIGHUP;
}

/* The worker ended of a stop signal (or exited 128+it, as a shell or a handler does) that
 * xmprun did not send. */
static bool
died_of_outside_stop(const struct xmp_worker *w)
{
    const struct xmp_worker_report *rep = w->rep;
    int sig = rep->signal > 0 ? rep->signal : rep->exit_code > 128 ? rep->exit_code - 128 : 0;

    return !w->stop_sent && rep->state != XMP_WORKER_FAILED_TO_START && is_stop_signal(sig);
}

/* xmprun got SIGINT, SIGTERM or SIGHUP: forward it, and stop the job (a second one: at once). */
static void
on_interrupt(struct xmp_supervisor *sv, int sig)
{
    int64_t now = xmp_now_ns();

    /* Forward to every worker's process group, as a terminal would to a foreground job. */
    for (size_t i = 0; i < sv->n_workers; i++)
        if (sv->workers[i].running && sv->workers[i].pid > 0)
            kill(-sv->workers[i].pid, sig);
    if (sv->zy.running && sv->zy.pid > 0)
        kill(-sv->zy.pid, sig);
    if (sv->report.interrupt_signal != 0) {
        /* A second ^C means "now". */
        kill_all_now(sv);
        return;
    }
    sv->report.interrupt_signal = sig;
    sv->report.interrupt_mono_ns = now;
    if (sv->zy.running)
        sv->zy.stop_sent = true;
    for (size_t i = 0; i < sv->n_workers; i++) {
        struct xmp_worker *w = &sv->workers[i];
        if (w->running)
            w->stop_sent = true;
        else if (w->rep != NULL && w->rep->ended_mono_ns > 0 && died_of_outside_stop(w) &&
                 now - w->rep->ended_mono_ns <= OUTSIDE_SIGNAL_WINDOW_MS * 1000000LL)
            w->rep->interrupted = true;
    }
    if (sv->stopping == XMP_STOP_NONE)
        sv->stopping = XMP_STOP_INTERRUPT;
    sv->peer_wait_ns = 0;
    if (sv->kill_at_ns == 0)
        sv->kill_at_ns = now + sv->spec->grace_ms * 1000000;
    arm_timer(sv);
}

/* A worker died of a stop signal xmprun did not send: wait (bounded) for the outside signal
 * that may be on its way to xmprun too. True when it came (the death is then the interrupt's). */
static bool
await_outside_signal(struct xmp_supervisor *sv)
{
    struct timespec ts = {OUTSIDE_SIGNAL_WINDOW_MS / 1000,
                          (OUTSIDE_SIGNAL_WINDOW_MS % 1000) * 1000000L};
    sigset_t set;
    siginfo_t si;
    int sig;

    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    /* The signals are blocked (they go to the signalfd), so sigtimedwait takes them off the
     * pending set just as a read of the signalfd would. */
    do
        sig = sigtimedwait(&set, &si, &ts);
    while (sig < 0 && errno == EINTR);
    if (sig <= 0)
        return false;
    on_interrupt(sv, sig);
    return true;
}

/* The worker decides what is at its TORCHELASTIC_ERROR_FILE path, so it is read without
 * following a link (to a file only xmprun could read), without blocking on a FIFO, and only up
 * to a bound. What is not whole JSON is kept as text, with a note that says why. */
static void
read_error_file(struct xmp_worker_report *rep, int run_dir, const char *path)
{
    cleanup_free char *text = NULL;
    struct xmp_error err = {0};
    json_error_t jerr;
    size_t len = 0;
    int64_t size = 0;
    char total[32], kept[32];

    if (path == NULL)
        return;
    if (xmp_file_read_bounded(run_dir, path, ERROR_FILE_MAX, &text, &len, &size, &err) < 0) {
        if (err.errnum != ENOENT)
            snprintf(rep->error_file_note, sizeof(rep->error_file_note), "not read: %s", err.msg);
        return;
    }
    if (len == 0)
        return;
    if ((int64_t)len < size) {
        xmp_format_bytes(size, total, sizeof(total));
        xmp_format_bytes((int64_t)len, kept, sizeof(kept));
        rep->error_file = xmp_report_text_json(text);
        snprintf(rep->error_file_note, sizeof(rep->error_file_note),
                 "cut: the error file is %s, only its first %s are kept, as text", total, kept);
        return;
    }
    rep->error_file = json_loadb(text, len, 0, &jerr);
    if (rep->error_file == NULL) {
        rep->error_file = xmp_report_text_json(text);
        snprintf(rep->error_file_note, sizeof(rep->error_file_note),
                 "not JSON (line %d: %s), kept as text", jerr.line, jerr.text);
    }
}

/* A log file that could not be written (a full disk) stops there; that is said at once on
 * stderr and in the report, never silently. */
static void
check_log(struct xmp_worker *w, struct xmp_stream *s)
{
    const char *path = s == &w->out ? w->pw->stdout_path : w->pw->stderr_path;
    char msg[sizeof(w->rep->log_error)];

    if (s->log_errno == 0)
        return;
    snprintf(msg, sizeof(msg), "logs.dir: write `%s`: %s; the log is incomplete from there", path,
             strerror(s->log_errno));
    s->log_errno = 0;
    fprintf(stderr, "xmprun: warning: worker %d: %s\n", w->pw->rank, msg);
    if (w->rep->log_error[0] == '\0')
        snprintf(w->rep->log_error, sizeof(w->rep->log_error), "%s", msg);
}

static void
on_stream(struct xmp_supervisor *sv, struct xmp_worker *w, struct xmp_stream *s)
{
    int eof = xmp_stream_read(s, READ_BUDGET);

    check_log(w, s);
    if (eof != 0)
        close_stream(sv, s);
}

/* A worker whose stderr says that its peer went away may have noticed before the worker that
 * failed on its own is reaped: that one closed its connections as it began to exit (Python's
 * teardown after sys.exit, say) and is still exiting. Stopping the job at once would report
 * the symptom and SIGTERM the cause, so the stop waits this long for another worker to fail
 * (which stops the job at once) or for the others to end by themselves. */
#define PEER_LOSS_WINDOW_MS 1000

static bool
lost_its_peer(struct xmp_supervisor *sv, struct xmp_worker *w)
{
    char addr[96];

    /* Its last words may still be in the pipe (which holds one READ_BUDGET by default). */
    if (w->err.fd >= 0)
        on_stream(sv, w, &w->err);
    /* The tail's ring as it lies: for a yes or no, the order of its lines does not matter. */
    return xmp_worker_peer_loss(w->rep, w->tail.lines, w->tail.count, addr, sizeof(addr)) != NULL;
}

/* waitid for the worker (through its pidfd where it has one, so that a recycled pid can never
 * be confused with it) with the kernel's fifth argument, which glibc's waitid leaves out: the
 * reaped worker's own resource usage and that of the children it reaped. */
static int
wait_worker(const struct xmp_worker *w, int options, siginfo_t *si, struct rusage *ru)
{
    int ret;

    memset(si, 0, sizeof(*si));
    memset(ru, 0, sizeof(*ru));
    do {
        if (w->pidfd >= 0)
            ret = (int)syscall(SYS_waitid, P_PIDFD, w->pidfd, si, WEXITED | options, ru);
        else
            ret = (int)syscall(SYS_waitid, P_PID, w->pid, si, WEXITED | options, ru);
    } while (ret < 0 && errno == EINTR);
    return ret;
}

/* What the reap's status says the worker's end was; an OOM kill is told from a SIGKILL once
 * its cgroup's counters are read (account_worker). */
static enum xmp_worker_state
end_state(const struct xmp_supervisor *sv, const struct xmp_worker *w)
{
    if (w->start_failed)
        return XMP_WORKER_FAILED_TO_START;
    if (w->stop_sent)
        return sv->stopping == XMP_STOP_TIMEOUT ? XMP_WORKER_TIMEOUT : XMP_WORKER_STOPPED_BY_XMPRUN;
    return w->rep->signal > 0 ? XMP_WORKER_SIGNALED : XMP_WORKER_EXITED;
}

/* The reaped worker's stats, its OOM attribution and its error file, for the report; its
 * cgroup goes. After the stop of the others that its failure calls for, which waits for none of
 * this. */
static void
account_worker(struct xmp_supervisor *sv, struct xmp_worker *w)
{
    struct xmp_worker_report *rep = w->rep;
    struct xmp_cgroup_stats st = {-1, -1, -1, -1, -1};
    struct xmp_error err = {0};

    if (w->cg != NULL && xmp_cgroup_read_stats(w->cg, &st, &err) == 0) {
        rep->memory_peak = st.memory_peak;
        rep->oom_kills = st.oom_kills;
        if (st.user_usec >= 0)
            rep->user_s = (double)st.user_usec / 1e6;
        if (st.system_usec >= 0)
            rep->system_s = (double)st.system_usec / 1e6;
        rep->pids_hits = st.pids_hits;
    }
    if (w->cg != NULL && rep->oom_kills > 0) {
        struct xmp_cgroup_oom_site site;
        if (xmp_cgroup_oom_site(w->cg, &w->oom_snap, &site)) {
            rep->oom_at = oom_at_name(sv, w, &site);
            rep->oom_limit = site.limit;
            snprintf(rep->oom_path, sizeof(rep->oom_path), "%s", site.path);
        } else {
            rep->oom_unseen = true;
        }
    }
    /* Its cgroup goes with it, while the other workers still run, so that the end of the job
     * has less to remove; what it left behind there keeps it until the run's end. */
    if (w->cg != NULL)
        xmp_cgroup_release(w->cg);
    w->cg = NULL;
    if (rep->user_s < 0)
        rep->user_s = 0;
    if (rep->system_s < 0)
        rep->system_s = 0;
    if (rep->state != XMP_WORKER_FAILED_TO_START && rep->signal == SIGKILL && rep->oom_kills > 0)
        rep->state = XMP_WORKER_OOM_KILLED;

    /* SIGSYS under a filter that kills is the filter's doing; the kernel's audit record of
     * the kill names the call. */
    rep->seccomp_profile = NULL;
    rep->seccomp_syscall[0] = '\0';
    if (rep->state == XMP_WORKER_SIGNALED && rep->signal == SIGSYS && sv->iso.kill_label != NULL) {
        rep->seccomp_profile = sv->iso.kill_label;
        xmp_seccomp_killed_by(rep->pid, rep->seccomp_syscall, sizeof(rep->seccomp_syscall));
    }
    read_error_file(rep, sv->run_fd, w->pw->error_file);
    if (sv->opts != NULL && sv->opts->verbosity > 0) {
        char msg[512];
        xmp_worker_describe(rep, msg, sizeof(msg));
        xmp_status_erase(&sv->status); /* xmprun's own lines go below it too */
        fprintf(stderr, "xmprun: %s\n", msg);
    }
}

/* What a failed worker's end calls for: nothing yet when an outside stop is on its way to
 * xmprun too (the interrupt then stops the job) or when it lost a peer that may be the real
 * cause (a timer waits for that), else the stop of the others (on_failure: kill_all). */
static void
on_failed_worker(struct xmp_supervisor *sv, struct xmp_worker *w)
{
    /* Its death may be the first sign of an outside stop that is about to reach xmprun. */
    if (sv->report.interrupt_signal == 0 && died_of_outside_stop(w) && await_outside_signal(sv))
        return;
    if (sv->stopping == XMP_STOP_NONE && sv->spec->on_failure == XMP_FAILURE_KILL_ALL &&
        lost_its_peer(sv, w)) {
        if (sv->peer_wait_ns == 0) {
            sv->peer_wait_ns = xmp_now_ns() + PEER_LOSS_WINDOW_MS * 1000000LL;
            arm_timer(sv);
        }
        return;
    }
    on_worker_failure(sv);
}

/* A worker was reaped (si, ru: its status and resource usage). The others are stopped first
 * when its end calls for it, as a launcher that only signals and reaps would: the stats, the
 * cgroup's release and the error file of this one (several calls each) come after. */
static void
finish_worker(struct xmp_supervisor *sv, struct xmp_worker *w, const siginfo_t *si,
              const struct rusage *ru)
{
    struct xmp_worker_report *rep = w->rep;

    xmp_now_real(&rep->ended_at);
    rep->ended_mono_ns = xmp_now_ns();
    read_exec_status(sv, w, true);
    if (si->si_code == CLD_EXITED) {
        rep->exit_code = si->si_status;
    } else {
        rep->signal = si->si_status;
        rep->exit_code = -1;
    }
    /* CPU time: the cgroup's counters include everything the worker forked; without a cgroup,
     * the reap's own count is the worker and the children it reaped. */
    rep->user_s = (double)ru->ru_utime.tv_sec + (double)ru->ru_utime.tv_usec / 1e6;
    rep->system_s = (double)ru->ru_stime.tv_sec + (double)ru->ru_stime.tv_usec / 1e6;
    rep->state = end_state(sv, w);
    ep_del(sv, w->pidfd);
    if (w->pidfd >= 0)
        close(w->pidfd);
    w->pidfd = -1;
    w->running = false;
    sv->n_running--;
    if (xmp_worker_failed(rep))
        on_failed_worker(sv, w);
    account_worker(sv, w);
}

/* Reaps the worker if it has exited; its status is taken through the pidfd so that a recycled
 * pid can never be confused with it. */
static void
try_reap(struct xmp_supervisor *sv, struct xmp_worker *w)
{
    siginfo_t si;
    struct rusage ru;

    if (w->running && wait_worker(w, WNOHANG, &si, &ru) == 0 && si.si_pid != 0)
        finish_worker(sv, w, &si, &ru);
}

static void
try_reap_zygote(struct xmp_supervisor *sv)
{
    struct xmp_zygote *zy = &sv->zy;
    siginfo_t si;
    int ret;

    if (!zy->running)
        return;
    memset(&si, 0, sizeof(si));
    do {
        if (zy->pidfd >= 0)
            ret = waitid((idtype_t)P_PIDFD, (id_t)zy->pidfd, &si, WEXITED | WNOHANG);
        else
            ret = waitid(P_PID, (id_t)zy->pid, &si, WEXITED | WNOHANG);
    } while (ret < 0 && errno == EINTR);
    if (ret != 0 || si.si_pid == 0)
        return;
    xmp_zygote_finish(sv, &si);
    /* Without its zygote the job cannot go on (nor restart): stop the workers. */
    if (sv->n_running > 0 && sv->stopping == XMP_STOP_NONE)
        stop_all(sv, XMP_STOP_FAILURE, SIGTERM);
}

/* On SIGCHLD: reap every child that has exited. As a subreaper (and as PID 1) xmprun inherits
 * orphaned grandchildren; peeking with WNOWAIT first keeps a worker's status from being
 * swallowed by the catch-all reap. Only the children that have exited are looked at: not every
 * worker at every SIGCHLD, which made a stop of 32 workers 200 waitid calls (their pidfds say
 * when each one ends). */
static void
reap_children(struct xmp_supervisor *sv)
{
    for (;;) {
        siginfo_t si;
        bool worker = false;

        memset(&si, 0, sizeof(si));
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
            return;
        for (size_t i = 0; i < sv->n_workers; i++) {
            struct xmp_worker *w = &sv->workers[i];
            if (w->running && w->pid == si.si_pid) {
                try_reap(sv, w);
                worker = true;
                /* Never spin on a status that the pidfd did not collect. */
                if (w->running)
                    return;
            }
        }
        if (sv->zy.running && si.si_pid == sv->zy.pid) {
            try_reap_zygote(sv);
            if (sv->zy.running)
                return;
            continue;
        }
        if (!worker && waitpid(si.si_pid, NULL, WNOHANG) <= 0)
            return;
    }
}

static void
on_signal(struct xmp_supervisor *sv)
{
    struct signalfd_siginfo fsi;

    while (read(sv->sigfd, &fsi, sizeof(fsi)) == (ssize_t)sizeof(fsi)) {
        int sig = (int)fsi.ssi_signo;

        if (sig == SIGCHLD) {
            reap_children(sv);
            continue;
        }
        if (is_stop_signal(sig)) {
            on_interrupt(sv, sig);
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
            stop_all(sv, XMP_STOP_TIMEOUT, SIGTERM);
    }
    if (sv->peer_wait_ns > 0 && now >= sv->peer_wait_ns) {
        sv->peer_wait_ns = 0;
        on_worker_failure(sv);
    }
    if (sv->kill_at_ns > 0 && now >= sv->kill_at_ns)
        kill_all_now(sv);
    arm_timer(sv);
}

/* The worker's environment for this run: the plan's, with XMPRUN_RESTART_COUNT and (unless the
 * spec set it) TORCHELASTIC_RESTART_COUNT set to the current restart. Built here, before the
 * fork, so the child allocates nothing. */
static char **
worker_environ(struct xmp_supervisor *sv, const struct xmp_plan_worker *pw)
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

static void
spawn_worker(struct xmp_supervisor *sv, struct xmp_worker *w, size_t index)
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
    ep_add(sv, po[0], XMP_EV_STDOUT, index);
    ep_add(sv, pe[0], XMP_EV_STDERR, index);

    /* A stale error file from an earlier run must not be reported as this run's. (The first
     * run's directory was just made, empty.) */
    if (pw->error_file != NULL && sv->restart > 0 && sv->run_fd >= 0)
        unlinkat(sv->run_fd, strrchr(pw->error_file, '/') + 1, 0);
    /* Every run has new cgroups (a restart makes them again), so all they count is this run's. */
    if (w->cg != NULL)
        xmp_cgroup_oom_snapshot(w->cg, &w->oom_snap);

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
        ep_add(sv, w->pidfd, XMP_EV_PIDFD, index);
    if (sp.status_fd >= 0)
        ep_add(sv, sp.status_fd, XMP_EV_EXEC, index);
    else
        read_exec_status(sv, w, false);
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

static void
start_worker(struct xmp_supervisor *sv, struct xmp_worker *w)
{
    struct xmp_error err = {0};

    if (!w->running || xmp_spawn_start(&w->spawned, w->cg, sv->mode, &err) == 0)
        return;
    /* The child is killed and will be reaped like any other; it never ran the command. */
    w->start_failed = true;
    snprintf(w->rep->start_error, sizeof(w->rep->start_error), "%s", err.msg);
}

/* Kills and reaps every remaining child of xmprun: as a subreaper it inherits the grandchildren
 * whose parents exited, including those that left their process group with setsid(). Waits
 * (bounded) until they are reaped, so that none is left as a zombie for init to collect. */
void
xmp_group_kill_orphans(pid_t keep)
{
    pid_t self = getpid();
    int64_t give_up = xmp_now_ns() + 2000000000LL;
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
            if (pid > 1 && pid != keep) {
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
        check_log(w, streams[i]);
        close_stream(sv, streams[i]);
    }
    w->rep->stderr_tail = xmp_tail_take(&w->tail, &w->rep->n_tail);
    xmp_tail_free(&w->tail);
}

static void
dispatch(struct xmp_supervisor *sv, const struct epoll_event *ev)
{
    enum xmp_ev_kind kind = (enum xmp_ev_kind)(ev->data.u64 >> 32);
    size_t index = (size_t)(ev->data.u64 & 0xffffffffu);

    switch (kind) {
    case XMP_EV_SIGNAL:
        on_signal(sv);
        return;
    case XMP_EV_TIMER:
        on_timer(sv);
        return;
    case XMP_EV_PIDFD:
        try_reap(sv, &sv->workers[index]);
        return;
    case XMP_EV_STDOUT:
        on_stream(sv, &sv->workers[index], &sv->workers[index].out);
        return;
    case XMP_EV_STDERR:
        on_stream(sv, &sv->workers[index], &sv->workers[index].err);
        return;
    case XMP_EV_CONSOLE:
        /* Writable again, or its reader is gone (EPOLLERR): the write says which. */
        service_consoles(sv);
        return;
    case XMP_EV_EXEC:
        read_exec_status(sv, &sv->workers[index], false);
        return;
    case XMP_EV_ZYGOTE:
        try_reap_zygote(sv);
        return;
    case XMP_EV_ZSOCK:
        xmp_zygote_on_message(sv);
        return;
    case XMP_EV_STATUS:
        xmp_status_tick(&sv->status);
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
        rep->memory_limit = w->cg != NULL && pw->limits.memory > 0 ? pw->limits.memory : -1;
        rep->job_memory_limit =
            w->cg != NULL && sv->plan.job_limits.memory > 0 ? sv->plan.job_limits.memory : -1;
        rep->memory_peak = rep->oom_kills = rep->oom_limit = rep->pids_hits = -1;
        rep->pids_limit = w->cg != NULL && pw->limits.pids > 0 ? pw->limits.pids : -1;
        rep->job_pids_limit =
            w->cg != NULL && sv->plan.job_limits.pids > 0 ? sv->plan.job_limits.pids : -1;
        w->rep = rep;
        w->pid = 0;
        w->pidfd = -1;
        w->spawned = (struct xmp_spawned){.pidfd = -1, .status_fd = -1, .gate_fd = -1};
        w->running = w->start_failed = w->stop_sent = false;
        w->out = (struct xmp_stream){.fd = -1, .log_fd = -1};
        w->err = (struct xmp_stream){.fd = -1, .log_fd = -1};
        xmp_strv_free(w->environ);
        w->environ = worker_environ(sv, pw);
    }
    sv->stopping = XMP_STOP_NONE;
    sv->peer_wait_ns = 0;
    sv->kill_at_ns = 0;
    sv->held_upto = 0;
    arm_timer(sv);
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
            kill_all_now(sv);
            for (size_t i = 0; i < sv->n_workers; i++) {
                struct xmp_worker *w = &sv->workers[i];
                siginfo_t si;
                struct rusage ru;
                if (w->running && wait_worker(w, 0, &si, &ru) == 0)
                    finish_worker(sv, w, &si, &ru);
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
        spawn_worker(sv, &sv->workers[i], i);
    for (size_t i = 0; sv->fork_mode && i < sv->n_workers; i++)
        start_worker(sv, &sv->workers[i]);
    write_state(sv);
    for (size_t i = 0; i < sv->n_workers; i++)
        if (!sv->workers[i].running && xmp_worker_failed(sv->workers[i].rep))
            on_worker_failure(sv);
    xmp_status_arm(&sv->status, true);

    loop_while(sv, workers_running);
    /* The summary and xmprun's messages come next, on a clean line. */
    xmp_status_arm(&sv->status, false);
    sv->status.due = false;
    xmp_status_erase(&sv->status);

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
    try_reap_zygote(sv);
    xmp_group_kill_orphans(sv->zy.running ? sv->zy.pid : 0);
    for (size_t i = 0; i < sv->n_workers; i++)
        drain_streams(sv, &sv->workers[i]);
    service_consoles(sv);
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
        arm_timer(sv);
    }
    loop_while(sv, zygote_running);
}
