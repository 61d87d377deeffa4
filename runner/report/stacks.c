/* The stack capture: a thread per CPU, each with its share of the processes, all under one
 * deadline. Each lists its processes' threads (state, wchan, kernel stack from /proc), asks every
 * one of them to stop (PTRACE_SEIZE + PTRACE_INTERRUPT: no signal is sent, so nothing of the
 * process's own changes), reads their modules while they stop, then one process after the other
 * reads the Python frames (stacks_python.c), unwinds with libdwfl (stacks_dw.c) and detaches.
 * xmprun is the workers' parent (and root where it isolates), so the kernel lets it attach. A
 * thread in D state is not stopped (it could not be before it wakes): its kernel stack and wchan
 * say where it is. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/report/stacks_internal.h"

#include "isolate/array.h"
#include "isolate/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Most threads read per process. */
#define MAX_THREADS 256

/* A capture thread's stack: libdwfl's unwinder and the Python reader use a few KiB of it. */
#define CAPTURE_STACK_SIZE (512 * 1024)

/* Most capture threads, whatever the CPUs: each keeps its own module files open. */
#define MAX_CAPTURE_THREADS 8

/* Most processes whose modules a capture thread reads while they stop, before it unwinds any. */
#define REPORT_AHEAD 32

int64_t
xmp_stacks_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* comm and state from /proc/PID/task/TID/stat ("tid (comm) S ..."; comm may hold parens); the
 * process's thread count (field 20) when it is read for the whole process (tid 0: /proc/PID/stat,
 * which is the main thread's), else or when unknown 0. */
static long
read_thread_stat(pid_t pid, struct xmp_stack_thread *t)
{
    char path[96], text[1024];
    char *open_paren, *close_paren, *field;
    long n_threads = 0;

    if (t->tid == 0)
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    else
        snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)t->tid);
    if (xmp_proc_read(path, text, sizeof(text)) < 0)
        return 0;
    open_paren = strchr(text, '(');
    close_paren = strrchr(text, ')');
    if (open_paren == NULL || close_paren == NULL || close_paren < open_paren)
        return 0;
    snprintf(t->name, sizeof(t->name), "%.*s", (int)(close_paren - open_paren - 1), open_paren + 1);
    if (close_paren[1] == ' ' && close_paren[2] != '\0')
        t->state = close_paren[2];
    /* Past the state (field 3) and the 16 fields after it. */
    field = close_paren + 1;
    for (int i = 3; i <= 19 && field != NULL; i++)
        field = strchr(field + 1, ' ');
    if (t->tid == 0 && field != NULL)
        n_threads = strtol(field + 1, NULL, 10);
    return n_threads;
}

/* False when the kernel stack could not be read for want of the right: /proc/PID/stack needs
 * CAP_SYS_ADMIN, which a regular user has not; the rest is read all the same. */
static bool
read_thread_kernel(pid_t pid, struct xmp_stack_thread *t)
{
    char path[96], text[16384];
    char *line, *save = NULL;

    snprintf(path, sizeof(path), "/proc/%d/task/%d/wchan", (int)pid, (int)t->tid);
    if (xmp_proc_read(path, text, sizeof(t->wchan)) >= 0 && strcmp(text, "0") != 0)
        snprintf(t->wchan, sizeof(t->wchan), "%.*s", (int)sizeof(t->wchan) - 1, text);
    /* Readable by root only (and empty for a running thread). */
    snprintf(path, sizeof(path), "/proc/%d/task/%d/stack", (int)pid, (int)t->tid);
    if (xmp_proc_read(path, text, sizeof(text)) < 0)
        return errno != EACCES && errno != EPERM;
    t->kernel = calloc(XMP_STACKS_MAX_FRAMES, sizeof(char *));
    for (line = strtok_r(text, "\n", &save);
         line != NULL && t->kernel != NULL && t->n_kernel < XMP_STACKS_MAX_FRAMES;
         line = strtok_r(NULL, "\n", &save)) {
        /* "[<0>] pipe_read+0x14f/0x3f0" */
        char *sym = strstr(line, "] ");
        t->kernel[t->n_kernel] = strdup(sym != NULL ? sym + 2 : line);
        if (t->kernel[t->n_kernel] != NULL)
            t->n_kernel++;
    }
    return true;
}

