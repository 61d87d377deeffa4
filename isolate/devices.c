/* Device filtering (see devices.h): the rules, and the same rules compiled into a small eBPF
 * program of the kind runc and crun attach on cgroup v2 (cgroup_v1.c writes them to the v1
 * devices controller's list). Plain syscalls only, so that bench/baseline.c attaches the very
 * program xmprun does without linking libcgroup. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "isolate/devices.h"

#include "isolate/array.h"
#include "isolate/cleanup.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

bool
xmp_devices_append(struct xmp_dev_rules *rules, const struct xmp_dev_rule *r)
{
    if (!xmp_array_reserve(rules->r, rules->cap, rules->n + 1, 32))
        return false;
    rules->r[rules->n++] = *r;
    return true;
}

struct xmp_dev_rule *
xmp_devices_add(struct xmp_dev_rules *rules, char type, int major, int minor, unsigned access)
{
    const struct xmp_dev_rule r = {.type = type, .major = major, .minor = minor, .access = access};

    if (!xmp_devices_append(rules, &r))
        return NULL;
    return &rules->r[rules->n - 1];
}

bool
xmp_devices_copy(struct xmp_dev_rules *dst, const struct xmp_dev_rules *src)
{
    dst->n = 0;
    for (size_t i = 0; i < src->n; i++)
        if (!xmp_devices_append(dst, &src->r[i]))
            return false;
    return true;
}

void
xmp_devices_free(struct xmp_dev_rules *rules)
{
    free(rules->r);
    *rules = (struct xmp_dev_rules){0};
}

bool
xmp_devices_add_defaults(struct xmp_dev_rules *rules)
{
    static const int chars[][2] = {
        {1, 3}, /* null */ {1, 5},    /* zero */ {1, 7}, /* full */ {1, 8}, /* random */
        {1, 9}, /* urandom */ {5, 0}, /* tty */ {5, 2},                     /* ptmx */
    };
    const unsigned rwm = XMP_DEV_READ | XMP_DEV_WRITE | XMP_DEV_MKNOD;
    bool ok = xmp_devices_add(rules, 'c', XMP_DEV_ANY, XMP_DEV_ANY, XMP_DEV_MKNOD) != NULL &&
              xmp_devices_add(rules, 'b', XMP_DEV_ANY, XMP_DEV_ANY, XMP_DEV_MKNOD) != NULL;

    for (size_t i = 0; ok && i < sizeof(chars) / sizeof(chars[0]); i++)
        ok = xmp_devices_add(rules, 'c', chars[i][0], chars[i][1], rwm) != NULL;
    /* The pseudo-terminal slaves (/dev/pts/N) use majors 136-143 (Documentation/admin-guide/
     * devices.txt: "Unix98 PTY slaves"). */
    for (int major = 136; ok && major <= 143; major++)
        ok = xmp_devices_add(rules, 'c', major, XMP_DEV_ANY, rwm) != NULL;
    return ok;
}

void
xmp_devices_format(const struct xmp_dev_rule *r, char *buf, size_t size)
{
    char major[16] = "*", minor[16] = "*", access[4];
    size_t n = 0;

    if (r->major != XMP_DEV_ANY)
        snprintf(major, sizeof(major), "%d", r->major);
    if (r->minor != XMP_DEV_ANY)
        snprintf(minor, sizeof(minor), "%d", r->minor);
    if (r->access & XMP_DEV_READ)
        access[n++] = 'r';
    if (r->access & XMP_DEV_WRITE)
        access[n++] = 'w';
    if (r->access & XMP_DEV_MKNOD)
        access[n++] = 'm';
    access[n] = '\0';
    snprintf(buf, size, "%c %s:%s %s", r->type, major, minor, access);
}

/* ---- composing with an enclosing v1 devices cgroup ---- */

static bool
explicit_node(const struct xmp_dev_rule *r)
{
    return r->type != 'a' && r->major != XMP_DEV_ANY && r->minor != XMP_DEV_ANY;
}

/* "*" or a number, as devices.list writes them. */
static bool
parse_num(const char *s, size_t len, int *out)
{
    char *end;
    long v;

    if (len == 1 && s[0] == '*') {
        *out = XMP_DEV_ANY;
        return true;
    }
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end != s + len || len == 0 || v < 0 || v > 0xfffff)
        return false;
    *out = (int)v;
    return true;
}

