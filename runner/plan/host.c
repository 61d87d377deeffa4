/* Host discovery: allowed CPUs, NUMA nodes, NVIDIA GPUs (procfs + sysfs, and on the real host
 * their device nodes) and TPU chips (sysfs), every file read below a root directory so that
 * fixture trees stand in for hosts. Also the Linux cpulist format. */
#define _GNU_SOURCE
#include "runner/plan/host.h"

#include "isolate/cleanup.h"
#include "isolate/proc.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NVIDIA_VENDOR "0x10de"
#define GOOGLE_VENDOR "0x1ae0"

const char *
xmp_device_kind_name(enum xmp_device_kind kind)
{
    switch (kind) {
    case XMP_DEVICE_AUTO:
        return "auto";
    case XMP_DEVICE_CUDA:
        return "cuda";
    case XMP_DEVICE_TPU:
        return "tpu";
    case XMP_DEVICE_CPU:
        return "cpu";
    }
    return "unknown";
}

/* The PCI device ids torch_xla counts as TPU chips (torch_xla/_internal/tpu.py,
 * _TPU_PCI_DEVICE_IDS, vendor 0x1ae0). torch_xla lists 0x0056 and 0x0062 as "testing only";
 * gVisor's pkg/abi/tpu/tpu.go names them v4lite and v5p. */
const char *
xmp_tpu_version_of(unsigned int pci_device_id)
{
    switch (pci_device_id) {
    case 0x0027:
        return "v3"; /* v2 and v3 share the id; both have 2 TensorCores per chip */
    case 0x0056:
        return "v4lite";
    case 0x005e:
        return "v4";
    case 0x0062:
        return "v5p";
    case 0x0063:
        return "v5e";
    case 0x006f:
        return "v6e";
    default:
        return NULL;
    }
}

/* ---- files below the root ---------------------------------------------------------------- */

static bool
is_real_root(const char *root)
{
    return root == NULL || root[0] == '\0' || strcmp(root, "/") == 0;
}

/* buf = root + rel + name (name may be ""). Paths that do not fit are cut, and then fail to
 * open, which names them in the error. */
static void
host_path(const struct xmp_host *host, char *buf, size_t size, const char *rel, const char *name)
{
    if (snprintf(buf, size, "%s%s%s", host->root, rel, name) < 0)
        buf[0] = '\0';
}

/* Reads a small file whole, without the trailing newline. Returns -1 with errno set. */
static int
read_small_file(const char *path, char *buf, size_t size)
{
    ssize_t got = xmp_proc_read(path, buf, size);
    size_t n;

    if (got < 0)
        return -1;
    n = (size_t)got;
    while (n > 0 && isspace((unsigned char)buf[n - 1]))
        buf[--n] = '\0';
    return 0;
}

static int
read_cpulist_file(const char *path, cpu_set_t *out, struct xmp_error *err)
{
    char text[8192];

    if (read_small_file(path, text, sizeof(text)) < 0)
        return xmp_error_set(err, errno, "read `%s`", path);
    if (xmp_cpulist_parse(text, out, err) < 0)
        return xmp_error_wrap(err, "`%s`", path);
    return 0;
}

static void
and_cpus(cpu_set_t *set, const cpu_set_t *with)
{
    cpu_set_t tmp;

    CPU_AND(&tmp, set, with);
    *set = tmp;
}

/* ---- cores -------------------------------------------------------------------------------- */

/* Hardware threads of one core share its execution units, so cpusets are cut between cores,
 * never through one. Without topology files (old kernels, small fixtures) core_of stays NULL. */
