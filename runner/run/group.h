/* One run of the worker group (group.c): spawning every worker into its cgroup, the event loop
 * over their pidfds, output pipes and xmprun's signals, the stop sequence and each worker's
 * accounting at its end. Called by supervise.c. */
#ifndef XMP_GROUP_H
#define XMP_GROUP_H

#include "runner/run/supervisor.h"

/* Sets up xmprun's stdout and stderr as the workers' consoles (after the epoll fd exists). */
void xmp_group_setup_consoles(struct xmp_supervisor *sv);

/* The console for xmprun's stdout (0) or stderr (1). */
struct xmp_console *xmp_group_console(struct xmp_supervisor *sv, int i);

/* Spawns every worker and supervises them until all are reaped, then kills what they left
 * behind and collects their output tails into sv->report.workers. */
void xmp_group_run(struct xmp_supervisor *sv);

/* Handles the signals that arrived while no worker ran (between a run and a restart). */
void xmp_group_take_signals(struct xmp_supervisor *sv);

/* Kills and reaps every remaining child of xmprun (bounded wait) but keep (0: none), the
 * zygote that outlives a run, and the workers given up on as unkillable. */
void xmp_group_kill_orphans(const struct xmp_supervisor *sv, pid_t keep);

/* start: fork, after the last run: tells the zygote the job is over (ok: it succeeded) and
 * supervises it until it exits. */
void xmp_group_end_zygote(struct xmp_supervisor *sv, bool ok);

#endif
