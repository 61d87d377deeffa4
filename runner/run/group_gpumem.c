/* One run of the worker group: the GPU memory each worker uses. While GPU workers run, a 1 s
 * timer asks NVML which processes use each of the workers' GPUs and how much device memory
 * (NVML is loaded at the first sample, a second after the start: never on the way in or out),
 * gives each process to the worker whose cgroup it is in (without cgroups, below whose process
 * it runs: a worker's GPU work is often a child of its shell or launcher, not its own pid), and
 * keeps each worker's peak per GPU beside the GPU's total, for the report and the status line. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "isolate/proc.h"
#include "runner/run/group_internal.h"

#include "isolate/cleanup.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_PROCS 256

/* The GPUs of a node one sample looks at (NVML's indices). */
#define XMP_GPUMEM_MAX_DEVICES 64

/* How far up from a GPU process the walk to a worker without a cgroup goes. */
#define ANCESTORS_MAX 64

/* How often the GPU memory is sampled. */
#define GPUMEM_PERIOD_NS 1000000000LL

void
xmp_grp_gpumem_open(struct xmp_supervisor *sv)
{
    if (sv->gpumem_at_ns > 0 || sv->plan.kind != XMP_DEVICE_CUDA || sv->host.n_gpus == 0 ||
        (sv->nvml_tried && sv->nvml == NULL))
        return;
    sv->gpumem_at_ns = xmp_now_ns() + GPUMEM_PERIOD_NS;
    xmp_grp_arm_timer(sv);
}

void
xmp_grp_gpumem_close(struct xmp_supervisor *sv)
{
    sv->gpumem_at_ns = 0;
}

/* The NVML index of a worker's device ("cuda:3"), by its PCI address, or -1. */
static int
nvml_dev_of(const struct xmp_supervisor *sv, const char *device)
{
    int index;

    if (sscanf(device, "cuda:%d", &index) != 1)
        return -1;
    for (size_t g = 0; g < sv->host.n_gpus; g++)
        if (sv->host.gpus[g].index == index)
            return xmp_nvml_find(sv->nvml, sv->host.gpus[g].pci);
    return -1;
}

/* Whether /proc/PID/cgroup's text puts the process in the cgroup at p or below it. */
static bool
in_cgroup(const char *text, const struct xmp_cgroup_hier_path *p)
{
    char path[sizeof(p->path)];
    size_t plen = strlen(p->path);
    struct xmp_error err = {0};

    if (xmp_cgroup_parse_proc(text, strcmp(p->hier, "unified") == 0 ? "" : p->hier, path,
                              sizeof(path), NULL, &err) < 0)
        return false;
    return strncmp(path, p->path, plen) == 0 && (path[plen] == '\0' || path[plen] == '/');
}

/* The worker a process NVML lists belongs to: by its cgroup where the workers have theirs,
 * else by its ancestors; -1 for one that is not the job's (another user's, xmprun's own). */
static long
worker_of(const struct xmp_supervisor *sv, pid_t pid)
{
    char path[64], text[4096];

    snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
    if (xmp_proc_read(path, text, sizeof(text)) < 0)
        text[0] = '\0';
    for (size_t i = 0; i < sv->n_workers; i++) {
        const struct xmp_worker *w = &sv->workers[i];
        struct xmp_cgroup_hier_path p[1];

        if (w->cg != NULL && xmp_cgroup_paths(w->cg, p, 1) == 1) {
            if (in_cgroup(text, p))
                return (long)i;
            continue;
        }
        for (pid_t a = pid, k = 0; a > 1 && w->pid > 0 && k < ANCESTORS_MAX;
             a = xmp_proc_parent(a), k++)
            if (a == w->pid)
                return (long)i;
    }
    return -1;
}

/* The worker's entry for the device, made at its first sample with the device's total. */
static struct xmp_gpu_memory *
entry_of(struct xmp_supervisor *sv, struct xmp_worker_report *rep, const char *device, int dev)
{
    for (size_t k = 0; k < rep->n_gpu_memory; k++)
        if (strcmp(rep->gpu_memory[k].device, device) == 0)
            return &rep->gpu_memory[k];
    if (rep->n_gpu_memory >= sizeof(rep->gpu_memory) / sizeof(rep->gpu_memory[0]))
        return NULL;
    struct xmp_gpu_memory *m = &rep->gpu_memory[rep->n_gpu_memory++];
    snprintf(m->device, sizeof(m->device), "%s", device);
    m->peak = m->current = -1;
    m->total = xmp_nvml_total(sv->nvml, dev);
    return m;
}

