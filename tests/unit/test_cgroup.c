/* The pure parts of the cgroup layer on in-memory input: /proc/self/cgroup and mountinfo parsing,
 * joining a cgroup path with its mount (bind mounts, cgroup namespaces), mode names, and the
 * helpers that turn limits into the kernel's text (cpu.max, cfs quota, memsw, cpuset lists). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "helpers/testlib.h"
#include "isolate/cgroup.h"
#include "isolate/cgroup_internal.h" /* xmp_cg_keyed */

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char hybrid_proc[] = "12:hugetlb:/\n"
                                  "9:name=systemd:/user.slice/session-1.scope\n"
                                  "4:memory:/a/b\n"
                                  "2:cpu,cpuacct:/job\n"
                                  "1:net_cls,net_prio:/\n"
                                  "0::/user.slice/session-1.scope\n";

Test(proc_cgroup, v1_controller_lines)
{
    char path[256];
    int id = -1;

    cr_assert_eq(xmp_cgroup_parse_proc(hybrid_proc, "memory", path, sizeof(path), &id, NULL), 0);
    cr_expect_str_eq(path, "/a/b");
    cr_expect_eq(id, 4);
    cr_assert_eq(xmp_cgroup_parse_proc(hybrid_proc, "name=systemd", path, sizeof(path), &id, NULL),
                 0);
    cr_expect_str_eq(path, "/user.slice/session-1.scope");
    cr_expect_eq(id, 9);
}

Test(proc_cgroup, comounted_controllers)
{
    char a[256], b[256];
    int ia = -1, ib = -2;

    cr_assert_eq(xmp_cgroup_parse_proc(hybrid_proc, "cpu", a, sizeof(a), &ia, NULL), 0);
    cr_assert_eq(xmp_cgroup_parse_proc(hybrid_proc, "cpuacct", b, sizeof(b), &ib, NULL), 0);
    cr_expect_str_eq(a, "/job");
    cr_expect_str_eq(b, "/job");
    cr_expect_eq(ia, 2);
    cr_expect_eq(ia, ib);
    /* A prefix of a controller name is not that controller. */
    struct xmp_error err = {0};
    cr_expect_eq(xmp_cgroup_parse_proc(hybrid_proc, "net", a, sizeof(a), NULL, &err), -1);
    cr_expect_eq(err.errnum, ENOENT);
    cr_expect_eq(xmp_cgroup_parse_proc(hybrid_proc, "prio", a, sizeof(a), NULL, NULL), -1);
}

Test(proc_cgroup, unified_line)
{
    char path[256];

    cr_assert_eq(xmp_cgroup_parse_proc(hybrid_proc, "", path, sizeof(path), NULL, NULL), 0);
    cr_expect_str_eq(path, "/user.slice/session-1.scope");
    /* Inside a cgroup namespace (a container with --cgroupns=private) the path is "/". */
    cr_assert_eq(xmp_cgroup_parse_proc("0::/\n", "", path, sizeof(path), NULL, NULL), 0);
    cr_expect_str_eq(path, "/");
    /* No trailing newline, and a deleted cgroup keeps its suffix. */
    cr_assert_eq(xmp_cgroup_parse_proc("0::/x/y (deleted)", "", path, sizeof(path), NULL, NULL), 0);
    cr_expect_str_eq(path, "/x/y (deleted)");
}

Test(proc_cgroup, missing_and_malformed)
{
    char path[256];
    struct xmp_error err = {0};

    cr_expect_eq(xmp_cgroup_parse_proc("4:memory:/a\n", "", path, sizeof(path), NULL, &err), -1);
    cr_expect_eq(err.errnum, ENOENT);
    cr_expect_eq(xmp_cgroup_parse_proc("0::/\n", "memory", path, sizeof(path), NULL, &err), -1);
    cr_expect_eq(err.errnum, ENOENT);
    cr_expect_eq(xmp_cgroup_parse_proc("garbage\n0::/\n", "", path, sizeof(path), NULL, &err), -1);
    cr_expect_eq(err.errnum, EINVAL);
    cr_expect_eq(xmp_cgroup_parse_proc("x:memory:/\n", "memory", path, sizeof(path), NULL, &err),
                 -1);
    cr_expect_eq(err.errnum, EINVAL);
    cr_expect_eq(
        xmp_cgroup_parse_proc("4:memory:/a/very/long/path\n", "memory", path, 8, NULL, &err), -1);
    cr_expect_eq(err.errnum, ENAMETOOLONG);
    /* Blank lines are skipped. */
    cr_expect_eq(xmp_cgroup_parse_proc("\n\n0::/z\n", "", path, sizeof(path), NULL, NULL), 0);
    cr_expect_str_eq(path, "/z");
}

