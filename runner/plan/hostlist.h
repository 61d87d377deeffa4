/* Slurm's list syntaxes: hostlists ("gpu[01-04,07],login1") and per-node count lists
 * ("2(x3),1"), for the master address, the TPU host list and the allocation checks. */
#ifndef XMP_HOSTLIST_H
#define XMP_HOSTLIST_H

#include "isolate/error.h"

#include <stdbool.h>
#include <stddef.h>

/* Expands a Slurm hostlist ("gpu[01-04,07],login1") into a NULL-terminated vector (free it
 * with xmp_strv_free). */
int xmp_hostlist_expand(const char *text, char ***out, struct xmp_error *err);

/* Node index's count in a Slurm per-node count list ("2(x3),1"), or -1 when the text is not one
 * or has no such node; *max gets the largest count, *uniform whether all nodes have the same. */
long xmp_slurm_count_at(const char *text, size_t index, long *max, bool *uniform);

#endif
