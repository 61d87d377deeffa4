/* seccomp filters built with libseccomp in the parent and exported as classic BPF, so that a
 * worker (exec'd or forked from a zygote) installs one with a single seccomp() call and no
 * allocation; what the worker loads is libseccomp's program with its per-call tests replaced
 * by a search over runs of numbers (isolate/seccomp_bpf.c), checked against libseccomp's.
 * `default` follows Docker's default profile (github.com/moby/profiles/seccomp v0.2.3 with
 * Docker's default capabilities): an allowlist whose other calls fail with EPERM; `strict` is a
 * narrower allowlist whose other calls kill the worker. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "isolate/seccomp.h"

#include "isolate/cleanup.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Docker's unconditional allowlist (github.com/moby/profiles/seccomp v0.2.3, Docker 29; checked
 * whole against tests/fixtures/seccomp/moby-default-amd64.txt). Names unknown to this libseccomp
 * or absent on an ABI are skipped, as Docker does; such calls then get the default action. */
static const char *const docker_allow[] = {
    "accept", "accept4", "access", "adjtimex", "alarm", "bind", "brk", "cachestat", "capget",
    "capset", "chdir", "chmod", "chown", "chown32", "clock_adjtime", "clock_adjtime64",
    "clock_getres", "clock_getres_time64", "clock_gettime", "clock_gettime64", "clock_nanosleep",
    "clock_nanosleep_time64", "close", "close_range", "connect", "copy_file_range", "creat", "dup",
    "dup2", "dup3", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old", "epoll_pwait",
    "epoll_pwait2", "epoll_wait", "epoll_wait_old", "eventfd", "eventfd2", "execve", "execveat",
    "exit", "exit_group", "faccessat", "faccessat2", "fadvise64", "fadvise64_64", "fallocate",
    "fanotify_mark", "fchdir", "fchmod", "fchmodat", "fchmodat2", "fchown", "fchown32", "fchownat",
    "fcntl", "fcntl64", "fdatasync", "fgetxattr", "flistxattr", "flock", "fork", "fremovexattr",
    "fsetxattr", "fstat", "fstat64", "fstatat64", "fstatfs", "fstatfs64", "fsync", "ftruncate",
    "ftruncate64", "futex", "futex_requeue", "futex_time64", "futex_wait", "futex_waitv",
    "futex_wake", "futimesat", "get_robust_list", "get_thread_area", "getcpu", "getcwd", "getdents",
    "getdents64", "getegid", "getegid32", "geteuid", "geteuid32", "getgid", "getgid32", "getgroups",
    "getgroups32", "getitimer", "getpeername", "getpgid", "getpgrp", "getpid", "getppid",
    "getpriority", "getrandom", "getresgid", "getresgid32", "getresuid", "getresuid32", "getrlimit",
    "getrusage", "getsid", "getsockname", "getsockopt", "gettid", "gettimeofday", "getuid",
    "getuid32", "getxattr", "getxattrat", "inotify_add_watch", "inotify_init", "inotify_init1",
    "inotify_rm_watch", "io_cancel", "io_destroy", "io_getevents", "io_pgetevents",
    "io_pgetevents_time64", "io_setup", "io_submit", "ioctl", "ioprio_get", "ioprio_set", "ipc",
    "kill", "landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self", "lchown",
    "lchown32", "lgetxattr", "link", "linkat", "listen", "listmount", "listxattr", "listxattrat",
    "llistxattr", "_llseek", "lremovexattr", "lseek", "lsetxattr", "lstat", "lstat64", "madvise",
    "map_shadow_stack", "membarrier", "memfd_create", "memfd_secret", "mincore", "mkdir", "mkdirat",
    "mknod", "mknodat", "mlock", "mlock2", "mlockall", "mmap", "mmap2", "mprotect", "mq_getsetattr",
    "mq_notify", "mq_open", "mq_timedreceive", "mq_timedreceive_time64", "mq_timedsend",
    "mq_timedsend_time64", "mq_unlink", "mremap", "mseal", "msgctl", "msgget", "msgrcv", "msgsnd",
    "msync", "munlock", "munlockall", "munmap", "name_to_handle_at", "nanosleep", "newfstatat",
    "_newselect", "open", "openat", "openat2", "pause", "pidfd_open", "pidfd_send_signal", "pipe",
    "pipe2", "pkey_alloc", "pkey_free", "pkey_mprotect", "poll", "ppoll", "ppoll_time64", "prctl",
    "pread64", "preadv", "preadv2", "prlimit64", "process_mrelease", "pselect6", "pselect6_time64",
    "pwrite64", "pwritev", "pwritev2", "read", "readahead", "readlink", "readlinkat", "readv",
    "recv", "recvfrom", "recvmmsg", "recvmmsg_time64", "recvmsg", "remap_file_pages", "removexattr",
    "removexattrat", "rename", "renameat", "renameat2", "restart_syscall", "riscv_hwprobe", "rmdir",
    "rseq", "rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn",
    "rt_sigsuspend", "rt_sigtimedwait", "rt_sigtimedwait_time64", "rt_tgsigqueueinfo",
    "sched_get_priority_max", "sched_get_priority_min", "sched_getaffinity", "sched_getattr",
    "sched_getparam", "sched_getscheduler", "sched_rr_get_interval", "sched_rr_get_interval_time64",
    "sched_setaffinity", "sched_setattr", "sched_setparam", "sched_setscheduler", "sched_yield",
    "seccomp", "select", "semctl", "semget", "semop", "semtimedop", "semtimedop_time64", "send",
    "sendfile", "sendfile64", "sendmmsg", "sendmsg", "sendto", "set_robust_list", "set_thread_area",
    "set_tid_address", "setfsgid", "setfsgid32", "setfsuid", "setfsuid32", "setgid", "setgid32",
    "setgroups", "setgroups32", "setitimer", "setpgid", "setpriority", "setregid", "setregid32",
    "setresgid", "setresgid32", "setresuid", "setresuid32", "setreuid", "setreuid32", "setrlimit",
    "setsid", "setsockopt", "setuid", "setuid32", "setxattr", "setxattrat", "shmat", "shmctl",
    "shmdt", "shmget", "shutdown", "sigaltstack", "signalfd", "signalfd4", "sigprocmask",
    "sigreturn", "socketcall", "socketpair", "splice", "stat", "stat64", "statfs", "statfs64",
    "statmount", "statx", "symlink", "symlinkat", "sync", "sync_file_range", "syncfs", "sysinfo",
    "tee", "tgkill", "time", "timer_create", "timer_delete", "timer_getoverrun", "timer_gettime",
    "timer_gettime64", "timer_settime", "timer_settime64", "timerfd_create", "timerfd_gettime",
    "timerfd_gettime64", "timerfd_settime", "timerfd_settime64", "times", "tkill", "truncate",
    "truncate64", "ugetrlimit", "umask", "uname", "unlink", "unlinkat", "uretprobe", "utime",
    "utimensat", "utimensat_time64", "utimes", "vfork", "vmsplice", "wait4", "waitid", "waitpid",
    "write", "writev",
    /* Docker: minKernel 4.8 (since 4.8 seccomp runs after ptrace's own checks, so a tracer
     * cannot bypass the filter), x86 ABIs only, and CAP_SYS_CHROOT, which is one of Docker's
     * default capabilities. ptrace stays allowed as in Docker: sanitizers (LeakSanitizer
     * attaches to its own threads at exit), crash reporters and debuggers need it, and which
     * processes it reaches is the kernel's ptrace access check (same user, Yama). */
    "process_vm_readv", "process_vm_writev", "ptrace", "arch_prctl", "modify_ldt", "chroot",
    /* Not in Docker's list without CAP_SYS_NICE, allowed here: xmprun places workers on NUMA
     * nodes, and libnuma, OpenMP runtimes and CUDA's pinned allocations set memory policies.
     * They act on the caller's own memory only. */
    "get_mempolicy", "mbind", "set_mempolicy", "set_mempolicy_home_node"};

