/* The stack capture: one thread per process, all under one deadline. Each lists the process's
 * threads (state, wchan, kernel stack from /proc), stops them (PTRACE_SEIZE + PTRACE_INTERRUPT:
 * no signal is sent, so nothing of the process's own changes), unwinds each with libdwfl, reads
 * the Python frames (stacks_python.c) and detaches. xmprun is the workers' parent (and root
 * where it isolates), so the kernel lets it attach. A thread in D state is not stopped (it
 * could not be before it wakes): its kernel stack and wchan say where it is. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runner/report/stacks_internal.h"

#include "isolate/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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

int64_t
xmp_stacks_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* comm and state from /proc/PID/task/TID/stat ("tid (comm) S ..."; comm may hold parens). */
static void
read_thread_stat(pid_t pid, struct xmp_stack_thread *t)
{
    char path[96], text[1024];
    char *open_paren, *close_paren;

    snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)t->tid);
    if (xmp_proc_read(path, text, sizeof(text)) < 0)
        return;
    open_paren = strchr(text, '(');
    close_paren = strrchr(text, ')');
    if (open_paren != NULL && close_paren != NULL && close_paren > open_paren) {
        snprintf(t->name, sizeof(t->name), "%.*s", (int)(close_paren - open_paren - 1),
                 open_paren + 1);
        if (close_paren[1] == ' ' && close_paren[2] != '\0')
            t->state = close_paren[2];
    }
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
        if (p->n_threads == cap) {
            struct xmp_stack_thread *more =
                reallocarray(p->threads, cap > 0 ? cap * 2 : 8, sizeof(*p->threads));
            if (more == NULL)
                break;
            p->threads = more;
            cap = cap > 0 ? cap * 2 : 8;
        }
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

/* Symbol names by module and offset, shared by every capture of the process: a job's workers
 * run the same binaries, and a name's lookup (libdwfl reads the module's symbol table anew for
 * each process it attaches to) was most of a capture's time. A module is told by its path and
 * its size; entries are never removed (a capture is once a run, `xmprun stacks` once a process). */
#define SYM_CACHE_SIZE 4096 /* a power of two */

struct sym_entry {
    const char *module; /* the module's name: its path */
    uint64_t size, rel; /* the module's size; the address's offset into it */
    char *name;         /* NULL: no symbol there */
    uint64_t off;       /* from the symbol's start */
};

