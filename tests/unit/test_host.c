/* Host discovery against the fixture trees in tests/fixtures/hosts, trees built on the fly for
 * the error paths, the real host, and the cpulist format. */
#define _GNU_SOURCE
#include "helpers/testlib.h"
#include "runner/plan/host.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void
discover_fixture(const char *name, struct xmp_host *host)
{
    char root[4096];
    struct xmp_error err = {0};

    snprintf(root, sizeof(root), "%s/hosts/%s", xt_fixtures(), name);
    cr_assert_eq(xmp_host_discover(root, host, &err), 0, "discover %s: %s", name, err.msg);
}

static void
assert_cpus(const cpu_set_t *set, const char *want)
{
    char buf[1024];

    xmp_cpulist_format(set, buf, sizeof(buf));
    cr_assert_str_eq(buf, want);
}

/* mkdir -p of the directory part of root/rel, then writes text there. */
static void
put(const char *root, const char *rel, const char *text)
{
    char path[4096];

    snprintf(path, sizeof(path), "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        cr_assert(mkdir(path, 0755) == 0 || errno == EEXIST, "mkdir %s", path);
        *p = '/';
    }
    free(xt_write_file(root, rel, text));
}

Test(devices, gpu8_two_numa_nodes)
{
    struct xmp_host h;
    const char *pci[] = {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                         "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"};

    discover_fixture("gpu8-2numa", &h);
    cr_assert_eq(h.ncpus, 32);
    assert_cpus(&h.allowed, "0-31");
    cr_assert_eq(h.numa_nodes, 2);
    cr_assert_eq(h.n_nodes, 2);
    assert_cpus(&h.nodes[1].cpus, "16-31");
    cr_assert_str_eq(h.hostname, "gpu-node-01");
    cr_assert_eq(h.n_tpus, 0);
    /* The NVSwitch (NVIDIA vendor, bridge class) and the NIC are not GPUs. */
    cr_assert_eq(h.n_gpus, 8);
    for (size_t i = 0; i < 8; i++) {
        char uuid[64];
        snprintf(uuid, sizeof(uuid), "GPU-%zx1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5%zx", i, i);
        cr_assert_eq(h.gpus[i].index, (int)i);
        cr_assert_eq(h.gpus[i].kind, XMP_DEVICE_CUDA);
        cr_assert_str_eq(h.gpus[i].pci, pci[i], "PCI bus order at %zu", i);
        cr_assert_str_eq(h.gpus[i].uuid, uuid);
        cr_assert_str_eq(h.gpus[i].model, "NVIDIA H100 80GB HBM3");
        cr_assert_eq(h.gpus[i].numa_node, i < 4 ? 0 : 1);
        assert_cpus(&h.gpus[i].local_cpus, i < 4 ? "0-15" : "16-31");
    }
    xmp_host_free(&h);
}

Test(devices, tpu_v4_host)
{
    struct xmp_host h;

    discover_fixture("tpu-v4", &h);
    cr_assert_eq(h.ncpus, 240);
    cr_assert_eq(h.numa_nodes, 2);
    cr_assert_eq(h.n_gpus, 0);
    /* The gVNIC shares Google's vendor id but is not a chip torch_xla counts. */
    cr_assert_eq(h.n_tpus, 4);
    cr_assert_str_eq(h.tpu_version, "v4");
    for (size_t i = 0; i < 4; i++) {
        cr_assert_eq(h.tpus[i].kind, XMP_DEVICE_TPU);
        cr_assert_eq(h.tpus[i].index, (int)i);
        cr_assert_str_eq(h.tpus[i].model, "TPU v4");
        cr_assert_str_eq(h.tpus[i].uuid, "");
        cr_assert_eq(h.tpus[i].numa_node, i < 2 ? 0 : 1);
        assert_cpus(&h.tpus[i].local_cpus, i < 2 ? "0-59,120-179" : "60-119,180-239");
    }
    cr_assert_str_eq(h.tpus[0].pci, "0000:00:04.0");
    cr_assert_str_eq(h.tpus[3].pci, "0000:00:07.0");
    xmp_host_free(&h);
}

