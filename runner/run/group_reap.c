/* One run of the worker group: a worker's end. Its output streams and log checks, the reap
 * (waitid on its pidfd), the stop of the others after a failure, and its accounting (state,
 * OOM attribution, stats, error file, peer loss) into its report. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "isolate/proc.h"
#include "runner/run/group_internal.h"
#include "runner/run/zygote.h"

#include "isolate/cleanup.h"
#include "isolate/file.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef P_PIDFD
#define P_PIDFD 3
#endif
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
void
xmp_grp_check_log(struct xmp_worker *w, struct xmp_stream *s)
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

void
xmp_grp_on_stream(struct xmp_supervisor *sv, struct xmp_worker *w, struct xmp_stream *s)
{
    uint64_t before = s->n_read;
    int eof = xmp_stream_read(s, READ_BUDGET);

    xmp_grp_watch_output(sv, w, before, s);
    xmp_grp_check_log(w, s);
    if (eof != 0)
        xmp_grp_close_stream(sv, s);
}

void
xmp_grp_on_zygote_stderr(struct xmp_supervisor *sv, size_t budget)
{
    struct xmp_zygote *zy = &sv->zy;

    if (zy->err.fd >= 0 && xmp_stream_read(&zy->err, budget) != 0)
        xmp_grp_close_stream(sv, &zy->err);
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
        xmp_grp_on_stream(sv, w, &w->err);
    /* The tail's ring as it lies: for a yes or no, the order of its lines does not matter. */
    return xmp_worker_peer_loss(w->rep, w->tail.lines, w->tail.count, addr, sizeof(addr)) != NULL;
}

/* waitid for the worker (through its pidfd where it has one, so that a recycled pid can never
 * be confused with it) with the kernel's fifth argument, which glibc's waitid leaves out: the
 * reaped worker's own resource usage and that of the children it reaped. */
int
xmp_grp_wait_worker(const struct xmp_worker *w, int options, siginfo_t *si, struct rusage *ru)
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

/* A SIGBUS is what a process gets when it writes to shared memory that /dev/shm has no room
 * for: NCCL's shared-memory transport and PyTorch's DataLoader die of it in a container whose
 * /dev/shm is Docker's 64 MiB. Said when /dev/shm is full now, or that small (what the worker
 * held there may have been freed with it). */
static void
explain_sigbus(struct xmp_worker_report *rep)
{
    struct statvfs fs;
    char size[32];

    rep->signal_cause[0] = '\0';
    if (statvfs("/dev/shm", &fs) < 0)
        return;
    int64_t total = (int64_t)fs.f_blocks * (int64_t)fs.f_frsize;
    int64_t avail = (int64_t)fs.f_bavail * (int64_t)fs.f_frsize;
    xmp_format_bytes(total, size, sizeof(size));
    if (avail < total / 20 || avail < (1 << 20))
        snprintf(rep->signal_cause, sizeof(rep->signal_cause),
                 ": /dev/shm (%s) is full, and writing to shared memory there kills with SIGBUS "
                 "(give the container a larger --shm-size)",
                 size);
    else if (total < (256LL << 20))
        snprintf(rep->signal_cause, sizeof(rep->signal_cause),
                 ": /dev/shm holds only %s, and a full /dev/shm kills with SIGBUS (NCCL, "
                 "PyTorch's DataLoader; give the container a larger --shm-size)",
                 size);
}

/* What the reap's status says the worker's end was; an OOM kill is told from a SIGKILL once
 * its cgroup's counters are read (account_worker). */
