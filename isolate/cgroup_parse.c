/* cgroups, the pure part: mode names, the /proc/<pid>/cgroup and mountinfo parsers, joining a
 * cgroup path with its mount, the limits' kernel text and the CPU list format. No I/O, so unit
 * tests cover it all. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* cpu_set_t macros */
#endif
#include "isolate/cgroup.h"
#include "isolate/cgroup_internal.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *
xmp_cgroup_mode_name(enum xmp_cgroup_mode mode)
{
    switch (mode) {
    case XMP_CGROUP_MODE_NONE:
        return "none";
    case XMP_CGROUP_MODE_LEGACY:
        return "legacy";
    case XMP_CGROUP_MODE_HYBRID:
        return "hybrid";
    case XMP_CGROUP_MODE_UNIFIED:
        return "unified";
    }
    return "unknown";
}

const char *
xmp_cgroup_manager_name(enum xmp_cgroup_manager manager)
{
    switch (manager) {
    case XMP_CGROUP_MANAGER_AUTO:
        return "auto";
    case XMP_CGROUP_MANAGER_CGROUPFS:
        return "cgroupfs";
    case XMP_CGROUP_MANAGER_SYSTEMD:
        return "systemd";
    }
    return "unknown";
}

void
xmp_limits_init(struct xmp_limits *limits)
{
    memset(limits, 0, sizeof(*limits));
    limits->memory = -1;
    limits->memory_high = -1;
    limits->memory_min = -1;
    limits->swap = -1;
    limits->cpus_milli = -1;
    limits->pids = -1;
    limits->has_cpus = false;
    CPU_ZERO(&limits->cpus);
}

unsigned
xmp_limits_uses(const struct xmp_limits *l)
{
    unsigned uses = 0;

    if (l->memory >= 0 || l->memory_high >= 0 || l->memory_min >= 0 || l->swap >= 0)
        uses |= XMP_CG_MEMORY;
    if (l->cpus_milli >= 0)
        uses |= XMP_CG_CPU;
    if (l->pids >= 0)
        uses |= XMP_CG_PIDS;
    if (l->has_cpus)
        uses |= l->cpus_auto ? XMP_CG_CPUSET_AUTO : XMP_CG_CPUSET;
    return uses;
}

/* ---- pure helpers ---- */

static bool
list_has(const char *list, size_t len, const char *word)
{
    size_t wl = strlen(word);
    const char *p = list, *end = list + len;

    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        size_t l = comma ? (size_t)(comma - p) : (size_t)(end - p);
        if (l == wl && memcmp(p, word, wl) == 0)
            return true;
        p += l + 1;
    }
    return false;
}

int
xmp_cgroup_parse_proc(const char *text, const char *controller, char *path, size_t size,
                      int *hier_id, struct xmp_error *err)
{
    const char *line = text;

    while (line != NULL && *line != '\0') {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        const char *c1 = memchr(line, ':', len);
        const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
        char *endp = NULL;
        long id;

        if (len == 0) {
            line = eol ? eol + 1 : NULL;
            continue;
        }
        if (c1 == NULL || c2 == NULL)
            return xmp_error_set(err, EINVAL, "/proc/self/cgroup: malformed line \"%.*s\"",
                                 (int)(len > 80 ? 80 : len), line);
        id = strtol(line, &endp, 10);
        if (endp != c1 || id < 0)
            return xmp_error_set(err, EINVAL, "/proc/self/cgroup: malformed line \"%.*s\"",
                                 (int)(len > 80 ? 80 : len), line);
        size_t clen = (size_t)(c2 - c1 - 1);
        bool match = controller[0] == '\0' ? (id == 0 && clen == 0)
                                           : (clen > 0 && list_has(c1 + 1, clen, controller));
        if (match) {
            size_t plen = len - (size_t)(c2 + 1 - line);
            if (plen + 1 > size)
                return xmp_error_set(err, ENAMETOOLONG, "/proc/self/cgroup: path too long");
            memcpy(path, c2 + 1, plen);
            path[plen] = '\0';
            if (hier_id != NULL)
                *hier_id = (int)id;
            return 0;
        }
        line = eol ? eol + 1 : NULL;
    }
    return xmp_error_set(err, ENOENT, "/proc/self/cgroup: no hierarchy for %s",
                         controller[0] ? controller : "cgroup2");
}

