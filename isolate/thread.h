/* A helper thread for work the supervisor hands off while it goes on with its own: started on a
 * CPU other than the caller's (then free to move, as the supervisor is), all signals blocked, on a
 * stack of its own that is unmapped at the join (glibc would keep a cached stack, and the pages it
 * touched resident, for the rest of the job). Where there is no other CPU, or the thread cannot be
 * made, the work runs in line: callers never need a second path. */
#ifndef XMP_THREAD_H
#define XMP_THREAD_H

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>

struct xmp_thread {
    bool started;
    pthread_t thread;
    void *stack;
    size_t stack_size;
    void *(*fn)(void *);
    void *arg;
    cpu_set_t allowed; /* the caller's CPUs, which the thread takes back once it runs */
};

/* Runs fn(arg) on a new thread with a stack of stack_size bytes (plus a guard page), started on
 * another CPU; returns true when it did. t must stay in place until the join. False: nothing was
 * started and fn has not run (the caller decides whether to run it in line). */
bool xmp_thread_start(struct xmp_thread *t, void *(*fn)(void *), void *arg, size_t stack_size);

/* Waits for the thread (if started) and gives its stack back. Safe on one never started. */
void xmp_thread_join(struct xmp_thread *t);

#endif