static int
discover_cores(struct xmp_host *host, struct xmp_error *err)
{
    int *core_of = NULL;

    for (int c = 0; c < CPU_SETSIZE; c++) {
        char path[4096];
        char name[64];
        cpu_set_t siblings;

        if (!CPU_ISSET(c, &host->allowed))
            continue;
        snprintf(name, sizeof(name), "cpu%d/topology/thread_siblings_list", c);
        host_path(host, path, sizeof(path), "/sys/devices/system/cpu/", name);
        if (access(path, F_OK) != 0)
            continue;
        if (core_of == NULL) {
            core_of = malloc(CPU_SETSIZE * sizeof(*core_of));
            if (core_of == NULL)
                return xmp_error_set(err, errno, "malloc");
            for (int i = 0; i < CPU_SETSIZE; i++)
                core_of[i] = i;
        }
        if (read_cpulist_file(path, &siblings, err) < 0) {
            free(core_of);
            return -1;
        }
        for (int s = 0; s < CPU_SETSIZE; s++) {
            if (CPU_ISSET(s, &siblings)) {
                core_of[c] = s;
                break;
            }
        }
    }
    host->core_of = core_of;
    return 0;
}

/* ---- NUMA nodes --------------------------------------------------------------------------- */

static int
compare_nodes(const void *a, const void *b)
{
    const struct xmp_numa_node *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

static int
discover_numa(struct xmp_host *host, struct xmp_error *err)
{
    char dir_path[4096];
    DIR *dir;
    struct dirent *de;
    int ret = 0;

    host_path(host, dir_path, sizeof(dir_path), "/sys/devices/system/node", "");
    dir = opendir(dir_path);
    if (dir == NULL) {
        /* Kernels without NUMA support have no node directory: one node holds everything. */
        host->numa_nodes = 1;
        return 0;
    }
    while ((de = readdir(dir)) != NULL) {
        char path[4096 + 300];
        char *end = NULL;
        long id;
        struct xmp_numa_node *grown;

        if (strncmp(de->d_name, "node", 4) != 0 || !isdigit((unsigned char)de->d_name[4]))
            continue;
        id = strtol(de->d_name + 4, &end, 10);
        if (*end != '\0')
            continue;
        grown = realloc(host->nodes, (host->n_nodes + 1) * sizeof(*grown));
        if (grown == NULL) {
            ret = xmp_error_set(err, errno, "realloc");
            break;
        }
        host->nodes = grown;
        snprintf(path, sizeof(path), "%s/%s/cpulist", dir_path, de->d_name);
        grown[host->n_nodes].id = (int)id;
        if (read_cpulist_file(path, &grown[host->n_nodes].cpus, err) < 0) {
            ret = -1;
            break;
        }
        and_cpus(&grown[host->n_nodes].cpus, &host->allowed);
        host->n_nodes++;
    }
    closedir(dir);
    if (ret < 0)
        return ret;
    if (host->n_nodes > 1)
        qsort(host->nodes, host->n_nodes, sizeof(*host->nodes), compare_nodes);
    host->numa_nodes = host->n_nodes > 0 ? (int)host->n_nodes : 1;
    return 0;
}

static const struct xmp_numa_node *
find_node(const struct xmp_host *host, int id)
{
    for (size_t i = 0; i < host->n_nodes; i++)
        if (host->nodes[i].id == id)
            return &host->nodes[i];
    return NULL;
}

/* ---- PCI attributes ----------------------------------------------------------------------- */

struct pci_attrs {
    bool present;
    char vendor[16];
    char device[16];
    char class_[16];
};

/* The function's vendor, and with all, its device and class too. */
static void
read_pci_attrs(const struct xmp_host *host, const char *addr, bool all, struct pci_attrs *a)
{
    char path[4096];
    char attr[4096 + 16];

    memset(a, 0, sizeof(*a));
    host_path(host, path, sizeof(path), "/sys/bus/pci/devices/", addr);
    snprintf(attr, sizeof(attr), "%s/vendor", path);
    if (read_small_file(attr, a->vendor, sizeof(a->vendor)) < 0)
        return;
    a->present = true;
    if (!all)
        return;
    snprintf(attr, sizeof(attr), "%s/device", path);
    if (read_small_file(attr, a->device, sizeof(a->device)) < 0)
        a->device[0] = '\0';
    snprintf(attr, sizeof(attr), "%s/class", path);
    if (read_small_file(attr, a->class_, sizeof(a->class_)) < 0)
        a->class_[0] = '\0';
}

/* Fills numa_node and local_cpus from sysfs. A device without local_cpulist falls back to its
 * NUMA node's CPUs; one with neither has no locality (empty local_cpus). */
static int
read_pci_locality(const struct xmp_host *host, struct xmp_device *dev, struct xmp_error *err)
{
    char path[4096];
    char attr[4096 + 32];
    char text[32];
    const struct xmp_numa_node *node;

    dev->numa_node = -1;
    CPU_ZERO(&dev->local_cpus);
    host_path(host, path, sizeof(path), "/sys/bus/pci/devices/", dev->pci);
    snprintf(attr, sizeof(attr), "%s/numa_node", path);
    if (read_small_file(attr, text, sizeof(text)) == 0) {
        char *end = NULL;
        long n = strtol(text, &end, 10);
        if (end == text || *end != '\0')
            return xmp_error_set(err, 0, "`%s`: \"%s\" is not a NUMA node number", attr, text);
        dev->numa_node = n < 0 ? -1 : (int)n;
    }
    snprintf(attr, sizeof(attr), "%s/local_cpulist", path);
    if (access(attr, F_OK) == 0) {
        if (read_cpulist_file(attr, &dev->local_cpus, err) < 0)
            return -1;
        and_cpus(&dev->local_cpus, &host->allowed);
    } else if ((node = find_node(host, dev->numa_node)) != NULL) {
        dev->local_cpus = node->cpus;
    }
    return 0;
}

void
xmp_pci_normalize(const char *in, char *out, size_t size)
{
    size_t len = strlen(in);
    const char *p = len > 12 ? in + len - 12 : in;
    size_t i = 0;

    for (; p[i] != '\0' && i + 1 < size; i++)
        out[i] = (char)tolower((unsigned char)p[i]);
    out[i] = '\0';
}

static int
compare_pci(const void *a, const void *b)
{
    const struct xmp_device *x = a, *y = b;
    return strcmp(x->pci, y->pci);
}

static int
append_device(struct xmp_device **devs, size_t *n, const struct xmp_device *dev,
              struct xmp_error *err)
{
    struct xmp_device *grown = realloc(*devs, (*n + 1) * sizeof(*grown));

    if (grown == NULL)
        return xmp_error_set(err, errno, "realloc");
    grown[*n] = *dev;
    *devs = grown;
    (*n)++;
    return 0;
}

/* ---- NVIDIA GPUs -------------------------------------------------------------------------- */

/* Copies the value of "Key:   value" when line starts with key. */
static bool
info_field(const char *line, const char *key, char *out, size_t size)
{
    size_t klen = strlen(key);
    const char *v;
    size_t len;

    if (strncmp(line, key, klen) != 0)
        return false;
    v = line + klen;
    while (*v == ' ' || *v == '\t')
        v++;
    len = strcspn(v, "\r\n");
    while (len > 0 && isspace((unsigned char)v[len - 1]))
        len--;
    if (len >= size)
        len = size - 1;
    memcpy(out, v, len);
    out[len] = '\0';
    return true;
}

static int
read_gpu_information(const char *path, struct xmp_device *dev, struct xmp_error *err)
{
    cleanup_fclose FILE *f = fopen(path, "re");
    char line[512];
    char bus[64] = "", minor[32] = "";

    if (f == NULL)
        return xmp_error_set(err, errno, "open `%s`", path);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (info_field(line, "Model:", dev->model, sizeof(dev->model)))
            continue;
        if (info_field(line, "GPU UUID:", dev->uuid, sizeof(dev->uuid)))
            continue;
        if (info_field(line, "Device Minor:", minor, sizeof(minor)))
            dev->dev_minor = (int)strtol(minor, NULL, 10);
        info_field(line, "Bus Location:", bus, sizeof(bus));
    }
    if (bus[0] == '\0')
        return xmp_error_set(err, 0, "`%s`: no \"Bus Location:\" line", path);
    xmp_pci_normalize(bus, dev->pci, sizeof(dev->pci));
    return 0;
}