static enum xmp_worker_state
end_state(const struct xmp_supervisor *sv, const struct xmp_worker *w)
{
    if (w->start_failed)
        return XMP_WORKER_FAILED_TO_START;
    if (w->mem_over)
        return XMP_WORKER_MEMORY_LIMIT;
    if (w->stop_sent && w->hung)
        return XMP_WORKER_HUNG;
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
    /* Which limit fired: read from the worker's cgroup chain; without a cgroup of its own, a
     * SIGKILL that neither xmprun nor its watchdog sent may be the kernel's OOM killer at an
     * enclosing cgroup's limit (a container's --memory, a Slurm step's --mem), which the chain
     * of xmprun's own cgroup shows. */
    const struct xmp_cgroup *chain = w->cg;
    if (chain == NULL && rep->signal == SIGKILL && !w->stop_sent && !w->mem_over)
        chain = sv->own_cg;
    if (chain != NULL && (w->cg == NULL || rep->oom_kills > 0)) {
        struct xmp_cgroup_oom_site site;
        if (xmp_cgroup_oom_site(chain, &w->oom_snap, &site)) {
            if (w->cg == NULL)
                rep->oom_kills = 1; /* no counter of its own: the one kill that ended it */
            rep->oom_at = xmp_grp_oom_at_name(sv, w, &site);
            rep->oom_limit = site.limit;
            snprintf(rep->oom_path, sizeof(rep->oom_path), "%s", site.path);
        } else if (w->cg != NULL) {
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
    if (rep->state == XMP_WORKER_SIGNALED && rep->signal == SIGBUS)
        explain_sigbus(rep);
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
    if (sv->report.interrupt_signal == 0 && xmp_grp_died_of_outside_stop(w) &&
        xmp_grp_await_outside_signal(sv))
        return;
    if (sv->stopping == XMP_STOP_NONE && sv->spec->on_failure == XMP_FAILURE_KILL_ALL &&
        lost_its_peer(sv, w)) {
        if (sv->peer_wait_ns == 0) {
            sv->peer_wait_ns = xmp_now_ns() + PEER_LOSS_WINDOW_MS * 1000000LL;
            xmp_grp_arm_timer(sv);
        }
        return;
    }
    xmp_grp_on_worker_failure(sv);
}

void
xmp_grp_worker_gone(struct xmp_supervisor *sv, struct xmp_worker *w)
{
    xmp_grp_ep_del(sv, w->pidfd);
    if (w->pidfd >= 0)
        close(w->pidfd);
    w->pidfd = -1;
    w->running = false;
    sv->n_running--;
}

/* A worker was reaped (si, ru: its status and resource usage). The others are stopped first
 * when its end calls for it, as a launcher that only signals and reaps would: the stats, the
 * cgroup's release and the error file of this one (several calls each) come after. */
void
xmp_grp_finish_worker(struct xmp_supervisor *sv, struct xmp_worker *w, const siginfo_t *si,
                      const struct rusage *ru)
{
    struct xmp_worker_report *rep = w->rep;

    xmp_now_real(&rep->ended_at);
    rep->ended_mono_ns = xmp_now_ns();
    xmp_grp_read_exec_status(sv, w, true);
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
    /* Stacks taken as it was ending of itself show its exit, not where it was. */
    if (!w->stop_sent && rep->stacks != NULL) {
        xmp_stack_proc_free(rep->stacks);
        free(rep->stacks);
        rep->stacks = NULL;
    }
    xmp_grp_worker_gone(sv, w);
    if (xmp_worker_failed(rep))
        on_failed_worker(sv, w);
    account_worker(sv, w);
}

/* Whether sig is caught by the process: /proc/PID/status's SigCgt, which a zombie still has
 * until it is reaped. */
static bool
catches(pid_t pid, int sig)
{
    char path[64], buf[2048];
    const char *line;
    unsigned long long mask = 0;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if (xmp_proc_read(path, buf, sizeof(buf)) <= 0 || (line = strstr(buf, "\nSigCgt:")) == NULL ||
        sscanf(line + 8, "%llx", &mask) != 1)
        return true; /* unknown: the stop's */
    return (mask & 1ULL << (sig - 1)) != 0;
}

/* A worker that was sent a stop and exited with a status of its own was not ended by it when it
 * does not catch the signal (which would have killed it): it was already in its exit (every
 * rank of a job with a typo ends at once, and a process in its exit drops signals) or ignores
 * the signal. Peeked at (WNOWAIT) before the reap, only then. */
static bool
ended_of_itself(const struct xmp_supervisor *sv, const struct xmp_worker *w)
{
    siginfo_t si;
    struct rusage ru;

    if (xmp_grp_wait_worker(w, WNOHANG | WNOWAIT, &si, &ru) != 0 || si.si_pid == 0 ||
        si.si_code != CLD_EXITED)
        return false;
    /* A shell's report of its child's death by the stop. */
    if (si.si_status > 128 && xmp_grp_is_stop_signal(si.si_status - 128))
        return false;
    /* The stop's signal: SIGTERM, or the one forwarded from outside. */
    return !catches(w->pid,
                    sv->report.interrupt_signal > 0 ? sv->report.interrupt_signal : SIGTERM);
}

/* Reaps the worker if it has exited; its status is taken through the pidfd so that a recycled
 * pid can never be confused with it. */
void
xmp_grp_try_reap(struct xmp_supervisor *sv, struct xmp_worker *w)
{
    siginfo_t si;
    struct rusage ru;

    if (!w->running)
        return;
    if (w->stop_sent && !w->hung && ended_of_itself(sv, w))
        w->stop_sent = false;
    if (xmp_grp_wait_worker(w, WNOHANG, &si, &ru) == 0 && si.si_pid != 0)
        xmp_grp_finish_worker(sv, w, &si, &ru);
}

void
xmp_grp_try_reap_zygote(struct xmp_supervisor *sv)
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
    if (zy->error_file != NULL)
        read_error_file(&zy->rep, sv->run_fd, zy->error_file);
    /* Its last words are in the pipe by now; what a process it left behind writes later is not
     * waited for. */
    xmp_grp_on_zygote_stderr(sv, FINAL_DRAIN);
    xmp_grp_close_stream(sv, &zy->err);
    zy->rep.stderr_tail = xmp_tail_take(&zy->tail, &zy->rep.n_tail);
    xmp_tail_free(&zy->tail);
    /* Without its zygote the job cannot go on (nor restart): stop the workers. */
    if (sv->n_running > 0 && sv->stopping == XMP_STOP_NONE)
        xmp_grp_stop_all(sv, XMP_STOP_FAILURE, SIGTERM);
}

/* On SIGCHLD: reap every child that has exited. As a subreaper (and as PID 1) xmprun inherits
 * orphaned grandchildren; peeking with WNOWAIT first keeps a worker's status from being
 * swallowed by the catch-all reap. Only the children that have exited are looked at: not every
 * worker at every SIGCHLD, which made a stop of 32 workers 200 waitid calls (their pidfds say
 * when each one ends). */
void
xmp_grp_reap_children(struct xmp_supervisor *sv)
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
                xmp_grp_try_reap(sv, w);
                worker = true;
                /* Never spin on a status that the pidfd did not collect. */
                if (w->running)
                    return;
            }
        }
        if (sv->zy.running && si.si_pid == sv->zy.pid) {
            xmp_grp_try_reap_zygote(sv);
            if (sv->zy.running)
                return;
            continue;
        }
        if (!worker && waitpid(si.si_pid, NULL, WNOHANG) <= 0)
            return;
    }
}
