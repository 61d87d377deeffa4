/* seccomp and the worker's confinement: profile files validated like specs (positions, hints),
 * the built-in filters loaded in a forked child (EPERM under default, SIGSYS under strict, the
 * i386 ABI closed), rlimits and the user drop through xmp_confine_apply, and user resolution. */
#define _GNU_SOURCE
#include "isolate/confine.h"
#include "isolate/seccomp.h"
#include "runner/plan/isolation.h"
#include "unit/spec_helpers.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* Writes text to a fresh profile file and loads a spec naming it. */
static int
load_profile(const char *text, struct xmp_spec *s, struct xmp_diags *d, char *path, size_t size)
{
    char yaml[4200];
    FILE *f;

    snprintf(path, size, "/tmp/xmprun-test-profile-%d.yaml", (int)getpid());
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    snprintf(yaml, sizeof(yaml), BASE "isolation:\n  seccomp: %s\n", path);
    int rc = load_sets(yaml, NULL, 0, s, d);
    unlink(path);
    return rc;
}

static void
expect_profile_error(const char *text, int line, int col, const char *msg)
{
    struct xmp_spec s;
    struct xmp_diags d;
    char path[128];

    cr_assert_eq(load_profile(text, &s, &d, path, sizeof(path)), -1);
    expect_first(&d, path, line, col, msg);
}

Test(profile, unknown_syscall_has_a_hint)
{
    expect_profile_error("default_action: allow\n"
                         "syscalls:\n"
                         "  - names: [mount, ptrac]\n"
                         "    action: kill\n",
                         3, 20,
                         "syscalls[0].names[1]: unknown syscall \"ptrac\" (did you mean "
                         "\"ptrace\"?)");
}

Test(profile, unknown_key_has_a_hint_from_the_profile)
{
    expect_profile_error("default_action: allow\n"
                         "syscalls:\n"
                         "  - names: [mount]\n"
                         "    action: errno\n"
                         "    erno: EPERM\n",
                         5, 5, "syscalls[0].erno: unknown key (did you mean \"errno\"?)");
}

Test(profile, bad_action_and_errno)
{
    expect_profile_error("default_action: deny\n", 1, 17,
                         "default_action: expected one of allow, errno, kill, log, got \"deny\"");
    expect_profile_error("default_action: allow\n"
                         "syscalls: [{names: [mount], action: kill, errno: EPERM}]\n",
                         2, 50, "syscalls[0].errno: only valid with action: errno");
    expect_profile_error("default_action: allow\n"
                         "syscalls: [{names: [mount], action: errno, errno: EPRM}]\n",
                         2, 51,
                         "syscalls[0].errno: unknown errno \"EPRM\" (did you mean \"EPERM\"?)");
}

Test(profile, a_syscall_listed_twice)
{
    expect_profile_error("default_action: errno\n"
                         "syscalls:\n"
                         "  - {names: [read, write], action: allow}\n"
                         "  - {names: [write], action: kill}\n",
                         4, 14, "syscalls[1].names[0]: write is already listed in syscalls[0]");
}

Test(profile, missing_file_is_the_specs_error)
{
    struct xmp_spec s;
    struct xmp_diags d;

    cr_assert_eq(load_sets(BASE "isolation:\n  seccomp: /nonexistent/p.yaml\n", NULL, 0, &s, &d),
                 -1);
    expect_first(&d, "job.yaml", 5, 12,
                 "isolation.seccomp: cannot read the profile \"/nonexistent/p.yaml\": No such "
                 "file or directory");
}

Test(profile, a_good_profile_builds)
{
    struct xmp_spec s;
    struct xmp_diags d;
    struct xmp_scmp_filter f;
    struct xmp_error err = {0};
    char path[128];

    cr_assert_eq(load_profile("default_action: errno\n"
                              "syscalls:\n"
                              "  - {names: [ptrace], action: kill}\n"
                              "  - {names: [socketcall], action: allow}\n",
                              &s, &d, path, sizeof(path)),
                 0, "%s", d.count ? d.items[0].msg : "");
    cr_expect_eq(s.seccomp_rules.default_action, XMP_SCMP_ERRNO);
    cr_assert_eq(s.seccomp_rules.n_rules, 2);
    cr_assert_eq(xmp_seccomp_build_profile(&s.seccomp_rules, &f, &err), 0, "%s", err.msg);
    cr_expect_gt(f.len, 0);
    xmp_seccomp_filter_free(&f);
    xmp_spec_free(&s);
}