/* A PCI function is an NVIDIA GPU when its vendor is NVIDIA and its class is VGA (0x0300xx) or
 * 3D controller (0x0302xx, the data-centre parts). Audio and USB functions of a card are not. */
static bool
is_nvidia_gpu(const struct pci_attrs *a)
{
    return strcmp(a->vendor, NVIDIA_VENDOR) == 0 &&
           (strncmp(a->class_, "0x0300", 6) == 0 || strncmp(a->class_, "0x0302", 6) == 0);
}

/* On the real host, whether this process can see the GPU's device node. The driver lists every
 * GPU it binds, but a container may be given a subset of them: the ones whose /dev/nvidia<minor>
 * it was given, beside the control node (without the control node, none are created yet, and
 * CUDA creates them when it starts). This is what NVML's list used to be read for, at the cost
 * of its init and shutdown (20 ms) on every start. */
static bool
gpu_node_visible(const struct xmp_device *dev, bool real)
{
    char path[64];

    if (!real || dev->dev_minor < 0 || access("/dev/nvidiactl", F_OK) != 0)
        return true;
    snprintf(path, sizeof(path), "/dev/nvidia%d", dev->dev_minor);
    return access(path, F_OK) == 0;
}

static int
discover_gpus_procfs(struct xmp_host *host, bool real, struct xmp_error *err)
{
    char dir_path[4096];
    DIR *dir;
    struct dirent *de;
    int ret = 0;

    host_path(host, dir_path, sizeof(dir_path), "/proc/driver/nvidia/gpus", "");
    dir = opendir(dir_path);
    if (dir == NULL)
        return 0; /* no NVIDIA driver loaded (or not exposed here): no GPUs */
    while ((de = readdir(dir)) != NULL) {
        char path[4096 + 300];
        struct xmp_device dev;
        struct pci_attrs attrs;

        if (de->d_name[0] == '.')
            continue;
        memset(&dev, 0, sizeof(dev));
        dev.kind = XMP_DEVICE_CUDA;
        dev.dev_major = host->nvidia_major;
        dev.dev_minor = -1;
        snprintf(path, sizeof(path), "%s/%s/information", dir_path, de->d_name);
        if (read_gpu_information(path, &dev, err) < 0) {
            ret = -1;
            break;
        }
        read_pci_attrs(host, dev.pci, true, &attrs);
        /* The driver lists what it binds; sysfs, when present, must agree that this is a GPU
         * (a mismatch means a stale or foreign procfs entry, which CUDA would not count). */
        if ((attrs.present && !is_nvidia_gpu(&attrs)) || !gpu_node_visible(&dev, real))
            continue;
        if (read_pci_locality(host, &dev, err) < 0 ||
            append_device(&host->gpus, &host->n_gpus, &dev, err) < 0) {
            ret = -1;
            break;
        }
    }
    closedir(dir);
    return ret;
}

