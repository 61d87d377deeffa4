/* Device filtering for a worker's cgroup: the device nodes it may open (its own accelerator's,
 * the shared control nodes, and the ordinary ones every process needs), enforced by the v1
 * devices controller or, on cgroup v2, by a BPF_PROG_TYPE_CGROUP_DEVICE program attached to its
 * cgroup, as runc and crun do. Rules are plain numbers; runner/ reads them from the host. */
#ifndef XMP_DEVICES_H
#define XMP_DEVICES_H

#include "isolate/error.h"

#include <stdbool.h>
#include <stddef.h>

/* The kernel's bits (BPF_DEVCG_ACC_*), also used for v1's "rwm". */
enum { XMP_DEV_MKNOD = 1, XMP_DEV_READ = 2, XMP_DEV_WRITE = 4 };

#define XMP_DEV_ANY (-1)

struct xmp_dev_rule {
    char type; /* 'c' character, 'b' block, 'a' both */
    int major; /* XMP_DEV_ANY for every major */
    int minor; /* XMP_DEV_ANY for every minor */
    unsigned access;
    /* For an enclosing devices cgroup that denies the node: a node the worker cannot run
     * without (its accelerator) is a setup error, any other is left out with a note. */
    bool required;
    char what[32]; /* for those messages: "cuda:2 (/dev/nvidia2)"; "" for the ordinary nodes */
};

/* An allowlist: anything it does not allow is refused (EPERM at open or mknod). It grows with
 * its rules, as crun's does: a node with 8 GPUs and 8 HCAs whose workers may each open all of
 * them needs some 40 rules, and no count is the last one a host can need. {0} is an empty list;
 * xmp_devices_free releases one. A copy of the struct shares the rules (the plan owns them). */
struct xmp_dev_rules {
    size_t n;
    size_t cap;
    struct xmp_dev_rule *r;
};

/* Appends the nodes every process needs (null, zero, full, random, urandom, tty, ptmx, the pts
 * terminals) and mknod of any node (opening it is still checked), as Docker allows them. False
 * when memory ran out. */
bool xmp_devices_add_defaults(struct xmp_dev_rules *rules);
/* Appends one rule; returns it (to name it; valid until the next add), or NULL when memory ran
 * out. */
struct xmp_dev_rule *xmp_devices_add(struct xmp_dev_rules *rules, char type, int major, int minor,
                                     unsigned access);
/* Appends a copy of r (its name and required flag too); false when memory ran out. */
bool xmp_devices_append(struct xmp_dev_rules *rules, const struct xmp_dev_rule *r);
/* Copies src into dst, which is emptied first; false when memory ran out. */
bool xmp_devices_copy(struct xmp_dev_rules *dst, const struct xmp_dev_rules *src);
/* Releases the rules and leaves an empty list. */
void xmp_devices_free(struct xmp_dev_rules *rules);
#define cleanup_dev_rules __attribute__((cleanup(xmp_devices_free)))

/* ---- composing with an enclosing v1 devices cgroup ----
 * A v1 devices cgroup can never allow what its parent does not: the kernel refuses such an
 * allow with EPERM. So a worker gets the intersection of its rules and the parent's. */

/* Parses a v1 devices.list ("a *:* rwm", "c 195:0 rw", one a line) into out (at most max
 * rules). Returns how many, or -1 for a line it does not understand or more than max. */
int xmp_devices_parse_list(const char *text, struct xmp_dev_rule *out, size_t max);
/* The devices and access both a and b allow, in out (a's name); false when there are none. */
bool xmp_devices_intersect(const struct xmp_dev_rule *a, const struct xmp_dev_rule *b,
                           struct xmp_dev_rule *out);
/* What of want the parent list allows, in out: a rule the parent holds as it is, else its
 * intersection with each parent rule (a wildcard the parent lacks becomes the nodes the parent
 * holds). A node of want that the parent does not allow in full goes to denied instead. out and
 * denied are emptied first and grow as needed (the caller frees them); false when memory ran
 * out. Note that a v1 list in its default-allow mode reads "a *:* rwm" whatever
 * it denies: the kernel's EPERM at the write is what tells those (see cgroup_v1.c). */
bool xmp_devices_compose(const struct xmp_dev_rules *want, const struct xmp_dev_rule *parent,
                         size_t n_parent, struct xmp_dev_rules *out, struct xmp_dev_rules *denied);

/* A loaded BPF device program and a copy of the rules it holds (fd -1: none yet). */
struct xmp_dev_prog {
    int fd;
    struct xmp_dev_rules rules;
};

/* cgroup2: attaches the rules as a BPF device program (BPF_F_ALLOW_MULTI, so that an enclosing
 * container's program still applies) to the cgroup2 directory cgfd. Where an enclosing cgroup's
 * program was attached without that flag, the kernel refuses (EPERM): the error names it. The
 * program is loaded only when cache holds other rules: the workers of a job with the same rules
 * (every worker of a CPU job) share one, since verifying and compiling it took about 1 ms per
 * worker. */
int xmp_devices_attach_bpf(int cgfd, const struct xmp_dev_rules *rules, struct xmp_dev_prog *cache,
                           struct xmp_error *err);
void xmp_devices_prog_release(struct xmp_dev_prog *cache);

/* "c 195:0 rw" (v1 syntax, "*" for XMP_DEV_ANY). */
void xmp_devices_format(const struct xmp_dev_rule *r, char *buf, size_t size);

#endif