/* Runs fn in a child after loading the built-in filter `which`; returns the wait status. */
static int
in_filtered_child(enum xmp_scmp_builtin which, int (*fn)(void))
{
    struct xmp_scmp_filter f;
    struct xmp_error err = {0};
    int status;

    cr_assert_eq(xmp_seccomp_build_builtin(which, &f, &err), 0, "%s", err.msg);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        struct xmp_confine c = {.no_new_privs = true, .seccomp = &f};
        if (xmp_confine_apply(&c, &err) < 0)
            _exit(100);
        _exit(fn());
    }
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    xmp_seccomp_filter_free(&f);
    return status;
}

static int
call_unshare(void)
{
    return syscall(SYS_unshare, CLONE_NEWUSER) < 0 && errno == EPERM ? 0 : 1;
}

static int
call_clone3(void)
{
    return syscall(SYS_clone3, NULL, 0) < 0 && errno == ENOSYS ? 0 : 1;
}

static int
call_fork(void)
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(7);
    int status;
    return pid > 0 && waitpid(pid, &status, 0) == pid && WEXITSTATUS(status) == 7 ? 0 : 1;
}

/* unshare through the i386 ABI: int 0x80 with i386's number 310. */
static int
call_int80_unshare(void)
{
    long ret;
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(310L), "b"((long)CLONE_NEWUSER) : "memory");
    return 0;
}

/* PTRACE_ATTACH to a pid nobody has: ESRCH when the filter lets it through. */
static int
call_ptrace_attach(void)
{
    return syscall(SYS_ptrace, 16, 0x7ffffff0, NULL, NULL) < 0 && errno == ESRCH ? 0 : 1;
}

Test(filter, default_denies_with_eperm_and_lets_fork_through, .timeout = 10)
{
    int st;

    st = in_filtered_child(XMP_SCMP_DEFAULT, call_unshare);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "unshare(CLONE_NEWUSER): status %#x", st);
    st = in_filtered_child(XMP_SCMP_DEFAULT, call_clone3);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "clone3 must fail with ENOSYS: %#x", st);
    st = in_filtered_child(XMP_SCMP_DEFAULT, call_fork);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fork (clone without namespaces): %#x", st);
    st = in_filtered_child(XMP_SCMP_DEFAULT, call_ptrace_attach);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "ptrace is allowed, as in Docker: %#x", st);
    /* The i386 ABI is closed: any call through it kills, under every profile. */
    st = in_filtered_child(XMP_SCMP_DEFAULT, call_int80_unshare);
    cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS, "i386 unshare must be killed: %#x", st);
}

Test(filter, strict_kills_with_sigsys, .timeout = 10)
{
    int st;

    st = in_filtered_child(XMP_SCMP_STRICT, call_ptrace_attach);
    cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS, "ptrace under strict: %#x", st);
    st = in_filtered_child(XMP_SCMP_STRICT, call_int80_unshare);
    cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS, "an i386 call under strict: %#x", st);
    st = in_filtered_child(XMP_SCMP_STRICT, call_fork);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fork under strict: %#x", st);
}

/* The built-in programs xmprun loads are the ones isolate/seccomp.c compiles now, each in its
 * own place: not another profile's, not an older build's. */
