/* See thread.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "isolate/thread.h"

#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

/* Pinned only to start elsewhere: a helper that sleeps and wakes (the cgroup remover) must not
 * stay on a CPU that the supervisor moves to later, where it would wait for the supervisor to
 * block (measured: 4 ms behind it at a failed job's end). */
static void *
trampoline(void *arg)
{
    struct xmp_thread *t = arg;

    sched_setaffinity(0, sizeof(t->allowed), &t->allowed);
    return t->fn(t->arg);
}

bool
xmp_thread_start(struct xmp_thread *t, void *(*fn)(void *), void *arg, size_t stack_size)
{
    pthread_attr_t attr;
    cpu_set_t other;
    sigset_t all, old;
    size_t page = (size_t)getpagesize();
    int here = sched_getcpu();

    *t = (struct xmp_thread){.fn = fn, .arg = arg};
    /* The kernel would start it on this CPU, where it would wait for this thread to block (the
     * load balancer moves it only later); on a single CPU it could only take turns. */
    CPU_ZERO(&other);
    if (sched_getaffinity(0, sizeof(t->allowed), &t->allowed) == 0)
        for (int cpu = 0; cpu < CPU_SETSIZE && CPU_COUNT(&other) == 0; cpu++)
            if (cpu != here && CPU_ISSET(cpu, &t->allowed))
                CPU_SET(cpu, &other);
    if (CPU_COUNT(&other) == 0)
        return false;
    /* A guard page below the stack, as glibc's own stacks have. */
    t->stack_size = stack_size + page;
    t->stack = mmap(NULL, t->stack_size, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (t->stack == MAP_FAILED || mprotect(t->stack, page, PROT_NONE) < 0) {
        if (t->stack != MAP_FAILED)
            munmap(t->stack, t->stack_size);
        t->stack = NULL;
        return false;
    }
    pthread_attr_init(&attr);
    pthread_attr_setstack(&attr, (char *)t->stack + page, stack_size);
    pthread_attr_setaffinity_np(&attr, sizeof(other), &other);
    /* Signals are the supervisor's (a signalfd on its own thread): none may land here. */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    t->started = pthread_create(&t->thread, &attr, trampoline, t) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (!t->started) {
        munmap(t->stack, t->stack_size);
        t->stack = NULL;
    }
    return t->started;
}

void
xmp_thread_join(struct xmp_thread *t)
{
    if (t->started)
        pthread_join(t->thread, NULL);
    t->started = false;
    if (t->stack != NULL)
        munmap(t->stack, t->stack_size);
    t->stack = NULL;
}
