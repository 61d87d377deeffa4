/* One run of the worker group: the watchdogs. The hang watchdog (on_failure.hang_timeout) reads
 * each worker's CPU time once a second and takes its last output from the pipes; a hung worker
 * stops the job through the same path as a failure. The unkillable check gives up on a worker
 * that SIGKILL has not ended within XMP_UNKILLABLE_MS and leaves it, and its cgroup, to gc. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/run/group_internal.h"

#include "runner/report/stacks.h"

#include "isolate/proc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define WATCH_PERIOD_NS 1000000000LL

/* CPU time below 1% of one CPU between two checks is no progress: an idle PyTorch worker's
 * background threads (gloo's and NCCL's watchdogs and pollers) use about 0.2% while its main
 * thread waits in a collective or sleeps. Nor is one clock tick, /proc's resolution (10 ms, 1%
 * of the 1 s period): a worker using 0.2% crosses one now and then. */
#define IDLE_CPU_DIVISOR 100

/* How many processes below a worker without a cgroup the /proc walk follows. */
#define PROC_TREE_MAX 256

/* The CPU ticks of pid and of every live process below it. */
static long long
proc_tree_ticks(pid_t pid)
{
    pid_t below[PROC_TREE_MAX];
    size_t n;
    long long total = 0, ticks;
    char state;

    if (!xmp_proc_cpu_ticks(pid, &state, &total))
        return 0;
    n = xmp_proc_descendants(pid, below, PROC_TREE_MAX);
    for (size_t i = 0; i < n; i++)
        if (xmp_proc_cpu_ticks(below[i], &state, &ticks))
            total += ticks;
    return total;
}

/* The worker's CPU time so far, in microseconds: its cgroup's counters (cpu.stat, or cpuacct on
 * cgroup v1), which take in everything it forked; without a cgroup, its processes' (the ones
 * still alive, and what they reaped). -1 when unknown. */
static int64_t
worker_cpu_usec(struct xmp_worker *w)
{
    struct xmp_cgroup_stats st;
    struct xmp_error err = {0};

    if (w->cg != NULL && xmp_cgroup_read_stats(w->cg, &st, &err) == 0 && st.user_usec >= 0)
        return st.user_usec + (st.system_usec > 0 ? st.system_usec : 0);
    if (w->pid <= 0)
        return -1;
    return proc_tree_ticks(w->pid) * 1000000 / sysconf(_SC_CLK_TCK);
}

void
xmp_grp_watch_start(struct xmp_supervisor *sv)
{
    int64_t now = xmp_now_ns();

    sv->report.hung = NULL;
    sv->report.hang_timeout_ms = sv->spec->hang_timeout_ms;
    sv->unkillable_at_ns = 0;
    sv->watch_at_ns = sv->spec->hang_timeout_ms > 0 ? now + WATCH_PERIOD_NS : 0;
    sv->watch_prev_ns = now;
    for (size_t i = 0; i < sv->n_workers; i++) {
        struct xmp_worker *w = &sv->workers[i];
        w->hung = w->unkillable = false;
        w->output_ns = w->cpu_ns = now;
        w->cpu_usec = -1;
    }
    xmp_grp_arm_timer(sv);
}

void
xmp_grp_watch_output(struct xmp_supervisor *sv, struct xmp_worker *w, uint64_t before,
                     const struct xmp_stream *s)
{
    if (sv->watch_at_ns > 0 && s->n_read != before)
        w->output_ns = xmp_now_ns();
}

/* The last time the worker is known to have made progress: its last output, or the earliest
 * its CPU time can have last grown. Of two workers that stopped between the same two checks,
 * the one whose output stopped first is older. */
static int64_t
last_progress(const struct xmp_worker *w)
{
    return w->output_ns > w->cpu_ns ? w->output_ns : w->cpu_ns;
}