int
xmp_devices_parse_list(const char *text, struct xmp_dev_rule *out, size_t max)
{
    size_t n = 0;

    for (const char *line = text; *line != '\0';) {
        const char *eol = strchr(line, '\n');
        size_t len = eol != NULL ? (size_t)(eol - line) : strlen(line);
        char type, numbers[32], access[8];
        struct xmp_dev_rule r = {0};

        if (len > 0) {
            char buf[64];
            if (len >= sizeof(buf) || n >= max)
                return -1;
            memcpy(buf, line, len);
            buf[len] = '\0';
            if (sscanf(buf, "%c %31s %7s", &type, numbers, access) != 3 ||
                (type != 'a' && type != 'b' && type != 'c'))
                return -1;
            const char *colon = strchr(numbers, ':');
            if (colon == NULL || !parse_num(numbers, (size_t)(colon - numbers), &r.major) ||
                !parse_num(colon + 1, strlen(colon + 1), &r.minor))
                return -1;
            r.type = type;
            for (const char *a = access; *a != '\0'; a++) {
                if (*a == 'r')
                    r.access |= XMP_DEV_READ;
                else if (*a == 'w')
                    r.access |= XMP_DEV_WRITE;
                else if (*a == 'm')
                    r.access |= XMP_DEV_MKNOD;
                else
                    return -1;
            }
            out[n++] = r;
        }
        line += len + (eol != NULL);
    }
    return (int)n;
}

static bool
meet(int a, int b, int *out)
{
    if (a != XMP_DEV_ANY && b != XMP_DEV_ANY && a != b)
        return false;
    *out = a == XMP_DEV_ANY ? b : a;
    return true;
}

bool
xmp_devices_intersect(const struct xmp_dev_rule *a, const struct xmp_dev_rule *b,
                      struct xmp_dev_rule *out)
{
    struct xmp_dev_rule r = *a;

    if (a->type != 'a' && b->type != 'a' && a->type != b->type)
        return false;
    r.type = a->type == 'a' ? b->type : a->type;
    r.access = a->access & b->access;
    if (r.access == 0 || !meet(a->major, b->major, &r.major) || !meet(a->minor, b->minor, &r.minor))
        return false;
    *out = r;
    return true;
}

/* True when outer allows every device and access inner does. */
static bool
covers(const struct xmp_dev_rule *outer, const struct xmp_dev_rule *inner)
{
    return (outer->type == 'a' || outer->type == inner->type) &&
           (outer->major == XMP_DEV_ANY || outer->major == inner->major) &&
           (outer->minor == XMP_DEV_ANY || outer->minor == inner->minor) &&
           (inner->access & ~outer->access) == 0;
}

bool
xmp_devices_compose(const struct xmp_dev_rules *want, const struct xmp_dev_rule *parent,
                    size_t n_parent, struct xmp_dev_rules *out, struct xmp_dev_rules *denied)
{
    out->n = 0;
    denied->n = 0;
    for (size_t i = 0; i < want->n; i++) {
        const struct xmp_dev_rule *w = &want->r[i];
        unsigned granted = 0;
        size_t k;

        for (k = 0; k < n_parent && !covers(&parent[k], w); k++)
            ;
        if (k < n_parent) { /* the common case: the parent holds it as it is */
            if (!xmp_devices_append(out, w))
                return false;
            continue;
        }
        for (k = 0; k < n_parent; k++) {
            struct xmp_dev_rule x;
            if (!xmp_devices_intersect(w, &parent[k], &x))
                continue;
            granted |= x.access;
            if (!xmp_devices_append(out, &x))
                return false;
        }
        /* A single node either is allowed in full or is the caller's to decide about (its
         * partial access, already in out, does no harm); a wildcard is what the parent has. */
        if (explicit_node(w) && granted != w->access && !xmp_devices_append(denied, w))
            return false;
    }
    return true;
}

