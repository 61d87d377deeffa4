/* xmprun's client library: the start: fork zygote's side (fork every planned worker into its own
 * cgroups from a preloaded process) and the job-wide serial lock. One include, one link flag:
 *
 *     #include <xmprun.h>          cc zygote.c -lxmprun
 *
 * A C zygote preloads, then calls xmprun_spawn(fn, arg): each worker runs fn(rank, arg) and
 * exits with its return value. Language bindings (the Python package) use the step functions. */
#ifndef XMPRUN_H
#define XMPRUN_H

#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Why the last call failed (thread-local; "" when none did). */
const char *xmprun_last_error(void);

/* In the zygote: forks every worker xmprun planned, each into its own cgroups, with the worker's
 * environment (RANK, LOCAL_RANK, ...) in environ, and runs fn(rank, arg) there; the worker exits
 * with what fn returns. Returns in the zygote when xmprun says the job is over (restarts re-fork
 * from this same process): 0 when every worker succeeded, 1 when the job failed, -1 on an error
 * (xmprun_last_error). Call it once. */
int xmprun_spawn(int (*fn)(int rank, void *arg), void *arg);

/* Step functions (what xmprun_spawn does), for bindings that must run hooks around the fork. */

/* Connects to xmprun (XMPRUN_ZYGOTE_FD) and says the zygote is ready. Returns the number of
 * workers on this node, -1 on an error (not started by a start: fork xmprun, called twice). */
int xmprun_zygote_open(void);
/* Tells xmprun why this zygote will not fork its workers (a bad nprocs, CUDA initialised), so
 * that the report's root cause says it; the caller then exits non-zero. */
void xmprun_zygote_abort(const char *why);
/* Waits for xmprun's next instruction: 1 a worker to fork (its rank in *rank), 0 the job is over
 * and succeeded, 2 it is over and failed, 3 a signal interrupted the wait (call again), -1 an
 * error. */
int xmprun_zygote_next(int *rank);
/* Forks the worker announced by xmprun_zygote_next. In the zygote returns the worker's pid (>0)
 * or -1; in the worker returns 0 once it is in its cgroups with its isolation, stdio and
 * environment applied (on a setup failure the worker exits 125 and xmprun reports why). */
pid_t xmprun_zygote_fork(void);
/* In a forked worker: its environment as NUL-terminated "NAME=value" strings, *len bytes. */
const char *xmprun_worker_environ(size_t *len);

/* The job-wide serial lock (one per job and node, exec and fork mode): blocks until this process
 * holds it. The kernel releases it when its holder dies. 0, or -1 (xmprun_last_error). Outside
 * xmprun (no XMPRUN_SERIAL_LOCK) it is a no-op. */
int xmprun_serial_lock(void);
int xmprun_serial_unlock(void);

#ifdef __cplusplus
}
#endif

#endif
