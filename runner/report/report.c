/* The exit report: root-cause choice, outcome and exit-status rules (only here) and the summary
 * table; the JSON of SPEC.md section 5 and its write are report_json.c's. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/report/report.h"

#include "isolate/cgroup.h"
#include "isolate/cleanup.h"
#include "isolate/file.h"
#include "runner/report/gpu.h"
#include "runner/report/peer.h"
#include "runner/report/report_internal.h"
#include "runner/report/stacks.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef XMP_VERSION
#define XMP_VERSION "0.0.0"
#endif

const char *
xmp_outcome_name(enum xmp_outcome outcome)
{
    switch (outcome) {
    case XMP_OUTCOME_SUCCEEDED:
        return "succeeded";
    case XMP_OUTCOME_FAILED:
        return "failed";
    case XMP_OUTCOME_TIMEOUT:
        return "timeout";
    case XMP_OUTCOME_INTERRUPTED:
        return "interrupted";
    case XMP_OUTCOME_SETUP_FAILED:
        return "setup_failed";
    }
    return "failed";
}

const char *
xmp_worker_state_name(enum xmp_worker_state state)
{
    switch (state) {
    case XMP_WORKER_RUNNING:
        return "running";
    case XMP_WORKER_EXITED:
        return "exited";
    case XMP_WORKER_SIGNALED:
        return "signaled";
    case XMP_WORKER_OOM_KILLED:
        return "oom_killed";
    case XMP_WORKER_STOPPED_BY_XMPRUN:
        return "stopped_by_xmprun";
    case XMP_WORKER_TIMEOUT:
        return "timeout";
    case XMP_WORKER_FAILED_TO_START:
        return "failed_to_start";
    case XMP_WORKER_HUNG:
        return "hung";
    case XMP_WORKER_UNKILLABLE:
        return "unkillable";
    case XMP_WORKER_MEMORY_LIMIT:
        return "memory_limit";
    }
    return "exited";
}

bool
xmp_worker_failed(const struct xmp_worker_report *w)
{
    switch (w->state) {
    case XMP_WORKER_EXITED:
        return w->exit_code != 0;
    case XMP_WORKER_SIGNALED:
    case XMP_WORKER_OOM_KILLED:
    case XMP_WORKER_MEMORY_LIMIT:
    case XMP_WORKER_FAILED_TO_START:
    case XMP_WORKER_HUNG:
        return true;
    case XMP_WORKER_UNKILLABLE:
    case XMP_WORKER_RUNNING:
    case XMP_WORKER_STOPPED_BY_XMPRUN:
    case XMP_WORKER_TIMEOUT:
        return false;
    }
    return false;
}

void
xmp_signal_name(int sig, char *buf, size_t size)
{
    const char *abbrev = sig > 0 ? sigabbrev_np(sig) : NULL;

    if (abbrev != NULL)
        snprintf(buf, size, "SIG%s", abbrev);
    else
        snprintf(buf, size, "SIG%d", sig);
}

void
xmp_format_bytes(int64_t bytes, char *buf, size_t size)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    size_t u = 0;

    if (bytes < 1024) {
        snprintf(buf, size, "%lld B", (long long)bytes);
        return;
    }
    v /= 1024.0;
    while (v >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, size, "%.1f %s", v, units[u]);
}

void
xmp_format_duration(int64_t ms, char *buf, size_t size)
{
    int64_t h = ms / 3600000, m = ms / 60000 % 60, s = ms / 1000 % 60, rest = ms % 1000;
    size_t n = 0;

    buf[0] = '\0';
    if (h > 0)
        n += (size_t)snprintf(buf + n, size - n, "%lldh", (long long)h);
    if (m > 0 && n < size)
        n += (size_t)snprintf(buf + n, size - n, "%lldm", (long long)m);
    if (s > 0 && n < size)
        n += (size_t)snprintf(buf + n, size - n, "%llds", (long long)s);
    if ((rest > 0 || ms == 0) && n < size)
        snprintf(buf + n, size - n, "%lldms", (long long)rest);
}

/* "cuda:3" or "cuda:0,cuda:1"; "" when the worker has no device. */
static void
join_devices(const struct xmp_worker_report *w, char *buf, size_t size)
{
    size_t n = 0;

    buf[0] = '\0';
    for (size_t i = 0; w->devices != NULL && w->devices[i] != NULL && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%s", i > 0 ? "," : "", w->devices[i]);
}

/* " at its 8.0 GiB memory limit": the limit that fired for an OOM kill (memory.oom_at), and in
 * *after what follows the peak ("; its own limit is 1.0 GiB", for an enclosing limit). When the
 * counters were read and none fired, it says that no visible limit was reached; without them
 * (no cgroups read), the worker's own limit, else the job's, as the likely one. */
static void
describe_oom_limit(const struct xmp_worker_report *w, char *at, size_t size, char *after,
                   size_t after_size)
{
    char limit[32], own[32];
    int64_t bytes = w->oom_limit;
    const char *who = w->oom_at;

    at[0] = after[0] = '\0';
    if (who == NULL && w->oom_unseen) {
        snprintf(at, size,
                 " although no memory limit that xmprun can see was reached (the "
                 "machine, or a cgroup above this cgroup namespace, ran out of memory)");
        return;
    }
    if (who == NULL) {
        bytes = w->memory_limit >= 0 ? w->memory_limit : w->job_memory_limit;
        who = w->memory_limit >= 0 ? "worker" : w->job_memory_limit >= 0 ? "job" : NULL;
    }
    if (who == NULL)
        return;
    if (bytes < 0)
        bytes = strcmp(who, "worker") == 0 ? w->memory_limit
                : strcmp(who, "job") == 0  ? w->job_memory_limit
                                           : -1;
    xmp_format_bytes(bytes, limit, sizeof(limit));
    if (strcmp(who, "enclosing") == 0) {
        snprintf(at, size, " at the enclosing cgroup's %s limit (%s %s)", bytes >= 0 ? limit : "",
                 xmp_cgroup_owner_kind(w->oom_path), w->oom_path);
        if (w->memory_limit >= 0) {
            xmp_format_bytes(w->memory_limit, own, sizeof(own));
            snprintf(after, after_size, "; its own limit is %s", own);
        } else if (w->job_memory_limit >= 0) {
            xmp_format_bytes(w->job_memory_limit, own, sizeof(own));
            snprintf(after, after_size, "; the job's limit is %s", own);
        }
    } else if (strcmp(who, "worker") == 0) {
        snprintf(at, size, " at its %s memory limit%s", limit,
                 w->rank < 0 ? " (resources.shared.memory)" : "");
    } else if (strcmp(who, "job") == 0) {
        snprintf(at, size, " at the job's %s memory limit", limit);
    } else {
        snprintf(at, size, " at the %s (zygote) cgroup's %s memory limit", who, limit);
    }
}

void
xmp_worker_who(const struct xmp_worker_report *w, char *buf, size_t size)
{
    char devs[128];

    join_devices(w, devs, sizeof(devs));
    if (devs[0] != '\0')
        snprintf(buf, size, "worker %d (%s)", w->rank, devs);
    else
        snprintf(buf, size, "worker %d", w->rank);
}

const struct xmp_peer_pattern *
xmp_worker_peer_loss(const struct xmp_worker_report *w, char *const *lines, size_t n, char *addr,
                     size_t size)
{
    if (w->state != XMP_WORKER_EXITED && w->state != XMP_WORKER_SIGNALED)
        return NULL;
    return xmp_peer_find(lines, n, addr, size);
}

/* A worker that exited or died of a signal (SIGABRT) after a GPU failure its stderr names: the
 * root cause's reason and message say which, with the numbers the library printed. */
static bool
gpu_failure(const struct xmp_worker_report *w, struct xmp_report *r)
{
    struct xmp_gpu_failure f;
    char who[160], tried[32], in_use[32], capacity[32], what[400];

    if ((w->state != XMP_WORKER_EXITED && w->state != XMP_WORKER_SIGNALED) ||
        !xmp_gpu_failure_find(w->stderr_tail, w->n_tail, &f))
        return false;
    xmp_worker_who(w, who, sizeof(who));
    if (f.kind == XMP_GPU_OOM) {
        xmp_format_bytes(f.tried, tried, sizeof(tried));
        xmp_format_bytes(f.in_use, in_use, sizeof(in_use));
        xmp_format_bytes(f.capacity, capacity, sizeof(capacity));
        snprintf(what, sizeof(what), "ran out of GPU memory%s%s%s%s%s%s%s",
                 f.tried >= 0 ? ": it tried to allocate " : "", f.tried >= 0 ? tried : "",
                 f.in_use >= 0 ? " with " : "", f.in_use >= 0 ? in_use : "",
                 f.in_use >= 0 && f.capacity >= 0 ? " of " : "",
                 f.in_use >= 0 && f.capacity >= 0 ? capacity : "", f.in_use >= 0 ? " in use" : "");
    } else {
        snprintf(what, sizeof(what), "hit %s error: %s%s%s%s",
                 f.kind == XMP_GPU_CUDA_ERROR ? "a CUDA" : "an NCCL", f.error,
                 f.detail[0] ? " (" : "", f.detail, f.detail[0] ? ")" : "");
    }
    snprintf(r->cause_reason, sizeof(r->cause_reason), "%s", xmp_gpu_failure_reason(f.kind));
    if (snprintf(r->cause_message, sizeof(r->cause_message), "%s %s", who, what) < 0)
        r->cause_message[0] = '\0';
    return true;
}

/* A worker whose GPU the driver reported a fault for (an Xid) while it ran: not the user's bug,
 * and the GPU's PCI address is what the admin who drains the node needs. The fault comes first,
 * then what the worker did. */
static void
gpu_fault_first(const struct xmp_worker_report *w, struct xmp_report *r)
{
    const struct xmp_gpu_fault *f = w->n_faults > 0 ? &w->faults[0] : NULL;
    char then[sizeof(r->cause_message)], at[16], name[80] = "";
    struct tm tm;

    if (f == NULL)
        return;
    if (xmp_gpu_xid_name(f->xid) != NULL)
        snprintf(name, sizeof(name), " (%s)", xmp_gpu_xid_name(f->xid));
    localtime_r(&f->at.tv_sec, &tm);
    strftime(at, sizeof(at), "%H:%M:%S", &tm);
    memcpy(then, r->cause_message, sizeof(then));
    snprintf(r->cause_reason, sizeof(r->cause_reason), "gpu_fault");
    if (snprintf(r->cause_message, sizeof(r->cause_message),
                 "GPU %s (%s) reported Xid %d%s at %s; then %s", f->device, f->pci, f->xid, name,
                 at, then) < 0)
        r->cause_message[0] = '\0';
}

/* How w ended, in words, for who ("worker 3 (cuda:3)", "the zygote"). */
/* "worker 1 (cpu) was stopped by xmprun at its 128.0 MiB memory limit (it used 290.0 MiB; ...)";
 * at the job's, "(the job used X, this worker Y; ...)". */
static void
describe_over_memory(const struct xmp_worker_report *w, const char *who, char *buf, size_t size)
{
    char limit[32], used[32], job[32];
    bool of_job = w->memory_over != NULL && strcmp(w->memory_over, "job") == 0;

    xmp_format_bytes(of_job ? w->job_memory_limit : w->memory_limit, limit, sizeof(limit));
    xmp_format_bytes(w->memory_used, used, sizeof(used));
    xmp_format_bytes(w->memory_job_used, job, sizeof(job));
    snprintf(buf, size,
             "%s was stopped by xmprun at %s %s memory limit (%s%s%s %s; measured every %" PRId64
             " ms: no writable cgroup here)",
             who, of_job ? "the job's" : "its", limit, of_job ? "the job used " : "",
             of_job ? job : "", of_job ? ", this worker" : "it used", used, w->memory_period_ms);
}

static void
describe(const struct xmp_worker_report *w, const char *who, char *buf, size_t size)
{
    char sig[32], peak[32], at_limit[640], after[64], oom_note[768], notes[1024];
    const char *descr;

    describe_oom_limit(w, at_limit, sizeof(at_limit), after, sizeof(after));
    /* A worker that fails after the OOM killer took one of its children (a data-loader
     * process, say) did not die of the OOM kill itself, but that is what the user must know. */
    oom_note[0] = '\0';
    if (w->oom_kills > 0 && w->state != XMP_WORKER_OOM_KILLED)
        snprintf(oom_note, sizeof(oom_note),
                 " after the kernel OOM killer killed a process in it%s%s", at_limit, after);
    /* A refused fork shows only as "Cannot fork" in its stderr, if the program says anything;
     * pids.events says it for sure. The count is of forks in the worker's own cgroup, whichever
     * limit refused them: the worker's if it has one, else the job's. */
    snprintf(notes, sizeof(notes), "%s%s", oom_note, w->signal_cause);
    if (w->pids_hits > 0 && (w->pids_limit > 0 || w->job_pids_limit > 0)) {
        size_t len = strlen(notes);
        if (w->pids_limit > 0)
            snprintf(notes + len, sizeof(notes) - len,
                     "%s could not fork: it hit its %" PRId64 " pids limit",
                     len > 0 ? "; it" : " after it", w->pids_limit);
        else
            snprintf(notes + len, sizeof(notes) - len,
                     "%s could not fork: it hit the job's %" PRId64 " pids limit",
                     len > 0 ? "; it" : " after it", w->job_pids_limit);
    }

    switch (w->state) {
    case XMP_WORKER_OOM_KILLED:
        xmp_format_bytes(w->memory_peak, peak, sizeof(peak));
        /* For an enclosing limit the worker's own peak says little: it shares that limit with
         * whatever else runs there. */
        if (w->memory_peak >= 0 && after[0] == '\0' && !w->oom_unseen &&
            (w->oom_at == NULL || strcmp(w->oom_at, "enclosing") != 0))
            snprintf(buf, size, "%s was killed by the kernel OOM killer%s (peak %s)", who, at_limit,
                     peak);
        else
            snprintf(buf, size, "%s was killed by the kernel OOM killer%s%s", who, at_limit, after);
        return;
    case XMP_WORKER_MEMORY_LIMIT:
        describe_over_memory(w, who, buf, size);
        return;
    case XMP_WORKER_SIGNALED:
    case XMP_WORKER_STOPPED_BY_XMPRUN:
    case XMP_WORKER_TIMEOUT:
    case XMP_WORKER_HUNG:
        if (w->signal == SIGSYS && w->seccomp_profile != NULL) {
            snprintf(buf, size, "%s was killed by its seccomp profile (%s)%s%s%s", who,
                     w->seccomp_profile, w->seccomp_syscall[0] ? " for calling `" : "",
                     w->seccomp_syscall, w->seccomp_syscall[0] ? "`" : "");
            return;
        }
        if (w->signal > 0) {
            char lower[96];
            xmp_signal_name(w->signal, sig, sizeof(sig));
            descr = sigdescr_np(w->signal);
            snprintf(lower, sizeof(lower), "%s", descr != NULL ? descr : "unknown signal");
            lower[0] = (char)(lower[0] >= 'A' && lower[0] <= 'Z' ? lower[0] - 'A' + 'a' : lower[0]);
            snprintf(buf, size, "%s was killed by signal %s (%s)%s", who, sig, lower, notes);
            return;
        }
        snprintf(buf, size, "%s exited with status %d%s", who, w->exit_code, notes);
        return;
    case XMP_WORKER_FAILED_TO_START:
        snprintf(buf, size, "%s could not start: %s", who,
                 w->start_error[0] != '\0' ? w->start_error : "unknown error");
        return;
    case XMP_WORKER_EXITED:
        snprintf(buf, size, "%s exited with status %d%s", who, w->exit_code, notes);
        return;
    case XMP_WORKER_RUNNING:
        snprintf(buf, size, "%s is still running", who);
        return;
    case XMP_WORKER_UNKILLABLE:
        snprintf(buf, size, "%s did not die within %ds of SIGKILL (state %s%s%s)", who,
                 XMP_UNKILLABLE_MS / 1000, w->unkillable.state[0] ? w->unkillable.state : "?",
                 w->unkillable.wchan[0] ? ", in " : "", w->unkillable.wchan);
        return;
    }
}

void
xmp_report_describe_hang(const struct xmp_worker_report *w, int64_t idle_ms, const char *where,
                         char *buf, size_t size)
{
    char who[160], dur[64];

    xmp_worker_who(w, who, sizeof(who));
    xmp_format_duration(idle_ms, dur, sizeof(dur));
    snprintf(buf, size, "%s hung: no output and no CPU time for %s%s%s", who, dur,
             where != NULL && where[0] != '\0' ? ", in " : "", where != NULL ? where : "");
}

/* Where a hung worker was, as its root cause quotes it ("`all_reduce` (FILE:LINE)"): its main
 * thread's innermost frame, from the stacks taken before it was stopped; "" without them. */
static void
hang_where(const struct xmp_worker_report *w, char *buf, size_t size)
{
    char frame[200];
    const char *open;

    buf[0] = '\0';
    if (w->stacks == NULL || w->stacks->n_threads == 0 ||
        xmp_stacks_thread_innermost(&w->stacks->threads[0], frame, sizeof(frame))[0] == '\0')
        return;
    open = strstr(frame, " (");
    if (open == NULL)
        snprintf(buf, size, "`%s`", frame);
    else
        snprintf(buf, size, "`%.*s`%s", (int)(open - frame), frame, open);
}

void
xmp_worker_describe(const struct xmp_worker_report *w, char *buf, size_t size)
{
    char who[160];
    const char *words;

    xmp_worker_who(w, who, sizeof(who));
    describe(w, who, buf, size);
    /* Its own words on why, where it gave them: "...: KeyError: 'learning_rate'". */
    if (w->state == XMP_WORKER_EXITED && w->exit_code != 0 && (words = xmp_words_own(w)) != NULL) {
        size_t len = strlen(buf);
        snprintf(buf + len, size - len, ": %.300s", words);
    }
}

/* "the zygote exited with status 1 before it forked the workers: ...". */
static void
describe_zygote(const struct xmp_report *r, char *buf, size_t size)
{
    const struct xmp_worker_report *z = r->zygote;
    size_t len;
    bool exception = false;
    const char *words = xmp_words_tail(z, &exception);

    describe(z, "the zygote", buf, size);
    len = strlen(buf);
    if (z->state == XMP_WORKER_FAILED_TO_START)
        return;
    if (r->zygote_before_fork && z->start_error[0] != '\0')
        snprintf(buf + len, size - len, " before it forked the workers: %s", z->start_error);
    else if (r->zygote_before_fork && z->state == XMP_WORKER_EXITED && z->exit_code == 0)
        snprintf(buf + len, size - len,
                 " before it forked the workers: in start: fork the command must call "
                 "xmprun.spawn()");
    else if (r->zygote_before_fork && z->state == XMP_WORKER_EXITED &&
             xmp_words_error_file(z) != NULL)
        /* It failed on its own, and the client wrote the exception down: its own words. */
        snprintf(buf + len, size - len, " before it forked the workers: %s",
                 xmp_words_error_file(z));
    else if (r->zygote_before_fork && z->state == XMP_WORKER_EXITED && exception)
        /* No error file (it failed before the client was imported): its traceback's last line. */
        snprintf(buf + len, size - len, " before it forked the workers: %s", words);
    else if (r->zygote_before_fork && z->state == XMP_WORKER_EXITED && words != NULL)
        snprintf(buf + len, size - len,
                 " before it forked the workers; its standard error ends with \"%s\"", words);
    else if (r->zygote_before_fork && z->state == XMP_WORKER_EXITED)
        /* It failed on its own (an exception while loading, an import): its words are on its
         * standard error, not advice about spawn(). */
        snprintf(buf + len, size - len,
                 " before it forked the workers; its standard error says why");
    else if (r->zygote_before_fork)
        snprintf(buf + len, size - len, " before it forked the workers");
    else if (r->zygote_after_done)
        snprintf(buf + len, size - len, " after its workers finished");
    else
        snprintf(buf + len, size - len, " while its workers ran");
}

int
xmp_worker_exit_status(const struct xmp_worker_report *w)
{
    switch (w->state) {
    case XMP_WORKER_OOM_KILLED:
    case XMP_WORKER_MEMORY_LIMIT:
        return 128 + SIGKILL;
    case XMP_WORKER_HUNG:
        /* A hang is a timeout of its own (on_failure.hang_timeout), whatever signal ended it. */
        return 124;
    case XMP_WORKER_FAILED_TO_START:
        /* The child exits 127 (not found), 126 (not executable) or 125 (setup); without a
         * child at all (fork failed) xmprun could not set the worker up. */
        return w->exit_code > 0 ? w->exit_code : 125;
    case XMP_WORKER_EXITED:
    case XMP_WORKER_SIGNALED:
    case XMP_WORKER_STOPPED_BY_XMPRUN:
    case XMP_WORKER_TIMEOUT:
    case XMP_WORKER_UNKILLABLE:
    case XMP_WORKER_RUNNING:
        break;
    }
    if (w->signal > 0)
        return 128 + w->signal;
    return w->exit_code > 0 ? w->exit_code : 0;
}

void
xmp_report_finish(struct xmp_report *r)
{
    const struct xmp_worker_report *first = NULL;
    int64_t best = INT64_MAX;
    enum xmp_cause_kind kind = XMP_CAUSE_NONE;
    char sig[32], dur[64];

    r->cause_rank = -1;
    r->cause_reason[0] = '\0';
    r->cause_message[0] = '\0';

    if (r->setup_error[0] != '\0') {
        r->cause = XMP_CAUSE_SETUP;
        r->outcome = XMP_OUTCOME_SETUP_FAILED;
        r->exit_code = 125;
        snprintf(r->cause_reason, sizeof(r->cause_reason), "setup_failed");
        snprintf(r->cause_message, sizeof(r->cause_message), "%s", r->setup_error);
        return;
    }

    /* The earliest failure wins: a worker's own failure, the deadline or a signal to xmprun.
     * Workers xmprun stopped because of one of those are consequences, not causes; so is a
     * worker that lost its peer when another worker of this node failed on its own (the loser
     * may notice before xmprun reaps the one that died). */
    for (int pass = 0; pass < 2 && first == NULL; pass++) {
        for (size_t i = 0; i < r->n_workers; i++) {
            const struct xmp_worker_report *w = &r->workers[i];
            char addr[96];
            if (!xmp_worker_failed(w) || w->interrupted || w->ended_mono_ns >= best ||
                (pass == 0 &&
                 xmp_worker_peer_loss(w, w->stderr_tail, w->n_tail, addr, sizeof(addr)) != NULL))
                continue;
            best = w->ended_mono_ns;
            first = w;
            kind = XMP_CAUSE_WORKER;
        }
    }
    if (r->zygote != NULL && r->zygote_failed && r->zygote->ended_mono_ns < best) {
        best = r->zygote->ended_mono_ns;
        kind = XMP_CAUSE_ZYGOTE;
    }
    if (r->timed_out && r->timeout_mono_ns < best) {
        best = r->timeout_mono_ns;
        kind = XMP_CAUSE_TIMEOUT;
    }
    /* The watchdog's verdict counts from when it was made, not from the hung worker's end,
     * which the stop it called for brought later. */
    if (r->hung != NULL && r->hung_mono_ns < best) {
        best = r->hung_mono_ns;
        kind = XMP_CAUSE_HUNG;
    }
    if (r->interrupt_signal > 0 && r->interrupt_mono_ns < best) {
        best = r->interrupt_mono_ns;
        kind = XMP_CAUSE_INTERRUPTED;
    }

    r->cause = kind;
    switch (kind) {
    case XMP_CAUSE_NONE:
    case XMP_CAUSE_SETUP:
        r->outcome = XMP_OUTCOME_SUCCEEDED;
        r->exit_code = 0;
        return;
    case XMP_CAUSE_WORKER:
        r->outcome = XMP_OUTCOME_FAILED;
        r->exit_code = xmp_worker_exit_status(first);
        r->cause_rank = first->rank;
        snprintf(r->cause_reason, sizeof(r->cause_reason), "%s",
                 xmp_worker_state_name(first->state));
        {
            char addr[96], who[160], what[320];
            const struct xmp_peer_pattern *p =
                xmp_worker_peer_loss(first, first->stderr_tail, first->n_tail, addr, sizeof(addr));
            if (p == NULL) {
                if (!gpu_failure(first, r))
                    xmp_worker_describe(first, r->cause_message, sizeof(r->cause_message));
                gpu_fault_first(first, r);
                return;
            }
            if (xmp_collective_cause(r, first))
                return;
            xmp_worker_who(first, who, sizeof(who));
            xmp_peer_describe(p, addr, r->nnodes > 1, what, sizeof(what));
            snprintf(r->cause_message, sizeof(r->cause_message), "%s %s", who, what);
        }
        return;
    case XMP_CAUSE_ZYGOTE:
        r->outcome = XMP_OUTCOME_FAILED;
        r->exit_code = xmp_worker_exit_status(r->zygote);
        /* Exiting 0 without forking is still a failure: the job did not run. */
        if (r->exit_code == 0)
            r->exit_code = 1;
        snprintf(r->cause_reason, sizeof(r->cause_reason), "zygote_%s",
                 xmp_worker_state_name(r->zygote->state));
        describe_zygote(r, r->cause_message, sizeof(r->cause_message));
        return;
    case XMP_CAUSE_TIMEOUT:
        r->outcome = XMP_OUTCOME_TIMEOUT;
        r->exit_code = 124;
        xmp_format_duration(r->timeout_ms, dur, sizeof(dur));
        snprintf(r->cause_reason, sizeof(r->cause_reason), "timeout");
        snprintf(r->cause_message, sizeof(r->cause_message), "the job hit its %s timeout", dur);
        return;
    case XMP_CAUSE_HUNG: {
        char where[256]; /* a frame of 200, two backticks */
        r->outcome = XMP_OUTCOME_TIMEOUT;
        r->exit_code = 124;
        r->cause_rank = r->hung->rank;
        snprintf(r->cause_reason, sizeof(r->cause_reason), "hung");
        hang_where(r->hung, where, sizeof(where));
        xmp_report_describe_hang(r->hung, r->hang_timeout_ms, where, r->cause_message,
                                 sizeof(r->cause_message));
        return;
    }
    case XMP_CAUSE_INTERRUPTED:
        r->outcome = XMP_OUTCOME_INTERRUPTED;
        r->exit_code = 128 + r->interrupt_signal;
        xmp_signal_name(r->interrupt_signal, sig, sizeof(sig));
        snprintf(r->cause_reason, sizeof(r->cause_reason), "interrupted");
        snprintf(r->cause_message, sizeof(r->cause_message),
                 "xmprun received %s and stopped the job", sig);
        return;
    }
}
/* Where each worker xmprun stopped was, in a line (the whole stacks are in the report and in the
 * text file it names). */
static void
print_stopped_stacks(const struct xmp_report *r, FILE *out)
{
    const char *file = NULL;

    for (size_t i = 0; i < r->n_workers; i++) {
        const struct xmp_worker_report *w = &r->workers[i];
        char where[600];
        if (w->stacks == NULL)
            continue;
        fprintf(out, "xmprun: worker %d was stopped in %s\n", w->rank,
                xmp_stacks_innermost(w->stacks, where, sizeof(where)));
        if (w->stacks_file[0] != '\0' && file == NULL)
            file = w->stacks_file;
    }
    if (file != NULL) {
        const char *slash = strrchr(file, '/');
        fprintf(out, "xmprun: every thread's stack: %.*s/\n",
                slash != NULL ? (int)(slash - file) : 1, slash != NULL ? file : ".");
    }
}

void
xmp_report_print_summary(const struct xmp_report *r, FILE *out)
{
    char dur[64];
    double total = (double)(r->ended_mono_ns - r->started_mono_ns) / 1e9;

    snprintf(dur, sizeof(dur), "%.1fs", total > 0 ? total : 0.0);
    fprintf(out, "xmprun: job %s (%s) %s after %s", r->job_name != NULL ? r->job_name : "?",
            r->job_id != NULL ? r->job_id : "?", xmp_outcome_name(r->outcome), dur);
    if (r->restarts > 0)
        fprintf(out, " and %d restart%s", r->restarts, r->restarts == 1 ? "" : "s");
    fprintf(out, ", exit status %d\n", r->exit_code);
    if (r->n_workers > 0)
        fprintf(out, "  %4s  %-14s %-18s %5s %11s %9s\n", "rank", "device", "state", "exit",
                "peak mem", "time");
    /* start: fork: the zygote first, its peak being the shared cost. */
    for (size_t i = r->zygote != NULL ? 0 : 1; i <= r->n_workers; i++) {
        const struct xmp_worker_report *w = i == 0 ? r->zygote : &r->workers[i - 1];
        char devs[128], exit_s[16], peak[32], t[32];
        int64_t secs = w->ended_at.tv_sec - w->started_at.tv_sec;
        int64_t nsecs = w->ended_at.tv_nsec - w->started_at.tv_nsec;
        double wt = w->started_at.tv_sec != 0 ? (double)secs + (double)nsecs / 1e9 : 0.0;

        join_devices(w, devs, sizeof(devs));
        if (w->signal > 0)
            xmp_signal_name(w->signal, exit_s, sizeof(exit_s));
        else if (w->exit_code >= 0)
            snprintf(exit_s, sizeof(exit_s), "%d", w->exit_code);
        else
            snprintf(exit_s, sizeof(exit_s), "-");
        /* "~": the largest of the watchdog's samples, not a cgroup's exact high watermark. */
        if (w->memory_peak >= 0 && w->memory_sampled) {
            peak[0] = '~';
            xmp_format_bytes(w->memory_peak, peak + 1, sizeof(peak) - 1);
        } else if (w->memory_peak >= 0)
            xmp_format_bytes(w->memory_peak, peak, sizeof(peak));
        else
            snprintf(peak, sizeof(peak), "-");
        snprintf(t, sizeof(t), "%.1fs", wt > 0 ? wt : 0.0);
        if (i == 0)
            fprintf(out, "  %-20s %-18s %5s %11s %9s\n", "zygote (shared)",
                    xmp_worker_state_name(w->state), exit_s, peak, t);
        else
            fprintf(out, "  %4d  %-14s %-18s %5s %11s %9s\n", w->rank, devs[0] ? devs : "-",
                    xmp_worker_state_name(w->state), exit_s, peak, t);
    }
    if (r->cause != XMP_CAUSE_NONE)
        fprintf(out, "xmprun: root cause: %s\n", r->cause_message);
    print_stopped_stacks(r, out);
    if (r->cgroup_note[0] != '\0')
        fprintf(out, "xmprun: note: %s\n", r->cgroup_note);
}

void
xmp_report_write_stacks(struct xmp_report *r, const char *report_path)
{
    char dir[1024], path[1100];
    size_t len = strlen(report_path);
    bool made = false, any = false;

    if (len > 5 && strcmp(report_path + len - 5, ".json") == 0)
        len -= 5;
    snprintf(dir, sizeof(dir), "%.*s.stacks", (int)len, report_path);
    /* Nothing to write and nothing of an earlier run to remove (most runs): no file looked at. */
    for (size_t i = 0; i < r->n_workers && !any; i++)
        any = r->workers[i].stacks != NULL;
    if (!any && access(dir, F_OK) != 0)
        return;
    for (size_t i = 0; i < r->n_workers; i++) {
        struct xmp_worker_report *w = &r->workers[i];
        struct stat st;
        FILE *f;
        int fd;
        snprintf(path, sizeof(path), "%s/worker-%d.txt", dir, w->rank);
        if (w->stacks == NULL) {
            unlink(path);
            continue;
        }
        if (!made && mkdir(dir, 0755) < 0 && errno != EEXIST)
            return;
        made = true;
        /* A file of an earlier run is written over and cut to its new length, not truncated
         * first: ext4 writes a file truncated to nothing and written again to disk at its close
         * (auto_da_alloc), milliseconds each. One with other links (a copy kept with ln) is
         * replaced instead, so that the copy keeps what it had. */
        fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd >= 0 && (fstat(fd, &st) < 0 || st.st_nlink > 1)) {
            close(fd);
            unlink(path);
            fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
        }
        f = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (f == NULL) {
            if (fd >= 0)
                close(fd);
            continue;
        }
        fprintf(f, "worker %d (%s) of job %s, stopped by xmprun (%s)\n", w->rank,
                w->devices != NULL && w->devices[0] != NULL ? w->devices[0] : "-",
                r->job_name != NULL ? r->job_name : "?", xmp_worker_state_name(w->state));
        xmp_stacks_print(w->stacks, f);
        bool whole = fflush(f) == 0 && ftruncate(fd, ftello(f)) == 0;
        if (fclose(f) == 0 && whole)
            snprintf(w->stacks_file, sizeof(w->stacks_file), "%s", path);
    }
}

void
xmp_worker_report_clear(struct xmp_worker_report *w)
{
    for (size_t j = 0; j < w->n_tail; j++)
        free(w->stderr_tail[j]);
    free(w->stderr_tail);
    json_decref(w->error_file);
    xmp_stack_proc_free(w->stacks);
    free(w->stacks);
    w->stderr_tail = NULL;
    w->n_tail = 0;
    w->error_file = NULL;
    w->stacks = NULL;
}

void
xmp_report_release(struct xmp_report *r)
{
    for (size_t i = 0; i < r->n_workers; i++)
        xmp_worker_report_clear(&r->workers[i]);
    free(r->workers);
    free(r->attempts);
    json_decref(r->enforcement);
    r->enforcement = NULL;
    r->workers = NULL;
    r->n_workers = 0;
    r->attempts = NULL;
    r->n_attempts = 0;
}
