/* The device filter's composition with an enclosing v1 devices cgroup: devices.list parsing and
 * the intersection of a worker's rules with the parent's (isolate/devices.c). The kernel side
 * (EPERM for a hidden deny, the allowlist a worker gets) is tested end to end in
 * tests/e2e/test_device_filter.c and, under Slurm, tests/scripts/test_slurm_modes.sh. */
#include "isolate/devices.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

static const unsigned RW = XMP_DEV_READ | XMP_DEV_WRITE;
static const unsigned RWM = XMP_DEV_READ | XMP_DEV_WRITE | XMP_DEV_MKNOD;

static void
format_all(const struct xmp_dev_rules *r, char *buf, size_t size)
{
    buf[0] = '\0';
    for (size_t i = 0; i < r->n; i++) {
        char line[64];
        size_t len = strlen(buf);
        xmp_devices_format(&r->r[i], line, sizeof(line));
        snprintf(buf + len, size - len, "%s%s", i > 0 ? "; " : "", line);
    }
}

Test(devices, parses_a_devices_list)
{
    struct xmp_dev_rule r[8];
    int n = xmp_devices_parse_list("a *:* rwm\nc 195:255 rw\nb 8:* r\nc *:* m\n", r, 8);

    cr_assert_eq(n, 4);
    cr_expect_eq(r[0].type, 'a');
    cr_expect_eq(r[0].major, XMP_DEV_ANY);
    cr_expect_eq(r[0].access, RWM);
    cr_expect_eq(r[1].major, 195);
    cr_expect_eq(r[1].minor, 255);
    cr_expect_eq(r[1].access, RW);
    cr_expect_eq(r[2].type, 'b');
    cr_expect_eq(r[2].minor, XMP_DEV_ANY);
    cr_expect_eq(r[2].access, XMP_DEV_READ);
    cr_expect_eq(r[3].access, XMP_DEV_MKNOD);
    cr_expect_eq(xmp_devices_parse_list("", r, 8), 0, "an empty list denies everything");
    cr_expect_eq(xmp_devices_parse_list("c 1:3 rwx\n", r, 8), -1);
    cr_expect_eq(xmp_devices_parse_list("c 1 rw\n", r, 8), -1);
    cr_expect_eq(xmp_devices_parse_list("x 1:3 rw\n", r, 8), -1);
    cr_expect_eq(xmp_devices_parse_list("c 1:3 r\nc 1:5 r\n", r, 1), -1, "more than max");
}

/* A parent that allows everything (v1's default-allow mode) leaves the rules as they are. */
Test(devices, an_allow_all_parent_changes_nothing)
{
    cleanup_dev_rules struct xmp_dev_rules want = {0}, out = {0}, denied = {0};
    struct xmp_dev_rule parent[1];
    char got[1024];

    xmp_devices_add_defaults(&want);
    xmp_devices_add(&want, 'c', 195, 0, RW)->required = true;
    cr_assert_eq(xmp_devices_parse_list("a *:* rwm\n", parent, 1), 1);
    cr_assert(xmp_devices_compose(&want, parent, 1, &out, &denied));
    cr_expect_eq(denied.n, 0);
    cr_assert_eq(out.n, want.n);
    for (size_t i = 0; i < want.n; i++)
        cr_expect(memcmp(&out.r[i], &want.r[i], sizeof(out.r[i])) == 0, "rule %zu changed", i);
    format_all(&out, got, sizeof(got));
    cr_expect(strstr(got, "c *:* m; b *:* m;") == got, "%s", got);
}

/* An allowlist parent (Docker's, DevicePolicy=closed, a Slurm step's on some sites): a wildcard
 * it lacks becomes the nodes it holds, with the access both allow; a node it does not allow in
 * full is denied, named as the worker's rule names it. */