static const char mountinfo[] =
    "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
    "31 23 0:28 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw,nsdelegate\n"
    "33 31 0:30 / /sys/fs/cgroup/systemd rw shared:11 - cgroup cgroup rw,xattr,name=systemd\n"
    "34 31 0:31 / /sys/fs/cgroup/cpu,cpuacct rw shared:12 - cgroup cgroup rw,cpu,cpuacct\n"
    "35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw master:13 - cgroup cgroup rw,memory\n"
    "36 31 0:33 / /mnt/with\\040space rw - cgroup cgroup rw,pids\n";

Test(mountinfo, v1_and_v2_mounts)
{
    char mnt[256], root[256];

    cr_assert_eq(
        xmp_cgroup_parse_mountinfo(mountinfo, NULL, mnt, sizeof(mnt), root, sizeof(root), NULL), 0);
    cr_expect_str_eq(mnt, "/sys/fs/cgroup/unified");
    cr_expect_str_eq(root, "/");
    cr_assert_eq(xmp_cgroup_parse_mountinfo(mountinfo, "cpuacct", mnt, sizeof(mnt), root,
                                            sizeof(root), NULL),
                 0);
    cr_expect_str_eq(mnt, "/sys/fs/cgroup/cpu,cpuacct");
    cr_assert_eq(
        xmp_cgroup_parse_mountinfo(mountinfo, "memory", mnt, sizeof(mnt), root, sizeof(root), NULL),
        0);
    cr_expect_str_eq(mnt, "/sys/fs/cgroup/memory");
    cr_expect_str_eq(root, "/docker/abc");
    cr_assert_eq(xmp_cgroup_parse_mountinfo(mountinfo, "name=systemd", mnt, sizeof(mnt), root,
                                            sizeof(root), NULL),
                 0);
    cr_expect_str_eq(mnt, "/sys/fs/cgroup/systemd");
}

Test(mountinfo, escapes_and_missing)
{
    char mnt[256], root[256];
    struct xmp_error err = {0};

    cr_assert_eq(
        xmp_cgroup_parse_mountinfo(mountinfo, "pids", mnt, sizeof(mnt), root, sizeof(root), NULL),
        0);
    cr_expect_str_eq(mnt, "/mnt/with space");
    /* tmpfs options never match a controller; freezer is not mounted at all. */
    cr_expect_eq(xmp_cgroup_parse_mountinfo(mountinfo, "freezer", mnt, sizeof(mnt), root,
                                            sizeof(root), &err),
                 -1);
    cr_expect_eq(err.errnum, ENOENT);
    cr_expect_eq(xmp_cgroup_parse_mountinfo(mountinfo, "mode=755", mnt, sizeof(mnt), root,
                                            sizeof(root), NULL),
                 -1);
    cr_expect_eq(xmp_cgroup_parse_mountinfo("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n", NULL, mnt,
                                            sizeof(mnt), root, sizeof(root), NULL),
                 -1);
}

Test(mountinfo, pure_v2)
{
    char mnt[256], root[256];

    cr_assert_eq(xmp_cgroup_parse_mountinfo("29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 "
                                            "cgroup2 rw,nsdelegate,memory_recursiveprot",
                                            NULL, mnt, sizeof(mnt), root, sizeof(root), NULL),
                 0);
    cr_expect_str_eq(mnt, "/sys/fs/cgroup");
    cr_expect_eq(xmp_cgroup_parse_mountinfo("29 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw",
                                            "memory", mnt, sizeof(mnt), root, sizeof(root), NULL),
                 -1);
}

/* A private mount namespace (slurmd with task/cgroup, a container runtime) with a tmpfs over
 * /sys/fs/cgroup and fresh mounts: the old mounts are still listed, hidden, with roots from
 * another cgroup namespace. The visible one counts; when all are hidden the error says so. */