void
xmp_grp_watch_tick(struct xmp_supervisor *sv, int64_t now)
{
    int64_t limit = sv->spec->hang_timeout_ms * 1000000;
    struct xmp_worker *hung = NULL;

    if (sv->watch_at_ns == 0 || now < sv->watch_at_ns)
        return;
    if (sv->stopping != XMP_STOP_NONE) {
        sv->watch_at_ns = 0;
        return;
    }
    for (size_t i = 0; i < sv->n_workers; i++) {
        struct xmp_worker *w = &sv->workers[i];
        int64_t cpu;
        if (!w->running)
            continue;
        cpu = worker_cpu_usec(w);
        if (cpu >= 0) {
            int64_t grew = cpu - (w->cpu_usec >= 0 ? w->cpu_usec : 0);
            int64_t idle = (now - sv->watch_prev_ns) / 1000 / IDLE_CPU_DIVISOR;
            if (grew > idle && grew > 1000000 / sysconf(_SC_CLK_TCK))
                w->cpu_ns = sv->watch_prev_ns;
            w->cpu_usec = cpu;
        }
        /* When the others are blocked waiting for the hung one (in a collective), they all
         * go quiet: the one that stopped first is the cause. */
        if (now - last_progress(w) >= limit &&
            (hung == NULL || last_progress(w) < last_progress(hung)))
            hung = w;
    }
    sv->watch_prev_ns = now;
    /* On a fixed beat from the run's start, however late this check ran. */
    while (sv->watch_at_ns <= now)
        sv->watch_at_ns += WATCH_PERIOD_NS;
    if (hung == NULL)
        return;
    hung->hung = true;
    sv->report.hung = hung->rep;
    sv->report.hung_mono_ns = now;
    sv->watch_at_ns = 0;
    xmp_grp_stop_all(sv, XMP_STOP_HUNG, SIGTERM);
}

/* Where the stuck process is, for the report: its state letter, wchan and kernel stack. */
static void
read_stuck(pid_t pid, struct xmp_unkillable *u)
{
    struct xmp_stack_thread t;

    memset(u, 0, sizeof(*u));
    xmp_stacks_read_thread(pid, pid, &t);
    u->state[0] = t.state;
    snprintf(u->wchan, sizeof(u->wchan), "%s", t.wchan);
    for (size_t i = 0; i < t.n_kernel && u->n_stack < sizeof(u->stack) / sizeof(u->stack[0]); i++)
        snprintf(u->stack[u->n_stack++], sizeof(u->stack[0]), "%s", t.kernel[i]);
    xmp_stack_thread_free(&t);
}

void
xmp_grp_give_up_unkillable(struct xmp_supervisor *sv)
{
    sv->unkillable_at_ns = 0;
    for (size_t i = 0; i < sv->n_workers; i++) {
        struct xmp_worker *w = &sv->workers[i];
        struct xmp_worker_report *rep = w->rep;
        struct xmp_unkillable *u = &rep->unkillable;
        size_t len = strlen(sv->report.cgroup_note);
        char what[512];

        if (!w->running)
            continue;
        read_stuck(w->pid, u);
        if (w->cg != NULL)
            snprintf(u->cgroup, sizeof(u->cgroup), "%s", xmp_cgroup_path(w->cg));
        xmp_now_real(&rep->ended_at);
        rep->ended_mono_ns = xmp_now_ns();
        rep->state = XMP_WORKER_UNKILLABLE;
        rep->exit_code = -1;
        rep->signal = 0;
        /* Never reaped: its pidfd goes, and the run ends without it. */
        xmp_grp_worker_gone(sv, w);
        w->unkillable = true;
        sv->left_behind = true;
        xmp_worker_describe(rep, what, sizeof(what));
        if (!xmp_quiet(sv)) {
            xmp_status_erase(&sv->status);
            fprintf(stderr, "xmprun: %s; %s%s%s\n", what,
                    w->cg != NULL ? "its cgroup `" : "it is left behind",
                    w->cg != NULL ? u->cgroup : "",
                    w->cg != NULL ? "` is left for `xmprun gc`, which removes it once the "
                                    "process is gone"
                                  : "");
        }
        if (w->cg != NULL)
            snprintf(sv->report.cgroup_note + len, sizeof(sv->report.cgroup_note) - len,
                     "%sworker %d's cgroup `%s` is left for `xmprun gc`: its process did not die "
                     "of SIGKILL",
                     len > 0 ? "; " : "", rep->rank, u->cgroup);
    }
}