/* What `strict` leaves out of the list above: calls that reach other processes' memory, make
 * device nodes, change the root, or open kernel interfaces no training job needs. (io_uring is
 * in neither list: Docker's profile dropped it.) */
static const char *const strict_drop[] = {
    "ptrace",     "process_vm_readv", "process_vm_writev", "mknod",
    "mknodat",    "chroot",           "name_to_handle_at", "fanotify_mark",
    "modify_ldt", "remap_file_pages", "memfd_secret",      "vmsplice"};

/* clone() flags that create namespaces (Docker's mask 2114060288). */
#define NS_FLAGS                                                                                   \
    (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |  \
     CLONE_NEWNET)

/* The personality() values Docker allows: the default, its query, and the two flags that
 * programs set for themselves (UNAME26, ADDR_NO_RANDOMIZE is not one of them). */
static const uint64_t docker_personality[] = {0x0, 0x8, 0x20000, 0x20008, 0xffffffff};

#ifndef AF_ALG
#define AF_ALG 38
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

static int
lcerr(struct xmp_error *err, int rc, const char *what)
{
    return xmp_error_set(err, rc < 0 ? -rc : EINVAL, "seccomp: %s", what);
}

static uint32_t
action_of(enum xmp_scmp_action a, int errnum)
{
    switch (a) {
    case XMP_SCMP_ALLOW:
        return SCMP_ACT_ALLOW;
    case XMP_SCMP_ERRNO:
        return SCMP_ACT_ERRNO((uint32_t)errnum);
    case XMP_SCMP_KILL:
        return SCMP_ACT_KILL_PROCESS;
    case XMP_SCMP_LOG:
        return SCMP_ACT_LOG;
    }
    return SCMP_ACT_KILL_PROCESS;
}