static const char hidden[] =
    "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
    "47 22 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755\n"
    "51 47 0:32 /../../.. /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    "55 47 0:36 /.. /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n"
    "56 47 0:38 /.. /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
    "57 47 0:39 /.. /mnt/cpu rw - cgroup cgroup rw,cpu\n"
    "63 47 0:40 / /sys/fs/cgroup rw - tmpfs cgroup_root rw,mode=755\n"
    "64 63 0:36 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n"
    "68 63 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    "70 63 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
    "71 70 0:41 / /sys/fs/cgroup/cpu rw - tmpfs x rw\n";

Test(mountinfo, hidden_mounts_are_skipped)
{
    char mnt[256], root[256];
    struct xmp_error err = {0};

    cr_assert_eq(
        xmp_cgroup_parse_mountinfo(hidden, "memory", mnt, sizeof(mnt), root, sizeof(root), NULL),
        0);
    cr_expect_str_eq(mnt, "/sys/fs/cgroup/memory");
    cr_expect_str_eq(root, "/");
    cr_assert_eq(
        xmp_cgroup_parse_mountinfo(hidden, "pids", mnt, sizeof(mnt), root, sizeof(root), NULL), 0);
    cr_expect_str_eq(root, "/");
    /* A visible older mount elsewhere is kept when the newer one is covered (by a tmpfs on the
     * same point). */
    cr_assert_eq(
        xmp_cgroup_parse_mountinfo(hidden, "cpu", mnt, sizeof(mnt), root, sizeof(root), NULL), 0);
    cr_expect_str_eq(mnt, "/mnt/cpu");
    cr_assert_eq(
        xmp_cgroup_parse_mountinfo(hidden, NULL, mnt, sizeof(mnt), root, sizeof(root), &err), -1);
    cr_expect_eq(err.errnum, ENOENT);
    cr_expect_str_eq(err.msg, "the cgroup2 mount at /sys/fs/cgroup/unified is hidden by a later "
                              "mount at /sys/fs/cgroup");
}

Test(owner_kind, from_the_path)
{
    cr_expect_str_eq(xmp_cgroup_owner_kind("/machine.slice/libpod-3f2a.scope/container"),
                     "container");
    cr_expect_str_eq(xmp_cgroup_owner_kind("/docker/3f2a"), "container");
    cr_expect_str_eq(xmp_cgroup_owner_kind("/slurm_n1/uid_0/job_12/step_0"), "Slurm step");
    cr_expect_str_eq(xmp_cgroup_owner_kind("/system.slice/train.service"), "systemd unit");
    cr_expect_str_eq(xmp_cgroup_owner_kind("/a/b"), "cgroup");
    cr_expect_str_eq(xmp_cgroup_owner_kind("/"), "cgroup namespace root");
}

Test(join, host_container_and_namespace)
{
    char dir[256];
    struct xmp_error err = {0};

    cr_assert_eq(xmp_cgroup_join("/sys/fs/cgroup/memory", "/", "/a/b", dir, sizeof(dir), NULL), 0);
    cr_expect_str_eq(dir, "/sys/fs/cgroup/memory/a/b");
    cr_assert_eq(xmp_cgroup_join("/sys/fs/cgroup", "/", "/", dir, sizeof(dir), NULL), 0);
    cr_expect_str_eq(dir, "/sys/fs/cgroup");
    /* A container's bind mount of its own subtree, without a cgroup namespace. */
    cr_assert_eq(xmp_cgroup_join("/sys/fs/cgroup/memory", "/docker/abc", "/docker/abc/w", dir,
                                 sizeof(dir), NULL),
                 0);
    cr_expect_str_eq(dir, "/sys/fs/cgroup/memory/w");
    cr_assert_eq(xmp_cgroup_join("/sys/fs/cgroup/memory", "/docker/abc", "/docker/abc", dir,
                                 sizeof(dir), NULL),
                 0);
    cr_expect_str_eq(dir, "/sys/fs/cgroup/memory");
    /* Not below the mount's root: "/docker/abcd" only shares a prefix. */
    cr_expect_eq(xmp_cgroup_join("/m", "/docker/abc", "/docker/abcd", dir, sizeof(dir), &err), -1);
    cr_expect_eq(err.errnum, ENOENT);
    cr_expect_eq(xmp_cgroup_join("/sys/fs/cgroup", "/", "/long/path", dir, 8, &err), -1);
    cr_expect_eq(err.errnum, ENAMETOOLONG);
}