/* Why a BPF device program could not be attached to the cgroup2 directory cgfd. */
static int
explain_attach(int cgfd, int errnum, struct xmp_error *err)
{
    char path[4096], probe[4200];
    ssize_t len;

    snprintf(probe, sizeof(probe), "/proc/self/fd/%d", cgfd);
    len = errnum == EPERM ? readlink(probe, path, sizeof(path) - 1) : -1;
    path[len > 0 ? len : 0] = '\0';
    /* Up from the parent, while the directory is a cgroup2 one (the mount's root has
     * cgroup.controllers too, the directory it is mounted on has not): the nearest enclosing
     * cgroup with a device program of its own decides (the kernel's hierarchy_allows_attach). */
    for (char *slash = strrchr(path, '/'); slash != NULL && slash != path;
         slash = strrchr(path, '/')) {
        *slash = '\0';
        snprintf(probe, sizeof(probe), "%s/cgroup.controllers", path);
        if (access(probe, F_OK) < 0)
            break;
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
            break;
        union bpf_attr q;
        memset(&q, 0, sizeof(q));
        q.query.target_fd = (uint32_t)fd;
        q.query.attach_type = BPF_CGROUP_DEVICE;
        int rc = (int)syscall(SYS_bpf, BPF_PROG_QUERY, &q, sizeof(q));
        close(fd);
        if (rc < 0 || q.query.prog_cnt == 0)
            continue;
        if (q.query.attach_flags & (BPF_F_ALLOW_MULTI | BPF_F_ALLOW_OVERRIDE))
            break;
        return xmp_error_set(
            err, 0,
            "device filter: the enclosing cgroup %s has a device program attached without "
            "BPF_F_ALLOW_MULTI, which bars any below it: have it attached with that flag (as "
            "runc and systemd do), or set isolation.devices: false",
            path);
    }
    return xmp_error_set(err, errnum, "device filter: attach the BPF device program");
}

/* ---- the eBPF program ---- */

#define INSN(c, d, s, o, i)                                                                        \
    ((struct bpf_insn){.code = (c), .dst_reg = (d), .src_reg = (s), .off = (o), .imm = (i)})
#define LDX_W(d, s, o)   INSN(BPF_LDX | BPF_MEM | BPF_W, d, s, o, 0)
#define MOV64_REG(d, s)  INSN(BPF_ALU64 | BPF_MOV | BPF_X, d, s, 0, 0)
#define MOV64_IMM(d, i)  INSN(BPF_ALU64 | BPF_MOV | BPF_K, d, 0, 0, i)
#define AND32_IMM(d, i)  INSN(BPF_ALU | BPF_AND | BPF_K, d, 0, 0, i)
#define RSH32_IMM(d, i)  INSN(BPF_ALU | BPF_RSH | BPF_K, d, 0, 0, i)
#define JNE_IMM(d, i, o) INSN(BPF_JMP | BPF_JNE | BPF_K, d, 0, o, i)
#define EXIT()           INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)

/* The most instructions emit_rule writes for one rule, and the program's own around them. */
#define RULE_MAX_INSNS 8
#define PROG_FRAME     8

/* One rule: jumps past itself unless type, access, major and minor all match, then returns 1
 * (allow). Returns the number of instructions written. */
static size_t
emit_rule(const struct xmp_dev_rule *r, struct bpf_insn *out)
{
    struct bpf_insn body[RULE_MAX_INSNS];
    size_t n = 0;
    int type = r->type == 'c' ? BPF_DEVCG_DEV_CHAR : r->type == 'b' ? BPF_DEVCG_DEV_BLOCK : 0;
    unsigned all = XMP_DEV_READ | XMP_DEV_WRITE | XMP_DEV_MKNOD;

    /* Registers: r2 type, r3 requested access, r4 major, r5 minor (see xmp_devices_attach_bpf).
     * Jump offsets are patched once the rule's length is known: each test skips to its end. */
    if (type != 0)
        body[n++] = JNE_IMM(BPF_REG_2, type, 0);
    if ((r->access & all) != all) {
        /* Allowed only when the request asks for nothing beyond the rule's access. */
        body[n++] = MOV64_REG(BPF_REG_1, BPF_REG_3);
        body[n++] = AND32_IMM(BPF_REG_1, (int)(~r->access & all));
        body[n++] = JNE_IMM(BPF_REG_1, 0, 0);
    }
    if (r->major != XMP_DEV_ANY)
        body[n++] = JNE_IMM(BPF_REG_4, r->major, 0);
    if (r->minor != XMP_DEV_ANY)
        body[n++] = JNE_IMM(BPF_REG_5, r->minor, 0);
    body[n++] = MOV64_IMM(BPF_REG_0, 1);
    body[n++] = EXIT();
    for (size_t i = 0; i < n; i++) {
        if (body[i].code == (BPF_JMP | BPF_JNE | BPF_K))
            body[i].off = (short)(n - i - 1);
        out[i] = body[i];
    }
    return n;
}