static bool
is_octal(char c)
{
    return c >= '0' && c <= '7';
}

/* Copies a mountinfo field, decoding the \ooo escapes the kernel uses for space, tab, newline
 * and backslash. */
static int
unescape_field(const char *src, size_t len, char *dst, size_t size)
{
    size_t o = 0;

    for (size_t i = 0; i < len; i++) {
        char c = src[i];
        if (c == '\\' && i + 3 < len && is_octal(src[i + 1]) && is_octal(src[i + 2]) &&
            is_octal(src[i + 3])) {
            c = (char)(((src[i + 1] - '0') << 6) | ((src[i + 2] - '0') << 3) | (src[i + 3] - '0'));
            i += 3;
        }
        if (o + 1 >= size)
            return -1;
        dst[o++] = c;
    }
    dst[o] = '\0';
    return 0;
}

/* One mountinfo line, split: mount root, mount point (both still escaped), file system type and
 * super options. False for a line that does not have the fields. */
struct mi_line {
    const char *root, *mnt, *fs, *super;
    size_t root_len, mnt_len, fs_len, super_len;
};

static bool
split_mountinfo_line(const char *line, size_t len, struct mi_line *ml)
{
    const char *f[6] = {0};
    size_t fl[6] = {0};
    const char *p = line, *end = line + len;
    int nf = 0;

    /* Fields: id parent major:minor root mountpoint options [optional...] - fstype source
     * superoptions. */
    while (nf < 6 && p < end) {
        const char *sp = memchr(p, ' ', (size_t)(end - p));
        f[nf] = p;
        fl[nf] = sp ? (size_t)(sp - p) : (size_t)(end - p);
        nf++;
        p = sp ? sp + 1 : end;
    }
    if (nf < 6)
        return false;
    ml->root = f[3];
    ml->root_len = fl[3];
    ml->mnt = f[4];
    ml->mnt_len = fl[4];
    const char *dash = NULL;
    for (const char *q = p; q + 2 <= end; q++) {
        if ((q == p || q[-1] == ' ') && q[0] == '-' && (q + 1 == end || q[1] == ' ')) {
            dash = q;
            break;
        }
    }
    if (dash == NULL || dash + 2 >= end)
        return false;
    ml->fs = dash + 2;
    const char *fse = memchr(ml->fs, ' ', (size_t)(end - ml->fs));
    ml->fs_len = fse ? (size_t)(fse - ml->fs) : (size_t)(end - ml->fs);
    ml->super = NULL;
    ml->super_len = 0;
    if (fse != NULL) {
        const char *src = fse + 1;
        const char *srce = memchr(src, ' ', (size_t)(end - src));
        if (srce != NULL) {
            ml->super = srce + 1;
            ml->super_len = (size_t)(end - srce - 1);
        }
    }
    return true;
}

/* True when a mount at `over` (escaped, as in mountinfo) hides what is mounted at `mnt`: it is
 * mounted on the same point or on a directory above it. */
static bool
hides(const char *over, size_t over_len, const char *mnt, size_t mnt_len)
{
    if (over_len == 1 && over[0] == '/')
        return true;
    return over_len <= mnt_len && memcmp(over, mnt, over_len) == 0 &&
           (over_len == mnt_len || mnt[over_len] == '/');
}

#define MI_MAX_CANDIDATES 16

