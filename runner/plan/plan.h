/* The plan: a validated spec resolved against the discovered host and the environment into one
 * fully specified worker per rank (devices, cpuset, limits, environment, argv, log paths). */
#ifndef XMP_PLAN_H
#define XMP_PLAN_H

#include "isolate/cgroup.h"
#include "runner/plan/host.h"
#include "runner/spec/spec.h"

#include <jansson.h>

struct xmp_plan_worker {
    int rank; /* global: node_rank * local_world_size + local_rank */
    int local_rank;
    char **devices; /* NULL-terminated: "cuda:3", "tpu:1", "cpu" */
    size_t n_devices;
    char cpuset[1024]; /* Linux list format; "" when no cpuset applies */
    struct xmp_limits limits;
    struct xmp_env_var
        *env; /* every variable xmprun sets (spec env included), not inherited ones */
    size_t env_len;
    char **argv;       /* NULL-terminated */
    char *stdout_path; /* NULL unless logs.dir is set */
    char *stderr_path;
    char *error_file; /* TORCHELASTIC_ERROR_FILE */
};

struct xmp_plan {
    const struct xmp_spec *spec; /* borrowed */
    char *job_name;
    char *job_id;      /* "<pid>-<6 hex>": the pid of the xmprun that owns the job */
    char *cgroup_name; /* "xmprun-<name>-<id>" */
    enum xmp_device_kind kind;
    /* xmprun runs in a Slurm step (SLURM_JOB_ID and SLURM_STEP_ID): its cgroups are the step's,
     * which root owns and which the job must not leave. */
    bool slurm_step;
    int world_size;
    int local_world_size;
    int nnodes;
    int node_rank;
    char *master_addr;
    int master_port;
    char *run_id;    /* TORCHELASTIC_RUN_ID: one value for every worker of every node */
    char **warnings; /* NULL-terminated, or NULL: things the user should know before it runs */
    char *workdir;
    char *report_path;
    char *run_dir; /* per-job scratch directory (error files); under $TMPDIR or /tmp */
    struct xmp_limits job_limits;
    struct xmp_plan_worker *workers;
    size_t n_workers;
};

/* Builds the plan. envp is the environment to resolve against (CUDA_VISIBLE_DEVICES, SLURM_*,
 * NODE_RANK, ...): xmprun passes its own, tests pass fixtures. pid seeds the job id. */
int xmp_plan_build(const struct xmp_spec *spec, const struct xmp_host *host, char *const *envp,
                   pid_t pid, struct xmp_plan *out, struct xmp_error *err);
void xmp_plan_free(struct xmp_plan *plan);

/* The `xmprun plan` object (job, host, workers), keys in a stable order. */
json_t *xmp_plan_to_json(const struct xmp_plan *plan, const struct xmp_host *host);

/* The full environment a worker starts with: the inherited envp (if spec->inherit_env) with
 * the worker's variables laid over it. NULL-terminated, malloc'd; free with xmp_strv_free. */
char **xmp_plan_worker_environ(const struct xmp_plan *plan, const struct xmp_plan_worker *w,
                               char *const *envp);

#endif