/* ---- TPU chips ---------------------------------------------------------------------------- */

/* "major:minor" from a sysfs dev file. */
static bool
read_devnum(const char *path, int *major, int *minor)
{
    char text[32];

    return read_small_file(path, text, sizeof(text)) == 0 &&
           sscanf(text, "%d:%d", major, minor) == 2;
}

/* A chip's device node: the accel class device below its PCI device (/dev/accel<N>, newer
 * drivers), else its VFIO group (/dev/vfio/<group>, where libtpu opens the chip through VFIO). */
static void
tpu_node(const struct xmp_host *host, const char *addr, struct xmp_device *dev)
{
    char path[4096 + 300], link[4096];
    DIR *dir;
    struct dirent *de;
    ssize_t n;

    dev->dev_major = dev->dev_minor = -1;
    host_path(host, path, sizeof(path), "/sys/bus/pci/devices/", addr);
    strncat(path, "/accel", sizeof(path) - strlen(path) - 1);
    if ((dir = opendir(path)) != NULL) {
        while ((de = readdir(dir)) != NULL) {
            char dev_path[sizeof(path) + 300];
            if (strncmp(de->d_name, "accel", 5) != 0)
                continue;
            snprintf(dev_path, sizeof(dev_path), "%s/%s/dev", path, de->d_name);
            if (read_devnum(dev_path, &dev->dev_major, &dev->dev_minor))
                break;
        }
        closedir(dir);
        if (dev->dev_major >= 0)
            return;
    }
    host_path(host, path, sizeof(path), "/sys/bus/pci/devices/", addr);
    strncat(path, "/iommu_group", sizeof(path) - strlen(path) - 1);
    n = readlink(path, link, sizeof(link) - 1);
    if (n <= 0)
        return;
    link[n] = '\0';
    const char *group = strrchr(link, '/') != NULL ? strrchr(link, '/') + 1 : link;
    host_path(host, path, sizeof(path), "/sys/class/vfio/", group);
    strncat(path, "/dev", sizeof(path) - strlen(path) - 1);
    if (!read_devnum(path, &dev->dev_major, &dev->dev_minor))
        dev->dev_major = dev->dev_minor = -1;
}