/* A filter for the native ABI whose default is `def`. The host's other ABIs (i386 through
 * `int 0x80`, x32 through the x32 bit, on x86-64) are closed: any call through them kills the
 * process (libseccomp's bad-arch action), so a 32-bit call cannot reach what the native rules
 * deny. Docker adds those ABIs with the same rules instead; that triples the filter, and
 * compiling it took 34 ms instead of 1 per job, for 32-bit programs no training job runs. */
static scmp_filter_ctx
new_ctx(uint32_t def, struct xmp_error *err)
{
    scmp_filter_ctx ctx = seccomp_init(def);
    int rc;

    if (ctx == NULL) {
        xmp_error_set(err, ENOMEM, "seccomp: seccomp_init");
        return NULL;
    }
    if ((rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)) < 0)
        goto fail;
    /* A binary tree of syscall numbers instead of a linear list: each call then walks a few
     * dozen instructions of the ~1000 rather than up to all of them. */
    (void)seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
    return ctx;
fail:
    lcerr(err, rc, "set up the filter's ABIs");
    seccomp_release(ctx);
    return NULL;
}

/* A profile being compiled: libseccomp's context of every rule, whose program is the reference
 * that the one a worker loads is checked against; a second of the rules that compare arguments,
 * whose program becomes the head of the loaded one; and the calls decided by number alone,
 * which a binary search over their runs decides there (isolate/seccomp_bpf.c). */
struct builder {
    scmp_filter_ctx all, args;
    uint32_t def;
    struct xmp_bpf_call *calls;
    size_t n, cap;
};

/* The head's answer for the calls it leaves to the search: an action no profile of xmprun's
 * takes. */
#define SENTINEL SCMP_ACT_TRACE(0x7ff7)

static void
builder_release(struct builder *b)
{
    if (b->all != NULL)
        seccomp_release(b->all);
    if (b->args != NULL)
        seccomp_release(b->args);
    free(b->calls);
}
#define cleanup_builder __attribute__((cleanup(builder_release)))

static int
builder_init(struct builder *b, uint32_t def, struct xmp_error *err)
{
    memset(b, 0, sizeof(*b));
    b->def = def;
    if ((b->all = new_ctx(def, err)) == NULL || (b->args = new_ctx(SENTINEL, err)) == NULL)
        return -1;
    return 0;
}

