/* Running a job: host discovery, plan, cgroups, spawning, the supervision event loop, restarts,
 * cleanup and the exit report. The entry points runner/main.c calls. */
#ifndef XMP_SUPERVISE_H
#define XMP_SUPERVISE_H

#include "runner/run/supervisor.h"

/* Runs the job end to end and returns xmprun's exit status (SPEC.md section 5): 0, the root
 * cause's exit code, 128+n, 124, 130/143, or 125 when the job could not be set up, in which case
 * err says why (for the caller to print; it is in the report too). Writes the report on every
 * path. Never calls exit(). */
int xmp_job_run(const struct xmp_spec *spec, const struct xmp_run_options *opts,
                struct xmp_error *err);

/* `xmprun gc`: kills processes and removes cgroups left by an xmprun that was SIGKILLed. Returns
 * the number of jobs cleaned up, or -1 when something could not be removed. */
int xmp_job_gc(const struct xmp_run_options *opts, struct xmp_error *err);

#endif