Test(own, self_leaf_is_stripped)
{
    char a[64] = "/user.slice/x.scope/xmprun-self-1234";
    char b[64] = "/xmprun-self-7";
    char c[64] = "/user.slice/xmprun-job-1";

    xmp_cgroup_own_normalize(a);
    xmp_cgroup_own_normalize(b);
    xmp_cgroup_own_normalize(c);
    cr_expect_str_eq(a, "/user.slice/x.scope");
    cr_expect_str_eq(b, "/");
    cr_expect_str_eq(c, "/user.slice/xmprun-job-1");
}

Test(mode, names)
{
    cr_expect_str_eq(xmp_cgroup_mode_name(XMP_CGROUP_MODE_NONE), "none");
    cr_expect_str_eq(xmp_cgroup_mode_name(XMP_CGROUP_MODE_LEGACY), "legacy");
    cr_expect_str_eq(xmp_cgroup_mode_name(XMP_CGROUP_MODE_HYBRID), "hybrid");
    cr_expect_str_eq(xmp_cgroup_mode_name(XMP_CGROUP_MODE_UNIFIED), "unified");
}

Test(limits, init_is_unlimited)
{
    struct xmp_limits l;

    memset(&l, 0x5a, sizeof(l));
    xmp_limits_init(&l);
    cr_expect_eq(l.memory, -1);
    cr_expect_eq(l.memory_high, -1);
    cr_expect_eq(l.memory_min, -1);
    cr_expect_eq(l.swap, -1);
    cr_expect_eq(l.cpus_milli, -1);
    cr_expect_eq(l.pids, -1);
    cr_expect_not(l.has_cpus);
    cr_expect_eq(CPU_COUNT(&l.cpus), 0);
}

Test(limits, cpu_quota)
{
    char buf[32];

    cr_expect_eq(xmp_cgroup_cfs_quota(-1), -1);
    cr_expect_eq(xmp_cgroup_cfs_quota(500), 50000);
    cr_expect_eq(xmp_cgroup_cfs_quota(4000), 400000);
    cr_expect_eq(xmp_cgroup_cfs_quota(1), 1000); /* the kernel's minimum quota is 1 ms */
    cr_assert_eq(xmp_cgroup_format_cpu_max(1500, buf, sizeof(buf)), 0);
    cr_expect_str_eq(buf, "150000 100000");
    cr_assert_eq(xmp_cgroup_format_cpu_max(-1, buf, sizeof(buf)), 0);
    cr_expect_str_eq(buf, "max 100000");
    cr_expect_eq(xmp_cgroup_format_cpu_max(1500, buf, 5), -1);
}

Test(limits, memsw_is_memory_plus_swap)
{
    cr_expect_eq(xmp_cgroup_memsw(1 << 30, 0), 1 << 30);
    cr_expect_eq(xmp_cgroup_memsw(1 << 30, 1 << 20), (1 << 30) + (1 << 20));
    cr_expect_eq(xmp_cgroup_memsw(-1, 0), -1);
    cr_expect_eq(xmp_cgroup_memsw(1 << 30, -1), -1);
    cr_expect_eq(xmp_cgroup_memsw(INT64_MAX, 1), -1);
}

Test(limits, cpuset_list)
{
    cpu_set_t s;
    char buf[64];

    CPU_ZERO(&s);
    cr_assert_eq(xmp_cpulist_format(&s, buf, sizeof(buf)), 0);
    cr_expect_str_eq(buf, "");
    CPU_SET(0, &s);
    CPU_SET(1, &s);
    CPU_SET(2, &s);
    CPU_SET(3, &s);
    CPU_SET(8, &s);
    CPU_SET(10, &s);
    CPU_SET(11, &s);
    cr_assert_eq(xmp_cpulist_format(&s, buf, sizeof(buf)), 0);
    cr_expect_str_eq(buf, "0-3,8,10-11");
    CPU_ZERO(&s);
    CPU_SET(CPU_SETSIZE - 1, &s);
    cr_assert_eq(xmp_cpulist_format(&s, buf, sizeof(buf)), 0);
    cr_expect_str_eq(buf, "1023");
    CPU_SET(0, &s);
    cr_expect_eq(xmp_cpulist_format(&s, buf, 4), -1);
}

