/* One run of the worker group: xmprun's memory watchdog, where no cgroup of xmprun's limits the
 * workers (isolation.cgroups: auto in a read-only cgroupfs, as a user without delegation, in a
 * Slurm step). Every XMP_MEMWATCH_PERIOD_MS it measures each running worker's process tree and
 * the job's sum, keeps each worker's largest sample as its peak, and stops a worker over its
 * limit (or the largest worker of a job over resources.job.memory) with SIGKILL to every process
 * of its tree, each through a pidfd opened after its start time was checked again: never a
 * process outside the job, even after a pid was reused.
 *
 * Exec mode counts resident anonymous memory (RssAnon, a counter the kernel keeps). start: fork
 * counts the pages each process alone maps, so that the zygote's preload is not charged to
 * every worker; that count (smaps_rollup) walks the worker's page tables under its mmap lock:
 * 28 ms for a 4 GiB preload here, 39 % of a CPU for 8 workers every 100 ms
 * (bench/fork_memwatch.py). So a fork-mode worker's count is the last walk's plus what its
 * RssAnon grew by since (new allocations; copy-on-write copies of the shared pages show at the
 * next walk), and a walk is made when its tree changed (a new process's RssAnon holds the pages
 * it shares with its parent), when that estimate is over its limit (a stop is only ever on a
 * walked count), and otherwise one worker at a time within XMP_MEMWATCH_MAX_LOAD of one CPU. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "isolate/proc.h"
#include "runner/run/group_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>

/* The processes of one worker's tree that one sample follows; more are neither measured nor
 * killed. */
#define TREE_MAX 1024

struct tree {
    pid_t pid[TREE_MAX];
    unsigned long long start[TREE_MAX]; /* 0: not known */
    size_t n;
};

void
xmp_grp_memwatch_open(struct xmp_supervisor *sv)
{
    struct itimerspec its = {
        .it_value = {0, XMP_MEMWATCH_PERIOD_MS * 1000000L},
        .it_interval = {0, XMP_MEMWATCH_PERIOD_MS * 1000000L},
    };

    if (!sv->memwatch || sv->memwatch_fd >= 0)
        return;
    sv->memwatch_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    if (sv->memwatch_fd < 0)
        return;
    if (timerfd_settime(sv->memwatch_fd, 0, &its, NULL) < 0 ||
        xmp_grp_ep_ctl(sv, EPOLL_CTL_ADD, sv->memwatch_fd, EPOLLIN, XMP_EV_MEMWATCH, 0) < 0)
        xmp_grp_ep_close(sv, &sv->memwatch_fd);
}

void
xmp_grp_memwatch_close(struct xmp_supervisor *sv)
{
    xmp_grp_ep_close(sv, &sv->memwatch_fd);
}

/* The value in kB of "Key:   123 kB" in text, in bytes, or -1 when the key is not there. */
static int64_t
kb_field(const char *text, const char *key)
{
    const char *p = strstr(text, key);

    return p != NULL ? (int64_t)strtoll(p + strlen(key), NULL, 10) * 1024 : -1;
}

/* One process: its resident anonymous memory (/proc/PID/status RssAnon) and, with walk, the
 * pages it alone maps (smaps_rollup Private_Clean + Private_Dirty) into *private. *threads gets
 * its thread count. -1 with errno when it cannot be read. */
static int64_t
measure(pid_t pid, bool walk, int64_t *private, long *threads)
{
    char path[64], buf[4096];

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if (xmp_proc_read(path, buf, sizeof(buf)) < 0)
        return -1;
    const char *t = strstr(buf, "\nThreads:");
    *threads = t != NULL ? strtol(t + 9, NULL, 10) : 1;
    /* A process that has exited (a zombie until it is reaped) has no memory left to show: it
     * counts as gone, not as a sample of 0. */
    errno = ESRCH;
    int64_t anon = kb_field(buf, "\nRssAnon:");
    if (!walk || anon < 0)
        return anon;
    snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
    if (xmp_proc_read(path, buf, sizeof(buf)) < 0)
        return -1;
    int64_t clean = kb_field(buf, "\nPrivate_Clean:"), dirty = kb_field(buf, "\nPrivate_Dirty:");
    errno = ESRCH;
    if (clean < 0 || dirty < 0)
        return -1;
    *private = clean + dirty;
    return anon;
}

static bool
tree_has(const struct tree *t, pid_t pid)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->pid[i] == pid)
            return true;
    return false;
}

static void
tree_add(struct tree *t, pid_t pid)
{
    if (pid > 0 && t->n < TREE_MAX && !tree_has(t, pid))
        t->pid[t->n++] = pid;
}

/* Adds the pids of one /proc/.../children file. */
static void
add_children_file(struct tree *t, const char *path)
{
    char buf[8192];

    if (xmp_proc_read(path, buf, sizeof(buf)) <= 0)
        return;
    for (char *p = buf, *end; *p != '\0'; p = end) {
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        tree_add(t, (pid_t)v);
    }
}