/* Adds a rule; a syscall that none of the filter's ABIs has (-EDOM, -EINVAL for a pseudo
 * number) is skipped, and so is an action equal to the default (-EACCES). */
static int
add_rule(struct builder *b, uint32_t action, int nr, unsigned n_args,
         const struct scmp_arg_cmp *args, const char *what, struct xmp_error *err)
{
    int rc = seccomp_rule_add_array(b->all, action, nr, n_args, args);

    if (rc == -EDOM || rc == -EACCES || (rc == -EINVAL && nr < 0))
        return 0;
    if (rc == 0 && n_args > 0)
        rc = seccomp_rule_add_array(b->args, action, nr, n_args, args);
    if (rc < 0)
        return lcerr(err, rc, what);
    if (n_args > 0 || nr < 0)
        return 0;
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 512;
        struct xmp_bpf_call *c = realloc(b->calls, cap * sizeof(*c));
        if (c == NULL)
            return xmp_error_set(err, ENOMEM, "seccomp: %s", what);
        b->calls = c;
        b->cap = cap;
    }
    b->calls[b->n++] = (struct xmp_bpf_call){(uint32_t)nr, action};
    return 0;
}

static int
add_named(struct builder *b, uint32_t action, const char *name, unsigned n_args,
          const struct scmp_arg_cmp *args, struct xmp_error *err)
{
    int nr = seccomp_syscall_resolve_name(name);

    if (nr == __NR_SCMP_ERROR)
        return 0; /* older libseccomp: as Docker, a name it does not know is skipped */
    return add_rule(b, action, nr, n_args, args, name, err);
}

static bool
dropped(const char *name, bool strict)
{
    for (size_t i = 0; strict && i < sizeof(strict_drop) / sizeof(strict_drop[0]); i++)
        if (strcmp(name, strict_drop[i]) == 0)
            return true;
    return false;
}

static int
export_bpf(scmp_filter_ctx ctx, struct xmp_scmp_filter *out, struct xmp_error *err)
{
    cleanup_close int fd = memfd_create("xmprun-seccomp", MFD_CLOEXEC);
    cleanup_free void *buf = NULL;
    off_t size;
    int rc;

    if (fd < 0)
        return xmp_error_set(err, errno, "seccomp: memfd_create");
    if ((rc = seccomp_export_bpf(ctx, fd)) < 0)
        return lcerr(err, rc, "export the filter");
    size = lseek(fd, 0, SEEK_END);
    if (size <= 0 || size % (off_t)sizeof(struct sock_filter) != 0 ||
        size / (off_t)sizeof(struct sock_filter) > BPF_MAXINSNS)
        return xmp_error_set(err, E2BIG, "seccomp: the filter has %lld bytes", (long long)size);
    buf = malloc((size_t)size);
    if (buf == NULL)
        return xmp_error_set(err, ENOMEM, "seccomp: filter");
    if (pread(fd, buf, (size_t)size, 0) != size)
        return xmp_error_set(err, errno ? errno : EIO, "seccomp: read the filter back");
    out->insns = steal_pointer(&buf);
    out->len = (unsigned short)(size / (off_t)sizeof(struct sock_filter));
    return 0;
}

/* The program a worker loads: the head and the search, once it agrees with libseccomp's whole
 * program on every input; libseccomp's where that is the shorter (a profile whose rules
 * alternate between actions call by call has as many runs as rules), or where the check cannot
 * tell (a libseccomp that writes an instruction it does not know). A disagreement is a bug
 * here, and an error. */