Test(limits, ticks_to_usec)
{
    cr_expect_eq(xmp_cgroup_ticks_to_usec(250, 100), 2500000);
    cr_expect_eq(xmp_cgroup_ticks_to_usec(1, 300), 3333);
    cr_expect_eq(xmp_cgroup_ticks_to_usec(-1, 100), -1);
}

Test(own, self_leaf_pid)
{
    pid_t pid = 0;

    cr_expect(xmp_cgroup_self_leaf_pid("xmprun-self-4242", &pid));
    cr_expect_eq(pid, 4242);
    cr_expect_not(xmp_cgroup_self_leaf_pid("xmprun-self-", &pid));
    cr_expect_not(xmp_cgroup_self_leaf_pid("xmprun-self-0", &pid));
    cr_expect_not(xmp_cgroup_self_leaf_pid("xmprun-self-12x", &pid));
    cr_expect_not(xmp_cgroup_self_leaf_pid("xmprun-self--3", &pid));
    cr_expect_not(xmp_cgroup_self_leaf_pid("xmprun-self-99999999999", &pid));
    cr_expect_not(xmp_cgroup_self_leaf_pid("xmprun-job-12", &pid));
}

Test(own, cgroup_manager_names)
{
    cr_expect_str_eq(xmp_cgroup_manager_name(XMP_CGROUP_MANAGER_SYSTEMD), "systemd");
    cr_expect_str_eq(xmp_cgroup_manager_name(XMP_CGROUP_MANAGER_CGROUPFS), "cgroupfs");
    cr_expect_str_eq(xmp_cgroup_manager_name(XMP_CGROUP_MANAGER_AUTO), "auto");
}

Test(keyed, flat_keyed_files)
{
    const char *events = "low 0\nhigh 12\nmax 3\noom 2\noom_kill 1\noom_group_kill 0\n";
    const char *oom_control = "oom_kill_disable 0\nunder_oom 0\noom_kill 7";

    cr_expect_eq(xmp_cg_keyed(events, "oom_kill"), 1);
    cr_expect_eq(xmp_cg_keyed(events, "oom"), 2); /* a key, not a prefix of another */
    cr_expect_eq(xmp_cg_keyed(events, "high"), 12);
    cr_expect_eq(xmp_cg_keyed(oom_control, "oom_kill"), 7);
    cr_expect_eq(xmp_cg_keyed("populated 0\nfrozen 1\n", "populated"), 0);
    cr_expect_eq(xmp_cg_keyed("usage_usec 5\nuser_usec 3\n", "system_usec"), -1);
    cr_expect_eq(xmp_cg_keyed("", "x"), -1);
}

/* Eight anonymous pages: 0 and 7 zero but only partly in the range, 1, 4 and 5 zero, 2 never
 * touched, 3 and 6 with one byte set. Only 1, 4 and 5 may go; every byte must read the same. */
Test(zero_pages, only_resident_zero_pages_in_range_are_given_back)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *m =
        mmap(NULL, 8 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned char resident[8];
    const bool kept[8] = {true, false, false, true, false, false, true, true};

    cr_assert_neq(m, MAP_FAILED);
    for (int i = 0; i < 8; i++)
        if (i != 2)
            memset(m + i * page, 0, page);
    m[3 * page + page - 1] = 0x5a;
    m[6 * page] = 0xa5;
    cr_assert_eq(mincore(m, 8 * page, resident), 0);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(resident[i] & 1, i != 2, "page %d resident before", i);

    xmp_cg_release_zero_pages(m + 100, 8 * page - 101);

    cr_assert_eq(mincore(m, 8 * page, resident), 0);
    for (int i = 0; i < 8; i++)
        cr_expect_eq(resident[i] & 1, kept[i], "page %d resident: %d", i, resident[i] & 1);
    for (size_t i = 0; i < 8 * page; i++) {
        unsigned char want = i == 3 * page + page - 1 ? 0x5a : i == 6 * page ? 0xa5 : 0;
        cr_assert_eq(m[i], want, "byte %zu", i);
    }
    munmap(m, 8 * page);
}

