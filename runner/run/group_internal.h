/* Internal to the group (group.c: the event loop and its consoles; group_spawn.c: starting each
 * worker; group_stop.c: the stop sequence and outside signals; group_reap.c: a worker's end and
 * its accounting): what they call of each other. */
#ifndef XMP_GROUP_INTERNAL_H
#define XMP_GROUP_INTERNAL_H

#include "runner/run/group.h"

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/wait.h>

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

/* One read per stream per wakeup is capped, so that a worker flooding its output cannot starve
 * the signalfd, the other workers or the deadline. */
#define READ_BUDGET (64 * 1024)
/* At the end of a run, what is still buffered in a pipe is drained up to this much. */
#define FINAL_DRAIN (4 * 1024 * 1024)
/* A TORCHELASTIC_ERROR_FILE is read up to this much: a traceback fits, and the report of a
 * worker that writes gigabytes there stays small. */
#define ERROR_FILE_MAX (64 * 1024)

void xmp_grp_arm_timer(struct xmp_supervisor *sv);
/* Records where every running worker that has no stacks yet is (bounded by
 * XMP_STACKS_BUDGET_MS, all in parallel) into its report: called before xmprun signals a worker
 * that did not end by itself (xmp_grp_stop_all, the first outside signal; the hang watchdog). */
void xmp_grp_capture_stacks(struct xmp_supervisor *sv);
bool xmp_grp_await_outside_signal(struct xmp_supervisor *sv);
void xmp_grp_check_log(struct xmp_worker *w, struct xmp_stream *s);
void xmp_grp_close_stream(struct xmp_supervisor *sv, struct xmp_stream *s);
bool xmp_grp_died_of_outside_stop(const struct xmp_worker *w);
int xmp_grp_ep_add(struct xmp_supervisor *sv, int fd, enum xmp_ev_kind kind, size_t index);
int xmp_grp_ep_ctl(struct xmp_supervisor *sv, int op, int fd, uint32_t events,
                   enum xmp_ev_kind kind, size_t index);
void xmp_grp_ep_del(struct xmp_supervisor *sv, int fd);
/* An event source's end: out of the epoll set, closed, and *fd -1 (nothing when it is -1). */
void xmp_grp_ep_close(struct xmp_supervisor *sv, int *fd);
void xmp_grp_finish_worker(struct xmp_supervisor *sv, struct xmp_worker *w, const siginfo_t *si,
                           const struct rusage *ru);
bool xmp_grp_is_stop_signal(int sig);
void xmp_grp_kill_all_now(struct xmp_supervisor *sv);
void xmp_grp_on_interrupt(struct xmp_supervisor *sv, int sig);
void xmp_grp_on_stream(struct xmp_supervisor *sv, struct xmp_worker *w, struct xmp_stream *s);
/* Reads the zygote's stderr (up to budget bytes), closing it at EOF. */
void xmp_grp_on_zygote_stderr(struct xmp_supervisor *sv, size_t budget);
void xmp_grp_on_worker_failure(struct xmp_supervisor *sv);
const char *xmp_grp_oom_at_name(const struct xmp_supervisor *sv, const struct xmp_worker *w,
                                const struct xmp_cgroup_oom_site *site);
void xmp_grp_read_exec_status(struct xmp_supervisor *sv, struct xmp_worker *w, bool block);
void xmp_grp_reap_children(struct xmp_supervisor *sv);
void xmp_grp_spawn_worker(struct xmp_supervisor *sv, struct xmp_worker *w, size_t index);
void xmp_grp_start_worker(struct xmp_supervisor *sv, struct xmp_worker *w);
void xmp_grp_stop_all(struct xmp_supervisor *sv, enum xmp_stop_reason reason, int sig);
void xmp_grp_try_reap(struct xmp_supervisor *sv, struct xmp_worker *w);
/* The worker has ended (reaped, or given up on as unkillable): it is no longer watched nor
 * counted as running. The one place n_running goes down. */
void xmp_grp_worker_gone(struct xmp_supervisor *sv, struct xmp_worker *w);
void xmp_grp_try_reap_zygote(struct xmp_supervisor *sv);
int xmp_grp_wait_worker(const struct xmp_worker *w, int options, siginfo_t *si, struct rusage *ru);
char **xmp_grp_worker_environ(struct xmp_supervisor *sv, const struct xmp_plan_worker *pw);

/* group_watch.c: the hang watchdog (armed at each run's start, checked on the timer, fed by
 * the output pipes: before is the stream's n_read before the read) and the give-up on workers
 * that SIGKILL does not end. */
void xmp_grp_watch_start(struct xmp_supervisor *sv);
void xmp_grp_watch_output(struct xmp_supervisor *sv, struct xmp_worker *w, uint64_t before,
                          const struct xmp_stream *s);
void xmp_grp_watch_tick(struct xmp_supervisor *sv, int64_t now);
void xmp_grp_give_up_unkillable(struct xmp_supervisor *sv);

/* group_kmsg.c: the NVIDIA driver's Xid events for the job's GPUs, from the kernel's log. */
void xmp_grp_kmsg_open(struct xmp_supervisor *sv);
void xmp_grp_kmsg_read(struct xmp_supervisor *sv);
void xmp_grp_kmsg_close(struct xmp_supervisor *sv);

/* group_memwatch.c: the workers' memory, sampled every XMP_MEMWATCH_PERIOD_MS where no cgroup
 * of xmprun's limits it (sv->memwatch). */
void xmp_grp_memwatch_open(struct xmp_supervisor *sv);
void xmp_grp_memwatch_sample(struct xmp_supervisor *sv);
void xmp_grp_memwatch_close(struct xmp_supervisor *sv);

/* group_gpumem.c: the device memory each worker's processes use, from NVML, once a second. */
void xmp_grp_gpumem_open(struct xmp_supervisor *sv);
/* A sample when its time (gpumem_at_ns) has come. */
void xmp_grp_gpumem_sample(struct xmp_supervisor *sv, int64_t now);
void xmp_grp_gpumem_close(struct xmp_supervisor *sv);
/* The running worker using most GPU memory now, into info's gpu_* fields. */
void xmp_grp_gpumem_status(const struct xmp_supervisor *sv, struct xmp_status_info *info);

#endif