Test(filter, built_in_programs_are_what_isolate_compiles)
{
    for (int which = XMP_SCMP_DEFAULT; which <= XMP_SCMP_STRICT; which++) {
        struct xmp_scmp_filter built, compiled;
        struct xmp_error err = {0};
        cr_assert_eq(xmp_seccomp_build_builtin(which, &built, &err), 0, "%s", err.msg);
        cr_assert_eq(xmp_seccomp_compile_builtin(which, &compiled, &err), 0, "%s", err.msg);
        cr_expect_eq(built.len, compiled.len, "profile %d: %u instructions built in, %u compiled",
                     which, built.len, compiled.len);
        cr_expect(built.len == compiled.len &&
                      memcmp(built.insns, compiled.insns, built.len * 8u) == 0,
                  "profile %d: the built-in program differs from the compiled one", which);
        /* The search over runs: libseccomp's own program for these profiles is ~400
         * instructions, which the kernel converts and JITs again for every worker. */
        cr_expect_lt(built.len, 200, "profile %d: %u instructions", which, built.len);
        xmp_seccomp_filter_free(&built);
        xmp_seccomp_filter_free(&compiled);
    }
}

/* Index of the first instruction at or after `from` with this code (and k, unless any_k). */
static size_t
find_insn(const struct xmp_scmp_filter *f, size_t from, unsigned code, uint32_t k, bool any_k)
{
    const struct sock_filter *p = f->insns;
    for (size_t i = from; i < f->len; i++)
        if (p[i].code == code && (any_k || p[i].k == k))
            return i;
    cr_assert_fail("no instruction %#x (k %#x) from %zu", code, k, from);
    return 0;
}

/* The check that every compiled program passes (it agrees with libseccomp's) finds each bug
 * planted in the default program: in the search (an answer, a boundary) and in the head (the
 * ABI, and each rule on an argument). */
Test(filter, the_check_finds_a_planted_difference)
{
    struct xmp_scmp_filter f, g;
    struct xmp_error err = {0};
    char why[160];
    size_t search = 0;

    cr_assert_eq(xmp_seccomp_build_builtin(XMP_SCMP_DEFAULT, &f, &err), 0, "%s", err.msg);
    cr_assert_eq(xmp_seccomp_differ(&f, &f, why, sizeof(why)), 0, "%s", why);
    /* The search starts at the last load of the number. */
    for (size_t i = 0; i < f.len; i++)
        if (((struct sock_filter *)f.insns)[i].code == (BPF_LD | BPF_W | BPF_ABS) &&
            ((struct sock_filter *)f.insns)[i].k == 0)
            search = i;
    struct {
        const char *what;
        size_t at;
        uint32_t k;
    } plants[] = {
        {"an allowed run denied", find_insn(&f, search, BPF_RET | BPF_K, SECCOMP_RET_ALLOW, false),
         SECCOMP_RET_ERRNO | EPERM},
        {"a run's start moved", find_insn(&f, search, BPF_JMP | BPF_JGE | BPF_K, 0, true), 0},
        {"another ABI", find_insn(&f, 0, BPF_JMP | BPF_JEQ | BPF_K, 0xc000003e, false), 0x40000003},
        {"socket's family", find_insn(&f, 0, BPF_JMP | BPF_JEQ | BPF_K, 39, false), 41},
        {"clone's namespace mask", find_insn(&f, 0, BPF_ALU | BPF_AND | BPF_K, 0x7e020000, false),
         0x7e020000 & ~0x10000000u},
        {"a personality", find_insn(&f, 0, BPF_JMP | BPF_JEQ | BPF_K, 0x20008, false), 0x20009},
    };
    for (size_t i = 0; i < sizeof(plants) / sizeof(plants[0]); i++) {
        g.len = f.len;
        g.insns = malloc(f.len * sizeof(struct sock_filter));
        memcpy(g.insns, f.insns, f.len * sizeof(struct sock_filter));
        struct sock_filter *at = &((struct sock_filter *)g.insns)[plants[i].at];
        at->k = plants[i].k ? plants[i].k : at->k + 1;
        cr_expect_eq(xmp_seccomp_differ(&g, &f, why, sizeof(why)), 1, "%s: not found",
                     plants[i].what);
        xmp_seccomp_filter_free(&g);
    }
    /* An instruction it does not run: it cannot tell, and says so (the compiler then keeps
     * libseccomp's own program). */
    struct sock_filter tax[] = {BPF_STMT(BPF_MISC | BPF_TAX, 0),
                                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
    g = (struct xmp_scmp_filter){tax, 2};
    cr_expect_eq(xmp_seccomp_differ(&g, &f, why, sizeof(why)), -1);
    cr_expect(strstr(why, "instruction") != NULL, "%s", why);
    xmp_seccomp_filter_free(&f);
}

/* Profiles of every shape compile (each program checked against libseccomp's as it is built),
 * runs short and long, and searches longer than a conditional jump reaches. */
Test(filter, random_profiles_compile_to_programs_that_agree)
{
    static const enum xmp_scmp_action acts[] = {XMP_SCMP_ALLOW, XMP_SCMP_ERRNO, XMP_SCMP_KILL,
                                                XMP_SCMP_LOG};
    struct xmp_scmp_rule rules[460];
    unsigned seed = 42;

    for (int round = 0; round < 40; round++) {
        struct xmp_scmp_profile p = {.default_action = acts[rand_r(&seed) % 4],
                                     .default_errnum = 1 + rand_r(&seed) % 30,
                                     .rules = rules};
        /* Half the rounds long runs of one action, half a new action almost every call. */
        int run = round % 2 ? 1 : 1 + rand_r(&seed) % 40;
        enum xmp_scmp_action a = XMP_SCMP_ALLOW;
        for (int nr = 0; nr < 460; nr++) {
            if (nr % run == 0)
                a = acts[rand_r(&seed) % 4];
            if (rand_r(&seed) % 4 == 0)
                continue;
            rules[p.n_rules++] = (struct xmp_scmp_rule){nr, a, 1 + rand_r(&seed) % 30};
        }
        struct xmp_scmp_filter f;
        struct xmp_error err = {0};
        cr_assert_eq(xmp_seccomp_build_profile(&p, &f, &err), 0, "round %d: %s", round, err.msg);
        xmp_seccomp_filter_free(&f);
    }
}

Test(filter, names_of_numbers)
{
    char buf[64];

    cr_assert_eq(xmp_seccomp_name_of(0xc000003eU, 101, buf, sizeof(buf)), 0);
    cr_expect_str_eq(buf, "ptrace");
    cr_assert_eq(xmp_seccomp_name_of(0x40000003U, 26, buf, sizeof(buf)), 0);
    cr_expect_str_eq(buf, "ptrace");
    cr_expect_eq(xmp_seccomp_resolve("nosuchcall"), -1);
    cr_expect_neq(xmp_seccomp_resolve("socketcall"), -1, "an i386-only name is a syscall too");
}

static int
check_limits(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) < 0 || r.rlim_cur != 123 || r.rlim_max != 123)
        return 1;
    if (getrlimit(RLIMIT_CORE, &r) < 0 || r.rlim_cur != RLIM_INFINITY)
        return 2;
    return 0;
}