static int
discover_tpus(struct xmp_host *host, struct xmp_error *err)
{
    char dir_path[4096];
    DIR *dir;
    struct dirent *de;
    int ret = 0;

    host_path(host, dir_path, sizeof(dir_path), "/sys/bus/pci/devices", "");
    dir = opendir(dir_path);
    if (dir == NULL)
        return 0;
    while ((de = readdir(dir)) != NULL) {
        struct pci_attrs attrs;
        struct xmp_device dev;
        const char *version;

        if (de->d_name[0] == '.')
            continue;
        /* The vendor first: a host has dozens of PCI functions (a GPU server a hundred or more)
         * and most are not Google's. */
        read_pci_attrs(host, de->d_name, false, &attrs);
        if (!attrs.present || strcmp(attrs.vendor, GOOGLE_VENDOR) != 0)
            continue;
        read_pci_attrs(host, de->d_name, true, &attrs);
        version = xmp_tpu_version_of((unsigned int)strtoul(attrs.device, NULL, 16));
        if (version == NULL)
            continue;
        memset(&dev, 0, sizeof(dev));
        dev.kind = XMP_DEVICE_TPU;
        xmp_pci_normalize(de->d_name, dev.pci, sizeof(dev.pci));
        tpu_node(host, de->d_name, &dev);
        snprintf(dev.model, sizeof(dev.model), "TPU %s", version);
        snprintf(host->tpu_version, sizeof(host->tpu_version), "%s", version);
        if (read_pci_locality(host, &dev, err) < 0 ||
            append_device(&host->tpus, &host->n_tpus, &dev, err) < 0) {
            ret = -1;
            break;
        }
    }
    closedir(dir);
    return ret;
}

/* ---- the host ----------------------------------------------------------------------------- */

static int
discover_allowed(struct xmp_host *host, bool real, struct xmp_error *err)
{
    char path[4096];

    if (real) {
        if (sched_getaffinity(0, sizeof(host->allowed), &host->allowed) < 0)
            return xmp_error_set(err, errno, "sched_getaffinity");
        return 0;
    }
    host_path(host, path, sizeof(path), "/sys/devices/system/cpu/online", "");
    return read_cpulist_file(path, &host->allowed, err);
}