static int
builder_export(struct builder *b, struct xmp_scmp_filter *out, struct xmp_error *err)
{
    struct xmp_scmp_filter ref = {0}, head = {0}, prog = {0};
    char why[160];
    int rc = -1, d;

    memset(out, 0, sizeof(*out));
    if (export_bpf(b->all, &ref, err) < 0 || export_bpf(b->args, &head, err) < 0 ||
        xmp_bpf_compose(&head, SENTINEL, b->calls, b->n, b->def, &prog, err) < 0)
        goto out;
    if ((d = xmp_seccomp_differ(&prog, &ref, why, sizeof(why))) > 0) {
        xmp_error_set(err, EINVAL,
                      "seccomp: the filter's search disagrees with libseccomp's program (%s)", why);
        goto out;
    }
    if (d == 0 && prog.len <= ref.len) {
        *out = prog;
        prog = (struct xmp_scmp_filter){0};
    } else {
        *out = ref;
        ref = (struct xmp_scmp_filter){0};
    }
    rc = 0;
out:
    xmp_seccomp_filter_free(&ref);
    xmp_seccomp_filter_free(&head);
    xmp_seccomp_filter_free(&prog);
    return rc;
}

int
xmp_seccomp_compile_builtin(enum xmp_scmp_builtin which, struct xmp_scmp_filter *out,
                            struct xmp_error *err)
{
    bool strict = which == XMP_SCMP_STRICT;
    uint32_t deny = strict ? SCMP_ACT_KILL_PROCESS : SCMP_ACT_ERRNO(EPERM);
    cleanup_builder struct builder b;

    memset(out, 0, sizeof(*out));
    if (builder_init(&b, deny, err) < 0)
        return -1;
    for (size_t i = 0; i < sizeof(docker_allow) / sizeof(docker_allow[0]); i++)
        if (!dropped(docker_allow[i], strict) &&
            add_named(&b, SCMP_ACT_ALLOW, docker_allow[i], 0, NULL, err) < 0)
            return -1;

    /* clone without namespace flags (Docker's masked-equal rule); clone3 cannot be inspected
     * (its flags sit behind a pointer), so it fails with ENOSYS and glibc falls back to clone. */
    struct scmp_arg_cmp no_ns = SCMP_A0(SCMP_CMP_MASKED_EQ, NS_FLAGS, 0);
    if (add_named(&b, SCMP_ACT_ALLOW, "clone", 1, &no_ns, err) < 0 ||
        add_named(&b, SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, NULL, err) < 0)
        return -1;
    /* socket(), except AF_ALG (the kernel's crypto API) and AF_VSOCK (a channel to the
     * hypervisor), as Docker's three rules. */
    const struct scmp_arg_cmp families[] = {SCMP_A0(SCMP_CMP_LT, AF_ALG),
                                            SCMP_A0(SCMP_CMP_EQ, AF_ALG + 1),
                                            SCMP_A0(SCMP_CMP_GT, AF_VSOCK)};
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++)
        if (add_named(&b, SCMP_ACT_ALLOW, "socket", 1, &families[i], err) < 0)
            return -1;
    for (size_t i = 0; i < sizeof(docker_personality) / sizeof(docker_personality[0]); i++) {
        struct scmp_arg_cmp is = SCMP_A0(SCMP_CMP_EQ, docker_personality[i]);
        if (add_named(&b, SCMP_ACT_ALLOW, "personality", 1, &is, err) < 0)
            return -1;
    }
    return builder_export(&b, out, err);
}

int
xmp_seccomp_build_profile(const struct xmp_scmp_profile *p, struct xmp_scmp_filter *out,
                          struct xmp_error *err)
{
    cleanup_builder struct builder b;

    memset(out, 0, sizeof(*out));
    if (builder_init(&b, action_of(p->default_action, p->default_errnum), err) < 0)
        return -1;
    for (size_t i = 0; i < p->n_rules; i++) {
        const struct xmp_scmp_rule *r = &p->rules[i];
        char what[64];
        if (r->action == p->default_action &&
            (r->action != XMP_SCMP_ERRNO || r->errnum == p->default_errnum))
            continue;
        snprintf(what, sizeof(what), "rule for syscall %d", r->nr);
        if (add_rule(&b, action_of(r->action, r->errnum), r->nr, 0, NULL, what, err) < 0)
            return -1;
    }
    return builder_export(&b, out, err);
}