struct pids_seen {
    pid_t pids[3000];
    size_t n, stop_at;
};

static bool
collect_pid(pid_t pid, void *data)
{
    struct pids_seen *s = data;
    s->pids[s->n++] = pid;
    return s->n != s->stop_at;
}

/* cgroup.procs read without stdio: every pid of a list longer than one read's buffer (a line
 * cut at the buffer's end is joined to its rest: pids of 4 to 5 digits, so that lines do not
 * fall on the buffer's edges), a last line without its newline, and the
 * caller's stop. */
Test(cgroup_procs, every_pid_of_a_long_list)
{
    char *dir = xt_tmpdir(), path[4096];
    struct pids_seen s = {0};

    snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < 2500; i++)
        fprintf(f, i == 2499 ? "%d" : "%d\n", 1000 + i * 37);
    fclose(f);
    cr_assert_eq(xmp_cg_each_pid(path, collect_pid, &s), 0);
    cr_assert_eq(s.n, 2500, "%zu pids", s.n);
    for (size_t i = 0; i < s.n; i++)
        cr_assert_eq(s.pids[i], 1000 + (pid_t)i * 37, "pid %zu: %d", i, (int)s.pids[i]);
    s = (struct pids_seen){.stop_at = 3};
    cr_assert_eq(xmp_cg_each_pid(path, collect_pid, &s), 0);
    cr_expect_eq(s.n, 3);
    unlink(path);
    cr_expect_eq(xmp_cg_each_pid(path, collect_pid, &s), -1);
    xt_tmpdir_remove(dir);
    free(dir);
}

/* A cgroup file's read fills the buffer while there is more, so a short read is its end: one read
 * per small file, not a second one to see 0. A FIFO whose writer stays open stands for that file
 * here: a second read would block, and the test would time out. */
Test(cgroup_procs, a_short_read_is_the_end, .timeout = 10)
{
    char *dir = xt_tmpdir(), fifo[4096], buf[64];
    struct pids_seen s = {0};
    int w;

    snprintf(fifo, sizeof(fifo), "%s/memory.current", dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    w = open(fifo, O_RDWR | O_CLOEXEC);
    cr_assert_geq(w, 0);
    cr_assert_eq(write(w, "4096\n", 5), 5);
    cr_assert_eq(xmp_cg_read(dir, "memory.current", buf, sizeof(buf), NULL), 0);
    cr_expect_str_eq(buf, "4096\n");
    cr_assert_eq(write(w, "101\n102", 7), 7);
    cr_assert_eq(xmp_cg_each_pid(fifo, collect_pid, &s), 0);
    cr_expect_eq(s.n, 2, "%zu pids", s.n);
    cr_expect(s.n == 2 && s.pids[0] == 101 && s.pids[1] == 102);
    close(w);
    xt_tmpdir_remove(dir);
    free(dir);
}

/* What limits ask of the cgroup layer: a controller for each limit that needs one, the memory
 * protection and swap among them, and `cpuset: auto` apart from an explicit cpuset (it may do
 * without a cpuset controller). */
Test(limits, uses_name_what_each_limit_needs)
{
    struct xmp_limits l;

    xmp_limits_init(&l);
    cr_assert_eq(xmp_limits_uses(&l), 0u);
    l.memory_min = 1 << 20;
    cr_assert_eq(xmp_limits_uses(&l), (unsigned)XMP_CG_MEMORY);
    xmp_limits_init(&l);
    l.swap = 0;
    cr_assert_eq(xmp_limits_uses(&l), (unsigned)XMP_CG_MEMORY);
    l.cpus_milli = 500;
    l.pids = 16;
    cr_assert_eq(xmp_limits_uses(&l), (unsigned)(XMP_CG_MEMORY | XMP_CG_CPU | XMP_CG_PIDS));
    xmp_limits_init(&l);
    l.has_cpus = true;
    cr_assert_eq(xmp_limits_uses(&l), (unsigned)XMP_CG_CPUSET);
    l.cpus_auto = true;
    cr_assert_eq(xmp_limits_uses(&l), (unsigned)XMP_CG_CPUSET_AUTO);
}