static struct sym_entry sym_cache[SYM_CACHE_SIZE];
static size_t sym_used;
static pthread_mutex_t sym_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t
sym_slot(const char *module, uint64_t size, uint64_t rel)
{
    uint64_t h = 1469598103934665603ULL ^ size ^ (rel * 0x9e3779b97f4a7c15ULL);

    for (const char *c = module; *c != '\0'; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ULL;
    for (size_t i = (size_t)h & (SYM_CACHE_SIZE - 1);; i = (i + 1) & (SYM_CACHE_SIZE - 1)) {
        const struct sym_entry *e = &sym_cache[i];
        if (e->module == NULL ||
            (e->size == size && e->rel == rel && strcmp(e->module, module) == 0))
            return i;
    }
}

/* The symbol at adj in mod: its name (NULL if none; the cache's, never freed) and *off from its
 * start. */
static const char *
sym_lookup(Dwfl_Module *mod, Dwarf_Addr adj, GElf_Off *off)
{
    Dwarf_Addr start = 0, end = 0;
    const char *module = dwfl_module_info(mod, NULL, &start, &end, NULL, NULL, NULL, NULL);
    const char *name;
    GElf_Sym sym;
    size_t i;

    if (module == NULL)
        return dwfl_module_addrinfo(mod, adj, off, &sym, NULL, NULL, NULL);
    pthread_mutex_lock(&sym_lock);
    i = sym_slot(module, end - start, adj - start);
    if (sym_cache[i].module != NULL) {
        *off = sym_cache[i].off;
        name = sym_cache[i].name;
        pthread_mutex_unlock(&sym_lock);
        return name;
    }
    pthread_mutex_unlock(&sym_lock);
    name = dwfl_module_addrinfo(mod, adj, off, &sym, NULL, NULL, NULL);
    pthread_mutex_lock(&sym_lock);
    i = sym_slot(module, end - start, adj - start);
    /* Kept at most three quarters full, so that a miss ends at an empty slot. */
    if (sym_cache[i].module == NULL && sym_used < SYM_CACHE_SIZE * 3 / 4) {
        char *m = strdup(module), *n = name != NULL ? strdup(name) : NULL;
        if (m != NULL && (name == NULL || n != NULL)) {
            sym_cache[i] = (struct sym_entry){m, end - start, adj - start, n, *off};
            sym_used++;
            name = n;
        } else {
            free(m);
            free(n);
        }
    }
    pthread_mutex_unlock(&sym_lock);
    return name;
}

struct native_walk {
    Dwfl *dwfl;
    struct xmp_stack_thread *t;
    int64_t deadline_ns;
};

static int
on_frame(Dwfl_Frame *state, void *arg)
{
    struct native_walk *nw = arg;
    struct xmp_stack_thread *t = nw->t;
    struct xmp_stack_frame *f;
    Dwarf_Addr pc, adj;
    bool activation;
    Dwfl_Module *mod;
    GElf_Off off = 0;
    const char *name = NULL, *file = NULL;
    Dwarf_Addr start = 0;

    if (t->n_native >= XMP_STACKS_MAX_FRAMES || xmp_stacks_now_ns() > nw->deadline_ns)
        return DWARF_CB_ABORT;
    if (!dwfl_frame_pc(state, &pc, &activation))
        return DWARF_CB_ABORT;
    /* A return address points after the call: look up the call itself. */
    adj = pc - (activation ? 0 : 1);
    mod = dwfl_addrmodule(nw->dwfl, adj);
    if (mod != NULL) {
        name = sym_lookup(mod, adj, &off);
        file = dwfl_module_info(mod, NULL, &start, NULL, NULL, NULL, NULL, NULL);
    }
    f = &t->native[t->n_native++];
    f->function = name != NULL ? strdup(name) : NULL;
    f->file = file != NULL ? strdup(file) : NULL;
    f->offset = name != NULL ? off + (activation ? 0 : 1) : pc - start;
    return DWARF_CB_OK;
}

/* Stops the threads (not those in D state), waiting for each until the deadline; stopped[i]
 * says which did. Returns how many were seized (each must be detached). */
static size_t
stop_threads(struct xmp_stack_proc *p, bool *seized, bool *stopped, int64_t deadline_ns)
{
    size_t n_seized = 0, n_stopped = 0, n_gone = 0;

    for (size_t i = 0; i < p->n_threads; i++) {
        struct xmp_stack_thread *t = &p->threads[i];
        if (t->state == 'Z' || t->state == 'X') {
            snprintf(t->note, sizeof(t->note), "exited: no stack");
            continue;
        }
        if (t->state == 'D') {
            snprintf(t->note, sizeof(t->note), "in D state (uninterruptible): not stopped");
            continue;
        }
        if (ptrace(PTRACE_SEIZE, t->tid, 0, 0) < 0) {
            snprintf(t->note, sizeof(t->note), "ptrace seize: %s", strerror(errno));
            continue;
        }
        seized[i] = true;
        n_seized++;
        ptrace(PTRACE_INTERRUPT, t->tid, 0, 0);
    }
    /* WSTOPPED without WEXITED: never reap the worker itself (its exit is the supervisor's). A
     * thread that is exiting (a zombie, or dead) never stops: it is not waited for. */
    while (n_stopped + n_gone < n_seized && xmp_stacks_now_ns() < deadline_ns) {
        for (size_t i = 0; i < p->n_threads; i++) {
            struct xmp_stack_thread *t = &p->threads[i];
            siginfo_t si = {0};
            if (!seized[i] || stopped[i] || t->state == 'Z' || t->state == 'X')
                continue;
            if (waitid(P_PID, (id_t)t->tid, &si, WSTOPPED | WNOHANG | __WALL) == 0 &&
                si.si_pid != 0) {
                stopped[i] = true;
                n_stopped++;
                continue;
            }
            read_thread_stat(p->pid, t);
            if (t->state == 'Z' || t->state == 'X') {
                snprintf(t->note, sizeof(t->note), "exited before it stopped");
                n_gone++;
            }
        }
        if (n_stopped + n_gone < n_seized)
            usleep(500);
    }
    return n_seized;
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

static void
capture_one(struct xmp_stack_proc *p, int64_t deadline_ns)
{
    Dwfl_Callbacks callbacks = {0}; /* dwfl's, until dwfl_end */
    Dwfl *dwfl = NULL;
    bool *seized = NULL, *stopped = NULL;
    size_t n_seized = 0;

    read_proc_comm(p);
    if (list_threads(p) < 0) {
        snprintf(p->error, sizeof(p->error), "list the threads: %s", strerror(errno));
        return;
    }
    for (size_t i = 0; i < p->n_threads; i++) {
        read_thread_stat(p->pid, &p->threads[i]);
        if (!read_thread_kernel(p->pid, &p->threads[i]) && p->error[0] == '\0')
            snprintf(p->error, sizeof(p->error),
                     "no kernel stacks: /proc/PID/stack needs CAP_SYS_ADMIN, which xmprun has not "
                     "here (the rest is read)");
        p->threads[i].native = calloc(XMP_STACKS_MAX_FRAMES, sizeof(struct xmp_stack_frame));
    }
    seized = calloc(p->n_threads, sizeof(bool));
    stopped = calloc(p->n_threads, sizeof(bool));
    /* libdw is loaded (once: milliseconds, seconds from a cold disk under load) before the
     * worker is stopped, not while it waits. */
    if (seized == NULL || stopped == NULL || !xmp_stacks_dw_load(p->error, sizeof(p->error)))
        goto out;
    n_seized = stop_threads(p, seized, stopped, deadline_ns);
    if (n_seized == 0) {
        snprintf(p->error, sizeof(p->error), "no thread could be stopped to read its stack");
        goto out;
    }
    /* libdw's, loaded now. Separate debug info by build id on this machine only
     * (/usr/lib/debug/.build-id, where -dbgsym packages put it): the standard lookup falls back
     * to debuginfod, which loads libcurl and its TLS stack into xmprun (about 30 libraries, twice
     * a capture's time) even with no server set, and would download within a 1 s budget. */
    callbacks.find_elf = dwfl_linux_proc_find_elf;
    callbacks.find_debuginfo = dwfl_build_id_find_debuginfo;
    dwfl = dwfl_begin(&callbacks);
    if (dwfl == NULL || dwfl_linux_proc_report(dwfl, p->pid) != 0 ||
        dwfl_report_end(dwfl, NULL, NULL) != 0 || dwfl_linux_proc_attach(dwfl, p->pid, true) != 0) {
        snprintf(p->error, sizeof(p->error), "read the modules: %s", dwfl_errmsg(-1));
        goto out;
    }
    /* The Python frames first: they say most, and cost little next to unwinding (which reads
     * each module's call frame information) when the budget is tight (a slow machine). */
    xmp_stacks_python(dwfl, p, deadline_ns);
    for (size_t i = 0; i < p->n_threads; i++) {
        struct native_walk nw = {dwfl, &p->threads[i], deadline_ns};
        if (!stopped[i]) {
            if (seized[i])
                snprintf(p->threads[i].note, sizeof(p->threads[i].note),
                         "did not stop within the budget");
            continue;
        }
        if (xmp_stacks_now_ns() > deadline_ns) {
            p->truncated = true;
            break;
        }
        if (p->threads[i].native != NULL &&
            dwfl_getthread_frames(dwfl, p->threads[i].tid, on_frame, &nw) != 0 &&
            p->threads[i].n_native == 0)
            snprintf(p->threads[i].note, sizeof(p->threads[i].note), "unwind: %s", dwfl_errmsg(-1));
    }
    if (xmp_stacks_now_ns() > deadline_ns)
        p->truncated = true;
out:
    if (seized != NULL && stopped != NULL && n_seized > 0)
        detach_threads(p, stopped);
    if (dwfl != NULL)
        dwfl_end(dwfl);
    free(seized);
    free(stopped);
}

/* One capture thread's job. The caller gives up on it at the deadline (abandoned); whichever
 * of the two is last frees it. */
struct job {
    struct xmp_stack_proc proc;
    int64_t deadline_ns;
    bool done;
    bool abandoned;
    pthread_mutex_t *lock;
    pthread_cond_t *cond;
    size_t *n_done;
};

static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;

static void *
run_job(void *arg)
{
    struct job *j = arg;
    bool abandoned;

    capture_one(&j->proc, j->deadline_ns);
    pthread_mutex_lock(j->lock);
    j->done = true;
    abandoned = j->abandoned;
    if (!abandoned) {
        (*j->n_done)++;
        pthread_cond_broadcast(j->cond);
    }
    pthread_mutex_unlock(j->lock);
    if (abandoned) {
        xmp_stack_proc_free(&j->proc);
        free(j);
    }
    return NULL;
}

int
xmp_stacks_capture(const pid_t *pids, size_t n, long budget_ms, struct xmp_stacks *out)
{
    pthread_cond_t cond;
    pthread_condattr_t cattr;
    struct job **jobs;
    size_t n_done = 0, n_started = 0;
    int64_t start = xmp_stacks_now_ns();
    /* The threads stop their work at the deadline; the wait allows them a little beyond. */
    int64_t deadline = start + (int64_t)(budget_ms > 100 ? budget_ms - 50 : budget_ms) * 1000000;
    int64_t give_up = start + (int64_t)budget_ms * 1000000;
    struct timespec until;

    out->procs = calloc(n > 0 ? n : 1, sizeof(*out->procs));
    jobs = calloc(n > 0 ? n : 1, sizeof(*jobs));
    if (out->procs == NULL || jobs == NULL) {
        free(out->procs);
        free(jobs);
        out->procs = NULL;
        errno = ENOMEM;
        return -1;
    }
    out->n = n;
    pthread_condattr_init(&cattr);
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    pthread_cond_init(&cond, &cattr);
    pthread_condattr_destroy(&cattr);
    for (size_t i = 0; i < n; i++) {
        pthread_t th;
        pthread_attr_t attr;
        out->procs[i].pid = pids[i];
        jobs[i] = calloc(1, sizeof(**jobs));
        if (jobs[i] == NULL)
            continue;
        *jobs[i] = (struct job){.proc = {.pid = pids[i]},
                                .deadline_ns = deadline,
                                .lock = &shared_lock,
                                .cond = &cond,
                                .n_done = &n_done};
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        /* Not the default 8 MiB: glibc keeps 40 MiB of stacks for reuse and unmaps the rest as
         * the threads end, each unmap a TLB shootdown on every CPU xmprun runs on. */
        pthread_attr_setstacksize(&attr, CAPTURE_STACK_SIZE);
        if (pthread_create(&th, &attr, run_job, jobs[i]) != 0) {
            free(jobs[i]);
            jobs[i] = NULL;
        } else {
            n_started++;
        }
        pthread_attr_destroy(&attr);
    }
    until.tv_sec = give_up / 1000000000;
    until.tv_nsec = give_up % 1000000000;
    pthread_mutex_lock(&shared_lock);
    while (n_done < n_started && pthread_cond_timedwait(&cond, &shared_lock, &until) != ETIMEDOUT)
        ;
    for (size_t i = 0; i < n; i++) {
        struct xmp_stack_proc *p = &out->procs[i];
        if (jobs[i] == NULL) {
            snprintf(p->error, sizeof(p->error), "could not start its capture");
        } else if (jobs[i]->done) {
            *p = jobs[i]->proc;
            free(jobs[i]);
        } else {
            /* Its thread frees it when it ends. */
            jobs[i]->abandoned = true;
            read_proc_comm(p);
            p->truncated = true;
            snprintf(p->error, sizeof(p->error), "not read within the %ld ms budget", budget_ms);
        }
    }
    pthread_mutex_unlock(&shared_lock);
    /* An abandoned job still signals cond under the lock, never after it is destroyed: it
     * only broadcasts when not abandoned. */
    pthread_cond_destroy(&cond);
    free(jobs);
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
