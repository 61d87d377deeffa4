/* The plan across nodes: node count and rank, the master address, the run id, and what this
 * node gives the job: Slurm's allocation (one xmprun per node, the worker count it was given)
 * and /dev/shm's size. */
#define _GNU_SOURCE
#include "runner/plan/plan.h"

#include "runner/plan/hostlist.h"
#include "runner/plan/plan_internal.h"
#include "runner/spec/quantity.h"
#include "runner/util/strv.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

/* Parses a non-negative integer from an environment variable, naming it on error. */
static int
env_int(const char *name, const char *value, long *out, struct xmp_error *err)
{
    char *end = NULL;

    errno = 0;
    if (value[0] == '-' || !isdigit((unsigned char)value[0]))
        goto bad;
    *out = strtol(value, &end, 10);
    if (errno != 0 || *end != '\0' || *out > 1000000)
        goto bad;
    return 0;
bad:
    return xmp_error_set(err, 0, "%s=\"%s\" is not a non-negative integer", name, value);
}

int
xmp_plan_resolve_nodes(const struct xmp_spec *spec, char *const *envp, struct xmp_plan *plan,
                       struct xmp_error *err)
{
    const char *rank_vars[] = {"SLURM_NODEID", "JOB_COMPLETION_INDEX", "NODE_RANK"};
    const char *v;
    long n = 1, r = 0;
    const char *rank_from = "distributed.node_rank";

    if (spec->nnodes >= 1) {
        n = spec->nnodes;
    } else if ((v = xmp_plan_getenv(envp, "SLURM_NNODES")) != NULL) {
        if (env_int("SLURM_NNODES", v, &n, err) < 0)
            return xmp_error_wrap(err, "distributed.nnodes");
        if (n < 1)
            return xmp_error_set(err, 0, "distributed.nnodes: SLURM_NNODES=\"%s\" must be >= 1", v);
    }
    if (spec->node_rank >= 0) {
        r = spec->node_rank;
    } else {
        rank_from = "distributed.node_rank auto (no SLURM_NODEID, JOB_COMPLETION_INDEX, NODE_RANK)";
        for (size_t i = 0; i < sizeof(rank_vars) / sizeof(rank_vars[0]); i++) {
            if ((v = xmp_plan_getenv(envp, rank_vars[i])) == NULL)
                continue;
            if (env_int(rank_vars[i], v, &r, err) < 0)
                return xmp_error_wrap(err, "distributed.node_rank");
            rank_from = rank_vars[i];
            break;
        }
    }
    if (r >= n)
        return xmp_error_set(err, 0, "node rank %ld (from %s) is not below nnodes %ld", r,
                             rank_from, n);
    plan->nnodes = (int)n;
    plan->node_rank = (int)r;
    plan->master_port = (int)spec->master_port;

    if (spec->master_addr != NULL && spec->master_addr[0] != '\0' &&
        strcmp(spec->master_addr, "auto") != 0) {
        plan->master_addr = strdup(spec->master_addr);
    } else if ((v = xmp_plan_getenv(envp, "SLURM_JOB_NODELIST")) != NULL ||
               (v = xmp_plan_getenv(envp, "SLURM_NODELIST")) != NULL) {
        char **hosts = NULL;
        if (xmp_hostlist_expand(v, &hosts, err) < 0)
            return xmp_error_wrap(err, "distributed.master_addr auto: SLURM_JOB_NODELIST");
        plan->master_addr = strdup(hosts[0]);
        xmp_strv_free(hosts);
    } else if (n == 1) {
        plan->master_addr = strdup("127.0.0.1");
    } else if ((v = xmp_plan_getenv(envp, "MASTER_ADDR")) != NULL && v[0] != '\0') {
        /* Kubeflow's PyTorchJob, or a launcher script, names the master this way. */
        plan->master_addr = strdup(v);
    } else {
        /* 127.0.0.1 would leave every node waiting for the others in its own rendezvous
         * until the job's timeout (gloo's default is 30 minutes). */
        return xmp_error_set(err, 0,
                             "distributed.nnodes is %ld and master_addr is auto, but no "
                             "SLURM_JOB_NODELIST or MASTER_ADDR names the master: set "
                             "distributed.master_addr to node 0's address on every node",
                             n);
    }
    if (plan->master_addr == NULL)
        return xmp_error_set(err, ENOMEM, "strdup");
    return 0;
}

