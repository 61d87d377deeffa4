/* Device filtering (see devices.h): the rules, and the same rules compiled into a small eBPF
 * program of the kind runc and crun attach on cgroup v2 (cgroup_v1.c writes them to the v1
 * devices controller's list). Plain syscalls only, so that bench/baseline.c attaches the very
 * program xmprun does without linking libcgroup. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "isolate/devices.h"

#include "isolate/cleanup.h"

#include <errno.h>
#include <linux/bpf.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

bool
xmp_devices_add(struct xmp_dev_rules *rules, char type, int major, int minor, unsigned access)
{
    if (rules->n >= XMP_DEV_MAX_RULES)
        return false;
    rules->r[rules->n++] = (struct xmp_dev_rule){type, major, minor, access};
    return true;
}

void
xmp_devices_add_defaults(struct xmp_dev_rules *rules)
{
    static const int chars[][2] = {
        {1, 3}, /* null */ {1, 5},    /* zero */ {1, 7}, /* full */ {1, 8}, /* random */
        {1, 9}, /* urandom */ {5, 0}, /* tty */ {5, 2},                     /* ptmx */
    };
    const unsigned rwm = XMP_DEV_READ | XMP_DEV_WRITE | XMP_DEV_MKNOD;

    xmp_devices_add(rules, 'c', XMP_DEV_ANY, XMP_DEV_ANY, XMP_DEV_MKNOD);
    xmp_devices_add(rules, 'b', XMP_DEV_ANY, XMP_DEV_ANY, XMP_DEV_MKNOD);
    for (size_t i = 0; i < sizeof(chars) / sizeof(chars[0]); i++)
        xmp_devices_add(rules, 'c', chars[i][0], chars[i][1], rwm);
    /* The pseudo-terminal slaves (/dev/pts/N) use majors 136-143 (Documentation/admin-guide/
     * devices.txt: "Unix98 PTY slaves"). */
    for (int major = 136; major <= 143; major++)
        xmp_devices_add(rules, 'c', major, XMP_DEV_ANY, rwm);
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

/* One rule: jumps past itself unless type, access, major and minor all match, then returns 1
 * (allow). Returns the number of instructions written. */
static size_t
emit_rule(const struct xmp_dev_rule *r, struct bpf_insn *out)
{
    struct bpf_insn body[8];
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
    struct bpf_insn prog[8 + XMP_DEV_MAX_RULES * 8];
    size_t n = 0;
    char log[1024] = "";

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
        cache->fd = fd;
        cache->rules = *rules;
    }

    union bpf_attr attach;
    memset(&attach, 0, sizeof(attach));
    attach.target_fd = (uint32_t)cgfd;
    attach.attach_bpf_fd = (uint32_t)cache->fd;
    attach.attach_type = BPF_CGROUP_DEVICE;
    attach.attach_flags = BPF_F_ALLOW_MULTI;
    if (syscall(SYS_bpf, BPF_PROG_ATTACH, &attach, sizeof(attach)) < 0)
        return xmp_error_set(err, errno, "device filter: attach the BPF device program");
    /* The attachment holds its own reference: the cgroup's removal frees the program once the
     * job's cache has let go of it too. */
    return 0;
}