int
xmp_cgroup_parse_mountinfo(const char *text, const char *controller, char *mnt, size_t mnt_size,
                           char *root, size_t root_size, struct xmp_error *err)
{
    /* A private mount namespace may list cgroup mounts that later mounts cover (a tmpfs over
     * /sys/fs/cgroup, then fresh hierarchies, as Slurm's or a container's setup does); their
     * roots ("/../..") belong to another cgroup namespace. The mount that counts is the one
     * visible at its path: the last one on a mount point, and none that a later mount on the
     * same point or a directory above it covers. mountinfo lists mounts in the order they
     * were made. */
    struct {
        struct mi_line ml;
        const char *hidden_by;
        size_t hidden_by_len;
    } cand[MI_MAX_CANDIDATES];
    size_t n = 0;

    for (const char *line = text; line != NULL && *line != '\0';) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        struct mi_line ml;

        const char *cur = line;

        line = eol ? eol + 1 : NULL;
        if (!split_mountinfo_line(cur, len, &ml))
            continue;
        for (size_t i = 0; i < n; i++)
            if (cand[i].hidden_by == NULL &&
                hides(ml.mnt, ml.mnt_len, cand[i].ml.mnt, cand[i].ml.mnt_len)) {
                cand[i].hidden_by = ml.mnt;
                cand[i].hidden_by_len = ml.mnt_len;
            }
        bool match = false;
        if (controller == NULL)
            match = ml.fs_len == 7 && memcmp(ml.fs, "cgroup2", 7) == 0;
        else if (ml.fs_len == 6 && memcmp(ml.fs, "cgroup", 6) == 0 && ml.super != NULL)
            match = list_has(ml.super, ml.super_len, controller);
        if (!match)
            continue;
        if (n == MI_MAX_CANDIDATES) {
            /* Keep the newest: drop the oldest hidden one (or the oldest). */
            size_t drop = 0;
            for (size_t i = 0; i < n; i++)
                if (cand[i].hidden_by != NULL) {
                    drop = i;
                    break;
                }
            memmove(&cand[drop], &cand[drop + 1], (n - drop - 1) * sizeof(cand[0]));
            n--;
        }
        cand[n].ml = ml;
        cand[n].hidden_by = NULL;
        cand[n].hidden_by_len = 0;
        n++;
    }
    for (size_t i = n; i-- > 0;) {
        if (cand[i].hidden_by != NULL)
            continue;
        if (unescape_field(cand[i].ml.mnt, cand[i].ml.mnt_len, mnt, mnt_size) < 0 ||
            unescape_field(cand[i].ml.root, cand[i].ml.root_len, root, root_size) < 0)
            return xmp_error_set(err, ENAMETOOLONG, "mountinfo: path too long");
        return 0;
    }
    if (n > 0) {
        char at[256], by[256];
        if (unescape_field(cand[n - 1].ml.mnt, cand[n - 1].ml.mnt_len, at, sizeof(at)) < 0 ||
            unescape_field(cand[n - 1].hidden_by, cand[n - 1].hidden_by_len, by, sizeof(by)) < 0) {
            snprintf(at, sizeof(at), "?");
            snprintf(by, sizeof(by), "?");
        }
        /* No strerror: the message says it all, and a caller may add advice to it. */
        xmp_error_set(err, 0, "the %s mount%s%s at %s is hidden by a later mount at %s",
                      controller ? "cgroup" : "cgroup2", controller ? " with " : "",
                      controller ? controller : "", at, by);
        if (err != NULL)
            err->errnum = ENOENT;
        return -1;
    }
    return xmp_error_set(err, ENOENT, "mountinfo: no %s mount%s%s",
                         controller ? "cgroup" : "cgroup2", controller ? " with " : "",
                         controller ? controller : "");
}

int
xmp_cgroup_join(const char *mnt, const char *root, const char *path, char *buf, size_t size,
                struct xmp_error *err)
{
    size_t rl = strlen(root);
    const char *rest;
    int n;

    if (strcmp(root, "/") == 0) {
        rest = path;
    } else if (strncmp(path, root, rl) == 0 && (path[rl] == '\0' || path[rl] == '/')) {
        rest = path + rl;
    } else {
        return xmp_error_set(err, ENOENT,
                             "cgroup %s is not below the root %s of the hierarchy mounted at %s",
                             path, root, mnt);
    }
    while (*rest == '/')
        rest++;
    n = snprintf(buf, size, "%s%s%s", mnt, *rest ? "/" : "", rest);
    if (n < 0 || (size_t)n >= size)
        return xmp_error_set(err, ENAMETOOLONG, "cgroup path %s/%s", mnt, rest);
    return 0;
}

void
xmp_cgroup_own_normalize(char *path)
{
    char *slash = strrchr(path, '/');

    if (slash != NULL && strncmp(slash + 1, "xmprun-self-", 12) == 0)
        *(slash == path ? slash + 1 : slash) = '\0';
}

bool
xmp_cgroup_self_leaf_pid(const char *name, pid_t *pid)
{
    char *end = NULL;
    long v;

    if (strncmp(name, "xmprun-self-", 12) != 0 || name[12] < '1' || name[12] > '9')
        return false;
    errno = 0;
    v = strtol(name + 12, &end, 10);
    if (errno != 0 || *end != '\0' || v <= 0 || v > INT32_MAX)
        return false;
    *pid = (pid_t)v;
    return true;
}