Test(devices, an_allowlist_parent_narrows_wildcards_and_denies_nodes)
{
    cleanup_dev_rules struct xmp_dev_rules want = {0}, out = {0}, denied = {0};
    struct xmp_dev_rule parent[8];
    char got[1024];

    xmp_devices_add(&want, 'c', XMP_DEV_ANY, XMP_DEV_ANY, XMP_DEV_MKNOD);
    xmp_devices_add(&want, 'c', 1, 3, RWM);
    xmp_devices_add(&want, 'c', 136, XMP_DEV_ANY, RWM);
    struct xmp_dev_rule *gpu = xmp_devices_add(&want, 'c', 195, 2, RW);
    gpu->required = true;
    snprintf(gpu->what, sizeof(gpu->what), "cuda:0 (/dev/nvidia2)");
    xmp_devices_add(&want, 'c', 195, 255, RW);
    int n = xmp_devices_parse_list("c 1:3 rwm\nc 136:* rw\nc 195:255 r\nc 195:0 rwm\n", parent, 8);
    cr_assert_eq(n, 4);
    cr_assert(xmp_devices_compose(&want, parent, (size_t)n, &out, &denied));
    format_all(&out, got, sizeof(got));
    cr_expect_str_eq(got, "c 1:3 m; c 195:0 m; c 1:3 rwm; c 136:* rw; c 195:255 r");
    cr_assert_eq(denied.n, 2, "denied: %zu", denied.n);
    cr_expect_eq(denied.r[0].minor, 2);
    cr_expect(denied.r[0].required);
    cr_expect_str_eq(denied.r[0].what, "cuda:0 (/dev/nvidia2)");
    cr_expect_eq(denied.r[1].minor, 255, "a node allowed in part is denied");
    cr_expect(!denied.r[1].required);
}

/* No ceiling: a node with 8 GPUs and 8 HCAs whose workers may each open all of them (job mode)
 * needs some 40 rules, and the list (and the BPF program built from it) grows with whatever a
 * host has. Composing keeps every rule too. */
Test(devices, the_rules_grow_without_a_ceiling)
{
    cleanup_dev_rules struct xmp_dev_rules want = {0}, out = {0}, denied = {0};
    cleanup_dev_rules struct xmp_dev_rules copy = {0};
    struct xmp_dev_rule parent[1];

    cr_assert(xmp_devices_add_defaults(&want));
    size_t base = want.n;
    for (int i = 0; i < 1000; i++) {
        struct xmp_dev_rule *r = xmp_devices_add(&want, 'c', 195, i, RW);
        cr_assert_not_null(r, "rule %d", i);
        snprintf(r->what, sizeof(r->what), "n%d", i);
    }
    cr_assert_eq(want.n, base + 1000);
    cr_expect_eq(want.r[base + 999].minor, 999);
    cr_expect_str_eq(want.r[base + 999].what, "n999");
    cr_assert_eq(xmp_devices_parse_list("c 195:* rw\n", parent, 1), 1);
    cr_assert(xmp_devices_compose(&want, parent, 1, &out, &denied));
    cr_expect_eq(out.n, 1000, "the parent holds the 1000 GPU nodes and none of the defaults");
    cr_expect_eq(denied.n, 7, "the 7 default nodes are denied: %zu", denied.n);
    cr_assert(xmp_devices_copy(&copy, &want));
    cr_expect_eq(copy.n, want.n);
    cr_expect_neq(copy.r, want.r, "a copy has rules of its own");
    xmp_devices_free(&copy);
    cr_expect_eq(copy.n, 0);
    cr_expect_null(copy.r);
}

Test(devices, intersections)
{
    struct xmp_dev_rule a = {
        .type = 'a', .major = XMP_DEV_ANY, .minor = XMP_DEV_ANY, .access = RWM};
    struct xmp_dev_rule c = {.type = 'c', .major = 195, .minor = XMP_DEV_ANY, .access = RW};
    struct xmp_dev_rule b = {.type = 'b', .major = 8, .minor = 0, .access = RWM};
    struct xmp_dev_rule m = {
        .type = 'c', .major = XMP_DEV_ANY, .minor = 3, .access = XMP_DEV_MKNOD};
    struct xmp_dev_rule x;

    cr_assert(xmp_devices_intersect(&a, &c, &x));
    cr_expect(x.type == 'c' && x.major == 195 && x.minor == XMP_DEV_ANY && x.access == RW);
    cr_expect(!xmp_devices_intersect(&c, &b, &x), "char and block do not meet");
    cr_expect(!xmp_devices_intersect(&c, &m, &x), "no access in common");
    m.access = RWM;
    cr_assert(xmp_devices_intersect(&c, &m, &x));
    cr_expect(x.major == 195 && x.minor == 3 && x.access == RW);
}
