/* A stand-in NVML for tests (loaded by xmprun through XMPRUN_NVML_LIB, its own dlopen path):
 * just the calls xmprun makes, answered from files instead of a driver.
 *
 * - NVML_STANDIN_DIR (required): each call to nvmlInit_v2 and nvmlShutdown appends a line to
 *   DIR/calls ("nvmlInit <pid>"), so a test sees whether and when xmprun loaded NVML.
 * - The devices are the fixture host's GPUs: XMPRUN_HOST_ROOT/proc/driver/nvidia/gpus/ *
 *   /information (PCI address, UUID, model), numbered in PCI order as NVML and CUDA do. Each
 *   has 80 GiB. PCI addresses are given in NVML's spelling ("00000000:18:00.0", upper case).
 * - The processes on a device: every file DIR/procs/<pid> whose pid is alive, with lines
 *   "<device> <bytes>", the device as an index or a UUID (what CUDA_VISIBLE_DEVICES holds). So
 *   the usage a test sees depends on the pids of the processes that really ran. */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOTAL    (80ULL << 30)
#define MAX_GPUS 16

struct pci_info {
    char bus_id_legacy[16];
    unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
};
struct process_info {
    unsigned int pid;
    unsigned long long used;
    unsigned int gpu_instance_id, compute_instance_id;
};
struct memory {
    unsigned long long total, free, used;
};
struct gpu {
    char pci[20];
    char uuid[96];
    char model[96];
};

/* The entry points, as xmprun's runner/plan/nvml.c calls them (handles are struct gpu *). */
int nvmlInit_v2(void);
int nvmlShutdown(void);
int nvmlDeviceGetCount_v2(unsigned int *count);
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, struct gpu **handle);
int nvmlDeviceGetPciInfo_v3(struct gpu *g, struct pci_info *pci);
int nvmlDeviceGetUUID(struct gpu *g, char *uuid, unsigned int size);
int nvmlDeviceGetName(struct gpu *g, char *name, unsigned int size);
int nvmlDeviceGetMemoryInfo(struct gpu *g, struct memory *m);
int nvmlDeviceGetComputeRunningProcesses_v3(struct gpu *g, unsigned int *count,
                                            struct process_info *infos);

static struct gpu gpus[MAX_GPUS];
static unsigned int n_gpus;

static void
log_call(const char *what)
{
    const char *dir = getenv("NVML_STANDIN_DIR");
    char path[4096];
    FILE *f;

    if (dir == NULL)
        return;
    snprintf(path, sizeof(path), "%s/calls", dir);
    if ((f = fopen(path, "ae")) != NULL) {
        fprintf(f, "%s %d\n", what, (int)getpid());
        fclose(f);
    }
}

static void
field(const char *line, const char *key, char *out, size_t size)
{
    const char *v;

    if (strncmp(line, key, strlen(key)) != 0)
        return;
    for (v = line + strlen(key); *v == ' ' || *v == '\t'; v++)
        ;
    snprintf(out, size, "%.*s", (int)strcspn(v, "\r\n"), v);
}

static int
by_pci(const void *a, const void *b)
{
    return strcmp(((const struct gpu *)a)->pci, ((const struct gpu *)b)->pci);
}

int
nvmlInit_v2(void)
{
    const char *root = getenv("XMPRUN_HOST_ROOT");
    char dir[4096], path[4096 + 300], line[512];
    struct dirent *de;
    DIR *d;

    log_call("nvmlInit");
    if (getenv("NVML_STANDIN_DIR") == NULL)
        return 1; /* NVML_ERROR_UNINITIALIZED: a stand-in without its files */
    n_gpus = 0;
    snprintf(dir, sizeof(dir), "%s/proc/driver/nvidia/gpus", root != NULL ? root : "");
    if ((d = opendir(dir)) == NULL)
        return 0;
    while ((de = readdir(d)) != NULL && n_gpus < MAX_GPUS) {
        struct gpu *g = &gpus[n_gpus];
        FILE *f;
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s/information", dir, de->d_name);
        if ((f = fopen(path, "re")) == NULL)
            continue;
        memset(g, 0, sizeof(*g));
        while (fgets(line, sizeof(line), f) != NULL) {
            field(line, "Bus Location:", g->pci, sizeof(g->pci));
            field(line, "GPU UUID:", g->uuid, sizeof(g->uuid));
            field(line, "Model:", g->model, sizeof(g->model));
        }
        fclose(f);
        n_gpus++;
    }
    closedir(d);
    qsort(gpus, n_gpus, sizeof(gpus[0]), by_pci);
    return 0;
}

int
nvmlShutdown(void)
{
    log_call("nvmlShutdown");
    return 0;
}

int
nvmlDeviceGetCount_v2(unsigned int *count)
{
    *count = n_gpus;
    return 0;
}

int
nvmlDeviceGetHandleByIndex_v2(unsigned int index, struct gpu **handle)
{
    if (index >= n_gpus)
        return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *handle = &gpus[index];
    return 0;
}

int
nvmlDeviceGetPciInfo_v3(struct gpu *g, struct pci_info *pci)
{
    memset(pci, 0, sizeof(*pci));
    snprintf(pci->bus_id, sizeof(pci->bus_id), "0000%s", g->pci);
    for (char *p = pci->bus_id; *p != '\0'; p++)
        *p = (char)toupper((unsigned char)*p);
    return 0;
}

int
nvmlDeviceGetUUID(struct gpu *g, char *uuid, unsigned int size)
{
    snprintf(uuid, size, "%s", g->uuid);
    return 0;
}

int
nvmlDeviceGetName(struct gpu *g, char *name, unsigned int size)
{
    snprintf(name, size, "%s", g->model);
    return 0;
}

int
nvmlDeviceGetMemoryInfo(struct gpu *g, struct memory *m)
{
    (void)g;
    m->total = TOTAL;
    m->used = 0;
    m->free = TOTAL;
    return 0;
}

/* Whether a "<device> <bytes>" line names g: its index or its UUID. */
static bool
names(const struct gpu *g, const char *id)
{
    char *end = NULL;
    long index = strtol(id, &end, 10);

    if (end != id && *end == '\0')
        return index >= 0 && (unsigned long)index < n_gpus && &gpus[index] == g;
    return strcmp(id, g->uuid) == 0;
}

int
nvmlDeviceGetComputeRunningProcesses_v3(struct gpu *g, unsigned int *count,
                                        struct process_info *infos)
{
    const char *base = getenv("NVML_STANDIN_DIR");
    char dir[4096], path[4096 + 300], id[128];
    unsigned long long bytes;
    unsigned int n = 0;
    struct dirent *de;
    DIR *d;

    snprintf(dir, sizeof(dir), "%s/procs", base != NULL ? base : "");
    if ((d = opendir(dir)) != NULL) {
        while ((de = readdir(d)) != NULL) {
            long pid = strtol(de->d_name, NULL, 10);
            FILE *f;
            if (pid <= 0 || (kill((pid_t)pid, 0) < 0 && errno != EPERM))
                continue;
            snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
            if ((f = fopen(path, "re")) == NULL)
                continue;
            while (fscanf(f, "%127s %llu", id, &bytes) == 2) {
                if (!names(g, id))
                    continue;
                if (n < *count)
                    infos[n] = (struct process_info){(unsigned int)pid, bytes, 0, 0};
                n++;
            }
            fclose(f);
        }
        closedir(d);
    }
    if (n > *count) {
        *count = n;
        return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    }
    *count = n;
    return 0;
}
