/* The child-side confinement of a worker, in the order the kernel needs: limits while still
 * privileged (raising a hard limit needs CAP_SYS_RESOURCE), then the user drop, then
 * no_new_privs, then seccomp last, so that the filter need not allow the calls before it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "isolate/confine.h"

#include <errno.h>
#include <grp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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

/* The packed form: this header, then the groups, then the filter's instructions. */
#define PACK_MAGIC 0x786d7063U /* "xmpc" */
struct packed {
    uint32_t magic;
    uint32_t n_rlimits;
    struct {
        int32_t resource;
        uint64_t cur, max;
    } rlimits[XMP_CONFINE_MAX_RLIMITS];
    uint32_t change_user, uid, gid, n_groups;
    uint32_t no_new_privs;
    uint32_t filter_len; /* instructions; 0: no filter */
};

static const char *
rlimit_name(int resource)
{
    switch (resource) {
    case RLIMIT_NOFILE:
        return "nofile";
    case RLIMIT_MEMLOCK:
        return "memlock";
    case RLIMIT_CORE:
        return "core";
    case RLIMIT_STACK:
        return "stack";
    case RLIMIT_NPROC:
        return "nproc";
    default:
        return "rlimit";
    }
}

int
xmp_confine_pack(const struct xmp_confine *c, void **buf, size_t *len, struct xmp_error *err)
{
    struct packed h = {.magic = PACK_MAGIC};
    size_t groups = c->n_groups * sizeof(gid_t);
    size_t insns = c->seccomp != NULL ? (size_t)c->seccomp->len * 8 : 0;
    char *out;

    h.n_rlimits = (uint32_t)c->n_rlimits;
    for (size_t i = 0; i < c->n_rlimits && i < XMP_CONFINE_MAX_RLIMITS; i++) {
        h.rlimits[i].resource = c->rlimits[i].resource;
        h.rlimits[i].cur = c->rlimits[i].limit.rlim_cur;
        h.rlimits[i].max = c->rlimits[i].limit.rlim_max;
    }
    h.change_user = c->change_user;
    h.uid = c->uid;
    h.gid = c->gid;
    h.n_groups = (uint32_t)c->n_groups;
    h.no_new_privs = c->no_new_privs;
    h.filter_len = c->seccomp != NULL ? c->seccomp->len : 0;
    out = malloc(sizeof(h) + groups + insns);
    if (out == NULL)
        return xmp_error_set(err, ENOMEM, "confine: pack");
    memcpy(out, &h, sizeof(h));
    if (groups > 0)
        memcpy(out + sizeof(h), c->groups, groups);
    if (insns > 0)
        memcpy(out + sizeof(h) + groups, c->seccomp->insns, insns);
    *buf = out;
    *len = sizeof(h) + groups + insns;
    return 0;
}

int
xmp_confine_unpack(const void *buf, size_t len, struct xmp_confine *out,
                   struct xmp_scmp_filter *storage, struct xmp_error *err)
{
    struct packed h;
    const char *p = buf;

    memset(out, 0, sizeof(*out));
    if (len < sizeof(h))
        return xmp_error_set(err, EINVAL, "confine: unpack: %zu bytes is too short", len);
    memcpy(&h, p, sizeof(h));
    if (h.magic != PACK_MAGIC || h.n_rlimits > XMP_CONFINE_MAX_RLIMITS || h.n_groups > 65536 ||
        len != sizeof(h) + (size_t)h.n_groups * sizeof(gid_t) + (size_t)h.filter_len * 8)
        return xmp_error_set(err, EINVAL, "confine: unpack: not a packed confinement");
    out->n_rlimits = h.n_rlimits;
    for (size_t i = 0; i < h.n_rlimits; i++) {
        out->rlimits[i].resource = h.rlimits[i].resource;
        out->rlimits[i].name = rlimit_name(h.rlimits[i].resource);
        out->rlimits[i].limit.rlim_cur = (rlim_t)h.rlimits[i].cur;
        out->rlimits[i].limit.rlim_max = (rlim_t)h.rlimits[i].max;
    }
    out->change_user = h.change_user != 0;
    out->uid = h.uid;
    out->gid = h.gid;
    out->n_groups = h.n_groups;
    out->groups = h.n_groups > 0 ? (const gid_t *)(const void *)(p + sizeof(h)) : NULL;
    out->no_new_privs = h.no_new_privs != 0;
    if (h.filter_len > 0) {
        storage->insns = (void *)(uintptr_t)(p + sizeof(h) + (size_t)h.n_groups * sizeof(gid_t));
        storage->len = (unsigned short)h.filter_len;
        out->seccomp = storage;
    }
    return 0;
}
