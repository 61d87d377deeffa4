/* Shared between plan.c (selection, cpusets, nodes), plan_env.c (worker environments) and
 * plan_devices.c (device rules); not part of the plan's public API. */
#ifndef XMP_PLAN_INTERNAL_H
#define XMP_PLAN_INTERNAL_H

#include "runner/plan/plan.h"

/* One selected device, with the text that names it in the worker's CUDA_VISIBLE_DEVICES or
 * TPU_VISIBLE_CHIPS: an index or a UUID, in the form the user or the inherited variable used. */
struct xmp_plan_sel {
    const struct xmp_device *dev;
    char id[80];
};

/* True for a non-empty string of decimal digits. */
bool xmp_plan_all_digits(const char *s);

/* The value of name in envp, or NULL. */
const char *xmp_plan_getenv(char *const *envp, const char *name);

/* Worker j's share (of k) of set: non-overlapping, whole cores where the host's topology is
 * known, >= 1 CPU each. */
void xmp_plan_split_cpus(const struct xmp_host *host, const cpu_set_t *set, size_t k, size_t j,
                         cpu_set_t *out);

/* Fills w->env (sorted by name) for worker w, whose devices are sel[w->local_rank * per ...]. */
int xmp_plan_worker_env(const struct xmp_plan *plan, const struct xmp_host *host, char *const *envp,
                        const struct xmp_plan_sel *sel, size_t per, struct xmp_plan_worker *w,
                        struct xmp_error *err);

/* plan_devices.c: isolation.devices, worker w's allowlist of device nodes (w->limits.devices);
 * the job's devices on this node are sel[0 .. n_workers * per), w's own from
 * sel[w->local_rank * per]. */
int xmp_plan_device_rules(const struct xmp_host *host, const struct xmp_plan *plan,
                          struct xmp_plan_worker *w, const struct xmp_plan_sel *sel, size_t per,
                          size_t n_workers, struct xmp_error *err);

/* plan_nodes.c: nnodes, node rank and master address (from the spec, Slurm, Kubernetes). */
int xmp_plan_resolve_nodes(const struct xmp_spec *spec, char *const *envp, struct xmp_plan *plan,
                           struct xmp_error *err);
/* Refuses several tasks of one Slurm step on this node: xmprun is one per node. */
int xmp_plan_check_one_per_node(char *const *envp, struct xmp_error *err);
/* Adds warnings where this node's workers disagree with Slurm's allocation of it. */
void xmp_plan_check_allocation(const struct xmp_spec *spec, char *const *envp, size_t per,
                               struct xmp_plan *plan);
/* Warns where /dev/shm holds less than the cuda workers need (XMPRUN_SHM_PER_WORKER each,
 * 256Mi by default): a container's 64 MiB default is outgrown by NCCL's shared-memory transport
 * and PyTorch's DataLoader, which then die of SIGBUS. */
void xmp_plan_check_shm(char *const *envp, struct xmp_plan *plan);
/* TORCHELASTIC_RUN_ID: distributed.run_id, else SLURM_JOB_ID, else the job name. */
int xmp_plan_resolve_run_id(const struct xmp_spec *spec, char *const *envp, struct xmp_plan *plan,
                            struct xmp_error *err);

#endif