static int
discover_hostname(struct xmp_host *host, bool real, struct xmp_error *err)
{
    char path[4096];

    if (real) {
        if (gethostname(host->hostname, sizeof(host->hostname) - 1) < 0)
            return xmp_error_set(err, errno, "gethostname");
        host->hostname[sizeof(host->hostname) - 1] = '\0';
        return 0;
    }
    host_path(host, path, sizeof(path), "/proc/sys/kernel/hostname", "");
    if (read_small_file(path, host->hostname, sizeof(host->hostname)) < 0)
        snprintf(host->hostname, sizeof(host->hostname), "localhost");
    return 0;
}

/* ---- RDMA nodes --------------------------------------------------------------------------- */

static int
add_rdma(struct xmp_host *host, const char *name, int major, int minor, struct xmp_error *err)
{
    struct xmp_devnode *more = reallocarray(host->rdma, host->n_rdma + 1, sizeof(*more));

    if (more == NULL)
        return xmp_error_set(err, ENOMEM, "rdma nodes");
    host->rdma = more;
    more[host->n_rdma] = (struct xmp_devnode){.major = major, .minor = minor};
    snprintf(more[host->n_rdma].name, sizeof(more[0].name), "%s", name);
    host->n_rdma++;
    return 0;
}

/* uverbs2 before uverbs10. */
static int
compare_uverbs(const void *a, const void *b)
{
    const struct dirent *const *x = a, *const *y = b;
    long nx = strtol((*x)->d_name + 6, NULL, 10), ny = strtol((*y)->d_name + 6, NULL, 10);

    return (nx > ny) - (nx < ny);
}

static int
uverbs_entry(const struct dirent *de)
{
    return strncmp(de->d_name, "uverbs", 6) == 0 && isdigit((unsigned char)de->d_name[6]);
}

/* The verbs nodes (one per HCA port's device: /dev/infiniband/uverbs<N>, the class device's
 * dev file holds its number) and the RDMA connection manager (a misc device). A host without
 * them (no rdma-core kernel modules) simply has none. gdrdrv was found with the majors. */
static int
discover_rdma(struct xmp_host *host, int gdrdrv, struct xmp_error *err)
{
    char path[4096], file[4096 + 300];
    struct dirent **ents = NULL;
    int major, minor, n, rc = 0;

    host_path(host, path, sizeof(path), "/sys/class/infiniband_verbs", "");
    n = scandir(path, &ents, uverbs_entry, NULL);
    if (n > 1)
        qsort(ents, (size_t)n, sizeof(*ents), compare_uverbs);
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(file, sizeof(file), "%s/%s/dev", path, ents[i]->d_name);
        snprintf(name, sizeof(name), "infiniband/%.20s", ents[i]->d_name);
        if (rc == 0 && read_devnum(file, &major, &minor))
            rc = add_rdma(host, name, major, minor, err);
        free(ents[i]);
    }
    free(ents);
    host_path(host, path, sizeof(path), "/sys/class/misc/rdma_cm/dev", "");
    if (rc == 0 && read_devnum(path, &major, &minor))
        rc = add_rdma(host, "infiniband/rdma_cm", major, minor, err);
    if (rc == 0 && gdrdrv >= 0)
        rc = add_rdma(host, "gdrdrv", gdrdrv, 0, err);
    return rc;
}

/* The character majors the drivers registered (/proc/devices), for the shared nodes; gdrdrv's
 * (-1: none), for the RDMA nodes. */