/* The children of pid: those of its main thread, and with more threads those of each (a child
 * is listed under the thread that forked it). */
static void
add_children(struct tree *t, pid_t pid, long threads)
{
    char path[96];

    if (threads <= 1) {
        snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
        add_children_file(t, path);
        return;
    }
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (d == NULL)
        return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/%d/task/%.16s/children", (int)pid, e->d_name);
        add_children_file(t, path);
    }
    closedir(d);
}

/* xmprun is a subreaper: a process of a worker's whose parent exited is now xmprun's child,
 * still in the worker's process group (unless it left it with setsid, which takes it out of
 * the worker's tree for the watchdog too, as for the stop). Read once a sample: xmprun's
 * children that are neither a worker nor the zygote, with their process groups. */
struct orphans {
    pid_t pid[TREE_MAX];
    pid_t pgid[TREE_MAX];
    size_t n;
};

static void
find_orphans(const struct xmp_supervisor *sv, struct orphans *o)
{
    struct tree mine = {.n = 0};
    char path[96];

    o->n = 0;
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)getpid(), (int)getpid());
    add_children_file(&mine, path);
    for (size_t i = 0; i < mine.n; i++) {
        bool known = mine.pid[i] == sv->zy.pid;
        for (size_t k = 0; k < sv->n_workers && !known; k++)
            known = sv->workers[k].pid == mine.pid[i];
        if (!known) {
            o->pid[o->n] = mine.pid[i];
            o->pgid[o->n++] = getpgid(mine.pid[i]);
        }
    }
}

/* One worker's sample: its tree (t), the sum of their RssAnon, and with walk of their private
 * pages (*private); -1 when none of them could be measured (all gone). *unreadable gets errno of a
 * process whose /proc could not be read (non-dumpable, hidepid), with its pid in *which. */
static int64_t
sample_worker(const struct xmp_worker *w, const struct orphans *o, bool walk, int64_t *private,
              struct tree *t, int *unreadable, pid_t *which)
{
    int64_t sum = -1;

    *private = 0;
    t->n = 0;
    *unreadable = 0;
    tree_add(t, w->pid);
    for (size_t i = 0; i < o->n; i++)
        if (o->pgid[i] == w->pid)
            tree_add(t, o->pid[i]);
    for (size_t i = 0; i < t->n; i++) {
        long threads = 1;
        int64_t own = 0;
        int64_t m = measure(t->pid[i], walk, &own, &threads);
        if (xmp_proc_start_time(t->pid[i], &t->start[i]) < 0)
            t->start[i] = 0;
        if (m < 0) {
            /* Gone since it was listed: nothing to count. Unreadable: say so, never a 0. */
            if ((errno == EACCES || errno == EPERM) && *unreadable == 0) {
                *unreadable = errno;
                *which = t->pid[i];
            }
            continue;
        }
        sum = (sum < 0 ? 0 : sum) + m;
        *private += own;
        add_children(t, t->pid[i], threads);
    }
    return sum;
}

/* SIGKILL to every process of the tree that is still the one that was sampled. */
static void
kill_tree(const struct tree *t)
{
    for (size_t i = 0; i < t->n; i++) {
        int fd = (int)syscall(SYS_pidfd_open, t->pid[i], 0);
        if (fd < 0)
            continue;
        unsigned long long now = 0;
        if (t->start[i] != 0 && xmp_proc_start_time(t->pid[i], &now) == 0 && now == t->start[i])
            syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0);
        close(fd);
    }
}

static void
stop_worker(struct xmp_worker *w, const struct tree *t, const char *limit, int64_t used,
            int64_t job_used)
{
    struct xmp_worker_report *rep = w->rep;

    w->mem_over = true;
    rep->memory_over = limit;
    rep->memory_used = used;
    rep->memory_job_used = job_used;
    /* The rest of the job follows from its reap, as for any failure. */
    kill_tree(t);
}

/* Which processes the tree holds (pids and start times), to tell when it changed. */
static uint64_t
tree_sig(const struct tree *t)
{
    uint64_t sig = 1;

    for (size_t i = 0; i < t->n; i++)
        sig += (uint64_t)t->pid[i] * 2654435761u + t->start[i];
    return sig;
}

static int64_t
cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* start: fork: walks w's tree (its exact private pages) and makes that the base of its next
 * estimates; the walk's CPU time puts off the next walk in turn (XMP_MEMWATCH_MAX_LOAD). */
static int64_t
walk_worker(struct xmp_supervisor *sv, struct xmp_worker *w, const struct orphans *o,
            struct tree *t, int *unreadable, pid_t *which)
{
    int64_t before = cpu_ns(), private = 0;
    int64_t anon = sample_worker(w, o, true, &private, t, unreadable, which);