static int
load_program(const struct xmp_dev_rules *rules, struct xmp_error *err)
{
    /* Sized from the rules, as crun's ebpf_create grows its program: a job whose every worker
     * may open all of a node's GPUs and HCAs has no rule count to stay below. */
    cleanup_free struct bpf_insn *prog =
        calloc(PROG_FRAME + rules->n * RULE_MAX_INSNS, sizeof(*prog));
    size_t n = 0;
    char log[1024] = "";

    if (prog == NULL)
        return xmp_error_set(err, ENOMEM, "device filter: %zu rules", rules->n);

    /* struct bpf_cgroup_dev_ctx { u32 access_type; u32 major; u32 minor; }, where
     * access_type is (access << 16) | type. */
    prog[n++] = LDX_W(BPF_REG_2, BPF_REG_1, 0);
    prog[n++] = MOV64_REG(BPF_REG_3, BPF_REG_2);
    prog[n++] = AND32_IMM(BPF_REG_2, 0xffff);
    prog[n++] = RSH32_IMM(BPF_REG_3, 16);
    prog[n++] = LDX_W(BPF_REG_4, BPF_REG_1, 4);
    prog[n++] = LDX_W(BPF_REG_5, BPF_REG_1, 8);
    for (size_t i = 0; i < rules->n; i++)
        n += emit_rule(&rules->r[i], prog + n);
    prog[n++] = MOV64_IMM(BPF_REG_0, 0);
    prog[n++] = EXIT();

    union bpf_attr load;
    memset(&load, 0, sizeof(load));
    load.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
    load.insns = (uint64_t)(uintptr_t)prog;
    load.insn_cnt = (uint32_t)n;
    load.license = (uint64_t)(uintptr_t) "GPL";
    int progfd = (int)syscall(SYS_bpf, BPF_PROG_LOAD, &load, sizeof(load));
    if (progfd < 0) {
        int saved = errno;
        /* Again with the verifier's log, for the message (a log that does not fit makes a
         * load fail on its own, so the first try has none). */
        load.log_buf = (uint64_t)(uintptr_t)log;
        load.log_size = sizeof(log);
        load.log_level = 1;
        int again = (int)syscall(SYS_bpf, BPF_PROG_LOAD, &load, sizeof(load));
        if (again >= 0) {
            close(again);
            log[0] = '\0';
        }
        log[sizeof(log) - 1] = '\0';
        errno = saved;
        return xmp_error_set(err, errno, "device filter: load the BPF device program%s%.120s",
                             log[0] ? ": " : "", log);
    }

    return progfd;
}

/* Field by field: the structs' padding is not necessarily zero. */
static bool
same_rules(const struct xmp_dev_rules *a, const struct xmp_dev_rules *b)
{
    if (a->n != b->n)
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (a->r[i].type != b->r[i].type || a->r[i].major != b->r[i].major ||
            a->r[i].minor != b->r[i].minor || a->r[i].access != b->r[i].access)
            return false;
    return true;
}

void
xmp_devices_prog_release(struct xmp_dev_prog *cache)
{
    if (cache->fd >= 0)
        close(cache->fd);
    cache->fd = -1;
    xmp_devices_free(&cache->rules);
}

int
xmp_devices_attach_bpf(int cgfd, const struct xmp_dev_rules *rules, struct xmp_dev_prog *cache,
                       struct xmp_error *err)
{
    if (cache->fd < 0 || !same_rules(&cache->rules, rules)) {
        int fd = load_program(rules, err);
        if (fd < 0)
            return -1;
        xmp_devices_prog_release(cache);
        /* A copy: the rules are the caller's, and may be gone by the next worker's. */
        if (!xmp_devices_copy(&cache->rules, rules)) {
            close(fd);
            xmp_devices_free(&cache->rules);
            return xmp_error_set(err, ENOMEM, "device filter");
        }
        cache->fd = fd;
    }

    union bpf_attr attach;
    memset(&attach, 0, sizeof(attach));
    attach.target_fd = (uint32_t)cgfd;
    attach.attach_bpf_fd = (uint32_t)cache->fd;
    attach.attach_type = BPF_CGROUP_DEVICE;
    attach.attach_flags = BPF_F_ALLOW_MULTI;
    if (syscall(SYS_bpf, BPF_PROG_ATTACH, &attach, sizeof(attach)) < 0)
        return explain_attach(cgfd, errno, err);
    /* The attachment holds its own reference: the cgroup's removal frees the program once the
     * job's cache has let go of it too. */
    return 0;
}
