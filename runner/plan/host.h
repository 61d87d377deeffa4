/* Host discovery: the CPUs xmprun may run on, NVIDIA GPUs and TPU chips with their PCI address,
 * NUMA node and local CPUs. It lives in runner/ because finding devices confines nothing. Every
 * host file is read below a root directory (XMPRUN_HOST_ROOT in tests), so fixture trees stand in
 * for real hosts. */
#ifndef XMP_HOST_H
#define XMP_HOST_H

#include "isolate/cgroup.h" /* xmp_cpulist_parse, xmp_cpulist_format */
#include "isolate/error.h"
#include "runner/spec/spec_types.h"

#include <sched.h>
#include <stdbool.h>
#include <stddef.h>

/* "auto", "cuda", "tpu", "cpu". */
const char *xmp_device_kind_name(enum xmp_device_kind kind);

struct xmp_device {
    enum xmp_device_kind kind;
    int index;      /* CUDA index (PCI bus order, as CUDA_DEVICE_ORDER=PCI_BUS_ID) or chip index */
    char uuid[64];  /* "GPU-..." or "" when unknown */
    char pci[32];   /* "0000:3b:00.0" or "" */
    char model[96]; /* "NVIDIA H100 80GB HBM3", "TPU v4", or "" */
    int numa_node;  /* -1 when unknown */
    cpu_set_t
        local_cpus; /* CPUs local to the device, intersected with the allowed set; may be empty */
    /* Its character device node, for the device filter: /dev/nvidia<minor> (the driver's
     * "Device Minor"), /dev/accel<N> or /dev/vfio/<iommu group> (sysfs). -1 when unknown. */
    int dev_major;
    int dev_minor;
};

/* A character device node by number, with the name it has under /dev (for messages). */
struct xmp_devnode {
    char name[32];
    int major;
    int minor;
};

/* One NUMA node: its id (node<id> in sysfs) and its CPUs intersected with the allowed set. */
struct xmp_numa_node {
    int id;
    cpu_set_t cpus;
};

struct xmp_host {
    char root[4096];   /* "" or "/" for the real host, else the fixture root */
    cpu_set_t allowed; /* sched_getaffinity of xmprun, or the fixture's cpu list */
    int ncpus;         /* CPU_COUNT(&allowed) */
    int numa_nodes;    /* number of NUMA nodes found (>= 1) */
    struct xmp_device *gpus;
    size_t n_gpus;
    struct xmp_device *tpus;
    size_t n_tpus;
    char tpu_version[16]; /* "v4", "v5e", ... or "" */
    char hostname[256];
    struct xmp_numa_node *nodes; /* the NUMA nodes found, by id; n_nodes may be 0 */
    size_t n_nodes;
    int *core_of; /* CPU_SETSIZE entries: the lowest CPU of each allowed CPU's core (its thread
                   * siblings); NULL when sysfs has no topology */
    /* The nodes every worker of the kind shares: nvidiactl, nvidia-uvm, nvidia-uvm-tools,
     * nvidia-modeset for CUDA; /dev/vfio/vfio for TPUs behind VFIO. Majors from /proc/devices
     * (the driver's fixed 195 for nvidia when it is not listed there). */
    int nvidia_major;
    struct xmp_devnode gpu_shared[4];
    size_t n_gpu_shared;
    struct xmp_devnode tpu_shared[1];
    size_t n_tpu_shared;
    /* The RDMA nodes collectives use between nodes (NCCL's InfiniBand/RoCE transport, GPUDirect
     * RDMA): /dev/infiniband/uverbs<N> and rdma_cm (their numbers from sysfs, as the nodes are
     * named there), and /dev/gdrdrv (gdrcopy; its major from /proc/devices, minor 0). One per
     * HCA and no ceiling: malloc'd, in uverbs order. */
    struct xmp_devnode *rdma;
    size_t n_rdma;
};

/* Discovers the host below root (NULL or "" means "/"). For a fixture root, the allowed CPUs come
 * from ROOT/sys/devices/system/cpu/online instead of sched_getaffinity. NVML is not used: procfs
 * gives index, UUID, PCI address and model, and on the real root the device nodes say which
 * GPUs this process has. */
int xmp_host_discover(const char *root, struct xmp_host *out, struct xmp_error *err);
void xmp_host_free(struct xmp_host *host);

/* sysfs and NVML spell PCI addresses differently ("0000:18:00.0", "00000000:18:00.0", upper
 * case): keeps the last 12 characters, lower case, which is the sysfs form. */
void xmp_pci_normalize(const char *in, char *out, size_t size);

/* The TPU generation ("v4", "v5e", ...) of a Google PCI device id, or NULL when the id is not a
 * TPU chip that torch_xla recognises. */
const char *xmp_tpu_version_of(unsigned int pci_device_id);

#endif