static int
list_threads(struct xmp_stack_proc *p)
{
    char path[64];
    DIR *d;
    struct dirent *e;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)p->pid);
    d = opendir(path);
    if (d == NULL)
        return -1;
    /* Grown as needed: most workers have a few threads, and a table for MAX_THREADS each was
     * most of a capture's page faults. */
    size_t cap = 0;
    while ((e = readdir(d)) != NULL && p->n_threads < MAX_THREADS) {
        long tid = strtol(e->d_name, NULL, 10);
        if (tid <= 0)
            continue;
        if (!xmp_array_reserve(p->threads, cap, p->n_threads + 1, 8))
            break;
        memset(&p->threads[p->n_threads], 0, sizeof(p->threads[0]));
        p->threads[p->n_threads++].tid = (pid_t)tid;
    }
    closedir(d);
    if (p->threads == NULL)
        return -1;
    /* The main thread first. */
    for (size_t i = 1; i < p->n_threads; i++)
        if (p->threads[i].tid == p->pid) {
            struct xmp_stack_thread t = p->threads[0];
            p->threads[0] = p->threads[i];
            p->threads[i] = t;
        }
    return 0;
}

/* One process of a capture thread's share, and where its threads are in being stopped. */
struct target {
    struct xmp_stack_proc *p;
    size_t index; /* in the pool */
    bool *seized, *stopped;
    size_t n_seized, n_settled; /* settled: stopped, or gone before it stopped */
    Dwfl *dwfl;                 /* its modules, once read */
    Dwfl_Callbacks callbacks;   /* dwfl's, until dwfl_end */
};

/* Seizes the threads of t (not those in D state: they could not stop before they wake) and asks
 * each to stop (PTRACE_INTERRUPT: no signal is sent, so nothing of the process's own changes). */
static void
start_stops(struct target *t)
{
    for (size_t i = 0; i < t->p->n_threads; i++) {
        struct xmp_stack_thread *th = &t->p->threads[i];
        if (th->state == 'Z' || th->state == 'X') {
            snprintf(th->note, sizeof(th->note), "exited: no stack");
            continue;
        }
        if (th->state == 'D') {
            snprintf(th->note, sizeof(th->note), "in D state (uninterruptible): not stopped");
            continue;
        }
        if (ptrace(PTRACE_SEIZE, th->tid, 0, 0) < 0) {
            snprintf(th->note, sizeof(th->note), "ptrace seize: %s", strerror(errno));
            continue;
        }
        t->seized[i] = true;
        t->n_seized++;
        ptrace(PTRACE_INTERRUPT, th->tid, 0, 0);
    }
}

/* Waits, until the deadline, for every seized thread of the n targets to stop (stopped[i]) or
 * to be gone. WSTOPPED without WEXITED: never reap a worker (its exit is the supervisor's). A
 * thread that is exiting (a zombie, or dead) never stops: it is not waited for. */
static void
wait_stops(struct target *targets, size_t n, int64_t deadline_ns)
{
    for (;;) {
        bool pending = false;
        for (size_t k = 0; k < n; k++) {
            struct target *t = &targets[k];
            for (size_t i = 0; t->n_settled < t->n_seized && i < t->p->n_threads; i++) {
                struct xmp_stack_thread *th = &t->p->threads[i];
                siginfo_t si = {0};
                if (!t->seized[i] || t->stopped[i] || th->state == 'Z' || th->state == 'X')
                    continue;
                if (waitid(P_PID, (id_t)th->tid, &si, WSTOPPED | WNOHANG | __WALL) == 0 &&
                    si.si_pid != 0) {
                    t->stopped[i] = true;
                    t->n_settled++;
                    continue;
                }
                read_thread_stat(t->p->pid, th);
                if (th->state == 'Z' || th->state == 'X') {
                    snprintf(th->note, sizeof(th->note), "exited before it stopped");
                    t->n_settled++;
                }
            }
            pending = pending || t->n_settled < t->n_seized;
        }
        if (!pending || xmp_stacks_now_ns() >= deadline_ns)
            return;
        usleep(100);
    }
}

/* Detaches every thread that stopped. One that was seized but had not stopped yet is let go by
 * the kernel when this capture thread ends (a tracer thread's exit detaches its tracees and
 * drops their pending stop), so nothing is left stopped with nobody to resume it. */
static void
detach_threads(const struct xmp_stack_proc *p, const bool *stopped)
{
    for (size_t i = 0; i < p->n_threads; i++)
        if (stopped[i])
            ptrace(PTRACE_DETACH, p->threads[i].tid, 0, 0);
}

