/* Prepares the job's isolation in the parent (see isolation.h): everything that allocates or
 * reads the user database happens here, once, so the child-side xmp_confine_apply needs
 * neither. */
#define _GNU_SOURCE
#include "runner/plan/isolation.h"

#include "isolate/cleanup.h"
#include "runner/plan/plan.h"
#include "runner/util/strv.h"

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const int rlimit_resources[XMP_RLIMIT_N] = {RLIMIT_NOFILE, RLIMIT_MEMLOCK, RLIMIT_CORE,
                                                   RLIMIT_STACK, RLIMIT_NPROC};

static bool
parse_id(const char *text, unsigned long *out)
{
    char *end;

    if (text[0] < '0' || text[0] > '9')
        return false;
    errno = 0;
    *out = strtoul(text, &end, 10);
    return errno == 0 && *end == '\0' && *out < UINT_MAX;
}

int
xmp_isolation_resolve_user(const char *text, struct xmp_isolation *iso, struct xmp_error *err)
{
    cleanup_free char *copy = strdup(text);
    char *group = copy != NULL ? strchr(copy, ':') : NULL;
    struct passwd *pw = NULL;
    unsigned long id;
    gid_t gid;

    if (copy == NULL)
        return xmp_error_set(err, ENOMEM, "isolation.user");
    if (group != NULL)
        *group++ = '\0';
    errno = 0;
    if (parse_id(copy, &id)) {
        pw = getpwuid((uid_t)id);
        iso->confine.uid = (uid_t)id;
    } else {
        pw = getpwnam(copy);
        if (pw == NULL)
            return xmp_error_set(err, errno != ENOENT ? errno : 0,
                                 "isolation.user: no user named `%s` on this host", copy);
        iso->confine.uid = pw->pw_uid;
    }
    if (group != NULL && group[0] != '\0') {
        if (parse_id(group, &id)) {
            gid = (gid_t)id;
        } else {
            struct group *gr = getgrnam(group);
            if (gr == NULL)
                return xmp_error_set(err, 0, "isolation.user: no group named `%s` on this host",
                                     group);
            gid = gr->gr_gid;
        }
    } else if (pw != NULL) {
        gid = pw->pw_gid;
    } else {
        /* A bare uid without an entry (a container's arbitrary uid, as OpenShift assigns):
         * its group is the same number, as Docker's --user 1234 does. */
        gid = (gid_t)iso->confine.uid;
    }
    iso->confine.gid = gid;

    /* Supplementary groups from the user database (as login does with initgroups), plus the
     * primary group; without an entry, just the primary group. */
    int n = 32;
    for (;;) {
        gid_t *groups = calloc((size_t)n, sizeof(gid_t));
        int got = n;
        if (groups == NULL)
            return xmp_error_set(err, ENOMEM, "isolation.user: groups");
        if (pw == NULL) {
            groups[0] = gid;
            got = 1;
        } else if (getgrouplist(pw->pw_name, gid, groups, &got) < 0) {
            free(groups);
            if (got <= n || n > 65536)
                return xmp_error_set(err, 0, "isolation.user: cannot list the groups of `%s`",
                                     pw->pw_name);
            n = got;
            continue;
        }
        free(iso->groups);
        iso->groups = groups;
        iso->confine.groups = groups;
        iso->confine.n_groups = (size_t)got;
        break;
    }
    if (pw != NULL) {
        iso->user = strdup(pw->pw_name);
        iso->home = strdup(pw->pw_dir);
        if (iso->user == NULL || iso->home == NULL)
            return xmp_error_set(err, ENOMEM, "isolation.user");
    }
    iso->confine.change_user = true;
    return 0;
}

int
xmp_isolation_setup(const struct xmp_spec *spec, struct xmp_isolation *iso, struct xmp_error *err)
{
    memset(iso, 0, sizeof(*iso));
    iso->confine.no_new_privs = spec->no_new_privs;
    for (size_t i = 0; i < XMP_RLIMIT_N; i++) {
        if (!spec->worker.rlimit_set[i])
            continue;
        struct xmp_confine_rlimit *r = &iso->confine.rlimits[iso->confine.n_rlimits++];
        r->resource = rlimit_resources[i];
        r->name = xmp_rlimit_names[i];
        r->limit.rlim_cur = r->limit.rlim_max = (rlim_t)spec->worker.rlimit[i];
    }

    if (spec->user != NULL) {
        /* Changing user needs CAP_SETUID and CAP_SETGID; only root has them in practice, and a
         * silent run as xmprun's own user would defeat the point of asking. */
        if (geteuid() != 0)
            return xmp_error_set(err, 0,
                                 "isolation.user: running workers as `%s` needs xmprun to run "
                                 "as root (it runs as uid %u); remove isolation.user or start "
                                 "xmprun as root",
                                 spec->user, (unsigned)geteuid());
        if (xmp_isolation_resolve_user(spec->user, iso, err) < 0)
            return -1;
    }

    switch (spec->seccomp) {
    case XMP_SECCOMP_OFF:
        return 0;
    case XMP_SECCOMP_DEFAULT:
        if (xmp_seccomp_build_builtin(XMP_SCMP_DEFAULT, &iso->filter, err) < 0)
            return xmp_error_wrap(err, "isolation.seccomp: default");
        break;
    case XMP_SECCOMP_STRICT:
        if (xmp_seccomp_build_builtin(XMP_SCMP_STRICT, &iso->filter, err) < 0)
            return xmp_error_wrap(err, "isolation.seccomp: strict");
        break;
    case XMP_SECCOMP_PROFILE:
        if (xmp_seccomp_build_profile(&spec->seccomp_rules, &iso->filter, err) < 0)
            return xmp_error_wrap(err, "isolation.seccomp: %s", spec->seccomp_profile);
        break;
    }
    iso->confine.seccomp = &iso->filter;
    /* Every filter can kill (a call through the i386 or x32 ABI does, under any profile). */
    iso->kill_label = spec->seccomp == XMP_SECCOMP_DEFAULT  ? "default"
                      : spec->seccomp == XMP_SECCOMP_STRICT ? "strict"
                                                            : spec->seccomp_profile;
    return 0;
}

void
xmp_isolation_free(struct xmp_isolation *iso)
{
    xmp_seccomp_filter_free(&iso->filter);
    free(iso->groups);
    free(iso->user);
    free(iso->home);
    memset(iso, 0, sizeof(*iso));
}

static bool
spec_sets(const struct xmp_spec *spec, const char *name)
{
    for (size_t i = 0; i < spec->env_len; i++)
        if (strcmp(spec->env[i].name, name) == 0)
            return true;
    return false;
}

char **
xmp_isolation_environ(const struct xmp_isolation *iso, const struct xmp_spec *spec, char **env)
{
    const char *names[] = {"HOME", "USER", "LOGNAME"};
    const char *values[] = {iso->home, iso->user, iso->user};

    if (!iso->confine.change_user)
        return env;
    for (size_t k = 0; k < 3; k++)
        if (values[k] != NULL && !spec_sets(spec, names[k]))
            env = xmp_strv_setenv(env, names[k], values[k]);
    return env;
}
