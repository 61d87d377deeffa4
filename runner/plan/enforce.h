/* How each limit of a plan is kept where xmprun runs (isolation.cgroups: auto): by a cgroup, by
 * xmprun's memory watchdog, by CPU affinity, or not at all, and why; what kind of place gives
 * no writable cgroup, and what fixes a refusal there. The run says what happened (the report's
 * enforcement), `xmprun plan` what will. */
#ifndef XMP_ENFORCE_H
#define XMP_ENFORCE_H

#include "isolate/error.h"
#include "runner/plan/plan.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* How often the memory watchdog samples the workers' memory (runner/run/group_memwatch.c), and
 * how much of one CPU (percent) start: fork's page-table walks may take between the samples. */
#define XMP_MEMWATCH_PERIOD_MS 100
#define XMP_MEMWATCH_MAX_LOAD  5

/* What keeps the limits: the workers' cgroups, the watchdog (no writable cgroup here), or
 * nothing (isolation.cgroups: off, or optional without cgroups). */
enum xmp_enforce_means { XMP_ENFORCE_CGROUPS = 0, XMP_ENFORCE_WATCHDOG, XMP_ENFORCE_NONE };

/* Why the cgroup layer's failure (err) is one this kind of place is known for, in words: a
 * read-only cgroupfs (EROFS: a container's default), or no write access without the kernel's
 * root (a regular user without delegation, a Slurm step, uid 0 in a user namespace). NULL for
 * any other failure (root whose write fails), which isolation.cgroups: auto refuses too. */
const char *xmp_enforce_no_cgroup(const struct xmp_plan *plan, const struct xmp_error *err);

/* Appends to err's message, for a refusal that xmp_enforce_no_cgroup explains, what fixes it in
 * this place (the cluster's Slurm plugin, a delegated scope, ...) and isolation.cgroups: auto. */
void xmp_enforce_advise(const struct xmp_plan *plan, struct xmp_error *err);

/* The enforcement object: for each limit the plan sets, by its spec key, {by, why}: by one of
 * "cgroup", "watchdog", "affinity", "none"; why (null where a cgroup keeps it) names the reason
 * given (why: the place, or what turned cgroups off). device_filter: whether the workers' device
 * filter is there. With say (and the watchdog), the same in one line into say. */
json_t *xmp_enforce_json(const struct xmp_plan *plan, enum xmp_enforce_means means,
                         bool device_filter, const char *why, char *say, size_t say_size);

/* What the run would give, told without making a cgroup (for `xmprun plan`): whether xmprun may
 * write its own cgroup here, or else ask systemd for a scope, and otherwise the place's reason,
 * as the enforcement object above. */
json_t *xmp_enforce_predict(const struct xmp_plan *plan);

#endif