/* xmprun is one per node: it starts every worker of its node itself. `srun -n2` on one node
 * starts two of them, which would both plan ranks 0..n-1 with the same cpusets and devices. A
 * batch script has SLURM_TASKS_PER_NODE and SLURM_LOCALID=0 but no step, and runs xmprun once. */
int
xmp_plan_check_one_per_node(char *const *envp, struct xmp_error *err)
{
    const char *step = xmp_plan_getenv(envp, "SLURM_STEP_TASKS_PER_NODE");
    const char *local = xmp_plan_getenv(envp, "SLURM_LOCALID");
    const char *name = "SLURM_STEP_TASKS_PER_NODE";
    long max = -1, id = 0;
    bool uniform;

    if (step == NULL && xmp_plan_getenv(envp, "SLURM_STEP_ID") != NULL) {
        /* An older Slurm: the step's own --ntasks-per-node, when it was given. */
        name = "SLURM_NTASKS_PER_NODE";
        step = xmp_plan_getenv(envp, name);
    }
    if (step != NULL)
        xmp_slurm_count_at(step, 0, &max, &uniform);
    if (local != NULL && xmp_plan_all_digits(local) && (id = strtol(local, NULL, 10)) > 0 &&
        max <= 1) {
        name = "SLURM_LOCALID";
        step = local;
        max = id + 1;
    }
    if (max <= 1)
        return 0;
    return xmp_error_set(err, 0,
                         "Slurm started %s%ld tasks of this step on one node (%s=%s); xmprun "
                         "runs once per node and starts its workers itself: use `srun "
                         "--ntasks-per-node=1` (workers per node: the spec's workers, or -n)",
                         name[6] == 'L' ? "at least " : "", max, name, step);
}

