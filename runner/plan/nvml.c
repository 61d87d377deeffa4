/* NVML through dlopen: the few entry points xmprun calls, declared here because no NVML headers
 * are installed; layouts follow nvml.h (nvmlPciInfo_t for nvmlDeviceGetPciInfo_v3,
 * nvmlProcessInfo_t for nvmlDeviceGetComputeRunningProcesses_v3, nvmlMemory_t). */
#define _GNU_SOURCE
#include "runner/plan/nvml.h"

#include "isolate/dynlib.h"
#include "runner/plan/host.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NVML_SUCCESS                 0
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_VALUE_NOT_AVAILABLE     ((unsigned long long)-1)
#define MAX_DEVICES                  64

typedef int nvml_return;
typedef struct nvml_device *nvml_device;

struct nvml_pci_info {
    char bus_id_legacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pci_device_id;
    unsigned int pci_subsystem_id;
    char bus_id[32];
};

struct nvml_process_info {
    unsigned int pid;
    unsigned long long used_gpu_memory;
    unsigned int gpu_instance_id;
    unsigned int compute_instance_id;
};

struct nvml_memory {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
};

/* The library's functions, once it is loaded (the first xmp_nvml_open of the process). */
static struct {
    nvml_return (*init)(void);
    nvml_return (*count)(unsigned int *);
    nvml_return (*handle)(unsigned int, nvml_device *);
    nvml_return (*pci_info)(nvml_device, struct nvml_pci_info *);
    nvml_return (*memory)(nvml_device, struct nvml_memory *);
    nvml_return (*procs)(nvml_device, unsigned int *, struct nvml_process_info *);
    nvml_return (*procs_v2)(nvml_device, unsigned int *, struct nvml_process_info *);
} api;

static const struct xmp_dynlib_sym syms[] = {
    {"nvmlInit_v2", (void **)&api.init, false},
    {"nvmlDeviceGetCount_v2", (void **)&api.count, false},
    {"nvmlDeviceGetHandleByIndex_v2", (void **)&api.handle, false},
    {"nvmlDeviceGetPciInfo_v3", (void **)&api.pci_info, false},
    {"nvmlDeviceGetMemoryInfo", (void **)&api.memory, false},
    {"nvmlDeviceGetComputeRunningProcesses_v3", (void **)&api.procs, true},
    /* Drivers before 510: the same structure. */
    {"nvmlDeviceGetComputeRunningProcesses_v2", (void **)&api.procs_v2, true},
};
static struct xmp_dynlib libnvml = {NULL, syms, sizeof(syms) / sizeof(syms[0]), 0, ""};

struct xmp_nvml {
    size_t n;
    nvml_device dev[MAX_DEVICES];
    char pci[MAX_DEVICES][32]; /* sysfs form */
};

struct xmp_nvml *
xmp_nvml_open(void)
{
    const char *path = getenv("XMPRUN_NVML_LIB");
    struct xmp_nvml *nvml;
    unsigned int count = 0;

    /* NVML cannot work without the driver's control node, and looking for the library along
     * the whole loader path costs ~70 system calls on a machine without GPUs. */
    if (path == NULL || path[0] == '\0') {
        if (access("/dev/nvidiactl", F_OK) != 0)
            return NULL;
        path = "libnvidia-ml.so.1";
    }
    /* The first open's path is the process's (the library stays loaded). */
    if (libnvml.name == NULL)
        libnvml.name = path;
    if (!xmp_dynlib_load(&libnvml, NULL, 0))
        return NULL;
    if (api.procs == NULL)
        api.procs = api.procs_v2;
    nvml = calloc(1, sizeof(*nvml));
    if (nvml == NULL || api.procs == NULL || api.init() != NVML_SUCCESS ||
        api.count(&count) != NVML_SUCCESS) {
        free(nvml);
        return NULL;
    }
    for (unsigned int i = 0; i < count && nvml->n < MAX_DEVICES; i++) {
        struct nvml_pci_info pci;
        nvml_device h = NULL;

        memset(&pci, 0, sizeof(pci));
        if (api.handle(i, &h) != NVML_SUCCESS || api.pci_info(h, &pci) != NVML_SUCCESS)
            continue; /* one this process may not open (a device cgroup): not one of its GPUs */
        pci.bus_id[sizeof(pci.bus_id) - 1] = '\0';
        nvml->dev[nvml->n] = h;
        xmp_pci_normalize(pci.bus_id, nvml->pci[nvml->n], sizeof(nvml->pci[0]));
        nvml->n++;
    }
    return nvml;
}

int
xmp_nvml_find(const struct xmp_nvml *nvml, const char *pci)
{
    char want[32];

    xmp_pci_normalize(pci, want, sizeof(want));
    for (size_t i = 0; i < nvml->n; i++)
        if (strcmp(nvml->pci[i], want) == 0)
            return (int)i;
    return -1;
}

int64_t
xmp_nvml_total(const struct xmp_nvml *nvml, int dev)
{
    struct nvml_memory mem = {0};

    if (dev < 0 || (size_t)dev >= nvml->n || api.memory(nvml->dev[dev], &mem) != NVML_SUCCESS)
        return -1;
    return (int64_t)mem.total;
}

int
xmp_nvml_processes(const struct xmp_nvml *nvml, int dev, struct xmp_nvml_proc *out, size_t max)
{
    struct nvml_process_info stack[64], *infos = stack;
    unsigned int n = 64;
    nvml_return rc;

    if (dev < 0 || (size_t)dev >= nvml->n)
        return -1;
    rc = api.procs(nvml->dev[dev], &n, infos);
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
        /* More than fit: n is how many there are now; a few more may start meanwhile. */
        n += 16;
        infos = calloc(n, sizeof(*infos));
        if (infos == NULL)
            return -1;
        rc = api.procs(nvml->dev[dev], &n, infos);
    }
    if (rc == NVML_SUCCESS)
        for (size_t i = 0; i < n && i < max; i++) {
            out[i].pid = (pid_t)infos[i].pid;
            out[i].used = infos[i].used_gpu_memory == NVML_VALUE_NOT_AVAILABLE
                              ? -1
                              : (int64_t)infos[i].used_gpu_memory;
        }
    if (infos != stack)
        free(infos);
    return rc == NVML_SUCCESS ? (int)n : -1;
}
