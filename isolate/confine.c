/* The child-side confinement of a worker, in the order the kernel needs: limits while still
 * privileged (raising a hard limit needs CAP_SYS_RESOURCE), then the user drop, then
 * no_new_privs, then seccomp last, so that the filter need not allow the calls before it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "isolate/confine.h"

#include <errno.h>
#include <grp.h>
#include <sys/prctl.h>
#include <unistd.h>

static int
drop_user(const struct xmp_confine *c, struct xmp_error *err)
{
    /* Groups first: after setresuid the process may no longer change them. */
    if (setgroups(c->n_groups, c->groups) < 0)
        return xmp_error_set(err, errno, "setgroups");
    if (setresgid(c->gid, c->gid, c->gid) < 0)
        return xmp_error_set(err, errno, "setresgid %u", (unsigned)c->gid);
    if (setresuid(c->uid, c->uid, c->uid) < 0)
        return xmp_error_set(err, errno, "setresuid %u", (unsigned)c->uid);
    return 0;
}

int
xmp_confine_apply(const struct xmp_confine *c, struct xmp_error *err)
{
    for (size_t i = 0; i < c->n_rlimits; i++) {
        const struct xmp_confine_rlimit *r = &c->rlimits[i];
        struct rlimit now;
        if (setrlimit(r->resource, &r->limit) == 0)
            continue;
        int saved = errno;
        /* EPERM is a raise above the hard limit without CAP_SYS_RESOURCE (a container's root
         * often lacks it), or nofile above fs.nr_open: say which limit stood in the way. */
        if (saved == EPERM && getrlimit(r->resource, &now) == 0)
            return xmp_error_set(err, saved,
                                 "rlimits.%s: cannot raise it (the hard limit is %llu; raising it "
                                 "needs CAP_SYS_RESOURCE%s)",
                                 r->name, (unsigned long long)now.rlim_max,
                                 r->resource == RLIMIT_NOFILE ? ", and nofile stops at fs.nr_open"
                                                              : "");
        return xmp_error_set(err, saved, "setrlimit %s", r->name);
    }
    /* Without no_new_privs only CAP_SYS_ADMIN may install a filter, which the worker loses with
     * its uid: then the filter goes in first (runc does the same), and the drop's calls must
     * pass it (both built-in profiles allow them). */
    bool filter_first = c->seccomp != NULL && c->change_user && !c->no_new_privs;
    if (filter_first && xmp_seccomp_load(c->seccomp, err) < 0)
        return -1;
    if (c->change_user && drop_user(c, err) < 0)
        return -1;
    if (c->no_new_privs && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return xmp_error_set(err, errno, "prctl(PR_SET_NO_NEW_PRIVS)");
    if (c->seccomp != NULL && !filter_first && xmp_seccomp_load(c->seccomp, err) < 0) {
        if (err->errnum == EACCES)
            xmp_error_wrap(err, "isolation.no_new_privs is false and xmprun lacks "
                                "CAP_SYS_ADMIN");
        return -1;
    }
    return 0;
}
