/* Worker environments (SPEC.md section 3): the rank/world variables torchrun sets, the device
 * variables CUDA and torch_xla read, OMP_NUM_THREADS, and the spec's env laid over them; plus the
 * full envp a worker starts with. */
#define _GNU_SOURCE
#include "runner/plan/plan.h"

#include "isolate/array.h"
#include "isolate/cleanup.h"
#include "runner/plan/hostlist.h"
#include "runner/plan/plan_internal.h"
#include "runner/util/strv.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* torch_xla's default first TPU client port (configure_topology's base_port). */
#define TPU_BASE_PORT 8476

struct env_builder {
    struct xmp_env_var *v;
    size_t n;
    size_t cap;
    bool failed;
};

static void
env_set(struct env_builder *b, const char *name, const char *value)
{
    char *n = NULL, *v = NULL;

    if (b->failed)
        return;
    for (size_t i = 0; i < b->n; i++) {
        if (strcmp(b->v[i].name, name) != 0)
            continue;
        if ((v = strdup(value)) == NULL) {
            b->failed = true;
            return;
        }
        free(b->v[i].value);
        b->v[i].value = v;
        return;
    }
    if (!xmp_array_reserve(b->v, b->cap, b->n + 1, 32)) {
        b->failed = true;
        return;
    }
    n = strdup(name);
    v = strdup(value);
    if (n == NULL || v == NULL) {
        free(n);
        free(v);
        b->failed = true;
        return;
    }
    b->v[b->n].name = n;
    b->v[b->n].value = v;
    b->n++;
}