static void
read_proc_comm(struct xmp_stack_proc *p)
{
    char path[64], text[sizeof(p->comm)];

    snprintf(path, sizeof(path), "/proc/%d/comm", (int)p->pid);
    if (xmp_proc_read(path, text, sizeof(text)) >= 0) {
        text[strcspn(text, "\n")] = '\0';
        snprintf(p->comm, sizeof(p->comm), "%s", text);
    }
}

/* Before any is stopped: the process's name, its threads, their state and kernel stacks. */
static void
read_proc(struct xmp_stack_proc *p)
{
    struct xmp_stack_thread main_thread = {0};
    /* A process of one thread (most workers of C programs, shells, sleeps) needs no listing. */
    bool alone = read_thread_stat(p->pid, &main_thread) == 1;

    if (alone && (p->threads = calloc(1, sizeof(*p->threads))) == NULL)
        alone = false;
    if (alone) {
        p->threads[0] = main_thread;
        p->threads[0].tid = p->pid;
        p->n_threads = 1;
    } else if (list_threads(p) < 0) {
        snprintf(p->error, sizeof(p->error), "list the threads: %s", strerror(errno));
        return;
    }
    for (size_t i = 0; i < p->n_threads; i++) {
        if (!alone)
            read_thread_stat(p->pid, &p->threads[i]);
        if (!read_thread_kernel(p->pid, &p->threads[i]) && p->error[0] == '\0')
            snprintf(p->error, sizeof(p->error),
                     "no kernel stacks: /proc/PID/stack needs CAP_SYS_ADMIN, which xmprun has not "
                     "here (the rest is read)");
        p->threads[i].native = calloc(XMP_STACKS_MAX_FRAMES, sizeof(struct xmp_stack_frame));
    }
    /* The process's name is its main thread's (list_threads puts it first). */
    if (p->n_threads > 0 && p->threads[0].tid == p->pid)
        snprintf(p->comm, sizeof(p->comm), "%s", p->threads[0].name);
    else
        read_proc_comm(p);
}

/* The processes of one capture, read by a few threads (one per CPU xmprun may use). The caller
 * gives up on it at the deadline; whoever of the caller and the threads is last frees it. */
struct pool {
    struct xmp_stack_proc *procs;
    bool *done; /* procs[i] is the caller's to take */
    size_t n, n_done;
    size_t refs; /* the caller and each thread still running */
    int64_t deadline_ns;
    pthread_mutex_t lock;
    pthread_cond_t cond;
};

struct pool_part {
    struct pool *pool;
    size_t first, stride; /* procs first, first + stride, ... */
};

static void
pool_unref(struct pool *pool)
{
    bool last;

    pthread_mutex_lock(&pool->lock);
    last = --pool->refs == 0;
    pthread_mutex_unlock(&pool->lock);
    if (!last)
        return;
    for (size_t i = 0; i < pool->n; i++)
        xmp_stack_proc_free(&pool->procs[i]);
    free(pool->procs);
    free(pool->done);
    pthread_cond_destroy(&pool->cond);
    pthread_mutex_destroy(&pool->lock);
    free(pool);
}

static void
pool_done(struct pool *pool, size_t i)
{
    pthread_mutex_lock(&pool->lock);
    pool->done[i] = true;
    /* The caller waits for them all: woken once, not at each (it would take a CPU from the
     * capture threads every time). */
    if (++pool->n_done == pool->n)
        pthread_cond_broadcast(&pool->cond);
    pthread_mutex_unlock(&pool->lock);
}

/* A capture thread: reads its processes' threads from /proc, stops all of them, then unwinds
 * and lets go of one process after the other: the stops are waited for together. */