Test(devices, cpu_only_host)
{
    struct xmp_host h;

    discover_fixture("cpu-only", &h);
    cr_assert_eq(h.ncpus, 8);
    cr_assert_eq(h.numa_nodes, 1);
    cr_assert_eq(h.n_gpus, 0);
    cr_assert_eq(h.n_tpus, 0);
    cr_assert_str_eq(h.tpu_version, "");
    cr_assert_str_eq(h.hostname, "cpu-box");
    xmp_host_free(&h);
}

Test(devices, real_host_uses_affinity)
{
    struct xmp_host h;
    struct xmp_error err = {0};
    cpu_set_t mine;

    cr_assert_eq(xmp_host_discover(NULL, &h, &err), 0, "%s", err.msg);
    cr_assert_eq(sched_getaffinity(0, sizeof(mine), &mine), 0);
    cr_assert(CPU_EQUAL(&mine, &h.allowed));
    cr_assert_eq(h.ncpus, CPU_COUNT(&mine));
    cr_assert_geq(h.numa_nodes, 1);
    cr_assert_str_eq(h.root, "");
    cr_assert_neq(h.hostname[0], '\0');
    xmp_host_free(&h);

    cr_assert_eq(xmp_host_discover("/", &h, &err), 0, "%s", err.msg);
    cr_assert(CPU_EQUAL(&mine, &h.allowed), "\"/\" is the real host too");
    xmp_host_free(&h);
}

Test(devices, allowed_cpus_narrow_locality)
{
    char *root = xt_tmpdir();
    struct xmp_host h;
    struct xmp_error err = {0};

    /* Only CPUs 0-5 are online; the GPU's local list 4-11 is cut to what may be used. */
    put(root, "sys/devices/system/cpu/online", "0-5\n");
    put(root, "sys/devices/system/node/node0/cpulist", "0-11\n");
    put(root, "proc/driver/nvidia/gpus/0000:01:00.0/information",
        "Model: \t\t Tesla T4\nGPU UUID: \t GPU-aaaa\nBus Location: \t 0000:01:00.0\n");
    put(root, "sys/bus/pci/devices/0000:01:00.0/vendor", "0x10de\n");
    put(root, "sys/bus/pci/devices/0000:01:00.0/class", "0x030000\n");
    put(root, "sys/bus/pci/devices/0000:01:00.0/numa_node", "-1\n");
    put(root, "sys/bus/pci/devices/0000:01:00.0/local_cpulist", "4-11\n");
    /* The audio function of a card is listed by nobody but sysfs, and a procfs entry whose
     * sysfs class says audio is not a GPU. */
    put(root, "proc/driver/nvidia/gpus/0000:01:00.1/information",
        "Model: \t\t ghost\nGPU UUID: \t GPU-bbbb\nBus Location: \t 0000:01:00.1\n");
    put(root, "sys/bus/pci/devices/0000:01:00.1/vendor", "0x10de\n");
    put(root, "sys/bus/pci/devices/0000:01:00.1/class", "0x040300\n");

    cr_assert_eq(xmp_host_discover(root, &h, &err), 0, "%s", err.msg);
    cr_assert_eq(h.ncpus, 6);
    assert_cpus(&h.nodes[0].cpus, "0-5");
    cr_assert_eq(h.n_gpus, 1);
    cr_assert_str_eq(h.gpus[0].uuid, "GPU-aaaa");
    cr_assert_eq(h.gpus[0].numa_node, -1);
    assert_cpus(&h.gpus[0].local_cpus, "4-5");
    xmp_host_free(&h);
    xt_tmpdir_remove(root);
    free(root);
}

Test(devices, locality_falls_back_to_numa_node)
{
    char *root = xt_tmpdir();
    struct xmp_host h;
    struct xmp_error err = {0};

    put(root, "sys/devices/system/cpu/online", "0-7\n");
    put(root, "sys/devices/system/node/node0/cpulist", "0-3\n");
    put(root, "sys/devices/system/node/node1/cpulist", "4-7\n");
    put(root, "sys/bus/pci/devices/0000:05:00.0/vendor", "0x1ae0\n");
    put(root, "sys/bus/pci/devices/0000:05:00.0/device", "0x0063\n");
    put(root, "sys/bus/pci/devices/0000:05:00.0/numa_node", "1\n");
    cr_assert_eq(xmp_host_discover(root, &h, &err), 0, "%s", err.msg);
    cr_assert_eq(h.n_tpus, 1);
    cr_assert_str_eq(h.tpu_version, "v5e");
    assert_cpus(&h.tpus[0].local_cpus, "4-7");
    xmp_host_free(&h);
    xt_tmpdir_remove(root);
    free(root);
}