void
xmp_seccomp_filter_free(struct xmp_scmp_filter *f)
{
    if (f == NULL)
        return;
    free(f->insns);
    memset(f, 0, sizeof(*f));
}

int
xmp_seccomp_load(const struct xmp_scmp_filter *f, struct xmp_error *err)
{
    struct sock_fprog prog = {.len = f->len, .filter = (struct sock_filter *)f->insns};

    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
        return xmp_error_set(err, errno, "seccomp: load the filter");
    return 0;
}

int
xmp_seccomp_resolve(const char *name)
{
    int nr = seccomp_syscall_resolve_name(name);
    uint32_t arches[] = {SCMP_ARCH_X86, SCMP_ARCH_X32};

    if (nr != __NR_SCMP_ERROR)
        return nr;
    /* A name only another ABI of the host has (socketcall, chown32 on x86-64) resolves to
     * libseccomp's pseudo number, which it maps per ABI. */
    for (size_t i = 0; seccomp_arch_native() == SCMP_ARCH_X86_64 && i < 2; i++)
        if (seccomp_syscall_resolve_name_arch(arches[i], name) != __NR_SCMP_ERROR)
            return seccomp_syscall_resolve_name(name);
    return -1;
}

char **
xmp_seccomp_names(size_t *n)
{
    uint32_t arch = seccomp_arch_native();
    char **names = calloc(1025, sizeof(char *));

    *n = 0;
    if (names == NULL)
        return NULL;
    for (int nr = 0; nr < 1024; nr++) {
        char *name = seccomp_syscall_resolve_num_arch(arch, nr);
        if (name != NULL)
            names[(*n)++] = name;
    }
    return names;
}

void
xmp_seccomp_names_free(char **names)
{
    for (size_t i = 0; names != NULL && names[i] != NULL; i++)
        free(names[i]);
    free(names);
}

int
xmp_seccomp_name_of(unsigned int audit_arch, int nr, char *buf, size_t size)
{
    uint32_t arch = audit_arch;
    cleanup_free char *name = NULL;

    /* x32 shares x86-64's audit arch and marks its numbers with bit 30. */
    if (audit_arch == SCMP_ARCH_X86_64 && (nr & 0x40000000))
        arch = SCMP_ARCH_X32;
    name = seccomp_syscall_resolve_num_arch(arch, nr);
    if (name == NULL)
        return -1;
    snprintf(buf, size, "%s", name);
    return 0;
}

/* Scans what /dev/kmsg holds for the audit record of pid's kill; 0 with the name once found. */
static int
scan_kmsg(pid_t pid, char *buf, size_t size)
{
    cleanup_close int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    char rec[8192], want[32];
    int found = -1;

    if (fd < 0)
        return -1;
    snprintf(want, sizeof(want), " pid=%d ", (int)pid);
    for (;;) {
        ssize_t n = read(fd, rec, sizeof(rec) - 1);
        if (n < 0 && errno == EPIPE)
            continue; /* records were overwritten while reading: go on with the next */
        if (n <= 0)
            break;
        rec[n] = '\0';
        const char *arch_s = strstr(rec, " arch="), *nr_s = strstr(rec, " syscall=");
        if (strstr(rec, "type=1326") == NULL || strstr(rec, want) == NULL || arch_s == NULL ||
            nr_s == NULL)
            continue;
        unsigned int arch = (unsigned int)strtoul(arch_s + 6, NULL, 16);
        int nr = (int)strtol(nr_s + 9, NULL, 10);
        if (xmp_seccomp_name_of(arch, nr, buf, size) < 0)
            snprintf(buf, size, "syscall %d", nr);
        found = 0; /* the last record for pid wins: pids are reused */
    }
    return found;
}

int
xmp_seccomp_killed_by(pid_t pid, char *buf, size_t size)
{
    for (int i = 0; i < 20; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        if (scan_kmsg(pid, buf, size) == 0)
            return 0;
        nanosleep(&ts, NULL);
    }
    return -1;
}