Test(confine, rlimits, .timeout = 10)
{
    struct xmp_confine c = {.n_rlimits = 2};
    struct xmp_error err = {0};
    int status;

    c.rlimits[0] = (struct xmp_confine_rlimit){RLIMIT_NOFILE, "nofile", {123, 123}};
    c.rlimits[1] = (struct xmp_confine_rlimit){RLIMIT_CORE, "core", {RLIM_INFINITY, RLIM_INFINITY}};
    pid_t pid = fork();
    if (pid == 0)
        _exit(xmp_confine_apply(&c, &err) < 0 ? 100 : check_limits());
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x", status);
}

Test(user, resolve)
{
    struct xmp_isolation iso = {0};
    struct xmp_error err = {0};

    cr_assert_eq(xmp_isolation_resolve_user("nobody", &iso, &err), 0, "%s", err.msg);
    cr_expect_eq(iso.confine.uid, 65534);
    cr_expect_eq(iso.confine.gid, 65534);
    cr_expect(iso.confine.change_user);
    cr_expect_geq(iso.confine.n_groups, 1);
    cr_expect_str_eq(iso.user, "nobody");
    xmp_isolation_free(&iso);

    cr_assert_eq(xmp_isolation_resolve_user("4321:0", &iso, &err), 0, "%s", err.msg);
    cr_expect_eq(iso.confine.uid, 4321);
    cr_expect_eq(iso.confine.gid, 0);
    cr_expect_eq(iso.confine.n_groups, 1);
    cr_expect_null(iso.home);
    xmp_isolation_free(&iso);

    cr_expect_eq(xmp_isolation_resolve_user("no-such-user-xmp", &iso, &err), -1);
    cr_expect_str_eq(err.msg, "isolation.user: no user named `no-such-user-xmp` on this host");
    xmp_isolation_free(&iso);
    cr_expect_eq(xmp_isolation_resolve_user("nobody:no-such-group", &iso, &err), -1);
    xmp_isolation_free(&iso);
}