static void add_warning(struct xmp_plan *plan, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
add_warning(struct xmp_plan *plan, const char *fmt, ...)
{
    size_t n = 0;
    char *text = NULL, **grown;
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = vasprintf(&text, fmt, ap);
    va_end(ap);
    if (rc < 0)
        return;
    while (plan->warnings != NULL && plan->warnings[n] != NULL)
        n++;
    grown = realloc(plan->warnings, (n + 2) * sizeof(*grown));
    if (grown == NULL) {
        free(text);
        return;
    }
    grown[n] = text;
    grown[n + 1] = NULL;
    plan->warnings = grown;
}

/* xmprun cannot see the other nodes, but Slurm's allocation says what this node was given. A
 * node that plans a different number of workers than the others gives its workers another
 * WORLD_SIZE, and the job hangs in its rendezvous until the timeout. */
void
xmp_plan_check_allocation(const struct xmp_spec *spec, char *const *envp, size_t per,
                          struct xmp_plan *plan)
{
    const char *v;
    long max, count, node = plan->node_rank;
    bool uniform;
    size_t n = plan->n_workers;
    /* On one node a mismatch wastes or oversubscribes the allocation; across nodes it hangs. */
    const char *same = plan->nnodes > 1 ? "; every node must plan the same number of workers, or "
                                          "WORLD_SIZE differs between nodes and the job hangs"
                                        : "";

    if ((v = xmp_plan_getenv(envp, "SLURM_GPUS_ON_NODE")) != NULL && xmp_plan_all_digits(v) &&
        plan->kind == XMP_DEVICE_CUDA && (long)(n * per) != strtol(v, NULL, 10))
        add_warning(plan,
                    "this node plans %zu worker%s x %zu GPU%s, but Slurm allocated %s GPUs on "
                    "it (SLURM_GPUS_ON_NODE=%s)%s",
                    n, n == 1 ? "" : "s", per, per == 1 ? "" : "s", v, v, same);
    if ((v = xmp_plan_getenv(envp, "SLURM_NTASKS_PER_NODE")) != NULL && xmp_plan_all_digits(v) &&
        strtol(v, NULL, 10) > 1 && (long)n != strtol(v, NULL, 10))
        add_warning(plan,
                    "this node plans %zu worker%s, but the Slurm job asked for %s tasks per node "
                    "(SLURM_NTASKS_PER_NODE=%s)%s",
                    n, n == 1 ? "" : "s", v, v, same);
    if (plan->kind != XMP_DEVICE_CPU || spec->workers > 0 ||
        (v = xmp_plan_getenv(envp, "SLURM_JOB_CPUS_PER_NODE")) == NULL)
        return;
    count = xmp_slurm_count_at(v, (size_t)node, &max, &uniform);
    if (count < 0)
        return;
    if (!uniform && plan->nnodes > 1)
        add_warning(plan,
                    "workers: auto starts one worker per CPU, and Slurm gave the nodes different "
                    "CPU counts (SLURM_JOB_CPUS_PER_NODE=%s)%s: set workers",
                    v, same);
    else if (count != (long)n)
        add_warning(plan,
                    "workers: auto plans %zu workers (one per CPU xmprun may run on), but Slurm "
                    "allocated %ld CPUs on this node (SLURM_JOB_CPUS_PER_NODE=%s)%s: set "
                    "workers",
                    n, count, v, same);
}

/* TORCHELASTIC_RUN_ID: the same on every worker of every node, as torchrun's --rdzv-id. */
int
xmp_plan_resolve_run_id(const struct xmp_spec *spec, char *const *envp, struct xmp_plan *plan,
                        struct xmp_error *err)
{
    const char *v = spec->run_id;

    if (v == NULL || v[0] == '\0')
        v = xmp_plan_getenv(envp, "SLURM_JOB_ID");
    if (v == NULL || v[0] == '\0')
        v = plan->job_name;
    plan->run_id = strdup(v);
    return plan->run_id != NULL ? 0 : xmp_error_set(err, ENOMEM, "strdup");
}

void
xmp_plan_check_shm(char *const *envp, struct xmp_plan *plan)
{
    const char *per = xmp_plan_getenv(envp, "XMPRUN_SHM_PER_WORKER");
    int64_t each = 256LL << 20, size;
    char msg[128];
    struct statvfs fs;

    if (plan->kind != XMP_DEVICE_CUDA || plan->local_world_size < 1)
        return;
    if (per != NULL && xmp_parse_memory(per, &each, msg, sizeof(msg)) < 0) {
        add_warning(plan, "XMPRUN_SHM_PER_WORKER=%s: %s; using 256Mi", per, msg);
        each = 256LL << 20;
    }
    if (each <= 0 || statvfs("/dev/shm", &fs) < 0)
        return;
    size = (int64_t)fs.f_blocks * (int64_t)fs.f_frsize;
    if (size >= each * plan->local_world_size)
        return;
    add_warning(plan,
                "/dev/shm holds %lld MiB, less than the %lld MiB that %d cuda workers need (%lld "
                "MiB each, XMPRUN_SHM_PER_WORKER): NCCL's shared-memory transport and PyTorch's "
                "DataLoader die of SIGBUS when it is full; give the container a larger /dev/shm "
                "(docker/podman run --shm-size, or a Kubernetes emptyDir with medium: Memory at "
                "/dev/shm)",
                (long long)(size >> 20), (long long)((each * plan->local_world_size) >> 20),
                plan->local_world_size, (long long)(each >> 20));
}
