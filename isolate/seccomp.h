/* seccomp filters for workers (SPEC.md section 7): the built-in `default` (Docker's default
 * profile) and `strict` (an allowlist that kills), or a profile of plain rules, compiled with
 * libseccomp into classic BPF (the built-in ones when xmprun is built, a profile once per job in
 * the parent), and shortened (isolate/seccomp_bpf.c). A worker loads the ready program with one
 * seccomp() call, which allocates nothing and is safe in a forked child. Every filter kills a
 * process that calls through another ABI of the host (i386, x32). */
#ifndef XMP_SECCOMP_H
#define XMP_SECCOMP_H

#include "isolate/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum xmp_scmp_action {
    XMP_SCMP_ALLOW = 0,
    XMP_SCMP_ERRNO, /* fail the call with errnum */
    XMP_SCMP_KILL,  /* kill the whole process (SIGSYS) */
    XMP_SCMP_LOG,   /* allow, and log it to the kernel's audit log */
};

struct xmp_scmp_rule {
    int nr; /* libseccomp's number of the syscall (xmp_seccomp_resolve) */
    enum xmp_scmp_action action;
    int errnum; /* XMP_SCMP_ERRNO */
};

/* A user's profile, already validated (names resolved). */
struct xmp_scmp_profile {
    enum xmp_scmp_action default_action;
    int default_errnum;
    struct xmp_scmp_rule *rules;
    size_t n_rules;
};

enum xmp_scmp_builtin { XMP_SCMP_DEFAULT = 0, XMP_SCMP_STRICT };

/* A compiled filter: classic BPF instructions (struct sock_filter), ready for seccomp(). */
struct xmp_scmp_filter {
    void *insns;
    unsigned short len;
};

/* A built-in profile, compiled when xmprun was built (isolate/tools/seccomp_gen.c): a copy of
 * what xmp_seccomp_compile_builtin gives, without the millisecond it takes. */
int xmp_seccomp_build_builtin(enum xmp_scmp_builtin which, struct xmp_scmp_filter *out,
                              struct xmp_error *err);
/* Compiles a built-in profile with libseccomp (for the build, and for tests that compare). */
int xmp_seccomp_compile_builtin(enum xmp_scmp_builtin which, struct xmp_scmp_filter *out,
                                struct xmp_error *err);
/* The built-in profiles as the build compiled them, by enum xmp_scmp_builtin (generated). */
struct sock_filter;
struct xmp_scmp_prog {
    const struct sock_filter *insns;
    unsigned short len;
};
extern const struct xmp_scmp_prog xmp_seccomp_builtins[2];
int xmp_seccomp_build_profile(const struct xmp_scmp_profile *p, struct xmp_scmp_filter *out,
                              struct xmp_error *err);
void xmp_seccomp_filter_free(struct xmp_scmp_filter *f);

/* A call that a profile decides by its number alone, and the action (SECCOMP_RET_*) it gets. */
struct xmp_bpf_call {
    uint32_t nr, action;
};
/* The program a worker loads (isolate/seccomp_bpf.c): `head`, libseccomp's program for the ABI
 * and the rules that compare arguments, compiled with `sentinel` as its default action, whose
 * every return of the sentinel becomes a binary search over the runs of consecutive numbers in
 * `calls` (sorted in place), `def` for the numbers none names. */
int xmp_bpf_compose(const struct xmp_scmp_filter *head, uint32_t sentinel,
                    struct xmp_bpf_call *calls, size_t n, uint32_t def, struct xmp_scmp_filter *out,
                    struct xmp_error *err);
/* Whether two programs give every seccomp_data the same answer, found by running both on every
 * input at which a comparison of either can change its outcome (arguments varied one at a
 * time). 0 when they agree; 1 with the first input where they differ described in why; -1
 * with why when that cannot be told (an instruction the check does not know, no memory). */
int xmp_seccomp_differ(const struct xmp_scmp_filter *a, const struct xmp_scmp_filter *b, char *why,
                       size_t size);

/* Installs the filter on the calling thread. Async-signal-safe (one seccomp() call); needs
 * no_new_privs or CAP_SYS_ADMIN. */
int xmp_seccomp_load(const struct xmp_scmp_filter *f, struct xmp_error *err);

/* libseccomp's number for a syscall name on any of the host's ABIs, or -1 when no ABI knows it. */
int xmp_seccomp_resolve(const char *name);
/* Every syscall name of the host's native ABI, for "did you mean" hints: a NULL-terminated
 * array, its names and itself malloc'd (xmp_seccomp_names_free). NULL when out of memory. */
char **xmp_seccomp_names(size_t *n);
void xmp_seccomp_names_free(char **names);
/* The name of syscall nr of the ABI with audit arch `audit_arch` (AUDIT_ARCH_*, as the kernel's
 * audit record gives it) into buf. Returns 0, or -1 when the number is unknown. */
int xmp_seccomp_name_of(unsigned int audit_arch, int nr, char *buf, size_t size);

/* The syscall that made a seccomp filter kill process pid, from the kernel's audit record of the
 * kill (type=1326, in /dev/kmsg when no audit daemon takes it). Waits up to 200 ms for the
 * record, which the kernel's audit thread logs shortly after the kill. Returns 0 with the name
 * in buf, or -1 when no record is readable (no root, audit off, rate-limited). */
int xmp_seccomp_killed_by(pid_t pid, char *buf, size_t size);

#endif