static void env_setf(struct env_builder *b, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
env_setf(struct env_builder *b, const char *name, const char *fmt, ...)
{
    cleanup_free char *value = NULL;
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = vasprintf(&value, fmt, ap);
    va_end(ap);
    if (rc < 0) {
        value = NULL;
        b->failed = true;
        return;
    }
    env_set(b, name, value);
}

static void
env_builder_free(struct env_builder *b)
{
    for (size_t i = 0; i < b->n; i++) {
        free(b->v[i].name);
        free(b->v[i].value);
    }
    free(b->v);
}

static int
compare_env(const void *a, const void *b)
{
    const struct xmp_env_var *x = a, *y = b;
    return strcmp(x->name, y->name);
}

static const char *
spec_env(const struct xmp_spec *spec, const char *name)
{
    for (size_t i = 0; i < spec->env_len; i++)
        if (strcmp(spec->env[i].name, name) == 0)
            return spec->env[i].value;
    return NULL;
}

/* The user set name: in the spec's env, or in the environment the workers inherit. */
static bool
user_set(const struct xmp_spec *spec, char *const *envp, const char *name)
{
    return spec_env(spec, name) != NULL ||
           (spec->inherit_env && xmp_plan_getenv(envp, name) != NULL);
}

/* ---- TPU topology ------------------------------------------------------------------------- */

struct mesh {
    int x, y, z;
};

/* The chip grid of n chips on one host, as TPU metadata gives CHIPS_PER_HOST_BOUNDS (4 chips:
 * 2,2,1; 8 chips: 2,4,1), and of a process's share of them (libtpu's examples: 2 chips 1,2,1). */
static bool
chip_mesh(size_t n, struct mesh *m)
{
    switch (n) {
    case 1:
        *m = (struct mesh){1, 1, 1};
        return true;
    case 2:
        *m = (struct mesh){1, 2, 1};
        return true;
    case 4:
        *m = (struct mesh){2, 2, 1};
        return true;
    case 8:
        *m = (struct mesh){2, 4, 1};
        return true;
    default:
        return false;
    }
}

static int
parse_mesh(const char *name, const char *text, struct mesh *m, struct xmp_error *err)
{
    char tail;

    if (sscanf(text, "%d,%d,%d%c", &m->x, &m->y, &m->z, &tail) != 3 || m->x < 1 || m->y < 1 ||
        m->z < 1)
        return xmp_error_set(err, 0, "%s=\"%s\" is not a mesh shape like 1,1,2", name, text);
    return 0;
}

/* The TPU hosts of the slice, in worker-id order: "localhost" alone for one host (as torch_xla's
 * get_worker_ips), else TPU_WORKER_HOSTNAMES or the Slurm node list. */
static int
tpu_hosts(const struct xmp_plan *plan, char *const *envp, char ***out, struct xmp_error *err)
{
    const char *v;
    char **hosts = NULL;
    size_t n = 0;

    if (plan->nnodes == 1) {
        hosts = calloc(2, sizeof(*hosts));
        if (hosts == NULL || (hosts[0] = strdup("localhost")) == NULL) {
            free(hosts);
            return xmp_error_set(err, ENOMEM, "calloc");
        }
        *out = hosts;
        return 0;
    }
    if ((v = xmp_plan_getenv(envp, "TPU_WORKER_HOSTNAMES")) != NULL ||
        (v = xmp_plan_getenv(envp, "SLURM_JOB_NODELIST")) != NULL ||
        (v = xmp_plan_getenv(envp, "SLURM_NODELIST")) != NULL) {
        if (xmp_hostlist_expand(v, &hosts, err) < 0)
            return xmp_error_wrap(err, "TPU host list");
        while (hosts[n] != NULL)
            n++;
        if (n >= (size_t)plan->nnodes) {
            *out = hosts;
            return 0;
        }
        xmp_strv_free(hosts);
    }
    return xmp_error_set(err, 0,
                         "kind tpu with %d nodes: cannot tell the other TPU hosts' addresses; set "
                         "TPU_WORKER_HOSTNAMES=host0,host1,... (in worker-id order)",
                         plan->nnodes);
}

/* The values torch_xla's configure_topology (torch_xla/_internal/tpu.py) computes for
 * xmp.spawn's processes: TPU_CHIPS_PER_PROCESS_BOUNDS=1,1,1; TPU_PROCESS_BOUNDS = host bounds x
 * chips per host (v4-8: 1,1,1 x 2,2,1 = 2,2,1); CLOUD_TPU_TASK_ID = worker_id * local_world_size +
 * local_rank; TPU_PROCESS_ADDRESSES = every host's ports base..base+local_world_size-1;
 * TPU_VISIBLE_CHIPS = local rank; TPU_PROCESS_PORT = base + local rank. With per_worker > 1 the
 * chip mesh of one process replaces 1,1,1 and the process mesh shrinks to match. */
static int
tpu_env(const struct xmp_plan *plan, char *const *envp, const struct xmp_plan_sel *sel, size_t per,
        const struct xmp_plan_worker *w, struct env_builder *b, struct xmp_error *err)
{
    struct mesh host, proc, hosts = {1, 1, plan->nnodes};
    const char *hb = xmp_plan_getenv(envp, "TPU_HOST_BOUNDS");
    size_t lws = (size_t)plan->local_world_size;
    char **addrs = NULL;
    cleanup_free char *list = NULL;
    size_t len = 0;

    if (!chip_mesh(lws * per, &host) || !chip_mesh(per, &proc))
        return xmp_error_set(err, 0,
                             "kind tpu: %zu workers x %zu chips each do not form a TPU chip mesh "
                             "(use 1, 2, 4 or 8 chips per host and per_worker 1, 2, 4 or 8)",
                             lws, per);
    if (hb != NULL && parse_mesh("TPU_HOST_BOUNDS", hb, &hosts, err) < 0)
        return -1;
    if (tpu_hosts(plan, envp, &addrs, err) < 0)
        return -1;
    for (size_t h = 0; h < (size_t)plan->nnodes; h++) {
        for (size_t r = 0; r < lws; r++) {
            char *grown = NULL;
            if (asprintf(&grown, "%s%s%s:%zu", list ? list : "", len ? "," : "", addrs[h],
                         TPU_BASE_PORT + r) < 0) {
                xmp_strv_free(addrs);
                return xmp_error_set(err, ENOMEM, "asprintf");
            }
            free(list);
            list = grown;
            len = strlen(list);
        }
    }
    xmp_strv_free(addrs);

    env_set(b, "PJRT_DEVICE", "TPU");
    {
        char chips[256] = "";
        size_t used = 0;
        for (size_t d = 0; d < per; d++)
            used += (size_t)snprintf(chips + used, sizeof(chips) - used, "%s%s", d ? "," : "",
                                     sel[(size_t)w->local_rank * per + d].id);
        env_set(b, "TPU_VISIBLE_CHIPS", chips);
    }
    env_setf(b, "TPU_CHIPS_PER_PROCESS_BOUNDS", "%d,%d,%d", proc.x, proc.y, proc.z);
    env_setf(b, "TPU_PROCESS_BOUNDS", "%d,%d,%d", hosts.x * host.x / proc.x,
             hosts.y * host.y / proc.y, hosts.z * host.z / proc.z);
    env_set(b, "TPU_PROCESS_ADDRESSES", list);
    env_setf(b, "TPU_PROCESS_PORT", "%d", TPU_BASE_PORT + w->local_rank);
    env_setf(b, "CLOUD_TPU_TASK_ID", "%d",
             plan->node_rank * plan->local_world_size + w->local_rank);
    return 0;
}

/* ---- one worker ----------------------------------------------------------------------------- */

/* CPUs in the cpuset, or the quota rounded up when it is smaller; without a cpuset, the worker's
 * even share of the allowed CPUs, so that N workers do not start N x ncpus threads. */
static long
omp_threads(const struct xmp_plan *plan, const struct xmp_host *host,
            const struct xmp_plan_worker *w)
{
    long n = w->limits.has_cpus
                 ? CPU_COUNT(&w->limits.cpus)
                 : host->ncpus / (plan->local_world_size > 0 ? plan->local_world_size : 1);

    if (w->limits.cpus_milli > 0) {
        long quota = (long)((w->limits.cpus_milli + 999) / 1000);
        if (quota < n)
            n = quota;
    }
    return n < 1 ? 1 : n;
}

int
xmp_plan_worker_env(const struct xmp_plan *plan, const struct xmp_host *host, char *const *envp,
                    const struct xmp_plan_sel *sel, size_t per, struct xmp_plan_worker *w,
                    struct xmp_error *err)
{
    const struct xmp_spec *spec = plan->spec;
    struct env_builder b = {0};
    const char *efile;

    switch (plan->kind) {
    case XMP_DEVICE_CUDA: {
        char ids[1024] = "";
        size_t used = 0;
        for (size_t d = 0; d < per && used < sizeof(ids); d++)
            used += (size_t)snprintf(ids + used, sizeof(ids) - used, "%s%s", d ? "," : "",
                                     sel[(size_t)w->local_rank * per + d].id);
        env_set(&b, "CUDA_VISIBLE_DEVICES", ids);
        if (!user_set(spec, envp, "CUDA_DEVICE_ORDER"))
            env_set(&b, "CUDA_DEVICE_ORDER", "PCI_BUS_ID");
        break;
    }
    case XMP_DEVICE_TPU:
        if (tpu_env(plan, envp, sel, per, w, &b, err) < 0) {
            env_builder_free(&b);
            return -1;
        }
        break;
    case XMP_DEVICE_CPU:
    case XMP_DEVICE_AUTO:
        /* Hide accelerators: an empty CUDA_VISIBLE_DEVICES makes CUDA see no GPU, and torch_xla
         * picks the CPU client with PJRT_DEVICE=CPU. */
        if (host->n_gpus > 0)
            env_set(&b, "CUDA_VISIBLE_DEVICES", "");
        if (host->n_tpus > 0)
            env_set(&b, "PJRT_DEVICE", "CPU");
        break;
    }
    /* torchelastic's variables with torchrun's meanings (one role, "default", spanning the job),
     * which frameworks read (Lightning detects torchelastic by TORCHELASTIC_RUN_ID); the spec may
     * set them. Not TORCHELASTIC_USE_AGENT_STORE: there is no agent store at MASTER_PORT. */
    env_set(&b, "TORCHELASTIC_RUN_ID", plan->run_id);
    env_set(&b, "TORCHELASTIC_RESTART_COUNT", "0");
    env_setf(&b, "TORCHELASTIC_MAX_RESTARTS", "%ld", spec->restarts);
    env_setf(&b, "ROLE_RANK", "%d", w->rank);
    env_setf(&b, "ROLE_WORLD_SIZE", "%d", plan->world_size);
    env_set(&b, "ROLE_NAME", "default");
    /* NCCL's watchdog then aborts a collective whose peer died instead of hanging in it (the
     * TORCH_ name since torch 2.2, the old one before). */
    if (!user_set(spec, envp, "TORCH_NCCL_ASYNC_ERROR_HANDLING"))
        env_set(&b, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
    if (!user_set(spec, envp, "NCCL_ASYNC_ERROR_HANDLING"))
        env_set(&b, "NCCL_ASYNC_ERROR_HANDLING", "1");
    if (!user_set(spec, envp, "OMP_NUM_THREADS"))
        env_setf(&b, "OMP_NUM_THREADS", "%ld", omp_threads(plan, host, w));
    env_set(&b, "TORCHELASTIC_ERROR_FILE", w->error_file);

    for (size_t i = 0; i < spec->env_len; i++)
        env_set(&b, spec->env[i].name, spec->env[i].value);

    env_setf(&b, "RANK", "%d", w->rank);
    env_setf(&b, "LOCAL_RANK", "%d", w->local_rank);
    env_setf(&b, "WORLD_SIZE", "%d", plan->world_size);
    env_setf(&b, "LOCAL_WORLD_SIZE", "%d", plan->local_world_size);
    env_setf(&b, "GROUP_RANK", "%d", plan->node_rank);
    env_setf(&b, "NODE_RANK", "%d", plan->node_rank);
    env_setf(&b, "GROUP_WORLD_SIZE", "%d", plan->nnodes);
    env_set(&b, "MASTER_ADDR", plan->master_addr);
    env_setf(&b, "MASTER_PORT", "%d", plan->master_port);
    env_setf(&b, "PJRT_LOCAL_PROCESS_RANK", "%d", w->local_rank);
    env_setf(&b, "PJRT_LOCAL_PROCESS_COUNT", "%d", plan->local_world_size);
    env_set(&b, "XMPRUN_JOB_ID", plan->job_id);
    env_set(&b, "XMPRUN_JOB_NAME", plan->job_name);
    env_set(&b, "XMPRUN_RESTART_COUNT", "0");
    if (b.failed) {
        env_builder_free(&b);
        return xmp_error_set(err, ENOMEM, "worker environment");
    }
    /* A spec that sets TORCHELASTIC_ERROR_FILE itself decides where the report looks. */
    efile = spec_env(spec, "TORCHELASTIC_ERROR_FILE");
    if (efile != NULL) {
        char *copy = strdup(efile);
        if (copy == NULL) {
            env_builder_free(&b);
            return xmp_error_set(err, ENOMEM, "strdup");
        }
        free(w->error_file);
        w->error_file = copy;
    }
    qsort(b.v, b.n, sizeof(*b.v), compare_env);
    w->env = b.v;
    w->env_len = b.n;
    return 0;
}

/* ---- the worker's full envp ------------------------------------------------------------ */

static bool
overridden(const struct xmp_plan_worker *w, const char *entry)
{
    size_t len = strcspn(entry, "=");

    for (size_t i = 0; i < w->env_len; i++)
        if (strlen(w->env[i].name) == len && strncmp(w->env[i].name, entry, len) == 0)
            return true;
    return false;
}

char **
xmp_plan_worker_environ(const struct xmp_plan *plan, const struct xmp_plan_worker *w,
                        char *const *envp)
{
    size_t n_inh = 0, n = 0;
    char **out;

    if (plan->spec->inherit_env)
        while (envp != NULL && envp[n_inh] != NULL)
            n_inh++;
    out = calloc(n_inh + w->env_len + 1, sizeof(*out));
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < n_inh; i++) {
        if (strchr(envp[i], '=') == NULL || overridden(w, envp[i]))
            continue;
        if ((out[n++] = strdup(envp[i])) == NULL)
            goto fail;
    }
    for (size_t i = 0; i < w->env_len; i++)
        if (asprintf(&out[n++], "%s=%s", w->env[i].name, w->env[i].value) < 0) {
            out[--n] = NULL;
            goto fail;
        }
    return out;
fail:
    xmp_strv_free(out);
    return NULL;
}
