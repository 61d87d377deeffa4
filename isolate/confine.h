/* Everything a worker does to confine itself before it runs the user's code: resource limits,
 * the drop to another user, no_new_privs and the seccomp filter, in that order, in one call.
 * The exec path (runner/run/spawn.c) and the fork-mode zygote's children both call it after fork,
 * so it allocates nothing and takes only plain values prepared by the parent. */
#ifndef XMP_CONFINE_H
#define XMP_CONFINE_H

#include "isolate/error.h"
#include "isolate/seccomp.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

#define XMP_CONFINE_MAX_RLIMITS 8

struct xmp_confine_rlimit {
    int resource;     /* RLIMIT_NOFILE, ... */
    const char *name; /* "nofile", for the error message */
    struct rlimit limit;
};

struct xmp_confine {
    struct xmp_confine_rlimit rlimits[XMP_CONFINE_MAX_RLIMITS];
    size_t n_rlimits;
    bool change_user; /* setgroups + setresgid + setresuid (needs root) */
    uid_t uid;
    gid_t gid;
    const gid_t *groups; /* supplementary groups */
    size_t n_groups;
    bool no_new_privs;
    const struct xmp_scmp_filter *seccomp; /* NULL: no filter */
};

/* Applies c to the calling process. Async-signal-safe: for a forked child. On failure err
 * names the step ("setrlimit nofile: Operation not permitted"). */
int xmp_confine_apply(const struct xmp_confine *c, struct xmp_error *err);

/* For a process other than xmprun that forks workers (the fork-mode zygote): c as one flat,
 * pointer-free byte string (malloc'd into *buf), and back. unpack points out's groups and
 * seccomp into buf, which must outlive it; storage holds the filter's header. -1 (EINVAL) on
 * a string that pack did not make. */
int xmp_confine_pack(const struct xmp_confine *c, void **buf, size_t *len, struct xmp_error *err);
int xmp_confine_unpack(const void *buf, size_t len, struct xmp_confine *out,
                       struct xmp_scmp_filter *storage, struct xmp_error *err);

#endif
