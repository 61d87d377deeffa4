/* One run of the worker group: the stop sequence. Signals to each worker (its process group and
 * its cgroup), the kill-all after a failure, the job timeout and the grace, and the signals from
 * outside (a stop, a second ^C). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "isolate/proc.h"
#include "runner/run/group_internal.h"
#include "runner/run/spawn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/wait.h>

#ifndef P_PIDFD
#define P_PIDFD 3
#endif
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

void
xmp_grp_kill_all_now(struct xmp_supervisor *sv)
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
    /* A worker still there after this long is stuck where SIGKILL cannot reach it. */
    if (sv->unkillable_at_ns == 0)
        sv->unkillable_at_ns = xmp_now_ns() + XMP_UNKILLABLE_MS * 1000000LL;
    xmp_grp_arm_timer(sv);
}

/* A worker's processes for its stacks, itself first, into out[0, XMP_STACKS_MAX_PROCS): its
 * cgroup's, else those below it. */
struct procs {
    pid_t *out;
    size_t n;
};

static bool
add_proc(pid_t pid, void *data)
{
    struct procs *p = data;

    if (pid != p->out[0])
        p->out[p->n++] = pid;
    return p->n < XMP_STACKS_MAX_PROCS;
}

static size_t
worker_procs(struct xmp_worker *w, pid_t *out)
{
    struct procs p = {out, 1};
    struct xmp_error err = {0};

    out[0] = w->pid;
    if (w->cg != NULL && xmp_cgroup_each_pid(w->cg, add_proc, &p, &err) == 0)
        return p.n;
    return 1 + xmp_proc_descendants(w->pid, out + 1, XMP_STACKS_MAX_PROCS - 1);
}

void
xmp_grp_capture_stacks(struct xmp_supervisor *sv)
{
    pid_t *pids = calloc(sv->n_workers * XMP_STACKS_MAX_PROCS + 1, sizeof(pid_t));
    size_t *first = calloc(sv->n_workers + 1, sizeof(size_t));
    size_t *count = calloc(sv->n_workers + 1, sizeof(size_t));
    struct xmp_stacks st = {0};
    size_t n = 0;

    for (size_t i = 0; pids != NULL && first != NULL && count != NULL && i < sv->n_workers; i++) {
        struct xmp_worker *w = &sv->workers[i];
        if (w->running && w->pid > 0 && w->rep != NULL && w->rep->stacks == NULL) {
            first[i] = n;
            count[i] = worker_procs(w, pids + n);
            n += count[i];
        }
    }
    if (n > 0 && xmp_stacks_capture(pids, n, XMP_STACKS_BUDGET_MS, &st) == 0) {
        for (size_t i = 0; i < sv->n_workers; i++)
            if (count[i] > 0)
                sv->workers[i].rep->stacks = xmp_stacks_take_group(&st, first[i], count[i]);
        xmp_stacks_free(&st);
    }
    free(pids);
    free(first);
    free(count);
}

/* A worker's failure that says what happened in its own words (an exit status, an OOM kill of
 * its cgroup; the traceback or error file come with the status) leaves little for its peers'
 * stacks to add, and they would delay the stop: on_failure.stacks: auto leaves them out then. A
 * death by any other signal (SIGSEGV, a SIGKILL from outside) is worth them, and so is a lost
 * peer or a collective's timeout: the cause is elsewhere, maybe in a peer's stack. */
static bool
stacks_wanted(const struct xmp_supervisor *sv, enum xmp_stop_reason reason)
{
    if (sv->spec->stacks != XMP_STACKS_AUTO)
        return sv->spec->stacks == XMP_STACKS_ALWAYS;
    if (reason != XMP_STOP_FAILURE)
        return true;
    for (size_t i = 0; i < sv->n_workers; i++) {
        const struct xmp_worker *w = &sv->workers[i];
        struct xmp_cgroup_stats st;
        struct xmp_error err = {0};
        char addr[96];
        if (w->running || w->stop_sent || w->rep == NULL || !xmp_worker_failed(w->rep))
            continue;
        if (xmp_worker_peer_loss(w->rep, w->tail.lines, w->tail.count, addr, sizeof(addr)) != NULL)
            return true;
        if (w->rep->state != XMP_WORKER_SIGNALED)
            continue;
        /* Its OOM kill is only counted later (account_worker): its cgroup says it now. */
        if (w->rep->signal == SIGKILL && w->cg != NULL &&
            xmp_cgroup_read_stats(w->cg, &st, &err) == 0 && st.oom_kills > 0)
            continue;
        return true;
    }
    return false;
}