Test(devices, thread_siblings)
{
    char *root = xt_tmpdir();
    struct xmp_host h;
    struct xmp_error err = {0};
    const int want[] = {0, 1, 2, 3, 0, 1, 2, 3};

    /* Four cores, their second threads numbered after them; CPU 6 is offline. */
    put(root, "sys/devices/system/cpu/online", "0-5,7\n");
    for (int c = 0; c < 8; c++) {
        char rel[128], list[32];
        snprintf(rel, sizeof(rel), "sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", c);
        snprintf(list, sizeof(list), "%d,%d\n", c % 4, c % 4 + 4);
        put(root, rel, list);
    }
    cr_assert_eq(xmp_host_discover(root, &h, &err), 0, "%s", err.msg);
    cr_assert_not_null(h.core_of);
    for (int c = 0; c < 8; c++)
        if (c != 6)
            cr_assert_eq(h.core_of[c], want[c], "cpu %d", c);
    xmp_host_free(&h);

    /* Without topology files there is no core map. */
    discover_fixture("cpu-only", &h);
    cr_assert_null(h.core_of);
    xmp_host_free(&h);
    xt_tmpdir_remove(root);
    free(root);
}

Test(devices, errors_name_the_file)
{
    char *root = xt_tmpdir();
    struct xmp_host h;
    struct xmp_error err = {0};
    char path[4096];

    /* No cpu/online at all. */
    cr_assert_eq(xmp_host_discover(root, &h, &err), -1);
    snprintf(path, sizeof(path), "%s/sys/devices/system/cpu/online", root);
    cr_assert(strstr(err.msg, path) != NULL, "message names the file: %s", err.msg);
    cr_assert_eq(err.errnum, ENOENT);

    /* A malformed local_cpulist. */
    put(root, "sys/devices/system/cpu/online", "0-3\n");
    put(root, "proc/driver/nvidia/gpus/0000:01:00.0/information",
        "Model: \t\t X\nBus Location: \t 0000:01:00.0\n");
    put(root, "sys/bus/pci/devices/0000:01:00.0/vendor", "0x10de\n");
    put(root, "sys/bus/pci/devices/0000:01:00.0/class", "0x030200\n");
    put(root, "sys/bus/pci/devices/0000:01:00.0/local_cpulist", "0-x\n");
    cr_assert_eq(xmp_host_discover(root, &h, &err), -1);
    cr_assert(strstr(err.msg, "0000:01:00.0/local_cpulist") != NULL, "%s", err.msg);

    /* A procfs entry without its bus location. */
    put(root, "sys/bus/pci/devices/0000:01:00.0/local_cpulist", "0-3\n");
    put(root, "proc/driver/nvidia/gpus/0000:01:00.0/information", "Model: \t\t X\n");
    cr_assert_eq(xmp_host_discover(root, &h, &err), -1);
    cr_assert(strstr(err.msg, "Bus Location") != NULL, "%s", err.msg);
    cr_assert(strstr(err.msg, "information") != NULL, "%s", err.msg);
    xt_tmpdir_remove(root);
    free(root);
}

Test(devices, tpu_pci_ids)
{
    cr_assert_str_eq(xmp_tpu_version_of(0x005e), "v4");
    cr_assert_str_eq(xmp_tpu_version_of(0x0063), "v5e");
    cr_assert_str_eq(xmp_tpu_version_of(0x0062), "v5p");
    cr_assert_str_eq(xmp_tpu_version_of(0x006f), "v6e");
    cr_assert_str_eq(xmp_tpu_version_of(0x0027), "v3");
    cr_assert_null(xmp_tpu_version_of(0x0042));
    cr_assert_str_eq(xmp_device_kind_name(XMP_DEVICE_CUDA), "cuda");
    cr_assert_str_eq(xmp_device_kind_name(XMP_DEVICE_AUTO), "auto");
}