static void *
run_part(void *arg)
{
    struct pool_part part = *(struct pool_part *)arg;
    struct pool *pool = part.pool;
    struct target *targets;
    size_t n = 0;
    char err[256] = "";
    bool dw;

    free(arg);
    targets = calloc((pool->n + part.stride - 1) / part.stride, sizeof(*targets));
    for (size_t i = part.first; i < pool->n; i += part.stride) {
        if (targets != NULL) {
            targets[n++] = (struct target){.p = &pool->procs[i], .index = i};
            continue;
        }
        snprintf(pool->procs[i].error, sizeof(pool->procs[i].error), "%s", strerror(ENOMEM));
        pool_done(pool, i);
    }
    /* libdw is loaded (once: milliseconds, seconds from a cold disk under load) before the
     * workers are stopped, not while they wait. */
    dw = targets != NULL && xmp_stacks_dw_load(err, sizeof(err));
    for (size_t k = 0; k < n; k++) {
        struct target *t = &targets[k];
        read_proc(t->p);
        if (!dw && t->p->error[0] == '\0')
            snprintf(t->p->error, sizeof(t->p->error), "%s", err);
        if (!dw || t->p->n_threads == 0)
            continue;
        t->seized = calloc(t->p->n_threads, sizeof(bool));
        t->stopped = calloc(t->p->n_threads, sizeof(bool));
        if (t->seized != NULL && t->stopped != NULL)
            start_stops(t);
        if (t->n_seized == 0 && t->p->error[0] == '\0')
            snprintf(t->p->error, sizeof(t->p->error),
                     "no thread could be stopped to read its stack");
    }
    xmp_stacks_dw_thread_begin();
    /* While they stop: the first ones' modules (each session holds two descriptors). */
    for (size_t k = 0; k < n && k < REPORT_AHEAD; k++)
        if (targets[k].n_seized > 0)
            targets[k].dwfl = xmp_stacks_dw_report(targets[k].p, &targets[k].callbacks);
    wait_stops(targets, n, pool->deadline_ns);
    for (size_t k = 0; k < n; k++) {
        struct target *t = &targets[k];
        if (k >= REPORT_AHEAD && t->n_seized > 0)
            t->dwfl = xmp_stacks_dw_report(t->p, &t->callbacks);
        if (t->dwfl != NULL) {
            xmp_stacks_dw_unwind(t->dwfl, t->p, t->seized, t->stopped, pool->deadline_ns);
            dwfl_end(t->dwfl);
        }
        if (t->n_seized > 0)
            detach_threads(t->p, t->stopped);
        free(t->seized);
        free(t->stopped);
        pool_done(pool, t->index);
    }
    xmp_stacks_dw_thread_end();
    free(targets);
    pool_unref(pool);
    return NULL;
}

/* CPUs this thread may run on: capture threads beyond them would only take turns. */
static size_t
cpus_usable(void)
{
    cpu_set_t set;

    if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) < 1)
        return 1;
    return (size_t)CPU_COUNT(&set);
}

int
xmp_stacks_capture(const pid_t *pids, size_t n, long budget_ms, struct xmp_stacks *out)
{
    pthread_condattr_t cattr;
    struct pool *pool;
    size_t n_threads = n < cpus_usable() ? n : cpus_usable();
    int64_t start = xmp_stacks_now_ns();
    /* The threads stop their work at the deadline; the wait allows them a little beyond. */
    int64_t give_up = start + (int64_t)budget_ms * 1000000;
    struct timespec until = {give_up / 1000000000, give_up % 1000000000};

    if (n_threads > MAX_CAPTURE_THREADS)
        n_threads = MAX_CAPTURE_THREADS;
    out->procs = calloc(n > 0 ? n : 1, sizeof(*out->procs));
    pool = calloc(1, sizeof(*pool));
    if (pool != NULL) {
        pool->procs = calloc(n > 0 ? n : 1, sizeof(*pool->procs));
        pool->done = calloc(n > 0 ? n : 1, sizeof(*pool->done));
    }
    if (out->procs == NULL || pool == NULL || pool->procs == NULL || pool->done == NULL) {
        free(out->procs);
        out->procs = NULL;
        if (pool != NULL) {
            free(pool->procs);
            free(pool->done);
        }
        free(pool);
        errno = ENOMEM;
        return -1;
    }
    out->n = n;
    pool->n = n;
    pool->refs = 1;
    pool->deadline_ns = start + (int64_t)(budget_ms > 100 ? budget_ms - 50 : budget_ms) * 1000000;
    for (size_t i = 0; i < n; i++)
        pool->procs[i].pid = out->procs[i].pid = pids[i];
    pthread_mutex_init(&pool->lock, NULL);
    pthread_condattr_init(&cattr);
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    pthread_cond_init(&pool->cond, &cattr);
    pthread_condattr_destroy(&cattr);
    for (size_t k = 0; k < n_threads; k++) {
        struct pool_part *part = malloc(sizeof(*part));
        pthread_attr_t attr;
        pthread_t th;
        int rc = ENOMEM;

        if (part != NULL) {
            *part = (struct pool_part){pool, k, n_threads};
            pthread_attr_init(&attr);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            /* Not the default 8 MiB: glibc keeps 40 MiB of stacks for reuse and unmaps the
             * rest as the threads end, each unmap a TLB shootdown on every CPU xmprun runs on. */
            pthread_attr_setstacksize(&attr, CAPTURE_STACK_SIZE);
            pthread_mutex_lock(&pool->lock);
            pool->refs++;
            pthread_mutex_unlock(&pool->lock);
            rc = pthread_create(&th, &attr, run_part, part);
            pthread_attr_destroy(&attr);
        }
        if (rc == 0)
            continue;
        free(part);
        pthread_mutex_lock(&pool->lock);
        if (part != NULL)
            pool->refs--;
        for (size_t i = k; i < n; i += n_threads) {
            snprintf(pool->procs[i].error, sizeof(pool->procs[i].error),
                     "could not start its capture: %s", strerror(rc));
            pool->done[i] = true;
            pool->n_done++;
        }
        pthread_mutex_unlock(&pool->lock);
    }
    pthread_mutex_lock(&pool->lock);
    while (pool->n_done < n &&
           pthread_cond_timedwait(&pool->cond, &pool->lock, &until) != ETIMEDOUT)
        ;
    for (size_t i = 0; i < n; i++) {
        struct xmp_stack_proc *p = &out->procs[i];
        if (pool->done[i]) {
            *p = pool->procs[i];
            memset(&pool->procs[i], 0, sizeof(pool->procs[i]));
        } else {
            /* Its thread frees what it read when the last of them ends. */
            read_proc_comm(p);
            p->truncated = true;
            snprintf(p->error, sizeof(p->error), "not read within the %ld ms budget", budget_ms);
        }
    }
    /* A thread still running marks no more of the caller's: a process it finishes now stays in
     * the pool, freed with it. */
    for (size_t i = 0; i < n; i++)
        pool->done[i] = true;
    pthread_mutex_unlock(&pool->lock);
    pool_unref(pool);
    for (size_t i = 0; i < n; i++)
        if (out->procs[i].error[0] == '\0' && out->procs[i].n_threads == 0)
            snprintf(out->procs[i].error, sizeof(out->procs[i].error), "no thread found");
    return 0;
}