static int
discover_majors(struct xmp_host *host)
{
    char path[4096], line[256];
    int uvm = -1, vfio = -1, gdrdrv = -1;
    FILE *f;

    host->nvidia_major = 195; /* NV_MAJOR_DEVICE_NUMBER, fixed in the driver */
    host_path(host, path, sizeof(path), "/proc/devices", "");
    if ((f = fopen(path, "re")) != NULL) {
        bool chars = false;
        while (fgets(line, sizeof(line), f) != NULL) {
            char name[64];
            int major;
            if (strncmp(line, "Character devices:", 18) == 0)
                chars = true;
            else if (strncmp(line, "Block devices:", 14) == 0)
                chars = false;
            else if (chars && sscanf(line, "%d %63s", &major, name) == 2) {
                if (strcmp(name, "nvidia-frontend") == 0 || strcmp(name, "nvidia") == 0)
                    host->nvidia_major = major;
                else if (strcmp(name, "nvidia-uvm") == 0)
                    uvm = major;
                else if (strcmp(name, "vfio") == 0)
                    vfio = major;
                else if (strcmp(name, "gdrdrv") == 0)
                    gdrdrv = major;
            }
        }
        fclose(f);
    }
    /* nvidiactl and nvidia-modeset sit at the top of the driver's minors. */
    host->gpu_shared[host->n_gpu_shared++] =
        (struct xmp_devnode){"nvidiactl", host->nvidia_major, 255};
    host->gpu_shared[host->n_gpu_shared++] =
        (struct xmp_devnode){"nvidia-modeset", host->nvidia_major, 254};
    if (uvm >= 0) {
        host->gpu_shared[host->n_gpu_shared++] = (struct xmp_devnode){"nvidia-uvm", uvm, 0};
        host->gpu_shared[host->n_gpu_shared++] = (struct xmp_devnode){"nvidia-uvm-tools", uvm, 1};
    }
    /* The VFIO container node is the misc device 10:196 (VFIO_MINOR). */
    if (vfio >= 0)
        host->tpu_shared[host->n_tpu_shared++] = (struct xmp_devnode){"vfio/vfio", 10, 196};
    return gdrdrv;
}

int
xmp_host_discover(const char *root, struct xmp_host *out, struct xmp_error *err)
{
    struct xmp_host host;
    bool real = is_real_root(root);

    memset(&host, 0, sizeof(host));
    if (!real) {
        size_t len = strlen(root);
        if (len >= sizeof(host.root))
            return xmp_error_set(err, ENAMETOOLONG, "host root `%s`", root);
        memcpy(host.root, root, len + 1);
        while (len > 1 && host.root[len - 1] == '/')
            host.root[--len] = '\0';
    }
    int gdrdrv = discover_majors(&host);
    if (discover_rdma(&host, gdrdrv, err) < 0 || discover_allowed(&host, real, err) < 0 ||
        discover_hostname(&host, real, err) < 0 || discover_cores(&host, err) < 0 ||
        discover_numa(&host, err) < 0 || discover_gpus_procfs(&host, real, err) < 0 ||
        discover_tpus(&host, err) < 0) {
        /* The caller adds "host discovery"; the message already names the file. */
        xmp_host_free(&host);
        return -1;
    }
    host.ncpus = CPU_COUNT(&host.allowed);
    /* CUDA_DEVICE_ORDER=PCI_BUS_ID numbers GPUs by PCI address; chips are numbered the same way. */
    if (host.n_gpus > 1)
        qsort(host.gpus, host.n_gpus, sizeof(*host.gpus), compare_pci);
    if (host.n_tpus > 1)
        qsort(host.tpus, host.n_tpus, sizeof(*host.tpus), compare_pci);
    for (size_t i = 0; i < host.n_gpus; i++)
        host.gpus[i].index = (int)i;
    for (size_t i = 0; i < host.n_tpus; i++)
        host.tpus[i].index = (int)i;
    *out = host;
    return 0;
}

void
xmp_host_free(struct xmp_host *host)
{
    if (host == NULL)
        return;
    free(host->gpus);
    free(host->tpus);
    free(host->nodes);
    free(host->core_of);
    free(host->rdma);
    host->rdma = NULL;
    host->n_rdma = 0;
    host->core_of = NULL;
    host->gpus = host->tpus = NULL;
    host->nodes = NULL;
    host->n_gpus = host->n_tpus = host->n_nodes = 0;
}
