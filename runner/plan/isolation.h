/* The job's isolation, prepared once in the parent from the spec: the seccomp filter compiled
 * to BPF, the rlimits and the user to run workers as, packed into the plain struct xmp_confine
 * that each worker (exec'd or forked) applies with xmp_confine_apply. */
#ifndef XMP_ISOLATION_H
#define XMP_ISOLATION_H

#include "isolate/confine.h"
#include "isolate/error.h"
#include "isolate/seccomp.h"
#include "runner/spec/spec.h"

#include <stdbool.h>
#include <sys/types.h>

struct xmp_isolation {
    struct xmp_confine confine;
    struct xmp_scmp_filter filter; /* filter.insns NULL: no filter */
    /* The profile's name ("default", "strict", a path) while a filter is on, so that a SIGSYS
     * death is reported as the filter's; NULL without a filter. */
    const char *kill_label;
    gid_t *groups;
    char *user; /* the user's name, or NULL (uid only, or no change) */
    char *home; /* the user's home directory, or NULL */
};

/* Builds everything from the spec. Fails with a message for a user that does not exist, for
 * isolation.user when xmprun is not root, or a filter libseccomp cannot build. */
int xmp_isolation_setup(const struct xmp_spec *spec, struct xmp_isolation *iso,
                        struct xmp_error *err);
void xmp_isolation_free(struct xmp_isolation *iso);

/* Resolves isolation.user: "name", "uid", "name:group" or "uid:gid". Fills uid, gid, the
 * supplementary groups (from the user database when the user has an entry, else just gid),
 * the name and home when known. Exposed for the unit tests. */
int xmp_isolation_resolve_user(const char *text, struct xmp_isolation *iso, struct xmp_error *err);

/* Adds HOME, USER and LOGNAME of the user workers run as to env (a malloc'd NULL-terminated
 * array of malloc'd strings, as xmp_plan_worker_environ returns it), unless the spec's env
 * sets them. Returns the possibly moved array; env on allocation failure. */
char **xmp_isolation_environ(const struct xmp_isolation *iso, const struct xmp_spec *spec,
                             char **env);

#endif