    sv->mw_walk_at = xmp_now_ns() + (cpu_ns() - before) * 100 / XMP_MEMWATCH_MAX_LOAD;
    if (anon < 0)
        return -1;
    w->mw_private = private;
    w->mw_anon = anon;
    w->mw_tree = tree_sig(t);
    return private;
}

/* One worker's measure now (-1: nothing to measure); *exact says whether it was counted, not
 * estimated (exec mode always; start: fork after a walk). turn: its walk in turn is due. */
static int64_t
measure_worker(struct xmp_supervisor *sv, struct xmp_worker *w, const struct orphans *o, bool turn,
               struct tree *t, bool *exact, int *unreadable, pid_t *which)
{
    int64_t limit = w->pw->limits.memory, private = 0, anon;

    *exact = true;
    if (!sv->fork_mode)
        return sample_worker(w, o, false, &private, t, unreadable, which);
    if (w->mw_tree == 0 || turn)
        return walk_worker(sv, w, o, t, unreadable, which);
    anon = sample_worker(w, o, false, &private, t, unreadable, which);
    if (anon < 0)
        return -1;
    int64_t est = w->mw_private + (anon - w->mw_anon);
    if (tree_sig(t) != w->mw_tree || (limit > 0 && est > limit))
        return walk_worker(sv, w, o, t, unreadable, which);
    *exact = false;
    return est > 0 ? est : 0;
}

void
xmp_grp_memwatch_sample(struct xmp_supervisor *sv)
{
    struct tree trees[2]; /* the current worker's, and the largest one's so far */
    struct orphans orphans;
    uint64_t expirations;
    int64_t job = 0, largest = -1;
    struct xmp_worker *big = NULL;
    bool big_exact = true;
    size_t turn = sv->mw_turn;
    bool rotate = sv->fork_mode && xmp_now_ns() >= sv->mw_walk_at;

    if (read(sv->memwatch_fd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
        return;
    find_orphans(sv, &orphans);
    /* The worker whose walk it is (start: fork), the next running one from the last. */
    for (size_t k = 0; k < sv->n_workers; k++, turn = (turn + 1) % sv->n_workers)
        if (sv->workers[turn].running)
            break;
    if (rotate)
        sv->mw_turn = (turn + 1) % sv->n_workers;
    for (size_t i = 0; i < sv->n_workers; i++) {
        struct xmp_worker *w = &sv->workers[i];
        struct xmp_worker_report *rep = w->rep;
        struct tree *t = &trees[0];
        int unreadable = 0;
        pid_t which = 0;

        if (!w->running || w->pid <= 0 || w->mem_over)
            continue;
        bool exact = true;
        int64_t m =
            measure_worker(sv, w, &orphans, rotate && i == turn, t, &exact, &unreadable, &which);
        rep->memory_sampled = true;
        rep->memory_period_ms = XMP_MEMWATCH_PERIOD_MS;
        if (unreadable != 0 && rep->memory_unmeasured[0] == '\0') {
            snprintf(rep->memory_unmeasured, sizeof(rep->memory_unmeasured),
                     "/proc/%d could not be read (%s: a non-dumpable process, or /proc mounted "
                     "with hidepid): its memory limit is not enforced",
                     (int)which, strerror(unreadable));
            if (!xmp_quiet(sv))
                fprintf(stderr, "xmprun: warning: worker %d: %s\n", w->pw->rank,
                        rep->memory_unmeasured);
        }
        if (rep->memory_unmeasured[0] != '\0' || m < 0)
            continue;
        if (m > rep->memory_peak)
            rep->memory_peak = m;
        job += m;
        if (w->pw->limits.memory > 0 && m > w->pw->limits.memory && exact) {
            stop_worker(w, t, "worker", m, -1);
            continue;
        }
        if (m > largest) {
            largest = m;
            big = w;
            big_exact = exact;
            /* Its tree, for a stop at the job's limit. */
            trees[1].n = t->n;
            memcpy(trees[1].pid, t->pid, t->n * sizeof(t->pid[0]));
            memcpy(trees[1].start, t->start, t->n * sizeof(t->start[0]));
        }
    }
    if (big != NULL && sv->plan.job_limits.memory > 0 && job > sv->plan.job_limits.memory &&
        !big_exact) {
        /* Only ever on a counted measure: the largest worker's, walked now. */
        int unreadable = 0;
        pid_t which = 0;
        int64_t m = walk_worker(sv, big, &orphans, &trees[1], &unreadable, &which);
        job += m - largest;
        largest = m;
        big_exact = m >= 0;
    }
    if (big != NULL && big_exact && sv->plan.job_limits.memory > 0 &&
        job > sv->plan.job_limits.memory)
        stop_worker(big, &trees[1], "job", largest, job);
}