struct roundtrip {
    const char *in;
    const char *out;
    int count;
};

Test(cpulist, round_trips)
{
    const struct roundtrip cases[] = {
        {"0", "0", 1},
        {"0-3", "0-3", 4},
        {"0-3,8,10-11", "0-3,8,10-11", 7},
        {"0,1,2,3", "0-3", 4},
        {"3,1,2", "1-3", 3},
        {"0-3,2-5", "0-5", 6},
        {"7-7", "7", 1},
        {"", "", 0},
        {"\n", "", 0},
        {"  0-59,120-179\n", "0-59,120-179", 120},
        {"1023", "1023", 1},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cpu_set_t set;
        struct xmp_error err = {0};
        char buf[256];

        cr_assert_eq(xmp_cpulist_parse(cases[i].in, &set, &err), 0, "\"%s\": %s", cases[i].in,
                     err.msg);
        cr_assert_eq(CPU_COUNT(&set), cases[i].count, "\"%s\"", cases[i].in);
        xmp_cpulist_format(&set, buf, sizeof(buf));
        cr_assert_str_eq(buf, cases[i].out, "\"%s\"", cases[i].in);
    }
}

Test(cpulist, errors)
{
    const char *bad[] = {"a",       "3-1", "1,",    ",1",   "1-",  "-1", "1024",
                         "0-99999", "1 2", "0-3:2", "1,,2", "0x3", "1;2"};

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cpu_set_t set;
        struct xmp_error err = {0};

        cr_assert_eq(xmp_cpulist_parse(bad[i], &set, &err), -1, "\"%s\" must be refused", bad[i]);
        cr_assert(strstr(err.msg, bad[i]) != NULL, "message quotes the list: %s", err.msg);
    }
}

Test(cpulist, format_never_cuts_a_range)
{
    cpu_set_t set;
    char buf[8];

    CPU_ZERO(&set);
    for (int c = 0; c < 64; c += 2)
        CPU_SET(c, &set);
    xmp_cpulist_format(&set, buf, sizeof(buf));
    cr_assert_str_eq(buf, "0,2,4,6"); /* "0,2,4,6,8" does not fit: stop at a whole entry */
}

/* The device node numbers the device filter allows: a GPU's node is the driver's "Device Minor"
 * (not its CUDA index), the shared nodes' majors come from /proc/devices. */
Test(devices, gpu4_device_nodes_from_the_driver)
{
    struct xmp_host h;
    static const int minor_of_index[] = {2, 0, 3, 1};

    discover_fixture("gpu4", &h);
    cr_assert_eq(h.n_gpus, 4);
    for (size_t i = 0; i < 4; i++) {
        cr_expect_eq(h.gpus[i].dev_major, 195);
        cr_expect_eq(h.gpus[i].dev_minor, minor_of_index[i], "cuda:%zu", i);
    }
    cr_assert_eq(h.n_gpu_shared, 4);
    cr_expect_str_eq(h.gpu_shared[0].name, "nvidiactl");
    cr_expect_eq(h.gpu_shared[0].minor, 255);
    cr_expect_str_eq(h.gpu_shared[2].name, "nvidia-uvm");
    cr_expect_eq(h.gpu_shared[2].major, 509);
    cr_expect_eq(h.gpu_shared[3].minor, 1);
    xmp_host_free(&h);
}

/* The RDMA nodes NCCL opens between nodes: the verbs nodes and rdma_cm from sysfs, in uverbs
 * order (uverbs2 before uverbs10), gdrdrv by its /proc/devices major with minor 0. A host
 * without them has none. */