struct xmp_stack_proc *
xmp_stacks_take(struct xmp_stacks *s, size_t i)
{
    struct xmp_stack_proc *p = malloc(sizeof(*p));

    if (p == NULL || i >= s->n)
        return free(p), NULL;
    *p = s->procs[i];
    memset(&s->procs[i], 0, sizeof(s->procs[i]));
    return p;
}

struct xmp_stack_proc *
xmp_stacks_take_group(struct xmp_stacks *s, size_t first, size_t n)
{
    struct xmp_stack_proc *p = xmp_stacks_take(s, first);

    if (p == NULL || n <= 1 || first + n > s->n)
        return p;
    p->children = calloc(n - 1, sizeof(*p->children));
    if (p->children == NULL)
        return p;
    for (size_t k = 1; k < n; k++) {
        p->children[p->n_children++] = s->procs[first + k];
        memset(&s->procs[first + k], 0, sizeof(s->procs[0]));
    }
    return p;
}

static void
free_frames(struct xmp_stack_frame *f, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(f[i].function);
        free(f[i].file);
    }
    free(f);
}

void
xmp_stacks_read_thread(pid_t pid, pid_t tid, struct xmp_stack_thread *t)
{
    memset(t, 0, sizeof(*t));
    t->tid = tid;
    read_thread_stat(pid, t);
    read_thread_kernel(pid, t);
}

void
xmp_stack_thread_free(struct xmp_stack_thread *t)
{
    for (size_t k = 0; k < t->n_kernel; k++)
        free(t->kernel[k]);
    free(t->kernel);
    free_frames(t->native, t->n_native);
    free_frames(t->python, t->n_python);
    memset(t, 0, sizeof(*t));
}

void
xmp_stack_proc_free(struct xmp_stack_proc *p)
{
    if (p == NULL)
        return;
    for (size_t i = 0; i < p->n_threads; i++)
        xmp_stack_thread_free(&p->threads[i]);
    free(p->threads);
    p->threads = NULL;
    p->n_threads = 0;
    for (size_t i = 0; i < p->n_children; i++)
        xmp_stack_proc_free(&p->children[i]);
    free(p->children);
    p->children = NULL;
    p->n_children = 0;
}

void
xmp_stacks_free(struct xmp_stacks *s)
{
    for (size_t i = 0; i < s->n; i++)
        xmp_stack_proc_free(&s->procs[i]);
    free(s->procs);
    s->procs = NULL;
    s->n = 0;
}