int64_t
xmp_cgroup_cfs_quota(int64_t cpus_milli)
{
    if (cpus_milli < 0)
        return -1;
    if (cpus_milli > INT64_MAX / 100)
        return -1;
    return cpus_milli * 100 < 1000 ? 1000 : cpus_milli * 100;
}

int
xmp_cgroup_format_cpu_max(int64_t cpus_milli, char *buf, size_t size)
{
    int64_t q = xmp_cgroup_cfs_quota(cpus_milli);
    int n =
        q < 0 ? snprintf(buf, size, "max 100000") : snprintf(buf, size, "%" PRId64 " 100000", q);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

int64_t
xmp_cgroup_memsw(int64_t memory, int64_t swap)
{
    if (memory < 0 || swap < 0 || swap > INT64_MAX - memory)
        return -1;
    return memory + swap;
}

static int
parse_cpu_number(const char **p, long *out)
{
    char *end = NULL;

    if (!isdigit((unsigned char)**p))
        return -1;
    errno = 0;
    *out = strtol(*p, &end, 10);
    if (errno != 0 || *out >= CPU_SETSIZE)
        return -1;
    *p = end;
    return 0;
}

int
xmp_cpulist_parse(const char *text, cpu_set_t *out, struct xmp_error *err)
{
    const char *p = text;
    cpu_set_t set;

    CPU_ZERO(&set);
    while (isspace((unsigned char)*p))
        p++;
    /* The kernel writes an empty list (just "\n") for a node or device without CPUs. */
    while (*p != '\0' && !isspace((unsigned char)*p)) {
        long lo = 0, hi = 0;
        const char *start = p;

        if (parse_cpu_number(&p, &lo) < 0)
            return xmp_error_set(err, 0,
                                 "bad CPU list \"%s\": expected a CPU number (0-%d) at \"%s\"",
                                 text, CPU_SETSIZE - 1, start);
        hi = lo;
        if (*p == '-') {
            p++;
            if (parse_cpu_number(&p, &hi) < 0)
                return xmp_error_set(err, 0,
                                     "bad CPU list \"%s\": expected a CPU number (0-%d) after '-'",
                                     text, CPU_SETSIZE - 1);
            if (hi < lo)
                return xmp_error_set(err, 0, "bad CPU list \"%s\": range %ld-%ld is reversed", text,
                                     lo, hi);
        }
        for (long c = lo; c <= hi; c++)
            CPU_SET((int)c, &set);
        if (*p == ',') {
            p++;
            if (*p == '\0' || isspace((unsigned char)*p))
                return xmp_error_set(err, 0, "bad CPU list \"%s\": trailing ','", text);
        } else if (*p != '\0' && !isspace((unsigned char)*p)) {
            return xmp_error_set(err, 0, "bad CPU list \"%s\": unexpected '%c'", text, *p);
        }
    }
    while (isspace((unsigned char)*p))
        p++;
    if (*p != '\0')
        return xmp_error_set(err, 0, "bad CPU list \"%s\": unexpected text after the list", text);
    *out = set;
    return 0;
}

int
xmp_cpulist_format(const cpu_set_t *set, char *buf, size_t size)
{
    size_t len = 0;

    if (size == 0)
        return -1;
    buf[0] = '\0';
    for (int c = 0; c < CPU_SETSIZE; c++) {
        int hi = c;
        int n;

        if (!CPU_ISSET(c, set))
            continue;
        while (hi + 1 < CPU_SETSIZE && CPU_ISSET(hi + 1, set))
            hi++;
        if (hi == c)
            n = snprintf(buf + len, size - len, "%s%d", len ? "," : "", c);
        else
            n = snprintf(buf + len, size - len, "%s%d-%d", len ? "," : "", c, hi);
        if (n < 0 || (size_t)n >= size - len) {
            buf[len] = '\0'; /* truncated: never leave half a range behind */
            return -1;
        }
        len += (size_t)n;
        c = hi;
    }
    return 0;
}

int64_t
xmp_cgroup_ticks_to_usec(int64_t ticks, long hz)
{
    if (ticks < 0 || hz <= 0)
        return -1;
    return ticks / hz * 1000000 + ticks % hz * 1000000 / hz;
}