/* The packed form a zygote receives: the same confinement after a round trip, applied. */
static int
check_packed_child(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) < 0 || r.rlim_cur != 77)
        return 1;
    return syscall(SYS_unshare, CLONE_NEWUSER) < 0 && errno == EPERM ? 0 : 2;
}

Test(confine, pack_and_unpack, .timeout = 10)
{
    struct xmp_scmp_filter f, storage;
    struct xmp_confine c = {.n_rlimits = 1, .no_new_privs = true}, back;
    struct xmp_error err = {0};
    void *buf = NULL;
    size_t len = 0;
    int status;

    cr_assert_eq(xmp_seccomp_build_builtin(XMP_SCMP_DEFAULT, &f, &err), 0, "%s", err.msg);
    c.rlimits[0] = (struct xmp_confine_rlimit){RLIMIT_NOFILE, "nofile", {77, 77}};
    c.seccomp = &f;
    cr_assert_eq(xmp_confine_pack(&c, &buf, &len, &err), 0, "%s", err.msg);
    xmp_seccomp_filter_free(&f);
    cr_assert_eq(xmp_confine_unpack(buf, len - 1, &back, &storage, &err), -1);
    cr_assert_eq(xmp_confine_unpack(buf, len, &back, &storage, &err), 0, "%s", err.msg);
    cr_expect_str_eq(back.rlimits[0].name, "nofile");
    cr_expect(back.no_new_privs);
    cr_expect_not(back.change_user);
    pid_t pid = fork();
    if (pid == 0)
        _exit(xmp_confine_apply(&back, &err) < 0 ? 100 : check_packed_child());
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x", status);
    free(buf);
}