void
xmp_grp_stop_all(struct xmp_supervisor *sv, enum xmp_stop_reason reason, int sig)
{
    if (sv->stopping == XMP_STOP_NONE)
        sv->stopping = reason;
    /* Where they are, before the signal changes it; the grace starts after. */
    if (stacks_wanted(sv, reason))
        xmp_grp_capture_stacks(sv);
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
    xmp_grp_arm_timer(sv);
}

void
xmp_grp_on_worker_failure(struct xmp_supervisor *sv)
{
    if (sv->stopping != XMP_STOP_NONE || sv->spec->on_failure != XMP_FAILURE_KILL_ALL)
        return;
    xmp_grp_stop_all(sv, XMP_STOP_FAILURE, SIGTERM);
}

void
xmp_grp_close_stream(struct xmp_supervisor *sv, struct xmp_stream *s)
{
    xmp_grp_ep_del(sv, s->fd);
    xmp_stream_close(s);
}

/* Takes in the worker's exec status once the child has exec'd or said why it could not. At exit
 * it is read to the end first, so that a worker that could not start is reported as such. */
void
xmp_grp_read_exec_status(struct xmp_supervisor *sv, struct xmp_worker *w, bool block)
{
    int fd = w->spawned.status_fd;

    /* Out of the epoll set before the read can close it: closing does not remove it while a
     * worker forked later still holds a copy (until its exec), and its EOF would then wake the
     * loop again and again, spinning on a core those workers need to start. (An exec-mode
     * worker has no pipe: xmp_spawn knew at once.) */
    if (fd >= 0) {
        xmp_grp_ep_del(sv, fd);
        if (xmp_spawn_read_status(&w->spawned, block) != 0) {
            xmp_grp_ep_ctl(sv, EPOLL_CTL_ADD, fd, EPOLLIN, XMP_EV_EXEC, (size_t)(w - sv->workers));
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
const char *
xmp_grp_oom_at_name(const struct xmp_supervisor *sv, const struct xmp_worker *w,
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

bool
xmp_grp_is_stop_signal(int sig)
{
    return sig == SIGINT || sig == SIGTERM || sig == SIGHUP;
}

/* The worker ended of a stop signal (or exited 128+it, as a shell or a handler does) that
 * xmprun did not send. */
bool
xmp_grp_died_of_outside_stop(const struct xmp_worker *w)
{
    const struct xmp_worker_report *rep = w->rep;
    int sig = rep->signal > 0 ? rep->signal : rep->exit_code > 128 ? rep->exit_code - 128 : 0;

    return !w->stop_sent && rep->state != XMP_WORKER_FAILED_TO_START && xmp_grp_is_stop_signal(sig);
}

/* xmprun got SIGINT, SIGTERM or SIGHUP: forward it, and stop the job (a second one: at once). */
void
xmp_grp_on_interrupt(struct xmp_supervisor *sv, int sig)
{
    int64_t now;

    /* The first signal: where the workers are, before the forwarded signal changes it. */
    if (sv->report.interrupt_signal == 0 && sv->spec->stacks != XMP_STACKS_NEVER)
        xmp_grp_capture_stacks(sv);
    now = xmp_now_ns();
    /* Forward to every worker's process group, as a terminal would to a foreground job. */
    for (size_t i = 0; i < sv->n_workers; i++)
        if (sv->workers[i].running && sv->workers[i].pid > 0)
            kill(-sv->workers[i].pid, sig);
    if (sv->zy.running && sv->zy.pid > 0)
        kill(-sv->zy.pid, sig);
    if (sv->report.interrupt_signal != 0) {
        /* A second ^C means "now". */
        xmp_grp_kill_all_now(sv);
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
        else if (w->rep != NULL && w->rep->ended_mono_ns > 0 && xmp_grp_died_of_outside_stop(w) &&
                 now - w->rep->ended_mono_ns <= OUTSIDE_SIGNAL_WINDOW_MS * 1000000LL)
            w->rep->interrupted = true;
    }
    if (sv->stopping == XMP_STOP_NONE)
        sv->stopping = XMP_STOP_INTERRUPT;
    sv->peer_wait_ns = 0;
    if (sv->kill_at_ns == 0)
        sv->kill_at_ns = now + sv->spec->grace_ms * 1000000;
    xmp_grp_arm_timer(sv);
}

/* A worker died of a stop signal xmprun did not send: wait (bounded) for the outside signal
 * that may be on its way to xmprun too. True when it came (the death is then the interrupt's). */
bool
xmp_grp_await_outside_signal(struct xmp_supervisor *sv)
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
    xmp_grp_on_interrupt(sv, sig);
    return true;
}