Test(devices, rdma_nodes_from_sysfs)
{
    struct xmp_host h;
    struct xmp_error err = {0};
    char *root = xt_tmpdir();

    discover_fixture("gpu4", &h);
    cr_assert_eq(h.n_rdma, 4);
    cr_expect_str_eq(h.rdma[0].name, "infiniband/uverbs0");
    cr_expect_eq(h.rdma[0].major, 231);
    cr_expect_eq(h.rdma[0].minor, 192);
    cr_expect_str_eq(h.rdma[1].name, "infiniband/uverbs1");
    cr_expect_eq(h.rdma[1].minor, 193);
    cr_expect_str_eq(h.rdma[2].name, "infiniband/rdma_cm");
    cr_expect_eq(h.rdma[2].major, 10);
    cr_expect_eq(h.rdma[2].minor, 58);
    cr_expect_str_eq(h.rdma[3].name, "gdrdrv");
    cr_expect_eq(h.rdma[3].major, 238);
    cr_expect_eq(h.rdma[3].minor, 0);
    xmp_host_free(&h);
    cr_expect_null(h.rdma);

    put(root, "sys/devices/system/cpu/online", "0-3\n");
    put(root, "sys/class/infiniband_verbs/uverbs10/dev", "231:202\n");
    put(root, "sys/class/infiniband_verbs/uverbs2/dev", "231:194\n");
    put(root, "sys/class/infiniband_verbs/abi_version", "6\n");
    put(root, "sys/class/infiniband_verbs/uverbs3/ibdev", "mlx5_3\n"); /* no dev: skipped */
    cr_assert_eq(xmp_host_discover(root, &h, &err), 0, "%s", err.msg);
    cr_assert_eq(h.n_rdma, 2);
    cr_expect_str_eq(h.rdma[0].name, "infiniband/uverbs2");
    cr_expect_str_eq(h.rdma[1].name, "infiniband/uverbs10");
    cr_expect_eq(h.rdma[1].minor, 202);
    xmp_host_free(&h);
    xt_tmpdir_remove(root);
    free(root);

    discover_fixture("cpu-only", &h);
    cr_expect_eq(h.n_rdma, 0);
    xmp_host_free(&h);
}

/* A TPU chip's node: its accel class device in sysfs, else its VFIO group. */
Test(devices, tpu_device_nodes_from_sysfs)
{
    char *root = xt_tmpdir();
    struct xmp_host h;
    struct xmp_error err = {0};
    char link[4200];

    put(root, "sys/devices/system/cpu/online", "0-3\n");
    put(root, "proc/devices", "Character devices:\n 10 misc\n242 vfio\n261 accel\n");
    for (int i = 0; i < 2; i++) {
        char rel[256];
        snprintf(rel, sizeof(rel), "sys/bus/pci/devices/0000:00:0%d.0/", 4 + i);
        const char *files[][2] = {{"vendor", "0x1ae0\n"},
                                  {"device", "0x005e\n"},
                                  {"class", "0x120000\n"},
                                  {"numa_node", "-1\n"},
                                  {"local_cpulist", "0-3\n"}};
        for (size_t f = 0; f < 5; f++) {
            char p[512];
            snprintf(p, sizeof(p), "%s%s", rel, files[f][0]);
            put(root, p, files[f][1]);
        }
    }
    /* Chip 0 has an accel device, chip 1 sits behind VFIO (iommu group 7). */
    put(root, "sys/bus/pci/devices/0000:00:04.0/accel/accel0/dev", "261:0\n");
    put(root, "sys/class/vfio/7/dev", "242:3\n");
    put(root, "sys/kernel/iommu_groups/7/type", "DMA\n");
    snprintf(link, sizeof(link), "%s/sys/bus/pci/devices/0000:00:05.0/iommu_group", root);
    cr_assert_eq(symlink("../../../kernel/iommu_groups/7", link), 0);
    cr_assert_eq(xmp_host_discover(root, &h, &err), 0, "%s", err.msg);
    cr_assert_eq(h.n_tpus, 2);
    cr_expect_eq(h.tpus[0].dev_major, 261);
    cr_expect_eq(h.tpus[0].dev_minor, 0);
    cr_expect_eq(h.tpus[1].dev_major, 242);
    cr_expect_eq(h.tpus[1].dev_minor, 3);
    cr_assert_eq(h.n_tpu_shared, 1);
    cr_expect_eq(h.tpu_shared[0].major, 10);
    cr_expect_eq(h.tpu_shared[0].minor, 196);
    xmp_host_free(&h);
    xt_tmpdir_remove(root);
    free(root);
}