/* A seccomp return value in words. */
static const char *
describe_action(unsigned action)
{
    static char buf[4][32];
    static int next;
    char *b = buf[next++ % 4];
    if ((action & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_ALLOW)
        return "allows it";
    if ((action & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_ERRNO)
        snprintf(b, 32, "fails it with errno %u", action & SECCOMP_RET_DATA);
    else
        snprintf(b, 32, "answers %#x", action);
    return b;
}

/* What xmprun's `default` allows beyond Docker's, each with its reason in isolate/seccomp.c:
 * NUMA memory policies (Docker allows them with CAP_SYS_NICE only). */
static const char *const beyond_docker[] = {"get_mempolicy", "mbind", "set_mempolicy",
                                            "set_mempolicy_home_node"};

/* Adds one rule to the reference as the built-in's builder does: a name this libseccomp or
 * this ABI does not know is skipped (as Docker skips it). */
static void
reference_rule(scmp_filter_ctx ctx, uint32_t action, const char *name, unsigned n,
               const struct scmp_arg_cmp *arg, const char *line)
{
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR)
        return;
    int rc = seccomp_rule_add_array(ctx, action, nr, n, arg);
    cr_assert(rc == 0 || rc == -EDOM || (rc == -EINVAL && nr < 0), "%s: %s", line, strerror(-rc));
}

/* The built-in `default` is checked as a whole against the profile it follows: Docker's default
 * (tests/fixtures/seccomp/moby-default-amd64.txt, read from moby's default.json, which names
 * its version) plus the calls xmprun adds on purpose, built into a reference program with
 * libseccomp as Docker's runtime would, then compared with xmp_seccomp_differ on every input
 * at which either can change its answer. A call allowed or denied in one and not the other,
 * or an argument rule that differs, fails. */
Test(filter, default_is_dockers_profile_and_no_more)
{
    char path[4200], line[256];
    snprintf(path, sizeof(path), "%s/seccomp/moby-default-amd64.txt", getenv("XMPRUN_FIXTURES"));
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
    cr_assert_not_null(ctx);
    cr_assert_eq(seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS), 0);
    size_t rules = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        char verb[16], name[64], op[16];
        unsigned arg;
        unsigned long long a, b = 0;
        int errnum, n;
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == '#' || line[0] == '\0')
            continue;
        rules++;
        if (sscanf(line, "errno %d %63s", &errnum, name) == 2) {
            reference_rule(ctx, SCMP_ACT_ERRNO((uint32_t)errnum), name, 0, NULL, line);
            continue;
        }
        n = sscanf(line, "%15s %63s %u %15s %llu %llu", verb, name, &arg, op, &a, &b);
        cr_assert(n >= 2 && strcmp(verb, "allow") == 0, "%s: not understood", line);
        if (n == 2) {
            reference_rule(ctx, SCMP_ACT_ALLOW, name, 0, NULL, line);
            continue;
        }
        static const struct {
            const char *name;
            enum scmp_compare op;
        } ops[] = {{"eq", SCMP_CMP_EQ},
                   {"ne", SCMP_CMP_NE},
                   {"lt", SCMP_CMP_LT},
                   {"gt", SCMP_CMP_GT},
                   {"masked_eq", SCMP_CMP_MASKED_EQ}};
        size_t k = 0;
        while (k < sizeof(ops) / sizeof(ops[0]) && strcmp(ops[k].name, op) != 0)
            k++;
        cr_assert(k < sizeof(ops) / sizeof(ops[0]) &&
                      n == (ops[k].op == SCMP_CMP_MASKED_EQ ? 6 : 5),
                  "%s: not understood", line);
        struct scmp_arg_cmp cmp = {.arg = arg, .op = ops[k].op, .datum_a = a, .datum_b = b};
        reference_rule(ctx, SCMP_ACT_ALLOW, name, 1, &cmp, line);
    }
    fclose(f);
    cr_assert_gt(rules, 300, "%s has only %zu rules", path, rules);
    for (size_t i = 0; i < sizeof(beyond_docker) / sizeof(beyond_docker[0]); i++)
        reference_rule(ctx, SCMP_ACT_ALLOW, beyond_docker[i], 0, NULL, beyond_docker[i]);

    int fd = memfd_create("reference", MFD_CLOEXEC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(seccomp_export_bpf(ctx, fd), 0);
    seccomp_release(ctx);
    off_t size = lseek(fd, 0, SEEK_END);
    struct xmp_scmp_filter ref = {.insns = malloc((size_t)size),
                                  .len =
                                      (unsigned short)(size / (off_t)sizeof(struct sock_filter))};
    cr_assert_not_null(ref.insns);
    cr_assert_eq(pread(fd, ref.insns, (size_t)size, 0), size);
    close(fd);

    struct xmp_scmp_filter built;
    struct xmp_error err = {0};
    char why[160] = "";
    cr_assert_eq(xmp_seccomp_build_builtin(XMP_SCMP_DEFAULT, &built, &err), 0, "%s", err.msg);
    int differ = xmp_seccomp_differ(&built, &ref, why, sizeof(why));
    /* The first input where they differ, with the call's name and the two answers in words. */
    char name[64] = "?";
    unsigned ours = 0, docker = 0;
    int nr = -1;
    const char *at = strstr(why, "call ");
    if (at != NULL && sscanf(at, "call %d", &nr) == 1)
        xmp_seccomp_name_of(0xc000003eu /* AUDIT_ARCH_X86_64 */, nr, name, sizeof(name));
    at = strrchr(why, ':');
    if (at != NULL)
        sscanf(at, ": %x against %x", &ours, &docker);
    cr_expect_eq(differ, 0,
                 "the built-in default and Docker's profile differ at %s: the built-in %s, "
                 "Docker's %s (%s)",
                 name, describe_action(ours), describe_action(docker), why);
    xmp_seccomp_filter_free(&built);
    xmp_seccomp_filter_free(&ref);
}