/* One device: every worker that has it gets the sum of what its processes use there now. */
static void
sample_device(struct xmp_supervisor *sv, int dev, struct xmp_nvml_proc *procs)
{
    int n = xmp_nvml_processes(sv->nvml, dev, procs, MAX_PROCS);

    if (n < 0)
        return;
    for (size_t i = 0; i < sv->n_workers; i++) {
        struct xmp_worker_report *rep = sv->workers[i].rep;
        for (size_t d = 0; rep->devices != NULL && rep->devices[d] != NULL; d++) {
            struct xmp_gpu_memory *m = NULL;
            if (nvml_dev_of(sv, rep->devices[d]) == dev &&
                (m = entry_of(sv, rep, rep->devices[d], dev)) != NULL)
                m->current = 0;
        }
    }
    for (int p = 0; p < n && p < MAX_PROCS; p++) {
        long i = worker_of(sv, procs[p].pid);
        struct xmp_worker_report *rep = i >= 0 ? sv->workers[i].rep : NULL;
        for (size_t k = 0; rep != NULL && k < rep->n_gpu_memory; k++) {
            struct xmp_gpu_memory *m = &rep->gpu_memory[k];
            if (nvml_dev_of(sv, m->device) != dev || m->current < 0)
                continue;
            /* One process whose use NVML cannot say makes the sum unknown, not smaller. */
            m->current = procs[p].used < 0 ? -1 : m->current + procs[p].used;
        }
    }
    for (size_t i = 0; i < sv->n_workers; i++) {
        struct xmp_worker_report *rep = sv->workers[i].rep;
        for (size_t k = 0; k < rep->n_gpu_memory; k++) {
            struct xmp_gpu_memory *m = &rep->gpu_memory[k];
            if (nvml_dev_of(sv, m->device) == dev && m->current > m->peak)
                m->peak = m->current;
        }
    }
}

void
xmp_grp_gpumem_sample(struct xmp_supervisor *sv, int64_t now)
{
    cleanup_free struct xmp_nvml_proc *procs = NULL;
    bool done[XMP_GPUMEM_MAX_DEVICES] = {false};

    if (sv->gpumem_at_ns == 0 || now < sv->gpumem_at_ns)
        return;
    /* On a fixed beat, however late this sample ran. */
    while (sv->gpumem_at_ns <= now)
        sv->gpumem_at_ns += GPUMEM_PERIOD_NS;
    if (!sv->nvml_tried) {
        sv->nvml_tried = true;
        sv->nvml = xmp_nvml_open();
    }
    procs = sv->nvml != NULL ? calloc(MAX_PROCS, sizeof(*procs)) : NULL;
    if (procs == NULL) {
        xmp_grp_gpumem_close(sv); /* no NVML here: nothing to sample, no more wakeups */
        return;
    }
    for (size_t i = 0; i < sv->n_workers; i++) {
        const struct xmp_worker_report *rep = sv->workers[i].rep;
        if (!sv->workers[i].running)
            continue;
        for (size_t d = 0; rep->devices != NULL && rep->devices[d] != NULL; d++) {
            int dev = nvml_dev_of(sv, rep->devices[d]);
            if (dev < 0 || dev >= XMP_GPUMEM_MAX_DEVICES || done[dev])
                continue;
            done[dev] = true;
            sample_device(sv, dev, procs);
        }
    }
}

void
xmp_grp_gpumem_status(const struct xmp_supervisor *sv, struct xmp_status_info *info)
{
    for (size_t i = 0; i < sv->n_workers; i++) {
        const struct xmp_worker_report *rep = sv->workers[i].rep;
        for (size_t k = 0; sv->workers[i].running && k < rep->n_gpu_memory; k++) {
            const struct xmp_gpu_memory *m = &rep->gpu_memory[k];
            if (m->current <= info->gpu_memory)
                continue;
            info->gpu_rank = rep->rank;
            info->gpu_memory = m->current;
            info->gpu_total = m->total;
        }
    }
}
