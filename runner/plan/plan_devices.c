/* isolation.devices: the device nodes each worker may open, an allowlist of numbers that host
 * discovery found (never guessed). job (the default): every worker the job's accelerators on this
 * node; worker: each only its own. Both: the nodes their driver shares, the RDMA nodes and the
 * ordinary ones. */
#define _GNU_SOURCE
#include "runner/plan/plan_internal.h"

#include <errno.h>
#include <stdio.h>

/* Appends the node of one of the job's devices: a node the worker cannot run without, which an
 * enclosing devices cgroup must allow (see isolate/cgroup_v1.c's judge_denied). */
static int
add_device(struct xmp_dev_rules *r, enum xmp_device_kind kind, const struct xmp_device *dev,
           struct xmp_error *err)
{
    struct xmp_dev_rule *rule;

    if (dev->dev_major < 0 || dev->dev_minor < 0)
        return xmp_error_set(err, 0,
                             "isolation.devices: the device node of %s:%d (%s) is unknown "
                             "(%s); set isolation.devices: false to run without the filter",
                             xmp_device_kind_name(kind), dev->index, dev->pci,
                             kind == XMP_DEVICE_CUDA
                                 ? "no \"Device Minor\" in /proc/driver/nvidia/gpus"
                                 : "no accel device or VFIO group in sysfs");
    rule = xmp_devices_add(r, 'c', dev->dev_major, dev->dev_minor, XMP_DEV_READ | XMP_DEV_WRITE);
    if (rule == NULL)
        return xmp_error_set(err, ENOMEM, "isolation.devices");
    rule->required = true;
    if (kind == XMP_DEVICE_CUDA)
        snprintf(rule->what, sizeof(rule->what), "cuda:%d (/dev/nvidia%d)", dev->index,
                 dev->dev_minor);
    else
        snprintf(rule->what, sizeof(rule->what), "tpu:%d (c %d:%d)", dev->index, dev->dev_major,
                 dev->dev_minor);
    return 0;
}

/* Nodes any worker may open that it can also do without: an enclosing devices cgroup that
 * denies one leaves it out with a note. */
static int
add_nodes(struct xmp_dev_rules *r, const struct xmp_devnode *nodes, size_t n, struct xmp_error *err)
{
    for (size_t k = 0; k < n; k++) {
        struct xmp_dev_rule *rule =
            xmp_devices_add(r, 'c', nodes[k].major, nodes[k].minor, XMP_DEV_READ | XMP_DEV_WRITE);
        if (rule == NULL)
            return xmp_error_set(err, ENOMEM, "isolation.devices");
        snprintf(rule->what, sizeof(rule->what), "/dev/%.26s", nodes[k].name);
    }
    return 0;
}

/* job mode gives every worker all of the job's devices on the node, not just its own: NCCL
 * needs to open its peers' GPUs for CUDA IPC (P2P over NVLink), and with each rank behind a
 * filter that hides them it falls back to PCIe or shared memory without a word
 * (NVIDIA/nccl#1066). Each worker is still pinned by CUDA_VISIBLE_DEVICES / TPU_VISIBLE_CHIPS;
 * the filter keeps the job off other jobs' devices and the ones outside its plan. Every worker
 * of a job then has the same rules, which is also one BPF program for all of them. The RDMA
 * nodes are shared by every job, as NCCL's IB transport and GPUDirect RDMA open them. */
int
xmp_plan_device_rules(const struct xmp_host *host, const struct xmp_plan *plan,
                      struct xmp_plan_worker *w, const struct xmp_plan_sel *sel, size_t per,
                      size_t n_workers, struct xmp_error *err)
{
    struct xmp_dev_rules *r = &w->limits.devices;
    size_t first = (size_t)w->local_rank * per, count = per;

    w->limits.has_devices = true;
    if (!xmp_devices_add_defaults(r))
        return xmp_error_set(err, ENOMEM, "isolation.devices");
    if (plan->spec->devices == XMP_DEVICES_JOB) {
        first = 0;
        count = n_workers * per;
    }
    if (plan->kind == XMP_DEVICE_CUDA &&
        add_nodes(r, host->gpu_shared, host->n_gpu_shared, err) < 0)
        return -1;
    if (plan->kind == XMP_DEVICE_TPU && add_nodes(r, host->tpu_shared, host->n_tpu_shared, err) < 0)
        return -1;
    /* A CPU job has no accelerator of its own. */
    for (size_t d = 0; plan->kind != XMP_DEVICE_CPU && d < count; d++)
        if (add_device(r, plan->kind, sel[first + d].dev, err) < 0)
            return -1;
    return add_nodes(r, host->rdma, host->n_rdma, err);
}
